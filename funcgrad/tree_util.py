"""Pytrees: nested containers split into a flat list of leaves and a hashable structure.

Transformations key their caches on the structure (``PyTreeDef``): it is immutable, hashed once.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, NamedTuple

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "KeyEntry",
    "KeyPath",
    "Partial",
    "PyTreeDef",
    "SequenceKey",
    "all_leaves",
    "default_registry",
    "flatten_one_level",
    "flatten_one_level_with_keys",
    "is_tree_node",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_static",
    "tree_all",
    "tree_broadcast",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_reduce",
    "tree_reduce_associative",
    "tree_structure",
    "tree_transpose",
    "tree_unflatten",
    "treedef_children",
    "treedef_is_leaf",
    "treedef_tuple",
]

IsLeaf = Callable[[Any], bool]


class _NodeKind(NamedTuple):
    """How one container type is taken apart, rebuilt and printed.

    ``unflatten`` and ``describe`` receive the node's exact type so that one kind can serve
    every namedtuple class.
    """

    flatten: Callable[[Any], tuple[Iterable[Any], Any]]
    unflatten: Callable[[type, Any, list[Any]], Any]
    describe: Callable[[type, Any, list[str]], str]
    # Returns ``((key, child) pairs, aux)``; None numbers the children with FlattenedIndexKey.
    flatten_with_keys: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Any]] | None = None


# Exact type -> kind. Subclasses are leaves unless registered themselves (namedtuples excepted),
# which keeps the per-node test on the hot path a single dict lookup.
_NODE_KINDS: dict[type, _NodeKind] = {}


class PyTreeDef:
    """The container structure of a pytree, with the leaves taken out.

    Built by ``tree_flatten``; not meant to be constructed directly. The hash is computed at
    construction from the children's hashes so that using a treedef as a cache key costs O(1)
    beyond the flatten that produced it. It is None when some auxiliary data is unhashable;
    such a treedef still compares, but cannot be hashed.
    """

    __slots__ = ("_type", "_kind", "_aux", "_children", "_num_leaves", "_num_nodes", "_hash")

    def __init__(
        self,
        node_type: type | None,
        kind: _NodeKind | None,
        aux: Any,
        children: tuple[PyTreeDef, ...],
    ) -> None:
        self._type = node_type
        self._kind = kind
        self._aux = aux
        self._children = children
        # One plain loop: this runs for every node of every flatten, ahead of each jit cache lookup.
        num_leaves = 1 if kind is None else 0
        num_nodes = 1
        child_hashes = []
        for c in children:
            num_leaves += c._num_leaves
            num_nodes += c._num_nodes
            child_hashes.append(c._hash)
        self._num_leaves = num_leaves
        self._num_nodes = num_nodes
        try:
            self._hash = None if None in child_hashes else hash((node_type, aux, *child_hashes))
        except TypeError:
            self._hash = None

    @property
    def num_leaves(self) -> int:
        return self._num_leaves

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    def __reduce__(self):
        # A node's kind holds functions, which do not pickle: a treedef is saved as its types,
        # auxiliary data and children, and each type's kind is looked up again when loaded.
        return _treedef_from_pickle, (self._type, self._aux, self._children)

    def children(self) -> list[PyTreeDef]:
        """The treedefs of the immediate subtrees (empty for a leaf)."""
        return list(self._children)

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """Rebuild a pytree of this structure from its leaves, in ``tree_leaves`` order."""
        leaves = list(leaves)
        if len(leaves) != self._num_leaves:
            raise ValueError(
                f"{self!r} has {self._num_leaves} leaves, but {len(leaves)} leaves were given"
            )
        return self._build(iter(leaves))

    def _build(self, leaves: Iterator[Any]) -> Any:
        if self._kind is None:
            return next(leaves)
        return self._kind.unflatten(
            self._type, self._aux, [c._build(leaves) for c in self._children]
        )

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """The subtrees of ``tree`` that stand where this structure has its leaves: this
        structure must be a prefix of ``tree``'s (its nodes those of ``tree``, a leaf of it
        standing for a whole subtree there)."""
        subtrees: list[Any] = []
        self._up_to(tree, subtrees, self)
        return subtrees

    def _up_to(self, tree: Any, subtrees: list[Any], whole: PyTreeDef) -> None:
        if self._kind is None:
            subtrees.append(tree)
            return
        kind = _NODE_KINDS.get(type(tree))
        if kind is None and isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
            kind = _NAMEDTUPLE
        children, aux = kind.flatten(tree) if kind is not None else ((), None)
        children = list(children)
        if type(tree) is not self._type or aux != self._aux or len(children) != len(self._children):
            raise ValueError(
                f"a tree of structure {tree_structure(tree)} does not have the structure "
                f"{whole} as a prefix: it has {_shallow(tree, kind, aux, children)} where that "
                f"structure has {self._describe()}"
            )
        for child, child_def in zip(children, self._children):
            child_def._up_to(child, subtrees, whole)

    def compose(self, inner: PyTreeDef) -> PyTreeDef:
        """The structure obtained by replacing every leaf of ``self`` with ``inner``."""
        if self._kind is None:
            return inner
        children = tuple(c.compose(inner) for c in self._children)
        return PyTreeDef(self._type, self._kind, self._aux, children)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return (
            self._hash == other._hash
            and self._type is other._type
            and self._num_leaves == other._num_leaves
            and self._aux == other._aux
            and self._children == other._children
        )

    def __hash__(self) -> int:
        if self._hash is None:
            raise TypeError(f"{self!r} has unhashable auxiliary data")
        return self._hash

    def __repr__(self) -> str:
        return f"PyTreeDef({self._describe()})"

    def _describe(self) -> str:
        if self._kind is None:
            return "*"
        return self._kind.describe(self._type, self._aux, [c._describe() for c in self._children])


_LEAF = PyTreeDef(None, None, None, ())


def _treedef_from_pickle(node_type: type | None, aux: Any, children: tuple) -> PyTreeDef:
    if node_type is None:
        return _LEAF
    kind = _kind_of(node_type)
    if kind is None:
        raise TypeError(
            f"cannot load a tree structure with nodes of type {node_type.__qualname__}: that "
            "type is not a registered pytree node in this process; register it before loading"
        )
    return PyTreeDef(node_type, kind, aux, children)


def _shallow(tree: Any, kind: _NodeKind | None, aux: Any, children: list[Any]) -> str:
    """One node of a tree, its children shown as leaves (for errors)."""
    if kind is None:
        return "a leaf"
    return kind.describe(type(tree), aux, ["*"] * len(children))


def _flatten(tree: Any, leaves: list[Any], is_leaf: IsLeaf | None) -> PyTreeDef:
    """Append the leaves of ``tree`` to ``leaves`` and return its structure."""
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return _LEAF
    node_type = type(tree)
    kind = _NODE_KINDS.get(node_type)
    if kind is None:
        if not (isinstance(tree, tuple) and hasattr(node_type, "_fields")):
            leaves.append(tree)
            return _LEAF
        kind = _NAMEDTUPLE
    children, aux = kind.flatten(tree)
    subtrees = tuple([_flatten(c, leaves, is_leaf) for c in children])
    return PyTreeDef(node_type, kind, aux, subtrees)


def tree_flatten(tree: Any, is_leaf: IsLeaf | None = None) -> tuple[list[Any], PyTreeDef]:
    """Split ``tree`` into its leaves (depth first, dict keys sorted) and its structure."""
    leaves: list[Any] = []
    treedef = _flatten(tree, leaves, is_leaf)
    return leaves, treedef


def keyed_leaves(tree: Any, leaf_key: Callable[[Any], Any]) -> tuple[Any, list[Any]] | None:
    """The leaves of ``tree`` (in flatten order) and one hashable key of its structure and of
    ``leaf_key`` of each leaf, built without a treedef: the hot path of a cached call looks
    its program up by this. None when ``leaf_key`` gives None for a leaf or a node's
    auxiliary data is unhashable (callers then flatten properly)."""
    leaves: list[Any] = []
    key = _keyed(tree, leaves, leaf_key)
    if key is None:
        return None
    try:
        hash(key)
    except TypeError:
        return None
    return key, leaves


def _keyed(tree: Any, leaves: list[Any], leaf_key: Callable[[Any], Any]) -> Any:
    node_type = type(tree)
    kind = _NODE_KINDS.get(node_type)
    if kind is None:
        if isinstance(tree, tuple) and hasattr(node_type, "_fields"):
            kind = _NAMEDTUPLE
        else:
            leaves.append(tree)
            return leaf_key(tree)
    children, aux = kind.flatten(tree)
    parts = [node_type, aux]  # a type first: never equal to a leaf's key
    for child in children:
        part = _keyed(child, leaves, leaf_key)
        if part is None:
            return None
        parts.append(part)
    return tuple(parts)


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """Inverse of ``tree_flatten``: rebuild a pytree from a structure and its leaves."""
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: IsLeaf | None = None) -> list[Any]:
    """The leaves of ``tree``, in flatten order."""
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: IsLeaf | None = None) -> PyTreeDef:
    """The structure of ``tree``, without its leaves."""
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf | None = None) -> Any:
    """``f(x, *xs)`` at each leaf ``x`` of ``tree``, ``xs`` what stands at that place in
    ``rest``, whose trees must have ``tree``'s structure as a prefix: a leaf, or a whole
    subtree where ``tree`` has a leaf and the others go on."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    leaf_lists = [leaves] + [_up_to("tree_map", treedef, other) for other in rest]
    return treedef.unflatten([f(*xs) for xs in zip(*leaf_lists)])


