"""Reductions, cumulative reductions, windowed reductions and select_and_scatter_add.

References are plain Python loops over Python numbers: exact sums (math.fsum) rounded once,
integer results wrapped to the dtype's width by hand, NaN handled explicitly.
"""

import functools
import itertools
import math
import operator

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_staging, jit_backend, tolerance
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad as fg
from funcgrad import dtypes, lax
from funcgrad.errors import ConcretizationTypeError
from funcgrad.lax.elementwise import ge_p, le_p
from funcgrad.lax.reductions import reduce_sum_p
from funcgrad.tools.recipes import COMPILED_BACKENDS

FLOATS_AND_INTS = st.one_of(fst.all_float_dtypes, fst.int_dtypes)
EVERY_DTYPE = st.one_of(fst.all_float_dtypes, fst.int_dtypes, st.just(dtypes.bool_))
SMALL_SHAPES = fst.shapes(max_dims=3, max_side=4)

# ---------------------------------------------------------------------------------------------
# Python reference reductions over a list of Python numbers


def is_float(dtype) -> bool:
    return dtypes.is_float(dtype)


def lowest(dtype):
    if is_float(dtype):
        return -math.inf
    return False if dtypes.is_bool(dtype) else int(np.iinfo(dtype).min)


def highest(dtype):
    if is_float(dtype):
        return math.inf
    return True if dtypes.is_bool(dtype) else int(np.iinfo(dtype).max)


def py_sum(values, dtype):
    return math.fsum(values) if is_float(dtype) else sum(values)


def py_prod(values, dtype):
    return math.prod(values)


def py_max(values, dtype):
    if any(v != v for v in values):
        return math.nan
    return max(values, default=lowest(dtype))


def py_min(values, dtype):
    if any(v != v for v in values):
        return math.nan
    return min(values, default=highest(dtype))


def py_and(values, dtype):
    if dtypes.is_bool(dtype):
        return all(values)
    return functools.reduce(operator.and_, values, -1)


def py_or(values, dtype):
    if dtypes.is_bool(dtype):
        return any(values)
    return functools.reduce(operator.or_, values, 0)


def py_logsumexp(values, dtype):
    top = max(values)
    if top == -math.inf or top != top:
        return top
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def wrap(value: int, dtype) -> int:
    """`value` modulo 2**bits, read as `dtype` (two's complement for signed types)."""
    bits = np.dtype(dtype).itemsize * 8
    value %= 2**bits
    if np.dtype(dtype).kind == "i" and value >= 2 ** (bits - 1):
        value -= 2**bits
    return value


def to_array(results, dtype, shape) -> np.ndarray:
    """Python results as an array of `dtype`: integers wrap, floats round once."""
    dtype = np.dtype(dtype)
    if dtypes.is_int(dtype):
        return np.array([wrap(int(r), dtype) for r in results], dtype).reshape(shape)
    if dtypes.is_bool(dtype):
        return np.array(results, bool).reshape(shape)
    return np.array(results, np.float64).astype(dtype).reshape(shape)


def python_values(x: np.ndarray) -> list:
    return (x.astype(np.float64) if is_float(x.dtype) else x).tolist()


def reduce_reference(x: np.ndarray, axes, row_fn) -> np.ndarray:
    kept = [a for a in range(x.ndim) if a not in axes]
    out_shape = tuple(x.shape[a] for a in kept)
    rows = np.transpose(x, kept + list(axes)).reshape(
        math.prod(out_shape), math.prod(x.shape[a] for a in axes)
    )
    return to_array([row_fn(row, x.dtype) for row in python_values(rows)], x.dtype, out_shape)


def sum_tolerance(x: np.ndarray) -> dict:
    """Rounding of a float sum grows with the sum of magnitudes, not with the result."""
    tol = tolerance(x.dtype)
    magnitude = float(np.sum(np.abs(x.astype(np.float64)))) if x.size else 0.0
    return dict(rtol=tol["rtol"], atol=tol["atol"] * (1 + magnitude))


@st.composite
def with_nans(draw, array_strategy):
    """Arrays from `array_strategy` with NaNs of either sign at drawn places (floats only)."""
    x = draw(array_strategy)
    if not is_float(x.dtype):
        return x
    where = draw(hnp.arrays(np.bool_, x.shape))
    return np.where(where, np.copysign(np.array(np.nan, x.dtype), x), x)


