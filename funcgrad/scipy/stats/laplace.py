"""The Laplace (double exponential) distribution, as scipy.stats.laplace."""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats._params import nan_unless, positive_scale


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("laplace.logpdf", x, loc, scale)
    return -fnp.abs(x - loc) / scale - fnp.log(scale) - math.log(2)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


@nan_unless(positive_scale)
def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """exp(y) / 2 below loc, 1 - exp(-y) / 2 above. Each side's exponential sees only its own
    half of y, so neither overflows into the other's derivative; the halves are selected, not
    clamped by minimum and maximum, whose derivatives split at the tie y = 0 (halving the
    density there)."""
    x, loc, scale = promote_args_inexact("laplace.cdf", x, loc, scale)
    y = (x - loc) / scale
    below = y <= 0
    lower = 0.5 * fnp.exp(fnp.where(below, y, 0))
    upper = 1 - 0.5 * fnp.exp(-fnp.where(below, 0, y))
    return fnp.where(below, lower, upper)
