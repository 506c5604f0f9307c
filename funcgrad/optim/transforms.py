"""The building blocks optimizers chain together, with Optax's names and update equations.
As `optim.transforms` this is also Optax's namespace of that name, which adds the wrappers,
per-unit clipping and monitors defined in the modules named at the end."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import dtypes, lax, tree_util
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


class ScaleByRmsWithCountState(NamedTuple):
    count: Any
    nu: Any


class ScaleByRStdDevState(NamedTuple):
    mu: Any
    nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
    count: Any
    mu: Any
    nu: Any


class ScaleByRssState(NamedTuple):
    sum_of_squares: Any


class ScaleByLionState(NamedTuple):
    count: Any
    mu: Any


class TraceState(NamedTuple):
    trace: Any


class ScaleByAmsgradState(NamedTuple):
    count: Any
    mu: Any
    nu: Any
    nu_max: Any


class ScaleByAdaDeltaState(NamedTuple):
    e_g: Any
    e_x: Any


class ScaleByNovogradState(NamedTuple):
    count: Any
    mu: Any
    nu: Any  # one scalar per leaf: the decaying mean of the leaf's squared norm


class ScaleByBeliefState(NamedTuple):
    count: Any
    mu: Any
    nu: Any


class ScaleByTrustRatioState(NamedTuple):
    """scale_by_trust_ratio keeps no state."""


# The states of the transformations that keep none, by Optax's names.
AddDecayedWeightsState = ClipState = ClipByGlobalNormState = ScaleState = EmptyState


def _count() -> Any:
    return fnp.zeros((), fnp.int32)


def _next(count) -> Any:
    """count + 1, saturating instead of wrapping around."""
    largest = fnp.iinfo(fnp.int32).max
    return fnp.where(count < largest, count + 1, largest).astype(fnp.int32)


def _map(f, *trees):
    return tree_util.tree_map(f, *trees)


def _zeros(params, dtype=None):
    """Zeros like each leaf, in `dtype` when given."""
    if dtype is None:
        return zeros_like_tree(params)
    return _map(lambda p: fnp.zeros(fnp.shape(p), dtype), params)


def _cast(tree, dtype):
    """Each leaf in `dtype` (an accumulator's chosen dtype), unchanged when None."""
    if dtype is None:
        return tree
    return _map(lambda x: fnp.asarray(x).astype(dtype), tree)


def _cast_like(tree, like):
    """Each leaf in the dtype of its counterpart in `like` (the state it replaces)."""
    return _map(lambda x, y: fnp.asarray(x).astype(fnp.asarray(y).dtype), tree, like)


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


def scale_by_learning_rate(
    learning_rate: ScalarOrSchedule | None = None, *, flip_sign: bool = True
) -> GradientTransformation:
    """-learning_rate * updates (descent), the learning rate a number or a schedule; None
    leaves the updates as they are (not negated either)."""
    if learning_rate is None:
        return _stateless(lambda updates, params: updates)
    sign = -1.0 if flip_sign else 1.0
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def _bias_corrected(moments, decay, count):
    """moments / (1 - decay**count), leaf by leaf."""
    correction = 1 - decay ** count.astype(fnp.float32)
    return _map(lambda m: m / correction.astype(fnp.asarray(m).dtype), moments)


def _first_moment_hat(mu, updates, b1, count, nesterov):
    """The bias-corrected first moment, or with `nesterov` its look-ahead (Dozat's NAdam):
    b1 * mu_hat(count + 1) + (1 - b1) * g_hat(count)."""
    if not nesterov:
        return _bias_corrected(mu, b1, count)
    return _map(
        lambda m, g: b1 * m + (1 - b1) * g,
        _bias_corrected(mu, b1, _next(count)),
        _bias_corrected(updates, b1, count),
    )


def _adam_step(mu_hat, nu_hat, eps, eps_root):
    """Adam's step from (bias-corrected) moments: m / (sqrt(v + eps_root) + eps)."""
    return _map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)


def _widened(moment, g):
    """A moment stored narrower than the gradient (a bfloat16 `mu_dtype`) in the wider dtype,
    so that a step rounds it only once, when it is stored again."""
    moment = fnp.asarray(moment)
    return moment.astype(dtypes.widened(moment.dtype, fnp.asarray(g).dtype))


def _ema(updates, moments, decay):
    return _map(lambda g, m: decay * _widened(m, g) + (1 - decay) * g, updates, moments)


