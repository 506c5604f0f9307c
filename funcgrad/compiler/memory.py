"""Memory planning: every intermediate buffer of a program gets an offset in one arena.

Two buffers may share memory when no step needs both: a buffer lives from the first top-level
step that touches it to the last. The buffers of a control-flow region's programs live for the
whole region (a loop body runs many times). Offsets are assigned first-fit in order of first
use, aligned for vector loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.lapack import FortranCall
from funcgrad.compiler.schedule import (
    CallbackStep,
    CondStep,
    GemmStep,
    KernelStep,
    Program,
    ScanStep,
    TileStep,
    WhileStep,
    inner_programs,
)

ALIGNMENT = 64


def nbytes(buffer: K.Buffer) -> int:
    return buffer.size * buffer.dtype.itemsize


@dataclass
class MemoryPlan:
    offsets: dict  # arena buffer -> byte offset
    arena_bytes: int
    argument_bytes: int
    output_bytes: int
    constant_bytes: int

    def __str__(self) -> str:
        return self.as_text()

    def as_text(self) -> str:
        lines = [
            f"arena {self.arena_bytes} bytes, arguments {self.argument_bytes}, outputs "
            f"{self.output_bytes}, constants {self.constant_bytes}"
        ]
        for buffer, offset in sorted(self.offsets.items(), key=lambda item: item[1]):
            lines.append(f"  {buffer.name}: [{offset}, {offset + nbytes(buffer)})")
        return "\n".join(lines)


def step_buffers(step) -> list[K.Buffer]:
    """Every buffer a step touches, those of the programs it holds included."""
    if isinstance(step, KernelStep):
        return step.kernel.buffers
    if isinstance(step, CallbackStep):
        return [*step.operands, *step.results]
    if isinstance(step, (GemmStep, TileStep)):
        addend = [step.addend] if step.addend is not None else []
        return [*step.operands, *addend, step.out]
    if isinstance(step, FortranCall):
        return [a[0] for a in step.args if isinstance(a, tuple)]
    if isinstance(step, CondStep):
        own = [step.index, *step.operands, *step.outputs]
        return own + [b for branch in step.branches for b in program_buffers(branch)]
    if isinstance(step, WhileStep):
        own = [*step.cond_consts, *step.body_consts, *step.init, *step.carry]
        return own + program_buffers(step.cond) + program_buffers(step.body)
    if isinstance(step, ScanStep):
        own = [*step.consts, *step.init, *step.xs, *step.carry, *step.ys]
        return own + program_buffers(step.body)
    raise TypeError(f"unknown step {step!r}")


def program_buffers(program: Program) -> list[K.Buffer]:
    found = list(program.outputs)
    for step in program.steps:
        found += step_buffers(step)
    return found


def constants(program: Program) -> dict:
    """Every baked-in constant of a program and of the programs it holds."""
    found = dict(program.consts)
    for step in program.steps:
        for inner in inner_programs(step):
            found.update(constants(inner))
    return found


def bound_inputs(program: Program) -> set:
    """Inputs of inner programs: bound to other buffers when their region runs."""
    bound = set()
    for step in program.steps:
        for inner in inner_programs(step):
            bound.update(inner.inputs)
            bound |= bound_inputs(inner)
    return bound


def plan_memory(program: Program) -> MemoryPlan:
    consts = constants(program)
    outside = set(program.inputs) | set(program.outputs) | set(consts) | bound_inputs(program)
    live: dict = {}  # buffer -> [first step, last step]
    for t, step in enumerate(program.steps):
        for buffer in step_buffers(step):
            if buffer in outside:
                continue
            span = live.setdefault(buffer, [t, t])
            span[1] = t
    placed: list = []  # (offset, end offset, first step, last step)
    offsets = {}
    arena = 0
    for buffer, (first, last) in sorted(live.items(), key=lambda item: item[1][0]):
        size = max(nbytes(buffer), 1)
        busy = sorted((o, e) for o, e, f, l in placed if f <= last and first <= l)
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, _aligned(end))
        offsets[buffer] = offset
        placed.append((offset, offset + size, first, last))
        arena = max(arena, offset + size)
    return MemoryPlan(
        offsets,
        _aligned(arena),
        sum(nbytes(b) for b in program.inputs),
        sum(nbytes(b) for b in program.outputs),
        sum(nbytes(b) for b in consts),
    )


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT
