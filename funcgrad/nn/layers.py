"""Layers: modules holding parameters, called on arrays.

Constructors that create parameters take a PRNG key by keyword (`key=`); calls that need
randomness (Dropout, and Sequential passing it on) take one too. Layers accept a single example
or a batch where the leading axes are free (Linear, norms, attention) and convolutions accept
an input with or without its batch axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import funcgrad.numpy as fnp
from funcgrad import dtypes, lax, random
from funcgrad.nn import functions as F
from funcgrad.nn import initializers
from funcgrad.nn.module import Module, field
from funcgrad.numpy._promotion import convert, promote_args_inexact

_FLOAT = float  # float32, or float64 under enable_x64


def _check_trailing(layer: str, x, expected: int, what: str) -> None:
    if x.ndim < 1 or x.shape[-1] != expected:
        raise ValueError(
            f"{layer}: expected an input whose last axis ({what}) has size {expected}, "
            f"got shape {tuple(x.shape)}"
        )


class Linear(Module):
    """y = x @ weight + bias on (..., in_features); weight is (in_features, out_features)."""

    weight: Any
    bias: Any
    in_features: int = field(static=True)
    out_features: int = field(static=True)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        key,
        weight_init=None,
        bias_init=initializers.zeros,
        dtype=_FLOAT,
    ):
        weight_key, bias_key = random.split(key)
        weight_init = weight_init or initializers.lecun_normal()
        self.weight = weight_init(weight_key, (in_features, out_features), dtype)
        self.bias = bias_init(bias_key, (out_features,), dtype) if use_bias else None
        self.in_features, self.out_features = in_features, out_features

    def __call__(self, x, *, key=None):
        x = fnp.asarray(x)
        _check_trailing(f"Linear(in_features={self.in_features})", x, self.in_features, "features")
        y = x @ self.weight
        return y if self.bias is None else y + self.bias


class Embedding(Module):
    """Rows of a (num_embeddings, features) table picked by integer ids of any shape."""

    weight: Any

    def __init__(self, num_embeddings: int, features: int, *, key, init=None, dtype=_FLOAT):
        self.weight = (init or initializers.normal(1.0))(key, (num_embeddings, features), dtype)

    def __call__(self, ids, *, key=None):
        ids = fnp.asarray(ids)
        if not np.issubdtype(np.dtype(ids.dtype), np.integer):
            raise TypeError(f"Embedding: ids must be integers, got {np.dtype(ids.dtype).name}")
        return fnp.take(self.weight, ids, axis=0)


# -- convolutions -------------------------------------------------------------------------------


def _tuple(value, n: int, name: str) -> tuple:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n:
        raise ValueError(f"{name} must be an int or {n} ints, got {value}")
    return value


def _padding(padding, n: int):
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"padding must be 'SAME', 'VALID', an int or pairs, got {padding!r}")
        return padding.upper()
    if isinstance(padding, int):
        return ((padding, padding),) * n
    pairs = tuple(tuple(p) if not isinstance(p, int) else (p, p) for p in padding)
    if len(pairs) != n:
        raise ValueError(f"padding needs {n} entries, got {padding}")
    return pairs


_LAYOUTS = {
    1: {"NWC": ("NWC", "WIO", "NWC"), "NCW": ("NCW", "WIO", "NCW")},
    2: {"NHWC": ("NHWC", "HWIO", "NHWC"), "NCHW": ("NCHW", "HWIO", "NCHW")},
    3: {"NDHWC": ("NDHWC", "DHWIO", "NDHWC"), "NCDHW": ("NCDHW", "DHWIO", "NCDHW")},
}


class _Conv(Module):
    """An N-d convolution; the kernel is (*window, in_channels / groups, out_channels)."""

    weight: Any
    bias: Any
    in_channels: int = field(static=True)
    out_channels: int = field(static=True)
    kernel_size: tuple = field(static=True)
    stride: tuple = field(static=True)
    padding: Any = field(static=True)
    dilation: tuple = field(static=True)
    groups: int = field(static=True)
    data_format: str = field(static=True)

    spatial = 0  # set by the subclasses

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        *,
        stride=1,
        padding="SAME",
        dilation=1,
        groups: int = 1,
        use_bias: bool = True,
        data_format: str | None = None,
        key,
        weight_init=None,
        dtype=_FLOAT,
    ):
        n = self.spatial
        layouts = _LAYOUTS[n]
        data_format = data_format or next(iter(layouts))
        if data_format not in layouts:
            raise ValueError(
                f"{type(self).__name__}: data_format must be one of {list(layouts)}, "
                f"got {data_format!r}"
            )
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{type(self).__name__}: groups={groups} must divide in_channels={in_channels} "
                f"and out_channels={out_channels}"
            )
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride = _tuple(stride, n, "stride")
        self.dilation = _tuple(dilation, n, "dilation")
        self.padding = _padding(padding, n)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.data_format = data_format
        weight_key, bias_key = random.split(key)
        shape = (*self.kernel_size, in_channels // groups, out_channels)
        self.weight = (weight_init or initializers.lecun_normal())(weight_key, shape, dtype)
        self.bias = fnp.zeros(out_channels, dtype) if use_bias else None

    def _describe(self) -> str:
        return (
            f"{type(self).__name__}(in_channels={self.in_channels}, data_format={self.data_format})"
        )

    def _batched(self, x):
        """x with a batch axis, and whether one was added."""
        x = fnp.asarray(x)
        n = self.spatial
        if x.ndim not in (n + 1, n + 2):
            raise ValueError(
                f"{self._describe()}: expected an input of {n + 2} dimensions "
                f"({self.data_format}) or {n + 1} without the batch axis, "
                f"got shape {tuple(x.shape)}"
            )
        unbatched = x.ndim == n + 1
        x = x[None] if unbatched else x
        channels = x.shape[self.data_format.index("C")]
        if channels != self.in_channels:
            raise ValueError(
                f"{self._describe()}: expected {self.in_channels} channels, got shape "
                f"{tuple(x.shape[1:] if unbatched else x.shape)} with {channels}"
            )
        return x, unbatched

    def _with_bias(self, y):
        if self.bias is None:
            return y
        if self.data_format.endswith("C"):
            return y + self.bias
        return y + self.bias.reshape(-1, *([1] * self.spatial))

    def __call__(self, x, *, key=None):
        x, unbatched = self._batched(x)
        x, weight = _promoted(x, self.weight)
        y = lax.conv_general_dilated(
            x,
            weight,
            self.stride,
            self.padding,
            rhs_dilation=self.dilation,
            dimension_numbers=_LAYOUTS[self.spatial][self.data_format],
            feature_group_count=self.groups,
        )
        y = self._with_bias(y)
        return y[0] if unbatched else y


class Conv1d(_Conv):
    """1-d convolution on (N, W, C) ("NWC", the default) or (N, C, W) ("NCW")."""

    spatial = 1


class Conv2d(_Conv):
    """2-d convolution on (N, H, W, C) ("NHWC", the default) or (N, C, H, W) ("NCHW")."""

    spatial = 2


class Conv3d(_Conv):
    """3-d convolution on (N, D, H, W, C) ("NDHWC", the default) or (N, C, D, H, W)
    ("NCDHW")."""

    spatial = 3


class _ConvTranspose(_Conv):
    """The transpose of the convolution with the same arguments (the gradient of a strided
    convolution with respect to its input, as a layer): it upsamples by `stride`. With padding
    "SAME" the output is input size times stride; `output_padding` adds positions at the end
    of each spatial axis. With `groups`, input channel group g feeds only output channel group
    g, through kernel columns g * out_channels / groups onwards (the kernel is (*window,
    in_channels / groups, out_channels), as Conv's); that is the transpose of the grouped
    convolution whose kernel has each group's channel axes swapped."""

    output_padding: tuple = field(static=True)

    def __init__(self, in_channels: int, out_channels: int, kernel_size, *, output_padding=0, **kw):
        super().__init__(in_channels, out_channels, kernel_size, **kw)
        self.output_padding = _tuple(output_padding, self.spatial, "output_padding")

    def __call__(self, x, *, key=None):
        x, unbatched = self._batched(x)
        window = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, self.dilation)]
        if self.padding == "SAME":
            pads = []
            for w, s, extra in zip(window, self.stride, self.output_padding):
                # The convolution of an input of size n * s pads it by max(w - s, 0), the
                # smaller half first; its transpose pads by w - 1 less that on each side,
                # plus s - 1 at the end, so the output is exactly input * stride.
                forward_low = max(w - s, 0) // 2
                total = w + s - 2
                pads.append((w - 1 - forward_low, total - (w - 1 - forward_low) + extra))
        elif self.padding == "VALID":
            pads = [(w - 1, w - 1 + extra) for w, extra in zip(window, self.output_padding)]
        else:
            pads = [
                (w - 1 - lo, w - 1 - hi + extra)
                for w, (lo, hi), extra in zip(window, self.padding, self.output_padding)
            ]
        x, weight = _promoted(x, self.weight)
        y = lax.conv_general_dilated(
            x,
            fnp.flip(weight, axis=tuple(range(self.spatial))),
            (1,) * self.spatial,
            pads,
            lhs_dilation=self.stride,
            rhs_dilation=self.dilation,
            dimension_numbers=_LAYOUTS[self.spatial][self.data_format],
            feature_group_count=self.groups,
        )
        y = self._with_bias(y)
        return y[0] if unbatched else y


