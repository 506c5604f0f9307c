"""Hypergeometric series summed with a bound on their error, and values kept as a mantissa
and a logarithm, so that hyp1f1 and hyp2f1 can weigh several transformations of one value
against each other and answer NaN where none of them keeps its digits.

A series sum_k prod_i (p_i)_k / (q)_k w^k / k! loses digits to the cancellation of its terms
(alternating terms far larger than their sum) and to the rounding of parameters that a
transformation computes (c - a, say, near a whole number), and it may stop short of
converging. Summed here, it reports a bound on all three: the terms' rounding, each term
off by about k roundings (sum_k (k + 1) |t_k| u, which bounds the error of a rounded w as
well); the parameters' rounding dp times the sensitivity sum_k |t_k| |sum_(j<k) 1 / (p + j)|;
and convergence, from a bound on the ratio of all later terms once no factor changes sign.
The terms and sums are rescaled by 2^-512 whenever they grow past 2^512, so a series whose
sum overflows (2F1 of large parameters) still gives its mantissa and scale.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array

ROUND_OFF = 2.0**-53
MAX_TERMS = 5000
# The terms' rounding counted as this many roundings per term (about 6 each, which do not
# all add up): the bound sum_k (k + 1) |t_k| u times it.
_ROUNDINGS_PER_TERM = 4.0
# Sums rescaled by 2^-512 each time they pass 2^512 (float64 scalars: a Python float's
# weak type would round 2^-512 to a float32 0)
RESCALE_ABOVE = np.float64(2.0**512)
_SHRINK = np.float64(2.0**-512)
LOG_RESCALE = 512 * math.log(2.0)


class Sum(NamedTuple):
    """A series' sum, total 2^(512 scale), and a bound on its error on the same scale."""

    total: object
    scale: object
    error: object
    converged: object


def shrunk(large, *values):
    """Each value times 2^-512 where `large`."""
    factor = fnp.where(large, _SHRINK, np.float64(1.0))
    return [value * factor for value in values]


def sum_with_error(x, y):
    """x + y rounded, and the rounding error (Knuth's two-sum)."""
    total = x + y
    y_part = total - x
    x_part = total - y_part
    return total, (x - x_part) + (y - y_part)


def exact_sum(*terms):
    """terms[0] + terms[1] + ... as a pair (high, low): the rounded sum and its rounding
    error, so that high + low is the sum to within u^2 of its terms."""
    high, low = terms[0], fnp.zeros_like(terms[0])
    for term in terms[1:]:
        high, rounding = sum_with_error(high, term)
        low = low + rounding
    return sum_with_error(high, low)


def later_ratio_bound(tops, bottom, w, n):
    """A bound on |t_(j+1) / t_j| for every j >= n, where no factor changes sign from n on:
    each (p + j) / (q + j) moves monotonically towards 1 as j grows."""

    def at_most(p, q):
        return fnp.maximum((p + n) / (q + n), 1.0)

    if len(tops) == 1:
        return fnp.abs(w) * at_most(tops[0], bottom) / (n + 1)
    first, second = tops
    paired = at_most(first, bottom) * at_most(second, n + 1)
    crossed = at_most(second, bottom) * at_most(first, n + 1)
    return fnp.abs(w) * fnp.minimum(paired, crossed)


def _peak(tops, bottom, w):
    """About where the terms stop growing: the larger root k of |w| prod (t + k) = (bottom +
    k) (k + 1) (0 where they never grow)."""
    size = fnp.abs(w)
    if len(tops) == 1:
        # k^2 + (q + 1 - |w|) k + (q - |w| t) = 0
        half = 0.5 * (bottom + 1 - size)
        constant = bottom - size * tops[0]
        root = -half + fnp.sqrt(fnp.maximum(half * half - constant, 0.0))
    else:
        # (1 - |w|) k^2 + (q + 1 - |w| (t1 + t2)) k + (q - |w| t1 t2) = 0
        lead = fnp.maximum(1 - size, 1e-300)
        half = 0.5 * (bottom + 1 - size * (tops[0] + tops[1])) / lead
        constant = (bottom - size * tops[0] * tops[1]) / lead
        root = -half + fnp.sqrt(fnp.maximum(half * half - constant, 0.0))
    return fnp.maximum(fnp.where(fnp.isnan(root), 0.0, root), 0.0)


def _ending(high, low):
    """The index k at which the factor p + k of (p)_k is 0, p = high + low a whole number
    <= 0 (inf elsewhere)."""
    return fnp.where((low == 0) & (high <= 0) & (fnp.floor(high) == high), -high, fnp.inf)


