"""Elementwise lax primitives against references written in plain Python.

Each reference applies a Python scalar function element by element (Python's `math`, exact
integers wrapped to the dtype's width, `fractions` for exact rounding), so it shares no code
with the NumPy implementations under test. `check_staging` pins eager avals (weak type included)
to the traced ones for every case.
"""

import fractions
import itertools
import math
import operator

import ml_dtypes
import mpmath
import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_staging, jit_backend
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.lax.elementwise import convert_element_type_p
from funcgrad.tools.recipes import COMPILED_BACKENDS

# (the narrow formats, computed in float32 or int32: tests/test_low_precision_dtypes.py)
ALL_DTYPES = sorted(
    (d for d in dtypes.supported_dtypes if not dtypes.is_narrow(d)), key=lambda d: d.name
)
NUMERIC_DTYPES = [d for d in ALL_DTYPES if d != dtypes.bool_]
INT_DTYPES = [d for d in ALL_DTYPES if dtypes.is_int(d)]

# ---------------------------------------------------------------------------------------------
# Python references


def to_python(x):
    """A NumPy scalar as a Python bool, int, float or complex (exactly)."""
    if x.dtype == dtypes.bool_:
        return bool(x)
    if dtypes.is_complex(x.dtype):
        return complex(x)
    return int(x) if dtypes.is_int(x.dtype) else float(x)


def wrap(value: int, dtype) -> int:
    """`value` reduced to the two's complement range of an integer dtype."""
    info = np.iinfo(dtype)
    return (value - info.min) % (1 << info.bits) + info.min


