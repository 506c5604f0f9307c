"""Householder reductions in LAPACK's packed form: `hessenberg` (gehrd), `tridiagonal` (sytrd
and hetrd), `geqrf` (QR), and the products with their unitary factor: `householder_product`
(orgqr) and `ormqr`, reached as `funcgrad.lax.linalg.<name>` (geqrf, which JAX keeps
internal, as `funcgrad.numpy.linalg.qr(mode="raw")`).

Each reflection is H = I - tau v v^H with v[p] = 1 and zeros above p, made as larfg makes it,
so the reflectors and taus agree with LAPACK's and `householder_product` rebuilds the unitary
factor from them. Being compositions of differentiable primitives, all have derivatives and
batch under vmap. The steps are `fori_loop`s whose row and column picks are masks and dynamic
slices, so one traced body serves every step, under jit and vmap alike.
"""

from __future__ import annotations

from funcgrad import core, dtypes
from funcgrad.lax import shapes
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow import fori_loop
from funcgrad.lax.elementwise import (
    add,
    bitwise_and,
    conj,
    convert_element_type,
    div,
    eq,
    ge,
    gt,
    imag,
    mul,
    neg,
    real,
    select,
    sqrt,
    sub,
)
from funcgrad.lax.indexing import dynamic_slice_in_dim, dynamic_update_slice_in_dim
from funcgrad.lax.linalg import batch_matmul
from funcgrad.lax.linalg_decomp import (
    _adjoint,
    _check_matrix,
    _diagonal,
    _eye_like,
    _tril,
    _triu,
    _zeros_like,
)
from funcgrad.lax.reductions import reduce_sum

__all__ = ["geqrf", "hessenberg", "householder_product", "ormqr", "tridiagonal"]


def _is_complex(x) -> bool:
    return dtypes.is_complex(core.get_aval(x).dtype)


def _conj(x):
    return conj(x) if _is_complex(x) else x


def _real(x):
    return real(x) if _is_complex(x) else x


def _squared_modulus(x):
    return _real(mul(x, _conj(x)))


def _step_index(k):
    """A loop's step index as int32, the rows' iota dtype (under x64 the index is int64)."""
    return convert_element_type(k, dtypes.int32)


def _column(a, k):
    """a[..., :, k] for a traced k."""
    axis = a.ndim - 1
    return shapes.squeeze(dynamic_slice_in_dim(a, k, 1, axis), (axis,))


def _entry(v, k):
    """v[..., k] for a traced k, keeping a trailing axis of length 1."""
    return dynamic_slice_in_dim(v, k, 1, v.ndim - 1)


def _reflector(column, pivot):
    """(v, tau, beta) of the reflection H with H^H column = beta e_pivot on the rows from
    `pivot` down, rows above it left alone. alpha = column[pivot] and x the rows below it:
    beta = -sign(Re alpha) |(alpha, x)|, tau = (beta - alpha) / beta and v = (1, x / (alpha -
    beta)), as larfg makes them; H = I when x = 0 and alpha is real (tau = 0)."""
    rows = shapes.broadcasted_iota(dtypes.int32, column.shape, column.ndim - 1)
    alpha = _entry(column, pivot)
    below = gt(rows, pivot)
    tail = select(below, column, _zeros_like(column))
    tail_norm2 = shapes.expand_dims(
        reduce_sum(_squared_modulus(tail), (column.ndim - 1,)), (column.ndim - 1,)
    )
    identity = eq(tail_norm2, 0)
    if _is_complex(column):
        identity = bitwise_and(identity, eq(imag(alpha), 0))
    real_dtype = core.get_aval(tail_norm2).dtype
    one = shapes.full(alpha.shape, 1, real_dtype)
    # The selects keep the square root's and the division's derivatives finite at H = I.
    norm = sqrt(select(identity, one, add(_squared_modulus(alpha), tail_norm2)))
    beta = select(ge(_real(alpha), 0), neg(norm), norm)
    beta = convert_element_type(beta, column.dtype)
    zero, unit = (
        shapes.full(alpha.shape, 0, column.dtype),
        shapes.full(alpha.shape, 1, column.dtype),
    )
    tau = select(identity, zero, div(sub(beta, alpha), beta))
    scale = div(unit, select(identity, unit, sub(alpha, beta)))
    v = select(eq(rows, pivot), shapes.full(column.shape, 1, column.dtype), _scaled(tail, scale))
    return v, tau, beta


def _as_column(v):
    return shapes.expand_dims(v, (v.ndim,))


def _as_row(v):
    return shapes.expand_dims(v, (v.ndim - 1,))


def _scaled(v, tau):
    """tau v, tau holding one entry per vector (shape [..., 1])."""
    return mul(shapes.broadcast_in_dim(tau, v.shape, tuple(range(v.ndim))), v)


def _apply_left(a, v, tau):
    """H^H a = a - conj(tau) v (v^H a) for H = I - tau v v^H."""
    v_h_a = batch_matmul(_as_row(_conj(v)), a)
    return sub(a, batch_matmul(_as_column(_scaled(v, _conj(tau))), v_h_a))


