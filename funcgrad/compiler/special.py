"""erf_inv and digamma as compositions of kernel-IR operations (element rules).

Neither has a C library function, and each has a short, accurate construction from functions
that renderers do have:

- erf_inv: in float32, two fitted polynomials in -log(1 - y^2), evaluated in float64
  (`_erf_inv_fitted`); otherwise Winitzki's closed-form guess (relative error about 2e-3),
  then Halley steps on erf(x) = y, each of which cubes the error. For |y| > 1/2 the residual
  is taken through erfc and 1 - |y| (exact there), so it keeps its precision as y approaches 1.
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
from funcgrad.compiler.fusion import compute_dtype, element_rules
from funcgrad.compiler.kernel_ir import Expr
from funcgrad.compiler.mathlib import _horner
from funcgrad.core import PRIMITIVES
from funcgrad.lax._special import _NEG_ROOT, _NEG_ROOT_TAYLOR, _POS_ROOT, _POS_ROOT_TAYLOR


def _c(value: float, like: Expr) -> Expr:
    return K.const(value, like.dtype)


def _div(a: Expr, b: Expr) -> Expr:
    return K.binary("div", a, b)


def erf_inv(y: Expr) -> Expr:
    if y.dtype == np.float32:
        return _erf_inv_fitted(y)
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
