"""The logistic distribution, as scipy.stats.logistic: its cdf is the sigmoid expit and its
quantile function the logit."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import expit, logit
from funcgrad.scipy.stats._params import nan_unless, positive_scale


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """log(e^-y / (1 + e^-y)^2), written in |y| (the density is even) so that no exponential
    overflows."""
    x, loc, scale = promote_args_inexact("logistic.logpdf", x, loc, scale)
    y = fnp.abs((x - loc) / scale)
    return -y - 2 * fnp.log1p(fnp.exp(-y)) - fnp.log(scale)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


@nan_unless(positive_scale)
def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("logistic.cdf", x, loc, scale)
    return expit((x - loc) / scale)


@nan_unless(positive_scale)
def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("logistic.sf", x, loc, scale)
    return expit((loc - x) / scale)


@nan_unless(positive_scale)
def ppf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("logistic.ppf", x, loc, scale)
    return loc + scale * logit(x)


@nan_unless(positive_scale)
def isf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("logistic.isf", x, loc, scale)
    return loc - scale * logit(x)
