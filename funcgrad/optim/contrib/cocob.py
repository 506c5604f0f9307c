"""COCOB-Backprop (Orabona & Tommasi 2017): training without a learning rate by coin betting.
Each parameter bets a fraction of its winnings so far on the direction of the negative
gradients' sum; the fraction, and so the step, comes from the gradients alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import GradientTransformation, chain, zeros_like_tree
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    _map,
    add_decayed_weights,
    scale_by_learning_rate,
)


class COCOBState(NamedTuple):
    init_particles: Any  # the parameters at the start
    cumulative_gradients: Any  # minus the sum of the gradients
    scale: Any  # L: the largest |g| so far (from eps)
    subgradients: Any  # G: the sum of |g|
    reward: Any  # R: the winnings, never below 0


def scale_by_cocob(alpha: float = 100.0, eps: float = 1e-8) -> GradientTransformation:
    """Per element, with L <- max(L, |g|), G <- G + |g|, R <- max(R - g (x - x0), 0) and
    C <- C - g: the new parameter is x0 + C / (L max(G + L, alpha L)) (L + R), returned as
    the update to it."""

    def init(params):
        zeros = zeros_like_tree(params)
        scale = _map(lambda p: fnp.full_like(p, eps), params)
        return COCOBState(params, zeros, scale, zeros, zeros)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_cocob needs params: call update(grads, state, params)")
        scale = _map(lambda big_l, g: fnp.maximum(big_l, fnp.abs(g)), state.scale, updates)
        subgradients = _map(lambda big_g, g: big_g + fnp.abs(g), state.subgradients, updates)
        reward = _map(
            lambda r, g, p, p0: fnp.maximum(r - g * (p - p0), 0.0),
            state.reward,
            updates,
            params,
            state.init_particles,
        )
        cumulative = _map(lambda c, g: c - g, state.cumulative_gradients, updates)
        new_updates = _map(
            lambda p, p0, c, big_l, big_g, r: (
                p0 + c / (big_l * fnp.maximum(big_g + big_l, alpha * big_l)) * (big_l + r) - p
            ),
            params,
            state.init_particles,
            cumulative,
            scale,
            subgradients,
            reward,
        )
        new_state = COCOBState(state.init_particles, cumulative, scale, subgradients, reward)
        return new_updates, new_state

    return GradientTransformation(init, update)


def cocob(
    learning_rate: ScalarOrSchedule = 1.0,
    alpha: float = 100.0,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> GradientTransformation:
    """COCOB on the gradients plus weight_decay * params, scaled (not negated) by the
    learning rate, which stays 1 for the method as published."""
    return chain(
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate, flip_sign=False),
        scale_by_cocob(alpha, eps),
    )
