"""linearize through while_loop: the tangent loop is staged, recomputing the primal carries;
reverse mode through it still fails with while_loop's message."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax


def newton_sqrt(a, x0):
    """Newton's iteration for sqrt(a) until the step is small: the trip count depends on the
    (known) primal values, and `a` is a loop constant with a tangent."""

    def cond(c):
        i, x, step = c
        return (i < 50) & (fnp.abs(step) > 1e-12)

    def body(c):
        i, x, _ = c
        new = 0.5 * (x + a / x)
        return i + 1, new, new - x

    return lax.while_loop(cond, body, (0, x0, np.float64(1.0)))[1]


def damped(x, n):
    """A fixed map iterated a traced number of times (fori_loop with a traced bound)."""
    return lax.fori_loop(0, n, lambda i, v: fnp.sin(v) * 1.1 + 0.01 * i, x)


def central_difference(f, x, t, h=1e-6):
    return (f(x + h * t) - f(x - h * t)) / (2 * h)


@given(a=st.floats(0.5, 20.0), x0=st.floats(1.0, 5.0))
def test_linearize_matches_jvp_and_finite_differences(a, x0):
    a, x0 = np.float64(a), np.float64(x0)
    y, lin = fg.linearize(newton_sqrt, a, x0)
    np.testing.assert_allclose(y, np.sqrt(a), rtol=1e-12)
    ta, tx = np.float64(0.7), np.float64(-0.3)
    _, want = fg.jvp(newton_sqrt, (a, x0), (ta, tx))
    np.testing.assert_allclose(lin(ta, tx), want, rtol=1e-10)
    # d sqrt(a) / da = 1 / (2 sqrt(a)); the converged value does not depend on x0.
    np.testing.assert_allclose(lin(np.float64(1.0), np.float64(0.0)), 0.5 / np.sqrt(a), rtol=1e-6)
    fd = central_difference(lambda s: newton_sqrt(a + s * ta, x0 + s * tx), 0.0, 1.0)
    np.testing.assert_allclose(lin(ta, tx), fd, rtol=1e-5, atol=1e-9)


def test_linearized_function_is_linear_and_jits():
    x = np.array([0.2, -0.4, 0.9])
    n = np.int32(4)
    y, lin = fg.linearize(lambda v: damped(v, n), x)
    t1, t2 = np.array([1.0, 0.0, 2.0]), np.array([-0.5, 1.5, 0.25])
    np.testing.assert_allclose(lin(2 * t1 + 3 * t2), 2 * lin(t1) + 3 * lin(t2), rtol=1e-12)
    fd = central_difference(lambda v: damped(v, n), x, t1)
    np.testing.assert_allclose(lin(t1), fd, rtol=1e-6)
    jitted = fg.jit(lambda v, t: fg.linearize(lambda u: damped(u, n), v)[1](t))
    np.testing.assert_allclose(jitted(x, t1), lin(t1), rtol=1e-12)


def test_linearize_under_vmap_matches_a_loop():
    xs = np.array([[0.1, 0.5], [1.0, -1.0], [0.3, 0.3]])
    t = np.array([1.0, 2.0])
    f = lambda x: fg.linearize(lambda v: damped(v, np.int32(3)), x)[1](t)  # noqa: E731
    np.testing.assert_allclose(fg.vmap(f)(xs), np.stack([f(x) for x in xs]), rtol=1e-12)


def test_reverse_mode_still_reports_while_loop():
    with pytest.raises(NotImplementedError, match=r"of while_loop is not supported"):
        fg.grad(newton_sqrt)(np.float64(2.0), np.float64(1.0))
