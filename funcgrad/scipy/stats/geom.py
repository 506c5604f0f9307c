"""The geometric distribution of the number of trials up to the first success, as
scipy.stats.geom: logpmf is -inf off the integers 1, 2, ... (shifted by loc)."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import xlog1py
from funcgrad.scipy.stats._params import nan_unless, probability
from funcgrad.scipy.stats._support import off_support


@nan_unless(probability)
def logpmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    k, p, loc = promote_args_inexact("geom.logpmf", k, p, loc)
    y = k - loc
    outside = off_support(y - 1)
    y = fnp.where(outside, 1, y)
    return fnp.where(outside, -fnp.inf, xlog1py(y - 1, -p) + fnp.log(p))


def pmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Array:
    return fnp.exp(logpmf(k, p, loc))
