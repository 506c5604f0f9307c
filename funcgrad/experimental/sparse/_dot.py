"""The contraction of a BCOO array with a dense one, as a gather, a product and a scatter.

Each stored element meets the slice of the dense operand at the coordinates its position
fixes (the dense dimensions paired with the sparse array's batch or sparse dimensions): one
gather reads those slices, one `dot_general` batched over the stored elements multiplies them
by the elements' data (contracting the dense dimensions), and one scatter-add puts each product
at the element's coordinates in the result's batch and free dimensions; when every positional
dimension is contracted, the products are summed instead. So the work grows with the number of
stored elements, never with the size of the dense form, and jit, grad and vmap see only
gathers, scatters and products.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import (
    gather_slices,
    in_range,
    position_columns,
    zero_where_invalid,
)

DimensionNumbers = tuple[
    tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]
]


def canonical_dimension_numbers(dimension_numbers) -> DimensionNumbers:
    try:
        (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
        return (
            (tuple(map(int, lhs_contract)), tuple(map(int, rhs_contract))),
            (tuple(map(int, lhs_batch)), tuple(map(int, rhs_batch))),
        )
    except (TypeError, ValueError):
        raise TypeError(
            "bcoo_dot_general: dimension_numbers must be ((lhs_contracting_dims, "
            f"rhs_contracting_dims), (lhs_batch_dims, rhs_batch_dims)), got {dimension_numbers!r}"
        ) from None


def output_shape(lhs_shape, rhs_shape, dimension_numbers: DimensionNumbers) -> tuple[int, ...]:
    """dot_general's result shape, after checking that the dimension numbers fit the shapes."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    for side, shape, contract, batch in (
        ("lhs", lhs_shape, lhs_contract, lhs_batch),
        ("rhs", rhs_shape, rhs_contract, rhs_batch),
    ):
        dims = contract + batch
        if any(not 0 <= d < len(shape) for d in dims) or len(set(dims)) != len(dims):
            raise ValueError(
                f"bcoo_dot_general: {side} contracting dims {contract} and batch dims {batch} "
                f"must be distinct dimensions of its shape {shape}"
            )
    for kind, lhs_dims, rhs_dims in (
        ("contracting", lhs_contract, rhs_contract),
        ("batch", lhs_batch, rhs_batch),
    ):
        lhs_sizes = tuple(lhs_shape[d] for d in lhs_dims)
        rhs_sizes = tuple(rhs_shape[d] for d in rhs_dims)
        if lhs_sizes != rhs_sizes:
            raise TypeError(
                f"bcoo_dot_general: {kind} dimension sizes must match, got lhs shape "
                f"{tuple(lhs_shape)} and rhs shape {tuple(rhs_shape)} with {kind} dims "
                f"{lhs_dims} and {rhs_dims}"
            )
    return (
        tuple(lhs_shape[d] for d in lhs_batch)
        + tuple(lhs_shape[d] for d in _free(len(lhs_shape), lhs_contract, lhs_batch))
        + tuple(rhs_shape[d] for d in _free(len(rhs_shape), rhs_contract, rhs_batch))
    )


def _free(rank: int, contract, batch) -> tuple[int, ...]:
    return tuple(d for d in range(rank) if d not in contract and d not in batch)


def sparse_dot_dense(
    data,
    indices,
    lhs_shape,
    rhs,
    dimension_numbers: DimensionNumbers,
    precision=None,
    preferred_element_type=None,
) -> Array:
    """dot_general(todense(lhs), rhs) without forming todense(lhs)."""
    out_shape = output_shape(lhs_shape, rhs.shape, dimension_numbers)
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    n_batch = indices.ndim - 2
    n_positional = n_batch + indices.shape[-1]
    n_stored = math.prod(indices.shape[:-1])
    if indices.shape[-1]:
        # Padding meets only the zeros the gather reads outside rhs, but NaN or infinite data
        # times those zeros would still reach the result.
        data = zero_where_invalid(data, in_range(indices, lhs_shape[n_batch:n_positional]))
    data = data.reshape(n_stored, *data.shape[n_batch + 1 :])
    paired = zip(lhs_contract + lhs_batch, rhs_contract + rhs_batch)
    gathered = [(lhs, rhs_dim) for lhs, rhs_dim in paired if lhs < n_positional]
    dense_contract = _dense_pairs(lhs_contract, rhs_contract, n_positional)
    dense_batch = _dense_pairs(lhs_batch, rhs_batch, n_positional)
    if gathered:
        rhs_dims = [rhs_dim for _, rhs_dim in gathered]
        coordinates = position_columns(indices, [lhs for lhs, _ in gathered])
        # every stored element's slice of rhs: (stored element, the remaining rhs dims)
        other = gather_slices(rhs, coordinates.reshape(n_stored, len(gathered)), rhs_dims)
        remaining = [d for d in range(rhs.ndim) if d not in rhs_dims]
        other_dim = {rhs_dim: 1 + i for i, rhs_dim in enumerate(remaining)}
        lead = (0,)  # the stored elements pair up with their slices
    else:
        other, other_dim, lead = rhs, {d: d for d in range(rhs.ndim)}, ()
    product = lax.dot_general(
        data,
        other,
        (
            (
                tuple(lhs - n_positional + 1 for lhs, _ in dense_contract),
                tuple(other_dim[r] for _, r in dense_contract),
            ),
            (
                lead + tuple(lhs - n_positional + 1 for lhs, _ in dense_batch),
                lead + tuple(other_dim[r] for _, r in dense_batch),
            ),
        ),
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    if not gathered:
        product = fnp.moveaxis(product, len(dense_batch), 0)
    # product: (stored element, dense batch dims, dense free dims, rhs free dims)

    lhs_free = _free(len(lhs_shape), lhs_contract, lhs_batch)
    out_dim = {lhs: i for i, lhs in enumerate(lhs_batch + lhs_free)}
    placed = [lhs for lhs in lhs_batch + lhs_free if lhs < n_positional]
    if not placed:  # every positional dimension contracted: the products add up
        if product.dtype == np.bool_:  # as dot_general's own sums of booleans, an or
            return lax.reduce_or(product, (0,))
        return lax.reduce_sum(product, (0,))
    coordinates = position_columns(indices, placed).reshape(n_stored, len(placed))
    dimension_numbers = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(1, product.ndim)),
        inserted_window_dims=tuple(sorted(out_dim[lhs] for lhs in placed)),
        scatter_dims_to_operand_dims=tuple(out_dim[lhs] for lhs in placed),
    )
    zeros = fnp.zeros(out_shape, product.dtype)
    return lax.scatter_add(zeros, coordinates, product, dimension_numbers, mode="drop")


def _dense_pairs(lhs_dims, rhs_dims, n_positional: int) -> list[tuple[int, int]]:
    """The pairs whose sparse-array dimension is one of its dense dimensions."""
    return [(lhs, rhs) for lhs, rhs in zip(lhs_dims, rhs_dims) if lhs >= n_positional]
