"""Solves and updates that exploit a matrix's structure: `tridiagonal_solve`, `cholesky_update`
and `symmetric_product`, reached as `funcgrad.lax.linalg.<name>`.

Each is a composition of existing primitives (scans and loops over rows), so jit, vmap and
every backend apply without a primitive of its own. The tridiagonal solve sits inside
`custom_linear_solve`, so its derivatives are the implicit ones (another tridiagonal solve)
rather than those of the elimination's arithmetic.
"""

from __future__ import annotations

from funcgrad import core, dtypes
from funcgrad.interpreters.batching import moveaxis
from funcgrad.lax import shapes
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow import custom_linear_solve, fori_loop, scan
from funcgrad.lax.elementwise import abs, add, div, eq, max, mul, select, sqrt, sub
from funcgrad.lax.indexing import dynamic_slice_in_dim, dynamic_update_slice_in_dim
from funcgrad.lax.linalg import batch_matmul
from funcgrad.lax.linalg_decomp import _swap_last, _tril, _triu

__all__ = ["cholesky_update", "symmetric_product", "tridiagonal_solve"]

_REAL = (dtypes.float32, dtypes.float64)
_INEXACT = _REAL + (dtypes.complex64, dtypes.complex128)


def _check_dtypes(name: str, accepted, **operands) -> None:
    first = next(iter(operands.values())).dtype
    for what, x in operands.items():
        if x.dtype not in accepted:
            raise TypeError(
                f"{name} does not accept dtype {x.dtype.name} for {what}; it takes "
                + ", ".join(d.name for d in accepted)
            )
        if x.dtype != first:
            raise TypeError(
                f"{name} needs operands of one dtype, got "
                + ", ".join(f"{w}: {v.dtype.name}" for w, v in operands.items())
            )


# ---------------------------------------------------------------------------------------------
# Tridiagonal systems


def tridiagonal_solve(dl, d, du, b, *, perturb_singular: bool = False):
    """x with A x = b for tridiagonal matrices A given by their diagonals, each of shape
    [..., m]: dl[..., i] = A[i, i-1] (dl[..., 0] is not read), d[..., i] = A[i, i] and
    du[..., i] = A[i, i+1] (du[..., m-1] is not read); b has shape [..., m, n].

    The Thomas algorithm (elimination without pivoting, then back substitution), so it suits
    the diagonally dominant or positive definite systems where pivoting is not needed.
    Derivatives with respect to every operand come from the solved equation.
    """
    if perturb_singular:
        raise NotImplementedError("tridiagonal_solve: perturb_singular=True is not implemented")
    dl, d, du, b = (asarray(x) for x in (dl, d, du, b))
    _check_dtypes("tridiagonal_solve", _INEXACT, dl=dl, d=d, du=du, b=b)
    if not dl.shape == d.shape == du.shape:
        raise ValueError(
            f"tridiagonal_solve needs diagonals of one shape, got dl {dl.shape}, d {d.shape}, "
            f"du {du.shape}"
        )
    if d.ndim < 1 or b.shape[:-1] != d.shape:
        raise ValueError(
            f"tridiagonal_solve: b of shape {b.shape} does not fit diagonals of shape "
            f"{d.shape}: b needs shape {d.shape} + (n,)"
        )
    if d.shape[-1] == 0:
        return b
    # The transposed matrix's diagonals: A^T[i, i-1] = A[i-1, i], A^T[i, i+1] = A[i+1, i].
    dl_t = _shifted(du, 1)
    du_t = _shifted(dl, -1)
    return custom_linear_solve(
        lambda x: _tridiagonal_product(dl, d, du, x),
        b,
        lambda _, rhs: _thomas(dl, d, du, rhs),
        lambda _, rhs: _thomas(dl_t, d, du_t, rhs),
    )


def _shifted(v, by: int):
    """v moved `by` places along its last axis (later for by > 0), zeros filling in."""
    axis = core.get_aval(v).ndim - 1
    m = v.shape[axis]
    if by > 0:
        kept = shapes.slice_in_dim(v, 0, m - by, axis=axis)
        padding = (by, 0, 0)
    else:
        kept = shapes.slice_in_dim(v, -by, m, axis=axis)
        padding = (0, -by, 0)
    return shapes.pad(kept, shapes.full((), 0, v.dtype), [(0, 0, 0)] * axis + [padding])


def _tridiagonal_product(dl, d, du, x):
    """A x, row i being dl[i] x[i-1] + d[i] x[i] + du[i] x[i+1]."""
    axis = core.get_aval(x).ndim - 2

    def times_rows(v, rows):
        return mul(shapes.broadcast_in_dim(v, x.shape, tuple(range(axis + 1))), rows)

    previous = _shifted(_swap_last(x), 1)  # row i holds x[i-1]
    following = _shifted(_swap_last(x), -1)  # row i holds x[i+1]
    return add(
        times_rows(d, x),
        add(times_rows(dl, _swap_last(previous)), times_rows(du, _swap_last(following))),
    )


