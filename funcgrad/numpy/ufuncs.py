"""NumPy's elementwise functions, written in terms of funcgrad.lax."""

from __future__ import annotations

import math
import operator

import numpy as np

from funcgrad import dtypes, lax
from funcgrad.array import Array
from funcgrad.lax import elementwise as ew
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    broadcast_to,
    promote_args,
    promote_args_inexact,
    promote_args_numeric,
    to_array,
)

# add, multiply, maximum, ... reach funcgrad.numpy as ufunc objects, from ufunc_objects.py.
__all__ = [
    "abs",
    "absolute",
    "acos",
    "acosh",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "around",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_count",
    "bitwise_not",
    "cbrt",
    "ceil",
    "conj",
    "conjugate",
    "copysign",
    "cos",
    "cosh",
    "deg2rad",
    "degrees",
    "divide",
    "divmod",
    "equal",
    "exp",
    "exp2",
    "expm1",
    "fix",
    "float_power",
    "floor",
    "floor_divide",
    "fmax",
    "fmin",
    "fmod",
    "greater",
    "greater_equal",
    "heaviside",
    "hypot",
    "invert",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "left_shift",
    "less",
    "less_equal",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_not",
    "mod",
    "nextafter",
    "not_equal",
    "positive",
    "pow",
    "power",
    "rad2deg",
    "radians",
    "real",
    "reciprocal",
    "remainder",
    "right_shift",
    "rint",
    "round",
    "sign",
    "signbit",
    "sin",
    "sinc",
    "sinh",
    "sqrt",
    "square",
    "tan",
    "tanh",
    "true_divide",
    "trunc",
]


def _binary(prim, name: str, promote=promote_args):
    def op(x, y, /):
        return prim.bind(*promote(name, x, y))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's `{name}`: elementwise, with NumPy's broadcasting and type promotion."
    return op


def check_ufunc_options(name: str, out, where) -> None:
    """Refuse NumPy's `out` and `where` of a ufunc call unless they are at their defaults.

    The ufunc functions take them positional-or-keyword rather than keyword-only: CPython
    specialises calls of functions without keyword-only parameters, so `fnp.add(x, y)` pays
    nothing for them.
    """
    if out is not None:
        raise NotImplementedError(
            f"{name}: the out argument is not supported, because funcgrad arrays are immutable; "
            "use the returned array instead"
        )
    if where is not None and where is not True:
        raise NotImplementedError(
            f"{name}: the where argument is not supported: without out, NumPy leaves the "
            f"masked-out elements undefined; write fnp.where(where, fnp.{name}(...), default) "
            "to choose them"
        )


def _binary_ufunc(prim, name: str):
    """A binary function that one of funcgrad.numpy's ufunc objects calls, taking `out` and
    `where` at their defaults (`check_ufunc_options`)."""

    def op(x1, x2, /, out=None, where=None):
        if out is not None or where is not None:
            check_ufunc_options(name, out, where)
        return prim.bind(*promote_args(name, x1, x2))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's `{name}`: elementwise, with NumPy's broadcasting and type promotion."
    return op


def _unary(prim, name: str, promote=promote_args):
    def op(x, /):
        return prim.bind(*promote(name, x))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's `{name}`, elementwise."
    return op


subtract = _binary_ufunc(ew.sub_p, "subtract")


def true_divide(x1, x2, /):
    """NumPy's `true_divide` (`/`): integers divide as floats."""
    return ew.div_p.bind(*promote_args_inexact("true_divide", x1, x2))


divide = true_divide
_float_power = _binary(ew.pow_p, "float_power", promote_args_inexact)


def arctan2(x1, x2, /):
    """The angle of the point (x2, x1) from the positive x axis, in (-pi, pi]."""
    return ew.atan2_p.bind(*promote_args_inexact("arctan2", x1, x2))


nextafter = _binary(ew.nextafter_p, "nextafter", promote_args_inexact)


