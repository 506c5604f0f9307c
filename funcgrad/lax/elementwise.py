"""Elementwise primitives: unary and binary math, comparisons, bitwise ops, select, conversions.

Operands of an elementwise primitive have one shape, except that rank-0 operands broadcast
(so `x * 2.0` stages as one `mul`); `funcgrad.numpy` inserts explicit broadcasts for the rest.
"""

from __future__ import annotations

import builtins
import enum
import operator

import numpy as np

from funcgrad import dtypes
from funcgrad.array import Array
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.interpreters import ad, batching
from funcgrad.lax import _special
from funcgrad.lax.accuracy import check_accuracy
from funcgrad.lax.base import (
    ANY,
    COMPLEX,
    FLOAT,
    INEXACT,
    INT,
    INT_OR_BOOL,
    NUMERIC,
    REAL,
    REAL_NUMERIC,
    asarray,
    check_dtype_class,
    check_same_dtypes,
    elementwise_shape,
)

# ---------------------------------------------------------------------------------------------
# Declaring elementwise primitives

__all__ = [
    "RoundingMethod",
    "abs",
    "acos",
    "acosh",
    "add",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitcast_convert_type",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "cbrt",
    "ceil",
    "clamp",
    "complex",
    "conj",
    "convert_element_type",
    "cos",
    "cosh",
    "digamma",
    "div",
    "eq",
    "erf",
    "erf_inv",
    "erfc",
    "exp",
    "exp2",
    "expm1",
    "floor",
    "ge",
    "imag",
    "gt",
    "integer_pow",
    "is_finite",
    "le",
    "lgamma",
    "log",
    "log1p",
    "logistic",
    "lt",
    "max",
    "min",
    "mul",
    "ne",
    "neg",
    "nextafter",
    "population_count",
    "pow",
    "real",
    "reciprocal",
    "rem",
    "round",
    "rsqrt",
    "select",
    "select_n",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "stop_gradient",
    "sub",
    "tan",
    "tanh",
]


def computed_wide(impl, narrow: str = "value"):
    """`impl` that takes the narrow formats (8- and 4-bit floats, 2- and 4-bit integers) in
    their compute dtype (float32, int32) and rounds the result back to the operand's dtype (the
    integers wrap), as compiled programs compute them. `narrow` says what widens: "value"; or
    "pattern", where a signed narrow integer widens as its bit pattern (a logical shift or a
    bit count sees the format's own bits, not the sign extended over 32); or "own": nothing,
    the impl works in the format itself (nextafter steps to the format's own neighbour)."""
    if narrow == "own":
        return impl

    def computed(x, *rest, **params):
        dtype = x.dtype
        if dtype.itemsize != 1 or dtype not in dtypes.NARROW:  # (the eager path's common case)
            return impl(x, *rest, **params)
        wide = [_widen(operand, narrow == "pattern") for operand in (x, *rest)]
        out = impl(*wide, **params)
        return out if out.dtype == np.bool_ else out.astype(dtype)

    return computed


def _widen(x, pattern: bool):
    wide = np.asarray(x).astype(dtypes.compute_dtype(x.dtype))
    if pattern and dtypes.is_int(x.dtype):
        wide = wide & np.int32((1 << dtypes.bit_width(x.dtype)) - 1)
    return wide[()] if wide.ndim == 0 else wide


def unary_primitive(
    name: str, impl, accepted=NUMERIC, result_dtype=None, narrow: str = "value"
) -> Primitive:
    """Declare a one-operand elementwise primitive; `result_dtype` fixes the output dtype and
    `narrow` how the narrow formats compute (`computed_wide`)."""
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, **params) -> ShapedArray:
        check_dtype_class(name, x, accepted)
        return ShapedArray(x.shape, result_dtype or x.dtype)

    prim.def_impl(computed_wide(impl, narrow))
    if result_dtype is not None:
        prim.def_weak_type(never_weak)
    batching.defvectorized(prim)
    return prim


def binary_primitive(
    name: str, impl, accepted=NUMERIC, result_dtype=None, narrow: str = "value"
) -> Primitive:
    """Declare a two-operand elementwise primitive with operands of one dtype."""
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, y: ShapedArray) -> ShapedArray:
        dtype = check_same_dtypes(name, [x, y])
        check_dtype_class(name, x, accepted)
        return ShapedArray(elementwise_shape(name, [x, y]), result_dtype or dtype)

    prim.def_impl(computed_wide(impl, narrow))
    if result_dtype is not None:
        prim.def_weak_type(never_weak)
    batching.defbroadcasting(prim)
    return prim


def binary_operands(x, y):
    """Operands for a binary lax function: a Python scalar takes the other operand's dtype."""
    if dtypes.is_python_scalar(x) and not dtypes.is_python_scalar(y):
        y = asarray(y)
        return _weak_scalar(x, y.dtype), y
    if dtypes.is_python_scalar(y) and not dtypes.is_python_scalar(x):
        x = asarray(x)
        return x, _weak_scalar(y, x.dtype)
    return asarray(x), asarray(y)


def _weak_scalar(value, dtype: np.dtype) -> Array:
    if (isinstance(value, float) and not dtypes.is_inexact(dtype)) or (
        isinstance(value, builtins.complex) and not dtypes.is_complex(dtype)
    ):
        return asarray(value)  # let the primitive's dtype check name the mismatch
    return Array(np.array(value, dtype)[()], not isinstance(value, bool))


# ---------------------------------------------------------------------------------------------
# Unary math


def _logistic(x):
    # e / (1 + e) below 0 and 1 / (1 + e) above, e = exp(-|x|) (of the real part for complex
    # x): exp never overflows, and the negative tail keeps its relative precision (0.5 tanh(x /
    # 2) + 0.5 gave 0 below -17 in float32, where the values down to 1e-38 are representable,
    # and lost the real part of complex values far into the left half plane).
    one = x.dtype.type(1)
    if dtypes.is_complex(x.dtype):
        left = x.real < 0
        e = np.exp(np.where(left, x, -x))
        return np.where(left, e / (one + e), one / (one + e))
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, one / (one + e), e / (one + e))


def _rsqrt(x):
    return x.dtype.type(1) / np.sqrt(x)


