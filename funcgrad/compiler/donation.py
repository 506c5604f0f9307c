"""Donated inputs: which outputs of a program may be written into the memory of which inputs.

`jit(f, donate_argnums=...)` promises that the caller will not use the donated arguments
again, so an output of the same shape and dtype can take over an argument's buffer instead of
a fresh one (an optimizer step then updates parameters in place). The program stays correct
when the output is written where the input lives only if every read of the input happens
before the element it reads is overwritten. Two cases are proven here, on the kernel IR:

- every step reading the input comes before the first step writing the output, or
- the step writing the output is a kernel that is also the input's last reader, and it is
  pointwise for the pair: one store to the output, in the innermost loop of a nest whose every
  index (of a loop of more than one iteration) it depends on, or in no loop (a scalar's), and
  each load of the input in that same body at the store's very offset, before the store.
  Each element is then read before it is written and never read again. Or its first
  statement is such a nest and nothing after it reads the input: a scatter's copy of its
  operand, then its updates written over the copy;
- the step writing the output is a GEMM updating the input (`GemmStep.addend`, an optimizer's
  `w - lr * grad`), which reads it nowhere else: the library then updates it in place; so
  are a product's register tiles updating it (`TileStep.addend`), each element read just
  before it is written, once.

The output must be written only by kernels or such a GEMM (control-flow regions and other
library calls keep their own buffers). Renderers give an aliased output the input's pointer,
and pass one pointer for the pair to a kernel that touches both, so the code sees the
in-place update it performs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Sequence

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.memory import step_buffers
from funcgrad.compiler.schedule import (
    CondStep,
    GemmStep,
    KernelStep,
    Program,
    ScanStep,
    TileStep,
    WhileStep,
    all_steps,
)
from funcgrad.ir import ClosedJaxpr


def donated_outputs(program: Program, donated: Sequence[int]) -> dict[int, int]:
    """{output index: donated input index} for the outputs that can live in a donated input's
    buffer; each input hosts at most one output."""
    touching = [set(step_buffers(step)) for step in program.steps]
    chosen: dict[int, int] = {}
    free = [i for i in donated if i < len(program.inputs)]
    for k, out in enumerate(program.outputs):
        for i in free:
            if _may_host(program.steps, touching, program.inputs[i], out):
                chosen[k] = i
                free.remove(i)
                break
    return chosen


def carries_in_place(body: Program, first: int, count: int) -> dict[int, int]:
    """{carry output k: body input first + k} for the carries of a loop's body that may be
    written where the loop keeps them (its carry inputs, which the next iteration reads as
    they are left), by the rules above: the loop then copies no carry back each iteration
    (a scan updating a row of a 1024x1024 carry copied all of it 1024 times)."""
    touching = [set(step_buffers(step)) for step in body.steps]
    return {
        k: first + k
        for k in range(count)
        if _may_host(body.steps, touching, body.inputs[first + k], body.outputs[k])
    }


def carry_readers_first(program: Program) -> None:
    """In each loop body of the program (and of the programs it holds), move the kernels that
    read a carry input after the first step writing that carry's output to just before it,
    where nothing between depends on them or they on it: the carry may then be updated in
    place (`carries_in_place`; a scan returning its old carry as y read it after the new
    one was written, so the whole carry was copied back each iteration)."""
    for step in all_steps(program):
        if isinstance(step, ScanStep):
            _readers_first(step.body, len(step.consts), len(step.carry))
        elif isinstance(step, WhileStep):
            _readers_first(step.body, len(step.body_consts), len(step.carry))


def _readers_first(body: Program, first: int, count: int) -> None:
    steps = body.steps
    for k in range(count):
        source, out = body.inputs[first + k], body.outputs[k]
        writers = [t for t, step in enumerate(steps) if _writes(step, out)]
        if not writers:
            continue
        target = writers[0]
        for t in range(target + 1, len(steps)):
            step = steps[t]
            if not isinstance(step, KernelStep) or source not in step.kernel.inputs:
                continue
            if all(_independent(step, steps[u]) for u in range(target, t)):
                steps.insert(target, steps.pop(t))
                target += 1


def _independent(moved: KernelStep, other) -> bool:
    """Whether kernel `moved` may run before step `other` (which ran first): neither writes
    what the other touches."""
    reads, writes = set(moved.kernel.inputs), set(moved.kernel.outputs)
    if isinstance(other, KernelStep):
        other_reads, other_writes = set(other.kernel.inputs), set(other.kernel.outputs)
    else:
        other_reads = other_writes = set(step_buffers(other))
    return not (reads & other_writes or writes & (other_reads | other_writes))


def _may_host(steps: list, touching: list, source: K.Buffer, out: K.Buffer) -> bool:
    """Whether output `out` may be written in input `source`'s memory."""
    if source.dtype != out.dtype or source.size != out.size:
        return False
    writers = [t for t, step in enumerate(steps) if _writes(step, out)]
    readers = [t for t, buffers in enumerate(touching) if source in buffers]
    if not writers or (readers and readers[-1] > writers[0]):
        return False
    if len(writers) == 1 and isinstance(steps[writers[0]], CondStep):
        return _cond_in_place(steps[writers[0]], source, out)
    if any(not isinstance(steps[t], (KernelStep, GemmStep, TileStep)) for t in writers):
        return False
    return _in_place(steps, writers, readers, source, out)


