"""The differentiation transforms: their API, pytrees, errors, and composition.

Per-primitive rules are checked in tests/test_ad_<family>.py; here the transforms themselves are
checked against definitions that need no transform (finite differences, hand derivatives).
"""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.errors import ConcretizationTypeError
from funcgrad.test_util import check_grads


def f_scalar(x):
    return fnp.sum(fnp.sin(x) * x)


def df_scalar(x):
    return np.cos(x) * x + np.sin(x)


X = np.array([0.1, 0.5, -2.0, 3.0])


def test_grad_matches_the_hand_derivative():
    np.testing.assert_allclose(np.asarray(fg.grad(f_scalar)(X)), df_scalar(X), rtol=1e-12)


def test_value_and_grad_returns_both():
    value, gradient = fg.value_and_grad(f_scalar)(X)
    np.testing.assert_allclose(np.asarray(value), np.sum(np.sin(X) * X), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gradient), df_scalar(X), rtol=1e-12)


def test_grad_with_argnums_and_pytrees():
    def loss(params, x):
        return fnp.sum(fnp.tanh(params["w"] * x + params["b"]))

    params = {"b": np.array([0.1, 0.2]), "w": np.array([1.5, -0.5])}
    x = np.array([0.3, 0.7])
    grads = fg.grad(loss)(params, x)
    assert set(grads) == {"b", "w"}
    pre = params["w"] * x + params["b"]
    dpre = 1 - np.tanh(pre) ** 2
    np.testing.assert_allclose(np.asarray(grads["b"]), dpre, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grads["w"]), dpre * x, rtol=1e-12)
    g_params, g_x = fg.grad(loss, argnums=(0, 1))(params, x)
    np.testing.assert_allclose(np.asarray(g_x), dpre * params["w"], rtol=1e-12)


def test_has_aux():
    def f(x):
        return fnp.sum(x * x), {"norm": fnp.sqrt(fnp.sum(x * x))}

    gradient, aux = fg.grad(f, has_aux=True)(X)
    np.testing.assert_allclose(np.asarray(gradient), 2 * X)
    np.testing.assert_allclose(np.asarray(aux["norm"]), np.linalg.norm(X))
    (value, aux), gradient = fg.value_and_grad(f, has_aux=True)(X)
    np.testing.assert_allclose(np.asarray(value), np.sum(X * X))


def test_aux_may_hold_any_python_value():
    def f(x):
        return fnp.sum(x * x), {"name": "square", "count": 3, "norm": fnp.sqrt(fnp.sum(x * x))}

    gradient, aux = fg.grad(f, has_aux=True)(X)
    np.testing.assert_allclose(np.asarray(gradient), 2 * X)
    assert aux["name"] == "square" and aux["count"] == 3 and type(aux["count"]) is int
    assert fg.jvp(f, (X,), (X,), has_aux=True)[2]["name"] == "square"
    assert fg.vjp(f, X, has_aux=True)[2]["name"] == "square"


def test_pullbacks_are_pytrees_of_their_residuals():
    """vjp's and linearize's functions hold the residuals as pytree leaves: a jitted function
    can return them, and another take them."""

    def f(x):
        return fnp.sin(x) * x

    x = fnp.asarray(X)
    out, pullback = fg.jit(lambda x: fg.vjp(f, x))(x)
    np.testing.assert_allclose(np.asarray(out), np.sin(X) * X)
    assert len(fg.tree_util.tree_leaves(pullback)) >= 2  # sin(x), cos(x) or x: residuals
    (cotangent,) = pullback(np.ones(4))
    np.testing.assert_allclose(np.asarray(cotangent), df_scalar(X), rtol=1e-12)
    _, f_jvp = fg.jit(lambda x: fg.linearize(f, x))(x)
    np.testing.assert_allclose(np.asarray(f_jvp(np.ones(4))), df_scalar(X), rtol=1e-12)
    backward = fg.jit(lambda pullback, g: pullback(g))
    for scale in (1.0, 2.0, 3.0):
        _, pullback = fg.vjp(f, x * scale)
        (cotangent,) = backward(pullback, np.ones(4))
        np.testing.assert_allclose(np.asarray(cotangent), df_scalar(X * scale), rtol=1e-12)


