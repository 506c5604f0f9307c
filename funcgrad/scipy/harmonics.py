"""Spherical harmonics Y_n^m(theta, phi) (sph_harm_y)."""

from __future__ import annotations

import math

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.lax.elementwise import convert_element_type_p
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.numpy.shape_ops import static_value

F64 = np.float64


def _normalized_legendre(n, m, theta, n_max: int):
    """sqrt((2n + 1) (n - m)! / (4 pi (n + m)!)) P_n^m(cos theta) for 0 <= m <= n <= n_max,
    Condon-Shortley phase included, by the recurrences of the normalized functions (which
    stay in range where the unnormalized ones overflow). P_n^m is a function of cos theta
    alone: its factor (1 - cos^2 theta)^(m / 2) takes |sin theta|, which keeps its digits near
    the poles, not sin theta, whose sign would flip odd orders wherever theta lies outside
    [0, pi] (mod 2 pi)."""
    cos, sin = fnp.cos(theta), fnp.abs(fnp.sin(theta))
    diagonal = fnp.full_like(theta, 1 / math.sqrt(4 * math.pi))
    start = diagonal
    for k in range(1, n_max + 1):
        diagonal = -math.sqrt((2 * k + 1) / (2 * k)) * sin * diagonal
        start = fnp.where(m == k, diagonal, start)
    below, current = fnp.zeros_like(theta), start
    value = fnp.where(n == m, start, 0.0)
    for degree in range(1, n_max + 1):
        # degree l = m + 1 from P_mm, then the three-term recurrence in l
        l_ = fnp.asarray(degree, F64) + m
        a = fnp.sqrt((4 * l_ * l_ - 1) / fnp.maximum(l_ * l_ - m * m, 1.0))
        previous_a = fnp.sqrt((4 * (l_ - 1) ** 2 - 1) / fnp.maximum((l_ - 1) ** 2 - m * m, 1.0))
        following = a * (cos * current - fnp.where(degree == 1, 0.0, below / previous_a))
        below, current = current, following
        value = fnp.where(n == l_, current, value)
    return value


def sph_harm_y(
    n: ArrayLike,
    m: ArrayLike,
    theta: ArrayLike,
    phi: ArrayLike,
    diff_n: int | None = None,
    n_max: int | None = None,
) -> Array:
    """The spherical harmonic Y_n^m(theta, phi) = N_n^m P_n^m(cos theta) exp(i m phi) of
    degree n >= 0 and order |m| <= n, theta the polar angle and phi the azimuth (SciPy's
    sph_harm_y and its Condon-Shortley phase; Y_n^-m = (-1)^m conj(Y_n^m)).

    The normalized associated Legendre functions come from their stable recurrences, up to
    `n_max` (which must be static; taken from n when it is concrete). Within 1e-14 relative
    of SciPy's in float64 for n up to 30. Results are complex (complex128 for float64
    angles); |m| > n gives 0. `diff_n` is not supported, as in JAX."""
    if diff_n is not None:
        raise NotImplementedError("sph_harm_y: diff_n is not supported (nor is it in JAX)")
    theta, phi = promote_args_inexact("sph_harm_y", theta, phi)
    if n_max is None:
        n_max = int(np.max(static_value(n, "sph_harm_y", "n, without n_max,"), initial=0))
    complex_dtype = dtypes.complex128 if theta.dtype == dtypes.float64 else dtypes.complex64
    n = lax.convert_element_type(fnp.asarray(n), F64)
    m = lax.convert_element_type(fnp.asarray(m), F64)
    theta64 = lax.convert_element_type(theta, F64)
    phi64 = lax.convert_element_type(phi, F64)
    n, m, theta64, phi64 = fnp.broadcast_arrays(n, m, theta64, phi64)
    order = fnp.abs(m)
    legendre = _normalized_legendre(n, order, theta64, int(n_max))
    legendre = fnp.where(order <= n, legendre, 0.0)
    angle = order * phi64
    value = lax.complex(legendre * fnp.cos(angle), legendre * fnp.sin(angle))
    odd = fnp.remainder(order, 2) == 1
    conjugate = lax.complex(lax.real(value), -lax.imag(value))
    value = fnp.where(m < 0, fnp.where(odd, -conjugate, conjugate), value)
    return convert_element_type_p.bind(value, new_dtype=np.dtype(complex_dtype), weak_type=False)
