"""ravel_pytree: a pytree of arrays as one flat vector, and the way back.

Solvers that think in vectors (an ODE integrator's stages, a Krylov basis) work on the flat
vector while their users keep whatever structure suits the problem.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from funcgrad import numpy as fnp
from funcgrad import tree_util
from funcgrad.array import Array

__all__ = ["ravel_pytree"]


def ravel_pytree(pytree) -> tuple[Array, Callable]:
    """(flat, unravel): the leaves raveled and joined into one vector of their common dtype,
    and a function taking such a vector back to the pytree, each leaf in its own dtype."""
    leaves, treedef = tree_util.tree_flatten(pytree)
    leaves = [fnp.asarray(leaf) for leaf in leaves]
    shapes = [leaf.shape for leaf in leaves]
    leaf_dtypes = [leaf.dtype for leaf in leaves]
    sizes = [math.prod(shape) for shape in shapes]
    dtype = fnp.result_type(*leaves) if leaves else fnp.float32
    if leaves:
        flat = fnp.concatenate([fnp.ravel(leaf).astype(dtype) for leaf in leaves])
    else:
        flat = fnp.zeros((0,), dtype)
    total = sum(sizes)
    offsets = np.cumsum([0, *sizes])

    def unravel(vector) -> object:
        vector = fnp.asarray(vector)
        if vector.shape != (total,):
            raise ValueError(
                f"unravel expects a vector of shape ({total},) for this pytree, "
                f"got shape {vector.shape}"
            )
        parts = [
            vector[start:stop].reshape(shape).astype(leaf_dtype)
            for start, stop, shape, leaf_dtype in zip(
                offsets[:-1], offsets[1:], shapes, leaf_dtypes
            )
        ]
        return tree_util.tree_unflatten(treedef, parts)

    return flat, unravel
