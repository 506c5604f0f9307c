"""Indexing primitives against plain Python loops that follow XLA's definitions element by element.

The gather and scatter references walk every output (or update) element, build its operand
index from the dimension numbers, and apply the mode's bounds rule to the whole window; they
share no code with the vectorized NumPy implementations under test.
"""

import itertools

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_staging
from hypothesis import assume, given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import lax
from funcgrad.lax import GatherDimensionNumbers, GatherScatterMode, ScatterDimensionNumbers

dtypes_st = st.one_of(fst.any_dtypes, fst.all_float_dtypes)
modes_st = st.sampled_from([None, "clip", "fill", "promise_in_bounds", GatherScatterMode.CLIP])


def ndindex(shape):
    return itertools.product(*map(range, shape))


# ---------------------------------------------------------------------------------------------
# dynamic_slice and dynamic_update_slice


def clamped_starts(starts, window_shape, operand_shape):
    """Negative starts count from the end once (the wrapper); then XLA clamps into bounds."""
    out = []
    for i, w, n in zip(starts, window_shape, operand_shape):
        i = i + n if i < 0 else i
        out.append(min(max(i, 0), n - w))
    return out


@st.composite
def dynamic_slice_case(draw):
    x = draw(fst.arrays(dtypes_st, fst.shapes(max_dims=3)))
    sizes = tuple(draw(st.integers(0, n)) for n in x.shape)
    starts = tuple(draw(st.integers(-2 * n - 2, 2 * n + 2)) for n in x.shape)
    return x, sizes, starts


@given(dynamic_slice_case(), st.sampled_from(["python", "int32", "int64", "uint8"]))
def test_dynamic_slice_clamps_like_xla(case, index_kind):
    x, sizes, starts = case
    if index_kind == "uint8":
        starts = tuple(max(s, 0) for s in starts)
    begin = clamped_starts(starts, sizes, x.shape)
    expected = np.empty(sizes, x.dtype)
    for index in ndindex(sizes):
        expected[index] = x[tuple(b + i for b, i in zip(begin, index))]
    if index_kind == "python":
        assert_close(lax.dynamic_slice(x, starts, sizes), expected, dtype=x.dtype)
        check_staging(lambda a: lax.dynamic_slice(a, starts, sizes), x, exact=True)
    else:
        indices = [np.array(s, index_kind) for s in starts]
        assert_close(lax.dynamic_slice(x, indices, sizes), expected, dtype=x.dtype)
        check_staging(lambda a, i: lax.dynamic_slice(a, i, sizes), x, indices, exact=True)


@given(dynamic_slice_case(), st.booleans())
def test_dynamic_update_slice_clamps_like_xla(case, traced_indices):
    x, sizes, starts = case
    update = np.arange(np.prod(sizes, dtype=int)).reshape(sizes).astype(x.dtype)
    begin = clamped_starts(starts, sizes, x.shape)
    expected = x.copy()
    for index in ndindex(sizes):
        expected[tuple(b + i for b, i in zip(begin, index))] = update[index]
    assert_close(lax.dynamic_update_slice(x, update, starts), expected, dtype=x.dtype)
    if traced_indices:
        indices = [np.int32(s) for s in starts]
        check_staging(
            lambda a, u, i: lax.dynamic_update_slice(a, u, i), x, update, indices, exact=True
        )
    else:
        check_staging(lambda a, u: lax.dynamic_update_slice(a, u, starts), x, update, exact=True)


