"""Special functions evaluated by their series, continued fractions and asymptotic
expansions: Hurwitz's zeta and polygamma, and the regularized incomplete gamma and beta
functions (and, re-exported, the Bessel functions of funcgrad/numpy/_bessel.py).

Each computes in float64 whatever its input dtype (the series need the range and the
precision) and returns the inputs' promoted dtype. They are compositions of lax operations,
so every transformation applies; the incomplete gamma and beta functions iterate with
`while_loop` and carry custom derivatives: exact in x, by central differences in float64 in
the shape parameters.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.numpy._bessel import i0, i0e, i1, i1e
from funcgrad.numpy._float64 import narrow as _narrow
from funcgrad.numpy._float64 import wide as _wide
from funcgrad.scipy import gamma_asymptotic
from funcgrad.scipy.gamma_differences import (
    log_beta,
    log_gamma_1p,
    log_gamma_slope,
    stirling_remainder,
)
from funcgrad.transforms.autodiff import jvp
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = ["betainc", "gammainc", "gammaincc", "i0", "i0e", "i1", "i1e", "polygamma", "zeta"]

F64 = np.float64


# -- zeta and polygamma -------------------------------------------------------------------------

_ZETA_SHIFT = 10  # terms summed directly before the Euler-Maclaurin tail
_ZETA_TAIL_TERMS = 13


def _bernoulli_over_factorial() -> list[float]:
    """B_2j / (2j)! for j = 1 .. _ZETA_TAIL_TERMS, from the Bernoulli recurrence."""
    from fractions import Fraction

    numbers = [Fraction(1)]
    for m in range(1, 2 * _ZETA_TAIL_TERMS + 1):
        numbers.append(-sum(math.comb(m + 1, k) * numbers[k] for k in range(m)) / (m + 1))
    return [float(numbers[2 * j] / math.factorial(2 * j)) for j in range(1, _ZETA_TAIL_TERMS + 1)]


_ZETA_TAIL = _bernoulli_over_factorial()


def _hurwitz(s, q):
    """sum_k (q + k)^-s by Euler-Maclaurin: the first terms summed, the rest as an integral
    plus Bernoulli corrections. For s > 1 and q > 0 (inputs made safe by the caller)."""
    total = fnp.zeros_like(s + q)
    for k in range(_ZETA_SHIFT):
        total = total + (q + k) ** -s
    w = q + _ZETA_SHIFT
    total = total + w ** (1 - s) / (s - 1) + 0.5 * w**-s
    factor = s * w ** (-s - 1)  # s (s+1) ... (s + 2j - 2) w^(-s - 2j + 1), j = 1
    for j, coefficient in enumerate(_ZETA_TAIL, start=1):
        total = total + coefficient * factor
        # (divided by w before multiplying: at large s, (s + 2j - 1)(s + 2j) overflows)
        factor = factor * ((s + 2 * j - 1) / w) * ((s + 2 * j) / w)
    return total


def _riemann_below_one(s):
    """Riemann's zeta continued to s < 1: on (-1/4, 1) by the Euler-Maclaurin sum, whose formula
    holds there too; below by the functional equation zeta(s) = 2^s pi^(s-1) sin(pi s / 2)
    Gamma(1 - s) zeta(1 - s), its magnitude through logarithms (Gamma(1 - s) overflows from
    s = -170 on, where the product need not) and the sine of s less its nearest even number
    2n (exact) times (-1)^n, so that it keeps its digits beside the trivial zeros at the
    negative even integers and is exactly 0 on them."""
    near = s > -0.25
    direct = _hurwitz(fnp.where(near, s, 0.5), fnp.ones_like(s))
    far = fnp.where(near, -3.0, s)
    half_turns = fnp.round(far / 2)
    sine = fnp.sin(0.5 * math.pi * (far - 2 * half_turns))
    sine = fnp.where(fnp.fmod(half_turns, 2.0) == 0, sine, -sine)
    log_rest = far * math.log(2.0) + (far - 1) * math.log(math.pi) + lax.lgamma(1 - far)
    log_rest = log_rest + fnp.log(_hurwitz(1 - far, fnp.ones_like(far)))
    # (at a trivial zero beyond s = -170 the magnitude overflows: capped, 0 times it stays 0)
    reflected = sine * fnp.exp(fnp.where(sine == 0, fnp.minimum(log_rest, 700.0), log_rest))
    return fnp.where(near, direct, reflected)


def zeta(x, q=None):
    """Hurwitz's zeta function sum_k (q + k)^-x (Riemann's when q is omitted, q = 1): inf at
    x = 1 and, for x > 1, at the poles q = 0, -1, -2, ...; for x < 1 Riemann's continued
    (as SciPy's; NaN where q is given, as SciPy's), and NaN for q < 0 unless x is whole and
    finite (else the terms (q + k)^-x are not real). At x = inf only the term q^-x is left:
    inf, 1 or 0 as q < 1, q = 1 or q > 1.

    At negative q the terms up to q + k < 0 are reflected: with f = q - floor(q) and
    g = ceil(q) - q (both exact, in (0, 1)), zeta(x, q) = zeta(x, f) + (-1)^x (zeta(x, g) -
    zeta(x, 1 - q)), three sums at positive arguments however far left q lies."""
    riemann = q is None
    (x, q), dtype = _wide("zeta", x, 1.0 if riemann else q)
    whole_q = fnp.floor(q) == q
    valid = (x > 1) & (q > 0)
    infinite = (x == fnp.inf) & (q > 0)
    valid = valid & ~infinite
    left = (x > 1) & (q < 0) & ~whole_q & (fnp.floor(x) == x) & (x < fnp.inf)
    pole = (x == 1) | ((x > 1) & (q <= 0) & whole_q)
    s = fnp.where(valid | left, x, 2.0)
    value = _hurwitz(s, fnp.where(valid, q, fnp.where(left, q - fnp.floor(q), 1.0)))
    sign = fnp.where(fnp.fmod(s, 2.0) == 0, 1.0, -1.0)
    near = sign * _hurwitz(s, fnp.where(left, fnp.ceil(q) - q, 1.0))
    far = sign * _hurwitz(s, fnp.where(left, 1 - q, 1.0))
    # (the two nearby sums first: for odd x at f = 1/2 they cancel exactly, leaving the far one)
    value = fnp.where(left, (value + near) - far, value)
    value = fnp.where(pole, fnp.inf, fnp.where(valid | left, value, fnp.nan))
    limit = fnp.where(q < 1, fnp.inf, fnp.where(q == 1, 1.0, 0.0))
    value = fnp.where(infinite, limit, value)
    if riemann:
        below = x < 1
        value = fnp.where(below, _riemann_below_one(fnp.where(below, x, 0.5)), value)
    return _narrow(value, dtype)


def _hurwitz_scaled(s, q):
    """q^s zeta(s, q) = sum_k (1 + k / q)^-s, for s > 1 and q > 0, by _hurwitz's sum with
    q^-s taken out of every term: that factor underflows long before polygamma's n! q^-s
    does (polygamma(59, 2e5) kept 7 digits)."""
    total = fnp.zeros_like(s + q)
    for k in range(_ZETA_SHIFT):
        total = total + fnp.exp(-s * fnp.log1p(k / q))
    w = q + _ZETA_SHIFT
    base = fnp.exp(-s * fnp.log1p(_ZETA_SHIFT / q))  # (w / q)^-s
    total = total + base * (w / (s - 1) + 0.5)
    factor = s / w * base
    for j, coefficient in enumerate(_ZETA_TAIL, start=1):
        total = total + coefficient * factor
        factor = factor * ((s + 2 * j - 1) / w) * ((s + 2 * j) / w)
    return total


# Beyond this (n + 1) log x, x^-(n+1) is near float64's smallest numbers, and polygamma is
# taken as exp(log n! - (n + 1) log x) times the scaled sum.
_POLYGAMMA_SCALED_FROM = 500.0


def polygamma(n, x):
    """The n-th derivative of digamma: digamma for n = 0, (-1)^(n+1) n! zeta(n + 1, x) for
    whole n >= 1 (inf at the poles x = 0, -1, ...); NaN for other n."""
    (n, x), dtype = _wide("polygamma", n, x)
    whole = (n >= 0) & (fnp.floor(n) == n)
    order = fnp.where(whole, n, 1.0)
    sign = fnp.where(fnp.fmod(order, 2.0) == 0, -1.0, 1.0)
    log_factorial = lax.lgamma(order + 1)
    higher = sign * fnp.exp(log_factorial) * zeta(order + 1, x)
    scaled = (x > 0) & ((order + 1) * fnp.log(fnp.where(x > 0, x, 1.0)) > _POLYGAMMA_SCALED_FROM)
    safe_x = fnp.where(scaled, x, 2.0)
    log_size = log_factorial - (order + 1) * fnp.log(safe_x)
    far = sign * fnp.exp(log_size) * _hurwitz_scaled(order + 1, safe_x)
    value = fnp.where(n == 0, lax.digamma(x), fnp.where(scaled, far, higher))
    return _narrow(fnp.where(whole, value, fnp.nan), dtype)


# -- incomplete gamma and beta ------------------------------------------------------------------

_EPSILON = 1e-16
_MAX_ROUNDS = 5000
_TINY = 1e-300


def _iterate(step, init, done_index: int):
    """Run `step` on the carry until every element's done flag (carry[done_index]) is set,
    or _MAX_ROUNDS rounds; an element whose flag is still unset has not converged, and its
    caller answers NaN there. (The steps count a NaN as done: it would never converge. They
    leave a done element's result as it is: rounds taken for a slower element beside it
    moved it by an ulp or so each, 1e-14 after the 5000 rounds of another's.)"""

    def go_on(carry):
        return (~fnp.all(carry[done_index])) & (carry[0] < _MAX_ROUNDS)

    return lax.while_loop(go_on, step, init)


def _lower_gamma_series(a, x):
    """P(a, x) by its series x^a e^-x / Gamma(a + 1) sum_n x^n / ((a + 1) ... (a + n)), for
    x < a + 1 (where its terms fall quickly)."""

    def step(carry):
        rounds, term, total, done = carry
        term = term * x / (a + rounds + 1)
        total = total + term
        return rounds + 1, term, total, done | ~(fnp.abs(term) >= fnp.abs(total) * _EPSILON)

    ones = fnp.ones_like(a)
    _, _, total, converged = _iterate(step, (0, ones, ones, fnp.zeros_like(a, bool)), 3)
    value = total * fnp.exp(a * fnp.log(x) - x - lax.lgamma(a + 1))
    return fnp.where(converged, value, fnp.nan)


def _upper_gamma_fraction(a, x):
    """Q(a, x) by Legendre's continued fraction (modified Lentz), for x >= a + 1."""
    b = x + 1 - a
    c = fnp.full_like(a, 1 / _TINY)
    d = 1 / b
    h = d

    def step(carry):
        rounds, b, c, d, h, done = carry
        i = rounds + 1.0
        an = -i * (i - a)
        b = b + 2
        d = an * d + b
        d = fnp.where(fnp.abs(d) < _TINY, _TINY, d)
        c = b + an / c
        c = fnp.where(fnp.abs(c) < _TINY, _TINY, c)
        d = 1 / d
        delta = d * c
        h = fnp.where(done, h, h * delta)
        return rounds + 1, b, c, d, h, done | ~(fnp.abs(delta - 1) >= _EPSILON)

    init = (0, b, c, d, h, fnp.zeros_like(a, bool))
    _, _, _, _, h, converged = _iterate(step, init, 5)
    return fnp.where(converged, h * fnp.exp(a * fnp.log(x) - x - lax.lgamma(a)), fnp.nan)


# Below this shape, and x < a + 1, Q is summed directly (_small_shape_upper_gamma): there it
# falls to about a E1(x), which 1 - P would round away (Q(1e-10, 0.1) had 6 digits).
_SMALL_SHAPE = 0.1
_SMALL_SHAPE_TERMS = 25  # (-x)^n / n! below 1e-24 for x < 1.1


def _small_shape_upper_gamma(a, x):
    """Q(a, x) for 0 < a < _SMALL_SHAPE and 0 < x < a + 1, from Gamma(a, x) = Gamma(a) -
    gamma(a, x) written as (Gamma(1 + a) - 1 - (x^a - 1) - a x^a sum_{n>=1} (-x)^n /
    (n! (a + n))) / Gamma(1 + a): the two differences from 1 by expm1, each to a's relative
    precision, so that nothing of size 1 cancels."""
    log_gamma = log_gamma_1p(a)
    total, term = fnp.zeros_like(x), fnp.ones_like(x)
    for n in range(1, _SMALL_SHAPE_TERMS + 1):
        term = -term * x / n
        total = total + term / (a + n)
    log_x_a = a * fnp.log(x)
    upper = fnp.expm1(log_gamma) - fnp.expm1(log_x_a) - a * fnp.exp(log_x_a) * total
    return upper * fnp.exp(-log_gamma)


def _regularized_gamma(a, x):
    """(P, Q) in float64 for a > 0, x >= 0 (NaN elsewhere); near x = a for large a by Temme's
    expansion (gamma_asymptotic)."""
    valid = (a > 0) & (x >= 0)
    large = valid & gamma_asymptotic.applies(a, x)  # (the other methods get stand-ins there)
    use_series = x < a + 1
    # (x = inf, whose P and Q are set below, gets a stand-in shape too: at a = 1e20 the
    # fraction ran its 5000 rounds for every element beside it)
    safe_a = fnp.where(valid & ~large & fnp.isfinite(x), a, 1.0)
    series_x = fnp.where(valid & ~large & use_series & (x > 0), x, 0.5)
    fraction_x = fnp.where(valid & ~large & ~use_series & fnp.isfinite(x), x, safe_a + 2)
    lower = _lower_gamma_series(safe_a, series_x)
    upper = _upper_gamma_fraction(safe_a, fraction_x)
    small = use_series & (safe_a < _SMALL_SHAPE)
    small_upper = _small_shape_upper_gamma(
        fnp.where(small, safe_a, 0.05), fnp.where(small, series_x, 0.5)
    )
    p = fnp.where(use_series, lower, 1 - upper)
    q = fnp.where(small, small_upper, fnp.where(use_series, 1 - lower, upper))
    large_p, large_q = gamma_asymptotic.regularized_gamma(
        fnp.where(large, a, gamma_asymptotic.SMALLEST_SHAPE),
        fnp.where(large, x, gamma_asymptotic.SMALLEST_SHAPE),
    )
    p, q = fnp.where(large, large_p, p), fnp.where(large, large_q, q)
    p = fnp.where(x == 0, 0.0, fnp.where(x == fnp.inf, 1.0, p))
    q = fnp.where(x == 0, 1.0, fnp.where(x == fnp.inf, 0.0, q))
    nan = fnp.full_like(p, fnp.nan)
    return fnp.where(valid, p, nan), fnp.where(valid, q, nan)


def _gamma_density(a, x):
    """d P(a, x) / dx = x^(a - 1) e^-x / Gamma(a)."""
    return fnp.exp((a - 1) * fnp.log(x) - x - lax.lgamma(a))


def _difference_step(a):
    """A central difference's step for a shape parameter: scaled to a (error about 1e-10
    relative), and for small positive a at most a / 2, so that a - h stays in the domain
    a > 0 (it once crossed 0 below a = 1e-5, making the derivative NaN)."""
    h = 1e-5 * fnp.maximum(fnp.abs(a), 1.0)
    return fnp.where((a > 0) & (a < 2 * h), a / 2, h)


def _central_difference(f, a):
    """df/da in float64."""
    h = _difference_step(a)
    return (f(a + h) - f(a - h)) / (2 * h)


def _gamma_shape_derivative(a, x, p):
    """dP/da (= -dQ/da) at P = p, by forward differentiation of the series, fraction or
    expansion that computes them, taken from whichever of P and Q is below 1/2: the other is
    near 1, where rounding keeps too few of its digits (P(1e-20, 1) rounds to 1). (A central
    difference was 3e-6 off at P(30, 1e-5) ~ x^30, whose relative change with a is steep.)"""
    _, (dp, dq) = jvp(lambda s: _regularized_gamma(s, x), (a,), (fnp.ones_like(a),))
    return fnp.where(p < 0.5, dp, -dq)


@custom_jvp
def _gammainc64(a, x):
    return _regularized_gamma(a, x)[0]


@_gammainc64.defjvp
def _gammainc64_jvp(primals, tangents):
    a, x = primals
    ta, tx = tangents
    value = _gammainc64(a, x)
    return value, _gamma_shape_derivative(a, x, value) * ta + _gamma_density(a, x) * tx


@custom_jvp
def _gammaincc64(a, x):
    return _regularized_gamma(a, x)[1]


@_gammaincc64.defjvp
def _gammaincc64_jvp(primals, tangents):
    a, x = primals
    ta, tx = tangents
    value = _gammaincc64(a, x)
    return value, -_gamma_shape_derivative(a, x, 1 - value) * ta - _gamma_density(a, x) * tx


def _at_infinite_shape(a, x, value, limit):
    """`value` with the limit at a = inf (P = 0, Q = 1 for finite x >= 0; NaN at x = inf), as
    SciPy's."""
    infinite = a == fnp.inf
    at_limit = fnp.where((x >= 0) & fnp.isfinite(x), limit, fnp.nan)
    return fnp.where(infinite, at_limit, value)


def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x) = gamma(a, x) / Gamma(a), for
    a > 0 and x >= 0, and its limit 1 at a = 0 for x > 0 (NaN elsewhere); its series below
    x = a + 1, the continued fraction of 1 - P above."""
    (a, x), dtype = _wide("gammainc", a, x)
    value = fnp.where((a == 0) & (x > 0), 1.0, _gammainc64(a, x))
    return _narrow(_at_infinite_shape(a, x, value, 0.0), dtype)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x), computed
    directly where it is small (no cancellation); 0 at a = 0 for x > 0."""
    (a, x), dtype = _wide("gammaincc", a, x)
    value = fnp.where((a == 0) & (x > 0), 0.0, _gammaincc64(a, x))
    return _narrow(_at_infinite_shape(a, x, value, 1.0), dtype)


