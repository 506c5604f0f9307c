"""The von Mises distribution on the circle with concentration `kappa`, as
scipy.stats.vonmises (unnormalized in x: the density repeats with period 2 pi).

The normalizer 2 pi I0(kappa) is taken as 2 pi i0e(kappa) e^kappa, so large concentrations do
not overflow. logpdf is nan for kappa <= 0.
"""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import i0e


def logpdf(x: ArrayLike, kappa: ArrayLike) -> Array:
    x, kappa = promote_args_inexact("vonmises.logpdf", x, kappa)
    valid = kappa > 0
    safe_kappa = fnp.where(valid, kappa, 1)
    value = safe_kappa * (fnp.cos(x) - 1) - fnp.log(2 * math.pi * i0e(safe_kappa))
    return fnp.where(valid, value, fnp.nan)


def pdf(x: ArrayLike, kappa: ArrayLike) -> Array:
    return fnp.exp(logpdf(x, kappa))
