"""funcgrad.numpy shape manipulation against NumPy, under tracing, and its errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.errors import ConcretizationTypeError
from tests import strategies as fst
from tests.checks import check_staging


def assert_same(actual, expected) -> None:
    """Data movement is exact: same shape, dtype and elements."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected, strict=True)


def small_arrays(dtype=fst.any_dtypes, min_dims=0, max_dims=4, min_side=0, max_side=4):
    return fst.arrays(dtype, fst.shapes(min_dims, max_dims, min_side, max_side))


def axis_of(ndim: int):
    """Any axis of an array of rank `ndim`, possibly negative."""
    return st.integers(-ndim, ndim - 1)


# ---------------------------------------------------------------------------------------------
# Reshaping


@st.composite
def reshape_targets(draw, size: int):
    """A shape holding `size` elements, maybe with one -1."""
    dims, remaining = [], size
    for _ in range(draw(st.integers(0, 3))):
        if size:
            divisors = [d for d in range(1, remaining + 1) if remaining % d == 0]
            d = draw(st.sampled_from(divisors))
            remaining //= d
        else:
            d = draw(st.integers(0, 3))
        dims.append(d)
    dims.append(remaining if size else 0)
    dims = draw(st.permutations(dims))
    if size and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


@given(st.data())
def test_reshape_and_ravel_match_numpy(data):
    x = data.draw(small_arrays())
    shape = data.draw(reshape_targets(x.size))
    order = data.draw(st.sampled_from(["C", "F"]))
    assert_same(fnp.reshape(x, shape, order=order), np.reshape(x, shape, order=order))
    assert_same(fnp.asarray(x).reshape(*shape), x.reshape(*shape))
    assert_same(fnp.ravel(x, order=order), np.ravel(x, order=order))


def test_reshape_errors_name_the_shapes_and_sizes():
    with pytest.raises(ValueError, match=r"shape \(2, 3\) \(size 6\) into shape \(4,\) \(size 4\)"):
        fnp.reshape(np.zeros((2, 3)), (4,))
    with pytest.raises(ValueError, match=r"shape \(2, 3\) \(size 6\) into shape \(4, -1\)"):
        fnp.reshape(np.zeros((2, 3)), (4, -1))
    with pytest.raises(ValueError, match="at most one -1"):
        fnp.reshape(np.zeros((2, 3)), (-1, -1))


@given(st.data())
def test_transpose_moveaxis_swapaxes_match_numpy(data):
    x = data.draw(small_arrays())
    perm = data.draw(st.permutations(range(x.ndim)))
    assert_same(fnp.transpose(x), np.transpose(x))
    assert_same(fnp.transpose(x, perm), np.transpose(x, perm))
    assert_same(fnp.asarray(x).T, x.T)
    if x.ndim:
        source = data.draw(
            st.lists(axis_of(x.ndim), max_size=x.ndim, unique_by=lambda a: a % x.ndim)
        )
        dest = data.draw(
            st.lists(
                axis_of(x.ndim),
                min_size=len(source),
                max_size=len(source),
                unique_by=lambda a: a % x.ndim,
            )
        )
        assert_same(fnp.moveaxis(x, source, dest), np.moveaxis(x, source, dest))
        i, j = data.draw(axis_of(x.ndim)), data.draw(axis_of(x.ndim))
        assert_same(fnp.swapaxes(x, i, j), np.swapaxes(x, i, j))


@given(st.data())
def test_squeeze_and_expand_dims_match_numpy(data):
    x = data.draw(small_arrays(max_side=2))
    ones = [d for d, n in enumerate(x.shape) if n == 1]
    axis = data.draw(
        st.none() | st.lists(st.sampled_from(ones), unique=True).map(tuple) if ones else st.none()
    )
    assert_same(fnp.squeeze(x, axis), np.squeeze(x, axis))
    out_ndim = x.ndim + data.draw(st.integers(1, 2))
    new_axes = data.draw(
        st.lists(
            axis_of(out_ndim),
            min_size=out_ndim - x.ndim,
            max_size=out_ndim - x.ndim,
            unique_by=lambda a: a % out_ndim,
        )
    )
    new_axes = new_axes[0] if len(new_axes) == 1 else tuple(new_axes)
    assert_same(fnp.expand_dims(x, new_axes), np.expand_dims(x, new_axes))