# From these shapes on x^a y^b / B(a, b) is taken by _large_beta_front.
_LARGE_BETA_FROM = 10.0


def _minus_log1p_plus(e):
    """e - log1p(e), by its series -sum_(n>=2) (-e)^n / n for |e| < 0.1, where log1p(e) and e
    cancel."""
    near = fnp.abs(e) < 0.1
    small = fnp.where(near, e, 0.0)
    series = fnp.zeros_like(e)
    for n in range(17, 1, -1):
        series = series * small + (-1.0) ** n / n
    return fnp.where(near, series * small * small, e - fnp.log1p(fnp.where(near, 0.0, e)))


def _large_beta_front(a, b, x, y, log_x, log_y):
    """x^a y^b / B(a, b) for a, b >= _LARGE_BETA_FROM, as Didonato and Morris's ALGORITHM
    708 takes it (brcomp): exp(-(a r(-l / a) + b r(l / b))) sqrt(b x0 / (2 pi)),
    r(e) = e - log1p(e), l the distance of x from the mean x0 = a / (a + b) scaled by
    a + b, corrected by the Stirling remainders of a, b and a + b. Taken as a log x +
    b log y - ln B(a, b) its exponent is a difference of terms of size a log a, whose
    rounding cost betainc(1e6, 1e6, 0.5) 9 digits and betainc(1e8, 1e8, 0.5) 7."""
    lower = a <= b
    ratio = fnp.where(lower, a / b, b / a)
    x0 = fnp.where(lower, ratio / (1 + ratio), 1 / (1 + ratio))
    y0 = fnp.where(lower, 1 / (1 + ratio), ratio / (1 + ratio))
    distance = fnp.where(lower, a - (a + b) * x, (a + b) * y - b)

    def scaled(e, log_z, z0):
        return fnp.where(fnp.abs(e) > 0.6, e - (log_z - fnp.log(z0)), _minus_log1p_plus(e))

    exponent = a * scaled(-distance / a, log_x, x0) + b * scaled(distance / b, log_y, y0)
    stirling = stirling_remainder(a) + stirling_remainder(b) - stirling_remainder(a + b)
    return fnp.exp(-exponent - stirling) * fnp.sqrt(b * x0 / (2 * math.pi))


