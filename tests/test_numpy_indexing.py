"""NumPy indexing of funcgrad arrays: x[index] and x.at[index] against NumPy, and take & co."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from tests import strategies as fst
from tests.checks import assert_close, check_staging

# ---------------------------------------------------------------------------------------------
# A strategy for NumPy index expressions


def _broadcastable_to(shape: tuple[int, ...]):
    """Shapes that broadcast to `shape`: a suffix of it, some sides replaced by 1."""
    return st.integers(0, len(shape)).flatmap(
        lambda k: st.tuples(*(st.sampled_from([1, n]) for n in shape[len(shape) - k :]))
    )


@st.composite
def index_expressions(draw, shape: tuple[int, ...]):
    """A valid in-bounds NumPy index for an array of `shape`, as (funcgrad form, NumPy form).

    It mixes ints, slices with any step, None, Ellipsis, and either integer arrays (whose
    shapes broadcast together) or one boolean mask. Ints may be funcgrad 0-d arrays and
    arrays may be lists, NumPy or funcgrad arrays, which NumPy's form has as plain values.
    """
    ndim = len(shape)
    advanced = draw(st.sampled_from(["none", "arrays", "mask"]))
    advanced_shape = draw(fst.shapes(max_dims=2, max_side=3))
    covered = draw(st.integers(0, ndim))
    with_ellipsis = draw(st.booleans())
    before = draw(st.integers(0, covered)) if with_ellipsis else covered
    ours, theirs = [], []
    mask_used = False

    def add(our_entry, their_entry):
        ours.append(our_entry)
        theirs.append(their_entry)

    def add_entries(dims):
        nonlocal mask_used
        i = 0
        while i < len(dims):
            if draw(st.integers(0, 5)) == 0:
                add(None, None)
            n = shape[dims[i]]
            kinds = ["slice"] + (["int", "scalar"] if n else [])
            if advanced == "arrays" and n:
                kinds.append("array")
            if advanced == "mask" and not mask_used:
                kinds.append("mask")
            kind = draw(st.sampled_from(kinds))
            span = 1
            if kind == "slice":
                bound = st.none() | st.integers(-n - 2, n + 2)
                step = st.none() | st.integers(-3, 3).filter(bool)
                entry = slice(draw(bound), draw(bound), draw(step))
                add(entry, entry)
            elif kind in ("int", "scalar"):
                value = draw(st.integers(-n, n - 1))
                add(fnp.asarray(value) if kind == "scalar" else value, value)
            elif kind == "array":
                index_shape = draw(_broadcastable_to(advanced_shape))
                value = draw(fst.arrays(np.int32, index_shape, min_value=-n, max_value=n - 1))
                form = draw(st.sampled_from(["numpy", "funcgrad", "list"]))
                if form == "list" and value.size and value.ndim:
                    add(value.tolist(), value)
                else:
                    add(fnp.asarray(value) if form == "funcgrad" else value, value)
            else:
                span = draw(st.integers(1, len(dims) - i))
                mask = draw(fst.arrays(np.bool_, tuple(shape[d] for d in dims[i : i + span])))
                mask_used = True
                add(draw(st.sampled_from([mask, fnp.asarray(mask)])), mask)
            i += span

    add_entries(list(range(before)))
    if with_ellipsis:
        add(Ellipsis, Ellipsis)
    add_entries(list(range(ndim - (covered - before), ndim)))
    if draw(st.integers(0, 5)) == 0:
        add(None, None)
    if len(ours) == 1 and draw(st.booleans()):
        return ours[0], theirs[0]
    return tuple(ours), tuple(theirs)


def indexed_arrays(dtype=fst.any_dtypes):
    """An array and an index expression for it."""
    array = fst.arrays(dtype, fst.shapes(max_dims=4, max_side=4))
    return array.flatmap(lambda x: st.tuples(st.just(x), index_expressions(x.shape)))


def assert_same(actual, expected) -> None:
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected, strict=True)


# ---------------------------------------------------------------------------------------------
# Reading


@given(indexed_arrays())
def test_getitem_matches_numpy(args):
    x, (ours, theirs) = args
    assert_same(fnp.asarray(x)[ours], x[theirs])


@settings(max_examples=10)
@given(indexed_arrays())
def test_getitem_stages_like_eager(args):
    x, (ours, _) = args
    check_staging(lambda x: x[ours], x)


def test_static_slices_stage_as_slice_not_gather():
    x = np.arange(12.0).reshape(4, 3)
    names = [eqn.primitive.name for eqn in fg.make_jaxpr(lambda x: x[1:3])(x).jaxpr.eqns]
    assert names == ["slice"]
    names = {eqn.primitive.name for eqn in fg.make_jaxpr(lambda x: x[::-2, 1, None])(x).jaxpr.eqns}
    assert "gather" not in names and "slice" in names
    names = {eqn.primitive.name for eqn in fg.make_jaxpr(lambda x, i: x[i, :2])(x, 1).jaxpr.eqns}
    assert "dynamic_slice" in names and "gather" not in names


def test_traced_indices_read_like_numpy():
    x = np.arange(24.0).reshape(2, 3, 4)
    i, j = np.array([[1], [0]]), np.array([3, -1, 0])
    check_staging(lambda x, i, j: x[:, i, j], x, i, j)
    check_staging(lambda x, i, j: x[i, ::2, j], x, i, j)
    assert_same(fnp.asarray(x)[:, fnp.asarray(i), fnp.asarray(j)], x[:, i, j])
    check_staging(lambda x, k: x[k, -1], x, -1)


def test_advanced_indices_separated_by_a_slice_go_first():
    x = np.arange(60).reshape(3, 4, 5)
    for index in [
        (0, slice(None), [1, 2]),
        ([0, 1], slice(None), 0),
        ([0], slice(1, 3), [[1], [2]]),
    ]:
        assert fnp.asarray(x)[index].shape == x[index].shape
        assert_same(fnp.asarray(x)[index], x[index])


def test_out_of_bounds_reads_clamp_by_default_and_fill_when_asked():
    x = np.arange(10.0)
    fx = fnp.asarray(x)
    assert_same(fx[np.array([12, -15, 3])], x[[9, 0, 3]])
    assert_same(fx[12], x[9])
    filled = fx.at[np.array([12, -15, 3, -1])].get(mode="fill", fill_value=-1.0)
    assert_same(filled, np.array([-1.0, -1.0, 3.0, 9.0]))
    assert np.isnan(np.asarray(fx.at[np.array([10])].get(mode="fill"))).all()
    assert_same(fx.at[11].get(fill_value=7.0), np.float64(7.0))


def test_static_uint64_indices_past_int64_read_as_far_out_of_bounds():
    # A static index converted to int64 wrapped to a negative one: clamped to the start where
    # a traced index of the same value clamps to the end.
    x = fnp.arange(17.0)
    far = np.array([2**63 + 5, 3], np.uint64)
    assert_close(x[far], np.array([16.0, 3.0]))
    assert_close(fnp.take(x, far, mode="clip"), np.array([16.0, 3.0]))
    assert_close(fg.jit(lambda a, i: a[i])(x, far), np.array([16.0, 3.0]))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_static_narrow_unsigned_indices_out_of_bounds_clamp(dtype):
    # Bounding them by int64's largest value, a Python int, overflowed the narrow dtype.
    x = fnp.arange(3.0)
    index = np.array([0, 255, 2, 1], dtype)
    assert_same(x[index], np.array([0.0, 2.0, 2.0, 1.0], np.float32))
    filled = x.at[index].get(mode="fill", fill_value=-1.0)
    assert_same(filled, np.array([0.0, -1.0, 2.0, 1.0], np.float32))


def test_indexing_errors():
    x = fnp.zeros((2, 3))
    with pytest.raises(IndexError, match="too many indices.*shape \\(2, 3\\).*but 3 were indexed"):
        x[0, 1, 2]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="valid indices"):
        x[1.5]
    with pytest.raises(IndexError, match="valid indices.*float32"):
        x[fnp.ones(2)]
    with pytest.raises(IndexError, match=r"boolean index of shape \(3,\) .* shape \(2, 3\)"):
        x[np.array([True, False, True])]
    with pytest.raises(fg.errors.NonConcreteBooleanIndexError, match="concrete.*fnp.where"):
        fg.make_jaxpr(lambda x: x[x > 0])(x)
    with pytest.raises(IndexError, match="slice bounds must be static.*dynamic_slice"):
        fg.make_jaxpr(lambda x, i: x[i:])(x, 1)
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
        fnp.zeros((0, 3))[0]
    with pytest.raises(TypeError, match="immutable.*at\\[index\\].set"):
        x[0] = 1.0


# ---------------------------------------------------------------------------------------------
# Updating


def _positions(shape, index):
    """The flat position each element of x[index] comes from."""
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index]


@given(indexed_arrays(), st.sampled_from(["full", "scalar", "broadcast"]))
@example(
    args=(np.array([False, False]), ((np.array([True, False]),),) * 2), values_form="broadcast"
)
def test_at_set_matches_numpy_assignment(args, values_form):
    x, (ours, theirs) = args
    positions = _positions(x.shape, theirs)
    # Values that depend only on the target position, so repeated positions agree.
    values = ((positions * 7 + 3) % 50).astype(x.dtype)
    if values_form == "scalar" or values.size == 0:
        values = np.asarray(x.dtype.type(1))
    expected = x.copy()
    if values_form == "broadcast" and values.ndim:
        # One line of values, and a leading unit dimension that broadcasts away. NumPy's
        # assignment drops it too, except through a boolean mask, where it refuses a value of
        # more than one dimension (the dev profile drew a mask of one True): NumPy is given the
        # line itself.
        line = values[(0,) * (values.ndim - 1)]
        values = line[None]
        expected[theirs] = line
    else:
        expected[theirs] = values
    assert_same(fnp.asarray(x).at[ours].set(values), expected)


def test_at_updates_cast_the_values_to_the_arrays_dtype_first():
    """NumPy's assignment rule (docs/differences.md): JAX computes in the promoted dtype and
    casts back, so an int32 array updated with a float loses its untouched elements beyond
    float32's 24 bits (16777217 became 16777216)."""
    x = fnp.asarray(np.array([16777217, 0], np.int32))
    assert_same(x.at[1].set(2.5), np.array([16777217, 2], np.int32))
    assert_same(x.at[1].add(2.5), np.array([16777217, 2], np.int32))
    assert_same(x.at[0].multiply(0.5), np.array([0, 0], np.int32))