def test_dynamic_slice_in_dim_variants():
    x = np.arange(12).reshape(3, 4)
    assert_close(lax.dynamic_slice_in_dim(x, 1, 2, axis=1), x[:, 1:3])
    assert_close(lax.dynamic_slice_in_dim(x, np.int32(5), 2, axis=0), x[1:3])  # clamped
    assert_close(lax.dynamic_index_in_dim(x, -1, axis=1, keepdims=False), x[:, 3])
    assert_close(lax.dynamic_index_in_dim(x, np.int64(2)), x[2:3])
    row = np.full(4, -1)
    expected = x.copy()
    expected[1] = row
    assert_close(lax.dynamic_update_index_in_dim(x, row, 1, 0), expected)
    assert_close(lax.dynamic_update_slice_in_dim(x, row[None], np.int32(-2), 0), expected)
    # One 1-d array of start indices, as JAX also accepts.
    assert_close(lax.dynamic_slice(x, np.array([-1, 1]), (2, 2)), x[1:3, 1:3])
    jaxpr = fg.make_jaxpr(lambda a, i: lax.dynamic_slice(a, i, (2, 2)))(x, np.array([0, 1]))
    assert jaxpr.out_avals[0].shape == (2, 2)


def test_dynamic_slice_keeps_the_operand_weak_type():
    x = lax.broadcast_in_dim(1.0, (4,), ())
    assert lax.dynamic_slice(x, [np.int32(1)], [2]).weak_type
    assert lax.dynamic_update_slice(x, lax.broadcast_in_dim(2.0, (2,), ()), [1]).weak_type
    assert not lax.dynamic_update_slice(x, np.ones(2, np.float32), [1]).weak_type


def test_dynamic_slice_errors_name_the_shapes():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(TypeError, match=r"slice_sizes \(2, 5\).*shape \(3, 4\)"):
        lax.dynamic_slice(x, (0, 0), (2, 5))
    with pytest.raises(TypeError, match=r"got 1 start indices for the operand of shape \(3, 4\)"):
        lax.dynamic_slice(x, (0,), (2, 2))
    with pytest.raises(TypeError, match=r"integers of one dtype, got int32, int64"):
        lax.dynamic_slice(x, (np.int32(0), np.int64(0)), (2, 2))
    with pytest.raises(TypeError, match=r"update of shape \(4, 4\).*shape \(3, 4\)"):
        fg.make_jaxpr(lambda a, u: lax.dynamic_update_slice(a, u, (0, 0)))(
            x, np.zeros((4, 4), np.float32)
        )
    with pytest.raises(TypeError, match=r"slice_sizes must be integers, got \(2.5, 2\)"):
        lax.dynamic_slice(x, (0, 0), (2.5, 2))


def test_dynamic_slice_index_dtypes_are_checked_before_batching():
    """A batched int32 start beside an int8 one: the error named concatenate, which the
    batching rule had called to join the indices."""
    x = np.zeros((3, 4), np.float32)
    starts = np.array([0, 1], np.int32)
    with pytest.raises(TypeError, match=r"dynamic_slice: .*integers of one dtype, got int32, int8"):
        fg.vmap(lambda s: lax.dynamic_slice(x, (s, np.int8(1)), (2, 2)))(starts)
    with pytest.raises(
        TypeError, match=r"dynamic_update_slice: .*integers of one dtype, got int32, int8"
    ):
        fg.vmap(
            lambda s: lax.dynamic_update_slice(x, np.ones((2, 2), np.float32), (s, np.int8(1)))
        )(starts)


# ---------------------------------------------------------------------------------------------
# Gather