def _beta_front(a, b, x, y):
    """x^a y^b / B(a, b), x and y = 1 - x given apart: each logarithm taken from whichever
    of the two is exact (log1p(-x) for y = 1 - 1e-21, which rounds to 1)."""
    log_x = fnp.where(x <= 0.5, fnp.log(x), fnp.log1p(-y))
    log_y = fnp.where(y <= 0.5, fnp.log(y), fnp.log1p(-x))
    large = (a >= _LARGE_BETA_FROM) & (b >= _LARGE_BETA_FROM)
    safe = [fnp.where(large, p, q) for p, q in ((a, 20.0), (b, 20.0), (x, 0.5), (y, 0.5))]
    safe += [fnp.where(large, log_x, -math.log(2)), fnp.where(large, log_y, -math.log(2))]
    small = fnp.exp(a * log_x + b * log_y - log_beta(a, b))
    return fnp.where(large, _large_beta_front(*safe), small)


def _beta_fraction(a, b, x, y):
    """The continued fraction of I_x(a, b) (modified Lentz), for x < (a + 1) / (a + b + 2),
    y = 1 - x given unrounded; NaN where it has not converged within _MAX_ROUNDS."""
    qab, qap, qam = a + b, a + 1, a - 1
    c = fnp.ones_like(a)
    d = 1 - qab * x / qap
    d = 1 / fnp.where(fnp.abs(d) < _TINY, _TINY, d)
    h = d

    def clamp(v):
        return fnp.where(fnp.abs(v) < _TINY, _TINY, v)

    def step(carry):
        rounds, c, d, h, done = carry
        m = rounds + 1.0
        m2 = 2 * m
        # (each factor a ratio of its own size: products of the shapes overflowed past 1e154)
        even = m * (b - m) / (qam + m2) * (x / (a + m2))
        d = 1 / clamp(1 + even * d)
        c = clamp(1 + even / c)
        even_delta = d * c
        odd = -(a + m) / (a + m2) * ((qab + m) / (qap + m2)) * x
        d = 1 / clamp(1 + odd * d)
        c = clamp(1 + odd / c)
        delta = d * c
        h = fnp.where(done, h, h * even_delta * delta)
        return rounds + 1, c, d, h, done | ~(fnp.abs(delta - 1) >= _EPSILON)

    _, _, _, h, converged = _iterate(step, (0, c, d, h, fnp.zeros_like(a, bool)), 4)
    return fnp.where(converged, _beta_front(a, b, x, y) / a * h, fnp.nan)