def _up_to(name: str, treedef: PyTreeDef, tree: Any) -> list[Any]:
    try:
        return treedef.flatten_up_to(tree)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


def tree_all(tree: Any, *, is_leaf: IsLeaf | None = None) -> bool:
    """True when every leaf of ``tree`` is truthy."""
    return all(tree_leaves(tree, is_leaf))


_MISSING = object()


def tree_reduce(
    function: Callable[[Any, Any], Any],
    tree: Any,
    initializer: Any = _MISSING,
    is_leaf: IsLeaf | None = None,
) -> Any:
    """``functools.reduce`` over the leaves of ``tree``."""
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _MISSING:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_reduce_associative(
    operation: Callable[[Any, Any], Any],
    tree: Any,
    *,
    identity: Any = _MISSING,
    is_leaf: IsLeaf | None = None,
) -> Any:
    """The leaves of ``tree`` combined by an associative ``operation`` as a balanced tree of
    calls (each half of the leaves first), so that the reduction's depth is logarithmic in the
    number of leaves; ``identity`` is the result for a tree without leaves."""
    leaves = tree_leaves(tree, is_leaf)
    if not leaves:
        if identity is _MISSING:
            raise TypeError("tree_reduce_associative: the tree has no leaves; pass identity")
        return identity
    return _combine_halves(operation, leaves)


