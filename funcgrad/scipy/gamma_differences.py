"""Divided differences of ln Gamma, (ln Gamma(x + d) - ln Gamma(x)) / d, computed without the
cancellation of subtracting two lgamma values: digamma in the limit d = 0, and ln Gamma(1 + a)
to full relative precision for small a (where 1 + a would round away a's digits). Gauss's
hypergeometric function pairs the terms of its transformation near x = 1 with them, and the
incomplete gamma function takes Gamma(1 + a) - 1 from them for small shapes.
"""

from __future__ import annotations

import math
from fractions import Fraction

from funcgrad import lax
from funcgrad import numpy as fnp

# Stirling's series' coefficients B_2k / (2k (2k - 1)), for ln Gamma at arguments >= 10.
_STIRLING = [
    float(Fraction(n, d))
    for n, d in [
        (1, 12),
        (-1, 360),
        (1, 1260),
        (-1, 1680),
        (1, 1188),
        (-691, 360360),
        (1, 156),
        (-3617, 122400),
    ]
]
_STIRLING_FROM = 10


def log1p_over(u):
    """log1p(u) / u, 1 at u = 0."""
    zero = u == 0
    return fnp.where(zero, 1.0, fnp.log1p(u) / fnp.where(zero, 1.0, u))


def expm1_over(u):
    """expm1(u) / u, 1 at u = 0."""
    zero = u == 0
    return fnp.where(zero, 1.0, fnp.expm1(u) / fnp.where(zero, 1.0, u))


def log_gamma_slope_right(x, d):
    """ln(Gamma(x + d) / Gamma(x)) / d for x > 0, x + d > 0 and |d| <= 1/2: the recurrence
    carries x past _STIRLING_FROM, where Stirling's series is differenced term by term, each
    difference written with log1p and expm1 so that none cancels as d goes to 0."""
    total = fnp.zeros_like(x + d)
    for j in range(_STIRLING_FROM):
        total = total - log1p_over(d / (x + j)) / (x + j)
    y = x + _STIRLING_FROM
    slope = log1p_over(d / y)  # log1p(d / y) / (d / y)
    total = total + (y - 0.5) / y * slope + fnp.log(y + d) - 1
    for k, coefficient in enumerate(_STIRLING, start=1):
        power = (1 - 2 * k) * slope / y  # d/dd of (1 - 2k) log(y + d), differenced
        total = total + coefficient * y ** (1 - 2 * k) * expm1_over(d * power) * power
    return total


def log_gamma_slope(x, d):
    """ln|Gamma(x + d) / Gamma(x)| / d for |d| <= 1/2 (digamma(x) at d = 0), without the
    cancellation of differencing lgamma, and the ratio's sign. Where x or x + d is not
    positive by the reflection formula (then 1 - x and 1 - x - d are above 1/2), where
    sin(pi (x + d)) / sin(pi x) = 1 + z."""
    left = (x <= 0) | (x + d <= 0)
    # (cot(pi x) from x less its nearest whole number, exact, so that it keeps its digits
    # near the poles)
    reduced = fnp.where(left, x - fnp.round(x), 0.25)
    z_over_d = fnp.pi / fnp.tan(fnp.pi * reduced) * fnp.sinc(d) - (
        fnp.pi * fnp.sin(fnp.pi * d / 2) * fnp.sinc(d / 2)
    )
    z = d * z_over_d
    near = fnp.abs(z) < 0.5
    safe_d = fnp.where(d == 0, 1.0, d)
    log_sine_ratio = fnp.where(
        near, log1p_over(fnp.where(near, z, 0.0)) * z_over_d, fnp.log(fnp.abs(1 + z)) / safe_d
    )
    right = log_gamma_slope_right(fnp.where(left, 1 - x, x), fnp.where(left, -d, d))
    sign = fnp.where(left & (z < -1), -1.0, 1.0)
    return fnp.where(left, right - log_sine_ratio, right), sign


def log_gamma_1p(a):
    """ln Gamma(1 + a) for |a| <= 1/2, to a's own relative precision."""
    return a * log_gamma_slope_right(fnp.ones_like(a), a)


def stirling_remainder(x):
    """ln Gamma(x) - ((x - 1/2) ln x - x + ln(2 pi) / 2), for x >= _STIRLING_FROM."""
    total = fnp.zeros_like(x)
    for k, coefficient in enumerate(_STIRLING, start=1):
        total = total + coefficient * x ** (1 - 2 * k)
    return total


def log_beta(a, b):
    """ln|B(a, b)| = ln|Gamma(a)| + ln|Gamma(b)| - ln|Gamma(a + b)|, without subtracting the
    lgamma of a large argument from another: with p <= q, where q and p + q are both from
    _STIRLING_FROM on, the lgamma difference of q and p + q is written by Stirling's series
    around log1p(-p / (p + q)) (lgamma(1e15) - lgamma(1e15 + 3) kept 2 digits; betaln(1e300, 1)
    was 0, not -690.8; betaln(-30.5, 1e30) was 0, not 2031.6), and from p = _STIRLING_FROM on
    lgamma(p) too."""
    p, q = fnp.minimum(a, b), fnp.maximum(a, b)
    big_q = (p + q >= _STIRLING_FROM) & fnp.isfinite(q) & fnp.isfinite(p)
    big_p = big_q & (p >= _STIRLING_FROM)
    safe_p = fnp.where(big_q, p, 1.0)
    safe_q = fnp.where(big_q, q, _STIRLING_FROM)
    total = safe_p + safe_q
    shrink = fnp.log1p(-safe_p / total)  # ln(q / (p + q))
    # lgamma(q) - lgamma(p + q), and lgamma(p) by its Stirling form where p is large too
    difference = stirling_remainder(safe_q) - stirling_remainder(total)
    difference = difference + (safe_q - 0.5) * shrink - safe_p * fnp.log(total) + safe_p
    stirling_p = fnp.where(big_p, safe_p, _STIRLING_FROM)
    stirling_p = (
        (stirling_p - 0.5) * fnp.log(stirling_p)
        - stirling_p
        + 0.5 * math.log(2 * math.pi)
        + stirling_remainder(stirling_p)
    )
    large = fnp.where(big_p, stirling_p, lax.lgamma(safe_p)) + difference
    plain = lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)
    beyond = (p > 0) & fnp.isinf(q)
    return fnp.where(big_q, large, fnp.where(beyond, -fnp.inf, plain))
