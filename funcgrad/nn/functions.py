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
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = [
    "celu",
    "dot_product_attention",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "identity",
    "leaky_relu",
    "log1mexp",
    "log_sigmoid",
    "log_softmax",
    "logmeanexp",
    "logsumexp",
    "mish",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "sparse_plus",
    "sparse_sigmoid",
    "squareplus",
    "standardize",
    "swish",
    "tanh",
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


@custom_jvp
def relu(x: ArrayLike):
    """max(x, 0); integer inputs stay integer. Its derivative at 0 is 0 (a tie in max would
    give 1/2): a unit at rest passes no gradient."""
    return fnp.maximum(x, 0)


relu.defjvps(lambda t, ans, x: fnp.where(x > 0, t, fnp.zeros_like(t)))


@custom_jvp
def relu6(x: ArrayLike):
    """min(max(x, 0), 6), with derivative 0 at both corners, as relu at 0. As in JAX, the
    bound is the float 6.0, so integer inputs give floats."""
    return fnp.minimum(fnp.maximum(x, 0), 6.0)


relu6.defjvps(lambda t, ans, x: fnp.where((x > 0) & (x < 6), t, fnp.zeros_like(t)))


def hard_tanh(x: ArrayLike):
    """x clipped to [-1, 1]."""
    x = fnp.asarray(x)
    return fnp.where(x > 1, 1, fnp.where(x < -1, -1, x))


def hard_sigmoid(x: ArrayLike):
    """A piecewise-linear sigmoid, relu6(x + 3) / 6, cheap where exp is not; integers are
    taken as floats first (int8's 127 + 3 wrapped to -126, giving 0 for 1)."""
    return relu6(fnp.asarray(x) + 3.0) / 6


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


def _softmax_shift(x, axis: Axis):
    """The max of `x` over `axis` (kept dims), or 0 where every entry is -inf (or masked out).

    Unlike logsumexp's shift, an infinite max is kept: inf - inf makes the whole slice nan, as
    a softmax over an infinite logit is (its share of an infinite sum is not a number).
    """
    x_max = fnp.max(x, axis=axis, keepdims=True, initial=-fnp.inf)
    return lax.stop_gradient(fnp.where(x_max == -fnp.inf, 0, x_max))


def softmax(x: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None):
    """exp(x) / sum(exp(x)) over `axis`; entries masked out by `where` are 0. A slice with an
    inf, a nan or only -inf entries is nan throughout."""
    x = _inexact("softmax", x)
    if where is not None:
        x = fnp.where(where, x, -fnp.inf)
    unnormalized = fnp.exp(x - _softmax_shift(x, axis))
    result = unnormalized / fnp.sum(unnormalized, axis=axis, keepdims=True)
    return result if where is None else fnp.where(where, result, 0)


def log_softmax(x: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None):
    """x - logsumexp(x) over `axis`; entries masked out by `where` are -inf. A slice with an
    inf, a nan or only -inf entries is nan throughout, as softmax's is."""
    x = _inexact("log_softmax", x)
    if where is not None:
        x = fnp.where(where, x, -fnp.inf)
    shifted = x - _softmax_shift(x, axis)
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
        a, b = fnp.broadcast_arrays(a, b)
    if where is not None:
        a = fnp.where(where, a, -fnp.inf)
    if b is None:
        shift = _shift(a, axis)
        terms = fnp.exp(a - shift)
    else:
        # Terms of weight 0 count for nothing, not even in the shift. They keep their
        # exponent, so the derivative in a zero weight is exp(a) / sum rather than 0; it is
        # only capped where exp would overflow (or is inf, where 0 * inf would be nan), and
        # a nan there (a masked-out entry) counts as -inf, as in JAX.
        shift = _shift(fnp.where(b != 0, a, -fnp.inf), axis)
        exponent = a - shift
        cap = math.log(dtypes.finfo(exponent.dtype).max) / 2
        unweighted = fnp.minimum(fnp.where(fnp.isnan(exponent), -fnp.inf, exponent), cap)
        terms = b * fnp.exp(fnp.where(b != 0, exponent, unweighted))
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
    *,
    algorithm: str = "fast",
):
    """(x - mean) / sqrt(variance + epsilon), with the statistics over `axis` unless given.

    The variance is x's own, computed from the deviations about x's mean; unlike
    E[x^2] - E[x]^2 it cannot lose all its digits to cancellation or turn negative. So
    `algorithm` "fast" and "stable" both compute it that way.
    """
    if algorithm not in ("fast", "stable"):
        raise ValueError(f"standardize: algorithm must be 'fast' or 'stable', got {algorithm!r}")
    x = _inexact("standardize", x)
    if mean is None:
        mean = fnp.mean(x, axis=axis, keepdims=True, where=where)
    if variance is None:
        variance = fnp.var(x, axis=axis, keepdims=True, where=where)
    return fnp.subtract(x, mean) * lax.rsqrt(fnp.add(variance, epsilon))


