"""minimize: SciPy's entry point to the unconstrained minimizers, over funcgrad arrays."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from funcgrad import dtypes
from funcgrad.array import Array
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.scipy.optimize._bfgs import minimize_bfgs
from funcgrad.scipy.optimize._lbfgs import minimize_lbfgs


class OptimizeResults(NamedTuple):
    """x: the solution found; success: whether the gradient got below its tolerance without a
    failure, or the search stalled where the gradient is as small as x's dtype resolves
    (`stalled_at_a_minimum`); status: the method's code (0 converged; BFGS: 1 out of
    iterations, 3 narrowing the line search failed, 5 out of line-search iterations; L-BFGS:
    see its options); fun, jac: the objective and its gradient at x; hess_inv: the inverse
    Hessian estimate (None for L-BFGS); nfev, njev: evaluations of the objective and of its
    gradient; nit: the method's iterations."""

    x: Array
    success: Array
    status: Array
    fun: Array
    jac: Array
    hess_inv: Array | None
    nfev: Array
    njev: Array
    nit: Array


_METHODS = {
    "bfgs": (minimize_bfgs, {"maxiter", "norm", "gtol", "line_search_maxiter"}),
    "l-bfgs-experimental-do-not-rely-on-this": (
        minimize_lbfgs,
        {"maxiter", "norm", "maxcor", "ftol", "gtol", "maxfun", "maxgrad", "maxls"},
    ),
}


def minimize(
    fun: Callable,
    x0,
    args: tuple = (),
    *,
    method: str,
    tol: float | None = None,
    options: Mapping[str, Any] | None = None,
) -> OptimizeResults:
    """Minimize fun(x, *args) over a vector x from x0, with gradients by reverse mode.

    method is "BFGS" or "l-bfgs-experimental-do-not-rely-on-this". tol, when given, is the
    gradient tolerance (the `gtol` option) unless options set one. options are the method's:
    BFGS takes maxiter, norm (of the gradient, for the convergence test; default inf), gtol
    (default 1e-5) and line_search_maxiter; L-BFGS takes maxiter, norm, maxcor (pairs kept),
    ftol, gtol, maxfun, maxgrad and maxls. The loops are lax.while_loop, so minimize jits and
    vmaps (over x0 or args); the result is not differentiable.
    """
    if not isinstance(args, tuple):
        raise TypeError(f"minimize: args must be a tuple, got {type(args).__name__}")
    key = method.lower()
    if key not in _METHODS:
        raise ValueError(
            f"minimize: method must be 'BFGS' or 'l-bfgs-experimental-do-not-rely-on-this', "
            f"got {method!r}"
        )
    solver, known = _METHODS[key]
    options = dict(options or {})
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"minimize: unknown options {unknown} for method {method!r}; it takes {sorted(known)}"
        )
    if tol is not None:
        options.setdefault("gtol", tol)
    (x0,) = promote_dtypes_inexact(x0)
    if x0.ndim != 1:
        raise ValueError(f"minimize: x0 must be a vector, got shape {x0.shape}")
    if dtypes.is_complex(x0.dtype):
        raise TypeError(f"minimize: x0 must be real, got {x0.dtype}")

    def objective(x):
        return fun(x, *args)

    results = solver(objective, x0, **options)
    return OptimizeResults(
        x=results.x_k,
        success=results.converged & ~results.failed,
        status=results.status,
        fun=results.f_k,
        jac=results.g_k,
        hess_inv=getattr(results, "H_k", None),
        nfev=results.nfev,
        njev=results.ngev,
        nit=results.k,
    )
