"""A line search for a step satisfying the strong Wolfe conditions (Nocedal & Wright, Numerical
Optimization, 2nd ed., Algorithms 3.5 and 3.6), written as two while loops so that it jits and
vmaps: the first grows the step until it brackets an acceptable one, the second narrows the
bracket by safeguarded cubic interpolation."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.transforms.autodiff import value_and_grad

# The narrowing phase gives up after this many trials; each one cuts the bracket by at least a
# tenth, so more would only chase round-off.
_ZOOM_MAXITER = 30


class LineSearchResults(NamedTuple):
    """failed: no step met both Wolfe conditions (the step returned is then the one with the
    lowest value found that meets the first, possibly 0). nit: trials of the growing phase;
    nfev, ngev: evaluations of f and of its gradient; k: nit + 1; a_k: the step; f_k and g_k:
    f and its gradient at xk + a_k pk; status: 0 found, 1 narrowing failed, 3 out of
    iterations while growing."""

    failed: Array
    nit: Array
    nfev: Array
    ngev: Array
    k: Array
    a_k: Array
    f_k: Array
    g_k: Array
    status: Array


def stalled_at_a_minimum(f_before, f, g, norm) -> Array:
    """Whether a search that can lower f no further (its line search found no step, or a
    step's decrease fell below ftol) stands at a minimum as far as f's dtype resolves one:
    ‖g‖ (in `norm`) within sqrt(eps) max(|f|, 1), and the last step lowered f from `f_before`
    by no more than that. A gradient's own rounding is of that order there: float32's
    Rosenbrock, at (1, 1, 1, 1) to 3e-6, has gradients of 1e-4 (the terms 400 x (x² - y)
    round to 2e-5 each), so the default gtol of 1e-5 is out of float32's reach, and such
    searches stopped with success False. A line search that gave out after lowering f far
    has not stalled: on an unbounded objective (-sum(x)) |f| grows until any gradient is
    within the bound."""
    eps = fnp.finfo(g.dtype).eps
    bound = fnp.sqrt(eps) * fnp.maximum(fnp.abs(f), 1)
    return (fnp.linalg.norm(g, ord=norm) <= bound) & (f_before - f <= bound)


class _Point(NamedTuple):
    """A trial step with f, its slope along the search direction, and its gradient there."""

    a: Array
    phi: Array
    dphi: Array
    g: Array


def _select(pred, on_true: _Point, on_false: _Point) -> _Point:
    return _Point(*(fnp.where(pred, t, f) for t, f in zip(on_true, on_false)))


def cubic_minimizer(a, phi_a, dphi_a, b, phi_b, dphi_b) -> Array:
    """The local minimizer of the cubic matching phi and its slope dphi at a and at b (N&W eq.
    3.59), NaN where that cubic has none. Shared by the line searches that interpolate between
    two trial steps; each keeps its own safeguard against points too close to an end."""
    d1 = dphi_a + dphi_b - 3 * (phi_a - phi_b) / (a - b)
    radicand = d1 * d1 - dphi_a * dphi_b
    d2 = fnp.sign(b - a) * fnp.sqrt(fnp.maximum(radicand, 0))
    step = b - (b - a) * (dphi_b + d2 - d1) / (dphi_b - dphi_a + 2 * d2)
    return fnp.where(radicand >= 0, step, fnp.nan)


def _cubic_minimizer(lo: _Point, hi: _Point) -> Array:
    """`cubic_minimizer` between lo and hi, or the midpoint where that is undefined or too close
    to an end to make progress."""
    a = cubic_minimizer(lo.a, lo.phi, lo.dphi, hi.a, hi.phi, hi.dphi)
    left, right = fnp.minimum(lo.a, hi.a), fnp.maximum(lo.a, hi.a)
    margin = 0.1 * (right - left)
    usable = fnp.isfinite(a) & (a > left + margin) & (a < right - margin)
    return fnp.where(usable, a, (lo.a + hi.a) / 2)


def line_search(
    f: Callable,
    xk,
    pk,
    old_fval=None,
    old_old_fval=None,
    gfk=None,
    c1: float = 1e-4,
    c2: float = 0.9,
    maxiter: int = 20,
) -> LineSearchResults:
    """A step a along the descent direction pk from xk with
    f(xk + a pk) <= f(xk) + c1 a ∇f(xk)·pk and |∇f(xk + a pk)·pk| <= c2 |∇f(xk)·pk|.

    old_fval and gfk are f and its gradient at xk when already known; old_old_fval, f at the
    previous iterate, sizes the first trial step as a quasi-Newton method expects (at most 1).
    maxiter bounds the trials that grow the step (doubling it) before an acceptable one is
    bracketed.
    """
    xk, pk = promote_dtypes_inexact(xk, pk)
    value_and_gradient = value_and_grad(f)

    def evaluate(a) -> _Point:
        a = fnp.asarray(a, pk.dtype)
        phi, g = value_and_gradient(xk + a * pk)
        return _Point(a, fnp.asarray(phi, pk.dtype), fnp.real(fnp.vdot(g, pk)), g)

    if old_fval is None or gfk is None:
        start, evaluations = evaluate(0.0), 1
    else:
        gfk = fnp.asarray(gfk, pk.dtype)
        phi0 = fnp.asarray(old_fval, pk.dtype)
        slope = fnp.real(fnp.vdot(gfk, pk))
        start, evaluations = _Point(fnp.zeros((), pk.dtype), phi0, slope, gfk), 0
    first_step = fnp.ones((), pk.dtype)
    if old_old_fval is not None:
        guess = 1.01 * 2 * (start.phi - old_old_fval) / start.dphi
        first_step = fnp.where((guess > 0) & (guess < 1), guess, first_step).astype(pk.dtype)

    def sufficient_decrease(point: _Point) -> Array:
        return point.phi <= start.phi + c1 * point.a * start.dphi

    def curvature(point: _Point) -> Array:
        return fnp.abs(point.dphi) <= -c2 * start.dphi

    # Growing: prev is the last trial; until a bracket is found, every trial had sufficient
    # decrease and a lower value than the one before.
    def growing(state):
        i, done, bracketed, *_ = state
        return ~done & ~bracketed & (i <= maxiter)

    def grow(state):
        i, _, _, a, prev, _, _ = state
        trial = evaluate(a)
        too_far = ~sufficient_decrease(trial) | ((i > 1) & (trial.phi >= prev.phi))
        found = ~too_far & curvature(trial)
        uphill = ~too_far & ~found & (trial.dphi >= 0)
        # [prev, trial] brackets a step when the trial went too far; [trial, prev] when the
        # slope turned (lo keeps the lower value).
        lo = _select(too_far, prev, trial)
        hi = _select(too_far, trial, prev)
        return i + 1, found, too_far | uphill, 2 * a, trial, lo, hi

    state = (1, fnp.asarray(False), fnp.asarray(False), first_step, start, start, start)
    i, done, bracketed, _, last, lo, hi = lax.while_loop(growing, grow, state)
    growing_trials = i - 1

    def narrowing(state):
        j, done, failed, *_ = state
        return bracketed & ~done & ~failed

    def narrow(state):
        j, _, _, lo, hi = state
        trial = evaluate(_cubic_minimizer(lo, hi))
        to_hi = ~sufficient_decrease(trial) | (trial.phi >= lo.phi)
        found = ~to_hi & curvature(trial)
        flip = ~to_hi & ~found & (trial.dphi * (hi.a - lo.a) >= 0)
        hi = _select(to_hi, trial, _select(flip, lo, hi))
        lo = _select(to_hi, lo, trial)
        width = fnp.abs(hi.a - lo.a)
        stuck = width <= dtypes.finfo(width.dtype).eps * fnp.maximum(lo.a, hi.a)
        failed = ~found & ((j + 1 >= _ZOOM_MAXITER) | stuck)
        return j + 1, found, failed, lo, hi

    state = (0, done, fnp.asarray(False), lo, hi)
    zoom_trials, done, zoom_failed, lo, hi = lax.while_loop(narrowing, narrow, state)
    # Narrowing leaves a found step in lo, and otherwise the lowest trial with sufficient
    # decrease; growing leaves a found step, or the lowest trial so far, in last.
    result = _select(bracketed, lo, last)
    status = fnp.where(zoom_failed, 1, fnp.where(done, 0, 3))
    evaluations = evaluations + growing_trials + zoom_trials
    return LineSearchResults(
        failed=~done,
        nit=growing_trials,
        nfev=evaluations,
        ngev=evaluations,
        k=i,
        a_k=result.a,
        f_k=result.phi,
        g_k=result.g,
        status=status,
    )