def gather_reference(operand, indices, dn, slice_sizes, mode, fill_value):
    mode = GatherScatterMode.from_any(mode)
    rank = operand.ndim
    dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    window_dims = [d for d in range(rank) if d not in dropped]
    batch_shape = indices.shape[:-1]
    out_rank = len(batch_shape) + len(dn.offset_dims)
    batch_sizes, offset_sizes = iter(batch_shape), iter(slice_sizes[d] for d in window_dims)
    shape = [
        next(offset_sizes) if d in dn.offset_dims else next(batch_sizes) for d in range(out_rank)
    ]
    out = np.empty(shape, operand.dtype)
    for out_index in ndindex(shape):
        batch_index = [i for d, i in enumerate(out_index) if d not in dn.offset_dims]
        offset_index = [out_index[d] for d in dn.offset_dims]
        start = [0] * rank
        for k, d in enumerate(dn.start_index_map):
            start[d] = int(indices[tuple(batch_index)][k])
        for operand_dim, indices_dim in zip(
            dn.operand_batching_dims, dn.start_indices_batching_dims
        ):
            start[operand_dim] = batch_index[indices_dim]
        limits = [operand.shape[d] - slice_sizes[d] for d in range(rank)]
        if not all(0 <= s <= lim for s, lim in zip(start, limits)):
            if mode == GatherScatterMode.FILL_OR_DROP:
                out[out_index] = fill_value
                continue
            start = [min(max(s, 0), lim) for s, lim in zip(start, limits)]
        element = list(start)
        for k, d in enumerate(window_dims):
            element[d] += offset_index[k]
        out[out_index] = operand[tuple(element)]
    return out


def default_fill(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return np.nan
    if dtype.kind == "i":
        return np.iinfo(dtype).min
    if dtype.kind == "u":
        return np.iinfo(dtype).max
    return True


@st.composite
def window_layout(draw):
    """The parts gather and scatter share: operand, batching pairs, index map, window sizes.

    Returns (operand shape, dropped dims (collapsed/inserted), operand batching dims, index
    batching dims, index map, window sizes per operand dim, indices batch shape).
    """
    shape = draw(fst.shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    rank = len(shape)
    dims = list(range(rank))
    batching_st = st.lists(st.sampled_from(dims), unique=True, max_size=1 if rank > 1 else 0)
    operand_batching = sorted(draw(batching_st))
    rest = [d for d in dims if d not in operand_batching]
    dropped = sorted(draw(st.lists(st.sampled_from(rest), unique=True, max_size=2))) if rest else []
    index_map = draw(st.lists(st.sampled_from(rest), unique=True, min_size=1)) if rest else []
    batch_rank = draw(st.integers(len(operand_batching), len(operand_batching) + 2))
    batch_shape = [draw(st.integers(1, 3)) for _ in range(batch_rank)]
    indices_batching = draw(st.permutations(range(batch_rank)))[: len(operand_batching)]
    for operand_dim, indices_dim in zip(operand_batching, indices_batching):
        batch_shape[indices_dim] = shape[operand_dim]
    sizes = [
        1 if d in dropped or d in operand_batching else draw(st.integers(1, shape[d])) for d in dims
    ]
    return (
        shape,
        tuple(dropped),
        tuple(operand_batching),
        tuple(indices_batching),
        tuple(index_map),
        tuple(sizes),
        tuple(batch_shape),
    )


@st.composite
def gather_case(draw):
    shape, collapsed, op_batch, idx_batch, index_map, sizes, batch_shape = draw(window_layout())
    operand = draw(fst.arrays(dtypes_st, shape))
    bound = max(shape) + 2
    indices = draw(
        fst.arrays(np.int32, batch_shape + (len(index_map),), min_value=-2, max_value=bound)
    )
    window_count = len(shape) - len(collapsed) - len(op_batch)
    out_rank = len(batch_shape) + window_count
    offset_dims = sorted(draw(st.permutations(range(out_rank)))[:window_count])
    dn = GatherDimensionNumbers(tuple(offset_dims), collapsed, index_map, op_batch, idx_batch)
    return operand, indices, dn, sizes


@given(gather_case(), modes_st, st.booleans())
def test_gather_matches_a_loop_reference(case, mode, explicit_fill):
    operand, indices, dn, sizes = case
    fill = None
    if explicit_fill and GatherScatterMode.from_any(mode) == GatherScatterMode.FILL_OR_DROP:
        fill = 1
    # mode=None gives PROMISE_IN_BOUNDS for gather, which clamps as XLA does.
    reference_mode = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else mode
    expected_fill = default_fill(operand.dtype) if fill is None else fill
    expected = gather_reference(operand, indices, dn, sizes, reference_mode, expected_fill)

    def f(x, i):
        return lax.gather(x, i, dn, sizes, mode=mode, fill_value=fill)

    assert_close(f(operand, indices), expected, dtype=operand.dtype)
    check_staging(f, operand, indices, exact=True)


def test_gather_fill_values_follow_jax():
    x = np.arange(3)
    dn = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    idx = np.array([[1], [3], [-1]])
    for dtype, fill in [
        (np.float32, np.nan),
        (np.int8, -128),
        (np.uint32, 2**32 - 1),
        (np.bool_, True),
    ]:
        out = lax.gather(x.astype(dtype), idx, dn, (1,), mode="fill")
        assert_close(out, np.array([1, fill, fill]).astype(dtype), dtype=dtype)
    clipped = lax.gather(x, idx, dn, (1,), mode="clip")
    assert_close(clipped, np.array([1, 2, 0]))


def test_gather_patterns_of_numpy_indexing():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4, 3)).astype(np.float32)
    i = np.array([4, 0, 2, 2])
    j = np.array([1, 3, 0, 1])
    # x[i]: one index axis, the rest of the operand as a window.
    dn = GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(0,), start_index_map=(0,))
    assert_close(lax.gather(x, i[:, None], dn, (1, 4, 3)), x[i])
    # x[:, j]: the batch dimension lands between offset dimensions.
    dn = GatherDimensionNumbers(offset_dims=(0, 2), collapsed_slice_dims=(1,), start_index_map=(1,))
    assert_close(lax.gather(x, j[:, None], dn, (5, 1, 3)), x[:, j])
    # x[i, j]: two index axes.
    dn = GatherDimensionNumbers(
        offset_dims=(1,), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)
    )
    assert_close(lax.gather(x, np.stack([i, j], -1), dn, (1, 1, 3)), x[i, j])
    # x[i, j:j+2]: an index with a slice of the next axis.
    dn = GatherDimensionNumbers(
        offset_dims=(1, 2), collapsed_slice_dims=(0,), start_index_map=(0, 1)
    )
    starts = np.stack([i, np.minimum(j, 2)], -1)
    expected = np.stack([x[a, b : b + 2] for a, b in starts])
    assert_close(lax.gather(x, starts, dn, (1, 2, 3)), expected)
    # take_along_axis: a batching dimension pairs row b of x with row b of the indices.
    rows = rng.integers(0, 4, size=(5, 6, 1))
    dn = GatherDimensionNumbers(
        offset_dims=(2,),
        collapsed_slice_dims=(1,),
        start_index_map=(1,),
        operand_batching_dims=(0,),
        start_indices_batching_dims=(0,),
    )
    expected = np.take_along_axis(x, rows, axis=1)
    assert_close(lax.gather(x, rows, dn, (1, 1, 3)), expected)


