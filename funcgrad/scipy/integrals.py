"""Special functions defined by integrals: the scaled complementary error function erfcx and
Dawson's integral dawsn (of exp(-t^2) and exp(t^2)), the exponential integrals exp1, expi
and expn, and Spence's dilogarithm.

Each computes in float64 whatever its input dtype and returns the inputs' promoted dtype
(`_wide` and `_narrow`). The methods are series, continued fractions evaluated backwards
from a fixed depth, and asymptotic expansions, each on the range where it keeps float64's
precision, so that a function stays within a few ulp of the exact value (mpmath's, at 40
digits) over its whole domain, tails included; tests/test_scipy_special_more.py states the
measured errors. Every function carries its closed-form derivative as a custom jvp, so a
derivative is as accurate as the function and no loop is differentiated.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._float64 import horner as _horner
from funcgrad.numpy._float64 import narrow as _narrow
from funcgrad.numpy._float64 import wide as _wide
from funcgrad.transforms.custom_derivatives import custom_jvp

F64 = np.float64
_SQRT_PI = math.sqrt(math.pi)
_EULER = 0.57721566490153286061


def _select(condition, value, default):
    """`value` where `condition` holds, else `default`: keeps each branch's argument inside
    its own range (a select, not clipping by minimum, so a derivative is not split at a tie)."""
    return fnp.where(condition, value, default)


def _backward_fraction(x, terms: int, partial_numerator, partial_denominator):
    """The continued fraction b_0 + a_1 / (b_1 + a_2 / (b_2 + ...)) cut after `terms` levels and
    evaluated from the innermost level out, which keeps its rounding to a few ulp."""

    # (k is complex where x is, so that the terms' arithmetic never mixes kinds)
    k_dtype = np.complex128 if fnp.iscomplexobj(x) else F64

    def level(i, tail):
        k = lax.convert_element_type(terms - i, k_dtype)
        return partial_denominator(k - 1) + partial_numerator(k) / tail

    return lax.fori_loop(0, terms, level, partial_denominator(fnp.full_like(x, terms)))


# -- erfcx ----------------------------------------------------------------------------------

# erfcx on [0, 2] as a Chebyshev series in t = x - 1 (interpolated at 60 Chebyshev points with
# mpmath at 50 digits; the next coefficient is below 1e-19).
_ERFCX_CHEBYSHEV = (
    1.0427217409992124,
    -0.3447707454725235,
    0.09975977926820097,
    -0.026063665256478758,
    0.00626846349431901,
    -0.001406122385887065,
    0.00029698557246549,
    -5.948555390106724e-05,
    1.136296076113552e-05,
    -2.079407863414776e-06,
    3.6590821201669714e-07,
    -6.210726136362159e-08,
    1.0195316699270051e-08,
    -1.622322780246961e-09,
    2.5073406746662083e-10,
    -3.7703813593742715e-11,
    5.5248768982320525e-12,
    -7.89991297902184e-13,
    1.1036213151407695e-13,
    -1.50799316325038e-14,
    2.0174311859216233e-15,
    -2.6449521072902544e-16,
    3.4011233662469575e-17,
    -4.29287736642484e-18,
    5.322380477606831e-19,
)
_ERFCX_FRACTION_FROM = 2.0
_ERFCX_FRACTION_TERMS = 40
# Beyond this erfcx(x) is 1 / (x sqrt(pi)) to within float64's precision.
_ERFCX_ASYMPTOTE_FROM = 1e8


def _chebyshev(coefficients, t):
    """sum' c_k T_k(t) (the first term halved) by Clenshaw's recurrence."""
    later, latest = fnp.zeros_like(t), fnp.zeros_like(t)
    for c in reversed(coefficients[1:]):
        later, latest = latest, 2 * t * latest - later + c
    return t * latest - later + 0.5 * coefficients[0]


def _exp_of_square(x):
    """exp(x^2) with x^2 split exactly into a rounded square and its rounding error (Dekker),
    so that the result is not off by the ~x^2 ulp that rounding x^2 first would cost; for
    |x| < 27 (beyond, it overflows)."""
    split = 134217729.0 * x
    high = split - (split - x)
    low = x - high
    square = x * x
    error = ((high * high - square) + 2 * high * low) + low * low
    return fnp.exp(square) * (1 + error)


def _laplace_fraction(x):
    """(2x^2, D - 2x^2) for Laplace's fraction erfcx(x) = 2x / (sqrt(pi) D), D = 2x^2 + 1 -
    1*2 / (2x^2 + 5 - 3*4 / ...), D's excess over 2x^2 summed apart: the derivative
    2x erfcx(x) - 2 / sqrt(pi) is -2 excess / (sqrt(pi) D), a difference that cancels to
    1 / (2x^2) of its terms (1e-6 of it was left at x = 1e5, and 0 from 1e8 on)."""
    y = 2 * x * x
    excess = _backward_fraction(
        x,
        _ERFCX_FRACTION_TERMS,
        lambda k: -(2 * k - 1) * (2 * k),
        lambda k: fnp.where(k == 0, 1.0, y + 4 * k + 1),
    )
    return y, excess


def _erfcx_nonnegative(x):
    in_series = x < _ERFCX_FRACTION_FROM
    near = _select(in_series, x, 1.0)
    series = _chebyshev(_ERFCX_CHEBYSHEV, near - 1)
    far = _select(in_series | (x >= _ERFCX_ASYMPTOTE_FROM), _ERFCX_FRACTION_FROM, x)
    y, excess = _laplace_fraction(far)
    fraction = 2 * far / (_SQRT_PI * (y + excess))
    asymptote = 1 / (_SQRT_PI * x)
    return fnp.where(in_series, series, fnp.where(x < _ERFCX_ASYMPTOTE_FROM, fraction, asymptote))


@custom_jvp
def _erfcx(x):
    negative = x < 0
    magnitude = fnp.where(negative, -x, x)
    positive = _erfcx_nonnegative(magnitude)
    # erfcx(-a) = 2 exp(a^2) - erfcx(a), overflowing below -26.6
    bounded = fnp.where(x <= -27.0, -27.0, x)
    return fnp.where(negative, 2 * _exp_of_square(bounded) - positive, positive)


@_erfcx.defjvp
def _erfcx_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    value = _erfcx(x)
    in_fraction = (x >= _ERFCX_FRACTION_FROM) & (x < _ERFCX_ASYMPTOTE_FROM)
    y, excess = _laplace_fraction(_select(in_fraction, x, _ERFCX_FRACTION_FROM))
    fraction_slope = -2 * excess / (_SQRT_PI * (y + excess))
    asymptote_slope = -1 / (_SQRT_PI * x * x)
    slope = fnp.where(x < _ERFCX_FRACTION_FROM, 2 * x * value - 2 / _SQRT_PI, fraction_slope)
    slope = fnp.where(x >= _ERFCX_ASYMPTOTE_FROM, asymptote_slope, slope)
    return value, tangent * slope


def erfcx(x: ArrayLike) -> Array:
    """The scaled complementary error function exp(x^2) erfc(x), which stays finite where
    erfc underflows (about 1 / (x sqrt(pi)) for large x).

    On [0, 2] a Chebyshev series, above Laplace's continued fraction (40 levels), above 1e8
    its asymptote; for x < 0, 2 exp(x^2) - erfcx(-x) with x^2 kept exact, overflowing to inf
    below -26.6. Within 3 ulp of the exact value in float64. The derivative is
    2x erfcx(x) - 2 / sqrt(pi), from 2 on taken from the fraction's parts (that difference
    cancels)."""
    (x,), kind = _wide("erfcx", x)
    return _narrow(_erfcx(x), kind)


# -- Dawson's integral ----------------------------------------------------------------------

_DAWSN_SERIES_BELOW = 0.5
_DAWSN_SERIES = [(-2) ** k / math.prod(range(1, 2 * k + 2, 2)) for k in range(20)]  # in x^2
_DAWSN_ASYMPTOTIC_FROM = 8.0
_DAWSN_ASYMPTOTIC = [float(math.prod(range(1, 2 * k, 2))) for k in range(40)]  # in 1/(2x^2)
# Rybicki's sum: F(x) ~ sum over odd n of exp(-(x - n h)^2) / (n sqrt(pi)), its error about
# exp(-(pi / 2h)^2), 1e-17 for h = 1/4; terms past |x - n h| = 6.5 are below 1e-18.
_RYBICKI_STEP = 0.25
_RYBICKI_TERMS = 26


@custom_jvp
def _dawsn(x):
    a = fnp.abs(x)
    in_series = a < _DAWSN_SERIES_BELOW
    in_asymptotic = a >= _DAWSN_ASYMPTOTIC_FROM
    near = _select(in_series, a, 0.25)
    series = near * _horner(_DAWSN_SERIES, near * near)
    far = _select(in_asymptotic, a, _DAWSN_ASYMPTOTIC_FROM)
    asymptotic = _horner(_DAWSN_ASYMPTOTIC, 1 / (2 * far * far)) / (2 * far)
    middle = _select(in_series | in_asymptotic, 1.0, a)
    # shifted to the even multiple of h nearest to x, so that no denominator n vanishes
    nearest_even = 2 * fnp.round(middle / (2 * _RYBICKI_STEP))
    offset = middle - nearest_even * _RYBICKI_STEP
    total = fnp.zeros_like(a)
    for m in range(-_RYBICKI_TERMS, _RYBICKI_TERMS):
        n = 2 * m + 1
        total = total + fnp.exp(-((offset - n * _RYBICKI_STEP) ** 2)) / (nearest_even + n)
    rybicki = total / _SQRT_PI
    value = fnp.where(in_series, series, fnp.where(in_asymptotic, asymptotic, rybicki))
    return fnp.where(x < 0, -value, value)


@_dawsn.defjvp
def _dawsn_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    value = _dawsn(x)
    return value, tangent * (1 - 2 * x * value)


def dawsn(x: ArrayLike) -> Array:
    """Dawson's integral F(x) = exp(-x^2) int_0^x exp(t^2) dt.

    Below |x| = 1/2 its Taylor series, above 8 its asymptotic series, between them Rybicki's
    sum of Gaussians with step 1/4 (52 terms). Within 4 ulp of the exact value in float64
    (SciPy's is up to 47 ulp off near 0). The derivative is 1 - 2x F(x)."""
    (x,), kind = _wide("dawsn", x)
    return _narrow(_dawsn(x), kind)


# -- exponential integrals ------------------------------------------------------------------

_EXP1_SERIES = [(-1) ** (k + 1) / (k * math.factorial(k)) for k in range(1, 26)]  # x^1..x^25
_EXPN_FRACTION_TERMS = 128


def _expn_fraction(n, x):
    """E_n(x) = exp(-x) / (x + n - 1 n / (x + n + 2 - 2 (n + 1) / (x + n + 4 - ...))), which
    converges for x > 0; 128 levels keep 2 ulp from x = 1 up."""
    denominator = _backward_fraction(
        x, _EXPN_FRACTION_TERMS, lambda k: -k * (n - 1 + k), lambda k: x + n + 2 * k
    )
    return fnp.exp(-x) / denominator


def _exp1_positive(x):
    """E_1(x) for x >= 0: below 1 its series -gamma - log x - sum (-x)^k / (k k!), above its
    continued fraction."""
    in_series = x <= 1
    near = _select(in_series, x, 0.5)
    series = -_EULER - fnp.log(near) + near * _horner(_EXP1_SERIES, near)
    far = _select(in_series | (x == fnp.inf), 2.0, x)
    fraction = _expn_fraction(1.0, far)
    value = fnp.where(in_series, series, fnp.where(x == fnp.inf, 0.0, fraction))
    return fnp.where(x == 0, fnp.inf, value)


@custom_jvp
def _exp1(x):
    return fnp.where(x < 0, fnp.nan, _exp1_positive(fnp.where(x < 0, 1.0, x)))


@_exp1.defjvp
def _exp1_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    return _exp1(x), tangent * -fnp.exp(-x) / x


def exp1(x: ArrayLike) -> Array:
    """The exponential integral E_1(x) = int_1^inf exp(-x t) / t dt for x > 0 (inf at 0, NaN
    below, as SciPy's real exp1).

    Below 1 its power series, above a continued fraction evaluated backwards from 128 levels.
    Within 3 ulp of the exact value in float64 (near x = 1, where the series' terms cancel;
    elsewhere 2). The derivative is -exp(-x) / x."""
    (x,), kind = _wide("exp1", x)
    return _narrow(_exp1(x), kind)


# The positive root of Ei, split in two floats (mpmath's findroot at 40 digits).
_EI_ROOT = 0.3725074107813666
_EI_ROOT_LOW = 1.3140183414386028e-17
_EI_ROOT_REGION = (0.25, 0.6)
_EI_ROOT_TERMS = 25
_EI_SERIES_TERMS = 60
# x exp(-x) Ei(x) on [6, 50] as a Chebyshev series in 1/x (interpolated with mpmath at 40
# digits; the next coefficient is below 1e-18).
_EI_CHEBYSHEV = (
    2.2714054422624206,
    0.1289873255181414,
    0.015068878992438054,
    0.00021959670863957745,
    -0.0009651813910394883,
    -0.00021403873632317672,
    6.936065489099553e-05,
    2.5115807130183326e-05,
    -9.043561289843612e-06,
    -2.2670453161671413e-06,
    1.542433224356175e-06,
    1.138920272681188e-08,
    -2.274055016015151e-07,
    6.166430059036662e-08,
    1.616901747456834e-08,
    -1.5496259487343674e-08,
    3.140055813990348e-09,
    1.3537008239778925e-09,
    -1.1179006202830148e-09,
    2.645574940450186e-10,
    7.510863426200143e-11,
    -8.478684691980229e-11,
    2.931301085902792e-11,
    3.833493979743318e-13,
    -5.735605701922176e-12,
    3.1222588475031697e-12,
    -6.788271112669228e-13,
    -2.1035534715377682e-13,
    2.5883832910848087e-13,
    -1.160584390219291e-13,
    2.0399656112700817e-14,
    1.0431425617922552e-14,
    -1.0811339884066731e-14,
    4.912447649870551e-15,
    -1.0285891187247314e-15,
    -3.233399403311401e-16,
    4.315071384949866e-16,
    -2.2810196890992926e-16,
    6.769810783798022e-17,
    5.247351088908195e-19,
    -1.462779120882033e-17,
    1.0307161045995138e-17,
    -4.300692141686112e-18,
)
_EI_CHEBYSHEV_RANGE = (6.0, 50.0)
_EI_ASYMPTOTIC_TERMS = 45


def _expi_near_root(x):
    """Ei(x) = log(x / x0) + sum (x^k - x0^k) / (k k!) around its root x0, the differences
    x^k - x0^k = (x - x0) h_k taken with h_1 = 1, h_{k+1} = x h_k + x0^k, so that the value
    keeps its relative precision where it passes through 0."""
    d = (x - _EI_ROOT) - _EI_ROOT_LOW
    g = fnp.ones_like(x)  # h_k / k!
    root_power = _EI_ROOT  # x0^k / k!
    total = fnp.ones_like(x)
    for k in range(1, _EI_ROOT_TERMS):
        g = (x * g + root_power) / (k + 1)
        root_power = root_power * _EI_ROOT / (k + 1)
        total = total + g / (k + 1)
    return fnp.log1p(d / _EI_ROOT) + d * total


def _expi_series(x):
    """Ei(x) = gamma + log x + sum x^k / (k k!), all terms positive for x > 0."""

    def add_term(i, carry):
        term, total = carry
        k = lax.convert_element_type(i, F64)
        term = term * x / k
        return term, total + term / k

    _, total = lax.fori_loop(1, _EI_SERIES_TERMS, add_term, (fnp.ones_like(x), fnp.zeros_like(x)))
    return _EULER + fnp.log(x) + total


def _expi_asymptotic(x):
    """Ei(x) ~ exp(x) / x sum_k k! / x^k, cut before its smallest term (below 1e-20 from 50)."""
    total = fnp.ones_like(x)
    for k in range(_EI_ASYMPTOTIC_TERMS, 0, -1):
        total = 1 + k / x * total
    half = fnp.exp(0.5 * x)  # (exp(x) itself overflows a little before Ei does)
    return half * (half / x) * total


def _expi_chebyshev(x):
    """Ei(x) = exp(x) / x g(1/x), g's Chebyshev series on [6, 50]."""
    lo, hi = _EI_CHEBYSHEV_RANGE
    t = (2 / x - (1 / hi + 1 / lo)) / (1 / lo - 1 / hi)
    return fnp.exp(x) / x * _chebyshev(_EI_CHEBYSHEV, t)


@custom_jvp
def _expi(x):
    root_lo, root_hi = _EI_ROOT_REGION
    lo, hi = _EI_CHEBYSHEV_RANGE
    near_root = (x > root_lo) & (x < root_hi)
    in_series = (x > 0) & (x < lo)
    in_chebyshev = (x >= lo) & (x < hi)
    root_value = _expi_near_root(_select(near_root, x, _EI_ROOT))
    series = _expi_series(_select(in_series, x, 1.0))
    chebyshev = _expi_chebyshev(_select(in_chebyshev, x, lo))
    asymptotic = _expi_asymptotic(_select(x >= hi, x, hi))
    negative = -_exp1_positive(_select(x < 0, -x, 1.0))
    positive = fnp.where(in_chebyshev, chebyshev, asymptotic)
    positive = fnp.where(near_root, root_value, fnp.where(x < lo, series, positive))
    positive = fnp.where(x == fnp.inf, fnp.inf, fnp.where(fnp.isnan(x), fnp.nan, positive))
    return fnp.where(x < 0, negative, fnp.where(x == 0, -fnp.inf, positive))


@_expi.defjvp
def _expi_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    return _expi(x), tangent * fnp.exp(x) / x


def expi(x: ArrayLike) -> Array:
    """The exponential integral Ei(x), the principal value of int_-inf^x exp(t) / t dt:
    -E_1(-x) for x < 0, -inf at 0.

    For 0 < x < 6 its power series (around its root 0.3725... as a series in x - x0, so
    that it keeps its relative precision there), up to 50 a Chebyshev series of
    x exp(-x) Ei(x) in 1/x, above its asymptotic series; for x < 0 as exp1. Within 4 ulp
    of the exact value in float64 (SciPy's is 6,000 ulp off next to the root).
    The derivative is exp(x) / x."""
    (x,), kind = _wide("expi", x)
    return _narrow(_expi(x), kind)


_EXPN_SERIES_TERMS = 30


def _expn_series(n, x):
    """E_n(x) for 0 < x <= 1 and whole n >= 1: (-x)^(n-1) / (n-1)! (psi(n) - log x) minus the
    sum over k != n - 1 of (-x)^k / (k! (k - n + 1))."""
    log_term = -fnp.log(x) + lax.digamma(n)
    start = fnp.where(n == 1, log_term, 1 / fnp.where(n == 1, 2.0, n - 1))

    def add_term(i, carry):
        power, total = carry  # (-x)^k / k!
        k = lax.convert_element_type(i, F64)
        power = power * -x / k
        at_pole = k == n - 1
        term = fnp.where(at_pole, power * log_term, -power / fnp.where(at_pole, 1.0, k - n + 1))
        return power, total + term

    _, total = lax.fori_loop(1, _EXPN_SERIES_TERMS, add_term, (fnp.ones_like(x), start))
    return total


def _expn_valid(n, x):
    """E_n(x) for whole n >= 0 and x >= 0."""
    in_series = x <= 1
    positive_n = _select(n >= 1, n, 1.0)
    series = _expn_series(positive_n, _select(in_series & (x > 0), x, 0.5))
    far = _select(in_series | (x == fnp.inf), 2.0, x)
    fraction = _expn_fraction(positive_n, far)
    value = fnp.where(in_series, series, fnp.where(x == fnp.inf, 0.0, fraction))
    at_zero = fnp.where(n >= 2, 1 / fnp.where(n >= 2, n - 1, 1.0), fnp.inf)
    value = fnp.where(x == 0, at_zero, value)
    return fnp.where(n == 0, fnp.exp(-x) / x, value)


@custom_jvp
def _expn(n, x):
    valid = (n >= 0) & (fnp.floor(n) == n) & (x >= 0)
    value = _expn_valid(fnp.where(valid, n, 1.0), fnp.where(valid, x, 1.0))
    return fnp.where(valid, value, fnp.nan)


@_expn.defjvp
def _expn_jvp(primals, tangents):
    n, x = primals
    _, tangent = tangents
    order_zero = -fnp.exp(-x) * (1 + x) / (x * x)
    slope = fnp.where(n == 0, order_zero, -_expn(fnp.where(n == 0, 1.0, n - 1), x))
    return _expn(n, x), tangent * slope


def expn(n: ArrayLike, x: ArrayLike) -> Array:
    """The generalized exponential integral E_n(x) = int_1^inf exp(-x t) / t^n dt, for whole
    n >= 0 and x >= 0 (NaN elsewhere; 1 / (n - 1) at x = 0 for n >= 2, inf for n <= 1).

    For x <= 1 its power series (with its logarithmic term), above its continued fraction
    (128 levels). Within 2 ulp of the exact value in float64 for n up to 30 and x from
    1e-8 to 600 (and for n = 100, against quadrature, where mpmath's expint is itself off).
    The derivative in x is -E_{n-1}(x); n, a count, has none."""
    (n, x), kind = _wide("expn", n, x)
    return _narrow(_expn(lax.stop_gradient(n), x), kind)


# -- Spence's function ----------------------------------------------------------------------


def _bernoulli_numbers(count: int) -> list:
    from fractions import Fraction

    numbers = [Fraction(1)]
    for m in range(1, count):
        numbers.append(-sum(math.comb(m + 1, k) * numbers[k] for k in range(m)) / (m + 1))
    return numbers


# Li2(z) = sum_n B_n u^(n+1) / (n+1)! with u = -log(1 - z) (B_1 = -1/2), for |u| <= log 2
# within 1e-19 after 22 terms (its ratio is about (u / 2 pi)^2 per even term).
_DILOG_SERIES = [
    float(b / math.factorial(n + 1)) for n, b in enumerate(_bernoulli_numbers(23))
]  # in u, from u^1
_PI2_6 = math.pi**2 / 6


def _dilog_of_log(u):
    """Li2(1 - exp(-u)), for |u| <= log 2."""
    return u * _horner(_DILOG_SERIES, u)


@custom_jvp
def _spence(x):
    low, high = x < 0.5, x > 2
    middle = _select(low | high, 1.0, x)
    near_zero = _select(low & (x > 0), x, 0.25)
    far = _select(high & (x < fnp.inf), x, 4.0)
    # spence(x) = Li2(1 - x), reflected (x < 1/2) and inverted (x > 2) into |log x| <= log 2
    in_middle = _dilog_of_log(-fnp.log(middle))
    lower = _PI2_6 - fnp.log1p(-near_zero) * fnp.log(near_zero)
    lower = lower - _dilog_of_log(-fnp.log1p(-near_zero))
    upper = -_PI2_6 - 0.5 * fnp.log(far - 1) ** 2 - _dilog_of_log(fnp.log1p(-1 / far))
    value = fnp.where(low, lower, fnp.where(high, upper, in_middle))
    value = fnp.where(x == 0, _PI2_6, fnp.where(x == fnp.inf, fnp.nan, value))
    return fnp.where(x < 0, fnp.nan, value)


@_spence.defjvp
def _spence_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    t = x - 1
    near_one = fnp.abs(t) < 1e-3
    # log(x) / (1 - x) = -log1p(t) / t, by its Taylor series next to t = 0
    near = fnp.where(near_one, t, 0.0)
    taylor = -_horner([1.0, -1 / 2, 1 / 3, -1 / 4, 1 / 5, -1 / 6], near)
    slope = fnp.log(x) / fnp.where(near_one, 1.0, -t)
    return _spence(x), tangent * fnp.where(near_one, taylor, slope)


def spence(x: ArrayLike) -> Array:
    """Spence's function int_1^x log(t) / (1 - t) dt = Li2(1 - x) for x >= 0 (NaN below and at
    inf, as SciPy's and JAX's).

    The dilogarithm's Bernoulli series in log x, after reflection below 1/2 and inversion
    above 2 bring its argument within log 2 of 0. Within 2 ulp of the exact value in float64
    (SciPy's is up to 18 ulp off). The derivative is log(x) / (1 - x), -1 at x = 1."""
    (x,), kind = _wide("spence", x)
    return _narrow(_spence(x), kind)


# -- Owen's T function ----------------------------------------------------------------------

_OWENS_NODES, _OWENS_WEIGHTS = np.polynomial.legendre.leggauss(40)
# Past h a = 5 the integrand is a narrow Gaussian: integrated in t = h x, over t <= 12.
_OWENS_SCALED_FROM = 5.0
_OWENS_SCALED_UP_TO = 12.0


def _gauss_legendre(f, length):
    """int_0^length f(x) dx by 40-point Gauss-Legendre quadrature, elementwise in length."""
    total = fnp.zeros_like(length)
    for node, weight in zip(_OWENS_NODES, _OWENS_WEIGHTS):
        total = total + weight * f((node + 1) / 2 * length)
    return total * length / 2


def _owens_t_inner(h, a):
    """T(h, a) for h >= 0 and 0 <= a <= 1 from its integral
    (1 / 2 pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx."""
    scaled = h * a > _OWENS_SCALED_FROM
    plain_h, plain_a = fnp.where(scaled, 0.0, h), fnp.where(scaled, 0.0, a)
    plain = _gauss_legendre(
        lambda x: fnp.exp(-0.5 * plain_h * plain_h * (1 + x * x)) / (1 + x * x), plain_a
    )
    wide_h = fnp.where(scaled, h, 1.0)
    limit = fnp.where(scaled, fnp.minimum(h * a, _OWENS_SCALED_UP_TO), 0.0)
    narrow_part = _gauss_legendre(
        lambda t: fnp.exp(-0.5 * t * t) / (1 + (t / wide_h) ** 2), limit
    ) * (fnp.exp(-0.5 * wide_h * wide_h) / wide_h)
    return fnp.where(scaled, narrow_part, plain) / (2 * math.pi)


def _upper_normal_tail(x):
    return 0.5 * lax.erfc(x / math.sqrt(2.0))


@custom_jvp
def _owens_t(h, a):
    h_abs, a_abs = fnp.abs(h), fnp.abs(a)
    inverted = a_abs > 1
    inner_a = fnp.where(inverted, 1 / fnp.where(inverted, a_abs, 1.0), a_abs)
    ah = fnp.where(fnp.isinf(a_abs) & (h_abs == 0), 0.0, a_abs * h_abs)
    inner_h = fnp.where(inverted, ah, h_abs)
    inner = _owens_t_inner(fnp.where(fnp.isinf(inner_h), 0.0, inner_h), inner_a)
    inner = fnp.where(fnp.isinf(inner_h), 0.0, inner)
    # T(h, a) = Q(h) / 2 + Q(a h) / 2 - Q(h) Q(a h) - T(a h, 1 / a) for a > 1, Q = 1 - Phi
    tail_h, tail_ah = _upper_normal_tail(h_abs), _upper_normal_tail(ah)
    outer = 0.5 * tail_h + 0.5 * tail_ah - tail_h * tail_ah - inner
    value = fnp.where(inverted, outer, inner)
    # (an infinite h zeroes the integrand whatever a is, but a NaN a is still unknown)
    return fnp.where(fnp.isnan(a), fnp.nan, fnp.where(a < 0, -value, value))


@_owens_t.defjvp
def _owens_t_jvp(primals, tangents):
    h, a = primals
    th, ta = tangents
    density = fnp.exp(-0.5 * h * h) / math.sqrt(2 * math.pi)
    dh = -0.5 * density * lax.erf(a * h / math.sqrt(2.0))
    da = fnp.exp(-0.5 * h * h * (1 + a * a)) / (2 * math.pi * (1 + a * a))
    return _owens_t(h, a), dh * th + da * ta


def owens_t(h: ArrayLike, a: ArrayLike) -> Array:
    """Owen's T function (1 / 2 pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx, the
    probability of the bivariate normal's region x > h, 0 < y < a x.

    For |a| <= 1 its integral by 40-point Gauss-Legendre quadrature (in t = h x where
    h |a| > 5, there a narrow Gaussian); for |a| > 1 through
    T(h, a) = Q(h) / 2 + Q(a h) / 2 - Q(h) Q(a h) - T(a h, 1 / a) with the normal tail Q.
    Within 2e-14 relative of SciPy's for h < 8, 2e-13 out to h = 30 (the normal tail's own
    precision). Its derivatives are -phi(h) erf(a h / sqrt 2) / 2 in h and the integrand's
    value at a in a."""
    (h, a), kind = _wide("owens_t", h, a)
    return _narrow(_owens_t(h, a), kind)


# -- sine and cosine integrals, Fresnel integrals -------------------------------------------

_SICI_SERIES_BELOW = 2.0
_SI_SERIES = [(-1) ** k / ((2 * k + 1) * math.factorial(2 * k + 1)) for k in range(20)]  # in x^2
_CI_SERIES = [(-1) ** k / (2 * k * math.factorial(2 * k)) for k in range(1, 21)]  # in x^2
_SICI_FRACTION_TERMS = 128


def _sici_positive(a):
    """(Si(a), Ci(a)) for a >= 0: below 2 their power series; above from
    E1(ia) = -Ci(a) + i (Si(a) - pi / 2), E1's continued fraction taken at ia."""
    in_series = a < _SICI_SERIES_BELOW
    near = _select(in_series & (a > 0), a, 1.0)
    square = near * near
    si_series = near * _horner(_SI_SERIES, square)
    ci_series = _EULER + fnp.log(near) + square * _horner(_CI_SERIES, square)
    far = _select(in_series | (a == fnp.inf), _SICI_SERIES_BELOW, a)
    z = lax.complex(fnp.zeros_like(far), far)
    denominator = _backward_fraction(
        z, _SICI_FRACTION_TERMS, lambda k: -k * k + 0j, lambda k: z + (2 * k + 1)
    )
    e1 = lax.complex(fnp.cos(far), -fnp.sin(far)) / denominator
    si = fnp.where(in_series, si_series, 0.5 * math.pi + lax.imag(e1))
    ci = fnp.where(in_series, ci_series, -lax.real(e1))
    si = fnp.where(a == 0, 0.0, fnp.where(a == fnp.inf, 0.5 * math.pi, si))
    ci = fnp.where(a == 0, -fnp.inf, fnp.where(a == fnp.inf, 0.0, ci))
    return si, ci


@custom_jvp
def _sici(x):
    a = fnp.abs(x)
    si, ci = _sici_positive(fnp.where(fnp.isnan(x), 1.0, a))
    si = fnp.where(fnp.signbit(x), -si, si)
    ci = fnp.where((x == -fnp.inf) | fnp.isnan(x), fnp.nan, ci)
    return fnp.where(fnp.isnan(x), fnp.nan, si), ci


@_sici.defjvp
def _sici_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    at_zero = x == 0
    safe = fnp.where(at_zero, 1.0, x)
    sinc = fnp.where(at_zero, 1.0, fnp.sin(safe) / safe)
    return _sici(x), (tangent * sinc, tangent * fnp.cos(x) / x)


def sici(x: ArrayLike) -> tuple[Array, Array]:
    """The sine and cosine integrals (Si(x), Ci(x)): Si(x) = int_0^x sin(t) / t dt and
    Ci(x) = gamma + log|x| + int_0^x (cos(t) - 1) / t dt (the real part for x < 0, as SciPy's).

    Below |x| = 2 their power series, above the continued fraction of E1(ix) (128 levels,
    complex). Within 3 ulp of mpmath in float64, except next to Ci's zeros (0.6165...,
    3.3842..., ...), where its value cancels and the error is a few ulp of its terms.
    The derivatives are sin(x) / x and cos(x) / x."""
    (x,), kind = _wide("sici", x)
    si, ci = _sici(x)
    return _narrow(si, kind), _narrow(ci, kind)


_FRESNEL_SERIES_BELOW = 1.2
# S = sum_k (-1)^k (pi/2)^(2k+1) x^(4k+3) / ((2k+1)! (4k+3)), C likewise with (2k)! and 4k+1.
_FRESNEL_S_SERIES = [
    (-1) ** k * (math.pi / 2) ** (2 * k + 1) / (math.factorial(2 * k + 1) * (4 * k + 3))
    for k in range(20)
]  # in x^4, times x^3
_FRESNEL_C_SERIES = [
    (-1) ** k * (math.pi / 2) ** (2 * k) / (math.factorial(2 * k) * (4 * k + 1)) for k in range(20)
]  # in x^4, times x
_FRESNEL_FRACTION_TERMS = 128
# Beyond this, C and S are 1/2 to within float64's precision (about 1/(pi x) away).
_FRESNEL_HALF_FROM = 1e17


def _half_pi_square_phase(x):
    """(cos, sin) of pi x^2 / 2, with x^2 split exactly into a rounded square and its error
    and reduced modulo 4 before multiplying by pi/2, so that the phase is exact for large x
    (where pi x^2 / 2 rounded first would be off by many radians). For x below 1e150."""
    split = 134217729.0 * x
    high = split - (split - x)
    low = x - high
    square = x * x
    error = ((high * high - square) + 2 * high * low) + low * low
    turns = fnp.fmod(square, 4.0) + error
    phase = 0.5 * math.pi * turns
    return fnp.cos(phase), fnp.sin(phase)


def _fresnel_positive(a):
    """(S(a), C(a)) for a >= 0: below 1.2 their power series; above
    C + iS = (1 + i) / 2 (1 - erfc(z)), z = (1 - i) sqrt(pi) a / 2, with erfc's continued
    fraction in 2 z^2 = -i pi a^2 and exp(-z^2) = exp(i pi a^2 / 2)."""
    in_series = a < _FRESNEL_SERIES_BELOW
    near = _select(in_series, a, 1.0)
    fourth = (near * near) ** 2
    s_series = near**3 * _horner(_FRESNEL_S_SERIES, fourth)
    c_series = near * _horner(_FRESNEL_C_SERIES, fourth)
    far = _select(in_series | (a >= _FRESNEL_HALF_FROM), _FRESNEL_SERIES_BELOW, a)
    y = lax.complex(fnp.zeros_like(far), -math.pi * far * far)
    denominator = _backward_fraction(
        y,
        _FRESNEL_FRACTION_TERMS,
        lambda k: -(2 * k - 1) * (2 * k) + 0j,
        lambda k: y + (4 * k + 1),
    )
    cos, sin = _half_pi_square_phase(far)
    z = lax.complex(far, -far) * (0.5 * _SQRT_PI)
    erfc = lax.complex(cos, sin) * (2 / _SQRT_PI) * z / denominator
    value = lax.complex(0.5, 0.5) * (1 - erfc)
    s = fnp.where(in_series, s_series, lax.imag(value))
    c = fnp.where(in_series, c_series, lax.real(value))
    beyond = a >= _FRESNEL_HALF_FROM
    return fnp.where(beyond, 0.5, s), fnp.where(beyond, 0.5, c)


@custom_jvp
def _fresnel(x):
    s, c = _fresnel_positive(fnp.where(fnp.isnan(x), 1.0, fnp.abs(x)))
    s, c = fnp.where(x < 0, -s, s), fnp.where(x < 0, -c, c)
    nan = fnp.isnan(x)
    return fnp.where(nan, fnp.nan, s), fnp.where(nan, fnp.nan, c)


@_fresnel.defjvp
def _fresnel_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    bounded = fnp.where(fnp.abs(x) < 1e150, x, 0.0)
    cos, sin = _half_pi_square_phase(bounded)
    return _fresnel(x), (tangent * sin, tangent * cos)


def fresnel(x: ArrayLike) -> tuple[Array, Array]:
    """The Fresnel integrals (S(x), C(x)) = int_0^x (sin, cos)(pi t^2 / 2) dt, SciPy's order.

    Below |x| = 1.2 their power series, above from erfc's continued fraction at the complex
    argument (1 - i) sqrt(pi) x / 2 (128 levels), with the phase pi x^2 / 2 reduced exactly
    (SciPy's loses digits there: at x = 1e4 its phase is off by about 1e-8). Within 4 ulp of
    mpmath in float64. The derivatives are sin(pi x^2 / 2) and cos(pi x^2 / 2)."""
    (x,), kind = _wide("fresnel", x)
    s, c = _fresnel(x)
    return _narrow(s, kind), _narrow(c, kind)
