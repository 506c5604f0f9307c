"""Decompositions on the GPU: the LAPACK calls the compiler plans (`compiler/lapack.py`) made
as cuSOLVER's calls of the same routines (and cuBLAS's trsm), on device memory, with no
copy to the host.

cuSOLVER's dense routines mirror LAPACK's; how they are called differs: a handle, enums for
LAPACK's characters, int32 info and pivots where the plan holds int64 ones, workspaces that
the library sizes itself, and no integer or real workspaces. `translate` writes a step's
calls, a matrix at a time, in cuSOLVER's order and terms: int64 buffers that cuSOLVER
writes as int32 get an int32 shadow, widened into them after the calls. A stack is one call
of a batched routine where the libraries have one (`_batched`). The GPU runs the
calls through CuPy (`Gpu.solve`); the emulator runs them with the host's LAPACK
(`emulated_call`), which checks the translation without a GPU.

Three routines stay on the host: gesdd (cuSOLVER has gesvd, another algorithm, whose singular
vectors may differ in sign from the reference's, and which takes no wide matrices), geev
(not in CuPy) and gees (cuSOLVER has no Schur decomposition).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.lapack import IWORK, LIWORK, LRWORK, LWORK, RWORK, WORK, FortranCall

# The type letters of the libraries' routine names.
LETTERS = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}

ALPHA = "<alpha>"  # trsm's scale, always one in the plans (a complex plan holds it in a buffer)
JACOBI = "<syevj parameters>"  # the batched Jacobi eigensolver's parameters (the library's)

# LAPACK's characters by what they mean at each position.
_FILL = {"L": "lower", "U": "upper"}
_SIDE = {"L": "left", "R": "right"}
_DIAG = {"U": "unit", "N": "non-unit"}
_JOB = {"V": "vector", "N": "novector"}

# The leading arguments of each routine's workspace query (`<t><routine>_bufferSize`), as
# positions in its call's arguments.
QUERIES = {
    "potrf": (0, 1, 2, 3),
    "getrf": (0, 1, 2, 3),
    "geqrf": (0, 1, 2, 3),
    "orgqr": (0, 1, 2, 3, 4, 5),
    "ungqr": (0, 1, 2, 3, 4, 5),
    "syevd": (0, 1, 2, 3, 4, 5),
    "heevd": (0, 1, 2, 3, 4, 5),
    "syevjBatched": (0, 1, 2, 3, 4, 5, 9, 10),
    "heevjBatched": (0, 1, 2, 3, 4, 5, 9, 10),
}


@dataclass(frozen=True)
class Pointer:
    """Element `offset` of `buffer`; `narrow`: of its int32 shadow instead."""

    buffer: K.Buffer
    offset: int
    narrow: bool = False


@dataclass(frozen=True)
class Matrices:
    """The addresses of `count` matrices of `buffer`, `stride` elements apart, as a device
    array: a batched routine's operand."""

    buffer: K.Buffer
    stride: int
    count: int


@dataclass(frozen=True)
class SolverCall:
    """One matrix's call: `routine` without its type letter, `args` in the library's order
    after the handle (Pointers, ints, enum names, and WORK, LWORK, ALPHA for the device to
    fill in)."""

    routine: str
    dtype: np.dtype
    args: tuple


@dataclass(frozen=True)
class DeviceSolve:
    calls: list
    narrowed: list  # int64 buffers written as int32 shadows, widened after the calls


def translate(step: FortranCall) -> DeviceSolve | None:
    """The step's calls in cuSOLVER's terms, or None for a routine that stays on the host. A
    stack is one call of the batched routine where the libraries have one (`_batched`)."""
    routine, args = step.routine, step.args
    batched = _batched(step)
    if batched is not None:
        narrowed = [a.buffer for a in batched.args if isinstance(a, Pointer) and a.narrow]
        return DeviceSolve([batched], narrowed)
    make = _TRANSLATIONS.get(routine)
    if make is None:
        return None
    calls, narrowed = [], {}
    for matrix in range(step.batch):

        def at(arg, narrow=False, matrix=matrix):
            buffer, stride = arg
            if narrow:
                narrowed[buffer] = None
            return Pointer(buffer, matrix * stride, narrow)

        calls.append(SolverCall(routine, step.dtype, make(args, at)))
    return DeviceSolve(calls, list(narrowed))


