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