def _beyond_integer_range(x, y, compare):
    """`compare(x, y)` where one operand is an integer array and the other a Python int its
    dtype cannot hold: NumPy compares them as exact numbers (the int lies above or below every
    element), where arithmetic would refuse the int. None when the operands are not such."""
    for array, number in ((x, y), (y, x)):
        if type(number) is not int or isinstance(array, (int, float, complex)):
            continue
        array = to_array(array)
        if not dtypes.is_int(array.dtype):
            return None
        info = dtypes.iinfo(array.dtype)
        if info.min <= number <= info.max:
            return None
        # Each element stands in as 0, the int as 1 above them all or -1 below them all.
        side = 1 if number > info.max else -1
        result = compare(0, side) if number is y else compare(side, 0)
        return lax.full(array.shape, result, dtypes.bool_)
    return None


def _equality(prim, name: str, compare):
    def op(x, y, /):
        exact = _beyond_integer_range(x, y, compare)
        return exact if exact is not None else prim.bind(*promote_args(name, x, y))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's `{name}`: elementwise, with NumPy's broadcasting and type promotion."
    return op


equal = _equality(ew.eq_p, "equal", operator.eq)
not_equal = _equality(ew.ne_p, "not_equal", operator.ne)


def _ordered(prim, name: str, compare, complex_rule):
    """An order comparison: `prim` on real operands (its lax primitive takes no complex ones),
    `complex_rule` on complex operands, in NumPy's order of complex numbers."""

    def op(x, y, /):
        exact = _beyond_integer_range(x, y, compare)
        if exact is not None:
            return exact
        x, y = promote_args(name, x, y)
        return complex_rule(x, y) if dtypes.is_complex(x.dtype) else prim.bind(x, y)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"NumPy's `{name}`: elementwise, with NumPy's broadcasting and type promotion; complex "
        "numbers are ordered by real part, then imaginary part."
    )
    return op


def _complex_greater(x, y, or_equal: bool):
    """x > y (x >= y with `or_equal`) as NumPy orders complex numbers: by real part, ties by
    imaginary part; a NaN imaginary part makes the real parts' order void too."""
    x_real, x_imag, y_real, y_imag = lax.real(x), lax.imag(x), lax.real(y), lax.imag(y)
    imag_ordered = lax.bitwise_not(lax.bitwise_or(isnan(x_imag), isnan(y_imag)))
    by_real = lax.bitwise_and(lax.gt(x_real, y_real), imag_ordered)
    by_imag = lax.bitwise_and(
        lax.eq(x_real, y_real), (lax.ge if or_equal else lax.gt)(x_imag, y_imag)
    )
    return lax.bitwise_or(by_real, by_imag)


greater = _ordered(ew.gt_p, "greater", operator.gt, lambda x, y: _complex_greater(x, y, False))
greater_equal = _ordered(
    ew.ge_p, "greater_equal", operator.ge, lambda x, y: _complex_greater(x, y, True)
)
less = _ordered(ew.lt_p, "less", operator.lt, lambda x, y: _complex_greater(y, x, False))
less_equal = _ordered(ew.le_p, "less_equal", operator.le, lambda x, y: _complex_greater(y, x, True))


def _extremum(prim, name: str, complex_rule):
    """`maximum` or `minimum`, the ufuncs: `prim` on real operands, `complex_rule` on complex
    ones, in NumPy's order of complex numbers."""

    def op(x1, x2, /, out=None, where=None):
        if out is not None or where is not None:
            check_ufunc_options(name, out, where)
        x1, x2 = promote_args(name, x1, x2)
        return complex_rule(x1, x2) if dtypes.is_complex(x1.dtype) else prim.bind(x1, x2)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"NumPy's `{name}`: elementwise, with NumPy's broadcasting and type promotion; complex "
        "numbers are ordered by real part, then imaginary part, and NaNs propagate."
    )
    return op


# A complex NaN (in either part) wins, as NumPy's maximum and minimum propagate NaNs.
maximum = _extremum(
    ew.max_p,
    "maximum",
    lambda x, y: _select(lax.bitwise_or(isnan(x), _complex_greater(x, y, True)), x, y),
)
minimum = _extremum(
    ew.min_p,
    "minimum",
    lambda x, y: _select(lax.bitwise_or(isnan(x), _complex_greater(y, x, True)), x, y),
)
bitwise_and = _binary_ufunc(ew.and_p, "bitwise_and")
bitwise_or = _binary_ufunc(ew.or_p, "bitwise_or")
bitwise_xor = _binary_ufunc(ew.xor_p, "bitwise_xor")


