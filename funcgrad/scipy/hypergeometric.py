"""Kummer's confluent hypergeometric function 1F1(a; b; x), hyp1f1.

It computes in float64 whatever its inputs' dtype and returns their promoted dtype.
"""

from __future__ import annotations

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.scipy.series import _central_difference, _iterate
from funcgrad.transforms.custom_derivatives import custom_jvp

# Up to this |x| the power series (its terms summed until below 1e-17 of the sum, at most
# 5000 of them), beyond the asymptotic expansion of the exponentially growing part.
_SERIES_BELOW = 200.0
_ASYMPTOTIC_TERMS = 60


def _power_series(a, b, y):
    """sum_k (a)_k / (b)_k y^k / k!, for y >= 0."""

    def step(carry):
        rounds, term, total, done = carry
        k = lax.convert_element_type(rounds, term.dtype)
        term = term * (a + k) / (b + k) * y / (k + 1)
        total = total + term
        small = fnp.abs(term) <= 1e-17 * fnp.abs(total)
        return rounds + 1, term, total, done | small

    ones = fnp.ones_like(y)
    init = (0, ones, ones, fnp.zeros_like(y, bool))
    return _iterate(step, init, 3)[2]


def _asymptotic(a, b, y):
    """Gamma(b) / Gamma(a) e^y y^(a - b) sum_k (b - a)_k (1 - a)_k / (k! y^k) for large y,
    the sum cut where its terms stop falling."""
    term, total = fnp.ones_like(y), fnp.ones_like(y)
    for k in range(_ASYMPTOTIC_TERMS):
        following = term * (b - a + k) * (1 - a + k) / ((k + 1) * y)
        term = fnp.where(fnp.abs(following) < fnp.abs(term), following, 0.0)
        total = total + term
    sign = _gamma_sign(b) * _gamma_sign(a)
    log_scale = lax.lgamma(b) - lax.lgamma(a) + y + (a - b) * fnp.log(y)
    return sign * fnp.exp(log_scale) * total


def _gamma_sign(x):
    negative = (x < 0) & (fnp.remainder(fnp.floor(x), 2) != 0)
    return fnp.where(negative, -1.0, 1.0)


def _kummer(a, b, x):
    """1F1 by Kummer's transformation e^x 1F1(b - a; b; -x) for x < 0, so that the series or
    expansion is taken at a positive argument."""
    negative = x < 0
    a = fnp.where(negative, b - a, a)
    y = fnp.abs(x)
    polynomial = (a <= 0) & (fnp.floor(a) == a)
    in_series = (y < _SERIES_BELOW) | polynomial
    series = _power_series(a, b, fnp.where(in_series, y, 0.0))
    far = fnp.where(in_series, _SERIES_BELOW, y)
    asymptotic = _asymptotic(fnp.where(in_series, 1.0, a), b, far)
    value = fnp.where(in_series, series, asymptotic)
    return fnp.where(negative, fnp.exp(x) * value, value)


@custom_jvp
def _hyp1f1(a, b, x):
    pole = (b <= 0) & (fnp.floor(b) == b)
    safe_b = fnp.where(pole, 1.0, b)
    return fnp.where(pole, fnp.nan, _kummer(a, safe_b, x))


@_hyp1f1.defjvp
def _hyp1f1_jvp(primals, tangents):
    a, b, x = primals
    ta, tb, tx = tangents
    value = _hyp1f1(a, b, x)
    dx = a / b * _hyp1f1(a + 1, b + 1, x)
    da = _central_difference(lambda s: _kummer(s, b, x), a)
    db = _central_difference(lambda s: _kummer(a, s, x), b)
    return value, da * ta + db * tb + dx * tx


def hyp1f1(a: ArrayLike, b: ArrayLike, x: ArrayLike) -> Array:
    """Kummer's confluent hypergeometric function 1F1(a; b; x) = sum_k (a)_k / (b)_k x^k / k!
    (NaN where b is 0 or a negative integer).

    For x < 0 by Kummer's transformation e^x 1F1(b - a; b; -x); then for |x| < 200 (or where
    the series ends, a a non-positive integer) its power series, beyond the asymptotic
    expansion of its exponential part. Within 1e-12 relative of mpmath's for a in [-5, 7],
    b in [0.5, 10] and |x| up to 300 (2e-14 where the terms all have one sign; nearer a
    zero of the function, relative precision is lost to the terms' cancellation). The
    derivative in x is (a / b) 1F1(a + 1; b + 1; x); in a and b it is taken by central
    differences in float64 (about 1e-10 relative), as for gammainc's shape parameter."""
    (a, b, x), kind = wide("hyp1f1", a, b, x)
    return narrow(_hyp1f1(a, b, x), kind)


# -- Gauss's hypergeometric function --------------------------------------------------------

# Beyond this w (after Pfaff's transformation into [0, 1)) the series in 1 - w, unless
# c - a - b is within this of a whole number, where its two terms would cancel.
_GAUSS_SERIES_UP_TO = 0.5
_NEAR_WHOLE = 0.05


