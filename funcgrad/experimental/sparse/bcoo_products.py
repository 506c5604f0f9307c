"""Products with BCOO arrays: `lax.dot_general` with one sparse operand or two, the matmul
operator built on it, and elementwise products with a dense or a sparse array.

None forms the dense form of a sparse operand.
"""

from __future__ import annotations

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse import _dot, _layout, _relayout, _spdot
from funcgrad.experimental.sparse.bcoo import BCOO, _as_bcoo, _broadcasts_to

__all__ = [
    "bcoo_dot_general",
    "bcoo_multiply_dense",
    "bcoo_multiply_sparse",
    "bcoo_spdot_general",
]


def bcoo_dot_general(
    lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None
) -> Array | BCOO:
    """`lax.dot_general` with a BCOO array as one operand or both. With one, the result is
    dense; with both, it is a BCOO array (see `bcoo_spdot_general`). The product never forms
    the sparse operands' dense forms."""
    dimension_numbers = _dot.canonical_dimension_numbers(dimension_numbers)
    if isinstance(lhs, BCOO) and isinstance(rhs, BCOO):
        return bcoo_spdot_general(
            lhs,
            rhs,
            dimension_numbers=dimension_numbers,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    if not isinstance(lhs, BCOO) and not isinstance(rhs, BCOO):
        return lax.dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type)
    if isinstance(lhs, BCOO):
        return _sparse_dot_dense(lhs, rhs, dimension_numbers, precision, preferred_element_type)
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    swapped = ((rhs_contract, lhs_contract), (rhs_batch, lhs_batch))
    out = _sparse_dot_dense(rhs, lhs, swapped, precision, preferred_element_type)
    # (batch, rhs free, lhs free) -> (batch, lhs free, rhs free)
    n_batch = len(lhs_batch)
    n_rhs_free = rhs.ndim - len(rhs_contract) - n_batch
    permutation = (
        *range(n_batch),
        *range(n_batch + n_rhs_free, out.ndim),
        *range(n_batch, n_batch + n_rhs_free),
    )
    return fnp.transpose(out, permutation)


def bcoo_spdot_general(
    lhs: BCOO, rhs: BCOO, *, dimension_numbers, precision=None, preferred_element_type=None
) -> BCOO:
    """`lax.dot_general` of two BCOO arrays, as a BCOO array.

    The operands are first relaid out where the pairing needs it, always by turning batch or
    dense dimensions into sparse ones (which stores no zeros): a contracted dimension paired
    with one of another kind, or a contracted batch dimension, becomes sparse; so do rhs's
    unpaired batch dimensions when lhs has free sparse or dense ones, and lhs's free dense
    dimensions when rhs has free batch or sparse ones. Each batch pair must then pair batch
    with batch or dense with dense dimensions. The result's batch dimensions are the paired
    ones, then each operand's unpaired ones; its dense dimensions each operand's free dense
    ones. It stores, per batch, the product of the operands' nse (an operand whose sparse
    dimensions are all contracted counts 1), at most one per position."""
    lhs, rhs = _as_bcoo(lhs, "bcoo_spdot_general"), _as_bcoo(rhs, "bcoo_spdot_general")
    dimension_numbers = _dot.canonical_dimension_numbers(dimension_numbers)
    out_shape = _dot.output_shape(lhs.shape, rhs.shape, dimension_numbers)
    left, right = _spdot.operand_layouts(lhs, rhs, dimension_numbers)
    mismatched = _spdot.mismatched_batch_pairs(left, right, dimension_numbers)
    if mismatched:
        raise NotImplementedError(
            f"bcoo_spdot_general of {lhs!r} and {rhs!r} with dimension_numbers "
            f"{dimension_numbers}: batch dimensions must pair batch with batch dimensions or "
            f"dense with dense ones, got {'; '.join(mismatched)} (in the layouts the "
            "contraction needs). A sparse dimension would have to become a batch one, storing "
            "a copy of every element per position: change the layouts with bcoo_update_layout "
            "if that is meant"
        )
    lhs, rhs = _relaid(lhs, *left.state()), _relaid(rhs, *right.state())
    dtype = np.dtype(preferred_element_type or fnp.result_type(lhs.data, rhs.data))
    data, indices = _spdot.spdot_general(lhs, rhs, dimension_numbers, out_shape, dtype, precision)
    return BCOO((data, indices), shape=out_shape)