def from_python(values, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtypes.is_int(dtype):
        return np.array([wrap(int(v), dtype) for v in values], dtype).reshape(shape)
    if dtype == dtypes.bool_:
        return np.array(values, dtype).reshape(shape)
    if dtypes.is_complex(dtype):
        return np.array(values, np.complex128).astype(dtype).reshape(shape)
    return np.array(values, np.float64).astype(dtype).reshape(shape)


def reference(fn, out_dtype, *operands) -> np.ndarray:
    """`fn` applied to Python scalars element by element; rank-0 operands broadcast."""
    operands = np.broadcast_arrays(*(np.asarray(o) for o in operands))
    shape = operands[0].shape
    values = [fn(*(to_python(o[i]) for o in operands)) for i in np.ndindex(shape)]
    return from_python(values, shape, out_dtype)


def trunc_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def trunc_rem(a: int, b: int) -> int:
    rest = abs(a) % abs(b)
    return rest if a >= 0 else -rest


def logistic(v: float) -> float:
    return 1 / (1 + math.exp(-v))


# ---------------------------------------------------------------------------------------------
# Strategies


@st.composite
def operands(draw, dtype_strategy, count: int = 2, **bounds):
    """`count` arrays of one dtype and one shape, except that some may be rank 0."""
    dtype = draw(dtype_strategy)
    shape = draw(fst.shapes(max_dims=3, max_side=4))
    shapes = [draw(st.sampled_from([shape, ()])) for _ in range(count)]
    return [draw(fst.arrays(dtype, s, **bounds)) for s in shapes]


def nonzero(x: np.ndarray) -> np.ndarray:
    return np.where(x == 0, np.ones_like(x), x)


# ---------------------------------------------------------------------------------------------
# Unary math

# name: (Python reference, (low, high) domain drawn from)
FLOAT_UNARY = {
    "exp": (math.exp, (-10, 10)),
    "exp2": (lambda v: 2.0**v, (-10, 10)),
    "log": (math.log, (0.015625, 10)),
    "log1p": (math.log1p, (-0.9375, 10)),
    "expm1": (math.expm1, (-10, 10)),
    "tanh": (math.tanh, (-10, 10)),
    "logistic": (logistic, (-10, 10)),
    "sin": (math.sin, (-10, 10)),
    "cos": (math.cos, (-10, 10)),
    "tan": (math.tan, (-1.5, 1.5)),
    "asin": (math.asin, (-0.9375, 0.9375)),
    "acos": (math.acos, (-0.9375, 0.9375)),
    "atan": (math.atan, (-10, 10)),
    "sinh": (math.sinh, (-10, 10)),
    "cosh": (math.cosh, (-10, 10)),
    "asinh": (math.asinh, (-10, 10)),
    "acosh": (math.acosh, (1, 10)),
    "atanh": (math.atanh, (-0.9375, 0.9375)),
    "sqrt": (math.sqrt, (0, 10)),
    "rsqrt": (lambda v: 1 / math.sqrt(v), (0.015625, 10)),
    "cbrt": (math.cbrt, (-10, 10)),
    "floor": (math.floor, (-10, 10)),
    "ceil": (math.ceil, (-10, 10)),
}
SPECIAL = ["erf", "erfc", "erf_inv", "lgamma", "digamma"]
# Correctly rounded: compiled backends give the reference's bits.
EXACT_UNARY = ("floor", "ceil", "sqrt")
FLOAT_ONLY = [*FLOAT_UNARY, *SPECIAL, "is_finite", "round"]


@pytest.mark.parametrize("name", sorted(FLOAT_UNARY))
@given(data=st.data())
def test_float_unary_matches_python_math(name, data):
    ref, (low, high) = FLOAT_UNARY[name]
    fn = getattr(lax, name)
    dtype = data.draw(fst.all_float_dtypes)
    x = data.draw(fst.arrays(dtype, fst.shapes(max_dims=3), min_value=low, max_value=high))
    assert_close(fn(x), reference(ref, dtype, x), dtype)
    check_staging(fn, x, exact=name in EXACT_UNARY)


@pytest.mark.parametrize("name", SPECIAL)
@given(x=fst.arrays(fst.all_float_dtypes, fst.shapes(max_dims=3), min_value=0.125, max_value=0.875))
def test_special_functions_keep_shape_and_dtype(name, x):
    # Their accuracy is pinned by the special-function suite; here only their typing.
    out = getattr(lax, name)(x)
    assert out.shape == x.shape and out.dtype == x.dtype and not out.weak_type
    check_staging(getattr(lax, name), x)


@pytest.mark.parametrize(
    "name, arg, expected",
    [
        ("erf", 0.0, 0.0),
        ("erfc", 0.0, 1.0),
        ("erf_inv", 0.0, 0.0),
        ("lgamma", 1.0, 0.0),
        ("lgamma", 2.0, 0.0),
        ("digamma", 1.0, -np.euler_gamma),
    ],
)
def test_special_functions_simple_values(name, arg, expected):
    out = getattr(lax, name)(np.float32(arg))
    assert out.dtype == dtypes.float32
    assert_close(out, np.float32(expected), atol=1e-4, rtol=1e-4)


@given(x=fst.arrays(st.one_of(fst.all_float_dtypes, fst.int_dtypes), fst.shapes(max_dims=3)))
def test_neg_abs_sign(x):
    dtype = x.dtype
    assert_close(lax.neg(x), reference(lambda v: -v, dtype, x), dtype)
    assert_close(lax.abs(x), reference(lambda v: v if v >= 0 else -v, dtype, x), dtype)
    sign = reference(lambda v: (v > 0) - (v < 0), dtype, x)
    assert_close(lax.sign(x), sign, dtype)
    for fn in (lax.neg, lax.abs, lax.sign):
        check_staging(fn, x, exact=True)


def test_sign_keeps_signed_zero_and_nan():
    out = np.asarray(lax.sign(np.array([-0.0, 0.0, np.nan, -3.0], np.float32)))
    assert list(np.signbit(out[:2])) == [True, False]
    assert np.isnan(out[2]) and out[3] == -1


@given(x=fst.arrays(fst.int_dtypes, fst.shapes(max_dims=3)))
def test_population_count_counts_twos_complement_bits(x):
    bits = x.dtype.itemsize * 8
    expected = reference(lambda v: bin(v % (1 << bits)).count("1"), x.dtype, x)
    assert_close(lax.population_count(x), expected, x.dtype)
    check_staging(lax.population_count, x, exact=True)


@given(x=fst.arrays(st.one_of(fst.int_dtypes, st.just(dtypes.bool_)), fst.shapes(max_dims=3)))
def test_bitwise_not(x):
    ref = (lambda v: not v) if x.dtype == dtypes.bool_ else operator.invert
    assert_close(lax.bitwise_not(x), reference(ref, x.dtype, x), x.dtype)
    check_staging(lax.bitwise_not, x, exact=True)


SPECIAL_VALUES = [0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", dtypes.float_dtypes, ids=str)
def test_is_finite(dtype):
    x = np.array(SPECIAL_VALUES, dtype)
    out = lax.is_finite(x)
    assert out.dtype == dtypes.bool_
    np.testing.assert_array_equal(out, [math.isfinite(float(v)) for v in x])
    check_staging(lax.is_finite, x, exact=True)
    check_staging(lax.is_finite, 2.0)  # a weak operand: the bool result is strong


# ---------------------------------------------------------------------------------------------
# Rounding and integer powers


def round_half_away(v: float) -> float:
    magnitude = math.floor(abs(fractions.Fraction(v)) + fractions.Fraction(1, 2))
    return math.copysign(magnitude, v)


@given(
    halves=fst.arrays(fst.all_float_dtypes, fst.shapes(max_dims=2), min_value=-8, max_value=8),
    data=st.data(),
)
def test_round_both_methods(halves, data):
    x = (np.round(halves.astype(np.float64) * 2) / 2).astype(halves.dtype)  # k / 2: exact halves
    x = np.concatenate([x.ravel(), data.draw(fst.arrays(x.dtype, (3,)))])
    away = lax.round(x)
    even = lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
    assert_close(away, reference(round_half_away, x.dtype, x), x.dtype, rtol=0, atol=0)
    assert_close(even, reference(round, x.dtype, x), x.dtype, rtol=0, atol=0)
    check_staging(lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), x, exact=True)
    check_staging(lax.round, x, exact=True)


@pytest.mark.parametrize("dtype", dtypes.float_dtypes, ids=str)
def test_round_exact_halves(dtype):
    below_half = np.nextafter(np.array(0.5, dtype), np.array(0, dtype))
    x = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, below_half], dtype)
    np.testing.assert_array_equal(lax.round(x), np.array([1, -1, 2, -2, 3, -3, 0], dtype))
    even = lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
    np.testing.assert_array_equal(even, np.array([0, -0, 2, -2, 2, -2, 0], dtype))
    assert np.signbit(np.asarray(even)[1])  # -0.5 rounds to -0.0


