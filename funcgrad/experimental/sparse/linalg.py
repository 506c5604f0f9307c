"""Solvers for sparse (or only applied) operators: `lobpcg_standard`, the largest eigenpairs of
a Hermitian operator, and `spsolve`, a linear system in CSR form.

`lobpcg_standard` is the locally optimal block conjugate gradient method (Knyazev, 2001) with
an orthonormal basis kept throughout (as Duersch, Shao, Yang and Gu's robust variant does):
each round the search space [X, W, P] (the Ritz vectors, their residuals, the previous
directions) is made orthonormal, the operator's Rayleigh-Ritz projection on it gives the next
Ritz vectors, and their parts in [W, P] the next directions. Shapes stay fixed so the loop is
one `while_loop`: a direction that orthonormalization finds dependent becomes a zero column,
whose diagonal entry in the projection is moved below every eigenvalue the operator can have,
so it is never chosen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.experimental.sparse.bcoo import BCOO
from funcgrad.experimental.sparse.bcsr import BCSR
from funcgrad.experimental.sparse.coo import COO
from funcgrad.experimental.sparse.csr import CSC, CSR

__all__ = ["lobpcg_standard", "spsolve"]

_SPARSE_FORMATS = (BCOO, BCSR, COO, CSR, CSC)


def lobpcg_standard(A, X, m: int = 100, tol=None):
    """The k largest eigenvalues (in descending order) and eigenvectors of the Hermitian
    operator `A`, an (n, n) array (dense, or sparse in any of this package's formats) or a
    callable applying it to (n, k) blocks, from the (n, k) starting directions `X` (linearly
    independent; 0 < 5 k < n). Runs at most `m` rounds and stops early once every pair
    (lambda, v) has |A v - lambda v| below tol * 10 * n * (|lambda| + |A v|) (`tol` defaults
    to the dtype's epsilon).

    Returns (theta, U, i): the eigenvalues (k,), orthonormal eigenvectors (n, k) and the
    rounds run (int32)."""
    X = fnp.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"lobpcg_standard: X must be an (n, k) matrix, got shape {X.shape}")
    n, k = X.shape
    if callable(A):
        apply = A
    else:
        if not isinstance(A, _SPARSE_FORMATS):
            A = fnp.asarray(A)
        if A.shape != (n, n):
            raise ValueError(
                f"lobpcg_standard: A of shape {A.shape} does not act on X of shape {X.shape}"
            )
        if A.dtype != X.dtype:
            raise ValueError(
                f"lobpcg_standard: A and X must have one dtype, got {A.dtype} and {X.dtype}"
            )
        if isinstance(A, _SPARSE_FORMATS):
            apply = A.__matmul__
        else:
            apply = functools.partial(fnp.matmul, A, precision=lax.Precision.HIGHEST)

    if not 0 < 5 * k < n:
        raise ValueError(f"lobpcg_standard: needs 0 < 5 k < n, got k = {k} directions, n = {n}")
    if not dtypes.is_inexact(X.dtype):
        raise ValueError(f"lobpcg_standard: X must be floating point, got {X.dtype}")
    tol = float(np.finfo(X.dtype).eps) if tol is None else tol
    return _lobpcg(apply, X, int(m), tol)


def _lobpcg(apply: Callable, X, m: int, tol):
    n, k = X.shape
    real = np.finfo(X.dtype).dtype

    X, _ = _orthonormal(X, fnp.ones(k, dtypes.bool_))
    AX = apply(X)
    theta, C = _largest(_gram(X, AX), k)
    X, AX = X @ C, AX @ C
    P = fnp.zeros_like(X)

    def residuals(X, AX, theta):
        R = AX - X * theta
        bound = tol * 10 * n * (fnp.abs(theta) + _column_norms(AX))
        return R, fnp.all(_column_norms(R) < bound)

    def round_(state):
        i, X, AX, theta, P, _ = state
        R, _ = residuals(X, AX, theta)
        # The search space [X, W, P], orthonormal: W the residuals without their parts along X,
        # then P without its parts along X and W. Dependent directions become zero columns.
        W, kept_w = _orthonormal(_without(R, X), fnp.ones(k, dtypes.bool_))
        moved = fnp.any(P != 0)
        Q, kept_p = _orthonormal(_without(_without(P, X), W), fnp.ones(k, dtypes.bool_) & moved)
        S = fnp.concatenate([X, W, Q], axis=1)
        AS = fnp.concatenate([AX, apply(W), apply(Q)], axis=1)
        kept = fnp.concatenate([fnp.ones(k, dtypes.bool_), kept_w, kept_p])
        H = _gram(S, AS)
        # Below every eigenvalue of the kept columns' projection (bounded by the Frobenius
        # norm of A S), so a dropped column, zero but for this diagonal entry, is never chosen.
        floor = -(2 * fnp.sqrt(fnp.sum(_column_norms(AS) ** 2)) + 1)
        H = H + fnp.diag(fnp.where(kept, 0, floor).astype(H.dtype))
        theta, C = _largest(H, k)
        X, AX = S @ C, AS @ C
        P = S[:, k:] @ C[k:]
        _, done = residuals(X, AX, theta)
        return i + 1, X, AX, theta, P, done

    def going(state):
        i, *_, done = state
        return (i < m) & ~done

    _, initially_done = residuals(X, AX, theta)
    state = (np.int32(0), X, AX, theta, P, initially_done)
    i, X, _, theta, _, _ = lax.while_loop(going, round_, state)
    return theta.astype(real), X, i


def _column_norms(block):
    return fnp.sqrt(fnp.sum(fnp.real(block * fnp.conj(block)), axis=0))


def _gram(S, AS):
    """S^H A S, made exactly Hermitian."""
    H = fnp.conj(S.T) @ AS
    return (H + fnp.conj(H.T)) / 2


def _largest(H, k: int):
    """The k largest eigenvalues of the Hermitian H, in descending order, and their
    eigenvectors as columns."""
    values, vectors = fnp.linalg.eigh(H)
    return values[::-1][:k], vectors[:, ::-1][:, :k]


def _without(block, basis):
    """`block` less its parts along the orthonormal columns of `basis` (twice, for accuracy)."""
    for _ in range(2):
        block = block - basis @ (fnp.conj(basis.T) @ block)
    return block


def _orthonormal(block, wanted):
    """An orthonormal basis of the span of `block`'s columns (those `wanted`), as many columns
    as `block` has: by the Gram matrix's eigendecomposition (SVQB), directions whose singular
    values fall below the dtype's precision times the largest become zero columns. Returns
    the basis and which of its columns are kept."""
    block = fnp.where(wanted, block, 0)
    scale = _column_norms(block)
    scale = fnp.where(scale > 0, scale, 1)
    block = block / scale
    gram = fnp.conj(block.T) @ block
    gram = (gram + fnp.conj(gram.T)) / 2
    values, vectors = fnp.linalg.eigh(gram)
    eps = float(np.finfo(block.dtype).eps)
    kept = values > fnp.max(values) * eps * block.shape[1] * 10
    inverse_roots = fnp.where(kept, 1 / fnp.sqrt(fnp.where(kept, values, 1)), 0)
    basis = block @ (vectors * inverse_roots.astype(vectors.dtype))
    return basis, kept


def spsolve(data, indices, indptr, b, tol: float = 1e-6, reorder: int = 1):
    """The solution x of A x = b for the square matrix A in CSR form (`data`, `indices`,
    `indptr`, read as a BCSR matrix: duplicate entries add up, and slots past the last row or
    with a column outside the matrix are padding): A is made dense and solved by LU with
    partial pivoting, so it costs n^2 memory and n^3 work, and derivatives with respect to
    `data` and `b` follow. `tol` and `reorder` (a sparse factorization's singularity threshold and
    fill-reducing ordering) are accepted and have no use here."""
    del tol, reorder
    data, indices, indptr, b = (fnp.asarray(x) for x in (data, indices, indptr, b))
    if data.ndim != 1 or indices.shape != data.shape or indptr.ndim != 1:
        raise ValueError(
            "spsolve: expected one matrix in CSR form (data and indices of one shape (nse,), "
            f"indptr (n + 1,)), got data {data.shape}, indices {indices.shape}, "
            f"indptr {indptr.shape}"
        )
    n = indptr.shape[0] - 1
    if b.shape != (n,):
        raise ValueError(
            f"spsolve: b must have shape ({n},) for a matrix of shape ({n}, {n}), got {b.shape}"
        )
    dtype = fnp.result_type(data, b)
    dense = BCSR((data.astype(dtype), indices, indptr), shape=(n, n)).todense()
    return fnp.linalg.solve(dense, b.astype(dtype))
