"""The generalized normal distribution with shape `beta` (density proportional to
exp(-|x|^beta): Laplace at 1, normal at 2), as scipy.stats.gennorm."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import gammaincc, gammaln
from funcgrad.scipy.stats._params import nan_unless


def _abs_power(x, beta):
    """|x|^beta, 0 at x = 0 with a derivative in beta of 0 there (not 0 * log 0)."""
    magnitude = fnp.abs(x)
    zero = magnitude == 0
    return fnp.where(zero, 0, fnp.where(zero, 1, magnitude) ** beta)


def _valid(beta, **_):
    return beta > 0


@nan_unless(_valid)
def logpdf(x: ArrayLike, beta: ArrayLike) -> Array:
    x, beta = promote_args_inexact("gennorm.logpdf", x, beta)
    return fnp.log(0.5 * beta) - gammaln(1 / beta) - _abs_power(x, beta)


def pdf(x: ArrayLike, beta: ArrayLike) -> Array:
    return fnp.exp(logpdf(x, beta))


@nan_unless(_valid)
def cdf(x: ArrayLike, beta: ArrayLike) -> Array:
    """Each half's tail is Q(1/beta, |x|^beta) / 2; the lower half returns it, the upper 1 minus
    it, so the lower tail keeps its small values."""
    x, beta = promote_args_inexact("gennorm.cdf", x, beta)
    half_tail = 0.5 * gammaincc(1 / beta, _abs_power(x, beta))
    return fnp.where(x < 0, half_tail, 1 - half_tail)
