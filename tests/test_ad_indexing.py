"""Derivatives of the indexing primitives: jvp against finite differences, vjp against jvp (which
checks each transpose rule through <u, J v> == <J^T u, v>), second order, and hand-computed
expectations for clamping, out-of-bounds windows, colliding indices and ties."""

import functools

import numpy as np
import pytest
import strategies as fst
from hypothesis import assume, given
from hypothesis import strategies as st
from test_lax_indexing import (
    dynamic_slice_case,
    gather_case,
    modes_st,
    scatter_case,
    scatter_targets,
)

import funcgrad as fg
from funcgrad import lax
from funcgrad.core import ShapedArray
from funcgrad.interpreters.ad import UndefinedPrimal
from funcgrad.lax import GatherDimensionNumbers, GatherScatterMode, ScatterDimensionNumbers
from funcgrad.lax.indexing import scatter_p
from funcgrad.test_util import check_grads

# x[i] as a gather and x.at[i] as a scatter, for 1-d x and indices of shape (n, 1).
TAKE = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
AT = ScatterDimensionNumbers(
    update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
)


def as_float64(data, x):
    """Fresh float64 values for an array drawn in another dtype (integers can be too large for
    finite differences)."""
    return data.draw(fst.arrays(np.float64, x.shape))


def at_indices(scatter, indices, dn, **kwargs):
    """The scatter as a function of (operand, updates) only."""
    return lambda x, u: scatter(x, indices, u, dn, **kwargs)


def pullback(f, *args, cotangent):
    return fg.vjp(f, *args)[1](cotangent)


def tangent_of(f, args, tangents):
    return np.asarray(fg.jvp(f, tuple(args), tuple(tangents))[1])


def unique_targets(operand, indices, updates, dn, mode) -> bool:
    targets = [t for _, t in scatter_targets(operand, indices, updates, dn, mode) if t is not None]
    return len(set(targets)) == len(targets)


# ---------------------------------------------------------------------------------------------
# dynamic_slice and dynamic_update_slice


@given(st.data(), dynamic_slice_case(), st.booleans())
def test_dynamic_slice_derivatives(data, case, traced_indices):
    x, sizes, starts = case
    x = as_float64(data, x)
    if traced_indices:
        starts = [np.int32(s) for s in starts]
    check_grads(lambda a: lax.dynamic_slice(a, starts, sizes), (x,), order=2)


@given(st.data(), dynamic_slice_case())
def test_dynamic_update_slice_derivatives(data, case):
    x, sizes, starts = case
    x = as_float64(data, x)
    update = data.draw(fst.arrays(np.float64, sizes))
    check_grads(lambda a, u: lax.dynamic_update_slice(a, u, starts), (x, update), order=2)


