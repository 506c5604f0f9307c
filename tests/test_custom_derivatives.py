"""custom_jvp and custom_vjp: the user's rule is what every transformation uses.

Most rules here are deliberately *not* the function's true derivative (e.g. sin with the
derivative of x**3), so a result that matches the hand-derived value of the rule shows the
rule was used and the function was not differentiated through.
"""

from functools import partial

import numpy as np
import pytest
import strategies as fst
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.ir import eval_jaxpr
from funcgrad.test_util import check_grads

X = np.array([0.3, -1.2, 2.0])
T = np.array([1.0, 0.5, -2.0])


def assert_allclose(actual, expected, rtol=1e-12, atol=1e-12):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


def make_sin_with_cube_rule():
    """sin, whose rule claims the derivative of x**3; counts how often the rule runs."""
    calls = []

    @fg.custom_jvp
    def f(x):
        return fnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        calls.append(1)
        (x,), (t,) = primals, tangents
        return f(x), 3.0 * x**2 * t

    return f, calls


# ---------------------------------------------------------------------------------------------
# custom_jvp


@given(fst.arrays(np.float64, fst.shapes(max_dims=2, max_side=3), min_value=-3, max_value=3))
@settings(max_examples=10)
def test_custom_jvp_rule_drives_forward_and_reverse_mode(x):
    f, _ = make_sin_with_cube_rule()
    tangent = np.ones_like(x)
    out, tangent_out = fg.jvp(f, (x,), (tangent,))
    assert_allclose(out, np.sin(x))
    assert_allclose(tangent_out, 3 * x**2)
    # Reverse mode transposes the rule's (linear) tangent expression.
    assert_allclose(fg.grad(lambda x: fnp.sum(f(x)))(x), 3 * x**2)
    (cotangent,) = fg.vjp(f, x)[1](np.full_like(x, 2.0))
    assert_allclose(cotangent, 6 * x**2)


def test_custom_jvp_jacobians_and_linearize_use_the_rule():
    f, _ = make_sin_with_cube_rule()
    assert_allclose(fg.jacfwd(f)(X), np.diag(3 * X**2))
    assert_allclose(fg.jacrev(f)(X), np.diag(3 * X**2))
    out, f_jvp = fg.linearize(f, X)
    assert_allclose(out, np.sin(X))
    assert_allclose(f_jvp(T), 3 * X**2 * T)
    # The linear program is the rule's tangent: no cos anywhere.
    assert "cos" not in str(fg.make_jaxpr(f_jvp)(T))


def test_grad_of_grad_differentiates_the_rule():
    f, _ = make_sin_with_cube_rule()
    assert_allclose(fg.grad(fg.grad(f))(1.5), 6 * 1.5, rtol=1e-6)
    assert_allclose(fg.hessian(lambda x: fnp.sum(f(x)))(X), np.diag(6 * X))


def test_staged_function_holds_the_rule():
    f, _ = make_sin_with_cube_rule()
    closed = fg.make_jaxpr(f)(X)
    assert [eqn.primitive.name for eqn in closed.eqns] == ["custom_jvp_call"]
    assert "sin" in str(closed)

    def staged(x):
        return eval_jaxpr(closed.jaxpr, closed.consts, x)[0]

    assert_allclose(staged(fnp.asarray(X)), np.sin(X))
    assert_allclose(fg.grad(lambda x: fnp.sum(staged(x)))(X), 3 * X**2)
    assert_allclose(fg.jvp(staged, (X,), (T,))[1], 3 * X**2 * T)
    # Differentiating first and then staging leaves the rule's derivative, not cos.
    grad_jaxpr = str(fg.make_jaxpr(fg.grad(lambda x: fnp.sum(f(x))))(X))
    assert "cos" not in grad_jaxpr


def test_eager_call_runs_the_function_not_the_rule():
    f, calls = make_sin_with_cube_rule()
    assert_allclose(f(X), np.sin(X))
    assert calls == []
    fg.jvp(f, (X,), (T,))
    assert calls == [1]


