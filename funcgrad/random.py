"""Counter-based pseudo-random numbers with JAX's API: explicit keys, split rather than mutated.

A key is a uint32[2] array. Every function here is a pure function of its key: the same key
always gives the same numbers, and `split` and `fold_in` derive keys whose streams are
independent of their parent's and of each other. The numbers are Threefry-2x32 encryptions of
counters (the `threefry2x32` primitive), derived as JAX derives them, and everything is written
with funcgrad.lax and funcgrad.numpy, so it works under every transformation.

Two derivations exist, chosen by `config.threefry_partitionable` as in JAX. The default (True,
JAX's default) encrypts, for element i of the result, the block (high word of i, low word of i):
element i depends on i alone, so any slice of a draw can be computed on its own. False gives
JAX's earlier scheme: the counters 0 .. 2n-1 are cut in halves that form the blocks, and bits
of several widths are packed into and out of 32-bit words. `fold_in` and `PRNGKey` are the
same in both.

With `config.debug_key_reuse` on, every function that draws from a key or splits it records
that it used the key up (`_check_key`; `fold_in` does not, as in JAX), and a second use raises
`KeyReuseError` (`funcgrad.key_reuse`).
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.config import config
from funcgrad.lax.random_bits import random_clone, random_consume
from funcgrad.lax.sharding_constraint import placed
from funcgrad.scipy import special
from funcgrad.transforms.custom_derivatives import custom_jvp
from funcgrad.transforms.vmap import vmap

__all__ = [
    "PRNGKey",
    "ball",
    "bernoulli",
    "binomial",
    "beta",
    "bits",
    "categorical",
    "cauchy",
    "chisquare",
    "choice",
    "clone",
    "dirichlet",
    "double_sided_maxwell",
    "exponential",
    "f",
    "fold_in",
    "gamma",
    "generalized_normal",
    "geometric",
    "gumbel",
    "key",
    "key_data",
    "key_impl",
    "laplace",
    "loggamma",
    "logistic",
    "lognormal",
    "maxwell",
    "multinomial",
    "multivariate_normal",
    "normal",
    "orthogonal",
    "pareto",
    "permutation",
    "poisson",
    "rademacher",
    "randint",
    "rayleigh",
    "split",
    "t",
    "triangular",
    "truncated_normal",
    "uniform",
    "wald",
    "weibull_min",
    "wrap_key_data",
]

# ---------------------------------------------------------------------------------------------
# Argument checks


def _takes_out_sharding(sampler: Callable) -> Callable:
    """`sampler` taking a keyword `out_sharding`, which lays its draws out as
    `with_sharding_constraint` lays values out (a NamedSharding, or a PartitionSpec over the
    current mesh); the numbers drawn are the same whatever the layout."""

    @functools.wraps(sampler)
    def draw(*args, out_sharding=None, **kwargs):
        drawn = sampler(*args, **kwargs)
        if out_sharding is None:
            return drawn
        return placed(drawn, f"random.{sampler.__name__}", out_sharding=out_sharding)

    signature = inspect.signature(sampler)
    keyword = inspect.Parameter("out_sharding", inspect.Parameter.KEYWORD_ONLY, default=None)
    draw.__signature__ = signature.replace(parameters=[*signature.parameters.values(), keyword])
    return draw


def _key_argument(name: str, key):
    key = lax.asarray(key)
    if key.shape != (2,) or key.dtype != dtypes.uint32:
        raise TypeError(
            f"{name} takes a single key, a uint32[2] array (from PRNGKey, key or split), got "
            f"{key.aval.str_short()}; map over a batch of keys with vmap"
        )
    return key


def _check_key(name: str, key):
    """The key a function draws from (or splits), which that uses up: with
    `config.debug_key_reuse` on, the use is recorded (`funcgrad.key_reuse`)."""
    key = _key_argument(name, key)
    if config.debug_key_reuse:
        key = random_consume(key, f"random.{name}")
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


def _computing_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype the rejection and counting samplers compute in: float32 for float16 and
    bfloat16, whose 11 and 8 significant bits bias them (bfloat16 gamma(50) had a mean of
    49.3, float16 binomial(1000, 0.5) a variance of 1080); the draws are rounded at the end."""
    return np.promote_types(dtype, np.float32)


def _rounded(x, dtype: np.dtype):
    return lax.convert_element_type(x, dtype)


def _params(name: str, shape, dtype: np.dtype, *params) -> tuple:
    """The draw's shape (by default the parameters' broadcast shape), and the parameters as
    arrays of dtype broadcast to it."""
    params = [_as_dtype(p, dtype) for p in params]
    if shape is None:
        shape = np.broadcast_shapes(*(p.shape for p in params))
    shape = _canonical_shape(name, shape)
    return shape, [fnp.broadcast_to(p, shape) for p in params]


def _split_n(key, n: int) -> list:
    keys = split(key, n)
    return [lax.index_in_dim(keys, i, keepdims=False) for i in range(n)]


def _all(mask):
    return lax.reduce_and(mask, tuple(range(mask.ndim)))


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


def _encrypt_positions(key, shape: tuple[int, ...]):
    """The two cipher words for each position of `shape`: the encryption of the block (high,
    low word of the position's flat index). Positions stop at 2**32, far beyond any array that
    fits in memory, so the high word is 0."""
    size = math.prod(shape)
    if size > np.iinfo(np.uint32).max:
        raise ValueError(f"cannot draw {size} random values from one key")
    high = lax.full(shape, 0, dtypes.uint32)
    low = lax.reshape(lax.iota(dtypes.uint32, size), shape)
    key1, key2 = (lax.index_in_dim(key, i, keepdims=False) for i in (0, 1))
    return lax.threefry2x32(key1, key2, high, low)


def _threefry_2x32(key, count):
    """Encrypt uint32 counters as JAX's earlier scheme does: the counters, flattened and padded
    with a zero to even length, are cut in two halves that give the two words of each cipher
    block."""
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


def _check_impl(name: str, impl) -> None:
    if impl not in (None, _IMPL):
        raise ValueError(f"{name}: unknown PRNG impl {impl!r}; funcgrad has {_IMPL!r}")


_IMPL = "threefry2x32"


def PRNGKey(seed, *, impl=None) -> Array:
    """A key from an integer seed: the seed's high and low 32 bits as a 64-bit integer.

    Integer arrays of 32 bits or fewer have a zero high word. A Python int is 64-bit under
    `enable_x64` (so a negative seed fills the high word); without it, it is a 32-bit value
    like every other Python int, so only its low 32 bits count: the key is the one a jitted
    `PRNGKey` makes of the same seed. `impl` may name the one generator there is, threefry2x32.
    """
    _check_impl("PRNGKey", impl)
    python_int = isinstance(seed, int) and not isinstance(seed, bool)
    seed = _integer_scalar("PRNGKey", seed)
    if python_int and not config.enable_x64:
        seed = lax.convert_element_type(seed, dtypes.uint32)
    return _seed_words(seed)


def _check_key_dtype(name: str, dtype) -> None:
    if dtype is not None:
        raise NotImplementedError(
            f"{name}: dtype={dtype!r} is not supported: funcgrad's keys are uint32 arrays of "
            "shape (..., 2), with no key dtypes; leave dtype None"
        )


def key(seed, *, impl=None, dtype=None) -> Array:
    """The same uint32[2] key as `PRNGKey` (funcgrad has no typed key arrays, so no key
    `dtype` but None)."""
    _check_impl("key", impl)
    _check_key_dtype("key", dtype)
    return PRNGKey(seed)


