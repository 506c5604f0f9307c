"""The beta-binomial distribution: `n` trials whose success probability is drawn from
Beta(a, b), as scipy.stats.betabinom. logpmf is -inf off the integers 0..n (shifted by loc)
and nan for n < 0 or a, b <= 0."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.scipy.special import betaln
from funcgrad.scipy.stats._params import nan_unless
from funcgrad.scipy.stats._support import off_support


def _valid(n, a, b, **_):
    return (n >= 0) & (a > 0) & (b > 0)


@nan_unless(_valid)
def logpmf(k: ArrayLike, n: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0) -> Array:
    """log C(n, y) + log B(y + a, n - y + b) - log B(a, b), with the binomial coefficient
    written as 1 / ((n + 1) B(n - y + 1, y + 1))."""
    (k, n, a, b, loc), kind = wide("betabinom.logpmf", k, n, a, b, loc)
    y = k - loc
    outside = off_support(y, n)
    y = fnp.where(outside, 0, y)
    log_choose = -fnp.log1p(n) - betaln(n - y + 1, y + 1)
    value = log_choose + betaln(y + a, n - y + b) - betaln(a, b)
    value = fnp.where(outside, -fnp.inf, value)
    return narrow(fnp.where((n < 0) | (a <= 0) | (b <= 0), fnp.nan, value), kind)


def pmf(k: ArrayLike, n: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0) -> Array:
    return fnp.exp(logpmf(k, n, a, b, loc))