def _ema_sq(updates, moments, decay):
    return _map(lambda g, v: decay * _widened(v, g) + (1 - decay) * abs_sq(g), updates, moments)


def scale_by_adam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    """m_hat / (sqrt(v_hat + eps_root) + eps) with bias-corrected moments (Kingma & Ba);
    `nesterov` uses NAdam's look-ahead first moment. The first moment is kept in `mu_dtype`
    when given (e.g. bfloat16 to halve its memory): each step computes with it widened and
    rounds only what is stored."""

    def init(params):
        return ScaleByAdamState(_count(), _zeros(params, mu_dtype), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _ema(updates, state.mu, b1)
        nu = _ema_sq(updates, state.nu, b2)
        count = _next(state.count)
        mu_hat = _first_moment_hat(mu, updates, b1, count, nesterov)
        nu_hat = _bias_corrected(nu, b2, count)
        new_state = ScaleByAdamState(count, _cast(mu, mu_dtype), _cast_like(nu, state.nu))
        return _adam_step(mu_hat, nu_hat, eps, eps_root), new_state

    return GradientTransformation(init, update)


def scale_by_adamax(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """m_hat / u, u <- max(b2 * u, |g| + eps): Adam under the infinity norm. As in Optax,
    eps is inside the maximum, so it decays with u rather than being added at the end."""

    def init(params):
        return ScaleByAdamState(_count(), zeros_like_tree(params), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _ema(updates, state.mu, b1)
        nu = _map(lambda g, u: fnp.maximum(b2 * u, fnp.abs(g) + eps), updates, state.nu)
        count = _next(state.count)
        scaled = _map(lambda m, u: m / u, _bias_corrected(mu, b1, count), nu)
        return scaled, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_amsgrad(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> GradientTransformation:
    """Adam with the running maximum of the (bias-corrected) second moment as denominator
    (Reddi et al.), so the step size never grows; each bias correction may be turned off.
    The first moment is kept in `mu_dtype` when given."""

    def init(params):
        zeros = zeros_like_tree(params)
        return ScaleByAmsgradState(_count(), _zeros(params, mu_dtype), zeros, zeros)

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _ema(updates, state.mu, b1)
        nu = _ema_sq(updates, state.nu, b2)
        count = _next(state.count)
        mu_hat = _bias_corrected(mu, b1, count) if bias_correction_mu else mu
        nu_hat = _bias_corrected(nu, b2, count) if bias_correction_nu else nu
        nu_max = _map(fnp.maximum, state.nu_max, nu_hat)
        scaled = _adam_step(mu_hat, nu_max, eps, eps_root)
        return scaled, ScaleByAmsgradState(count, _cast(mu, mu_dtype), nu, nu_max)

    return GradientTransformation(init, update)


def scale_by_radam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    threshold: float = 5.0,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    """Rectified Adam (Liu et al.): while the variance of the adaptive rate is intractable
    (rho_t < threshold) the update is the bias-corrected momentum alone; after, Adam's
    update times the rectification r_t."""
    rho_inf = 2.0 / (1 - b2) - 1

    def init(params):
        return ScaleByAdamState(_count(), zeros_like_tree(params), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _ema(updates, state.mu, b1)
        nu = _ema_sq(updates, state.nu, b2)
        count = _next(state.count)
        t = count.astype(fnp.float32)
        b2t = b2**t
        rho = rho_inf - 2 * t * b2t / (1 - b2t)
        tractable = rho >= threshold
        # Clamped below at 4 so the square root is real on the branch `where` discards.
        safe_rho = fnp.maximum(rho, 4.0)
        r = fnp.sqrt(
            (safe_rho - 4) * (safe_rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * safe_rho)
        )
        mu_hat = _first_moment_hat(mu, updates, b1, count, nesterov)
        nu_hat = _bias_corrected(nu, b2, count)
        scaled = _map(
            lambda m, v: fnp.where(
                tractable, r.astype(m.dtype) * m / (fnp.sqrt(v + eps_root) + eps), m
            ).astype(m.dtype),
            mu_hat,
            nu_hat,
        )
        return scaled, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_yogi(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-3,
    eps_root: float = 0.0,
    initial_accumulator_value: float = 1e-6,
) -> GradientTransformation:
    """Adam whose second moment moves additively, v <- v - (1 - b2) sign(v - g**2) g**2
    (Zaheer et al.), both moments starting at initial_accumulator_value."""

    def init(params):
        start = _map(lambda p: fnp.full_like(p, initial_accumulator_value), params)
        return ScaleByAdamState(_count(), start, start)

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _ema(updates, state.mu, b1)
        nu = _map(
            lambda g, v: v - (1 - b2) * fnp.sign(v - abs_sq(g)) * abs_sq(g), updates, state.nu
        )
        count = _next(state.count)
        scaled = _adam_step(
            _bias_corrected(mu, b1, count), _bias_corrected(nu, b2, count), eps, eps_root
        )
        return scaled, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_adadelta(rho: float = 0.9, eps: float = 1e-6) -> GradientTransformation:
    """g * sqrt(E[dx**2] + eps) / sqrt(E[g**2] + eps) (Zeiler): the units of the update are
    the parameters' own, the previous steps' mean square setting the scale."""

    def init(params):
        return ScaleByAdaDeltaState(zeros_like_tree(params), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.e_g, "gradients", "optimizer state")
        e_g = _ema_sq(updates, state.e_g, rho)
        scaled = _map(
            lambda g, eg, ex: fnp.sqrt(ex + eps) / fnp.sqrt(eg + eps) * g,
            updates,
            e_g,
            state.e_x,
        )
        e_x = _ema_sq(scaled, state.e_x, rho)
        return scaled, ScaleByAdaDeltaState(e_g, e_x)

    return GradientTransformation(init, update)


def scale_by_novograd(
    b1: float = 0.9,
    b2: float = 0.25,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    mu_dtype=None,
) -> GradientTransformation:
    """NovoGrad (Ginsburg et al.): the second moment is one number per leaf, the decaying
    mean of its squared norm (the first step takes the norm itself); the first moment
    accumulates g / (sqrt(nu + eps_root) + eps) + weight_decay * params without (1 - b1),
    from zero, so its first value is that term alone. The update is the first moment, kept
    (and returned) in `mu_dtype` when given."""

    def init(params):
        nu = _map(lambda p: fnp.zeros((), fnp.asarray(p).dtype), params)
        return ScaleByNovogradState(_count(), _zeros(params, mu_dtype), nu)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_novograd needs params: call update(grads, state, params)")
        check_matches(updates, state.mu, "gradients", "optimizer state")
        count = _next(state.count)
        first = count == 1
        nu = _map(
            lambda g, n: fnp.where(
                first, fnp.sum(abs_sq(g)), b2 * n + (1 - b2) * fnp.sum(abs_sq(g))
            ).astype(n.dtype),
            updates,
            state.nu,
        )
        mu = _map(
            lambda g, p, m, n: (
                b1 * _widened(m, g) + g / (fnp.sqrt(n + eps_root) + eps) + weight_decay * p
            ),
            updates,
            params,
            state.mu,
            nu,
        )
        mu = _cast(mu, mu_dtype)
        return mu, ScaleByNovogradState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_belief(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-16,
    eps_root: float = 1e-16,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    """AdaBelief (Zhuang et al.): Adam whose second moment tracks (g - mu)**2, the belief in
    the gradient's prediction by the (already updated) first moment, plus eps_root."""

    def init(params):
        return ScaleByBeliefState(_count(), zeros_like_tree(params), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _ema(updates, state.mu, b1)
        surprise = _map(lambda g, m: g - m, updates, mu)
        nu = _map(lambda v: v + eps_root, _ema_sq(surprise, state.nu, b2))
        count = _next(state.count)
        scaled = _map(
            lambda m, v: m / (fnp.sqrt(v) + eps),
            _first_moment_hat(mu, updates, b1, count, nesterov),
            _bias_corrected(nu, b2, count),
        )
        return scaled, ScaleByBeliefState(count, mu, nu)

    return GradientTransformation(init, update)


def _safe_norm(x, min_norm: float):
    """The l2 norm of x, min_norm where that is smaller."""
    norm = fnp.sqrt(fnp.sum(abs_sq(x)))
    return fnp.where(norm <= min_norm, min_norm, norm).astype(norm.dtype)


def scale_by_trust_ratio(
    min_norm: float = 0.0, trust_coefficient: float = 1.0, eps: float = 0.0
) -> GradientTransformation:
    """Each leaf times trust_coefficient * |params| / (|update| + eps) (LARS, LAMB), or
    unchanged where either norm is 0."""

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_trust_ratio needs params: call update(grads, state, params)")
        check_matches(updates, params, "gradients", "parameters")

        def rescale(u, p):
            param_norm, update_norm = _safe_norm(p, min_norm), _safe_norm(u, min_norm)
            ratio = trust_coefficient * param_norm / (update_norm + eps)
            degenerate = (param_norm == 0.0) | (update_norm == 0.0)
            return u * fnp.where(degenerate, 1.0, ratio).astype(u.dtype)

        return _map(rescale, updates, params), state

    return GradientTransformation(lambda params: ScaleByTrustRatioState(), update)


def _inverse_root(variance, eps, eps_in_sqrt: bool):
    """1 / sqrt(variance + eps), or 1 / (sqrt(variance) + eps) without eps_in_sqrt."""
    if eps_in_sqrt:
        return lax.rsqrt(variance + eps)
    return 1 / (fnp.sqrt(variance) + eps)


def scale_by_rms(
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> GradientTransformation:
    """g / sqrt(nu + eps), nu the decaying mean of g**2 (RMSProp); eps outside the root
    without eps_in_sqrt, and nu divided by 1 - decay**t with bias_correction (the state
    then counts steps)."""

    def init(params):
        nu = _map(lambda p: fnp.full_like(p, initial_scale), params)
        return ScaleByRmsWithCountState(_count(), nu) if bias_correction else ScaleByRmsState(nu)

    def update(updates, state, params=None):
        check_matches(updates, state.nu, "gradients", "optimizer state")
        nu = _ema_sq(updates, state.nu, decay)
        if bias_correction:
            count = _next(state.count)
            nu_hat, new_state = (
                _bias_corrected(nu, decay, count),
                ScaleByRmsWithCountState(count, nu),
            )
        else:
            nu_hat, new_state = nu, ScaleByRmsState(nu)
        scaled = _map(lambda g, v: g * _inverse_root(v, eps, eps_in_sqrt), updates, nu_hat)
        return scaled, new_state

    return GradientTransformation(init, update)


def scale_by_stddev(
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> GradientTransformation:
    """g / sqrt(nu - mu**2 + eps): RMSProp centered by the decaying mean of g; eps outside
    the root without eps_in_sqrt, both moments bias-corrected with bias_correction."""

    def init(params):
        mu = zeros_like_tree(params)
        nu = _map(lambda p: fnp.full_like(p, initial_scale), params)
        if bias_correction:
            return ScaleByRStdDevWithCountState(_count(), mu, nu)
        return ScaleByRStdDevState(mu, nu)

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        mu = _ema(updates, state.mu, decay)
        nu = _ema_sq(updates, state.nu, decay)
        if bias_correction:
            count = _next(state.count)
            mu_hat, nu_hat = _bias_corrected(mu, decay, count), _bias_corrected(nu, decay, count)
            new_state = ScaleByRStdDevWithCountState(count, mu, nu)
        else:
            mu_hat, nu_hat, new_state = mu, nu, ScaleByRStdDevState(mu, nu)
        scaled = _map(
            lambda g, m, v: g * _inverse_root(v - abs_sq(m), eps, eps_in_sqrt),
            updates,
            mu_hat,
            nu_hat,
        )
        return scaled, new_state

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


_LION_MODES = {
    "hard": lambda x, beta: fnp.sign(x),
    "smooth": lambda x, beta: fnp.tanh(beta * x),
    "refined": lambda x, beta: fnp.where(fnp.abs(x) < 1.0, x, fnp.sign(x)),
}


def scale_by_lion(
    b1: float = 0.9,
    b2: float = 0.99,
    mu_dtype=None,
    *,
    mode: str = "hard",
    smooth_beta: float = 1.0,
) -> GradientTransformation:
    """sign(b1 * mu + (1 - b1) * g), then mu <- b2 * mu + (1 - b2) * g (Chen et al. 2023).
    mode "smooth" takes tanh(smooth_beta * x) in place of the sign, "refined" keeps x where
    |x| < 1; mu is kept in `mu_dtype` when given."""
    if mode not in _LION_MODES:
        raise ValueError(f"scale_by_lion: mode must be one of {sorted(_LION_MODES)}, got {mode!r}")
    direction_of = _LION_MODES[mode]

    def init(params):
        return ScaleByLionState(_count(), _zeros(params, mu_dtype))

    def update(updates, state, params=None):
        check_matches(updates, state.mu, "gradients", "optimizer state")
        direction = _map(
            lambda g, m: direction_of(b1 * _widened(m, g) + (1 - b1) * g, smooth_beta),
            updates,
            state.mu,
        )
        mu = _cast(_ema(updates, state.mu, b2), mu_dtype)
        return direction, ScaleByLionState(_next(state.count), mu)

    return GradientTransformation(init, update)


def trace(decay: float, nesterov: bool = False, accumulator_dtype=None) -> GradientTransformation:
    """Momentum: t <- g + decay * t; the update is t, or g + decay * t with Nesterov. The
    trace is stored in `accumulator_dtype` when given."""

    def init(params):
        return TraceState(_zeros(params, accumulator_dtype))

    def update(updates, state, params=None):
        check_matches(updates, state.trace, "gradients", "optimizer state")
        new = _map(lambda g, t: g + decay * _widened(t, g), updates, state.trace)
        out = _map(lambda g, t: g + decay * t, updates, new) if nesterov else new
        return out, TraceState(_cast(new, accumulator_dtype))

    return GradientTransformation(init, update)


class WeightDecaySchedule(NamedTuple):
    count: Any  # int32 steps taken, the argument of a scheduled weight decay


def add_decayed_weights(weight_decay: ScalarOrSchedule = 0.0, mask=None) -> GradientTransformation:
    """updates + weight_decay * params (decoupled weight decay), on the leaves `mask` selects:
    a pytree of bools with the structure of params or a prefix of it (a bool then stands for
    a whole subtree, as in Optax), or a function of params returning one. A callable
    weight_decay is a schedule of the step count."""
    scheduled = callable(weight_decay)

    def decay(updates, params, rate):
        return _map(lambda g, p: g + fnp.asarray(rate).astype(p.dtype) * p, updates, params)

    def init(params):
        return WeightDecaySchedule(_count()) if scheduled else EmptyState()

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("add_decayed_weights needs params: call update(grads, state, params)")
        check_matches(updates, params, "gradients", "parameters")
        rate = weight_decay(state.count) if scheduled else weight_decay
        new_state = WeightDecaySchedule(_next(state.count)) if scheduled else state
        chosen = mask(params) if callable(mask) else mask
        if chosen is None:
            return decay(updates, params, rate), new_state
        decayed = _map(lambda m, g, p: decay(g, p, rate) if m else g, chosen, updates, params)
        return decayed, new_state

    return GradientTransformation(init, update)


def normalize_by_update_norm(
    scale_factor: float = 1.0, eps: float = 1e-6
) -> GradientTransformation:
    """The updates times scale_factor / (their global norm + eps): steps of one length."""

    def rescale(updates, params):
        norm = (global_norm(updates) + eps) / scale_factor
        return _map(lambda g: g / norm.astype(g.dtype), updates)

    return _stateless(rescale)


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


# Optax's `transforms` namespace also names the wrappers, clipping rules and monitors, which
# live in modules that import this one; they are looked up there on first access.
_DEFINED_ELSEWHERE = {
    "funcgrad.optim.base": ("chain", "named_chain"),
    "funcgrad.optim.scaling": ("AddNoiseState", "EmaState", "add_noise", "ema"),
    "funcgrad.optim.conditional": (
        "ConditionFn",
        "ConditionallyMaskState",
        "ConditionallyTransformState",
        "conditionally_mask",
        "conditionally_transform",
    ),
    "funcgrad.optim.constraints": (
        "NonNegativeParamsState",
        "ZeroNansState",
        "adaptive_grad_clip",
        "clip_by_block_rms",
        "keep_params_nonnegative",
        "per_example_global_norm_clip",
        "per_example_layer_norm_clip",
        "unitwise_clip",
        "unitwise_norm",
        "zero_nans",
    ),
    "funcgrad.optim.monitoring": (
        "MonitorState",
        "SnapshotState",
        "measure_with_ema",
        "monitor",
        "snapshot",
    ),
    "funcgrad.optim.wrappers": (
        "ApplyIfFiniteState",
        "MaskedState",
        "MultiSteps",
        "MultiStepsState",
        "PartitionState",
        "ShouldSkipUpdateFunction",
        "apply_if_finite",
        "flatten",
        "freeze",
        "masked",
        "partition",
        "selective_transform",
        "skip_large_updates",
        "skip_not_finite",
    ),
}
_HOME_MODULE = {name: module for module, names in _DEFINED_ELSEWHERE.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _HOME_MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME_MODULE[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME_MODULE])
