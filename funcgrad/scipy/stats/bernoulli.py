"""The Bernoulli distribution with success probability `p`, as scipy.stats.bernoulli.

logpmf is -inf off {0, 1} (shifted by loc); cdf and ppf are nan for p outside [0, 1] and ppf
for q outside [0, 1], and ppf(0) is 0, the smallest value of the support.
"""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import xlog1py, xlogy
from funcgrad.scipy.stats._params import nan_unless, probability
from funcgrad.scipy.stats._support import off_support


@nan_unless(probability)
def logpmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    k, p, loc = promote_args_inexact("bernoulli.logpmf", k, p, loc)
    y = k - loc
    outside = off_support(y, 1)
    y = fnp.where(outside, 0, y)
    return fnp.where(outside, -fnp.inf, xlogy(y, p) + xlog1py(1 - y, -p))


def pmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    return fnp.exp(logpmf(k, p, loc))


def _invalid(p):
    return fnp.isnan(p) | (p < 0) | (p > 1)


@nan_unless(probability)
def cdf(k: ArrayLike, p: ArrayLike) -> Array:
    k, p = promote_args_inexact("bernoulli.cdf", k, p)
    value = fnp.where(k < 0, 0, fnp.where(k < 1, 1 - p, 1))
    return fnp.where(_invalid(p) | fnp.isnan(k), fnp.nan, value)


@nan_unless(probability)
def ppf(q: ArrayLike, p: ArrayLike) -> Array:
    q, p = promote_args_inexact("bernoulli.ppf", q, p)
    value = fnp.where(q <= 1 - p, fnp.zeros_like(q), fnp.ones_like(q))
    return fnp.where(_invalid(p) | _invalid(q), fnp.nan, value)