def without_bfloat16_nans(x: np.ndarray) -> np.ndarray:
    # check_staging compares with np.testing.assert_array_equal, which does not recognise
    # ml_dtypes' bfloat16 NaNs as NaN; the staged avals do not depend on the values.
    return np.where(np.isnan(x), 0, x).astype(x.dtype) if x.dtype == dtypes.bfloat16 else x


@st.composite
def operand_and_axes(draw, dtype, shape=SMALL_SHAPES, nans=False, **array_kwargs):
    arrays = fst.arrays(dtype, shape, **array_kwargs)
    x = draw(with_nans(arrays) if nans else arrays)
    return x, draw(fst.axes(x.ndim))


def tie_heavy(x: np.ndarray) -> np.ndarray:
    """Round floats to integers so that ties (and -0.0 next to 0.0) are common."""
    return np.asarray(np.round(x.astype(np.float64)).astype(x.dtype)) if is_float(x.dtype) else x


# ---------------------------------------------------------------------------------------------
# Reductions over axes


@given(operand_and_axes(FLOATS_AND_INTS))
def test_reduce_sum(case):
    x, axes = case
    fun = functools.partial(lax.reduce_sum, axes=axes)
    assert_close(fun(x), reduce_reference(x, axes, py_sum), x.dtype, **sum_tolerance(x))
    check_staging(fun, x)


@given(
    st.one_of(
        operand_and_axes(fst.all_float_dtypes, min_value=-1.5, max_value=1.5),
        operand_and_axes(fst.int_dtypes),
    )
)
def test_reduce_prod(case):
    x, axes = case
    fun = functools.partial(lax.reduce_prod, axes=axes)
    tol = tolerance(x.dtype)
    reduced = math.prod(x.shape[a] for a in axes)
    expected = reduce_reference(x, axes, py_prod)
    assert_close(fun(x), expected, x.dtype, rtol=tol["rtol"] * (1 + reduced), atol=tol["atol"])
    check_staging(fun, x)


@given(st.sampled_from([(lax.reduce_max, py_max), (lax.reduce_min, py_min)]), st.data())
def test_reduce_max_min(op, data):
    reduce, row_fn = op
    x, axes = data.draw(operand_and_axes(EVERY_DTYPE, nans=True))
    fun = functools.partial(reduce, axes=axes)
    assert_close(fun(x), reduce_reference(x, axes, row_fn), x.dtype, rtol=0, atol=0)
    check_staging(fun, without_bfloat16_nans(x), exact=True)


@given(
    st.sampled_from([(lax.reduce_and, py_and), (lax.reduce_or, py_or)]),
    st.data(),
)
def test_reduce_and_or(op, data):
    reduce, row_fn = op
    x, axes = data.draw(operand_and_axes(st.one_of(st.just(dtypes.bool_), fst.int_dtypes)))
    fun = functools.partial(reduce, axes=axes)
    assert_close(fun(x), reduce_reference(x, axes, row_fn), x.dtype)
    check_staging(fun, x, exact=True)


