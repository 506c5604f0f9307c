"""Corners of NumPy indexing the main suites do not reach: index arrays of every integer dtype
out of bounds under each mode, narrow indices into long axes, unsigned indices past the signed
range, put/place/choose/nonzero/compress at their edges, and at[...].apply under jit.

References are NumPy (values; for the modes, NumPy on indices brought into range as the mode
says), a Python loop over the lanes (vmap) and NumPy's add.at of the cotangent (the derivative
of a gather, a linear function)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from tests import strategies as fst
from tests.checks import jit_backend

INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def assert_same(actual, expected) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected, strict=True)


COMPILED = ("numpy", "llvm")
EMULATED = (*COMPILED, "cuda_emulator")  # (for the tests of few programs)


def on_backends(fun, *args, backends=COMPILED):
    """fun(*args) eagerly, then jitted on each backend: all must agree exactly."""
    eager = fun(*(fnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args))
    for backend in backends:
        with jit_backend(backend):
            compiled = fg.jit(fun)(*args)
        for e, c in zip(fg.tree_util.tree_leaves(eager), fg.tree_util.tree_leaves(compiled)):
            assert_same(c, e)
    return eager


# ---------------------------------------------------------------------------------------------
# Index arrays of every integer dtype, out of bounds, under each mode


@st.composite
def out_of_bounds_indices(draw):
    """An operand length, index values near both ends of the axis and of the index dtype."""
    n = draw(st.integers(1, 6))
    dtype = np.dtype(draw(st.sampled_from(INDEX_DTYPES)))
    info = np.iinfo(dtype)
    near = [0, 1, n - 1, n, n + 1, -1, -n, -n - 1, info.min, info.max, info.max - 1]
    candidates = sorted({v for v in near if info.min <= v <= info.max})
    values = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=6))
    return n, np.array(values, dtype)


def _positions(indices: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each index lands (negative ones counted once from the end) and whether in bounds."""
    wide = indices.astype(object)  # (exact for uint64)
    wrapped = np.array([v + n if v < 0 else v for v in wide], dtype=object)
    inside = np.array([0 <= v < n for v in wrapped], bool)
    clamped = np.array([min(max(v, 0), n - 1) for v in wrapped], np.int64)
    return clamped, inside


@given(out_of_bounds_indices(), st.sampled_from([None, "clip", "fill", "drop"]), st.booleans())
def test_reads_of_any_index_dtype_clamp_or_fill(case, mode, traced):
    n, indices = case
    x = np.arange(1.0, n + 1, dtype=np.float32)
    clamped, inside = _positions(indices, n)
    filled = mode in ("fill", "drop")
    expected = np.where(inside, x[clamped], np.float32(-7.0)) if filled else x[clamped]

    def read(a, i):
        return a.at[i].get(mode=mode, fill_value=-7.0 if filled else None)

    if traced:
        assert_same(on_backends(read, x, indices), expected)
    else:
        assert_same(on_backends(lambda a: read(a, indices), x), expected)
    # The derivative puts each cotangent back where its element was read (none for a fill).
    weights = np.arange(1.0, indices.size + 1)
    grad = fg.grad(lambda a: (read(a, indices) * weights).sum())(x.astype(np.float64))
    read_from = inside if filled else slice(None)
    expected_grad = np.zeros(n)
    np.add.at(expected_grad, clamped[read_from], weights[read_from])
    assert_same(grad, expected_grad)


