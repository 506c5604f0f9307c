"""The rest of funcgrad.optim's optimizers, transformations, wrappers and schedules against
their defining equations, written out here in NumPy float64."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_optim import (
    STEPS,
    adam_ref,
    assert_history,
    params_and_grads,
    reference,
    run,
    sgd_ref,
)

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import optim, tree_util


def as_f32(tree):
    return tree_util.tree_map(lambda x: fnp.asarray(x, fnp.float32), tree)


def rms(x):
    return np.sqrt(np.mean(np.square(x)))


def adafactor_ref(lr, min_dim_size_to_factor, eps=1e-30, clip=1.0, momentum=None, wd=None):
    """Shazeer & Stern: v_t = d_t v + (1 - d_t) (g**2 + eps), d_t = 1 - t**-0.8; a matrix
    whose two axes are both long enough keeps row and column means R, C and uses
    v = R C^T / mean(R). The step g / sqrt(v) is clipped to rms <= clip, times lr and
    max(rms(p), 1e-3)."""

    def update(g, p, t, m):
        decay = 1 - t**-0.8
        g_sq = g * g + eps
        if g.ndim == 2 and min(g.shape) >= min_dim_size_to_factor:
            rows, cols = (0, 1) if g.shape[0] <= g.shape[1] else (1, 0)
            m["R"] = decay * m.get("R", 0.0) + (1 - decay) * g_sq.mean(axis=cols)
            m["C"] = decay * m.get("C", 0.0) + (1 - decay) * g_sq.mean(axis=rows)
            v = np.expand_dims(m["R"], cols) * np.expand_dims(m["C"], rows) / m["R"].mean()
        else:
            m["v"] = decay * m.get("v", 0.0) + (1 - decay) * g_sq
            v = m["v"]
        u = g / np.sqrt(v)
        u = u / max(1.0, rms(u) / clip)
        u = lr * u * max(rms(p), 1e-3)
        if momentum is not None:
            m["mom"] = momentum * m.get("mom", 0.0) + (1 - momentum) * u
            u = m["mom"]
        if wd is not None:
            u = u + wd * p
        return p - u

    return update


def sm3_ref(lr, b1=0.9, eps=1e-8):
    """Anil et al., b2 = 1: a matrix's accumulator is min(row cover, column cover) + g**2,
    each cover then the maximum of it over the other axis; vectors and scalars keep the
    accumulator itself."""

    def update(g, p, t, m):
        if g.ndim == 2:
            covered = np.minimum(m.get("r", np.zeros(g.shape[0]))[:, None], m.get("c", 0.0))
            acc = covered + g * g
            m["r"], m["c"] = acc.max(axis=1), acc.max(axis=0)
        else:
            acc = m["acc"] = m.get("acc", 0.0) + g * g
        m["nu"] = b1 * m.get("nu", 0.0) + (1 - b1) * g / np.sqrt(acc + eps)
        return p - lr * m["nu"]

    return update


def fromage_ref(lr):
    def update(g, p, t, m):
        return (p - lr * g * np.linalg.norm(p) / np.linalg.norm(g)) / math.sqrt(1 + lr**2)

    return update


def sign_ref(lr, beta=None):
    def update(g, p, t, m):
        if beta is not None:
            g = m["mu"] = beta * m.get("mu", 0.0) + (1 - beta) * g
        return p - lr * np.sign(g)

    return update


def rprop_ref(lr, eta_minus=0.5, eta_plus=1.2, min_step=1e-6, max_step=50.0):
    """iRprop- (Igel & Husken): grow the step while g keeps its sign, shrink it and skip the
    step when it flips, forgetting that gradient."""

    def update(g, p, t, m):
        size = m.get("size", np.full(np.shape(g), lr))
        product = g * m.get("g_prev", 0.0)
        size = np.where(product > 0, np.minimum(size * eta_plus, max_step), size)
        size = np.where(product < 0, np.maximum(size * eta_minus, min_step), size)
        g = np.where(product < 0, 0.0, g)
        m["size"], m["g_prev"] = size, g
        return p - size * np.sign(g)

    return update


def adan_ref(lr, b1=0.98, b2=0.92, b3=0.99, eps=1e-8, eps_root=1e-8, wd=0.0):
    """Xie et al.: moments of g, of g - g_prev (0 at the first step) and of
    (g + (1 - b2)(g - g_prev))**2, bias-corrected."""

    def update(g, p, t, m):
        diff = g - m["g_prev"] if t > 1 else np.zeros_like(g)
        m["g_prev"] = g
        m["m"] = b1 * m.get("m", 0.0) + (1 - b1) * g
        m["v"] = b2 * m.get("v", 0.0) + (1 - b2) * diff
        m["n"] = b3 * m.get("n", 0.0) + (1 - b3) * (g + (1 - b2) * diff) ** 2
        m_hat, v_hat = m["m"] / (1 - b1**t), m["v"] / (1 - b2**t)
        n_hat = m["n"] / (1 - b3**t)
        step = (m_hat + (1 - b2) * v_hat) / (np.sqrt(n_hat + eps_root) + eps)
        return p - lr * (step + wd * p)

    return update


def adamaxw_ref(lr, b1=0.9, b2=0.999, eps=1e-8, wd=1e-4):
    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["u"] = np.maximum(b2 * m.get("u", 0.0), np.abs(g) + eps)
        return p - lr * (m["mu"] / (1 - b1**t) / m["u"] + wd * p)

    return update


def optimistic_ref(lr, alpha, beta, direction=None):
    """x <- x - lr * ((alpha + beta) d_t - beta d_{t-1}), d_0 = d_1; d is the gradient or
    `direction(g, p, t, m)` (NAdam's step)."""

    def update(g, p, t, m):
        d = g if direction is None else p - direction(g, p, t, m["inner"])
        previous = m.get("d_prev", d)
        m["d_prev"] = d
        return p - lr * ((alpha + beta) * d - beta * previous)

    def with_memory(g, p, t, m):
        m.setdefault("inner", {})
        return update(g, p, t, m)

    return with_memory


def nadam_direction(b1=0.9, b2=0.999, eps=1e-8):
    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        mu_hat = b1 * m["mu"] / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        return p - mu_hat / (np.sqrt(m["nu"] / (1 - b2**t)) + eps)

    return update


CASES = {
    "adafactor": (
        optim.adafactor(0.05, min_dim_size_to_factor=3),
        adafactor_ref(0.05, min_dim_size_to_factor=3),
    ),
    "adafactor unfactored": (optim.adafactor(0.05), adafactor_ref(0.05, 128)),
    "adafactor momentum decay": (
        optim.adafactor(0.05, 3, clipping_threshold=0.5, momentum=0.8, weight_decay_rate=0.1),
        adafactor_ref(0.05, 3, clip=0.5, momentum=0.8, wd=0.1),
    ),
    "sm3": (optim.sm3(0.1, momentum=0.7), sm3_ref(0.1, b1=0.7)),
    "fromage": (optim.fromage(0.1), fromage_ref(0.1)),
    "sign_sgd": (optim.sign_sgd(0.01), sign_ref(0.01)),
    "signum": (optim.signum(0.01, beta=0.8), sign_ref(0.01, beta=0.8)),
    "rprop": (optim.rprop(0.1), rprop_ref(0.1)),
    "rprop bounded": (
        optim.rprop(0.1, eta_minus=0.3, eta_plus=1.5, min_step_size=0.05, max_step_size=0.2),
        rprop_ref(0.1, 0.3, 1.5, 0.05, 0.2),
    ),
    "adan": (
        optim.adan(1e-2, eps=0.1, eps_root=0.01, weight_decay=0.1),
        adan_ref(1e-2, eps=0.1, eps_root=0.01, wd=0.1),
    ),
    "adamaxw": (
        optim.adamaxw(1e-2, eps=0.5, weight_decay=0.1),
        adamaxw_ref(1e-2, eps=0.5, wd=0.1),
    ),
    "optimistic_gradient_descent": (
        optim.optimistic_gradient_descent(0.05, alpha=0.7, beta=0.4),
        optimistic_ref(0.05, 0.7, 0.4),
    ),
    "optimistic_adam_v2": (
        optim.optimistic_adam_v2(0.01, alpha=0.7, beta=0.4, eps=0.1),
        optimistic_ref(0.01, 0.7, 0.4, nadam_direction(eps=0.1)),
    ),
    "optimistic_adam": (
        optim.optimistic_adam(0.01, optimism=0.03),
        optimistic_ref(1.0, 0.01, 0.03, nadam_direction()),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@given(seed=st.integers(0, 2**16))
def test_updates_follow_the_defining_equations(name, seed):
    opt, update = CASES[name]
    params, grads = params_and_grads(seed)
    assert_history(run(opt, params, grads), reference(update, params, grads))


def test_rprop_takes_the_step_it_computes():
    """The first call already moves (Optax 0.2.8 returns the previous call's step, zero at
    first); the published rule, and torch.optim.Rprop, step at once."""
    opt = optim.rprop(0.1)
    p = fnp.zeros(1)
    state = opt.init(p)
    steps = []
    for g in [1.0, 1.0, 1.0, -1.0, 1.0]:
        updates, state = opt.update(fnp.asarray([g]), state, p)
        steps.append(float(updates[0]))
    np.testing.assert_allclose(steps, [-0.1, -0.12, -0.144, 0.0, -0.072], rtol=1e-6)


def polyak_ref(p, target, lr_max, f_min, eps, variant):
    g = p - target
    value = 0.5 * np.sum(g * g)
    gap = value - f_min
    if variant == "sps+":
        gap = max(gap, 0.0)
    squared_norm = np.sum(g * g) + eps
    if squared_norm <= np.finfo(np.float32).eps:  # at the minimum: no step
        return p, value
    return p - min(gap / squared_norm, lr_max) * g, value


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"max_learning_rate": 0.3, "eps": 0.5},
        {"f_min": 100.0, "variant": "sps+"},
        {"f_min": -1.0},
    ],
)
def test_polyak_sgd_steps_by_the_gap_to_f_min(kwargs):
    """x <- x - min((f(x) - f_min) / (|g|**2 + eps), max_learning_rate) g (Loizou et al.),
    the loss passed as update's `value`; under jit and through chain's extra arguments."""
    settings = {"max_learning_rate": 1.0, "f_min": 0.0, "eps": 0.0, "variant": "sps"}
    settings.update(kwargs)
    opt = optim.polyak_sgd(**kwargs)
    target = np.array([1.0, -2.0, 0.5])

    def loss(p):
        return 0.5 * fnp.sum((p - fnp.asarray(target, fnp.float32)) ** 2)

    @fg.jit
    def step(p, state):
        value, grad = fg.value_and_grad(loss)(p)
        updates, state = opt.update(grad, state, p, value=value)
        return optim.apply_updates(p, updates), state

    p, expected = fnp.asarray([3.0, 1.0, -1.0]), np.array([3.0, 1.0, -1.0])
    state = opt.init(p)
    for _ in range(4):
        p, state = step(p, state)
        expected, _ = polyak_ref(
            expected,
            target,
            settings["max_learning_rate"],
            settings["f_min"],
            settings["eps"],
            settings["variant"],
        )
        np.testing.assert_allclose(np.asarray(p), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="variant"):
        optim.polyak_sgd(variant="sps++")