def test_shape_errors():
    with pytest.raises(ValueError, match=r"axis 1 of an array of shape \(2, 3\)"):
        fnp.squeeze(np.zeros((2, 3)), 1)
    with pytest.raises(np.exceptions.AxisError, match="transpose"):
        fnp.transpose(np.zeros((2, 3)), (0, 2))
    with pytest.raises(ValueError, match=r"axes \(0,\) do not match an array of shape \(2, 3\)"):
        fnp.transpose(np.zeros((2, 3)), (0,))
    with pytest.raises(np.exceptions.AxisError):
        fnp.expand_dims(np.zeros(3), 3)


# ---------------------------------------------------------------------------------------------
# Broadcasting, minimum ranks


@given(st.data())
def test_broadcast_to_and_broadcast_arrays_match_numpy(data):
    shape = data.draw(fst.shapes(max_side=3))
    x = data.draw(
        fst.arrays(
            fst.any_dtypes,
            [data.draw(st.sampled_from([1, n])) for n in shape][
                data.draw(st.integers(0, len(shape))) :
            ],
        )
    )
    assert_same(fnp.broadcast_to(x, shape), np.broadcast_to(x, shape))
    y = data.draw(fst.arrays(fst.any_dtypes, shape))
    for ours, theirs in zip(fnp.broadcast_arrays(x, y), np.broadcast_arrays(x, y)):
        assert_same(ours, theirs)


@pytest.mark.parametrize("rank", [0, 1, 2, 3, 4])
def test_atleast_nd_match_numpy(rank):
    x = np.arange(math.prod(range(2, 2 + rank))).reshape(range(2, 2 + rank))
    for ours, theirs in [
        (fnp.atleast_1d, np.atleast_1d),
        (fnp.atleast_2d, np.atleast_2d),
        (fnp.atleast_3d, np.atleast_3d),
    ]:
        assert_same(ours(x), theirs(x))
        pair = ours(x, 1.0)
        assert isinstance(pair, list) and len(pair) == 2
        assert_same(pair[0], theirs(x))


# ---------------------------------------------------------------------------------------------
# Joining and splitting


@st.composite
def joinable(draw, same_shape=False):
    """Arrays (of possibly different dtypes) with equal shapes except along one axis."""
    base = list(draw(fst.shapes(min_dims=1, max_dims=3, max_side=3)))
    axis = draw(st.integers(0, len(base) - 1))
    arrays = []
    for _ in range(draw(st.integers(1, 3))):
        shape = list(base)
        if not same_shape:
            shape[axis] = draw(st.integers(0, 3))
        arrays.append(draw(fst.arrays(fst.any_dtypes, tuple(shape))))
    return arrays, axis - len(base) * draw(st.booleans())


@given(joinable())
def test_concatenate_matches_numpy_with_promotion(args):
    arrays, axis = args
    dtype = fnp.result_type(*arrays)
    expected = np.concatenate([a.astype(dtype) for a in arrays], axis)
    assert_same(fnp.concatenate(arrays, axis), expected)
    assert_same(
        fnp.concatenate(arrays, None), np.concatenate([a.astype(dtype) for a in arrays], None)
    )


@given(joinable(same_shape=True), st.data())
def test_stacks_match_numpy(args, data):
    arrays, _ = args
    dtype = fnp.result_type(*arrays)
    same = [a.astype(dtype) for a in arrays]
    axis = data.draw(axis_of(arrays[0].ndim + 1))
    assert_same(fnp.stack(arrays, axis), np.stack(same, axis))
    for ours, theirs in [
        (fnp.hstack, np.hstack),
        (fnp.vstack, np.vstack),
        (fnp.dstack, np.dstack),
        (fnp.column_stack, np.column_stack),
    ]:
        if theirs is np.column_stack and arrays[0].ndim > 2:
            continue
        assert_same(ours(arrays), theirs(same))


def test_join_errors_name_every_shape_and_the_axis():
    with pytest.raises(ValueError, match=r"along axis 1, got shapes \(2, 3\), \(3, 3\)"):
        fnp.concatenate([np.zeros((2, 3)), np.zeros((3, 3))], axis=1)
    with pytest.raises(ValueError, match="zero-dimensional"):
        fnp.concatenate([np.float32(1), np.float32(2)])
    with pytest.raises(ValueError, match=r"same shape, got shapes \(2,\), \(3,\)"):
        fnp.stack([np.zeros(2), np.zeros(3)])


