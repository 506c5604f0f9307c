"""The parallel interpretation behind pmap: one program, run by every device at once.

pmap stages its function once, under an `AxisEnvTrace` that binds the axis name (so
collectives know the axis and its size while tracing), then runs the staged program on every
local device, each on its own thread. A thread runs with a `ShardFrame` saying which device it
is; a collective's implementation finds the frame of its axis and exchanges buffers with the
other devices through the call's `Communicator`: in-process through a barrier, across
processes through MPI (`funcgrad.distributed`). Each collective declares, beside its
primitive (`funcgrad/lax/parallel.py`), a shard rule computing its result from the buffers of
all devices.

A device that fails breaks the barrier, so the others stop at their next collective and the
call re-raises the first failure; a device that waits longer than `config.collective_timeout`
for the others fails with `CollectiveTimeoutError`. Nothing waits forever.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from funcgrad import core, distributed
from funcgrad.array import CPU, Device, DeviceValue, GpuDevice, placement
from funcgrad.config import config
from funcgrad.distributed import CollectiveTimeoutError


class AxisEnvTrace(core.Trace):
    """Binds pmap's axis name while its function is staged: collectives look up their axis's
    size by walking the current trace's parents. It interprets nothing itself."""

    def __init__(self, parent: core.Trace, axis_name: Hashable, axis_size: int, debug_info: str):
        super().__init__(parent, debug_info)
        self.axis_name = axis_name
        self.axis_size = axis_size

    def process_primitive(self, primitive, args, params):
        with core.set_current_trace(self.parent):
            return primitive.bind(*args, **params)


@contextlib.contextmanager
def axes_bound(axes: Sequence[tuple[Hashable, int]], debug_info: str):
    """Within the block, the current trace binds `axes` (names and sizes, outermost first), as
    while a pmap's or shard_map's function is staged; so a rule transforming the staged
    program (vmap's, whose collectives over its own axis and these compute the lane's index
    from their sizes) finds them."""
    trace = core.current_trace()
    for axis_name, axis_size in axes:
        trace = AxisEnvTrace(trace, axis_name, axis_size, debug_info)
    with core.set_current_trace(trace):
        yield


class Communicator:
    """The devices of one pmap call in this process meet here to exchange buffers.

    Every device puts its buffer in its slot and waits at the barrier; the last to arrive runs
    the exchange (with the other processes, when there are any) and every device reads the
    gathered buffers; a second barrier keeps the slots until all have read them.
    """

    def __init__(self, devices: Sequence[Device], axis_name: Hashable):
        self.devices = devices  # this process's, in axis order
        self.axis_name = axis_name
        self.slots: list[Any] = [None] * len(devices)
        self.gathered: list[Any] = []
        self.what = ""
        self.reduction = None
        self.failure: tuple[int, BaseException] | None = None
        self._barrier = threading.Barrier(
            len(devices), action=self._exchange, timeout=config.collective_timeout
        )

    def all_gather(self, local_index: int, value, what: str) -> list:
        """The buffers of every device of the axis (all processes), in device order."""
        return self._meet(local_index, value, what, None)

    def all_reduce(self, local_index: int, value, combine, op: str, what: str):
        """`combine` folded over the buffers of every device of the axis: this process's in
        device order, then the processes' results (`op` names it to MPI: "sum", "max" or
        "min"), one message per process instead of every device's buffer."""
        return self._meet(local_index, value, what, (combine, op))

    def meet(self, local_index: int, what: str) -> None:
        """Return once every device of the axis (of every process) has arrived, or fail as an
        exchange would: what moves buffers without this communicator (NCCL) meets first."""
        self._meet(local_index, None, what, "meet")

    def _meet(self, local_index: int, value, what: str, reduction):
        self.slots[local_index] = value
        self.what, self.reduction = what, reduction
        self._wait(what)
        gathered = self.gathered
        self._wait(what)
        return gathered

    def _exchange(self) -> None:
        where = f"{self.what} over axis {self.axis_name!r}"
        if self.reduction == "meet":
            if distributed.process_count() > 1:
                distributed.barrier(where)
            return
        if self.reduction is not None:
            combine, op = self.reduction
            with np.errstate(all="ignore"):  # (inf - inf is NaN, silently, as elsewhere)
                local = np.asarray(functools.reduce(combine, self.slots))
            if distributed.process_count() > 1:
                total = distributed.all_reduce(local, op, where)
                if total is None:
                    total = functools.reduce(combine, distributed.all_gather(local, where))
                local = total
            self.gathered = local
            return
        if distributed.process_count() == 1:
            self.gathered = list(self.slots)
            return
        local = np.stack([np.asarray(v) for v in self.slots])
        every = distributed.all_gather(local, where)
        self.gathered = list(every.reshape((-1,) + local.shape[1:]))

    def _wait(self, what: str) -> None:
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            where = f"{what} over axis {self.axis_name!r}"
            if self.failure is not None:
                index, error = self.failure
                raise RuntimeError(
                    f"{where}: stopped because device {index} failed: {error!r}"
                ) from None
            raise CollectiveTimeoutError(
                f"{where}: the other devices did not arrive within {config.collective_timeout:g}"
                " s (config.collective_timeout)"
            ) from None

    def abort(self, local_index: int, error: BaseException) -> None:
        if self.failure is None:
            self.failure = (local_index, error)
        self._barrier.abort()


