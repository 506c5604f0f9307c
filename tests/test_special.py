"""Accuracy and dtype checks for the SciPy-free special functions against scipy.special."""

import warnings

import ml_dtypes
import mpmath
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import lax
from funcgrad.lax import _special

RTOL = 1e-13
RNG_SEED = 20240611
FNS = {
    "erf": (_special.erf, sc.erf),
    "erfc": (_special.erfc, sc.erfc),
    "erf_inv": (_special.erf_inv, sc.erfinv),
    "lgamma": (_special.lgamma, sc.gammaln),
    "digamma": (_special.digamma, sc.digamma),
}
LOW_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32]
hyp = settings(max_examples=150, deadline=None)


def assert_close(ours, ref, rtol=RTOL, atol=0.0):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    same = (ours == ref) | (np.isnan(ours) & np.isnan(ref))
    with np.errstate(invalid="ignore"):
        ok = same | (np.abs(ours - ref) <= rtol * np.abs(ref) + atol)
    if not ok.all():
        bad = np.flatnonzero(~ok.ravel())[:5]
        pairs = [(ours.ravel()[i], ref.ravel()[i]) for i in bad]
        raise AssertionError(f"{(~ok).sum()} mismatches, e.g. (ours, ref) = {pairs}")


def sample(lo, hi, n=20000, log=False):
    rng = np.random.default_rng(RNG_SEED)
    if log:
        return 10.0 ** rng.uniform(np.log10(lo), np.log10(hi), n)
    return rng.uniform(lo, hi, n)


def reflection_atol(x, fn):
    # For x < 0 the reflection formulas subtract terms of size |f(1 - x)| and |log or cot of
    # pi x|; near the zeros of f this bounds how close *any* double-precision answer (SciPy's
    # included) can be, so compare with an absolute tolerance of that size.
    with np.errstate(all="ignore"):
        if fn == "lgamma":
            scale = np.abs(sc.gammaln(1.0 - x)) + np.abs(np.log(np.pi / np.abs(np.sin(np.pi * x))))
        else:
            scale = np.abs(sc.digamma(1.0 - x)) + np.abs(np.pi / np.tan(np.pi * x))
        atol = 2e-14 * scale
        if fn == "digamma":
            # SciPy evaluates tan(pi * frac(x)) without reducing to the nearest integer, so just
            # above a negative integer it is off by ~pi eps / sin(pi d)^2 at distance d; ours
            # is checked against mpmath there instead.
            atol = atol + 1.5e-15 / np.sin(np.pi * np.abs(x - np.round(x))) ** 2
    return atol


# ------------------------------------------------------------------------------- erf / erfc


@pytest.mark.parametrize("name", ["erf", "erfc"])
def test_erf_erfc_dense(name):
    ours, ref = FNS[name]
    tiny = sample(1e-300, 1.0, log=True)
    x = np.concatenate([sample(-30, 30), sample(-6, 6), tiny, -tiny])
    r = ref(x)
    tail = np.abs(r) < 1e-300  # subnormal results carry no relative precision
    assert_close(ours(x[~tail]), r[~tail])
    assert_close(ours(x[tail]), r[tail], atol=1e-300)


def test_erfc_deep_tail():
    x = sample(5.0, 26.3)
    assert_close(_special.erfc(x), sc.erfc(x))
    # High-precision references (mpmath, 40 digits); SciPy is itself ~x^2 ulps off out here.
    for xv, want in [
        (20.0, 5.395865611607901e-176),
        (25.5, 8.80166269072795e-285),
        (26.0, 5.663192408856143e-296),
    ]:
        assert_close(_special.erfc(np.float64(xv)), want, rtol=1e-15)
    assert _special.erfc(np.float64(27.0)) == pytest.approx(5.23705e-319, rel=1e-4)


@hyp
@given(st.floats(-30.0, 30.0, allow_subnormal=False))
def test_erf_erfc_hypothesis(x):
    x = np.float64(x)
    assert_close(_special.erf(x), sc.erf(x))
    if abs(sc.erfc(x)) > 1e-300:
        assert_close(_special.erfc(x), sc.erfc(x))
    # erf + erfc == 1 to within the rounding of the larger term.
    assert abs(_special.erf(x) + _special.erfc(x) - 1.0) <= 4e-16


def test_erf_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0])
    assert_close(_special.erf(x), sc.erf(x), rtol=1e-15)
    assert_close(_special.erfc(x), sc.erfc(x), rtol=1e-15)


# ---------------------------------------------------------------------------------- erf_inv


def test_erf_inv_dense():
    near_one = 1.0 - sample(1e-16, 0.5, log=True)
    y = np.concatenate([sample(-1, 1), near_one, -near_one, sample(1e-300, 1e-3, log=True)])
    assert_close(_special.erf_inv(y), sc.erfinv(y))
    # Every double just below 1: 1 - k * 2**-53.
    top = 1.0 - np.arange(1, 200) * 2.0**-53
    assert_close(_special.erf_inv(top), sc.erfinv(top))
    assert_close(_special.erf_inv(-top), sc.erfinv(-top))