def _sign(x):
    if dtypes.is_complex(x.dtype):
        # z / |z|, and 0 at 0 (NumPy's complex sign is the sign of the real part before 2.0).
        # z is first scaled by an exact power of two: 2^60 where it is subnormal, which gives
        # it its full precision (|z| of the smallest subnormals rounds to one of its parts),
        # 1/4 where a part passes a quarter of the largest float, where |z| would overflow
        # (sign(3e38 + 3e38j) was 0 in complex64). Each part divides by the real modulus (a
        # complex division by a subnormal modulus would lose it). As NumPy has it, an
        # infinite part gives ±1 on its axis, two of them NaN + NaN i.
        info = dtypes.finfo(x.dtype)
        larger = np.maximum(np.abs(x.real), np.abs(x.imag))
        scale = np.where(larger < info.tiny, 2.0**60, np.where(larger > info.max / 4, 0.25, 1.0))
        # (each part on its own: a complex product by scale + 0i would turn an infinite
        # part's 0 * inf into NaN and lose zeros' signs)
        scale = scale.astype(x.real.dtype)
        real, imag = x.real * scale, x.imag * scale
        with np.errstate(invalid="ignore"):
            magnitude = np.hypot(real, imag)
            safe = np.where(magnitude == 0, 1, magnitude)
            re = np.where(magnitude == 0, 0, real / safe)
            im = np.where(magnitude == 0, 0, imag / safe)
        infinite_re, infinite_im = np.isinf(real), np.isinf(imag)
        on_axis = np.where(infinite_re & infinite_im, np.nan, 0)
        out = np.empty(np.shape(x), x.dtype)
        out.real = np.where(infinite_im, on_axis, np.where(infinite_re, np.sign(real), re))
        out.imag = np.where(infinite_re, on_axis, np.where(infinite_im, np.sign(imag), im))
        return out[()] if out.ndim == 0 else out
    if dtypes.is_float(x.dtype):
        # XLA keeps the sign of zero (sign(-0.0) is -0.0); NumPy's sign gives +0.0.
        return np.copysign(np.sign(x), x)
    return np.sign(x)


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _log1p(x):
    """NumPy's log1p; for complex z, log|1 + z| as log1p(2a + a² + b²) / 2 where that argument
    is small (NumPy's log|1 + z| keeps only its absolute accuracy: log1p(1e-20j) has real
    part 5e-41, not 0), as the compiled programs take it."""
    if x.dtype.kind != "c":
        return np.log1p(x)
    a, b = x.real, x.imag
    with np.errstate(all="ignore"):
        square = a * (a + 2) + b * b
        near = np.abs(square) < 0.5
        re = np.where(near, np.log1p(np.where(near, square, 0)) / 2, np.log(np.abs(x + 1)))
        out = np.empty(x.shape, x.dtype)
        out.real, out.imag = re, np.arctan2(b, a + 1)
    return out


def _in_float64(f):
    """f of a narrower float computed in float64 and rounded once (NumPy's float32 log10 is an
    ulp off at 100, 1000 and other exact powers of 10)."""

    def impl(x):
        if x.dtype == np.float64:
            return f(x)
        return f(x.astype(np.float64)).astype(x.dtype)

    return impl


def _population_count(x):
    # Count the bits of the two's complement pattern; NumPy's bitwise_count counts those of |x|.
    unsigned = np.asarray(x).view(np.dtype(f"u{x.dtype.itemsize}"))
    return np.bitwise_count(unsigned).astype(x.dtype)


neg_p = unary_primitive("neg", np.negative)
sign_p = unary_primitive("sign", _sign)
floor_p = unary_primitive("floor", np.floor, FLOAT)
ceil_p = unary_primitive("ceil", np.ceil, FLOAT)
is_finite_p = unary_primitive("is_finite", np.isfinite, FLOAT, result_dtype=dtypes.bool_)
exp_p = unary_primitive("exp", np.exp, INEXACT)
exp2_p = unary_primitive("exp2", np.exp2, INEXACT)
log_p = unary_primitive("log", np.log, INEXACT)
# log10 and log2 of real operands: the quotient log(x) / log(base) is an ulp off at exact
# powers of the base (log(1000) / log(10) is 2.9999999999999996); funcgrad.numpy takes
# complex operands through log.
log10_p = unary_primitive("log10", _in_float64(np.log10), FLOAT)
log2_p = unary_primitive("log2", _in_float64(np.log2), FLOAT)
log1p_p = unary_primitive("log1p", _log1p, INEXACT)
expm1_p = unary_primitive("expm1", np.expm1, INEXACT)
tanh_p = unary_primitive("tanh", np.tanh, INEXACT)
logistic_p = unary_primitive("logistic", _logistic, INEXACT)
sin_p = unary_primitive("sin", np.sin, INEXACT)
cos_p = unary_primitive("cos", np.cos, INEXACT)
tan_p = unary_primitive("tan", np.tan, INEXACT)
asin_p = unary_primitive("asin", np.arcsin, INEXACT)
acos_p = unary_primitive("acos", np.arccos, INEXACT)
atan_p = unary_primitive("atan", np.arctan, INEXACT)
sinh_p = unary_primitive("sinh", np.sinh, INEXACT)
cosh_p = unary_primitive("cosh", np.cosh, INEXACT)
asinh_p = unary_primitive("asinh", np.arcsinh, INEXACT)
acosh_p = unary_primitive("acosh", np.arccosh, INEXACT)
atanh_p = unary_primitive("atanh", np.arctanh, INEXACT)
sqrt_p = unary_primitive("sqrt", np.sqrt, INEXACT)
rsqrt_p = unary_primitive("rsqrt", _rsqrt, INEXACT)
cbrt_p = unary_primitive("cbrt", np.cbrt, FLOAT)
erf_p = unary_primitive("erf", _special.erf, FLOAT)
erfc_p = unary_primitive("erfc", _special.erfc, FLOAT)
erf_inv_p = unary_primitive("erf_inv", _special.erf_inv, FLOAT)
lgamma_p = unary_primitive("lgamma", _special.lgamma, FLOAT)
digamma_p = unary_primitive("digamma", _special.digamma, FLOAT)
not_p = unary_primitive("not", _not, INT_OR_BOOL)
population_count_p = unary_primitive("population_count", _population_count, INT, narrow="pattern")

# ---------------------------------------------------------------------------------------------
# Complex numbers: their parts, and the primitives whose result is real for complex operands


def part_primitive(name: str, impl, accepted) -> Primitive:
    """A one-operand primitive whose result has the dtype of its operand's real parts."""
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray) -> ShapedArray:
        check_dtype_class(name, x, accepted)
        return ShapedArray(x.shape, dtypes.real_dtype(x.dtype))

    prim.def_impl(computed_wide(impl))
    batching.defvectorized(prim)
    return prim


abs_p = part_primitive("abs", np.abs, NUMERIC)
real_p = part_primitive("real", np.real, COMPLEX)
imag_p = part_primitive("imag", np.imag, COMPLEX)
conj_p = unary_primitive("conj", np.conjugate, COMPLEX)
complex_p = Primitive("complex")


@complex_p.def_abstract_eval
def _complex_abstract_eval(x: ShapedArray, y: ShapedArray) -> ShapedArray:
    dtype = check_same_dtypes("complex", [x, y])
    if dtype not in (dtypes.float32, dtypes.float64):
        raise TypeError(
            f"complex builds complex64 or complex128 from float32 or float64 parts, got "
            f"{dtype.name}"
        )
    return ShapedArray(elementwise_shape("complex", [x, y]), dtypes.complex_dtype(dtype))


