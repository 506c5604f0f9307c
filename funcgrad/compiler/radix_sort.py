"""A CPU's sorts: each line's positions ordered by a least-significant-digit radix sort of its
keys' bytes, one kernel loop over the lines.

`fusion._merge_sort` orders positions through the permutation it is building: each of its
log2(n) passes loads every key through a position, a load from anywhere in the line (a line of
2^20 float32 took half a second, the time of a library's comparison sort). Here every key
first becomes an unsigned integer whose order is the sort's (`ascending_key`,
`descending_key`), kept beside its position; then a pass per byte, lowest byte
first, counts the byte's values, turns the counts into where each value's run starts, and
moves each (key, position) pair to the next place in its run. A pass keeps the order of equal
bytes, so the sort is stable, and several keys sort as one: the last key's bytes first, the
first key's last. Work is linear in n (a pass per key byte, each two walks of the line in
order), and the lines are independent: a CPU's threads take runs of them.

A GPU keeps the merge sort, whose passes it spreads over a thread per element
(`parallel._sort_split`); so do lines shorter than `RADIX_FROM`, where counting 256 byte
values per pass outweighs the n log n steps of merging a few elements."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.choices import Choice
from funcgrad.compiler.kernel_ir import INDEX, Expr

RADIX_FROM = 32
_DIGIT_BITS = 8
_BUCKETS = 1 << _DIGIT_BITS
_POSITION = np.dtype(np.int32)  # a place in a line (lines are shorter than 2^31)

# Whether lines of at least `RADIX_FROM` elements sort by radix (`applies`): a CPU's choice.
sorts_by_radix = Choice("sorts_by_radix", False)


def applies(n: int) -> bool:
    return sorts_by_radix.get() and RADIX_FROM <= n <= np.iinfo(_POSITION).max


# A key: (line, position) -> an unsigned integer, as narrow as the value it stands for, ordering
# as the sort does (`ascending_key`, `descending_key`).
Key = Callable[[Expr, Expr], Expr]


def _unsigned(bits: int) -> np.dtype:
    return np.dtype(f"uint{max(bits, 8)}")


def total_order_key(x: Expr) -> Expr:
    """A float's place in the IEEE total order as a signed integer (the reference's
    `sorting._total_order_key`): its bits, every bit but the sign flipped where the sign is
    set."""
    bits_dtype = np.dtype(f"int{x.dtype.itemsize * 8}")
    bits = K.Bitcast(x, bits_dtype)
    flipped = K.binary("xor", bits, K.const(int(np.iinfo(bits_dtype).max), bits_dtype))
    return K.select(K.binary("lt", bits, K.const(0, bits_dtype)), flipped, bits)


def ascending_key(x: Expr) -> Expr:
    """`x` as an unsigned integer of its width in the sort's order (`fusion._sort`): bools
    and integers by value, floats by value with -0.0 equal to 0.0 and every NaN last, all
    equal."""
    unsigned = _unsigned(x.dtype.itemsize * 8)
    if x.dtype.kind in "bu":
        return K.cast(x, unsigned)
    if x.dtype.kind == "i":
        return _as_unsigned(x)
    zero = K.const(0, x.dtype)
    key = _as_unsigned(total_order_key(K.select(K.binary("eq", x, zero), zero, x)))
    return K.select(K.binary("ne", x, x), K.const(np.iinfo(unsigned).max, unsigned), key)


def descending_key(ranked: Expr) -> Expr:
    """An integer (a float's `total_order_key`, or an integer value) as an unsigned integer
    of its width whose ascending order is the integer's descending order."""
    unsigned = _unsigned(ranked.dtype.itemsize * 8)
    ascending = K.cast(ranked, unsigned) if ranked.dtype.kind in "bu" else _as_unsigned(ranked)
    return K.binary("xor", ascending, K.const(np.iinfo(unsigned).max, unsigned))


def _as_unsigned(signed: Expr) -> Expr:
    """A signed integer as the unsigned one of its width in the same order (its sign bit
    flipped)."""
    bits = signed.dtype.itemsize * 8
    unsigned = _unsigned(bits)
    return K.binary("xor", K.Bitcast(signed, unsigned), K.const(1 << (bits - 1), unsigned))


def sort_lines(builder, lines: int, n: int, keys: list[Key], ranks: int, emit: Callable) -> list:
    """One loop over `lines` lines of `n` elements: each line's positions 0..n-1 in the stable
    order of `keys` (most significant first), then `emit(line, rank, position)`'s statements
    for each of the first `ranks` ranks. Its working memory, from `builder`, holds one line:
    each line writes it before it reads it, so a CPU's threads each take a copy and runs of
    lines (`parallel.parallel_loop`) where it is small enough."""
    positions = [builder.scratch_buffer(_POSITION, n) for _ in range(2)]
    line = K.fresh_index("line")
    keyed = []  # (index, the key's value at that index of the order so far), last key first
    current = 0  # which of the two buffers holds the order so far (a pass per key byte swaps)
    for number, key in enumerate(reversed(keys)):
        i = K.fresh_index()
        position = i if number == 0 else K.cast(K.Load(positions[current], i), INDEX)
        keyed.append((i, key(line, position)))
        current = (current + keyed[-1][1].dtype.itemsize) % 2
    wide = any(value.dtype.itemsize > 4 for _, value in keyed)
    key_dtype = np.dtype(np.uint64 if wide else np.uint32)
    key_buffers = [builder.scratch_buffer(key_dtype, n) for _ in range(2)]
    widest = max(value.dtype.itemsize for _, value in keyed)
    counts = builder.scratch_buffer(_POSITION, widest * _BUCKETS)
    body: list = []
    current = 0
    for number, (i, value) in enumerate(keyed):
        width = value.dtype.itemsize
        clear = K.fresh_index()
        body.append(K.Loop(clear, 0, width * _BUCKETS, [K.Store(counts, clear, _zero)]))
        # The key is stored, and each of its bytes counted, in one walk of the line: a byte's
        # counts do not depend on the order the passes before it leave.
        stored = K.Load(key_buffers[current], i)
        counted = []
        for byte in range(width):
            tally = _tally(stored, byte)
            counted.append(K.Store(counts, tally, K.Load(counts, tally) + _one))
        walk = [K.Store(key_buffers[current], i, K.cast(value, key_dtype)), *counted]
        if number == 0:
            walk.insert(0, K.Store(positions[current], i, K.cast(i, _POSITION)))
        body.append(K.Loop(i, 0, n, walk))
        for byte in range(width):
            body += _digit_pass(key_buffers, positions, counts, current, n, byte)
            current = 1 - current
    rank = K.fresh_index("rank")
    placed = emit(line, rank, K.cast(K.Load(positions[current], rank), INDEX))
    body.append(K.Loop(rank, 0, ranks, placed))
    return [K.Loop(line, 0, lines, body)]


_zero, _one = K.const(0, _POSITION), K.const(1, _POSITION)


def _tally(key: Expr, byte: int) -> Expr:
    """Where the count of `key`'s value of byte `byte` is kept."""
    shifted = K.binary("shr_logical", key, K.const(byte * _DIGIT_BITS, key.dtype))
    digit = K.cast(K.binary("and", shifted, K.const(_BUCKETS - 1, key.dtype)), INDEX)
    return K.const(byte * _BUCKETS, INDEX) + digit


def _digit_pass(keys, positions, counts, source, n, byte) -> list:
    """Statements moving the (key, position) pairs of buffers `source` to the other two,
    stably ordered by the key's byte `byte`, whose values' counts `counts` holds."""
    target = 1 - source
    start, move = K.fresh_index(), K.fresh_index()
    first = K.const(byte * _BUCKETS, INDEX)
    # The decisions are held in accumulators: the stores after them change what they read.
    run_start, seen = K.fresh_acc(_POSITION, "start"), K.fresh_acc(_POSITION, "seen")
    slot = K.fresh_acc(_POSITION, "slot")
    place = K.cast(slot.read(), INDEX)
    tally = _tally(K.Load(keys[source], move), byte)
    return [
        K.SetAcc(run_start, _zero),
        K.Loop(
            start,
            0,
            _BUCKETS,
            [
                K.SetAcc(seen, K.Load(counts, first + start)),
                K.Store(counts, first + start, run_start.read()),
                K.SetAcc(run_start, run_start.read() + seen.read()),
            ],
        ),
        K.Loop(
            move,
            0,
            n,
            [
                K.SetAcc(slot, K.Load(counts, tally)),
                K.Store(counts, tally, slot.read() + _one),
                K.Store(keys[target], place, K.Load(keys[source], move)),
                K.Store(positions[target], place, K.Load(positions[source], move)),
            ],
        ),
    ]