def _combine_halves(operation: Callable[[Any, Any], Any], leaves: list[Any]) -> Any:
    if len(leaves) == 1:
        return leaves[0]
    half = len(leaves) // 2
    return operation(
        _combine_halves(operation, leaves[:half]), _combine_halves(operation, leaves[half:])
    )


def tree_broadcast(prefix_tree: Any, full_tree: Any, is_leaf: IsLeaf | None = None) -> Any:
    """A tree of the structure of ``full_tree`` in which each leaf of ``prefix_tree`` (whose
    structure is a prefix of it) fills every leaf of the subtree where it stands."""
    leaves, treedef = tree_flatten(prefix_tree, is_leaf)
    subtrees = _up_to("tree_broadcast", treedef, full_tree)
    return treedef.unflatten(
        tree_map(lambda _, leaf=leaf: leaf, subtree) for leaf, subtree in zip(leaves, subtrees)
    )


def tree_transpose(
    outer_treedef: PyTreeDef, inner_treedef: PyTreeDef, pytree_to_transpose: Any
) -> Any:
    """Turn an outer tree of inner trees into an inner tree of outer trees.

    For example a list of ``(a, b)`` pairs becomes a pair of lists.
    """
    leaves, treedef = tree_flatten(pytree_to_transpose)
    expected = outer_treedef.compose(inner_treedef)
    if treedef != expected:
        raise TypeError(f"tree_transpose: expected structure {expected}, got {treedef}")
    # Leaves come grouped by outer leaf, n inner leaves per group; stride n picks one inner slot.
    n = inner_treedef.num_leaves
    return inner_treedef.unflatten([outer_treedef.unflatten(leaves[j::n]) for j in range(n)])


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """The treedefs of the immediate subtrees of ``treedef``."""
    return treedef.children()


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """True for a single node: a leaf, or (as in JAX) a childless node like ``None`` or ``()``."""
    return treedef.num_nodes == 1


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    """The structure of a tuple whose elements have the structures ``treedefs``."""
    children = tuple(treedefs)
    for child in children:
        if not isinstance(child, PyTreeDef):
            raise TypeError(f"treedef_tuple takes PyTreeDefs, got {type(child).__name__} {child!r}")
    return PyTreeDef(tuple, _NODE_KINDS[tuple], None, children)


