"""vmap of reductions, cumulative and windowed reductions against a Python loop of the lanes.

Each property draws the lanes' shapes and params with the strategies of test_lax_reductions,
maps a drawn axis of each operand (negative half the time, or none for some operands) and
stacks the results at a drawn output axis.
"""

import functools

import numpy as np
import strategies as fst
from checks import check_batching, tolerance
from hypothesis import given
from hypothesis import strategies as st
from test_lax_reductions import (
    CUMULATIVE_CASES,
    EVERY_DTYPE,
    FLOATS_AND_INTS,
    WINDOW_REDUCTIONS,
    is_float,
    sum_tolerance,
    tie_heavy,
    windowing,
    with_nans,
)

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.lax.elementwise import ge_p, le_p

LANE_SHAPES = fst.shapes(max_dims=3, max_side=4)
BATCH_SIZES = st.integers(1, 3)

# ---------------------------------------------------------------------------------------------
# Drawing batched operands


@st.composite
def lane_stack(draw, dtype, lane_shape: tuple[int, ...], size: int, nans=False, **array_kwargs):
    """An operand of `dtype` whose lanes have `lane_shape`, `size` of them along a drawn
    axis, and the in_axis naming that axis (counted from the end half the time)."""
    position = draw(st.integers(0, len(lane_shape)))
    shape = tuple(lane_shape[:position]) + (size,) + tuple(lane_shape[position:])
    arrays = fst.arrays(dtype, shape, **array_kwargs)
    x = draw(with_nans(arrays) if nans else arrays)
    return x, draw(st.sampled_from([position, position - len(shape)]))


@st.composite
def maybe_lane_stack(draw, dtype, lane_shape: tuple[int, ...], size: int, **array_kwargs):
    """Like `lane_stack`, or an unbatched operand of `lane_shape` with in_axis None."""
    if draw(st.booleans()):
        return draw(lane_stack(dtype, lane_shape, size, **array_kwargs))
    return draw(fst.arrays(dtype, tuple(lane_shape), **array_kwargs)), None


def out_axis(ndim: int):
    """An out_axes entry for lane results of rank `ndim`, negative ones included."""
    return st.integers(-(ndim + 1), ndim)


def count_primitives(fun, *args) -> dict[str, int]:
    counts: dict[str, int] = {}
    for eqn in fg.make_jaxpr(fun)(*args).jaxpr.eqns:
        counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------
# Reductions over axes, argmax and argmin


REDUCTIONS = st.sampled_from(
    [
        (lax.reduce_sum, FLOATS_AND_INTS),
        (lax.reduce_prod, FLOATS_AND_INTS),
        (lax.reduce_max, EVERY_DTYPE),
        (lax.reduce_min, EVERY_DTYPE),
        (lax.reduce_and, st.one_of(st.just(dtypes.bool_), fst.int_dtypes)),
        (lax.reduce_or, st.one_of(st.just(dtypes.bool_), fst.int_dtypes)),
    ]
)


def reduction_tolerance(reduce, x: np.ndarray, lane_count: int) -> dict:
    """Sums and products of floats may round differently when the lanes are reduced at once."""
    if reduce is lax.reduce_sum:
        return sum_tolerance(x)
    if reduce is lax.reduce_prod:
        tol = tolerance(x.dtype)
        return dict(rtol=tol["rtol"] * (1 + lane_count), atol=tol["atol"])
    return dict(rtol=0, atol=0)


@given(REDUCTIONS, LANE_SHAPES, BATCH_SIZES, st.data())
def test_reductions(op, lane_shape, size, data):
    reduce, dtype_strategy = op
    dtype = data.draw(dtype_strategy)
    bounds = dict(min_value=-1.5, max_value=1.5) if reduce is lax.reduce_prod else {}
    nans = reduce in (lax.reduce_max, lax.reduce_min)
    x, in_axis = data.draw(lane_stack(dtype, lane_shape, size, nans, **bounds))
    axes = data.draw(fst.axes(len(lane_shape)))
    fun = functools.partial(reduce, axes=axes)
    count = int(np.prod([lane_shape[a] for a in axes]))
    check_batching(
        fun,
        [x],
        [in_axis],
        data.draw(out_axis(len(lane_shape) - len(axes))),
        **reduction_tolerance(reduce, x, count),
    )


