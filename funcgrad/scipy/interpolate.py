"""funcgrad.scipy.interpolate: `RegularGridInterpolator`, linear or nearest-neighbour
interpolation on a rectilinear grid.

The interpolator is a pytree (its grid, values and fill value are its leaves), so it can be
built inside a jitted function, passed into one, and differentiated with respect to its
values and the query points.
"""

from __future__ import annotations

import itertools

import numpy as np

from funcgrad import core, dtypes
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.numpy._promotion import convert, promote_dtypes_inexact
from funcgrad.tree_util import register_pytree_node

__all__ = ["RegularGridInterpolator"]

_METHODS = ("linear", "nearest")


def _check_method(method: str) -> None:
    if method not in _METHODS:
        raise ValueError(
            f"RegularGridInterpolator: method must be one of {_METHODS}, got {method!r}"
        )


class RegularGridInterpolator:
    """Interpolation of `values` given at the points of a grid: `points` holds each axis's
    strictly ascending coordinates, and values has one axis per entry of points (and any
    trailing axes, interpolated alike). Query points beyond the grid get `fill_value`, or are
    extrapolated when it is None. `bounds_error` must be False: a compiled program cannot
    raise on the values it computes."""

    def __init__(self, points, values, method: str = "linear", bounds_error: bool = False,
                 fill_value=np.nan):  # fmt: skip
        _check_method(method)
        if bounds_error:
            raise NotImplementedError(
                "RegularGridInterpolator: bounds_error=True is not supported, as a compiled "
                "program cannot raise on the query points; use bounds_error=False and a "
                "fill_value (NaN by default)"
            )
        (values,) = promote_dtypes_inexact(values)
        if len(points) > values.ndim:
            raise ValueError(
                f"RegularGridInterpolator: {len(points)} point arrays for values of shape "
                f"{values.shape}"
            )
        grid = []
        for axis, p in enumerate(points):
            p = fnp.asarray(p)
            if p.ndim != 1 or p.shape[0] != values.shape[axis]:
                raise ValueError(
                    f"RegularGridInterpolator: points[{axis}] must be 1-d with "
                    f"{values.shape[axis]} entries (values' axis {axis}), got shape {p.shape}"
                )
            if p.shape[0] == 0:
                raise ValueError(f"RegularGridInterpolator: points[{axis}] is empty")
            if not isinstance(p, core.Tracer) and np.any(np.diff(np.asarray(p)) <= 0):
                raise ValueError(
                    f"RegularGridInterpolator: points[{axis}] must be strictly ascending"
                )
            grid.append(p)
        if fill_value is not None:
            if dtypes.is_complex(fnp.asarray(fill_value).dtype) and not dtypes.is_complex(
                values.dtype
            ):
                raise ValueError(
                    f"RegularGridInterpolator: a complex fill_value for {values.dtype} values"
                )
            fill_value = fnp.asarray(fill_value, dtype=values.dtype)
        self.method = method
        self.bounds_error = bounds_error
        self.grid = tuple(grid)
        self.values = values
        self.fill_value = fill_value

    def __call__(self, xi, method: str | None = None) -> Array:
        """The interpolant at the points xi: an array (..., ndim), or a tuple of ndim arrays
        of coordinates that broadcast together. The result has xi's leading shape followed by
        values' trailing axes."""
        method = self.method if method is None else method
        _check_method(method)
        ndim = len(self.grid)
        if method == "linear":
            for axis, g in enumerate(self.grid):
                if g.shape[0] < 2:
                    raise ValueError(
                        f"RegularGridInterpolator: method 'linear' needs at least 2 points along "
                        f"each axis, axis {axis} has {g.shape[0]}"
                    )
        if isinstance(xi, tuple):
            if len(xi) == 1:
                xi = xi[0]
            else:
                xi = fnp.stack(fnp.broadcast_arrays(*xi), axis=-1)
        xi = fnp.asarray(xi)
        if xi.ndim == 1:
            xi = fnp.reshape(xi, (-1, ndim))
        if xi.shape[-1] != ndim:
            raise ValueError(
                f"RegularGridInterpolator: the query points have {xi.shape[-1]} coordinates, "
                f"the grid has {ndim} axes"
            )
        if dtypes.is_complex(xi.dtype):
            raise TypeError(
                f"RegularGridInterpolator: the query points must be real, got {xi.dtype}"
            )
        leading = xi.shape[:-1]
        xi, values = promote_dtypes_inexact(fnp.reshape(xi, (-1, ndim)), self.values)
        # (complex values promote the points to complex too; their coordinates stay real)
        xi = fnp.real(xi)
        coordinates = [xi[:, axis] for axis in range(ndim)]
        lowers, fractions = zip(*(_cell(x, g) for x, g in zip(coordinates, self.grid)))
        if method == "linear":
            result = _linear(values, lowers, fractions)
        else:
            nearest = tuple(fnp.where(t <= 0.5, i, i + 1) for i, t in zip(lowers, fractions))
            result = values[nearest]
        trailing = (slice(None),) + (None,) * (values.ndim - ndim)
        outside = fnp.zeros(xi.shape[:1], dtypes.bool_)
        for x, g in zip(coordinates, self.grid):
            outside = outside | (x < g[0]) | (x > g[-1])
        if self.fill_value is not None:
            fill = convert(self.fill_value, result.dtype)
            result = fnp.where(outside[trailing], fill, result)
        result = fnp.where(fnp.any(fnp.isnan(xi), axis=-1)[trailing], np.nan, result)
        return fnp.reshape(result, leading + values.shape[ndim:])


def _cell(x, grid):
    """The index of the grid cell holding x (the first or last cell beyond the grid) and x's
    position across it, 0 at its lower edge and 1 at its upper."""
    size = grid.shape[0]
    if size == 1:
        return fnp.zeros(x.shape, dtypes.int32), fnp.zeros_like(x)
    lower = fnp.clip(fnp.searchsorted(grid, x) - 1, 0, size - 2)
    low, high = grid[lower], grid[lower + 1]
    return lower, (x - low) / convert(high - low, x.dtype)


def _linear(values, lowers, fractions):
    trailing = (slice(None),) + (None,) * (values.ndim - len(lowers))
    result = None
    for corner in itertools.product((0, 1), repeat=len(lowers)):
        weight = None
        for upper, t in zip(corner, fractions):
            factor = t if upper else 1 - t
            weight = factor if weight is None else weight * factor
        term = values[tuple(i + upper for i, upper in zip(lowers, corner))] * weight[trailing]
        result = term if result is None else result + term
    return result


def _flatten(interpolator: RegularGridInterpolator):
    children = (interpolator.grid, interpolator.values, interpolator.fill_value)
    return children, (interpolator.method, interpolator.bounds_error)


def _unflatten(aux, children) -> RegularGridInterpolator:
    interpolator = object.__new__(RegularGridInterpolator)
    interpolator.method, interpolator.bounds_error = aux
    interpolator.grid, interpolator.values, interpolator.fill_value = children
    return interpolator


register_pytree_node(RegularGridInterpolator, _flatten, _unflatten)