def _thomas(dl, d, du, b):
    """Forward elimination to a unit upper bidiagonal system (x[i] + c[i] x[i+1] = y[i]),
    then back substitution, both as scans over the rows."""
    row_axis = d.ndim - 1
    diagonals = [moveaxis(v, row_axis, 0) for v in (dl, d, du)]
    rows = moveaxis(b, row_axis, 0)

    def eliminate(carry, row):
        c_previous, y_previous = carry
        lower, diagonal, upper, b_row = row
        pivot = sub(diagonal, mul(lower, c_previous))
        c = div(upper, pivot)
        y = div(sub(b_row, mul(_lanes(lower, b_row), y_previous)), _lanes(pivot, b_row))
        return (c, y), (c, y)

    start = (shapes.full(d.shape[:-1], 0, d.dtype), shapes.full(rows.shape[1:], 0, b.dtype))
    _, (c, y) = scan(eliminate, start, (*diagonals, rows))

    def substitute(x_next, row):
        c_row, y_row = row
        x = sub(y_row, mul(_lanes(c_row, y_row), x_next))
        return x, x

    _, x = scan(substitute, start[1], (c, y), reverse=True)
    return moveaxis(x, 0, row_axis)


def _lanes(v, like):
    """A per-system scalar v [...] broadcast over the right-hand sides' columns [..., n]."""
    return shapes.broadcast_in_dim(v, like.shape, tuple(range(v.ndim)))


# ---------------------------------------------------------------------------------------------
# Cholesky rank-1 update


def cholesky_update(r_matrix, w_vector):
    """The upper Cholesky factor of A + w w^T, given that of A (A = R^T R), in O(n^2): one
    Givens rotation per row turns [R; w^T] back into triangular form."""
    r, w = asarray(r_matrix), asarray(w_vector)
    _check_dtypes("cholesky_update", _REAL, r_matrix=r, w_vector=w)
    if r.ndim < 2 or r.shape[-1] != r.shape[-2] or w.shape != r.shape[:-1]:
        raise ValueError(
            f"cholesky_update takes square matrices [..., n, n] and vectors [..., n], got "
            f"shapes {r.shape} and {w.shape}"
        )
    row_axis, column_axis = r.ndim - 2, r.ndim - 1

    def rotate(k, carry):
        r, w = carry
        row = shapes.squeeze(dynamic_slice_in_dim(r, k, 1, row_axis), (row_axis,))
        x = dynamic_slice_in_dim(row, k, 1, column_axis - 1)
        y = dynamic_slice_in_dim(w, k, 1, column_axis - 1)
        c, s = _givens(x, y)
        c, s = (shapes.broadcast_in_dim(v, w.shape, tuple(range(w.ndim))) for v in (c, s))
        new_row = add(mul(c, row), mul(s, w))
        w = sub(mul(c, w), mul(s, row))
        new_row = shapes.expand_dims(new_row, (row_axis,))
        return dynamic_update_slice_in_dim(r, new_row, k, row_axis), w

    r, _ = fori_loop(0, r.shape[-1], rotate, (r, w))
    return _triu(r)  # below the diagonal the rotations leave only rounding


def _givens(x, y):
    """(c, s) with c x + s y = hypot(x, y) and c y - s x = 0; (1, 0) when both are zero. The
    hypotenuse is taken of x and y scaled by the larger, so it neither overflows nor
    underflows."""
    largest = max(abs(x), abs(y))
    zero = eq(largest, 0)
    one = shapes.full(x.shape, 1, x.dtype)
    safe_largest = select(zero, one, largest)
    x_scaled, y_scaled = div(x, safe_largest), div(y, safe_largest)
    norm = sqrt(add(mul(x_scaled, x_scaled), mul(y_scaled, y_scaled)))
    c = select(zero, one, div(x_scaled, norm))
    s = select(zero, shapes.full(x.shape, 0, x.dtype), div(y_scaled, norm))
    return c, s


# ---------------------------------------------------------------------------------------------
# Symmetric product


def symmetric_product(
    a_matrix, c_matrix, *, alpha: float = 1.0, beta: float = 0.0, symmetrize_output: bool = False
):
    """alpha A A^T + beta C for A of shape [..., m, n] and symmetric C of shape [..., m, m].
    The whole product is computed; with `symmetrize_output` the upper triangle is the lower
    one's mirror, so the result is exactly symmetric."""
    a, c = asarray(a_matrix), asarray(c_matrix)
    _check_dtypes("symmetric_product", _REAL, a_matrix=a, c_matrix=c)
    if a.ndim < 2 or c.shape != a.shape[:-1] + (a.shape[-2],):
        raise ValueError(
            f"symmetric_product takes A [..., m, n] and C [..., m, m], got shapes {a.shape} "
            f"and {c.shape}"
        )
    product = batch_matmul(a, _swap_last(a))
    result = add(
        mul(shapes.full((), alpha, a.dtype), product), mul(shapes.full((), beta, c.dtype), c)
    )
    if symmetrize_output:
        result = add(_tril(result), _swap_last(_tril(result, -1)))
    return result
