"""Reduce the learning rate when the loss stops improving: a factor on the updates, cut by
`factor` after `patience` accumulated measurements without improvement."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import GradientTransformationExtraArgs
from funcgrad.optim.transforms import _count, _map, _next
from funcgrad.optim.tree_utils import tree_dtype


class ReduceLROnPlateauState(NamedTuple):
    scale: Any  # the factor the updates are multiplied by
    best_value: Any
    plateau_count: Any  # measurements since the best one
    cooldown_count: Any  # measurements left before the plateau counts again
    count: Any  # values in the current average
    avg_value: Any


def reduce_on_plateau(
    factor: float = 0.1,
    patience: int = 10,
    rtol: float = 1e-4,
    atol: float = 0.0,
    cooldown: int = 0,
    accumulation_size: int = 1,
    min_scale: float = 0.0,
) -> GradientTransformationExtraArgs:
    """The updates times a scale, starting at 1. Pass the loss as `update(..., value=loss)`;
    every `accumulation_size` calls their mean is one measurement. A measurement below (1 -
    rtol) * best - atol is an improvement; after `patience` measurements without one the
    scale is multiplied by `factor` (not below min_scale), and then `cooldown` measurements
    pass before the plateau is counted again."""
    if not 0.0 < factor < 1.0:
        raise ValueError(f"reduce_on_plateau: factor must be in (0, 1), got {factor}")
    if rtol < 0.0 or atol < 0.0:
        raise ValueError(
            f"reduce_on_plateau: rtol and atol must be non-negative, got {rtol} and {atol}"
        )
    if rtol == 0.0 and atol == 0.0:
        raise ValueError("reduce_on_plateau: one of rtol and atol must be positive")
    if rtol > 1.0:
        raise ValueError(f"reduce_on_plateau: rtol must be at most 1, got {rtol}")

    def init(params):
        low, high = tree_dtype(params, "lowest"), tree_dtype(params, "highest")
        return ReduceLROnPlateauState(
            fnp.asarray(1.0, low),
            fnp.asarray(fnp.inf, high),
            _count(),
            _count(),
            _count(),
            fnp.asarray(0.0, high),
        )

    def measure(state, average):
        improved = average < (1 - rtol) * state.best_value - atol
        best = fnp.where(improved, average, state.best_value).astype(state.best_value.dtype)
        plateau = fnp.where(improved, 0, _next(state.plateau_count))
        cooling = state.cooldown_count > 0
        reduce = ~cooling & (plateau == patience)
        reduced = fnp.maximum(fnp.where(reduce, state.scale * factor, state.scale), min_scale)
        scale = fnp.where(cooling, state.scale, reduced).astype(state.scale.dtype)
        plateau = fnp.where(cooling | reduce, 0, plateau).astype(fnp.int32)
        cooldown_count = fnp.where(
            cooling, state.cooldown_count - 1, fnp.where(reduce, cooldown, 0)
        ).astype(fnp.int32)
        return scale, best, plateau, cooldown_count

    def update(updates, state, params=None, *, value, **extra_args):
        count = _next(state.count)
        dtype = state.avg_value.dtype
        average = (
            (state.count * state.avg_value + fnp.asarray(value).astype(dtype)) / count
        ).astype(dtype)
        full = count == accumulation_size
        scale, best, plateau, cooldown_count = measure(state, average)
        new_state = ReduceLROnPlateauState(
            fnp.where(full, scale, state.scale).astype(state.scale.dtype),
            fnp.where(full, best, state.best_value).astype(state.best_value.dtype),
            fnp.where(full, plateau, state.plateau_count).astype(fnp.int32),
            fnp.where(full, cooldown_count, state.cooldown_count).astype(fnp.int32),
            fnp.where(full, 0, count).astype(fnp.int32),
            fnp.where(full, 0.0, average).astype(dtype),
        )
        scaled = _map(lambda g: new_state.scale.astype(g.dtype) * g, updates)
        return scaled, new_state

    return GradientTransformationExtraArgs(init, update)
