"""A convolution's strided product (`TileStep`) as an LLVM function computing register tiles.

Each tile is `rows` x `vectors` vectors of the output held in registers while the loop over
the product's terms runs: per term it loads `vectors` vectors of `b` and broadcasts `rows`
elements of `a`, each multiplied into every vector of its row by a fused multiply-add. The
tile's inputs come from the first levels of cache (a term's elements lie a few rows apart),
so the loop runs at the rate of the multiply-adds, where a convolution gathered into windows
first (`schedule._conv_gemm`) writes and reads its windows through memory, and a library GEMM
meets a product only a few dozen columns wide.

A tile whose rows or columns would run past the output's starts earlier instead, computing
some elements a second time: stores of equal values, with no tails to handle.

`tile_function` renders `name(ptr a, ptr b, ptr out, i64 lo, i64 hi)`, computing tiles lo..hi
of the step, the form a chunk of a parallel loop calls (`ModuleRenderer.parallel_call`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from funcgrad.backends.llvm import blas, engine
from funcgrad.compiler.schedule import TileStep

# Accumulator vectors a tile keeps, by how many vectors wide it is: with 32 vector registers
# (AVX-512), 24-28 accumulators leave room for the row of `b` and a broadcast; with 16
# (AVX2), 12. A wider tile loads more of `b` per term and broadcasts fewer elements of `a`.
_ROWS = {32: {1: 16, 2: 12, 3: 8, 4: 6}, 16: {1: 8, 2: 6, 3: 4, 4: 3}}


def tile_shape(step: TileStep, vector_bytes: int) -> tuple[int, int, int]:
    """(lanes, vectors, rows) of the step's tiles on a CPU with `vector_bytes`-byte vectors."""
    lanes = vector_bytes // step.out.dtype.itemsize
    widths = range(1, min(4, step.columns // lanes) + 1)
    # The widest tile of those computing the fewest columns (tiles overlap at the end).
    vectors = min(widths, key=lambda v: (-(-step.columns // (v * lanes)) * v, -v))
    registers = 32 if vector_bytes == 64 else 16
    # As many rows as the registers take, fewer where that spreads the rows evenly over as
    # many tiles (14 rows: two tiles of 7, not 12 and 12 overlapping by 10).
    count = step.rows[0]
    return lanes, vectors, -(-count // -(-count // _ROWS[registers][vectors]))


def tiles(step: TileStep, vector_bytes: int) -> int:
    """How many tiles the step's output takes."""
    lanes, vectors, rows = tile_shape(step, vector_bytes)
    blocks = (-(-step.rows[0] // rows), -(-step.columns // (lanes * vectors)))
    return math.prod(count for count, *_ in step.outer) * blocks[0] * blocks[1]


# The longest sum a matrix product's tiles take: the rows of `a` a tile reads (rows x terms
# elements) stay in the first-level cache up to about here. A longer one runs as the
# library's GEMM, which packs its operands in blocks that do (2048^3 float32 in tiles ran at
# half the library's rate).
PRODUCT_MAX_TERMS = 1024
# The work per matrix below which tiles beat a library GEMM whose kernels are as wide as this
# CPU's vectors, its packing and call weighing there (64 products of 128x64 by 64x128 float32:
# 0.54 ms, the library's 0.66; 4096 of 16x16 by 16x16: 0.19 ms, 0.27), one thread.
LIBRARY_WINS_FROM = 1 << 21


def fits_tiles(batch: int, m: int, n: int, k: int, dtype: np.dtype) -> bool:
    """Whether tiles can compute a product of row-major matrices well: at least a vector of
    columns, at most `PRODUCT_MAX_TERMS` terms."""
    return n >= engine.vector_bytes() // dtype.itemsize and k <= PRODUCT_MAX_TERMS


def takes_product(batch: int, m: int, n: int, k: int, dtype: np.dtype) -> bool:
    """Whether a product of row-major matrices runs in tiles (`schedule.products_in_tiles`):
    where they fit, for little work per matrix, or any amount where the library runs kernels
    narrower than this CPU's vectors (AVX2 kernels on an AVX-512 CPU, as OPENBLAS_CORETYPE
    may say: 1024^3 float32 in tiles 9.4 ms, the library 16.3)."""
    if not fits_tiles(batch, m, n, k, dtype):
        return False
    return m * n * k < LIBRARY_WINS_FROM or blas.vector_bytes() < engine.vector_bytes()


class _Emitter:
    def __init__(self):
        self.lines: list[str] = []
        self.names = itertools.count()
        self.block = "entry"

    def fresh(self, stem: str) -> str:
        return f"%{stem}{next(self.names)}"

    def assign(self, text: str, stem: str = "v") -> str:
        name = self.fresh(stem)
        self.lines.append(f"  {name} = {text}")
        return name

    def emit(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def loop(self, start: str, stop, body) -> None:
        """for i in start..stop (at least once): body(i)."""
        k = next(self.names)
        head, latch, done = f"loop{k}", f"latch{k}", f"done{k}"
        before = self.block
        self.emit(f"br label %{head}")
        self.start(head)
        index, following = f"%i{k}", f"%i{k}.next"
        self.emit(f"{index} = phi i64 [ {start}, %{before} ], [ {following}, %{latch} ]")
        body(index)
        self.emit(f"br label %{latch}")
        self.start(latch)
        self.emit(f"{following} = add i64 {index}, 1")
        finished = self.assign(f"icmp eq i64 {following}, {stop}", "finished")
        self.emit(f"br i1 {finished}, label %{done}, label %{head}")
        self.start(done)

    def sum_of(self, terms: list[tuple[str, int]], base: str = "0") -> str:
        """base + the sum of index times stride."""
        total = base
        for index, stride in terms:
            if stride == 0:
                continue
            product = self.assign(f"mul i64 {index}, {stride}")
            total = product if total == "0" else self.assign(f"add i64 {total}, {product}")
        return total


def tile_function(step: TileStep, name: str, vector_bytes: int) -> str:
    """The LLVM function computing tiles lo..hi of `step` (see the module's notes)."""
    dtype = step.out.dtype
    scalar = "float" if dtype == np.float32 else "double"
    lanes, vectors, rows = tile_shape(step, vector_bytes)
    vector = f"<{lanes} x {scalar}>"
    lanes_of_zero = f"<{lanes} x i32> zeroinitializer"
    width = lanes * vectors
    size = dtype.itemsize
    row_count, a_row, out_row = step.rows
    row_blocks = -(-row_count // rows)
    column_blocks = -(-step.columns // width)
    # Tiles sharing their part of `b` run one after another: those of one column block when
    # `b` is the weights (the same for every outer index), else those of one outer index.
    weights_b = all(b_stride == 0 for _, _, b_stride, _ in step.outer)
    outer_counts = [count for count, *_ in step.outer]
    order = (
        ["column", *range(len(step.outer)), "row"]
        if weights_b
        else [*range(len(step.outer)), "column", "row"]
    )
    extent = {"column": column_blocks, "row": row_blocks, **dict(enumerate(outer_counts))}

    e = _Emitter()
    e.lines.append(
        f"define internal void @{name}(ptr noalias %a, ptr noalias %b, ptr noalias %out, "
        "i64 %lo, i64 %hi) #0 {"
    )
    e.start("entry")
    slots = [
        [e.assign(f"alloca {vector}, align 64", "acc") for _ in range(vectors)] for _ in range(rows)
    ]
    empty = e.assign("icmp sge i64 %lo, %hi", "empty")
    e.emit(f"br i1 {empty}, label %exit, label %tiles")
    e.start("tiles")

    def one_tile(tile: str) -> None:
        place, rest = {}, tile
        for dim in reversed(order):
            place[dim] = e.assign(f"urem i64 {rest}, {extent[dim]}")
            rest = e.assign(f"udiv i64 {rest}, {extent[dim]}")
        first_row = e.assign(f"mul i64 {place['row']}, {rows}")
        first_row = e.assign(f"call i64 @llvm.umin.i64(i64 {first_row}, i64 {row_count - rows})")
        first_column = e.assign(f"mul i64 {place['column']}, {width}")
        first_column = e.assign(
            f"call i64 @llvm.umin.i64(i64 {first_column}, i64 {step.columns - width})"
        )
        outer = [(place[d], dims) for d, dims in enumerate(step.outer)]
        a_base = e.sum_of([(i, s[1]) for i, s in outer] + [(first_row, a_row)])
        b_base = e.sum_of([(i, s[2]) for i, s in outer], first_column)
        out_base = e.sum_of([(i, s[3]) for i, s in outer] + [(first_row, out_row)], first_column)
        for row in slots:
            for slot in row:
                e.emit(f"store {vector} zeroinitializer, ptr {slot}, align 64")

        def terms(level: int, a_at: str, b_at: str) -> None:
            if level == len(step.terms):
                multiply_add(a_at, b_at)
                return
            count, a_stride, b_stride = step.terms[level]
            e.loop(
                "0",
                count,
                lambda k: terms(
                    level + 1, e.sum_of([(k, a_stride)], a_at), e.sum_of([(k, b_stride)], b_at)
                ),
            )

        def multiply_add(a_at: str, b_at: str) -> None:
            b_row = e.assign(f"getelementptr {scalar}, ptr %b, i64 {b_at}")
            loaded = []
            for v in range(vectors):
                at = e.assign(f"getelementptr {scalar}, ptr {b_row}, i64 {v * lanes}")
                loaded.append(e.assign(f"load {vector}, ptr {at}, align {size}"))
            a_column = e.assign(f"getelementptr {scalar}, ptr %a, i64 {a_at}")
            for r, row in enumerate(slots):
                at = e.assign(f"getelementptr {scalar}, ptr {a_column}, i64 {r * a_row}")
                element = e.assign(f"load {scalar}, ptr {at}, align {size}")
                one = e.assign(f"insertelement {vector} poison, {scalar} {element}, i64 0")
                splat = e.assign(f"shufflevector {vector} {one}, {vector} poison, {lanes_of_zero}")
                for v, slot in enumerate(row):
                    total = e.assign(f"load {vector}, ptr {slot}, align 64")
                    fused = e.assign(
                        f"call {vector} @llvm.fma.v{lanes}{_short(scalar)}({vector} {splat}, "
                        f"{vector} {loaded[v]}, {vector} {total})"
                    )
                    e.emit(f"store {vector} {fused}, ptr {slot}, align 64")

        terms(0, a_base, b_base)
        for r, row in enumerate(slots):
            for v, slot in enumerate(row):
                total = e.assign(f"load {vector}, ptr {slot}, align 64")
                offset = e.assign(f"add i64 {out_base}, {r * out_row + v * lanes}")
                at = e.assign(f"getelementptr {scalar}, ptr %out, i64 {offset}")
                e.emit(f"store {vector} {total}, ptr {at}, align {size}")

    e.loop("%lo", "%hi", one_tile)
    e.emit("br label %exit")
    e.start("exit")
    e.emit("ret void")
    e.lines.append("}")
    return "\n".join(e.lines)


def _short(scalar: str) -> str:
    return "f32" if scalar == "float" else "f64"


def intrinsics(step: TileStep, vector_bytes: int) -> list[tuple[str, str, list[str]]]:
    """(name, result type, argument types) of the intrinsics a tile function calls."""
    lanes, _, _ = tile_shape(step, vector_bytes)
    scalar = "float" if step.out.dtype == np.float32 else "double"
    vector = f"<{lanes} x {scalar}>"
    return [
        ("llvm.umin.i64", "i64", ["i64", "i64"]),
        (f"llvm.fma.v{lanes}{_short(scalar)}", vector, [vector] * 3),
    ]
