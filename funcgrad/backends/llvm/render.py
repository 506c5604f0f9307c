"""Render a scheduled program as one LLVM IR module (text).

Each kernel becomes a function looping over its buffers; `entry(ptr args)` runs the program's
steps: it calls the kernels, and runs cond, while and scan regions as branches and loops of
its own, so one call of `entry` runs the whole program. `args` holds the input pointers, the
output pointers and the arena's pointer, in that order.

Expressions are rendered once per statement (a DAG node used twice is one SSA value); LLVM's
optimizer then hoists loop invariants, merges repeated loads and vectorizes inner loops.
Transcendental functions are expanded into arithmetic by `funcgrad.compiler.mathlib`, so that
loops using them still vectorize; only lgamma, fmod and float64 erf/erfc call the C library.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import struct
from typing import NamedTuple

import numpy as np

from funcgrad import dtypes
from funcgrad.backends.llvm import blas, engine, pool, prefetch, tiles
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler import mathlib
from funcgrad.compiler.donation import carries_in_place
from funcgrad.compiler.fusion import CompileError
from funcgrad.compiler.lapack import FortranCall
from funcgrad.compiler.memory import MemoryPlan, constants, nbytes
from funcgrad.compiler.parallel import expressions, parallel_loop, statements_in, work
from funcgrad.compiler.schedule import (
    CONTROL_STEPS,
    CallbackStep,
    CondStep,
    GemmStep,
    KernelStep,
    Program,
    ScanStep,
    TileStep,
    WhileStep,
    visit,
)

BF16 = dtypes.bfloat16
F16 = dtypes.float16
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

# The global array of the Python callbacks' addresses, which the executable fills after loading
# the machine code: addresses of this process never appear in the module, so its machine code
# can be cached on disk and loaded by another process.
CALLBACK_TABLE = "funcgrad_callbacks"
# A profiled program's counters: for each thing it runs, nanoseconds and calls (`profiled`).
PROFILE_COUNTERS = "funcgrad_profile"
_PROFILE_CLOCK = """define internal i64 @fg_profile_clock() {
entry:
  %ts = alloca [2 x i64]
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts
  %p = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %p
  %sns = mul i64 %s, 1000000000
  %t = add i64 %sns, %ns
  ret i64 %t
}"""


def value_type(dtype: np.dtype) -> str:
    """The LLVM type of a value of `dtype` in registers."""
    if dtype == K.BOOL:
        return "i1"
    if dtype == BF16:
        return "i16"  # bfloat16 is carried as its bits and converted through float32
    if dtype == F16:
        return "half"
    if dtypes.is_narrow(dtype):
        return "i8"  # a narrow format is its byte (kernel_ir converts it)
    if dtype.kind == "f":
        return {4: "float", 8: "double"}[dtype.itemsize]
    return f"i{dtype.itemsize * 8}"


def memory_type(dtype: np.dtype) -> str:
    return "i8" if dtype == K.BOOL else value_type(dtype)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" and dtype != BF16 and not dtypes.is_narrow(dtype)


# Values LLVM knows nothing of: it cannot prove them never NaN (`_Function.nan_passed`).
_OPAQUE = (K.Load, K.AccRead, K.Bitcast)
# Operations that pass a NaN operand on as it is, a signaling one too.
_NAN_PASSING = ("neg", "abs", "sign", "floor", "ceil", "round_even", "round_away")


def _may_be_signaling(e: K.Expr) -> bool:
    """Whether `e` may be a signaling NaN: one read from memory or made of bits (arithmetic
    gives quiet NaNs), passed on by selects, sign changes, roundings, maxima and minima, and
    by the widening of a half (bfloat16 widens by shifting its bits; LLVM may compute a
    float16 maximum in half precision, on the unwidened operands)."""
    if isinstance(e, _OPAQUE):
        return True
    if isinstance(e, K.Cast):
        return e.x.dtype in dtypes.HALF_FLOATS and _may_be_signaling(e.x)
    if isinstance(e, K.Select):
        return _may_be_signaling(e.on_true) or _may_be_signaling(e.on_false)
    if isinstance(e, K.Unary):
        return e.op in _NAN_PASSING and _may_be_signaling(e.x)
    if isinstance(e, K.Binary):
        return e.op in ("max", "min") and (_may_be_signaling(e.a) or _may_be_signaling(e.b))
    return False


def constant_text(value, dtype: np.dtype) -> str:
    if dtype == K.BOOL:
        return "true" if value else "false"
    if dtype == BF16:
        return str(int(np.array(value, BF16).view(np.int16)))
    if dtype == F16:
        return f"0xH{int(np.array(value, F16).view(np.uint16)):04X}"
    if dtypes.is_narrow(dtype):
        return str(int(np.array(value, dtype).view(np.int8)))
    if dtype.kind == "f":
        # LLVM writes float constants as the double with the same value, in hex.
        as_double = float(np.array(value, dtype).astype(np.float64))
        return "0x{:016X}".format(struct.unpack("<Q", struct.pack("<d", as_double))[0])
    if dtype.kind == "u":
        return str(int(np.array(value, dtype).astype(dtype).view(f"i{dtype.itemsize}")))
    return str(int(value))


# Operations that call the C library function of the same name (float64; "f" appended for
# float32) where no expansion exists; rem is C's fmod.
_LIBM = {
    op: op
    for op in (
        "exp exp2 expm1 log log1p log10 log2 sin cos tan asin acos atan sinh cosh tanh asinh "
        "acosh atanh cbrt erf erfc lgamma pow atan2 nextafter"
    ).split()
} | {"rem": "fmod"}
_INTRINSIC_UNARY = {
    "floor": "floor",
    "ceil": "ceil",
    "round_even": "roundeven",
    "sqrt": "sqrt",
    "abs": "fabs",
}
_FLOAT_COMPARE = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_SIGNED_COMPARE = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_UNSIGNED_COMPARE = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}
_INT_ARITH = {"add": "add", "sub": "sub", "mul": "mul", "and": "and", "or": "or", "xor": "xor"}
_FLOAT_ARITH = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}


def _stores_with_trigonometry(body: list) -> bool:
    """Whether `body` is stores alone, computing some float trigonometric function."""
    if any(not isinstance(stmt, K.Store) for stmt in body):
        return False
    return any(
        isinstance(n, K.Unary) and n.op in mathlib.TRIGONOMETRIC and _is_float(n.dtype)
        for stmt in body
        for n in expressions(stmt)
    )


def _gemm_symbol(dtype: np.dtype) -> str:
    return blas.SGEMM if dtype == F32 else blas.DGEMM


def _leading_dimensions(step: GemmStep) -> tuple[int, int]:
    """The row strides of a GEMM's two operands as they are stored."""
    lda = max(step.m if step.transpose_lhs else step.k, 1)
    ldb = max(step.k if step.transpose_rhs else step.n, 1)
    return lda, ldb


def _gemm_call(step: GemmStep, rows, columns, a: str, b: str, c: str) -> str:
    """The library call computing `rows` x `columns` of `step`'s product from the operands
    at `a` and `b` into `c` (each a number or an IR value)."""
    dtype = step.out.dtype
    t = value_type(dtype)
    lda, ldb = _leading_dimensions(step)
    trans_a = blas.TRANS if step.transpose_lhs else blas.NO_TRANS
    trans_b = blas.TRANS if step.transpose_rhs else blas.NO_TRANS
    return (
        f"call void @{_gemm_symbol(dtype)}(i32 {blas.ROW_MAJOR}, i32 {trans_a}, i32 {trans_b}, "
        f"i64 {rows}, i64 {columns}, i64 {step.k}, {t} {constant_text(step.alpha, dtype)}, "
        f"ptr {a}, i64 {lda}, ptr {b}, i64 {ldb}, {t} {constant_text(step.beta, dtype)}, "
        f"ptr {c}, i64 {max(step.n, 1)})"
    )


class _Range(NamedTuple):
    """A parallel loop's iterations [start, stop), where no kernel loop is split."""

    start: int
    stop: int