def bcoo_multiply_sparse(lhs: BCOO, rhs: BCOO) -> BCOO:
    """The elementwise product of two BCOO arrays of one shape, storing the product of their
    nse per batch (in the layout with the fewer batch and dense dimensions of the two)."""
    lhs, rhs = _as_bcoo(lhs, "bcoo_multiply_sparse"), _as_bcoo(rhs, "bcoo_multiply_sparse")
    if lhs.shape != rhs.shape:
        raise ValueError(
            f"bcoo_multiply_sparse: operands must have one shape, got {lhs.shape} and {rhs.shape}"
        )
    n_batch, n_dense = min(lhs.n_batch, rhs.n_batch), min(lhs.n_dense, rhs.n_dense)
    lhs, rhs = (_relaid(mat, n_batch, n_dense) for mat in (lhs, rhs))
    dtype = fnp.result_type(lhs.data, rhs.data)
    data, indices = _spdot.multiply_sparse(lhs, rhs, dtype)
    return BCOO((data, indices), shape=lhs.shape)


def _relaid(mat: BCOO, n_batch: int, n_dense: int) -> BCOO:
    """`mat` with at most as many batch and dense dimensions as it has (never inefficient)."""
    if (n_batch, n_dense) == (mat.n_batch, mat.n_dense):
        return mat
    data, indices = _relayout.update_layout(mat.data, mat.indices, mat.shape, n_batch, n_dense)
    return BCOO((data, indices), shape=mat.shape)


def _sparse_dot_dense(sparse, dense, dimension_numbers, precision, preferred_element_type):
    dense = fnp.asarray(dense)
    data = sparse.data
    if preferred_element_type is None:
        dtype = fnp.result_type(data, dense)
        data, dense = data.astype(dtype), dense.astype(dtype)
    return _dot.sparse_dot_dense(
        data,
        sparse.indices,
        sparse.shape,
        dense,
        dimension_numbers,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def matmul(sparse: BCOO, dense, sparse_first: bool) -> Array | BCOO:
    """`sparse @ dense` or `dense @ sparse` with NumPy's matmul rules for the shapes: vectors
    are promoted and removed, and stacks of matrices pair up (equal stack shapes, or one
    operand a single matrix)."""
    a_shape, b_shape = (sparse.shape, dense.shape) if sparse_first else (dense.shape, sparse.shape)
    a_rank, b_rank = len(a_shape), len(b_shape)
    if a_rank == 0 or b_rank == 0:
        raise ValueError("matmul: operands must not be scalars; use * to scale a BCOO array")
    a_contract = a_rank - 1
    b_contract = 0 if b_rank == 1 else b_rank - 2
    a_stack, b_stack = a_shape[:-2], b_shape[:-2]
    batch: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    move_rows = False  # the result's rows must move behind b's stack dimensions
    if a_rank > 2 and b_rank > 2:
        if a_stack != b_stack:
            raise ValueError(
                f"matmul: the stacks of matrices of shapes {a_shape} and {b_shape} must match "
                "when both operands are stacks and one is sparse"
            )
        batch = (tuple(range(len(a_stack))), tuple(range(len(b_stack))))
    elif a_rank == 2 and b_rank > 2:
        move_rows = True
    if a_shape[a_contract] != b_shape[b_contract]:
        raise ValueError(
            f"matmul: shapes {a_shape} and {b_shape} do not align: {a_shape[a_contract]} "
            f"(dim {a_contract} of the first) != {b_shape[b_contract]} (dim {b_contract} of "
            "the second)"
        )
    lhs, rhs = (sparse, dense) if sparse_first else (dense, sparse)
    out = bcoo_dot_general(lhs, rhs, dimension_numbers=(((a_contract,), (b_contract,)), batch))
    if move_rows:
        if isinstance(out, BCOO):
            raise NotImplementedError(
                f"matmul of a sparse matrix of shape {a_shape} and a sparse stack of shape "
                f"{b_shape} is not implemented; convert one operand with .todense()"
            )
        out = fnp.moveaxis(out, 0, -2)
    return out


def bcoo_multiply_dense(sp_mat: BCOO, v) -> Array:
    """The data of the elementwise product of `sp_mat` and the dense `v` (which must broadcast
    to `sp_mat.shape`); the product's indices are `sp_mat`'s. Only the stored elements are
    multiplied, so the dense form of `v` times zero is never formed."""
    sp_mat = _as_bcoo(sp_mat, "bcoo_multiply_dense")
    v = fnp.asarray(v)
    if not _broadcasts_to(v.shape, sp_mat.shape):
        raise ValueError(
            f"bcoo_multiply_dense: v of shape {v.shape} must broadcast to the BCOO array's "
            f"shape {sp_mat.shape}"
        )
    return _layout.multiply_dense(sp_mat.data, sp_mat.indices, sp_mat.shape, v)
