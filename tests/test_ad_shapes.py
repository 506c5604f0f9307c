"""Derivatives of the shape primitives: jvp against finite differences, vjp against jvp (which
checks each transpose rule through <u, J v> == <J^T u, v>), second order, and cotangents
against hand-computed expectations where the bookkeeping is subtle."""

import numpy as np
import strategies as fst
from hypothesis import given
from hypothesis import strategies as st
from test_lax_shapes import new_sizes_for, slice_params

import funcgrad as fg
from funcgrad import lax
from funcgrad.interpreters.ad import Zero
from funcgrad.lax.shapes import iota_p
from funcgrad.test_util import check_grads


@st.composite
def float_array(draw, min_dims=0, max_dims=4, min_side=0, max_side=4):
    shape = draw(fst.shapes(min_dims, max_dims, min_side, max_side))
    return draw(fst.arrays(np.float64, shape))


def check_linear(f, *args) -> None:
    """First and second order, both modes: for a linear map the second order checks that the
    rules compose (a jvp of a jvp, a transpose of a transpose)."""
    check_grads(f, args, order=2)


def pullback(f, *args, cotangent):
    return fg.vjp(f, *args)[1](cotangent)


# ---------------------------------------------------------------------------------------------
# broadcast_in_dim


@st.composite
def broadcast_case(draw):
    """An operand, an output shape and broadcast_dimensions, stretching some size-1 dims."""
    x = draw(float_array(max_dims=3, max_side=3))
    out_ndim = draw(st.integers(x.ndim, x.ndim + 2))
    dims = sorted(draw(st.permutations(range(out_ndim)))[: x.ndim])
    shape = [draw(st.integers(0, 3)) for _ in range(out_ndim)]
    for operand_dim, out_dim in enumerate(dims):
        size = x.shape[operand_dim]
        shape[out_dim] = draw(st.integers(0, 3)) if size == 1 else size
    return x, tuple(shape), tuple(dims)


@given(broadcast_case())
def test_broadcast_in_dim_derivatives(case):
    x, shape, dims = case
    check_linear(lambda a: lax.broadcast_in_dim(a, shape, dims), x)


def test_broadcast_in_dim_cotangent_sums_new_and_stretched_dims():
    x = np.arange(3.0).reshape(3, 1)
    ct = np.arange(24.0).reshape(2, 3, 4)
    (got,) = pullback(lambda a: lax.broadcast_in_dim(a, (2, 3, 4), (1, 2)), x, cotangent=ct)
    np.testing.assert_array_equal(np.asarray(got), ct.sum(axis=(0, 2)).reshape(3, 1))


# ---------------------------------------------------------------------------------------------
# reshape, transpose, squeeze, rev


@given(st.data())
def test_reshape_derivatives_with_and_without_dimensions(data):
    x = data.draw(float_array())
    dims = data.draw(st.none() | st.permutations(range(x.ndim)).map(tuple))
    new_sizes = data.draw(new_sizes_for(x.size))
    check_linear(lambda a: lax.reshape(a, new_sizes, dims), x)


def test_reshape_with_dimensions_cotangent_undoes_the_transpose():
    x = np.zeros((2, 3))
    ct = np.arange(6.0)
    (got,) = pullback(lambda a: lax.reshape(a, (6,), (1, 0)), x, cotangent=ct)
    # Forward, element (i, j) of x went to position 2 * j + i.
    np.testing.assert_array_equal(np.asarray(got), [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]])


@given(st.data())
def test_transpose_derivatives(data):
    x = data.draw(float_array())
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    check_linear(lambda a: lax.transpose(a, perm), x)


@given(st.data())
def test_squeeze_derivatives(data):
    shape = data.draw(fst.shapes(max_side=2))
    x = data.draw(fst.arrays(np.float64, shape))
    ones = [d for d, n in enumerate(shape) if n == 1]
    dims = data.draw(st.lists(st.sampled_from(ones), unique=True) if ones else st.just([]))
    check_linear(lambda a: lax.squeeze(a, dims), x)