def test_gather_with_no_index_vectors_is_empty():
    dn = GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
    out = lax.gather(np.ones((3, 2)), np.zeros((0, 1), np.int32), dn, (1, 2))
    assert out.shape == (0, 2)


def test_gather_errors_name_the_shapes():
    x = np.zeros((3, 4), np.float32)
    idx = np.zeros((2, 1), np.int32)
    dn = GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
    with pytest.raises(TypeError, match=r"slice_sizes \(1, 5\).*shape \(3, 4\)"):
        lax.gather(x, idx, dn, (1, 5))
    with pytest.raises(TypeError, match=r"slice_sizes \(2, 4\) must be 1 in collapsed"):
        lax.gather(x, idx, dn, (2, 4))
    with pytest.raises(TypeError, match=r"indices \(shape \(2, 2\)\).*len\(start_index_map\) = 1"):
        fg.make_jaxpr(lambda a, i: lax.gather(a, i, dn, (1, 4)))(x, np.zeros((2, 2), np.int32))
    with pytest.raises(TypeError, match=r"indices must be integers, got float32"):
        lax.gather(x, idx.astype(np.float32), dn, (1, 4))
    bad = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    with pytest.raises(TypeError, match=r"dimensions of the operand of shape \(3, 4\) must be"):
        lax.gather(x, idx, bad, (1, 4))
    batched = GatherDimensionNumbers((1,), (), (1,), (0,), (0,))
    with pytest.raises(TypeError, match=r"operand_batching_dims \(0,\).*\(3, 4\).*\(2, 1\)"):
        lax.gather(x, idx, batched, (1, 4))
    with pytest.raises(ValueError, match="unknown gather/scatter mode 'wrap'"):
        lax.gather(x, idx, dn, (1, 4), mode="wrap")


