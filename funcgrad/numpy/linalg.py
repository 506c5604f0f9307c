"""funcgrad.numpy.linalg: norms, decompositions, solves, and the products NumPy also lists here.

Decompositions come from the primitives in `funcgrad.lax.linalg_decomp`; solves, inverses and
determinants are written with an LU decomposition, so every transformation applies to them.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from funcgrad import dtypes, lax
from funcgrad.array import Array
from funcgrad.lax.householder import geqrf
from funcgrad.lax.linalg_decomp import subset_bounds
from funcgrad.numpy import linalg_ops, misc
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    broadcast_to,
    convert,
    promote_dtypes_inexact,
    to_array,
)
from funcgrad.numpy.creation import ones
from funcgrad.numpy.linalg_ops import matrix_transpose, vecdot
from funcgrad.numpy.reductions import (
    count_nonzero,
    cumprod,
    max,
    min,
    prod,
    reduction_axes,
    scalar,
    squared_modulus,
    sum,
)
from funcgrad.numpy.shape_ops import canonicalize_axes, concatenate, flip, moveaxis, reshape
from funcgrad.numpy.ufuncs import absolute, conj, isnan, log, power, sign, sqrt
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = [
    "EigResult",
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "inv",
    "lstsq",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "multi_dot",
    "norm",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "tensorinv",
    "tensorsolve",
    "trace",
    "vecdot",
    "vector_norm",
]


def _inexact(x):
    x = to_array(x)
    return x if dtypes.is_inexact(x.dtype) else convert(x, dtypes.to_inexact(x.dtype))


def norm(x, ord=None, axis: int | Sequence[int] | None = None, keepdims: bool = False):
    """NumPy's norm: a vector norm over one axis, a matrix norm over two.

    Without `axis`, a 1-d array has a vector norm and a 2-d array a matrix norm; with neither
    `axis` nor `ord`, the 2-norm of the flattened array is returned for any rank.
    """
    x = _inexact(x)
    if axis is None:
        if ord is None:
            return _vector_norm(x, 2, tuple(range(x.ndim)), keepdims)
        if x.ndim not in (1, 2):
            raise ValueError(
                f"norm: ord={ord!r} without axis needs a 1-d or 2-d array, got shape {x.shape}"
            )
        axis = tuple(range(x.ndim))
    axes = canonicalize_axes(axis, x.ndim, "norm")
    if len(axes) == 1:
        return _vector_norm(x, 2 if ord is None else ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, "fro" if ord is None else ord, axes, keepdims)
    raise ValueError(f"norm: axis must name one or two axes, got {axis}")


def vector_norm(x, /, *, axis: int | Sequence[int] | None = None, keepdims: bool = False, ord=2):
    """The vector norm over `axis` (all axes, flattened, by default)."""
    x = _inexact(x)
    return _vector_norm(x, ord, reduction_axes("vector_norm", axis, x.ndim), keepdims)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro"):
    """The matrix norm over the last two axes."""
    x = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_norm: needs at least two axes, got shape {x.shape}")
    return _matrix_norm(x, ord, (x.ndim - 2, x.ndim - 1), keepdims)


def _adjoint(x):
    """The conjugate transpose of the last two axes."""
    x = matrix_transpose(x)
    return lax.conj(x) if dtypes.is_complex(x.dtype) else x


def _vector_norm(x, ord, axes: tuple[int, ...], keepdims: bool):
    magnitude = absolute(x)
    if ord == np.inf:
        return max(magnitude, axes, keepdims=keepdims, initial=0.0)
    if ord == -np.inf:
        return min(magnitude, axes, keepdims=keepdims)
    if ord == 0:
        return convert(count_nonzero(x, axes, keepdims=keepdims), magnitude.dtype)
    if ord == 1:
        return sum(magnitude, axes, keepdims=keepdims)
    if ord == 2:
        return sqrt(sum(squared_modulus(x), axes, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is not a vector norm")
    total = sum(power(magnitude, scalar(ord, magnitude.dtype)), axes, keepdims=keepdims)
    return power(total, scalar(1 / ord, magnitude.dtype))


def _matrix_norm(x, ord, axes: tuple[int, ...], keepdims: bool):
    rows, columns = axes
    if rows == columns:
        raise ValueError(f"norm: a matrix norm needs two different axes, got {axes}")
    if ord in ("fro", "f"):
        return sqrt(sum(squared_modulus(x), axes, keepdims=keepdims))
    # The norms that take a largest value are 0 for an empty matrix; the smallest has none.
    if ord in (2, -2, "nuc"):
        singular_values = svdvals(moveaxis(x, (rows, columns), (-2, -1)))
        if ord == 2:
            result = max(singular_values, -1, initial=0.0)
        else:
            result = (min if ord == -2 else sum)(singular_values, -1)
        if keepdims:
            return lax.expand_dims(result, sorted(axes))
        return result
    if ord in (1, -1):
        # The largest (smallest) column sum: sum over the rows, then over the columns.
        summed, over = rows, columns
    elif ord in (np.inf, -np.inf):
        summed, over = columns, rows
    else:
        raise ValueError(f"norm: ord={ord!r} is not a matrix norm")
    sums = sum(absolute(x), summed, keepdims=True)
    if ord > 0:
        result = max(sums, over, keepdims=True, initial=0.0)
    else:
        result = min(sums, over, keepdims=True)
    if keepdims:
        return result
    return lax.reshape(result, tuple(d for i, d in enumerate(x.shape) if i not in axes))


# ---------------------------------------------------------------------------------------------
# Decompositions


class EigResult(NamedTuple):
    eigenvalues: Array
    eigenvectors: Array


class EighResult(NamedTuple):
    eigenvalues: Array
    eigenvectors: Array


class QRResult(NamedTuple):
    Q: Array
    R: Array


class SlogdetResult(NamedTuple):
    sign: Array
    logabsdet: Array


class SVDResult(NamedTuple):
    U: Array
    S: Array
    Vh: Array


def _matrices(name: str, a, square: bool = False):
    a = _inexact(a)
    if a.ndim < 2:
        raise ValueError(f"{name}: needs an array of rank at least 2, got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: needs square matrices in the last two axes, got {a.shape}")
    return a


def cholesky(a, *, upper: bool = False, symmetrize_input: bool = True):
    """The Cholesky factor of Hermitian positive definite matrices: L with a = L @ L^H, or U
    = L^H with a = U^H @ U if `upper`. NaNs where a matrix is not positive definite."""
    factor = lax.cholesky(_matrices("cholesky", a, True), symmetrize_input=symmetrize_input)
    return conj(matrix_transpose(factor)) if upper else factor


def eig(a) -> EigResult:
    """Eigenvalues and right eigenvectors (unit columns) of general square matrices; both are
    complex. Only the eigenvalues are differentiable."""
    w, v = lax.eig(_matrices("eig", a, True))
    return EigResult(w, v)


def eigvals(a):
    """The (complex) eigenvalues of general square matrices, differentiable."""
    (w,) = lax.eig(_matrices("eigvals", a, True), compute_right_eigenvectors=False)
    return w


def eigh(a, UPLO: str | None = None, symmetrize_input: bool = True) -> EighResult:
    """Ascending eigenvalues and eigenvectors (columns) of symmetric matrices."""
    v, w = lax.eigh(
        _matrices("eigh", a, True), lower=_lower("eigh", UPLO), symmetrize_input=symmetrize_input
    )
    return EighResult(w, v)


def eigvalsh(a, UPLO: str | None = "L", *, symmetrize_input: bool = True):
    return eigh(a, UPLO, symmetrize_input).eigenvalues


def _lower(name: str, UPLO: str | None) -> bool:
    if UPLO not in (None, "L", "U"):
        raise ValueError(f"{name}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return UPLO != "U"


def qr(a, mode: str = "reduced"):
    """QR decomposition; mode 'reduced' or 'complete' gives (Q, R), mode 'r' only R, and mode
    'raw' LAPACK's packed form (h, tau) as NumPy returns it: h [..., n, m] is the transpose of
    the packed [..., m, n] matrix that `lax.linalg.ormqr` and `householder_product` take."""
    if mode not in ("reduced", "complete", "r", "raw"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete', 'r' or 'raw', got {mode!r}")
    if mode == "raw":
        packed, taus = geqrf(_matrices("qr", a))
        return QRResult(matrix_transpose(packed), taus)
    q, r = lax.qr(_matrices("qr", a), full_matrices=mode == "complete")
    return r if mode == "r" else QRResult(q, r)


def svd(
    a,
    full_matrices: bool = True,
    compute_uv: bool = True,
    hermitian: bool = False,
    subset_by_index: tuple[int, int] | None = None,
):
    """Singular value decomposition a = U @ diag(S) @ Vh, singular values descending.

    `hermitian` (symmetric) matrices are decomposed through their eigendecomposition.
    """
    a = _matrices("svd", a)
    if hermitian:
        return _symmetric_svd(a, compute_uv, subset_by_index)
    out = lax.svd(
        a, full_matrices=full_matrices, compute_uv=compute_uv, subset_by_index=subset_by_index
    )
    return SVDResult(*out) if compute_uv else out


def _symmetric_svd(a, compute_uv: bool, subset_by_index):
    """Singular values are |eigenvalues|, U the eigenvectors, Vh the adjoint of the
    eigenvectors with the signs of the eigenvalues, all sorted by descending |eigenvalue|."""
    if a.shape[-1] != a.shape[-2]:
        raise ValueError(f"svd: hermitian=True needs square matrices, got shape {a.shape}")
    from funcgrad.numpy.indexing import take_along_axis
    from funcgrad.numpy.sorting_ops import argsort

    w, v = eigh(a)
    order = argsort(-absolute(w), axis=-1)
    if subset_by_index is not None:
        lo, hi = subset_bounds("svd", subset_by_index, a.shape)
        order = order[..., lo:hi]
    s = take_along_axis(absolute(w), order, axis=-1)
    if not compute_uv:
        return s
    columns = broadcast_to(order[..., None, :], v.shape[:-1] + order.shape[-1:])
    u = take_along_axis(v, columns, axis=-1)
    signs = take_along_axis(sign(w), order, axis=-1)
    return SVDResult(u, s, _adjoint(u * signs[..., None, :]))


def svdvals(x, /):
    return svd(x, compute_uv=False)


# ---------------------------------------------------------------------------------------------
# Solves, inverses and determinants through LU


def _permute_rows(b, permutation):
    """b[..., permutation, :] for b of shape (..., m, k) and permutation (..., m)."""
    from funcgrad.numpy.indexing import take_along_axis

    indices = broadcast_to(permutation[..., None], b.shape)
    return take_along_axis(b, indices, axis=-2, mode="promise_in_bounds")


def _lu_solve(lu, permutation, b):
    """Solve a @ x = b given a's LU factors: L U x = P b, one triangular solve for each."""
    y = lax.triangular_solve(
        lu, _permute_rows(b, permutation), left_side=True, lower=True, unit_diagonal=True
    )
    return lax.triangular_solve(lu, y, left_side=True, lower=False)


