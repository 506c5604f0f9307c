"""Corner cases of the linear algebra namespaces found by fuzzing them against NumPy: batched
tolerances, mismatched operands, and the transforms at shapes the main suites do not draw."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad.numpy as fnp
import funcgrad.scipy.linalg as fsl
from funcgrad.lax import linalg as lax_linalg


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


@pytest.mark.parametrize(
    "decompose",
    [
        lambda a: fnp.linalg.svd(a, hermitian=True, subset_by_index=(0, 4)),
        lambda a: fnp.linalg.svd(a, subset_by_index=(0, 4)),
        lambda a: lax_linalg.svd(a, subset_by_index=(2, 1)),
        lambda a: lax_linalg.eigh(a, subset_by_index=(-1, 2)),
    ],
)
def test_subset_by_index_out_of_range_is_refused(decompose):
    """A range beyond the matrix's values was clipped (the hermitian svd returned all three)
    or failed inside a slice that named neither the function nor the argument."""
    with pytest.raises(ValueError, match=r"subset_by_index=.* for matrices of shape \(3, 3\)"):
        decompose(np.eye(3))


@pytest.mark.parametrize(
    "pivots", [np.array([0, 1], np.int32), np.array([0.0, 1.0, 2.0]), np.array(0, np.int32)]
)
def test_lu_solve_refuses_pivots_that_do_not_fit(pivots):
    """Too few pivots were taken as swaps left out; float or scalar ones failed deep inside."""
    factors, _ = fsl.lu_factor(np.eye(3))
    with pytest.raises(ValueError, match=r"lu_solve: piv must hold 3 integers .* shape \(3, 3\)"):
        fsl.lu_solve((factors, pivots), np.ones(3))


@pytest.mark.parametrize(
    "call",
    [
        lambda a, tolerance: fnp.linalg.matrix_rank(a, tol=tolerance),
        lambda a, tolerance: fnp.linalg.matrix_rank(a, tolerance),
        lambda a, tolerance: fnp.linalg.pinv(a, tolerance),
    ],
)
def test_tolerances_per_matrix_must_fit_the_batch(call):
    """Three tolerances for a batch of two matrices failed inside a comparison, naming shapes
    the user never wrote."""
    with pytest.raises(ValueError, match=r"tol of shape \(3,\) does not broadcast .* \(2,\)"):
        call(np.ones((2, 3, 3)), np.ones(3))
