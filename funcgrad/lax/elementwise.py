"""Elementwise primitives: unary and binary math, comparisons, bitwise ops, select, conversions.

Operands of an elementwise primitive have one shape, except that rank-0 operands broadcast
(so `x * 2.0` stages as one `mul`); `funcgrad.numpy` inserts explicit broadcasts for the rest.
"""

from __future__ import annotations

import enum

import numpy as np

from funcgrad import dtypes
from funcgrad.array import Array
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.lax import _special
from funcgrad.lax.base import (
    ANY,
    FLOAT,
    INT,
    INT_OR_BOOL,
    NUMERIC,
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


def unary_primitive(name: str, impl, accepted=NUMERIC, result_dtype=None) -> Primitive:
    """Declare a one-operand elementwise primitive; `result_dtype` fixes the output dtype."""
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, **params) -> ShapedArray:
        check_dtype_class(name, x, accepted)
        return ShapedArray(x.shape, result_dtype or x.dtype)

    prim.def_impl(impl)
    if result_dtype is not None:
        prim.def_weak_type(never_weak)
    return prim


def binary_primitive(name: str, impl, accepted=NUMERIC, result_dtype=None) -> Primitive:
    """Declare a two-operand elementwise primitive with operands of one dtype."""
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, y: ShapedArray) -> ShapedArray:
        dtype = check_same_dtypes(name, [x, y])
        check_dtype_class(name, x, accepted)
        return ShapedArray(elementwise_shape(name, [x, y]), result_dtype or dtype)

    prim.def_impl(impl)
    if result_dtype is not None:
        prim.def_weak_type(never_weak)
    return prim


def binary_operands(x, y):
    """Operands for a binary lax function: a Python scalar takes the other operand's dtype."""
    if isinstance(x, (bool, int, float)) and not isinstance(y, (bool, int, float)):
        y = asarray(y)
        return _weak_scalar(x, y.dtype), y
    if isinstance(y, (bool, int, float)) and not isinstance(x, (bool, int, float)):
        x = asarray(x)
        return x, _weak_scalar(y, x.dtype)
    return asarray(x), asarray(y)


def _weak_scalar(value, dtype: np.dtype) -> Array:
    if isinstance(value, float) and not dtypes.is_float(dtype):
        return asarray(value)  # let the primitive's dtype check name the mismatch
    return Array(np.array(value, dtype)[()], not isinstance(value, bool))


# ---------------------------------------------------------------------------------------------
# Unary math


def _logistic(x):
    # Written with tanh so that large |x| neither overflows exp nor loses the tail.
    half = x.dtype.type(0.5)
    return half * np.tanh(half * x) + half


def _rsqrt(x):
    return x.dtype.type(1) / np.sqrt(x)


def _sign(x):
    return np.sign(x)


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _population_count(x):
    return np.bitwise_count(x).astype(x.dtype)


neg_p = unary_primitive("neg", np.negative)
sign_p = unary_primitive("sign", _sign)
floor_p = unary_primitive("floor", np.floor, FLOAT)
ceil_p = unary_primitive("ceil", np.ceil, FLOAT)
is_finite_p = unary_primitive("is_finite", np.isfinite, FLOAT, result_dtype=dtypes.bool_)
exp_p = unary_primitive("exp", np.exp, FLOAT)
exp2_p = unary_primitive("exp2", np.exp2, FLOAT)
log_p = unary_primitive("log", np.log, FLOAT)
log1p_p = unary_primitive("log1p", np.log1p, FLOAT)
expm1_p = unary_primitive("expm1", np.expm1, FLOAT)
tanh_p = unary_primitive("tanh", np.tanh, FLOAT)
logistic_p = unary_primitive("logistic", _logistic, FLOAT)
sin_p = unary_primitive("sin", np.sin, FLOAT)
cos_p = unary_primitive("cos", np.cos, FLOAT)
tan_p = unary_primitive("tan", np.tan, FLOAT)
asin_p = unary_primitive("asin", np.arcsin, FLOAT)
acos_p = unary_primitive("acos", np.arccos, FLOAT)
atan_p = unary_primitive("atan", np.arctan, FLOAT)
sinh_p = unary_primitive("sinh", np.sinh, FLOAT)
cosh_p = unary_primitive("cosh", np.cosh, FLOAT)
asinh_p = unary_primitive("asinh", np.arcsinh, FLOAT)
acosh_p = unary_primitive("acosh", np.arccosh, FLOAT)
atanh_p = unary_primitive("atanh", np.arctanh, FLOAT)
sqrt_p = unary_primitive("sqrt", np.sqrt, FLOAT)
rsqrt_p = unary_primitive("rsqrt", _rsqrt, FLOAT)
cbrt_p = unary_primitive("cbrt", np.cbrt, FLOAT)
abs_p = unary_primitive("abs", np.abs)
erf_p = unary_primitive("erf", _special.erf, FLOAT)
erfc_p = unary_primitive("erfc", _special.erfc, FLOAT)
erf_inv_p = unary_primitive("erf_inv", _special.erf_inv, FLOAT)
lgamma_p = unary_primitive("lgamma", _special.lgamma, FLOAT)
digamma_p = unary_primitive("digamma", _special.digamma, FLOAT)
not_p = unary_primitive("not", _not, INT_OR_BOOL)
population_count_p = unary_primitive("population_count", _population_count, INT)


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
    return np.power(x, x.dtype.type(y))


