"""vmap of the indexing primitives, and of funcgrad.numpy indexing, against a loop of the lanes.

Each property draws one lane's operands and params with the strategies of test_lax_indexing,
stacks a few lanes of any combination of the operands along drawn axes (negative half the
time), and stacks the results at a drawn output axis. Batched start indices must turn into
one gather or scatter, and an unbatched operand of a gather is never broadcast.
"""

import numpy as np
import strategies as fst
from checks import check_batching
from hypothesis import assume, given
from hypothesis import strategies as st
from test_batching_shapes import count_primitives, out_axis, some_mapped, stacked
from test_lax_indexing import dynamic_slice_case, gather_case, modes_st, scatter_case

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.lax import GatherDimensionNumbers, ScatterDimensionNumbers

BATCH_SIZES = st.integers(1, 3)
SCATTERS = st.sampled_from(
    [lax.scatter, lax.scatter_add, lax.scatter_mul, lax.scatter_min, lax.scatter_max]
)


def stacked_indices(lane: np.ndarray, size: int, mapped: bool, bound: int):
    """Indices like `lane`, in [-2, bound], batched or not."""
    return stacked(lane.dtype, lane.shape, size, mapped, min_value=-2, max_value=bound)


# ---------------------------------------------------------------------------------------------
# dynamic_slice and dynamic_update_slice


@given(BATCH_SIZES, dynamic_slice_case(), st.sampled_from(["int32", "int64", "uint8"]), st.data())
def test_dynamic_slice(size, case, index_dtype, data):
    lane, sizes, starts = case
    mapped = data.draw(some_mapped(1 + len(starts)))
    x, x_axis = data.draw(stacked(lane.dtype, lane.shape, size, mapped[0]))
    low = 0 if index_dtype == "uint8" else None
    indices = [
        data.draw(stacked(index_dtype, (), size, m, min_value=low, max_value=2 * n + 2))
        for n, m in zip(lane.shape, mapped[1:])
    ]
    check_batching(
        lambda a, *i: lax.dynamic_slice(a, i, sizes),
        [x] + [i for i, _ in indices],
        [x_axis] + [axis for _, axis in indices],
        data.draw(out_axis(lane.ndim)),
    )


@given(BATCH_SIZES, dynamic_slice_case(), st.data())
def test_dynamic_update_slice(size, case, data):
    lane, sizes, starts = case
    mapped = data.draw(some_mapped(2 + len(starts)))
    x, x_axis = data.draw(stacked(lane.dtype, lane.shape, size, mapped[0]))
    update, update_axis = data.draw(stacked(lane.dtype, sizes, size, mapped[1]))
    indices = [
        data.draw(stacked(np.int32, (), size, m, min_value=-2 * n - 2, max_value=2 * n + 2))
        for n, m in zip(lane.shape, mapped[2:])
    ]
    check_batching(
        lambda a, u, *i: lax.dynamic_update_slice(a, u, i),
        [x, update] + [i for i, _ in indices],
        [x_axis, update_axis] + [axis for _, axis in indices],
        data.draw(out_axis(lane.ndim)),
    )


# ---------------------------------------------------------------------------------------------
# gather and the scatters


@given(BATCH_SIZES, gather_case(), modes_st, st.data())
def test_gather(size, case, mode, data):
    operand, indices, dn, slice_sizes = case
    x_mapped, i_mapped = data.draw(some_mapped(2))
    x, x_axis = data.draw(stacked(operand.dtype, operand.shape, size, x_mapped))
    i, i_axis = data.draw(stacked_indices(indices, size, i_mapped, max(operand.shape) + 2))

    def f(a, b):
        return lax.gather(a, b, dn, slice_sizes, mode=mode)

    out_ndim = np.ndim(f(operand, indices))
    check_batching(f, [x, i], [x_axis, i_axis], data.draw(out_axis(out_ndim)))


@given(BATCH_SIZES, scatter_case(), modes_st, SCATTERS, st.data())
def test_scatters(size, case, mode, scatter, data):
    operand, indices, updates, dn = case
    mapped = data.draw(some_mapped(3))
    x, x_axis = data.draw(stacked(operand.dtype, operand.shape, size, mapped[0]))
    i, i_axis = data.draw(stacked_indices(indices, size, mapped[1], max(operand.shape) + 2))
    u, u_axis = data.draw(stacked(updates.dtype, updates.shape, size, mapped[2]))
    check_batching(
        lambda a, b, c: scatter(a, b, c, dn, mode=mode),
        [x, i, u],
        [x_axis, i_axis, u_axis],
        data.draw(out_axis(operand.ndim)),
    )


