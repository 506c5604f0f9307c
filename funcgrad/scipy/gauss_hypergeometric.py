"""Gauss's hypergeometric function 2F1(a, b; c; x), hyp2f1, for real x <= 1.

Its series converges for |x| < 1, but for large parameters its terms can be astronomically
larger than its sum, so no single formula serves. Each value is computed by every one of
the transformations that applies where x lies, each with a bound on its error
(hypergeometric_series), and the one with the smallest bound is taken; where even that is
above _TOLERANCE the answer is NaN rather than a number with too few correct digits.

- |x| <= 0.9: the series in x, and Euler's transformation (1 - x)^(c - a - b)
  2F1(c - a, c - b; c; x), whose terms keep one sign where those in x alternate
  (2F1(2, -366; 0.12; 0.9) = 1.5e-5 from terms of 1e60 in x).
- x < 0 with x / (x - 1) <= 0.9: Pfaff's two transformations (1 - x)^-a 2F1(a, c - b; c;
  x / (x - 1)) and the same with a and b exchanged.
- 1/2 <= x < 1: the series in 1 - x (Abramowitz and Stegun 15.3.6); x <= -1: the series in
  1 / (1 - x) (Pfaff's transformation, then 15.3.6). Where their two terms' gamma factors
  have nearby poles (c - a - b, or b - a, within 0.05 of a whole number) a form of the sum
  written without the cancellation (_near_one).
- a or b a whole number -m <= 0: the series ends at x^m and is that polynomial for every
  real x, and for c = -n with n >= m too; at x = 1 Chu and Vandermonde's product.
"""

from __future__ import annotations

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.scipy import hypergeometric_series as hs
from funcgrad.scipy.gamma_differences import expm1_over, log_gamma_slope
from funcgrad.scipy.series import _central_difference
from funcgrad.transforms.custom_derivatives import custom_jvp

_SERIES_UP_TO = 0.75  # |w| of a series in x or x / (x - 1), at first
_SERIES_FURTHEST = 0.95  # and where the other forms fall short
_NEAR_ONE_FROM = 0.5  # x from which the series in 1 - x; 1 / (1 - x) from x <= -1
_NEAR_WHOLE = 0.05
# _near_one's sensitivity to its parameters, by moving each by this (times its size), and
# counting their factors' rounding as a move of up to this many terms' worth
_SENSITIVITY_STEP = 1e-9
_SENSITIVITY_TERMS = 50.0
_MOST_WHOLE_ORDER = 30
# The largest bound on the relative error that is answered with a value, not NaN.
TOLERANCE = 1e-11

_U = hs.ROUND_OFF