def left_shift(x, y, /):
    """Booleans shift as int32, as in JAX."""
    x, y = promote_args_numeric("left_shift", x, y)
    return lax.shift_left(x, y)


def negative(x, /, out=None, where=None):
    """NumPy's `negative`; booleans are refused, as NumPy and JAX do."""
    if out is not None or where is not None:
        check_ufunc_options("negative", out, where)
    if dtypes.is_bool(to_array(x).dtype):
        raise TypeError(
            "negative: the `-` operator is not supported for booleans; use `~` or "
            "fnp.logical_not instead"
        )
    (x,) = promote_args_numeric("negative", x)
    return lax.neg(x)


def sign(x, /):
    """-1, 0 or 1 (x / |x| for complex x); booleans are refused, as NumPy and JAX do."""
    if dtypes.is_bool(to_array(x).dtype):
        raise TypeError("sign does not accept booleans; convert them to integers first")
    (x,) = promote_args_numeric("sign", x)
    return ew.sign_p.bind(x)


exp = _unary(ew.exp_p, "exp", promote_args_inexact)
exp2 = _unary(ew.exp2_p, "exp2", promote_args_inexact)
expm1 = _unary(ew.expm1_p, "expm1", promote_args_inexact)
log = _unary(ew.log_p, "log", promote_args_inexact)
log1p = _unary(ew.log1p_p, "log1p", promote_args_inexact)
sqrt = _unary(ew.sqrt_p, "sqrt", promote_args_inexact)
cbrt = _unary(ew.cbrt_p, "cbrt", promote_args_inexact)
sin = _unary(ew.sin_p, "sin", promote_args_inexact)
cos = _unary(ew.cos_p, "cos", promote_args_inexact)
tan = _unary(ew.tan_p, "tan", promote_args_inexact)
arcsin = _unary(ew.asin_p, "arcsin", promote_args_inexact)
arccos = _unary(ew.acos_p, "arccos", promote_args_inexact)
arctan = _unary(ew.atan_p, "arctan", promote_args_inexact)
sinh = _unary(ew.sinh_p, "sinh", promote_args_inexact)
cosh = _unary(ew.cosh_p, "cosh", promote_args_inexact)
tanh = _unary(ew.tanh_p, "tanh", promote_args_inexact)
arcsinh = _unary(ew.asinh_p, "arcsinh", promote_args_inexact)
arccosh = _unary(ew.acosh_p, "arccosh", promote_args_inexact)
arctanh = _unary(ew.atanh_p, "arctanh", promote_args_inexact)
_real_isfinite = _unary(ew.is_finite_p, "isfinite", promote_args_inexact)


def isfinite(x, /):
    """Finite values; a complex number is finite when both of its parts are."""
    x = to_array(x)
    if dtypes.is_complex(x.dtype):
        return lax.bitwise_and(_real_isfinite(lax.real(x)), _real_isfinite(lax.imag(x)))
    return _real_isfinite(x)


asin, acos, atan, atan2 = arcsin, arccos, arctan, arctan2
asinh, acosh, atanh = arcsinh, arccosh, arctanh


def add(x1, x2, /, out=None, where=None):
    """NumPy's `add`; on booleans it is logical or, as in NumPy and JAX."""
    if out is not None or where is not None:
        check_ufunc_options("add", out, where)
    x1, x2 = promote_args("add", x1, x2)
    return (ew.or_p if x1.dtype == dtypes.bool_ else ew.add_p).bind(x1, x2)


def multiply(x1, x2, /, out=None, where=None):
    """NumPy's `multiply`; on booleans it is logical and, as in NumPy and JAX."""
    if out is not None or where is not None:
        check_ufunc_options("multiply", out, where)
    x1, x2 = promote_args("multiply", x1, x2)
    return (ew.and_p if x1.dtype == dtypes.bool_ else ew.mul_p).bind(x1, x2)


