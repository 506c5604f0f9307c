"""The `optim.transforms` namespace (every name it gives is the object defined elsewhere),
`monitor` and `measure_with_ema` against a NumPy loop of the moving average, the per-unit
clipping helpers against their formula, and `inject_hyperparams` with stateful schedules."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import optim
from funcgrad.optim import transforms
from funcgrad.optim.transforms import _HOME_MODULE
from funcgrad.optim.wrappers import WrappedScheduleState


@pytest.mark.parametrize("name", sorted(_HOME_MODULE))
def test_transforms_names_the_objects_defined_elsewhere(name):
    assert name in dir(transforms)
    home = __import__(_HOME_MODULE[name], fromlist=[name])
    assert getattr(transforms, name) is getattr(home, name)


def test_transforms_reports_a_missing_name():
    with pytest.raises(AttributeError, match="no_such_transform"):
        transforms.no_such_transform  # noqa: B018


def grads_of(params):
    return {"w": 2 * params["w"], "b": np.cos(params["b"])}


def test_monitor_records_plain_and_averaged_measures():
    decay, threshold = 0.9, 1.0

    def norm(tree):
        return optim.tree_utils.tree_norm(tree)

    opt = optim.chain(
        optim.sgd(0.1, momentum=0.9),
        optim.monitor(
            {
                "norm": norm,
                "clipped": optim.measure_with_ema(lambda u: norm(u) > threshold, decay),
                "plain_ema": optim.measure_with_ema(norm, decay, debias=False),
            }
        ),
        optim.clip_by_global_norm(threshold),
    )
    params = {"w": np.array([1.0, 2.0, 3.0]), "b": np.array(0.5)}
    state = opt.init(params)
    assert optim.tree_utils.tree_get(state, "norm") is None  # nothing measured before a step
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    average = plain = 0.0
    for step in range(1, 5):
        grads = grads_of(params)
        updates, state = fg.jit(opt.update)(grads, state, params)
        velocity = {k: grads[k] + 0.9 * velocity[k] for k in grads}
        measured = np.sqrt(sum(np.sum((-0.1 * v) ** 2) for v in velocity.values()))
        average = decay * average + (1 - decay) * float(measured > threshold)
        plain = decay * plain + (1 - decay) * measured
        np.testing.assert_allclose(optim.tree_utils.tree_get(state, "norm"), measured, rtol=1e-6)
        got = optim.tree_utils.tree_get(state, "clipped")
        np.testing.assert_allclose(got, average / (1 - decay**step), rtol=1e-6)
        np.testing.assert_allclose(optim.tree_utils.tree_get(state, "plain_ema"), plain, rtol=1e-6)
        params = optim.apply_updates(params, updates)


def test_monitor_rejects_a_measure_that_is_neither():
    with pytest.raises(TypeError, match="'bad'.*function of the updates"):
        optim.monitor({"bad": 3})


def test_unitwise_norm_and_clip_follow_the_formula():
    kernel = np.random.default_rng(0).standard_normal((4, 3))
    norms = np.asarray(transforms.unitwise_norm(kernel))
    np.testing.assert_allclose(norms, np.broadcast_to(np.linalg.norm(kernel, axis=0), (4, 3)))
    np.testing.assert_allclose(
        np.asarray(transforms.unitwise_norm(kernel, axis=1)),
        np.broadcast_to(np.linalg.norm(kernel, axis=1, keepdims=True), (4, 3)),
    )
    max_norm = np.full((4, 3), 1.2)
    got = np.asarray(transforms.unitwise_clip(norms, max_norm, kernel))
    wanted = np.where(norms < max_norm, kernel, kernel * max_norm / norms)
    np.testing.assert_allclose(got, wanted, rtol=1e-12)
    with pytest.raises(ValueError, match=r"one shape.*\(3,\)"):
        transforms.unitwise_clip(norms, np.ones(3), kernel)


class LossScaledState(NamedTuple):
    scale: object


class HalvingOnIncrease:
    """A stateful schedule: the learning rate halves whenever the loss passed to `update`
    exceeds 1."""

    def init(self):
        return LossScaledState(fnp.asarray(1.0))

    def update(self, state, value=None, **extra_args):
        return LossScaledState(fnp.where(value > 1.0, state.scale / 2, state.scale))

    def __call__(self, state, **extra_args):
        return 0.1 * state.scale


def test_inject_hyperparams_takes_stateful_schedules():
    assert isinstance(HalvingOnIncrease(), optim.StatefulSchedule)
    assert not isinstance(lambda count: count, optim.StatefulSchedule)
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=HalvingOnIncrease())
    params = np.array([1.0, -2.0])
    state = opt.init(params)
    assert isinstance(state, optim.InjectStatefulHyperparamsState)
    rate = 0.1
    for loss in [2.0, 0.5, 3.0, 3.0]:
        updates, state = opt.update(np.ones(2), state, params, value=fnp.asarray(loss))
        np.testing.assert_allclose(updates, -rate * np.ones(2), rtol=1e-6)
        rate = rate / 2 if loss > 1 else rate
    np.testing.assert_allclose(state.hyperparams_states["learning_rate"].scale, rate / 0.1)


def test_function_schedules_become_wrapped_schedules():
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=lambda count: 0.1 * (count + 1))
    state = opt.init(np.zeros(1))
    assert isinstance(state.hyperparams_states["learning_rate"], WrappedScheduleState)
    for step in range(3):
        updates, state = fg.jit(opt.update)(np.ones(1), state)
        np.testing.assert_allclose(updates, [-0.1 * (step + 1)], rtol=1e-6)
    assert int(state.hyperparams_states["learning_rate"].count) == 3


def test_inject_stateful_hyperparams_is_the_deprecated_name():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = optim.inject_stateful_hyperparams(optim.sgd)(learning_rate=0.5)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    updates, _ = opt.update(np.ones(2), opt.init(np.zeros(2)))
    np.testing.assert_allclose(updates, [-0.5, -0.5])
