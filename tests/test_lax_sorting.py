"""sort and top_k against Python's stable `sorted`, with NaNs, signed zeros and ties."""

import math

import numpy as np
import pytest
import strategies as fst
from checks import check_staging
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad as fg
from funcgrad import dtypes, lax
from funcgrad.lax.sorting import sort_p, top_k_p

EVERY_DTYPE = st.one_of(fst.all_float_dtypes, fst.int_dtypes, st.just(dtypes.bool_))


@st.composite
def tie_heavy_arrays(draw, dtype, shape):
    """Small integers (as floats too), ±0.0 and NaNs of either sign: ties are the rule."""
    x = draw(fst.arrays(dtype, shape, min_value=-2, max_value=2))
    if not dtypes.is_float(x.dtype):
        return x
    x = np.round(x.astype(np.float64)).astype(x.dtype)
    where = draw(hnp.arrays(np.bool_, x.shape))
    return np.where(where, np.copysign(np.array(np.nan, x.dtype), x), x)


def sort_key(value):
    """Python ordering that JAX uses for floats: NaN after everything, -0.0 == 0.0."""
    return (1, 0.0) if value != value else (0, value)


def python_values(x: np.ndarray) -> list:
    return (x.astype(np.float64) if dtypes.is_float(x.dtype) else x).tolist()


def lines_along(x: np.ndarray, dimension: int) -> np.ndarray:
    moved = np.moveaxis(x, dimension, -1)
    return moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1])


def from_lines(lines: np.ndarray, like: np.ndarray, dimension: int) -> np.ndarray:
    moved_shape = np.moveaxis(like, dimension, -1).shape
    return np.moveaxis(lines.reshape(moved_shape), -1, dimension)


def assert_same_bits(actual, expected: np.ndarray) -> None:
    """Equal dtype, shape and bit patterns, so -0.0 vs 0.0 and NaN positions count."""
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    unsigned = f"u{expected.dtype.itemsize}"
    np.testing.assert_array_equal(
        np.ascontiguousarray(actual).view(unsigned), np.ascontiguousarray(expected).view(unsigned)
    )


def without_bfloat16_nans(x: np.ndarray) -> np.ndarray:
    # check_staging compares with np.testing.assert_array_equal, which does not recognise
    # ml_dtypes' bfloat16 NaNs as NaN; the staged avals do not depend on the values.
    return np.where(np.isnan(x), 0, x).astype(x.dtype) if x.dtype == dtypes.bfloat16 else x


# ---------------------------------------------------------------------------------------------
# sort


def sort_reference(operands, dimension: int, num_keys: int) -> list[np.ndarray]:
    keys = [lines_along(op, dimension) for op in operands[:num_keys]]
    key_values = [python_values(k) for k in keys]
    outs = [lines_along(op, dimension).copy() for op in operands]
    for row in range(keys[0].shape[0]):
        order = sorted(
            range(keys[0].shape[1]),
            key=lambda i: tuple(sort_key(values[row][i]) for values in key_values),
        )
        for out in outs:
            out[row] = out[row][order]
    return [from_lines(out, op, dimension) for out, op in zip(outs, operands)]


@given(st.integers(1, 3), st.data())
def test_sort_operands_by_keys(num_operands, data):
    shape = data.draw(fst.shapes(1, 3, 0, 5))
    operands = [data.draw(tie_heavy_arrays(EVERY_DTYPE, shape)) for _ in range(num_operands)]
    num_keys = data.draw(st.integers(1, num_operands))
    dimension = data.draw(st.integers(-len(shape), len(shape) - 1))

    def fun(*ops):
        return lax.sort(ops, dimension=dimension, num_keys=num_keys)

    out = fun(*operands)
    assert isinstance(out, tuple) and len(out) == num_operands
    expected = sort_reference(operands, dimension % len(shape), num_keys)
    for actual, wanted in zip(out, expected):
        assert_same_bits(actual, wanted)
    check_staging(fun, *map(without_bfloat16_nans, operands), exact=True)


