"""The von Mises distribution on the circle with concentration `kappa`, as
scipy.stats.vonmises (unnormalized in x: the density repeats with period 2 pi).

The normalizer 2 pi I0(kappa) is taken as 2 pi i0e(kappa) e^kappa, so large concentrations do
not overflow, and cos(x) - 1 as -2 sin(x / 2)^2, which keeps its digits near x = 0 where large
concentrations look (cos x rounded to 1 gave the peak's density at x = 1e-3, kappa = 1e6).
logpdf is nan for kappa <= 0.
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
    half_sine = fnp.sin(x / 2)
    value = -2 * safe_kappa * half_sine * half_sine - fnp.log(2 * math.pi * i0e(safe_kappa))
    return fnp.where(valid, value, fnp.nan)


def pdf(x: ArrayLike, kappa: ArrayLike) -> Array:
    return fnp.exp(logpdf(x, kappa))
