"""BCOO, the batched coordinate format: the array, its conversions, and the functions that
change its layout or order (products are in bcoo_products, structural operations in
bcoo_structure).

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

from funcgrad import core, dtypes, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse import _convert, _layout, _order

__all__ = [
    "BCOO",
    "bcoo_extract",
    "bcoo_fromdense",
    "bcoo_reduce_sum",
    "bcoo_reshape",
    "bcoo_sort_indices",
    "bcoo_sum_duplicates",
    "bcoo_todense",
    "bcoo_transpose",
]


@tree_util.register_pytree_node_class
class BCOO:
    """A sparse array in batched coordinate format (see the module docstring).

    `indices_sorted` and `unique_indices` record what is known of the indices (sorted within
    each batch; no index twice in a batch); they are promises, not checked. With no sparse
    dimensions every stored element has the one empty index, padding included, so more than
    one element per batch is never unique, whatever the flag says.
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
        data, indices = _convert.unpacked(args, 2, "data, indices", "BCOO")
        self.data, self.indices = fnp.asarray(data), fnp.asarray(indices)
        shape = _convert.checked_shape(shape, "BCOO")
        _check_layout(self.data, self.indices, shape)
        self._trailing_shape = shape[self.indices.ndim - 2 :]
        self.indices_sorted = bool(indices_sorted)
        self.unique_indices = bool(unique_indices) and (self.n_sparse > 0 or self.nse <= 1)

    def tree_flatten(self):
        aux = (self._trailing_shape, self.nse, self.indices_sorted, self.unique_indices)
        return (self.data, self.indices), aux

    @classmethod
    def tree_unflatten(cls, aux, children) -> BCOO:
        mat = object.__new__(cls)
        mat.data, mat.indices = children
        mat._trailing_shape, nse, mat.indices_sorted, mat.unique_indices = aux
        check_stored_count("BCOO", mat.indices, -2, nse)
        return mat

    # ---- layout

    @property
    def shape(self) -> tuple[int, ...]:
        """The batch shape comes from the leaves, so that a vmapped lane has its own."""
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

    @classmethod
    def from_scipy_sparse(
        cls, mat, *, index_dtype=None, n_dense: int = 0, n_batch: int = 0
    ) -> BCOO:
        """The BCOO form of a SciPy sparse matrix of any format (read through `tocoo()`), its
        elements in SciPy's order with duplicates kept. Relay it out with `update_layout`."""
        if n_batch or n_dense:
            raise NotImplementedError(
                f"BCOO.from_scipy_sparse: n_batch={n_batch} and n_dense={n_dense} must be 0; "
                "change the layout of the result with update_layout"
            )
        coo = mat.tocoo()
        index_dtype = np.dtype(index_dtype or np.int32)
        indices = np.stack([coo.row, coo.col], axis=-1).astype(index_dtype)
        return cls((np.asarray(coo.data), indices), shape=coo.shape)

    def todense(self) -> Array:
        return bcoo_todense(self)

    def block_until_ready(self) -> BCOO:
        self.data.block_until_ready()
        self.indices.block_until_ready()
        return self

    def update_layout(
        self,
        *,
        n_batch: int | None = None,
        n_dense: int | None = None,
        on_inefficient: str | None = "error",
    ) -> BCOO:
        """The same array with another split into batch, sparse and dense dimensions (see
        `bcoo_update_layout`)."""
        from funcgrad.experimental.sparse.bcoo_structure import bcoo_update_layout

        return bcoo_update_layout(
            self, n_batch=n_batch, n_dense=n_dense, on_inefficient=on_inefficient
        )

    def astype(self, dtype) -> BCOO:
        """The array converted elementwise. A conversion to an integer or boolean type does
        not distribute over sums (0.6 + 0.6 truncates to 1, each 0.6 to 0), so elements that
        share an index are summed first, unless `unique_indices` promises there are none."""
        dtype = np.dtype(dtype)
        mat = self
        if not self.unique_indices and not _distributes_over_sums(self.dtype, dtype):
            mat = bcoo_sum_duplicates(self, nse=self.nse)
        return mat._like(mat.data.astype(dtype))

    def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> BCOO:
        """One element per distinct index, in sorted order (see `bcoo_sum_duplicates`);
        `remove_zeros` also drops the elements whose data is zero, which makes the result's
        size depend on the values."""
        return _sum_duplicates(self, nse, remove_zeros, "BCOO.sum_duplicates")

    def sort_indices(self) -> BCOO:
        return bcoo_sort_indices(self)

    # ---- shape operations

    def transpose(self, axes: Sequence[int] | None = None) -> BCOO:
        """The axes permuted, as NumPy's `transpose` (negative axes count from the end)."""
        if axes is None:
            permutation = tuple(range(self.ndim))[::-1]
        else:
            permutation = tuple(_normalize_axis(a, self.ndim, "BCOO.transpose") for a in axes)
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
        if axis is None:
            axis = range(self.ndim)
        axes = (axis,) if np.ndim(axis) == 0 else axis
        axes = tuple(_normalize_axis(a, self.ndim, "BCOO.sum") for a in axes)
        out = bcoo_reduce_sum(self, axes=axes)
        return out.todense() if out.ndim == 0 else out

    def __getitem__(self, item) -> BCOO:
        """NumPy's indexing. Integers (static or traced), positive-step slices and an ellipsis
        are read from the stored elements directly; other indices (integer arrays, None,
        negative steps) go through sparsify's rules (gathers, reversals, broadcasts)."""
        # (both modules build on this one)
        from funcgrad.experimental.sparse.bcoo_structure import getitem, is_basic_index
        from funcgrad.experimental.sparse.transform import sparsify

        if is_basic_index(item):
            return getitem(self, item)
        return sparsify(lambda mat: mat[item])(self)

    # ---- arithmetic (the products live in bcoo_products, which builds on this module; hence
    # the imports inside the methods)

    def __neg__(self) -> BCOO:
        return self._like(-self.data)

    def __pos__(self) -> BCOO:
        return self

    def __abs__(self) -> BCOO:
        return map_values(self, fnp.abs, linear=False)

    def __pow__(self, exponent) -> BCOO:
        """The elementwise power by a positive scalar (0 ** y is 0 only for y > 0)."""
        if not _positive_scalar(exponent):
            raise NotImplementedError(
                f"BCOO ** {exponent!r}: only a positive scalar exponent keeps the array sparse "
                "(0 ** y is not 0 for y <= 0); convert the array with .todense() first"
            )
        return map_values(self, lambda data: data**exponent, linear=False)

    def __rpow__(self, base):
        raise NotImplementedError(
            "raising to a BCOO power gives a dense result (x ** 0 is 1); convert the exponent "
            "with .todense() first"
        )

    def __truediv__(self, other) -> BCOO:
        """The elementwise quotient by a dense array that broadcasts to this one's shape (a
        scalar included); only the stored elements are divided."""
        if isinstance(other, BCOO):
            raise NotImplementedError(
                "dividing by a BCOO array gives a dense result (x / 0 is not 0); convert the "
                "divisor with .todense() first"
            )
        other = fnp.asarray(other)
        if not _broadcasts_to(other.shape, self.shape):
            raise ValueError(
                f"dividing a BCOO array of shape {self.shape} by a dense array of shape "
                f"{other.shape}: the divisor must broadcast to the BCOO array's shape"
            )
        return self._like(
            _layout.divide_dense(self.data, self.indices, self.shape, other, fnp.true_divide)
        )

    def __rtruediv__(self, other):
        raise NotImplementedError(
            "dividing by a BCOO array gives a dense result (x / 0 is not 0); convert the "
            "divisor with .todense() first"
        )

    def __mul__(self, other) -> BCOO:
        from funcgrad.experimental.sparse.bcoo_products import (
            bcoo_multiply_dense,
            bcoo_multiply_sparse,
        )

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
        from funcgrad.experimental.sparse.bcoo_products import matmul

        if isinstance(other, BCOO):
            return matmul(self, other, sparse_first=True)
        return matmul(self, fnp.asarray(other), sparse_first=True)

    def __rmatmul__(self, other) -> Array:
        from funcgrad.experimental.sparse.bcoo_products import matmul

        return matmul(self, fnp.asarray(other), sparse_first=False)


