"""funcgrad.optim.contrib against the published update rules, written out here in NumPy
float64: per leaf where a method treats leaves alone, over the whole parameter tree where
it takes global norms or inner products (D-Adaptation, Prodigy, Mechanic, DoG, MoMo)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_optim import assert_history, params_and_grads, reference, run

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import optim, random, tree_util
from funcgrad.optim import contrib

STEPS = 6


def tree_reference(step, params, grads, values=None):
    """`step(g, p, t, memory, value) -> new p` on whole dicts of float64 leaves."""
    p = {k: np.array(v, np.float64) for k, v in params.items()}
    memory: dict = {}
    history = []
    for t, g in enumerate(grads, start=1):
        value = None if values is None else values[t - 1]
        p = step(g, p, t, memory, value)
        history.append(p)
    return history


def run_with_values(opt, params, grads, values, jit=False):
    """Parameters after each step of `opt`, given the loss values as `value=`."""
    p = {k: fnp.asarray(v, fnp.float32) for k, v in params.items()}
    state = opt.init(p)

    def step(p, state, g, value):
        updates, state = opt.update(g, state, p, value=value)
        return optim.apply_updates(p, updates), state

    step = fg.jit(step) if jit else step
    history = []
    for g, value in zip(grads, values):
        g = {k: fnp.asarray(v, fnp.float32) for k, v in g.items()}
        p, state = step(p, state, g, fnp.asarray(value, fnp.float32))
        history.append({k: np.asarray(v, np.float64) for k, v in p.items()})
    return history


def vdot(a, b):
    return sum(float(np.vdot(a[k], b[k])) for k in a)


def norm(a):
    return math.sqrt(vdot(a, a))


# -- schedule-free ------------------------------------------------------------------------------


def schedule_free_ref(lr_at, base_step, b1=0.9, power=2.0):
    """Defazio et al.: z steps by the base optimizer at y, x is the weighted average of the
    z's with weights max_lr_t**power, the next y = b1 x + (1 - b1) z."""

    def step(g, y, t, m, value):
        if not m:
            m.update(x=dict(y), z=dict(y), weight_sum=0.0, max_lr=0.0)
        m["max_lr"] = max(m["max_lr"], lr_at(t))
        weight = m["max_lr"] ** power
        m["weight_sum"] += weight
        c = weight / m["weight_sum"] if m["weight_sum"] else 0.0
        dz = base_step(g, y, t, m)
        m["z"] = {k: m["z"][k] + dz[k] for k in y}
        m["x"] = {k: (1 - c) * m["x"][k] + c * m["z"][k] for k in y}
        return {k: b1 * m["x"][k] + (1 - b1) * m["z"][k] for k in y}

    return step


def test_schedule_free_sgd_averages_the_sgd_iterates():
    params, grads = params_and_grads(21)
    lr, wd = 0.1, 0.05

    def sgd_step(g, y, t, m):
        return {k: -lr * (g[k] + wd * y[k]) for k in y}

    opt = contrib.schedule_free_sgd(lr, weight_decay=wd)
    wanted = tree_reference(schedule_free_ref(lambda t: lr, sgd_step), params, grads)
    assert_history(run(opt, params, grads, jit=True), wanted)


def test_schedule_free_adamw_with_warmup_and_its_evaluation_point():
    """The warmup reaches the base steps at counts from 0 and the averaging weights at
    counts from 1; the base step is RMSProp's with bias correction and eps outside the root,
    plus weight decay at y."""
    params, grads = params_and_grads(22)
    lr, warmup, b2, eps, wd = 0.05, 3, 0.999, 1e-3, 0.1

    def warm(k):
        return lr * min(k / warmup, 1.0)

    def adamw_step(g, y, t, m):
        m["v"] = {k: b2 * m.get("v", {}).get(k, 0.0) + (1 - b2) * g[k] ** 2 for k in y}
        return {
            k: -warm(t - 1) * (g[k] / (np.sqrt(m["v"][k] / (1 - b2**t)) + eps) + wd * y[k])
            for k in y
        }

    opt = contrib.schedule_free_adamw(lr, warmup_steps=warmup, eps=eps, weight_decay=wd)
    memory_probe = {}

    def probe(g, y, t, m, value):
        new = schedule_free_ref(warm, adamw_step)(g, y, t, m, value)
        memory_probe["x"] = m["x"]
        return new

    wanted = tree_reference(probe, params, grads)
    assert_history(run(opt, params, grads), wanted)
    p = {k: fnp.asarray(v, fnp.float32) for k, v in params.items()}
    state = opt.init(p)
    for g in grads:
        updates, state = opt.update(tree_util.tree_map(fnp.asarray, g), state, p)
        p = optim.apply_updates(p, updates)
    x = contrib.schedule_free_eval_params(state, p)
    for k in x:
        np.testing.assert_allclose(np.asarray(x[k]), memory_probe["x"][k], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="needs the ScheduleFreeState"):
        contrib.schedule_free_eval_params(optim.adam(0.1).init(p), p)


# -- learning-rate-free Adam ----------------------------------------------------------------------


def drifting(seed):
    """Gradients that keep one direction (plus noise), so the parameters travel away from
    the start and distance estimates grow."""
    params, grads = params_and_grads(seed)
    rng = np.random.default_rng(seed + 100)
    drift = {k: rng.standard_normal(np.shape(v)) for k, v in params.items()}
    return params, [{k: drift[k] + 0.2 * g[k] for k in g} for g in grads]


