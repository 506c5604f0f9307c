"""vmap of the shape primitives against a Python loop of the lanes.

Each property draws one lane's operands and params with the strategies of test_lax_shapes,
stacks a few lanes of each operand along a drawn axis (negative half the time), leaves some
operands unbatched, and stacks the results at a drawn output axis.
"""

import numpy as np
import strategies as fst
from checks import check_batching
from hypothesis import given
from hypothesis import strategies as st
from test_lax_shapes import any_array, dtypes_st, new_sizes_for, slice_params

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.lax.shapes import iota_p

BATCH_SIZES = st.integers(1, 3)

# ---------------------------------------------------------------------------------------------
# Drawing batched operands (test_batching_indexing uses these too)


@st.composite
def stacked(draw, dtype, lane_shape, size: int, mapped: bool | None = None, **array_kwargs):
    """(operand, in_axis): `size` lanes of `lane_shape` stacked along a drawn axis, named
    from the end half the time; or, when not `mapped` (drawn when None), one lane with
    in_axis None."""
    lane_shape = tuple(lane_shape)
    if mapped is None:
        mapped = draw(st.booleans())
    if not mapped:
        return draw(fst.arrays(dtype, lane_shape, **array_kwargs)), None
    position = draw(st.integers(0, len(lane_shape)))
    shape = lane_shape[:position] + (size,) + lane_shape[position:]
    x = draw(fst.arrays(dtype, shape, **array_kwargs))
    return x, draw(st.sampled_from([position, position - len(shape)]))


@st.composite
def some_mapped(draw, count: int) -> list[bool]:
    """Which of `count` operands are batched: any combination with at least one."""
    flags = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    return flags if any(flags) else [True] + flags[1:]


def out_axis(ndim: int):
    """An out_axes entry for lane results of rank `ndim`, negative ones included."""
    return st.integers(-(ndim + 1), ndim)


def count_primitives(fun, *args) -> dict[str, int]:
    counts: dict[str, int] = {}
    for eqn in fg.make_jaxpr(fun)(*args).jaxpr.eqns:
        counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
    return counts


def check_one_operand(data, fun, lane, size: int) -> None:
    """check_batching of `fun` on lanes like `lane`, stacked at a drawn axis."""
    x, in_axis = data.draw(stacked(lane.dtype, lane.shape, size, mapped=True))
    out_ndim = np.ndim(fun(lane))
    check_batching(fun, [x], [in_axis], data.draw(out_axis(out_ndim)))


# ---------------------------------------------------------------------------------------------
# One property per primitive


@given(BATCH_SIZES, st.data())
def test_broadcast_in_dim(size, data):
    lane = data.draw(any_array(max_dims=3))
    out_rank = lane.ndim + data.draw(st.integers(0, 2))
    dims = sorted(data.draw(st.permutations(range(out_rank)))[: lane.ndim])
    shape = [data.draw(st.integers(0, 3)) for _ in range(out_rank)]
    for operand_dim, out_dim in enumerate(dims):
        n = lane.shape[operand_dim]
        shape[out_dim] = data.draw(st.integers(1, 3)) if n == 1 else n
    check_one_operand(data, lambda a: lax.broadcast_in_dim(a, shape, dims), lane, size)


@given(BATCH_SIZES, st.data())
def test_reshape_with_and_without_dimensions(size, data):
    lane = data.draw(any_array(max_dims=3))
    dims = data.draw(st.none() | st.permutations(range(lane.ndim)).map(tuple))
    new_sizes = data.draw(new_sizes_for(lane.size))
    check_one_operand(data, lambda a: lax.reshape(a, new_sizes, dims), lane, size)


@given(BATCH_SIZES, st.data())
def test_transpose(size, data):
    lane = data.draw(any_array(max_dims=3))
    perm = tuple(data.draw(st.permutations(range(lane.ndim))))
    check_one_operand(data, lambda a: lax.transpose(a, perm), lane, size)


@given(BATCH_SIZES, st.data())
def test_squeeze(size, data):
    lane = data.draw(fst.arrays(dtypes_st, fst.shapes(max_dims=3, max_side=2)))
    ones = [d for d, n in enumerate(lane.shape) if n == 1]
    dims = data.draw(st.lists(st.sampled_from(ones), unique=True) if ones else st.just([]))
    dims = [d - lane.ndim if data.draw(st.booleans()) else d for d in dims]
    check_one_operand(data, lambda a: lax.squeeze(a, dims), lane, size)


@given(BATCH_SIZES, st.data())
def test_rev(size, data):
    lane = data.draw(any_array(min_dims=1, max_dims=3))
    dims = data.draw(fst.axes(lane.ndim))
    check_one_operand(data, lambda a: lax.rev(a, dims), lane, size)


@given(BATCH_SIZES, st.data())
def test_slice(size, data):
    lane = data.draw(any_array(max_dims=3))
    starts, limits, strides = data.draw(slice_params(lane.shape))
    strides = strides if data.draw(st.booleans()) else None
    check_one_operand(data, lambda a: lax.slice(a, starts, limits, strides), lane, size)


@st.composite
def pad_config(draw, shape):
    """(low, high, interior) per dimension; low and high may crop, within the padded size."""
    config = []
    for n in shape:
        interior = draw(st.integers(0, 2))
        core = n + max(n - 1, 0) * interior
        lo = draw(st.integers(-min(core, 3), 3))
        hi = draw(st.integers(-min(core + lo, 3), 3))
        config.append((lo, hi, interior))
    return config