class _Function:
    """Emits the instructions of one LLVM function."""

    def __init__(self, module: ModuleRenderer):
        self.module = module
        self.lines: list[str] = []
        self.names = itertools.count()
        self.block = "entry"
        self.memo: dict = {}
        self.acc_slots: dict = {}
        # Loop indices get this function's names, not the kernel IR's process-wide ones, so
        # that a program's text is the same in every process (the disk cache's key).
        self.index_names: dict[K.Index, str] = {}
        self.prologue: list[str] = []  # allocas, which belong in the entry block
        self.bounds: dict = {}  # a loop split across threads -> its chunk's (start, stop)
        self.streamed: set = set()  # a kernel's buffers in memory (not its scratch)
        # In a versioned loop's first version, the flags of the elements whose trigonometric
        # functions need the exact reduction (`versioned_loop`); None elsewhere.
        self.needs_exact: list | None = None

    def fresh(self, hint: str = "v") -> str:
        return f"%{hint}{next(self.names)}"

    def emit(self, text: str) -> None:
        self.lines.append("  " + text)

    def assign(self, text: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {text}")
        return name

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def new_label(self, hint: str) -> str:
        return f"{hint}{next(self.names)}"

    # -- expressions ------------------------------------------------------------------------

    def value(self, e: K.Expr) -> str:
        if isinstance(e, K.Const):
            return constant_text(e.value, e.dtype)
        key = id(e)
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1]
        name = self._render(e)
        self.memo[key] = (e, name)
        return name

    def _render(self, e: K.Expr) -> str:
        if isinstance(e, K.Index):
            return f"%{self.index_names[e]}"
        if isinstance(e, K.Load):
            pointer = self.element_pointer(e.buffer, e.offset)
            loaded = self.assign(f"load {memory_type(e.dtype)}, ptr {pointer}")
            if e.dtype == K.BOOL:
                return self.assign(f"icmp ne i8 {loaded}, 0")
            return loaded
        if isinstance(e, K.AccRead):
            return self.assign(f"load {value_type(e.dtype)}, ptr {self.acc_slots[e.acc]}")
        if isinstance(e, K.Lookup):
            pointer = self.assign(
                f"getelementptr inbounds {memory_type(e.dtype)}, "
                f"ptr {self.module.table(e.table, e.dtype)}, i64 {self.value(e.index)}",
                "p",
            )
            loaded = self.assign(f"load {memory_type(e.dtype)}, ptr {pointer}")
            return self.assign(f"icmp ne i8 {loaded}, 0") if e.dtype == K.BOOL else loaded
        if isinstance(e, K.Select):
            t = value_type(e.dtype)
            p, a, b = self.value(e.pred), self.value(e.on_true), self.value(e.on_false)
            return self.assign(f"select i1 {p}, {t} {a}, {t} {b}")
        if isinstance(e, K.Cast):
            return self.cast(self.value(e.x), e.x.dtype, e.dtype)
        if isinstance(e, K.Bitcast):
            src, dst = value_type(e.x.dtype), value_type(e.dtype)
            x = self.value(e.x)
            return x if src == dst else self.assign(f"bitcast {src} {x} to {dst}")
        if isinstance(e, K.Unary):
            return self.unary(e)
        if isinstance(e, K.Binary):
            return self.binary(e)
        raise TypeError(f"cannot render {e!r}")

    def element_pointer(self, buffer: K.Buffer, offset: K.Expr) -> str:
        base = self.module.pointer(self, buffer)
        return self.assign(
            f"getelementptr inbounds {memory_type(buffer.dtype)}, ptr {base}, i64 "
            f"{self.value(offset)}",
            "p",
        )

    def call(self, result_type: str, name: str, args: list[tuple[str, str]]) -> str:
        self.module.declare(name, result_type, [t for t, _ in args])
        arguments = ", ".join(f"{t} {v}" for t, v in args)
        return self.assign(f"call {result_type} @{name}({arguments})")

    def intrinsic(self, name: str, dtype: np.dtype, *xs: str) -> str:
        t = value_type(dtype)
        suffix = {"float": "f32", "double": "f64", "half": "f16"}.get(t, t)
        return self.call(t, f"llvm.{name}.{suffix}", [(t, x) for x in xs])

    def libm(self, op: str, dtype: np.dtype, *xs: str) -> str:
        if not _is_float(dtype) or dtype == F16 or op not in _LIBM:
            raise CompileError(f"the compiler has no {op} for {dtype.name}")
        t = value_type(dtype)
        name = _LIBM[op] + ("f" if dtype == F32 else "")
        return self.call(t, name, [(t, x) for x in xs])

    def nan_passed(self, operand: str, extremum: str, t: str) -> str:
        """A maximum's or minimum's operand where it is NaN, else the extremum. x86's code for a
        scalar maximum whose other operand LLVM proves never NaN (a constant, an integer
        converted) tests this one for quiet NaNs only (AVX-512's vfpclass), so max(1.0, sNaN)
        came out 1.0; the test here sees every NaN. (Quieting the operand first, with
        llvm.canonicalize, crashed LLVM's code generation for pairs of floats.)"""
        is_nan = self.assign(f"fcmp uno {t} {operand}, {operand}")
        return self.assign(f"select i1 {is_nan}, {t} {operand}, {t} {extremum}")

    def unary(self, e: K.Unary) -> str:
        op, dtype = e.op, e.x.dtype
        t = value_type(dtype)
        if self.needs_exact is not None and op in mathlib.TRIGONOMETRIC and _is_float(dtype):
            value, exact = mathlib.near_trig(op, e.x)
            self.needs_exact.append(self.value(exact))
            return self.value(value)
        if _is_float(dtype) and mathlib.handles(op, dtype):
            return self.value(mathlib.expand(op, e.x))
        x = self.value(e.x)
        if op == "neg":
            return (
                self.assign(f"fneg {t} {x}") if _is_float(dtype) else self.assign(f"sub {t} 0, {x}")
            )
        if op == "not":
            return self.assign(f"xor {t} {x}, {'true' if dtype == K.BOOL else -1}")
        if op == "popcount":
            return self.intrinsic("ctpop", dtype, x)
        if op == "abs" and not _is_float(dtype):
            if dtype.kind == "u":
                return x
            negative = self.assign(f"icmp slt {t} {x}, 0")
            negated = self.assign(f"sub {t} 0, {x}")
            return self.assign(f"select i1 {negative}, {t} {negated}, {t} {x}")
        if op == "sign":
            return self.sign(x, dtype)
        if not _is_float(dtype):
            raise CompileError(f"the compiler has no {op} for {dtype.name}")
        if op in _INTRINSIC_UNARY:
            return self.intrinsic(_INTRINSIC_UNARY[op], dtype, x)
        if op == "is_finite":
            magnitude = self.intrinsic("fabs", dtype, x)
            return self.assign(f"fcmp olt {t} {magnitude}, {constant_text(np.inf, dtype)}")
        if op == "rsqrt":
            root = self.intrinsic("sqrt", dtype, x)
            return self.assign(f"fdiv {t} {constant_text(1, dtype)}, {root}")
        if op == "round_away":
            whole = self.intrinsic("trunc", dtype, x)
            fraction = self.intrinsic("fabs", dtype, self.assign(f"fsub {t} {x}, {whole}"))
            half_or_more = self.assign(f"fcmp oge {t} {fraction}, {constant_text(0.5, dtype)}")
            one = self.intrinsic("copysign", dtype, constant_text(1, dtype), x)
            away = self.assign(f"fadd {t} {whole}, {one}")
            return self.assign(f"select i1 {half_or_more}, {t} {away}, {t} {whole}")
        return self.libm(op, dtype, x)

    def sign(self, x: str, dtype: np.dtype) -> str:
        t = value_type(dtype)
        if _is_float(dtype):
            zero, one, minus = (constant_text(v, dtype) for v in (0, 1, -1))
            positive = self.assign(f"fcmp ogt {t} {x}, {zero}")
            negative = self.assign(f"fcmp olt {t} {x}, {zero}")
            low = self.assign(f"select i1 {negative}, {t} {minus}, {t} {x}")
            return self.assign(f"select i1 {positive}, {t} {one}, {t} {low}")
        if dtype == K.BOOL or dtype.kind == "u":
            nonzero = self.assign(f"icmp ne {t} {x}, 0")
            return self.assign(f"zext i1 {nonzero} to {t}") if t != "i1" else nonzero
        positive = self.assign(f"icmp sgt {t} {x}, 0")
        negative = self.assign(f"icmp slt {t} {x}, 0")
        low = self.assign(f"select i1 {negative}, {t} -1, {t} 0")
        return self.assign(f"select i1 {positive}, {t} 1, {t} {low}")

    def binary(self, e: K.Binary, flags: str = "") -> str:
        op, dtype = e.op, e.a.dtype
        t = value_type(dtype)
        if _is_float(dtype) and mathlib.handles(op, dtype):
            return self.value(mathlib.expand_binary(op, e.a, e.b))
        a, b = self.value(e.a), self.value(e.b)
        if op in K.COMPARISONS:
            if _is_float(dtype):
                return self.assign(f"fcmp {_FLOAT_COMPARE[op]} {t} {a}, {b}")
            table = _SIGNED_COMPARE if dtype.kind == "i" else _UNSIGNED_COMPARE
            return self.assign(f"icmp {table[op]} {t} {a}, {b}")
        if _is_float(dtype):
            if op in _FLOAT_ARITH:
                # A product and a sum may fuse into one rounding (both need `contract`), unless
                # the kernel asks for this one rounded on its own. Half precision computes in
                # float32 rounded back at every operation, as the reference rounds; LLVM
                # shrinks such operations to half ones where the CPU has them (AVX512-FP16),
                # and must not then fuse a product into a sum with one rounding.
                half = any(isinstance(v, K.Cast) and v.x.dtype == F16 for v in (e.a, e.b))
                if op != "div" and e.contract and not half:
                    flags = "contract " + flags
                return self.assign(f"{_FLOAT_ARITH[op]} {flags}{t} {a}, {b}")
            if op in ("max", "min"):
                # IEEE maximum/minimum: NaN wins (as in the reference), -0 < +0; they
                # vectorize, reductions included.
                extremum = self.intrinsic("maximum" if op == "max" else "minimum", dtype, a, b)
                for operand, text, other in ((e.a, a, e.b), (e.b, b, e.a)):
                    if _may_be_signaling(operand) and not isinstance(other, _OPAQUE):
                        extremum = self.nan_passed(text, extremum, t)
                return extremum
            return self.libm(op, dtype, a, b)
        if dtype == K.BOOL and op in ("max", "min", "add", "mul"):
            op = {"max": "or", "min": "and", "add": "or", "mul": "and"}[op]
        if op in _INT_ARITH:
            return self.assign(f"{_INT_ARITH[op]} {t} {a}, {b}")
        signed = dtype.kind == "i"
        if op in ("max", "min"):
            pred = ("s" if signed else "u") + ("ge" if op == "max" else "le")
            keep_a = self.assign(f"icmp {pred} {t} {a}, {b}")
            return self.assign(f"select i1 {keep_a}, {t} {a}, {t} {b}")
        if op in ("div", "rem"):
            return self.integer_division(op, e.b, a, b, dtype)
        bits = dtype.itemsize * 8
        in_range = self.assign(f"icmp ult {t} {b}, {bits}")
        if op == "shl":
            amount = self.assign(f"select i1 {in_range}, {t} {b}, {t} 0")
            shifted = self.assign(f"shl {t} {a}, {amount}")
            return self.assign(f"select i1 {in_range}, {t} {shifted}, {t} 0")
        if op == "shr_logical":
            amount = self.assign(f"select i1 {in_range}, {t} {b}, {t} 0")
            shifted = self.assign(f"lshr {t} {a}, {amount}")
            return self.assign(f"select i1 {in_range}, {t} {shifted}, {t} 0")
        if op == "shr_arith":
            amount = self.assign(f"select i1 {in_range}, {t} {b}, {t} {bits - 1}")
            return self.assign(f"ashr {t} {a}, {amount}")
        raise CompileError(f"the compiler has no {op} for {dtype.name}")

    def integer_division(self, op: str, divisor: K.Expr, a: str, b: str, dtype: np.dtype) -> str:
        """C division and remainder, with the reference backend's x / 0 = x % 0 = 0 and
        MIN / -1 = MIN (no trap)."""
        t = value_type(dtype)
        signed = dtype.kind == "i"
        instruction = ("s" if signed else "u") + op
        if isinstance(divisor, K.Const) and divisor.value not in (0, -1):
            return self.assign(f"{instruction} {t} {a}, {b}")
        zero = self.assign(f"icmp eq {t} {b}, 0")
        unsafe = zero
        if signed:
            minus_one = self.assign(f"icmp eq {t} {b}, -1")
            unsafe = self.assign(f"or i1 {zero}, {minus_one}")
        safe_b = self.assign(f"select i1 {unsafe}, {t} 1, {t} {b}")
        result = self.assign(f"{instruction} {t} {a}, {safe_b}")
        if signed:
            # x / -1 is -x (wrapping), x % -1 is 0.
            special = self.assign(f"sub {t} 0, {a}") if op == "div" else "0"
            result = self.assign(f"select i1 {minus_one}, {t} {special}, {t} {result}")
        return self.assign(f"select i1 {zero}, {t} 0, {t} {result}")

    def cast(self, x: str, src: np.dtype, dst: np.dtype) -> str:
        if src == dst:
            return x
        if src == BF16:
            return self.cast(self.bf16_to_f32(x), F32, dst)
        if dst == BF16:  # through float32, as the reference (ml_dtypes) converts
            return self.f32_to_bf16(self.cast(x, src, F32) if src != F32 else x)
        if {src, dst} == {F16, F64}:
            # Through float32 (the direct conversions are library calls the JIT cannot link);
            # rounding to odd first keeps the narrowing to half correctly rounded.
            if src == F16:
                return self.assign(f"fpext float {self.cast(x, F16, F32)} to double")
            return self.assign(f"fptrunc float {self.f64_to_f32_odd(x)} to half")
        s, d = value_type(src), value_type(dst)
        if dst == K.BOOL:
            if _is_float(src):
                return self.assign(f"fcmp une {s} {x}, {constant_text(0, src)}")
            return self.assign(f"icmp ne {s} {x}, 0")
        if src == K.BOOL:
            return (
                self.assign(f"uitofp i1 {x} to {d}")
                if _is_float(dst)
                else self.assign(f"zext i1 {x} to {d}")
            )
        if _is_float(src) and _is_float(dst):
            grow = src.itemsize < dst.itemsize
            return self.assign(f"{'fpext' if grow else 'fptrunc'} {s} {x} to {d}")
        if _is_float(src):
            if src == F16:
                x, src = self.assign(f"fpext half {x} to float"), F32
            return self.saturating_conversion(x, src, dst)
        if _is_float(dst):
            instruction = "sitofp" if src.kind == "i" else "uitofp"
            if dst == F16:
                wide = self.assign(f"{instruction} {s} {x} to float")
                return self.assign(f"fptrunc float {wide} to half")
            return self.assign(f"{instruction} {s} {x} to {d}")
        if src.itemsize == dst.itemsize:
            return x
        if src.itemsize > dst.itemsize:
            return self.assign(f"trunc {s} {x} to {d}")
        return self.assign(f"{'sext' if src.kind == 'i' else 'zext'} {s} {x} to {d}")

    def saturating_conversion(self, x: str, src: np.dtype, dst: np.dtype) -> str:
        """Float to integer toward zero, out-of-range values saturated and NaN to 0 (LLVM's
        fptosi.sat), written as compares, selects and a plain conversion, which vectorize:
        LLVM converted the saturating intrinsic's vectors one lane at a time (a float32 to
        int32 map on 2^20 elements: 0.85 -> 0.31 ms, one thread)."""
        s, d = value_type(src), value_type(dst)
        info = np.iinfo(dst)
        low, past_high = float(info.min), float(info.max) + 1  # (powers of two, or 0: exact)
        below = self.assign(f"fcmp olt {s} {x}, {constant_text(low, src)}")
        above = self.assign(f"fcmp oge {s} {x}, {constant_text(past_high, src)}")
        unordered = self.assign(f"fcmp uno {s} {x}, {x}")
        zero = constant_text(0, src)
        clamped = self.assign(f"select i1 {below}, {s} {constant_text(low, src)}, {s} {x}")
        clamped = self.assign(f"select i1 {above}, {s} {zero}, {s} {clamped}")
        clamped = self.assign(f"select i1 {unordered}, {s} {zero}, {s} {clamped}")
        instruction = "fptosi" if dst.kind == "i" else "fptoui"
        converted = self.assign(f"{instruction} {s} {clamped} to {d}")
        return self.assign(f"select i1 {above}, {d} {info.max}, {d} {converted}")

    def f64_to_f32_odd(self, x: str) -> str:
        """float64 to float32 rounding to odd: truncate toward zero, and set the last bit when
        anything was dropped. A second rounding to a narrower type is then correct."""
        nearest = self.assign(f"fptrunc double {x} to float")
        back = self.assign(f"fpext float {nearest} to double")
        wide = self.intrinsic("fabs", F64, back)
        magnitude = self.intrinsic("fabs", F64, x)
        overshot = self.assign(f"fcmp ogt double {wide}, {magnitude}")
        bits = self.assign(f"bitcast float {nearest} to i32")
        toward_zero = self.assign(f"sub i32 {bits}, {self.assign(f'zext i1 {overshot} to i32')}")
        inexact = self.assign(f"fcmp one double {back}, {x}")
        odd = self.assign(f"or i32 {toward_zero}, {self.assign(f'zext i1 {inexact} to i32')}")
        return self.assign(f"bitcast i32 {odd} to float")

    def bf16_to_f32(self, x: str) -> str:
        wide = self.assign(f"zext i16 {x} to i32")
        shifted = self.assign(f"shl i32 {wide}, 16")
        return self.assign(f"bitcast i32 {shifted} to float")

    def f32_to_bf16(self, x: str) -> str:
        """Round to nearest even; NaN stays a (quiet) NaN."""
        bits = self.assign(f"bitcast float {x} to i32")
        lsb = self.assign(f"and i32 {self.assign(f'lshr i32 {bits}, 16')}, 1")
        bias = self.assign(f"add i32 {lsb}, 32767")
        rounded = self.assign(f"lshr i32 {self.assign(f'add i32 {bits}, {bias}')}, 16")
        is_nan = self.assign(f"fcmp uno float {x}, {x}")
        quiet = self.assign(f"or i32 {self.assign(f'lshr i32 {bits}, 16')}, 64")
        chosen = self.assign(f"select i1 {is_nan}, i32 {quiet}, i32 {rounded}")
        return self.assign(f"trunc i32 {chosen} to i16")

    # -- statements ---------------------------------------------------------------------------

    def statements(self, body: list) -> None:
        for stmt in body:
            self.memo = {}
            if isinstance(stmt, K.Loop):
                innermost = not any(isinstance(inner, K.Loop) for inner in stmt.body)
                start, stop = self.bounds.get(stmt, (stmt.start, stmt.stop))
                if innermost and self.module.versioned(stmt.body):
                    self.versioned_loop(stmt, start, stop)
                    continue
                self.index_names[stmt.index] = self.new_label("i")
                self.loop(
                    self.index_names[stmt.index],
                    start,
                    stop,
                    lambda s=stmt: self.loop_body(s),
                    hint=self.module.innermost_hint(stmt) if innermost else None,
                )
            elif isinstance(stmt, K.Store):
                pointer, t, value = self.value_to_store(stmt)
                self.emit(f"store {t} {value}, ptr {pointer}")
            elif isinstance(stmt, K.SetAcc):
                value = self.accumulate(stmt)
                slot = self.acc_slots[stmt.acc]
                self.emit(f"store {value_type(stmt.acc.dtype)} {value}, ptr {slot}")
            else:
                raise TypeError(f"cannot render {stmt!r}")

    def loop_body(self, loop: K.Loop) -> None:
        ahead = prefetch.next_rows(loop, self.streamed)
        if ahead is None:
            self.statements(loop.body)
            return
        second_pass, spans = ahead
        k = next(k for k, s in enumerate(loop.body) if s is second_pass)
        self.statements(loop.body[:k])
        self.memo = {}
        for span in spans:
            self.prefetch(span)
        self.statements(loop.body[k:])

    def prefetch(self, span: prefetch.Span) -> None:
        """Ask for `span`'s cache lines (a hint: an address outside the buffer, past the
        last row, is never touched, so the pointer needs no `inbounds`)."""
        self.module.declare("llvm.prefetch.p0", "void", ["ptr", "i32", "i32", "i32"])
        buffer = self.module.pointer(self, span.buffer)
        start = self.value(span.start)
        base = self.assign(
            f"getelementptr {memory_type(span.buffer.dtype)}, ptr {buffer}, i64 {start}"
        )
        line = self.new_label("i")

        def fetch():
            offset = self.assign(f"mul i64 %{line}, {prefetch.LINE}")
            address = self.assign(f"getelementptr i8, ptr {base}, i64 {offset}")
            # a read, kept in every cache level, of data
            self.emit(f"call void @llvm.prefetch.p0(ptr {address}, i32 0, i32 3, i32 1)")

        self.loop(line, 0, span.lines, fetch)

    def accumulate(self, stmt: K.SetAcc) -> str:
        """A running sum or product may be reassociated (so that it vectorizes)."""
        e = stmt.value
        if (
            isinstance(e, K.Binary)
            and e.op in ("add", "mul")
            and _is_float(e.dtype)
            and isinstance(e.a, K.AccRead)
            and e.a.acc is stmt.acc
        ):
            return self.binary(e, flags="reassoc nsz ")
        return self.value(e)

    def versioned_loop(self, loop: K.Loop, start, stop) -> None:
        """An innermost loop computing trigonometric functions, run in chunks of
        VERSION_CHUNK iterations: each chunk first with the Cody-Waite reduction alone, its
        elements' flags of needing the exact one or-ed together (a reduction the vectorizer
        keeps), then, only where one does, again with the exact reduction, which writes the
        same places (`ModuleRenderer.versioned`: the loop reads nothing it writes). Both
        reductions run for every element otherwise, as a vectorized loop cannot branch per
        element: 1.6x float32's time, 2.5x float64's, for arguments that almost never need
        the second (past 2^30 in float32, 2^20 in float64)."""
        chunk, flag = self.new_label("c"), self.fresh("exact")
        self.prologue.append(f"  {flag} = alloca i1")

        def one_chunk():
            after = self.assign(f"add i64 %{chunk}, {VERSION_CHUNK}")
            inside = self.assign(f"icmp slt i64 {after}, {stop}")
            end = self.assign(f"select i1 {inside}, i64 {after}, i64 {stop}")
            self.emit(f"store i1 false, ptr {flag}")
            self.version(loop, f"%{chunk}", end, flag)
            exact, done = self.new_label("exact"), self.new_label("chunked")
            needed = self.assign(f"load i1, ptr {flag}")
            self.emit(f"br i1 {needed}, label %{exact}, label %{done}")
            self.label(exact)
            self.version(loop, f"%{chunk}", end, None)
            self.emit(f"br label %{done}")
            self.label(done)

        self.loop(chunk, start, stop, one_chunk, step=VERSION_CHUNK)

    def versioned_statements(self, body: list) -> None:
        """A kernel's stores outside any loop (a loop body's scalars, each iteration)
        computing trigonometric functions: their values first with the Cody-Waite reduction
        alone, then, only where an argument needs the exact one, again with it, and stored
        once: a branch the processor predicts, where the two reductions and a select put
        both on the iteration's critical path (float32 cos iterated in a loop: 28 -> 17 ns
        a step)."""
        self.needs_exact = []
        near = self.values_to_store(body)
        needed = "false"
        for each in self.needs_exact:
            needed = self.assign(f"or i1 {needed}, {each}")
        self.needs_exact = None
        near_end = self.block
        exact, done = self.new_label("exact"), self.new_label("versioned")
        self.emit(f"br i1 {needed}, label %{exact}, label %{done}")
        self.label(exact)
        exactly = self.values_to_store(body)
        exact_end = self.block
        self.emit(f"br label %{done}")
        self.label(done)
        for (pointer, t, first), (_, _, second) in zip(near, exactly):
            value = self.assign(f"phi {t} [{first}, %{near_end}], [{second}, %{exact_end}]")
            self.emit(f"store {t} {value}, ptr {pointer}")

    def values_to_store(self, body: list) -> list[tuple[str, str, str]]:
        """`value_to_store` of each store of `body`, rendered, not stored."""
        stores = []
        for stmt in body:
            self.memo = {}
            stores.append(self.value_to_store(stmt))
        return stores

    def value_to_store(self, stmt: K.Store) -> tuple[str, str, str]:
        """(pointer, memory type, value) of a store (a bool as a byte)."""
        pointer = self.element_pointer(stmt.buffer, stmt.offset)
        value = self.value(stmt.value)
        if stmt.buffer.dtype == K.BOOL:
            value = self.assign(f"zext i1 {value} to i8")
        return pointer, memory_type(stmt.buffer.dtype), value

    def version(self, loop: K.Loop, start: str, stop: str, flag: str | None) -> None:
        """One version of a versioned loop over [start, stop): the near one, or-ing its
        elements' flags into `flag`, or (no flag) the exact one."""
        self.memo = {}
        index = self.index_names[loop.index] = self.new_label("i")

        def body():
            self.needs_exact = [] if flag is not None else None
            self.statements(loop.body)
            if flag is not None:
                needed = self.assign(f"load i1, ptr {flag}")
                for each in self.needs_exact:
                    needed = self.assign(f"or i1 {needed}, {each}")
                self.emit(f"store i1 {needed}, ptr {flag}")
            self.needs_exact = None

        self.loop(index, start, stop, body, hint=self.module.innermost_hint(loop))

    def loop(self, index: str, start, stop, body, hint: str | None = None, step: int = 1) -> None:
        """for index in [start, stop) by `step`: body(), with the loop metadata `hint` if
        given."""
        header, inner, latch, done = (self.new_label(h) for h in ("head", "body", "latch", "done"))
        before = self.block
        self.emit(f"br label %{header}")
        self.label(header)
        self.emit(f"%{index} = phi i64 [{start}, %{before}], [%{index}.next, %{latch}]")
        more = self.assign(f"icmp slt i64 %{index}, {stop}")
        self.emit(f"br i1 {more}, label %{inner}, label %{done}")
        self.label(inner)
        body()
        self.emit(f"br label %{latch}")
        self.label(latch)
        self.emit(f"%{index}.next = add nuw nsw i64 %{index}, {step}")
        self.emit(f"br label %{header}" + (f", !llvm.loop {hint}" if hint else ""))
        self.label(done)


# Kernels with fewer innermost iterations than this run on one thread: starting a thread costs
# about as much as this much work.
PARALLEL_WORK = 1 << 16
# Products of at least this many multiply-adds run as blocks on the pool, in functions named
# GEMM_BLOCKS...; smaller ones are one library call.
GEMM_SPLIT_WORK = 1 << 20
GEMM_BLOCKS = "gemm_blocks"
# The library starts threads of its own for a product of more multiply-adds than this.
LIBRARY_THREAD_WORK = 1 << 18
# LAPACK calls on matrices of at most this many elements run on one thread: the library's
# threads meet at barriers there too, and under load they stalled each other (a Cholesky
# factor of 128x128 7 ms, 0.1-0.6 ms on one thread; 256x256 23 ms against 0.6-3.7) while
# quiet they gain little on so small a matrix. Larger ones keep the library's threads.
SMALL_DECOMPOSITION = 512 * 512
# The first line of a program whose executable turns the library's own threads off while it
# runs (`ModuleRenderer.gemm` says why).
LIBRARY_THREADS_OFF = "; the library's own threads are off while this program runs"

# Iterations of a versioned loop's chunk (`_Function.versioned_loop`): enough to fill the
# vectorized loop; a chunk with one large argument runs again in full.
VERSION_CHUNK = 256