@given(st.data())
def test_split_and_array_split_match_numpy(data):
    x = data.draw(small_arrays(min_dims=1, max_dims=3, max_side=6))
    axis = data.draw(axis_of(x.ndim))
    n = x.shape[axis]
    if data.draw(st.booleans()):
        spec = data.draw(st.lists(st.integers(-n - 2, n + 2), max_size=4))
    else:
        spec = data.draw(st.integers(1, 4))
    for ours, theirs in zip(fnp.array_split(x, spec, axis), np.array_split(x, spec, axis)):
        assert_same(ours, theirs)
    if isinstance(spec, int) and n % spec:
        with pytest.raises(ValueError, match=f"axis of size {n} cannot be split into {spec}"):
            fnp.split(x, spec, axis)
    else:
        for ours, theirs in zip(fnp.split(x, spec, axis), np.split(x, spec, axis)):
            assert_same(ours, theirs)


def test_hsplit_vsplit_dsplit_match_numpy():
    x = np.arange(24).reshape(2, 4, 3)
    for ours, theirs, spec in [
        (fnp.hsplit, np.hsplit, 2),
        (fnp.vsplit, np.vsplit, [1]),
        (fnp.dsplit, np.dsplit, 3),
    ]:
        for a, b in zip(ours(x, spec), theirs(x, spec)):
            assert_same(a, b)


# ---------------------------------------------------------------------------------------------
# Repeating and reordering


@given(small_arrays(max_dims=3, max_side=3), st.lists(st.integers(0, 3), max_size=4))
def test_tile_matches_numpy(x, reps):
    assert_same(fnp.tile(x, reps), np.tile(x, reps))


@given(st.data())
def test_repeat_matches_numpy(data):
    x = data.draw(small_arrays(max_dims=3, max_side=3))
    axis = data.draw(st.none() | axis_of(x.ndim)) if x.ndim else None
    n = x.size if axis is None else x.shape[axis]
    repeats = data.draw(st.integers(0, 3) | st.lists(st.integers(0, 3), min_size=n, max_size=n))
    expected = np.repeat(x, repeats, axis)
    assert_same(fnp.repeat(x, repeats, axis), expected)
    assert_same(fnp.asarray(x).repeat(repeats, axis), expected)


def test_repeat_total_repeat_length_cuts_or_pads_with_the_last_element():
    x = np.array([1, 2, 3])
    assert_same(fnp.repeat(x, [1, 2, 1], total_repeat_length=3), np.array([1, 2, 2]))
    assert_same(fnp.repeat(x, [1, 2, 1], total_repeat_length=6), np.array([1, 2, 2, 3, 3, 3]))
    assert_same(fnp.repeat(x, 2, total_repeat_length=6), np.repeat(x, 2))


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_repeat_of_a_0d_array_repeats_it_as_1d(axis):
    # As NumPy's; axis 0 and -1 raised AxisError.
    x = np.array(3.5)
    assert_same(fnp.repeat(x, 2, axis=axis), np.repeat(x, 2, axis=axis))
    with pytest.raises(ValueError, match="axis 1"):
        fnp.repeat(x, 2, axis=1)


@given(st.data())
def test_flips_and_rot90_match_numpy(data):
    x = data.draw(small_arrays())
    assert_same(fnp.flip(x), np.flip(x))
    if x.ndim:
        axes = data.draw(st.lists(axis_of(x.ndim), max_size=x.ndim, unique_by=lambda a: a % x.ndim))
        assert_same(fnp.flip(x, tuple(axes)), np.flip(x, tuple(axes)))
        assert_same(fnp.flipud(x), np.flipud(x))
    if x.ndim >= 2:
        assert_same(fnp.fliplr(x), np.fliplr(x))
        k = data.draw(st.integers(-3, 5))
        pair = data.draw(
            st.lists(axis_of(x.ndim), min_size=2, max_size=2, unique_by=lambda a: a % x.ndim)
        )
        assert_same(fnp.rot90(x, k, pair), np.rot90(x, k, pair))


@given(st.data())
def test_roll_matches_numpy(data):
    x = data.draw(small_arrays())
    shift = data.draw(st.integers(-7, 7))
    assert_same(fnp.roll(x, shift), np.roll(x, shift))
    if x.ndim:
        axes = data.draw(st.lists(axis_of(x.ndim), min_size=1, max_size=3))
        shifts = data.draw(st.lists(st.integers(-7, 7), min_size=len(axes), max_size=len(axes)))
        assert_same(fnp.roll(x, shifts, axes), np.roll(x, shifts, axes))


