"""The polar decomposition x = u h by the QR-based dynamically weighted Halley iteration
(Nakatsukasa, Bai and Gygi, 2010), reached as `funcgrad.lax.linalg.qdwh`.

The iteration maps x's singular values, scaled into [l, 1], towards 1 with a rational function
whose weights (a, b, c) depend only on the lower bound l; taking l = eps, the weights of every
step are known before tracing, so the first steps are unrolled with constants. While c is large
a step is a QR factorization of [sqrt(c) u; I] (stable however ill-conditioned u is); later
ones solve with the Cholesky factor of I + c u^H u, which is cheaper. Plain Halley steps then
run in a while loop until the iterate stops moving.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import dtypes
from funcgrad.lax import shapes
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow import while_loop
from funcgrad.lax.elementwise import (
    abs,
    add,
    bitwise_and,
    convert_element_type,
    div,
    eq,
    gt,
    lt,
    mul,
    rsqrt,
    select,
    sqrt,
    sub,
)
from funcgrad.lax.linalg import batch_matmul
from funcgrad.lax.linalg_decomp import (
    _adjoint,
    _check_matrix,
    _eye_like,
    cholesky,
    qr,
    triangular_solve,
)
from funcgrad.lax.reductions import reduce_max, reduce_sum

__all__ = ["qdwh"]

# Steps whose c exceeds this use the QR form; below it the Cholesky form is accurate enough.
_CHOLESKY_CUTOFF = 100.0


def _weights(eps: float, max_iterations: int) -> list[tuple[float, float, float]]:
    """The (a, b, c) of each dynamically weighted step, until the bound l on the smallest
    singular value reaches 1 (to within 5 eps)."""
    weights = []
    lower_bound = eps
    while lower_bound + 5 * eps < 1 and len(weights) < max_iterations:
        l2 = lower_bound * lower_bound
        dd = (4 * (1 / l2 - 1) / l2) ** (1 / 3)
        sqd = math.sqrt(1 + dd)
        a = sqd + math.sqrt(2 - dd + 2 * (2 - l2) / (l2 * sqd))
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        lower_bound = lower_bound * (a + b * l2) / (1 + c * l2)
        weights.append((a, b, c))
    return weights


def _scalar(value: float, dtype):
    return shapes.full((), value, dtype)


def _qr_step(u, a: float, b: float, c: float):
    """u <- (b/c) u + (a - b/c)/sqrt(c) q1 q2^H, with [q1; q2] the orthonormal factor of
    [sqrt(c) u; I]."""
    n = u.shape[-1]
    stacked = shapes.concatenate([mul(_scalar(math.sqrt(c), u.dtype), u), _eye_like(u, n, n)], 0)
    q, _ = qr(stacked, full_matrices=False)
    m = u.shape[0]
    q1, q2 = shapes.slice_in_dim(q, 0, m, axis=0), shapes.slice_in_dim(q, m, m + n, axis=0)
    e = b / c
    return add(
        mul(_scalar(e, u.dtype), u),
        mul(_scalar((a - e) / math.sqrt(c), u.dtype), batch_matmul(q1, _adjoint(q2))),
    )


def _cholesky_step(u, a: float, b: float, c: float):
    """u <- (b/c) u + (a - b/c) u (I + c u^H u)^-1, the inverse applied through the Cholesky
    factor L of I + c u^H u: (u X^-1)^H = L^-H L^-1 u^H."""
    u_h = _adjoint(u)
    n = u.shape[-1]
    x = add(mul(_scalar(c, u.dtype), batch_matmul(u_h, u)), _eye_like(u_h, n, n))
    factor = cholesky(x, symmetrize_input=False)
    w = triangular_solve(factor, u_h, left_side=True, lower=True)
    z_h = triangular_solve(
        factor, w, left_side=True, lower=True, transpose_a=True, conjugate_a=True
    )
    e = b / c
    return add(mul(_scalar(e, u.dtype), u), mul(_scalar(a - e, u.dtype), _adjoint(z_h)))


def _frobenius_norm(x):
    magnitude = abs(x)
    return sqrt(reduce_sum(mul(magnitude, magnitude), (0, 1)))


def qdwh(
    x,
    *,
    is_hermitian: bool = False,
    max_iterations: int | None = None,
    eps: float | None = None,
    dynamic_shape: tuple[int, int] | None = None,
):
    """(u, h, num_iters, is_converged): the polar decomposition x = u h of a full-rank matrix
    x of shape (m, n), m >= n, with u having orthonormal columns and h Hermitian positive
    semidefinite; the number of iterations taken, and whether the iterate settled (moved less
    than (5 eps)^(1/3) in Frobenius norm) within `max_iterations` (10 by default).
    `is_hermitian` changes nothing."""
    del is_hermitian
    if dynamic_shape is not None:
        raise NotImplementedError("qdwh: dynamic_shape is not implemented")
    x = asarray(x)
    _check_matrix("qdwh", x, complex_ok=True)
    if x.ndim != 2 or x.shape[0] < x.shape[1]:
        raise ValueError(f"qdwh takes one matrix of shape (m, n) with m >= n, got shape {x.shape}")
    max_iterations = 10 if max_iterations is None else int(max_iterations)
    eps = float(np.finfo(x.dtype).eps) if eps is None else float(eps)
    real_dtype = dtypes.real_dtype(x.dtype)

    # Scaled so that the largest singular value is at most 1: ||x||_2 <= sqrt(||x||_1 ||x||_inf).
    magnitude = abs(x)
    one_norm = reduce_max(reduce_sum(magnitude, (0,)), (0,))
    inf_norm = reduce_max(reduce_sum(magnitude, (1,)), (0,))
    scale = mul(rsqrt(one_norm), rsqrt(inf_norm))
    scale = select(eq(one_norm, 0), _scalar(1, real_dtype), scale)
    u = mul(convert_element_type(scale, x.dtype), x)

    tolerance = _scalar((5 * eps) ** (1 / 3), real_dtype)
    not_converged = shapes.full((), True, dtypes.bool_)
    weights = _weights(eps, max_iterations)
    for a, b, c in weights:
        if c > _CHOLESKY_CUTOFF:
            u = _qr_step(u, a, b, c)
        else:
            previous, u = u, _cholesky_step(u, a, b, c)
            not_converged = gt(_frobenius_norm(sub(u, previous)), tolerance)

    def halley(state):
        k, u, _ = state
        new_u = _cholesky_step(u, 3.0, 1.0, 3.0)
        return add(k, 1), new_u, gt(_frobenius_norm(sub(new_u, u)), tolerance)

    def unsettled(state):
        k, _, not_converged = state
        return bitwise_and(not_converged, lt(k, max_iterations))

    start = (shapes.full((), len(weights), dtypes.int32), u, not_converged)
    num_iters, u, not_converged = while_loop(unsettled, halley, start)

    # One Newton–Schulz step brings u's columns to orthonormality at working precision.
    u = sub(
        mul(_scalar(1.5, u.dtype), u),
        mul(_scalar(0.5, u.dtype), batch_matmul(u, batch_matmul(_adjoint(u), u))),
    )
    h = batch_matmul(_adjoint(u), x)
    h = div(add(h, _adjoint(h)), _scalar(2, h.dtype))
    return u, h, num_iters, eq(not_converged, False)
