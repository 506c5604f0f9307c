import collections
import dataclasses
import functools
import math
import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from trees import Point, ref_map, tree_strategy

import funcgrad as fg
import funcgrad.tree_util as tu

scalars = st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False)
trees = tree_strategy(scalars)


# --- hand-written references ------------------------------------------------------------------


def pair(a, b):
    return (a, b)


def shape(tree):
    """Container shape with types and keys kept and leaves erased."""
    if tree is None:
        return ("None",)
    if isinstance(tree, dict):
        return (dict, tuple((k, shape(tree[k])) for k in sorted(tree)))
    if isinstance(tree, (list, tuple)):
        return (type(tree), tuple(shape(c) for c in tree))
    return "*"


def assert_identical(actual, expected):
    """Same container types, dict keys in sorted order, and the very same leaf objects."""
    assert type(actual) is type(expected)
    if isinstance(expected, dict):
        assert list(actual) == sorted(expected)
        for k in expected:
            assert_identical(actual[k], expected[k])
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_identical(a, e)
    else:
        assert actual is expected


# --- properties ---------------------------------------------------------------------------------


@given(trees)
def test_flatten_unflatten_round_trip(tree):
    leaves, treedef = tu.tree_flatten(tree)
    assert leaves == tu.tree_leaves(tree)
    assert treedef.num_leaves == len(leaves)
    assert_identical(tu.tree_unflatten(treedef, leaves), tree)


@given(trees, st.data())
def test_tree_map_two_trees_matches_reference(tree, data):
    other = ref_map(lambda _: data.draw(scalars), tree)
    assert tu.tree_map(pair, tree, other) == ref_map(pair, tree, other)


@given(trees, trees)
def test_structure_equal_iff_same_shape(a, b):
    assert (tu.tree_structure(a) == tu.tree_structure(b)) == (shape(a) == shape(b))


@given(trees, trees)
def test_keyed_leaves_agree_with_flatten(a, b):
    """Same leaves as tree_leaves, and keys equal exactly when structure and leaf keys are."""
    key_a, leaves_a = tu.keyed_leaves(a, repr)
    key_b, _ = tu.keyed_leaves(b, repr)
    assert leaves_a == tu.tree_leaves(a)
    same = tu.tree_structure(a) == tu.tree_structure(b) and list(
        map(repr, tu.tree_leaves(a))
    ) == list(map(repr, tu.tree_leaves(b)))
    assert (key_a == key_b) == same


def test_keyed_leaves_give_up_on_rejected_leaves_and_unhashable_aux():
    assert tu.keyed_leaves([1, (2, 3)], lambda x: None if x == 3 else x) is None

    class Box:
        def __init__(self, value):
            self.value = value

    tu.register_pytree_node(Box, lambda b: ([b.value], ["unhashable"]), lambda aux, c: Box(*c))
    assert tu.keyed_leaves({"box": Box(1)}, repr) is None


@given(trees, st.data())
def test_same_shape_gives_equal_hashes(tree, data):
    other = ref_map(lambda _: data.draw(scalars), tree)
    td, other_td = tu.tree_structure(tree), tu.tree_structure(other)
    assert td == other_td
    assert hash(td) == hash(other_td)
    assert len({td, other_td}) == 1


@given(trees)
def test_structure_queries(tree):
    treedef = tu.tree_structure(tree)
    children = tu.treedef_children(treedef)
    assert treedef.num_nodes == 1 + sum(c.num_nodes for c in children)
    assert tu.treedef_is_leaf(treedef) == (treedef.num_nodes == 1)
    assert tu.tree_unflatten(treedef, [0] * treedef.num_leaves) == ref_map(lambda _: 0, tree)


# --- node types ---------------------------------------------------------------------------------


def test_none_is_an_empty_node_not_a_leaf():
    assert tu.tree_leaves([None, 1]) == [1]
    assert tu.tree_structure(None).num_leaves == 0
    assert not tu.all_leaves([None])
    assert tu.all_leaves([1, "a", 2.0])
    assert not tu.all_leaves([1, (2,)])