def test_defjvps_sums_per_argument_rules_and_none_means_zero():
    @fg.custom_jvp
    def f(x, y):
        return fnp.sin(x) * y

    f.defjvps(lambda tx, ans, x, y: fnp.cos(x) * y * tx, lambda ty, ans, x, y: fnp.sin(x) * ty)
    y = np.array([2.0, -0.5, 1.0])
    _, tangent = fg.jvp(f, (X, y), (T, T))
    assert_allclose(tangent, np.cos(X) * y * T + np.sin(X) * T)
    check_grads(f, (X, y), order=2)

    @fg.custom_jvp
    def g(x, y):
        return fnp.sin(x) * y

    g.defjvps(lambda tx, ans, x, y: fnp.cos(x) * y * tx, None)
    gx, gy = fg.grad(lambda x, y: fnp.sum(g(x, y)), argnums=(0, 1))(X, y)
    assert_allclose(gx, np.cos(X) * y)
    assert_allclose(gy, np.zeros(3))
    assert_allclose(fg.jvp(g, (X, y), (np.zeros(3), T))[1], np.zeros(3))


def test_nondiff_argnums_are_passed_first_and_stay_python_values():
    seen = []

    @partial(fg.custom_jvp, nondiff_argnums=(0,))
    def power(n, x):
        return x**n

    @power.defjvp
    def power_jvp(n, primals, tangents):
        seen.append(n)
        (x,), (t,) = primals, tangents
        return power(n, x), n * x ** (n - 1) * t

    for n in (2, 3, 5):
        assert_allclose(fg.grad(lambda x, n=n: fnp.sum(power(n, x)))(X), n * X ** (n - 1))
    assert seen == [2, 3, 5] and all(type(n) is int for n in seen)

    @partial(fg.custom_jvp, nondiff_argnums=(0,))
    def apply(fun, x):
        return fun(x)

    @apply.defjvp
    def apply_jvp(fun, primals, tangents):
        (x,), (t,) = primals, tangents
        return apply(fun, x), 2.0 * fg.jvp(fun, (x,), (t,))[1]

    assert_allclose(fg.grad(lambda x: fnp.sum(apply(fnp.sin, x)))(X), 2 * np.cos(X))
    assert_allclose(fg.jvp(partial(apply, fnp.exp), (X,), (T,))[1], 2 * np.exp(X) * T)


def test_keyword_arguments_reach_the_rule_positionally():
    @fg.custom_jvp
    def f(x, y=1.0):
        return x * y

    @f.defjvp
    def f_jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        return f(x, y), 10.0 * tx * y + 100.0 * x * ty

    y = np.array([1.0, 2.0, 3.0])
    gx, gy = fg.grad(lambda x, y: fnp.sum(f(x, y=y)), argnums=(0, 1))(X, y)
    assert_allclose(gx, 10 * y)
    assert_allclose(gy, 100 * X)
    assert_allclose(fg.grad(lambda y: fnp.sum(f(y=y, x=X)))(y), 100 * X)


def test_pytree_inputs_and_outputs():
    @fg.custom_jvp
    def f(params):
        return {"prod": params["a"] * params["b"], "pair": (fnp.sin(params["a"]), params["b"])}

    @f.defjvp
    def f_jvp(primals, tangents):
        (p,), (t,) = primals, tangents
        tangent = {"prod": 2 * t["a"] * p["b"] + 3 * p["a"] * t["b"], "pair": (t["a"], -t["b"])}
        return f(p), tangent

    params = {"a": X, "b": np.array([1.0, 2.0, 3.0])}
    out, tangent = fg.jvp(f, (params,), ({"a": T, "b": np.ones(3)},))
    assert_allclose(out["prod"], X * params["b"])
    assert_allclose(out["pair"][0], np.sin(X))
    assert_allclose(tangent["prod"], 2 * T * params["b"] + 3 * X)
    assert_allclose(tangent["pair"][0], T)
    assert_allclose(tangent["pair"][1], -np.ones(3))
    jac = fg.jacrev(f)(params)
    assert_allclose(jac["prod"]["a"], np.diag(2 * params["b"]))
    assert_allclose(jac["prod"]["b"], np.diag(3 * X))
    assert_allclose(jac["pair"][1]["b"], -np.eye(3))
    assert_allclose(jac["pair"][1]["a"], np.zeros((3, 3)))


def test_integer_outputs_take_float0_tangents_from_the_rule():
    @fg.custom_jvp
    def f(x):
        return x * 2.0, fnp.argmax(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), (t * 2.0, np.zeros((), fg.dtypes.float0))

    (_, index), (tangent, index_tangent) = fg.jvp(f, (X,), (T,))
    assert int(index) == 2
    assert_allclose(tangent, 2 * T)
    assert index_tangent.dtype == fg.dtypes.float0


