"""funcgrad.numpy's statistics, histograms, polynomials, set operations, differences,
floating-point decomposition and functional in-place forms, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.errors import ConcretizationTypeError
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close, check_batching, check_staging

GRAD_TOL = dict(atol=1e-5, rtol=1e-5)


def assert_same(actual, expected) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


def float_arrays(min_dims=1, max_dims=3, min_side=1, max_side=5, **bounds):
    return fst.arrays(
        fst.float_dtypes, fst.shapes(min_dims, max_dims, min_side, max_side), **bounds
    )


def rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# Quantiles


@given(
    float_arrays(allow_nan=True),
    st.sampled_from(["linear", "lower", "higher", "midpoint", "nearest"]),
    st.lists(st.floats(0, 1), min_size=1, max_size=3),
    st.data(),
)
def test_quantiles_match_numpy(x, method, q, data):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1))
    keepdims = data.draw(st.booleans())
    q = np.array(q, x.dtype)
    with np.errstate(all="ignore"):
        expected = np.quantile(x, q, axis=axis, method=method, keepdims=keepdims)
        expected_nan = np.nanquantile(x, q[0], axis=axis, method=method, keepdims=keepdims)
    actual = fnp.quantile(x, q, axis=axis, method=method, keepdims=keepdims)
    assert_close(actual, expected.astype(x.dtype), x.dtype)
    actual_nan = fnp.nanquantile(x, q[0], axis=axis, method=method, keepdims=keepdims)
    assert_close(actual_nan, np.asarray(expected_nan).astype(x.dtype), x.dtype)


def test_percentile_median_and_dtypes():
    x = rng().normal(size=(4, 6))
    x[1, 2] = np.nan
    assert_close(fnp.percentile(x, [10, 95], axis=1), np.percentile(x, [10, 95], axis=1))
    assert_close(fnp.nanpercentile(x, 30.0), np.nanpercentile(x, 30.0))
    assert_close(fnp.nanmedian(x, axis=1, keepdims=True), np.nanmedian(x, axis=1, keepdims=True))
    assert fnp.quantile(np.arange(5), 0.3).dtype == np.float32
    assert float(fnp.quantile(np.arange(5), 0.3)) == pytest.approx(1.2)
    check_staging(lambda x: fnp.nanquantile(x, 0.25, axis=0), x)
    check_grads(
        lambda x: fnp.quantile(x, np.array([0.2, 0.7]), axis=1), (x[[0, 2, 3]],), 2, **GRAD_TOL
    )
    with pytest.raises(ValueError, match="method"):
        fnp.quantile(x, 0.5, method="cubic")


def test_medians_and_quantiles_between_infinities_match_numpy():
    # nanmedian gave NaN for [2, -inf] (-inf + inf / 2), [1, inf] and [inf, inf] (inf - inf);
    # a quantile at 1/2 or above is interpolated from the upper end, as in NumPy.
    x = np.array([[2.0, -np.inf, np.nan], [np.inf, np.inf, 1.0], [1.0, np.inf, np.nan]])
    for fun in (lambda x: fnp.nanmedian(x, axis=1), lambda x: fnp.median(x[:, :2], axis=1)):
        expected = np.array([-np.inf, np.inf, np.inf])
        assert_close(fun(x), expected)
        assert_close(fg.jit(fun)(x), expected)
    y = np.array([-np.inf, 2.0])
    q = np.array([0.5, 0.75, 1.0])
    assert_close(fnp.quantile(y, q), np.quantile(y, q))
    assert_close(fnp.nanquantile(np.array([-np.inf, -np.inf, 1.0]), 0.5), -np.inf)
    # Equal finite ends still interpolate, so the gradient at ties splits as JAX's does.
    grad = fg.grad(lambda v: fnp.quantile(v, 0.75))(np.array([1.0, 1.0]))
    assert_close(grad, np.array([0.25, 0.75]))


# ---------------------------------------------------------------------------------------------
# Covariance and histograms


def test_cov_and_corrcoef_of_complex_variables_match_numpy():
    # cov was X @ X.T, where NumPy's is X @ conj(X).T (a Hermitian matrix with a real
    # diagonal); corrcoef raised on the complex diagonal.
    m = rng().normal(size=(2, 5)) + 1j * rng(1).normal(size=(2, 5))
    weights = np.array([1, 2, 0, 3, 1])
    for fun, kwargs in ((fnp.cov, {}), (fnp.cov, dict(fweights=weights)), (fnp.corrcoef, {})):
        expected = getattr(np, fun.__name__)(m, **kwargs)
        assert_close(fun(m, **kwargs), expected, rtol=1e-12, atol=1e-12)
        jitted = fg.jit(lambda m, fun=fun, kwargs=kwargs: fun(m, **kwargs))
        assert_close(jitted(m), expected, rtol=1e-12, atol=1e-12)


@given(
    float_arrays(min_dims=2, max_dims=2, min_side=2), st.booleans(), st.integers(0, 1), st.data()
)
def test_cov_and_corrcoef_match_numpy(x, rowvar, ddof, data):
    x = np.round(x * 4) / 4  # no variances that underflow
    n = x.shape[1] if rowvar else x.shape[0]
    fweights = data.draw(st.none() | st.just(np.arange(1, n + 1)))
    aweights = data.draw(st.none() | st.just(np.linspace(0.5, 1.5, n)))
    tol = dict(rtol=1e-3, atol=1e-3) if x.dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    with np.errstate(all="ignore"):
        expected = np.cov(x, rowvar=rowvar, ddof=ddof, fweights=fweights, aweights=aweights)
    actual = fnp.cov(x, rowvar=rowvar, ddof=ddof, fweights=fweights, aweights=aweights)
    assert_close(actual, expected.astype(x.dtype), x.dtype, **tol)
    with np.errstate(all="ignore"):
        expected = np.corrcoef(x, rowvar=rowvar)
    assert_close(fnp.corrcoef(x, rowvar=rowvar), expected.astype(x.dtype), x.dtype, **tol)


def test_cov_and_corrcoef_of_no_variables_are_empty_matrices():
    """They indexed the weights' sum of the first variable and failed."""
    for m in (np.zeros((0, 3)), np.zeros((0, 2), np.int16)):
        assert_same(fnp.cov(m), np.cov(m).astype(fnp.cov(m).dtype))
        assert fnp.corrcoef(m).shape == (0, 0)
    assert fnp.cov(np.zeros((0, 2)), y=np.zeros((0, 2))).shape == (0, 0)


