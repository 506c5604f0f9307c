"""funcgrad.tree: JAX's `jax.tree` namespace, the short names of funcgrad.tree_util's functions.

Researchers write `fg.tree.map(f, params)` as they write `jax.tree.map`. These are
`tree_util`'s functions, and a few that `jax.tree` adds: `broadcast` (a prefix tree's leaves
filling the subtrees of a full one), `reduce_associative`, `transpose` inferring the inner
structure, and `static` for dataclass fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from funcgrad import tree_util
from funcgrad.tree_util import IsLeaf, KeyPath, PyTreeDef

__all__ = [
    "all",
    "broadcast",
    "flatten",
    "flatten_with_path",
    "leaves",
    "leaves_with_path",
    "map",
    "map_with_path",
    "reduce",
    "reduce_associative",
    "static",
    "structure",
    "transpose",
    "unflatten",
]

_MISSING = object()


def all(tree: Any, *, is_leaf: IsLeaf | None = None) -> bool:
    """True when every leaf of `tree` is truthy."""
    return tree_util.tree_all(tree, is_leaf=is_leaf)


def flatten(tree: Any, is_leaf: IsLeaf | None = None) -> tuple[list[Any], PyTreeDef]:
    """The leaves of `tree` (depth first, dict keys sorted) and its structure."""
    return tree_util.tree_flatten(tree, is_leaf)


def flatten_with_path(
    tree: Any, is_leaf: Callable[..., bool] | None = None, is_leaf_takes_path: bool = False
) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
    """`flatten`, with each leaf paired with its key path; with `is_leaf_takes_path`,
    `is_leaf` is called as `is_leaf(path, node)`."""
    return tree_util.tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)


def leaves(tree: Any, is_leaf: IsLeaf | None = None) -> list[Any]:
    """The leaves of `tree`, in flatten order."""
    return tree_util.tree_leaves(tree, is_leaf)


def leaves_with_path(
    tree: Any, is_leaf: Callable[..., bool] | None = None, is_leaf_takes_path: bool = False
) -> list[tuple[KeyPath, Any]]:
    """The `(path, leaf)` pairs of `tree`, in flatten order."""
    return flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf | None = None) -> Any:
    """`f(x, *xs)` at each leaf `x` of `tree`, `xs` what stands at that place in `rest`: a
    leaf, or a whole subtree where `tree` has a leaf and the others go on."""
    return tree_util.tree_map(f, tree, *rest, is_leaf=is_leaf)


def map_with_path(
    f: Callable[..., Any],
    tree: Any,
    *rest: Any,
    is_leaf: Callable[..., bool] | None = None,
    is_leaf_takes_path: bool = False,
) -> Any:
    """`map` whose `f` also receives each leaf's key path: `f(path, x, *xs)`."""
    return tree_util.tree_map_with_path(
        f, tree, *rest, is_leaf=is_leaf, is_leaf_takes_path=is_leaf_takes_path
    )


def reduce(
    function: Callable[[Any, Any], Any],
    tree: Any,
    initializer: Any = _MISSING,
    is_leaf: IsLeaf | None = None,
) -> Any:
    """`functools.reduce` over the leaves of `tree`."""
    if initializer is _MISSING:
        return tree_util.tree_reduce(function, tree, is_leaf=is_leaf)
    return tree_util.tree_reduce(function, tree, initializer, is_leaf)


def reduce_associative(
    operation: Callable[[Any, Any], Any],
    tree: Any,
    *,
    identity: Any = _MISSING,
    is_leaf: IsLeaf | None = None,
) -> Any:
    """The leaves of `tree` combined by an associative `operation` as a balanced tree of calls
    (halves first), so that the reduction's depth is logarithmic in the number of leaves;
    `identity` is the result for a tree without leaves."""
    if identity is _MISSING:
        return tree_util.tree_reduce_associative(operation, tree, is_leaf=is_leaf)
    return tree_util.tree_reduce_associative(operation, tree, identity=identity, is_leaf=is_leaf)


def structure(tree: Any, is_leaf: IsLeaf | None = None) -> PyTreeDef:
    """The structure of `tree`, without its leaves."""
    return tree_util.tree_structure(tree, is_leaf)


def transpose(
    outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None, pytree_to_transpose: Any
) -> Any:
    """An outer tree of inner trees as an inner tree of outer trees (a list of pairs becomes a
    pair of lists). With `inner_treedef` None, the inner structure is that of the subtree at
    the outer structure's first leaf."""
    if inner_treedef is None:
        subtrees = outer_treedef.flatten_up_to(pytree_to_transpose)
        if not subtrees:
            raise ValueError(
                f"tree.transpose: the outer structure {outer_treedef} has no leaves to infer "
                "the inner structure from; pass inner_treedef"
            )
        inner_treedef = tree_util.tree_structure(subtrees[0])
    return tree_util.tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose)


def unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """A tree of structure `treedef` built from `leaves`, in flatten order."""
    return tree_util.tree_unflatten(treedef, leaves)


def broadcast(prefix_tree: Any, full_tree: Any, is_leaf: IsLeaf | None = None) -> Any:
    """A tree of the structure of `full_tree` in which each leaf of `prefix_tree` (whose
    structure is a prefix of it) fills every leaf of the subtree where it stands."""
    return tree_util.tree_broadcast(prefix_tree, full_tree, is_leaf)


def static(**kwargs: Any) -> Any:
    """`dataclasses.field(**kwargs)` marked static, so that `tree_util.register_dataclass`
    makes the field part of the structure rather than a leaf."""
    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)