def exact_power(v, y: int) -> float:
    if v == 0 and y < 0:
        return math.copysign(math.inf, v) if y % 2 else math.inf
    try:
        return float(fractions.Fraction(v) ** y)
    except OverflowError:
        return -math.inf if v < 0 and y % 2 else math.inf


@given(data=st.data())
def test_integer_pow_floats(data):
    x = data.draw(
        fst.arrays(fst.all_float_dtypes, fst.shapes(max_dims=3), min_value=-4, max_value=4)
    )
    y = data.draw(st.integers(-3, 5))
    assert_close(lax.integer_pow(x, y), reference(lambda v: exact_power(v, y), x.dtype, x))
    check_staging(lambda x: lax.integer_pow(x, y), x)


@given(x=fst.arrays(fst.int_dtypes, fst.shapes(max_dims=3)), y=st.integers(0, 9))
def test_integer_pow_ints_wrap(x, y):
    assert_close(lax.integer_pow(x, y), reference(lambda v: v**y, x.dtype, x), x.dtype)
    check_staging(lambda x: lax.integer_pow(x, y), x)


def test_integer_pow_exponents_the_dtype_cannot_hold():
    assert int(lax.integer_pow(np.int8(3), 300)) == wrap(3**300, np.int8)
    assert float(lax.integer_pow(np.array(-1, ml_dtypes.bfloat16), 257)) == -1.0
    assert float(lax.integer_pow(np.float16(-1), 2049)) == -1.0


def test_integer_pow_refuses_a_fractional_exponent():
    # It was truncated: integer_pow(2.0, 1.5) gave 2.0.
    with pytest.raises(TypeError, match="exponent must be an integer, got 1.5"):
        lax.integer_pow(np.float32(2.0), 1.5)
    assert float(lax.integer_pow(np.float32(2.0), np.int64(3))) == 8.0


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.complex64])
@pytest.mark.parametrize("exponent_dtype", [np.int8, np.uint8, np.int32])
def test_pow_takes_an_integer_exponent_of_any_integer_dtype(dtype, exponent_dtype):
    # As integer_pow with a traced exponent: these raised for the dtypes' mismatch.
    x = np.array([-1.5, -1.0, 0.5, 2.0, 0.0], dtype)
    y = np.array([3, 127, 2, 5, 3], exponent_dtype)
    got = lax.pow(x, y)
    assert got.dtype == x.dtype
    want = np.array([complex(v) ** int(k) for v, k in zip(x, y)])
    assert_close(got, (want if dtypes.is_complex(dtype) else want.real).astype(dtype), dtype)
    assert float(np.real(lax.pow(np.float16(-1), np.int32(2049)))) == -1.0  # (parity kept)
    slope = fg.grad(lambda t: lax.pow(t, np.int32(3)))(np.float32(2.0))
    assert float(slope) == 12.0


@given(x=fst.arrays(fst.float_dtypes, fst.shapes(max_dims=2), min_value=0.5, max_value=4))
def test_square_and_reciprocal(x):
    assert_close(lax.square(x), reference(lambda v: v * v, x.dtype, x), x.dtype)
    assert_close(lax.reciprocal(x), reference(lambda v: 1 / v, x.dtype, x), x.dtype)
    check_staging(lax.square, x, exact=True)
    check_staging(lax.reciprocal, x, exact=True)


# ---------------------------------------------------------------------------------------------
# Binary math, comparisons and bitwise operations


def nextafter(x: float, y: float, dtype) -> float:
    """The neighbour of `x` towards `y` in `dtype`, by stepping its bit pattern."""
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == y:
        return y
    bits_dtype = np.dtype(f"u{np.dtype(dtype).itemsize}")
    if x == 0:
        smallest = float(np.array(1, bits_dtype).view(dtype))
        return math.copysign(smallest, y)
    bits = int(np.array(x, dtype).view(bits_dtype))
    bits += 1 if (y > x) == (x > 0) else -1  # the magnitude grows with the bit pattern
    return float(np.array(bits, bits_dtype).view(dtype))


