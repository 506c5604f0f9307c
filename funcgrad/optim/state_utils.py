"""Looking into optimizer states: map a function over the parts that mirror the parameters
(`tree_map_params`), find and replace parts by name (`tree_get`, `tree_set`: a
hyperparameter of `inject_hyperparams`, a moment, a whole sub-state by its class name)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from funcgrad import tree_util


@tree_util.register_pytree_node_class
class _ParamsPlaceholder:
    """Stands for the parameters in a state made by init: a tree node with no leaves, so the
    tree_maps of init keep it where a parameter-shaped tree goes."""

    def tree_flatten(self):
        return (), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls()


def tree_map_params(
    initable,
    f: Callable[..., Any],
    state,
    /,
    *rest,
    transform_non_params: Callable[[Any], Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
):
    """`f` over every part of `state` shaped like the parameters (moments, traces, ...),
    leaf by leaf with the leaves of `rest`; the other parts unchanged, or mapped by
    transform_non_params. `initable` is the transformation (or its init) that made `state`:
    its init run on a placeholder shows which parts mirror the parameters. Parts that init
    builds other than by mapping over the parameters are not found."""
    init = initable.init if hasattr(initable, "init") else initable
    template = init(_ParamsPlaceholder())

    def map_part(template_part, part):
        if isinstance(template_part, _ParamsPlaceholder):
            return tree_util.tree_map(f, part, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(part)
        return part

    return tree_util.tree_map(
        map_part, template, state, is_leaf=lambda x: isinstance(x, _ParamsPlaceholder)
    )


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """A step of a path into a namedtuple state: its class name and the field."""

    tuple_name: str
    name: str

    def __str__(self) -> str:
        return f"{self.tuple_name}.{self.name}"


def _is_namedtuple(node) -> bool:
    return isinstance(node, tuple) and hasattr(node, "_fields")


def _children_with_keys(node) -> list[tuple[Any, Any]]:
    """The children of a node searched by name, each with the path step to it: namedtuple
    fields, dict entries, list and tuple items; none for anything else."""
    if _is_namedtuple(node):
        name = type(node).__name__
        return [(NamedTupleKey(name, field), getattr(node, field)) for field in node._fields]
    if isinstance(node, dict):
        return [(tree_util.DictKey(k), v) for k, v in node.items()]
    if isinstance(node, (list, tuple)):
        return [(tree_util.SequenceKey(i), v) for i, v in enumerate(node)]
    return []


def _step_name(step):
    if isinstance(step, NamedTupleKey):
        return step.name
    if isinstance(step, tree_util.DictKey):
        return step.key
    return None


def tree_get_all_with_path(
    tree, key, filtering: Callable[[tuple, Any], bool] | None = None
) -> list[tuple[tuple, Any]]:
    """Every (path, value) in `tree` found under `key`: a namedtuple field or dict entry of
    that name, or a whole namedtuple of that class name; nested finds included. `filtering(
    path, value)` keeps some of them."""
    found = []

    def search(node, path):
        if _is_namedtuple(node) and type(node).__name__ == key:
            found.append((path, node))
        for step, child in _children_with_keys(node):
            child_path = (*path, step)
            if _step_name(step) == key:
                found.append((child_path, child))
            search(child, child_path)

    search(tree, ())
    if filtering is not None:
        found = [(path, value) for path, value in found if filtering(path, value)]
    return found


def tree_get(tree, key, default=None, filtering: Callable[[tuple, Any], bool] | None = None):
    """The one value of `tree` found under `key` (as tree_get_all_with_path finds them),
    `default` when there is none; more than one raises, naming their paths."""
    found = tree_get_all_with_path(tree, key, filtering)
    if len(found) > 1:
        paths = ", ".join(tree_util.keystr(path) or "the root" for path, _ in found)
        raise KeyError(f"tree_get: {key!r} is found at several places: {paths}")
    return found[0][1] if found else default


def tree_set(tree, filtering: Callable[[tuple, Any], bool] | None = None, /, **kwargs):
    """`tree` with every value found under each keyword's name (a field, a dict entry, or a
    namedtuple of that class name) replaced by the keyword's value, where
    `filtering(path, value)` allows. A name found nowhere raises."""
    for key in kwargs:
        if not tree_get_all_with_path(tree, key, filtering):
            where = " where filtering allows" if filtering is not None else ""
            raise KeyError(f"tree_set: {key!r} is found nowhere in the tree{where}")

    def allowed(path, value) -> bool:
        return filtering is None or filtering(path, value)

    def rebuild(node, path):
        if _is_namedtuple(node) and type(node).__name__ in kwargs and allowed(path, node):
            return kwargs[type(node).__name__]
        children = _children_with_keys(node)
        if not children:
            return node
        new = []
        for step, child in children:
            child_path = (*path, step)
            name = _step_name(step)
            if name in kwargs and allowed(child_path, child):
                new.append(kwargs[name])
            else:
                new.append(rebuild(child, child_path))
        if _is_namedtuple(node):
            return type(node)(*new)
        if isinstance(node, dict):
            return type(node)(zip(node.keys(), new))
        return type(node)(new)

    return rebuild(tree, ())
