"""Measurements of the updates kept in the optimizer state, for looking at a run from
outside (`tree_get(state, name)`): `snapshot` keeps one function of the last updates,
`monitor` several, each either a plain function or a transformation with a state of its own
(`measure_with_ema` averages a measurement over steps). The updates pass through unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    chain,
    stateless,
    with_extra_args_support,
)
from funcgrad.optim.scaling import ema


class SnapshotState(NamedTuple):
    measurement: Any  # dict: measure_name -> measure(the last updates)


class MonitorState(NamedTuple):
    measurements: Any  # dict: name -> the last measurement
    measure_states: tuple  # each measure's own state, in the order of the names


def snapshot(measure_name: str, measure: Callable[[Any], Any]) -> GradientTransformation:
    """Updates unchanged; the state keeps measure(updates) of the last step under
    measure_name (measure(params) after init)."""

    def init(params):
        return SnapshotState({measure_name: measure(params)})

    def update(updates, state, params=None):
        return updates, SnapshotState({measure_name: measure(updates)})

    return GradientTransformation(init, update)


def monitor(
    measures: dict[str, GradientTransformation | Callable[[Any], Any]],
) -> GradientTransformationExtraArgs:
    """Updates unchanged; each named measure sees them and its result is kept under its name.
    A measure is a function of the updates or a transformation, whose output (its
    'updates') is the measurement and whose state lives in `measure_states`. No measurement
    exists before the first update."""
    transforms = {}
    for name, measure in measures.items():
        if not isinstance(measure, GradientTransformation):
            if not callable(measure):
                raise TypeError(
                    f"monitor: the measure {name!r} must be a function of the updates or a "
                    f"gradient transformation, got {type(measure).__name__}"
                )
            measure = stateless(lambda updates, params, f=measure: f(updates))
        transforms[name] = with_extra_args_support(measure)

    def init(params):
        return MonitorState({}, tuple(t.init(params) for t in transforms.values()))

    def update(updates, state, params=None, **extra_args):
        measurements, measure_states = {}, []
        for (name, transform), measure_state in zip(transforms.items(), state.measure_states):
            measurements[name], measure_state = transform.update(
                updates, measure_state, params, **extra_args
            )
            measure_states.append(measure_state)
        return updates, MonitorState(measurements, tuple(measure_states))

    return GradientTransformationExtraArgs(init, update)


def measure_with_ema(
    measure: Callable[[Any], Any], decay: float, debias: bool = True, accumulator_dtype=None
) -> GradientTransformationExtraArgs:
    """A measure for `monitor`: the exponential moving average of measure(updates) (debiased
    by 1 - decay**count unless debias is False), its accumulator shaped like the measurement
    of the parameters."""
    average = ema(decay, debias, accumulator_dtype)
    average_of_measurement = average._replace(init=lambda params: average.init(measure(params)))
    return chain(stateless(lambda updates, params: measure(updates)), average_of_measurement)
