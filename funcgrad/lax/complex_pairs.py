"""Complex decompositions, and scatter_mul/min/max, in the compiler's form: complex arrays as
real arrays with a trailing axis of 2 (real and imaginary parts interleaved, NumPy's layout),
so that after the complex lowering LAPACK's complex routines can work on them in place, and a
scatter can multiply or compare the complex numbers that land on one element in turn (no
scatter of a real part alone computes the product's parts or picks the larger number).

`PAIRS[name]` is the `<name>_pairs` form of the primitive `name`: it exists only inside
compiled programs, made by `compiler.complex_lowering` from `name` on complex values. Its
shape rule and impl are the primitive's own, applied to the parts viewed as complex numbers
(its complex results held as parts too), so both backends agree.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.lax import eig, indexing, linalg_decomp, schur


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


def _pairs_primitive(primitive: Primitive, complex_operands: tuple[int, ...] | None = None):
    """The `_pairs` form of `primitive`, whose operands at `complex_operands` (all of them by
    default) are complex."""
    prim = Primitive(f"{primitive.name}_pairs", multiple_results=primitive.multiple_results)

    def each(out, convert):
        return [convert(o) for o in out] if primitive.multiple_results else convert(out)

    def converted(operands, convert) -> list:
        return [
            convert(v) if complex_operands is None or k in complex_operands else v
            for k, v in enumerate(operands)
        ]

    @prim.def_abstract_eval
    def abstract_eval(*operands: ShapedArray, **params):
        out = primitive.abstract_eval(*converted(operands, _complex_aval), **params)
        return each(out, _pairs_aval)

    @prim.def_impl
    def impl(*operands, **params):
        return each(primitive.impl(*converted(operands, _as_complex), **params), _as_pairs)

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
for _scatter in (indexing.scatter_mul_p, indexing.scatter_min_p, indexing.scatter_max_p):
    PAIRS[_scatter.name] = _pairs_primitive(_scatter, complex_operands=(0, 2))
