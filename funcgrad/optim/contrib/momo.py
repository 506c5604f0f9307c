"""MoMo (Schaipp et al. 2023): momentum with a Polyak-type adaptive step. A model of the loss
built from averaged values, gradients and <g, x> products, truncated at a lower bound of the
loss, sets the step tau = min(lr, (model - bound) / |d|**2); pass the loss as
`update(grads, state, params, value=loss)`."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import GradientTransformationExtraArgs, zeros_like_tree
from funcgrad.optim.transforms import ScalarOrSchedule, _count, _map, _next
from funcgrad.optim.tree_utils import tree_dtype, tree_norm, tree_vdot


class MomoState(NamedTuple):
    exp_avg: Any  # d: the averaged gradient
    barf: Any  # the averaged loss
    gamma: Any  # the averaged <g, x>
    lb: Any  # the lower bound of the loss
    count: Any


class MomoAdamState(NamedTuple):
    exp_avg: Any
    exp_avg_sq: Any
    barf: Any
    gamma: Any
    lb: Any
    count: Any


def _check(name: str, params, value) -> None:
    if params is None:
        raise ValueError(f"{name} needs params: call update(grads, state, params, value=loss)")
    if value is None:
        raise ValueError(f"{name} needs the loss: call update(grads, state, params, value=loss)")


def _init_scalars(params, lower_bound):
    dtype = tree_dtype(params, "lowest")
    return fnp.zeros((), dtype), fnp.zeros((), dtype), fnp.asarray(lower_bound, dtype)


def momo(
    learning_rate: ScalarOrSchedule = 1.0,
    beta: float = 0.9,
    lower_bound: float = 0.0,
    weight_decay: float = 0.0,
    adapt_lower_bound: bool = False,
) -> GradientTransformationExtraArgs:
    """MoMo on SGD with momentum: d, f_bar and gamma average g, the loss and <g, x> with
    weight beta (the first step takes them as they are); with lr = alpha and lam =
    weight_decay, tau = min(alpha, max((1 + alpha lam)(f_bar - lb - gamma) + <d, x>, 0) /
    |d|**2) (0 where |d|**2 is below the float epsilon), and the step is -tau d - alpha lam /
    (1 + alpha lam) x. adapt_lower_bound updates lb online from the model (never below
    lower_bound)."""

    def init(params):
        barf, gamma, lb = _init_scalars(params, lower_bound)
        return MomoState(zeros_like_tree(params), barf, gamma, lb, _count())

    def update(updates, state, params=None, *, value=None, **extra_args):
        _check("momo", params, value)
        dtype = state.barf.dtype
        b = fnp.where(state.count == 0, 0.0, beta).astype(dtype)
        barf = b * state.barf + (1 - b) * fnp.asarray(value).astype(dtype)
        exp_avg = _map(lambda d, g: b * d + (1 - b) * g, state.exp_avg, updates)
        gamma = b * state.gamma + (1 - b) * tree_vdot(updates, params)
        d_norm_sq = tree_norm(exp_avg, squared=True)
        inner = tree_vdot(exp_avg, params)
        alpha = learning_rate(state.count) if callable(learning_rate) else learning_rate
        shrink = 1 + alpha * weight_decay
        lb = state.lb
        if adapt_lower_bound:
            cap = shrink * (barf - gamma) + inner
            lb = fnp.where(cap < shrink * lb, fnp.maximum(cap / (2 * shrink), lower_bound), lb)
        polyak = fnp.maximum(shrink * (barf - lb - gamma) + inner, 0.0) / d_norm_sq
        polyak = fnp.where(d_norm_sq <= fnp.finfo(dtype).eps, 0.0, polyak)
        tau = fnp.minimum(alpha, polyak)
        steps = _map(lambda d, p: -(alpha * weight_decay) / shrink * p - tau * d, exp_avg, params)
        new_lb = state.lb
        if adapt_lower_bound:
            new_lb = fnp.maximum(barf + inner - gamma - tau * d_norm_sq / 2, lower_bound)
        new_state = MomoState(
            exp_avg,
            barf,
            gamma.astype(dtype),
            fnp.asarray(new_lb).astype(dtype),
            _next(state.count),
        )
        return steps, new_state

    return GradientTransformationExtraArgs(init, update)


def momo_adam(
    learning_rate: ScalarOrSchedule = 1e-2,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    lower_bound: float = 0.0,
    weight_decay: float = 0.0,
    adapt_lower_bound: bool = False,
) -> GradientTransformationExtraArgs:
    """MoMo on Adam: as momo with averages of weight b1 (bias-corrected through bc1 = 1 -
    b1**t), the norm |d|**2 and step taken in Adam's metric D = eps + sqrt(v / (1 -
    b2**t)): tau = min(alpha / bc1, max((1 + alpha lam)(f_bar - bc1 lb - gamma) + <d, x>,
    0) / <d, d / D>), and the step is -tau d / D - alpha lam / (1 + alpha lam) x."""

    def init(params):
        barf, gamma, lb = _init_scalars(params, lower_bound)
        zeros = zeros_like_tree(params)
        return MomoAdamState(zeros, zeros, barf, gamma, lb, _count())

    def update(updates, state, params=None, *, value=None, **extra_args):
        _check("momo_adam", params, value)
        dtype = state.barf.dtype
        count = _next(state.count)
        t = count.astype(dtype)
        barf = b1 * state.barf + (1 - b1) * fnp.asarray(value).astype(dtype)
        exp_avg = _map(lambda d, g: b1 * d + (1 - b1) * g, state.exp_avg, updates)
        exp_avg_sq = _map(lambda v, g: b2 * v + (1 - b2) * g * g, state.exp_avg_sq, updates)
        bc2 = 1 - b2**t
        metric = _map(lambda v: eps + fnp.sqrt(v / bc2), exp_avg_sq)
        d_norm_sq = tree_vdot(exp_avg, _map(lambda d, m: d / m, exp_avg, metric))
        gamma = b1 * state.gamma + (1 - b1) * tree_vdot(updates, params)
        inner = tree_vdot(exp_avg, params)
        alpha = learning_rate(state.count) if callable(learning_rate) else learning_rate
        bc1 = 1 - b1**t
        shrink = 1 + alpha * weight_decay
        lb = state.lb
        if adapt_lower_bound:
            cap = shrink * (barf - gamma) + inner
            lb = fnp.where(
                cap < shrink * bc1 * lb, fnp.maximum(cap / (2 * bc1 * shrink), lower_bound), lb
            )
        polyak = fnp.maximum(shrink * (barf - bc1 * lb - gamma) + inner, 0.0) / d_norm_sq
        polyak = fnp.where(d_norm_sq <= fnp.finfo(dtype).eps, 0.0, polyak)
        tau = fnp.minimum(alpha / bc1, polyak)
        steps = _map(
            lambda d, m, p: -(alpha * weight_decay) / shrink * p - tau * d / m,
            exp_avg,
            metric,
            params,
        )
        new_lb = state.lb
        if adapt_lower_bound:
            new_lb = fnp.maximum((barf + inner - gamma - tau * d_norm_sq / 2) / bc1, lower_bound)
        new_state = MomoAdamState(
            exp_avg,
            exp_avg_sq,
            barf,
            gamma.astype(dtype),
            fnp.asarray(new_lb).astype(dtype),
            count,
        )
        return steps, new_state

    return GradientTransformationExtraArgs(init, update)