def test_diff_of_order_zero_is_the_input_whatever_its_rank():
    assert_same(fnp.diff(np.float32(3), n=0), np.asarray(np.diff(np.float32(3), n=0)))
    assert_same(fnp.diff(np.arange(3), n=0, prepend=5), np.diff(np.arange(3), n=0, prepend=5))


def test_trapezoid_over_an_axis_without_samples_is_zero():
    """Slicing from 1 past an empty axis failed."""
    for y, options in [(np.zeros((4, 0)), {}), (np.zeros((4, 0)), {"x": np.zeros(0)})]:
        assert_same(fnp.trapezoid(y, **options), np.trapezoid(y, **options))


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_with_one_spacing_leaves_the_centre_sample_out(edge_order):
    """NumPy's (f[i + 1] - f[i - 1]) / 2h: the general three-point formula gave the centre an
    explicit weight 0, and 0 * inf made the derivative beside an infinity NaN."""
    f = np.array([[1.0, 4.0, 2.0, 7.0], [0.5, -np.inf, 3.0, 1.0], [2.0, 1.0, 5.0, 3.0]])
    for spacing in ((), (0.5,)):
        for ours, expected in zip(
            fnp.gradient(f, *spacing, edge_order=edge_order),
            np.gradient(f, *spacing, edge_order=edge_order),
        ):
            np.testing.assert_array_equal(ours, expected)


def test_histogram_counts_weights_in_the_weights_and_samples_common_dtype():
    """float16 weights give float16 counts, as in NumPy and JAX (they were float32)."""
    a, w = np.array([10, 6, 10, 4], np.uint32), np.array([8.5, 80.5, 1.0, 2.0], np.float16)
    hist, edges = fnp.histogram(a, weights=w)
    assert_same(hist, np.histogram(a, weights=w)[0])
    assert edges.dtype == np.float16
    assert fnp.histogramdd(a[:, None], weights=w)[0].dtype == np.float16


@pytest.mark.parametrize("dtype", [np.float16, fnp.bfloat16])
def test_histogram_counts_of_half_precision_samples_do_not_stall(dtype):
    # Counted one by one in the samples' dtype they stopped at 2048 (float16), 256 (bfloat16).
    a = np.zeros(3000, dtype)
    expected = np.array([0, 3000]).astype(dtype)
    assert_same(fnp.histogram(a, bins=2)[0], expected)
    assert_same(fnp.histogram(a, bins=2, weights=np.ones(3000, dtype))[0], expected)
    assert_same(fnp.histogramdd(a[:, None], bins=2)[0], expected)
    assert_same(fg.jit(lambda a: fnp.histogram2d(a, a, bins=2)[0])(a), np.diag(expected))


def test_cov_of_two_variables_and_gradient():
    x, y = rng().normal(size=5), rng(1).normal(size=5)
    assert_close(fnp.cov(x, y), np.cov(x, y))
    assert fnp.cov(np.arange(3)).dtype == np.float32
    check_grads(lambda x: fnp.cov(x, bias=True), (rng().normal(size=(2, 4)),), 2, **GRAD_TOL)


@given(
    fst.arrays(np.float64, fst.shapes(1, 2, 1, 20)), st.integers(1, 6), st.booleans(), st.booleans()
)
def test_histogram_matches_numpy(a, bins, weighted, density):
    weights = np.linspace(0, 1, a.size).reshape(a.shape) if weighted else None
    with np.errstate(all="ignore"):
        expected_hist, expected_edges = np.histogram(a, bins, weights=weights, density=density)
    hist, edges = fnp.histogram(a, bins, weights=weights, density=density)
    assert_close(edges, expected_edges, rtol=1e-12, atol=1e-12)
    assert_close(hist, expected_hist.astype(np.float64), rtol=1e-9, atol=1e-9)


def test_histogram_bin_edges_of_float32_data_computed_as_numpy():
    # NumPy spaces edges given as Python numbers in float64, rounding them to float32 at the
    # end; spacing the float32-rounded bounds in float32 was an ulp off for most of these.
    a = np.linspace(-1, 1, 8, dtype=np.float32)
    for low, high, bins in [(-2.3, 1.7, 7), (0.1, 0.7, 13), (-3.0, -0.9, 29), (0.2, 0.2, 5)]:
        expected = np.histogram_bin_edges(a, bins, range=(low, high))
        for edges_of in (
            fnp.histogram_bin_edges,
            fg.jit(fnp.histogram_bin_edges, static_argnums=(1, 2)),
        ):
            edges = edges_of(a, bins, (low, high))
            assert edges.dtype == np.float32
            np.testing.assert_array_equal(np.asarray(edges), expected)


def test_histogram_edges_ranges_and_more_dimensions():
    a = rng().normal(size=40)
    edges = np.array([-1.0, 0.0, 0.5, 2.0])
    assert_close(fnp.histogram(a, edges)[0], np.histogram(a, edges)[0].astype(np.float64))
    assert_close(
        fnp.histogram(a, 4, range=(-1, 1))[0],
        np.histogram(a, 4, range=(-1, 1))[0].astype(np.float64),
    )
    assert_close(fnp.histogram_bin_edges(a, 3), np.histogram_bin_edges(a, 3))
    assert fnp.histogram(np.array([1, 2, 3]))[0].dtype == np.float32
    b = rng(1).normal(size=40)
    for actual, expected in zip(
        fnp.histogram2d(a, b, bins=(3, 4)), np.histogram2d(a, b, bins=(3, 4))
    ):
        assert_close(actual, expected, rtol=1e-12, atol=1e-12)
    # counts are floats, as NumPy's (docs/differences.md: JAX counts in integers)
    assert fnp.histogram2d(a, b)[0].dtype == fnp.histogramdd(a[:, None])[0].dtype == np.float64
    sample = np.stack([a, b, a * b], axis=1)
    hist, edges = fnp.histogramdd(sample, bins=3, density=True)
    expected_hist, expected_edges = np.histogramdd(sample, bins=3, density=True)
    assert_close(hist, expected_hist, rtol=1e-9, atol=1e-9)
    for actual, expected in zip(edges, expected_edges):
        assert_close(actual, expected, rtol=1e-12, atol=1e-12)
    check_staging(lambda a: fnp.histogram(a, 5, range=(-2.0, 2.0)), a)
    with pytest.raises(NotImplementedError, match="auto"):
        fnp.histogram(a, "auto")


# ---------------------------------------------------------------------------------------------
# Interpolation, integration and differences


