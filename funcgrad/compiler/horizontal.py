"""Horizontal fusion (a GPU's): independent map kernels launched as one kernel.

A training step ends with an update per parameter, each a map kernel of its own, and on a GPU
a small one costs a launch (a microsecond or two of the device's time) for a few hundred
elements. Here, kernels that are each one parallel loop of straight-line statements (maps),
none touching what another writes, become one kernel whose loops every thread runs in turn,
each over the whole grid (`render`: a grid-stride loop per loop, `Kernel.concurrent_loops`).

A map joins the nearest group before it that it could run beside: it moves up to that group
when no step between them writes what it reads or touches what it writes, and it touches
nothing the group writes nor writes what the group reads. The memory plan, made after, sees
the group as one step: its buffers are live at once and share no memory.
"""

from __future__ import annotations

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.memory import step_buffers
from funcgrad.compiler.parallel import parallel_loop
from funcgrad.compiler.schedule import KernelStep, Program

# The most buffers one merged kernel takes (pointers of 8 bytes: a kernel's parameters once had
# 4 KiB in all, and each costs the host a little at every launch); a map that would take a
# group past it starts a group of its own.
MAX_BUFFERS = 128


def merge_maps(program: Program) -> None:
    """Merges `program`'s map kernels (its own steps, not those of its control flow) into
    groups launched as one kernel each."""
    steps: list = []
    accesses: list[tuple[set, set]] = []  # what each of `steps` reads and writes (a group's all)
    groups: dict[int, list] = {}  # position in `steps` -> its maps, (step, loop) each
    for step in program.steps:
        loop = _map_loop(step.kernel) if isinstance(step, KernelStep) else None
        reads, writes = _accesses(step)
        place = _place(reads, writes, accesses, groups) if loop is not None else None
        if place is not None:
            groups[place].append((step, loop))
            accesses[place] = (accesses[place][0] | reads, accesses[place][1] | writes)
            continue
        if loop is not None:
            groups[len(steps)] = [(step, loop)]
        steps.append(step)
        accesses.append((reads, writes))
    for position, maps in groups.items():
        if len(maps) > 1:
            steps[position] = _merged(maps)
    program.steps[:] = steps


def _place(reads: set, writes: set, accesses: list, groups: dict) -> int | None:
    """The position of the nearest earlier group a map reading `reads` and writing `writes`
    may join: none where a step on the way writes what it reads or touches what it writes,
    or where the group would take more than MAX_BUFFERS."""
    for position in range(len(accesses) - 1, -1, -1):
        earlier_reads, earlier_writes = accesses[position]
        if writes & earlier_reads or reads & earlier_writes:  # (reads take in writes)
            return None
        if position in groups:
            return position if len(reads | earlier_reads) <= MAX_BUFFERS else None
    return None


def _map_loop(kernel: K.Kernel) -> K.Loop | None:
    """A map kernel's loop: one parallel loop of stores (no loop inside it, no accumulator or
    scratch), a loop of one iteration, or stores alone (a scalar's), as a loop of one."""
    if kernel.scratch or kernel.independent_outer or kernel.concurrent_loops or not kernel.body:
        return None
    if all(isinstance(s, K.Store) for s in kernel.body):
        return K.Loop(K.fresh_index(), 0, 1, list(kernel.body))
    loop = kernel.body[0]
    if len(kernel.body) != 1 or not isinstance(loop, K.Loop):
        return None
    if not all(isinstance(s, K.Store) for s in loop.body):
        return None
    return loop if loop.stop - loop.start == 1 or parallel_loop(kernel) is loop else None


def _accesses(step) -> tuple[set, set]:
    """The buffers a step reads and those it writes (for steps other than kernels, every
    buffer they touch, both ways)."""
    if isinstance(step, KernelStep):
        kernel = step.kernel
        return set(kernel.inputs) | set(kernel.outputs), set(kernel.outputs)
    touched = set(step_buffers(step))
    return touched, touched


def _merged(maps: list) -> KernelStep:
    """One kernel step of the maps, (step, loop) each."""
    kernels = [step.kernel for step, _ in maps]
    outputs = list(dict.fromkeys(b for k in kernels for b in k.outputs))
    inputs = list(dict.fromkeys(b for k in kernels for b in k.inputs if b not in outputs))
    body = [loop for _, loop in maps]
    kernel = K.Kernel(kernels[0].name, inputs, outputs, body, concurrent_loops=True)
    return KernelStep(kernel, [eqn for step, _ in maps for eqn in step.eqns])