class ConvTranspose1d(_ConvTranspose):
    """The transpose of Conv1d; layouts as Conv1d's."""

    spatial = 1


class ConvTranspose2d(_ConvTranspose):
    """The transpose of Conv2d; layouts as Conv2d's."""

    spatial = 2


class ConvTranspose3d(_ConvTranspose):
    """The transpose of Conv3d; layouts as Conv3d's."""

    spatial = 3


def _promoted(x, weight) -> tuple:
    """An input and a kernel of one dtype, promoted as NumPy's functions promote (lax's
    convolution takes one dtype)."""
    dtype = fnp.result_type(x, weight)
    return convert(x, dtype), convert(weight, dtype)


# -- pooling ------------------------------------------------------------------------------------


def _pool(x, init, combine, window_shape, strides, padding, name: str):
    x = fnp.asarray(x)
    window_shape = tuple(window_shape)
    strides = tuple(strides) if strides is not None else window_shape
    n = len(window_shape)
    if x.ndim not in (n + 1, n + 2):
        raise ValueError(
            f"{name}: a window of {n} dimensions needs an input of {n + 2} dimensions "
            f"(batch, *spatial, features) or {n + 1}, got shape {tuple(x.shape)}"
        )
    unbatched = x.ndim == n + 1
    x = x[None] if unbatched else x
    padding = padding if isinstance(padding, str) else ((0, 0), *padding, (0, 0))
    y = lax.reduce_window(x, init, combine, (1, *window_shape, 1), (1, *strides, 1), padding)
    return y, unbatched


