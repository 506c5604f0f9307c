"""Kummer's confluent hypergeometric function 1F1(a; b; x), hyp1f1.

It computes in float64 whatever its inputs' dtype and returns their promoted dtype. As for
hyp2f1 (gauss_hypergeometric), each value is computed by every formula that applies, each
with a bound on its error (hypergeometric_series), the one with the smallest bound taken,
and NaN where even that is above _TOLERANCE:

- for |x| up to _SERIES_UP_TO (and wherever it ends), the power series, and Kummer's
  transformation e^x 1F1(b - a; b; -x), whose terms keep one sign where those of the
  series alternate;
- for |x| from _ASYMPTOTIC_FROM, the asymptotic expansion of the part that grows as e^x
  (x > 0) or falls as |x|^-a (x < 0), its error the first term left out plus a bound on
  the other part, which it leaves out;
- where these fall short for large -a (x > 0; large a - b for x < 0, after Kummer's
  transformation), the recurrence in a, taken down from a in (0, 1], its error measured
  by summing it again with nudged steps.
"""

from __future__ import annotations

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.scipy import hypergeometric_series as hs
from funcgrad.scipy.series import _central_difference
from funcgrad.transforms.custom_derivatives import custom_jvp

_SERIES_UP_TO = 3000.0  # |x|: the series' terms peak near k = |x|, within hs.MAX_TERMS
_ASYMPTOTIC_FROM = 10.0
_ASYMPTOTIC_TERMS = 60
# The largest bound on the relative error that is answered with a value, not NaN.
TOLERANCE = 1e-11

_U = hs.ROUND_OFF


def _asymptotic_series(p, q, y):
    """sum_k (p)_k (q)_k / k! (1 / y)^k for y > 0, p and q pairs (hs.exact_sum), cut before
    its terms stop falling (or where p or q ends it); a bound on its error (the first term
    left out, and the terms' rounding), and one on its size (infinite where its terms do
    not fall to a tenth of the first: no asymptotic regime to speak of)."""

    def step(k, carry):
        term, total, size, omitted, going = carry
        k = lax.convert_element_type(k, y.dtype)
        following = term * ((p[0] + k) + p[1]) * ((q[0] + k) + q[1]) / ((k + 1) * y)
        falling = going & (fnp.abs(following) < fnp.abs(term))
        total = total + fnp.where(falling, following, 0.0)
        size = size + fnp.where(falling, (k + 2) * fnp.abs(following), 0.0)
        omitted = fnp.where(going & ~falling, fnp.abs(following), omitted)
        return fnp.where(falling, following, term), total, size, omitted, falling

    ones = fnp.ones_like(y)
    init = (ones, ones, ones, fnp.zeros_like(y), fnp.ones_like(y, bool))
    term, total, size, omitted, going = lax.fori_loop(0, _ASYMPTOTIC_TERMS, step, init)
    # (still falling after the last term: what is left is about the last term's size)
    omitted = fnp.where(going, fnp.abs(term), omitted)
    size_bound = fnp.where(omitted < 0.1, size + omitted, fnp.inf)
    return total, 2 * _U * size + omitted, size_bound


def _asymptotic(a, b, x, bma):
    """1F1 for large |x|, DLMF 13.7.2: the sum of Gamma(b) / Gamma(a) e^x x^(a - b)
    2F0(b - a, 1 - a;; 1 / x) and (about, its phase aside) Gamma(b) / Gamma(b - a) |x|^-a
    2F0(a, 1 + a - b;; -1 / x); the first grows and the second falls for x > 0, the other
    way round for x < 0. The one that dominates is summed; the other, bounded by its terms'
    sizes, is left out and counted as error. Where the 1 / Gamma of the kept part is 0 (a
    series that ends), no value."""
    positive = x > 0
    y = fnp.abs(x)
    log_y = fnp.log(y)
    zero = fnp.zeros_like(a)
    one_minus_a = hs.exact_sum(1 - zero, -a)
    one_plus_d = hs.exact_sum(1 - zero, a, -b)
    # lanes: the series of the growing part, then of the falling part
    p = [fnp.stack([bma[i], (a, zero)[i]]) for i in range(2)]
    q = [fnp.stack([one_minus_a[i], one_plus_d[i]]) for i in range(2)]
    totals, errors, sizes = _asymptotic_series(p, q, fnp.stack([y, y]))

    grows = hs.log_gamma_ratio([(b, zero)], [(a, zero)])
    falls = hs.log_gamma_ratio([(b, zero)], [bma])
    log_grows = grows[0] + x + (a - b) * log_y
    log_falls = falls[0] - a * log_y
    kept = fnp.where(positive, log_grows, log_falls)
    left_out = fnp.where(positive, log_falls, log_grows)
    total = fnp.where(positive, totals[0], totals[1])
    error = fnp.where(positive, errors[0], errors[1])
    left_out_size = fnp.where(positive, sizes[1], sizes[0])
    sign = fnp.where(positive, grows[1], falls[1])
    rounded = fnp.where(positive, fnp.abs(x) + fnp.abs((a - b) * log_y), fnp.abs(a * log_y))
    log_error = fnp.where(positive, grows[2], falls[2]) + 2 * _U * rounded
    usable = fnp.where(positive, grows[3], falls[3]) & (kept > -fnp.inf)
    error = error + left_out_size * fnp.exp(fnp.minimum(left_out - kept, 700.0))
    error = fnp.where(usable, error, fnp.inf)
    return hs.times(hs.Part(total, 0.0, error), fnp.where(usable, kept, 0.0), sign, log_error)


