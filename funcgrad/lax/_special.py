"""Special functions for the NumPy reference backend, which must not depend on SciPy.

Everything is evaluated in float64 with vectorized NumPy and rounded once to the caller's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np

_ArrayOrScalar = np.ndarray | np.generic

_PI = math.pi
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LOG_PI = math.log(math.pi)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_EULER = 0.5772156649015329

# zeta(k) - 1 for k = 2, 3, ...: the Taylor coefficients of lgamma and digamma around 2.
_ZETA_M1 = (
    0.6449340668482264,
    0.2020569031595943,
    0.08232323371113819,
    0.03692775514336993,
    0.01734306198444914,
    0.008349277381922827,
    0.00407735619794434,
    0.0020083928260822143,
    0.0009945751278180853,
    0.0004941886041194645,
    0.0002460865533080483,
    0.00012271334757848915,
    6.124813505870483e-05,
    3.058823630702049e-05,
    1.528225940865187e-05,
    7.637197637899763e-06,
    3.81729326499984e-06,
    1.908212716553939e-06,
    9.539620338727962e-07,
    4.769329867878064e-07,
    2.38450502727733e-07,
    1.1921992596531106e-07,
    5.960818905125948e-08,
    2.980350351465228e-08,
    1.4901554828365043e-08,
    7.45071178983543e-09,
    3.725334024788457e-09,
    1.862659723513049e-09,
    9.313274324196682e-10,
    4.656629065033784e-10,
)

# lgamma(2 + z) = z * poly(z) and digamma(2 + z) = poly(z), both for |z| <= 1/2.
_LGAMMA2 = (1.0 - _EULER,) + tuple(
    (-1.0) ** k * c / k for k, c in enumerate(_ZETA_M1[:-1], start=2)
)
_DIGAMMA2 = (1.0 - _EULER,) + tuple((-1.0) ** k * c for k, c in enumerate(_ZETA_M1, start=2))

# erf(x) = x * poly(x**2) for |x| < 1 (Maclaurin series).
_ERF_TAYLOR = tuple(
    _TWO_OVER_SQRT_PI * (-1.0) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(22)
)

# Stirling / asymptotic-series coefficients B_2k / (2k (2k - 1)) and B_2k / (2k).
_STIRLING = (
    1 / 12,
    -1 / 360,
    1 / 1260,
    -1 / 1680,
    1 / 1188,
    -691 / 360360,
    1 / 156,
    -3617 / 122400,
)
_DIGAMMA_ASYMP = (
    1 / 12,
    -1 / 120,
    1 / 252,
    -1 / 240,
    1 / 132,
    -691 / 32760,
    1 / 12,
    -3617 / 8160,
)

# Digamma has zeros where no shift/reflection formula keeps relative accuracy: expand around the
# positive zero and the first negative zero (both as hi + lo) with Taylor coefficients
# psi^(k)(root) / k!.
_POS_ROOT = (1.4616321449683622, 9.549995429965697e-17)
_POS_ROOT_TAYLOR = (
    0.0,
    0.9676722454476212,
    -0.4427631689835921,
    0.258499760955651,
    -0.16394270544240652,
    0.10782405069126237,
    -0.07219956125645471,
    0.04880428816414311,
    -0.03316112647484736,
    0.022597648232218104,
    -0.01542476590494896,
    0.010538791616612175,
    -0.007204534386356869,
    0.004926781395729853,
    -0.003369801655439328,
    0.002305126326734928,
    -0.0015769367714301972,
    0.0010788252019162967,
    -0.0007380709389960052,
    0.000504953265834602,
    -0.0003454680251063077,
    0.00023635601564027053,
    -0.00016170622091974803,
    0.0001106337276874741,
    -7.569179582195066e-05,
    5.178575795222081e-05,
    -3.5430070947659604e-05,
)
_NEG_ROOT = (-0.5040830082644554, -8.15428206243813e-18)
_NEG_ROOT_TAYLOR = (
    0.0,
    8.939798558792134,
    -0.8093454625306507,
    32.258572064915505,
    -2.761011648790828,
    128.27342343090902,
    -14.70672173553036,
    513.2704629562862,
    -75.37700066344631,
    2055.5357119463315,
    -368.5783503832191,
    8234.667099203069,
    -1743.364608867363,
    32997.785655255044,
    -8051.818155363498,
    132262.95480834588,
    -36529.94596948565,
    530280.3912420176,
    -163451.79342700253,
    2126602.3725968753,
    -723318.8861804305,
    8530604.878543982,
    -3172131.3155744765,
    34228316.69580112,
    -13807481.997263888,
    137373435.87411496,
    -59721085.411294304,
    551481251.858545,
    -256915093.79875362,
)

_FLOAT_DTYPES = frozenset(
    np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)
)


def _horner(coeffs: Sequence[float], z: np.ndarray) -> np.ndarray:
    acc = np.full_like(z, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = acc * z + c
    return acc


def _elementwise(kernel: Callable[[np.ndarray], np.ndarray], x: _ArrayOrScalar) -> _ArrayOrScalar:
    # Kernels see a flat float64 copy; branches are chosen per element with masks, and the
    # errstate keeps the deliberately-unused lanes (inf/nan/poles) from warning.
    arr = np.asarray(x)
    dtype = arr.dtype if arr.dtype in _FLOAT_DTYPES else np.dtype(np.float64)
    with np.errstate(all="ignore"):
        flat = np.array(arr, dtype=np.float64, copy=True).reshape(-1)
        out = kernel(flat).reshape(arr.shape).astype(dtype)
    return out[()] if out.ndim == 0 else out


def _sinpi_reduced(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sin(pi x) and cos(pi x) after an exact reduction, so integers give exact zeros."""
    r = x - np.round(x)  # exact, in [-1/2, 1/2]
    a = np.abs(r)
    sign = np.where(np.remainder(np.round(x), 2.0) == 0.0, 1.0, -1.0)
    s = sign * np.copysign(np.sin(_PI * a), r)
    c = sign * np.where(a < 0.25, np.cos(_PI * a), np.sin(_PI * (0.5 - a)))
    return s, c


