"""Learning-rate-free Adam: D-Adaptation (Defazio & Mishchenko 2023) and Prodigy (Mishchenko &
Defazio 2023) estimate D, the distance to a solution, from the gradients seen so far, and
step by D times the (scheduled) learning rate, which stays at 1 for most uses.

The estimate is a lower bound that only grows: a weighted sum of <g, s> (D-Adaptation) or
<g, x0 - x> (Prodigy) over the l1 norm of a weighted gradient sum s."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import GradientTransformationExtraArgs, zeros_like_tree
from funcgrad.optim.transforms import ScalarOrSchedule, _count, _map, _next
from funcgrad.optim.tree_utils import tree_dtype, tree_sum, tree_vdot


class DAdaptAdamWState(NamedTuple):
    exp_avg: Any
    exp_avg_sq: Any
    grad_sum: Any
    estim_lr: Any  # D, the distance estimate
    numerator_weighted: Any
    count: Any


class ProdigyState(NamedTuple):
    exp_avg: Any
    exp_avg_sq: Any
    grad_sum: Any
    params0: Any
    estim_lr: Any  # D, the distance estimate
    numerator_weighted: Any
    count: Any


def _needs_params(name: str, params) -> None:
    if params is None:
        raise ValueError(f"{name} needs params: call update(grads, state, params)")


def _adam_bias_correction(b1, b2, count):
    """sqrt(1 - b2**t) / (1 - b1**t), Adam's two corrections folded into the step size."""
    t = count.astype(fnp.float32)
    return fnp.sqrt(1 - b2**t) / (1 - b1**t)


def _l1(tree):
    return tree_sum(_map(fnp.abs, tree))


def dadapt_adamw(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    estim_lr0: float = 1e-6,
    weight_decay: float = 0.0,
) -> GradientTransformationExtraArgs:
    """AdamW by D-Adaptation: with step size dlr = D * lr * bias correction, the first moment
    accumulates dlr * g, and D grows to the ratio of sqrt(b2)-weighted sums of
    dlr * <g, s / (sqrt(v) + eps)> and of dlr * g (s). The step is -m / (sqrt(v) + eps) -
    weight_decay * dlr * params."""
    b1, b2 = betas
    sqrt_b2 = b2**0.5

    def init(params):
        dtype = tree_dtype(params, "lowest")
        zeros = zeros_like_tree(params)
        return DAdaptAdamWState(
            zeros, zeros, zeros, fnp.asarray(estim_lr0, dtype), fnp.zeros((), dtype), _count()
        )

    def update(updates, state, params=None, **extra_args):
        _needs_params("dadapt_adamw", params)
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        count = _next(state.count)
        dtype = state.numerator_weighted.dtype
        dlr = (state.estim_lr * lr * _adam_bias_correction(b1, b2, count)).astype(dtype)
        weighted_sum = _map(lambda s, v: s / (fnp.sqrt(v) + eps), state.grad_sum, state.exp_avg_sq)
        numerator_step = tree_vdot(updates, weighted_sum)
        exp_avg = _map(lambda m, g: b1 * m + (1 - b1) * dlr * g, state.exp_avg, updates)
        exp_avg_sq = _map(lambda v, g: b2 * v + (1 - b2) * g * g, state.exp_avg_sq, updates)
        grad_sum = _map(lambda s, g: sqrt_b2 * s + (1 - sqrt_b2) * dlr * g, state.grad_sum, updates)
        numerator = sqrt_b2 * state.numerator_weighted + (1 - sqrt_b2) * dlr * numerator_step
        estimate = numerator / ((1 - sqrt_b2) * _l1(grad_sum))
        estim_lr = fnp.maximum(state.estim_lr, estimate).astype(dtype)
        steps = _map(
            lambda m, v, p: -weight_decay * dlr * p - m / (fnp.sqrt(v) + eps),
            exp_avg,
            exp_avg_sq,
            params,
        )
        new_state = DAdaptAdamWState(
            exp_avg, exp_avg_sq, grad_sum, estim_lr, numerator.astype(dtype), count
        )
        return steps, new_state

    return GradientTransformationExtraArgs(init, update)


def prodigy(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    beta3: float | None = None,
    eps: float = 1e-8,
    estim_lr0: float = 1e-6,
    estim_lr_coef: float = 1.0,
    weight_decay: float = 0.0,
    safeguard_warmup: bool = False,
) -> GradientTransformationExtraArgs:
    """Prodigy: Adam's moments of D * g, and D the growing ratio of a beta3-weighted sum of
    (D / D0) * dlr * <g, x0 - x> to the l1 norm of s, the beta3-weighted sum of
    (dlr / D0) * D * g (D / D0 * D * g with safeguard_warmup), times estim_lr_coef; beta3
    defaults to sqrt(b2). The step is -dlr * m / (sqrt(v) + D * eps) - weight_decay * dlr *
    params, dlr = D * lr * bias correction."""
    b1, b2 = betas
    b3 = b2**0.5 if beta3 is None else beta3

    def init(params):
        dtype = tree_dtype(params, "lowest")
        zeros = zeros_like_tree(params)
        return ProdigyState(
            zeros,
            zeros,
            zeros,
            params,
            fnp.asarray(estim_lr0, dtype),
            fnp.zeros((), dtype),
            _count(),
        )

    def update(updates, state, params=None, **extra_args):
        _needs_params("prodigy", params)
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        count = _next(state.count)
        d = state.estim_lr
        dlr = (d * lr * _adam_bias_correction(b1, b2, count)).astype(d.dtype)
        scaled = _map(lambda g: d * g, updates)
        numerator_step = tree_vdot(updates, _map(lambda p0, p: p0 - p, state.params0, params))
        exp_avg = _map(lambda m, dg: b1 * m + (1 - b1) * dg, state.exp_avg, scaled)
        exp_avg_sq = _map(lambda v, dg: b2 * v + (1 - b2) * dg * dg, state.exp_avg_sq, scaled)
        sum_rate = d if safeguard_warmup else dlr
        grad_sum = _map(lambda s, dg: b3 * s + sum_rate * dg / estim_lr0, state.grad_sum, scaled)
        numerator = b3 * state.numerator_weighted + d / estim_lr0 * dlr * numerator_step
        estimate = estim_lr_coef * numerator / _l1(grad_sum)
        estim_lr = fnp.maximum(d, estimate).astype(d.dtype)
        steps = _map(
            lambda m, v, p: -weight_decay * dlr * p - dlr * m / (fnp.sqrt(v) + estim_lr * eps),
            exp_avg,
            exp_avg_sq,
            params,
        )
        new_state = ProdigyState(
            exp_avg,
            exp_avg_sq,
            grad_sum,
            state.params0,
            estim_lr,
            numerator.astype(d.dtype),
            count,
        )
        return steps, new_state

    return GradientTransformationExtraArgs(init, update)
