"""The Schur decomposition and the matrix functions built on it: `schur`, `rsf2csf`, `sqrtm`
and `funm` of funcgrad.scipy.linalg.

A function f of a matrix A = Z T Z^H is Z f(T) Z^H, and f(T) of an upper triangular T is
upper triangular, its diagonal f of T's. The entries above the diagonal follow a superdiagonal
at a time, each diagonal's from the ones below it: for the square root U (U U = T, the
Björck–Hammarling recurrence) and for f (f(T) commutes with T, the Schur–Parlett recurrence).
Entry (i, j) needs only entries (i, k) and (k, j) with i < k < j, which lie on lower
superdiagonals, so a whole superdiagonal is one matrix product masked to it; `fori_loop`
walks the n - 1 superdiagonals.

The Schur decomposition has no derivative, so neither have `sqrtm` and `funm`; `rsf2csf` is
a composition of array operations and differentiates where its choice of rotations does not
change.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.lax.schur import schur as _lax_schur
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.numpy.linalg import _adjoint, _matrices

__all__ = ["funm", "rsf2csf", "schur", "sqrtm"]


def schur(a: ArrayLike, output: str = "real") -> tuple[Array, Array]:
    """The Schur decomposition a = Z T Z^H: T quasi upper triangular and Z orthogonal for a
    real matrix with `output` 'real' (complex eigenvalue pairs as 2 x 2 blocks on T's
    diagonal), T upper triangular and Z unitary for 'complex' or a complex matrix. Leading axes
    are a batch. Not differentiable."""
    if output not in ("real", "complex"):
        raise ValueError(f"schur: output must be 'real' or 'complex', got {output!r}")
    a = _matrices("schur", a, square=True)
    if output == "complex":
        a = a.astype(dtypes.complex_dtype(a.dtype))
    form, vectors = _lax_schur(a)
    return form, vectors


def _complex_pair(name: str, T, Z):
    T, Z = promote_dtypes_inexact(T, Z)
    T = _matrices(name, T, square=True)
    Z = _matrices(name, Z, square=True)
    if T.shape != Z.shape:
        raise ValueError(f"{name}: T and Z must have one shape, got {T.shape} and {Z.shape}")
    dtype = dtypes.complex_dtype(T.dtype)
    return T.astype(dtype), Z.astype(dtype)


def rsf2csf(T: ArrayLike, Z: ArrayLike, check_finite: bool = True) -> tuple[Array, Array]:
    """A real Schur form T with its vectors Z made a complex one: each 2 x 2 block on T's
    diagonal whose subdiagonal entry is not negligible (beside its diagonal, in float64's
    epsilon) is made triangular by a Givens rotation, applied to T from both sides and to Z,
    from the bottom block up; every subdiagonal entry is then zero. `check_finite` is
    ignored."""
    del check_finite
    T, Z = _complex_pair("rsf2csf", T, Z)
    n = T.shape[-1]
    if n < 2:
        return T, Z
    rows = lax.broadcasted_iota(dtypes.int32, T.shape, T.ndim - 2)
    columns = lax.broadcasted_iota(dtypes.int32, T.shape, T.ndim - 1)
    eps = np.finfo(np.float64).eps

    def rotate(k, carry):
        T, Z = carry
        m = n - 1 - k
        block = lax.dynamic_slice_in_dim(lax.dynamic_slice_in_dim(T, m - 1, 2, -2), m - 1, 2, -1)
        a, b = block[..., 0, 0], block[..., 0, 1]
        c, d = block[..., 1, 0], block[..., 1, 1]
        wanted = fnp.abs(c) > eps * (fnp.abs(a) + fnp.abs(d))
        # The block's eigenvalue a/2 + d/2 + sqrt(((a - d)/2)^2 + bc) (the principal root: a
        # real block's complex pair gives the one of positive imaginary part), less d. Blocks
        # left alone compute with stand-ins, so that no infinite derivative (of a square root
        # at zero) meets a zero cotangent in reverse mode.
        half = (a - d) / 2
        mu = half + fnp.sqrt(fnp.where(wanted, half * half + b * c, 1))
        squared = fnp.real(mu * fnp.conj(mu) + c * fnp.conj(c))
        r = fnp.sqrt(fnp.where(wanted, squared, 1))
        cos, sin = (mu / r)[..., None, None], (c / r)[..., None, None]
        rotated = T
        previous_row = lax.dynamic_slice_in_dim(T, m - 1, 1, -2)
        current_row = lax.dynamic_slice_in_dim(T, m, 1, -2)
        right = columns >= m - 1
        rotated = fnp.where(
            (rows == m - 1) & right, fnp.conj(cos) * previous_row + sin * current_row, rotated
        )
        rotated = fnp.where((rows == m) & right, cos * current_row - sin * previous_row, rotated)

        def from_right(x, mask):
            previous = lax.dynamic_slice_in_dim(x, m - 1, 1, -1)
            current = lax.dynamic_slice_in_dim(x, m, 1, -1)
            x = fnp.where((columns == m - 1) & mask, previous * cos + current * fnp.conj(sin), x)
            return fnp.where(
                (columns == m) & mask, current * fnp.conj(cos) - previous * fnp.conj(sin), x
            )

        rotated = from_right(rotated, rows <= m)
        rotated_z = from_right(Z, True)
        T = fnp.where(wanted[..., None, None], rotated, T)
        Z = fnp.where(wanted[..., None, None], rotated_z, Z)
        T = fnp.where((rows == m) & (columns == m - 1), 0, T)
        return T, Z

    return lax.fori_loop(0, n - 1, rotate, (T, Z))


def _complex_schur(name: str, A):
    A = _matrices(name, A, square=True)
    return _lax_schur(A.astype(dtypes.complex_dtype(A.dtype)))


def _by_superdiagonals(T, first, entries: Callable):
    """The upper triangular matrix with diagonal `first` whose superdiagonal p is
    `entries(F)`'s, F holding the superdiagonals below p."""
    n = T.shape[-1]
    rows = lax.broadcasted_iota(dtypes.int32, T.shape, T.ndim - 2)
    columns = lax.broadcasted_iota(dtypes.int32, T.shape, T.ndim - 1)
    F = fnp.where(rows == columns, first[..., None, :], 0).astype(T.dtype)

    def superdiagonal(p, F):
        return fnp.where(columns - rows == p, entries(F), F)

    return lax.fori_loop(1, n, superdiagonal, F)


