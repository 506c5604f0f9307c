"""cond and switch: results against a Python `if`, under jit, grad, vmap and their compositions.

The reference for every check is the same function with the branch chosen by Python on
concrete values, so no control-flow primitive is involved in the expected values.
"""

import functools

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_batching, check_staging
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.core import ShapedArray
from funcgrad.interpreters.partial_eval import PartialEvalTrace
from funcgrad.lax.control_flow.conditionals import cond_p
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(0)


def true_fun(x, y):
    return fnp.sin(x) * y


def false_fun(x, y):
    return fnp.cos(y) * x**2


def python_if(pred, x, y):
    return true_fun(x, y) if pred else false_fun(x, y)


def with_cond(pred, x, y):
    return lax.cond(pred, true_fun, false_fun, x, y)


def by_sign(x, y):
    """The branch is chosen by the data, so transformations see a traced predicate."""
    return lax.cond(fnp.sum(x) > 0, true_fun, false_fun, x, y)


def by_sign_reference(x, y):
    return python_if(np.sum(x) > 0, x, y)


BRANCHES = [
    lambda x: fnp.sin(x),
    lambda x: x * 3.0,
    lambda x: fnp.exp(-x) + 1.0,
]


def switch_reference(index, x):
    return BRANCHES[min(max(int(index), 0), len(BRANCHES) - 1)](x)


def names_of(closed) -> list[str]:
    return [eqn.primitive.name for eqn in closed.eqns]


def all_names(closed) -> set[str]:
    """Primitive names in a jaxpr and in the jaxprs its equations carry."""
    names = set()
    for eqn in closed.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for inner in value if isinstance(value, tuple) else (value,):
                if isinstance(inner, fg.ir.ClosedJaxpr):
                    names |= all_names(inner)
    return names


float_arrays = fst.arrays(np.float64, fst.shapes(max_dims=2, max_side=3), min_value=-2, max_value=2)


# ---------------------------------------------------------------------------------------------
# Values: eager, jit, make_jaxpr


@given(st.booleans(), float_arrays)
def test_cond_equals_python_if_eagerly_under_jit_and_staged(pred, x):
    y = np.flip(x) + 0.5
    expected = python_if(pred, x, y)
    assert_close(with_cond(pred, x, y), expected, np.float64)
    assert_close(fg.jit(with_cond)(pred, x, y), expected, np.float64)
    check_staging(with_cond, np.bool_(pred), x, y)


@pytest.mark.parametrize("pred", [0, 3, -1, 0.0, 0.25, np.float32(-2.0), np.int8(0)])
def test_numeric_predicates_are_compared_with_zero(pred):
    x = np.array([0.5, -1.0])
    assert_close(with_cond(pred, x, x), python_if(pred != 0, x, x))
    assert_close(fg.jit(with_cond)(pred, x, x), python_if(pred != 0, x, x))


def test_only_the_chosen_branch_runs_eagerly_and_under_jit():
    # With debug_nans on, running the log branch on a negative input would raise.
    def f(x):
        return lax.cond(fnp.sum(x) > 0, fnp.log, lambda x: x * 2.0, x)

    x = np.array([-1.0, -3.0])
    fg.config.update("debug_nans", True)
    try:
        assert_close(f(x), 2 * x)
        assert_close(fg.jit(f)(x), 2 * x)
        with pytest.raises(FloatingPointError, match="log"):
            fnp.log(x)
    finally:
        fg.config.update("debug_nans", False)
    closed = fg.make_jaxpr(lambda p, x: lax.cond(p, fnp.sin, fnp.cos, x))(True, x)
    assert names_of(closed) == ["convert_element_type", "cond"]


def test_the_staged_program_is_pinned():
    closed = fg.make_jaxpr(lambda p, x: lax.cond(p, lambda x: fnp.sin(x) * 2.0, fnp.cos, x))(
        True, np.ones(3, np.float32)
    )
    assert str(closed).splitlines()[:3] == [
        "{ lambda ; a:bool[] b:f32[3]. let",
        "    c:i32[] = convert_element_type[new_dtype=int32 weak_type=False] a",
        "    d:f32[3] = cond[branches=(",
    ]
    false_branch, true_branch = closed.eqns[1].params["branches"]
    assert str(false_branch) == "{ lambda ; a:f32[3]. let\n    b:f32[3] = cos a\n  in (b,) }"
    assert str(true_branch) == (
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = mul b 2.0:f32[]\n"
        "  in (c,) }"
    )