def dadapt_ref(lr=1.0, b1=0.9, b2=0.999, eps=1e-8, d0=1e-6, wd=0.0):
    """D-Adaptation's Adam (Defazio & Mishchenko): with step dlr = d lr sqrt(1 - b2**t) /
    (1 - b1**t), m averages dlr g, s the sqrt(b2)-weighted dlr g, r the dlr <g, s_prev /
    (sqrt(v_prev) + eps)>, and d = max(d, r / ((1 - sqrt(b2)) |s|_1))."""
    sb2 = math.sqrt(b2)

    def step(g, p, t, m, value):
        if not m:
            zeros = {k: np.zeros_like(v) for k, v in p.items()}
            m.update(m=zeros, v=zeros, s=zeros, r=0.0, d=d0)
        dlr = m["d"] * lr * math.sqrt(1 - b2**t) / (1 - b1**t)
        weighted = {k: m["s"][k] / (np.sqrt(m["v"][k]) + eps) for k in p}
        m["r"] = sb2 * m["r"] + (1 - sb2) * dlr * vdot(g, weighted)
        m["m"] = {k: b1 * m["m"][k] + (1 - b1) * dlr * g[k] for k in p}
        m["v"] = {k: b2 * m["v"][k] + (1 - b2) * g[k] ** 2 for k in p}
        m["s"] = {k: sb2 * m["s"][k] + (1 - sb2) * dlr * g[k] for k in p}
        l1 = sum(np.abs(s).sum() for s in m["s"].values())
        m["d"] = max(m["d"], m["r"] / ((1 - sb2) * l1))
        return {k: p[k] - m["m"][k] / (np.sqrt(m["v"][k]) + eps) - wd * dlr * p[k] for k in p}

    return step


def prodigy_ref(lr=1.0, b1=0.9, b2=0.999, eps=1e-8, d0=1e-6, wd=0.0, safeguard=False):
    """Prodigy (Mishchenko & Defazio): Adam's moments of d g; r gains (d / d0) dlr <g, x0 -
    x>, s the (dlr or, safeguarded, d) (d / d0) g, both weighted by sqrt(b2); d grows to
    r / |s|_1, and the step is dlr m / (sqrt(v) + d eps), d the new estimate."""
    b3 = math.sqrt(b2)

    def step(g, p, t, m, value):
        if not m:
            zeros = {k: np.zeros_like(v) for k, v in p.items()}
            m.update(m=zeros, v=zeros, s=zeros, r=0.0, d=d0, x0=dict(p))
        d = m["d"]
        dlr = d * lr * math.sqrt(1 - b2**t) / (1 - b1**t)
        m["m"] = {k: b1 * m["m"][k] + (1 - b1) * d * g[k] for k in p}
        m["v"] = {k: b2 * m["v"][k] + (1 - b2) * (d * g[k]) ** 2 for k in p}
        rate = d if safeguard else dlr
        m["s"] = {k: b3 * m["s"][k] + rate * d * g[k] / d0 for k in p}
        m["r"] = b3 * m["r"] + d / d0 * dlr * vdot(g, {k: m["x0"][k] - p[k] for k in p})
        l1 = sum(np.abs(s).sum() for s in m["s"].values())
        m["d"] = max(d, m["r"] / l1)
        return {
            k: p[k] - dlr * m["m"][k] / (np.sqrt(m["v"][k]) + m["d"] * eps) - wd * dlr * p[k]
            for k in p
        }

    return step


@pytest.mark.parametrize(
    "opt, ref",
    [
        (lambda: contrib.dadapt_adamw(), dadapt_ref()),
        # a larger start lets D grow within six steps
        (
            lambda: contrib.dadapt_adamw(0.5, estim_lr0=0.05, weight_decay=0.1),
            dadapt_ref(0.5, d0=0.05, wd=0.1),
        ),
        (lambda: contrib.prodigy(estim_lr0=0.05, weight_decay=0.1), prodigy_ref(d0=0.05, wd=0.1)),
        (
            lambda: contrib.prodigy(estim_lr0=0.05, safeguard_warmup=True),
            prodigy_ref(d0=0.05, safeguard=True),
        ),
    ],
)
def test_distance_estimating_adam_variants(opt, ref):
    params, grads = drifting(23)
    assert_history(
        run(opt(), params, grads, jit=True),
        tree_reference(ref, params, grads),
        rtol=1e-4,
        atol=1e-5,
    )


def test_the_distance_estimate_grows_and_never_shrinks():
    params, grads = drifting(24)
    opt = contrib.prodigy(estim_lr0=1e-3)
    p = {k: fnp.asarray(v, fnp.float32) for k, v in params.items()}
    state = opt.init(p)
    estimates = []
    for g in grads:
        updates, state = opt.update(tree_util.tree_map(fnp.asarray, g), state, p)
        p = optim.apply_updates(p, updates)
        estimates.append(float(state.estim_lr))
    assert estimates == sorted(estimates) and estimates[-1] > 2 * 1e-3


# -- Mechanic -------------------------------------------------------------------------------------


def mechanic_ref(base_step, wd=0.01, eps=1e-8, s_init=1e-6, n=6):
    """Cutkosky et al.: x = x0 + S Delta with S = sum(s_i); h = <g + wd S |g| / |x| x, -Delta>
    (Delta read back from x), and per beta_i = 1 - 0.1**i: m_i = max(beta_i m_i, |h| + eps),
    v_i = beta_i**2 v_i + h**2, r_i = beta_i r_i + clip(h, +-m_i old) s_i, s_i = (s_init / n
    m_i + max(r_i, 0)) / (sqrt(v_i) + eps)."""
    betas = np.array([1 - 0.1**i for i in range(1, n + 1)])

    def step(g, p, t, mem, value):
        if not mem:
            mem.update(
                x0=dict(p), r=np.zeros(n), m=np.zeros(n), v=np.zeros(n), s=np.full(n, s_init)
            )
        u = base_step(g, p, t, mem)
        big_s = mem["s"].sum()
        decay = wd * big_s * norm(g) / (norm(p) + eps)
        gd = {k: g[k] + decay * p[k] for k in p}
        delta = {k: (p[k] - mem["x0"][k]) / (big_s + eps) for k in p}
        h = -vdot(gd, delta)
        clipped = np.clip(h, -mem["m"], mem["m"])
        mem["m"] = np.maximum(betas * mem["m"], abs(h) + eps)
        mem["v"] = betas**2 * mem["v"] + h**2
        mem["r"] = betas * mem["r"] + clipped * mem["s"]
        mem["s"] = (s_init / n * mem["m"] + np.maximum(mem["r"], 0)) / (np.sqrt(mem["v"]) + eps)
        return {k: mem["x0"][k] + mem["s"].sum() * (delta[k] + u[k]) for k in p}

    return step


