"""The column order of a QR decomposition with column pivoting (LAPACK's geqp3): at step j the
column of largest norm below row j - 1 is swapped to position j, then a Householder reflection
zeroes it below the diagonal. `qr(pivoting=True)` factors the permuted matrix with the QR
primitive, so its derivatives are those of A P = Q R with the permutation P held fixed.

The norms are recomputed at every step rather than downdated as geqp3 does, so the order is
LAPACK's but where two columns' norms tie to within rounding (the first largest is taken, as
geqp3's idamax does)."""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes


def column_pivots(x):
    """The int32 column order p of `x` (..., m, n) that makes x[..., p] = Q R with |diag R|
    non-increasing; zeros for an empty matrix, as the contract's qr gives."""
    from funcgrad import lax
    from funcgrad import numpy as fnp

    *batch, m, n = x.shape
    k = min(m, n)
    if k == 0:
        return fnp.zeros((*batch, n), np.int32)
    rows = lax.broadcasted_iota(np.int32, (m, 1), 0)
    columns = lax.broadcasted_iota(np.int32, (n,), 0)
    order = fnp.broadcast_to(columns, (*batch, n))
    real = dtypes.real_dtype(x.dtype)

    def step(j, state):
        a, order = state
        below = rows >= j  # (m, 1): the rows still to reduce
        norms = fnp.sum(fnp.where(below, fnp.real(a * fnp.conj(a)), 0), axis=-2)
        norms = fnp.where(columns >= j, norms, np.array(-1, real))
        pick = fnp.argmax(norms, axis=-1).astype(np.int32)[..., None]
        swap = fnp.where(columns == j, pick, fnp.where(columns == pick, j, columns))
        a = fnp.take_along_axis(a, fnp.broadcast_to(swap[..., None, :], a.shape), axis=-1)
        order = fnp.take_along_axis(order, swap, axis=-1)
        # The reflection H = I - 2 v v^H / (v^H v) taking column j below row j - 1 to a
        # multiple of e_j: v = that part of the column plus its norm in the pivot's phase.
        column = fnp.where(below[:, 0], fnp.take(a, j, axis=-1), 0)
        pivot = fnp.take(column, j, axis=-1)[..., None]
        size = fnp.sqrt(fnp.sum(fnp.real(column * fnp.conj(column)), axis=-1))[..., None]
        magnitude = fnp.abs(pivot)
        phase = fnp.where(magnitude == 0, 1, pivot / fnp.where(magnitude == 0, 1, magnitude))
        v = column + fnp.where(rows[:, 0] == j, phase * size, 0)
        squared = fnp.sum(fnp.real(v * fnp.conj(v)), axis=-1)[..., None]
        scale = fnp.where(squared > 0, 2 / fnp.where(squared > 0, squared, 1), 0)
        projections = fnp.einsum("...i,...ij->...j", fnp.conj(v), a)
        a = a - (scale * v)[..., :, None] * projections[..., None, :]
        return a, order

    _, order = lax.fori_loop(0, k, step, (x, order))
    return order
