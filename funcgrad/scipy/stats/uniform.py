"""The uniform distribution on [loc, loc + scale], as scipy.stats.uniform."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats._params import nan_unless, positive_scale


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """-log(scale) on the support, -inf off it; nan where x, loc or scale is (a nan loc or
    scale leaves the support itself unknown, which no comparison may read as outside)."""
    x, loc, scale = promote_args_inexact("uniform.logpdf", x, loc, scale)
    inside = (x >= loc) & (x <= loc + scale)
    unknown = fnp.isnan(x) | fnp.isnan(loc) | fnp.isnan(scale)
    outside = fnp.where(unknown, fnp.nan, -fnp.inf)
    return fnp.where(inside, -fnp.log(scale), outside)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


@nan_unless(positive_scale)
def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("uniform.cdf", x, loc, scale)
    return fnp.clip((x - loc) / scale, 0, 1)


@nan_unless(positive_scale)
def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, loc, scale = promote_args_inexact("uniform.ppf", q, loc, scale)
    return fnp.where((q >= 0) & (q <= 1), loc + scale * q, fnp.nan)