def key_impl(keys) -> str:
    """The name of the generator keys are for: threefry2x32, the only one."""
    _check_key_words("key_impl", keys)
    return _IMPL


def split(key, num: int | Sequence[int] = 2) -> Array:
    """`num` new keys (a shape of keys if `num` is a tuple), each of shape (2,)."""
    key = _check_key("split", key)
    if isinstance(num, Sequence):
        shape = _canonical_shape("split", num)
    else:
        shape = (operator.index(num),)
    if config.threefry_partitionable:
        words = _encrypt_positions(key, shape)
        return lax.concatenate([lax.expand_dims(w, (len(shape),)) for w in words], len(shape))
    count = lax.iota(dtypes.uint32, 2 * math.prod(shape))
    return lax.reshape(_threefry_2x32(key, count), (*shape, 2))


def _split2(key):
    keys = split(key)
    return lax.index_in_dim(keys, 0, keepdims=False), lax.index_in_dim(keys, 1, keepdims=False)


def fold_in(key, data) -> Array:
    """A new key from `key` and a 32-bit integer, e.g. a step number or a device index.
    `key` is not used up (as in JAX): fold_in it with other numbers, or draw from it, too."""
    key = _key_argument("fold_in", key)
    if isinstance(data, int) and not isinstance(data, bool):
        data = np.uint32(data & 0xFFFFFFFF)
    data = lax.convert_element_type(_integer_scalar("fold_in", data), dtypes.uint32)
    return _threefry_2x32(key, _seed_words(data))


def key_data(keys) -> Array:
    """The uint32 words of keys (keys already are their data in funcgrad). Under
    `config.debug_key_reuse` the words are a new array, whose uses are not the keys'."""
    return _unconsumed_copy(_check_key_words("key_data", keys))


def wrap_key_data(key_bits_array, *, impl=None, dtype=None) -> Array:
    """Keys from uint32 words of shape (..., 2); only the default threefry2x32 impl exists,
    and no key `dtype` but None. Under `config.debug_key_reuse` they are new keys, unused
    whatever the words were."""
    _check_impl("wrap_key_data", impl)
    _check_key_dtype("wrap_key_data", dtype)
    return _unconsumed_copy(_check_key_words("wrap_key_data", key_bits_array))


def _unconsumed_copy(keys):
    return random_clone(keys) if config.debug_key_reuse else keys


def _check_key_words(name: str, keys):
    keys = lax.asarray(keys)
    if keys.dtype != dtypes.uint32 or keys.shape[-1:] != (2,):
        raise TypeError(
            f"{name}: keys are uint32 arrays of shape (..., 2), got {keys.aval.str_short()}"
        )
    return keys