def max_pool(x, window_shape: Sequence[int], strides=None, padding="VALID"):
    """Maximum over windows of the spatial axes of (batch, *spatial, features)."""
    y, unbatched = _pool(x, -np.inf, lax.max, window_shape, strides, padding, "max_pool")
    return y[0] if unbatched else y


def avg_pool(x, window_shape: Sequence[int], strides=None, padding="VALID"):
    """Mean over windows of the spatial axes of (batch, *spatial, features); padding counts
    as zeros in the mean, as JAX's."""
    y, unbatched = _pool(x, 0.0, lax.add, window_shape, strides, padding, "avg_pool")
    y = y / math.prod(window_shape)
    return y[0] if unbatched else y


class _Pool(Module):
    """A pooling layer over the spatial axes of (batch, *spatial, features) or of one
    example; `window_shape` and `strides` take an int for every axis alike."""

    window_shape: tuple = field(static=True)
    strides: Any = field(static=True)
    padding: Any = field(static=True)

    spatial = 0  # set by the subclasses

    def __init__(self, window_shape, strides=None, padding="VALID"):
        name = type(self).__name__
        self.window_shape = _tuple(window_shape, self.spatial, f"{name}: window_shape")
        if strides is not None:
            strides = _tuple(strides, self.spatial, f"{name}: strides")
        self.strides = strides
        self.padding = _padding(padding, self.spatial)


