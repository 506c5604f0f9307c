"""schur: the Schur decomposition A = Z T Z^H of general square matrices.

A real matrix has a real quasi-triangular T (its complex eigenvalue pairs as 2 x 2 blocks on
the diagonal) and a real orthogonal Z; a complex matrix an upper triangular T and a unitary Z.
Both come from LAPACK's gees, eigenvalues left in the order it finds them. NumPy does not
expose gees, so the reference calls it through the host's LAPACK (the OpenBLAS that NumPy
ships) with the arguments and workspaces compiled programs give it (`compiler/lapack.py`):
float32 matrices in float64 and complex64 in complex128, as the other decompositions.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.lax.base import asarray
from funcgrad.lax.eig import _check_square
from funcgrad.lax.linalg_decomp import _batch_to_front

__all__ = ["schur"]

_ACCEPTED = (dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128)

schur_p = Primitive("schur", multiple_results=True)


@schur_p.def_abstract_eval
def _schur_abstract_eval(a: ShapedArray, *, compute_schur_vectors: bool):
    _check_square("schur", a, _ACCEPTED)
    form = ShapedArray(a.shape, a.dtype)
    return [form, ShapedArray(a.shape, a.dtype)] if compute_schur_vectors else [form]


def _gees(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """gees of each matrix of a stack, in the working precision; NaN for the matrices it fails
    on (info != 0), as compiled programs give."""
    from funcgrad.backends.llvm import blas
    from funcgrad.compiler import lapack

    *batch_shape, n, _ = a.shape
    batch = math.prod(batch_shape)
    dtype = np.dtype(np.complex128 if a.dtype.kind == "c" else np.float64)
    parts = 2 if dtype.kind == "c" else 1
    # Column-major matrices (each one's transpose, row-major), complex ones seen as their
    # interleaved real parts, as compiled programs hold them.
    matrices = np.ascontiguousarray(np.swapaxes(a, -1, -2), dtype).reshape(batch, n, n)
    vectors = np.zeros((batch, n, n), dtype)
    eigenvalues = [np.zeros((batch, n), dtype) for _ in range(3 - parts)]
    unused, info = np.zeros(1, np.int64), np.zeros(batch, np.int64)
    real = [m.view(dtypes.real_dtype(dtype)) for m in (matrices, vectors, *eigenvalues)]
    args = lapack.gees_arguments(n, parts, real[0], real[2:], real[1], unused, info)
    args = lapack.with_workspaces(
        "gees",
        dtype,
        args,
        lapack.gees_minimum(n, parts),
        blas.workspace_query,
        lambda part, size: np.zeros(size, part),
    )
    if batch:
        blas.call_lapack("gees", dtype, args, batch, lambda array: array.ctypes.data)
    failed = (info != 0)[:, None, None]
    form, vectors = (np.where(failed, np.nan, np.swapaxes(m, -1, -2)) for m in (matrices, vectors))
    return form.reshape(a.shape), vectors.reshape(a.shape)


@schur_p.def_impl
def _schur_impl(a, *, compute_schur_vectors):
    a = np.asarray(a)
    form, vectors = _gees(a)
    outs = [form, vectors] if compute_schur_vectors else [form]
    return [out.astype(a.dtype) for out in outs]


schur_p.not_applicable["jvp"] = (
    "the Schur form is not unique (the order of eigenvalues on its diagonal, the signs and "
    "phases of the Schur vectors, a real form's 2 x 2 blocks), so it has no derivative rule"
)
schur_p.not_applicable["transpose"] = "not linear"
_batch_to_front(schur_p)


def schur(
    x,
    *,
    compute_schur_vectors: bool = True,
    sort_eig_vals: bool = False,
    select_callable=None,
) -> list:
    """The Schur form T of square matrices and, when asked, the Schur vectors Z, with
    x = Z T Z^H: [T, Z] or [T]. Eigenvalues appear on T's diagonal (a real matrix's complex
    pairs as 2 x 2 blocks) in the order LAPACK finds them; reordering them is not offered."""
    if sort_eig_vals or select_callable is not None:
        raise NotImplementedError(
            "schur: sorting eigenvalues (sort_eig_vals, select_callable) is not implemented"
        )
    return schur_p.bind(asarray(x), compute_schur_vectors=bool(compute_schur_vectors))