@given(st.integers(1, 6), st.integers(0, 8), st.sampled_from([None, 1.5]), st.integers(0, 99))
def test_interp_matches_numpy(n, m, period, seed):
    r = rng(seed)
    xp, fp, x = np.sort(r.normal(size=n)), r.normal(size=n), 2 * r.normal(size=m)
    assert_close(fnp.interp(x, xp, fp, period=period), np.interp(x, xp, fp, period=period))
    # With a period left and right are ignored, as NumPy ignores them (they raised).
    expected = np.interp(x, xp, fp, -5.0, 7.0, period=period)
    assert_close(fnp.interp(x, xp, fp, -5.0, 7.0, period=period), expected)


def test_interp_extrapolates_and_differentiates():
    xp, fp = np.array([0.0, 1.0, 2.0]), np.array([0.0, 10.0, 5.0])
    assert_close(
        fnp.interp(np.array([-1.0, 3.0]), xp, fp, "extrapolate", "extrapolate"), [-10.0, 0.0]
    )
    check_grads(lambda x, fp: fnp.interp(x, xp, fp), (np.array([0.3, 1.7]), fp), 2, **GRAD_TOL)


@given(float_arrays(min_side=2), st.data())
def test_trapezoid_diff_and_gradient_match_numpy(y, data):
    axis = data.draw(st.integers(-y.ndim, y.ndim - 1))
    n = data.draw(st.integers(0, 2))
    x = np.cumsum(np.linspace(0.5, 1.5, y.shape[axis]))
    tol = dict(rtol=1e-4, atol=1e-4) if y.dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    assert_close(
        fnp.trapezoid(y, axis=axis, dx=0.5), np.trapezoid(y, axis=axis, dx=0.5), y.dtype, **tol
    )
    assert_close(fnp.trapezoid(y, x=x, axis=axis), np.trapezoid(y, x=x, axis=axis), **tol)
    assert_close(
        fnp.diff(y, n, axis=axis, prepend=1.0), np.diff(y, n, axis=axis, prepend=1.0), y.dtype
    )
    edge_order = data.draw(st.sampled_from([1, 2])) if y.shape[axis] > 2 else 1
    expected = np.gradient(y, x, axis=axis, edge_order=edge_order)
    assert_close(fnp.gradient(y, x, axis=axis, edge_order=edge_order), expected, **tol)


def test_differences_of_other_kinds():
    assert_same(fnp.diff(np.array([True, False, False])), np.array([True, False]))
    assert_same(
        fnp.diff(np.array([1, 4, 9]), append=np.array([20])), np.diff([1, 4, 9], append=[20])
    )
    assert_same(
        fnp.ediff1d(np.array([[1, 3], [6, 10]]), to_begin=[-1], to_end=99),
        np.ediff1d([[1, 3], [6, 10]], to_begin=[-1], to_end=99),
    )
    # NumPy's and JAX's ediff1d refuse booleans (it gave their exclusive or).
    with pytest.raises(TypeError, match="ediff1d: booleans"):
        fnp.ediff1d(np.array([True, False]))
    f = rng().normal(size=(4, 5))
    for actual, expected in zip(fnp.gradient(f, 2.0), np.gradient(f, 2.0)):
        assert_close(actual, expected)
    phases = np.cumsum(rng().normal(size=30) * 3)
    assert_close(fnp.unwrap(phases), np.unwrap(phases))
    assert_close(fnp.unwrap(phases, period=4.0), np.unwrap(phases, period=4.0))
    # Integers with an integer period stay integers, as in NumPy and JAX (they became float32).
    steps = np.array([0, 3, 7, 1, -9, 2], np.int16)
    for period in (4, 5):
        assert_same(fnp.unwrap(steps, period=period), np.unwrap(steps, period=period))
        assert_same(fnp.unwrap(steps, 2, period=period), np.unwrap(steps, 2, period=period))
    check_grads(lambda y: fnp.gradient(y, edge_order=2), (f,), 1, **GRAD_TOL)
    with pytest.raises(ValueError, match="at least 3 samples"):
        fnp.gradient(np.ones(2), edge_order=2)


# ---------------------------------------------------------------------------------------------
# Convolution and polynomials


@given(
    st.integers(1, 7),
    st.integers(1, 7),
    st.sampled_from(["full", "same", "valid"]),
    st.integers(0, 99),
)
def test_convolve_and_correlate_match_numpy(n, m, mode, seed):
    a, v = rng(seed).normal(size=n), rng(seed + 1).normal(size=m)
    assert_close(fnp.convolve(a, v, mode), np.convolve(a, v, mode), rtol=1e-12, atol=1e-12)
    assert_close(fnp.correlate(a, v, mode), np.correlate(a, v, mode), rtol=1e-12, atol=1e-12)


def test_correlate_conjugates_a_complex_second_operand():
    # NumPy's and JAX's correlate sums a[n + k] * conj(v[n]); v was not conjugated.
    a = rng().normal(size=5) + 1j * rng(1).normal(size=5)
    v = rng(2).normal(size=3) - 1j * rng(3).normal(size=3)
    for mode in ("full", "same", "valid"):
        for x, y in ((a, v), (v, a), (a.real, v), (a, v.real)):
            expected = np.correlate(x, y, mode)
            for correlate in (fnp.correlate, fg.jit(fnp.correlate, static_argnums=2)):
                assert_close(correlate(x, y, mode), expected, rtol=1e-12, atol=1e-12)


def test_convolution_dtypes_derivatives_and_errors():
    assert_same(fnp.convolve(np.array([1, 2, 3]), np.array([1, 1])), np.convolve([1, 2, 3], [1, 1]))
    a, v = rng().normal(size=6), rng(1).normal(size=3)
    check_grads(lambda a, v: fnp.convolve(a, v, "same"), (a, v), 2, **GRAD_TOL)
    check_batching(lambda a: fnp.correlate(a, v, "full"), [rng().normal(size=(3, 6))], (0,))
    with pytest.raises(ValueError, match=r"1-d arrays, got shapes \(2, 2\) and \(3,\)"):
        fnp.convolve(np.ones((2, 2)), np.ones(3))


