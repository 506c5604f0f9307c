"""Render the kernels of a scheduled program as CUDA C (one `__global__` function each).

A kernel whose outer loop is parallel (`compiler.parallel.parallel_loop`) runs that loop on
the grid: thread t of the launch takes iterations t, t + gridDim * blockDim, ... (a grid-stride
loop, so any grid covers any trip count), and the loops inside it run in the thread. Scratch
buffers of such a kernel (a row's intermediates) are arrays local to each thread. Any other
kernel runs on the launch's first thread.

Expressions are rendered once per statement, one named constant per DAG node, so the text
reads like the kernel IR's printout; index arithmetic stays inline in the subscripts.
Integer arithmetic on data goes through the prelude's wrapping helpers; transcendental
functions call CUDA's math library.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from funcgrad import dtypes
from funcgrad.backends.cuda.prelude import PRELUDE
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.fusion import CompileError
from funcgrad.compiler.parallel import (
    expressions,
    identity,
    linear,
    linear_in_loop,
    parallel_loop,
    product_nest,
    ranges_of,
    shared_loop_folds,
    statement_replaced,
    statements_in,
    substituted,
    value_at,
    walks_by_one,
    whole_array_reduction,
    work,
)

BF16 = dtypes.bfloat16
F16 = dtypes.float16
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
HALVES = dtypes.HALF_FLOATS

# Scratch a thread keeps in its local memory; a kernel needing more runs on one thread.
LOCAL_SCRATCH_BYTES = 1 << 14
# A parallel loop whose iterations (rows) hold loops this long gives each row a block, whose
# threads share the row's loops (and its scratch, in shared memory, up to this size).
ROW_MIN_WIDTH = 128
# Rows of a warp's width or more, walking memory by one, take a block each too where there
# are fewer than FEW_ROWS: a thread each would fill a small part of a GPU (an H100 holds some
# 270,000 threads), each walking its row alone, neighbouring threads a row apart in memory.
# On an H200 the character transformer's layer norms and attention softmaxes (2,048 and 8,192
# rows of 64) took 50-80 µs each as a thread a row.
ROW_MIN_WIDTH_FEW_ROWS = 32
FEW_ROWS = 1 << 16
# Rows whose loops stride across memory (a column's fold) keep a thread each, neighbouring
# threads reading neighbouring columns, unless there are at most this many: their threads
# would then fill a few blocks and walk their loops alone, where blocks share each loop.
FEW_STRIDED_ROWS = 1024
SHARED_SCRATCH_BYTES = 1 << 15
# A row's block whose loops all walk one range holds the row's intermediates in its threads'
# registers, at most this many bytes a thread, each thread taking as many vectors of the row
# as they allow up to HELD_VECTORS: a block of few threads with many loads in flight each, whose
# folds (a warp's shuffles, then one partial a warp) and barriers are short. (On an H100, a
# softmax of 4,096-wide rows ran in 474, 401 and 387 µs with 2, 4 and 8 vectors a thread; a
# layernorm, holding as much, in 372 to 377 µs alike.)
HELD_VECTORS = 8
HELD_BYTES = 256
# The largest such block: its kernel is compiled for it (`__launch_bounds__`), so that each
# thread keeps to the 128 registers that a multiprocessor's 65,536 give 512 threads.
HELD_MAX_BLOCK = 512
# Static shared memory a block may declare (CUDA's limit without opting in to more).
SHARED_BYTES = 48 << 10
# The block a GPU launch has where the kernel leaves it free: as many threads as a kernel of any
# register count (up to 255 a thread) may run on one multiprocessor.
LAUNCH_BLOCK = 256
# The most threads a block may have (CUDA's limit): the size of a block reduction's shared array.
MAX_BLOCK = 1024
WARPS = MAX_BLOCK // 32
# A kernel in a GEMM's form (`_product`, a convolution's implicit GEMM) runs tiled: a block
# of `TILE_THREADS` computes a tile of TILE_RESULTS results (64 x 64, 128 x 32 or 256 x 16),
# each thread 4 x 4 of them in registers, over steps of TILE_DEPTH terms of each operand
# staged in shared memory.
TILE_RESULTS = 4096
TILE_DEPTH = 16
TILE_THREADS = 256
# A kernel whose buffers, loops and loop nests all stay below this many elements computes its
# indices in 32-bit ints (a GPU does 64-bit integer arithmetic, division above all, in several
# instructions); the margin below 2^31 keeps a grid-stride loop's last step from overflowing.
INT_INDEX_LIMIT = 1 << 30
# What a slot holds: a buffer's device address (`addressed`).
ADDRESS = np.dtype(np.uint64)

_C_TYPES = {
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
    "float32": "float",
    "float64": "double",
}


def value_type(dtype: np.dtype) -> str:
    """The C type of a value of `dtype` in registers."""
    if dtype == K.BOOL:
        return "bool"
    if dtype in HALVES:
        return "float"
    if dtypes.is_narrow(dtype):
        return "unsigned char"  # a narrow format is its byte (kernel_ir converts it)
    return _C_TYPES[dtype.name]


def memory_type(dtype: np.dtype) -> str:
    if dtype == K.BOOL or dtypes.is_narrow(dtype):
        return "unsigned char"
    if dtype in HALVES:
        return "unsigned short"
    return _C_TYPES[dtype.name]


def _is_float(dtype: np.dtype) -> bool:
    # (bfloat16's NumPy kind is "V"; float8_e5m2's is "f", but it is a narrow format's byte)
    return (dtype.kind == "f" or dtype == BF16) and not dtypes.is_narrow(dtype)


def constant_text(value, dtype: np.dtype) -> str:
    if dtype == K.BOOL:
        return "true" if value else "false"
    if dtypes.is_narrow(dtype):
        return f"((unsigned char){int(np.array(value, dtype).view(np.uint8))}u)"
    if _is_float(dtype):
        compute = F64 if dtype == F64 else F32
        x = np.array(value, dtype).astype(compute)[()]
        suffix = "" if compute == F64 else "f"
        if np.isnan(x):
            bits = int(x.view(np.uint64 if compute == F64 else np.uint32))
            return (
                f"__longlong_as_double({bits:#x}LL)"
                if compute == F64
                else (f"__uint_as_float({bits:#x}u)")
            )
        if np.isinf(x):
            return ("-" if x < 0 else "") + ("(1.0 / 0.0)" if compute == F64 else "(1.0f / 0.0f)")
        text = repr(float(x)) if compute == F64 else str(x)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}{suffix}"
    return _int_literal(int(value), dtype)


def _int_literal(value: int, dtype: np.dtype) -> str:
    info = np.iinfo(dtype)
    value = int(np.array(value).astype(dtype))
    c = _C_TYPES[dtype.name]
    if dtype.kind == "u":
        text = f"{value}ULL" if dtype.itemsize == 8 else f"{value}u"
    elif value == info.min and dtype.itemsize >= 4:
        text = f"({value + 1}{'LL' if dtype.itemsize == 8 else ''} - 1)"
    else:
        text = f"{value}LL" if dtype.itemsize == 8 else str(value)
    if dtype.itemsize < 4:
        return f"(({c}){text})"
    return text if not text.startswith("-") else f"({text})"


# Kernel IR operations that call CUDA's math library: op -> the float64 function's name
# (float32 appends "f"). Besides these, abs calls fabs and the prelude calls rint and round.
MATH = {
    op: op
    for op in (
        "sqrt cbrt exp exp2 expm1 log log1p log10 log2 sin cos tan asin acos atan sinh cosh tanh "
        "asinh acosh atanh erf erfc lgamma floor ceil pow atan2 nextafter"
    ).split()
} | {"round_even": "rint", "rem": "fmod"}
_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
}
_BITWISE = {"and": "&", "or": "|", "xor": "^"}
# Integer operations the prelude defines with the reference backend's semantics.
_INTEGER_HELPERS = (
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "max",
    "min",
    "shl",
    "shr_logical",
    "shr_arith",
)
# Booleans: max and add are or, min and mul are and.
_LOGICAL = {
    "and": "&&",
    "or": "||",
    "xor": "!=",
    "max": "||",
    "add": "||",
    "min": "&&",
    "mul": "&&",
}


@dataclass
class CudaKernel:
    """One rendered kernel: its name in the module, its parameters (buffers, in order) and
    how many threads its parallel loop can use (1 when it runs on one thread)."""

    name: str
    params: list[K.Buffer]
    const_params: list[bool]  # which parameters the kernel only reads
    threads: int
    body: str  # the function's statements
    # One block whose threads work together (shared memory, __syncthreads): launched alone.
    cooperative: bool = False
    # Nonzero when each iteration of the parallel loop (a row or a product's tile, `threads`
    # of them) runs on a block whose threads share its inner loops: the longest inner
    # loop's trip count (a tile's width).
    row_width: int = 0
    # Nonzero when its launches need a block of exactly this many threads (a row kernel whose
    # threads hold fixed parts of each row), or at least as many (a region's kernel calling
    # such kernels).
    block: int = 0
    # The `__shared__` arrays it declares, in bytes (the kernels a region calls share the
    # block's static shared memory: see regions.py).
    shared_bytes: int = 0
    # Whether its pointers are `__restrict__` (not a region's: see `text`).
    restricted: bool = True

    def text(self, launched: bool = True) -> str:
        """The kernel as a `__global__` function that the host launches, or as a `__device__`
        function that a region's kernel calls on its one block (the same statements: with one
        block, a grid-stride loop strides over the block, and a block per row takes every
        row in turn).

        Only the launched form's pointers are `__restrict__`, and not a region's kernel's. A
        region's kernel writes a buffer in one step and reads it in a later one, through
        pointers its steps' buffers may share (the memory plan reuses memory between steps),
        and a restricted pointer lets the compiler keep or load values (through the read-only
        cache) that the kernel's own writes change: on a GPU a while loop's carries kept their
        first values but in thread 0."""
        restrict = " __restrict__" if launched and self.restricted else ""
        signature = ", ".join(
            f"{'const ' if const else ''}{memory_type(b.dtype)}*{restrict} {b.name}"
            for b, const in zip(self.params, self.const_params)
        )
        head = 'extern "C" __global__' if launched else "__device__"
        if launched and self.block and not self.cooperative:
            head += f" __launch_bounds__({self.block})"
        return f"{head} void {self.name}({signature}) {{\n{self.body}\n}}"


def _math_name(op: str, dtype: np.dtype) -> str:
    return MATH[op] + ("" if dtype == F64 else "f")


class _KernelWriter:
    def __init__(self, kernel: K.Kernel, name: str):
        self.kernel = kernel
        self.name = name
        self.lines: list[str] = []
        self.names = itertools.count()
        self.index_names: dict = {}
        self.memo: dict = {}
        self.acc_names: dict = {}
        self.indent = "  "
        # In a vector loop: (the lane, {buffer: the ids of the offsets read or written as
        # lanes}, the lane's slot in the held arrays of a `held_loop`, else None)
        self.lane: tuple | None = None
        self.held: HeldRow | None = None
        self.shared_bytes = 0
        self.index_type = "int" if _int_indices(kernel) else "long long"

    # -- expressions -------------------------------------------------------------------------

    def emit(self, text: str) -> None:
        self.lines.append(self.indent + text)

    def value(self, e: K.Expr) -> str:
        if isinstance(e, K.Const):
            return constant_text(e.value, e.dtype)
        if isinstance(e, K.Index) or _is_index_arithmetic(e):
            # Indices compute in the kernel's index type, and enter the data's int64 as such.
            text = self.index_text(e)
            return text if self.index_type == "long long" else f"(long long){text}"
        if isinstance(e, K.AccRead):
            return self.acc_names[e.acc]
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit[1]
        text = self.render(e)
        name = f"v{next(self.names)}"
        self.emit(f"const {value_type(e.dtype)} {name} = {text};")
        self.memo[id(e)] = (e, name)
        return name

    def index_text(self, e: K.Expr) -> str:
        """Index arithmetic in the kernel's index type."""
        if isinstance(e, K.Const):
            return self.index_literal(int(e.value))
        if isinstance(e, K.Index):
            return self.index_names[e]
        if isinstance(e, K.Select):  # (a window's place, or 0 where it leaves the operand)
            picked = self.index_text(e.on_true), self.index_text(e.on_false)
            return f"({self.value(e.pred)} ? {picked[0]} : {picked[1]})"
        a, b = self.index_text(e.a), self.index_text(e.b)
        symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%"}[e.op]
        return f"({a} {symbol} {b})"

    def subscript(self, offset: K.Expr) -> str:
        """An offset into a buffer: index arithmetic stays in the index type."""
        if isinstance(offset, (K.Const, K.Index)) or _is_index_arithmetic(offset):
            return self.index_text(offset)
        return self.value(offset)

    def index_literal(self, n: int) -> str:
        if self.index_type == "int" and abs(n) < INT_INDEX_LIMIT:
            return str(n) if n >= 0 else f"({n})"
        return constant_text(n, K.INDEX)

    def grid_stride(self) -> tuple[str, str]:
        """A grid-stride loop's first index (this thread's place in the grid) and its stride
        (the grid's threads), in the index type."""
        first, stride = "blockIdx.x * blockDim.x + threadIdx.x", "gridDim.x * blockDim.x"
        if self.index_type == "int":
            return f"(int)({first})", f"(int)({stride})"
        return f"(long long){first}", f"(long long){stride}"

    def render(self, e: K.Expr) -> str:
        if isinstance(e, K.Load):
            element = self.lane_element(e.buffer, e.offset)
            if element is None:
                element = f"{e.buffer.name}[{self.subscript(e.offset)}]"
            return _from_memory(element, e.dtype)
        if isinstance(e, K.Select):
            p, a, b = self.value(e.pred), self.value(e.on_true), self.value(e.on_false)
            return f"{p} ? {a} : {b}"
        if isinstance(e, K.Cast):
            return self.cast(self.value(e.x), e.x.dtype, e.dtype)
        if isinstance(e, K.Bitcast):
            return self.bitcast(self.value(e.x), e.x.dtype, e.dtype)
        if isinstance(e, K.Unary):
            return _rounded(self.unary(e), e.dtype, e.op not in ("is_finite", "neg", "abs"))
        if isinstance(e, K.Binary):
            exact = e.op in K.COMPARISONS or e.op in ("max", "min")
            return _rounded(self.binary(e), e.dtype, not exact)
        raise TypeError(f"cannot render {e!r}")

    def unary(self, e: K.Unary) -> str:
        op, dtype = e.op, e.x.dtype
        x = self.value(e.x)
        c = value_type(dtype)
        if op == "not":
            return f"!{x}" if dtype == K.BOOL else f"({c})~{x}"
        if op == "popcount":
            return f"({c})fg_popcount({x})"
        if op == "sign":
            if _is_float(dtype):
                return f"fg_fsign({x})"
            if dtype == K.BOOL:
                return x
            return f"({c})({x} != 0)" if dtype.kind == "u" else f"fg_isign({x})"
        if op == "neg":
            return f"fg_fneg({x})" if _is_float(dtype) else f"fg_neg({x})"
        if op == "abs":
            if _is_float(dtype):
                return f"{'fabs' if dtype == F64 else 'fabsf'}({x})"
            return x if dtype.kind in "ub" else f"fg_iabs({x})"
        if not _is_float(dtype):
            raise CompileError(f"the CUDA renderer has no {op} for {dtype.name}")
        if op == "is_finite":
            return f"fg_isfinite({x})"
        if op == "round_away":
            return f"fg_round_away({x})"
        one = constant_text(1, dtype)
        if op == "rsqrt":
            return f"{one} / {_math_name('sqrt', dtype)}({x})"
        if op == "logistic":
            return f"{one} / ({one} + {_math_name('exp', dtype)}(-({x})))"
        if op == "lgamma":
            return f"fg_lgamma({x})"
        if op in ("log10", "log2", "erf", "erfc") and dtype != F64:
            # In double and rounded once, as the other backends take them: CUDA's log10f may be
            # 2 ulp off, and then log10(1000) would miss 3; its erfcf was 3.2 ulp off at 6.11
            # (and so erf_inv, made of erf and erfc, 3.2 ulp at -0.52).
            return f"(float){MATH[op]}((double){x})"
        if op in MATH:
            return f"{_math_name(op, dtype)}({x})"
        raise CompileError(f"the CUDA renderer has no {op} for {dtype.name}")

    def binary(self, e: K.Binary) -> str:
        op, dtype = e.op, e.a.dtype
        if op in K.COMPARISONS and _is_index(e.a) and _is_index(e.b):  # (a bound's test)
            return f"{self.index_text(e.a)} {_INFIX[op]} {self.index_text(e.b)}"
        a, b = self.value(e.a), self.value(e.b)
        if op in K.COMPARISONS:
            return f"{a} {_INFIX[op]} {b}"
        if dtype == K.BOOL and op in _LOGICAL:
            return f"{a} {_LOGICAL[op]} {b}"
        if _is_float(dtype):
            if op in ("add", "sub", "mul", "div"):
                return f"{a} {_INFIX[op]} {b}"
            if op in ("max", "min"):
                return f"fg_f{op}({a}, {b})"
            if op == "pow":
                return f"fg_pow({a}, {b})"
            # nextafter steps to the next float32, not the next half: no such function.
            if op in MATH and not (op == "nextafter" and dtype in HALVES):
                return f"{_math_name(op, dtype)}({a}, {b})"
            raise CompileError(f"the CUDA renderer has no {op} for {dtype.name}")
        c = value_type(dtype)
        if op in _BITWISE:
            return f"({c})({a} {_BITWISE[op]} {b})"
        if op in _INTEGER_HELPERS:
            return f"fg_{op}({a}, {b})"
        raise CompileError(f"the CUDA renderer has no {op} for {dtype.name}")

    def cast(self, x: str, src: np.dtype, dst: np.dtype) -> str:
        if src == dst:
            return x
        if dst == K.BOOL:
            return f"{x} != 0"
        if src == K.BOOL:
            return f"({value_type(dst)}){x}" if dst not in HALVES else f"(float){x}"
        if dst in HALVES:
            rounding = "fg_round_f16" if dst == F16 else "fg_round_bf16"
            if src == F64 and dst == F16:
                return f"{rounding}(fg_f64_to_f32_odd({x}))"
            return f"{rounding}((float){x})"
        if _is_float(dst):
            return f"({value_type(dst)}){x}"
        if _is_float(src):
            info = np.iinfo(dst)
            low, high = _int_literal(info.min, dst), _int_literal(info.max, dst)
            return f"fg_to_int<{value_type(dst)}>({x}, {low}, {high})"
        return f"({value_type(dst)}){x}"

    def bitcast(self, x: str, src: np.dtype, dst: np.dtype) -> str:
        if src in HALVES:
            x, src = f"fg_to_{'f16' if src == F16 else 'bf16'}({x})", np.dtype(np.uint16)
        if dst in HALVES:
            bits = f"fg_bitcast<unsigned short>({x})"
            return f"fg_from_{'f16' if dst == F16 else 'bf16'}({bits})"
        return x if value_type(src) == value_type(dst) else f"fg_bitcast<{value_type(dst)}>({x})"

    # -- statements ----------------------------------------------------------------------------

    def statements(self, body: list) -> None:
        for stmt in body:
            self.memo = {}
            if isinstance(stmt, K.Loop):
                index = self.index_name(stmt.index)
                self.emit(
                    f"for ({self.index_type} {index} = {stmt.start}; {index} < {stmt.stop}; "
                    f"++{index}) {{"
                )
                self.block(stmt.body)
                self.emit("}")
            elif isinstance(stmt, K.Store):
                element = self.lane_element(stmt.buffer, stmt.offset)
                if element is None:
                    element = f"{stmt.buffer.name}[{self.subscript(stmt.offset)}]"
                value = self.value(stmt.value)
                self.emit(f"{element} = {_to_memory(value, stmt.buffer.dtype)};")
            elif isinstance(stmt, K.SetAcc):
                value = self.value(stmt.value)
                self.emit(f"{self.acc_names[stmt.acc]} = {value};")
            else:
                raise TypeError(f"cannot render {stmt!r}")

    def lane_element(self, buffer: K.Buffer, offset: K.Expr) -> str | None:
        """In a vector loop's lane, the lane's element of a buffer accessed where the loop's
        vectors are (`vector_loop`, `row_vector_loop`, `held_loop`), or of a held array
        (`held_loop`: each access of one is at the loop's index); None otherwise."""
        if self.lane is None:
            return None
        lane, accesses, held_slot = self.lane
        if held_slot is not None and buffer in self.held.arrays:
            return f"{buffer.name}[{held_slot}]"
        if id(offset) not in accesses.get(buffer, ()):
            return None
        return f"{buffer.name}_v.lane[{lane}]"

    def block(self, body: list) -> None:
        outer = self.indent
        self.indent += "  "
        self.statements(body)
        self.indent = outer

    def index_name(self, index: K.Index) -> str:
        self.index_names[index] = f"i{len(self.index_names)}"
        return self.index_names[index]

    def render_kernel(self) -> CudaKernel:
        kernel = self.kernel
        if kernel.concurrent_loops:
            return self.concurrent_loops()
        product = _product(kernel)
        if product is not None:
            return self.tiled_product(product)
        split = parallel_loop(kernel, scattered=True)
        scratch_bytes = sum(b.size * b.dtype.itemsize for b in kernel.scratch)
        row = split if split is not None else _one_row(kernel)
        rows = _row_loops(row, scratch_bytes, kernel.scratch) if row is not None else None
        if rows is not None:
            return self.row_kernel(row, rows)
        if split is not None and scratch_bytes > LOCAL_SCRATCH_BYTES:
            split = None
        private = set(kernel.scratch) if split is not None else set()
        params = [b for b in dict.fromkeys(kernel.buffers) if b not in private]
        for b in kernel.scratch:
            if b in private:
                self.emit(f"{memory_type(b.dtype)} {b.name}[{max(b.size, 1)}];")
        for k, acc in enumerate(K.accumulators(kernel.body)):
            self.acc_names[acc] = f"acc{k}"
            self.emit(f"{value_type(acc.dtype)} acc{k};")
        reduction = whole_array_reduction(kernel) if split is None else None
        if reduction is not None:
            self.block_reduction(*reduction)
        elif split is None:
            self.emit("if (blockIdx.x != 0 || threadIdx.x != 0) return;")
            self.statements(kernel.body)
        else:
            self.grid_stride_loop(split, "aligned")
        threads = 1 if split is None else split.stop - split.start
        return self.finished(params, threads, cooperative=reduction is not None)

    def grid_stride_loop(self, split: K.Loop, flag: str) -> None:
        """The parallel loop over the grid's threads, 16-byte vectors first where its body
        allows (`vector_loop`, whose alignment test is named `flag`)."""
        lanes = _vector_lanes(split, self.kernel)
        index = self.index_name(split.index)
        start = self.vector_loop(split, index, lanes, flag) if lanes else str(split.start)
        first, stride = self.grid_stride()
        self.emit(
            f"for ({self.index_type} {index} = {start} + {first}; {index} < {split.stop}; "
            f"{index} += {stride}) {{"
        )
        self.block(split.body)
        self.emit("}")

    def concurrent_loops(self) -> CudaKernel:
        """Independent map kernels merged into one launch (`horizontal.merge_maps`): every
        thread runs each loop's share in turn, each over the whole grid as its own kernel's
        would be, in a scope of its own."""
        loops = self.kernel.body
        for k, loop in enumerate(loops):
            self.emit("{")
            self.indent += "  "
            self.grid_stride_loop(loop, f"aligned{k}")
            self.indent = self.indent[:-2]
            self.emit("}")
        params = list(dict.fromkeys(self.kernel.buffers))
        return self.finished(params, max(loop.stop - loop.start for loop in loops))

    def tiled_product(self, product: Product) -> CudaKernel:
        """A kernel in a GEMM's form as a tiled product: the grid's blocks take tiles of the
        results in turn (TILE_RESULTS of them, as wide as the columns need up to 64, so that
        a convolution with few output features wastes little); for each TILE_DEPTH terms the
        block stages both operands' parts in shared memory (`stage`), then each thread adds
        those terms' products to its 4 x 4 results, rows tr + m i and columns tc + n j of the
        tile (m and n the threads down and across it, so that a warp reads neighbouring
        columns); the results go out through the kernel's store."""
        rows, columns, terms = product.loops
        wide = min(64, max(16, 1 << (columns.stop - 1).bit_length()))
        tall = TILE_RESULTS // wide
        across, down = wide // 4, TILE_THREADS // (wide // 4)  # threads across and down
        value = value_type(product.acc.dtype)
        tiles_across = -(-columns.stop // wide)
        tiles = -(-rows.stop // tall) * tiles_across  # (of each part)
        parts = 1 if product.parts is None else product.parts.stop
        it = self.index_type
        for name, size in (("a", tall), ("b", wide)):  # (padding keeps stores apart)
            self.emit(f"__shared__ {value} {name}_tile[{TILE_DEPTH}][{size + 1}];")
            self.shared_bytes += TILE_DEPTH * (size + 1) * memory_size(product.acc.dtype)
        self.emit(f"const int tr = threadIdx.x / {across}, tc = threadIdx.x % {across};")
        self.emit(f"const bool active = threadIdx.x < {TILE_THREADS};")
        self.emit(f"for ({it} block = blockIdx.x; block < {parts * tiles}; block += gridDim.x) {{")
        self.emit(f"  const {it} tile = block % {tiles};")
        if product.parts is not None:
            self.emit(f"  const {it} part = block / {tiles};")
            self.index_names[product.parts.index] = "part"
        first_row = f"tile / {tiles_across} * {tall}"
        self.emit(f"  const {it} r0 = {first_row}, c0 = tile % {tiles_across} * {wide};")
        init = constant_text(product.init.value, product.acc.dtype)
        self.emit(f"  {value} sums[4][4];")
        self.emit(f"  for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) sums[i][j] = {init};")
        self.emit(f"  for ({it} k0 = 0; k0 < {terms.stop}; k0 += {TILE_DEPTH}) {{")
        self.emit("    if (active) {")
        self.indent += "      "
        self.stage("a", product.a, rows, "r0", tall, product)
        self.stage("b", product.b, columns, "c0", wide, product)
        self.indent = self.indent[:-6]
        self.emit("    }")
        self.emit("    __syncthreads();")
        self.emit("    if (active) {")
        self.emit("      #pragma unroll")
        self.emit(f"      for (int k = 0; k < {TILE_DEPTH}; ++k) {{")
        self.emit(f"        {value} a[4], b[4];")
        self.emit(f"        for (int i = 0; i < 4; ++i) a[i] = a_tile[k][tr + {down} * i];")
        self.emit(f"        for (int j = 0; j < 4; ++j) b[j] = b_tile[k][tc + {across} * j];")
        self.emit("        for (int i = 0; i < 4; ++i)")
        self.emit("          for (int j = 0; j < 4; ++j) sums[i][j] += a[i] * b[j];")
        self.emit("      }")
        self.emit("    }")
        self.emit("    __syncthreads();  // every thread is done with the tiles before they change")
        self.emit("  }")
        self.emit("  if (active) {")
        self.indent += "    "
        for i, j in itertools.product(range(4), range(4)):
            row, column = f"(r0 + tr + {down * i})", f"(c0 + tc + {across * j})"
            self.emit(f"if ({row} < {rows.stop} && {column} < {columns.stop}) {{")
            self.index_names[rows.index], self.index_names[columns.index] = row, column
            self.acc_names[product.acc] = f"sums[{i}][{j}]"
            self.block([product.store])
            self.emit("}")
        self.indent = self.indent[:-4]
        self.emit("  }")
        self.emit("}")
        params = list(dict.fromkeys(self.kernel.buffers))
        return self.finished(params, parts * tiles, row_width=wide, block=TILE_THREADS)

    def stage(
        self, name: str, operand: K.Expr, outer: K.Loop, first: str, size: int, product
    ) -> None:
        """This thread's elements of an operand's part of the tiles (`size` rows or columns
        by TILE_DEPTH terms; element e, e + TILE_THREADS, ...), computed as the kernel's
        expression says (a convolution's windows gathered here), zero past the operand's
        edges, into `{name}_tile[term][row or column]`. Neighbouring threads take
        neighbouring elements of whichever index moves the operand's memory by one
        (`_moves_by_one`)."""
        terms = product.loops[2]
        if _moves_by_one(operand, outer.index, product.middle):
            place, term = f"e % {size}", f"e / {size}"
        else:
            place, term = f"e / {TILE_DEPTH}", f"e % {TILE_DEPTH}"
        value = value_type(product.acc.dtype)
        self.emit(f"for (int l = 0; l < {size * TILE_DEPTH // TILE_THREADS}; ++l) {{")
        self.emit(f"  const int e = threadIdx.x + {TILE_THREADS} * l;")
        self.emit(f"  const int {name}p = {place}, {name}k = {term};")
        self.emit(f"  {value} {name}v = 0;")
        self.emit(f"  if ({first} + {name}p < {outer.stop} && k0 + {name}k < {terms.stop}) {{")
        self.indent += "    "
        self.index_names[outer.index] = f"({first} + {name}p)"
        self.index_names[terms.index] = f"(k0 + {name}k)"
        self.memo = {}
        self.emit(f"{name}v = {self.value(operand)};")
        self.indent = self.indent[:-4]
        self.emit("  }")
        self.emit(f"  {name}_tile[{name}k][{name}p] = {name}v;")
        self.emit("}")

    def vector_loop(self, split: K.Loop, index: str, lanes: int, flag: str) -> str:
        """An elementwise loop over 16-byte vectors: thread t takes vectors t, t + gridDim *
        blockDim, ..., loads each buffer's `lanes` elements with one 16-byte load, runs the
        loop body once per lane and stores each result vector at once. It runs when every
        buffer the loop reads or writes at its own index is 16-byte aligned (a scan's slice
        may not be); the scalar loop after it takes the iterations left (all of them when
        a buffer is not aligned). Returns the C expression of that first scalar iteration."""
        vectors = _indexed_loads(split) + [s.buffer for s in split.body]
        first, stride = self.grid_stride()
        accesses = {b: {id(split.index)} for b in vectors}
        starts = {b: b.name for b in vectors}
        loop = (split, index, split.body)
        return self.aligned_vectors(loop, lanes, starts, accesses, ("q", first, stride), flag)

    def aligned_vectors(self, loop, lanes, starts, accesses, vectors, flag) -> str:
        """A loop's iterations over 16-byte vectors where every buffer `accesses` names (by
        the offsets it is read or written at) is aligned at `starts[buffer]`: for each vector
        (`vectors`: its variable, first value and stride), each buffer the body reads there
        is read as `lanes` elements with one load, the body runs once per lane and each
        buffer it writes there is stored as one vector after. `loop`: the kernel IR loop, its
        index's name and the body to run. Returns the C expression of the first iteration
        left to an element loop after it (all of them where a buffer is not aligned)."""
        loop, index, body = loop
        q, first, stride = vectors
        count = (loop.stop - loop.start) // lanes
        stored = [s.buffer for s in body if isinstance(s, K.Store) and s.buffer in accesses]
        stored = list(dict.fromkeys(stored))
        loaded = [b for b in accesses if b not in stored]
        pointers = " | ".join(f"(unsigned long long){p}" for p in starts.values())
        self.emit(f"const bool {flag} = (({pointers}) & 15) == 0;")
        self.emit(f"if ({flag}) {{")
        outer = self.indent
        self.indent += "  "
        self.emit(f"for ({self.index_type} {q} = {first}; {q} < {count}; {q} += {stride}) {{")
        self.indent += "  "
        for b in loaded:
            vector = f"fg_vector<{memory_type(b.dtype)}, {lanes}>"
            pointer = f"reinterpret_cast<const {vector}*>({starts[b]})"
            self.emit(f"const {vector} {b.name}_v = {pointer}[{q}];")
        for b in stored:
            self.emit(f"fg_vector<{memory_type(b.dtype)}, {lanes}> {b.name}_v;")
        for lane in range(lanes):
            self.emit("{")
            self.indent += "  "
            self.emit(
                f"const {self.index_type} {index} = {_plus(loop.start)}{lanes} * {q} + {lane};"
            )
            self.lane = (lane, accesses, None)
            self.statements(body)
            self.lane = None
            self.indent = self.indent[:-2]
            self.emit("}")
        for b in stored:
            vector = f"fg_vector<{memory_type(b.dtype)}, {lanes}>"
            self.emit(f"reinterpret_cast<{vector}*>({starts[b]})[{q}] = {b.name}_v;")
        self.indent = outer + "  "
        self.emit("}")
        self.indent = outer
        self.emit("}")
        vectors_end = self.index_literal(loop.start + count * lanes)
        return f"({flag} ? {vectors_end} : {self.index_literal(loop.start)})"

    def finished(self, params: list, threads: int, **layout) -> CudaKernel:
        read_only = [b not in self.kernel.outputs for b in params]
        body = "\n".join(self.lines)
        return CudaKernel(
            self.name, params, read_only, threads, body, shared_bytes=self.shared_bytes, **layout
        )

    def shared(self, dtype: np.dtype, name: str, size: int) -> None:
        """Declares a `__shared__` array of `size` elements."""
        self.emit(f"__shared__ {memory_type(dtype)} {name}[{size}];")
        self.shared_bytes += size * memory_size(dtype)

    def row_kernel(self, split: K.Loop, rows: dict) -> CudaKernel:
        """A block per row: the grid's blocks take rows in turn; each inner loop of a row is
        spread over the block's threads, each thread folding its own part of the loop's
        accumulators, which the block then combines (`share`). Statements between loops run
        in every thread alike (their values are the same in all).

        Where the loops reading or writing the row's intermediates walk one range
        (`_held_row`), each thread takes the same vectors of the row in each of them
        (`held_loop`) and holds its elements of the intermediates in registers: the row is
        read from memory once, and a loop waits for the others only where it folds or
        writes what a later statement reads. Otherwise thread t takes iterations t,
        t + blockDim, ... of each loop, the row's scratch lives in shared memory, and a
        barrier after each loop makes its stores visible to the row's later statements."""
        kernel = self.kernel
        scratch = set(kernel.scratch)
        for k, acc in enumerate(K.accumulators(kernel.body)):
            self.acc_names[acc] = f"acc{k}"
            self.emit(f"{value_type(acc.dtype)} acc{k};")
        partials = {}
        for acc, _ in itertools.chain(*rows.values()):
            if acc.dtype not in partials:
                partials[acc.dtype] = K.Buffer(f"partial{len(partials)}", acc.dtype, WARPS)
        left = _shared_left(sum(b.size * b.dtype.itemsize for b in scratch), rows)
        bodies, caches = _row_caches(split, scratch, left if left >= 0 else SHARED_BYTES)
        held = _held_row(split, rows, bodies, scratch | set(caches))
        if held is None and left < 0:  # (the scratch alone can be held: `_row_loops`)
            bodies, caches = {}, []
            held = _held_row(split, rows, bodies, scratch)
        self.held = held
        for partial in partials.values():
            self.shared(partial.dtype, partial.name, partial.size)
        for b in kernel.scratch + caches:
            if held is None:
                self.shared(b.dtype, b.name, max(b.size, 1))
            else:  # (each thread's own: a held array's elements for its vectors, or alike)
                size = held.vectors * held.lanes if b in held.arrays else max(b.size, 1)
                self.emit(f"{memory_type(b.dtype)} {b.name}[{size}];")
        leaves = list(statements_in(split.body))
        read = {e.buffer for s in leaves for e in expressions(s) if isinstance(e, K.Load)}
        written = {s.buffer for s in leaves if isinstance(s, K.Store)}
        index = self.index_name(split.index)
        self.emit(
            f"for ({self.index_type} {index} = {_plus(split.start)}blockIdx.x; "
            f"{index} < {split.stop}; {index} += gridDim.x) {{"
        )
        outer = self.indent
        self.indent += "  "
        bases = itertools.count()
        since_loop: list = []  # (the row's statements after its last loop, whose barrier
        # orders the accesses before it)
        for statement in split.body:
            self.memo = {}
            since_loop = [] if isinstance(statement, K.Loop) else [*since_loop, statement]
            if _updates_in_place(statement, since_loop, scratch):
                # The row's element updated where it is (a donated argument hosting its
                # output): every thread has read it before one thread writes it, once.
                self.emit("__syncthreads();")
                self.emit("if (threadIdx.x == 0) {")
                self.indent += "  "
                self.statements([statement])
                self.indent = self.indent[:-2]
                self.emit("}")
                self.emit("__syncthreads();  // (later statements read what it wrote)")
                continue
            if not isinstance(statement, K.Loop) or held is not None and _alike(statement, rows):
                self.statements([statement])
                continue
            saved = []
            for acc, op in rows[statement]:
                base = f"base{next(bases)}"
                name = self.acc_names[acc]
                self.emit(f"const {value_type(acc.dtype)} {base} = {name};")
                self.emit(f"{name} = {constant_text(identity(op, acc.dtype), acc.dtype)};")
                saved.append(base)
            body = bodies.get(statement, statement.body)
            if held is not None and held.takes(statement):
                self.held_loop(statement, body, held)
            else:
                self.strided_row_loop(statement, body, scratch | set(caches))
            for (acc, op), base in zip(rows[statement], saved):
                self.share(acc, op, base, partials[acc.dtype])
            if saved:
                continue  # (a fold's barriers already order the loop's accesses)
            # Held, a thread meets only its own elements of the row's intermediates; other
            # buffers wait where another thread may read what the loop writes, or write what
            # it reads.
            stored = {s.buffer for s in statements_in(body) if isinstance(s, K.Store)}
            loaded = {e.buffer for s in statements_in(body) for e in expressions(s)
                      if isinstance(e, K.Load)}  # fmt: skip
            if held is None or ((stored & read) | (loaded & written)) - held.local:
                self.emit("__syncthreads();")
        self.indent = outer
        self.emit("}")
        params = [b for b in dict.fromkeys(kernel.buffers) if b not in scratch]
        width = max(loop.stop - loop.start for loop in rows)
        block = 0 if held is None else held.block
        return self.finished(params, split.stop - split.start, row_width=width, block=block)

    def strided_row_loop(self, loop: K.Loop, body: list, local: set) -> None:
        """A row's loop on the block's threads in turn: thread t takes iterations t,
        t + blockDim, ..., over 16-byte vectors first where the row allows
        (`row_vector_loop`)."""
        inner = self.index_name(loop.index)
        vectors = _row_vectors(loop, body, local)
        first = _plus(loop.start)
        if vectors is not None:  # (the scalar loop then takes what the vectors leave)
            first = f"{self.row_vector_loop(loop, body, inner, vectors)} + "
        # The stride is the launch's block, unknown to the compiler: unrolled, a thread keeps
        # four loads in flight rather than waiting on one at a time.
        self.emit("#pragma unroll 4")
        self.emit(
            f"for ({self.index_type} {inner} = {first}threadIdx.x; {inner} < "
            f"{loop.stop}; {inner} += blockDim.x) {{"
        )
        self.block(body)
        self.emit("}")

    def held_loop(self, loop: K.Loop, body: list, held: HeldRow) -> None:
        """A row's loop over the vectors of the row its thread holds: thread t takes vectors
        t, t + blockDim, ... (`held.vectors` of them, unrolled, so that its elements of the
        held arrays are registers); each buffer the body reads or writes at the vector's
        place moves as one 16-byte vector where its row is aligned (element by element where
        not, and in a vector the row ends inside), and the body runs once per lane."""
        k = next(self.names)
        lanes, width = held.lanes, loop.stop - loop.start
        found = _row_vectors(loop, body, held.local)
        vectors = found if found is not None and found.lanes == lanes else None
        starts = self.row_starts(loop, vectors.rows) if vectors is not None else {}
        stored = [s.buffer for s in body if isinstance(s, K.Store) and s.buffer in starts]
        stored = list(dict.fromkeys(stored))
        loaded = [b for b in starts if b not in stored]
        h, q, whole = f"h{k}", f"q{k}", f"whole{k}"
        tail = width % lanes != 0
        if starts:
            pointers = " | ".join(f"(unsigned long long){p}" for p in starts.values())
            self.emit(f"const bool aligned{k} = (({pointers}) & 15) == 0;")
        outer = self.indent
        self.emit("#pragma unroll")
        self.emit(f"for (int {h} = 0; {h} < {held.vectors}; ++{h}) {{")
        self.indent += "  "
        place = f"{h} * blockDim.x + threadIdx.x"
        self.emit(f"const {self.index_type} {q} = ({self.index_type})({place});")
        self.emit(f"if ({q} < {-(-width // lanes)}) {{  // (a guard, not a break: unrolled)")
        self.indent += "  "
        if starts:
            within = f" && {lanes} * {q} + {lanes} <= {width}" if tail else ""
            self.emit(f"const bool {whole} = aligned{k}{within};")

        def apart(assignment: str) -> None:  # a vector's move, element by element
            self.emit("else {")
            for lane in range(lanes):
                guard = f"if ({lanes} * {q} + {lane} < {width}) " if tail else ""
                self.emit(f"  {guard}{assignment.format(lane=lane)}")
            self.emit("}")

        for b in loaded:
            vector = f"fg_vector<{memory_type(b.dtype)}, {lanes}>"
            self.emit(f"{vector} {b.name}_v;")
            self.emit(
                f"if ({whole}) {b.name}_v = reinterpret_cast<const {vector}*>({starts[b]})[{q}];"
            )
            apart(f"{b.name}_v.lane[{{lane}}] = {starts[b]}[{lanes} * {q} + {{lane}}];")
        for b in stored:
            self.emit(f"fg_vector<{memory_type(b.dtype)}, {lanes}> {b.name}_v;")
        index = self.index_name(loop.index)
        accesses = vectors.accesses if vectors is not None else {}
        for lane in range(lanes):
            self.emit("{")
            self.indent += "  "
            self.emit(
                f"const {self.index_type} {index} = {_plus(loop.start)}{lanes} * {q} + {lane};"
            )
            if tail:
                self.emit(f"if ({index} < {loop.stop}) {{")
                self.indent += "  "
            self.lane = (lane, accesses, f"{lanes} * {h} + {lane}")
            self.statements(body)
            self.lane = None
            if tail:
                self.indent = self.indent[:-2]
                self.emit("}")
            self.indent = self.indent[:-2]
            self.emit("}")
        for b in stored:
            vector = f"fg_vector<{memory_type(b.dtype)}, {lanes}>"
            self.emit(f"if ({whole}) reinterpret_cast<{vector}*>({starts[b]})[{q}] = {b.name}_v;")
            apart(f"{starts[b]}[{lanes} * {q} + {{lane}}] = {b.name}_v.lane[{{lane}}];")
        self.indent = outer + "  "
        self.emit("}")
        self.indent = outer
        self.emit("}")

    def row_starts(self, loop: K.Loop, rows: dict) -> dict:
        """{buffer: the C pointer to the loop's first element of the buffer's row}."""
        starts = {}
        for b, row in rows.items():
            offset = self.index_literal(loop.start) if row is None else self.subscript(row)
            if row is not None and loop.start:
                offset = f"{offset} + {self.index_literal(loop.start)}"
            starts[b] = f"({b.name} + {offset})"
        return starts

    def row_vector_loop(self, loop: K.Loop, body: list, index: str, vectors: RowVectors) -> str:
        """A row's inner loop over 16-byte vectors, where its row of every buffer it reads or
        writes at the loop's index is 16-byte aligned: thread t takes vectors t, t + blockDim,
        ..., loads each such buffer's lanes at once, runs the body once per lane (folding
        its accumulators lane after lane) and stores each result vector at once. Returns the
        C expression of the first iteration the scalar loop after it takes (all of them
        where a row is not aligned)."""
        k = next(self.names)
        starts = self.row_starts(loop, vectors.rows)
        per_block = (f"q{k}", "threadIdx.x", "blockDim.x")
        return self.aligned_vectors(
            (loop, index, body), vectors.lanes, starts, vectors.accesses, per_block, f"aligned{k}"
        )

    def share(self, acc: K.Acc, op: str, base: str, partial: K.Buffer) -> None:
        """Every thread's partial fold of `acc` combined: each warp folds its lanes with
        shuffles (`warp_shuffle`) and posts its total to shared memory; after a barrier every
        thread folds the posts, in one order so that all reach the same total, into the value
        `acc` had before the loop (`base`). A second barrier keeps the posts until all have
        read them."""
        name, outer = self.acc_names[acc], self.indent
        self.warp_shuffle(acc, op)
        post = f"{partial.name}[threadIdx.x / 32] = {_to_memory(name, acc.dtype)};"
        self.emit(f"if (threadIdx.x % 32 == 0) {post}")
        self.emit("__syncthreads();")
        self.emit(f"{name} = {base};")
        self.emit("for (unsigned int warp = 0; warp < blockDim.x / 32; ++warp) {")
        self.indent += "  "
        self.memo = {}
        warp = K.Index("warp")
        self.index_names[warp] = f"({self.index_type})warp"
        self.emit(f"{name} = {self.value(K.binary(op, acc.read(), K.Load(partial, warp)))};")
        self.indent = outer
        self.emit("}")
        self.emit("__syncthreads();  // every thread has read the posts before the next fold")

    def halving_tree(self, acc: K.Acc, op: str, partial: K.Buffer) -> K.Index:
        """Each thread posts its partial fold of `acc` to shared memory, then halving steps
        fold the upper half into the lower down to 32 partials (blocks are a power of two
        threads, at least a warp). Returns the index naming the thread's own slot."""
        name, outer = self.acc_names[acc], self.indent
        lane, other = K.Index("lane"), K.Index("other")
        self.index_names[lane] = f"({self.index_type})threadIdx.x"
        self.index_names[other] = f"({self.index_type})(threadIdx.x + half)"
        self.emit(f"{partial.name}[threadIdx.x] = {_to_memory(name, acc.dtype)};")
        self.emit("__syncthreads();")
        self.emit("for (unsigned int half = blockDim.x / 2; half >= 32; half /= 2) {")
        self.indent += "  "
        self.emit("if (threadIdx.x < half) {")
        self.indent += "  "
        self.memo = {}
        pair = K.binary(op, K.Load(partial, lane), K.Load(partial, other))
        self.emit(f"{partial.name}[threadIdx.x] = {_to_memory(self.value(pair), acc.dtype)};")
        self.indent = outer + "  "
        self.emit("}")
        self.emit("__syncthreads();")
        self.indent = outer
        self.emit("}")
        return lane

    def warp_fold(self, acc: K.Acc, op: str, partial: K.Buffer, lane: K.Index) -> None:
        """In the first warp: `acc` takes the thread's slot of the last 32 partials and the
        warp folds them with shuffles; lane 0 ends with the total."""
        self.memo = {}
        self.emit(f"{self.acc_names[acc]} = {self.value(K.Load(partial, lane))};")
        self.warp_shuffle(acc, op)

    def warp_shuffle(self, acc: K.Acc, op: str) -> None:
        """Each warp folds its lanes' `acc` with shuffles, without barriers; lane 0 of each
        ends with its warp's total."""
        name, outer = self.acc_names[acc], self.indent
        self.emit("for (unsigned int offset = 16; offset > 0; offset /= 2) {")
        self.indent += "  "
        self.memo = {}
        # Every lane of the warp must reach the shuffle: it is a statement, never an operand
        # that a short-circuiting || or && could skip.
        self.emit(f"const {value_type(acc.dtype)} shuffled = fg_shfl_down({name}, offset);")
        shuffled = K.Acc("shuffled", acc.dtype)
        self.acc_names[shuffled] = "shuffled"
        self.emit(f"{name} = {self.value(K.binary(op, acc.read(), shuffled.read()))};")
        self.indent = outer
        self.emit("}")

    def block_reduction(self, acc: K.Acc, op: str, folds: list, rest: list):
        """A whole-array reduction on one block: each thread folds a strided share of each
        flattened loop nest into its own accumulator, then the block combines them in shared
        memory (a tree of halving steps down to 32: blocks are a power of two threads, at least
        a warp), the first warp folds the last 32 with shuffles, and thread 0 finishes with the
        initial value and the statements after the loops."""
        init, after = rest[0], rest[1:]
        name = self.acc_names[acc]
        partial = K.Buffer("partial", acc.dtype, MAX_BLOCK)
        self.shared(acc.dtype, "partial", MAX_BLOCK)
        self.emit(f"{name} = {constant_text(identity(op, acc.dtype), acc.dtype)};")
        outer = self.indent
        for k, (term, loops) in enumerate(folds):
            total = math.prod(loop.stop - loop.start for loop in loops)
            flat = f"flat{k}"
            self.emit(
                f"for ({self.index_type} {flat} = threadIdx.x; {flat} < {total}; "
                f"{flat} += blockDim.x) {{"
            )
            self.indent = outer + "  "
            stride = total
            for loop in loops:
                stride //= loop.stop - loop.start
                index = self.index_name(loop.index)
                self.emit(
                    f"const {self.index_type} {index} = {_plus(loop.start)}{flat} / {stride} % "
                    f"{loop.stop - loop.start};"
                )
            self.memo = {}
            folded = self.value(K.binary(op, acc.read(), term))
            self.emit(f"{name} = {folded};")
            self.indent = outer
            self.emit("}")
        lane = self.halving_tree(acc, op, partial)
        self.emit("if (threadIdx.x >= 32) return;")
        self.warp_fold(acc, op, partial, lane)
        self.emit("if (threadIdx.x != 0) return;")
        self.memo = {}
        self.emit(f"{name} = {self.value(K.binary(op, init.value, acc.read()))};")
        self.statements(after)


def _updates_in_place(statement, since_loop: list, scratch: set) -> bool:
    """Whether `statement`, between a row's loops, stores into memory that it or a statement
    since the row's last loop (`since_loop`, itself included) reads: made by every thread of
    the row's block, it would update the element once per thread, or change it under a
    thread still to read it. (What loops read, their barriers have ordered.)"""
    if not isinstance(statement, K.Store) or statement.buffer in scratch:
        return False
    return any(
        isinstance(e, K.Load) and e.buffer is statement.buffer
        for s in since_loop
        for e in expressions(s)
    )


def _row_caches(split: K.Loop, scratch: set, budget: int) -> tuple[dict, list[K.Buffer]]:
    """An input that several loops of a row read element by element at the same places is
    read from memory once: the first of those loops copies each element it reads into a
    shared array, and the later ones read that (a barrier follows every loop of a row, so
    the thread reading an element need not be the one that copied it: a loop over vectors
    gives another thread each element than a loop over elements). Returns {loop: its
    statements with those reads replaced}
    and the shared arrays, as many as `budget` bytes hold."""
    written = {s.buffer for s in statements_in(split.body) if isinstance(s, K.Store)}
    loops = [
        s
        for s in split.body
        if isinstance(s, K.Loop) and not any(isinstance(t, K.Loop) for t in s.body)
    ]
    uses: dict[K.Buffer, list] = {}
    for loop in loops:
        ranges: dict = {}
        for statement in loop.body:
            for e in expressions(statement):
                if not isinstance(e, K.Load) or e.buffer in written or e.buffer in scratch:
                    continue
                form = linear_in_loop(e.offset, loop, ranges)
                if form is not None and form[0] == 1:
                    start = substituted(e.offset, loop.index, K.const(loop.start, K.INDEX))
                    uses.setdefault(e.buffer, []).append((loop, e, start))
    replacements: dict[K.Loop, dict] = {}
    fills: dict[K.Loop, list] = {}
    caches = []
    for buffer, found in uses.items():
        first, _, start = found[0]
        span = (first.start, first.stop)
        same = [u for u in found if (u[0].start, u[0].stop) == span and K.same(u[2], start)]
        size = first.stop - first.start
        if len({id(u[0]) for u in same}) < 2 or size * buffer.dtype.itemsize > budget:
            continue
        budget -= size * buffer.dtype.itemsize
        cache = K.Buffer(f"row{len(caches)}", buffer.dtype, size)
        caches.append(cache)
        for loop, load, _ in same:
            position = K.binary("sub", loop.index, K.const(loop.start, K.INDEX))
            replacements.setdefault(loop, {})[id(load)] = K.Load(cache, position)
        position = K.binary("sub", first.index, K.const(first.start, K.INDEX))
        fills.setdefault(first, []).append(K.Store(cache, position, same[0][1]))
    bodies = {}
    for loop, replaced in replacements.items():
        bodies[loop] = fills.get(loop, []) + [statement_replaced(s, replaced) for s in loop.body]
    return bodies, caches


def _one_row(kernel: K.Kernel) -> K.Loop | None:
    """The kernel's outer loop where it runs once (a softmax or a sum over the last axis of
    an array of one row): no other iteration shares its memory, so its row may take a block
    (`_row_loops`), where it ran on one thread, folding thousands of terms in turn, as
    slowly as inaccurately (a float32 sum of 8,200 terms 15 times further from the exact one
    than the reference's)."""
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], K.Loop):
        return None
    loop = kernel.body[0]
    return loop if loop.stop - loop.start == 1 and not kernel.concurrent_loops else None


