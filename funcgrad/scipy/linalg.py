"""funcgrad.scipy.linalg: SciPy's linear algebra with jax.scipy.linalg's names and semantics.

Every function is a composition of funcgrad.numpy, lax and the decomposition primitives (lu,
cholesky, qr, eigh, svd, eig, triangular_solve), so grad, vmap and jit apply to all of them.
Arguments that only steer SciPy's memory or input checks (`overwrite_*`, `check_finite`,
`lwork`, `turbo`, `debug`) are accepted and ignored, as in JAX: funcgrad arrays cannot be
overwritten, and a compiled program cannot look at its values before it runs.

Matrices are the last two axes and any leading axes are a batch. A right-hand side `b` of one
axis is one vector; with more axes it is a stack of matrices whose batch broadcasts against
the matrix's, as in funcgrad.numpy.linalg.solve.

`schur`, `rsf2csf`, `sqrtm` and `funm` live in `schur.py`; `solve_sylvester`'s default
method builds on `schur`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import (
    broadcast_to,
    convert,
    promote_dtypes_inexact,
    result_type,
    to_array,
)
from funcgrad.numpy.linalg import _adjoint, _broadcast_batches, _matrices
from funcgrad.scipy.schur import funm, rsf2csf, schur, sqrtm
from funcgrad.transforms.autodiff import jvp

__all__ = [
    "block_diag",
    "cho_factor",
    "cho_solve",
    "cholesky",
    "circulant",
    "companion",
    "convolution_matrix",
    "det",
    "dft",
    "eigh",
    "eigh_tridiagonal",
    "expm",
    "expm_frechet",
    "fiedler",
    "fiedler_companion",
    "funm",
    "hadamard",
    "hankel",
    "helmert",
    "hessenberg",
    "hilbert",
    "inv",
    "invhilbert",
    "invpascal",
    "leslie",
    "lu",
    "lu_factor",
    "lu_solve",
    "pascal",
    "polar",
    "qr",
    "qr_multiply",
    "rsf2csf",
    "schur",
    "solve",
    "solve_sylvester",
    "solve_triangular",
    "sqrtm",
    "svd",
    "toeplitz",
]

# ---------------------------------------------------------------------------------------------
# Shared argument handling


def _right_hand_side(name: str, a, b):
    """b as a stack of matrices with a's row count, and whether it was one vector."""
    if b.ndim == 0:
        raise ValueError(f"{name}: b must have at least one axis, got shape {b.shape}")
    vector = b.ndim == 1
    matrix = b[:, None] if vector else b
    if matrix.shape[-2] != a.shape[-1]:
        raise ValueError(
            f"{name}: b of shape {b.shape} does not fit a of shape {a.shape}: b needs "
            f"{a.shape[-1]} rows"
        )
    return matrix, vector


_TRANS = {0: 0, "N": 0, 1: 1, "T": 1, 2: 2, "C": 2}