@given(st.data())
def test_sort_single_operand(data):
    x = data.draw(tie_heavy_arrays(EVERY_DTYPE, fst.shapes(1, 3, 0, 5)))
    dimension = data.draw(st.integers(-x.ndim, x.ndim - 1))
    out = lax.sort(x, dimension)
    assert not isinstance(out, tuple)
    assert_same_bits(out, sort_reference([x], dimension % x.ndim, 1)[0])
    check_staging(lambda x: lax.sort(x, dimension), without_bfloat16_nans(x), exact=True)


def test_sort_key_val():
    keys = np.array([[3.0, np.nan, -0.0, 0.0, -np.nan, 1.0]], np.float32)
    values = np.arange(6, dtype=np.int32)[None]
    sorted_keys, sorted_values = lax.sort_key_val(keys, values)
    np.testing.assert_array_equal(np.asarray(sorted_values), [[2, 3, 5, 0, 1, 4]])
    sorted_keys = np.asarray(sorted_keys)
    assert np.signbit(sorted_keys[0, 0]) and not np.signbit(sorted_keys[0, 1])
    assert sorted_values.dtype == np.int32


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
def test_sort_half_precision_puts_nan_last(dtype):
    x = np.array([np.nan, 1.0, -np.inf, -np.nan, 0.5], dtype)
    out = np.asarray(lax.sort(x)).astype(np.float64)
    np.testing.assert_array_equal(out, [-np.inf, 0.5, 1.0, np.nan, np.nan])


def test_sort_empty_and_weak_types():
    assert lax.sort(np.zeros((0,), np.float32)).shape == (0,)
    assert lax.sort(np.zeros((2, 0), np.int8), dimension=0).shape == (2, 0)
    weak = lax.broadcast_in_dim(2.0, (3,), ())
    strong = np.arange(3, dtype=np.float32)
    assert [x.weak_type for x in lax.sort((weak, strong))] == [True, False]
    assert [x.weak_type for x in lax.sort((strong, weak))] == [False, True]
    check_staging(lambda a, b: lax.sort((a, b), num_keys=2), weak, strong, exact=True)


def test_sort_errors_name_the_shapes():
    with pytest.raises(TypeError, match=r"same shape, got \(2, 3\), \(3, 2\)"):
        fg.make_jaxpr(lambda a, b: lax.sort((a, b)))(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"num_keys=3 must be between 1 and.*2.*\(4,\), \(4,\)"):
        fg.make_jaxpr(lambda a, b: lax.sort((a, b), num_keys=3))(np.zeros(4), np.zeros(4))
    with pytest.raises(
        ValueError, match=r"dimension 2 is out of bounds for operand shape \(2, 3\)"
    ):
        lax.sort(np.zeros((2, 3)), dimension=2)
    with pytest.raises(ValueError, match=r"dimension 1 is out of bounds.*shape \(4,\)"):
        fg.make_jaxpr(lambda x: sort_p.bind(x, dimension=1, is_stable=True, num_keys=1))(
            np.zeros(4)
        )
    with pytest.raises(TypeError, match="at least one operand"):
        lax.sort(())
    # (docs/differences.md: JAX orders complex keys by real, then imaginary part)
    with pytest.raises(TypeError, match="complex keys"):
        lax.sort(np.array([1 + 2j, 1 - 1j], np.complex64))


# ---------------------------------------------------------------------------------------------
# top_k


def descending_key(value):
    """The IEEE total order, reversed: +NaN first, then larger before smaller with 0.0 before
    -0.0, and -NaN last."""
    negative = math.copysign(1.0, value) < 0
    if value != value:
        return (2, 0.0, False) if negative else (0, 0.0, False)
    return (1, -value, negative)


