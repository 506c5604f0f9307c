"""The wrapped Cauchy distribution on [0, 2 pi] with shape `c`, as scipy.stats.wrapcauchy.
logpdf is -inf off [0, 2 pi] and nan unless 0 < c < 1."""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact


def logpdf(x: ArrayLike, c: ArrayLike) -> Array:
    x, c = promote_args_inexact("wrapcauchy.logpdf", x, c)
    # 1 + c^2 - 2 c cos x as a sum of two non-negative terms, which cannot cancel as c nears 1.
    denominator = fnp.square(1 - c) + 4 * c * fnp.square(fnp.sin(0.5 * x))
    value = fnp.log1p(-c * c) - math.log(2 * math.pi) - fnp.log(denominator)
    value = fnp.where((x < 0) | (x > 2 * math.pi), -fnp.inf, value)
    return fnp.where((c > 0) & (c < 1), value, fnp.nan)


def pdf(x: ArrayLike, c: ArrayLike) -> Array:
    return fnp.exp(logpdf(x, c))