def _near_one(a, b, c, v, m, e):
    """2F1(a, b; c; 1 - v) for v <= 1/2 where c - a - b = m + e, m a whole number from 0 to
    _MOST_WHOLE_ORDER and |e| <= _NEAR_WHOLE (given apart, exact), and a, b, c - a and c - b
    do not end the series; a and b pairs (hs.exact_sum), their low parts entering every
    factor (where the sum cancels, the value is that sensitive to them); as a Part.

    The transformation into series in v (Abramowitz and Stegun 15.3.6) has two terms whose
    gamma factors have poles at e = 0; in their sum the poles cancel, and A&S 15.3.11 is
    the limit. Here the sum is written for every e without the cancellation: the first m
    terms of the first series stand alone, and the remaining terms of the two series pair
    up as (pi e / sin(pi e)) d_n v^(m + n), where d_n = (E_n - F_n) / e is a divided
    difference of two products of gamma functions that agree at e = 0. d_0 is taken from
    ln Gamma's divided differences (log_gamma_slope); the later d_n follow from E's and
    F's term ratios, whose difference is a polynomial in e divisible by e."""
    s = m + e
    (a, a_low), (b, b_low) = a, b

    def top(p, low, k):
        """p + k, k a whole number, with p's low part."""
        return (p + k) + low

    # ln Gamma's divided differences at a + m, b + m, m + 1 and (over -e) 1, in one pass
    slopes, signs = log_gamma_slope(
        fnp.stack([top(a, a_low, m), top(b, b_low, m), m + 1, fnp.ones_like(e)]),
        fnp.stack([e, e, e, -e]),
    )
    slope_a, slope_b, slope_m, one_slope = slopes
    sign = signs[0] * signs[1]
    # Gamma(c) / (Gamma(c - b) Gamma(c - a)), from Gamma(a + m) and Gamma(b + m) and the
    # slopes: near a pole of c - a or c - b these cancel the terms' own, computed alike
    a_m, b_m = hs.exact_sum(a, m), hs.exact_sum(b, m)
    log_front, front_sign, front_error, _ = hs.log_gamma_ratio(
        [(c, fnp.zeros_like(c))], [(a_m[0], a_m[1] + a_low), (b_m[0], b_m[1] + b_low)]
    )
    log_front = log_front - e * (slope_a + slope_b)
    front_sign = front_sign * sign

    def finite_step(k, carry):
        finite, size, term, rising = carry  # (rising: (a)_m (b)_m)
        k = lax.convert_element_type(k, v.dtype)
        taken = k < m
        finite = finite + fnp.where(taken, term, 0.0)
        size = size + fnp.where(taken, (k + 1) * fnp.abs(term), 0.0)
        pole_free = fnp.where(k + 1 < m, 1 - s + k, 1.0)
        factors = top(a, a_low, k) * top(b, b_low, k)
        rising = fnp.where(taken, rising * factors, rising)
        return finite, size, term * factors / (pole_free * (k + 1)) * v, rising

    ones, zeros = fnp.ones_like(v), fnp.zeros_like(v)
    init = (zeros, zeros, ones, ones)
    finite, finite_size, _, rising = lax.fori_loop(0, _MOST_WHOLE_ORDER, finite_step, init)
    gamma_s = fnp.exp(lax.lgamma(fnp.where(m >= 1, s, 1.0)))
    finite, finite_size = finite * gamma_s, finite_size * gamma_s

    factorial_m = fnp.exp(lax.lgamma(m + 1))
    # d_0 = (1 / Gamma(1 - e) - v^e Gamma(a+m+e) Gamma(b+m+e) m! / (Gamma(a+m) Gamma(b+m)
    # Gamma(m+1+e))) / (e m!), each part written as expm1(e t) / e
    first = expm1_over(e * one_slope) * one_slope
    slope = fnp.log(v) + slope_a + slope_b - slope_m
    ratio = sign * fnp.exp(e * slope)  # v^e Gamma(a+m+e) ... / (Gamma(a+m) ...), F_0 m!
    safe_e = fnp.where(e == 0, 1.0, e)
    second = fnp.where(sign > 0, expm1_over(e * slope) * slope, (ratio - 1) / safe_e)
    d = (first - second) / factorial_m
    init = (0, d, ratio / factorial_m, ones, d, fnp.abs(d) + fnp.abs(ratio / factorial_m))
    init = init + (zeros, fnp.isnan(d))

    def step(carry):
        rounds, d, f, power, total, size, scale, done = carry
        n = lax.convert_element_type(rounds, v.dtype)
        p, q, r, t = top(a, a_low, m + n), top(b, b_low, m + n), m + n + 1, n + 1
        # (E_{n+1} / E_n - F_{n+1} / F_n) / e, its numerator divided by e exactly
        numerator = p * q * t + r * p * q - r * t * (p + q) + e * (r * (p + q) - r * t) + r * e * e
        d = p * q / ((t - e) * r) * d + f * numerator / ((t - e) * r * (r + e) * t)
        f = f * (p + e) * (q + e) / ((r + e) * t)
        power = power * v
        term = power * d
        total = fnp.where(done, total, total + term)
        size = fnp.where(done, size, size + (n + 2) * (fnp.abs(term) + fnp.abs(power * f)))
        large = size > hs.RESCALE_ABOVE
        d, f, total, size = hs.shrunk(large, d, f, total, size)
        scale = scale + large
        past = (p + 1 >= 0) & (q + 1 >= 0)
        bound = hs.later_ratio_bound([a + m + e, b + m + e], m + 1 + e, v, n + 1)
        tail = fnp.abs(term) * bound / (1 - bound)
        finished = past & (bound < 1) & (tail <= 1e-17 * fnp.abs(total) + 1e-19 * size)
        finished = finished | fnp.isnan(total)
        return rounds + 1, d, f, power, total, size, scale, done | finished

    def go_on(carry):
        return (~fnp.all(carry[-1])) & (carry[0] < hs.MAX_TERMS)

    _, _, _, _, paired, paired_size, scale, converged = lax.while_loop(go_on, step, init)
    parity = 1 - 2 * fnp.remainder(m, 2)
    tail_factor = parity * rising * v**m / fnp.sinc(e)
    # (the paired sum rescaled to the finite part's scale: it only grows past it)
    unscaled = fnp.exp(-scale * hs.LOG_RESCALE)
    mantissa = finite * unscaled + tail_factor * paired
    size = finite_size * unscaled + fnp.abs(tail_factor) * paired_size
    error = 2 * _U * size + (front_error + _U * fnp.abs(log_front)) * fnp.abs(mantissa)
    error = fnp.where(converged, error, fnp.inf)
    log = log_front + scale * hs.LOG_RESCALE
    return hs.Part(front_sign * mantissa, log, error)


