"""Complex decompositions in the compiler's form: complex matrices as real arrays with a
trailing axis of 2 (real and imaginary parts interleaved, NumPy's layout), so that after the
complex lowering LAPACK's complex routines can work on them in place.

`PAIRS[name]` is the `<name>_pairs` form of the decomposition `name`: it exists only inside
compiled programs, made by `compiler.complex_lowering` from a decomposition of complex
matrices. Its shape rule and impl are the decomposition's own, applied to the parts viewed as
complex numbers (its complex results held as parts too), so both backends agree.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.lax import eig, linalg_decomp, schur


def _as_complex(x) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(dtypes.complex_dtype(x.dtype))[..., 0]


def _as_pairs(out):
    out = np.asarray(out)
    if not dtypes.is_complex(out.dtype):
        return out
    out = np.ascontiguousarray(out)
    return out.view(dtypes.real_dtype(out.dtype)).reshape(out.shape + (2,))


def _complex_aval(aval: ShapedArray) -> ShapedArray:
    if aval.ndim < 1 or aval.shape[-1] != 2 or aval.dtype not in (dtypes.float32, dtypes.float64):
        raise TypeError(f"complex parts must be float32 or float64 of shape (..., 2), got {aval}")
    return ShapedArray(aval.shape[:-1], dtypes.complex_dtype(aval.dtype))


def _pairs_aval(aval: ShapedArray) -> ShapedArray:
    if not dtypes.is_complex(aval.dtype):
        return aval
    return ShapedArray(aval.shape + (2,), dtypes.real_dtype(aval.dtype))


_COMPILER_ONLY = "exists only inside compiled programs, after every transformation has run"


def _pairs_primitive(decomposition: Primitive) -> Primitive:
    prim = Primitive(f"{decomposition.name}_pairs", multiple_results=decomposition.multiple_results)

    def each(out, convert):
        return [convert(o) for o in out] if decomposition.multiple_results else convert(out)

    @prim.def_abstract_eval
    def abstract_eval(*operands: ShapedArray, **params):
        out = decomposition.abstract_eval(*map(_complex_aval, operands), **params)
        return each(out, _pairs_aval)

    @prim.def_impl
    def impl(*operands, **params):
        return each(decomposition.impl(*map(_as_complex, operands), **params), _as_pairs)

    for rule in ("jvp", "transpose", "batch"):
        prim.not_applicable[rule] = _COMPILER_ONLY
    return prim


PAIRS = {
    decomposition.name: _pairs_primitive(decomposition)
    for decomposition in (
        linalg_decomp.lu_p,
        linalg_decomp.triangular_solve_p,
        linalg_decomp.cholesky_p,
        linalg_decomp.qr_p,
        linalg_decomp.eigh_p,
        linalg_decomp.svd_p,
        eig.eig_p,
        schur.schur_p,
    )
}