def _cond_in_place(cond: CondStep, source: K.Buffer, out: K.Buffer) -> bool:
    """Whether a cond's result `out` may be written in `source`'s memory, the cond reading
    `source` as one operand and every branch's result there allowed in that operand's memory
    (the renderer then binds them so)."""
    places = [p for p, operand in enumerate(cond.operands) if operand is source]
    if len(places) != 1 or cond.index is source:
        return False
    (place,) = places
    result = next(j for j, b in enumerate(cond.outputs) if b is out)
    for branch in cond.branches:
        touching = [set(step_buffers(step)) for step in branch.steps]
        if not _may_host(branch.steps, touching, branch.inputs[place], branch.outputs[result]):
            return False
    return True


def warn_unusable(closed: ClosedJaxpr, unusable: list[int]) -> None:
    """Warns, at the user's call, of donated arguments no output can live in."""
    if not unusable:
        return
    avals = ", ".join(closed.in_avals[i].str_short() for i in unusable)
    # Point the warning at the user's call, past funcgrad's own frames.
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"some donated buffers were not usable: {avals} (no output of the same shape and "
        "dtype is computed after, or elementwise with, the last read of them)",
        stacklevel=level,
    )


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hosted(kernel: K.Kernel, output: K.Buffer, host: K.Buffer) -> K.Kernel:
    """`kernel` with its accesses to `output` made to `host` (the donated input whose memory
    the output takes over), for renderers that give each buffer its own `restrict` pointer:
    a kernel reading the input and writing the output then sees one buffer updated in place.
    Shared expression nodes stay shared."""
    rebuilt: dict[int, K.Expr] = {}

    def expr(e: K.Expr) -> K.Expr:
        done = rebuilt.get(id(e))
        if done is not None:
            return done
        if isinstance(e, K.Load):
            new = K.Load(host if e.buffer is output else e.buffer, expr(e.offset))
        elif isinstance(e, K.Unary):
            new = K.Unary(e.op, expr(e.x))
        elif isinstance(e, K.Binary):
            new = K.Binary(e.op, expr(e.a), expr(e.b), e.contract)
        elif isinstance(e, K.Select):
            new = K.Select(expr(e.pred), expr(e.on_true), expr(e.on_false))
        elif isinstance(e, (K.Cast, K.Bitcast)):
            new = type(e)(expr(e.x), e.dtype)
        elif isinstance(e, K.Lookup):
            new = K.Lookup(e.table, expr(e.index), e.dtype)
        else:  # constants, indices and accumulator reads name no buffer
            new = e
        rebuilt[id(e)] = new
        return new

    def statement(s):
        if isinstance(s, K.Loop):
            return K.Loop(s.index, s.start, s.stop, [statement(t) for t in s.body])
        if isinstance(s, K.Store):
            buffer = host if s.buffer is output else s.buffer
            return dataclasses.replace(s, buffer=buffer, offset=expr(s.offset), value=expr(s.value))
        return K.SetAcc(s.acc, expr(s.value))

    outputs = [host if b is output else b for b in kernel.outputs]
    inputs = [b for b in kernel.inputs if b not in outputs]
    body = [statement(s) for s in kernel.body]
    return dataclasses.replace(
        kernel, inputs=inputs, outputs=outputs, body=body, scratch=list(kernel.scratch)
    )


