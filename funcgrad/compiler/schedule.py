"""Scheduling: an optimized jaxpr becomes a `Program`, a list of steps over buffers.

A step is a fused kernel (kernel IR), a control-flow region (cond, while, scan) holding
programs of its own, or a host callback. Which variables get a buffer decides the fusion:
everything else is recomputed inside the kernels that read it (see `fusion.py`). A variable
lives in memory when

- it is a program input, constant or output, or an operand or result of a step that is not a
  fused kernel (control flow, callbacks);
- a root rule (reduction, cumulative op, contraction, ...) produces it;
- it would otherwise be computed more than once per element: read by several kernels or
  several times by one (a broadcast that expands it, a contraction), unless its equation is a
  cheap index shuffle such as a reshape or a broadcast, which is always recomputed;
- it ends a chain of MAX_FUSION_DEPTH fused equations (a kernel per 32 links of a very long
  elementwise chain).

The scheduler is backend-independent: renderers take the program as it is.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from funcgrad import dtypes
from funcgrad.array import Array
from funcgrad.compiler import (
    fft_kernels,  # noqa: F401  (registers the Fourier transform's passes)
    lapack,
    passes,
    rows,
    special,  # noqa: F401  (registers erf_inv and digamma)
)
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.choices import Choice
from funcgrad.compiler.fusion import (
    REDUCTIONS,
    CompileError,
    KernelBuilder,
    compute_dtype,
    describe,
    fusible,
    loop_nest,
    map_loops,
    reduction_fold,
    root_rules,
    split_offset,
    window_position,
    writes_over_its_operand,
)
from funcgrad.compiler.fusion import (
    flat_offset as _flat_offset,
)
from funcgrad.core import PRIMITIVES
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var

# ---------------------------------------------------------------------------------------------
# Steps and programs


@dataclass(eq=False)
class KernelStep:
    kernel: K.Kernel
    eqns: list[JaxprEqn]  # the equations it computes, for the printed plan


@dataclass(eq=False)
class CondStep:
    index: K.Buffer
    branches: list[Program]
    operands: list[K.Buffer]
    outputs: list[K.Buffer]


@dataclass(eq=False)
class WhileStep:
    cond: Program
    body: Program
    cond_consts: list[K.Buffer]
    body_consts: list[K.Buffer]
    init: list[K.Buffer]
    carry: list[K.Buffer]  # the loop's outputs, updated in place each iteration


@dataclass(eq=False)
class ScanStep:
    body: Program
    consts: list[K.Buffer]
    init: list[K.Buffer]
    xs: list[K.Buffer]
    carry: list[K.Buffer]
    ys: list[K.Buffer]
    length: int
    reverse: bool


@dataclass(eq=False)
class GemmStep:
    """out[b] = op(lhs[b]) @ op(rhs[b]) for b < batch, row-major, by a library GEMM; op
    transposes when the flag says the operand is stored (k, m) or (n, k). With an addend,
    out[b] = alpha op(lhs[b]) @ op(rhs[b]) + beta addend[b]: the update the product feeds (an
    optimizer's `w - lr * grad`) made by the GEMM as it writes its result (`_Update`);
    without one, alpha and beta stay 1 and 0, a BLAS's plain product."""

    lhs: K.Buffer
    rhs: K.Buffer
    out: K.Buffer
    batch: int
    m: int
    n: int
    k: int
    transpose_lhs: bool
    transpose_rhs: bool
    eqn: JaxprEqn
    addend: K.Buffer | None = None
    alpha: float = 1.0
    beta: float = 0.0

    @property
    def operands(self) -> tuple[K.Buffer, K.Buffer]:
        """The product's two factors."""
        return self.lhs, self.rhs

    def label(self) -> str:
        """The GEMM as a profile names it: its shape and dtype."""
        batch = f"{self.batch}x" if self.batch > 1 else ""
        return f"gemm {batch}{self.m}x{self.n}x{self.k} {self.out.dtype.name}"


@dataclass(eq=False)
class TileStep:
    """A product of arrays laid out by strides, computed in register tiles (CPU only):

        out[o(t) + r * out_row + j] = sum over the terms k of
                                      a[a(t) + r * a_row + a(k)] * b[b(t) + j + b(k)]

    for every outer index t, row r and column j, where o(t), a(t), b(t), a(k) and b(k) sum
    index times stride over `outer`'s dimensions and `terms`'. Columns are contiguous in `b`
    and `out`, so a tile's columns are vectors, and each of its rows multiplies one element of
    `a` into them. With an addend, out = alpha * product + beta * addend (the update a
    product feeds, `_Update`), the addend laid out as `out` and maybe in its memory.

    A matrix product (`batch` outer, rows of `a`, columns of `b`, terms along the
    contraction) takes this form where `b` is stored (k, n). So does a convolution: with the
    output's features innermost (NHWC), the rows are output places along the last spatial
    dimension and the columns output features: `a` is the input (each row a window), `b` the
    weights. With places innermost (NCHW), the rows are output features and the columns
    places: `a` is the weights, `b` the input. The input is padded already (a kernel wrote
    it so), so every term reads an element."""

    a: K.Buffer
    b: K.Buffer
    out: K.Buffer
    outer: tuple[tuple[int, int, int, int], ...]  # (count, a stride, b stride, out stride)
    rows: tuple[int, int, int]  # (count, a stride, out stride)
    columns: int
    terms: tuple[tuple[int, int, int], ...]  # (count, a stride, b stride), outermost first
    eqn: JaxprEqn
    addend: K.Buffer | None = None
    alpha: float = 1.0
    beta: float = 0.0

    @property
    def operands(self) -> tuple[K.Buffer, K.Buffer]:
        """The product's two factors."""
        return self.a, self.b

    def label(self) -> str:
        """The step as a profile names it: a convolution's output shape, a product's batch
        and (m, n, k), and the dtype."""
        dtype = self.out.dtype.name
        if self.eqn.primitive.name == "conv_general_dilated":
            return f"conv {'x'.join(map(str, self.eqn.outvars[0].aval.shape))} {dtype}"
        batch = math.prod(count for count, *_ in self.outer)
        m, k = self.rows[0], math.prod(count for count, *_ in self.terms)
        return f"tiles {f'{batch}x' if batch > 1 else ''}{m}x{self.columns}x{k} {dtype}"


@dataclass(eq=False)
class CallbackStep:
    """Native code calls back into Python, in program order: debug.print and debug.callback,
    pure_callback, and primitives that run on machinery of their own (pmap's devices), whose
    results the callback writes into `results`."""

    eqn: JaxprEqn
    operands: list[K.Buffer]
    results: list[K.Buffer] = field(default_factory=list)

    def run(self, values: list[np.ndarray]) -> list[np.ndarray]:
        """The primitive run on host copies of the operands (shaped as its avals): the arrays
        to write into `results`, each contiguous and of its result's dtype."""
        eqn = self.eqn
        as_arrays = eqn.primitive.higher_order  # which take arrays, as the reference passes them
        operands = []
        for value, var in zip(values, eqn.invars):
            value = value.reshape(var.aval.shape)
            value = value[()] if value.ndim == 0 else value
            operands.append(Array(value, var.aval.weak_type) if as_arrays else value)
        outs = eqn.primitive.impl(*operands, **eqn.params)
        if not isinstance(outs, list | tuple):
            outs = [outs]
        return [
            np.ascontiguousarray(np.asarray(out), var.aval.dtype)
            for out, var in zip(outs, eqn.outvars[: len(self.results)])
        ]


@dataclass(eq=False)
class Program:
    """Steps over buffers: `inputs` are bound by the caller, `outputs` are written by the
    steps (each output has a buffer of its own), `consts` hold baked-in data."""

    inputs: list[K.Buffer]
    outputs: list[K.Buffer]
    steps: list
    consts: dict = field(default_factory=dict)

    def as_text(self, indent: str = "") -> str:
        lines = [
            f"{indent}program({', '.join(map(repr, self.inputs))}) -> "
            f"({', '.join(map(repr, self.outputs))})"
        ]
        for step in self.steps:
            lines += step_text(step, indent + "  ")
        return "\n".join(lines)


# The steps that hold programs of their own.
CONTROL_STEPS = (CondStep, WhileStep, ScanStep)


def visit(visitor, step) -> None:
    """Calls the visitor's method for the step's kind, with the step: `kernel`, `gemm`,
    `tiles`, `cond`, `while_loop`, `scan`, `callback` or `lapack` (each backend's walk of a program
    names its methods so)."""
    method = _VISITS.get(type(step))
    if method is None:
        raise TypeError(f"no backend runs step {step!r}")
    getattr(visitor, method)(step)


_VISITS = {
    KernelStep: "kernel",
    GemmStep: "gemm",
    TileStep: "tiles",
    CondStep: "cond",
    WhileStep: "while_loop",
    ScanStep: "scan",
    CallbackStep: "callback",
    lapack.FortranCall: "lapack",
}


def inner_programs(step) -> list[Program]:
    """The programs a control-flow step holds (none for other steps)."""
    if isinstance(step, CondStep):
        return list(step.branches)
    if isinstance(step, WhileStep):
        return [step.cond, step.body]
    if isinstance(step, ScanStep):
        return [step.body]
    return []


def all_steps(program: Program):
    """Every step of a program and of the programs its steps hold, outer ones first."""
    for step in program.steps:
        yield step
        for inner in inner_programs(step):
            yield from all_steps(inner)


def step_text(step, indent: str) -> list[str]:
    """A step's lines in a program's printout, the first naming what it computes from what."""
    if isinstance(step, KernelStep):
        kernel = step.kernel
        fused = ", ".join(e.primitive.name for e in step.eqns)
        ins = ", ".join(b.name for b in kernel.inputs)
        outs = ", ".join(b.name for b in kernel.outputs)
        return [f"{indent}{outs} = {kernel.name}({ins})  # fuses: {fused}"]
    if isinstance(step, CondStep):
        lines = [
            f"{indent}{', '.join(b.name for b in step.outputs)} = cond[{step.index.name}]"
            f"({', '.join(b.name for b in step.operands)})"
        ]
        for k, branch in enumerate(step.branches):
            lines += [f"{indent}  branch {k}:", branch.as_text(indent + "    ")]
        return lines
    if isinstance(step, WhileStep):
        return [
            f"{indent}{', '.join(b.name for b in step.carry)} = while"
            f"({', '.join(b.name for b in step.init)})",
            f"{indent}  cond:",
            step.cond.as_text(indent + "    "),
            f"{indent}  body:",
            step.body.as_text(indent + "    "),
        ]
    if isinstance(step, ScanStep):
        return [
            f"{indent}{', '.join(b.name for b in step.carry + step.ys)} = scan[length="
            f"{step.length}{', reverse' if step.reverse else ''}]"
            f"({', '.join(b.name for b in step.consts + step.init + step.xs)})",
            step.body.as_text(indent + "  "),
        ]
    if isinstance(step, lapack.FortranCall):
        args = ", ".join(a[0].name if isinstance(a, tuple) else repr(a) for a in step.args)
        return [f"{indent}lapack {step.routine}[batch={step.batch}]({args})"]
    if isinstance(step, GemmStep):
        flags = "".join(
            f", transpose_{name}"
            for name, flag in (("lhs", step.transpose_lhs), ("rhs", step.transpose_rhs))
            if flag
        )
        product = (
            f"gemm[batch={step.batch}, m={step.m}, n={step.n}, k={step.k}{flags}]"
            f"({step.lhs.name}, {step.rhs.name})"
        )
        if step.addend is not None:
            alpha, beta = (str(step.out.dtype.type(c)) for c in (step.alpha, step.beta))
            product = f"{alpha} * {product} + {beta} * {step.addend.name}"
        return [f"{indent}{step.out.name} = {product}"]
    if isinstance(step, TileStep):
        shape = (
            f"outer={'x'.join(str(count) for count, *_ in step.outer)}, rows={step.rows[0]}, "
            f"columns={step.columns}, terms={'x'.join(str(count) for count, *_ in step.terms)}"
        )
        product = f"tiles[{shape}]({step.a.name}, {step.b.name})"
        if step.addend is not None:
            alpha, beta = (str(step.out.dtype.type(c)) for c in (step.alpha, step.beta))
            product = f"{alpha} * {product} + {beta} * {step.addend.name}"
        return [f"{indent}{step.out.name} = {product}"]
    results = ", ".join(b.name for b in step.results)
    call = f"callback {step.eqn.primitive.name}({', '.join(b.name for b in step.operands)})"
    return [f"{indent}{results} = {call}" if results else f"{indent}{call}"]


# ---------------------------------------------------------------------------------------------
# Materialization


# Index shuffles: recomputing them where they are read costs less than a pass over memory.
_CHEAP = {
    PRIMITIVES[name]
    for name in (
        "broadcast_in_dim",
        "reshape",
        "squeeze",
        "transpose",
        "rev",
        "slice",
        "iota",
        "convert_element_type",
        "bitcast_convert_type",
        "stop_gradient",
        "dynamic_slice",
    )
}

# Primitives that read (some of) their operands' elements many times each.
_REREAD_ALL = {
    PRIMITIVES[n]
    for n in (
        "dot_general",
        "conv_general_dilated",
        "sort",
        "top_k",
        "triangular_solve",
        "cholesky",
        "lu",
    )
} | {
    p
    for name, p in PRIMITIVES.items()
    if name.startswith("reduce_window") or name == "select_and_scatter_add"
}


def _rereads(eqn: JaxprEqn, position: int) -> bool:
    primitive = eqn.primitive
    if primitive in _REREAD_ALL:
        return True
    if primitive is PRIMITIVES["gather"]:
        return position == 0
    if primitive is PRIMITIVES["broadcast_in_dim"]:
        return eqn.outvars[0].aval.size > eqn.invars[0].aval.size
    return False


def _materialized(eqns: list[JaxprEqn], outvars: list, produced: set) -> set:
    """The variables that get a buffer (see the module's docstring)."""
    keep = {v for v in outvars if type(v) is Var and v in produced}
    demand: Counter = Counter(v for v in outvars if type(v) is Var)
    for eqn in reversed(eqns):
        primitive = eqn.primitive
        fused = fusible(eqn)
        if not fused:
            keep.update(eqn.outvars)
        else:
            for v in eqn.outvars:
                if demand[v] > 1 and primitive not in _CHEAP:
                    keep.add(v)
        inlined_here = fused and not any(v in keep for v in eqn.outvars)
        weight = max(demand[v] for v in eqn.outvars) if inlined_here else 1
        for position, v in enumerate(eqn.invars):
            if type(v) is not Var:
                continue
            if not fused and primitive not in root_rules:
                keep.add(v)  # control flow and callbacks read buffers
            demand[v] += 2 if _rereads(eqn, position) else weight
    _bound_depth(eqns, keep)
    producer = {v: eqn for eqn in eqns for v in eqn.outvars}
    _apart_from_scattered(eqns, keep, producer)
    _apart_from_arg_reductions(eqns, keep, producer)
    return {v for v in keep if v in produced}


# Element rules whose code is long (random bits, transcendental functions): fused into a loop
# that does not vectorize, each element costs tens of nanoseconds.
_COSTLY = {
    PRIMITIVES[name]
    for name in (
        "threefry2x32",
        "exp",
        "exp2",
        "log",
        "log1p",
        "expm1",
        "sin",
        "cos",
        "tan",
        "tanh",
        "logistic",
        "erf",
        "erfc",
        "erf_inv",
        "lgamma",
        "digamma",
        "pow",
        "atan2",
    )
    if name in PRIMITIVES
}
_ARG_REDUCTIONS = {PRIMITIVES["argmax"], PRIMITIVES["argmin"]}


def _apart_from_arg_reductions(eqns: list[JaxprEqn], keep: set, producer: dict) -> None:
    """Give the operand of an argmax or argmin a buffer where computing it is costly: its
    fold carries an index beside the running value and does not vectorize, so costly work
    fused into it runs an element at a time (categorical's Gumbel noise, random bits and two
    logarithms per element, 75 ms for 256x10000 fused, 3 ms apart)."""
    for eqn in eqns:
        operand = eqn.invars[0] if eqn.primitive in _ARG_REDUCTIONS else None
        if type(operand) is not Var or operand in keep:
            continue
        if any(e.primitive in _COSTLY for e in _fused_eqns(operand, producer, keep)):
            keep.add(operand)


def _apart_from_scattered(eqns: list[JaxprEqn], keep: set, producer: dict) -> None:
    """Give a scatter's indices and updates a buffer where computing them reads the operand
    they scatter into (`x.at[i].set(f(x[i]))`), and so a dynamic_update_slice's written in
    its window (`fusion.updates_in_windows`): the kernel then reads its operand
    only as it copies it, so its result may be written in the operand's own memory
    (`donation`: a loop's carry, a donated argument), where the copy is none."""
    for eqn in eqns:
        if not writes_over_its_operand(eqn):
            continue
        operand = eqn.invars[0]
        for v in eqn.invars[1:]:
            if type(v) is not Var or v in keep:
                continue
            fused = _fused_eqns(v, producer, keep)
            if v is operand or any(operand in e.invars for e in fused):
                keep.add(v)


def _fused_eqns(v: Var, producer: dict, keep: set):
    """The equations a kernel reading `v` computes in its expression: v's own and those of
    the values it reads in turn, up to values that have a buffer (`keep`)."""
    pending, seen = [v], set()
    while pending:
        var = pending.pop()
        if var in seen or var in keep or var not in producer:
            continue
        seen.add(var)
        yield producer[var]
        pending += [u for u in producer[var].invars if type(u) is Var]


# The longest chain of equations one kernel computes per element: a longer chain is cut by
# giving a value a buffer (building and rendering its expression recurse once per link, and
# a chain this long is compute-bound anyway, so the extra pass costs little).
MAX_FUSION_DEPTH = 32


def _bound_depth(eqns: list[JaxprEqn], keep: set) -> None:
    depth: dict = {}
    for eqn in eqns:
        if not fusible(eqn):
            continue
        links = [depth.get(v, 0) for v in eqn.invars if type(v) is Var and v not in keep]
        d = 1 + max(links, default=0)
        if d > MAX_FUSION_DEPTH:
            keep.update(eqn.outvars)
            d = 0
        for v in eqn.outvars:
            depth[v] = 0 if v in keep else d


# ---------------------------------------------------------------------------------------------
# Library calls

# Dtypes a library GEMM takes (a CPU BLAS); a GPU's takes float16 and bfloat16 too (float32
# accumulation, one rounding at the end, as the reference contracts halves).
GEMM_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
GPU_GEMM_DTYPES = GEMM_DTYPES + (np.dtype(dtypes.float16), np.dtype(dtypes.bfloat16))
GEMM_MIN_FLOPS = 4096  # below this, a fused loop beats the call


def _converts_exactly(operand: np.dtype, result: np.dtype) -> bool:
    """Whether a GEMM in `result` may take an operand of dtype `operand` converted to it: its
    own dtype, or a narrower float widened to float32 or float64, where every value converts
    exactly and the reference contracts in `result` too (a bfloat16 operand beside a float32
    one, given preferred_element_type=float32)."""
    if operand == result:
        return True
    wide = result in (np.dtype(np.float32), np.dtype(np.float64))
    return wide and dtypes.is_float(operand) and operand.itemsize < result.itemsize


# Whether a product of a matrix and a vector is a fused kernel, not a library GEMM: a CPU's
# library runs them as GEMMs of one row or column (a 1024x1024 matrix by a vector 0.14 ms, a
# vector by it 0.44 ms, where a fused kernel reading the matrix once takes 0.05 ms).
vector_products_fuse = Choice("vector_products_fuse", False)
# Whether convolutions run in register tiles (`TileStep`), a CPU backend's choice; a GPU's
# run as tiled products of its own (`_conv_contraction`) or GEMMs.
convolves_in_tiles = Choice("convolves_in_tiles", False)
# Which products of row-major matrices run in register tiles (`TileStep`), on a CPU:
# take(batch, m, n, k, dtype) says; on a GPU none do (None).
products_in_tiles = Choice("products_in_tiles", None)
# A convolution runs in tiles when its output's innermost dimension fills a vector of this size.
TILE_COLUMNS_BYTES = 64


def _gemm_shape(eqn: JaxprEqn, gemm_dtypes: tuple):
    """(batch, m, n, k) when a dot_general suits a library GEMM: its result one of
    `gemm_dtypes`, each operand of that dtype or converting to it exactly, enough work, and
    batch dimensions leading on both sides."""
    lhs, rhs = eqn.invars
    out = eqn.outvars[0].aval
    exact = all(_converts_exactly(np.dtype(a.aval.dtype), np.dtype(out.dtype)) for a in (lhs, rhs))
    if not exact or out.dtype not in gemm_dtypes:
        return None
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    batch = math.prod(lhs.aval.shape[d] for d in lhs_batch)
    k = math.prod(lhs.aval.shape[d] for d in lhs_contract)
    m = math.prod(
        s for d, s in enumerate(lhs.aval.shape) if d not in lhs_contract and d not in lhs_batch
    )
    n = math.prod(
        s for d, s in enumerate(rhs.aval.shape) if d not in rhs_contract and d not in rhs_batch
    )
    if batch * m * n * k < GEMM_MIN_FLOPS:
        return None
    if batch == 1 and min(m, n) == 1 and vector_products_fuse.get():
        return None
    return batch, m, n, k


@dataclass(frozen=True)
class _Update:
    """`result = alpha * product + beta * addend`, elementwise over the product's whole
    result, made by the product's GEMM (`GemmStep.addend`)."""

    product: JaxprEqn
    result: Var
    addend: Var
    alpha: float
    beta: float


# Dtypes whose GEMMs take the update they feed: the product is then rounded once, in the
# update, where the reference rounds it before.
UPDATE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _updates(scheduler: _Scheduler, eqns: list[JaxprEqn]) -> dict:
    """{update equation: `_Update`} for each add or sub whose result has a buffer of its own
    and combines a library GEMM's product, read nowhere else, with an array of the same shape
    that has a buffer (each term maybe scaled by a constant): a gradient step `w - lr * g`,
    momentum's `0.9 * v + g`. The GEMM writes the update as it writes its result (BLAS's and
    cuBLAS's `alpha` and `beta`, cuBLASLt's where the addend is not the result's memory)
    rather than a kernel reading the product back."""
    buffer_of, producer = scheduler.buffer_of, scheduler.producer

    def read_once(var) -> bool:
        return var not in scheduler.program_outputs and len(scheduler.consumers.get(var, ())) == 1

    def scaled(atom) -> tuple:
        """(the variable, its constant factor) of a term: `c * v`, `v * c` or `v`. A factor
        of 0 (or not finite) stays a product of its own: a BLAS reads no operand whose factor
        is 0, where 0 * NaN and 0 * inf are NaN."""
        eqn = producer.get(atom) if type(atom) is Var else None
        if eqn is None or eqn.primitive.name != "mul" or atom in buffer_of or not read_once(atom):
            return atom, 1.0
        for c, v in (eqn.invars, eqn.invars[::-1]):
            if type(c) is Literal and np.ndim(c.val) == 0 and type(v) is Var:
                factor = float(c.val)
                return (v, factor) if factor != 0 and math.isfinite(factor) else (atom, 1.0)
        return atom, 1.0

    found = {}
    for eqn in eqns:
        result = eqn.outvars[0] if eqn.primitive.name in ("add", "sub") else None
        if result not in buffer_of or result.aval.dtype not in UPDATE_DTYPES:
            continue
        (a, a_scale), (b, b_scale) = (scaled(atom) for atom in eqn.invars)
        b_scale = -b_scale if eqn.primitive.name == "sub" else b_scale
        for (term, alpha), (addend, beta) in (
            ((a, a_scale), (b, b_scale)),
            ((b, b_scale), (a, a_scale)),
        ):
            product = producer.get(term) if type(term) is Var else None
            if (
                product is not None
                and product.primitive.name == "dot_general"
                and _gemm_shape(product, scheduler.gemm_dtypes) is not None
                and not fusible(product)  # (a short product fuses into its reader instead)
                and read_once(term)
                and type(addend) is Var
                and addend in buffer_of
                and addend is not term
                and addend.aval.shape == result.aval.shape == term.aval.shape
                and addend.aval.dtype == result.aval.dtype == term.aval.dtype
            ):
                found[eqn] = _Update(product, result, addend, alpha, beta)
                break
    return found


def _conv_as_gemm(eqn: JaxprEqn, gemm_dtypes: tuple) -> bool:
    """Whether a convolution runs as a GEMM over gathered windows: one feature group and one
    batch group (the forms a convolution's gradients take too), one of `gemm_dtypes`
    throughout, and enough work."""
    p = eqn.params
    lhs, rhs = eqn.invars
    out = eqn.outvars[0].aval
    if p["feature_group_count"] != 1 or p["batch_group_count"] != 1:
        return False
    if out.dtype not in gemm_dtypes or not lhs.aval.dtype == rhs.aval.dtype == out.dtype:
        return False
    return out.size * math.prod(rhs.aval.shape[1:]) // 1 >= GEMM_MIN_FLOPS


def _strides(shape: tuple[int, ...]) -> list[int]:
    """Each dimension's stride, in elements, in a row-major array of `shape`."""
    return [math.prod(shape[d + 1 :]) for d in range(len(shape))]


def _strides_in(shape: tuple[int, ...], order: list[int]) -> list[int]:
    """Each dimension's stride, in elements, in an array of `shape` whose dimensions are
    stored in `order` (outermost first)."""
    stored = _strides(tuple(shape[d] for d in order))
    strides = [0] * len(shape)
    for position, d in enumerate(order):
        strides[d] = stored[position]
    return strides


def _window_element(builder: KernelBuilder, eqn: JaxprEqn, n, at, offsets, c) -> K.Expr:
    """The input element of a convolution's batch element `n` and input feature `c` under
    window element `offsets` of output place `at`; zero where it falls in the padding or
    between the elements of an input spread apart."""
    lhs = eqn.invars[0]
    p = eqn.params
    lhs_spec = p["dimension_numbers"][0]
    lhs_index = [None] * lhs.aval.ndim
    lhs_index[lhs_spec[0]], lhs_index[lhs_spec[1]] = n, c
    inside = []
    for d, (place, offset) in enumerate(zip(at, offsets)):
        lhs_index[lhs_spec[2 + d]], ok = window_position(
            place,
            offset,
            p["window_strides"][d],
            p["rhs_dilation"][d],
            p["padding"][d][0],
            p["lhs_dilation"][d],
            lhs.aval.shape[lhs_spec[2 + d]],
        )
        inside.append(ok)
    value = builder.element(lhs, lhs_index)
    for ok in inside:
        value = K.select(ok, value, K.const(0, value.dtype))
    return value


def _spreads_input(eqn: JaxprEqn) -> bool:
    """A convolution of an input spread apart (lhs_dilation > 1) with unit strides: a strided
    convolution's input gradient, which `_dilated_conv_gemm` computes without the zeros."""
    p = eqn.params
    return max(p["lhs_dilation"]) > 1 and set(p["window_strides"]) == {1}


# ---------------------------------------------------------------------------------------------
# Scheduling

# Primitives the compiled program hands back to Python: callbacks, checkify's checks (which
# raise there where a check staged inside checkify reaches a program run without it), and
# pmap and shard_map, whose shards run on the devices' threads (each compiling its per-device
# program itself). So do the user's primitives without a composite, running their impl.
_HOST_CALLS = ("debug_callback", "check", "pure_callback", "io_callback", "pmap", "shard_map")


class _Calls(dict):
    """Call primitives whose programs the compiler inlines, and the param holding the program;
    and any primitive of the user's with a composite (`funcgrad.extend.core`), whose program
    is its composite traced on the equation's operand types."""

    def __contains__(self, primitive) -> bool:
        return super().__contains__(primitive) or getattr(primitive, "composite", None) is not None

    def __getitem__(self, primitive):
        if super().__contains__(primitive):
            return super().__getitem__(primitive)
        return lambda eqn: primitive.composite_program(
            tuple(v.aval for v in eqn.invars), eqn.params
        )


@functools.cache
def _calls() -> _Calls:
    """The calls to inline (`_Calls`): looked up at the first compilation, as the
    transformations declaring them may be imported after the compiler (a GPU as the default
    platform loads the compiler while funcgrad is imported)."""
    return _Calls(
        {
            PRIMITIVES[name]: param
            for name, param in (
                ("jit", "jaxpr"),
                ("checkpoint", "jaxpr"),
                ("custom_jvp_call", "call_jaxpr"),
                ("custom_vjp_call", "call_jaxpr"),
                ("custom_vmap_call", "call_jaxpr"),
                ("linear_solve", "call_jaxpr"),
            )
        }
    )


_counter = itertools.count()


def _buffer(prefix: str, aval) -> K.Buffer:
    return K.Buffer(f"{prefix}{next(_counter)}", np.dtype(aval.dtype), aval.size)


def _unwrap(value) -> np.ndarray:
    return np.ascontiguousarray(getattr(value, "_value", value))


# Where a map kernel makes a fold down the columns of a value it stores (a bias gradient
# beside the gradient it sums): a predicate on (rows, columns), true where that fold runs as
# one kernel of blocks (on a GPU: `parallel.column_fold_on_blocks`); None elsewhere (a CPU
# streams rows through a column fold, which a map's threads would not share).
# (`_Scheduler._map_with_column_fold`)
column_folds_with_maps = Choice("column_folds_with_maps", None)


def schedule(
    closed: ClosedJaxpr, gemm_dtypes: tuple = GEMM_DTYPES, contraction_dtypes: tuple = ()
) -> Program:
    """The program computing `closed`; its inputs are the jaxpr's invars in order. Products
    in `gemm_dtypes` may run as library GEMMs; convolutions in `contraction_dtypes` run as
    one contraction kernel each (`_conv_contraction`) rather than gathered windows and a
    GEMM. GEMMs make the updates their products feed (`_updates`)."""
    inlined = passes.inline_calls(closed, _calls())
    layout = products_in_reader_layout(inlined)
    return _Scheduler(layout, gemm_dtypes, contraction_dtypes).program


def products_in_reader_layout(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`transpose(dot_general(a, b))` computed as `dot_general(b, a)`, where the transpose
    swaps the product's lhs-free and rhs-free dimensions (batch dimensions staying first) and
    is the product's only reader: a GEMM then writes the product in the layout its reader
    wants, rather than a kernel reading it across rows. Autodiff's weight gradients take this
    form (a product over the batch, transposed to the weights' layout), and so does
    `(x @ w).T`. The sums are the same; only which operand a GEMM walks by rows changes."""
    jaxpr = closed.jaxpr
    readers = Counter(v for eqn in jaxpr.eqns for v in eqn.invars if type(v) is Var)
    readers.update(v for v in jaxpr.outvars if type(v) is Var)
    producer = {eqn.outvars[0]: eqn for eqn in jaxpr.eqns if eqn.primitive.name == "dot_general"}
    swapped = {}  # the transpose -> the product it becomes
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "transpose" or type(eqn.invars[0]) is not Var:
            continue
        product = producer.get(eqn.invars[0])
        if product is not None and readers[eqn.invars[0]] == 1:
            if eqn.params["permutation"] == _swapped_free_dimensions(product):
                swapped[eqn] = product
    if not swapped:
        return closed
    replaced = set(swapped.values())
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn in swapped:
            eqns.append(_operands_swapped(swapped[eqn], eqn.outvars))
        elif eqn not in replaced:
            eqns.append(eqn)
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns), closed.consts)


def _swapped_free_dimensions(product: JaxprEqn) -> tuple:
    """The permutation of a dot_general's result (batch, lhs free, rhs free dimensions) that
    puts the rhs's free dimensions before the lhs's."""
    lhs, rhs = (v.aval.ndim for v in product.invars)
    (lhs_contract, rhs_contract), (lhs_batch, _) = product.params["dimension_numbers"]
    batch = len(lhs_batch)
    lhs_free = lhs - batch - len(lhs_contract)
    rhs_free = rhs - batch - len(rhs_contract)
    return (
        *range(batch),
        *range(batch + lhs_free, batch + lhs_free + rhs_free),
        *range(batch, batch + lhs_free),
    )


def _operands_swapped(product: JaxprEqn, outvars: list) -> JaxprEqn:
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = product.params["dimension_numbers"]
    params = dict(product.params)
    params["dimension_numbers"] = ((rhs_contract, lhs_contract), (rhs_batch, lhs_batch))
    precision = params.get("precision")
    if isinstance(precision, tuple):
        params["precision"] = precision[::-1]
    lhs, rhs = product.invars
    return JaxprEqn(product.primitive, [rhs, lhs], outvars, params, product.source_info)


class _Scheduler:
    def __init__(self, closed: ClosedJaxpr, gemm_dtypes: tuple, contraction_dtypes: tuple):
        self.gemm_dtypes = gemm_dtypes
        self.contraction_dtypes = contraction_dtypes
        jaxpr = closed.jaxpr
        self.consts: dict = {}
        self.buffer_of: dict = {}
        for var, value in zip(jaxpr.constvars, closed.consts):
            self.buffer_of[var] = self._const_buffer(_unwrap(value), var.aval)
        inputs = [_buffer("in", v.aval) for v in jaxpr.invars]
        self.buffer_of.update(zip(jaxpr.invars, inputs))
        self.producer = {v: eqn for eqn in jaxpr.eqns for v in eqn.outvars}
        keep = _materialized(jaxpr.eqns, jaxpr.outvars, set(self.producer))
        outputs = [_buffer("out", a.aval) for a in jaxpr.outvars]
        copies = []  # outputs that are inputs, constants, literals or repeated
        for atom, buffer in zip(jaxpr.outvars, outputs):
            if type(atom) is Var and atom in keep and atom not in self.buffer_of:
                self.buffer_of[atom] = buffer
            else:
                copies.append((atom, buffer))
        for eqn in jaxpr.eqns:
            for v in eqn.outvars:
                if v in keep and v not in self.buffer_of:
                    self.buffer_of[v] = _buffer("t", v.aval)
        self.steps: list = []
        self.pending: list[rows.Member] = []  # kernels that may share a loop over rows
        self.consumers: dict = {}
        for eqn in jaxpr.eqns:
            for v in eqn.invars:
                if type(v) is Var:
                    self.consumers.setdefault(v, []).append(eqn)
        self.program_outputs = {v for v in jaxpr.outvars if type(v) is Var}
        self.updates = _updates(self, jaxpr.eqns)
        self.updated = {update.product for update in self.updates.values()}
        self.folded: set = set()  # reductions made by the map kernel of their operand
        for eqn in jaxpr.eqns:
            self._schedule(eqn)
        self._flush()
        for atom, buffer in copies:
            self._copy(atom, buffer)
        self.program = Program(inputs, outputs, self.steps, self.consts)

    def _copy(self, atom, buffer: K.Buffer) -> None:
        """A kernel writing `atom` (an input, constant, literal or repeated output) to `buffer`."""
        if buffer.dtype == dtypes.float0:
            return  # no data
        builder = KernelBuilder(self.producer, self.buffer_of)
        shape = atom.aval.shape
        body = map_loops(
            shape,
            lambda index: [
                K.Store(buffer, _flat_offset(index, shape), builder.element(atom, index))
            ],
        )
        self._kernel(builder, [buffer], body, [])

    def _const_buffer(self, value: np.ndarray, aval) -> K.Buffer:
        buffer = _buffer("c", aval)
        self.consts[buffer] = np.asarray(value, aval.dtype).reshape(-1)
        return buffer

    def _source(self, atom) -> K.Buffer:
        if type(atom) is Literal:
            return self._const_buffer(np.asarray(atom.val), atom.aval)
        return self.buffer_of[atom]

    def _inner(self, closed: ClosedJaxpr) -> Program:
        """The program of a branch or a loop's body, scheduled as this one."""
        return schedule(closed, self.gemm_dtypes, self.contraction_dtypes)

    def _kernel(self, builder: KernelBuilder, outputs: list, body: list, eqns: list) -> None:
        name = f"k{next(_counter)}_" + (eqns[-1].primitive.name if eqns else "copy")
        kernel = K.Kernel(
            name,
            list(builder.inputs),
            outputs + builder.scratch,
            body,
            list(builder.scratch),
            independent_outer=builder.independent_outer,
        )
        self.steps.append(KernelStep(kernel, eqns))

    def _fused_eqns(self, roots: list) -> list[JaxprEqn]:
        """The equations a kernel computes: its roots' and the fused ones they read."""
        seen, order = set(), []

        def visit(var):
            if type(var) is not Var or var in self.buffer_of or var in seen:
                return
            seen.add(var)
            eqn = self.producer[var]
            for v in eqn.invars:
                visit(v)
            if eqn not in order:
                order.append(eqn)

        for eqn in roots:
            for v in eqn.invars:
                visit(v)
        return order + [e for e in roots if e not in order]

    def _schedule(self, eqn: JaxprEqn) -> None:
        if eqn in self.updated:
            return  # its GEMM runs where the update it feeds is made
        if eqn in self.folded:
            return  # made by the map kernel of its operand
        if eqn in self.updates:
            self._flush()
            self._gemm(self.updates[eqn].product, self.updates[eqn])
            return
        primitive = eqn.primitive
        kept = [v for v in eqn.outvars if v in self.buffer_of]
        if fusible(eqn) and not kept:
            return  # fused into its readers
        if eqn.outvars and all(v.aval.dtype == dtypes.float0 for v in eqn.outvars):
            return  # float0 values (the tangents of integers) hold no data to compute
        if rows.is_member(eqn):
            self.pending.append(rows.Member(eqn, kept))
            return
        self._flush()
        if primitive.name == "dot_general" and _gemm_shape(eqn, self.gemm_dtypes) is not None:
            self._gemm(eqn)
        elif primitive.name == "conv_general_dilated" and _conv_as_gemm(eqn, self.gemm_dtypes):
            if _spreads_input(eqn):
                self._dilated_conv_gemm(eqn)
            elif convolves_in_tiles.get() and self._conv_in_tiles(eqn):
                pass
            elif eqn.outvars[0].aval.dtype in self.contraction_dtypes:
                self._conv_contraction(eqn)
            else:
                self._conv_gemm(eqn)
        elif primitive in root_rules:
            builder = KernelBuilder(self.producer, self.buffer_of)
            outputs = [self.buffer_of[v] for v in eqn.outvars]
            body = root_rules[primitive](builder, eqn, outputs)
            self._kernel(builder, outputs, body, self._fused_eqns([eqn]))
        elif primitive.name in lapack.DECOMPOSITIONS:
            lapack.DECOMPOSITIONS[primitive.name](self, eqn)
        elif primitive.name == "cond":
            self._cond(eqn)
        elif primitive.name == "while":
            self._while(eqn)
        elif primitive.name == "scan":
            self._scan(eqn)
        elif primitive.name in _HOST_CALLS or getattr(primitive, "user_defined", False):
            operands = [self._source(v) for v in eqn.invars]
            results = [self.buffer_of[v] for v in eqn.outvars]
            self.steps.append(CallbackStep(eqn, operands, results))
        else:
            raise CompileError(f"the compiler has no lowering for {describe(eqn)}")

    def _flush(self) -> None:
        """Build the pending kernels, those that can share a loop over rows together."""
        for members, outer in rows.group(self.pending, self.producer, self.buffer_of):
            if len(members) == 1 and members[0].eqn in self.folded:
                continue  # made by the map kernel of its operand, built before it
            if len(members) == 1:
                self._single(members[0])
                continue
            builder = KernelBuilder(self.producer, self.buffer_of)
            local = {v for m in members for v in m.stored if self._read_only_by(v, members)}
            body = rows.build(builder, members, outer, local)
            outputs = [self.buffer_of[v] for m in members for v in m.stored if v not in local]
            self._kernel(builder, outputs, body, self._fused_eqns([m.eqn for m in members]))
        self.pending = []

    def _single(self, member: rows.Member) -> None:
        eqn, kept = member.eqn, member.stored
        builder = KernelBuilder(self.producer, self.buffer_of)
        if not fusible(eqn):
            outputs = [self.buffer_of[v] for v in eqn.outvars]
            body = root_rules[eqn.primitive](builder, eqn, outputs)
            self._kernel(builder, outputs, body, self._fused_eqns([eqn]))
            return
        shape = kept[0].aval.shape
        fold = self._column_fold(kept)
        if fold is not None:
            self._map_with_column_fold(builder, eqn, kept, fold)
            return

        def body(index):
            values = builder.compute(eqn, index)
            values = values if isinstance(values, list) else [values]
            by_var = dict(zip(eqn.outvars, values))
            offset = _flat_offset(index, shape)
            return [K.Store(self.buffer_of[v], offset, by_var[v]) for v in kept]

        outputs = [self.buffer_of[v] for v in kept]
        self._kernel(builder, outputs, map_loops(shape, body), self._fused_eqns([eqn]))

    def _column_fold(self, kept: list) -> JaxprEqn | None:
        """A reduction over all but the last axis of a value a map kernel stores, which that
        kernel may make (`column_folds_with_maps`)."""
        on_blocks = column_folds_with_maps.get()
        shape = kept[0].aval.shape
        if on_blocks is None or len(shape) < 2 or shape[-1] < 2:
            return None
        if any(v.aval.shape != shape for v in kept):
            return None
        if not on_blocks(math.prod(shape[:-1]), shape[-1]):
            return None
        for v in kept:
            for reader in self.consumers.get(v, ()):
                if (
                    reader.primitive in REDUCTIONS
                    and reader.invars[0] is v
                    and tuple(reader.params["axes"]) == tuple(range(len(shape) - 1))
                    and reader.outvars[0].aval.dtype == compute_dtype(v.aval.dtype)
                ):
                    return reader
        return None

    def _map_with_column_fold(self, builder, eqn: JaxprEqn, kept: list, fold: JaxprEqn):
        """One kernel storing the map's values and folding one of them down its columns as
        it goes, written as the CPU writes a column fold (`for c: out[c] = init; for r: for
        c: ...`), the stores first and the fold reading back the element just stored (which
        the compiler keeps in a register): a GPU's passes make it a kernel of blocks, each
        folding a group of columns (`parallel._columns_outer`, `_columns_on_blocks`), where
        the map and a fold reading its result back from memory were two launches."""
        (folded,) = fold.invars
        shape = folded.aval.shape
        count = shape[-1]
        combine, init = reduction_fold(fold)
        out = self.buffer_of[fold.outvars[0]]
        row, column, start = K.fresh_index(), K.fresh_index(), K.fresh_index()
        index = [*split_offset(row, shape[:-1]), column]
        values = builder.compute(eqn, index)
        by_var = dict(zip(eqn.outvars, values if isinstance(values, list) else [values]))
        at = row * K.const(count, K.INDEX) + column
        stores = [K.Store(self.buffer_of[v], at, by_var[v]) for v in kept]
        term = K.cast(K.Load(self.buffer_of[folded], at), init.dtype)  # (what it just stored)
        running = K.binary(combine, K.Load(out, column), term)
        body = [
            K.Loop(start, 0, count, [K.Store(out, start, init)]),
            K.Loop(
                row,
                0,
                math.prod(shape[:-1]),
                [K.Loop(column, 0, count, [*stores, K.Store(out, column, running)])],
            ),
        ]
        outputs = [self.buffer_of[v] for v in kept] + [out]
        self._kernel(builder, outputs, body, self._fused_eqns([eqn]) + [fold])
        self.folded.add(fold)

    def _read_only_by(self, var, members: list) -> bool:
        """Whether every kernel reading `var` is one of `members` (and no output is it)."""
        if var in self.program_outputs:
            return False
        roots = {id(m.eqn) for m in members}
        stack = [var]
        while stack:
            for eqn in self.consumers.get(stack.pop(), []):
                if id(eqn) in roots:
                    continue
                fused_away = fusible(eqn) and not any(v in self.buffer_of for v in eqn.outvars)
                if not fused_away:
                    return False
                stack.extend(eqn.outvars)
        return True

    def _gemm(self, eqn: JaxprEqn, update: _Update | None = None) -> None:
        batch, m, n, k = _gemm_shape(eqn, self.gemm_dtypes)
        lhs, rhs = eqn.invars
        (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
        dtype = np.dtype(eqn.outvars[0].aval.dtype)
        lhs_buffer, transpose_lhs = self._gemm_operand(lhs, lhs_batch, lhs_contract, dtype)
        rhs_buffer, transpose_rhs = self._gemm_operand(
            rhs, rhs_batch, rhs_contract, dtype, contract_first=True
        )
        out, made = self.buffer_of[eqn.outvars[0]], {}
        if update is not None:
            out = self.buffer_of[update.result]
            made = dict(addend=self.buffer_of[update.addend], alpha=update.alpha, beta=update.beta)
        take = products_in_tiles.get()
        if take is not None and take(batch, m, n, k, dtype):
            if transpose_rhs:  # stored (n, k): copied (k, n), k x n elements against m x n x k
                rhs_buffer = self._copied_operand(rhs, [*rhs_batch, *rhs_contract], dtype)
            a_row, a_term = (1, m) if transpose_lhs else (k, 1)
            outer = ((batch, m * k, k * n, m * n),)
            tiles = (lhs_buffer, rhs_buffer, out, outer, (m, a_row, n), n, ((k, a_term, n),), eqn)
            self.steps.append(TileStep(*tiles, **made))
            return
        gemm = (lhs_buffer, rhs_buffer, out, batch, m, n, k, transpose_lhs, transpose_rhs, eqn)
        self.steps.append(GemmStep(*gemm, **made))

    def _conv_in_tiles(self, eqn: JaxprEqn) -> bool:
        """A convolution as a `TileStep`; whether it could be. Its columns are the output's
        features (the weights' output features made their innermost dimension, and the
        output computed so, by copies where they are not: a channels-first weight gradient)
        or, where the output's innermost dimension is the input's, a spatial dimension the
        window moves along one element at a time (NCHW), the places along it. Either fills
        a vector. The input is copied with its padding first (unless it has none and is in
        memory already)."""
        lhs, rhs = eqn.invars
        p = eqn.params
        lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
        out_shape = eqn.outvars[0].aval.shape
        dtype = np.dtype(eqn.outvars[0].aval.dtype)
        spatial = len(out_spec) - 2
        innermost = len(out_shape) - 1
        if spatial == 0 or max(p["lhs_dilation"]) > 1:
            return False
        lanes = TILE_COLUMNS_BYTES // dtype.itemsize
        features_fit = out_shape[out_spec[1]] >= lanes
        features_inner = out_spec[1] == innermost and rhs_spec[0] == rhs.aval.ndim - 1
        positions_inner = (
            out_spec[-1] == innermost
            and lhs_spec[-1] == lhs.aval.ndim - 1
            and p["window_strides"][-1] == 1
            and out_shape[innermost] >= lanes
        )
        by_features = features_fit and (features_inner or not positions_inner)
        if not (by_features or positions_inner):
            return False
        padded_shape, padded = self._padded_input(eqn, dtype)
        x = _strides(padded_shape)
        out = self.buffer_of[eqn.outvars[0]]
        if by_features:  # the weights' and the output's features innermost
            w_order = [d for d in range(rhs.aval.ndim) if d != rhs_spec[0]] + [rhs_spec[0]]
            o_order = [d for d in range(len(out_shape)) if d != out_spec[1]] + [out_spec[1]]
            if rhs_spec[0] == rhs.aval.ndim - 1:
                weights, _ = self._gemm_operand(rhs, [], w_order, dtype)
            else:
                weights = self._copied_operand(rhs, w_order, dtype)
            product = out if out_spec[1] == innermost else self._buffer_like(out)
        else:
            w_order, o_order = list(range(rhs.aval.ndim)), list(range(len(out_shape)))
            weights, _ = self._gemm_operand(rhs, [], w_order, dtype)
            product = out
        w, o = _strides_in(rhs.aval.shape, w_order), _strides_in(out_shape, o_order)
        strides, dilation = p["window_strides"], p["rhs_dilation"]
        window = [
            (rhs.aval.shape[rhs_spec[2 + s]], dilation[s] * x[lhs_spec[2 + s]], w[rhs_spec[2 + s]])
            for s in range(spatial)
        ]
        terms = [(rhs.aval.shape[rhs_spec[1]], x[lhs_spec[1]], w[rhs_spec[1]]), *window]
        terms.sort(key=lambda term: term[0])  # the longest innermost
        # (count, input stride, weights stride, output stride) of the outer dimensions
        batch = (out_shape[out_spec[0]], x[lhs_spec[0]], 0, o[out_spec[0]])
        places = [
            (out_shape[out_spec[2 + s]], strides[s] * x[lhs_spec[2 + s]], 0, o[out_spec[2 + s]])
            for s in range(spatial)
        ]
        columns = out_shape[out_spec[1]] if by_features else out_shape[innermost]
        if by_features:  # rows: the batch or a spatial dimension
            # The longest (the last spatial dimension's places in a convolution, the input
            # features in its weight gradient, whose batch those are), the last of equals.
            candidates = [batch, *places]
            longest = max(reversed(candidates), key=lambda dim: dim[0])
            candidates.remove(longest)
            count, x_stride, _, o_stride = longest
            rows = (count, x_stride, o_stride)
            step = TileStep(
                padded, weights, product, tuple(candidates), rows, columns, tuple(terms), eqn
            )
        else:  # rows: output features; columns: the last spatial dimension's places
            places.pop()
            outer = tuple(
                (count, 0, x_stride, o_stride) for count, x_stride, _, o_stride in (batch, *places)
            )
            rows = (out_shape[out_spec[1]], w[rhs_spec[0]], o[out_spec[1]])
            swapped = tuple((count, w_stride, x_stride) for count, x_stride, w_stride in terms)
            step = TileStep(weights, padded, out, outer, rows, columns, swapped, eqn)
        self.steps.append(step)
        if product is not out:
            self._relayout(product, o_order, out, out_shape)
        return True

    def _buffer_like(self, buffer: K.Buffer) -> K.Buffer:
        return K.Buffer(f"t{next(_counter)}", buffer.dtype, buffer.size)

    def _relayout(self, source: K.Buffer, order: list, out: K.Buffer, shape: tuple) -> None:
        """A kernel copying `source`, an array of `shape` with its dimensions stored in
        `order`, into `out` (row-major)."""
        copier = KernelBuilder(self.producer, self.buffer_of)
        stored = tuple(shape[d] for d in order)

        def relayout(index):
            value = K.Load(copier.reads(source), _flat_offset([index[d] for d in order], stored))
            return [K.Store(out, _flat_offset(index, shape), value)]

        self._kernel(copier, [out], loop_nest(shape, relayout), [])

    def _padded_input(self, eqn: JaxprEqn, dtype: np.dtype) -> tuple[tuple, K.Buffer]:
        """A convolution's input with its padding, zeros there (its own buffer where it has
        none and is in memory), and its shape."""
        lhs = eqn.invars[0]
        lhs_spec = eqn.params["dimension_numbers"][0]
        padding = eqn.params["padding"]
        shape = list(lhs.aval.shape)
        for s, (low, high) in enumerate(padding):
            shape[lhs_spec[2 + s]] += low + high
        if not any(low or high for low, high in padding):
            buffer, _ = self._gemm_operand(lhs, [], list(range(lhs.aval.ndim)), dtype)
            return tuple(shape), buffer
        buffer = K.Buffer(f"t{next(_counter)}", dtype, math.prod(shape))
        builder = KernelBuilder(self.producer, self.buffer_of)

        def body(index):
            source, inside = list(index), []
            for s, (low, _) in enumerate(padding):
                d = lhs_spec[2 + s]
                source[d], ok = window_position(
                    index[d], K.const(0, K.INDEX), 1, 1, low, 1, lhs.aval.shape[d]
                )
                inside.append(ok)
            value = K.cast(builder.element(lhs, source), dtype)
            for ok in inside:
                value = K.select(ok, value, K.const(0, dtype))
            return [K.Store(buffer, _flat_offset(index, shape), value)]

        self._kernel(builder, [buffer], loop_nest(tuple(shape), body), [])
        return tuple(shape), buffer

    def _conv_gemm(self, eqn: JaxprEqn) -> None:
        """A convolution as one GEMM: a fused kernel gathers each output position's input
        window into a row of `patches` (zeros where the window leaves the padded input), the
        weights are read as a (window x input features, output features) matrix, and the
        product is the output with its features last (copied into the output's layout when
        that differs).

        Where the input's innermost dimension is the convolution's batch (a weight
        gradient's: the activations, their batch as the features it sums over), the patches
        are gathered transposed, (window x input features) by (positions x batch), which the
        GEMM reads so: the gather then walks the input along its rows, not across them."""
        lhs, rhs = eqn.invars
        p = eqn.params
        lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
        out_var = eqn.outvars[0]
        out_shape = out_var.aval.shape
        dtype = np.dtype(out_var.aval.dtype)
        spatial = len(rhs_spec) - 2
        window = tuple(rhs.aval.shape[d] for d in rhs_spec[2:])
        in_features, out_features = rhs.aval.shape[rhs_spec[1]], rhs.aval.shape[rhs_spec[0]]
        positions = tuple(out_shape[d] for d in out_spec[2:])
        batch = out_shape[out_spec[0]]
        batch_inner = lhs_spec[0] == lhs.aval.ndim - 1 and batch > 1
        spatial_inner = lhs.aval.ndim - 1 in lhs_spec[2:] and not batch_inner
        row_shape = (*positions, batch) if batch_inner else (batch, *positions)
        if batch_inner:
            depth_shape = (*window, in_features)
        elif spatial_inner:
            depth_shape = (in_features, *window)
        else:
            depth_shape = (*window, in_features)
        transposed_patches = batch_inner or spatial_inner
        patch_shape = (
            (*depth_shape, *row_shape) if transposed_patches else (*row_shape, *depth_shape)
        )
        rows = math.prod(row_shape)
        depth = math.prod(window) * in_features

        patches = K.Buffer(f"t{next(_counter)}", dtype, rows * depth)
        builder = KernelBuilder(self.producer, self.buffer_of)

        def gather(index):
            if batch_inner:
                offsets, c, at, n = (
                    index[:spatial],
                    index[spatial],
                    index[spatial + 1 : -1],
                    index[-1],
                )
            elif spatial_inner:
                c, offsets, n, at = (
                    index[0],
                    index[1 : 1 + spatial],
                    index[1 + spatial],
                    index[2 + spatial :],
                )
            else:
                n, at, offsets, c = (
                    index[0],
                    index[1 : 1 + spatial],
                    index[1 + spatial : -1],
                    index[-1],
                )
            value = _window_element(builder, eqn, n, at, offsets, c)
            return [K.Store(patches, _flat_offset(index, patch_shape), value)]

        self._kernel(builder, [patches], loop_nest(patch_shape, gather), self._fused_eqns([eqn]))
        depth_dims = [rhs_spec[1], *rhs_spec[2:]] if spatial_inner else [*rhs_spec[2:], rhs_spec[1]]
        weights, transposed = self._gemm_operand(rhs, [], depth_dims, dtype, contract_first=True)
        out = self.buffer_of[out_var]
        row_dims = (*out_spec[2:], out_spec[0]) if batch_inner else (out_spec[0], *out_spec[2:])
        features_last = (*row_dims, out_spec[1]) == tuple(range(len(out_shape)))
        product = out if features_last else K.Buffer(f"t{next(_counter)}", dtype, out.size)
        shape = (rows, out_features, depth)
        gemm = (patches, weights, product, 1, *shape, transposed_patches, transposed)
        self.steps.append(GemmStep(*gemm, eqn))
        if not features_last:
            self._relayout(product, [*row_dims, out_spec[1]], out, out_shape)

    def _conv_contraction(self, eqn: JaxprEqn) -> None:
        """A convolution as one kernel in a GEMM's form, whose operands are gathered as it
        reads them (an implicit GEMM): out[r, c] = sum over k of window[r, k] * weight[k, c],
        r an output position (its batch element and place), c an output feature, k an input
        feature and window element in the weights' own order, window[r, k] the input element
        under it (zero where the window leaves the padded input). The output is written in
        its layout. A GPU renders this form as a tiled product (`render.tiled_product`)."""
        rhs = eqn.invars[1]
        _, rhs_spec, out_spec = eqn.params["dimension_numbers"]
        out_var = eqn.outvars[0]
        out_shape, dtype = out_var.aval.shape, np.dtype(out_var.aval.dtype)
        positions = (out_shape[out_spec[0]], *(out_shape[d] for d in out_spec[2:]))
        depth_dims = sorted(d for d in range(rhs.aval.ndim) if d != rhs_spec[0])  # stored order
        depth = tuple(rhs.aval.shape[d] for d in depth_dims)
        features = rhs.aval.shape[rhs_spec[0]]
        builder = KernelBuilder(self.producer, self.buffer_of)
        row, column, term = K.Index("row"), K.Index("column"), K.Index("term")
        place = split_offset(row, positions)  # (batch element, *window place)
        within = dict(zip(depth_dims, split_offset(term, depth)))  # weight dim -> index
        offsets = [within[d] for d in rhs_spec[2:]]
        window = _window_element(builder, eqn, place[0], place[1:], offsets, within[rhs_spec[1]])
        rhs_index = [within.get(d, column) for d in range(rhs.aval.ndim)]
        weight = builder.element(rhs, rhs_index)
        total = K.Acc("total", dtype)
        out_index = [None] * len(out_shape)
        out_index[out_spec[0]], out_index[out_spec[1]] = place[0], column
        for d, at in zip(out_spec[2:], place[1:]):
            out_index[d] = at
        out = self.buffer_of[out_var]
        product = K.binary("add", total.read(), K.binary("mul", window, weight))
        nest = K.Loop(row, 0, math.prod(positions), [
            K.Loop(column, 0, features, [
                K.SetAcc(total, K.const(0, dtype)),
                K.Loop(term, 0, math.prod(depth), [K.SetAcc(total, product)]),
                K.Store(out, _flat_offset(out_index, out_shape), total.read()),
            ])
        ])  # fmt: skip
        self._kernel(builder, [out], [nest], self._fused_eqns([eqn]))

    def _dilated_conv_gemm(self, eqn: JaxprEqn) -> None:
        """A convolution of an input spread apart (lhs_dilation > 1, the form a strided
        convolution's input gradient takes) as a GEMM over the input's actual elements, not
        the zeros between them: products[(n, u), (w, o)] = sum_c lhs[n, c, u] rhs[o, c, w] for
        every input position u and window element w, then each output element sums the
        products whose input lands in its window (one load per window element, a fused
        kernel). This does 1/prod(lhs_dilation) of the gathered-window GEMM's work."""
        lhs, rhs = eqn.invars
        p = eqn.params
        lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
        out_var = eqn.outvars[0]
        out_shape = out_var.aval.shape
        dtype = np.dtype(out_var.aval.dtype)
        spatial = len(rhs_spec) - 2
        in_features = lhs.aval.shape[lhs_spec[1]]
        lhs_free = [d for d in range(lhs.aval.ndim) if d != lhs_spec[1]]
        rhs_free = [d for d in range(rhs.aval.ndim) if d != rhs_spec[1]]
        rows = math.prod(lhs.aval.shape[d] for d in lhs_free)
        cols = math.prod(rhs.aval.shape[d] for d in rhs_free)
        inputs, inputs_transposed = self._gemm_operand(lhs, [], [lhs_spec[1]], dtype)
        weights, weights_transposed = self._gemm_operand(
            rhs, [], [rhs_spec[1]], dtype, contract_first=True
        )
        products = K.Buffer(f"t{next(_counter)}", dtype, rows * cols)
        gemm = (inputs, weights, products, 1, rows, cols, in_features)
        self.steps.append(GemmStep(*gemm, inputs_transposed, weights_transposed, eqn))

        builder = KernelBuilder(self.producer, self.buffer_of)
        builder.reads(products)
        out = self.buffer_of[out_var]
        window = [rhs.aval.shape[d] for d in rhs_spec[2:]]

        def gather(index):
            at = [index[d] for d in out_spec[2:]]
            total = K.const(0, dtype)
            for offsets in itertools.product(*(range(w) for w in window)):
                lhs_index = [None] * lhs.aval.ndim
                rhs_index = [None] * rhs.aval.ndim
                lhs_index[lhs_spec[0]] = index[out_spec[0]]
                rhs_index[rhs_spec[0]] = index[out_spec[1]]
                inside = []
                for d in range(spatial):
                    lhs_index[lhs_spec[2 + d]], ok = window_position(
                        at[d],
                        K.const(offsets[d], K.INDEX),
                        1,
                        p["rhs_dilation"][d],
                        p["padding"][d][0],
                        p["lhs_dilation"][d],
                        lhs.aval.shape[lhs_spec[2 + d]],
                    )
                    rhs_index[rhs_spec[2 + d]] = K.const(offsets[d], K.INDEX)
                    inside.append(ok)
                row = _flat_offset(
                    [lhs_index[d] for d in lhs_free], [lhs.aval.shape[d] for d in lhs_free]
                )
                col = _flat_offset(
                    [rhs_index[d] for d in rhs_free], [rhs.aval.shape[d] for d in rhs_free]
                )
                value = K.Load(products, row * K.const(cols, K.INDEX) + col)
                for ok in inside:
                    value = K.select(ok, value, K.const(0, dtype))
                total = total + value
            return [K.Store(out, _flat_offset(index, out_shape), total)]

        # The output's elements in the products' order, features last: an element's products
        # are a window's columns of one row, its neighbour's the next feature's.
        order = (out_spec[0], *out_spec[2:], out_spec[1])

        def in_order(walked):
            index = [None] * len(out_shape)
            for d, i in zip(order, walked):
                index[d] = i
            return gather(index)

        walk = loop_nest(tuple(out_shape[d] for d in order), in_order)
        self._kernel(builder, [out], walk, [eqn])

    def _gemm_operand(self, var, batch_dims, contract_dims, dtype, contract_first=False):
        """A buffer holding `var` in `dtype` as row-major matrices (batch, rows, cols) and
        whether it is stored transposed. A buffer of that dtype already laid out so is used as
        it is; anything else is copied (and converted) into that layout by a fused kernel."""
        ndim = var.aval.ndim
        free = [d for d in range(ndim) if d not in batch_dims and d not in contract_dims]
        contract = list(contract_dims)
        base, dims_in_base = self._through_transposes(var)
        if base in self.buffer_of and np.dtype(var.aval.dtype) == dtype:
            placed = [dims_in_base[d] for d in batch_dims]
            if placed == list(range(len(batch_dims))):
                rest = list(range(len(batch_dims), ndim))
                free_in_base = [dims_in_base[d] for d in free]
                contract_in_base = [dims_in_base[d] for d in contract]
                straight = free_in_base + contract_in_base
                flipped = contract_in_base + free_in_base
                if contract_first:
                    straight, flipped = flipped, straight
                if rest == straight:
                    return self.buffer_of[base], False
                if rest == flipped:
                    return self.buffer_of[base], True
        order = list(batch_dims) + (contract + free if contract_first else free + contract)
        return self._copied_operand(var, order, dtype), False

    def _copied_operand(self, var, order: list, dtype: np.dtype) -> K.Buffer:
        """A buffer holding `var` in `dtype`, its dimensions in `order`, written by a fused
        kernel."""
        ndim = var.aval.ndim
        order = order + [d for d in range(ndim) if d not in order]
        shape = tuple(var.aval.shape[d] for d in order)
        buffer = K.Buffer(f"t{next(_counter)}", dtype, var.aval.size)
        builder = KernelBuilder(self.producer, self.buffer_of)

        def body(index):
            source = [None] * ndim
            for position, d in enumerate(order):
                source[d] = index[position]
            value = K.cast(builder.element(var, source), dtype)
            return [K.Store(buffer, _flat_offset(index, shape), value)]

        self._kernel(builder, [buffer], loop_nest(shape, body), [])
        return buffer

    def _through_transposes(self, var):
        """The variable a chain of fused transposes reads, and where each of `var`'s
        dimensions lies in it."""
        dims = list(range(var.aval.ndim))
        while var not in self.buffer_of and self.producer[var].primitive.name == "transpose":
            eqn = self.producer[var]
            permutation = eqn.params["permutation"]
            dims = [permutation[d] for d in dims]
            var = eqn.invars[0]
        return var, dims

    def _outputs(self, eqn: JaxprEqn) -> list[K.Buffer]:
        return [self.buffer_of[v] for v in eqn.outvars]

    def _cond(self, eqn: JaxprEqn) -> None:
        index, *operands = map(self._source, eqn.invars)
        branches = [self._inner(b) for b in eqn.params["branches"]]
        self.steps.append(CondStep(index, branches, operands, self._outputs(eqn)))

    def _while(self, eqn: JaxprEqn) -> None:
        p = eqn.params
        sources = list(map(self._source, eqn.invars))
        cond_consts = sources[: p["cond_nconsts"]]
        body_consts = sources[p["cond_nconsts"] : p["cond_nconsts"] + p["body_nconsts"]]
        init = sources[p["cond_nconsts"] + p["body_nconsts"] :]
        self.steps.append(
            WhileStep(
                self._inner(p["cond_jaxpr"]),
                self._inner(p["body_jaxpr"]),
                cond_consts,
                body_consts,
                init,
                self._outputs(eqn),
            )
        )

    def _scan(self, eqn: JaxprEqn) -> None:
        p = eqn.params
        sources = list(map(self._source, eqn.invars))
        num_consts, num_carry = p["num_consts"], p["num_carry"]
        outputs = self._outputs(eqn)
        self.steps.append(
            ScanStep(
                self._inner(p["jaxpr"]),
                sources[:num_consts],
                sources[num_consts : num_consts + num_carry],
                sources[num_consts + num_carry :],
                outputs[:num_carry],
                outputs[num_carry:],
                p["length"],
                p["reverse"],
            )
        )