# Innermost loops of at least INTERLEAVE_TRIPS iterations run several vector iterations at
# once: 4 (measured on AVX2: softmax, layernorm, sums and GELU on 2^24 elements 10-20% faster
# than 1, 8 slower again, spilling registers), or 2 where the arithmetic transcendental
# functions expand to holds more than INTERLEAVE_CONSTANTS distinct constants: with four
# chains of temporaries beside them they spill registers (2^20 float32 erf: 0.54 ms at 4,
# 0.34 at 2; float64 tanh 1.53, 1.41; lgamma 6.9, 6.1; float32 sin and cos 3-5% slower,
# the one loss measured). None where the body has more expression nodes than
# INTERLEAVE_MAX_SIZE, transcendental functions counted as one: one iteration holds
# independent work enough, and interleaving would double LLVM's time (a chain of 5,000
# elementwise ops: 1.2 s -> 2.4 s).
INTERLEAVE = 4
INTERLEAVE_TRIPS = 256
INTERLEAVE_MAX_SIZE = 64
INTERLEAVE_CONSTANTS = 32
# Innermost loops of at most this many iterations are unrolled whole (a pooling window's, a
# short row's): the loop around them then vectorizes with strided loads, where they ran one
# element at a time (one thread, float32: a 2x2 max pool over 32x64x56x56 8.2 -> 2.4 ms, NHWC
# 8.8 -> 2.8, 3x3 stride 2 40 -> 7.5, 4x4 3.0 -> 0.7; over 2^20 rows of 4, max 3.4 -> 1.0 ms,
# softmax 12.2 -> 2.5; sums of rows of 5 2.8 -> 1.4). At 16, per-example gradients of a small
# MLP ran 1.7x and a convolutional step 1.2x slower (their rows then went across with gathers).
UNROLLED_WHOLE = 8