def positive(x, /):
    return to_array(x)


def absolute(x, /):
    """|x|; the modulus of complex numbers, a real array."""
    (x,) = promote_args("absolute", x)
    return x if dtypes.is_bool(x.dtype) or dtypes.is_unsigned(x.dtype) else lax.abs(x)


abs = absolute


def check_real(name: str, x) -> None:
    if dtypes.is_complex(x.dtype):
        raise TypeError(f"{name} does not accept complex values (dtype {x.dtype.name})")


def floor(x, /):
    (x,) = promote_args("floor", x)
    check_real("floor", x)
    return lax.floor(x) if dtypes.is_float(x.dtype) else x


def ceil(x, /):
    (x,) = promote_args("ceil", x)
    check_real("ceil", x)
    return lax.ceil(x) if dtypes.is_float(x.dtype) else x


def trunc(x, /):
    (x,) = promote_args("trunc", x)
    check_real("trunc", x)
    if not dtypes.is_float(x.dtype):
        return x
    return _select(lax.lt(x, _zero(x)), lax.ceil(x), lax.floor(x))


fix = trunc


def rint(x, /):
    """Round half to even. Integers and booleans, already whole, become the default float
    (float64 under `enable_x64`), not the float32 that `sqrt` computes them in: rounding
    loses nothing, so int32 values stay exact under the flag."""
    x = to_array(x)
    if not dtypes.is_inexact(x.dtype):
        return lax.convert_element_type(x, dtypes.default_float)
    (x,) = promote_args_inexact("rint", x)
    if dtypes.is_complex(x.dtype):
        return lax.complex(rint(lax.real(x)), rint(lax.imag(x)))
    return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)


def round(a, decimals: int = 0, out=None):
    """Round half to even, as NumPy does, at `decimals` decimal places."""
    if out is not None:
        raise NotImplementedError("funcgrad arrays are immutable: the out argument is unsupported")
    try:
        decimals = operator.index(decimals)
    except TypeError:
        raise TypeError(f"round: decimals must be an integer, got {decimals!r}") from None
    (a,) = promote_args("round", a)
    if dtypes.is_complex(a.dtype):
        # Each part rounds on its own, as in NumPy.
        return lax.complex(round(lax.real(a), decimals), round(lax.imag(a), decimals))
    if not dtypes.is_float(a.dtype):
        return a if decimals >= 0 else _round_int(a, 10**-decimals)
    even = lax.RoundingMethod.TO_NEAREST_EVEN
    if decimals == 0:
        return lax.round(a, even)
    if decimals < 0:
        # Divide by the exact 10 ** -decimals, as NumPy does, not multiply by an inexact 0.1.
        factor = _full_like_scalar(a, 10.0**-decimals)
        return multiply(lax.round(true_divide(a, factor), even), factor)
    factor = _full_like_scalar(a, 10.0**decimals)
    return true_divide(lax.round(multiply(a, factor), even), factor)


around = round


def _round_int(a, factor: int):
    """The nearest multiple of `factor`, halves to the even multiple (as NumPy rounds ints)."""
    factor = _full_like_scalar(a, factor)
    quotient = floor_divide(a, factor)
    rest = lax.sub(a, lax.mul(quotient, factor))
    # rest against factor - rest rather than 2 * rest against factor, which could overflow.
    other = lax.sub(factor, rest)
    odd = lax.ne(lax.bitwise_and(quotient, _full_like_scalar(a, 1)), _zero(a))
    up = lax.bitwise_or(lax.gt(rest, other), lax.bitwise_and(lax.eq(rest, other), odd))
    return lax.mul(_select(up, lax.add(quotient, _full_like_scalar(a, 1)), quotient), factor)


def square(x, /):
    (x,) = promote_args_numeric("square", x)
    if dtypes.is_complex(x.dtype):
        # z z, as NumPy squares: its power makes 0 ** 2 +0 + 0j, where square(-0j) is -0j.
        return lax.mul(x, x)
    return lax.integer_pow(x, 2)


def reciprocal(x, /):
    (x,) = promote_args_inexact("reciprocal", x)
    if dtypes.is_complex(x.dtype):
        return _complex_reciprocal(x)
    return lax.integer_pow(x, -1)