def test_integer_sums_wrap_around():
    total = lax.reduce_sum(np.full(3, 100, np.int8), (0,))
    assert total.dtype == np.int8 and int(total) == 300 - 256
    product = lax.reduce_prod(np.full(2, 200, np.uint8), (0,))
    assert product.dtype == np.uint8 and int(product) == 40000 % 256


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
@pytest.mark.parametrize("dtype, count", [(dtypes.float16, 4096), (dtypes.bfloat16, 512)])
def test_half_precision_sums_accumulate_in_float32(dtype, count, backend):
    # Accumulating in the narrow type would stall at 2048 (float16) or 256 (bfloat16).
    ones = np.ones(count, dtype)
    previous = fg.config.jit_backend
    if backend != "eager":
        fg.config.update("jit_backend", backend)
    run = (lambda f: f) if backend == "eager" else fg.jit
    try:
        total = run(lambda v: lax.reduce_sum(v, (0,)))(ones)
        running = run(lax.cumsum)(ones)
        product = run(lax.cumprod)(np.full(count, 1.001, dtype))
    finally:
        fg.config.update("jit_backend", previous)
    assert total.dtype == dtype and float(total) == count
    assert running.dtype == dtype and float(np.asarray(running)[-1]) == count
    expected = np.cumprod(np.full(count, 1.001, dtype).astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(np.asarray(product), expected)


@pytest.mark.parametrize(
    "reduce, dtype, identity",
    [
        (lax.reduce_sum, dtypes.float32, 0.0),
        (lax.reduce_sum, dtypes.int8, 0),
        (lax.reduce_prod, dtypes.bfloat16, 1.0),
        (lax.reduce_prod, dtypes.uint32, 1),
        (lax.reduce_max, dtypes.float16, -np.inf),
        (lax.reduce_max, dtypes.int8, -128),
        (lax.reduce_max, dtypes.uint8, 0),
        (lax.reduce_max, dtypes.bool_, False),
        (lax.reduce_min, dtypes.float64, np.inf),
        (lax.reduce_min, dtypes.int32, 2**31 - 1),
        (lax.reduce_min, dtypes.bool_, True),
        (lax.reduce_and, dtypes.bool_, True),
        (lax.reduce_and, dtypes.uint8, 255),
        (lax.reduce_and, dtypes.int32, -1),
        (lax.reduce_or, dtypes.bool_, False),
        (lax.reduce_or, dtypes.int8, 0),
    ],
)
def test_empty_reductions_give_the_identity(reduce, dtype, identity):
    out = reduce(np.zeros((0, 3), dtype), (0,))
    assert_close(out, np.full(3, identity, dtype), dtype, rtol=0, atol=0)
    assert reduce(np.zeros((2, 0), dtype), (0,)).shape == (0,)


def test_max_and_min_propagate_nan():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]], np.float32)
    assert_close(lax.reduce_max(x, (1,)), np.array([np.nan, 5.0], np.float32))
    assert_close(lax.reduce_min(x, (1,)), np.array([np.nan, -np.inf], np.float32))


def test_reductions_keep_weak_type():
    assert lax.reduce_sum(2.0, ()).weak_type
    assert not lax.reduce_sum(np.float32(2.0), ()).weak_type
    assert not lax.argmax(lax.broadcast_in_dim(2.0, (3,), ()), 0, np.int32).weak_type


def test_reduction_axis_errors_name_the_shape():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"axis 2 is out of bounds for operand shape \(2, 3\)"):
        lax.reduce_sum(x, (2,))
    with pytest.raises(ValueError, match=r"repeated axis in \(1, -1\).*\(2, 3\)"):
        lax.reduce_max(x, (1, -1))
    with pytest.raises(ValueError, match=r"axes \(1, 0\) must be sorted.*\(2, 3\)"):
        fg.make_jaxpr(lambda x: reduce_sum_p.bind(x, axes=(1, 0)))(x)
    with pytest.raises(TypeError, match="reduce_sum does not accept dtype bool"):
        fg.make_jaxpr(lambda x: lax.reduce_sum(x, (0,)))(np.zeros(2, bool))
    with pytest.raises(TypeError, match="reduce_and does not accept dtype float32"):
        fg.make_jaxpr(lambda x: lax.reduce_and(x, (0,)))(x)


# ---------------------------------------------------------------------------------------------
# argmax and argmin


def first_extreme(values, pick):
    for i, v in enumerate(values):
        if v != v:
            return i
    return values.index(pick(values))


@given(
    st.sampled_from([(lax.argmax, max), (lax.argmin, min)]),
    st.sampled_from([dtypes.int32, dtypes.int64, dtypes.uint8]),
    st.data(),
)
def test_argmax_argmin(op, index_dtype, data):
    search, pick = op
    x = data.draw(
        with_nans(fst.arrays(EVERY_DTYPE, fst.shapes(1, 3, 1, 4), min_value=-3, max_value=3))
    )
    x = tie_heavy(x)
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    fun = functools.partial(search, axis=axis, index_dtype=index_dtype)
    moved = np.moveaxis(x, axis, -1)
    lines = python_values(moved.reshape(-1, moved.shape[-1]))
    expected = np.array([first_extreme(line, pick) for line in lines], index_dtype)
    assert_close(fun(x), expected.reshape(moved.shape[:-1]), index_dtype)
    check_staging(fun, x, exact=True)