# ----------------------------------------------------------------------------- erf / erfc


def _erf_small(x: np.ndarray) -> np.ndarray:
    """erf for |x| < 1, where the alternating series loses at most a couple of bits."""
    return x * _horner(_ERF_TAYLOR, x * x)


def _erfc_cf_band(a: np.ndarray, terms: int) -> np.ndarray:
    s = 2.0 * a * a
    t = s + (4 * terms + 1)
    for k in range(terms, 0, -1):
        t = s + (4 * k - 3) - ((2 * k - 1) * (2 * k)) / t
    # exp(-a^2) split as exp(-h^2) exp(-(a-h)(a+h)) with h^2 exact: rounding a^2 first would cost
    # ~a^2 ulps in the far tail.
    h = np.round(a * 16.0) / 16.0
    return (_TWO_OVER_SQRT_PI * a / t) * np.exp(-(a - h) * (a + h)) * np.exp(-h * h)


# Continued-fraction convergence goes like exp(-c a sqrt(n)): pick the depth per band of a.
_ERFC_BANDS = (1.0, 1.5, 2.0, 3.0, 4.5, 7.0, np.inf)


def _erfc_large(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 1 via the even contraction of Laplace's continued fraction."""
    a = np.minimum(a, 30.0)  # erfc(30) underflows; keeps 2 a^2 and exp finite for a = inf
    out = np.empty_like(a)
    for lo, hi in zip(_ERFC_BANDS[:-1], _ERFC_BANDS[1:]):
        m = (a >= lo) & (a < hi) if hi != np.inf else a >= lo
        if np.any(m):
            out[m] = _erfc_cf_band(a[m], int(110.0 / (lo * lo)) + 6)
    return out


def _erf64(x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, np.nan)
    a = np.abs(x)
    small = a < 1.0
    out[small] = _erf_small(x[small])
    big = a >= 1.0
    out[big] = np.copysign(1.0 - _erfc_large(a[big]), x[big])
    return out


def _erfc64(x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, np.nan)
    small = np.abs(x) < 1.0
    out[small] = 1.0 - _erf_small(x[small])
    pos = x >= 1.0
    out[pos] = _erfc_large(x[pos])
    neg = x <= -1.0
    out[neg] = 2.0 - _erfc_large(-x[neg])
    return out


def erf(x: _ArrayOrScalar) -> _ArrayOrScalar:
    """Error function; series near 0 and a continued fraction beyond, so no SciPy is needed."""
    return _elementwise(_erf64, x)


def erfc(x: _ArrayOrScalar) -> _ArrayOrScalar:
    """Complementary error function, evaluated directly so the tail keeps relative accuracy."""
    return _elementwise(_erfc64, x)


# ----------------------------------------------------------------------------------- erf_inv


def _erf_inv64(y: np.ndarray) -> np.ndarray:
    out = np.full_like(y, np.nan)
    a = np.abs(y)
    edge = a == 1.0
    out[edge] = np.copysign(np.inf, y[edge])
    inside = a < 1.0
    a = a[inside]
    # Winitzki's closed form (relative error ~1e-3) as a starting point, then Halley steps.
    log_term = np.where(a < 0.5, np.log1p(-a * a), np.log((1.0 - a) * (1.0 + a)))
    k = 0.147
    b = 2.0 / (_PI * k) + 0.5 * log_term
    x = np.sqrt(np.maximum(np.sqrt(b * b - log_term / k) - b, 0.0))
    series = _PI**0.5 / 2.0 * a * (1.0 + _PI / 12.0 * a * a)
    x = np.where(a < 1e-3, series, x)
    # Near 1 the residual is measured against erfc: q = 1 - a is exact there, erf(x) - a is not.
    tail = a >= 0.5
    q = 1.0 - a
    for _ in range(3):
        r = np.empty_like(x)
        r[~tail] = _erf64(x[~tail]) - a[~tail]
        r[tail] = q[tail] - _erfc64(x[tail])
        u = r / (_TWO_OVER_SQRT_PI * np.exp(-x * x))
        x = x - u / (1.0 + x * u)
    out[inside] = np.copysign(x, y[inside])
    return out


def erf_inv(x: _ArrayOrScalar) -> _ArrayOrScalar:
    """Inverse error function; Newton-type refinement of a cheap guess reuses our erf/erfc."""
    return _elementwise(_erf_inv64, x)


# ------------------------------------------------------------------------------------ lgamma


def _lgamma_pos(x: np.ndarray) -> np.ndarray:
    """log Gamma(x) for x >= 1/2."""
    out = np.full_like(x, np.nan)

    # [1/2, 3/2): shift to 2 + z with z = x - 1 (exact), so the zero at x = 1 keeps full relative
    # accuracy through log1p.
    m = x < 1.5
    z = x[m] - 1.0
    out[m] = z * _horner(_LGAMMA2, z) - np.log1p(z)
    m = (x >= 1.5) & (x <= 2.5)
    z = x[m] - 2.0
    out[m] = z * _horner(_LGAMMA2, z)

    # (5/2, 10): recur down onto [3/2, 5/2]; the subtractions x - k are exact.
    m = (x > 2.5) & (x < 10.0)
    xm = x[m]
    n = np.ceil(xm - 2.5)
    prod = np.ones_like(xm)
    for k in range(1, 9):
        prod = np.where(k <= n, prod * (xm - k), prod)
    z = (xm - n) - 2.0
    out[m] = z * _horner(_LGAMMA2, z) + np.log(prod)

    # [10, inf): Stirling's series.
    m = x >= 10.0
    xm = x[m]
    lx = np.log(xm)
    w = 1.0 / (xm * xm)
    corr = _horner(_STIRLING, w) / xm
    out[m] = xm * (lx - 1.0) - 0.5 * lx + (_HALF_LOG_2PI + corr)
    out[x == np.inf] = np.inf
    return out


# Below this, reflection; above it (and below 1/2) the upward recurrence, whose product of exact
# factors x + k cancels less than reflection does next to the zeros of lgamma on the negative axis.
_LGAMMA_RECUR_MIN = -64.0


def _lgamma_recur_up(x: np.ndarray) -> np.ndarray:
    """log|Gamma(x)| for -64 <= x < 1/2 as lgamma(x + n) - log|x (x + 1) ... (x + n - 1)|."""
    n = np.ceil(1.5 - x)
    prod = x.copy()
    for k in range(1, int(n.max(initial=0.0))):
        prod = np.where(k < n, prod * (x + k), prod)
    z = (x + n) - 2.0  # exact, in [-1/2, 1/2)
    return z * _horner(_LGAMMA2, z) - np.log(np.abs(prod))  # zero product at the poles -> +inf


def _lgamma64(x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, np.nan)
    m = x >= 0.5
    out[m] = _lgamma_pos(x[m])
    m = (x >= _LGAMMA_RECUR_MIN) & (x < 0.5)
    out[m] = _lgamma_recur_up(x[m])
    neg = x < _LGAMMA_RECUR_MIN
    xn = x[neg]
    s, _ = _sinpi_reduced(xn)
    # Reflection: Gamma(x) Gamma(1 - x) = pi / sin(pi x).
    refl = _LOG_PI - np.log(np.abs(s)) - _lgamma_pos(1.0 - xn)
    refl = np.where(s == 0.0, np.inf, refl)
    out[neg] = np.where(np.isneginf(xn), -np.inf, refl)  # SciPy's convention at -inf
    return out


def lgamma(x: _ArrayOrScalar) -> _ArrayOrScalar:
    """log|Gamma(x)|, accurate near its zeros at 1 and 2 and free of overflow for huge x."""
    return _elementwise(_lgamma64, x)


# ----------------------------------------------------------------------------------- digamma


def _digamma_pos(x: np.ndarray) -> np.ndarray:
    """psi(x) for x > -1/2, excluding x == 0 and the neighbourhood of the positive zero."""
    out = np.full_like(x, np.nan)

    m = x < 0.5
    z = x[m]
    out[m] = _horner(_DIGAMMA2, z) - 1.0 / z - 1.0 / (1.0 + z)
    m = (x >= 0.5) & (x < 1.5)
    z = x[m]
    out[m] = _horner(_DIGAMMA2, z - 1.0) - 1.0 / z
    m = (x >= 1.5) & (x <= 2.5)
    out[m] = _horner(_DIGAMMA2, x[m] - 2.0)

    m = (x > 2.5) & (x < 10.0)
    xm = x[m]
    n = np.ceil(xm - 2.5)
    acc = np.zeros_like(xm)
    for k in range(8, 0, -1):  # smallest terms first
        acc = np.where(k <= n, acc + 1.0 / (xm - k), acc)
    out[m] = _horner(_DIGAMMA2, (xm - n) - 2.0) + acc

    m = x >= 10.0
    xm = x[m]
    w = 1.0 / (xm * xm)
    out[m] = np.log(xm) - 0.5 / xm - w * _horner(_DIGAMMA_ASYMP, w)
    return out


def _digamma64(x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, np.nan)
    t_pos = (x - _POS_ROOT[0]) - _POS_ROOT[1]
    t_neg = (x - _NEG_ROOT[0]) - _NEG_ROOT[1]
    near_pos = np.abs(t_pos) <= 0.25
    near_neg = np.abs(t_neg) <= 0.1
    out[near_pos] = _horner(_POS_ROOT_TAYLOR, t_pos[near_pos])
    out[near_neg] = _horner(_NEG_ROOT_TAYLOR, t_neg[near_neg])

    rest = ~(near_pos | near_neg)
    pos = rest & (x > -0.5) & (x != 0.0)
    out[pos] = _digamma_pos(x[pos])

    neg = rest & (x <= -0.5) & np.isfinite(x)
    xn = x[neg]
    s, c = _sinpi_reduced(xn)
    # Reflection: psi(1 - x) - psi(x) = pi cot(pi x); negative integers are poles (nan, as SciPy).
    refl = _digamma_pos(1.0 - xn) - _PI * c / s
    out[neg] = np.where(s == 0.0, np.nan, refl)

    zero = x == 0.0
    out[zero] = np.copysign(np.inf, -np.copysign(1.0, x[zero]))  # -inf at +0, +inf at -0
    out[x == np.inf] = np.inf
    return out


def digamma(x: _ArrayOrScalar) -> _ArrayOrScalar:
    """psi(x), with Taylor expansions at its zeros where recurrence/reflection would cancel."""
    return _elementwise(_digamma64, x)
