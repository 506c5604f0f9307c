"""stax: neural networks as pairs of pure functions, for notebooks written against
`example_libraries.stax`.

A layer is a pair `(init_fun, apply_fun)`: `init_fun(rng, input_shape)` returns the layer's
output shape and its parameters (a pytree), so a whole network's shapes are known before any
array is made; `apply_fun(params, inputs, **kwargs)` computes the outputs. Keyword arguments
reach every layer of a combinator; `rng=` is the one the layers here read (Dropout), split
between the layers of `serial` and `parallel`.

    init_fun, apply_fun = stax.serial(stax.Dense(64), stax.Relu, stax.Dense(10), stax.LogSoftmax)
    out_shape, params = init_fun(random.PRNGKey(0), (-1, 784))
    log_probs = apply_fun(params, images)

Constructors are CamelCase; the layers that need no argument (`Relu`, `Flatten`,
`Identity`, `FanInSum`, ...) are pairs already, the others (`Dense(10)`, `FanOut(2)`) make one.
The activations and initializers are `funcgrad.nn`'s, re-exported under the names notebooks
import from here (`glorot`, `randn`, `logsoftmax`).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import funcgrad.numpy as fnp
from funcgrad import lax, random
from funcgrad.nn.functions import (
    elu,
    gelu,
    leaky_relu,
    log_softmax,
    relu,
    selu,
    sigmoid,
    softmax,
    softplus,
    standardize,
)
from funcgrad.nn.initializers import glorot_normal, normal, ones, zeros

__all__ = [
    "AvgPool",
    "BatchNorm",
    "Conv",
    "Conv1DTranspose",
    "ConvTranspose",
    "Dense",
    "Dropout",
    "Elu",
    "Exp",
    "FanInConcat",
    "FanInSum",
    "FanOut",
    "Flatten",
    "Gelu",
    "GeneralConv",
    "GeneralConvTranspose",
    "Identity",
    "LeakyRelu",
    "LogSoftmax",
    "MaxPool",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "SumPool",
    "Tanh",
    "elementwise",
    "elu",
    "gelu",
    "glorot",
    "glorot_normal",
    "leaky_relu",
    "log_softmax",
    "logsoftmax",
    "normal",
    "ones",
    "parallel",
    "randn",
    "relu",
    "selu",
    "serial",
    "shape_dependent",
    "sigmoid",
    "softmax",
    "softplus",
    "standardize",
    "zeros",
]

# The older names notebooks still import.
glorot = glorot_normal
randn = normal
logsoftmax = log_softmax

Shape = Any  # a tuple of ints (-1 for a size not yet known), or a list of them for fan-outs
InitFun = Callable[[Any, Shape], tuple[Shape, Any]]
ApplyFun = Callable[..., Any]
Layer = tuple[InitFun, ApplyFun]

# The default initializers: made once, as a default argument is.
_GLOROT_NORMAL = glorot_normal()
_NORMAL = normal()
_BIAS_NORMAL = normal(1e-6)


# ---------------------------------------------------------------------------------------------
# Layers with parameters


def Dense(out_dim: int, W_init: Callable = _GLOROT_NORMAL, b_init: Callable = _NORMAL) -> Layer:
    """A fully connected layer over the last axis: inputs @ W + b."""

    def init_fun(rng, input_shape):
        w_key, b_key = random.split(rng)
        params = W_init(w_key, (input_shape[-1], out_dim)), b_init(b_key, (out_dim,))
        return (*input_shape[:-1], out_dim), params

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return fnp.dot(inputs, W) + b

    return init_fun, apply_fun


def _kernel_shape(
    dimension_numbers: Sequence[str], out_chan: int, filter_shape: Sequence[int], input_shape
) -> list[int]:
    """The kernel's shape in its layout (`dimension_numbers[1]`, e.g. "HWIO"): the filter's
    window in its spatial letters, in order, the input's channels at I, out_chan at O."""
    lhs_spec, rhs_spec, _ = dimension_numbers
    spatial = [letter for letter in rhs_spec if letter not in "IO"]
    if len(spatial) != len(filter_shape):
        raise ValueError(
            f"filter_shape {tuple(filter_shape)} has {len(filter_shape)} dimensions, but the "
            f"kernel layout {rhs_spec!r} has {len(spatial)} spatial dimensions"
        )
    window = iter(filter_shape)
    in_chan = input_shape[lhs_spec.index("C")]
    return [out_chan if c == "O" else in_chan if c == "I" else next(window) for c in rhs_spec]