def test_polynomials_match_numpy():
    r = rng()
    p, q, x = r.normal(size=4), r.normal(size=2), r.normal(size=(2, 3))
    assert_close(fnp.polyval(p, x), np.polyval(p, x))
    long = r.normal(size=30)
    assert_close(fnp.polyval(long, 0.7), np.polyval(long, 0.7), rtol=1e-9, atol=1e-9)
    assert_close(fnp.polyadd(p, q), np.polyadd(p, q))
    assert_close(fnp.polysub(q, p), np.polysub(q, p))
    assert_close(fnp.polymul(p, q), np.polymul(p, q))
    assert_close(
        fnp.polymul(np.array([0.0, 1.0, 2.0]), q, trim_leading_zeros=True),
        np.polymul([1.0, 2.0], q),
    )
    quotient, remainder = fnp.polydiv(p, q)
    expected_quotient, expected_remainder = np.polydiv(p, q)
    assert_close(quotient, expected_quotient)
    assert_close(
        np.asarray(remainder)[-len(expected_remainder) :], expected_remainder, rtol=1e-9, atol=1e-9
    )
    assert_close(fnp.polyder(p, 2), np.polyder(p, 2))
    assert_close(fnp.polyint(p, 2, k=[1.0, 2.0]), np.polyint(p, 2, k=[1.0, 2.0]))
    assert_same(
        fnp.vander(np.array([1, 2, 3]), 4, increasing=True),
        np.vander([1, 2, 3], 4, increasing=True),
    )
    check_grads(fnp.polyval, (p, x), 2, **GRAD_TOL)


def test_polyfit_matches_numpy():
    x = np.linspace(0, 1, 12)
    y = np.stack([3 * x**2 - x, np.cos(3 * x)], axis=1)
    assert_close(fnp.polyfit(x, y, 2), np.polyfit(x, y, 2), rtol=1e-9, atol=1e-9)
    for actual, expected in zip(
        fnp.polyfit(x, y[:, 1], 3, full=True)[:4], np.polyfit(x, y[:, 1], 3, full=True)[:4]
    ):
        assert_close(actual, np.asarray(expected), rtol=1e-7, atol=1e-9)
    for actual, expected in zip(
        fnp.polyfit(x, y[:, 1], 2, w=x + 1, cov=True), np.polyfit(x, y[:, 1], 2, w=x + 1, cov=True)
    ):
        assert_close(actual, expected, rtol=1e-7, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Set operations


ints = fst.arrays(np.int32, fst.shapes(1, 2, 0, 6), min_value=-3, max_value=5)


@given(ints, ints, st.sampled_from(["auto", "sort"]))
def test_set_operations_match_numpy(a, b, method):
    assert_same(fnp.isin(a, b, method=method), np.isin(a, b))
    assert_same(fnp.isin(a, b, invert=True), np.isin(a, b, invert=True))
    assert_same(fnp.setdiff1d(a, b), np.setdiff1d(a, b))
    assert_same(fnp.union1d(a, b), np.union1d(a, b))
    assert_same(fnp.setxor1d(a, b), np.setxor1d(a, b))
    for actual, expected in zip(
        fnp.intersect1d(a, b, return_indices=True), np.intersect1d(a, b, return_indices=True)
    ):
        np.testing.assert_array_equal(actual, expected)


def test_set_operations_keep_numpys_dtypes_and_pad_an_empty_result_with_zero():
    """setdiff1d keeps ar1's dtype (it promoted with ar2); a padded intersection or symmetric
    difference that is empty pads with 0 (it padded with a value that is not in the result)."""
    a, b = np.array([False, True]), np.array([7, 0], np.uint8)
    assert_same(fnp.setdiff1d(a, b), np.setdiff1d(a, b))
    a, b = np.array([3], np.int32), np.array([4, 5], np.int32)
    assert_same(fnp.intersect1d(a, b, size=2), np.zeros(2, np.int32))
    values, first_a, first_b = fnp.intersect1d(a, b, size=2, return_indices=True)
    assert_same(values, np.zeros(2, np.int32))
    assert_same(first_a, np.array([1, 1], np.int32))
    assert_same(first_b, np.array([2, 2], np.int32))
    assert_same(fnp.setxor1d(a, a, size=3), np.zeros(3, np.int32))
    assert_same(fnp.intersect1d(a, b, size=0), np.zeros(0, np.int32))


def test_set_operations_with_a_static_size_under_jit():
    a, b = np.array([3, 1, 2, 5, 1]), np.array([2, 3, 7])
    assert_same(fg.jit(lambda a, b: fnp.setdiff1d(a, b, size=4))(a, b), np.array([1, 5, 0, 0]))
    assert_same(
        fg.jit(lambda a, b: fnp.union1d(a, b, size=7, fill_value=-1))(a, b),
        np.array([1, 2, 3, 5, 7, -1, -1]),
    )
    assert_same(fg.jit(lambda a, b: fnp.setxor1d(a, b, size=4))(a, b), np.array([1, 5, 7, 1]))
    values, first_a, first_b = fg.jit(
        lambda a, b: fnp.intersect1d(a, b, size=3, return_indices=True)
    )(a, b)
    assert_same(values, np.array([2, 3, 2]))
    assert_same(first_a, np.array([2, 0, 5], np.int32))
    assert_same(first_b, np.array([0, 1, 3], np.int32))
    with pytest.raises(ConcretizationTypeError, match="size="):
        fg.jit(fnp.union1d)(a, b)


def test_unique_variants():
    x = np.array([[3, 1], [3, 0]])
    values, indices, inverse, counts = fnp.unique_all(x)
    expected = np.unique_all(x)
    assert_same(values, expected.values)
    np.testing.assert_array_equal(indices, expected.indices)
    np.testing.assert_array_equal(inverse, expected.inverse_indices)
    np.testing.assert_array_equal(counts, expected.counts)
    np.testing.assert_array_equal(fnp.unique_counts(x).counts, [1, 1, 2])
    assert fnp.unique_inverse(x).inverse_indices.shape == (2, 2)
    assert_same(fnp.unique_values(x), np.unique_values(x))


# ---------------------------------------------------------------------------------------------
# Floating-point decomposition and integer arithmetic

SPECIAL = [0.0, -0.0, 3.0, -1e-40, 1e-310, 5e-324, 1.5, -7.25e300, np.inf, -np.inf, np.nan, 6e-5]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_frexp_ldexp_modf_spacing_on_special_values(dtype):
    with np.errstate(over="ignore"):
        x = np.array(SPECIAL, np.float64).astype(dtype)
    mantissa, exponent = fnp.frexp(x)
    expected_mantissa, expected_exponent = np.frexp(x)
    assert_same(mantissa, expected_mantissa)
    assert_same(exponent, expected_exponent.astype(np.int32))
    assert_same(fnp.ldexp(mantissa, exponent), x)
    for actual, expected in zip(fnp.modf(x), np.modf(x)):
        assert_same(actual, expected)
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))
    assert_same(fnp.spacing(x), np.spacing(x))