def test_argmax_nan_and_ties():
    x = np.array([[0.0, 2.0, np.nan, 2.0, np.nan], [-0.0, 0.0, -1.0, 0.0, -1.0]], np.float32)
    assert_close(lax.argmax(x, 1, np.int32), np.array([2, 0], np.int32))
    assert_close(lax.argmin(x, 1, np.int32), np.array([2, 2], np.int32))
    assert lax.argmax(np.zeros((0, 3)), 1, np.int32).shape == (0,)


def test_argmax_errors_name_the_shape():
    with pytest.raises(ValueError, match=r"axis 1 of operand shape \(2, 0\) is empty"):
        fg.make_jaxpr(lambda x: lax.argmax(x, 1, np.int32))(np.zeros((2, 0), np.float32))
    with pytest.raises(TypeError, match="index_dtype must be an integer dtype, got float32"):
        fg.make_jaxpr(lambda x: lax.argmin(x, 0, np.float32))(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"axis -3 is out of bounds for operand shape \(2, 1\)"):
        lax.argmax(np.zeros((2, 1)), -3, np.int32)


# ---------------------------------------------------------------------------------------------
# Cumulative reductions


def cumulative_reference(x: np.ndarray, axis: int, reverse: bool, row_fn) -> np.ndarray:
    moved = np.moveaxis(x, axis, -1)
    lines = python_values(moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1]))
    results = []
    for line in lines:
        line = line[::-1] if reverse else line
        prefixes = [row_fn(line[: i + 1], x.dtype) for i in range(len(line))]
        results.extend(prefixes[::-1] if reverse else prefixes)
    return np.moveaxis(to_array(results, x.dtype, moved.shape), -1, axis)


# (wrapper, reference row function, dtypes, float value bounds, exact: compare exactly and
# draw NaNs)
CUMULATIVE_CASES = st.sampled_from(
    [
        (lax.cumsum, py_sum, FLOATS_AND_INTS, {}, False),
        (lax.cumprod, py_prod, FLOATS_AND_INTS, dict(min_value=-1.5, max_value=1.5), False),
        (lax.cummax, py_max, FLOATS_AND_INTS, {}, True),
        (lax.cummin, py_min, FLOATS_AND_INTS, {}, True),
        (lax.cumlogsumexp, py_logsumexp, fst.all_float_dtypes, {}, False),
    ]
)


@given(CUMULATIVE_CASES, st.booleans(), st.data())
def test_cumulative(case, reverse, data):
    cumulative, row_fn, dtype_strategy, float_bounds, exact = case
    dtype = data.draw(dtype_strategy)
    arrays = fst.arrays(dtype, fst.shapes(1, 3, 0, 5), **(float_bounds if is_float(dtype) else {}))
    x = data.draw(with_nans(arrays) if exact else arrays)
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    fun = functools.partial(cumulative, axis=axis, reverse=reverse)
    expected = cumulative_reference(x, axis % x.ndim, reverse, row_fn)
    tol = dict(rtol=0, atol=0) if exact else sum_tolerance(x)
    assert_close(fun(x), expected, x.dtype, rtol=tol["rtol"] * 5, atol=tol["atol"])
    check_staging(fun, without_bfloat16_nans(x))


def test_cumlogsumexp_is_stable_at_extremes():
    big = np.array([1000.0, 1000.0, -np.inf], np.float32)
    assert_close(lax.cumlogsumexp(big), np.array([1000, 1000 + np.log(2), 1000 + np.log(2)]))
    small = np.array([-1000.0, -1000.0], np.float32)
    assert_close(lax.cumlogsumexp(small, reverse=True), np.array([-1000 + np.log(2), -1000]))


def test_cumulative_errors_name_the_shape():
    with pytest.raises(ValueError, match=r"cumsum: axis 2 is out of bounds.*\(2, 3\)"):
        lax.cumsum(np.zeros((2, 3)), axis=2)
    with pytest.raises(TypeError, match="cumlogsumexp does not accept dtype int32"):
        fg.make_jaxpr(lax.cumlogsumexp)(np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="cummax does not accept dtype bool"):
        fg.make_jaxpr(lax.cummax)(np.zeros(3, bool))


# ---------------------------------------------------------------------------------------------
# Windowed reductions


def window_count(padded: int, span: int, stride: int) -> int:
    return len(range(0, padded - span + 1, stride))