def test_fwd_and_bwd_compile_once_and_match_vjp():
    def f(x, w, bias):
        return fnp.tanh(x @ w) + bias, fnp.sum(w)

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    fwd, bwd = fg.fwd_and_bwd(f, argnums=(0, 1), has_aux=True)
    g = rng.normal(size=(3, 2))
    for step in range(3):
        out, residuals, aux = fwd(x + step, w, 1.0)
        cotangents = bwd(residuals, g)
        # vjp's pullback, and the derivative by hand: d tanh = 1 - tanh^2.
        _, pullback, _ = fg.vjp(lambda x, w: f(x, w, 1.0), x + step, w, has_aux=True)
        dt = g * (1 - np.tanh((x + step) @ w) ** 2)
        expected = ((x + step).T @ dt).T
        np.testing.assert_allclose(np.asarray(cotangents[1]).T, expected, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(cotangents[0]), dt @ w.T, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(pullback(g)[0]), dt @ w.T, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(aux), w.sum())
    assert len(fwd._cache) == 1 and len(bwd._cache) == 1
    fwd_one, bwd_one = fg.fwd_and_bwd(lambda x: (fnp.sum(x**3), "aux"), 0, True, jitted=False)
    _, residuals, aux = fwd_one(fnp.asarray(X))
    assert aux == "aux"
    np.testing.assert_allclose(np.asarray(bwd_one(residuals, np.float64(1))), 3 * X**2, rtol=1e-12)


def test_jvp_and_linearize_agree():
    tangent = np.array([1.0, -1.0, 0.5, 2.0])
    out, tangent_out = fg.jvp(lambda x: fnp.sin(x) * x, (X,), (tangent,))
    np.testing.assert_allclose(np.asarray(tangent_out), df_scalar(X) * tangent, rtol=1e-12)
    out2, f_jvp = fg.linearize(lambda x: fnp.sin(x) * x, X)
    np.testing.assert_allclose(np.asarray(out2), np.asarray(out))
    np.testing.assert_allclose(np.asarray(f_jvp(tangent)), np.asarray(tangent_out), rtol=1e-12)


def test_vjp_is_the_adjoint_of_jvp():
    check_grads(lambda x, y: fnp.sin(x) * y + fnp.exp(y), (X, X[::-1].copy()), order=2)


def test_vjp_pullback_is_traceable():
    _, pullback = fg.vjp(lambda x: fnp.sin(x) * x, X)
    jaxpr = fg.make_jaxpr(pullback)(np.ones(4))
    assert "mul" in str(jaxpr)
    (ct,) = pullback(np.ones(4))
    np.testing.assert_allclose(np.asarray(ct), df_scalar(X), rtol=1e-12)


def test_grad_of_grad_and_hessian():
    second = fg.grad(fg.grad(lambda x: fnp.sin(x) * x))(0.5)
    np.testing.assert_allclose(float(second), 2 * np.cos(0.5) - 0.5 * np.sin(0.5), rtol=1e-6)
    hess = fg.hessian(f_scalar)(X)
    expected = np.diag(2 * np.cos(X) - X * np.sin(X))
    np.testing.assert_allclose(np.asarray(hess), expected, atol=1e-12)


def test_jacobians_have_the_output_structure_outside():
    def f(x, y):
        return {"a": x * y, "b": fnp.sin(x)}

    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])[:2]
    for jac_fn in (fg.jacfwd, fg.jacrev):
        jac = jac_fn(f, argnums=(0, 1))(x, y)
        assert set(jac) == {"a", "b"}
        assert isinstance(jac["a"], tuple) and len(jac["a"]) == 2
        np.testing.assert_allclose(np.asarray(jac["a"][0]), np.diag(y))
        np.testing.assert_allclose(np.asarray(jac["a"][1]), np.diag(x))
        np.testing.assert_allclose(np.asarray(jac["b"][0]), np.diag(np.cos(x)))
        np.testing.assert_allclose(np.asarray(jac["b"][1]), np.zeros((2, 2)))


def test_jvp_of_vjp_composes():
    def f(x):
        return fnp.sin(x) * x

    def pulled(x):
        return fg.vjp(f, x)[1](np.ones(4))[0]

    _, tangent_out = fg.jvp(pulled, (X,), (np.ones(4),))
    np.testing.assert_allclose(np.asarray(tangent_out), 2 * np.cos(X) - X * np.sin(X), rtol=1e-12)


