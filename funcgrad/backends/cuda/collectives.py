"""Collectives among the GPUs of a pmap, on their device buffers.

psum, pmax, pmin and psum_scatter of the dtypes a transport reduces exactly
(`distributed.exact_all_reduce`: not half-precision sums, whose rounding would depend on the
order), and all_gather, ppermute and all_to_all of any dtype, move between GPUs without
visiting the host: on CUDA GPUs through NCCL (CuPy's binding; a communicator per GPU,
bootstrapped over MPI across processes), on the emulated GPUs through the pmap's host
communicator, which plays NCCL's part there so that everything above the transport is tested
without a GPU. The reductions no transport does exactly meet on the host
(`interpreters/parallel.py`), as does axis_index, which moves nothing.

Before each NCCL call the devices meet at the communicator's barrier (and the processes at an
MPI barrier), so a device or process that failed or stalled ends in an error, as on the host
path, and never in a GPU waiting forever.
"""

from __future__ import annotations

import threading

import numpy as np

from funcgrad import distributed, dtypes
from funcgrad.array import DeviceValue
from funcgrad.interpreters.parallel import AxisGroup, ShardFrame
from funcgrad.lax.parallel import (
    all_gather_p,
    all_to_all_p,
    pmax_p,
    pmin_p,
    ppermute_p,
    psum_p,
    psum_scatter_p,
)
from funcgrad.once import once


class HostTransport:
    """The emulated GPUs' transport: their memory is the host's, so the pmap's communicator
    (a barrier in-process, MPI across processes) moves it as NCCL would move a GPU's."""

    raw_dtypes = distributed.MPI_DTYPES
    _COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}

    def all_reduce(self, frame: ShardFrame, send: np.ndarray, op: str) -> np.ndarray:
        combined = frame.all_reduce(send, self._COMBINE[op], op, f"p{op}")
        return np.array(combined, send.dtype)  # each device its own copy

    def all_gather(self, frame: ShardFrame, send: np.ndarray) -> np.ndarray:
        return np.concatenate(frame.all_gather(send, "all_gather"))

    def reduce_scatter(self, frame: ShardFrame, send: np.ndarray) -> np.ndarray:
        total = frame.all_reduce(send, np.add, "sum", "psum_scatter")
        count = send.size // frame.axis_size
        return np.array(total[frame.index * count : (frame.index + 1) * count])

    def permute(self, frame: ShardFrame, send, source: int | None, destination: int | None):
        buffers = frame.all_gather(send, "ppermute")
        return None if source is None else np.array(buffers[source])

    def exchange(self, frame: ShardFrame, send: np.ndarray) -> np.ndarray:
        buffers = frame.all_gather(send, "all_to_all")
        return np.stack([b[frame.index] for b in buffers])


