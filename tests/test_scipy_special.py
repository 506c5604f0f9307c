"""funcgrad.scipy.special against scipy.special: values, dtype promotion and edge values."""

import numpy as np
import pytest
import scipy.special as sc
import strategies as fst
from checks import assert_close, check_staging, tolerance
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import dtypes
from funcgrad.test_util import check_grads

special = fg.scipy.special

# Bounds of the open interval (0, 1) that every float width represents exactly.
TINY = 2.0**-10


def _away_from_poles(x):
    """Moves values off the poles of gamma and digamma at the non-positive integers, near which
    any rounding of x is amplified without bound."""
    nearest = np.round(x)
    near_pole = (nearest <= 0) & (np.abs(x - nearest) < 0.1)
    return np.where(near_pole, x + 0.25, x).astype(x.dtype)


# name -> (funcgrad function, SciPy function, (low, high) of the drawn values, input transform)
UNARY = {
    "erf": (special.erf, sc.erf, (-5, 5), None),
    "erfc": (special.erfc, sc.erfc, (-5, 5), None),
    "erfinv": (special.erfinv, sc.erfinv, (TINY - 1, 1 - TINY), None),
    "expit": (special.expit, sc.expit, (-30, 30), None),
    "logit": (special.logit, sc.logit, (TINY, 1 - TINY), None),
    "gammaln": (special.gammaln, sc.gammaln, (-8, 20), _away_from_poles),
    "digamma": (special.digamma, sc.digamma, (-8, 20), _away_from_poles),
    "ndtr": (special.ndtr, sc.ndtr, (-12, 8), None),
    "log_ndtr": (special.log_ndtr, sc.log_ndtr, (-60, 12), None),
    "ndtri": (special.ndtri, sc.ndtri, (TINY, 1 - TINY), None),
    "entr": (special.entr, sc.entr, (-2, 10), None),
}


def _loose(dtype) -> dict:
    """A few roundings in `dtype`, amplified by the condition number of these functions."""
    return {k: 16 * v for k, v in tolerance(dtype).items()}


@pytest.mark.parametrize("name", UNARY)
@given(dtype=fst.float_dtypes, shape=fst.shapes(max_dims=2), data=st.data())
def test_unary_matches_scipy(name, dtype, shape, data):
    fn, reference, (lo, hi), transform = UNARY[name]
    x = data.draw(fst.arrays(dtype, shape, min_value=lo, max_value=hi))
    if transform is not None:
        x = transform(x)
    expected = reference(x.astype(np.float64))
    assert_close(fn(x), expected, dtype, **_loose(dtype))


@pytest.mark.parametrize(
    "fn, reference, y_range",
    [(special.xlogy, sc.xlogy, (0, 10)), (special.xlog1py, sc.xlog1py, (-1, 10))],
)
@given(dtype=fst.float_dtypes, shape=fst.shapes(max_dims=2), data=st.data())
def test_xlogy_family(fn, reference, y_range, dtype, shape, data):
    x = data.draw(fst.arrays(dtype, shape, min_value=-3, max_value=3))
    x = np.where(np.abs(x) < 0.5, 0, x).astype(dtype)  # plenty of exact zeros
    y = data.draw(fst.arrays(dtype, shape, min_value=y_range[0], max_value=y_range[1]))
    expected = reference(x.astype(np.float64), y.astype(np.float64))
    assert_close(fn(x, y), expected, dtype, **_loose(dtype))


@given(fst.arrays(fst.float_dtypes, fst.shapes(min_dims=1, max_dims=3, min_side=1)))
def test_softmax_defaults_to_all_axes(x):
    x64 = x.astype(np.float64)
    assert_close(special.softmax(x), sc.softmax(x64), x.dtype, **_loose(x.dtype))
    assert_close(special.log_softmax(x), sc.log_softmax(x64), x.dtype, **_loose(x.dtype))
    assert_close(special.softmax(x, axis=0), sc.softmax(x64, axis=0), **_loose(x.dtype))


def test_logsumexp_is_shared_with_nn():
    assert special.logsumexp is fg.nn.logsumexp
    a = np.float32([[0.0, -np.inf], [-np.inf, -np.inf]])
    assert_close(special.logsumexp(a, axis=1), sc.logsumexp(a.astype(np.float64), axis=1))


@pytest.mark.parametrize("name", UNARY)
def test_integer_inputs_compute_in_float32(name):
    fn, reference, _, _ = UNARY[name]
    x = np.array([0, 1, 3], np.int32)
    out = fn(x)
    assert out.dtype == dtypes.float32
    assert_close(out, reference(x.astype(np.float64)), **_loose(dtypes.float32))


def test_binary_integer_inputs_compute_in_float32():
    assert special.xlogy(np.int32(2), np.int8(3)).dtype == dtypes.float32
    assert special.xlog1py(2, np.float16(3)).dtype == dtypes.float16