def test_frexp_and_modf_fractions_have_their_slopes():
    # modf's fraction x - trunc(x) has slope 1 on both sides of every integer (it was -1 at
    # negative integers and -0, the slope of the copysign that gives NumPy's -0 there);
    # frexp's mantissa x * 2**-e has slope 2**-e (it was 0: the mantissa is made of bits).
    x = np.array([-3.0, -0.0, 0.0, -2.5, 2.0, 6.0, 1e300, -1e-310])
    modf_slope = fg.vmap(fg.grad(lambda t: fnp.modf(t)[0]))(x)
    np.testing.assert_array_equal(np.asarray(modf_slope), np.ones_like(x))
    frexp_slope = fg.vmap(fg.grad(lambda t: fnp.frexp(t)[0]))(x)
    expected = np.where(x == 0, 1.0, 2.0 ** -np.frexp(x)[1].astype(np.float64))
    np.testing.assert_array_equal(np.asarray(frexp_slope), expected)
    check_grads(lambda t: fnp.frexp(t)[0], (np.array([3.0, -0.3]),), order=2)
    check_grads(lambda t: fnp.modf(t)[0], (np.array([3.5, -0.3]),), order=2)


@given(
    fst.arrays(np.float64, (6,), min_value=-1e3, max_value=1e3),
    fst.arrays(np.int32, (6,), min_value=-1100, max_value=1100),
)
def test_ldexp_matches_numpy(x, e):
    assert_same(fnp.ldexp(x, e), np.ldexp(x, e))
    assert_same(fnp.ldexp(x.astype(np.float32), e), np.ldexp(x.astype(np.float32), e))


@given(
    fst.arrays(fst.signed_int_dtypes, (8,), min_value=-100, max_value=100),
    fst.arrays(np.int8, (8,), min_value=-100, max_value=100),
)
def test_gcd_lcm_match_numpy(a, b):
    assert_same(fnp.gcd(a, b), np.gcd(a, b))
    assert_same(fnp.lcm(a.astype(np.int64), b), np.lcm(a.astype(np.int64), b))


def test_gcd_lcm_of_the_most_negative_integer_match_numpy():
    # |int8 min| is 128, not -128: gcd(7, -128) was -1 (NumPy: 1), lcm(-127, -2) 2 (NumPy:
    # 254 wrapped to -2).
    for dtype in (np.int8, np.int32, np.int64):
        low = np.iinfo(dtype).min
        a = np.array([7, low, low, -2, 0, low + 1, 32], dtype)
        b = np.array([low, low, 0, low, low, -2, low], dtype)
        for fun in (fnp.gcd, fg.jit(fnp.gcd)):
            assert_same(fun(a, b), np.gcd(a, b))
        for fun in (fnp.lcm, fg.jit(fnp.lcm)):
            assert_same(fun(a, b), np.lcm(a, b))


def test_gcd_lcm_broadcast_a_scalar_against_an_array():
    """Euclid's loop carries both operands: a scalar beside an array failed to trace."""
    a, b = np.uint32(2018637814), np.array([True, False, True])
    assert_same(fnp.gcd(a, b), np.gcd(a, b))
    assert_same(fnp.lcm(6, np.array([4, 9, 0], np.int32)), np.array([12, 18, 0], np.int32))


def test_ldexp_takes_exponents_of_small_unsigned_dtypes():
    """The exponent's clip bounds were Python ints out of the exponent dtype's range."""
    x = np.array([8, -5], np.int8)
    e = np.array([6, 200], np.uint8)
    np.testing.assert_array_equal(fnp.ldexp(x, e), np.ldexp(x, e).astype(np.float32))
    e16 = np.array([3, 65535], np.uint16)
    np.testing.assert_array_equal(fnp.ldexp(np.float32(1.5), e16), np.ldexp(np.float32(1.5), e16))


def test_ldexp_takes_boolean_exponents():
    # As NumPy's and JAX's (it raised "the exponent x2 must be integers, got bool").
    e = np.array([True, False])
    np.testing.assert_array_equal(fnp.ldexp(np.float32(3), e), np.ldexp(np.float32(3), e))


def test_gcd_under_vmap_and_errors():
    a, b = np.array([[12, 7], [0, 9]]), np.array([18, 21])
    check_batching(fnp.gcd, [a, b], (0, None))
    with pytest.raises(TypeError, match="integer"):
        fnp.gcd(1.5, 2.0)
    with pytest.raises(TypeError, match="x2 must be integers"):
        fnp.ldexp(1.0, 2.0)


# ---------------------------------------------------------------------------------------------
# Functional forms of in-place functions, building and selecting


def numpy_in_place(function, a, *args, **kwargs):
    a = np.array(a)
    function(a, *args, **kwargs)
    return a


def test_in_place_functions_return_copies():
    assert_same(
        fnp.fill_diagonal(np.zeros((5, 3)), np.array([1.0, 2.0]), wrap=True, inplace=False),
        numpy_in_place(np.fill_diagonal, np.zeros((5, 3)), [1.0, 2.0], wrap=True),
    )
    assert_same(
        fnp.fill_diagonal(np.zeros((3, 3, 3)), 5.0, inplace=False),
        numpy_in_place(np.fill_diagonal, np.zeros((3, 3, 3)), 5.0),
    )
    assert_same(
        fnp.put(np.arange(5), np.array([1, 7]), np.array([10, 20]), inplace=False),
        np.array([0, 10, 2, 3, 20]),
    )
    assert_same(
        fnp.put(np.arange(5), np.array([1, 7]), np.array([10, 20]), mode="wrap", inplace=False),
        numpy_in_place(np.put, np.arange(5), [1, 7], [10, 20], mode="wrap"),
    )
    # Negative indices count from the end by default (put wrote -1 to index 0), and clip to 0
    # under mode='clip', as in NumPy.
    for mode in (None, "clip"):
        expected = numpy_in_place(np.put, np.arange(5), [-1, -4], [10, 20], mode=mode or "raise")
        for put in (fnp.put, fg.jit(fnp.put, static_argnames=("mode", "inplace"))):
            ind, v = np.array([-1, -4], np.int8), np.array([10, 20])
            got = put(np.arange(5), ind, v, mode=mode, inplace=False)
            assert_same(got, expected)
    x = rng().normal(size=(3, 4))
    index = np.argsort(x, axis=1)[:, :2]
    assert_same(
        fnp.put_along_axis(x, index, 0.0, axis=1, inplace=False),
        numpy_in_place(np.put_along_axis, x, index, 0.0, axis=1),
    )
    with pytest.raises(ValueError, match="inplace=False"):
        fnp.fill_diagonal(np.zeros((2, 2)), 1.0)