class _MaxPool(_Pool):
    def __call__(self, x, *, key=None):
        return max_pool(x, self.window_shape, self.strides, self.padding)


class _AvgPool(_Pool):
    def __call__(self, x, *, key=None):
        return avg_pool(x, self.window_shape, self.strides, self.padding)


class MaxPool1d(_MaxPool):
    spatial = 1


class MaxPool2d(_MaxPool):
    spatial = 2


class MaxPool3d(_MaxPool):
    spatial = 3


class AvgPool1d(_AvgPool):
    spatial = 1


class AvgPool2d(_AvgPool):
    spatial = 2


class AvgPool3d(_AvgPool):
    spatial = 3


# -- normalization ------------------------------------------------------------------------------


def _statistics_input(x):
    """x in at least float32, for the statistics of the norms: a float16 or bfloat16 mean
    is rounded to the input's precision, which for inputs of mean 1 and deviation 0.1 in
    bfloat16 shifted whole rows by 0.016 after normalization (as Flax, not as the dtype)."""
    return x.astype(dtypes.widened(x.dtype, fnp.float32))


class LayerNorm(Module):
    """Normalizes over the last len(shape) axes, then scales and shifts elementwise."""

    weight: Any
    bias: Any
    shape: tuple = field(static=True)
    eps: float = field(static=True)

    def __init__(
        self, shape, eps: float = 1e-5, use_weight: bool = True, use_bias: bool = True, dtype=_FLOAT
    ):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = eps
        self.weight = fnp.ones(self.shape, dtype) if use_weight else None
        self.bias = fnp.zeros(self.shape, dtype) if use_bias else None

    def __call__(self, x, *, key=None):
        x = fnp.asarray(x)
        n = len(self.shape)
        if tuple(x.shape[x.ndim - n :]) != self.shape:
            raise ValueError(
                f"LayerNorm(shape={self.shape}): expected an input ending in {self.shape}, "
                f"got shape {tuple(x.shape)}"
            )
        axes = tuple(range(x.ndim - n, x.ndim))
        (x,) = promote_args_inexact(type(self).__name__, x)
        wide = _statistics_input(x)
        mean = wide.mean(axis=axes, keepdims=True)
        variance = ((wide - mean) ** 2).mean(axis=axes, keepdims=True)
        y = ((wide - mean) * lax.rsqrt(variance + self.eps)).astype(x.dtype)
        if self.weight is not None:
            y = y * self.weight
        return y if self.bias is None else y + self.bias


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the last len(shape) axes, times a learned scale."""

    weight: Any
    shape: tuple = field(static=True)
    eps: float = field(static=True)

    def __init__(self, shape, eps: float = 1e-6, use_weight: bool = True, dtype=_FLOAT):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = eps
        self.weight = fnp.ones(self.shape, dtype) if use_weight else None

    def __call__(self, x, *, key=None):
        x = fnp.asarray(x)
        n = len(self.shape)
        if tuple(x.shape[x.ndim - n :]) != self.shape:
            raise ValueError(
                f"RMSNorm(shape={self.shape}): expected an input ending in {self.shape}, "
                f"got shape {tuple(x.shape)}"
            )
        axes = tuple(range(x.ndim - n, x.ndim))
        (x,) = promote_args_inexact(type(self).__name__, x)
        wide = _statistics_input(x)
        y = wide * lax.rsqrt((wide * wide).mean(axis=axes, keepdims=True) + self.eps)
        y = y.astype(x.dtype)
        return y if self.weight is None else y * self.weight


class BatchNorm(Module):
    """Batch normalization over every axis but `axis`, with its running statistics passed
    explicitly: `state = bn.initial_state()`, then `y, state = bn(x, state, training=True)`
    normalizes by the batch's statistics and updates the running ones
    (running = momentum * running + (1 - momentum) * batch, the variance unbiased), and
    `training=False` normalizes by the running statistics and returns the state unchanged."""

    weight: Any
    bias: Any
    num_features: int = field(static=True)
    momentum: float = field(static=True)
    eps: float = field(static=True)
    axis: int = field(static=True)

    def __init__(
        self,
        num_features: int,
        momentum: float = 0.99,
        eps: float = 1e-5,
        axis: int = -1,
        dtype=_FLOAT,
    ):
        self.num_features, self.momentum, self.eps, self.axis = num_features, momentum, eps, axis
        self.weight = fnp.ones(num_features, dtype)
        self.bias = fnp.zeros(num_features, dtype)

    def initial_state(self) -> dict:
        return {
            "mean": fnp.zeros(self.num_features, _FLOAT),
            "var": fnp.ones(self.num_features, _FLOAT),
        }

    def __call__(self, x, state: dict, *, training: bool, key=None):
        x = fnp.asarray(x)
        axis = self.axis % x.ndim if x.ndim else 0
        if x.ndim < 2 or x.shape[axis] != self.num_features:
            raise ValueError(
                f"BatchNorm(num_features={self.num_features}, axis={self.axis}): expected a batch "
                f"with {self.num_features} features on axis {self.axis}, got shape {tuple(x.shape)}"
            )
        reduced = tuple(d for d in range(x.ndim) if d != axis)
        shape = [1] * x.ndim
        shape[axis] = self.num_features
        (x,) = promote_args_inexact("BatchNorm", x)
        wide = _statistics_input(x)
        if training:
            mean = wide.mean(axis=reduced)
            var = ((wide - mean.reshape(shape)) ** 2).mean(axis=reduced)
            count = x.size // self.num_features
            unbiased = var * (count / max(count - 1, 1))
            m = self.momentum
            state = {
                "mean": m * state["mean"] + (1 - m) * mean,
                "var": m * state["var"] + (1 - m) * unbiased,
            }
        else:
            mean, var = state["mean"], state["var"]
        y = (wide - mean.reshape(shape)) * lax.rsqrt(var.reshape(shape) + self.eps)
        y = y.astype(x.dtype)
        return y * self.weight.reshape(shape) + self.bias.reshape(shape), state


class Dropout(Module):
    """Zeroes each element with probability `rate` and scales the rest by 1 / (1 - rate), so
    the expectation is unchanged; the identity at inference."""

    rate: float = field(static=True)

    def __init__(self, rate: float = 0.5):
        if not 0 <= rate < 1:
            raise ValueError(f"Dropout: rate must be in [0, 1), got {rate}")
        self.rate = rate

    def __call__(self, x, *, key=None, inference: bool = False):
        x = fnp.asarray(x)
        if inference or self.rate == 0:
            return x
        if key is None:
            raise ValueError(
                "Dropout: a PRNG key is needed in training (call with key=...), or pass "
                "inference=True"
            )
        keep = random.bernoulli(key, 1 - self.rate, x.shape)
        return fnp.where(keep, x / (1 - self.rate), fnp.zeros_like(x))


# -- attention ----------------------------------------------------------------------------------


class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention on (..., length, embed_dim): query, key and
    value projections, attention per head (a `mask` (..., q_len, kv_len) of True where
    allowed, and/or `causal=True`), and an output projection. Self-attention when no
    `key_value` is given."""

    query_proj: Linear
    key_proj: Linear
    value_proj: Linear
    output_proj: Linear
    num_heads: int = field(static=True)
    embed_dim: int = field(static=True)

    def __init__(self, num_heads: int, embed_dim: int, *, key, use_bias: bool = True, dtype=_FLOAT):
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim={embed_dim} is not divisible by "
                f"num_heads={num_heads}"
            )
        keys = random.split(key, 4)
        self.query_proj, self.key_proj, self.value_proj, self.output_proj = (
            Linear(embed_dim, embed_dim, use_bias=use_bias, key=k, dtype=dtype) for k in keys
        )
        self.num_heads, self.embed_dim = num_heads, embed_dim

    def __call__(self, query, key_value=None, *, mask=None, causal: bool = False, key=None):
        query = fnp.asarray(query)
        key_value = query if key_value is None else fnp.asarray(key_value)
        name = f"MultiHeadAttention(num_heads={self.num_heads}, embed_dim={self.embed_dim})"
        for what, x in (("query", query), ("key_value", key_value)):
            if x.ndim < 2 or x.shape[-1] != self.embed_dim:
                raise ValueError(
                    f"{name}: expected {what} of shape (..., length, {self.embed_dim}), "
                    f"got {tuple(x.shape)}"
                )
        lead = query.shape[:-2]
        if key_value.shape[:-2] != lead:
            raise ValueError(
                f"{name}: query {tuple(query.shape)} and key_value {tuple(key_value.shape)} "
                "must have the same leading (batch) axes"
            )
        heads, head_dim = self.num_heads, self.embed_dim // self.num_heads

        def split(x, length):
            return x.reshape(-1, length, heads, head_dim)

        q_len, kv_len = query.shape[-2], key_value.shape[-2]
        q = split(self.query_proj(query), q_len)
        k = split(self.key_proj(key_value), kv_len)
        v = split(self.value_proj(key_value), kv_len)
        if mask is not None:
            mask = fnp.broadcast_to(fnp.asarray(mask, bool), (*lead, q_len, kv_len))
            mask = mask.reshape(-1, 1, q_len, kv_len)
        out = F.dot_product_attention(q, k, v, mask=mask, is_causal=causal)
        out = out.reshape(*lead, q_len, self.embed_dim)
        return self.output_proj(out)


