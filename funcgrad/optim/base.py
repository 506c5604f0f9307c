"""Gradient transformations: the pair (init, update) every optimizer is built from.

`init(params)` makes the state (a pytree of arrays, so it passes through jit and vmap), and
`update(updates, state, params=None)` returns transformed updates and the next state.
Optimizers are chains of small transformations (`chain`), and `apply_updates` adds the result
to the parameters. The names and signatures are Optax's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import funcgrad.numpy as fnp
from funcgrad import lax, tree_util

# The names Optax gives the parts of a transformation, for type hints.
Params = Any
Updates = Any
OptState = Any
TransformInitFn = Callable[[Params], OptState]
TransformUpdateFn = Callable[..., tuple[Updates, OptState]]
TransformUpdateExtraArgsFn = Callable[..., tuple[Updates, OptState]]


class GradientTransformation(NamedTuple):
    init: Callable[[Any], Any]
    update: Callable[..., tuple[Any, Any]]


class GradientTransformationExtraArgs(GradientTransformation):
    """A transformation whose `update(updates, state, params=None, **extra_args)` takes
    keyword arguments beyond the three (the loss `value` for Polyak's step, `value_fn` for
    a line search); `chain` and the wrappers hand them on to the transformations that take
    them and leave them out for the rest."""

    __slots__ = ()


class EmptyState(NamedTuple):
    """The state of a transformation that keeps none."""


def init_empty_state(params) -> EmptyState:
    """The init of a transformation that keeps no state."""
    return EmptyState()


def with_extra_args_support(tx: GradientTransformation) -> GradientTransformationExtraArgs:
    """`tx` with an update that accepts, and ignores if it takes none, extra keyword
    arguments."""
    if isinstance(tx, GradientTransformationExtraArgs):
        return tx

    def update(updates, state, params=None, **extra_args):
        return tx.update(updates, state, params)

    return GradientTransformationExtraArgs(tx.init, update)


def identity() -> GradientTransformation:
    def update(updates, state, params=None):
        return updates, state

    return GradientTransformation(lambda params: EmptyState(), update)


def set_to_zero() -> GradientTransformation:
    """Zero updates: the parameters stay where they are (see `freeze`)."""
    return stateless(lambda updates, params: zeros_like_tree(updates))


def stateless(f: Callable[[Any, Any], Any]) -> GradientTransformation:
    """The transformation `updates -> f(updates, params)`, keeping no state."""

    def update(updates, state, params=None):
        return f(updates, params), EmptyState()

    return GradientTransformation(lambda params: EmptyState(), update)


def stateless_with_tree_map(f: Callable[[Any, Any], Any]) -> GradientTransformation:
    """`f(update, param)` leaf by leaf (param None when no parameters are given)."""

    def apply(updates, params):
        if params is None:
            return tree_util.tree_map(lambda u: f(u, None), updates)
        return tree_util.tree_map(f, updates, params)

    return stateless(apply)


def chain(*transforms: GradientTransformation) -> GradientTransformationExtraArgs:
    """Apply `transforms` in order; the state is the tuple of their states. Extra keyword
    arguments of `update` go to each transformation that takes them."""
    transforms = tuple(with_extra_args_support(t) for t in transforms)

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None, **extra_args):
        if len(state) != len(transforms):
            raise ValueError(
                f"chain of {len(transforms)} transformations given a state of {len(state)}"
            )
        new_state = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformationExtraArgs(init, update)


def named_chain(*transforms: tuple[str, GradientTransformation]) -> GradientTransformationExtraArgs:
    """`chain` of (name, transformation) pairs whose state is a dict keyed by the names, so a
    transformation's state is found by name rather than by position."""
    names = [name for name, _ in transforms]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"named_chain: names must be unique, {repeated} repeat in {names}")
    named = [(name, with_extra_args_support(t)) for name, t in transforms]

    def init(params):
        return {name: t.init(params) for name, t in named}

    def update(updates, state, params=None, **extra_args):
        new_state = {}
        for name, t in named:
            updates, new_state[name] = t.update(updates, state[name], params, **extra_args)
        return updates, new_state

    return GradientTransformationExtraArgs(init, update)


