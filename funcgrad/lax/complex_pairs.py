"""Complex decompositions in the compiler's form: complex matrices as real arrays with a
trailing axis of 2 (real and imaginary parts interleaved, NumPy's layout), so that after the
complex lowering LAPACK's complex routines can work on them in place.

These primitives exist only inside compiled programs, made by `compiler.complex_lowering`
from the decompositions of complex matrices; their impls view the
parts as complex numbers and run the reference's own decomposition, so both backends agree.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.lax import linalg_decomp


def _as_complex(x) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(dtypes.complex_dtype(x.dtype))[..., 0]


def _as_pairs(z: np.ndarray) -> np.ndarray:
    z = np.ascontiguousarray(z)
    return z.view(dtypes.real_dtype(z.dtype)).reshape(z.shape + (2,))


def _complex_aval(aval: ShapedArray) -> ShapedArray:
    if aval.ndim < 1 or aval.shape[-1] != 2 or aval.dtype not in (dtypes.float32, dtypes.float64):
        raise TypeError(f"complex parts must be float32 or float64 of shape (..., 2), got {aval}")
    return ShapedArray(aval.shape[:-1], dtypes.complex_dtype(aval.dtype))


def _pairs_aval(aval: ShapedArray) -> ShapedArray:
    return ShapedArray(aval.shape + (2,), dtypes.real_dtype(aval.dtype))


lu_pairs_p = Primitive("lu_pairs", multiple_results=True)


@lu_pairs_p.def_abstract_eval
def _lu_pairs_abstract_eval(x: ShapedArray):
    factors, pivots, permutation = linalg_decomp.lu_p.abstract_eval(_complex_aval(x))
    return [_pairs_aval(factors), pivots, permutation]


@lu_pairs_p.def_impl
def _lu_pairs_impl(x):
    factors, pivots, permutation = linalg_decomp.lu_p.impl(_as_complex(x))
    return [_as_pairs(factors), pivots, permutation]


triangular_solve_pairs_p = Primitive("triangular_solve_pairs")


@triangular_solve_pairs_p.def_abstract_eval
def _triangular_solve_pairs_abstract_eval(a: ShapedArray, b: ShapedArray, **params):
    out = linalg_decomp.triangular_solve_p.abstract_eval(
        _complex_aval(a), _complex_aval(b), **params
    )
    return _pairs_aval(out)


@triangular_solve_pairs_p.def_impl
def _triangular_solve_pairs_impl(a, b, **params):
    out = linalg_decomp.triangular_solve_p.impl(_as_complex(a), _as_complex(b), **params)
    return _as_pairs(np.asarray(out))


eigh_pairs_p = Primitive("eigh_pairs", multiple_results=True)


@eigh_pairs_p.def_abstract_eval
def _eigh_pairs_abstract_eval(x: ShapedArray, *, lower: bool):
    vectors, values = linalg_decomp.eigh_p.abstract_eval(_complex_aval(x), lower=lower)
    return [_pairs_aval(vectors), values]


@eigh_pairs_p.def_impl
def _eigh_pairs_impl(x, *, lower):
    vectors, values = linalg_decomp.eigh_p.impl(_as_complex(x), lower=lower)
    return [_as_pairs(np.asarray(vectors)), values]


eig_pairs_p = Primitive("eig_pairs", multiple_results=True)


@eig_pairs_p.def_abstract_eval
def _eig_pairs_abstract_eval(x: ShapedArray):
    from funcgrad.lax.eig import eig_p

    values, vectors = eig_p.abstract_eval(_complex_aval(x), compute_right_eigenvectors=True)
    return [_pairs_aval(values), _pairs_aval(vectors)]


@eig_pairs_p.def_impl
def _eig_pairs_impl(x):
    from funcgrad.lax.eig import eig_p

    values, vectors = eig_p.impl(_as_complex(x), compute_right_eigenvectors=True)
    return [_as_pairs(np.asarray(values)), _as_pairs(np.asarray(vectors))]


cholesky_pairs_p = Primitive("cholesky_pairs")


@cholesky_pairs_p.def_abstract_eval
def _cholesky_pairs_abstract_eval(x: ShapedArray):
    return _pairs_aval(linalg_decomp.cholesky_p.abstract_eval(_complex_aval(x)))


@cholesky_pairs_p.def_impl
def _cholesky_pairs_impl(x):
    return _as_pairs(np.asarray(linalg_decomp.cholesky_p.impl(_as_complex(x))))


qr_pairs_p = Primitive("qr_pairs", multiple_results=True)


@qr_pairs_p.def_abstract_eval
def _qr_pairs_abstract_eval(x: ShapedArray, *, full_matrices: bool):
    outs = linalg_decomp.qr_p.abstract_eval(_complex_aval(x), full_matrices=full_matrices)
    return [_pairs_aval(out) for out in outs]


@qr_pairs_p.def_impl
def _qr_pairs_impl(x, *, full_matrices):
    outs = linalg_decomp.qr_p.impl(_as_complex(x), full_matrices=full_matrices)
    return [_as_pairs(np.asarray(out)) for out in outs]


svd_pairs_p = Primitive("svd_pairs", multiple_results=True)


@svd_pairs_p.def_abstract_eval
def _svd_pairs_abstract_eval(x: ShapedArray, *, full_matrices: bool, compute_uv: bool):
    outs = linalg_decomp.svd_p.abstract_eval(
        _complex_aval(x), full_matrices=full_matrices, compute_uv=compute_uv
    )
    return [_pairs_aval(out) if dtypes.is_complex(out.dtype) else out for out in outs]


@svd_pairs_p.def_impl
def _svd_pairs_impl(x, *, full_matrices, compute_uv):
    outs = linalg_decomp.svd_p.impl(
        _as_complex(x), full_matrices=full_matrices, compute_uv=compute_uv
    )
    return [_as_pairs(np.asarray(out)) if np.iscomplexobj(out) else np.asarray(out) for out in outs]


_COMPILER_ONLY = "exists only inside compiled programs, after every transformation has run"
for _primitive in (
    lu_pairs_p,
    triangular_solve_pairs_p,
    eigh_pairs_p,
    eig_pairs_p,
    cholesky_pairs_p,
    qr_pairs_p,
    svd_pairs_p,
):
    for _rule in ("jvp", "transpose", "batch"):
        _primitive.not_applicable[_rule] = _COMPILER_ONLY
