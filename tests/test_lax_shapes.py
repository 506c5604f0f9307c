"""Shape primitives against NumPy written differently, or against plain Python loops."""

import itertools
import math

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_staging
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import lax
from funcgrad.tools.recipes import COMPILED_BACKENDS

dtypes_st = st.one_of(fst.any_dtypes, fst.all_float_dtypes)


@st.composite
def any_array(draw, min_dims=0, max_dims=4, min_side=0, max_side=4):
    shape = draw(fst.shapes(min_dims, max_dims, min_side, max_side))
    return draw(fst.arrays(dtypes_st, shape))


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


@st.composite
def new_sizes_for(draw, size: int) -> tuple[int, ...]:
    """A shape with `size` elements: the prime factors of `size` grouped at random."""
    if size == 0:
        others = draw(st.lists(st.integers(0, 3), max_size=2))
        return tuple(draw(st.permutations([0, *others])))
    factors = draw(st.permutations(_prime_factors(size)))
    rank = draw(st.integers(0 if size == 1 else 1, 4))
    groups = [1] * max(rank, 1)
    for f in factors:
        groups[draw(st.integers(0, len(groups) - 1))] *= f
    return tuple(groups) if rank else ()


# ---------------------------------------------------------------------------------------------
# reshape, collapse


@given(st.data())
def test_reshape_with_and_without_dimensions(data):
    x = data.draw(any_array())
    dims = data.draw(st.none() | st.permutations(range(x.ndim)).map(tuple))
    new_sizes = data.draw(new_sizes_for(x.size))
    expected = (x if dims is None else x.transpose(dims)).reshape(new_sizes)
    assert_close(lax.reshape(x, new_sizes, dims), expected, dtype=x.dtype)
    check_staging(lambda a: lax.reshape(a, new_sizes, dims), x, exact=True)


def test_reshape_dimensions_transpose_first():
    x = np.arange(6).reshape(2, 3)
    # Reading the transpose in row-major order: 0 3 1 4 2 5.
    np.testing.assert_array_equal(lax.reshape(x, (6,), (1, 0)), [0, 3, 1, 4, 2, 5])


def test_reshape_to_the_same_shape_is_the_operand():
    x = lax.asarray(np.ones((2, 3)))
    assert lax.reshape(x, (2, 3)) is x
    assert lax.reshape(x, (2, 3), (0, 1)) is x


def test_reshape_errors_name_the_shapes():
    x = np.zeros((2, 3))
    with pytest.raises(TypeError, match=r"shape \(2, 3\) \(6 elements\).*\(4,\) \(4 elements\)"):
        lax.reshape(x, (4,))
    with pytest.raises(TypeError, match=r"dimensions \(0, 0\) must be a permutation"):
        fg.make_jaxpr(lambda a: lax.reshape(a, (6,), (0, 0)))(x)
    with pytest.raises(TypeError, match=r"non-negative"):
        lax.reshape(x, (-1,))


@given(st.data())
def test_collapse_merges_a_range_of_dimensions(data):
    x = data.draw(any_array(min_dims=1))
    start = data.draw(st.integers(-x.ndim, x.ndim - 1))
    stop = data.draw(st.none() | st.integers(start % x.ndim + 1, x.ndim))
    lo = start % x.ndim
    hi = x.ndim if stop is None else stop
    expected_shape = x.shape[:lo] + (math.prod(x.shape[lo:hi]),) + x.shape[hi:]
    assert_close(lax.collapse(x, start, stop), x.reshape(expected_shape))


# ---------------------------------------------------------------------------------------------
# transpose, squeeze, expand_dims, rev


@given(st.data())
def test_transpose_matches_a_loop(data):
    x = data.draw(any_array())
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    out = np.asarray(lax.transpose(x, perm))
    assert out.shape == tuple(x.shape[d] for d in perm) and out.dtype == x.dtype
    for index in itertools.product(*map(range, x.shape)):
        assert out[tuple(index[d] for d in perm)] == x[index]
    check_staging(lambda a: lax.transpose(a, perm), x, exact=True)


def test_transpose_errors_name_the_shape():
    with pytest.raises(ValueError, match=r"permutation \(0, 2\).*shape \(2, 3\)"):
        lax.transpose(np.zeros((2, 3)), (0, 2))


