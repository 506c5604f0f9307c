"""L-BFGS (Nocedal & Wright, Numerical Optimization, 2nd ed., Algorithms 7.4 and 7.5): BFGS
whose inverse Hessian is never formed, only applied, from the last `maxcor` steps and
gradient changes, with steps from the strong-Wolfe line search."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.scipy.optimize._line_search import line_search, stalled_at_a_minimum
from funcgrad.transforms.autodiff import value_and_grad

_HIGHEST = lax.Precision.HIGHEST


class LBFGSResults(NamedTuple):
    converged: Array
    failed: Array
    k: Array
    nfev: Array
    ngev: Array
    x_k: Array
    f_k: Array
    g_k: Array
    s_history: Array
    y_history: Array
    rho_history: Array
    gamma: Array
    status: Array
    ls_status: Array


def _inverse_hessian_times(g, state: LBFGSResults) -> Array:
    """H g by the two-loop recursion, H the inverse Hessian estimate of the stored pairs (the
    oldest first) over gamma times the identity. A pair with rho 0 (an empty slot, or one whose
    curvature was not positive) changes nothing."""

    def newest_first(q, pair):
        s, y, rho = pair
        alpha = rho * fnp.dot(s, q, precision=_HIGHEST)
        return q - alpha * y, alpha

    q, alphas = lax.scan(
        newest_first,
        g,
        (state.s_history, state.y_history, state.rho_history),
        reverse=True,
    )

    def oldest_first(r, pair):
        s, y, rho, alpha = pair
        beta = rho * fnp.dot(y, r, precision=_HIGHEST)
        return r + (alpha - beta) * s, None

    r, _ = lax.scan(
        oldest_first,
        state.gamma * q,
        (state.s_history, state.y_history, state.rho_history, alphas),
    )
    return r


def _push(history, new) -> Array:
    return fnp.concatenate([history[1:], new[None]])


def minimize_lbfgs(
    fun: Callable,
    x0,
    maxiter: float | None = None,
    norm=np.inf,
    maxcor: int = 10,
    ftol: float = 2.220446049250313e-09,
    gtol: float = 1e-5,
    maxfun: float | None = None,
    maxgrad: float | None = None,
    maxls: int = 20,
) -> LBFGSResults:
    """Minimize fun from x0 until ‖∇fun‖ (in `norm`) < gtol. It also stops, unsuccessfully,
    with status 1 after maxiter iterations (default 200 per variable when no limit is given),
    2 after maxfun evaluations of fun, 3 after maxgrad of its gradient, 4 when a step lowers
    fun by less than ftol relative to max(|f|, 1), and 5 when the line search fails. Those
    last two count as converged where the gradient is as small as x's dtype resolves
    (`stalled_at_a_minimum`)."""
    d = x0.shape[0]
    if maxiter is None and maxfun is None and maxgrad is None:
        maxiter = 200 * d
    maxiter, maxfun, maxgrad = (math.inf if m is None else m for m in (maxiter, maxfun, maxgrad))
    f0, g0 = value_and_grad(fun)(x0)
    f0, g0 = f0.astype(x0.dtype), g0.astype(x0.dtype)
    state = LBFGSResults(
        converged=fnp.linalg.norm(g0, ord=norm) < gtol,
        failed=fnp.asarray(False),
        k=fnp.asarray(0),
        nfev=fnp.asarray(1),
        ngev=fnp.asarray(1),
        x_k=x0,
        f_k=f0,
        g_k=g0,
        s_history=fnp.zeros((maxcor, d), x0.dtype),
        y_history=fnp.zeros((maxcor, d), x0.dtype),
        rho_history=fnp.zeros((maxcor,), x0.dtype),
        gamma=fnp.ones((), x0.dtype),
        status=fnp.asarray(0),
        ls_status=fnp.asarray(0),
    )

    def running(state: LBFGSResults) -> Array:
        return ~state.converged & ~state.failed

    def iterate(state: LBFGSResults) -> LBFGSResults:
        direction = -_inverse_hessian_times(state.g_k, state)
        search = line_search(
            fun, state.x_k, direction, old_fval=state.f_k, gfk=state.g_k, maxiter=maxls
        )
        s = search.a_k * direction
        y = search.g_k - state.g_k
        curvature = fnp.dot(y, s, precision=_HIGHEST)
        positive = curvature > 0
        rho = fnp.where(positive, 1 / fnp.where(positive, curvature, 1), 0)
        gamma = fnp.where(positive, curvature / fnp.dot(y, y, precision=_HIGHEST), state.gamma)
        k, nfev, ngev = state.k + 1, state.nfev + search.nfev, state.ngev + search.ngev
        decrease = (state.f_k - search.f_k) / fnp.maximum(
            fnp.maximum(fnp.abs(state.f_k), fnp.abs(search.f_k)), 1
        )
        status = fnp.where(decrease <= ftol, 4, 0)
        status = fnp.where(ngev >= maxgrad, 3, status)
        status = fnp.where(nfev >= maxfun, 2, status)
        status = fnp.where(k >= maxiter, 1, status)
        status = fnp.where(search.failed, 5, status)
        stalled = (decrease <= ftol) | search.failed
        at_minimum = stalled & stalled_at_a_minimum(state.f_k, search.f_k, search.g_k, norm)
        converged = (fnp.linalg.norm(search.g_k, ord=norm) < gtol) | at_minimum
        return LBFGSResults(
            converged=converged,
            failed=(status > 0) & ~converged,
            k=k,
            nfev=nfev,
            ngev=ngev,
            x_k=state.x_k + s,
            f_k=search.f_k,
            g_k=search.g_k,
            s_history=_push(state.s_history, s),
            y_history=_push(state.y_history, y),
            rho_history=_push(state.rho_history, rho),
            gamma=gamma,
            status=fnp.where(converged, 0, status),
            ls_status=search.status,
        )

    return lax.while_loop(running, iterate, state)
