"""Corners of funcgrad.numpy found by comparing it with NumPy on random arguments, each pinned
against NumPy, eagerly and under jit."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp


def assert_same(actual, expected) -> None:
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected, strict=True)


@pytest.mark.parametrize(
    "name", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
)
@pytest.mark.parametrize(
    "dtype, number", [(np.uint8, -1), (np.uint8, 256), (np.int8, -129), (np.int16, 2**70)]
)
def test_comparisons_with_python_ints_beyond_the_dtype_are_exact(name, dtype, number):
    """NumPy 2 compares them as exact numbers where arithmetic with them raises."""
    x = np.array([0, 1, 5, 127], dtype)
    compare = getattr(fnp, name)
    for args in ((x, number), (number, x)):
        expected = getattr(np, name)(*args)
        assert_same(compare(*args), expected)
    assert_same(fg.jit(lambda x: compare(x, number))(x), getattr(np, name)(x, number))


def test_comparison_operators_with_python_ints_beyond_the_dtype():
    x = fnp.asarray(np.array([0, 7, 255], np.uint8))
    for op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
        assert_same(op(x, -1), op(np.asarray(x), -1))
        assert_same(op(300, x), op(300, np.asarray(x)))


@pytest.mark.parametrize("bounds", [(-1, 2), (2, 300), (-1, None), (None, 256), (-5, 400)])
def test_clip_ignores_python_int_bounds_beyond_the_dtype(bounds):
    """As NumPy's clip does; they were refused as arithmetic refuses them."""
    x = np.array([0, 1, 5, 255], np.uint8)
    expected = np.clip(x, *bounds)
    assert_same(fnp.clip(x, *bounds), expected)
    assert_same(fg.jit(lambda x: fnp.clip(x, *bounds))(x), expected)


@pytest.mark.parametrize("name", ["convolve", "correlate"])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolutions_of_booleans_are_boolean(name, mode):
    """As NumPy's: `or` of `and`s. They were int32 counts."""
    a = np.array([True, False, True, True, False])
    v = np.array([True, True, False])
    expected = getattr(np, name)(a, v, mode)
    assert_same(getattr(fnp, name)(a, v, mode), expected)
    assert_same(fg.jit(lambda a, v: getattr(fnp, name)(a, v, mode))(a, v), expected)


@pytest.mark.parametrize("fp_dtype", [np.complex64, np.complex128])
def test_interp_of_complex_values_with_a_period(fp_dtype):
    """Only fp was meant to be complex; x and xp were promoted with it, so a period (a real
    remainder) raised deep inside."""
    xp = np.array([-1.0, 0.5, 0.75, 2.0])
    fp = np.array([1 + 2j, -1j, 3, 0.5 - 1j], fp_dtype)
    x = np.linspace(-3.0, 3.0, 13)
    expected = np.interp(x, xp, fp, period=2.0)
    for fun in (fnp.interp, fg.jit(fnp.interp, static_argnames="period")):
        got = fun(x, xp, fp, period=2.0)
        assert got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_interp_refuses_complex_points():
    with pytest.raises(TypeError, match="interp: x must be real, got complex"):
        fnp.interp(np.array([1j]), np.array([0.0, 1.0]), np.array([1.0, 2.0]))


def test_roots_of_float32_coefficients_are_complex64_under_x64():
    """As in NumPy; they were the default complex, complex128 under the flag."""
    p = np.array([3.0, 5.0, 1.0], np.float32)
    with fg.enable_x64():
        got = fnp.roots(p)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(np.sort_complex(np.asarray(got)), np.sort(np.roots(p)), rtol=1e-6)


def test_intersect1d_indices_of_empty_arrays_have_the_default_int():
    """The second indices were int32 where an array was empty, int64 otherwise under x64."""
    with fg.enable_x64():
        empty = fnp.intersect1d(np.zeros(0, np.int8), np.zeros(0, np.int8), return_indices=True)
        full = fnp.intersect1d(np.arange(3), np.arange(2), return_indices=True)
    assert [i.dtype for i in empty[1:]] == [i.dtype for i in full[1:]] == [np.int64] * 2


@pytest.mark.parametrize("num, endpoint", [(0, True), (1, True), (0, False)])
def test_linspace_without_divisions_steps_by_one_nan(num, endpoint):
    """NumPy's step is then a scalar NaN whatever the bounds; it was a NaN per line."""
    start, stop = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    expected = np.linspace(start, stop, num, endpoint, retstep=True)[1]
    for linspace in (fnp.linspace, fg.jit(fnp.linspace, static_argnums=(2, 3, 4))):
        step = linspace(start, stop, num, endpoint, True)[1]
        assert step.shape == np.shape(expected) == ()
        assert np.isnan(step)


