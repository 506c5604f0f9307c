"""funcgrad.numpy.linalg: norms, and the products NumPy also lists here.

Norms that need singular values (ord=2, -2 and 'nuc' of a matrix) wait for an SVD.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes, lax
from funcgrad.numpy._promotion import convert, to_array
from funcgrad.numpy.linalg_ops import cross, matmul, matrix_transpose, outer, tensordot, vecdot
from funcgrad.numpy.reductions import count_nonzero, max, min, reduction_axes, scalar, sum
from funcgrad.numpy.shape_ops import canonicalize_axes
from funcgrad.numpy.ufuncs import absolute, power, sqrt

__all__ = [
    "cross",
    "matmul",
    "matrix_norm",
    "matrix_transpose",
    "norm",
    "outer",
    "tensordot",
    "vecdot",
    "vector_norm",
]


def _inexact(x):
    x = to_array(x)
    return x if dtypes.is_float(x.dtype) else convert(x, dtypes.default_float)


def norm(x, ord=None, axis: int | Sequence[int] | None = None, keepdims: bool = False):
    """NumPy's norm: a vector norm over one axis, a matrix norm over two.

    Without `axis`, a 1-d array has a vector norm and a 2-d array a matrix norm; with neither
    `axis` nor `ord`, the 2-norm of the flattened array is returned for any rank.
    """
    x = _inexact(x)
    if axis is None:
        if ord is None:
            return _vector_norm(x, 2, tuple(range(x.ndim)), keepdims)
        if x.ndim not in (1, 2):
            raise ValueError(
                f"norm: ord={ord!r} without axis needs a 1-d or 2-d array, got shape {x.shape}"
            )
        axis = tuple(range(x.ndim))
    axes = canonicalize_axes(axis, x.ndim, "norm")
    if len(axes) == 1:
        return _vector_norm(x, 2 if ord is None else ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, "fro" if ord is None else ord, axes, keepdims)
    raise ValueError(f"norm: axis must name one or two axes, got {axis}")


def vector_norm(x, /, *, axis: int | Sequence[int] | None = None, keepdims: bool = False, ord=2):
    """The vector norm over `axis` (all axes, flattened, by default)."""
    x = _inexact(x)
    return _vector_norm(x, ord, reduction_axes("vector_norm", axis, x.ndim), keepdims)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro"):
    """The matrix norm over the last two axes."""
    x = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_norm: needs at least two axes, got shape {x.shape}")
    return _matrix_norm(x, ord, (x.ndim - 2, x.ndim - 1), keepdims)


def _vector_norm(x, ord, axes: tuple[int, ...], keepdims: bool):
    magnitude = absolute(x)
    if ord == np.inf:
        return max(magnitude, axes, keepdims=keepdims, initial=0.0)
    if ord == -np.inf:
        return min(magnitude, axes, keepdims=keepdims)
    if ord == 0:
        return convert(count_nonzero(x, axes, keepdims=keepdims), x.dtype)
    if ord == 1:
        return sum(magnitude, axes, keepdims=keepdims)
    if ord == 2:
        return sqrt(sum(lax.mul(x, x), axes, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is not a vector norm")
    total = sum(power(magnitude, scalar(ord, x.dtype)), axes, keepdims=keepdims)
    return power(total, scalar(1 / ord, x.dtype))


def _matrix_norm(x, ord, axes: tuple[int, ...], keepdims: bool):
    rows, columns = axes
    if rows == columns:
        raise ValueError(f"norm: a matrix norm needs two different axes, got {axes}")
    if ord in ("fro", "f"):
        return sqrt(sum(lax.mul(x, x), axes, keepdims=keepdims))
    if ord in (2, -2, "nuc"):
        raise NotImplementedError(
            f"norm: the matrix norm ord={ord!r} needs singular values, and funcgrad has no SVD yet"
        )
    if ord in (1, -1):
        # The largest (smallest) column sum: sum over the rows, then over the columns.
        summed, over = rows, columns
    elif ord in (np.inf, -np.inf):
        summed, over = columns, rows
    else:
        raise ValueError(f"norm: ord={ord!r} is not a matrix norm")
    extremum = max if ord > 0 else min
    sums = sum(absolute(x), summed, keepdims=True)
    result = extremum(sums, over, keepdims=True)
    if keepdims:
        return result
    return lax.reshape(result, tuple(d for i, d in enumerate(x.shape) if i not in axes))
