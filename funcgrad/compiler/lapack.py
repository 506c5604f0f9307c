"""The dense decompositions through LAPACK (and BLAS's triangular solve), as the reference
backend computes them: NumPy calls the same routines (potrf, getrf, geqrf + orgqr, syevd,
geev, gesdd); triangular solves are trsm.

Each decomposition becomes: a fused kernel copying the operand into column-major scratch (the
order LAPACK reads), one `FortranCall` step per routine (looping over the stack of matrices),
and kernels copying the results back to row-major outputs. A matrix for which a routine
reports failure (info != 0) gets NaN results, as the reference gives.

NumPy computes these decompositions of float32 matrices in float64 and rounds the results;
so do the compiled programs (`working_dtype`), or a float32 routine could pick other signs of
eigenvectors or singular vectors than the reference. LU and triangular solves stay in the
operand's dtype, as the reference computes them.

Workspaces are sized as NumPy sizes them, by asking the library (`workspace_query`, set by
the backend that calls it): some routines choose their algorithm by the workspace they are
given, so another size could give other (equally valid) signs of singular vectors. Without a
query the documented minimum sizes serve.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from funcgrad.compiler import jacobi
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.choices import Choice
from funcgrad.compiler.fusion import KernelBuilder, flat_offset, loop_nest
from funcgrad.compiler.kernel_ir import INDEX
from funcgrad.core import ShapedArray
from funcgrad.ir import JaxprEqn

_names = itertools.count()

# Placeholders in a call's arguments for its workspaces and their sizes.
WORK, LWORK, IWORK, LIWORK = "<work>", "<lwork>", "<iwork>", "<liwork>"
RWORK, LRWORK = "<rwork>", "<lrwork>"  # the real workspace of complex routines

# (routine, dtype, arguments with the placeholders above) -> {LWORK: size, LIWORK: size}: the
# optimal sizes the library reports. Set by the backend that calls the library.
workspace_query = None


@dataclass(eq=False)
class FortranCall:
    """`routine` (without its type letter) called once per matrix of a stack of `batch`.
    Each argument is passed by reference, as Fortran expects: a (buffer, stride) pair is that
    buffer advanced by `stride` elements per matrix, an int is an integer, a float is a scalar
    of the routine's dtype, a one-letter str is a character."""

    routine: str
    dtype: np.dtype
    args: list
    batch: int
    eqn: JaxprEqn


def _scratch(dtype, size: int) -> K.Buffer:
    return K.Buffer(f"lapack{next(_names)}", np.dtype(dtype), max(size, 1))


def _i(value: int) -> K.Expr:
    return K.const(value, INDEX)


# Whether small real symmetric matrices' eigendecompositions run by Jacobi's rotations, one
# matrix per vector lane (a CPU's choice), or each through the library.
small_eighs_rotate = Choice("small_eighs_rotate", False)


