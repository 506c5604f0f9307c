"""The vmap transform: axes specification, pytrees, nesting, composition, and its errors.

Per-primitive batching rules are checked in tests/test_batching_<family>.py; here the
transform itself is checked against a Python loop over the lanes.
"""

import numpy as np
import pytest
from checks import check_batching
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp

RNG = np.random.default_rng(0)


def test_in_axes_and_out_axes_ints_none_and_negative():
    x = RNG.standard_normal((3, 4))
    y = RNG.standard_normal(4)
    check_batching(lambda a, b: fnp.sin(a) * b, (x, y), (0, None))
    check_batching(lambda a, b: fnp.sin(a) * b, (x, y), (-1, 0))
    check_batching(lambda a, b: a - b, (x, x.T.copy()), (1, 0), out_axes=1)
    check_batching(lambda a: fnp.exp(a), (x,), (-2,), out_axes=-1)


@given(st.integers(0, 2), st.integers(0, 2), st.booleans())
def test_random_axes_equal_a_loop(in_axis, out_axis, batch_second):
    x = RNG.standard_normal((2, 3, 4))
    y = RNG.standard_normal((2, 3, 4))
    in_axes = (in_axis, in_axis if batch_second else None)
    y_arg = y if batch_second else np.take(y, 0, axis=in_axis)
    check_batching(lambda a, b: fnp.tanh(a) + b * a, (x, y_arg), in_axes, out_axes=out_axis)


def test_pytree_in_axes_prefixes():
    params = {"w": RNG.standard_normal(3), "b": RNG.standard_normal(())}
    xs = RNG.standard_normal((5, 3))

    def predict(params, x):
        return fnp.tanh(x * params["w"] + params["b"])

    out = fg.vmap(predict, in_axes=(None, 0))(params, xs)
    expected = np.stack([np.asarray(predict(params, x)) for x in xs])
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12)
    batched_params = {"w": np.stack([params["w"]] * 5), "b": params["b"]}
    out = fg.vmap(predict, in_axes=({"b": None, "w": 0}, 0))(batched_params, xs)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12)


def test_pytree_outputs_and_out_axes_prefix():
    xs = RNG.standard_normal((4, 3))
    out = fg.vmap(lambda x: {"a": x * 2.0, "b": (fnp.sin(x), x)}, out_axes={"a": 1, "b": 0})(xs)
    np.testing.assert_allclose(np.asarray(out["a"]), (xs * 2.0).T)
    np.testing.assert_allclose(np.asarray(out["b"][0]), np.sin(xs))


def test_unbatched_outputs_are_broadcast_or_kept_with_out_axes_none():
    xs = RNG.standard_normal((4, 3))
    c = np.ones(3)
    out = fg.vmap(lambda x: c * 2.0)(xs)
    np.testing.assert_allclose(np.asarray(out), np.ones((4, 3)) * 2.0)
    out = fg.vmap(lambda x: (x, c * 2.0), out_axes=(0, None))(xs)
    np.testing.assert_allclose(np.asarray(out[1]), np.ones(3) * 2.0)


def test_axis_size_when_nothing_is_mapped():
    out = fg.vmap(lambda: fnp.ones(2), axis_size=3)()
    assert out.shape == (3, 2)
    out = fg.vmap(lambda x: x + 1.0, in_axes=None, axis_size=2)(np.ones(3))
    assert out.shape == (2, 3)


def test_unbatched_values_stay_unbatched():
    # y does not depend on the mapped input: it must not be broadcast inside the program.
    def f(x, y):
        return x + fnp.sin(y)

    jaxpr = fg.make_jaxpr(fg.vmap(f, in_axes=(0, None)))(np.ones((5, 3)), np.ones(3))
    (sin_eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "sin"]
    assert sin_eqn.outvars[0].aval.shape == (3,)


def test_nested_vmap_equals_a_double_loop():
    x = RNG.standard_normal((2, 3, 4))
    y = RNG.standard_normal((3, 4))
    out = fg.vmap(fg.vmap(lambda a, b: fnp.sin(a) * b, in_axes=(0, 0)), in_axes=(0, None))(x, y)
    np.testing.assert_allclose(np.asarray(out), np.sin(x) * y[None], rtol=1e-12)
    out = fg.vmap(fg.vmap(lambda a: a * 2.0, in_axes=1, out_axes=0), in_axes=2, out_axes=2)(x)
    np.testing.assert_allclose(np.asarray(out), np.transpose(x, (1, 0, 2)) * 2.0)


def test_per_example_gradients_equal_a_loop_of_grads():
    w = RNG.standard_normal(3)
    xs = RNG.standard_normal((6, 3))
    ys = RNG.standard_normal(6)

    def loss(w, x, y):
        return (fnp.tanh(fnp.dot(x, w)) - y) ** 2

    per_example = fg.vmap(fg.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)
    expected = np.stack([np.asarray(fg.grad(loss)(w, x, y)) for x, y in zip(xs, ys)])
    np.testing.assert_allclose(np.asarray(per_example), expected, rtol=1e-10)


def test_grad_of_vmap_and_vmap_of_jvp():
    xs = RNG.standard_normal(5)
    gradient = fg.grad(lambda x: fnp.sum(fg.vmap(fnp.sin)(x)))(xs)
    np.testing.assert_allclose(np.asarray(gradient), np.cos(xs), rtol=1e-12)
    tangents = fg.vmap(lambda t: fg.jvp(fnp.sin, (xs,), (t,))[1])(np.eye(5))
    np.testing.assert_allclose(np.asarray(tangents), np.diag(np.cos(xs)), rtol=1e-12)


