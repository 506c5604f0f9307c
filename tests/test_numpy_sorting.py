"""funcgrad.numpy sorting and searching against NumPy and plain-Python definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.errors import ConcretizationTypeError
from tests import strategies as fst
from tests.checks import assert_close, check_staging


@st.composite
def arrays_with_ties(draw, dtype=fst.any_dtypes, shape=None, nans=True):
    """Arrays whose values repeat often (small range), with some NaNs in float arrays."""
    shape = fst.shapes(max_side=4) if shape is None else shape
    x = draw(fst.arrays(dtype, shape, min_value=-3, max_value=3))
    if x.dtype.kind == "f":
        x = np.round(x)
        if nans:
            x = np.where(draw(fst.arrays(np.bool_, x.shape)), np.nan, x).astype(x.dtype)
    return x


@st.composite
def array_and_axis(draw, **kwargs):
    x = draw(arrays_with_ties(**kwargs))
    axis = draw(st.none() | st.integers(-x.ndim, x.ndim - 1)) if x.ndim else None
    return x, axis


def _descending_order(row) -> list[int]:
    """Indices of a 1-d row sorted largest first, NaNs first, ties in their original order."""
    return sorted(range(len(row)), key=lambda i: (not math.isnan(row[i]), -float(row[i])))


# ---------------------------------------------------------------------------------------------
# sort, argsort, lexsort, partition


@given(array_and_axis())
def test_sort_and_argsort_match_numpy(args):
    x, axis = args
    assert_close(fnp.sort(x, axis), np.sort(x, axis, stable=True), x.dtype)
    # Stable: equal elements (and NaNs, which go last) keep their original order.
    assert_close(fnp.argsort(x, axis), np.argsort(x, axis, stable=True), np.int32)
    check_staging(lambda x: (fnp.sort(x, axis), fnp.argsort(x, axis)), x)


@given(arrays_with_ties(shape=fst.shapes(1, 3, min_side=1, max_side=5)))
def test_descending_sort_is_stable_with_nans_first(x):
    flat = x.reshape(-1, x.shape[-1]).astype(np.float64)
    order = np.array([_descending_order(row) for row in flat], dtype=np.int32)
    expected_order = order.reshape(x.shape)
    assert_close(fnp.argsort(x, descending=True), expected_order, np.int32)
    expected = np.take_along_axis(x, expected_order, axis=-1)
    assert_close(fnp.sort(x, descending=True), expected, x.dtype)


@given(st.integers(1, 3), fst.shapes(1, 2, max_side=5), st.data())
def test_lexsort_matches_numpy(n_keys, shape, data):
    keys = [data.draw(arrays_with_ties(fst.int_dtypes, shape)) for _ in range(n_keys)]
    assert_close(fnp.lexsort(keys), np.lexsort(keys), np.int32)
    assert_close(fnp.lexsort(keys, axis=0), np.lexsort(keys, axis=0), np.int32)


@given(arrays_with_ties(fst.numeric_dtypes, fst.shapes(1, 3, min_side=1), nans=False), st.data())
def test_partition_puts_kth_in_place(x, data):
    kth = data.draw(st.integers(0, x.shape[-1] - 1))
    part = np.asarray(fnp.partition(x, kth))
    kth_value = np.sort(x)[..., kth : kth + 1]
    assert (part[..., kth : kth + 1] == kth_value).all()
    assert (part[..., :kth] <= kth_value).all() and (part[..., kth:] >= kth_value).all()
    indices = np.asarray(fnp.argpartition(x, kth))
    assert (np.take_along_axis(x, indices, -1) == part).all()


def test_argpartition_indices_are_int32_with_x64_too():
    x = np.array([3.0, 1.0, 2.0, 0.0])
    with fg.enable_x64():
        for argpartition in (fnp.argpartition, fg.jit(fnp.argpartition, static_argnums=1)):
            indices = argpartition(x, 1)
            assert indices.dtype == np.int32
            assert np.take_along_axis(x, np.asarray(indices), -1)[1] == np.partition(x, 1)[1]


# ---------------------------------------------------------------------------------------------
# searchsorted, digitize


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("method", ["scan", "compare_all", "scan_unrolled", "sort"])
@given(
    a=arrays_with_ties(fst.numeric_dtypes, fst.shapes(1, 1, max_side=9)),
    v=arrays_with_ties(fst.numeric_dtypes, fst.shapes(0, 2)),
)
def test_searchsorted_matches_numpy(side, method, a, v):
    a = np.sort(a)
    dtype = np.result_type(a, v)
    expected = np.searchsorted(a.astype(dtype), v.astype(dtype), side)
    actual = fnp.searchsorted(a, v, side, method=method)
    assert_close(actual, expected, np.int32)


@given(arrays_with_ties(fst.float_dtypes, fst.shapes(1, 1, min_side=1, max_side=6)), st.data())
def test_searchsorted_with_sorter(a, data):
    v = data.draw(arrays_with_ties(a.dtype, fst.shapes(0, 1)))
    sorter = np.argsort(a, stable=True)
    expected = np.searchsorted(a, v, sorter=sorter)
    assert_close(fnp.searchsorted(a, v, sorter=sorter), expected, np.int32)


@pytest.mark.parametrize("right", [False, True])
@given(
    x=arrays_with_ties(fst.float_dtypes, fst.shapes(0, 2), nans=False),
    bins=st.lists(st.integers(-4, 4), max_size=6),
    decreasing=st.booleans(),
)
def test_digitize_matches_numpy(right, x, bins, decreasing):
    bins = np.sort(np.array(bins, x.dtype))
    if decreasing:
        bins = bins[::-1].copy()
    assert_close(fnp.digitize(x, bins, right), np.digitize(x, bins, right), np.int32)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("method", ["scan", "compare_all"])
def test_searchsorted_of_complex_values_orders_by_real_then_imaginary_part(side, method):
    # It raised "lt does not accept dtype complex64".
    rng = np.random.default_rng(0)
    a = np.sort((rng.integers(-2, 3, 9) + 1j * rng.integers(-2, 3, 9)).astype(np.complex64))
    v = (rng.integers(-3, 4, 12) + 1j * rng.integers(-3, 4, 12)).astype(np.complex64)
    expected = np.searchsorted(a, v, side=side)
    assert_close(fnp.searchsorted(a, v, side=side, method=method), expected, np.int32)
    real = np.array([1.0, 2.0, 3.0])
    assert int(fnp.searchsorted(real, 2 + 1j, side=side)) == np.searchsorted(real, 2 + 1j, side)


def test_searchsorted_errors():
    with pytest.raises(ValueError, match=r"1-d.*\(2, 2\)"):
        fnp.searchsorted(np.ones((2, 2)), 1.0)
    with pytest.raises(ValueError, match="side"):
        fnp.searchsorted(np.ones(2), 1.0, side="middle")
    with pytest.raises(ValueError, match="method must be"):
        fnp.searchsorted(np.ones(2), 1.0, method="bisect")


# ---------------------------------------------------------------------------------------------
# unique, bincount


@given(arrays_with_ties())
def test_unique_matches_numpy(x):
    expected = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    actual = fnp.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for got, want in zip(actual, expected):
        assert_close(got, want)
    assert_close(fnp.unique(x), expected[0], x.dtype)


# NaNs are left out: NumPy's unique along an axis never merges NaN slices, funcgrad's does
# (equal_nan applies along an axis too).
@given(arrays_with_ties(shape=fst.shapes(2, 3, max_side=4), nans=False), st.data())
def test_unique_along_axis_matches_numpy(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    expected = np.unique(x, axis=axis, return_index=True, return_inverse=True, return_counts=True)
    actual = fnp.unique(x, axis=axis, return_index=True, return_inverse=True, return_counts=True)
    for got, want in zip(actual, expected):
        assert_close(got, want)


@given(arrays_with_ties(fst.numeric_dtypes), st.integers(0, 8), st.none() | st.integers(5, 9))
def test_unique_with_size_pads_and_truncates(x, size, fill_value):
    """The index pads with where the smallest value first occurs (it padded with 0, an index
    that need not hold the padding value)."""
    values, index, counts = np.unique(x, return_index=True, return_counts=True)
    n = min(size, len(values))
    fill = (values[0] if len(values) else 0) if fill_value is None else fill_value
    padded = np.concatenate([values[:n], np.full(size - n, fill, x.dtype)])
    zeros = np.zeros(size - n, np.int64)
    first = np.full(size - n, index[0] if len(values) else 0)
    actual = fnp.unique(x, return_index=True, return_counts=True, size=size, fill_value=fill_value)
    assert_close(actual[0], padded, x.dtype)
    assert_close(actual[1], np.concatenate([index[:n], first]), np.int32)
    assert_close(actual[2], np.concatenate([counts[:n], zeros]), np.int32)


@settings(max_examples=5)
@given(arrays_with_ties(fst.float_dtypes, fst.shapes(1, 2, min_side=1)))
def test_unique_traces_with_static_size(x):
    check_staging(lambda x: fnp.unique(x, return_inverse=True, return_counts=True, size=4), x)


def test_unique_without_size_under_tracing_explains_why():
    with pytest.raises(ConcretizationTypeError, match="unique.*number of unique values"):
        fg.make_jaxpr(fnp.unique)(np.ones(3))


@given(
    fst.arrays(np.int32, fst.shapes(1, 1, max_side=8), min_value=0, max_value=6),
    st.integers(0, 9),
    st.booleans(),
    st.data(),
)
def test_bincount_matches_numpy(x, minlength, weighted, data):
    weights = data.draw(fst.arrays(np.float32, x.shape)) if weighted else None
    expected = np.bincount(x, weights, minlength)
    dtype = np.float32 if weighted else np.int32
    assert_close(fnp.bincount(x, weights, minlength), expected.astype(dtype), dtype)
    length = len(expected) + 2
    expected_long = np.concatenate([expected, np.zeros(2)]).astype(dtype)
    assert_close(fnp.bincount(x, weights, length=length), expected_long, dtype)


def test_bincount_counts_booleans_as_numpy_does():
    x = np.array([True, False, True, True])
    assert_close(fnp.bincount(x, minlength=3), np.bincount(x, minlength=3), np.int32)


@pytest.mark.parametrize("dtype", [np.float16, fnp.bfloat16])
def test_bincount_of_half_precision_weights_does_not_stall(dtype):
    # Added one by one in the weights' dtype, totals stopped growing at 2048 (or 256).
    x, weights = np.zeros(3000, np.int32), np.ones(3000, dtype)
    expected = np.bincount(x, weights).astype(dtype)
    assert_close(fnp.bincount(x, weights), expected, dtype)
    assert_close(fg.jit(lambda x, w: fnp.bincount(x, w, length=1))(x, weights), expected, dtype)


def test_bincount_under_tracing_needs_length():
    with pytest.raises(ConcretizationTypeError, match="bincount.*length"):
        fg.make_jaxpr(fnp.bincount)(np.arange(3))
    jaxpr = fg.make_jaxpr(lambda x: fnp.bincount(x, length=5))(np.arange(3))
    assert jaxpr.out_avals[0].shape == (5,)


def test_bincount_errors_name_shapes():
    with pytest.raises(ValueError, match=r"1-d.*\(2, 2\)"):
        fnp.bincount(np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        fnp.bincount(np.arange(3), weights=np.ones(2))


def test_unique_merges_nans_unless_told_not_to():
    x = np.array([[np.nan, 1.0], [np.nan, 1.0], [0.0, 2.0]], np.float32)
    assert fnp.unique(x, axis=0).shape == (2, 2)
    assert fnp.unique(x, axis=0, equal_nan=False).shape == (3, 2)
    assert_close(fnp.unique(x[:, 0]), np.array([0.0, np.nan], np.float32))