def working_dtype(dtype) -> np.dtype:
    """The dtype a decomposition routine computes in: float64 for float32 operands."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float32 else np.dtype(dtype)


def _to_column_major(
    scheduler, var, rows: int, cols: int, columns: int, dtype=None, pairs: bool = False
) -> K.Buffer:
    """A scratch copy of `var`'s matrices in `dtype` (by default its own), each column-major
    with `columns` columns of `rows` (those beyond `cols` left for the routine to fill).
    With `pairs`, `var` holds complex matrices as interleaved parts (a trailing axis of 2),
    and so does the copy."""
    parts = 2 if pairs else 1
    batch_shape = var.aval.shape[: -2 - (parts - 1)]
    batch = math.prod(batch_shape)
    buffer = _scratch(dtype or var.aval.dtype, batch * rows * columns * parts)
    builder = KernelBuilder(scheduler.producer, scheduler.buffer_of)

    def body(index: list) -> list:
        matrix_index = index[:-1] if pairs else index
        b = flat_offset(matrix_index[:-2], tuple(batch_shape)) if batch_shape else _i(0)
        i, j = matrix_index[-2], matrix_index[-1]
        offset = (b * _i(columns) + j) * _i(rows) + i
        if pairs:
            offset = offset * _i(2) + index[-1]
        return [K.Store(buffer, offset, K.cast(builder.element(var, index), buffer.dtype))]

    scheduler._kernel(builder, [buffer], loop_nest(var.aval.shape, body), [])
    return buffer


def _from_column_major(
    scheduler,
    source: K.Buffer,
    ld: int,
    per_matrix: int,
    out: K.Buffer,
    shape,
    info,
    upper=False,
    lower=False,
    pairs=False,
) -> None:
    """out[b, i, j] = source[b * per_matrix + j * ld + i] (zero below the diagonal when
    `upper`, above it when `lower`); NaN for the matrices whose `info` is nonzero (in the kept
    triangle only: the zeros outside a triangular factor stay zero). Vectors
    (shape (..., n)) copy element by element. With `pairs` both hold complex matrices as
    interleaved parts (`out` with a trailing axis of 2; offsets count complex elements)."""
    builder = KernelBuilder(scheduler.producer, scheduler.buffer_of)
    builder.reads(source)
    if info is not None:
        builder.reads(info)
    matrix_shape = tuple(shape[:-1] if pairs else shape)
    matrix = len(matrix_shape) >= 2 and ld > 0
    batch_shape = tuple(matrix_shape[:-2] if matrix else matrix_shape[:-1])

    def body(index: list) -> list:
        b = flat_offset(index[: len(batch_shape)], batch_shape) if batch_shape else _i(0)
        matrix_index = index[:-1] if pairs else index
        if matrix:
            i, j = matrix_index[-2], matrix_index[-1]
            offset = b * _i(per_matrix) + j * _i(ld) + i
            value = K.Load(source, offset * _i(2) + index[-1] if pairs else offset)
        else:
            offset = b * _i(per_matrix) + matrix_index[-1]
            value = K.Load(source, offset * _i(2) + index[-1] if pairs else offset)
        value = K.cast(value, out.dtype)
        if info is not None:
            failed = K.binary("ne", K.Load(info, b), K.const(0, info.dtype))
            value = K.select(failed, K.const(np.nan, out.dtype), value)
        if matrix and (upper or lower):
            kept = K.binary("ge", j, i) if upper else K.binary("le", j, i)
            value = K.select(kept, value, K.const(0, out.dtype))
        return [K.Store(out, flat_offset(index, tuple(shape)), value)]

    scheduler._kernel(builder, [out], loop_nest(tuple(shape), body), [])


def _parts(eqn: JaxprEqn) -> int:
    """2 for the `_pairs` forms (complex matrices held as interleaved parts), else 1."""
    return 2 if eqn.primitive.name.endswith("_pairs") else 1


def _matrices_shape(var, parts: int) -> tuple:
    """`var`'s shape as matrices: without the parts' axis when it holds complex parts."""
    return var.aval.shape[:-1] if parts == 2 else var.aval.shape


def _call(
    scheduler, routine: str, eqn: JaxprEqn, batch: int, args: list, minimum: dict, dtype=None
):
    """Append the call of `routine` at `dtype` (by default the operand's), with workspaces
    sized by the query (or `minimum`) in place of the placeholders."""
    dtype = np.dtype(dtype or eqn.invars[0].aval.dtype)
    resolved = with_workspaces(routine, dtype, args, minimum, workspace_query, _scratch)
    scheduler.steps.append(FortranCall(routine, dtype, resolved, batch, eqn))


def with_workspaces(routine: str, dtype: np.dtype, args: list, minimum: dict, query, make) -> list:
    """`args` with workspaces `make(dtype, size)` and their sizes in place of the placeholders,
    sized by `query` (when given) or `minimum`. Shared with eager decompositions that call
    LAPACK from the host, so both size their workspaces alike."""
    sizes = dict(minimum)
    if query is not None and WORK in args:
        queried = dict(query(routine, dtype, args))
        # geev does not report its real workspace (what it leaves there is not a size): the
        # documented minimum stands unless the query asks for more.
        if LRWORK in queried and LRWORK in sizes:
            queried[LRWORK] = max(int(queried[LRWORK]), sizes[LRWORK])
        sizes.update({key: max(int(v), 1) for key, v in queried.items()})
    # Workspaces are real scratch: a complex one holds twice as many real parts.
    part = {np.complex64: np.float32, np.complex128: np.float64}.get(dtype.type, dtype)
    parts = 2 if dtype.kind == "c" else 1
    work = {WORK: (make(part, parts * sizes[LWORK]), 0)} if LWORK in sizes else {}
    if LIWORK in sizes:
        work[IWORK] = (make(np.int64, sizes[LIWORK]), 0)
    if LRWORK in sizes:
        work[RWORK] = (make(part, sizes[LRWORK]), 0)
    placeholders = {**sizes, **work}
    return [placeholders.get(a, a) if isinstance(a, str) else a for a in args]


def qr(scheduler, eqn: JaxprEqn) -> None:
    """geqrf, then orgqr builds Q; `qr_pairs` (complex matrices as interleaved parts) calls
    zgeqrf and zungqr."""
    (a,) = eqn.invars
    parts = _parts(eqn)
    pairs = parts == 2
    q_out, r_out = (scheduler.buffer_of[v] for v in eqn.outvars)
    *batch_shape, m, n = _matrices_shape(a, parts)
    batch = math.prod(batch_shape)
    k = min(m, n)
    q_cols = eqn.outvars[0].aval.shape[-1 - (parts - 1)]
    columns = max(n, q_cols)
    work = working_dtype(a.aval.dtype)
    routine_dtype = _complex_of(work) if pairs else work
    matrices = _to_column_major(scheduler, a, m, n, columns, work, pairs=pairs)
    tau = _scratch(work, batch * k * parts)
    info = _scratch(np.int64, batch)
    ld = max(m, 1)
    per = m * columns
    _call(
        scheduler, "geqrf", eqn, batch,
        [m, n, (matrices, per * parts), ld, (tau, k * parts), WORK, LWORK, (info, 1)],
        {LWORK: max(n, 1)}, routine_dtype,
    )  # fmt: skip
    r_shape = eqn.outvars[1].aval.shape
    _from_column_major(scheduler, matrices, m, per, r_out, r_shape, None, True, pairs=pairs)
    _call(
        scheduler, "ungqr" if pairs else "orgqr", eqn, batch,
        [m, q_cols, k, (matrices, per * parts), ld, (tau, k * parts), WORK, LWORK, (info, 1)],
        {LWORK: max(q_cols, 1)}, routine_dtype,
    )  # fmt: skip
    q_shape = eqn.outvars[0].aval.shape
    _from_column_major(scheduler, matrices, m, per, q_out, q_shape, None, pairs=pairs)


def eigh(scheduler, eqn: JaxprEqn) -> None:
    """syevd; `eigh_pairs` (Hermitian matrices held as interleaved parts) calls heevd, in
    complex128 as NumPy computes complex64 matrices. A CPU's small real matrices take
    Jacobi's rotations instead (`jacobi.py`, `small_eighs_rotate`)."""
    if small_eighs_rotate.get() and jacobi.takes(eqn):
        jacobi.eigh(scheduler, eqn)
        return
    (a,) = eqn.invars
    parts = _parts(eqn)
    pairs = parts == 2
    v_out, w_out = (scheduler.buffer_of[v] for v in eqn.outvars)
    *batch_shape, n, _ = _matrices_shape(a, parts)
    batch = math.prod(batch_shape)
    work = working_dtype(a.aval.dtype)
    matrices = _to_column_major(scheduler, a, n, n, n, work, pairs=pairs)
    eigenvalues = _scratch(work, batch * n)
    info = _scratch(np.int64, batch)
    uplo = "L" if eqn.params["lower"] else "U"
    head = ["V", uplo, n, (matrices, n * n * parts), max(n, 1), (eigenvalues, n), WORK, LWORK]
    if pairs:
        _call(
            scheduler, "heevd", eqn, batch,
            head + [RWORK, LRWORK, IWORK, LIWORK, (info, 1)],
            {LWORK: 2 * n + n * n, LRWORK: 1 + 5 * n + 2 * n * n, LIWORK: 3 + 5 * n},
            _complex_of(work),
        )  # fmt: skip
    else:
        _call(
            scheduler, "syevd", eqn, batch, head + [IWORK, LIWORK, (info, 1)],
            {LWORK: 1 + 6 * n + 2 * n * n, LIWORK: 3 + 5 * n}, work,
        )  # fmt: skip
    v_shape = eqn.outvars[0].aval.shape
    _from_column_major(scheduler, matrices, n, n * n, v_out, v_shape, info, pairs=pairs)
    _from_column_major(scheduler, eigenvalues, 0, n, w_out, eqn.outvars[1].aval.shape, info)


def eig_pairs(scheduler, eqn: JaxprEqn) -> None:
    """zgeev with right eigenvectors only, on complex matrices held as interleaved parts (in
    complex128, as NumPy computes complex64 matrices)."""
    (a,) = eqn.invars
    values_out, *vectors_out = (scheduler.buffer_of[v] for v in eqn.outvars)
    *batch_shape, n, _ = _matrices_shape(a, 2)
    batch = math.prod(batch_shape)
    work = working_dtype(a.aval.dtype)
    matrices = _to_column_major(scheduler, a, n, n, n, work, pairs=True)
    values, vectors = _scratch(work, batch * n * 2), _scratch(work, batch * n * n * 2)
    unused, info = _scratch(work, 2), _scratch(np.int64, batch)
    _call(
        scheduler, "geev", eqn, batch,
        ["N", "V", n, (matrices, n * n * 2), max(n, 1), (values, n * 2), (unused, 0), 1,
         (vectors, n * n * 2), max(n, 1), WORK, LWORK, RWORK, (info, 1)],
        {LWORK: max(2 * n, 1), LRWORK: max(2 * n, 1)}, _complex_of(work),
    )  # fmt: skip
    shapes = [v.aval.shape for v in eqn.outvars]
    _from_column_major(scheduler, values, 0, n, values_out, shapes[0], info, pairs=True)
    if vectors_out:  # compute_right_eigenvectors
        (vectors_out,) = vectors_out
        _from_column_major(scheduler, vectors, n, n * n, vectors_out, shapes[1], info, pairs=True)


def eig_parts(scheduler, eqn: JaxprEqn) -> None:
    """geev with right eigenvectors only: eigenvalues as real and imaginary parts, and the
    eigenvectors packed as geev packs them (see `funcgrad.lax.eig`)."""
    (a,) = eqn.invars
    outs = [scheduler.buffer_of[v] for v in eqn.outvars]
    *batch_shape, n, _ = a.aval.shape
    batch = math.prod(batch_shape)
    work = working_dtype(a.aval.dtype)
    matrices = _to_column_major(scheduler, a, n, n, n, work)
    real, imaginary = _scratch(work, batch * n), _scratch(work, batch * n)
    vectors, unused = _scratch(work, batch * n * n), _scratch(work, 1)
    info = _scratch(np.int64, batch)
    _call(
        scheduler, "geev", eqn, batch,
        ["N", "V", n, (matrices, n * n), max(n, 1), (real, n), (imaginary, n), (unused, 0), 1,
         (vectors, n * n), max(n, 1), WORK, LWORK, (info, 1)],
        {LWORK: max(4 * n, 1)}, work,
    )  # fmt: skip
    shapes = [v.aval.shape for v in eqn.outvars]
    _from_column_major(scheduler, real, 0, n, outs[0], shapes[0], info)
    _from_column_major(scheduler, imaginary, 0, n, outs[1], shapes[1], info)
    _from_column_major(scheduler, vectors, n, n * n, outs[2], shapes[2], info)


def gees_arguments(n: int, parts: int, matrices, eigenvalues: list, vectors, unused, info) -> list:
    """gees's arguments (Schur vectors wanted, eigenvalues not reordered) on a stack of
    column-major n x n matrices, complex ones (`parts` 2) as interleaved parts. `eigenvalues`
    is [w] for complex matrices and [wr, wi] for real ones; `unused` stands in for the
    selection function, the count of selected eigenvalues and the logical workspace, which
    gees does not read when it does not reorder. Shared by the compiled and the eager schur."""
    ld = max(n, 1)
    head = ["V", "N", (unused, 0), n, (matrices, n * n * parts), ld, (unused, 0)]
    values = [(v, n * parts) for v in eigenvalues]
    real_work = [RWORK] if parts == 2 else []
    tail = [(vectors, n * n * parts), ld, WORK, LWORK, *real_work, (unused, 0), (info, 1)]
    return head + values + tail


def gees_minimum(n: int, parts: int) -> dict:
    """gees's documented minimum workspaces."""
    if parts == 2:
        return {LWORK: max(2 * n, 1), LRWORK: max(n, 1)}
    return {LWORK: max(3 * n, 1)}


def schur(scheduler, eqn: JaxprEqn) -> None:
    """gees, the Schur form left in place of the matrix; `schur_pairs` (complex matrices as
    interleaved parts) calls zgees, in complex128 as the reference computes complex64."""
    (a,) = eqn.invars
    parts = _parts(eqn)
    pairs = parts == 2
    outs = [scheduler.buffer_of[v] for v in eqn.outvars]
    *batch_shape, n, _ = _matrices_shape(a, parts)
    batch = math.prod(batch_shape)
    work = working_dtype(a.aval.dtype)
    matrices = _to_column_major(scheduler, a, n, n, n, work, pairs=pairs)
    eigenvalues = [_scratch(work, batch * n * parts) for _ in range(3 - parts)]
    vectors = _scratch(work, batch * n * n * parts)
    unused, info = _scratch(np.int64, 1), _scratch(np.int64, batch)
    args = gees_arguments(n, parts, matrices, eigenvalues, vectors, unused, info)
    routine_dtype = _complex_of(work) if pairs else work
    _call(scheduler, "gees", eqn, batch, args, gees_minimum(n, parts), routine_dtype)
    shapes = [v.aval.shape for v in eqn.outvars]
    _from_column_major(scheduler, matrices, n, n * n, outs[0], shapes[0], info, pairs=pairs)
    if len(outs) == 2:  # compute_schur_vectors
        _from_column_major(scheduler, vectors, n, n * n, outs[1], shapes[1], info, pairs=pairs)


def svd(scheduler, eqn: JaxprEqn) -> None:
    """gesdd; `svd_pairs` (complex matrices as interleaved parts) calls zgesdd, whose real
    workspace has its documented size."""
    (a,) = eqn.invars
    parts = _parts(eqn)
    pairs = parts == 2
    outs = [scheduler.buffer_of[v] for v in eqn.outvars]
    *batch_shape, m, n = _matrices_shape(a, parts)
    batch = math.prod(batch_shape)
    k, big = min(m, n), max(m, n)
    compute_uv, full = eqn.params["compute_uv"], eqn.params["full_matrices"]
    job = "N" if not compute_uv else ("A" if full else "S")
    u_cols = m if full else k
    vt_rows = n if full else k
    work = working_dtype(a.aval.dtype)
    matrices = _to_column_major(scheduler, a, m, n, n, work, pairs=pairs)
    singular = _scratch(work, batch * k)
    u = _scratch(work, batch * m * u_cols * parts if compute_uv else 1)
    vt = _scratch(work, batch * vt_rows * n * parts if compute_uv else 1)
    info = _scratch(np.int64, batch)
    iwork = _scratch(np.int64, 8 * max(k, 1))
    ldu = max(m, 1) if compute_uv else 1
    ldvt = max(vt_rows, 1) if compute_uv else 1
    head = [job, m, n, (matrices, m * n * parts), max(m, 1), (singular, k),
            (u, m * u_cols * parts if compute_uv else 0), ldu,
            (vt, vt_rows * n * parts if compute_uv else 0), ldvt, WORK, LWORK]  # fmt: skip
    if pairs:
        real_work = 7 * k if not compute_uv else k * max(5 * k + 7, 2 * big + 2 * k + 1)
        _call(
            scheduler, "gesdd", eqn, batch, head + [RWORK, (iwork, 0), (info, 1)],
            {LWORK: k * k + 2 * k + big, LRWORK: max(real_work, 1)}, _complex_of(work),
        )  # fmt: skip
    else:
        _call(
            scheduler, "gesdd", eqn, batch, head + [(iwork, 0), (info, 1)],
            {LWORK: 4 * k * k + 7 * k + big}, work,
        )  # fmt: skip
    shapes = [v.aval.shape for v in eqn.outvars]
    if not compute_uv:
        _from_column_major(scheduler, singular, 0, k, outs[0], shapes[0], info)
        return
    if k == 0:
        # gesdd returns at once for an empty matrix, leaving u and vt unset; the full bases
        # of the two sides are then the identity, as the reference gives.
        _identity(scheduler, outs[0], shapes[0], pairs)
        _identity(scheduler, outs[2], shapes[2], pairs)
        return
    _from_column_major(scheduler, u, m, m * u_cols, outs[0], shapes[0], info, pairs=pairs)
    _from_column_major(scheduler, singular, 0, k, outs[1], shapes[1], info)
    _from_column_major(scheduler, vt, vt_rows, vt_rows * n, outs[2], shapes[2], info, pairs=pairs)


def _identity(scheduler, out: K.Buffer, shape, pairs: bool) -> None:
    """out[..., i, j] = (i == j): a stack of identity matrices (with `pairs`, as interleaved
    complex parts, the imaginary ones zero)."""
    builder = KernelBuilder(scheduler.producer, scheduler.buffer_of)
    zero, one = K.const(0, out.dtype), K.const(1, out.dtype)

    def body(index: list) -> list:
        i, j = index[-3:-1] if pairs else index[-2:]
        value = K.select(K.binary("eq", i, j), one, zero)
        if pairs:
            value = K.select(K.binary("eq", index[-1], _i(0)), value, zero)
        return [K.Store(out, flat_offset(index, tuple(shape)), value)]

    scheduler._kernel(builder, [out], loop_nest(tuple(shape), body), [])


def cholesky(scheduler, eqn: JaxprEqn) -> None:
    """potrf on the lower triangle; the upper triangle of the factor is zero, and a matrix
    that is not positive definite (info != 0) gets NaN in the lower, as the reference."""
    (a,) = eqn.invars
    parts = _parts(eqn)
    pairs = parts == 2
    (out,) = (scheduler.buffer_of[v] for v in eqn.outvars)
    *batch_shape, n, _ = _matrices_shape(a, parts)
    batch = math.prod(batch_shape)
    work = working_dtype(a.aval.dtype)
    matrices = _to_column_major(scheduler, a, n, n, n, work, pairs=pairs)
    info = _scratch(np.int64, batch)
    _call(
        scheduler, "potrf", eqn, batch,
        ["L", n, (matrices, n * n * parts), max(n, 1), (info, 1)], {},
        _complex_of(work) if pairs else work,
    )  # fmt: skip
    shape = eqn.outvars[0].aval.shape
    _from_column_major(scheduler, matrices, n, n * n, out, shape, info, lower=True, pairs=pairs)


def lu(scheduler, eqn: JaxprEqn) -> None:
    """getrf (partial pivoting, the first largest pivot; a zero pivot leaves its column), then
    its 1-based row interchanges as 0-based pivots and as the permutation they compose.
    `lu_pairs` is the same on complex matrices held as interleaved parts (zgetrf/cgetrf)."""
    (a,) = eqn.invars
    parts = _parts(eqn)
    pairs = parts == 2
    lu_out, pivots_out, permutation_out = (scheduler.buffer_of[v] for v in eqn.outvars)
    *batch_shape, m, n = _matrices_shape(a, parts)
    batch = math.prod(batch_shape)
    k = min(m, n)
    matrices = _to_column_major(scheduler, a, m, n, n, pairs=pairs)
    interchanges = _scratch(np.int64, batch * k)
    info = _scratch(np.int64, batch)
    routine_dtype = _complex_of(a.aval.dtype) if pairs else None
    _call(
        scheduler, "getrf", eqn, batch,
        [m, n, (matrices, m * n * parts), max(m, 1), (interchanges, k), (info, 1)], {},
        routine_dtype,
    )  # fmt: skip
    shape = eqn.outvars[0].aval.shape
    _from_column_major(scheduler, matrices, m, m * n, lu_out, shape, None, pairs=pairs)
    builder = KernelBuilder(scheduler.producer, scheduler.buffer_of)
    builder.reads(interchanges)
    b, j, r = K.fresh_index("batch"), K.fresh_index(), K.fresh_index()
    pivot = K.cast(K.Load(interchanges, b * _i(k) + j), INDEX) - _i(1)
    row = permutation_out.dtype
    held = K.fresh_acc(row, "held")
    body = [
        K.Loop(r, 0, m, [K.Store(permutation_out, b * _i(m) + r, K.cast(r, row))]),
        K.Loop(
            j,
            0,
            k,
            [
                K.Store(pivots_out, b * _i(k) + j, K.cast(pivot, pivots_out.dtype)),
                K.SetAcc(held, K.Load(permutation_out, b * _i(m) + j)),
                K.Store(permutation_out, b * _i(m) + j, K.Load(permutation_out, b * _i(m) + pivot)),
                K.Store(permutation_out, b * _i(m) + pivot, held.read()),
            ],
        ),
    ]
    scheduler._kernel(builder, [pivots_out, permutation_out], [K.Loop(b, 0, batch, body)], [])


def triangular_solve(scheduler, eqn: JaxprEqn) -> None:
    """trsm on the row-major buffers themselves: a row-major matrix read column-major is its
    transpose, so op(a) x = b becomes x' op(a') = b' (the side and the triangle swap, the
    transpose flag stays). b is copied into the output, which trsm overwrites with x.
    `triangular_solve_pairs` is the same on complex matrices held as interleaved parts
    (ztrsm/ctrsm, whose alpha is a complex one in a constant buffer)."""
    a, b = eqn.invars
    p = eqn.params
    parts = _parts(eqn)
    pairs = parts == 2
    (out,) = (scheduler.buffer_of[v] for v in eqn.outvars)
    *batch_shape, m, n = _matrices_shape(b, parts)
    batch = math.prod(batch_shape)
    k = _matrices_shape(a, parts)[-1]
    builder = KernelBuilder(scheduler.producer, scheduler.buffer_of)
    shape = b.aval.shape

    def copy(index: list) -> list:
        return [K.Store(out, flat_offset(index, shape), builder.element(b, index))]

    scheduler._kernel(builder, [out], loop_nest(shape, copy), scheduler._fused_eqns([eqn]))
    matrices = scheduler._source(a)
    args = [
        "R" if p["left_side"] else "L",
        "U" if p["lower"] else "L",
        "T" if p["transpose_a"] else "N",
        "U" if p["unit_diagonal"] else "N",
        n,
        m,
        (_complex_one(scheduler, a.aval.dtype), 0) if pairs else 1.0,
        (matrices, k * k * parts if a.aval.ndim > 2 + (parts - 1) else 0),
        max(k, 1),
        (out, m * n * parts),
        max(n, 1),
    ]
    _call(scheduler, "trsm", eqn, batch, args, {}, _complex_of(a.aval.dtype) if pairs else None)


def _complex_of(dtype) -> np.dtype:
    return np.dtype(np.complex128 if np.dtype(dtype) == np.float64 else np.complex64)


def _complex_one(scheduler, dtype) -> K.Buffer:
    """A buffer holding the complex number 1 as its two parts."""
    return scheduler._const_buffer(np.array([1.0, 0.0], dtype), ShapedArray((2,), dtype))


DECOMPOSITIONS = {
    "cholesky": cholesky,
    "lu": lu,
    "triangular_solve": triangular_solve,
    "triangular_solve_pairs": triangular_solve,
    "lu_pairs": lu,
    "qr": qr,
    "eigh": eigh,
    "eigh_pairs": eigh,
    "cholesky_pairs": cholesky,
    "qr_pairs": qr,
    "svd_pairs": svd,
    "eig_parts": eig_parts,
    "eig_pairs": eig_pairs,
    "svd": svd,
    "schur": schur,
    "schur_pairs": schur,
}
