"""JAX's `lax.linalg` namespace: the matrix decompositions under their `lax.linalg` names and
signatures, reached as `funcgrad.lax.linalg.<name>`.

Most are the decomposition primitives' own functions (the primitives are here too, `qr_p`).
Two need more than those give: `eig` returns left eigenvectors (computed by default, as in
JAX), and `lu_pivots_to_permutation` replays LU's row swaps.
"""

from __future__ import annotations

import enum

from funcgrad import dtypes
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow import fori_loop
from funcgrad.lax.eig import _inverse, eig_p
from funcgrad.lax.eig import eig as _eig_without_left
from funcgrad.lax.elementwise import abs, conj, convert_element_type, div, eq, mul, select, sqrt
from funcgrad.lax.householder import hessenberg, householder_product, ormqr, tridiagonal
from funcgrad.lax.indexing import dynamic_slice_in_dim
from funcgrad.lax.linalg_decomp import (
    EighImplementation,
    SvdAlgorithm,
    _swap_last,
    check_choice,
    cholesky,
    cholesky_p,
    eigh,
    eigh_p,
    lu,
    lu_p,
    qr,
    qr_p,
    svd,
    svd_p,
    triangular_solve,
    triangular_solve_p,
)
from funcgrad.lax.linalg_structured import cholesky_update, symmetric_product, tridiagonal_solve
from funcgrad.lax.qdwh import qdwh
from funcgrad.lax.reductions import argmax, reduce_sum
from funcgrad.lax.schur import schur, schur_p
from funcgrad.lax.shapes import broadcast_in_dim, broadcasted_iota, full

__all__ = [
    "EigImplementation",
    "EighImplementation",
    "SvdAlgorithm",
    "cholesky",
    "cholesky_p",
    "cholesky_update",
    "eig",
    "eig_p",
    "eigh",
    "eigh_p",
    "hessenberg",
    "householder_product",
    "lu",
    "lu_p",
    "lu_pivots_to_permutation",
    "ormqr",
    "qdwh",
    "qr",
    "qr_p",
    "schur",
    "schur_p",
    "svd",
    "svd_p",
    "symmetric_product",
    "triangular_solve",
    "triangular_solve_p",
    "tridiagonal",
    "tridiagonal_solve",
]


class EigImplementation(enum.Enum):
    """The eigensolvers `eig(implementation=...)` may name; funcgrad uses its one whichever is
    named."""

    LAPACK = "lapack"
    CUSOLVER = "cusolver"
    MAGMA = "magma"


def eig(
    x,
    *,
    compute_left_eigenvectors: bool = True,
    compute_right_eigenvectors: bool = True,
    enable_eigvec_derivs: bool = False,
    implementation=None,
    use_magma=None,
) -> list:
    """Eigenvalues w of general square matrices, then the left eigenvectors vl and the right
    ones vr that are asked for: [w, vl, vr], [w, vl], [w, vr] or [w]. The columns
    vl_j = vl[..., :, j] and vr_j = vr[..., :, j] satisfy vl_j^H x = w_j vl_j^H and
    x vr_j = w_j vr_j, and are scaled as LAPACK's geev scales them: unit norm, the largest
    component real. Only the eigenvalues have derivatives, when asked for without eigenvectors.

    The left eigenvectors come from the inverse of the right ones, so a defective matrix (whose
    right eigenvectors do not span the space) has no finite left ones here.
    """
    check_choice("eig", "implementation", implementation, EigImplementation)
    if enable_eigvec_derivs:
        raise NotImplementedError("eig: the derivatives of eigenvectors are not implemented")
    if not compute_left_eigenvectors:
        return _eig_without_left(x, compute_right_eigenvectors=compute_right_eigenvectors)
    w, right = _eig_without_left(x, compute_right_eigenvectors=True)
    left = _left_eigenvectors(right)
    return [w, left, right] if compute_right_eigenvectors else [w, left]


def _left_eigenvectors(right):
    """V^-1 x = diag(w) V^-1, so the rows of V^-1 are the conjugated left eigenvectors; each is
    scaled to unit norm and turned so that its largest component is real and positive."""
    columns = conj(_swap_last(_inverse(right)))
    if columns.shape[-1] == 0:  # (no column to take the largest component of)
        return columns
    axis = columns.ndim - 2
    over_columns = (*range(axis), axis + 1)
    magnitude = abs(columns)
    norm = sqrt(reduce_sum(mul(magnitude, magnitude), (axis,)))
    rows = broadcasted_iota(dtypes.int32, columns.shape, axis)
    largest_row = broadcast_in_dim(argmax(magnitude, axis, dtypes.int32), rows.shape, over_columns)
    zeros = full(columns.shape, 0, columns.dtype)
    largest = reduce_sum(select(eq(rows, largest_row), columns, zeros), (axis,))
    scale = div(conj(largest), convert_element_type(mul(abs(largest), norm), columns.dtype))
    return mul(columns, broadcast_in_dim(scale, columns.shape, over_columns))


def lu_pivots_to_permutation(pivots, permutation_size: int):
    """The permutation that LU's row swaps make of range(permutation_size): step i swaps
    entries i and pivots[..., i]. `lu` returns it beside the pivots already."""
    pivots = asarray(pivots)
    if pivots.dtype != dtypes.int32:
        raise TypeError(
            f"lu_pivots_to_permutation takes int32 pivots (as lu returns them), got "
            f"{pivots.dtype.name}"
        )
    if pivots.ndim < 1:
        raise ValueError("lu_pivots_to_permutation needs pivots of rank at least 1, got a scalar")
    *batch, steps = pivots.shape
    if permutation_size < steps:
        raise ValueError(
            f"lu_pivots_to_permutation: permutation_size {permutation_size} is smaller than the "
            f"{steps} pivots"
        )
    axis = len(batch)
    shape = (*batch, permutation_size)
    positions = broadcasted_iota(dtypes.int32, shape, axis)
    if steps == 0:
        return positions
    zeros = full(shape, 0, dtypes.int32)

    def entry(permutation, where):
        """The one entry of each row of `permutation` where `where` holds, along the row."""
        picked = reduce_sum(select(where, permutation, zeros), (axis,))
        return broadcast_in_dim(picked, shape, tuple(range(axis)))

    def swap(i, permutation):
        i = convert_element_type(i, dtypes.int32)  # (a Python int's index: int64 under x64)
        pivot = dynamic_slice_in_dim(pivots, i, 1, axis)
        at_i, at_pivot = (
            eq(positions, i),
            eq(positions, broadcast_in_dim(pivot, shape, (*range(axis), axis))),
        )
        swapped = select(at_pivot, entry(permutation, at_i), permutation)
        return select(at_i, entry(permutation, at_pivot), swapped)

    return fori_loop(0, steps, swap, positions)