def test_mechanize_scales_sgd_by_its_learned_factor():
    params, grads = params_and_grads(25)
    opt = contrib.mechanize(optim.sgd(0.1), weight_decay=0.5, s_init=0.1)
    ref = mechanic_ref(lambda g, p, t, m: {k: -0.1 * g[k] for k in p}, wd=0.5, s_init=0.1)
    assert_history(
        run(opt, params, grads, jit=True), tree_reference(ref, params, grads), rtol=1e-4, atol=1e-5
    )


# -- SAM ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sync_period", [2, 3])
def test_sam_alternates_normalized_ascent_and_a_step_from_the_cached_point(sync_period):
    params, grads = params_and_grads(26)
    lr, rho = 0.1, 0.05
    opt = contrib.sam(optim.sgd(lr), optim.chain(contrib.normalize(), optim.sgd(rho)), sync_period)

    def step(g, p, t, m, value):
        if (t - 1) % sync_period == 0:
            m["cache"] = dict(p)
        if t % sync_period:  # an adversarial step: up along the normalized gradient
            return {k: p[k] + rho * g[k] / norm(g) for k in p}
        return {k: m["cache"][k] - lr * g[k] for k in p}

    assert_history(run(opt, params, grads, jit=True), tree_reference(step, params, grads))


def test_opaque_sam_takes_the_gradient_at_the_perturbed_point():
    target = np.array([1.0, -2.0, 0.5])

    def loss(x):
        return fnp.sum((x - target) ** 2 * fnp.asarray([1.0, 3.0, 0.5]))

    def grad_np(x):
        return 2 * (x - target) * np.array([1.0, 3.0, 0.5])

    lr, rho = 0.1, 0.2
    opt = contrib.sam(
        optim.sgd(lr), optim.chain(contrib.normalize(), optim.sgd(rho)), opaque_mode=True
    )
    x = fnp.zeros(3)
    state = opt.init(x)
    wanted = np.zeros(3)
    for _ in range(3):
        g = fg.grad(loss)(x)
        updates, state = opt.update(g, state, x, grad_fn=lambda p, i: fg.grad(loss)(p))
        x = optim.apply_updates(x, updates)
        g_np = grad_np(wanted)
        wanted = wanted - lr * grad_np(wanted + rho * g_np / np.linalg.norm(g_np))
        np.testing.assert_allclose(np.asarray(x), wanted, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="grad_fn"):
        opt.update(g, state, x)
    with pytest.raises(ValueError, match="sync_period must be at least 1"):
        contrib.sam(optim.sgd(lr), optim.sgd(rho), sync_period=0)


# -- coin betting and distance over gradients -----------------------------------------------------


def cocob_ref(alpha=100.0, eps=1e-8, wd=0.0):
    """COCOB-Backprop (Orabona & Tommasi), per element: L = max(L, |g|), G += |g|, R =
    max(R - g (x - x0), 0), theta -= g, x = x0 + theta / (L max(G + L, alpha L)) (L + R)."""

    def update(g, p, t, m):
        if not m:
            m.update(x0=p.copy(), big_l=np.full_like(p, eps), big_g=0.0, reward=0.0, theta=0.0)
        g = g + wd * p
        m["big_l"] = np.maximum(m["big_l"], np.abs(g))
        m["big_g"] = m["big_g"] + np.abs(g)
        m["reward"] = np.maximum(m["reward"] - g * (p - m["x0"]), 0)
        m["theta"] = m["theta"] - g
        big_l = m["big_l"]
        return m["x0"] + m["theta"] / (big_l * np.maximum(m["big_g"] + big_l, alpha * big_l)) * (
            big_l + m["reward"]
        )

    return update


def dog_ref(lr=1.0, r0=None, heuristic=1e-6, eps=1e-8, first_lr=None):
    """DoG (Ivgi et al.): eta = r / sqrt(sum |g|**2 + eps), r the largest distance from x0
    (over the whole tree), from r0 or heuristic * (1 + |x0|); or the first step at
    first_lr, r from 0."""

    def step(g, p, t, m, value):
        if not m:
            start = r0 if r0 is not None else heuristic * (1 + norm(p))
            m.update(x0=dict(p), r=0.0 if first_lr else start, total=0.0)
        m["r"] = max(m["r"], norm({k: p[k] - m["x0"][k] for k in p}))
        m["total"] += vdot(g, g)
        eta = m["r"] / math.sqrt(m["total"] + eps)
        if first_lr and t == 1:
            eta = first_lr
        return {k: p[k] - lr * eta * g[k] for k in p}

    return step


def dowg_ref(lr=1.0, eps=1e-4, d2_0=None):
    """DoWG (Khaled et al.): d2 the largest squared distance from x0, G += d2 |g|**2, eta =
    d2 / (sqrt(G) + eps)."""

    def step(g, p, t, m, value):
        if not m:
            m.update(x0=dict(p), d2=eps if d2_0 is None else d2_0, total=0.0)
        m["d2"] = max(m["d2"], norm({k: p[k] - m["x0"][k] for k in p}) ** 2)
        m["total"] += m["d2"] * vdot(g, g)
        eta = m["d2"] / (math.sqrt(m["total"]) + eps)
        return {k: p[k] - lr * eta * g[k] for k in p}

    return step


def test_cocob_bets_on_the_summed_gradients():
    params, grads = params_and_grads(27)
    assert_history(
        run(contrib.cocob(), params, grads, jit=True), reference(cocob_ref(), params, grads)
    )
    assert_history(
        run(contrib.cocob(alpha=3.0, weight_decay=0.1), params, grads),
        reference(cocob_ref(alpha=3.0, wd=0.1), params, grads),
    )