def _interleave(body: list) -> int:
    """How many vector iterations of a long innermost loop with this body run at once."""
    seen, constants = set(), set()
    for stmt in body:
        for node in expressions(stmt):
            seen.add(id(node))
            if len(seen) > INTERLEAVE_MAX_SIZE:
                return 1
            constants |= _constants_rendered(node)
    return INTERLEAVE if len(constants) <= INTERLEAVE_CONSTANTS else INTERLEAVE // 2


def _constants_rendered(node: K.Expr) -> frozenset:
    """The constants a kernel node renders with: its own, or its expansion's (a
    transcendental function's)."""
    if isinstance(node, K.Const):
        return frozenset([(node.value, node.dtype.str)])
    if isinstance(node, (K.Unary, K.Binary)) and _is_float(node.dtype):
        dtype = node.x.dtype if isinstance(node, K.Unary) else node.a.dtype
        if mathlib.handles(node.op, dtype):
            return _expansion_constants(node.op, dtype, isinstance(node, K.Binary))
    return frozenset()


@functools.cache
def _expansion_constants(op: str, dtype: np.dtype, binary: bool) -> frozenset:
    leaf = K.cast(K.fresh_index(), dtype)
    expanded = mathlib.expand_binary(op, leaf, leaf) if binary else mathlib.expand(op, leaf)
    return frozenset().union(*(_constants_rendered(node) for node in K.nodes(expanded)))


def _chunk_function(name: str, num_buffers: int) -> str:
    """`ptr name.chunk(ptr task)`, a thread's start routine: task = {buffer table, lo, hi}."""
    lines = [f"define internal ptr @{name}.chunk(ptr %task) #0 {{", "entry:"]
    lines.append("  %table = load ptr, ptr %task")
    lines.append("  %lo.at = getelementptr i8, ptr %task, i64 8")
    lines.append("  %lo = load i64, ptr %lo.at")
    lines.append("  %hi.at = getelementptr i8, ptr %task, i64 16")
    lines.append("  %hi = load i64, ptr %hi.at")
    args = []
    for k in range(num_buffers):
        lines.append(f"  %b{k}.at = getelementptr ptr, ptr %table, i64 {k}")
        lines.append(f"  %b{k} = load ptr, ptr %b{k}.at")
        args.append(f"ptr %b{k}")
    args += ["i64 %lo", "i64 %hi"]
    lines.append(f"  call void @{name}({', '.join(args)})")
    lines.append("  ret ptr null")
    lines.append("}")
    return "\n".join(lines)


# parallel_for(chunk, table, start, stop, threads): splits [start, stop) into `threads`
# contiguous chunks (at most one per iteration), runs the first on this thread and the others
# on new POSIX threads, and joins them. A thread that cannot be started runs its chunk here.
# Attribute group #1 optimizes it for size: vectorizing and unrolling its loops over a few
# threads would only cost compile time (about 15 ms per module).
PARALLEL_FOR = """define internal void @parallel_for(
    ptr %chunk, ptr %table, i64 %start, i64 %stop, i64 %threads) #1 {
entry:
  %count = sub i64 %stop, %start
  %few = icmp slt i64 %threads, 1
  %t = select i1 %few, i64 1, i64 %threads
  %over = icmp sgt i64 %t, %count
  %n = select i1 %over, i64 %count, i64 %t
  %tasks = alloca { ptr, i64, i64 }, i64 %n
  %handles = alloca i64, i64 %n
  %started = alloca i8, i64 %n
  br label %spawn.head
spawn.head:
  %i = phi i64 [ 1, %entry ], [ %i.next, %spawn.next ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %spawn.body, label %own
spawn.body:
  %task = getelementptr { ptr, i64, i64 }, ptr %tasks, i64 %i
  call void @chunk_bounds(ptr %task, ptr %table, i64 %start, i64 %count, i64 %i, i64 %n)
  %handle = getelementptr i64, ptr %handles, i64 %i
  %rc = call i32 @pthread_create(ptr %handle, ptr null, ptr %chunk, ptr %task)
  %ok = icmp eq i32 %rc, 0
  %flag = getelementptr i8, ptr %started, i64 %i
  %ok8 = zext i1 %ok to i8
  store i8 %ok8, ptr %flag
  br i1 %ok, label %spawn.next, label %spawn.inline
spawn.inline:
  %ignored = call ptr %chunk(ptr %task)
  br label %spawn.next
spawn.next:
  %i.next = add i64 %i, 1
  br label %spawn.head
own:
  %first = getelementptr { ptr, i64, i64 }, ptr %tasks, i64 0
  call void @chunk_bounds(ptr %first, ptr %table, i64 %start, i64 %count, i64 0, i64 %n)
  %ignored0 = call ptr %chunk(ptr %first)
  br label %join.head
join.head:
  %j = phi i64 [ 1, %own ], [ %j.next, %join.next ]
  %pending = icmp slt i64 %j, %n
  br i1 %pending, label %join.body, label %done
join.body:
  %jflag = getelementptr i8, ptr %started, i64 %j
  %was = load i8, ptr %jflag
  %yes = icmp ne i8 %was, 0
  br i1 %yes, label %join.wait, label %join.next
join.wait:
  %jhandle = getelementptr i64, ptr %handles, i64 %j
  %h = load i64, ptr %jhandle
  %joined = call i32 @pthread_join(i64 %h, ptr null)
  br label %join.next
join.next:
  %j.next = add i64 %j, 1
  br label %join.head
done:
  ret void
}
define internal void @chunk_bounds(
    ptr %task, ptr %table, i64 %start, i64 %count, i64 %i, i64 %n) #1 {
entry:
  store ptr %table, ptr %task
  %a = mul i64 %count, %i
  %lo.rel = sdiv i64 %a, %n
  %i1 = add i64 %i, 1
  %b = mul i64 %count, %i1
  %hi.rel = sdiv i64 %b, %n
  %lo = add i64 %start, %lo.rel
  %hi = add i64 %start, %hi.rel
  %lo.at = getelementptr i8, ptr %task, i64 8
  store i64 %lo, ptr %lo.at
  %hi.at = getelementptr i8, ptr %task, i64 16
  store i64 %hi, ptr %hi.at
  ret void
}"""


# A program with many kernels compiles as several modules, one per MODULE_TEXT characters of
# kernel text (LLVM takes about 2-6 µs per character at -O3), on several threads at once.
MODULE_TEXT = 16_000
MAX_MODULES = 8


# Where a tile function's text, rendered as its shape's key, names its loops' metadata node.
_LOOP_NODE = "!tile_loop"


