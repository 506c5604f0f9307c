"""Arithmetic, casting and random draws on whole pytrees (parameters, gradients, moments),
with Optax's `tree_utils` names: the small vocabulary optimizers are written in, so a new
update rule reads as its equations. Finding and replacing parts of an optimizer state by
name (`tree_get`, `tree_set`) lives in `state_utils` and is exported here too."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import funcgrad.numpy as fnp
from funcgrad import dtypes, random, tree_util
from funcgrad.optim.base import abs_sq
from funcgrad.optim.state_utils import (
    NamedTupleKey,
    tree_get,
    tree_get_all_with_path,
    tree_map_params,
    tree_set,
)

__all__ = [
    "NamedTupleKey",
    "tree_add",
    "tree_add_scale",
    "tree_allclose",
    "tree_batch_shape",
    "tree_bias_correction",
    "tree_cast",
    "tree_cast_like",
    "tree_clip",
    "tree_conj",
    "tree_div",
    "tree_dtype",
    "tree_full_like",
    "tree_get",
    "tree_get_all_with_path",
    "tree_map_params",
    "tree_max",
    "tree_min",
    "tree_mul",
    "tree_norm",
    "tree_ones_like",
    "tree_random_like",
    "tree_real",
    "tree_scale",
    "tree_set",
    "tree_size",
    "tree_split_key_like",
    "tree_sub",
    "tree_sum",
    "tree_unwrap_random_key_data",
    "tree_update_infinity_moment",
    "tree_update_moment",
    "tree_update_moment_per_elem_norm",
    "tree_vdot",
    "tree_where",
    "tree_zeros_like",
]

_map = tree_util.tree_map


def _present(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f` on leaves, passing None (a masked-out leaf) through unchanged."""

    def apply(x, *rest):
        return None if x is None else f(x, *rest)

    return apply


def _map_present(f, tree, *rest):
    return _map(_present(f), tree, *rest, is_leaf=lambda x: x is None)


# -- arithmetic ---------------------------------------------------------------------------------


def tree_add(tree_x: Any, tree_y: Any, *other_trees: Any) -> Any:
    return _map(
        lambda *leaves: functools.reduce(lambda a, b: a + b, leaves), tree_x, tree_y, *other_trees
    )


def tree_sub(tree_x: Any, tree_y: Any) -> Any:
    return _map(lambda x, y: x - y, tree_x, tree_y)


def tree_mul(tree_x: Any, tree_y: Any) -> Any:
    return _map(lambda x, y: x * y, tree_x, tree_y)


def tree_div(tree_x: Any, tree_y: Any) -> Any:
    return _map(lambda x, y: x / y, tree_x, tree_y)


def tree_scale(scalar: Any, tree: Any) -> Any:
    """scalar * tree."""
    return _map(lambda x: scalar * x, tree)


def tree_add_scale(tree_x: Any, scalar: Any, tree_y: Any) -> Any:
    """tree_x + scalar * tree_y (a step along a direction)."""
    scalar = fnp.asarray(scalar)
    return _map_present(lambda x, y: x + scalar * y, tree_x, tree_y)


def tree_vdot(tree_x: Any, tree_y: Any) -> Any:
    """The inner product <x, y> summed over all leaves, the first argument conjugated."""
    dots = [fnp.vdot(x, y) for x, y in zip(*_aligned_leaves(tree_x, tree_y))]
    return functools.reduce(lambda a, b: a + b, dots, 0)


def _aligned_leaves(tree_x, tree_y) -> tuple[list, list]:
    leaves_x, treedef = tree_util.tree_flatten(tree_x)
    return leaves_x, treedef.flatten_up_to(tree_y)


def tree_sum(tree: Any, associative_reduction: bool = False) -> Any:
    """The sum of every element of every leaf; associative_reduction adds the per-leaf sums
    pairwise (a shallower sum) rather than left to right."""
    sums = [fnp.sum(x) for x in tree_util.tree_leaves(tree)]
    if associative_reduction and sums:
        return tree_util.tree_reduce_associative(lambda a, b: a + b, sums)
    return functools.reduce(lambda a, b: a + b, sums, 0)


