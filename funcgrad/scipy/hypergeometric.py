"""Kummer's confluent hypergeometric function 1F1(a; b; x), hyp1f1.

It computes in float64 whatever its inputs' dtype and returns their promoted dtype.
"""

from __future__ import annotations

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.scipy.gamma_differences import expm1_over, log_gamma_slope
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
        small = ~(fnp.abs(term) > 1e-17 * fnp.abs(total))  # (NaN is done)
        return rounds + 1, term, total, done | small

    ones = fnp.ones_like(y)
    init = (0, ones, ones, fnp.zeros_like(y, bool))
    return _iterate(step, init, 3)[2]


def _asymptotic(a, b, y, shift):
    """Gamma(b) / Gamma(a) e^(y + shift) y^(a - b) sum_k (b - a)_k (1 - a)_k / (k! y^k) for
    large y, the sum cut where its terms stop falling (the factor e^shift taken in the
    exponent, where e^y alone may overflow)."""
    term, total = fnp.ones_like(y), fnp.ones_like(y)
    for k in range(_ASYMPTOTIC_TERMS):
        following = term * (b - a + k) * (1 - a + k) / ((k + 1) * y)
        term = fnp.where(fnp.abs(following) < fnp.abs(term), following, 0.0)
        total = total + term
    sign = _gamma_sign(b) * _gamma_sign(a)
    log_scale = lax.lgamma(b) - lax.lgamma(a) + (y + shift) + (a - b) * fnp.log(y)
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
    # (for x < 0 the e^x of the transformation cancels the expansion's e^-x exactly: taken
    # apart, both overflowed past x = -709, giving NaN)
    shift = fnp.where(negative & ~in_series, x, 0.0)
    asymptotic = _asymptotic(fnp.where(in_series, 1.0, a), b, far, shift)
    return fnp.where(
        in_series & negative, fnp.exp(x) * series, fnp.where(in_series, series, asymptotic)
    )


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

# Up to this w (after Pfaff's transformation into [0, 1)) the series in w; beyond, series in
# 1 - w: A&S 15.3.6 where c - a - b is further than _NEAR_WHOLE from a whole number, nearer
# _gauss_near_one, up to |c - a - b| of _MOST_WHOLE_ORDER + 1/2 (beyond, the series in w,
# whose terms then fall like k^-31).
_GAUSS_SERIES_UP_TO = 0.9
_NEAR_WHOLE = 0.05
_MOST_WHOLE_ORDER = 30


def _gauss_series(a, b, c, w):
    """sum_k (a)_k (b)_k / (c)_k w^k / k! for 0 <= w < 1, summed until its terms fall below
    1e-17 of the sum (at most 5000 terms)."""

    def step(carry):
        rounds, term, total, done = carry
        k = lax.convert_element_type(rounds, term.dtype)
        # (a c + k of 0 is met only after the series has ended, or at a pole of c the
        # caller answers itself)
        pole_free = fnp.where(c + k == 0, 1.0, c + k)
        term = term * (a + k) * (b + k) / (pole_free * (k + 1)) * w
        total = total + term
        small = ~(fnp.abs(term) > 1e-17 * fnp.abs(total))  # (NaN is done)
        return rounds + 1, term, total, done | small

    ones = fnp.ones_like(w)
    return _iterate(step, (0, ones, ones, fnp.zeros_like(w, bool)), 3)[2]


def _gamma(x):
    return _gamma_sign(x) * fnp.exp(lax.lgamma(x))


def _gamma_ratio(c, p, q):
    """Gamma(c) / (Gamma(p) Gamma(q)), 0 where p or q is a pole."""
    sign = _gamma_sign(c) * _gamma_sign(p) * _gamma_sign(q)
    return sign * fnp.exp(lax.lgamma(c) - lax.lgamma(p) - lax.lgamma(q))


def _sum_with_error(x, y):
    """x + y rounded, and the rounding error (Knuth's two-sum)."""
    total = x + y
    y_part = total - x
    x_part = total - y_part
    return total, (x - x_part) + (y - y_part)