UPDATES = {
    "add": np.add.at,
    "multiply": np.multiply.at,
    "min": np.minimum.at,
    "max": np.maximum.at,
}


@given(indexed_arrays(fst.numeric_dtypes), st.sampled_from(sorted(UPDATES)), st.data())
def test_at_updates_apply_every_repeated_position_like_ufunc_at(args, method, data):
    x, (ours, theirs) = args
    shape = np.shape(x[theirs])
    values = data.draw(fst.arrays(x.dtype, shape, min_value=-3, max_value=3))
    expected = x.copy()
    UPDATES[method](expected, theirs, values)
    actual = getattr(fnp.asarray(x).at[ours], method)(values)
    assert_close(actual, expected, x.dtype, rtol=1e-5, atol=1e-5)


def test_at_divide_power_and_aliases():
    x = np.arange(1.0, 7.0)
    fx = fnp.asarray(x)
    assert_same(fx.at[np.array([1, 1, 4])].divide(2.0), x / np.array([1, 4, 1, 1, 2, 1]))
    assert_same(fx.at[2:].power(2), x ** np.array([1, 1, 2, 2, 2, 2]))
    assert_same(fx.at[0].mul(3.0), fx.at[0].multiply(3.0))
    ints = fnp.arange(6)
    assert_same(ints.at[1].divide(2), np.array([0, 0, 2, 3, 4, 5], np.int32))


