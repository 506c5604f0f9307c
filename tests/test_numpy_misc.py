"""funcgrad.numpy ranges, matrices, grids, selection and comparisons against NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.errors import ConcretizationTypeError
from tests import strategies as fst
from tests.checks import assert_close, check_staging, jit_backend


def assert_same(actual, expected) -> None:
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected, strict=True)


def small_arrays(dtype=fst.any_dtypes, min_dims=0, max_dims=3, min_side=0, max_side=4, **bounds):
    return fst.arrays(dtype, fst.shapes(min_dims, max_dims, min_side, max_side), **bounds)


def assert_numpys(actual, expected) -> None:
    """The same dtype and values, zeros' signs included."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if expected.dtype.kind in "fcV":  # V: bfloat16, which NumPy compares as float32
        expected, actual = expected.astype(np.complex128), actual.astype(np.complex128)
        np.testing.assert_array_equal(actual, expected, strict=True)
        for part in (np.real, np.imag):
            np.testing.assert_array_equal(np.signbit(part(actual)), np.signbit(part(expected)))
    else:
        assert_same(actual, expected)


def eager_and_jitted(f, *args) -> list:
    """f(*args) eagerly, and jitted on the LLVM and the NumPy reference backends."""
    results = [f(*args)]
    for backend in ("llvm", "numpy"):
        with jit_backend(backend):
            results.append(fg.jit(f)(*args))
    return results


# ---------------------------------------------------------------------------------------------
# Ranges


@given(
    st.integers(-5, 5),
    st.none() | st.integers(-5, 8),
    st.none() | st.integers(-3, 3).filter(bool),
)
def test_arange_of_ints_is_int32(start, stop, step):
    args = (start,) if stop is None else (start, stop) if step is None else (start, stop, step)
    assume(not (stop is None and step is not None))
    assert_same(fnp.arange(*args), np.arange(*args, dtype=np.int32))


@given(st.floats(-5, 5), st.floats(-5, 5), st.sampled_from([0.5, -0.75, 1.0, 0.3]))
def test_arange_of_floats_is_float32(start, stop, step):
    # NumPy's float32 range, bit for bit: its length from the float64 arguments, its values
    # stepped in float32 (which drift from the float64 range by up to a few ulp per step).
    assert_same(fnp.arange(start, stop, step), np.arange(start, stop, step, dtype=np.float32))


def test_arange_with_an_integer_dtype_truncates_a_fractional_step():
    # Values were the float range rounded down ([0, 0, 1, 1, ...]); NumPy and JAX convert start
    # and step to the dtype first.
    assert_same(fnp.arange(0, 5, 0.5, dtype=np.int32), np.arange(0, 5, 0.5, dtype=np.int32))
    assert_same(fnp.arange(1, 5, 1.5, dtype=np.int32), np.arange(1, 5, 1.5, dtype=np.int32))
    assert_same(fnp.arange(0.5, 4, dtype=np.int32), np.arange(0.5, 4, dtype=np.int32))


def test_arange_is_numpys_in_the_result_dtype():
    """NumPy converts start and start + step to the dtype and spaces the rest as those two:
    arange(0.5, 10, 1.5, dtype=int32) steps by 2 (it stepped by int(1.5) = 1), and a bfloat16
    or float32 range is spaced by its converted first step."""
    cases = [
        ((0.5, 10, 1.5), np.int32),
        ((-0.5, -10, -1.5), np.int16),
        ((0, 1, 0.1), fnp.bfloat16),
        ((0, 1, 0.1), np.float16),
        ((np.float32(0.1), np.float32(2.3), np.float32(0.3)), np.float32),
        ((10, -3.5, -0.7), np.float64),
    ]
    for args, dtype in cases:
        expected = np.arange(*args, dtype=dtype)
        for actual in eager_and_jitted(
            lambda args=args, dtype=dtype: fnp.arange(*args, dtype=dtype)
        ):
            assert_numpys(actual, expected)
    assert_numpys(fnp.arange(0.1, 1.0, 0.1), np.arange(0.1, 1.0, 0.1, dtype=np.float32))