def test_edge_values():
    zero_one = np.float32([0.0, 1.0, -0.5, 1.5])
    assert_close(special.logit(zero_one), sc.logit(zero_one))
    assert_close(special.ndtri(zero_one), sc.ndtri(zero_one))
    assert_close(special.entr(np.float32([0.0, -1.0, 1.0])), [0.0, -np.inf, 0.0])
    # x = 0 makes the product 0 even where log(y) is -inf.
    assert_close(special.xlogy(np.float32([0.0, 0.0]), np.float32([0.0, 2.0])), [0.0, 0.0])
    assert_close(special.xlog1py(np.float32(0.0), np.float32(-1.0)), 0.0)
    # A NaN y is a missing value, not a limit: it stays NaN where x is 0, and the zero at x == 0
    # is +0 whatever the sign of log(y).
    for fn, reference in ((special.xlogy, sc.xlogy), (special.xlog1py, sc.xlog1py)):
        x, y = np.float64([0.0, -0.0, 0.0, -0.0, 0.0]), np.float64([np.nan, np.nan, 0.5, 2.0, -0.5])
        for out in (fn(x, y), fg.jit(fn)(x, y)):
            np.testing.assert_array_equal(np.asarray(out), reference(x, y))
            np.testing.assert_array_equal(np.signbit(np.asarray(out)), np.signbit(reference(x, y)))
    # The lower tail of ndtr keeps its relative precision.
    assert_close(special.ndtr(np.float32(-10.0)), sc.ndtr(-10.0), rtol=1e-5)


# name -> (the function's domain swept, the most ulps allowed), in float32.
FLOAT32_ULPS = {
    "erf": ((-6, 6), 1),
    "erfc": ((-6, 9), 1),
    "erfinv": ((-0.9999, 0.9999), 2),
    "ndtr": ((-12, 8), 1),  # (x / sqrt 2 rounded, then erfc: 83 ulp at -9.9, before float64)
    "ndtri": ((1e-6, 1 - 1e-6), 1),
    "log_ndtr": ((-30, 8), 3),
    "expit": ((-80, 80), 4),
    "logit": ((1e-6, 1 - 1e-6), 4),  # (9,183 ulp near 1/2 as log(x / (1 - x)))
    "gammaln": ((0.01, 100), 1),
    "digamma": ((0.01, 100), 1),  # (7,309 ulp near its root, compiled in float32)
    "gamma": ((0.05, 30), 1),  # (62 ulp at 29 as exp(gammaln) in float32)
    "i0e": ((-50, 50), 1),
    "i1e": ((-50, 50), 1),
    "entr": ((1e-6, 10), 4),
}


@pytest.mark.parametrize("name", sorted(FLOAT32_ULPS))
def test_float32_values_are_within_a_few_ulps_eager_and_compiled(name):
    """Each function over a sweep of float32 arguments against SciPy's in float64, in units
    in the last place of the float32 result (relative error hides the losses near a root or
    in a tail)."""
    domain, allowed = FLOAT32_ULPS[name]
    x = np.linspace(*domain, 20001).astype(np.float32)
    want = getattr(sc, name)(x.astype(np.float64))
    scale = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    kept = np.isfinite(want) & (np.abs(want) > 1e-30)
    fun = getattr(special, name)
    for got in (fun(x), fg.jit(fun)(x)):
        got = np.asarray(got)
        assert got.dtype == np.float32
        ulps = np.abs(got.astype(np.float64) - want)[kept] / scale[kept]
        assert ulps.max() <= allowed, (name, float(ulps.max()), x[kept][np.argmax(ulps)])


def test_compiled_digamma_keeps_its_precision_next_to_its_zeros():
    """In float64 the compiled digamma's recurrence cancels next to its zeros at 1.4616...
    and -0.5040... (6,192 ulp); there it takes the reference's Taylor expansions."""
    for root in (1.4616321449683622, -0.5040830082644554):
        x = root + np.linspace(-0.3, 0.3, 4001)
        want = sc.digamma(x)
        got = np.asarray(fg.jit(special.digamma)(x))
        assert (np.abs(got - want) / np.spacing(np.abs(want))).max() <= 40


def test_ndtri_keeps_its_precision_in_both_tails():
    """Quantiles down to p = 1e-300 (and up to 1 - 1e-16) within a few ulps of SciPy's, where
    sqrt(2) erf_inv(2p - 1) gave -inf below about 1e-17 (and in float32 below 1e-8), and
    lost digits well before; the derivative is 1 / pdf(x), in the tails too."""
    p = np.concatenate([10.0 ** -np.arange(1, 301, 7.3), [0.1353, 0.1354, 0.3, 0.5]])
    p = np.concatenate([p, 1 - p[p > 1e-16]])
    want = sc.ndtri(p)
    got = np.asarray(special.ndtri(p))
    np.testing.assert_allclose(got, want, rtol=5e-14, atol=0)
    p32 = p[p > 1e-37].astype(np.float32)
    got32 = np.asarray(special.ndtri(p32))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, sc.ndtri(p32.astype(np.float64)), rtol=2e-7)
    x = np.array([1e-200, 1e-20, 1e-3, 0.3, 0.97])
    slope = np.asarray(fg.vmap(fg.grad(special.ndtri))(x))
    np.testing.assert_allclose(slope, 1 / _normal_density(sc.ndtri(x)), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(fg.jit(special.ndtri)(x)), sc.ndtri(x), rtol=5e-14)