def _polynomial_at_one(a, b, c, degree):
    """2F1 at x = 1 where a or b is -degree and the series ends before any pole of c: Chu and
    Vandermonde's product (c - b)_m / (c)_m (b taken as the parameter that does not end it
    first), which keeps its relative precision where the sum cancels (2F1(-3, 2.5; 0.5; 1)
    is exactly 0). Its factors have one sign each, so their rounding only adds up."""
    other = fnp.where(hs.ends(a) & (-a == degree), b, a)

    def step(carry):
        rounds, product, done = carry
        k = lax.convert_element_type(rounds, product.dtype)
        taken = k < degree
        safe_c = fnp.where(taken, c + k, 1.0)
        product = fnp.where(taken, product * (c - other + k) / safe_c, product)
        return rounds + 1, product, done | ~(k + 1 < degree)

    def go_on(carry):
        return (~fnp.all(carry[-1])) & (carry[0] < hs.MAX_TERMS)

    init = (0, fnp.ones_like(c), ~(degree > 0) | fnp.isnan(degree))
    _, product, done = lax.while_loop(go_on, step, init)
    return fnp.where(done, product, fnp.nan)


def _gauss_at_one(c, cma, cmb, s):
    """Gauss's sum Gamma(c) Gamma(s) / (Gamma(c - a) Gamma(c - b)), for s = c - a - b > 0
    (parameters as pairs, hs.exact_sum)."""
    positive = s[0] > 0
    s = (fnp.where(positive, s[0], 1.0), fnp.where(positive, s[1], 0.0))
    log, sign, error, _ = hs.log_gamma_ratio([c, s], [cma, cmb])
    mantissa = fnp.where(log == -fnp.inf, 0.0, sign)
    return hs.Part(mantissa, log, fnp.where(log == -fnp.inf, 0.0, error))


def _stacked_series(lanes):
    """The series of each lane (tops, bottom, w, w's slack, where it applies), parameters as
    pairs (hs.exact_sum), summed in one loop; a lane where it does not apply sums a series
    of one term, and reports an infinite error."""
    shape = lanes[0][2].shape

    def stacked(values):
        return fnp.stack([fnp.broadcast_to(value, shape) for value in values])

    def pair(index, safe):
        highs = [fnp.where(lane[-1], lane_pair[index][0], safe) for lane, lane_pair in lanes]
        return stacked(highs), stacked([lane_pair[index][1] for _, lane_pair in lanes])

    lanes = [(lane, (*lane[0], lane[1])) for lane in lanes]
    tops = [pair(0, 0.25), pair(1, 0.5)]
    bottom = pair(2, 2.0)
    w = stacked([fnp.where(lane[-1], lane[2], 0.0) for lane, _ in lanes])
    applies = stacked([lane[-1] for lane, _ in lanes])
    summed = hs.series(tops, bottom, w, stacked([lane[3] for lane, _ in lanes]))
    summed = summed._replace(converged=summed.converged & applies)
    return [hs.Sum(*(field[i] for field in summed)) for i in range(len(lanes))]


