"""Small symmetric eigendecompositions by Jacobi's rotations on the CPU (`compiler/jacobi.py`):
eigenvalues as NumPy's, eigenvectors through the identities they satisfy (A V = V diag(w),
V^T V = I, and V's projections, unique up to sign), for every size it takes, either
triangle, stacks of any shape, hard spectra, and a non-finite entry."""

from __future__ import annotations

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import lax

rng = np.random.default_rng(0)


def decomposed(a, lower=True):
    with jit_backend("llvm"):
        compiled = fg.jit(lambda a: lax.eigh(a, lower=lower, symmetrize_input=False))
        v, w = (np.asarray(t) for t in compiled(a))
        plan = compiled.lower(a).compile().executable.fusion_plan()
    return v, w, plan


def assert_decomposes(a, v, w, lower=True):
    """w ascending as NumPy's (of the triangle read), A V = V diag(w), V orthogonal, and V's
    projections as NumPy's where the eigenvalues are apart."""
    dtype = a.dtype
    a64 = a.astype(np.float64)
    want_w, want_v = np.linalg.eigh(a64, UPLO="L" if lower else "U")
    n = a.shape[-1]
    tri = np.tril(a64) if lower else np.triu(a64)
    full = (
        tri
        + np.swapaxes(tri, -1, -2)
        - np.eye(n) * np.diagonal(a64, axis1=-2, axis2=-1)[..., None, :]
    )
    scale = np.abs(full).max(axis=(-2, -1), keepdims=True) + np.finfo(np.float64).tiny
    eps = 8 * np.finfo(dtype).eps
    assert v.dtype == dtype and w.dtype == dtype
    np.testing.assert_allclose(w / scale[..., 0], want_w / scale[..., 0], rtol=0, atol=eps)
    v64, w64 = v.astype(np.float64), w.astype(np.float64)
    residual = (full @ v64 - v64 * w64[..., None, :]) / scale
    np.testing.assert_allclose(residual, 0, atol=4 * eps)
    np.testing.assert_allclose(
        np.swapaxes(v64, -1, -2) @ v64, np.broadcast_to(np.eye(n), v.shape), atol=eps
    )
    gaps = np.diff(want_w, axis=-1) / scale[..., 0]
    apart = np.all(gaps > 1e-3, axis=-1)
    projections = v64[..., :, None, :] * v64[..., None, :, :]
    wanted = want_v[..., :, None, :] * want_v[..., None, :, :]
    np.testing.assert_allclose(projections[apart], wanted[apart], atol=1e3 * eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("lower", [True, False])
def test_stacks_of_every_size_it_takes(n, dtype, lower):
    """Random matrices, not symmetric: the decomposition reads one triangle."""
    a = rng.standard_normal((5, 7, n, n)).astype(dtype)
    v, w, plan = decomposed(a, lower)
    assert_decomposes(a, v, w, lower)
    assert "lapack syevd" not in plan


def test_one_matrix_and_a_larger_one():
    """No stack at all; a 5x5 matrix takes the library."""
    a = rng.standard_normal((3, 3))
    v, w, _ = decomposed(a)
    assert_decomposes(a, v, w)
    big = rng.standard_normal((2, 5, 5))
    v, w, plan = decomposed(big)
    assert_decomposes(big, v, w)
    assert "lapack syevd" in plan


@pytest.mark.parametrize("n", [3, 4])
def test_hard_spectra(n):
    """Clustered (1 + 1e-9 noise), graded (1e-8 to 1e8), repeated (a multiple of the
    identity), zero and diagonal matrices, with their orthonormal bases."""
    q, _ = np.linalg.qr(rng.standard_normal((40, n, n)))
    spectra = [
        1 + 1e-9 * rng.standard_normal((40, n)),
        10.0 ** rng.uniform(-8, 8, (40, n)),
        np.full((40, n), 2.5),
        np.zeros((40, n)),
    ]
    for d in spectra:
        a = (q * d[:, None, :]) @ np.swapaxes(q, -1, -2)
        a = (a + np.swapaxes(a, -1, -2)) / 2
        v, w, _ = decomposed(a)
        assert_decomposes(a, v, w)
    diagonal = np.stack([np.diag(rng.standard_normal(n)) for _ in range(10)])
    v, w, _ = decomposed(diagonal)
    np.testing.assert_array_equal(w, np.sort(np.diagonal(diagonal, axis1=1, axis2=2), axis=1))


def test_a_matrix_with_a_non_finite_entry_is_nan_alone():
    a = np.stack([np.diag([1.0, 2.0, 3.0]), np.eye(3), np.eye(3)])
    a[1, 0, 2] = a[1, 2, 0] = np.inf
    a[2, 1, 1] = np.nan
    v, w, _ = decomposed(a)
    np.testing.assert_array_equal(w[0], [1.0, 2.0, 3.0])
    assert np.isnan(w[1:]).all() and np.isnan(v[1:]).all()


@settings(deadline=None)
@given(
    n=st.integers(2, 4),
    entries=st.lists(st.floats(-1e3, 1e3, allow_subnormal=False), min_size=16, max_size=16),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_any_symmetric_matrix(n, entries, dtype):
    a = np.array(entries[: n * n], dtype).reshape(n, n)
    v, w, _ = decomposed(a[None])
    assert_decomposes(a[None], v, w)


@pytest.mark.parametrize("shape", [(3, 0, 0), (0, 3, 3), (0, 0), (2, 1, 1)])
def test_empty_stacks_and_matrices(shape):
    """An empty stack, or matrices with no rows (the library's path), and 1x1 matrices."""
    a = np.ones(shape, np.float32)
    v, w, _ = decomposed(a)
    assert v.shape == shape and w.shape == shape[:-1]
    np.testing.assert_array_equal(w, np.ones(shape[:-1], np.float32))
