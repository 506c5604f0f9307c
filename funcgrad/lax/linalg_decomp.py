"""Matrix decompositions and triangular solves: lu, cholesky, qr, eigh, svd, triangular_solve.

Each works on the last two axes and maps over any leading ones, which the NumPy references do
by themselves, so vmap only moves the batch axis to the front. The derivative rules are the
standard matrix-calculus formulas, written with these primitives and dot_general, so they
compose (grad of grad, vmap of grad). As in JAX, a matrix the factorization fails on (not
positive definite for cholesky, no convergence for svd) gives NaNs rather than an error.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable

import numpy as np

from funcgrad import core, dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import Zero, add_tangents, is_undefined
from funcgrad.lax import shapes
from funcgrad.lax.base import asarray
from funcgrad.lax.elementwise import (
    add,
    bitwise_and,
    conj,
    convert_element_type,
    div,
    eq,
    ge,
    imag,
    is_finite,
    mul,
    neg,
    real,
    select,
    stop_gradient,
    sub,
)
from funcgrad.lax.linalg import batch_matmul
from funcgrad.lax.reductions import reduce_and, reduce_sum

__all__ = ["cholesky", "eigh", "lu", "qr", "svd", "triangular_solve"]

_LAPACK_DTYPES = (dtypes.float32, dtypes.float64)
_COMPLEX_DTYPES = (dtypes.complex64, dtypes.complex128)


# ---------------------------------------------------------------------------------------------
# Shared checks and matrix helpers (in lax, for the derivative rules)


def _check_matrix(
    name: str, x: ShapedArray, square: bool = False, complex_ok: bool = False
) -> None:
    accepted = _LAPACK_DTYPES + (_COMPLEX_DTYPES if complex_ok else ())
    if x.dtype not in accepted:
        raise TypeError(
            f"{name} does not accept dtype {x.dtype.name}; it takes "
            + " or ".join(d.name for d in accepted)
        )
    if x.ndim < 2:
        raise ValueError(f"{name} needs an array of rank at least 2, got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name} needs square matrices in the last two axes, got shape {x.shape}")


def _swap_last(x):
    ndim = core.get_aval(x).ndim
    return shapes.transpose(x, (*range(ndim - 2), ndim - 1, ndim - 2))


def _mT(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _band_mask(shape: tuple[int, ...], k: int, lower: bool):
    """True on and below (lower) or on and above (upper) the k-th diagonal of the last axes."""
    ndim = len(shape)
    rows = shapes.broadcasted_iota(dtypes.int32, shape, ndim - 2)
    columns = shapes.broadcasted_iota(dtypes.int32, shape, ndim - 1)
    offset = sub(columns, rows)
    return ge(k, offset) if lower else ge(offset, k)


def _tril(x, k: int = 0):
    aval = core.get_aval(x)
    return select(_band_mask(aval.shape, k, True), x, shapes.full(aval.shape, 0, aval.dtype))


def _triu(x, k: int = 0):
    aval = core.get_aval(x)
    return select(_band_mask(aval.shape, k, False), x, shapes.full(aval.shape, 0, aval.dtype))


def _eye_like(x, rows: int | None = None, columns: int | None = None):
    """An identity of the last two axes' shape (or rows x columns), broadcast over x's batch."""
    aval = core.get_aval(x)
    rows = aval.shape[-2] if rows is None else rows
    columns = aval.shape[-1] if columns is None else columns
    shape = aval.shape[:-2] + (rows, columns)
    ndim = len(shape)
    is_diagonal = eq(
        shapes.broadcasted_iota(dtypes.int32, shape, ndim - 2),
        shapes.broadcasted_iota(dtypes.int32, shape, ndim - 1),
    )
    return convert_element_type(is_diagonal, aval.dtype)


def _pad_last_two(x, rows: tuple[int, int], columns: tuple[int, int]):
    """x with zero rows and columns added (before, after) the matrices."""
    ndim = core.get_aval(x).ndim
    return shapes.pad(x, 0.0, [(0, 0, 0)] * (ndim - 2) + [(*rows, 0), (*columns, 0)])


def _diagonal(x):
    """The main diagonal of square matrices: x[..., i, i] (a masked sum, linear in x)."""
    return reduce_sum(mul(x, _eye_like(x)), (core.get_aval(x).ndim - 1,))


def _adjoint(x):
    """The conjugate transpose of the last two axes (the transpose of real matrices)."""
    if dtypes.is_complex(core.get_aval(x).dtype):
        return _swap_last(conj(x))
    return _swap_last(x)


def _symmetric_from(x, lower: bool):
    """The symmetric (Hermitian) matrix that the triangle `lower` of x describes: the
    imaginary part of a complex diagonal is not read, as LAPACK's Hermitian routines do not."""
    strict = _tril(x, -1) if lower else _triu(x, 1)
    diagonal = mul(x, _eye_like(x))
    if dtypes.is_complex(core.get_aval(x).dtype):
        diagonal = convert_element_type(real(diagonal), core.get_aval(x).dtype)
    return add(add(strict, _adjoint(strict)), diagonal)