def _apply_right(a, v, tau):
    """a H = a - tau (a v) v^H."""
    a_v = batch_matmul(a, _as_column(v))
    return sub(a, batch_matmul(a_v, _as_row(_scaled(_conj(v), tau))))


def _set_entry(v, value, k):
    return dynamic_update_slice_in_dim(v, value, k, v.ndim - 1)


def _set_column(a, column, k):
    return dynamic_update_slice_in_dim(a, _as_column(column), k, a.ndim - 1)


def _reduce_to_hessenberg(a):
    """The reduction a -> Q^H a Q, Q = H_0 ... H_{n-2}, H_k zeroing column k below row k + 1:
    (the reduced matrix, with rounding left below its subdiagonal; the reflectors as columns;
    the taus)."""
    n = a.shape[-1]
    steps = max(n - 1, 0)
    taus = shapes.full((*a.shape[:-2], steps), 0, a.dtype)
    if steps == 0:  # (a 1 x 1 matrix has no step, whose body would not fit its taus)
        return a, _zeros_like(a), taus

    def step(k, carry):
        a, reflectors, taus = carry
        k = _step_index(k)
        v, tau, _ = _reflector(_column(a, k), k + 1)
        a = _apply_right(_apply_left(a, v, tau), v, tau)
        return a, _set_column(reflectors, v, k), _set_entry(taus, tau, k)

    return fori_loop(0, steps, step, (a, _zeros_like(a), taus))


def hessenberg(a):
    """(a, taus): the upper Hessenberg form of square matrices in a's upper triangle and first
    subdiagonal, the reflectors' tails below it, and their n - 1 taus. The Hessenberg form is
    Q^H a Q with Q the product of the reflectors (`householder_product` of the packed matrix's
    lower part, moved up a row)."""
    a = asarray(a)
    _check_matrix("hessenberg", a, square=True, complex_ok=True)
    reduced, reflectors, taus = _reduce_to_hessenberg(a)
    return add(_triu(reduced, -1), _tril(reflectors, -2)), taus


def tridiagonal(a, *, lower: bool = True):
    """(a, d, e, taus): the reduction of Hermitian matrices to real symmetric tridiagonal form
    T = Q^H A Q, A described by its triangle `lower` (the other one is not read, and comes
    back as it was). d is T's diagonal and e its off-diagonal, stored in a's diagonal and first
    sub- (or super-) diagonal; the reflectors' tails lie beyond that, in the triangle `lower`.

    Lower: Q = H_0 ... H_{n-2}, H_k zeroing column k below row k + 1. Upper: the same reduction
    of the matrix with both axes reversed (whose lower triangle is this one's upper triangle),
    reversed back: Q = H_{n-2} ... H_0, H_k zeroing column k + 1 above row k.
    """
    a = asarray(a)
    _check_matrix("tridiagonal", a, square=True, complex_ok=True)
    if lower:
        return _tridiagonal_lower(a)
    last_two = (a.ndim - 2, a.ndim - 1)
    packed, d, e, taus = _tridiagonal_lower(shapes.rev(a, last_two))
    last = (a.ndim - 2,)
    return (
        shapes.rev(packed, last_two),
        shapes.rev(d, last),
        shapes.rev(e, last),
        shapes.rev(taus, last),
    )


def _tridiagonal_lower(a):
    strictly_lower = _tril(a, -1)
    diagonal = convert_element_type(_real(_diagonal(a)), a.dtype)
    eye = _eye_like(a)
    hermitian = add(
        add(strictly_lower, _adjoint(strictly_lower)),
        mul(eye, shapes.broadcast_in_dim(diagonal, a.shape, tuple(range(a.ndim - 1)))),
    )
    reduced, reflectors, taus = _reduce_to_hessenberg(hermitian)
    d = _real(_diagonal(reduced))
    e = _real(_subdiagonal(reduced))
    band = add(_tril(_triu(reduced, -1)), _tril(reflectors, -2))
    band = _real_band(band, d, e)
    return add(band, _triu(a, 1)), d, e, taus


def _subdiagonal(a):
    """a[..., i + 1, i] for i < n - 1."""
    n = a.shape[-1]
    below = shapes.slice_in_dim(a, 1, n, axis=a.ndim - 2)
    return _diagonal(shapes.slice_in_dim(below, 0, n - 1, axis=a.ndim - 1))


def _real_band(band, d, e):
    """band with its diagonal and subdiagonal replaced by the real d and e (the reduction
    leaves rounding, and tiny imaginary parts, there)."""
    ndim = band.ndim
    rows = shapes.broadcasted_iota(dtypes.int32, band.shape, ndim - 2)
    columns = shapes.broadcasted_iota(dtypes.int32, band.shape, ndim - 1)
    e = shapes.pad(
        convert_element_type(e, band.dtype),
        shapes.full((), 0, band.dtype),
        [(0, 0, 0)] * (ndim - 2) + [(0, 1, 0)],
    )
    on_columns = (*range(ndim - 2), ndim - 1)  # entry [i, j] reads d[j] or e[j]
    band = select(
        eq(rows, columns),
        shapes.broadcast_in_dim(convert_element_type(d, band.dtype), band.shape, on_columns),
        band,
    )
    return select(
        eq(rows, add(columns, 1)), shapes.broadcast_in_dim(e, band.shape, on_columns), band
    )


