"""Corner cases of the linear algebra namespaces found by fuzzing them against NumPy: batched
tolerances, mismatched operands, and the transforms at shapes the main suites do not draw."""

from __future__ import annotations

import numpy as np

import funcgrad.numpy as fnp


def test_matrix_rank_takes_one_rtol_per_matrix():
    """A batch of rtols scales each matrix's own largest singular value (it was broadcast
    against the singular values themselves, a shape error or a wrong count)."""
    matrices = np.stack([np.diag([1.0, 0.5, 0.05]), np.eye(3), np.diag([4.0, 2.0, 0.0])])
    rtol = np.array([0.1, 2.0, 0.4])
    np.testing.assert_array_equal(
        fnp.linalg.matrix_rank(matrices, rtol), np.linalg.matrix_rank(matrices, rtol=rtol)
    )


def test_hermitian_svd_of_a_complex_matrix_reconstructs_it():
    """hermitian=True gives a = U diag(S) Vh for complex Hermitian a too: Vh is the adjoint of
    the signed eigenvectors (it was their transpose, conjugate of the right factor)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))
    a = a + a.conj().T
    u, s, vh = (np.asarray(x) for x in fnp.linalg.svd(a, hermitian=True))
    np.testing.assert_allclose((u * s) @ vh, a, atol=1e-12)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-12)