class NcclTransport:
    """NCCL for one pmap's GPUs: a communicator per GPU, ranked after the earlier processes'
    devices, which each device's thread makes at its first collective (NCCL's initialization
    waits for every rank, as the threads of all processes arrive together). Runs only on CUDA
    GPUs."""

    def __init__(self, devices: tuple):
        from cupy.cuda import nccl

        self.nccl = nccl
        unique = nccl.get_unique_id()
        if distributed.process_count() > 1:
            sent = distributed.broadcast(id_bytes(unique), "NCCL's initialization")
            unique = id_from_bytes(sent, like=unique)
        self.unique = unique
        self.ranks = len(devices) * distributed.process_count()
        self.first = len(devices) * distributed.process_index()
        self.comms: dict[int, object] = {}
        self.types = {
            np.dtype(name): getattr(nccl, f"NCCL_{name.upper()}")
            for name in "int8 uint8 int32 uint32 int64 uint64 float32 float64".split()
        }
        self.raw_dtypes = tuple(self.types)
        self.ops = {"sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}

    def _start(self, frame: ShardFrame, what: str) -> tuple:
        """After every device has arrived: this device's communicator (made at its first
        collective), CuPy, and the stream its kernels run on."""
        frame.meet(what)
        comm = self.comms.get(frame.local_index)
        if comm is None:
            comm = self.nccl.NcclCommunicator(
                self.ranks, self.unique, self.first + frame.local_index
            )
            self.comms[frame.local_index] = comm
        xp = frame.device.runtime.xp
        return comm, xp, xp.cuda.get_current_stream().ptr

    def all_reduce(self, frame: ShardFrame, send, op: str):
        comm, xp, stream = self._start(frame, f"p{op}")
        received = xp.empty_like(send)
        comm.allReduce(
            send.data.ptr,
            received.data.ptr,
            send.size,
            self.types[send.dtype],
            self.ops[op],
            stream,
        )
        return received

    def all_gather(self, frame: ShardFrame, send):
        comm, xp, stream = self._start(frame, "all_gather")
        received = xp.empty(send.size * frame.axis_size, send.dtype)
        comm.allGather(send.data.ptr, received.data.ptr, send.nbytes, self.nccl.NCCL_UINT8, stream)
        return received

    def reduce_scatter(self, frame: ShardFrame, send):
        comm, xp, stream = self._start(frame, "psum_scatter")
        received = xp.empty(send.size // frame.axis_size, send.dtype)
        comm.reduceScatter(
            send.data.ptr,
            received.data.ptr,
            received.size,
            self.types[send.dtype],
            self.nccl.NCCL_SUM,
            stream,
        )
        return received

    def permute(self, frame: ShardFrame, send, source: int | None, destination: int | None):
        """This device's bytes to `destination` and `source`'s into a new buffer (None
        where no device sends here), as one group of NCCL's point-to-point calls."""
        comm, xp, stream = self._start(frame, "ppermute")
        received = None if source is None else xp.empty_like(send)
        self.nccl.groupStart()
        if destination is not None:
            comm.send(send.data.ptr, send.size, self.nccl.NCCL_UINT8, destination, stream)
        if received is not None:
            comm.recv(received.data.ptr, received.size, self.nccl.NCCL_UINT8, source, stream)
        self.nccl.groupEnd()
        return received

    def exchange(self, frame: ShardFrame, send):
        """Row j of `send` (bytes, one row per device) to device j, device j's row for this
        device into row j, as one group of NCCL's point-to-point calls."""
        comm, xp, stream = self._start(frame, "all_to_all")
        received = xp.empty_like(send)
        row = send.shape[1]
        self.nccl.groupStart()
        for peer in range(send.shape[0]):
            comm.send(send.data.ptr + peer * row, row, self.nccl.NCCL_UINT8, peer, stream)
            comm.recv(received.data.ptr + peer * row, row, self.nccl.NCCL_UINT8, peer, stream)
        self.nccl.groupEnd()
        return received


_made = threading.Lock()


def id_bytes(unique: tuple) -> np.ndarray:
    """NCCL's unique id, as CuPy gives it (a tuple of its characters: ints, or one-byte
    strings as CuPy built with Cython 3 gives them), as bytes another process can receive."""
    return np.array([c[0] if isinstance(c, bytes) else c & 0xFF for c in unique], np.uint8)


def id_from_bytes(received: np.ndarray, like: tuple) -> tuple:
    """The id's bytes as CuPy takes them back: characters of the kind `like` holds."""
    if isinstance(like[0], bytes):
        return tuple(bytes([b]) for b in received.tolist())
    return tuple(received.view(np.int8).tolist())


@once
def _nccl(devices: tuple) -> NcclTransport | None:
    try:
        return NcclTransport(devices)
    except (ImportError, RuntimeError):  # CuPy without NCCL, or NCCL's library missing
        return None


def transport(frame: ShardFrame | AxisGroup):
    """The transport between the GPUs of `frame`'s pmap or shard_map: NCCL on CUDA GPUs where
    CuPy has it, the host communicator on the emulated ones; None where neither serves (and
    for a group of a mesh's devices, which NCCL's one communicator of all does not form)."""
    if frame.device.backend == "cuda_emulator":
        return HostTransport()
    if isinstance(frame, AxisGroup):
        return None
    with _made:  # the first device thread makes the transport of all
        return _nccl(tuple(frame.communicator.devices))


def _storage(value: DeviceValue):
    return value.device.runtime.view(value.storage, value.dtype)


def _kept_as_bits(dtype: np.dtype) -> bool:
    """Whether a dtype's GPU buffers hold bits CuPy cannot compute on (bfloat16, the narrow
    formats): their combinations are gathered. (float16's sums need an order too.)"""
    return dtype in dtypes.HALF_FLOATS or dtypes.is_narrow(dtype)


def _reduction(op: str):
    def rule(
        frame: ShardFrame, moving, value: DeviceValue, *, axis_name, axis_index_groups
    ) -> DeviceValue | None:
        if _kept_as_bits(value.dtype):
            return None
        runtime = value.device.runtime
        with runtime.context():
            out = distributed.exact_all_reduce(
                _storage(value),
                op,
                lambda send, o: moving.all_reduce(frame, send, o),
                moving.raw_dtypes,
                runtime.xp,
            )
        if out is None:
            return None
        return DeviceValue(out, value.shape, value.dtype, value.device)

    return rule


def _all_gather(
    frame: ShardFrame,
    moving,
    value: DeviceValue,
    *,
    axis_name,
    axis_index_groups,
    all_gather_dimension,
    axis_size,
    tiled,
) -> DeviceValue | None:
    """The devices' buffers gathered as bytes in device order, then stacked (or, tiled,
    concatenated) along `all_gather_dimension` on the device."""
    runtime, xp = value.device.runtime, value.device.runtime.xp
    with runtime.context():
        stored = value.storage
        gathered = moving.all_gather(frame, stored.view(np.uint8)).view(stored.dtype)
        stacked = xp.moveaxis(gathered.reshape((axis_size,) + value.shape), 0, all_gather_dimension)
        if tiled:
            dim = all_gather_dimension
            shape = value.shape[:dim] + (axis_size * value.shape[dim],) + value.shape[dim + 1 :]
        else:
            shape = stacked.shape
        flat = xp.ascontiguousarray(stacked).reshape(-1)
    return DeviceValue(flat, tuple(shape), value.dtype, value.device)


def _psum_scatter(
    frame: ShardFrame,
    moving,
    value: DeviceValue,
    *,
    axis_name,
    axis_index_groups,
    scatter_dimension,
    axis_size,
    tiled,
) -> DeviceValue | None:
    """The devices' buffers summed, each device keeping its block of `scatter_dimension`:
    that dimension moved first, so that the blocks lie one after another as a reduce-scatter
    hands them out, and moved back."""
    if _kept_as_bits(value.dtype):
        return None
    runtime, xp = value.device.runtime, value.device.runtime.xp
    dim = scatter_dimension
    with runtime.context():
        blocks = xp.ascontiguousarray(xp.moveaxis(_storage(value).reshape(value.shape), dim, 0))
        mine = distributed.exact_all_reduce(
            blocks.reshape(-1),
            "sum",
            lambda send, op: moving.reduce_scatter(frame, send),
            moving.raw_dtypes,
            xp,
        )
        if mine is None:
            return None
        mine = mine.reshape((blocks.shape[0] // axis_size,) + blocks.shape[1:])
        mine = xp.moveaxis(mine, 0, dim) if tiled else mine[0]
        flat = xp.ascontiguousarray(mine).reshape(-1)
    return DeviceValue(flat, tuple(mine.shape), value.dtype, value.device)


def _ppermute(
    frame: ShardFrame, moving, value: DeviceValue, *, axis_name, perm
) -> DeviceValue | None:
    """Each device's buffer, as bytes, to its destination in `perm`; zeros where no device
    sends."""
    source = {d: s for s, d in perm}.get(frame.index)
    destination = {s: d for s, d in perm}.get(frame.index)
    runtime = value.device.runtime
    with runtime.context():
        stored = value.storage
        received = moving.permute(frame, stored.view(np.uint8), source, destination)
        out = runtime.xp.zeros_like(stored) if received is None else received.view(stored.dtype)
    return DeviceValue(out, value.shape, value.dtype, value.device)


def _all_to_all(
    frame: ShardFrame,
    moving,
    value: DeviceValue,
    *,
    axis_name,
    axis_index_groups,
    split_axis,
    concat_axis,
    axis_size,
    tiled,
) -> DeviceValue | None:
    """Block j of the split axis to device j: the split axis moved first, one row of bytes
    per device; the blocks received (one per source device) put back in the operand's axis
    order and stacked (or, tiled, concatenated) along `concat_axis`."""
    runtime, xp = value.device.runtime, value.device.runtime.xp
    with runtime.context():
        x = value.storage.reshape(value.shape)
        blocks = xp.ascontiguousarray(xp.moveaxis(x, split_axis, 0))
        rows = blocks.reshape(axis_size, -1).view(np.uint8)
        received = moving.exchange(frame, rows).view(blocks.dtype)
        if tiled:  # (source, block, rest) -> (source, *block in the operand's order)
            block = blocks.reshape((axis_size, -1) + blocks.shape[1:]).shape[1:]
            pieces = xp.moveaxis(received.reshape((axis_size,) + block), 1, 1 + split_axis)
            joined = xp.moveaxis(pieces, 0, concat_axis)
            shape = list(pieces.shape[1:])
            shape[concat_axis] *= axis_size
        else:  # (source, rest)
            rest = blocks.shape[1:]
            joined = xp.moveaxis(received.reshape((axis_size,) + rest), 0, concat_axis)
            shape = list(joined.shape)
        flat = xp.ascontiguousarray(joined).reshape(-1)
    return DeviceValue(flat, tuple(shape), value.dtype, value.device)


# rule(frame, transport, value, **params) -> the result on the device, or None to meet on
# the host.
device_rules = {
    psum_p: _reduction("sum"),
    pmax_p: _reduction("max"),
    pmin_p: _reduction("min"),
    all_gather_p: _all_gather,
    psum_scatter_p: _psum_scatter,
    ppermute_p: _ppermute,
    all_to_all_p: _all_to_all,
}
