"""The chi-squared distribution with `df` degrees of freedom, as scipy.stats.chi2: the gamma
distribution of shape df / 2 and scale 2 (`gamma`'s functions, called so)."""

from __future__ import annotations

from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats import gamma


def _as_gamma(name: str, x, df, loc, scale) -> tuple:
    """(x, shape, loc, scale) of the gamma distribution that chi2's arguments describe."""
    x, df, loc, scale = promote_args_inexact(f"chi2.{name}", x, df, loc, scale)
    return x, 0.5 * df, loc, 2 * scale


def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """-inf below loc; at loc itself the density of df = 2 is its limit 1/2."""
    return gamma.logpdf(*_as_gamma("logpdf", x, df, loc, scale))


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return gamma.pdf(*_as_gamma("pdf", x, df, loc, scale))


def cdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return gamma.cdf(*_as_gamma("cdf", x, df, loc, scale))


def logcdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return gamma.logcdf(*_as_gamma("logcdf", x, df, loc, scale))


def sf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return gamma.sf(*_as_gamma("sf", x, df, loc, scale))


def logsf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return gamma.logsf(*_as_gamma("logsf", x, df, loc, scale))
