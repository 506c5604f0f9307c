"""Derivatives at kinks and ties: each piecewise function of funcgrad.numpy and funcgrad.nn
takes the one-sided derivative (or the split at a tie) that JAX takes.

How the expected values were established: JAX is not installed here, so each value was read
off JAX's own definition of the function (jax/_src/lax/lax.py, jax/_src/nn/functions.py,
jax/_src/numpy/*.py) and worked out by hand; the comment on each row names that definition.
Away from the kinks every function is also checked against central finite differences.
"""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.nn as nn
import funcgrad.numpy as fnp
from funcgrad import lax

SELU_SCALE_ALPHA = 1.0507009873554805 * 1.6732632423543772

# (name, function of one scalar, kink point, JAX's derivative there)
SCALAR_KINKS = [
    # abs jvp: select(x >= 0, g, -g)
    ("abs", fnp.abs, 0.0, 1.0),
    # relu is a custom_jvp: select(x > 0, g, 0)
    ("relu", nn.relu, 0.0, 0.0),
    # relu6 is a custom_jvp: select((x > 0) & (x < 6), g, 0)
    ("relu6 at 0", nn.relu6, 0.0, 0.0),
    ("relu6 at 6", nn.relu6, 6.0, 0.0),
    # hard_sigmoid = relu6(x + 3) / 6
    ("hard_sigmoid at -3", nn.hard_sigmoid, -3.0, 0.0),
    ("hard_sigmoid at 3", nn.hard_sigmoid, 3.0, 0.0),
    # hard_silu = x * hard_sigmoid(x): hard_sigmoid(x) + x * 0
    ("hard_silu at -3", nn.hard_silu, -3.0, 0.0),
    ("hard_silu at 3", nn.hard_silu, 3.0, 1.0),
    # leaky_relu = where(x >= 0, x, slope * x)
    ("leaky_relu", nn.leaky_relu, 0.0, 1.0),
    # hard_tanh = where(x > 1, 1, where(x < -1, -1, x))
    ("hard_tanh at 1", nn.hard_tanh, 1.0, 1.0),
    ("hard_tanh at -1", nn.hard_tanh, -1.0, 1.0),
    # elu = where(x > 0, x, alpha * expm1(where(x > 0, 0, x))): alpha * exp(0)
    ("elu", nn.elu, 0.0, 1.0),
    # celu = maximum(x, 0) + alpha * expm1(minimum(x, 0) / alpha): 1/2 + 1/2 (ties split)
    ("celu", nn.celu, 0.0, 1.0),
    # selu = scale * elu(x, alpha)
    ("selu", nn.selu, 0.0, SELU_SCALE_ALPHA),
    # max/min jvp split a tie evenly between the operands
    ("maximum tie", lambda x: fnp.maximum(x, 0.0), 0.0, 0.5),
    ("minimum tie", lambda x: fnp.minimum(x, 0.0), 0.0, 0.5),
    ("lax.max tie", lambda x: lax.max(x, 0.0), 0.0, 0.5),
    # clip = minimum(maximum(x, lo), hi)
    ("clip at lo", lambda x: fnp.clip(x, 0.0, 1.0), 0.0, 0.5),
    ("clip at hi", lambda x: fnp.clip(x, 0.0, 1.0), 1.0, 0.5),
    # clamp's jvp passes the operand's tangent only strictly inside (lo, hi)
    ("clamp at lo", lambda x: lax.clamp(0.0, x, 1.0), 0.0, 0.0),
    ("clamp at hi", lambda x: lax.clamp(0.0, x, 1.0), 1.0, 0.0),
    # ... and the bounds' tangents only strictly outside
    ("clamp, lo at tie", lambda lo: lax.clamp(lo, lo * 0, lo * 0 + 1), 0.0, 0.0),
    ("clamp, hi at tie", lambda hi: lax.clamp(hi * 0, hi * 0 + 1, hi), 1.0, 0.0),
    # fmax = where((x1 > x2) | isnan(x2), x1, x2): a tie picks x2
    ("fmax tie, first", lambda x: fnp.fmax(x, 0.0), 0.0, 0.0),
    ("fmax tie, second", lambda x: fnp.fmax(0.0, x), 0.0, 1.0),
    # fmin = where((x1 < x2) | isnan(x2), x1, x2)
    ("fmin tie, first", lambda x: fnp.fmin(x, 0.0), 0.0, 0.0),
    ("fmin tie, second", lambda x: fnp.fmin(0.0, x), 0.0, 1.0),
    # rounding and sign have zero derivative everywhere, at their jumps too
    ("round", fnp.round, 0.5, 0.0),
    ("floor", fnp.floor, 1.0, 0.0),
    ("ceil", fnp.ceil, 1.0, 0.0),
    ("trunc", fnp.trunc, 1.0, 0.0),
    ("sign", fnp.sign, 0.0, 0.0),
    ("heaviside", lambda x: fnp.heaviside(x, 0.5), 0.0, 0.0),
    # where/select send the tangent through the chosen branch only
    ("where", lambda x: fnp.where(x > 0, x, 0.0), 0.0, 0.0),
    # sparse_plus = where(x <= -1, 0, where(x >= 1, x, (x + 1)**2 / 4))
    ("sparse_plus at -1", nn.sparse_plus, -1.0, 0.0),
    ("sparse_plus at 1", nn.sparse_plus, 1.0, 1.0),
    # sparse_sigmoid = clip(x + 1, 0, 2) / 2
    ("sparse_sigmoid at -1", nn.sparse_sigmoid, -1.0, 0.25),
    ("sparse_sigmoid at 1", nn.sparse_sigmoid, 1.0, 0.25),
]