def tree_max(tree: Any) -> Any:
    """The largest element of all leaves (-inf for a tree without elements)."""
    maxima = [fnp.max(x) for x in tree_util.tree_leaves(tree) if fnp.size(x)]
    return functools.reduce(fnp.maximum, maxima, fnp.asarray(-fnp.inf))


def tree_min(tree: Any) -> Any:
    """The smallest element of all leaves (inf for a tree without elements)."""
    minima = [fnp.min(x) for x in tree_util.tree_leaves(tree) if fnp.size(x)]
    return functools.reduce(fnp.minimum, minima, fnp.asarray(fnp.inf))


def tree_size(tree: Any) -> int:
    """The number of elements in all leaves."""
    return sum(int(fnp.size(x)) for x in tree_util.tree_leaves(tree))


def tree_conj(tree: Any) -> Any:
    return _map(fnp.conj, tree)


def tree_real(tree: Any) -> Any:
    return _map(fnp.real, tree)


def tree_norm(tree: Any, ord: int | str | float | None = None, squared: bool = False) -> Any:
    """The norm of all leaves as one vector: l2 (ord None or 2), l1 (1) or the maximum
    absolute value (inf, "inf" or "infinity"); squared gives its square. Complex leaves
    count |x|."""
    if ord is None or ord == 2:
        total = tree_sum(_map(abs_sq, tree))
        return fnp.asarray(total if squared else fnp.sqrt(total))
    if ord == 1:
        norm = tree_sum(_map(fnp.abs, tree))
    elif ord == fnp.inf or ord in ("inf", "infinity"):
        norm = tree_max(_map(fnp.abs, tree))
    else:
        raise ValueError(f"tree_norm: ord must be None, 1, 2 or inf, got {ord!r}")
    return fnp.asarray(abs_sq(norm) if squared else norm)


def tree_batch_shape(tree: Any, shape: tuple[int, ...] = ()) -> Any:
    """Each leaf broadcast to leading axes `shape` (a batch of copies)."""
    return _map(lambda x: fnp.broadcast_to(x, (*shape, *fnp.shape(x))), tree)


def tree_zeros_like(tree: Any, dtype=None) -> Any:
    return _map(lambda x: fnp.zeros_like(x, dtype=dtype), tree)


def tree_ones_like(tree: Any, dtype=None) -> Any:
    return _map(lambda x: fnp.ones_like(x, dtype=dtype), tree)


def tree_full_like(tree: Any, fill_value: Any, dtype=None) -> Any:
    return _map(lambda x: fnp.full_like(x, fill_value, dtype=dtype), tree)


def tree_clip(tree: Any, min_value: Any = None, max_value: Any = None) -> Any:
    """Each element clipped to [min_value, max_value], a None bound left open."""
    return _map(lambda x: fnp.clip(x, min_value, max_value), tree)


def tree_where(condition: Any, tree_x: Any, tree_y: Any) -> Any:
    """tree_x where `condition` (one boolean for all leaves, or one that broadcasts against
    each) holds, else tree_y."""
    return _map(lambda x, y: fnp.where(condition, x, y), tree_x, tree_y)


def tree_allclose(
    a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> Any:
    """Whether every leaf of `a` is close to its counterpart in `b` (fnp.allclose's test)."""
    close = [
        fnp.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)
        for x, y in zip(*_aligned_leaves(a, b))
    ]
    return functools.reduce(lambda p, q: p & q, close, fnp.asarray(True))


# -- moments ------------------------------------------------------------------------------------


def tree_update_moment(updates: Any, moments: Any, decay: float, order: int) -> Any:
    """(1 - decay) * g**order + decay * moment, leaf by leaf (None leaves stay None)."""
    return _map_present(lambda g, t: (1 - decay) * g**order + decay * t, updates, moments)


def tree_update_infinity_moment(updates: Any, moments: Any, decay: float, eps: float) -> Any:
    """max(|g| + eps, decay * moment): a decaying maximum of |g| (AdaMax)."""
    return _map_present(lambda g, t: fnp.maximum(fnp.abs(g) + eps, decay * t), updates, moments)