def _complex_reciprocal(z):
    """1 / z as NumPy's reciprocal takes it, which differs from its division and its power in
    zeros' signs and at zero and infinity (1 / (1.5 + 0j) is 0.667 - 0j, 1 / inf j -0j and
    1 / 0j nan + nan j): with r the smaller part over the larger and d = larger + smaller r,
    the parts are 1 / d and -r / d, in the order of the larger part."""
    a, b = lax.real(z), lax.imag(z)
    real_larger = lax.le(lax.abs(b), lax.abs(a))
    larger, smaller = lax.select(real_larger, a, b), lax.select(real_larger, b, a)
    ratio = lax.div(smaller, larger)
    d = lax.add(larger, lax.mul(smaller, ratio))
    inverse, ratio_over = lax.div(_full_like_scalar(d, 1), d), lax.div(ratio, d)
    re = lax.select(real_larger, inverse, ratio_over)
    return lax.complex(re, lax.neg(lax.select(real_larger, ratio_over, inverse)))


def log2(x, /):
    (x,) = promote_args_inexact("log2", x)
    return _log_base(x, ew.log2_p, 2.0)


def log10(x, /):
    (x,) = promote_args_inexact("log10", x)
    return _log_base(x, ew.log10_p, 10.0)


def _log_base(x, real_log, base: float):
    """The primitive for real x. A complex log is divided part by part by the real log(base):
    a complex division would give log10(0) = -inf + nan j, where NumPy's is -inf + 0j."""
    if not dtypes.is_complex(x.dtype):
        return real_log.bind(x)
    log = lax.log(x)
    real, imag = lax.real(log), lax.imag(log)
    scale = lax.log(_full_like_scalar(real, base))
    return lax.complex(lax.div(real, scale), lax.div(imag, scale))


def power(x1, x2, /):
    """NumPy's power: integer exponents of integer bases stay integers."""
    if isinstance(x2, int) and not isinstance(x2, bool):
        (x1,) = promote_args_numeric("power", x1)
        if x2 >= 0 or dtypes.is_inexact(x1.dtype):
            return lax.integer_pow(x1, x2)
        # As NumPy and JAX: the result would be a fraction, which an integer cannot hold.
        raise ValueError(
            f"power: integers cannot be raised to negative powers, got {x1.dtype.name} ** "
            f"{x2}; convert the base to a float first"
        )
    x1, x2 = promote_args_numeric("power", x1, x2)
    if dtypes.is_int(x1.dtype):
        return _integer_power(x1, x2)
    return lax.pow(x1, x2)


def _integer_power(base, exponent):
    # Square-and-multiply over the exponent's bits; negative exponents give the integer part
    # of 1 / base ** -exponent: 0 except for bases 1 and -1.
    bits = base.dtype.itemsize * 8
    result = lax.full_like(base, 1)
    acc = base
    e = exponent
    for _ in range(bits):
        odd = lax.ne(lax.bitwise_and(e, _full_like_scalar(e, 1)), _zero(e))
        result = _select(odd, lax.mul(result, acc), result)
        acc = lax.mul(acc, acc)
        e = lax.shift_right_logical(e, _full_like_scalar(e, 1))
    if dtypes.is_unsigned(exponent.dtype):
        return result
    # The loop already gets bases 1 and -1 right: wrapping keeps the exponent's parity.
    one = _full_like_scalar(base, 1)
    vanishes = lax.bitwise_and(lax.lt(exponent, _zero(exponent)), lax.ne(lax.abs(base), one))
    return _select(vanishes, _zero(result), result)


pow = power
float_power = _float_power


