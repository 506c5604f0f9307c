"""Higher derivatives at the special points of functions written with select/where/abs.

A `select` between a formula and a constant (or `abs`, whose derivative at 0 is taken as 0)
silently cuts a function's dependence on its input at one point, so first derivatives can be
right while second or third ones are 0. The functions of funcgrad.numpy, funcgrad.nn and
funcgrad.scipy.special written with select/where/abs (found by searching their sources) are
checked here, at the points where they are smooth but their formula switches (0, ties,
integers), to third order against float64 finite differences. Points where a function itself
has a kink or a jump (relu at 0, elu's second derivative at 0, floor) are not in the list.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import funcgrad as fg
from funcgrad import nn
from funcgrad import numpy as fnp
from funcgrad.scipy import special, stats
from funcgrad.test_util import check_grads


def f64(*values):
    return tuple(np.asarray(v, np.float64) for v in values)


SMOOTH_AT_SPECIAL_POINTS = [
    ("logaddexp tie", fnp.logaddexp, f64(0.3, 0.3)),
    ("logaddexp tie at 0", fnp.logaddexp, f64(0.0, 0.0)),
    ("logaddexp apart", fnp.logaddexp, f64(1.5, -0.5)),
    ("logaddexp2 tie", fnp.logaddexp2, f64(-0.7, -0.7)),
    ("softplus at 0", nn.softplus, f64(0.0)),
    ("log_sigmoid at 0", nn.log_sigmoid, f64(0.0)),
    ("mish at 0", nn.mish, f64(0.0)),
    ("hypot at a zero side", fnp.hypot, f64(0.0, 0.7)),
    ("hypot at a zero second side", fnp.hypot, f64(-0.6, 0.0)),
    ("hypot tie", fnp.hypot, f64(0.5, -0.5)),
    ("sinc at 0", fnp.sinc, f64(0.0)),
    ("sinc at an integer", fnp.sinc, f64(2.0)),
    ("power at exponent 0", fnp.power, f64(2.0, 0.0)),
    ("power at exponent 1", fnp.power, f64(1.5, 1.0)),
    ("x ** x at 1", lambda x: x**x, f64(1.0)),
    ("xlogy at x = 0", special.xlogy, f64(0.0, 1.5)),
    ("xlog1py at x = 0", special.xlog1py, f64(0.0, 0.5)),
    ("log1mexp at its switch", nn.log1mexp, f64(math.log(2))),
    ("logsumexp tie", lambda x: nn.logsumexp(x), f64([0.2, 0.2, -1.0])),
    ("logsumexp zero weight", lambda a, b: nn.logsumexp(a, b=b), f64([0.5, 0.1], [1.0, 0.0])),
    ("softmax tie", lambda x: nn.softmax(x)[0], f64([0.4, 0.4])),
    ("log_softmax tie", lambda x: nn.log_softmax(x)[1], f64([0.4, 0.4])),
    ("gamma at a positive integer", special.gamma, f64(2.0)),
    ("factorial at an integer", special.factorial, f64(2.0)),
    ("copysign", fnp.copysign, f64(0.8, 1.0)),
    ("heaviside away from 0", lambda x: fnp.heaviside(x, 0.5) * x, f64(1.0)),
    ("remainder with a sign fix", fnp.remainder, f64(-2.5, 1.5)),
    ("floor_divide times divisor", lambda a, b: fnp.floor_divide(a, b) * b, f64(-2.5, 1.5)),
    ("nan_to_num of finite values", fnp.nan_to_num, f64([0.5, -2.0])),
    ("median of an even count", fnp.median, f64([3.0, 1.0, 4.0, 1.5])),
    ("norm ord 1", lambda x: fnp.linalg.norm(x, 1), f64([0.5, -2.0, 1.0])),
    ("norm ord inf", lambda x: fnp.linalg.norm(x, np.inf), f64([0.5, -2.0, 1.0])),
    ("nuclear norm", lambda x: fnp.linalg.norm(x, "nuc"), f64([[2.0, 0.5], [0.3, -1.0]])),
    ("slogdet", lambda x: fnp.linalg.slogdet(x)[1], f64([[2.0, 0.5], [0.3, -1.0]])),
    ("pinv", fnp.linalg.pinv, f64([[2.0, 0.5], [0.3, -1.0], [1.0, 1.0]])),
    ("beta at integers", special.beta, f64(2.0, 3.0)),
    ("entr", special.entr, f64(0.7)),
    ("rel_entr", special.rel_entr, f64(0.7, 0.4)),
    ("kl_div", special.kl_div, f64(0.7, 0.4)),
    ("celu above 0", nn.celu, f64(0.5)),
    ("poch at integers", special.poch, f64(2.0, 3.0)),
    ("loggamma at an integer", special.loggamma, f64(2.0)),
    ("logmeanexp tie", lambda x: nn.logmeanexp(x), f64([0.3, 0.3, -0.2])),
    ("standardize", lambda x: nn.standardize(x)[0], f64([0.3, 1.3, -0.2])),
    ("std", fnp.std, f64([0.3, 1.3, -0.2])),
    (
        "signed logsumexp",
        lambda a, b: nn.logsumexp(a, b=b, return_sign=True)[0],
        f64([0.5, 0.1], [2.0, -1.0]),
    ),
    ("cauchy logpdf at |y| = 1", stats.cauchy.logpdf, f64(2.5, 0.5, 2.0)),
    ("cauchy logpdf at y = -1", stats.cauchy.logpdf, f64(-1.0)),
    (
        "log_softmax with where",
        lambda x: nn.log_softmax(x, where=np.array([True, False, True]))[0],
        f64([0.4, 9.0, 0.4]),
    ),
]


@pytest.mark.parametrize(
    "f, args", [pytest.param(f, a, id=name) for name, f, a in SMOOTH_AT_SPECIAL_POINTS]
)
def test_third_derivatives_at_special_points(f, args):
    check_grads(f, args, order=3, atol=1e-4, rtol=1e-4, eps=1e-4)


# The values named in the issue, checked against their mathematical values.


def test_second_derivative_of_softplus_at_zero_is_a_quarter():
    assert float(fg.grad(fg.grad(nn.softplus))(0.0)) == pytest.approx(0.25)


def test_logistic_loss_hessian_at_zero_weights():
    features = np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -0.2]])
    labels = np.array([1.0, 0.0, 1.0])

    def loss(w):
        logits = fnp.asarray(features) @ w
        return fnp.sum(nn.softplus(logits) - labels * logits)

    hessian = fg.hessian(loss)(fnp.zeros(2))
    # At w = 0 every sigmoid is 1/2, so the Hessian is X^T X / 4.
    np.testing.assert_allclose(np.asarray(hessian), features.T @ features / 4, rtol=1e-5)


def test_second_derivative_of_hypot_at_zero_side():
    value = fg.grad(fg.grad(lambda x: fnp.hypot(x, 0.7)))(0.0)
    assert float(value) == pytest.approx(1 / 0.7, rel=1e-5)


def test_second_derivative_of_sinc_at_zero():
    assert float(fg.grad(fg.grad(fnp.sinc))(0.0)) == pytest.approx(-(np.pi**2) / 3, rel=1e-5)


def test_derivatives_of_sinc_near_zero():
    """Near 0 the quotient sin(pi x) / (pi x) differentiates into a difference of nearly equal
    terms: its first derivative at x = 1e-8 came out 30% low, its second 5%. The Taylor
    series of sinc in x gives them to float64's precision here."""
    x = np.array([1e-8, -1e-5, 1e-3])
    pi2 = np.pi**2
    first = -pi2 * x / 3 + pi2**2 * x**3 / 30 - pi2**3 * x**5 / 840
    second = -pi2 / 3 + pi2**2 * x**2 / 10 - pi2**3 * x**4 / 168
    np.testing.assert_allclose(fg.vmap(fg.grad(fnp.sinc))(x), first, rtol=1e-12)
    np.testing.assert_allclose(fg.vmap(fg.grad(fg.grad(fnp.sinc)))(x), second, rtol=1e-12)


def test_laplace_cdf_slope_at_loc_is_the_density():
    # The cdf is continuously differentiable at loc, where its two exponentials meet: the
    # slope is the density 1 / (2 scale) there (it was half that, from minimum and maximum
    # splitting their derivatives at the tie).
    x, loc, scale = f64(0.5, 0.5, 2.0)
    slopes = fg.grad(stats.laplace.cdf, argnums=(0, 1, 2))(x, loc, scale)
    np.testing.assert_allclose(np.asarray(slopes), [0.25, -0.25, 0.0], rtol=1e-15)


def test_mixed_derivative_of_power_at_exponent_zero():
    value = fg.grad(lambda y: fg.grad(lambda x: x**y)(2.0))(0.0)
    assert float(value) == pytest.approx(0.5, rel=1e-6)


def test_third_derivative_of_x_to_the_x_at_one():
    assert float(fg.grad(fg.grad(fg.grad(lambda x: x**x)))(1.0)) == pytest.approx(3.0, rel=1e-5)
