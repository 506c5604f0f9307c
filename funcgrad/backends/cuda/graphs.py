"""When a jitted program replays as one CUDA graph.

A call walked step by step pays the host's cost of every launch (CuPy's argument packing, the
driver's launch): several microseconds each, which a program of many small kernels pays
many times over. Captured once as a graph, the whole call is one launch. The graph names
device addresses, so it runs over buffers of the executable's own: it copies the call's
arguments into them and its results out, with a copy kernel at each end whose table of
addresses the call writes. An argument on the device is read where it is, by a graph captured
for that place (a closed-over constant keeps one; a training loop's parameters, each call's
the last one's results, take turns in the few places the memory pool hands out), up to a few
places, past which it is copied in; a result that only the program's own kernels touch is
written in place, its kernels reading its address from a slot the call writes. A
program is replayed when it launches more than those two kernels, and its copies are small
beside the launches they save; and only when nothing in it needs the host mid-call (a
predicate read back, a callback) or allocates as it runs (a decomposition's solver
workspaces).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from funcgrad.compiler.memory import nbytes
from funcgrad.compiler.schedule import GemmStep, KernelStep, Program, ScanStep

# A graph's nodes cost memory and instantiation time (a few microseconds each); past this a
# long host-walked scan runs launch by launch.
MAX_LAUNCHES = 10_000
# Bytes a call may copy in and out per launch the graph saves. On an H100 a launch of the walk
# cost about 20 us of the host's time (benchmarks/gpu.py, 8 small layers: 401 us walked, 56 us
# replayed, 17 launches), in which the device copies about 30 MB (3 TB/s, each byte read and
# written); half that leaves a margin.
COPY_BYTES_PER_LAUNCH = 16 << 20
# Replays keep their buffers between calls. Once one device's replays hold more than this
# share of its memory, the least recently used let theirs go (captured again if called).
HELD_SHARE = 1 / 8


def launches(steps: list, on_device: dict) -> int | None:
    """The launches (kernels, GEMMs, copies) one pass over `steps` makes, or None when a step
    needs the host mid-call. `on_device`: the steps running as one kernel (device regions)."""
    total = 0
    for step in steps:
        if step in on_device or isinstance(step, (KernelStep, GemmStep)):
            total += 1
        elif isinstance(step, ScanStep):
            body = launches(step.body.steps, on_device)
            if body is None:
                return None
            per_step = body + len(step.carry) + len(step.ys)
            total += len(step.carry) + step.length * per_step
        else:
            return None
    return total


# The launches a graph adds: a copy kernel in, and one out (`executable._Copies`).
COPY_LAUNCHES = 2


def capturable(program: Program, on_device: dict) -> int | None:
    """The launches of a program that a graph may replay; None when a step needs the host
    mid-call, when there are too many, or when they are no more than the copy kernels a
    graph adds."""
    count = launches(program.steps, on_device)
    if count is None or count > MAX_LAUNCHES or count <= COPY_LAUNCHES:
        return None
    return count


def worth_a_graph(count: int, copied: list) -> bool:
    """Whether replaying `count` launches saves more than copying the buffers `copied` (the
    arguments not read in place, and the results) costs the device."""
    return sum(nbytes(buffer) for buffer in copied) <= count * COPY_BYTES_PER_LAUNCH


class Held:
    """The replays holding a device's memory, least recently used first, with their bytes.
    Each is held weakly: a replay lives as long as its program (`CudaExecutable._replays`),
    which lives as long as the jaxpr it was compiled from (`transforms.jit._compile`), and its
    bytes leave the count with it."""

    def __init__(self):
        self.replays: OrderedDict = OrderedDict()  # {weak reference to a replay: its bytes}
        self.lock = threading.Lock()
        # References whose replays are gone, left by the collector (which may run anywhere,
        # even inside a method here) and taken out of `replays` by the next method.
        self.gone: list = []

    def _purged(self) -> None:
        while self.gone:
            self.replays.pop(self.gone.pop(), None)

    def used(self, replay) -> None:
        with self.lock:
            self._purged()
            key = weakref.ref(replay)
            if key in self.replays:  # (unless another thread's capture just evicted it)
                self.replays.move_to_end(key)

    def drop(self, replay) -> None:
        with self.lock:
            self._purged()
            self.replays.pop(weakref.ref(replay), None)

    def bytes(self) -> int:
        with self.lock:
            self._purged()
            return sum(self.replays.values())

    def release_all(self) -> list:
        with self.lock:
            self._purged()
            released = [key() for key in self.replays]
            self.replays.clear()
        return [replay for replay in released if replay is not None]

    def hold(self, replay, size: int, budget: float) -> list:
        """Adds `replay`; returns those evicted to bring the total within `budget` (never
        the newest)."""
        evicted = []
        with self.lock:
            self._purged()
            self.replays[weakref.ref(replay, self.gone.append)] = size
            total = sum(self.replays.values())
            while total > budget and len(self.replays) > 1:
                oldest, oldest_size = self.replays.popitem(last=False)
                evicted.append(oldest())
                total -= oldest_size
        return [replay for replay in evicted if replay is not None]