def _gauss_series(a, b, c, w):
    """sum_k (a)_k (b)_k / (c)_k w^k / k! for 0 <= w < 1, summed until its terms fall below
    1e-17 of the sum (at most 5000 terms)."""

    def step(carry):
        rounds, term, total, done = carry
        k = lax.convert_element_type(rounds, term.dtype)
        term = term * (a + k) * (b + k) / ((c + k) * (k + 1)) * w
        total = total + term
        small = fnp.abs(term) <= 1e-17 * fnp.abs(total)
        return rounds + 1, term, total, done | small

    ones = fnp.ones_like(w)
    return _iterate(step, (0, ones, ones, fnp.zeros_like(w, bool)), 3)[2]


def _gamma(x):
    return _gamma_sign(x) * fnp.exp(lax.lgamma(x))


def _gauss_unit_interval(a, b, c, w):
    """2F1(a, b; c; w) for 0 <= w < 1: its series up to 1/2 (and wherever it ends or the
    transformation below cancels), above Abramowitz and Stegun 15.3.6 in 1 - w."""
    s = c - a - b
    whole_s = fnp.abs(s - fnp.round(s)) < _NEAR_WHOLE
    ends = ((a <= 0) & (fnp.floor(a) == a)) | ((b <= 0) & (fnp.floor(b) == b))
    direct = (w <= _GAUSS_SERIES_UP_TO) | whole_s | ends
    series = _gauss_series(a, b, c, fnp.where(direct, w, 0.0))
    # (parameters made safe where the transformation is not taken)
    ta, tb = fnp.where(direct, 0.25, a), fnp.where(direct, 0.5, b)
    tc, tw = fnp.where(direct, 2.0, c), fnp.where(direct, 0.75, w)
    ts = tc - ta - tb
    v = 1 - tw
    first = _gamma(tc) * _gamma(ts) / (_gamma(tc - ta) * _gamma(tc - tb))
    second = _gamma(tc) * _gamma(-ts) / (_gamma(ta) * _gamma(tb))
    transformed = first * _gauss_series(ta, tb, 1 - ts, v) + second * v**ts * _gauss_series(
        tc - ta, tc - tb, 1 + ts, v
    )
    return fnp.where(direct, series, transformed)


def _gauss(a, b, c, x):
    negative = x < 0
    # Pfaff: 2F1(a, b; c; x) = (1 - x)^-a 2F1(a, c - b; c; x / (x - 1)) for x < 0
    w = fnp.where(negative, x / (x - 1), x)
    inner_b = fnp.where(negative, c - b, b)
    value = _gauss_unit_interval(a, inner_b, c, fnp.where((w >= 0) & (w < 1), w, 0.0))
    value = fnp.where(negative, (1 - x) ** -a * value, value)
    s = c - a - b
    at_one = fnp.where(s > 0, _gamma(c) * _gamma(fnp.where(s > 0, s, 1.0)), fnp.inf)
    at_one = at_one / fnp.where(s > 0, _gamma(c - a) * _gamma(c - b), 1.0)
    value = fnp.where(x == 1, at_one, fnp.where(x > 1, fnp.inf, value))
    pole = (c <= 0) & (fnp.floor(c) == c)
    return fnp.where(pole, fnp.inf, value)


@custom_jvp
def _hyp2f1(a, b, c, x):
    return _gauss(a, b, c, x)


@_hyp2f1.defjvp
def _hyp2f1_jvp(primals, tangents):
    a, b, c, x = primals
    ta, tb, tc, tx = tangents
    dx = a * b / c * _hyp2f1(a + 1, b + 1, c + 1, x)
    da = _central_difference(lambda s: _gauss(s, b, c, x), a)
    db = _central_difference(lambda s: _gauss(a, s, c, x), b)
    dc = _central_difference(lambda s: _gauss(a, b, s, x), c)
    return _hyp2f1(a, b, c, x), da * ta + db * tb + dc * tc + dx * tx


def hyp2f1(a: ArrayLike, b: ArrayLike, c: ArrayLike, x: ArrayLike) -> Array:
    """Gauss's hypergeometric function 2F1(a, b; c; x) = sum_k (a)_k (b)_k / (c)_k x^k / k!
    for real x <= 1 (inf beyond, and where c is 0 or a negative integer, as SciPy's and
    JAX's; Gauss's formula at x = 1).

    For x < 0 Pfaff's transformation maps x into [0, 1); there the series up to 1/2, above
    the transformation into series in 1 - x (Abramowitz and Stegun 15.3.6), except where
    c - a - b is within 0.05 of a whole number (the series then, capped at 5000 terms: it
    is then off near x = 1, by 0.1 relative at x = 0.999, where the transformation's
    logarithmic form is needed and missing). Elsewhere within 2e-11 relative of mpmath for
    a in [-3.5, 4.6], b in [-1.2, 5], c in [0.5, 7.9], x in [-20, 0.999].
    The derivative in x is (a b / c) 2F1(a + 1, b + 1; c + 1; x); in a, b and
    c it is taken by central differences in float64 (about 1e-10 relative)."""
    (a, b, c, x), kind = wide("hyp2f1", a, b, c, x)
    return narrow(_hyp2f1(a, b, c, x), kind)