def apply_updates(params, updates):
    """params + updates, leaf by leaf, each result in its parameter's dtype.

    The sum is taken in the promoted dtype and rounded once: bfloat16 parameters with float32
    updates are added in float32, as Optax does. Rounding the update to bfloat16 first would
    round twice, and an update just above half a unit in the last place would be lost."""
    check_matches(updates, params, "updates", "parameters")

    def add(p, u):
        p = fnp.asarray(p)
        return fnp.asarray(p + fnp.asarray(u)).astype(p.dtype)

    return tree_util.tree_map(add, params, updates)


def incremental_update(new_tensors, old_tensors, step_size) -> Any:
    """step_size * new + (1 - step_size) * old, leaf by leaf: a target network's Polyak
    average of the online one (None leaves stay None)."""
    return tree_util.tree_map(
        lambda new, old: None if new is None else step_size * new + (1.0 - step_size) * old,
        new_tensors,
        old_tensors,
        is_leaf=lambda x: x is None,
    )


def periodic_update(new_tensors, old_tensors, steps, update_period) -> Any:
    """new_tensors on the steps that are multiples of update_period, old_tensors on the
    others (a target network copied every update_period steps); traceable in steps."""
    return lax.cond(steps % update_period == 0, lambda: new_tensors, lambda: old_tensors)


def global_norm(updates) -> Any:
    """The l2 norm of all leaves together (real, with |x|**2 for complex leaves)."""
    leaves = tree_util.tree_leaves(updates)
    return fnp.sqrt(sum(fnp.sum(abs_sq(x)) for x in leaves))


def abs_sq(g) -> Any:
    """|g|**2, real for complex g (Optax's abs_sq): the second moments of complex gradients
    are g * conj(g), where g**2 would be complex and wrong."""
    g = fnp.asarray(g)
    if fnp.iscomplexobj(g):
        return fnp.square(fnp.real(g)) + fnp.square(fnp.imag(g))
    return fnp.square(g)


def zeros_like_tree(params):
    return tree_util.tree_map(lambda p: fnp.zeros_like(fnp.asarray(p)), params)


def check_matches(tree, reference, what: str, expected: str) -> None:
    """Raise naming the first path where `tree` (e.g. gradients) differs from `reference`
    (e.g. the optimizer state it was made for) in structure or leaf shape."""
    leaves, treedef = tree_util.tree_flatten(tree)
    ref_leaves, ref_treedef = tree_util.tree_flatten(reference)
    if treedef != ref_treedef:
        path, (found, wanted) = _first_difference(treedef, ref_treedef, "")
        raise ValueError(
            f"{what} do not match the {expected} at {path or 'the root'}: structure {found} "
            f"where {wanted} is expected"
        )
    paths = _leaf_paths(treedef, "")
    for path, x, ref in zip(paths, leaves, ref_leaves):
        shape, ref_shape = np.shape(x), np.shape(ref)
        if shape != ref_shape:
            raise ValueError(
                f"{what} do not match the {expected} at {path or 'the root'}: shape {shape} "
                f"where {ref_shape} is expected"
            )


def _child_keys(treedef) -> list[str]:
    """How each child of a node is reached: `['key']` in a dict, `.name` in a namedtuple,
    `[i]` in a sequence or another container."""
    count = len(treedef.children())
    node_type, aux = treedef._type, treedef._aux
    if isinstance(node_type, type) and issubclass(node_type, dict):
        keys = aux if isinstance(aux, tuple) and len(aux) == count else aux[-1]
        return [f"[{k!r}]" for k in keys]
    if hasattr(node_type, "_fields"):
        return [f".{name}" for name in node_type._fields]
    return [f"[{i}]" for i in range(count)]


def _leaf_paths(treedef, prefix: str) -> list[str]:
    children = treedef.children()
    if not children:
        return [prefix] if treedef.num_leaves == 1 else []
    paths = []
    for key, child in zip(_child_keys(treedef), children):
        paths += _leaf_paths(child, prefix + key)
    return paths


def _first_difference(a, b, prefix: str):
    a_children, b_children = a.children(), b.children()
    same_node = a._type is b._type and a._aux == b._aux and len(a_children) == len(b_children)
    if not same_node:
        return prefix, (_describe(a), _describe(b))
    for key, x, y in zip(_child_keys(a), a_children, b_children):
        if x != y:
            return _first_difference(x, y, prefix + key)
    return prefix, (_describe(a), _describe(b))


def _describe(treedef) -> str:
    text = repr(treedef).removeprefix("PyTreeDef(").removesuffix(")")
    return text if len(text) <= 60 else text[:57] + "..."