# name: (dtype strategy, Python reference, value bounds, divisor must be nonzero)
BINARY = {
    "add": (fst.numeric_dtypes, operator.add, {}, False),
    "sub": (fst.numeric_dtypes, operator.sub, {}, False),
    "mul": (fst.numeric_dtypes, operator.mul, {}, False),
    "max": (fst.any_dtypes, max, {}, False),
    "min": (fst.any_dtypes, min, {}, False),
    "pow": (fst.all_float_dtypes, math.pow, dict(min_value=0.125, max_value=4), False),
    "atan2": (fst.all_float_dtypes, math.atan2, {}, False),
    "eq": (fst.any_dtypes, operator.eq, {}, False),
    "ne": (fst.any_dtypes, operator.ne, {}, False),
    "lt": (fst.any_dtypes, operator.lt, {}, False),
    "le": (fst.any_dtypes, operator.le, {}, False),
    "gt": (fst.any_dtypes, operator.gt, {}, False),
    "ge": (fst.any_dtypes, operator.ge, {}, False),
    "bitwise_and": (st.sampled_from(INT_DTYPES + [dtypes.bool_]), operator.and_, {}, False),
    "bitwise_or": (st.sampled_from(INT_DTYPES + [dtypes.bool_]), operator.or_, {}, False),
    "bitwise_xor": (st.sampled_from(INT_DTYPES + [dtypes.bool_]), operator.xor, {}, False),
    "div": (fst.numeric_dtypes, None, {}, True),
    "rem": (fst.numeric_dtypes, None, {}, True),
}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_matches_python(name, data):
    dtype_strategy, ref, bounds, nonzero_rhs = BINARY[name]
    x, y = data.draw(operands(dtype_strategy, **bounds))
    if nonzero_rhs:
        y = nonzero(y)
    dtype = x.dtype
    if name == "div":
        ref = trunc_div if dtypes.is_int(dtype) else operator.truediv
    elif name == "rem":
        ref = trunc_rem if dtypes.is_int(dtype) else math.fmod
    out_dtype = dtypes.bool_ if name in COMPARISONS else dtype
    fn = getattr(lax, name)
    assert_close(fn(x, y), reference(ref, out_dtype, x, y), out_dtype)
    check_staging(fn, x, y, exact=name not in ("pow", "atan2"))


def test_div_and_rem_follow_c_semantics():
    x = np.array([7, -7, 7, -7, -128], np.int8)
    y = np.array([2, 2, -2, -2, -1], np.int8)
    np.testing.assert_array_equal(lax.div(x, y), [3, -3, -3, 3, -128])
    np.testing.assert_array_equal(lax.rem(x, y), [1, -1, 1, -1, 0])
    xf = np.array([7.5, -7.5, 7.5, -7.5], np.float32)
    yf = np.array([2, 2, -2, -2], np.float32)
    np.testing.assert_array_equal(lax.rem(xf, yf), [1.5, -1.5, 1.5, -1.5])


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.uint32])
def test_integer_division_by_zero_gives_zero(dtype, backend):
    # NumPy's value for // and % by 0 (docs/differences.md: JAX gives -1 and the dividend).
    x, zero = np.array([7, 0, 3], dtype), np.zeros(3, dtype)
    for op in (lax.div, lax.rem):
        if backend == "eager":
            got = op(x, zero)
        else:
            with jit_backend(backend):
                got = fg.jit(op)(x, zero)
        np.testing.assert_array_equal(np.asarray(got), [0, 0, 0])


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
@pytest.mark.parametrize("dtype", list(dtypes.float_dtypes), ids=str)
def test_max_and_min_order_minus_zero_below_plus_zero(dtype, backend):
    """max(-0, +0) is +0 and min is -0 in either order, eagerly as compiled: eager max and
    min were NumPy's, which keep one zero or the other by operand order (and, for float16,
    the other way round), so relu(-0.0) in float16 was -0.0 eagerly and +0.0 under jit."""
    x = np.array([-0.0, 0.0, -0.0, 0.0, -0.0, 1.0], dtype)
    y = np.array([0.0, -0.0, -0.0, 0.0, np.nan, -0.0], dtype)
    expected = {lax.max: [False, False, True, False], lax.min: [True, True, True, False]}
    for op, signs in expected.items():
        if backend == "eager":
            got = np.asarray(op(x, y))
        else:
            with jit_backend(backend):
                got = np.asarray(fg.jit(op)(x, y))
        got = got.astype(np.float32)
        np.testing.assert_array_equal(np.signbit(got[:4]), signs, err_msg=op.__name__)
        np.testing.assert_array_equal(got[:4], 0)
        assert np.isnan(got[4]) and got[5] == (1 if op is lax.max else 0)
    relu = fg.nn.relu(np.array([-0.0, 0.0], dtype))
    assert not np.signbit(np.asarray(relu).astype(np.float32)).any()


@given(data=st.data())
def test_nextafter_steps_one_ulp(data):
    x, y = data.draw(operands(fst.all_float_dtypes, min_value=-2, max_value=2))
    dtype = x.dtype
    expected = reference(lambda a, b: nextafter(a, b, dtype), dtype, x, y)
    assert_close(lax.nextafter(x, y), expected, dtype, rtol=0, atol=0)
    check_staging(lax.nextafter, x, y, exact=True)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
