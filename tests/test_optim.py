"""funcgrad.optim against the published update equations, written out here in NumPy float64."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import optim, tree_util

STEPS = 6


def params_and_grads(seed: int):
    """A pytree of parameters and a sequence of gradients for it (several leaves, shapes)."""
    rng = np.random.default_rng(seed)
    params = {
        "w": rng.standard_normal((3, 4)),
        "b": rng.standard_normal(4),
        "s": rng.standard_normal(()),
    }
    grads = [
        {k: rng.standard_normal(np.shape(v)) * rng.uniform(0.1, 3) for k, v in params.items()}
        for _ in range(STEPS)
    ]
    return params, grads


def run(opt, params, grads, jit=False):
    """Parameters after each step of `opt` (float32), as float64 NumPy dicts."""
    p = {k: fnp.asarray(v, fnp.float32) for k, v in params.items()}
    state = opt.init(p)

    def step(p, state, g):
        updates, state = opt.update(g, state, p)
        return optim.apply_updates(p, updates), state

    step = fg.jit(step) if jit else step
    history = []
    for g in grads:
        p, state = step(p, state, {k: fnp.asarray(v, fnp.float32) for k, v in g.items()})
        history.append({k: np.asarray(v, np.float64) for k, v in p.items()})
    return history


def reference(update, params, grads):
    """Apply `update(g, p, t, memory) -> new p` leaf by leaf; `memory` is per-leaf state."""
    p = {k: np.array(v, np.float64) for k, v in params.items()}
    memory = {k: {} for k in p}
    history = []
    for t, g in enumerate(grads, start=1):
        p = {k: update(g[k], p[k], t, memory[k]) for k in p}
        history.append(p)
    return history


def assert_history(got, expected, rtol=2e-5, atol=2e-6):
    for step, (a, b) in enumerate(zip(got, expected)):
        for k in b:
            np.testing.assert_allclose(
                a[k], b[k], rtol=rtol, atol=atol, err_msg=f"step {step}, {k}"
            )


def sgd_ref(lr, momentum=None, nesterov=False):
    def update(g, p, t, m):
        if momentum is None:
            return p - lr * g
        m["trace"] = g + momentum * m.get("trace", 0.0)
        direction = g + momentum * m["trace"] if nesterov else m["trace"]
        return p - lr * direction

    return update


def adam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=0.0):
    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        mu_hat, nu_hat = m["mu"] / (1 - b1**t), m["nu"] / (1 - b2**t)
        direction = mu_hat / (np.sqrt(nu_hat + eps_root) + eps) + weight_decay * p
        return p - lr * direction

    return update


def rmsprop_ref(lr, decay=0.9, eps=1e-8, initial_scale=0.0, centered=False):
    def update(g, p, t, m):
        m["nu"] = decay * m.get("nu", initial_scale) + (1 - decay) * g * g
        m["mu"] = decay * m.get("mu", 0.0) + (1 - decay) * g
        denominator = m["nu"] - m["mu"] ** 2 if centered else m["nu"]
        return p - lr * g / np.sqrt(denominator + eps)

    return update


def adagrad_ref(lr, initial=0.1, eps=1e-7):
    def update(g, p, t, m):
        m["sum"] = m.get("sum", initial) + g * g
        return p - lr * g / np.sqrt(m["sum"] + eps)

    return update


def lion_ref(lr, b1=0.9, b2=0.99, weight_decay=1e-3):
    def update(g, p, t, m):
        mu = m.get("mu", 0.0)
        direction = np.sign(b1 * mu + (1 - b1) * g) + weight_decay * p
        m["mu"] = b2 * mu + (1 - b2) * g
        return p - lr * direction

    return update


def adamax_ref(lr, b1=0.9, b2=0.999, eps=1e-8):
    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["u"] = np.maximum(b2 * m.get("u", 0.0), np.abs(g) + eps)
        return p - lr * m["mu"] / (1 - b1**t) / m["u"]

    return update


def amsgrad_ref(lr, b1=0.9, b2=0.999, eps=1e-8):
    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        m["nu_max"] = np.maximum(m.get("nu_max", 0.0), m["nu"] / (1 - b2**t))
        return p - lr * m["mu"] / (1 - b1**t) / (np.sqrt(m["nu_max"]) + eps)

    return update


def nadam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0):
    """Dozat's look-ahead: b1 * mu / (1 - b1**(t+1)) + (1 - b1) * g / (1 - b1**t)."""

    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        mu_hat = b1 * m["mu"] / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        direction = mu_hat / (np.sqrt(m["nu"] / (1 - b2**t)) + eps) + weight_decay * p
        return p - lr * direction

    return update