def _row_loops(split: K.Loop, scratch_bytes: int, scratch: list) -> dict | None:
    """{inner loop: its folds} when each row of `split` should run on a block: its loops may
    be shared by a block's threads (`shared_loop_folds`), they walk memory by one (or the rows
    are few: `FEW_STRIDED_ROWS`), they are long enough to keep a block busy (or the row's
    scratch is too big for one thread), and the scratch and the partial folds fit in shared
    memory, or the block's threads can hold the scratch (`_held_row`)."""
    loops = [s for s in split.body if isinstance(s, K.Loop)]
    if not loops:
        return None
    count = split.stop - split.start
    along_memory = all(walks_by_one(loop, set(scratch)) for loop in loops)
    if count > FEW_STRIDED_ROWS and not along_memory:
        return None
    width = max(loop.stop - loop.start for loop in loops)
    least = ROW_MIN_WIDTH_FEW_ROWS if along_memory and count < FEW_ROWS else ROW_MIN_WIDTH
    if width < least and scratch_bytes <= LOCAL_SCRATCH_BYTES:
        return None
    rows = {}
    for loop in loops:
        folds = shared_loop_folds(loop)
        if folds is None:
            return None
        rows[loop] = folds
    if _shared_left(scratch_bytes, rows) >= 0 or _held_row(split, rows, {}, set(scratch)):
        return rows
    return None