_BETA_RECHECK_FROM = 1e-5  # 1 - x: the unswapped fraction takes up to about 2500 rounds
_BETA_NEAR_ONE_TERMS = 20


def _beta_near_one(a, b, y):
    """I_x(a, b) = 1 - I_y(b, a) at y = 1 - x below 1e-5 (with a y < 1/10), for small b: from
    I_y(b, a) = y^b / (b B(a, b)) (1 + b sum_j (1 - a)_j / j! y^j / (b + j)) as
    -expm1(L) - e^L b T, L = b ln y + ln(1 / (b B(a, b))), whose ln Gamma(a + b) - ln Gamma(a)
    and ln Gamma(1 + b) are taken without differencing, so that nothing cancels as b -> 0."""
    slope, _ = log_gamma_slope(a, fnp.minimum(b, 0.5))
    log_scale = b * slope - log_gamma_1p(fnp.minimum(b, 0.5))
    exponent = b * fnp.log(y) + log_scale
    term, total = fnp.ones_like(y), fnp.zeros_like(y)
    for j in range(1, _BETA_NEAR_ONE_TERMS + 1):
        term = term * ((j - a) / j * y)
        total = total + term / (b + j)
    return -fnp.expm1(exponent) - fnp.exp(exponent) * b * total


def _regularized_beta(a, b, x):
    """(I_x(a, b), 1 - I_x(a, b)), each summed where it is the smaller, so that neither is
    rounded to 1 less a few digits."""
    valid = (a > 0) & (b > 0) & (x >= 0) & (x <= 1)
    inner = valid & (x > 0) & (x < 1)
    safe_a, safe_b = fnp.where(valid, a, 1.0), fnp.where(valid, b, 1.0)
    safe_x = fnp.where(inner, x, 0.5)
    swap = safe_x > (safe_a + 1) / (safe_a + safe_b + 2)
    lo_a, lo_b = fnp.where(swap, safe_b, safe_a), fnp.where(swap, safe_a, safe_b)
    lo_x = fnp.where(swap, 1 - safe_x, safe_x)
    lo_y = fnp.where(swap, safe_x, 1 - safe_x)
    fraction = _beta_fraction(lo_a, lo_b, lo_x, lo_y)
    value = fnp.where(swap, 1 - fraction, fraction)
    complement = fnp.where(swap, fraction, 1 - fraction)
    # A small b can leave I small past the swap, as 1 less a fraction near 1 (I_0.99(5, 1e-10)
    # kept 5 digits): there the unswapped fraction, which still converges, within about
    # 8 / sqrt(1 - x) rounds; nearer 1 the series of I_y(b, a) in y = 1 - x. (Each only
    # where some element needs it: they doubled the time of every call.)
    y = 1 - safe_x
    small_past_swap = swap & (value < 1e-3)  # (above, 1 - fraction keeps 13 digits)
    recheck = small_past_swap & (y >= _BETA_RECHECK_FROM)
    near_one = small_past_swap & (y < _BETA_RECHECK_FROM) & (safe_a * y < 0.1) & (safe_b < 0.5)

    def unswapped(value):
        direct = _beta_fraction(
            fnp.where(recheck, safe_a, 1.0),
            fnp.where(recheck, safe_b, 1.0),
            fnp.where(recheck, safe_x, 0.5),
            fnp.where(recheck, 1 - safe_x, 0.5),
        )
        return fnp.where(recheck, direct, value)

    def by_series(value):
        series = _beta_near_one(
            fnp.where(near_one, safe_a, 1.0),
            fnp.where(near_one, safe_b, 0.25),
            fnp.where(near_one, y, 1e-6),
        )
        return fnp.where(near_one, series, value)

    value = lax.cond(fnp.any(recheck), unswapped, lambda v: v, value)
    value = lax.cond(fnp.any(near_one), by_series, lambda v: v, value)
    complement = fnp.where(recheck | near_one, 1 - value, complement)
    value = fnp.where(x == 0, 0.0, fnp.where(x == 1, 1.0, value))
    complement = fnp.where(x == 0, 1.0, fnp.where(x == 1, 0.0, complement))
    return fnp.where(valid, value, fnp.nan), fnp.where(valid, complement, fnp.nan)