@fg.custom_jvp
def log1pexp(x):
    return fnp.log(1.0 + fnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + fnp.exp(x)))


def naive_log1pexp(x):
    return fnp.log(1.0 + fnp.exp(x))


def test_log1pexp_rule_keeps_the_gradient_finite():
    # JAX's documented example: exp overflows (f32 at 100, f64 at 1000), the rule does not.
    assert float(fg.grad(log1pexp)(100.0)) == 1.0
    assert np.isnan(float(fg.grad(naive_log1pexp)(100.0)))
    assert float(fg.grad(log1pexp)(np.float64(1000.0))) == 1.0
    assert np.isnan(float(fg.grad(naive_log1pexp)(np.float64(1000.0))))


@given(st.floats(-20, 20))
@settings(max_examples=10)
def test_log1pexp_derivatives_are_the_sigmoid_and_its_derivative(x):
    sigmoid = 1 / (1 + np.exp(-x))
    x = np.float64(x)
    assert_allclose(fg.grad(log1pexp)(x), sigmoid, rtol=1e-12, atol=1e-15)
    assert_allclose(fg.grad(fg.grad(log1pexp))(x), sigmoid * (1 - sigmoid), rtol=1e-9, atol=1e-15)


def test_custom_jvp_errors_name_the_function():
    @fg.custom_jvp
    def no_rule(x):
        return x

    with pytest.raises(AttributeError, match="no_rule.*defjvp"):
        fg.jvp(no_rule, (X,), (T,))

    def with_rule(rule):
        @fg.custom_jvp
        def bad(x):
            return x * 2.0

        bad.defjvp(rule)
        return bad

    cases = [
        (lambda p, t: t[0], "bad must return a pair"),
        (lambda p, t: (p[0] * 2.0, (t[0], t[0])), "bad must return .* structure"),
        (lambda p, t: (p[0] * 2.0, fnp.sum(t[0])), r"bad returned a tangent of type f64\[\] "),
        (lambda p, t: (p[0] * 2.0, t[0].astype(np.float32)), r"type f32\[3\] for .* f64\[3\]"),
        (lambda p, t: (fnp.sum(p[0]), t[0]), r"bad returned a primal output of type f64\[\]"),
    ]
    for rule, message in cases:
        with pytest.raises(TypeError, match=message):
            fg.jvp(with_rule(rule), (X,), (T,))
        with pytest.raises(TypeError, match=message):
            fg.grad(lambda x, rule=rule: fnp.sum(with_rule(rule)(x)))(X)


def test_differentiating_a_closed_over_value_is_an_error():
    def outer(y):
        @fg.custom_jvp
        def scaled(x):
            return x * y

        scaled.defjvp(lambda p, t: (scaled(p[0]), t[0] * y))
        return fnp.sum(scaled(X))

    with pytest.raises(TypeError, match="scaled closes over a value that is being differ"):
        fg.grad(outer)(np.array([1.0, 2.0, 3.0]))
    # Closing over a value that is not differentiated is fine.
    assert_allclose(fg.grad(lambda x: fnp.sum(outer_const(x)))(X), [2.0, 3.0, 4.0])


def outer_const(x):
    y = fnp.asarray(np.array([2.0, 3.0, 4.0]))

    @fg.custom_jvp
    def scaled(x):
        return x * y

    scaled.defjvp(lambda p, t: (scaled(p[0]), t[0] * y))
    return scaled(x)


# ---------------------------------------------------------------------------------------------
# custom_vjp


@partial(fg.custom_vjp, nondiff_argnums=(0, 1))
def clip_gradient(lo, hi, x):
    return x


def clip_gradient_fwd(lo, hi, x):
    return x, None


def clip_gradient_bwd(lo, hi, _, g):
    return (fnp.clip(g, lo, hi),)


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


@given(st.floats(0.01, 5.0))
@settings(max_examples=10)
def test_clip_gradient_clips_the_incoming_cotangent(scale):
    # d/dx sum(scale * clip_gradient(x * x)) = clip(scale) * 2x
    def f(x):
        return fnp.sum(scale * clip_gradient(-0.75, 0.75, x * x))

    assert_allclose(f(X), scale * np.sum(X * X))
    assert_allclose(fg.grad(f)(X), min(scale, 0.75) * 2 * X)


