"""jax.lax names added for parity: implicit differentiation (custom_linear_solve, custom_root),
and the functions composed from existing primitives.

Derivatives of the implicit solvers are checked against central differences of the solution in
float64 (`check_grads`) with solvers that cannot be differentiated themselves (a while loop,
which refuses reverse mode, or a stop_gradient), so a right answer shows the implicit rule ran.
"""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(0)
_M = RNG.standard_normal((4, 4))
SPD = _M @ _M.T + 4 * np.eye(4)
GENERAL = RNG.standard_normal((4, 4)) + 5 * np.eye(4)
B = RNG.standard_normal(4)


def assert_allclose(actual, expected, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


def conjugate_gradient(matvec, b):
    """CG in a while_loop: not reverse-differentiable itself."""

    def cond(state):
        _, r, _, k = state
        return (fnp.vdot(r, r) > 1e-28) & (k < 100)

    def body(state):
        x, r, p, k = state
        ap = matvec(p)
        alpha = fnp.vdot(r, r) / fnp.vdot(p, ap)
        r_next = r - alpha * ap
        beta = fnp.vdot(r_next, r_next) / fnp.vdot(r, r)
        return x + alpha * p, r_next, r_next + beta * p, k + 1

    return lax.while_loop(cond, body, (fnp.zeros_like(b), b, b, 0))[0]


def cg_solve(a, b):
    return lax.custom_linear_solve(lambda x: a @ x, b, conjugate_gradient, symmetric=True)


def dense_solve(a, b):
    """A non-symmetric system: solve and transpose_solve are stop_gradient'ed dense solves, and
    transpose_solve builds its matrix from the vecmat it is given (the transposed matvec)."""

    def solve(matvec, y):
        return lax.stop_gradient(fnp.linalg.solve(a, y))

    def transpose_solve(vecmat, y):
        matrix = fg.vmap(vecmat)(fnp.eye(y.shape[0], dtype=y.dtype)).T
        return lax.stop_gradient(fnp.linalg.solve(matrix, y))

    return lax.custom_linear_solve(lambda x: a @ x, b, solve, transpose_solve)


# ---------------------------------------------------------------------------------------------
# custom_linear_solve


@pytest.mark.parametrize("solver, matrix", [(cg_solve, SPD), (dense_solve, GENERAL)])
def test_linear_solve_values_and_derivatives(solver, matrix):
    assert_allclose(solver(matrix, B), np.linalg.solve(matrix, B))
    check_grads(solver, (matrix, B), order=2, modes=("fwd", "rev"))


def test_linear_solve_never_differentiates_the_solver():
    # The solve's derivative would be zero (stop_gradient) or refused (while_loop); the right
    # one comes from the equation.
    grad = fg.grad(lambda a, b: fnp.sum(cg_solve(a, b) ** 2), argnums=(0, 1))(SPD, B)
    x = np.linalg.solve(SPD, B)
    ct_b = np.linalg.solve(SPD.T, 2 * x)
    assert_allclose(grad[1], ct_b)
    assert_allclose(grad[0], -np.outer(ct_b, x))


def test_linear_solve_reverse_mode_needs_transpose_solve():
    def f(a, b):
        return lax.custom_linear_solve(lambda x: a @ x, b, lambda matvec, y: fnp.linalg.solve(a, y))

    tangent = fg.jvp(lambda b: f(GENERAL, b), (B,), (np.ones(4),))[1]
    assert_allclose(tangent, np.linalg.solve(GENERAL, np.ones(4)))
    with pytest.raises(TypeError, match="transpose_solve"):
        fg.grad(lambda b: fnp.sum(f(GENERAL, b)))(B)


def test_linear_solve_pytrees_and_aux():
    def matvec(x):
        return {"u": 3.0 * x["u"] + x["v"], "v": x["u"] + 2.0 * x["v"]}

    def solve(matvec, b):
        # Jacobi iterations; the count is the auxiliary output.
        def body(state):
            x, k = state
            return {"u": (b["u"] - x["v"]) / 3.0, "v": (b["v"] - x["u"]) / 2.0}, k + 1

        def cond(state):
            residual = fg.tree.map(lambda r, c: r - c, matvec(state[0]), b)
            return (fnp.max(fnp.abs(residual["u"])) + fnp.max(fnp.abs(residual["v"])) > 1e-14) & (
                state[1] < 500
            )

        return lax.while_loop(cond, body, (fg.tree.map(fnp.zeros_like, b), 0))

    def f(b):
        x, count = lax.custom_linear_solve(matvec, b, solve, symmetric=True, has_aux=True)
        return x, count

    b = {"u": np.array([1.0, 2.0]), "v": np.array([-1.0, 0.5])}
    x, count = f(b)
    dense = np.array([[3.0, 1.0], [1.0, 2.0]])
    expected = np.linalg.solve(dense, np.stack([b["u"], b["v"]]))
    assert_allclose(x["u"], expected[0])
    assert_allclose(x["v"], expected[1])
    assert int(count) > 1
    check_grads(lambda b: f(b)[0], (b,), order=1)


def test_linear_solve_vmap_matches_a_loop():
    matrices = np.stack([SPD, SPD + np.eye(4), 2 * SPD])
    rhs = RNG.standard_normal((3, 4))
    for in_axes in [(0, 0), (None, 0), (0, None)]:
        batched = fg.vmap(cg_solve, in_axes)(
            matrices if in_axes[0] == 0 else SPD, rhs if in_axes[1] == 0 else B
        )
        for i in range(3):
            a = matrices[i] if in_axes[0] == 0 else SPD
            b = rhs[i] if in_axes[1] == 0 else B
            assert_allclose(batched[i], cg_solve(a, b))
    grads = fg.vmap(fg.grad(lambda a, b: fnp.sum(dense_solve(a, b))))(
        np.stack([GENERAL, GENERAL.T]), rhs[:2]
    )
    for i, a in enumerate([GENERAL, GENERAL.T]):
        assert_allclose(grads[i], fg.grad(lambda a, b: fnp.sum(dense_solve(a, b)))(a, rhs[i]))


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_linear_solve_jit_matches_eager(backend):
    from checks import jit_backend

    def loss(a, b):
        return fnp.sum(cg_solve(a, b) ** 2)

    with jit_backend(backend):
        assert_allclose(fg.jit(cg_solve)(SPD, B), cg_solve(SPD, B))
        assert_allclose(fg.jit(fg.grad(loss))(SPD, B), fg.grad(loss)(SPD, B))


def test_linear_solve_errors_name_the_shapes():
    with pytest.raises(TypeError, match=r"f64\[3\]"):
        lax.custom_linear_solve(lambda x: x[:3], B, lambda mv, b: b)
    with pytest.raises(TypeError, match="solution"):
        lax.custom_linear_solve(lambda x: x, B, lambda mv, b: b[:2])
    with pytest.raises(TypeError, match="pair"):
        lax.custom_linear_solve(lambda x: x, B, lambda mv, b: b, has_aux=True)


# ---------------------------------------------------------------------------------------------
# custom_root


def newton(f, x0):
    """Newton's method in a while_loop, its derivative taken with finite differences inside a
    stop_gradient: nothing here is differentiable."""

    def step(x):
        slope = lax.stop_gradient((f(x + 1e-7) - f(x - 1e-7)) / 2e-7)
        return x - f(x) / slope

    return lax.while_loop(lambda x: fnp.abs(f(x)) > 1e-13, step, x0)


def scalar_tangent_solve(g, y):
    return y / g(1.0)


def root_sqrt(a):
    return lax.custom_root(lambda x: x * x - a, fnp.ones_like(a), newton, scalar_tangent_solve)


def test_root_scalar_values_and_derivatives():
    a = np.float64(2.0)
    assert_allclose(root_sqrt(a), np.sqrt(2.0))
    assert_allclose(fg.grad(root_sqrt)(a), 0.5 / np.sqrt(2.0))
    assert_allclose(fg.grad(fg.grad(root_sqrt))(a), -0.25 * 2.0**-1.5)
    check_grads(root_sqrt, (a,), order=2, modes=("fwd", "rev"))


def vector_root(params):
    """The root of tanh(x) + W x - c (a vector system) as a function of (W, c), by Newton
    iterations and a tangent solve by custom_linear_solve over the linearized map."""
    w, c = params["w"], params["c"]

    def f(x):
        return fnp.tanh(x) + w @ x - c

    def solve(f, x0):
        def step(x):
            jacobian = lax.stop_gradient(fg.jacfwd(f)(x))
            return x - fnp.linalg.solve(jacobian, f(x))

        return lax.fori_loop(0, 20, lambda i, x: step(x), x0)

    def tangent_solve(g, y):
        matrix = fg.jacfwd(g)(y)
        return lax.custom_linear_solve(
            g,
            y,
            lambda matvec, b: fnp.linalg.solve(matrix, b),
            lambda vecmat, b: fnp.linalg.solve(matrix.T, b),
        )

    return lax.custom_root(f, fnp.zeros_like(c), solve, tangent_solve)


def test_root_vector_derivatives():
    params = {"w": GENERAL / 4, "c": B}
    x = vector_root(params)
    assert_allclose(np.tanh(x) + params["w"] @ np.asarray(x), B, atol=1e-12)
    check_grads(vector_root, (params,), order=1)


def test_root_has_aux_and_vmap_and_jit():
    def f(a):
        def solve(f, x0):
            x = newton(f, x0)
            return x, fnp.asarray(7)

        return lax.custom_root(
            lambda x: x**3 - a, fnp.ones_like(a), solve, scalar_tangent_solve, has_aux=True
        )

    a = np.array([2.0, 5.0, 0.5])
    roots, aux = fg.vmap(f)(a)
    assert_allclose(roots, np.cbrt(a))
    assert np.asarray(aux).tolist() == [7, 7, 7]
    grads = fg.vmap(fg.grad(lambda a: f(a)[0]))(a)
    assert_allclose(grads, [fg.grad(lambda a: f(a)[0])(v) for v in a])
    assert_allclose(grads, a ** (-2 / 3) / 3)
    assert_allclose(fg.jit(fg.grad(lambda a: f(a)[0]))(a[1]), grads[1])
    assert_allclose(fg.jit(root_sqrt)(a[1]), root_sqrt(a[1]))


def test_root_errors_name_the_types():
    with pytest.raises(TypeError, match="f32"):
        lax.custom_root(lambda x: x[:1], np.ones(2, np.float32), newton, scalar_tangent_solve)