def test_erf_inv_mpmath_points():
    for y, want in [
        (1 - 2**-53, 5.8635847487551676),
        (-(1 - 2**-53), -5.8635847487551676),
        (0.999999999999999, 5.675915739744713),
        (0.999999, 3.458910737275499),
    ]:
        assert_close(_special.erf_inv(np.float64(y)), want, rtol=1e-15)


@hyp
@given(st.floats(-1.0, 1.0, exclude_min=True, exclude_max=True, allow_subnormal=False))
def test_erf_inv_hypothesis(y):
    y = np.float64(y)
    x = _special.erf_inv(y)
    assert_close(x, sc.erfinv(y))
    assert_close(_special.erf(x), y, rtol=4e-16, atol=1e-300)


def test_erf_inv_special_values():
    y = np.array([0.0, 1.0, -1.0, 1.0 + 2**-52, -1.5, 2.0, np.inf, -np.inf, np.nan])
    out = _special.erf_inv(y)
    np.testing.assert_array_equal(out, [0.0, np.inf, -np.inf] + [np.nan] * 6)


# ----------------------------------------------------------------------------------- lgamma


def test_lgamma_positive_dense():
    x = np.concatenate([sample(2.2e-308, 1e300, log=True), sample(0.0, 15.0), sample(0.5, 2.5)])
    # SciPy is only absolutely (not relatively) accurate next to the zeros at 1 and 2.
    atol = np.where((np.abs(x - 1) < 0.1) | (np.abs(x - 2) < 0.1), 2e-16, 0.0)
    assert_close(_special.lgamma(x), sc.gammaln(x), atol=atol)


def test_lgamma_near_zeros_mpmath():
    pts = [
        (1.0000000000009095, -5.249745890076018e-13),
        (0.9999999999990905, 5.249745890089625e-13),
        (1.00000001, -5.772156531688512e-09),
        (0.999997, 1.7316543969044286e-06),
        (2.0000000000009095, 3.8452011276491285e-13),
        (1.9999999999990905, -3.845201127643794e-13),
        (2.00000001, 4.227843357536779e-09),
        (1.999997, -1.268350103079816e-06),
        (1.99996, -1.691085745239152e-05),
        (0.99, 0.005854806764709781),
    ]
    x, want = map(np.array, zip(*pts))
    assert_close(_special.lgamma(x), want, rtol=1e-15)


def test_lgamma_negative_dense():
    x = np.concatenate([sample(-50.0, -0.5), sample(-0.5, 0.0), sample(-1e4, -50.0)])
    assert_close(_special.lgamma(x), sc.gammaln(x), atol=reflection_atol(x, "lgamma"))


@hyp
@given(st.floats(-50.0, 1e300, allow_subnormal=False))
def test_lgamma_hypothesis(x):
    # The reference is mpmath: next to the zeros at 1 and 2 SciPy is off by more than 2e-16
    # absolute (1.3e-12 relative at 0.9999), where ours keeps full relative accuracy.
    x = np.float64(x)
    pole = x <= 0 and x == np.floor(x)
    with mpmath.workdps(40):
        want = np.inf if pole else float(mpmath.re(mpmath.loggamma(mpmath.mpf(float(x)))))
    atol = reflection_atol(x, "lgamma") if x < 0 else 0.0
    assert_close(_special.lgamma(x), want, atol=atol)


def test_lgamma_special_values():
    x = np.array([0.0, -0.0, -1.0, -2.0, -49.0, -(2.0**60), 1.0, 2.0, np.inf, -np.inf, np.nan])
    out = _special.lgamma(x)
    np.testing.assert_array_equal(out, sc.gammaln(x))
    np.testing.assert_array_equal(out, [np.inf] * 6 + [0.0, 0.0, np.inf, -np.inf, np.nan])
    assert_close(_special.lgamma(np.float64(2.5e305)), sc.gammaln(2.5e305))


# ---------------------------------------------------------------------------------- digamma


def test_digamma_positive_dense():
    x = np.concatenate([sample(2.2e-308, 1e300, log=True), sample(0.0, 15.0), sample(1.2, 1.75)])
    assert_close(_special.digamma(x), sc.digamma(x))


def test_digamma_near_zeros_mpmath():
    pts = [
        (1.4616321449683622, -9.241265521729427e-17),
        (1.4616321449683625, 1.2245374622004068e-16),
        (1.46163214, -4.807746276832806e-09),
        (-0.5040830082644554, 7.289763902976895e-17),
        (-0.50408300826, 3.983077340911105e-11),
        (1.3, -0.16919088886679962),
    ]
    x, want = map(np.array, zip(*pts))
    assert_close(_special.digamma(x), want, rtol=1e-15)