def _zeros_like(x):
    aval = core.get_aval(x)
    return shapes.full(aval.shape, 0, aval.dtype)


def _row(v, rows: int | None = None):
    """A vector over the last axis repeated as the rows of a matrix: out[..., i, j] = v[..., j]."""
    shape = core.get_aval(v).shape
    rows = shape[-1] if rows is None else rows
    ndim = len(shape)
    return shapes.broadcast_in_dim(v, (*shape[:-1], rows, shape[-1]), (*range(ndim - 1), ndim))


def _column(v):
    """out[..., i, j] = v[..., i], for a square out."""
    shape = core.get_aval(v).shape
    ndim = len(shape)
    return shapes.broadcast_in_dim(v, (*shape, shape[-1]), tuple(range(ndim)))


def _batch_to_front(primitive: Primitive) -> None:
    """The batch rule of a one-operand primitive that maps over leading axes."""

    def rule(values, dims, **params):
        (x,), (dim,) = values, dims
        out = primitive.bind(batching.moveaxis(x, dim, 0), **params)
        return out, ([0] * len(out) if primitive.multiple_results else 0)

    primitive.def_batch(rule)


def _per_matrix(factorize: Callable, a: np.ndarray) -> tuple:
    """`factorize` (returning a tuple) on a stack of matrices; the matrices it fails on get
    NaN factors, as XLA reports them, instead of failing the whole stack."""
    try:
        return factorize(a)
    except np.linalg.LinAlgError:
        pass
    matrices = a.reshape((-1,) + a.shape[-2:])
    template = factorize(np.eye(*a.shape[-2:], dtype=a.dtype))
    outs = [np.full((len(matrices),) + t.shape, np.nan, t.dtype) for t in template]
    for i, matrix in enumerate(matrices):
        try:
            for out, result in zip(outs, factorize(matrix)):
                out[i] = result
        except np.linalg.LinAlgError:
            pass
    return tuple(out.reshape(a.shape[:-2] + out.shape[1:]) for out in outs)


# ---------------------------------------------------------------------------------------------
# triangular_solve

triangular_solve_p = Primitive("triangular_solve")


@triangular_solve_p.def_abstract_eval
def _triangular_solve_abstract_eval(
    a: ShapedArray, b: ShapedArray, *, left_side: bool, lower: bool, transpose_a: bool,
    unit_diagonal: bool,
) -> ShapedArray:  # fmt: skip
    _check_matrix("triangular_solve", a, square=True, complex_ok=True)
    if b.dtype != a.dtype:
        raise TypeError(
            f"triangular_solve requires a and b of one dtype, got {a.dtype.name} and {b.dtype.name}"
        )
    side = -2 if left_side else -1
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or b.shape[side] != a.shape[-1]:
        raise ValueError(
            f"triangular_solve: b of shape {b.shape} does not match a of shape {a.shape} with "
            f"left_side={left_side}: they need equal batch dimensions and b's "
            f"{'rows' if left_side else 'columns'} must number a's size {a.shape[-1]}"
        )
    return ShapedArray(b.shape, b.dtype)


def _substitute(a: np.ndarray, b: np.ndarray, lower: bool, unit_diagonal: bool) -> np.ndarray:
    """Solve a @ x = b for triangular a, row by row (forward or back substitution)."""
    x = np.zeros(b.shape, b.dtype)
    m = a.shape[-1]
    for i in range(m) if lower else reversed(range(m)):
        known = slice(0, i) if lower else slice(i + 1, m)
        row = b[..., i, :] - np.matmul(a[..., i : i + 1, known], x[..., known, :])[..., 0, :]
        x[..., i, :] = row if unit_diagonal else row / a[..., i, i, None]
    return x


