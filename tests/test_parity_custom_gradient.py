"""custom_gradient: a function that returns (value, vjp_fn), under grad, jit and vmap."""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp


@fg.custom_gradient
def scaled_sin(x):
    """sin(x) whose gradient is deliberately 3 cos(x), so the test can tell which rule ran."""
    return fnp.sin(x), lambda g: (3.0 * g * fnp.cos(x),)


@fg.custom_gradient
def clip_gradient(x):
    """The identity, with its cotangent clipped to [-1, 1] (a bare cotangent, not a tuple)."""
    return x, lambda g: fnp.clip(g, -1.0, 1.0)


@fg.custom_gradient
def product(x, y):
    return x * y, lambda g: (g * y, 2.0 * g * x)


X = np.array([-1.3, 0.0, 0.4, 2.0])


def test_value_is_the_functions_value():
    np.testing.assert_allclose(scaled_sin(X), np.sin(X), rtol=1e-6)


def test_grad_uses_the_returned_vjp():
    for x in X:
        np.testing.assert_allclose(fg.grad(scaled_sin)(x), 3 * np.cos(x), rtol=1e-6)
        np.testing.assert_allclose(fg.jit(fg.grad(scaled_sin))(x), 3 * np.cos(x), rtol=1e-6)
    np.testing.assert_allclose(fg.grad(lambda x: 5.0 * clip_gradient(x))(2.0), 1.0)
    np.testing.assert_allclose(fg.grad(product, argnums=(0, 1))(2.0, 3.0), (3.0, 4.0))


def test_vmap_matches_a_loop():
    want = np.array([3 * np.cos(x) for x in X])
    np.testing.assert_allclose(fg.vmap(fg.grad(scaled_sin))(X), want, rtol=1e-6)
    got = fg.grad(lambda v: fnp.sum(fg.vmap(scaled_sin)(v)))(X)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    got = fg.jit(fg.vmap(fg.grad(lambda x: 4.0 * clip_gradient(x))))(X)
    np.testing.assert_allclose(got, np.ones_like(X))


def test_the_vjp_is_itself_differentiable():
    # d/dx of 3 cos(x) is -3 sin(x); finite differences of the first derivative agree.
    h = 1e-5
    for x in X:
        fd = (fg.grad(scaled_sin)(np.float64(x + h)) - fg.grad(scaled_sin)(np.float64(x - h))) / (
            2 * h
        )
        np.testing.assert_allclose(fg.grad(fg.grad(scaled_sin))(x), fd, rtol=1e-4, atol=1e-6)


def test_a_function_that_does_not_return_a_pair_is_reported():
    bad = fg.custom_gradient(lambda x: x * 2)
    with pytest.raises(TypeError, match=r"must return a pair \(value, vjp_fn\)"):
        fg.grad(bad)(1.0)
