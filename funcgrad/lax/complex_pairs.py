"""Complex decompositions in the compiler's form: complex matrices as real arrays with a
trailing axis of 2 (real and imaginary parts interleaved, NumPy's layout), so that after the
complex lowering LAPACK's complex routines can work on them in place.

These primitives exist only inside compiled programs, made by `compiler.complex_lowering`
from `lu`, `triangular_solve`, `eigh` and `eig` on complex operands; their impls view the
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


_COMPILER_ONLY = "exists only inside compiled programs, after every transformation has run"
for _primitive in (lu_pairs_p, triangular_solve_pairs_p, eigh_pairs_p, eig_pairs_p):
    for _rule in ("jvp", "transpose", "batch"):
        _primitive.not_applicable[_rule] = _COMPILER_ONLY