def _runs(texts: dict[str, str], count: int) -> list[list[str]]:
    """The names of `texts` in `count` runs of about equal text, in order."""
    total = sum(len(text) for text in texts.values())
    runs: list[list[str]] = [[] for _ in range(count)]
    done = 0
    for name, text in texts.items():
        runs[done * count // total].append(name)
        done += len(text)
    return list(filter(None, runs))


ATTRIBUTES = [
    'attributes #0 = { nounwind "frame-pointer"="none" }',
    'attributes #1 = { nounwind minsize optsize "frame-pointer"="none" }',
]


def _short(llvm_type: str) -> str:
    return {"float": "f32", "double": "f64", "half": "f16"}.get(llvm_type, llvm_type)


class ModuleRenderer:
    """Renders a program and its kernels into one module whose entry point is `entry`."""

    def __init__(
        self,
        program: Program,
        plan: MemoryPlan,
        callbacks: list[CallbackStep],
        donated: dict | None = None,
        profiled: bool = False,
    ):
        self.program = program
        # Profiled, each kernel, GEMM, LAPACK call and callback adds its nanoseconds (by the
        # monotonic clock) and a call to its pair of counters; what ran, by counter pair.
        self.profile_labels: list[str] | None = [] if profiled else None
        self.plan = plan
        self.callbacks = {step: k for k, step in enumerate(callbacks)}  # -> place in the table
        # An output written into a donated input's memory (`compiler.donation`) -> that input.
        self.storage = {program.outputs[k]: program.inputs[i] for k, i in (donated or {}).items()}
        self.declarations: dict[str, str] = {}
        self.globals: list[str] = []
        self.functions: list[str] = []
        self.const_names = {}
        for k, (buffer, data) in enumerate(constants(program).items()):
            name = f"@const{k}"
            self.const_names[buffer] = name
            self.globals.append(_global_array(name, data, buffer.dtype))
        # The constant tables that expressions read (`K.Lookup`): (dtype, values) -> the name
        # and definition of their global.
        self.tables: dict[tuple, tuple[str, str]] = {}
        self.pointers: dict = {}
        self.metadata: list[str] = []
        self.kernels: dict[str, str] = {}  # a kernel's name -> its text
        self.tile_functions: dict[str, str] = {}  # a tile function's name -> its text
        # A tile function's name, by its text with the name left out: products of one shape
        # and layout share one.
        self.tile_names: dict[str, str] = {}
        self.function_declarations: dict[str, str] = {}  # of kernels and tile functions
        # Whether the library's own threads stay off while the program runs (`gemm`, `lapack`).
        self.library_threads_off = False

    def innermost_hint(self, loop: K.Loop) -> str:
        """Metadata for an innermost kernel loop (each loop needs its own distinct node). It is
        kept from being unrolled whole before vectorization (LLVM would then vectorize the loop
        around it, across rows, with gathers); the vectorizer unrolls it itself. One of at most
        UNROLLED_WHOLE iterations is left to be unrolled: a pooling window's rows and columns,
        whose loop around then vectorizes with strided loads. A long one interleaves vector
        iterations (`_interleave`): independent chains of accumulators and of long
        expressions (exp, tanh) keep the out-of-order core busy."""
        node = f"!{len(self.metadata)}"
        if loop.stop - loop.start <= UNROLLED_WHOLE:
            self.metadata.append(f"{node} = distinct !{{{node}}}")
            return node
        hints = ['!{!"llvm.loop.unroll.disable"}']
        interleave = _interleave(loop.body) if loop.stop - loop.start >= INTERLEAVE_TRIPS else 1
        if interleave > 1:
            hints.append(f'!{{!"llvm.loop.interleave.count", i32 {interleave}}}')
        self.metadata.append(f"{node} = distinct !{{{node}, {', '.join(hints)}}}")
        return node

    def kept_loop(self) -> str:
        """Metadata for a loop written as it should run (a tile function's): LLVM neither
        unrolls nor vectorizes it."""
        node = f"!{len(self.metadata)}"
        hints = '!{!"llvm.loop.unroll.disable"}, !{!"llvm.loop.vectorize.enable", i1 false}'
        self.metadata.append(f"{node} = distinct !{{{node}, {hints}}}")
        return node

    def table(self, values: tuple, dtype: np.dtype) -> str:
        """The global holding a constant table (one per distinct table in the module)."""
        key = (dtype.str, values)
        if key not in self.tables:
            name = f"@table{len(self.tables)}"
            self.tables[key] = (name, _global_array(name, np.array(values, dtype), dtype))
        return self.tables[key][0]

    def versioned(self, body: list) -> bool:
        """Whether an innermost loop's body runs its trigonometric functions in two versions
        (`_Function.versioned_loop`): it has some, and may run again with the same results:
        it accumulates nothing and reads no buffer it writes (a donated input and the output
        in its memory count as one)."""
        if not _stores_with_trigonometry(body):
            return False
        written = {self.storage.get(stmt.buffer, stmt.buffer) for stmt in body}
        return not written & self._read(body)

    def versioned_scalars(self, body: list) -> bool:
        """Whether a kernel's body without loops runs its trigonometric functions in two
        versions (`_Function.versioned_statements`): it has some, stores alone, and no
        statement reads what one before it writes (so all its values may be computed before
        any is stored: a loop's carry updated in place reads its old value)."""
        if not _stores_with_trigonometry(body):
            return False
        written = set()
        for stmt in body:
            if written & self._read([stmt]):
                return False
            written.add(self.storage.get(stmt.buffer, stmt.buffer))
        return True

    def _read(self, body: list) -> set:
        loads = [n for stmt in body for n in expressions(stmt) if isinstance(n, K.Load)]
        return {self.storage.get(n.buffer, n.buffer) for n in loads}

    def declare(self, name: str, result: str, args: list[str]) -> None:
        self.declarations.setdefault(name, f"declare {result} @{name}({', '.join(args)})")

    def pointer(self, function: _Function, buffer: K.Buffer) -> str:
        if function is not self.entry and buffer in function.params:
            return function.params[buffer]
        if buffer in self.const_names:
            return self.const_names[buffer]
        return self.pointers[buffer]

    def render(self) -> str:
        self.entry = _Function(self)
        self.entry.params = {}
        entry = self.entry
        arguments = [*self.program.inputs, *self.program.outputs]
        for k, buffer in enumerate(arguments):
            slot = entry.assign(f"getelementptr ptr, ptr %args, i64 {k}", "slot")
            self.pointers[buffer] = entry.assign(f"load ptr, ptr {slot}", "arg")
        for output, source in self.storage.items():
            self.pointers[output] = self.pointers[source]
        slot = entry.assign(f"getelementptr ptr, ptr %args, i64 {len(arguments)}", "slot")
        arena = entry.assign(f"load ptr, ptr {slot}", "arena")
        slot = entry.assign(f"getelementptr ptr, ptr %args, i64 {len(arguments) + 1}", "slot")
        self.threads = entry.assign(f"load i64, ptr {slot}", "threads")
        for buffer, offset in self.plan.offsets.items():
            self.pointers[buffer] = entry.assign(
                f"getelementptr i8, ptr {arena}, i64 {offset}", "t"
            )
        self.steps(self.program.steps)
        entry.emit("ret void")
        if self.callbacks:
            self.globals.append(
                f"@{CALLBACK_TABLE} = global [{len(self.callbacks)} x ptr] zeroinitializer"
            )
        if self.profile_labels:  # (the clock defined last: kernels keep their names)
            counters = 2 * len(self.profile_labels)
            self.globals.append(f"@{PROFILE_COUNTERS} = global [{counters} x i64] zeroinitializer")
            self.functions.append(_PROFILE_CLOCK)
        text = [
            "define void @entry(ptr noalias %args) #0 {",
            "entry:",
            *entry.prologue,
            *entry.lines,
            "}",
        ]
        self.entry_text = "\n".join(text)
        if any(" half" in text for text in [*entry.lines, *self.functions]):
            self.functions.append(self.half_narrowing())
        self.text = "\n".join(
            [LIBRARY_THREADS_OFF] * self.library_threads_off
            + [*self.globals, *self.table_definitions()]
            + [*self.declarations.values(), *self.functions, self.entry_text]
            + ATTRIBUTES
            + self.metadata
        )
        return self.text

    def modules(self) -> list[str]:
        """The program `render()` rendered, as modules that LLVM compiles at once on threads
        and links into one. Kernels: one module per MODULE_TEXT characters of them (at most
        MAX_MODULES; where there are fewer characters, none apart), spread over them in runs
        of about equal text, every run apart (the last module has `entry` and the chunk
        functions to compile besides). Tile functions: modules of their own, marked as
        written as they run (`engine.WRITTEN_AS_IT_RUNS`, which LLVM only cleans up), one
        per function up to MAX_MODULES. The last module holds `entry` and everything else,
        declaring the functions that the others define (a kernel reads constant buffers
        through its parameters, so the others need no globals but the constant tables of
        its expressions, which each module holds a private copy of). One module is
        `render()`'s text. The split depends on the text alone, never on the thread count,
        so that the on-disk cache serves any count."""
        total = sum(len(text) for text in self.kernels.values())
        count = min(MAX_MODULES, 1 + total // MODULE_TEXT, len(self.kernels))
        kernel_runs = _runs(self.kernels, count) if count > 1 else []
        tile_runs = _runs(self.tile_functions, min(MAX_MODULES, len(self.tile_functions)))
        if not (kernel_runs or tile_runs):
            return [self.text]
        declarations = [d for d in self.declarations.values() if d.startswith("declare ")]
        texts = {**self.kernels, **self.tile_functions}

        def module(run: list[str]) -> str:
            functions = [texts[name].replace("define internal ", "define ", 1) for name in run]
            return "\n".join(
                [*self.table_definitions(), *declarations, *functions, *ATTRIBUTES, *self.metadata]
            )

        apart = [name for run in kernel_runs + tile_runs for name in run]
        apart_texts = {texts[name] for name in apart}
        last = [
            *self.globals,
            *self.table_definitions(),
            *self.declarations.values(),
            *(self.function_declarations[name] for name in apart),
            *(text for text in self.functions if text not in apart_texts),
            self.entry_text,
            *ATTRIBUTES,
            *self.metadata,
        ]
        return (
            [module(run) for run in kernel_runs]
            + [f"{engine.WRITTEN_AS_IT_RUNS}\n{module(run)}" for run in tile_runs]
            + ["\n".join(last)]
        )

    def table_definitions(self) -> list[str]:
        return [definition for _, definition in self.tables.values()]

    def half_narrowing(self) -> str:
        """float64 -> half, which code generation calls by its C runtime name when it merges a
        float64 -> float32 -> half pair (as it does through copysign): the JIT links no C
        runtime, so each module that holds halves brings its own, rounding to odd on the way
        through float32 so that the result stays correctly rounded."""
        function = _Function(self)
        narrowed = function.assign(f"fptrunc float {function.f64_to_f32_odd('%x')} to half")
        function.emit(f"ret half {narrowed}")
        return "\n".join(["define half @__truncdfhf2(double %x) {", "entry:", *function.lines, "}"])

    # -- steps (rendered into `entry`) ------------------------------------------------------------

    def steps(self, steps: list) -> None:
        for step in steps:  # (profiled: each leaf step timed; control flow by its steps)
            timed = self.profile_labels is not None and not isinstance(step, CONTROL_STEPS)
            start = self.clock() if timed else None
            visit(self, step)
            if start is not None:
                self.count(self.label(step), start)

    def clock(self) -> str:
        """The monotonic clock's nanoseconds, read in `entry` (a profiled program)."""
        self.declare("clock_gettime", "i32", ["i32", "ptr"])
        return self.entry.assign("call i64 @fg_profile_clock()", "clock")

    def count(self, label: str, start: str) -> None:
        """Adds the nanoseconds since `start` and one call to `label`'s counters."""
        if label not in self.profile_labels:
            self.profile_labels.append(label)
        pair = 2 * self.profile_labels.index(label)
        f = self.entry
        spent = f.assign(f"sub i64 {self.clock()}, {start}", "spent")
        for offset, amount in ((0, spent), (1, "1")):
            slot = f.assign(f"getelementptr i64, ptr @{PROFILE_COUNTERS}, i64 {pair + offset}")
            total = f.assign(f"add i64 {f.assign(f'load i64, ptr {slot}')}, {amount}")
            f.emit(f"store i64 {total}, ptr {slot}")

    def label(self, step) -> str:
        """What a profile calls a step: a kernel by its name in the module, a GEMM or a
        convolution by its shape, a LAPACK routine by its symbol, a callback by its primitive."""
        if isinstance(step, KernelStep):
            return list(self.kernels)[-1]  # (the one its call just rendered)
        if isinstance(step, (GemmStep, TileStep)):
            return step.label()
        if isinstance(step, FortranCall):
            return blas.lapack_symbol(step.routine, step.dtype)
        return f"callback {step.eqn.primitive.name}"

    def kernel(self, step: KernelStep) -> None:
        kernel = step.kernel
        if self._copies_onto_itself(kernel):
            return
        function = _Function(self)
        # A donated input and the output living in its memory are one parameter, so the
        # kernel's code sees its in-place update (and `noalias` stays true).
        split = parallel_loop(kernel) if work(kernel) >= PARALLEL_WORK else None
        private = set(kernel.scratch) if split is not None else set()  # each thread's own
        shared = [b for b in kernel.buffers if b not in private]
        storage = [self.storage.get(b, b) for b in shared]
        distinct = list(dict.fromkeys(storage))
        function.params = {b: f"%b{distinct.index(s)}" for b, s in zip(shared, storage)}
        function.streamed = set(kernel.inputs) - private
        for b in kernel.scratch:
            if b in private:
                elements = f"{memory_type(b.dtype)}, i64 {b.size}"
                function.params[b] = function.assign(f"alloca {elements}, align 64", "scratch")
        if split is not None:
            function.bounds[split] = ("%lo", "%hi")
        accs = K.accumulators(kernel.body)
        for acc in accs:
            function.acc_slots[acc] = function.assign(f"alloca {value_type(acc.dtype)}", "acc")
        if self.versioned_scalars(kernel.body):
            function.versioned_statements(kernel.body)
        else:
            function.statements(kernel.body)
        function.emit("ret void")
        params = [f"ptr noalias %b{k}" for k in range(len(distinct))]
        if split is not None:
            params += ["i64 %lo", "i64 %hi"]
        # Named by place in the module, not by the scheduler's process-wide count, so that a
        # program's text does not depend on what was compiled before it (the disk cache's key).
        name = f"k{len(self.functions)}_{kernel.name.partition('_')[2]}"
        self.kernels[name] = "\n".join(
            [f"define internal void @{name}({', '.join(params)}) #0 {{", "entry:"]
            + function.prologue
            + function.lines
            + ["}"]
        )
        self.function_declarations[name] = f"declare void @{name}({', '.join(params)})"
        self.functions.append(self.kernels[name])
        pointers = [self.pointer(self.entry, b) for b in distinct]
        if split is None:
            args = ", ".join(f"ptr {p}" for p in pointers)
            self.entry.emit(f"call void @{name}({args})")
        else:
            self.parallel_call(name, pointers, split)

    def _copies_onto_itself(self, kernel: K.Kernel) -> bool:
        """Whether the kernel only copies a buffer into the memory it lives in already (a
        cond's branch returning its operand, its result written in place): nothing to do, where
        the empty loop LLVM left was still dispatched to the threads (a fori_loop doubling
        every other row of a 1024x1024 carry under a cond: 0.34 -> 0.19 ms)."""
        if len(kernel.inputs) != 1 or len(kernel.outputs) != 1 or kernel.scratch:
            return False
        (source,), (out,) = kernel.inputs, kernel.outputs
        if self.storage.get(out, out) is not self.storage.get(source, source):
            return False
        return all(
            isinstance(s, K.Store)
            and s.buffer is out
            and isinstance(s.value, K.Load)
            and s.value.buffer is source
            and K.same(s.value.offset, s.offset)
            for s in statements_in(kernel.body)
        )

    def parallel_call(self, name: str, pointers: list[str], loop: K.Loop | _Range) -> None:
        """Run kernel `name`'s outer loop in chunks on the program's threads: its buffers go
        in a table that each chunk's task points to."""
        chunk = _chunk_function(name, len(pointers))
        if chunk not in self.functions:  # (a tile function serves every product of its shape)
            self.functions.append(chunk)
        if pool.available():  # the process's pool of worker threads
            pool.install()
            self.declare(pool.SYMBOL, "void", ["ptr", "ptr", "i64", "i64", "i64"])
            parallel_for = pool.SYMBOL
        else:  # threads started for each loop
            if "parallel_for" not in self.declarations:
                self.declare("pthread_create", "i32", ["ptr", "ptr", "ptr", "ptr"])
                self.declare("pthread_join", "i32", ["i64", "ptr"])
                self.declarations["parallel_for"] = PARALLEL_FOR
            parallel_for = "parallel_for"
        f = self.entry
        table = f.fresh("buffers")
        f.prologue.append(f"  {table} = alloca [{len(pointers)} x ptr]")
        for k, pointer in enumerate(pointers):
            slot = f.assign(f"getelementptr ptr, ptr {table}, i64 {k}")
            f.emit(f"store ptr {pointer}, ptr {slot}")
        f.emit(
            f"call void @{parallel_for}(ptr @{name}.chunk, ptr {table}, i64 {loop.start}, "
            f"i64 {loop.stop}, i64 {self.threads})"
        )

    def copy(self, destination: str, source: str, size: int) -> None:
        self.declare("llvm.memcpy.p0.p0.i64", "void", ["ptr", "ptr", "i64", "i1"])
        self.entry.emit(
            f"call void @llvm.memcpy.p0.p0.i64(ptr {destination}, ptr {source}, i64 {size}, "
            "i1 false)"
        )

    def bind(self, program: Program, sources: list) -> None:
        for buffer, pointer in zip(program.inputs, sources):
            self.pointers[buffer] = pointer

    def ptrs(self, buffers: list) -> list[str]:
        return [self.pointer(self.entry, b) for b in buffers]

    def copy_all(self, destinations: list[K.Buffer], sources: list[K.Buffer]) -> None:
        for d, s in zip(destinations, sources):
            destination, source = self.pointer(self.entry, d), self.pointer(self.entry, s)
            if destination != source:  # (a carry or a cond's result written in place)
                self.copy(destination, source, nbytes(d))

    def bind_loop_body(self, body: Program, sources: list, first_carry: int, carries: int):
        """Bind a loop body's inputs to `sources`; each carry output that may be written
        where the loop keeps that carry (`donation.carries_in_place`) lives there, so the
        copy back after each iteration is no copy."""
        self.bind(body, sources)
        for k, i in carries_in_place(body, first_carry, carries).items():
            self.storage[body.outputs[k]] = body.inputs[i]
            self.pointers[body.outputs[k]] = self.pointers[body.inputs[i]]

    def cond(self, step: CondStep) -> None:
        f = self.entry
        index = f.assign(f"load i32, ptr {self.pointer(f, step.index)}")
        last = len(step.branches) - 1
        low = f.assign(f"select i1 {f.assign(f'icmp slt i32 {index}, 0')}, i32 0, i32 {index}")
        clamped = f.assign(
            f"select i1 {f.assign(f'icmp sgt i32 {low}, {last}')}, i32 {last}, i32 {low}"
        )
        labels = [f.new_label("branch") for _ in step.branches]
        join = f.new_label("join")
        cases = " ".join(f"i32 {k}, label %{label}" for k, label in enumerate(labels) if k)
        f.emit(f"switch i32 {clamped}, label %{labels[0]} [{cases}]")
        for branch, label in zip(step.branches, labels):
            f.label(label)
            self.bind(branch, self.ptrs(step.operands))
            # The branch writes its results where the cond's live (no copy after), and where
            # that is an operand's memory (a loop's carry updated in place,
            # `donation.carries_in_place`), its kernels see one buffer updated in place.
            for inner, outer in zip(branch.outputs, step.outputs):
                self.pointers[inner] = self.pointer(f, outer)
                for operand, bound in zip(step.operands, branch.inputs):
                    if self.pointer(f, operand) == self.pointers[inner]:
                        self.storage[inner] = bound
            self.steps(branch.steps)
            self.copy_all(step.outputs, branch.outputs)
            f.emit(f"br label %{join}")
        f.label(join)

    def while_loop(self, step: WhileStep) -> None:
        f = self.entry
        self.copy_all(step.carry, step.init)
        test, body, done = (
            f.new_label("while_test"),
            f.new_label("while_body"),
            f.new_label("while_done"),
        )
        f.emit(f"br label %{test}")
        f.label(test)
        self.bind(step.cond, self.ptrs(step.cond_consts + step.carry))
        self.steps(step.cond.steps)
        flag = f.assign(f"load i8, ptr {self.pointer(f, step.cond.outputs[0])}")
        going = f.assign(f"icmp ne i8 {flag}, 0")
        f.emit(f"br i1 {going}, label %{body}, label %{done}")
        f.label(body)
        sources = self.ptrs(step.body_consts + step.carry)
        self.bind_loop_body(step.body, sources, len(step.body_consts), len(step.carry))
        self.steps(step.body.steps)
        self.copy_all(step.carry, step.body.outputs)
        f.emit(f"br label %{test}")
        f.label(done)

    def scan(self, step: ScanStep) -> None:
        f = self.entry
        self.copy_all(step.carry, step.init)
        index = f.new_label("scan_i")

        def body():
            position = f"%{index}"
            if step.reverse:
                position = f.assign(f"sub i64 {step.length - 1}, %{index}")
            x_slices = []
            for xs, inner in zip(step.xs, step.body.inputs[len(step.consts) + len(step.init) :]):
                offset = f.assign(f"mul i64 {position}, {nbytes(inner)}")
                x_slices.append(
                    f.assign(f"getelementptr i8, ptr {self.pointer(f, xs)}, i64 {offset}")
                )
            sources = self.ptrs(step.consts + step.carry) + x_slices
            self.bind_loop_body(step.body, sources, len(step.consts), len(step.carry))
            self.steps(step.body.steps)
            num_carry = len(step.carry)
            self.copy_all(step.carry, step.body.outputs[:num_carry])
            for ys, inner in zip(step.ys, step.body.outputs[num_carry:]):
                offset = f.assign(f"mul i64 {position}, {nbytes(inner)}")
                slot = f.assign(f"getelementptr i8, ptr {self.pointer(f, ys)}, i64 {offset}")
                self.copy(slot, self.pointer(f, inner), nbytes(inner))

        f.loop(index, 0, step.length, body)

    def gemm(self, step: GemmStep) -> None:
        """One library GEMM per batch element, each on row-major matrices. An addend is
        copied into the result first (BLAS updates its result in place), unless the result
        lives in the addend's memory (donated).

        A large matrix is split into blocks of rows (or of columns, when it is wider than
        tall), one single-threaded library call per block on the program's pool of threads;
        a smaller one that the library would thread runs on one thread. Where the pool runs,
        the library's own threads never run inside a program, for two reasons:
        - They meet at barriers inside each call: on a machine busier than its cores, a thread
          the scheduler left waiting stalls the others (a 256x784x1024 product took 45 ms with
          two library threads there, 3.4 ms as two blocks; a 96x96x96 one, 16-32 ms where it
          takes 12 µs); the pool's threads claim whole blocks.
        - After a call they spin for about 0.1 s before they sleep, taking a core from the
          pool's loops that follow (a parallel elementwise loop of 8M float32 ran 1.8 ms
          after a 96x96x96 product, 1.0 ms after it without the library's threads).
        """
        f = self.entry
        dtype = step.out.dtype
        t = value_type(dtype)
        signature = ["i32", "i32", "i32", "i64", "i64", "i64", t, "ptr", "i64", "ptr", "i64", t]
        self.declare(_gemm_symbol(dtype), "void", [*signature, "ptr", "i64"])
        m, n, k, size = step.m, step.n, step.k, dtype.itemsize
        lhs, rhs, out = (self.pointer(f, b) for b in (step.lhs, step.rhs, step.out))
        if step.addend is not None and self.storage.get(step.out, step.out) is not step.addend:
            self.copy(out, self.pointer(f, step.addend), nbytes(step.out))
        blocks = None
        if pool.available() and m * n * k >= GEMM_SPLIT_WORK and max(m, n) > 1:
            blocks = self._gemm_blocks(step)
        self.library_threads_off |= pool.available() and m * n * k > LIBRARY_THREAD_WORK
        index = f.new_label("gemm_b")

        def one_matrix():
            def at(base: str, elements: int) -> str:
                offset = f.assign(f"mul i64 %{index}, {elements * size}")
                return f.assign(f"getelementptr i8, ptr {base}, i64 {offset}")

            a, b, c = at(lhs, m * k), at(rhs, k * n), at(out, m * n)
            if blocks is not None:
                self.parallel_call(blocks, [a, b, c], _Range(0, m if m >= n else n))
            else:
                f.emit(_gemm_call(step, m, n, a, b, c))

        f.loop(index, 0, step.batch, one_matrix)

    def tiles(self, step: TileStep) -> None:
        """A product in register tiles (`tiles.tile_function`), split into chunks on the
        program's threads where there is enough work."""
        width = engine.vector_bytes()
        addend = [step.addend] if step.addend is not None else []
        pointers = self.ptrs([*step.operands, step.out, *addend])
        # Rendered under a placeholder name and loop node, the text is the shape's key.
        shape = tiles.tile_function(step, "tiles", width, lambda: _LOOP_NODE)
        if shape not in self.tile_names:
            name = self.tile_names[shape] = f"tiles{len(self.functions)}"
            text = shape.replace("@tiles(", f"@{name}(", 1)
            text = re.sub(re.escape(_LOOP_NODE), lambda _: self.kept_loop(), text)
            self.tile_functions[name] = text
            self.functions.append(text)
            params = ", ".join(["ptr"] * len(pointers) + ["i64", "i64"])
            self.function_declarations[name] = f"declare void @{name}({params})"
            for intrinsic in tiles.intrinsics(step, width):
                self.declare(*intrinsic)
        name = self.tile_names[shape]
        count = tiles.tiles(step, width)
        work = step.out.size * math.prod(term[0] for term in step.terms)
        if pool.available() and work >= GEMM_SPLIT_WORK and count > 1:
            self.parallel_call(name, pointers, _Range(0, count))
        else:
            args = ", ".join(f"ptr {p}" for p in pointers)
            self.entry.emit(f"call void @{name}({args}, i64 0, i64 {count})")

    def _gemm_blocks(self, step: GemmStep) -> str:
        """`gemm_blocks{i}(a, b, c, lo, hi)`: rows lo..hi of one product (columns, when it is
        wider than tall) by one library call."""
        m, n, size = step.m, step.n, step.out.dtype.itemsize
        lda, ldb = _leading_dimensions(step)
        name = f"{GEMM_BLOCKS}{len(self.functions)}"
        # Where block lo starts, in elements per unit of lo, in the operand it moves along.
        if m >= n:
            step_a, step_b, step_c = (1 if step.transpose_lhs else lda), 0, n
            rows, columns = "%count", n
        else:
            step_a, step_b, step_c = 0, (ldb if step.transpose_rhs else 1), 1
            rows, columns = m, "%count"
        lines = [
            f"define internal void @{name}(ptr %a, ptr %b, ptr %c, i64 %lo, i64 %hi) #0 {{",
            "entry:",
            "  %count = sub i64 %hi, %lo",
        ]
        for operand, elements in (("a", step_a), ("b", step_b), ("c", step_c)):
            lines.append(f"  %{operand}.offset = mul i64 %lo, {elements * size}")
            lines.append(
                f"  %{operand}.at = getelementptr i8, ptr %{operand}, i64 %{operand}.offset"
            )
        lines.append("  " + _gemm_call(step, rows, columns, "%a.at", "%b.at", "%c.at"))
        lines += ["  ret void", "}"]
        self.functions.append("\n".join(lines))
        return name

    def lapack(self, step: FortranCall) -> None:
        """One call per matrix; every argument by reference, then one hidden length per
        character argument (gfortran's convention). A small matrix's call runs on one
        thread (SMALL_DECOMPOSITION)."""
        f = self.entry
        matrix = math.prod(step.eqn.invars[0].aval.shape[-2:])
        self.library_threads_off |= matrix <= SMALL_DECOMPOSITION
        name = blas.lapack_symbol(step.routine, step.dtype)
        scalars = []
        for arg in step.args:
            if isinstance(arg, tuple):
                continue
            slot = f.fresh("arg")
            if isinstance(arg, str):
                f.prologue += [f"  {slot} = alloca i8", f"  store i8 {ord(arg)}, ptr {slot}"]
            elif isinstance(arg, float):
                t = value_type(step.dtype)
                value = constant_text(arg, step.dtype)
                f.prologue += [f"  {slot} = alloca {t}", f"  store {t} {value}, ptr {slot}"]
            else:
                f.prologue += [f"  {slot} = alloca i64", f"  store i64 {int(arg)}, ptr {slot}"]
            scalars.append(slot)
        lengths = ["i64 1"] * sum(isinstance(a, str) for a in step.args)
        self.declare(name, "void", ["ptr"] * len(step.args) + ["i64"] * len(lengths))
        index = f.new_label("matrix")

        def one_matrix():
            values, scalar = [], iter(scalars)
            for arg in step.args:
                if not isinstance(arg, tuple):
                    values.append(f"ptr {next(scalar)}")
                    continue
                buffer, stride = arg
                base = self.pointer(f, buffer)
                if stride:
                    offset = f.assign(f"mul i64 %{index}, {stride * buffer.dtype.itemsize}")
                    base = f.assign(f"getelementptr i8, ptr {base}, i64 {offset}")
                values.append(f"ptr {base}")
            f.emit(f"call void @{name}({', '.join(values + lengths)})")

        f.loop(index, 0, step.batch, one_matrix)

    def callback(self, step: CallbackStep) -> None:
        f = self.entry
        buffers = [*step.operands, *step.results]
        table = f.fresh("table")
        f.prologue.append(f"  {table} = alloca [{max(len(buffers), 1)} x ptr]")
        for k, buffer in enumerate(buffers):
            slot = f.assign(f"getelementptr ptr, ptr {table}, i64 {k}")
            f.emit(f"store ptr {self.pointer(f, buffer)}, ptr {slot}")
        slot = f.assign(f"getelementptr ptr, ptr @{CALLBACK_TABLE}, i64 {self.callbacks[step]}")
        target = f.assign(f"load ptr, ptr {slot}")
        f.emit(f"call void {target}(ptr {table})")


def _global_array(name: str, data: np.ndarray, dtype: np.dtype) -> str:
    data = np.ascontiguousarray(data).reshape(-1)
    if data.size == 0:
        return f"{name} = private constant [1 x i8] zeroinitializer, align 64"
    raw = data.astype(np.uint8) if dtype == K.BOOL else data
    # Each byte as \XX, spelled by NumPy (a Python loop over the bytes took 2.6 s of the
    # 4.3 s compiling a 2^20-point FFT, whose twiddle tables are 8 MB).
    byte = np.frombuffer(raw.tobytes(), np.uint8)
    spelled = np.empty((byte.size, 3), np.uint8)
    spelled[:, 0] = ord("\\")
    spelled[:, 1] = _HEX_DIGITS[byte >> 4]
    spelled[:, 2] = _HEX_DIGITS[byte & 15]
    body = spelled.tobytes().decode("ascii")
    return f'{name} = private constant [{raw.nbytes} x i8] c"{body}", align 64'


_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", np.uint8)