@given(st.data())
def test_squeeze_removes_size_one_dimensions(data):
    shape = data.draw(fst.shapes(max_side=2))
    x = data.draw(fst.arrays(dtypes_st, shape))
    ones = [d for d, n in enumerate(shape) if n == 1]
    dims = data.draw(st.lists(st.sampled_from(ones), unique=True) if ones else st.just([]))
    dims = [d - x.ndim if data.draw(st.booleans()) else d for d in dims]  # negative forms
    expected_shape = tuple(n for d, n in enumerate(shape) if d not in {d % x.ndim for d in dims})
    assert_close(lax.squeeze(x, dims), x.reshape(expected_shape), dtype=x.dtype)
    check_staging(lambda a: lax.squeeze(a, dims), x, exact=True)


def test_squeeze_of_a_dimension_not_of_size_one_names_shape_and_dimension():
    x = np.zeros((1, 3))
    with pytest.raises(
        ValueError, match=r"dimension 1 of the operand of shape \(1, 3\).*size is 3"
    ):
        lax.squeeze(x, (1,))
    with pytest.raises(ValueError, match=r"dimension 1 of the operand of shape \(1, 3\)"):
        fg.make_jaxpr(lambda a: lax.squeeze(a, (0, -1)))(x)
    with pytest.raises(ValueError, match=r"axis 2 is out of bounds"):
        lax.squeeze(x, (2,))


@given(st.data())
def test_expand_dims_matches_numpy(data):
    x = data.draw(any_array(max_dims=3))
    count = data.draw(st.integers(1, 2))
    out_ndim = x.ndim + count
    axis = st.integers(-out_ndim, out_ndim - 1)
    dims = data.draw(st.lists(axis, min_size=count, max_size=count))
    if len({d % out_ndim for d in dims}) != count:
        with pytest.raises(ValueError, match="repeated axis"):
            lax.expand_dims(x, dims)
        return
    assert_close(lax.expand_dims(x, dims), np.expand_dims(x, tuple(dims)), dtype=x.dtype)
    check_staging(lambda a: lax.expand_dims(a, dims), x, exact=True)


@given(st.data())
def test_rev_reverses_each_named_dimension(data):
    x = data.draw(any_array(min_dims=1))
    dims = data.draw(fst.axes(x.ndim))
    index = tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(x.ndim))
    assert_close(lax.rev(x, dims), x[index], dtype=x.dtype)
    if dims:
        check_staging(lambda a: lax.rev(a, dims), x, exact=True)


def test_rev_errors_name_the_shape():
    with pytest.raises(ValueError, match=r"rev: dimensions \(0, 0\).*shape \(2,\)"):
        lax.rev(np.zeros(2), (0, 0))
    with pytest.raises(ValueError, match=r"rev: dimensions \(-1,\)"):
        lax.rev(np.zeros(2), (-1,))


# ---------------------------------------------------------------------------------------------
# slice, slice_in_dim, index_in_dim


@st.composite
def slice_params(draw, shape):
    starts, limits, strides = [], [], []
    for n in shape:
        lo = draw(st.integers(0, n))
        starts.append(lo)
        limits.append(draw(st.integers(lo, n)))
        strides.append(draw(st.integers(1, 3)))
    return tuple(starts), tuple(limits), tuple(strides)


@given(st.data())
def test_slice_with_strides_matches_take(data):
    x = data.draw(any_array())
    starts, limits, strides = data.draw(slice_params(x.shape))
    use_strides = data.draw(st.booleans())
    expected = x
    for axis, (lo, hi, step) in enumerate(zip(starts, limits, strides)):
        expected = np.take(expected, np.arange(lo, hi, step if use_strides else 1), axis=axis)
    out = lax.slice(x, starts, limits, strides if use_strides else None)
    assert_close(out, expected, dtype=x.dtype)
    check_staging(
        lambda a: lax.slice(a, starts, limits, strides if use_strides else None), x, exact=True
    )


def test_slice_errors_name_the_shape():
    x = np.zeros((3, 4))
    with pytest.raises(
        TypeError, match=r"start_indices \(0, 0\) and limit_indices \(4, 4\).*\(3, 4\)"
    ):
        lax.slice(x, (0, 0), (4, 4))  # NumPy would clamp; lax does not
    with pytest.raises(TypeError, match=r"one entry per dimension.*\(3, 4\)"):
        lax.slice(x, (0,), (1,))
    with pytest.raises(ValueError, match=r"strides \(1, 0\) must be positive"):
        lax.slice(x, (0, 0), (1, 1), (1, 0))


