"""Optimizers as chains of transformations, with Optax's names, signatures and defaults."""

from __future__ import annotations

from funcgrad.optim.base import GradientTransformation, chain, identity
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    add_decayed_weights,
    scale_by_adam,
    scale_by_learning_rate,
    scale_by_lion,
    scale_by_rms,
    scale_by_rss,
    scale_by_stddev,
    trace,
)


def sgd(
    learning_rate: ScalarOrSchedule, momentum: float | None = None, nesterov: bool = False
) -> GradientTransformation:
    return chain(
        trace(momentum, nesterov) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate),
    )


def adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> GradientTransformation:
    return chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate))


def adamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 1e-4,
    mask=None,
) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter), scaled by the learning rate."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def rmsprop(
    learning_rate: ScalarOrSchedule,
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    centered: bool = False,
    momentum: float | None = None,
    nesterov: bool = False,
) -> GradientTransformation:
    scaling = scale_by_stddev if centered else scale_by_rms
    return chain(
        scaling(decay, eps, initial_scale),
        scale_by_learning_rate(learning_rate),
        trace(momentum, nesterov) if momentum is not None else identity(),
    )


def adagrad(
    learning_rate: ScalarOrSchedule, initial_accumulator_value: float = 0.1, eps: float = 1e-7
) -> GradientTransformation:
    return chain(
        scale_by_rss(initial_accumulator_value, eps), scale_by_learning_rate(learning_rate)
    )


def lion(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.99,
    weight_decay: float = 1e-3,
    mask=None,
) -> GradientTransformation:
    return chain(
        scale_by_lion(b1, b2),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )
