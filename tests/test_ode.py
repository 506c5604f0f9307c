"""funcgrad.experimental.ode.odeint: solutions against closed forms and scipy's solve_ivp,
adjoint gradients against central finite differences and closed-form derivatives, jit against
eager, vmap against a loop of the lanes, and the errors that name a bad argument."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.experimental.ode import odeint
from funcgrad.test_util import check_grads

TIGHT = dict(rtol=1e-10, atol=1e-10)


def decay(y, t, k):
    return -k * y


def forced_pendulum(y, t, damping, strength):
    """A nonlinear, non-autonomous system, so ∂f/∂t enters the adjoint."""
    angle, velocity = y[0], y[1]
    return fnp.stack([velocity, -fnp.sin(angle) - damping * velocity + strength * fnp.cos(t)])


def forced_pendulum_np(t, y, damping, strength):
    return [y[1], -np.sin(y[0]) - damping * y[1] + strength * np.cos(t)]


def test_exponential_decay_matches_closed_form():
    t = np.linspace(0.0, 3.0, 7)
    y0 = np.array([1.0, -2.0, 0.5])
    ys = odeint(decay, y0, t, np.float64(0.8))
    assert ys.shape == (7, 3) and ys.dtype == np.float64
    np.testing.assert_allclose(ys, np.exp(-0.8 * t)[:, None] * y0, rtol=1e-7, atol=1e-9)


def test_float32_state_stays_float32():
    t = np.linspace(0.0, 1.0, 4, dtype=np.float32)
    ys = odeint(decay, np.ones(2, np.float32), t, np.float32(1.5))
    assert ys.dtype == np.float32
    np.testing.assert_allclose(ys, np.exp(-1.5 * t)[:, None] * np.ones(2), rtol=1e-5)


def test_harmonic_oscillator_with_a_pytree_state():
    def spring(state, t, omega):
        return {"x": state["v"], "v": -(omega**2) * state["x"]}

    t = np.linspace(0.0, 2 * np.pi, 9)
    omega = np.float64(1.7)
    state0 = {"x": np.array([1.0, 0.0]), "v": np.array([0.0, omega])}
    ys = odeint(spring, state0, t, omega, **TIGHT)
    assert set(ys) == {"x", "v"} and ys["x"].shape == (9, 2)
    expected_x = np.stack([np.cos(omega * t), np.sin(omega * t)], axis=1)
    expected_v = omega * np.stack([-np.sin(omega * t), np.cos(omega * t)], axis=1)
    np.testing.assert_allclose(ys["x"], expected_x, atol=1e-8)
    np.testing.assert_allclose(ys["v"], expected_v, atol=1e-8)


def test_nonlinear_system_matches_solve_ivp():
    t = np.linspace(0.5, 6.0, 12)
    y0 = np.array([2.0, 0.3])
    params = (np.float64(0.2), np.float64(0.5))
    ys = odeint(forced_pendulum, y0, t, *params, **TIGHT)
    reference = solve_ivp(
        forced_pendulum_np, (t[0], t[-1]), y0, "DOP853", t, args=params, rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(ys, reference.y.T, atol=1e-8)


def test_gradients_match_finite_differences():
    t = np.array([0.0, 0.7, 1.5, 2.0])
    y0 = np.array([1.0, -0.5])
    damping, strength = np.float64(0.3), np.float64(0.8)

    def outputs(y0, t, damping, strength):
        return odeint(forced_pendulum, y0, t, damping, strength, **TIGHT)

    check_grads(outputs, (y0, t, damping, strength), order=1, modes=("rev",), atol=1e-6)


def test_gradients_of_decay_match_closed_form():
    # y(T) = y0 exp(-k (T - t0)).
    t0, end, y0, k = 0.5, 2.5, 1.3, 0.9

    def final(y0, t, k):
        return odeint(decay, y0, t, k, **TIGHT)[-1]

    args = (np.float64(y0), np.array([t0, 1.0, end]), np.float64(k))
    y0_bar, t_bar, k_bar = fg.grad(final, argnums=(0, 1, 2))(*args)
    y_end = y0 * np.exp(-k * (end - t0))
    np.testing.assert_allclose(y0_bar, np.exp(-k * (end - t0)), rtol=1e-8)
    np.testing.assert_allclose(k_bar, -(end - t0) * y_end, rtol=1e-8)
    np.testing.assert_allclose(t_bar, [k * y_end, 0.0, -k * y_end], rtol=1e-8, atol=1e-12)


def test_gradient_through_a_closed_over_value_equals_the_explicit_argument():
    t = np.linspace(0.0, 2.0, 3)
    y0 = np.array([0.4, 0.1])

    def through_closure(damping):
        return odeint(lambda y, t: forced_pendulum(y, t, damping, 0.5), y0, t, **TIGHT).sum()

    def as_argument(damping):
        return odeint(forced_pendulum, y0, t, damping, np.float64(0.5), **TIGHT).sum()

    damping = np.float64(0.25)
    np.testing.assert_allclose(fg.grad(through_closure)(damping), fg.grad(as_argument)(damping))
    check_grads(through_closure, (damping,), order=1, modes=("rev",), atol=1e-6)


def test_jit_matches_eager_for_values_and_gradients():
    t = np.linspace(0.0, 1.0, 4)
    y0 = np.array([1.0, 0.0])

    def loss(y0, damping):
        return (odeint(forced_pendulum, y0, t, damping, np.float64(0.3)) ** 2).sum()

    damping = np.float64(0.1)
    np.testing.assert_allclose(fg.jit(loss)(y0, damping), loss(y0, damping), rtol=1e-12)
    eager = fg.grad(loss, argnums=(0, 1))(y0, damping)
    staged = fg.jit(fg.grad(loss, argnums=(0, 1)))(y0, damping)
    for e, s in zip(eager, staged):
        np.testing.assert_allclose(s, e, rtol=1e-10)


def test_vmap_matches_a_loop():
    t = np.linspace(0.0, 1.5, 5)
    starts = np.array([[1.0, 0.0], [0.2, -0.4], [-1.0, 1.0]])
    dampings = np.array([0.1, 0.5, 0.9])

    def solve(y0, damping):
        return odeint(forced_pendulum, y0, t, damping, np.float64(0.3))

    batched = fg.vmap(solve)(starts, dampings)
    looped = np.stack([solve(y0, d) for y0, d in zip(starts, dampings)])
    np.testing.assert_allclose(batched, looped, rtol=1e-9, atol=1e-12)

    def gradient(damping):
        return fg.grad(lambda d: solve(starts[0], d).sum())(damping)

    np.testing.assert_allclose(
        fg.vmap(gradient)(dampings), [gradient(d) for d in dampings], rtol=1e-8
    )


def test_integer_arguments_pass_through_and_get_no_gradient():
    def scaled(y, t, k, power):
        return -k * y**power

    t = np.array([0.0, 1.0])
    k_bar = fg.grad(lambda k: odeint(scaled, np.float64(1.0), t, k, 1, **TIGHT)[-1])(
        np.float64(0.5)
    )
    np.testing.assert_allclose(k_bar, -np.exp(-0.5), rtol=1e-8)


def test_hmax_and_mxstep():
    t = np.array([0.0, 1.0, 2.0])
    capped = odeint(decay, np.float64(1.0), t, np.float64(1.0), hmax=0.01)
    np.testing.assert_allclose(capped, np.exp(-t), rtol=1e-8)
    # Steps no longer than 0.01 cannot reach t = 1 within 50 of them: the rest is NaN.
    starved = odeint(decay, np.float64(1.0), t, np.float64(1.0), hmax=0.01, mxstep=50)
    assert starved[0] == 1.0 and np.isnan(np.asarray(starved[1:])).all()


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="t must be a non-empty vector of floats"):
        odeint(decay, np.float64(1.0), np.arange(3), np.float64(1.0))
    with pytest.raises(TypeError, match="must be arrays or scalars"):
        odeint(decay, np.float64(1.0), np.linspace(0.0, 1.0, 3), "fast")


def test_experimental_namespace_is_public():
    assert "experimental" in fg.__all__
    assert fg.experimental.ode.odeint is odeint
