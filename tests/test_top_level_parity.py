"""JAX's smaller top-level names: linear_transpose, clear_caches, named_call and named_scope,
ensure_compile_time_eval, typeof, closure_convert, custom_batching.custom_vmap, ..."""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp

RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 3))
B = RNG.standard_normal((3, 2))


def assert_allclose(actual, expected, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# linear_transpose


def linear_map(x):
    """A linear map from R^(3x2) to R^(4*2 + 3) built from several linear primitives."""
    y = fnp.asarray(A) @ x
    z = x[:, ::-1].sum(axis=1) * 3.0 - fnp.roll(x, 1, axis=0)[:, 0] / 2.0
    return fnp.concatenate([y.reshape(-1), z])


def test_linear_transpose_is_the_jacobian_transposed():
    x = RNG.standard_normal((3, 2))
    jac = np.asarray(fg.jacfwd(linear_map)(x)).reshape(11, 6)
    transpose = fg.linear_transpose(linear_map, x)
    ct = RNG.standard_normal(11)
    (got,) = transpose(ct)
    assert got.shape == (3, 2) and got.dtype == np.float64
    assert_allclose(np.asarray(got).reshape(-1), jac.T @ ct)


def test_linear_transpose_only_reads_shapes_and_dtypes():
    transpose = fg.linear_transpose(lambda x: 2.0 * x.T, fg.ShapeDtypeStruct((3, 2), np.float32))
    (got,) = transpose(np.ones((2, 3), np.float32))
    assert got.shape == (3, 2) and got.dtype == np.float32
    assert_allclose(got, np.full((3, 2), 2.0))


def test_linear_transpose_of_pytrees():
    def f(params):
        return {"sum": params["w"] @ B + params["b"], "w": 2.0 * params["w"]}, params["b"]

    params = {"w": np.zeros((4, 3)), "b": np.zeros(2)}
    transpose = fg.linear_transpose(f, params)
    cts = (
        {"sum": RNG.standard_normal((4, 2)), "w": RNG.standard_normal((4, 3))},
        RNG.standard_normal(2),
    )
    (got,) = transpose(cts)
    assert_allclose(got["w"], cts[0]["sum"] @ B.T + 2.0 * cts[0]["w"])
    assert_allclose(got["b"], cts[0]["sum"].sum(0) + cts[1])
    # The adjoint identity <ct, f(x)> = <f^T(ct), x> at a random point.
    x = {"w": RNG.standard_normal((4, 3)), "b": RNG.standard_normal(2)}
    out = f(x)
    lhs = sum(np.vdot(c, o) for c, o in zip(fg.tree.leaves(cts), fg.tree.leaves(out)))
    rhs = sum(np.vdot(g, v) for g, v in zip(fg.tree.leaves(got), fg.tree.leaves(x)))
    assert_allclose(lhs, rhs)


def test_linear_transpose_several_arguments_and_unused_ones():
    transpose = fg.linear_transpose(lambda x, y, z: x + 2.0 * y, np.ones(3), np.ones(3), np.ones(2))
    gx, gy, gz = transpose(np.arange(3.0))
    assert_allclose(gx, np.arange(3.0))
    assert_allclose(gy, 2.0 * np.arange(3.0))
    assert_allclose(gz, np.zeros(2))


def test_linear_transpose_under_jit_vmap_and_grad():
    x = np.zeros((3, 2))
    transpose = fg.linear_transpose(linear_map, x)
    cts = RNG.standard_normal((5, 11))
    eager = np.stack([np.asarray(transpose(ct)[0]) for ct in cts])
    assert_allclose(fg.jit(transpose)(cts[0])[0], eager[0])
    assert_allclose(fg.vmap(transpose)(cts)[0], eager)
    # The transpose is linear, so its gradient of <v, T(ct)> is T's transpose: the map itself.
    v = RNG.standard_normal((3, 2))
    grad = fg.grad(lambda ct: fnp.vdot(v, transpose(ct)[0]))(cts[0])
    assert_allclose(grad, linear_map(v))
    # A jitted linear function is transposed through its program.
    (got,) = fg.linear_transpose(fg.jit(linear_map), x)(cts[0])
    assert_allclose(got, eager[0])


def test_linear_transpose_inside_jit():
    @fg.jit
    def f(ct, scale):
        return fg.linear_transpose(lambda x: scale * x, np.ones(3))(ct)[0]

    assert_allclose(f(np.arange(3.0), 2.0), 2.0 * np.arange(3.0))


def test_transpose_of_transpose_is_the_function():
    x = RNG.standard_normal((3, 2))
    transpose = fg.linear_transpose(linear_map, x)
    twice = fg.linear_transpose(transpose, np.zeros(11))
    (got,) = twice((x,))
    assert_allclose(got, linear_map(x))


@pytest.mark.parametrize(
    "fun, message",
    [
        (lambda x: x * x, "'mul'"),
        (lambda x: fnp.sin(x), "'sin', which is not linear"),
        (lambda x: x + 1.0, "affine"),
        (lambda x: fnp.concatenate([x, fnp.ones(1)]), "affine"),
        (lambda x: (x, fnp.ones(2)), "not zero"),
        (lambda x: 1.0 / x, "'div'"),
        (fg.jit(lambda x: fnp.exp(x)), "'exp'"),
    ],
)
def test_linear_transpose_refuses_nonlinear_functions(fun, message):
    with pytest.raises(TypeError, match=message):
        fg.linear_transpose(fun, np.ones(3))


def test_linear_transpose_accepts_added_zeros():
    transpose = fg.linear_transpose(lambda x: (x + fnp.zeros(3), fnp.zeros(2)), np.ones(3))
    assert_allclose(transpose((np.ones(3), np.ones(2, np.float32)))[0], np.ones(3))


def test_linear_transpose_checks_dtypes_and_cotangents():
    with pytest.raises(TypeError, match="floating point or complex"):
        fg.linear_transpose(lambda x: x, np.ones(3, np.int32))
    transpose = fg.linear_transpose(lambda x: x, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="f32\\[3\\]"):
        transpose(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="structure"):
        transpose((np.ones(3, np.float32),))
