"""The building blocks optimizers chain together, with Optax's names and update equations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import lax, tree_util
from funcgrad.optim.base import (
    EmptyState,
    GradientTransformation,
    abs_sq,
    check_matches,
    global_norm,
    zeros_like_tree,
)

Schedule = Callable[[Any], Any]
ScalarOrSchedule = float | Schedule


class ScaleByScheduleState(NamedTuple):
    count: Any  # int32 steps taken


class ScaleByAdamState(NamedTuple):
    count: Any
    mu: Any
    nu: Any


class ScaleByRmsState(NamedTuple):
    nu: Any


class ScaleByRStdDevState(NamedTuple):
    mu: Any
    nu: Any


class ScaleByRssState(NamedTuple):
    sum_of_squares: Any


class ScaleByLionState(NamedTuple):
    count: Any
    mu: Any


class TraceState(NamedTuple):
    trace: Any


def _count() -> Any:
    return fnp.zeros((), fnp.int32)


def _next(count) -> Any:
    """count + 1, saturating instead of wrapping around."""
    largest = fnp.iinfo(fnp.int32).max
    return fnp.where(count < largest, count + 1, largest).astype(fnp.int32)


def _map(f, *trees):
    return tree_util.tree_map(f, *trees)


def _stateless(f) -> GradientTransformation:
    def update(updates, state, params=None):
        return f(updates, params), state

    return GradientTransformation(lambda params: EmptyState(), update)


def scale(step_size: float) -> GradientTransformation:
    return _stateless(lambda updates, params: _map(lambda g: g * step_size, updates))


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
    """Multiply by `step_size_fn(count)`, count being the number of updates so far."""

    def update(updates, state, params=None):
        factor = step_size_fn(state.count)
        scaled = _map(lambda g: g * fnp.asarray(factor).astype(fnp.asarray(g).dtype), updates)
        return scaled, ScaleByScheduleState(_next(state.count))

    return GradientTransformation(lambda params: ScaleByScheduleState(_count()), update)


def scale_by_learning_rate(learning_rate: ScalarOrSchedule, *, flip_sign: bool = True):
    """-learning_rate * updates (descent), the learning rate a number or a schedule."""
    sign = -1.0 if flip_sign else 1.0
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def scale_by_adam(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0
) -> GradientTransformation:
    """m_hat / (sqrt(v_hat + eps_root) + eps) with bias-corrected moments (Kingma & Ba)."""

    def init(params):
        return ScaleByAdamState(_count(), zeros_like_tree(params), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _map(lambda g, m: b1 * m + (1 - b1) * g, updates, state.mu)
        nu = _map(lambda g, v: b2 * v + (1 - b2) * abs_sq(g), updates, state.nu)
        count = _next(state.count)
        t = count.astype(fnp.float32)
        c1, c2 = 1 - b1**t, 1 - b2**t
        scaled = _map(
            lambda m, v: (
                (m / c1.astype(m.dtype)) / (fnp.sqrt(v / c2.astype(v.dtype) + eps_root) + eps)
            ),
            mu,
            nu,
        )
        return scaled, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_rms(
    decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0
) -> GradientTransformation:
    """g / sqrt(nu + eps), nu the decaying mean of g**2 (RMSProp)."""

    def init(params):
        return ScaleByRmsState(_map(lambda p: fnp.full_like(p, initial_scale), params))

    def update(updates, state, params=None):
        check_matches(updates, state.nu, "gradients", "optimizer state")
        nu = _map(lambda g, v: decay * v + (1 - decay) * abs_sq(g), updates, state.nu)
        return _map(lambda g, v: g * lax.rsqrt(v + eps), updates, nu), ScaleByRmsState(nu)

    return GradientTransformation(init, update)


def scale_by_stddev(
    decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0
) -> GradientTransformation:
    """g / sqrt(nu - mu**2 + eps): RMSProp centered by the decaying mean of g."""

    def init(params):
        return ScaleByRStdDevState(
            zeros_like_tree(params), _map(lambda p: fnp.full_like(p, initial_scale), params)
        )

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _map(lambda g, m: decay * m + (1 - decay) * g, updates, state.mu)
        nu = _map(lambda g, v: decay * v + (1 - decay) * abs_sq(g), updates, state.nu)
        scaled = _map(lambda g, m, v: g * lax.rsqrt(v - abs_sq(m) + eps), updates, mu, nu)
        return scaled, ScaleByRStdDevState(mu, nu)

    return GradientTransformation(init, update)


def scale_by_rss(initial_accumulator_value: float = 0.1, eps: float = 1e-7):
    """g / sqrt(sum of all g**2 so far + eps) (Adagrad); 0 where the sum is 0."""

    def init(params):
        return ScaleByRssState(_map(lambda p: fnp.full_like(p, initial_accumulator_value), params))

    def update(updates, state, params=None):
        check_matches(updates, state.sum_of_squares, "gradients", "optimizer state")
        total = _map(lambda g, s: s + abs_sq(g), updates, state.sum_of_squares)
        scaled = _map(
            lambda g, s: fnp.where(fnp.real(s) > 0, lax.rsqrt(s + eps), 0.0).astype(g.dtype) * g,
            updates,
            total,
        )
        return scaled, ScaleByRssState(total)

    return GradientTransformation(init, update)


def scale_by_lion(b1: float = 0.9, b2: float = 0.99) -> GradientTransformation:
    """sign(b1 * mu + (1 - b1) * g), then mu <- b2 * mu + (1 - b2) * g (Chen et al. 2023)."""

    def init(params):
        return ScaleByLionState(_count(), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        direction = _map(lambda g, m: fnp.sign(b1 * m + (1 - b1) * g), updates, state.mu)
        mu = _map(lambda g, m: b2 * m + (1 - b2) * g, updates, state.mu)
        return direction, ScaleByLionState(_next(state.count), mu)

    return GradientTransformation(init, update)


def trace(decay: float, nesterov: bool = False) -> GradientTransformation:
    """Momentum: t <- g + decay * t; the update is t, or g + decay * t with Nesterov."""

    def init(params):
        return TraceState(zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.trace, "gradients", "optimizer state")
        new = _map(lambda g, t: g + decay * t, updates, state.trace)
        out = _map(lambda g, t: g + decay * t, updates, new) if nesterov else new
        return out, TraceState(new)

    return GradientTransformation(init, update)


def add_decayed_weights(weight_decay: float = 0.0, mask=None) -> GradientTransformation:
    """updates + weight_decay * params (decoupled weight decay), on the leaves `mask` selects:
    a pytree of bools with the structure of params or a prefix of it (a bool then stands for
    a whole subtree, as in Optax), or a function of params returning one."""

    def decay(updates, params):
        return _map(lambda g, p: g + weight_decay * p, updates, params)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("add_decayed_weights needs params: call update(grads, state, params)")
        check_matches(updates, params, "gradients", "parameters")
        chosen = mask(params) if callable(mask) else mask
        if chosen is None:
            return decay(updates, params), state
        decayed = _map(lambda m, g, p: decay(g, p) if m else g, chosen, updates, params)
        return decayed, state

    return GradientTransformation(lambda params: EmptyState(), update)


def clip(max_delta: float) -> GradientTransformation:
    """Each element clipped to [-max_delta, max_delta]."""
    return _stateless(
        lambda updates, params: _map(lambda g: fnp.clip(g, -max_delta, max_delta), updates)
    )


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale all updates down together when their global norm exceeds `max_norm`."""

    def rescale(updates, params):
        norm = global_norm(updates)
        small = norm < max_norm
        return _map(
            lambda g: fnp.where(small, g, g / norm.astype(g.dtype) * max_norm).astype(g.dtype),
            updates,
        )

    return _stateless(rescale)
