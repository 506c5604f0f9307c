"""Quasi-Newton directions and line searches: L-BFGS's two-loop recursion over the last
steps (`scale_by_lbfgs`), a backtracking search for a step with sufficient decrease
(`scale_by_backtracking_linesearch`), and `value_and_grad_from_state` to reuse the value and
gradient a line search already computed.

A line search evaluates the objective, so its update takes `value`, `grad` and `value_fn`
as extra keyword arguments (any others go to `value_fn` when it takes them by name)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import debug, lax, tree_util
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    abs_sq,
    check_matches,
    zeros_like_tree,
)
from funcgrad.optim.transforms import _count, _map, _next
from funcgrad.transforms.autodiff import value_and_grad


class ScaleByLBFGSState(NamedTuple):
    count: Any
    params: Any  # the parameters of the last call
    updates: Any  # the gradient of the last call
    diff_params_memory: Any  # per leaf (memory_size, *shape): the last steps s, oldest first
    diff_updates_memory: Any  # per leaf: the last gradient changes y, oldest first
    weights_memory: Any  # (memory_size,): 1 / <y, s>, 0 where undefined


class BacktrackingLinesearchInfo(NamedTuple):
    num_linesearch_steps: Any
    decrease_error: Any  # how far the accepted step is from sufficient decrease (0: met)


class ScaleByBacktrackingLinesearchState(NamedTuple):
    learning_rate: Any
    value: Any  # the objective at the accepted point
    grad: Any  # its gradient (with store_grad), else None
    info: BacktrackingLinesearchInfo


def _vdot(a, b):
    """Re <a, b> over all leaves."""
    total = sum(
        fnp.sum(fnp.real(fnp.conj(x) * y))
        for x, y in zip(tree_util.tree_leaves(a), tree_util.tree_leaves(b))
    )
    return fnp.asarray(total)


def value_dtype(params):
    """The dtype of the objective and of the step sizes: real, as the first parameter's."""
    leaves = tree_util.tree_leaves(params)
    return fnp.real(fnp.zeros((), fnp.asarray(leaves[0]).dtype)).dtype if leaves else fnp.float32


def _add_scaled(x, scale, y):
    return _map(lambda a, b: (a + scale * b).astype(a.dtype), x, y)


def _entry(memory, i):
    return _map(lambda m: m[i], memory)


def scale_by_lbfgs(memory_size: int = 10, scale_init_precond: bool = True):
    """The L-BFGS direction H g (Nocedal & Wright, algorithm 7.4): the inverse Hessian H is
    built from the last memory_size pairs s = x_k - x_{k-1}, y = g_k - g_{k-1} on top of
    gamma * I, gamma = <y, s> / |y|**2 for the newest pair with scale_init_precond (at the
    first step min(1, 1 / |g|), so the first step has length at most 1), else 1."""
    if memory_size < 1:
        raise ValueError(f"scale_by_lbfgs: memory_size must be at least 1, got {memory_size}")

    def init(params):
        stacked = _map(
            lambda p: fnp.zeros((memory_size,) + fnp.shape(p), fnp.asarray(p).dtype), params
        )
        zeros = zeros_like_tree(params)
        return ScaleByLBFGSState(
            _count(), zeros, zeros, stacked, stacked, fnp.zeros(memory_size, fnp.float32)
        )

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_lbfgs needs params: call update(grads, state, params)")
        check_matches(updates, params, "gradients", "parameters")
        started = state.count > 0

        def keep(x):
            return fnp.where(started, x, 0).astype(x.dtype)

        s = _map(lambda p, q: keep(p - q), params, state.params)
        y = _map(lambda g, h: keep(g - h), updates, state.updates)
        curvature = _vdot(y, s)
        weight = fnp.where(curvature == 0, 0.0, 1.0 / curvature).astype(fnp.float32)

        def push(memory, new):
            return fnp.concatenate([memory[1:], new[None].astype(memory.dtype)])

        s_memory = _map(push, state.diff_params_memory, s)
        y_memory = _map(push, state.diff_updates_memory, y)
        weights = push(state.weights_memory, fnp.where(started, weight, 0.0))

        if scale_init_precond:
            y_norm_sq = sum(fnp.sum(abs_sq(leaf)) for leaf in tree_util.tree_leaves(y))
            newest = fnp.where(y_norm_sq > 0, curvature / y_norm_sq, 1.0)
            g_norm = fnp.sqrt(sum(fnp.sum(abs_sq(g)) for g in tree_util.tree_leaves(updates)))
            gamma = fnp.where(started, newest, fnp.minimum(1.0, 1.0 / lax.stop_gradient(g_norm)))
        else:
            gamma = fnp.asarray(1.0)

        direction, alphas = updates, []
        for i in reversed(range(memory_size)):
            alpha = weights[i] * _vdot(_entry(s_memory, i), direction)
            direction = _add_scaled(direction, -alpha, _entry(y_memory, i))
            alphas.insert(0, alpha)
        direction = _map(lambda d: (gamma * d).astype(d.dtype), direction)
        for i in range(memory_size):
            beta = weights[i] * _vdot(_entry(y_memory, i), direction)
            direction = _add_scaled(direction, alphas[i] - beta, _entry(s_memory, i))
        new_state = ScaleByLBFGSState(
            _next(state.count), params, updates, s_memory, y_memory, weights
        )
        return direction, new_state

    return GradientTransformation(init, update)