@pytest.mark.parametrize(
    "opt, ref",
    [
        (lambda: contrib.dog(), dog_ref()),
        (lambda: contrib.dog(init_step=("heuristic", 0.01)), dog_ref(heuristic=0.01)),
        (lambda: contrib.dog(0.5, init_step=("distance", 0.1)), dog_ref(0.5, r0=0.1)),
        (lambda: contrib.dog(init_step=("learning_rate", 0.2)), dog_ref(first_lr=0.2)),
        (lambda: contrib.dowg(), dowg_ref()),
        (lambda: contrib.dowg(0.5, init_estim_sq_dist=0.3), dowg_ref(0.5, d2_0=0.3)),
    ],
)
def test_distance_over_gradients_over_the_whole_tree(opt, ref):
    params, grads = params_and_grads(28)
    assert_history(
        run(opt(), params, grads, jit=True),
        tree_reference(ref, params, grads),
        rtol=1e-4,
        atol=1e-5,
    )


def test_dog_names_a_bad_init_step():
    with pytest.raises(ValueError, match="init_step must be one of"):
        contrib.scale_by_dog(("guess", 1.0))


# -- MoMo ------------------------------------------------------------------------------------------


def momo_ref(lr, beta=0.9, lb0=0.0, wd=0.0, adapt=False):
    """Schaipp et al.: averages d of g, f of the loss, gamma of <g, x> (the first step
    takes them whole); tau = min(lr, max((1 + lr wd)(f - lb - gamma) + <d, x>, 0) / |d|**2),
    x <- (x - tau d) / (1 + lr wd)'s first order: x - tau d - lr wd / (1 + lr wd) x."""

    def step(g, p, t, m, value):
        b = 0.0 if t == 1 else beta
        m["d"] = {k: b * m.get("d", {}).get(k, 0.0) + (1 - b) * g[k] for k in p}
        m["f"] = b * m.get("f", 0.0) + (1 - b) * value
        m["gamma"] = b * m.get("gamma", 0.0) + (1 - b) * vdot(g, p)
        lb = m.get("lb", lb0)
        shrink = 1 + lr * wd
        inner, d2 = vdot(m["d"], p), vdot(m["d"], m["d"])
        if adapt:
            cap = shrink * (m["f"] - m["gamma"]) + inner
            if cap < shrink * lb:
                lb = max(cap / (2 * shrink), lb0)
        tau = min(lr, max(shrink * (m["f"] - lb - m["gamma"]) + inner, 0) / d2)
        if adapt:
            m["lb"] = max(m["f"] + inner - m["gamma"] - tau * d2 / 2, lb0)
        return {k: p[k] - tau * m["d"][k] - lr * wd / shrink * p[k] for k in p}

    return step


def momo_adam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, lb0=0.0, wd=0.0, adapt=False):
    """MoMo-Adam: the same model in Adam's metric D = eps + sqrt(v / (1 - b2**t)), with
    bc1 = 1 - b1**t: tau = min(lr / bc1, max((1 + lr wd)(f - bc1 lb - gamma) + <d, x>, 0) /
    <d, d / D>), x - tau d / D - lr wd / (1 + lr wd) x."""

    def step(g, p, t, m, value):
        m["d"] = {k: b1 * m.get("d", {}).get(k, 0.0) + (1 - b1) * g[k] for k in p}
        m["v"] = {k: b2 * m.get("v", {}).get(k, 0.0) + (1 - b2) * g[k] ** 2 for k in p}
        m["f"] = b1 * m.get("f", 0.0) + (1 - b1) * value
        m["gamma"] = b1 * m.get("gamma", 0.0) + (1 - b1) * vdot(g, p)
        metric = {k: eps + np.sqrt(m["v"][k] / (1 - b2**t)) for k in p}
        d2 = vdot(m["d"], {k: m["d"][k] / metric[k] for k in p})
        inner, bc1, shrink = vdot(m["d"], p), 1 - b1**t, 1 + lr * wd
        lb = m.get("lb", lb0)
        if adapt:
            cap = shrink * (m["f"] - m["gamma"]) + inner
            if cap < shrink * bc1 * lb:
                lb = max(cap / (2 * bc1 * shrink), lb0)
        tau = min(lr / bc1, max(shrink * (m["f"] - bc1 * lb - m["gamma"]) + inner, 0) / d2)
        if adapt:
            m["lb"] = max((m["f"] + inner - m["gamma"] - tau * d2 / 2) / bc1, lb0)
        return {k: p[k] - tau * m["d"][k] / metric[k] - lr * wd / shrink * p[k] for k in p}

    return step


@pytest.mark.parametrize(
    "opt, ref",
    [
        (lambda: contrib.momo(0.5, weight_decay=0.1), momo_ref(0.5, wd=0.1)),
        (
            lambda: contrib.momo(0.5, lower_bound=0.5, adapt_lower_bound=True),
            momo_ref(0.5, lb0=0.5, adapt=True),
        ),
        (lambda: contrib.momo_adam(0.1, weight_decay=0.1), momo_adam_ref(0.1, wd=0.1)),
        (lambda: contrib.momo_adam(0.1, adapt_lower_bound=True), momo_adam_ref(0.1, adapt=True)),
    ],
)
def test_momo_takes_a_polyak_step_from_its_model_of_the_loss(opt, ref):
    params, grads = params_and_grads(29)
    values = list(np.random.default_rng(0).uniform(0.5, 3.0, STEPS))
    wanted = tree_reference(ref, params, grads, values)
    assert_history(
        run_with_values(opt(), params, grads, values, jit=True), wanted, rtol=1e-4, atol=1e-5
    )


def test_momo_needs_the_loss():
    p = {"w": fnp.ones(2)}
    opt = contrib.momo()
    with pytest.raises(ValueError, match="momo needs the loss"):
        opt.update(p, opt.init(p), p)


# -- Adam's relatives -----------------------------------------------------------------------------


def adopt_ref(lr, b1=0.9, b2=0.9999, eps=1e-6, clip=True, nesterov=False):
    """Taniguchi et al.: v = g**2 at the first step (no update); then m = b1 m + (1 - b1)
    clip(g / max(sqrt(v_prev), eps), +-(t - 1)**0.25), v = b2 v + (1 - b2) g**2, x -= lr m."""

    def update(g, p, t, m):
        if t == 1:
            m["v"], m["m"] = g * g, np.zeros_like(g)
            return p
        u = g / np.maximum(np.sqrt(m["v"]), eps)
        if clip:
            u = np.clip(u, -((t - 1) ** 0.25), (t - 1) ** 0.25)
        m["m"] = b1 * m["m"] + (1 - b1) * u
        m["v"] = b2 * m["v"] + (1 - b2) * g * g
        direction = b1 * m["m"] + (1 - b1) * u if nesterov else m["m"]
        return p - lr * direction

    return update