def reduce_window_reference(x, row_fn, dims, strides, padding, base_dilation, window_dilation):
    """Visit every window and every element of it, mapping back to operand coordinates."""
    counts = [
        window_count((n - 1) * b + 1 + lo + hi if n else lo + hi, (w - 1) * d + 1, s)
        for n, w, s, (lo, hi), b, d in zip(
            x.shape, dims, strides, padding, base_dilation, window_dilation
        )
    ]
    values = python_values(x)
    results = []
    for out_index in itertools.product(*map(range, counts)):
        window = []
        for offset in itertools.product(*map(range, dims)):
            index = []
            for o, k, s, (lo, _), b, d, n in zip(
                out_index, offset, strides, padding, base_dilation, window_dilation, x.shape
            ):
                position = o * s + k * d - lo
                if position < 0 or position % b or position // b >= n:
                    break
                index.append(position // b)
            else:
                window.append(functools.reduce(operator.getitem, index, values))
        results.append(row_fn(window, x.dtype))
    return to_array(results, x.dtype, tuple(counts))


@st.composite
def windowing(draw, ndim: int, max_pad: int = 2, dilations: bool = True):
    def per_dim(elements):
        return tuple(draw(st.lists(elements, min_size=ndim, max_size=ndim)))

    one = st.just(1)
    return dict(
        window_dimensions=per_dim(st.integers(1, 3)),
        window_strides=per_dim(st.integers(1, 3)),
        padding=per_dim(st.tuples(st.integers(0, max_pad), st.integers(0, max_pad))),
        base_dilation=per_dim(st.integers(1, 2) if dilations else one),
        window_dilation=per_dim(st.integers(1, 2) if dilations else one),
    )


WINDOW_REDUCTIONS = st.sampled_from(
    [
        (lax.add, py_sum, FLOATS_AND_INTS, lambda dtype: 0),
        (lax.max, py_max, EVERY_DTYPE, lowest),
        (lax.min, py_min, EVERY_DTYPE, highest),
    ]
)


@settings(max_examples=10)
@given(WINDOW_REDUCTIONS, st.data())
def test_reduce_window(case, data):
    computation, row_fn, dtype, identity = case
    arrays = fst.arrays(dtype, fst.shapes(0, 3, 0, 4))
    x = data.draw(arrays if computation is lax.add else with_nans(arrays))
    window = data.draw(windowing(x.ndim))
    fun = functools.partial(
        lax.reduce_window, init_value=identity(x.dtype), computation=computation, **window
    )
    expected = reduce_window_reference(x, row_fn, *window.values())
    tol = sum_tolerance(x) if computation is lax.add else dict(rtol=0, atol=0)
    assert_close(fun(x), expected, x.dtype, **tol)
    check_staging(fun, without_bfloat16_nans(x))


def test_padtype_to_pads():
    assert lax.padtype_to_pads((5, 4, 4), (3, 3, 2), (2, 1, 1), "SAME") == [(1, 1), (1, 1), (0, 1)]
    assert lax.padtype_to_pads((4,), (2,), (1,), "same_lower") == [(1, 0)]
    assert lax.padtype_to_pads((4, 7), (2, 9), (1, 3), "VALID") == [(0, 0), (0, 0)]
    assert lax.padtype_to_pads((6,), (1,), (4,), "SAME") == [(0, 0)]
    with pytest.raises(ValueError, match="unknown padding 'FULL'"):
        lax.padtype_to_pads((4,), (2,), (1,), "FULL")


@given(st.data())
def test_same_and_valid_padding_output_shapes(data):
    x = data.draw(fst.arrays(fst.float_dtypes, fst.shapes(1, 3, 1, 6)))
    dims = tuple(data.draw(st.integers(1, 3)) for _ in x.shape)
    strides = tuple(data.draw(st.integers(1, 3)) for _ in x.shape)
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in x.shape)
    same = lax.reduce_window(x, -np.inf, lax.max, dims, strides, "SAME", None, dilation)
    assert same.shape == tuple(-(-n // s) for n, s in zip(x.shape, strides))
    valid = lax.reduce_window(x, 0.0, lax.add, dims, strides, "VALID", None, dilation)
    spans = [(w - 1) * d + 1 for w, d in zip(dims, dilation)]
    assert valid.shape == tuple(window_count(n, w, s) for n, w, s in zip(x.shape, spans, strides))
    pads = lax.padtype_to_pads(x.shape, spans, strides, "SAME")
    explicit = lax.reduce_window(x, -np.inf, lax.max, dims, strides, pads, None, dilation)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(explicit))


def test_max_pooling_example():
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    pooled = lax.reduce_window(x, -np.inf, lax.max, (2, 2), (2, 2), "VALID")
    assert_close(pooled, np.array([[5, 7], [13, 15]], np.float32))
    summed = lax.reduce_window(x, 0.0, lax.add, (2, 2), (2, 2), ((1, 0), (0, 0)))
    assert_close(summed, np.array([[1, 5], [26, 34]], np.float32))


def test_reduce_window_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(
        ValueError, match=r"init_value 1.0 is not the identity 0.0 of add.*\(2, 3\)"
    ):
        lax.reduce_window(x, 1.0, lax.add, (1, 1), (1, 1), "VALID")
    with pytest.raises(ValueError, match=r"init_value 0.0 is not the identity -inf of max"):
        lax.reduce_window(x, 0.0, lax.max, (1, 1), (1, 1), "VALID")
    with pytest.raises(TypeError, match="computation 'mul' is not supported"):
        lax.reduce_window(x, 1.0, lax.mul, (1, 1), (1, 1), "VALID")
    with pytest.raises(TypeError, match=r"window_dimensions \(2,\) must have one entry.*\(2, 3\)"):
        fg.make_jaxpr(lambda x: lax.reduce_window(x, 0.0, lax.add, (2,), (1,), ((0, 0),)))(x)
    with pytest.raises(ValueError, match=r"window_strides must be positive, got \(1, 0\)"):
        fg.make_jaxpr(lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1), (1, 0), "VALID"))(x)
    with pytest.raises(ValueError, match=r"padding must be non-negative.*\(2, 3\)"):
        fg.make_jaxpr(
            lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1), (1, 1), ((0, 0), (-1, 0)))
        )(x)
    with pytest.raises(TypeError, match="reduce_window_sum does not accept dtype bool"):
        fg.make_jaxpr(lambda x: lax.reduce_window(x, 0, lax.add, (1,), (1,), "VALID"))(
            np.zeros(2, bool)
        )
    with pytest.raises(ConcretizationTypeError, match="concrete init_value"):
        fg.make_jaxpr(lambda x, i: lax.reduce_window(x, i, lax.add, (1, 1), (1, 1), "VALID"))(
            x, np.float32(0)
        )


