"""lax.reduce_precision (a primitive) against ml_dtypes' rounding, the generic lax.reduce, and
the lax functions composed from other families."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import lax
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close, check_batching, check_staging


def assert_same(actual, expected) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


# ---------------------------------------------------------------------------------------------
# reduce_precision


def _normal_in(target, values: np.ndarray) -> np.ndarray:
    """The values whose magnitude is not below target's smallest normal number (where
    reduce_precision flushes to zero, and casting would keep a subnormal)."""
    return values[~(np.abs(values) < ml_dtypes.finfo(target).tiny)]


@given(fst.arrays(np.float32, (64,), min_value=-1e6, max_value=1e6))
def test_reduce_precision_rounds_like_a_cast(x):
    x = np.concatenate([x, np.float32([65504, 65519, 65520, 1e10, -np.inf, np.inf])])
    for target, bits in [(np.float16, (5, 10)), (ml_dtypes.bfloat16, (8, 7))]:
        kept = _normal_in(target, x)
        with np.errstate(over="ignore"):
            expected = kept.astype(target).astype(np.float32)
        assert_same(lax.reduce_precision(kept, *bits), expected)
    check_staging(lambda x: lax.reduce_precision(x, 5, 10), x)


def test_reduce_precision_edges():
    x = np.array([np.nan, 1e-10, -1e-10, 1.0 + 2**-11, 1.0 + 3 * 2**-11], np.float32)
    out = np.asarray(lax.reduce_precision(x, 5, 10))
    assert np.isnan(out[0])
    assert_same(out[1:3], np.float32([0.0, -0.0]))
    np.testing.assert_array_equal(np.signbit(out[1:3]), [False, True])
    # Halfway cases round to even.
    assert_same(out[3:], np.float32([1.0, 1.0 + 2 * 2**-10]))
    assert_same(lax.reduce_precision(np.float64(np.pi), 11, 52), np.float64(np.pi))
    with pytest.raises(TypeError, match="reduce_precision does not accept dtype int32"):
        lax.reduce_precision(np.int32(1), 5, 10)
    with pytest.raises(ValueError, match="exponent_bits=0"):
        lax.reduce_precision(1.0, 0, 10)


def test_reduce_precision_derivatives_and_batching():
    x = np.array([0.3, 1.7, -2.2])
    check_grads(lambda x: lax.reduce_precision(x, 11, 52), (x,), 2)
    assert_same(
        fg.grad(lambda x: lax.reduce_precision(x, 5, 10).sum())(np.float32([1.1, 2.0])),
        np.float32([1, 1]),
    )
    check_batching(
        lambda x: lax.reduce_precision(x, 5, 3),
        [np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)],
        (1,),
    )


# ---------------------------------------------------------------------------------------------
# reduce


def _identity(reference, dtype: np.dtype) -> np.ndarray:
    if reference is np.sum:
        return np.array(0, dtype)
    lowest = reference is np.max
    if dtype.kind == "f":
        return np.array(-np.inf if lowest else np.inf, dtype)
    info = np.iinfo(dtype)
    return np.array(info.min if lowest else info.max, dtype)


@given(
    fst.arrays(fst.numeric_dtypes, fst.shapes(1, 3, 0, 4), min_value=-50, max_value=50), st.data()
)
def test_reduce_with_monoids_matches_numpy(x, data):
    dims = data.draw(fst.axes(x.ndim))
    for computation, reference in [
        (lax.add, np.sum),
        (lax.max, np.max),
        (lambda a, b: lax.min(a, b), np.min),
    ]:
        init = _identity(reference, x.dtype)
        expected = reference(
            x, axis=dims, initial=init, **({"dtype": x.dtype} if reference is np.sum else {})
        )
        assert_same(lax.reduce(x, init, computation, dims), np.asarray(expected, x.dtype))


def test_reduce_applies_a_non_identity_init_once_and_stays_one_primitive():
    x = np.arange(6.0).reshape(2, 3)
    assert_close(lax.reduce(x, 10.0, lax.add, (1,)), x.sum(1) + 10)
    assert_same(lax.reduce(x > 2, np.bool_(True), lax.bitwise_and, (0,)), np.all(x > 2, axis=0))
    names = [
        e.primitive.name
        for e in fg.make_jaxpr(lambda x: lax.reduce(x, 1.0, lax.mul, (0,)))(x).jaxpr.eqns
    ]
    assert names == ["reduce_prod"]
    dict_sum = lax.reduce({"a": x}, {"a": 0.0}, lambda p, q: {"a": p["a"] + q["a"]}, (0,))
    assert_same(dict_sum["a"], x.sum(0))
    # Over no dimensions nothing is combined, not even the init value.
    assert_same(lax.reduce(x, 10.0, lax.add, ()), x)
    with pytest.raises(TypeError, match="init_values must be scalars"):
        lax.reduce(x, np.zeros(2), lax.add, (0,))


def _argmax_pairs(p, q):
    """(value, index) pairs: the larger value, the lower index among equal ones."""
    (p_value, p_index), (q_value, q_index) = p, q
    first = lax.bitwise_or(
        lax.gt(p_value, q_value),
        lax.bitwise_and(lax.eq(p_value, q_value), lax.lt(p_index, q_index)),
    )
    return lax.select(first, p_value, q_value), lax.select(first, p_index, q_index)


@given(
    fst.arrays(np.float32, fst.shapes(1, 3, 0, 6), min_value=-3, max_value=3).map(np.round),
    st.data(),
)
def test_reduce_of_several_operands_with_any_computation(x, data):
    """A pytree of operands and a computation that is no single monoid: argmax as a reduction
    of (value, index) pairs, against NumPy's first-maximum argmax, eagerly and compiled."""
    axis = data.draw(st.integers(0, x.ndim - 1))
    index = np.broadcast_to(
        np.arange(x.shape[axis], dtype=np.int32).reshape([-1] + [1] * (x.ndim - 1 - axis)),
        x.shape,
    ).copy()

    def argmax(x, index):
        return lax.reduce((x, index), (np.float32(-np.inf), np.int32(0)), _argmax_pairs, (axis,))

    values, indices = argmax(x, index)
    if x.shape[axis]:
        assert_same(values, x.max(axis))
        assert_same(indices, np.argmax(x, axis).astype(np.int32))
    else:
        assert_same(values, np.full(values.shape, -np.inf, np.float32))
    check_staging(argmax, x, index, exact=True)