def make_sin_with_cube_bwd():
    """sin, whose bwd claims the derivative of x**3, with a pytree of residuals."""
    fwd_calls = []

    @fg.custom_vjp
    def f(x, y):
        return fnp.sin(x) * y

    def f_fwd(x, y):
        fwd_calls.append(1)
        return f(x, y), {"x": x, "pair": (y, fnp.sin(x))}

    def f_bwd(residuals, g):
        x, (y, sin_x) = residuals["x"], residuals["pair"]
        return 3.0 * x**2 * y * g, sin_x * g

    f.defvjp(f_fwd, f_bwd)
    return f, fwd_calls


def test_custom_vjp_bwd_drives_vjp_grad_and_value_and_grad():
    f, fwd_calls = make_sin_with_cube_bwd()
    y = np.array([2.0, -1.0, 0.5])
    assert_allclose(f(X, y), np.sin(X) * y)
    assert fwd_calls == []
    out, pullback = fg.vjp(f, X, y)
    assert_allclose(out, np.sin(X) * y)
    gx, gy = pullback(T)
    assert_allclose(gx, 3 * X**2 * y * T)
    assert_allclose(gy, np.sin(X) * T)
    value, (gx, gy) = fg.value_and_grad(lambda x, y: fnp.sum(f(x, y)), argnums=(0, 1))(X, y)
    assert_allclose(value, np.sum(np.sin(X) * y))
    assert_allclose(gx, 3 * X**2 * y)
    assert_allclose(fg.jacrev(f)(X, y), np.diag(3 * X**2 * y))


def test_grad_of_grad_differentiates_bwd():
    f, _ = make_sin_with_cube_bwd()
    # grad = 3 x^2 y, so its derivative in x is 6 x y.
    assert_allclose(fg.grad(fg.grad(lambda x: fnp.sum(f(x, 2.0))))(np.float64(1.5)), 18.0)
    hess = fg.jacrev(fg.grad(lambda x: fnp.sum(f(x, np.ones(3)))))(X)
    assert_allclose(hess, np.diag(6 * X))


def test_staged_custom_vjp_keeps_its_rule():
    f, _ = make_sin_with_cube_bwd()
    y = np.array([2.0, -1.0, 0.5])
    closed = fg.make_jaxpr(f)(X, y)
    assert [eqn.primitive.name for eqn in closed.eqns] == ["custom_vjp_call"]
    assert "0x" not in str(closed)  # the rules print by name, not by address

    def staged(x):
        return fnp.sum(eval_jaxpr(closed.jaxpr, closed.consts, x, y)[0])

    assert_allclose(fg.grad(staged)(X), 3 * X**2 * y)


def test_nondiff_argnums_reach_bwd_first():
    seen = []

    @partial(fg.custom_vjp, nondiff_argnums=(1,))
    def scale(x, factor):
        return x * factor

    def scale_fwd(x, factor):
        return scale(x, factor), None

    def scale_bwd(factor, residuals, g):
        seen.append((factor, residuals))
        return (g * factor * 10.0,)

    scale.defvjp(scale_fwd, scale_bwd)
    assert_allclose(fg.grad(lambda x: fnp.sum(scale(x, 3.0)))(X), np.full(3, 30.0))
    assert seen == [(3.0, None)]


def test_bwd_may_return_none_for_zero_cotangents():
    @fg.custom_vjp
    def f(params, y):
        return params["w"] * y

    f.defvjp(lambda params, y: (f(params, y), y), lambda y, g: (None, g))
    params = {"w": X, "unused": np.ones(2)}
    g_params, g_y = fg.grad(lambda p, y: fnp.sum(f(p, y)), argnums=(0, 1))(params, T)
    assert_allclose(g_params["w"], np.zeros(3))
    assert_allclose(g_params["unused"], np.zeros(2))
    assert np.asarray(g_params["w"]).dtype == np.float64
    assert_allclose(g_y, np.ones(3))

    f.defvjp(lambda params, y: (f(params, y), y), lambda y, g: ({"w": g * y, "unused": None}, g))
    g_params = fg.grad(lambda p: fnp.sum(f(p, T)))(params)
    assert_allclose(g_params["w"], T)
    assert_allclose(g_params["unused"], np.zeros(2))


