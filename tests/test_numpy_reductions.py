"""funcgrad.numpy reductions against NumPy, and JAX's dtype rules for them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes
from tests import strategies as fst
from tests.checks import assert_close, check_staging

# The accumulator JAX uses for sums and products (NumPy would use int64 or uint64).
SUM_DTYPES = {
    "bool": np.int32,
    "int8": np.int32,
    "int16": np.int32,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint32,
    "uint16": np.uint32,
    "uint32": np.uint32,
    "float32": np.float32,
    "float64": np.float64,
}


@st.composite
def array_and_axis(draw, dtype=fst.any_dtypes, min_side=0, nans=False, **value_bounds):
    """An array, an axis argument (None, an int or a tuple, maybe negative) and keepdims.

    With `nans`, some elements of a float array are NaN.
    """
    x = draw(fst.arrays(dtype, fst.shapes(max_side=4, min_side=min_side), **value_bounds))
    if nans and x.dtype.kind == "f":
        x = np.where(draw(fst.arrays(np.bool_, x.shape)), np.nan, x).astype(x.dtype)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none" or x.ndim == 0:
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-x.ndim, x.ndim - 1))
    else:
        axis = tuple(a - x.ndim * draw(st.booleans()) for a in draw(fst.axes(x.ndim)))
    return x, axis, draw(st.booleans())


@st.composite
def where_masks(draw, shape):
    """A boolean mask that broadcasts against `shape` (some axes of size one)."""
    mask_shape = tuple(draw(st.sampled_from([d, 1])) for d in shape)
    return draw(fst.arrays(np.bool_, mask_shape))


def _float_tolerance(x, dtype, axis):
    """Rounding of a float32 sum grows with the magnitudes summed, not with the result."""
    scale = np.sum(np.abs(x.astype(np.float64)), axis=axis)
    eps = 1e-6 if np.dtype(dtype) == np.float32 else 1e-13
    return dict(rtol=10 * eps, atol=10 * eps * (np.max(scale, initial=0) + 1))


def _compare(actual, expected, dtype, x, axis):
    expected = np.asarray(expected)
    if dtypes.is_float(dtype):
        assert_close(actual, expected.astype(dtype), dtype, **_float_tolerance(x, dtype, axis))
    else:
        assert_close(actual, expected.astype(dtype), dtype)


@given(array_and_axis(), st.data())
def test_sum_matches_numpy(args, data):
    x, axis, keepdims = args
    where = data.draw(st.none() | where_masks(x.shape))
    dtype = SUM_DTYPES[x.dtype.name]
    expected = np.sum(
        x, axis, dtype=dtype, keepdims=keepdims, where=True if where is None else where
    )
    _compare(fnp.sum(x, axis, keepdims=keepdims, where=where), expected, dtype, x, axis)


@given(array_and_axis(min_value=-2, max_value=2), st.data())
def test_prod_matches_numpy(args, data):
    x, axis, keepdims = args
    initial = data.draw(st.none() | st.integers(0, 2))
    dtype = SUM_DTYPES[x.dtype.name]
    expected = np.prod(
        x.astype(dtype), axis, keepdims=keepdims, initial=1 if initial is None else initial
    )
    actual = fnp.prod(x, axis, keepdims=keepdims, initial=initial)
    _compare(actual, expected, dtype, np.abs(x) + 1, None)


@pytest.mark.parametrize("name", ["max", "min"])
@given(args=array_and_axis(min_side=1), data=st.data())
def test_max_min_match_numpy(name, args, data):
    x, axis, keepdims = args
    expected = getattr(np, name)(x, axis, keepdims=keepdims)
    assert_close(getattr(fnp, name)(x, axis, keepdims=keepdims), expected, x.dtype)


@pytest.mark.parametrize("name", ["max", "min"])
@given(args=array_and_axis(dtype=fst.numeric_dtypes, min_value=0, max_value=100), data=st.data())
def test_max_min_with_where_and_initial(name, args, data):
    x, axis, keepdims = args
    where = data.draw(where_masks(x.shape))
    initial = data.draw(st.integers(0, 100))
    expected = getattr(np, name)(x, axis, keepdims=keepdims, initial=initial, where=where)
    actual = getattr(fnp, name)(x, axis, keepdims=keepdims, initial=initial, where=where)
    assert_close(actual, expected, x.dtype)


@pytest.mark.parametrize("name", ["all", "any"])
@given(args=array_and_axis(), data=st.data())
def test_all_any_match_numpy(name, args, data):
    x, axis, keepdims = args
    where = data.draw(st.none() | where_masks(x.shape))
    kwargs = {} if where is None else {"where": where}
    expected = getattr(np, name)(x, axis, keepdims=keepdims, **kwargs)
    assert_close(getattr(fnp, name)(x, axis, keepdims=keepdims, where=where), expected, np.bool_)


@pytest.mark.parametrize("name", ["mean", "var", "std"])
@given(args=array_and_axis(dtype=fst.numeric_dtypes, min_side=1), data=st.data())
def test_mean_var_std_match_numpy(name, args, data):
    x, axis, keepdims = args
    kwargs = {"ddof": data.draw(st.integers(0, 2))} if name != "mean" else {}
    where = data.draw(st.none() | where_masks(x.shape))
    check_mean_var_std(name, x, axis, keepdims, where, **kwargs)


def test_mean_of_cancelling_large_integers_is_within_float32_rounding():
    """Drawn by the dev profile: the int64 mean is taken in float32, where two values near
    +-2**63 that nearly cancel leave an error far beyond rtol of the small result."""
    x = np.array([[[9223355545828327937, -9223358294165045761, 0], [0] * 3, [0] * 3]])
    check_mean_var_std("mean", x, None, False, None)


def check_mean_var_std(name, x, axis, keepdims, where, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = getattr(np, name)(
            x.astype(np.float64),
            axis,
            keepdims=keepdims,
            where=True if where is None else where,
            **kwargs,
        )
    dtype = x.dtype if x.dtype == np.float64 else np.float32
    actual = getattr(fnp, name)(x, axis, keepdims=keepdims, where=where, **kwargs)
    # Non-float64 inputs are reduced in float32, whose rounding of the mean shifts every
    # deviation by up to ulp(|x|): large integers (above 2**22 or so) leave that error in var.
    # The mean itself is off by up to n eps/2 max|x| (each integer rounds to float32 by eps/2
    # |x|, each of the sum's n - 1 additions by eps/2 of at most n max|x|, and the sum is
    # divided by n), all of it left where the values cancel: the dev profile drew 9.2e18 and
    # -9.2e18 among zeros, whose mean of -3.05e11 came 4.9e7 off.
    magnitude = float(np.abs(x.astype(np.float64)).max(initial=0))
    eps = float(np.finfo(np.float32).eps)
    shift = 2 * eps * magnitude
    if dtype == np.float64:
        shift = 0.0
    elif name == "mean":
        shift = x.size // np.size(expected) * eps / 2 * magnitude
    finite = np.asarray(expected, np.float64)[np.isfinite(expected)]
    spread = float(np.sqrt(np.abs(finite).max(initial=0)))
    atol = 1e-4 + (shift**2 + 2 * shift * spread if name == "var" else shift)
    assert_close(actual, expected.astype(dtype), dtype, rtol=1e-4, atol=atol)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(args=array_and_axis(dtype=fst.numeric_dtypes, min_side=1, nans=True))
def test_argmax_argmin_match_numpy(name, args):
    x, axis, keepdims = args
    axis = axis if axis is None or isinstance(axis, int) else None
    expected = getattr(np, name)(x, axis, keepdims=keepdims)
    assert_close(getattr(fnp, name)(x, axis, keepdims=keepdims), expected, np.int32)


@given(array_and_axis(dtype=fst.numeric_dtypes))
def test_ptp_and_count_nonzero_match_numpy(args):
    x, axis, keepdims = args
    expected = np.count_nonzero(x, axis, keepdims=keepdims)
    assert_close(fnp.count_nonzero(x, axis, keepdims=keepdims), expected, np.int32)
    if all(x.shape[a] for a in np.atleast_1d(axis if axis is not None else range(x.ndim))):
        expected = np.max(x, axis, keepdims=keepdims) - np.min(x, axis, keepdims=keepdims)
        assert_close(fnp.ptp(x, axis, keepdims=keepdims), expected.astype(x.dtype), x.dtype)


@given(array_and_axis(dtype=fst.float_dtypes, min_side=1), st.data())
def test_average_matches_numpy(args, data):
    x, axis, keepdims = args
    axis = axis if isinstance(axis, int) else None
    full_weights = data.draw(st.booleans()) or axis is None
    weights_shape = x.shape if full_weights else (x.shape[axis],)
    weights = data.draw(fst.arrays(x.dtype, weights_shape, min_value=0.5, max_value=2))
    avg, total = fnp.average(x, axis, weights, returned=True, keepdims=keepdims)
    expected_avg, expected_total = np.average(x, axis, weights, returned=True, keepdims=keepdims)
    assert_close(avg, expected_avg, x.dtype, rtol=1e-5, atol=1e-5)
    assert_close(total, expected_total, x.dtype, rtol=1e-5, atol=1e-5)
    assert_close(fnp.average(x, axis), np.average(x, axis), x.dtype, rtol=1e-5, atol=1e-5)


@given(array_and_axis(dtype=fst.float_dtypes, nans=True, min_side=1))
def test_median_matches_numpy(args):
    x, axis, keepdims = args
    assert_close(fnp.median(x, axis, keepdims=keepdims), np.median(x, axis, keepdims=keepdims))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@given(args=array_and_axis(dtype=fst.any_dtypes, min_value=-2, max_value=2))
def test_cumulative_matches_numpy(name, args):
    x, axis, _ = args
    axis = axis if axis is None or isinstance(axis, int) else -1 if x.ndim else None
    # JAX's rule: booleans accumulate in int32, every other dtype in itself.
    dtype = np.int32 if x.dtype == np.bool_ else x.dtype
    expected = getattr(np, name)(x, axis, dtype=dtype)
    assert_close(getattr(fnp, name)(x, axis), expected, dtype, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
@given(fst.arrays(fst.int_dtypes, fst.shapes(1, 1), min_value=-3, max_value=3), st.booleans())
def test_cumulative_sum_and_prod_widen_and_include_initial(name, x, include_initial):
    """Both widen small integers as sum and prod do (docs/differences.md: JAX's
    cumulative_prod keeps int8)."""
    dtype = SUM_DTYPES[x.dtype.name]
    expected = getattr(np, name)(x, dtype=dtype, include_initial=include_initial)
    assert_close(getattr(fnp, name)(x, include_initial=include_initial), expected, dtype)


@pytest.mark.parametrize("name", ["nansum", "nanprod", "nanmax", "nanmin", "nanmean"])
@given(args=array_and_axis(dtype=fst.float_dtypes, nans=True, min_value=-2, max_value=2))
def test_nan_reductions_match_numpy(name, args):
    x, axis, keepdims = args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            expected = getattr(np, name)(x, axis, keepdims=keepdims)
        except ValueError:  # nanmax/nanmin of an empty axis
            with pytest.raises(ValueError, match="size zero"):
                getattr(fnp, name)(x, axis, keepdims=keepdims)
            return
    actual = getattr(fnp, name)(x, axis, keepdims=keepdims)
    assert_close(actual, expected.astype(x.dtype), x.dtype, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["nanvar", "nanstd"])
@given(args=array_and_axis(dtype=fst.float_dtypes, nans=True), ddof=st.integers(0, 1))
def test_nanvar_nanstd_match_numpy(name, args, ddof):
    x, axis, keepdims = args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = getattr(np, name)(x, axis, ddof=ddof, keepdims=keepdims)
    actual = getattr(fnp, name)(x, axis, ddof=ddof, keepdims=keepdims)
    assert_close(actual, expected.astype(x.dtype), x.dtype, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Dtype rules


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (np.bool_, np.int32),
        (np.int8, np.int32),
        (np.int16, np.int32),
        (np.uint8, np.uint32),
        (np.int64, np.int64),
        (np.uint32, np.uint32),
        (np.float16, np.float16),
    ],
)
def test_sum_and_prod_promote_narrow_integers(dtype, expected):
    x = np.ones((3, 2), dtype)
    assert fnp.sum(x).dtype == expected
    assert fnp.prod(x, axis=0).dtype == expected
    assert fnp.sum(x, promote_integers=False).dtype == (np.int32 if dtype == np.bool_ else dtype)
    assert fnp.sum(x, dtype=np.float32).dtype == np.float32


def test_sum_of_int8_does_not_wrap_at_8_bits():
    x = np.full(100, 100, np.int8)
    assert int(fnp.sum(x)) == 10000


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.bool_])
def test_mean_var_std_of_integers_are_float32(dtype):
    x = np.arange(6).astype(dtype)
    for fn in (fnp.mean, fnp.var, fnp.std, fnp.median):
        assert fn(x).dtype == np.float32


BOOLEAN_ACCUMULATIONS = ["sum", "prod", "nansum", "nanprod", "cumsum", "cumprod", "nancumsum"]


@pytest.mark.parametrize("name", BOOLEAN_ACCUMULATIONS)
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_sums_and_products_in_booleans_are_ors_and_ands(name, axis):
    # They failed deep inside ("reduce_sum does not accept dtype bool").
    x = np.array([[0, 2, 0, -1], [3, 0, 1, 1]], np.int8)
    expected = getattr(np, name)(x, axis=axis, dtype=bool)
    assert_close(getattr(fnp, name)(x, axis=axis, dtype=bool), expected, dtype=np.bool_)
    jitted = fg.jit(lambda a: getattr(fnp, name)(a, axis=axis, dtype=bool))(x)
    assert_close(jitted, expected, dtype=np.bool_)


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
@pytest.mark.parametrize("include_initial", [False, True])
def test_cumulative_sum_and_prod_in_booleans(name, include_initial):
    x = np.array([[0, 2, 0, -1], [3, 0, 1, 1]], np.int8)
    options = dict(axis=1, dtype=bool, include_initial=include_initial)
    assert_close(getattr(fnp, name)(x, **options), getattr(np, name)(x, **options))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_var_in_an_integer_dtype_computes_as_numpy(dtype, ddof):
    # The mean is truncated in the dtype, each squared deviation converted to it; this failed
    # deep inside ("div requires arguments to have the same dtypes").
    x = np.array([0.5, 1.7, 3.2, -2.6, 7.9])
    assert_close(fnp.var(x, dtype=dtype, ddof=ddof), np.var(x, dtype=dtype, ddof=ddof), dtype)
    counts = np.array([[1, 2, 3, 4, 10], [5, -3, 2, 2, 9]], np.int8)
    expected = np.var(counts, axis=1, dtype=dtype, ddof=ddof)
    assert_close(fnp.var(counts, axis=1, dtype=dtype, ddof=ddof), expected)
    assert_close(fnp.nanvar(counts, axis=1, dtype=dtype, ddof=ddof), expected)


@pytest.mark.parametrize("name", ["std", "nanstd"])
def test_std_refuses_an_integer_dtype(name):
    with pytest.raises(TypeError, match="dtype must be inexact"):
        getattr(fnp, name)(np.arange(6), dtype=np.int32)


@pytest.mark.parametrize("name", ["nanmean", "nanvar", "nanstd"])
def test_nan_statistics_of_floats_refuse_an_integer_dtype(name):
    # As NumPy: there is no integer to leave out for a NaN (nanvar gave 2 for NumPy's 3).
    with pytest.raises(TypeError, match="dtype must be inexact"):
        getattr(fnp, name)(np.arange(6.0), dtype=np.int32)


@pytest.mark.parametrize("name", ["mean", "var", "std"])
def test_statistics_refuse_a_boolean_dtype(name):
    with pytest.raises(TypeError, match="dtype"):
        getattr(fnp, name)(np.arange(6.0), dtype=bool)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_half_precision_mean_and_sum_accumulate_in_float32(dtype):
    # A float16 running sum of 0.1s stalls near 256 (ulp 0.25); float32 accumulation does not.
    x = np.full(20000, 0.1, dtype)
    exact = 20000 * float(x[0])
    assert fnp.mean(x).dtype == dtype
    assert abs(float(fnp.mean(x)) - float(x[0])) <= 1e-2 * float(x[0])
    assert abs(float(fnp.sum(x)) - exact) <= 1e-2 * exact
    assert fnp.var(x).dtype == dtype
    assert float(fnp.var(x)) < 1e-3


def test_argmax_returns_int32_and_keepdims_shape():
    x = np.array([[1, 5, 5], [7, 0, 7]], np.float32)
    assert fnp.argmax(x).dtype == np.int32
    assert fnp.argmax(x, keepdims=True).shape == (1, 1)
    assert_close(fnp.argmax(x, axis=1, keepdims=True), np.array([[1], [0]]), np.int32)


# ---------------------------------------------------------------------------------------------
# Tracing


@given(array_and_axis(dtype=fst.numeric_dtypes, min_side=1), st.data())
def test_reductions_stage_like_eager(args, data):
    x, axis, keepdims = args
    where = data.draw(where_masks(x.shape))
    check_staging(lambda x, w: fnp.sum(x, axis, keepdims=keepdims, where=w), x, where)
    check_staging(lambda x: fnp.var(x, axis, ddof=1, keepdims=keepdims), x)
    check_staging(lambda x: fnp.max(x, axis, keepdims=keepdims), x)
    check_staging(lambda x: (fnp.argmin(x), fnp.cumsum(x), fnp.median(x, axis)), x)


# ---------------------------------------------------------------------------------------------
# Errors


def test_max_of_empty_axis_names_the_shape():
    with pytest.raises(ValueError, match=r"shape \(2, 0\)"):
        fnp.max(np.zeros((2, 0), np.float32), axis=1)
    assert fnp.max(np.zeros((2, 0), np.float32), axis=1, initial=3.0).shape == (2,)
    assert fnp.sum(np.zeros((2, 0), np.float32), axis=1).shape == (2,)


def test_max_with_where_needs_initial():
    with pytest.raises(ValueError, match="initial"):
        fnp.max(np.ones(3), where=np.array([True, False, True]))


def test_argmax_of_empty_names_the_shape():
    with pytest.raises(ValueError, match=r"argmax.*\(0, 3\)"):
        fnp.argmax(np.zeros((0, 3)), axis=0)


@pytest.mark.parametrize("fn", [fnp.sum, fnp.mean, fnp.max, fnp.cumsum, fnp.var])
def test_out_argument_is_refused_for_immutability(fn):
    with pytest.raises(NotImplementedError, match="immutable"):
        fn(np.ones(3), out=np.empty(()))


def test_axis_out_of_range_is_an_axis_error():
    with pytest.raises(np.exceptions.AxisError):
        fnp.sum(np.ones((2, 3)), axis=2)
    with pytest.raises(ValueError, match="repeated axis"):
        fnp.mean(np.ones((2, 3)), axis=(1, -1))


def test_average_weights_must_fit_the_axis():
    with pytest.raises(ValueError, match=r"weights of shape \(4,\).*\(2, 3\)"):
        fnp.average(np.ones((2, 3)), axis=1, weights=np.ones(4))
    with pytest.raises(TypeError, match="axis"):
        fnp.average(np.ones((2, 3)), weights=np.ones(3))


@pytest.mark.parametrize("name", ["var", "std", "nanvar", "nanstd"])
def test_variance_derivatives_ignore_left_out_elements(name):
    """Elements that NaN (nanvar) or a where mask leaves out do not reach the derivative: they
    once made it NaN everywhere (the sum's transpose gave them a cotangent of 0, times the
    slope 2 (x - mean), NaN or inf there). The expected values are those of the variance of
    the kept elements alone, [2, 1, 5]."""
    x = np.array([np.nan, 2.0, 1.0, 5.0, np.inf])
    kept = np.array([False, True, True, True, False])
    fun = getattr(fnp, name)
    if name.startswith("nan"):
        x = np.where(kept, x, np.nan)
        loss = fun
    else:

        def loss(x):
            return fun(x, where=kept)

    values = x[kept]
    slope = 2 * (values - values.mean()) / values.size
    if name.endswith("std"):
        slope = slope / (2 * np.sqrt(values.var()))
    expected = np.zeros_like(x)
    expected[kept] = slope
    assert_close(fg.grad(loss)(x), expected)
    assert_close(fg.jacfwd(loss)(x), expected)