@given(out_of_bounds_indices(), st.sampled_from(["add", "max", "multiply"]), st.booleans())
def test_updates_of_any_index_dtype_drop_or_clip(case, method, clip):
    n, indices = case
    x = np.arange(1, n + 1, dtype=np.int32)
    values = np.arange(2, indices.size + 2, dtype=np.int32)
    clamped, inside = _positions(indices, n)
    expected = x.copy()
    combine = {"add": np.add, "max": np.maximum, "multiply": np.multiply}[method]
    keep = slice(None) if clip else inside
    combine.at(expected, clamped[keep], values[keep])
    mode = "clip" if clip else None

    def update(a, i, v):
        return getattr(a.at[i], method)(v, mode=mode)

    assert_same(on_backends(update, x, indices, values), expected)
    # vmap over the values: each lane as alone.
    lanes = np.stack([values, values * 3])
    batched = fg.vmap(update, in_axes=(None, None, 0))(x, indices, lanes)
    assert_same(batched, np.stack([update(fnp.asarray(x), indices, lane) for lane in lanes]))


# ---------------------------------------------------------------------------------------------
# Python scalars meeting narrow arrays: converted to the array's dtype first


SCALARS_MEETING_ARRAYS = [
    (np.int8, -2.7),
    (np.uint32, 4294967295),
    (np.uint8, 255.9),
    (ml_dtypes.bfloat16, 257),  # (256 in bfloat16: a tie, to even)
    (ml_dtypes.bfloat16, 1.00390625),
    (np.float16, 65519.0),  # (65504, not infinity, in float16)
    (np.float16, 2049),
]


@pytest.mark.parametrize("dtype, scalar", SCALARS_MEETING_ARRAYS)
def test_python_scalars_take_the_arrays_dtype_in_updates_and_arithmetic(dtype, scalar):
    x = np.array([1, 2, 3]).astype(dtype)
    as_dtype = np.asarray(scalar).astype(dtype)
    written = x.copy()
    written[1] = as_dtype
    assert_same(on_backends(lambda a: a.at[1].set(scalar), x, backends=EMULATED), written)
    if isinstance(scalar, float) and np.dtype(dtype).kind in "iu":
        return  # (an int array meets a float in float32)
    wide = np.float32 if np.dtype(dtype).kind not in "iu" else np.int64
    total = (x.astype(wide) + as_dtype.astype(wide)).astype(dtype)
    assert_same(on_backends(lambda a: a + scalar, x, backends=EMULATED), total)
    added = on_backends(lambda a: a.at[1].add(scalar), x, backends=EMULATED)
    assert_same(added, np.where(np.arange(3) == 1, total, x))


# ---------------------------------------------------------------------------------------------
# Narrow index dtypes meeting long axes (the size did not fit the index dtype)


NARROW = [np.int8, np.uint8, np.int16]


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_indices_wrap_and_clip_into_a_long_axis(dtype):
    # An axis of 300 met int8 or uint8 indices as a Python int 300 they cannot hold: an
    # OverflowError, where NumPy gives the answer.
    x = np.arange(300.0, dtype=np.float32)
    info = np.iinfo(dtype)
    indices = np.array([info.min, info.max, 0, 5], dtype)
    values = np.array([-1.0, -2.0, -3.0, -4.0], np.float32)
    choices = [np.full(4, k, np.float32) for k in range(200)]  # (more than NumPy's 64)
    for mode in ("wrap", "clip"):
        expected = np.take(x, indices, mode=mode)
        assert_same(fnp.take(x, indices, mode=mode), expected)  # (static indices)

        def take(a, i, mode=mode):
            return fnp.take(a, i, mode=mode)

        def take_along(a, i, mode=mode):
            return fnp.take_along_axis(a, i, 0, mode=mode)

        def put(a, i, mode=mode):
            return fnp.put(a, i, values, mode, inplace=False)

        def choose(i, mode=mode):
            return fnp.choose(i, choices, mode=mode)

        def ravel(i, j, mode=mode):
            return fnp.ravel_multi_index((i, j), (300, 5), mode=mode)

        assert_same(on_backends(take, x, indices), expected)
        taken = on_backends(take_along, x, indices)
        if mode == "wrap":  # (take_along_axis counts negative indices from the end first)
            assert_same(taken, expected)
        written = x.copy()
        np.put(written, indices, values, mode=mode)
        assert_same(on_backends(put, x, indices), written)
        wide = indices.astype(np.int64)
        chosen = wide % 200 if mode == "wrap" else np.clip(wide, 0, 199)
        assert_same(on_backends(choose, indices), chosen.astype(np.float32))
        coords = (indices, np.array([1, 2, 3, 4], dtype))
        flat = np.ravel_multi_index(coords, (300, 5), mode=mode).astype(np.int32)
        assert_same(on_backends(ravel, *coords), flat)