@pytest.mark.parametrize("dtype", list(dtypes.float_dtypes), ids=str)
def test_compiled_nextafter_steps_one_ulp_of_the_operands_own_format(dtype, backend):
    # Half precision computes in float32, whose step from a half rounds back to the half.
    info = dtypes.finfo(dtype)
    points = [0.0, -0.0, 1.0, -1.0, float(info.tiny), float(info.smallest_subnormal)]
    points += [float(info.max), np.inf, np.nan]
    x, y = (np.array(v, dtype) for v in zip(*itertools.product(points, points)))
    eager = np.asarray(lax.nextafter(x, y))
    with jit_backend(backend):
        compiled = np.asarray(fg.jit(lax.nextafter)(x, y))
    bits = f"u{np.dtype(dtype).itemsize}"
    nan = np.isnan(eager.astype(np.float32))  # (a NaN's payload is the hardware's)
    np.testing.assert_array_equal(np.isnan(compiled.astype(np.float32)), nan)
    np.testing.assert_array_equal(compiled.view(bits)[~nan], eager.view(bits)[~nan])


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logistic_keeps_relative_precision_in_its_negative_tail(dtype, backend):
    # 1 / (1 + e^-x) as small as the dtype holds: 0.5 tanh(x / 2) + 0.5 gave 0 below -17.
    x = np.array([-20.0, -60.0, -80.0, -700.0, -1e4, 0.0, 30.0, np.nan, np.inf, -np.inf], dtype)
    with np.errstate(over="ignore"):
        expected = (1 / (1 + np.exp(-x.astype(np.longdouble)))).astype(dtype)
    if backend == "eager":
        got = lax.logistic(x)
    else:
        with jit_backend(backend):
            got = fg.jit(lax.logistic)(x)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=4 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
def test_complex_logistic_keeps_the_left_half_plane(backend):
    # 0.5 tanh(z / 2) + 0.5 cancelled to a zero real part at -23 + 1e4 j (the true one is
    # -8.5e-11); 1 / (1 + e^-z) overflowed to NaN at -100 + 3j in complex64.
    points = [-23.140423 + 1e4j, -100 + 3j, -1e4 + 1j, 100 - 3j, 0.3 + 0.2j, -0.3 - 1e-3j]
    x = np.array(points, np.complex64)
    expected = np.array([complex(1 / (1 + mpmath.exp(-mpmath.mpc(complex(z))))) for z in x])
    if backend == "eager":
        got = lax.logistic(x)
    else:
        with jit_backend(backend):
            got = fg.jit(lax.logistic)(x)
    error = np.abs(np.asarray(got).astype(np.complex128) - expected)
    info = np.finfo(np.float32)  # (-100 + 3j gives subnormal parts)
    assert np.all(error <= 4 * info.eps * np.abs(expected) + info.tiny), (got, expected)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
def test_a_program_making_float0_values_compiles(backend):
    # Transposing a conversion from a float0 tangent makes one; such values hold no data.
    def f(c):
        zero = convert_element_type_p.bind(c, new_dtype=dtypes.float0, weak_type=False)
        return zero, zero, c * 2.0

    x = np.ones((2, 3))
    with jit_backend(backend):
        first, second, doubled = fg.jit(f)(x)
    assert first.dtype == dtypes.float0 and first.shape == (2, 3) and second.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(doubled), 2 * x)


def test_max_min_propagate_nan_and_comparisons_with_nan_are_false():
    x = np.array([np.nan, 1.0, np.nan], np.float32)
    y = np.array([1.0, np.nan, np.nan], np.float32)
    assert np.isnan(np.asarray(lax.max(x, y))).all()
    assert np.isnan(np.asarray(lax.min(x, y))).all()
    for fn in (lax.eq, lax.lt, lax.le, lax.gt, lax.ge):
        assert not np.asarray(fn(x, y)).any()
    assert np.asarray(lax.ne(x, y)).all()


# ---------------------------------------------------------------------------------------------
# Shifts: amounts outside [0, bits) included


def shift_refs(dtype):
    bits = np.dtype(dtype).itemsize * 8
    mask = (1 << bits) - 1

    def left(a, s):
        return a << s if 0 <= s < bits else 0

    def right_logical(a, s):
        return (a & mask) >> s if 0 <= s < bits else 0

    def right_arithmetic(a, s):
        signed = wrap(a, np.dtype(f"i{bits // 8}"))
        return signed >> (s if 0 <= s < bits else bits - 1)

    return {
        "shift_left": left,
        "shift_right_logical": right_logical,
        "shift_right_arithmetic": right_arithmetic,
    }


@pytest.mark.parametrize("name", ["shift_left", "shift_right_logical", "shift_right_arithmetic"])
@given(data=st.data())
def test_shifts(name, data):
    dtype = data.draw(st.sampled_from(INT_DTYPES))
    bits = dtype.itemsize * 8
    (x,) = data.draw(operands(st.just(dtype), count=1))
    shape = x.shape if data.draw(st.booleans()) else ()
    amounts = fst.arrays(dtype, shape, min_value=-bits - 2, max_value=2 * bits + 2)
    y = data.draw(amounts)
    fn = getattr(lax, name)
    assert_close(fn(x, y), reference(shift_refs(dtype)[name], dtype, x, y), dtype)
    check_staging(fn, x, y, exact=True)


def test_shift_amounts_out_of_range():
    x = np.array([-8, 8, -8, 8], np.int32)
    y = np.array([32, 40, -1, -1], np.int32)
    np.testing.assert_array_equal(lax.shift_left(x, y), [0, 0, 0, 0])
    np.testing.assert_array_equal(lax.shift_right_logical(x, y), [0, 0, 0, 0])
    np.testing.assert_array_equal(lax.shift_right_arithmetic(x, y), [-1, 0, -1, 0])
    # On unsigned operands the arithmetic shift still copies the top bit.
    u = lax.shift_right_arithmetic(np.array([200, 8], np.uint8), np.array([1, 9], np.uint8))
    np.testing.assert_array_equal(u, [228, 0])


# ---------------------------------------------------------------------------------------------
# select_n and clamp


@given(data=st.data())
def test_select_n(data):
    count = data.draw(st.integers(1, 3))
    cases = data.draw(operands(fst.any_dtypes, count=count))
    shape = max((c.shape for c in cases), key=len)
    cases = [np.broadcast_to(c, shape).copy() for c in cases]
    selector_shape = data.draw(st.sampled_from([shape, ()]))
    if count <= 2 and data.draw(st.booleans()):
        which = data.draw(fst.arrays(dtypes.bool_, selector_shape))
    else:
        # Any integer dtype; a selector outside [0, count) picks the nearest case.
        selector_dtype = data.draw(fst.int_dtypes)
        which = data.draw(
            fst.arrays(selector_dtype, selector_shape, min_value=-2, max_value=count + 1)
        )
    which_full = np.broadcast_to(which, shape)
    picked = [cases[min(max(int(which_full[i]), 0), count - 1)][i] for i in np.ndindex(shape)]
    expected = np.array(picked, cases[0].dtype)
    out = lax.select_n(which, *cases)
    assert_close(out, expected.reshape(shape), cases[0].dtype, rtol=0, atol=0)
    check_staging(lax.select_n, which, *cases, exact=True)
    if count == 2:
        picks_second = np.asarray(which, np.int64) >= 1
        assert_close(lax.select(picks_second, cases[1], cases[0]), out, rtol=0, atol=0)


def test_clamp_derivatives_follow_the_value_even_with_crossed_bounds():
    """Central differences in float64 away from ties: the tangent of the bound the result is,
    also where min > max makes the result max (min's tangent passed there)."""
    lo = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    x = np.array([-1.0, 0.5, 2.0, -1.0, 0.5, 2.0])
    hi = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    step = 1e-6

    def central(argnum):
        def clamp_at(shift):
            args = [lo.copy(), x.copy(), hi.copy()]
            args[argnum] += shift
            return np.minimum(np.maximum(args[1], args[0]), args[2])

        return (clamp_at(step) - clamp_at(-step)) / (2 * step)

    for transform in (fg.grad, fg.jacfwd):
        slopes = fg.vmap(transform(lax.clamp, argnums=(0, 1, 2)))(lo, x, hi)
        for argnum in range(3):
            np.testing.assert_allclose(np.asarray(slopes[argnum]), central(argnum), atol=1e-9)


@given(data=st.data())
def test_clamp_with_scalar_and_array_bounds(data):
    (x,) = data.draw(operands(fst.numeric_dtypes, count=1))
    bound_shape = data.draw(st.sampled_from([x.shape, ()]))
    a, b = (data.draw(fst.arrays(x.dtype, bound_shape)) for _ in range(2))
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    expected = reference(lambda v, l, h: min(max(v, l), h), x.dtype, x, lo, hi)
    assert_close(lax.clamp(lo, x, hi), expected, x.dtype)
    check_staging(lax.clamp, lo, x, hi, exact=True)
    if lo.ndim == 0:  # Python scalar bounds take the operand's dtype
        lo_py, hi_py = to_python(lo[()]), to_python(hi[()])
        assert_close(lax.clamp(lo_py, x, hi_py), expected, x.dtype)
        check_staging(lambda x: lax.clamp(lo_py, x, hi_py), x, exact=True)


# ---------------------------------------------------------------------------------------------
# Conversions


def convert_ref(dtype):
    dtype = np.dtype(dtype)

    def convert(v):
        if dtype == dtypes.bool_:
            return v != 0
        if dtypes.is_complex(dtype):
            return complex(v)
        if isinstance(v, complex):  # to a real dtype through the real part
            v = v.real
        if not dtypes.is_int(dtype):
            return float(v)
        if isinstance(v, float):  # truncate toward zero, NaN to 0, saturate
            if math.isnan(v):
                return 0
            info = np.iinfo(dtype)
            if math.isinf(v):
                return info.max if v > 0 else info.min
            return min(max(math.trunc(v), info.min), info.max)
        return int(v)

    return convert


@st.composite
def convertible(draw):
    src = draw(st.sampled_from(ALL_DTYPES))
    bounds = {}
    if dtypes.is_float(src):  # wide enough to saturate; NaN and inf have their own test
        bound = min(1e10, float(ml_dtypes.finfo(src).max))
        bounds = dict(min_value=-bound, max_value=bound)
    return draw(fst.arrays(src, fst.shapes(max_dims=3), **bounds))


@given(x=convertible(), new_dtype=st.sampled_from(ALL_DTYPES))
def test_convert_element_type(x, new_dtype):
    out = lax.convert_element_type(x, new_dtype)
    assert_close(out, reference(convert_ref(new_dtype), new_dtype, x), new_dtype)
    assert not out.weak_type
    check_staging(lambda x: lax.convert_element_type(x, new_dtype), x, exact=True)


@pytest.mark.parametrize("new_dtype", INT_DTYPES, ids=str)
def test_convert_float_to_int_saturates(new_dtype):
    info = np.iinfo(new_dtype)
    x = np.array([1e20, -1e20, np.inf, -np.inf, np.nan, -2.7, 2.7, -0.5, 2.0**63], np.float64)
    low = max(-2, info.min)
    expected = [info.max, info.min, info.max, info.min, 0, low, 2, 0, min(2**63, info.max)]
    np.testing.assert_array_equal(lax.convert_element_type(x, new_dtype), expected)


def test_convert_element_type_weak_types():
    weak = lax.add(1.0, 2.0)
    assert weak.weak_type
    assert not lax.convert_element_type(weak, np.float32).weak_type
    check_staging(lambda: lax.convert_element_type(lax.add(1.0, 2.0), np.float32))
    strong = fnp.asarray(np.ones(2, np.float32))
    assert lax.convert_element_type(strong, np.float32) is strong
    assert lax.convert_element_type(np.ones(2), float).dtype == dtypes.float32


@st.composite
def bitcastable(draw):
    src = draw(st.sampled_from(NUMERIC_DTYPES))
    dst = draw(st.sampled_from(NUMERIC_DTYPES))
    shape = draw(fst.shapes(max_dims=2, max_side=3))
    if dst.itemsize > src.itemsize:
        shape = shape + (dst.itemsize // src.itemsize,)
    return draw(fst.arrays(src, shape)), dst


@given(case=bitcastable())
def test_bitcast_convert_type(case):
    x, dst = case
    src_size, dst_size = x.dtype.itemsize, dst.itemsize
    if dst_size < src_size:
        shape = x.shape + (src_size // dst_size,)
    elif dst_size > src_size:
        shape = x.shape[:-1]
    else:
        shape = x.shape
    out = lax.bitcast_convert_type(x, dst)
    assert out.shape == shape and out.dtype == dst
    assert np.asarray(out).tobytes() == x.tobytes()
    back = lax.bitcast_convert_type(out, x.dtype)
    assert back.shape == x.shape and np.asarray(back).tobytes() == x.tobytes()
    check_staging(lambda x: lax.bitcast_convert_type(x, dst), x, exact=True)


def test_bitcast_convert_type_examples():
    one = lax.bitcast_convert_type(np.float32(1.0), np.uint8)
    np.testing.assert_array_equal(one, [0, 0, 128, 63])  # little-endian 0x3f800000
    assert lax.bitcast_convert_type(one, np.float32).shape == ()
    assert int(lax.bitcast_convert_type(np.float32(1.0), np.int32)) == 0x3F800000
    pairs = lax.bitcast_convert_type(np.zeros((2, 3), np.float64), np.float32)
    assert pairs.shape == (2, 3, 2)


def test_bitcast_convert_type_between_bool_and_other_types_is_an_error():
    # Eager made bools of any byte; compiled code failed to build (LLVM bitcasts i8 to i1).
    for x, dst in ((np.int8(2), np.bool_), (np.uint8(1), np.bool_), (np.True_, np.int8)):
        with pytest.raises(TypeError, match="between bool and other types"):
            lax.bitcast_convert_type(x, dst)
        with pytest.raises(TypeError, match="between bool and other types"):
            fg.jit(lambda v, dst=dst: lax.bitcast_convert_type(v, dst))(x)
    assert lax.bitcast_convert_type(np.array([True, False]), np.bool_).tolist() == [True, False]


@given(x=fst.arrays(fst.any_dtypes, fst.shapes(max_dims=3)))
def test_stop_gradient_is_the_identity_on_values(x):
    out = lax.stop_gradient(x)
    assert out.dtype == x.dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, x)
    check_staging(lax.stop_gradient, x, exact=True)
    tree = lax.stop_gradient({"a": x, "b": [2.0]})
    assert tree["b"][0].weak_type
    np.testing.assert_array_equal(tree["a"], x)


# ---------------------------------------------------------------------------------------------
# Weak types and Python scalars


def test_python_scalars_take_the_array_dtype():
    x_f16 = np.ones(3, np.float16)
    for fn in (lambda x: lax.add(x, 2.0), lambda x: lax.mul(2.0, x)):
        out = fn(x_f16)
        assert out.dtype == dtypes.float16 and not out.weak_type
        check_staging(fn, x_f16)
    out = lax.add(np.ones(2, np.int8), 3)
    assert out.dtype == dtypes.int8 and not out.weak_type
    both = lax.add(2.0, 3.0)
    assert both.dtype == dtypes.float32 and both.weak_type
    check_staging(lambda: lax.add(2.0, 3.0))
    check_staging(lax.add, 2.0, 3.0)


# ---------------------------------------------------------------------------------------------
# Errors: lax never promotes or broadcasts beyond rank 0


f32 = np.float32
ERRORS = [
    (lax.add, (np.ones((2, 3), f32), np.ones(3, f32)), r"add.*\(2, 3\), \(3,\)"),
    (lax.mul, (np.ones(2, f32), np.ones(2, np.float16)), r"mul.*float32, float16"),
    (lax.max, (np.ones(2, np.int32), np.ones(2, f32)), r"max.*int32, float32"),
    (lax.exp, (np.ones(2, np.int32),), r"exp.*int32"),
    (lax.atan2, (np.ones(2, np.int8), np.ones(2, np.int8)), r"atan2.*int8"),
    (lax.round, (np.ones(2, np.int32),), r"round.*int32"),
    (lax.bitwise_and, (np.ones(2, f32), np.ones(2, f32)), r"and.*float32"),
    (lax.shift_left, (np.ones(2, np.bool_), np.ones(2, np.bool_)), r"shift_left.*bool"),
    (lambda x: lax.integer_pow(x, -2), (np.ones(2, np.int32),), r"integer_pow.*-2"),
    (lax.select_n, (np.ones(2, f32), np.ones(2, f32)), r"select_n.*float32"),
    (lax.select_n, (np.ones(2, bool), *[np.ones(2, f32)] * 3), r"at most 2 cases, got 3"),
    (lax.select_n, (True, np.ones(2, f32), np.ones(3, f32)), r"select_n.*\(2,\), \(3,\)"),
    (lax.select_n, (np.ones(3, bool), np.ones(2, f32)), r"\(3,\).*\(2,\)"),
    (lax.clamp, (np.zeros(3, f32), np.ones(2, f32), f32(1)), r"clamp.*\(3,\).*\(2,\)"),
    (lax.clamp, (np.int32(0), np.ones(2, f32), f32(1)), r"clamp.*int32, float32"),
    (
        lambda x: lax.bitcast_convert_type(x, np.float32),
        (np.ones(3, np.uint8),),
        r"uint8 to float32.*size 4.*\(3,\)",
    ),
]
for name in FLOAT_ONLY:
    ERRORS.append((getattr(lax, name), (np.ones(2, np.int32),), rf"{name}.*int32"))


@pytest.mark.parametrize("fn, args, match", ERRORS)
def test_errors_name_the_shapes_and_dtypes(fn, args, match):
    with pytest.raises(TypeError, match=match):
        fn(*args)
    with pytest.raises(TypeError, match=match):
        fg.make_jaxpr(fn)(*args)


def test_division_slope_in_the_divisor_where_its_square_leaves_the_range():
    """d(x / y)/dy = -(x / y) / y: as -x / y**2 it was 0 / 0 = nan at x = 0, y = 1e-300, and
    -inf at x = y = 1e-200 (right: -1e200), y**2 underflowing though the slope is finite."""
    x = np.array([0.0, 1e-200, 3.0, -2.0])
    y = np.array([1e-300, 1e-200, 2.0, 1e160])
    expected = -(x / y) / y
    for transform in (fg.grad, fg.jacfwd):
        slopes = fg.vmap(transform(lax.div, argnums=1))(x, y)
        np.testing.assert_allclose(np.asarray(slopes), expected, rtol=1e-15)
    # hypot divides by its larger side: its slopes at tiny sides are the unit vector.
    np.testing.assert_allclose(
        np.asarray(fg.grad(fnp.hypot, argnums=(0, 1))(1e-300 * np.ones(()), 1e-300 * np.ones(()))),
        [np.sqrt(0.5)] * 2,
        rtol=1e-15,
    )


def test_atan2_slopes_where_the_squares_leave_the_range():
    """d atan2(x, y) = (y dx - x dy) / (x**2 + y**2): the squares underflowed at sides below
    1e-154 (slopes inf or nan, rather than about 1e300) and overflowed above 1e154."""
    x = np.array([1e-300, 0.0, 1e200, 0.3])
    y = np.array([1e-300, 1e-300, -3e200, -1.2])
    expected_x = np.array([5e299, 1e300, -3e-201, -1.2 / 1.53])
    expected_y = np.array([-5e299, 0.0, -1e-201, -0.3 / 1.53])
    for transform in (fg.grad, fg.jacfwd):
        slopes = fg.vmap(transform(lax.atan2, argnums=(0, 1)))(x, y)
        np.testing.assert_allclose(np.asarray(slopes[0]), expected_x, rtol=1e-14)
        np.testing.assert_allclose(np.asarray(slopes[1]), expected_y, rtol=1e-14)


def test_atan2_slopes_at_an_infinite_side():
    """With one side infinite the slopes are the plain quotients' (y dx - x dy) / (x**2 +
    y**2), in IEEE arithmetic: 0 toward the finite side; scaling by inf gave NaN."""
    x = np.array([np.inf, -np.inf, 2.0, 0.0])
    y = np.array([-3.0, 0.0, np.inf, -np.inf])
    with np.errstate(invalid="ignore"):
        expected_x = y / (x * x + y * y)
        expected_y = -x / (x * x + y * y)
    # (Reverse mode: forward mode's jvp adds 0 * NaN from the other side's slope.)
    slopes = fg.vmap(fg.grad(lax.atan2, argnums=(0, 1)))(x, y)
    np.testing.assert_array_equal(np.asarray(slopes[0]), expected_x)
    np.testing.assert_array_equal(np.asarray(slopes[1]), expected_y)