def series(tops, bottom, w, w_slack) -> Sum:
    """sum_k prod_i (tops_i)_k / (bottom)_k w^k / k! for one or two tops, each parameter a
    pair (high, low) whose sum it is (a rounded parameter and its rounding error, which
    enters each factor as (high + k) + low: near a whole number <= 0 the rounding would be
    magnified); w rounded by up to `w_slack` (relative). A bottom whose pole comes before
    the series ends gives an infinite error; NaN parameters end the sum at once."""
    (bottom, bottom_low) = bottom
    ends_at = (
        fnp.minimum(*[_ending(*top) for top in tops]) if len(tops) == 2 else (_ending(*tops[0]))
    )
    pole_at = _ending(bottom, bottom_low)
    infinite = pole_at < ends_at
    # from this index on no factor changes sign (or the series has ended)
    settled = fnp.maximum(fnp.ceil(-bottom) + (pole_at < fnp.inf), 0.0)
    for top, _ in tops:
        settled = fnp.maximum(settled, -top)
    settled = fnp.minimum(settled, ends_at + 1)
    highs = [top for top, _ in tops]
    # a series whose terms still grow at MAX_TERMS is not summed at all (its lane would hold
    # every other for MAX_TERMS rounds)
    hopeless = (_peak(highs, bottom, w) > MAX_TERMS) & (ends_at > MAX_TERMS)
    w = fnp.where(hopeless, 0.0, w)

    def step(carry):
        rounds, term, total, weighted, scale, done = carry
        k = lax.convert_element_type(rounds, w.dtype)
        ratio = w / (k + 1)
        for top, low in tops:
            ratio = ratio * ((top + k) + low)
        # (a pole met where the series has already ended)
        factor = (bottom + k) + bottom_low
        ratio = ratio / fnp.where(factor == 0, 1.0, factor)
        term = fnp.where(done, term, term * ratio)
        size = fnp.abs(term)
        total = fnp.where(done, total, total + term)
        weighted = fnp.where(done, weighted, weighted + (k + 2) * size)
        large = weighted > RESCALE_ABOVE
        term, total, weighted = shrunk(large, term, total, weighted)
        scale = scale + large
        n = k + 1
        bound = later_ratio_bound(highs, bottom, w, n)
        tail = size * bound / (1 - bound)
        small = (bound < 1) & (tail <= 1e-17 * fnp.abs(total) + 1e-3 * ROUND_OFF * weighted)
        finished = (n >= settled) & ((term == 0) | small)
        finished = finished | fnp.isnan(term) | fnp.isnan(total)
        return rounds + 1, term, total, weighted, scale, done | finished

    def go_on(carry):
        return (~fnp.all(carry[-1])) & (carry[0] < MAX_TERMS)

    ones = fnp.ones_like(w)
    init = (0, ones, ones, ones, fnp.zeros_like(w), fnp.isnan(w) | infinite)
    _, _, total, weighted, scale, done = lax.while_loop(go_on, step, init)
    error = (_ROUNDINGS_PER_TERM * ROUND_OFF + w_slack) * weighted
    return Sum(total, scale, error, done & ~infinite & ~hopeless)


class Part(NamedTuple):
    """A value mantissa e^log, and a bound on the mantissa's error. Mantissas stay within a
    few hundred orders of magnitude of 1; the logarithm carries the rest."""

    mantissa: object
    log: object
    error: object


def part(summed: Sum, log_factor, sign, log_error):
    """sign e^log_factor times a sum, the factor's logarithm off by up to `log_error`
    (absolute): the sum's own error, the factor's and its logarithm's rounding added."""
    log = log_factor + summed.scale * LOG_RESCALE
    rounding = ROUND_OFF * (fnp.abs(log) + 1) + log_error
    error = summed.error + rounding * fnp.abs(summed.total)
    error = fnp.where(summed.converged, error, fnp.inf)
    return Part(sign * summed.total, log, error)


def add(first: Part, second: Part) -> Part:
    """first + second, the smaller rescaled to the larger's logarithm."""
    log = fnp.maximum(first.log, second.log)
    log = fnp.where(fnp.isfinite(log), log, 0.0)
    first_scale = fnp.exp(fnp.where(first.log == -fnp.inf, -fnp.inf, first.log - log))
    second_scale = fnp.exp(fnp.where(second.log == -fnp.inf, -fnp.inf, second.log - log))
    mantissa = first.mantissa * first_scale + second.mantissa * second_scale
    error = first.error * first_scale + second.error * second_scale
    return Part(mantissa, log, error)


def relative_error(value: Part):
    """The bound on the value's relative error (inf where it is 0 but its bound is not, or
    where either is NaN)."""
    size = fnp.abs(value.mantissa)
    relative = value.error / fnp.where(size == 0, 1.0, size)
    relative = fnp.where((size == 0) & (value.error > 0), fnp.inf, relative)
    return fnp.where(fnp.isnan(relative), fnp.inf, relative)


