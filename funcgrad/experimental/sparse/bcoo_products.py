"""Products with BCOO arrays: `lax.dot_general` with one sparse operand or two, the matmul
operator built on it, and elementwise products with a dense or a sparse array.

None forms the dense form of a sparse operand.
"""

from __future__ import annotations

import numpy as np

from funcgrad import core, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse import _dot, _layout, _relayout, _spdot
from funcgrad.experimental.sparse._convert import gather_slices, in_range, positions
from funcgrad.experimental.sparse.bcoo import BCOO, _as_bcoo, _broadcasts_to
from funcgrad.experimental.sparse.bcoo_structure import (
    bcoo_broadcast_in_dim,
    bcoo_squeeze,
    bcoo_update_layout,
)

__all__ = [
    "bcoo_conv_general_dilated",
    "bcoo_dot_general",
    "bcoo_dot_general_sampled",
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


def bcoo_dot_general_sampled(A, B, indices, *, dimension_numbers) -> Array:
    """The data of `lax.dot_general(A, B)` at the stored positions `indices` (of a BCOO array
    of the product's shape): each element's value is the contraction of the slices of A and B
    its position selects, so the dense product is never formed (0 at padding)."""
    A, B, indices = fnp.asarray(A), fnp.asarray(B), fnp.asarray(indices)
    dimension_numbers = _dot.canonical_dimension_numbers(dimension_numbers)
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    out_shape = _dot.output_shape(A.shape, B.shape, dimension_numbers)
    n_batch = indices.ndim - 2
    n_positional = n_batch + (indices.shape[-1] if indices.ndim >= 2 else 0)
    if (
        indices.ndim < 2
        or n_positional > len(out_shape)
        or indices.shape[:n_batch] != tuple(out_shape[:n_batch])
    ):
        raise ValueError(
            f"bcoo_dot_general_sampled: indices of shape {indices.shape} are not the indices of "
            f"a BCOO array of the product's shape {out_shape}"
        )
    # Where each output dimension comes from: (A's dimension or None, B's dimension or None).
    lhs_free = _dot._free(A.ndim, lhs_contract, lhs_batch)
    rhs_free = _dot._free(B.ndim, rhs_contract, rhs_batch)
    sources = (
        list(zip(lhs_batch, rhs_batch))
        + [(d, None) for d in lhs_free]
        + [(None, d) for d in rhs_free]
    )
    coordinates = positions(indices)
    gathered, kept = [], []
    for side, operand in enumerate((A, B)):
        dims = [(out, src[side]) for out, src in enumerate(sources[:n_positional])]
        dims = [(out, d) for out, d in dims if d is not None]
        operand_dims = [d for _, d in dims]
        if operand_dims:
            columns = fnp.take(coordinates, np.array([out for out, _ in dims], np.int32), axis=-1)
            gathered.append(gather_slices(operand, columns, operand_dims))
        else:
            lead_shape = coordinates.shape[:-1]
            gathered.append(fnp.broadcast_to(operand, (*lead_shape, *operand.shape)))
        kept.append([d for d in range(operand.ndim) if d not in operand_dims])
    n_lead = n_batch + 1

    def moved(side: int, dims) -> tuple[int, ...]:
        return tuple(n_lead + kept[side].index(d) for d in dims)

    remaining = sources[n_positional : len(lhs_batch)]
    lead = tuple(range(n_lead))
    contract = (moved(0, lhs_contract), moved(1, rhs_contract))
    batch = (
        lead + moved(0, [a for a, _ in remaining]),
        lead + moved(1, [b for _, b in remaining]),
    )
    return lax.dot_general(gathered[0], gathered[1], (contract, batch))


def bcoo_conv_general_dilated(
    lhs,
    rhs,
    *,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision=None,
    preferred_element_type=None,
) -> BCOO:
    """`lax.conv_general_dilated` with a BCOO array as one operand or both, as a BCOO array:
    one spatial dimension, with the batch and feature dimensions of size 1 (a 1-D signal and
    one kernel). Every pair of stored elements lands at the one output position where the
    kernel element meets the signal element, if any (so the result stores the product of the
    operands' nse, at most one per pair)."""
    from funcgrad.transforms.make_jaxpr import make_jaxpr  # transforms build on this package

    def dense_conv(a, b):
        return lax.conv_general_dilated(
            a,
            b,
            window_strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            dimension_numbers,
            feature_group_count,
            batch_group_count,
            precision,
            preferred_element_type,
        )

    avals = [core.ShapeDtypeStruct(x.shape, x.dtype) for x in (lhs, rhs)]
    program, out = make_jaxpr(dense_conv, return_shape=True)(*avals)
    (params,) = [e.params for e in program.jaxpr.eqns if e.primitive.name == "conv_general_dilated"]
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    lhs_sizes = tuple(lhs.shape[d] for d in lhs_spec[:2])
    rhs_sizes = tuple(rhs.shape[d] for d in rhs_spec[:2])
    if len(lhs.shape) != 3 or lhs_sizes != (1, 1) or rhs_sizes != (1, 1):
        raise NotImplementedError(
            f"bcoo_conv_general_dilated: operands of shapes {lhs.shape} and {rhs.shape} (with "
            f"dimension numbers {params['dimension_numbers']}) must have one spatial dimension "
            "and batch and feature dimensions of size 1 (one signal, one kernel)"
        )
    ((pad_low, _),) = params["padding"]
    (stride,), (lhs_step,), (rhs_step,) = (
        params[k] for k in ("window_strides", "lhs_dilation", "rhs_dilation")
    )
    width = out.shape[out_spec[2]]
    signal, kernel = _signal(lhs, lhs_spec), _signal(rhs, rhs_spec)
    dtype = np.dtype(preferred_element_type or fnp.result_type(signal.data, kernel.data))
    index_dtype = np.promote_types(
        np.promote_types(signal.indices.dtype, kernel.indices.dtype), np.int32
    )
    # Signal element i meets kernel element j at output o where o * stride + j * rhs_step equals
    # i * lhs_step + pad_low (positions in the dilated, padded signal).
    i = signal.indices[:, None, 0].astype(index_dtype)
    j = kernel.indices[None, :, 0].astype(index_dtype)
    offset = i * lhs_step + pad_low - j * rhs_step
    position = offset // stride
    valid = (offset >= 0) & (offset % stride == 0) & (position < width)
    valid = valid & in_range(signal.indices, signal.shape)[:, None]
    valid = valid & in_range(kernel.indices, kernel.shape)[None, :]
    products = signal.data.astype(dtype)[:, None] * kernel.data.astype(dtype)[None, :]
    data = fnp.where(valid, products, fnp.zeros((), dtype)).reshape(-1)
    indices = fnp.where(valid, position, width).reshape(-1, 1).astype(index_dtype)
    line = BCOO((data, indices), shape=(width,))
    return bcoo_broadcast_in_dim(line, shape=out.shape, broadcast_dimensions=(out_spec[2],))


def _signal(x, spec) -> BCOO:
    """An operand of a 1-D convolution as a one-dimensional BCOO array along its spatial
    dimension, with only sparse dimensions (a dense operand stores every position)."""
    if isinstance(x, BCOO):
        line = bcoo_squeeze(x, dimensions=spec[:2])
        return bcoo_update_layout(line, n_batch=0, n_dense=0)
    x = fnp.asarray(x)
    data = x.reshape(-1)
    indices = lax.broadcasted_iota(np.int32, (data.shape[0], 1), 0)
    return BCOO((data, indices), shape=data.shape, indices_sorted=True, unique_indices=True)
