"""odeint: an adaptive Dormand–Prince (RK45) integrator, differentiated by the adjoint method.

Each step takes the fifth-order solution of the embedded 5(4) pair, and the difference from
the fourth-order one is the error estimate that sizes the next step (Hairer, Nørsett & Wanner,
Solving Ordinary Differential Equations I, II.4–II.6). The solution at the requested times is
read from a quartic through the step's ends, its end slopes and its dense-output midpoint, so
the step sizes never depend on where the outputs were asked for.

Reverse mode does not differentiate through the solver's loops: the cotangents are found by
integrating the adjoint system backwards between consecutive output times (Chen et al.,
Neural Ordinary Differential Equations, 2018, appendix C), itself with odeint, so that
derivatives of any order are available the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from funcgrad import core, dtypes, lax, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.flatten_util import ravel_pytree
from funcgrad.transforms.autodiff import vjp
from funcgrad.transforms.custom_derivatives import custom_vjp
from funcgrad.transforms.tracing_tools import closure_convert
from funcgrad.transforms.vmap import vmap

__all__ = ["odeint"]

# The Dormand–Prince tableau: stage i (from the second) is taken at t + _NODES[i] * dt from
# y + dt * Σ _STAGE_WEIGHTS[i][j] k_j. The last stage's point is the fifth-order solution, so
# its derivative is the next step's first stage.
_NODES = (1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_STAGE_WEIGHTS = (
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
# The fifth-order solution minus the embedded fourth-order one.
_ERROR_WEIGHTS = (
    35 / 384 - 5179 / 57600,
    0.0,
    500 / 1113 - 7571 / 16695,
    125 / 192 - 393 / 640,
    -2187 / 6784 + 92097 / 339200,
    11 / 84 - 187 / 2100,
    -1 / 40,
)
# The continuous extension of the method evaluated at the step's midpoint.
_MIDPOINT_WEIGHTS = (
    6025192743 / 60171106304,
    0.0,
    51252292925 / 130801643196,
    -2691868925 / 90256659456,
    187940372067 / 3189068634112,
    -1776094331 / 39487288512,
    11237099 / 470086768,
)


def _combine(weights, stages: list) -> Array:
    return sum(w * k for w, k in zip(weights, stages) if w != 0.0)


def _dopri_step(func: Callable, y, f, t, dt):
    """One step of size dt from (t, y) with f = func(y, t): the new point, its derivative, the
    error estimate and the quartic (in the step's fraction s) through the step."""
    h = dt.astype(y.dtype)
    stages = [f]
    for node, weights in zip(_NODES, _STAGE_WEIGHTS):
        y_stage = y + h * _combine(weights, stages)
        stages.append(func(y_stage, t + node * dt))
    y_next, f_next = y_stage, stages[-1]
    error = h * _combine(_ERROR_WEIGHTS, stages)
    y_mid = y + h * _combine(_MIDPOINT_WEIGHTS, stages)
    return y_next, f_next, error, _quartic(y, y_next, y_mid, h * f, h * f_next)


def _quartic(y0, y1, y_mid, slope0, slope1) -> Array:
    """Coefficients, highest power first, of p(s) with p(0) = y0, p(1/2) = y_mid, p(1) = y1,
    p'(0) = slope0, p'(1) = slope1."""
    return fnp.stack(
        [
            16 * y_mid - 8 * (y0 + y1) + 2 * (slope1 - slope0),
            -32 * y_mid + 18 * y0 + 14 * y1 + 5 * slope0 - 3 * slope1,
            16 * y_mid - 11 * y0 - 5 * y1 - 4 * slope0 + slope1,
            slope0,
            y0,
        ]
    )


def _horner(coefficients, s) -> Array:
    value = coefficients[0]
    for c in coefficients[1:]:
        value = value * s + c
    return value


def _rms(x) -> Array:
    return fnp.sqrt(fnp.mean(fnp.real(x * fnp.conj(x))))


def _error_ratio(error, y0, y1, rtol, atol) -> Array:
    tolerance = atol + rtol * fnp.maximum(fnp.abs(y0), fnp.abs(y1))
    return _rms(error / tolerance)


def _next_step_size(dt, error_ratio, hmax) -> Array:
    """dt scaled towards an error ratio of one: by at most 10 up, at most 5 down, never down
    after an accepted step."""
    order = 5.0
    shrink_limit = fnp.where(error_ratio < 1, 1.0, 0.2)
    factor = fnp.clip(0.9 * error_ratio ** (-1 / order), shrink_limit, 10.0)
    factor = fnp.where(error_ratio == 0, 10.0, factor)
    return fnp.clip(dt * factor.astype(dt.dtype), 0.0, hmax)


def _initial_step_size(func: Callable, y0, f0, t0, rtol, atol) -> Array:
    """A first step whose error is about tolerable for a method of order 4, from the sizes of
    y0, f0 and a finite-difference estimate of the second derivative (Hairer, II.4)."""
    order = 4.0
    scale = atol + fnp.abs(y0) * rtol
    d0 = _rms(y0 / scale)
    d1 = _rms(f0 / scale)
    h0 = fnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1).astype(t0.dtype)
    f1 = func(y0 + h0.astype(y0.dtype) * f0, t0 + h0)
    d2 = _rms((f1 - f0) / scale) / h0
    h1 = fnp.where(
        (d1 <= 1e-15) & (d2 <= 1e-15),
        fnp.maximum(1e-6, h0 * 1e-3),
        (0.01 / fnp.maximum(d1, d2)) ** (1 / (order + 1)),
    )
    return fnp.minimum(100 * h0, h1).astype(t0.dtype)