@given(st.integers(-3, 5), float_arrays)
@settings(max_examples=10)
def test_switch_clamps_the_index(index, x):
    def f(i, x):
        return lax.switch(i, BRANCHES, x)

    expected = switch_reference(index, x)
    assert_close(f(index, x), expected, np.float64)
    assert_close(fg.jit(f)(np.int32(index), x), expected, np.float64)
    check_staging(f, np.int32(index), x)


def test_switch_index_dtypes_and_a_single_branch():
    x = np.array([0.5, 2.0])
    big = np.int64(2**40)  # would wrap to 0 if narrowed to int32 before clamping
    assert_close(lax.switch(big, BRANCHES, x), BRANCHES[2](x))
    assert_close(lax.switch(np.uint8(200), BRANCHES, x), BRANCHES[2](x))
    assert_close(lax.switch(np.int8(-100), BRANCHES, x), BRANCHES[0](x))
    assert_close(lax.switch(7, [fnp.tanh], x), np.tanh(x))


def test_pytree_operands_and_outputs_and_closed_over_values():
    params = {"w": RNG.standard_normal(3), "b": np.float64(0.5)}
    shared = RNG.standard_normal(3)
    only_true = RNG.standard_normal(3)

    def on_true(p, xs):
        x, (z,) = xs
        return {"out": fnp.tanh(p["w"] * x + p["b"]) + shared * only_true, "aux": (z, x)}

    def on_false(p, xs):
        x, (z,) = xs
        return {"out": p["w"] - x + shared, "aux": (z * 2.0, x * p["b"])}

    x, z = RNG.standard_normal(3), RNG.standard_normal(2)
    for pred in (True, False):
        out = lax.cond(pred, on_true, on_false, params, (x, (z,)))
        expected = (on_true if pred else on_false)(params, (x, (z,)))
        assert fg.tree_util.tree_structure(out) == fg.tree_util.tree_structure(expected)
        for a, e in zip(fg.tree_util.tree_leaves(out), fg.tree_util.tree_leaves(expected)):
            assert_close(a, e)
    closed = fg.make_jaxpr(lambda p, xs: lax.cond(True, on_true, on_false, p, xs))(
        params, (x, (z,))
    )
    # `shared` is passed once to both branches; `only_true` too, and ignored by on_false.
    (cond_eqn,) = [e for e in closed.eqns if e.primitive.name == "cond"]
    assert len(cond_eqn.invars) == 1 + 2 + 4
    assert all(len(b.in_avals) == 6 for b in cond_eqn.params["branches"])


def test_output_weak_types_join_like_jax():
    strong = np.float32(2.0)

    def f(p, x):
        return lax.cond(p, lambda x: (1.0, x), lambda x: (2.0, strong), x)

    for pred in (True, False):
        weak_out, mixed_out = f(pred, 3.0)
        assert weak_out.weak_type and not mixed_out.weak_type
        assert mixed_out.dtype == np.float32
        assert float(mixed_out) == (3.0 if pred else 2.0)
    check_staging(f, True, 3.0)
    out_avals = fg.make_jaxpr(f)(True, 3.0).out_avals
    assert out_avals == [ShapedArray((), np.float32, True), ShapedArray((), np.float32, False)]


def test_disable_jit_calls_the_chosen_function_directly():
    def python_branch(x):
        return x * 2.0 if float(x) > 0 else x  # Python control flow on a concrete value

    with fg.disable_jit():
        assert float(lax.cond(True, python_branch, python_branch, 1.5)) == 3.0
        assert float(lax.switch(1, [python_branch, lambda x: -x], 1.5)) == -1.5


# ---------------------------------------------------------------------------------------------
# Differentiation


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_check_grads_to_second_order_in_both_branches(sign):
    x = sign * np.array([0.7, 1.3])
    y = np.array([0.4, -0.9])
    check_grads(by_sign, (x, y), order=2)
    check_grads(lambda x: lax.switch(sign > 0, BRANCHES[1:], x), (x,), order=2)