@pytest.mark.parametrize(
    "obj, values, axis",
    [
        (1, [7, 8], 1),
        ([1, 1, 3], [7, 8, 9], 1),
        (slice(0, 4, 2), 0, None),
        (-1, 5, 0),
        ([0, 2], [[1], [2]], 1),
    ],
)
def test_insert_and_delete_match_numpy(obj, values, axis):
    a = np.arange(6).reshape(2, 3)
    assert_same(
        fnp.insert(a, obj, np.asarray(values), axis=axis), np.insert(a, obj, values, axis=axis)
    )
    if not isinstance(obj, int) or axis is not None:
        delete_obj = obj if isinstance(obj, slice) else np.unique(np.asarray(obj) % 3)
        assert_same(fnp.delete(a, delete_obj, axis=1), np.delete(a, delete_obj, axis=1))


def test_rollaxis_counts_a_negative_start_from_the_end_of_the_axes():
    """NumPy adds ndim to a negative start; funcgrad took it modulo ndim + 1, one place off."""
    x = np.arange(10).reshape(2, 1, 5)
    for axis in range(-3, 3):
        for start in range(-3, 4):
            assert_same(fnp.rollaxis(x, axis, start), np.rollaxis(x, axis, start))


@pytest.mark.parametrize("y_shape", [None, (1, 4), (4,), (2, 4)])
def test_cov_of_columns_transposes_m_unless_it_is_1d(y_shape):
    """With rowvar=False NumPy transposes every 2-d m, a single row included (funcgrad kept a
    (1, N) m as one variable), and a y unless it has one row."""
    rng = np.random.default_rng(0)
    m = rng.normal(size=(1, 4))
    y = None if y_shape is None else rng.normal(size=y_shape)
    for rowvar in (True, False):
        try:
            expected = np.cov(m, y, rowvar=rowvar)
        except ValueError:
            with pytest.raises(ValueError):
                fnp.cov(m, y, rowvar=rowvar)
            continue
        assert_close(fnp.cov(m, y, rowvar=rowvar), expected)
        with np.errstate(all="ignore"):
            assert_close(fnp.corrcoef(m, y, rowvar=rowvar), np.corrcoef(m, y, rowvar=rowvar))


def test_building_and_reshaping_match_numpy():
    blocks = [[np.eye(2), np.zeros((2, 1))], [np.ones((1, 2)), np.array([[5.0]])]]
    assert_same(fnp.block(blocks), np.block(blocks))
    assert_same(fnp.block([1, 2, np.array([3, 4])]), np.block([1, 2, np.array([3, 4])]))
    a = np.arange(6).reshape(2, 3)
    assert_same(fnp.append(a, [[1, 2, 3]], axis=0), np.append(a, [[1, 2, 3]], axis=0))
    assert_same(fnp.append(a, 7), np.append(a, 7))
    assert (
        fnp.rollaxis(np.zeros((2, 3, 4, 5)), 3, 1).shape
        == np.rollaxis(np.zeros((2, 3, 4, 5)), 3, 1).shape
    )
    assert_same(fnp.resize(np.arange(3), (2, 4)), np.resize(np.arange(3), (2, 4)))
    assert_same(fnp.trim_zeros(np.array([0, 0, 1, 2, 0])), np.trim_zeros(np.array([0, 0, 1, 2, 0])))
    # Beyond one dimension the smallest box holding the nonzeros, as in NumPy (it raised).
    grid = np.zeros((4, 5), np.int32)
    grid[1, 2], grid[2, 3] = 7, -1
    for trim in ("fb", "f", "b"):
        for axis in (None, 0, -1):
            expected = np.trim_zeros(grid, trim, axis=axis)
            assert_same(fnp.trim_zeros(grid, trim, axis=axis), expected)
    assert fnp.trim_zeros(np.zeros((2, 3))).shape == np.trim_zeros(np.zeros((2, 3))).shape
    with pytest.raises(ValueError, match="trim must be"):
        fnp.trim_zeros(grid, "x")
    assert [u.shape for u in fnp.unstack(a, axis=1)] == [(2,)] * 3
    assert_same(fnp.concat([a, a], axis=None), np.concatenate([a, a], axis=None))
    assert fnp.permute_dims(np.zeros((2, 3, 4)), (2, 0, 1)).shape == (4, 2, 3)
    with pytest.raises(ValueError, match="depths are mismatched"):
        fnp.block([[1, 2], 3])


def test_selection_matches_numpy():
    a = np.arange(6).reshape(2, 3)
    condition = np.array([True, False, True])
    assert_same(fnp.compress(condition, a, axis=1), np.compress(condition, a, axis=1))
    # Entries past the axis may be given when they are False, as in NumPy (this raised).
    longer = np.array([True, False, True, False, False])
    assert_same(fnp.compress(longer, a, axis=1), np.compress(longer, a, axis=1))
    with pytest.raises(ValueError, match="selects past axis 1"):
        fnp.compress(np.array([True, False, True, True]), a, axis=1)
    compressed = fg.jit(lambda c, a: fnp.compress(c, a, axis=1, size=3, fill_value=-1))(
        condition, a
    )
    assert_same(compressed, np.array([[0, 2, -1], [3, 5, -1]]))
    assert_same(fnp.extract(a % 2 == 0, a), np.extract(a % 2 == 0, a))
    choices = [np.arange(3), 10 + np.arange(3)]
    assert_same(fnp.choose(np.array([0, 1, 1]), choices), np.choose([0, 1, 1], choices))
    assert_same(
        fnp.choose(np.array([0, 3, -1]), choices, mode="clip"),
        np.choose([0, 3, -1], choices, mode="clip"),
    )
    with pytest.raises(ValueError, match="out of range"):
        fnp.choose(np.array([0, 3]), choices)
    x = np.linspace(-2, 2, 9)
    functions = [lambda v: -v, lambda v: v**2, 0.5]
    assert_same(
        fnp.piecewise(x, [x < 0, x > 1], functions), np.piecewise(x, [x < 0, x > 1], functions)
    )
    multi = (np.array([1, 2]), np.array([3, 0]))
    assert_same(
        fnp.ravel_multi_index(multi, (4, 5)), np.ravel_multi_index(multi, (4, 5)).astype(np.int32)
    )
    assert_same(
        fnp.ravel_multi_index(multi, (4, 5), order="F"),
        np.ravel_multi_index(multi, (4, 5), order="F").astype(np.int32),
    )
    for actual, expected in zip(fnp.mask_indices(3, fnp.triu, 1), np.mask_indices(3, np.triu, 1)):
        np.testing.assert_array_equal(actual, expected)