def check_stored_count(name: str, indices, nse_axis: int, nse: int) -> None:
    """Raise unless `indices` (when it is an array) still has `nse` entries along `nse_axis`.

    A sparse array's treedef holds only its non-batch shape, so that a vmap over a batch
    dimension gives each lane the array less that dimension. A vmap over any other dimension
    (or outputs stacked at one) would give leaves that describe some other array, silently;
    the count of stored elements, which no batch dimension changes, catches that."""
    shape = getattr(indices, "shape", None)
    if not isinstance(shape, tuple):  # a tree of placeholders, such as vmap's in_axes
        return
    if len(shape) < -nse_axis or shape[nse_axis] != nse:
        raise ValueError(
            f"{name}: indices of shape {shape} do not hold the {nse} stored elements per batch "
            f"of the array whose leaves they replace: vmap can map a {name} array (in_axes) or "
            "stack one (out_axes) only along its batch dimensions"
        )


def _distributes_over_sums(source: np.dtype, target: np.dtype) -> bool:
    """Whether converting a sum from `source` to `target` equals summing the converted terms
    (up to rounding): conversions between numbers, but not onto integers from other kinds, and
    none to or from bool but bool's own."""
    if "b" in (source.kind, target.kind):
        return source == target
    return target.kind not in "iu" or source.kind in "iu"