def test_python_scalar_arguments_accept_cotangents_of_the_computation_dtype():
    f, _ = make_sin_with_cube_bwd()
    # y = 2.0 is a weakly typed f32 scalar; bwd computes its cotangent in float64.
    gx, gy = fg.grad(f, argnums=(0, 1))(np.float64(1.5), 2.0)
    assert_allclose(gx, 3 * 1.5**2 * 2.0)
    assert_allclose(gy, np.sin(1.5), rtol=1e-6)
    assert np.asarray(gy).dtype == np.float32


def test_check_grads_in_reverse_mode_on_a_custom_vjp_function():
    @fg.custom_vjp
    def f(x):
        return fnp.sin(x) * x

    f.defvjp(lambda x: (f(x), x), lambda x, g: ((fnp.cos(x) * x + fnp.sin(x)) * g,))
    check_grads(f, (X,), order=2, modes=("rev",))


def test_forward_mode_through_custom_vjp_is_an_error():
    f, _ = make_sin_with_cube_bwd()
    with pytest.raises(TypeError, match="forward-mode .* custom_vjp function .*f"):
        fg.jvp(f, (X, X), (T, T))
    with pytest.raises(TypeError, match="forward-mode"):
        fg.jacfwd(f)(X, X)


def test_custom_vjp_errors_name_the_function():
    @fg.custom_vjp
    def no_rule(x):
        return x

    with pytest.raises(AttributeError, match="no_rule.*defvjp"):
        fg.grad(lambda x: fnp.sum(no_rule(x)))(X)

    def grad_with(fwd, bwd):
        @fg.custom_vjp
        def bad(x, y):
            return x * y

        bad.defvjp(fwd, bwd)
        return fg.grad(lambda x: fnp.sum(bad(x, T)))(X)

    def fwd(x, y):
        return x * y, y

    with pytest.raises(TypeError, match="bwd rule of .*bad must return a tuple"):
        grad_with(fwd, lambda y, g: g * y)
    with pytest.raises(
        TypeError, match=r"bad returned cotangents with structure PyTreeDef\(\[\*\]\)"
    ):
        grad_with(fwd, lambda y, g: (g * y,))
    with pytest.raises(TypeError, match="bad returned cotangents with structure"):
        grad_with(fwd, lambda y, g: ({"x": g * y}, None))
    with pytest.raises(
        ValueError, match=r"bad returned a cotangent of type f64\[\] for .*f64\[3\]"
    ):
        grad_with(fwd, lambda y, g: (fnp.sum(g), None))
    with pytest.raises(ValueError, match=r"bad returned a cotangent of type f32\[3\]"):
        grad_with(fwd, lambda y, g: (g.astype(np.float32), None))
    with pytest.raises(TypeError, match="fwd rule of .*bad must return a pair"):
        grad_with(lambda x, y: x * y, lambda y, g: (g, None))
    with pytest.raises(TypeError, match="fwd rule of .*bad returned output structure"):
        grad_with(lambda x, y: ((x * y, x), y), lambda y, g: (g, None))


def test_custom_vjp_closing_over_a_differentiated_value_is_an_error():
    def outer(y):
        @fg.custom_vjp
        def scaled(x):
            return x * y

        scaled.defvjp(lambda x: (scaled(x), None), lambda _, g: (g * y,))
        return fnp.sum(scaled(X))

    with pytest.raises(TypeError, match="scaled closes over a value that is being differ"):
        fg.grad(outer)(np.array([1.0, 2.0, 3.0]))


# ---------------------------------------------------------------------------------------------
# symbolic_zeros=True