def test_at_apply_applies_the_function_once_per_time_a_position_is_given():
    x = np.arange(6.0)

    def twice_plus_one(v):
        return v * 2 + 1

    expected = x.copy()
    for i in (0, 0, 4, -1):  # (one at a time, as a Python loop over the positions)
        expected[i] = twice_plus_one(expected[i])
    fx = fnp.asarray(x)
    assert_same(fx.at[np.array([0, 0, 4, -1])].apply(twice_plus_one), expected)
    assert_same(fg.jit(lambda v: v.at[np.array([0, 0, 4, -1])].apply(twice_plus_one))(x), expected)
    assert_same(fx.at[1:3].apply(fnp.negative), np.array([0.0, -1, -2, 3, 4, 5]))
    assert_same(fx.at[9].apply(fnp.exp), x)  # (out of bounds: dropped)
    assert_same(fx.at[9].apply(fnp.exp, mode="clip"), np.append(x[:5], np.exp(5.0)))
    rows = np.arange(6.0).reshape(2, 3)
    batched = fg.vmap(lambda r: r.at[1].apply(fnp.sin))(rows)
    assert_same(batched, np.stack([np.where(np.arange(3) == 1, np.sin(r), r) for r in rows]))
    _, tangent = fg.jvp(lambda v: v.at[2].apply(fnp.sin), (x,), (np.ones(6),))
    assert_same(tangent, np.where(np.arange(6) == 2, np.cos(2.0), 1.0))
    # Static positions: the counts are known while tracing, so reverse mode applies too (the
    # chain rule through sin twice at x[1]).
    grad = fg.grad(lambda v: v.at[np.array([1, 1])].apply(fnp.sin).sum())(x)
    assert_same(grad, np.where(np.arange(6) == 1, np.cos(np.sin(1.0)) * np.cos(1.0), 1.0))
    with pytest.raises(TypeError, match="must keep the operand's shape and dtype"):
        fx.at[0].apply(lambda v: v.sum())


