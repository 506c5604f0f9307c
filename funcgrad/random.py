"""Counter-based pseudo-random numbers with JAX's API: explicit keys, split rather than mutated.

A key is a uint32[2] array. Every function here is a pure function of its key: the same key
always gives the same numbers, and `split` and `fold_in` derive keys whose streams are
independent of their parent's and of each other. The numbers are Threefry-2x32 encryptions of
counters (the `threefry2x32` primitive), derived as JAX derives them, and everything is written
with funcgrad.lax and funcgrad.numpy, so it works under every transformation.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array

__all__ = [
    "PRNGKey",
    "bernoulli",
    "bits",
    "categorical",
    "choice",
    "exponential",
    "fold_in",
    "gumbel",
    "key",
    "key_data",
    "normal",
    "permutation",
    "randint",
    "split",
    "truncated_normal",
    "uniform",
    "wrap_key_data",
]

# ---------------------------------------------------------------------------------------------
# Argument checks


def _check_key(name: str, key):
    key = lax.asarray(key)
    if key.shape != (2,) or key.dtype != dtypes.uint32:
        raise TypeError(
            f"{name} takes a single key, a uint32[2] array (from PRNGKey, key or split), got "
            f"{key.aval.str_short()}; map over a batch of keys with vmap"
        )
    return key


def _canonical_shape(name: str, shape) -> tuple[int, ...]:
    try:
        return tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{name}: shape must be a sequence of ints, got {shape!r}") from None


def _float_dtype(name: str, dtype) -> np.dtype:
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_float(dtype):
        raise TypeError(f"{name} draws floating-point numbers, got dtype {dtype.name}")
    return dtype


def _as_dtype(x, dtype: np.dtype):
    """`x` as an array of `dtype`; Python and NumPy values convert exactly, not via float32."""
    return lax.convert_element_type(lax.asarray(x, dtype), dtype)


def _broadcast_to(name: str, x, shape: tuple[int, ...]):
    """NumPy-style broadcasting of a parameter to the requested shape of the draw.

    Scalars stay scalars: funcgrad.lax's elementwise primitives broadcast rank-0 operands.
    """
    if x.shape == shape or x.ndim == 0:
        return x
    leading = len(shape) - x.ndim
    if leading < 0 or any(d not in (1, s) for d, s in zip(x.shape, shape[leading:])):
        raise ValueError(
            f"{name}: a parameter of shape {x.shape} does not broadcast to the requested shape "
            f"{shape}"
        )
    return lax.broadcast_in_dim(x, shape, tuple(range(leading, len(shape))))


# ---------------------------------------------------------------------------------------------
# Keys and raw bits


def _threefry_2x32(key, count):
    """Encrypt uint32 counters as JAX does: the counters, flattened and padded with a zero to
    even length, are cut in two halves that give the two words of each cipher block."""
    size = math.prod(count.shape)
    flat = lax.reshape(count, (size,))
    odd = size % 2
    if odd:
        flat = lax.concatenate([flat, lax.full((1,), 0, dtypes.uint32)], 0)
    half = (size + odd) // 2
    key1, key2 = (lax.index_in_dim(key, i, keepdims=False) for i in (0, 1))
    out1, out2 = lax.threefry2x32(
        key1, key2, lax.slice(flat, (0,), (half,)), lax.slice(flat, (half,), (2 * half,))
    )
    out = lax.concatenate([out1, out2], 0)
    if odd:
        out = lax.slice(out, (0,), (size,))
    return lax.reshape(out, count.shape)


def _seed_words(seed):
    """The uint32[2] words (high, low) of an integer scalar seen as a 64-bit integer."""
    if seed.dtype.itemsize == 8:
        high = lax.convert_element_type(lax.shift_right_logical(seed, 32), dtypes.uint32)
    else:
        high = lax.full((), 0, dtypes.uint32)
    low = lax.convert_element_type(seed, dtypes.uint32)
    return lax.concatenate([lax.reshape(high, (1,)), lax.reshape(low, (1,))], 0)


def _integer_scalar(name: str, value):
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**64:
            raise OverflowError(f"{name}: {value} does not fit in 64 bits")
        value = np.uint64(value) if value >= 2**63 else np.int64(value)
    value = lax.asarray(value)
    if value.shape != () or not dtypes.is_int(value.dtype):
        raise TypeError(f"{name} takes an integer scalar, got {value.aval.str_short()}")
    return value


def _concrete_int(name: str, x) -> int:
    """A Python int from an integer scalar, which must be concrete: it decides a shape."""
    return x if isinstance(x, int) else operator.index(_integer_scalar(name, x))


def PRNGKey(seed) -> Array:
    """A key from an integer seed: the seed's high and low 32 bits as a 64-bit integer.

    Python ints are 64-bit (so a negative seed fills the high word); integer arrays of 32 bits
    or fewer have a zero high word.
    """
    return _seed_words(_integer_scalar("PRNGKey", seed))


def key(seed) -> Array:
    """The same uint32[2] key as `PRNGKey` (funcgrad has no typed key arrays)."""
    return PRNGKey(seed)


def split(key, num: int | Sequence[int] = 2) -> Array:
    """`num` new keys (a shape of keys if `num` is a tuple), each of shape (2,)."""
    key = _check_key("split", key)
    if isinstance(num, Sequence):
        shape = _canonical_shape("split", num)
    else:
        shape = (operator.index(num),)
    count = lax.iota(dtypes.uint32, 2 * math.prod(shape))
    return lax.reshape(_threefry_2x32(key, count), (*shape, 2))


def _split2(key):
    keys = split(key)
    return lax.index_in_dim(keys, 0, keepdims=False), lax.index_in_dim(keys, 1, keepdims=False)


def fold_in(key, data) -> Array:
    """A new key from `key` and a 32-bit integer, e.g. a step number or a device index."""
    key = _check_key("fold_in", key)
    if isinstance(data, int) and not isinstance(data, bool):
        data = np.uint32(data & 0xFFFFFFFF)
    data = lax.convert_element_type(_integer_scalar("fold_in", data), dtypes.uint32)
    return _threefry_2x32(key, _seed_words(data))


def key_data(keys) -> Array:
    """The uint32 words of keys (keys already are their data in funcgrad)."""
    return _check_key_words("key_data", keys)


def wrap_key_data(key_bits_array, *, impl=None) -> Array:
    """Keys from uint32 words of shape (..., 2); only the default threefry2x32 impl exists."""
    if impl not in (None, "threefry2x32"):
        raise ValueError(f"wrap_key_data: unknown PRNG impl {impl!r}; funcgrad has threefry2x32")
    return _check_key_words("wrap_key_data", key_bits_array)


def _check_key_words(name: str, keys):
    keys = lax.asarray(keys)
    if keys.dtype != dtypes.uint32 or keys.shape[-1:] != (2,):
        raise TypeError(
            f"{name}: keys are uint32 arrays of shape (..., 2), got {keys.aval.str_short()}"
        )
    return keys


def _random_bits(key, bit_width: int, shape: tuple[int, ...]):
    """Unsigned integers of `bit_width` bits: the encryptions of counters 0, 1, 2, ..."""
    size = math.prod(shape)
    words = -(-bit_width * size // 32)
    if words > np.iinfo(np.uint32).max:
        raise ValueError(f"cannot draw {size} random values of {bit_width} bits from one key")
    dtype = np.dtype(f"uint{bit_width}")
    bits = _threefry_2x32(key, lax.iota(dtypes.uint32, words))
    if bit_width == 64:
        # The first half of the words are the high halves, the second half the low ones.
        high, low = (
            lax.convert_element_type(lax.slice(bits, (i * size,), ((i + 1) * size,)), dtype)
            for i in (0, 1)
        )
        bits = lax.bitwise_or(lax.shift_left(high, 32), low)
    elif bit_width < 32:
        # Each word gives 32 / bit_width values, low bits first (a little-endian view).
        per_word = 32 // bit_width
        shifts = lax.mul(lax.broadcasted_iota(dtypes.uint32, (words, per_word), 1), bit_width)
        spread = lax.broadcast_in_dim(bits, (words, per_word), (0,))
        parts = lax.shift_right_logical(spread, shifts)
        bits = lax.convert_element_type(lax.reshape(parts, (words * per_word,)), dtype)
        bits = lax.slice(bits, (0,), (size,))
    return lax.reshape(bits, shape)


def bits(key, shape: Sequence[int] = (), dtype=None) -> Array:
    """Uniformly random unsigned integers (uint32 unless `dtype` names another unsigned type)."""
    key = _check_key("bits", key)
    dtype = dtypes.uint32 if dtype is None else dtypes.canonicalize(dtype)
    if not dtypes.is_unsigned(dtype):
        raise TypeError(f"bits draws unsigned integers, got dtype {dtype.name}")
    return _random_bits(key, dtype.itemsize * 8, _canonical_shape("bits", shape))


# ---------------------------------------------------------------------------------------------
# Continuous distributions


def _uniform(name: str, key, shape, dtype, minval, maxval):
    minval = _broadcast_to(name, _as_dtype(minval, dtype), shape)
    maxval = _broadcast_to(name, _as_dtype(maxval, dtype), shape)
    info = dtypes.finfo(dtype)
    uint_dtype = np.dtype(f"uint{info.bits}")
    # Random mantissa bits under the exponent of 1.0 make a float uniform in [1, 2). Types with
    # fewer than 8 mantissa bits draw 8 random bits, as JAX does.
    random_width = 8 if info.nmant < 8 else info.bits
    random = lax.convert_element_type(_random_bits(key, random_width, shape), uint_dtype)
    one = np.array(1.0, dtype)
    mantissa = lax.shift_right_logical(random, random_width - info.nmant)
    in_one_two = lax.bitcast_convert_type(lax.bitwise_or(mantissa, one.view(uint_dtype)), dtype)
    unit = lax.sub(in_one_two, one[()])
    scaled = lax.add(lax.mul(unit, lax.sub(maxval, minval)), minval)
    return lax.max(minval, scaled)  # rounding of the affine map must not dip below minval


def uniform(key, shape: Sequence[int] = (), dtype=float, minval=0.0, maxval=1.0) -> Array:
    """Floats uniform in [minval, maxval); `minval` and `maxval` broadcast to `shape`."""
    key = _check_key("uniform", key)
    dtype = _float_dtype("uniform", dtype)
    shape = _canonical_shape("uniform", shape)
    return _uniform("uniform", key, shape, dtype, minval, maxval)


def _normal(key, shape, dtype):
    # erf_inv maps uniform numbers in (-1, 1) to normal ones divided by sqrt(2).
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform("normal", key, shape, dtype, low, 1.0)
    return lax.mul(lax.erf_inv(u), np.array(np.sqrt(2), dtype)[()])


def normal(key, shape: Sequence[int] = (), dtype=float) -> Array:
    """Standard normal floats."""
    key = _check_key("normal", key)
    return _normal(key, _canonical_shape("normal", shape), _float_dtype("normal", dtype))


def truncated_normal(key, lower, upper, shape=None, dtype=float) -> Array:
    """Standard normal floats conditioned on lying in the open interval (lower, upper).

    The shape defaults to the broadcast shape of `lower` and `upper`.
    """
    key = _check_key("truncated_normal", key)
    dtype = _float_dtype("truncated_normal", dtype)
    lower, upper = _as_dtype(lower, dtype), _as_dtype(upper, dtype)
    if shape is None:
        shape = np.broadcast_shapes(lower.shape, upper.shape)
    shape = _canonical_shape("truncated_normal", shape)
    # Inverse-CDF sampling: uniform between the CDFs of the bounds, mapped back by erf_inv.
    sqrt2 = np.array(np.sqrt(2), dtype)[()]
    cdf_lower, cdf_upper = (lax.erf(lax.div(bound, sqrt2)) for bound in (lower, upper))
    u = _uniform("truncated_normal", key, shape, dtype, cdf_lower, cdf_upper)
    out = lax.mul(lax.erf_inv(u), sqrt2)
    # Rounding can land on or past a bound; clamp into the open interval.
    inside_lower = lax.nextafter(lax.stop_gradient(lower), np.inf)
    inside_upper = lax.nextafter(lax.stop_gradient(upper), -np.inf)
    return lax.clamp(
        _broadcast_to("truncated_normal", inside_lower, shape),
        out,
        _broadcast_to("truncated_normal", inside_upper, shape),
    )


def _open_unit(name: str, key, shape, dtype):
    """Uniform floats in (0, 1): the smallest normal float stands in for 0."""
    return _uniform(name, key, shape, dtype, dtypes.finfo(dtype).tiny, 1.0)


def gumbel(key, shape: Sequence[int] = (), dtype=float) -> Array:
    """Standard Gumbel floats, -log(-log(u)) for u uniform in (0, 1)."""
    key = _check_key("gumbel", key)
    dtype = _float_dtype("gumbel", dtype)
    u = _open_unit("gumbel", key, _canonical_shape("gumbel", shape), dtype)
    return lax.neg(lax.log(lax.neg(lax.log(u))))


def exponential(key, shape: Sequence[int] = (), dtype=float) -> Array:
    """Exponential floats of rate 1, -log(1 - u) for u uniform in [0, 1)."""
    key = _check_key("exponential", key)
    dtype = _float_dtype("exponential", dtype)
    u = _uniform("exponential", key, _canonical_shape("exponential", shape), dtype, 0.0, 1.0)
    return lax.neg(lax.log1p(lax.neg(u)))


# ---------------------------------------------------------------------------------------------
# Discrete distributions


def bernoulli(key, p=0.5, shape=None) -> Array:
    """Booleans that are True with probability `p` (which broadcasts to `shape`)."""
    key = _check_key("bernoulli", key)
    p = lax.asarray(p)
    if not dtypes.is_float(p.dtype):
        raise TypeError(f"bernoulli: the probability p must be floating-point, got {p.dtype.name}")
    shape = p.shape if shape is None else _canonical_shape("bernoulli", shape)
    u = _uniform("bernoulli", key, shape, p.dtype, 0.0, 1.0)
    return lax.lt(u, _broadcast_to("bernoulli", p, shape))


def _integer_bound(x, dtype: np.dtype):
    """`x` clipped into the range of `dtype` and converted, and whether it lay above that range."""
    info = np.iinfo(dtype)
    if isinstance(x, int) and not isinstance(x, bool):
        clipped = lax.full((), min(max(x, info.min), info.max), dtype)
        return clipped, lax.asarray(x > info.max)
    x = lax.asarray(x)
    if not dtypes.is_int(x.dtype):
        x = lax.convert_element_type(x, dtypes.int32)
    own = np.iinfo(x.dtype)
    low, high = max(own.min, info.min), min(own.max, info.max)
    return lax.convert_element_type(lax.clamp(low, x, high), dtype), lax.gt(x, high)


def randint(key, shape: Sequence[int], minval, maxval, dtype=int) -> Array:
    """Integers uniform in [minval, maxval) (just `minval` where maxval <= minval).

    A `maxval` above the largest value of `dtype` includes that value: randint(key, s, 0, 256,
    np.uint8) covers every uint8.
    """
    key = _check_key("randint", key)
    shape = _canonical_shape("randint", shape)
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_int(dtype):
        raise TypeError(f"randint draws integers, got dtype {dtype.name}")
    minval, _ = _integer_bound(minval, dtype)
    maxval, above_range = _integer_bound(maxval, dtype)
    minval, maxval, above_range = (
        _broadcast_to("randint", x, shape) for x in (minval, maxval, above_range)
    )
    nbits = dtype.itemsize * 8
    unsigned = np.dtype(f"uint{nbits}")
    span = lax.convert_element_type(lax.sub(maxval, minval), unsigned)
    span = lax.select(lax.le(maxval, minval), lax.full_like(span, 1), span)
    # Past the top of the dtype the span grows by one; over the whole dtype it wraps to 0.
    grow = lax.bitwise_and(above_range, lax.gt(maxval, minval))
    span = lax.select(grow, lax.add(span, 1), span)
    whole_range = lax.eq(span, 0)
    span = lax.select(whole_range, lax.full_like(span, 1), span)
    # Two words of random bits, (high * 2**nbits + low) mod span, reduce the modulo bias of one
    # word. 2**nbits mod span is computed as (2**(nbits/2) mod span)**2 mod span.
    key_high, key_low = _split2(key)
    high = _random_bits(key_high, nbits, shape)
    low = _random_bits(key_low, nbits, shape)
    multiplier = lax.rem(lax.full_like(span, 2 ** (nbits // 2)), span)
    multiplier = lax.rem(lax.mul(multiplier, multiplier), span)
    offset = lax.add(lax.mul(lax.rem(high, span), multiplier), lax.rem(low, span))
    offset = lax.select(whole_range, low, lax.rem(offset, span))
    return lax.add(minval, lax.convert_element_type(offset, dtype))


def categorical(key, logits, axis: int = -1, shape=None) -> Array:
    """Indices drawn with probabilities softmax(logits) along `axis` (the Gumbel-max trick).

    `shape` defaults to the shape of `logits` without `axis`; a longer shape draws several
    samples per distribution, and must end with (a broadcast of) that shape.
    """
    key = _check_key("categorical", key)
    logits = lax.asarray(logits)
    if not dtypes.is_float(logits.dtype):
        raise TypeError(f"categorical: logits must be floating-point, got {logits.dtype.name}")
    if not -logits.ndim <= axis < logits.ndim:
        raise ValueError(f"categorical: axis {axis} is out of range for logits {logits.shape}")
    axis %= logits.ndim
    batch_shape = logits.shape[:axis] + logits.shape[axis + 1 :]
    shape = batch_shape if shape is None else _canonical_shape("categorical", shape)
    prefix = len(shape) - len(batch_shape)
    if prefix < 0 or any(b not in (1, s) for b, s in zip(batch_shape, shape[prefix:])):
        raise ValueError(
            f"categorical: shape {shape} must end with the batch shape {batch_shape} (or a "
            f"broadcast of it) of logits {logits.shape} without axis {axis}"
        )
    draw_shape = shape[: prefix + axis] + (logits.shape[axis],) + shape[prefix + axis :]
    noise = gumbel(key, draw_shape, logits.dtype)
    logits = _broadcast_to("categorical", logits, draw_shape)
    return lax.argmax(lax.add(noise, logits), prefix + axis, dtypes.int32)


def _shuffle(key, x, axis: int, same_for_all_slices: bool):
    """Sort `x` along `axis` by random keys (independent per slice unless told otherwise).

    Ties in the sort keys would favour the original order, so for large axes the sort is
    repeated, making ties negligible (three times the bits of the axis size in total).
    """
    size = x.shape[axis] if same_for_all_slices else math.prod(x.shape)
    rounds = math.ceil(3 * math.log(max(1, size)) / math.log(np.iinfo(np.uint32).max))
    for _ in range(rounds):
        key, subkey = _split2(key)
        if same_for_all_slices:
            sort_keys = _random_bits(subkey, 32, (x.shape[axis],))
            sort_keys = lax.broadcast_in_dim(sort_keys, x.shape, (axis,))
        else:
            sort_keys = _random_bits(subkey, 32, x.shape)
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


def permutation(key, x, axis: int = 0, independent: bool = False) -> Array:
    """A random permutation of range(x) for an integer `x`, or of `x` along `axis`.

    Every slice along `axis` is permuted the same way unless `independent`.
    """
    key = _check_key("permutation", key)
    if isinstance(x, int) or np.ndim(x) == 0:
        n = _concrete_int("permutation", x)
        return _shuffle(key, lax.iota(dtypes.int32, n), 0, same_for_all_slices=False)
    x = lax.asarray(x)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"permutation: axis {axis} is out of range for shape {x.shape}")
    axis %= x.ndim
    return _shuffle(key, x, axis, same_for_all_slices=not independent and x.ndim > 1)


def choice(key, a, shape: Sequence[int] = (), replace: bool = True, p=None, axis: int = 0) -> Array:
    """Draws from range(a) for an integer `a`, or from the slices of `a` along `axis`.

    `p` gives the probability of each candidate (uniform if None); without `replace` no
    candidate is drawn twice. Array results have `shape` in place of `axis`.
    """
    key = _check_key("choice", key)
    shape = _canonical_shape("choice", shape)
    if isinstance(a, int) or np.ndim(a) == 0:
        arr, axis, n_inputs = None, 0, _concrete_int("choice", a)
    else:
        arr = lax.asarray(a)
        if not -arr.ndim <= axis < arr.ndim:
            raise ValueError(f"choice: axis {axis} is out of range for shape {arr.shape}")
        axis %= arr.ndim
        n_inputs = arr.shape[axis]
    n_draws = math.prod(shape)
    out_shape = shape if arr is None else arr.shape[:axis] + shape + arr.shape[axis + 1 :]
    if n_draws == 0:
        return lax.full(out_shape, 0, dtypes.int32 if arr is None else arr.dtype)
    if n_inputs <= 0:
        raise ValueError(f"choice: cannot draw {n_draws} samples from an empty population")
    if not replace and n_draws > n_inputs:
        raise ValueError(
            f"choice: cannot draw {n_draws} distinct samples from a population of {n_inputs} "
            "without replacement"
        )
    if p is None and not replace:
        shuffled = permutation(key, n_inputs if arr is None else arr, axis)
        return lax.reshape(lax.slice_in_dim(shuffled, 0, n_draws, axis=axis), out_shape)
    if p is None:
        indices = randint(key, (n_draws,), 0, n_inputs)
    else:
        indices = _weighted_indices(key, p, n_inputs, n_draws, replace)
    if arr is None:
        return lax.reshape(indices, out_shape)
    return lax.reshape(fnp.take(arr, indices, axis=axis), out_shape)


def _weighted_indices(key, p, n_inputs: int, n_draws: int, replace: bool):
    p = lax.asarray(p)
    if not dtypes.is_float(p.dtype):
        p = lax.convert_element_type(p, dtypes.float32)
    if p.shape != (n_inputs,):
        raise ValueError(
            f"choice: p must have shape ({n_inputs},), one per candidate, got {p.shape}"
        )
    if replace:
        # Inverse-CDF sampling: the first candidate whose cumulative probability reaches u.
        cumulative = lax.cumsum(p, 0)
        total = lax.index_in_dim(cumulative, n_inputs - 1, keepdims=False)
        u = _uniform("choice", key, (n_draws,), p.dtype, 0.0, 1.0)
        targets = lax.mul(lax.sub(np.array(1, p.dtype)[()], u), total)
        return lax.convert_element_type(fnp.searchsorted(cumulative, targets), dtypes.int32)
    # Without replacement: the k largest of log(p) + Gumbel noise (the Gumbel-top-k trick).
    noise = gumbel(key, (n_inputs,), p.dtype)
    return lax.top_k(lax.add(noise, lax.log(p)), n_draws)[1]