def floor_divide(x1, x2, /):
    x1, x2 = promote_args_numeric("floor_divide", x1, x2)
    if dtypes.is_int(x1.dtype):
        quotient = lax.div(x1, x2)
        remainder = lax.rem(x1, x2)
        zero = _zero(x1)
        adjust = lax.bitwise_and(
            lax.ne(remainder, zero), lax.ne(lax.lt(remainder, zero), lax.lt(x2, zero))
        )
        return _select(adjust, lax.sub(quotient, _full_like_scalar(quotient, 1)), quotient)
    # As NumPy: x1 - fmod(x1, x2) is an exact multiple of x2, so dividing it cannot round up
    # across an integer the way floor(x1 / x2) can (1.0 // 0.1 is 9, but 1.0 / 0.1 is 10).
    mod = lax.rem(x1, x2)
    quotient = lax.div(lax.sub(x1, mod), x2)
    zero = _zero(x1)
    adjust = lax.bitwise_and(lax.ne(mod, zero), lax.ne(lax.lt(mod, zero), lax.lt(x2, zero)))
    quotient = _select(adjust, lax.sub(quotient, _full_like_scalar(quotient, 1)), quotient)
    floored = lax.round(quotient, lax.RoundingMethod.TO_NEAREST_EVEN)
    # Division by zero gives inf or nan like true division (fmod by zero is nan).
    return _select(lax.eq(x2, zero), lax.div(x1, x2), floored)


def remainder(x1, x2, /):
    """Remainder with the sign of the divisor, as NumPy's `%`."""
    x1, x2 = promote_args_numeric("remainder", x1, x2)
    r = lax.rem(x1, x2)
    zero = _zero(r)
    fix_sign = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(x2, zero)))
    return _select(fix_sign, lax.add(r, x2), r)


mod = remainder


def fmod(x1, x2, /):
    x1, x2 = promote_args_numeric("fmod", x1, x2)
    return lax.rem(x1, x2)


def divmod(x1, x2, /):
    return floor_divide(x1, x2), remainder(x1, x2)


def right_shift(x1, x2, /):
    """Booleans shift as int32, as in JAX."""
    x1, x2 = promote_args_numeric("right_shift", x1, x2)
    if dtypes.is_unsigned(x1.dtype):
        return lax.shift_right_logical(x1, x2)
    return lax.shift_right_arithmetic(x1, x2)


def bitwise_not(x, /):
    (x,) = promote_args("bitwise_not", x)
    return lax.bitwise_not(x)


invert = bitwise_not


def bitwise_count(x, /):
    (x,) = promote_args("bitwise_count", x)
    if dtypes.is_bool(x.dtype):
        return lax.convert_element_type(x, np.uint8)
    return lax.convert_element_type(lax.population_count(lax.abs(x)), np.uint8)


def _as_bool(name, x):
    (x,) = promote_args(name, x)
    return x if dtypes.is_bool(x.dtype) else lax.ne(x, _zero(x))


def logical_not(x, /):
    return lax.bitwise_not(_as_bool("logical_not", x))


def logical_and(x1, x2, /, out=None, where=None):
    if out is not None or where is not None:
        check_ufunc_options("logical_and", out, where)
    return lax.bitwise_and(*promote_args("", _as_bool("logical_and", x1), _as_bool("", x2)))


def logical_or(x1, x2, /, out=None, where=None):
    if out is not None or where is not None:
        check_ufunc_options("logical_or", out, where)
    return lax.bitwise_or(*promote_args("", _as_bool("logical_or", x1), _as_bool("", x2)))


def logical_xor(x1, x2, /, out=None, where=None):
    if out is not None or where is not None:
        check_ufunc_options("logical_xor", out, where)
    return lax.bitwise_xor(*promote_args("", _as_bool("logical_xor", x1), _as_bool("", x2)))


def isnan(x, /):
    (x,) = promote_args("isnan", x)
    if dtypes.is_complex(x.dtype):
        return lax.bitwise_or(isnan(lax.real(x)), isnan(lax.imag(x)))
    if not dtypes.is_float(x.dtype):
        return lax.full_like(x, False, dtypes.bool_)
    return lax.ne(x, x)


def isinf(x, /):
    (x,) = promote_args("isinf", x)
    if dtypes.is_complex(x.dtype):
        return lax.bitwise_or(isinf(lax.real(x)), isinf(lax.imag(x)))
    if not dtypes.is_float(x.dtype):
        return lax.full_like(x, False, dtypes.bool_)
    return lax.eq(lax.abs(x), _full_like_scalar(x, np.inf))


