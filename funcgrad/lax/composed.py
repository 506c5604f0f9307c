"""More of jax.lax, composed from the primitive families so that every transformation and
backend applies: broadcast_like, mulhi, index_take, scatter_apply, ragged_dot, and the
low-level random functions rng_bit_generator and rng_uniform (on threefry2x32).
"""

from __future__ import annotations

import enum
import functools
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from funcgrad import core, dtypes
from funcgrad.interpreters.staging import compile_time_eval
from funcgrad.lax import elementwise, reductions, shapes
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow import while_loop
from funcgrad.lax.indexing import (
    GatherDimensionNumbers,
    ScatterDimensionNumbers,
    gather,
    scatter_add,
)
from funcgrad.lax.linalg import dot_general
from funcgrad.lax.random_bits import threefry2x32
from funcgrad.lax.sharding_constraint import placed

__all__ = [
    "RandomAlgorithm",
    "broadcast_like",
    "composite",
    "dtype",
    "index_take",
    "mulhi",
    "RaggedDotDimensionNumbers",
    "ragged_dot",
    "ragged_dot_general",
    "rng_bit_generator",
    "rng_uniform",
    "scatter_apply",
]


def composite(decomposition: Callable, name: str, version: int = 0) -> Callable:
    """`decomposition` named as one operation, for compilers that recognise it by `name` and
    `version`: funcgrad's compiler recognises none, so the result is the decomposition itself
    (its semantics, derivatives and batching)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"composite: name must be a non-empty string, got {name!r}")

    @functools.wraps(decomposition)
    def operation(*args, **kwargs):
        return decomposition(*args, **kwargs)

    operation.composite_name = name
    operation.composite_version = int(version)
    return operation


def dtype(x) -> np.dtype:
    """The dtype funcgrad gives `x`: a value's (Python scalars take the defaults, float32 and
    int32, or 64-bit under enable_x64), or a dtype-like's, canonicalized (`float` means the
    default float). Unlike JAX, float64 given by the user stays float64."""
    if dtypes.is_python_scalar(x):
        return dtypes.scalar_dtype(x)[0]
    if hasattr(x, "dtype"):
        return dtypes.canonicalize(x.dtype)
    return dtypes.canonicalize(x)


def broadcast_like(arr, like_arr):
    """arr broadcast (NumPy's rules: trailing dimensions aligned) to the shape of like_arr."""
    x = asarray(arr)
    shape = tuple(core.get_aval(like_arr).shape)
    lead = len(shape) - x.ndim
    if lead < 0 or any(d not in (1, s) for d, s in zip(x.shape, shape[lead:])):
        raise ValueError(f"broadcast_like: cannot broadcast shape {x.shape} to shape {shape}")
    # Size-1 dimensions that grow are dropped first, so broadcast_in_dim can spread them.
    grow = tuple(i for i, (d, s) in enumerate(zip(x.shape, shape[lead:])) if d != s)
    if grow:
        x = shapes.squeeze(x, grow)
    kept = tuple(lead + i for i in range(len(shape) - lead) if i not in grow)
    return shapes.broadcast_in_dim(x, shape, kept)


def mulhi(x, y, /):
    """The high half of the double-width product of integers (the upper N bits of the 2N-bit
    x * y), for signed and unsigned integers of any width. Computed in N-bit arithmetic from
    half-width pieces, so no wider type is needed and 64-bit operands work too."""
    x, y = asarray(x), asarray(y)
    if not dtypes.is_int(x.dtype) or x.dtype != y.dtype:
        raise TypeError(f"mulhi takes integers of one dtype, got {x.dtype.name} and {y.dtype.name}")
    if x.shape != y.shape:
        if x.ndim and y.ndim:
            raise TypeError(f"mulhi: operands of shapes {x.shape} and {y.shape} must match")
        shape = x.shape or y.shape
        x, y = (v if v.shape else shapes.broadcast_in_dim(v, shape, ()) for v in (x, y))
    bits = x.dtype.itemsize * 8
    unsigned = np.dtype(f"uint{bits}")
    ux = elementwise.bitcast_convert_type(x, unsigned)
    uy = elementwise.bitcast_convert_type(y, unsigned)
    high = _mulhi_unsigned(ux, uy, bits)
    if dtypes.is_unsigned(x.dtype):
        return high
    # As signed values x = ux - 2^N [x < 0], so the signed high half is the unsigned one less
    # y where x < 0 and less x where y < 0 (modulo 2^N).
    zero = shapes.full((), 0, unsigned)
    high = elementwise.sub(high, _where(_negative(x), uy, zero))
    high = elementwise.sub(high, _where(_negative(y), ux, zero))
    return elementwise.bitcast_convert_type(high, x.dtype)


def _where(predicate, value, zero):
    return elementwise.select_n(predicate, shapes.broadcast_in_dim(zero, value.shape, ()), value)


def _negative(x):
    return elementwise.lt(x, shapes.full((), 0, x.dtype))


def _mulhi_unsigned(x, y, bits: int):
    # Schoolbook multiplication on half-width digits (Hacker's Delight, mulhu): every partial
    # product of two half-width digits fits in N bits.
    dtype = x.dtype
    half = shapes.full((), bits // 2, dtype)
    mask = shapes.full((), (1 << (bits // 2)) - 1, dtype)

    def lo(v):
        return elementwise.bitwise_and(v, mask)

    def hi(v):
        return elementwise.shift_right_logical(v, half)

    x0, x1, y0, y1 = lo(x), hi(x), lo(y), hi(y)
    w0 = elementwise.mul(x0, y0)
    t = elementwise.add(elementwise.mul(x1, y0), hi(w0))
    w1 = elementwise.add(elementwise.mul(x0, y1), lo(t))
    return elementwise.add(elementwise.add(elementwise.mul(x1, y1), hi(t)), hi(w1))


# ---------------------------------------------------------------------------------------------
# Indexing


def index_take(src, idxs: Sequence, axes: Sequence[int]):
    """src at the points whose coordinates along `axes` are given by `idxs` (one 1-d index
    array per axis, of one length n): shape (n, *the other dimensions of src). Indices wrap
    around (taken modulo the dimension's size), so negative ones count from the end."""
    src = asarray(src)
    axes = tuple(int(a) for a in axes)
    idxs = [asarray(i) for i in idxs]
    if len(idxs) != len(axes) or len({i.shape for i in idxs}) > 1 or any(i.ndim != 1 for i in idxs):
        raise TypeError(
            f"index_take: needs one 1-d index array of a common length per axis in {axes}, got "
            f"shapes {[i.shape for i in idxs]}"
        )
    if any(not dtypes.is_int(i.dtype) for i in idxs):
        raise TypeError(f"index_take: indices must be integers, got {[i.dtype.name for i in idxs]}")
    if len(set(axes)) != len(axes) or any(not 0 <= a < src.ndim for a in axes):
        raise ValueError(
            f"index_take: axes {axes} must be distinct dimensions of shape {src.shape}"
        )
    dtype = idxs[0].dtype
    columns = []
    for index, axis in zip(idxs, axes):
        size = shapes.full((), src.shape[axis], index.dtype)
        wrapped = elementwise.rem(elementwise.add(elementwise.rem(index, size), size), size)
        columns.append(shapes.expand_dims(elementwise.convert_element_type(wrapped, dtype), (1,)))
    indices = shapes.concatenate(columns, 1)
    slice_sizes = tuple(1 if d in axes else n for d, n in enumerate(src.shape))
    dnums = GatherDimensionNumbers(
        offset_dims=tuple(range(1, src.ndim - len(axes) + 1)),
        collapsed_slice_dims=tuple(sorted(axes)),
        start_index_map=axes,
    )
    return gather(src, indices, dnums, slice_sizes)


def scatter_apply(
    operand,
    scatter_indices,
    func: Callable,
    dimension_numbers: ScatterDimensionNumbers,
    *,
    update_shape: Sequence[int] = (),
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    mode=None,
):
    """operand with `func` applied to the elements a scatter of updates of `update_shape`
    would reach, once per time each is reached (an index given twice applies func twice).

    func is applied elementwise (as XLA applies it to scalars). The count of applications per
    element is a scatter_add of ones (`applied_times`).
    """
    x = asarray(operand)

    def count():
        return scatter_add(
            shapes.full(x.shape, 0, dtypes.int32),
            scatter_indices,
            shapes.full(tuple(update_shape), 1, dtypes.int32),
            dimension_numbers,
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
            mode=mode,
        )

    return applied_times(x, count, func, "scatter_apply")


def applied_times(x, count: Callable, func: Callable, name: str):
    """x with elementwise `func` applied to each element as many times as `count()` says: where
    the counts are known while tracing (static indices), in as many rounds as the largest,
    which every transformation takes, reverse mode too; else in a while loop up to it, which
    forward-mode derivatives and vmap take. `count` runs with constant operations evaluated at
    once, so that static indices give known counts inside jit too, as they do eagerly."""
    with compile_time_eval():
        counts = count()
        most = reductions.reduce_max(counts, tuple(range(x.ndim))) if x.ndim else counts

    def body(state):
        i, value = state
        applied = asarray(func(value))
        if applied.shape != value.shape or applied.dtype != value.dtype:
            raise TypeError(
                f"{name}: func must keep the operand's shape and dtype "
                f"{value.aval.str_short()}, got {applied.aval.str_short()}"
            )
        chosen = elementwise.select_n(elementwise.gt(counts, i), value, applied)
        return elementwise.add(i, shapes.full((), 1, dtypes.int32)), chosen

    start = shapes.full((), 0, dtypes.int32)
    if not isinstance(most, core.Tracer):
        state = (start, x)
        for _ in range(int(most)):
            state = body(state)
        return state[1]
    return while_loop(lambda state: elementwise.lt(state[0], most), body, (start, x))[1]


# ---------------------------------------------------------------------------------------------
# Grouped products


class RaggedDotDimensionNumbers(NamedTuple):
    """ragged_dot_general's dimensions: dot_general's ((lhs_contracting, rhs_contracting),
    (lhs_batch, rhs_batch)), the lhs dimension cut into groups, and the rhs dimension holding
    one operand per group (empty when the ragged dimension is contracting or batch)."""

    dot_dimension_numbers: tuple
    lhs_ragged_dimensions: Sequence[int]
    rhs_group_dimensions: Sequence[int]


def _group_membership(group_sizes, size: int):
    """bool (size, g): position i along the ragged dimension lies in group j."""
    groups = group_sizes.shape[0]
    ends = reductions.cumsum(group_sizes, 0)
    starts = elementwise.sub(ends, group_sizes)
    positions = shapes.broadcast_in_dim(shapes.iota(group_sizes.dtype, size), (size, groups), (0,))
    return elementwise.bitwise_and(
        elementwise.ge(positions, shapes.broadcast_in_dim(starts, (size, groups), (1,))),
        elementwise.lt(positions, shapes.broadcast_in_dim(ends, (size, groups), (1,))),
    )


def _masked(x, mask, dims: tuple[int, ...]):
    """x where the broadcast `mask` (its dimensions at `dims` of x) holds, else 0."""
    zero = shapes.full(x.shape, 0, x.dtype)
    return elementwise.select_n(shapes.broadcast_in_dim(mask, x.shape, dims), zero, x)


def ragged_dot_general(
    lhs,
    rhs,
    group_sizes,
    ragged_dot_dimension_numbers: RaggedDotDimensionNumbers,
    precision=None,
    preferred_element_type=None,
    group_offset=None,
    out_sharding=None,
):
    """dot_general with one lhs dimension cut into consecutive groups of `group_sizes` (a 1-d
    integer array of g sizes; positions past the last group count as in no group):

    - ragged non-contracting lhs dimension, rhs group dimension of size g: each group of lhs
      rows is multiplied by its own rhs operand (mixture-of-experts); rows in no group give 0.
    - ragged contracting dimension (no rhs group dimension): one product per group, summing
      only over that group's positions, stacked on a new leading dimension of size g.
    - ragged batch dimension: dot_general itself (each batch position is its own product).

    Written as dot_general with group masks (the first form computes every group's product,
    g times the work), so derivatives and batching are dot_general's.
    """
    out = _ragged_dot_general(
        lhs,
        rhs,
        group_sizes,
        ragged_dot_dimension_numbers,
        precision,
        preferred_element_type,
        group_offset,
    )
    return placed(out, "ragged_dot_general", out_sharding=out_sharding)


def _ragged_dot_general(
    lhs, rhs, group_sizes, dnums, precision, preferred_element_type, group_offset
):
    lhs, rhs, group_sizes = asarray(lhs), asarray(rhs), asarray(group_sizes)
    if group_offset is not None:
        raise NotImplementedError("ragged_dot_general: group_offset is not supported")
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = (
        tuple(tuple(int(d) for d in dims) for dims in pair) for pair in dnums.dot_dimension_numbers
    )
    ragged = tuple(int(d) for d in dnums.lhs_ragged_dimensions)
    group_dims = tuple(int(d) for d in dnums.rhs_group_dimensions)
    if len(ragged) != 1 or len(group_dims) > 1:
        raise TypeError(
            f"ragged_dot_general: needs one lhs ragged dimension and at most one rhs group "
            f"dimension, got {ragged} and {group_dims}"
        )
    if group_sizes.ndim != 1 or not dtypes.is_int(group_sizes.dtype):
        raise TypeError(
            "ragged_dot_general: group_sizes must be a 1-d integer array, got "
            f"{group_sizes.aval.str_short()}"
        )
    (r,) = ragged
    groups = group_sizes.shape[0]
    dot_dims = ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))
    options = dict(precision=precision, preferred_element_type=preferred_element_type)
    if r in lhs_contract or r in lhs_batch:
        if group_dims:
            raise TypeError(
                "ragged_dot_general: a ragged contracting or batch dimension takes no rhs group "
                f"dimension, got {group_dims}"
            )
    elif not group_dims or rhs.shape[group_dims[0]] != groups:
        raise TypeError(
            f"ragged_dot_general: a ragged non-contracting dimension needs an rhs group "
            f"dimension of size {groups}, got rhs shape {rhs.shape} and group dimensions "
            f"{group_dims}"
        )
    if r in lhs_batch:
        # Batch positions are independent products already, in a group or not (as in JAX).
        return dot_general(lhs, rhs, dot_dims, **options)
    membership = _group_membership(group_sizes, lhs.shape[r])  # (m, g)
    if r in lhs_contract:
        # A new last lhs dimension of the groups, each zero outside its group.
        spread = shapes.broadcast_in_dim(lhs, (*lhs.shape, groups), tuple(range(lhs.ndim)))
        spread = _masked(spread, membership, (r, lhs.ndim))
        out = dot_general(spread, rhs, dot_dims, **options)
        lhs_free = lhs.ndim + 1 - len(lhs_contract) - len(lhs_batch)
        group_at = len(lhs_batch) + lhs_free - 1
        perm = (group_at, *(d for d in range(out.ndim) if d != group_at))
        return shapes.transpose(out, perm)
    # Every group's product, masked to its rows, summed over the groups.
    (g,) = group_dims
    out = dot_general(lhs, rhs, dot_dims, **options)
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]
    row_at = len(lhs_batch) + lhs_free.index(r)
    group_at = len(lhs_batch) + len(lhs_free) + rhs_free.index(g)
    return reductions.reduce_sum(_masked(out, membership, (row_at, group_at)), (group_at,))


def ragged_dot(
    lhs,
    rhs,
    group_sizes,
    precision=None,
    preferred_element_type=None,
    group_offset=None,
    out_sharding=None,
):
    """Row groups of lhs (m, k), each multiplied by its own matrix of rhs (g, k, n): rows
    [sum(group_sizes[:i]), sum(group_sizes[:i+1])) use rhs[i]; rows after the last group are
    zero. The mixture-of-experts product (ragged_dot_general's first form)."""
    lhs, rhs, group_sizes = asarray(lhs), asarray(rhs), asarray(group_sizes)
    if lhs.ndim != 2 or rhs.ndim != 3 or lhs.shape[1] != rhs.shape[1]:
        raise TypeError(
            f"ragged_dot: needs lhs (m, k) and rhs (g, k, n), got shapes {lhs.shape} and "
            f"{rhs.shape}"
        )
    if group_sizes.shape != (rhs.shape[0],) or not dtypes.is_int(group_sizes.dtype):
        raise TypeError(
            f"ragged_dot: group_sizes must be integers of shape ({rhs.shape[0]},), got "
            f"{group_sizes.aval.str_short()}"
        )
    return ragged_dot_general(
        lhs,
        rhs,
        group_sizes,
        RaggedDotDimensionNumbers((((1,), (1,)), ((), ())), (0,), (0,)),
        precision=precision,
        preferred_element_type=preferred_element_type,
        group_offset=group_offset,
        out_sharding=out_sharding,
    )


# ---------------------------------------------------------------------------------------------
# Random bits


class RandomAlgorithm(enum.IntEnum):
    """Which generator rng_bit_generator uses: funcgrad has one (threefry2x32), so every choice
    gives it."""

    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2


_BIT_DTYPES = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)


def rng_bit_generator(
    key,
    shape: Sequence[int],
    dtype=np.uint32,
    algorithm=RandomAlgorithm.RNG_DEFAULT,
    *,
    out_sharding=None,
):
    """(new_key, bits): uniformly random unsigned integers of `shape` and `dtype` from a
    uint32[4] key, and the key to use next, as XLA's RngBitGenerator; `out_sharding` lays out
    the bits.

    funcgrad's own counter-based bits: key words 0-1 are a threefry2x32 key and words 2-3 a
    counter; element j's bits encrypt the counter advanced by j, and the new key encrypts two
    counters no draw of any shape uses. The values differ from XLA's generators.
    """
    new_key, bits = _rng_bit_generator(key, shape, dtype)
    return new_key, placed(bits, "rng_bit_generator", out_sharding=out_sharding)


def _rng_bit_generator(key, shape: Sequence[int], dtype):
    key = asarray(key)
    dtype = np.dtype(dtype)
    if dtype not in _BIT_DTYPES:
        raise TypeError(
            "rng_bit_generator: dtype must be one of uint8, uint16, uint32, uint64, got "
            f"{dtype.name}"
        )
    if key.shape != (4,) or key.dtype != dtypes.uint32:
        raise TypeError(f"rng_bit_generator: key must be uint32[4], got {key.aval.str_short()}")
    shape = tuple(int(d) for d in shape)
    k0, k1, c0, c1 = (shapes.squeeze(shapes.slice(key, (i,), (i + 1,)), (0,)) for i in range(4))
    size = int(np.prod(shape, dtype=np.int64))
    words_per_element = 2 if dtype == dtypes.uint64 else 1
    blocks = max(1, -(-size * words_per_element // 2))
    offsets = shapes.iota(dtypes.uint32, blocks)
    high = shapes.broadcast_in_dim(c0, (blocks,), ())
    low = elementwise.add(shapes.broadcast_in_dim(c1, (blocks,), ()), offsets)
    k0s, k1s = (shapes.broadcast_in_dim(k, (blocks,), ()) for k in (k0, k1))
    words = shapes.reshape(shapes.concatenate(threefry2x32(k0s, k1s, high, low), 0), (2 * blocks,))
    words = shapes.slice(words, (0,), (size * words_per_element,))
    if dtype == dtypes.uint64:
        pairs = shapes.reshape(words, (size, 2))
        hi, lo = (
            elementwise.convert_element_type(
                shapes.squeeze(shapes.slice(pairs, (0, i), (size, i + 1)), (1,)), dtype
            )
            for i in (0, 1)
        )
        words = elementwise.bitwise_or(elementwise.shift_left(hi, shapes.full((), 32, dtype)), lo)
    else:
        words = elementwise.convert_element_type(words, dtype)
    # The new key: the encryption of two counters with the high word complemented, which no
    # draw above reaches (their high word is c0).
    flipped = elementwise.bitwise_not(c0)
    pair = shapes.broadcast_in_dim(flipped, (2,), ())
    counters = elementwise.add(shapes.broadcast_in_dim(c1, (2,), ()), shapes.iota(dtypes.uint32, 2))
    new_key = shapes.concatenate(
        threefry2x32(
            shapes.broadcast_in_dim(k0, (2,), ()),
            shapes.broadcast_in_dim(k1, (2,), ()),
            pair,
            counters,
        ),
        0,
    )
    return new_key, shapes.reshape(words, shape)


class _UniformState(threading.local):
    """rng_uniform's generator state: a per-thread counter."""

    def __init__(self):
        self.counter = itertools.count()


_uniform_state = _UniformState()


def rng_uniform(a, b, shape: Sequence[int]):
    """Uniform random values in [a, b) of `shape` from a stateful generator (a and b: scalars
    of one float dtype).

    Each call takes the next state of a per-thread counter when it runs eagerly, or when it is
    traced: a jitted function therefore draws the same values at every call (the state is
    fixed in the compiled program). jax.random's explicit keys are the reproducible choice.
    """
    a, b = asarray(a), asarray(b)
    if a.shape != () or b.shape != ():
        raise ValueError(
            f"rng_uniform: a and b must be scalars, got shapes {a.shape} and {b.shape}"
        )
    if a.dtype != b.dtype or not dtypes.is_float(a.dtype):
        raise TypeError(
            "rng_uniform: a and b must be floats of one dtype, got "
            f"{a.dtype.name} and {b.dtype.name}"
        )
    state = next(_uniform_state.counter)
    # Each state is a key of its own (not a counter offset, whose streams would overlap).
    key = asarray(np.array([0x5EED ^ (state >> 32), state & 0xFFFFFFFF, 0, 0], np.uint32))
    bits_dtype, mantissa, one_bits = (
        (dtypes.uint64, 52, 0x3FF0000000000000)
        if a.dtype == dtypes.float64
        else (dtypes.uint32, 23, 0x3F800000)
    )
    float_dtype = dtypes.float64 if a.dtype == dtypes.float64 else dtypes.float32
    _, bits = rng_bit_generator(key, shape, bits_dtype)
    # The top mantissa bits under the exponent of 1.0 give a float in [1, 2).
    shift = shapes.full((), bits_dtype.itemsize * 8 - mantissa, bits_dtype)
    in_one_two = elementwise.bitcast_convert_type(
        elementwise.bitwise_or(
            elementwise.shift_right_logical(bits, shift), shapes.full((), one_bits, bits_dtype)
        ),
        float_dtype,
    )
    unit = elementwise.sub(in_one_two, shapes.full((), 1, float_dtype))
    low = elementwise.convert_element_type(a, float_dtype)
    width = elementwise.sub(elementwise.convert_element_type(b, float_dtype), low)
    values = elementwise.convert_element_type(
        elementwise.add(elementwise.mul(unit, width), low), a.dtype
    )
    # Rounding to a narrower dtype may reach b: keep values below it.
    return elementwise.min(
        values, shapes.broadcast_in_dim(elementwise.nextafter(b, a), tuple(shape), ())
    )