def test_jacobians_are_built_with_vmap():
    x = RNG.standard_normal(4)
    jac = fg.jacrev(lambda x: fnp.sin(x) * x[0])(x)
    expected = np.diag(np.cos(x) * x[0])
    expected[:, 0] += np.sin(x)
    np.testing.assert_allclose(np.asarray(jac), expected, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(fg.jacfwd(lambda x: fnp.sin(x) * x[0])(x)), expected)
    jaxpr = fg.make_jaxpr(fg.jacrev(lambda x: fnp.sin(x) * x[0]))(x)
    # One backward pass for all rows: the program does not grow with the output size.
    assert sum(e.primitive.name == "cos" for e in jaxpr.eqns) == 1


def test_inconsistent_sizes_name_every_argument():
    with pytest.raises(ValueError, match="argument 0 has size 3, argument 1 has size 4"):
        fg.vmap(lambda a, b: a + b)(np.ones(3), np.ones(4))


def test_in_axes_errors():
    with pytest.raises(ValueError, match="in_axes"):
        fg.vmap(lambda a, b: a + b, in_axes=(0, 0, 0))(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="in_axes"):
        fg.vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": np.ones(3)})
    with pytest.raises(ValueError, match="axis 2 of argument 0"):
        fg.vmap(fnp.sin, in_axes=2)(np.ones((3, 4)))
    with pytest.raises(ValueError, match="axis_size"):
        fg.vmap(lambda x: x, in_axes=None)(np.ones(3))


def test_out_axes_none_on_a_mapped_output_is_an_error():
    with pytest.raises(ValueError, match="out_axes is None"):
        fg.vmap(lambda x: x * 2.0, out_axes=None)(np.ones(3))


def test_vmap_of_custom_derivatives_and_checkpoint():
    @fg.custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (fnp.clip(g, -1.0, 1.0),))
    xs = np.array([0.5, 2.0, -3.0])
    grads = fg.vmap(fg.grad(lambda x: clip_gradient(x) * 3.0))(xs)
    np.testing.assert_allclose(np.asarray(grads), [1.0, 1.0, 1.0])
    values = fg.vmap(clip_gradient)(xs)
    np.testing.assert_allclose(np.asarray(values), xs)
    grads = fg.grad(lambda x: fnp.sum(fg.vmap(clip_gradient)(x) * 3.0))(xs)
    np.testing.assert_allclose(np.asarray(grads), [1.0, 1.0, 1.0])
    block = fg.checkpoint(lambda x: fnp.sin(x) * x)
    grads = fg.vmap(fg.grad(block))(xs)
    np.testing.assert_allclose(np.asarray(grads), np.cos(xs) * xs + np.sin(xs), rtol=1e-12)


def test_per_example_gradients_through_max_and_softmax():
    # The derivative of max selects with constants against batched values: the select's
    # unbatched rank-0 cases must be broadcast to the lanes' shape.
    w = RNG.standard_normal((3, 4))
    xs = RNG.standard_normal((5, 3))
    labels = np.eye(4)[[0, 1, 2, 3, 0]]

    def loss(w, x, y):
        return -fnp.sum(fg.nn.log_softmax(x @ w) * y)

    per_example = fg.vmap(fg.grad(loss), in_axes=(None, 0, 0))(w, xs, labels)
    expected = np.stack([np.asarray(fg.grad(loss)(w, x, y)) for x, y in zip(xs, labels)])
    np.testing.assert_allclose(np.asarray(per_example), expected, rtol=1e-10)


@pytest.mark.parametrize("axes", [0.5, (0, "a"), [0, 1.0], True])
def test_axes_that_are_not_ints_or_none_are_a_type_error_naming_them(axes):
    with pytest.raises(TypeError, match="vmap out_axes must be an int, None"):
        fg.vmap(lambda x: (x, x), out_axes=axes)(fnp.arange(3.0))
    with pytest.raises(TypeError, match="vmap in_axes must be an int, None"):
        fg.vmap(lambda x, y: x, in_axes=axes)(fnp.arange(3.0), fnp.arange(3.0))


def test_float0_tangents_pass_through_vmap():
    """The float0 gradients of integer arguments (grad with allow_int=True, jvp of integer
    inputs) gain or lose the mapped axis like any other output; vmap once rejected them."""
    float0 = fg.dtypes.float0
    n = np.arange(3, dtype=np.int32)
    x = RNG.standard_normal((2, 3))
    grads = fg.vmap(
        fg.grad(lambda x, n: (x * n).sum(), argnums=(0, 1), allow_int=True),
        in_axes=(0, None),
        out_axes=(0, 1),
    )(x, n)
    np.testing.assert_array_equal(np.asarray(grads[0]), np.stack([n, n]).astype(np.float64))
    assert grads[1].dtype == float0 and grads[1].shape == (3, 2)
    tangents = np.zeros((3, 2), float0)
    primal_out, tangent_out = fg.vmap(
        lambda x, t: fg.jvp(lambda x, m: (x * m, m + 1), (x, n), (x, t)), in_axes=(0, 1)
    )(x, tangents)
    np.testing.assert_array_equal(np.asarray(tangent_out[0]), x * n)
    assert tangent_out[1].dtype == float0 and tangent_out[1].shape == (2, 3)