@given(float_arrays, st.booleans())
@settings(max_examples=10)
def test_grad_jvp_and_vjp_equal_those_of_python_if(x, pred):
    y = np.cos(x)

    def loss(f):
        return lambda x, y: fnp.sum(f(pred, x, y))

    expected = fg.grad(loss(python_if), argnums=(0, 1))(x, y)
    for f in (with_cond, fg.jit(with_cond)):
        actual = fg.grad(loss(f), argnums=(0, 1))(x, y)
        for a, e in zip(actual, expected):
            assert_close(a, e, np.float64)
    tangents = (np.ones_like(x), np.full_like(y, 0.5))
    _, t_out = fg.jvp(lambda x, y: with_cond(pred, x, y), (x, y), tangents)
    _, t_expected = fg.jvp(lambda x, y: python_if(pred, x, y), (x, y), tangents)
    assert_close(t_out, t_expected, np.float64)
    _, pullback = fg.vjp(lambda x, y: with_cond(pred, x, y), x, y)
    _, pullback_expected = fg.vjp(lambda x, y: python_if(pred, x, y), x, y)
    for a, e in zip(pullback(np.ones_like(x)), pullback_expected(np.ones_like(x))):
        assert_close(a, e, np.float64)


def test_tangent_zero_in_one_branch_and_not_the_other():
    x, y = np.array([0.5, 2.0]), np.array([1.5, -1.0])

    def f(pred, x, y):
        # The true branch ignores y and returns a constant as its second output.
        return lax.cond(
            pred, lambda x, y: (x * 2.0, fnp.ones_like(x)), lambda x, y: (y, x * y), x, y
        )

    for pred in (True, False):
        _, (tx, ty) = fg.jvp(functools.partial(f, pred, x), (y,), (np.ones(2),))
        assert_close(tx, np.zeros(2) if pred else np.ones(2))
        assert_close(ty, np.zeros(2) if pred else x)
        check_grads(functools.partial(f, pred), (x, y), order=2)


def test_grad_of_a_closed_over_value_and_integer_operands():
    w = np.array([0.3, -0.8])

    def f(w, n):
        return fnp.sum(lax.cond(n > 1, lambda n: fnp.sin(w) * n, lambda n: w * w, n))

    for n in (0, 3):
        expected = np.cos(w) * n if n > 1 else 2 * w
        assert_close(fg.grad(f)(w, n), expected)
        assert_close(fg.jit(fg.grad(f))(w, n), expected)


def test_grad_of_jit_of_cond_and_hessian():
    x, y = np.array([0.7, -0.2]), np.array([1.1, 0.4])
    for sign in (1.0, -1.0):
        expected = fg.grad(lambda x: fnp.sum(by_sign_reference(x, y)))(sign * x)
        assert_close(fg.grad(fg.jit(lambda x: fnp.sum(by_sign(x, y))))(sign * x), expected)
        assert_close(fg.jit(fg.grad(lambda x: fnp.sum(by_sign(x, y))))(sign * x), expected)
    hessian = fg.hessian(lambda x: fnp.sum(by_sign(x, y)))
    assert_close(hessian(x), np.diag(-np.sin(x) * y))
    assert_close(hessian(-x), np.diag(2 * np.cos(y)))


def test_value_and_grad_of_jit_of_cond():
    y = np.array([1.1, 0.4])
    value, _ = fg.value_and_grad(fg.jit(lambda x: fnp.sum(by_sign(x, y))))(np.array([0.7, 0.2]))
    assert_close(value, np.sum(by_sign_reference(np.array([0.7, 0.2]), y)))


def test_linearize_stores_only_the_chosen_branch_residuals():
    def f(x):
        return lax.cond(fnp.sum(x) > 0, lambda x: fnp.sin(fnp.cos(x)), fnp.exp, x)

    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0])):
        _, f_jvp = fg.linearize(f, x)
        linear = fg.make_jaxpr(f_jvp)(x)
        # One cond in the linear program, and no primal work left in it: the residuals are
        # one slot per value of the branch needing the most (2 for sin∘cos; exp needs 1).
        assert "cond" in names_of(linear)
        assert not {"sin", "cos", "exp"} & all_names(linear)
        assert [c.shape for c in linear.consts] == [(2,), (2,)]
        t = np.array([0.5, -1.5])
        expected = np.cos(np.cos(x)) * -np.sin(x) * t if x[0] > 0 else np.exp(x) * t
        assert_close(f_jvp(t), expected)


