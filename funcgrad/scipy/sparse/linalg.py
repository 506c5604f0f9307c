"""funcgrad.scipy.sparse.linalg: Krylov solvers for A x = b, with SciPy's names.

A is a square matrix or a function computing A x; b (and x0, and what A and the
preconditioner M take and return) may be any pytree of arrays. The iterations run on the
leaves raveled into one vector, in lax.while_loop, so the solvers work under jit and vmap.

Derivatives never go through the iterations: each solver is wrapped in
lax.custom_linear_solve, so x' solves A x' = b' - A' x with the same solver, and reverse mode
solves the transposed system (A itself for cg, whose A is symmetric).

As in SciPy's signatures the second result is `info`; it is None, since a compiled loop cannot
report its exit state through a Python value.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from funcgrad import dtypes, lax, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.flatten_util import ravel_pytree
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.scipy.linalg import solve_triangular

__all__ = ["bicgstab", "cg", "gmres"]

_HIGHEST = lax.Precision.HIGHEST


def _as_linear_function(A, name: str) -> Callable:
    if callable(A):
        return A
    if hasattr(A, "shape") and hasattr(A, "dtype"):
        matrix = fnp.asarray(A)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(
                f"{name}: A must be a square matrix or a function, got shape {matrix.shape}"
            )
        return partial(fnp.matmul, matrix, precision=_HIGHEST)
    raise TypeError(f"{name}: A must be a square matrix or a function, got {type(A).__name__}")


def _identity(x):
    return x


def _on_vectors(function: Callable, unravel: Callable, dtype) -> Callable:
    """function (pytree -> pytree) as a function of raveled vectors."""

    def on_vector(v):
        flat, _ = ravel_pytree(function(unravel(v)))
        return flat.astype(dtype)

    return on_vector


def _dot(a, b) -> Array:
    return fnp.vdot(a, b, precision=_HIGHEST)


def _squared_norm(v) -> Array:
    return fnp.real(_dot(v, v))


def _isolve(name: str, method: Callable, A, b, x0, tol, atol, maxiter, M, symmetric: bool):
    """x from `method(matvec, b, x0, ...)` on raveled vectors, inside custom_linear_solve."""
    matvec = _as_linear_function(A, name)
    preconditioner = _identity if M is None else _as_linear_function(M, name)
    b = tree_util.tree_map(fnp.asarray, b)
    if x0 is None:
        x0 = tree_util.tree_map(fnp.zeros_like, b)
    b_tree, x0_tree = tree_util.tree_structure(b), tree_util.tree_structure(x0)
    if b_tree != x0_tree:
        raise ValueError(f"{name}: x0 and b must have one structure, got {x0_tree} and {b_tree}")
    pairs = [
        promote_dtypes_inexact(b_leaf, x0_leaf)
        for b_leaf, x0_leaf in zip(tree_util.tree_leaves(b), tree_util.tree_leaves(x0))
    ]
    for b_leaf, x0_leaf in pairs:
        if b_leaf.shape != x0_leaf.shape:
            raise ValueError(
                f"{name}: x0 and b must have the same shapes, got {x0_leaf.shape} and "
                f"{b_leaf.shape}"
            )
    b = tree_util.tree_unflatten(b_tree, [b_leaf for b_leaf, _ in pairs])
    x0 = tree_util.tree_unflatten(b_tree, [x0_leaf for _, x0_leaf in pairs])
    size = sum(leaf.size for leaf in tree_util.tree_leaves(b))
    if maxiter is None:
        maxiter = 10 * size

    def solve(matvec, b):
        flat_b, unravel = ravel_pytree(b)
        flat_x0, _ = ravel_pytree(x0)
        x = method(
            _on_vectors(matvec, unravel, flat_b.dtype),
            flat_b,
            flat_x0.astype(flat_b.dtype),
            tol=tol,
            atol=atol,
            maxiter=maxiter,
            M=_on_vectors(preconditioner, unravel, flat_b.dtype),
        )
        return unravel(x)

    real = all(not dtypes.is_complex(leaf.dtype) for leaf in tree_util.tree_leaves(b))
    x = lax.custom_linear_solve(
        matvec, b, solve=solve, transpose_solve=solve, symmetric=symmetric and real
    )
    return x, None


def _tolerance(b, tol, atol) -> Array:
    """The squared residual norm to reach: max(tol ‖b‖, atol)², and at least the smallest
    normal number. Below it the residual is zero as far as the arithmetic goes; run on (tol
    and atol 0), the recursive residual shrank into subnormal numbers, whose quotients
    overflow eagerly (as NumPy's complex division does) and gave NaN."""
    smallest_normal = dtypes.finfo(dtypes.real_dtype(b.dtype)).tiny
    return fnp.maximum(fnp.maximum(tol**2 * _squared_norm(b), atol**2), smallest_normal)


def _cg(A, b, x0, *, tol, atol, maxiter, M):
    """Preconditioned conjugate gradients (Nocedal & Wright, Algorithm 5.3)."""
    target = _tolerance(b, tol, atol)
    r = b - A(x0)
    z = M(r)
    rz = _dot(r, z)

    def unconverged(state):
        k, _, r, _, _, _ = state
        return (_squared_norm(r) > target) & (k < maxiter)

    def iterate(state):
        k, x, r, p, z, rz = state
        Ap = A(p)
        alpha = rz / _dot(p, Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        z = M(r)
        rz_next = _dot(r, z)
        p = z + (rz_next / rz) * p
        return k + 1, x, r, p, z, rz_next

    _, x, *_ = lax.while_loop(unconverged, iterate, (0, x0, r, z, z, rz))
    return x


def _bicgstab(A, b, x0, *, tol, atol, maxiter, M):
    """Preconditioned BiCGSTAB (van der Vorst, 1992). It stops early when a step divides by
    zero (rho or omega vanishing), returning the last iterate."""
    target = _tolerance(b, tol, atol)
    r0 = b - A(x0)
    one = fnp.ones((), b.dtype)
    zeros = fnp.zeros_like(b)

    def unconverged(state):
        k, _, r, *_, broke_down = state
        return (_squared_norm(r) > target) & (k < maxiter) & ~broke_down

    def iterate(state):
        k, x, r, p, v, rho_prev, alpha, omega, _ = state
        rho = _dot(r0, r)
        beta = (rho / rho_prev) * (alpha / omega)
        p = r + beta * (p - omega * v)
        p_hat = M(p)
        v = A(p_hat)
        alpha = rho / _dot(r0, v)
        s = r - alpha * v
        s_small = _squared_norm(s) <= target
        s_hat = M(s)
        t = A(s_hat)
        omega = _dot(t, s) / _dot(t, t)
        omega = fnp.where(s_small, one, omega)
        x = x + alpha * p_hat + fnp.where(s_small, 0, omega) * s_hat
        r = fnp.where(s_small, s, s - omega * t)
        broke_down = (rho == 0) | (omega == 0) | ~fnp.isfinite(alpha)
        return k + 1, x, r, p, v, rho, alpha, omega, broke_down

    state = (0, x0, r0, zeros, zeros, one, one, one, fnp.asarray(False))
    _, x, *_ = lax.while_loop(unconverged, iterate, state)
    return x


def cg(A, b, x0=None, *, tol: float = 1e-5, atol: float = 0.0, maxiter=None, M=None):
    """Solve A x = b for a symmetric (Hermitian) positive definite A by conjugate gradients.

    Stops when ‖b - A x‖ <= max(tol ‖b‖, atol) or after maxiter iterations (default 10 times
    the size of b). M approximates A's inverse (a preconditioner). Returns (x, None).
    """
    return _isolve("cg", _cg, A, b, x0, tol, atol, maxiter, M, symmetric=True)


def bicgstab(A, b, x0=None, *, tol: float = 1e-5, atol: float = 0.0, maxiter=None, M=None):
    """Solve A x = b for a general square A by the stabilized biconjugate gradient method.

    Stops when ‖b - A x‖ <= max(tol ‖b‖, atol) or after maxiter iterations (default 10 times
    the size of b). M approximates A's inverse (a preconditioner). Returns (x, None).
    """
    return _isolve("bicgstab", _bicgstab, A, b, x0, tol, atol, maxiter, M, symmetric=False)


def _safe_normalize(v, tiny) -> tuple[Array, Array]:
    """(v / ‖v‖, ‖v‖), and a zero vector where ‖v‖ is too small to divide by."""
    norm = fnp.sqrt(_squared_norm(v))
    return fnp.where(norm > tiny, v / fnp.where(norm > tiny, norm, 1), 0), norm


def _arnoldi_step(A, M, basis, j, tiny):
    """The next Krylov vector M A basis[j], orthogonalized against the basis built so far by
    classical Gram–Schmidt applied twice (rows of `basis` past j are still zero, so they add
    nothing). Returns the basis with the new row j + 1 and the new Hessenberg column."""
    w = M(A(basis[j]))
    column = fnp.matmul(fnp.conj(basis), w, precision=_HIGHEST)
    w = w - fnp.matmul(basis.T, column, precision=_HIGHEST)
    correction = fnp.matmul(fnp.conj(basis), w, precision=_HIGHEST)
    w = w - fnp.matmul(basis.T, correction, precision=_HIGHEST)
    w, w_norm = _safe_normalize(w, tiny)
    column = (column + correction).at[j + 1].set(w_norm.astype(column.dtype))
    return basis.at[j + 1].set(w), column


def _givens(a, b) -> tuple[Array, Array]:
    """(c, s) with [[conj(c), conj(s)], [-s, c]] @ [a, b] = [r, 0] (c real)."""
    r = fnp.sqrt(fnp.real(a * fnp.conj(a)) + fnp.real(b * fnp.conj(b)))
    safe_r = fnp.where(r == 0, 1, r)
    c = fnp.where(r == 0, 1, fnp.abs(a) / safe_r)
    phase = fnp.where(fnp.abs(a) == 0, 1, a / fnp.where(fnp.abs(a) == 0, 1, fnp.abs(a)))
    s = fnp.where(r == 0, 0, fnp.conj(phase) * b / safe_r)
    return c.astype(a.dtype), s


def _cycle_incremental(A, M, r, r_norm, restart, ptol, tiny):
    """One GMRES cycle that rotates each new Hessenberg column to triangular form as it comes
    (Givens rotations), so the residual is known at every step and the cycle stops as soon as
    it is small enough. Returns the correction to x."""
    n, dtype = r.shape[0], r.dtype
    basis = fnp.zeros((restart + 1, n), dtype).at[0].set(r / r_norm)
    triangle = fnp.zeros((restart + 1, restart), dtype)
    cosines = fnp.zeros((restart,), dtype)
    sines = fnp.zeros((restart,), dtype)
    rhs = fnp.zeros((restart + 1,), dtype).at[0].set(r_norm.astype(dtype))

    def unfinished(state):
        j, *_, rhs = state
        return (j < restart) & (fnp.abs(rhs[j]) > ptol)

    def step(state):
        j, basis, triangle, cosines, sines, rhs = state
        basis, column = _arnoldi_step(A, M, basis, j, tiny)

        def rotate(i, column):
            c, s = cosines[i], sines[i]
            top, bottom = column[i], column[i + 1]
            rotated_top = fnp.conj(c) * top + fnp.conj(s) * bottom
            return column.at[i].set(rotated_top).at[i + 1].set(-s * top + c * bottom)

        column = lax.fori_loop(0, j, rotate, column)
        c, s = _givens(column[j], column[j + 1])
        column = column.at[j].set(fnp.conj(c) * column[j] + fnp.conj(s) * column[j + 1])
        column = column.at[j + 1].set(0)
        rhs = rhs.at[j + 1].set(-s * rhs[j]).at[j].set(fnp.conj(c) * rhs[j])
        triangle = triangle.at[:, j].set(column)
        return j + 1, basis, triangle, cosines.at[j].set(c), sines.at[j].set(s), rhs

    state = (0, basis, triangle, cosines, sines, rhs)
    steps, basis, triangle, _, _, rhs = lax.while_loop(unfinished, step, state)
    # Columns past the last step solve as identity rows against zeros, so they add nothing.
    used = fnp.arange(restart) < steps
    square = triangle[:restart]
    square = fnp.where(used[None, :], square, fnp.eye(restart, dtype=dtype))
    y = solve_triangular(square, fnp.where(used, rhs[:restart], 0), lower=False)
    return fnp.matmul(basis[:restart].T, y, precision=_HIGHEST)


def _cycle_batched(A, M, r, r_norm, restart, ptol, tiny):
    """One GMRES cycle that builds the whole Krylov basis first and then solves its small
    least-squares problem at once. Returns the correction to x."""
    n, dtype = r.shape[0], r.dtype
    basis = fnp.zeros((restart + 1, n), dtype).at[0].set(r / r_norm)
    hessenberg = fnp.zeros((restart + 1, restart), dtype)

    def step(j, state):
        basis, hessenberg = state
        basis, column = _arnoldi_step(A, M, basis, j, tiny)
        return basis, hessenberg.at[:, j].set(column)

    basis, hessenberg = lax.fori_loop(0, restart, step, (basis, hessenberg))
    rhs = fnp.zeros((restart + 1,), dtype).at[0].set(r_norm.astype(dtype))
    y = fnp.linalg.lstsq(hessenberg, rhs)[0]
    return fnp.matmul(basis[:restart].T, y, precision=_HIGHEST)


def _gmres(A, b, x0, *, tol, atol, maxiter, M, restart, cycle):
    """GMRES restarted every `restart` steps, on the left-preconditioned system M A x = M b.

    The preconditioned residual is what the cycles can see; it is asked to shrink by the
    factor that brings the true residual to max(tol ‖b‖, atol)."""
    tiny = dtypes.finfo(b.dtype).tiny ** 0.5
    b_norm = fnp.sqrt(_squared_norm(b))
    target = fnp.maximum(tol * b_norm, atol)
    ptol = fnp.sqrt(_squared_norm(M(b))) * fnp.minimum(
        1.0, target / fnp.where(b_norm > 0, b_norm, 1)
    )

    def residual(x):
        r = M(b - A(x))
        return r, fnp.sqrt(_squared_norm(r))

    def unconverged(state):
        k, _, _, r_norm = state
        return (k < maxiter) & (r_norm > ptol)

    def restart_cycle(state):
        k, x, r, r_norm = state
        x = x + cycle(A, M, r, r_norm, restart, ptol, tiny)
        return (k + 1, x, *residual(x))

    _, x, *_ = lax.while_loop(unconverged, restart_cycle, (0, x0, *residual(x0)))
    return x


def gmres(
    A,
    b,
    x0=None,
    *,
    tol: float = 1e-5,
    atol: float = 0.0,
    restart: int = 20,
    maxiter=None,
    M=None,
    solve_method: str = "batched",
):
    """Solve A x = b for a general square A by GMRES, restarted every `restart` steps.

    Stops when the preconditioned residual ‖M (b - A x)‖ has shrunk as far as
    max(tol ‖b‖, atol) asks of ‖b - A x‖, or after maxiter restarts (default 10 times the
    size of b). M approximates A's inverse (a left preconditioner). solve_method "batched"
    builds each cycle's whole Krylov basis before solving its least-squares problem (fewer,
    larger operations); "incremental" solves it step by step and stops a cycle early once
    the residual is small enough (fewer products with A). Returns (x, None).
    """
    cycles = {"batched": _cycle_batched, "incremental": _cycle_incremental}
    if solve_method not in cycles:
        raise ValueError(
            f"gmres: solve_method must be 'batched' or 'incremental', got {solve_method!r}"
        )
    size = sum(fnp.size(leaf) for leaf in tree_util.tree_leaves(b))
    restart = min(restart, size)
    if restart < 1:
        raise ValueError(f"gmres: restart must be at least 1, got {restart}")
    method = partial(_gmres, restart=restart, cycle=cycles[solve_method])
    return _isolve("gmres", method, A, b, x0, tol, atol, maxiter, M, symmetric=False)
