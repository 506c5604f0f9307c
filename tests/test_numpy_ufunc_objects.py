"""funcgrad.numpy's ufunc objects (`fnp.add.reduce`, `fnp.maximum.at`, `fnp.frompyfunc`, ...)
against NumPy's own ufunc methods; jit against eager, derivatives against central
differences, vmap against a Python loop.

Values are compared with NumPy's; dtypes follow funcgrad's rules (as JAX's: integer sums in
int32 where NumPy uses int64), so for integers only the kind of the dtype is compared.
"""

from __future__ import annotations

import inspect
import pickle

import numpy as np
import pytest

import funcgrad.numpy as fnp
from funcgrad.numpy import ufuncs
from funcgrad.test_util import check_grads
from tests.checks import assert_close, check_batching, check_staging

UFUNC_NAMES = [
    "add",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "logaddexp",
    "logaddexp2",
    "logical_and",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "subtract",
]
BINARY_NAMES = [name for name in UFUNC_NAMES if name != "negative"]

# The input dtypes each ufunc is checked on.
DTYPES = {
    "add": ["float32", "int32", "bool"],
    "multiply": ["float32", "int32", "bool"],
    "maximum": ["float32", "int32", "bool"],
    "minimum": ["float32", "int16"],
    "subtract": ["float32", "int32"],
    "logaddexp": ["float32", "float64"],
    "logaddexp2": ["float32"],
    "logical_and": ["bool", "int32", "float32"],
    "logical_or": ["bool", "float32"],
    "logical_xor": ["bool", "int32"],
    "bitwise_and": ["int32", "uint8", "bool"],
    "bitwise_or": ["int32", "uint8"],
    "bitwise_xor": ["int16", "bool"],
}
CASES = [(name, dtype) for name in BINARY_NAMES for dtype in DTYPES[name]]


