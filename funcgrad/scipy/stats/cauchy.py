"""The Cauchy distribution, as scipy.stats.cauchy.

Its tails fall as 1 / |y|, so the functions are written to keep them: log(1 + y^2) becomes
2 log|y| + log1p(1 / y^2) before y^2 can overflow, and cdf(y) = atan2(1, -y) / pi holds the
lower tail's small mass that 1/2 + atan(y) / pi would cancel away (sf the upper tail's).
"""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats._params import nan_unless, positive_scale


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("cauchy.logpdf", x, loc, scale)
    y = fnp.abs((x - loc) / scale)
    # Each branch's y kept in its range by a select: minimum and maximum split their
    # derivative at the tie y = 1, which halved the slope there.
    near, far = fnp.where(y <= 1, y, 1), fnp.where(y <= 1, 1, y)
    log1p_square = fnp.where(
        y <= 1, fnp.log1p(near * near), 2 * fnp.log(far) + fnp.log1p(1 / (far * far))
    )
    return -log1p_square - fnp.log(scale) - math.log(math.pi)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


@nan_unless(positive_scale)
def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("cauchy.cdf", x, loc, scale)
    return fnp.arctan2(1, (loc - x) / scale) / math.pi


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return _log_of_one_side(cdf(x, loc, scale), sf(x, loc, scale))


@nan_unless(positive_scale)
def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("cauchy.sf", x, loc, scale)
    return fnp.arctan2(1, (x - loc) / scale) / math.pi


def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return _log_of_one_side(sf(x, loc, scale), cdf(x, loc, scale))


def _log_of_one_side(side, other):
    """log(side) as log1p(-other) where side is near 1: log of a side rounded to 1 lost the
    other tail's small mass (logsf(-3.6e6) was 32% off in float32)."""
    return fnp.where(side > 0.5, fnp.log1p(-other), fnp.log(side))


def _standard_quantile(q):
    """tan(pi (q - 1/2)), as -cot(pi q) and cot(pi (1 - q)) in the outer quarters: there the
    tangent's argument, rounded near pi/2, was its pole's magnified error (isf(0.0026) 11% off
    in float16)."""
    low, high = q < 0.25, q > 0.75
    middle = fnp.tan(math.pi * (fnp.where(low | high, 0.5, q) - 0.5))
    outer = math.pi * fnp.where(low, q, fnp.where(high, 1 - q, 0.25))
    cotangent = 1 / fnp.tan(outer)
    value = fnp.where(low, -cotangent, fnp.where(high, cotangent, middle))
    return fnp.where((q >= 0) & (q <= 1), value, fnp.nan)


@nan_unless(positive_scale)
def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, loc, scale = promote_args_inexact("cauchy.ppf", q, loc, scale)
    return loc + scale * _standard_quantile(q)


@nan_unless(positive_scale)
def isf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, loc, scale = promote_args_inexact("cauchy.isf", q, loc, scale)
    return loc - scale * _standard_quantile(q)