def _beta_shape_derivative(regularized, at, value):
    """d I / d s at s = at, I = regularized(s) = value, by forward differentiation, taken from
    whichever of I and 1 - I is below 1/2 (as for gammainc's: I(1e-12, 2, 0.5) is 1 less
    2e-13). (A central difference was 7e-6 off at I(1000, 300, 0.4) ~ 1e-162.)"""
    _, (d_value, d_complement) = jvp(regularized, (at,), (fnp.ones_like(at),))
    return fnp.where(value < 0.5, d_value, -d_complement)


@custom_jvp
def _betainc64(a, b, x):
    return _regularized_beta(a, b, x)[0]


@_betainc64.defjvp
def _betainc64_jvp(primals, tangents):
    a, b, x = primals
    ta, tb, tx = tangents
    value = _betainc64(a, b, x)
    da = _beta_shape_derivative(lambda s: _regularized_beta(s, b, x), a, value)
    db = _beta_shape_derivative(lambda s: _regularized_beta(a, s, x), b, value)
    density = fnp.exp((a - 1) * fnp.log(x) + (b - 1) * fnp.log1p(-x) - log_beta(a, b))
    return value, da * ta + db * tb + density * tx


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and x in [0, 1], and
    its limits where one of a and b is 0 or infinite: a step to 1 past x = 0 (a = 0, b = inf)
    or at x = 1 (b = 0, a = inf) (NaN elsewhere): its continued fraction, on the side of x
    where it converges quickly."""
    (a, b, x), dtype = _wide("betainc", a, b, x)
    inside = (x >= 0) & (x <= 1)
    step_up = (((a == 0) & (b > 0)) | ((b == fnp.inf) & fnp.isfinite(a) & (a > 0))) & inside
    step_at_one = (((b == 0) & (a > 0)) | ((a == fnp.inf) & fnp.isfinite(b) & (b > 0))) & inside
    value = _betainc64(a, b, x)
    value = fnp.where(step_up, fnp.where(x > 0, 1.0, 0.0), value)
    value = fnp.where(step_at_one, fnp.where(x == 1, 1.0, 0.0), value)
    return _narrow(value, dtype)