def _kwargs_for(fn: Callable, extra_args: dict) -> tuple[dict, dict]:
    """The extra arguments `fn` takes by name, and the rest."""
    names = inspect.signature(fn).parameters
    taken = {k: v for k, v in extra_args.items() if k in names}
    return taken, {k: v for k, v in extra_args.items() if k not in names}


class _Search(NamedTuple):
    learning_rate: Any
    new_value: Any
    new_grad: Any
    decrease_error: Any
    iter_num: Any


def scale_by_backtracking_linesearch(
    max_backtracking_steps: int,
    slope_rtol: float = 1e-4,
    decrease_factor: float = 0.8,
    increase_factor: float = 1.5,
    max_learning_rate: float = 1.0,
    atol: float = 0.0,
    rtol: float = 0.0,
    store_grad: bool = False,
    verbose: bool = False,
) -> GradientTransformationExtraArgs:
    """The updates u times the first step size eta, from min(increase_factor * the last one,
    max_learning_rate) down by decrease_factor at most max_backtracking_steps times, that
    decreases f enough (Armijo): f(x + eta u) <= (1 + rtol) f(x) + eta * slope_rtol *
    <u, grad f(x)> + atol. If none does, the last one tried, or 0 where f was not finite
    there; verbose then prints why. With store_grad the state keeps the gradient at the
    accepted point for `value_and_grad_from_state`."""

    def init(params):
        dtype = value_dtype(params)
        return ScaleByBacktrackingLinesearchState(
            learning_rate=fnp.asarray(1.0, dtype),
            value=fnp.asarray(fnp.inf, dtype),
            grad=zeros_like_tree(params) if store_grad else None,
            info=BacktrackingLinesearchInfo(fnp.asarray(0, fnp.int32), fnp.asarray(fnp.inf, dtype)),
        )

    def update(updates, state, params=None, *, value, grad, value_fn, **extra_args):
        fn_kwargs, unused = _kwargs_for(value_fn, extra_args)
        if unused:
            raise TypeError(
                f"scale_by_backtracking_linesearch: value_fn takes no arguments named "
                f"{sorted(unused)}"
            )
        dtype = state.value.dtype
        slope = _vdot(updates, grad).astype(dtype)
        value = fnp.asarray(value).astype(dtype)

        def objective(p):
            return fnp.asarray(value_fn(p, **fn_kwargs)).astype(dtype)

        def decrease_error(step, new_value):
            error = new_value - (1 + rtol) * value - step * slope_rtol * slope
            return fnp.maximum(fnp.where(fnp.isnan(error), fnp.inf, error), 0.0).astype(dtype)

        def searching(search):
            return ~(search.decrease_error <= atol) & (search.iter_num <= max_backtracking_steps)

        def try_step(search):
            step = fnp.where(
                search.iter_num > 0, decrease_factor * search.learning_rate, search.learning_rate
            ).astype(dtype)
            trial = _add_scaled(params, step, updates)
            new_value = objective(trial)
            error = decrease_error(step, new_value)
            new_grad = search.new_grad
            if store_grad:
                done = (error <= atol) | (search.iter_num == max_backtracking_steps)
                new_grad = lax.cond(
                    done,
                    lambda p, g: value_and_grad(objective)(p)[1],
                    lambda p, g: g,
                    trial,
                    new_grad,
                )
            return _Search(step, new_value, new_grad, error, search.iter_num + 1)

        first = fnp.minimum(increase_factor * state.learning_rate, max_learning_rate).astype(dtype)
        start = _Search(
            first,
            value,
            zeros_like_tree(params),
            fnp.asarray(fnp.inf, dtype),
            fnp.asarray(0, fnp.int32),
        )
        search = lax.while_loop(searching, try_step, start)
        step = fnp.where(fnp.isinf(search.decrease_error), 0.0, search.learning_rate).astype(dtype)
        if verbose:
            debug.callback(_report_backtracking, value, slope, step, search.decrease_error, atol)
        new_state = ScaleByBacktrackingLinesearchState(
            learning_rate=step,
            value=search.new_value,
            grad=search.new_grad if store_grad else None,
            info=BacktrackingLinesearchInfo(search.iter_num, search.decrease_error),
        )
        return _map(lambda u: (step * u).astype(u.dtype), updates), new_state

    return GradientTransformationExtraArgs(init, update)


