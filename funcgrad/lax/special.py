"""lax's names for the special functions that funcgrad.scipy.special computes by composition:
igamma, igammac, igamma_grad_a, random_gamma_grad, betainc, polygamma, zeta, bessel_i0e and
bessel_i1e.

They keep lax's rules rather than NumPy's: the operands share one real floating-point dtype (a
Python scalar takes the others' dtype) and one shape, rank-0 operands broadcasting; nothing is
promoted. funcgrad.scipy is built on lax, so it is imported when one of these is called.
"""

from __future__ import annotations

from funcgrad import core, dtypes
from funcgrad.lax.base import (
    FLOAT,
    asarray,
    check_dtype_class,
    check_same_dtypes,
    elementwise_shape,
)
from funcgrad.lax.elementwise import _weak_scalar, convert_element_type, div, neg
from funcgrad.lax.shapes import full

__all__ = [
    "bessel_i0e",
    "bessel_i1e",
    "betainc",
    "igamma",
    "igamma_grad_a",
    "igammac",
    "polygamma",
    "random_gamma_grad",
    "zeta",
]


def _operands(name: str, *operands) -> list:
    """The operands as arrays of one real floating-point dtype and compatible shapes, or a
    TypeError naming what differs."""
    converted = [x if dtypes.is_python_scalar(x) else asarray(x) for x in operands]
    dtype = next((x.dtype for x in converted if not dtypes.is_python_scalar(x)), None)
    converted = [
        _weak_scalar(x, dtype) if dtype is not None and dtypes.is_python_scalar(x) else asarray(x)
        for x in converted
    ]
    avals = [core.get_aval(x) for x in converted]
    check_same_dtypes(name, avals)
    check_dtype_class(name, avals[0], FLOAT)
    elementwise_shape(name, avals)
    return converted


def igamma(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    from funcgrad.scipy import special

    return special.gammainc(*_operands("igamma", a, x))


def igammac(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    from funcgrad.scipy import special

    return special.gammaincc(*_operands("igammac", a, x))


def _gamma_derivatives(a, x):
    """dP/da and dP/dx at (a, x): the derivatives of igamma itself, so that these and
    grad(igamma) agree."""
    from funcgrad.scipy import special
    from funcgrad.transforms.autodiff import jvp

    ones_a, zeros_a = full(a.shape, 1, a.dtype), full(a.shape, 0, a.dtype)
    ones_x, zeros_x = full(x.shape, 1, x.dtype), full(x.shape, 0, x.dtype)
    _, along_a = jvp(special.gammainc, (a, x), (ones_a, zeros_x))
    _, along_x = jvp(special.gammainc, (a, x), (zeros_a, ones_x))
    return along_a, along_x


def igamma_grad_a(a, x):
    """dP(a, x)/da, the derivative of igamma in its shape parameter."""
    a, x = _operands("igamma_grad_a", a, x)
    return _gamma_derivatives(a, x)[0]


def random_gamma_grad(a, x):
    """dx/da of a Gamma(a, 1) sample x at a fixed quantile: -(dP/da) / (dP/dx), the implicit
    reparameterization gradient that makes gamma samples differentiable in a. Computed in
    float64, where the density dP/dx does not underflow as soon."""
    a, x = _operands("random_gamma_grad", a, x)
    dtype = a.dtype
    along_a, along_x = _gamma_derivatives(
        convert_element_type(a, dtypes.float64), convert_element_type(x, dtypes.float64)
    )
    return convert_element_type(neg(div(along_a, along_x)), dtype)


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    from funcgrad.scipy import special

    return special.betainc(*_operands("betainc", a, b, x))


def polygamma(m, x):
    """The m-th derivative of digamma at x, for whole m >= 0."""
    from funcgrad.scipy import special

    return special.polygamma(*_operands("polygamma", m, x))


def zeta(x, q):
    """Hurwitz's zeta function sum_k (q + k)^-x."""
    from funcgrad.scipy import special

    return special.zeta(*_operands("zeta", x, q))


def bessel_i0e(x):
    """exp(-|x|) I0(x), the exponentially scaled modified Bessel function of order 0."""
    from funcgrad.scipy import special

    return special.i0e(*_operands("bessel_i0e", x))


def bessel_i1e(x):
    """exp(-|x|) I1(x), the exponentially scaled modified Bessel function of order 1."""
    from funcgrad.scipy import special

    return special.i1e(*_operands("bessel_i1e", x))
