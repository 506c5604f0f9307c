"""The further funcgrad.scipy.special functions against scipy.special."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given

import funcgrad.scipy.special as special
from funcgrad import jit
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close

# Values away from the poles of Gamma at the non-positive integers.
reals = fst.arrays(fst.float_dtypes, fst.shapes(1, 2, 1, 5), min_value=-4.5, max_value=6.0).map(
    lambda x: np.where(np.abs(x - np.round(x)) < 0.05, x + 0.25, x).astype(x.dtype)
)


def close(x, dtype) -> dict:
    return dict(rtol=1e-4, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-12)


@given(reals)
def test_gamma_family_matches_scipy(x):
    tol = close(x, x.dtype)
    with np.errstate(all="ignore"):
        assert_close(special.gamma(x), sc.gamma(x).astype(x.dtype), x.dtype, **tol)
        assert_close(
            special.loggamma(x),
            np.where(x < 0, np.nan, sc.gammaln(x)).astype(x.dtype),
            x.dtype,
            **tol,
        )
        assert_close(special.factorial(x), sc.factorial(x).astype(x.dtype), x.dtype, **tol)
        assert_close(special.beta(x, 0.75), sc.beta(x, 0.75).astype(x.dtype), x.dtype, **tol)
        assert_close(special.poch(x, 1.5), sc.poch(x, 1.5).astype(x.dtype), x.dtype, **tol)
    positive = np.abs(x) + 1.5
    assert_close(
        special.betaln(positive, positive[::-1]),
        sc.betaln(positive, positive[::-1]).astype(x.dtype),
        x.dtype,
        **tol,
    )
    assert_close(
        special.multigammaln(positive, 2),
        sc.multigammaln(positive, 2).astype(x.dtype),
        x.dtype,
        **tol,
    )


@pytest.mark.parametrize("name", ["rel_entr", "kl_div"])
def test_divergences_match_scipy_including_edges(name):
    x = np.array([0.0, 0.0, 1.0, 2.0, -1.0, 1.0, 0.5])
    y = np.array([0.0, 1.0, 2.0, 0.0, 1.0, -1.0, 0.25])
    assert_close(getattr(special, name)(x, y), getattr(sc, name)(x, y))
    check_grads(getattr(special, name), (x[[2, 6]], y[[2, 6]]), 2)
    # A NaN gave inf; x / y overflowed float32 at a subnormal y (now computed in float64).
    x32 = np.array([np.nan, 1.0, 6.9345], np.float32)
    y32 = np.array([1.0, np.nan, 1.4e-45], np.float32)
    got = getattr(special, name)(x32, y32)
    assert got.dtype == np.float32
    want = getattr(sc, name)(x32.astype(np.float64), y32.astype(np.float64)).astype(np.float32)
    assert_close(got, want, np.float32)


def test_divergences_where_the_ratio_leaves_float64():
    # x / y under- or overflowed even in float64: rel_entr(1e-200, 1e200) was x log 0 = -inf,
    # rel_entr(1e300, 1e-300) inf, and kl_div(1e-200, 1e200) -inf (SciPy's too), not about y.
    x = np.array([1e-200, 1e300, 5e-324, 3e-310])
    y = np.array([1e200, 1e-300, 2.0, 7e5])
    with mpmath.workdps(30):
        logs = [mpmath.log(mpmath.mpf(a) / mpmath.mpf(b)) for a, b in zip(x, y)]
        want = np.array([float(mpmath.mpf(a) * v) for a, v in zip(x, logs)])
    assert_close(special.rel_entr(x, y), want, rtol=1e-14, atol=0)
    assert_close(special.kl_div(x, y), want - x + y, rtol=1e-14, atol=0)


def test_divergences_of_nearly_equal_arguments_keep_their_digits():
    # log(x / y) rounded x / y near 1 (rel_entr(0.5, 0.499999999) lost 8 digits), and kl_div's
    # x log(x / y) - x + y, of order (x - y)^2 / 2y, cancelled to nothing (SciPy's too).
    x = np.array([0.5, 1.0, 2.0, 3.0, 7.0, 1e5])
    y = np.array([0.499999999, 1.0 + 1e-12, 2.00000001, 3.3, 5.0, 1e5 * (1 + 1e-6)])
    with mpmath.workdps(40):
        pairs = [(mpmath.mpf(a), mpmath.mpf(b)) for a, b in zip(x, y)]
        entropy = np.array([float(a * mpmath.log(a / b)) for a, b in pairs])
        divergence = np.array([float(a * mpmath.log(a / b) - a + b) for a, b in pairs])
    assert_close(special.rel_entr(x, y), entropy, rtol=1e-15, atol=0)
    assert_close(special.kl_div(x, y), divergence, rtol=1e-14, atol=0)
    for at in ((1.0, 1.05), (1.0, 1.5), (2.0, 0.7)):
        check_grads(special.kl_div, tuple(map(np.float64, at)), order=2)


def test_beta_of_shapes_whose_gammas_overflow():
    # Gamma(a) Gamma(b) / Gamma(a + b) was inf / inf = NaN from B(18, 18) on in float32 and
    # B(86, 86) in float64, though B itself is far from overflowing.
    a = np.array([30.0, 200.0, 1e4, 2.5, -2.5, -7.986])
    b = np.array([30.0, 200.0, 3.0, 3.5, 3.25, -2e-7])
    with mpmath.workdps(30):  # (SciPy's B(1e4, 3) is 1.5e-12 off)
        want = np.array([float(mpmath.beta(*map(mpmath.mpf, ab))) for ab in zip(a, b)])
    assert_close(special.beta(a, b), want, rtol=5e-13)  # (exp scales log B's rounding by 279)
    got = special.beta(a.astype(np.float32), b.astype(np.float32))
    assert_close(got, want.astype(np.float32), np.float32, rtol=2e-6)


def test_betaln_of_a_negative_shape_beside_a_large_one():
    # ln Gamma(q) - ln Gamma(p + q) for negative p was differenced directly: betaln(-30.5, 1e30)
    # was ln|Gamma(-30.5)| + 6.8e31 - 6.8e31 = 0 (for 2031.6), betaln(-30.5, 1e10) 7e-9 off.
    a = np.array([-30.5, -30.5, -0.25, -100.5, -1e10 + 0.5])
    b = np.array([1e30, 1e10, 1e12, 150.0, 1e30])
    with mpmath.workdps(60):
        want = np.array(
            [float(mpmath.log(abs(mpmath.beta(*map(mpmath.mpf, ab))))) for ab in zip(a, b)]
        )
    assert_close(special.betaln(a, b), want, rtol=1e-13)
    assert_close(special.betaln(b, a), want, rtol=1e-13)
    with mpmath.workdps(60):
        sign = np.sign([float(mpmath.beta(mpmath.mpf(x), mpmath.mpf(y))) for x, y in zip(a, b)])
    assert_close(special.beta(a[1:4], b[1:4]), sign[1:4] * np.exp(want[1:4]), rtol=1e-11)


def test_beta_where_gamma_has_poles_above_and_below():
    # Gamma(-3) Gamma(2) / Gamma(-1) was inf / inf = NaN; the limit is 1 / ((-3) (-2)) (SciPy's).
    a = np.array([-3.0, -3.0, 2.0, -1000.0, -1000.0, -1e10, -3.0])
    b = np.array([2.0, 3.0, -3.0, 1.0, 7.0, 3.0, 4.0])
    products = [(-3) * (-2), (-3) * (-2) * (-1) / 2, (-3) * (-2), -1000.0]
    products = products + [
        np.prod(np.arange(-1000.0, -993.0)) / 720,
        -1e10 * (-1e10 + 1) * (-1e10 + 2) / 2,
    ]
    want = 1 / np.array(products)
    for f in (special.beta, jit(special.beta)):
        assert_close(f(a[:-1], b[:-1]), want, rtol=1e-14)
    assert_close(special.betaln(a[:-1], b[:-1]), np.log(np.abs(want)), rtol=1e-14)
    assert np.isinf(special.beta(a[-1], b[-1]))  # (a + b = 1: a pole above only)
    assert_close(special.beta(np.float32(-4), np.float32(2)), np.float32(1 / 12), np.float32)


def test_poch_of_arguments_whose_gammas_overflow():
    # Gamma(z + m) / Gamma(z) was inf / inf = NaN: poch(200, 2) for 40200.
    z = np.array([200.0, 1e10, 1e5, 30.0, -2.5, 3.0, 2.5])
    m = np.array([2.0, 3.0, 0.5, 5.0, 3.0, -2.0, 0.0])
    want = np.array([200 * 201, 1e10 * (1e10 + 1) * (1e10 + 2), 316.2273707323775])
    want = np.concatenate([want, [30 * 31 * 32 * 33 * 34, -2.5 * -1.5 * -0.5, 1 / (2 * 1), 1.0]])
    assert_close(special.poch(z, m), want, rtol=1e-14)
    check_grads(special.poch, (np.float64(2.5), np.float64(1.5)), 1)


def test_poch_at_the_poles_of_both_gammas_and_of_a_large_argument_downwards():
    # Gamma(z + m) / Gamma(z) with z and z + m both poles was inf - inf = NaN (SciPy takes the
    # product z (z + 1) ... (z + m - 1)); Gamma(1e10 - 2) / Gamma(1e10) lost 5 digits to the
    # difference of lgammas, and poch(1e300, -1) was 1 (1e-300).
    z = np.array([-3.0, -3.0, -3.0, -1000.0, -1000.0, 0.0, -5.0, -1e10, 1e10, 1e300, 7.0])
    m = np.array([2.0, 4.0, -2.0, -2.0, 1.0, 3.0, 0.0, -2.0, -2.0, -1.0, -3.0])
    want = [6.0, 0.0, 1 / 20, 1 / (1001 * 1002), -1000.0, 0.0, 1.0, 1 / ((1e10 + 1) * (1e10 + 2))]
    want = want + [1 / ((1e10 - 1) * (1e10 - 2)), 1e-300, 1 / (6 * 5 * 4)]
    # (exp of ln poch(1e300, -1) = -690.8 scales its rounding by 690)
    assert_close(special.poch(z, m), np.array(want), rtol=5e-14)
    assert np.isnan(special.poch(np.nan, 2.0)) and float(special.poch(np.inf, 0.0)) == 1
    assert_close(special.poch(np.float32(-4), np.float32(3)), np.float32(-24), np.float32)


def test_poch_at_a_pole_of_the_numerator_alone_is_plus_infinity():
    """Gamma(z + m) / Gamma(z) with z + m a pole and z not: the pole has no sign, and the value
    is +inf as SciPy's (it was -inf at poch(-0.5, -0.5) and poch(-0.5, -2.5))."""
    z = np.array([-0.5, -1.5, 0.5, -0.5, 2.5, 0.25])
    m = np.array([-0.5, -0.5, -2.5, -2.5, -3.5, -2.25])
    for poch in (special.poch, jit(special.poch)):
        np.testing.assert_array_equal(np.asarray(poch(z, m)), np.full(6, np.inf))
    # Next to the pole the value is finite, with the sign of 1 / Gamma(z) beside Gamma(z + m).
    with mpmath.workdps(30):
        want = float(mpmath.rf(mpmath.mpf(-0.5), mpmath.mpf(-0.5) + mpmath.mpf(1e-9)))
    assert_close(special.poch(np.float64(-0.5), np.float64(-0.5 + 1e-9)), want, rtol=1e-6)