def _traced(x) -> bool:
    return isinstance(x, core.Tracer)


def _positive_scalar(x) -> bool:
    """Whether `x` is a concrete real scalar greater than 0."""
    if isinstance(x, core.Tracer) or np.ndim(x) != 0 or isinstance(x, (bool, np.bool_)):
        return False
    value = np.asarray(x)
    return value.dtype.kind in "iuf" and bool(value > 0)


def map_values(mat: BCOO, fn, *, linear: bool) -> BCOO:
    """The array with `fn`, which maps 0 to 0, applied to its values: to every stored
    element's data. Unless `fn` is linear, elements that share an index are merged first
    (abs(-1 + 1) is not abs(-1) + abs(1)), and padding's data becomes 0, where `fn`'s
    derivative is cut off from it (sqrt's is infinite there)."""
    if linear:
        return mat._like(fn(mat.data))
    if not mat.unique_indices:
        mat = bcoo_sum_duplicates(mat, nse=mat.nse)
    sparse_shape = mat.shape[mat.n_batch : mat.n_batch + mat.n_sparse]
    valid = _convert.in_range(mat.indices, sparse_shape)
    valid = valid.reshape(valid.shape + (1,) * mat.n_dense)
    return mat._like(fn(fnp.where(valid, mat.data, fnp.zeros((), mat.dtype))))


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
    _convert.check_index_dtype(shape[n_batch : n_batch + n_sparse], indices.dtype, "BCOO")


def _as_bcoo(mat, name: str) -> BCOO:
    if not isinstance(mat, BCOO):
        raise TypeError(f"{name}: expected a BCOO array, got {type(mat).__name__}")
    return mat


# ---- conversions


def _static_nse(count, name: str) -> int:
    """The largest of `count` (per batch) as a Python int, which needs a concrete value."""
    count = core.concrete_or_error(
        count,
        f"{name}: nse=None counts the stored elements from the array's values, which "
        "are not known while tracing; pass nse= (a Python int) to fix the number of "
        "stored elements, which sets the shapes of data and indices.",
    )
    return int(np.max(np.asarray(count), initial=0))


def _checked_nse(nse, name: str) -> int:
    nse = core.concrete_or_error(
        nse,
        f"{name}: nse sets the shapes of data and indices, so it must be a Python int "
        "(a static argument under jit), not a traced value.",
    )
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
    _convert.check_index_dtype(
        mat.shape[n_batch : mat.ndim - n_dense], index_dtype, "bcoo_fromdense"
    )
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


# ---- sums


def _add_sparse(a: BCOO, b: BCOO) -> BCOO:
    """The sum of two BCOO arrays of one shape and layout: both sets of stored elements, or,
    for arrays with the same indices (x + x, or in a loop), the sums of their data, which
    keeps the number of stored elements."""
    if a.shape != b.shape or (a.n_batch, a.n_dense) != (b.n_batch, b.n_dense):
        raise ValueError(f"adding BCOO arrays needs one shape and layout, got {a!r} and {b!r}")
    dtype = fnp.result_type(a.data, b.data)
    if a.indices is b.indices:
        return a._like(a.data.astype(dtype) + b.data.astype(dtype))
    nse_axis = a.n_batch
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
    if len(set(axes)) != len(axes):
        raise ValueError(f"bcoo_reduce_sum: repeated axis in {axes} for {mat!r}")
    data, indices, shape = _layout.reduce_sum(mat.data, mat.indices, mat.shape, axes)
    return BCOO((data, indices), shape=shape)


def bcoo_reshape(mat: BCOO, *, new_sizes: Sequence[int], dimensions=None) -> BCOO:
    """The array in a new shape (row-major order): the batch dimensions must become leading
    dimensions of the same total size and the dense dimensions stay as they are; the sparse
    dimensions take whatever shape is left. An array of no elements takes any shape of no
    elements (with only sparse dimensions)."""
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
