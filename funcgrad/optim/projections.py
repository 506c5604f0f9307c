"""Euclidean projections of a pytree onto convex sets (and the l1 and l2 spheres), with
Optax's `projections` names: the nearest point argmin_p ||x - p||^2 of the set, the tree
treated as one vector. Projected gradient descent applies one after each step
(`params = projection_simplex(apply_updates(params, updates))`)."""

from __future__ import annotations

from typing import Any

import funcgrad.numpy as fnp
from funcgrad import flatten_util, lax, tree_util
from funcgrad.optim.tree_utils import (
    tree_add_scale,
    tree_full_like,
    tree_mul,
    tree_norm,
    tree_scale,
    tree_vdot,
)
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = [
    "projection_box",
    "projection_halfspace",
    "projection_hypercube",
    "projection_hyperplane",
    "projection_l1_ball",
    "projection_l1_sphere",
    "projection_l2_ball",
    "projection_l2_sphere",
    "projection_linf_ball",
    "projection_non_negative",
    "projection_simplex",
    "projection_vector",
]


def projection_non_negative(tree: Any) -> Any:
    """Onto the non-negative orthant: each element's positive part."""
    return tree_util.tree_map(lambda x: fnp.maximum(x, 0), tree)


def projection_box(tree: Any, lower: Any, upper: Any) -> Any:
    """Onto lower <= p <= upper, elementwise; the bounds are scalars or trees like `tree`."""
    lower, upper = tree_util.tree_broadcast(lower, tree), tree_util.tree_broadcast(upper, tree)
    return tree_util.tree_map(fnp.clip, tree, lower, upper)


def projection_hypercube(tree: Any, scale: Any = 1) -> Any:
    """Onto 0 <= p <= scale (the unit hypercube by default)."""
    return projection_box(tree, 0, scale)


@custom_jvp
def _projection_unit_simplex(values):
    """The point of {p >= 0, sum p = 1} nearest `values` (a vector): values shifted by the
    one threshold tau that makes the positive parts sum to 1. Sorting decreasingly, tau is
    fixed by the largest k whose k-th value stays above (cumsum_k - 1) / k."""
    size = values.shape[0]
    descending = -fnp.sort(-values)
    partial_sums = fnp.cumsum(descending)
    ranks = fnp.arange(1, size + 1, dtype=values.dtype)
    in_support = descending - (partial_sums - 1) / ranks > 0
    support_size = fnp.count_nonzero(in_support)
    threshold = (partial_sums[support_size - 1] - 1) / support_size.astype(values.dtype)
    return fnp.maximum(values - threshold, 0)


@_projection_unit_simplex.defjvp
def _projection_unit_simplex_jvp(primals, tangents):
    """On the support S the projection is v - mean_S(v) + const, so its derivative removes
    the mean over S from the tangent there and is zero off S."""
    (values,), (tangent,) = primals, tangents
    projected = _projection_unit_simplex(values)
    support = (projected > 0).astype(values.dtype)
    mean_on_support = fnp.sum(support * tangent) / fnp.sum(support)
    return projected, support * (tangent - mean_on_support)


def projection_simplex(tree: Any, scale: Any = 1) -> Any:
    """Onto {p >= 0, sum of all elements = scale} (the probability simplex by default), the
    whole tree as one vector. Differentiable: the derivative is that of the nearest point on
    the face the result lies in."""
    values, unravel = flatten_util.ravel_pytree(tree)
    return unravel(scale * _projection_unit_simplex(values / scale))


def projection_l1_sphere(tree: Any, scale: Any = 1) -> Any:
    """Onto {||p||_1 = scale}: the magnitudes projected onto the simplex, the signs kept (a
    zero element has no sign and stays zero)."""
    magnitudes = projection_simplex(tree_util.tree_map(fnp.abs, tree), scale)
    return tree_mul(tree_util.tree_map(fnp.sign, tree), magnitudes)


def projection_l1_ball(tree: Any, scale: Any = 1) -> Any:
    """Onto {||p||_1 <= scale}: the tree itself inside, its l1-sphere projection outside."""
    return lax.cond(
        tree_norm(tree, ord=1) <= scale,
        lambda inside: inside,
        lambda outside: projection_l1_sphere(outside, scale),
        tree,
    )


def projection_l2_sphere(tree: Any, scale: Any = 1) -> Any:
    """Onto {||p||_2 = scale}: the tree rescaled (undefined at zero, as the projection is)."""
    return tree_scale(scale / tree_norm(tree), tree)


def projection_l2_ball(tree: Any, scale: Any = 1) -> Any:
    """Onto {||p||_2 <= scale}: rescaled only when outside."""
    squared_norm = tree_norm(tree, squared=True)
    return tree_scale(scale / fnp.sqrt(fnp.maximum(squared_norm, scale**2)), tree)


def projection_linf_ball(tree: Any, scale: Any = 1) -> Any:
    """Onto {max |p| <= scale}: each element clipped to [-scale, scale]."""
    return projection_box(tree, tree_full_like(tree, -scale), tree_full_like(tree, scale))


def projection_vector(x: Any, a: Any) -> Any:
    """Onto the line spanned by the tree `a`: (<x, a> / <a, a>) a."""
    return tree_scale(tree_vdot(x, a) / tree_vdot(a, a), a)


def projection_hyperplane(x: Any, a: Any, b: Any) -> Any:
    """Onto {<a, p> = b}: x moved along a by the signed excess."""
    return tree_add_scale(x, (b - tree_vdot(x, a)) / tree_vdot(a, a), a)


def projection_halfspace(x: Any, a: Any, b: Any) -> Any:
    """Onto {<a, p> <= b}: moved onto the boundary only when outside."""
    step = fnp.minimum((b - tree_vdot(x, a)) / tree_vdot(a, a), 0)
    return tree_add_scale(x, step, a)