@complex_p.def_impl
def _complex_impl(x, y):
    # Parts assigned, not x + 1j y: that sum loses a zero's sign and turns an infinite y's
    # real part into NaN (inf * 0).
    x, y = np.broadcast_arrays(x, y)
    out = np.empty(x.shape, dtypes.complex_dtype(x.dtype))
    out.real, out.imag = x, y
    return out[()] if out.ndim == 0 else out


batching.defbroadcasting(complex_p)


class RoundingMethod(enum.IntEnum):
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def _round(x, rounding_method):
    if rounding_method == RoundingMethod.TO_NEAREST_EVEN:
        return np.rint(x)
    whole = np.trunc(x)
    # x - trunc(x) is exact, so halves are detected without the rounding error of x + 0.5.
    return np.where(np.abs(x - whole) >= x.dtype.type(0.5), whole + np.sign(x), whole)


round_p = unary_primitive("round", _round, FLOAT)


def _integer_pow(x, *, y):
    # The exponent must not be cast to the operand's dtype: int8 cannot hold 300, and
    # bfloat16 rounds 257 to 256 (flipping the sign of (-1) ** 257).
    if dtypes.is_int(x.dtype):
        # uint64 arithmetic wraps like every narrower integer type, so truncating is exact.
        return np.power(x.astype(np.uint64), np.uint64(y)).astype(x.dtype)
    if dtypes.is_complex(x.dtype) and abs(y) <= 2**24:
        # In the operand's precision, as NumPy's power of complex64 overflows in its products.
        power = np.power(x, x.dtype.type(y))
        if -100 < y < 0:  # NumPy's is 1 / x^-y, by its quotient (see `_complex_quotient`)
            positive = np.power(x, x.dtype.type(-y))
            power = _by_subnormal_divisors(np.ones_like(x), positive, power)
        return power
    return np.power(x, np.float64(y)).astype(x.dtype)


integer_pow_p = Primitive("integer_pow")


@integer_pow_p.def_abstract_eval
def _integer_pow_abstract_eval(x: ShapedArray, *, y: int) -> ShapedArray:
    check_dtype_class("integer_pow", x, NUMERIC)
    if y < 0 and dtypes.is_int(x.dtype):
        raise TypeError(f"integer_pow of an integer array needs a non-negative exponent, got {y}")
    return ShapedArray(x.shape, x.dtype)


integer_pow_p.def_impl(computed_wide(_integer_pow))

# ---------------------------------------------------------------------------------------------
# Binary math


def _div(x, y):
    if dtypes.is_int(x.dtype):
        # Integer division rounds toward zero, as in C (NumPy's // rounds toward -inf).
        quotient = np.floor_divide(x, y)
        remainder = np.fmod(x, y)
        fix = (remainder != 0) & ((remainder < 0) != (np.asarray(y) < 0))
        return (quotient + fix).astype(x.dtype)
    if dtypes.is_complex(x.dtype):
        return _complex_quotient(x, y)
    return np.true_divide(x, y)


def _complex_quotient(x, y):
    """NumPy's complex quotient, except by a divisor whose parts are both subnormal: NumPy's
    Smith's algorithm multiplies by the reciprocal of its denominator, which overflows there
    ((1 + 1j) / (5e-324 + 5e-324j) was inf + nan j, not inf + 0j; z / z was inf + nan j)."""
    return _by_subnormal_divisors(x, y, np.true_divide(x, y))


def _by_subnormal_divisors(x, y, quotient):
    """`quotient` (x / y) where y has a normal part, and x / y by Smith's algorithm dividing
    by the denominator, as the compiled programs divide, where both of y's parts are
    subnormal (or one is, and the other 0)."""
    c, d = np.real(y), np.imag(y)
    larger = np.maximum(np.abs(c), np.abs(d))
    subnormal = (larger < dtypes.finfo(c.dtype).tiny) & (larger != 0)
    if not np.any(subnormal):
        return quotient
    a, b = np.real(x), np.imag(x)
    with np.errstate(all="ignore"):
        real_larger = np.abs(c) >= np.abs(d)
        big, small = np.where(real_larger, c, d), np.where(real_larger, d, c)
        ratio = small / big
        denominator = big + small * ratio
        re = np.where(real_larger, a + b * ratio, a * ratio + b) / denominator
        im = np.where(real_larger, b - a * ratio, b * ratio - a) / denominator
    smith = np.empty(np.shape(quotient), np.result_type(quotient))
    smith.real, smith.imag = re, im
    out = np.where(subnormal, smith, quotient)
    return out[()] if out.ndim == 0 else out


def _pow(x, y):
    out = np.power(x, y)
    if dtypes.is_complex(out.dtype):
        return out
    # x^0 and 1^y are 1 whatever the other operand, a signaling NaN too, as the compiled
    # programs give them (NumPy's float16 and bfloat16 powers gave NaN for one).
    out = np.where((y == 0) | (x == 1), np.ones((), out.dtype), out)
    return out[()] if out.ndim == 0 else out


def _shift_left(x, y):
    bits = x.dtype.itemsize * 8
    in_range = (y >= 0) & (y < bits)
    return np.where(in_range, np.left_shift(x, np.where(in_range, y, 0)), 0).astype(x.dtype)


def _shift_right_arithmetic(x, y):
    bits = x.dtype.itemsize * 8
    signed = x.view(np.dtype(f"i{x.dtype.itemsize}")) if x.dtype.kind == "u" else x
    # Amounts out of range (negative, or at least the bit width) fill with the sign bit.
    in_range = (y >= 0) & (y < bits)
    amount = np.where(in_range, y, bits - 1).astype(signed.dtype)
    shifted = np.right_shift(signed, amount)
    return np.asarray(shifted).view(x.dtype) if x.dtype.kind == "u" else shifted


def _shift_right_logical(x, y):
    bits = x.dtype.itemsize * 8
    unsigned_dtype = np.dtype(f"u{x.dtype.itemsize}")
    unsigned = np.asarray(x).view(unsigned_dtype)
    in_range = (y >= 0) & (y < bits)
    amount = np.where(in_range, y, 0).astype(unsigned_dtype)
    shifted = np.where(in_range, np.right_shift(unsigned, amount), 0).astype(unsigned_dtype)
    out = shifted.view(x.dtype)
    return out[()] if out.ndim == 0 else out


def _max(x, y):
    """NumPy's maximum with +0 above -0, as the compiled backends order them: NumPy returns
    either zero of a tie (by operand order, and for float16 by another rule), so relu(-0.0)
    was -0.0 eagerly and +0.0 under jit."""
    return _order_signed_zeros(np.maximum(x, y), x, y, larger=True)


def _min(x, y):
    """NumPy's minimum with -0 below +0 (see `_max`)."""
    return _order_signed_zeros(np.minimum(x, y), x, y, larger=False)