# ---------------------------------------------------------------------------------------------
# Encodings


def one_hot(x: ArrayLike, num_classes: int, *, dtype: Any = float, axis: int = -1):
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


# ---------------------------------------------------------------------------------------------
# More activations and log-space helpers


def identity(x: ArrayLike):
    return fnp.asarray(x)


def tanh(x: ArrayLike, /):
    return fnp.tanh(x)


def mish(x: ArrayLike):
    """x * tanh(softplus(x))."""
    x = _inexact("mish", x)
    return x * fnp.tanh(softplus(x))


def squareplus(x: ArrayLike, b: ArrayLike = 4):
    """(x + sqrt(x**2 + b)) / 2, a softplus made of algebraic operations.

    sqrt(x**2 + b) is hypot(x, sqrt(b)), so x**2 cannot overflow, and for negative x the
    value is computed as b / (2 (sqrt(x**2 + b) - x)), which is the same number without the
    cancellation of x against the root (that gave 0 at x = -1e4, and inf at -1e20, in
    float32). Each branch sees only its own side of 0, so neither divides by 0 for the other.
    """
    x, b = promote_args_inexact("squareplus", x, b)
    root_b = fnp.sqrt(b)
    nonnegative = x >= 0
    upper = fnp.where(nonnegative, x, 0)
    lower = fnp.where(nonnegative, 0, x)
    return fnp.where(
        nonnegative,
        upper / 2 + fnp.hypot(upper, root_b) / 2,
        b / (2 * (fnp.hypot(lower, root_b) - lower)),
    )


def sparse_plus(x: ArrayLike):
    """0 below -1, x above 1, and the parabola (x + 1)**2 / 4 joining them smoothly."""
    x = _inexact("sparse_plus", x)
    return fnp.where(x <= -1, 0, fnp.where(x >= 1, x, (x + 1) ** 2 / 4))


def sparse_sigmoid(x: ArrayLike):
    """The derivative of sparse_plus: (x + 1) / 2 clipped to [0, 1]."""
    x = _inexact("sparse_sigmoid", x)
    return fnp.clip((x + 1) / 2, 0, 1)


@custom_jvp
def log1mexp(x: ArrayLike):
    """log(1 - exp(-x)) for x > 0, from expm1 for small x and from log1p for large x, so
    that neither 1 - exp(-x) nor its log loses digits (Maechler's recipe).

    Its derivative is 1 / expm1(x), given directly: differentiating the selection would
    send a zero cotangent through the untaken log1p(-exp(-x)), which is log1p(-1) = -inf
    for x below 2**-24 in float32, and 0 * inf made the gradient nan there."""
    x = _inexact("log1mexp", x)
    # Each branch sees x only where it is taken: log1p(-exp(-x)) is -inf below 1e-16, which
    # an untaken lane would still compute (and debug_infs report).
    small = x < math.log(2)
    below, above = fnp.where(small, x, 0.5), fnp.where(small, 1.0, x)
    return fnp.where(small, fnp.log(-fnp.expm1(-below)), fnp.log1p(-fnp.exp(-above)))


log1mexp.defjvps(lambda t, ans, x: t / fnp.expm1(_inexact("log1mexp", x)))


def logmeanexp(
    x: ArrayLike, axis: Axis = None, where: ArrayLike | None = None, keepdims: bool = False
):
    """log(mean(exp(x))) over `axis` (of the entries `where` selects), without overflow."""
    x = _inexact("logmeanexp", x)
    total = logsumexp(x, axis=axis, keepdims=keepdims, where=where)
    ones = fnp.ones_like(x) if where is None else fnp.asarray(where).astype(x.dtype)
    count = fnp.sum(fnp.broadcast_to(ones, x.shape), axis=axis, keepdims=keepdims)
    return total - fnp.log(count)


# ---------------------------------------------------------------------------------------------
# Attention


def dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    bias: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    query_seq_lengths: ArrayLike | None = None,
    key_value_seq_lengths: ArrayLike | None = None,
    local_window_size: int | tuple[int, int] | None = None,
    implementation: str | None = None,
    return_residual: bool = False,
):
    """Scaled dot-product attention, softmax(q k^T * scale + bias) v, as a reference
    implementation. Shapes are (batch, length, heads, head_dim), the batch axis optional;
    key and value may have fewer heads than query, each shared by a group of query heads.

    `mask` (True where attention is allowed), `is_causal`, the sequence lengths and
    `local_window_size` (left, right) all remove logits; a query with nothing to attend to
    gets the mean of the values, as the removed logits are a large negative number rather
    than -inf. Queries past their `query_seq_lengths` are padding, and their outputs are 0.
    `return_residual` also returns the logsumexp of the logits, (batch, length, heads).
    Softmax statistics are computed in float32 for 16-bit inputs.
    """
    if implementation not in (None, "xla"):
        raise NotImplementedError(f"dot_product_attention: implementation {implementation!r}")
    query, key, value = (fnp.asarray(x) for x in (query, key, value))
    unbatched = query.ndim == 3
    if unbatched:
        query, key, value = query[None], key[None], value[None]
    if query.ndim != 4 or key.shape != value.shape or key.ndim != 4:
        raise ValueError(
            "dot_product_attention: query, key and value must be (B, T, N, H), (B, S, K, H) "
            f"and (B, S, K, H), got {query.shape}, {key.shape} and {value.shape}"
        )
    batch, q_len, heads, head_dim = query.shape
    kv_len, kv_heads = key.shape[1], key.shape[2]
    if heads % kv_heads or key.shape[3] != head_dim or key.shape[0] != batch:
        raise ValueError(
            f"dot_product_attention: key/value shape {key.shape} does not fit query shape "
            f"{query.shape}: batch and head_dim must match and the query's heads must be a "
            "multiple of the key's"
        )
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    group = heads // kv_heads
    # Query heads are grouped as (kv_heads, group) so each group shares one key head.
    grouped = fnp.reshape(query, (batch, q_len, kv_heads, group, head_dim))
    logits = fnp.einsum("btkgh,bskh->bkgts", grouped, key)
    logits = fnp.reshape(logits, (batch, heads, q_len, kv_len))
    compute_dtype = dtypes.widened(logits.dtype, fnp.float32)
    logits = logits.astype(compute_dtype) * scale
    if bias is not None:
        bias = fnp.asarray(bias)
        logits = logits + (bias[None] if unbatched and bias.ndim == 4 else bias).astype(
            compute_dtype
        )
    allowed = _attention_mask(
        mask,
        unbatched,
        is_causal,
        query_seq_lengths,
        key_value_seq_lengths,
        local_window_size,
        batch,
        q_len,
        kv_len,
    )
    if allowed is not None:
        large_negative = 0.7 * float(fnp.finfo(compute_dtype).min)
        logits = fnp.where(allowed, logits, large_negative)
    weights = softmax(logits, axis=-1).astype(value.dtype)
    weights = fnp.reshape(weights, (batch, kv_heads, group, q_len, kv_len))
    out = fnp.einsum("bkgts,bskh->btkgh", weights, value)
    out = fnp.reshape(out, (batch, q_len, heads, head_dim))
    if query_seq_lengths is not None:
        # Padding queries (at or past their sequence's length) give 0, as in JAX.
        lengths = fnp.asarray(query_seq_lengths).reshape(batch, 1, 1, 1)
        positions = lax.broadcasted_iota(dtypes.int32, (1, q_len, 1, 1), 1)
        out = fnp.where(positions < lengths, out, fnp.zeros_like(out))
    if unbatched:
        out = out[0]
    if not return_residual:
        return out
    residual = fnp.transpose(logsumexp(logits, axis=-1), (0, 2, 1))
    return out, residual[0] if unbatched else residual


def _attention_mask(
    mask, unbatched, is_causal, query_seq_lengths, key_value_seq_lengths, window, batch, t, s
):
    """Where each query may attend to each key, (B, N or 1, T, S), or None for everywhere."""
    allowed = None

    def both(condition):
        return condition if allowed is None else allowed & condition

    if mask is not None:
        mask = fnp.asarray(mask).astype(bool)
        allowed = both(mask[None] if unbatched and mask.ndim == 4 else mask)
    query_index = lax.broadcasted_iota(dtypes.int32, (t, s), 0)
    key_index = lax.broadcasted_iota(dtypes.int32, (t, s), 1)
    if is_causal:
        allowed = both(key_index <= query_index)
    if window is not None:
        left, right = (window, window) if isinstance(window, int) else window
        allowed = both((key_index >= query_index - left) & (key_index <= query_index + right))
    if query_seq_lengths is not None:
        lengths = fnp.asarray(query_seq_lengths).reshape(batch, 1, 1, 1)
        allowed = both(query_index[None, None] < lengths)
    if key_value_seq_lengths is not None:
        lengths = fnp.asarray(key_value_seq_lengths).reshape(batch, 1, 1, 1)
        allowed = both(key_index[None, None] < lengths)
    return allowed