def _direct(a, b, x):
    """1F1(a; b; x) for b off the poles as (Part, relative error bound): the asymptotic
    expansion first where |x| is large (a few dozen terms), the series only where it is not
    enough (their terms peak near k = |x|)."""
    bma = hs.exact_sum(b, -a)
    zero = fnp.zeros_like(x)
    far = fnp.abs(x) >= _ASYMPTOTIC_FROM

    def asymptotic():
        return hs.where(
            far, _asymptotic(a, b, fnp.where(far, x, _ASYMPTOTIC_FROM), bma), hs.nowhere()
        )

    value, error = hs.best([hs.when_any(far, asymptotic, lambda: hs.nowhere(x))])
    needed = error > TOLERANCE
    near = needed & (fnp.abs(x) <= _SERIES_UP_TO)
    plain = near | (needed & hs.ends(a))
    kummer = near | (needed & hs.ends(bma[0]) & (bma[1] == 0))
    tops = fnp.stack([fnp.where(plain, a, 0.5), fnp.where(kummer, bma[0], 0.5)])
    tops_low = fnp.stack([zero, fnp.where(kummer, bma[1], 0.0)])
    bottoms = fnp.stack([fnp.where(plain, b, 1.0), fnp.where(kummer, b, 1.0)])
    ws = fnp.stack([fnp.where(plain, x, 0.0), fnp.where(kummer, -x, 0.0)])
    summed = hs.series([(tops, tops_low)], (bottoms, fnp.zeros_like(ws)), ws, 0.0)
    summed = summed._replace(converged=summed.converged & fnp.stack([plain, kummer]))
    plain_sum, kummer_sum = (hs.Sum(*(field[i] for field in summed)) for i in range(2))
    candidates = [value, hs.part(plain_sum, zero, 1.0, zero), hs.part(kummer_sum, x, 1.0, zero)]
    return hs.best(candidates)


# The rounding of each step of the recurrence is bounded by summing it again with every
# step's result moved by this many roundings, alternately up and down, and taking this
# many times the difference.
_NUDGE = 4.0
_NUDGE_SAFETY = 64.0