def test_gather_mode_from_any():
    assert GatherScatterMode.from_any(None) is GatherScatterMode.FILL_OR_DROP
    assert GatherScatterMode.from_any("drop") is GatherScatterMode.FILL_OR_DROP
    assert GatherScatterMode.from_any("clip") is GatherScatterMode.CLIP
    assert GatherScatterMode.from_any("promise_in_bounds") is GatherScatterMode.PROMISE_IN_BOUNDS


# ---------------------------------------------------------------------------------------------
# Scatter

COMBINERS = {
    lax.scatter_add: np.add,
    lax.scatter_mul: np.multiply,
    lax.scatter_min: np.minimum,
    lax.scatter_max: np.maximum,
}


def scatter_targets(operand, indices, updates, dn, mode):
    """For each update element (row-major), the operand element it lands on, or None."""
    mode = GatherScatterMode.from_any(mode)
    rank = operand.ndim
    dropped = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    window_dims = [d for d in range(rank) if d not in dropped]
    window_shape = [1] * rank
    for k, d in enumerate(window_dims):
        window_shape[d] = updates.shape[dn.update_window_dims[k]]
    for update_index in ndindex(updates.shape):
        scatter_index = [i for d, i in enumerate(update_index) if d not in dn.update_window_dims]
        window_index = [update_index[d] for d in dn.update_window_dims]
        start = [0] * rank
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            start[d] = int(indices[tuple(scatter_index)][k])
        for operand_dim, indices_dim in zip(
            dn.operand_batching_dims, dn.scatter_indices_batching_dims
        ):
            start[operand_dim] = scatter_index[indices_dim]
        limits = [n - w for n, w in zip(operand.shape, window_shape)]
        if not all(0 <= s <= lim for s, lim in zip(start, limits)):
            if mode != GatherScatterMode.CLIP:
                yield update_index, None
                continue
            start = [min(max(s, 0), lim) for s, lim in zip(start, limits)]
        for k, d in enumerate(window_dims):
            start[d] += window_index[k]
        yield update_index, tuple(start)


@st.composite
def scatter_case(draw, dtypes=dtypes_st):
    shape, inserted, op_batch, idx_batch, index_map, sizes, batch_shape = draw(window_layout())
    dtype = draw(dtypes)
    operand = draw(fst.arrays(dtype, shape))
    bound = max(shape) + 2
    indices = draw(
        fst.arrays(np.int32, batch_shape + (len(index_map),), min_value=-2, max_value=bound)
    )
    window_sizes = [s for d, s in enumerate(sizes) if d not in inserted and d not in op_batch]
    updates_rank = len(batch_shape) + len(window_sizes)
    window_dims = sorted(draw(st.permutations(range(updates_rank)))[: len(window_sizes)])
    batch_sizes, window_iter = iter(batch_shape), iter(window_sizes)
    updates_shape = tuple(
        next(window_iter) if d in window_dims else next(batch_sizes) for d in range(updates_rank)
    )
    updates = draw(fst.arrays(dtype, updates_shape))
    dn = ScatterDimensionNumbers(tuple(window_dims), inserted, index_map, op_batch, idx_batch)
    return operand, indices, updates, dn


