"""The BLAS and LAPACK that NumPy's wheel ships (OpenBLAS, ILP64 symbols), made callable from
generated code: their addresses are handed to LLVM, so a library call costs no Python."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import threading

import llvmlite.binding as llvm
import numpy as np

SGEMM = "scipy_cblas_sgemm64_"
DGEMM = "scipy_cblas_dgemm64_"
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


@functools.cache
def library() -> ctypes.CDLL:
    """Load the library and register its GEMMs with LLVM's symbol resolver."""
    folder = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    candidates = sorted(glob.glob(os.path.join(folder, "libscipy_openblas64_*.so*")))
    if not candidates:
        raise RuntimeError(
            f"the LLVM backend calls the OpenBLAS that NumPy's wheel ships, but found none in "
            f"{os.path.normpath(folder)}; install NumPy from its wheel (pip install numpy)"
        )
    lib = ctypes.CDLL(candidates[0])
    for name in (SGEMM, DGEMM):
        llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    return lib


# The library's kernels by the vectors they use, by the core names it reports.
_WIDE_CORES = {"SkylakeX", "Cooperlake", "SapphireRapids"}  # AVX-512


@functools.cache
def vector_bytes() -> int:
    """The width of the vectors the library's GEMM kernels use on this machine (it picks its
    kernels for the CPU when it loads, or as OPENBLAS_CORETYPE says)."""
    name = library().scipy_openblas_get_corename64_
    name.restype = ctypes.c_char_p
    return 64 if name().decode() in _WIDE_CORES else 32


@functools.cache
def lapack_symbol(routine: str, dtype: np.dtype) -> str:
    """The library's symbol for a LAPACK routine at a dtype, made known to LLVM."""
    letter = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}
    return symbol(f"scipy_{letter[np.dtype(dtype).name]}{routine}_64_")


@functools.cache
def symbol(name: str) -> str:
    """Make the library's function `name` known to LLVM (code calling it links to it)."""
    llvm.add_symbol(name, ctypes.cast(getattr(library(), name), ctypes.c_void_p).value)
    return name


_limit_lock = threading.Lock()
_limits: list[int] = []  # the counts asked for by the limits in force, and the count before


@contextlib.contextmanager
def threads_limited_to(count: int):
    """OpenBLAS's thread count lowered to `count` while the block runs (the smallest of the
    limits in force wins; the library's own count returns with the last). pmap's devices each
    call GEMMs at once: without this, each would start a thread per core."""
    lib = library()
    with _limit_lock:
        if not _limits:
            _limits.append(lib.scipy_openblas_get_num_threads64_())
        _limits.append(max(1, count))
        lib.scipy_openblas_set_num_threads64_(ctypes.c_int(min(_limits[1:])))
    try:
        yield
    finally:
        with _limit_lock:
            _limits.remove(max(1, count))
            lib.scipy_openblas_set_num_threads64_(
                ctypes.c_int(min(_limits[1:]) if len(_limits) > 1 else _limits[0])
            )
            if len(_limits) == 1:
                _limits.clear()


def workspace_query(routine: str, dtype: np.dtype, args: list) -> dict:
    """The optimal workspace sizes of a LAPACK call (a call with LWORK = -1), as NumPy asks
    for them. `args` are the call's, with `funcgrad.compiler.lapack`'s placeholders."""
    from funcgrad.compiler import lapack

    routine_function = getattr(library(), lapack_symbol(routine, dtype))
    keep, values, answers = [], [], {}
    for arg in args:
        if arg in (lapack.WORK, lapack.IWORK, lapack.RWORK):
            kind = {lapack.WORK: dtype, lapack.IWORK: np.int64, lapack.RWORK: np.float64}[arg]
            answer = np.zeros(1, kind)
            size = {lapack.WORK: lapack.LWORK, lapack.IWORK: lapack.LIWORK}
            answers[size.get(arg, lapack.LRWORK)] = answer
            keep.append(answer)
            values.append(ctypes.c_void_p(answer.ctypes.data))
        elif isinstance(arg, tuple):
            dummy = np.zeros(1, arg[0].dtype)
            keep.append(dummy)
            values.append(ctypes.c_void_p(dummy.ctypes.data))
        elif isinstance(arg, str) and arg.startswith("<"):
            scalar = ctypes.c_int64(-1)
            keep.append(scalar)
            values.append(ctypes.byref(scalar))
        elif isinstance(arg, str):
            letter = ctypes.c_char(arg.encode())
            keep.append(letter)
            values.append(ctypes.byref(letter))
        else:
            scalar = ctypes.c_int64(arg)
            keep.append(scalar)
            values.append(ctypes.byref(scalar))
    lengths = [ctypes.c_int64(1)] * sum(isinstance(a, str) and not a.startswith("<") for a in args)
    routine_function(*values, *lengths)
    return {key: int(answer[0].real) for key, answer in answers.items()}


def call_lapack(routine: str, dtype: np.dtype, args: list, batch: int, address) -> None:
    """A `FortranCall` made from Python, once per matrix of the stack: `address(buffer)` gives
    the host address of a buffer the call names (the CUDA backend's decompositions that
    cuSOLVER lacks, and the emulator's stand-in for cuSOLVER)."""
    function = getattr(library(), lapack_symbol(routine, dtype))
    keep = []
    for arg in args:
        if isinstance(arg, str):
            keep.append(ctypes.c_char(arg.encode()))
        elif isinstance(arg, float):
            keep.append(np.array([arg], dtype))
        elif not isinstance(arg, tuple):
            keep.append(ctypes.c_int64(arg))
    lengths = [ctypes.c_int64(1)] * sum(isinstance(a, str) for a in args)
    for matrix in range(batch):
        scalars, values = iter(keep), []
        for arg in args:
            if isinstance(arg, tuple):
                buffer, stride = arg
                values.append(
                    ctypes.c_void_p(address(buffer) + matrix * stride * buffer.dtype.itemsize)
                )
                continue
            scalar = next(scalars)
            values.append(
                ctypes.c_void_p(scalar.ctypes.data)
                if isinstance(scalar, np.ndarray)
                else ctypes.byref(scalar)
            )
        function(*values, *lengths)


def _install() -> None:
    from funcgrad.compiler import lapack

    lapack.workspace_query = workspace_query


_install()