@given(
    st.sampled_from([lax.argmax, lax.argmin]),
    st.sampled_from([dtypes.int32, dtypes.uint8]),
    fst.shapes(1, 3, 1, 4),
    BATCH_SIZES,
    st.data(),
)
def test_argmax_argmin(search, index_dtype, lane_shape, size, data):
    x, in_axis = data.draw(
        lane_stack(EVERY_DTYPE, lane_shape, size, nans=True, min_value=-3, max_value=3)
    )
    axis = data.draw(st.integers(-len(lane_shape), len(lane_shape) - 1))
    fun = functools.partial(search, axis=axis, index_dtype=index_dtype)
    check_batching(fun, [tie_heavy(x)], [in_axis], data.draw(out_axis(len(lane_shape) - 1)))


# ---------------------------------------------------------------------------------------------
# Cumulative reductions


@given(CUMULATIVE_CASES, st.booleans(), fst.shapes(1, 3, 0, 4), BATCH_SIZES, st.data())
def test_cumulative(case, reverse, lane_shape, size, data):
    cumulative, _, dtype_strategy, float_bounds, exact = case
    dtype = data.draw(dtype_strategy)
    bounds = float_bounds if is_float(dtype) else {}
    x, in_axis = data.draw(lane_stack(dtype, lane_shape, size, **bounds))
    axis = data.draw(st.integers(-len(lane_shape), len(lane_shape) - 1))
    fun = functools.partial(cumulative, axis=axis, reverse=reverse)
    tol = dict(rtol=0, atol=0) if exact else sum_tolerance(x)
    check_batching(fun, [x], [in_axis], data.draw(out_axis(len(lane_shape))), **tol)


# ---------------------------------------------------------------------------------------------
# Windowed reductions and select_and_scatter_add


@given(WINDOW_REDUCTIONS, fst.shapes(0, 3, 0, 4), BATCH_SIZES, st.data())
def test_reduce_window(case, lane_shape, size, data):
    computation, _, dtype_strategy, identity = case
    dtype = data.draw(dtype_strategy)
    x, in_axis = data.draw(lane_stack(dtype, lane_shape, size))
    window = data.draw(windowing(len(lane_shape)))
    fun = functools.partial(
        lax.reduce_window, init_value=identity(dtype), computation=computation, **window
    )
    tol = sum_tolerance(x) if computation is lax.add else dict(rtol=0, atol=0)
    check_batching(fun, [x], [in_axis], data.draw(out_axis(len(lane_shape))), **tol)


@given(
    st.sampled_from([ge_p, le_p]),
    st.sampled_from([dtypes.float32, dtypes.int32]),
    fst.shapes(0, 3, 0, 4),
    BATCH_SIZES,
    st.data(),
)
def test_select_and_scatter_add(select_prim, dtype, lane_shape, size, data):
    window = data.draw(windowing(len(lane_shape), dilations=False))
    del window["base_dilation"], window["window_dilation"]
    source_shape = lax.reduce_window(np.zeros(lane_shape, dtype), 0, lax.add, **window).shape
    bounds = dict(min_value=-3, max_value=3)
    source, source_axis = data.draw(maybe_lane_stack(dtype, source_shape, size, **bounds))
    stack = lane_stack if source_axis is None else maybe_lane_stack
    operand, operand_axis = data.draw(stack(dtype, lane_shape, size, **bounds))
    fun = functools.partial(lax.select_and_scatter_add, select_prim=select_prim, **window)
    out_axes = data.draw(out_axis(len(lane_shape)))
    check_batching(fun, [source, tie_heavy(operand)], [source_axis, operand_axis], out_axes)


# ---------------------------------------------------------------------------------------------
# Nested vmap, one primitive per batched program, per-example gradients


