"""Second moments in less memory than the parameters: Adafactor's factored estimate (a row
and a column statistic per matrix) and SM3's cover of per-axis maxima."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

import funcgrad.numpy as fnp
from funcgrad import lax, tree_util
from funcgrad.optim.base import GradientTransformation, abs_sq, check_matches, zeros_like_tree
from funcgrad.optim.transforms import _count, _ema, _next


class FactoredState(NamedTuple):
    count: Any
    v_row: Any  # per leaf: the row statistic of a factored leaf, else a (1,) placeholder
    v_col: Any  # per leaf: the column statistic of a factored leaf, else a (1,) placeholder
    v: Any  # per leaf: the full second moment of an unfactored leaf, else a (1,) placeholder


class ScaleBySM3State(NamedTuple):
    mu: Any  # per leaf: a list of per-axis accumulators (the leaf's own shape below rank 2)
    nu: Any  # the momentum of the scaled updates


def _factored_axes(shape, factored: bool, min_dim_size_to_factor: int):
    """(second largest axis, largest axis) of a leaf whose two largest sizes are both at least
    min_dim_size_to_factor, else None (the second moment is then kept whole)."""
    if not factored or len(shape) < 2:
        return None
    by_size = np.argsort(shape, kind="stable")
    if shape[by_size[-2]] < min_dim_size_to_factor:
        return None
    return int(by_size[-2]), int(by_size[-1])


def _unzip(treedef, per_leaf: list[tuple], count: int) -> list:
    """`count` trees of structure `treedef` from one tuple of `count` values per leaf."""
    return [tree_util.tree_unflatten(treedef, [t[i] for t in per_leaf]) for i in range(count)]


def _decay_rate_pow(step, exponent: float = 0.8):
    """1 - (step + 1) ** -exponent: Adafactor's second-moment decay, 0 at the first step."""
    return 1.0 - (step + 1).astype(fnp.float32) ** (-exponent)


def scale_by_factored_rms(
    factored: bool = True,
    decay_rate: float = 0.8,
    step_offset: int = 0,
    min_dim_size_to_factor: int = 128,
    epsilon: float = 1e-30,
    decay_rate_fn=_decay_rate_pow,
) -> GradientTransformation:
    """Adafactor's scaling (Shazeer & Stern): g / sqrt(v) with v the decaying mean of
    |g|**2 + epsilon, the decay decay_rate_fn(count - step_offset, decay_rate). For a leaf
    whose two largest axes are long enough, v is the outer product of its row and column
    means (normalised by the rows' mean), so it keeps n + m numbers instead of n * m."""

    def init_leaf(p):
        p = fnp.asarray(p)
        placeholder = fnp.zeros((1,), p.dtype)
        axes = _factored_axes(p.shape, factored, min_dim_size_to_factor)
        if axes is None:
            return placeholder, placeholder, fnp.zeros_like(p)
        second, largest = axes
        row = fnp.zeros(np.delete(p.shape, largest), p.dtype)
        col = fnp.zeros(np.delete(p.shape, second), p.dtype)
        return row, col, placeholder

    def init(params):
        leaves, treedef = tree_util.tree_flatten(params)
        rows, cols, full = _unzip(treedef, [init_leaf(p) for p in leaves], 3)
        return FactoredState(_count(), rows, cols, full)

    def update_leaf(g, v_row, v_col, v, decay):
        g = fnp.asarray(g)
        g_sq = abs_sq(g) + epsilon
        axes = _factored_axes(g.shape, factored, min_dim_size_to_factor)
        if axes is None:
            v = (decay * v + (1 - decay) * g_sq).astype(v.dtype)
            return g * v**-0.5, v_row, v_col, v
        second, largest = axes
        v_row = (decay * v_row + (1 - decay) * fnp.mean(g_sq, axis=largest)).astype(v_row.dtype)
        v_col = (decay * v_col + (1 - decay) * fnp.mean(g_sq, axis=second)).astype(v_col.dtype)
        second_in_row = second - 1 if second > largest else second
        row_factor = (v_row / fnp.mean(v_row, axis=second_in_row, keepdims=True)) ** -0.5
        col_factor = v_col**-0.5
        scaled = g * fnp.expand_dims(row_factor, largest) * fnp.expand_dims(col_factor, second)
        return scaled, v_row, v_col, v

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(
                "scale_by_factored_rms needs params: call update(grads, state, params)"
            )
        check_matches(updates, params, "gradients", "parameters")
        decay = decay_rate_fn(state.count - step_offset, decay_rate)
        leaves, treedef = tree_util.tree_flatten(updates)
        parts = [tree_util.tree_leaves(part) for part in (state.v_row, state.v_col, state.v)]
        results = [update_leaf(g, r, c, v, decay) for g, r, c, v in zip(leaves, *parts)]
        scaled, rows, cols, full = _unzip(treedef, results, 4)
        return scaled, FactoredState(_next(state.count), rows, cols, full)

    return GradientTransformation(init, update)


def _reject_complex(params, name: str) -> None:
    for leaf in tree_util.tree_leaves(params):
        if fnp.iscomplexobj(leaf):
            raise ValueError(
                f"{name} takes real parameters only; got a leaf of dtype {fnp.asarray(leaf).dtype}"
            )


def scale_by_sm3(b1: float = 0.9, b2: float = 1.0, eps: float = 1e-8) -> GradientTransformation:
    """SM3 (Anil et al.): the second-moment accumulator of a rank-k leaf is covered by k
    vectors, one per axis; each element's accumulator is the smallest of its k covers plus
    g**2 (times 1 - b2 when b2 < 1, the covers times b2), and each cover keeps the maximum of
    the accumulator over the other axes. The step is the momentum (b1) of g / sqrt(acc)."""
    keep = b2
    add = 1.0 - b2 if b2 != 1.0 else 1.0

    def covers_for(p):
        p = fnp.asarray(p)
        if p.ndim < 2:
            return [fnp.zeros_like(p)]
        return [fnp.zeros((size,), p.dtype) for size in p.shape]

    def init(params):
        _reject_complex(params, "scale_by_sm3")
        return ScaleBySM3State(tree_util.tree_map(covers_for, params), zeros_like_tree(params))

    def accumulate(g, covers):
        g = fnp.asarray(g)
        if g.ndim < 2:
            return add * g * g + keep * covers[0]
        smallest = None
        for axis, cover in enumerate(covers):
            shape = [1] * g.ndim
            shape[axis] = g.shape[axis]
            cover = fnp.reshape(cover, shape)
            smallest = cover if smallest is None else fnp.minimum(smallest, cover)
        return add * g * g + keep * smallest

    def new_covers(acc):
        if acc.ndim < 2:
            return [acc]
        return [
            fnp.max(acc, axis=tuple(a for a in range(acc.ndim) if a != axis))
            for axis in range(acc.ndim)
        ]

    def update(updates, state, params=None):
        _reject_complex(updates, "scale_by_sm3")
        check_matches(updates, state.nu, "gradients", "optimizer state")
        acc = tree_util.tree_map(accumulate, updates, state.mu)
        scaled = tree_util.tree_map(
            lambda g, a: g * fnp.where(a > 0, lax.rsqrt(a + eps), 0.0).astype(a.dtype),
            updates,
            acc,
        )
        nu = _ema(scaled, state.nu, b1)
        return nu, ScaleBySM3State(tree_util.tree_map(new_covers, acc), nu)

    return GradientTransformation(init, update)
