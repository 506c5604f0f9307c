"""A CPU's transposing nests walked in tiles.

`for i < N: for j < M: out[i M + j] = f(x[j N + i])` stores along memory but loads across it:
each load touches a cache line of its own, used again only N iterations later, long after
it left the cache (a 1024x1024 float32 transpose took 3.1 ms so, a line fetched for every
element). Walked as tiles of a cache line's elements each way, `i = ib T + ii`,
`j = jb T + jj`, the T lines a tile's loads touch stay in the first-level cache while its T
rows are written, and each is fetched once."""

from __future__ import annotations

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.parallel import body_replaced, expressions, linear

LINE_BYTES = 64


def tile_transposes(kernel: K.Kernel) -> None:
    """Make the kernel tiles where it is a nest of two loops one of whose sides walks memory
    along the inner loop and the other along the outer one, a line or more apart along the
    inner: its stores along the inner and some load across, or its stores across (a copy
    into column-major order for LAPACK, 256x256 float32 into float64 0.31 -> 0.03 ms); both
    loops whole tiles of a line of the strided side's elements."""
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], K.Loop):
        return
    outer = kernel.body[0]
    if len(outer.body) != 1 or not isinstance(outer.body[0], K.Loop):
        return
    inner = outer.body[0]
    stores = inner.body
    if not stores or not all(isinstance(s, K.Store) for s in stores):
        return
    ranges = {outer.index: (0, outer.stop - 1), inner.index: (0, inner.stop - 1)}
    if all(_strided(s, outer, inner, ranges) for s in stores):
        strided = stores
    elif all((linear(s.offset, inner.index, ranges) or (None,))[0] == 1 for s in stores):
        loads = [load for s in stores for load in _loads(s)]
        strided = [load for load in loads if _strided(load, outer, inner, ranges)]
    else:
        return
    if not strided:
        return
    tile = LINE_BYTES // max(access.buffer.dtype.itemsize for access in strided)
    if any(loop.start != 0 or loop.stop % tile or loop.stop < 2 * tile for loop in (outer, inner)):
        return
    ib, jb, ii, jj = (K.fresh_index(name) for name in ("ib", "jb", "ii", "jj"))
    size = K.const(tile, K.INDEX)
    body = body_replaced(stores, {id(outer.index): ib * size + ii, id(inner.index): jb * size + jj})
    rows = K.Loop(ii, 0, tile, [K.Loop(jj, 0, tile, body)])
    kernel.body[:] = [
        K.Loop(ib, 0, outer.stop // tile, [K.Loop(jb, 0, inner.stop // tile, [rows])])
    ]


def _loads(store: K.Store) -> list[K.Load]:
    return [e for e in expressions(store) if isinstance(e, K.Load)]


def _strided(access: K.Load | K.Store, outer: K.Loop, inner: K.Loop, ranges: dict) -> bool:
    """Whether the load or store walks memory along the outer loop and jumps a line or more
    along the inner one."""
    along_inner = linear(access.offset, inner.index, ranges)
    along_outer = linear(access.offset, outer.index, ranges)
    if along_inner is None or along_outer is None:
        return False
    jump = abs(along_inner[0]) * access.buffer.dtype.itemsize
    return abs(along_outer[0]) == 1 and jump >= LINE_BYTES