class Unavailable(Exception):
    """What a device's `make` raises for a batched routine its library lacks."""


def run(plan: DeviceSolve, views: dict, xp, make) -> None:
    """Makes a step's calls, `make(call, locate)`, where `locate(pointer)` gives the array
    holding a Pointer's element and its offset there (the int32 shadow of a narrowed buffer,
    made with `xp`), then widens the shadows into their buffers. A batched call `make` finds
    unavailable is made a matrix at a time."""
    shadows = {buffer: xp.zeros(buffer.size, np.int32) for buffer in plan.narrowed}

    def locate(pointer: Pointer) -> tuple:
        base = shadows[pointer.buffer] if pointer.narrow else views[pointer.buffer]
        return base, pointer.offset

    def make_or_each(call: SolverCall, locate) -> None:
        try:
            make(call, locate)
        except Unavailable:
            for each in each_matrix(call):
                make(each, locate)

    for call in plan.calls:
        unfinished = _off_diagonal_not_finite(call, locate, xp)
        if call.routine in CONDITIONED_ROUTINES:
            _jacobi_conditioned(call, locate, xp, make_or_each)
        else:
            make_or_each(call, locate)
        if unfinished is not None:
            _failed(call, locate, unfinished, xp)
    for buffer, shadow in shadows.items():
        views[buffer][...] = shadow


# The eigensolvers' calls; each holds its info at argument 8, a batched one its count last.
EIGH_ROUTINES = ("syevd", "heevd", "syevjBatched", "heevjBatched", "syevBatched")


def _off_diagonal_not_finite(call: SolverCall, locate, xp):
    """For an eigensolver's call, which of its matrices hold an infinity or a NaN off the
    diagonal of the triangle it reads (a flag each), else None. LAPACK's eigenvalues of
    those are NaN and its eigenvectors NaN, all or some (or it reports failure, which makes
    the plan's results NaN); cuSOLVER's batched Jacobi solver gave NaN eigenvalues, the
    identity as eigenvectors and info 0 for [[1, inf], [inf, 2]]. So `run` marks them
    failed itself."""
    if call.routine not in EIGH_ROUTINES:
        return None
    _job, fill, n, matrix, lda = call.args[:5]
    count = call.args[-1] if call.routine.endswith("Batched") else 1
    parts = _parts(call.dtype)
    base, offset = locate(matrix)
    columns = base[offset : offset + count * n * lda * parts].reshape(count, n, lda, parts)
    row, column = xp.arange(lda)[None, :], xp.arange(n)[:, None]
    read = ((row > column) if fill == "lower" else (row < column)) & (row < n)
    return ((~xp.isfinite(columns).all(axis=3)) & read).any(axis=(1, 2))


def _failed(call: SolverCall, locate, flags, xp) -> None:
    """Writes info n + 1 (LAPACK's "did not converge") for the matrices `flags` marks, by a
    select rather than a masked store, which on a GPU waits for the device to count the
    marks."""
    base, offset = locate(call.args[8])
    infos = base[offset : offset + flags.shape[0]]
    infos[...] = xp.where(flags, call.args[2] + 1, infos)


# cuSOLVER's batched Jacobi eigensolver returned a Hermitian matrix's diagonal unchanged, as
# its eigenvalues, for [[t, t - i], [t + i, t]] with t = 4e-288 (eigenvalues +-1; zero
# diagonals were right). Its matrices are conditioned first (`_jacobi_conditioned`), and so
# are those of the batched solver of any size, which may choose Jacobi's method itself.
JACOBI_ROUTINES = ("syevjBatched", "heevjBatched")
CONDITIONED_ROUTINES = (*JACOBI_ROUTINES, "syevBatched")


