"""Student's t distribution with `df` degrees of freedom, as scipy.stats.t."""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import gammaln


def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, df, loc, scale = promote_args_inexact("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half_df = 0.5 * df
    log_normalizer = (
        gammaln(half_df)
        - gammaln(half_df + 0.5)
        + 0.5 * (fnp.log(df) + math.log(math.pi))
        + fnp.log(scale)
    )
    return -log_normalizer - (half_df + 0.5) * fnp.log1p(z * z / df)


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, df, loc, scale))
