"""Distance over gradients (Ivgi et al. 2023, DoG) and its distance-weighted variant
(Khaled et al. 2023, DoWG): parameter-free step sizes, the distance travelled from the
start over the root of the summed squared gradient norms, taken over the whole tree (the
per-leaf variant is `optim.scale_by_distance_over_gradients`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import GradientTransformation, chain, identity
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    _map,
    add_decayed_weights,
    scale_by_learning_rate,
)
from funcgrad.optim.tree_utils import tree_dtype, tree_norm, tree_sub

_DOG_INIT_STEPS = ("distance", "learning_rate", "heuristic")


class DoGState(NamedTuple):
    is_init_step: Any
    init_params: Any
    max_dist: Any  # the largest distance from init_params so far
    sum_sq_norm_grads: Any


class DoWGState(NamedTuple):
    init_params: Any
    weighted_sq_norm_grads: Any  # sum of estim_sq_dist_t * |g_t|**2
    estim_sq_dist: Any  # the largest squared distance from init_params so far


def scale_by_dog(init_step: tuple[str, float], eps: float = 1e-8) -> GradientTransformation:
    """g * r / sqrt(sum of |g|**2 + eps), r the largest distance of the parameters from
    their start (the whole tree as one vector). r starts at the init_step's value:
    ("distance", r0), ("heuristic", c) for c * (1 + |x0|), or ("learning_rate", lr) to take
    the first step with lr and r from 0."""
    kind, value = init_step
    if kind not in _DOG_INIT_STEPS:
        raise ValueError(
            f"scale_by_dog: init_step must be one of {_DOG_INIT_STEPS} with a value, got {kind!r}"
        )

    def init(params):
        dtype = tree_dtype(params, "lowest")
        start = {"distance": value, "learning_rate": 0.0}.get(kind)
        if start is None:
            start = value * (1 + tree_norm(params))
        return DoGState(fnp.asarray(True), params, fnp.asarray(start, dtype), fnp.zeros((), dtype))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_dog needs params: call update(grads, state, params)")
        max_dist = fnp.maximum(state.max_dist, tree_norm(tree_sub(state.init_params, params)))
        total = state.sum_sq_norm_grads + tree_norm(updates, squared=True)
        step = max_dist / fnp.sqrt(total + eps)
        if kind == "learning_rate":
            step = fnp.where(state.is_init_step, value, step)
        new_updates = _map(lambda g: (step * g).astype(g.dtype), updates)
        return new_updates, DoGState(
            fnp.asarray(False),
            state.init_params,
            max_dist.astype(state.max_dist.dtype),
            total.astype(state.sum_sq_norm_grads.dtype),
        )

    return GradientTransformation(init, update)


def _decayed(weight_decay, mask):
    return identity() if weight_decay is None else add_decayed_weights(weight_decay, mask)


def dog(
    learning_rate: ScalarOrSchedule = 1.0,
    init_step: tuple[str, float] = ("heuristic", 1e-6),
    eps: float = 1e-8,
    weight_decay: float | None = None,
    mask: Any | Callable[[Any], Any] | None = None,
) -> GradientTransformation:
    """DoG's step on the gradients (plus weight_decay * params when given), times the
    learning rate (a multiplier, 1 for DoG as published)."""
    return chain(
        _decayed(weight_decay, mask),
        scale_by_dog(init_step, eps),
        scale_by_learning_rate(learning_rate),
    )


def scale_by_dowg(
    init_estim_sq_dist: float | None = None, eps: float = 1e-4
) -> GradientTransformation:
    """g * d2 / (sqrt(sum of d2_t |g_t|**2) + eps), d2 the largest squared distance from the
    start so far (from init_estim_sq_dist, eps when None), each step's squared gradient norm
    weighted by the d2 of its step."""

    def init(params):
        dtype = tree_dtype(params, "lowest")
        start = eps if init_estim_sq_dist is None else init_estim_sq_dist
        return DoWGState(params, fnp.zeros((), dtype), fnp.asarray(start, dtype))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_dowg needs params: call update(grads, state, params)")
        sq_dist = tree_norm(tree_sub(state.init_params, params), squared=True)
        estim = fnp.maximum(state.estim_sq_dist, sq_dist)
        weighted = state.weighted_sq_norm_grads + estim * tree_norm(updates, squared=True)
        step = estim / (fnp.sqrt(weighted) + eps)
        new_updates = _map(lambda g: (step * g).astype(g.dtype), updates)
        dtype = state.estim_sq_dist.dtype
        return new_updates, DoWGState(
            state.init_params, weighted.astype(dtype), estim.astype(dtype)
        )

    return GradientTransformation(init, update)


def dowg(
    learning_rate: ScalarOrSchedule = 1.0,
    init_estim_sq_dist: float | None = None,
    eps: float = 1e-4,
    weight_decay: float | None = None,
    mask: Any | Callable[[Any], Any] | None = None,
) -> GradientTransformation:
    """DoWG's step on the gradients (plus weight_decay * params when given), times the
    learning rate (1 as published)."""
    return chain(
        _decayed(weight_decay, mask),
        scale_by_dowg(init_estim_sq_dist, eps),
        scale_by_learning_rate(learning_rate),
    )