def test_extra_arguments_reach_the_transformations_that_take_them_through_wrappers():
    """`value` goes through masked, inject_hyperparams, apply_if_finite and MultiSteps to
    scale_by_polyak, and transformations that take no extra arguments never see it."""
    polyak = optim.chain(optim.scale(1.0), optim.scale_by_polyak(max_learning_rate=10.0))
    grads = {"a": fnp.asarray([2.0, 0.0]), "b": fnp.asarray([1.0])}
    params = tree_util.tree_map(fnp.zeros_like, grads)
    # value 2.5 over |g|**2 = 5: each gradient times 0.5 (times -1 where sgd leads)
    for opt, factor in [
        (polyak, 0.5),
        (optim.masked(polyak, {"a": True, "b": True}), 0.5),
        (optim.apply_if_finite(polyak, 2), 0.5),
        (optim.MultiSteps(polyak, 1).gradient_transformation(), 0.5),
        (optim.inject_hyperparams(optim.polyak_sgd)(max_learning_rate=10.0), -0.5),
        (optim.named_chain(("clip", optim.clip(100.0)), ("polyak", polyak)), 0.5),
        (optim.flatten(polyak), 0.5),
        (optim.partition({"x": polyak}, {"a": "x", "b": "x"}), 0.5),
    ]:
        updates, _ = fg.jit(opt.update)(grads, opt.init(params), params, value=fnp.asarray(2.5))
        np.testing.assert_allclose(np.asarray(updates["a"]), factor * np.array([2.0, 0.0]))
    with pytest.raises(TypeError, match="value"):
        polyak.update(grads, polyak.init(params), params)


