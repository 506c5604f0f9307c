"""Key paths: each leaf's path from the root, with JAX's key classes and keystr text."""

import collections
import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trees import Point, tree_strategy

import funcgrad as fg
import funcgrad.tree_util as tu

scalars = st.integers(-1000, 1000)
trees = tree_strategy(scalars)


def ref_paths(tree, path=()):
    """The reference: a recursive walk naming each step the way the key classes do."""
    if tree is None:
        return []
    if isinstance(tree, dict):
        return [p for k in sorted(tree) for p in ref_paths(tree[k], (*path, tu.DictKey(k)))]
    if isinstance(tree, Point):
        return [
            p for f in Point._fields for p in ref_paths(getattr(tree, f), (*path, tu.GetAttrKey(f)))
        ]
    if isinstance(tree, (list, tuple)):
        return [p for i, c in enumerate(tree) for p in ref_paths(c, (*path, tu.SequenceKey(i)))]
    return [(path, tree)]


@given(trees)
def test_paths_match_a_recursive_walk(tree):
    pairs, treedef = tu.tree_flatten_with_path(tree)
    assert pairs == ref_paths(tree)
    assert treedef == tu.tree_structure(tree)
    assert [leaf for _, leaf in pairs] == tu.tree_leaves(tree)
    assert tu.tree_leaves_with_path(tree) == pairs


@given(trees)
def test_map_with_path_passes_each_leafs_path(tree):
    got = tu.tree_map_with_path(lambda p, x, y: (tu.keystr(p), x, y), tree, tree)
    want = [(tu.keystr(p), x, x) for p, x in ref_paths(tree)]
    assert (
        tu.tree_leaves(
            got, is_leaf=lambda n: isinstance(n, tuple) and len(n) == 3 and isinstance(n[0], str)
        )
        == want
    )


def test_keystr_text():
    tree = {"params": [Point(x=1, y=2)], "step": 3}
    assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(tree)] == [
        "['params'][0].x",
        "['params'][0].y",
        "['step']",
    ]
    assert [
        tu.keystr(p, simple=True, separator="/") for p, _ in tu.tree_leaves_with_path(tree)
    ] == ["params/0/x", "params/0/y", "step"]


def test_ordered_and_default_dicts_keep_their_key_order():
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    dd = collections.defaultdict(list, {"b": 1, "a": 2})
    assert [p for p, _ in tu.tree_leaves_with_path(od)] == [(tu.DictKey("b"),), (tu.DictKey("a"),)]
    assert [p for p, _ in tu.tree_leaves_with_path(dd)] == [(tu.DictKey("a"),), (tu.DictKey("b"),)]


def test_is_leaf_stops_the_path():
    tree = {"a": (1, 2), "b": [3]}
    pairs = tu.tree_leaves_with_path(tree, is_leaf=lambda n: isinstance(n, tuple))
    assert pairs == [((tu.DictKey("a"),), (1, 2)), ((tu.DictKey("b"), tu.SequenceKey(0)), 3)]


class Keyless:
    def __init__(self, a, b):
        self.a, self.b = a, b


tu.register_pytree_node(Keyless, lambda n: ((n.a, n.b), None), lambda _, c: Keyless(*c))


class Keyed:
    def __init__(self, w, b):
        self.w, self.b = w, b


tu.register_pytree_with_keys(
    Keyed,
    lambda n: (((tu.GetAttrKey("w"), n.w), (tu.GetAttrKey("b"), n.b)), "aux"),
    lambda aux, c: Keyed(*c),
)


@dataclasses.dataclass
class Layer:
    weight: object
    name: str = dataclasses.field(metadata=dict(static=True), default="dense")


tu.register_dataclass(Layer)


def test_custom_nodes_without_keys_get_flattened_indices():
    pairs = tu.tree_leaves_with_path([Keyless(1, 2)])
    assert pairs == [
        ((tu.SequenceKey(0), tu.FlattenedIndexKey(0)), 1),
        ((tu.SequenceKey(0), tu.FlattenedIndexKey(1)), 2),
    ]
    assert tu.keystr(pairs[1][0]) == "[0][<flat index 1>]"


def test_custom_nodes_with_keys_and_dataclasses():
    pairs = tu.tree_leaves_with_path({"k": Keyed(1, 2), "l": Layer(3)})
    assert [tu.keystr(p) for p, _ in pairs] == ["['k'].w", "['k'].b", "['l'].weight"]
    # The keyless flatten is derived from the keyed one and rebuilds the node.
    leaves, treedef = tu.tree_flatten(Keyed(1, 2))
    assert leaves == [1, 2]
    rebuilt = tu.tree_unflatten(treedef, [5, 6])
    assert (rebuilt.w, rebuilt.b) == (5, 6)


def test_path_named_gradients():
    params = {"w": np.array([1.0, 2.0]), "b": np.array(0.5)}
    grads = fg.grad(lambda p: fg.numpy.sum(p["w"] ** 2) + p["b"])(params)
    named = {tu.keystr(p): np.asarray(g) for p, g in tu.tree_leaves_with_path(grads)}
    np.testing.assert_allclose(named["['w']"], [2.0, 4.0])
    np.testing.assert_allclose(named["['b']"], 1.0)


def test_map_with_path_rejects_a_different_structure():
    with pytest.raises(ValueError, match="tree_map_with_path: .* as a prefix"):
        tu.tree_map_with_path(lambda p, x, y: x, [1, 2], [1])