@pytest.mark.parametrize(
    "dtype, far", [(np.uint32, 2**31), (np.uint32, 2**32 - 1), (np.uint64, 2**63 + 5)]
)
def test_unravel_index_of_unsigned_indices_past_the_signed_range_clamps_to_the_end(dtype, far):
    # They were converted to int32 (int64) first, became negative and clamped to the start.
    indices = np.array([far, 3], dtype)
    coords = on_backends(lambda i: fnp.unravel_index(i, (2, 5)), indices, backends=EMULATED)
    expected = np.unravel_index(np.array([9, 3]), (2, 5))
    for ours, theirs in zip(coords, expected):
        np.testing.assert_array_equal(np.asarray(ours), theirs)


# ---------------------------------------------------------------------------------------------
# put, place, choose, nonzero, compress


def test_put_with_no_values_or_no_indices_puts_nothing():
    # Empty values were resized to zeros and written; an empty list of indices became a float
    # array and raised that indices must be integers.
    x = np.arange(6.0).reshape(2, 3)
    for ind, v in [([1, 2], []), ([], [1.0]), (np.zeros(0, np.int8), 5.0)]:
        expected = x.copy()
        np.put(expected, ind, v)
        assert_same(
            on_backends(lambda a, ind=ind, v=v: fnp.put(a, ind, v, inplace=False), x), expected
        )
    with pytest.raises(TypeError, match="put: indices must be integers, got dtype float"):
        fnp.put(x, [1.5], 1.0, inplace=False)
    with pytest.raises(ValueError, match="put: mode must be 'clip' or 'wrap'"):
        fnp.put(x, [1], [], mode="raise", inplace=False)


@st.composite
def choose_cases(draw):
    """An index array and choices, each of a shape that broadcasts with the others."""
    shape = draw(st.lists(st.integers(1, 3), max_size=3))

    def part() -> tuple[int, ...]:
        k = draw(st.integers(0, len(shape)))
        return tuple(draw(st.sampled_from([1, s])) for s in shape[len(shape) - k :])

    n = draw(st.integers(1, 3))
    a = draw(fst.arrays(np.int32, part(), min_value=0, max_value=n - 1))
    choices = [draw(fst.arrays(np.float32, part())) for _ in range(n)]
    return a, choices


@given(choose_cases())
def test_choose_broadcasts_each_choice_with_the_index(case):
    # A choice of fewer dimensions than the index was stacked first, so that the axis of the
    # stack lined up with the index's first axis: wrong values, or a broadcasting error.
    a, choices = case
    expected = np.choose(a, choices)
    for mode in ("clip", "wrap"):
        assert_same(
            on_backends(lambda i, mode=mode: fnp.choose(i, choices, mode=mode), a), expected
        )
    assert_same(fnp.choose(a, choices), expected)


def test_place_and_piecewise_take_boolean_masks_under_strict_promotion():
    # They compared the mask with a Python 0, which a bool array may not meet there.
    x = fnp.arange(-2.0, 3.0)
    with fg.numpy_dtype_promotion("strict"):
        placed = fnp.place(x, x > 0, fnp.asarray([5.0, 6.0]), inplace=False)
        pieces = fnp.piecewise(x, [x < 0, x >= 0], [-1.0, 1.0])
    assert_same(placed, np.array([-2.0, -1.0, 0.0, 5.0, 6.0], np.float32))
    assert_same(pieces, np.array([-1.0, -1.0, 1.0, 1.0, 1.0], np.float32))


