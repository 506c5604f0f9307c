"""Numerics with gradients that stay finite: norms that never reach 0 (and so never divide
by it in their derivative) and step counters that saturate instead of wrapping around."""

from __future__ import annotations

from typing import Any

import funcgrad.numpy as fnp
from funcgrad.optim.base import abs_sq


def safe_norm(x, min_norm, ord=None, axis=None, keepdims: bool = False) -> Any:
    """The norm of x (fnp.linalg.norm's ord and axis), min_norm wherever that is smaller.
    Where it is, the norm is taken of ones instead, so its gradient is 0 rather than the NaN
    that d|x| / dx is at x = 0."""
    x = fnp.asarray(x)
    norm = fnp.linalg.norm(x, ord=ord, axis=axis, keepdims=True)
    small = norm <= min_norm
    safe_x = fnp.where(small, fnp.ones_like(x), x)
    if not keepdims:
        small = fnp.squeeze(small, axis=axis) if axis is not None else small.reshape(())
    return fnp.where(
        small, min_norm, fnp.linalg.norm(safe_x, ord=ord, axis=axis, keepdims=keepdims)
    )


def safe_root_mean_squares(x, min_rms) -> Any:
    """sqrt(mean(|x|**2)), min_rms where that is smaller, with a finite gradient there."""
    x = fnp.asarray(x)
    rms = fnp.sqrt(fnp.mean(abs_sq(x)))
    small = rms <= min_rms
    safe_x = fnp.where(small, fnp.ones_like(x), x)
    return fnp.where(small, min_rms, fnp.sqrt(fnp.mean(abs_sq(safe_x))))


def safe_increment(count) -> Any:
    """count + 1, staying at the dtype's largest value rather than wrapping around."""
    count = fnp.asarray(count)
    if fnp.issubdtype(count.dtype, fnp.integer):
        largest = fnp.iinfo(count.dtype).max
    elif fnp.issubdtype(count.dtype, fnp.floating):
        largest = fnp.finfo(count.dtype).max
    else:
        raise ValueError(
            f"safe_increment: the count must be an integer or a float, got {count.dtype}"
        )
    largest = fnp.asarray(largest, count.dtype)
    return fnp.where(count < largest, count + fnp.asarray(1, count.dtype), largest)


safe_int32_increment = safe_increment
