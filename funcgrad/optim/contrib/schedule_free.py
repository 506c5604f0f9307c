"""Schedule-free optimization (Defazio et al. 2024, "The Road Less Scheduled"): no
learning-rate decay, and an average of the iterates in its place, kept online.

Three sequences: z takes the base optimizer's steps, x is the running weighted average of the
z's, and gradients are taken at y = b1 * x + (1 - b1) * z. The parameters the optimizer hands
out (and receives) are y; `schedule_free_eval_params` recovers x, the point to evaluate and
to keep at the end of training."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    chain,
    with_extra_args_support,
)
from funcgrad.optim.optimizers import sgd
from funcgrad.optim.schedules import warmup_constant_schedule
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    _map,
    _next,
    add_decayed_weights,
    scale_by_learning_rate,
    scale_by_rms,
)
from funcgrad.optim.tree_utils import tree_cast, tree_dtype


class ScheduleFreeState(NamedTuple):
    b1: Any
    weight_sum: Any  # the sum of the averaging weights so far
    step_count: Any  # int32, from 1
    max_lr: Any  # the largest learning rate so far
    base_optimizer_state: Any
    z: Any


def schedule_free_eval_params(state: ScheduleFreeState, params: Any) -> Any:
    """x = (y - (1 - b1) * z) / b1: the averaged iterate, from the parameters y and the
    optimizer's state (the ScheduleFreeState itself, not a chain's tuple holding it)."""
    b1, z = getattr(state, "b1", None), getattr(state, "z", None)
    if b1 is None or z is None:
        raise ValueError(
            "schedule_free_eval_params needs the ScheduleFreeState of schedule_free, got "
            f"{type(state).__name__}"
        )
    return _map(lambda y, z_leaf: (y - (1 - b1) * z_leaf) / b1, params, z)


def schedule_free(
    base_optimizer: GradientTransformation,
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    weight_lr_power: float = 2.0,
    state_dtype=None,
) -> GradientTransformationExtraArgs:
    """`base_optimizer` (its learning rate included) made schedule-free: its updates move z,
    x <- (1 - c) x + c z with c = w_t / (w_1 + ... + w_t), w_t = max_lr_t ** weight_lr_power,
    and the update moves the parameters to b1 * x + (1 - b1) * z. `learning_rate` (the
    base optimizer's, for the weights) is read at step counts from 1. z is kept in
    `state_dtype` when given."""
    base_optimizer = with_extra_args_support(base_optimizer)

    def init(params):
        dtype = tree_dtype(params, "lowest")
        return ScheduleFreeState(
            b1=fnp.asarray(b1, dtype),
            weight_sum=fnp.zeros((), dtype),
            step_count=fnp.ones((), fnp.int32),
            max_lr=fnp.zeros((), dtype),
            base_optimizer_state=base_optimizer.init(params),
            z=tree_cast(params, state_dtype),
        )

    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("schedule_free needs params: call update(grads, state, params)")
        lr = learning_rate(state.step_count) if callable(learning_rate) else learning_rate
        max_lr = fnp.maximum(state.max_lr, fnp.asarray(lr).astype(state.max_lr.dtype))
        weight = max_lr**weight_lr_power
        weight_sum = state.weight_sum + weight
        # c is 0 while every weight is (a learning rate warming up from 0); NaN stays NaN.
        c = fnp.where(weight_sum == 0, 0.0, weight / weight_sum).astype(weight_sum.dtype)
        steps, base_state = base_optimizer.update(
            updates, state.base_optimizer_state, params, **extra_args
        )
        z = _map(lambda z_leaf, u: (z_leaf + u).astype(z_leaf.dtype), state.z, steps)
        x_prev = _map(lambda y, z_leaf: (y - (1 - b1) * z_leaf) / b1, params, state.z)
        x = _map(lambda x_leaf, z_leaf: (1 - c) * x_leaf + c * z_leaf, x_prev, z)
        new_updates = _map(
            lambda x_leaf, z_leaf, y: (b1 * x_leaf + (1 - b1) * z_leaf - y).astype(y.dtype),
            x,
            z,
            params,
        )
        new_state = ScheduleFreeState(
            state.b1, weight_sum, _next(state.step_count), max_lr, base_state, z
        )
        return new_updates, new_state

    return GradientTransformationExtraArgs(init, update)


def _warmed_up(learning_rate, warmup_steps):
    if warmup_steps is None:
        return learning_rate
    return warmup_constant_schedule(0.0, learning_rate, warmup_steps)


def schedule_free_sgd(
    learning_rate: float = 1.0,
    warmup_steps: int | None = None,
    b1: float = 0.9,
    weight_decay: float | None = None,
    weight_lr_power: float = 2.0,
    state_dtype=None,
) -> GradientTransformationExtraArgs:
    """Schedule-free SGD, with a linear warmup from 0 over `warmup_steps` and weight decay
    (added to the gradient at y) when given."""
    learning_rate = _warmed_up(learning_rate, warmup_steps)
    base = sgd(learning_rate)
    if weight_decay is not None:
        base = chain(add_decayed_weights(weight_decay), base)
    return schedule_free(base, learning_rate, b1, weight_lr_power, state_dtype)


def schedule_free_adamw(
    learning_rate: float = 0.0025,
    warmup_steps: int | None = None,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_lr_power: float = 2.0,
    state_dtype=None,
) -> GradientTransformationExtraArgs:
    """Schedule-free AdamW: z steps by g / (sqrt(v_hat) + eps) (the bias-corrected second
    moment, no first moment: the averaging is the momentum) plus weight_decay * y."""
    learning_rate = _warmed_up(learning_rate, warmup_steps)
    base = chain(
        scale_by_rms(decay=b2, eps=eps, eps_in_sqrt=False, bias_correction=True),
        add_decayed_weights(weight_decay),
        scale_by_learning_rate(learning_rate),
    )
    return schedule_free(base, learning_rate, b1, weight_lr_power, state_dtype)