def test_arange_dtypes_and_tracing():
    assert_same(fnp.arange(4.0), np.arange(4, dtype=np.float32))
    assert_same(fnp.arange(np.float64(3)), np.arange(3, dtype=np.float64))
    assert_same(fnp.arange(2, 5, dtype=np.uint8), np.arange(2, 5, dtype=np.uint8))
    names = [e.primitive.name for e in fg.make_jaxpr(lambda: fnp.arange(5))().jaxpr.eqns]
    assert names == ["iota"]
    with pytest.raises(ConcretizationTypeError, match="arange"):
        fg.make_jaxpr(lambda n: fnp.arange(n))(3)
    assert_same(fnp.arange(3, dtype=np.complex64), np.arange(3, dtype=np.complex64))
    # Complex bounds are refused, as by NumPy (arange(3 + 0j) gave [0, 1, 2]; NumPy's is empty).
    for bounds in [(3 + 0j,), (2.5, 3 + 0j), (0, 5, 1j)]:
        with pytest.raises(TypeError, match="must be real numbers"):
            fnp.arange(*bounds)


# Bounds NumPy computes ranges of in float64: Python ints, and float64 values (which a jitted
# function receives as float64, where a Python float would arrive as a float32).
range_bounds = st.integers(-60, 60) | st.floats(-1e3, 1e3).map(np.float64)
range_dtypes = [None, np.float32, np.float64, np.float16, fnp.bfloat16, np.int32, np.int16]


@given(range_bounds, range_bounds, st.integers(0, 60), st.booleans(), st.sampled_from(range_dtypes))
def test_linspace_is_numpys_bit_for_bit(start, stop, num, endpoint, dtype):
    """Samples computed in float64 as NumPy computes them: k * step + start, rounded twice
    (LLVM fused them into one rounding: integer samples were floored from the wrong side of
    a whole number in ~2% of cases), then rounded to the result dtype or floored to an integer
    one (float32 samples were computed in float32)."""
    expected, expected_step = np.linspace(start, stop, num, endpoint, retstep=True)
    out_dtype = fnp.result_type(start, stop, float) if dtype is None else np.dtype(dtype)
    expected = (np.floor(expected) if out_dtype.kind == "i" else expected).astype(out_dtype)
    step_dtype = out_dtype if out_dtype.kind == "f" or out_dtype == fnp.bfloat16 else np.float64

    def f(a, b):
        return fnp.linspace(a, b, num, endpoint, retstep=True, dtype=dtype)

    for samples, step in eager_and_jitted(f, start, stop):
        assert_numpys(samples, expected)
        assert_numpys(step, np.asarray(expected_step).astype(step_dtype))


def test_linspace_is_numpys_next_to_whole_numbers_and_zero_steps():
    # integer samples floored from float64 ones next to whole numbers: float32 samples gave
    # linspace(-21, 9, 27, dtype=int32)[13] = -6 (NumPy: -7); LLVM's fused k * step + start
    # gave linspace(37, -49, 7, dtype=int32)[3] = -7 (NumPy: -6)
    for start, stop, num in ((-21, 9, 27), (37, -49, 7), (-8, -2, 43), (24, -31, 46)):
        expected = np.linspace(start, stop, num, dtype=np.int32)
        for actual in eager_and_jitted(
            lambda a, b, num=num: fnp.linspace(a, b, num, dtype=np.int32), start, stop
        ):
            assert_numpys(actual, expected)
    # NumPy computes every line as (k / divisions) * delta + start where any line's step is
    # zero; the first sample is 0 * step + start (+0.0 from a start of -0.0)
    start, stop = np.array([0.0, 0.0, -0.0]), np.array([0.1, 0.0, 1.0])
    expected = np.linspace(start, stop, 6)
    assert not np.array_equal(expected[:, 0], np.linspace(0.0, 0.1, 6))
    for actual in eager_and_jitted(lambda a, b: fnp.linspace(a, b, 6), start, stop):
        assert_numpys(actual, expected)


def test_linspace_of_arrays_along_an_axis():
    start, stop = np.array([0.0, 1.0]), np.array([[2.0], [5.0], [-1.0]])
    for axis in (0, 1, -1, 2):
        expected = np.linspace(start, stop, 4, axis=axis)
        assert_close(fnp.linspace(start, stop, 4, axis=axis), expected, np.float64)
    check_staging(lambda a, b: fnp.linspace(a, b, 5, axis=-1), start, stop)
    with pytest.raises(ValueError, match="non-negative, got -1"):
        fnp.linspace(0, 1, -1)


@given(
    st.floats(-3, 3),
    st.floats(-3, 3),
    st.integers(0, 7),
    st.booleans(),
    st.sampled_from([2.0, 10.0]),
)
def test_logspace_matches_numpy(start, stop, num, endpoint, base):
    expected = np.logspace(start, stop, num, endpoint, base).astype(np.float32)
    assert_close(fnp.logspace(start, stop, num, endpoint, base), expected, np.float32, rtol=1e-5)