def _trans(name: str, trans) -> int:
    """SciPy's `trans`: 0 solves with a, 1 with a's transpose, 2 with its conjugate transpose."""
    if trans not in _TRANS:
        raise ValueError(f"{name}: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    return _TRANS[trans]


def _triangular(a, b, lower: bool, trans: int, unit_diagonal: bool = False):
    """x with op(a) @ x = b, reading one triangle of a."""
    return lax.triangular_solve(
        a,
        b,
        left_side=True,
        lower=lower,
        transpose_a=trans != 0,
        conjugate_a=trans == 2,
        unit_diagonal=unit_diagonal,
    )


def _rows(x, index):
    """x[..., index, :] for an index of one row number per row of x (and x's batch)."""
    return fnp.take_along_axis(x, broadcast_to(index[..., None], x.shape), axis=-2)


# ---------------------------------------------------------------------------------------------
# Triangular and Cholesky solves


def solve_triangular(
    a: ArrayLike,
    b: ArrayLike,
    trans: int | str = 0,
    lower: bool = False,
    unit_diagonal: bool = False,
    overwrite_b: bool = False,
    debug: Any = None,
    check_finite: bool = True,
) -> Array:
    """x with a @ x = b (trans 0 or 'N'), a.T @ x = b (1, 'T') or a^H @ x = b (2, 'C'),
    reading only the `lower` (default: upper) triangle of a, its diagonal taken as ones with
    `unit_diagonal`."""
    del overwrite_b, debug, check_finite
    trans = _trans("solve_triangular", trans)
    a, b = promote_dtypes_inexact(a, b)
    a = _matrices("solve_triangular", a, square=True)
    b, vector = _right_hand_side("solve_triangular", a, b)
    a, b = _broadcast_batches("solve_triangular", (a, 2), (b, 2))
    x = _triangular(a, b, bool(lower), trans, bool(unit_diagonal))
    return x[..., 0] if vector else x


def cholesky(
    a: ArrayLike, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True
) -> Array:
    """The Cholesky factor of Hermitian positive definite matrices, read from one triangle:
    L with a = L @ L^H if `lower`, else (the default, as in SciPy) U with a = U^H @ U. NaNs
    where a matrix is not positive definite."""
    del overwrite_a, check_finite
    (a,) = promote_dtypes_inexact(a)
    a = _matrices("cholesky", a, square=True)
    if lower:
        return lax.cholesky(a, symmetrize_input=False)
    # U is the adjoint of the lower factor of a's adjoint, whose lower triangle is a's upper.
    return _adjoint(lax.cholesky(_adjoint(a), symmetrize_input=False))


def cho_factor(
    a: ArrayLike, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True
) -> tuple[Array, bool]:
    """(c, lower) for cho_solve: c is cholesky(a, lower), zero outside its triangle."""
    del overwrite_a, check_finite
    return cholesky(a, lower=lower), lower


def cho_solve(
    c_and_lower: tuple[ArrayLike, bool],
    b: ArrayLike,
    overwrite_b: bool = False,
    check_finite: bool = True,
) -> Array:
    """x with a @ x = b, given cho_factor(a) = (c, lower): two triangular solves."""
    del overwrite_b, check_finite
    c, lower = c_and_lower
    c, b = promote_dtypes_inexact(c, b)
    c = _matrices("cho_solve", c, square=True)
    b, vector = _right_hand_side("cho_solve", c, b)
    c, b = _broadcast_batches("cho_solve", (c, 2), (b, 2))
    if lower:  # a = L L^H
        x = _triangular(c, _triangular(c, b, True, 0), True, 2)
    else:  # a = U^H U
        x = _triangular(c, _triangular(c, b, False, 2), False, 0)
    return x[..., 0] if vector else x


# ---------------------------------------------------------------------------------------------
# LU


def lu_factor(
    a: ArrayLike, overwrite_a: bool = False, check_finite: bool = True
) -> tuple[Array, Array]:
    """(lu, piv) as LAPACK's getrf gives them, for lu_solve: L (unit diagonal) below lu's
    diagonal and U on and above it; row i was swapped with row piv[i], for i in turn."""
    del overwrite_a, check_finite
    (a,) = promote_dtypes_inexact(a)
    factors, pivots, _ = lax.lu(_matrices("lu_factor", a))
    return factors, pivots


def lu(
    a: ArrayLike, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True
) -> tuple[Array, Array] | tuple[Array, Array, Array]:
    """(p, l, u) with a = p @ l @ u, or (p @ l, u) with `permute_l`. For a of shape
    (..., m, n) and k = min(m, n): p is (..., m, m) (real), l (..., m, k), u (..., k, n)."""
    del overwrite_a, check_finite
    (a,) = promote_dtypes_inexact(a)
    a = _matrices("lu", a)
    factors, _, permutation = lax.lu(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    lower = fnp.tril(factors[..., :, :k], -1) + fnp.eye(m, k, dtype=a.dtype)
    upper = fnp.triu(factors[..., :k, :])
    if permute_l:
        # Row i of p @ l is row j of l where permutation[j] = i: a gather, exact.
        return _rows(lower, fnp.argsort(permutation, axis=-1)), upper
    rows = fnp.arange(m, dtype=permutation.dtype)[:, None]
    p = convert(permutation[..., None, :] == rows, dtypes.real_dtype(a.dtype))
    return p, lower, upper


def _permutation_from_pivots(pivots, m: int):
    """The row order that LAPACK's pivots make of 0..m-1: swap row i with row pivots[i] for
    each i in turn (a scan, with masks over the rows, so batches need no gathers)."""
    batch, k = pivots.shape[:-1], pivots.shape[-1]
    rows = fnp.arange(m, dtype=pivots.dtype)
    order = broadcast_to(rows, batch + (m,))
    if k == 0:
        return order

    def swap(order, step):
        i, pivot = step
        pivot = pivot[..., None]
        at_i = order[..., i, None]
        at_pivot = fnp.take_along_axis(order, pivot, axis=-1)
        order = fnp.where(rows == pivot, at_i, order)
        return fnp.where(rows == i, at_pivot, order), None

    steps = (fnp.arange(k, dtype=pivots.dtype), fnp.moveaxis(pivots, -1, 0))
    order, _ = lax.scan(swap, order, steps)
    return order


def lu_solve(
    lu_and_piv: tuple[ArrayLike, ArrayLike],
    b: ArrayLike,
    trans: int = 0,
    overwrite_b: bool = False,
    check_finite: bool = True,
) -> Array:
    """x with a @ x = b (trans 0), a.T @ x = b (1) or a^H @ x = b (2), given
    lu_factor(a) = (lu, piv)."""
    del overwrite_b, check_finite
    factors, pivots = lu_and_piv
    trans = _trans("lu_solve", trans)
    factors, b = promote_dtypes_inexact(factors, b)
    factors = _matrices("lu_solve", factors, square=True)
    pivots = to_array(pivots)
    if pivots.ndim == 0 or pivots.shape[-1] != factors.shape[-1] or not dtypes.is_int(pivots.dtype):
        raise ValueError(
            f"lu_solve: piv must hold {factors.shape[-1]} integers per matrix, as lu_factor gives "
            f"them for lu of shape {factors.shape}; got piv of shape {pivots.shape} and dtype "
            f"{pivots.dtype}"
        )
    permutation = _permutation_from_pivots(pivots, factors.shape[-1])
    b, vector = _right_hand_side("lu_solve", factors, b)
    factors, permutation, b = _broadcast_batches("lu_solve", (factors, 2), (permutation, 1), (b, 2))
    if trans == 0:
        # a[permutation] = L U, so L U x = b[permutation].
        y = _triangular(factors, _rows(b, permutation), True, 0, unit_diagonal=True)
        x = _triangular(factors, y, False, 0)
    else:
        # op(a) = op(U) op(L) P^T: op(U) op(L) y = b with y = x[permutation].
        y = _triangular(factors, _triangular(factors, b, False, trans), True, trans, True)
        x = _rows(y, fnp.argsort(permutation, axis=-1))
    return x[..., 0] if vector else x


# ---------------------------------------------------------------------------------------------
# General solves, inverses, determinants and decompositions

_ASSUME_A = ("gen", "sym", "her", "pos")


def solve(
    a: ArrayLike,
    b: ArrayLike,
    lower: bool = False,
    overwrite_a: bool = False,
    overwrite_b: bool = False,
    debug: bool = False,
    check_finite: bool = True,
    assume_a: str = "gen",
) -> Array:
    """x with a @ x = b. assume_a='pos' solves through the Cholesky factor of the `lower`
    (default: upper) triangle, whose derivative is that of a function of that triangle only;
    'gen', 'sym' and 'her' solve through an LU decomposition of the whole of a, as in JAX."""
    del overwrite_a, overwrite_b, debug, check_finite
    if assume_a not in _ASSUME_A:
        raise ValueError(f"solve: assume_a must be one of {_ASSUME_A}, got {assume_a!r}")
    if assume_a != "pos":
        return fnp.linalg.solve(a, b)
    a, b = promote_dtypes_inexact(a, b)
    return cho_solve(cho_factor(_matrices("solve", a, square=True), lower=lower), b)


def inv(a: ArrayLike, overwrite_a: bool = False, check_finite: bool = True) -> Array:
    """The inverse of square matrices (through LU; NaNs or infs where a is singular)."""
    del overwrite_a, check_finite
    return fnp.linalg.inv(a)


def det(a: ArrayLike, overwrite_a: bool = False, check_finite: bool = True) -> Array:
    """The determinant of square matrices, with a derivative that holds at singular ones."""
    del overwrite_a, check_finite
    return fnp.linalg.det(a)


def svd(
    a: ArrayLike,
    full_matrices: bool = True,
    compute_uv: bool = True,
    overwrite_a: bool = False,
    check_finite: bool = True,
    lapack_driver: str = "gesdd",
) -> Array | tuple[Array, Array, Array]:
    """(u, s, vh) with a = u @ diag(s) @ vh, s descending; s alone without `compute_uv`.
    `lapack_driver` is ignored: funcgrad picks its own."""
    del overwrite_a, check_finite, lapack_driver
    (a,) = promote_dtypes_inexact(a)
    return lax.svd(_matrices("svd", a), full_matrices=full_matrices, compute_uv=compute_uv)


_QR_MODES = ("full", "r", "economic")


def qr(
    a: ArrayLike,
    overwrite_a: bool = False,
    lwork: Any = None,
    mode: str = "full",
    pivoting: bool = False,
    check_finite: bool = True,
) -> tuple[Array, ...]:
    """(q, r) with a = q @ r: q (..., m, m) for mode 'full', (..., m, k) for 'economic'
    (k = min(m, n)); mode 'r' returns the 1-tuple (r,), as SciPy does. With `pivoting`, the
    column order p (int32) follows: a[..., p] = q @ r, with |diag r| non-increasing."""
    del overwrite_a, lwork, check_finite
    if mode not in _QR_MODES:
        raise ValueError(f"qr: mode must be one of {_QR_MODES}, got {mode!r}")
    (a,) = promote_dtypes_inexact(a)
    q, r, *order = lax.qr(
        _matrices("qr", a), pivoting=bool(pivoting), full_matrices=mode != "economic"
    )
    return (r, *order) if mode == "r" else (q, r, *order)


def qr_multiply(
    a: ArrayLike,
    c: ArrayLike,
    mode: str = "right",
    pivoting: bool = False,
    conjugate: bool = False,
    overwrite_a: bool = False,
    overwrite_c: bool = False,
) -> tuple[Array, Array]:
    """(q @ c, r) for mode 'left' (c has k = min(m, n) rows) or (c @ q, r) for 'right' (c
    has m columns), q and r the economic QR decomposition of a, q conjugated with
    `conjugate`. A 1-d c is a column ('left') or a row ('right'), and so is the product. With
    `pivoting`, the column order p follows (see `qr`)."""
    del overwrite_a, overwrite_c
    if mode not in ("left", "right"):
        raise ValueError(f"qr_multiply: mode must be 'left' or 'right', got {mode!r}")
    a, c = promote_dtypes_inexact(a, c)
    a = _matrices("qr_multiply", a)
    if c.ndim == 0:
        raise ValueError(f"qr_multiply: c must have at least one axis, got shape {c.shape}")
    m, n = a.shape[-2:]
    k = min(m, n)
    vector = c.ndim == 1
    if mode == "left":
        c = c[:, None] if vector else c
        if c.shape[-2] != k:
            raise ValueError(
                f"qr_multiply: for a of shape {a.shape}, q has {k} columns, so c needs {k} "
                f"rows, got shape {c.shape}"
            )
    else:
        c = c[None, :] if vector else c
        if c.shape[-1] != m:
            raise ValueError(
                f"qr_multiply: for a of shape {a.shape}, q has {m} rows, so c needs {m} "
                f"columns, got shape {c.shape}"
            )
    q, r, *order = lax.qr(a, pivoting=bool(pivoting), full_matrices=False)
    if conjugate:
        q = fnp.conj(q)
    if mode == "left":
        product = fnp.matmul(q, c)
        return (product[..., 0] if vector else product), r, *order
    product = fnp.matmul(c, q)
    return (product[..., 0, :] if vector else product), r, *order


def polar(
    a: ArrayLike,
    side: str = "right",
    *,
    method: str = "qdwh",
    eps: float | None = None,
    max_iterations: int | None = None,
) -> tuple[Array, Array]:
    """(u, p) with a = u @ p (side 'right', p of shape (..., n, n)) or a = p @ u ('left',
    (..., m, m)): u has orthonormal columns (rows if n > m) and p is positive semidefinite.

    funcgrad computes both methods, 'qdwh' and 'svd', from the SVD a = U S Vh, as u = U Vh
    and p = V S Vh (or U S U^H): the factors are the same, and the SVD differentiates (at
    distinct singular values) where QDWH's loop would not. `eps` and `max_iterations` steer
    QDWH's iteration, so they change nothing here.
    """
    del eps, max_iterations
    if side not in ("right", "left"):
        raise ValueError(f"polar: side must be 'right' or 'left', got {side!r}")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"polar: method must be 'qdwh' or 'svd', got {method!r}")
    (a,) = promote_dtypes_inexact(a)
    u_svd, s, vh = lax.svd(_matrices("polar", a), full_matrices=False)
    s = convert(s, a.dtype)
    unitary = fnp.matmul(u_svd, vh)
    if side == "right":
        return unitary, fnp.matmul(_adjoint(vh) * s[..., None, :], vh)
    return unitary, fnp.matmul(u_svd * s[..., None, :], _adjoint(u_svd))


# ---------------------------------------------------------------------------------------------
# Hermitian eigenproblems


def eigh(
    a: ArrayLike,
    b: ArrayLike | None = None,
    lower: bool = True,
    eigvals_only: bool = False,
    overwrite_a: bool = False,
    overwrite_b: bool = False,
    turbo: bool = True,
    eigvals: None = None,
    type: int = 1,
    check_finite: bool = True,
) -> Array | tuple[Array, Array]:
    """(w, v): ascending eigenvalues w and eigenvectors (columns of v) of the Hermitian matrix
    that the `lower` (or upper) triangle of a describes; w alone with `eigvals_only`.

    With b (Hermitian positive definite, read from the same triangle) the generalized problem
    a @ v = w b @ v (type 1), a @ b @ v = w v (2) or b @ a @ v = w v (3) is reduced to a
    standard one through b's Cholesky factor, and v is normalized as SciPy's is: v^H b v = I
    for types 1 and 2, v^H b^-1 v = I for type 3.
    """
    del overwrite_a, overwrite_b, turbo, check_finite
    if eigvals is not None:
        raise NotImplementedError(
            "eigh: eigvals must be None; select eigenpairs by slicing the result"
        )
    if type not in (1, 2, 3):
        raise ValueError(f"eigh: type must be 1, 2 or 3, got {type!r}")
    lower = bool(lower)
    if b is None:
        (a,) = promote_dtypes_inexact(a)
        a = _matrices("eigh", a, square=True)
        v, w = lax.eigh(a, lower=lower, symmetrize_input=False)
    else:
        a, b = promote_dtypes_inexact(a, b)
        a, b = _matrices("eigh", a, square=True), _matrices("eigh", b, square=True)
        if a.shape[-1] != b.shape[-1]:
            raise ValueError(f"eigh: a of shape {a.shape} and b of shape {b.shape} differ in size")
        a, b = _broadcast_batches("eigh", (a, 2), (b, 2))
        factor = cholesky(_hermitian(b, lower), lower=True)
        w, v = _generalized_eigh(_hermitian(a, lower), factor, type)
    return w if eigvals_only else (w, v)


def _hermitian(a, lower: bool):
    """The Hermitian matrix that one triangle of a describes (its diagonal's real part)."""
    triangle = fnp.tril(a, -1) if lower else fnp.triu(a, 1)
    diagonal = fnp.real(fnp.diagonal(a, 0, -2, -1))
    return triangle + _adjoint(triangle) + convert(_diag(diagonal), a.dtype)


def _diag(v):
    """Square matrices with v's last axis on the diagonal."""
    n = v.shape[-1]
    return fnp.where(fnp.eye(n, dtype=bool), v[..., None, :], 0)


def _generalized_eigh(a, factor, type: int):
    """With b = L L^H: type 1 is the standard problem of L^-1 a L^-H with v = L^-H y; types
    2 and 3 that of L^H a L, with v = L^-H y and v = L y."""
    if type == 1:
        # L^-1 a L^-H from two left solves: (L^-1 a)^H = a L^-H, as a is Hermitian.
        reduced = _triangular(factor, _adjoint(_triangular(factor, a, True, 0)), True, 0)
    else:
        reduced = fnp.matmul(_adjoint(factor), fnp.matmul(a, factor))
    y, w = lax.eigh(reduced)
    if type == 3:
        return w, fnp.matmul(factor, y)
    return w, _triangular(factor, y, True, 2)


def eigh_tridiagonal(
    d: ArrayLike,
    e: ArrayLike,
    *,
    eigvals_only: bool = False,
    select: str = "a",
    select_range: tuple[float, float] | None = None,
    tol: float | None = None,
    key: Any = None,
) -> Array | tuple[Array, Array]:
    """Ascending eigenvalues (and, unless `eigvals_only`, eigenvectors as columns) of the
    Hermitian tridiagonal matrix with diagonal d (its real part) and superdiagonal e: all of
    them (select 'a') or those of indices select_range[0]..select_range[1] inclusive ('i').

    funcgrad solves the tridiagonal matrix as a dense Hermitian one with eigh, which also
    gives eigenvalues and eigenvectors their derivatives. `tol` and `key` steer JAX's
    bisection and inverse iteration, so they change nothing here. Selecting by value
    (select 'v') would give a result whose size depends on the values, so it is refused.
    """
    del tol, key
    d, e = to_array(d), to_array(e)
    if d.dtype != e.dtype:
        raise TypeError(
            f"eigh_tridiagonal: d and e must have one dtype, got {d.dtype.name} and {e.dtype.name}"
        )
    if not dtypes.is_inexact(d.dtype) or d.dtype.itemsize < 4:
        raise TypeError(
            f"eigh_tridiagonal: takes float32, float64, complex64 or complex128, got {d.dtype.name}"
        )
    if d.ndim == 0 or e.ndim == 0 or e.shape[-1] != d.shape[-1] - 1:
        raise ValueError(
            f"eigh_tridiagonal: e must have one element fewer than d along the last axis, got "
            f"shapes {d.shape} and {e.shape}"
        )
    n = d.shape[-1]
    if select == "a":
        first, last = 0, n - 1
    elif select == "i":
        if select_range is None:
            raise ValueError("eigh_tridiagonal: select='i' needs select_range=(first, last)")
        first, last = (int(i) for i in select_range)
        if not 0 <= first <= last < n:
            raise ValueError(
                f"eigh_tridiagonal: select_range {tuple(select_range)} is not a range of "
                f"indices 0..{n - 1}"
            )
    elif select == "v":
        raise NotImplementedError(
            "eigh_tridiagonal: select='v' is not implemented: the number of eigenvalues in a "
            "range of values is not known until they are computed"
        )
    else:
        raise ValueError(f"eigh_tridiagonal: select must be 'a', 'i' or 'v', got {select!r}")
    d, e = _broadcast_batches("eigh_tridiagonal", (d, 1), (e, 1))
    v, w = lax.eigh(_tridiagonal(d, e), lower=True, symmetrize_input=False)
    w, v = w[..., first : last + 1], v[..., first : last + 1]
    return w if eigvals_only else (w, v)


def _tridiagonal(d, e):
    """The Hermitian matrix with real(d) on the diagonal, e above it and conj(e) below."""
    n = d.shape[-1]
    rows, columns = np.indices((n, n))
    zero = fnp.zeros((), d.dtype)
    diagonal = convert(fnp.real(d), d.dtype)
    # Row i holds e[i] at column i + 1 and conj(e[i - 1]) at column i - 1: indexed by column,
    # those are e padded on the left and conj(e) padded on the right.
    above = fnp.pad(e, [(0, 0)] * (e.ndim - 1) + [(1, 0)])
    below = fnp.conj(fnp.pad(e, [(0, 0)] * (e.ndim - 1) + [(0, 1)]))
    matrix = fnp.where(rows == columns, diagonal[..., None, :], zero)
    matrix = fnp.where(columns == rows + 1, above[..., None, :], matrix)
    return fnp.where(rows == columns + 1, below[..., None, :], matrix)


def hessenberg(
    a: ArrayLike, *, calc_q: bool = False, overwrite_a: bool = False, check_finite: bool = True
) -> Array | tuple[Array, Array]:
    """The upper Hessenberg form h of square matrices, a = q @ h @ q^H, with the unitary q
    when `calc_q`: (h, q).

    LAPACK's reduction (gehrd), written out: Householder reflections H = I - tau v v^H, each
    made as larfg makes it, so h and q come out with LAPACK's (and SciPy's) signs. The last
    one zeroes nothing; for complex matrices it makes the last subdiagonal entry real.
    """
    del overwrite_a, check_finite
    (a,) = promote_dtypes_inexact(a)
    a = _matrices("hessenberg", a, square=True)
    n = a.shape[-1]
    q = broadcast_to(fnp.eye(n, dtype=a.dtype), a.shape)
    if n > 1:
        (a, q), _ = lax.scan(_reflect_column, (a, q), fnp.arange(n - 1))
    h = fnp.triu(a, -1)
    return (h, q) if calc_q else h


def _reflect_column(carry, k):
    """One step of the reduction: the reflection that zeroes column k below row k + 1,
    applied as a <- H^H a H and accumulated as q <- q H. Rows and columns are picked with
    masks, so the traced step (a scan body) is the same for every k."""
    a, q = carry
    n = a.shape[-1]
    rows = fnp.arange(n)
    column = fnp.sum(fnp.where(rows == k, a, 0), axis=-1)  # a[..., :, k]
    alpha = fnp.sum(fnp.where(rows == k + 1, column, 0), axis=-1)
    tail = fnp.where(rows > k + 1, column, 0)
    tail_norm2 = fnp.sum(fnp.real(tail * fnp.conj(tail)), axis=-1)
    # Nothing to zero (and, for complex alpha, nothing to make real): the reflection is I.
    # The where inside the sqrt keeps its derivative finite there too.
    identity = (tail_norm2 == 0) & (fnp.imag(alpha) == 0)
    alpha_norm2 = fnp.real(alpha * fnp.conj(alpha))
    norm = fnp.sqrt(fnp.where(identity, 1, alpha_norm2 + tail_norm2))
    beta = convert(fnp.where(fnp.real(alpha) >= 0, -norm, norm), a.dtype)
    tau = fnp.where(identity, 0, (beta - alpha) / beta)
    scale = 1 / fnp.where(identity, 1, alpha - beta)
    v = fnp.where(rows == k + 1, 1, tail * scale[..., None])
    v_h = fnp.conj(v)
    tau = tau[..., None, None]
    a = a - tau * fnp.matmul(a, v[..., :, None]) * v_h[..., None, :]
    a = a - fnp.conj(tau) * v[..., :, None] * fnp.matmul(v_h[..., None, :], a)
    q = q - tau * fnp.matmul(q, v[..., :, None]) * v_h[..., None, :]
    return (a, q), None


# ---------------------------------------------------------------------------------------------
# The matrix exponential


def _pade_coefficients(degree: int) -> list[float]:
    """b_j of the [m/m] Padé approximant of exp, p(x) = sum_j b_j x^j, q(x) = p(-x), scaled so
    that b_m = 1: b_j = (2m - j)! / (j! (m - j)!), exact integers."""
    return [
        float(math.factorial(2 * degree - j) // (math.factorial(j) * math.factorial(degree - j)))
        for j in range(degree + 1)
    ]


# Higham (2005), "The scaling and squaring method for the matrix exponential revisited":
# the degree m approximant is accurate to the unit roundoff for 1-norms up to theta_m. Past the
# last theta the matrix is scaled by 2^-s into its range and the result squared s times.
_PADE_THETAS = {
    "double": ((3, 1.495585217958292e-2), (5, 2.539398330063230e-1), (7, 9.504178996162932e-1),
               (9, 2.097847961257068e0), (13, 5.371920351148152e0)),
    "single": ((3, 4.258730016922831e-1), (5, 1.880152677804762e0), (7, 3.925724783138660e0)),
}  # fmt: skip


def _pade(degree: int, a):
    """(u, v), the odd and even parts of p(a), so that p(a) = v + u and q(a) = v - u."""
    b = _pade_coefficients(degree)
    identity = fnp.eye(a.shape[-1], dtype=a.dtype)
    a2 = _product(a, a)
    if degree == 13:
        # Higham's evaluation, six products: the even powers past a^6 are a^6 times lower ones.
        a4 = _product(a2, a2)
        a6 = _product(a4, a2)
        odd_high = _product(a6, b[13] * a6 + b[11] * a4 + b[9] * a2)
        u = _product(a, odd_high + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * identity)
        even_high = _product(a6, b[12] * a6 + b[10] * a4 + b[8] * a2)
        v = even_high + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * identity
        return u, v
    even_powers = [identity, a2]
    while len(even_powers) <= degree // 2:
        even_powers.append(_product(even_powers[-1], a2))
    u = _product(a, sum(b[2 * j + 1] * p for j, p in enumerate(even_powers)))
    v = sum(b[2 * j] * p for j, p in enumerate(even_powers))
    return u, v


def _product(x, y):
    """A matrix product at full precision, as JAX's expm takes them: the Padé terms span many
    orders of magnitude, and the squarings multiply any error."""
    return fnp.matmul(x, y, precision=lax.Precision.HIGHEST)


def expm(A: ArrayLike, *, upper_triangular: bool = False, max_squarings: int = 16) -> Array:
    """The matrix exponential of square matrices, by Padé approximation with scaling and
    squaring (Higham 2005): degrees 3 to 13 in double precision, 3 to 7 in single, the
    degree and the number of squarings s picked from A's 1-norm. Where A needs more than
    `max_squarings` squarings the result is NaN. `upper_triangular` solves the approximant's
    system as a triangular one."""
    (A,) = promote_dtypes_inexact(A)
    A = _matrices("expm", A, square=True)
    if A.dtype.itemsize < 4:
        raise TypeError(f"expm: takes float32, float64, complex64 or complex128, got {A.dtype}")
    if A.shape[-1] == 0:
        return A
    exponential = functools.partial(
        _expm, upper_triangular=bool(upper_triangular), max_squarings=int(max_squarings)
    )
    return fnp.vectorize(exponential, signature="(n,n)->(n,n)")(A)


def _expm(a, upper_triangular: bool, max_squarings: int):
    precision = "double" if dtypes.real_dtype(a.dtype) == dtypes.float64 else "single"
    thetas = _PADE_THETAS[precision]
    # The degree and the scaling are piecewise constant in a: they carry no derivative.
    norm = lax.stop_gradient(fnp.linalg.norm(a, 1))
    degree_index = fnp.sum(fnp.stack([norm > theta for _, theta in thetas[:-1]]))
    squarings = fnp.maximum(0, fnp.ceil(fnp.log2(norm / thetas[-1][1])))
    scaled = a / convert(2**squarings, a.dtype)
    branches = [functools.partial(_pade, degree) for degree, _ in thetas]
    u, v = lax.switch(degree_index, branches, scaled)
    if upper_triangular:
        r = _triangular(v - u, v + u, False, 0)
    else:
        r = fnp.linalg.solve(v - u, v + u)

    def square(r, i):
        return lax.cond(i < squarings, lambda r: _product(r, r), lambda r: r, r), None

    r, _ = lax.scan(square, r, fnp.arange(max_squarings, dtype=squarings.dtype))
    return fnp.where(squarings > max_squarings, np.nan, r)


def expm_frechet(
    A: ArrayLike, E: ArrayLike, *, method: str | None = None, compute_expm: bool = True
) -> Array | tuple[Array, Array]:
    """The Fréchet derivative of expm at A in the direction E, with expm(A) first when
    `compute_expm`: the jvp of expm. `method` picks SciPy's algorithm and is ignored."""
    del method
    A, E = promote_dtypes_inexact(A, E)
    A = _matrices("expm_frechet", A, square=True)
    E = _matrices("expm_frechet", E, square=True)
    if A.shape != E.shape:
        raise ValueError(f"expm_frechet: A and E must have one shape, got {A.shape} and {E.shape}")
    exponential, derivative = jvp(expm, (A,), (E,))
    return (exponential, derivative) if compute_expm else derivative


# ---------------------------------------------------------------------------------------------
# Sylvester equations


def solve_sylvester(
    A: ArrayLike, B: ArrayLike, C: ArrayLike, *, method: str = "schur", tol: float = 1e-8
) -> Array:
    """X with A @ X + X @ B = C, real where A, B and C are; leading axes are a batch. NaN where
    an eigenvalue of A is within `tol` of minus one of B's (no unique X).

    method 'schur' (Bartels-Stewart) works on complex Schur forms, which every matrix has, so
    it is accurate for defective and non-normal A and B; it has no derivative, as the Schur
    decomposition has none. method 'eigen' works on eigendecompositions: it differentiates,
    but loses accuracy as the eigenvectors of A or B lose their conditioning.
    """
    if method not in ("schur", "eigen"):
        raise ValueError(f"solve_sylvester: method must be 'schur' or 'eigen', got {method!r}")
    A, B, C = promote_dtypes_inexact(A, B, C)
    A = _matrices("solve_sylvester", A, square=True)
    B = _matrices("solve_sylvester", B, square=True)
    C = _matrices("solve_sylvester", C)
    if C.shape[-2:] != (A.shape[-1], B.shape[-1]):
        raise ValueError(
            f"solve_sylvester: C must have A's rows and B's columns, got shapes A {A.shape}, "
            f"B {B.shape}, C {C.shape}"
        )
    A, B, C = _broadcast_batches("solve_sylvester", (A, 2), (B, 2), (C, 2))
    solve = _sylvester_schur if method == "schur" else _sylvester_eigen
    x, ra, rb = solve(A, B, C)
    if not dtypes.is_complex(C.dtype):
        x = fnp.real(x)
    singular = fnp.any(fnp.abs(ra[..., :, None] + rb[..., None, :]) < tol, axis=(-2, -1))
    return fnp.where(singular[..., None, None], np.nan, x)


def _sylvester_eigen(A, B, C):
    """X from A = Ua diag(ra) Ua^-1 and B = Ub diag(rb) Ub^-1: X = Ua (F / (ra_i + rb_j))
    Ub^-1 with F = Ua^-1 C Ub; with A's and B's eigenvalues."""
    ra, ua = fnp.linalg.eig(A)
    rb, ub = fnp.linalg.eig(B)
    f = fnp.linalg.solve(ua, fnp.matmul(convert(C, ua.dtype), ub))
    sums = ra[..., :, None] + rb[..., None, :]
    return fnp.matmul(fnp.matmul(ua, f / sums), fnp.linalg.inv(ub)), ra, rb


def _sylvester_schur(A, B, C):
    """X from the complex Schur forms A = U R U^H and B = V S V^H: R Y + Y S = U^H C V with
    R and S upper triangular is solved a column of Y at a time, X = U Y V^H; with A's and B's
    eigenvalues (R's and S's diagonals).

    Column k of R Y + Y S = F reads (R + S[k, k] I) y_k = f_k - sum_{j<k} S[j, k] y_j, a
    triangular solve once the columns left of it are known."""
    R, U = schur(A, output="complex")
    S, V = schur(B, output="complex")
    F = fnp.matmul(_adjoint(U), fnp.matmul(convert(C, U.dtype), V))
    m, n = F.shape[-2:]
    identity = fnp.eye(m, dtype=R.dtype)

    def column(k, Y):
        s_k = lax.dynamic_slice_in_dim(S, k, 1, -1)
        s_kk = lax.dynamic_slice_in_dim(s_k, k, 1, -2)
        # Y's columns from k on are still zero, so Y @ s_k sums over the columns left of k.
        rhs = lax.dynamic_slice_in_dim(F, k, 1, -1) - fnp.matmul(Y, s_k)
        y_k = _triangular(R + s_kk * identity, rhs, False, 0)
        return lax.dynamic_update_slice_in_dim(Y, y_k, k, -1)

    # No columns (an empty B) leave no loop to trace: its slices of S would be out of range.
    Y = lax.fori_loop(0, n, column, fnp.zeros_like(F)) if n else F
    X = fnp.matmul(U, fnp.matmul(Y, _adjoint(V)))
    return X, fnp.diagonal(R, axis1=-2, axis2=-1), fnp.diagonal(S, axis1=-2, axis2=-1)


# ---------------------------------------------------------------------------------------------
# Structured matrices from vectors: each entry is an element of the input (or 0), picked by a
# static index, so the derivative is a scatter-add and every input axis but the last is a batch.


def block_diag(*arrs: ArrayLike) -> Array:
    """The block diagonal matrix with the given arrays (at most 2-d; 0-d and 1-d ones are one
    row) as blocks, in their common dtype. No arrays give a (1, 0) matrix, as in SciPy."""
    if not arrs:
        return fnp.zeros((1, 0))
    dtype = result_type(*arrs)
    blocks = []
    for i, x in enumerate(arrs):
        x = convert(to_array(x), dtype)
        if x.ndim > 2:
            raise ValueError(
                f"block_diag: arrays must have at most 2 dimensions, got shape {x.shape} at "
                f"argument {i}"
            )
        blocks.append(fnp.atleast_2d(x))
    columns = sum(block.shape[1] for block in blocks)
    rows, start = [], 0
    for block in blocks:
        width = block.shape[1]
        rows.append(fnp.pad(block, [(0, 0), (start, columns - start - width)]))
        start += width
    return fnp.concatenate(rows, axis=0)


def _vectors(name: str, *arrays):
    """The arrays as at least 1-d, in their common dtype, their batches broadcast."""
    arrays = [fnp.atleast_1d(to_array(x)) for x in arrays]
    dtype = result_type(*arrays)
    return _broadcast_batches(name, *((convert(x, dtype), 1) for x in arrays))


def toeplitz(c: ArrayLike, r: ArrayLike | None = None) -> Array:
    """The matrix with first column c and first row r (r[0] ignored), constant along each
    diagonal: entry (i, j) is c[i - j] for i >= j, r[j - i] otherwise. r defaults to conj(c),
    which makes a Hermitian matrix where c[0] is real."""
    c = fnp.atleast_1d(to_array(c))
    r = fnp.conj(c) if r is None else r
    c, r = _vectors("toeplitz", c, r)
    n, m = c.shape[-1], r.shape[-1]
    # Entry (i, j) is element m - 1 + i - j of r reversed (less r[0]) followed by c.
    values = fnp.concatenate([fnp.flip(r[..., 1:], -1), c], axis=-1)
    return values[..., (m - 1) + np.arange(n)[:, None] - np.arange(m)[None, :]]


def hankel(c: ArrayLike, r: ArrayLike | None = None) -> Array:
    """The matrix with first column c and last row r (r[0] ignored), constant along each
    anti-diagonal: entry (i, j) is element i + j of c followed by r[1:]. r defaults to
    zeros."""
    c = to_array(c)
    r = fnp.zeros_like(c) if r is None else to_array(r)
    if c.ndim == 0 or r.ndim == 0:
        raise ValueError(f"hankel: c and r must have at least one axis, got {c.shape}, {r.shape}")
    c, r = _vectors("hankel", c, r)
    n, m = c.shape[-1], r.shape[-1]
    values = fnp.concatenate([c, r[..., 1:]], axis=-1)
    return values[..., np.arange(n)[:, None] + np.arange(m)[None, :]]


def circulant(c: ArrayLike) -> Array:
    """The matrix whose columns are c cyclically shifted: entry (i, j) is c[(i - j) mod n]."""
    (c,) = _vectors("circulant", c)
    n = c.shape[-1]
    return c[..., (np.arange(n)[:, None] - np.arange(n)[None, :]) % n]


def fiedler(a: ArrayLike) -> Array:
    """The symmetric matrix |a_i - a_j|."""
    (a,) = _vectors("fiedler", a)
    return fnp.abs(a[..., :, None] - a[..., None, :])


def leslie(f: ArrayLike, s: ArrayLike) -> Array:
    """The Leslie matrix: fecundities f (n >= 2 of them) in the first row, survival rates s
    (n - 1) below the diagonal, zeros elsewhere."""
    f, s = fnp.atleast_1d(to_array(f)), fnp.atleast_1d(to_array(s))
    if f.shape[-1] < 2:
        raise ValueError(f"leslie: f needs at least 2 elements along its last axis, got {f.shape}")
    if s.shape[-1] != f.shape[-1] - 1:
        raise ValueError(
            f"leslie: s needs one element fewer than f along the last axis, got shapes {f.shape} "
            f"and {s.shape}"
        )
    f, s = _vectors("leslie", f, s)
    n = f.shape[-1]
    rows, columns = np.indices((n, n))
    # f and s in one vector: row 0 reads f[j], row i > 0 reads s[i - 1] at column i - 1.
    first_row, below = rows == 0, rows == columns + 1
    index = np.where(first_row, columns, np.where(below, n + rows - 1, 0))
    values = fnp.concatenate([f, s], axis=-1)
    return fnp.where(first_row | below, values[..., index], 0)


def companion(a: ArrayLike) -> Array:
    """The companion matrix of the polynomial with coefficients a (highest power first, at
    least 2 of them): first row -a[1:] / a[0], ones below the diagonal. Its eigenvalues are
    the polynomial's roots."""
    (a,) = promote_dtypes_inexact(fnp.atleast_1d(to_array(a)))
    if a.shape[-1] < 2:
        raise ValueError(
            f"companion: a needs at least 2 coefficients along its last axis, got {a.shape}"
        )
    first_row = -a[..., 1:] / a[..., :1]
    m = a.shape[-1] - 1
    rows = np.arange(m)[:, None]
    return fnp.where(rows == 0, first_row[..., None, :], fnp.eye(m, k=-1, dtype=a.dtype))


def fiedler_companion(a: ArrayLike) -> Array:
    """Fiedler's pentadiagonal companion matrix of the polynomial with coefficients a (highest
    power first): the same eigenvalues as companion(a), the polynomial's roots."""
    (a,) = promote_dtypes_inexact(fnp.atleast_1d(to_array(a)))
    if a.shape[-1] == 0:
        raise ValueError(f"fiedler_companion: a needs at least one coefficient, got {a.shape}")
    n = a.shape[-1] - 1
    coefficients = -a / a[..., :1]
    # Even rows i hold -a[i + 1] at column i - 1 and -a[i + 2] at column i + 1 (row 0: -a[1]
    # at column 0), and 1 at column i + 2; odd rows i hold 1 at column i - 2 (row 1: column 0).
    rows, columns = np.indices((n, n))
    even = rows % 2 == 0
    index = np.select(
        [(rows == 0) & (columns == 0), even & (columns == rows - 1), even & (columns == rows + 1)],
        [1, rows + 1, rows + 2],
        0,
    )
    ones = (even & (columns == rows + 2)) | (~even & (columns == np.where(rows == 1, 0, rows - 2)))
    matrix = fnp.where(index > 0, coefficients[..., index], 0)
    return fnp.where(ones, 1, matrix)


_CONVOLUTION_MODES = ("full", "same", "valid")


def convolution_matrix(a: ArrayLike, n: int, mode: str = "full") -> Array:
    """The matrix A with A @ v == convolve(a, v, mode) for every v of n elements: (m + n - 1)
    rows for mode 'full', max(m, n) for 'same', max(m, n) - min(m, n) + 1 for 'valid'."""
    n = int(n)
    if n <= 0:
        raise ValueError(f"convolution_matrix: n must be positive, got {n}")
    if mode not in _CONVOLUTION_MODES:
        raise ValueError(f"convolution_matrix: mode must be one of {_CONVOLUTION_MODES}")
    a = to_array(a)
    if a.ndim == 0 or a.shape[-1] == 0:
        raise ValueError(f"convolution_matrix: a needs at least one element, got {a.shape}")
    m = a.shape[-1]
    # The full matrix has a[k - j] at (k, j); 'same' and 'valid' keep a band of its rows.
    if mode == "full":
        first = dropped = 0
    elif mode == "same":
        dropped = min(m, n) - 1
        first = dropped // 2
    else:
        first = min(m, n) - 1
        dropped = 2 * first
    rows = m + n - 1 - dropped
    index = first + np.arange(rows)[:, None] - np.arange(n)[None, :]
    inside = (index >= 0) & (index < m)
    return fnp.where(inside, a[..., np.where(inside, index, 0)], 0)


# ---------------------------------------------------------------------------------------------
# Named matrices of a given size: exact values computed on the host, rounded once.


def _exact_to_float(values: np.ndarray, dtype) -> Array:
    """Exact integers (an object array of Python ints) rounded to `dtype`; those past its
    range become infinite."""

    def rounded(value: int) -> float:
        try:
            return float(value)
        except OverflowError:
            return math.copysign(math.inf, value)

    doubles = np.vectorize(rounded, otypes=[np.float64])(values)
    with np.errstate(over="ignore"):
        return fnp.asarray(doubles.astype(dtype))


def _binomials(n: int) -> np.ndarray:
    """binom(i, j) for i, j < n, as exact Python integers."""
    values = [math.comb(i, j) for i in range(n) for j in range(n)]
    return np.array(values, dtype=object).reshape(n, n)


_PASCAL_KINDS = ("symmetric", "lower", "upper")


def _pascal_kind(name: str, kind: str | None) -> str:
    kind = "symmetric" if kind is None else kind
    if kind not in _PASCAL_KINDS:
        raise ValueError(f"{name}: kind must be one of {_PASCAL_KINDS}, got {kind!r}")
    return kind


def pascal(n: int, kind: str | None = None) -> Array:
    """The Pascal matrix of binomial coefficients, 'symmetric' (the default: binom(i + j, i)),
    'lower' (binom(i, j)) or 'upper', in the default float."""
    kind = _pascal_kind("pascal", kind)
    lower = _binomials(n)
    matrix = {"lower": lower, "upper": lower.T, "symmetric": lower.dot(lower.T)}[kind]
    return _exact_to_float(matrix, dtypes.default_float)


def invpascal(n: int, kind: str | None = None) -> Array:
    """The inverse of pascal(n, kind), exact before rounding: the lower one's inverse is
    (-1)^(i - j) binom(i, j), and the symmetric one's is inv(upper) @ inv(lower)."""
    kind = _pascal_kind("invpascal", kind)
    i = np.arange(n)
    lower = np.where((i[:, None] + i[None, :]) % 2, -1, 1).astype(object) * _binomials(n)
    matrix = {"lower": lower, "upper": lower.T, "symmetric": lower.T.dot(lower)}[kind]
    return _exact_to_float(matrix, dtypes.default_float)


def hilbert(n: int) -> Array:
    """The Hilbert matrix 1 / (i + j + 1), in the default float."""
    i = np.arange(n)
    return fnp.asarray((1.0 / (i[:, None] + i[None, :] + 1)).astype(dtypes.default_float))


def invhilbert(n: int) -> Array:
    """The inverse of hilbert(n), from its closed form in binomial coefficients (exact before
    rounding to the default float; entries grow past float32's range near n = 15)."""
    matrix = np.empty((n, n), dtype=object)
    for i in range(n):
        for j in range(n):
            matrix[i, j] = (
                (-1) ** (i + j)
                * (i + j + 1)
                * math.comb(n + i, n - j - 1)
                * math.comb(n + j, n - i - 1)
                * math.comb(i + j, i) ** 2
            )
    return _exact_to_float(matrix, dtypes.default_float)


def hadamard(n: int, dtype: Any = int) -> Array:
    """Sylvester's Hadamard matrix of order n (a power of 2): H_1 = [[1]] and H_2m the blocks
    [[H_m, H_m], [H_m, -H_m]]."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"hadamard: n must be a positive power of 2, got {n}")
    matrix = np.ones((1, 1), np.int64)
    while len(matrix) < n:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    return fnp.asarray(matrix, dtype=dtype)


def helmert(n: int, full: bool = False) -> Array:
    """The Helmert matrix in the default float: row k - 1 (k = 1..n-1) is the contrast
    (1, ..., 1, -k, 0, ..., 0) / sqrt(k (k + 1)), with k ones; `full` puts the row
    1 / sqrt(n) first, making an orthogonal matrix."""
    if n < 1:
        raise ValueError(f"helmert: n must be positive, got {n}")
    k = np.arange(1, n)[:, None]
    columns = np.arange(n)[None, :]
    contrasts = np.where(columns < k, 1.0, np.where(columns == k, -k, 0.0)) / np.sqrt(k * (k + 1))
    if full:
        contrasts = np.concatenate([np.full((1, n), 1 / np.sqrt(n)), contrasts])
    return fnp.asarray(contrasts.astype(dtypes.default_float))


def dft(n: int, scale: str | None = None, *, dtype: Any = None) -> Array:
    """The discrete Fourier transform matrix, exp(-2 pi i jk / n), unscaled (None) or divided
    by sqrt(n) ('sqrtn') or n ('n'), complex64 unless `dtype` names another complex dtype."""
    if scale not in (None, "sqrtn", "n"):
        raise ValueError(f"dft: scale must be None, 'sqrtn' or 'n', got {scale!r}")
    if dtype is None:
        dtype = dtypes.complex_dtype(dtypes.default_float)
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_complex(dtype):
        raise ValueError(f"dft: dtype must be complex, got {dtype.name}")
    i = np.arange(n)
    # jk mod n keeps the angle in [0, 2 pi), where it is accurate.
    matrix = np.exp(-2j * np.pi * ((i[:, None] * i[None, :]) % max(n, 1)) / max(n, 1))
    matrix = matrix / {None: 1, "sqrtn": np.sqrt(n), "n": n}[scale]
    return fnp.asarray(matrix.astype(dtype))
