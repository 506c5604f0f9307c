"""SciPy's special functions with scipy.special's names, in terms of funcgrad.numpy and lax.

Integer and boolean inputs compute in float32, funcgrad's default float.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.nn import functions as nn
from funcgrad.nn.functions import ArrayLike, Axis, logsumexp
from funcgrad.numpy._float64 import narrow, wide
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.bessel import bessel_jn
from funcgrad.scipy.faddeeva import wofz
from funcgrad.scipy.gamma_differences import log_beta
from funcgrad.scipy.gauss_hypergeometric import hyp2f1
from funcgrad.scipy.harmonics import sph_harm_y
from funcgrad.scipy.hypergeometric import hyp1f1
from funcgrad.scipy.hypergeometric_series import sum_with_error
from funcgrad.scipy.integrals import (
    _bernoulli_numbers,
    dawsn,
    erfcx,
    exp1,
    expi,
    expn,
    fresnel,
    owens_t,
    sici,
    spence,
)
from funcgrad.scipy.series import (
    _narrow,
    _wide,
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
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = [
    "bernoulli",
    "bessel_jn",
    "beta",
    "betainc",
    "betaln",
    "boxcox",
    "boxcox1p",
    "comb",
    "dawsn",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "exp1",
    "expi",
    "expit",
    "expn",
    "factorial",
    "gamma",
    "gammainc",
    "gammaincc",
    "gammaln",
    "fresnel",
    "gammasgn",
    "hyp1f1",
    "hyp2f1",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "kl_div",
    "log_ndtr",
    "log_softmax",
    "loggamma",
    "logit",
    "logsumexp",
    "multigammaln",
    "ndtr",
    "ndtri",
    "poch",
    "owens_t",
    "polygamma",
    "rel_entr",
    "sici",
    "softmax",
    "spence",
    "sph_harm_y",
    "wofz",
    "xlog1py",
    "xlogy",
    "zeta",
]

_SQRT_2 = math.sqrt(2.0)
_SQRT_HALF = math.sqrt(0.5)


def _inexact(name: str, x: ArrayLike):
    (x,) = promote_args_inexact(name, x)
    return x


def erf(x: ArrayLike):
    return lax.erf(_inexact("erf", x))


def erfc(x: ArrayLike):
    return lax.erfc(_inexact("erfc", x))


def erfinv(x: ArrayLike):
    return lax.erf_inv(_inexact("erfinv", x))


def expit(x: ArrayLike):
    """The logistic sigmoid 1 / (1 + exp(-x))."""
    return lax.logistic(_inexact("expit", x))


def logit(x: ArrayLike):
    """log(x / (1 - x)), the inverse of expit: -inf at 0, inf at 1, nan outside [0, 1].
    Between 1/4 and 3/4, where that ratio is near 1 and its log would keep only the ratio's
    absolute precision (5e-4 relative at x = 0.49997 in float32), it is log1p((2x - 1) /
    (1 - x)), 2x - 1 exact there."""
    return _logit(_inexact("logit", x))


@custom_jvp
def _logit(x):
    near_half = (x > 0.25) & (x < 0.75)
    return fnp.where(near_half, fnp.log1p((2 * x - 1) / (1 - x)), fnp.log(x / (1 - x)))


@_logit.defjvp
def _logit_jvp(primals, tangents):
    # The slope 1 / (x (1 - x)) itself: differentiating the two branches above gave nan
    # wherever the branch not taken had an infinite slope (below x = 1e-16, at 0 and at 1).
    (x,), (tangent,) = primals, tangents
    return _logit(x), tangent / (x * (1 - x))


def gammaln(x: ArrayLike):
    """log|Gamma(x)|."""
    return lax.lgamma(_inexact("gammaln", x))


def digamma(x: ArrayLike):
    return lax.digamma(_inexact("digamma", x))


def ndtr(x: ArrayLike):
    """The standard normal CDF, as erfc(-x / sqrt 2) / 2 so that the lower tail keeps its
    relative precision. Narrower floats compute in float64: x / sqrt 2 rounds to the dtype,
    and erfc magnifies that error by about x^2 (in float32, 83 ulp at x = -9.9)."""
    (wide,), kind = _wide("ndtr", x)
    return _narrow(0.5 * lax.erfc(-_SQRT_HALF * wide), kind)


# Below these arguments ndtr(x) nears the end of its dtype's normal numbers, and log_ndtr takes
# the asymptotic series instead.
_LOG_NDTR_SERIES_BELOW = {dtypes.float64: -37.0, dtypes.float32: -10.0}
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def log_ndtr(x: ArrayLike, series_order: int = 3):
    """log(ndtr(x)), accurate in both tails, where log(ndtr(x)) itself is not.

    Above 0 it is log1p(-ndtr(-x)), which keeps the small mass that ndtr(x) rounds away from
    1. Below -37 in float64 (-10 in float32), where ndtr(x) is about to underflow, it is the
    asymptotic series of the Mills ratio,

        -x^2/2 - log(-x) - log(2 pi)/2 + log(1 + sum_{n=1..N} (-1)^n (2n - 1)!! / x^(2n)),

    with N = `series_order` (its error is below the next term, (2N + 1)!! / x^(2N + 2)).
    float16 and bfloat16 compute in float32. The derivative is pdf(x) / ndtr(x), taken as
    exp(log pdf(x) - log_ndtr(x)) so that it stays finite in the lower tail, and where the
    series is used as -x over the series, whose terms do not cancel.
    """
    if not isinstance(series_order, int) or isinstance(series_order, bool):
        raise TypeError(f"log_ndtr: series_order must be a Python int, got {series_order!r}")
    if not 0 <= series_order <= 30:
        raise ValueError(f"log_ndtr: series_order must be in [0, 30], got {series_order}")
    x = _inexact("log_ndtr", x)
    if x.dtype in (dtypes.float64, dtypes.float32):
        return _log_ndtr(x, series_order)
    wide = lax.convert_element_type(x, dtypes.float32)
    return lax.convert_element_type(_log_ndtr(wide, series_order), x.dtype)


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _log_ndtr(x, series_order: int):
    series_below = _LOG_NDTR_SERIES_BELOW[x.dtype]
    # Each branch is evaluated on arguments clipped to its own region, where it is finite.
    upper = fnp.log1p(-ndtr(-fnp.maximum(x, 0)))
    middle = fnp.log(ndtr(fnp.clip(x, series_below, 0)))
    lower = _log_ndtr_series(fnp.minimum(x, series_below), series_order)
    return fnp.where(x > 0, upper, fnp.where(x > series_below, middle, lower))


def _mills_series(x, series_order: int):
    """1 + sum_{n=1..N} (-1)^n (2n - 1)!! / x^(2n), the asymptotic series of -x ndtr(x) /
    pdf(x) for x far below 0."""
    inverse_square = 1 / (x * x)
    total, term = fnp.ones_like(x), fnp.ones_like(x)
    for n in range(1, series_order + 1):
        term = term * -(2 * n - 1) * inverse_square
        total = total + term
    return total


def _log_ndtr_series(x, series_order: int):
    """The asymptotic expansion of log ndtr(x) for x far below 0 (see log_ndtr)."""
    return -0.5 * x * x - fnp.log(-x) - _LOG_SQRT_2PI + fnp.log(_mills_series(x, series_order))


@_log_ndtr.defjvp
def _log_ndtr_jvp(series_order, primals, tangents):
    """pdf(x) / ndtr(x): in the series' range -x / series, elsewhere exp(log pdf(x) - value),
    whose two terms of size x^2 / 2 cancel there (the float32 slope at -1e4 was 2981 for
    1e4)."""
    (x,), (tangent,) = primals, tangents
    value = _log_ndtr(x, series_order)
    series_below = _LOG_NDTR_SERIES_BELOW[x.dtype]
    far = fnp.minimum(x, series_below)
    slope = fnp.where(
        x > series_below,
        fnp.exp(-0.5 * x * x - _LOG_SQRT_2PI - value),
        -far / _mills_series(far, series_order),
    )
    return value, tangent * slope


# Between these probabilities (exp(-2) from either end) ndtri is sqrt(2) erf_inv(2p - 1),
# which is well conditioned there; nearer the ends 2p - 1 loses p's digits.
_NDTRI_TAIL = math.exp(-2)
# Abramowitz and Stegun 26.2.23: -x within 4.5e-4 of t - (c0 + c1 t + c2 t^2) / (1 + d1 t +
# d2 t^2 + d3 t^3), t = sqrt(-2 log p), for p <= 1/2.
_AS_NUMERATOR = (2.515517, 0.802853, 0.010328)
_AS_DENOMINATOR = (1.0, 1.432788, 0.189269, 0.001308)
_NDTRI_NEWTON_STEPS = 3


def ndtri(p: ArrayLike):
    """The inverse of ndtr: the standard normal distribution's quantile of probability p.

    In the middle it is sqrt(2) erf_inv(2p - 1). Within exp(-2) of 0 it is the root of
    log_ndtr(x) = log(p) (within exp(-2) of 1, minus that of 1 - p, exact there), found by
    Newton's method from Abramowitz and Stegun's 26.2.23: on that concave function the steps
    approach the root from below, each squaring the error, so three reach float64's
    precision from the start's 4.5e-4, down to p = 1e-300 (where sqrt(2) erf_inv(2p - 1)
    gives -inf below about 1e-17, and loses digits well before). It computes in float64 and
    returns p's dtype.
    """
    (wide,), kind = _wide("ndtri", p)
    return _narrow(_ndtri(wide), kind)


def lower_tail_ndtri(log_q):
    """ndtri(q) from log q, for q below exp(-2) (float64): the root of log_ndtr(x) = log q
    (see ndtri), so q may lie far below the smallest float."""
    t = fnp.sqrt(-2 * log_q)
    numerator = _AS_NUMERATOR[0] + t * (_AS_NUMERATOR[1] + t * _AS_NUMERATOR[2])
    denominator = _AS_DENOMINATOR[0] + t * (
        _AS_DENOMINATOR[1] + t * (_AS_DENOMINATOR[2] + t * _AS_DENOMINATOR[3])
    )
    x = numerator / denominator - t
    for _ in range(_NDTRI_NEWTON_STEPS):
        value = _log_ndtr(x, 3)
        x = x - (value - log_q) * fnp.exp(value + 0.5 * x * x + _LOG_SQRT_2PI)
    return x


@custom_jvp
def _ndtri(p):
    upper = p > 0.5
    q = fnp.where(upper, 1 - p, p)
    tail = q < _NDTRI_TAIL
    middle = _SQRT_2 * lax.erf_inv(2 * fnp.where(tail, 0.5, p) - 1)
    x = lower_tail_ndtri(fnp.log(fnp.where(tail & (q > 0), q, _NDTRI_TAIL)))
    quantile = fnp.where(tail, fnp.where(upper, -x, x), middle)
    quantile = fnp.where(p == 0, -fnp.inf, fnp.where(p == 1, fnp.inf, quantile))
    return fnp.where((p >= 0) & (p <= 1), quantile, fnp.nan)


@_ndtri.defjvp
def _ndtri_jvp(primals, tangents):
    (p,), (tangent,) = primals, tangents
    x = _ndtri(p)
    return x, tangent * fnp.exp(0.5 * x * x + _LOG_SQRT_2PI)


def xlogy(x: ArrayLike, y: ArrayLike):
    """x * log(y), defined as 0 where x is 0 (for every y but NaN, as in SciPy)."""
    x, y = promote_args_inexact("xlogy", x, y)
    return _times_log_where_finite(x, y, fnp.log, 1)


def xlog1py(x: ArrayLike, y: ArrayLike):
    """x * log1p(y), defined as 0 where x is 0 (for every y but NaN, as in SciPy)."""
    x, y = promote_args_inexact("xlog1py", x, y)
    return _times_log_where_finite(x, y, fnp.log1p, 0)


def _times_log_where_finite(x, y, log, log_root):
    """x * log(y), +0 where x is 0. Where log(y) is finite the product itself is returned (it
    is 0 at x == 0), so the derivative in x at 0 is log(y), not the 0 of a constant branch;
    where log(y) is not finite at x == 0 (y outside log's domain included) y is replaced by
    `log_root` (log(log_root) == 0), so that 0 * log(y) cannot be nan; but a NaN y stays NaN:
    it is a missing value, not a point outside the domain.
    The zero at x == 0 is +0 whatever the signs of x and log(y), as SciPy defines it."""
    replace = (x == 0) & ~fnp.isfinite(log(y)) & ~fnp.isnan(y)
    product = x * log(fnp.where(replace, log_root, y))
    return fnp.where(x == 0, product + 0, product)


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
    """Gamma(x) as sign * exp(log|Gamma(x)|): negative between -2k - 1 and -2k, -inf at -0
    and NaN at the poles -1, -2, ... (as SciPy's and JAX's). Narrower floats compute in
    float64: exp magnifies log|Gamma|'s rounding by its size (62 ulp at x = 29 in float32)."""
    (wide,), kind = _wide("gamma", x)
    sign = fnp.where((wide == 0) & fnp.signbit(wide), -1.0, _gamma_sign(wide))
    value = sign * fnp.exp(lax.lgamma(wide))
    return _narrow(fnp.where((wide < 0) & (fnp.floor(wide) == wide), fnp.nan, value), kind)


def _gamma_sign(x):
    """The sign of Gamma(x) off its poles: -1 between -2k - 1 and -2k."""
    return fnp.where((x < 0) & (fnp.remainder(fnp.floor(x), 2) != 0), -1.0, 1.0)


def loggamma(x: ArrayLike):
    """log Gamma(x) for real x > 0 (NaN for x < 0, where Gamma can be negative)."""
    x = _inexact("loggamma", x)
    return fnp.where(x < 0, fnp.nan, lax.lgamma(x))


def _beta_at_double_poles(a, b):
    """Where one shape is a whole number <= 0 and the other a whole number > 0 with their sum
    <= 0, Gamma has poles above and below: B(-n, m) = (-1)^m B(m, n + 1 - m), finite (SciPy's
    beta(-3, 2) is 1/6). (where, ln|B| there, its sign)."""

    def double(pole, other):
        whole = (fnp.floor(pole) == pole) & (fnp.floor(other) == other)
        return whole & (pole <= 0) & (other > 0) & (pole + other <= 0)

    first, second = double(a, b), double(b, a)
    where = first | second
    pole, other = fnp.where(first, a, b), fnp.where(first, b, a)
    safe_other = fnp.where(where, other, 1.0)
    safe_rest = fnp.where(where, 1 - pole - other, 1.0)
    sign = fnp.where(fnp.fmod(safe_other, 2.0) == 0, 1.0, -1.0)
    return where, log_beta(safe_other, safe_rest), sign


def betaln(a: ArrayLike, b: ArrayLike):
    """log|B(a, b)| = log|Gamma(a)| + log|Gamma(b)| - log|Gamma(a + b)|, in float64 and
    without the cancellation of the lgamma of large arguments (gamma_differences.log_beta)."""
    (a, b), dtype = wide("betaln", a, b)
    double, log_double, _ = _beta_at_double_poles(a, b)
    return narrow(fnp.where(double, log_double, log_beta(a, b)), dtype)


def beta(a: ArrayLike, b: ArrayLike):
    """B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b), with its sign: exp(betaln) in float64,
    since the gammas themselves overflow long before their ratio does (B(30, 30) was NaN in
    float32, B(200, 200) in float64)."""
    (a, b), kind = wide("beta", a, b)
    double, log_double, sign_double = _beta_at_double_poles(a, b)
    sign = _gamma_sign(a) * _gamma_sign(b) * _gamma_sign(a + b)
    value = sign * fnp.exp(log_beta(a, b))
    return narrow(fnp.where(double, sign_double * fnp.exp(log_double), value), kind)


def factorial(n: ArrayLike, exact: bool = False):
    """n! as Gamma(n + 1) for n >= 0, and 0 for negative n."""
    if exact:
        raise ValueError("factorial: exact=True needs Python integers; funcgrad computes floats")
    n = _inexact("factorial", n)
    return fnp.where(n < 0, 0, fnp.exp(lax.lgamma(n + 1)))


def _log_gamma_near_poles(high, low):
    """(log|Gamma(x)|, its sign, sin(pi x) (for x <= 0)) for x = high + low, a rounded value
    and its rounding error: for x <= 0 by the reflection Gamma(x) = pi / (sin(pi x)
    Gamma(1 - x)), the sine taken at x's distance from the nearest whole number,
    (high - n) + low, exact, so that it keeps its digits next to a pole (where lgamma of
    the rounded x would not); inf at the poles."""
    left = high <= 0
    nearest = fnp.round(high)
    distance = fnp.where(left, (high - nearest) + low, 0.5)
    odd = fnp.fmod(nearest, 2.0) != 0
    sine = fnp.where(odd, -1.0, 1.0) * fnp.sin(math.pi * distance)
    mirror = fnp.where(left, 1 - high - low, 1.0)
    reflected = math.log(math.pi) - fnp.log(fnp.abs(sine)) - lax.lgamma(mirror)
    right = fnp.where(left, 1.0, high)
    positive = lax.lgamma(right) + low * lax.digamma(right)
    log = fnp.where(left, reflected, positive)
    return log, fnp.where(left & (sine < 0), -1.0, 1.0), sine


def _positive_rising(low, step):
    """log (low)_step for low > 0 and low + step > 0: ln Gamma(|step|) - ln B(., |step|)
    from the smaller of low and low + step, free of the cancellation of two lgammas of
    large arguments."""
    down = step < 0
    base, size = fnp.where(down, low + step, low), fnp.abs(step)
    log_ratio = lax.lgamma(size) - log_beta(base, size)
    return fnp.where(down, -log_ratio, log_ratio)


def poch(z: ArrayLike, m: ArrayLike):
    """The rising factorial Gamma(z + m) / Gamma(z) in float64, 1 at m = 0.

    Where z and z + m are positive, by betaln (_positive_rising), since the gammas overflow
    long before their ratio does (poch(200, 2) was inf / inf = NaN, for 40200). Where both
    are <= 0, by the reflection (z)_m = sin(pi z) / sin(pi (z + m)) (1 - z - m)_m, whose
    arguments are positive, the sines taken at the distances of z and z + m from their
    nearest whole numbers, exactly ((-1)^m for whole m: poch(-3, 2) was NaN, for 6;
    poch(-457 - 6.6e-11, -93) kept 3 digits, poch(-303 - 1.8e-12, 1.6e-9) 4). Where one
    is <= 0, its gamma by the same reflection (_log_gamma_near_poles). The derivatives are
    (z)_m (psi(z + m) - psi(z)) in z and (z)_m psi(z + m) in m."""
    (z, m), kind = wide("poch", z, m)
    return narrow(_poch(z, m), kind)


@custom_jvp
def _poch(z, m):
    top, top_low = sum_with_error(z, m)
    both_positive = (z > 0) & (top > 0)
    both_left = (z <= 0) & (top <= 0)
    whole_m = fnp.floor(m) == m
    positive = _positive_rising(fnp.where(both_positive, z, 1.0), fnp.where(both_positive, m, 1.0))
    # both <= 0: the sines' ratio, then (w)_m at w = 1 - z - m > 0
    w = fnp.where(both_left, (1 - z) - m, 1.0)
    rising = _positive_rising(w, fnp.where(both_left & (m != 0), m, 1.0))
    z_log, z_sign, z_sine = _log_gamma_near_poles(z, fnp.zeros_like(z))
    top_log, top_sign, top_sine = _log_gamma_near_poles(top, top_low)
    # (at poles of Gamma(z) and Gamma(z + m) both, whole m: the limit (-1)^m)
    odd_m = fnp.fmod(m, 2.0) != 0
    sines = fnp.where(whole_m, 0.0, fnp.log(fnp.abs(z_sine)) - fnp.log(fnp.abs(top_sine)))
    left_sign = fnp.where(whole_m, fnp.where(odd_m, -1.0, 1.0), top_sign * z_sign)
    log = fnp.where(both_left, sines + rising, top_log - z_log)
    log = fnp.where(both_positive, positive, log)
    sign = fnp.where(both_positive, 1.0, fnp.where(both_left, left_sign, top_sign * z_sign))
    # At a pole of Gamma(z + m) alone the ratio is +inf, as SciPy's: the pole has no sign (it
    # is -inf on one side and +inf on the other), and the sign above was its rounding's.
    top_pole = (top <= 0) & (fnp.floor(top) == top) & (top_low == 0)
    z_pole = (z <= 0) & (fnp.floor(z) == z)
    value = fnp.where(top_pole & ~z_pole, fnp.inf, sign * fnp.exp(log))
    return fnp.where(m == 0, 1.0, value)


@_poch.defjvp
def _poch_jvp(primals, tangents):
    z, m = primals
    dz, dm = tangents
    value = _poch(z, m)
    top_slope = lax.digamma(z + m)
    return value, value * (top_slope - lax.digamma(z)) * dz + value * top_slope * dm


def multigammaln(a: ArrayLike, d: int):
    """The log of the multivariate gamma function of dimension d."""
    a = _inexact("multigammaln", a)
    d = int(d)
    terms = fnp.stack([lax.lgamma(a - 0.5 * j) for j in range(d)])
    return d * (d - 1) / 4 * math.log(math.pi) + fnp.sum(terms, axis=0)


def _log1p_minus(u):
    """log1p(u) - u: for |u| < 0.1 its series -u^2/2 + u^3/3 - ... (to u^17), else directly."""
    small = fnp.abs(u) < 0.1
    near = fnp.where(small, u, 0.0)
    series = fnp.zeros_like(u)
    for k in range(17, 1, -1):
        series = (series + (-1.0) ** (k + 1) / k) * near
    return fnp.where(small, series * near, fnp.log1p(u) - u)


def _relative_entropy(name: str, x: ArrayLike, y: ArrayLike, offset: bool):
    """x log(x / y) (- x + y with `offset`) for x, y > 0 in float64, where x / y does not
    overflow (7 / 1e-45 did in float32); 0 (y) where x = 0 <= y; NaN for a NaN; else inf.
    Where even float64's x / y leaves [1e-300, 1e300], as x (log x - log y), whose difference
    is then too large to cancel (rel_entr(1e-200, 1e200) was x log 0 = -inf); where x / y is
    within [1/2, 2], as x log1p((x - y) / y), x - y exact (the rounding of x / y near 1 cost
    rel_entr(0.5, 0.499999999) 8 digits). kl_div there is y ((log1p(u) - u) + u log1p(u))
    with u = (x - y) / y, log1p(u) - u by its series for |u| < 0.1, so that the difference of
    x log(x / y) and x - y, of order u^2 / 2, does not cancel to nothing."""
    (x, y), kind = wide(name, x, y)
    both_positive = (x > 0) & (y > 0)
    safe_x, safe_y = fnp.where(both_positive, x, 1), fnp.where(both_positive, y, 1)
    ratio = safe_x / safe_y
    extreme = (ratio < 1e-300) | (ratio > 1e300)
    near = (ratio >= 0.5) & (ratio <= 2)
    log_ratio = fnp.where(
        extreme, fnp.log(safe_x) - fnp.log(safe_y), fnp.log(fnp.where(extreme, 1.0, ratio))
    )
    # (0 off the near branch: at u = -1 its log1p's infinite slope made gradients NaN.)
    u = fnp.where(near, (safe_x - safe_y) / safe_y, 0.0)
    log_ratio = fnp.where(near, fnp.log1p(u), log_ratio)
    value = safe_x * log_ratio
    zero_x = 0.0
    if offset:
        value, zero_x = value - safe_x + safe_y, y
        value = fnp.where(near, safe_y * (_log1p_minus(u) + u * fnp.log1p(u)), value)
    value = fnp.where(both_positive, value, fnp.where((x == 0) & (y >= 0), zero_x, fnp.inf))
    return narrow(fnp.where(fnp.isnan(x) | fnp.isnan(y), fnp.nan, value), kind)


def rel_entr(p: ArrayLike, q: ArrayLike):
    """p log(p / q) for p, q > 0; 0 where p = 0 <= q; inf otherwise."""
    return _relative_entropy("rel_entr", p, q, offset=False)


def kl_div(p: ArrayLike, q: ArrayLike):
    """p log(p / q) - p + q for p, q > 0; q where p = 0 <= q; inf otherwise."""
    return _relative_entropy("kl_div", p, q, offset=True)


def gammasgn(x: ArrayLike):
    """The sign of Gamma(x): 1 for x > 0, -1 between -2k - 1 and -2k (and at -0, where
    Gamma is -inf), NaN at the poles -1, -2, ... and at -inf, as SciPy's."""
    x = _inexact("gammasgn", x)
    negative = (x < 0) & (fnp.remainder(fnp.floor(x), 2) != 0)
    sign = fnp.where(negative | ((x == 0) & fnp.signbit(x)), -1.0, 1.0).astype(x.dtype)
    pole = (x < 0) & (fnp.floor(x) == x)
    return fnp.where(pole | fnp.isnan(x), fnp.nan, sign)


# Up to this many factors the binomial coefficient is their product, within a few ulp;
# beyond it exp(log Gamma differences), which loses about their size in ulp.
_COMB_PRODUCT_TERMS = 40


def comb(N: ArrayLike, k: ArrayLike, *, repetition: bool = False):
    """The number of combinations of N things taken k at a time, Gamma(N + 1) /
    (Gamma(k + 1) Gamma(N - k + 1)), for real 0 <= k <= N (0 elsewhere); with `repetition`,
    comb(N + k - 1, k).

    Where k or N - k is a whole number up to 40 it is the product prod_j (N - m + j) / j over
    the smaller m of the two (within 8 ulp in float64); elsewhere 1 / ((N + 1) B(k + 1,
    N - k + 1)) by betaln, which does not difference the lgamma of large arguments
    (comb(1e20, 0.5) was 1, for 1.1e10). Computed in float64."""
    (N, k), kind = _wide("comb", N, k)
    if repetition:
        N = N + k - 1
    valid = (k <= N) & (N >= 0) & (k >= 0)
    safe_N, safe_k = fnp.where(valid, N, 1.0), fnp.where(valid, k, 0.0)
    rest = safe_N - safe_k
    use_rest = (fnp.floor(rest) == rest) & ((rest < safe_k) | (fnp.floor(safe_k) != safe_k))
    m = fnp.where(use_rest, rest, safe_k)
    whole = (fnp.floor(m) == m) & (m <= _COMB_PRODUCT_TERMS)
    product = fnp.ones_like(safe_N)
    for j in range(1, _COMB_PRODUCT_TERMS + 1):
        factor = (safe_N - m + j) / j
        product = fnp.where(j <= m, product * factor, product)
    logs = -fnp.log1p(safe_N) - log_beta(safe_k + 1, rest + 1)
    value = fnp.where(whole, product, fnp.exp(logs))
    return _narrow(fnp.where(valid, value, 0.0), kind)


def bernoulli(n: int):
    """The Bernoulli numbers B_0 ... B_n (B_1 = -1/2, as SciPy's), exact rationals from their
    recurrence, rounded once to the default float dtype; n must be a Python int."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"bernoulli: n must be a Python int, got {n!r}")
    if n < 0:
        raise ValueError(f"bernoulli: n must be non-negative, got {n}")
    return fnp.asarray([float(b) for b in _bernoulli_numbers(int(n) + 1)])


def _boxcox_of_log(log_x, lmbda):
    """(exp(lmbda log x) - 1) / lmbda, as log x times the Taylor series of expm1(y) / y where
    y = lmbda log x is small (so that it is log x at lmbda = 0, with its derivative in lmbda,
    (log x)^2 / 2, kept), expm1(y) / lmbda elsewhere, and from y = 40 on (where the 1 is
    below the rounding) exp(y - log|lmbda|), which does not overflow before the result does
    (boxcox(2.5, 100) was inf in float32, for 6.2e37)."""
    finite = fnp.isfinite(log_x)  # (x = 0 or inf: the limits -1 / lmbda, and inf or 0 there)
    y = lmbda * fnp.where(finite, log_x, 0.0)
    small = (finite & (fnp.abs(y) < 1e-4)) | (lmbda == 0)
    large = finite & (y > 40)
    near = fnp.where(small, y, 0.0)
    taylor = log_x * (1 + near / 2 * (1 + near / 3 * (1 + near / 4 * (1 + near / 5))))
    elsewhere = small | large
    exact = fnp.expm1(fnp.where(elsewhere, 0.0, lmbda * log_x)) / fnp.where(elsewhere, 1.0, lmbda)
    safe_lmbda = fnp.where(large, lmbda, 1.0)
    log_scaled = fnp.where(large, y, 0.0) - fnp.log(fnp.abs(safe_lmbda))
    scaled = fnp.sign(safe_lmbda) * fnp.exp(log_scaled)
    return fnp.where(small, taylor, fnp.where(large, scaled, exact))


def boxcox(x: ArrayLike, lmbda: ArrayLike):
    """The Box-Cox transformation (x^lmbda - 1) / lmbda, log x at lmbda = 0, taken as
    expm1(lmbda log x) / lmbda (a Taylor series in lmbda log x where that is below 1e-4, so
    that it is accurate and differentiable through lmbda = 0); NaN for x < 0."""
    x, lmbda = promote_args_inexact("boxcox", x, lmbda)
    return _boxcox_of_log(fnp.log(x), lmbda)


def boxcox1p(x: ArrayLike, lmbda: ArrayLike):
    """The Box-Cox transformation of 1 + x, ((1 + x)^lmbda - 1) / lmbda, with log1p(x) in
    place of log x, so that it keeps its precision for small x; NaN for x < -1."""
    x, lmbda = promote_args_inexact("boxcox1p", x, lmbda)
    return _boxcox_of_log(fnp.log1p(x), lmbda)