def ademamix_ref(lr, b1=0.9, b2=0.999, b3=0.9999, alpha=5.0, eps=1e-8, wd=0.0):
    """Pagliardini et al.: (m1 / (1 - b1**t) + alpha m2) / (sqrt(nu / (1 - b2**t)) + eps),
    m2 the slow moment of decay b3 (b3 and alpha may depend on the step)."""

    def update(g, p, t, m):
        slow = b3(t - 1) if callable(b3) else b3
        mix = alpha(t - 1) if callable(alpha) else alpha
        m["m1"] = b1 * m.get("m1", 0.0) + (1 - b1) * g
        m["m2"] = slow * m.get("m2", 0.0) + (1 - slow) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        direction = (m["m1"] / (1 - b1**t) + mix * m["m2"]) / (np.sqrt(m["nu"] / (1 - b2**t)) + eps)
        return p - lr * (direction + wd * p)

    return update


def simplified_ademamix_ref(lr, b1=0.99, b2=0.95, alpha=0.0, eps=1e-8):
    """m = b1 m + g (accumulated, no damping), (m + alpha g) / (sqrt(n_hat) + eps)."""

    def update(g, p, t, m):
        m["m"] = b1 * m.get("m", 0.0) + g
        m["n"] = b2 * m.get("n", 0.0) + (1 - b2) * g * g
        return p - lr * (m["m"] + alpha * g) / (np.sqrt(m["n"] / (1 - b2**t)) + eps)

    return update


def acprop_ref(lr, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, wd=0.0):
    """Zhuang et al.: g / (sqrt(s_hat) + eps) with s_hat the bias-corrected mean of the
    squared prediction errors (g - m)**2 of the steps before (1 at the first), then m and s
    updated with this step's g (s gaining eps_root)."""

    def update(g, p, t, m):
        previous = 1.0 if t == 1 else m["s"] / (1 - b2 ** (t - 1))
        direction = g / (np.sqrt(previous) + eps)
        error = g - m.get("m", 0.0)
        m["m"] = b1 * m.get("m", 0.0) + (1 - b1) * g
        m["s"] = b2 * m.get("s", 0.0) + (1 - b2) * error**2 + eps_root
        return p - lr * (direction + wd * p)

    return update


def madgrad_ref(lr, momentum=0.9, eps=1e-6, wd=0.0):
    """Defazio & Jelassi: lambda_k = (lr + eps) sqrt(k + 1), s += lambda g, nu += lambda g**2,
    z = x0 - s / (cbrt(nu) + eps), x = (1 - momentum) z + momentum x."""

    def update(g, p, t, m):
        if not m:
            m.update(x0=p.copy(), s=0.0, nu=0.0)
        g = g + wd * p
        weight = (lr + eps) * math.sqrt(t)
        m["s"] = m["s"] + weight * g
        m["nu"] = m["nu"] + weight * g * g
        z = m["x0"] - m["s"] / (np.cbrt(m["nu"]) + eps)
        return (1 - momentum) * z + momentum * p

    return update


@pytest.mark.parametrize(
    "opt, ref",
    [
        (lambda: contrib.adopt(0.05), adopt_ref(0.05)),
        (
            lambda: contrib.adopt(0.05, nesterov=True, use_clipping=False),
            adopt_ref(0.05, clip=False, nesterov=True),
        ),
        (lambda: contrib.ademamix(0.01, weight_decay=0.1), ademamix_ref(0.01, wd=0.1)),
        (
            lambda: contrib.ademamix(0.01, b3=lambda c: 0.9 + 0.01 * c, alpha=lambda c: 1.0 + c),
            ademamix_ref(0.01, b3=lambda c: 0.9 + 0.01 * c, alpha=lambda c: 1.0 + c),
        ),
        (
            lambda: contrib.simplified_ademamix(0.01, alpha=2.0),
            simplified_ademamix_ref(0.01, alpha=2.0),
        ),
        (lambda: contrib.madgrad(0.05, weight_decay=0.1), madgrad_ref(0.05, wd=0.1)),
        (lambda: contrib.acprop(0.01, weight_decay=0.1), acprop_ref(0.01, wd=0.1)),
        (lambda: contrib.acprop(0.01, eps=1e-3), acprop_ref(0.01, eps=1e-3)),
    ],
)
def test_adam_relatives_follow_their_equations(opt, ref):
    params, grads = params_and_grads(30)
    assert_history(
        run(opt(), params, grads, jit=True), reference(ref, params, grads), rtol=1e-4, atol=1e-5
    )


def test_adopt_and_ademamix_keep_their_moments_in_mu_dtype():
    params, grads = params_and_grads(31)
    p = {k: fnp.asarray(v, fnp.float32) for k, v in params.items()}
    for opt, fields in (
        (contrib.adopt(0.01, mu_dtype=fnp.bfloat16), ("mu",)),
        (contrib.ademamix(0.01, mu_dtype=fnp.bfloat16), ("m1", "m2", "nu")),
    ):
        state = opt.init(p)
        updates, state = opt.update(tree_util.tree_map(fnp.asarray, grads[0]), state, p)
        for field in fields:
            leaves = tree_util.tree_leaves(getattr(state[0], field))
            assert {leaf.dtype for leaf in leaves} == {np.dtype(fnp.bfloat16)}, field


# -- reduce_on_plateau ----------------------------------------------------------------------------


def plateau_scales(values, factor, patience, rtol, atol, cooldown, accumulation, min_scale):
    """The scale after each call, by the rule as a loop: every `accumulation` values their
    mean is measured; an improvement resets the count, `patience` measurements without one
    cut the scale and start a cooldown in which nothing is counted."""
    scale, best, plateau, cooling, pending, out = 1.0, math.inf, 0, 0, [], []
    for value in values:
        pending.append(value)
        if len(pending) == accumulation:
            average = sum(pending) / len(pending)
            pending = []
            improved = average < (1 - rtol) * best - atol
            if improved:
                best = average
            plateau = 0 if improved else plateau + 1
            if cooling:
                cooling -= 1
                plateau = 0
            elif plateau == patience:
                scale, plateau, cooling = max(scale * factor, min_scale), 0, cooldown
        out.append(scale)
    return out