def test_integer_inputs_get_float0_zero_tangents():
    def f(x, n):
        return fnp.sum(x * n)

    grads = fg.grad(f, argnums=(0, 1), allow_int=True)(X, np.arange(4))
    assert np.asarray(grads[1]).dtype == fg.dtypes.float0
    np.testing.assert_allclose(np.asarray(grads[0]), np.arange(4))
    _, tangent = fg.jvp(lambda n: n * 2, (np.arange(3),), (np.zeros(3, fg.dtypes.float0),))
    assert tangent.dtype == fg.dtypes.float0


def _sin_and_argmax_tangents(x):
    # jvp of a function with an integer output: its second tangent is float0.
    return fg.jvp(lambda v: (fnp.sin(v), fnp.argmax(v)), (x,), (fnp.cos(x),))[1]


def test_float0_outputs_of_a_function_are_differentiated_as_constants():
    # Forward over forward and reverse over forward with an integer output in between (the
    # float0 tangent it gets was refused as an output of the outer transformation).
    x = np.array([0.3, 0.5])
    float0_zero = np.zeros((), fg.dtypes.float0)
    hand = -np.sin(x) * np.cos(x) * np.ones(2) - np.cos(x) * np.sin(x)  # d/dx cos(x) cos(x)
    primal, tangent = fg.jvp(_sin_and_argmax_tangents, (x,), (np.ones(2),))
    np.testing.assert_allclose(np.asarray(tangent[0]), hand, rtol=1e-12)
    assert primal[1].dtype == tangent[1].dtype == fg.dtypes.float0
    _, f_jvp = fg.linearize(_sin_and_argmax_tangents, x)
    np.testing.assert_allclose(np.asarray(f_jvp(np.ones(2))[0]), hand, rtol=1e-12)
    assert f_jvp(np.ones(2))[1].dtype == fg.dtypes.float0
    (pulled,) = fg.vjp(_sin_and_argmax_tangents, x)[1]((np.ones(2), float0_zero))
    np.testing.assert_allclose(np.asarray(pulled), hand, rtol=1e-12)


def test_jacobians_pass_keyword_arguments_through_undifferentiated():
    def f(x, scale=1.0, *, offset):
        return fnp.sin(x) * scale + offset

    expected = np.diag(2.0 * np.cos(X))
    np.testing.assert_allclose(np.asarray(fg.jacfwd(f)(X, scale=2.0, offset=1.0)), expected)
    np.testing.assert_allclose(np.asarray(fg.jacrev(f)(X, scale=2.0, offset=1.0)), expected)
    hessian = fg.hessian(lambda x, *, scale: fnp.sum(f(x, scale, offset=0.0)))(X, scale=2.0)
    np.testing.assert_allclose(np.asarray(hessian), np.diag(-2.0 * np.sin(X)), rtol=1e-12)


def test_jacobians_of_integer_inputs_are_refused_unless_jacrev_allows_them():
    double = lambda n: n * 2.0  # noqa: E731
    for jacobian in (fg.jacfwd, fg.jacrev, fg.hessian):
        with pytest.raises(TypeError, match="requires floating-point inputs.*int"):
            jacobian(double)(np.arange(3))
    blocks = fg.jacrev(double, allow_int=True)(np.arange(3))
    np.testing.assert_array_equal(np.asarray(blocks), np.zeros((3, 3), np.arange(3).dtype))
    assert blocks.dtype == np.arange(3).dtype


def test_symbolic_zero_tangents_cost_nothing():
    # Differentiating w.r.t. x only: y's computation stays a constant, not part of the
    # linear program.
    _, f_jvp = fg.linearize(lambda x: x * fnp.exp(fnp.asarray(2.0, np.float64)), X)
    assert str(fg.make_jaxpr(f_jvp)(X)).count("exp") == 0


def test_grad_errors_name_the_cause():
    with pytest.raises(TypeError, match="scalar-output.*shape \\(4,\\)"):
        fg.grad(lambda x: x * 2.0)(X)
    with pytest.raises(TypeError, match="floating-point inputs.*int"):
        fg.grad(lambda n: fnp.sum(n * 2.0))(np.arange(3))
    with pytest.raises(TypeError, match="type str"):
        fg.grad(lambda x: "not an array")(X)
    with pytest.raises(TypeError, match="complex"):
        fg.grad(f_scalar, holomorphic=True)(X)
    with pytest.raises(TypeError, match="same shape and dtype"):
        fg.jvp(fnp.sin, (X,), (np.ones(3),))
    with pytest.raises(ValueError, match="argnums"):
        fg.grad(f_scalar, argnums=3)(X)