def _random_bits(key, bit_width: int, shape: tuple[int, ...]):
    """Unsigned integers of `bit_width` bits: the encryptions of counters 0, 1, 2, ..."""
    dtype = np.dtype(f"uint{bit_width}")
    if config.threefry_partitionable:
        # One cipher block per value: 64 bits are its two words, narrower values the low
        # bits of the words' xor.
        first, second = _encrypt_positions(key, shape)
        if bit_width == 64:
            first, second = (lax.convert_element_type(w, dtype) for w in (first, second))
            return lax.bitwise_or(lax.shift_left(first, lax.full((), 32, dtype)), second)
        return lax.convert_element_type(lax.bitwise_xor(first, second), dtype)
    size = math.prod(shape)
    words = -(-bit_width * size // 32)
    if words > np.iinfo(np.uint32).max:
        raise ValueError(f"cannot draw {size} random values of {bit_width} bits from one key")
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


@_takes_out_sharding
def bits(key, shape: Sequence[int] = (), dtype=None) -> Array:
    """Uniformly random unsigned integers (of the default int's width unless `dtype` names
    another unsigned type)."""
    key = _check_key("bits", key)
    if dtype is None:
        dtype = np.dtype(f"uint{8 * dtypes.default_int.itemsize}")
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_unsigned(dtype):
        raise TypeError(f"bits draws unsigned integers, got dtype {dtype.name}")
    return _random_bits(key, dtype.itemsize * 8, _canonical_shape("bits", shape))


# ---------------------------------------------------------------------------------------------
# Continuous distributions


def _uniform(name: str, key, shape, dtype, minval, maxval):
    minval = _broadcast_to(name, _as_dtype(minval, dtype), shape)
    maxval = _broadcast_to(name, _as_dtype(maxval, dtype), shape)
    info = dtypes.finfo(dtype)
    if info.bits < 8:
        raise TypeError(
            f"{name} draws floats of 8 bits or more, got {dtype.name}: draw float32 and convert"
        )
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


@_takes_out_sharding
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


@_takes_out_sharding
def normal(key, shape: Sequence[int] = (), dtype=float) -> Array:
    """Standard normal floats; for a complex dtype, standard complex normal numbers (real and
    imaginary parts independent, each of variance 1/2, as in JAX)."""
    key = _check_key("normal", key)
    shape = _canonical_shape("normal", shape)
    if dtypes.is_complex(dtypes.canonicalize(dtype)):
        part = dtypes.real_dtype(dtypes.canonicalize(dtype))
        real_key, imaginary_key = _split2(key)
        scale = np.array(np.sqrt(0.5), part)[()]
        parts = (lax.mul(_normal(k, shape, part), scale) for k in (real_key, imaginary_key))
        return lax.complex(*parts)
    return _normal(key, shape, _float_dtype("normal", dtype))


# Beyond this many standard deviations erf(x / sqrt 2) is too close to +-1 for float32 to
# resolve an interval's probability (erf(5 / sqrt 2) and erf(10 / sqrt 2) are one float32).
_NORMAL_TAIL = 3.0


@_takes_out_sharding
def truncated_normal(key, lower, upper, shape=None, dtype=float) -> Array:
    """Standard normal floats conditioned on lying in the open interval (lower, upper).

    The shape defaults to the broadcast shape of `lower` and `upper`. Inverse-CDF sampling:
    uniform between erf(lower / sqrt 2) and erf(upper / sqrt 2), mapped back by erf_inv, as
    JAX samples. An interval lying beyond 3 standard deviations on one side (some element of
    it, where the bounds are arrays) is drawn instead as its mirror image below 0, negated,
    uniform between the normal CDFs of the bounds (in float64 and in logs, which keep their
    relative precision there however far out) and mapped back by ndtri's tail; through erf,
    (5, 10) gave a handful of distinct values.
    """
    key = _check_key("truncated_normal", key)
    dtype = _float_dtype("truncated_normal", dtype)
    if isinstance(lower, core.Tracer) or isinstance(upper, core.Tracer):
        far_out = None  # decided when the program runs
    else:
        # Known bounds (the usual case, e.g. an initializer's -2 and 2) choose the method
        # now, and a jitted program holds only that one.
        far_out = bool(
            np.any(np.asarray(lower, np.float64) >= _NORMAL_TAIL)
            or np.any(np.asarray(upper, np.float64) <= -_NORMAL_TAIL)
        )
    lower, upper = _as_dtype(lower, dtype), _as_dtype(upper, dtype)
    if shape is None:
        shape = np.broadcast_shapes(lower.shape, upper.shape)
    shape = _canonical_shape("truncated_normal", shape)

    def through_erf(lower, upper):
        sqrt2 = np.array(np.sqrt(2), dtype)[()]
        cdf_lower, cdf_upper = (lax.erf(lax.div(bound, sqrt2)) for bound in (lower, upper))
        u = _uniform("truncated_normal", key, shape, dtype, cdf_lower, cdf_upper)
        return lax.mul(lax.erf_inv(u), sqrt2)

    def through_lower_tail(lower, upper):
        # In float64 and in logs: the CDFs underflowed float32 past -13 (every draw of
        # (-30, -29) came out at -30), and float64 past -37.
        low, high = (fnp.broadcast_to(b, shape).astype(np.float64) for b in (lower, upper))
        mirrored = lax.gt(low, lax.full_like(low, 0))
        low, high = lax.select(mirrored, -high, low), lax.select(mirrored, -low, high)
        log_low, log_high = special.log_ndtr(low), special.log_ndtr(high)
        u = _uniform("truncated_normal", key, shape, np.float64, 0.0, 1.0)
        ratio = lax.exp(log_low - log_high)  # ndtr(low) / ndtr(high)
        x = special.lower_tail_ndtri(log_high + lax.log(ratio + u * (1 - ratio)))
        return lax.convert_element_type(lax.select(mirrored, -x, x), dtype)

    lower = _broadcast_to("truncated_normal", lower, shape)
    upper = _broadcast_to("truncated_normal", upper, shape)
    if far_out is None:
        far_out = fnp.any(lax.stop_gradient((lower >= _NORMAL_TAIL) | (upper <= -_NORMAL_TAIL)))
        out = lax.cond(far_out, through_lower_tail, through_erf, lower, upper)
    else:
        out = (through_lower_tail if far_out else through_erf)(lower, upper)
    # Rounding can land on or past a bound; clamp into the open interval. (Toward the format's
    # extremes, not infinity, which float8_e4m3fn spells NaN.)
    inside_lower = lax.nextafter(lax.stop_gradient(lower), dtypes.highest(dtype))
    inside_upper = lax.nextafter(lax.stop_gradient(upper), dtypes.lowest(dtype))
    return lax.clamp(
        _broadcast_to("truncated_normal", inside_lower, shape),
        out,
        _broadcast_to("truncated_normal", inside_upper, shape),
    )


def _open_unit(name: str, key, shape, dtype):
    """Uniform floats in (0, 1): the smallest normal float stands in for 0."""
    return _uniform(name, key, shape, dtype, dtypes.finfo(dtype).tiny, 1.0)


@_takes_out_sharding
def gumbel(key, shape: Sequence[int] = (), dtype=float, mode: str | None = None) -> Array:
    """Standard Gumbel floats, -log(-log(u)) for u uniform in (0, 1).

    `mode="high"` draws u with twice the bits below 1/2, where the largest values come from
    (in float32 up to about 32 rather than 16), at twice the cost; None reads
    `config.use_high_dynamic_range_gumbel`.
    """
    key = _check_key("gumbel", key)
    dtype = _float_dtype("gumbel", dtype)
    shape = _canonical_shape("gumbel", shape)
    if _gumbel_mode("gumbel", mode) == "low":
        u = _open_unit("gumbel", key, shape, dtype)
        return lax.neg(lax.log(lax.neg(lax.log(u))))
    info = dtypes.finfo(dtype)
    both = _uniform("gumbel", key, (2, *shape), dtype, 0.0, 1.0)
    high, low = (lax.index_in_dim(both, i, keepdims=False) for i in range(2))
    # Below 1/2, `low` fills the bits under high's last one; 1 - u is then exact in log1p.
    finer = high + low * float(2.0**-info.nmant) + float(info.tiny)
    u = lax.select(lax.ge(high, np.array(0.5, dtype)[()]), high, finer)
    return lax.neg(lax.log(lax.neg(lax.log1p(lax.neg(u)))))


def _gumbel_mode(name: str, mode: str | None) -> str:
    if mode is None:
        return "high" if config.use_high_dynamic_range_gumbel else "low"
    if mode not in ("low", "high"):
        raise ValueError(f"{name}: mode must be 'low', 'high' or None, got {mode!r}")
    return mode


@_takes_out_sharding
def exponential(key, shape: Sequence[int] = (), dtype=float) -> Array:
    """Exponential floats of rate 1, -log(1 - u) for u uniform in [0, 1)."""
    key = _check_key("exponential", key)
    dtype = _float_dtype("exponential", dtype)
    u = _uniform("exponential", key, _canonical_shape("exponential", shape), dtype, 0.0, 1.0)
    return lax.neg(lax.log1p(lax.neg(u)))


# ---------------------------------------------------------------------------------------------
# Discrete distributions


@_takes_out_sharding
def bernoulli(key, p=0.5, shape=None, mode: str = "low") -> Array:
    """Booleans that are True with probability `p` (which broadcasts to `shape`).

    `mode="high"` compares with a uniform number of twice the bits, so that probabilities
    below the float's resolution (about 1e-7 in float32) are drawn correctly, at twice the cost.
    """
    key = _check_key("bernoulli", key)
    if mode not in ("low", "high"):
        raise ValueError(f"bernoulli: mode must be 'low' or 'high', got {mode!r}")
    p = lax.asarray(p)
    if not dtypes.is_float(p.dtype):
        raise TypeError(f"bernoulli: the probability p must be floating-point, got {p.dtype.name}")
    shape = p.shape if shape is None else _canonical_shape("bernoulli", shape)
    work = _computing_dtype(p.dtype)
    p = _broadcast_to("bernoulli", lax.convert_element_type(p, work), shape)
    if mode == "low":
        return lax.lt(_uniform("bernoulli", key, shape, work, 0.0, 1.0), p)
    both = _uniform("bernoulli", key, (2, *shape), work, 0.0, 1.0)
    high, low = (lax.index_in_dim(both, i, keepdims=False) for i in range(2))
    # u = high + low * 2^-nmant < p, with the subtraction kept exact for p near high.
    return lax.lt(low * float(2.0 ** -dtypes.finfo(work).nmant), p - high)


def _integer_bound(x, dtype: np.dtype):
    """`x` clipped into the range of `dtype` and converted, and whether it lay above that range."""
    info = dtypes.iinfo(dtype)
    if isinstance(x, int) and not isinstance(x, bool):
        clipped = lax.full((), min(max(x, info.min), info.max), dtype)
        return clipped, lax.asarray(x > info.max)
    x = lax.asarray(x)
    if not dtypes.is_int(x.dtype):
        x = lax.convert_element_type(x, dtypes.int32)
    own = dtypes.iinfo(x.dtype)
    low, high = max(own.min, info.min), min(own.max, info.max)
    return lax.convert_element_type(lax.clamp(low, x, high), dtype), lax.gt(x, high)


@_takes_out_sharding
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
    if dtypes.is_narrow(dtype):
        # Drawn as int32 between the bounds clipped into the format's range (a maxval past its
        # top includes the top), then converted: exact, where the format's own arithmetic
        # would wrap the span.
        wide = dtypes.compute_dtype(dtype)
        low, high = (lax.convert_element_type(x, wide) for x in (minval, maxval))
        high = lax.add(high, lax.convert_element_type(above_range, wide))
        return lax.convert_element_type(randint(key, shape, low, high, wide), dtype)
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
    if nbits <= 32:
        # 64 random bits reduced modulo the span, computed exactly in uint64: the bias is
        # below span / 2**64. (Reducing two words of nbits each with nbits-bit arithmetic,
        # as below, wraps around once span**2 exceeds 2**nbits: randint(0, 10**9) had a mean
        # 2.4% low, and 8-bit dtypes were skewed at any span.) Over the whole range of the
        # dtype the span, 2**nbits, wrapped to 0 above; here it is represented.
        wide = np.dtype(np.uint64)
        wide_span = lax.convert_element_type(span, wide)
        wide_span = lax.select(lax.eq(span, 0), lax.full_like(wide_span, 2**nbits), wide_span)
        offset = lax.rem(_random_bits(key, 64, shape), wide_span)
        return lax.add(minval, lax.convert_element_type(offset, dtype))
    # 64-bit integers: 64 random bits modulo the span, redrawn (with new keys) where they
    # fall in the incomplete last period, 2**64 - (2**64 mod span) and above, so every
    # value is equally likely; at most half the draws are redrawn, for spans just above
    # 2**63. (Two words reduced with 64-bit arithmetic wrapped around for spans past 2**32:
    # [0, 3e18) had a mean 1% low.) Over the whole range, the span wrapped to 0 above,
    # every draw is kept.
    whole_range = lax.eq(span, 0)
    span = lax.select(whole_range, lax.full_like(span, 1), span)
    incomplete = lax.rem(lax.sub(lax.full_like(span, 0), span), span)  # 2**64 mod span
    keep_all = whole_range | lax.eq(incomplete, 0)
    threshold = lax.sub(lax.full_like(span, 0), incomplete)  # 2**64 - incomplete

    def draw(carry):
        key, offset, done = carry
        key, subkey = _split2(key)
        bits = _random_bits(subkey, 64, shape)
        accept = keep_all | lax.lt(bits, threshold)
        reduced = lax.select(whole_range, bits, lax.rem(bits, span))
        return key, lax.select(accept & ~done, reduced, offset), done | accept

    init = (key, lax.full(shape, 0, unsigned), lax.full(shape, False, dtypes.bool_))
    _, offset, _ = lax.while_loop(lambda carry: ~_all(carry[2]), draw, init)
    return lax.add(minval, lax.convert_element_type(offset, dtype))


@_takes_out_sharding
def categorical(
    key, logits, axis: int = -1, shape=None, replace: bool = True, mode: str | None = None
) -> Array:
    """Indices drawn with probabilities softmax(logits) along `axis` (the Gumbel-max trick).

    `shape` defaults to the shape of `logits` without `axis`; a longer shape draws several
    samples per distribution, and must end with (a broadcast of) that shape. Without
    `replace` the samples of one distribution are distinct (the Gumbel-top-k trick), and
    `shape` must end with that shape exactly. `mode` is `gumbel`'s.
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
    work = _computing_dtype(logits.dtype)
    if not replace:
        return _categorical_distinct(key, logits, axis, shape, prefix, work, mode)
    draw_shape = shape[: prefix + axis] + (logits.shape[axis],) + shape[prefix + axis :]
    noise = gumbel(key, draw_shape, work, mode)
    logits = _broadcast_to("categorical", lax.convert_element_type(logits, work), draw_shape)
    return lax.argmax(lax.add(noise, logits), prefix + axis, dtypes.default_int)


def _categorical_distinct(key, logits, axis: int, shape, prefix: int, work, mode):
    """The k = prod(shape[:prefix]) largest of logits + Gumbel noise along `axis`, which are k
    draws without replacement, laid out as `shape`."""
    batch_shape = logits.shape[:axis] + logits.shape[axis + 1 :]
    if shape[prefix:] != batch_shape:
        raise ValueError(
            f"categorical: without replacement, shape {shape} must end with the batch shape "
            f"{batch_shape} itself"
        )
    k = math.prod(shape[:prefix])
    if k > logits.shape[axis]:
        raise ValueError(
            f"categorical: cannot draw {k} distinct samples from {logits.shape[axis]} categories"
        )
    noisy = lax.add(gumbel(key, logits.shape, work, mode), lax.convert_element_type(logits, work))
    _, indices = lax.top_k(fnp.moveaxis(noisy, axis, -1), k)  # batch_shape + (k,)
    indices = lax.convert_element_type(indices, dtypes.default_int)
    return lax.reshape(fnp.moveaxis(indices, -1, 0), shape)


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


@_takes_out_sharding
def permutation(key, x, axis: int = 0, independent: bool = False) -> Array:
    """A random permutation of range(x) for an integer `x`, or of `x` along `axis`.

    Every slice along `axis` is permuted the same way unless `independent`.
    """
    key = _check_key("permutation", key)
    if isinstance(x, int) or np.ndim(x) == 0:
        n = _concrete_int("permutation", x)
        return _shuffle(key, lax.iota(dtypes.default_int, n), 0, same_for_all_slices=False)
    x = lax.asarray(x)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"permutation: axis {axis} is out of range for shape {x.shape}")
    axis %= x.ndim
    return _shuffle(key, x, axis, same_for_all_slices=not independent and x.ndim > 1)


def choice(
    key,
    a,
    shape: Sequence[int] = (),
    replace: bool = True,
    p=None,
    axis: int = 0,
    mode: str | None = None,
) -> Array:
    """Draws from range(a) for an integer `a`, or from the slices of `a` along `axis`.

    `p` gives the probability of each candidate (uniform if None); without `replace` no
    candidate is drawn twice. Array results have `shape` in place of `axis`. `mode` is
    `gumbel`'s, for weighted draws without replacement.
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
        return lax.full(out_shape, 0, dtypes.default_int if arr is None else arr.dtype)
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
        indices = _weighted_indices(key, p, n_inputs, n_draws, replace, mode)
    if arr is None:
        return lax.reshape(indices, out_shape)
    return lax.reshape(fnp.take(arr, indices, axis=axis), out_shape)


def _weighted_indices(key, p, n_inputs: int, n_draws: int, replace: bool, mode):
    p = lax.asarray(p)
    float_dtype = p.dtype if dtypes.is_float(p.dtype) else dtypes.default_float
    p = lax.convert_element_type(p, _computing_dtype(float_dtype))
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
        return lax.convert_element_type(fnp.searchsorted(cumulative, targets), dtypes.default_int)
    # Without replacement: the k largest of log(p) + Gumbel noise (the Gumbel-top-k trick).
    noise = gumbel(key, (n_inputs,), p.dtype, mode)
    return lax.top_k(lax.add(noise, lax.log(p)), n_draws)[1]


# ---------------------------------------------------------------------------------------------
# More distributions: location-scale families, gamma and its relatives, Poisson, matrices
#
# Arrays of one float dtype combine with Python numbers in that dtype (weak typing), so the
# formulas below use operators.


def _draw_dtype(name: str, dtype) -> np.dtype:
    return _float_dtype(name, float if dtype is None else dtype)


@_takes_out_sharding
def laplace(key, shape: Sequence[int] = (), dtype=None) -> Array:
    """Standard Laplace floats (density exp(-|x|) / 2), by inverting the CDF (JAX's numbers:
    u in (-1, 1) above 0 gives a negative draw)."""
    key = _check_key("laplace", key)
    dtype = _draw_dtype("laplace", dtype)
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform("laplace", key, _canonical_shape("laplace", shape), dtype, low, 1.0)
    return lax.sign(u) * lax.log1p(-lax.abs(u))


@_takes_out_sharding
def logistic(key, shape: Sequence[int] = (), dtype=None) -> Array:
    """Standard logistic floats, log(u / (1 - u)) for u uniform in (0, 1)."""
    key = _check_key("logistic", key)
    dtype = _draw_dtype("logistic", dtype)
    u = _open_unit("logistic", key, _canonical_shape("logistic", shape), dtype)
    return lax.log(u) - lax.log1p(-u)


@_takes_out_sharding
def cauchy(key, shape: Sequence[int] = (), dtype=None) -> Array:
    """Standard Cauchy floats, tan(pi (u - 1/2)) for u uniform in (0, 1)."""
    key = _check_key("cauchy", key)
    dtype = _draw_dtype("cauchy", dtype)
    u = _open_unit("cauchy", key, _canonical_shape("cauchy", shape), dtype)
    return lax.tan(np.pi * (u - 0.5))


@_takes_out_sharding
def rademacher(key, shape: Sequence[int] = (), dtype=None) -> Array:
    """-1 or 1 with equal probability (the default int unless `dtype` says otherwise)."""
    key = _check_key("rademacher", key)
    dtype = dtypes.default_int if dtype is None else dtypes.canonicalize(dtype)
    coin = bernoulli(key, 0.5, _canonical_shape("rademacher", shape))
    return lax.convert_element_type(coin, dtype) * 2 - 1


@_takes_out_sharding
def maxwell(key, shape: Sequence[int] = (), dtype=None) -> Array:
    """Maxwell-Boltzmann floats of scale 1: the length of a standard normal 3-vector."""
    key = _check_key("maxwell", key)
    dtype = _draw_dtype("maxwell", dtype)
    shape = _canonical_shape("maxwell", shape)
    z = _normal(key, (*shape, 3), dtype)
    return lax.sqrt(lax.reduce_sum(z * z, (len(shape),)))


def double_sided_maxwell(key, loc, scale, shape: Sequence[int] = (), dtype=None) -> Array:
    """Maxwell magnitudes with random signs, scaled by `scale` and shifted by `loc`."""
    key = _check_key("double_sided_maxwell", key)
    dtype = _draw_dtype("double_sided_maxwell", dtype)
    shape, (loc, scale) = _params("double_sided_maxwell", shape, dtype, loc, scale)
    magnitude_key, sign_key = _split2(key)
    magnitude = maxwell(magnitude_key, shape, dtype)
    return magnitude * rademacher(sign_key, shape, dtype) * scale + loc


@_takes_out_sharding
def lognormal(key, sigma=1.0, shape=None, dtype=None) -> Array:
    """exp(sigma * z) for standard normal z."""
    key = _check_key("lognormal", key)
    dtype = _draw_dtype("lognormal", dtype)
    shape, (sigma,) = _params("lognormal", shape, dtype, sigma)
    return lax.exp(_normal(key, shape, dtype) * sigma)


@_takes_out_sharding
def pareto(key, b, shape=None, dtype=None) -> Array:
    """Pareto floats of shape b and scale 1 (at least 1): exp(E / b) for exponential E."""
    key = _check_key("pareto", key)
    dtype = _draw_dtype("pareto", dtype)
    shape, (b,) = _params("pareto", shape, dtype, b)
    return lax.exp(exponential(key, shape, dtype) / b)


def weibull_min(key, scale, concentration, shape: Sequence[int] = (), dtype=None) -> Array:
    """Weibull floats: scale * E**(1 / concentration) for exponential E."""
    key = _check_key("weibull_min", key)
    dtype = _draw_dtype("weibull_min", dtype)
    shape, (scale, concentration) = _params("weibull_min", shape, dtype, scale, concentration)
    return scale * exponential(key, shape, dtype) ** (1 / concentration)


@_takes_out_sharding
def rayleigh(key, scale, shape=None, dtype=None) -> Array:
    """Rayleigh floats: scale * sqrt(-2 log u) for u uniform in (0, 1) (JAX's numbers but where
    u is 0, which stands for the smallest normal float rather than making inf)."""
    key = _check_key("rayleigh", key)
    dtype = _draw_dtype("rayleigh", dtype)
    shape, (scale,) = _params("rayleigh", shape, dtype, scale)
    u = _open_unit("rayleigh", key, shape, dtype)
    return scale * lax.sqrt(lax.log(u) * np.array(-2, dtype)[()])


@_takes_out_sharding
def triangular(key, left, mode, right, shape=None, dtype=None) -> Array:
    """Triangular floats on [left, right] peaking at mode, by inverting the CDF."""
    key = _check_key("triangular", key)
    dtype = _draw_dtype("triangular", dtype)
    shape, (left, mode, right) = _params("triangular", shape, dtype, left, mode, right)
    u = _uniform("triangular", key, shape, dtype, 0.0, 1.0)
    width = right - left
    rising = left + lax.sqrt(u * width * (mode - left))
    falling = right - lax.sqrt((1 - u) * width * (right - mode))
    return lax.select(u < (mode - left) / width, rising, falling)


@_takes_out_sharding
def wald(key, mean, shape=None, dtype=None) -> Array:
    """Inverse Gaussian (Wald) floats of the given mean and shape parameter 1, by the
    transformation of Michael, Schucany and Haas (one normal and one uniform draw).

    The smaller root of their quadratic, mean + mean / 2 (s - sqrt(s**2 + 4 s)) with
    s = mean z**2, is computed as 4 mean / (sqrt(s) + sqrt(s + 4))**2, the same number
    without the cancellation that made it 0 or negative for large means (40% of the draws
    at mean 1e4 in float32)."""
    key = _check_key("wald", key)
    dtype = _draw_dtype("wald", dtype)
    shape, (mean,) = _params("wald", shape, dtype, mean)
    normal_key, uniform_key = _split2(key)
    z = _normal(normal_key, shape, dtype)
    s = mean * z * z
    root = lax.sqrt(s) + lax.sqrt(s + 4)
    x = 4 * mean / (root * root)
    u = _uniform("wald", uniform_key, shape, dtype, 0.0, 1.0)
    return lax.select(u <= mean / (mean + x), x, mean * (mean / x))


@_takes_out_sharding
def geometric(key, p, shape=None, dtype=None) -> Array:
    """The number of Bernoulli(p) trials up to and including the first success (of the
    default int unless `dtype` says otherwise)."""
    key = _check_key("geometric", key)
    int_dtype = dtypes.default_int if dtype is None else dtypes.canonicalize(dtype)
    p = lax.asarray(p)
    float_dtype = _computing_dtype(p.dtype if dtypes.is_float(p.dtype) else dtypes.default_float)
    shape, (p,) = _params("geometric", shape, float_dtype, p)
    u = _uniform("geometric", key, shape, float_dtype, 0.0, 1.0)
    # (u = 0 counts as 1, one trial, where its log would be -inf; JAX's numbers otherwise.)
    log_u = lax.log(lax.select(u == 0, lax.full_like(u, 1), u))
    trials = lax.floor(log_u / lax.log1p(-p)) + 1
    return lax.convert_element_type(trials, int_dtype)


def _gamma_one(key, a):
    """log of one Gamma(a, 1) draw by Marsaglia and Tsang's method, from the keys JAX's sampler
    derives (so a key gives JAX's number): a < 1 draws for a + 1 and is boosted by
    u**(1/a), in log space, so that tiny a stay finite.

    With d = a - 1/3 (a boosted) and c = 1/sqrt(9 d), normals x are drawn until v = 1 + c x is
    positive; then v**3 is accepted when u < 1 - 0.0331 x**4 or log u < x**2 / 2 + d (1 - v**3
    + log v**3). The sample is d v**3. A NaN or negative a makes every test false: NaN."""
    one, half, third = (np.array(x, a.dtype)[()] for x in (1, 0.5, 1 / 3))
    boosted = a < one
    shape_a = lax.select(boosted, a + one, a)
    d = shape_a - third
    c = third / lax.sqrt(d)

    def rejected(carry):
        _, x_squared, v_cubed, u = carry
        squeezed = u >= one - np.array(0.0331, a.dtype)[()] * x_squared * x_squared
        return squeezed & (lax.log(u) >= x_squared * half + d * (one - v_cubed + lax.log(v_cubed)))

    def draw_positive_v(carry):
        key, _, _ = carry
        key, normal_key = _split2(key)
        x = _normal(normal_key, (), a.dtype)
        return key, x, one + x * c

    def attempt(carry):
        key = carry[0]
        key, x_key, u_key = _split_n(key, 3)
        start = (x_key, lax.full_like(a, 0), lax.full_like(a, -1))
        _, x, v = lax.while_loop(lambda carry: carry[2] <= 0, draw_positive_v, start)
        u = _uniform("gamma", u_key, (), a.dtype, 0.0, 1.0)
        return key, x * x, v * v * v, u

    key, boost_key = _split2(key)
    start = (key, lax.full_like(a, 0), lax.full_like(a, 1), lax.full_like(a, 2))
    _, _, v_cubed, _ = lax.while_loop(rejected, attempt, start)
    log_u = lax.log1p(-_uniform("gamma", boost_key, (), a.dtype, 0.0, 1.0))
    log_boost = lax.select(~boosted | (log_u == 0), lax.full_like(a, 0), log_u / a)
    return lax.log(d) + lax.log(v_cubed) + log_boost


@functools.partial(custom_jvp, nondiff_argnums=(0,))
def _log_gamma_sample(key, a):
    """log of Gamma(a, 1) draws for an array a: element i from the i-th of a.size keys split
    from `key`, as JAX's sampler draws them. Its derivative in a is the implicit
    reparameterization one (the draw moves with a so that its CDF value stays put), which the
    rejection loop's own arithmetic does not give."""
    keys = split(key, a.size)
    flat = vmap(_gamma_one)(keys, lax.reshape(a, (a.size,)))
    return lax.reshape(flat, a.shape)


@_log_gamma_sample.defjvp
def _log_gamma_sample_jvp(key, primals, tangents):
    (a,), (a_dot,) = primals, tangents
    log_sample = _log_gamma_sample(key, a)
    return log_sample, a_dot * _log_gamma_derivative(a, log_sample)


def _log_gamma_derivative(a, log_x):
    """d log x / da for a Gamma(a, 1) draw x held at its CDF value: random_gamma_grad(a, x) / x,
    and below the smallest normal float (where x underflows, for small a), the lower tail's
    leading term: there P(a, x) = x**a / Gamma(a + 1) to a relative O(x), so a log x -
    lgamma(a + 1) stays put and d log x / da = (digamma(a + 1) - log x) / a. (Taking x as the
    smallest normal float instead would give the derivative at log x = -87 in float32 for
    draws far below: a Dirichlet of concentration 0.01 has many.)"""
    tiny = dtypes.finfo(a.dtype).tiny
    underflows = log_x < np.log(tiny)
    x = lax.exp(lax.select(underflows, lax.full_like(log_x, 0), log_x))
    tail = (lax.digamma(a + 1) - log_x) / a
    return lax.select(underflows, tail, lax.random_gamma_grad(a, x) / x)


@_takes_out_sharding
def loggamma(key, a, shape=None, dtype=None) -> Array:
    """log of Gamma(a, 1) floats, accurate also where the samples underflow (small a)."""
    key = _check_key("loggamma", key)
    dtype = _draw_dtype("loggamma", dtype)
    _, (a,) = _params("loggamma", shape, _computing_dtype(dtype), a)
    return _rounded(_log_gamma_sample(key, a), dtype)


@_takes_out_sharding
def gamma(key, a, shape=None, dtype=None) -> Array:
    """Gamma(a, 1) floats (divide by a rate for other rates), by Marsaglia and Tsang's method.

    Derivatives with respect to `a` (forward and reverse) are the implicit reparameterization
    ones: a draw moves with `a` so that its CDF value stays the same, which makes
    `grad(lambda a: f(gamma(key, a)).mean())` estimate the derivative of E[f(X)]. So do those
    of the samplers built on it (`beta`, `dirichlet`, `chisquare`, `t`, `f`, `loggamma`,
    `generalized_normal`).
    """
    key = _check_key("gamma", key)
    dtype = _draw_dtype("gamma", dtype)
    _, (a,) = _params("gamma", shape, _computing_dtype(dtype), a)
    return _rounded(lax.exp(_log_gamma_sample(key, a)), dtype)


@_takes_out_sharding
def chisquare(key, df, shape=None, dtype=None) -> Array:
    """Chi-square floats with df degrees of freedom: 2 Gamma(df / 2)."""
    key = _check_key("chisquare", key)
    dtype = _draw_dtype("chisquare", dtype)
    _, (df,) = _params("chisquare", shape, _computing_dtype(dtype), df)
    return _rounded(2 * lax.exp(_log_gamma_sample(key, df / 2)), dtype)


@_takes_out_sharding
def t(key, df, shape=None, dtype=None) -> Array:
    """Student's t floats: z / sqrt(chi2(df) / df), the scale taken in log space, where the
    gamma draw for small df underflows while the quotient is still finite (df = 0.01 in
    float32 gave inf for 62% of draws rather than the 40% beyond float32's range)."""
    key = _check_key("t", key)
    dtype = _draw_dtype("t", dtype)
    shape, (df,) = _params("t", shape, _computing_dtype(dtype), df)
    normal_key, gamma_key = _split2(key)
    z = _normal(normal_key, shape, _computing_dtype(dtype))
    log_half_chi2 = _log_gamma_sample(gamma_key, df / 2)
    return _rounded(z * lax.exp((lax.log(df / 2) - log_half_chi2) / 2), dtype)


@_takes_out_sharding
def f(key, dfnum, dfden, shape=None, dtype=None) -> Array:
    """F floats: (chi2(dfnum) / dfnum) / (chi2(dfden) / dfden), the quotient taken in log
    space: for small degrees of freedom both chi-square draws underflow, and 0 / 0 made a
    third of f(0.01, 0.01) nan in float32."""
    key = _check_key("f", key)
    dtype = _draw_dtype("f", dtype)
    shape, (dfnum, dfden) = _params("f", shape, _computing_dtype(dtype), dfnum, dfden)
    den_key, num_key = _split2(key)
    log_num = _log_gamma_sample(num_key, dfnum / 2) - lax.log(dfnum)
    log_den = _log_gamma_sample(den_key, dfden / 2) - lax.log(dfden)
    return _rounded(lax.exp(log_num - log_den), dtype)


@_takes_out_sharding
def beta(key, a, b, shape=None, dtype=None) -> Array:
    """Beta(a, b) floats: Ga / (Ga + Gb) for gamma draws, scaled in log space first."""
    key = _check_key("beta", key)
    dtype = _draw_dtype("beta", dtype)
    shape, (a, b) = _params("beta", shape, _computing_dtype(dtype), a, b)
    key_a, key_b = _split2(key)
    log_a, log_b = _log_gamma_sample(key_a, a), _log_gamma_sample(key_b, b)
    log_max = lax.max(log_a, log_b)
    ga, gb = lax.exp(log_a - log_max), lax.exp(log_b - log_max)
    return _rounded(ga / (ga + gb), dtype)


@_takes_out_sharding
def dirichlet(key, alpha, shape=None, dtype=None) -> Array:
    """Dirichlet(alpha) floats along the last axis: normalized gamma draws, scaled in log
    space first; `shape` is the batch shape (alpha's leading axes by default)."""
    key = _check_key("dirichlet", key)
    dtype = _draw_dtype("dirichlet", dtype)
    alpha = _as_dtype(alpha, _computing_dtype(dtype))
    if alpha.ndim < 1:
        raise ValueError(f"dirichlet: alpha must have at least one axis, got shape {alpha.shape}")
    batch = alpha.shape[:-1] if shape is None else _canonical_shape("dirichlet", shape)
    alpha = _broadcast_to("dirichlet", alpha, (*batch, alpha.shape[-1]))
    log_g = _log_gamma_sample(key, alpha)
    g = lax.exp(log_g - fnp.max(log_g, axis=-1, keepdims=True))
    return _rounded(g / fnp.sum(g, axis=-1, keepdims=True), dtype)


@_takes_out_sharding
def poisson(key, lam, shape=None, dtype=None) -> Array:
    """Poisson(lam) integers (of the default int): Knuth's multiplication method for lam < 10,
    Hormann's transformed rejection with squeeze (PTRS) from 10 on; -1 for a negative,
    infinite or NaN lam."""
    key = _check_key("poisson", key)
    int_dtype = dtypes.default_int if dtype is None else dtypes.canonicalize(dtype)
    lam = lax.asarray(lam)
    float_dtype = _computing_dtype(
        lam.dtype if dtypes.is_float(lam.dtype) else dtypes.default_float
    )
    shape, (lam,) = _params("poisson", shape, float_dtype, lam)
    valid = (lam >= 0) & lax.is_finite(lam)
    small = lam < 10
    # Each method gets a harmless stand-in where the other one applies, or lam is invalid; both
    # draw from the same key, as JAX's do, so a key gives JAX's numbers.
    counts = lax.select(
        small,
        _poisson_knuth(key, lax.select(small & valid, lam, lax.full_like(lam, 0))),
        _poisson_rejection(key, lax.select(~small & valid, lam, lax.full_like(lam, 10))),
    )
    counts = lax.select(lam == 0, lax.full_like(lam, 0), counts)  # (no uniform is above 1)
    counts = lax.select(valid, counts, lax.full_like(lam, -1))
    return lax.convert_element_type(counts, int_dtype)


def _poisson_knuth(key, lam):
    """One less than the count of float32 uniforms drawn while their product (as summed logs)
    stays above exp(-lam)."""

    def step(carry):
        key, count, log_product = carry
        key, subkey = _split2(key)
        count = lax.select(log_product > -lam, count + 1, count)
        u = _uniform("poisson", subkey, lam.shape, dtypes.float32, 0.0, 1.0)
        return key, count, log_product + lax.convert_element_type(lax.log(u), lam.dtype)

    zero = lax.full_like(lam, 0)
    init = (key, zero, zero)
    return lax.while_loop(lambda carry: ~_all(carry[2] <= -lam), step, init)[1] - 1


def _poisson_rejection(key, lam):
    """Algorithm PTRS of Hormann, 'The transformed rejection method for generating Poisson
    random variables' (1993), for lam >= 10. Every round draws for every element, and an
    element keeps the last count accepted (as JAX's sampler does, so that a key gives its
    numbers) until all have one."""
    log_lam = lax.log(lam)
    b = 0.931 + 2.53 * lax.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)

    def step(carry):
        key, count, accepted = carry
        key, u_key, v_key = _split_n(key, 3)
        u = _uniform("poisson", u_key, lam.shape, lam.dtype, 0.0, 1.0) - 0.5
        v = _uniform("poisson", v_key, lam.shape, lam.dtype, 0.0, 1.0)
        us = 0.5 - lax.abs(u)
        k = lax.floor((2 * a / us + b) * u + lam + 0.43)
        squeeze = (us >= 0.07) & (v <= v_r)
        reject = (k < 0) | ((us < 0.013) & (v > us))
        log_ratio = lax.log(v * inv_alpha / (a / (us * us) + b))
        log_target = -lam + k * log_lam - lax.lgamma(k + 1)
        accept = squeeze | (~reject & (log_ratio <= log_target))
        return key, lax.select(accept, k, count), accepted | accept

    init = (key, lax.full_like(lam, -1), lax.full(lam.shape, False, dtypes.bool_))
    return lax.while_loop(lambda carry: ~_all(carry[2]), step, init)[1]