def radam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, threshold=5.0):
    rho_inf = 2 / (1 - b2) - 1

    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * g * g
        mu_hat, nu_hat = m["mu"] / (1 - b1**t), m["nu"] / (1 - b2**t)
        rho = rho_inf - 2 * t * b2**t / (1 - b2**t)
        if rho < threshold:
            return p - lr * mu_hat
        r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        return p - lr * r * mu_hat / (np.sqrt(nu_hat) + eps)

    return update


def yogi_ref(lr, b1=0.9, b2=0.999, eps=1e-3, initial=1e-6):
    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", initial) + (1 - b1) * g
        nu = m.get("nu", initial)
        m["nu"] = nu - (1 - b2) * np.sign(nu - g * g) * g * g
        return p - lr * m["mu"] / (1 - b1**t) / (np.sqrt(m["nu"] / (1 - b2**t)) + eps)

    return update


def adadelta_ref(lr, rho=0.9, eps=1e-6, weight_decay=0.0):
    def update(g, p, t, m):
        g = g + weight_decay * p
        m["e_g"] = rho * m.get("e_g", 0.0) + (1 - rho) * g * g
        dx = np.sqrt(m.get("e_x", 0.0) + eps) / np.sqrt(m["e_g"] + eps) * g
        m["e_x"] = rho * m.get("e_x", 0.0) + (1 - rho) * dx * dx
        return p - lr * dx

    return update


def lamb_ref(lr, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0):
    adam_direction = adam_ref(1.0, b1, b2, eps, weight_decay=weight_decay)

    def update(g, p, t, m):
        direction = p - adam_direction(g, p, t, m)
        ratio = np.linalg.norm(p) / np.linalg.norm(direction)
        return p - lr * ratio * direction

    return update


def lars_ref(lr, weight_decay=0.0, trust_coefficient=0.001, momentum=0.9):
    def update(g, p, t, m):
        direction = g + weight_decay * p
        direction = direction * trust_coefficient * np.linalg.norm(p) / np.linalg.norm(direction)
        m["trace"] = -lr * direction + momentum * m.get("trace", 0.0)
        return p + m["trace"]

    return update


def novograd_ref(lr, b1=0.9, b2=0.25, eps=1e-6, weight_decay=0.0):
    """One second moment per leaf, the squared norm, taken whole at the first step."""

    def update(g, p, t, m):
        square_norm = np.sum(g * g)
        m["nu"] = square_norm if t == 1 else b2 * m["nu"] + (1 - b2) * square_norm
        m["mu"] = b1 * m.get("mu", 0.0) + g / (np.sqrt(m["nu"]) + eps) + weight_decay * p
        return p - lr * m["mu"]

    return update


def adabelief_ref(lr, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16):
    """The second moment is that of g minus the already updated first moment."""

    def update(g, p, t, m):
        m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * g
        m["s"] = b2 * m.get("s", 0.0) + (1 - b2) * (g - m["mu"]) ** 2 + eps_root
        return p - lr * m["mu"] / (1 - b1**t) / (np.sqrt(m["s"] / (1 - b2**t)) + eps)

    return update