# ---------------------------------------------------------------------------------------------
# select_and_scatter_add: the gradient of max (and min) pooling


def select_and_scatter_reference(source, operand, select, dims, strides, padding):
    """For each window walk its in-bounds elements, keep the selection while `select` holds."""
    out = np.zeros(operand.shape, source.dtype)
    counts = [
        window_count(n + lo + hi, w, s)
        for n, w, s, (lo, hi) in zip(operand.shape, dims, strides, padding)
    ]
    for out_index in itertools.product(*map(range, counts)):
        chosen = None
        for offset in itertools.product(*map(range, dims)):
            index = tuple(
                o * s + k - lo for o, k, s, (lo, _) in zip(out_index, offset, strides, padding)
            )
            if any(not 0 <= i < n for i, n in zip(index, operand.shape)):
                continue
            if chosen is None or not select(operand[chosen], operand[index]):
                chosen = index
        if chosen is not None:
            out[chosen] += source[out_index]
    return out


@settings(max_examples=10)
@given(
    st.sampled_from([(ge_p, operator.ge), (le_p, operator.le)]),
    st.sampled_from([dtypes.float32, dtypes.float64, dtypes.int32]),
    st.data(),
)
def test_select_and_scatter_add(select, dtype, data):
    select_prim, select_fn = select
    operand = tie_heavy(
        data.draw(fst.arrays(dtype, fst.shapes(0, 3, 0, 4), min_value=-3, max_value=3))
    )
    window = data.draw(windowing(operand.ndim, dilations=False))
    del window["base_dilation"], window["window_dilation"]
    source_shape = lax.reduce_window(operand, 0, lax.add, **window).shape
    source = data.draw(fst.arrays(dtype, source_shape, min_value=-5, max_value=5))
    fun = functools.partial(lax.select_and_scatter_add, select_prim=select_prim, **window)
    expected = select_and_scatter_reference(source, operand, select_fn, *window.values())
    assert_close(fun(source, operand), expected, dtype)
    check_staging(fun, source, operand)


