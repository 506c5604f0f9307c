"""Eigendecompositions of small symmetric matrices (n <= 4) by Jacobi's rotations, one matrix
per vector lane, on a CPU.

A stack of 3x3 or 4x4 symmetric matrices (stress tensors, covariances, inertia) costs a
library call each through LAPACK's syevd, whose setup outweighs the matrix. Here one kernel
loops over the stack, and its body is straight-line arithmetic: a fixed number of cyclic
sweeps of Jacobi's rotations over the matrix's off-diagonal pairs (p, q). Each rotation
zeroes a[p, q] by the symmetric Schur decomposition of the 2x2 block:

    tau = (a_qq - a_pp) / (2 a_pq),  t = sign(tau) / (|tau| + sqrt(1 + tau^2)),
    c = 1 / sqrt(1 + t^2),  s = t c,

then a_pp -= t a_pq, a_qq += t a_pq, a_pq = 0, the other rows' p and q entries turn by
(c, s), and so do the eigenvector columns p and q. The sum of the off-diagonal squares falls
quadratically once the rotations are small, so a few sweeps reach the working precision
(float64; float32 matrices are computed in float64, as the library path computes them).
Last, a sorting network orders the eigenvalues ascending and their columns with them. A
matrix with a non-finite entry gives NaNs (the library's failure marks it so too).
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.fusion import KernelBuilder, loop_nest, split_offset
from funcgrad.ir import JaxprEqn

F64 = np.dtype(np.float64)

# Matrices up to this size take rotations; larger ones the library.
MAX_SIZE = 4
# Cyclic sweeps by size: one rotation diagonalizes a 2x2 matrix; 3x3 and 4x4 matrices of
# random, clustered (1 + 1e-9 noise) and graded (1e-8 to 1e8) spectra reached float64's
# rounding (residuals 1e-15 of the largest entry) in 4 and 5 sweeps; one more leaves a margin.
SWEEPS = {1: 0, 2: 1, 3: 5, 4: 6}

# Compare-and-swap networks sorting n values.
_SORTS = {
    1: [],
    2: [(0, 1)],
    3: [(0, 1), (1, 2), (0, 1)],
    4: [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)],
}


def takes(eqn: JaxprEqn) -> bool:
    """Whether an eigh runs by rotations: real matrices of 1 to `MAX_SIZE` rows."""
    (a,) = eqn.invars
    return eqn.primitive.name == "eigh" and 1 <= a.aval.shape[-1] <= MAX_SIZE


def eigh(scheduler, eqn: JaxprEqn) -> None:
    (a,) = eqn.invars
    *batch_shape, n, _ = a.aval.shape
    v_out, w_out = (scheduler.buffer_of[v] for v in eqn.outvars)
    lower = eqn.params["lower"]
    builder = KernelBuilder(scheduler.producer, scheduler.buffer_of)

    def body(index: list) -> list:
        (b,) = index
        at = split_offset(b, tuple(batch_shape)) if batch_shape else []

        def entry(i: int, j: int) -> K.Expr:
            if (i > j) != lower:  # the triangle the decomposition reads
                i, j = j, i
            return K.cast(builder.element(a, [*at, _i(i), _i(j)]), F64)

        given = [[entry(i, j) for j in range(n)] for i in range(n)]
        m = [list(row) for row in given]
        v = [[_c(1.0 if i == j else 0.0) for j in range(n)] for i in range(n)]
        for _ in range(SWEEPS[n]):
            for p in range(n):
                for q in range(p + 1, n):
                    _rotate(m, v, p, q)
        values = [m[i][i] for i in range(n)]
        for i, j in _SORTS[n]:
            swap = K.binary("gt", values[i], values[j])
            values[i], values[j] = (
                K.select(swap, values[j], values[i]),
                K.select(swap, values[i], values[j]),
            )
            for row in v:
                row[i], row[j] = K.select(swap, row[j], row[i]), K.select(swap, row[i], row[j])
        finite = None
        for i in range(n):
            for j in range(n):
                ok = K.unary("is_finite", given[i][j])
                finite = ok if finite is None else K.binary("and", finite, ok)
        nan = _c(math.nan)
        stores = []
        for i in range(n):
            for j in range(n):
                value = K.cast(K.select(finite, v[i][j], nan), v_out.dtype)
                stores.append(K.Store(v_out, b * _i(n * n) + _i(i * n + j), value))
            value = K.cast(K.select(finite, values[i], nan), w_out.dtype)
            stores.append(K.Store(w_out, b * _i(n) + _i(i), value))
        return stores

    batch = math.prod(batch_shape)
    scheduler._kernel(builder, [v_out, w_out], loop_nest((batch,), body), [eqn])


def _rotate(m: list, v: list, p: int, q: int) -> None:
    """One Jacobi rotation zeroing m[p][q] (m symmetric, both triangles kept), turning the
    eigenvector columns p and q of `v` with it."""
    apq, app, aqq = m[p][q], m[p][p], m[q][q]
    zero = K.binary("eq", apq, _c(0.0))
    tau = _div(aqq - app, apq * _c(2.0))
    root = K.unary("sqrt", _c(1.0) + tau * tau)
    sign = K.select(K.binary("ge", tau, _c(0.0)), _c(1.0), _c(-1.0))  # (+1 at 0: 45 degrees)
    t = _div(sign, K.unary("abs", tau) + root)
    t = K.select(zero, _c(0.0), t)  # (a_pq = 0: tau is infinite or NaN; nothing to turn)
    c = _div(_c(1.0), K.unary("sqrt", _c(1.0) + t * t))
    s = t * c
    m[p][p], m[q][q] = app - t * apq, aqq + t * apq
    m[p][q] = m[q][p] = _c(0.0)
    for r in range(len(m)):
        if r not in (p, q):
            rp, rq = m[r][p], m[r][q]
            m[r][p] = m[p][r] = c * rp - s * rq
            m[r][q] = m[q][r] = s * rp + c * rq
    for row in v:
        vp, vq = row[p], row[q]
        row[p], row[q] = c * vp - s * vq, s * vp + c * vq


def _div(a: K.Expr, b: K.Expr) -> K.Expr:
    return K.binary("div", a, b)


def _c(value: float) -> K.Expr:
    return K.const(value, F64)


def _i(value: int) -> K.Expr:
    return K.const(value, K.INDEX)