@triangular_solve_p.def_impl
def _triangular_solve_impl(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    # Bring every case to "solve t @ x = b for triangular t": transposing a turns a lower
    # triangle into an upper one, and x @ t = b is t.T @ x.T = b.T.
    t = np.tril(a) if lower else np.triu(a)
    if transpose_a:
        t, lower = _mT(t), not lower
    if not left_side:
        t, b, lower = _mT(t), _mT(b), not lower
    x = _substitute(t, b, lower, unit_diagonal)
    return x if left_side else np.ascontiguousarray(_mT(x))


def _triangle_tangent(a_dot, *, lower, unit_diagonal):
    """The part of a's tangent the solve reads: its triangle, without the unit diagonal."""
    if lower:
        return _tril(a_dot, -1 if unit_diagonal else 0)
    return _triu(a_dot, 1 if unit_diagonal else 0)


@triangular_solve_p.def_jvp
def _triangular_solve_jvp(primals, tangents, **params):
    a, b = primals
    a_dot, b_dot = tangents
    x = triangular_solve_p.bind(a, b, **params)
    x_dot = Zero.like(x)
    if type(b_dot) is not Zero:
        x_dot = triangular_solve_p.bind(a, b_dot, **params)
    if type(a_dot) is not Zero:
        # d(op(a)) x = -op(a) dx on the left side; x d(op(a)) = -dx op(a) on the right.
        op_a_dot = _triangle_tangent(
            a_dot, lower=params["lower"], unit_diagonal=params["unit_diagonal"]
        )
        if params["transpose_a"]:
            op_a_dot = _swap_last(op_a_dot)
        product = batch_matmul(op_a_dot, x) if params["left_side"] else batch_matmul(x, op_a_dot)
        x_dot = add_tangents(x_dot, neg(triangular_solve_p.bind(a, product, **params)))
    return x, x_dot


@triangular_solve_p.def_transpose
def _triangular_solve_transpose(ct, a, b, *, transpose_a, **params):
    """Linear in b: x = op(a)^-1 b (or b op(a)^-1) transposes to op(a)^-T ct (ct op(a)^-T)."""
    if is_undefined(a):
        raise NotImplementedError("triangular_solve is linear in b only, not in a")
    if type(ct) is Zero:
        return [None, Zero(b.aval)]
    return [None, triangular_solve_p.bind(a, ct, transpose_a=not transpose_a, **params)]


@triangular_solve_p.def_batch
def _triangular_solve_batch(values, dims, **params):
    size = batching.batch_size(values, dims)
    a, b = (batching.bdim_at_front(x, d, size) for x, d in zip(values, dims))
    return triangular_solve_p.bind(a, b, **params), 0


def triangular_solve(
    a,
    b,
    *,
    left_side: bool = False,
    lower: bool = False,
    transpose_a: bool = False,
    conjugate_a: bool = False,
    unit_diagonal: bool = False,
):
    """Solve op(a) @ x = b (left_side) or x @ op(a) = b for x, where op(a) is a, transposed
    with `transpose_a` and conjugated with `conjugate_a` (which changes nothing for real
    matrices).

    Only the `lower` (or upper) triangle of `a` is read, and its diagonal is taken as ones
    with `unit_diagonal`.
    """
    a = asarray(a)
    if conjugate_a and dtypes.is_complex(a.dtype):
        a = conj(a)
    return triangular_solve_p.bind(
        a,
        asarray(b),
        left_side=bool(left_side),
        lower=bool(lower),
        transpose_a=bool(transpose_a),
        unit_diagonal=bool(unit_diagonal),
    )


# ---------------------------------------------------------------------------------------------
# lu

lu_p = Primitive("lu", multiple_results=True)


@lu_p.def_abstract_eval
def _lu_abstract_eval(a: ShapedArray) -> list[ShapedArray]:
    _check_matrix("lu", a, complex_ok=True)
    *batch, m, n = a.shape
    return [
        ShapedArray(a.shape, a.dtype),
        ShapedArray((*batch, min(m, n)), dtypes.int32),
        ShapedArray((*batch, m), dtypes.int32),
    ]


@lu_p.def_impl
def _lu_impl(a):
    """Gaussian elimination with partial pivoting (LAPACK's getrf), over the whole stack.

    A column whose pivot is zero is left as it is, as getrf leaves it.
    """
    *batch, m, n = a.shape
    k = min(m, n)
    lu = np.array(a, copy=True).reshape(math.prod(batch), m, n)
    stack = np.arange(len(lu))
    pivots = np.zeros((len(lu), k), np.int32)
    permutation = np.tile(np.arange(m, dtype=np.int32), (len(lu), 1))
    for j in range(k):
        # The pivot is the largest |re| + |im| (|x| for real x), as LAPACK's getrf picks it.
        column = lu[:, j:, j]
        p = j + np.argmax(np.abs(column.real) + np.abs(column.imag), axis=1)
        pivots[:, j] = p
        lu[stack, j], lu[stack, p] = lu[stack, p], lu[stack, j].copy()
        permutation[stack, j], permutation[stack, p] = permutation[stack, p], permutation[stack, j]
        pivot = lu[:, j, j]
        nonzero = pivot != 0
        below = lu[:, j + 1 :, j]
        below = np.where(nonzero[:, None], below / np.where(nonzero, pivot, 1)[:, None], below)
        lu[:, j + 1 :, j] = below
        lu[:, j + 1 :, j + 1 :] -= below[:, :, None] * lu[:, j, None, j + 1 :]
    return [
        lu.reshape(a.shape),
        pivots.reshape((*batch, k)),
        permutation.reshape((*batch, m)),
    ]


@lu_p.def_weak_type
def _lu_weak_type(weak_flags, **params) -> list[bool]:
    return [weak_flags[0], False, False]


@lu_p.def_jvp
def _lu_jvp(primals, tangents):
    """P a = L U gives L^-1 P da U^-1 = L^-1 dL + dU U^-1: strictly lower plus upper parts.

    L is padded to m x m and U to n x n with identity blocks, so both are square.
    """
    (a,), (a_dot,) = primals, tangents
    lu, pivots, permutation = lu_p.bind(a)
    *batch, m, n = a.shape
    k = min(m, n)
    rows = shapes.broadcasted_iota(dtypes.int32, (*batch, m, m), a.ndim - 1)
    permuting = convert_element_type(eq(_column(permutation), rows), a.dtype)
    l_part = _tril(shapes.slice_in_dim(lu, 0, k, axis=a.ndim - 1), -1)
    l_square = add(_pad_last_two(l_part, (0, 0), (0, m - k)), _eye_like(a, m, m))
    u_part = _triu(shapes.slice_in_dim(lu, 0, k, axis=a.ndim - 2))
    u_square = _pad_last_two(u_part, (0, n - k), (0, 0))
    if n > k:
        u_square = add(u_square, _pad_last_two(_eye_like(a, n - k, n - k), (k, 0), (k, 0)))
    la = triangular_solve(
        l_square, batch_matmul(permuting, a_dot), left_side=True, lower=True, unit_diagonal=True
    )
    lau = triangular_solve(u_square, la, lower=False)
    lu_dot = add(batch_matmul(l_square, _tril(lau, -1)), batch_matmul(_triu(lau), u_square))
    return [lu, pivots, permutation], [lu_dot, Zero.like(pivots), Zero.like(permutation)]


lu_p.not_applicable["transpose"] = "not linear"
_batch_to_front(lu_p)


def lu(x):
    """LU decomposition with partial pivoting: (lu, pivots, permutation) with
    a[permutation] = L @ U, L unit lower triangular (below lu's diagonal) and U upper (on and
    above it); pivots[i] is the row swapped with row i at step i."""
    out = lu_p.bind(asarray(x))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# cholesky

cholesky_p = Primitive("cholesky")


@cholesky_p.def_abstract_eval
def _cholesky_abstract_eval(a: ShapedArray) -> ShapedArray:
    _check_matrix("cholesky", a, square=True, complex_ok=True)
    return ShapedArray(a.shape, a.dtype)


@cholesky_p.def_impl
def _cholesky_impl(a):
    # LAPACK's potrf, as NumPy calls it, reads the lower triangle only. A matrix that is not
    # positive definite gets a NaN lower triangle; the upper stays zero, as in every factor.
    (factor,) = _per_matrix(lambda m: (np.linalg.cholesky(m),), np.asarray(a))
    return np.tril(factor)


@cholesky_p.def_jvp
def _cholesky_jvp(primals, tangents):
    """a = L L^H gives dL = L phi(L^-1 da L^-H), phi taking the lower triangle with its
    diagonal halved; da is the symmetric (Hermitian) tangent that da's lower triangle
    describes."""
    (a,), (a_dot,) = primals, tangents
    factor = cholesky_p.bind(a)
    sigma_dot = _symmetric_from(a_dot, lower=True)
    conjugate = conj(factor) if dtypes.is_complex(a.dtype) else factor
    right = triangular_solve(conjugate, sigma_dot, left_side=False, lower=True, transpose_a=True)
    inner = triangular_solve(factor, right, left_side=True, lower=True)
    phi = add(_tril(inner, -1), mul(mul(inner, _eye_like(inner)), 0.5))
    return factor, batch_matmul(factor, phi)


cholesky_p.not_applicable["transpose"] = "not linear"
_batch_to_front(cholesky_p)


def cholesky(x, *, symmetrize_input: bool = True):
    """The lower Cholesky factor L of symmetric positive definite matrices, x = L @ L.T.

    With `symmetrize_input` the factor is that of (x + x.T) / 2, whose derivative treats x as
    symmetric; otherwise only the lower triangle of x is read.
    """
    x = asarray(x)
    if symmetrize_input:
        x = _symmetrized(x)
    return cholesky_p.bind(x)


def _symmetrized(x):
    """(x + x^H) / 2; anything but a stack of square floating or complex matrices is left for
    the primitive's shape and dtype checks to report (an integer x met the 0.5 first)."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not dtypes.is_inexact(x.dtype):
        return x
    return mul(add(x, _adjoint(x)), 0.5)


# ---------------------------------------------------------------------------------------------
# qr

qr_p = Primitive("qr", multiple_results=True)


@qr_p.def_abstract_eval
def _qr_abstract_eval(a: ShapedArray, *, full_matrices: bool) -> list[ShapedArray]:
    _check_matrix("qr", a, complex_ok=True)
    *batch, m, n = a.shape
    k = m if full_matrices else min(m, n)
    return [ShapedArray((*batch, m, k), a.dtype), ShapedArray((*batch, k, n), a.dtype)]


@qr_p.def_impl
def _qr_impl(a, *, full_matrices):
    q, r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    return [q, r]


@qr_p.def_jvp
def _qr_jvp(primals, tangents, *, full_matrices):
    """The thin factorization's tangents (`_thin_qr_tangents`) carry the rest. A wide a = [a1
    a2] has a1 = Q R1, a square factorization, and R2 = Q^H a2. The complete Q of a tall a adds
    columns that only Householder's construction fixes: `_complement_tangent`."""
    (a,), (a_dot,) = primals, tangents
    *_, m, n = a.shape
    last = a.ndim - 1
    q, r = qr_p.bind(a, full_matrices=full_matrices)
    if m < n:
        r_square = shapes.slice_in_dim(r, 0, m, axis=last)
        a_dot_square = shapes.slice_in_dim(a_dot, 0, m, axis=last)
        q_dot, r_square_dot = _thin_qr_tangents(q, r_square, a_dot_square)
        a_rest, a_dot_rest = (shapes.slice_in_dim(x, m, n, axis=last) for x in (a, a_dot))
        r_rest_dot = add(
            batch_matmul(_adjoint(q_dot), a_rest), batch_matmul(_adjoint(q), a_dot_rest)
        )
        return [q, r], [q_dot, shapes.concatenate([r_square_dot, r_rest_dot], last)]
    if not full_matrices or m == n:
        return [q, r], list(_thin_qr_tangents(q, r, a_dot))
    q_thin = shapes.slice_in_dim(q, 0, n, axis=last)
    r_square = shapes.slice_in_dim(r, 0, n, axis=last - 1)
    q_thin_dot, r_dot = _thin_qr_tangents(q_thin, r_square, a_dot)
    q_rest_dot = _complement_tangent(q, q_thin_dot, n)
    q_dot = shapes.concatenate([q_thin_dot, q_rest_dot], last)
    return [q, r], [q_dot, _pad_last_two(r_dot, (0, m - n), (0, 0))]