def all_leaves(iterable: Iterable[Any], is_leaf: IsLeaf | None = None) -> bool:
    """True when no element of ``iterable`` is a pytree node (``None`` counts as a node)."""
    return all(tree_structure(x, is_leaf) == _LEAF for x in iterable)


# --- key paths ----------------------------------------------------------------------------------
# A leaf's path is the tuple of keys that lead from the root to it, one per node passed through.


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """The position of a child in a tuple or list."""

    idx: int

    def __str__(self) -> str:
        return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True)
class DictKey:
    """The key of a child in a dict."""

    key: Hashable

    def __str__(self) -> str:
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """The attribute name of a child: a namedtuple field or a dataclass data field."""

    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """The position of a child among the children of a node registered without keys."""

    key: int

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"


# One step of a key path: one of the four classes above, or whatever hashable key a custom
# node's flatten_with_keys gives.
KeyEntry = SequenceKey | DictKey | GetAttrKey | FlattenedIndexKey | Hashable
KeyPath = tuple[KeyEntry, ...]


def _simple_str(key: Any) -> str:
    for cls, field in ((SequenceKey, "idx"), (DictKey, "key"), (FlattenedIndexKey, "key")):
        if isinstance(key, cls):
            return str(getattr(key, field))
    if isinstance(key, GetAttrKey):
        return key.name
    return str(key)


def keystr(keys: KeyPath, *, simple: bool = False, separator: str = "") -> str:
    """A path as text, e.g. ``['params'][0].w``; with ``simple``, just the bare keys
    (``params/0/w`` with ``separator="/"``), for names of checkpoint entries or log lines."""
    return separator.join(_simple_str(k) if simple else str(k) for k in keys)


def _node_keyed_children(tree: Any, kind: _NodeKind) -> tuple[list[tuple[Any, Any]], Any]:
    if kind.flatten_with_keys is not None:
        pairs, aux = kind.flatten_with_keys(tree)
        return list(pairs), aux
    children, aux = kind.flatten(tree)
    return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)], aux


def _flatten_with_path(
    tree: Any,
    path: KeyPath,
    out: list[tuple[KeyPath, Any]],
    is_leaf: Callable[[KeyPath, Any], bool] | None,
) -> PyTreeDef:
    """``_flatten``, with each leaf appended beside its path; ``is_leaf(path, node)``."""
    if is_leaf is not None and is_leaf(path, tree):
        out.append((path, tree))
        return _LEAF
    node_type = type(tree)
    kind = _NODE_KINDS.get(node_type)
    if kind is None:
        if not (isinstance(tree, tuple) and hasattr(node_type, "_fields")):
            out.append((path, tree))
            return _LEAF
        kind = _NAMEDTUPLE
    pairs, aux = _node_keyed_children(tree, kind)
    subtrees = tuple([_flatten_with_path(c, (*path, k), out, is_leaf) for k, c in pairs])
    return PyTreeDef(node_type, kind, aux, subtrees)