def test_repr():
    treedef = tu.tree_structure((1, {"b": [2, 3], "a": 4}))
    assert repr(treedef) == "PyTreeDef((*, {'a': *, 'b': [*, *]}))"
    assert repr(tu.tree_structure((1,))) == "PyTreeDef((*,))"
    assert repr(tu.tree_structure(Point(1, None))) == "PyTreeDef(Point(x=*, y=None))"


def test_dict_children_sorted_and_rebuilt_sorted():
    leaves, treedef = tu.tree_flatten({"b": 1, "a": 2})
    assert leaves == [2, 1]
    assert list(tu.tree_unflatten(treedef, leaves)) == ["a", "b"]


def test_ordered_dict_keeps_insertion_order():
    tree = collections.OrderedDict([("b", 1), ("a", 2)])
    leaves, treedef = tu.tree_flatten(tree)
    assert leaves == [1, 2]
    rebuilt = tu.tree_unflatten(treedef, leaves)
    assert type(rebuilt) is collections.OrderedDict and list(rebuilt) == ["b", "a"]
    assert treedef != tu.tree_structure(collections.OrderedDict([("a", 1), ("b", 2)]))
    assert treedef != tu.tree_structure({"b": 1, "a": 2})


def test_defaultdict_keeps_default_factory():
    tree = collections.defaultdict(list, {"b": 1, "a": 2})
    leaves, treedef = tu.tree_flatten(tree)
    assert leaves == [2, 1]
    rebuilt = tu.tree_map(lambda x: x * 10, tree)
    assert type(rebuilt) is collections.defaultdict and rebuilt.default_factory is list
    assert dict(rebuilt) == {"a": 20, "b": 10}
    assert treedef != tu.tree_structure(collections.defaultdict(set, {"b": 1, "a": 2}))


def test_subclasses_of_containers_are_leaves():
    class MyDict(dict):
        pass

    assert tu.tree_leaves([MyDict(a=1)]) == [MyDict(a=1)]


class Box:
    def __init__(self, value, label):
        self.value = value
        self.label = label


tu.register_pytree_node(
    Box, lambda b: ((b.value,), b.label), lambda label, children: Box(children[0], label)
)


def test_registered_custom_node():
    leaves, treedef = tu.tree_flatten([Box((1, 2), "x")])
    assert leaves == [1, 2]
    rebuilt = tu.tree_unflatten(treedef, [3, 4])[0]
    assert isinstance(rebuilt, Box) and rebuilt.value == (3, 4) and rebuilt.label == "x"
    assert treedef != tu.tree_structure([Box((1, 2), "y")])
    assert "CustomNode(Box['x'], [(*, *)])" in repr(treedef)


@tu.register_pytree_node_class
class Pair:
    def __init__(self, first, second, name):
        self.first, self.second, self.name = first, second, name

    def tree_flatten(self):
        return (self.first, self.second), self.name

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, aux)


def test_register_pytree_node_class():
    out = tu.tree_map(operator.add, Pair(1, 2, "p"), Pair(10, 20, "p"))
    assert isinstance(out, Pair) and (out.first, out.second, out.name) == (11, 22, "p")


@tu.register_dataclass
@dataclasses.dataclass
class Params:
    weight: float
    bias: float
    name: str = dataclasses.field(default="layer", metadata=dict(static=True))


@dataclasses.dataclass
class Explicit:
    a: int
    b: int
    tag: str


tu.register_dataclass(Explicit, data_fields=["a", "b"], meta_fields=["tag"])


def test_register_dataclass_decorator_form():
    leaves, treedef = tu.tree_flatten(Params(1.0, 2.0, "dense"))
    assert leaves == [1.0, 2.0]
    assert tu.tree_unflatten(treedef, [3.0, 4.0]) == Params(3.0, 4.0, "dense")
    assert treedef != tu.tree_structure(Params(1.0, 2.0, "other"))


def test_register_dataclass_explicit_fields():
    assert tu.tree_map(lambda x: -x, Explicit(1, 2, "t")) == Explicit(-1, -2, "t")


def test_register_dataclass_rejects_incomplete_fields():
    @dataclasses.dataclass
    class Partly:
        a: int
        b: int

    with pytest.raises(ValueError, match="init fields"):
        tu.register_dataclass(Partly, data_fields=["a"], meta_fields=[])