def _broadcast_batches(name: str, *arrays_and_core_ranks):
    """Each (array, core rank) broadcast to the batch shape they share, the batch being the
    axes before an array's last `core rank` ones."""
    batches = [x.shape[: x.ndim - core] for x, core in arrays_and_core_ranks]
    try:
        batch = broadcast_shapes(*batches)
    except ValueError:
        shapes = ", ".join(str(x.shape) for x, _ in arrays_and_core_ranks)
        raise ValueError(
            f"{name}: the batch shapes {', '.join(map(str, batches))} of the operands of shapes "
            f"{shapes} do not broadcast"
        ) from None
    return [broadcast_to(x, batch + x.shape[x.ndim - core :]) for x, core in arrays_and_core_ranks]


def solve(a, b):
    """x with a @ x = b. b is a vector when 1-d, else a stack of matrices (..., m, k); the
    leading axes of a and b broadcast."""
    a, b = promote_dtypes_inexact(a, b)
    a = _matrices("solve", a, True)
    if b.ndim == 0 or b.shape[-1 if b.ndim == 1 else -2] != a.shape[-1]:
        raise ValueError(
            f"solve: b of shape {b.shape} does not fit a of shape {a.shape}: b needs "
            f"{a.shape[-1]} rows"
        )
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    a, b = _broadcast_batches("solve", (a, 2), (b, 2))
    lu, _, permutation = lax.lu(a)
    x = _lu_solve(lu, permutation, b)
    return x[..., 0] if vector else x