# ---------------------------------------------------------------------------------------------
# funcgrad.numpy indexing under vmap


@given(BATCH_SIZES, fst.shapes(1, 3, 1, 4), st.data())
def test_numpy_getitem_with_batched_integer_indices(size, shape, data):
    x_mapped, i_mapped = data.draw(some_mapped(2))
    x, x_axis = data.draw(stacked(np.float32, shape, size, x_mapped))
    index_shape = data.draw(fst.shapes(0, 2, 1, 3))
    i, i_axis = data.draw(
        stacked(np.int32, index_shape, size, i_mapped, min_value=-shape[0], max_value=shape[0] - 1)
    )
    check_batching(lambda a, k: a[k], [x, i], [x_axis, i_axis])
    if len(shape) > 1:
        check_batching(lambda a, k: a[1:, k % shape[1]], [x, i], [x_axis, i_axis])


@given(BATCH_SIZES, fst.shapes(1, 3, 1, 4), st.sampled_from(["set", "add", "max"]), st.data())
def test_numpy_at_updates(size, shape, kind, data):
    mapped = data.draw(some_mapped(3))
    x, x_axis = data.draw(stacked(np.float32, shape, size, mapped[0]))
    index_shape = data.draw(fst.shapes(1, 1, 1, 3))
    i, i_axis = data.draw(
        stacked(np.int32, index_shape, size, mapped[1], min_value=-shape[0], max_value=shape[0] - 1)
    )
    v, v_axis = data.draw(stacked(np.float32, index_shape + shape[1:], size, mapped[2]))

    def update(a, k, values):
        ref = fnp.asarray(a).at[k]
        # Colliding indices pick an unspecified winner for "set"; unique ones keep it defined.
        return getattr(ref, kind)(values, unique_indices=kind == "set")

    if kind == "set":
        lanes = [i] if i_axis is None else list(np.moveaxis(i, i_axis, 0))
        assume(all(len(set(lane.reshape(-1) % shape[0])) == lane.size for lane in lanes))
    check_batching(update, [x, i, v], [x_axis, i_axis, v_axis])


@given(BATCH_SIZES, fst.shapes(1, 3, 1, 4), st.data())
def test_numpy_take_along_axis(size, shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    index_shape = list(shape)
    index_shape[axis] = data.draw(st.integers(0, 3))
    x_mapped, i_mapped = data.draw(some_mapped(2))
    x, x_axis = data.draw(stacked(np.float32, shape, size, x_mapped))
    n = shape[axis]
    i, i_axis = data.draw(stacked(np.int32, index_shape, size, i_mapped, min_value=-n, max_value=n))
    check_batching(lambda a, k: fnp.take_along_axis(a, k, axis), [x, i], [x_axis, i_axis])


# ---------------------------------------------------------------------------------------------
# Nested vmap, one primitive per batched program, per-example gradients

ROWS = GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
ADD_ROWS = ScatterDimensionNumbers(
    update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
)


def test_nested_vmap():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 3, 4)).astype(np.float32)
    i = rng.integers(-1, 6, size=(4, 2, 3, 1)).astype(np.int32)
    u = rng.normal(size=(2, 4, 3, 4)).astype(np.float32)

    def f(a, b, c):
        return lax.scatter_add(a, b, c, ADD_ROWS, mode="clip") + lax.gather(a, b, ROWS, (1, 4))[0]

    check_batching(fg.vmap(f, in_axes=(1, 1, None)), [x, i, u[0, :, 0]], [0, 1, None])
    check_batching(fg.vmap(f, in_axes=(None, 0, 0)), [x[0, :, 0], i, u], [None, 1, 0], 1)

    def g(a, s, t):
        return lax.dynamic_update_slice(a, lax.dynamic_slice(a, (t, s), (2, 2)) * 2, (s, t))

    starts = rng.integers(-1, 5, size=(2, 3)).astype(np.int32)
    check_batching(fg.vmap(g, in_axes=(1, 0, None)), [x, starts, np.int32(1)], [0, 0, None])