def test_dynamic_slice_cotangent_lands_on_the_clamped_window():
    x = np.zeros(5)

    def f(a):
        return lax.dynamic_slice(a, [np.int32(4)], [2])  # clamped to start 3

    def g(a, u):
        return lax.dynamic_update_slice(a, u, [np.int32(-9)])  # wrapped to -4, clamped to 0

    (got,) = pullback(f, x, cotangent=np.array([1.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(got), [0.0, 0, 0, 1, 2])
    got_x, got_u = pullback(g, np.zeros(5), np.zeros(2), cotangent=np.arange(5.0))
    np.testing.assert_array_equal(np.asarray(got_x), [0.0, 0, 2, 3, 4])
    np.testing.assert_array_equal(np.asarray(got_u), [0.0, 1])


# ---------------------------------------------------------------------------------------------
# gather


@given(st.data(), gather_case(), modes_st)
def test_gather_derivatives(data, case, mode):
    operand, indices, dn, sizes = case
    operand = as_float64(data, operand)
    # A finite fill value: finite differences of the default NaN fill are NaN.
    fill = 1.5 if GatherScatterMode.from_any(mode) == GatherScatterMode.FILL_OR_DROP else None

    def f(x):
        return lax.gather(x, indices, dn, sizes, mode=mode, fill_value=fill)

    check_grads(f, (operand,), order=2)


def test_gather_cotangent_accumulates_repeats_and_clamped_windows():
    indices = np.array([[1], [1], [3], [7], [-1]])
    ones = np.ones(5)
    for mode, expected in [
        ("clip", [1.0, 2, 0, 2]),  # 7 clamps to 3, -1 to 0
        ("promise_in_bounds", [1.0, 2, 0, 2]),  # a broken promise clamps as the gather did
        ("fill", [0.0, 2, 0, 1]),  # filled windows read nothing
    ]:
        f = functools.partial(lax.gather, start_indices=indices, dimension_numbers=TAKE, mode=mode)
        (got,) = pullback(functools.partial(f, slice_sizes=(1,)), np.arange(4.0), cotangent=ones)
        np.testing.assert_array_equal(np.asarray(got), expected, err_msg=mode)


def test_gather_fill_has_a_zero_tangent_not_nan():
    def f(x):
        return lax.gather(x, np.array([[0], [5]]), TAKE, (1,), mode="fill")

    out, tangent = fg.jvp(f, (np.array([1.0, 2.0]),), (np.array([3.0, 4.0]),))
    np.testing.assert_array_equal(np.asarray(out), [1.0, np.nan])
    np.testing.assert_array_equal(np.asarray(tangent), [3.0, 0.0])


# ---------------------------------------------------------------------------------------------
# scatter_add and scatter


@given(scatter_case(dtypes=st.just(np.float64)), modes_st)
def test_scatter_add_derivatives(case, mode):
    operand, indices, updates, dn = case
    check_grads(at_indices(lax.scatter_add, indices, dn, mode=mode), (operand, updates), order=2)


def test_scatter_add_updates_cotangent_reads_back_where_they_landed():
    f = at_indices(lax.scatter_add, np.array([[2], [0], [2], [4]]), AT)
    got_x, got_u = pullback(f, np.zeros(3), np.zeros(4), cotangent=np.array([1.0, 2, 3]))
    np.testing.assert_array_equal(np.asarray(got_x), [1.0, 2, 3])
    np.testing.assert_array_equal(np.asarray(got_u), [3.0, 1, 3, 0])  # index 4 is dropped


@given(scatter_case(dtypes=st.just(np.float64)), modes_st)
def test_scatter_derivatives_with_unique_indices(case, mode):
    operand, indices, updates, dn = case
    assume(unique_targets(operand, indices, updates, dn, mode))
    f = at_indices(lax.scatter, indices, dn, mode=mode, unique_indices=True)
    check_grads(f, (operand, updates), order=2)


@given(scatter_case(dtypes=st.just(np.float64)), modes_st)
def test_scatter_derivatives_with_colliding_indices(case, mode):
    operand, indices, updates, dn = case
    f = at_indices(lax.scatter, indices, dn, mode=mode)
    np.testing.assert_array_equal(
        np.asarray(fg.jvp(f, (operand, updates), (operand, updates))[0]),
        np.asarray(f(operand, updates)),
    )
    check_grads(f, (operand, updates), order=2)


def test_scatter_tangent_follows_the_winning_update():
    indices = np.array([[1], [1], [2]])
    f = at_indices(lax.scatter, indices, AT)
    x, u = np.zeros(4), np.array([5.0, 6.0, 7.0])
    np.testing.assert_array_equal(np.asarray(f(x, u)), [0.0, 6, 7, 0])  # the last write wins
    got_x, got_u = pullback(f, x, u, cotangent=np.array([1.0, 2, 3, 4]))
    np.testing.assert_array_equal(np.asarray(got_x), [1.0, 0, 0, 4])
    np.testing.assert_array_equal(np.asarray(got_u), [0.0, 2, 3])
    tangent = tangent_of(f, (x, u), (np.ones(4), np.array([10.0, 20.0, 30.0])))
    np.testing.assert_array_equal(tangent, [1.0, 20, 30, 1])


def test_scatter_transpose_needs_unique_indices():
    aval = ShapedArray((3,), np.dtype(np.float64))
    params = dict(
        dimension_numbers=AT,
        indices_are_sorted=False,
        unique_indices=False,
        mode=GatherScatterMode.FILL_OR_DROP,
    )
    with pytest.raises(NotImplementedError, match="scatter: the transpose needs unique_indices"):
        indices = np.array([[0], [0], [1]])
        scatter_p.transpose(
            np.ones(3), UndefinedPrimal(aval), indices, UndefinedPrimal(aval), **params
        )


# ---------------------------------------------------------------------------------------------
# scatter_mul


@given(scatter_case(dtypes=st.just(np.float64)), modes_st)
def test_scatter_mul_derivatives(case, mode):
    operand, indices, updates, dn = case
    # Linear in the operand whatever the indices.
    unique = unique_targets(operand, indices, updates, dn, mode)
    f = at_indices(lax.scatter_mul, indices, dn, mode=mode, unique_indices=unique)
    check_grads(functools.partial(f, u=updates), (operand,), order=2)
    if unique:  # then also in the updates
        check_grads(f, (operand, updates), order=2)


def test_scatter_mul_updates_derivative_needs_unique_indices():
    indices = np.array([[0], [0]])
    x, u = np.array([2.0, 3.0]), np.array([4.0, 5.0])
    f = at_indices(lax.scatter_mul, indices, AT)
    with pytest.raises(NotImplementedError, match="scatter_mul: .*unique_indices=True"):
        fg.jvp(f, (x, u), (np.zeros(2), np.ones(2)))
    # The operand's derivative is the product of every update landing on it.
    tangent = tangent_of(functools.partial(f, u=u), (x,), (np.ones(2),))
    np.testing.assert_array_equal(tangent, [20.0, 1.0])


def test_scatter_mul_updates_tangent_is_finite_beside_an_infinite_operand():
    f = at_indices(lax.scatter_mul, np.array([[0]]), AT, unique_indices=True)
    x, u = np.array([2.0, np.inf]), np.array([3.0])
    tangent = tangent_of(functools.partial(f, x), (u,), (np.ones(1),))
    np.testing.assert_array_equal(tangent, [2.0, 0.0])


# ---------------------------------------------------------------------------------------------
# scatter_min and scatter_max


@given(st.data(), scatter_case(dtypes=st.just(np.float64)), modes_st)
def test_scatter_min_max_derivatives_with_distinct_values(data, case, mode):
    operand, indices, updates, dn = case
    values = data.draw(st.permutations(range(operand.size + updates.size)))
    values = np.array(values, np.float64) - operand.size  # distinct: no ties to straddle
    operand = values[: operand.size].reshape(operand.shape)
    updates = values[operand.size :].reshape(updates.shape)
    for scatter in (lax.scatter_min, lax.scatter_max):
        check_grads(at_indices(scatter, indices, dn, mode=mode), (operand, updates), order=2)


def test_scatter_max_and_min_split_the_tangent_among_ties():
    indices = np.array([[0], [0], [1], [2]])
    x = np.array([1.0, 2.0, 5.0])
    u = np.array([1.0, 1.0, 0.0, 5.0])
    t_x, t_u = np.array([3.0, 4.0, 6.0]), np.array([6.0, 9.0, 100.0, 2.0])
    for scatter in (lax.scatter_max, lax.scatter_min):
        f = at_indices(scatter, indices, AT)
        tangent = tangent_of(f, (x, u), (t_x, t_u))
        # Position 0: a three-way tie; position 2: a two-way tie.
        expected_1 = 4.0 if scatter is lax.scatter_max else 100.0
        np.testing.assert_allclose(tangent, [(3 + 6 + 9) / 3, expected_1, (6 + 2) / 2])
        got_x, got_u = pullback(f, x, u, cotangent=np.array([3.0, 1.0, 2.0]))
        max_wins = scatter is lax.scatter_max
        np.testing.assert_allclose(np.asarray(got_x), [1.0, 1.0 if max_wins else 0.0, 1.0])
        np.testing.assert_allclose(np.asarray(got_u), [1.0, 1.0, 0.0 if max_wins else 1.0, 1.0])


def test_scatter_max_with_a_nan_update_passes_the_operand_tangent():
    f = at_indices(lax.scatter_max, np.array([[0]]), AT)
    tangent = tangent_of(f, (np.array([1.0, 2.0]), np.array([np.nan])), (np.ones(2), np.ones(1)))
    np.testing.assert_array_equal(tangent, [1.0, 1.0])
