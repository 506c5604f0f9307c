"""erf_inv and digamma as compositions of kernel-IR operations (element rules).

Neither has a C library function, and each has a short, accurate construction from functions
that renderers do have:

- erf_inv: Winitzki's closed-form guess (relative error about 2e-3), then Halley steps on
  erf(x) = y, each of which cubes the error. For |y| > 1/2 the residual is taken through erfc
  and 1 - |y| (exact there), so it keeps its precision as y approaches 1.
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
from funcgrad.core import PRIMITIVES
from funcgrad.lax._special import _NEG_ROOT, _NEG_ROOT_TAYLOR, _POS_ROOT, _POS_ROOT_TAYLOR


def _c(value: float, like: Expr) -> Expr:
    return K.const(value, like.dtype)


def _div(a: Expr, b: Expr) -> Expr:
    return K.binary("div", a, b)


def erf_inv(y: Expr) -> Expr:
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