def _convolution_layer(
    output_shape_of: Callable,
    convolve: Callable,
    dimension_numbers: Sequence[str],
    out_chan: int,
    filter_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding,
    W_init: Callable | None,
    b_init: Callable,
) -> Layer:
    """A convolution plus a bias per output channel, its kernel initialized by W_init
    (Glorot normal over the kernel's I and O axes unless given)."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    strides = tuple(strides) if strides else (1,) * len(filter_shape)
    if W_init is None:
        W_init = glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape = _kernel_shape(dimension_numbers, out_chan, filter_shape, input_shape)
        output_shape = output_shape_of(
            input_shape, kernel_shape, strides, padding, dimension_numbers
        )
        bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
        w_key, b_key = random.split(rng)
        return output_shape, (W_init(w_key, kernel_shape), b_init(b_key, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return convolve(inputs, W, strides, padding, dimension_numbers) + b

    return init_fun, apply_fun


def GeneralConv(
    dimension_numbers: Sequence[str],
    out_chan: int,
    filter_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding="VALID",
    W_init: Callable | None = None,
    b_init: Callable = _BIAS_NORMAL,
) -> Layer:
    """A convolution (cross-correlation) in the layouts `dimension_numbers`, e.g.
    ("NHWC", "HWIO", "NHWC"), with a bias per output channel."""

    def convolve(inputs, W, strides, padding, dimension_numbers):
        return lax.conv_general_dilated(
            inputs, W, strides, padding, dimension_numbers=dimension_numbers
        )

    return _convolution_layer(
        lax.conv_general_shape_tuple,
        convolve,
        dimension_numbers,
        out_chan,
        filter_shape,
        strides,
        padding,
        W_init,
        b_init,
    )


def GeneralConvTranspose(
    dimension_numbers: Sequence[str],
    out_chan: int,
    filter_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding="VALID",
    W_init: Callable | None = None,
    b_init: Callable = _BIAS_NORMAL,
) -> Layer:
    """A transposed convolution (`lax.conv_transpose`: the input dilated by the strides,
    then convolved) in the layouts `dimension_numbers`, with a bias per output channel."""

    def convolve(inputs, W, strides, padding, dimension_numbers):
        return lax.conv_transpose(inputs, W, strides, padding, dimension_numbers=dimension_numbers)

    return _convolution_layer(
        lax.conv_transpose_shape_tuple,
        convolve,
        dimension_numbers,
        out_chan,
        filter_shape,
        strides,
        padding,
        W_init,
        b_init,
    )


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))
Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))


def BatchNorm(
    axis: int | Sequence[int] = (0, 1, 2),
    epsilon: float = 1e-5,
    center: bool = True,
    scale: bool = True,
    beta_init: Callable = zeros,
    gamma_init: Callable = ones,
) -> Layer:
    """Standardize over `axis` with the batch's own statistics (there are no running
    averages), then scale by gamma and shift by beta, one of each per position of the
    remaining axes. A parameter switched off by `center` or `scale` is an empty tuple."""
    axis = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)

    def init_fun(rng, input_shape):
        kept_shape = tuple(d for i, d in enumerate(input_shape) if i not in axis)
        beta_key, gamma_key = random.split(rng)
        beta = beta_init(beta_key, kept_shape) if center else ()
        gamma = gamma_init(gamma_key, kept_shape) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        # The parameters cover the axes not normalized: give them size-1 axes at the others.
        spread = tuple(None if i in axis else slice(None) for i in range(fnp.ndim(x)))
        z = standardize(x, axis, epsilon=epsilon)
        if scale:
            z = gamma[spread] * z
        if center:
            z = z + beta[spread]
        return z

    return init_fun, apply_fun


# ---------------------------------------------------------------------------------------------
# Elementwise layers


def elementwise(fun: Callable, **fun_kwargs) -> Layer:
    """A layer without parameters applying `fun(inputs, **fun_kwargs)`."""

    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return fun(inputs, **fun_kwargs)

    return init_fun, apply_fun


Tanh = elementwise(fnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(fnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


# ---------------------------------------------------------------------------------------------
# Pooling


def _batch_and_channel_axes(spec: str | None, ndim: int) -> tuple[int, int]:
    """Where N and C sit: in `spec` (e.g. "NCHW"), else first and last."""
    if spec is None:
        return 0, ndim - 1
    return spec.index("N"), spec.index("C")


def _with_unit_axes(spatial: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    """The spatial window (or strides) with a 1 inserted at each of `axes`."""
    full = list(spatial)
    for axis in sorted(axes):
        full.insert(axis, 1)
    return tuple(full)


def _pooling_layer(reducer: Callable, init_value: float, by_window_size: bool = False):
    def PoolingLayer(
        window_shape: Sequence[int],
        strides: Sequence[int] | None = None,
        padding="VALID",
        spec: str | None = None,
    ) -> Layer:
        spatial_window = tuple(window_shape)
        spatial_strides = tuple(strides) if strides else (1,) * len(spatial_window)
        unit_axes = _batch_and_channel_axes(spec, len(spatial_window) + 2)
        window = _with_unit_axes(spatial_window, unit_axes)
        window_strides = _with_unit_axes(spatial_strides, unit_axes)

        def init_fun(rng, input_shape):
            if len(input_shape) != len(window):
                raise ValueError(
                    f"a pool over a {len(spatial_window)}-d window takes inputs of "
                    f"{len(window)} dimensions (batch, channels and the spatial ones), got "
                    f"input_shape {tuple(input_shape)}"
                )
            pads = lax.padtype_to_pads(input_shape, window, window_strides, padding)
            shape = list(lax.reduce_window_shape_tuple(input_shape, window, window_strides, pads))
            # The batch and channel axes pass through whole, an unknown (-1) batch size too.
            for axis in unit_axes:
                shape[axis] = input_shape[axis]
            return tuple(shape), ()

        def apply_fun(params, inputs, **kwargs):
            out = lax.reduce_window(inputs, init_value, reducer, window, window_strides, padding)
            if by_window_size:
                out = out / _window_sizes(inputs, spatial_window, spatial_strides, padding, spec)
            return out

        return init_fun, apply_fun

    return PoolingLayer


def _window_sizes(inputs, spatial_window, spatial_strides, padding, spec):
    """How many of the inputs each output window covers: fewer than the window's size at
    edges where padding replaced some, so an average over them is of real inputs only."""
    batch_and_channel = _batch_and_channel_axes(spec, inputs.ndim)
    spatial_shape = [n for i, n in enumerate(inputs.shape) if i not in batch_and_channel]
    counts = lax.reduce_window(
        fnp.ones(spatial_shape, inputs.dtype),
        0.0,
        lax.add,
        spatial_window,
        spatial_strides,
        padding,
    )
    return fnp.expand_dims(counts, sorted(batch_and_channel))


MaxPool = _pooling_layer(lax.max, -math.inf)
SumPool = _pooling_layer(lax.add, 0.0)
AvgPool = _pooling_layer(lax.add, 0.0, by_window_size=True)


# ---------------------------------------------------------------------------------------------
# Reshaping and routing


def _flatten() -> Layer:
    """All axes but the first become one."""

    def init_fun(rng, input_shape):
        return (input_shape[0], math.prod(input_shape[1:])), ()

    def apply_fun(params, inputs, **kwargs):
        return fnp.reshape(inputs, (inputs.shape[0], -1))

    return init_fun, apply_fun


Flatten = _flatten()
Identity = elementwise(lambda inputs: inputs)


def FanOut(num: int) -> Layer:
    """`num` copies of the input, a list, for `parallel` to route."""

    def init_fun(rng, input_shape):
        return [input_shape] * num, ()

    def apply_fun(params, inputs, **kwargs):
        return [inputs] * num

    return init_fun, apply_fun


def _fan_in_sum() -> Layer:
    """The sum of a list of inputs of one shape."""

    def init_fun(rng, input_shape):
        return input_shape[0], ()

    def apply_fun(params, inputs, **kwargs):
        return functools.reduce(fnp.add, inputs)

    return init_fun, apply_fun


FanInSum = _fan_in_sum()


def FanInConcat(axis: int = -1) -> Layer:
    """A list of inputs joined along `axis`."""

    def init_fun(rng, input_shape):
        first = input_shape[0]
        at = axis % len(first)
        joined = sum(shape[at] for shape in input_shape)
        return (*first[:at], joined, *first[at + 1 :]), ()

    def apply_fun(params, inputs, **kwargs):
        return fnp.concatenate(inputs, axis)

    return init_fun, apply_fun


def Dropout(rate: float, mode: str = "train") -> Layer:
    """In "train" mode, keep each input with probability `rate` (the probability of keeping,
    not of dropping) and divide the kept ones by it, so the expected output is the input; in
    any other mode, pass inputs through. Training needs `rng=` in apply_fun's call."""
    if isinstance(rate, numbers.Real) and not 0 < rate <= 1:
        raise ValueError(
            f"Dropout: rate is the probability of keeping an input and must be in (0, 1], "
            f"got {rate}"
        )

    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.get("rng")
        if rng is None:
            raise ValueError(
                "Dropout's apply_fun needs a PRNG key to choose the inputs it keeps: call it as "
                "apply_fun(params, inputs, rng=key), with key from funcgrad.random.PRNGKey "
                "(serial and parallel split theirs between their layers)"
            )
        if mode != "train":
            return inputs
        keep = random.bernoulli(rng, rate, inputs.shape)
        return fnp.where(keep, inputs / rate, 0)

    return init_fun, apply_fun