def test_digamma_derivative_is_trigamma_with_poles_at_the_non_positive_integers():
    """The slope of digamma is SciPy's polygamma(1, x), inf at 0, -1, -2, ... (the reflection
    gave 6.6e32 at -1: sin(pi x) there is a rounding error, not 0)."""
    x = np.array([-0.0, 0.0, -1.0, -2.0, -7.0, -2.5, -0.3, 0.2, 1.0, 3.7, 40.0])
    slopes = fg.vmap(fg.grad(lax.digamma))(x)
    assert_close(np.asarray(slopes), sc.polygamma(1, x), rtol=1e-12)
    assert np.all(np.isinf(np.asarray(slopes)[:5]))


def test_negative_axis_mpmath():
    digamma_pts = [
        (-34.99993731410561, -15948.982390096075),
        (-1.999999999999993, -140737488355327.08),
        (-5.999904389042939, -10457.179212106184),
        (-2.999999999, -999999916.0035182),
        (-3.000000001, 999999918.5157535),
        (-0.999999, -999999.5771842643),
        (-49.5, 3.912039670928392),
    ]
    x, want = map(np.array, zip(*digamma_pts))
    assert_close(_special.digamma(x), want, rtol=1e-15)
    lgamma_pts = [
        (-34.99993731410561, -82.45857773039303),
        (-1.999999999999993, 31.884770305757492),
        (-2.999999999, 18.931506286234107),
        (-3.000000001, 18.93150628372187),
        (-49.5, -145.37452560487122),
        (-0.999999, 13.815510980721177),
    ]
    x, want = map(np.array, zip(*lgamma_pts))
    assert_close(_special.lgamma(x), want, rtol=1e-15)


def test_digamma_negative_dense():
    x = sample(-50.0, 0.0)
    assert_close(_special.digamma(x), sc.digamma(x), atol=reflection_atol(x, "digamma"))
    near_root = -0.5040830082644554 + sample(-0.15, 0.15)
    assert_close(_special.digamma(near_root), sc.digamma(near_root))


@hyp
@given(st.floats(-50.0, 1e300, allow_subnormal=False))
def test_digamma_hypothesis(x):
    x = np.float64(x)
    atol = reflection_atol(x, "digamma") if x < -0.6 else 0.0
    assert_close(_special.digamma(x), sc.digamma(x), atol=atol)


def test_digamma_special_values():
    x = np.array([0.0, -0.0, -1.0, -2.0, -(2.0**52), np.inf, -np.inf, np.nan, 1.0])
    np.testing.assert_array_equal(_special.digamma(x), sc.digamma(x))
    assert_close(_special.digamma(np.float64(-(2.0**52) + 0.5)), sc.digamma(-(2.0**52) + 0.5))


# -------------------------------------------------------------------- dtypes, shapes, warnings


def _domain(name, n=4000):
    if name == "erf_inv":
        return np.concatenate([sample(-0.999, 0.999, n), [0.0, 1.0, -1.0, 0.5]])
    if name in ("erf", "erfc"):
        return np.concatenate([sample(-8, 8, n), [0.0, np.inf, -np.inf]])
    return np.concatenate([sample(-20, 40, n), [0.0, -1.0, -3.0, 1.0, 2.0, 0.5, np.inf]])


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(FNS))
def test_low_precision_dtypes(name, dtype):
    ours, ref = FNS[name]
    x = _domain(name).astype(dtype)
    out = ours(x)
    assert out.dtype == np.dtype(dtype)
    want = ref(x.astype(np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # float16 overflow in the reference cast
        want_cast = want.astype(dtype).astype(np.float64)
    got = out.astype(np.float64)
    eps = float(ml_dtypes.finfo(dtype).eps)
    # Identical to rounding the float64 answer, except where that answer sits on a rounding
    # boundary of the narrow type (then one ulp either way).
    assert_close(got, want_cast, rtol=eps, atol=float(ml_dtypes.finfo(dtype).smallest_subnormal))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want_cast))


@pytest.mark.parametrize("dtype", LOW_DTYPES + [np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(FNS))
def test_zero_dim_returns_numpy_scalar(name, dtype):
    fn = FNS[name][0]
    for x in (np.array(0.25, dtype=dtype), np.dtype(dtype).type(0.25)):
        out = fn(x)
        assert isinstance(out, np.generic) and not isinstance(out, np.ndarray)
        assert out.dtype == np.dtype(dtype)
        assert_close(float(out), float(FNS[name][1](0.25)), rtol=float(ml_dtypes.finfo(dtype).eps))


@pytest.mark.parametrize("name", sorted(FNS))
def test_shape_preserved_and_no_warnings(name):
    fn = FNS[name][0]
    rows = [[0.0, -0.0, 1.0, -1.0], [np.inf, -np.inf, np.nan, -2.0], [1e-320, 5e300, 2.0, 3.0]]
    x = np.array(rows)
    x16 = np.array(rows[:2] + [[6e-8, 6e4, 2.0, 3.0]], dtype=np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = fn(x)
        fn(x16)
        fn(np.empty((0, 3)))
    assert out.shape == x.shape and out.dtype == np.float64