def top_k_reference(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Python's stable sort keeps equal values in index order."""
    rows = python_values(lines_along(x, x.ndim - 1))
    indices = [sorted(range(x.shape[-1]), key=lambda i: descending_key(row[i]))[:k] for row in rows]
    indices = np.array(indices, np.int32).reshape(x.shape[:-1] + (k,))
    return np.take_along_axis(x, indices, axis=-1), indices


@given(st.data())
def test_top_k(data):
    x = data.draw(tie_heavy_arrays(EVERY_DTYPE, fst.shapes(1, 3, 0, 5)))
    k = data.draw(st.integers(0, x.shape[-1]))
    values, indices = lax.top_k(x, k)
    expected_values, expected_indices = top_k_reference(x, k)
    assert_same_bits(values, expected_values)
    assert_same_bits(indices, expected_indices)
    check_staging(lambda x: lax.top_k(x, k), without_bfloat16_nans(x), exact=True)


@given(st.data())
def test_top_k_along_any_axis(data):
    x = data.draw(tie_heavy_arrays(EVERY_DTYPE, fst.shapes(1, 3, 1, 4)))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    k = data.draw(st.integers(0, x.shape[axis]))
    values, indices = lax.top_k(x, k, axis=axis)
    expected_values, expected_indices = top_k_reference(np.moveaxis(x, axis, -1), k)
    assert_same_bits(values, np.moveaxis(expected_values, -1, axis))
    assert_same_bits(indices, np.moveaxis(expected_indices, -1, axis))


def test_top_k_example():
    x = np.array([[1.0, np.nan, 3.0, 3.0, -0.0, 0.0]], np.float32)
    values, indices = lax.top_k(x, 5)
    np.testing.assert_array_equal(np.asarray(indices), [[1, 2, 3, 0, 5]])
    np.testing.assert_array_equal(np.asarray(values), [[np.nan, 3.0, 3.0, 1.0, 0.0]])
    values, indices = lax.top_k(np.array([-128, 127, -128, 0], np.int8), 4)
    np.testing.assert_array_equal(np.asarray(indices), [1, 3, 0, 2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, dtypes.float16, dtypes.bfloat16])
def test_top_k_ranks_signed_zeros_and_nans_by_total_order(dtype):
    """+NaN ranks above +inf and -NaN below -inf; 0.0 ranks above -0.0, eagerly and compiled."""
    x = np.array([-0.0, -np.nan, 1.0, 0.0, np.nan, -np.inf, -0.0, 0.0], dtype)
    x[1] = np.copysign(x[1], -1.0)
    expected = [4, 2, 3, 7, 0, 6, 5, 1]
    for top_k in (lambda x: lax.top_k(x, 8), fg.jit(lambda x: lax.top_k(x, 8))):
        values, indices = top_k(x)
        np.testing.assert_array_equal(np.asarray(indices), expected)
        assert_same_bits(values, x[expected])


def test_top_k_weak_types():
    values, indices = lax.top_k(lax.broadcast_in_dim(2.0, (3,), ()), 2)
    assert values.weak_type and not indices.weak_type and indices.dtype == np.int32


def test_top_k_errors_name_the_shape():
    with pytest.raises(ValueError, match=r"k=4 must be between 0 and the size 3.*\(2, 3\)"):
        fg.make_jaxpr(lambda x: lax.top_k(x, 4))(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"k=-1 .*\(3,\)"):
        fg.make_jaxpr(lambda x: top_k_p.bind(x, k=-1))(np.zeros(3))
    with pytest.raises(TypeError, match=r"rank at least 1, got shape \(\)"):
        fg.make_jaxpr(lambda x: lax.top_k(x, 1))(np.float32(1))
    with pytest.raises(ValueError, match=r"axis 2 is out of range.*\(2, 3\)"):
        lax.top_k(np.zeros((2, 3)), 1, axis=2)
    with pytest.raises(TypeError, match="k must be an integer, got 1.5"):
        lax.top_k(np.zeros(3), 1.5)
