"""Vectorizable transcendental functions, written in kernel-IR arithmetic.

A C library call per element keeps a loop from vectorizing, so renderers expand these
operations into arithmetic, bit manipulation and selects, which vectorize like the rest of
the loop. Each follows the textbook construction:

- exp: x clamped to where exp overflows or rounds to 0 (a NaN passes), n = round(x / ln 2)
  by adding 1.5 * 2^mantissa (which also leaves n in the low bits, no conversion needed),
  r = x - n ln 2 with ln 2 split in two (Cody-Waite, so r is exact to working precision), e^r
  by its Taylor polynomial on |r| <= ln(2)/2 (degree 7 for float32, 13 for float64:
  truncation below a tenth of an ulp), then 2^n applied in two halves through the exponent
  bits (so results that overflow or fall into subnormals come out right, with no selects).
- log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1)/(m + 1), by
  its odd series in s (|s| <= 0.172), plus e ln 2 (split in two). Subnormal inputs are first
  scaled into the normal range.
- log1p: from log with Goldberg's correction, log(u) times x / (u - 1) with u = 1 + x
  rounded, which cancels the rounding of u; on [-0.5, 1) 2 atanh(x / (2 + x)) by its
  series instead, and below |x| = 1/32 log1p's own. expm1: exp's reduction x = n ln 2 + r, then
  (2^n - 1) + 2^n r (e^r - 1)/r with (e^r - 1)/r by its Taylor polynomial: 2^n - 1 is exact,
  so nothing cancels (2^n (1 + ...) - 1 once 2^n dwarfs 1).
- exp2: 2^n e^(r ln 2) with n = round(x), r = x - n exact, through exp's polynomial.
- log10, log2: in float64, log x as a pair of float64s (pow's, below) times 1/ln(base) as a
  pair, so the result is rounded about once and exact powers of the base come out exact;
  float32 takes float64's plain log times 1/ln(base), rounded once.
- sin, cos, tan: the argument is reduced in float64, r = x - j pi/2 with j the nearest integer
  to x 2/pi. Arguments below 2^30 (float32) or 2^20 (float64) subtract j times pi/2 in four
  pieces (Cody-Waite: three of 23 or 33 bits, so j times each is exact, and the rest; for
  float64 the differences are kept as pairs of float64s). Larger ones take x 2/pi modulo 4
  from the chunks of 2/pi that their exponent picks (Payne-Hanek): 24-bit chunks, two to a
  float64 of a constant table, times x's first 29 and last 24 bits (exact products) for
  float64; 26-bit chunks picked by comparisons, times x's 24 bits, for float32. The large
  products are reduced modulo 4 and summed exactly, the small ones (as pairs of float64s for
  float64) so that a float64's r is off by under 2^-117 besides its rounding, 0.2 ulp where a
  float64 comes nearest a multiple of pi/2, and a float32's by under 2^-44 of itself. Both
  reductions are computed and one selected (no branch; a renderer may run a loop with
  Cody-Waite's alone first: `near_trig`). Then sin r and cos r by their Taylor polynomials on
  |r| <= pi/4, picked and signed by j mod 4.
- tanh: float64, its Taylor series for |x| < 0.625 (coefficients from the Bernoulli numbers),
  1 - 2 / (e^(2|x|) + 1) above (the subtraction loses less than a bit there), with x's sign.
  float32, E / (E + 2) with E = e^(2|x|) - 1 built from exp's reduction and polynomial
  (accurate as |x| goes to 0), a six-term series below 0.35: one division, no second
  exponential.
- atan: reduced to |u| <= tan(pi/8) by atan t = pi/4 + atan((t - 1)/(t + 1)) and
  pi/2 + atan(-1/t), then its Taylor series; asin, acos and atan2 through it (see each).
- sinh, cosh: Taylor series of sinh below |x| = 1, (e^a +- e^-a)/2 above, e^(a/2) squared past
  709 so they reach the end of the float64 range. asinh, acosh, atanh: their log and log1p
  forms rearranged so that nothing cancels, Taylor series of asinh and atanh below 1/8.
- cbrt: e^(log|x| / 3) refined by one Newton step. nextafter: one step of the bit pattern.
  logistic: 1 / (1 + e) for x >= 0, e / (1 + e) below, e = e^-|x|: one exponential, and
  small results keep their precision.
- pow: e^(y log|x|) with IEEE 754's special cases; in float64, log|x| and y log|x| are carried
  as pairs of float64s (log by a 128-piece table of 1/c and log c: r = x/c - 1 exact, log1p(r)
  by its series; exact sums and products), since an error of one part in 2^53 of y log|x|
  would cost up to 700 ulp, and so is exp's reduced argument r, with 1 + r + r^2/2 summed
  exactly: the result is rounded about once.
- erf, erfc: Taylor's series of erf below |x| = 1/2; above, erfc(a) = e^(-a^2) erfcx(a),
  with e^(-a^2) corrected by a^2's rounding error and the scaled function erfcx a polynomial
  interpolating it up to a = 3 (fitted at first use in 80-digit decimal arithmetic) or
  Laplace's continued fraction beyond; erf = 1 - erfc there. float32's erf is computed in
  float32 (16 lanes to a 512-bit vector, not 8): x + x Q(x^2) below 3/4, fitted polynomials
  in |x| - m above (erf, or 1 - erfc where erf nears 1); float32's erfc the same series below
  1/2 with 1 - x's rounding carried, above in float64 (where a^2 is exact) as e^(-a^2) times a
  polynomial in (a - 2)/(a + 2) (see `_erf_float32`, `_erfc_float32`).
- lgamma: a polynomial interpolating log Gamma(x) / ((x - 1)(x - 2)) on [1, 2] (fitted at
  first use in decimal arithmetic; multiplying back by the exact factors keeps the zeros'
  relative accuracy), shifted there from [2, 10) by Gamma's recurrence (one log of the
  product), Stirling's series from 10, log Gamma(x + 1) - log x below 1 and the reflection
  formula for negative x.
- In float32, the functions from atan on (logistic aside) are computed in float64 and
  rounded once, so they are correctly rounded but for rare ties.

Measured over the dense sweeps, random arguments and special values of tests/test_mathlib.py,
against NumPy in float64 (for float32) and in long double (for float64), in ulp (the
trigonometric and log1p maxima over millions of random arguments, the trigonometric ones of
every size up to the largest finite; log1p's float32 maximum over every float32 from -1 to
64):

    float32: exp 1.2, log 2.2, log1p 2.6, expm1 2.2, tanh 1.6, exp2 0.9, logistic 2.3,
             erf 0.77, erfc 0.64, everything else 0.5
    float64: exp 1.0, log 2.0, log1p 2.4, expm1 2.3, exp2 0.9, log10 0.5, log2 0.5, tanh 1.3,
             sin 1.9, cos 1.9, tan 3.5, atan 2.2, atan2 2.2, asin 2.9, acos 2.6, sinh 1.6,
             cosh 1.2, asinh 3.3, acosh 3.1, atanh 2.7, cbrt 0.7, pow 0.6, logistic 2.4;
             nextafter exact;
             erf 2.0 and erfc 5.0 against the C library's (itself up to 2.2 ulp off); lgamma
             6 for positive x and 5 ulp of max(|result|, 1) for negative x, against decimal
             arithmetic (float32: 0.5 in both)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from funcgrad import dtypes
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.kernel_ir import Expr

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)

# The dtypes each operation is expanded for (the rest stay C library calls).
_BOTH = (F32, F64)
_EXPANDED = {
    op: _BOTH
    for op in (
        "exp exp2 log log1p log10 log2 expm1 tanh sin cos tan atan asin acos sinh cosh asinh "
        "acosh atanh cbrt atan2 nextafter pow logistic erf erfc lgamma"
    ).split()
}


def handles(op: str, dtype: np.dtype) -> bool:
    return np.dtype(dtype) in _EXPANDED.get(op, ())


def expand(op: str, x: Expr) -> Expr:
    return _FUNCTIONS[op](x)


def expand_binary(op: str, a: Expr, b: Expr) -> Expr:
    return _FUNCTIONS[op](a, b)


def _c(value, like: Expr) -> Expr:
    return K.const(value, like.dtype)


def _horner(coefficients, x: Expr) -> Expr:
    """c0 + c1 x + c2 x^2 + ... (coefficients from c0 up)."""
    result = _c(coefficients[-1], x)
    for c in reversed(coefficients[:-1]):
        result = result * x + _c(c, x)
    return result


class _Format:
    """The bit layout of a float dtype."""

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self.bits = dtype.itemsize * 8
        self.mantissa = 23 if dtype == F32 else 52
        self.bias = 127 if dtype == F32 else 1023
        self.int = np.dtype(f"int{self.bits}")

    def rounded(self, x: Expr) -> tuple[Expr, Expr]:
        """round(x) as a float and as an integer (of the int dtype), for |x| < 2^(mantissa - 1),
        from one addition and no conversion instruction: adding 1.5 * 2^mantissa rounds x to
        a whole number held in the low mantissa bits."""
        magic = 1.5 * 2.0**self.mantissa
        magic_bits = int(np.array(magic, self.dtype).view(self.int))
        shifted = x + K.const(magic, self.dtype)
        whole = shifted - K.const(magic, self.dtype)
        return whole, K.Bitcast(shifted, self.int) - K.const(magic_bits, self.int)

    def to_int(self, whole: Expr) -> Expr:
        """A float holding a whole number (|n| < 2^(mantissa - 1)) as an integer."""
        return self.rounded(whole)[1]

    def power_of_two(self, n: Expr) -> Expr:
        """2^n for an integer n (of the int dtype) in the normal exponent range."""
        biased = n + K.const(self.bias, self.int)
        return K.Bitcast(K.binary("shl", biased, K.const(self.mantissa, self.int)), self.dtype)


# ln 2 = LN2_HI + LN2_LO, LN2_HI with trailing zero bits so that n * LN2_HI is exact.
_LN2 = {
    F32: (0.693145751953125, 1.4286068203094173e-06),
    F64: (0.6931471803691238, 1.9082149292705877e-10),
}
_EXP_DEGREE = {F32: 7, F64: 13}
# exp overflows above the first bound and rounds to 0 below the second; clamping its argument
# to them keeps n and both halves of 2^n in the normal exponent range.
_EXP_CLAMP = {F32: (89.0, -104.0), F64: (710.0, -746.0)}
# The largest x whose e^x rounds to a finite value: above it the result is inf by a select,
# not by the last multiply overflowing. A backend may contract that multiply into an add
# reading it (y - e^x as one fused multiply-add), which rounds the product once with the
# add and never overflows: inf - e^100 came out inf where inf - inf is NaN.
_EXP_FINITE_UP_TO = {
    F32: float.fromhex("0x1.62e42ep+6"),
    F64: float.fromhex("0x1.62e42fefa39efp+9"),
}


def _times_power_of_two(p: Expr, n: Expr) -> Expr:
    """p 2^n for an integer n with |n| < 2 (bias - 1), applied in two halves through the
    exponent bits (so results that overflow or fall into subnormals come out right, rounded
    once)."""
    fmt = _Format(p.dtype)
    half = K.binary("shr_arith", n, K.const(1, fmt.int))
    return p * fmt.power_of_two(half) * fmt.power_of_two(n - half)


def _scaled(p: Expr, n_float: Expr) -> Expr:
    """p 2^n for any whole float n (overflow and underflow still happen)."""
    bound = _c(1100.0 if p.dtype == F64 else 160.0, p)
    clamped = K.binary("min", K.binary("max", n_float, K.unary("neg", bound)), bound)
    return _times_power_of_two(p, _Format(p.dtype).to_int(clamped))


def _exp_taylor(r: Expr) -> Expr:
    return _horner([1 / math.factorial(k) for k in range(_EXP_DEGREE[r.dtype] + 1)], r)


def exp(x: Expr) -> Expr:
    high, low = _EXP_CLAMP[x.dtype]
    overflows = _gt(x, _EXP_FINITE_UP_TO[x.dtype])
    x = K.select(_gt(x, high), _c(high, x), x)  # a NaN stays
    x = K.select(_lt(x, low), _c(low, x), x)
    n_float, n = _Format(x.dtype).rounded(x * _c(1 / math.log(2), x))
    ln2_hi, ln2_lo = _LN2[x.dtype]
    r = (x - n_float * _c(ln2_hi, x)) - n_float * _c(ln2_lo, x)
    return K.select(overflows, _c(np.inf, x), _times_power_of_two(_exp_taylor(r), n))


def exp2(x: Expr) -> Expr:
    """2^n e^(r ln 2) with n = round(x) and r = x - n exact; r ln 2 is rounded, but that error
    is relative to |r ln 2| <= 0.35, a sixth of an ulp of the result at most."""
    n_float = K.unary("round_even", x)
    result = _scaled(_exp_taylor((x - n_float) * _c(math.log(2), x)), n_float)
    result = K.select(K.binary("eq", x, _c(np.inf, x)), x, result)
    return K.select(K.binary("eq", x, _c(-np.inf, x)), _c(0.0, x), result)


_LOG_TERMS = {F32: 6, F64: 12}


def _exponent_and_mantissa(x: Expr) -> tuple[Expr, Expr]:
    """e (as a float) and m in [sqrt(1/2), sqrt(2)) with x = m 2^e, for positive normal or
    subnormal x."""
    fmt = _Format(x.dtype)
    smallest_normal = float(np.finfo(x.dtype).tiny)
    subnormal = K.binary("lt", x, _c(smallest_normal, x))
    scale = 2.0**fmt.mantissa
    scaled = K.select(subnormal, x * _c(scale, x), x)
    bits = K.Bitcast(scaled, fmt.int)
    mask = (1 << fmt.mantissa) - 1
    exponent = K.binary("shr_arith", bits, K.const(fmt.mantissa, fmt.int)) - K.const(
        fmt.bias, fmt.int
    )
    one_bits = fmt.bias << fmt.mantissa
    mantissa = K.Bitcast(
        K.binary("or", K.binary("and", bits, K.const(mask, fmt.int)), K.const(one_bits, fmt.int)),
        x.dtype,
    )  # in [1, 2)
    big = K.binary("gt", mantissa, _c(math.sqrt(2), x))
    mantissa = K.select(big, mantissa * _c(0.5, x), mantissa)
    exponent = exponent + K.select(big, K.const(1, fmt.int), K.const(0, fmt.int))
    exponent = exponent - K.select(subnormal, K.const(fmt.mantissa, fmt.int), K.const(0, fmt.int))
    return K.cast(exponent, x.dtype), mantissa


def log(x: Expr) -> Expr:
    e, mantissa = _exponent_and_mantissa(x)
    f = mantissa - _c(1, x)
    s = K.binary("div", f, f + _c(2, x))
    s2 = s * s
    series = _horner([1 / (2 * k + 1) for k in range(_LOG_TERMS[x.dtype])], s2)
    ln2_hi, ln2_lo = _LN2[x.dtype]
    result = e * _c(ln2_hi, x) + (e * _c(ln2_lo, x) + _c(2, x) * s * series)
    return _with_log_special_values(x, result)


def _with_log_special_values(x: Expr, result: Expr) -> Expr:
    """result where x is positive and finite; inf at inf, -inf at zero, NaN below zero and at
    NaN (a logarithm in any base)."""
    result = K.select(K.binary("eq", x, _c(np.inf, x)), x, result)
    result = K.select(K.binary("eq", x, _c(0.0, x)), _c(-np.inf, x), result)
    return K.select(K.unary("not", K.binary("ge", x, _c(0.0, x))), _c(np.nan, x), result)


def _bernoulli(count: int) -> list:
    """B_0 .. B_count, from their recurrence in exact fractions."""
    from fractions import Fraction

    numbers = [Fraction(1)]
    for m in range(1, count + 1):
        numbers.append(-sum(math.comb(m + 1, k) * numbers[k] for k in range(m)) / (m + 1))
    return numbers


def _solved(rows: list) -> tuple[float, ...]:
    """The solution of an augmented square system (Gauss-Jordan elimination, in the rows'
    own arithmetic), rounded to floats."""
    size = len(rows)
    for column in range(size):
        pivot = max(range(column, size), key=lambda r: abs(rows[r][column]))
        rows[column], rows[pivot] = rows[pivot], rows[column]
        for r in range(size):
            if r != column:
                factor = rows[r][column] / rows[column][column]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[column])]
    return tuple(float(rows[j][size] / rows[j][j]) for j in range(size))


@functools.cache
def _tanh_series(terms: int) -> list[float]:
    """tanh's Taylor coefficients of x, x^3, ...: 2^2n (2^2n - 1) B_2n / (2n)!. Made when
    first rendered: the exact fractions take milliseconds that importing the compiler need
    not pay."""
    bernoulli = _bernoulli(2 * terms)
    return [
        float(4**n * (4**n - 1) * bernoulli[2 * n] / math.factorial(2 * n))
        for n in range(1, terms + 1)
    ]


# On |x| < 0.625 the series' terms shrink by (0.625 * 2/pi)^2 = 0.16 each: 22 reach 2^-58.
_TANH_F64_TERMS = 22


# Past this |x|, float32 tanh rounds to +-1 (and e^(2|x|) stays far from overflow).
_TANH_F32_SATURATES = 9.5
# Below this |x|, tanh's series: its terms shrink by (0.35 * 2/pi)^2 = 0.05, six reach 2^-26.
_TANH_F32_SERIES_BELOW = 0.35
_TANH_F32_TERMS = 6


def _tanh_float32(x: Expr) -> Expr:
    """tanh a = E / (E + 2) with E = e^(2a) - 1 for a = |x| (`_reduced_expm1`: one division
    and one polynomial, GELU's inner loop), then x's sign; below a = 0.35 a short odd series,
    where the quotient's roundings would add up to 3 ulp."""
    a = K.unary("abs", x)
    a = K.select(_gt(a, _TANH_F32_SATURATES), _c(_TANH_F32_SATURATES, x), a)  # a NaN stays
    _, scale, rq = _reduced_expm1(a + a)
    excess = (scale - _c(1, x)) + scale * rq
    large = _copysign(_div(excess, excess + _c(2, x)), x)
    # Below 0.35 the quotient's roundings would cost up to 3 ulp; the series costs 6 terms.
    small = x * _horner(_tanh_series(_TANH_F32_TERMS), x * x)
    return K.select(_lt(a, _TANH_F32_SERIES_BELOW), small, large)


def tanh(x: Expr) -> Expr:
    if x.dtype == F32:
        return _tanh_float32(x)
    a = K.unary("abs", x)
    small = x * _horner(_tanh_series(_TANH_F64_TERMS), x * x)  # odd: keeps the sign of zero
    large = _c(1, x) - K.binary("div", _c(2, x), exp(a + a) + _c(1, x))
    large = K.select(K.binary("lt", x, _c(0.0, x)), K.unary("neg", large), large)
    result = K.select(K.binary("lt", a, _c(0.625, x)), small, large)
    return K.select(K.binary("ne", x, x), x, result)


# Below this |x|, log1p's Taylor series x - x^2/2 + x^3/3 - ..., whose terms shrink by 1/32
# each (12 reach 2^-60, 6 reach 2^-30), the correction to x under x/64: it keeps a subnormal
# x exact, where x / (2 + x) below would round it.
_LOG1P_SERIES_BELOW = 1 / 32
# On [-0.5, 1), where the corrected log's roundings add up to 4.3 ulp, 2 atanh(s) with
# s = x / (2 + x): |s| <= 1/3, its series' terms shrink by s^2 <= 1/9 (18 reach 2^-55, 9
# reach 2^-28).
_LOG1P_ATANH = (-0.5, 1.0)


def _log1p_atanh(x: Expr) -> Expr:
    """log1p(x) = 2 (s + s^3/3 + s^5/5 + ...), s = x / (2 + x) with the rounding of 2 + x
    carried (2 + x = w + e exactly): 2s is exact, so the result is off by s's division and
    one last rounding, about 1 ulp."""
    w = x + _c(2, x)
    e = (_c(2, x) - w) + x
    s = K.binary("div", x, w)
    s_low = K.unary("neg", K.binary("div", s * e, w))  # x / (w + e) = s - s e / w + ...
    square = s * s
    terms = 18 if x.dtype == F64 else 9
    tail = s * square * _horner([1 / (2 * k + 3) for k in range(terms)], square)
    return (s + s) + (s_low + tail) * _c(2, x)


def log1p(x: Expr) -> Expr:
    u = x + _c(1, x)
    corrected = log(u) * K.binary("div", x, u - _c(1, x))
    low, high = _LOG1P_ATANH
    moderate = K.binary("and", K.binary("ge", x, _c(low, x)), _lt(x, high))
    result = K.select(moderate, _log1p_atanh(x), corrected)
    terms = 12 if x.dtype == F64 else 6
    series = x + (x * x) * _horner([(-1) ** (n + 1) / n for n in range(2, terms + 2)], x)
    result = K.select(_lt(K.unary("abs", x), _LOG1P_SERIES_BELOW), series, result)
    return K.select(K.binary("eq", u, _c(np.inf, x)), u, result)


def _reduced_expm1(x: Expr) -> tuple[Expr, Expr, Expr]:
    """(n, 2^n, r q(r)) for x = n ln 2 + r (|r| <= ln(2)/2, n in the normal exponent range),
    q(r) = (e^r - 1) / r by its Taylor polynomial: e^x - 1 = (2^n - 1) + 2^n r q(r), where
    2^n - 1 is exact and r q(r) accurate relative to itself, so nothing cancels."""
    fmt = _Format(x.dtype)
    n_float, n = fmt.rounded(x * _c(1 / math.log(2), x))
    ln2_hi, ln2_lo = _LN2[x.dtype]
    r = (x - n_float * _c(ln2_hi, x)) - n_float * _c(ln2_lo, x)
    quotient = _horner([1 / math.factorial(k + 1) for k in range(_EXP_DEGREE[x.dtype])], r)
    return n, fmt.power_of_two(n), r * quotient


def expm1(x: Expr) -> Expr:
    """(2^n - 1) + 2^n r q(r) (see `_reduced_expm1`): no logarithm, no division. Once 2^n
    dwarfs 1, 2^n (1 + r q(r)) - 1 instead, scaled in exp's two halves, which reaches the top
    of the range (where 2^n alone would overflow); below -(mantissa + 3) ln 2, -1. -0 is its
    own."""
    fmt = _Format(x.dtype)
    high, _ = _EXP_CLAMP[x.dtype]
    low = -(fmt.mantissa + 3) * math.log(2)
    clamped = K.select(_gt(x, high), _c(high, x), x)  # a NaN stays
    clamped = K.select(_lt(clamped, low), _c(low, x), clamped)
    n, scale, rq = _reduced_expm1(clamped)
    one = _c(1, x)
    near = (scale - one) + scale * rq
    far = _times_power_of_two(one + rq, n) - one
    result = K.select(K.binary("gt", n, K.const(fmt.mantissa + 2, fmt.int)), far, near)
    return K.select(_eq(x, 0.0), x, result)


# -- helpers for the functions below ----------------------------------------------------------


def _in_float64(f):
    """f computed in float64 for a float32 argument: the float64 expansions below leave errors
    far under a float32 ulp, so the float32 result is correctly rounded but for rare ties."""

    def wrapped(*xs: Expr) -> Expr:
        if xs[0].dtype == F64:
            return f(*xs)
        return K.cast(f(*(K.cast(x, F64) for x in xs)), xs[0].dtype)

    return wrapped


def _sign_bit(x: Expr) -> Expr:
    """x's sign bit (set for -0 and negative NaNs), as a bool."""
    fmt = _Format(x.dtype)
    return K.binary("lt", K.Bitcast(x, fmt.int), K.const(0, fmt.int))


def _copysign(magnitude: Expr, sign: Expr) -> Expr:
    fmt = _Format(magnitude.dtype)
    low_bits = K.const(np.iinfo(fmt.int).max, fmt.int)
    sign_bit = K.const(np.iinfo(fmt.int).min, fmt.int)
    bits = K.binary(
        "or",
        K.binary("and", K.Bitcast(magnitude, fmt.int), low_bits),
        K.binary("and", K.Bitcast(sign, fmt.int), sign_bit),
    )
    return K.Bitcast(bits, magnitude.dtype)


def _div(a: Expr, b: Expr) -> Expr:
    return K.binary("div", a, b)


def _lt(a: Expr, b) -> Expr:
    return K.binary("lt", a, b if isinstance(b, Expr) else _c(b, a))


def _gt(a: Expr, b) -> Expr:
    return K.binary("gt", a, b if isinstance(b, Expr) else _c(b, a))


def _eq(a: Expr, b) -> Expr:
    return K.binary("eq", a, b if isinstance(b, Expr) else _c(b, a))


def _split(value: str) -> tuple[float, float]:
    """A constant given to 60 digits as the float64 nearest it plus the float64 nearest the
    rest: adding the rest last carries the constant to about 107 bits."""
    from decimal import Decimal, getcontext

    getcontext().prec = 70
    exact = Decimal(value)
    high = float(exact)
    return high, float(exact - Decimal(high))


_PI = "3.14159265358979323846264338327950288419716939937510582097494459"
_PI_HI, _PI_LO = _split(_PI)
_HALF_PI_SPLIT = (_PI_HI / 2, _PI_LO / 2)  # halving is exact
_QUARTER_PI_SPLIT = (_PI_HI / 4, _PI_LO / 4)


def _half_pi_pieces(width: int) -> tuple[float, ...]:
    """pi/2 as three float64s of `width` significant bits each (so j times each is exact for
    |j| < 2^(53 - width)) and the float64 nearest the rest."""
    from decimal import Decimal, getcontext

    getcontext().prec = 70
    rest = Decimal(_PI) / 2
    pieces = []
    for k in range(1, 4):
        last_bit = k * width - 1
        piece = Decimal(int(rest * 2**last_bit)) / 2**last_bit
        pieces.append(float(piece))  # exact: `width` bits
        rest -= piece
    return (*pieces, float(rest))


# For float32 arguments below 2^30 (122 bits of pi/2), and for float64 ones below 2^20 (165).
_HALF_PI_PIECES = _half_pi_pieces(23)
_HALF_PI_WIDE_PIECES = _half_pi_pieces(33)
_SIN_TERMS = {F32: 7, F64: 10}
_COS_TERMS = {F32: 8, F64: 11}
# From this |x| on, the Payne-Hanek reduction (`_payne_hanek`); below, Cody-Waite's
# (`_cody_waite`): float32 arguments under 2^30 come no nearer than 2^-27.8 to a multiple of
# pi/2, far above its error.
_PAYNE_HANEK_FROM = {F32: 2.0**30, F64: 2.0**20}


def _cody_waite(wide: Expr, result: np.dtype) -> tuple[Expr, Expr]:
    """(r, j) with r = x - j pi/2 and j the nearest integer to x 2/pi (float64 arithmetic),
    for |x| below `_PAYNE_HANEK_FROM`.

    For a float32 x, j times each 23-bit piece of pi/2 is exact (|j| < 2^30) and the first
    subtractions cancel exactly: r is off by under |j| 2^-121 besides its own rounding.

    For a float64 x (|j| < 2^20), pi/2 = P1 + P2 + P3 + P4, 33 bits each but the last: j P1,
    j P2 and j P3 are exact, and x - j P1 too (within a factor 2 of each other). Its difference
    with j P2 lies on the grid of 2^-65, so it is exact (its error e2 zero) below 2^-12, and
    past that r is at least about 2^-12, where e2's rounding costs 2^-95 of it; likewise with
    j P3 (grid 2^-98, exact below 2^-45). So r = s3 + ((e2 + e3) - j P4) is off by under
    2^-129 in the first case and 2^-85 of itself in the others, besides its rounding:
    far under an ulp even at the float64 nearest a multiple of pi/2 there."""
    j = K.unary("round_even", wide * K.const(2 / math.pi, F64))
    if result == F32:
        r = wide
        for piece in _HALF_PI_PIECES:
            r = r - j * K.const(piece, F64)
        return r, j
    p1, p2, p3, p4 = (K.const(-piece, F64) for piece in _HALF_PI_WIDE_PIECES)
    s2, e2 = _two_sum(wide + j * p1, j * p2)
    s3, e3 = _two_sum(s2, j * p3)
    return s3 + ((e2 + e3) + j * p4), j


# 2/pi = sum over i >= 0 of d_i = c_i 2^(-w(i + 1)), c_i its chunks of w bits: w = 24 for
# float64 arguments, whose 29- and 24-bit parts times them are exact, and 26 for float32 ones
# (`_quarter_turns_float32`). float64's are kept scaled by 2^_TABLE_SCALE (far down they would
# be subnormal), and the arguments that multiply them by 2^-_TABLE_SCALE.
_TABLE_SCALE = 128
# float64's tables start at d_(-2) = 0 (`_first_chunk`) and reach 5 chunks past inf's first
# one, d_41.
_TABLE_LENGTH = 48


def _pi_scaled(bits: int) -> int:
    """pi 2^bits to within 2^14 units: Machin's pi = 16 atan(1/5) - 4 atan(1/239) in integers
    (each of the series' 350 or so terms truncated by under 2 units)."""

    def arctan_of_inverse(n: int) -> int:
        total, power, k = 0, (1 << bits) // n, 0
        while power:
            total += (-1) ** k * (power // (2 * k + 1))
            power //= n * n
            k += 1
        return total

    return 16 * arctan_of_inverse(5) - 4 * arctan_of_inverse(239)


# The bits of 2/pi kept: 88 past float64's last chunk, d_46, for its last rest's rounding.
_TWO_OVER_PI_BITS = 24 * _TABLE_LENGTH + 64


@functools.cache
def _two_over_pi() -> int:
    """2/pi 2^_TWO_OVER_PI_BITS, rounded down, from `_pi_scaled` with 64 guard bits: the
    quotient is off by a unit at most, which changes a chunk only through a run of 88 equal bits
    after float64's last one. Made when first rendered."""
    bits = _TWO_OVER_PI_BITS
    return (1 << (2 * bits + 65)) // _pi_scaled(bits + 64)


def _chunk(k: int, width: int, scale: int = 0) -> float:
    """d_k 2^scale (exact), 0 for negative k (2/pi < 1)."""
    after = _TWO_OVER_PI_BITS - width * (k + 1)  # the bits after c_k
    c = (_two_over_pi() >> after) & ((1 << width) - 1) if k >= 0 else 0
    return math.ldexp(c, scale - width * (k + 1))


def _rest(k: int, width: int, scale: int = 0) -> float:
    """The sum over i >= k of d_i, times 2^scale, rounded once."""
    after = _TWO_OVER_PI_BITS - width * k
    return (_two_over_pi() & ((1 << after) - 1)) / (1 << (_TWO_OVER_PI_BITS - scale))


@functools.cache
def _float64_tables() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """For t below _TABLE_LENGTH, the 24-bit chunks d_(t-2) and d_(t-1) in one float64,
    (2^48 + c_(t-2) 2^24 + c_(t-1)) 2^(-24t): the leading 1 keeps both at fixed places of its
    mantissa whatever their leading zeros, so that one load brings two (`_unpacked`); and the
    rest of 2/pi from d_(t-1) on. Both scaled."""
    pairs = [
        math.ldexp(1, 48 + _TABLE_SCALE - 24 * t)
        + _chunk(t - 2, 24, _TABLE_SCALE)
        + _chunk(t - 1, 24, _TABLE_SCALE)
        for t in range(_TABLE_LENGTH)
    ]
    rests = [_rest(max(t - 1, 0), 24, _TABLE_SCALE) for t in range(_TABLE_LENGTH)]
    return tuple(pairs), tuple(rests)


def _unpacked(pair: Expr) -> tuple[Expr, Expr]:
    """The two chunks of a pair: its mantissa with the last 28 bits cleared is the leading 1
    and the first chunk, with all of them the leading 1; the differences are exact."""
    index = np.dtype(np.int64)
    bits = K.Bitcast(pair, index)
    upper = K.Bitcast(K.binary("and", bits, K.const(-(1 << 28), index)), F64)
    lead = K.Bitcast(K.binary("and", bits, K.const(0x7FF << 52, index)), F64)
    return upper - lead, pair - upper


def _first_chunk(a: Expr) -> Expr:
    """t = i0 + 1 for a = |x| >= 64 (float64), i0 = floor((u - 2) / 24) for the last bit 2^u of
    a with its last 24 mantissa bits cleared (u = E - 1051 for the biased exponent E): its
    products with d_i for i < i0 are multiples of 4 (u - 24(i + 1) >= 2), and the first one's
    last bit, 2^s = 2^(u - 24(i0 + 1)), lies in [2^-22, 2]. i0 >= -1 from 64 on: the chunks
    before d_0 are 0. The quotient is (n 2731) >> 16, exact for n up to 1100 (exponents are
    below 2048); below 64, where n is negative, t is 0."""
    index = np.dtype(np.int64)
    exponent = K.binary("shr_logical", K.Bitcast(a, index), K.const(52, index))
    n = exponent - K.const(1029, index)
    quotient = K.binary("shr_arith", n * K.const(2731, index), K.const(16, index))
    return K.binary("max", quotient, K.const(0, index))


def _modulo_4(t: Expr) -> Expr:
    """t - 4 floor(t/4), in [0, 4): exact, as 4 floor(t/4) and the difference are floats."""
    return t - K.unary("floor", t * _c(0.25, t)) * _c(4, t)


def _fast_two_sum(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """a + b rounded and its rounding error, exact where |a| >= |b| (Dekker)."""
    total = a + b
    return total, b - (total - a)


def _quarter_turns_float64(wide: Expr, a: Expr) -> tuple[Expr, Expr, Expr]:
    """x 2/pi modulo 4 for a = |x| >= 64 as n + f_hi + f_lo: n whole and congruent to the
    nearest integer modulo 4, f = f_hi + f_lo within 1/2 + 2^-22 of 0.

    x = high + low, high its first 29 bits and low the other 24: their products P_k and Q_k
    with d_(i0+k) and d_(i0+k-1) (`_first_chunk`: low's products before d_(i0-1) are multiples
    of 4 too) are exact, on the grid G_k = 2^(s - 24k) and below 2^53 G_k and 2^48 G_k in
    magnitude. P_0, Q_0, P_1 and Q_1 are reduced modulo 4 (into [0, 4), whatever x's sign) and
    summed with an anchor of 96, exactly (under 2^7, on G_1 >= 2^-46); P_2, Q_2 and P_3 (under
    64, so the sum stays above 29) are added to it by Fast2Sum, their errors (under 2^-46) and
    Q_3 summing exactly (under 2^50 G_3, as G_3 >= 2^-94). Past the nearest integer, P_4 and
    Q_4 are added as to a pair, each rounding 2^-105 of what is left (|f| + 2^-41 at most;
    exact where f is small, all then on G_4 and under 2^53 G_4), and Q_5 and x times the rest
    of 2/pi past d_(i0+4) last: under 2^-66, off by 2^-118. So f is off by under 2^-117 +
    2^-103 |f|:
    0.2 ulp of r = f pi/2 where a float64 comes closest to a multiple of pi/2 (|f| = 2^-61.5,
    at 6381956970095103 2^797), and 2^-50 ulp for |f| >= 2^-8."""
    scaled = wide * _c(2.0**-_TABLE_SCALE, wide)
    index = np.dtype(np.int64)
    high = K.Bitcast(K.binary("and", K.Bitcast(scaled, index), K.const(-(1 << 24), index)), F64)
    low = scaled - high
    first = _first_chunk(a)
    pairs, rests = _float64_tables()
    d = []  # d_(i0-1) ... d_(i0+4)
    for k in (0, 2, 4):
        d += _unpacked(K.lookup(pairs, first + k, F64))
    p = [high * d[k + 1] for k in range(5)]
    q = [low * d[k] for k in range(6)]
    rest = scaled * K.lookup(rests, first + 5, F64)  # from d_(i0+5) on
    anchored = ((_c(96, a) + _modulo_4(p[0])) + _modulo_4(q[0])) + (
        _modulo_4(p[1]) + _modulo_4(q[1])
    )
    anchored, errors = _fast_two_sum(anchored, p[2])
    anchored, error = _fast_two_sum(anchored, q[2])
    errors = errors + error
    anchored, error = _fast_two_sum(anchored, p[3])
    errors = (errors + error) + q[3]
    whole = K.unary("round_even", anchored)
    # Exact although |anchored - whole| may be under |errors|: it lies on the grid of
    # anchored's last bit (2^-45 or 2^-46), far above the last bit errors can have.
    f_hi, f_lo = _fast_two_sum(anchored - whole, errors)
    f_hi, error = _two_sum(f_hi, p[4])
    f_lo = f_lo + error
    f_hi, error = _two_sum(f_hi, q[4])
    return whole, f_hi, (f_lo + error) + (q[5] + rest)


# A float32 argument a = |x| >= 2^30 (below 2^128), its last bit 2^u (u = E - 1046 for the
# biased exponent E of a in float64), takes the 26-bit chunks from i0 = floor((u - 7) / 26),
# which is m from a >= 2^(30 + 26m) on, at most 3: they are picked by comparisons rather than
# loaded, and need no scaling (inf, past the last, gives NaN whatever they are).
_FLOAT32_FIRST_CHUNKS = 4


def _float32_chunk(a: Expr, values: list) -> Expr:
    """values[i0] for a float32 argument a."""
    picked = _c(values[0], a)
    for m in range(1, _FLOAT32_FIRST_CHUNKS):
        picked = K.select(K.binary("ge", a, _c(2.0 ** (30 + 26 * m), a)), _c(values[m], a), picked)
    return picked


def _quarter_turns_float32(wide: Expr, a: Expr) -> tuple[Expr, Expr]:
    """x 2/pi modulo 4 for a = |x| >= 2^30, x a float32 (in float64), as n + f: n whole and
    congruent to the nearest integer modulo 4, |f| <= 1/2 + 2^-21. x's 24 bits times a 26-bit
    chunk are exact; the products before d_i0 are multiples of 4 (u - 26(i + 1) >= 2), and
    P_k, x's with d_(i0+k), lies on G_k = 2^(u - 26(i0 + k + 1)) (G_0 in [2^-19, 2^6]) and
    below 2^50 G_k. P_0 and P_1, reduced modulo 4, sum exactly with an anchor of 64 (on
    G_1 >= 2^-45), P_2 (under 16) goes in by Fast2Sum, and x times the rest of 2/pi past
    d_(i0+2) (under 2^-22, off by 2^-74) plainly. So f is off by under 2^-74 + 2^-52 |f|:
    2^-44 of f where a float32 comes closest to a multiple of pi/2 (|f| = 2^-29.85, at
    16367173 2^72), far under its ulp."""
    firsts = range(_FLOAT32_FIRST_CHUNKS)
    p = [wide * _float32_chunk(a, [_chunk(i + k, 26) for i in firsts]) for k in range(3)]
    rest = wide * _float32_chunk(a, [_rest(i + 3, 26) for i in firsts])
    anchored = (_c(64, a) + _modulo_4(p[0])) + _modulo_4(p[1])
    anchored, error = _fast_two_sum(anchored, p[2])
    whole = K.unary("round_even", anchored)
    return whole, ((anchored - whole) + error) + rest


# pi/2's first 26 bits, and the float64 nearest the rest.
_HALF_PI_TOP = math.ldexp(math.floor(math.ldexp(_HALF_PI_SPLIT[0], 25)), -25)
_HALF_PI_REST = (_HALF_PI_SPLIT[0] - _HALF_PI_TOP) + _HALF_PI_SPLIT[1]


def _half_pi_times(f_hi: Expr, f_lo: Expr) -> Expr:
    """(f_hi + f_lo) pi/2 rounded once but for 2^-76 of itself: f_hi's first 26 bits times
    pi/2's (exact), plus the other terms, under 2^-24 of the result."""
    top = _high_half(f_hi)
    rest = (f_hi - top) + f_lo
    return top * _c(_HALF_PI_TOP, top) + (
        top * _c(_HALF_PI_REST, top) + rest * _c(_HALF_PI_SPLIT[0], top)
    )


def _payne_hanek(wide: Expr, a: Expr, result: np.dtype) -> tuple[Expr, Expr]:
    """(r, j) as `_cody_waite` gives them (j up to a multiple of 4) from x 2/pi modulo 4, for
    |x| = a from _PAYNE_HANEK_FROM on (what it gives below is unused)."""
    if result == F32:
        j, f = _quarter_turns_float32(wide, a)
        return f * _c(_HALF_PI_SPLIT[0], a), j
    j, f_hi, f_lo = _quarter_turns_float64(wide, a)
    return _half_pi_times(f_hi, f_lo), j


TRIGONOMETRIC = ("sin", "cos", "tan")


def _trig(x: Expr, which: str) -> Expr:
    """The argument is reduced in float64 (for float32 too): by Cody-Waite for small |x|, by
    Payne-Hanek beyond (both computed, one selected: the loop stays branch-free)."""
    wide = K.cast(x, F64)
    a = K.unary("abs", wide)
    near_r, near_j = _cody_waite(wide, x.dtype)
    far_r, far_j = _payne_hanek(wide, a, x.dtype)
    far = _needs_payne_hanek(a, x.dtype)
    r, j = K.select(far, far_r, near_r), K.select(far, far_j, near_j)
    return _signed(_trig_of_reduced(r, j, which, x.dtype), x, which)


def near_trig(which: str, x: Expr) -> tuple[Expr, Expr]:
    """(sin, cos or tan of x by the Cody-Waite reduction alone, whether x needs Payne-Hanek's):
    where the second is false the first is bit for bit what `expand` gives, for a fraction of
    its cost. A renderer may run a loop on these and, where any element needs it,
    again on `expand`'s (`render._Function.versioned_loop`)."""
    wide = K.cast(x, F64)
    r, j = _cody_waite(wide, x.dtype)
    far = _needs_payne_hanek(K.unary("abs", wide), x.dtype)
    return _signed(_trig_of_reduced(r, j, which, x.dtype), x, which), far


def _needs_payne_hanek(a: Expr, dtype: np.dtype) -> Expr:
    """Whether |x| = a (float64) is past Cody-Waite's range for x's dtype (NaN: no)."""
    return K.binary("ge", a, K.const(_PAYNE_HANEK_FROM[dtype], F64))


def _signed(value: Expr, x: Expr, which: str) -> Expr:
    """The float64 result in x's dtype, sin's and tan's of -0 being -0 (they are odd)."""
    value = K.cast(value, x.dtype)
    if which == "cos":
        return value
    return K.select(K.binary("eq", x, _c(0, x)), x, value)


def _trig_of_reduced(r: Expr, j: Expr, which: str, dtype: np.dtype) -> Expr:
    """sin, cos or tan of r + j pi/2 (|r| <= pi/4, a little over from Payne-Hanek; j whole
    and below 2^51), from the Taylor polynomials of sin r and cos r (as many terms as `dtype`
    needs), picked and signed by j mod 4."""
    r2 = r * r
    sine = r * _horner(
        [(-1) ** k / math.factorial(2 * k + 1) for k in range(_SIN_TERMS[dtype])], r2
    )
    cosine = _horner([(-1) ** k / math.factorial(2 * k) for k in range(_COS_TERMS[dtype])], r2)
    quadrant = K.binary("and", _Format(F64).to_int(j), K.const(3, np.dtype(np.int64)))

    def pick(values: list) -> Expr:
        result = values[3]
        for q in (2, 1, 0):
            here = K.binary("eq", quadrant, K.const(q, np.dtype(np.int64)))
            result = K.select(here, values[q], result)
        return result

    neg_sine, neg_cosine = K.unary("neg", sine), K.unary("neg", cosine)
    if which == "sin":
        return pick([sine, cosine, neg_sine, neg_cosine])
    if which == "cos":
        return pick([cosine, neg_sine, neg_cosine, sine])
    odd = K.binary(
        "eq",
        K.binary("and", quadrant, K.const(1, np.dtype(np.int64))),
        K.const(1, np.dtype(np.int64)),
    )
    return K.select(odd, K.binary("div", neg_cosine, sine), K.binary("div", sine, cosine))


# -- inverse trigonometric functions ----------------------------------------------------------

# atan's Taylor series (odd powers x^3, x^5, ...: (-1)^k / (2k + 1)). The argument is reduced
# to |u| <= tan(pi/8) = 0.414, where the 20 terms after u leave a tail under 2^-56 relative.
_ATAN_TAIL = [(-1) ** k / (2 * k + 1) for k in range(1, 22)]
_TAN_PI_8, _TAN_3PI_8 = math.sqrt(2) - 1, math.sqrt(2) + 1


def _atan_nonnegative(t: Expr) -> Expr:
    """atan(t) for t >= 0, inf or NaN (float64). Above tan(3pi/8), atan t = pi/2 + atan(-1/t);
    above tan(pi/8), atan t = pi/4 + atan((t - 1)/(t + 1)); the offsets are added in two parts."""
    big, mid = _gt(t, _TAN_3PI_8), _gt(t, _TAN_PI_8)
    one = _c(1, t)
    u = K.select(big, _div(_c(-1, t), t), K.select(mid, _div(t - one, t + one), t))
    zero = _c(0.0, t)
    offset_hi, offset_lo = (
        K.select(big, _c(h, t), K.select(mid, _c(q, t), zero))
        for h, q in zip(_HALF_PI_SPLIT, _QUARTER_PI_SPLIT)
    )
    u2 = u * u
    return offset_hi + (offset_lo + (u + u * u2 * _horner(_ATAN_TAIL, u2)))


@_in_float64
def atan(x: Expr) -> Expr:
    return _copysign(_atan_nonnegative(K.unary("abs", x)), x)


@_in_float64
def asin(x: Expr) -> Expr:
    """asin x = atan(x / sqrt((1 - x)(1 + x))): 1 - x is exact near 1, so the argument stays
    accurate to the domain's edges (+-1 give +-inf, hence +-pi/2; beyond, the root is NaN)."""
    one = _c(1, x)
    return atan(_div(x, K.unary("sqrt", (one - x) * (one + x))))


@_in_float64
def acos(x: Expr) -> Expr:
    """acos x = 2 atan(sqrt((1 - x)/(1 + x))), whose subtractions are exact near +-1."""
    one = _c(1, x)
    half_angle = _atan_nonnegative(K.unary("sqrt", _div(one - x, one + x)))
    return half_angle + half_angle


@_in_float64
def atan2(y: Expr, x: Expr) -> Expr:
    """atan of min(|x|, |y|) / max(|x|, |y|) (in [0, 1]), reflected into the octant of (x, y):
    pi/2 - a when |y| > |x|, pi - a when x is negative (or -0), then given y's sign. Both zero
    give a ratio of 0 and both infinite a ratio of 1, so the signed zeros and infinities land
    on the multiples of pi/4 that IEEE 754 gives them."""
    ax, ay = K.unary("abs", x), K.unary("abs", y)
    low, high = K.binary("min", ax, ay), K.binary("max", ax, ay)
    ratio = K.select(_eq(high, 0.0), _c(0.0, x), _div(low, high))
    ratio = K.select(_eq(low, np.inf), _c(1.0, x), ratio)
    angle = _atan_nonnegative(ratio)
    half_pi_hi, half_pi_lo = _HALF_PI_SPLIT
    angle = K.select(_gt(ay, ax), (_c(half_pi_hi, x) - angle) + _c(half_pi_lo, x), angle)
    angle = K.select(_sign_bit(x), (_c(_PI_HI, x) - angle) + _c(_PI_LO, x), angle)
    return _copysign(angle, y)


# -- hyperbolic functions and their inverses --------------------------------------------------

# sinh's Taylor series x, x^3/3!, ... through x^19/19!: under 2^-60 relative for |x| < 1.
_SINH_SERIES = [1 / math.factorial(2 * k + 1) for k in range(10)]
# Past this, e^|x| overflows: e^(|x|/2) squared (with the half taken first) still reaches the
# float64 range's end.
_EXP_SQUARED_FROM = 709.0


def _half_exp(a: Expr) -> Expr:
    """e^a / 2 for a >= 0, finite up to a = 710.47."""
    half = _c(0.5, a)
    root = exp(a * half)
    return K.select(_gt(a, _EXP_SQUARED_FROM), (half * root) * root, half * exp(a))


@_in_float64
def sinh(x: Expr) -> Expr:
    """Taylor series below |x| = 1, (e^a - e^-a)/2 above (cancelling less than a bit)."""
    a = K.unary("abs", x)
    half_e = _half_exp(a)
    large = half_e - _div(_c(0.25, x), half_e)
    small = x * _horner(_SINH_SERIES, x * x)
    return K.select(_lt(a, 1.0), small, _copysign(large, x))


@_in_float64
def cosh(x: Expr) -> Expr:
    half_e = _half_exp(K.unary("abs", x))
    return half_e + _div(_c(0.25, x), half_e)


# Taylor series of asinh and atanh (x, x^3, ...) used below |x| = 1/8, where log1p's error
# would be a larger share of the result: 10 terms leave a tail under 2^-60 relative.
_ASINH_SERIES = [(-1) ** n * math.comb(2 * n, n) / (4**n * (2 * n + 1)) for n in range(10)]
_ATANH_SERIES = [1 / (2 * n + 1) for n in range(10)]
_SERIES_BELOW = 0.125


@_in_float64
def asinh(x: Expr) -> Expr:
    """log(a + sqrt(a^2 + 1)) for a = |x|, rearranged so that nothing cancels: as
    log1p(a + a^2 / (1 + sqrt(1 + a^2))) below 2, log(2a + 1 / (a + sqrt(a^2 + 1))) above,
    log(a) + ln 2 past 2^28 (where a^2 + 1 = a^2), with x's sign."""
    a = K.unary("abs", x)
    one = _c(1, x)
    square = a * a
    small = log1p(a + _div(square, one + K.unary("sqrt", one + square)))
    large = log(a + a + _div(one, a + K.unary("sqrt", square + one)))
    huge = log(a) + _c(math.log(2), x)
    result = K.select(_gt(a, 2.0**28), huge, K.select(_gt(a, 2.0), large, small))
    series = x * _horner(_ASINH_SERIES, x * x)
    return K.select(_lt(a, _SERIES_BELOW), series, _copysign(result, x))


@_in_float64
def acosh(x: Expr) -> Expr:
    """log(x + sqrt(x^2 - 1)) without cancellation: log1p(t + sqrt(2t + t^2)) with t = x - 1
    (exact) up to 2, log(2x - 1 / (x + sqrt(x^2 - 1))) above, log(x) + ln 2 past 2^28."""
    one = _c(1, x)
    t = x - one
    small = log1p(t + K.unary("sqrt", t + t + t * t))
    large = log(x + x - _div(one, x + K.unary("sqrt", x * x - one)))
    huge = log(x) + _c(math.log(2), x)
    result = K.select(_gt(x, 2.0**28), huge, K.select(_gt(x, 2.0), large, small))
    return K.select(_lt(x, 1.0), _c(np.nan, x), result)


@_in_float64
def atanh(x: Expr) -> Expr:
    """log((1 + a)/(1 - a)) / 2 = log1p(2a / (1 - a)) / 2 for a = |x|, written below 1/2 as
    log1p(2a + 2a^2 / (1 - a)) / 2 so that the small terms keep their precision; with x's sign.
    a = 1 gives log1p(inf); a > 1 the log of a negative number, NaN."""
    a = K.unary("abs", x)
    one, twice = _c(1, x), a + a
    small = log1p(twice + _div(twice * a, one - a))
    large = log1p(_div(twice, one - a))
    series = x * _horner(_ATANH_SERIES, x * x)
    result = _copysign(_c(0.5, x) * K.select(_lt(a, 0.5), small, large), x)
    return K.select(_lt(a, _SERIES_BELOW), series, result)


def logistic(x: Expr) -> Expr:
    """1 / (1 + e) for x >= 0 and e / (1 + e) below, with e = e^-|x|: one exponential, which
    never overflows, and no subtraction, so small results keep their precision (where 1 + e
    rounds to 1, e itself)."""
    e = exp(K.unary("neg", K.unary("abs", x)))
    one = _c(1, x)
    return _div(K.select(_lt(x, 0.0), e, one), one + e)


# -- roots and powers -------------------------------------------------------------------------


@_in_float64
def cbrt(x: Expr) -> Expr:
    """e^(log(a)/3) for a = |x| (relative error ~1e-13), then one Newton step on y^3 = a,
    written y - (y - a / y^2) / 3 so that y^3 never underflows; with x's sign. Zero and inf
    are their own cube roots."""
    a = K.unary("abs", x)
    guess = exp(log(a) * _c(1 / 3, x))
    root = guess - (guess - _div(a, guess * guess)) * _c(1 / 3, x)
    root = K.select(K.binary("or", _eq(a, 0.0), _eq(a, np.inf)), a, root)
    return _copysign(root, x)


def _high_half(v: Expr) -> Expr:
    """v with its last 27 mantissa bits cleared (float64): a product of two such is exact."""
    bits = K.binary(
        "and", K.Bitcast(v, np.dtype(np.int64)), K.const(-(1 << 27), np.dtype(np.int64))
    )
    return K.Bitcast(bits, F64)


def _two_sum(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """a + b rounded, and its rounding error (Knuth's two-sum; exact)."""
    total = a + b
    b_part = total - a
    return total, (a - (total - b_part)) + (b - b_part)


def _two_product(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """a b rounded, and its rounding error (Dekker's product; the halves' products are exact,
    so fusing any of them into an add changes nothing, but the product itself must keep the
    rounding its error describes wherever it is added)."""
    product = K.rounded(a * b)
    a_high, b_high = _high_half(a), _high_half(b)
    a_low, b_low = a - a_high, b - b_high
    error = ((a_high * b_high - product) + a_high * b_low) + a_low * b_high
    return product, error + a_low * b_low


# _log_double's reduction: z = x / 2^k in [0.6875, 1.375), cut into 2^_LOG_TABLE_BITS pieces by
# the bits after its float64 pattern's offset from 0.6875's (widths 2^-8 below 1, 2^-7 above).
_LOG_TABLE_BITS = 7
_LOG_START = 0x3FE6000000000000  # 0.6875
_LOG_PIECE_SHIFT = 52 - _LOG_TABLE_BITS


@functools.cache
def _log_table() -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per piece of z: 1/c for its midpoint c, rounded to a multiple of 2^-10 (11 bits, so that
    its products with z's parts are exact; 1 for the two pieces next to 1, where z - 1 needs
    no table and log x is small), and -log of that, to a multiple of 2^-32 (on k ln2_hi's grid,
    so their sum is exact) plus the float64 nearest the rest. Made when first rendered."""
    from decimal import Decimal, localcontext

    inverses, highs, lows = [], [], []
    for i in range(1 << _LOG_TABLE_BITS):
        start, end = (
            float(np.int64(_LOG_START + (j << _LOG_PIECE_SHIFT)).view(F64)) for j in (i, i + 1)
        )
        inverse = 1.0 if 1.0 in (start, end) else round(2048 / (start + end)) / 1024
        with localcontext() as context:
            context.prec = 60
            log_c = -Decimal(inverse).ln()
            high = math.ldexp(round(log_c * 2**32), -32)
            low = float(log_c - Decimal(high))
        inverses.append(inverse)
        highs.append(high)
        lows.append(low)
    return tuple(inverses), tuple(highs), tuple(lows)


def _log_double(a: Expr) -> tuple[Expr, Expr]:
    """log a as a pair of float64s (about 2^-67 relative) for positive finite a: with
    a = z 2^k and 1/c, log c from the table (`_log_table`), log a = k ln 2 + log c + log1p(r)
    for r = z/c - 1, |r| <= 2^-7. z's first 21 bits and the rest, each times 1/c, give r as an
    exact pair; k ln2_hi + log c's head is exact, r and r^2/2's head (26 bits squared) join it
    by exact sums, and the rest of the Taylor series (degree 10: 2^-73 short) and every error
    go into the low part, whose rounding (2^-53 of r^3/3 at most) is the error."""
    index_type = np.dtype(np.int64)

    def integer(value: int) -> Expr:
        return K.const(value, index_type)

    subnormal = _lt(a, float(np.finfo(F64).tiny))
    bits = K.Bitcast(K.select(subnormal, a * _c(2.0**52, a), a), index_type)
    shifted = bits - integer(_LOG_START)
    k = K.binary("shr_arith", shifted, integer(52))
    k = k - K.select(subnormal, integer(52), integer(0))
    z = K.Bitcast(bits - K.binary("and", shifted, integer(-1 << 52)), F64)
    piece = K.binary(
        "and",
        K.binary("shr_logical", shifted, integer(_LOG_PIECE_SHIFT)),
        integer((1 << _LOG_TABLE_BITS) - 1),
    )
    inverses, highs, lows = _log_table()
    inverse = K.lookup(inverses, piece, F64)
    z_high = K.Bitcast(K.binary("and", K.Bitcast(z, index_type), integer(-1 << 32)), F64)
    r, r_error = _two_sum(z_high * inverse - _c(1, a), (z - z_high) * inverse)
    r_high = _high_half(r)
    r_low = r - r_high
    e = K.cast(k, F64)
    ln2_hi, ln2_lo = _LN2[F64]
    anchor = e * _c(ln2_hi, a) + K.lookup(highs, piece, F64)  # exact; 0 or above |r|
    high, error = _fast_two_sum(anchor, r)
    high, error2 = _fast_two_sum(high, r_high * (r_high * _c(-0.5, a)))
    half_square_rest = r_low * (r_high + r_low * _c(0.5, a))
    series = _horner([(-1) ** (n + 1) / n for n in range(3, 11)], r)
    low = (e * _c(ln2_lo, a) + K.lookup(lows, piece, F64)) + (error + error2)
    low = low + ((r_error - r * r_error) - half_square_rest)  # log1p(r + dr) - log1p(r)
    low = low + r * r * r * series
    return _fast_two_sum(high, low)


def _power_magnitude(a: Expr, y: Expr) -> Expr:
    """|x|^y = e^(y log |x|) for a = |x| (float64): y log a takes log a as a pair and the
    product's rounding error into account, e^(z + dz) = e^z (1 + dz). Where a is 0 or inf, or
    the result overflows or underflows, the plain form gives the right 0, 1 or inf."""
    plain = exp(y * log(a))
    log_high, log_low = _log_double(a)
    product, error = _two_product(y, log_high)
    correction = error + y * log_low
    # exp's steps with r carried as a pair: r = hi - n ln2_hi exactly, minus n ln2_lo with
    # its rounding error kept, plus the correction. Then e^r = 1 + r + r^2/2 + r^3 q(r),
    # whose two leading sums are exact (two-sums, r^2 as an exact product): what is left to
    # round is far under an ulp, so the one rounding of the final sum is nearly all the error,
    # and powers that are floats come out exactly.
    ln2_hi, ln2_lo = _LN2[F64]
    n_float = K.unary("round_even", product * _c(1 / math.log(2), a))
    r, r_error = _two_sum(
        product - n_float * _c(ln2_hi, a), K.unary("neg", n_float * _c(ln2_lo, a))
    )
    r_low = r_error + correction
    one = _c(1.0, a)
    square, square_error = _two_product(r, r)
    half_square = square * _c(0.5, a)
    head, head_error = _two_sum(one, r)
    head, head_error2 = _two_sum(head, half_square)
    cube_terms = [1 / math.factorial(k) for k in range(3, _EXP_DEGREE[F64] + 1)]
    tail = (head_error + head_error2) + square_error * _c(0.5, a)
    tail = tail + (r * square) * _horner(cube_terms, r)
    # e^(r + r_low) = e^r (1 + r_low), the product with e^r whole (|r_low| < 2^-42)
    tail = tail + r_low * (head + tail)
    precise = _scaled(head + tail, n_float)
    usable = K.binary("and", _gt(a, 0.0), _lt(a, np.inf))
    usable = K.binary("and", usable, _lt(K.unary("abs", product), 746.0))
    return K.select(usable, precise, plain)


def pow(x: Expr, y: Expr) -> Expr:
    if x.dtype == F32:  # float64's plain e^(y log |x|) is far within a float32 ulp
        wide_x, wide_y = K.cast(x, F64), K.cast(y, F64)
        return K.cast(_power(wide_x, wide_y, lambda a, b: exp(b * log(a))), F32)
    return _power(x, y, _power_magnitude)


def _power(x: Expr, y: Expr, magnitude_of) -> Expr:
    """|x|^y, which gives the zero and infinite bases and exponents their IEEE 754 values by
    itself; then the sign (negative bases to odd whole powers), NaN for negative finite bases
    to fractional powers, and 1 for x^0, 1^y and (-1)^(+-inf)."""
    a = K.unary("abs", x)
    magnitude = magnitude_of(a, y)
    half = y * _c(0.5, y)
    whole = _eq(K.unary("floor", y), y)
    odd = K.binary("and", whole, K.binary("ne", K.unary("floor", half), half))
    result = K.select(K.binary("and", _sign_bit(x), odd), K.unary("neg", magnitude), magnitude)
    fractional_of_negative = K.binary(
        "and", K.binary("and", _lt(x, 0.0), _lt(a, np.inf)), K.unary("not", whole)
    )
    result = K.select(fractional_of_negative, _c(np.nan, x), result)
    unit_base = K.binary(
        "or", _eq(x, 1.0), K.binary("and", _eq(a, 1.0), _eq(K.unary("abs", y), np.inf))
    )
    result = K.select(_eq(y, 1.0), x, result)
    return K.select(K.binary("or", _eq(y, 0.0), unit_base), _c(1.0, x), result)


def _inverse_log(base: int) -> tuple[float, float]:
    """1 / ln(base) as the float64 nearest it plus the float64 nearest the rest."""
    from decimal import Decimal, getcontext

    getcontext().prec = 70
    return _split(str(1 / Decimal(base).ln()))


_INVERSE_LOG = {10: _inverse_log(10), 2: _inverse_log(2)}


def _log_in_base(x: Expr, base: int) -> Expr:
    """log x / ln(base). float64: log x as a pair times 1/ln(base) as a pair, the leading
    product exact, so one rounding is nearly the whole error and exact powers of the base come
    out exact (the plain quotient is an ulp off at 1000 and 2^-1000). float32: plain log in
    float64, whose error is far under a float32 ulp, rounded once."""
    inverse_high, inverse_low = _INVERSE_LOG[base]
    if x.dtype == F32:
        wide = K.cast(x, F64)
        return K.cast(log(wide) * _c(inverse_high, wide), F32)
    high, low = _log_double(x)
    product, error = _two_product(high, _c(inverse_high, x))
    result = product + (error + (low * _c(inverse_high, x) + high * _c(inverse_low, x)))
    return _with_log_special_values(x, result)


def nextafter(x: Expr, y: Expr, storage: np.dtype | None = None) -> Expr:
    """The neighbour of x toward y by stepping its bit pattern: sign and magnitude bits, so the
    magnitude grows by one step when y lies beyond x away from zero. From zero the step is the
    smallest subnormal with y's sign; x == y gives y, and NaN in either gives NaN. With a
    half-precision or narrow `storage` dtype, whose values float32 x and y hold, the step is
    one of that format's (a float32 step from such a value rounds back to it)."""
    dtype = x.dtype if storage is None else storage
    bits_dtype = np.dtype(f"int{dtype.itemsize * 8}")
    bits = K.Bitcast(x if storage is None else K.cast(x, storage), bits_dtype)
    away = K.binary("eq", _gt(y, x), _gt(x, 0.0))
    step = K.select(away, K.const(1, bits_dtype), K.const(-1, bits_dtype))
    stepped = bits + step
    if dtypes.NARROW_FLOATS.get(dtype) == "fnuz":
        # The step from the least negative value toward zero lands on -0's pattern, which
        # these formats spend on NaN: it is zero.
        minus_zero = K.binary("eq", stepped, K.const(np.iinfo(bits_dtype).min, bits_dtype))
        stepped = K.select(minus_zero, K.const(0, bits_dtype), stepped)
    result = K.Bitcast(stepped, dtype)
    result = result if storage is None else K.cast(result, x.dtype)
    tiniest = _c(float(dtypes.finfo(dtype).smallest_subnormal), x)
    result = K.select(_eq(x, 0.0), _copysign(tiniest, y), result)
    result = K.select(_eq(x, y), y, result)  # (C's nextafter: they differ on -0 and +0)
    return K.select(K.binary("or", K.binary("ne", x, x), K.binary("ne", y, y)), x + y, result)


# -- the error function (computed in float64) -------------------------------------------------

# Below |x| = 1/2, erf by its Taylor series; above, erfc(a) = e^(-a^2) erfcx(a), with the
# scaled function erfcx smooth and slowly varying: a polynomial interpolating it up to a = 3,
# Laplace's continued fraction beyond. (Terms, degree, levels) per result dtype, each leaving
# under a thousandth of its ulp (float32) or an ulp in 2^53 (float64).
_ERF_TERMS = {F32: (9, 14, 14), F64: (14, 22, 32)}
_ERF_TAYLOR_BELOW = 0.5
_ERFCX_FIT_TO = 3.0
# e^(-a^2) is 0 past this, erfc's last subnormal; clamping there keeps inf out of a^2's error.
_ERFC_ZERO_FROM = 27.5


def _erf_taylor(x: Expr, terms: int) -> Expr:
    """erf x = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)), for |x| < 1/2."""
    coefficients = [
        2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(terms)
    ]
    return x * _horner(coefficients, x * x)


@functools.cache
def _erfcx_polynomial(degree: int) -> tuple[float, ...]:
    """Coefficients in t = (a - 7/4) / (5/4) (so [1/2, 3] maps onto [-1, 1]) of the polynomial
    interpolating erfcx(a) = e^(a^2) erfc(a) at Chebyshev points, solved in 80-digit decimal
    arithmetic from erf's Taylor series (exact to far past float64 there) and rounded once."""
    from decimal import Decimal, localcontext

    with localcontext() as context:
        context.prec = 80
        sqrt_pi = Decimal(_PI).sqrt()

        def erfcx(a: Decimal) -> Decimal:
            square, term = a * a, a
            total, n = a, 0
            while abs(term) > Decimal(10) ** -75:
                n += 1
                term = -term * square / n
                total += term / (2 * n + 1)
            return square.exp() * (1 - 2 / sqrt_pi * total)

        middle = Decimal(_ERF_TAYLOR_BELOW + _ERFCX_FIT_TO) / 2
        half_width = Decimal(_ERFCX_FIT_TO - _ERF_TAYLOR_BELOW) / 2
        size = degree + 1
        nodes = [Decimal(math.cos(math.pi * (k + 0.5) / size)) for k in range(size)]
        rows = [[t**j for j in range(size)] + [erfcx(middle + half_width * t)] for t in nodes]
        return _solved(rows)


def _erfcx_fraction(a: Expr, levels: int) -> Expr:
    """erfcx a = 1 / sqrt(pi) / (a + (1/2) / (a + 1 / (a + (3/2) / (a + ...)))), evaluated from
    its last level up as a ratio of two running values (one division in all)."""
    numerator, denominator = a, _c(1, a)
    for level in range(levels, 0, -1):
        numerator, denominator = a * numerator + _c(level / 2, a) * denominator, numerator
    return _c(1 / math.sqrt(math.pi), a) * _div(denominator, numerator)


def _erfc_positive(a: Expr, result: np.dtype) -> Expr:
    """erfc(a) for a >= 1/2 (smaller a are taken as 1/2). e^(-a^2) is taken of a^2 rounded and
    corrected by the rounding's error, which alone would cost up to 700 ulp near underflow."""
    _, degree, levels = _ERF_TERMS[result]
    a = K.binary("max", K.binary("min", a, _c(_ERFC_ZERO_FROM, a)), _c(_ERF_TAYLOR_BELOW, a))
    middle = (_ERF_TAYLOR_BELOW + _ERFCX_FIT_TO) / 2
    half_width = (_ERFCX_FIT_TO - _ERF_TAYLOR_BELOW) / 2
    fitted = _horner(_erfcx_polynomial(degree), (a - _c(middle, a)) * _c(1 / half_width, a))
    far = _erfcx_fraction(K.binary("max", a, _c(_ERFCX_FIT_TO, a)), levels)
    scaled = K.select(_lt(a, _ERFCX_FIT_TO), fitted, far)
    square, square_error = _two_product(a, a)
    return exp(K.unary("neg", square)) * (_c(1, a) - square_error) * scaled


# float32's erf, in float32 arithmetic. Below |x| = 3/4, x + x Q(x^2) (the last step one fused
# multiply-add, so Q's rounding is scaled by |Q| <= 0.13, and x^2's by x^2 |Q'|: up to 1, that
# alone cost 0.4 ulp); above, base + H(a - m) on two pieces: [3/4, 2) erf itself (base 0) and
# [2, 3.92) -erfc (base 1), whose rounding is relative to erfc, far under erf's ulp. A piece's
# coefficients are picked per element by selects (one polynomial evaluated, not two), and
# a - m is exact (Sterbenz). Fitted by least squares at Chebyshev points in 40-digit
# arithmetic (mpmath), each coefficient rounded to float32 in turn and the rest refitted to
# absorb its rounding. (In float64, degree 9 and 21 and eight lanes a vector: twice the time.)
_ERF32_SMALL_BELOW = 0.75
_ERF32_SMALL = (
    0.12837916612625122, -0.376126229763031, 0.11283428221940994, -0.02683696523308754,
    0.005118804518133402, -0.0006779764662496746,
)  # fmt: skip
# (centre m, base, coefficients of H in a - m) below and above _ERF32_SPLIT
_ERF32_SPLIT = 2.0
_ERF32_PIECES = (
    (1.375, 0.0, (
        0.9481700658798218, 0.1703597456216812, -0.23424433171749115, 0.15793916583061218,
        -0.030505811795592308, -0.030627187341451645, 0.022192522883415222,
        -0.001292681903578341, -0.0043459320440888405, 0.0012439574347808957,
        0.00041812018025666475,
    )),
    (3.0, 1.0, (
        -2.2093718143878505e-05, 0.00013918850163463503, -0.00041754209087230265,
        0.0007905121310614049, -0.001046716351993382, 0.001007819315418601,
        -0.0007292532245628536, 0.00041285695624537766, -0.00014922999253030866,
        -1.1391149200790096e-05, 2.607958231237717e-05,
    )),
)  # fmt: skip
_ERF32_IS_ONE_FROM = 3.92


def _erf32_small_part(x: Expr) -> Expr:
    """x Q(x^2), where erf x = x + x Q(x^2) for |x| < 3/4."""
    return x * _horner(_ERF32_SMALL, x * x)


def _erf_float32(x: Expr) -> Expr:
    a = K.unary("abs", x)
    small = x + _erf32_small_part(x)
    below_split = _lt(a, _ERF32_SPLIT)

    def picked(near: float, far: float) -> Expr:
        return K.select(below_split, _c(near, a), _c(far, a))

    (near_centre, near_base, near), (far_centre, far_base, far) = _ERF32_PIECES
    u = a - picked(near_centre, far_centre)
    fitted = picked(near[-1], far[-1])
    for near_coefficient, far_coefficient in zip(reversed(near[:-1]), reversed(far[:-1])):
        fitted = fitted * u + picked(near_coefficient, far_coefficient)
    large = picked(near_base, far_base) + fitted
    large = K.select(K.binary("ge", a, _c(_ERF32_IS_ONE_FROM, a)), _c(1, a), large)  # NaN stays
    return K.select(_lt(a, _ERF32_SMALL_BELOW), small, _copysign(large, x))


# float32's erfc. Below |x| = 1/2, (1 - x) - x Q(x^2) in float32 with 1 - x's rounding error
# carried (a two-sum). Above, in float64, where a^2 is exact: e^(-a^2) erfcx(a) with e^(-a^2)
# from exp's reduction and a Taylor polynomial of degree 8 (2e-10 relative), and erfcx a
# polynomial in t = (a - 2) / (a + 2) on a in [1/2, 10.1] (past it erfc rounds to 0),
# interpolating it at Chebyshev points in 40-digit arithmetic (mpmath) to 2e-10 relative; so
# the result is rounded about once. erfc(-a) = 2 - erfc(a), also in float64.
_ERFC32_SMALL_BELOW = 0.5
_ERFC32_ZERO_FROM = 10.1
_ERFCX_T_SHIFT = 2.0
_ERFCX_IN_T = (
    0.2553956763246059, -0.4271858472143797, 0.24165819161047053, -0.07897859197720264,
    0.003732973606295221, 0.00699762621138713, -0.0008480778099146998, -0.0009829437740516715,
    4.853797819734578e-05, 0.00017660602636115436, 1.4751104055315654e-05,
    -2.8629589350518525e-05,
)  # fmt: skip
_EXP_MODERATE_DEGREE = 8


def _exp_moderate(x: Expr) -> Expr:
    """e^x (float64) for -708 < x <= 0 (a normal result), to 2e-10 relative: exp's reduction
    with ln 2 in one piece and a shorter polynomial, and no special values."""
    fmt = _Format(x.dtype)
    n_float, n = fmt.rounded(x * _c(1 / math.log(2), x))
    r = x - n_float * _c(math.log(2), x)
    taylor = [1 / math.factorial(k) for k in range(_EXP_MODERATE_DEGREE + 1)]
    return _horner(taylor, r) * fmt.power_of_two(n)


def _erfc_float32(x: Expr) -> Expr:
    one = _c(1, x)
    rounded, error = _fast_two_sum(one, K.unary("neg", x))
    small = rounded + (error - _erf32_small_part(x))
    wide = K.cast(x, F64)
    a = K.binary("min", K.unary("abs", wide), _c(_ERFC32_ZERO_FROM, wide))
    shift = _c(_ERFCX_T_SHIFT, a)
    scaled = _horner(_ERFCX_IN_T, _div(a - shift, a + shift))
    positive = _exp_moderate(K.unary("neg", a * a)) * scaled
    large = K.cast(K.select(_lt(wide, 0.0), _c(2, a) - positive, positive), x.dtype)
    return K.select(_lt(K.unary("abs", x), _ERFC32_SMALL_BELOW), small, large)


def erf(x: Expr) -> Expr:
    """Taylor's series below |x| = 1/2, 1 - erfc(|x|) above (with x's sign): erfc(1/2) = 0.48,
    so the subtraction loses no more than a bit. float32's: `_erf_float32`."""
    result = x.dtype
    if result == F32:
        return _erf_float32(x)
    x = K.cast(x, F64)
    a = K.unary("abs", x)
    large = _copysign(_c(1, x) - _erfc_positive(a, result), x)
    small = _erf_taylor(x, _ERF_TERMS[result][0])
    return K.cast(K.select(_lt(a, _ERF_TAYLOR_BELOW), small, large), result)


def erfc(x: Expr) -> Expr:
    """1 - erf(x) below |x| = 1/2 (results in [0.48, 1.52]); e^(-x^2) erfcx(x) above, and
    erfc(-a) = 2 - erfc(a) for negative x. float32's: `_erfc_float32`."""
    result = x.dtype
    if result == F32:
        return _erfc_float32(x)
    x = K.cast(x, F64)
    a = K.unary("abs", x)
    positive = _erfc_positive(a, result)
    large = K.select(_lt(x, 0.0), _c(2, x) - positive, positive)
    small = _c(1, x) - _erf_taylor(x, _ERF_TERMS[result][0])
    return K.cast(K.select(_lt(a, _ERF_TAYLOR_BELOW), small, large), result)


# -- the log-gamma function (computed in float64) ----------------------------------------------

# Stirling's series from x = 10: log Gamma(x) = (x - 1/2) log x - x + log(2 pi)/2 +
# sum_k B_2k / (2k (2k - 1) x^(2k - 1)); eight terms leave under 2^-56 relative there.
_STIRLING_FROM = 10.0
_STIRLING_TERMS = 8
_LGAMMA_DEGREE = {F32: 12, F64: 22}
_EULER_GAMMA = 0.57721566490153286


@functools.cache
def _lgamma_ratio_polynomial(degree: int) -> tuple[float, ...]:
    """Coefficients in t = 2x - 3 (so [1, 2] maps onto [-1, 1]) of the polynomial interpolating
    log Gamma(x) / ((x - 1)(x - 2)) at Chebyshev points. The ratio is smooth on [1, 2], and
    multiplying back by the exact factors x - 1 and x - 2 keeps log Gamma's relative accuracy
    at its zeros 1 and 2. Values come from Stirling's series at x + 40 in 80-digit decimal
    arithmetic, solved for and rounded once."""
    from decimal import Decimal, localcontext

    bernoulli = _bernoulli(2 * 20)
    with localcontext() as context:
        context.prec = 80
        half_log_two_pi = (2 * Decimal(_PI)).ln() / 2

        def lgamma(x: Decimal) -> Decimal:
            z = x + 40
            series = sum(
                Decimal(b.numerator)
                / Decimal(b.denominator)
                / (2 * k * (2 * k - 1))
                / z ** (2 * k - 1)
                for k, b in ((k, bernoulli[2 * k]) for k in range(1, 21))
            )
            stirling = (z - Decimal("0.5")) * z.ln() - z + half_log_two_pi + series
            return stirling - sum((x + i).ln() for i in range(40))

        size = degree + 1
        nodes = [Decimal(math.cos(math.pi * (k + 0.5) / size)) for k in range(size)]
        rows = []
        for t in nodes:
            x = (t + 3) / 2
            rows.append([t**j for j in range(size)] + [lgamma(x) / ((x - 1) * (x - 2))])
        return _solved(rows)


def _lgamma_from_one(y: Expr, result: np.dtype) -> Expr:
    """log Gamma(y) for y >= 1: the fitted ratio on [1, 2); on [2, 10), shifted down into
    [1, 2) by log Gamma(y) = log Gamma(y - m) + log((y - 1) ... (y - m)); Stirling's series
    from 10 on."""
    one = _c(1, y)
    m = K.binary("min", K.unary("floor", y) - one, _c(_STIRLING_FROM - 2, y))
    m = K.binary("max", m, _c(0, y))
    product = one
    for i in range(1, int(_STIRLING_FROM) - 1):
        product = product * K.select(K.binary("le", _c(i, y), m), y - _c(i, y), one)
    base = y - m  # in [1, 2) for y < 10 (exact: m is whole and y's exponent is small there)
    ratio = _horner(_lgamma_ratio_polynomial(_LGAMMA_DEGREE[result]), base + base - _c(3, y))
    near = (base - one) * (base - _c(2, y)) * ratio + log(product)
    large = K.binary("max", y, _c(_STIRLING_FROM, y))
    inverse = _div(one, large)
    bernoulli = _bernoulli(2 * _STIRLING_TERMS)
    series = inverse * _horner(
        [float(bernoulli[2 * k]) / (2 * k * (2 * k - 1)) for k in range(1, _STIRLING_TERMS + 1)],
        inverse * inverse,
    )
    half_log_two_pi = 0.5 * math.log(2 * math.pi)
    far = (large - _c(0.5, y)) * log(large) - large + (_c(half_log_two_pi, y) + series)
    return K.select(_lt(y, _STIRLING_FROM), near, far)


def lgamma(x: Expr) -> Expr:
    """log |Gamma(x)|: from y >= 1 (`_lgamma_from_one`); log Gamma(x + 1) - log x below 1; and
    for negative x the reflection log |Gamma(x)| = log(pi / |sin(pi x)|) - log Gamma(1 - x),
    with sin(pi x) taken of x's distance to the nearest integer (exact), so the poles at the
    non-positive integers come out infinite. Accurate relative to the result for positive x
    (zeros included); for negative x, the reflection's two terms cancel near log Gamma's
    zeros there, so the error is a few ulp of max(|result|, 1)."""
    result = x.dtype
    x = K.cast(x, F64)
    one = _c(1, x)
    a = K.unary("abs", x)
    from_one = _lgamma_from_one(K.binary("max", x, one), result)
    # x + 1 is rounded (by up to 2^-53), which near x = 1 (log Gamma's zero) would cost
    # thousands of ulp: its rounding error enters through log Gamma's slope there, the
    # digamma function, to first order about 2 (psi(2) and psi'(2)).
    shifted = x + one
    rounding = x - (shifted - one)
    slope = _c(1 - _EULER_GAMMA, x) + _c(math.pi**2 / 6 - 1, x) * (shifted - _c(2, x))
    below_one = (_lgamma_from_one(shifted, result) + slope * rounding) - log(x)
    distance = x - K.unary("round_even", x)
    # (sin of |angle| <= pi/2 needs no more than the Cody-Waite reduction)
    sine = K.unary("abs", _trig_of_reduced(*_cody_waite(distance * _c(_PI_HI, x), F64), "sin", F64))
    # Next to an integer, log |sin(pi d)| is log pi + log |d| to within 2^-59: pi d itself
    # is subnormal for the smallest d and kept 1 to 3 bits (lgamma(-5e-324) was 744.486, not
    # 744.440).
    near_integer = _lt(K.unary("abs", distance), 2.0**-30)
    log_sine = K.select(
        near_integer, log(K.unary("abs", distance)) + _c(math.log(math.pi), x), log(sine)
    )
    reflected = (_c(math.log(math.pi), x) - log_sine) - _lgamma_from_one(one - x, result)
    value = K.select(_lt(x, 1.0), below_one, from_one)
    value = K.select(_lt(x, 0.0), reflected, value)
    # The poles: 0, +inf, and every non-positive whole x, where the reflection's infinities
    # would meet (inf - inf) beyond x = -2.5e305, log Gamma(1 - x) overflowing there.
    pole = K.binary("and", _eq(distance, 0.0), K.unary("not", _gt(x, 0.0)))
    value = K.select(K.binary("or", pole, _eq(a, np.inf)), _c(np.inf, x), value)
    value = K.select(_eq(x, -np.inf), x, value)  # (the reference's, SciPy's, convention)
    return K.cast(value, result)


_FUNCTIONS = {
    "exp": exp,
    "exp2": exp2,
    "log": log,
    "log1p": log1p,
    "log10": lambda x: _log_in_base(x, 10),
    "log2": lambda x: _log_in_base(x, 2),
    "expm1": expm1,
    "tanh": tanh,
    "sin": lambda x: _trig(x, "sin"),
    "cos": lambda x: _trig(x, "cos"),
    "tan": lambda x: _trig(x, "tan"),
    "atan": atan,
    "asin": asin,
    "acos": acos,
    "atan2": atan2,
    "sinh": sinh,
    "cosh": cosh,
    "asinh": asinh,
    "acosh": acosh,
    "atanh": atanh,
    "cbrt": cbrt,
    "pow": pow,
    "nextafter": nextafter,
    "erf": erf,
    "erfc": erfc,
    "logistic": logistic,
    "lgamma": lgamma,
}
