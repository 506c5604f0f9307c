"""The modified Bessel functions of orders 0 and 1, I0 and I1, and their exponentially scaled
forms i0e and i1e: numpy.i0, and scipy.special's i0, i1, i0e and i1e.

They compute in float64 whatever the input dtype: below |x| = 30 the power series (all
terms positive), above the asymptotic expansion (25 terms reach 1e-19 there), within 1e-14
relative of SciPy's. I0 and I1 carry their derivatives I1 and (I0 + I2) / 2 as custom jvps,
so that every order is right at x = 0, where |x| (whose derivative there is taken as 0)
would lose the second.
"""

from __future__ import annotations

import math

from funcgrad.numpy import ufuncs
from funcgrad.numpy._float64 import horner, narrow, wide
from funcgrad.numpy.misc import where
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = ["i0"]

_BESSEL_SERIES_BELOW = 30.0
_I0_SERIES = [1 / math.factorial(k) ** 2 for k in range(75)]  # in (x/2)^2
_I1_SERIES = [1 / (math.factorial(k) * math.factorial(k + 1)) for k in range(75)]


def _asymptotic(order: int, terms: int = 25) -> list[float]:
    """I_order(x) e^-x sqrt(2 pi x) = sum_k c_k / x^k, with
    c_k = prod_{j <= k} ((2j - 1)^2 - 4 order^2) / (8j)."""
    coefficients, c = [1.0], 1.0
    for j in range(1, terms):
        c *= ((2 * j - 1) ** 2 - 4 * order**2) / (8 * j)
        coefficients.append(c)
    return coefficients


_I0_ASYMPTOTIC, _I1_ASYMPTOTIC = _asymptotic(0), _asymptotic(1)


def _scaled_bessel(x, series, asymptotic, odd: bool):
    a = ufuncs.absolute(x)
    # (each branch's argument kept in its range by a select, not by minimum and maximum, whose
    # derivatives split at a tie: at |x| = 30 the branch taken would get half the derivative)
    in_series = a < _BESSEL_SERIES_BELOW
    near = where(in_series, a, _BESSEL_SERIES_BELOW)
    far = where(in_series, _BESSEL_SERIES_BELOW, a)
    small = horner(series, near * near / 4) * ufuncs.exp(-near)
    # (2 pi |x| overflows for |x| past 2.8e307: the root of each factor does not)
    large = horner(asymptotic, 1 / far) / (math.sqrt(2 * math.pi) * ufuncs.sqrt(far))
    if odd:
        # The series' odd factor is x itself, not sign(x) |x|: sign's derivative is 0, and at
        # x = 0 that product would take the derivative 1/2 to 0.
        small = small * where(in_series, x, 0.0) / 2
        large = ufuncs.sign(x) * large
    return where(in_series, small, large)


def i0e(x):
    """exp(-|x|) I0(x), the modified Bessel function of order 0, exponentially scaled."""
    (x,), kind = wide("i0e", x)
    return narrow(_scaled_bessel(x, _I0_SERIES, _I0_ASYMPTOTIC, odd=False), kind)


def i1e(x):
    """exp(-|x|) I1(x), the modified Bessel function of order 1, exponentially scaled."""
    (x,), kind = wide("i1e", x)
    return narrow(_scaled_bessel(x, _I1_SERIES, _I1_ASYMPTOTIC, odd=True), kind)


@custom_jvp
def _i0(x):
    return _scaled_bessel(x, _I0_SERIES, _I0_ASYMPTOTIC, odd=False) * ufuncs.exp(ufuncs.absolute(x))


@_i0.defjvp
def _i0_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    return _i0(x), tangent * _i1(x)


@custom_jvp
def _i1(x):
    return _scaled_bessel(x, _I1_SERIES, _I1_ASYMPTOTIC, odd=True) * ufuncs.exp(ufuncs.absolute(x))


@_i1.defjvp
def _i1_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    value = _i1(x)
    at_zero = x == 0
    # I1' = I0 - I1 / x, which is 1/2 at 0
    slope = _i0(x) - value / where(at_zero, 1.0, x)
    return value, tangent * where(at_zero, 0.5, slope)


def i0(x):
    """The modified Bessel function of the first kind of order 0 (numpy.i0), in float64:
    within 1e-14 relative of SciPy's. Its derivative is I1."""
    (x,), kind = wide("i0", x)
    return narrow(_i0(x), kind)


def i1(x):
    """The modified Bessel function of the first kind of order 1, in float64: within 1e-14
    relative of SciPy's. Its derivative is I0(x) - I1(x) / x (1/2 at 0)."""
    (x,), kind = wide("i1", x)
    return narrow(_i1(x), kind)