@given(st.floats(0.1, 1e3), st.floats(0.1, 1e3), st.integers(0, 7), st.booleans(), st.booleans())
def test_geomspace_matches_numpy(start, stop, num, endpoint, negative):
    if negative:
        start, stop = -start, -stop
    expected = np.geomspace(start, stop, num, endpoint).astype(np.float32)
    actual = fnp.geomspace(start, stop, num, endpoint)
    assert_close(actual, expected, np.float32, rtol=1e-5)
    if num:
        assert np.asarray(actual)[0] == np.float32(start)


def test_integer_geomspace_matches_numpy():
    # log10(256) / log10(1) came out an ulp low, so the integer samples truncated to
    # [1 1 3 7 15 ...] where NumPy's are [1 2 4 7 16 ...]
    expected = np.geomspace(1, 256, 9, dtype=np.int32)
    for actual in eager_and_jitted(lambda a, b: fnp.geomspace(a, b, 9, dtype=np.int32), 1, 256):
        assert_numpys(actual, expected)


def test_geomspace_refuses_a_concrete_zero_end():
    # As NumPy (it gave NaNs); a traced zero gives NaN, as in JAX.
    for start, stop in [(0, 100), (1.0, 0), (np.array([1.0, 0.0]), 2.0), (-0.0, 3)]:
        with pytest.raises(ValueError, match="cannot include zero"):
            fnp.geomspace(start, stop, 4)
    assert np.isnan(np.asarray(fg.jit(lambda a: fnp.geomspace(a, 100.0, 3))(0.0))).all()


def test_geomspace_computes_in_numpys_dtype_with_exact_ends():
    # NumPy's dtype includes the requested one: float32 bounds give a float64 progression
    # for dtype=float64 (it was computed in float32), whose integer samples are truncated
    start, stop = np.float32(3), np.float32(7)
    expected = np.geomspace(start, stop, 5, dtype=np.float64)
    truncated = np.geomspace(start, stop, 5, dtype=np.int32)
    for dtype in (np.float64, np.int32):
        for actual in eager_and_jitted(
            lambda a, b, dtype=dtype: fnp.geomspace(a, b, 5, dtype=dtype), start, stop
        ):
            if dtype == np.int32:
                assert_numpys(actual, truncated)
            else:
                assert_close(actual, expected, np.float64, rtol=1e-14, atol=0)
                assert_numpys(np.asarray(actual)[[0, -1]], expected[[0, -1]])


def test_ranges_of_bfloat16_bounds_compute_in_float64_as_numpys_do():
    """They computed in bfloat16: logspace(bfloat16([111.5]), 10) rounded its exponent 36.93
    to 37 or 36.75, samples 60% off."""
    bounds = np.array([111.5, 148.0, 29.375], ml_dtypes.bfloat16)
    for name in ("linspace", "logspace"):
        expected = getattr(np, name)(bounds, 10, 7).astype(ml_dtypes.bfloat16)
        assert_numpys(getattr(fnp, name)(bounds, 10, 7), expected)
    expected = np.logspace(bounds, 10, dtype=np.float32, axis=-1)
    assert_numpys(fnp.logspace(bounds, 10, dtype=np.float32, axis=-1), expected)


def test_geomspace_computes_in_float64_by_default_as_numpy_does():
    """NumPy's working dtype takes in zeros((), dtype), float64 for dtype=None, and arrays of
    Python start and stop values: float32 bounds were computed in float32, 4 ulps off."""
    start = np.array([2.2189783e23, 2.0341387e10, 1.0], np.float32)
    for stop in (10, np.float32(3)):
        expected = np.geomspace(start, stop, 9).astype(np.float32)
        assert_numpys(fnp.geomspace(start, stop, 9), expected)
    expected = np.geomspace(1, 1000, 5, dtype=np.complex64)
    assert_close(fnp.geomspace(1, 1000, 5, dtype=np.complex64), expected, rtol=1e-6, atol=0)