def isposinf(x, /, out=None):
    if out is not None:
        check_ufunc_options("isposinf", out, None)
    (x,) = promote_args_inexact("isposinf", x)
    check_real("isposinf", x)
    return lax.eq(x, _full_like_scalar(x, np.inf))


def isneginf(x, /, out=None):
    if out is not None:
        check_ufunc_options("isneginf", out, None)
    (x,) = promote_args_inexact("isneginf", x)
    check_real("isneginf", x)
    return lax.eq(x, _full_like_scalar(x, -np.inf))


def signbit(x, /):
    (x,) = promote_args("signbit", x)
    check_real("signbit", x)
    if dtypes.is_unsigned(x.dtype) or dtypes.is_bool(x.dtype):
        return lax.full_like(x, False, dtypes.bool_)
    if dtypes.is_int(x.dtype):
        return lax.lt(x, _zero(x))
    int_dtype = np.dtype(f"i{x.dtype.itemsize}")
    return lax.lt(lax.bitcast_convert_type(x, int_dtype), lax.asarray(int_dtype.type(0)))


def copysign(x1, x2, /):
    x1, x2 = promote_args_inexact("copysign", x1, x2)
    check_real("copysign", x1)
    return _select(signbit(x2), lax.neg(lax.abs(x1)), lax.abs(x1))


def hypot(x1, x2, /):
    x1, x2 = promote_args_inexact("hypot", x1, x2)
    # |big| * sqrt(1 + (small / big)**2), scaled by the larger magnitude so the squares neither
    # overflow nor underflow. The sides are chosen by select, not taken through abs/max/min,
    # so the formula holds near the point in both operands and its higher derivatives are
    # right where a side is 0 or the sides tie.
    first_smaller = lax.le(lax.abs(x1), lax.abs(x2))
    big = _select(first_smaller, x2, x1)
    small = _select(first_smaller, x1, x2)
    both_zero = lax.eq(big, _zero(big))
    safe_big = _select(both_zero, _full_like_scalar(big, 1.0), big)
    ratio = lax.div(small, safe_big)
    scale = lax.sqrt(lax.add(_full_like_scalar(ratio, 1.0), lax.mul(ratio, ratio)))
    out = lax.mul(lax.abs(big), scale)
    # At the origin, the mean of |x1| and |x2| (0): a derivative of (1/2, 1/2), the convention
    # of a maximum's tie, as JAX's hypot (through max and min) has it.
    mean = lax.mul(lax.add(lax.abs(x1), lax.abs(x2)), _full_like_scalar(big, 0.5))
    out = _select(both_zero, mean, out)
    # An infinite side gives inf even beside inf or nan (where the ratio above is nan).
    either_inf = lax.bitwise_or(isinf(x1), isinf(x2))
    return _select(either_inf, _full_like_scalar(out, np.inf), out)


def fmax(x1, x2, /):
    """Maximum that ignores NaNs (returns the other operand).

    A choice rather than lax.max, so a tie sends the whole derivative to x2.
    """
    x1, x2 = promote_args("fmax", x1, x2)
    return _select(lax.bitwise_or(greater(x1, x2), isnan(x2)), x1, x2)


def fmin(x1, x2, /):
    x1, x2 = promote_args("fmin", x1, x2)
    return _select(lax.bitwise_or(less(x1, x2), isnan(x2)), x1, x2)


def heaviside(x1, x2, /):
    """0 below 0, 1 above, x2 at 0, and NaN where x1 is NaN."""
    x1, x2 = promote_args_inexact("heaviside", x1, x2)
    zero = _zero(x1)
    at_zero_or_nan = _select(lax.eq(x1, zero), x2, x1)
    return _select(
        lax.lt(x1, zero),
        zero,
        _select(lax.gt(x1, zero), _full_like_scalar(x1, 1.0), at_zero_or_nan),
    )


def deg2rad(x, /):
    (x,) = promote_args_inexact("deg2rad", x)
    return lax.mul(x, _full_like_scalar(x, np.pi / 180))