def test_mode_raise_needs_concrete_indices():
    # Traced indices went unchecked: out-of-range ones gave some value silently.
    choices = [np.arange(3), 10 + np.arange(3)]
    with pytest.raises(fg.errors.ConcretizationTypeError, match="mode='raise'"):
        fg.jit(lambda a: fnp.choose(a, choices))(np.array([0, 5, 1]))
    with pytest.raises(fg.errors.ConcretizationTypeError, match="mode='raise'"):
        fg.jit(lambda i: fnp.ravel_multi_index((i, i), (2, 3)))(np.array([0, 1]))
    clipped = fg.jit(lambda a: fnp.choose(a, choices, mode="clip"))(np.array([0, 5, 1]))
    assert_same(clipped, np.choose([0, 5, 1], choices, mode="clip"))


# ---------------------------------------------------------------------------------------------
# Mapping, grids, products, windows, bits, dtype queries


def test_mapping_helpers_match_numpy():
    x = rng().normal(size=(3, 4, 2))
    assert_close(
        fnp.apply_along_axis(lambda v: v[:2] * v.sum(), 1, x),
        np.apply_along_axis(lambda v: v[:2] * v.sum(), 1, x),
    )
    assert_close(fnp.apply_along_axis(fnp.sum, 0, x), np.apply_along_axis(np.sum, 0, x))
    assert_close(fnp.apply_over_axes(fnp.sum, x, [0, 2]), np.apply_over_axes(np.sum, x, [0, 2]))
    assert_close(
        fnp.fromfunction(lambda i, j: i + 2 * j, (3, 4)),
        np.fromfunction(lambda i, j: i + 2 * j, (3, 4)).astype(np.float32),
    )
    matvec = fnp.vectorize(lambda m, v: m @ v, signature="(m,n),(n)->(m)")
    v = np.arange(2.0)
    assert_close(matvec(x, v), x @ v)
    assert_close(fnp.vectorize(lambda a, b: a * 2 + b)(x, v), x * 2 + v)
    assert_close(fnp.vectorize(lambda a, k: a * k, excluded={1})(x, 3.0), x * 3)
    with pytest.raises(ValueError, match="core dimension 'n'"):
        matvec(x, np.arange(3.0))


def test_grids_and_products_match_numpy():
    assert_same(fnp.mgrid[0:3, 0:4:2], np.mgrid[0:3, 0:4:2].astype(np.int32))
    assert_close(fnp.mgrid[0:1:5j], np.mgrid[0:1:5j].astype(np.float32))
    assert_same(fnp.ogrid[0:3, 0:2][1], np.ogrid[0:3, 0:2][1].astype(np.int32))
    assert_same(fnp.r_[1:4, 7, np.array([8, 9])], np.r_[1:4, 7, np.array([8, 9])])
    assert_same(fnp.c_[np.arange(3), np.arange(3)], np.c_[np.arange(3), np.arange(3)])
    a, b = rng().normal(size=(2, 3, 4)), np.arange(4.0)
    assert_close(fnp.matvec(a, b), a @ b)
    assert_close(fnp.vecmat(np.arange(3.0), a), np.arange(3.0) @ a)
    assert_close(
        fnp.angle(np.array([-1.0, 0.0, -0.0, 2.0]), deg=True),
        np.angle(np.array([-1.0, 0.0, -0.0, 2.0]), deg=True),
    )
    assert fnp.fabs(np.array([-1])).dtype == np.float32
    assert_same(fnp.imag(np.array([1.5])), np.array([0.0]))
    assert_same(fnp.isreal(np.ones(2)), np.array([True, True]))


@pytest.mark.parametrize("beta", [-14.0, -2.0, 0.0, 5.0])
def test_kaiser_matches_numpy_for_any_sign_of_beta(beta):
    """I0 is even: a negative beta gave exp(2|beta|)-fold values (23.95 for kaiser(2, -2))."""
    assert_close(fnp.kaiser(7, beta), np.kaiser(7, beta).astype(np.float32), np.float32)


def test_vecmat_conjugates_the_vector():
    x = np.array([2.5 - 1j, -1 + 0.5j])
    m = np.arange(6.0).reshape(2, 3) + 1j
    assert_close(fnp.vecmat(x, m), np.vecmat(x, m))
    assert_close(fnp.vecmat(x, m), np.conj(x) @ m)


@pytest.mark.parametrize("name", ["bartlett", "hanning", "hamming", "blackman"])
@pytest.mark.parametrize("M", [0, 1, 2, 7, 8, 13, 50])
def test_windows_are_numpys_rounded(name, M):
    """Computed in float64 with NumPy's formulas and rounded once (float32 windows were a few
    ulps off and not symmetric); equal to NumPy's under enable_x64."""
    assert_same(getattr(fnp, name)(M), getattr(np, name)(M).astype(np.float32))
    with fg.enable_x64():
        assert_same(getattr(fnp, name)(M), getattr(np, name)(M))


@given(fst.arrays(np.bool_, fst.shapes(1, 3, 0, 11)), st.sampled_from(["big", "little"]), st.data())
def test_packbits_unpackbits_match_numpy(bits, bitorder, data):
    axis = data.draw(st.none() | st.integers(-bits.ndim, bits.ndim - 1))
    packed = fnp.packbits(bits, axis=axis, bitorder=bitorder)
    assert_same(packed, np.packbits(bits, axis=axis, bitorder=bitorder))
    count = data.draw(st.none() | st.integers(-3, 20))
    try:
        expected = np.unpackbits(np.asarray(packed), axis=axis, count=count, bitorder=bitorder)
    except ValueError:  # (dropping more bits than there are, as funcgrad must refuse too)
        with pytest.raises(ValueError, match="-count larger than number of elements"):
            fnp.unpackbits(np.asarray(packed), axis=axis, count=count, bitorder=bitorder)
        return
    unpacked = fnp.unpackbits(np.asarray(packed), axis=axis, count=count, bitorder=bitorder)
    if np.asarray(packed).size == 0:
        # NumPy leaves the padding past an empty input uninitialised: only the shape and
        # dtype are defined there; funcgrad pads with zeros.
        assert unpacked.shape == expected.shape and unpacked.dtype == expected.dtype
        assert not np.any(np.asarray(unpacked))
    else:
        assert_same(unpacked, expected)


