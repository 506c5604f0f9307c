"""eig and eigvals of general matrices: values against NumPy (eager and compiled), the
eigen-equation, and derivatives of eigenvalues against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import example, given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads
from tests import strategies as fst


def matrices(dtype_strategy):
    return st.integers(1, 5).flatmap(
        lambda n: fst.arrays(
            dtype_strategy, st.sampled_from([(n, n), (2, n, n)]), min_value=-2, max_value=2
        )
    )


@given(a=matrices(fst.float_dtypes))
def test_real_matrices_match_numpy_eager_and_compiled(a):
    w, v = np.linalg.eig(a.astype(np.float64))
    complex_dtype = np.complex64 if a.dtype == np.float32 else np.complex128
    for result in (fnp.linalg.eig(a), fg.jit(fnp.linalg.eig)(a)):
        assert result.eigenvalues.dtype == complex_dtype
        np.testing.assert_allclose(
            result.eigenvalues, w.astype(complex_dtype), rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(
            result.eigenvectors, v.astype(complex_dtype), rtol=1e-5, atol=1e-5
        )
    np.testing.assert_allclose(
        fg.jit(fnp.linalg.eigvals)(a), w.astype(complex_dtype), rtol=1e-5, atol=1e-5
    )


def _nearly_nilpotent_with_tiny_entries():
    """Entries of 1e-80 beside ones: geev's balancing scales its rows by up to 2^130, and
    its eigenvectors are accurate for the balanced matrix only (NumPy's are the same: a
    residual of 0.46 in the matrix's own coordinates). Drawn by the 2026-11-30 seed."""
    a = np.full((5, 5), 8.89464551e-81j)
    a[1, 1] = 1.953125e-03j
    a[4, 2] = 1j
    return a


@given(a=matrices(fst.complex_dtypes))
@example(a=_nearly_nilpotent_with_tiny_entries())
def test_complex_matrices_satisfy_the_eigen_equation(a):
    w, v = fnp.linalg.eig(a)
    compiled = fg.jit(fnp.linalg.eig)(a)
    np.testing.assert_array_equal(compiled.eigenvalues, w)
    np.testing.assert_array_equal(compiled.eigenvectors, v)
    np.testing.assert_allclose(
        np.sort_complex(np.asarray(w).ravel()),
        np.sort_complex(np.linalg.eigvals(a).ravel()),
        rtol=1e-4,
        atol=1e-4,
    )
    if np.any(np.linalg.cond(np.asarray(v)) > 1e6):
        return  # (nearly) defective: its eigenvectors are not determined to any accuracy
    # geev first balances the matrix, B = T^-1 A T (LAPACK's gebal, which matrix_balance
    # calls), and is backward stable for B: the residual of y = T^-1 v is within a small
    # multiple of n * eps * |B| |y|. For complex64 (eps 6e-8, n <= 5) 1e-5 leaves a margin of
    # 30; in A's own coordinates the residual is T times that, unbounded where T's scales
    # differ by many orders.
    for matrix, values, vectors in zip(
        np.reshape(a, (-1,) + a.shape[-2:]).astype(np.complex128),
        np.reshape(w, (-1, a.shape[-1])).astype(np.complex128),
        np.reshape(v, (-1,) + a.shape[-2:]).astype(np.complex128),
    ):
        balanced, scaling = scipy.linalg.matrix_balance(matrix)
        y = np.linalg.solve(scaling, vectors)
        residual = np.linalg.norm(balanced @ y - y * values, axis=0)
        bound = 1e-5 * np.linalg.norm(balanced) * np.linalg.norm(y, axis=0)
        assert np.all(residual <= bound), (residual, bound)


def test_empty_matrices_compile():
    for dtype in (np.float64, np.complex128):
        values, vectors = fg.jit(fnp.linalg.eig)(np.zeros((2, 0, 0), dtype))
        assert values.shape == (2, 0) and vectors.shape == (2, 0, 0)
        assert values.dtype == vectors.dtype == np.complex128
        for eig in (fg.lax.linalg.eig, fg.jit(fg.lax.linalg.eig)):
            values, left, right = eig(np.zeros((0, 0), dtype))
            assert values.shape == (0,) and left.shape == right.shape == (0, 0)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_matrix_with_a_nan_or_infinity_has_nan_eigenvalues(dtype, bad):
    # Compiled, geev made up eigenvalues (ones) for it; the other matrix is unaffected.
    poisoned = np.eye(3, dtype=dtype)
    poisoned[1, 2] = bad
    a = np.stack([poisoned, np.diag([1.0, 2.0, 3.0]).astype(dtype)])
    for eig in (fnp.linalg.eig, fg.jit(fnp.linalg.eig)):
        values, vectors = eig(a)
        assert np.isnan(values[0]).all() and np.isnan(vectors[0]).all()
        np.testing.assert_allclose(np.sort_complex(values[1]), [1, 2, 3], atol=1e-12)


def test_vmap_of_eigvals_is_the_loop():
    a = np.random.default_rng(0).normal(size=(3, 4, 4))
    np.testing.assert_allclose(fg.vmap(fnp.linalg.eigvals)(a), np.linalg.eigvals(a), atol=1e-12)


def _power_sums(a):
    w = fnp.linalg.eigvals(a)
    return fnp.stack([fnp.sum(w**k) for k in range(1, a.shape[-1] + 1)])


@pytest.mark.parametrize("seed", range(3))
def test_eigenvalue_derivatives_pass_the_checks(seed):
    a = np.random.default_rng(seed).normal(size=(4, 4))
    check_grads(_power_sums, (a,), order=1)
    # The derivative of a simple eigenvalue is u^T dA v / u^T v (left and right vectors):
    # for a symmetric matrix that is v v^T.
    s = a + a.T
    w, v = np.linalg.eigh(s)
    largest = fg.grad(lambda m: fnp.max(fnp.real(fnp.linalg.eigvals(m))))(s)
    np.testing.assert_allclose(largest, np.outer(v[:, -1], v[:, -1]), atol=1e-8)
    np.testing.assert_allclose(
        fg.jit(fg.grad(lambda m: fnp.sum(_power_sums(m).real)))(a),
        fg.grad(lambda m: fnp.sum(_power_sums(m).real))(a),
        atol=1e-10,
    )


def test_eigenvector_derivatives_are_a_named_gap_and_bad_input_is_named():
    a = np.eye(3) + np.diag([1.0, 2.0], 1)
    with pytest.raises(NotImplementedError, match="eigenvectors"):
        fg.jvp(lambda m: fnp.linalg.eig(m).eigenvectors, (a,), (a,))
    with pytest.raises(ValueError, match="square"):
        fnp.linalg.eig(np.ones((2, 3)))
    with pytest.raises(TypeError, match="eig"):
        fg.lax.eig(np.ones((2, 2), np.int32))
