"""A line search for a step with sufficient decrease and small curvature (the strong Wolfe
conditions): it grows the step until an acceptable one is bracketed, then zooms into the
bracket by safeguarded interpolation (Nocedal & Wright, Numerical Optimization, Algorithms
3.5 and 3.6). Both phases run in one while loop, one evaluation of f and its gradient per
trial, so that `max_linesearch_steps` bounds the evaluations and the search traces into one
program.

Near a minimizer, f's values no longer resolve the decrease that sufficient decrease asks
for (the differences are below round-off), so a step whose value is within a relative
`approx_dec_rtol` of f(x) may meet Hager and Zhang's approximate condition on the slope
instead."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import debug, lax
from funcgrad.optim.base import GradientTransformationExtraArgs, check_matches, zeros_like_tree
from funcgrad.optim.lbfgs import _add_scaled, _kwargs_for, _vdot, value_dtype
from funcgrad.optim.transforms import _map
from funcgrad.scipy.optimize._line_search import cubic_minimizer
from funcgrad.transforms.autodiff import value_and_grad


class ZoomLinesearchInfo(NamedTuple):
    num_linesearch_steps: Any  # evaluations of f and its gradient in the last search
    decrease_error: Any  # how far the step taken is from sufficient decrease (0: met, inf: none)
    curvature_error: Any  # how far it is from small curvature (0: met)


class ScaleByZoomLinesearchState(NamedTuple):
    learning_rate: Any  # the step size taken
    value: Any  # the objective at the accepted point, for `value_and_grad_from_state`
    grad: Any  # its gradient there
    info: ZoomLinesearchInfo


class _Trial(NamedTuple):
    """A step size, f and its gradient at that step, the slope of f along the direction
    there, and how far the step is from each condition."""

    stepsize: Any
    value: Any
    grad: Any
    slope: Any
    decrease_error: Any
    curvature_error: Any


class _End(NamedTuple):
    """An end of the bracket: a step size, f and its slope there."""

    stepsize: Any
    value: Any
    slope: Any


class _Search(NamedTuple):
    count: Any  # trials so far
    last: _Trial
    safe: _Trial  # the lowest trial with sufficient decrease; step 0 while there is none
    # Once bracketed, an acceptable step lies between low and high, f(low) <= f(high), and
    # the slope at low points towards high.
    low: _End
    high: _End
    bracketed: Any
    done: Any
    failed: Any


def _where(pred, on_true, on_false):
    return _map(lambda t, f: fnp.where(pred, t, f).astype(fnp.asarray(f).dtype), on_true, on_false)


def _quadratic_minimizer(low: _End, high: _End):
    """The minimizer of the parabola through f and its slope at low and f at high (NaN or
    out of the bracket where that parabola opens downwards or is degenerate)."""
    width = high.stepsize - low.stepsize
    curvature = (high.value - low.value - low.slope * width) / (width * width)
    return low.stepsize - low.slope / (2 * curvature)


def _interpolate(low: _End, high: _End):
    """The next trial inside the bracket: the cubic's minimizer if it lies in the middle
    three fifths, else the parabola's if in the middle four fifths, else the midpoint; the
    margins keep each trial cutting the bracket by a fixed fraction."""
    left = fnp.minimum(low.stepsize, high.stepsize)
    right = fnp.maximum(low.stepsize, high.stepsize)
    width = right - left

    def inside(x, margin):
        return (x > left + margin * width) & (x < right - margin * width)

    cubic = cubic_minimizer(
        low.stepsize, low.value, low.slope, high.stepsize, high.value, high.slope
    )
    quadratic = _quadratic_minimizer(low, high)
    midpoint = (low.stepsize + high.stepsize) / 2
    return fnp.where(
        inside(cubic, 0.2), cubic, fnp.where(inside(quadratic, 0.1), quadratic, midpoint)
    )


def _as_error(excess):
    """The violation of a condition `excess <= 0`: 0 when met, inf where f was not finite."""
    excess = fnp.maximum(excess, 0.0)
    return fnp.where(fnp.isnan(excess), fnp.inf, excess)


def _report(failed, stepsize, value_init, slope_init, decrease_error, curvature_error, tol):
    """Why the step taken misses a condition (run as a debug callback with verbose=True)."""
    if decrease_error <= tol and curvature_error <= tol:
        return
    lines = [
        "scale_by_zoom_linesearch: the step taken does not meet both conditions",
        f"  value at the parameters: {value_init}, slope along the updates: {slope_init}",
        f"  step size: {stepsize}, decrease error: {decrease_error}, "
        f"curvature error: {curvature_error}",
    ]
    if slope_init >= 0:
        lines.append("  the updates are not a descent direction: the slope must be negative")
    elif decrease_error == float("inf"):
        lines.append("  f is not finite at any step tried: no step is taken")
    elif decrease_error > tol:
        lines.append(
            "  no step decreases f enough; the step taken may increase it "
            "(more max_linesearch_steps, or float64, may help)"
        )
    elif failed:
        lines.append("  the curvature condition was not met within max_linesearch_steps")
    else:
        lines.append("  the curvature condition needs a step above max_learning_rate")
    print("\n".join(lines))


def scale_by_zoom_linesearch(
    max_linesearch_steps: int,
    max_learning_rate: float | None = None,
    tol: float = 0.0,
    increase_factor: float = 2.0,
    slope_rtol: float = 1e-4,
    curv_rtol: float = 0.9,
    approx_dec_rtol: float | None = 1e-6,
    stepsize_precision: float = 1e-5,
    initial_guess_strategy: str = "keep",
    verbose: bool = False,
) -> GradientTransformationExtraArgs:
    """The updates u times a step size eta with sufficient decrease,
    f(x + eta u) <= f(x) + slope_rtol * eta * s(0) + tol, and small curvature,
    |s(eta)| <= curv_rtol * |s(0)| + tol, s(eta) being the slope of f along u at x + eta u.
    Unless approx_dec_rtol is None, a step with f(x + eta u) <= f(x) + approx_dec_rtol |f(x)|
    + tol and s(eta) <= (2 slope_rtol - 1) s(0) + tol counts as decreasing enough.

    The first trial is 1 (initial_guess_strategy='one', for quasi-Newton directions) or the
    last step taken ('keep', 1 after no step); it grows by increase_factor, at most to
    max_learning_rate, until a step is bracketed. When the bracket is narrower than
    stepsize_precision, or max_linesearch_steps trials are spent, the search takes the lowest
    trial with sufficient decrease; with none, the last trial (or no step where f was not
    finite).

    The state keeps f and its gradient at the accepted point for `value_and_grad_from_state`,
    and `info` how far the step taken is from each condition; verbose prints why when it
    misses one."""
    if max_linesearch_steps < 1:
        raise ValueError(
            f"scale_by_zoom_linesearch: max_linesearch_steps must be at least 1, got "
            f"{max_linesearch_steps}"
        )
    if initial_guess_strategy not in ("one", "keep"):
        raise ValueError(
            f"scale_by_zoom_linesearch: initial_guess_strategy must be 'one' or 'keep', got "
            f"{initial_guess_strategy!r}"
        )

    def init(params):
        dtype = value_dtype(params)
        return ScaleByZoomLinesearchState(
            learning_rate=fnp.asarray(1.0, dtype),
            value=fnp.asarray(fnp.inf, dtype),
            grad=zeros_like_tree(params),
            info=ZoomLinesearchInfo(
                fnp.asarray(0, fnp.int32), fnp.asarray(fnp.inf, dtype), fnp.asarray(fnp.inf, dtype)
            ),
        )

    def update(updates, state, params=None, *, value, grad, value_fn, **extra_args):
        if params is None:
            raise ValueError(
                "scale_by_zoom_linesearch needs params: call update(updates, state, params, ...)"
            )
        fn_kwargs, unused = _kwargs_for(value_fn, extra_args)
        if unused:
            raise TypeError(
                f"scale_by_zoom_linesearch: value_fn takes no arguments named {sorted(unused)}"
            )
        check_matches(updates, params, "updates", "parameters")
        check_matches(grad, params, "gradients", "parameters")
        dtype = state.value.dtype

        def objective(p):
            return fnp.asarray(value_fn(p, **fn_kwargs)).astype(dtype)

        def slope_along_updates(g):
            # f's gradient is the conjugate of the ascent direction for complex parameters,
            # so the derivative along u is Re <conj(g), u>.
            return _vdot(_map(fnp.conj, g), updates).astype(dtype)

        grad = _map(lambda g, p: fnp.asarray(g).astype(fnp.asarray(p).dtype), grad, params)
        value_init = fnp.asarray(value).astype(dtype)
        slope_init = slope_along_updates(grad)

        def decrease_error(stepsize, new_value, slope):
            error = new_value - value_init - slope_rtol * stepsize * slope_init
            if approx_dec_rtol is not None:
                approximate = fnp.maximum(
                    slope - (2 * slope_rtol - 1) * slope_init,
                    new_value - value_init - approx_dec_rtol * fnp.abs(value_init),
                )
                error = fnp.minimum(error, approximate)
            return _as_error(error).astype(dtype)

        def evaluate(stepsize) -> _Trial:
            new_value, new_grad = value_and_grad(objective)(_add_scaled(params, stepsize, updates))
            slope = slope_along_updates(new_grad)
            curvature_error = _as_error(fnp.abs(slope) - curv_rtol * fnp.abs(slope_init))
            return _Trial(
                stepsize,
                new_value,
                new_grad,
                slope,
                decrease_error(stepsize, new_value, slope),
                curvature_error.astype(dtype),
            )

        if initial_guess_strategy == "one":
            guess = fnp.asarray(1.0, dtype)
        else:
            # a search that took no step would otherwise keep guessing 0
            guess = fnp.where(state.learning_rate > 0, state.learning_rate, 1.0).astype(dtype)

        def searching(search):
            return ~search.done & ~search.failed

        def try_step(search):
            last, low, high = search.last, search.low, search.high
            grown = fnp.where(search.count == 0, guess, increase_factor * last.stepsize)
            at_max = fnp.asarray(False)
            if max_learning_rate is not None:
                at_max = grown >= max_learning_rate
                grown = fnp.minimum(grown, max_learning_rate)
            stepsize = fnp.where(search.bracketed, _interpolate(low, high), grown).astype(dtype)
            trial = evaluate(stepsize)
            met = fnp.maximum(trial.decrease_error, trial.curvature_error) <= tol
            lower = (trial.decrease_error <= tol) & (trial.value < search.safe.value)
            safe = _where(lower, trial, search.safe)
            reached = _End(trial.stepsize, trial.value, trial.slope)

            # Growing: the trial went too far, or f turned upwards before it (N&W 3.5).
            too_far = (trial.decrease_error > 0) | (
                (trial.value >= last.value) & (search.count > 0)
            )
            turned = ~too_far & (trial.slope >= 0)
            previous = _End(last.stepsize, last.value, last.slope)
            grown_low = _where(turned, reached, previous)
            grown_high = _where(turned, previous, reached)
            # Zooming: the trial replaces high, or low (N&W 3.6).
            to_high = (trial.decrease_error > 0) | (trial.value >= low.value)
            flip = ~to_high & (trial.slope * (high.stepsize - low.stepsize) >= 0)
            zoomed_low = _where(to_high, low, reached)
            zoomed_high = _where(to_high, reached, _where(flip, low, high))

            bracketed = search.bracketed | too_far | turned
            narrow = (
                search.bracketed
                & (fnp.abs(high.stepsize - low.stepsize) <= stepsize_precision)
                & (safe.stepsize > 0)
            )
            done = met | (~bracketed & at_max)
            failed = ~done & ((search.count + 1 >= max_linesearch_steps) | narrow)
            return _Search(
                search.count + 1,
                trial,
                safe,
                _where(search.bracketed, zoomed_low, grown_low),
                _where(search.bracketed, zoomed_high, grown_high),
                bracketed,
                done,
                failed,
            )

        zero = fnp.asarray(0.0, dtype)
        inf = fnp.asarray(fnp.inf, dtype)
        start = _Trial(zero, value_init, grad, slope_init, inf, inf)
        origin = _End(zero, value_init, slope_init)
        false = fnp.asarray(False)
        search = lax.while_loop(
            searching,
            try_step,
            _Search(fnp.asarray(0, fnp.int32), start, start, origin, origin, false, false, false),
        )
        fall_back = search.failed & (
            (search.safe.stepsize > 0) | fnp.isinf(search.last.decrease_error)
        )
        taken = _where(fall_back, search.safe, search.last)
        if verbose:
            debug.callback(
                _report,
                search.failed,
                taken.stepsize,
                value_init,
                slope_init,
                taken.decrease_error,
                taken.curvature_error,
                tol,
            )
        new_state = ScaleByZoomLinesearchState(
            learning_rate=taken.stepsize,
            value=taken.value,
            grad=taken.grad,
            info=ZoomLinesearchInfo(search.count, taken.decrease_error, taken.curvature_error),
        )
        step = taken.stepsize
        return _map(lambda u: (step * u).astype(u.dtype), updates), new_state

    return GradientTransformationExtraArgs(init, update)
