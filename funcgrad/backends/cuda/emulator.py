"""Run generated CUDA C on the host: the same source, compiled as C++ behind a header that
defines CUDA's built-ins, with each launch running its grid's blocks and threads in turn.

This is how the CUDA renderer is tested where no GPU exists: indexing, grid-stride loops,
thread-private scratch, one-thread kernels and the prelude's semantics all run for real and
are compared with the reference backend. The kernels this renderer emits share no memory
between threads and never synchronize, so running threads one after another is exact; the
exception, a block reduction (one block whose threads meet in shared memory), runs its
threads as POSIX threads at a barrier.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading

from funcgrad.backends.cuda.render import MATH, CudaKernel, memory_type
from funcgrad.compiler import kernel_ir as K
from funcgrad.once import once

# The C library's math functions the generated code calls, declared rather than included:
# parsing <math.h> in C++ mode costs most of a host build's time.
_UNARY_MATH = [name for op, name in MATH.items() if op in K.UNARY_OPS] + ["fabs", "rint", "round"]
_BINARY_MATH = [name for op, name in MATH.items() if op in K.BINARY_OPS]
_MATH = "\n".join(
    [f"float {f}f(float); double {f}(double);" for f in dict.fromkeys(_UNARY_MATH)]
    + [f"float {f}f(float, float); double {f}(double, double);" for f in _BINARY_MATH]
)
_BUILTINS = r"""
#include <pthread.h>
#define memcpy __builtin_memcpy
struct fg_dim3 { unsigned int x, y, z; };
static thread_local fg_dim3 threadIdx, blockIdx;  // each emulated thread's own
static fg_dim3 blockDim, gridDim;
// A cooperative block runs its threads at once, as POSIX threads meeting at one barrier;
// its __shared__ arrays are the kernel's statics (one block runs at a time).
static pthread_barrier_t fg_block_barrier;
static inline void __syncthreads() { pthread_barrier_wait(&fg_block_barrier); }
// A shuffle: each lane of the warp posts its value, the warp meets, each reads its source
// lane's, and the warp meets again before the slots can change.
static pthread_barrier_t fg_warp_barriers[32];
template <class T> static inline T __shfl_down_sync(unsigned int, T v, unsigned int delta) {
  static T lanes[1024];
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  lanes[threadIdx.x] = v;
  pthread_barrier_wait(&fg_warp_barriers[warp]);
  const T got = lane + delta < 32 ? lanes[threadIdx.x + delta] : v;
  pthread_barrier_wait(&fg_warp_barriers[warp]);
  return got;
}
static void fg_warps(unsigned int block, bool start) {  // a block's warp barriers
  for (unsigned int w = 0; w * 32 < block; ++w) {
    const unsigned int lanes = block - 32 * w < 32 ? block - 32 * w : 32;
    if (start) pthread_barrier_init(&fg_warp_barriers[w], 0, lanes);
    else pthread_barrier_destroy(&fg_warp_barriers[w]);
  }
}
#define __shared__ static
struct fg_thread { unsigned int index, block; void** args; };
#define __global__
#define __launch_bounds__(threads)
#define __device__
#define __forceinline__ inline
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
"""
HOST_HEADER = "\n".join(
    ["// ---- CUDA built-ins on the host", 'extern "C" {', _MATH, "}", _BUILTINS]
)


class EmulatorError(RuntimeError):
    pass


@functools.cache
def compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


def _launcher(kernel: CudaKernel) -> str:
    """A C entry that runs every (block, thread) of a launch of `kernel`: one after another,
    or, for a kernel whose threads cooperate (one block, or a block per row), block after
    block with all of a block's threads at once."""
    arguments = ", ".join(
        f"({'const ' if const else ''}{memory_type(b.dtype)}*)args[{k}]"
        for k, (b, const) in enumerate(zip(kernel.params, kernel.const_params))
    )
    signature = "unsigned int grid, unsigned int block, void** args"
    head = f'extern "C" void launch_{kernel.name}({signature}) {{'
    if kernel.cooperative or kernel.row_width:
        return "\n".join(
            [
                f"static void* run_{kernel.name}(void* task) {{",
                "  const fg_thread* me = (const fg_thread*)task;",
                "  void** args = me->args;",
                "  blockIdx.x = me->block; threadIdx.x = me->index;",
                f"  {kernel.name}({arguments});",
                "  return 0;",
                "}",
                head,
                "  gridDim.x = grid; blockDim.x = block;",
                "  pthread_barrier_init(&fg_block_barrier, 0, block);",
                "  fg_warps(block, true);",
                "  pthread_t threads[1024]; fg_thread tasks[1024];",
                "  for (unsigned int b = 0; b < grid; ++b) {",
                "    for (unsigned int t = 0; t < block; ++t) {",
                "      tasks[t].index = t; tasks[t].block = b; tasks[t].args = args;",
                f"      pthread_create(&threads[t], 0, run_{kernel.name}, &tasks[t]);",
                "    }",
                "    for (unsigned int t = 0; t < block; ++t) pthread_join(threads[t], 0);",
                "  }",
                "  pthread_barrier_destroy(&fg_block_barrier);",
                "  fg_warps(block, false);",
                "}",
            ]
        )
    return "\n".join(
        [
            head,
            "  gridDim.x = grid; blockDim.x = block;",
            "  for (unsigned int b = 0; b < grid; ++b) {",
            "    for (unsigned int t = 0; t < block; ++t) {",
            "      blockIdx.x = b; threadIdx.x = t;",
            f"      {kernel.name}({arguments});",
            "    }",
            "  }",
            "}",
        ]
    )