def test_an_unknown_index_stages_the_whole_cond():
    x = fnp.asarray(np.array([1.0, 2.0]))
    staged = fg.make_jaxpr(lambda p, x: lax.cond(p, fnp.sin, fnp.cos, x))(True, x)
    branches = staged.eqns[1].params["branches"]
    trace = PartialEvalTrace(fg.core.current_trace(), "an unknown index")
    index = trace.new_arg(ShapedArray((), np.int32))
    with fg.core.set_current_trace(trace):
        outs = cond_p.bind(index, x, branches=branches)
    closed = trace.to_closed_jaxpr(outs)
    trace.alive = False
    assert names_of(closed) == ["cond"]
    assert_close(
        fg.ir.eval_jaxpr(closed.jaxpr, closed.consts, fnp.asarray(np.int32(1)))[0], np.sin(x)
    )


# ---------------------------------------------------------------------------------------------
# Batching


@given(st.integers(1, 4), st.integers(0, 1), st.integers(-1, 0))
@settings(max_examples=10)
def test_vmap_of_a_batched_predicate_equals_a_loop(size, y_axis, x_axis):
    x = RNG.standard_normal((3, size) if x_axis else (size, 3))
    y = RNG.standard_normal((3, size) if y_axis else (size, 3))
    check_batching(by_sign, (x, y), (x_axis, y_axis))
    check_batching(by_sign, (x, y[0] if y_axis == 0 else y[:, 0]), (x_axis, None), out_axes=1)
    index = np.arange(size, dtype=np.int32) - 1
    check_batching(lambda i, x: lax.switch(i, BRANCHES, x), (index, x[..., 0]), (0, None))


def test_a_batched_predicate_becomes_a_select_over_every_branch():
    closed = fg.make_jaxpr(fg.vmap(by_sign))(np.ones((4, 3)), np.ones((4, 3)))
    names = names_of(closed)
    assert "cond" not in names and "select_n" in names
    assert {"sin", "cos"} <= set(names)


@given(st.integers(1, 4), st.booleans())
@settings(max_examples=10)
def test_vmap_with_an_unbatched_predicate_keeps_one_cond(size, pred):
    x = RNG.standard_normal((size, 3))
    y = RNG.standard_normal(3)
    check_batching(lambda x, y: with_cond(pred, x, y), (x, y), (0, None))
    check_batching(lambda y, x: with_cond(pred, x, y), (y[None].repeat(size, 0), x[0]), (0, None))
    closed = fg.make_jaxpr(fg.vmap(lambda x: with_cond(pred, x, y)))(x)
    assert names_of(closed).count("cond") == 1 and "select_n" not in names_of(closed)


def test_unbatched_outputs_stay_unbatched_under_an_unbatched_predicate():
    x, y = RNG.standard_normal((4, 3)), RNG.standard_normal(3)

    def f(x):
        return lax.cond(True, lambda x, y: (x * y, y + 1.0), lambda x, y: (x - y, y), x, y)

    out, constant = fg.vmap(f, out_axes=(0, None))(x)
    assert_close(out, x * y)
    assert_close(constant, y + 1.0)


def test_per_example_gradients_through_cond():
    xs = RNG.standard_normal((5, 2))
    y = np.array([0.3, -1.2])

    def loss(x):
        return fnp.sum(by_sign(x, y))

    expected = np.stack([np.asarray(fg.grad(loss)(x)) for x in xs])
    assert_close(fg.vmap(fg.grad(loss))(xs), expected)
    assert_close(fg.jit(fg.vmap(fg.grad(loss)))(xs), expected)
    assert_close(fg.vmap(fg.grad(loss), in_axes=1)(xs.T.copy()), expected)


def test_gradient_of_a_shared_operand_through_a_batched_predicate():
    """grad of a sum over vmapped lanes, in an operand every lane shares: each lane runs both
    branches, and a lane's NaN in the branch it does not take (sqrt of a negative) once made
    the shared gradient NaN; the per-lane conds of a Python loop never run that branch."""
    xs = np.array([3.0, 0.5, 2.0])

    def f(x, w):
        return lax.cond(x > w, lambda x, w: fnp.sqrt(x - w), lambda x, w: x * 0.0, x, w)

    w = np.float64(1.0)
    expected = sum(float(fg.grad(f, argnums=1)(x, w)) for x in xs)
    for transform in (fg.grad, fg.jacfwd):
        got = transform(lambda w: fnp.sum(fg.vmap(f, in_axes=(0, None))(xs, w)))(w)
        np.testing.assert_allclose(float(got), expected, rtol=1e-12)
    check_batching(f, (xs, np.float64(1.0)), (0, None))