def inv(a):
    a = _matrices("inv", a, True)
    identity = broadcast_to(misc.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return solve(a, identity)


def _lu_sign_and_diagonal(a):
    """The sign of the row permutation of a's LU decomposition, and U's diagonal."""
    lu, pivots, _ = lax.lu(a)
    unmoved = lax.broadcasted_iota(pivots.dtype, pivots.shape, pivots.ndim - 1)
    swaps = count_nonzero(pivots != unmoved, axis=-1)
    parity_sign = 1 - 2 * convert(swaps % 2, a.dtype)
    return parity_sign, misc.diagonal(lu, 0, -2, -1)


def det(a):
    """The determinant, as the signed product of U's diagonal in an LU decomposition (1 for
    0 x 0 matrices, the empty product)."""
    a = _matrices("det", a, True)
    if a.shape[-1] == 0:
        return ones(a.shape[:-2], a.dtype)
    return _det(a)


@custom_jvp
def _det(a):
    parity_sign, diagonal = _lu_sign_and_diagonal(a)
    return parity_sign * prod(diagonal, axis=-1)


@_det.defjvp
def _det_jvp(primals, tangents):
    """d det(A) = trace(adj(A) dA). The adjugate is finite at singular matrices, where
    differentiating the LU factors (or det(A) * inv(A)) would divide by a zero pivot."""
    (a,), (a_dot,) = primals, tangents
    return _det(a), sum(matrix_transpose(_adjugate(a)) * a_dot, axis=(-2, -1))


def _adjugate(a):
    """adj(A), through det(A) inv(A) for well-conditioned matrices and through the SVD for
    (nearly) singular ones. The inverse's derivatives blow up at singular matrices; the SVD's
    adjugate has a jvp of its own, but differentiating that again differentiates the SVD,
    which blows up at repeated singular values (the identity among them). Each formula gets a
    harmless stand-in where the other one is used, so no inf or NaN can leak through the
    select into a derivative."""
    n = a.shape[-1]
    s = lax.stop_gradient(svdvals(a))
    cutoff = s[..., :1] * math.sqrt(dtypes.finfo(a.dtype).eps)
    near_singular = (s[..., -1:] <= cutoff)[..., None]
    identity = misc.eye(n, dtype=a.dtype)
    distinct_singular_values = misc.diag(misc.arange(1, n + 1, dtype=a.dtype))
    regular = misc.where(near_singular, identity, a)
    singular = misc.where(near_singular, a, distinct_singular_values)
    by_inverse = _det(regular)[..., None, None] * inv(regular)
    return misc.where(near_singular, _adjugate_from_svd(singular), by_inverse)


@custom_jvp
def _adjugate_from_svd(a):
    """adj(A) from the SVD A = U S Vh: adj(A) = det(U) det(Vh) Vh^H adj(S) U^H, where adj(S) is
    diagonal with the products of all singular values but one. Its jvp uses the SVD's values
    only, so it holds at repeated singular values, where the SVD's own derivative does not."""
    u, s, vh = svd(a, full_matrices=False)
    others = convert(_products_leaving_out_one(s), a.dtype) * _orientation(u, vh)[..., None]
    return _adjoint(vh) @ (others[..., :, None] * _adjoint(u))


@_adjugate_from_svd.defjvp
def _adjugate_from_svd_jvp(primals, tangents):
    """With A + tE = U (S + tM) Vh for M = U^H E Vh^H, d adj(A) = det(U) det(Vh) Vh^H
    d adj(S)[M] U^H, and at the diagonal S: d adj(S)[M]_ij = -M_ij prod_{k != i, j} s_k off
    the diagonal, sum_{k != i} M_kk prod_{l != i, k} s_l on it."""
    (a,), (a_dot,) = primals, tangents
    u, s, vh = (lax.stop_gradient(x) for x in svd(a, full_matrices=False))
    m = _adjoint(u) @ a_dot @ _adjoint(vh)
    s = convert(s, a.dtype)
    n = s.shape[-1]
    # leave_two[..., i, j] (i != j): the product of the singular values but the i-th and j-th,
    # as row i's products leaving out one, where row i is s with s_i replaced by 1.
    eye = misc.eye(n, dtype=bool)
    leave_two = _products_leaving_out_one(misc.where(eye, 1, s[..., None, :]))
    m_diagonal = misc.diagonal(m, 0, -2, -1)
    on_diagonal = sum(misc.where(eye, 0, leave_two) * m_diagonal[..., None, :], axis=-1)
    inner = misc.where(eye, on_diagonal[..., :, None], -m * leave_two)
    orientation = _orientation(u, vh)[..., None, None]
    tangent = orientation * (_adjoint(vh) @ inner @ _adjoint(u))
    return _adjugate_from_svd(a), tangent


def _products_leaving_out_one(s):
    """prod_{j != i} s_j for each i, from prefix and suffix products (no division by an s_i
    that may be 0)."""
    empty_product = ones(s.shape[:-1] + (1,), s.dtype)
    before = concatenate([empty_product, cumprod(s[..., :-1], axis=-1)], axis=-1)
    after = flip(concatenate([empty_product, cumprod(flip(s[..., 1:], -1), axis=-1)], axis=-1), -1)
    return before * after


def _orientation(u, vh):
    """det(U) det(Vh), of modulus 1 (+-1 for real matrices): constant where the SVD is
    differentiable, so no gradient."""
    return lax.stop_gradient(_det(u) * _det(vh))


def slogdet(a, *, method: str | None = None) -> SlogdetResult:
    """The sign and log |determinant|: (0, -inf) for singular matrices."""
    if method not in (None, "lu"):
        raise ValueError(f"slogdet: method must be 'lu', got {method!r}")
    a = _matrices("slogdet", a, True)
    parity_sign, diagonal = _lu_sign_and_diagonal(a)
    magnitude = absolute(diagonal)
    if dtypes.is_complex(a.dtype):
        # The phase diagonal / |diagonal|, not sign(diagonal): a complex determinant's phase
        # moves with the matrix, and sign's derivative is 0.
        singular = magnitude == 0
        divisor = convert(misc.where(singular, 1, magnitude), diagonal.dtype)
        phases = misc.where(singular, 0, diagonal / divisor)
    else:
        phases = sign(diagonal)
    return SlogdetResult(parity_sign * prod(phases, axis=-1), sum(log(magnitude), axis=-1))


def matrix_power(a, n: int):
    """a multiplied by itself n times (by repeated squaring); inv(a) to the -n for n < 0."""
    a = to_array(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"matrix_power: needs square matrices, got shape {a.shape}")
    if not isinstance(n, (int, np.integer)):
        raise TypeError(f"matrix_power: n must be an integer, got {n!r}")
    n = int(n)
    if n == 0:
        return broadcast_to(misc.eye(a.shape[-1], dtype=a.dtype), a.shape)
    if n < 0:
        a, n = inv(a), -n
    result = None
    while n:
        if n & 1:
            result = a if result is None else matmul(result, a)
        n >>= 1
        if n:
            a = matmul(a, a)
    return result


# ---------------------------------------------------------------------------------------------
# Through the SVD


def matrix_rank(M, rtol=None, *, hermitian: bool = False, tol=None):
    """The number of singular values above tol (default: max(s) * rtol, with rtol defaulting
    to max(m, n) times the dtype's epsilon)."""
    if rtol is not None and tol is not None:
        raise ValueError("matrix_rank: give rtol or tol, not both")
    M = _inexact(M)
    if M.ndim < 2:
        return convert(count_nonzero(M) > 0, dtypes.default_int)
    if hermitian and M.shape[-1] != M.shape[-2]:
        raise ValueError(f"matrix_rank: hermitian=True needs square matrices, got shape {M.shape}")
    s = svdvals(M)
    if tol is None:
        if rtol is None:
            rtol = builtins.max(M.shape[-2:]) * dtypes.finfo(M.dtype).eps
        elif np.ndim(rtol) > 0:
            rtol = _per_matrix("matrix_rank", "rtol", rtol, M.shape[:-2])[..., None]
        tol = max(s, axis=-1, keepdims=True, initial=0.0) * rtol  # (0 for an empty matrix)
    elif np.ndim(tol) > 0:
        tol = _per_matrix("matrix_rank", "tol", tol, M.shape[:-2])[..., None]
    return convert(count_nonzero(s > tol, axis=-1), dtypes.default_int)


def _per_matrix(name: str, argument: str, value, batch: tuple[int, ...]):
    """A tolerance given per matrix, as an array whose shape broadcasts to the batch's."""
    value = to_array(value)
    try:
        broadcast_shapes(value.shape, batch)
    except ValueError:
        raise ValueError(
            f"{name}: {argument} of shape {value.shape} does not broadcast against the batch "
            f"shape {batch} of the matrices (one value per matrix)"
        ) from None
    return value


def pinv(a, rtol=None, hermitian: bool = False, *, rcond=None):
    """The Moore-Penrose pseudo-inverse, dropping singular values at or below rtol * max(s)
    (rtol defaults to 10 * max(m, n) * epsilon)."""
    a = _matrices("pinv", a)
    if rcond is not None:
        rtol = rcond
    if rtol is None:
        rtol = 10 * builtins.max(a.shape[-2:]) * dtypes.finfo(a.dtype).eps
    if not dtypes.is_python_scalar(rtol):
        rtol = _per_matrix("pinv", "rtol", rtol, a.shape[:-2])
    return _pinv(a, convert(rtol, dtypes.real_dtype(a.dtype)))


@custom_jvp
def _pinv(a, rtol):
    u, s, vh = svd(a, full_matrices=False)
    cutoff = max(s, axis=-1, keepdims=True, initial=0.0) * rtol[..., None]
    s_inverse = convert(misc.where(s > cutoff, 1 / misc.where(s > cutoff, s, 1), 0), u.dtype)
    return matmul(_adjoint(vh) * s_inverse[..., None, :], _adjoint(u))


@_pinv.defjvp
def _pinv_jvp(primals, tangents):
    """The derivative of the pseudo-inverse P of A on the set of matrices of A's rank:
    dP = -P dA P + P P^H dA^H (I - A P) + (I - P A) dA^H P^H P. The SVD's derivative would
    be undefined at repeated singular values, which this formula does not mind."""
    a, rtol = primals
    a_dot, _ = tangents
    p = _pinv(a, rtol)
    p_t, a_dot_t = _adjoint(p), _adjoint(a_dot)
    rows_eye = misc.eye(a.shape[-2], dtype=a.dtype)
    columns_eye = misc.eye(a.shape[-1], dtype=a.dtype)
    p_dot = (
        -(p @ a_dot @ p)
        + p @ p_t @ a_dot_t @ (rows_eye - a @ p)
        + (columns_eye - p @ a) @ a_dot_t @ p_t @ p
    )
    return p, p_dot


def lstsq(a, b, rcond=None, *, numpy_resid: bool = False):
    """The least-squares solution x of a @ x = b (a 2-d), through the SVD: (x, residuals,
    rank, singular values). Singular values at or below rcond * max(s) count as zero (a
    negative rcond stands for the dtype's epsilon, as in NumPy). Residuals are |b - a @ x|^2
    per column; with `numpy_resid` they are empty, as NumPy returns them, unless a has full
    column rank and more rows."""
    a, b = promote_dtypes_inexact(a, b)
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(
            f"lstsq: needs a 2-d a and a 1-d or 2-d b with as many rows, got shapes {a.shape} "
            f"and {b.shape}"
        )
    m, n = a.shape
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    u, s, vh = svd(a, full_matrices=False)
    eps = dtypes.finfo(a.dtype).eps
    if rcond is None:
        rcond = eps * builtins.max(m, n)
    elif dtypes.is_python_scalar(rcond):
        rcond = eps if rcond < 0 else rcond
    else:
        rcond = misc.where(to_array(rcond) < 0, eps, rcond)
    kept = s > max(s, initial=0.0) * rcond
    rank = convert(count_nonzero(kept), dtypes.default_int)
    s_inverse = convert(misc.where(kept, 1 / misc.where(kept, s, 1), 0), u.dtype)
    x = _adjoint(vh) @ (s_inverse[:, None] * (_adjoint(u) @ b))
    residuals = sum(squared_modulus(b - a @ x), axis=0)
    if numpy_resid and (m <= n or int(rank) < n):
        residuals = residuals[:0]
    if vector:
        x = x[:, 0]
    return x, residuals, rank, s


def cond(x, p=None):
    """The condition number in norm p: s_max / s_min for p in (None, 2), the reverse for -2,
    else norm(x, p) * norm(inv(x), p). Singular matrices give inf."""
    x = _matrices("cond", x)
    if 0 in x.shape[-2:]:
        raise ValueError(f"cond: is not defined for empty matrices, got shape {x.shape}")
    if p in (None, 2, -2):
        s = svdvals(x)
        largest, smallest = s[..., 0], s[..., -1]
        result = largest / smallest if p != -2 else smallest / largest
    else:
        if x.shape[-1] != x.shape[-2]:
            raise ValueError(f"cond: p={p!r} needs square matrices, got shape {x.shape}")
        result = norm(x, p, axis=(-2, -1)) * norm(inv(x), p, axis=(-2, -1))
    # A singular matrix makes 0 / 0 or inf * 0; its condition number is infinite.
    finite_input = ~isnan(x).any(axis=(-2, -1))
    return misc.where(isnan(result) & finite_input, np.inf, result)


# ---------------------------------------------------------------------------------------------
# Products, tensors, and the array-API aliases


def multi_dot(arrays: Sequence, *, precision=None):
    """The product of a chain of matrices, in the order that needs the fewest multiplications.

    A 1-d first (last) array is a row (column) vector, and that axis is dropped.
    """
    arrays = [to_array(x) for x in arrays]
    if len(arrays) < 2:
        raise ValueError(f"multi_dot: needs at least two arrays, got {len(arrays)}")
    first_vector, last_vector = arrays[0].ndim == 1, arrays[-1].ndim == 1
    if first_vector:
        arrays[0] = arrays[0][None, :]
    if last_vector:
        arrays[-1] = arrays[-1][:, None]
    if any(x.ndim != 2 for x in arrays):
        raise ValueError(
            "multi_dot: arrays must be 2-d (the first and last may be 1-d), got shapes "
            + ", ".join(str(x.shape) for x in arrays)
        )
    sizes = [x.shape[0] for x in arrays] + [arrays[-1].shape[1]]
    split = _chain_order(sizes)

    def product(i: int, j: int):
        if i == j:
            return arrays[i]
        k = split[i][j]
        return matmul(product(i, k), product(k + 1, j), precision=precision)

    result = product(0, len(arrays) - 1)
    if first_vector:
        result = result[0]
    if last_vector:
        result = result[..., 0]
    return result


def _chain_order(sizes: list[int]) -> list[list[int]]:
    """The classic dynamic program: split[i][j] is where the product of matrices i..j is best
    cut, matrix k having shape (sizes[k], sizes[k + 1])."""
    n = len(sizes) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + sizes[i] * sizes[k + 1] * sizes[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def tensorinv(a, ind: int = 2):
    """The inverse of a seen as a matrix from its first `ind` axes to the rest."""
    a = to_array(a)
    rows, columns = a.shape[:ind], a.shape[ind:]
    if ind <= 0 or math.prod(rows) != math.prod(columns):
        raise ValueError(
            f"tensorinv: the first {ind} axes of shape {a.shape} must hold as many elements as "
            "the rest"
        )
    inverse = inv(reshape(a, (math.prod(rows), math.prod(columns))))
    return reshape(inverse, columns + rows)


def tensorsolve(a, b, axes: tuple[int, ...] | None = None):
    """x with tensordot(a, x, x.ndim) = b; `axes` of a are moved to the end first."""
    a, b = to_array(a), to_array(b)
    if axes is not None:
        axes = canonicalize_axes(axes, a.ndim, "tensorsolve")
        a = moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
    x_shape = a.shape[b.ndim :]
    if a.shape[: b.ndim] != b.shape or math.prod(x_shape) != b.size:
        raise ValueError(
            f"tensorsolve: a of shape {a.shape} does not fit b of shape {b.shape}: a must begin "
            "with b's shape and its remaining axes hold as many elements"
        )
    x = solve(reshape(a, (b.size, b.size)), reshape(b, (b.size,)))
    return reshape(x, x_shape)


def trace(x, /, *, offset: int = 0, dtype=None):
    """The sum of the diagonal of the last two axes."""
    return misc.trace(x, offset, -2, -1, dtype)


def diagonal(x, /, *, offset: int = 0):
    """The diagonal of the last two axes."""
    return misc.diagonal(x, offset, -2, -1)


# ---------------------------------------------------------------------------------------------
# The array API's forms of numpy's products: operands by position, options by name


def cross(x1, x2, /, *, axis: int = -1):
    """Cross products of the 3-vectors along `axis` (numpy.cross also takes 2-vectors)."""
    x1, x2 = to_array(x1), to_array(x2)
    sizes = [x.shape[canonicalize_axes(axis, x.ndim, "linalg.cross")[0]] for x in (x1, x2)]
    if sizes != [3, 3]:
        raise ValueError(
            f"linalg.cross: both operands must hold 3-vectors along axis {axis}, got sizes "
            f"{sizes[0]} and {sizes[1]} (shapes {x1.shape} and {x2.shape})"
        )
    return linalg_ops.cross(x1, x2, axis=axis)


def matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    return linalg_ops.matmul(
        x1, x2, precision=precision, preferred_element_type=preferred_element_type
    )


def outer(x1, x2, /):
    """Every product of an element of the vector `x1` with one of the vector `x2`."""
    x1, x2 = to_array(x1), to_array(x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(
            f"linalg.outer: operands must be 1-d, got shapes {x1.shape} and {x2.shape} "
            "(numpy.outer flattens them)"
        )
    return linalg_ops.outer(x1, x2)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None, out_sharding=None):
    return linalg_ops.tensordot(
        x1,
        x2,
        axes,
        precision=precision,
        preferred_element_type=preferred_element_type,
        out_sharding=out_sharding,
    )