def test_at_updates_cast_values_to_the_array_dtype_and_broadcast():
    x = fnp.zeros((2, 3), dtype=fnp.int8)
    y = x.at[:, 1].set(np.array([2.7, -1.2]))
    assert y.dtype == np.int8
    assert_same(y, np.array([[0, 2, 0], [0, -1, 0]], np.int8))
    assert_same(x.at[0].add(np.ones((1, 1, 3))), np.array([[1, 1, 1], [0, 0, 0]], np.int8))
    with pytest.raises(ValueError, match=r"values of shape \(4,\) .* shape \(2,\)"):
        x.at[:, 0].set(np.ones(4))


def test_out_of_bounds_updates_are_dropped_or_clipped():
    x = np.zeros(5)
    fx = fnp.asarray(x)
    assert_same(fx.at[np.array([1, 7, -9])].set(1.0), np.array([0.0, 1, 0, 0, 0]))
    assert_same(fx.at[9].add(1.0), x)
    assert_same(fx.at[np.array([7, -9])].set(1.0, mode="clip"), np.array([1.0, 0, 0, 0, 1]))
    assert_same(fx.at[-1].set(2.0), np.array([0.0, 0, 0, 0, 2]))


def test_boolean_updates_of_the_whole_array_combine_as_scatters_do():
    # x.at[...].add/multiply of booleans raised ("add does not accept dtype bool") where
    # x.at[0] (a scatter) gave NumPy's or and and.
    x = np.array([[False, True, False], [True, True, False]])
    cases = [
        (method, combine, value, index)
        for method, combine in (("add", np.add), ("multiply", np.multiply))
        for value in (True, False)
        for index in (Ellipsis, slice(None), None)
    ]
    for method, combine, value, index in cases:
        expected = x.copy()
        combine.at(expected, (Ellipsis,) if index is None else index, value)

        def update(a, method=method, value=value, index=index):
            return getattr(a.at[index], method)(value)

        assert_same(update(fnp.asarray(x)), expected)
        assert_same(fg.jit(update)(x), expected)


def test_updates_at_an_integer_into_an_empty_axis_raise_as_reads_do():
    # x[0] raised IndexError, x.at[0].set(v) returned x unchanged (JAX raises for both).
    x = fnp.zeros((0, 3))
    for update in (
        lambda a: a.at[0].set(1.0),
        lambda a: a.at[-1].add(1.0, mode="drop"),
        lambda a: a.at[0, 1].max(1.0),
    ):
        with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
            update(x)
        with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
            fg.jit(update)(x)
    with pytest.raises(IndexError, match=r"index \(traced\) is out of bounds"):
        fg.jit(lambda a, i: a.at[i].set(1.0))(x, 0)
    assert_same(x.at[:, 1].set(2.0), np.zeros((0, 3), np.float32))


