"""The gamma distribution with shape `a`, as scipy.stats.gamma.

logpdf is -inf below loc; the distribution functions are the regularized incomplete gamma
functions, the survival function computed directly (no 1 - cdf), and their logs are taken in
float64 so that a float32 tail does not underflow to -inf.
"""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import gammainc, gammaincc, gammaln, xlogy
from funcgrad.scipy.stats._logs import log_in_float64
from funcgrad.scipy.stats._params import nan_unless


def _valid(a, scale, **_):
    return (a > 0) & (scale > 0)


@nan_unless(_valid)
def logpdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    (x, a, loc, scale), kind = wide("gamma.logpdf", x, a, loc, scale)
    below = x < loc
    # Below loc, y is replaced by a point inside the support, so that the discarded branch
    # passes no nan to derivatives.
    y = fnp.where(below, 1, (x - loc) / scale)
    value = xlogy(a - 1, y) - y - gammaln(a) - fnp.log(scale)
    return narrow(fnp.where(below, -fnp.inf, value), kind)


def pdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, a, loc, scale))


@nan_unless(_valid)
def cdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, a, loc, scale = promote_args_inexact("gamma.cdf", x, a, loc, scale)
    y = fnp.maximum((x - loc) / scale, 0)
    # At y = inf the limit 1, which the incomplete function's inf / inf makes nan for a large
    # shape.
    return fnp.where(y == fnp.inf, 1, gammainc(a, y))


def logcdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, a, loc, scale = promote_args_inexact("gamma.logcdf", x, a, loc, scale)
    return log_in_float64(cdf, sf, x, a, loc, scale)


@nan_unless(_valid)
def sf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, a, loc, scale = promote_args_inexact("gamma.sf", x, a, loc, scale)
    y = fnp.maximum((x - loc) / scale, 0)
    return fnp.where(y == fnp.inf, 0, gammaincc(a, y))


def logsf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, a, loc, scale = promote_args_inexact("gamma.logsf", x, a, loc, scale)
    return log_in_float64(sf, cdf, x, a, loc, scale)
