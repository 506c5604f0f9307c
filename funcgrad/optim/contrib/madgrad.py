"""MADGRAD (Defazio & Jelassi 2021): dual averaging with momentum and a cube-root adaptive
denominator. The gradient sums are weighted by lambda_k = lr * sqrt(k + 1), so later steps
count more, and the parameters move a fraction (1 - momentum) of the way to the dual
averaging point each step."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import GradientTransformation, chain, zeros_like_tree
from funcgrad.optim.transforms import ScalarOrSchedule, _count, _map, _next, add_decayed_weights


class MadgradState(NamedTuple):
    count: Any
    grad_sum_sq: Any  # sum of lambda_k g_k**2
    s: Any  # sum of lambda_k g_k
    x0: Any


def scale_by_madgrad(
    learning_rate: ScalarOrSchedule, momentum: float = 0.9, eps: float = 1e-6
) -> GradientTransformation:
    """With lambda_k = (lr + eps) sqrt(k + 1): nu <- nu + lambda_k g**2, s <- s + lambda_k g,
    z = x0 - s / (cbrt(nu) + eps), and the parameters move to (1 - momentum) z + momentum x
    (returned as the update to them)."""

    def init(params):
        zeros = zeros_like_tree(params)
        return MadgradState(_count(), zeros, zeros, params)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_madgrad needs params: call update(grads, state, params)")
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        weight = (lr + eps) * fnp.sqrt(state.count.astype(fnp.float32) + 1)
        grad_sum_sq = _map(
            lambda nu, g: nu + (weight * g * g).astype(g.dtype), state.grad_sum_sq, updates
        )
        s = _map(lambda s_, g: s_ + (weight * g).astype(g.dtype), state.s, updates)
        z = _map(lambda x0, s_, nu: x0 - s_ / (fnp.cbrt(nu) + eps), state.x0, s, grad_sum_sq)
        new_updates = _map(
            lambda z_, x: ((1 - momentum) * z_ + momentum * x - x).astype(x.dtype), z, params
        )
        return new_updates, MadgradState(_next(state.count), grad_sum_sq, s, state.x0)

    return GradientTransformation(init, update)


def madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    eps: float = 1e-6,
) -> GradientTransformation:
    """MADGRAD on the gradients plus weight_decay * params."""
    return chain(add_decayed_weights(weight_decay), scale_by_madgrad(learning_rate, momentum, eps))