# ---------------------------------------------------------------------------------------------
# Padding


@given(st.data())
def test_pad_matches_numpy_in_every_mode(data):
    x = data.draw(small_arrays(min_dims=1, max_dims=3, min_side=1, max_side=4))
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    # Widths beyond the axis size too: NumPy repeats the reflection / wrap.
    widths = data.draw(
        st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=x.ndim, max_size=x.ndim)
    )
    form = data.draw(st.sampled_from(["pairs", "one pair", "int"]))
    pad_width = {"pairs": widths, "one pair": widths[:1] or [(1, 2)], "int": 3}[form]
    if mode == "constant" and x.dtype != np.bool_:
        value = data.draw(
            st.integers(0, 9)
            | st.lists(
                st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=x.ndim, max_size=x.ndim
            )
        )
        expected = np.pad(x, pad_width, mode, constant_values=value)
        assert_same(fnp.pad(x, pad_width, mode, constant_values=value), expected)
    else:
        assert_same(fnp.pad(x, pad_width, mode), np.pad(x, pad_width, mode))


def test_pad_mode_empty_keeps_the_values_and_shapes_the_padding():
    x = np.arange(6.0).reshape(2, 3)
    out = np.asarray(fnp.pad(x, ((1, 0), (2, 1)), "empty"))
    assert out.shape == (3, 6) and out.dtype == x.dtype
    np.testing.assert_array_equal(out[1:, 2:5], x)


@pytest.mark.parametrize("mode", ["mean", "median"])
def test_pad_statistics_of_booleans_are_true_where_any_is(mode):
    """NumPy casts the statistic to bool, so a mean of 0.5 is True (it rounded to False)."""
    x = np.array([True, False, True, False, True])
    for stat_length in (None, 2):
        expected = np.pad(x, (3, 1), mode, stat_length=stat_length)
        np.testing.assert_array_equal(fnp.pad(x, (3, 1), mode, stat_length=stat_length), expected)


def test_broadcast_arrays_of_nothing_is_an_empty_list():
    assert fnp.broadcast_arrays() == []


def test_pad_errors():
    with pytest.raises(ValueError, match="non-negative"):
        fnp.pad(np.zeros(3), (-1, 2))
    with pytest.raises(ValueError, match=r"axis 0 of an array of shape \(0, 2\)"):
        fnp.pad(np.zeros((0, 2)), 1, mode="reflect")
    with pytest.raises(NotImplementedError, match="'sideways'"):
        fnp.pad(np.zeros(3), 1, mode="sideways")
    with pytest.raises(ValueError, match="reflect_type"):
        fnp.pad(np.zeros(3), 1, mode="reflect", reflect_type="even-odd")
    # stat_length=0 padded with the edge value; NumPy pads with an empty mean's NaN, JAX raises.
    with pytest.raises(ValueError, match="stat_length 0 on axis 0"):
        fnp.pad(np.arange(5.0), 2, mode="mean", stat_length=0)