def test_noisy_sgd_adds_annealed_gaussian_noise():
    """The difference from SGD at step t is lr times N(0, eta / t**gamma); the same key gives
    the same noise, another key other noise."""
    eta, gamma, lr = 0.5, 0.55, 0.1
    p = {"w": fnp.zeros((100, 100)), "b": fnp.zeros(3)}
    g = tree_util.tree_map(fnp.ones_like, p)
    opt = optim.noisy_sgd(lr, eta, gamma, key=3)
    state = opt.init(p)
    update = fg.jit(opt.update)
    for t in (1, 2, 3):
        updates, state = update(g, state, p)
        noise = (np.asarray(updates["w"]) + lr) / -lr
        np.testing.assert_allclose(noise.std(), math.sqrt(eta / t**gamma), rtol=0.05)
        assert abs(noise.mean()) < 0.05
    again, _ = optim.noisy_sgd(lr, eta, gamma, key=fg.random.PRNGKey(3)).update(g, opt.init(p), p)
    first, _ = opt.update(g, opt.init(p), p)
    other_opt = optim.noisy_sgd(lr, eta, gamma, key=4)
    other, _ = other_opt.update(g, other_opt.init(p), p)
    np.testing.assert_array_equal(np.asarray(again["w"]), np.asarray(first["w"]))
    assert not np.allclose(np.asarray(other["w"]), np.asarray(first["w"]))
    quiet, _ = optim.noisy_sgd(lr, 0.0).update(g, optim.noisy_sgd(lr, 0.0).init(p), p)
    np.testing.assert_allclose(np.asarray(quiet["b"]), -lr * np.ones(3))


