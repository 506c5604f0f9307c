"""funcgrad.optim's matrix routines against NumPy: the power iteration's eigenpair against
eigh, the inverse p-th root by raising it back to the p-th power, non-negative least squares
against its optimality (KKT) conditions, and the diagonal normal's log-density written
out."""

from __future__ import annotations

import math

import numpy as np
import pytest

import funcgrad as fg
from funcgrad import optim, random

rng = np.random.default_rng(0)
factor = rng.standard_normal((5, 5))
SPD = factor @ factor.T + np.eye(5)


def test_power_iteration_finds_the_dominant_eigenpair():
    eigenvalues, eigenvectors = np.linalg.eigh(SPD)
    value, vector = optim.power_iteration(SPD, num_iters=500, error_tolerance=1e-12)
    np.testing.assert_allclose(value, eigenvalues[-1], rtol=1e-10)
    np.testing.assert_allclose(abs(np.dot(vector, eigenvectors[:, -1])), 1.0, rtol=1e-9)


def test_power_iteration_of_a_linear_map_on_a_pytree():
    def apply(tree):
        return {"a": SPD[:2, :2] @ tree["a"], "b": 3.0 * tree["b"]}

    v0 = {"a": np.ones(2), "b": np.ones(3)}
    value, vector = fg.jit(lambda v: optim.power_iteration(apply, v0=v, num_iters=400))(v0)
    top = max(np.linalg.eigvalsh(SPD[:2, :2]).max(), 3.0)
    np.testing.assert_allclose(value, top, rtol=1e-5)
    with pytest.raises(ValueError, match="v0"):
        optim.power_iteration(apply)


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_matrix_inverse_pth_root_raised_to_p_inverts(p):
    root, error = optim.matrix_inverse_pth_root(SPD, p, ridge_epsilon=0.0)
    root = np.asarray(root, np.float64)
    np.testing.assert_allclose(np.linalg.matrix_power(root, p) @ SPD, np.eye(5), atol=1e-3)
    eigenvalues, eigenvectors = np.linalg.eigh(SPD)
    wanted = eigenvectors @ np.diag(eigenvalues ** (-1.0 / p)) @ eigenvectors.T
    np.testing.assert_allclose(root, wanted, atol=1e-4)
    assert float(error) < 1e-4


def test_nnls_meets_the_optimality_conditions():
    A, b = rng.standard_normal((8, 4)), rng.standard_normal(8)  # noqa: N806
    x = np.asarray(optim.nnls(A, b, 3000))
    gradient = A.T @ (A @ x - b)
    assert x.min() >= 0
    np.testing.assert_allclose(gradient[x > 1e-8], 0, atol=1e-6)  # stationary where free
    assert gradient[x <= 1e-8].min() >= -1e-6  # and pushing outward where held at 0
    several = np.asarray(optim.nnls(A, np.stack([b, -b], 1), 3000))
    np.testing.assert_allclose(several[:, 0], x, atol=1e-9)
    with pytest.raises(ValueError, match="as many rows"):
        optim.nnls(A, np.ones(3), 10)


def test_multi_normal_log_prob_and_samples():
    loc, log_scale = np.array([0.0, 1.0, -1.0]), np.log(np.array([1.0, 2.0, 0.5]))
    dist = optim.multi_normal(loc, log_scale)
    x = rng.standard_normal((4, 3))
    scale = np.exp(log_scale)
    wanted = np.sum(
        -0.5 * ((x - loc) / scale) ** 2 - np.log(scale) - 0.5 * math.log(2 * math.pi), axis=1
    )
    np.testing.assert_allclose(dist.log_prob(x), wanted, rtol=1e-12)
    draws = np.asarray(dist.sample((20_000,), random.PRNGKey(1)))
    assert draws.shape == (20_000, 3)
    np.testing.assert_allclose(draws.mean(0), loc, atol=0.05)
    np.testing.assert_allclose(draws.std(0), scale, rtol=0.03)
    assert dist.params[1] is dist.log_scale
