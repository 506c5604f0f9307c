"""The automatic checks: errors checkify adds after the primitives that can fail silently.

`nan_checks` watch the primitives that can make a NaN (any NaN in a floating-point output),
`div_checks` divisions (a zero divisor), and `index_checks` the primitives that index with
run-time starts or indices, which clamp (or fill, or drop) what falls outside the operand.
Each check is an error built from the equation's operands and outputs, merged after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from funcgrad import dtypes
from funcgrad import numpy as fnp
from funcgrad.core import PRIMITIVES
from funcgrad.experimental.checkify.error import (
    DivisionByZeroError,
    DivisionFailure,
    Error,
    NaNError,
    NaNFailure,
    OOBError,
    OOBFailure,
    failure_error,
)
from funcgrad.ir import JaxprEqn

# Where a floating-point result may be NaN although its operands are not.
_NAN_PRIMITIVES = (
    "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "cbrt",
    "conv_general_dilated", "cos", "cosh", "cumlogsumexp", "cumprod", "cumsum", "digamma",
    "div", "dot_general", "erf", "erf_inv", "erfc", "exp", "exp2", "expm1", "fft",
    "integer_pow", "lgamma", "log", "log10", "log1p", "log2", "logistic", "mul", "pow",
    "reduce_prod", "reduce_sum", "reduce_window_sum", "rem", "rsqrt", "sin", "sinh", "sqrt",
    "sub", "tan", "tanh",
)  # fmt: skip


def _nan_error(eqn: JaxprEqn, invals, outs) -> Error | None:
    outs = outs if eqn.primitive.multiple_results else [outs]
    floats = [o for o in outs if dtypes.is_inexact(o.dtype)]
    if not floats:
        return None
    failed = fnp.any(fnp.stack([fnp.any(fnp.isnan(o)) for o in floats]))
    return failure_error(failed, NaNFailure(eqn.primitive.name, eqn.source_info))


def _division_error(eqn: JaxprEqn, invals, outs) -> Error:
    failed = fnp.any(fnp.equal(invals[1], 0))
    return failure_error(failed, DivisionFailure(eqn.primitive.name, eqn.source_info))


def _oob_error(eqn: JaxprEqn, operand_shape, starts, upper_bounds, axes) -> Error | None:
    """An index error where some start along the last axis of `starts` lies outside
    [0, upper_bounds], the starts of the windows that fit in the operand; `axes` gives the
    operand axis each entry of that last axis indexes. The payload names the first."""
    starts = fnp.asarray(starts, "int32")
    if starts.size == 0:
        return None
    outside = fnp.logical_or(starts < 0, starts > np.asarray(upper_bounds, np.int32))
    first = fnp.argmax(fnp.ravel(fnp.asarray(outside, "int32")))
    axis = fnp.asarray(np.asarray(axes, np.int32))[first % len(axes)]
    size = fnp.asarray(np.asarray(operand_shape, np.int32))[axis]
    payload = fnp.stack([fnp.ravel(starts)[first], axis, size])
    failure = OOBFailure(eqn.primitive.name, tuple(operand_shape), eqn.source_info)
    return failure_error(fnp.any(outside), failure, [payload])


def _dynamic_slice_error(eqn: JaxprEqn, invals, outs) -> Error | None:
    operand, *starts = invals
    shape = operand.shape
    upper = [n - s for n, s in zip(shape, eqn.params["slice_sizes"])]
    return _oob_error(eqn, shape, fnp.stack(starts), upper, range(len(shape))) if starts else None


def _dynamic_update_slice_error(eqn: JaxprEqn, invals, outs) -> Error | None:
    operand, update, *starts = invals
    shape = operand.shape
    upper = [n - s for n, s in zip(shape, update.shape)]
    return _oob_error(eqn, shape, fnp.stack(starts), upper, range(len(shape))) if starts else None


def _gather_error(eqn: JaxprEqn, invals, outs) -> Error | None:
    operand, indices = invals
    axes = eqn.params["dimension_numbers"].start_index_map
    sizes = eqn.params["slice_sizes"]
    upper = [operand.shape[d] - sizes[d] for d in axes]
    return _oob_error(eqn, operand.shape, indices, upper, axes)


def _scatter_error(eqn: JaxprEqn, invals, outs) -> Error | None:
    operand, indices, updates = invals[:3]
    dn = eqn.params["dimension_numbers"]
    # The window's size in each operand dimension: 1 where the updates have no window axis.
    window_axes = iter(dn.update_window_dims)
    window = [
        1
        if d in dn.inserted_window_dims or d in dn.operand_batching_dims
        else updates.shape[next(window_axes)]
        for d in range(operand.ndim)
    ]
    axes = dn.scatter_dims_to_operand_dims
    upper = [operand.shape[d] - window[d] for d in axes]
    return _oob_error(eqn, operand.shape, indices, upper, axes)


_CHECKS: dict[str, list[tuple[type, Callable]]] = {}
for _name in _NAN_PRIMITIVES:
    _CHECKS.setdefault(_name, []).append((NaNError, _nan_error))
_CHECKS["div"].insert(0, (DivisionByZeroError, _division_error))
_CHECKS["dynamic_slice"] = [(OOBError, _dynamic_slice_error)]
_CHECKS["dynamic_update_slice"] = [(OOBError, _dynamic_update_slice_error)]
_CHECKS["gather"] = [(OOBError, _gather_error)]
for _name in ("scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max"):
    _CHECKS[_name] = [(OOBError, _scatter_error)]
_BY_PRIMITIVE = {PRIMITIVES[name]: checks for name, checks in _CHECKS.items()}


def errors(eqn: JaxprEqn, invals, outs, enabled: frozenset) -> Iterator[Error]:
    """The errors of the enabled checks watching `eqn`'s primitive, in the order they merge."""
    for category, make in _BY_PRIMITIVE.get(eqn.primitive, ()):
        if category in enabled:
            error = make(eqn, invals, outs)
            if error is not None:
                yield error
