"""The negative binomial distribution of the failures before the `n`-th success, as
scipy.stats.nbinom: logpmf is -inf off the integers 0, 1, ... (shifted by loc)."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.scipy.special import gammaln, xlog1py, xlogy
from funcgrad.scipy.stats._params import nan_unless
from funcgrad.scipy.stats._support import off_support


def _valid(n, p, **_):
    return (n >= 0) & (p >= 0) & (p <= 1)


@nan_unless(_valid)
def logpmf(k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    (k, n, p, loc), kind = wide("nbinom.logpmf", k, n, p, loc)
    y = k - loc
    outside = off_support(y)
    y = fnp.where(outside, 0, y)
    log_choose = gammaln(y + n) - gammaln(n) - gammaln(y + 1)
    value = log_choose + xlogy(n, p) + xlog1py(y, -p)
    return narrow(fnp.where(outside, -fnp.inf, value), kind)


def pmf(k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    return fnp.exp(logpmf(k, n, p, loc))