integer_pow_p = Primitive("integer_pow")


@integer_pow_p.def_abstract_eval
def _integer_pow_abstract_eval(x: ShapedArray, *, y: int) -> ShapedArray:
    check_dtype_class("integer_pow", x, NUMERIC)
    if y < 0 and dtypes.is_int(x.dtype):
        raise TypeError(f"integer_pow of an integer array needs a non-negative exponent, got {y}")
    return ShapedArray(x.shape, x.dtype)


integer_pow_p.def_impl(_integer_pow)

# ---------------------------------------------------------------------------------------------
# Binary math


def _div(x, y):
    if dtypes.is_int(x.dtype):
        # Integer division rounds toward zero, as in C (NumPy's // rounds toward -inf).
        quotient = np.floor_divide(x, y)
        remainder = np.fmod(x, y)
        fix = (remainder != 0) & ((remainder < 0) != (np.asarray(y) < 0))
        return (quotient + fix).astype(x.dtype)
    return np.true_divide(x, y)


def _pow(x, y):
    return np.power(x, y)


def _shift_left(x, y):
    bits = x.dtype.itemsize * 8
    in_range = (y >= 0) & (y < bits)
    return np.where(in_range, np.left_shift(x, np.where(in_range, y, 0)), 0).astype(x.dtype)


def _shift_right_arithmetic(x, y):
    bits = x.dtype.itemsize * 8
    signed = x.view(np.dtype(f"i{x.dtype.itemsize}")) if x.dtype.kind == "u" else x
    clipped = np.clip(y, 0, bits - 1).astype(signed.dtype)
    shifted = np.right_shift(signed, clipped)
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
    return np.maximum(x, y)


def _min(x, y):
    return np.minimum(x, y)


add_p = binary_primitive("add", np.add)
sub_p = binary_primitive("sub", np.subtract)
mul_p = binary_primitive("mul", np.multiply)
div_p = binary_primitive("div", _div)
rem_p = binary_primitive("rem", np.fmod)
pow_p = binary_primitive("pow", _pow, FLOAT)
max_p = binary_primitive("max", _max, ANY)
min_p = binary_primitive("min", _min, ANY)
atan2_p = binary_primitive("atan2", np.arctan2, FLOAT)
nextafter_p = binary_primitive("nextafter", np.nextafter, FLOAT)
eq_p = binary_primitive("eq", np.equal, ANY, result_dtype=dtypes.bool_)
ne_p = binary_primitive("ne", np.not_equal, ANY, result_dtype=dtypes.bool_)
lt_p = binary_primitive("lt", np.less, ANY, result_dtype=dtypes.bool_)
le_p = binary_primitive("le", np.less_equal, ANY, result_dtype=dtypes.bool_)
gt_p = binary_primitive("gt", np.greater, ANY, result_dtype=dtypes.bool_)
ge_p = binary_primitive("ge", np.greater_equal, ANY, result_dtype=dtypes.bool_)
and_p = binary_primitive("and", np.bitwise_and, INT_OR_BOOL)
or_p = binary_primitive("or", np.bitwise_or, INT_OR_BOOL)
xor_p = binary_primitive("xor", np.bitwise_xor, INT_OR_BOOL)
shift_left_p = binary_primitive("shift_left", _shift_left, INT)
shift_right_logical_p = binary_primitive("shift_right_logical", _shift_right_logical, INT)
shift_right_arithmetic_p = binary_primitive("shift_right_arithmetic", _shift_right_arithmetic, INT)