def _gauss_near_one(a, b, c, v):
    """2F1(a, b; c; 1 - v) for v <= 0.1, where c - a - b = m + e with m a whole number
    from 0 to _MOST_WHOLE_ORDER and |e| <= 1/2 (taken for |e| <= _NEAR_WHOLE), and a, b,
    c - a and c - b do not end the series.

    The transformation into series in v (Abramowitz and Stegun 15.3.6) has two terms whose
    gamma factors have poles at e = 0; in their sum the poles cancel, and A&S 15.3.11 is
    the limit. Here the sum is written for every e without the cancellation: the first m
    terms of the first series stand alone, and the remaining terms of the two series pair
    up as (pi e / sin(pi e)) d_n v^(m + n), where d_n = (E_n - F_n) / e is a divided
    difference of two products of gamma functions that agree at e = 0. d_0 is taken from
    ln Gamma's divided differences (log_gamma_slope); the later d_n follow from E's and
    F's term ratios, whose difference is a polynomial in e divisible by e."""
    s, low = _sum_with_error(c, -a)
    s, lower = _sum_with_error(s, -b)
    m = fnp.round(s)
    e = (s - m) + (low + lower)  # c - a - b - m rounded once, as the terms below take it
    s = m + e
    # ln Gamma's divided differences at a + m, b + m, m + 1 and (over -e) 1, in one pass
    slopes, signs = log_gamma_slope(
        fnp.stack([a + m, b + m, m + 1, fnp.ones_like(e)]), fnp.stack([e, e, e, -e])
    )
    slope_a, slope_b, slope_m, one_slope = slopes
    sign = signs[0] * signs[1]
    # Gamma(c) / (Gamma(c - b) Gamma(c - a)), from Gamma(a + m) and Gamma(b + m) and the
    # slopes: near a pole of c - a or c - b these cancel the terms' own, computed alike
    front = _gamma_ratio(c, a + m, b + m) * sign * fnp.exp(-e * (slope_a + slope_b))

    def finite_step(k, carry):
        finite, term, rising = carry  # (rising: (a)_m (b)_m)
        k = lax.convert_element_type(k, v.dtype)
        taken = k < m
        finite = finite + fnp.where(taken, term, 0.0)
        pole_free = fnp.where(k + 1 < m, 1 - s + k, 1.0)
        rising = fnp.where(taken, rising * (a + k) * (b + k), rising)
        return finite, term * (a + k) * (b + k) / (pole_free * (k + 1)) * v, rising

    ones = fnp.ones_like(v)
    init = (fnp.zeros_like(v), ones, ones)
    finite, _, rising = lax.fori_loop(0, _MOST_WHOLE_ORDER, finite_step, init)
    finite = finite * fnp.exp(lax.lgamma(fnp.where(m >= 1, s, 1.0))) * front

    factorial_m = fnp.exp(lax.lgamma(m + 1))
    # d_0 = (1 / Gamma(1 - e) - v^e Gamma(a+m+e) Gamma(b+m+e) m! / (Gamma(a+m) Gamma(b+m)
    # Gamma(m+1+e))) / (e m!), each part written as expm1(e t) / e
    first = expm1_over(e * one_slope) * one_slope
    slope = fnp.log(v) + slope_a + slope_b - slope_m
    ratio = sign * fnp.exp(e * slope)  # v^e Gamma(a+m+e) ... / (Gamma(a+m) ...), F_0 m!
    safe_e = fnp.where(e == 0, 1.0, e)
    second = fnp.where(sign > 0, expm1_over(e * slope) * slope, (ratio - 1) / safe_e)
    init = (0, (first - second) / factorial_m, ratio / factorial_m, fnp.ones_like(v))
    init = init + ((first - second) / factorial_m, fnp.zeros_like(v, bool))

    def step(carry):
        rounds, d, f, power, total, done = carry
        n = lax.convert_element_type(rounds, v.dtype)
        p, q, r, t = a + m + n, b + m + n, m + n + 1, n + 1
        # (E_{n+1} / E_n - F_{n+1} / F_n) / e, its numerator divided by e exactly
        numerator = p * q * t + r * p * q - r * t * (p + q) + e * (r * (p + q) - r * t) + r * e * e
        d = p * q / ((t - e) * r) * d + f * numerator / ((t - e) * r * (r + e) * t)
        f = f * (p + e) * (q + e) / ((r + e) * t)
        power = power * v
        total = total + power * d
        small = ~(fnp.abs(power * d) > 1e-17 * fnp.abs(total))  # (NaN is done)
        return rounds + 1, d, f, power, total, done | small

    paired = _iterate(step, init, 5)[4]
    parity = 1 - 2 * fnp.remainder(m, 2)
    tail = front * parity * rising * v**m / fnp.sinc(e) * paired
    return finite + tail