@_takes_out_sharding
def binomial(key, n, p, shape=None, dtype=float) -> Array:
    """Binomial(n, p) counts, as floats: drawn for the smaller of p and 1 - p (and mirrored),
    by the waiting-time method (sums of geometric gaps) where n times that is below 10 and by
    Hormann's transformed rejection with squeeze (BTRS) from 10 on; NaN where n is negative,
    not whole or not finite, or p lies outside [0, 1]."""
    key = _check_key("binomial", key)
    dtype = _float_dtype("binomial", dtype)
    shape, (n, p) = _params("binomial", shape, _computing_dtype(dtype), n, p)
    valid = (n >= 0) & (lax.floor(n) == n) & lax.is_finite(n) & (p >= 0) & (p <= 1)
    mirrored = p > 0.5
    q = lax.select(mirrored, 1 - p, p)  # the success probability drawn, at most 1/2
    small = n * q < 10
    wait_key, rejection_key = _split2(key)
    zero, standin = lax.full_like(n, 0), lax.full_like(n, 0.25)
    counts = lax.select(
        small,
        _binomial_waiting(
            wait_key, lax.select(small & valid, n, zero), lax.select(small & valid, q, standin)
        ),
        _binomial_rejection(
            rejection_key,
            lax.select(~small & valid, n, lax.full_like(n, 100)),
            lax.select(~small & valid, q, standin),
        ),
    )
    counts = lax.select(mirrored, n - counts, counts)
    return _rounded(lax.select(valid, counts, lax.full_like(n, np.nan)), dtype)