def test_poch_next_to_the_poles():
    # z and z + m both within 1e-9 of poles of Gamma: the ratio of lgammas of the rounded
    # arguments kept 3 to 5 digits (poch(-457 - 6.6e-11, -93) was 5.392e-252, for 5.388e-252)
    z = np.array([-457.0000000000662, -303.0000000000018, -488.99999999698804, -27 + 6.06e-12])
    m = np.array([-93.0, 1.563008900933829e-09, 4.205631421282917e-10, -112.48812226549785])
    z = np.concatenate([z, [-395.0, 2.5 - 1e-12, -0.5]])
    m = np.concatenate([m, [314.0562291917538, -3.5, 0.5 - 1e-13]])
    with mpmath.workdps(60):
        want = np.array([float(mpmath.rf(mpmath.mpf(p), mpmath.mpf(q))) for p, q in zip(z, m)])
    assert_close(special.poch(z, m), want, rtol=1e-12)
    check_grads(special.poch, (np.float64(-2.5), np.float64(1.25)), 1)


def test_gamma_at_its_poles_and_at_minus_zero():
    # SciPy's and JAX's values: NaN at the poles (was inf), -inf at -0 (was inf).
    x = np.array([-0.0, 0.0, -2.0, -1e20, -2.5, np.inf, -np.inf])
    for dtype in (np.float32, np.float64):
        got = np.asarray(special.gamma(x.astype(dtype)))
        np.testing.assert_array_equal(got, sc.gamma(x).astype(dtype))