def test_batched_indices_become_one_gather_or_scatter():
    x = np.zeros((6, 4), np.float32)
    i = np.zeros((3, 5, 1), np.int32)
    starts = np.zeros(3, np.int32)
    names = count_primitives(fg.vmap(lambda s: lax.dynamic_slice(x, (s, 1), (2, 2))), starts)
    assert names.get("gather") == 1 and "dynamic_slice" not in names
    names = count_primitives(
        fg.vmap(lambda a, s: lax.dynamic_update_slice(a, x[:2], (s, 0))), np.stack([x] * 3), starts
    )
    assert names.get("scatter") == 1 and "dynamic_update_slice" not in names
    # The unbatched operand is read as it is by every lane: no broadcast.
    assert count_primitives(fg.vmap(lambda b: lax.gather(x, b, ROWS, (1, 4))), i) == {"gather": 1}
    # Both batched: one gather through a batching dimension, no transpose.
    both = fg.vmap(lambda a, b: lax.gather(a, b, ROWS, (1, 4)))
    assert count_primitives(both, np.stack([x] * 3), i) == {"gather": 1}
    updates = np.zeros((3, 5, 4), np.float32)
    scatter = fg.vmap(lambda a, b, c: lax.scatter_max(a, b, c, ADD_ROWS), (1, 0, 0), 1)
    assert count_primitives(scatter, np.stack([x] * 3, 1), i, updates) == {"scatter_max": 1}
    # Shared indices: the operand's batch axis is one more window, no index is copied.
    shared = fg.vmap(lambda a, c: lax.scatter_add(a, i[0], c, ADD_ROWS), in_axes=(0, 1))
    assert count_primitives(shared, np.stack([x] * 3), np.zeros((5, 3, 4), np.float32)) == {
        "scatter_add": 1
    }


def test_per_example_gradients():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 6, 4))
    i = rng.integers(0, 6, size=(3, 5, 1)).astype(np.int32)
    u = rng.normal(size=(3, 5, 4))
    starts = rng.integers(-2, 7, size=(3,)).astype(np.int32)

    def loss(a, b, c, s):
        gathered = lax.gather(a, b, ROWS, (1, 4), mode="clip")
        added = lax.scatter_add(a, b, c * gathered, ADD_ROWS)
        window = lax.dynamic_slice(added, (s, 1), (3, 2))
        written = lax.dynamic_update_slice(a, fnp.sin(window), (1, s))
        return fnp.sum(written**2) + fnp.sum(
            fnp.take_along_axis(a, fnp.broadcast_to(b[:1] % 4, (6, 1)), axis=1)
        )

    grad = fg.grad(loss, argnums=(0, 2))
    check_batching(grad, [x, i, u, starts], [0, 0, 0, 0])
    check_batching(grad, [x[0], i, u[0], starts], [None, 0, None, 0], 1)


def test_empty_batches_of_gathers_have_the_lanes_shape():
    """A lane's own slice of a batched operand is 1 wide along the batch, which gather once
    required to fit the operand's batch dimension: an empty batch (size 0) raised. The shape
    is the per-lane result's with 0 lanes in front, eagerly and under jit."""
    zeros, indices = fnp.zeros, lambda *shape: fnp.zeros(shape, np.int32)
    cases = [
        (lambda x, i: x[i], (zeros((0, 3)), indices(0)), (0,)),
        (lambda x, i: x[:, i], (zeros((0, 3, 5)), indices(0, 2)), (0, 3, 2)),
        (lambda x, i: fnp.take_along_axis(x, i, 0), (zeros((0, 3)), indices(0, 2)), (0, 2)),
        (lambda x, i: lax.dynamic_slice(x, (i,), (2,)), (zeros((0, 5)), indices(0)), (0, 2)),
        (lambda x, i: x.at[i].add(1.0), (zeros((0, 5)), indices(0, 3)), (0, 5)),
        (fg.grad(lambda x, i: x[i].sum()), (zeros((0, 5)), indices(0, 2)), (0, 5)),
        (lambda x: x[indices(0)], (zeros((2, 4, 3)),), (2, 0, 3)),
    ]
    for fun, args, shape in cases:
        for batched in (fg.vmap(fun), fg.jit(fg.vmap(fun))):
            got = batched(*args)
            assert got.shape == shape and got.dtype == np.float32