def test_complex_ranges_and_array_bases_match_numpy():
    # linspace dropped the imaginary parts (linspace(1j, 3 + 1j, 3) was [0, 1.5, 3]);
    # geomspace(1j, 1000j) was [0, nan, nan, 0] and geomspace(-3, 7) a progression of
    # negatives (NumPy: NaN between ends of opposite signs); an array base of logspace
    # broadcast against the samples instead of against start and stop.
    for fun in (fnp.linspace, fnp.geomspace, fnp.logspace):
        for start, stop in ((1j, 3 + 1j), (1 + 1j, 8 - 8j), (-1j, 20.0)):
            assert_close(fun(start, stop, 4), getattr(np, fun.__name__)(start, stop, 4), rtol=1e-5)
    with np.errstate(invalid="ignore"):
        expected = np.geomspace(-3.0, 7.0, 5)
    for geomspace in (fnp.geomspace, fg.jit(fnp.geomspace, static_argnums=2)):
        assert_close(geomspace(-3.0, 7.0, 5), expected)
    base = np.array([[2.0], [10.0]])
    for axis in (0, 1, 2):
        expected = np.logspace(np.array([0.0, 1.0]), 3.0, 4, base=base, axis=axis)
        assert_close(fnp.logspace(np.array([0.0, 1.0]), 3.0, 4, base=base, axis=axis), expected)


# ---------------------------------------------------------------------------------------------
# Matrices


@given(
    st.integers(0, 4),
    st.none() | st.integers(0, 4),
    st.integers(-5, 5),
    st.sampled_from([None, np.int8, np.float64, np.bool_]),
)
def test_eye_tri_identity_match_numpy(n, m, k, dtype):
    expected_dtype = np.float32 if dtype is None else dtype
    assert_same(fnp.eye(n, m, k, dtype), np.eye(n, m, k, expected_dtype))
    assert_same(fnp.tri(n, m, k, dtype), np.tri(n, m, k, expected_dtype))
    assert_same(fnp.identity(n, dtype), np.identity(n, expected_dtype))


@given(small_arrays(min_dims=2, max_dims=4), st.integers(-4, 4))
def test_tril_triu_match_numpy(x, k):
    assert_same(fnp.tril(x, k), np.tril(x, k))
    assert_same(fnp.triu(x, k), np.triu(x, k))


@given(small_arrays(min_dims=1, max_dims=2), st.integers(-4, 4))
def test_diag_and_diagflat_match_numpy(v, k):
    assert_same(fnp.diag(v, k), np.diag(v, k))
    assert_same(fnp.diagflat(v, k), np.diagflat(v, k))


@given(small_arrays(min_dims=2, max_dims=4), st.integers(-5, 5), st.data())
def test_diagonal_and_trace_match_numpy(x, offset, data):
    axes = data.draw(
        st.lists(
            st.integers(-x.ndim, x.ndim - 1), min_size=2, max_size=2, unique_by=lambda a: a % x.ndim
        )
    )
    assert_same(fnp.diagonal(x, offset, *axes), np.diagonal(x, offset, *axes))
    assert_same(fnp.asarray(x).diagonal(offset, *axes), np.diagonal(x, offset, *axes))
    if x.dtype != np.bool_:
        expected = np.trace(
            x, offset, *axes, dtype=fnp.sum(np.diagonal(x, offset, *axes), -1).dtype
        )
        assert_close(fnp.trace(x, offset, *axes), expected, rtol=1e-5, atol=1e-5)


def test_matrix_errors():
    with pytest.raises(ValueError, match=r"1-d or 2-d, got shape \(2, 2, 2\)"):
        fnp.diag(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"at least 2-d, got shape \(3,\)"):
        fnp.tril(np.zeros(3))
    with pytest.raises(ValueError, match="axis1 and axis2 must differ"):
        fnp.diagonal(np.zeros((2, 2)), 0, 1, -1)


# ---------------------------------------------------------------------------------------------
# Grids


@given(
    st.lists(small_arrays(min_dims=1, max_dims=1), max_size=4),
    st.sampled_from(["xy", "ij"]),
    st.booleans(),
)
def test_meshgrid_matches_numpy(xs, indexing, sparse):
    ours = fnp.meshgrid(*xs, indexing=indexing, sparse=sparse)
    theirs = np.meshgrid(*xs, indexing=indexing, sparse=sparse)
    assert isinstance(ours, list) and len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_same(a, b)


@given(fst.shapes(max_dims=3), st.booleans())
def test_indices_match_numpy(dims, sparse):
    ours, theirs = fnp.indices(dims, sparse=sparse), np.indices(dims, dtype=np.int32, sparse=sparse)
    if sparse:
        for a, b in zip(ours, theirs):
            assert_same(a, b)
    else:
        assert_same(ours, theirs)


# ---------------------------------------------------------------------------------------------
# Selection


