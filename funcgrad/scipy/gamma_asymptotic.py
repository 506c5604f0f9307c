"""The regularized incomplete gamma functions at large shape a near their transition x ≈ a,
by Temme's uniform asymptotic expansion (DLMF 8.12).

There the series and the continued fraction need about 9 sqrt(a) rounds (past a = 3e6 they
stopped short of converging, and at a = 1e8 gave P(a, a) = 0.19 for 0.50), and their prefactor
x^a e^-x / Gamma(a) is a difference of terms of size a log a, which keeps only 1 / (a log a) of
its relative precision. The expansion needs neither:

    Q(a, x) = erfc(eta sqrt(a / 2)) / 2 + R,    P(a, x) = erfc(-eta sqrt(a / 2)) / 2 - R,
    R = e^(-a eta^2 / 2) / sqrt(2 pi a) sum_k c_k(eta) a^-k,

with lambda = x / a and eta^2 / 2 = lambda - 1 - log(lambda) (eta signed as lambda - 1). Each
c_k is analytic at eta = 0 but written in closed form as a difference of poles there, so it is
evaluated by its Taylor polynomial, whose coefficients are derived once, in exact rational
arithmetic, from c_0 = 1 / (lambda - 1) - 1 / eta and the recurrence c_k = c_k-1'(eta) / eta +
(-1)^k g_k / (lambda - 1), g_k the coefficients of Stirling's series.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.numpy._float64 import horner

TERMS = 4  # c_0 .. c_3: the first term left out is below 1e-3 a^-4 of R, 1e-17 from a = 1000
DEGREE = 24  # Taylor degree of each c_k: (|eta| / 3.5)^24 < 1e-20 for |eta| <= 0.5
SMALLEST_SHAPE = 1000.0
LARGEST_ETA = 0.5  # beyond it (a >= 1000) the old methods converge in few rounds...
# ... but from here on every x is taken: beyond LARGEST_ETA, e^(-a eta^2 / 2) < e^-1250 is 0 in
# float64, P and Q exactly 0 and 1 (where the continued fraction ran its 5000 rounds).
ALL_X_SHAPE = 1e4


def _series_product(x: list, y: list) -> list:
    size = min(len(x), len(y))
    return [sum(x[i] * y[n - i] for i in range(n + 1)) for n in range(size)]


def _series_reciprocal(x: list) -> list:
    out = [1 / x[0]]
    for n in range(1, len(x)):
        out.append(-sum(x[i] * out[n - i] for i in range(1, n + 1)) / x[0])
    return out


def _series_sqrt(x: list) -> list:
    """The square root of a series starting with 1."""
    out = [Fraction(1)]
    for n in range(1, len(x)):
        out.append((x[n] - sum(out[i] * out[n - i] for i in range(1, n))) / 2)
    return out


def _stirling_coefficients(count: int) -> list[Fraction]:
    """g_0 .. g_count-1 of Gamma(z) ~ sqrt(2 pi / z) (z / e)^z sum_k g_k z^-k: the exponential
    of the series sum_m B_2m / (2m (2m - 1)) z^(1 - 2m) of its logarithm."""
    bernoulli = [Fraction(1)]
    for m in range(1, count + 1):
        bernoulli.append(-sum(math.comb(m + 1, k) * bernoulli[k] for k in range(m)) / (m + 1))
    logarithm = [Fraction(0)] * count
    for m in range(1, count):
        if 2 * m - 1 < count:
            logarithm[2 * m - 1] = bernoulli[2 * m] / (2 * m * (2 * m - 1))
    out = [Fraction(1)]
    for n in range(1, count):
        out.append(sum(k * logarithm[k] * out[n - k] for k in range(1, n + 1)) / n)
    return out


@functools.cache
def coefficients() -> tuple[tuple[float, ...], ...]:
    """The Taylor coefficients of c_0 .. c_TERMS-1 at eta = 0, lowest degree first."""
    size = DEGREE + 2 * TERMS + 2
    # lambda - 1 = u(eta) reverts eta = u h(u), h(u)^2 = 2 (u - log(1 + u)) / u^2, by Lagrange's
    # formula: [eta^k] u = [u^(k-1)] h^-k / k.
    h_squared = [Fraction(2 * (-1) ** n, n + 2) for n in range(size)]
    h_reciprocal = _series_reciprocal(_series_sqrt(h_squared))
    u_over_eta, power = [], [Fraction(1)] + [Fraction(0)] * (size - 1)
    for k in range(1, size + 1):
        power = _series_product(power, h_reciprocal)
        u_over_eta.append(power[k - 1] / k)
    # eta / u as a series; 1 / u is it over eta, its constant term the pole 1 / eta.
    eta_over_u = _series_reciprocal(u_over_eta)
    stirling = _stirling_coefficients(TERMS)
    terms = [eta_over_u[1:]]  # c_0: 1 / u - 1 / eta
    for k in range(1, TERMS):
        previous = terms[-1]
        # c_k-1' / eta and (-1)^k g_k / u both as coefficients of eta^(n - 1): poles cancel.
        length = min(len(previous), len(eta_over_u))
        sums = [n * previous[n] for n in range(1, length)]
        sums = [d + (-1) ** k * stirling[k] * eta_over_u[n] for n, d in enumerate(sums)]
        assert sums[0] == 0
        terms.append(sums[1:])
    return tuple(tuple(float(c) for c in term[: DEGREE + 1]) for term in terms)


# lambda - 1 - log(lambda) = u^2 sum_n (-u)^n / (n + 2), u = lambda - 1, for |u| < _NEAR_ONE.
_NEAR_ONE = 0.1
_NEAR_ONE_SERIES = [(-1) ** n / (n + 2) for n in range(16)]


def half_eta_squared(a, x):
    """lambda - 1 - log(lambda), lambda = x / a: by its series in u = lambda - 1 near 1, where
    u - log1p(u) cancels to u^2 / 2."""
    u = (x - a) / a
    near = fnp.abs(u) < _NEAR_ONE
    safe_u = fnp.where(near, u, 0.0)
    series = horner(_NEAR_ONE_SERIES, safe_u) * safe_u * safe_u
    return fnp.where(near, series, u - fnp.log1p(u)), u


def _eta(u, half):
    """eta, signed as u, from half = eta^2 / 2: near u = 0 as u sqrt(2 half / u^2), smooth there,
    where sign(u) sqrt(2 half) has an infinite derivative times 0 (the derivatives of P and Q
    were NaN at x = a)."""
    near = fnp.abs(u) < _NEAR_ONE
    safe_u = fnp.where(near, u, 0.0)
    near_eta = safe_u * fnp.sqrt(2 * horner(_NEAR_ONE_SERIES, safe_u))
    far_eta = fnp.sign(u) * fnp.sqrt(2 * fnp.where(near, 1.0, fnp.maximum(half, 0.0)))
    return fnp.where(near, near_eta, far_eta)


def applies(a, x):
    """Where the expansion is used: large a, x within |eta| <= LARGEST_ETA of a (any finite
    x >= 0 from ALL_X_SHAPE on)."""
    half, _ = half_eta_squared(fnp.where(a > 0, a, 1.0), x)
    near = (a >= SMALLEST_SHAPE) & (half <= LARGEST_ETA**2 / 2)
    return (near | (a >= ALL_X_SHAPE)) & (x >= 0) & fnp.isfinite(x)


def regularized_gamma(a, x):
    """(P, Q) in float64 where `applies(a, x)` (anything elsewhere)."""
    half, u = half_eta_squared(a, x)
    eta = _eta(u, half)
    near_eta = fnp.clip(eta, -LARGEST_ETA, LARGEST_ETA)  # (farther, R is 0 whatever its sum)
    total = fnp.zeros_like(eta)
    for k, taylor in enumerate(coefficients()):
        total = total + horner(list(taylor), near_eta) * a ** (-k)
    remainder = fnp.exp(-a * half) / fnp.sqrt(2 * math.pi * a) * total
    y = eta * fnp.sqrt(a / 2)
    return 0.5 * lax.erfc(-y) - remainder, 0.5 * lax.erfc(y) + remainder
