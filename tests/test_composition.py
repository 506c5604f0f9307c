"""Transformations composed with each other and with user-defined derivative rules."""

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp

XS = np.array([0.1, 0.2, -0.7])


@fg.custom_jvp
def scaled_sin(x):
    return fnp.sin(x)


@scaled_sin.defjvp
def _scaled_sin_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return scaled_sin(x), t * 100.0  # deliberately not the true derivative: shows the rule ran


@fg.custom_vjp
def sevenfold(x):
    return fnp.sin(x)


sevenfold.defvjp(lambda x: (fnp.sin(x), (x,)), lambda res, ct: (ct * 7.0,))


def test_custom_jvp_under_jit_grad_and_vmap():
    loss = lambda x: fnp.sum(scaled_sin(x))  # noqa: E731
    for transformed in (
        fg.grad(fg.jit(loss)),
        fg.jit(fg.grad(loss)),
        fg.vmap(fg.grad(scaled_sin)),
        fg.jit(fg.vmap(fg.grad(scaled_sin))),
    ):
        np.testing.assert_allclose(np.asarray(transformed(XS)), [100.0] * 3)


def test_custom_vjp_under_jit_grad_and_vmap():
    loss = lambda x: fnp.sum(sevenfold(x))  # noqa: E731
    for transformed in (
        fg.grad(fg.jit(loss)),
        fg.jit(fg.grad(loss)),
        fg.vmap(fg.grad(sevenfold)),
        fg.jit(fg.vmap(fg.grad(sevenfold))),
        fg.grad(lambda x: fnp.sum(fg.vmap(sevenfold)(x))),
    ):
        np.testing.assert_allclose(np.asarray(transformed(XS)), [7.0] * 3)


def test_checkpoint_under_jit_and_vmap():
    block = fg.checkpoint(lambda x: fnp.sin(x) * x)
    expected = np.cos(XS) * XS + np.sin(XS)
    np.testing.assert_allclose(np.asarray(fg.jit(fg.vmap(fg.grad(block)))(XS)), expected)
    np.testing.assert_allclose(
        np.asarray(fg.grad(fg.jit(lambda x: fnp.sum(block(x))))(XS)), expected
    )


def test_hessian_of_a_jitted_function_equals_the_plain_one():
    def f(x):
        return fnp.sum(fnp.tanh(x) * x[::-1])

    np.testing.assert_allclose(
        np.asarray(fg.hessian(fg.jit(f))(XS)), np.asarray(fg.hessian(f)(XS)), rtol=1e-12
    )


def test_collectives_reach_inside_higher_order_primitives_under_vmap():
    x = np.arange(4.0)
    total = np.full(4, x.sum())
    psum_i = lambda v: fg.lax.psum(v, "i")  # noqa: E731
    np.testing.assert_allclose(np.asarray(fg.vmap(fg.jit(psum_i), axis_name="i")(x)), total)
    np.testing.assert_allclose(np.asarray(fg.vmap(fg.checkpoint(psum_i), axis_name="i")(x)), total)

    def scanned(v):
        return fg.lax.scan(lambda c, _: (c + psum_i(v), None), 0.0, None, length=2)[0]

    np.testing.assert_allclose(np.asarray(fg.vmap(scanned, axis_name="i")(x)), 2 * total)
    nested = fg.vmap(fg.vmap(fg.jit(psum_i), axis_name="j"), axis_name="i")(np.ones((2, 3)))
    np.testing.assert_allclose(np.asarray(nested), np.full((2, 3), 2.0))


def test_grad_of_checkpoint_around_nested_control_flow_and_jit():
    x = 0.3
    expected = np.cos(np.sin(x)) * np.cos(x)
    twice = lambda c: fg.lax.scan(lambda c, _: (fnp.sin(c), None), c, None, length=2)[0]  # noqa: E731
    np.testing.assert_allclose(float(fg.grad(fg.checkpoint(twice))(x)), expected, rtol=1e-6)
    nested_jit = fg.checkpoint(fg.jit(lambda v: fnp.sin(fnp.sin(v))))
    np.testing.assert_allclose(
        float(fg.grad(nested_jit)(1.0)), np.cos(np.sin(1.0)) * np.cos(1.0), rtol=1e-6
    )
    branchy = fg.checkpoint(lambda v: fg.lax.cond(v > 0, fnp.sin, fnp.cos, v))
    np.testing.assert_allclose(float(fg.grad(branchy)(x)), np.cos(x), rtol=1e-6)