def _jacobi_conditioned(call: SolverCall, locate, xp, make) -> None:
    """`make(call, locate)` for the batched Jacobi eigensolver, each matrix conditioned
    first: its entries (a complex one's parts) below eps^2 times its largest set to zero (a
    perturbation that moves no eigenvalue by more than a tiny fraction of a rounding of the
    largest), and, where the largest lies outside LAPACK's safe range [sqrt(tiny / eps), its
    inverse], the matrix scaled by the power of two that brings the largest to [1/2, 1)
    (exactly), its eigenvalues scaled back after, as LAPACK's own solvers scale such
    matrices. The eigenvectors are those of the conditioned matrix."""
    _job, _uplo, n, matrix, lda, values, *_rest, count = call.args
    real = np.finfo(call.dtype)  # (a complex dtype's parts')
    base, offset = locate(matrix)
    stack = base[offset : offset + count * lda * n * _parts(call.dtype)].reshape(count, -1)
    magnitudes = xp.abs(stack)
    largest = magnitudes.max(axis=1, keepdims=True)
    floor = xp.where(xp.isfinite(largest), largest * real.eps**2, 0)
    stack[...] = xp.where(magnitudes < floor, 0, stack)
    safe = float(np.sqrt(real.tiny / real.eps))
    _, exponent = xp.frexp(largest)
    shift = xp.where((largest < safe) | (largest > 1 / safe), -exponent, 0)
    ones = xp.ones(shift.shape, stack.dtype)
    stack *= xp.ldexp(ones, shift)
    make(call, locate)
    base, offset = locate(values)
    eigenvalues = base[offset : offset + count * n].reshape(count, n)
    eigenvalues *= xp.ldexp(ones, -shift)


# The largest LU factorization a stack makes with cuBLAS's batched routine, which is written
# for small matrices (XLA's bound); larger ones are a cuSOLVER call each.
BATCHED_LU_LIMIT = 128
# The largest matrices cuSOLVER's batched Jacobi eigensolver takes; larger ones go to its
# batched solver of any size (`syevBatched`, the 64-bit API's, for every element type).
BATCHED_EIGH_LIMIT = 32


def _batched(step: FortranCall) -> SolverCall | None:
    """A stack's calls as one call of a batched routine, as XLA makes them: Cholesky
    (cuSOLVER's potrfBatched), eigendecompositions (its Jacobi solver, syevjBatched, for
    small matrices; its solver of any size, syevBatched, for the others), LU of small square
    matrices and triangular solves (cuBLAS's getrfBatched and trsmBatched). A call per
    matrix costs a library call from Python each (tens of microseconds), more than a small
    matrix's work on a GPU. None where the step has no such form."""
    args, batch = step.args, step.batch
    if batch < 2:
        return None

    def stack(arg) -> Matrices:
        return Matrices(arg[0], arg[1], batch)

    def side_by_side(arg, count: int) -> Pointer | None:  # an int array, `count` a matrix
        return Pointer(arg[0], 0, True) if arg[1] == count else None

    if step.routine == "potrf":
        uplo, n, matrix, lda, info = args
        infos = side_by_side(info, 1)
        if infos is None:
            return None
        return SolverCall(
            "potrfBatched", step.dtype, (_FILL[uplo], n, stack(matrix), lda, infos, batch)
        )
    if step.routine == "getrf":
        m, n, matrix, lda, pivots, info = args
        pivots, infos = side_by_side(pivots, n), side_by_side(info, 1)
        if m != n or n > BATCHED_LU_LIMIT or pivots is None or infos is None:
            return None
        return SolverCall("getrfBatched", step.dtype, (n, stack(matrix), lda, pivots, infos, batch))
    if step.routine in ("syevd", "heevd"):
        job, uplo, n, (matrix, stride), lda, (values, apart), *_workspaces, info = args
        infos = side_by_side(info, 1)
        side_by_side_stack = stride == lda * n * _parts(step.dtype) and apart == n
        if not side_by_side_stack or infos is None:
            return None
        head = (_JOB[job], _FILL[uplo], n, Pointer(matrix, 0), lda, Pointer(values, 0))
        if n > BATCHED_EIGH_LIMIT:
            return SolverCall("syevBatched", step.dtype, (*head, WORK, LWORK, infos, batch))
        jacobi = f"{step.routine[:4]}jBatched"  # (syevjBatched, heevjBatched)
        return SolverCall(jacobi, step.dtype, (*head, WORK, LWORK, infos, JACOBI, batch))
    if step.routine == "trsm":
        side, uplo, trans, diag, m, n, _alpha, matrix, lda, b, ldb = args
        solves = (_SIDE[side], _FILL[uplo], trans, _DIAG[diag], m, n, ALPHA)
        operands = (stack(matrix), lda, stack(b), ldb, batch)
        return SolverCall("trsmBatched", step.dtype, solves + operands)
    return None


