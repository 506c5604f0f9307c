"""The beta distribution on [loc, loc + scale], as scipy.stats.beta.

logpdf is -inf outside the support and nan for a, b or scale <= 0; the distribution functions
come from the regularized incomplete beta function (the survival function from its mirror
image I_{1-y}(b, a) where the cdf is large, so that neither tail is computed as 1 minus the
other), and their logs are taken in float64 so that a float32 tail does not underflow to -inf.
"""

from __future__ import annotations

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import betainc, betaln, xlog1py, xlogy
from funcgrad.scipy.stats._logs import log_in_float64
from funcgrad.scipy.stats._params import nan_unless


def _valid(a, b, scale, **_):
    return (a > 0) & (b > 0) & (scale > 0)


@nan_unless(_valid)
def logpdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    (x, a, b, loc, scale), kind = wide("beta.logpdf", x, a, b, loc, scale)
    outside = (x < loc) | (x > loc + scale)
    # Outside the support y is replaced by a point inside, so that the discarded branch
    # stays finite and passes no nan to derivatives; inside, the clip keeps a rounding of
    # (x - loc) / scale at the ends from stepping out of [0, 1].
    y = fnp.where(outside, 0.5, fnp.clip((x - loc) / scale, 0, 1))
    value = xlogy(a - 1, y) + xlog1py(b - 1, -y) - betaln(a, b) - fnp.log(scale)
    value = fnp.where(outside, -fnp.inf, value)
    return narrow(fnp.where((a <= 0) | (b <= 0) | (scale <= 0), fnp.nan, value), kind)


def pdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    return fnp.exp(logpdf(x, a, b, loc, scale))


@nan_unless(_valid)
def cdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    x, a, b, loc, scale = promote_args_inexact("beta.cdf", x, a, b, loc, scale)
    return betainc(a, b, fnp.clip((x - loc) / scale, 0, 1))


def logcdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    x, a, b, loc, scale = promote_args_inexact("beta.logcdf", x, a, b, loc, scale)
    return log_in_float64(cdf, sf, x, a, b, loc, scale)


@nan_unless(_valid)
def sf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """1 - cdf where the cdf is at most 1/2 (no cancellation), I_{1-y}(b, a) where it is more.
    In float64 whatever the dtype: 1 - y would round a small y away in float32, and the
    incomplete beta function computes in float64 anyway."""
    x, a, b, loc, scale = promote_args_inexact("beta.sf", x, a, b, loc, scale)
    y = fnp.clip((x - loc) / scale, 0, 1)
    y, a, b = (lax.convert_element_type(v, dtypes.float64) for v in (y, a, b))
    lower = betainc(a, b, y)
    value = fnp.where(lower <= 0.5, 1 - lower, betainc(b, a, 1 - y))
    return lax.convert_element_type(value, x.dtype)


def logsf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    x, a, b, loc, scale = promote_args_inexact("beta.logsf", x, a, b, loc, scale)
    return log_in_float64(sf, cdf, x, a, b, loc, scale)
