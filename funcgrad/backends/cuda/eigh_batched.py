"""cuSOLVER's batched symmetric eigensolver of any size (`cusolverDnXsyevBatched`, CUDA 12.6
on), called directly in the library CuPy loaded: CuPy has no wrapper for it.

A stack of eigendecompositions of matrices too large for the batched Jacobi solver (more than
32 rows) is then one call, where a call a matrix cost 2 ms each for 256 rows on an H200 (a
cuSOLVER call from Python and its synchronizations per matrix). A library without the routine
answers False, and the caller decomposes the matrices one by one.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import numpy as np

# cudaDataType: the stack's elements and its real eigenvalues.
_DATA_TYPES = {
    np.dtype(np.float32): (0, 0),  # CUDA_R_32F
    np.dtype(np.float64): (1, 1),  # CUDA_R_64F
    np.dtype(np.complex64): (4, 0),  # CUDA_C_32F, CUDA_R_32F
    np.dtype(np.complex128): (5, 1),  # CUDA_C_64F, CUDA_R_64F
}


@functools.cache
def _routines():
    """(the workspace query, the solver, a parameters object) from the cuSOLVER CuPy's
    wrappers call (a handle belongs to its own copy of the library), or None where that
    library lacks them."""
    from cupy.cuda import cusolver

    library = ctypes.CDLL(sys.modules[cusolver.setStream.__module__].__file__)
    try:
        query = library.cusolverDnXsyevBatched_bufferSize
        solve = library.cusolverDnXsyevBatched
    except AttributeError:
        return None
    pointer, integer, wide, size = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_size_t
    head = [
        pointer, pointer, integer, integer, wide,  # handle, params, jobz, uplo, n
        integer, pointer, wide, integer, pointer,  # type of A, A, lda, type of W, W
        integer,  # compute type
    ]  # fmt: skip
    query.argtypes = [*head, ctypes.POINTER(size), ctypes.POINTER(size), wide]
    # ..., device workspace and its bytes, host workspace and its bytes, info, batch
    solve.argtypes = [*head, pointer, size, pointer, size, pointer, wide]
    query.restype = solve.restype = integer
    return query, solve, cusolver.createParams()


def solve(xp, handle: int, dtype: np.dtype, args: list) -> bool:
    """One call for the stack `args` describes (jobz, uplo as the library's enums; n; the
    matrices' and eigenvalues' addresses; lda; the infos' address; the batch: a
    `solver.SolverCall` of "syevBatched" with its workspaces left out), on the current
    stream. False where the library has no such routine or refuses these matrices."""
    from cupy.cuda import cusolver

    routines = _routines()
    if routines is None:
        return False
    query, solve, params = routines
    jobz, uplo, n, matrices, lda, values, infos, batch = args
    data_type, value_type = _DATA_TYPES[np.dtype(dtype)]
    head = (handle, params, jobz, uplo, n, data_type, matrices, lda, value_type, values, data_type)
    cusolver.setStream(handle, xp.cuda.get_current_stream().ptr)
    device_bytes, host_bytes = ctypes.c_size_t(), ctypes.c_size_t()
    status = query(*head, ctypes.byref(device_bytes), ctypes.byref(host_bytes), batch)
    if status:
        return False
    on_device = xp.empty(max(device_bytes.value, 1), np.uint8)
    on_host = np.empty(max(host_bytes.value, 1), np.uint8)
    status = solve(
        *head,
        on_device.data.ptr,
        device_bytes.value,
        on_host.ctypes.data,
        host_bytes.value,
        infos,
        batch,
    )
    if status:
        from cupy_backends.cuda.libs.cusolver import CUSOLVERError

        raise CUSOLVERError(status)
    return True