def tree_flatten_with_path(
    tree: Any, is_leaf: Callable[..., bool] | None = None, is_leaf_takes_path: bool = False
) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
    """``tree_flatten``, with each leaf paired with its key path; with ``is_leaf_takes_path``,
    ``is_leaf`` is asked ``is_leaf(path, node)``."""
    out: list[tuple[KeyPath, Any]] = []
    if is_leaf is not None and not is_leaf_takes_path:
        asked = is_leaf
        is_leaf = lambda path, node: asked(node)  # noqa: E731
    treedef = _flatten_with_path(tree, (), out, is_leaf)
    return out, treedef


def tree_leaves_with_path(
    tree: Any, is_leaf: Callable[..., bool] | None = None, is_leaf_takes_path: bool = False
) -> list[tuple[KeyPath, Any]]:
    """The ``(path, leaf)`` pairs of ``tree``, in flatten order."""
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(
    f: Callable[..., Any],
    tree: Any,
    *rest: Any,
    is_leaf: Callable[..., bool] | None = None,
    is_leaf_takes_path: bool = False,
) -> Any:
    """``tree_map`` whose ``f`` also receives each leaf's path: ``f(path, leaf, *others)``."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    leaf_lists = [[leaf for _, leaf in pairs]]
    leaf_lists += [_up_to("tree_map_with_path", treedef, other) for other in rest]
    paths = [path for path, _ in pairs]
    return treedef.unflatten([f(p, *xs) for p, *xs in zip(paths, *leaf_lists)])


# --- one level -------------------------------------------------------------------------------


def _kind_of(node_type: type) -> _NodeKind | None:
    """How nodes of ``node_type`` are taken apart; None for a leaf type."""
    kind = _NODE_KINDS.get(node_type)
    if kind is None and issubclass(node_type, tuple) and hasattr(node_type, "_fields"):
        return _NAMEDTUPLE
    return kind


def is_tree_node(typ: type) -> bool:
    """True when values of type ``typ`` are pytree nodes (built in, registered, or a
    namedtuple class) rather than leaves."""
    return isinstance(typ, type) and _kind_of(typ) is not None


def _node_kind(name: str, tree: Any) -> _NodeKind:
    kind = _kind_of(type(tree))
    if kind is None:
        raise ValueError(
            f"{name}: {tree!r} of type {type(tree).__name__} is a leaf, not a pytree node; "
            "only built-in containers, namedtuples and registered types have children"
        )
    return kind


def flatten_one_level(tree: Any) -> tuple[list[Any], Any]:
    """The immediate children of the node ``tree`` (whole subtrees, not leaves) and its
    auxiliary data, for code that walks a tree one node at a time."""
    children, aux = _node_kind("flatten_one_level", tree).flatten(tree)
    return list(children), aux


def flatten_one_level_with_keys(tree: Any) -> tuple[list[tuple[KeyEntry, Any]], Any]:
    """``flatten_one_level``, with each child paired with the key that leads to it."""
    return _node_keyed_children(tree, _node_kind("flatten_one_level_with_keys", tree))


class _Registry:
    """The table of node types behind this module's functions, as an object: code written
    against a registry argument receives ``default_registry``. Its one-level flattens give
    None for a leaf instead of raising."""

    def flatten(self, tree: Any, is_leaf: IsLeaf | None = None) -> tuple[list[Any], PyTreeDef]:
        return tree_flatten(tree, is_leaf)

    def flatten_with_path(
        self, tree: Any, is_leaf: IsLeaf | None = None
    ) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
        return tree_flatten_with_path(tree, is_leaf)

    def flatten_one_level(self, tree: Any) -> tuple[list[Any], Any] | None:
        return flatten_one_level(tree) if self.is_node(type(tree)) else None

    def flatten_one_level_with_keys(self, tree: Any) -> tuple[list[tuple[Any, Any]], Any] | None:
        return flatten_one_level_with_keys(tree) if self.is_node(type(tree)) else None

    def is_node(self, typ: type) -> bool:
        return is_tree_node(typ)

    def __repr__(self) -> str:
        return "default_registry"


default_registry = _Registry()


# --- registration -------------------------------------------------------------------------------


def _describe_custom(node_type: type, aux: Any, strs: list[str]) -> str:
    return f"CustomNode({node_type.__name__}[{aux!r}], [{', '.join(strs)}])"


def _register(node_type: type, kind: _NodeKind) -> None:
    if node_type in _NODE_KINDS:
        raise ValueError(f"{node_type!r} is already registered as a pytree node type")
    _NODE_KINDS[node_type] = kind


def register_pytree_node(
    nodetype: type,
    flatten_func: Callable[[Any], tuple[Iterable[Any], Hashable]],
    unflatten_func: Callable[[Any, tuple[Any, ...]], Any],
    flatten_with_keys_func: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Hashable]]
    | None = None,
) -> None:
    """Make ``nodetype`` a pytree node.

    ``flatten_func(x)`` returns ``(children, aux_data)``; ``unflatten_func(aux_data, children)``
    rebuilds the node. ``aux_data`` is static: it is part of the treedef and so must be hashable
    and comparable for the treedef to be usable as a cache key. ``flatten_with_keys_func``, if
    given, returns ``(((key, child), ...), aux_data)``: the keys of the children's key paths
    (as ``register_pytree_with_keys``).
    """
    if flatten_with_keys_func is not None:
        register_pytree_with_keys(nodetype, flatten_with_keys_func, unflatten_func, flatten_func)
        return
    _register(
        nodetype,
        _NodeKind(
            flatten_func,
            lambda _type, aux, children: unflatten_func(aux, tuple(children)),
            _describe_custom,
        ),
    )


def register_pytree_node_class(cls: type) -> type:
    """Class decorator registering ``cls`` through its ``tree_flatten`` / ``tree_unflatten``.

    ``obj.tree_flatten()`` returns ``(children, aux_data)``; the classmethod
    ``cls.tree_unflatten(aux_data, children)`` rebuilds an instance.
    """
    register_pytree_node(cls, operator.methodcaller("tree_flatten"), cls.tree_unflatten)
    return cls


def register_pytree_with_keys(
    nodetype: type,
    flatten_with_keys: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Hashable]],
    unflatten_func: Callable[[Any, tuple[Any, ...]], Any],
    flatten_func: Callable[[Any], tuple[Iterable[Any], Hashable]] | None = None,
) -> None:
    """``register_pytree_node`` for a node whose children have keys for key paths.

    ``flatten_with_keys(x)`` returns ``(((key, child), ...), aux_data)``; ``flatten_func``, the
    faster keyless form used by ``tree_flatten``, is derived from it when not given.
    """

    def keyless_flatten(x: Any) -> tuple[list[Any], Hashable]:
        pairs, aux = flatten_with_keys(x)
        return [child for _, child in pairs], aux

    _register(
        nodetype,
        _NodeKind(
            flatten_func or keyless_flatten,
            lambda _type, aux, children: unflatten_func(aux, tuple(children)),
            _describe_custom,
            flatten_with_keys,
        ),
    )


def register_pytree_with_keys_class(cls: type) -> type:
    """Class decorator: ``register_pytree_with_keys`` through ``cls.tree_flatten_with_keys``,
    ``cls.tree_unflatten`` and, where defined, ``cls.tree_flatten``."""
    flatten = operator.methodcaller("tree_flatten") if hasattr(cls, "tree_flatten") else None
    register_pytree_with_keys(
        cls, operator.methodcaller("tree_flatten_with_keys"), cls.tree_unflatten, flatten
    )
    return cls


def register_static(cls: type) -> type:
    """Class decorator making instances of ``cls`` pytree nodes without children, the instance
    itself their auxiliary data: they are part of a tree's structure, so transformations treat
    them as static (like jit's ``static_argnums``) and key their caches on them, which is why
    ``cls`` must be hashable."""
    if not isinstance(cls, type):
        raise TypeError(f"register_static takes a class, got {type(cls).__name__} {cls!r}")
    if cls.__hash__ is None:
        raise TypeError(
            f"register_static: {cls.__name__} is not hashable (its __hash__ is None); a static "
            "value keys the caches of transformations, so define __hash__ and __eq__"
        )
    register_pytree_with_keys(cls, lambda x: ((), x), lambda aux, _children: aux)
    return cls


def register_dataclass(
    nodetype: type,
    data_fields: Iterable[str] | None = None,
    meta_fields: Iterable[str] | None = None,
    drop_fields: Iterable[str] = (),
) -> type:
    """Register a dataclass-like type whose ``data_fields`` are children and ``meta_fields`` aux.

    With neither list given, ``nodetype`` must be a dataclass: fields declared with
    ``metadata=dict(static=True)`` are meta, the other ``init`` fields are data.
    ``drop_fields`` are init fields left out of both, which unflattening leaves to their
    defaults. Returns ``nodetype`` so it also works as a class decorator.
    """
    drop = set(drop_fields)
    if data_fields is None and meta_fields is None:
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(
                f"register_dataclass: {nodetype!r} is not a dataclass; "
                "pass data_fields and meta_fields explicitly"
            )
        fields = [f for f in dataclasses.fields(nodetype) if f.init and f.name not in drop]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    elif data_fields is None or meta_fields is None:
        raise TypeError("register_dataclass: pass both data_fields and meta_fields, or neither")
    data = tuple(data_fields)
    meta = tuple(meta_fields)
    if overlap := (set(data) | set(meta)) & drop:
        raise ValueError(f"register_dataclass: fields {sorted(overlap)} are kept and dropped")
    if dataclasses.is_dataclass(nodetype):
        # A missing init field would make unflatten fail much later, far from the mistake.
        init_fields = {f.name for f in dataclasses.fields(nodetype) if f.init} - drop
        if set(data) | set(meta) != init_fields:
            raise ValueError(
                f"register_dataclass: data_fields {data} and meta_fields {meta} must together "
                f"name exactly the init fields of {nodetype.__name__} not in drop_fields: "
                f"{sorted(init_fields)} (name a field in drop_fields to leave it out)"
            )

    def flatten(x: Any) -> tuple[list[Any], tuple[Any, ...]]:
        return [getattr(x, name) for name in data], tuple(getattr(x, name) for name in meta)

    def unflatten(aux: tuple[Any, ...], children: tuple[Any, ...]) -> Any:
        return nodetype(**dict(zip(meta, aux)), **dict(zip(data, children)))

    def flatten_with_keys(x: Any) -> tuple[list[tuple[GetAttrKey, Any]], tuple[Any, ...]]:
        children, aux = flatten(x)
        return [(GetAttrKey(name), c) for name, c in zip(data, children)], aux

    register_pytree_with_keys(nodetype, flatten_with_keys, unflatten, flatten)
    return nodetype


class _StaticCallable:
    """Wraps a functools.partial so that ``Partial`` keeps its bound arguments static.

    ``functools.partial.__new__`` merges a partial's arguments into the new one, which would turn
    them into leaves.
    """

    __slots__ = ("wrapped",)

    def __init__(self, wrapped: Callable[..., Any]) -> None:
        self.wrapped = wrapped

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.wrapped(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _StaticCallable) and self.wrapped == other.wrapped

    def __hash__(self) -> int:
        return hash(self.wrapped)

    def __repr__(self) -> str:
        return repr(self.wrapped)


class Partial(functools.partial):
    """A ``functools.partial`` that is a pytree: bound arguments are leaves, the function is aux.

    This lets a partially applied function be passed through a transformation with its bound
    arrays treated as data rather than baked into the traced function.
    """

    def __new__(cls, func: Callable[..., Any], /, *args: Any, **keywords: Any) -> Partial:
        if isinstance(func, functools.partial):
            func = _StaticCallable(func)
        return super().__new__(cls, func, *args, **keywords)


# --- built-in node kinds ------------------------------------------------------------------------


def _describe_tuple(_type: type, _aux: None, strs: list[str]) -> str:
    return f"({', '.join(strs)}{',' if len(strs) == 1 else ''})"


def _describe_list(_type: type, _aux: None, strs: list[str]) -> str:
    return f"[{', '.join(strs)}]"


def _describe_items(keys: Iterable[Any], strs: list[str]) -> str:
    return "{" + ", ".join(f"{k!r}: {s}" for k, s in zip(keys, strs)) + "}"


def _flatten_dict(d: dict[Any, Any]) -> tuple[list[Any], tuple[Any, ...]]:
    keys = sorted(d)
    return [d[k] for k in keys], tuple(keys)


def _flatten_ordered_dict(d: collections.OrderedDict[Any, Any]) -> tuple[Any, tuple[Any, ...]]:
    return d.values(), tuple(d)


def _flatten_defaultdict(d: collections.defaultdict[Any, Any]) -> tuple[list[Any], Any]:
    keys = sorted(d)
    return [d[k] for k in keys], (d.default_factory, tuple(keys))


def _describe_defaultdict(_type: type, aux: Any, strs: list[str]) -> str:
    factory, keys = aux
    return f"defaultdict({getattr(factory, '__name__', factory)}, {_describe_items(keys, strs)})"


def _describe_namedtuple(node_type: type, _aux: None, strs: list[str]) -> str:
    fields = ", ".join(f"{name}={s}" for name, s in zip(node_type._fields, strs))
    return f"{node_type.__name__}({fields})"


def _sequence_with_keys(seq: tuple[Any, ...] | list[Any]) -> tuple[list[tuple[Any, Any]], None]:
    return [(SequenceKey(i), c) for i, c in enumerate(seq)], None


def _dict_with_keys(d: dict[Any, Any]) -> tuple[list[tuple[Any, Any]], Any]:
    children, aux = _NODE_KINDS[type(d)].flatten(d)
    keys = aux[1] if isinstance(d, collections.defaultdict) else aux
    return [(DictKey(k), c) for k, c in zip(keys, children)], aux


_NAMEDTUPLE = _NodeKind(
    lambda t: (t, None),
    lambda node_type, _aux, children: node_type(*children),
    _describe_namedtuple,
    lambda t: ([(GetAttrKey(name), c) for name, c in zip(type(t)._fields, t)], None),
)

_NODE_KINDS.update(
    {
        tuple: _NodeKind(
            lambda t: (t, None),
            lambda _type, _aux, children: tuple(children),
            _describe_tuple,
            _sequence_with_keys,
        ),
        list: _NodeKind(
            lambda l: (l, None),
            lambda _type, _aux, children: children,
            _describe_list,
            _sequence_with_keys,
        ),
        dict: _NodeKind(
            _flatten_dict,
            lambda _type, keys, children: dict(zip(keys, children)),
            lambda _type, keys, strs: _describe_items(keys, strs),
            _dict_with_keys,
        ),
        type(None): _NodeKind(
            lambda _: ((), None), lambda _type, _aux, _children: None, lambda *_: "None"
        ),
        collections.OrderedDict: _NodeKind(
            _flatten_ordered_dict,
            lambda _type, keys, children: collections.OrderedDict(zip(keys, children)),
            lambda _type, keys, strs: f"OrderedDict({_describe_items(keys, strs)})",
            _dict_with_keys,
        ),
        collections.defaultdict: _NodeKind(
            _flatten_defaultdict,
            lambda _type, aux, children: collections.defaultdict(aux[0], zip(aux[1], children)),
            _describe_defaultdict,
            _dict_with_keys,
        ),
    }
)

register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, children: Partial(func, *children[0], **children[1]),
)
