"""A jaxpr compiled for a CUDA device: the CPU compiler's stages up to the scheduled program,
then CUDA C for every kernel, one module per program.

The host walks the program's steps: it launches kernels, hands GEMMs to the device's BLAS
(cuBLAS; NumPy on the emulator), launches the kernels that run small control flow on the
device (`regions.py`), and runs the other cond, while and scan steps by binding their
programs' inputs to slices of the caller's buffers, as the LLVM entry point does, reading
their predicates back. Decompositions run through cuSOLVER (`solver.py`; the emulator's
through the host's LAPACK, called as cuSOLVER is), SVD and nonsymmetric eig on the host's.
Buffers are typed views of one arena per call (the shared memory plan), of the inputs, the
outputs and the constants.

Two devices run it: `Gpu` (CuPy and NVRTC on a CUDA GPU) and `Emulator` (the generated CUDA C
compiled for the host, see `emulator.py`), which is how the renderer is tested without a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import math
import os
import sys
import threading
import time
import warnings

import numpy as np

from funcgrad import dtypes, transfer_guards
from funcgrad.array import Array, DeviceValue, GpuDevice, to_host
from funcgrad.backends.cuda import cublas as cublas_calls
from funcgrad.backends.cuda import eigh_batched, graphs, nvrtc, regions, solver
from funcgrad.backends.cuda.emulator import EmulatedModule
from funcgrad.backends.cuda.render import (
    ADDRESS,
    LAUNCH_BLOCK,
    CudaKernel,
    addressed,
    module_source,
    render_kernel,
)
from funcgrad.backends.numpy.executor import NumpyExecutable
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler import stages
from funcgrad.compiler.donation import donated_outputs, hosted, warn_unusable
from funcgrad.compiler.lapack import FortranCall
from funcgrad.compiler.memory import constants, nbytes, step_buffers
from funcgrad.compiler.parallel import ReductionSplit
from funcgrad.compiler.schedule import (
    GPU_GEMM_DTYPES,
    CallbackStep,
    CondStep,
    GemmStep,
    KernelStep,
    Program,
    ScanStep,
    WhileStep,
    all_steps,
    step_text,
    visit,
)
from funcgrad.config import config
from funcgrad.errors import OutOfDeviceMemoryError
from funcgrad.ir import ClosedJaxpr
from funcgrad.lax.linalg import allows_tf32
from funcgrad.once import once

# A whole-array reduction longer than one block folds well is split into this many strided
# partial folds (a grid of threads, neighbours reading neighbouring elements), whose results
# one block then folds; a reduction over a leading axis gives its columns and parts of its
# rows to about 2^16 threads.
REDUCTIONS = ReductionSplit(min_work=1 << 15, parts=1 << 14, strided=True, column_threads=1 << 16)
# Convolutions computed as implicit GEMMs (`render.tiled_product`, gathering windows as it
# reads them: no copy of every window in memory); half-precision ones run on cuBLAS's tensor
# cores over gathered windows.
CONTRACTION_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# A kernel that keeps a GPU busy for a while (`Gpu.occupy`): one thread reading the device's
# nanosecond timer until the time given has passed.
OCCUPY_SOURCE = r"""
extern "C" __global__ void fg_occupy(unsigned long long nanoseconds) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}
"""
# A profile keeps the device busy this long before each span it times: long enough for the
# host to make the timed call.
PROFILE_LEAD_SECONDS = 5e-4
# Kernels over rows of at most 32 elements (a thread each on a GPU) sharing a loop
# (`rows.short_row_groups`): the MLP step's loss gradient, 13 of them over rows of 10, is one
# launch, not two (the CPU keeps 8: its one loop ran slower).
SHORT_ROW_GROUP = 16
# Graphs a program keeps per matmul precision and stream, each for its arguments in other
# places (`_Replay.places`): in a training loop each call's parameters are the last call's
# results, and the memory pool hands out the same few places again and again (two, as each
# call's results take the memory of the results before the last). Arguments that still
# come in new places are copied in from then on.
MAX_PLACEMENTS = 4
# The most working memory a call gives cuBLASLt (its guide's suggestion for Hopper GPUs).
LT_WORKSPACE = 32 << 20
# A replay's copies in and out (`_Copies`): one kernel for all the buffers of a direction,
# launched from the graph, reading its table [count, destinations, sources, byte counts],
# whose addresses on the caller's side each call writes; 16-byte vectors where both ends are
# aligned (device allocations are), bytes otherwise.
COPIES = CudaKernel(
    name="fg_copies",
    params=[K.Buffer("table", np.dtype(np.uint64), 1)],
    const_params=[True],
    threads=1,
    body=r"""  const unsigned long long count = table[0];
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long k = 0; k < count; ++k) {
    unsigned char* to = (unsigned char*)table[1 + k];
    const unsigned char* from = (const unsigned char*)table[1 + count + k];
    const unsigned long long bytes = table[1 + 2 * count + k];
    unsigned long long whole = 0;
    if (((table[1 + k] | table[1 + count + k]) & 15) == 0) {
      whole = bytes / 16;
      for (unsigned long long v = first; v < whole; v += stride) {
        reinterpret_cast<fg_vector<unsigned int, 4>*>(to)[v] =
            reinterpret_cast<const fg_vector<unsigned int, 4>*>(from)[v];
      }
    }
    for (unsigned long long b = 16 * whole + first; b < bytes; b += stride) to[b] = from[b];
  }""",
)

# A call tells its replay where its buffers are (its arguments, its fresh results) by launches
# of these kernels, whose parameters are those buffers: each writes the addresses it is given
# into a table on the device. A host-to-device copy from pageable memory may wait for the
# stream to drain first (CUDA's notes on API synchronization), and so would make each call
# wait for the last one's kernels; a launch's parameters travel with the launch.
POINTS_PER_LAUNCH = 16
POINTING = [
    CudaKernel(
        name=f"fg_point_{count}",
        params=[K.Buffer("table", np.dtype(np.uint64), count)]
        + [K.Buffer(f"at{k}", np.dtype(np.uint8), 1) for k in range(count)],
        const_params=[False] + [True] * count,
        threads=1,
        block=1,
        body="\n".join(f"  table[{k}] = (unsigned long long)at{k};" for k in range(count)),
    )
    for count in range(1, POINTS_PER_LAUNCH + 1)
]


def point(device, table, buffers: list) -> None:
    """Writes the device addresses of `buffers` into `table` (uint64, one each, in order) on
    the current stream, as the parameters of launches of `POINTING`."""
    module = _pointing_module(device)
    for start in range(0, len(buffers), POINTS_PER_LAUNCH):
        some = buffers[start : start + POINTS_PER_LAUNCH]
        device.launch(module, POINTING[len(some) - 1], [table[start : start + len(some)], *some])


class _Slots:
    """A table on the device of where a call's buffers are, rewritten (`point`) only when they
    move: a call whose buffers are where the last call's were (the memory pool hands a
    program's results the same places again and again) launches nothing for them."""

    def __init__(self, device, table):
        self.device = device
        self.table = table
        self.places: tuple | None = None  # (the addresses the table holds)

    def point(self, buffers: list) -> None:
        places = tuple(self.device.address(buffer) for buffer in buffers)
        if places != self.places:
            point(self.device, self.table, buffers)
            self.places = places


@once
def _spare(device):
    """16 zero bytes on `device`, which a kernel gets for a buffer of no elements. A kernel may
    load element 0 of a buffer where a select then discards the value (a pad reads its
    operand at a clamped index, also where the operand is empty: a transform of an empty axis
    padded to a length), and a GPU gives an empty array no memory: the load of its null
    pointer was an illegal address."""
    return device.upload(np.zeros(16, np.uint8))


@once
def _pointing_module(device):
    return device.load(module_source([kernel.text() for kernel in POINTING]), POINTING)


