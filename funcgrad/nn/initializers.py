"""Parameter initializers with JAX's `nn.initializers` names.

Each function returns an initializer `init(key, shape, dtype=float)` (the default float).
Fans follow JAX's convention: a kernel's last axis is its output axis and the one before it
its input axis (`in_axis=-2`, `out_axis=-1`); the remaining axes (a convolution's window)
multiply both fans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import funcgrad.numpy as fnp
from funcgrad import random

Initializer = Callable[..., object]
_DEFAULT = float  # the default float: float32, or float64 under enable_x64


def zeros(key, shape: Sequence[int], dtype=_DEFAULT):
    return fnp.zeros(shape, dtype)


def ones(key, shape: Sequence[int], dtype=_DEFAULT):
    return fnp.ones(shape, dtype)


def constant(value, dtype=_DEFAULT) -> Initializer:
    def init(key, shape: Sequence[int], dtype=dtype):
        return fnp.full(shape, value, dtype)

    return init


def normal(stddev: float = 1e-2, dtype=_DEFAULT) -> Initializer:
    def init(key, shape: Sequence[int], dtype=dtype):
        return random.normal(key, shape, dtype) * stddev

    return init


def uniform(scale: float = 1e-2, dtype=_DEFAULT) -> Initializer:
    """Uniform on [0, scale), as JAX's."""

    def init(key, shape: Sequence[int], dtype=dtype):
        return random.uniform(key, shape, dtype) * scale

    return init


def truncated_normal(stddev: float = 1e-2, dtype=_DEFAULT, lower=-2.0, upper=2.0) -> Initializer:
    def init(key, shape: Sequence[int], dtype=dtype):
        return random.truncated_normal(key, lower, upper, shape, dtype) * stddev

    return init


def _fans(shape: Sequence[int], in_axis: int, out_axis: int) -> tuple[float, float]:
    if len(shape) < 2:
        raise ValueError(
            f"variance scaling needs a kernel of at least 2 dimensions to find its fans, "
            f"got shape {tuple(shape)}"
        )
    in_axis, out_axis = in_axis % len(shape), out_axis % len(shape)
    receptive = math.prod(d for k, d in enumerate(shape) if k not in (in_axis, out_axis))
    return shape[in_axis] * receptive, shape[out_axis] * receptive


# The standard deviation of a standard normal truncated to [-2, 2]: dividing by it keeps the
# truncated initializer's variance at the one asked for.
_TRUNCATED_STDDEV = 0.87962566103423978


def variance_scaling(
    scale: float,
    mode: str,
    distribution: str,
    in_axis: int = -2,
    out_axis: int = -1,
    dtype=_DEFAULT,
) -> Initializer:
    """Samples with variance scale / n, n the fan in, the fan out or their mean (`mode`
    "fan_in", "fan_out", "fan_avg"), from a "truncated_normal", "normal" or "uniform"
    distribution."""
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"variance_scaling: mode must be fan_in, fan_out or fan_avg, got {mode!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(
            "variance_scaling: distribution must be truncated_normal, normal or uniform, "
            f"got {distribution!r}"
        )

    def init(key, shape: Sequence[int], dtype=dtype):
        fan_in, fan_out = _fans(shape, in_axis, out_axis)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = scale / max(n, 1)
        if distribution == "normal":
            return random.normal(key, shape, dtype) * math.sqrt(variance)
        if distribution == "truncated_normal":
            stddev = math.sqrt(variance) / _TRUNCATED_STDDEV
            return random.truncated_normal(key, -2.0, 2.0, shape, dtype) * stddev
        limit = math.sqrt(3 * variance)
        return random.uniform(key, shape, dtype, -limit, limit)

    return init


def glorot_normal(in_axis=-2, out_axis=-1, dtype=_DEFAULT) -> Initializer:
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, dtype)


def glorot_uniform(in_axis=-2, out_axis=-1, dtype=_DEFAULT) -> Initializer:
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, dtype=_DEFAULT) -> Initializer:
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, dtype)


def he_uniform(in_axis=-2, out_axis=-1, dtype=_DEFAULT) -> Initializer:
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, dtype=_DEFAULT) -> Initializer:
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, dtype=_DEFAULT) -> Initializer:
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, dtype)


xavier_normal, xavier_uniform = glorot_normal, glorot_uniform
kaiming_normal, kaiming_uniform = he_normal, he_uniform


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=_DEFAULT) -> Initializer:
    """A matrix with orthonormal rows or columns (whichever there are fewer of), times
    `scale`; other shapes are reshaped to (everything else, shape[column_axis])."""

    def init(key, shape: Sequence[int], dtype=dtype):
        if len(shape) < 2:
            raise ValueError(f"orthogonal needs at least 2 dimensions, got shape {tuple(shape)}")
        columns = shape[column_axis]
        rows = math.prod(shape) // columns
        wide = max(rows, columns), min(rows, columns)
        q, r = fnp.linalg.qr(random.normal(key, wide, dtype))
        q = q * fnp.sign(fnp.diagonal(r))  # the sign fix makes the distribution uniform
        matrix = q if rows >= columns else q.T
        matrix = matrix.reshape(
            *(d for k, d in enumerate(shape) if k != column_axis % len(shape)), columns
        )
        return fnp.moveaxis(matrix, -1, column_axis) * scale

    return init


def delta_orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=_DEFAULT) -> Initializer:
    """A convolution kernel (window axes, then input and output channels) that is zero but at
    its window's centre, where it is an `orthogonal` matrix of the channels: a convolution by it
    starts as an orthogonal map, so signals keep their norm through a deep convolutional net at
    initialization (Xiao et al. 2018, "Dynamical Isometry and a Mean Field Theory of CNNs")."""
    channels = orthogonal(scale, column_axis, dtype)

    def init(key, shape: Sequence[int], dtype=dtype):
        if len(shape) not in (3, 4, 5):
            raise ValueError(
                "delta_orthogonal needs a 3, 4 or 5 dimensional kernel shape (1 to 3 window axes, "
                f"then input and output channels), got shape {tuple(shape)}"
            )
        if shape[-1] < shape[-2]:
            raise ValueError(
                "delta_orthogonal needs at least as many output channels (shape[-1]) as input "
                f"channels (shape[-2]), got shape {tuple(shape)}"
            )
        centre = tuple((size - 1) // 2 for size in shape[:-2])
        return fnp.zeros(shape, dtype).at[centre].set(channels(key, shape[-2:], dtype))

    return init
