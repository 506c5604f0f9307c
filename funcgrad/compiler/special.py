"""erf_inv and digamma as compositions of kernel-IR operations (element rules).

Neither has a C library function, and each has a short, accurate construction from functions
that renderers do have:

- erf_inv: in float32 on a CPU, in float32 arithmetic (16 lanes to a vector): -log(1 - y^2)
  as a pair of float32s from an exact y^2, then fitted polynomials in it and in its square root,
  within 0.82 ulp (`_erf_inv_float32`); on a GPU, two fitted polynomials in -log(1 - y^2)
  evaluated in float64, within a hair of half an ulp (`_erf_inv_fitted`). Otherwise
  Winitzki's closed-form guess (relative error about 2e-3), then Halley steps on erf(x) = y,
  each of which cubes the error. For |y| > 1/2 the residual is taken through erfc and 1 - |y|
  (exact there), so it keeps its precision as y approaches 1.
- digamma: reflection psi(x) = psi(1 - x) - pi / tan(pi x) for negative x (the tangent taken of
  the exactly reduced x - round(x)); the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10;
  there the asymptotic series in 1/x^2 (Bernoulli numbers) to 1/x^14; next to its zeros at
  1.4616... and -0.5040..., where those cancel, the reference's Taylor expansions about them;
  in float64 whatever the operand's dtype, as the reference computes it.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.choices import Choice
from funcgrad.compiler.fusion import compute_dtype, element_rules
from funcgrad.compiler.kernel_ir import Expr
from funcgrad.compiler.mathlib import _LN2, _copysign, _fast_two_sum, _Format, _horner
from funcgrad.core import PRIMITIVES
from funcgrad.lax._special import _NEG_ROOT, _NEG_ROOT_TAYLOR, _POS_ROOT, _POS_ROOT_TAYLOR


def _c(value: float, like: Expr) -> Expr:
    return K.const(value, like.dtype)


def _div(a: Expr, b: Expr) -> Expr:
    return K.binary("div", a, b)


# A CPU's float32 erf_inv is computed in float32 (16 lanes to a 512-bit vector, not 8); a GPU's
# keeps the float64 polynomials, whose rounding its tests pin.
erf_inv_in_float32 = Choice("erf_inv_in_float32", False)


def erf_inv(y: Expr) -> Expr:
    if y.dtype == np.float32:
        return _erf_inv_float32(y) if erf_inv_in_float32.get() else _erf_inv_fitted(y)
    a = K.unary("abs", y)
    one = _c(1, a)
    w = K.unary("neg", K.unary("log", (one - a) * (one + a)))  # -log(1 - y^2)
    spread = 0.147
    t = _c(2 / (math.pi * spread), a) - w * _c(0.5, a)
    x = K.unary("sqrt", K.unary("sqrt", t * t + w * _c(1 / spread, a)) - t)
    steps = 2 if a.dtype == np.float32 else 3
    near_one = K.binary("gt", a, _c(0.5, a))
    for _ in range(steps):
        # f(x) = erf(x) - a, written through erfc where a is near 1; f'(x) = 2/sqrt(pi) e^-x^2.
        residual = K.select(near_one, (one - a) - K.unary("erfc", x), K.unary("erf", x) - a)
        slope = _c(2 / math.sqrt(math.pi), a) * K.unary("exp", K.unary("neg", x * x))
        newton = _div(residual, slope)
        x = x - _div(newton, one + x * newton)
    x = K.select(K.binary("eq", a, one), _c(np.inf, a), x)
    x = K.select(K.binary("gt", a, one), _c(np.nan, a), x)
    return x * K.unary("sign", y)


# float32's erf_inv, in float64, as a polynomial in w = -log(1 - y^2): erf_inv(y) / y for w
# below _W_SPLIT (|y| < 0.99903), erf_inv(y) itself in sqrt(w) above, up to sqrt(w) = 4 (|y| =
# 1 - 2^-24, float32's last value below 1). Each interpolates erf_inv at Chebyshev points of its
# range, solved in 50-digit arithmetic (mpmath) in the range mapped onto [-1, 1]; their largest
# relative errors, float64 rounding included, are 7e-11 and 2.5e-12, so the float32 result is
# the exact value rounded but within 1e-3 of an ulp of a halfway point. (The Halley steps
# below, each an erf, an erfc and an exp in float64, cost 8 times as much.)
_W_SPLIT = 6.25
_SQRT_W = (2.5, 4.0)
_BELOW_SPLIT = (
    1.6536545626831027, 0.7504943192771326, -0.05892256689632641, -0.022604417411686197,
    0.01780835400777713, -0.004137640657658303, -0.0012716061649516383, 0.0012340545211654134,
    -0.00026481873391111797, -0.00012078486378226936, 9.447014728270999e-05,
    -9.795278686839765e-06, -1.2854449923383061e-05, 3.4836409013043622e-06,
    6.040287510487676e-07,
)  # fmt: skip
_ABOVE_SPLIT = (
    3.083845723097776, 0.7541289264346154, 0.0026170934284120355, -0.0010318613295344043,
    0.00027084738798267393, -5.268506785314958e-05, 4.317126536017558e-06,
    2.2767794166037725e-06, -1.4210465294595617e-06, 3.865909832474456e-07,
    9.132310707746245e-09, -3.1182621496443116e-08,
)  # fmt: skip


def _erf_inv_fitted(y: Expr) -> Expr:
    wide = K.cast(y, np.dtype(np.float64))
    a = K.unary("abs", wide)
    one = _c(1, a)
    # (1 - a)(1 + a) is exact near a = 1, where w's relative error matters; below, an absolute
    # error of 1e-16 in w moves the polynomial by as little.
    w = K.unary("neg", K.unary("log", (one - a) * (one + a)))
    near = a * _horner(_BELOW_SPLIT, w * _c(2 / _W_SPLIT, w) - _c(1, w))
    low, high = _SQRT_W
    s = K.unary("sqrt", K.binary("max", w, _c(low * low, w)))
    far = _horner(_ABOVE_SPLIT, (s - _c((low + high) / 2, w)) * _c(2 / (high - low), w))
    x = K.select(K.binary("lt", w, _c(_W_SPLIT, w)), near, far)
    x = K.select(K.binary("eq", a, one), _c(np.inf, a), x)
    x = K.select(K.binary("gt", a, one), _c(np.nan, a), x)
    return K.cast(x * K.unary("sign", wide), y.dtype)


# float32's erf_inv in float32 arithmetic. w = -log(1 - a^2), a = |y|, is carried as a pair of
# float32s: a^2 exactly (Dekker's product), 1 - a^2 as a rounded value and its error, whose log
# is e ln 2 + log(m) with log(m) = 2 atanh(u), u = f / (2 + f), f = m - 1 plus the error term
# scaled by 2^-e (the division's rounding reaches the result through u f alone, a sixth of it).
# Below w = _W32_SPLIT (|y| < 0.9299), x = a + a Q(w) with Q = erf_inv(y) / y - 1 in [-0.114,
# 0.377], its linear term fused into its last step (w c1 rounded alone cost a tenth of an ulp),
# and w's low part added through Q's slope (0.232 to 0.250); above, x = s + s R(s - 2.75), s =
# sqrt(w), R in [-0.114, -0.039], with s's rounding corrected by (w - s^2) dx/ds / (2 s) (a
# cubic). The last step rounds once. Q and R were fitted by least squares at Chebyshev points in
# 40-digit arithmetic (mpmath) for the result's relative error, each coefficient rounded to
# float32 in turn and the rest refitted (largest errors 0.06 and 0.07 ulp).
_W32_SPLIT = 2.0
_S32_CENTRE = 2.75
_Q32 = (
    -0.11377307772636414, 0.2320137619972229, 0.011548567563295364, -0.002332412637770176,
    -0.00013280297571327537, 5.118049375596456e-05, -2.860621179934242e-07,
    -5.376952003643964e-07,
)  # fmt: skip
_R32 = (
    -0.06086450070142746, 0.021594051271677017, -0.0042572361417114735,
    -0.00016265812155324966, 0.0005499745020642877, -0.00022723579604644328,
    1.6246891391347162e-05, 3.294382258900441e-05, -1.4746612578164786e-05,
    -1.1486921493997215e-06, 1.8996008748217719e-06, -1.7926532791534555e-07,
)  # fmt: skip
_Q32_SLOPE = 0.242
_R32_SLOPE_OVER_2S = (
    0.18062281608581543, -0.06077529117465019, 0.02485419623553753, -0.009740917012095451,
)  # fmt: skip
# atanh(u) / u = 1 + u^2 (2/3 + 2u^2/5 + ...) / 2: the terms to u^8, |u| <= 0.172 (4e-10 left)
_ATANH32 = tuple(2 / (2 * k + 3) for k in range(4))


def _split32(v: Expr) -> tuple[Expr, Expr]:
    """v as a sum of two float32s of 12 significant bits each (their products are exact)."""
    i32 = np.dtype(np.int32)
    high = K.Bitcast(K.binary("and", K.Bitcast(v, i32), K.const(-(1 << 12), i32)), v.dtype)
    return high, v - high


def _square32(v: Expr) -> tuple[Expr, Expr]:
    """v^2 rounded and its rounding error (Dekker's product; exact)."""
    square = K.rounded(v * v)
    high, low = _split32(v)
    error = ((high * high - square) + _c(2, v) * high * low) + low * low
    return square, error


def _minus_log_one_minus_square(a: Expr) -> tuple[Expr, Expr]:
    """-log(1 - a^2) for 0 <= a < 1 as a rounded value and a correction."""
    fmt = _Format(a.dtype)
    one = _c(1, a)
    square, square_error = _square32(a)
    t = one - square
    t_error = ((one - t) - square) - square_error  # t + t_error = 1 - a^2
    bits = K.Bitcast(t, fmt.int)
    exponent = K.binary("shr_arith", bits, K.const(fmt.mantissa, fmt.int)) - K.const(
        fmt.bias, fmt.int
    )
    mask, one_bits = (1 << fmt.mantissa) - 1, fmt.bias << fmt.mantissa
    m = K.Bitcast(
        K.binary("or", K.binary("and", bits, K.const(mask, fmt.int)), K.const(one_bits, fmt.int)),
        a.dtype,
    )
    big = K.binary("gt", m, _c(math.sqrt(2), a))
    m = K.select(big, m * _c(0.5, a), m)
    exponent = exponent + K.select(big, K.const(1, fmt.int), K.const(0, fmt.int))
    f = (m - one) + t_error * fmt.power_of_two(K.unary("neg", exponent))
    u = _div(f, f + _c(2, a))
    # log(1 + f) = 2u + 2u^3 (1/3 + u^2/5 + ...), and 2u = f - u f
    log_m = f + (u * u * u * _horner(_ATANH32, u * u) - u * f)
    e = K.cast(exponent, a.dtype)
    ln2_hi, ln2_lo = _LN2[a.dtype]
    rest = K.rounded(e * _c(ln2_lo, a) + log_m)
    total, error = _fast_two_sum(e * _c(ln2_hi, a), rest)
    return K.unary("neg", total), K.unary("neg", error)


def _erf_inv_float32(y: Expr) -> Expr:
    a = K.unary("abs", y)
    w, w_error = _minus_log_one_minus_square(a)
    q_rest = _c(_Q32[0], w) + w * w * _horner(_Q32[2:], w)
    q = w * _c(_Q32[1], w) + q_rest
    central = a + (a * q + a * (w_error * _c(_Q32_SLOPE, w)))
    s = K.unary("sqrt", w)
    square, square_error = _square32(s)
    residual = ((w - square) - square_error) + w_error  # w - s^2, s's rounding and w's low part
    v = s - _c(_S32_CENTRE, s)
    tail = s + (s * _horner(_R32, v) + residual * _horner(_R32_SLOPE_OVER_2S, v))
    x = K.select(K.binary("lt", w, _c(_W32_SPLIT, w)), central, tail)
    x = K.select(K.binary("eq", a, _c(1, a)), _c(np.inf, a), x)
    x = K.select(K.unary("not", K.binary("le", a, _c(1, a))), _c(np.nan, a), x)
    return _copysign(x, y)


# The series is used from here on: its first omitted term, B_16 / (16 x^16), is below 5e-17.
_SHIFT_TO = 10
_BERNOULLI_TERMS = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def digamma(x: Expr) -> Expr:
    zero = _c(0, x)
    negative = K.binary("lt", x, zero)
    z = K.select(negative, _c(1, x) - x, x)
    shifted = _c(0, x)
    for _ in range(_SHIFT_TO):
        small = K.binary("lt", z, _c(_SHIFT_TO, x))
        shifted = shifted + K.select(small, _div(_c(1, x), z), zero)
        z = K.select(small, z + _c(1, x), z)
    inverse = _div(_c(1, x), z)
    inverse2 = inverse * inverse
    series = zero
    for coefficient in reversed(_BERNOULLI_TERMS):
        series = (series + _c(coefficient, x)) * inverse2
    # series = sum_k B_2k / (2k z^2k), built by Horner's rule in 1/z^2.
    psi = K.unary("log", z) - inverse * _c(0.5, x) - series - shifted
    reduced = x - K.unary("round_even", x)
    reflected = psi - _div(_c(math.pi, x), K.unary("tan", reduced * _c(math.pi, x)))
    result = K.select(negative, reflected, psi)
    # Next to its two zeros nearest the origin, where the terms above cancel, the reference's
    # Taylor expansions about them (each zero as hi + lo).
    for (hi, lo), taylor, reach in (
        (_POS_ROOT, _POS_ROOT_TAYLOR, 0.25),
        (_NEG_ROOT, _NEG_ROOT_TAYLOR, 0.1),
    ):
        t = (x - _c(hi, x)) - _c(lo, x)
        near = K.binary("le", K.unary("abs", t), _c(reach, x))
        expansion = _c(taylor[-1], x)
        for coefficient in reversed(taylor[:-1]):
            expansion = expansion * t + _c(coefficient, x)
        result = K.select(near, expansion, result)
    at_pole = K.binary("and", negative, K.binary("eq", reduced, zero))
    result = K.select(at_pole, _c(np.nan, x), result)
    # psi(+0) = -inf, psi(-0) = +inf (the side the pole is approached from).
    signed_infinity = K.select(
        K.binary("lt", _div(_c(1, x), x), zero), _c(np.inf, x), _c(-np.inf, x)
    )
    return K.select(K.binary("eq", x, zero), signed_infinity, result)


def _rule(composite, wide: bool = False):
    """The element rule computing `composite` in the operand's compute dtype, or, `wide`, in
    float64 (then rounded to the operand's dtype)."""

    def rule(builder, eqn, index):
        (operand,) = eqn.invars
        value = builder.element(operand, index)
        dtype = np.dtype(np.float64) if wide else compute_dtype(value.dtype)
        return K.cast(composite(K.cast(value, dtype)), eqn.outvars[0].aval.dtype)

    return rule


element_rules[PRIMITIVES["erf_inv"]] = _rule(erf_inv)
# (float64 terms, rounded once, as the reference computes them: in float32 the recurrence's
# rounding was 5e-4 relative next to the root, 7,300 ulp)
element_rules[PRIMITIVES["digamma"]] = _rule(digamma, wide=True)
