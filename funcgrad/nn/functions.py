"""Activation functions and softmax-family reductions, written in terms of funcgrad.numpy and lax.

Python-scalar constants are weakly typed, so `0.5 * x` keeps a float16 or bfloat16 `x` in its
own precision; integer and boolean inputs of the smooth functions compute in float32.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.numpy._promotion import promote_args_inexact

__all__ = [
    "celu",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "standardize",
    "swish",
]

# Anything funcgrad.numpy accepts as an array: funcgrad arrays, tracers, NumPy values, scalars.
ArrayLike = Any
Axis = int | tuple[int, ...] | None

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946
_SQRT_HALF = math.sqrt(0.5)
# 0.5 * (1 + tanh(u)) == sigmoid(2u): the tanh approximation of gelu in its sigmoid form.
_GELU_TANH_SCALE = 2.0 * math.sqrt(2.0 / math.pi)


def _inexact(name: str, x: ArrayLike):
    (x,) = promote_args_inexact(name, x)
    return x


# ---------------------------------------------------------------------------------------------
# Piecewise-linear activations


def relu(x: ArrayLike):
    """max(x, 0); integer inputs stay integer."""
    return fnp.maximum(x, 0)


def relu6(x: ArrayLike):
    return fnp.minimum(fnp.maximum(x, 0), 6)


def hard_tanh(x: ArrayLike):
    """x clipped to [-1, 1]."""
    x = fnp.asarray(x)
    return fnp.where(x > 1, 1, fnp.where(x < -1, -1, x))


def hard_sigmoid(x: ArrayLike):
    """A piecewise-linear sigmoid, relu6(x + 3) / 6, cheap where exp is not."""
    return relu6(fnp.asarray(x) + 3) / 6


def hard_silu(x: ArrayLike):
    x = fnp.asarray(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def leaky_relu(x: ArrayLike, negative_slope: ArrayLike = 1e-2):
    x = fnp.asarray(x)
    return fnp.where(x >= 0, x, negative_slope * x)


# ---------------------------------------------------------------------------------------------
# Smooth activations


def sigmoid(x: ArrayLike):
    return lax.logistic(_inexact("sigmoid", x))


def softplus(x: ArrayLike):
    """log(1 + exp(x)) as logaddexp(x, 0), which neither overflows nor rounds the tails to 0."""
    return fnp.logaddexp(x, 0)


def log_sigmoid(x: ArrayLike):
    return -softplus(-_inexact("log_sigmoid", x))


def soft_sign(x: ArrayLike):
    x = _inexact("soft_sign", x)
    return x / (fnp.abs(x) + 1)


def silu(x: ArrayLike):
    x = _inexact("silu", x)
    return x * lax.logistic(x)


swish = silu


def gelu(x: ArrayLike, approximate: bool = True):
    """The Gaussian error linear unit x * Phi(x), or its tanh approximation.

    Both forms avoid computing 1 + (something near -1), so the negative tail keeps its relative
    precision: the tanh form is evaluated as x * sigmoid(2u), the exact one with erfc.
    """
    x = _inexact("gelu", x)
    if approximate:
        return x * lax.logistic(_GELU_TANH_SCALE * x * (1 + 0.044715 * x * x))
    return 0.5 * x * lax.erfc(-_SQRT_HALF * x)


def elu(x: ArrayLike, alpha: ArrayLike = 1.0):
    x = _inexact("elu", x)
    positive = x > 0
    # The untaken branch sees 0 instead of large x, so expm1 cannot overflow there.
    return fnp.where(positive, x, alpha * fnp.expm1(fnp.where(positive, 0, x)))


def selu(x: ArrayLike):
    """The self-normalizing elu, with the constants that keep activations at zero mean and unit
    variance."""
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def celu(x: ArrayLike, alpha: ArrayLike = 1.0):
    x = _inexact("celu", x)
    return fnp.maximum(x, 0) + alpha * fnp.expm1(fnp.minimum(x, 0) / alpha)


def glu(x: ArrayLike, axis: int = -1):
    """The gated linear unit: the first half of `axis` times the sigmoid of the second half."""
    x = fnp.asarray(x)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"glu: axis {axis} is out of bounds for an array of shape {x.shape}")
    if x.shape[axis] % 2:
        raise ValueError(
            f"glu: axis {axis} must have an even size to be split in halves, got shape {x.shape}"
        )
    value, gate = fnp.split(x, 2, axis=axis)
    return value * sigmoid(gate)


# ---------------------------------------------------------------------------------------------
# Softmax and friends


def _shift(x, axis: Axis):
    """The max of `x` over `axis` (kept dims), or 0 where that max is not finite.

    Subtracting it keeps exp from overflowing; a non-finite max (all -inf, or an inf) would make
    the subtraction itself produce nan, and shifting by 0 gives the right limit instead.
    """
    x_max = fnp.max(x, axis=axis, keepdims=True, initial=-fnp.inf)
    # The shift cancels out of every result, so its derivative is not worth tracing.
    return lax.stop_gradient(fnp.where(fnp.isfinite(x_max), x_max, 0))


def softmax(x: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None):
    """exp(x) / sum(exp(x)) over `axis`; entries masked out by `where` are 0."""
    x = _inexact("softmax", x)
    if where is not None:
        x = fnp.where(where, x, -fnp.inf)
    unnormalized = fnp.exp(x - _shift(x, axis))
    result = unnormalized / fnp.sum(unnormalized, axis=axis, keepdims=True)
    return result if where is None else fnp.where(where, result, 0)


def log_softmax(x: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None):
    """x - logsumexp(x) over `axis`; entries masked out by `where` are -inf."""
    x = _inexact("log_softmax", x)
    if where is not None:
        x = fnp.where(where, x, -fnp.inf)
    shifted = x - _shift(x, axis)
    result = shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=axis, keepdims=True))
    return result if where is None else fnp.where(where, result, -fnp.inf)


def logsumexp(
    a: ArrayLike,
    axis: Axis = None,
    b: ArrayLike | None = None,
    keepdims: bool = False,
    return_sign: bool = False,
    where: ArrayLike | None = None,
):
    """log(sum(b * exp(a))) over `axis`, without overflow or underflow of the exponentials.

    With weights `b` the sum may be negative: `return_sign=True` returns (log|sum|, sign(sum)),
    otherwise a negative sum gives nan. An empty or all -inf sum gives -inf.
    """
    if b is None:
        a = _inexact("logsumexp", a)
    else:
        a, b = promote_args_inexact("logsumexp", a, b)
        # A zero weight removes its term even where exp(a) is inf.
        a = fnp.where(b != 0, a, -fnp.inf)
    if where is not None:
        a = fnp.where(where, a, -fnp.inf)
    shift = _shift(a, axis)
    terms = fnp.exp(a - shift)
    if b is not None:
        terms = terms * b
    total = fnp.sum(terms, axis=axis, keepdims=keepdims)
    out = fnp.log(fnp.abs(total)) + fnp.reshape(shift, total.shape)
    sign = fnp.sign(total)
    if return_sign:
        return out, sign
    if b is None:
        return out
    return fnp.where(sign < 0, fnp.nan, out)


def standardize(
    x: ArrayLike,
    axis: Axis = -1,
    mean: ArrayLike | None = None,
    variance: ArrayLike | None = None,
    epsilon: ArrayLike = 1e-5,
    where: ArrayLike | None = None,
):
    """(x - mean) / sqrt(variance + epsilon), with the statistics over `axis` unless given.

    The variance is x's own, computed from the deviations about x's mean; unlike
    E[x^2] - E[x]^2 it cannot lose all its digits to cancellation or turn negative.
    """
    x = _inexact("standardize", x)
    if mean is None:
        mean = fnp.mean(x, axis=axis, keepdims=True, where=where)
    if variance is None:
        variance = fnp.var(x, axis=axis, keepdims=True, where=where)
    return fnp.subtract(x, mean) * lax.rsqrt(fnp.add(variance, epsilon))


# ---------------------------------------------------------------------------------------------
# Encodings


def one_hot(x: ArrayLike, num_classes: int, *, dtype: Any = dtypes.float32, axis: int = -1):
    """A new axis of length `num_classes` at `axis`, 1 at each label's position and 0 elsewhere.

    Labels outside [0, num_classes), negative ones included, give all zeros.
    """
    x = fnp.asarray(x)
    num_classes = operator.index(num_classes)
    out_ndim = x.ndim + 1
    if not -out_ndim <= axis < out_ndim:
        raise ValueError(
            f"one_hot: axis {axis} is out of bounds for the result of rank {out_ndim} "
            f"(labels of shape {x.shape})"
        )
    axis %= out_ndim
    classes_shape = [1] * out_ndim
    classes_shape[axis] = num_classes
    # int32 classes, compared after promotion with the labels: a uint8 iota would wrap at 256.
    classes = lax.broadcasted_iota(dtypes.int32, classes_shape, axis)
    return (fnp.expand_dims(x, axis) == classes).astype(dtype)