def test_reduce_with_any_computation_differentiates_and_batches():
    x = np.random.default_rng(1).normal(size=(3, 5))

    def log_sum_exp_and_sum(x):
        def combine(p, q):
            return lax.log(lax.add(lax.exp(p[0]), lax.exp(q[0]))), lax.add(p[1], q[1])

        return lax.reduce((x, x * x), (-np.inf, 0.0), combine, (1,))

    log_sum_exp, total = log_sum_exp_and_sum(x)
    assert_close(log_sum_exp, np.log(np.exp(x).sum(1)))
    assert_close(total, (x * x).sum(1))
    check_grads(lambda x: log_sum_exp_and_sum(x)[0], (x,), 1)
    check_grads(lambda x: log_sum_exp_and_sum(x)[1], (x,), 1)
    check_batching(log_sum_exp_and_sum, [np.stack([x, -x])], [0])


def test_reduce_errors_name_the_cause():
    ones = np.ones(3)
    with pytest.raises(TypeError, match=r"operands must have the same shape, got \(3,\), \(4,\)"):
        lax.reduce((ones, np.ones(4)), (0.0, 0.0), lambda p, q: p, (0,))
    with pytest.raises(TypeError, match=r"one value of each operand's dtype \(float64, float64\)"):
        lax.reduce((ones, ones), (0.0, 0.0), lambda p, q: p[0], (0,))
    with pytest.raises(TypeError, match=r"dtype \(float64\), elementwise; got \(int32\)"):
        lax.reduce(ones, 0.0, lambda p, q: lax.convert_element_type(p * q, np.int32), (0,))


# ---------------------------------------------------------------------------------------------
# Composed functions


@given(fst.arrays(fst.int_dtypes, fst.shapes(1, 3, 0, 5)), st.data())
def test_reduce_xor_and_clz_match_numpy(x, data):
    dims = data.draw(fst.axes(x.ndim))
    expected = np.bitwise_xor.reduce(x, axis=dims) if dims else x
    assert_same(lax.reduce_xor(x, dims), np.asarray(expected, x.dtype))
    width = x.dtype.itemsize * 8
    unsigned = x.view(np.dtype(f"uint{width}"))
    expected_clz = np.array([width - int(v).bit_length() for v in unsigned.ravel()], x.dtype)
    assert_same(lax.clz(x), expected_clz.reshape(x.shape))


def test_approx_top_k_is_exact():
    x = np.random.default_rng(0).normal(size=(3, 5))
    values, indices = lax.approx_max_k(x, 2, reduction_dimension=0)
    assert_close(values, -np.sort(-x, axis=0)[:2])
    assert_same(indices, np.argsort(-x, axis=0)[:2].astype(np.int32))
    values, _ = lax.approx_min_k(np.array([3, -128, 7], np.int8), 2)
    assert_same(values, np.int8([-128, 3]))


def test_approx_top_k_ranks_signed_zeros_as_equal():
    """Unlike top_k's total order, the approximate searches tie -0.0 with 0.0 (lower index
    first) and return each zero with its own sign, eagerly and compiled."""
    x = np.array([-0.0, 1.0, 0.0, -0.0], np.float32)
    for jit in (lambda f: f, fg.jit):
        values, indices = jit(lambda x: lax.approx_max_k(x, 4))(x)
        assert_same(indices, np.int32([1, 0, 2, 3]))
        assert_same(np.signbit(np.asarray(values)), np.array([False, True, False, True]))
        values, indices = jit(lambda x: lax.approx_min_k(x, 4))(x)
        assert_same(indices, np.int32([0, 2, 3, 1]))
        assert_same(np.signbit(np.asarray(values)), np.array([True, False, True, False]))


def test_shape_functions():
    x = np.arange(12).reshape(3, 4)
    pieces = lax.split(x, (1, 3), axis=1)
    assert [p.shape for p in pieces] == [(3, 1), (3, 3)]
    assert_same(lax.tile(x, (2, 1)), np.tile(x, (2, 1)))
    assert_same(lax.stack([x, x], 1), np.stack([x, x], 1))
    assert [u.shape for u in lax.unstack(x, 1)] == [(3,)] * 4
    assert lax.broadcast_shapes((2, 1), (3,)) == (2, 3)
    assert lax.empty((2,), np.float16).dtype == np.float16
    assert_same(lax.optimization_barrier(x), x)
    indices = np.array([[1]])
    numbers = lax.ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    assert_same(
        lax.scatter_sub(x, indices, np.ones((1, 4), x.dtype), numbers),
        x - np.array([[0], [1], [0]]),
    )
    with pytest.raises(ValueError, match=r"add up to the size 4"):
        lax.split(x, (1, 2), axis=1)
    with pytest.raises(ValueError, match=r"one repetition per axis of shape \(3, 4\)"):
        lax.tile(x, (2,))
