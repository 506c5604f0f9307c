"""checkpoint (remat): the same derivatives as the plain function, with fewer saved residuals.

`fg.linearize` keeps the residuals of the forward pass as the constants of its linear program,
so staging `f_jvp` and counting its constvars counts what the backward pass would store.
"""

import numpy as np
import pytest
import strategies as fst
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.ir import eval_jaxpr
from funcgrad.test_util import check_grads

policies = fg.checkpoint_policies
ALL_POLICIES = [
    None,
    policies.nothing_saveable,
    policies.everything_saveable,
    policies.dots_saveable,
    policies.dots_with_no_batch_dims_saveable,
]


def assert_trees_close(actual, expected, rtol=1e-12, atol=1e-12):
    actual_leaves = fg.tree_util.tree_leaves(actual)
    expected_leaves = fg.tree_util.tree_leaves(expected)
    assert fg.tree_util.tree_structure(actual) == fg.tree_util.tree_structure(expected)
    for a, e in zip(actual_leaves, expected_leaves):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol)


def mlp(w1, w2, x):
    """Two matmuls with tanh: the dot outputs are what dots_saveable may keep."""
    return fnp.sum(fnp.tanh(fnp.tanh(x @ w1) @ w2))


def mlp_args(seed=0, batch=2, sizes=(4, 5, 3)):
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((sizes[0], sizes[1])) / 2
    w2 = rng.standard_normal((sizes[1], sizes[2])) / 2
    return w1, w2, rng.standard_normal((batch, sizes[0]))


def saved_residuals(f, *args) -> list:
    _, f_jvp = fg.linearize(f, *args)
    return fg.make_jaxpr(f_jvp)(*args).consts


def test_remat_is_checkpoint():
    assert fg.remat is fg.checkpoint


@given(
    st.integers(1, 3),
    st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    st.sampled_from(ALL_POLICIES),
)
@settings(max_examples=10)
def test_gradients_equal_the_plain_function(batch, sizes, policy):
    args = mlp_args(batch=batch, sizes=sizes)
    expected = fg.grad(mlp, argnums=(0, 1, 2))(*args)
    actual = fg.grad(fg.checkpoint(mlp, policy=policy), argnums=(0, 1, 2))(*args)
    assert_trees_close(actual, expected)
    value = fg.value_and_grad(fg.checkpoint(mlp, policy=policy))(*args)[0]
    np.testing.assert_allclose(float(value), float(mlp(*args)), rtol=1e-12)


def stack(params, x, num_layers):
    """Nested pytree in, pytree out; num_layers is a Python int (a static argument)."""
    for layer in params["layers"][:num_layers]:
        x = fnp.sin(layer["w"] @ x + layer["b"])
    return {"out": x, "aux": (x * x, fnp.sum(x))}


def stack_params(seed=0, n=3):
    rng = np.random.default_rng(seed)
    layers = [{"w": rng.standard_normal((3, 3)), "b": rng.standard_normal(3)} for _ in range(n)]
    return {"layers": layers}, rng.standard_normal(3)


@pytest.mark.parametrize("num_layers", [1, 3])
def test_pytrees_and_static_argnums(num_layers):
    params, x = stack_params()

    def loss(stack_fn):
        def f(params, x):
            out = stack_fn(params, x, num_layers)
            return fnp.sum(out["out"] * out["aux"][0]) + out["aux"][1]

        return f

    expected = fg.grad(loss(stack), argnums=(0, 1))(params, x)
    checkpointed = fg.checkpoint(stack, static_argnums=2)
    assert_trees_close(fg.grad(loss(checkpointed), argnums=(0, 1))(params, x), expected)
    assert_trees_close(checkpointed(params, x, num_layers), stack(params, x, num_layers))
    # A static argument is a Python value inside the function: it may drive control flow.
    assert_trees_close(
        fg.checkpoint(stack, static_argnums=(2,))(params, x, num_layers),
        stack(params, x, num_layers),
    )


def test_policy_none_saves_only_the_inputs():
    args = mlp_args()
    saved = saved_residuals(fg.checkpoint(mlp), *args)
    assert len(saved) == len(args)
    for arg in args:
        assert any(r.shape == arg.shape and np.array_equal(np.asarray(r), arg) for r in saved)
    nothing = saved_residuals(fg.checkpoint(mlp, policy=policies.nothing_saveable), *args)
    assert len(nothing) == len(args)


def test_dots_saveable_also_saves_the_dot_outputs():
    args = mlp_args()  # x @ w1 is (2, 5), h @ w2 is (2, 3)
    plain = saved_residuals(mlp, *args)
    nothing = saved_residuals(fg.checkpoint(mlp, policy=policies.nothing_saveable), *args)
    dots = saved_residuals(fg.checkpoint(mlp, policy=policies.dots_saveable), *args)
    assert len(nothing) < len(dots) < len(plain)
    # The inputs, and the outputs of x @ w1 (2, 5) and of tanh(.) @ w2 (2, 3).
    assert sorted(r.shape for r in dots) == sorted([(4, 5), (5, 3), (2, 4), (2, 5), (2, 3)])
    unbatched = fg.checkpoint(mlp, policy=policies.dots_with_no_batch_dims_saveable)
    assert len(saved_residuals(unbatched, *args)) == len(dots)
    everything = saved_residuals(fg.checkpoint(mlp, policy=policies.everything_saveable), *args)
    assert len(everything) == len(plain)


