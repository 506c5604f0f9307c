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


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("cauchy.cdf", x, loc, scale)
    return fnp.arctan2(1, (loc - x) / scale) / math.pi


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.log(cdf(x, loc, scale))


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("cauchy.sf", x, loc, scale)
    return fnp.arctan2(1, (x - loc) / scale) / math.pi


def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.log(sf(x, loc, scale))


def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, loc, scale = promote_args_inexact("cauchy.ppf", q, loc, scale)
    return loc + scale * fnp.tan(math.pi * (q - 0.5))


def isf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, loc, scale = promote_args_inexact("cauchy.isf", q, loc, scale)
    return loc + scale * fnp.tan(math.pi * (0.5 - q))