def each_matrix(call: SolverCall) -> list[SolverCall]:
    """A batched call as the calls of its matrices in turn (as the emulator makes it)."""
    routine, args = call.routine, call.args

    def at(matrices: Matrices, k: int) -> Pointer:
        return Pointer(matrices.buffer, k * matrices.stride)

    def nth(pointer: Pointer, k: int, count: int) -> Pointer:
        return Pointer(pointer.buffer, pointer.offset + k * count, pointer.narrow)

    calls = []
    for k in range(args[-1]):
        if routine == "potrfBatched":
            uplo, n, matrices, lda, info, _ = args
            each = ("potrf", (uplo, n, at(matrices, k), lda, WORK, LWORK, nth(info, k, 1)))
        elif routine == "getrfBatched":
            n, matrices, lda, pivots, info, _ = args
            each = ("getrf", (n, n, at(matrices, k), lda, WORK, nth(pivots, k, n), nth(info, k, 1)))
        elif routine in EIGH_ROUTINES:  # as the divide-and-conquer solver
            job, uplo, n, matrix, lda, values, work, lwork, info = args[:9]
            stride = lda * n * _parts(call.dtype)
            matrix, values = nth(matrix, k, stride), nth(values, k, n)
            solve = (job, uplo, n, matrix, lda, values, work, lwork, nth(info, k, 1))
            each = ("heevd" if _parts(call.dtype) == 2 else "syevd", solve)
        else:  # trsmBatched
            *flags, m, n, alpha, matrices, lda, b, ldb, _ = args
            each = ("trsm", (*flags, m, n, alpha, at(matrices, k), lda, at(b, k), ldb))
        calls.append(SolverCall(each[0], call.dtype, each[1]))
    return calls


def _parts(dtype: np.dtype) -> int:
    """Elements of a plan's buffer per matrix element: a complex matrix is held as parts."""
    return 2 if np.dtype(dtype).kind == "c" else 1


def _potrf(a, at):
    uplo, n, matrix, lda, info = a
    return (_FILL[uplo], n, at(matrix), lda, WORK, LWORK, at(info, True))


def _getrf(a, at):
    m, n, matrix, lda, pivots, info = a
    return (m, n, at(matrix), lda, WORK, at(pivots, True), at(info, True))


def _geqrf(a, at):
    m, n, matrix, lda, tau, _work, _lwork, info = a
    return (m, n, at(matrix), lda, at(tau), WORK, LWORK, at(info, True))


def _orgqr(a, at):
    m, n, k, matrix, lda, tau, _work, _lwork, info = a
    return (m, n, k, at(matrix), lda, at(tau), WORK, LWORK, at(info, True))