def test_lookahead_moves_slow_weights_towards_fast_ones_every_k_steps():
    """Zhang et al.: k fast SGD steps, then slow += alpha * (fast - slow) and fast = slow."""
    k, alpha, lr = 3, 0.4, 0.1
    params, grads = params_and_grads(11)
    opt = optim.lookahead(optim.sgd(lr, momentum=0.5), k, alpha, reset_state=True)
    lp = optim.LookaheadParams.init_synced(as_f32(params))
    state = opt.init(lp)
    step = fg.jit(opt.update)
    fast = {key: np.array(v) for key, v in params.items()}
    slow = {key: np.array(v) for key, v in params.items()}
    trace = {key: 0.0 for key in params}
    for t, g in enumerate(grads, start=1):
        updates, state = step(as_f32(g), state, lp)
        lp = optim.apply_updates(lp, updates)
        for key in params:
            trace[key] = g[key] + 0.5 * trace[key]
            fast[key] = fast[key] - lr * trace[key]
            if t % k == 0:
                slow[key] = slow[key] + alpha * (fast[key] - slow[key])
                fast[key] = slow[key]
                trace[key] = 0.0  # reset_state
            np.testing.assert_allclose(lp.fast[key], fast[key], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(lp.slow[key], slow[key], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="sync_period"):
        optim.lookahead(optim.sgd(0.1), 0, 0.5)
    with pytest.raises(ValueError, match="LookaheadParams"):
        opt.update(as_f32(grads[0]), state, as_f32(params))


def test_ema_and_distance_over_gradients():
    params, grads = params_and_grads(12)

    def average(g, p, t, m):
        m["e"] = 0.7 * m.get("e", 0.0) + 0.3 * g
        return p - m["e"] / (1 - 0.7**t)

    opt = optim.chain(optim.ema(0.7), optim.scale(-1.0))
    assert_history(run(opt, params, grads), reference(average, params, grads))

    def dog(g, p, t, m):
        """Ivgi et al., per leaf: max distance from x0 (at least 0.1 (1 + |x0|)) over the
        root of the summed squared gradient norms."""
        m.setdefault("x0", p)
        m["d"] = max(m.get("d", 0.1 * (1 + np.linalg.norm(p))), np.linalg.norm(p - m["x0"]))
        m["s"] = m.get("s", 0.0) + np.sum(g * g)
        return p - 0.5 * m["d"] / np.sqrt(m["s"] + 1e-8) * g

    opt = optim.chain(optim.scale_by_distance_over_gradients(reps_rel=0.1), optim.scale(-0.5))
    assert_history(run(opt, params, grads), reference(dog, params, grads))
    state = opt.init(as_f32(params))
    assert state[0].grad_sum_of_squares["s"].shape == ()


def test_per_leaf_transformations():
    rng = np.random.default_rng(13)
    g = {
        "m": rng.standard_normal((4, 3)),
        "v": rng.standard_normal(5),
        "k": rng.normal(size=(2, 2, 3, 4)),
    }
    p = {
        "m": rng.standard_normal((4, 3)),
        "v": np.full(5, 1e-5),
        "k": rng.normal(size=(2, 2, 3, 4)),
    }

    def apply(transform, grads=g, params=p):
        out, _ = fg.jit(transform.update)(
            as_f32(grads), transform.init(as_f32(params)), as_f32(params)
        )
        return {key: np.asarray(v, np.float64) for key, v in out.items()}

    out = apply(optim.centralize())
    np.testing.assert_allclose(out["m"], g["m"] - g["m"].mean(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(out["v"], g["v"], rtol=1e-6)
    np.testing.assert_allclose(
        out["k"], g["k"] - g["k"].mean(axis=(1, 2, 3), keepdims=True), rtol=1e-5, atol=1e-6
    )

    out = apply(optim.clip_by_block_rms(0.5))
    for key in g:
        np.testing.assert_allclose(out[key], g[key] / max(1.0, rms(g[key]) / 0.5), rtol=1e-5)

    out = apply(optim.scale_by_param_block_norm(1e-3))
    np.testing.assert_allclose(out["m"], g["m"] * np.linalg.norm(p["m"]), rtol=1e-5)
    np.testing.assert_allclose(out["v"], g["v"] * 1e-3, rtol=1e-5)  # |p| below min_scale
    out = apply(optim.scale_by_param_block_rms(1e-3))
    np.testing.assert_allclose(out["m"], g["m"] * rms(p["m"]), rtol=1e-5)
    np.testing.assert_allclose(out["v"], g["v"] * 1e-3, rtol=1e-5)

    def agc(grad, param, axis, clipping=0.05, eps=1e-3):
        """Brock et al.: per unit, g * clipping * max(|p|, eps) / |g| where that is smaller."""
        g_norm = np.sqrt(np.sum(grad**2, axis=axis, keepdims=True))
        limit = clipping * np.maximum(np.sqrt(np.sum(param**2, axis=axis, keepdims=True)), eps)
        return np.where(g_norm < limit, grad, grad * limit / np.maximum(g_norm, 1e-6))

    out = apply(optim.adaptive_grad_clip(0.05))
    np.testing.assert_allclose(out["m"], agc(g["m"], p["m"], 0), rtol=1e-5)
    np.testing.assert_allclose(out["v"], agc(g["v"], p["v"], None), rtol=1e-5)
    np.testing.assert_allclose(out["k"], agc(g["k"], p["k"], (0, 1, 2)), rtol=1e-5)
    assert not np.allclose(out["m"], g["m"])
    out = apply(optim.adaptive_grad_clip(0.05, axis=1), {"m": g["m"]}, {"m": p["m"]})
    np.testing.assert_allclose(out["m"], agc(g["m"], p["m"], 1), rtol=1e-5)
    with pytest.raises(ValueError, match=r"shape \(1, 2, 2, 2, 2, 2\)"):
        big = {"x": fnp.ones((1, 2, 2, 2, 2, 2))}
        optim.adaptive_grad_clip(0.1).update(big, optim.EmptyState(), big)

    out = apply(optim.keep_params_nonnegative(), params={k: np.abs(v) * 0.1 for k, v in p.items()})
    for key in g:
        q = np.abs(p[key]) * 0.1
        np.testing.assert_allclose(out[key], np.where(q + g[key] < 0, -q, g[key]), rtol=1e-6)

    zero = apply(optim.set_to_zero())
    assert all(not np.any(v) for v in zero.values())
    halved = apply(optim.stateless(lambda u, params: tree_util.tree_map(lambda x: x / 2, u)))
    np.testing.assert_allclose(halved["m"], g["m"] / 2, rtol=1e-6)
    added = apply(optim.stateless_with_tree_map(lambda u, q: u + q))
    np.testing.assert_allclose(added["m"], g["m"] + p["m"], rtol=1e-6)
    none_params, _ = optim.stateless_with_tree_map(lambda u, q: u * (q is None)).update(g, ())
    np.testing.assert_allclose(none_params["v"], g["v"])


def test_zero_nans_records_where_it_found_them():
    opt = optim.zero_nans()
    grads = {"a": fnp.asarray([1.0, np.nan, 3.0]), "b": fnp.asarray([2.0])}
    state = opt.init(grads)
    assert not bool(state.found_nan["a"])
    updates, state = fg.jit(opt.update)(grads, state)
    np.testing.assert_array_equal(np.asarray(updates["a"]), [1.0, 0.0, 3.0])
    assert bool(state.found_nan["a"]) and not bool(state.found_nan["b"])


def test_scale_gradient_scales_the_backward_pass_only():
    def f(x, scale):
        y = optim.scale_gradient({"x": x * x}, scale)["x"]
        return fnp.sum(fnp.sin(y))

    x = fnp.asarray([0.3, -1.2, 2.0])
    for scale in (0.0, 1.0, 0.25, -3.0):
        np.testing.assert_allclose(float(f(x, scale)), np.sum(np.sin(np.asarray(x) ** 2)))
        expected = scale * np.cos(np.asarray(x) ** 2) * 2 * np.asarray(x)
        for grad in (fg.grad(f), fg.jit(fg.grad(f), static_argnums=1)):
            np.testing.assert_allclose(np.asarray(grad(x, scale)), expected, rtol=1e-5, atol=1e-7)


def test_factored_state_keeps_rows_and_columns_only():
    params = {"big": fnp.zeros((3, 200, 130)), "small": fnp.zeros((200, 5)), "vec": fnp.zeros(300)}
    state = optim.scale_by_factored_rms().init(params)
    assert state.v_row["big"].shape == (3, 130) and state.v_col["big"].shape == (3, 200)
    assert state.v["big"].shape == (1,)
    assert state.v["small"].shape == (200, 5) and state.v_row["small"].shape == (1,)
    assert state.v["vec"].shape == (300,)
    rng = np.random.default_rng(14)
    g = rng.standard_normal((3, 200, 130)).astype(np.float32)
    updates, state = optim.scale_by_factored_rms().update(
        {**params, "big": fnp.asarray(g)}, state, params
    )
    # First step: decay 0, so v = outer(row means, column means) / mean(row means) per slice.
    g_sq = g.astype(np.float64) ** 2 + 1e-30
    rows, cols = g_sq.mean(axis=1), g_sq.mean(axis=2)  # (3, 130), (3, 200)
    v = cols[:, :, None] * rows[:, None, :] / rows.mean(axis=1)[:, None, None]
    np.testing.assert_allclose(np.asarray(updates["big"]), g / np.sqrt(v), rtol=1e-4)


def test_sm3_rejects_complex_parameters():
    with pytest.raises(ValueError, match="complex64"):
        optim.sm3(0.1).init({"z": fnp.ones(3, fnp.complex64)})


@pytest.mark.parametrize("name", sorted(CASES))
def test_jitted_updates_equal_eager(name):
    opt, _ = CASES[name]
    params, grads = params_and_grads(0)
    assert_history(run(opt, params, grads, jit=True), run(opt, params, grads), rtol=1e-6)


@pytest.mark.parametrize(
    "make, make_ref",
    [
        (optim.adan, lambda lr: adan_ref(lr)),
        (optim.fromage, fromage_ref),
        (optim.signum, lambda lr: sign_ref(lr, beta=0.9)),
        (optim.adamaxw, adamaxw_ref),
    ],
)
def test_a_schedule_as_learning_rate(make, make_ref):
    schedule = optim.linear_schedule(0.02, 0.0, transition_steps=5)
    lrs = [0.02 * (1 - min(t, 5) / 5) for t in range(STEPS)]
    refs = [make_ref(lr) for lr in lrs]
    params, grads = params_and_grads(15)
    expected = reference(lambda g, p, t, m: refs[t - 1](g, p, t, m), params, grads)
    assert_history(run(make(schedule), params, grads, jit=True), expected)


def test_scheduled_weight_decay_counts_steps():
    decay = optim.piecewise_constant_schedule(0.5, {2: 0.0})
    opt = optim.add_decayed_weights(decay)
    p = {"a": fnp.ones(2)}
    state = opt.init(p)
    seen = []
    for _ in range(4):
        updates, state = fg.jit(opt.update)({"a": fnp.zeros(2)}, state, p)
        seen.append(float(updates["a"][0]))
    assert seen == [0.5, 0.5, 0.0, 0.0]


def test_apply_every_sums_k_updates():
    opt = optim.apply_every(3)
    p = {"a": fnp.zeros(2)}
    state = opt.init(p)
    out = []
    for i in range(1, 8):
        updates, state = fg.jit(opt.update)({"a": fnp.full(2, float(i))}, state)
        out.append(float(updates["a"][0]))
    assert out == [0.0, 0.0, 6.0, 0.0, 0.0, 15.0, 0.0]


def test_conditional_transformations_act_on_the_chosen_steps():
    p = {"a": fnp.zeros(2)}
    g = {"a": fnp.ones(2)}
    for wrap, otherwise in [(optim.conditionally_transform, 1.0), (optim.conditionally_mask, 0.0)]:
        opt = wrap(optim.sgd(0.5, momentum=0.5), lambda step: step % 2 == 1)
        state = opt.init(p)
        out = []
        for _ in range(4):
            updates, state = fg.jit(opt.update)(g, state, p)
            out.append(float(updates["a"][0]))
        # momentum advances only on the chosen steps: traces 1, then 1.5
        assert out == [otherwise, -0.5, otherwise, -0.75], (wrap, out)
        assert int(state.step) == 4
    by_value = optim.conditionally_transform(
        optim.scale(-1.0), lambda step, value: value > 1.0, forward_extra_args=True
    )
    state = by_value.init(p)
    kept, _ = by_value.update(g, state, p, value=fnp.asarray(0.5))
    flipped, _ = by_value.update(g, state, p, value=fnp.asarray(2.0))
    assert float(kept["a"][0]) == 1.0 and float(flipped["a"][0]) == -1.0


def test_partition_freeze_flatten_and_named_chain():
    params, grads = params_and_grads(16)
    labels = {"w": "adam", "b": "frozen", "s": "adam"}
    opt = optim.partition({"adam": optim.adam(1e-2), "frozen": optim.set_to_zero()}, labels)
    got = run(opt, params, grads, jit=True)
    adam_history = reference(adam_ref(1e-2), params, grads)
    for step in range(STEPS):
        np.testing.assert_allclose(got[step]["w"], adam_history[step]["w"], rtol=2e-5)
        np.testing.assert_allclose(got[step]["b"], params["b"].astype(np.float32), rtol=0)
    assert isinstance(opt.init(as_f32(params)), optim.PartitionState)
    assert optim.multi_transform is optim.partition

    frozen = run(
        optim.chain(optim.freeze({"w": True, "b": False, "s": True}), optim.sgd(0.1)), params, grads
    )
    sgd_history = reference(sgd_ref(0.1), params, grads)
    np.testing.assert_allclose(frozen[-1]["w"], params["w"].astype(np.float32), rtol=0)
    np.testing.assert_allclose(frozen[-1]["b"], sgd_history[-1]["b"], rtol=1e-5)

    flat = optim.flatten(optim.adam(1e-2))
    assert_history(run(flat, params, grads, jit=True), adam_history)
    assert flat.init(as_f32(params))[0].mu.shape == (17,)

    named = optim.named_chain(("clip", optim.clip(0.5)), ("sgd", optim.sgd(0.1, momentum=0.9)))
    state = named.init(as_f32(params))
    assert list(state) == ["clip", "sgd"]
    updates, state = named.update(as_f32(grads[0]), state, as_f32(params))
    np.testing.assert_allclose(updates["w"], -0.1 * np.clip(grads[0]["w"], -0.5, 0.5), rtol=1e-6)
    with pytest.raises(ValueError, match="unique"):
        optim.named_chain(("a", optim.identity()), ("a", optim.identity()))


@pytest.mark.parametrize(
    "skip_fn, bad",
    [
        (optim.skip_not_finite, {"a": fnp.asarray([np.inf, 1.0])}),
        (
            functools.partial(optim.skip_large_updates, max_squared_norm=10.0),
            {"a": fnp.full(2, 3.0)},
        ),
    ],
)
def test_multi_steps_skips_the_updates_its_function_rejects(skip_fn, bad):
    opt = optim.MultiSteps(optim.sgd(1.0), every_k_schedule=2, should_skip_update_fn=skip_fn)
    p = {"a": fnp.zeros(2)}
    state = opt.init(p)
    assert bool(state.skip_state["should_skip"]) is False
    step = fg.jit(opt.update)
    out = []
    for g in [{"a": fnp.ones(2)}, bad, {"a": fnp.full(2, 2.0)}, bad]:
        updates, state = step(g, state, p)
        out.append(float(updates["a"][1]))
        assert bool(state.skip_state["should_skip"]) == (g is bad)
    # the two good gradients are averaged and applied together; the bad ones leave no trace
    assert out == [0.0, 0.0, -1.5, 0.0]
    assert int(state.mini_step) == 0 and int(state.gradient_step) == 1


def test_tree_map_params_reaches_the_moments_only():
    params = {"w": fnp.ones((2, 3)), "b": fnp.ones(3)}
    opt = optim.chain(optim.adam(1e-3), optim.add_decayed_weights(optim.constant_schedule(0.1)))
    _, state = opt.update(params, opt.init(params), params)
    doubled = optim.tree_map_params(opt, lambda x: x * 2, state)
    np.testing.assert_allclose(doubled[0][0].mu["w"], 2 * np.asarray(state[0][0].mu["w"]))
    np.testing.assert_allclose(doubled[0][0].nu["b"], 2 * np.asarray(state[0][0].nu["b"]))
    assert int(doubled[0][0].count) == 1 and int(doubled[1].count) == 1
    shapes = optim.tree_map_params(
        opt, lambda x: x.shape, state, transform_non_params=lambda x: None
    )
    assert shapes[0][0].mu == {"w": (2, 3), "b": (3,)} and shapes[0][0].count is None


def test_snapshot_records_its_measure():
    opt = optim.chain(optim.snapshot("norm", optim.global_norm), optim.scale(2.0))
    p = {"a": fnp.asarray([3.0, 4.0])}
    state = opt.init(p)
    assert float(state[0].measurement["norm"]) == 5.0
    updates, state = opt.update({"a": fnp.asarray([0.0, 2.0])}, state)
    assert float(state[0].measurement["norm"]) == 2.0
    np.testing.assert_allclose(np.asarray(updates["a"]), [0.0, 4.0])


def onecycle(t, points, interpolate):
    """Interpolate between (step, value) points; the last value beyond the last point."""
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if s0 <= t < s1:
            frac = (t - s0) / max(s1 - s0, 1)
            if interpolate == "linear":
                return v0 + (v1 - v0) * frac
            return v1 + (v0 - v1) / 2 * (math.cos(math.pi * frac) + 1)
    return points[-1][1]


def warmup_cosine(t, init, peak, warmup, decay_steps, end):
    if t < warmup:
        return init + (peak - init) * t / warmup
    done = min(t - warmup, decay_steps - warmup)
    return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * done / (decay_steps - warmup)))


@pytest.mark.parametrize(
    "schedule, closed_form, steps",
    [
        (
            optim.polynomial_schedule(2.0, 0.5, power=2.5, transition_steps=10, transition_begin=3),
            lambda t: (2.0 - 0.5) * (1 - min(max(t - 3, 0), 10) / 10) ** 2.5 + 0.5,
            [0, 3, 4, 8, 12, 13, 14, 40],
        ),
        (
            optim.polynomial_schedule(1.0, 0.0, 2, transition_steps=0),
            lambda t: 1.0,
            [0, 5],
        ),
        (
            optim.warmup_constant_schedule(0.1, 1.0, warmup_steps=4),
            lambda t: 0.1 + 0.9 * min(t, 4) / 4,
            [0, 1, 3, 4, 5, 30],
        ),
        (
            optim.warmup_exponential_decay_schedule(
                0.0, 1.0, 4, transition_steps=3, decay_rate=0.5, transition_begin=2, end_value=0.2
            ),
            lambda t: t / 4 if t < 4 else max(0.5 ** (max(t - 4 - 2, 0) / 3), 0.2),
            [0, 2, 4, 5, 6, 7, 9, 12, 30],
        ),
        (
            optim.warmup_exponential_decay_schedule(1.0, 2.0, 2, 4, 0.5, staircase=True),
            lambda t: 1.0 + t / 2 if t < 2 else 2.0 * 0.5 ** ((t - 2) // 4),
            [0, 1, 2, 5, 6, 10, 11],
        ),
        (
            optim.piecewise_interpolate_schedule("linear", 2.0, {4: 0.5, 10: 3.0}),
            lambda t: onecycle(t, [(0, 2.0), (4, 1.0), (10, 3.0)], "linear"),
            [0, 1, 4, 7, 10, 11, 50],
        ),
        (
            optim.piecewise_interpolate_schedule("cosine", 2.0, {0: 0.5, 6: 4.0}),
            lambda t: onecycle(t, [(0, 1.0), (6, 4.0)], "cosine"),
            [0, 2, 5, 6, 7],
        ),
        (
            optim.piecewise_interpolate_schedule("linear", 0.7),
            lambda t: 0.7,
            [0, 9],
        ),
        (
            optim.linear_onecycle_schedule(100, 1.0),
            lambda t: onecycle(t, [(0, 0.04), (30, 1.0), (85, 0.04), (100, 0.04 / 1e4)], "linear"),
            [0, 15, 29, 30, 31, 60, 85, 90, 100, 120],
        ),
        (
            optim.cosine_onecycle_schedule(
                50, 2.0, pct_start=0.2, div_factor=10, final_div_factor=100
            ),
            lambda t: onecycle(t, [(0, 0.2), (10, 2.0), (50, 2.0 / 1000)], "cosine"),
            [0, 5, 10, 11, 30, 49, 50, 70],
        ),
        (
            optim.sgdr_schedule(
                [
                    {"init_value": 0.0, "peak_value": 1.0, "warmup_steps": 2, "decay_steps": 10},
                    {
                        "init_value": 0.5,
                        "peak_value": 0.8,
                        "warmup_steps": 3,
                        "decay_steps": 6,
                        "end_value": 0.1,
                    },
                ]
            ),
            lambda t: (
                warmup_cosine(t, 0.0, 1.0, 2, 10, 0.0)
                if t < 10
                else warmup_cosine(t - 10, 0.5, 0.8, 3, 6, 0.1)
            ),
            [0, 1, 2, 5, 9, 10, 11, 13, 15, 16, 30],
        ),
    ],
)
def test_new_schedules_follow_their_closed_forms(schedule, closed_form, steps):
    jitted = fg.jit(schedule)
    for t in steps:
        np.testing.assert_allclose(float(schedule(t)), closed_form(t), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(
            float(jitted(fnp.asarray(t, fnp.int32))), closed_form(t), rtol=1e-5, atol=1e-7
        )


def test_schedules_reject_bad_arguments():
    with pytest.raises(ValueError, match="'linear' or 'cosine'"):
        optim.piecewise_interpolate_schedule("cubic", 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        optim.piecewise_interpolate_schedule("linear", 1.0, {3: -1.0})
    for make in (optim.linear_onecycle_schedule, optim.cosine_onecycle_schedule):
        with pytest.raises(ValueError, match="transition_steps"):
            make(0, 1.0)


def lbfgs_direction(g, pairs, first_norm=None):
    """H g with H from the BFGS inverse update (Nocedal & Wright 6.17) over the pairs
    (s, y), oldest first, from gamma I: gamma = <y, s> / |y|**2 for the newest pair, or
    min(1, 1 / |g|) with no pairs yet."""
    if not pairs:
        return min(1.0, 1.0 / np.linalg.norm(g)) * g
    s_new, y_new = pairs[-1]
    h = np.eye(g.size) * (y_new @ s_new) / (y_new @ y_new)
    for s, y in pairs:
        rho = 1.0 / (y @ s)
        left = np.eye(g.size) - rho * np.outer(s, y)
        h = left @ h @ left.T + rho * np.outer(s, s)
    return h @ g


def test_lbfgs_direction_is_the_bfgs_inverse_update_over_its_memory():
    rng = np.random.default_rng(17)
    memory = 3
    xs = [rng.standard_normal(5) for _ in range(6)]
    gs = [rng.standard_normal(5) for _ in range(6)]
    gs = [x * np.array([3.0, 2.0, 1.0, 0.5, 4.0]) + 0.1 * g for x, g in zip(xs, gs)]
    opt = optim.scale_by_lbfgs(memory_size=memory)
    split = lambda v: {"a": fnp.asarray(v[:3], fnp.float32), "b": fnp.asarray(v[3:], fnp.float32)}  # noqa: E731
    state = opt.init(split(xs[0]))
    update = fg.jit(opt.update)
    for k in range(6):
        direction, state = update(split(gs[k]), state, split(xs[k]))
        pairs = [(xs[i] - xs[i - 1], gs[i] - gs[i - 1]) for i in range(1, k + 1)][-memory:]
        got = np.concatenate([np.asarray(direction["a"]), np.asarray(direction["b"])])
        np.testing.assert_allclose(got, lbfgs_direction(gs[k], pairs), rtol=2e-4, atol=1e-5)
    with pytest.raises(ValueError, match="memory_size"):
        optim.scale_by_lbfgs(memory_size=0)


def test_backtracking_linesearch_takes_the_first_step_with_sufficient_decrease():
    a = np.array([4.0, 1.0, 0.25])

    def value_fn(x, shift):
        return 0.5 * fnp.sum(fnp.asarray(a, fnp.float32) * (x["x"] - shift) ** 2)

    opt = optim.chain(
        optim.scale(-1.0),
        optim.scale_by_backtracking_linesearch(
            20, decrease_factor=0.5, increase_factor=2.0, max_learning_rate=3.0, store_grad=True
        ),
    )
    x = {"x": fnp.asarray([1.0, -2.0, 3.0])}
    state = opt.init(x)
    value_and_grad = optim.value_and_grad_from_state(value_fn)

    @fg.jit
    def step(x, state):
        value, grad = value_and_grad(x, 0.5, state=state)
        updates, state = opt.update(
            grad, state, x, value=value, grad=grad, value_fn=value_fn, shift=0.5
        )
        return optim.apply_updates(x, updates), state

    expected, lr = np.array([1.0, -2.0, 3.0]), 1.0
    for _ in range(4):
        x, state = step(x, state)
        f = lambda z: 0.5 * np.sum(a * (z - 0.5) ** 2)  # noqa: E731
        g = a * (expected - 0.5)
        lr = min(2.0 * lr, 3.0)
        while f(expected - lr * g) > f(expected) - lr * 1e-4 * (g @ g):
            lr *= 0.5
        expected = expected - lr * g
        np.testing.assert_allclose(np.asarray(x["x"]), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(state[1].learning_rate), lr, rtol=1e-6)
        # the stored gradient is the one at the accepted point
        np.testing.assert_allclose(np.asarray(state[1].grad["x"]), a * (expected - 0.5), rtol=1e-5)
    with pytest.raises(ValueError, match="store_grad=True"):
        optim.value_and_grad_from_state(value_fn)(x, 0.5, state=optim.adam(0.1).init(x))
    with pytest.raises(TypeError, match="'scale'"):
        opt.update(x, state, x, value=1.0, grad=x, value_fn=value_fn, shift=0.5, scale=2.0)


def test_lbfgs_with_backtracking_minimises_a_quadratic():
    hessian = np.array([[3.0, 0.5, 0.1], [0.5, 2.0, 0.3], [0.1, 0.3, 1.0]])
    target = np.array([1.0, -2.0, 0.5])

    def value_fn(x):
        d = x - fnp.asarray(target, fnp.float32)
        return 0.5 * d @ fnp.asarray(hessian, fnp.float32) @ d

    opt = optim.chain(
        optim.scale_by_lbfgs(), optim.scale(-1.0), optim.scale_by_backtracking_linesearch(15)
    )
    x = fnp.zeros(3)
    state = opt.init(x)

    @fg.jit
    def step(x, state):
        value, grad = fg.value_and_grad(value_fn)(x)
        updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=value_fn)
        return optim.apply_updates(x, updates), state

    for _ in range(12):
        x, state = step(x, state)
    np.testing.assert_allclose(np.asarray(x), target, atol=1e-4)