def test_grad_under_make_jaxpr_stages_the_backward_pass():
    jaxpr = fg.make_jaxpr(fg.grad(f_scalar))(X)
    names = [e.primitive.name for e in jaxpr.eqns]
    assert "cos" in names and "sin" in names


def test_jacfwd_of_integer_outputs_is_zeros_of_their_dtype():
    def f(x):
        return (x > 0).astype(np.int32), 2 * x

    labels, scaled = fg.jacfwd(f)(fnp.array([-1.0, 0.5, 2.0]))
    assert labels.dtype == np.int32 and labels.shape == (3, 3)
    np.testing.assert_array_equal(np.asarray(labels), np.zeros((3, 3)))
    np.testing.assert_allclose(np.asarray(scaled), 2 * np.eye(3))


def test_jacrev_of_integer_outputs_points_to_vjp():
    with pytest.raises(TypeError, match="must be real floating-point.*int32.*use vjp"):
        fg.jacrev(lambda x: ((x > 0).astype(np.int32), 2 * x))(fnp.array([-1.0, 0.5]))


def test_float_of_a_differentiated_value_raises_instead_of_dropping_its_derivative():
    """float(x) under grad once returned x's value as a constant, so grad(float(x) * x) at 3
    was 3, not 6. As in JAX it raises; int() and bool(), piecewise constant, still work."""
    for transform in (fg.grad, fg.jacfwd):
        with pytest.raises(ConcretizationTypeError, match="drop its derivative"):
            transform(lambda x: float(x) * x)(np.float64(3.0))
        with pytest.raises(ConcretizationTypeError, match="drop its derivative"):
            transform(lambda x: complex(x).real * x)(np.float64(3.0))
        assert float(transform(lambda x: int(x) * x)(np.float64(3.5))) == 3.0
        assert float(transform(lambda x: x * 2 if x > 0 else x)(np.float64(3.0))) == 2.0


def test_jacrev_of_a_function_without_outputs():
    # jacrev mapped its pullback over an empty basis, and vmap refused to map nothing.
    x = np.ones((2, 3))
    assert fg.jacrev(lambda x: [])(x) == []
    assert fg.jacrev(lambda x: {})(x) == {}
    assert fg.jacrev(lambda x: (x[:0], x.sum()))(x)[0].shape == (0, 3, 2, 3)


def test_a_gradient_has_the_weak_type_of_its_primal():
    # At a Python scalar the gradient is weakly typed, even where the function met strongly
    # typed values, so it promotes as the scalar did; at a typed value it is strongly typed.
    dx, dy = fg.grad(lambda x, y: x * y, argnums=(0, 1))(1.0, np.float32(2))
    assert dx.weak_type and not dy.weak_type
    assert float(dx) == 2.0 and float(dy) == 1.0
    assert (fg.grad(lambda x: x**2)(1.0) + np.ones(2, np.float16)).dtype == np.float16
    assert fg.jit(fg.grad(lambda x: x**3))(2.0).weak_type
    assert not fg.grad(lambda x: x**2)(np.float32(1.0)).weak_type
    _, pullback = fg.vjp(lambda x: x * np.float32(3), 1.0)
    assert pullback(np.float32(1))[0].weak_type


def test_a_python_float_tangent_or_cotangent_takes_the_primal_dtype():
    _, pullback = fg.vjp(lambda x: x * 2, np.float64(1.0))
    (ct,) = pullback(1.0)
    assert ct.dtype == np.float64 and float(ct) == 2.0
    _, tangent = fg.jvp(lambda x: x * 2, (np.float16(1.0),), (3.0,))
    assert tangent.dtype == np.float16 and float(tangent) == 6.0
    with pytest.raises(TypeError, match="the primal is f32\\[\\], the tangent i32\\[\\]"):
        fg.vjp(lambda x: x * 2, np.float32(1.0))[1](2)  # an int is no cotangent of a float