def evaluate(value: Part):
    """mantissa e^log as one float (inf or 0 beyond float64's range): e^log split into a
    power of two and a remainder where it would overflow or underflow alone."""
    log = fnp.where(fnp.isfinite(value.log), value.log, 0.0)
    in_range = fnp.abs(log) < 700
    twos = fnp.where(in_range, 0.0, fnp.round(log / math.log(2.0)))
    remainder = log - twos * math.log(2.0)
    exponent = lax.convert_element_type(fnp.clip(twos, -4000, 4000), fnp.int32)
    value_at = fnp.ldexp(value.mantissa * fnp.exp(remainder), exponent)
    return fnp.where(value.log == -fnp.inf, 0.0 * value.mantissa, value_at)


def best(candidates: list[Part]) -> tuple[Part, object]:
    """The candidate with the smallest relative error bound, and that bound."""
    errors = fnp.stack([relative_error(c) for c in candidates])
    choice = fnp.argmin(errors, axis=0)[None]
    fields = [
        fnp.stack([fnp.broadcast_to(c[i], errors.shape[1:]) for c in candidates]) for i in range(3)
    ]
    chosen = Part(*(fnp.take_along_axis(field, choice, axis=0)[0] for field in fields))
    return chosen, fnp.min(errors, axis=0)


def value_within(value: Part, error, tolerance: float):
    """The value as one float, NaN where its relative error bound is above `tolerance`."""
    return fnp.where(error <= tolerance, evaluate(value), fnp.nan)


def when_any(mask, compute, otherwise):
    """compute() if any element of `mask` holds, else otherwise(): lax.cond under a
    transformation, a plain branch on concrete values (staging both branches on every
    eager call cost more than the branch itself)."""
    flag = fnp.any(mask)
    if type(flag) is Array:
        return compute() if bool(flag) else otherwise()
    return lax.cond(flag, lambda _: compute(), lambda _: otherwise(), 0)


def ends(p):
    """Where the rising factorials (p)_k reach 0: p a whole number <= 0."""
    return (p <= 0) & (fnp.floor(p) == p)


def gamma_sign(x):
    return 1 - 2 * ((x < 0) & (fnp.remainder(fnp.floor(x), 2) != 0)).astype(x.dtype)


def log_gamma_ratio(tops, bottoms):
    """prod Gamma(tops) / prod Gamma(bottoms) as (log of its size, sign, bound on the log's
    error, finite): -inf where a bottom is a pole (1 / Gamma of it is 0), not finite where a
    top is. Each argument is a pair (high, low) (exact_sum), low entering to first order,
    low digamma(high)."""
    log, sign, error = 0.0, 1.0, 0.0
    finite = True
    for entries, direction in ((tops, 1.0), (bottoms, -1.0)):
        for high, low in entries:
            pole = ends(high) & (low == 0)
            safe = fnp.where(pole, 0.5, high)
            size = lax.lgamma(safe)
            slope = fnp.where(low == 0, 0.0, low * lax.digamma(safe))
            log = log + direction * fnp.where(pole, fnp.inf, size + slope)
            sign = sign * gamma_sign(safe)
            error = error + 4 * ROUND_OFF * (fnp.abs(size) + fnp.abs(slope) + 1)
            # (within a rounding of a pole the first order is not enough)
            error = error + fnp.where(ends(high) & (low != 0), fnp.inf, 0.0)
            if direction > 0:
                finite = finite & ~pole
    return log, sign, error, finite


def times(value: Part, log_factor, sign, log_error) -> Part:
    """value times sign e^log_factor, the logarithm off by up to log_error."""
    rounding = ROUND_OFF * (fnp.abs(log_factor) + 1) + log_error
    error = value.error + rounding * fnp.abs(value.mantissa)
    return Part(sign * value.mantissa, value.log + log_factor, error)


def nowhere(like=0.0) -> Part:
    """No value: an infinite error (of `like`'s shape)."""
    zero = fnp.zeros_like(like)
    return Part(zero, zero, zero + fnp.inf)


def where(condition, value: Part, other: Part) -> Part:
    return Part(*(fnp.where(condition, p, q) for p, q in zip(value, other)))


def term(summed: Sum, ratio, log_extra=0.0, error_extra=0.0, zero_where=None) -> Part:
    """A sum times a gamma ratio (from _log_gamma_ratio) and e^log_extra: exactly 0 where the
    ratio is (a pole below, or `zero_where`), unusable where it is infinite."""
    log, sign, error, finite = ratio
    zero = (log == -fnp.inf) & finite
    if zero_where is not None:
        zero = zero | zero_where
    value = part(summed, fnp.where(zero, 0.0, log + log_extra), sign, error + error_extra)
    value = Part(value.mantissa, value.log, fnp.where(finite, value.error, fnp.inf))
    # (0 times whatever the sum is, where the sum's lane applies at all)
    nothing = fnp.where(summed.converged, 0.0, fnp.inf)
    return where(zero, Part(0.0 * value.mantissa, -fnp.inf, nothing), value)
