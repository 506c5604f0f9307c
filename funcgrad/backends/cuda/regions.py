"""Control flow on the device: a cond, while_loop or scan whose regions do little work per pass
runs as one kernel on one block, its branches and loops in the kernel.

The host walk launches each step of a region separately and reads a cond's index or a while's
predicate back from the device, which waits for everything launched before; a scan of a
thousand small steps pays a thousand rounds of launches. A region's kernel instead calls the
kernels of its programs as `__device__` functions (the same statements as their `__global__`
forms: on one block a grid-stride loop strides over the block, a block per row takes every row
in turn, and a block reduction is the block's), runs its GEMMs as the prelude's block GEMM,
copies carries and slices with every thread, and reads predicates and branch indices from
device memory. A `__syncthreads()` follows every step, so each step's writes are visible to
the steps after it and no thread overwrites what another still reads.
"""

from __future__ import annotations

import itertools

import numpy as np

from funcgrad import dtypes
from funcgrad.backends.cuda.render import (
    HALVES,
    LAUNCH_BLOCK,
    SHARED_BYTES,
    CudaKernel,
    constant_text,
    memory_type,
)
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.memory import bound_inputs, step_buffers
from funcgrad.compiler.parallel import work
from funcgrad.compiler.schedule import (
    CONTROL_STEPS,
    CondStep,
    GemmStep,
    KernelStep,
    Program,
    ScanStep,
    WhileStep,
    all_steps,
    inner_programs,
    visit,
)

# Work of one pass through a region (a branch, a loop's iteration: its kernels' innermost
# statements, its GEMMs' multiply-adds) up to which it runs on one block. A launch costs the
# host walk about 10 us; a multiprocessor does a few hundred thousand such operations in
# that time. (To be tuned on a GPU.)
REGION_WORK = 1 << 18


def device_regions(program: Program, kernels: dict) -> list:
    """The control-flow steps of `program` (and of the programs its steps hold) to run on the
    device, outermost first: those whose regions hold only kernels, GEMMs and control flow,
    doing at most `REGION_WORK` per pass, and whose kernels' shared arrays fit one block
    together. `kernels` maps each `KernelStep` to its rendered kernel."""
    found = []
    for step in program.steps:
        if isinstance(step, CONTROL_STEPS) and _fits(step, kernels):
            found.append(step)
        else:
            for inner in inner_programs(step):
                found += device_regions(inner, kernels)
    return found


def inner_kernels(step) -> list[KernelStep]:
    """The kernel steps a control-flow step's programs hold, at any depth."""
    return [s for p in inner_programs(step) for s in all_steps(p) if isinstance(s, KernelStep)]


def _fits(step, kernels: dict) -> bool:
    per_pass = _pass_work(step)
    if per_pass is None or per_pass > REGION_WORK:
        return False
    inner = [kernels[s] for s in inner_kernels(step)]
    if any(k.block > LAUNCH_BLOCK for k in inner):  # (a GPU runs a region on such a block)
        return False
    return sum(k.shared_bytes for k in inner) <= SHARED_BYTES


def _pass_work(step) -> int | None:
    """A branch's or an iteration's work; None when a region holds a step only the host runs
    (a callback, a LAPACK call)."""
    if isinstance(step, CondStep):
        branches = [_work(b.steps) for b in step.branches]
        return None if None in branches else max(branches)
    if isinstance(step, WhileStep):
        cond, body = _work(step.cond.steps), _work(step.body.steps)
        return None if cond is None or body is None else cond + body
    return _work(step.body.steps)


def _work(steps: list) -> int | None:
    """The work of running `steps` once: a scan inside counts its length times, a while
    inside (whose trip count is unknown) once."""
    total = 0
    for step in steps:
        if isinstance(step, KernelStep):
            total += work(step.kernel)
        elif isinstance(step, GemmStep):
            total += step.batch * step.m * step.n * step.k
        elif isinstance(step, CONTROL_STEPS):
            per_pass = _pass_work(step)
            if per_pass is None:
                return None
            total += per_pass * (step.length if isinstance(step, ScanStep) else 1)
        else:
            return None
    return total


def render_region(step, kernels: dict, name: str) -> CudaKernel:
    """The kernel running `step` on one block; `kernels` maps its kernel steps to their
    rendered kernels, which the module holds as `__device__` functions."""
    return _RegionWriter(kernels).render(step, name)


def _gemm_types(dtype: np.dtype) -> str:
    """The block GEMM's template arguments for `dtype`: the element in memory, the sum's type,
    and the conversions between them."""
    if dtype in HALVES:
        half = "f16" if dtype == dtypes.float16 else "bf16"
        return f"unsigned short, float, fg_from_{half}, fg_to_{half}"
    c = memory_type(dtype)
    return f"{c}, {c}, fg_same<{c}>, fg_same<{c}>"


