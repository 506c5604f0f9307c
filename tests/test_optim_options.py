"""The keyword options of funcgrad.optim's optimizers (a first moment kept in a narrow dtype,
Nesterov flags, bias corrections, Lion's modes, RMSProp's eps placement, extra arguments
through masks) against their update equations written out here in NumPy float64."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_optim import (
    adam_ref,
    assert_history,
    nadam_ref,
    params_and_grads,
    reference,
    run,
)

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import optim, tree_util

BF16 = ml_dtypes.bfloat16


def to_bf16(x):
    """x rounded to bfloat16 and back: what a state kept in bfloat16 holds."""
    return np.asarray(x, np.float64).astype(BF16).astype(np.float64)


def stored_ema(decay, moment, g):
    """decay * moment + (1 - decay) * g in float32 arithmetic (the gradients' dtype), rounded
    to bfloat16: the moment a bfloat16 state stores. In float64 a value within float32's
    rounding of a bfloat16 tie could round the other way."""
    f32 = np.float32
    return to_bf16(f32(decay) * f32(moment) + f32(1 - decay) * f32(g))


def adam_narrow_mu_ref(lr, weight_decay=0.0, nesterov=False, round_mu=True, b1=0.9, b2=0.999):
    """Adam computing each step with the stored (bfloat16) first moment widened, then storing
    the new moment rounded to bfloat16 (once per step)."""

    def update(g, p, t, m):
        mu = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        if nesterov:
            mu_hat = b1 * mu / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        else:
            mu_hat = mu / (1 - b1**t)
        m["mu"] = stored_ema(b1, m.get("mu", 0.0), g) if round_mu else mu
        direction = mu_hat / (np.sqrt(m["nu"] / (1 - b2**t)) + 1e-8) + weight_decay * p
        return p - lr * direction

    return update


def leaves_dtypes(tree):
    return {np.dtype(leaf.dtype) for leaf in tree_util.tree_leaves(tree)}


def final_state(opt, params, grads):
    p = tree_util.tree_map(lambda v: fnp.asarray(v, fnp.float32), params)
    state = opt.init(p)
    for g in grads:
        g = tree_util.tree_map(lambda v: fnp.asarray(v, fnp.float32), g)
        updates, state = opt.update(g, state, p)
    return state


@pytest.mark.parametrize(
    "name, weight_decay, nesterov",
    [("adam", None, False), ("adamw", 0.3, False), ("nadam", None, True), ("nadamw", 0.3, True)],
)
def test_adam_family_keeps_its_first_moment_in_mu_dtype(name, weight_decay, nesterov):
    params, grads = params_and_grads(11)
    kwargs = {} if weight_decay is None else {"weight_decay": weight_decay}
    opt = getattr(optim, name)(0.1, mu_dtype=fnp.bfloat16, **kwargs)
    wd = weight_decay or 0.0
    ref = adam_narrow_mu_ref(0.1, wd, nesterov)
    # float32's bias correction 1 - 0.999 is 1.3e-5 off, which a step of 0.1 shows
    tolerances = {"rtol": 2e-5, "atol": 1e-5}
    assert_history(run(opt, params, grads, jit=True), reference(ref, params, grads), **tolerances)
    state = final_state(opt, params, grads)
    assert leaves_dtypes(state[0].mu) == {np.dtype(BF16)}
    assert leaves_dtypes(state[0].nu) == {np.dtype(np.float32)}
    with pytest.raises(AssertionError):  # a first moment not rounded misses by more
        unrounded = adam_narrow_mu_ref(0.1, wd, nesterov, round_mu=False)
        assert_history(run(opt, params, grads), reference(unrounded, params, grads), **tolerances)


def test_nesterov_flags_switch_between_adam_and_nadam():
    params, grads = params_and_grads(12)
    assert_history(
        run(optim.adam(0.05, nesterov=True), params, grads),
        reference(nadam_ref(0.05), params, grads),
    )
    assert_history(
        run(optim.nadam(0.05, nesterov=False), params, grads),
        reference(adam_ref(0.05), params, grads),
    )
    assert_history(
        run(optim.adamw(0.05, weight_decay=0.2, nesterov=True), params, grads),
        reference(nadam_ref(0.05, weight_decay=0.2), params, grads),
    )
    assert_history(
        run(optim.nadamw(0.05, weight_decay=0.2, nesterov=False), params, grads),
        reference(adam_ref(0.05, weight_decay=0.2), params, grads),
    )


def amsgrad_ref(lr, b1=0.9, b2=0.999, eps=1e-8, correct_mu=True, correct_nu=True, mu_bf16=False):
    def update(g, p, t, m):
        mu = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        nu_hat = m["nu"] / (1 - b2**t) if correct_nu else m["nu"]
        m["nu_max"] = np.maximum(m.get("nu_max", 0.0), nu_hat)
        mu_hat = mu / (1 - b1**t) if correct_mu else mu
        m["mu"] = stored_ema(b1, m.get("mu", 0.0), g) if mu_bf16 else mu
        return p - lr * mu_hat / (np.sqrt(m["nu_max"]) + eps)

    return update


@pytest.mark.parametrize(
    "kwargs", [{"bias_correction_mu": False}, {"bias_correction_nu": False}, {"mu_dtype": BF16}]
)
def test_amsgrad_bias_corrections_and_mu_dtype(kwargs):
    params, grads = params_and_grads(13)
    ref = amsgrad_ref(
        0.05,
        correct_mu=kwargs.get("bias_correction_mu", True),
        correct_nu=kwargs.get("bias_correction_nu", True),
        mu_bf16="mu_dtype" in kwargs,
    )
    assert_history(run(optim.amsgrad(0.05, **kwargs), params, grads), reference(ref, params, grads))


def lion_ref(lr, mode, b1=0.9, b2=0.99, weight_decay=1e-3, smooth_beta=1.0):
    def update(g, p, t, m):
        x = b1 * m.get("mu", 0.0) + (1 - b1) * g
        direction = {
            "hard": np.sign(x),
            "smooth": np.tanh(smooth_beta * x),
            "refined": np.where(np.abs(x) < 1, x, np.sign(x)),
        }[mode]
        m["mu"] = b2 * m.get("mu", 0.0) + (1 - b2) * g
        return p - lr * (direction + weight_decay * p)

    return update


@pytest.mark.parametrize("mode, smooth_beta", [("smooth", 1.0), ("smooth", 3.0), ("refined", 1.0)])
def test_lion_smooth_and_refined_modes(mode, smooth_beta):
    params, grads = params_and_grads(14)
    opt = optim.chain(
        optim.scale_by_lion(mode=mode, smooth_beta=smooth_beta),
        optim.add_decayed_weights(1e-3),
        optim.scale_by_learning_rate(0.05),
    )
    ref = lion_ref(0.05, mode, smooth_beta=smooth_beta)
    assert_history(run(opt, params, grads), reference(ref, params, grads))
    with pytest.raises(ValueError, match=r"mode must be one of \['hard', 'refined', 'smooth'\]"):
        optim.scale_by_lion(mode="soft")


def test_lion_and_novograd_keep_their_moment_in_mu_dtype():
    params, grads = params_and_grads(15)
    state = final_state(optim.lion(0.01, mu_dtype=BF16), params, grads)
    assert leaves_dtypes(state[0].mu) == {np.dtype(BF16)}

    def lion_bf16(g, p, t, m):
        direction = np.sign(0.9 * m.get("mu", 0.0) + 0.1 * g)
        m["mu"] = stored_ema(0.99, m.get("mu", 0.0), g)
        return p - 0.01 * (direction + 1e-3 * p)

    assert_history(
        run(optim.lion(0.01, mu_dtype=BF16), params, grads), reference(lion_bf16, params, grads)
    )

    def novograd_bf16(g, p, t, m):
        norm_sq = np.sum(g * g)
        m["nu"] = norm_sq if t == 1 else 0.25 * m["nu"] + 0.75 * norm_sq
        m["mu"] = to_bf16(0.9 * m.get("mu", 0.0) + g / (np.sqrt(m["nu"]) + 1e-6))
        # the update is the moment, in bfloat16, so the learning rate is a bfloat16 too
        return p - to_bf16(to_bf16(0.01) * m["mu"])

    opt = optim.chain(optim.scale_by_novograd(eps=1e-6, mu_dtype=BF16), optim.scale(-0.01))
    assert_history(run(opt, params, grads), reference(novograd_bf16, params, grads), rtol=1e-4)
    assert leaves_dtypes(final_state(opt, params, grads)[0].mu) == {np.dtype(BF16)}


def rmsprop_ref(lr, decay=0.9, eps=1e-8, centered=False, eps_in_sqrt=True, bias_correction=False):
    def update(g, p, t, m):
        m["nu"] = decay * m.get("nu", 0.0) + (1 - decay) * g * g
        m["mu"] = decay * m.get("mu", 0.0) + (1 - decay) * g
        correction = 1 - decay**t if bias_correction else 1.0
        variance = m["nu"] / correction
        if centered:
            variance = variance - (m["mu"] / correction) ** 2
        scale = 1 / np.sqrt(variance + eps) if eps_in_sqrt else 1 / (np.sqrt(variance) + eps)
        return p - lr * g * scale

    return update


@pytest.mark.parametrize(
    "centered, eps_in_sqrt, bias_correction, eps",
    [
        (False, False, False, 1e-3),
        (False, True, True, 1e-3),
        (False, False, True, 1e-3),
        (True, False, False, 1e-3),
        # centered and bias-corrected, the first variance is g**2 - g**2, 0 up to rounding: a
        # larger eps inside the root keeps float32's rounding of it from showing
        (True, True, True, 0.1),
    ],
)
def test_rmsprop_eps_placement_and_bias_correction(centered, eps_in_sqrt, bias_correction, eps):
    params, grads = params_and_grads(16)
    options = {"centered": centered, "eps_in_sqrt": eps_in_sqrt, "bias_correction": bias_correction}
    opt = optim.rmsprop(0.01, eps=eps, **options)
    ref = rmsprop_ref(0.01, eps=eps, **options)
    assert_history(run(opt, params, grads, jit=True), reference(ref, params, grads))
    state = final_state(opt, params, grads)[0]
    if bias_correction:
        assert int(state.count) == len(grads)
        wanted = optim.ScaleByRStdDevWithCountState if centered else optim.ScaleByRmsWithCountState
        assert isinstance(state, wanted)
    else:
        assert "count" not in state._fields


def test_sgd_keeps_its_momentum_in_accumulator_dtype():
    params, grads = params_and_grads(17)

    def sgd_bf16(g, p, t, m):
        trace = g + 0.9 * m.get("trace", 0.0)
        m["trace"] = to_bf16(np.float32(g) + np.float32(0.9) * np.float32(m.get("trace", 0.0)))
        return p - 0.1 * (g + 0.9 * trace)

    opt = optim.sgd(0.1, 0.9, nesterov=True, accumulator_dtype=BF16)
    assert_history(run(opt, params, grads), reference(sgd_bf16, params, grads))
    assert leaves_dtypes(final_state(opt, params, grads)[0].trace) == {np.dtype(BF16)}


def test_learning_rate_none_leaves_the_updates_as_they_are():
    g = {"a": fnp.asarray([1.0, -2.0])}
    same, _ = optim.scale_by_learning_rate(None).update(
        g, optim.scale_by_learning_rate(None).init(g)
    )
    np.testing.assert_array_equal(np.asarray(same["a"]), [1.0, -2.0])
    adadelta = optim.adadelta()  # the rescaled gradient, not negated
    updates, _ = adadelta.update(g, adadelta.init(g), g)
    wanted = np.sqrt(1e-6) / np.sqrt(0.1 * np.array([1.0, 4.0]) + 1e-6) * np.array([1.0, -2.0])
    np.testing.assert_allclose(np.asarray(updates["a"]), wanted, rtol=1e-5)


def test_noise_seed_is_an_integer_key():
    p = {"w": fnp.zeros(5)}
    by_seed, by_key = optim.noisy_sgd(0.1, seed=7), optim.noisy_sgd(0.1, key=7)
    a, _ = by_seed.update(p, by_seed.init(p), p)
    b, _ = by_key.update(p, by_key.init(p), p)
    np.testing.assert_array_equal(np.asarray(a["w"]), np.asarray(b["w"]))
    with pytest.raises(ValueError, match="add_noise: give key or seed, not both"):
        optim.add_noise(0.1, 0.5, key=1, seed=2)


def scale_by_extra():
    """Multiplies the updates by the extra argument `weights`, a tree like them."""

    def update(updates, state, params=None, *, weights, **extra_args):
        return tree_util.tree_map(lambda u, w: u * w, updates, weights), state

    return optim.GradientTransformationExtraArgs(lambda params: optim.EmptyState(), update)


def test_mask_compatible_extra_args_reach_the_inner_transformation_masked():
    params = {"a": fnp.ones(2), "b": fnp.ones(3), "c": fnp.ones(())}
    weights = {"a": fnp.asarray([2.0, 3.0]), "b": fnp.full(3, 5.0), "c": fnp.asarray(7.0)}
    opt = optim.masked(
        scale_by_extra(), {"a": True, "b": False, "c": True}, mask_compatible_extra_args=True
    )
    updates, _ = fg.jit(opt.update)(params, opt.init(params), params, weights=weights)
    np.testing.assert_array_equal(np.asarray(updates["a"]), [2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(updates["b"]), [1.0, 1.0, 1.0])
    assert float(updates["c"]) == 7.0
    unmasked = optim.masked(scale_by_extra(), {"a": True, "b": False, "c": True})
    with pytest.raises((TypeError, ValueError)):  # the whole tree meets the two selected leaves
        unmasked.update(params, unmasked.init(params), params, weights=weights)
    split = optim.partition(
        {"x": scale_by_extra(), "y": optim.scale(-1.0)},
        {"a": "x", "b": "y", "c": "x"},
        mask_compatible_extra_args=True,
    )
    updates, _ = split.update(params, split.init(params), params, weights=weights)
    np.testing.assert_array_equal(np.asarray(updates["b"]), [-1.0, -1.0, -1.0])
    assert float(updates["c"]) == 7.0


def test_backtracking_linesearch_verbose_says_why_it_failed(capsys):
    def f(x):
        return fnp.sum(x**2)

    x = fnp.asarray([1.0, -1.0])
    search = optim.scale_by_backtracking_linesearch(3, verbose=True)
    uphill = fg.grad(f)(x)
    search.update(uphill, search.init(x), x, value=f(x), grad=uphill, value_fn=f)
    assert "not a descent direction" in capsys.readouterr().out
    search.update(-uphill, search.init(x), x, value=f(x), grad=uphill, value_fn=f)
    assert capsys.readouterr().out == ""  # a descent step is found: nothing to say