def _thin_qr_tangents(q, r, a_dot):
    """For m >= n: dQ = Q (dO - C) + da R^-1 and dR = (C - dO) R, where C = Q^H da R^-1 and
    dO is the skew-Hermitian matrix that C's strictly lower triangle makes, plus (complex
    matrices) the imaginary part of C's diagonal, which keeps R's diagonal real."""
    a_dot_r_inv = triangular_solve(r, a_dot, left_side=False, lower=False)
    c = batch_matmul(_adjoint(q), a_dot_r_inv)
    lower = _tril(c, -1)
    skew = sub(lower, _adjoint(lower))
    if dtypes.is_complex(core.get_aval(q).dtype):
        imaginary = sub(c, convert_element_type(real(c), c.dtype))
        skew = add(skew, mul(_eye_like(skew), imaginary))
    q_dot = add(batch_matmul(q, sub(skew, c)), a_dot_r_inv)
    r_dot = batch_matmul(sub(c, skew), r)
    return q_dot, r_dot


def _complement_tangent(q, q_thin_dot, n: int):
    """The tangent of the last m - n columns of a complete Householder Q (m x m) from that of
    its first n, Q1 = [Q11; Q21] (Q11 n x n): with Z = Q21 (Q11 - I)^-1, the columns Q2 move
    by dQ1 Z^H - (Q1 + Q2 Z) (dQ21 - Z dQ11)^H (derived in arXiv:2409.13374)."""
    ndim = core.get_aval(q).ndim
    m = core.get_aval(q).shape[-1]
    q_thin = shapes.slice_in_dim(q, 0, n, axis=ndim - 1)
    q_rest = shapes.slice_in_dim(q, n, m, axis=ndim - 1)
    top, bottom = (shapes.slice_in_dim(q_thin, *rows, axis=ndim - 2) for rows in ((0, n), (n, m)))
    top_dot, bottom_dot = (
        shapes.slice_in_dim(q_thin_dot, *rows, axis=ndim - 2) for rows in ((0, n), (n, m))
    )
    z = _solve_on_the_right(sub(top, _eye_like(top)), bottom)
    moved = add(q_thin, batch_matmul(q_rest, z))
    return sub(
        batch_matmul(q_thin_dot, _adjoint(z)),
        batch_matmul(moved, _adjoint(sub(bottom_dot, batch_matmul(z, top_dot)))),
    )