@given(BATCH_SIZES, st.data())
def test_pad_with_a_batched_operand_and_or_padding_value(size, data):
    lane = data.draw(any_array(max_dims=3, max_side=3))
    config = data.draw(pad_config(lane.shape))
    x_mapped, value_mapped = data.draw(some_mapped(2))
    x, x_axis = data.draw(stacked(lane.dtype, lane.shape, size, x_mapped))
    value, value_axis = data.draw(stacked(lane.dtype, (), size, value_mapped))
    check_batching(
        lambda a, v: lax.pad(a, v, config),
        [x, value],
        [x_axis, value_axis],
        data.draw(out_axis(lane.ndim)),
    )


@given(BATCH_SIZES, st.data())
def test_concatenate_of_batched_and_unbatched_operands(size, data):
    base = data.draw(fst.shapes(min_dims=1, max_dims=3, max_side=3))
    dtype = data.draw(dtypes_st)
    dimension = data.draw(st.integers(0, len(base) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    operands = [
        data.draw(stacked(dtype, base[:dimension] + (n,) + base[dimension + 1 :], size, mapped))
        for n, mapped in zip(sizes, data.draw(some_mapped(len(sizes))))
    ]
    check_batching(
        lambda *xs: lax.concatenate(xs, dimension),
        [x for x, _ in operands],
        [axis for _, axis in operands],
        data.draw(out_axis(len(base))),
    )


def test_iota_is_never_batched():
    assert "no operands" in iota_p.not_applicable["batch"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_batching(lambda a: a + lax.iota(np.float32, 3), [x], [0])
    check_batching(lambda a: lax.broadcasted_iota(np.int32, (2, 3), 1), [x], [0], 1)


# ---------------------------------------------------------------------------------------------
# Nested vmap, one primitive per batched program, per-example gradients


def test_nested_vmap():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 3, 5)).astype(np.float32)
    values = rng.normal(size=(3, 2)).astype(np.float32)

    def f(a, v):
        padded = lax.pad(a, v, [(1, -1, 1), (0, 2, 0)])
        flat = lax.reshape(lax.transpose(padded, (1, 0)), (padded.size,))
        return lax.concatenate([lax.rev(flat, (0,)), lax.slice(flat, (1,), (5,))], 0)

    inner = fg.vmap(f, in_axes=(1, 0))  # over x's axis 1, pairing with v's axis 0
    check_batching(inner, [x, values], [0, 1], 1)
    check_batching(fg.vmap(lambda a: lax.squeeze(a[:, :1], (1,)), in_axes=-1), [x], [1])
    broadcast = fg.vmap(lambda a: lax.broadcast_in_dim(a, (2, 3, 4), (0, 1)), in_axes=1)
    check_batching(broadcast, [x], [3], -1)


def test_one_primitive_per_batched_program():
    """Batching adds no equation of the batched primitive (no loop over lanes): only a
    transpose that moves the batch axis, or the pad's mask, beside it."""
    x = np.zeros((3, 2, 4), np.float32)
    value = np.zeros(3, np.float32)
    cases = [
        (lambda a: lax.reshape(a, (8,)), "reshape", 1),
        (lambda a: lax.reshape(a, (4, 2), (1, 0)), "reshape", 1),
        (lambda a: lax.transpose(a, (1, 0)), "transpose", 1),
        (lambda a: lax.slice(a, (0, 1), (2, 4), (1, 2)), "slice", 1),
        (lambda a: lax.rev(a, (1,)), "rev", 1),
        (lambda a: lax.squeeze(a[:1], (0,)), "squeeze", 1),
        (lambda a: lax.broadcast_in_dim(a, (2, 5, 4), (0, 2)), "broadcast_in_dim", 1),
        (lambda a: lax.concatenate([a, a[:1]], 0), "concatenate", 1),
    ]
    for fun, name, count in cases:
        assert count_primitives(fg.vmap(fun), x)[name] == count, name
    # With in_axes=1 no transpose is needed to place the batch axis.
    keeps_axis = fg.vmap(lambda a: lax.reshape(a, (3, 2, 2)), in_axes=1, out_axes=1)
    assert count_primitives(keeps_axis, x) == {"reshape": 1}
    # A padding value per lane: two pads (operand and mask) and one select.
    counts = count_primitives(fg.vmap(lambda a, v: lax.pad(a, v, [(1, 1, 1)] * 2)), x, value)
    assert counts["pad"] == 2 and counts["select_n"] == 1


def test_per_example_gradients():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 3, 2))
    values = rng.normal(size=(4,))
    config = [(1, -1, 1), (2, 0, 0)]

    def loss(a, v):
        padded = lax.pad(a, v, config)
        turned = lax.transpose(lax.rev(padded, (0,)), (1, 0))
        joined = lax.concatenate([lax.reshape(turned, (turned.size,)), a[0]], 0)
        return fnp.sum(fnp.sin(joined) * fnp.arange(joined.shape[0]))

    check_batching(fg.grad(loss, argnums=(0, 1)), [x, values], [0, 0])
    check_batching(fg.grad(loss), [x, values[0]], [-1, None], 1)