def rad2deg(x, /):
    (x,) = promote_args_inexact("rad2deg", x)
    return lax.mul(x, _full_like_scalar(x, 180 / np.pi))


radians, degrees = deg2rad, rad2deg


def logaddexp(x1, x2, /, out=None, where=None):
    if out is not None or where is not None:
        check_ufunc_options("logaddexp", out, where)
    x1, x2 = promote_args_inexact("logaddexp", x1, x2)
    # log(e^a + e^b) = hi + log1p(e^(lo - hi)). hi and lo are picked by select (not max and
    # abs), so at a tie the formula is still a + log1p(e^(b - a)), smooth in both operands, and
    # every derivative is right there.
    first_larger = lax.ge(x1, x2)
    hi = _select(first_larger, x1, x2)
    lo = _select(first_larger, x2, x1)
    delta = lax.sub(lo, hi)
    # When both are equal infinities delta is nan; the sum is then the answer. A nan operand
    # goes through the formula, so that its derivatives are nan too.
    equal_infinities = lax.bitwise_and(isinf(x1), lax.eq(x1, x2))
    finite_delta = _select(equal_infinities, _zero(delta), delta)
    out = lax.add(hi, lax.log1p(lax.exp(finite_delta)))
    return _select(equal_infinities, lax.add(x1, x2), out)


def logaddexp2(x1, x2, /, out=None, where=None):
    if out is not None or where is not None:
        check_ufunc_options("logaddexp2", out, where)
    x1, x2 = promote_args_inexact("logaddexp2", x1, x2)
    ln2 = _full_like_scalar(x1, np.log(2))
    return lax.div(logaddexp(lax.mul(x1, ln2), lax.mul(x2, ln2)), ln2)


# Taylor coefficients of sin(t) / t in t**2: (-1)**k / (2k + 1)!.
_SINC_SERIES = [(-1) ** k / math.factorial(2 * k + 1) for k in range(8)]


# Below this |pi x| the Taylor polynomial (its first omitted term under 1e-19 of the value).
_SINC_SERIES_BELOW = 0.5


def sinc(x, /):
    """sin(pi x) / (pi x). Near 0 (|pi x| < 1/2) its Taylor polynomial through degree 14
    stands in: at 0 the quotient is a constant, whose derivatives would all be 0, and near 0
    the quotient's derivatives cancel (half the digits of the first derivative at x = 1e-8,
    all of them nearer), while the polynomial's are accurate to order 15."""
    (x,) = promote_args_inexact("sinc", x)
    pi_x = lax.mul(x, _full_like_scalar(x, np.pi))
    near_zero = lax.lt(lax.abs(pi_x), lax.abs(_full_like_scalar(x, _SINC_SERIES_BELOW)))
    near = _select(near_zero, pi_x, _zero(x))
    far = _select(near_zero, _full_like_scalar(x, 1.0), pi_x)
    near_squared = lax.mul(near, near)
    series = _full_like_scalar(x, _SINC_SERIES[-1])
    for coefficient in reversed(_SINC_SERIES[:-1]):
        series = lax.add(lax.mul(series, near_squared), _full_like_scalar(x, coefficient))
    return _select(near_zero, series, lax.div(lax.sin(far), far))


def conjugate(x, /):
    x = to_array(x)
    return lax.conj(x) if dtypes.is_complex(x.dtype) else x


conj = conjugate


def real(val, /):
    val = to_array(val)
    return lax.real(val) if dtypes.is_complex(val.dtype) else val


def _select(pred, on_true, on_false):
    """`lax.select` with NumPy broadcasting (select_n wants cases of one shape, and
    `promote_args` leaves rank-0 operands unbroadcast)."""
    shape = broadcast_shapes(pred.shape, on_true.shape, on_false.shape)
    return lax.select(*(broadcast_to(a, shape) for a in (pred, on_true, on_false)))


def _zero(x):
    return _full_like_scalar(x, 0)


def _full_like_scalar(x, value):
    """A rank-0 array of `x`'s dtype and weak type (elementwise primitives broadcast rank-0
    operands), so that a function of Python numbers stays weakly typed."""
    return Array(np.array(value, x.dtype)[()], x.weak_type)
