"""Derivatives of derivatives: every composition of the transforms against hand derivatives.

The functions are chosen so their higher derivatives are short closed forms; nothing here is
compared with another transform alone, except the identities the transforms must satisfy
(jacfwd(jacrev(f)) == jacrev(jacfwd(f)) == hessian(f)).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp

small_floats = st.floats(-2.0, 2.0)


def assert_trees_close(actual, expected, rtol=1e-12, atol=1e-12):
    assert fg.tree_util.tree_structure(actual) == fg.tree_util.tree_structure(expected)
    for a, e in zip(fg.tree_util.tree_leaves(actual), fg.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# Hessians of a function of a pytree


def quartic(params):
    """sum(a^3) + a^T B a + sum(sin(B)), a scalar of a dict of arrays."""
    a, b = params["a"], params["B"]
    return fnp.sum(a**3) + fnp.sum(a * (b @ a)) + fnp.sum(fnp.sin(b))


def quartic_hessian(params):
    a, b = params["a"], params["B"]
    n = a.shape[0]
    eye = np.eye(n)
    h_aa = np.diag(6 * a) + b + b.T
    # d/dB_kl of the a-gradient (B + B^T) a, at index i: delta_ik a_l + delta_il a_k
    h_ab = np.einsum("ik,l->ikl", eye, a) + np.einsum("il,k->ikl", eye, a)
    h_bb = np.einsum("km,ln,kl->klmn", eye, eye, -np.sin(b))
    return {
        "a": {"a": h_aa, "B": h_ab},
        "B": {"a": np.transpose(h_ab, (1, 2, 0)), "B": h_bb},
    }


def quartic_params(n, seed):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal(n), "B": rng.standard_normal((n, n))}


@given(st.integers(1, 3), st.integers(0, 2**16))
@settings(max_examples=8)
def test_hessian_of_a_pytree_function_matches_the_hand_hessian(n, seed):
    params = quartic_params(n, seed)
    assert_trees_close(fg.hessian(quartic)(params), quartic_hessian(params))


def test_jacobian_compositions_agree_with_hessian():
    params = quartic_params(2, 0)
    expected = quartic_hessian(params)
    assert_trees_close(fg.jacfwd(fg.jacrev(quartic))(params), expected)
    assert_trees_close(fg.jacrev(fg.jacfwd(quartic))(params), expected)
    assert_trees_close(fg.jacrev(fg.jacrev(quartic))(params), expected)
    assert_trees_close(fg.jacfwd(fg.jacfwd(quartic))(params), expected)


def test_hessian_with_argnums_and_has_aux():
    # f = sum(x^2 y): H_xx = diag(2y), H_xy = diag(2x), H_yy = 0.
    def f(x, y):
        return fnp.sum(x * x * y), x * y

    x, y = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    (h_xx, h_xy), (h_yx, h_yy) = fg.hessian(lambda x, y: f(x, y)[0], argnums=(0, 1))(x, y)
    assert_trees_close((h_xx, h_xy, h_yx, h_yy), tuple(map(np.diag, (2 * y, 2 * x, 2 * x, 0 * x))))
    h, aux = fg.hessian(f, has_aux=True)(x, y)
    assert_trees_close(h, np.diag(2 * y))
    assert_trees_close(aux, x * y)


def test_third_derivative_tensor():
    # f = sum(x^4) / 4 + x0 x1 x2: T[i,i,i] = 6 x_i, T[i,j,k] = 1 for i, j, k distinct, else 0.
    def f(x):
        return fnp.sum(x**4) / 4 + x[0] * x[1] * x[2]

    x = np.array([0.5, -1.0, 2.0])
    expected = np.zeros((3, 3, 3))
    expected[np.arange(3), np.arange(3), np.arange(3)] = 6 * x
    for i, j, k in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]:
        expected[i, j, k] = 1.0
    assert_trees_close(fg.jacfwd(fg.hessian(f))(x), expected)
    assert_trees_close(fg.jacrev(fg.jacrev(fg.grad(f)))(x), expected)


# ---------------------------------------------------------------------------------------------
# jvp and vjp of each other, for f(x) = A tanh(x)


A = np.array([[1.0, -2.0, 0.5], [0.3, 0.0, 4.0]])


def f_vec(x):
    return A @ fnp.tanh(x)


def sech2(x):
    return 1 - np.tanh(x) ** 2


@given(
    st.lists(small_floats, min_size=3, max_size=3), st.lists(small_floats, min_size=3, max_size=3)
)
@settings(max_examples=10)
def test_jvp_of_vjp(x, v):
    x, v = np.array(x), np.array(v)
    u = np.array([1.5, -0.7])

    def pullback(x):  # J(x)^T u = sech^2(x) * (A^T u)
        return fg.vjp(f_vec, x)[1](u)[0]

    value, tangent = fg.jvp(pullback, (x,), (v,))
    np.testing.assert_allclose(np.asarray(value), sech2(x) * (A.T @ u), rtol=1e-12, atol=1e-12)
    # d/dx sech^2(x) = -2 tanh(x) sech^2(x)
    expected = -2 * np.tanh(x) * sech2(x) * (A.T @ u) * v
    np.testing.assert_allclose(np.asarray(tangent), expected, rtol=1e-10, atol=1e-12)


@given(
    st.lists(small_floats, min_size=3, max_size=3), st.lists(small_floats, min_size=2, max_size=2)
)
@settings(max_examples=10)
def test_vjp_of_jvp(x, w):
    x, w = np.array(x), np.array(w)
    v = np.array([0.5, 1.0, -2.0])

    def push(x):  # J(x) v = A (sech^2(x) * v)
        return fg.jvp(f_vec, (x,), (v,))[1]

    value, pullback = fg.vjp(push, x)
    np.testing.assert_allclose(np.asarray(value), A @ (sech2(x) * v), rtol=1e-12, atol=1e-12)
    expected = -2 * np.tanh(x) * sech2(x) * v * (A.T @ w)
    np.testing.assert_allclose(np.asarray(pullback(w)[0]), expected, rtol=1e-10, atol=1e-12)


def test_hessian_vector_products_three_ways():
    params = quartic_params(3, 1)
    flat_hessian = quartic_hessian(params)
    v = quartic_params(3, 2)
    # (H v)_a = H_aa v_a + H_aB : v_B, (H v)_B = H_Ba v_a + H_BB : v_B
    expected = {
        "a": flat_hessian["a"]["a"] @ v["a"]
        + np.einsum("ikl,kl->i", flat_hessian["a"]["B"], v["B"]),
        "B": np.einsum("kli,i->kl", flat_hessian["B"]["a"], v["a"])
        + np.einsum("klmn,mn->kl", flat_hessian["B"]["B"], v["B"]),
    }
    assert_trees_close(fg.jvp(fg.grad(quartic), (params,), (v,))[1], expected)
    assert_trees_close(fg.linearize(fg.grad(quartic), params)[1](v), expected)
    reverse_over_reverse = fg.grad(
        lambda p: sum(
            fnp.sum(g * t)
            for g, t in zip(
                fg.tree_util.tree_leaves(fg.grad(quartic)(p)), fg.tree_util.tree_leaves(v)
            )
        )
    )(params)
    assert_trees_close(reverse_over_reverse, expected)


# ---------------------------------------------------------------------------------------------
# Repeated grad


def poly(x):
    return 3 * x**5 - 2 * x**3 + x - 7


@given(small_floats)
@settings(max_examples=10)
def test_grad_of_grad_of_grad_of_a_polynomial(x):
    x = np.float64(x)
    d1, d2, d3 = fg.grad(poly), fg.grad(fg.grad(poly)), fg.grad(fg.grad(fg.grad(poly)))
    np.testing.assert_allclose(float(d1(x)), 15 * x**4 - 6 * x**2 + 1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(d2(x)), 60 * x**3 - 12 * x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(d3(x)), 180 * x**2 - 12, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(fg.grad(d3)(x)), 360 * x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_mixed_modes_of_a_polynomial(mode):
    jac = fg.jacfwd if mode == "fwd" else fg.jacrev
    x = np.array([0.5, -1.5])
    np.testing.assert_allclose(
        np.asarray(jac(fg.grad(lambda x: fnp.sum(poly(x))))(x)),
        np.diag(60 * x**3 - 12 * x),
        rtol=1e-12,
    )


def test_value_and_grad_with_has_aux_inside_grad():
    def inner(x):
        return fnp.sum(x**3), {"square": x * x}

    def outer(x):
        # value = sum(x^3), gradient = 3x^2, aux = x^2 (aux stays differentiable outside)
        (value, aux), gradient = fg.value_and_grad(inner, has_aux=True)(x)
        return value + fnp.sum(gradient * aux["square"])

    # outer = sum(x^3 + 3 x^4), so its gradient is 3x^2 + 12x^3
    x = np.array([1.0, 2.0, -0.5])
    np.testing.assert_allclose(np.asarray(fg.grad(outer)(x)), 3 * x**2 + 12 * x**3, rtol=1e-12)
    (value, aux), gradient = fg.value_and_grad(
        lambda x: (outer(x), fg.grad(inner, has_aux=True)(x)[1]), has_aux=True
    )(x)
    np.testing.assert_allclose(float(value), np.sum(x**3 + 3 * x**4), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(aux["square"]), x * x)
