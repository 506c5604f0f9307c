"""funcgrad.scipy.sparse.linalg's Krylov solvers against numpy.linalg.solve: symmetric positive
definite systems for cg, nonsymmetric ones for gmres and bicgstab, matrices and functions as A,
pytree right-hand sides, preconditioners, complex systems; implicit derivatives against central
finite differences; jit against eager, vmap against a loop of the lanes; bad arguments."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.scipy.sparse.linalg import bicgstab, cg, gmres
from funcgrad.test_util import check_grads

N = 6
RNG = np.random.default_rng(7)
_Q = RNG.standard_normal((N, N))
SPD = _Q @ _Q.T + N * np.eye(N)
NONSYMMETRIC = RNG.standard_normal((N, N)) + 4 * np.eye(N)
B = RNG.standard_normal(N)

GENERAL_SOLVERS = {
    "gmres-batched": gmres,
    "gmres-incremental": partial(gmres, solve_method="incremental"),
    "gmres-restart-2": partial(gmres, restart=2),
    "gmres-incremental-restart-2": partial(gmres, restart=2, solve_method="incremental"),
    "bicgstab": bicgstab,
}
ALL_SOLVERS = [("cg", cg, SPD)] + [(name, s, NONSYMMETRIC) for name, s in GENERAL_SOLVERS.items()]
ids = [name for name, _, _ in ALL_SOLVERS]


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-9), (np.float32, 1e-4)])
def test_matrix_systems_match_numpy(name, solve, matrix, dtype, rtol):
    x, info = solve(matrix.astype(dtype), B.astype(dtype), tol=rtol / 10)
    assert info is None and x.dtype == dtype
    np.testing.assert_allclose(x, np.linalg.solve(matrix, B), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
def test_a_linear_function_and_a_pytree_right_hand_side(name, solve, matrix):
    top, bottom = matrix[:2], matrix[2:]

    def apply(x):
        joined = fnp.concatenate([x["a"], x["b"].ravel()])
        return {"a": top @ joined, "b": (bottom @ joined).reshape(2, 2)}

    b = {"a": B[:2], "b": B[2:].reshape(2, 2)}
    x, _ = solve(apply, b, tol=1e-12)
    expected = np.linalg.solve(matrix, B)
    np.testing.assert_allclose(x["a"], expected[:2], atol=1e-10)
    np.testing.assert_allclose(x["b"], expected[2:].reshape(2, 2), atol=1e-10)


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
def test_preconditioner_and_initial_guess(name, solve, matrix):
    jacobi = np.diag(1 / np.diag(matrix))
    x, _ = solve(matrix, B, x0=np.ones(N), M=jacobi, tol=1e-12)
    np.testing.assert_allclose(x, np.linalg.solve(matrix, B), atol=1e-10)
    x, _ = solve(matrix, B, M=lambda r: r / np.diag(matrix), tol=1e-12)
    np.testing.assert_allclose(x, np.linalg.solve(matrix, B), atol=1e-10)


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
def test_complex_systems(name, solve, matrix):
    skew = RNG.standard_normal((N, N))
    # cg needs a Hermitian A: an imaginary antisymmetric part keeps it so.
    shift = 1j * (skew - skew.T) if name == "cg" else 0.5j * skew
    a = matrix + shift
    b = B + 1j * RNG.standard_normal(N)
    x, _ = solve(a, b, tol=1e-12)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), atol=1e-10)


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
def test_implicit_derivatives_match_finite_differences(name, solve, matrix):
    def solution(a, b):
        if name == "cg":
            a = (a + a.T) / 2  # the derivative keeps A symmetric, as cg assumes
        return solve(a, b, tol=1e-13)[0]

    check_grads(solution, (matrix, B), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


def test_gradient_matches_the_closed_form():
    # x = A⁻¹ b, so for L = c·x: ∂L/∂b = A⁻ᵀ c and ∂L/∂A = -(A⁻ᵀ c) xᵀ.
    c = RNG.standard_normal(N)

    def loss(a, b):
        return fnp.dot(c, gmres(a, b, tol=1e-13)[0])

    a_bar, b_bar = fg.grad(loss, argnums=(0, 1))(NONSYMMETRIC, B)
    adjoint = np.linalg.solve(NONSYMMETRIC.T, c)
    np.testing.assert_allclose(b_bar, adjoint, rtol=1e-9)
    np.testing.assert_allclose(a_bar, -np.outer(adjoint, np.linalg.solve(NONSYMMETRIC, B)), 1e-9)


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
def test_jit_matches_eager(name, solve, matrix):
    def solution(a, b):
        return solve(a, b, tol=1e-12)[0]

    np.testing.assert_allclose(fg.jit(solution)(matrix, B), solution(matrix, B), atol=1e-12)


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
def test_vmap_over_right_hand_sides_matches_a_loop(name, solve, matrix):
    bs = RNG.standard_normal((3, N))

    def solution(b):
        return solve(matrix, b, tol=1e-12)[0]

    batched = fg.vmap(solution)(bs)
    np.testing.assert_allclose(batched, np.stack([solution(b) for b in bs]), atol=1e-12)
    np.testing.assert_allclose(batched, np.linalg.solve(matrix, bs.T).T, atol=1e-10)


@pytest.mark.parametrize("name, solve, matrix", ALL_SOLVERS, ids=ids)
def test_running_past_convergence_stays_finite(name, solve, matrix):
    # With tol and atol 0 the iterations ran on until maxiter; cg's and bicgstab's recursive
    # residual shrank into subnormal numbers, whose complex quotients overflow eagerly: NaN.
    imaginary = np.random.default_rng(8).standard_normal((N, N))
    a = (matrix + 1j * (imaginary - imaginary.T if name == "cg" else imaginary)).astype(
        np.complex64
    )
    b = (B + 1j * B[::-1]).astype(np.complex64)
    x, _ = solve(a, b, tol=0.0, atol=0.0, maxiter=60)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-4, atol=1e-4)


def test_maxiter_bounds_the_work():
    # One conjugate-gradient step is a steepest-descent step from zero: x = (b·b / b·Ab) b.
    x, _ = cg(SPD, B, maxiter=1)
    np.testing.assert_allclose(x, (B @ B) / (B @ SPD @ B) * B, rtol=1e-12)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="square matrix"):
        cg(np.ones((3, 4)), np.ones(3))
    with pytest.raises(ValueError, match="x0 and b must have the same shapes"):
        cg(SPD, B, x0=np.ones(N + 1))
    with pytest.raises(ValueError, match="solve_method"):
        gmres(NONSYMMETRIC, B, solve_method="qr")


def test_namespace():
    assert set(fg.scipy.sparse.linalg.__all__) == {"bicgstab", "cg", "gmres"}
    assert "sparse" in fg.scipy.__all__
