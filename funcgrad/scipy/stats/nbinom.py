"""The negative binomial distribution of the failures before the `n`-th success, as
scipy.stats.nbinom: logpmf is -inf off the integers 0, 1, ... (shifted by loc)."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import gammaln, xlog1py, xlogy
from funcgrad.scipy.stats._support import off_support


def logpmf(k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    k, n, p, loc = promote_args_inexact("nbinom.logpmf", k, n, p, loc)
    y = k - loc
    outside = off_support(y)
    y = fnp.where(outside, 0, y)
    log_choose = gammaln(y + n) - gammaln(n) - gammaln(y + 1)
    value = log_choose + xlogy(n, p) + xlog1py(y, -p)
    return fnp.where(outside, -fnp.inf, value)


def pmf(k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    return fnp.exp(logpmf(k, n, p, loc))