CASES = {
    "sgd": (optim.sgd(0.1), sgd_ref(0.1)),
    "sgd momentum": (optim.sgd(0.05, momentum=0.9), sgd_ref(0.05, 0.9)),
    "sgd nesterov": (optim.sgd(0.05, momentum=0.8, nesterov=True), sgd_ref(0.05, 0.8, True)),
    "adam": (optim.adam(1e-2), adam_ref(1e-2)),
    "adam eps_root": (optim.adam(1e-2, b1=0.8, eps_root=1e-6), adam_ref(1e-2, 0.8, eps_root=1e-6)),
    "adamw": (optim.adamw(1e-2, weight_decay=0.1), adam_ref(1e-2, weight_decay=0.1)),
    "rmsprop": (optim.rmsprop(1e-2), rmsprop_ref(1e-2)),
    "rmsprop centered": (
        optim.rmsprop(1e-2, centered=True, initial_scale=1.0),
        rmsprop_ref(1e-2, centered=True, initial_scale=1.0),
    ),
    "adagrad": (optim.adagrad(0.1), adagrad_ref(0.1)),
    "lion": (optim.lion(1e-3), lion_ref(1e-3)),
    # Large eps where its placement in the equations would otherwise go unseen.
    "adamax": (optim.adamax(1e-2, eps=0.5), adamax_ref(1e-2, eps=0.5)),
    "amsgrad": (optim.amsgrad(1e-2, b2=0.9, eps=0.1), amsgrad_ref(1e-2, b2=0.9, eps=0.1)),
    "nadam": (optim.nadam(1e-2, eps=0.1), nadam_ref(1e-2, eps=0.1)),
    "nadamw": (optim.nadamw(1e-2, weight_decay=0.1), nadam_ref(1e-2, weight_decay=0.1)),
    # b2 = 0.99 puts the switch to the rectified update (rho_t >= 5) inside the six steps.
    "radam": (optim.radam(1e-2, b2=0.99, eps=0.1), radam_ref(1e-2, b2=0.99, eps=0.1)),
    "yogi": (optim.yogi(1e-2), yogi_ref(1e-2)),
    "adadelta": (optim.adadelta(0.5, weight_decay=0.1), adadelta_ref(0.5, weight_decay=0.1)),
    "lamb": (optim.lamb(1e-2, weight_decay=0.1), lamb_ref(1e-2, weight_decay=0.1)),
    "lars": (optim.lars(0.5, weight_decay=0.1), lars_ref(0.5, weight_decay=0.1)),
    "novograd": (
        optim.novograd(1e-2, eps=0.3, weight_decay=0.1),
        novograd_ref(1e-2, eps=0.3, weight_decay=0.1),
    ),
    "adabelief": (
        optim.adabelief(1e-2, eps=0.1, eps_root=0.01),
        adabelief_ref(1e-2, eps=0.1, eps_root=0.01),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@given(seed=st.integers(0, 2**16))
def test_updates_follow_the_published_equations(name, seed):
    opt, update = CASES[name]
    params, grads = params_and_grads(seed)
    assert_history(run(opt, params, grads), reference(update, params, grads))


@pytest.mark.parametrize(
    "name", ["adam", "lion", "sgd momentum", "nadam", "radam", "lars", "novograd", "adabelief"]
)
def test_jitted_updates_equal_eager(name):
    opt, _ = CASES[name]
    params, grads = params_and_grads(0)
    assert_history(run(opt, params, grads, jit=True), run(opt, params, grads), rtol=1e-6)


def test_a_schedule_as_learning_rate_counts_steps_inside_jit():
    schedule = optim.linear_schedule(0.1, 0.0, transition_steps=4)
    params, grads = params_and_grads(1)
    got = run(optim.sgd(schedule), params, grads, jit=True)
    lrs = [0.1 * (1 - min(t, 4) / 4) for t in range(STEPS)]
    expected = reference(lambda g, p, t, m: p - lrs[t - 1] * g, params, grads)
    assert_history(got, expected)


def test_chain_with_clipping_and_masked_weight_decay():
    opt = optim.chain(
        optim.clip_by_global_norm(1.0),
        optim.add_decayed_weights(0.5, mask={"w": True, "b": False, "s": False}),
        optim.scale(-0.1),
    )
    params, grads = params_and_grads(2)
    p = {k: fnp.asarray(v, fnp.float32) for k, v in params.items()}
    g = {k: fnp.asarray(v, fnp.float32) for k, v in grads[0].items()}
    updates, _ = opt.update(g, opt.init(p), p)
    norm = math.sqrt(sum(float(np.sum(np.square(v))) for v in grads[0].values()))
    scale = min(1.0, 1.0 / norm)
    for k in params:
        decay = 0.5 * params[k] if k == "w" else 0.0
        np.testing.assert_allclose(updates[k], -0.1 * (grads[0][k] * scale + decay), rtol=1e-5)


def test_weight_decay_mask_may_be_a_prefix_of_the_parameters():
    """A bool standing for a whole subtree, as Optax's masks allow (it raised)."""
    params = {"dense": {"w": fnp.full((2, 3), 2.0), "b": fnp.ones(3)}, "scale": fnp.ones(3)}
    grads = tree_util.tree_map(fnp.ones_like, params)
    opt = optim.add_decayed_weights(0.5, mask={"dense": True, "scale": False})
    updates, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_array_equal(updates["dense"]["w"], np.full((2, 3), 2.0))
    np.testing.assert_array_equal(updates["dense"]["b"], np.full(3, 1.5))
    np.testing.assert_array_equal(updates["scale"], np.ones(3))
    by_function = optim.add_decayed_weights(0.5, mask=lambda p: {"dense": False, "scale": True})
    updates, _ = by_function.update(grads, by_function.init(params), params)
    np.testing.assert_array_equal(updates["dense"]["b"], np.ones(3))
    np.testing.assert_array_equal(updates["scale"], np.full(3, 1.5))


def test_clip_and_global_norm():
    tree = {"a": fnp.asarray([3.0, -4.0]), "b": fnp.asarray([[12.0]])}
    np.testing.assert_allclose(optim.global_norm(tree), 13.0)
    clipped, _ = optim.clip(2.5).update(tree, optim.clip(2.5).init(tree))
    np.testing.assert_array_equal(clipped["a"], [2.5, -2.5])
    unchanged, _ = optim.clip_by_global_norm(20.0).update(tree, ())
    np.testing.assert_array_equal(unchanged["b"], [[12.0]])


@pytest.mark.parametrize(
    "schedule, closed_form",
    [
        (optim.constant_schedule(0.3), lambda t: 0.3),
        (
            optim.linear_schedule(1.0, 0.2, transition_steps=10, transition_begin=5),
            lambda t: 1.0 + (0.2 - 1.0) * min(max(t - 5, 0), 10) / 10,
        ),
        (
            optim.cosine_decay_schedule(2.0, decay_steps=20, alpha=0.1),
            lambda t: 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 20) / 20)) + 0.1),
        ),
        (
            optim.warmup_cosine_decay_schedule(
                0.0, 1.0, warmup_steps=5, decay_steps=25, end_value=0.1
            ),
            lambda t: (
                t / 5
                if t < 5
                else 1.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(t - 5, 20) / 20)) + 0.1)
            ),
        ),
        (
            optim.piecewise_constant_schedule(1.0, {10: 0.5, 20: 0.1}),
            lambda t: 1.0 * (0.5 if t >= 10 else 1) * (0.1 if t >= 20 else 1),
        ),
        (
            optim.exponential_decay(1.0, transition_steps=4, decay_rate=0.5, staircase=True),
            lambda t: 0.5 ** (t // 4),
        ),
    ],
)
def test_schedules_follow_their_closed_forms(schedule, closed_form):
    for t in range(0, 40, 3):
        np.testing.assert_allclose(float(schedule(t)), closed_form(t), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(
            float(fg.jit(schedule)(fnp.asarray(t, fnp.int32))), closed_form(t), rtol=1e-5, atol=1e-7
        )


def test_piecewise_constant_schedule_scales_at_its_boundaries():
    """Optax's definition: the product of the scales whose boundary b satisfies count >= b.
    The scale used to start one step late (1.0 at count 10 where 0.5 is due)."""
    schedule = optim.piecewise_constant_schedule(2.0, {20: 0.1, 10: 0.5})
    for t, expected in [(0, 2.0), (9, 2.0), (10, 1.0), (19, 1.0), (20, 0.1), (21, 0.1)]:
        np.testing.assert_allclose(float(schedule(t)), expected, rtol=1e-6)
        np.testing.assert_allclose(
            float(fg.jit(schedule)(fnp.asarray(t, fnp.int32))), expected, rtol=1e-6
        )
    with pytest.raises(ValueError, match="non-negative"):
        optim.piecewise_constant_schedule(1.0, {5: -0.5})


def test_schedules_treat_degenerate_arguments_as_optax_does():
    """A negative transition_begin counts as 0 and exponential_decay with decay_rate 0 is
    constant (Optax's definitions). exponential_decay(1, 10, 0.5, transition_begin=-3) gave
    0.81 at count 0, and decay_rate 0 gave 0 from count 1 on."""
    cases = [
        (optim.exponential_decay(1.0, 10, 0.5, transition_begin=-3), lambda t: 0.5 ** (t / 10)),
        (optim.exponential_decay(2.0, 10, 0.0), lambda t: 2.0),
        (optim.linear_schedule(1.0, 0.0, 5, transition_begin=-2), lambda t: 1 - min(t, 5) / 5),
    ]
    for schedule, closed_form in cases:
        for t in [0, 1, 4, 10, 30]:
            np.testing.assert_allclose(float(schedule(t)), closed_form(t), rtol=1e-6)


def test_apply_updates_rounds_low_precision_parameters_once():
    """bfloat16 parameters plus float32 updates: the float32 sum, rounded once to bfloat16.
    Rounding the update to bfloat16 first lost 1 + 0.0039215 (just above half an ulp of 1):
    1.0 where Optax gives 1.0078125."""
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    params = np.concatenate([[1.0], rng.standard_normal(500)]).astype(bf16)
    updates = np.concatenate([[0.0039215], rng.standard_normal(500) * 0.01]).astype(np.float32)
    got = optim.apply_updates({"p": fnp.asarray(params)}, {"p": fnp.asarray(updates)})["p"]
    assert got.dtype == bf16
    expected = (params.astype(np.float64) + updates.astype(np.float64)).astype(bf16)
    np.testing.assert_array_equal(np.asarray(got).astype(np.float32), expected.astype(np.float32))


def test_complex_parameters_use_squared_magnitudes():
    """Second moments and norms of complex gradients are |g|**2 (Optax's abs_sq). With g**2
    they were complex: adam and rmsprop moved complex parameters the wrong way, adagrad
    raised, and global_norm returned a complex number (|3+4j| gave sqrt(-7+24j))."""
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(5) + 1j * rng.standard_normal(5)
    grads = [rng.standard_normal(5) + 1j * rng.standard_normal(5) for _ in range(4)]
    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-8
    cases = [
        (optim.adam(lr), "adam"),
        (optim.rmsprop(lr, centered=True), "rmsprop"),
        (optim.adagrad(lr), "adagrad"),
    ]
    for opt, name in cases:
        p, expected = fnp.asarray(p0, fnp.complex64), p0.copy()
        state = opt.init(p)
        mu, nu, total = 0.0, 0.0, 0.1
        for t, g in enumerate(grads, start=1):
            updates, state = opt.update(fnp.asarray(g, fnp.complex64), state, p)
            p = optim.apply_updates(p, updates)
            if name == "adam":
                mu, nu = b1 * mu + (1 - b1) * g, b2 * nu + (1 - b2) * np.abs(g) ** 2
                expected = expected - lr * (mu / (1 - b1**t)) / (np.sqrt(nu / (1 - b2**t)) + eps)
            elif name == "rmsprop":
                mu, nu = 0.9 * mu + 0.1 * g, 0.9 * nu + 0.1 * np.abs(g) ** 2
                expected = expected - lr * g / np.sqrt(nu - np.abs(mu) ** 2 + eps)
            else:
                total = total + np.abs(g) ** 2
                expected = expected - lr * g / np.sqrt(total + 1e-7)
        np.testing.assert_allclose(np.asarray(p), expected, rtol=1e-5, atol=1e-6, err_msg=name)
    norm = optim.global_norm({"a": fnp.asarray([3 + 4j], fnp.complex64), "b": fnp.ones(11)})
    assert not np.iscomplexobj(np.asarray(norm))
    np.testing.assert_allclose(float(norm), 6.0, rtol=1e-6)


def test_mismatched_gradients_name_the_first_differing_path():
    params = {"layers": [{"w": fnp.ones((4, 3))}, {"w": fnp.ones(3)}]}
    opt = optim.adam(1e-3)
    state = opt.init(params)
    bad_shape = {"layers": [{"w": fnp.ones((3, 4))}, {"w": fnp.ones(3)}]}
    with pytest.raises(
        ValueError, match=r"\['layers'\]\[0\]\['w'\]: shape \(3, 4\) where \(4, 3\)"
    ):
        opt.update(bad_shape, state, params)
    missing = {"layers": [{"w": fnp.ones((4, 3))}]}
    with pytest.raises(ValueError, match=r"at \['layers'\]: structure"):
        opt.update(missing, state, params)


def test_adam_minimises_a_quadratic_under_jit():
    target = fnp.asarray([1.0, -2.0, 3.0])

    def loss(p):
        return fnp.sum((p - target) ** 2)

    opt = optim.adam(0.1)
    p = fnp.zeros(3)
    state = opt.init(p)

    @fg.jit
    def step(p, state):
        updates, state = opt.update(fg.grad(loss)(p), state, p)
        return optim.apply_updates(p, updates), state

    for _ in range(300):
        p, state = step(p, state)
    np.testing.assert_allclose(p, target, atol=1e-2)
    assert int(state[0].count) == 300


@pytest.mark.parametrize(
    "make, make_ref",
    [(optim.yogi, yogi_ref), (optim.lamb, lamb_ref), (optim.novograd, novograd_ref)],
)
def test_new_optimizers_take_a_schedule_as_learning_rate(make, make_ref):
    schedule = optim.linear_schedule(0.02, 0.0, transition_steps=5)
    lrs = [0.02 * (1 - min(t, 5) / 5) for t in range(STEPS)]
    refs = [make_ref(lr) for lr in lrs]
    params, grads = params_and_grads(4)

    def update(g, p, t, m):
        return refs[t - 1](g, p, t, m)

    assert_history(run(make(schedule), params, grads, jit=True), reference(update, params, grads))


def as_f32(tree):
    return tree_util.tree_map(lambda x: fnp.asarray(x, fnp.float32), tree)


def test_masked_transforms_the_selected_leaves_and_passes_the_rest():
    params, grads = params_and_grads(5)
    mask = {"w": True, "b": False, "s": True}
    got = run(optim.chain(optim.masked(optim.adam(1e-2), mask), optim.scale(1.0)), params, grads)
    adam_history = reference(adam_ref(1e-2), params, grads)
    for step in range(STEPS):
        np.testing.assert_allclose(got[step]["w"], adam_history[step]["w"], rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(got[step]["s"], adam_history[step]["s"], rtol=2e-5, atol=2e-6)
        raw = params["b"] + sum(gr["b"] for gr in grads[: step + 1])
        np.testing.assert_allclose(got[step]["b"], raw, rtol=1e-5, atol=1e-5)
    nested = {"dense": {"w": fnp.ones((2, 2)), "b": fnp.ones(2)}, "out": fnp.ones(3)}
    by_prefix = optim.masked(optim.scale(-2.0), {"dense": True, "out": False})
    by_function = optim.masked(optim.scale(-2.0), lambda tree: {"dense": False, "out": True})
    updates, _ = by_prefix.update(nested, by_prefix.init(nested))
    np.testing.assert_array_equal(updates["dense"]["b"], [-2.0, -2.0])
    np.testing.assert_array_equal(updates["out"], np.ones(3))
    updates, _ = fg.jit(by_function.update)(nested, by_function.init(nested))
    np.testing.assert_array_equal(updates["dense"]["w"], np.ones((2, 2)))
    np.testing.assert_array_equal(updates["out"], np.full(3, -2.0))


def test_multi_transform_applies_one_transformation_per_label():
    params, grads = params_and_grads(6)
    labels = {"w": "adam", "b": "sgd", "s": "sgd"}
    opt = optim.multi_transform({"adam": optim.adam(1e-2), "sgd": optim.sgd(0.1)}, labels)
    adam_history = reference(adam_ref(1e-2), params, grads)
    sgd_history = reference(sgd_ref(0.1), params, grads)
    for got in (run(opt, params, grads), run(opt, params, grads, jit=True)):
        for step in range(STEPS):
            np.testing.assert_allclose(got[step]["w"], adam_history[step]["w"], rtol=2e-5)
            np.testing.assert_allclose(got[step]["b"], sgd_history[step]["b"], rtol=2e-5)
            np.testing.assert_allclose(got[step]["s"], sgd_history[step]["s"], rtol=2e-5)
    state = opt.init(as_f32(params))
    assert set(state.inner_states) == {"adam", "sgd"}
    unlabelled = optim.multi_transform({"adam": optim.adam(1e-2)}, labels)
    with pytest.raises(ValueError, match="'sgd' have no transformation"):
        unlabelled.init(as_f32(params))


def test_apply_if_finite_skips_non_finite_steps_until_too_many_in_a_row():
    opt = optim.apply_if_finite(optim.sgd(0.1, momentum=0.9), max_consecutive_errors=2)
    p = {"a": fnp.ones(3), "b": fnp.ones(())}
    state = opt.init(p)
    step = fg.jit(opt.update)
    good = {"a": fnp.ones(3), "b": fnp.ones(())}
    bad = {"a": fnp.asarray([1.0, np.nan, 1.0]), "b": fnp.ones(())}
    updates, state = step(good, state, p)
    np.testing.assert_allclose(updates["a"], np.full(3, -0.1), rtol=1e-6)
    for k in (1, 2):
        updates, state = step(bad, state, p)
        np.testing.assert_array_equal(updates["a"], np.zeros(3))
        assert int(state.notfinite_count) == k and not bool(state.last_finite)
    np.testing.assert_allclose(state.inner_state[0].trace["a"], np.ones(3), rtol=1e-6)
    updates, state = step(bad, state, p)  # the third in a row goes through
    assert np.isnan(np.asarray(updates["a"])[1])
    updates, state = step(good, state, p)
    assert int(state.notfinite_count) == 0 and int(state.total_notfinite) == 3
    assert bool(state.last_finite)


def test_multi_steps_accumulates_k_gradients_then_steps_once():
    params, grads = params_and_grads(7)
    opt = optim.MultiSteps(optim.adam(1e-2), every_k_schedule=3)
    p = as_f32(params)
    state = opt.init(p)
    step = fg.jit(opt.update)
    history = []
    for g in grads:
        updates, state = step(as_f32(g), state, p)
        p = optim.apply_updates(p, updates)
        history.append(({k: np.asarray(v, np.float64) for k, v in p.items()}, state))
    means = [
        {k: np.mean([g[k] for g in grads[i : i + 3]], axis=0) for k in params}
        for i in range(0, STEPS, 3)
    ]
    expected = reference(adam_ref(1e-2), params, means)
    for i, (got, state) in enumerate(history):
        assert bool(opt.has_updated(state)) == (i % 3 == 2)
        if i % 3 == 2:
            assert_history([got], [expected[i // 3]])
        elif i < 3:
            unmoved = {k: np.asarray(v, np.float32) for k, v in params.items()}
            assert_history([got], [unmoved], rtol=0, atol=0)
    assert int(state.gradient_step) == 2 and int(state.mini_step) == 0
    assert not bool(opt.has_updated(opt.init(p)))


def test_multi_steps_takes_a_schedule_and_sums_without_use_grad_mean():
    p = {"a": fnp.zeros(2)}
    opt = optim.MultiSteps(optim.sgd(1.0), lambda step: 1 + step, use_grad_mean=False)
    state = opt.init(p)
    emitted = []
    for i in range(6):
        updates, state = opt.update({"a": fnp.full(2, float(i))}, state, p)
        emitted.append(float(np.asarray(updates["a"])[0]))
    # steps of 1, 2 and 3 gradients: -0, -(1 + 2), -(3 + 4 + 5)
    assert emitted == [0.0, 0.0, -3.0, 0.0, 0.0, -12.0]


def test_inject_hyperparams_keeps_them_in_the_state():
    params, grads = params_and_grads(8)
    schedule = optim.linear_schedule(0.02, 0.0, transition_steps=5)
    opt = optim.inject_hyperparams(optim.adam)(learning_rate=schedule, b1=0.8)
    lrs = [0.02 * (1 - min(t, 5) / 5) for t in range(STEPS)]
    refs = [adam_ref(lr, b1=0.8) for lr in lrs]
    expected = reference(lambda g, p, t, m: refs[t - 1](g, p, t, m), params, grads)
    assert_history(run(opt, params, grads, jit=True), expected)

    constant = optim.inject_hyperparams(optim.sgd)(learning_rate=0.1, nesterov=False)
    p = as_f32(params)
    state = constant.init(p)
    assert set(state.hyperparams) == {"learning_rate"}  # momentum None and a bool stay fixed
    state = state._replace(hyperparams={**state.hyperparams, "learning_rate": fnp.asarray(0.5)})
    updates, state = fg.jit(constant.update)(as_f32(grads[0]), state, p)
    np.testing.assert_allclose(updates["w"], -0.5 * grads[0]["w"], rtol=1e-6)
    np.testing.assert_allclose(float(state.hyperparams["learning_rate"]), 0.5)
    with pytest.raises(ValueError, match="static_args"):
        optim.inject_hyperparams(optim.sgd, static_args="decay")
