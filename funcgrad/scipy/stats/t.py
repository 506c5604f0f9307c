"""Student's t distribution with `df` degrees of freedom, as scipy.stats.t."""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import betaln
from funcgrad.scipy.stats._params import nan_unless


def _valid(df, scale, **_):
    return (df > 0) & (scale > 0)


@nan_unless(_valid)
def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """-log(sqrt(df) B(df / 2, 1 / 2) scale) - (df + 1) / 2 log1p(z^2 / df), z = (x - loc) /
    scale. The normalizer's gammaln(df / 2) - gammaln(df / 2 + 1 / 2) cancelled for large df
    (27% off at df = 1e7 in float32) and is betaln's; log1p(z^2 / df) is 2 log w + log1p(1 /
    w^2), w = |z| / sqrt(df), beyond w = 1 (2 log w as 2 log|z| - log df), where z^2
    overflowed; df = inf is the normal, and only inf: a NaN df is no limit of t's and stays
    NaN."""
    x, df, loc, scale = promote_args_inexact("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    finite = df != fnp.inf
    safe_df = fnp.where(finite, df, 1)
    w = fnp.abs(z) / fnp.sqrt(safe_df)
    far = w > 1
    near_w, far_w = fnp.where(far, 0, w), fnp.where(far, w, 1)
    far_log = 2 * fnp.log(fnp.where(far, fnp.abs(z), 1)) - fnp.log(fnp.where(far, safe_df, 1))
    log1p_square = fnp.where(
        far, far_log + fnp.log1p(1 / (far_w * far_w)), fnp.log1p(near_w * near_w)
    )
    value = (
        -betaln(0.5 * safe_df, 0.5) - 0.5 * fnp.log(safe_df) - (0.5 * safe_df + 0.5) * log1p_square
    )
    normal = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
    return fnp.where(finite, value, normal) - fnp.log(scale)


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, df, loc, scale))