def test_place_keeps_a_weak_array_weak():
    weak = fg.jit(
        lambda s: fnp.place(fnp.broadcast_to(s, (3,)), [True, False, True], 2.0, inplace=False)
    )(1.0)
    assert weak.weak_type
    assert (weak + np.ones(3, np.float16)).dtype == np.float16


def test_nonzero_and_compress_fill_with_traced_values():
    a = np.array([[0, 3, 0, 4], [5, 0, 0, 6]], np.int8)
    rows, cols = np.nonzero(a)

    def padded(coords, fill):
        return np.concatenate([coords, np.full(6 - coords.size, fill)]).astype(np.int32)

    ours = on_backends(
        lambda v, f: fnp.nonzero(v, size=6, fill_value=f), a, np.int32(-1), backends=EMULATED
    )
    assert_same(ours[0], padded(rows, -1))
    assert_same(ours[1], padded(cols, -1))
    ours = on_backends(lambda v, f: fnp.nonzero(v, size=6, fill_value=(f, f + 1)), a, np.int32(7))
    assert_same(ours[0], padded(rows, 7))
    assert_same(ours[1], padded(cols, 8))
    condition = np.array([True, False, True, True])
    compressed = on_backends(
        lambda v, f: fnp.compress(condition, v, axis=1, size=5, fill_value=f),
        a,
        np.int32(-9),
        backends=EMULATED,
    )
    expected = np.concatenate(
        [np.compress(condition, a, axis=1), np.full((2, 2), -9, np.int8)], axis=1
    )
    assert_same(compressed, expected)
    with pytest.raises(ValueError, match="one scalar for each of the 2 axes"):
        fnp.nonzero(a, size=3, fill_value=(1, 2, 3))
    # A gather's fill value is a parameter of the program: a traced one is named as such.
    with pytest.raises(fg.errors.ConcretizationTypeError, match="fill_value of a gather.*static"):
        fg.jit(lambda v, f: fnp.take(v, 9, fill_value=f))(a, np.int8(1))


# ---------------------------------------------------------------------------------------------
# Errors, and at[...].apply under jit


def test_index_arrays_that_do_not_broadcast_raise_an_index_error():
    x = fnp.zeros((3, 4))
    for index in [([0, 1], [0, 1, 2]), (np.array(False), [0, 1]), (np.ones(3, bool), [1, 2])]:
        pattern = "shape mismatch: index arrays of shapes .* do not broadcast together"
        with pytest.raises(IndexError, match=pattern):
            x[index]
        with pytest.raises(IndexError, match=pattern):
            x.at[index].set(1.0)


def test_at_apply_differentiates_in_reverse_mode_under_jit_at_static_indices():
    # Eagerly the counts of a static index were known and grad worked; under jit they were
    # traced, so the applications became a while loop, which reverse mode cannot transpose.
    x = np.arange(6.0)

    def f(v):
        return v.at[np.array([1, 1, 4])].apply(fnp.sin).sum()

    expected = np.ones(6)
    expected[1] = np.cos(np.sin(1.0)) * np.cos(1.0)
    expected[4] = np.cos(4.0)
    np.testing.assert_allclose(np.asarray(fg.grad(f)(x)), expected, rtol=1e-12)
    for backend in ("numpy", "llvm"):
        with jit_backend(backend):
            np.testing.assert_allclose(np.asarray(fg.jit(fg.grad(f))(x)), expected, rtol=1e-12)
    numbers = fg.lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    indices = np.array([[1], [1], [4]])

    def g(v):
        return fg.lax.scatter_apply(v, indices, fnp.sin, numbers, update_shape=(3,)).sum()

    np.testing.assert_allclose(np.asarray(fg.jit(fg.grad(g))(x)), expected, rtol=1e-12)
