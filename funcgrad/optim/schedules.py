"""Learning-rate schedules: functions of the step count (a traced int32 inside jit), with
Optax's names and definitions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import funcgrad.numpy as fnp

Schedule = Callable


def constant_schedule(value: float) -> Schedule:
    return lambda count: fnp.full((), value, fnp.float32)


def linear_schedule(
    init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
) -> Schedule:
    """From init_value to end_value over transition_steps, starting at transition_begin (a
    negative one counts as 0, as in Optax)."""
    if transition_steps <= 0:
        return constant_schedule(init_value)
    transition_begin = max(transition_begin, 0)

    def schedule(count):
        done = fnp.clip(fnp.asarray(count) - transition_begin, 0, transition_steps)
        fraction = 1 - done.astype(fnp.float32) / transition_steps
        return (init_value - end_value) * fraction + end_value

    return schedule


def cosine_decay_schedule(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> Schedule:
    """init_value * ((1 - alpha) * (1 + cos(pi * t / decay_steps)) / 2) ** exponent + alpha),
    t capped at decay_steps."""
    if decay_steps <= 0:
        raise ValueError(f"cosine_decay_schedule: decay_steps must be positive, got {decay_steps}")

    def schedule(count):
        t = fnp.minimum(fnp.asarray(count), decay_steps).astype(fnp.float32)
        cosine = 0.5 * (1 + fnp.cos(math.pi * t / decay_steps))
        return init_value * ((1 - alpha) * cosine**exponent + alpha)

    return schedule


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """schedules[i] from boundaries[i - 1] on, each counting from its own start."""

    def schedule(count):
        count = fnp.asarray(count)
        value = schedules[0](count)
        for boundary, following in zip(boundaries, schedules[1:]):
            value = fnp.where(count < boundary, value, following(count - boundary))
        return value

    return schedule


def warmup_cosine_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
    exponent: float = 1.0,
) -> Schedule:
    """Linear warmup from init_value to peak_value, then cosine decay to end_value at
    decay_steps (counted from the start, warmup included)."""
    alpha = 0.0 if peak_value == 0 else end_value / peak_value
    return join_schedules(
        [
            linear_schedule(init_value, peak_value, warmup_steps),
            cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent),
        ],
        [warmup_steps],
    )


def piecewise_constant_schedule(
    init_value: float, boundaries_and_scales: dict[int, float] | None = None
) -> Schedule:
    """init_value, multiplied by each scale from its boundary on (count >= boundary)."""
    items = sorted((boundaries_and_scales or {}).items())
    if any(factor < 0 for _, factor in items):
        raise ValueError(
            f"piecewise_constant_schedule: scales must be non-negative, got {dict(items)}"
        )

    def schedule(count):
        count = fnp.asarray(count)
        value = fnp.full((), init_value, fnp.float32)
        for boundary, factor in items:
            value = fnp.where(count >= boundary, value * factor, value)
        return value

    return schedule


def exponential_decay(
    init_value: float,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: float | None = None,
) -> Schedule:
    """init_value * decay_rate ** ((count - transition_begin) / transition_steps), clipped at
    end_value; with staircase, the exponent is rounded down. As in Optax, a decay_rate of 0
    (or transition_steps <= 0) gives the constant init_value, and a negative transition_begin
    counts as 0."""
    if transition_steps <= 0 or decay_rate == 0:
        return constant_schedule(init_value)
    transition_begin = max(transition_begin, 0)

    def schedule(count):
        steps = fnp.maximum(fnp.asarray(count) - transition_begin, 0).astype(fnp.float32)
        power = steps / transition_steps
        if staircase:
            power = fnp.floor(power)
        value = init_value * fnp.power(decay_rate, power)
        if end_value is not None:
            bound = fnp.maximum if decay_rate < 1 else fnp.minimum
            value = bound(value, end_value)
        return value

    return schedule