def _binomial_waiting(key, n, q):
    """Count the successes before position n: gaps between successes are geometric,
    floor(log u / log(1 - q)) + 1, so about n q + 1 rounds."""
    log_failure = lax.log1p(-q)

    def step(carry):
        key, count, position, done = carry
        key, subkey = _split2(key)
        u = _open_unit("binomial", subkey, n.shape, n.dtype)
        position = position + lax.floor(lax.log(u) / log_failure) + 1
        now_done = done | (position > n)
        return key, lax.select(now_done, count, count + 1), position, now_done

    zero = lax.full_like(n, 0)
    init = (key, zero, zero, lax.full(n.shape, False, dtypes.bool_))
    return lax.while_loop(lambda carry: ~_all(carry[3]), step, init)[1]


# log k! - ((k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2): Stirling's remainder, exact for
# k < 10 (from the factorials), by its series above.
_STIRLING_TAIL = [
    math.lgamma(k + 1) - ((k + 0.5) * math.log(k + 1) - (k + 1) + 0.5 * math.log(2 * math.pi))
    for k in range(10)
]


def _stirling_tail(k):
    """Stirling's remainder for whole k >= 0 (see _STIRLING_TAIL)."""
    table = lax.asarray(np.array(_STIRLING_TAIL, k.dtype))
    index = lax.convert_element_type(lax.clamp(0.0, k, 9.0), dtypes.int32)
    exact = fnp.take(table, index)
    inverse = 1 / (k + 1)
    inverse2 = inverse * inverse
    series = inverse * (1 / 12 - inverse2 * (1 / 360 - inverse2 / 1260))
    return lax.select(k < 10, exact, series)


