"""GaLore (Zhao et al. 2024): gradient low-rank projection. Each matrix parameter's gradient
G (m x n) is projected onto its top `rank` singular vectors on the longer side, P^T G when
m >= n (else G P), the base optimizer (Adam) runs on that small proxy, and its update is
projected back, P U (else U P^T), times `scale`. P is recomputed from the gradient's SVD
every `update_proj_gap` steps, so the optimizer's moments take rank x n memory, not m x n.

A parameter of higher rank is a matrix through `GaLoreDimensionNumbers`: its reduction axes
flattened into the rows, its output axes into the columns. Leaves without dimension numbers
(by default those that are not matrices) reach the base optimizer whole."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import lax, tree_util
from funcgrad.optim.base import GradientTransformation, chain
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    _count,
    _next,
    add_decayed_weights,
    scale_by_adam,
    scale_by_learning_rate,
)


class GaLoreDimensionNumbers(NamedTuple):
    """Which axes of a parameter are its matrix's rows (reduction) and columns (output)."""

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


class GaLoreState(NamedTuple):
    count: Any  # int32 steps taken
    base_optimizer_state: Any  # the base optimizer's state for the projected gradients
    projector: Any  # per leaf: P (or an empty (0, 0) array where nothing is projected)


def _is_dims(x) -> bool:
    return x is None or isinstance(x, GaLoreDimensionNumbers)


def _matrix_view(x, dims: GaLoreDimensionNumbers):
    """(to_matrix, from_matrix) for leaves shaped like x."""
    if x.ndim < 2:
        raise ValueError(f"galore: a projected parameter needs rank >= 2, got shape {x.shape}")

    def normalized(axes):
        return tuple(a % x.ndim for a in ((axes,) if isinstance(axes, int) else axes))

    rows, cols = normalized(dims.reduction_axis), normalized(dims.output_axis)
    if set(rows) & set(cols) or len(set(rows) | set(cols)) != x.ndim:
        raise ValueError(
            f"galore: reduction axes {rows} and output axes {cols} must split the axes of a "
            f"parameter of shape {x.shape} between them"
        )
    order = rows + cols
    grouped_shape = tuple(x.shape[a] for a in order)
    matrix_shape = (math.prod(grouped_shape[: len(rows)]), math.prod(grouped_shape[len(rows) :]))
    inverse = tuple(sorted(range(x.ndim), key=lambda i: order[i]))
    return (
        lambda y: fnp.reshape(fnp.transpose(y, order), matrix_shape),
        lambda m: fnp.transpose(fnp.reshape(m, grouped_shape), inverse),
    )


def _dims_tree(weight_dimension_numbers, tree):
    """Dimension numbers (or None) per leaf of `tree`, as a tree like it."""
    if weight_dimension_numbers is None:
        return tree_util.tree_map(
            lambda p: GaLoreDimensionNumbers() if fnp.ndim(p) == 2 else None, tree
        )
    if callable(weight_dimension_numbers):
        return weight_dimension_numbers(tree)
    if isinstance(weight_dimension_numbers, GaLoreDimensionNumbers):
        return tree_util.tree_map(
            lambda p: weight_dimension_numbers if fnp.ndim(p) >= 2 else None, tree
        )
    return weight_dimension_numbers


def _projection_sizes(shape, rank):
    rows, cols = shape
    return rows >= cols, min(rank, rows, cols)


def scale_by_galore(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_dimension_numbers: Any = None,
) -> GradientTransformation:
    """The base optimizer (scale_by_adam by default) run on each matrix gradient projected
    to rank `rank`, its update projected back and multiplied by `scale`. Dimension numbers
    are one GaLoreDimensionNumbers for every leaf of rank >= 2, a tree of them (None for a
    leaf passed whole), or a function of the parameters returning such a tree."""
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise TypeError(f"galore: rank must be an int, got {type(rank).__name__}")
    if rank <= 0:
        raise ValueError(f"galore: rank must be positive, got {rank}")
    base = scale_by_adam() if base_optimizer is None else base_optimizer

    def per_leaf(f, dims, tree, *rest):
        return tree_util.tree_map(f, tree, *rest, dims, is_leaf=_is_dims)

    def init(params):
        def shapes(p, dims):
            p = fnp.asarray(p)
            if dims is None:
                return fnp.zeros((0, 0), p.dtype), fnp.zeros_like(p)
            to_matrix, _ = _matrix_view(p, dims)
            rows, cols = to_matrix(p).shape
            left, k = _projection_sizes((rows, cols), rank)
            projector = fnp.zeros((rows, k) if left else (cols, k), p.dtype)
            return projector, fnp.zeros((k, cols) if left else (rows, k), p.dtype)

        if not tree_util.tree_leaves(params):
            return GaLoreState(_count(), base.init(params), params)
        dims = _dims_tree(weight_dimension_numbers, params)
        projectors, proxies = _pairs(per_leaf(shapes, dims, params), params)
        return GaLoreState(_count(), base.init(proxies), projectors)

    def update(updates, state, params=None):
        refresh = (state.count % update_proj_gap) == 0

        def project(g, projector, dims):
            if dims is None:
                return g, projector
            to_matrix, _ = _matrix_view(g, dims)
            matrix = to_matrix(g)
            left, k = _projection_sizes(matrix.shape, rank)

            def fresh():
                u, _, vh = fnp.linalg.svd(matrix.astype(fnp.float32), full_matrices=False)
                vectors = u[:, :k] if left else vh[:k, :].T
                return vectors.astype(g.dtype)

            projector = lax.cond(refresh, fresh, lambda: projector)
            return (projector.T @ matrix if left else matrix @ projector), projector

        def back(low_rank, projector, g, dims):
            if dims is None:
                return low_rank
            to_matrix, from_matrix = _matrix_view(g, dims)
            left, _ = _projection_sizes(to_matrix(g).shape, rank)
            full = projector @ low_rank if left else low_rank @ projector.T
            return (scale * from_matrix(full)).astype(g.dtype)

        dims = _dims_tree(weight_dimension_numbers, updates)
        low_rank, projectors = _pairs(per_leaf(project, dims, updates, state.projector), updates)
        low_rank_updates, base_state = base.update(low_rank, state.base_optimizer_state, None)
        out = per_leaf(back, dims, low_rank_updates, projectors, updates)
        return out, GaLoreState(_next(state.count), base_state, projectors)

    return GradientTransformation(init, update)


def _pairs(tree_of_pairs, like):
    """A tree (like `like`) of 2-tuples as two trees."""
    return tree_util.tree_transpose(
        tree_util.tree_structure(like), tree_util.tree_structure((0, 0)), tree_of_pairs
    )


def galore(
    learning_rate: ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_decay: float = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
    weight_dimension_numbers: Any = None,
) -> GradientTransformation:
    """GaLore with decoupled weight decay, then the learning rate."""
    return chain(
        scale_by_galore(rank, update_proj_gap, scale, base_optimizer, weight_dimension_numbers),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )
