"""funcgrad.numpy's elementwise functions: JAX's type promotion, and values against NumPy.

The promotion table below is transcribed from JAX's "Type promotion semantics" page; values are
checked against NumPy computing in the promoted dtype, with NumPy's broadcasting.
"""

import itertools

import ml_dtypes
import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_staging, jit_backend
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax

# ---------------------------------------------------------------------------------------------
# JAX's promotion table. i*, f* and c* are weakly typed Python int, float and complex; a weak
# result takes funcgrad's default dtype of its kind and stays weak.

CODES = "b1 u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i* f* c*".split()
TABLE = """
b1: b1 u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i* f* c*
u1: u1 u1 u2 u4 u8 i2 i2 i4 i8 bf f2 f4 f8 c4 c8 u1 f* c*
u2: u2 u2 u2 u4 u8 i4 i4 i4 i8 bf f2 f4 f8 c4 c8 u2 f* c*
u4: u4 u4 u4 u4 u8 i8 i8 i8 i8 bf f2 f4 f8 c4 c8 u4 f* c*
u8: u8 u8 u8 u8 u8 f* f* f* f* bf f2 f4 f8 c4 c8 u8 f* c*
i1: i1 i2 i4 i8 f* i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i1 f* c*
i2: i2 i2 i4 i8 f* i2 i2 i4 i8 bf f2 f4 f8 c4 c8 i2 f* c*
i4: i4 i4 i4 i8 f* i4 i4 i4 i8 bf f2 f4 f8 c4 c8 i4 f* c*
i8: i8 i8 i8 i8 f* i8 i8 i8 i8 bf f2 f4 f8 c4 c8 i8 f* c*
bf: bf bf bf bf bf bf bf bf bf bf f4 f4 f8 c4 c8 bf bf c4
f2: f2 f2 f2 f2 f2 f2 f2 f2 f2 f4 f2 f4 f8 c4 c8 f2 f2 c4
f4: f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f8 c4 c8 f4 f4 c4
f8: f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 c8 c8 f8 f8 c8
c4: c4 c4 c4 c4 c4 c4 c4 c4 c4 c4 c4 c4 c8 c4 c8 c4 c4 c4
c8: c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8
i*: i* u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i* f* c*
f*: f* f* f* f* f* f* f* f* f* bf f2 f4 f8 c4 c8 f* f* c*
c*: c* c* c* c* c* c* c* c* c* c4 c4 c4 c8 c4 c8 c* c* c*
"""
PROMOTION = {}
for line in TABLE.strip().splitlines():
    row, results = line.split(":")
    for column, result in zip(CODES, results.split()):
        PROMOTION[row, column] = result

DTYPE_OF_CODE = {
    "b1": dtypes.bool_,
    "u1": dtypes.uint8,
    "u2": dtypes.uint16,
    "u4": dtypes.uint32,
    "u8": dtypes.uint64,
    "i1": dtypes.int8,
    "i2": dtypes.int16,
    "i4": dtypes.int32,
    "i8": dtypes.int64,
    "bf": dtypes.bfloat16,
    "f2": dtypes.float16,
    "f4": dtypes.float32,
    "f8": dtypes.float64,
    "i*": dtypes.int32,
    "f*": dtypes.float32,
    "c4": dtypes.complex64,
    "c8": dtypes.complex128,
    "c*": dtypes.complex64,
}
CODE_OF_DTYPE = {d: c for c, d in DTYPE_OF_CODE.items() if "*" not in c}
PYTHON_SCALAR = {"i*": 1, "f*": 1.0, "c*": 1.0 + 1j}


def code(x) -> str:
    if isinstance(x, (int, float, complex)) and not isinstance(x, bool):
        return {int: "i*", float: "f*", complex: "c*"}[type(x)]
    if isinstance(x, bool):
        return "b1"
    return CODE_OF_DTYPE[np.dtype(x.dtype)]


def promoted(*operands) -> tuple[np.dtype, bool]:
    """The (dtype, weak_type) JAX's table gives these operands."""
    result = code(operands[0])
    for x in operands[1:]:
        result = PROMOTION[result, code(x)]
    return DTYPE_OF_CODE[result], "*" in result


def test_table_covers_every_supported_dtype():
    # (the narrow formats' promotions: tests/test_low_precision_dtypes.py)
    standard = {d for d in dtypes.supported_dtypes if not dtypes.is_narrow(d)}
    assert set(CODE_OF_DTYPE) == standard
    assert all(PROMOTION[a, b] == PROMOTION[b, a] for a, b in itertools.product(CODES, CODES))


def expected_dtype(a: str, b: str) -> np.dtype:
    """The table's result for codes a and b without enable_x64: there a 64-bit result that no
    operand brought (uint32 meeting a signed integer gives int64) is narrowed to 32 bits."""
    result = DTYPE_OF_CODE[PROMOTION[a, b]]
    if result == dtypes.int64 and not a.endswith("8") and not b.endswith("8"):
        return dtypes.int32
    return result


def test_result_type_matches_jax_table():
    def operand(c):
        return PYTHON_SCALAR[c] if c in PYTHON_SCALAR else DTYPE_OF_CODE[c]

    wrong = [
        (a, b, fnp.result_type(operand(a), operand(b)))
        for a, b in itertools.product(CODES, CODES)
        if fnp.result_type(operand(a), operand(b)) != expected_dtype(a, b)
    ]
    assert wrong == []
    with fg.enable_x64():
        assert fnp.result_type(np.uint32, np.int8) == fnp.result_type(np.int32, np.int64)
        assert fnp.result_type(np.uint32, np.int8) == dtypes.int64


def test_uint32_and_signed_integers_meet_in_int32_without_x64():
    """JAX's int64 there is canonicalized to int32; funcgrad gave int64 arrays, doubling the
    memory of, say, an int32 index plus a uint32 offset."""
    u32, i16 = np.array([4294967295, 7], np.uint32), np.array([-1, 2], np.int16)
    out = fnp.add(u32, i16)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, (u32.astype(np.int64) + i16).astype(np.int32))
    assert fnp.concatenate([u32, i16]).dtype == np.int32
    assert fnp.add(u32, np.int64(1)).dtype == np.int64  # 64 bits an operand brought stay


def test_arithmetic_promotes_by_the_table():
    def operand(c):
        if c in PYTHON_SCALAR:
            return lax.asarray(PYTHON_SCALAR[c])  # a weakly typed array
        return fnp.zeros((2,), DTYPE_OF_CODE[c])

    wrong = []
    for a, b in itertools.product(CODES, CODES):
        out = fnp.add(operand(a), operand(b))
        result = PROMOTION[a, b]
        if (out.dtype, out.weak_type) != (expected_dtype(a, b), "*" in result):
            wrong.append((a, b, out.aval))
    assert wrong == []


def test_python_types_as_dtypes_are_weak():
    assert fnp.result_type(np.uint8, int) == dtypes.uint8
    assert fnp.result_type(np.float16, float) == dtypes.float16
    assert fnp.result_type(np.int8, float) == dtypes.float32
    assert fnp.result_type(float) == dtypes.float32
    assert fnp.result_type(int, float) == dtypes.float32
    assert fnp.result_type(bool, int) == dtypes.int32


def test_weak_type_examples():
    x_f16 = fnp.asarray(np.ones(3, np.float16))
    assert fnp.add(x_f16, 2.0).dtype == dtypes.float16
    assert (x_f16 * 2.0).dtype == dtypes.float16
    x_i8 = fnp.asarray(np.ones(3, np.int8))
    out = x_i8 + 3
    assert out.dtype == dtypes.int8 and not out.weak_type
    x_i32 = fnp.asarray(np.ones(3, np.int32))
    out = x_i32 * 2.0  # a weak float beats every integer: the default float, still weak
    assert out.dtype == dtypes.float32 and out.weak_type
    x_f64 = fnp.asarray(np.ones(3))
    assert (x_f64 + 1.0).dtype == dtypes.float64  # never downcast
    scalar = fnp.asarray(1.0)
    assert scalar.dtype == dtypes.float32 and scalar.weak_type
    assert (scalar * x_f16).dtype == dtypes.float16
    assert fnp.asarray(2).dtype == dtypes.int32 and fnp.asarray(2).weak_type
    assert not fnp.asarray(True).weak_type
    assert not fnp.asarray(1.0, dtype=np.float32).weak_type
    for fn in (lambda x: x * 2.0, lambda x: x + 3, lambda x: 2.0 + x):
        check_staging(fn, np.ones(3, np.int32))
        check_staging(fn, np.ones(3, np.float16))


def test_booleans_add_as_or_and_multiply_as_and():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    for fn, np_fn in ((fnp.add, np.add), (fnp.multiply, np.multiply)):
        out = fn(a, b)
        assert out.dtype == dtypes.bool_
        np.testing.assert_array_equal(out, np_fn(a, b))
        check_staging(fn, a, b)
    assert fnp.add(True, True).dtype == dtypes.bool_
    assert bool(fnp.add(True, True))
    with pytest.raises(TypeError, match="bool"):
        fnp.subtract(a, b)


# ---------------------------------------------------------------------------------------------
# Strategies: operands of different dtypes, ranks and kinds (Python scalars included)

MIXED_DTYPES = [
    dtypes.bool_,
    dtypes.uint8,
    dtypes.int8,
    dtypes.int32,
    dtypes.float16,
    dtypes.float32,
    dtypes.float64,
]


@st.composite
def operand_pair(draw, allowed=MIXED_DTYPES, **bounds):
    """Two broadcastable operands of possibly different dtypes; either may be a Python scalar."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    out = []
    for shape in shapes.input_shapes:
        dtype = draw(st.sampled_from(allowed))
        x = draw(fst.arrays(dtype, shape, **bounds))
        # Python scalars (weakly typed); ints only where they fit every integer dtype.
        if x.ndim == 0 and draw(st.booleans()):
            if dtype == dtypes.float32 or (dtype == dtypes.int32 and 0 <= x < 128):
                x = x.item()
        out.append(x)
    return out


def nonzero(y):
    if isinstance(y, (int, float)):
        return y or 1
    return np.where(y == 0, np.ones_like(y), y)


def as_numpy(x, dtype) -> np.ndarray:
    with np.errstate(over="ignore"):  # int32 beyond float16's range becomes inf, as promoted
        return np.asarray(x).astype(dtype)


def inexact(dtype: np.dtype) -> np.dtype:
    return dtype if dtypes.is_float(dtype) else dtypes.float32


# name: (NumPy function, dtypes drawn, value bounds, result is inexact)
BINARY = {
    "add": (np.add, MIXED_DTYPES, {}, False),
    "subtract": (np.subtract, MIXED_DTYPES[1:], {}, False),
    "multiply": (np.multiply, MIXED_DTYPES, {}, False),
    "maximum": (np.maximum, MIXED_DTYPES, {}, False),
    "minimum": (np.minimum, MIXED_DTYPES, {}, False),
    "true_divide": (np.true_divide, MIXED_DTYPES[1:], dict(min_value=1, max_value=9), True),
    "arctan2": (np.arctan2, MIXED_DTYPES, {}, True),
    "hypot": (np.hypot, MIXED_DTYPES, {}, True),
    "copysign": (np.copysign, MIXED_DTYPES, {}, True),
    "logaddexp": (np.logaddexp, MIXED_DTYPES, {}, True),
    "logaddexp2": (np.logaddexp2, MIXED_DTYPES, {}, True),
    "heaviside": (np.heaviside, MIXED_DTYPES, {}, True),
    "float_power": (np.float_power, MIXED_DTYPES[1:], dict(min_value=1, max_value=4), True),
    "nextafter": (np.nextafter, MIXED_DTYPES, {}, True),
    "fmax": (np.fmax, MIXED_DTYPES, {}, False),
    "fmin": (np.fmin, MIXED_DTYPES, {}, False),
    "bitwise_and": (np.bitwise_and, MIXED_DTYPES[:4], {}, False),
    "bitwise_or": (np.bitwise_or, MIXED_DTYPES[:4], {}, False),
    "bitwise_xor": (np.bitwise_xor, MIXED_DTYPES[:4], {}, False),
}
LOGICAL = {
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}
COMPARISONS = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_ufuncs_match_numpy(name, data):
    np_fn, allowed, bounds, is_inexact = BINARY[name]
    x, y = data.draw(operand_pair(allowed, **bounds))
    dtype, _ = promoted(x, y)
    if is_inexact:
        dtype = inexact(dtype)
    fn = getattr(fnp, name)
    out = fn(x, y)
    assert out.dtype == dtype
    with np.errstate(all="ignore"):
        expected = np_fn(as_numpy(x, dtype), as_numpy(y, dtype)).astype(dtype)
    assert_close(out, expected, dtype)
    check_staging(fn, x, y)


@pytest.mark.parametrize("name", sorted({**LOGICAL, **COMPARISONS}))
@given(data=st.data())
def test_logical_and_comparison_ufuncs_give_booleans(name, data):
    x, y = data.draw(operand_pair())
    fn = getattr(fnp, name)
    out = fn(x, y)
    assert out.dtype == dtypes.bool_ and not out.weak_type
    if name in LOGICAL:  # on the truth values of each operand, whatever its dtype
        expected = LOGICAL[name](np.asarray(x), np.asarray(y))
    else:  # compared in the promoted dtype
        dtype, _ = promoted(x, y)
        expected = COMPARISONS[name](as_numpy(x, dtype), as_numpy(y, dtype))
    np.testing.assert_array_equal(out, expected)
    check_staging(fn, x, y)


def test_comparisons_with_nan():
    x = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    y = np.array([1.0, np.nan, np.nan, 2.0], np.float32)
    for name, np_fn in COMPARISONS.items():
        np.testing.assert_array_equal(getattr(fnp, name)(x, y), np_fn(x, y))
    np.testing.assert_array_equal(fnp.isnan(fnp.maximum(x, y)), np.isnan(np.maximum(x, y)))


# ---------------------------------------------------------------------------------------------
# Unary functions

# name: (NumPy function, value bounds)
INEXACT_UNARY = {
    "exp": (np.exp, {}),
    "exp2": (np.exp2, {}),
    "expm1": (np.expm1, {}),
    "log": (np.log, dict(min_value=0.125)),
    "log2": (np.log2, dict(min_value=0.125)),
    "log10": (np.log10, dict(min_value=0.125)),
    "log1p": (np.log1p, dict(min_value=0)),
    "sqrt": (np.sqrt, dict(min_value=0)),
    "cbrt": (np.cbrt, {}),
    "sin": (np.sin, {}),
    "cos": (np.cos, {}),
    "tan": (np.tan, dict(min_value=-1.5, max_value=1.5)),
    "arcsin": (np.arcsin, dict(min_value=-1, max_value=1)),
    "arccos": (np.arccos, dict(min_value=-1, max_value=1)),
    "arctan": (np.arctan, {}),
    "sinh": (np.sinh, {}),
    "cosh": (np.cosh, {}),
    "tanh": (np.tanh, {}),
    "arcsinh": (np.arcsinh, {}),
    "arccosh": (np.arccosh, dict(min_value=1)),
    "arctanh": (np.arctanh, dict(min_value=-0.9375, max_value=0.9375)),
    "deg2rad": (np.deg2rad, {}),
    "rad2deg": (np.rad2deg, {}),
    "sinc": (np.sinc, {}),
    "reciprocal": (np.reciprocal, dict(min_value=1)),
    "rint": (np.rint, {}),
}
# Functions that keep integer dtypes (booleans excluded: NumPy and JAX disagree there).
NUMERIC_UNARY = {
    "negative": np.negative,
    "positive": np.positive,
    "absolute": np.absolute,
    "sign": np.sign,
    "square": np.square,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "fix": np.fix,
}
PREDICATES = {
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "isposinf": np.isposinf,
    "isneginf": np.isneginf,
    "signbit": np.signbit,
    "logical_not": np.logical_not,
}
UNARY_DTYPES = st.sampled_from(MIXED_DTYPES[1:])


@pytest.mark.parametrize("name", sorted(INEXACT_UNARY))
@given(data=st.data())
def test_inexact_unary_ufuncs_match_numpy(name, data):
    np_fn, bounds = INEXACT_UNARY[name]
    x = data.draw(fst.arrays(UNARY_DTYPES, fst.shapes(max_dims=3, max_side=4), **bounds))
    dtype = inexact(x.dtype)
    fn = getattr(fnp, name)
    out = fn(x)
    assert out.dtype == dtype
    with np.errstate(all="ignore"):
        assert_close(out, np_fn(x.astype(dtype)), dtype)
    check_staging(fn, x)


@pytest.mark.parametrize("name", sorted(NUMERIC_UNARY))
@given(x=fst.arrays(UNARY_DTYPES, fst.shapes(max_dims=3, max_side=4)))
def test_numeric_unary_ufuncs_match_numpy(name, x):
    fn = getattr(fnp, name)
    out = fn(x)
    assert out.dtype == x.dtype
    with np.errstate(all="ignore"):
        assert_close(out, NUMERIC_UNARY[name](x), x.dtype)
    check_staging(fn, x)


SPECIALS = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, -np.nan], np.float32)


@pytest.mark.parametrize("name", sorted(PREDICATES))
@pytest.mark.parametrize(
    "x",
    [
        SPECIALS,
        SPECIALS.astype(np.float64),
        np.array([-3, 0, 5], np.int8),
        np.array([0, 7], np.uint8),
    ],
    ids=["f32", "f64", "i8", "u8"],
)
def test_predicates_match_numpy(name, x):
    out = getattr(fnp, name)(x)
    assert out.dtype == dtypes.bool_
    np.testing.assert_array_equal(out, PREDICATES[name](x))
    check_staging(getattr(fnp, name), x)


@given(x=fst.arrays(fst.int_dtypes, fst.shapes(max_dims=2, max_side=4)))
def test_bitwise_not_and_count(x):
    np.testing.assert_array_equal(fnp.bitwise_not(x), np.invert(x))
    np.testing.assert_array_equal(fnp.invert(x), np.invert(x))
    count = fnp.bitwise_count(x)
    assert count.dtype == dtypes.uint8
    np.testing.assert_array_equal(count, np.bitwise_count(x))
    check_staging(fnp.bitwise_count, x)


def test_bitwise_count_of_booleans_is_numpys():
    x = np.array([True, False])
    np.testing.assert_array_equal(fnp.bitwise_count(x), np.bitwise_count(x))
    assert fnp.bitwise_count(x).dtype == np.uint8


def test_aliases():
    aliases = {
        "abs": "absolute",
        "acos": "arccos",
        "acosh": "arccosh",
        "asin": "arcsin",
        "asinh": "arcsinh",
        "atan": "arctan",
        "atan2": "arctan2",
        "atanh": "arctanh",
        "degrees": "rad2deg",
        "radians": "deg2rad",
        "mod": "remainder",
        "pow": "power",
        "conj": "conjugate",
    }
    for alias, name in aliases.items():
        assert getattr(fnp, alias) is getattr(fnp, name), alias
    x = np.array([1.5, -2.0], np.float32)
    for identity in (fnp.conjugate, fnp.real, fnp.positive):
        np.testing.assert_array_equal(identity(x), x)


# ---------------------------------------------------------------------------------------------
# Integer division, powers and shifts


@given(data=st.data())
def test_integer_floor_divide_and_remainder_follow_numpy(data):
    dtype = data.draw(fst.int_dtypes)
    x, y = data.draw(operand_pair([dtype]))
    y = nonzero(y)
    x_np, y_np = as_numpy(x, dtype), as_numpy(y, dtype)
    for fn, np_fn in (
        (fnp.floor_divide, np.floor_divide),
        (fnp.remainder, np.remainder),
        (fnp.fmod, np.fmod),
    ):
        with np.errstate(all="ignore"):
            expected = np_fn(x_np, y_np)
        assert_close(fn(x, y), expected, dtype)
        check_staging(fn, x, y)
    quotient, rest = fnp.divmod(x, y)
    with np.errstate(all="ignore"):
        assert_close(quotient, np.floor_divide(x_np, y_np), dtype)
    assert_close(rest, np.remainder(x_np, y_np), dtype)


@given(data=st.data())
def test_float_floor_divide_and_remainder_follow_numpy(data):
    x, y = data.draw(operand_pair(MIXED_DTYPES[4:]))
    y = nonzero(y)
    dtype, _ = promoted(x, y)
    for fn, np_fn in ((fnp.floor_divide, np.floor_divide), (fnp.remainder, np.remainder)):
        expected = np_fn(as_numpy(x, dtype), as_numpy(y, dtype))
        assert_close(fn(x, y), expected, dtype)
        check_staging(fn, x, y)


def test_floor_divide_examples():
    x = np.array([7, -7, 7, -7], np.int32)
    y = np.array([2, 2, -2, -2], np.int32)
    np.testing.assert_array_equal(fnp.floor_divide(x, y), [3, -4, -4, 3])
    np.testing.assert_array_equal(fnp.remainder(x, y), [1, 1, -1, -1])
    np.testing.assert_array_equal(x // 2, [3, -4, 3, -4])
    assert float(fnp.floor_divide(np.float64(1.0), np.float64(0.1))) == 9.0  # as NumPy
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(
            fnp.floor_divide(np.array([1.0, -1.0]), 0.0), np.floor_divide([1.0, -1.0], 0.0)
        )


@given(
    base=fst.arrays(fst.int_dtypes, fst.shapes(max_dims=2, max_side=4)),
    exponent=st.integers(0, 7),
)
def test_integer_power_wraps_like_numpy(base, exponent):
    exponents = np.full(base.shape, exponent, base.dtype)
    with np.errstate(all="ignore"):
        expected = np.power(base, exponents)
    np.testing.assert_array_equal(fnp.power(base, exponents), expected)
    np.testing.assert_array_equal(fnp.power(base, exponent), expected)
    np.testing.assert_array_equal(fnp.asarray(base) ** exponent, expected)
    check_staging(fnp.power, base, exponents)
    check_staging(lambda b: b**exponent, base)


def test_integer_power_with_negative_exponents():
    # The integer part of 1 / base ** -e: 0 except for bases 1 and -1.
    base = np.array([2, 3, -3, 1, 1, -1, -1, 0], np.int32)
    exponent = np.array([-1, -1, -2, -3, -4, -3, -4, -1], np.int32)
    expected = [0, 0, 0, 1, 1, -1, 1, 0]
    np.testing.assert_array_equal(fnp.power(base, exponent), expected)
    check_staging(fnp.power, base, exponent)
    # A negative Python int exponent is known while tracing: refused, as NumPy and JAX do.
    with pytest.raises(ValueError, match="negative powers"):
        fnp.power(base, -1)


@given(
    base=fst.arrays(fst.all_float_dtypes, fst.shapes(max_dims=2), min_value=0.5, max_value=4),
    exponent=st.integers(-3, 4),
)
def test_float_power_with_python_int_exponent(base, exponent):
    out = fnp.power(base, exponent)
    assert out.dtype == base.dtype
    assert_close(out, (base.astype(np.float64) ** exponent).astype(base.dtype), base.dtype)
    check_staging(lambda b: fnp.power(b, exponent), base)


@pytest.mark.parametrize("name", ["left_shift", "right_shift"])
@given(data=st.data())
def test_shifts_match_numpy(name, data):
    dtype = data.draw(fst.int_dtypes)
    bits = dtype.itemsize * 8
    x = data.draw(fst.arrays(dtype, fst.shapes(max_dims=2, max_side=4)))
    amounts = data.draw(fst.arrays(dtype, x.shape, min_value=-2, max_value=bits + 2))
    fn = getattr(fnp, name)
    np.testing.assert_array_equal(fn(x, amounts), getattr(np, name)(x, amounts))
    check_staging(fn, x, amounts)


@pytest.mark.parametrize("name", ["left_shift", "right_shift"])
def test_shifts_of_booleans_compute_in_int32(name):
    # As JAX's (NumPy's in int8); they raised "shift_left does not accept dtype bool".
    x, amounts = np.array([True, False, True]), np.array([True, True, False])
    expected = getattr(np, name)(x, amounts).astype(np.int32)
    assert_close(getattr(fnp, name)(x, amounts), expected, np.int32)
    assert_close(getattr(fnp, name)(x, True), getattr(np, name)(x, 1).astype(np.int32))


# ---------------------------------------------------------------------------------------------
# Special values


def test_logaddexp_with_infinities():
    inf, nan = np.inf, np.nan
    x = np.array([-inf, -inf, inf, inf, -inf, 1.0, nan, 0.0], np.float32)
    y = np.array([-inf, inf, inf, 2.0, 3.0, -inf, 1.0, 0.0], np.float32)
    for fn, np_fn in ((fnp.logaddexp, np.logaddexp), (fnp.logaddexp2, np.logaddexp2)):
        with np.errstate(invalid="ignore"):
            expected = np_fn(x, y)
        assert_close(fn(x, y), expected, np.float32)
        check_staging(fn, x, y)


def test_logaddexp_derivatives_at_nan_are_nan_and_at_equal_infinities_one():
    """d/dx log(e^x + e^y) = e^x / (e^x + e^y): nan where an operand is nan (softplus' derivative
    at nan was 1), and 1 for each of two equal infinities, whose sum is the answer."""
    for x, y, expected in [(np.nan, 0.0, np.nan), (0.0, np.nan, np.nan), (np.inf, np.inf, 1.0)]:
        grads = fg.grad(fnp.logaddexp, argnums=(0, 1))(x, y)
        assert_close(grads, (expected, expected))
    assert np.isnan(fg.grad(fg.nn.softplus)(np.nan))
    assert np.isnan(fg.grad(fg.nn.log_sigmoid)(np.nan))


def test_hypot_copysign_signbit_special_values():
    inf, nan = np.inf, np.nan
    x = np.array([inf, inf, nan, 3.0, -0.0, 0.0, 1e30], np.float32)
    y = np.array([inf, nan, -inf, -4.0, -0.0, 0.0, 1e30], np.float32)
    assert_close(fnp.hypot(x, y), np.hypot(x, y), np.float32)
    sign = np.array([-0.0, 0.0, -1.0, 1.0, -nan, nan, -inf, inf], np.float32)
    magnitude = np.ones_like(sign)
    np.testing.assert_array_equal(
        np.signbit(fnp.copysign(magnitude, sign)), np.signbit(np.copysign(magnitude, sign))
    )
    np.testing.assert_array_equal(fnp.signbit(sign), np.signbit(sign))
    bf = sign.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(fnp.signbit(bf), np.signbit(sign))


def test_fmax_fmin_ignore_nan_and_maximum_propagates_it():
    x = np.array([np.nan, 1.0, np.nan, -0.5], np.float32)
    y = np.array([2.0, np.nan, np.nan, 0.5], np.float32)
    np.testing.assert_array_equal(fnp.fmax(x, y), np.fmax(x, y))
    np.testing.assert_array_equal(fnp.fmin(x, y), np.fmin(x, y))
    np.testing.assert_array_equal(fnp.maximum(x, y), np.maximum(x, y))
    np.testing.assert_array_equal(fnp.minimum(x, y), np.minimum(x, y))
    check_staging(fnp.fmax, x, 1.0)
    check_staging(fnp.fmin, 1.0, y)


def test_heaviside_sinc_and_trunc():
    x = np.array([-1.5, -0.0, 0.0, 2.0, -0.5, 0.5], np.float32)
    np.testing.assert_array_equal(fnp.heaviside(x, 0.5), np.heaviside(x, np.float32(0.5)))
    np.testing.assert_array_equal(fnp.heaviside(x, x), np.heaviside(x, x))
    assert_close(fnp.sinc(x), np.sinc(x), np.float32)
    assert float(fnp.sinc(0.0)) == 1.0
    np.testing.assert_array_equal(fnp.trunc(x), np.trunc(x))
    np.testing.assert_array_equal(np.signbit(fnp.trunc(x)), np.signbit(np.trunc(x)))


@given(
    x=fst.arrays(
        fst.float_dtypes, fst.shapes(max_dims=2, max_side=4), min_value=-1000, max_value=1000
    ),
    decimals=st.integers(-2, 3),
)
def test_round_with_decimals_matches_numpy(x, decimals):
    assert_close(fnp.round(x, decimals), np.round(x, decimals), x.dtype)
    assert_close(fnp.around(x, decimals), np.round(x, decimals), x.dtype)
    check_staging(lambda x: fnp.round(x, decimals), x)


@given(
    x=fst.arrays(
        st.sampled_from([dtypes.int8, dtypes.int32, dtypes.uint8]),
        fst.shapes(max_dims=2),
        # int32 results past the range differ: NumPy casts an out-of-range float, we wrap
        min_value=-(2**30),
        max_value=2**30,
    ),
    decimals=st.integers(-2, 1),
)
def test_round_integers_with_negative_decimals_matches_numpy(x, decimals):
    with np.errstate(all="ignore"):
        expected = np.round(x, decimals)
    np.testing.assert_array_equal(fnp.round(x, decimals), expected)
    check_staging(lambda x: fnp.round(x, decimals), x)


def test_round_examples():
    halves = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.125, 0.375], np.float32)
    np.testing.assert_array_equal(fnp.round(halves), np.round(halves))
    np.testing.assert_array_equal(fnp.round(halves, 2), np.round(halves, 2))
    ints = np.array([15, 25, -15, -25, 14, 16], np.int32)
    np.testing.assert_array_equal(fnp.round(ints, -1), [20, 20, -20, -20, 10, 20])
    np.testing.assert_array_equal(fnp.round(np.array([25.0, 35.0]), -1), [20.0, 40.0])


@pytest.mark.parametrize(
    "combine",
    [
        lambda x: x == [0, 1, 5],
        lambda x: [0, 1, 5] == x,
        lambda x: x != (0, 1, 5),
        lambda x: x < [1, 2, 3],
        lambda x: x + [1, 2, 3],
        lambda x: (1, 2, 3) * x,
    ],
)
def test_operators_refuse_python_containers(combine):
    with pytest.raises(TypeError, match=r"fnp\.asarray"):
        combine(fnp.arange(3))
    # Traced values too, where a silent False would be a wrong branch taken.
    with pytest.raises(TypeError, match=r"fnp\.asarray"):
        fg.jit(combine)(fnp.arange(3))


def test_heaviside_of_nan_is_nan():
    x = np.array([np.nan, -2.0, 0.0, 3.0], np.float32)
    np.testing.assert_array_equal(np.asarray(fnp.heaviside(x, 0.5)), np.heaviside(x, 0.5))


def test_negating_booleans_is_a_type_error_as_in_numpy():
    with pytest.raises(TypeError, match="not supported for booleans"):
        -fnp.array([True, False])
    with pytest.raises(TypeError, match="not supported for booleans"):
        fnp.negative(True)
    np.testing.assert_array_equal(np.asarray(-fnp.arange(3)), [0, -1, -2])


def test_integers_to_negative_powers_raise_as_in_numpy():
    with pytest.raises(ValueError, match="negative powers"):
        fnp.arange(3) ** -1
    with pytest.raises(ValueError, match="negative powers"):
        fnp.power(2, -1)
    np.testing.assert_allclose(np.asarray(fnp.arange(1.0, 3.0) ** -1), [1.0, 0.5])


@pytest.fixture
def rank_promotion():
    def use(mode):
        fg.config.update("jax_numpy_rank_promotion", mode)

    yield use
    fg.config.update("numpy_rank_promotion", "allow")


def test_rank_promotion_can_warn_or_raise_naming_the_shapes(rank_promotion):
    matrix, row = fnp.ones((2, 3)), fnp.arange(3.0)
    assert_close(matrix + row, np.ones((2, 3)) + np.arange(3.0))  # "allow", NumPy's rule
    rank_promotion("raise")
    with pytest.raises(ValueError, match=r"shapes \(2, 3\), \(3,\) have different ranks"):
        matrix + row
    with pytest.raises(ValueError, match="different ranks"):
        fg.jit(fnp.multiply)(matrix, row)
    # Same ranks broadcast, and scalars (of any kind) are not rank promotion.
    assert_close(matrix + row[None, :], np.ones((2, 3)) + np.arange(3.0))
    assert_close(matrix * 2.0 + fnp.asarray(1.0), np.full((2, 3), 3.0))
    rank_promotion("warn")
    with pytest.warns(UserWarning, match="different ranks") as caught:
        out = fnp.add(matrix, row)
    assert caught[0].filename == __file__  # the user's line, not funcgrad's
    assert_close(out, np.ones((2, 3)) + np.arange(3.0))
    with pytest.raises(ValueError, match="must be 'allow', 'warn' or 'raise'"):
        fg.config.update("numpy_rank_promotion", "strict")


def test_complex_log2_and_log10_of_zero_and_infinities_match_numpy():
    # log(z) / log(10) as a complex division gave log10(0j) = -inf + nan j (NumPy: -inf + 0j)
    # and log10(inf + 0j) = inf + nan j.
    z = np.array([0j, complex(np.inf, 0), complex(0, np.inf), complex(1e300, 1e300), 3 - 4j])
    with np.errstate(divide="ignore"):
        expected = {name: getattr(np, name)(z) for name in ("log2", "log10")}
    for name in ("log2", "log10"):
        for fun in (getattr(fnp, name), fg.jit(getattr(fnp, name))):
            actual = np.asarray(fun(z))
            np.testing.assert_allclose(actual.real, expected[name].real, rtol=1e-12)
            np.testing.assert_allclose(actual.imag, expected[name].imag, rtol=1e-12)


def _log10_and_log2_on_every_backend(x: np.ndarray) -> dict:
    """fnp.log10(x) and fnp.log2(x) eagerly and jitted on each CPU backend (the CUDA emulator
    where a C++ compiler is found)."""
    from funcgrad.backends.cuda import emulator

    backends = ["numpy", "llvm"] + (["cuda_emulator"] if emulator.compiler() else [])
    results = {"eager": (np.asarray(fnp.log10(x)), np.asarray(fnp.log2(x)))}
    for backend in backends:
        with jit_backend(backend):
            results[backend] = (np.asarray(fg.jit(fnp.log10)(x)), np.asarray(fg.jit(fnp.log2)(x)))
    return results


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log10_and_log2_are_exact_at_powers_of_their_base(dtype):
    # log(x) / log(base) gave log10(1000) = 2.9999999999999996 and log2(2^-1000) an ulp off;
    # NumPy's own float32 log10 gives 3.0000002 at 1000.
    info = np.finfo(dtype)
    exponents = np.arange(info.minexp - info.nmant, info.maxexp)
    tens = np.arange(11 if dtype == np.float32 else 23)  # 10^k exactly representable
    x = np.concatenate([10.0**tens, np.ldexp(1.0, exponents)]).astype(dtype)
    for backend, (log10, log2) in _log10_and_log2_on_every_backend(x).items():
        assert log10.dtype == log2.dtype == dtype, backend
        np.testing.assert_array_equal(log10[: tens.size], tens, err_msg=backend)
        np.testing.assert_array_equal(log2[tens.size :], exponents, err_msg=backend)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log10_and_log2_special_values(dtype):
    info = np.finfo(dtype)
    special = [0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, info.smallest_subnormal, 3 * info.tiny]
    x = np.array(special + [float(info.max), 1.0, 0.5], dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = (np.log10(x.astype(np.float64)), np.log2(x.astype(np.float64)))
    for backend, results in _log10_and_log2_on_every_backend(x).items():
        for got, wanted in zip(results, expected):
            np.testing.assert_allclose(got, wanted.astype(dtype), rtol=1e-15, err_msg=backend)


def test_log10_and_log2_gradients():
    for fun in (fnp.log10, fnp.log2):
        fg.test_util.check_grads(fun, (np.array([0.3, 2.0, 1e3]),), order=2)
        fg.test_util.check_grads(fg.jit(fun), (np.array([0.3, 2.0, 1e3]),), order=1)


def test_python_ints_out_of_the_arrays_integer_range_raise():
    """As in NumPy 2 (docs/differences.md): JAX wraps them silently (int8 + 300 is 47)."""
    with pytest.raises(OverflowError, match="300"):
        fnp.add(np.array([3], np.int8), 300)
    with pytest.raises(OverflowError, match="-1"):
        fnp.asarray(np.array([9], np.uint32)) - (-1)
    np.testing.assert_array_equal(fnp.add(np.array([3], np.int8), 100), np.int8([103]))


@pytest.mark.parametrize("name", ["deg2rad", "degrees", "rad2deg", "radians", "sinc", "reciprocal"])
def test_functions_of_python_numbers_stay_weakly_typed(name):
    """Their constants were strong float32 arrays, so degrees(2.5) * float16 was float32."""
    for value in (2.5, 1 + 2j):
        out = getattr(fnp, name)(value)
        assert out.weak_type, (name, value)
    half = np.ones(2, np.float16)
    assert (getattr(fnp, name)(2.5) * half).dtype == np.float16
    assert not getattr(fnp, name)(np.float32(2.5)).weak_type


def test_sign_refuses_booleans_as_numpy_does():
    """It returned int32 ones and zeros."""
    with pytest.raises(TypeError, match="sign does not accept booleans"):
        fnp.sign(np.array([True, False]))
    assert fnp.sign(np.array([-2, 0, 3], np.int8)).dtype == np.int8


def test_integer_floor_division_by_zero_gives_numpys_zero():
    """docs/differences.md: JAX gives -2 for -3 // 0 and 4294967295 for uint32 7 // 0."""
    a, b = np.array([-3, 7, 0, -7], np.int32), np.array([0, 0, 0, 2], np.int32)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(fnp.floor_divide(a, b), np.floor_divide(a, b))
        np.testing.assert_array_equal(fnp.divmod(a, b)[1], np.remainder(a, b))
    np.testing.assert_array_equal(fnp.asarray(np.uint32([7])) // np.uint32(0), np.uint32([0]))
    assert fnp.tri(2).dtype == np.float32
    with fg.enable_x64():
        assert fnp.tri(2).dtype == np.float64  # the default float, as eye's (JAX: float32)


@pytest.mark.parametrize("name", ["rint", "angle"])
@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int8, np.int32, np.uint32])
def test_rint_and_angle_of_integers_give_the_default_float(name, dtype):
    """They gave float32 under enable_x64 too, where the default float is float64 (the
    values are exact either way: whole numbers, and 0 or pi); a Python int gives a strongly
    typed result, which a float16 array does not narrow."""
    values = np.array([3, 0, 1, 2]).astype(dtype)
    if np.dtype(dtype).kind == "i":
        values = values - 2
    expected = getattr(np, name)(values.astype(np.float64))
    for x64, float_dtype in [(False, np.float32), (True, np.float64)]:
        with fg.enable_x64(x64):
            out = getattr(fnp, name)(values)
            assert out.dtype == float_dtype, (name, dtype, x64)
            np.testing.assert_allclose(np.asarray(out), expected.astype(float_dtype), rtol=1e-7)
            assert fg.jit(getattr(fnp, name))(values).dtype == float_dtype
            assert (getattr(fnp, name)(3) + np.ones(2, np.float16)).dtype == float_dtype