def _binomial_rejection(key, n, q):
    """Algorithm BTRS of Hormann, 'The generation of binomial random variates' (1993), for
    n q >= 10 and q <= 1/2. The acceptance test compares log-probability ratios written as
    log1p of small quotients plus Stirling remainders, so that no two large log-factorials
    are subtracted (which float32 could not do for large n)."""
    spq = lax.sqrt(n * q * (1 - q))
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * q
    c = n * q + 0.5
    v_r = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    log_odds = lax.log(q / (1 - q))
    mode = lax.floor((n + 1) * q)
    mode_tails = _stirling_tail(mode) + _stirling_tail(n - mode)

    def step(carry):
        key, count, accepted = carry
        key, u_key, v_key = _split_n(key, 3)
        u = _uniform("binomial", u_key, n.shape, n.dtype, -0.5, 0.5)
        v = _uniform("binomial", v_key, n.shape, n.dtype, 0.0, 1.0)
        us = 0.5 - lax.abs(u)
        k = lax.floor((2 * a / us + b) * u + c)
        inside = (k >= 0) & (k <= n)
        squeeze = (us >= 0.07) & (v <= v_r)
        safe_k = lax.clamp(lax.full_like(n, 0), k, n)
        # log(P(k) / P(mode)) from the mode's side
        log_target = (
            (mode + 0.5) * lax.log1p((mode - safe_k) / (safe_k + 1))
            + (n - mode + 0.5) * lax.log1p((safe_k - mode) / (n - safe_k + 1))
            + (safe_k - mode) * (lax.log((n - safe_k + 1) / (safe_k + 1)) + log_odds)
            + mode_tails
            - _stirling_tail(safe_k)
            - _stirling_tail(n - safe_k)
        )
        log_v = lax.log(v * alpha / (a / (us * us) + b))
        accept = inside & (squeeze | (log_v <= log_target))
        return key, lax.select(accept & ~accepted, k, count), accepted | accept

    init = (key, lax.full_like(n, 0), lax.full(n.shape, False, dtypes.bool_))
    return lax.while_loop(lambda carry: ~_all(carry[2]), step, init)[1]