def _solve_on_the_right(a, b):
    """b a^-1 for square a, through a's LU factors: P a = L U gives b a^-1 = b U^-1 L^-1 P."""
    lu, _, permutation = lu_p.bind(a)
    aval = core.get_aval(a)
    columns = shapes.broadcasted_iota(dtypes.int32, aval.shape, aval.ndim - 1)
    permuting = convert_element_type(eq(_column(permutation), columns), aval.dtype)
    x = triangular_solve(lu, b, left_side=False, lower=False)
    x = triangular_solve(lu, x, left_side=False, lower=True, unit_diagonal=True)
    return batch_matmul(x, permuting)


qr_p.not_applicable["transpose"] = "not linear"
_batch_to_front(qr_p)


def qr(x, *, pivoting: bool = False, full_matrices: bool = True, use_magma=None):
    """QR decomposition (q, r) of the last two axes: q orthonormal columns, r upper triangular.

    `full_matrices` gives q of shape (m, m); otherwise (m, min(m, n)). With `pivoting`,
    (q, r, p): x[..., p] = q r with p (int32) the columns in the order that makes |diag r|
    non-increasing (rank-revealing), found as LAPACK's geqp3 finds it; derivatives hold p
    fixed.
    """
    x = asarray(x)
    if not pivoting:
        q, r = qr_p.bind(x, full_matrices=bool(full_matrices))
        return q, r
    from funcgrad.lax.qr_pivoting import column_pivots
    from funcgrad.numpy import take_along_axis

    _check_matrix("qr", core.get_aval(x), square=False, complex_ok=True)
    order = column_pivots(stop_gradient(x))
    columns = shapes.broadcast_in_dim(order, x.shape, (*range(x.ndim - 2), x.ndim - 1))
    q, r = qr_p.bind(take_along_axis(x, columns, axis=-1), full_matrices=bool(full_matrices))
    return q, r, order