def _shared_left(scratch_bytes: int, rows: dict) -> int:
    """The bytes of shared memory a row's block has left beside its scratch and its folds'
    partial results (negative when they do not fit, or the scratch is over
    `SHARED_SCRATCH_BYTES`)."""
    if scratch_bytes > SHARED_SCRATCH_BYTES:
        return -1
    dtypes_folded = {acc.dtype for folds in rows.values() for acc, _ in folds}
    return SHARED_BYTES - scratch_bytes - WARPS * sum(map(memory_size, dtypes_folded))


@dataclass
class Product:
    """A kernel in a GEMM's form (`_product`)."""

    loops: tuple[K.Loop, K.Loop, K.Loop]  # over rows, columns and terms, each from 0
    parts: K.Loop | None  # a split product's parts (each its own tiles), from 0
    acc: K.Acc
    init: K.Const
    a: K.Expr  # a row's term: reads the row and term indices (and the part) only
    b: K.Expr  # a column's term: reads the term and column indices (and the part) only
    store: K.Store  # a result, from the sum: reads the row and column (and part) indices only
    middle: dict  # {index: a value inside its loop}, for `_moves_by_one`


def _product(kernel: K.Kernel) -> Product | None:
    """The kernel as a product when it is `[for p:] for r: for c: acc = init; for k: acc =
    acc + a * b; out[...] = f(acc)` (`parallel.product_nest`) with `a` free of c, `b` free of
    r, the store free of k and nothing read that the kernel writes: the form of a
    convolution's implicit GEMM (`schedule._conv_contraction`) and of a split one's parts
    (`parallel.split_products`)."""
    nest = product_nest(kernel)
    if nest is None:
        return None

    def reads(e, allowed) -> bool:
        found = list(K.nodes(e))
        indices = {n for n in found if isinstance(n, K.Index)}
        written = any(isinstance(n, K.Load) and n.buffer in kernel.outputs for n in found)
        held = any(isinstance(n, K.AccRead) for n in found)
        return indices <= allowed and not written and not held

    r, c, k = nest.rows.index, nest.columns.index, nest.terms.index
    part = set() if nest.parts is None else {nest.parts.index}
    if not (
        reads(nest.a, {r, k} | part)
        and reads(nest.b, {k, c} | part)
        and reads(nest.store.offset, {r, c} | part)
    ):
        return None
    value = list(K.nodes(nest.store.value))
    if not {n for n in value if isinstance(n, K.Index)} <= {r, c} | part:
        return None
    loops = (nest.rows, nest.columns, nest.terms)
    middle = {loop.index: loop.stop // 2 for loop in (*loops, *filter(None, [nest.parts]))}
    return Product(loops, nest.parts, nest.acc, nest.init, nest.a, nest.b, nest.store, middle)


def _moves_by_one(operand: K.Expr, place: K.Index, at: dict) -> bool:
    """Whether the operand's first load moves by one element as `place` does, around the
    point `at` (else, by the renderer's choice, neighbouring threads take neighbouring
    terms): so that neighbouring threads staging a tile read neighbouring elements."""
    loads = [n for n in K.nodes(operand) if isinstance(n, K.Load)]
    if not loads:
        return True
    offset = loads[-1].offset
    here = value_at(offset, at)
    there = value_at(offset, {**at, place: at[place] + 1})
    return here is not None and there is not None and there - here == 1


@dataclass
class HeldRow:
    """How the threads of a row's block hold the row's intermediates (`_held_row`)."""

    start: int  # the range of the loops holding them
    stop: int
    lanes: int  # elements of a vector
    block: int  # threads of the block
    vectors: int  # vectors of the row each thread takes: its elements of a held array,
    # `lanes * vectors`, are registers
    arrays: set  # the buffers held: the row's scratch and caches its loops index
    local: set  # the row's scratch and caches

    def takes(self, loop: K.Loop) -> bool:
        """Whether `loop` runs over the held vectors: its range is theirs, and no loop is
        inside it."""
        flat = all(isinstance(s, (K.Store, K.SetAcc)) for s in loop.body)
        return flat and (loop.start, loop.stop) == (self.start, self.stop)


def _held_row(split: K.Loop, rows: dict, bodies: dict, local: set) -> HeldRow | None:
    """How a row's block holds its intermediates (`local`: its scratch and caches) in its
    threads' registers: where every loop that indexes one walks one range, has no loop
    inside and reads or writes it only at its own iteration's element; where every other
    access of them is alike in every thread (a load in a loop at a place its index does not
    move, any access between loops or in a loop of one iteration that folds nothing, which
    every thread runs: a fold's total); and where each thread's part fits in `HELD_BYTES`.
    None otherwise, or when no loop indexes them."""
    arrays, spans, alike, moving = set(), set(), set(), {}
    for statement in split.body:
        if _alike(statement, rows):
            alike |= {b for s in statements_in([statement]) for b, _, _ in _accesses(s)} & local
            continue
        body = bodies.get(statement, statement.body)
        flat = all(isinstance(s, (K.Store, K.SetAcc)) for s in body)
        span = (statement.start, statement.stop)
        own_element = (1, -statement.start, -statement.start)
        for leaf in statements_in(body):
            for buffer, offset, is_store in _accesses(leaf):
                indices = {n for n in K.nodes(offset) if isinstance(n, K.Index)}
                if buffer not in local:
                    if statement.index in indices:
                        moving.setdefault(span, set()).add(buffer)
                elif statement.index not in indices:
                    if is_store:
                        return None  # (a store at one place: only some threads make it)
                    alike.add(buffer)
                elif flat and indices == {statement.index}:
                    if linear(offset, statement.index, {}) != own_element:
                        return None
                    arrays.add(buffer)
                    spans.add(span)
                else:
                    return None
    if not arrays or arrays & alike or len(spans) != 1:
        return None
    ((start, stop),) = spans
    sizes = [memory_size(b.dtype) for b in moving.get((start, stop), ())]
    lanes = 16 // max(sizes, default=4)
    count = -(-(stop - start) // lanes)
    vector_bytes = sum(lanes * memory_size(b.dtype) for b in arrays)
    per_thread = max(1, min(HELD_VECTORS, HELD_BYTES // vector_bytes))
    block = min(HELD_MAX_BLOCK, max(32, 1 << (-(-count // per_thread) - 1).bit_length()))
    vectors = -(-count // block)
    if vectors * vector_bytes > HELD_BYTES:
        return None
    return HeldRow(start, stop, lanes, block, vectors, arrays, local)


def _alike(statement, rows: dict) -> bool:
    """Whether every thread of a row's block runs `statement` alike: a statement between the
    row's loops, or a loop of one iteration that folds nothing."""
    if not isinstance(statement, K.Loop):
        return True
    return statement.stop - statement.start == 1 and not rows[statement]


def _accesses(statement) -> list[tuple[K.Buffer, K.Expr, bool]]:
    """(buffer, offset, whether a store) for each load and the store of a statement."""
    found = [(e.buffer, e.offset, False) for e in expressions(statement) if isinstance(e, K.Load)]
    if isinstance(statement, K.Store):
        found.append((statement.buffer, statement.offset, True))
    return found


@dataclass
class RowVectors:
    """How a row's inner loop runs over 16-byte vectors (`_row_vectors`)."""

    lanes: int
    rows: dict  # buffer -> the offset of its row (None: zero); its element i at row + i
    accesses: dict  # buffer -> the ids of the offsets that read or write it as lanes


def _row_vectors(loop: K.Loop, body: list, local: set) -> RowVectors | None:
    """The vectors of a row's inner loop whose body (`body`: stores and folds) reads or
    writes each buffer outside `local` (the row's scratch and caches, in shared memory) that
    moves with the loop's index at one row offset plus the index; writes each such buffer
    once and reads none it writes; and whose buffers have elements of one size, 2, 4 or 8
    bytes, over at least one vector. None otherwise: the loop runs element by element."""
    if not all(isinstance(s, (K.Store, K.SetAcc)) for s in body):
        return None
    index = loop.index
    rows: dict = {}
    accesses: dict = {}
    stored = []
    for statement in body:
        for buffer, offset, is_store in _accesses(statement):
            if buffer in local:
                continue
            if not any(n is index for n in K.nodes(offset)):
                if is_store:
                    return None  # (a store in place: its buffer is not a vector's)
                continue
            row = _row_offset(offset, index)
            if row is False or (buffer in rows and _key(rows[buffer]) != _key(row)):
                return None
            rows.setdefault(buffer, row)
            accesses.setdefault(buffer, set()).add(id(offset))
            if is_store:
                stored.append(buffer)
    if len(set(stored)) != len(stored):
        return None
    if any(isinstance(e, K.Load) and e.buffer in stored for s in body for e in expressions(s)):
        return None
    sizes = {memory_size(b.dtype) for b in rows}
    if len(sizes) != 1 or not sizes <= {2, 4, 8}:
        return None
    lanes = 16 // sizes.pop()
    if loop.stop - loop.start < lanes:
        return None
    return RowVectors(lanes, rows, accesses)


def _row_offset(offset: K.Expr, index: K.Index):
    """`row` when `offset` is `row + index` (None when it is `index`), `row` free of the
    index; False for any other form."""
    if offset is index:
        return None
    if isinstance(offset, K.Binary) and offset.op == "add":
        for row, other in ((offset.a, offset.b), (offset.b, offset.a)):
            if other is index and not any(n is index for n in K.nodes(row)):
                return row
    return False


def _key(e: K.Expr | None):
    """A structural key of index arithmetic, so that two equal row offsets built apart
    compare equal (other nodes by identity)."""
    if isinstance(e, K.Const):
        return ("const", e.value)
    if isinstance(e, K.Binary):
        return (e.op, _key(e.a), _key(e.b))
    return id(e)


def _int_indices(kernel: K.Kernel) -> bool:
    """Whether every index of `kernel` fits an int with room to spare: its buffers, its loops'
    bounds and the iterations of its loop nests all below `INT_INDEX_LIMIT` (offsets into
    buffers, and the steps of index arithmetic toward them, stay within those)."""
    buffers = kernel.buffers + kernel.scratch
    bounds = ranges_of(kernel.body, {}).values()
    return (
        max((b.size for b in buffers), default=0) < INT_INDEX_LIMIT
        and all(-INT_INDEX_LIMIT < first <= last + 1 < INT_INDEX_LIMIT for first, last in bounds)
        and work(kernel) < INT_INDEX_LIMIT
    )


def _plus(start: int) -> str:
    return f"{start} + " if start else ""


def _is_index_arithmetic(e: K.Expr) -> bool:
    """Offsets computed from loop indices and constants, and picked between by selects (a
    window's place inside an operand, or 0 outside): they stay near the buffers' sizes, so
    C's operators are exact for them in the kernel's index type."""
    if isinstance(e, K.Select) and e.dtype == K.INDEX:
        return _is_index(e.on_true) and _is_index(e.on_false)
    if not (isinstance(e, K.Binary) and e.dtype == K.INDEX):
        return False
    if e.op in ("div", "rem"):
        if not (isinstance(e.b, K.Const) and e.b.value > 0):
            return False
    elif e.op not in ("add", "sub", "mul"):
        return False
    return _is_index(e.a) and _is_index(e.b)


def _is_index(e: K.Expr) -> bool:
    """An index, an index constant, or index arithmetic."""
    return (
        isinstance(e, K.Index)
        or (isinstance(e, K.Const) and e.dtype == K.INDEX)
        or (_is_index_arithmetic(e))
    )


def _rounded(text: str, dtype: np.dtype, inexact: bool) -> str:
    """float16 and bfloat16 results are rounded to their type after every operation."""
    if dtype in HALVES and inexact:
        return f"fg_round_{'f16' if dtype == F16 else 'bf16'}({text})"
    return text


def _from_memory(element: str, dtype: np.dtype) -> str:
    if dtype == K.BOOL:
        return f"{element} != 0"
    if dtype in HALVES:
        return f"fg_from_{'f16' if dtype == F16 else 'bf16'}({element})"
    return element


def _to_memory(value: str, dtype: np.dtype) -> str:
    if dtype == K.BOOL:
        return f"(unsigned char){value}"
    if dtype in HALVES:
        return f"fg_to_{'f16' if dtype == F16 else 'bf16'}({value})"
    return value


def _indexed_loads(loop: K.Loop) -> list[K.Buffer]:
    """The buffers `loop`'s body loads at the loop's own index, in order."""
    found = [
        node.buffer
        for statement in loop.body
        for node in expressions(statement)
        if isinstance(node, K.Load) and node.offset is loop.index
    ]
    return list(dict.fromkeys(found))


def _vector_lanes(loop: K.Loop, kernel: K.Kernel) -> int:
    """How many elements of each buffer a 16-byte vector of an elementwise loop holds: 8, 4
    or 2 when the loop's body is stores at its own index into buffers it does not read there,
    the buffers it accesses at that index all have elements of one size (2, 4 or 8 bytes),
    there is no scratch or accumulator, and there is at least one vector of iterations;
    else 0."""
    if kernel.scratch or K.accumulators(kernel.body):
        return 0
    if not all(isinstance(s, K.Store) and s.offset is loop.index for s in loop.body):
        return 0
    loaded, stored = _indexed_loads(loop), [s.buffer for s in loop.body]
    if set(loaded) & set(stored) or len(set(stored)) != len(stored):
        return 0
    sizes = {memory_size(b.dtype) for b in loaded + stored}
    size = sizes.pop()
    if sizes or size not in (2, 4, 8):
        return 0
    lanes = 16 // size
    return lanes if loop.stop - loop.start >= lanes else 0


def memory_size(dtype: np.dtype) -> int:
    """Bytes of one element in memory (booleans are bytes, halves their 16 bits)."""
    return 1 if dtype == K.BOOL else 2 if dtype in HALVES else dtype.itemsize


def render_kernel(kernel: K.Kernel, name: str) -> CudaKernel:
    return _KernelWriter(kernel, name).render_kernel()


def module_source(functions: list[str]) -> str:
    """The prelude and the functions' texts, as one module."""
    return "\n\n".join([PRELUDE.strip(), *functions]) + "\n"


def addressed(kernel: CudaKernel, slots: dict) -> CudaKernel:
    """`kernel` reading the address of each buffer in `slots` from device memory as it starts,
    from the one-element slot that `slots` maps it to, rather than taking the address as a
    parameter. A replayed graph names its kernels' parameters once and for all; through a
    slot, each call points a graph's kernels at buffers of its own choosing (its results)."""
    params = [slots.get(b, b) for b in kernel.params]
    lines = [
        f"  {'const ' if const else ''}{memory_type(b.dtype)}* __restrict__ {b.name} = "
        f"({'const ' if const else ''}{memory_type(b.dtype)}*){slots[b].name}[0];"
        for b, const in zip(kernel.params, kernel.const_params)
        if b in slots
    ]
    return replace(
        kernel,
        name=f"{kernel.name}_addressed",
        params=params,
        const_params=[c or b in slots for b, c in zip(kernel.params, kernel.const_params)],
        body="\n".join([*lines, kernel.body]),
    )