@pytest.mark.parametrize(("name", "f", "x", "want"), SCALAR_KINKS, ids=[r[0] for r in SCALAR_KINKS])
def test_derivative_at_kink(name, f, x, want):
    np.testing.assert_allclose(float(fg.grad(f)(np.float32(x))), want, rtol=1e-6)
    # The same rule serves forward mode and compiled code.
    _, tangent = fg.jvp(f, (np.float32(x),), (np.float32(1.0),))
    np.testing.assert_allclose(float(tangent), want, rtol=1e-6)
    np.testing.assert_allclose(float(fg.jit(fg.grad(f))(np.float32(x))), want, rtol=1e-6)


@pytest.mark.parametrize(("name", "f", "x", "want"), SCALAR_KINKS, ids=[r[0] for r in SCALAR_KINKS])
def test_derivative_beside_kink_matches_finite_differences(name, f, x, want):
    h = 1e-6
    for point in (x - 0.25, x + 0.25):
        fd = (float(f(np.float64(point + h))) - float(f(np.float64(point - h)))) / (2 * h)
        np.testing.assert_allclose(float(fg.grad(f)(np.float64(point))), fd, atol=1e-6)


# (name, function of a vector, point with ties, JAX's gradient of the sum of the outputs)
VECTOR_TIES = [
    # reduce_max/min jvp: the tangent is averaged over the positions that attain the extreme
    ("max", fnp.max, [1.0, 1.0, 0.0], [0.5, 0.5, 0.0]),
    ("min", fnp.min, [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]),
    ("max of three ties", fnp.max, [2.0, 2.0, 2.0], [1 / 3, 1 / 3, 1 / 3]),
    ("ptp", fnp.ptp, [1.0, 1.0, 0.0, 0.0], [0.5, 0.5, -0.5, -0.5]),
    # sort's jvp gathers the tangent by the stable sorting permutation
    ("sort, first", lambda x: fnp.sort(x)[0], [1.0, 1.0], [1.0, 0.0]),
    ("sort, second", lambda x: fnp.sort(x)[1], [1.0, 1.0], [0.0, 1.0]),
    # top_k gathers the tangent at the returned (first) index
    ("top_k", lambda x: lax.top_k(x, 1)[0], [1.0, 1.0], [1.0, 0.0]),
    # median = quantile(x, 0.5, method="midpoint") over the stably sorted values
    ("median", fnp.median, [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]),
    # hypot = max(|x|, |y|) * sqrt(1 + (min / max)^2) (min / max taken as 0 where max is 0):
    # at the origin max's tie splits abs's derivative (1 at 0) in halves
    ("hypot at the origin", lambda v: fnp.hypot(v[0], v[1]), [0.0, 0.0], [0.5, 0.5]),
    ("hypot at -0", lambda v: fnp.hypot(v[0], v[1]), [-0.0, -0.0], [0.5, 0.5]),
    ("hypot on an axis", lambda v: fnp.hypot(v[0], v[1]), [0.0, 2.0], [0.0, 1.0]),
]


@pytest.mark.parametrize(("name", "f", "x", "want"), VECTOR_TIES, ids=[r[0] for r in VECTOR_TIES])
def test_gradient_at_ties(name, f, x, want):
    got = fg.grad(lambda v: fnp.sum(f(v)))(np.array(x, np.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