# ---------------------------------------------------------------------------------------------
# Combinators


def serial(*layers: Layer) -> Layer:
    """The layers one after another, each taking the previous one's outputs; params are a
    list with one entry per layer."""
    init_funs, apply_funs = _unzip(layers)

    def init_fun(rng, input_shape):
        params = []
        for init in init_funs:
            rng, layer_rng = random.split(rng)
            input_shape, layer_params = init(layer_rng, input_shape)
            params.append(layer_params)
        return input_shape, params

    def apply_fun(params, inputs, **kwargs):
        rngs = _layer_rngs(kwargs.pop("rng", None), len(apply_funs))
        for apply, layer_params, rng in zip(apply_funs, params, rngs):
            inputs = apply(layer_params, inputs, rng=rng, **kwargs)
        return inputs

    return init_fun, apply_fun


def parallel(*layers: Layer) -> Layer:
    """The layers side by side, the i-th applied to the i-th of a sequence of inputs (as
    `FanOut` makes, and `FanInSum` or `FanInConcat` join)."""
    init_funs, apply_funs = _unzip(layers)

    def init_fun(rng, input_shape):
        rngs = random.split(rng, len(init_funs))
        pairs = [init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape)]
        output_shapes, params = zip(*pairs) if pairs else ((), ())
        return output_shapes, params

    def apply_fun(params, inputs, **kwargs):
        rngs = _layer_rngs(kwargs.pop("rng", None), len(apply_funs))
        return [
            apply(layer_params, x, rng=rng, **kwargs)
            for apply, layer_params, x, rng in zip(apply_funs, params, inputs, rngs)
        ]

    return init_fun, apply_fun


def shape_dependent(make_layer: Callable[[Shape], Layer]) -> Layer:
    """A layer built only once its input shape is known, by `make_layer(input_shape)`."""

    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)

    return init_fun, apply_fun


def _unzip(layers: Sequence[Layer]) -> tuple[tuple, tuple]:
    for position, layer in enumerate(layers):
        if not (isinstance(layer, tuple) and len(layer) == 2 and all(map(callable, layer))):
            raise TypeError(
                f"layer {position} is not an (init_fun, apply_fun) pair: got {layer!r}"
                + (" (a constructor: call it, e.g. Dense(10))" if callable(layer) else "")
            )
    return tuple(layer[0] for layer in layers), tuple(layer[1] for layer in layers)


def _layer_rngs(rng, count: int) -> Sequence:
    """One key per layer, split from `rng`, or None for each when no key was given."""
    return (None,) * count if rng is None else random.split(rng, count)