class _RegionWriter:
    def __init__(self, kernels: dict):
        self.kernels = kernels
        self.lines: list[str] = []
        self.indent = "  "
        self.names = itertools.count()
        self.pointers: dict = {}  # buffer -> the C expression of its first element's address

    def emit(self, text: str) -> None:
        self.lines.append(self.indent + text)

    def render(self, step, name: str) -> CudaKernel:
        bound = bound_inputs(Program([], [], [step]))
        params = [b for b in dict.fromkeys(step_buffers(step)) if b not in bound]
        self.pointers = {b: b.name for b in params}
        visit(self, step)
        body = "\n".join(self.lines)
        # (a kernel whose threads hold fixed parts of its rows needs at least its own block)
        block = max((self.kernels[s].block for s in inner_kernels(step)), default=0)
        return CudaKernel(
            name,
            params,
            [False] * len(params),
            1,
            body,
            cooperative=True,
            block=block,
            restricted=False,
        )

    def steps(self, steps: list) -> None:
        for step in steps:
            visit(self, step)

    def kernel(self, step: KernelStep) -> None:
        kernel = self.kernels[step]
        self.emit(f"{kernel.name}({', '.join(self.pointers[b] for b in kernel.params)});")
        self.emit("__syncthreads();")

    def gemm(self, step: GemmStep) -> None:
        lhs, rhs, out = (self.pointers[b] for b in (step.lhs, step.rhs, step.out))
        flags = f"{str(step.transpose_lhs).lower()}, {str(step.transpose_rhs).lower()}"
        addend = "nullptr" if step.addend is None else self.pointers[step.addend]
        scales = ", ".join(constant_text(v, step.out.dtype) for v in (step.alpha, step.beta))
        self.emit(
            f"fg_block_gemm<{_gemm_types(step.out.dtype)}>({lhs}, {rhs}, {out}, "
            f"{step.batch}LL, {step.m}LL, {step.n}LL, {step.k}LL, {flags}, {addend}, {scales});"
        )
        self.emit("__syncthreads();")

    def bind(self, program: Program, sources: list[str]) -> None:
        for buffer, source in zip(program.inputs, sources):
            self.pointers[buffer] = source

    def copy(self, pairs: list[tuple[str, str, K.Buffer]]) -> None:
        """Copies (destination, source, buffer giving the size) with every thread, then waits."""
        for destination, source, buffer in pairs:
            self.emit(f"fg_block_copy({destination}, {source}, {buffer.size}LL);")
        if pairs:
            self.emit("__syncthreads();")

    def copy_all(self, destinations: list[K.Buffer], sources: list[K.Buffer]) -> None:
        self.copy([(self.pointers[d], self.pointers[s], d) for d, s in zip(destinations, sources)])

    def read_flag(self, text: str, hint: str) -> str:
        """A control value every thread reads, then waits, so that no step after it can
        overwrite it while a thread still reads."""
        name = f"{hint}{next(self.names)}"
        self.emit(f"const long long {name} = (long long){text};")
        self.emit("__syncthreads();")
        return name

    def nested(self, head: str, body) -> None:
        self.emit(f"{head} {{")
        outer = self.indent
        self.indent += "  "
        body()
        self.indent = outer
        self.emit("}")

    def cond(self, step: CondStep) -> None:
        index = self.read_flag(f"{self.pointers[step.index]}[0]", "branch")
        last = len(step.branches) - 1
        outer = self.indent
        for k, branch in enumerate(step.branches):
            if k == 0:
                self.emit(f"if ({index} <= 0) {{" if last else "{")
            else:
                self.emit(f"}} else if ({index} == {k}) {{" if k < last else "} else {")
            self.indent = outer + "  "
            self.bind(branch, [self.pointers[b] for b in step.operands])
            self.steps(branch.steps)
            self.copy_all(step.outputs, branch.outputs)
            self.indent = outer
        self.emit("}")

    def while_loop(self, step: WhileStep) -> None:
        self.copy_all(step.carry, step.init)

        def iteration():
            self.bind(step.cond, [self.pointers[b] for b in step.cond_consts + step.carry])
            self.steps(step.cond.steps)
            going = self.read_flag(f"{self.pointers[step.cond.outputs[0]]}[0]", "going")
            self.emit(f"if (!{going}) break;")
            self.bind(step.body, [self.pointers[b] for b in step.body_consts + step.carry])
            self.steps(step.body.steps)
            self.copy_all(step.carry, step.body.outputs)

        self.nested("for (;;)", iteration)

    def scan(self, step: ScanStep) -> None:
        self.copy_all(step.carry, step.init)
        body = step.body
        counter = f"i{next(self.names)}"
        position = f"p{next(self.names)}"
        num_carry = len(step.carry)

        def iteration():
            at = f"{step.length - 1}LL - {counter}" if step.reverse else counter
            self.emit(f"const long long {position} = {at};")
            inner_xs = body.inputs[len(step.consts) + len(step.init) :]
            slices = [
                f"({self.pointers[xs]} + {position} * {inner.size}LL)"
                for xs, inner in zip(step.xs, inner_xs)
            ]
            self.bind(body, [self.pointers[b] for b in step.consts + step.carry] + slices)
            self.steps(body.steps)
            carries = [
                (self.pointers[c], self.pointers[out], c)
                for c, out in zip(step.carry, body.outputs[:num_carry])
            ]
            stacked = [
                (f"({self.pointers[ys]} + {position} * {y.size}LL)", self.pointers[y], y)
                for ys, y in zip(step.ys, body.outputs[num_carry:])
            ]
            self.copy(carries + stacked)

        self.nested(
            f"for (long long {counter} = 0; {counter} < {step.length}LL; ++{counter})", iteration
        )