class ShardFrame:
    """What a device thread knows while it runs its shard of a pmap or shard_map.

    `axes` holds the names and sizes of the axes the devices span: pmap's one axis, or a
    shard_map's mesh axes, the devices numbered row-major over them (`index`)."""

    __slots__ = ("axes", "index", "local_index", "communicator")

    def __init__(self, axes: tuple, index: int, local_index: int, communicator):
        self.axes = axes  # ((name, size), ...)
        self.index = index  # position over all the axes (row-major), over all processes
        self.local_index = local_index
        self.communicator = communicator

    @property
    def axis_size(self) -> int:
        return math.prod(size for _, size in self.axes)

    @property
    def device(self) -> Device:
        return self.communicator.devices[self.local_index]

    def all_gather(self, value, what: str) -> list:
        return self.communicator.all_gather(self.local_index, value, what)

    def all_reduce(self, value, combine, op: str, what: str):
        return self.communicator.all_reduce(self.local_index, value, combine, op, what)

    def meet(self, what: str) -> None:
        self.communicator.meet(self.local_index, what)


class AxisGroup:
    """A device's view of a collective over some of a mesh's axes (or all of them in another
    order), or over groups of an axis's positions (`axis_index_groups`): the group of devices
    that differ from it only along those axes, numbered row-major over them in the
    collective's order, and of those, the ones whose positions share its index group (in the
    group's order). Every device of the mesh runs the same collectives, so all of them meet at
    each exchange; each keeps its group's buffers."""

    def __init__(self, frame: ShardFrame, names: tuple, index_groups: tuple | None = None):
        sizes = dict(frame.axes)
        grid = np.arange(frame.axis_size).reshape(tuple(sizes.values()))
        position = dict(zip(sizes, np.unravel_index(frame.index, grid.shape)))
        # This device's group: its own coordinate along the other axes, every one along the
        # named axes, which are then put in the collective's order.
        kept = [name for name in sizes if name in names]
        group = grid[tuple(slice(None) if name in names else position[name] for name in sizes)]
        members = group.transpose([kept.index(name) for name in names]).reshape(-1)
        if index_groups is not None:
            mine = int(np.flatnonzero(members == frame.index)[0])
            members = members[list(next(g for g in index_groups if mine in g))]
        self.members = members
        self.frame = frame
        self.axis_size = len(self.members)
        self.index = int(np.flatnonzero(self.members == frame.index)[0])
        self.local_index = frame.local_index
        self.communicator = frame.communicator

    @property
    def device(self) -> Device:
        return self.frame.device

    def all_gather(self, value, what: str) -> list:
        every = self.frame.all_gather(value, what)
        return [every[m] for m in self.members]

    def all_reduce(self, value, combine, op: str, what: str):
        return functools.reduce(combine, self.all_gather(value, what))

    def meet(self, what: str) -> None:
        self.frame.meet(what)


