"""BFGS (Nocedal & Wright, Numerical Optimization, 2nd ed., Algorithm 6.1): a quasi-Newton
method keeping a dense estimate of the inverse Hessian, updated from each step and the change
of gradient it brought, with steps from the strong-Wolfe line search."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.scipy.optimize._line_search import line_search, stalled_at_a_minimum
from funcgrad.transforms.autodiff import value_and_grad

_HIGHEST = lax.Precision.HIGHEST


class BFGSResults(NamedTuple):
    converged: Array
    failed: Array
    k: Array
    nfev: Array
    ngev: Array
    x_k: Array
    f_k: Array
    g_k: Array
    H_k: Array
    old_old_fval: Array
    status: Array
    line_search_status: Array


def minimize_bfgs(
    fun: Callable,
    x0,
    maxiter: int | None = None,
    norm=np.inf,
    gtol: float = 1e-5,
    line_search_maxiter: int = 10,
) -> BFGSResults:
    """Minimize fun from x0 until ‖∇fun‖ (in `norm`) < gtol, the line search fails or maxiter
    iterations (default 200 per variable) have run. status: 0 converged, 1 out of iterations,
    2 + the line search's status when it failed. A failed line search where the gradient is
    as small as x's dtype resolves (`stalled_at_a_minimum`) counts as converged."""
    if maxiter is None:
        maxiter = 200 * x0.shape[0]
    f0, g0 = value_and_grad(fun)(x0)
    f0, g0 = f0.astype(x0.dtype), g0.astype(x0.dtype)
    state = BFGSResults(
        converged=fnp.linalg.norm(g0, ord=norm) < gtol,
        failed=fnp.asarray(False),
        k=fnp.asarray(0),
        nfev=fnp.asarray(1),
        ngev=fnp.asarray(1),
        x_k=x0,
        f_k=f0,
        g_k=g0,
        H_k=fnp.eye(x0.shape[0], dtype=x0.dtype),
        # So that the first line search starts from a step of about ‖g0‖ / 2 in f's units.
        old_old_fval=f0 + fnp.linalg.norm(g0) / 2,
        status=fnp.asarray(0),
        line_search_status=fnp.asarray(0),
    )

    def running(state: BFGSResults) -> Array:
        return ~state.converged & ~state.failed & (state.k < maxiter)

    def iterate(state: BFGSResults) -> BFGSResults:
        direction = -fnp.matmul(state.H_k, state.g_k, precision=_HIGHEST)
        search = line_search(
            fun,
            state.x_k,
            direction,
            old_fval=state.f_k,
            old_old_fval=state.old_old_fval,
            gfk=state.g_k,
            maxiter=line_search_maxiter,
        )
        s = search.a_k * direction
        y = search.g_k - state.g_k
        rho = 1 / fnp.dot(y, s, precision=_HIGHEST)
        # H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T, skipped where y·s vanishes.
        Hy = fnp.matmul(state.H_k, y, precision=_HIGHEST)
        yHy = fnp.dot(y, Hy, precision=_HIGHEST)
        H = (
            state.H_k
            - rho * (fnp.outer(Hy, s) + fnp.outer(s, Hy))
            + (rho * rho * yHy + rho) * fnp.outer(s, s)
        )
        H = fnp.where(fnp.isfinite(rho), H, state.H_k)
        at_minimum = search.failed & stalled_at_a_minimum(state.f_k, search.f_k, search.g_k, norm)
        return BFGSResults(
            converged=(fnp.linalg.norm(search.g_k, ord=norm) < gtol) | at_minimum,
            failed=search.failed & ~at_minimum,
            k=state.k + 1,
            nfev=state.nfev + search.nfev,
            ngev=state.ngev + search.ngev,
            x_k=state.x_k + s,
            f_k=search.f_k,
            g_k=search.g_k,
            H_k=H,
            old_old_fval=state.f_k,
            status=state.status,
            line_search_status=search.status,
        )

    state = lax.while_loop(running, iterate, state)
    status = fnp.where(
        state.converged,
        0,
        fnp.where(state.failed, 2 + state.line_search_status, fnp.where(state.k >= maxiter, 1, -1)),
    )
    return state._replace(status=status)
