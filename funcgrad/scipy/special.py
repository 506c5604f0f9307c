"""SciPy's special functions with scipy.special's names, in terms of funcgrad.numpy and lax.

Integer and boolean inputs compute in float32, funcgrad's default float.
"""

from __future__ import annotations

import math

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.nn import functions as nn
from funcgrad.nn.functions import ArrayLike, Axis, logsumexp
from funcgrad.numpy._promotion import promote_args_inexact

__all__ = [
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfinv",
    "expit",
    "gammaln",
    "log_softmax",
    "logit",
    "logsumexp",
    "ndtr",
    "ndtri",
    "softmax",
    "xlog1py",
    "xlogy",
]

_SQRT_2 = math.sqrt(2.0)
_SQRT_HALF = math.sqrt(0.5)


def _inexact(name: str, x: ArrayLike):
    (x,) = promote_args_inexact(name, x)
    return x


def erf(z: ArrayLike):
    return lax.erf(_inexact("erf", z))


def erfc(x: ArrayLike):
    return lax.erfc(_inexact("erfc", x))


def erfinv(y: ArrayLike):
    return lax.erf_inv(_inexact("erfinv", y))


def expit(x: ArrayLike):
    """The logistic sigmoid 1 / (1 + exp(-x))."""
    return lax.logistic(_inexact("expit", x))


def logit(x: ArrayLike):
    """log(x / (1 - x)), the inverse of expit: -inf at 0, inf at 1, nan outside [0, 1]."""
    x = _inexact("logit", x)
    return fnp.log(x / (1 - x))


def gammaln(x: ArrayLike):
    """log|Gamma(x)|."""
    return lax.lgamma(_inexact("gammaln", x))


def digamma(x: ArrayLike):
    return lax.digamma(_inexact("digamma", x))


def ndtr(x: ArrayLike):
    """The standard normal CDF, as erfc(-x / sqrt 2) / 2 so that the lower tail keeps its
    relative precision."""
    x = _inexact("ndtr", x)
    return 0.5 * lax.erfc(-_SQRT_HALF * x)


def ndtri(p: ArrayLike):
    """The inverse of ndtr, as sqrt(2) * erf_inv(2p - 1).

    Probabilities nearer to 0 or 1 than about the dtype's epsilon round 2p - 1 to -1 or 1, so
    the far tails come out as -inf or inf rather than accurate quantiles.
    """
    p = _inexact("ndtri", p)
    return _SQRT_2 * lax.erf_inv(2 * p - 1)


def xlogy(x: ArrayLike, y: ArrayLike):
    """x * log(y), defined as 0 where x is 0 (whatever y is, as in JAX)."""
    x, y = promote_args_inexact("xlogy", x, y)
    return fnp.where(x == 0, 0, x * fnp.log(y))


def xlog1py(x: ArrayLike, y: ArrayLike):
    """x * log1p(y), defined as 0 where x is 0 (whatever y is, as in JAX)."""
    x, y = promote_args_inexact("xlog1py", x, y)
    return fnp.where(x == 0, 0, x * fnp.log1p(y))


def entr(x: ArrayLike):
    """The elementwise entropy -x log x: 0 at 0 and -inf for negative x."""
    x = _inexact("entr", x)
    return fnp.where(x < 0, -fnp.inf, -xlogy(x, x))


def softmax(x: ArrayLike, axis: Axis = None):
    """SciPy's softmax, which normalizes over all axes unless given one."""
    return nn.softmax(x, axis=axis)


def log_softmax(x: ArrayLike, axis: Axis = None):
    """SciPy's log_softmax, which normalizes over all axes unless given one."""
    return nn.log_softmax(x, axis=axis)
