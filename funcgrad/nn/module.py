"""Modules: layers as immutable dataclasses that are pytrees.

A model is a tree of modules whose array fields are its leaves, so `grad`, `jit`, `vmap` and
`tree_map` take models as they take any pytree: `grad(loss)(model, x)` returns a model of
gradients, `tree_map(lambda p, g: p - lr * g, model, grads)` updates it.

Which fields are leaves and which are configuration:

- arrays, modules, and lists, tuples and dicts holding them are children (pytree nodes);
- a field declared `field(static=True)` is configuration, whatever it holds;
- None is an empty child (a missing bias, or the part `partition` took out);
- any other value that is plain configuration by its type (bool, int, float, complex,
  str, a dtype, anything callable that is not a module (an activation), or a tuple of
  these, such as a kernel size) is configuration too. A trainable scalar must therefore be
  an array, not a Python float.

The split is made when the module is constructed, so a model mapped to other leaves (say, a
tree of booleans as a filter) keeps its structure. Configuration travels in the tree's
structure (it must be hashable, as jit keys its cache by structure).

Subclasses are dataclasses automatically. A subclass may write its own `__init__` assigning
its fields (`self.weight = ...`); once construction returns, the instance is frozen and
`tree_at` makes modified copies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import tree_util
from funcgrad.array import Array

_CONFIGURATION_TYPES = (
    bool,
    int,
    float,
    complex,
    str,
    np.dtype,
)


def field(*, static: bool = False, **kwargs) -> Any:
    """A dataclass field; `static=True` makes it configuration (part of the tree's structure)
    rather than a child."""
    metadata = dict(kwargs.pop("metadata", {}))
    metadata["static"] = static
    return dataclasses.field(metadata=metadata, **kwargs)


def _is_configuration(value: Any) -> bool:
    if isinstance(value, tuple) and not hasattr(type(value), "_fields"):
        return all(_is_configuration(v) for v in value)
    if isinstance(value, Module):
        return False
    return isinstance(value, _CONFIGURATION_TYPES) or callable(value)


class _ModuleMeta(type):
    """Runs `__init__` with assignment allowed, then freezes the instance."""

    def __call__(cls, *args, **kwargs):
        module = cls.__new__(cls)
        object.__setattr__(module, "_constructing", True)
        try:
            module.__init__(*args, **kwargs)
        finally:
            object.__delattr__(module, "_constructing")
        missing = [f.name for f in dataclasses.fields(module) if f.name not in module.__dict__]
        if missing:
            raise TypeError(f"{cls.__name__}.__init__ did not set the field(s) {missing}")
        # Which fields are children is decided once, here, so that a tree mapped to other
        # leaves (a tree of booleans for `partition`, say) keeps the module's structure.
        object.__setattr__(module, "_child_fields", _child_fields(module))
        return module


class Module(metaclass=_ModuleMeta):
    """Base class of layers and models (see the module docstring)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A hand-written __init__ (here or inherited) is kept; otherwise the dataclass's.
        has_init = any("__init__" in c.__dict__ for c in cls.__mro__ if c not in (Module, object))
        dataclasses.dataclass(cls, init=not has_init, repr=False, eq=False)
        tree_util.register_pytree_with_keys(
            cls, _flatten_with_keys, _unflatten, flatten_func=_flatten
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if "_constructing" not in self.__dict__:
            raise dataclasses.FrozenInstanceError(
                f"{type(self).__name__} is immutable: build a modified copy with "
                f"nn.tree_at instead of setting .{name}"
            )
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        parts = [f"{f.name}={_summary(getattr(self, f.name))}" for f in dataclasses.fields(self)]
        return f"{type(self).__name__}({', '.join(parts)})"


def _child_fields(module: Module) -> tuple[str, ...]:
    return tuple(
        f.name
        for f in dataclasses.fields(module)
        if not f.metadata.get("static", False) and not _is_configuration(module.__dict__[f.name])
    )


def _flatten(module: Module):
    names = module.__dict__["_child_fields"]
    configuration = tuple(
        (f.name, module.__dict__[f.name]) for f in dataclasses.fields(module) if f.name not in names
    )
    return [module.__dict__[n] for n in names], (type(module), names, configuration)


def _flatten_with_keys(module: Module):
    children, aux = _flatten(module)
    return [(tree_util.GetAttrKey(n), c) for n, c in zip(aux[1], children)], aux


def _unflatten(aux, children) -> Module:
    cls, names, configuration = aux
    module = object.__new__(cls)
    for name, value in (*zip(names, children), *configuration):
        object.__setattr__(module, name, value)
    object.__setattr__(module, "_child_fields", names)
    return module


def _summary(value: Any) -> str:
    """Arrays as dtype[shape]; containers and modules recursively; the rest by repr."""
    if isinstance(value, (Array, np.ndarray)):
        return f"{np.dtype(value.dtype).name}{list(value.shape)}"
    if isinstance(value, list):
        return "[" + ", ".join(_summary(v) for v in value) + "]"
    if isinstance(value, tuple) and not _is_configuration(value):
        return "(" + ", ".join(_summary(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_summary(v)}" for k, v in value.items()) + "}"
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return repr(value)


# -- filtering ------------------------------------------------------------------------------


def is_array(leaf: Any) -> bool:
    return isinstance(leaf, (Array, np.ndarray))


def is_inexact_array(leaf: Any) -> bool:
    """A floating (trainable) array."""
    return is_array(leaf) and np.issubdtype(np.dtype(leaf.dtype), np.inexact)


def partition(tree: Any, filter_spec: Callable[[Any], bool] | Any) -> tuple[Any, Any]:
    """(the leaves that `filter_spec` selects, the rest), as two trees of the same structure
    with None in place of the other part's leaves. `filter_spec` is a predicate on leaves or
    a tree of booleans (or predicates) matching a prefix of `tree`. `combine` undoes it:
    differentiate with respect to the first part only, keeping the second fixed."""
    selected = _selection(tree, filter_spec)
    leaves, treedef = tree_util.tree_flatten(tree)
    chosen = [leaf if keep else None for leaf, keep in zip(leaves, selected)]
    rest = [None if keep else leaf for leaf, keep in zip(leaves, selected)]
    return treedef.unflatten(chosen), treedef.unflatten(rest)


def combine(*trees: Any) -> Any:
    """The trees merged leaf by leaf: each position takes the first non-None leaf."""

    def first(*leaves):
        return next((leaf for leaf in leaves if leaf is not None), None)

    return tree_util.tree_map(first, *trees, is_leaf=lambda x: x is None)


def _selection(tree: Any, filter_spec) -> list[bool]:
    """One boolean per leaf of `tree` (in flatten order)."""
    if isinstance(filter_spec, bool):
        return [filter_spec] * len(tree_util.tree_leaves(tree))
    if callable(filter_spec) and not isinstance(filter_spec, Module):
        return [bool(filter_spec(leaf)) for leaf in tree_util.tree_leaves(tree)]
    spec_children, spec_def = _children(filter_spec)
    if spec_def.num_leaves == 1 and spec_children == [filter_spec]:  # a leaf, and not a bool
        raise TypeError(
            f"partition: a filter is a bool, a predicate, or a tree of them, got {filter_spec!r}"
        )
    children, treedef = _children(tree)
    if type(filter_spec) is not type(tree) or len(spec_children) != len(children):
        raise ValueError(
            f"partition: the filter {spec_def} does not match the tree's structure {treedef}"
        )
    result: list[bool] = []
    for spec, child in zip(spec_children, children):
        result += _selection(child, spec)
    return result


def tree_at(where: Callable[[Any], Any], tree: Any, replace: Any) -> Any:
    """A copy of `tree` with the node that `where(tree)` picks out replaced by `replace`
    (or, if `where` returns a tuple of nodes, each by the matching element of `replace`)."""
    marked = tree_util.tree_map(lambda leaf: _Marker(leaf), tree)
    picked = where(marked)
    targets = picked if isinstance(picked, tuple) else (picked,)
    values = replace if isinstance(picked, tuple) else (replace,)
    if len(targets) != len(values):
        raise ValueError(
            f"tree_at: `where` picked {len(targets)} nodes, `replace` has {len(values)}"
        )
    by_identity = {}
    for target, value in zip(targets, values):
        markers = tree_util.tree_leaves(target, is_leaf=lambda x: isinstance(x, _Marker))
        if not markers or not all(isinstance(m, _Marker) for m in markers):
            raise ValueError("tree_at: `where` must pick nodes of the tree it is given")
        by_identity[id(target)] = (target, value)

    replaced = set()

    def rebuild(node):
        hit = by_identity.get(id(node))
        if hit is not None and hit[0] is node:
            replaced.add(id(node))
            return hit[1]
        if isinstance(node, _Marker):
            return node.leaf
        children, treedef = _children(node)
        return treedef.unflatten([rebuild(c) for c in children])

    result = rebuild(marked)
    if len(replaced) != len(by_identity):
        # A container `where` built itself (a list of nodes, say) is not in the tree, and
        # replacing nothing would return the tree unchanged without a word.
        raise ValueError(
            "tree_at: `where` returned a container that is not a node of the tree; return "
            "one node of it, or a tuple of its nodes"
        )
    return result


class _Marker:
    """A leaf wrapped so that `tree_at` can tell where each picked node lies."""

    def __init__(self, leaf):
        self.leaf = leaf


def _children(node):
    """A node's immediate children and a treedef rebuilding it from them."""
    treedef = tree_util.tree_structure(node, is_leaf=lambda x: x is not node)
    return tree_util.tree_leaves(node, is_leaf=lambda x: x is not node), treedef