def test_updates_stage_like_eager():
    x = np.arange(24.0).reshape(2, 3, 4)
    i = np.array([2, 0, 2])
    check_staging(lambda x, i: x.at[:, i, ::-2].add(1.0), x, i)
    check_staging(lambda x, k: x.at[k, 1:3].set(-1.0), x, 1)
    check_staging(lambda x, v: x.at[None, 1, ..., 3].max(v), x, np.float64(2.5))
    check_staging(lambda x: x.at[...].multiply(2.0), x)
    names = {e.primitive.name for e in fg.make_jaxpr(lambda x: x.at[0, ::2].set(0.0))(x).jaxpr.eqns}
    assert names == {"broadcast_in_dim", "scatter"}


# ---------------------------------------------------------------------------------------------
# take, take_along_axis, index constructors


@given(st.data())
def test_take_matches_numpy(data):
    x = data.draw(
        fst.arrays(fst.any_dtypes, fst.shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    )
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1))
    n = x.size if axis is None else x.shape[axis]
    indices = data.draw(
        fst.arrays(np.int32, fst.shapes(max_dims=2, max_side=3), min_value=-n, max_value=n - 1)
    )
    assert_same(fnp.take(x, indices, axis), np.take(x, indices, axis))
    assert_same(fnp.asarray(x).take(indices, axis), np.take(x, indices, axis))
    wrapped = indices * 3 + 1
    assert_same(fnp.take(x, wrapped, axis, mode="wrap"), np.take(x, wrapped, axis, mode="wrap"))
    assert_same(fnp.take(x, indices, axis, mode="clip"), np.take(x, indices, axis, mode="clip"))
    assert_same(fnp.take(x, wrapped, axis, mode="clip"), np.take(x, wrapped, axis, mode="clip"))


def test_take_clip_clamps_negative_indices_to_zero():
    # As NumPy's and JAX's: take(x, -1, mode="clip") is x[0], not x[-1].
    x = np.arange(12.0).reshape(3, 4)
    indices = np.array([-7, -1, 0, 2, 5])
    for axis in (None, 0, 1):
        expected = np.take(x, indices, axis, mode="clip")
        assert_same(fnp.take(x, indices, axis, mode="clip"), expected)
        jitted = fg.jit(lambda x, i, axis=axis: fnp.take(x, i, axis, mode="clip"))
        assert_same(jitted(x, indices), expected)


def test_take_fills_out_of_bounds_by_default():
    x = np.arange(4.0)
    out = np.asarray(fnp.take(x, np.array([0, 4, -5])))
    assert out[0] == 0.0 and np.isnan(out[1:]).all()
    assert_same(fnp.take(np.arange(4), 9, fill_value=-7), np.int64(-7))
    clipped = np.array([-1, -9, 5, 2])
    assert_same(fnp.take(x, clipped, mode="clip"), np.take(x, clipped, mode="clip"))
    with pytest.raises(NotImplementedError, match="raise"):
        fnp.take(x, 1, mode="raise")


@given(st.data())
def test_take_along_axis_matches_numpy(data):
    x = data.draw(
        fst.arrays(fst.any_dtypes, fst.shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    )
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    shape = [data.draw(st.sampled_from([1, s])) for s in x.shape]
    shape[axis] = data.draw(st.integers(0, 5))
    indices = data.draw(fst.arrays(np.int64, tuple(shape), min_value=-n, max_value=n - 1))
    assert_same(fnp.take_along_axis(x, indices, axis), np.take_along_axis(x, indices, axis))
    order = np.argsort(x, axis=axis)
    assert_same(fnp.take_along_axis(x, order, axis), np.take_along_axis(x, order, axis))


def test_take_along_axis_modes_past_the_line():
    """Indices past a line (a gather batched over the other axes) fill with NaN by default, as
    JAX's do, clamp with mode='clip' and wrap with mode='wrap'; their gradient drops them."""
    x = np.arange(6.0).reshape(2, 3)
    i = np.array([[5, -4], [0, 2]])
    assert_same(fnp.take_along_axis(x, i, 1), np.array([[np.nan, np.nan], [3.0, 5.0]]))
    compiled = fg.jit(lambda v, j: fnp.take_along_axis(v, j, 1))(x, i)
    assert_same(compiled, np.array([[np.nan, np.nan], [3.0, 5.0]]))
    assert_same(fnp.take_along_axis(x, i, 1, mode="clip"), np.array([[2.0, 0.0], [3.0, 5.0]]))
    assert_same(fnp.take_along_axis(x, i, 1, mode="wrap"), np.array([[2.0, 2.0], [3.0, 5.0]]))
    weights = np.array([[1.0, 2.0], [3.0, 4.0]])
    gradient = fg.grad(lambda v: (fnp.take_along_axis(v, i, 1) * weights).sum())(x)
    assert_same(gradient, np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]]))