@given(st.data())
def test_where_matches_numpy_with_promotion_and_broadcasting(data):
    shape = data.draw(fst.shapes(max_dims=3, max_side=3))
    cond = data.draw(fst.arrays(fst.any_dtypes, shape[data.draw(st.integers(0, len(shape))) :]))
    x = data.draw(fst.arrays(fst.any_dtypes, shape))
    y = data.draw(st.sampled_from([2, 1.5, True]) | fst.arrays(fst.any_dtypes, shape[1:]))
    dtype = fnp.result_type(x, y)
    expected = np.where(cond, x.astype(dtype), np.asarray(y).astype(dtype))
    assert_same(fnp.where(cond, x, y), expected)


def test_where_stages_and_rejects_half_the_arguments():
    x = np.arange(6.0).reshape(2, 3)
    check_staging(lambda x: fnp.where(x > 2, x, 0.0), x)
    assert fnp.where(np.array([True]), 1.0, 2.0).dtype == np.float32
    with pytest.raises(ValueError, match="both x and y"):
        fnp.where(x > 2, x)


@given(small_arrays(min_dims=1, max_dims=3), st.integers(0, 6), st.data())
def test_nonzero_family_matches_numpy(x, size, data):
    for ours, theirs in zip(fnp.nonzero(x), np.nonzero(x)):
        assert_same(ours, theirs.astype(np.int32))
    assert_same(fnp.asarray(x).nonzero()[0], np.nonzero(x)[0].astype(np.int32))
    assert_same(fnp.argwhere(x), np.argwhere(x).astype(np.int32))
    assert_same(fnp.flatnonzero(x), np.flatnonzero(x).astype(np.int32))
    assert_same(fnp.where(x)[-1], np.nonzero(x)[-1].astype(np.int32))
    # With a static size: the first `size` indices, padded with fill_value.
    fill = data.draw(st.none() | st.integers(-3, -1))
    for ours, theirs in zip(fnp.nonzero(x, size=size, fill_value=fill), np.nonzero(x)):
        padded = np.full(size, 0 if fill is None else fill, np.int32)
        count = min(size, len(theirs))
        padded[:count] = theirs[:count]
        assert_same(ours, padded)


def test_nonzero_under_tracing_needs_a_static_size():
    x = np.array([[0.0, 1.5], [2.0, 0.0], [0.0, 3.0]])
    check_staging(lambda x: fnp.nonzero(x, size=4, fill_value=(-1, -2)), x)
    check_staging(lambda x: fnp.argwhere(x, size=2), x)
    assert_same(fnp.argwhere(np.float32(3)), np.argwhere(np.float32(3)).astype(np.int32))
    assert_same(fnp.argwhere(np.float32(0), size=2), np.zeros((2, 0), np.int32))
    with pytest.raises(ConcretizationTypeError, match="nonzero.*size=N"):
        fg.make_jaxpr(fnp.nonzero)(x)
    with pytest.raises(ValueError, match="0-d"):
        fnp.nonzero(np.float32(1))


@given(st.data())
def test_select_matches_numpy(data):
    shape = data.draw(fst.shapes(max_dims=2, max_side=3))
    count = data.draw(st.integers(1, 3))
    conds = [data.draw(fst.arrays(np.bool_, shape)) for _ in range(count)]
    choices = [data.draw(fst.arrays(fst.numeric_dtypes, shape[1:])) for _ in range(count)]
    dtype = fnp.result_type(*choices, 0)
    expected = np.select(conds, [c.astype(dtype) for c in choices], 0)
    assert_same(fnp.select(conds, choices), expected.astype(dtype))


def test_select_errors():
    with pytest.raises(ValueError, match="same length, got 2 and 1"):
        fnp.select([np.array(True), np.array(False)], [1])
    with pytest.raises(TypeError, match="entry 0 must be boolean, got dtype int32"):
        fnp.select([np.array([1], np.int32)], [np.array([1])])


@given(small_arrays(fst.numeric_dtypes, min_value=-20, max_value=20), st.data())
def test_clip_matches_numpy(x, data):
    lo = data.draw(st.none() | st.integers(-10 if x.dtype.kind == "i" else 0, 5))
    hi = data.draw(st.none() | st.integers(0, 10))
    dtype = fnp.result_type(x, *(b for b in (lo, hi) if b is not None))
    expected = np.clip(x.astype(dtype), lo, hi) if (lo, hi) != (None, None) else x
    assert_same(fnp.clip(x, lo, hi), expected)
    assert_same(fnp.clip(x, a_min=lo, a_max=hi), expected)
    assert_same(fnp.asarray(x).clip(lo, hi), expected)