def _gauss_unit_interval(a, b, c, w, v):
    """2F1(a, b; c; w) for 0 <= w < 1, v = 1 - w given unrounded.

    Up to w = 0.9, and wherever a or b ends the series, the series in w. Above, series in
    v: A&S 15.3.6 where c - a - b is more than _NEAR_WHOLE from a whole number (or where
    c - a or c - b ends the series and leaves one of its terms); nearer, _gauss_near_one,
    after Euler's transformation 2F1(a, b; c; w) = v^(c - a - b) 2F1(c - a, c - b; c; w)
    where c - a - b rounds below 0; beyond |c - a - b| = _MOST_WHOLE_ORDER + 1/2 the series
    in w after that transformation, whose terms then fall fast."""
    a, b, c, w, v = fnp.broadcast_arrays(a, b, c, w, v)
    s = c - a - b

    def ends(p):
        return (p <= 0) & (fnp.floor(p) == p)

    ends_euler = ends(c - a) | ends(c - b)
    near = (w > _GAUSS_SERIES_UP_TO) & ~(ends(a) | ends(b))
    two_term = near & ((fnp.abs(s - fnp.round(s)) > _NEAR_WHOLE) | ends_euler)
    rest = near & ~two_term
    paired = rest & (fnp.abs(s) <= _MOST_WHOLE_ORDER + 0.5)
    flipped = rest & (fnp.round(s) < 0)
    fa, fb = fnp.where(flipped, c - a, a), fnp.where(flipped, c - b, b)
    # (parameters made safe where a formula is not taken)
    ta, tb = fnp.where(two_term, a, 0.25), fnp.where(two_term, b, 0.5)
    tc, tv = fnp.where(two_term, c, 2.0), fnp.where(two_term, v, 0.25)
    ts = tc - ta - tb
    # the series in w and 15.3.6's two series in v, summed in one loop
    series = _gauss_series(
        fnp.stack([fa, ta, tc - ta]),
        fnp.stack([fb, tb, tc - tb]),
        fnp.stack([c, 1 - ts, 1 + ts]),
        fnp.stack([fnp.where(paired | two_term, 0.0, w), tv, tv]),
    )
    # (where c - a or c - b ends, 1 / Gamma of it is 0 and only the second term remains;
    # c - a - b is then not a whole number >= 0, or a or b would end)
    first = _gamma_ratio(tc, tc - ta, tc - tb) * _gamma(ts) * series[1]
    first = fnp.where(ends_euler, 0.0, first)
    second = _gamma_ratio(tc, ta, tb) * _gamma(-ts) * tv**ts * series[2]
    pa, pb = fnp.where(paired, fa, 0.25), fnp.where(paired, fb, 0.5)
    pc, pv = fnp.where(paired, c, 2.0), fnp.where(paired, v, 0.05)
    value = fnp.where(paired, _gauss_near_one(pa, pb, pc, pv), series[0])
    value = fnp.where(flipped, v ** fnp.where(flipped, s, 0.0), 1.0) * value
    return fnp.where(two_term, first + second, value)


def _ends(p):
    """Where the rising factorials (p)_k reach 0: p a whole number <= 0."""
    return (p <= 0) & (fnp.floor(p) == p)