@pytest.mark.parametrize(
    "kwargs",
    [
        {"factor": 0.5, "patience": 2},
        {"factor": 0.5, "patience": 1, "cooldown": 2, "min_scale": 0.2},
        {"factor": 0.1, "patience": 1, "accumulation_size": 2, "atol": 0.05, "rtol": 0.0},
    ],
)
def test_reduce_on_plateau_cuts_the_scale_after_patience_measurements(kwargs):
    values = [3.0, 2.0, 2.5, 2.1, 1.9, 1.95, 2.2, 1.0, 1.2, 1.3, 1.25, 1.4, 0.9, 1.0, 1.1, 1.2]
    settings = {"factor": 0.1, "patience": 10, "rtol": 1e-4, "atol": 0.0, "cooldown": 0}
    settings.update({"accumulation_size": 1, "min_scale": 0.0}, **kwargs)
    wanted = plateau_scales(
        values,
        settings["factor"],
        settings["patience"],
        settings["rtol"],
        settings["atol"],
        settings["cooldown"],
        settings["accumulation_size"],
        settings["min_scale"],
    )
    opt = contrib.reduce_on_plateau(**settings)
    g = {"w": fnp.ones(2)}
    state = opt.init(g)
    update = fg.jit(opt.update)
    got = []
    for value in values:
        updates, state = update(g, state, value=fnp.asarray(value))
        got.append(float(updates["w"][0]))
    np.testing.assert_allclose(got, wanted, rtol=1e-6)
    assert min(wanted) < 1.0  # the values do reach a plateau


def test_reduce_on_plateau_checks_its_arguments():
    for kwargs, message in (
        ({"factor": 1.0}, "factor must be in"),
        ({"rtol": -1.0}, "non-negative"),
        ({"rtol": 0.0, "atol": 0.0}, "one of rtol and atol"),
        ({"rtol": 2.0}, "at most 1"),
    ):
        with pytest.raises(ValueError, match=message):
            contrib.reduce_on_plateau(**kwargs)


# -- Muon -----------------------------------------------------------------------------------------


def newton_schulz_ref(x, coeffs, steps, eps=1e-8):
    """X / (|X|_F + eps), then X <- a X + (b A + c A A) X with A = X X^T, on the orientation
    with fewer rows."""
    wide = x.shape[0] > x.shape[1]
    x = x.T if wide else x
    x = x / (np.linalg.norm(x) + eps)
    per_step = [coeffs] * steps if np.ndim(coeffs) == 1 else list(coeffs)
    for a, b, c in per_step:
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if wide else x