def _order_signed_zeros(out, x, y, larger: bool):
    if not dtypes.is_float(out.dtype):
        return out
    x_first = np.signbit(x) != larger
    out = np.where((x == 0) & (y == 0), np.where(x_first, x, y), out).astype(out.dtype)
    return out[()] if out.ndim == 0 else out


add_p = binary_primitive("add", np.add)
sub_p = binary_primitive("sub", np.subtract)
mul_p = binary_primitive("mul", np.multiply)
div_p = binary_primitive("div", _div)
rem_p = binary_primitive("rem", np.fmod, REAL_NUMERIC)
pow_p = binary_primitive("pow", _pow, INEXACT)
max_p = binary_primitive("max", _max, REAL)
min_p = binary_primitive("min", _min, REAL)
atan2_p = binary_primitive("atan2", np.arctan2, FLOAT)


def _nextafter(x, y):
    """C's nextafter: x == y gives y (so -0 toward +0 is +0). NumPy's float16 gave x before
    2.5, and the other formats always give y."""
    stepped = np.nextafter(x, y)
    if stepped.dtype != np.float16:
        return stepped
    return np.where(x == y, y, stepped).astype(np.float16)


nextafter_p = binary_primitive("nextafter", _nextafter, FLOAT, narrow="own")
eq_p = binary_primitive("eq", np.equal, ANY, result_dtype=dtypes.bool_)
ne_p = binary_primitive("ne", np.not_equal, ANY, result_dtype=dtypes.bool_)
lt_p = binary_primitive("lt", np.less, REAL, result_dtype=dtypes.bool_)
le_p = binary_primitive("le", np.less_equal, REAL, result_dtype=dtypes.bool_)
gt_p = binary_primitive("gt", np.greater, REAL, result_dtype=dtypes.bool_)
ge_p = binary_primitive("ge", np.greater_equal, REAL, result_dtype=dtypes.bool_)
and_p = binary_primitive("and", np.bitwise_and, INT_OR_BOOL)
or_p = binary_primitive("or", np.bitwise_or, INT_OR_BOOL)
xor_p = binary_primitive("xor", np.bitwise_xor, INT_OR_BOOL)
shift_left_p = binary_primitive("shift_left", _shift_left, INT)
shift_right_logical_p = binary_primitive(
    "shift_right_logical", _shift_right_logical, INT, narrow="pattern"
)
shift_right_arithmetic_p = binary_primitive("shift_right_arithmetic", _shift_right_arithmetic, INT)

# ---------------------------------------------------------------------------------------------
# Selection and clamping

select_n_p = Primitive("select_n")


@select_n_p.def_abstract_eval
def _select_n_abstract_eval(which: ShapedArray, *cases: ShapedArray) -> ShapedArray:
    if not cases:
        raise TypeError("select_n needs at least one case")
    if which.dtype != dtypes.bool_ and not dtypes.is_int(which.dtype):
        raise TypeError(f"select_n's selector must be bool or an integer, got {which.dtype.name}")
    if which.dtype == dtypes.bool_ and len(cases) > 2:
        raise TypeError(f"a boolean selector picks between at most 2 cases, got {len(cases)}")
    dtype = check_same_dtypes("select_n", cases)
    shape = cases[0].shape
    if any(c.shape != shape for c in cases):
        raise TypeError(
            "select_n cases must have the same shapes, got "
            + ", ".join(str(c.shape) for c in cases)
        )
    if which.shape not in ((), shape):
        raise TypeError(
            f"select_n's selector shape {which.shape} must be scalar or equal to the cases' "
            f"shape {shape}"
        )
    return ShapedArray(shape, dtype)


@select_n_p.def_impl
def _select_n_impl(which, *cases):
    if len(cases) == 1:
        return cases[0]
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0])
    # A selector outside [0, len(cases)) picks the nearest case, as the compiled select chain
    # does.
    which = np.clip(np.asarray(which, np.int64), 0, len(cases) - 1)
    return np.choose(which, cases) if np.ndim(which) else cases[int(which)]


@select_n_p.def_weak_type
def _select_n_weak_type(weak_flags, **params) -> bool:
    return all(weak_flags[1:])


clamp_p = Primitive("clamp")


@clamp_p.def_abstract_eval
def _clamp_abstract_eval(lo: ShapedArray, x: ShapedArray, hi: ShapedArray) -> ShapedArray:
    dtype = check_same_dtypes("clamp", [lo, x, hi])
    check_dtype_class("clamp", x, REAL)
    for bound, which in ((lo, "min"), (hi, "max")):
        if bound.shape not in ((), x.shape):
            raise TypeError(
                f"clamp's {which} shape {bound.shape} must be scalar or equal to the operand "
                f"shape {x.shape}"
            )
    return ShapedArray(x.shape, dtype)


@clamp_p.def_impl
def _clamp_impl(lo, x, hi):
    # max and min's order of zeros (-0 below +0): NumPy's float16 minimum and maximum return
    # either zero of a tie by a rule of their own.
    return _min(_max(x, lo), hi)


@clamp_p.def_weak_type
def _clamp_weak_type(weak_flags, **params) -> bool:
    return weak_flags[1]


# ---------------------------------------------------------------------------------------------
# Dtype conversions

convert_element_type_p = Primitive("convert_element_type")


@convert_element_type_p.def_abstract_eval
def _convert_abstract_eval(x: ShapedArray, *, new_dtype: np.dtype, weak_type: bool):
    return ShapedArray(x.shape, new_dtype)


@convert_element_type_p.def_impl
def _convert_impl(x, *, new_dtype, weak_type):
    if dtypes.is_narrow(x.dtype):
        # Through the compute dtype, which holds each value exactly (ml_dtypes converts
        # between some narrow formats only so).
        x = np.asarray(x).astype(dtypes.compute_dtype(x.dtype))
    if dtypes.is_complex(x.dtype) and new_dtype == dtypes.bool_:
        return np.asarray(x != 0)[()]  # true for any nonzero part
    if dtypes.is_complex(x.dtype) and not dtypes.is_complex(new_dtype):
        x = np.real(x)  # a complex value converts to a real dtype through its real part
    if dtypes.is_float(x.dtype) and dtypes.is_int(new_dtype):
        # Float to int truncates toward zero, maps NaN to 0 and saturates out-of-range values.
        # The range is checked in float64, where the maximum of a 64-bit type rounds up to
        # 2**63 or 2**64: values at or above it saturate instead of overflowing the cast.
        info = dtypes.iinfo(new_dtype)
        wide = np.trunc(np.nan_to_num(np.asarray(x, np.float64), nan=0.0))
        too_low, too_high = wide <= info.min, wide >= info.max
        inside = np.where(too_low | too_high, 0, wide).astype(new_dtype)
        out = np.where(too_low, info.min, np.where(too_high, info.max, inside)).astype(new_dtype)
        return out[()] if out.ndim == 0 else out
    return np.asarray(x).astype(new_dtype)[()] if np.ndim(x) == 0 else x.astype(new_dtype)