def test_dtype_queries_and_aliases():
    assert fnp.isdtype(fnp.float32, "real floating") and fnp.isdtype(fnp.bfloat16, "real floating")
    assert fnp.isdtype(fnp.uint8, ("bool", "unsigned integer")) and not fnp.isdtype(
        fnp.int8, "unsigned integer"
    )
    assert fnp.can_cast(fnp.int8, fnp.float32) and not fnp.can_cast(fnp.float64, fnp.int32)
    assert fnp.astype(np.arange(3), fnp.float16).dtype == np.float16
    assert fnp.bool is np.bool_ and fnp.double is np.float64 and fnp.single is np.float32
    assert fnp.iterable([1]) and not fnp.iterable(1)
    assert_same(
        fnp.frombuffer(np.arange(3, dtype=np.int32).tobytes(), np.int32),
        np.arange(3, dtype=np.int32),
    )
    assert issubclass(np.str_, fnp.character) and issubclass(fnp.character, fnp.flexible)
    assert fnp.object_ is np.object_ and issubclass(fnp.ComplexWarning, RuntimeWarning)
    with pytest.raises(NotImplementedError, match=r"asarray\(numpy.fromfile"):
        fnp.fromfile("weights.bin")


@settings(max_examples=5)
@given(float_arrays(min_dims=2, max_dims=2, min_side=2))
def test_staging_of_composites(x):
    check_staging(
        lambda x: (fnp.cov(x), fnp.diff(x, axis=0), fnp.trapezoid(x), fnp.gradient(x, axis=1)), x
    )


def test_place_and_poly_match_numpy():
    a = np.arange(6).reshape(2, 3)
    mask = a % 2 == 1
    assert_same(
        fnp.place(a, mask, [10, 20], inplace=False), numpy_in_place(np.place, a, mask, [10, 20])
    )
    roots = np.array([1.0, 2.0, -3.0])
    assert_close(fnp.poly(roots), np.poly(roots))
    # No roots: NumPy's and JAX's poly give the scalar 1 (it was the array [1.]).
    assert_close(fnp.poly(np.zeros(0)), np.poly(np.zeros(0)))
    check_grads(fnp.poly, (roots,), 2, **GRAD_TOL)


def test_poly_of_a_matrix_is_its_characteristic_polynomial():
    # It raised NotImplementedError; as JAX's, the coefficients come out complex.
    matrix = np.random.default_rng(0).normal(size=(4, 4))
    expected = np.poly(matrix)
    for result in (fnp.poly(matrix), fg.jit(fnp.poly)(matrix)):
        assert result.dtype == np.complex128
        assert_close(result, expected.astype(np.complex128), rtol=1e-10, atol=1e-10)
    assert_close(
        fnp.poly(np.array([[4, -3], [4, 3]], np.int16)), np.array([1, -7, 24], np.complex64)
    )
    for shape in [(0, 0), (2, 3), (2, 2, 2)]:
        with pytest.raises(ValueError, match="square matrix"):
            fnp.poly(np.zeros(shape))


def test_setxor1d_keeps_a_nan_of_each_array_as_numpy():
    # setxor1d([], [1, nan]) dropped the NaN (isin finds a NaN nowhere, so it was in neither);
    # NumPy and JAX compare NaN unequal to everything: each array with NaNs adds one NaN.
    nan = np.nan
    cases = [
        (np.zeros(0), np.array([2.0, nan, 1.0])),
        (np.array([1.0, nan, nan]), np.array([1.0, 2.0])),
        (np.array([3.0, nan, 1.0]), np.array([nan, 5.0, 1.0])),
    ]
    for a, b in cases:
        expected = np.setxor1d(a, b)
        np.testing.assert_array_equal(np.asarray(fnp.setxor1d(a, b)), expected)
        jitted = fg.jit(lambda a, b, n=expected.size: fnp.setxor1d(a, b, size=n))
        np.testing.assert_array_equal(np.asarray(jitted(a, b)), expected)


@pytest.mark.parametrize("name", ["intersect1d", "union1d", "setdiff1d", "setxor1d", "isin"])
def test_set_operations_on_large_inputs_sort_instead_of_comparing_all_pairs(name):
    rng = np.random.default_rng(0)
    n = 3000  # 9e6 pairs: far past what comparing all pairs may allocate
    a = rng.integers(0, n, n).astype(np.int32)
    b = rng.integers(0, n, n + 1).astype(np.int32)
    fn = getattr(fnp, name)
    np.testing.assert_array_equal(np.asarray(fn(a, b)), getattr(np, name)(a, b))
    # No intermediate grows with the product of the sizes: time O(n log n), memory O(n).
    kwargs = {} if name == "isin" else {"size": 3 * n}
    jaxpr = fg.make_jaxpr(lambda x, y: fn(x, y, **kwargs))(a, b).jaxpr
    largest = max(int(np.prod(v.aval.shape)) for eqn in jaxpr.eqns for v in eqn.outvars)
    assert largest <= 4 * n


@pytest.mark.parametrize("n", [2, 3, 5])
def test_diff_of_order_past_the_length_is_empty_as_in_numpy(n):
    x = np.arange(6.0).reshape(3, 2)
    for axis in (0, 1):
        out = fnp.diff(x, n=n, axis=axis)
        expected = np.diff(x, n=n, axis=axis)
        assert out.shape == expected.shape
        np.testing.assert_array_equal(np.asarray(out), expected)


def test_quantiles_out_of_range_raise_when_known_and_are_nan_when_traced():
    x = np.arange(5.0)
    for bad in (1.5, -0.1, [0.5, 2.0]):
        with pytest.raises(ValueError, match=r"q must lie in \[0, 1\]"):
            fnp.quantile(x, bad)
    with pytest.raises(ValueError, match=r"q must lie in \[0, 100\]"):
        fnp.percentile(x, 150)
    assert np.isnan(np.asarray(fg.jit(fnp.quantile)(x, 1.5)))
    assert float(fnp.percentile(x, 100)) == 4.0


def test_bad_inputs_of_vecmat_delete_and_histogram_name_the_cause():
    with pytest.raises(ValueError, match=r"vecmat: takes a vector .* got shapes \(3,\) and \(3,\)"):
        fnp.vecmat(fnp.ones(3), fnp.ones(3))
    # matvec of a vector and a matrix gave the matrix times the vector as a column.
    with pytest.raises(
        ValueError, match=r"matvec: takes a matrix .* got shapes \(3,\) and \(1, 3\)"
    ):
        fnp.matvec(fnp.ones(3), fnp.ones((1, 3)))
    with pytest.raises(IndexError, match="delete: indices must be integers"):
        fnp.delete(fnp.ones(2), float("nan"))
    with pytest.raises(ValueError, match="need at least 2, got 1"):
        fnp.histogram(fnp.ones(3), fnp.ones(1))
    with pytest.raises(TypeError, match="type str is not a valid funcgrad array operand"):
        fg.lax.full_like("abc", 1)
    assert_close(fnp.vecmat(np.arange(3.0), np.ones((3, 2))), np.arange(3.0) @ np.ones((3, 2)))
    assert_close(fg.lax.full_like(1.5, 2), np.float32(2.0))