def tree_update_moment_per_elem_norm(updates: Any, moments: Any, decay: float, order: int) -> Any:
    """tree_update_moment of |g| rather than g, so complex gradients give real moments."""

    def norm_power(g):
        if not fnp.iscomplexobj(g):
            return g**order
        half = order / 2
        return abs_sq(g) ** (int(half) if half.is_integer() else half)

    return _map_present(lambda g, t: (1 - decay) * norm_power(g) + decay * t, updates, moments)


def tree_bias_correction(moment: Any, decay: float, count: Any) -> Any:
    """moment / (1 - decay**count): the moving average as if it had started at the data
    rather than at zero."""
    correction = 1 - decay ** fnp.asarray(count)
    return _map(lambda t: t / fnp.asarray(correction).astype(fnp.asarray(t).dtype), moment)


# -- dtypes -------------------------------------------------------------------------------------


def tree_cast(tree: Any, dtype) -> Any:
    """Every leaf in `dtype`; the tree unchanged when dtype is None."""
    if dtype is None:
        return tree
    return _map(lambda x: fnp.asarray(x).astype(dtype), tree)


def tree_cast_like(tree: Any, other_tree: Any) -> Any:
    """Each leaf in the dtype of its counterpart in `other_tree` (left as it is where that
    has no dtype)."""
    return _map(
        lambda x, other: fnp.asarray(x).astype(other.dtype) if hasattr(other, "dtype") else x,
        tree,
        other_tree,
    )


def tree_dtype(tree: Any, mixed_dtype_handler: str | None = None):
    """The dtype of the leaves. Leaves of several dtypes raise, naming each path that differs
    from the first, unless `mixed_dtype_handler` is "promote" (their promoted dtype),
    "highest" or "lowest" (the one each other leaf promotes to, or from)."""
    leaves_with_paths = tree_util.tree_leaves_with_path(tree)
    dtypes = [fnp.asarray(x).dtype for _, x in leaves_with_paths]
    if not dtypes:
        return fnp.asarray([]).dtype
    if mixed_dtype_handler is None:
        wrong = [
            f"{tree_util.keystr(path) or 'the root'} is {dtype}"
            for (path, _), dtype in zip(leaves_with_paths, dtypes)
            if dtype != dtypes[0]
        ]
        if wrong:
            raise ValueError(
                f"tree_dtype: the leaves' dtypes differ from the first leaf's {dtypes[0]}: "
                f"{'; '.join(wrong)} (pass mixed_dtype_handler to choose one)"
            )
        return dtypes[0]
    if mixed_dtype_handler == "promote":
        return functools.reduce(fnp.promote_types, dtypes)
    if mixed_dtype_handler == "highest":
        return functools.reduce(lambda a, b: b if _lower(a, b) == a else a, dtypes)
    if mixed_dtype_handler == "lowest":
        return functools.reduce(_lower, dtypes)
    raise ValueError(
        "tree_dtype: mixed_dtype_handler must be None, 'promote', 'highest' or 'lowest', "
        f"got {mixed_dtype_handler!r}"
    )


def _lower(a, b):
    """The one of two dtypes that promotes to the other."""
    promoted = dtypes.widened(a, b)
    if promoted == a:
        return b
    if promoted == b:
        return a
    raise ValueError(f"tree_dtype: neither of {a} and {b} promotes to the other")


# -- random -------------------------------------------------------------------------------------


def tree_split_key_like(rng_key: Any, target_tree: Any) -> Any:
    """One independent key per leaf of `target_tree`, in its structure."""
    treedef = tree_util.tree_structure(target_tree)
    keys = random.split(rng_key, treedef.num_leaves)
    return tree_util.tree_unflatten(treedef, list(keys))


def tree_random_like(
    rng_key: Any, target_tree: Any, sampler: Callable[..., Any] = random.normal, dtype=None
) -> Any:
    """A tree like `target_tree` of draws `sampler(key, shape, dtype)`, each leaf from its
    own key, in the leaf's dtype unless `dtype` is given."""
    keys = tree_split_key_like(rng_key, target_tree)
    return _map(
        lambda x, k: sampler(k, fnp.shape(x), dtype or fnp.asarray(x).dtype), target_tree, keys
    )


def tree_unwrap_random_key_data(input_tree: Any) -> Any:
    """The tree as it is: funcgrad's keys already are their uint32 data."""
    return input_tree