def _normal_density(x):
    return np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def test_python_scalars_give_weakly_typed_results():
    """As JAX's: a function of Python scalars alone is weakly typed (a float16 array it then
    meets keeps its dtype), also where it computes in float64 inside; an array argument makes
    the result strongly typed."""
    scalar_calls = {
        "ndtr": (2.0,),
        "ndtri": (0.3,),
        "gamma": (2.5,),
        "gammainc": (2.0, 3.0),
        "betainc": (2.0, 3.0, 0.5),
        "zeta": (2.0, 3.0),
        "i0e": (2.0,),
        "erf": (0.5,),
    }
    for name, args in scalar_calls.items():
        result = getattr(special, name)(*args)
        assert result.weak_type and result.dtype == dtypes.float32, name
        assert (result * np.float16(1)).dtype == dtypes.float16, name
        assert not getattr(special, name)(np.float32(args[0]), *args[1:]).weak_type, name
    assert fg.lax.igamma(2.0, 3.0).weak_type


def test_low_precision_dtypes_are_kept():
    for dtype in (dtypes.float16, dtypes.bfloat16):
        x = np.linspace(0.05, 0.95, 19).astype(dtype)
        for fn in (special.erf, special.expit, special.logit, special.ndtr, special.entr):
            assert fn(x).dtype == dtype
        assert_close(special.ndtri(x), sc.ndtri(x.astype(np.float64)), rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize(
    "fn", [special.ndtr, special.entr, lambda x: special.xlogy(x, x * x), special.softmax]
)
def test_stages_under_make_jaxpr(fn):
    check_staging(fn, np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3))


def test_log_ndtr_keeps_both_tails():
    """Far below 0 ndtr underflows and log_ndtr follows its asymptotic series; far above,
    log1p(-ndtr(-x)) keeps the mass that ndtr(x) rounds away from 1."""
    x = np.array([-1e4, -40.0, -37.5, -20.0, -1.0, 0.0, 1.0, 10.0, 40.0])
    assert_close(special.log_ndtr(x), sc.log_ndtr(x), rtol=1e-13)
    x32 = np.float32([-40.0, -10.5, -10.0, 10.0])
    assert_close(special.log_ndtr(x32), sc.log_ndtr(x32.astype(np.float64)), rtol=2e-5)
    assert_close(special.log_ndtr(np.array([-np.inf, np.inf, np.nan])), [-np.inf, 0.0, np.nan])
    # More terms of the series: float64's precision right at the switch to it.
    assert_close(special.log_ndtr(np.float64(-37.5), 10), sc.log_ndtr(-37.5), rtol=1e-15)
    assert_close(special.log_ndtr(np.float16(-20.0)), sc.log_ndtr(-20.0), rtol=1e-3)


def test_log_ndtr_rejects_bad_series_orders():
    with pytest.raises(ValueError, match="series_order"):
        special.log_ndtr(1.0, series_order=31)
    with pytest.raises(ValueError, match="series_order"):
        special.log_ndtr(1.0, series_order=-1)
    with pytest.raises(TypeError, match="series_order"):
        special.log_ndtr(1.0, series_order=2.0)


def test_log_ndtr_derivatives():
    """pdf / ndtr, finite and accurate far into the lower tail where both underflow."""
    for x in (-45.0, -30.0, -0.5, 9.0):
        check_grads(special.log_ndtr, (np.float64(x),), order=2)
    x = np.array([-300.0, -40.0, 5.0])
    expected = np.exp(-0.5 * x * x - 0.5 * np.log(2 * np.pi) - sc.log_ndtr(x))
    assert_close(fg.vmap(fg.grad(special.log_ndtr))(x), expected, rtol=1e-10)
    check_staging(special.log_ndtr, np.float32([-50.0, -5.0, 0.0, 5.0, 12.0]))


def test_logit_derivative_is_finite_near_the_ends():
    """1 / (x (1 - x)) everywhere in [0, 1]: the branch logit does not take (log1p of a ratio
    that is -1 below x = 1e-16) once made the derivative nan there, at 0 and at 1."""
    x = np.array([0.0, 1e-300, 1e-20, 0.3, 0.5, 0.9, 1 - 2.0**-53, 1.0])
    with np.errstate(divide="ignore"):
        expected = 1 / (x * (1 - x))
    assert_close(fg.vmap(fg.grad(special.logit))(x), expected, rtol=1e-15)
    assert_close(fg.vmap(fg.jacfwd(special.logit))(x), expected, rtol=1e-15)
    check_grads(special.logit, (np.array([0.01, 0.3, 0.6, 0.99]),), order=2)