def _paired(a, b, c, x, cma, cmb, s, bma, near_one, far):
    """The _near_one forms, where c - a - b (for 1/2 <= x < 1) or b - a (for x <= -1, after
    Pfaff's transformation) is within _NEAR_WHOLE of a whole number m, |m| <= 30: for m < 0
    after Euler's transformation, which turns it to -m."""
    order = fnp.where(near_one, s[0], bma[0])
    low = fnp.where(near_one, s[1], bma[1])
    m = fnp.round(order)
    applies = (near_one | far) & (fnp.abs(order - m) <= _NEAR_WHOLE)
    applies = applies & (fnp.abs(m) <= _MOST_WHOLE_ORDER)
    flip = m < 0
    e = (order - m) + low
    # near 1: (a, b), flipped (c - a, c - b) times v^s; far: (1 - x)^-a (a, c - b), flipped
    # (1 - x)^-b (b, c - a); as pairs
    zero = fnp.zeros_like(x)

    def chosen(near_flip, near_kept, far_flip, far_kept):
        near = [fnp.where(flip, p, q) for p, q in zip(near_flip, near_kept)]
        far = [fnp.where(flip, p, q) for p, q in zip(far_flip, far_kept)]
        return [fnp.where(near_one, p, q) for p, q in zip(near, far)]

    first = chosen(cma, (a, zero), (b, zero), (a, zero))
    second = chosen(cmb, (b, zero), cma, cmb)
    v = fnp.where(near_one, 1 - x, 1 / (1 - x))
    log_one_minus_x = fnp.log1p(-fnp.where(applies, x, 0.0))
    log_factor = fnp.where(
        near_one,
        fnp.where(flip, (s[0] + s[1]) * log_one_minus_x, 0.0),
        -fnp.where(flip, b, a) * log_one_minus_x,
    )
    factor_error = 2 * _U * fnp.abs(log_factor)

    def compute():
        p = fnp.where(applies, first[0], 0.25)
        q = fnp.where(applies, second[0], 0.5)
        r = fnp.where(applies, c, 2.0)
        d = fnp.where(applies, fnp.where(flip, -e, e), 0.25)
        # and with each of p, q, r moved by a little (d with them: c - a - b = m + e kept)
        p_move, q_move, r_move = (
            _SENSITIVITY_STEP * fnp.maximum(fnp.abs(t), 1.0) for t in (p, q, r)
        )

        def four(t):
            return fnp.stack([t, t, t, t])

        lanes = _near_one(
            (fnp.stack([p, p + p_move, p, p]), four(fnp.where(applies, first[1], 0.0))),
            (fnp.stack([q, q, q + q_move, q]), four(fnp.where(applies, second[1], 0.0))),
            fnp.stack([r, r, r, r + r_move]),
            four(fnp.where(applies, v, 0.25)),
            four(fnp.where(applies, fnp.abs(m), 1.0)),
            fnp.stack([d, d - p_move, d - q_move, d + r_move]),
        )
        mantissas, logs = lanes.mantissa, lanes.log
        value = hs.Part(*(field[0] for field in lanes))
        # (each moved value relative to the first: its logarithm apart)
        safe = fnp.where(mantissas[0] == 0, 1.0, mantissas[0])
        changes = fnp.abs(mantissas[1:] / safe * fnp.exp(logs[1:] - logs[0]) - 1)
        # the factors p + k, q + k, r + k are each rounded, as if p, q and r were moved by
        # about a rounding of p + k: the value's sensitivity to them, times that
        reach = fnp.abs(fnp.stack([p, q, r])) + fnp.abs(m) + _SENSITIVITY_TERMS
        moves = fnp.stack([p_move, q_move, r_move])
        extra = fnp.sum(changes / moves * reach, axis=0) * (8 * _U)
        extra = fnp.where((mantissas[0] == 0) | fnp.isnan(extra), fnp.inf, extra)
        value = value._replace(error=value.error + extra * fnp.abs(value.mantissa))
        return hs.times(value, log_factor, 1.0, factor_error)

    return hs.where(applies, hs.when_any(applies, compute, lambda: hs.nowhere(x)), hs.nowhere())