@given(st.data())
def test_slice_in_dim_and_index_in_dim_follow_python_indexing(data):
    x = data.draw(any_array(min_dims=1, min_side=1))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    start = data.draw(st.none() | st.integers(-n, n))
    limit = data.draw(st.none() | st.integers(-n, n))
    stride = data.draw(st.integers(1, 3))
    lo = 0 if start is None else start % n if start < 0 else start
    hi = n if limit is None else limit % n if limit < 0 else limit
    if lo <= hi:
        expected = np.moveaxis(np.moveaxis(x, axis, 0)[lo:hi:stride], 0, axis)
        assert_close(lax.slice_in_dim(x, start, limit, stride, axis), expected)
    index = data.draw(st.integers(-n, n - 1))
    picked = np.moveaxis(x, axis, 0)[index]
    assert_close(lax.index_in_dim(x, index, axis, keepdims=False), picked)
    assert_close(lax.index_in_dim(x, index, axis), np.expand_dims(picked, axis))


def test_index_in_dim_out_of_bounds_names_axis_and_size():
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for axis 0 of size 3"):
        lax.index_in_dim(np.zeros((3, 2)), 3)


# ---------------------------------------------------------------------------------------------
# pad


def pad_reference(x, value, config):
    """Each output element either comes from x (where the padded grid puts one) or is padding."""
    shape = tuple(
        lo + hi + n + max(n - 1, 0) * interior for n, (lo, hi, interior) in zip(x.shape, config)
    )
    out = np.empty(shape, x.dtype)
    for index in itertools.product(*map(range, shape)):
        source = []
        for o, n, (lo, _, interior) in zip(index, x.shape, config):
            q, r = divmod(o - lo, interior + 1)
            source.append(q if o >= lo and r == 0 and q < n else None)
        out[index] = value if None in source else x[tuple(source)]
    return out


@given(st.data())
def test_pad_with_negative_and_interior_padding_matches_a_loop(data):
    x = data.draw(any_array(max_dims=3))
    config = []
    for n in x.shape:
        interior = data.draw(st.integers(0, 2))
        core = n + max(n - 1, 0) * interior
        lo = data.draw(st.integers(-min(core, 3), 3))
        hi = data.draw(st.integers(-min(core + lo, 3), 3))
        config.append((lo, hi, interior))
    value = data.draw(fst.arrays(x.dtype, ()))
    out = lax.pad(x, value, config)
    assert_close(out, pad_reference(x, value, config), dtype=x.dtype)
    check_staging(lambda a, v: lax.pad(a, v, config), x, value, exact=True)


def test_pad_takes_a_python_scalar_in_the_operand_dtype():
    out = lax.pad(np.ones(2, np.int8), 7, [(1, 0, 1)])
    assert_close(out, np.array([7, 1, 7, 1], np.int8), dtype=np.int8)
    assert not out.weak_type


def test_pad_errors_name_the_shape():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match=r"one \(low, high, interior\) entry.*\(2, 3\)"):
        lax.pad(x, 0.0, [(0, 0, 0)])
    with pytest.raises(ValueError, match=r"interior padding must be non-negative"):
        lax.pad(x, 0.0, [(0, 0, -1), (0, 0, 0)])
    with pytest.raises(ValueError, match=r"operand of shape \(2, 3\) the negative size \(2, -1\)"):
        lax.pad(x, 0.0, [(0, 0, 0), (-2, -2, 0)])
    with pytest.raises(TypeError, match=r"pad requires arguments to have the same dtypes"):
        lax.pad(x, np.array(0.0), [(0, 0, 0), (0, 0, 0)])


# ---------------------------------------------------------------------------------------------
# concatenate


