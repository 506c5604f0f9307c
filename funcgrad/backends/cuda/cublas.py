"""cuBLAS's strided-batched GEMM called directly, in the library CuPy loaded.

CuPy's cuBLAS wrappers refuse every call while the current stream is being captured (each
sets the handle's stream first, and that checks for a capture), though cuBLAS itself may be
captured (since CUDA 12.2 its workspace is allocated in stream order). A jitted program's
GEMMs are captured with its kernels into one CUDA graph, so they are made here, through
ctypes, on the handle CuPy keeps for the device; the enumerations are CuPy's. The other
cuBLAS calls (the solver's, never captured) go through CuPy, their scalars read from the
host as the GEMM's are (`scalars_on_the_host`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import sys

_POINTER_MODE_HOST = 0


@functools.cache
def _library() -> ctypes.CDLL:
    """cuBLAS as CuPy's wrappers call it: symbols looked up through the wrappers' extension
    module, whose dependencies hold the very library CuPy's handles belong to. (A process may
    hold two copies of cuBLAS, another framework's beside CuPy's; a handle of one passed to
    the other crashes.)"""
    from cupy.cuda import cublas, device

    device.get_cublas_handle()  # (loads cuBLAS)
    library = ctypes.CDLL(sys.modules[cublas.setStream.__module__].__file__)
    handle, pointer, integer, wide = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    library.cublasSetStream_v2.argtypes = [handle, pointer]
    library.cublasGetPointerMode_v2.argtypes = [handle, ctypes.POINTER(integer)]
    library.cublasSetPointerMode_v2.argtypes = [handle, integer]
    operand = [pointer, integer, integer, wide]  # data, type, leading dimension, stride
    library.cublasGemmStridedBatchedEx.argtypes = [
        handle, integer, integer, integer, integer, integer,  # op(A), op(B), m, n, k
        pointer, *operand, *operand, pointer, *operand,  # alpha, A, B, beta, C
        integer, integer, integer,  # batch, compute type, algorithm
    ]  # fmt: skip
    return library


def _check(status: int) -> None:
    if status:
        from cupy_backends.cuda.libs.cublas import CUBLASError

        raise CUBLASError(status)


@contextlib.contextmanager
def scalars_on_the_host(handle: int):
    """Within it, the handle's calls read their scalars (alpha, beta) from host memory; its
    pointer mode is restored after."""
    library = _library()
    mode = ctypes.c_int()
    _check(library.cublasGetPointerMode_v2(handle, ctypes.byref(mode)))
    _check(library.cublasSetPointerMode_v2(handle, _POINTER_MODE_HOST))
    try:
        yield
    finally:
        library.cublasSetPointerMode_v2(handle, mode.value)


def gemm_strided_batched(handle: int, stream: int, *args) -> None:
    """cublasGemmStridedBatchedEx(handle, *args) on `stream`, alpha and beta read from the
    host."""
    library = _library()
    _check(library.cublasSetStream_v2(handle, stream))
    with scalars_on_the_host(handle):
        _check(library.cublasGemmStridedBatchedEx(handle, *args))
