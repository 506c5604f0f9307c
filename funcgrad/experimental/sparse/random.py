"""Random BCOO arrays, for tests and benchmarks."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from funcgrad import dtypes, random
from funcgrad import numpy as fnp
from funcgrad.experimental.sparse.bcoo import BCOO
from funcgrad.transforms.vmap import vmap

__all__ = ["random_bcoo"]


def random_bcoo(
    key,
    shape: Sequence[int],
    *,
    dtype=None,
    indices_dtype=None,
    nse: float | int = 0.2,
    n_batch: int = 0,
    n_dense: int = 0,
    unique_indices: bool = True,
    sorted_indices: bool = False,
    generator: Callable[..., Any] = random.uniform,
    **kwds: Any,
) -> BCOO:
    """A BCOO array of `shape` whose every batch stores `nse` elements at random indices
    (distinct unless `unique_indices` is False), with values from `generator(key, shape=,
    dtype=, **kwds)`. `nse` between 0 and 1 is a fraction of the sparse positions."""
    shape = tuple(operator.index(s) for s in shape)
    n_batch, n_dense = operator.index(n_batch), operator.index(n_dense)
    n_sparse = len(shape) - n_batch - n_dense
    if n_batch < 0 or n_dense < 0 or n_sparse < 0:
        raise ValueError(
            f"random_bcoo: n_batch={n_batch} and n_dense={n_dense} must be non-negative and "
            f"together at most the rank of shape {shape}"
        )
    batch_shape = shape[:n_batch]
    sparse_shape = shape[n_batch : n_batch + n_sparse]
    dense_shape = shape[n_batch + n_sparse :]
    sparse_size = math.prod(sparse_shape)
    if not 0 <= nse < sparse_size:
        raise ValueError(
            f"random_bcoo: nse={nse} must lie in [0, {sparse_size}), the number of sparse "
            f"positions of shape {shape} with n_batch={n_batch} and n_dense={n_dense}"
        )
    if 0 < nse < 1:
        nse = math.ceil(nse * sparse_size)
    nse = operator.index(nse)
    dtype = dtypes.default_float if dtype is None else np.dtype(dtype)
    indices_dtype = dtypes.default_int if indices_dtype is None else np.dtype(indices_dtype)
    if sparse_size > np.iinfo(indices_dtype).max:
        raise ValueError(
            f"random_bcoo: {np.dtype(indices_dtype).name} indices cannot address the "
            f"{sparse_size} sparse positions of shape {shape}"
        )

    def batch_indices(batch_key):
        if not sparse_shape:
            return fnp.zeros((nse, 0), indices_dtype)
        offsets = random.choice(batch_key, sparse_size, (nse,), replace=not unique_indices)
        return fnp.stack(fnp.unravel_index(offsets, sparse_shape), axis=-1).astype(indices_dtype)

    keys = random.split(key, math.prod(batch_shape) + 1)
    data = generator(keys[0], shape=(*batch_shape, nse, *dense_shape), dtype=dtype, **kwds)
    indices = vmap(batch_indices)(keys[1:]).reshape(*batch_shape, nse, n_sparse)
    mat = BCOO((data, indices), shape=shape, unique_indices=unique_indices)
    return mat.sort_indices() if sorted_indices else mat
