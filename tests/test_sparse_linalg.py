"""funcgrad.experimental.sparse.linalg: lobpcg_standard against NumPy's eigendecomposition,
spsolve against NumPy's dense solve and central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
from funcgrad.experimental.sparse import linalg as sparse_linalg


def _hermitian(n: int, eigenvalues, dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        z = z + 1j * rng.standard_normal((n, n))
    q, _ = np.linalg.qr(z)
    return ((q * eigenvalues) @ q.conj().T).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("as_callable", [False, True])
def test_lobpcg_finds_the_largest_eigenpairs(dtype, as_callable):
    n, k = 60, 3
    eigenvalues = np.linspace(-5.0, 10.0, n)
    eigenvalues[-1] = 30.0  # (a gap, and the rest close together)
    a = _hermitian(n, eigenvalues, dtype)
    x = np.random.default_rng(1).standard_normal((n, k)).astype(dtype)
    operator = (lambda v: a @ v) if as_callable else a
    theta, u, rounds = sparse_linalg.lobpcg_standard(operator, x, m=300)
    theta, u = np.asarray(theta), np.asarray(u)
    single = np.dtype(dtype) == np.float32
    expected = np.sort(eigenvalues)[::-1][:k]
    np.testing.assert_allclose(theta, expected, rtol=1e-4 if single else 1e-9)
    assert theta.dtype == np.finfo(dtype).dtype and u.dtype == dtype and u.shape == (n, k)
    assert np.asarray(rounds).dtype == np.int32 and 0 < int(rounds) < 300  # converged early
    np.testing.assert_allclose(u.conj().T @ u, np.eye(k), atol=1e-4 if single else 1e-10)
    residual = np.linalg.norm(a @ u - u * theta, axis=0)
    assert (residual < (1e-3 if single else 1e-8) * np.abs(theta)).all()


def test_lobpcg_of_a_negative_definite_operator_and_its_round_limit():
    """The largest eigenvalues of a negative definite operator are those nearest zero; with
    few rounds allowed it stops after them, its estimates below the true values."""
    n, k = 40, 2
    eigenvalues = -np.linspace(1.0, 9.0, n)
    a = _hermitian(n, eigenvalues, np.float64, seed=3)
    x = np.random.default_rng(4).standard_normal((n, k))
    theta, _, rounds = sparse_linalg.lobpcg_standard(a, x, m=400)
    np.testing.assert_allclose(theta, np.sort(eigenvalues)[::-1][:k], rtol=1e-9)
    theta, _, rounds = sparse_linalg.lobpcg_standard(a, x, m=2)
    assert int(rounds) == 2
    assert (np.asarray(theta) <= np.sort(eigenvalues)[::-1][:k] + 1e-12).all()


def test_lobpcg_under_jit_and_its_errors():
    n, k = 30, 2
    a = _hermitian(n, np.arange(1.0, n + 1), np.float32, seed=5)
    x = np.random.default_rng(6).standard_normal((n, k)).astype(np.float32)
    eager = sparse_linalg.lobpcg_standard(a, x, m=20)
    jitted = fg.jit(lambda a, x: sparse_linalg.lobpcg_standard(a, x, m=20))(a, x)
    np.testing.assert_allclose(jitted[0], eager[0], rtol=1e-5)
    assert int(jitted[2]) == int(eager[2])
    with pytest.raises(ValueError, match=r"0 < 5 k < n, got k = 6 directions, n = 30"):
        sparse_linalg.lobpcg_standard(a, np.ones((n, 6), np.float32))
    with pytest.raises(ValueError, match=r"A of shape \(30, 30\) does not act on X of shape"):
        sparse_linalg.lobpcg_standard(a, np.ones((29, 2), np.float32))
    with pytest.raises(ValueError, match="one dtype, got float32 and float64"):
        sparse_linalg.lobpcg_standard(a, np.ones((n, 2)))
    with pytest.raises(ValueError, match=r"an \(n, k\) matrix, got shape \(30,\)"):
        sparse_linalg.lobpcg_standard(a, np.ones(n, np.float32))


def _csr(dense: np.ndarray):
    rows, columns = np.nonzero(dense)
    indptr = np.searchsorted(rows, np.arange(dense.shape[0] + 1))
    return dense[rows, columns], columns.astype(np.int32), indptr.astype(np.int32)


def test_spsolve_solves_the_csr_system_and_differentiates():
    rng = np.random.default_rng(7)
    n = 9
    dense = np.where(rng.random((n, n)) < 0.3, rng.standard_normal((n, n)), 0) + 4 * np.eye(n)
    data, indices, indptr = _csr(dense)
    b = rng.standard_normal(n)
    x = sparse_linalg.spsolve(data, indices, indptr, b)
    np.testing.assert_allclose(x, np.linalg.solve(dense, b), rtol=1e-12)
    jitted = fg.jit(sparse_linalg.spsolve)(data, indices, indptr, b)
    np.testing.assert_allclose(jitted, x, rtol=1e-12)
    # A duplicate entry adds to its place.
    doubled = sparse_linalg.spsolve(
        np.concatenate([data[:1], data]), np.concatenate([indices[:1], indices]),
        np.concatenate([[0], indptr[1:] + 1]), b,
    )  # fmt: skip
    twice = dense.copy()
    twice[0, indices[0]] += data[0]
    np.testing.assert_allclose(doubled, np.linalg.solve(twice, b), rtol=1e-12)

    weights = rng.standard_normal(n)

    def loss(data, b):
        return (sparse_linalg.spsolve(data, indices, indptr, b) * weights).sum()

    grad_data, grad_b = fg.grad(loss, argnums=(0, 1))(data, b)
    h = 1e-6
    for grad, arg in ((grad_data, 0), (grad_b, 1)):
        args = [data, b]
        numeric = []
        for i in range(args[arg].size):
            up, down = args[arg].copy(), args[arg].copy()
            up[i] += h
            down[i] -= h
            plus = loss(*(up if j == arg else a for j, a in enumerate(args)))
            minus = loss(*(down if j == arg else a for j, a in enumerate(args)))
            numeric.append((float(plus) - float(minus)) / (2 * h))
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9)
    with pytest.raises(
        ValueError, match=r"b must have shape \(9,\) for a matrix of shape \(9, 9\)"
    ):
        sparse_linalg.spsolve(data, indices, indptr, np.ones(8))