# ---------------------------------------------------------------------------------------------
# eigh

eigh_p = Primitive("eigh", multiple_results=True)


@eigh_p.def_abstract_eval
def _eigh_abstract_eval(a: ShapedArray, *, lower: bool) -> list[ShapedArray]:
    _check_matrix("eigh", a, square=True, complex_ok=True)
    return [ShapedArray(a.shape, a.dtype), ShapedArray(a.shape[:-1], dtypes.real_dtype(a.dtype))]


@eigh_p.def_impl
def _eigh_impl(a, *, lower):
    uplo = "L" if lower else "U"
    w, v = _per_matrix(lambda m: tuple(np.linalg.eigh(m, UPLO=uplo)), np.asarray(a))
    return [v, w]


@eigh_p.def_jvp
def _eigh_jvp(primals, tangents, *, lower):
    """With S = V^H da V: dw = Re diag(S) and dV = V (F * S), F[i, j] = 1 / (w[j] - w[i]) off
    the diagonal and 0 on it (infinite for repeated eigenvalues, whose eigenvectors are not
    unique; a complex eigenvector's phase is a convention, so its tangent is one choice)."""
    (a,), (a_dot,) = primals, tangents
    v, w = eigh_p.bind(a, lower=lower)
    s = batch_matmul(_adjoint(v), batch_matmul(_symmetric_from(a_dot, lower), v))
    eye = _eye_like(a)
    values = convert_element_type(w, a.dtype)
    f = sub(div(1.0, add(eye, sub(_row(values), _column(values)))), eye)
    diagonal = _diagonal(s)
    if dtypes.is_complex(a.dtype):
        diagonal = real(diagonal)
    return [v, w], [batch_matmul(v, mul(f, s)), diagonal]


eigh_p.not_applicable["transpose"] = "not linear"
_batch_to_front(eigh_p)


