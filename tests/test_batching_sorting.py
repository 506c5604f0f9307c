"""vmap of sort and top_k against a Python loop of the lanes, with ties, NaNs and unbatched
operands (which sort must permute differently in every lane)."""

import numpy as np
import strategies as fst
from checks import check_batching
from hypothesis import given
from hypothesis import strategies as st
from test_batching_reductions import BATCH_SIZES, count_primitives, out_axis
from test_lax_sorting import EVERY_DTYPE, tie_heavy_arrays

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax

LANE_SHAPES = fst.shapes(1, 3, 0, 4)


@st.composite
def lane_stack(draw, lane_shape: tuple[int, ...], size: int):
    """A tie-heavy operand whose lanes have `lane_shape`, `size` of them along a drawn axis,
    and the in_axis naming that axis (counted from the end half the time)."""
    position = draw(st.integers(0, len(lane_shape)))
    shape = lane_shape[:position] + (size,) + lane_shape[position:]
    x = draw(tie_heavy_arrays(EVERY_DTYPE, shape))
    return x, draw(st.sampled_from([position, position - len(shape)]))


@st.composite
def operands_with_axes(draw, lane_shape: tuple[int, ...], size: int, count: int):
    """`count` operands, a nonempty subset of them batched; the others have in_axis None."""
    batched = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    batched[draw(st.integers(0, count - 1))] = True
    drawn = [
        draw(lane_stack(lane_shape, size))
        if is_batched
        else (draw(tie_heavy_arrays(EVERY_DTYPE, lane_shape)), None)
        for is_batched in batched
    ]
    return [x for x, _ in drawn], [axis for _, axis in drawn]


# ---------------------------------------------------------------------------------------------
# sort


@given(st.integers(1, 3), LANE_SHAPES, BATCH_SIZES, st.data())
def test_sort(num_operands, lane_shape, size, data):
    operands, in_axes = data.draw(operands_with_axes(lane_shape, size, num_operands))
    num_keys = data.draw(st.integers(1, num_operands))
    dimension = data.draw(st.integers(-len(lane_shape), len(lane_shape) - 1))

    def fun(*ops):
        return lax.sort(ops, dimension=dimension, num_keys=num_keys)

    check_batching(fun, operands, in_axes, data.draw(out_axis(len(lane_shape))), rtol=0, atol=0)


@given(LANE_SHAPES, BATCH_SIZES, st.data())
def test_sort_single_operand(lane_shape, size, data):
    x, in_axis = data.draw(lane_stack(lane_shape, size))
    dimension = data.draw(st.integers(-len(lane_shape), len(lane_shape) - 1))
    out_axes = data.draw(out_axis(len(lane_shape)))
    check_batching(lambda x: lax.sort(x, dimension), [x], [in_axis], out_axes, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# top_k


@given(LANE_SHAPES, BATCH_SIZES, st.data())
def test_top_k(lane_shape, size, data):
    x, in_axis = data.draw(lane_stack(lane_shape, size))
    k = data.draw(st.integers(0, lane_shape[-1]))
    out_axes = data.draw(out_axis(len(lane_shape)))
    check_batching(lambda x: lax.top_k(x, k), [x], [in_axis], out_axes, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# Nested vmap, one sort per batched program, per-example gradients


def test_nested_vmap():
    rng = np.random.default_rng(0)
    keys = rng.integers(-2, 3, size=(2, 3, 4, 5)).astype(np.float32)
    values = rng.normal(size=(2, 4, 5)).astype(np.float32)

    def sort_by_keys(k, v):
        return lax.sort_key_val(k, v, dimension=0)

    # Lanes of shape (2, 4): the outer vmap maps the keys' axis 1 and not the values, which
    # it broadcasts; the inner one maps axis 2 of both.
    inner = fg.vmap(sort_by_keys, in_axes=(2, 2), out_axes=1)
    check_batching(inner, [keys, values], [1, None], 0, rtol=0, atol=0)
    inner_top_k = fg.vmap(lambda x: lax.top_k(x, 2), in_axes=-1, out_axes=0)
    check_batching(inner_top_k, [keys], [0], -1, rtol=0, atol=0)


def test_batched_sort_binds_one_sort():
    x = np.ones((3, 4, 5), np.float32)
    argsort = fg.vmap(lambda x: fnp.argsort(x, axis=0), in_axes=1)
    assert count_primitives(argsort, x)["sort"] == 1
    assert count_primitives(fg.vmap(lambda x: lax.top_k(x, 2), in_axes=2), x)["top_k"] == 1


def test_per_example_gradients():
    weights = np.arange(5.0)

    def loss(x):
        values, _ = lax.top_k(x, 3)
        return fnp.sum(lax.sort(x, 0) * weights) + fnp.sum(values**2)

    x = np.random.default_rng(1).normal(size=(3, 5))
    check_batching(fg.grad(loss), [x], [0])
    check_batching(fg.grad(loss), [x.T.copy()], [1], 1)


# ---------------------------------------------------------------------------------------------
# funcgrad.numpy sorting under vmap


@given(LANE_SHAPES, BATCH_SIZES, st.data())
def test_numpy_sort_and_argsort(lane_shape, size, data):
    x, in_axis = data.draw(lane_stack(lane_shape, size))
    axis = data.draw(st.integers(-len(lane_shape), len(lane_shape) - 1))
    out_axes = data.draw(out_axis(len(lane_shape)))
    descending = data.draw(st.booleans())
    exact = dict(rtol=0, atol=0)
    check_batching(lambda x: fnp.sort(x, axis=axis), [x], [in_axis], out_axes, **exact)
    check_batching(
        lambda x: fnp.argsort(x, axis=axis, descending=descending),
        [x],
        [in_axis],
        out_axes,
        **exact,
    )
