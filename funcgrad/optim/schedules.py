"""Learning-rate schedules: functions of the step count (a traced int32 inside jit), with
Optax's names and definitions. As in Optax's `schedules`, `inject_hyperparams` and the
stateful schedules it takes are named here too."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import funcgrad.numpy as fnp
from funcgrad.optim.wrappers import (
    InjectHyperparamsState,
    InjectStatefulHyperparamsState,
    StatefulSchedule,
    WrappedSchedule,
    inject_hyperparams,
    inject_stateful_hyperparams,
)

__all__ = [
    "InjectHyperparamsState",
    "InjectStatefulHyperparamsState",
    "StatefulSchedule",
    "WrappedSchedule",
    "constant_schedule",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "exponential_decay",
    "inject_hyperparams",
    "inject_stateful_hyperparams",
    "join_schedules",
    "linear_onecycle_schedule",
    "linear_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "polynomial_schedule",
    "sgdr_schedule",
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
]

Schedule = Callable


def constant_schedule(value: float) -> Schedule:
    return lambda count: fnp.full((), value, fnp.float32)


def polynomial_schedule(
    init_value: float,
    end_value: float,
    power: float,
    transition_steps: int,
    transition_begin: int = 0,
) -> Schedule:
    """From init_value to end_value as (init - end) * (1 - t / transition_steps) ** power + end,
    t the steps since transition_begin (a negative one counts as 0), capped at
    transition_steps; a transition_steps <= 0 gives the constant init_value."""
    if transition_steps <= 0:
        return constant_schedule(init_value)
    transition_begin = max(transition_begin, 0)

    def schedule(count):
        done = fnp.clip(fnp.asarray(count) - transition_begin, 0, transition_steps)
        fraction = 1 - done.astype(fnp.float32) / transition_steps
        return (init_value - end_value) * fraction**power + end_value

    return schedule


def linear_schedule(
    init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
) -> Schedule:
    """From init_value to end_value over transition_steps, starting at transition_begin."""
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def warmup_constant_schedule(init_value: float, peak_value: float, warmup_steps: int) -> Schedule:
    """Linear from init_value to peak_value over warmup_steps, then peak_value."""
    return linear_schedule(init_value, peak_value, warmup_steps)


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


def warmup_exponential_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: float | None = None,
) -> Schedule:
    """Linear warmup from init_value to peak_value, then `exponential_decay` from peak_value,
    its count starting again at 0 when the warmup ends."""
    return join_schedules(
        [
            linear_schedule(init_value, peak_value, warmup_steps),
            exponential_decay(
                peak_value, transition_steps, decay_rate, transition_begin, staircase, end_value
            ),
        ],
        [warmup_steps],
    )


def sgdr_schedule(cosine_kwargs: Iterable[dict]) -> Schedule:
    """Warm restarts (Loshchilov & Hutter): one `warmup_cosine_decay_schedule` per dict of
    its arguments, each starting when the previous one's decay_steps are over."""
    schedules, boundaries, step = [], [], 0
    for kwargs in cosine_kwargs:
        schedules.append(warmup_cosine_decay_schedule(**kwargs))
        step += kwargs["decay_steps"]
        boundaries.append(step)
    return join_schedules(schedules, boundaries[:-1])


def _linear_interpolate(start, end, fraction):
    return start + (end - start) * fraction


def _cosine_interpolate(start, end, fraction):
    return end + (start - end) / 2 * (fnp.cos(math.pi * fraction) + 1)


def piecewise_interpolate_schedule(
    interpolate_type: str, init_value: float, boundaries_and_scales: dict[int, float] | None = None
) -> Schedule:
    """Interpolate ('linear' or 'cosine') between the values init_value * (product of the
    scales up to each boundary), reaching each boundary's value at that boundary; the last
    value from the last boundary on. Counts below 0 give 0."""
    interpolations = {"linear": _linear_interpolate, "cosine": _cosine_interpolate}
    if interpolate_type not in interpolations:
        raise ValueError(
            f"piecewise_interpolate_schedule: interpolate_type must be 'linear' or 'cosine', "
            f"got {interpolate_type!r}"
        )
    interpolate = interpolations[interpolate_type]
    items = sorted((boundaries_and_scales or {}).items())
    if any(factor < 0 for _, factor in items):
        raise ValueError(
            f"piecewise_interpolate_schedule: scales must be non-negative, got {dict(items)}"
        )
    bounds = [0] + [boundary for boundary, _ in items]
    values = [init_value]
    for _, factor in items:
        values.append(values[-1] * factor)

    def schedule(count):
        count = fnp.asarray(count)
        value = fnp.where(count >= bounds[-1], values[-1], 0.0).astype(fnp.float32)
        for i in range(len(items)):
            start, end = bounds[i], bounds[i + 1]
            fraction = (count - start).astype(fnp.float32) / max(end - start, 1)
            inside = (count >= start) & (count < end)
            value = fnp.where(inside, interpolate(values[i], values[i + 1], fraction), value)
        return value

    return schedule


def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> Schedule:
    """One cycle (Smith & Topin), linearly: from peak_value / div_factor up to peak_value at
    pct_start of transition_steps, back down at pct_final, then to
    peak_value / (div_factor * final_div_factor) at transition_steps."""
    if transition_steps <= 0:
        raise ValueError(
            f"linear_onecycle_schedule: transition_steps must be positive, got {transition_steps}"
        )
    return piecewise_interpolate_schedule(
        "linear",
        peak_value / div_factor,
        {
            int(pct_start * transition_steps): div_factor,
            int(pct_final * transition_steps): 1.0 / div_factor,
            transition_steps: 1.0 / final_div_factor,
        },
    )


def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> Schedule:
    """One cycle with cosine interpolation: from peak_value / div_factor up to peak_value at
    pct_start of transition_steps, then down to peak_value / (div_factor *
    final_div_factor) at transition_steps."""
    if transition_steps <= 0:
        raise ValueError(
            f"cosine_onecycle_schedule: transition_steps must be positive, got {transition_steps}"
        )
    return piecewise_interpolate_schedule(
        "cosine",
        peak_value / div_factor,
        {
            int(pct_start * transition_steps): div_factor,
            transition_steps: 1.0 / (div_factor * final_div_factor),
        },
    )