@given(scatter_case(dtypes=fst.any_dtypes), modes_st, st.sampled_from(list(COMBINERS)))
def test_scatter_combiners_match_a_loop_reference(case, mode, scatter_fn):
    operand, indices, updates, dn = case
    combine = COMBINERS[scatter_fn]
    expected = operand.copy()
    with np.errstate(over="ignore"):
        for update_index, target in scatter_targets(operand, indices, updates, dn, mode):
            if target is not None:
                expected[target] = combine(expected[target], updates[update_index])

    def f(x, i, u):
        return scatter_fn(x, i, u, dn, mode=mode)

    # Floating-point sums and products depend on the order of colliding updates.
    assert_close(f(operand, indices, updates), expected, dtype=operand.dtype, rtol=1e-5, atol=1e-4)
    check_staging(f, operand, indices, updates, exact=True)


@given(scatter_case(), modes_st)
def test_scatter_writes_one_of_the_colliding_updates(case, mode):
    """Where windows overlap, which update wins is unspecified (as in XLA); each hit element
    takes one of the updates aimed at it, and the others keep the operand's value."""
    operand, indices, updates, dn = case
    candidates = {}
    for update_index, target in scatter_targets(operand, indices, updates, dn, mode):
        if target is not None:
            candidates.setdefault(target, []).append(updates[update_index])
    out = np.asarray(lax.scatter(operand, indices, updates, dn, mode=mode))
    assert out.dtype == operand.dtype and out.shape == operand.shape
    for index in ndindex(operand.shape):
        if index in candidates:
            assert any(out[index] == c for c in candidates[index])
        else:
            assert out[index] == operand[index]
    check_staging(
        lambda x, i, u: lax.scatter(x, i, u, dn, mode=mode), operand, indices, updates, exact=True
    )


def test_scatter_set_with_duplicates_keeps_the_last_update():
    dn = ScatterDimensionNumbers((), (0,), (0,))
    out = lax.scatter(np.zeros(3), np.array([[1], [1], [2]]), np.array([5.0, 6.0, 7.0]), dn)
    assert_close(out, np.array([0.0, 6.0, 7.0]))


def test_colliding_windows_are_written_in_the_order_of_the_updates_array():
    """The window dimension leads the updates: eager execution wrote them batch element by
    batch element, the compiled loop in the updates' own order, and jit's result differed
    (the 2026-12-03 seed). Both now follow the updates array; position 1 is last written by
    updates[1, 1, 0]."""
    dn = ScatterDimensionNumbers(
        update_window_dims=(0,), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,)
    )
    indices = np.array([[[0], [0]], [[0], [1]]], np.int32)
    updates = np.array([[[1, 1], [1, 0]], [[1, 1], [1, 1]]], np.float32)

    def f(x, i, u):
        return lax.scatter(x, i, u, dn)

    expected = np.array([1.0, 1.0, 1.0], np.float32)
    for fun in (f, fg.jit(f)):
        np.testing.assert_array_equal(fun(np.zeros(3, np.float32), indices, updates), expected)
    # Sums round in that order too: position 1 takes 1 and then 2^-24 three times (each a
    # tie, rounded to the even 1), where 3 * 2^-24 first and then 1 would round to 1 + 2^-22.
    small = 2.0**-24
    updates = np.array([[[0, 0], [0, 1]], [[small, small], [small, 0]]], np.float32)

    def g(x, i, u):
        return lax.scatter_add(x, i, u, dn)

    for fun in (g, fg.jit(g)):
        np.testing.assert_array_equal(fun(np.zeros(3, np.float32), indices, updates), [0, 1, 0])


