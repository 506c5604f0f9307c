"""The threefry2x32 counter-based random bit generator, as a primitive; and the two markers
that key-reuse checking records keys' uses with.

Threefry-2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) is a
block cipher: it maps a 64-bit key and a 64-bit counter to 64 random-looking bits. Random
numbers are the encryptions of consecutive counters, so any block of them can be computed
independently, in any order, on any device. `funcgrad.random` builds its keys and streams on it.
"""

from __future__ import annotations

import numpy as np

from funcgrad import core, dtypes
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.interpreters.ad import defjvp_zero
from funcgrad.interpreters.batching import batch_size, broadcast_batch, moveaxis, not_mapped
from funcgrad.lax.base import asarray, elementwise_shape
from funcgrad.lax.shapes import broadcast_in_dim

__all__ = ["threefry2x32"]

# Rotation distances of the 20 rounds, cycling with period 8 (Random123's R_32x2 constants).
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
# Makes the third key-schedule word the parity of the other two and this constant.
_KEY_PARITY = 0x1BD11BDA
_ROUNDS = 20

threefry2x32_p = Primitive("threefry2x32", multiple_results=True)


@threefry2x32_p.def_abstract_eval
def _threefry2x32_abstract_eval(key1, key2, x1, x2) -> list[ShapedArray]:
    avals = (key1, key2, x1, x2)
    for name, aval in zip(("key1", "key2", "x1", "x2"), avals):
        if aval.dtype != dtypes.uint32:
            raise TypeError(f"threefry2x32 takes uint32 operands, got {name} of dtype {aval.dtype}")
    shape = elementwise_shape("threefry2x32", avals)
    return [ShapedArray(shape, dtypes.uint32), ShapedArray(shape, dtypes.uint32)]


threefry2x32_p.def_weak_type(never_weak)


def _rotate_left(x: np.ndarray, distance: int) -> np.ndarray:
    return (x << np.uint32(distance)) | (x >> np.uint32(32 - distance))


@threefry2x32_p.def_impl
def _threefry2x32_impl(key1, key2, x1, x2):
    shape = np.broadcast_shapes(*(np.shape(v) for v in (key1, key2, x1, x2)))
    # Work on 1-d arrays: NumPy warns about wrapping arithmetic on scalars, not on arrays.
    key1, key2, x1, x2 = (np.broadcast_to(v, shape).reshape(-1) for v in (key1, key2, x1, x2))
    schedule = (key1, key2, key1 ^ key2 ^ np.uint32(_KEY_PARITY))
    x1, x2 = x1 + schedule[0], x2 + schedule[1]
    for i in range(_ROUNDS):
        x1 = x1 + x2
        x2 = _rotate_left(x2, _ROTATIONS[i % 8]) ^ x1
        if i % 4 == 3:
            # Key injection s: words s and s + 1 of the schedule, plus s on the second word.
            s = i // 4 + 1
            x1 = x1 + schedule[s % 3]
            x2 = x2 + schedule[(s + 1) % 3] + np.uint32(s)
    out1, out2 = x1.reshape(shape), x2.reshape(shape)
    return [out1[()], out2[()]] if shape == () else [out1, out2]


defjvp_zero(threefry2x32_p)
threefry2x32_p.not_applicable["transpose"] = "not linear (integer bits)"


def _threefry2x32_batch(values, dims):
    """Elementwise over four operands (rank-0 ones broadcast), with both outputs on one batch
    axis. Operands already lined up go through as they are; otherwise every operand that is
    not a shared scalar gets the full (batch, lane...) shape, batch axis first."""
    avals = [core.get_aval(v) for v in values]
    batched = [(a.shape, d) for a, d in zip(avals, dims) if d is not not_mapped]
    lined_up = all(b == batched[0] for b in batched)
    if lined_up and all(a.ndim == 0 for a, d in zip(avals, dims) if d is not_mapped):
        return threefry2x32_p.bind(*values), [batched[0][1]] * 2
    size = batch_size(values, dims)
    lane_shapes = [
        a.shape if d is not_mapped else a.shape[:d] + a.shape[d + 1 :] for a, d in zip(avals, dims)
    ]
    full_shape = (size, *max(lane_shapes, key=len))
    operands = []
    for value, aval, dim in zip(values, avals, dims):
        if dim is not not_mapped:
            value = broadcast_in_dim(moveaxis(value, dim, 0), full_shape, tuple(range(aval.ndim)))
        elif aval.ndim:
            value = broadcast_batch(value, size, 0)
        operands.append(value)
    return threefry2x32_p.bind(*operands), [0, 0]


threefry2x32_p.def_batch(_threefry2x32_batch)


def threefry2x32(key1, key2, x1, x2) -> list:
    """Encrypt the counter words (x1, x2) under the key (key1, key2): two uint32 arrays.

    Python ints are taken as uint32; arrays must already be uint32.
    """
    operands = [
        asarray(v, dtypes.uint32) if isinstance(v, int) else asarray(v)
        for v in (key1, key2, x1, x2)
    ]
    return threefry2x32_p.bind(*operands)


# ---------------------------------------------------------------------------------------------
# Key-use markers
#
# With `config.debug_key_reuse` on, funcgrad.random records in the program what it does with a
# key: `random_consume` where a function draws from it (or splits it), `random_clone` where it
# hands out a key of the same bits that counts as new (clone, key_data, wrap_key_data). Both
# are the identity on the key's words; `funcgrad.key_reuse` reads them, and the compiler drops
# them. Keys are uint32 arrays of shape (..., 2): under vmap a marker sees a batch of keys.


def _declare_marker(name: str) -> Primitive:
    marker = Primitive(name)

    @marker.def_abstract_eval
    def _abstract_eval(keys: ShapedArray, **params) -> ShapedArray:
        if keys.dtype != dtypes.uint32 or keys.shape[-1:] != (2,):
            raise TypeError(
                f"{name} takes keys, uint32 arrays of shape (..., 2), got {keys.str_short()}"
            )
        return ShapedArray(keys.shape, keys.dtype)

    marker.def_weak_type(never_weak)
    marker.def_impl(lambda keys, **params: keys)
    defjvp_zero(marker)
    marker.not_applicable["transpose"] = "not linear (integer bits)"

    def batch(values, dims, **params):
        (keys,), (dim,) = values, dims
        return marker.bind(moveaxis(keys, dim, 0), **params), 0

    marker.def_batch(batch)
    return marker


random_consume_p = _declare_marker("random_consume")
random_clone_p = _declare_marker("random_clone")


def random_consume(keys, by: str):
    """`keys`, recorded as used up by funcgrad.random's function `by`."""
    return random_consume_p.bind(asarray(keys), by=by)


def random_clone(keys):
    """`keys` as a new key (or batch of keys) whose uses are counted apart."""
    return random_clone_p.bind(asarray(keys))