def sample(shape, dtype, seed=0):
    """Values whose sums and products stay exact in the dtypes above (for multiply: -2..2)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        low = 0 if np.dtype(dtype).kind == "u" else -2
        return rng.integers(low, 3, shape).astype(dtype)
    return rng.uniform(0.5, 1.5, shape).astype(dtype) * rng.choice([-1, 1], shape)


def assert_like_numpy(got, want):
    """Equal values; the same dtype for floats, the same kind of dtype otherwise."""
    want = np.asarray(want)
    if want.dtype.kind == "f":
        assert_close(got, want, dtype=want.dtype)
    else:
        assert np.asarray(got).dtype.kind == want.dtype.kind, (np.asarray(got).dtype, want.dtype)
        assert_close(got, want)


# ---------------------------------------------------------------------------------------------
# The objects


def test_the_ufunc_objects_carry_numpys_attributes_and_call_the_elementwise_functions():
    x, y = sample((3, 4), "int32", 1), sample((4,), "int32", 2)
    for name in UFUNC_NAMES:
        ours, theirs = getattr(fnp, name), getattr(np, name)
        assert isinstance(ours, fnp.ufunc) and ours.__name__ == name
        assert (ours.nin, ours.nout) == (theirs.nin, theirs.nout), name
        assert ours.identity == theirs.identity, (name, ours.identity, theirs.identity)
        assert repr(ours) == f"<ufunc '{name}'>"
        assert pickle.loads(pickle.dumps(ours)) is ours
        plain = getattr(ufuncs, name)
        assert inspect.signature(ours) == inspect.signature(plain)
        args = (x, y)[: ours.nin]
        np.testing.assert_array_equal(ours(*args), plain(*args))
        np.testing.assert_allclose(ours(*args), theirs(*args), rtol=1e-6)  # logaddexp: float32
    assert not isinstance(fnp.sin, fnp.ufunc)


def test_at_refuses_to_work_in_place_and_checks_its_values_argument():
    x = fnp.zeros(3)
    with pytest.raises(NotImplementedError, match="inplace=False"):
        fnp.add.at(x, [0], 1.0)
    with pytest.raises(TypeError, match="values b"):
        fnp.add.at(x, [0], inplace=False)
    with pytest.raises(TypeError, match="no values"):
        fnp.negative.at(x, [0], 1.0, inplace=False)
    for method in ("reduce", "accumulate", "outer"):
        with pytest.raises(ValueError, match="binary"):
            getattr(fnp.negative, method)(x, *([x] if method == "outer" else []))
    with pytest.raises(ValueError, match="binary"):
        fnp.negative.reduceat(x, [0])


# ---------------------------------------------------------------------------------------------
# reduce

REDUCE_ARGUMENTS = [
    dict(axis=0),
    dict(axis=-1, keepdims=True),
    dict(axis=None),
    dict(axis=(0, 2)),
    dict(axis=(-1, 0), keepdims=True),
    dict(axis=1, initial=1),
    dict(axis=1, initial=1, where=np.array([True, False, True, True])),
    dict(axis=None, where=np.array([[True], [False], [True]])),
]


@pytest.mark.parametrize("name,dtype", CASES)
def test_reduce_matches_numpys(name, dtype):
    x = sample((2, 3, 4), dtype, 3)
    for kwargs in REDUCE_ARGUMENTS:
        try:
            want = getattr(np, name).reduce(x, **kwargs)
        except (ValueError, TypeError):
            # No identity: NumPy refuses where without initial (and, for subtract, several axes).
            with pytest.raises(ValueError, match="initial|one axis at a time"):
                getattr(fnp, name).reduce(x, **kwargs)
            continue
        assert_like_numpy(getattr(fnp, name).reduce(x, **kwargs), want)


@pytest.mark.parametrize("name", BINARY_NAMES)
def test_reduce_of_an_empty_axis_gives_the_identity_or_a_clear_error(name):
    x = sample((0, 3), DTYPES[name][-1])
    if getattr(np, name).identity is None:
        with pytest.raises(ValueError):
            getattr(np, name).reduce(x)
        with pytest.raises(ValueError, match="initial"):
            getattr(fnp, name).reduce(x)
        x = x.astype(np.float32)
        assert_like_numpy(getattr(fnp, name).reduce(x, initial=2.0), np.full(3, 2.0, np.float32))
    else:
        assert_like_numpy(getattr(fnp, name).reduce(x), getattr(np, name).reduce(x))


def test_reduce_with_a_dtype_converts_the_elements_first():
    x = np.array([[0.6, 0.7], [1.9, -0.2]], np.float32)
    assert_close(fnp.add.reduce(x, dtype=np.int32), np.add.reduce(x.astype(np.int32)), "int32")
    got = fnp.maximum.reduce(x, axis=1, dtype=np.int16)
    assert_close(got, np.maximum.reduce(x.astype(np.int16), axis=1), "int16")
    got = fnp.subtract.reduce(x, axis=1, dtype=np.int32)
    assert_close(got, np.subtract.reduce(x.astype(np.int32), axis=1), "int32")


# ---------------------------------------------------------------------------------------------
# accumulate


@pytest.mark.parametrize("name,dtype", CASES)
def test_accumulate_matches_numpys(name, dtype):
    x = sample((3, 4), dtype, 4)
    for axis in (0, 1, -1):
        assert_like_numpy(
            getattr(fnp, name).accumulate(x, axis), getattr(np, name).accumulate(x, axis)
        )
    empty = sample((0, 2), dtype)
    assert getattr(fnp, name).accumulate(empty).shape == (0, 2)


def test_accumulate_with_a_dtype_and_its_errors():
    x = np.array([0.6, 1.7, -2.2], np.float32)
    for name in ("add", "maximum", "subtract"):
        want = getattr(np, name).accumulate(x.astype(np.int32))
        assert_close(getattr(fnp, name).accumulate(x, dtype=np.int32), want, "int32")
    with pytest.raises(ValueError, match="single integer"):
        fnp.add.accumulate(np.ones((2, 2)), axis=None)
    with pytest.raises(TypeError, match="rank-0"):
        fnp.subtract.accumulate(np.float32(1.0))


# ---------------------------------------------------------------------------------------------
# at

AT_INDICES = [
    np.array([0, 2, 0, 0, -1]),  # repeated (and negative) positions accumulate
    (np.array([1, 1, 0]), np.array([2, 2, 3])),
    (slice(None), np.array([3, 3])),
    (np.array([[0, 2], [0, 2]]), slice(1, 3)),
    (2, 1),
    (Ellipsis, 0),
]


def numpy_at(name, x, indices, *values):
    result = x.copy()
    getattr(np, name).at(result, indices, *values)
    return result


@pytest.mark.parametrize("name", UFUNC_NAMES)
def test_at_matches_numpys_with_repeated_positions_slices_and_tuples(name):
    dtype = DTYPES[name][0] if name != "negative" else "float32"
    x = sample((3, 4), dtype, 5)
    for indices in AT_INDICES:
        values = ()
        if name != "negative":
            shape = np.empty((3, 4))[indices].shape
            values = (sample(shape, dtype, 6),)
        got = getattr(fnp, name).at(x, indices, *values, inplace=False)
        assert_close(got, numpy_at(name, x, indices, *values), dtype=x.dtype)
    if name != "negative":
        # One value broadcast to every position, and positions named twice.
        scalar = sample((), dtype, 7)[()]
        got = getattr(fnp, name).at(x, ([0, 0], [1, 1]), scalar, inplace=False)
        assert_close(got, numpy_at(name, x, ([0, 0], [1, 1]), scalar), dtype=x.dtype)


def test_at_keeps_the_dtype_of_the_updated_array():
    x = np.zeros(4, np.int32)
    got = fnp.add.at(x, np.array([1, 1]), 2.0, inplace=False)
    assert_close(got, np.array([0, 4, 0, 0]), "int32")
    got = fnp.logaddexp.at(np.zeros(3, np.float32), np.array([0, 0]), 0.0, inplace=False)
    assert_close(got, numpy_at("logaddexp", np.zeros(3, np.float32), [0, 0], 0.0), "float32")


# ---------------------------------------------------------------------------------------------
# reduceat and outer

REDUCEAT_INDICES = [[0, 2, 5], [5, 2, 7], [0, 0, 3, 3], [7], [4, 1], np.zeros(0, np.int32)]


@pytest.mark.parametrize("name", ["add", "maximum", "subtract", "logaddexp", "bitwise_or"])
def test_reduceat_matches_numpys(name):
    dtype = DTYPES[name][0]
    x = sample((8, 3), dtype, 8)
    for indices in REDUCEAT_INDICES:
        assert_like_numpy(
            getattr(fnp, name).reduceat(x, indices), getattr(np, name).reduceat(x, indices)
        )
        assert_like_numpy(
            getattr(fnp, name).reduceat(x.T, indices, axis=-1),
            getattr(np, name).reduceat(x.T, indices, axis=-1),
        )


def test_reduceat_widens_like_reduce_and_refuses_bad_indices():
    x = np.array([True, True, False, True])
    assert_like_numpy(fnp.add.reduceat(x, [0, 3]), np.add.reduceat(x, [0, 3]))
    for bad in ([0, 8], [-1]):
        with pytest.raises(IndexError):
            np.add.reduceat(np.arange(8), bad)
        with pytest.raises(IndexError, match="out of bounds"):
            fnp.add.reduceat(np.arange(8), bad)
    with pytest.raises(ValueError, match="1-d integer"):
        fnp.add.reduceat(np.arange(8), [[0]])


@pytest.mark.parametrize("name", BINARY_NAMES)
def test_outer_matches_numpys(name):
    dtype = DTYPES[name][0]
    for a_shape, b_shape in [((3,), (4,)), ((2, 3), (4,)), ((), (2, 1)), ((2,), ())]:
        a, b = sample(a_shape, dtype, 9), sample(b_shape, dtype, 10)
        got = getattr(fnp, name).outer(a, b)
        assert got.shape == a_shape + b_shape
        assert_like_numpy(got, getattr(np, name).outer(a, b))


# ---------------------------------------------------------------------------------------------
# frompyfunc

hypot = fnp.frompyfunc(lambda x, y: fnp.sqrt(x * x + y * y), 2, 1, identity=0)
# No identity, so one axis at a time, like NumPy's frompyfunc ufuncs without one.
first_minus_half = fnp.frompyfunc(lambda x, y: x - 0.5 * y, 2, 1)


def test_frompyfunc_gives_a_ufunc_with_every_method():
    x = sample((3, 4), "float64", 11)
    assert isinstance(hypot, fnp.ufunc) and (hypot.nin, hypot.nout, hypot.identity) == (2, 1, 0)
    assert_close(hypot(x, 2.0), np.hypot(x, 2.0))
    for axis in (0, -1, None, (0, 1)):
        assert_close(hypot.reduce(x, axis), np.hypot.reduce(x, axis))
    assert_close(hypot.reduce(x, 1, keepdims=True), np.hypot.reduce(x, 1, keepdims=True))
    assert_close(hypot.reduce(np.zeros((0, 2))), np.zeros(2))
    assert_close(hypot.accumulate(x, 1), np.hypot.accumulate(x, 1))
    assert_close(
        hypot.at(x, ([0, 0], [1, 1]), 1.0, inplace=False),
        numpy_at("hypot", x, ([0, 0], [1, 1]), 1.0),
    )
    assert_close(hypot.reduceat(x, [2, 0], axis=1), np.hypot.reduceat(x, [2, 0], axis=1))
    assert_close(hypot.outer(x[0], x[1]), np.hypot.outer(x[0], x[1]))

    def reference(x, y):
        return x - 0.5 * y

    numpy_ufunc = np.frompyfunc(reference, 2, 1)
    assert_close(first_minus_half.reduce(x, 1), numpy_ufunc.reduce(x, 1).astype(np.float64))
    with pytest.raises(ValueError, match="one axis at a time"):
        first_minus_half.reduce(x, None)
    with pytest.raises(ValueError, match="initial"):
        first_minus_half.reduce(x, where=np.array([True, False, True, False]))


def test_frompyfunc_calls_see_scalars_and_may_return_several_outputs():
    # Python control flow on a scalar would fail on a whole array; each call sees one element.
    clipped = fnp.frompyfunc(lambda x: fnp.minimum(fnp.maximum(x, 0.0), 1.0), 1, 1)
    x = np.linspace(-1.0, 2.0, 7)
    assert_close(clipped(x), np.clip(x, 0.0, 1.0))
    assert_close(
        clipped.at(x, [0, 6], inplace=False),
        np.where(np.isin(np.arange(7), [0, 6]), np.clip(x, 0, 1), x),
    )
    split = fnp.frompyfunc(lambda x: (fnp.floor(x), x - fnp.floor(x)), 1, 2)
    whole, fraction = split(x)
    assert_close(whole, np.floor(x))
    assert_close(fraction, x - np.floor(x))
    with pytest.raises(ValueError, match="binary"):
        split.reduce(x)


# ---------------------------------------------------------------------------------------------
# jit, grad and vmap


def test_the_methods_stage_as_they_run_eagerly():
    x = sample((3, 4), "float32", 12)
    indices = np.array([0, 2, 2])
    check_staging(lambda a: fnp.add.reduce(a, axis=(0, 1), where=a > 0), x)
    check_staging(lambda a: fnp.subtract.reduce(a, axis=1, initial=1.0), x)
    check_staging(lambda a: fnp.logaddexp.accumulate(a, axis=1), x)
    check_staging(lambda a, i: fnp.maximum.at(a, i, 1.0, inplace=False), x, indices)
    check_staging(lambda a, i: fnp.subtract.at(a, (i, 1), 1.0, inplace=False), x, indices)
    check_staging(lambda a, i: hypot.reduceat(a, i, axis=1), x, indices)
    check_staging(lambda a: fnp.multiply.outer(a, a[0]), x)


def test_derivatives_match_central_differences():
    x = sample((3, 4), "float64", 13)
    indices = np.array([0, 2, 0, 1])
    check_grads(lambda a, b: fnp.add.at(a, indices, b, inplace=False), (x[:, 0], x[0]), order=2)
    check_grads(lambda a, b: fnp.multiply.outer(a, b), (x[0], x[1]), order=2)
    check_grads(lambda a: fnp.maximum.reduce(a, axis=1), (x,), order=1)
    check_grads(lambda a: fnp.add.accumulate(a, axis=1), (x,), order=1)
    # The generic folds, through lax.scan.
    check_grads(lambda a: fnp.logaddexp.reduce(a, axis=0), (x,), order=2)
    check_grads(lambda a: fnp.subtract.accumulate(a, axis=1), (x,), order=1)
    check_grads(lambda a, b: hypot.at(a, indices, b, inplace=False), (x[:, 0], x[0]), order=1)
    check_grads(lambda a: hypot.reduceat(a, [0, 2], axis=1), (x,), order=1)


def test_vmap_of_at_and_of_the_generic_folds_matches_a_loop():
    x = sample((2, 3, 4), "float32", 14)
    b = sample((2, 3), "float32", 15)
    indices = np.array([[0, 0, 2], [1, 3, 1]])

    def add_at(a, i, v):
        return fnp.add.at(a, (slice(None), i), v, inplace=False)

    def logaddexp_at(a, i, v):
        return fnp.logaddexp.at(a, (0, i), v, inplace=False)

    check_batching(add_at, [x, indices, b[:, 0]], [0, 0, 0])
    check_batching(logaddexp_at, [x, indices, b], [0, 0, 0])
    check_batching(logaddexp_at, [x, indices[0], b[0]], [0, None, None])
    check_batching(lambda a: fnp.subtract.reduce(a, axis=1), [x], [2])
    check_batching(lambda a: hypot.accumulate(a, axis=0), [x], [1])