def _diagonal(x):
    return fnp.diagonal(x, axis1=-2, axis2=-1)


def sqrtm(A: ArrayLike, blocksize: int = 1) -> Array:
    """A principal square root X of square matrices (X X = A), complex for any input: A's
    complex Schur form T = Z^H A Z, U U = T solved a superdiagonal at a time (Björck and
    Hammarling, 1983), X = Z U Z^H. An entry whose numerator is exactly zero is zero, so a
    singular A with a zero eigenvalue of one Jordan block still has a root. `blocksize` must
    be 1 (the blocked algorithm is not implemented). Not differentiable."""
    if blocksize != 1:
        raise NotImplementedError("sqrtm: only blocksize=1 is implemented")
    T, Z = _complex_schur("sqrtm", A)
    roots = fnp.sqrt(_diagonal(T))
    sums = roots[..., :, None] + roots[..., None, :]

    def entries(U):
        # U U on superdiagonal p: sum over i < k < j of U_ik U_kj, U_ij itself still zero.
        numerator = T - fnp.matmul(U, U, precision=lax.Precision.HIGHEST)
        return fnp.where(numerator == 0, 0, numerator / sums)

    U = _by_superdiagonals(T, roots, entries)
    return fnp.matmul(fnp.matmul(Z, U), _adjoint(Z))


def funm(A: ArrayLike, func: Callable, disp: bool = True) -> Array | tuple[Array, Array]:
    """func extended to square matrices, func(A) = Z F Z^H from A's complex Schur form
    T = Z^H A Z (a real A's real form made complex by `rsf2csf`): F's diagonal is func of
    T's, and F_ij, i < j, follows from F T = T F: (T_ij (F_jj - F_ii) + sum over i < k < j of
    T_ik F_kj - F_ik T_kj) / (T_jj - T_ii), a superdiagonal at a time (Schur–Parlett; Golub
    and Van Loan, Algorithm 11.1.1). `func` takes and returns arrays (it is applied to the
    vector of eigenvalues).

    The recurrence divides by differences of eigenvalues, so A must have distinct eigenvalues,
    well apart: close ones make the result inaccurate and equal ones leave the entries
    undivided (wrong unless the numerator is zero). The result is complex for any input.
    With `disp` False the result comes with an estimate of its relative error
    (`_funm_error`); with `disp` True, no estimate is printed. Not differentiable."""
    T, Z = rsf2csf(*_lax_schur(_matrices("funm", A, square=True)))
    values = fnp.asarray(func(_diagonal(T))).astype(T.dtype)
    differences = _diagonal(T)[..., None, :] - _diagonal(T)[..., :, None]

    def entries(F):
        precision = lax.Precision.HIGHEST
        numerator = fnp.matmul(T, F, precision=precision) - fnp.matmul(F, T, precision=precision)
        return fnp.where(differences == 0, numerator, numerator / differences)

    F = _by_superdiagonals(T, values, entries)
    result = fnp.matmul(fnp.matmul(Z, F), _adjoint(Z))
    if disp:
        return result
    return result, _funm_error(T, differences, result)


def _funm_error(T, differences, result):
    """The estimate min(1, max(eps, eps / d * ||strict upper triangle of T||_1)), d the
    smallest |T_00| or nonzero |T_jj - T_ii| (i < j), eps (the result's precision) when all
    are zero; inf where the result is not finite."""
    eps = float(np.finfo(dtypes.real_dtype(T.dtype)).eps)
    n = T.shape[-1]
    above = np.triu(np.ones((n, n), bool), 1)
    gaps = fnp.where(above & (differences != 0), fnp.abs(differences), np.inf)
    smallest = fnp.minimum(fnp.min(gaps, axis=(-2, -1)), fnp.abs(T[..., 0, 0]))
    smallest = fnp.where(smallest == 0, eps, smallest)
    strict = fnp.where(above, fnp.abs(T), 0)
    norm = fnp.max(fnp.sum(strict, axis=-2), axis=-1)
    error = fnp.minimum(1.0, fnp.maximum(eps, eps / smallest * norm))
    finite = fnp.all(fnp.isfinite(result), axis=(-2, -1))
    return fnp.where(finite, error, np.inf)
