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