def test_partial_is_a_pytree_with_static_func():
    def f(a, b, *, c):
        return a + b + c

    p = tu.Partial(f, 1, c=100)
    leaves, treedef = tu.tree_flatten(p)
    assert leaves == [1, 100]
    doubled = tu.tree_map(lambda x: x * 2, p)
    assert isinstance(doubled, tu.Partial) and doubled.func is f
    assert doubled(5) == 2 + 5 + 200
    assert treedef == tu.tree_structure(tu.Partial(f, 7, c=8))


def test_partial_keeps_wrapped_partial_arguments_static():
    inner = functools.partial(lambda a, b, c: (a, b, c), "static")
    p = tu.Partial(inner, 1)
    assert tu.tree_leaves(p) == [1]
    assert p(2) == ("static", 1, 2)


def test_is_leaf_stops_descent():
    tree = [(1, 2), {"a": (3, 4)}]
    leaves = tu.tree_leaves(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [(1, 2), (3, 4)]
    out = tu.tree_map(len, tree, is_leaf=lambda x: isinstance(x, tuple))
    assert out == [2, {"a": 2}]


def test_tree_transpose():
    tree = [(1, "a"), (2, "b"), (3, "c")]
    outer = tu.tree_structure([0, 0, 0])
    inner = tu.tree_structure((0, 0))
    assert tu.tree_transpose(outer, inner, tree) == ([1, 2, 3], ["a", "b", "c"])
    with pytest.raises(TypeError, match="expected structure"):
        tu.tree_transpose(outer, inner, [(1, 2), (3, 4)])


def test_reductions():
    tree = {"a": [1, 2], "b": (3, None)}
    assert tu.tree_reduce(operator.add, tree) == 6
    assert tu.tree_reduce(operator.add, tree, 10) == 16
    assert tu.tree_all([True, (1, None)])
    assert not tu.tree_all([True, (0,)])


def test_unhashable_aux_compares_but_does_not_hash():
    class Holder:
        pass

    tu.register_pytree_node(Holder, lambda h: ((), ["unhashable"]), lambda aux, ch: Holder())
    treedef = tu.tree_structure([Holder()])
    assert treedef == tu.tree_structure([Holder()])
    with pytest.raises(TypeError, match="unhashable"):
        hash(treedef)


# --- errors -------------------------------------------------------------------------------------


def test_unflatten_wrong_leaf_count_names_both_counts():
    treedef = tu.tree_structure((1, 2, 3))
    with pytest.raises(ValueError, match=r"has 3 leaves, but 2 leaves were given"):
        tu.tree_unflatten(treedef, [1, 2])


def test_tree_map_structure_mismatch_names_both_structures():
    both = r"PyTreeDef\(\(\*, \*\)\) does not have the structure PyTreeDef\(\[\*, \*\]\) as"
    with pytest.raises(ValueError, match=both):
        tu.tree_map(operator.add, [1, 2], (1, 2))
    # (a later tree may go on below a leaf of the first: its subtree is what f gets there)
    assert tu.tree_map(lambda x, y: [x, y], [1, 2], [(3,), {"a": 4}]) == [[1, (3,)], [2, {"a": 4}]]
    with pytest.raises(ValueError, match=r"it has \[\*\] where that structure has \[\*, \*\]"):
        tu.tree_map(operator.add, {"a": [1, 2]}, {"a": [1]})


def test_registering_twice_raises():
    class Twice:
        pass

    tu.register_pytree_node(Twice, lambda t: ((), None), lambda aux, ch: Twice())
    with pytest.raises(ValueError, match="already registered"):
        tu.register_pytree_node(Twice, lambda t: ((), None), lambda aux, ch: Twice())
    with pytest.raises(ValueError, match="already registered"):
        tu.register_pytree_node(tuple, lambda t: (t, None), lambda aux, ch: tuple(ch))


# --- one level, broadcast, associative reduce, static nodes ------------------------------------


def ref_children_with_keys(node):
    """The immediate children of a node `trees` draws, with the keys that lead to them."""
    if node is None:
        return []
    if isinstance(node, dict):
        return [(tu.DictKey(k), node[k]) for k in sorted(node)]
    if isinstance(node, Point):
        return [(tu.GetAttrKey(f), getattr(node, f)) for f in Point._fields]
    return [(tu.SequenceKey(i), c) for i, c in enumerate(node)]


def is_node(tree):
    return tree is None or isinstance(tree, (list, tuple, dict))


@given(trees)
def test_flatten_one_level_gives_the_immediate_children(tree):
    if not is_node(tree):
        for flatten in (tu.flatten_one_level, tu.flatten_one_level_with_keys):
            with pytest.raises(ValueError, match="is a leaf, not a pytree node"):
                flatten(tree)
        assert tu.default_registry.flatten_one_level(tree) is None
        return
    want = ref_children_with_keys(tree)
    children, aux = tu.flatten_one_level(tree)
    assert len(children) == len(want)
    for child, (_, expected) in zip(children, want):
        assert child is expected  # whole subtrees, not their leaves
    assert aux == (tuple(sorted(tree)) if isinstance(tree, dict) else None)
    pairs, keyed_aux = tu.flatten_one_level_with_keys(tree)
    assert [k for k, _ in pairs] == [k for k, _ in want] and keyed_aux == aux
    assert all(c is e for (_, c), (_, e) in zip(pairs, want))
    assert tu.default_registry.flatten_one_level(tree) == (children, aux)
    assert tu.default_registry.flatten_one_level_with_keys(tree) == (pairs, aux)


def test_is_tree_node():
    class Registered:
        pass

    tu.register_pytree_node(Registered, lambda r: ((), None), lambda aux, ch: Registered())
    nodes = [list, tuple, dict, type(None), collections.OrderedDict, collections.defaultdict]
    for typ in [*nodes, Point, Registered, tu.Partial]:
        assert tu.is_tree_node(typ) and tu.default_registry.is_node(typ), typ
    for typ in [int, float, str, object, type("MyList", (list,), {})]:
        assert not tu.is_tree_node(typ), typ
    assert not tu.is_tree_node([1, 2])  # a value, not a type


@given(st.lists(trees, max_size=3))
def test_treedef_tuple_is_the_structure_of_a_tuple(elements):
    treedef = tu.treedef_tuple(tu.tree_structure(e) for e in elements)
    assert treedef == tu.tree_structure(tuple(elements))
    assert hash(treedef) == hash(tu.tree_structure(tuple(elements)))
    leaves = tu.tree_leaves(tuple(elements))
    assert_identical(treedef.unflatten(leaves), tuple(elements))
    with pytest.raises(TypeError, match="takes PyTreeDefs, got list"):
        tu.treedef_tuple([[1]])


def ref_fill(value, tree):
    """`tree` with `value` at each leaf (None, a node, keeps none)."""
    return ref_map(lambda _: value, tree)


@given(trees, st.data())
def test_tree_broadcast_fills_each_prefix_leafs_subtree(full, data):
    count = iter(range(10**6))

    def cut(tree):
        """A prefix of `tree`: some subtrees replaced by one fresh leaf each."""
        if not is_node(tree) or data.draw(st.booleans()):
            return f"leaf{next(count)}"
        if isinstance(tree, dict):
            return {k: cut(v) for k, v in tree.items()}
        if isinstance(tree, Point):
            return Point(*map(cut, tree))
        return None if tree is None else type(tree)(map(cut, tree))

    def ref_broadcast(prefix, tree):
        if isinstance(prefix, str):
            return ref_fill(prefix, tree)
        if prefix is None:
            return None
        if isinstance(prefix, dict):
            return {k: ref_broadcast(prefix[k], tree[k]) for k in sorted(prefix)}
        children = [ref_broadcast(p, t) for p, t in zip(prefix, tree)]
        return Point(*children) if isinstance(prefix, Point) else type(prefix)(children)

    prefix = cut(full)
    want = ref_broadcast(prefix, full)
    assert_identical(tu.tree_broadcast(prefix, full), want)
    assert_identical(fg.tree.broadcast(prefix, full), want)


def test_tree_broadcast_errors_and_is_leaf():
    with pytest.raises(ValueError, match=r"tree_broadcast: .* it has \[\*\] where that"):
        tu.tree_broadcast([1, 2], [3])
    # is_leaf applies to the prefix: there the pair is one value filling the subtree.
    got = tu.tree_broadcast([(1, 2)], [[3, 4]], is_leaf=lambda x: isinstance(x, tuple))
    assert got == [[(1, 2), (1, 2)]]


def depth(reduced):
    return 1 + max(depth(reduced[0]), depth(reduced[1])) if isinstance(reduced, tuple) else 0


def in_order(reduced):
    if isinstance(reduced, tuple):
        return [*in_order(reduced[0]), *in_order(reduced[1])]
    return [reduced]


@given(trees)
def test_tree_reduce_associative_is_a_balanced_tree_of_calls(tree):
    leaves = tu.tree_leaves(tree)
    if not leaves:
        with pytest.raises(TypeError, match="the tree has no leaves; pass identity"):
            tu.tree_reduce_associative(pair, tree)
        assert tu.tree_reduce_associative(pair, tree, identity="e") == "e"
        assert fg.tree.reduce_associative(pair, tree, identity="e") == "e"
        return
    reduced = tu.tree_reduce_associative(pair, tree)
    # The nested pairs, read left to right, are the leaves in order; a balanced tree of calls
    # over n leaves is ceil(log2 n) calls deep.
    assert in_order(reduced) == leaves
    assert depth(reduced) == math.ceil(math.log2(len(leaves)))
    assert fg.tree.reduce_associative(pair, tree) == reduced


def test_tree_reduce_associative_grouping_and_is_leaf():
    # The grouping for five leaves: the first half is the two leading ones.
    assert tu.tree_reduce_associative(pair, [1, 2, 3, 4, 5]) == ((1, 2), (3, (4, 5)))
    assert tu.tree_reduce_associative(operator.add, {"a": [1, 2], "b": 3}) == 6
    got = tu.tree_reduce_associative(
        operator.add, [(1, 2), (3, 4)], is_leaf=lambda x: isinstance(x, tuple)
    )
    assert got == (1, 2, 3, 4)


def test_register_static_makes_instances_structure():
    @tu.register_static
    class Mode(str):
        pass

    add, sub = Mode("add"), Mode("sub")
    leaves, treedef = tu.tree_flatten([add, 2.0])
    assert leaves == [2.0]
    assert treedef != tu.tree_structure([sub, 2.0])
    assert treedef == tu.tree_structure([Mode("add"), 1.0])
    assert tu.tree_unflatten(treedef, [5.0]) == [add, 5.0]
    assert tu.tree_leaves_with_path({"m": add, "x": 1}) == [((tu.DictKey("x"),), 1)]
    assert tu.flatten_one_level(add) == ([], add)

    traces = []

    @fg.jit
    def f(x, mode):
        traces.append(mode)
        return x + 1.0 if mode == "add" else x - 1.0

    assert float(f(2.0, add)) == 3.0
    assert float(f(2.0, sub)) == 1.0
    assert float(f(5.0, Mode("add"))) == 6.0  # equal static value: the cached program
    assert traces == ["add", "sub"]


def test_register_static_rejects_unhashable_classes():
    @dataclasses.dataclass
    class Config:  # eq without frozen: __hash__ is None
        size: int

    with pytest.raises(TypeError, match="Config is not hashable"):
        tu.register_static(Config)
    assert not tu.is_tree_node(Config)
    with pytest.raises(TypeError, match="takes a class"):
        tu.register_static(Config(1))


def test_key_entry_covers_the_key_classes():
    for path, _ in tu.tree_leaves_with_path({"a": [Point(1, 2)]}):
        assert all(isinstance(key, tu.KeyEntry) for key in path)
    assert not isinstance([0], tu.KeyEntry)


@given(tree_strategy(st.integers()))
def test_a_tree_structure_pickles(tree):
    import pickle

    treedef = tu.tree_structure(tree)
    loaded = pickle.loads(pickle.dumps(treedef))
    assert loaded == treedef and hash(loaded) == hash(treedef)
    leaves = list(range(treedef.num_leaves))
    assert loaded.unflatten(leaves) == treedef.unflatten(leaves)


def test_loading_a_structure_with_an_unregistered_node_type_names_it():
    class Unregistered:
        pass

    with pytest.raises(TypeError, match="Unregistered: that type is not a registered pytree"):
        tu._treedef_from_pickle(Unregistered, None, ())