def nested(x):
    """A cond and a jit inside a branch of a cond: reverse mode splits them by their own rules."""

    def on_true(x):
        inner = lax.cond(x[1] > 0, fnp.sin, lambda x: x**3, x)
        return inner * fg.jit(fnp.cos)(x)

    return fnp.sum(lax.cond(x[0] > 0, on_true, lambda x: fnp.tanh(x) + x, x))


def nested_reference(x):
    if x[0] > 0:
        return np.sum((np.sin(x) if x[1] > 0 else x**3) * np.cos(x))
    return np.sum(np.tanh(x) + x)


NESTED_POINTS = np.array([[0.5, 1.0], [-0.5, 1.0], [0.5, -1.0], [-0.5, -1.0]])


def test_nested_conds_and_jit_under_grad():
    for x in NESTED_POINTS:
        value, grad = fg.value_and_grad(nested)(x)
        assert_close(value, nested_reference(x))
        assert_close(grad, fg.grad(lambda x: fnp.sum(nested_reference_traceable(x)))(x))
        check_grads(nested, (x,), order=2)


def nested_reference_traceable(x):
    """nested_reference in funcgrad.numpy, branching in Python on the concrete point (bool()
    of a comparison: float() of a value being differentiated raises, as in JAX)."""
    if x[0] > 0:
        return (fnp.sin(x) if x[1] > 0 else x**3) * fnp.cos(x)
    return fnp.tanh(x) + x


def test_nested_conds_under_vmap_of_grad():
    assert_close(fg.vmap(nested)(NESTED_POINTS), [nested_reference(x) for x in NESTED_POINTS])
    check_batching(fg.grad(nested), (NESTED_POINTS,), (0,))


# ---------------------------------------------------------------------------------------------
# Errors


def test_mismatched_branch_outputs_name_both_types():
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match=r"f32\[3\] in one and f32\[2\] in the other"):
        lax.cond(True, lambda x: x, lambda x: x[:2], x)
    with pytest.raises(TypeError, match=r"f32\[3\] in one and i32\[3\] in the other"):
        lax.cond(True, lambda x: x, lambda x: x.astype(np.int32), x)
    with pytest.raises(TypeError, match="pytree structure"):
        lax.cond(True, lambda x: (x, x), lambda x: x, x)
    with pytest.raises(TypeError, match=r"branch 0 and branch 2 .*f32\[3\] in one and f32\[\]"):
        lax.switch(0, [fnp.sin, fnp.cos, fnp.sum], x)


def test_a_branch_returning_a_float0_tangent_is_refused_by_name():
    def index_tangent(x):  # the float0 tangent of an integer output
        return fg.jvp(fnp.argmax, (x,), (x,))[1]

    x = np.array([0.3, -0.1])
    with pytest.raises(TypeError, match=r"returned a float0 array of shape \(\)"):
        lax.cond(x[0] > 0, index_tangent, index_tangent, x)


def test_bad_predicates_and_indices():
    x = np.ones(2)
    with pytest.raises(TypeError, match=r"pred must be a scalar.*shape \(2,\)"):
        lax.cond(np.array([True, False]), fnp.sin, fnp.cos, x)
    with pytest.raises(TypeError, match=r"pred must be a scalar.*shape \(2,\)"):
        fg.vmap(lambda p: lax.cond(p, fnp.sin, fnp.cos, x))(np.ones((3, 2), bool))
    with pytest.raises(TypeError, match=r"index must be a scalar.*shape \(2,\)"):
        lax.switch(np.array([0, 1]), [fnp.sin, fnp.cos], x)
    with pytest.raises(TypeError, match="index must be an integer, got float32"):
        lax.switch(1.0, [fnp.sin, fnp.cos], x)
    with pytest.raises(ValueError, match="non-empty"):
        lax.switch(0, [], x)
