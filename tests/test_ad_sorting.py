"""Derivatives of sort and top_k: tangents move with the permutation that sorts the keys.

Forward mode is checked against central finite differences (on distinct keys, where the
permutation is locally constant), reverse mode against forward mode (the adjoint identity),
second order likewise; ties and multi-key sorts against the permutation of the reference sort.
"""

import math

import numpy as np
import pytest
import strategies as fst
from hypothesis import given
from hypothesis import strategies as st
from test_lax_sorting import sort_reference, tie_heavy_arrays

import funcgrad as fg
from funcgrad import dtypes, lax
from funcgrad.test_util import check_grads


@st.composite
def distinct(draw, shape):
    """float64 values at least 0.25 apart, so that every order is strict."""
    shape = draw(shape)
    size = math.prod(shape)
    values = np.array(draw(st.permutations(range(size))), np.float64)
    return (values / 4 - size / 8).reshape(shape)


def tangent_of(f, args, tangents):
    return fg.jvp(f, tuple(args), tuple(tangents))[1]


# ---------------------------------------------------------------------------------------------
# sort


@given(distinct(fst.shapes(1, 3, 0, 5)), st.data())
def test_sort(x, data):
    dimension = data.draw(st.integers(-x.ndim, x.ndim - 1))
    check_grads(lambda x: lax.sort(x, dimension), (x,), order=2)


@given(st.data())
def test_sort_by_keys_moves_the_other_tangents(data):
    # Keys full of ties are held constant; the tangents of the other operands follow the
    # reference sort's (stable, lexicographic) permutation.
    shape = data.draw(fst.shapes(1, 2, 0, 5))
    num_keys = data.draw(st.integers(1, 2))
    keys = [data.draw(tie_heavy_arrays(fst.float_dtypes, shape)) for _ in range(num_keys)]
    values = data.draw(fst.arrays(dtypes.float64, shape))
    dimension = data.draw(st.integers(0, len(shape) - 1))

    def sort_values(values):
        return lax.sort((*keys, values), dimension, num_keys=num_keys)[-1]

    check_grads(sort_values, (values,), order=2)
    t = data.draw(fst.arrays(dtypes.float64, shape))
    iota = np.indices(shape)[dimension]  # each position along `dimension`
    permutation = sort_reference([*keys, iota], dimension, num_keys)[-1]
    expected = np.take_along_axis(t, permutation, dimension)
    np.testing.assert_array_equal(np.asarray(tangent_of(sort_values, [values], [t])), expected)


@given(distinct(fst.shapes(1, 2, 1, 4)), st.data())
def test_sort_keys_and_values(keys, data):
    values = data.draw(fst.arrays(dtypes.float64, keys.shape))
    dimension = data.draw(st.integers(0, keys.ndim - 1))
    check_grads(lambda k, v: lax.sort((k, v), dimension, num_keys=1), (keys, values), order=2)


def test_sort_ties_tangent_example():
    x = np.array([2.0, 1.0, 2.0, 1.0])
    t = np.array([1.0, 10.0, 100.0, 1000.0])
    np.testing.assert_array_equal(np.asarray(tangent_of(lax.sort, [x], [t])), [10, 1000, 1, 100])


def test_sort_integer_operand_has_a_zero_tangent():
    x = np.array([3.0, 1.0, 2.0])
    labels = np.array([0, 1, 2], np.int32)
    tangents = (np.ones(3), np.zeros(3, dtypes.float0))
    (keys, moved), (t_keys, t_moved) = fg.jvp(
        lambda x, i: lax.sort((x, i), num_keys=1), (x, labels), tangents
    )
    np.testing.assert_array_equal(np.asarray(moved), [1, 2, 0])
    assert t_moved.dtype == dtypes.float0 and t_moved.shape == (3,)
    np.testing.assert_array_equal(np.asarray(t_keys), np.ones(3))


# ---------------------------------------------------------------------------------------------
# top_k


@given(distinct(fst.shapes(1, 3, 0, 5)), st.data())
def test_top_k(x, data):
    k = data.draw(st.integers(0, x.shape[-1]))
    check_grads(lambda x: lax.top_k(x, k)[0], (x,), order=2)
    _, (_, t_indices) = fg.jvp(lambda x: lax.top_k(x, k), (x,), (np.ones_like(x),))
    assert t_indices.dtype == dtypes.float0 and t_indices.shape == x.shape[:-1] + (k,)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_top_k_ties_tangent_example(k):
    # Equal values keep their index order, and each takes its own tangent.
    x = np.array([[1.0, 3.0, 3.0], [0.0, 0.0, -1.0]])
    t = np.array([[1.0, 10.0, 100.0], [1000.0, 2000.0, 3000.0]])
    expected = np.array([[10.0, 100.0, 1.0], [1000.0, 2000.0, 3000.0]])[:, :k]
    tangent = tangent_of(lambda x: lax.top_k(x, k)[0], [x], [t])
    np.testing.assert_array_equal(np.asarray(tangent), expected)