@given(st.data())
def test_concatenate_places_operands_one_after_another(data):
    base = data.draw(fst.shapes(min_dims=1, max_dims=3))
    dtype = data.draw(dtypes_st)
    dimension = data.draw(st.integers(0, len(base) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    shapes = [base[:dimension] + (n,) + base[dimension + 1 :] for n in sizes]
    xs = [data.draw(fst.arrays(dtype, s)) for s in shapes]
    expected = np.empty(base[:dimension] + (sum(sizes),) + base[dimension + 1 :], dtype)
    offset = 0
    for x, n in zip(xs, sizes):
        index = (slice(None),) * dimension + (slice(offset, offset + n),)
        expected[index] = x
        offset += n
    assert_close(lax.concatenate(xs, dimension), expected, dtype=dtype)
    check_staging(lambda *a: lax.concatenate(a, dimension), *xs, exact=True)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
@pytest.mark.parametrize("dimension", [0, 1])
def test_concatenate_of_empty_operands_compiles(backend, dimension):
    """Every operand empty along the axis (or another one): the result is empty too."""
    a, b = np.zeros((0, 3), np.uint32), np.zeros((0, 2 if dimension else 3), np.uint32)
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", backend)
    try:
        out = fg.jit(lambda a, b: lax.concatenate([a, b], dimension) + 1)(a, b)
    finally:
        fg.config.update("jit_backend", previous)
    assert out.shape == np.concatenate([a, b], dimension).shape and out.dtype == np.uint32


def test_concatenate_errors_name_the_shapes():
    a, b = np.zeros((2, 3)), np.zeros((3, 3))
    with pytest.raises(TypeError, match=r"except along dimension 1, got \(2, 3\), \(3, 3\)"):
        lax.concatenate([a, b], 1)
    with pytest.raises(ValueError, match=r"dimension 2 is out of range.*\(2, 3\), \(3, 3\)"):
        lax.concatenate([a, b], 2)
    with pytest.raises(TypeError, match="at least one operand"):
        lax.concatenate([], 0)
    with pytest.raises(TypeError, match="same dtypes"):
        lax.concatenate([a, b.astype(np.float32)], 0)


# ---------------------------------------------------------------------------------------------
# broadcast_in_dim (through its wrappers) and weak types


def test_broadcast_in_dim_errors_are_raised_eagerly():
    with pytest.raises(TypeError, match=r"operand shape \(3,\) cannot be broadcast to \(2, 4\)"):
        lax.broadcast_in_dim(np.zeros(3), (2, 4), (1,))
    with pytest.raises(TypeError, match=r"must be integers, got \(2.5, 4\)"):
        lax.broadcast_in_dim(np.zeros(4), (2.5, 4), (1,))
    with pytest.raises(TypeError, match=r"must be integers, got \(2.0,\)"):
        lax.iota(np.int32, 2.0)


@pytest.mark.parametrize("dims", list(itertools.permutations(range(3), 2)))
def test_broadcast_in_dim_with_dimensions_out_of_order_transposes(dims):
    """Operand axis i lands on output axis dims[i] in any order: out[..., j, ..., k, ...] is
    x[j, k] or x[k, j], as a loop over the output writes it."""
    x = np.arange(6.0).reshape(2, 3)
    shape = [4, 4, 4]
    for axis, size in zip(dims, x.shape):
        shape[axis] = size
    expected = np.empty(shape)
    for index in np.ndindex(*shape):
        expected[index] = x[tuple(index[d] for d in dims)]

    def broadcast(x):
        return lax.broadcast_in_dim(x, tuple(shape), dims)

    np.testing.assert_array_equal(np.asarray(broadcast(x)), expected)
    check_staging(broadcast, x, exact=True)
    # An element's derivative sums the weights of the output positions that read it.
    weights = np.random.default_rng(0).normal(size=shape)
    expected_grad = np.zeros(x.shape)
    for index in np.ndindex(*shape):
        expected_grad[tuple(index[d] for d in dims)] += weights[index]
    grad = fg.grad(lambda x: (broadcast(x) * weights).sum())(x)
    assert_close(grad, expected_grad)


def test_shape_ops_keep_the_weak_type_of_a_python_scalar():
    x = lax.broadcast_in_dim(2.0, (2, 3), ())
    assert x.weak_type
    for out in (
        lax.reshape(x, (3, 2)),
        lax.transpose(x, (1, 0)),
        lax.rev(x, (0,)),
        lax.slice(x, (0, 0), (1, 3)),
        lax.concatenate([x, x], 0),
        lax.pad(x, 0.0, [(1, 1, 0), (0, 0, 0)]),
    ):
        assert out.weak_type
    assert not lax.pad(x, np.float32(0), [(1, 1, 0), (0, 0, 0)]).weak_type


def test_full_like_is_weakly_typed_like_its_model_unless_given_a_dtype():
    out = lax.full_like(2.0, 3)
    assert out.weak_type and out.dtype == np.float32 and float(out) == 3.0
    # so it promotes as the Python scalar would: to the other operand's dtype
    assert (lax.full_like(2.0, 3, shape=(2,)) + np.ones(2, np.float16)).dtype == np.float16
    assert lax.full_like(1, 2.7).dtype == np.int32 and int(lax.full_like(1, 2.7)) == 2
    assert not lax.full_like(2.0, 3, dtype=np.float32).weak_type
    assert not lax.full_like(np.float32(2.0), 3).weak_type
    traced = fg.jit(lambda x, fill: lax.full_like(x, fill, shape=(2,)))(1.0, np.float32(4))
    assert traced.weak_type and traced.tolist() == [4.0, 4.0]