def test_dots_with_no_batch_dims_saveable_skips_batched_matmuls():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))

    def f(a, b):
        return fnp.sum(fnp.tanh(fnp.tanh(a @ b) @ b.transpose(0, 2, 1)))

    nothing = saved_residuals(fg.checkpoint(f, policy=policies.nothing_saveable), a, b)
    unbatched = fg.checkpoint(f, policy=policies.dots_with_no_batch_dims_saveable)
    dots = saved_residuals(fg.checkpoint(f, policy=policies.dots_saveable), a, b)
    assert len(saved_residuals(unbatched, a, b)) == len(nothing) == 2
    assert len(dots) > len(nothing)


def test_the_linear_program_recomputes_what_was_not_saved():
    args = mlp_args()
    _, plain_jvp = fg.linearize(mlp, *args)
    _, remat_jvp = fg.linearize(fg.checkpoint(mlp), *args)
    assert "tanh" not in str(fg.make_jaxpr(plain_jvp)(*args))
    assert "tanh" in str(fg.make_jaxpr(remat_jvp)(*args))
    tangents = mlp_args(seed=5)
    np.testing.assert_allclose(float(remat_jvp(*tangents)), float(plain_jvp(*tangents)), rtol=1e-12)


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_check_grads_to_second_order(policy):
    args = mlp_args(sizes=(3, 2, 2))
    check_grads(fg.checkpoint(mlp, policy=policy), args, order=2)


def test_checkpoint_inside_checkpoint():
    inner = fg.checkpoint(lambda x, w: fnp.tanh(x @ w), policy=policies.dots_saveable)

    def outer_plain(w1, w2, x):
        return fnp.sum(fnp.sin(fnp.tanh(fnp.tanh(x @ w1) @ w2)))

    def outer(w1, w2, x):
        return fnp.sum(fnp.sin(inner(inner(x, w1), w2)))

    nested = fg.checkpoint(outer)
    args = mlp_args(sizes=(3, 4, 2))
    expected = fg.grad(outer_plain, argnums=(0, 1, 2))(*args)
    assert_trees_close(fg.grad(nested, argnums=(0, 1, 2))(*args), expected)
    assert len(saved_residuals(nested, *args)) == len(args)
    check_grads(nested, args, order=2)


def test_forward_mode_and_hessian_through_checkpoint():
    x = np.array([0.3, -1.1, 2.0])

    def f(x):
        return fnp.sum(fnp.sin(x) * x)

    tangent = np.array([1.0, 2.0, -1.0])
    _, tangent_out = fg.jvp(fg.checkpoint(f), (x,), (tangent,))
    np.testing.assert_allclose(
        float(tangent_out), np.sum((np.cos(x) * x + np.sin(x)) * tangent), rtol=1e-12
    )
    expected = np.diag(2 * np.cos(x) - x * np.sin(x))
    np.testing.assert_allclose(np.asarray(fg.hessian(fg.checkpoint(f))(x)), expected, atol=1e-12)
    second = fg.grad(fg.grad(fg.checkpoint(lambda x: fnp.sin(x) * x)))(np.float64(0.5))
    np.testing.assert_allclose(float(second), 2 * np.cos(0.5) - 0.5 * np.sin(0.5), rtol=1e-12)


def test_closed_over_values_are_differentiated():
    x = np.array([0.5, 1.5])

    def f(y):
        return fnp.sum(fg.checkpoint(lambda x: fnp.sin(x * y))(x))

    y = np.array([2.0, -1.0])
    np.testing.assert_allclose(np.asarray(fg.grad(f)(y)), np.cos(x * y) * x, rtol=1e-12)


def test_integer_inputs_and_outputs():
    x = np.array([0.5, 2.5, 1.0])

    def f(x, n):
        return x * n, fnp.argmax(x)

    g = fg.grad(lambda x: fnp.sum(fg.checkpoint(f)(x, np.arange(3))[0]))(x)
    np.testing.assert_allclose(np.asarray(g), np.arange(3))
    (_, index), (_, index_tangent) = fg.jvp(
        lambda x: fg.checkpoint(f)(x, np.arange(3)), (x,), (np.ones(3),)
    )
    assert int(index) == 1 and index_tangent.dtype == fg.dtypes.float0


