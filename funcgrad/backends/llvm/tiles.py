"""A strided product (`TileStep`: a matrix product or a convolution) as an LLVM function
computing register tiles.

Each tile is `rows` x `vectors` vectors of the output held in registers while the loop over
the product's terms runs: per term it loads `vectors` vectors of `b` and broadcasts `rows`
elements of `a`, each multiplied into every vector of its row by a fused multiply-add. The
tile's inputs come from the first levels of cache (a term's elements lie a few rows apart),
so the loop runs at the rate of the multiply-adds, where a convolution gathered into windows
first (`schedule._conv_gemm`) writes and reads its windows through memory, and a library GEMM
pays its packing and call on small matrices and meets a product only a few dozen columns
wide. A sum of more than `TERMS_PER_SUM` terms is taken in blocks, each added to what the
output holds.

Tiles at the output's edge run versions of the code of their own: the last row of tiles
computes only the rows left, and at the last columns, lanes past the output's load and store
under masks made at run time; full tiles run without masks. No element is stored twice, so
an update (`TileStep.addend`) may write over its addend in place.

`tile_function` renders `name(ptr a, ptr b, ptr out[, ptr addend], i64 lo, i64 hi)`,
computing tiles lo..hi of the step, the form a chunk of a parallel loop calls
(`ModuleRenderer.parallel_call`).
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
    registers = 32 if vector_bytes == 64 else 16
    widths = range(1, min(4, -(-step.columns // lanes)) + 1)
    # Of the tiles computing the fewest lanes, one keeping the most accumulators, then the
    # narrowest (2 x 12 ran 0-5% faster than 3 x 8 and 4 x 6 on 3x3 convolutions and
    # products of 128 to 512 columns).
    vectors = min(
        widths,
        key=lambda v: (_lanes_computed(step.columns, v, lanes), -v * _ROWS[registers][v], v),
    )
    # As many rows as the registers take, fewer where that spreads the rows evenly over as
    # many tiles (14 rows: two tiles of 7, not one of 12 and one of 2).
    count = step.rows[0]
    return lanes, vectors, -(-count // -(-count // _ROWS[registers][vectors]))


def _lanes_computed(columns: int, vectors: int, lanes: int) -> int:
    """The vector lanes tiles `vectors` wide compute over `columns` columns (the last tile
    as few vectors as it needs, masked lanes counted)."""
    width = vectors * lanes
    return (columns // width) * width + -(-(columns % width) // lanes) * lanes


def tiles(step: TileStep, vector_bytes: int) -> int:
    """How many tiles the step's output takes."""
    lanes, vectors, rows = tile_shape(step, vector_bytes)
    blocks = (-(-step.rows[0] // rows), -(-step.columns // (lanes * vectors)))
    return math.prod(count for count, *_ in step.outer) * blocks[0] * blocks[1]


# Whether convolutions run in tiles where their layout allows (`schedule._conv_in_tiles`);
# tests of the GEMM path turn it off (tests/checks.products_as).
CONVOLUTIONS = True
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
    def __init__(self, loop_hint):
        self.lines: list[str] = []
        self.names = itertools.count()
        self.block = "entry"
        self.loop_hint = loop_hint  # () -> a loop's metadata node

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
        hint = self.loop_hint()
        self.emit(f"br i1 {finished}, label %{done}, label %{head}, !llvm.loop {hint}")
        self.start(done)

    def splat(self, element: str, value: str, lanes: int) -> str:
        """A vector of `lanes` copies of `value` (of LLVM type `element`)."""
        vector = f"<{lanes} x {element}>"
        one = self.assign(f"insertelement {vector} poison, {element} {value}, i64 0")
        zeros = f"<{lanes} x i32> zeroinitializer"
        return self.assign(f"shufflevector {vector} {one}, {vector} poison, {zeros}")

    def either(self, condition: str, body) -> None:
        """body(True) where `condition` (an i1 value) holds, body(False) where not."""
        k = next(self.names)
        self.emit(f"br i1 {condition}, label %then{k}, label %else{k}")
        for label, holds in ((f"then{k}", True), (f"else{k}", False)):
            self.start(label)
            body(holds)
            self.emit(f"br label %join{k}")
        self.start(f"join{k}")

    def sum_of(self, terms: list[tuple[str, int]], base: str = "0") -> str:
        """base + the sum of index times stride."""
        total = base
        for index, stride in terms:
            if stride == 0:
                continue
            product = self.assign(f"mul i64 {index}, {stride}")
            total = product if total == "0" else self.assign(f"add i64 {total}, {product}")
        return total


def tile_function(step: TileStep, name: str, vector_bytes: int, loop_hint) -> str:
    """The LLVM function computing tiles lo..hi of `step` (see the module's notes); each
    loop takes the metadata node `loop_hint()` gives (written as they should run, at the
    multiply-adds' rate, its loops are neither unrolled nor vectorized again)."""
    from funcgrad.backends.llvm.render import constant_text  # (render imports this module)

    dtype = step.out.dtype
    scalar = "float" if dtype == np.float32 else "double"
    lanes, vectors, rows = tile_shape(step, vector_bytes)
    vector = f"<{lanes} x {scalar}>"
    fma = f"llvm.fma.v{lanes}{_short(scalar)}"
    masked = f"v{lanes}{_short(scalar)}.p0"
    width = lanes * vectors
    size = dtype.itemsize
    row_count, a_row, out_row = step.rows
    row_blocks = -(-row_count // rows)
    column_blocks = -(-step.columns // width)
    last_rows = row_count - (row_blocks - 1) * rows
    last_width = step.columns - (column_blocks - 1) * width
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

    split = _sum_split(step.terms)

    e = _Emitter(loop_hint)
    addend = ", ptr %addend" if step.addend is not None else ""  # (maybe `out`'s memory)
    e.lines.append(
        f"define internal void @{name}(ptr noalias %a, ptr noalias %b, ptr %out{addend}, "
        "i64 %lo, i64 %hi) #0 {"
    )
    e.start("entry")
    slots = [
        [e.assign(f"alloca {vector}, align 64", "acc") for _ in range(vectors)] for _ in range(rows)
    ]
    empty = e.assign("icmp sge i64 %lo, %hi", "empty")
    e.emit(f"br i1 {empty}, label %exit, label %tiles")
    e.start("tiles")

    def splat(value: str) -> str:
        return e.splat(scalar, value, lanes)

    def load(at: str, mask: str | None) -> str:
        if mask is None:
            return e.assign(f"load {vector}, ptr {at}, align {size}")
        return e.assign(
            f"call {vector} @llvm.masked.load.{masked}(ptr {at}, i32 {size}, "
            f"<{lanes} x i1> {mask}, {vector} zeroinitializer)"
        )

    def store(value: str, at: str, mask: str | None) -> None:
        if mask is None:
            e.emit(f"store {vector} {value}, ptr {at}, align {size}")
        else:
            e.emit(
                f"call void @llvm.masked.store.{masked}({vector} {value}, ptr {at}, "
                f"i32 {size}, <{lanes} x i1> {mask})"
            )

    def one_tile(tile: str) -> None:
        place, rest = {}, tile
        for dim in reversed(order):
            place[dim] = e.assign(f"urem i64 {rest}, {extent[dim]}")
            rest = e.assign(f"udiv i64 {rest}, {extent[dim]}")
        first_row = e.assign(f"mul i64 {place['row']}, {rows}")
        first_column = e.assign(f"mul i64 {place['column']}, {width}")
        outer = [(place[d], dims) for d, dims in enumerate(step.outer)]
        a_base = e.sum_of([(i, s[1]) for i, s in outer] + [(first_row, a_row)])
        b_base = e.sum_of([(i, s[2]) for i, s in outer], first_column)
        out_base = e.sum_of([(i, s[3]) for i, s in outer] + [(first_row, out_row)], first_column)

        def columns(tile_rows: int) -> None:
            if last_width == width:
                tile_body(tile_rows, False, first_column, a_base, b_base, out_base)
                return
            edge = e.assign(f"icmp eq i64 {place['column']}, {column_blocks - 1}", "edge")
            e.either(
                edge,
                lambda at_edge: tile_body(
                    tile_rows, at_edge, first_column, a_base, b_base, out_base
                ),
            )

        if last_rows == rows:
            columns(rows)
            return
        edge = e.assign(f"icmp eq i64 {place['row']}, {row_blocks - 1}", "edge")
        e.either(edge, lambda at_edge: columns(last_rows if at_edge else rows))

    def tile_body(tile_rows: int, masked: bool, first_column, a_base, b_base, out_base) -> None:
        """A tile of `tile_rows` rows (the last row of tiles may have fewer); where `masked`,
        at the output's last columns, lanes past them load and store under a mask (the
        code of full tiles has none)."""
        tile_slots = slots[:tile_rows]
        a_rows = [str(r * a_row) for r in range(tile_rows)]
        lane_masks: list[str | None] = [None] * vectors
        if masked:
            left = e.assign(f"sub i64 {step.columns}, {first_column}")
            iota = f"<{', '.join(f'i64 {k}' for k in range(lanes))}>"
            for v in range(vectors):
                counts = e.splat("i64", e.assign(f"sub i64 {left}, {v * lanes}"), lanes)
                lane_masks[v] = e.assign(f"icmp slt <{lanes} x i64> {iota}, {counts}", "lanes")

        def nest(level: int, stop: int, a_at: str, b_at: str, indices: list, body) -> None:
            """Loops over the sum's levels `level`..`stop`, then body(a offset, b offset,
            their indices)."""
            if level == stop:
                body(a_at, b_at, indices)
                return
            count, a_stride, b_stride = step.terms[level]
            e.loop(
                "0",
                count,
                lambda k: nest(
                    level + 1,
                    stop,
                    e.sum_of([(k, a_stride)], a_at),
                    e.sum_of([(k, b_stride)], b_at),
                    [*indices, k],
                    body,
                ),
            )

        def block(a_at: str, b_at: str, indices: list) -> None:
            """A block of the sum's inner terms summed in registers, then written (the
            first block) or added to what the output holds."""
            for row in tile_slots:
                for slot in row:
                    e.emit(f"store {vector} zeroinitializer, ptr {slot}, align 64")
            nest(split, len(step.terms), a_at, b_at, [], lambda a, b, _: multiply_add(a, b))
            if not indices:
                write(first=True)
                return
            any_index = indices[0]
            for index in indices[1:]:
                any_index = e.assign(f"or i64 {any_index}, {index}")
            first = e.assign(f"icmp eq i64 {any_index}, 0", "first")
            e.either(first, lambda f: write(first=f))

        def multiply_add(a_at: str, b_at: str) -> None:
            b_row = e.assign(f"getelementptr {scalar}, ptr %b, i64 {b_at}")
            loaded = []
            for v, mask in enumerate(lane_masks):
                at = e.assign(f"getelementptr {scalar}, ptr {b_row}, i64 {v * lanes}")
                loaded.append(load(at, mask))
            a_column = e.assign(f"getelementptr {scalar}, ptr %a, i64 {a_at}")
            for row, a_row_offset in zip(tile_slots, a_rows):
                at = e.assign(f"getelementptr {scalar}, ptr {a_column}, i64 {a_row_offset}")
                element = splat(e.assign(f"load {scalar}, ptr {at}, align {size}"))
                for slot, b_vector in zip(row, loaded):
                    total = e.assign(f"load {vector}, ptr {slot}, align 64")
                    fused = e.assign(
                        f"call {vector} @{fma}({vector} {element}, {vector} {b_vector}, "
                        f"{vector} {total})"
                    )
                    e.emit(f"store {vector} {fused}, ptr {slot}, align 64")

        def write(first: bool) -> None:
            for r, row in enumerate(tile_slots):
                for v, slot in enumerate(row):
                    mask = lane_masks[v]
                    total = e.assign(f"load {vector}, ptr {slot}, align 64")
                    offset = e.assign(f"add i64 {out_base}, {r * out_row + v * lanes}")
                    at = e.assign(f"getelementptr {scalar}, ptr %out, i64 {offset}")
                    if not first:
                        total = scaled_onto(total, load(at, mask))
                    elif step.addend is not None:
                        addend = e.assign(f"getelementptr {scalar}, ptr %addend, i64 {offset}")
                        beta = splat(constant_text(step.beta, dtype))
                        scaled = e.assign(f"fmul {vector} {load(addend, mask)}, {beta}")
                        total = scaled_onto(total, scaled)
                    store(total, at, mask)

        nest(0, split, a_base, b_base, [], block)

    def scaled_onto(total: str, base: str) -> str:
        """alpha * total + base (total + base where alpha is 1)."""
        if step.alpha == 1:
            return e.assign(f"fadd {vector} {total}, {base}")
        alpha = splat(constant_text(step.alpha, dtype))
        operands = f"{vector} {total}, {vector} {alpha}, {vector} {base}"
        return e.assign(f"call {vector} @{fma}({operands})")

    e.loop("%lo", "%hi", one_tile)
    e.emit("br label %exit")
    e.start("exit")
    e.emit("ret void")
    e.lines.append("}")
    return "\n".join(e.lines)


# The longest sum a tile keeps in its registers: a longer one (a weight gradient's, over the
# batch and every place) is summed in blocks of its innermost levels' terms, each added to
# what the output holds, so that a float32 sum's rounding grows with the block, not the sum.
TERMS_PER_SUM = 4096


def _sum_split(terms: tuple) -> int:
    """The first of the innermost levels of `terms` a block sums: as many as keep it within
    `TERMS_PER_SUM` terms, at least one."""
    split, block = len(terms), 1
    while split > 0 and (split == len(terms) or block * terms[split - 1][0] <= TERMS_PER_SUM):
        block *= terms[split - 1][0]
        split -= 1
    return split


def _short(scalar: str) -> str:
    return "f32" if scalar == "float" else "f64"


def intrinsics(step: TileStep, vector_bytes: int) -> list[tuple[str, str, list[str]]]:
    """(name, result type, argument types) of the intrinsics a tile function calls."""
    lanes, _, _ = tile_shape(step, vector_bytes)
    scalar = "float" if step.out.dtype == np.float32 else "double"
    vector = f"<{lanes} x {scalar}>"
    masked, mask = f"v{lanes}{_short(scalar)}.p0", f"<{lanes} x i1>"
    return [
        (f"llvm.fma.v{lanes}{_short(scalar)}", vector, [vector] * 3),
        (f"llvm.masked.load.{masked}", vector, ["ptr", "i32", mask, vector]),
        (f"llvm.masked.store.{masked}", "void", [vector, "ptr", "i32", mask]),
    ]