@given(st.data())
def test_rev_derivatives(data):
    x = data.draw(float_array(min_dims=1))
    dims = data.draw(fst.axes(x.ndim))
    check_linear(lambda a: lax.rev(a, dims), x)


# ---------------------------------------------------------------------------------------------
# slice, pad, concatenate


@given(st.data())
def test_slice_derivatives_with_strides(data):
    x = data.draw(float_array())
    starts, limits, strides = data.draw(slice_params(x.shape))
    check_linear(lambda a: lax.slice(a, starts, limits, strides), x)


def test_slice_cotangent_lands_on_the_strided_elements():
    x = np.zeros(7)
    (got,) = pullback(lambda a: lax.slice(a, (1,), (6,), (2,)), x, cotangent=np.array([1.0, 2, 3]))
    np.testing.assert_array_equal(np.asarray(got), [0.0, 1, 0, 2, 0, 3, 0])


@st.composite
def pad_config(draw, shape):
    """(low, high, interior) per dimension, cropping with negative low/high at times."""
    config = []
    for n in shape:
        interior = draw(st.integers(0, 2))
        core = n + max(n - 1, 0) * interior
        lo = draw(st.integers(-min(core, 3), 3))
        hi = draw(st.integers(-min(core + lo, 3), 3))
        config.append((lo, hi, interior))
    return config


@given(st.data())
def test_pad_derivatives_in_operand_and_padding_value(data):
    x = data.draw(float_array(max_dims=3))
    config = data.draw(pad_config(x.shape))
    value = data.draw(fst.arrays(np.float64, ()))
    check_linear(lambda a, v: lax.pad(a, v, config), x, value)


def test_pad_cotangents_with_cropping_and_interior_padding():
    x = np.zeros(3)
    config = [(-1, 2, 1)]  # x0 p x1 p x2 -> crop x0 -> p x1 p x2 p p
    ct = np.array([1.0, 2, 3, 4, 5, 6])
    got_x, got_value = pullback(lambda a, v: lax.pad(a, v, config), x, np.float64(0), cotangent=ct)
    np.testing.assert_array_equal(np.asarray(got_x), [0.0, 2, 4])
    np.testing.assert_array_equal(np.asarray(got_value), 1 + 3 + 5 + 6)


@given(st.data())
def test_concatenate_derivatives(data):
    base = data.draw(fst.shapes(min_dims=1, max_dims=3, max_side=3))
    dimension = data.draw(st.integers(0, len(base) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=2, max_size=4))
    shapes = [base[:dimension] + (n,) + base[dimension + 1 :] for n in sizes]
    xs = [data.draw(fst.arrays(np.float64, s)) for s in shapes]
    check_linear(lambda *a: lax.concatenate(a, dimension), *xs)


def test_concatenate_with_a_constant_operand_gives_cotangents_to_the_others():
    a, b = np.ones(2), np.zeros(3)
    (got,) = pullback(lambda a: lax.concatenate([b, a, b], 0), a, cotangent=np.arange(8.0))
    np.testing.assert_array_equal(np.asarray(got), [3.0, 4.0])
    _, tangent = fg.jvp(lambda a: lax.concatenate([a, b], 0), (a,), (np.ones(2),))
    np.testing.assert_array_equal(np.asarray(tangent), [1.0, 1, 0, 0, 0])


# ---------------------------------------------------------------------------------------------
# iota


def test_iota_is_a_constant():
    out, tangent = iota_p.jvp([], [], dtype=np.dtype(np.float64), shape=(3,), dimension=0)
    np.testing.assert_array_equal(np.asarray(out), [0.0, 1, 2])
    assert type(tangent) is Zero
    _, tangent = fg.jvp(
        lambda a: lax.concatenate([a, lax.iota(np.float64, 2)], 0), (np.ones(1),), (np.ones(1),)
    )
    np.testing.assert_array_equal(np.asarray(tangent), [1.0, 0, 0])
    assert "transpose" in iota_p.not_applicable