def test_take_along_axis_errors_and_tracing():
    with pytest.raises(ValueError, match=r"indices of shape \(2,\) and arr of shape \(2, 3\)"):
        fnp.take_along_axis(np.zeros((2, 3)), np.zeros(2, int), 1)
    x, i = np.arange(6.0).reshape(2, 3), np.array([[2, 0], [1, 1]])
    check_staging(lambda x, i: fnp.take_along_axis(x, i, 1), x, i)
    check_staging(lambda x, i: fnp.take(x, i, 0, mode="clip"), x, i)


def test_index_constructors_match_numpy():
    rows, cols = fnp.ix_([0, 2], np.array([True, False, True, True]))
    x = np.arange(20).reshape(4, 5)
    assert_same(fnp.asarray(x)[rows, cols], x[np.ix_([0, 2], [0, 2, 3])])
    for ours, theirs in zip(fnp.ix_([1, 0], [2], [0, 1, 2]), np.ix_([1, 0], [2], [0, 1, 2])):
        assert ours.shape == theirs.shape
        assert_same(ours, theirs.astype(np.int32))
    # empty indices of any dtype are empty default ints (int16 stayed int16, float raised)
    empty = fnp.ix_(np.zeros(0, np.int16), np.zeros(0), [])
    assert [(m.dtype, m.shape) for m in empty] == [
        (np.int32, (0, 1, 1)),
        (np.int32, (1, 0, 1)),
        (np.int32, (1, 1, 0)),
    ]
    for ours, theirs in [
        (fnp.diag_indices(3, 3), np.diag_indices(3, 3)),
        (fnp.diag_indices_from(np.zeros((2, 2))), np.diag_indices_from(np.zeros((2, 2)))),
        (fnp.tril_indices(4, -1, 5), np.tril_indices(4, -1, 5)),
        (fnp.triu_indices(3, 1), np.triu_indices(3, 1)),
        (fnp.tril_indices_from(x, 1), np.tril_indices_from(x, 1)),
        (fnp.triu_indices_from(x), np.triu_indices_from(x)),
    ]:
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same(a, b.astype(np.int32))
    with pytest.raises(ValueError, match=r"equal length, got shape \(2, 3\)"):
        fnp.diag_indices_from(np.zeros((2, 3)))


@given(st.data())
def test_unravel_index_matches_numpy_in_bounds(data):
    shape = data.draw(fst.shapes(min_dims=1, max_dims=3, min_side=1))
    size = int(np.prod(shape))
    flat = data.draw(fst.arrays(np.int32, fst.shapes(max_dims=2), min_value=0, max_value=size - 1))
    for ours, theirs in zip(fnp.unravel_index(flat, shape), np.unravel_index(flat, shape)):
        assert_same(ours, theirs.astype(np.int32))


def test_unravel_index_wraps_negatives_and_clamps_like_jax():
    coords = fnp.unravel_index(np.array([-1, 7, 100, -100]), (2, 3))
    assert_same(np.stack([np.asarray(c) for c in coords]), np.array([[1, 1, 1, 0], [2, 2, 2, 0]]))


@pytest.mark.parametrize(
    "index", [0, -1, (slice(1, None),), np.array([0, 2]), (np.array([1, 0]), slice(None))]
)
def test_derivatives_of_multiply_updates_at_known_unique_indices(index):
    from funcgrad.test_util import check_grads

    x = np.arange(1.0, 7.0).reshape(3, 2)
    values = np.full(np.shape(x[index]), 1.5)

    def update(x, values):
        return fnp.asarray(x).at[index].multiply(values)

    np.testing.assert_allclose(np.asarray(update(x, values)), _multiplied(x, index, values))
    check_grads(update, (x, values), order=2)


def _multiplied(x, index, values):
    out = x.copy()
    out[index] *= values
    return out