@pytest.mark.parametrize("name", ["nanargmax", "nanargmin"])
def test_nan_arg_reductions_of_only_nans_give_minus_one(name):
    """NumPy raises for such a slice; index 0 passed for an element found."""
    x = np.array([[np.nan, 2.0, -1.0], [np.nan, np.nan, np.nan], [np.inf, np.nan, -np.inf]])
    expected_rows = {"nanargmax": [1, -1, 0], "nanargmin": [2, -1, 2]}[name]
    for fun in (getattr(fnp, name), fg.jit(getattr(fnp, name), static_argnames="axis")):
        assert_same(fun(x, axis=1), np.array(expected_rows, np.int32))
        np.testing.assert_array_equal(fun(x, axis=0), getattr(np, name)(x, axis=0))
        assert int(fun(np.full(3, np.nan))) == -1
    got = getattr(fnp, name)(x, axis=1, keepdims=True)
    np.testing.assert_array_equal(got, np.array(expected_rows)[:, None])


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int32])
def test_vander_of_small_integers_is_in_the_default_int_under_x64(dtype):
    """As NumPy's (its default int): the powers were int32, so uint8 10**11 wrapped."""
    x = np.array([1, 3, 10, 0], dtype)
    expected = np.vander(x, 12)
    with fg.enable_x64():
        assert_same(fnp.vander(x, 12), expected)
        assert_same(fg.jit(lambda x: fnp.vander(x, 12))(x), expected)


def test_round_refuses_decimals_that_are_not_integers():
    """round(x, 1.5) rounded at a factor of 10**1.5; NumPy refuses it."""
    x = np.array([0.123, 4.567])
    with pytest.raises(TypeError, match="round: decimals must be an integer, got 1.5"):
        fnp.round(x, 1.5)
    with pytest.raises(TypeError, match="decimals must be an integer"):
        fnp.around(x, "1")
    assert_same(fnp.round(x, np.int64(1)), np.round(x, 1))


def test_packbits_refuses_floats():
    """As NumPy does; a float array was packed as its nonzero mask."""
    with pytest.raises(TypeError, match="packbits: needs integers or booleans, got float64"):
        fnp.packbits(np.array([0.0, 1.5, 2.0]))


@pytest.mark.parametrize("name", ["zeros", "ones", "empty"])
def test_creation_refuses_float_and_negative_shapes(name):
    """A float dimension was truncated (zeros((2.5,)) had 2 elements); a negative one failed
    inside NumPy's broadcast_to with a message naming neither."""
    make = getattr(fnp, name)
    with pytest.raises(TypeError, match="shape must be an int or a sequence of ints"):
        make((2.5,))
    with pytest.raises(
        ValueError, match=r"negative dimensions are not allowed, got shape \(2, -1\)"
    ):
        make((2, -1))
    assert make([2, np.int32(1)]).shape == (2, 1)


def test_arange_with_a_zero_step_raises_zero_division():
    """As NumPy's; it failed in NumPy with 'Maximum allowed size exceeded'."""
    with pytest.raises(ZeroDivisionError, match="arange: step must not be zero"):
        fnp.arange(0, 5, 0)


def test_unique_of_complex_numbers():
    """Sorted by real, then imaginary part, as NumPy's; the sort refused complex keys."""
    x = np.array([2 + 1j, 1 - 1j, 2 + 1j, 1 + 3j, 2 - 5j, 1 - 1j], np.complex64)
    expected = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    got = fnp.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    rows = np.array([[1j, 2], [1j, 1], [1j, 2]], np.complex64)
    np.testing.assert_array_equal(fnp.unique(rows, axis=0), np.unique(rows, axis=0))
    jitted = fg.jit(lambda x: fnp.unique(x, size=5, fill_value=0))(x)
    np.testing.assert_array_equal(jitted, np.pad(expected[0], (0, 1)))


def test_lexsort_by_complex_keys():
    """As NumPy's: a complex key orders by real, then imaginary part."""
    primary = np.array([1, 0, 1, 0, 1])
    secondary = np.array([1 + 1j, 3 - 1j, 1 - 1j, 3 - 2j, 0 + 9j], np.complex64)
    expected = np.lexsort((secondary, primary))
    assert_same(fnp.lexsort((secondary, primary)), expected.astype(np.int32))
    assert_same(fg.jit(fnp.lexsort)((secondary, primary)), expected.astype(np.int32))


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("dtype", [np.complex64, np.int16, np.float32])
def test_variance_in_a_complex_dtype_is_complex(name, dtype):
    """As NumPy's: the real variance held in the complex dtype asked for (it was float32)."""
    x = np.array([1, 3, 4, 8], dtype) + (np.array([0, 2, -1, 1j]) if dtype == np.complex64 else 0)
    x = x.astype(dtype)
    expected = getattr(np, name)(x, dtype=np.complex64, ddof=1)
    for fun in (getattr(fnp, name), fg.jit(getattr(fnp, name), static_argnames=("dtype", "ddof"))):
        got = fun(x, dtype=np.complex64, ddof=1)
        assert got.dtype == np.complex64
        np.testing.assert_allclose(got, expected, rtol=1e-6)
