"""More update rules: the sign (signSGD), per-element step sizes (Rprop), Adan's three moments,
optimism, Polyak's and DoG's step sizes, a moving average and annealed noise."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import random, tree_util
from funcgrad.optim.base import (
    EmptyState,
    GradientTransformation,
    GradientTransformationExtraArgs,
    abs_sq,
    check_matches,
    zeros_like_tree,
)
from funcgrad.optim.transforms import (
    _bias_corrected,
    _count,
    _ema,
    _ema_sq,
    _map,
    _next,
    _stateless,
)


class ScaleByRpropState(NamedTuple):
    step_sizes: Any
    prev_updates: Any  # the last step, step_size * sign(g), 0 where the sign flipped


class ScaleByAdanState(NamedTuple):
    m: Any
    v: Any
    n: Any
    g: Any  # the previous gradient
    t: Any


class ScaleByOptimisticGradientState(NamedTuple):
    is_initial_step: Any
    previous_gradient: Any


class ScaleByDistanceOverGradientsState(NamedTuple):
    max_dist: Any  # per leaf: the largest distance from the initial parameters so far
    grad_sum_of_squares: Any  # per leaf: the sum of all squared gradient norms so far
    init_params: Any


class EmaState(NamedTuple):
    count: Any
    ema: Any


class AddNoiseState(NamedTuple):
    count: Any
    rng_key: Any


def scale_by_sign() -> GradientTransformation:
    """sign(g), element by element (signSGD)."""
    return _stateless(lambda updates, params: _map(fnp.sign, updates))


def scale_by_rprop(
    learning_rate: float,
    eta_minus: float = 0.5,
    eta_plus: float = 1.2,
    min_step_size: float = 1e-6,
    max_step_size: float = 50.0,
) -> GradientTransformation:
    """Rprop (iRprop-, Igel & Husken): a step size per element, times eta_plus while the
    gradient keeps its sign and eta_minus when it flips (clipped to [min_step_size,
    max_step_size]); the step is step_size * sign(g), or 0 just after a flip, which also
    forgets the sign so the next step grows from it. The step returned is the one just
    computed, as in Riedmiller & Braun and torch.optim.Rprop (Optax 0.2.8 returns the
    previous step's, so its first update is 0)."""

    def init(params):
        step_sizes = _map(lambda p: fnp.full_like(p, learning_rate), params)
        return ScaleByRpropState(step_sizes, zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.step_sizes, "gradients", "optimizer state")
        agreement = _map(lambda g, prev: g * prev, updates, state.prev_updates)
        step_sizes = _map(
            lambda s, size: fnp.where(
                s == 0,
                size,
                fnp.clip(
                    size * fnp.where(s > 0, eta_plus, eta_minus), min_step_size, max_step_size
                ),
            ).astype(size.dtype),
            agreement,
            state.step_sizes,
        )
        steps = _map(
            lambda s, g, size: fnp.where(s < 0, 0.0, size * fnp.sign(g)).astype(g.dtype),
            agreement,
            updates,
            step_sizes,
        )
        return steps, ScaleByRpropState(step_sizes, steps)

    return GradientTransformation(init, update)


def scale_by_adan(
    b1: float = 0.98,
    b2: float = 0.92,
    b3: float = 0.99,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> GradientTransformation:
    """Adan (Xie et al.): moments of g (b1), of the gradient difference g - g_prev (b2, 0 at
    the first step) and of (g + (1 - b2) * diff)**2 (b3), each bias-corrected; the step is
    (m + (1 - b2) * v) / (sqrt(n + eps_root) + eps)."""

    def init(params):
        zeros = zeros_like_tree(params)
        return ScaleByAdanState(zeros, zeros, zeros, zeros, _count())

    def update(updates, state, params=None):
        check_matches(updates, state.m, "gradients", "optimizer state")
        first = state.t == 0
        diff = _map(
            lambda g, prev: fnp.where(first, 0.0, g - prev).astype(g.dtype), updates, state.g
        )
        m = _ema(updates, state.m, b1)
        v = _ema(diff, state.v, b2)
        n = _ema_sq(_map(lambda g, d: g + (1 - b2) * d, updates, diff), state.n, b3)
        t = _next(state.t)
        step = _map(
            lambda m_hat, v_hat, n_hat: (
                (m_hat + (1 - b2) * v_hat) / (fnp.sqrt(n_hat + eps_root) + eps)
            ),
            _bias_corrected(m, b1, t),
            _bias_corrected(v, b2, t),
            _bias_corrected(n, b3, t),
        )
        return step, ScaleByAdanState(m, v, n, updates, t)

    return GradientTransformation(init, update)


def scale_by_optimistic_gradient(alpha: float = 1.0, beta: float = 1.0) -> GradientTransformation:
    """(alpha + beta) * g - beta * g_prev (optimistic gradient descent, Daskalakis et al.);
    at the first step, with no previous gradient, alpha * g."""

    def init(params):
        return ScaleByOptimisticGradientState(fnp.asarray(True), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.previous_gradient, "gradients", "optimizer state")
        previous = _map(
            lambda g, prev: fnp.where(state.is_initial_step, g, prev).astype(g.dtype),
            updates,
            state.previous_gradient,
        )
        step = _map(lambda g, prev: (alpha + beta) * g - beta * prev, updates, previous)
        return step, ScaleByOptimisticGradientState(fnp.asarray(False), updates)

    return GradientTransformation(init, update)


def scale_by_polyak(
    f_min: float = 0.0, max_learning_rate: float = 1.0, eps: float = 0.0, variant: str = "sps"
) -> GradientTransformationExtraArgs:
    """Polyak's step size (Loizou et al.): g * min((f(x) - f_min) / (|g|**2 + eps),
    max_learning_rate), 0 where |g|**2 + eps is below the float epsilon; 'sps+' clips a
    negative gap f(x) - f_min at 0. The loss f(x) is the `value` keyword of update."""
    if variant not in ("sps", "sps+"):
        raise ValueError(f"scale_by_polyak: variant must be 'sps' or 'sps+', got {variant!r}")

    def update(updates, state, params=None, *, value, **extra_args):
        squared_norm = sum(fnp.sum(abs_sq(g)) for g in tree_util.tree_leaves(updates))
        dtype = fnp.asarray(squared_norm).dtype
        gap = fnp.asarray(value - f_min).astype(dtype)
        if variant == "sps+":
            gap = fnp.maximum(gap, 0.0)
        denominator = squared_norm + eps
        step = fnp.where(
            denominator <= fnp.finfo(dtype).eps,
            0.0,
            fnp.minimum(gap / denominator, max_learning_rate),
        ).astype(dtype)
        return _map(lambda g: g * step.astype(g.dtype), updates), state

    return GradientTransformationExtraArgs(lambda params: EmptyState(), update)


def _norm(x):
    return fnp.sqrt(fnp.sum(fnp.square(x)))


def scale_by_distance_over_gradients(
    reps_rel: float = 1e-6, eps: float = 1e-8, param_dtype=fnp.float32, global_scale: float = 1.0
) -> GradientTransformation:
    """DoG, per leaf (Ivgi et al.): g * global_scale * max_dist / sqrt(sum of |g|**2 so far +
    eps), max_dist the largest distance of the parameters from where they started (at least
    reps_rel * (1 + |x0|)). The per-leaf statistics are scalars, so every update keeps its
    leaf's shape (Optax keeps them in shape (1,), which turns scalar leaves into vectors)."""

    def init(params):
        return ScaleByDistanceOverGradientsState(
            _map(lambda p: reps_rel * (1 + _norm(p)), params),
            _map(lambda p: fnp.zeros((), fnp.asarray(p).dtype), params),
            _map(lambda p: fnp.asarray(p).astype(param_dtype), params),
        )

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(
                "scale_by_distance_over_gradients needs params: call update(grads, state, params)"
            )
        check_matches(updates, params, "gradients", "parameters")
        max_dist = _map(
            lambda d, p, p0: fnp.maximum(d, _norm(p - p0)),
            state.max_dist,
            params,
            state.init_params,
        )
        total = _map(lambda s, g: s + fnp.sum(fnp.square(g)), state.grad_sum_of_squares, updates)
        scaled = _map(
            lambda g, d, s: (global_scale * d / fnp.sqrt(s + eps)).astype(g.dtype) * g,
            updates,
            max_dist,
            total,
        )
        return scaled, ScaleByDistanceOverGradientsState(max_dist, total, state.init_params)

    return GradientTransformation(init, update)


def ema(decay: float, debias: bool = True, accumulator_dtype=None) -> GradientTransformation:
    """The exponential moving average decay * ema + (1 - decay) * g, divided by
    1 - decay**count with debias; kept in accumulator_dtype when given."""

    def init(params):
        zeros = _map(lambda p: fnp.zeros_like(p, dtype=accumulator_dtype), params)
        return EmaState(_count(), zeros)

    def update(updates, state, params=None):
        check_matches(updates, state.ema, "gradients", "optimizer state")
        average = _ema(updates, state.ema, decay)
        count = _next(state.count)
        out = _bias_corrected(average, decay, count) if debias else average
        if accumulator_dtype is not None:
            average = _map(lambda a: a.astype(accumulator_dtype), average)
        return out, EmaState(count, average)

    return GradientTransformation(init, update)


def add_noise(
    eta: float, gamma: float, key=None, *, seed: int | None = None
) -> GradientTransformation:
    """g + N(0, eta / t**gamma) noise at step t (Neelakantan et al.), independent per
    element; `key` is an `fg.random` key or an integer seed (0 when None), `seed` the older
    name of an integer key."""
    if seed is not None:
        if key is not None:
            raise ValueError("add_noise: give key or seed, not both")
        key = seed

    def init(params):
        rng_key = random.PRNGKey(0 if key is None else key) if _is_seed(key) else key
        return AddNoiseState(_count(), rng_key)

    def update(updates, state, params=None):
        count = _next(state.count)
        std = fnp.sqrt(eta / count.astype(fnp.float32) ** gamma)
        rng_key, sample_key = random.split(state.rng_key)
        leaves, treedef = tree_util.tree_flatten(updates)
        keys = random.split(sample_key, len(leaves)) if leaves else []
        noisy = [
            g + std.astype(g.dtype) * random.normal(k, fnp.shape(g), g.dtype)
            for g, k in zip(leaves, keys)
        ]
        return tree_util.tree_unflatten(treedef, noisy), AddNoiseState(count, rng_key)

    return GradientTransformation(init, update)


def _is_seed(key) -> bool:
    return key is None or isinstance(key, int)