def test_newton_schulz_converges_to_the_orthogonal_polar_factor():
    """With the cubic (1.5, -0.5, 0) the iteration converges to U V^T of the SVD U S V^T;
    for a batch of matrices (reduction axis 1, output axis 2) each is its own."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3))
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    got = contrib.orthogonalize_via_newton_schulz(fnp.asarray(x, fnp.float32), (1.5, -0.5, 0.0), 40)
    np.testing.assert_allclose(np.asarray(got), u @ vt, atol=1e-4)
    batch = rng.standard_normal((4, 2, 6))
    dims = contrib.MuonDimensionNumbers(reduction_axis=1, output_axis=(0,))
    got = contrib.orthogonalize_via_newton_schulz(
        fnp.asarray(batch, fnp.float32), (1.5, -0.5, 0.0), 40, dimension_numbers=dims
    )
    for j in range(6):  # axis 2 is the batch axis: each (4, 2) slice, as (2, 4)
        u, _, vt = np.linalg.svd(batch[:, :, j].T, full_matrices=False)
        np.testing.assert_allclose(np.asarray(got)[:, :, j], (u @ vt).T, atol=1e-4)
    with pytest.raises(ValueError, match="not a matrix"):
        contrib.orthogonalize_via_newton_schulz(fnp.ones(3), (1.5, -0.5, 0.0))


def test_the_quintic_steps_match_a_numpy_loop_in_each_preconditioning():
    x = np.random.default_rng(1).standard_normal((6, 4))
    for coeffs, steps in (
        ((3.4445, -4.775, 2.0315), 5),
        (np.random.default_rng(2).uniform(1, 2, (3, 3)), 3),
    ):
        got = contrib.orthogonalize_via_newton_schulz(fnp.asarray(x, fnp.float32), coeffs, steps)
        np.testing.assert_allclose(
            np.asarray(got), newton_schulz_ref(x, coeffs, steps), rtol=2e-4, atol=2e-5
        )
    spectral = contrib.orthogonalize_via_newton_schulz(
        fnp.asarray(x, fnp.float32), (1.5, -0.5, 0.0), 1, preconditioning="spectral"
    )
    y = x.T / np.linalg.norm(x, 2)
    np.testing.assert_allclose(
        np.asarray(spectral), (1.5 * y - 0.5 * (y @ y.T) @ y).T, rtol=1e-4, atol=1e-5
    )
    with pytest.raises(ValueError, match="preconditioning must be one of"):
        contrib.orthogonalize_via_newton_schulz(
            fnp.asarray(x), (1.0, 0.0, 0.0), preconditioning="qr"
        )


def muon_ref(lr, beta=0.95, coeffs=(3.4445, -4.775, 2.0315), steps=5, adam_lr=None, wd=0.0):
    """Matrices: Nesterov momentum with bias correction, orthogonalized, times sqrt(max(1,
    fan_out / fan_in)), plus decoupled weight decay; other leaves: NAdamW (Muon's nesterov
    default reaches AdamW too) with eps 1e-8."""
    adam_lr = lr if adam_lr is None else adam_lr

    def update(g, p, t, m):
        m["mu"] = beta * m.get("mu", 0.0) + (1 - beta) * g
        if p.ndim == 2:
            look_ahead = beta * m["mu"] / (1 - beta ** (t + 1)) + (1 - beta) * g / (1 - beta**t)
            o = newton_schulz_ref(look_ahead, coeffs, steps)
            o = o * math.sqrt(max(1.0, p.shape[1] / p.shape[0]))
            return p - lr * (o + wd * p)
        b1, b2 = 0.9, 0.999
        m["m"] = b1 * m.get("m", 0.0) + (1 - b1) * g
        m["v"] = b2 * m.get("v", 0.0) + (1 - b2) * g * g
        m_hat = b1 * m["m"] / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        return p - adam_lr * m_hat / (np.sqrt(m["v"] / (1 - b2**t)) + 1e-8)

    return update


def test_muon_orthogonalizes_matrices_and_leaves_the_rest_to_adamw():
    params, grads = params_and_grads(32)  # w is (3, 4): fan_out / fan_in = 4 / 3
    opt = contrib.muon(0.02, weight_decay=0.1, adam_learning_rate=0.01)
    ref = muon_ref(0.02, adam_lr=0.01, wd=0.1)
    assert_history(
        run(opt, params, grads, jit=True), reference(ref, params, grads), rtol=2e-4, atol=2e-5
    )


def test_muon_with_dimension_numbers_for_a_batch_of_matrices():
    """A (2, 3, 4) parameter with reduction axis 1 and output axis 2 is two matrices, each
    stepped as a 2-d parameter of its own would be; consistent_rms scales by
    sqrt(max(fan_in, fan_out)) * rms."""
    rng = np.random.default_rng(3)
    stacked = {"w": rng.standard_normal((2, 3, 4)), "b": rng.standard_normal(4)}
    grads = [{k: rng.standard_normal(v.shape) for k, v in stacked.items()} for _ in range(3)]
    dims = {"w": contrib.MuonDimensionNumbers(1, 2), "b": None}
    opt = contrib.muon(0.02, muon_weight_dimension_numbers=dims, consistent_rms=0.2)
    got = run(opt, stacked, grads)
    for i in range(2):
        single = {"w": stacked["w"][i]}
        single_grads = [{"w": g["w"][i]} for g in grads]
        alone = run(contrib.muon(0.02, consistent_rms=0.2), single, single_grads)
        for step in range(3):
            np.testing.assert_allclose(got[step]["w"][i], alone[step]["w"], rtol=1e-5, atol=1e-6)
    o = newton_schulz_ref(grads[0]["w"][0], (3.4445, -4.775, 2.0315), 5)
    first = stacked["w"][0] - 0.02 * o * math.sqrt(4) * 0.2
    np.testing.assert_allclose(got[0]["w"][0], first, rtol=2e-4, atol=2e-5)


def test_muon_adaptive_and_presets():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 5))
    opt = contrib.scale_by_muon(adaptive=True, nesterov=False)
    state = opt.init(fnp.zeros((3, 5)))
    out, _ = opt.update(fnp.asarray(x, fnp.float32), state)
    o = newton_schulz_ref(x, (3.4445, -4.775, 2.0315), 5)
    np.testing.assert_allclose(np.asarray(out), np.sum(x * o) * o, rtol=2e-4, atol=2e-5)
    dion = contrib.muon(0.1, ns_coeffs="dion", ns_steps=4)
    coeffs = optim.tree_utils.tree_get(dion.init({"w": fnp.zeros((2, 2))}), "ns_coeffs")
    assert coeffs.shape == (4, 3) and float(coeffs[-1, 0]) == pytest.approx(2.8366)
    with pytest.raises(ValueError, match="ns_coeffs must be one of"):
        contrib.muon(0.1, ns_coeffs="fast")
    with pytest.raises(ValueError, match="cannot make 5 steps"):
        contrib.scale_by_muon(ns_coeffs=((1.0, 0.0, 0.0),) * 2).init(fnp.zeros((2, 2)))


# -- Sophia ---------------------------------------------------------------------------------------


def fixed_diagonal(diag):
    """A Hessian-diagonal estimator returning `diag` (a dict of arrays) every time."""

    def update(updates, state, params=None, **extra_args):
        return {k: fnp.asarray(v, fnp.float32) for k, v in diag.items()}, state

    return optim.GradientTransformationExtraArgs(lambda params: optim.EmptyState(), update)


def sophia_ref(lr, diag, b1=0.965, b2=0.99, eps=1e-8, gamma=0.01, clip=1.0, interval=10, wd=1e-4):
    """Liu et al.: x -= lr (clip(m_hat / max(gamma h, eps), +-clip) + wd x), h the moving
    average (b2) of the diagonal estimates, refreshed after the steps t - 1 = 0, interval,
    2 interval, ... (the step itself uses h as it was)."""

    def update(g, p, t, m, key):
        m["m"] = b1 * m.get("m", 0.0) + (1 - b1) * g
        h = m.get("h", 0.0)
        step = np.clip(m["m"] / (1 - b1**t) / np.maximum(gamma * h, eps), -clip, clip)
        if (t - 1) % interval == 0:
            m["h"] = b2 * h + (1 - b2) * diag[key]
        return p - lr * (step + wd * p)

    return update


def test_sophia_divides_the_momentum_by_the_refreshed_diagonal_and_clips():
    params, grads = params_and_grads(33)
    rng = np.random.default_rng(5)
    diag = {k: rng.uniform(-1, 50, np.shape(v)) for k, v in params.items()}
    opt = contrib.sophia(
        0.05, update_interval=2, gamma=0.5, hessian_diagonal_fn=fixed_diagonal(diag)
    )
    ref = sophia_ref(0.05, diag, interval=2, gamma=0.5)
    wanted = tree_reference(
        lambda g, p, t, m, v: {k: ref(g[k], p[k], t, m.setdefault(k, {}), k) for k in p},
        params,
        grads,
    )
    assert_history(run(opt, params, grads, jit=True), wanted, rtol=1e-4, atol=1e-5)


def test_hutchinson_is_exact_for_a_diagonal_hessian_and_sophia_takes_obj_fn():
    scales = {"a": np.array([1.0, 2.0, 3.0]), "b": np.array([[0.5, 4.0]])}

    def f(p):
        return sum(0.5 * fnp.sum(fnp.asarray(scales[k], fnp.float32) * p[k] ** 2) for k in p)

    params = {k: fnp.asarray(np.ones_like(v), fnp.float32) for k, v in scales.items()}
    estimator = contrib.hutchinson_estimator_diag_hessian(random.PRNGKey(3))
    state = estimator.init(params)
    for _ in range(2):  # u * (H u) = diag(H) * u**2 = diag(H) for signs u
        estimate, state = fg.jit(lambda s: estimator.update(params, s, params, obj_fn=f))(state)
        for k in scales:
            np.testing.assert_allclose(np.asarray(estimate[k]), scales[k], rtol=1e-6)
    opt = contrib.sophia(0.1)
    updates, _ = opt.update(params, opt.init(params), params, obj_fn=f)  # h is 0 at first
    np.testing.assert_allclose(np.asarray(updates["a"]), -0.1 * (1.0 + 1e-4), rtol=1e-5)
    with pytest.raises(ValueError, match="obj_fn"):
        estimator.update(params, estimator.init(params), params)


# -- differential privacy -------------------------------------------------------------------------


def clip_rows(rows, bound):
    """Each row (an example's flattened gradient) scaled to norm at most `bound`."""
    norms = np.linalg.norm(rows, axis=1)
    return rows * np.minimum(1.0, bound / np.where(norms == 0, 1.0, norms))[:, None]


def test_per_example_clipping_by_global_and_per_layer_norms():
    rng = np.random.default_rng(6)
    grads = {"w": rng.standard_normal((5, 2, 3)), "b": rng.standard_normal((5, 3))}
    grads["w"][2] = 0.0
    grads["b"][2] = 0.0  # an all-zero example stays zero
    flat = np.concatenate([grads["b"].reshape(5, -1), grads["w"].reshape(5, -1)], axis=1)
    clipped = clip_rows(flat, 1.5).sum(axis=0)
    fgrads = {k: fnp.asarray(v, fnp.float32) for k, v in grads.items()}
    summed, count = optim.per_example_global_norm_clip(fgrads, 1.5)
    np.testing.assert_allclose(np.asarray(summed["b"]), clipped[:3], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(summed["w"]).ravel(), clipped[3:], rtol=1e-5, atol=1e-6)
    assert int(count) == int(np.sum(np.linalg.norm(flat, axis=1) > 1.5))
    for uniform in (True, False):
        summed, counts = optim.per_example_layer_norm_clip(fgrads, 2.0, uniform=uniform)
        for k, size in (("b", 3), ("w", 6)):
            bound = 2.0 * math.sqrt(0.5 if uniform else size / 9)
            rows = grads[k].reshape(5, -1)
            np.testing.assert_allclose(
                np.asarray(summed[k]).ravel(),
                clip_rows(rows, bound).sum(axis=0),
                rtol=1e-5,
                atol=1e-6,
            )
            assert int(counts[k]) == int(np.sum(np.linalg.norm(rows, axis=1) > bound))
    with pytest.raises(ValueError, match="same leading batch"):
        optim.per_example_global_norm_clip({"a": fnp.ones((2, 3)), "b": fnp.ones((3,))}, 1.0)


def test_dpsgd_averages_clipped_examples_plus_noise_of_the_stated_scale():
    rng = np.random.default_rng(7)
    grads = {"w": rng.standard_normal((8, 50, 40))}
    rows = grads["w"].reshape(8, -1)
    fgrads = {"w": fnp.asarray(grads["w"], fnp.float32)}
    params = {"w": fnp.zeros((50, 40))}
    quiet = contrib.differentially_private_aggregate(2.0, 0.0, key=1)
    updates, _ = quiet.update(fgrads, quiet.init(params))
    np.testing.assert_allclose(
        np.asarray(updates["w"]).ravel(), clip_rows(rows, 2.0).sum(0) / 8, rtol=1e-5, atol=1e-6
    )
    noisy = contrib.dpsgd(0.1, l2_norm_clip=2.0, noise_multiplier=1.5, seed=3)
    state = noisy.init(params)
    first, state = noisy.update(fgrads, state, params)
    second, _ = noisy.update(fgrads, state, params)
    noise = (np.asarray(first["w"]).ravel() / -0.1 - clip_rows(rows, 2.0).sum(0) / 8) * 8
    np.testing.assert_allclose(noise.std(), 2.0 * 1.5, rtol=0.05)
    assert not np.allclose(np.asarray(first["w"]), np.asarray(second["w"]))  # fresh noise
    with pytest.raises(ValueError, match="give key or seed, not both"):
        contrib.differentially_private_aggregate(1.0, 1.0, key=1, seed=2)


# -- complex parameters, normalize ----------------------------------------------------------------


def test_split_real_and_imaginary_runs_the_inner_optimizer_on_both_parts():
    rng = np.random.default_rng(8)
    z = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    grads = [rng.standard_normal(4) + 1j * rng.standard_normal(4) for _ in range(4)]
    opt = contrib.split_real_and_imaginary(optim.adam(0.1))
    p = {"z": fnp.asarray(z, fnp.complex64), "r": fnp.ones(2)}
    state = opt.init(p)
    for g in grads:
        updates, state = opt.update(
            {"z": fnp.asarray(g, fnp.complex64), "r": fnp.ones(2)}, state, p
        )
        p = optim.apply_updates(p, updates)
    real = run(
        optim.adam(0.1), {"re": z.real, "im": z.imag}, [{"re": g.real, "im": g.imag} for g in grads]
    )
    np.testing.assert_allclose(
        np.asarray(p["z"]), real[-1]["re"] + 1j * real[-1]["im"], rtol=1e-5, atol=1e-6
    )
    assert p["z"].dtype == fnp.complex64


def test_normalize_divides_by_the_global_norm():
    g = {"a": fnp.asarray([3.0, 0.0]), "b": fnp.asarray([[4.0]])}
    out, _ = contrib.normalize().update(g, contrib.normalize().init(g))
    np.testing.assert_allclose(np.asarray(out["a"]), [0.6, 0.0])
    np.testing.assert_allclose(np.asarray(out["b"]), [[0.8]])