class Emulator:
    """The host plays the GPU: device memory is host memory, kernels are the generated CUDA C
    built for the host, GEMMs are NumPy's. Each module is also compiled by NVRTC, as a GPU
    would compile it, when NVRTC is installed."""

    xp = np
    name = "the emulated GPU (host memory)"
    backend = "cuda_emulator"
    # Small blocks and a capped grid, so that grid-stride loops take several turns; a
    # cooperative block has two warps, so that its shared-memory tree and its warp shuffles
    # both run.
    BLOCK = 32
    COOPERATIVE_BLOCK = 64
    MAX_GRID = 4
    capture_errors = ()  # its captures only record: a failure there is funcgrad's to fix

    def __init__(self):
        self.held = graphs.Held()

    def load(self, source: str, kernels: list[CudaKernel]):
        if nvrtc.library() is not None:
            nvrtc.ptx(source)
        return EmulatedModule(source, kernels)

    def launch(self, module, kernel: CudaKernel, buffers: list[np.ndarray]) -> None:
        block = self.COOPERATIVE_BLOCK if kernel.cooperative or kernel.row_width else self.BLOCK
        block = launch_block(kernel, block)
        grid = _grid(kernel, block, self.MAX_GRID)
        module.launch(kernel, grid, block, [b.ctypes.data for b in buffers])

    def upload(self, value: np.ndarray) -> np.ndarray:
        return value.copy()  # device memory of its own, as a GPU's is

    def copy(self, destination: np.ndarray, source: np.ndarray) -> None:
        destination[...] = source

    def capture(self, walk):
        """The emulator's graph: the launches, GEMMs and copies of one walk, recorded with
        the buffers they were given, and run again in order at each replay."""
        recording = _Recording(self)
        walk(recording)
        calls = recording.calls
        return lambda: [call() for call in calls]

    def context(self):
        return contextlib.nullcontext()

    def stream(self) -> None:
        """The stream launches go to: the emulator has one, the host."""
        return None

    def solve(self, plan: solver.DeviceSolve, views: dict) -> None:
        """A decomposition's cuSOLVER calls, made by the host's LAPACK as cuSOLVER makes
        them (int32 info and pivots, workspaces of its own)."""
        solver.run(plan, views, np, solver.emulated_call)

    def gemm(self, step: GemmStep, lhs, rhs, out, tf32: bool, addend=None, workspace=None):
        """NumPy's product, as a GPU's BLAS computes it: halves in float32, rounded once at
        the end, and with `tf32` float32 operands rounded to TF32 first; an update's addend
        read where it is (the result's own memory, or apart from it, as cuBLASLt reads it)."""
        lhs, rhs = _matrices(step, lhs, rhs)
        result = out.reshape(step.batch, step.m, step.n)
        if step.out.dtype in dtypes.HALF_FLOATS:
            result[...] = np.matmul(lhs.astype(np.float32), rhs.astype(np.float32))
        elif addend is not None:
            product = np.matmul(_tf32(lhs), _tf32(rhs)) if tf32 else np.matmul(lhs, rhs)
            result[...] = step.alpha * product + step.beta * addend.reshape(result.shape)
        elif tf32:
            np.matmul(_tf32(lhs), _tf32(rhs), out=result)
        else:
            np.matmul(lhs, rhs, out=result)

    def synchronize(self) -> None:
        pass  # kernels run to completion when launched

    def occupy(self, seconds: float) -> None:
        pass  # the host is the device: nothing runs ahead of it

    def clock(self) -> float:
        """A point in time on the device, for `seconds_between` (the host's: kernels run
        as they are launched)."""
        return time.perf_counter()

    def seconds_between(self, start: float, end: float) -> float:
        return end - start

    def shaped(self, value) -> np.ndarray:
        return value.storage.view(value.dtype).reshape(value.shape)

    def capacity(self) -> int:
        """Device memory: the host's physical memory (a host that overcommits would grant
        more, and fail only once the pages are touched)."""
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

    def memory_note(self) -> str:
        return ""

    def memory_stats(self) -> dict:
        """Its memory is the host's, which no pool of its own tracks."""
        return {"bytes_limit": self.capacity(), "bytes_held_by_replays": self.held.bytes()}

    def download(self, value) -> np.ndarray:
        return value

    def download_async(self, value):
        return lambda: value

    def address(self, buffer: np.ndarray) -> int:
        return buffer.ctypes.data

    def view(self, raw, dtype: np.dtype):
        return raw.view(_storage(dtype) if dtype == dtypes.float0 else dtype)