class EighImplementation(enum.Enum):
    """The eigensolvers `eigh(implementation=...)` may name. funcgrad has one per platform and
    uses it whichever is named: the choice is a hint about speed, never about the result."""

    QR = "qr"
    JACOBI = "jacobi"
    QDWH = "qdwh"


class SvdAlgorithm(enum.Enum):
    """The SVD algorithms `svd(algorithm=...)` may name; as with `EighImplementation`, one
    routine serves them all."""

    DEFAULT = "default"
    QR = "QR"
    JACOBI = "Jacobi"
    POLAR = "polar"
    DIVIDE_AND_CONQUER = "divide_and_conquer"


def subset_bounds(function: str, subset_by_index, shape: tuple[int, ...]) -> tuple[int, int]:
    """(lo, hi) of `subset_by_index` for matrices of `shape`, refused unless 0 <= lo <= hi <=
    min(m, n): a slice would otherwise clip it, or fail naming neither function nor argument."""
    lo, hi = (int(i) for i in subset_by_index)
    count = min(shape[-2:])
    if not 0 <= lo <= hi <= count:
        raise ValueError(
            f"{function}: subset_by_index={tuple(subset_by_index)} must satisfy 0 <= lo <= hi "
            f"<= {count} for matrices of shape {tuple(shape)}"
        )
    return lo, hi


def check_choice(function: str, parameter: str, value, choices: type[enum.Enum]) -> None:
    """Refuses a `value` that is neither None, nor one of `choices`, nor one's value."""
    if value is None or value in choices.__members__.values():
        return
    if value not in {member.value for member in choices}:
        names = ", ".join(f"{choices.__name__}.{name}" for name in choices.__members__)
        raise ValueError(f"{function}: {parameter} must be None or one of {names}, got {value!r}")


def eigh(
    x,
    *,
    lower: bool = True,
    symmetrize_input: bool = True,
    sort_eigenvalues: bool = True,
    subset_by_index: tuple[int, int] | None = None,
    implementation=None,
):
    """Eigenvectors (columns of v) and ascending eigenvalues w of symmetric matrices: (v, w).

    Only the `lower` (or upper) triangle is read unless `symmetrize_input`, which decomposes
    (x + x.T) / 2. Eigenvalues are always sorted, which `sort_eigenvalues=False` allows.
    `subset_by_index=(lo, hi)` keeps eigenpairs lo..hi-1.
    """
    check_choice("eigh", "implementation", implementation, EighImplementation)
    x = asarray(x)
    if symmetrize_input:
        x = _symmetrized(x)
    v, w = eigh_p.bind(x, lower=bool(lower))
    if subset_by_index is not None:
        lo, hi = subset_bounds("eigh", subset_by_index, x.shape)
        v = shapes.slice_in_dim(v, lo, hi, axis=v.ndim - 1)
        w = shapes.slice_in_dim(w, lo, hi, axis=w.ndim - 1)
    return v, w


# ---------------------------------------------------------------------------------------------
# svd

svd_p = Primitive("svd", multiple_results=True)


@svd_p.def_abstract_eval
def _svd_abstract_eval(a: ShapedArray, *, full_matrices: bool, compute_uv: bool):
    _check_matrix("svd", a, complex_ok=True)
    *batch, m, n = a.shape
    k = min(m, n)
    s = ShapedArray((*batch, k), dtypes.real_dtype(a.dtype))
    if not compute_uv:
        return [s]
    u_columns, vh_rows = (m, n) if full_matrices else (k, k)
    return [
        ShapedArray((*batch, m, u_columns), a.dtype),
        s,
        ShapedArray((*batch, vh_rows, n), a.dtype),
    ]


@svd_p.def_impl
def _svd_impl(a, *, full_matrices, compute_uv):
    a = np.asarray(a)
    if not compute_uv:
        (s,) = _per_matrix(lambda m: (np.linalg.svd(m, compute_uv=False),), a)
        return [s]
    return list(_per_matrix(lambda m: tuple(np.linalg.svd(m, full_matrices=full_matrices)), a))