def _gauss(a, b, c, x):
    a, b, c, x = fnp.broadcast_arrays(a, b, c, x)
    pole = hs.ends(c)
    # A series that ends (a or b a whole number -m <= 0) before c's pole, if any, is a
    # polynomial of degree m: finite for every x, at x = 1 where c - a - b <= 0 too, and
    # at c = -n >= -m
    poly_a = hs.ends(a) & (~pole | (a >= c))
    poly_b = hs.ends(b) & (~pole | (b >= c))
    polynomial = poly_a | poly_b
    degree = fnp.minimum(fnp.where(poly_a, -a, fnp.inf), fnp.where(poly_b, -b, fnp.inf))
    zero, one = fnp.zeros_like(x), fnp.ones_like(x)
    # the parameters of the transformations, each exact as a pair (rounded, rounding error)
    a_, b_, c_ = (a, zero), (b, zero), (c, zero)
    cma, cmb = hs.exact_sum(c, -a), hs.exact_sum(c, -b)
    s, bma = hs.exact_sum(c, -a, -b), hs.exact_sum(b, -a)
    minus_s, minus_bma = (-s[0], -s[1]), (-bma[0], -bma[1])
    below, above = x < 1, x > 1
    safe_x = fnp.where(below, x, 0.0)
    log_v = fnp.where(below, fnp.log1p(-safe_x), fnp.log(fnp.abs(x - 1)))
    log_v_error = 2 * _U * fnp.abs(log_v)
    regular = ~pole & below

    # -- series in x, or in w = x / (x - 1) after Pfaff's transformations; where c - a - b
    # (or b - a) is beyond 30 the terms fall like k^-31, and the series serve up to w = 1
    # (and a series that ends serves wherever it is defined)
    far_order = _MOST_WHOLE_ORDER + 0.5
    ends_cma = hs.ends(cma[0]) & (cma[1] == 0)
    ends_cmb = hs.ends(cmb[0]) & (cmb[1] == 0)
    w = fnp.where(x == 1, 0.0, x / (x - 1))
    pfaff = regular & (x < 0)
    # (beyond x = 1 the polynomial's (1 - x)^m takes the sign of (-1)^m)
    a_sign = 1 - 2 * (above & (fnp.remainder(a, 2) != 0)).astype(x.dtype)
    b_sign = 1 - 2 * (above & (fnp.remainder(b, 2) != 0)).astype(x.dtype)
    log_s = (s[0] + s[1]) * log_v

    def one_factor_lanes(up_to, only):
        plain = regular & ((fnp.abs(x) <= up_to) | ((x > 0) & (s[0] > far_order)))
        plain = plain | polynomial
        euler = regular & (x > -1)
        euler = euler & ((fnp.abs(x) <= up_to) | (s[0] < -far_order) | ends_cma | ends_cmb)
        pfaff_a = pfaff & ((w <= up_to) | (bma[0] > far_order) | ends_cmb)
        pfaff_a = pfaff_a | (poly_a & (x != 1))
        pfaff_b = pfaff & ((w <= up_to) | (bma[0] < -far_order) | ends_cma)
        pfaff_b = pfaff_b | (poly_b & (x != 1))
        return [
            ((a_, b_), c_, x, 0.0, plain & only),
            ((cma, cmb), c_, x, 0.0, euler & only),
            ((a_, cmb), c_, w, 2 * _U, pfaff_a & only),
            ((cma, b_), c_, w, 2 * _U, pfaff_b & only),
        ]

    def one_factor_parts(sums):
        return [
            hs.part(sums[0], zero, one, zero),
            hs.part(sums[1], log_s, one, 2 * _U * fnp.abs(log_s)),
            hs.part(sums[2], -a * log_v, a_sign, fnp.abs(a) * log_v_error),
            hs.part(sums[3], -b * log_v, b_sign, fnp.abs(b) * log_v_error),
        ]

    # -- 15.3.6 in v = 1 - x (for 1/2 <= x < 1), or after Pfaff's transformation in
    # v = 1 / (1 - x) (for x <= -1): two series each, each with its gamma factor
    near_one = regular & (x >= _NEAR_ONE_FROM)
    far = regular & (x <= -1)
    v = fnp.where(near_one, 1 - safe_x, 1 / (1 - safe_x))
    v_slack = fnp.where(near_one, 0.0, 2 * _U)

    def whole_apart(p):
        return fnp.abs(p - fnp.round(p)) > _NEAR_WHOLE

    ends_euler = ends_cma | ends_cmb
    two_term = near_one & (whole_apart(s[0]) | (ends_euler & ~polynomial))
    inverted = far & whole_apart(bma[0])
    sums = _stacked_series(
        one_factor_lanes(_SERIES_UP_TO, True)
        + [
            ((a_, b_), hs.exact_sum(a, b, -c, one), v, 0.0, two_term),
            ((cma, cmb), hs.exact_sum(c, -a, -b, one), v, 0.0, two_term),
            ((a_, cmb), hs.exact_sum(a, -b, one), v, v_slack, inverted),
            ((cma, b_), hs.exact_sum(b, -a, one), v, v_slack, inverted),
        ]
    )
    candidates = one_factor_parts(sums)
    # near 1: Gamma(c) Gamma(s) / (Gamma(c - a) Gamma(c - b)) 2F1(a, b; 1 - s; v) +
    # Gamma(c) Gamma(-s) / (Gamma(a) Gamma(b)) v^s 2F1(c - a, c - b; 1 + s; v); where c - a
    # or c - b ends, the first term is 0 (Euler's transformation makes it a polynomial
    # times v^s), whatever Gamma(s)
    first = hs.log_gamma_ratio([c_, s], [cma, cmb])
    second = hs.log_gamma_ratio([c_, minus_s], [a_, b_])
    candidates.append(
        hs.add(
            hs.term(sums[4], first, zero_where=ends_euler),
            hs.term(sums[5], second, log_s, 2 * _U * fnp.abs(log_s)),
        )
    )
    # far: Pfaff's transformation, then the same in 1 / (1 - x), its terms times
    # (1 - x)^-a and (1 - x)^-b
    third = hs.log_gamma_ratio([c_, bma], [cma, b_])
    fourth = hs.log_gamma_ratio([c_, minus_bma], [a_, cmb])
    candidates.append(
        hs.add(
            hs.term(sums[6], third, -a * log_v, fnp.abs(a) * log_v_error),
            hs.term(sums[7], fourth, -b * log_v, fnp.abs(b) * log_v_error),
        )
    )
    candidates = [hs.where(x == 1, hs.nowhere(), p) for p in candidates]
    at_one = _gauss_at_one(c_, cma, cmb, s)
    candidates.append(hs.where((x == 1) & (s[0] > 0), at_one, hs.nowhere()))
    value, error = hs.best(candidates)
    # where these fall short, the paired forms, and after them the series up to
    # w = _SERIES_FURTHEST (slower to converge)
    needed = (error > TOLERANCE) & (x != 1)

    def paired():
        near = needed & near_one & ~polynomial & ~ends_euler
        return hs.best(
            [value, _paired(a, b, c, x, cma, cmb, s, bma, near, needed & far & ~polynomial)]
        )

    value, error = hs.when_any(needed, paired, lambda: (value, error))
    needed = (error > TOLERANCE) & (x != 1)

    def further():
        extended = one_factor_parts(_stacked_series(one_factor_lanes(_SERIES_FURTHEST, needed)))
        return hs.best([value, *extended])

    value = hs.value_within(*hs.when_any(needed, further, lambda: (value, error)), TOLERANCE)
    value = fnp.where((x == 1) & (s[0] <= 0), fnp.inf, value)
    value = fnp.where((above | pole) & ~polynomial, fnp.inf, value)
    at_one = _polynomial_at_one(
        fnp.where(polynomial, a, 0.0),
        fnp.where(polynomial, b, 0.0),
        fnp.where(polynomial, c, 1.0),
        fnp.where(polynomial, degree, 0.0),
    )
    value = fnp.where(polynomial & (x == 1), at_one, value)
    # (at x = 0 the series' first term, 1, whatever c is, as SciPy's and JAX's)
    value = fnp.where(x == 0, 1.0, value)
    nan = fnp.isnan(a) | fnp.isnan(b) | fnp.isnan(c) | fnp.isnan(x)
    return fnp.where(nan, fnp.nan, value)