def test_integer_linear_ramp_under_jit_floors_as_numpy():
    # (edge - end) * (i / width) + end, fused into one multiply-add by a compiled kernel, gave
    # 7 * (3 / 7) - 3 = -4.4e-16, which the integer ramp floored to -1 where NumPy has 0.
    x = np.array([[3, -1, 4], [1, 5, -9]], np.int32)
    expected = np.pad(x, ((7, 0), (0, 9)), mode="linear_ramp", end_values=(-3, 5))
    for pad in (fnp.pad, fg.jit(fnp.pad, static_argnums=(1, 2), static_argnames="end_values")):
        out = pad(x, ((7, 0), (0, 9)), "linear_ramp", end_values=(-3, 5))
        np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize("ends", [(0.3, -4.1), ((0.3, -1.7), (2.9, -4.1))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_linear_ramp_rounds_as_numpy(dtype, ends):
    # NumPy's ramp is a linspace with i * step and + end rounded apart, which a compiled kernel
    # fused into one multiply-add; and in float64 for one pair of end values (their dtype), in
    # the array's dtype for more (taken as Python numbers).
    x = (np.random.default_rng(2).standard_normal((3, 4)) * 5).astype(dtype)
    widths = ((5, 6), (7, 3))
    expected = np.pad(x, widths, mode="linear_ramp", end_values=ends)
    for pad in (fnp.pad, fg.jit(fnp.pad, static_argnums=(1, 2), static_argnames="end_values")):
        out = pad(x, widths, "linear_ramp", end_values=ends)
        assert out.dtype == dtype
        np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize(
    "mode, options",
    [
        ("maximum", {}),
        ("minimum", {"stat_length": 1}),
        ("mean", {}),
        ("mean", {"stat_length": 2}),
        ("median", {}),
        ("median", {"stat_length": ((1, 2), (3, 1))}),
        ("linear_ramp", {}),
        ("linear_ramp", {"end_values": ((1, 2), (-30, 4))}),
        ("reflect", {"reflect_type": "odd"}),
        ("symmetric", {"reflect_type": "odd"}),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("pad_width", [1, ((0, 5), (7, 2)), ((9, 1), (1, 11))])
def test_pad_statistic_ramp_and_odd_modes_match_numpy(mode, options, dtype, pad_width):
    x = (np.random.default_rng(0).standard_normal((3, 4)) * 10).astype(dtype)
    expected = np.pad(x, pad_width, mode, **options)
    out = fnp.pad(x, pad_width, mode, **options)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_allclose(
        np.asarray(out), expected, rtol=0, atol=1e-6 * np.abs(expected).max()
    )


@pytest.mark.parametrize("mode", ["reflect", "symmetric"])
@pytest.mark.parametrize("pad_width", [((2, 3), (1, 1)), ((13, 11), (0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, np.complex64])
def test_pad_odd_reflections_are_numpys_and_keep_non_finite_values_apart(mode, pad_width, dtype):
    # An infinity or NaN anywhere made every element NaN, the original ones too: the
    # reflection was a product with a matrix of coefficients, whose zeros met it.
    x = (np.random.default_rng(1).standard_normal((3, 2)) * 5).astype(dtype)
    if dtype == np.float32:
        x[1, 0], x[2, 1] = np.inf, np.nan
    with np.errstate(invalid="ignore"):
        expected = np.pad(x, pad_width, mode, reflect_type="odd")
    for out in (
        fnp.pad(x, pad_width, mode, reflect_type="odd"),
        fg.jit(lambda a: fnp.pad(a, pad_width, mode, reflect_type="odd"))(x),
    ):
        assert_same(out, expected)


def test_pad_linear_ramp_of_bfloat16():
    # NumPy promotes no integer end value with bfloat16: this raised DTypePromotionError.
    x = np.array([4.3, 2.2, -1.3], fnp.bfloat16)
    expected = np.pad(x.astype(np.float32), (2, 3), "linear_ramp", end_values=1)
    out = fnp.pad(x, (2, 3), "linear_ramp", end_values=1)
    assert_same(out, expected.astype(fnp.bfloat16))


# ---------------------------------------------------------------------------------------------
# Shape queries, tracing


def test_shape_queries():
    x = np.zeros((2, 3))
    assert fnp.ndim(x) == 2 and fnp.shape(x) == (2, 3) and fnp.size(x) == 6
    assert fnp.size(fnp.asarray(x), -1) == 3 and fnp.ndim([[1, 2]]) == 2 and fnp.shape(1.0) == ()


def test_shape_ops_stage_like_eager():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    check_staging(lambda x: fnp.reshape(x, (4, -1), order="F"), x)
    check_staging(lambda x: fnp.concatenate([x, 2 * x], axis=-1), x)
    check_staging(lambda x: fnp.stack(fnp.split(x, 2, axis=0), axis=1), x)
    check_staging(lambda x: fnp.pad(x, ((1, 0), (2, 5), (0, 3)), mode="symmetric"), x)
    check_staging(lambda x: fnp.repeat(x, [1, 0, 2], axis=1), x)
    check_staging(lambda x: (fnp.roll(x, (1, -2), (0, 2)), fnp.rot90(x, 3), fnp.tile(x, (2, 1))), x)
    check_staging(lambda x: fnp.pad(x, 1, constant_values=x[0, 0, 0]), x)


def test_static_arguments_must_not_be_traced():
    x = np.arange(6)
    with pytest.raises(ConcretizationTypeError, match="repeat: repeats"):
        fg.make_jaxpr(lambda x, r: fnp.repeat(x, r))(x, 2)
    with pytest.raises(ConcretizationTypeError, match="roll: shift"):
        fg.make_jaxpr(lambda x, s: fnp.roll(x, s))(x, 2)