def multinomial(key, n, p, *, shape=None, dtype=float, unroll=1) -> Array:
    """Counts of n draws over the categories of p's last axis (probabilities summing to 1), as
    floats of shape `shape` + (categories,) (`shape` defaults to n's and p's batch shape):
    each category's count is binomial given the draws the earlier ones left. `unroll` is
    accepted for compatibility; the categories are one scan."""
    del unroll
    key = _check_key("multinomial", key)
    dtype = _float_dtype("multinomial", dtype)
    work = _computing_dtype(dtype)
    p = _as_dtype(p, work)
    if p.ndim < 1:
        raise ValueError("multinomial: p needs a last axis of categories, got a scalar")
    n = _as_dtype(n, work)
    batch = np.broadcast_shapes(n.shape, p.shape[:-1]) if shape is None else shape
    batch = _canonical_shape("multinomial", batch)
    categories = p.shape[-1]
    n = fnp.broadcast_to(n, batch)
    p = fnp.broadcast_to(p, (*batch, categories))
    remaining_probability = fnp.flip(fnp.cumsum(fnp.flip(p, -1), axis=-1), -1)

    def category(left, inputs):
        key, share, rest = inputs
        conditional = lax.select(
            rest > 0, lax.clamp(0.0, share / rest, 1.0), lax.full_like(rest, 0)
        )
        count = binomial(key, left, conditional, dtype=work)
        return left - count, count

    keys = split(key, categories)
    shares = fnp.moveaxis(p, -1, 0)
    rests = fnp.moveaxis(remaining_probability, -1, 0)
    _, counts = lax.scan(category, n, (keys, shares, rests))
    return _rounded(fnp.moveaxis(counts, 0, -1), dtype)


