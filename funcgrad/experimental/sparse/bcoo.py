"""BCOO, the batched coordinate format, and the functions on it.

`BCOO((data, indices), shape=shape)` holds `data` of shape (*batch, nse, *dense) and `indices`
of shape (*batch, nse, n_sparse): every batch of the array stores `nse` elements, element
`data[b, k]` (a dense block) lying at sparse index `indices[b, k]`. Elements with the same
index add up; an index outside the sparse shape (padding uses the shape itself) addresses
nothing.

A BCOO array is a pytree whose leaves are `data` and `indices`, so it passes through jit, grad
(derivatives reach `data`; the integer indices have none) and vmap unchanged. Its treedef holds
only the non-batch part of the shape: a vmap over a batch dimension sees, in each lane, the
array with that dimension removed. Every operation below is composed of gathers, scatters and
products, so the transformations and compiled backends need nothing of their own.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from funcgrad import core, dtypes, lax, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.errors import ConcretizationTypeError
from funcgrad.experimental.sparse import _convert, _dot, _layout, _order, _relayout, _spdot

__all__ = [
    "BCOO",
    "bcoo_dot_general",
    "bcoo_extract",
    "bcoo_fromdense",
    "bcoo_multiply_dense",
    "bcoo_multiply_sparse",
    "bcoo_reduce_sum",
    "bcoo_reshape",
    "bcoo_sort_indices",
    "bcoo_spdot_general",
    "bcoo_sum_duplicates",
    "bcoo_todense",
    "bcoo_transpose",
]


@tree_util.register_pytree_node_class
class BCOO:
    """A sparse array in batched coordinate format (see the module docstring).

    `indices_sorted` and `unique_indices` record what is known of the indices (sorted within
    each batch; no index twice in a batch); they are promises, not checked.
    """

    __array_ufunc__ = None  # NumPy arrays defer to BCOO's reflected operators

    data: Array
    indices: Array
    indices_sorted: bool
    unique_indices: bool

    def __init__(
        self,
        args: tuple[Any, Any],
        *,
        shape: Sequence[int],
        indices_sorted: bool = False,
        unique_indices: bool = False,
    ):
        data, indices = args
        self.data, self.indices = fnp.asarray(data), fnp.asarray(indices)
        shape = tuple(operator.index(s) for s in shape)
        _check_layout(self.data, self.indices, shape)
        self._trailing_shape = shape[self.indices.ndim - 2 :]
        self.indices_sorted = bool(indices_sorted)
        self.unique_indices = bool(unique_indices)

    def tree_flatten(self):
        aux = (self._trailing_shape, self.indices_sorted, self.unique_indices)
        return (self.data, self.indices), aux

    @classmethod
    def tree_unflatten(cls, aux, children) -> BCOO:
        mat = object.__new__(cls)
        mat.data, mat.indices = children
        mat._trailing_shape, mat.indices_sorted, mat.unique_indices = aux
        return mat

    # ---- layout

    @property
    def shape(self) -> tuple[int, ...]:
        """The batch shape comes from the leaves, so that a vmapped lane has its own."""
        if self.indices.ndim < 2:
            raise ValueError(
                f"BCOO: indices of shape {self.indices.shape} have no (nse, n_sparse) axes; "
                "vmap can map a BCOO array only over its batch dimensions (n_batch > 0)"
            )
        return tuple(self.indices.shape[:-2]) + self._trailing_shape

    @property
    def nse(self) -> int:
        return self.indices.shape[-2]

    @property
    def n_batch(self) -> int:
        return self.indices.ndim - 2

    @property
    def n_sparse(self) -> int:
        return self.indices.shape[-1]

    @property
    def n_dense(self) -> int:
        return self.data.ndim - 1 - self.n_batch

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        extra = f", nse={self.nse}"
        if self.n_batch:
            extra += f", n_batch={self.n_batch}"
        if self.n_dense:
            extra += f", n_dense={self.n_dense}"
        text = f"BCOO({self.dtype.name}{list(self.shape)}{extra})"
        return f"{type(self.data).__name__}[{text}]" if _traced(self.data) else text

    def _like(self, data, indices=None, **flags) -> BCOO:
        """An array with this one's indices (or `indices`), layout and flags, holding `data`."""
        flags = {
            "indices_sorted": self.indices_sorted,
            "unique_indices": self.unique_indices,
            **flags,
        }
        indices = self.indices if indices is None else indices
        shape = tuple(indices.shape[:-2]) + self._trailing_shape
        return BCOO((data, indices), shape=shape, **flags)

    # ---- conversions

    @classmethod
    def fromdense(
        cls,
        mat,
        *,
        nse: int | None = None,
        index_dtype=np.int32,
        n_dense: int = 0,
        n_batch: int = 0,
    ) -> BCOO:
        """The BCOO form of a dense array (see `bcoo_fromdense`)."""
        return bcoo_fromdense(
            mat, nse=nse, n_batch=n_batch, n_dense=n_dense, index_dtype=index_dtype
        )

    def todense(self) -> Array:
        return bcoo_todense(self)

    def astype(self, dtype) -> BCOO:
        return self._like(self.data.astype(dtype))

    def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> BCOO:
        """One element per distinct index, in sorted order (see `bcoo_sum_duplicates`);
        `remove_zeros` also drops the elements whose data is zero, which makes the result's
        size depend on the values."""
        return _sum_duplicates(self, nse, remove_zeros, "BCOO.sum_duplicates")

    def sort_indices(self) -> BCOO:
        return bcoo_sort_indices(self)

    # ---- shape operations

    def transpose(self, axes: Sequence[int] | None = None) -> BCOO:
        permutation = tuple(range(self.ndim))[::-1] if axes is None else tuple(axes)
        return bcoo_transpose(self, permutation=permutation)

    @property
    def T(self) -> BCOO:
        return self.transpose()

    def reshape(self, *shape, order: str = "C") -> BCOO:
        if order != "C":
            raise NotImplementedError(f"BCOO.reshape: only order='C' is supported, got {order!r}")
        new_sizes = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return bcoo_reshape(self, new_sizes=new_sizes)

    def sum(self, axis: int | Sequence[int] | None = None) -> BCOO | Array:
        """The sum over `axis` (all axes by default) as a BCOO array; a sum over every axis is
        a dense scalar."""
        axes = range(self.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
        axes = tuple(_normalize_axis(a, self.ndim, "BCOO.sum") for a in axes)
        out = bcoo_reduce_sum(self, axes=axes)
        return out.todense() if out.ndim == 0 else out

    def __getitem__(self, item) -> BCOO:
        """Integers (static or traced), positive-step slices and an ellipsis, over any
        dimensions."""
        from funcgrad.experimental.sparse.bcoo_structure import getitem  # it imports BCOO

        return getitem(self, item)

    # ---- arithmetic

    def __neg__(self) -> BCOO:
        return self._like(-self.data)

    def __pos__(self) -> BCOO:
        return self

    def __mul__(self, other) -> BCOO:
        if isinstance(other, BCOO):
            return bcoo_multiply_sparse(self, other)
        other = fnp.asarray(other)
        if other.ndim == 0:
            return self._like(self.data * other)
        return self._like(bcoo_multiply_dense(self, other))

    __rmul__ = __mul__

    def __add__(self, other) -> BCOO | Array:
        if isinstance(other, BCOO):
            return _add_sparse(self, other)
        other = fnp.asarray(other)
        if not _broadcasts_to(self.shape, other.shape):
            raise NotImplementedError(
                f"adding a BCOO array of shape {self.shape} and a dense array of shape "
                f"{other.shape} would broadcast the dense one; convert the BCOO array with "
                ".todense() if that is meant"
            )
        return self.todense() + other

    __radd__ = __add__

    def __sub__(self, other) -> BCOO | Array:
        return self + (-other)

    def __rsub__(self, other) -> BCOO | Array:
        return (-self) + other

    def __matmul__(self, other) -> Array | BCOO:
        if isinstance(other, BCOO):
            return _matmul(self, other, sparse_first=True)
        return _matmul(self, fnp.asarray(other), sparse_first=True)

    def __rmatmul__(self, other) -> Array:
        return _matmul(self, fnp.asarray(other), sparse_first=False)


def _traced(x) -> bool:
    return isinstance(x, core.Tracer)


def _is_integer_index(i) -> bool:
    if isinstance(i, (int, np.integer)):
        return True
    return getattr(i, "ndim", None) == 0 and dtypes.is_int(i.dtype)


def _normalize_axis(axis: int, ndim: int, name: str) -> int:
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for an array of rank {ndim}")
    return axis % ndim


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of `shape` broadcasts to `target` without growing it."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape[::-1], target[::-1]))


def _check_layout(data, indices, shape: tuple[int, ...]) -> None:
    """Raise unless `data` and `indices` describe a BCOO array of `shape`."""
    if not dtypes.is_int(indices.dtype):
        raise TypeError(f"BCOO: indices must be integers, got {indices.dtype}")
    if indices.ndim < 2:
        raise ValueError(
            f"BCOO: indices must have shape (*batch, nse, n_sparse), got {indices.shape}"
        )
    n_batch, (nse, n_sparse) = indices.ndim - 2, indices.shape[-2:]
    n_dense = len(shape) - n_batch - n_sparse
    batch_shape = indices.shape[:n_batch]
    expected = batch_shape + (nse,) + shape[n_batch + n_sparse :]
    if n_dense < 0 or shape[:n_batch] != batch_shape or data.shape != expected:
        raise ValueError(
            f"BCOO: data of shape {data.shape} and indices of shape {indices.shape} do not "
            f"describe an array of shape {shape}: indices (*batch, nse, n_sparse) give "
            f"n_batch={n_batch}, nse={nse}, n_sparse={n_sparse}, so the shape must start with "
            f"the batch shape {batch_shape}, and data must have shape (*batch, nse, *dense)"
            + (f" = {expected}" if n_dense >= 0 else "")
        )


def _as_bcoo(mat, name: str) -> BCOO:
    if not isinstance(mat, BCOO):
        raise TypeError(f"{name}: expected a BCOO array, got {type(mat).__name__}")
    return mat


# ---- conversions


def _static_nse(count, name: str) -> int:
    """The largest of `count` (per batch) as a Python int, which needs a concrete value."""
    if isinstance(count, core.Tracer):
        try:
            count = count.to_concrete_value()
        except ConcretizationTypeError:
            raise ConcretizationTypeError(
                count,
                f"{name}: nse=None counts the stored elements from the array's values, which "
                "are not known while tracing; pass nse= (a Python int) to fix the number of "
                "stored elements, which sets the shapes of data and indices.",
            ) from None
    return int(np.max(np.asarray(count), initial=0))


def _checked_nse(nse, name: str) -> int:
    if isinstance(nse, core.Tracer):
        try:
            nse = nse.to_concrete_value()
        except ConcretizationTypeError:
            raise ConcretizationTypeError(
                nse,
                f"{name}: nse sets the shapes of data and indices, so it must be a Python int "
                "(a static argument under jit), not a traced value.",
            ) from None
    nse = operator.index(nse)
    if nse < 0:
        raise ValueError(f"{name}: nse must be non-negative, got {nse}")
    return nse


def bcoo_fromdense(
    mat, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0, index_dtype=np.int32
) -> BCOO:
    """The BCOO form of a dense array: per batch, its nonzero positions (a position whose dense
    block has any nonzero) in row-major order, and their values.

    `nse`, the number of stored elements per batch, defaults to the most nonzeros any batch
    has, counted from the values: under jit, pass it. A batch with fewer nonzeros is padded; one
    with more keeps its first `nse`."""
    mat = fnp.asarray(mat)
    n_batch, n_dense = operator.index(n_batch), operator.index(n_dense)
    if n_batch < 0 or n_dense < 0 or n_batch + n_dense > mat.ndim:
        raise ValueError(
            f"bcoo_fromdense: n_batch={n_batch} and n_dense={n_dense} must be non-negative and "
            f"together at most the rank {mat.ndim} of the array of shape {mat.shape}"
        )
    index_dtype = np.dtype(index_dtype)
    if not dtypes.is_int(index_dtype):
        raise TypeError(f"bcoo_fromdense: index_dtype must be an integer type, got {index_dtype}")
    if nse is None:
        nse = _static_nse(_convert.nonzero_count(mat, n_batch, n_dense), "bcoo_fromdense")
    else:
        nse = _checked_nse(nse, "bcoo_fromdense")
    data, indices = _convert.fromdense(mat, nse, n_batch, n_dense, index_dtype)
    return BCOO((data, indices), shape=mat.shape, indices_sorted=True, unique_indices=True)


def bcoo_todense(mat: BCOO) -> Array:
    """The dense array: zeros, with every stored element added at its index."""
    mat = _as_bcoo(mat, "bcoo_todense")
    return _convert.todense(mat.data, mat.indices, mat.shape)


def bcoo_extract(sparr: BCOO, arr, *, assume_unique: bool | None = None) -> BCOO:
    """The values of the dense `arr` at the indices of `sparr`, as a BCOO array with those
    indices. Where an index repeats, each copy holds the value unless `assume_unique` is False
    (or None and `sparr.unique_indices` is False), when only the first copy does, so that the
    result's dense form equals `arr` on the indices."""
    sparr = _as_bcoo(sparr, "bcoo_extract")
    arr = fnp.asarray(arr)
    if arr.shape != sparr.shape:
        raise ValueError(
            f"bcoo_extract: arr of shape {arr.shape} must have the BCOO array's shape {sparr.shape}"
        )
    if assume_unique is None:
        assume_unique = sparr.unique_indices
    data = _convert.extract(sparr.indices, arr)
    if not assume_unique:
        sparse_shape = sparr.shape[sparr.n_batch : sparr.n_batch + sparr.n_sparse]
        first = _order.first_copies(sparr.indices, sparse_shape)
        data = fnp.where(
            first.reshape(first.shape + (1,) * sparr.n_dense), data, fnp.zeros((), data.dtype)
        )
    return sparr._like(data)


# ---- products


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
    """`lax.dot_general` of two BCOO arrays without dense dimensions, as a BCOO array. The batch
    dimensions must be batch dimensions of both, and the contracting ones sparse dimensions.
    The result's batch dimensions are the paired batch dimensions, then each operand's
    unpaired ones; it stores, per batch, the product of the operands' nse (an operand whose
    sparse dimensions are all contracted counts 1), at most one per position."""
    lhs, rhs = _as_bcoo(lhs, "bcoo_spdot_general"), _as_bcoo(rhs, "bcoo_spdot_general")
    dimension_numbers = _dot.canonical_dimension_numbers(dimension_numbers)
    out_shape = _dot.output_shape(lhs.shape, rhs.shape, dimension_numbers)
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    problems = []
    if lhs.n_dense or rhs.n_dense:
        problems.append("neither operand may have dense dimensions")
    for side, mat, contract, batch in (
        ("lhs", lhs, lhs_contract, lhs_batch),
        ("rhs", rhs, rhs_contract, rhs_batch),
    ):
        if any(d >= mat.n_batch for d in batch):
            problems.append(f"{side} batch dims {batch} must be among its {mat.n_batch} batch dims")
        if any(d < mat.n_batch for d in contract):
            problems.append(f"{side} contracting dims {contract} must be sparse dims")
    lhs_free_sparse = lhs.n_sparse > len(lhs_contract)
    if rhs.n_batch > len(rhs_batch) and lhs_free_sparse:
        problems.append(
            "rhs may have unpaired batch dims only when every lhs sparse dim is contracted"
        )
    if problems:
        raise NotImplementedError(
            f"bcoo_spdot_general of {lhs!r} and {rhs!r} with dimension_numbers "
            f"{dimension_numbers}: " + "; ".join(problems)
        )
    dtype = np.dtype(preferred_element_type or fnp.result_type(lhs.data, rhs.data))
    data, indices = _spdot.spdot_general(lhs, rhs, dimension_numbers, out_shape, dtype)
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


def _matmul(sparse: BCOO, dense, sparse_first: bool) -> Array | BCOO:
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


def _add_sparse(a: BCOO, b: BCOO) -> BCOO:
    """The sum of two BCOO arrays of one shape and layout: both sets of stored elements."""
    if a.shape != b.shape or (a.n_batch, a.n_dense) != (b.n_batch, b.n_dense):
        raise ValueError(f"adding BCOO arrays needs one shape and layout, got {a!r} and {b!r}")
    nse_axis = a.n_batch
    dtype = fnp.result_type(a.data, b.data)
    data = fnp.concatenate([a.data.astype(dtype), b.data.astype(dtype)], axis=nse_axis)
    index_dtype = np.promote_types(a.indices.dtype, b.indices.dtype)
    indices = fnp.concatenate(
        [a.indices.astype(index_dtype), b.indices.astype(index_dtype)], axis=nse_axis
    )
    return BCOO((data, indices), shape=a.shape)


# ---- structure


def bcoo_transpose(mat: BCOO, *, permutation: Sequence[int]) -> BCOO:
    """The axes permuted. Batch, sparse and dense dimensions each permute among themselves."""
    mat = _as_bcoo(mat, "bcoo_transpose")
    permutation = tuple(operator.index(p) for p in permutation)
    n_batch, n_positional = mat.n_batch, mat.n_batch + mat.n_sparse
    groups = (range(n_batch), range(n_batch, n_positional), range(n_positional, mat.ndim))
    if sorted(permutation) != list(range(mat.ndim)) or any(
        sorted(permutation[g.start : g.stop]) != list(g) for g in groups
    ):
        raise ValueError(
            f"bcoo_transpose: permutation {permutation} must permute the axes of {mat!r} with "
            f"the batch axes {tuple(groups[0])}, sparse axes {tuple(groups[1])} and dense axes "
            f"{tuple(groups[2])} each kept among themselves"
        )
    data, indices, shape = _layout.transpose(mat.data, mat.indices, mat.shape, permutation)
    sparse_kept = permutation[n_batch:n_positional] == tuple(groups[1])
    return BCOO(
        (data, indices),
        shape=shape,
        indices_sorted=mat.indices_sorted and sparse_kept,
        unique_indices=mat.unique_indices,
    )


def bcoo_reduce_sum(mat: BCOO, *, axes: Sequence[int]) -> BCOO:
    """The sum over `axes`, still sparse."""
    mat = _as_bcoo(mat, "bcoo_reduce_sum")
    axes = tuple(_normalize_axis(a, mat.ndim, "bcoo_reduce_sum") for a in axes)
    data, indices, shape = _layout.reduce_sum(mat.data, mat.indices, mat.shape, axes)
    return BCOO((data, indices), shape=shape)


def bcoo_reshape(mat: BCOO, *, new_sizes: Sequence[int], dimensions=None) -> BCOO:
    """The array in a new shape (row-major order): the batch dimensions must become leading
    dimensions of the same total size and the dense dimensions stay as they are; the sparse
    dimensions take whatever shape is left."""
    mat = _as_bcoo(mat, "bcoo_reshape")
    if dimensions is not None and tuple(dimensions) != tuple(range(mat.ndim)):
        raise NotImplementedError("bcoo_reshape: only dimensions=None is supported")
    new_shape = _resolved_shape(new_sizes, mat.size, mat.shape)
    data, indices, shape = _layout.reshape(
        mat.data, mat.indices, mat.shape, new_shape, "bcoo_reshape"
    )
    return BCOO(
        (data, indices),
        shape=shape,
        indices_sorted=mat.indices_sorted,
        unique_indices=mat.unique_indices,
    )


def _resolved_shape(new_sizes, size: int, shape) -> tuple[int, ...]:
    new_sizes = tuple(operator.index(s) for s in new_sizes)
    unknown = [i for i, s in enumerate(new_sizes) if s == -1]
    known = math.prod(s for s in new_sizes if s != -1)
    if len(unknown) == 1 and known and size % known == 0:
        new_sizes = new_sizes[: unknown[0]] + (size // known,) + new_sizes[unknown[0] + 1 :]
    if any(s < 0 for s in new_sizes) or math.prod(new_sizes) != size:
        raise ValueError(f"bcoo_reshape: cannot reshape an array of shape {shape} into {new_sizes}")
    return new_sizes


def bcoo_sort_indices(mat: BCOO) -> BCOO:
    """The stored elements of every batch in lexicographic order of their indices (padding
    last)."""
    mat = _as_bcoo(mat, "bcoo_sort_indices")
    if mat.n_sparse == 0:  # every element has the one (empty) index
        return mat._like(mat.data, indices_sorted=True)
    sparse_shape = mat.shape[mat.n_batch : mat.n_batch + mat.n_sparse]
    data, indices = _order.sort_indices(mat.data, mat.indices, sparse_shape)
    return mat._like(data, indices, indices_sorted=True)


def bcoo_sum_duplicates(mat: BCOO, nse: int | None = None) -> BCOO:
    """One stored element per distinct index of each batch, holding the sum of the data at
    that index, sorted, then padding. `nse` defaults to the most distinct indices any batch has,
    counted from the indices' values: under jit, pass it. A smaller `nse` drops the last
    indices."""
    return _sum_duplicates(mat, nse, False, "bcoo_sum_duplicates")


def _sum_duplicates(mat: BCOO, nse, remove_zeros: bool, name: str) -> BCOO:
    mat = _as_bcoo(mat, name)
    if nse is not None:
        nse = _checked_nse(nse, name)
    sparse_shape = mat.shape[mat.n_batch : mat.n_batch + mat.n_sparse]
    counted = _order.sum_duplicates(mat.data, mat.indices, sparse_shape, remove_zeros)
    if nse is None:
        nse = _static_nse(counted.distinct, name)
    data, indices = counted.into_slots(nse)
    return mat._like(data, indices, indices_sorted=True, unique_indices=True)