# -- composition --------------------------------------------------------------------------------


def _takes(layer, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(layer).parameters
    except (TypeError, ValueError):
        return False


class Lambda(Module):
    """A plain function (an activation, a reshape) as a layer without parameters."""

    fn: Callable = field(static=True)

    def __call__(self, x):
        return self.fn(x)


class Sequential(Module):
    """Layers applied in order; each that takes `key` gets its own split of the key given,
    and `inference` reaches the layers that take it (Dropout). Plain functions (activations)
    may be layers too."""

    layers: list

    def __init__(self, layers: Sequence):
        self.layers = [layer if isinstance(layer, Module) else Lambda(layer) for layer in layers]

    def __call__(self, x, *, key=None, inference: bool = False):
        keys = list(random.split(key, len(self.layers))) if key is not None else None
        for k, layer in enumerate(self.layers):
            kwargs = {}
            if keys is not None and _takes(layer, "key"):
                kwargs["key"] = keys[k]
            if inference and _takes(layer, "inference"):
                kwargs["inference"] = True
            x = layer(x, **kwargs)
        return x

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)


class MLP(Module):
    """`depth` hidden layers of `width_size` with `activation`, then a linear layer to
    `out_size` and `final_activation`."""

    layers: list
    activation: Callable = field(static=True)
    final_activation: Callable = field(static=True)

    def __init__(
        self,
        in_size: int,
        out_size: int,
        width_size: int,
        depth: int,
        *,
        activation: Callable = F.relu,
        final_activation: Callable = F.identity,
        use_bias: bool = True,
        key,
        dtype=_FLOAT,
    ):
        sizes = [in_size] + [width_size] * depth + [out_size]
        keys = random.split(key, depth + 1)
        self.layers = [
            Linear(a, b, use_bias=use_bias, key=k, dtype=dtype)
            for a, b, k in zip(sizes[:-1], sizes[1:], keys)
        ]
        self.activation, self.final_activation = activation, final_activation

    def __call__(self, x, *, key=None):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.final_activation(self.layers[-1](x))