def _report_backtracking(value, slope, step, decrease_error, atol) -> None:
    """Why no step decreased f enough (a debug callback of verbose=True)."""
    if decrease_error <= atol:
        return
    lines = [
        "scale_by_backtracking_linesearch: no step size tried decreases f enough",
        f"  value at the parameters: {value}, slope along the updates: {slope}",
        f"  step size taken: {step}, decrease error: {decrease_error}",
    ]
    if slope >= 0:
        lines.append("  the updates are not a descent direction: the slope must be negative")
    elif decrease_error == float("inf"):
        lines.append("  f is not finite at the steps tried: no step is taken")
    else:
        lines.append("  more max_backtracking_steps, or float64, may help")
    print("\n".join(lines))


def _find_value_and_grad(state):
    """The (value, grad) of the first line-search state found in `state`, else None."""
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        if "value" in state._fields and "grad" in state._fields:
            return state.value, state.grad
    children = state.values() if isinstance(state, dict) else state
    if isinstance(children, (tuple, list)) or isinstance(state, dict):
        for child in children:
            found = _find_value_and_grad(child)
            if found is not None:
                return found
    return None


def value_and_grad_from_state(value_fn: Callable[..., Any]) -> Callable[..., tuple[Any, Any]]:
    """A value_and_grad of value_fn that reuses the value and gradient a line search run
    with store_grad=True left in `state` (`f(params, *args, state=state, **kwargs)`), and
    computes them only where that value is not finite (before the first step)."""

    def value_and_grad_fn(params, *args, state, **kwargs):
        found = _find_value_and_grad(state)
        if found is None or found[1] is None:
            raise ValueError(
                "value_and_grad_from_state: the state holds no stored value and gradient; "
                "use a line search with store_grad=True"
            )
        value, grad = found
        return lax.cond(
            fnp.isfinite(value),
            lambda p, a, kw: (value, grad),
            lambda p, a, kw: value_and_grad(value_fn)(p, *a, **kw),
            params,
            args,
            kwargs,
        )

    return value_and_grad_fn