def _recurrence(p, b, y, applies):
    """1F1(p; b; y) for p < -1 and y > 0 (p a pair, hs.exact_sum), by the recurrence
    (b - a) M(a - 1) = a M(a + 1) - (2a - b + y) M(a), taken down from a0 = p + n in (0, 1]
    (where their series' terms have one sign, for b > 0), as a Part.

    Where a y < -(y - b)^2 / 4 the recurrence's solutions oscillate alike and errors grow
    slowly; elsewhere one outgrows the other, and 1F1 is often the one outgrown going down,
    its errors magnified without bound. Neither is assumed: the errors are measured. The
    recurrence is run four times in one loop: on the start values; on them again with each
    step's result nudged by _NUDGE roundings (the difference bounds the rounding's effect);
    and on the start values (1, 0) and (0, 1), whose results give how much the start values'
    own errors are magnified."""
    steps = fnp.where(applies, fnp.floor(-p[0]) + 1, 0.0)
    start = (p[0] + steps) + p[1]  # in (0, 1]
    start = fnp.where(applies, start, 0.5)
    zero, one = fnp.zeros_like(y), fnp.ones_like(y)
    pair = fnp.stack([zero, zero])
    summed = hs.series(
        [(fnp.stack([start, start + 1]), pair)], (fnp.stack([b, b]), pair), fnp.stack([y, y]), 0.0
    )
    # (both on the larger scale; they are within a factor of about y of each other)
    scale = fnp.maximum(summed.scale[0], summed.scale[1])
    first, second = (
        total * fnp.exp((lane_scale - scale) * hs.LOG_RESCALE)
        for total, lane_scale in zip(summed.total, summed.scale)
    )
    error = [
        fnp.where(converged, bound / fnp.maximum(fnp.abs(total), 1e-300), fnp.inf)
        for converged, bound, total in zip(summed.converged, summed.error, summed.total)
    ]
    # lanes: the values, the nudged values, and the two basis solutions
    current = fnp.stack([first, first, one, zero])
    following = fnp.stack([second, second, zero, one])
    nudge = fnp.stack([zero, one, zero, zero]) * (_NUDGE * _U)

    def step(carry):
        k, current, following, scale = carry
        a = start - k
        active = k < steps
        previous = (a * following - (2 * a - b + y) * current) / (b - a)
        previous = previous * (1 + nudge * (1 - 2 * (k % 2)))
        current, following = (
            fnp.where(active, previous, current),
            fnp.where(active, current, following),
        )
        size = fnp.max(fnp.abs(fnp.stack([current, following])), axis=(0, 1))
        large = size > hs.RESCALE_ABOVE
        current, following = hs.shrunk(large, current, following)
        return k + 1, current, following, scale + large

    def go_on(carry):
        return fnp.any(carry[0] < steps) & (carry[0] < hs.MAX_TERMS)

    init = (0.0, current, following, scale)
    k, current, _, scale = lax.while_loop(go_on, step, init)
    result, nudged, basis_first, basis_second = current
    size = fnp.abs(result)
    start_size = fnp.abs(basis_first * first) * error[0] + fnp.abs(basis_second * second) * error[1]
    error = _NUDGE_SAFETY * fnp.abs(nudged - result) + start_size + 4 * _U * size
    error = fnp.where(applies & (k >= steps) & fnp.isfinite(error), error, fnp.inf)
    return hs.Part(result, scale * hs.LOG_RESCALE, error)


def _kummer(a, b, x):
    """1F1(a; b; x) for b off the poles, NaN where no formula keeps _TOLERANCE: _direct,
    and where it falls short for large -a (x > 0) or large a - b (x < 0, after Kummer's
    transformation e^x 1F1(b - a; b; -x)) the recurrence in a."""
    a, b, x = fnp.broadcast_arrays(a, b, x)
    value, error = _direct(a, b, x)
    bma = hs.exact_sum(b, -a)
    positive = x > 0
    p = [fnp.where(positive, a, bma[0]), fnp.where(positive, 0.0, bma[1])]
    applies = (error > TOLERANCE) & (x != 0) & (p[0] < -1) & (fnp.abs(p[0]) < hs.MAX_TERMS)

    def recurrence():
        down = _recurrence(p, b, fnp.abs(x), applies)
        down = hs.times(down, fnp.where(positive, 0.0, x), 1.0, 2 * _U * fnp.abs(x))
        return hs.best([value, down])

    value, error = hs.when_any(applies, recurrence, lambda: (value, error))
    return hs.value_within(value, error, TOLERANCE)


@custom_jvp
def _hyp1f1(a, b, x):
    # (at x = 0 the series' first term, 1, whatever b is, as JAX's)
    pole = hs.ends(b) & (x != 0)
    safe_b = fnp.where(pole, 1.0, b)
    nan = pole | fnp.isnan(a) | fnp.isnan(b) | fnp.isnan(x)
    return fnp.where(nan, fnp.nan, fnp.where(x == 0, 1.0, _kummer(a, safe_b, x)))


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
    (NaN where b is 0 or a negative integer, but 1 at x = 0; and where no formula computes
    it to within 1e-11 relative: for large parameters and |x| of their size, see
    docs/differences.md).

    Module hypergeometric describes the formulas weighed against each other. The derivative
    in x is (a / b) 1F1(a + 1; b + 1; x); in a and b it is taken by central differences in
    float64 (about 1e-10 relative), as for gammainc's shape parameter."""
    (a, b, x), kind = wide("hyp1f1", a, b, x)
    return narrow(_hyp1f1(a, b, x), kind)