@convert_element_type_p.def_weak_type
def _convert_weak_type(weak_flags, *, new_dtype, weak_type) -> bool:
    return weak_type


bitcast_convert_type_p = Primitive("bitcast_convert_type")


@bitcast_convert_type_p.def_abstract_eval
def _bitcast_abstract_eval(x: ShapedArray, *, new_dtype: np.dtype) -> ShapedArray:
    if (x.dtype == np.bool_) != (np.dtype(new_dtype) == np.bool_):
        # A bool's byte holds 0 or 1 only; other bytes read as bools would be neither.
        raise TypeError(
            f"bitcast_convert_type does not convert between bool and other types (got "
            f"{x.dtype.name} to {np.dtype(new_dtype).name}); use convert_element_type"
        )
    for dtype in (x.dtype, np.dtype(new_dtype)):
        if dtypes.is_narrow(dtype) and dtypes.bit_width(dtype) < 8:
            # NumPy holds each in a byte of its own; their bits would be packed two or four a
            # byte, and only convert_element_type gives their values.
            raise TypeError(
                f"bitcast_convert_type does not take the sub-byte dtype {dtype.name} (got "
                f"{x.dtype.name} to {np.dtype(new_dtype).name}); use convert_element_type"
            )
    old_size, new_size = x.dtype.itemsize, np.dtype(new_dtype).itemsize
    if old_size == new_size:
        return ShapedArray(x.shape, new_dtype)
    if old_size > new_size:
        return ShapedArray(x.shape + (old_size // new_size,), new_dtype)
    ratio = new_size // old_size
    if not x.shape or x.shape[-1] != ratio:
        raise TypeError(
            f"bitcast_convert_type from {x.dtype.name} to {np.dtype(new_dtype).name} needs a "
            f"last dimension of size {ratio}, got shape {x.shape}"
        )
    return ShapedArray(x.shape[:-1], new_dtype)


@bitcast_convert_type_p.def_impl
def _bitcast_impl(x, *, new_dtype):
    x = np.asarray(x, order="C")  # not ascontiguousarray, which makes 0-d arrays 1-d
    old_size, new_size = x.dtype.itemsize, np.dtype(new_dtype).itemsize
    if old_size == new_size:
        out = x.view(new_dtype)
    elif old_size > new_size:
        out = x.reshape(x.shape + (1,)).view(new_dtype)
    else:
        out = x.view(new_dtype).reshape(x.shape[:-1])
    return out[()] if out.ndim == 0 else out


bitcast_convert_type_p.def_weak_type(never_weak)

# ---------------------------------------------------------------------------------------------
# Public wrappers, with funcgrad.lax's (and JAX's) signatures


def _unary(prim: Primitive):
    def op(x):
        return prim.bind(asarray(x))

    op.__name__ = op.__qualname__ = prim.name
    op.__doc__ = f"Elementwise {prim.name} (the `{prim.name}` primitive)."
    return op


def _unary_with_accuracy(prim: Primitive):
    """The wrapper of a transcendental function, which takes an `accuracy` request
    (funcgrad.lax.accuracy: checked, and computed the same way whatever it says)."""

    def op(x, *, accuracy=None):
        if accuracy is not None:
            check_accuracy(prim.name, accuracy)
        return prim.bind(asarray(x))

    op.__name__ = op.__qualname__ = prim.name
    op.__doc__ = f"Elementwise {prim.name} (the `{prim.name}` primitive)."
    return op


def _binary(prim: Primitive):
    def op(x, y):
        return prim.bind(*binary_operands(x, y))

    op.__name__ = op.__qualname__ = prim.name
    op.__doc__ = f"Elementwise {prim.name} (the `{prim.name}` primitive)."
    return op


neg = _unary(neg_p)
real = _unary(real_p)
imag = _unary(imag_p)
conj = _unary(conj_p)
sign = _unary(sign_p)
floor = _unary(floor_p)
ceil = _unary(ceil_p)
is_finite = _unary(is_finite_p)
exp = _unary_with_accuracy(exp_p)
exp2 = _unary_with_accuracy(exp2_p)
log = _unary_with_accuracy(log_p)
log1p = _unary_with_accuracy(log1p_p)
expm1 = _unary_with_accuracy(expm1_p)
tanh = _unary_with_accuracy(tanh_p)
logistic = _unary_with_accuracy(logistic_p)
sin = _unary_with_accuracy(sin_p)
cos = _unary_with_accuracy(cos_p)
tan = _unary_with_accuracy(tan_p)
asin = _unary(asin_p)
acos = _unary(acos_p)
atan = _unary(atan_p)
sinh = _unary(sinh_p)
cosh = _unary(cosh_p)
asinh = _unary(asinh_p)
acosh = _unary(acosh_p)
atanh = _unary(atanh_p)
sqrt = _unary_with_accuracy(sqrt_p)
rsqrt = _unary_with_accuracy(rsqrt_p)
cbrt = _unary_with_accuracy(cbrt_p)
abs = _unary(abs_p)
erf = _unary(erf_p)
erfc = _unary(erfc_p)
erf_inv = _unary(erf_inv_p)
lgamma = _unary(lgamma_p)
digamma = _unary(digamma_p)
bitwise_not = _unary(not_p)
population_count = _unary(population_count_p)

add = _binary(add_p)
complex = _binary(complex_p)
sub = _binary(sub_p)


def mul(x, y, *, out_dtype=None):
    """Elementwise product (the `mul` primitive); with `out_dtype`, of the operands converted
    to it (int8 operands multiply to an int32 product without wrapping)."""
    x, y = binary_operands(x, y)
    if out_dtype is not None:
        x, y = convert_element_type(x, out_dtype), convert_element_type(y, out_dtype)
    return mul_p.bind(x, y)


div = _binary(div_p)
rem = _binary(rem_p)


def pow(x, y):
    """x ** y: y of x's dtype or, for a floating or complex x, of any integer dtype. A whole
    exponent is raised in float64 (complex128), which holds it exactly to 2^53 and so keeps
    its parity, the sign of a negative x's power (float16 rounds 2049 to 2048)."""
    x, y = binary_operands(x, y)
    if dtypes.is_inexact(x.dtype) and dtypes.is_int(y.dtype):
        wide = dtypes.complex128 if dtypes.is_complex(x.dtype) else dtypes.float64
        power = pow_p.bind(convert_element_type(x, wide), convert_element_type(y, wide))
        return convert_element_type(power, x.dtype)
    return pow_p.bind(x, y)


max = _binary(max_p)
min = _binary(min_p)
atan2 = _binary(atan2_p)


def nextafter(x1, x2):
    """The next representable number after `x1` in the direction of `x2`."""
    return nextafter_p.bind(*binary_operands(x1, x2))


eq = _binary(eq_p)
ne = _binary(ne_p)
lt = _binary(lt_p)
le = _binary(le_p)
gt = _binary(gt_p)
ge = _binary(ge_p)
bitwise_and = _binary(and_p)
bitwise_or = _binary(or_p)
bitwise_xor = _binary(xor_p)
shift_left = _binary(shift_left_p)
shift_right_logical = _binary(shift_right_logical_p)
shift_right_arithmetic = _binary(shift_right_arithmetic_p)


def square(x):
    return integer_pow(x, 2)


def reciprocal(x):
    return integer_pow(x, -1)


stop_gradient_p = Primitive("stop_gradient")


@stop_gradient_p.def_abstract_eval
def _stop_gradient_abstract_eval(x: ShapedArray) -> ShapedArray:
    return x


@stop_gradient_p.def_impl
def _stop_gradient_impl(x):
    return x


def stop_gradient(x):
    """The identity, whose derivative is zero: differentiation treats `x` as a constant."""
    from funcgrad import tree_util

    return tree_util.tree_map(lambda leaf: stop_gradient_p.bind(asarray(leaf)), x)


def integer_pow(x, y: int):
    try:
        y = operator.index(y)
    except TypeError:
        raise TypeError(f"integer_pow: the exponent must be an integer, got {y!r}") from None
    return integer_pow_p.bind(asarray(x), y=y)


def round(x, rounding_method: RoundingMethod = RoundingMethod.AWAY_FROM_ZERO):
    return round_p.bind(asarray(x), rounding_method=RoundingMethod(rounding_method))


def select_n(which, *cases):
    return select_n_p.bind(asarray(which), *map(asarray, cases))


def select(pred, on_true, on_false):
    """`on_true` where `pred`, else `on_false` (select_n with the cases in selector order)."""
    return select_n_p.bind(asarray(pred), asarray(on_false), asarray(on_true))


def clamp(min, x, max):
    x = asarray(x)
    lo = _weak_scalar(min, x.dtype) if isinstance(min, (int, float)) else asarray(min)
    hi = _weak_scalar(max, x.dtype) if isinstance(max, (int, float)) else asarray(max)
    return clamp_p.bind(lo, x, hi)


def convert_element_type(operand, new_dtype):
    operand = asarray(operand)
    new_dtype = dtypes.canonicalize(new_dtype)
    if operand.dtype == new_dtype and not operand.weak_type:
        return operand
    return convert_element_type_p.bind(operand, new_dtype=new_dtype, weak_type=False)


def bitcast_convert_type(operand, new_dtype):
    return bitcast_convert_type_p.bind(asarray(operand), new_dtype=dtypes.canonicalize(new_dtype))


# ---------------------------------------------------------------------------------------------
# Differentiation rules. They are written with the wrappers above, so every rule is itself
# differentiable and higher derivatives come by composition.


def _const(x, value) -> Array:
    """A rank-0 constant of x's dtype (elementwise primitives broadcast rank-0 operands)."""
    return Array(np.array(value, x.dtype)[()], False)


def _unbroadcast(cotangent, aval: ShapedArray):
    """A rank-0 operand was broadcast against the others: its cotangent is the total."""
    if aval.shape == () and cotangent.shape != ():
        from funcgrad.lax.reductions import reduce_sum

        return reduce_sum(cotangent, tuple(range(cotangent.ndim)))
    return cotangent


def _broadcast(x, shape: tuple[int, ...]):
    if x.shape == shape:
        return x
    from funcgrad.lax.shapes import broadcast_in_dim

    return broadcast_in_dim(x, shape, ())


def _trigamma(x):
    """ψ'(x), the derivative of digamma: reflection below 1/2, the recurrence
    ψ'(x) = ψ'(x + 1) + 1/x² up to x + 10, then the asymptotic series in 1/x."""
    reflect = lt(x, _const(x, 0.5))
    y = select(reflect, sub(_const(x, 1.0), x), x)
    total = integer_pow(y, -2)
    for k in range(1, 10):
        total = add(total, integer_pow(add(y, _const(x, k)), -2))
    inv = integer_pow(add(y, _const(x, 10.0)), -1)
    inv2 = mul(inv, inv)
    # 1/z + 1/(2z²) + 1/(6z³) - 1/(30z⁵) + 1/(42z⁷) - 1/(30z⁹), evaluated by Horner's rule.
    tail = _const(x, -1 / 30)
    for coefficient in (1 / 42, -1 / 30, 1 / 6):
        tail = add(_const(x, coefficient), mul(inv2, tail))
    series = mul(inv, add(_const(x, 1.0), mul(inv, add(_const(x, 0.5), mul(inv, tail)))))
    direct = add(total, series)
    pi = _const(x, np.pi)
    reflected = sub(integer_pow(div(pi, sin(mul(pi, x))), 2), direct)
    # At the poles 0, -1, -2, ... sin(pi x) is a rounding error away from 0, not 0: the
    # reflection gave a large finite value there (6.6e32 at -1) instead of inf.
    pole = bitwise_and(le(x, _const(x, 0.0)), eq(floor(x), x))
    return select(pole, _full(x, np.inf, x.shape), select(reflect, reflected, direct))


def _full(x, value, shape: tuple[int, ...]):
    return _broadcast(_const(x, value), shape)


def _balanced_eq(x, z, y):
    """1 where x is the extremum z, halved where y ties with it (max/min split ties evenly)."""
    one, half, zero = (_full(z, v, z.shape) for v in (1.0, 0.5, 0.0))
    return select(eq(x, z), select(eq(y, z), half, one), zero)


ad.deflinear(neg_p, lambda ct, x: [neg(ct)])
ad.deflinear(conj_p, lambda ct, x: [conj(ct)])
# real and imag are linear over the reals; their transposes put the cotangent back into the
# part it came from (imag's with a minus sign: the pairing is Re(ct * conj-free dz)).
ad.deflinear(real_p, lambda ct, x: [complex(ct, _full(ct, 0.0, ct.shape))])
ad.deflinear(imag_p, lambda ct, x: [complex(_full(ct, 0.0, ct.shape), neg(ct))])
ad.deflinear(
    complex_p,
    lambda ct, x, y: [_unbroadcast(real(ct), x.aval), _unbroadcast(neg(imag(ct)), y.aval)],
)
for _prim in (sign_p, floor_p, ceil_p, round_p, is_finite_p, not_p, population_count_p):
    ad.defjvp_zero(_prim)
ad.defjvp_with_output(exp_p, lambda t, ans, x: mul(t, ans))
ad.defjvp_with_output(exp2_p, lambda t, ans, x: mul(t, mul(ans, _const(x, np.log(2)))))
ad.defjvp(log_p, lambda t, x: div(t, x))
ad.defjvp(log10_p, lambda t, x: div(t, mul(x, _const(x, np.log(10)))))
ad.defjvp(log2_p, lambda t, x: div(t, mul(x, _const(x, np.log(2)))))
ad.defjvp(log1p_p, lambda t, x: div(t, add(x, _const(x, 1.0))))
ad.defjvp_with_output(expm1_p, lambda t, ans, x: mul(t, add(ans, _const(x, 1.0))))
ad.defjvp_with_output(tanh_p, lambda t, ans, x: mul(t, sub(_const(x, 1.0), mul(ans, ans))))
# sigma(x) sigma(-x), not ans (1 - ans): 1 - ans rounds to 0 where ans rounds to 1 (x > 17 in
# float32), and keeps only ans's absolute precision before (0.1% off at 30 in float64).
ad.defjvp_with_output(logistic_p, lambda t, ans, x: mul(t, mul(ans, logistic(neg(x)))))
ad.defjvp(sin_p, lambda t, x: mul(t, cos(x)))
ad.defjvp(cos_p, lambda t, x: neg(mul(t, sin(x))))
ad.defjvp_with_output(tan_p, lambda t, ans, x: mul(t, add(_const(x, 1.0), mul(ans, ans))))
ad.defjvp(asin_p, lambda t, x: mul(t, rsqrt(sub(_const(x, 1.0), mul(x, x)))))
ad.defjvp(acos_p, lambda t, x: neg(mul(t, rsqrt(sub(_const(x, 1.0), mul(x, x))))))
ad.defjvp(atan_p, lambda t, x: div(t, add(_const(x, 1.0), mul(x, x))))
ad.defjvp(sinh_p, lambda t, x: mul(t, cosh(x)))
ad.defjvp(cosh_p, lambda t, x: mul(t, sinh(x)))
ad.defjvp(asinh_p, lambda t, x: mul(t, rsqrt(add(mul(x, x), _const(x, 1.0)))))
ad.defjvp(
    acosh_p,
    lambda t, x: mul(t, rsqrt(mul(sub(x, _const(x, 1.0)), add(x, _const(x, 1.0))))),
)
ad.defjvp(atanh_p, lambda t, x: div(t, sub(_const(x, 1.0), mul(x, x))))
ad.defjvp_with_output(sqrt_p, lambda t, ans, x: div(t, mul(_const(x, 2.0), ans)))
ad.defjvp_with_output(rsqrt_p, lambda t, ans, x: mul(t, mul(_const(x, -0.5), div(ans, x))))
ad.defjvp_with_output(cbrt_p, lambda t, ans, x: mul(t, mul(_const(x, 1 / 3), integer_pow(ans, -2))))


def _abs_tangent(t, x):
    if not dtypes.is_complex(x.dtype):
        # At 0 the derivative is taken from the right (+1): grad(abs)(0.) is 1, not sign(0).
        return select(ge(x, _const(x, 0.0)), t, neg(t))
    # d|z| = Re(conj(z) dz) / |z|, taken as 0 at z = 0.
    magnitude = abs(x)
    at_zero = eq(magnitude, _const(magnitude, 0.0))
    safe = select(at_zero, _full(magnitude, 1.0, magnitude.shape), magnitude)
    return real(mul(div(conj(x), complex(safe, _full(safe, 0.0, safe.shape))), t))


ad.defjvp(abs_p, _abs_tangent)
ad.defjvp(erf_p, lambda t, x: mul(t, mul(_const(x, 2 / np.sqrt(np.pi)), exp(neg(mul(x, x))))))
ad.defjvp(erfc_p, lambda t, x: mul(t, mul(_const(x, -2 / np.sqrt(np.pi)), exp(neg(mul(x, x))))))
ad.defjvp_with_output(
    erf_inv_p, lambda t, ans, x: mul(t, mul(_const(x, np.sqrt(np.pi) / 2), exp(mul(ans, ans))))
)
ad.defjvp(lgamma_p, lambda t, x: mul(t, digamma(x)))
ad.defjvp(digamma_p, lambda t, x: mul(t, _trigamma(x)))


def _integer_pow_tangent(t, x, *, y):
    if y == 0:
        return ad.Zero.like(x)
    if y == 1:
        return t
    power = x if y == 2 else integer_pow(x, y - 1)
    return mul(t, mul(_const(x, y), power))


ad.defjvp(integer_pow_p, _integer_pow_tangent)


def _add_transpose(ct, x, y):
    return [_unbroadcast(ct, x.aval), _unbroadcast(ct, y.aval)]


def _sub_transpose(ct, x, y):
    return [_unbroadcast(ct, x.aval), _unbroadcast(neg(ct), y.aval)]


def _linear_binary_jvp(prim, combine_zero_first):
    def jvp(primals, tangents):
        x, y = primals
        tx, ty = tangents
        primal_out = prim.bind(x, y)
        shape = primal_out.shape
        if type(tx) is ad.Zero:
            return primal_out, _broadcast(combine_zero_first(ty), shape)
        if type(ty) is ad.Zero:
            return primal_out, _broadcast(tx, shape)
        return primal_out, prim.bind(tx, ty)

    return jvp


add_p.def_jvp(_linear_binary_jvp(add_p, lambda ty: ty))
add_p.def_transpose(_add_transpose)
sub_p.def_jvp(_linear_binary_jvp(sub_p, neg))
sub_p.def_transpose(_sub_transpose)
ad.defjvp(mul_p, lambda t, x, y: mul(t, y), lambda t, x, y: mul(x, t))


def _mul_transpose(ct, x, y):
    if ad.is_undefined(x) and ad.is_undefined(y):
        raise TypeError("mul is not linear in both operands at once; cannot transpose it")
    if ad.is_undefined(x):
        return [_unbroadcast(mul(ct, y), x.aval), None]
    return [None, _unbroadcast(mul(x, ct), y.aval)]


mul_p.def_transpose(_mul_transpose)
# In the divisor, -t x / y**2 as -t (x / y) / y: y**2 underflows to 0 for |y| < 1e-154 in
# float64 (and overflows above 1e154) where x / y and the slope itself are ordinary numbers
# (d(0 / y)/dy at y = 1e-300 was 0 / 0 = nan, d(x / x)/dx at x = 1e-200 was -inf).
ad.defjvp(
    div_p,
    lambda t, x, y: div(t, y),
    lambda t, x, y: div(mul(neg(t), div(x, y)), y),
)


def _div_transpose(ct, x, y):
    if ad.is_undefined(y):
        raise TypeError("div is linear only in its numerator; cannot transpose it in the divisor")
    return [_unbroadcast(div(ct, y), x.aval), None]


div_p.def_transpose(_div_transpose)
ad.defjvp(
    rem_p,
    lambda t, x, y: _broadcast(t, np.broadcast_shapes(x.shape, y.shape)),
    lambda t, x, y: neg(mul(t, mul(sign(div(x, y)), floor(abs(div(x, y)))))),
)


def _pow_base_tangent(t, x, y):
    # d/dx x**y = y * x**(y-1). Only where both are 0 is x**(y-1) infinite; the factor is
    # taken as 0 there (so 0**0 has a finite derivative). The slope keeps its product with y
    # everywhere, so its own derivative in y (x**(y-1) at y == 0) is not cut off.
    shape = np.broadcast_shapes(x.shape, y.shape)
    x, y = _broadcast(x, shape), _broadcast(y, shape)
    both_zero = bitwise_and(eq(x, _const(x, 0.0)), eq(y, _const(y, 0.0)))
    power = select(both_zero, _full(y, 0.0, shape), pow(x, sub(y, _const(y, 1.0))))
    return mul(t, mul(y, power))


def _pow_exponent_tangent(t, x, y):
    # d/dy x**y = log(x) * x**y, taken as 0 where x == 0 (the limit from y > 0).
    shape = np.broadcast_shapes(x.shape, y.shape)
    x = _broadcast(x, shape)
    safe_x = select(eq(x, _const(x, 0.0)), _full(x, 1.0, shape), x)
    return mul(t, mul(log(safe_x), pow(x, y)))


ad.defjvp(pow_p, _pow_base_tangent, _pow_exponent_tangent)
ad.defjvp_with_output(
    max_p,
    lambda t, ans, x, y: mul(t, _balanced_eq(x, ans, y)),
    lambda t, ans, x, y: mul(t, _balanced_eq(y, ans, x)),
)
ad.defjvp_with_output(
    min_p,
    lambda t, ans, x, y: mul(t, _balanced_eq(x, ans, y)),
    lambda t, ans, x, y: mul(t, _balanced_eq(y, ans, x)),
)


def _atan2_slopes(x, y):
    """(y, -x) / (x**2 + y**2), the sides first scaled by the larger one: the squares
    themselves underflow below 1e-154 (float64), where the slopes are about 1e154 and more,
    and overflow above 1e154. The scale cancels, so its derivative (through max) is 0. An
    infinite side is not scaled (inf / inf would be NaN): the slopes are then those of the
    plain quotients, 0 toward a finite side."""
    scale = max(abs(x), abs(y))
    scale = select(is_finite(scale), scale, sign(scale))  # (1 for inf, NaN for NaN)
    x_scaled, y_scaled = div(x, scale), div(y, scale)
    denominator = mul(add(mul(x_scaled, x_scaled), mul(y_scaled, y_scaled)), scale)
    return div(y_scaled, denominator), div(neg(x_scaled), denominator)


ad.defjvp(
    atan2_p,
    lambda t, x, y: mul(t, _atan2_slopes(x, y)[0]),
    lambda t, x, y: mul(t, _atan2_slopes(x, y)[1]),
)
ad.defjvp(nextafter_p, lambda t, x, y: _broadcast(t, np.broadcast_shapes(x.shape, y.shape)), None)
for _prim in (
    eq_p,
    ne_p,
    lt_p,
    le_p,
    gt_p,
    ge_p,
    and_p,
    or_p,
    xor_p,
    shift_left_p,
    shift_right_logical_p,
    shift_right_arithmetic_p,
    bitcast_convert_type_p,
):
    ad.defjvp_zero(_prim)


def _select_n_jvp(primals, tangents):
    which, *cases = primals
    primal_out = select_n_p.bind(which, *cases)
    case_tangents = tangents[1:]
    if all(type(t) is ad.Zero for t in case_tangents):
        return primal_out, ad.Zero.like(primal_out)
    return primal_out, select_n_p.bind(which, *map(ad.instantiate, case_tangents))


def _select_n_transpose(ct, which, *cases):
    if ad.is_undefined(which):
        raise TypeError("select_n is not linear in its selector")
    zeros = ad.zeros_like_aval(ShapedArray(ct.shape, ct.dtype))
    return [None] + [
        select_n_p.bind(which, *[ct if j == i else zeros for j in range(len(cases))])
        if ad.is_undefined(case)
        else None
        for i, case in enumerate(cases)
    ]


select_n_p.def_jvp(_select_n_jvp)
select_n_p.def_transpose(_select_n_transpose)


def _clamp_operand_tangent(t, lo, x, hi):
    inside = bitwise_and(gt(x, lo), lt(x, hi))
    return select(inside, t, ad.zeros_like_aval(ShapedArray(x.shape, x.dtype)))


def _clamp_bound_tangent(beyond):
    def tangent(t, lo, x, hi):
        zeros = ad.zeros_like_aval(ShapedArray(x.shape, x.dtype))
        return select(beyond(lo, x, hi), _broadcast(t, x.shape), zeros)

    return tangent


# A bound's tangent passes where the result is that bound (ties pass none): min where
# x < min < max, max where max < x or, with the bounds crossed, max < min.
ad.defjvp(
    clamp_p,
    _clamp_bound_tangent(lambda lo, x, hi: bitwise_and(gt(lo, x), lt(lo, hi))),
    _clamp_operand_tangent,
    _clamp_bound_tangent(lambda lo, x, hi: bitwise_or(lt(hi, x), lt(hi, lo))),
)


def _convert_jvp(primals, tangents, *, new_dtype, weak_type):
    (x,), (t,) = primals, tangents
    primal_out = convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
    if type(t) is ad.Zero or not dtypes.is_inexact(new_dtype):
        return primal_out, ad.Zero.like(primal_out)
    return primal_out, convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=weak_type)


def _convert_transpose(ct, x, *, new_dtype, weak_type):
    return [convert_element_type_p.bind(ct, new_dtype=x.aval.dtype, weak_type=x.aval.weak_type)]


convert_element_type_p.def_jvp(_convert_jvp)
convert_element_type_p.def_transpose(_convert_transpose)
ad.defjvp_zero(stop_gradient_p)
# A linear program holds stop_gradient only where a rule applied it to a tangent (a custom_jvp
# rule, a batched cond's lane mask), as the identity on values: its transpose is that too.
stop_gradient_p.def_transpose(lambda ct, x: [stop_gradient_p.bind(ct)])
for _prim in [value for value in list(globals().values()) if isinstance(value, Primitive)]:
    if _prim.transpose is None:
        _prim.not_applicable["transpose"] = "not linear"


# ---------------------------------------------------------------------------------------------
# Batching rules: elementwise primitives apply lane by lane, so batching only has to line up
# the operands' batch axes (see batching.defbroadcasting).


def _bitcast_batch(values, dims, *, new_dtype):
    (x,), (dim,) = values, dims
    # A size-changing bitcast adds or removes the last axis, which must not be the batch axis.
    if dim == x.ndim - 1:
        x, dim = batching.moveaxis(x, dim, 0), 0
    return bitcast_convert_type_p.bind(x, new_dtype=new_dtype), dim


batching.defvectorized(integer_pow_p)
batching.defvectorized(convert_element_type_p)
batching.defvectorized(stop_gradient_p)
batching.defbroadcasting(select_n_p, scalar_operands=(0,))
batching.defbroadcasting(clamp_p, scalar_operands=(0, 2))
bitcast_convert_type_p.def_batch(_bitcast_batch)