def test_symbolic_zero_tangents_reach_the_jvp_rule_and_may_come_back():
    from funcgrad.custom_derivatives import SymbolicZero

    seen = []

    @fg.custom_jvp
    def scaled(x, y):
        return x * y, y

    def scaled_jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        seen.append((isinstance(tx, SymbolicZero), isinstance(ty, SymbolicZero)))
        t = fnp.zeros_like(x)
        if not isinstance(tx, SymbolicZero):
            t = t + tx * y
        if not isinstance(ty, SymbolicZero):
            t = t + x * ty
        # y's own tangent passes through: a symbolic zero stays one
        return (x * y, y), (t, ty)

    scaled.defjvp(scaled_jvp, symbolic_zeros=True)
    x, y = np.array([1.5, -2.0]), np.array([0.5, 3.0])
    grad_x = fg.grad(lambda x: scaled(x, y)[0].sum())(x)
    np.testing.assert_allclose(grad_x, y)
    assert seen[-1] == (False, True)
    grad_y = fg.jit(fg.grad(lambda y: (scaled(x, y)[0] + scaled(x, y)[1]).sum()))(y)
    np.testing.assert_allclose(grad_y, x + 1)
    assert seen[-1] == (True, False)
    per_lane = fg.vmap(fg.grad(lambda x, y: scaled(x, y)[0]))(x, y)
    np.testing.assert_allclose(per_lane, y)
    check_grads(lambda x, y: scaled(x, y)[0], (x, y), order=2, modes=("fwd", "rev"))

    @fg.custom_jvp
    def wrong(x):
        return x

    wrong.defjvp(
        lambda p, t: (p[0], SymbolicZero(fg.core.ShapedArray((3,), np.float64))),
        symbolic_zeros=True,
    )
    with pytest.raises(TypeError, match=r"returned a SymbolicZero\(f64\[3\]\) for an output"):
        fg.jvp(wrong, (x,), (x,))


def test_custom_vjp_with_symbolic_zeros_sees_what_is_differentiated():
    from funcgrad.custom_derivatives import (
        CustomVJPPrimal,
        SymbolicZero,
        custom_vjp_primal_tree_values,
        zero_from_primal,
    )

    seen = []

    @fg.custom_vjp
    def product_and_sum(x, y):
        return x * y, x + y

    def fwd(x, y):
        assert isinstance(x, CustomVJPPrimal) and isinstance(y, CustomVJPPrimal)
        seen.append(("perturbed", x.perturbed, y.perturbed))
        values = custom_vjp_primal_tree_values((x, y))
        return product_and_sum(*values), values

    def bwd(residuals, cts):
        (x, y), (ct_product, ct_sum) = residuals, cts
        seen.append(
            ("zero cts", isinstance(ct_product, SymbolicZero), isinstance(ct_sum, SymbolicZero))
        )
        gx, gy = zero_from_primal((x, y))
        if not isinstance(ct_product, SymbolicZero):
            gx, gy = gx + ct_product * y, gy + ct_product * x
        if not isinstance(ct_sum, SymbolicZero):
            gx, gy = gx + ct_sum, gy + ct_sum
        return gx, gy

    product_and_sum.defvjp(fwd, bwd, symbolic_zeros=True)
    x, y = np.array([1.5, -2.0]), np.array([0.5, 3.0])
    grad_x = fg.grad(lambda x: product_and_sum(x, y)[0].sum())(x)
    np.testing.assert_allclose(grad_x, y)
    assert seen[-2:] == [("perturbed", True, False), ("zero cts", False, True)]
    both = fg.jit(fg.grad(lambda x, y: product_and_sum(x, y)[1].sum(), argnums=(0, 1)))(x, y)
    np.testing.assert_allclose(both[0], np.ones(2))
    np.testing.assert_allclose(both[1], np.ones(2))
    lanes = fg.vmap(fg.grad(lambda x, y: product_and_sum(x, y)[0]))(x, y)
    np.testing.assert_allclose(lanes, y)
    check_grads(lambda x, y: sum(product_and_sum(x, y)), (x, y), order=1, modes=("rev",))

    @fg.custom_vjp
    def stops_y(x, y):
        return x * y

    stops_y.defvjp(
        lambda x, y: (stops_y(x.value, y.value), y.value),
        lambda y, ct: (ct * y, SymbolicZero.from_primal_value(y)),
        symbolic_zeros=True,
    )
    grads = fg.grad(lambda x, y: stops_y(x, y).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(grads[0], y)
    np.testing.assert_array_equal(grads[1], np.zeros(2))


def test_symbolic_zeros_from_primal_values():
    from funcgrad.custom_derivatives import SymbolicZero, zero_from_primal

    zeros = zero_from_primal({"w": np.ones((2, 3), np.float32), "n": np.int32(3)})
    np.testing.assert_array_equal(zeros["w"], np.zeros((2, 3)))
    symbolic = zero_from_primal({"w": np.ones((2, 3), np.float32)}, symbolic_zeros=True)["w"]
    assert isinstance(symbolic, SymbolicZero)
    assert symbolic.shape == (2, 3) and symbolic.dtype == np.float32
    assert SymbolicZero.from_primal_value(np.int32(1)).dtype == fg.dtypes.float0