def test_scatter_default_mode_drops_whole_windows_that_reach_outside():
    x = np.zeros((4,), np.int32)
    dn = ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,)
    )
    updates = np.array([[1, 1], [2, 2], [3, 3]], np.int32)
    idx = np.array([[0], [3], [-1]])  # the second window would cover elements 3 and 4
    assert_close(lax.scatter_add(x, idx, updates, dn), np.array([1, 1, 0, 0]))
    assert_close(lax.scatter_add(x, idx, updates, dn, mode="clip"), np.array([4, 4, 2, 2]))


def test_scatter_add_pattern_of_at_add():
    # x.at[i].add(u) with repeated rows, and a batched (take_along_axis-style) scatter.
    x = np.zeros((4, 2), np.float32)
    i = np.array([3, 0, 3])
    u = np.arange(6, dtype=np.float32).reshape(3, 2)
    dn = ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    expected = x.copy()
    np.add.at(expected, i, u)
    assert_close(lax.scatter_add(x, i[:, None], u, dn), expected)
    rows = np.array([[[1], [1]], [[0], [2]]])
    dn = ScatterDimensionNumbers(
        (), (1,), (1,), operand_batching_dims=(0,), scatter_indices_batching_dims=(0,)
    )
    out = lax.scatter_add(np.zeros((2, 3)), rows, np.ones((2, 2)), dn)
    assert_close(out, np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 1.0]]))


def test_scatter_weak_type_follows_operand_and_updates():
    dn = ScatterDimensionNumbers((), (0,), (0,))
    weak = lax.broadcast_in_dim(0.0, (3,), ())
    assert lax.scatter_add(weak, np.array([[1]]), lax.broadcast_in_dim(1.0, (1,), ()), dn).weak_type
    assert not lax.scatter_add(weak, np.array([[1]]), np.ones(1, np.float32), dn).weak_type


def test_scatter_errors_name_the_shapes():
    x = np.zeros((3, 4), np.float32)
    idx = np.zeros((2, 1), np.int32)
    dn = ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    with pytest.raises(
        TypeError, match=r"scatter_add: updates of shape \(3, 4\).*indices of shape \(2, 1\)"
    ):
        lax.scatter_add(x, idx, np.zeros((3, 4), np.float32), dn)
    with pytest.raises(TypeError, match=r"updates of shape \(2, 5\).*operand of shape \(3, 4\)"):
        fg.make_jaxpr(lambda a, u: lax.scatter(a, idx, u, dn))(x, np.zeros((2, 5), np.float32))
    with pytest.raises(TypeError, match=r"scatter_mul requires arguments to have the same dtypes"):
        lax.scatter_mul(x, idx, np.zeros((2, 4), np.float64), dn)
    bad = ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(1, 0), scatter_dims_to_operand_dims=(0,)
    )
    with pytest.raises(TypeError, match=r"inserted_window_dims \(1, 0\) must be sorted"):
        lax.scatter_max(x, idx, np.zeros((2, 4), np.float32), bad)


@given(scatter_case(dtypes=st.just(np.float32)))
def test_gather_of_a_scatter_layout_reads_back_unique_updates(case):
    """Scatter then gather with mirrored dimension numbers round-trips when windows are unique
    and in bounds."""
    operand, indices, updates, dn = case
    targets = [t for _, t in scatter_targets(operand, indices, updates, dn, "clip")]
    assume(len(set(targets)) == len(targets))
    written = lax.scatter(operand, indices, updates, dn, mode="clip")
    gdn = GatherDimensionNumbers(
        dn.update_window_dims,
        dn.inserted_window_dims,
        dn.scatter_dims_to_operand_dims,
        dn.operand_batching_dims,
        dn.scatter_indices_batching_dims,
    )
    window = [1] * operand.ndim
    dropped = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    for k, d in enumerate(d for d in range(operand.ndim) if d not in dropped):
        window[d] = updates.shape[dn.update_window_dims[k]]
    assert_close(lax.gather(written, indices, gdn, window, mode="clip"), updates)