class Gpu:
    """CUDA GPU `id` through CuPy: modules compiled by NVRTC for the device's architecture
    (kept in funcgrad's compilation cache) and loaded by CuPy, launches on the device's current
    stream, GEMMs by cuBLAS. What allocates, loads or launches runs in `context()`, CuPy's
    selection of this device."""

    BLOCK = LAUNCH_BLOCK
    backend = "cuda"

    def __init__(self, id: int = 0):
        self.xp = _cupy()
        self.id = id
        device = self.xp.cuda.Device(id)
        # Enough blocks to fill every multiprocessor several times; grid-stride loops do the rest.
        self.max_grid = device.attributes["MultiProcessorCount"] * 32
        self.name = f"GPU {id}"
        self.arch = f"compute_{device.compute_capability}"
        self.held = graphs.Held()
        self._occupy = None  # (its kernel, compiled at its first use)
        # cuBLASLt's handle (made at its first use), its GEMMs by shape, and the error that
        # made it refuse one, if any (`_lt_gemm`).
        self._lt_handle = None
        self._lt_gemms: dict = {}
        self._lt_lock = threading.Lock()
        self._lt_refused: Exception | None = None
        # What a capture may raise where the driver or a library refuses to be captured.
        from cupy_backends.cuda.api.driver import CUDADriverError
        from cupy_backends.cuda.api.runtime import CUDARuntimeError
        from cupy_backends.cuda.libs.cublas import CUBLASError

        # (NotImplementedError: CuPy's refusal of a library call under a capture.)
        self.capture_errors = (CUDARuntimeError, CUDADriverError, CUBLASError, NotImplementedError)
        with self.context():
            self.total_memory = self.xp.cuda.runtime.memGetInfo()[1]

    def context(self):
        return self.xp.cuda.Device(self.id)

    def stream(self) -> int:
        """The stream launches go to (CuPy's current one, a thread's own)."""
        return self.xp.cuda.get_current_stream().ptr

    def capacity(self) -> int:
        return self.total_memory

    def memory_stats(self) -> dict:
        with self.context():
            free, total = self.xp.cuda.runtime.memGetInfo()
            pool = self.xp.get_default_memory_pool()
            return {
                "bytes_limit": total,
                "bytes_in_use": pool.used_bytes(),
                "bytes_reserved": pool.total_bytes(),
                "bytes_free": free,
                "bytes_held_by_replays": self.held.bytes(),
            }

    def memory_note(self) -> str:
        stats = self.memory_stats()
        return (
            f"; the GPU has {_bytes(stats['bytes_free'])} free of {_bytes(stats['bytes_limit'])}, "
            f"and CuPy's pool holds {_bytes(stats['bytes_reserved'])}, "
            f"{_bytes(stats['bytes_in_use'])} of it in use"
        )

    def load(self, source: str, kernels: list[CudaKernel]) -> dict:
        """The module's kernels by name (each looked up once: a lookup is a driver call)."""
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "module.ptx")
            with open(path, "w") as file:
                file.write(nvrtc.ptx(source, self.arch))
            with self.context():
                module = self.xp.RawModule(path=path)
                # (looked up while the file exists: the first lookup loads the module)
                return {kernel.name: module.get_function(kernel.name) for kernel in kernels}

    def launch(self, functions: dict, kernel: CudaKernel, buffers: list) -> None:
        block = self.BLOCK
        if kernel.row_width:  # a row's block: a power of two, a warp at least
            block = min(self.BLOCK, max(32, 1 << (kernel.row_width - 1).bit_length()))
        block = launch_block(kernel, block)
        grid = _grid(kernel, block, self.max_grid)
        functions[kernel.name]((grid,), (block,), tuple(buffers))

    def upload(self, value: np.ndarray):
        with self.context():
            return self.xp.asarray(value)

    def address(self, buffer) -> int:
        return buffer.data.ptr

    def copy(self, destination, source) -> None:
        """One flat contiguous buffer into another of the same size, on the current stream."""
        if destination.nbytes:
            self.xp.cuda.runtime.memcpyAsync(
                destination.data.ptr,
                source.data.ptr,
                destination.nbytes,
                self.xp.cuda.runtime.memcpyDeviceToDevice,
                self.xp.cuda.get_current_stream().ptr,
            )

    def capture(self, walk):
        """`walk(self)`'s launches, GEMMs and copies captured as a CUDA graph on a stream of
        its own (capture cannot use the legacy default stream; nothing runs while capturing);
        returns its launch, which replays it on the current stream."""
        stream = self.xp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                walk(self)
            finally:  # a failed walk still ends the capture, leaving the stream usable
                graph = stream.end_capture()
        return graph.launch

    def gemm(self, step: GemmStep, lhs, rhs, out, tf32: bool, addend=None, workspace=None):
        """cuBLAS's strided-batched GEMM, called directly for every dtype (CuPy's matmul
        takes no bfloat16, and may make temporaries, which a captured graph must not hold; its
        cuBLAS wrappers refuse any call under a capture): float64 in float64, the others with
        float32 sums, TF32 operands where allowed. An update's GEMM adds `beta` times its
        addend to `alpha` times the product: cuBLAS's beta where the addend is the result's
        own memory (donated), else cuBLASLt's, which reads the addend apart from the result
        (`workspace`, of the call's working memory, lets it split long sums)."""
        from cupy.cuda import cublas

        m, n, k = step.m, step.n, step.k
        data_type = _CUDA_DATA_TYPES[step.out.dtype]
        if step.out.dtype == np.float64:
            compute, scale = cublas.CUBLAS_COMPUTE_64F, np.float64
        else:
            compute = cublas.CUBLAS_COMPUTE_32F_FAST_TF32 if tf32 else cublas.CUBLAS_COMPUTE_32F
            scale = np.float32
        # (on the host; a plain product's beta of 0 has cuBLAS read nothing in its result)
        alpha, beta = np.array(step.alpha, scale), np.array(step.beta, scale)
        if addend is not None and addend.data.ptr != out.data.ptr:
            operands = (rhs, lhs, addend, out)
            if self._lt_gemm(step, operands, data_type, compute, alpha, beta, workspace):
                return
            self.copy(out, addend)  # (cuBLAS's beta then adds it where the result goes)
        # A row-major out = op(lhs) @ op(rhs) is the column-major out^T = op(rhs)^T @ op(lhs)^T:
        # cuBLAS reads each row-major operand as its column-major transpose.
        cublas_calls.gemm_strided_batched(
            self.xp.cuda.device.get_cublas_handle(),
            self.xp.cuda.get_current_stream().ptr,
            cublas.CUBLAS_OP_T if step.transpose_rhs else cublas.CUBLAS_OP_N,
            cublas.CUBLAS_OP_T if step.transpose_lhs else cublas.CUBLAS_OP_N,
            n,
            m,
            k,
            alpha.ctypes.data,
            rhs.data.ptr,
            data_type,
            k if step.transpose_rhs else n,
            k * n,
            lhs.data.ptr,
            data_type,
            m if step.transpose_lhs else k,
            m * k,
            beta.ctypes.data,
            out.data.ptr,
            data_type,
            n,
            m * n,
            step.batch,
            compute,
            cublas.CUBLAS_GEMM_DEFAULT,
        )

    def _lt_gemm(self, step: GemmStep, operands, data_type, compute, alpha, beta, workspace):
        """`out = alpha * product + beta * addend` by cuBLASLt (operands: rhs, lhs, addend,
        out, as cuBLAS's column-major A, B, C and D), each shape's algorithm chosen once for
        its operands' alignments; False where cuBLASLt refuses it (said once), the caller
        then copying the addend into the result for cuBLAS's beta."""
        if self._lt_refused is not None:
            return False
        from cupy_backends.cuda.libs.cublas import CUBLASError

        pointers = [operand.data.ptr for operand in operands]
        alignments = tuple(min(256, p & -p) if p else 256 for p in pointers)
        room = 0 if workspace is None else workspace.nbytes
        ops = (int(step.transpose_rhs), int(step.transpose_lhs))  # (CUBLAS_OP_N 0, _T 1)
        key = (step.batch, step.m, step.n, step.k, ops, data_type, compute, alignments, room)
        try:
            with self._lt_lock:
                if self._lt_handle is None:
                    self._lt_handle = cublas_calls.lt_handle()
                gemm = self._lt_gemms.get(key)
                if gemm is None:
                    shape = (step.batch, step.n, step.m, step.k)
                    gemm = cublas_calls.LtGemm(
                        self._lt_handle, ops, shape, data_type, compute, alignments, room
                    )
                    self._lt_gemms[key] = gemm
            stream = self.xp.cuda.get_current_stream().ptr
            rhs, lhs, addend, out = pointers
            gemm(
                stream,
                alpha,
                rhs,
                lhs,
                beta,
                addend,
                out,
                0 if workspace is None else workspace.data.ptr,
            )
        except (CUBLASError, AttributeError) as error:  # (AttributeError: no cuBLASLt)
            self._lt_refused = error
            warnings.warn(
                f"cuBLASLt refused a GEMM that updates an array apart from it on {self.name} "
                f"({type(error).__name__}: {error}); such updates now copy the array into "
                "the GEMM's result first",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        return True

    def solve(self, plan: solver.DeviceSolve, views: dict) -> None:
        """A decomposition's calls through cuSOLVER (trsm through cuBLAS) on the current
        stream: workspaces sized by the library, int32 info and pivots widened after."""
        from cupy.cuda import cusolver

        xp = self.xp
        enums = _solver_enums()
        handle = xp.cuda.device.get_cusolver_handle()
        workspaces: dict = {}

        def make(call: solver.SolverCall, locate) -> None:
            letter = solver.LETTERS[call.dtype.name]
            args, held = [], []
            for a in call.args:
                if isinstance(a, solver.Pointer):
                    base, offset = locate(a)
                    args.append(base.data.ptr + offset * base.itemsize)
                elif isinstance(a, solver.Matrices):  # their addresses, computed on the device
                    base, _ = locate(solver.Pointer(a.buffer, 0))
                    apart = np.uint64(a.stride * base.itemsize)
                    addresses = xp.arange(a.count, dtype=np.uint64) * apart
                    held.append(addresses + np.uint64(base.data.ptr))
                    args.append(held[-1].data.ptr)
                else:
                    args.append(enums.get(a, a))
            if call.routine == "potrfBatched":  # (no workspace)
                getattr(cusolver, f"{letter}potrfBatched")(handle, *args)
                return
            if call.routine == "syevBatched":  # (workspaces of its own)
                args = [a for a in args if a not in (solver.WORK, solver.LWORK)]
                if not eigh_batched.solve(xp, handle, call.dtype, args):
                    raise solver.Unavailable(call.routine)
                return
            if call.routine in ("trsm", "trsmBatched", "getrfBatched"):
                self._cublas(f"{letter}{call.routine}", call.dtype, args)
                return
            if call.routine not in workspaces:  # every matrix of a step has the same shape
                query = getattr(cusolver, f"{letter}{call.routine}_bufferSize")
                size = query(handle, *(args[i] for i in solver.QUERIES[call.routine]))
                workspaces[call.routine] = (xp.empty(max(size, 1), call.dtype), size)
            work, size = workspaces[call.routine]
            args = [work.data.ptr if a == solver.WORK else size if a == solver.LWORK else a
                    for a in args]  # fmt: skip
            getattr(cusolver, f"{letter}{call.routine}")(handle, *args)

        solver.run(plan, views, xp, make)

    def _cublas(self, name: str, dtype: np.dtype, args: list) -> None:
        """cuBLAS's routine `name` (trsm, trsmBatched, getrfBatched) on the current stream, a
        scale of one read from the host."""
        from cupy.cuda import cublas

        handle = self.xp.cuda.device.get_cublas_handle()
        alpha = np.ones((), dtype)  # on the host
        with cublas_calls.scalars_on_the_host(handle):
            args = [alpha.ctypes.data if a == solver.ALPHA else a for a in args]
            getattr(cublas, name)(handle, *args)

    def download(self, value) -> np.ndarray:
        with self.context():
            return self.xp.asnumpy(value)

    def download_async(self, value):
        """A copy of `value` to the host started on the current stream, into page-locked
        memory (which the copy engine reads without the host); returns its wait, which gives
        the host array (the same one at every call)."""
        if value.size == 0:
            return lambda: np.empty(0, value.dtype)
        with self.context():
            stream = self.xp.cuda.get_current_stream()
            pinned = self.xp.cuda.alloc_pinned_memory(value.nbytes)
            host = np.frombuffer(pinned, value.dtype, value.size)
            value.get(stream=stream, out=host, blocking=False)
            copied = self.xp.cuda.Event()
            copied.record(stream)

        def wait() -> np.ndarray:
            copied.synchronize()
            return host

        return wait

    def synchronize(self) -> None:
        with self.context():
            self.xp.cuda.get_current_stream().synchronize()

    def occupy(self, seconds: float) -> None:
        """Keeps the device busy for `seconds` on the current stream, so that what the host
        enqueues meanwhile runs back to back once it is done: timed then, that work's span
        holds none of the host's time to make its calls."""
        if self._occupy is None:
            self._occupy = self.xp.RawKernel(OCCUPY_SOURCE, "fg_occupy")
        with self.context():
            self._occupy((1,), (1,), (np.uint64(seconds * 1e9),))

    def clock(self):
        """A point in the current stream's work, for `seconds_between` once it has run."""
        event = self.xp.cuda.Event()
        event.record()
        return event

    def seconds_between(self, start, end) -> float:
        return self.xp.cuda.get_elapsed_time(start, end) / 1000

    def shaped(self, value):
        if value.dtype == dtypes.bfloat16 or dtypes.is_narrow(value.dtype):
            raise TypeError(
                f"CuPy has no {value.dtype.name}: export the array as float32 (or int32) first"
            )
        return value.storage.reshape(value.shape)

    def view(self, raw, dtype: np.dtype):
        storage = _storage(dtype)
        # (a CuPy view is a new array object, some microseconds of the host's per call)
        return raw if raw.dtype == storage else raw.view(storage)


def _cupy():
    try:
        import cupy
    except ImportError as error:
        raise RuntimeError(
            "jit_backend='cuda' needs CuPy: pip install -e '.[cuda]' (a machine without a GPU "
            "can run the generated CUDA C on the host with jit_backend='cuda_emulator')"
        ) from error
    if cupy.cuda.runtime.getDeviceCount() == 0:
        raise RuntimeError("jit_backend='cuda' found no CUDA GPU on this machine")
    return cupy


@once
def gpu(id: int = 0) -> Gpu:
    return Gpu(id)


@once
def emulator() -> Emulator:
    """The emulated GPU that `jit_backend="cuda_emulator"` compiles for (emulated devices,
    `devices("cuda_emulator")`, have one each)."""
    return Emulator()


class CudaExecutable:
    """Call it with funcgrad arrays, get funcgrad arrays back (as the other executables)."""

    def __init__(self, closed: ClosedJaxpr, donated: tuple[int, ...] = (), device=None):
        self.closed = closed
        self.device = device if device is not None else gpu()
        self.optimized, self.program, self.memory = stages.plan(
            closed,
            REDUCTIONS,
            GPU_GEMM_DTYPES,
            CONTRACTION_DTYPES,
            SHORT_ROW_GROUP,
        )
        # Outputs written into donated arguments' memory: {output index: input index}. A
        # kernel reading the input and writing the output names the input for both, one
        # pointer for the pair (`hosted`).
        self.donated = donated_outputs(self.program, donated)
        warn_unusable(closed, sorted(set(donated) - set(self.donated.values())))
        program = self.program
        self.hosts = {program.outputs[k]: program.inputs[i] for k, i in self.donated.items()}
        self.kernels: dict = {}
        for step in all_steps(self.program):
            if isinstance(step, KernelStep):
                name = f"k{len(self.kernels)}_{step.kernel.name.partition('_')[2]}"
                kernel = step.kernel
                for output, host in self.hosts.items():  # (others see the memory as `output`)
                    if output in kernel.outputs and host in kernel.inputs:
                        kernel = hosted(kernel, output, host)
                self.kernels[step] = render_kernel(kernel, name)
        # Control flow run on the device, as one kernel each: the kernels of their regions
        # are `__device__` functions, which they call.
        self.regions = {
            step: regions.render_region(step, self.kernels, f"r{k}_{type(step).__name__}")
            for k, step in enumerate(regions.device_regions(self.program, self.kernels))
        }
        called = {s for step in self.regions for s in regions.inner_kernels(step)}
        launched = [k for s, k in self.kernels.items() if s not in called]
        gemms = [step for step in all_steps(self.program) if isinstance(step, GemmStep)]
        # Working memory for cuBLASLt's GEMMs (updates apart from their results), beside
        # the arena: room to split their sums, up to a few times their results.
        apart = [
            nbytes(step.out)
            for step in gemms
            if step.addend is not None and self.hosts.get(step.out) is not step.addend
        ]
        self.workspace = (
            K.Buffer("cublaslt_workspace", np.dtype(np.uint8), min(LT_WORKSPACE, 4 * max(apart)))
            if apart
            else None
        )
        self._launches = graphs.capturable(self.program, self.regions)
        self._replayable = self._launches is not None
        # Results a replay's kernels write where each call wants them, each read from a slot
        # of the replay's (`_Replay`), and those kernels in the form reading the slots.
        self.in_place = (
            _written_in_place(program, self.hosts, self.kernels) if self._replayable else []
        )
        self.slots = [K.Buffer(f"{b.name}_at", ADDRESS, 1) for b in self.in_place]
        # The other results a replay may write where each call wants them, each a result
        # once: graphs are then kept by where they are (`_result_places`).
        self.placed_results = [
            k
            for k, b in enumerate(program.outputs)
            if b not in self.in_place and b not in self.hosts and program.outputs.count(b) == 1
        ]
        slots = dict(zip(self.in_place, self.slots))
        self.addressed = {
            step: addressed(kernel, slots)
            for step, kernel in self.kernels.items()
            if any(b in slots for b in kernel.params)
        }
        launched += list(self.regions.values()) + list(self.addressed.values())
        self.source = module_source(
            [self.kernels[s].text(launched=False) for s in self.kernels if s in called]
            + [k.text() for k in launched]
        )
        self.module = self.device.load(self.source, launched)
        # Decompositions cuSOLVER makes on the device; the others run on the host's LAPACK.
        self.solves = {
            step: plan
            for step in all_steps(self.program)
            if isinstance(step, FortranCall) and (plan := solver.translate(step)) is not None
        }
        self.consts = {
            buffer: _on_device(self.device, np.ascontiguousarray(data), buffer.dtype)
            for buffer, data in constants(self.program).items()
        }
        out_avals = closed.out_avals
        self._out_shapes = [(a.shape, a.dtype) for a in out_avals]
        # (each result's buffer: its elements and their storage dtype, made at every call)
        self._out_buffers = [(math.prod(a.shape), _storage(a.dtype)) for a in out_avals]
        self._out_weak = [a.weak_type for a in out_avals]
        self._in_dtypes = [a.dtype for a in closed.in_avals]
        self._reference = None
        # Whether a call's outputs and working memory alone exceed the device's memory.
        allocated = self.working_bytes + sum(
            math.prod(shape) * dtype.itemsize for shape, dtype in self._out_shapes
        )
        self._too_big = allocated > self.device.capacity()
        # Replays by matmul-precision setting (which decides TF32 as GEMMs are launched) and
        # stream (calls on two streams may run at once: each stream's replay has buffers of
        # its own), made at a program's second call: a program run once is not worth
        # capturing.
        self._replays: dict = {}
        self._calls = 0
        # Arguments a graph copies in rather than reading them where they are (`_Replay.places`):
        # those that kept coming in new places (`MAX_PLACEMENTS`).
        self._copied_in: set = set()
        # Results a graph copies out rather than writing them where they are, alike.
        self._copied_out: set = set()

    def __call__(self, *args) -> list[Array]:
        device = self.device
        results = []
        for out, (shape, dtype), weak in zip(self.run(args), self._out_shapes, self._out_weak):
            value = _host(device.download(out), dtype).reshape(shape)
            results.append(Array(value[()] if value.ndim == 0 else value, weak))
        self._check_values(args)
        self._delete_donated(args)
        return results

    def _check_values(self, args) -> None:
        """Under `config.debug_nans` (or `debug_infs`), the reference backend runs the
        program too, on host copies, and names the first primitive making a NaN (or an
        infinity) and the user's line."""
        if not (config.debug_nans or config.debug_infs):
            return
        if self._reference is None:
            self._reference = NumpyExecutable(self.closed)
        self._reference(*[to_host(a) if type(a) is Array else a for a in args])

    def on_device(self, args, device: GpuDevice) -> list[Array]:
        """Runs the program on `device`, whose runtime this executable was built for, and
        returns its results there, without waiting for them (a GPU runs asynchronously)."""
        outputs = self.run(args)
        self._check_values(args)
        self._delete_donated(args)
        return [
            Array(DeviceValue(out, shape, dtype, device), weak)
            for out, (shape, dtype), weak in zip(outputs, self._out_shapes, self._out_weak)
        ]

    def _delete_donated(self, args) -> None:
        """Donated arrays are given up, as promised, whether or not their memory was taken."""
        for i in self.donated.values():
            if type(args[i]) is Array:
                args[i].delete()

    def _taken(self, args, i: int):
        """The storage of donated argument `i` that an output may take over: an array on this
        GPU that nothing else holds (no other array, view, caller or argument of this call),
        else None (the output then gets memory of its own). Under `debug_nans` or `debug_infs`
        nothing is taken: the reference runs on the arguments afterwards."""
        arg = args[i]
        if type(arg) is not Array or config.debug_nans or config.debug_infs:
            return None
        if any(other is arg for j, other in enumerate(args) if j != i):
            return None
        value = arg._value
        # References: the array's, `value`'s and getrefcount's argument; the storage's own,
        # and getrefcount's argument.
        if (
            _storage_of(value) is None
            or value.device.runtime is not self.device
            or sys.getrefcount(value) != 3
        ):
            return None
        storage = value.storage
        if storage.base is not None or sys.getrefcount(storage) != 3:  # (+ `storage`)
            return None
        return storage

    def run(self, args) -> list:
        """Launches the program and returns its outputs as flat device buffers (in the
        storage dtype: bfloat16 as its bits) without waiting for the device. Arguments on the
        device (`DeviceValue`s) are used in place; host values are copied there first."""
        with self.device.context():
            taken = self._donations(args)
            try:
                found = self._replay(args, taken)
                if found is not None:
                    replay, results = found
                    return replay(args, results)
                views, outputs = self._allocate(args, taken)
            except MemoryError as error:  # CuPy's OutOfMemoryError is one
                # Replays hold device memory between calls: let them all go, then try again.
                if not self._release_replays():
                    raise OutOfDeviceMemoryError(self._out_of_memory(args)) from error
                try:
                    views, outputs = self._allocate(args, taken)
                except MemoryError as again:
                    raise OutOfDeviceMemoryError(self._out_of_memory(args)) from again
            _Walk(self, views).steps(self.program.steps)
        return outputs

    def profile(self, *args) -> list[tuple[str, int, float]]:
        """One call walked launch by launch, each launch, GEMM and copy timed on the device:
        (what ran: a kernel's name as `as_text` has it, a GEMM's shape, or "copy"; how many
        times it ran; its seconds in all), the costliest first. Steps the host makes (its
        reads of predicates, LAPACK, callbacks) are not listed."""
        with self.device.context():
            views, _ = self._allocate(args, {})  # (the arguments stay whole)
            timed = _Timed(self.device)
            _Walk(self, views, timed).steps(self.program.steps)
            self.device.synchronize()
        totals: dict = {}
        for what, start, end in timed.spans:
            calls, seconds = totals.get(what, (0, 0.0))
            totals[what] = calls + 1, seconds + self.device.seconds_between(start, end)
        rows = [(what, calls, seconds) for what, (calls, seconds) in totals.items()]
        return sorted(rows, key=lambda row: -row[2])

    def _release_replays(self) -> bool:
        """Lets every replay on this device go (their buffers return to the pool); whether
        there were any."""
        released = self.device.held.release_all()
        for replay in released:
            replay.release()
        return bool(released)

    def _replay(self, args, taken: dict) -> tuple[_Replay, list] | None:
        """The graph replaying this program under the current matmul precision on the current
        stream over arguments and results where these are, captured at its second call (and
        again for arguments or results in other places), and the call's results; None for a
        program walked step by step."""
        if not self._replayable:
            return None
        self._calls += 1
        if self._calls < 2:
            return None
        device = self.device
        setting = (config.default_matmul_precision, device.stream())
        results = self._results(taken)
        places = self._places(args, taken), self._result_places(results)
        replay = self._replays.get((*setting, places))
        if replay is not None:
            device.held.used(replay)
            return replay, results
        others = [r for key, r in self._replays.items() if key[:2] == setting]
        budget = device.capacity() * graphs.HELD_SHARE
        if others and (
            len(others) >= MAX_PLACEMENTS or (len(others) + 1) * others[0].nbytes > budget
        ):
            # The arguments or results keep coming in new places (or one more graph would not
            # fit beside the others, which would then take turns evicting each other): those
            # that moved are copied in or out from now on, under one graph.
            for other in others:
                self._copied_in |= _moved(places[0], other.places[0])
                self._copied_out |= _moved(places[1], other.places[1])
                other.release()
                device.held.drop(other)
            places = self._places(args, taken), self._result_places(results)
        placed = {i: _storage_of(args[i]) for i, _ in places[0]}  # (read where they are)
        written = {k: results[k] for k, _ in places[1]}  # (written where they are)
        key = (*setting, places)
        copied_in, copied_out = self._copies(placed, written)
        program = self.program
        copied = [program.inputs[i] for i in copied_in] + [program.outputs[k] for k in copied_out]
        if not graphs.worth_a_graph(self._launches, copied):
            self._replayable = False
            return None
        try:
            replay = _Replay(self, key, placed, written)
        except MemoryError:
            return None  # walked: a walk holds no copies of the arguments
        except device.capture_errors as error:  # a driver or library refusing it
            self._replayable = False
            warnings.warn(
                f"a jitted program could not be captured as a CUDA graph on {device.name} "
                f"({type(error).__name__}: {error}); it runs launch by launch",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        self._replays[key] = replay
        for evicted in device.held.hold(replay, replay.nbytes, budget):
            evicted.release()
        return replay, results

    def _copies(self, placed: dict, written: dict) -> tuple[list[int], list[int]]:
        """(the inputs, the outputs) a replay reading the arguments in `placed` and writing
        the results in `written` where they are copies in and out, by index: the others, but
        the results its kernels write in place and those the placed donated arguments host
        (written where those are)."""
        program = self.program
        there = {program.inputs[i] for i in placed}
        copied_in = [i for i in range(len(program.inputs)) if i not in placed]
        copied_out = [
            k
            for k, b in enumerate(program.outputs)
            if k not in written and b not in self.in_place and self.hosts.get(b) not in there
        ]
        return copied_in, copied_out

    def _results(self, taken: dict) -> list:
        """A call's result buffers: donated memory where it is free to take (`taken`), else
        fresh ones."""
        empty = self.device.xp.empty
        hosted = {k: taken[i] for k, i in self.donated.items() if i in taken}
        return [
            hosted[k] if k in hosted else empty(size, dtype)
            for k, (size, dtype) in enumerate(self._out_buffers)
        ]

    def _result_places(self, results: list) -> tuple:
        """(output index, device address) of each result a graph would write where it is:
        those its kernels do not write through slots (`in_place`), that no donated argument
        hosts and that have not kept moving (`_copied_out`): a library's GEMM writes them."""
        return tuple(
            (k, self.device.address(results[k]))
            for k in self.placed_results
            if k not in self._copied_out
        )

    def _places(self, args, taken: dict) -> tuple:
        """(input index, device address) of each argument a graph would read where it is: on
        the device, and, if donated, free to take (its output then written where it is)."""
        device, donated = self.device, self.donated.values()
        return tuple(
            (i, device.address(storage))
            for i, arg in enumerate(args)
            if i not in self._copied_in
            and (storage := _storage_of(arg)) is not None
            and (i in taken or i not in donated)
        )

    def _donations(self, args) -> dict:
        """{input index: its device buffer} for each donated argument whose memory an output
        may take over (`_taken`), found before any view of the arguments exists (a view
        would count as another holder)."""
        return {
            i: storage
            for i in self.donated.values()
            if (storage := self._taken(args, i)) is not None
        }

    def _allocate(self, args, taken: dict) -> tuple[dict, list]:
        """Device buffers for a call, all before any kernel runs: the arguments' copies, the
        outputs and the arena, as views by kernel-IR buffer; the outputs that donated
        arguments host take over the memory `taken` gives them (none in a profile)."""
        device = self.device
        if self._too_big:
            raise MemoryError
        program = self.program
        views = dict(self.consts)
        for buffer, arg, dtype in zip(program.inputs, args, self._in_dtypes):
            views[buffer] = self._argument(arg, dtype)
        outputs = self._results(taken)
        for k, i in self.donated.items():
            host = program.inputs[i]
            if i not in taken:  # a copy of the argument hosts the output instead
                argument = device.view(views[host], host.dtype)  # (complex: as its parts)
                device.copy(device.view(outputs[k], host.dtype), argument)
            views[host] = device.view(outputs[k], host.dtype)
        for buffer, out in zip(program.outputs, outputs):
            views[buffer] = device.view(out, buffer.dtype)
        self._arena(views)
        return views, outputs

    def _argument(self, arg, dtype: np.dtype):
        """An argument as a flat typed view on the device: its own buffer if it is there,
        else a copy."""
        value = arg._value if type(arg) is Array else arg
        if type(value) is DeviceValue:
            return self.device.view(value.storage, dtype)
        if transfer_guards.active and np.ndim(value):
            transfer_guards.guard("host_to_device", np.shape(value), dtype, self.device.name)
        return _on_device(self.device, np.ascontiguousarray(value, dtype), dtype)

    def _arena(self, views: dict) -> None:
        """Allocates the working memory of one call and adds its buffers' views to `views`."""
        device = self.device
        offsets = self.memory.offsets
        arena = device.xp.empty(max(self.memory.arena_bytes, 1), np.uint8) if offsets else None
        for buffer, offset in offsets.items():
            views[buffer] = device.view(arena[offset : offset + nbytes(buffer)], buffer.dtype)
        if self.workspace is not None:
            views[self.workspace] = device.xp.empty(self.workspace.size, np.uint8)

    @property
    def working_bytes(self) -> int:
        """A call's working memory: the arena, and cuBLASLt's workspace if it has one."""
        return self.memory.arena_bytes + (0 if self.workspace is None else self.workspace.size)

    def _out_of_memory(self, args) -> str:
        arguments = [(np.shape(a), np.dtype(d)) for a, d in zip(args, self._in_dtypes)]
        results = [(shape, np.dtype(d)) for shape, d in self._out_shapes]

        def listed(buffers) -> str:
            sizes = [f"{d.name}{list(s)} ({_bytes(math.prod(s) * d.itemsize)})" for s, d in buffers]
            return ", ".join(sizes) or "none"

        total = self.working_bytes + sum(math.prod(s) * d.itemsize for s, d in arguments + results)
        return (
            f"out of memory on {self.device.name}: this call needs {_bytes(total)} at once: "
            f"arguments {listed(arguments)}; results {listed(results)}; working memory "
            f"{_bytes(self.working_bytes)} for the program's intermediates "
            f"(compiled.memory_analysis() lists them){self.device.memory_note()}. Nothing ran: "
            "free device arrays, or split the batch"
        )

    def as_text(self) -> str:
        """The generated CUDA C: the prelude, then one kernel per fused step."""
        return self.source

    def fusion_plan(self) -> str:
        """The scheduled program, then the control flow that runs on the device (`regions`),
        each with the kernel running it, and whether calls replay as a CUDA graph."""
        lines = [self.program.as_text()]
        for step, kernel in self.regions.items():
            lines.append(f"on the device, one block ({kernel.name}): {step_text(step, '')[0]}")
        if self._launches is not None:
            lines.append(
                f"from its second call, one CUDA graph of {self._launches} launches where that "
                "is worth its copies (arguments in, but device arrays, read where they "
                "are; results out, but those its kernels write in place)"
            )
        return "\n".join(lines)

    def memory_analysis(self):
        return self.memory


def _storage_of(arg):
    """The device buffer of an argument on a GPU, else None."""
    value = arg._value if type(arg) is Array else arg
    if type(value) is not DeviceValue or value._parts is not None:
        return None
    return value.storage


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def launch_block(kernel: CudaKernel, chosen: int) -> int:
    """The block a launch of `kernel` has, where the launcher would choose `chosen`: the
    kernel's own where its threads hold fixed parts of each row, at least that where it is a
    region's kernel calling such kernels."""
    if kernel.cooperative:
        return max(chosen, kernel.block)
    return kernel.block or chosen


def _grid(kernel: CudaKernel, block: int, max_grid: int) -> int:
    """Blocks for a launch: one for a cooperative kernel, one per row for a row kernel, else
    enough for a thread per iteration of its parallel loop; at most `max_grid` (grid-stride
    loops cover the rest)."""
    if kernel.cooperative:
        return 1
    if kernel.row_width:
        return min(kernel.threads, max_grid)
    return min(math.ceil(kernel.threads / block), max_grid)


# Host scalars that calls copy to a device (the 2.0 of an eager `x * 2.0`), kept there by
# device, dtype and bits: a copy to a GPU waits for it, and eager operations must not wait at
# every call. Programs never write their inputs, so a kept copy stays as it was.
_scalars: dict = {}
_MAX_SCALARS = 1024


def _on_device(device, value: np.ndarray, dtype: np.dtype):
    """A contiguous host array as a flat typed view of a device copy."""
    flat = value.reshape(-1).view(_storage(dtype))
    if value.size != 1:
        return device.view(device.upload(flat), dtype)
    key = (device, dtype, value.tobytes())
    kept = _scalars.get(key)
    if kept is None:
        if len(_scalars) >= _MAX_SCALARS:
            _scalars.clear()
        kept = _scalars[key] = device.upload(flat)
    return device.view(kept, dtype)


@functools.cache
def _solver_enums() -> dict:
    """The libraries' values of the names a `solver.SolverCall` uses, with the batched Jacobi
    eigensolver's parameters (its defaults: a tolerance of the type's precision, eigenvalues
    in ascending order as LAPACK gives them), made once."""
    from cupy.cuda import cublas, cusolver

    return {
        "lower": cublas.CUBLAS_FILL_MODE_LOWER,
        "upper": cublas.CUBLAS_FILL_MODE_UPPER,
        "left": cublas.CUBLAS_SIDE_LEFT,
        "right": cublas.CUBLAS_SIDE_RIGHT,
        "N": cublas.CUBLAS_OP_N,
        "T": cublas.CUBLAS_OP_T,
        "C": cublas.CUBLAS_OP_C,
        "unit": cublas.CUBLAS_DIAG_UNIT,
        "non-unit": cublas.CUBLAS_DIAG_NON_UNIT,
        "vector": cusolver.CUSOLVER_EIG_MODE_VECTOR,
        "novector": cusolver.CUSOLVER_EIG_MODE_NOVECTOR,
        solver.JACOBI: cusolver.createSyevjInfo(),
    }


# CUDA's names of the element types a GEMM takes (cudaDataType: CUDA_R_32F, _64F, _16F, _16BF).
_CUDA_DATA_TYPES = {
    np.dtype(np.float32): 0,
    np.dtype(np.float64): 1,
    np.dtype(dtypes.float16): 2,
    np.dtype(dtypes.bfloat16): 14,
}


def _matrices(step: GemmStep, lhs, rhs) -> tuple:
    """A GEMM's flat operands as stacks of op(lhs) (batch, m, k) and op(rhs) (batch, k, n)."""
    m, n, k, batch = step.m, step.n, step.k, step.batch
    lhs = lhs.reshape((batch, k, m) if step.transpose_lhs else (batch, m, k))
    rhs = rhs.reshape((batch, n, k) if step.transpose_rhs else (batch, k, n))
    return (
        lhs.transpose(0, 2, 1) if step.transpose_lhs else lhs,
        rhs.transpose(0, 2, 1) if step.transpose_rhs else rhs,
    )


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits, to nearest even), as tensor cores
    round their operands; NaN and infinity stay as they are."""
    bits = x.view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(
        0xFFFFE000
    )
    return np.where(np.isfinite(x), rounded.view(np.float32), x)


def _storage(dtype: np.dtype) -> np.dtype:
    """The dtype a GPU buffer of `dtype` is made of: CuPy knows no bfloat16 and no narrow
    format (their bits are kept) and no float0, whose values hold no data (a placeholder byte
    each, never read)."""
    if dtype == dtypes.bfloat16:
        return np.dtype(np.uint16)
    if dtypes.is_narrow(dtype):
        return np.dtype(np.uint8)
    return np.dtype(np.bool_) if dtype == dtypes.float0 else dtype


def _moved(here: tuple, there: tuple) -> set:
    """The indices whose places differ between two `(index, address)` tuples."""
    here, there = dict(here), dict(there)
    return {i for i in here.keys() | there if here.get(i) != there.get(i)}


def _host(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype == dtypes.float0:
        return np.zeros(value.shape, dtype)
    return value.view(dtype) if value.dtype != dtype else value


class _Replay:
    """A program captured once as a graph over buffers of its own (arguments, results and
    arena), which each call copies its arguments into, replays, and copies its results out
    of, all on the current stream without waiting. Arguments in device memory are read where
    they are, each call passing its arguments in the same places (`places`: a graph holds
    addresses, not arrays); the results that only the program's kernels touch
    (`executable.in_place`) are written where the call wants them, their kernels reading the
    results' addresses from slots that each call writes, and the others (a library's GEMM
    writes them) where the calls that replay it have theirs (the memory pool hands a
    program's results the same few places again and again). A lock keeps two threads' calls
    from interleaving their writes."""

    def __init__(self, executable: CudaExecutable, key: tuple, placed: dict, written: dict):
        device, program = executable.device, executable.program
        xp = device.xp
        if executable._too_big:
            raise MemoryError
        self.executable = executable
        # (the matmul precision it was captured under, the stream it runs on, `places`)
        self.key = key
        # (((input index, device address), ...), ((output index, device address), ...)): the
        # arguments read and the results written where they are. Their arrays are not held:
        # once the graph is captured, whatever array a call passes at that address is the
        # one read (a graph reads it before later work on its stream can reuse the memory),
        # and a call's results are its own until they are dropped, when their memory may
        # come back to a later call in the same places.
        self.places = key[2]
        there = {program.inputs[i]: storage for i, storage in placed.items()}
        there.update((program.outputs[k], storage) for k, storage in written.items())
        hosts, in_place = executable.hosts, set(executable.in_place)
        own = [
            b
            for b in program.inputs + program.outputs
            if b not in hosts and b not in there and b not in in_place
        ]
        self.nbytes = executable.working_bytes + sum(nbytes(b) for b in own)
        self.lock = threading.Lock()
        self.views = dict(executable.consts)  # (what the replay holds: never an argument)
        for buffer in own:
            raw = xp.empty(buffer.size, _storage(buffer.dtype))
            self.views[buffer] = device.view(raw, buffer.dtype)
        for output, host in hosts.items():  # one buffer for the pair, as in the kernels
            if host not in there:
                self.views[output] = device.view(self.views[host], output.dtype)
        executable._arena(self.views)
        self.copied_in, self.copied_out = executable._copies(placed, written)
        staged = [self.views[program.inputs[i]] for i in self.copied_in]
        self.written = [k for k, b in enumerate(program.outputs) if b in in_place]
        outputs = [self.views[program.outputs[k]] for k in self.copied_out]
        self.copies_in = _Copies(device, staged, inward=True) if staged else None
        self.copies_out = _Copies(device, outputs, inward=False) if outputs else None
        # The results' addresses, in the order of `executable.slots`.
        addresses = device.upload(np.zeros(len(self.written), np.uint64))
        for k, slot in enumerate(executable.slots):
            self.views[slot] = addresses[k : k + 1]
        self.slots = _Slots(device, addresses)

        captured = dict(self.views)
        for buffer, storage in there.items():
            captured[buffer] = device.view(storage, buffer.dtype)
        for output, host in hosts.items():
            if host in there:
                captured[output] = device.view(captured[host], output.dtype)

        def walk(runner) -> None:
            if self.copies_in is not None:
                self.copies_in.launch(runner)
            _Walk(executable, captured, runner, executable.addressed).steps(program.steps)
            if self.copies_out is not None:
                self.copies_out.launch(runner)

        self.launch = device.capture(walk)

    def release(self) -> None:
        """Forgets this replay (its buffers go once no call is using them)."""
        self.executable._replays.pop(self.key, None)

    def __call__(self, args, results: list) -> list:
        """Replays the program over the call's arguments into its results (`_results`),
        which it returns."""
        executable = self.executable
        # (each argument's device buffer, held until the graph that reads it is launched)
        arguments = [
            executable._argument(args[i], executable._in_dtypes[i]) for i in self.copied_in
        ]
        with self.lock:
            if self.copies_in is not None:
                self.copies_in.point(arguments)
            if self.copies_out is not None:
                self.copies_out.point([results[k] for k in self.copied_out])
            if self.written:
                self.slots.point([results[k] for k in self.written])
            self.launch()
        return results


def _written_in_place(program: Program, hosts: dict, ours: dict) -> list[K.Buffer]:
    """The results that only kernels the program launches itself (the steps in `ours`)
    touch, not a library's GEMM, a copy, a control-flow step, an argument's or a constant's
    memory, each a result once: in a replay, these kernels write them where each call wants
    them, sparing their copies out."""
    elsewhere = set(program.inputs) | set(constants(program)) | set(hosts)
    by_kernels = set()
    for step in program.steps:
        (by_kernels if step in ours else elsewhere).update(step_buffers(step))
    once = {b for b in program.outputs if program.outputs.count(b) == 1}
    return [b for b in program.outputs if b in by_kernels and b in once and b not in elsewhere]


class _Copies:
    """The copies between a call's buffers and a replay's own, in one direction, as one launch
    of `COPIES` in the graph. Its table on the device holds the replay's side (where
    arguments go in, or where results are) and the byte counts; a call writes the addresses
    of its side (its arguments, or its fresh results) there (`point`, a launch for up to 16)
    before it launches the graph, unless they are where the last call's were."""

    def __init__(self, device, own: list, inward: bool):
        count = len(own)
        table = np.zeros(1 + 3 * count, np.uint64)
        table[0] = count
        mine = 1 if inward else 1 + count  # destinations in, sources out
        table[mine : mine + count] = [device.address(buffer) for buffer in own]
        table[1 + 2 * count :] = [buffer.nbytes for buffer in own]
        self.device = device
        self.table = device.upload(table)
        theirs = 1 + count if inward else 1
        self.theirs = _Slots(device, self.table[theirs : theirs + count])
        vectors = -(-max(buffer.nbytes for buffer in own) // 16)
        self.kernel = dataclasses.replace(COPIES, threads=max(vectors, 1))
        self.module = _copies_module(device)

    def launch(self, runner) -> None:
        runner.launch(self.module, self.kernel, [self.table])

    def point(self, buffers: list) -> None:
        """The call's side of each copy, in the order of the replay's buffers."""
        self.theirs.point(buffers)


@once
def _copies_module(device):
    """`COPIES` built for `device` (a GPU's or the emulator's), once."""
    return device.load(module_source([COPIES.text()]), [COPIES])


class _Recording:
    """Stands in for the emulator while a walk is captured: keeps each call for later with
    the addresses of the arrays it was given, not the arrays, as a GPU's graph keeps them:
    each replay runs on whatever memory is at those addresses then."""

    def __init__(self, device: Emulator):
        self.device = device
        self.calls: list = []

    def launch(self, module, kernel: CudaKernel, buffers: list) -> None:
        kept = [_Address.of(buffer) for buffer in buffers]
        self.calls.append(lambda: self.device.launch(module, kernel, [a.array() for a in kept]))

    def gemm(self, step: GemmStep, lhs, rhs, out, tf32: bool, addend=None, workspace=None):
        kept = [_Address.of(buffer) for buffer in (lhs, rhs, out)]
        also = None if addend is None else _Address.of(addend)
        self.calls.append(
            lambda: self.device.gemm(
                step, *[a.array() for a in kept], tf32, None if also is None else also.array()
            )
        )

    def copy(self, destination, source) -> None:
        to, of = _Address.of(destination), _Address.of(source)
        self.calls.append(lambda: self.device.copy(to.array(), of.array()))


@dataclasses.dataclass(frozen=True)
class _Address:
    """Where a flat emulated device array is, and what it holds."""

    at: int
    dtype: np.dtype
    size: int

    @staticmethod
    def of(buffer: np.ndarray) -> _Address:
        if buffer.ndim != 1 or not buffer.flags.c_contiguous:
            raise TypeError("a recorded walk passes flat device buffers")
        return _Address(buffer.ctypes.data, buffer.dtype, buffer.size)

    def array(self) -> np.ndarray:
        memory = (ctypes.c_char * (self.size * self.dtype.itemsize)).from_address(self.at)
        return np.frombuffer(memory, self.dtype, self.size)


class _Timed:
    """Stands in for the device while a walk is profiled: makes each launch, GEMM and
    copy, each between two points of the device's clock. The device is kept busy before each
    (`occupy`) while the host makes the call, so that a span is the device's time alone, not
    the host's to call cuBLAS from Python or launch a kernel."""

    def __init__(self, device):
        self.device = device
        self.spans: list = []  # (what ran, start, end)

    def timed(self, what: str, run, *args) -> None:
        self.device.occupy(PROFILE_LEAD_SECONDS)
        start = self.device.clock()
        run(*args)
        self.spans.append((what, start, self.device.clock()))

    def launch(self, module, kernel: CudaKernel, buffers: list) -> None:
        self.timed(kernel.name, self.device.launch, module, kernel, buffers)

    def gemm(self, step: GemmStep, *args) -> None:
        self.timed(step.label(), self.device.gemm, step, *args)

    def copy(self, *args) -> None:
        self.timed("copy", self.device.copy, *args)


class _Walk:
    """Runs a program's steps on the device, binding region programs' inputs as it goes.
    `runner` launches, multiplies and copies: the device, or what captures a graph of it."""

    def __init__(self, executable: CudaExecutable, views: dict, runner=None, kernels=None):
        self.executable = executable
        self.device = executable.device
        self.runner = runner if runner is not None else executable.device
        self.views = views
        # (a replay's kernels writing results in place, for the steps that have them)
        self.kernels = kernels or {}

    def steps(self, steps: list) -> None:
        on_device = self.executable.regions
        for step in steps:
            if step in on_device:
                self.launch(on_device[step])
            else:
                visit(self, step)

    def kernel(self, step: KernelStep) -> None:
        self.launch(self.kernels.get(step) or self.executable.kernels[step])

    def launch(self, kernel: CudaKernel) -> None:
        views = (self.views[b] for b in kernel.params)
        buffers = [view if view.size else _spare(self.device) for view in views]
        self.runner.launch(self.executable.module, kernel, buffers)

    def bind(self, program: Program, sources: list) -> None:
        for buffer, source in zip(program.inputs, sources):
            self.views[buffer] = source

    def copy_all(self, destinations: list, sources: list) -> None:
        for d, s in zip(destinations, sources):
            self.runner.copy(self.views[d], self.views[s])

    def scalar(self, buffer) -> int:
        return int(self.device.download(self.views[buffer][:1])[0])

    def gemm(self, step: GemmStep) -> None:
        kernel = self.kernels.get(step)
        if kernel is not None:
            self.launch(kernel)
            return
        tf32 = step.out.dtype == np.float32 and allows_tf32(step.eqn.params.get("precision"))
        lhs, rhs, out = (self.views[b] for b in (step.lhs, step.rhs, step.out))
        addend = None if step.addend is None else self.views[step.addend]
        workspace = self.views.get(self.executable.workspace)
        self.runner.gemm(step, lhs, rhs, out, tf32, addend, workspace)

    def cond(self, step: CondStep) -> None:
        index = min(max(self.scalar(step.index), 0), len(step.branches) - 1)
        branch = step.branches[index]
        self.bind(branch, [self.views[b] for b in step.operands])
        self.steps(branch.steps)
        self.copy_all(step.outputs, branch.outputs)

    def while_loop(self, step: WhileStep) -> None:
        self.copy_all(step.carry, step.init)
        while True:
            self.bind(step.cond, [self.views[b] for b in step.cond_consts + step.carry])
            self.steps(step.cond.steps)
            if not self.scalar(step.cond.outputs[0]):
                return
            self.bind(step.body, [self.views[b] for b in step.body_consts + step.carry])
            self.steps(step.body.steps)
            self.copy_all(step.carry, step.body.outputs)

    def scan(self, step: ScanStep) -> None:
        self.copy_all(step.carry, step.init)
        body = step.body
        inner_xs = body.inputs[len(step.consts) + len(step.init) :]
        num_carry = len(step.carry)
        for i in range(step.length):
            position = step.length - 1 - i if step.reverse else i
            slices = [
                self.views[xs][position * inner.size : (position + 1) * inner.size]
                for xs, inner in zip(step.xs, inner_xs)
            ]
            self.bind(body, [self.views[b] for b in step.consts + step.carry] + slices)
            self.steps(body.steps)
            self.copy_all(step.carry, body.outputs[:num_carry])
            for ys, inner in zip(step.ys, body.outputs[num_carry:]):
                size = inner.size
                ys_slice = self.views[ys][position * size : (position + 1) * size]
                self.runner.copy(ys_slice, self.views[inner])

    def lapack(self, step: FortranCall) -> None:
        """A decomposition's routine: cuSOLVER's on the device where it has one (`solver`),
        else the host's LAPACK (NumPy's OpenBLAS), the buffers it names going to the host
        and back (the emulator's are host memory)."""
        from funcgrad.backends.llvm import blas

        plan = self.executable.solves.get(step)
        if plan is not None:
            self.device.solve(plan, self.views)
            return
        buffers = list(dict.fromkeys(arg[0] for arg in step.args if isinstance(arg, tuple)))
        hosts = {b: np.ascontiguousarray(self.device.download(self.views[b])) for b in buffers}
        blas.call_lapack(
            step.routine, step.dtype, step.args, step.batch, lambda b: hosts[b].ctypes.data
        )
        for b in buffers:
            if hosts[b] is not self.views[b]:
                self.views[b][...] = self.device.upload(hosts[b])

    def callback(self, step: CallbackStep) -> None:
        values = [_host(self.device.download(self.views[b]), b.dtype).copy() for b in step.operands]
        for buffer, result in zip(step.results, step.run(values)):
            target = self.views[buffer]
            target[...] = self.device.upload(result.reshape(-1).view(target.dtype))