def _polynomial(a, b, c, x, degree):
    """2F1 where a or b is -degree and the series ends there, before any pole of c: its
    terms summed through x^degree, for any real x; at x = 1 by Chu and Vandermonde's product
    (c - b)_m / (c)_m (b taken as the parameter that does not end it first), which keeps
    its relative precision where the sum cancels (2F1(-3, 2.5; 0.5; 1) is exactly 0)."""
    other = fnp.where(_ends(a) & (-a == degree), b, a)

    def step(carry):
        rounds, term, total, product, done = carry
        k = lax.convert_element_type(rounds, term.dtype)
        taken = k < degree
        # (c + k of 0 is not met before degree: the caller takes only series that end first)
        safe_c = fnp.where(taken, c + k, 1.0)
        term = fnp.where(taken, term * (a + k) * (b + k) / (safe_c * (k + 1)) * x, 0.0)
        product = fnp.where(taken, product * (c - other + k) / safe_c, product)
        return rounds + 1, term, total + term, product, ~(k + 1 < degree)

    ones = fnp.ones_like(x)
    init = (0, ones, ones, ones, degree <= 0)
    _, _, total, product, _ = _iterate(step, init, 4)
    return fnp.where(x == 1, product, total)


def _gauss(a, b, c, x):
    negative = x < 0
    # Pfaff: 2F1(a, b; c; x) = (1 - x)^-a 2F1(a, c - b; c; x / (x - 1)) for x < 0
    w = fnp.where(negative, x / (x - 1), x)
    inside = (w >= 0) & (w < 1)
    v = fnp.where(negative, 1 / (1 - x), 1 - x)  # 1 - w, without its rounding
    inner_b = fnp.where(negative, c - b, b)
    value = _gauss_unit_interval(
        a, inner_b, c, fnp.where(inside, w, 0.0), fnp.where(inside, v, 1.0)
    )
    value = fnp.where(negative, (1 - x) ** -a * value, value)
    s = c - a - b
    at_one = fnp.where(s > 0, _gamma(c) * _gamma(fnp.where(s > 0, s, 1.0)), fnp.inf)
    at_one = at_one / fnp.where(s > 0, _gamma(c - a) * _gamma(c - b), 1.0)
    value = fnp.where(x == 1, at_one, fnp.where(x > 1, fnp.inf, value))
    pole = _ends(c)
    value = fnp.where(pole, fnp.inf, value)
    # A series that ends (a or b a whole number -m <= 0) before c's pole, if any, is a
    # polynomial of degree m: finite for every x, at x = 1 where c - a - b <= 0 too, and
    # at c = -n >= -m
    degree = fnp.minimum(fnp.where(_ends(a), -a, fnp.inf), fnp.where(_ends(b), -b, fnp.inf))
    polynomial = (degree < fnp.inf) & (~pole | (degree <= -c))
    direct = polynomial & (pole | (x >= 1))
    safe = [fnp.where(direct, p, 0.0) for p in (a, b, x, degree)]
    at_direct = _polynomial(safe[0], safe[1], fnp.where(direct, c, 1.0), safe[2], safe[3])
    return fnp.where(direct, at_direct, value)


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
    JAX's; Gauss's formula at x = 1). Where a or b is a whole number -m <= 0 the series ends
    at x^m, and is that polynomial for every real x, and for c = -n with n >= m too (as
    SciPy's and mpmath's; JAX's gives inf or NaN there).

    For x < 0 Pfaff's transformation maps x into [0, 1); there the series up to 0.9, above
    series in 1 - x: the transformation of Abramowitz and Stegun 15.3.6, and where
    c - a - b is within 0.05 of a whole number (15.3.6's terms then cancel; 15.3.10-12, its
    logarithmic limits, at whole numbers) a form of it without the cancellation, valid on
    both sides of the whole number. Within 2e-11 relative of mpmath for a in [-3.5, 4.6],
    b in [-1.2, 5], c in [0.5, 31] and x from -1e8 to 1 - 1e-12, whole c - a - b and those
    within 1e-12 of one included (about 1e-15 where a, b and c - a - b are small). Where c
    is negative, too, as far as the parameters and Pfaff's c - b keep their digits (not,
    say, where x is below -1e3 and c - a rounds to within 1e-16 of a pole).
    The derivative in x is (a b / c) 2F1(a + 1, b + 1; c + 1; x); in a, b and
    c it is taken by central differences in float64 (about 1e-10 relative)."""
    (a, b, c, x), kind = wide("hyp2f1", a, b, c, x)
    return narrow(_hyp2f1(a, b, c, x), kind)