def _in_place(steps: list, writers: list[int], readers: list[int], source, out) -> bool:
    """Whether `out` may be written where `source` is, given the steps writing the one and
    reading the other, none reading it after the first write (see the module's notes)."""
    first_write = writers[0]
    if any(isinstance(steps[t], (GemmStep, TileStep)) for t in writers):
        product = steps[first_write]
        return len(writers) == 1 and product.addend is source and source not in product.operands
    if not readers or readers[-1] < first_write:
        return True
    if len(writers) != 1:
        return False
    kernel = steps[first_write].kernel
    return _pointwise(kernel, source, out) or _copied_then_written(kernel, source, out)


def _writes(step, buffer: K.Buffer) -> bool:
    if isinstance(step, KernelStep):
        return buffer in step.kernel.outputs
    if isinstance(step, (GemmStep, TileStep)):
        return buffer is step.out
    return buffer in step_buffers(step)


def _pointwise(kernel: K.Kernel, source: K.Buffer, out: K.Buffer) -> bool:
    stores = [(loops, s) for loops, s in _statements(kernel.body, []) if _stores(s, out)]
    if len(stores) != 1:
        return False
    loops, store = stores[0]
    used = set(_indices(store.offset))
    if any(loop.index not in used and loop.stop - loop.start > 1 for loop in loops):
        return False
    body = loops[-1].body if loops else kernel.body  # (a scalar's store, made once)
    if store not in body:
        return False
    position = body.index(store)
    for _, statement in _statements(kernel.body, []):
        for load in _loads(statement, source):
            if statement not in body[: position + 1] or not K.same(load.offset, store.offset):
                return False
        if isinstance(statement, K.Store) and statement.buffer is source:
            return False
    return True


def _copied_then_written(kernel: K.Kernel, source: K.Buffer, out: K.Buffer) -> bool:
    """Whether the kernel first makes `out` from `source` pointwise (a scatter's copy of its
    operand) and reads `source` nowhere after: in the source's memory the copy is made in
    place (a plain copy, none), and what follows writes there what it wrote in `out`."""
    first, rest = kernel.body[0], kernel.body[1:]
    head = dataclasses.replace(kernel, body=[first])
    if not rest or not _pointwise(head, source, out):
        return False
    for _, statement in _statements(rest, []):
        if _loads(statement, source) or _stores(statement, source):
            return False
    return True


def _statements(body: list, loops: list):
    """(enclosing loops, statement) for every store and accumulator update, in order."""
    for statement in body:
        if isinstance(statement, K.Loop):
            yield from _statements(statement.body, [*loops, statement])
        else:
            yield loops, statement


def _stores(statement, buffer: K.Buffer) -> bool:
    return isinstance(statement, K.Store) and statement.buffer is buffer


def _loads(statement, buffer: K.Buffer) -> list[K.Load]:
    roots = [statement.value] + ([statement.offset] if isinstance(statement, K.Store) else [])
    found = [e for root in roots for e in K.nodes(root)]
    return [e for e in found if isinstance(e, K.Load) and e.buffer is buffer]


def _indices(expr: K.Expr) -> list[K.Index]:
    return [e for e in K.nodes(expr) if isinstance(e, K.Index)]
