"""The BLAS and LAPACK that NumPy's wheel ships (OpenBLAS, ILP64 symbols), made callable from
generated code: their addresses are handed to LLVM, so a library call costs no Python."""

from __future__ import annotations

import ctypes
import functools
import glob
import os

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


@functools.cache
def lapack_symbol(routine: str, dtype: np.dtype) -> str:
    """The library's symbol for a LAPACK routine at a dtype, made known to LLVM."""
    name = f"scipy_{'s' if dtype == np.float32 else 'd'}{routine}_64_"
    llvm.add_symbol(name, ctypes.cast(getattr(library(), name), ctypes.c_void_p).value)
    return name
