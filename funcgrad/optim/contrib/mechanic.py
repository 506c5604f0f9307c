"""Mechanic (Cutkosky, Defazio & Mehta 2023): a learned scale for any base optimizer.

The parameters are x0 + s * Delta, Delta the sum of the base optimizer's updates and s
chosen online by betting on the sign of <g, Delta> with several discount factors at once;
their scales are added. A base optimizer whose own learning rate is off by a constant
factor is corrected by s."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    with_extra_args_support,
)
from funcgrad.optim.transforms import _count, _map, _next
from funcgrad.optim.tree_utils import tree_dtype, tree_norm, tree_vdot


class MechanicState(NamedTuple):
    base_optimizer_state: Any
    count: Any
    r: Any  # per discount factor: the discounted reward
    m: Any  # per discount factor: the discounted maximum of |h|
    v: Any  # per discount factor: the discounted sum of h**2
    s: Any  # per discount factor: the scale
    x0: Any


def mechanize(
    base_optimizer: GradientTransformation,
    weight_decay: float = 0.01,
    eps: float = 1e-8,
    s_init: float = 1e-6,
    num_betas: int = 6,
) -> GradientTransformationExtraArgs:
    """`base_optimizer` scaled by Mechanic's s = sum of s_i over the discount factors
    beta_i = 1 - 0.1**i, i = 1..num_betas. Each step: h = <g + weight_decay * sum(s) * |g| /
    |x| * x, (x0 - x) / sum(s)>, m_i <- max(beta_i m_i, |h| + eps), v_i <- beta_i**2 v_i +
    h**2, r_i <- beta_i r_i + clip(h, -m_i, m_i) s_i (with the previous m_i), s_i =
    (s_init / num_betas * m_i + max(r_i, 0)) / (sqrt(v_i) + eps); then the parameters move
    to x0 + sum(s) * (Delta + base update), Delta = (x - x0) / sum(s) the past updates."""
    base_optimizer = with_extra_args_support(base_optimizer)
    betas = [1.0 - 0.1**i for i in range(1, num_betas + 1)]

    def init(params):
        dtype = tree_dtype(params, "lowest")
        zeros = fnp.zeros(num_betas, dtype)
        return MechanicState(
            base_optimizer.init(params),
            _count(),
            zeros,
            zeros,
            zeros,
            fnp.full(num_betas, s_init, dtype),
            params,
        )

    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("mechanize needs params: call update(grads, state, params)")
        base_updates, base_state = base_optimizer.update(
            updates, state.base_optimizer_state, params, **extra_args
        )
        # The parameters of the first update are the origin (those given to init, usually).
        x0 = _map(
            lambda p, p0: fnp.where(state.count == 0, p, p0).astype(p0.dtype), params, state.x0
        )
        dtype = state.s.dtype
        beta = fnp.asarray(betas, dtype)
        s_sum = fnp.sum(state.s)
        decay = weight_decay * s_sum * tree_norm(updates) / (tree_norm(params) + eps)
        decayed = _map(lambda g, p: g + decay * p, updates, params)
        delta = _map(lambda p, p0: (p - p0) / (s_sum + eps), params, x0)
        h = -tree_vdot(decayed, delta)
        clipped = fnp.clip(h, -state.m, state.m)
        m = fnp.maximum(beta * state.m, fnp.abs(h) + eps)
        v = beta**2 * state.v + h**2
        r = beta * state.r + clipped * state.s
        s = (s_init / num_betas * m + fnp.maximum(r, 0.0)) / (fnp.sqrt(v) + eps)
        new_params = _map(lambda p0, d, u: p0 + fnp.sum(s) * (d + u), x0, delta, base_updates)
        new_updates = _map(lambda new, p: (new - p).astype(p.dtype), new_params, params)
        new_state = MechanicState(
            base_state,
            _next(state.count),
            r.astype(dtype),
            m.astype(dtype),
            v.astype(dtype),
            s.astype(dtype),
            x0,
        )
        return new_updates, new_state

    return GradientTransformationExtraArgs(init, update)