def _syevd(a, at):
    job, uplo, n, matrix, lda, values, *_workspaces, info = a
    return (_JOB[job], _FILL[uplo], n, at(matrix), lda, at(values), WORK, LWORK, at(info, True))


def _trsm(a, at):
    side, uplo, trans, diag, m, n, _alpha, matrix, lda, b, ldb = a
    return (_SIDE[side], _FILL[uplo], trans, _DIAG[diag], m, n, ALPHA, at(matrix), lda, at(b), ldb)


_TRANSLATIONS = {
    "potrf": _potrf,
    "getrf": _getrf,
    "geqrf": _geqrf,
    "orgqr": _orgqr,
    "ungqr": _orgqr,
    "syevd": _syevd,
    "heevd": _syevd,
    "trsm": _trsm,
}


# -- the host's LAPACK playing cuSOLVER (the emulator's) ---------------------------------------

_CHARACTERS = {
    "lower": "L",
    "upper": "U",
    "left": "L",
    "right": "R",
    "unit": "U",
    "non-unit": "N",
    "vector": "V",
    "novector": "N",
}


def emulated_call(call: SolverCall, locate) -> None:
    """Runs `call` as cuSOLVER would, with the host's LAPACK (`locate` as for `run`). Info
    and pivots go through int64 scratch into the int32 places cuSOLVER writes."""
    from funcgrad.backends.llvm import blas

    if call.routine.endswith("Batched"):
        for each in each_matrix(call):
            emulated_call(each, locate)
        return
    dtype = call.dtype
    widened = []

    def array(pointer: Pointer) -> np.ndarray:
        base, offset = locate(pointer)
        return base[offset:]

    def wide(pointer: Pointer, count: int):
        scratch = np.zeros(count, np.int64)
        widened.append((array(pointer)[:count], scratch))
        return (scratch, 0)

    args = [
        (array(a), 0) if isinstance(a, Pointer) and not a.narrow else _CHARACTERS.get(a, a)
        for a in call.args
    ]
    if call.routine == "potrf":
        uplo, n, matrix, lda, _, _, info = args
        lapack = [uplo, n, matrix, lda, wide(call.args[6], 1)]
    elif call.routine == "getrf":
        m, n, matrix, lda, _, _, _ = args
        pivots = wide(call.args[5], min(m, n))
        lapack = [m, n, matrix, lda, pivots, wide(call.args[6], 1)]
    elif call.routine in ("geqrf", "orgqr", "ungqr"):
        lapack = args[:-1] + [wide(call.args[-1], 1)]
    elif call.routine in ("syevd", "heevd"):
        workspaces = [RWORK, LRWORK] if call.routine == "heevd" else []
        lapack = args[:-1] + workspaces + [IWORK, LIWORK, wide(call.args[-1], 1)]
    else:  # trsm
        lapack = [1.0 if a == ALPHA else a for a in args]
    if WORK in lapack:
        lapack = _with_workspaces(call.routine, dtype, lapack)
    blas.call_lapack(call.routine, dtype, lapack, 1, lambda host: host.ctypes.data)
    for place, scratch in widened:
        place[...] = scratch


def _with_workspaces(routine: str, dtype: np.dtype, args: list) -> list:
    """LAPACK's arguments with workspaces of the sizes it asks for in place of the
    placeholders."""
    from funcgrad.backends.llvm import blas

    queried = blas.workspace_query(routine, dtype, args)
    sizes = {key: max(int(size), 1) for key, size in queried.items()}
    real = np.float64 if dtype in (np.float64, np.complex128) else np.float32
    workspaces = {
        WORK: (np.empty(sizes[LWORK], dtype), 0),
        IWORK: (np.empty(sizes.get(LIWORK, 1), np.int64), 0),
        RWORK: (np.empty(sizes.get(LRWORK, 1), real), 0),
    }
    return [workspaces.get(a, sizes.get(a, a)) if isinstance(a, str) else a for a in args]