def test_float0_arguments_and_outputs_pass_around_the_checkpointed_program():
    # The tangent of an integer output is a float0 array, which holds no data to stage.
    def tangents(x):
        return fg.jvp(lambda v: (fnp.sin(v), fnp.argmax(v)), (x,), (fnp.cos(x),))[1]

    x = np.array([0.3, 0.5])
    out, index_tangent = fg.checkpoint(tangents)(x)
    np.testing.assert_allclose(np.asarray(out), np.cos(x) ** 2, rtol=1e-12)
    assert index_tangent.dtype == fg.dtypes.float0 and index_tangent.shape == ()
    grad = fg.grad(lambda x: fnp.sum(fg.checkpoint(tangents)(x)[0]))(x)
    np.testing.assert_allclose(np.asarray(grad), -2 * np.cos(x) * np.sin(x), rtol=1e-12)
    passed = fg.checkpoint(lambda v, t: (2.0 * v, t))(x, np.zeros(3, fg.dtypes.float0))
    assert passed[1].dtype == fg.dtypes.float0 and passed[1].shape == (3,)


@fg.custom_vjp
def _sin_by_vjp(x):
    return fnp.sin(x)


_sin_by_vjp.defvjp(lambda x: (fnp.sin(x), x), lambda x, ct: (ct * fnp.cos(x),))


@pytest.mark.parametrize(
    "inner",
    [
        lambda x: fg.lax.map(_sin_by_vjp, x),
        lambda x: fg.lax.cond(x[0, 0] > 0, _sin_by_vjp, fnp.sin, x),
    ],
    ids=["map", "cond"],
)
def test_forward_over_reverse_through_a_checkpoint_of_control_flow_holding_custom_vjp(inner):
    # The primal outputs are computed again around the control flow; differentiated forward
    # (hessian, jvp of grad) they must be the custom_vjp's fwd rule, as forward mode refuses
    # the custom_vjp function itself.
    def loss(x):
        return fnp.sum(fg.checkpoint(inner)(x))

    x = np.array([[0.3, 0.5], [0.1, -0.2]])
    hessian = np.asarray(fg.hessian(loss)(x)).reshape(4, 4)
    np.testing.assert_allclose(hessian, np.diag(-np.sin(x).ravel()), rtol=1e-12, atol=1e-15)
    _, tangent = fg.jvp(fg.grad(loss), (x,), (np.ones_like(x),))
    np.testing.assert_allclose(np.asarray(tangent), -np.sin(x), rtol=1e-12)


def test_keyword_arguments_are_traced_and_differentiated_like_positional_ones():
    def f(x, *, weight):
        return fnp.sum(fnp.sin(x) * weight)

    x, weight = np.array([0.3, -0.2]), np.array([2.0, 3.0])
    grads = fg.grad(lambda x, w: fg.checkpoint(f)(x, weight=w), argnums=(0, 1))(x, weight)
    np.testing.assert_allclose(np.asarray(grads[0]), np.cos(x) * weight, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grads[1]), np.sin(x), rtol=1e-12)


def test_a_tangent_known_to_be_zero_inside_checkpoint():
    # The custom rule returns a tangent that does not depend on the input tangents.
    @fg.custom_jvp
    def blocked(x):
        return x * 3.0

    blocked.defjvp(lambda p, t: (blocked(p[0]), fnp.zeros_like(p[0])))
    x = np.array([0.3, 1.0])
    f = fg.checkpoint(lambda x: (blocked(x), fnp.sin(x)))
    (out, sin_x), (t_blocked, t_sin) = fg.jvp(f, (x,), (np.ones(2),))
    np.testing.assert_allclose(np.asarray(out), 3 * x)
    np.testing.assert_allclose(np.asarray(t_blocked), np.zeros(2))
    np.testing.assert_allclose(np.asarray(t_sin), np.cos(x), rtol=1e-12)
    g = fg.grad(lambda x: fnp.sum(f(x)[0] + f(x)[1]))(x)
    np.testing.assert_allclose(np.asarray(g), np.cos(x), rtol=1e-12)


def test_staged_checkpoint_is_one_equation_and_still_differentiates():
    args = mlp_args()
    closed = fg.make_jaxpr(fg.checkpoint(mlp, policy=policies.dots_saveable))(*args)
    assert [eqn.primitive.name for eqn in closed.eqns] == ["checkpoint"]

    def staged(*args):
        return eval_jaxpr(closed.jaxpr, closed.consts, *args)[0]

    expected = fg.grad(mlp, argnums=(0, 1, 2))(*args)
    assert_trees_close(fg.grad(staged, argnums=(0, 1, 2))(*args), expected)


@given(
    fst.arrays(
        np.float64, fst.shapes(min_dims=1, max_dims=2, max_side=3), min_value=-2, max_value=2
    )
)
@settings(max_examples=10)
def test_elementwise_chains_match_without_checkpoint(x):
    def f(x):
        return fnp.sum(fnp.exp(fnp.sin(x) * fnp.cos(x)) / (1.0 + x * x))

    expected = fg.grad(f)(x)
    for policy in (None, policies.everything_saveable):
        assert_trees_close(fg.grad(fg.checkpoint(f, policy=policy))(x), expected)
