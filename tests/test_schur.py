"""The Schur decomposition (lax.linalg.schur, scipy.linalg.schur) and what is built on it
(rsf2csf, sqrtm, funm): the decomposition's defining properties and SciPy's values, eager,
compiled and vmapped."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import funcgrad as fg
import funcgrad.numpy as fnp
import funcgrad.scipy.linalg as fsl
from funcgrad.lax import linalg as L

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
TOLERANCE = {
    np.float32: dict(rtol=1e-4, atol=1e-4),
    np.complex64: dict(rtol=1e-4, atol=1e-4),
    np.float64: dict(rtol=1e-10, atol=1e-10),
    np.complex128: dict(rtol=1e-10, atol=1e-10),
}


def matrices(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def adjoint(x):
    return np.conj(np.swapaxes(x, -1, -2))


def sorted_eigenvalues(w):
    return np.sort_complex(np.round(w, 6))


def assert_schur(a, T, Z, tolerance):
    """T quasi-triangular (real a: non-overlapping 2 x 2 blocks with complex eigenvalues) or
    triangular (complex a), Z unitary, Z T Z^H = a."""
    T, Z = np.asarray(T), np.asarray(Z)
    assert T.dtype == a.dtype and Z.dtype == a.dtype
    n = a.shape[-1]
    np.testing.assert_array_equal(np.tril(T, -2), 0)
    subdiagonal = np.diagonal(T, -1, -2, -1)
    if np.dtype(a.dtype).kind == "c":
        np.testing.assert_array_equal(subdiagonal, 0)
    else:
        assert not np.any((subdiagonal[..., 1:] != 0) & (subdiagonal[..., :-1] != 0))
    identity = np.broadcast_to(np.eye(n), a.shape)
    np.testing.assert_allclose(adjoint(Z) @ Z, identity, **tolerance)
    np.testing.assert_allclose(Z @ T @ adjoint(Z), a, **tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lax_schur_is_a_schur_decomposition_with_scipys_eigenvalues(dtype):
    a = matrices((2, 5, 5), dtype)
    T, Z = L.schur(a)
    assert_schur(a, T, Z, TOLERANCE[dtype])
    for matrix, form in zip(a, np.asarray(T)):
        expected, _ = scipy.linalg.schur(matrix.astype(np.complex128), output="complex")
        np.testing.assert_allclose(
            sorted_eigenvalues(np.linalg.eigvals(form.astype(np.complex128))),
            sorted_eigenvalues(np.diagonal(expected)),
            atol=1e-4,
        )
    # A real matrix with complex eigenvalues has 2 x 2 blocks.
    if np.dtype(dtype).kind == "f":
        assert np.any(np.diagonal(np.asarray(T), -1, -2, -1) != 0)


def test_lax_schur_without_vectors_gives_the_same_form():
    a = matrices((4, 4), np.float64, seed=1)
    (form,) = L.schur(a, compute_schur_vectors=False)
    np.testing.assert_array_equal(form, L.schur(a)[0])


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_lax_schur_jit_matches_eager_and_vmap_matches_a_loop(dtype):
    a = matrices((3, 4, 4), dtype, seed=2)
    eager = L.schur(a)
    for compiled, expected in zip(fg.jit(L.schur)(a), eager):
        np.testing.assert_allclose(compiled, expected, **TOLERANCE[dtype])
    batched = fg.vmap(L.schur)(a)
    for i, matrix in enumerate(a):
        for value, expected in zip(batched, L.schur(matrix)):
            np.testing.assert_array_equal(np.asarray(value)[i], expected)


def test_lax_schur_small_and_empty_matrices():
    for n in (0, 1):
        a = np.full((2, n, n), 3.0)
        T, Z = L.schur(a)
        np.testing.assert_array_equal(T, a)
        np.testing.assert_array_equal(Z, np.broadcast_to(np.eye(n), a.shape))
        T, Z = fg.jit(L.schur)(a)
        np.testing.assert_array_equal(T, a)


def test_lax_schur_rejects_what_it_cannot_do():
    with pytest.raises(NotImplementedError, match="sort"):
        L.schur(np.eye(3), sort_eig_vals=True)
    with pytest.raises(NotImplementedError, match="sort"):
        L.schur(np.eye(3), select_callable=lambda w: w > 0)
    with pytest.raises(ValueError, match="square"):
        L.schur(np.ones((2, 3)))
    with pytest.raises(TypeError, match="int32"):
        L.schur(np.eye(3, dtype=np.int32))
    with pytest.raises(NotImplementedError, match="not unique"):
        fg.grad(lambda a: fnp.sum(L.schur(a)[0]))(np.eye(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scipy_schur_real_and_complex_output(dtype):
    a = matrices((5, 5), dtype, seed=3)
    T, Z = fsl.schur(a)
    assert_schur(a, T, Z, TOLERANCE[dtype])
    T, Z = fsl.schur(a, output="complex")
    complex_dtype = np.complex64 if dtype == np.float32 else np.complex128
    assert_schur(a.astype(complex_dtype), T, Z, TOLERANCE[dtype])
    expected, _ = scipy.linalg.schur(a.astype(np.float64), output="complex")
    np.testing.assert_allclose(
        sorted_eigenvalues(np.diagonal(np.asarray(T))),
        sorted_eigenvalues(np.diagonal(expected)),
        atol=1e-4,
    )
    with pytest.raises(ValueError, match="output"):
        fsl.schur(a, output="upper")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rsf2csf_matches_scipy(dtype):
    a = matrices((3, 6, 6), dtype, seed=4)
    T, Z = fsl.schur(a)
    Tc, Zc = fsl.rsf2csf(T, Z)
    complex_dtype = np.complex64 if dtype == np.float32 else np.complex128
    assert Tc.dtype == complex_dtype and Zc.dtype == complex_dtype
    assert_schur(a.astype(complex_dtype), Tc, Zc, TOLERANCE[dtype])
    for i in range(len(a)):
        expected_T, expected_Z = scipy.linalg.rsf2csf(np.asarray(T)[i], np.asarray(Z)[i])
        np.testing.assert_allclose(np.asarray(Tc)[i], expected_T, **TOLERANCE[dtype])
        np.testing.assert_allclose(np.asarray(Zc)[i], expected_Z, **TOLERANCE[dtype])
    for compiled, expected in zip(fg.jit(fsl.rsf2csf)(T, Z), (Tc, Zc)):
        np.testing.assert_allclose(compiled, expected, **TOLERANCE[dtype])
    with pytest.raises(ValueError, match="one shape"):
        fsl.rsf2csf(np.eye(3), np.eye(4))


def test_rsf2csf_differentiates_where_its_rotations_stay():
    """Along perturbations that keep T's structure: a zero subdiagonal entry made nonzero
    would call for a rotation (a jump), so T's zeros below the diagonal stay zero."""
    a = matrices((4, 4), np.float64, seed=5)
    T, Z = (np.asarray(x) for x in fsl.schur(a))
    structure = (T != 0) | np.triu(np.ones_like(T, bool))
    assert np.any(np.tril(structure, -1))  # (a 2 x 2 block to rotate)

    def parts(T, Z):
        Tc, Zc = fsl.rsf2csf(fnp.where(structure, T, 0), Z)
        return fnp.real(Tc), fnp.imag(Tc), fnp.real(Zc), fnp.imag(Zc)

    fg.test_util.check_grads(parts, (T, Z), order=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sqrtm_squares_to_the_matrix_and_matches_scipy(dtype):
    a = matrices((4, 4), dtype, seed=6)
    root = fsl.sqrtm(a)
    complex_dtype = np.complex64 if dtype in (np.float32, np.complex64) else np.complex128
    assert root.dtype == complex_dtype
    np.testing.assert_allclose(np.asarray(root) @ np.asarray(root), a, **TOLERANCE[dtype])
    expected = scipy.linalg.sqrtm(a.astype(complex_dtype).astype(np.complex128))
    np.testing.assert_allclose(root, expected, **TOLERANCE[dtype])
    np.testing.assert_allclose(fg.jit(fsl.sqrtm)(a), root, **TOLERANCE[dtype])


def test_sqrtm_of_a_stack_matches_a_loop_and_vmap():
    a = matrices((3, 4, 4), np.float64, seed=7)
    looped = np.stack([np.asarray(fsl.sqrtm(m)) for m in a])
    np.testing.assert_allclose(fsl.sqrtm(a), looped, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fg.vmap(fsl.sqrtm)(a), looped, rtol=1e-12, atol=1e-12)
    with pytest.raises(NotImplementedError, match="blocksize"):
        fsl.sqrtm(a, blocksize=2)


@pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")
def test_sqrtm_of_a_singular_matrix_is_finite():
    a = np.array([[0.0, 1.0], [0.0, 0.0]]) @ np.array([[0.0, 1.0], [0.0, 0.0]]) + np.diag([0, 4])
    root = np.asarray(fsl.sqrtm(a))
    np.testing.assert_allclose(root @ root, a, atol=1e-12)
    np.testing.assert_allclose(root, scipy.linalg.sqrtm(a), atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_funm_of_exp_is_expm(dtype):
    a = matrices((4, 4), dtype, seed=8)
    result = fsl.funm(a, fnp.exp)
    np.testing.assert_allclose(
        result, scipy.linalg.expm(a.astype(np.complex128)), **TOLERANCE[dtype]
    )
    np.testing.assert_allclose(
        fg.jit(lambda a: fsl.funm(a, fnp.exp))(a), result, **TOLERANCE[dtype]
    )


def test_funm_of_a_polynomial_and_its_error_estimate_match_scipy():
    a = matrices((5, 5), np.float64, seed=9)
    result, error = fsl.funm(a, lambda x: x * x - 2 * x, disp=False)
    np.testing.assert_allclose(result, a @ a - 2 * a, atol=1e-12)
    _, expected_error = scipy.linalg.funm(a, lambda x: x * x - 2 * x, disp=False)
    np.testing.assert_allclose(error, expected_error, rtol=1e-6)


def test_funm_of_a_stack_matches_a_loop_and_vmap():
    a = matrices((2, 4, 4), np.complex128, seed=10)
    looped = np.stack([np.asarray(fsl.funm(m, fnp.sin)) for m in a])
    np.testing.assert_allclose(fsl.funm(a, fnp.sin), looped, rtol=1e-12, atol=1e-12)
    batched = fg.vmap(lambda m: fsl.funm(m, fnp.sin))(a)
    np.testing.assert_allclose(batched, looped, rtol=1e-12, atol=1e-12)
    for m, value in zip(a, looped):
        np.testing.assert_allclose(value, scipy.linalg.sinm(m), rtol=1e-10, atol=1e-10)