@settings(max_examples=10)
@given(st.sampled_from([(ge_p, lax.max, -np.inf), (le_p, lax.min, np.inf)]), st.data())
def test_select_and_scatter_add_is_the_pooling_gradient(select, data):
    # With distinct values every window's selected element holds the pooled value, so
    # sum(result * x) == sum(source * pool(x)); and each source value lands exactly once.
    select_prim, computation, identity = select
    shape = data.draw(fst.shapes(1, 3, 1, 4))
    x = np.array(data.draw(st.permutations(range(math.prod(shape)))), np.float64).reshape(shape)
    window = data.draw(windowing(x.ndim, max_pad=0, dilations=False))
    window["padding"] = tuple(
        (data.draw(st.integers(0, w - 1)), data.draw(st.integers(0, w - 1)))
        for w in window["window_dimensions"]
    )
    del window["base_dilation"], window["window_dilation"]
    pooled = np.asarray(lax.reduce_window(x, identity, computation, **window))
    source = data.draw(fst.arrays(dtypes.float64, pooled.shape, min_value=-4, max_value=4))
    source = np.round(source)
    grad = np.asarray(lax.select_and_scatter_add(source, x, select_prim, **window))
    assert np.sum(grad * x) == np.sum(source * pooled)
    assert np.sum(grad) == np.sum(source)


def test_max_pooling_gradient_example():
    x = np.array([[1, 5, 2, 0], [3, 4, 8, 8], [0, 0, 1, 1]], np.float32)
    source = np.array([[10, 20], [30, 40]], np.float32)
    # 2x2 windows, stride 2, one row of padding below: ties (8, 8) go to the first.
    grad = lax.select_and_scatter_add(source, x, ge_p, (2, 2), (2, 2), ((0, 1), (0, 0)))
    expected = np.array([[0, 10, 0, 0], [0, 0, 20, 0], [30, 0, 40, 0]], np.float32)
    assert_close(grad, expected)


def test_select_and_scatter_add_errors_name_the_shapes():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(TypeError, match=r"source shape \(3, 3\).*\(2, 2\).*\(4, 4\)"):
        fg.make_jaxpr(lambda s, x: lax.select_and_scatter_add(s, x, ge_p, (2, 2), (2, 2), "VALID"))(
            np.zeros((3, 3), np.float32), x
        )
    with pytest.raises(TypeError, match="select_prim must be ge_p or le_p, got gt"):
        fg.make_jaxpr(
            lambda s, x: lax.select_and_scatter_add(
                s, x, lax.elementwise.gt_p, (2, 2), (2, 2), "VALID"
            )
        )(np.zeros((2, 2), np.float32), x)
    with pytest.raises(TypeError, match="same dtypes, got float64, float32"):
        fg.make_jaxpr(lambda s, x: lax.select_and_scatter_add(s, x, ge_p, (2, 2), (2, 2), "VALID"))(
            np.zeros((2, 2)), x
        )


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
@pytest.mark.parametrize("dtype", list(dtypes.float_dtypes), ids=str)
def test_max_and_min_reductions_order_minus_zero_below_plus_zero(dtype, backend):
    """A max is -0 only where every zero reduced is -0, a min +0 only where every one is +0,
    whatever the order, eagerly as compiled (NumPy's reductions kept the zero they met
    first, differently for float16)."""
    x = np.array([[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0], [0.0, 0.0], [-0.0, -1.0]], dtype)
    expected = {
        lax.reduce_max: ([0.0, 0.0, -0.0, 0.0, -0.0], [False, False, True, False, True]),
        lax.reduce_min: ([0.0, 0.0, -0.0, 0.0, -1.0], [True, True, True, False, True]),
    }
    for op, (values, signs) in expected.items():
        if backend == "eager":
            got = op(x, (1,))
        else:
            with jit_backend(backend):
                got = fg.jit(lambda a, op=op: op(a, (1,)))(x)
        got = np.asarray(got).astype(np.float32)
        np.testing.assert_array_equal(got, values, err_msg=op.__name__)
        np.testing.assert_array_equal(np.signbit(got), signs, err_msg=op.__name__)