class _Frames(threading.local):
    frame: ShardFrame | None = None


_frames = _Frames()

# Shard rules of the collectives: rule(frame, *operand buffers, **params) -> buffer.
shard_rules: dict[core.Primitive, Callable] = {}


def current_frame() -> ShardFrame | None:
    return _frames.frame


def frame_of(axis_name, axis_index_groups: tuple | None = None) -> ShardFrame | AxisGroup:
    """This device's frame, when it runs inside a pmap or shard_map binding every name of
    `axis_name` (a name or a tuple of names); a group of its devices for some of a mesh's
    axes, or for the index groups of `axis_index_groups`; anywhere else the name is unbound."""
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    frame = _frames.frame
    bound = () if frame is None else tuple(name for name, _ in frame.axes)
    for name in names:
        if name not in bound:
            raise NameError(f"unbound axis name: {name}")
    if names == bound and axis_index_groups is None:
        return frame
    if len(set(names)) != len(names):
        raise ValueError(f"the axis names {names!r} repeat a name")
    return AxisGroup(frame, names, axis_index_groups)


def apply_collective(primitive: core.Primitive, values: Sequence, params: dict):
    """Run a collective on this device's buffers (its eager implementation), giving a host
    buffer: only inside a pmap whose axis it names."""
    frame = frame_of(params["axis_name"], params.get("axis_index_groups"))
    # A GPU's buffers meet the others' on the host.
    values = [np.asarray(v) if type(v) is DeviceValue else v for v in values]
    return shard_rules[primitive](frame, *values, **params)


def local_devices_running() -> int:
    """How many local devices run programs at once with this thread (1 outside pmap)."""
    frame = _frames.frame
    return 1 if frame is None else len(frame.communicator.slots)


# The device threads. Threads are made only as calls need them; the bound is far above what
# the pmap calls running at once can hold (each holds one thread per device until it ends).
_pool = ThreadPoolExecutor(256, thread_name_prefix="funcgrad-device")


def run_on_devices(
    runs: Sequence[Callable],
    device_args: Sequence[Sequence],
    devices: Sequence[Device],
    axes: tuple[tuple[Hashable, int], ...],
) -> list:
    """`runs[i](*device_args[i])` for every local device i, each on its own thread (one
    device runs on the calling thread), with collectives spanning the devices of `axes` (names
    and sizes: pmap's one axis, or a mesh's) in all. A thread computes on its device: a
    GPU's, or the CPU for a virtual CPU device."""
    if _frames.frame is not None:
        raise NotImplementedError(
            "pmap inside pmap (or shard_map inside either) is not supported; use vmap inside it"
        )
    num_local = len(device_args)
    names = tuple(name for name, _ in axes)
    communicator = Communicator(devices, names[0] if len(names) == 1 else names)
    first_index = distributed.process_index() * num_local

    def run_device(local_index: int):
        device = devices[local_index]
        _frames.frame = ShardFrame(axes, first_index + local_index, local_index, communicator)
        previous = placement.device
        placement.device = device if isinstance(device, GpuDevice) else CPU
        try:
            return runs[local_index](*device_args[local_index])
        except BaseException as error:
            communicator.abort(local_index, error)
            raise
        finally:
            _frames.frame = None
            placement.device = previous

    if num_local == 1:
        return [run_device(0)]
    from funcgrad.backends.llvm import blas  # the OpenBLAS both backends' GEMMs run on

    results, errors = [], []
    # The devices share the cores: each device's GEMMs get its share of the threads.
    with blas.threads_limited_to(config.num_threads // num_local):
        futures = [_pool.submit(run_device, i) for i in range(num_local)]
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as error:
                errors.append(error)
    if errors:
        # The device that failed first, not the others that stopped because of it.
        raise communicator.failure[1] if communicator.failure is not None else errors[0]
    return results