# ---------------------------------------------------------------------------------------------
# Selection and clamping

select_n_p = Primitive("select_n")


@select_n_p.def_abstract_eval
def _select_n_abstract_eval(which: ShapedArray, *cases: ShapedArray) -> ShapedArray:
    if not cases:
        raise TypeError("select_n needs at least one case")
    if which.dtype != dtypes.bool_ and which.dtype != dtypes.int32:
        raise TypeError(f"select_n's selector must be bool or int32, got {which.dtype.name}")
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
    return np.choose(which, cases, mode="clip") if np.ndim(which) else cases[int(which)]


@select_n_p.def_weak_type
def _select_n_weak_type(weak_flags, **params) -> bool:
    return all(weak_flags[1:])


clamp_p = Primitive("clamp")


@clamp_p.def_abstract_eval
def _clamp_abstract_eval(lo: ShapedArray, x: ShapedArray, hi: ShapedArray) -> ShapedArray:
    dtype = check_same_dtypes("clamp", [lo, x, hi])
    for bound, which in ((lo, "min"), (hi, "max")):
        if bound.shape not in ((), x.shape):
            raise TypeError(
                f"clamp's {which} shape {bound.shape} must be scalar or equal to the operand "
                f"shape {x.shape}"
            )
    return ShapedArray(x.shape, dtype)


@clamp_p.def_impl
def _clamp_impl(lo, x, hi):
    return np.minimum(np.maximum(x, lo), hi)


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
    if dtypes.is_float(x.dtype) and dtypes.is_int(new_dtype):
        # Float to int truncates toward zero, maps NaN to 0 and saturates out-of-range values.
        info = np.iinfo(new_dtype)
        wide = np.nan_to_num(np.asarray(x, np.float64), nan=0.0)
        out = np.clip(np.trunc(wide), info.min, info.max).astype(new_dtype)
        return out[()] if out.ndim == 0 else out
    return np.asarray(x).astype(new_dtype)[()] if np.ndim(x) == 0 else x.astype(new_dtype)


@convert_element_type_p.def_weak_type
def _convert_weak_type(weak_flags, *, new_dtype, weak_type) -> bool:
    return weak_type


bitcast_convert_type_p = Primitive("bitcast_convert_type")


@bitcast_convert_type_p.def_abstract_eval
def _bitcast_abstract_eval(x: ShapedArray, *, new_dtype: np.dtype) -> ShapedArray:
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
    x = np.ascontiguousarray(x)
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


def _binary(prim: Primitive):
    def op(x, y):
        return prim.bind(*binary_operands(x, y))

    op.__name__ = op.__qualname__ = prim.name
    op.__doc__ = f"Elementwise {prim.name} (the `{prim.name}` primitive)."
    return op


neg = _unary(neg_p)
sign = _unary(sign_p)
floor = _unary(floor_p)
ceil = _unary(ceil_p)
is_finite = _unary(is_finite_p)
exp = _unary(exp_p)
exp2 = _unary(exp2_p)
log = _unary(log_p)
log1p = _unary(log1p_p)
expm1 = _unary(expm1_p)
tanh = _unary(tanh_p)
logistic = _unary(logistic_p)
sin = _unary(sin_p)
cos = _unary(cos_p)
tan = _unary(tan_p)
asin = _unary(asin_p)
acos = _unary(acos_p)
atan = _unary(atan_p)
sinh = _unary(sinh_p)
cosh = _unary(cosh_p)
asinh = _unary(asinh_p)
acosh = _unary(acosh_p)
atanh = _unary(atanh_p)
sqrt = _unary(sqrt_p)
rsqrt = _unary(rsqrt_p)
cbrt = _unary(cbrt_p)
abs = _unary(abs_p)
erf = _unary(erf_p)
erfc = _unary(erfc_p)
erf_inv = _unary(erf_inv_p)
lgamma = _unary(lgamma_p)
digamma = _unary(digamma_p)
bitwise_not = _unary(not_p)
population_count = _unary(population_count_p)

add = _binary(add_p)
sub = _binary(sub_p)
mul = _binary(mul_p)
div = _binary(div_p)
rem = _binary(rem_p)
pow = _binary(pow_p)
max = _binary(max_p)
min = _binary(min_p)
atan2 = _binary(atan2_p)
nextafter = _binary(nextafter_p)
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
    return integer_pow_p.bind(asarray(x), y=int(y))


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