@custom_jvp
def _hyp2f1(a, b, c, x):
    return _gauss(a, b, c, x)


@_hyp2f1.defjvp
def _hyp2f1_jvp(primals, tangents):
    a, b, c, x = primals
    ta, tb, tc, tx = tangents
    dx = a * b / c * _hyp2f1(a + 1, b + 1, c + 1, x)
    da = _central_difference(lambda p: _gauss(p, b, c, x), a)
    db = _central_difference(lambda p: _gauss(a, p, c, x), b)
    dc = _central_difference(lambda p: _gauss(a, b, p, x), c)
    return _hyp2f1(a, b, c, x), da * ta + db * tb + dc * tc + dx * tx


def hyp2f1(a: ArrayLike, b: ArrayLike, c: ArrayLike, x: ArrayLike) -> Array:
    """Gauss's hypergeometric function 2F1(a, b; c; x) = sum_k (a)_k (b)_k / (c)_k x^k / k!
    for real x <= 1 (inf beyond, and where c is 0 or a negative integer, as SciPy's and
    JAX's; Gauss's formula at x = 1), NaN where no transformation computes it to within
    1e-11 relative. Where a or b is a whole number -m <= 0 the series ends at x^m, and is
    that polynomial for every real x, and for c = -n with n >= m too (as SciPy's and
    mpmath's; JAX's gives inf or NaN there).

    Module gauss_hypergeometric describes the transformations weighed against each other.
    The derivative in x is (a b / c) 2F1(a + 1, b + 1; c + 1; x); in a, b and c it is taken
    by central differences in float64 (about 1e-10 relative)."""
    (a, b, c, x), kind = wide("hyp2f1", a, b, c, x)
    return narrow(_hyp2f1(a, b, c, x), kind)
