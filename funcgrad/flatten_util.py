"""jax.flatten_util: a pytree of arrays as one flat vector, and the way back.

Optimisers, line searches and solvers written for vectors take a model's parameters through
`ravel_pytree`. The vector's dtype promotes the leaves' dtypes (their dtypes alone: a Python
float leaf counts as the default float dtype); unravelling casts each piece back to its
leaf's dtype. Both are array code, so grad, vmap and jit apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import dtypes, lax, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array

__all__ = ["ravel_pytree"]


def ravel_pytree(pytree: Any) -> tuple[Array, Callable[[Array], Any]]:
    """(the leaves of `pytree` raveled and concatenated into one 1-D array, the function that
    maps such a vector back to a pytree of that structure, shapes and dtypes).

    A pytree without leaves gives an empty float32 vector. When the leaves have several
    dtypes the vector has their promoted dtype and unravel accepts only that dtype; with one
    dtype unravel keeps the dtype of the vector it is given."""
    leaves, treedef = tree_util.tree_flatten(pytree)
    leaves = [fnp.asarray(leaf) for leaf in leaves]
    if not leaves:
        return lax.full((0,), 0, np.float32), _Unravel(treedef, (), (), None, None)
    leaf_dtypes = tuple(leaf.dtype for leaf in leaves)
    to_dtype, _ = dtypes.result_type_of([(dtype, False) for dtype in leaf_dtypes])
    shapes = tuple(leaf.shape for leaf in leaves)
    sizes = tuple(leaf.size for leaf in leaves)
    if all(dtype == to_dtype for dtype in leaf_dtypes):
        flat = lax.concatenate([leaf.reshape(-1) for leaf in leaves], 0)
        return flat, _Unravel(treedef, sizes, shapes, None, None)
    flat = lax.concatenate(
        [lax.convert_element_type(leaf, to_dtype).reshape(-1) for leaf in leaves], 0
    )
    return flat, _Unravel(treedef, sizes, shapes, leaf_dtypes, to_dtype)


@dataclasses.dataclass(frozen=True)
class _Unravel:
    """The way back from a raveled vector; equal for equal structures (so it may be a static
    argument of jit). `leaf_dtypes` is None when the leaves share one dtype, and the vector's
    dtype is then kept."""

    treedef: tree_util.PyTreeDef
    sizes: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    leaf_dtypes: tuple[np.dtype, ...] | None
    flat_dtype: np.dtype | None

    def __call__(self, flat) -> Any:
        flat = fnp.asarray(flat)
        size = sum(self.sizes)
        if flat.shape != (size,):
            raise ValueError(
                f"unravel expects a 1-D vector of {size} elements (the raveled pytree's size), "
                f"got shape {flat.shape}"
            )
        if self.leaf_dtypes is not None and flat.dtype != self.flat_dtype:
            raise TypeError(
                f"unravel expects a vector of dtype {self.flat_dtype} (the leaves' promoted "
                f"dtype), got {flat.dtype}"
            )
        pieces = lax.split(flat, self.sizes) if self.sizes else []
        leaves = [piece.reshape(shape) for piece, shape in zip(pieces, self.shapes)]
        if self.leaf_dtypes is not None:
            leaves = [
                lax.convert_element_type(leaf, dtype)
                for leaf, dtype in zip(leaves, self.leaf_dtypes)
            ]
        return tree_util.tree_unflatten(self.treedef, leaves)