def test_nested_vmap():
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 5)).astype(np.float32)
    # The outer vmap maps axis 3, leaving lanes of shape (2, 3, 4); the inner one maps their
    # axis 1, leaving (2, 4).
    inner_sum = fg.vmap(lambda x: lax.reduce_sum(x, (0,)), in_axes=1, out_axes=-1)
    check_batching(inner_sum, [x], [3], 0, **sum_tolerance(x))
    inner_cummax = fg.vmap(lambda x: lax.cummax(x, 1, reverse=True), in_axes=-1, out_axes=1)
    check_batching(inner_cummax, [x], [0], 2)
    inner_argmin = fg.vmap(lambda x: lax.argmin(x, 0, np.int32), in_axes=2, out_axes=0)
    check_batching(inner_argmin, [x], [-1], 0)
    inner_pool = fg.vmap(
        lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 2), (1, 2), "SAME"), in_axes=0
    )
    check_batching(inner_pool, [x], [2], 1)


def test_nested_vmap_of_select_and_scatter_add():
    rng = np.random.default_rng(1)
    operand = rng.normal(size=(3, 4, 4, 6)).astype(np.float32)
    source = rng.normal(size=(2, 2, 3)).astype(np.float32)

    def scatter(s, x):
        return lax.select_and_scatter_add(s, x, ge_p, (2, 2), (2, 2), "VALID")

    inner = fg.vmap(scatter, in_axes=(None, 2), out_axes=1)
    check_batching(inner, [source, operand], [2, 0], 0)


def test_batched_programs_bind_each_primitive_once():
    x = np.ones((4, 3, 6), np.float32)
    source = np.ones((4, 3, 3), np.float32)
    cases = [
        (lambda x: lax.reduce_max(x, (0, 1)), (x,), 0),
        (lambda x: lax.argmax(x, 1, np.int32), (x,), 2),
        (lambda x: lax.cumlogsumexp(x, 0), (x,), 1),
        (lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 2), "VALID"), (x,), 1),
        (
            lambda s, x: lax.select_and_scatter_add(s, x, ge_p, (1, 2), (1, 2), "VALID"),
            (source, x),
            0,
        ),
    ]
    for fun, args, in_axes in cases:
        lanes = [np.take(a, 0, axis=in_axes) for a in args]
        unbatched = count_primitives(fun, *lanes)
        batched = count_primitives(fg.vmap(fun, in_axes=in_axes), *args)
        # The same binds, and at most a transpose or broadcast that places the batch axis.
        for name, count in unbatched.items():
            assert batched[name] == count, (name, batched, unbatched)
        assert sum(batched.values()) <= sum(unbatched.values()) + 1, (batched, unbatched)


def test_per_example_gradients():
    def pooled_loss(x):
        pooled = lax.reduce_window(x, -np.inf, lax.max, (2, 2), (2, 1), "SAME")
        return fnp.sum(pooled**2) + fnp.sum(lax.cumprod(x, 1)) + fnp.sum(lax.reduce_min(x, (0,)))

    x = np.random.default_rng(2).normal(size=(3, 4, 5))
    check_batching(fg.grad(pooled_loss), [x], [0])
    check_batching(fg.grad(lambda x: fnp.sum(fnp.cumsum(x, axis=0) ** 2)), [x], [-1], 1)


# ---------------------------------------------------------------------------------------------
# funcgrad.numpy and funcgrad.nn reductions under vmap


@given(fst.shapes(1, 3, 1, 4), BATCH_SIZES, st.data())
def test_numpy_reductions(lane_shape, size, data):
    x, in_axis = data.draw(lane_stack(fst.float_dtypes, lane_shape, size))
    axis = data.draw(st.integers(-len(lane_shape), len(lane_shape) - 1))
    tol = sum_tolerance(x)
    check_batching(lambda x: fnp.sum(x, axis=axis), [x], [in_axis], **tol)
    check_batching(lambda x: fnp.sum(x, axis=axis, keepdims=True), [x], [in_axis], -1, **tol)
    check_batching(lambda x: fnp.argmax(x, axis=axis), [x], [in_axis])
    check_batching(lambda x: fnp.cumsum(x, axis=axis), [x], [in_axis], **tol)
    check_batching(lambda x: fg.nn.softmax(x, axis=axis), [x], [in_axis], 1)
    check_batching(lambda x: fg.nn.logsumexp(x, axis=axis), [x], [in_axis], **tol)
    check_batching(fg.nn.logsumexp, [x], [in_axis], **tol)