@_takes_out_sharding
def generalized_normal(key, p: float, shape: Sequence[int] = (), dtype=None) -> Array:
    """Floats of density proportional to exp(-|x|**p): random signs on Gamma(1/p)**(1/p)."""
    key = _check_key("generalized_normal", key)
    dtype = _draw_dtype("generalized_normal", dtype)
    shape = _canonical_shape("generalized_normal", shape)
    gamma_key, sign_key = _split2(key)
    inverse_p = lax.full(shape, 1 / p, _computing_dtype(dtype))
    magnitude = _rounded(lax.exp(_log_gamma_sample(gamma_key, inverse_p) * inverse_p), dtype)
    return magnitude * rademacher(sign_key, shape, dtype)


@_takes_out_sharding
def ball(key, d: int, p: float = 2, shape: Sequence[int] = (), dtype=None) -> Array:
    """Points uniform in the d-dimensional unit p-ball (of shape shape + (d,)): generalized
    normal coordinates divided by the p-norm of themselves and one exponential draw
    (Barthe, Guedon, Mendelson and Naor)."""
    key = _check_key("ball", key)
    dtype = _draw_dtype("ball", dtype)
    shape = _canonical_shape("ball", shape)
    point_key, radius_key = _split2(key)
    g = generalized_normal(point_key, p, (*shape, operator.index(d)), dtype)
    e = exponential(radius_key, shape, dtype)
    norm = (fnp.sum(lax.abs(g) ** p, axis=-1) + e) ** (1 / p)
    return g / norm[..., None]


@_takes_out_sharding
def multivariate_normal(key, mean, cov, shape=None, dtype=None, method: str = "cholesky") -> Array:
    """Normal vectors of mean (..., n) and covariance (..., n, n): mean + A z with
    A A^T = cov from a Cholesky ('cholesky'), eigen ('eigh') or singular value ('svd')
    decomposition. `shape` (the batch shape) defaults to that of mean and cov broadcast."""
    key = _check_key("multivariate_normal", key)
    dtype = _draw_dtype("multivariate_normal", dtype)
    mean, cov = _as_dtype(mean, dtype), _as_dtype(cov, dtype)
    if mean.ndim < 1 or cov.ndim < 2 or cov.shape[-2:] != (mean.shape[-1],) * 2:
        raise ValueError(
            f"multivariate_normal: mean (..., n) and cov (..., n, n) do not fit: shapes "
            f"{mean.shape} and {cov.shape}"
        )
    if method == "cholesky":
        factor = fnp.linalg.cholesky(cov)
    elif method == "eigh":
        w, v = fnp.linalg.eigh(cov)
        factor = v * fnp.sqrt(fnp.maximum(w, 0))[..., None, :]
    elif method == "svd":
        u, s, _ = fnp.linalg.svd(cov)
        factor = u * fnp.sqrt(s)[..., None, :]
    else:
        raise ValueError(
            f"multivariate_normal: method must be 'cholesky', 'eigh' or 'svd', got {method!r}"
        )
    if shape is None:
        shape = np.broadcast_shapes(mean.shape[:-1], cov.shape[:-2])
    shape = _canonical_shape("multivariate_normal", shape)
    z = _normal(key, (*shape, mean.shape[-1]), dtype)
    return mean + fnp.matmul(factor, z[..., None])[..., 0]


@_takes_out_sharding
def orthogonal(key, n: int, shape: Sequence[int] = (), dtype=None, m: int | None = None) -> Array:
    """Random (n, m) matrices with orthonormal columns (rows if n < m), Haar-distributed: the
    Q of a QR decomposition of a normal matrix, its column signs fixed by R's diagonal."""
    key = _check_key("orthogonal", key)
    dtype = _draw_dtype("orthogonal", dtype)
    shape = _canonical_shape("orthogonal", shape)
    n = operator.index(n)
    m = n if m is None else operator.index(m)
    z = _normal(key, (*shape, max(n, m), min(n, m)), dtype)
    q, r = lax.qr(z, full_matrices=False)
    q = q * fnp.sign(fnp.diagonal(r, 0, -2, -1))[..., None, :]
    return q if n >= m else fnp.matrix_transpose(q)


def clone(key) -> Array:
    """A key of the same bits that counts as unused: under `config.debug_key_reuse`, drawing
    from the clone does not use up `key`, nor the other way round (otherwise keys are values,
    and the clone is the key itself)."""
    return _unconsumed_copy(_check_key_words("clone", key))
