"""Special functions at corners where they once answered silently wrong, in float64 against
mpmath or closed forms: derivatives in a shape parameter where the function changes steeply
with it, and gradients that a branch not taken made NaN."""

import math

import mpmath as mp
import numpy as np
import pytest

import funcgrad as fg
import funcgrad.scipy.special as fs
from funcgrad import lax

mp.mp.dps = 40


def relative_error(got, want):
    return abs(float(got) - float(want)) / abs(float(want))


def lower_gamma_shape_derivative(a, x):
    return mp.diff(lambda s: mp.gammainc(s, 0, x, regularized=True), mp.mpf(a))


@pytest.mark.parametrize(
    "a, x",
    [
        (30.0, 1e-5),  # P ~ x^30: a central difference was 3e-6 off
        (100.0, 3.0),
        (1e4, 1e4),  # x = a in the large-shape expansion: its derivative was NaN
        (1e5, 1.01e5),
    ],
)
def test_gammainc_shape_derivative(a, x):
    want = lower_gamma_shape_derivative(a, x)
    with fg.enable_x64():
        d_lower = fg.grad(fs.gammainc)(np.float64(a), np.float64(x))
        d_upper = fg.jit(fg.grad(fs.gammaincc))(np.float64(a), np.float64(x))
    assert relative_error(d_lower, want) < 1e-11
    assert relative_error(d_upper, -want) < 1e-11


def test_random_gamma_grad_where_the_sample_is_far_below_the_shape():
    a, x = 30.0, 0.5
    density = mp.mpf(x) ** (a - 1) * mp.exp(-x) / mp.gamma(a)
    want = -lower_gamma_shape_derivative(a, x) / density
    with fg.enable_x64():
        got = lax.random_gamma_grad(np.float64(a), np.float64(x))
    assert relative_error(got, want) < 1e-11


@pytest.mark.parametrize(
    "a, b, x",
    [
        (1000.0, 300.0, 0.4),  # I ~ 1e-162: a central difference was 7e-6 off
        (40.0, 300.0, 1e-4),
        (1000.0, 2000.0, 0.4),
    ],
)
def test_betainc_shape_derivatives(a, b, x):
    a, b, x = mp.mpf(a), mp.mpf(b), mp.mpf(x)
    want_a = mp.diff(lambda s: mp.betainc(s, b, 0, x, regularized=True), a)
    want_b = mp.diff(lambda s: mp.betainc(a, s, 0, x, regularized=True), b)
    with fg.enable_x64():
        args = tuple(np.float64(float(v)) for v in (a, b, x))
        got_a, got_b = fg.grad(fs.betainc, argnums=(0, 1))(*args)
    assert relative_error(got_a, want_a) < 1e-11
    assert relative_error(got_b, want_b) < 1e-11


@pytest.mark.parametrize("name", ["kl_div", "rel_entr"])
def test_relative_entropy_gradients_where_x_is_tiny_beside_y(name):
    # x / y rounds to 1e-300: x - y over y is -1, where the near-1 branch's log1p has an
    # infinite slope (its gradient leaked NaN through the branch not taken).
    x, y = 1e-300, 1.0
    offset = name == "kl_div"
    with fg.enable_x64():
        d_x, d_y = fg.grad(getattr(fs, name), argnums=(0, 1))(np.float64(x), np.float64(y))
    assert relative_error(d_x, math.log(x / y) + (0.0 if offset else 1.0)) < 1e-14
    assert relative_error(d_y, (1.0 if offset else 0.0) - x / y) < 1e-14


@pytest.mark.parametrize("x", [30.0, 1e5, 1e9])
def test_erfcx_derivative_at_large_arguments(x):
    # 2x erfcx(x) - 2 / sqrt(pi) cancels to 1 / (2x^2) of its terms: it was 1e-6 off at 1e5
    # and 0 from 1e8 on.
    want = mp.diff(lambda t: mp.exp(t * t) * mp.erfc(t), mp.mpf(x))
    with fg.enable_x64():
        got = fg.grad(fs.erfcx)(np.float64(x))
    assert relative_error(got, want) < 1e-13


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x", [-100.0, -1e4])
def test_log_ndtr_derivative_in_the_lower_tail(dtype, x):
    # pdf(x) / ndtr(x) was exp(log pdf(x) - log_ndtr(x)), two terms of size x^2 / 2 that
    # cancel: 2981 for 1e4 at x = -1e4 in float32.
    want = mp.diff(lambda t: mp.log(mp.ncdf(t)), mp.mpf(x))
    with fg.enable_x64():
        got = fg.grad(fs.log_ndtr)(dtype(x))
    assert got.dtype == dtype
    # (in float64 the 3-term series itself is 1e-14 off at -100)
    assert relative_error(got, want) < max(4 * np.finfo(dtype).eps, 3e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x", [-30.0, 30.0, 80.0])
def test_logistic_derivative_where_it_rounds_to_one(dtype, x):
    # ans (1 - ans) was 0 from x = 17 (float32) and 0.1% off at 30 in float64.
    want = math.exp(-abs(x)) / (1 + math.exp(-abs(x))) ** 2
    with fg.enable_x64():
        got = fg.grad(fs.expit)(dtype(x))
        got_jit = fg.jit(fg.grad(lax.logistic))(dtype(x))
    assert relative_error(got, want) < 4 * np.finfo(dtype).eps
    assert relative_error(got_jit, want) < 4 * np.finfo(dtype).eps


def test_incomplete_functions_unmoved_by_slow_elements_beside_them():
    # The fractions ran on for converged elements while a slower one beside them converged,
    # moving them by about an ulp a round: 1e-14 beside gammainc's stand-in at x = inf (5000
    # rounds), 2e-14 beside I_(1/2)(1e6, 1e6).
    with fg.enable_x64():
        upper = fs.gammaincc(np.array([1.0, 0.5, 1e20]), np.array([2.0, 2.0, np.inf]))
        beta = fs.betainc(
            np.array([0.5, 2.0, 1e6]), np.array([3.0, 5.0, 1e6]), np.array([0.2, 0.3, 0.5])
        )
    for a, x, got in [(1.0, 2.0, upper[0]), (0.5, 2.0, upper[1])]:
        assert relative_error(got, mp.gammainc(a, x, mp.inf, regularized=True)) < 2e-15
    for a, b, x, got in [(0.5, 3.0, 0.2, beta[0]), (2.0, 5.0, 0.3, beta[1])]:
        assert relative_error(got, mp.betainc(a, b, 0, x, regularized=True)) < 2e-15
    assert float(upper[2]) == 0.0
