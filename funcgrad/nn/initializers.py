"""Parameter initializers with JAX's `nn.initializers` names.

Each function returns an initializer `init(key, shape, dtype=float)` (the default float).
Fans follow JAX's convention: a kernel's last axis is its output axis and the one before it
its input axis (`in_axis=-2`, `out_axis=-1`; either may name several axes); the remaining
axes other than `batch_axis` (a convolution's window) multiply both fans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import funcgrad.numpy as fnp
from funcgrad import random

Initializer = Callable[..., object]
Axes = int | Sequence[int]
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


def _fans(
    shape: Sequence[int], in_axis: Axes, out_axis: Axes, batch_axis: Axes = ()
) -> tuple[float, float]:
    """(fan in, fan out): the sizes of the input and output axes, each times the receptive
    field, the size of the axes that are neither these nor batch axes."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) < 2:
        raise ValueError(
            f"variance scaling needs a kernel of at least 2 dimensions to find its fans, "
            f"got shape {tuple(shape)} (or name its in_axis)"
        )

    def size(axes: Axes) -> int:
        return math.prod(shape[a] for a in ((axes,) if isinstance(axes, int) else axes))

    sizes = size(in_axis), size(out_axis), size(batch_axis)
    receptive = math.prod(shape) / math.prod(sizes) if math.prod(sizes) else 0
    return sizes[0] * receptive, sizes[1] * receptive


# The standard deviation of a standard normal truncated to [-2, 2]: dividing by it keeps the
# truncated initializer's variance at the one asked for.
_TRUNCATED_STDDEV = 0.87962566103423978


def variance_scaling(
    scale: float,
    mode: str,
    distribution: str,
    in_axis: Axes = -2,
    out_axis: Axes = -1,
    batch_axis: Axes = (),
    dtype=_DEFAULT,
) -> Initializer:
    """Samples with variance scale / n, n the fan in, the fan out, their mean or their
    geometric mean (`mode` "fan_in", "fan_out", "fan_avg", "fan_geo_avg"), from a
    "truncated_normal", "normal" or "uniform" distribution. Each axis argument may name
    several axes."""
    modes = ("fan_in", "fan_out", "fan_avg", "fan_geo_avg")
    if mode not in modes:
        raise ValueError(f"variance_scaling: mode must be one of {modes}, got {mode!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(
            "variance_scaling: distribution must be truncated_normal, normal or uniform, "
            f"got {distribution!r}"
        )

    def init(key, shape: Sequence[int], dtype=dtype):
        fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
        n = {
            "fan_in": fan_in,
            "fan_out": fan_out,
            "fan_avg": (fan_in + fan_out) / 2,
            "fan_geo_avg": math.sqrt(fan_in * fan_out),
        }[mode]
        variance = scale / max(n, 1)
        if distribution == "normal":
            return random.normal(key, shape, dtype) * math.sqrt(variance)
        if distribution == "truncated_normal":
            stddev = math.sqrt(variance) / _TRUNCATED_STDDEV
            return random.truncated_normal(key, -2.0, 2.0, shape, dtype) * stddev
        limit = math.sqrt(3 * variance)
        return random.uniform(key, shape, dtype, -limit, limit)

    return init


def glorot_normal(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype=_DEFAULT
) -> Initializer:
    return variance_scaling(
        1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis, dtype
    )


def glorot_uniform(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype=_DEFAULT
) -> Initializer:
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype=_DEFAULT
) -> Initializer:
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def he_uniform(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype=_DEFAULT
) -> Initializer:
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype=_DEFAULT
) -> Initializer:
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def lecun_uniform(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype=_DEFAULT
) -> Initializer:
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


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