def odeint(
    func: Callable,
    y0,
    t,
    *args,
    rtol: float = 1.4e-8,
    atol: float = 1.4e-8,
    mxstep: float = math.inf,
    hmax: float = math.inf,
):
    """Solve dy/dt = func(y, t, *args) from y(t[0]) = y0, returning y at every time in t.

    y0 is an array or a pytree of arrays; the result has its structure with a leading axis of
    len(t). t must be strictly increasing floats. rtol and atol bound each step's local error
    (relative to |y| and absolute); hmax bounds the step size; mxstep bounds the number of steps
    between two consecutive times of t, and the outputs from the first time not reached within
    it are NaN. Differentiable in reverse mode with respect to y0, t and args (by the adjoint
    method), and usable under jit and vmap. func may close over traced values, which are
    differentiated too.
    """
    for leaf in tree_util.tree_leaves(args):
        if not _is_array_like(leaf):
            raise TypeError(
                f"odeint: the extra arguments *args must be arrays or scalars (or pytrees of "
                f"them), got {type(leaf).__name__} {leaf!r}"
            )
    t = fnp.asarray(t)
    if not dtypes.is_float(t.dtype) or t.ndim != 1 or t.shape[0] < 1:
        raise TypeError(
            f"odeint: t must be a non-empty vector of floats, got {t.dtype} of shape {t.shape}"
        )
    converted, hoisted = closure_convert(func, y0, t[0], *args)
    return _odeint_pytree(converted, rtol, atol, mxstep, hmax, y0, t, *args, *hoisted)


def _is_array_like(x) -> bool:
    return isinstance(x, (Array, core.Tracer)) or dtypes.is_python_scalar(x) or hasattr(x, "dtype")


