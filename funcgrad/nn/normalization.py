"""Per-example norms over groups of channels: GroupNorm, and InstanceNorm (one channel per
group). Unlike BatchNorm their statistics never mix examples, so they behave the same in
training and inference and with a batch of one.
"""

from __future__ import annotations

from typing import Any

import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.nn.layers import _FLOAT, _statistics_input
from funcgrad.nn.module import Module, field
from funcgrad.numpy._promotion import promote_args_inexact


class GroupNorm(Module):
    """Splits the channels (on `axis`, the last by default) into `num_groups` groups of
    consecutive channels and normalizes each example's group by the mean and (biased) variance
    over its channels and every spatial axis, then scales and shifts per channel. The first
    axis is the batch: the input is (batch, ..., channels), so a single example needs a batch
    axis of one."""

    weight: Any
    bias: Any
    num_groups: int = field(static=True)
    num_channels: int = field(static=True)
    eps: float = field(static=True)
    axis: int = field(static=True)

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        use_weight: bool = True,
        use_bias: bool = True,
        axis: int = -1,
        dtype=_FLOAT,
    ):
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(
                f"{type(self).__name__}: num_groups={num_groups} must divide "
                f"num_channels={num_channels}"
            )
        self.num_groups, self.num_channels, self.eps, self.axis = (
            num_groups,
            num_channels,
            eps,
            axis,
        )
        self.weight = fnp.ones(num_channels, dtype) if use_weight else None
        self.bias = fnp.zeros(num_channels, dtype) if use_bias else None

    def __call__(self, x, *, key=None):
        x = fnp.asarray(x)
        name = f"{type(self).__name__}(num_channels={self.num_channels}, axis={self.axis})"
        if x.ndim < 2 or not -x.ndim <= self.axis < x.ndim or self.axis % x.ndim == 0:
            raise ValueError(
                f"{name}: expected (batch, ..., channels) with the channels on axis {self.axis} "
                f"after the batch axis, got shape {tuple(x.shape)}"
            )
        axis = self.axis % x.ndim
        if x.shape[axis] != self.num_channels:
            raise ValueError(
                f"{name}: expected {self.num_channels} channels on axis {self.axis}, "
                f"got shape {tuple(x.shape)}"
            )
        (x,) = promote_args_inexact(type(self).__name__, x)
        # Channels last, then split into (groups, channels per group): the statistics reduce
        # every axis but the batch and the group.
        wide = fnp.moveaxis(_statistics_input(x), axis, -1)
        moved_shape = wide.shape
        grouped = wide.reshape(*moved_shape[:-1], self.num_groups, -1)
        reduced = (*range(1, grouped.ndim - 2), grouped.ndim - 1)
        mean = grouped.mean(axis=reduced, keepdims=True)
        variance = ((grouped - mean) ** 2).mean(axis=reduced, keepdims=True)
        y = ((grouped - mean) * lax.rsqrt(variance + self.eps)).reshape(moved_shape)
        y = fnp.moveaxis(y.astype(x.dtype), -1, axis)
        shape = [1] * x.ndim
        shape[axis] = self.num_channels
        if self.weight is not None:
            y = y * self.weight.reshape(shape)
        return y if self.bias is None else y + self.bias.reshape(shape)


class InstanceNorm(GroupNorm):
    """GroupNorm with one channel per group: each example's channel is normalized over its
    spatial axes alone."""

    def __init__(
        self,
        num_channels: int,
        eps: float = 1e-5,
        use_weight: bool = True,
        use_bias: bool = True,
        axis: int = -1,
        dtype=_FLOAT,
    ):
        super().__init__(num_channels, num_channels, eps, use_weight, use_bias, axis, dtype)