def geqrf(a):
    """(a, taus): the QR decomposition of [..., m, n] matrices in LAPACK's packed form, R in
    a's upper triangle and reflector i's tail below its diagonal entry in column i, with the
    min(m, n) taus. Q = H_0 ... H_{k-1} (`householder_product`, `ormqr`)."""
    a = asarray(a)
    _check_matrix("geqrf", a, complex_ok=True)
    steps = min(a.shape[-2:])
    taus = shapes.full((*a.shape[:-2], steps), 0, a.dtype)
    if steps == 0:  # (a loop's body is traced even when it runs no step)
        return a, taus

    def step(k, carry):
        a, reflectors, taus = carry
        k = _step_index(k)
        v, tau, _ = _reflector(_column(a, k), k)
        a = _apply_left(a, v, tau)
        return a, _set_column(reflectors, v, k), _set_entry(taus, tau, k)

    reduced, reflectors, taus = fori_loop(0, steps, step, (a, _zeros_like(a), taus))
    return add(_triu(reduced), _tril(reflectors, -1)), taus


def _check_packed(name: str, a, taus) -> None:
    """a [..., m, n] holding reflectors below its diagonal and taus [..., k] of a's dtype and
    batch shape, k <= min(m, n)."""
    _check_matrix(name, a, complex_ok=True)
    if taus.dtype != a.dtype:
        raise TypeError(f"{name} needs taus of a's dtype {a.dtype.name}, got {taus.dtype.name}")
    if taus.ndim < 1 or taus.shape[:-1] != a.shape[:-2] or taus.shape[-1] > min(a.shape[-2:]):
        raise ValueError(
            f"{name} takes a [..., m, n] and taus [..., k] with k <= min(m, n) and a's batch "
            f"shape, got shapes {a.shape} and {taus.shape}"
        )


def _packed_reflector(a, taus, i, rows):
    """(v, tau) of reflector i of a packed QR: v = (1, a[i + 1:, i]) from row i on."""
    column = _column(a, i)
    v = select(gt(rows, i), column, _zeros_like(column))
    return select(eq(rows, i), shapes.full(v.shape, 1, v.dtype), v), _entry(taus, i)


def householder_product(a, taus):
    """The first n columns of Q = H_0 ... H_{k-1} for a of shape [..., m, n] (m >= n) holding
    reflector i's tail below its diagonal entry in column i, and taus of shape [..., k],
    k <= n."""
    a, taus = asarray(a), asarray(taus)
    _check_packed("householder_product", a, taus)
    m, n = a.shape[-2:]
    if m < n:
        raise ValueError(
            f"householder_product takes a [..., m, n] with m >= n, got shape {a.shape}"
        )
    k = taus.shape[-1]
    rows = shapes.broadcasted_iota(dtypes.int32, (*a.shape[:-2], m), a.ndim - 2)

    def reflect(j, q):
        v, tau = _packed_reflector(a, taus, _step_index(k - 1 - j), rows)
        return _apply_left(q, v, _conj(tau))  # H q = (H^H)^H q

    return fori_loop(0, k, reflect, _eye_like(a)) if k else _eye_like(a)


def ormqr(a, taus, c, *, left: bool = True, transpose: bool = False):
    """Q c (`left`) or c Q, with Q^H for Q if `transpose`, where Q = H_0 ... H_{k-1} is the
    m x m unitary factor that the packed a [..., m, n] and taus [..., k] describe (as `geqrf`
    makes them). Q is never formed: each reflection costs two products with c."""
    a, taus, c = asarray(a), asarray(taus), asarray(c)
    _check_packed("ormqr", a, taus)
    if c.dtype != a.dtype:
        raise TypeError(f"ormqr needs c of a's dtype {a.dtype.name}, got {c.dtype.name}")
    m = a.shape[-2]
    if c.ndim != a.ndim or c.shape[:-2] != a.shape[:-2] or c.shape[-2 if left else -1] != m:
        side = "rows" if left else "columns"
        raise ValueError(
            f"ormqr with left={left} needs c [..., {m}, p] (a's m = {m} {side}) with a's batch "
            f"shape, got a of shape {a.shape} and c of shape {c.shape}"
        )
    k = taus.shape[-1]
    rows = shapes.broadcasted_iota(dtypes.int32, (*a.shape[:-2], m), a.ndim - 2)
    # Q c and c Q^H take the reflections from the last; Q^H c and c Q from the first.
    from_first = left == transpose

    def reflect(j, c):
        v, tau = _packed_reflector(a, taus, _step_index(j if from_first else k - 1 - j), rows)
        if left:  # H^H c, or H c = (H^H with conj(tau)) c
            return _apply_left(c, v, tau if transpose else _conj(tau))
        return _apply_right(c, v, _conj(tau) if transpose else tau)  # c H, or c H^H

    return fori_loop(0, k, reflect, c) if k else c
