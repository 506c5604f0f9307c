"""The Poisson distribution with mean `mu`, as scipy.stats.poisson: logpmf is -inf off the
integers 0, 1, ... (shifted by loc)."""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import gammaincc, gammaln, xlogy
from funcgrad.scipy.stats._params import nan_unless
from funcgrad.scipy.stats._support import off_support


def _valid(mu, **_):
    return mu >= 0


@nan_unless(_valid)
def logpmf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Array:
    (k, mu, loc), kind = wide("poisson.logpmf", k, mu, loc)
    y = k - loc
    outside = off_support(y)
    y = fnp.where(outside, 0, y)
    return narrow(fnp.where(outside, -fnp.inf, xlogy(y, mu) - gammaln(y + 1) - mu), kind)


def pmf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Array:
    return fnp.exp(logpmf(k, mu, loc))


@nan_unless(_valid)
def cdf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Array:
    """P(K <= k) = Q(floor(k) + 1, mu), the regularized upper incomplete gamma function."""
    k, mu, loc = promote_args_inexact("poisson.cdf", k, mu, loc)
    y = k - loc
    below = y < 0
    return fnp.where(below, 0, gammaincc(fnp.where(below, 1, fnp.floor(y) + 1), mu))


# Below _SUMMED_BELOW the entropy is summed over k = 0 .. _SUMMED_TERMS - 1, which holds all
# but less than 1e-38 of the mass for such means; above it, the asymptotic expansion
# H = log(2 pi e mu) / 2 - sum_j c_j / mu^j has reached float64's precision. c_1 .. c_3 are the
# known 1/12, 1/24, 19/360; the rest were fitted to the exact sum in 80-digit arithmetic.
_SUMMED_BELOW = 100.0
_SUMMED_TERMS = 256
_ASYMPTOTIC = (1 / 12, 1 / 24, 19 / 360, 9 / 80, 863 / 2520, 1.3640873015873, 6.73670636654)


def entropy(mu: ArrayLike, loc: ArrayLike = 0) -> Array:
    """-sum_k p_k log p_k: 0 at mu = 0, nan for mu < 0. `loc` shifts the support without
    changing the entropy; it only takes part in the broadcast shape."""
    mu, loc = promote_args_inexact("poisson.entropy", mu, loc)
    summed = (mu > 0) & (mu < _SUMMED_BELOW)
    return fnp.where(
        mu < 0,
        fnp.nan,
        fnp.where(
            mu == 0,
            0,
            fnp.where(
                summed,
                _summed_entropy(fnp.where(summed, mu, 1)),
                _asymptotic_entropy(fnp.maximum(mu, _SUMMED_BELOW)),
            ),
        ),
    )


def _summed_entropy(mu):
    k = fnp.arange(_SUMMED_TERMS, dtype=mu.dtype).reshape((-1,) + (1,) * mu.ndim)
    log_p = logpmf(k, mu)
    return -fnp.sum(fnp.exp(log_p) * log_p, axis=0)


def _asymptotic_entropy(mu):
    inverse = 1 / mu
    correction, power = fnp.zeros_like(mu), fnp.ones_like(mu)
    for c in _ASYMPTOTIC:
        power = power * inverse
        correction = correction + c * power
    return 0.5 * fnp.log(2 * math.pi * math.e * mu) - correction