class EmulatedModule:
    """The host build of one generated module; `launch` runs a kernel over a grid.

    The build of a source text is loaded once per process, so the modules of one program on
    several emulated GPUs share its statics (grid and block sizes, barriers, shared arrays):
    their launches take turns."""

    def __init__(self, source: str, kernels: list[CudaKernel]):
        text = "\n".join([HOST_HEADER, source, *map(_launcher, kernels)])
        path = _build(text)
        self.library = ctypes.CDLL(path)
        self.turn = _library_lock(path)
        self.entries = {}
        for kernel in kernels:
            entry = getattr(self.library, f"launch_{kernel.name}")
            entry.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
            entry.restype = None
            self.entries[kernel.name] = entry

    def launch(self, kernel: CudaKernel, grid: int, block: int, pointers: list[int]) -> None:
        table = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        with self.turn:
            self.entries[kernel.name](grid, block, table)


@once
def _library_lock(path: str) -> threading.Lock:
    return threading.Lock()


_BUILDS = os.path.join(tempfile.gettempdir(), f"funcgrad-cuda-emulator-{os.getuid()}")


def _build(text: str) -> str:
    """Compile `text` as C++ into a shared library (kept per source text in a temp folder)."""
    cxx = compiler()
    if cxx is None:
        raise EmulatorError("the CUDA emulator needs a C++ compiler (g++ or clang++; or set CXX)")
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    os.makedirs(_BUILDS, exist_ok=True)
    library = os.path.join(_BUILDS, f"{digest}.so")
    if os.path.exists(library):
        return library
    source = os.path.join(_BUILDS, f"{digest}.{os.getpid()}.cpp")
    with open(source, "w") as f:
        f.write(text)
    partial = f"{library}.{os.getpid()}.tmp"
    command = [
        cxx,
        "-std=c++17",
        "-O1",
        "-shared",
        "-fPIC",
        "-w",
        source,
        "-o",
        partial,
        "-lm",
        "-pthread",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulatorError(f"the host build of {source} failed:\n{done.stderr[:4000]}")
    os.replace(partial, library)  # atomic: a concurrent build of the same text is identical
    os.remove(source)
    return library
