"""eig: eigenvalues and right eigenvectors of general square matrices, which are complex.

The reference computes them with LAPACK's geev through NumPy (float32 matrices in float64, as
NumPy does). Compiled programs call geev themselves through `eig_parts`, which returns what
geev returns for a real matrix: the real and imaginary parts of the eigenvalues, and the
eigenvectors packed into one real matrix (a complex pair's vectors are v ± i w, stored as the
columns v and w); the complex lowering unpacks them.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.lax import elementwise, shapes
from funcgrad.lax.base import asarray
from funcgrad.lax.linalg import batch_matmul
from funcgrad.lax.linalg_decomp import (
    _batch_to_front,
    _finite_matrices,
    _per_matrix,
    _swap_last,
    _where_matrices,
    lu,
    triangular_solve,
)
from funcgrad.lax.reductions import reduce_sum

__all__ = ["eig"]

_REAL = (dtypes.float32, dtypes.float64)
_COMPLEX = (dtypes.complex64, dtypes.complex128)


def _check_square(name: str, a: ShapedArray, accepted) -> None:
    if a.dtype not in accepted:
        raise TypeError(
            f"{name} does not accept dtype {a.dtype.name}; it takes "
            + ", ".join(d.name for d in accepted)
        )
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name} needs square matrices in the last two axes, got shape {a.shape}")


eig_p = Primitive("eig", multiple_results=True)


@eig_p.def_abstract_eval
def _eig_abstract_eval(a: ShapedArray, *, compute_right_eigenvectors: bool):
    _check_square("eig", a, _REAL + _COMPLEX)
    dtype = dtypes.complex_dtype(a.dtype)
    values = ShapedArray(a.shape[:-1], dtype)
    return [values, ShapedArray(a.shape, dtype)] if compute_right_eigenvectors else [values]


def _eig(a: np.ndarray):
    """NumPy's eig of a stack, in double precision; NaN for the matrices it fails on."""
    wide = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    w, v = _per_matrix(lambda m: tuple(np.linalg.eig(m)), wide)
    return w.astype(np.complex128), v.astype(np.complex128)


@eig_p.def_impl
def _eig_impl(a, *, compute_right_eigenvectors):
    a = np.asarray(a)
    w, v = _eig(a)
    dtype = dtypes.complex_dtype(a.dtype)
    return [w.astype(dtype), v.astype(dtype)] if compute_right_eigenvectors else [w.astype(dtype)]


@eig_p.def_jvp
def _eig_jvp(primals, tangents, *, compute_right_eigenvectors):
    """dλ = diag(V⁻¹ dA V) (the eigenvectors' derivatives are not defined here, as in JAX:
    their normalization is a convention that has no derivative)."""
    if compute_right_eigenvectors:
        raise NotImplementedError(
            "eig: the derivatives of eigenvectors are not implemented, only those of "
            "eigenvalues (use eigvals, or eig(..., compute_right_eigenvectors=False))"
        )
    (a,), (a_dot,) = primals, tangents
    w, v = eig_p.bind(a, compute_right_eigenvectors=True)
    a_dot = elementwise.convert_element_type(a_dot, v.dtype)
    products = elementwise.mul(batch_matmul(_inverse(v), a_dot), _swap_last(v))
    return [w], [reduce_sum(products, (products.ndim - 1,))]


def _inverse(a):
    """A⁻¹ from the LU decomposition P A = L U: U⁻¹ L⁻¹ P, by two triangular solves."""
    factors, _, permutation = lu(a)
    last = a.ndim - 1
    columns = shapes.broadcasted_iota(permutation.dtype, a.shape, last)
    rows = shapes.broadcast_in_dim(permutation, a.shape, tuple(range(last)))
    p = elementwise.convert_element_type(elementwise.eq(rows, columns), a.dtype)
    lower = triangular_solve(factors, p, left_side=True, lower=True, unit_diagonal=True)
    return triangular_solve(factors, lower, left_side=True, lower=False)


eig_p.not_applicable["transpose"] = "not linear"
_batch_to_front(eig_p)


def eig(x, *, compute_left_eigenvectors: bool = False, compute_right_eigenvectors: bool = True):
    """Eigenvalues w (complex, in LAPACK's order) and, when asked, right eigenvectors v (unit
    columns, v[:, i] for w[i]) of square matrices: [w] or [w, v]."""
    if compute_left_eigenvectors:
        raise NotImplementedError("eig: left eigenvectors are not implemented")
    x = asarray(x)
    _check_square("eig", x.aval, _REAL + _COMPLEX)
    # geev answers a matrix holding a NaN or an infinity with made-up values (the reference
    # refuses it): such a matrix is decomposed as zeros, and its results are NaN.
    finite = _finite_matrices(x)
    out = eig_p.bind(
        _where_matrices(finite, x, 0), compute_right_eigenvectors=bool(compute_right_eigenvectors)
    )
    return [_where_matrices(finite, result, np.nan) for result in out]


# ---------------------------------------------------------------------------------------------
# The compiler's form of eig of a real matrix: geev's outputs as they are

eig_parts_p = Primitive("eig_parts", multiple_results=True)


@eig_parts_p.def_abstract_eval
def _eig_parts_abstract_eval(a: ShapedArray):
    _check_square("eig_parts", a, _REAL)
    values = ShapedArray(a.shape[:-1], a.dtype)
    return [values, values, ShapedArray(a.shape, a.dtype)]


@eig_parts_p.def_impl
def _eig_parts_impl(a):
    a = np.asarray(a)
    w, v = _eig(a)
    # A pair's first eigenvalue (positive imaginary part) holds Re v in its column and the
    # second Im v of the first: that is -Im of its own vector, the conjugate.
    packed = np.where((w.imag >= 0)[..., None, :], v.real, -v.imag)
    return [w.real.astype(a.dtype), w.imag.astype(a.dtype), packed.astype(a.dtype)]


_COMPILER_ONLY = "exists only inside compiled programs, after every transformation has run"
for _rule in ("jvp", "transpose", "batch"):
    eig_parts_p.not_applicable[_rule] = _COMPILER_ONLY