@given(small_arrays(fst.all_float_dtypes | fst.int_dtypes, allow_nan=True), st.data())
def test_nan_to_num_matches_numpy(x, data):
    if x.dtype.kind == "f" and x.size:
        specials = data.draw(fst.arrays(np.int8, x.shape, min_value=0, max_value=3))
        x = np.select([specials == 1, specials == 2], [np.inf, -np.inf], x).astype(x.dtype)
    kwargs = data.draw(
        st.fixed_dictionaries(
            {}, optional={"nan": st.just(1.0), "posinf": st.just(9.0), "neginf": st.just(-9.0)}
        )
    )
    expected = np.nan_to_num(x.astype(np.float64) if x.dtype.name == "bfloat16" else x, **kwargs)
    assert_close(fnp.nan_to_num(x, **kwargs), expected.astype(x.dtype), x.dtype)


# ---------------------------------------------------------------------------------------------
# Comparisons


@given(small_arrays(fst.float_dtypes, allow_nan=True), st.data())
def test_isclose_allclose_match_numpy(a, data):
    b = a + data.draw(fst.arrays(a.dtype, a.shape, min_value=-(2.0**-13), max_value=2.0**-13))
    b = np.where(data.draw(fst.arrays(np.bool_, a.shape)), b, np.inf).astype(a.dtype)
    equal_nan = data.draw(st.booleans())
    for ours, theirs in [(fnp.isclose, np.isclose), (fnp.allclose, np.allclose)]:
        assert_same(ours(a, b, equal_nan=equal_nan), theirs(a, b, equal_nan=equal_nan))
        assert_same(ours(a, b, 0.0, 1e-5), theirs(a, b, 0.0, 1e-5))


def test_isclose_of_integers_uses_the_tolerances_as_numpy_and_jax():
    # Integers were compared for equality (isclose(100, 101, rtol=0.2) was False), as JAX once
    # did; JAX 0.10 and NumPy promote them to a float and apply the tolerances.
    assert_same(fnp.isclose(np.arange(3), [0, 1, 3]), np.array([True, True, False]))
    a, b = np.array([1, 2, 100]), np.array([1, 3, 101])
    for kwargs in (dict(rtol=0.2), dict(atol=1.5), dict(rtol=0.0, atol=0.0)):
        assert_same(fnp.isclose(a, b, **kwargs), np.isclose(a, b, **kwargs))
        assert_same(fnp.allclose(a, b, **kwargs), np.allclose(a, b, **kwargs))
    a, b = a.astype(np.uint8), np.array([1, 3, 99], np.uint8)
    assert_same(fg.jit(fnp.isclose)(a, b, 0.0, 1.5), np.isclose(a, b, 0.0, 1.5))


@given(small_arrays(allow_nan=True), st.data())
def test_array_equal_and_equiv_match_numpy(a, data):
    b = data.draw(st.sampled_from([a, a.reshape(-1)[:1], np.flip(a), np.zeros((2, 1), a.dtype)]))
    equal_nan = data.draw(st.booleans()) and a.dtype.kind == "f"
    assert_same(fnp.array_equal(a, b, equal_nan=equal_nan), np.array_equal(a, b, equal_nan))
    assert_same(fnp.array_equiv(a, b), np.array_equiv(a, b))


def test_small_predicates_and_copy():
    assert fnp.isscalar(1.0) and fnp.isscalar(np.int8(3)) and fnp.isscalar(fnp.asarray(2))
    assert not fnp.isscalar([1]) and not fnp.isscalar(np.zeros(2))
    assert fnp.iscomplexobj(fnp.ones(2)) is False
    assert_same(fnp.copy([1, 2]), np.array([1, 2], np.int32))


def test_misc_functions_stage_like_eager():
    x = np.arange(12.0).reshape(3, 4)
    check_staging(lambda x: (fnp.tril(x, 1), fnp.triu(x), fnp.diag(x[0], -1), fnp.trace(x)), x)
    check_staging(lambda x: (fnp.clip(x, 2.0, 5), fnp.nan_to_num(x / 0.0), fnp.isclose(x, 3.0)), x)
    check_staging(lambda x: fnp.select([x > 3, x < 1], [x, -x], 0.5), x)
    check_staging(lambda x: fnp.meshgrid(x[0], x[:, 0]), x)
