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


# -- cuBLASLt: a GEMM whose addend is not its result -------------------------------------------
#
# The legacy API's GEMM adds `beta` times its result's own contents: an update `w - lr * g`
# whose result is not w's memory would first copy w there, a pass over both that costs what
# the folded update saves. cuBLASLt reads the addend (C) and writes the result (D) apart.

# Enumerations of cublasLt.h.
_DESC_TRANSA, _DESC_TRANSB = 3, 4  # (int32)
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6  # (int32, int64)
_PREFERENCE_MAX_WORKSPACE = 1  # (uint64)
_PREFERENCE_ALIGNMENTS = (5, 6, 7, 8)  # minimum alignments of A, B, C and D in bytes (uint32)
_CUDA_R_32F, _CUDA_R_64F = 0, 1
_NOT_SUPPORTED = 15


class _HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


@functools.cache
def _lt() -> ctypes.CDLL:
    """cuBLASLt's entry points, in the cuBLAS CuPy loaded (which links them)."""
    library = _library()
    pointer, out, integer, size = (
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_size_t,
    )
    library.cublasLtCreate.argtypes = [out]
    library.cublasLtMatmulDescCreate.argtypes = [out, integer, integer]
    library.cublasLtMatmulDescSetAttribute.argtypes = [pointer, integer, pointer, size]
    library.cublasLtMatrixLayoutCreate.argtypes = [
        out,
        integer,
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_int64,
    ]
    library.cublasLtMatrixLayoutSetAttribute.argtypes = [pointer, integer, pointer, size]
    library.cublasLtMatmulPreferenceCreate.argtypes = [out]
    library.cublasLtMatmulPreferenceSetAttribute.argtypes = [pointer, integer, pointer, size]
    library.cublasLtMatmulPreferenceDestroy.argtypes = [pointer]
    library.cublasLtMatmulAlgoGetHeuristic.argtypes = [
        pointer, pointer, pointer, pointer, pointer, pointer, pointer,  # handle, desc, A-D, options
        integer, ctypes.POINTER(_HeuristicResult), ctypes.POINTER(integer),
    ]  # fmt: skip
    library.cublasLtMatmul.argtypes = [
        pointer, pointer,  # handle, desc
        pointer, pointer, pointer, pointer, pointer,  # alpha, A, A's layout, B, B's layout
        pointer, pointer, pointer, pointer, pointer,  # beta, C, C's layout, D, D's layout
        ctypes.POINTER(_HeuristicResult), pointer, size, pointer,  # algo, workspace, size, stream
    ]  # fmt: skip
    return library


def lt_handle() -> int:
    """A new cuBLASLt handle (one per device is enough: calls name their stream)."""
    handle = ctypes.c_void_p()
    _check(_lt().cublasLtCreate(ctypes.byref(handle)))
    return handle.value


def _set(setter, descriptor, attribute: int, value) -> None:
    _check(setter(descriptor, attribute, ctypes.byref(value), ctypes.sizeof(value)))


def _layout(data_type: int, rows: int, columns: int, batch: int) -> ctypes.c_void_p:
    """A column-major matrix's layout, `batch` of them one after another."""
    library = _lt()
    layout = ctypes.c_void_p()
    _check(library.cublasLtMatrixLayoutCreate(ctypes.byref(layout), data_type, rows, columns, rows))
    if batch > 1:
        setter = library.cublasLtMatrixLayoutSetAttribute
        _set(setter, layout, _LAYOUT_BATCH_COUNT, ctypes.c_int32(batch))
        _set(setter, layout, _LAYOUT_BATCH_STRIDE, ctypes.c_int64(rows * columns))
    return layout


class LtGemm:
    """One shape of `D = alpha * op(A) @ op(B) + beta * C` (column-major, strided batches of
    one data type; C and D alike) with the algorithm cuBLASLt's heuristic picked for it, for
    operands of at least the given alignments and a workspace of up to `workspace_bytes`.
    Made once per shape and kept (its descriptors are the library's, a few hundred bytes)."""

    def __init__(
        self,
        handle: int,
        ops: tuple[int, int],
        shape: tuple[int, int, int, int],
        data_type: int,
        compute: int,
        alignments: tuple[int, int, int, int],
        workspace_bytes: int,
    ):
        library = _lt()
        batch, m, n, k = shape
        op_a, op_b = ops
        self.handle = handle
        scale = _CUDA_R_64F if data_type == _CUDA_R_64F else _CUDA_R_32F
        self.desc = ctypes.c_void_p()
        _check(library.cublasLtMatmulDescCreate(ctypes.byref(self.desc), compute, scale))
        setter = library.cublasLtMatmulDescSetAttribute
        _set(setter, self.desc, _DESC_TRANSA, ctypes.c_int32(op_a))
        _set(setter, self.desc, _DESC_TRANSB, ctypes.c_int32(op_b))
        # Stored shapes: op(A) is m x k, op(B) k x n, C and D m x n.
        self.a = _layout(data_type, *((k, m) if op_a else (m, k)), batch)
        self.b = _layout(data_type, *((n, k) if op_b else (k, n)), batch)
        self.c = _layout(data_type, m, n, batch)
        preference = ctypes.c_void_p()
        _check(library.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)))
        try:
            setter = library.cublasLtMatmulPreferenceSetAttribute
            _set(setter, preference, _PREFERENCE_MAX_WORKSPACE, ctypes.c_uint64(workspace_bytes))
            for attribute, alignment in zip(_PREFERENCE_ALIGNMENTS, alignments):
                _set(setter, preference, attribute, ctypes.c_uint32(alignment))
            self.algo = _HeuristicResult()
            found = ctypes.c_int(0)
            _check(
                library.cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    self.desc,
                    self.a,
                    self.b,
                    self.c,
                    self.c,
                    preference,
                    1,
                    ctypes.byref(self.algo),
                    ctypes.byref(found),
                )  # fmt: skip
            )
        finally:
            library.cublasLtMatmulPreferenceDestroy(preference)
        if found.value < 1 or self.algo.state:
            _check(self.algo.state or _NOT_SUPPORTED)
        self.workspace_bytes = self.algo.workspace_size

    def __call__(self, stream: int, alpha, a: int, b: int, beta, c: int, d: int, workspace: int):
        """The product on `stream`, alpha and beta (NumPy scalars) read from the host."""
        _check(
            _lt().cublasLtMatmul(
                self.handle,
                self.desc,
                alpha.ctypes.data,
                a,
                self.a,
                b,
                self.b,
                beta.ctypes.data,
                c,
                self.c,
                d,
                self.c,
                ctypes.byref(self.algo),
                workspace,
                self.workspace_bytes,
                stream,
            )  # fmt: skip
        )