def _odeint_pytree(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    flat_y0, unravel = ravel_pytree(y0)

    def flat_func(y, t, *args):
        flat_dy, _ = ravel_pytree(func(unravel(y), t, *args))
        return flat_dy.astype(y.dtype)

    flat_ys = _odeint(flat_func, rtol, atol, mxstep, hmax, flat_y0, ts, *args)
    return vmap(unravel)(flat_ys)


@partial(custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    """The solution at ts of the flat system func(y, t, *args), y a vector."""

    def derivative(y, t):
        return func(y, t, *args)

    def advance_to(carry, target):
        def not_there(state):
            steps, _, _, t, dt, _, _ = state
            return (t < target) & (steps < mxstep) & (dt > 0)

        def try_step(state):
            steps, y, f, t, dt, t_prev, quartic = state
            y_next, f_next, error, next_quartic = _dopri_step(derivative, y, f, t, dt)
            ratio = _error_ratio(error, y, y_next, rtol, atol)
            accept = ratio <= 1
            dt_next = _next_step_size(dt, ratio, hmax)
            return (
                steps + 1,
                fnp.where(accept, y_next, y),
                fnp.where(accept, f_next, f),
                fnp.where(accept, t + dt, t),
                dt_next,
                fnp.where(accept, t, t_prev),
                fnp.where(accept, next_quartic, quartic),
            )

        _, y, f, t, dt, t_prev, quartic = lax.while_loop(not_there, try_step, (0, *carry))
        fraction = (target - t_prev) / (t - t_prev)
        y_target = _horner(quartic, fraction.astype(y.dtype))
        y_target = fnp.where(t >= target, y_target, fnp.nan)
        return (y, f, t, dt, t_prev, quartic), y_target

    t0 = ts[0]
    f0 = derivative(y0, t0)
    dt0 = fnp.clip(_initial_step_size(derivative, y0, f0, t0, rtol, atol), 0.0, hmax)
    quartic0 = fnp.stack([y0] * 5)
    _, ys = lax.scan(advance_to, (y0, f0, t0, dt0, t0, quartic0), ts[1:])
    return fnp.concatenate([y0[None], ys])


def _odeint_fwd(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    ys = _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args)
    return ys, (ys, ts, args)


def _odeint_bwd(func, rtol, atol, mxstep, hmax, residuals, ys_bar):
    """Cotangents of y0, ts and args from those of the outputs.

    Between consecutive times the state y runs backwards together with its adjoint a (the
    cotangent of y(t)), and with the integrals of a·∂f/∂args and a·∂f/∂t. Time is negated so
    that the backward run is an ordinary forward integration. The cotangent of an output time
    t_i is the output's cotangent along the derivative there; that of t[0] gathers the rest.
    """
    ys, ts, args = residuals
    arg_leaves, arg_tree = tree_util.tree_flatten(args)
    differentiable = [dtypes.is_inexact(fnp.asarray(leaf).dtype) for leaf in arg_leaves]

    def with_args(diff_leaves, leaves):
        it = iter(diff_leaves)
        merged = [next(it) if d else leaf for leaf, d in zip(leaves, differentiable)]
        return tree_util.tree_unflatten(arg_tree, merged)

    def augmented(state, minus_t, *leaves):
        y, y_bar, _, _ = state
        diff_leaves = [leaf for leaf, d in zip(leaves, differentiable) if d]

        def forward(y, t, diff_leaves):
            return func(y, t, *with_args(diff_leaves, leaves))

        dy, pullback = vjp(forward, y, -minus_t, diff_leaves)
        return (-dy, *pullback(y_bar))

    def back_one_interval(carry, i):
        y_bar, t0_bar, args_bar = carry
        t_bar = fnp.real(fnp.vdot(ys_bar[i], func(ys[i], ts[i], *args))).astype(ts.dtype)
        state = (ys[i], y_bar, t0_bar - t_bar, args_bar)
        times = fnp.stack([-ts[i], -ts[i - 1]])
        _, y_bar, t0_bar, args_bar = tree_util.tree_map(
            lambda path: path[-1],
            odeint(
                augmented,
                state,
                times,
                *arg_leaves,
                rtol=rtol,
                atol=atol,
                mxstep=mxstep,
                hmax=hmax,
            ),
        )
        return (y_bar + ys_bar[i - 1], t0_bar, args_bar), t_bar

    diff_leaves = [fnp.asarray(leaf) for leaf, d in zip(arg_leaves, differentiable) if d]
    start = (ys_bar[-1], fnp.zeros((), ts.dtype), [fnp.zeros_like(x) for x in diff_leaves])
    steps_back = fnp.arange(ts.shape[0] - 1, 0, -1)
    (y0_bar, t0_bar, diff_bars), later_t_bars = lax.scan(back_one_interval, start, steps_back)
    ts_bar = fnp.concatenate([t0_bar[None], later_t_bars[::-1]])
    it = iter(diff_bars)
    arg_bars = [next(it) if d else None for d in differentiable]
    return (y0_bar, ts_bar, *tree_util.tree_unflatten(arg_tree, arg_bars))


_odeint.defvjp(_odeint_fwd, _odeint_bwd)
