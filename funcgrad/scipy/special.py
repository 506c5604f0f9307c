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
from funcgrad.scipy.series import (
    betainc,
    gammainc,
    gammaincc,
    i0,
    i0e,
    i1,
    i1e,
    polygamma,
    zeta,
)

__all__ = [
    "beta",
    "betainc",
    "betaln",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfinv",
    "expit",
    "factorial",
    "gamma",
    "gammainc",
    "gammaincc",
    "gammaln",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "kl_div",
    "log_softmax",
    "loggamma",
    "logit",
    "logsumexp",
    "multigammaln",
    "ndtr",
    "ndtri",
    "poch",
    "polygamma",
    "rel_entr",
    "softmax",
    "xlog1py",
    "xlogy",
    "zeta",
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
    return _times_log_where_finite(x, y, fnp.log, 1)


def xlog1py(x: ArrayLike, y: ArrayLike):
    """x * log1p(y), defined as 0 where x is 0 (whatever y is, as in JAX)."""
    x, y = promote_args_inexact("xlog1py", x, y)
    return _times_log_where_finite(x, y, fnp.log1p, 0)


def _times_log_where_finite(x, y, log, log_root):
    """x * log(y), 0 where x is 0. Where log(y) is finite the product itself is returned (it
    is 0 at x == 0), so the derivative in x at 0 is log(y), not the 0 of a constant branch;
    elsewhere at x == 0 y is replaced by `log_root` (log(log_root) == 0), so that
    0 * log(y) cannot be nan."""
    replace = (x == 0) & ~fnp.isfinite(log(y))
    return x * log(fnp.where(replace, log_root, y))


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


def gamma(x: ArrayLike):
    """Gamma(x) as sign * exp(log|Gamma(x)|): negative between -2k - 1 and -2k."""
    x = _inexact("gamma", x)
    negative = (x < 0) & (fnp.remainder(fnp.floor(x), 2) != 0)
    return fnp.where(negative, -1, 1) * fnp.exp(lax.lgamma(x))


def loggamma(x: ArrayLike):
    """log Gamma(x) for real x > 0 (NaN for x < 0, where Gamma can be negative)."""
    x = _inexact("loggamma", x)
    return fnp.where(x < 0, fnp.nan, lax.lgamma(x))


def betaln(a: ArrayLike, b: ArrayLike):
    """log|B(a, b)| = log|Gamma(a)| + log|Gamma(b)| - log|Gamma(a + b)|."""
    a, b = promote_args_inexact("betaln", a, b)
    return lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)


def beta(a: ArrayLike, b: ArrayLike):
    """B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b), with its sign."""
    a, b = promote_args_inexact("beta", a, b)
    return gamma(a) * gamma(b) / gamma(a + b)


def factorial(n: ArrayLike, exact: bool = False):
    """n! as Gamma(n + 1) for n >= 0, and 0 for negative n."""
    if exact:
        raise ValueError("factorial: exact=True needs Python integers; funcgrad computes floats")
    n = _inexact("factorial", n)
    return fnp.where(n < 0, 0, fnp.exp(lax.lgamma(n + 1)))


def poch(z: ArrayLike, m: ArrayLike):
    """The rising factorial Gamma(z + m) / Gamma(z)."""
    z, m = promote_args_inexact("poch", z, m)
    return gamma(z + m) / gamma(z)


def multigammaln(a: ArrayLike, d: int):
    """The log of the multivariate gamma function of dimension d."""
    a = _inexact("multigammaln", a)
    d = int(d)
    terms = fnp.stack([lax.lgamma(a - 0.5 * j) for j in range(d)])
    return d * (d - 1) / 4 * math.log(math.pi) + fnp.sum(terms, axis=0)


def rel_entr(x: ArrayLike, y: ArrayLike):
    """x log(x / y) for x, y > 0; 0 where x = 0 <= y; inf otherwise."""
    x, y = promote_args_inexact("rel_entr", x, y)
    both_positive = (x > 0) & (y > 0)
    safe_x, safe_y = fnp.where(both_positive, x, 1), fnp.where(both_positive, y, 1)
    value = safe_x * fnp.log(safe_x / safe_y)
    return fnp.where(both_positive, value, fnp.where((x == 0) & (y >= 0), 0, fnp.inf))


def kl_div(x: ArrayLike, y: ArrayLike):
    """x log(x / y) - x + y for x, y > 0; y where x = 0 <= y; inf otherwise."""
    x, y = promote_args_inexact("kl_div", x, y)
    both_positive = (x > 0) & (y > 0)
    safe_x, safe_y = fnp.where(both_positive, x, 1), fnp.where(both_positive, y, 1)
    value = safe_x * fnp.log(safe_x / safe_y) - safe_x + safe_y
    return fnp.where(both_positive, value, fnp.where((x == 0) & (y >= 0), y, fnp.inf))