@svd_p.def_jvp
def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    """With dS = U^T da V: ds = diag(dS); dU = U (F * (dS S + S dS^T)) and
    dV = V (F * (S dS + dS^T S)), F[i, j] = 1 / (s[j]^2 - s[i]^2) off the diagonal, plus the
    components outside the span of U (for m > n) or V (for n > m)."""
    (a,), (a_dot,) = primals, tangents
    *_, m, n = a.shape
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError(
            f"svd: the derivative of u and vh with full_matrices=True is implemented for square "
            f"matrices only, got shape {a.shape}; use full_matrices=False"
        )
    u, s, vh = svd_p.bind(a, full_matrices=False, compute_uv=True)
    v = _adjoint(vh)
    ds_matrix = batch_matmul(_adjoint(u), batch_matmul(a_dot, v))
    is_complex = dtypes.is_complex(a.dtype)
    s_dot = real(_diagonal(ds_matrix)) if is_complex else _diagonal(ds_matrix)
    if not compute_uv:
        return [s], [s_dot]
    values = convert_element_type(s, a.dtype)
    s_row, s_column = _row(values), _column(values)
    eye = _eye_like(ds_matrix)
    f = sub(div(1.0, add(mul(add(s_row, s_column), sub(s_row, s_column)), eye)), eye)
    ds_s = mul(ds_matrix, s_row)
    s_ds = mul(s_column, ds_matrix)
    u_inner = mul(f, add(ds_s, _adjoint(ds_s)))
    if is_complex:
        # The phases of a complex singular pair are free together: the part of dS's
        # diagonal that is imaginary turns u's phase, divided by s (0 where s is 0).
        safe = select(eq(values, _zeros_like(values)), add(values, 1.0), values)
        inverse = select(eq(values, _zeros_like(values)), _zeros_like(values), div(1.0, safe))
        skew = mul(sub(ds_matrix, _adjoint(ds_matrix)), 0.5)
        u_inner = add(u_inner, mul(mul(skew, eye), _row(inverse)))
    u_dot = batch_matmul(u, u_inner)
    v_dot = batch_matmul(v, mul(f, add(s_ds, _adjoint(s_ds))))
    if m > n:
        a_dot_v = batch_matmul(a_dot, v)
        u_dot = add(
            u_dot,
            div(sub(a_dot_v, batch_matmul(u, batch_matmul(_adjoint(u), a_dot_v))), _row(values, m)),
        )
    if n > m:
        a_dot_h_u = batch_matmul(_adjoint(a_dot), u)
        v_dot = add(
            v_dot,
            div(sub(a_dot_h_u, batch_matmul(v, batch_matmul(vh, a_dot_h_u))), _row(values, n)),
        )
    return [u, s, vh], [u_dot, s_dot, _adjoint(v_dot)]


svd_p.not_applicable["transpose"] = "not linear"
_batch_to_front(svd_p)


def _finite_matrices(x):
    """Whether every element of each matrix of `x` is finite (of x's batch shape)."""
    if dtypes.is_complex(x.dtype):
        finite = bitwise_and(is_finite(real(x)), is_finite(imag(x)))
    else:
        finite = is_finite(x)
    return reduce_and(finite, (x.ndim - 2, x.ndim - 1))


def _where_matrices(keep, x, otherwise):
    """`x` (a stack of matrices or vectors) where `keep` (of its batch shape) holds, else
    `otherwise`."""
    mask = shapes.broadcast_in_dim(keep, x.shape, tuple(range(keep.ndim)))
    return select(mask, x, shapes.full_like(x, otherwise))


def svd(
    x,
    *,
    full_matrices: bool = True,
    compute_uv: bool = True,
    subset_by_index: tuple[int, int] | None = None,
    algorithm=None,
):
    """Singular values s (descending) of the last two axes, with (u, s, vh) if `compute_uv`:
    x = u @ diag(s) @ vh. `subset_by_index=(lo, hi)` keeps singular triplets lo..hi-1."""
    check_choice("svd", "algorithm", algorithm, SvdAlgorithm)
    x = asarray(x)
    _check_matrix("svd", core.get_aval(x), complex_ok=True)
    # LAPACK's gesdd (NumPy's OpenBLAS) never returns for some matrices holding an infinity:
    # a matrix with a non-finite element is decomposed as zeros, and its factors are NaN.
    finite = _finite_matrices(x)
    out = svd_p.bind(
        _where_matrices(finite, x, 0),
        full_matrices=bool(full_matrices),
        compute_uv=bool(compute_uv),
    )
    out = [_where_matrices(finite, factor, np.nan) for factor in out]
    if subset_by_index is not None:
        lo, hi = subset_bounds("svd", subset_by_index, x.shape)
        if not compute_uv:
            (s,) = out
            return shapes.slice_in_dim(s, lo, hi, axis=s.ndim - 1)
        u, s, vh = out
        return (
            shapes.slice_in_dim(u, lo, hi, axis=u.ndim - 1),
            shapes.slice_in_dim(s, lo, hi, axis=s.ndim - 1),
            shapes.slice_in_dim(vh, lo, hi, axis=vh.ndim - 2),
        )
    if not compute_uv:
        return out[0]
    u, s, vh = out
    return u, s, vh
