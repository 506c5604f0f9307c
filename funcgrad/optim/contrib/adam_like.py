"""Adam's relatives: ACProp (Zhuang et al. 2021; scaled by the spread of the gradients
around the momentum, as seen before this step), ADOPT (Taniguchi et al. 2024; the second
moment of the previous steps normalizes the gradient before the momentum) and AdEMAMix
(Pagliardini et al. 2024; a second, slow momentum added to Adam's), with its simplified
form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad.optim.base import GradientTransformation, abs_sq, chain, zeros_like_tree
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    ScaleByAdamState,
    ScaleByBeliefState,
    _bias_corrected,
    _cast,
    _count,
    _ema,
    _ema_sq,
    _map,
    _next,
    _zeros,
    add_decayed_weights,
    scale_by_learning_rate,
)


class ScaleByAdemamixState(NamedTuple):
    count: Any
    count_m2: Any
    m1: Any  # the fast first moment
    m2: Any  # the slow first moment
    nu: Any


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
    t: Any
    m: Any  # the (undamped) accumulated gradients
    n: Any


def scale_by_adopt(
    b1: float = 0.9,
    b2: float = 0.9999,
    eps: float = 1e-6,
    mu_dtype=None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[Any], Any] = lambda count: count**0.25,
) -> GradientTransformation:
    """ADOPT: the first step only records v = g**2 (its update is 0); after, m <- b1 m +
    (1 - b1) clip(g / max(sqrt(v_prev), eps), +-clip_value_fn(t)) with the v of the steps
    before, then v <- b2 v + (1 - b2) g**2; the update is m (with nesterov, m once more
    updated by the same term). t counts from 0, so the first clip is to 0."""

    def init(params):
        return ScaleByAdamState(_count(), _zeros(params, mu_dtype), zeros_like_tree(params))

    def update(updates, state, params=None):
        started = state.count > 0
        nu = _map(
            lambda g, v: fnp.where(started, b2 * v + (1 - b2) * abs_sq(g), abs_sq(g)).astype(
                v.dtype
            ),
            updates,
            state.nu,
        )
        normalized = _map(lambda g, v: g / fnp.maximum(fnp.sqrt(v), eps), updates, state.nu)
        if use_clipping:
            bound = clip_value_fn(state.count)
            normalized = _map(lambda u: fnp.clip(u, -bound, bound), normalized)
        decay = fnp.where(started, b1, 1.0)
        mu = _map(lambda u, m: decay * m + (1 - decay) * u, normalized, state.mu)
        out = _map(lambda u, m: decay * m + (1 - decay) * u, normalized, mu) if nesterov else mu
        return out, ScaleByAdamState(_next(state.count), _cast(mu, mu_dtype), nu)

    return GradientTransformation(init, update)


def adopt(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.9999,
    eps: float = 1e-6,
    mu_dtype=None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[Any], Any] = lambda count: count**0.25,
) -> GradientTransformation:
    return chain(
        scale_by_adopt(
            b1,
            b2,
            eps,
            mu_dtype,
            nesterov=nesterov,
            use_clipping=use_clipping,
            clip_value_fn=clip_value_fn,
        ),
        scale_by_learning_rate(learning_rate),
    )


def scale_by_ademamix(
    b1: float = 0.9,
    b2: float = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 6.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
) -> GradientTransformation:
    """(m1_hat + alpha m2) / (sqrt(nu_hat + eps_root) + eps): Adam's bias-corrected fast
    moment m1 and second moment nu, plus alpha times the slow moment m2 of decay b3 (not
    bias-corrected). b3 and alpha may be schedules of the step count (warmups, as the paper
    advises). The three moments are kept in mu_dtype when given."""

    def init(params):
        zeros = _zeros(params, mu_dtype)
        return ScaleByAdemamixState(_count(), _count(), zeros, zeros, zeros)

    def update(updates, state, params=None):
        slow_decay = b3(state.count_m2) if callable(b3) else b3
        mix = alpha(state.count_m2) if callable(alpha) else alpha
        m1 = _ema(updates, state.m1, b1)
        m2 = _ema(updates, state.m2, slow_decay)
        nu = _ema_sq(updates, state.nu, b2)
        count = _next(state.count)
        out = _map(
            lambda m1_hat, m2_, v: (m1_hat + mix * m2_) / (fnp.sqrt(v + eps_root) + eps),
            _bias_corrected(m1, b1, count),
            m2,
            _bias_corrected(nu, b2, count),
        )
        m1, m2, nu = (_cast(moment, mu_dtype) for moment in (m1, m2, nu))
        return out, ScaleByAdemamixState(count, _next(state.count_m2), m1, m2, nu)

    return GradientTransformation(init, update)


def ademamix(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 5.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    weight_decay: float = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> GradientTransformation:
    """AdEMAMix with decoupled weight decay."""
    return chain(
        scale_by_ademamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def scale_by_simplified_ademamix(
    b1: float = 0.99,
    b2: float = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> GradientTransformation:
    """(m + alpha g) / (sqrt(n_hat + eps_root) + eps) with m <- b1 m + g (no 1 - b1: the
    accumulated gradients) and n the bias-corrected second moment of decay b2."""

    def init(params):
        zeros = zeros_like_tree(params)
        return ScaleBySimplifiedAdEMAMixState(_count(), zeros, zeros)

    def update(updates, state, params=None):
        mix = alpha(state.t) if callable(alpha) else alpha
        m = _map(lambda g, m_: g + b1 * m_, updates, state.m)
        n = _map(lambda g, n_: b2 * n_ + (1 - b2) * g * g, updates, state.n)
        t = _next(state.t)
        out = _map(
            lambda m_, g, v: (m_ + mix * g) / (fnp.sqrt(v + eps_root) + eps),
            m,
            updates,
            _bias_corrected(n, b2, t),
        )
        return out, ScaleBySimplifiedAdEMAMixState(t, m, n)

    return GradientTransformation(init, update)


def simplified_ademamix(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.99,
    b2: float = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> GradientTransformation:
    """Simplified AdEMAMix with decoupled weight decay."""
    return chain(
        scale_by_simplified_ademamix(b1, b2, alpha, eps, eps_root),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def scale_by_acprop(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-16, eps_root: float = 1e-16
) -> GradientTransformation:
    """ACProp (Zhuang et al. 2021): the gradient divided by sqrt(s_hat) + eps, where s is
    the decaying mean of the squared prediction errors (g - m)^2 of the momentum m (plus
    eps_root each step) and s_hat its bias-corrected value from before this step, so the
    scale does not depend on the current gradient (1 on the first step)."""

    def init(params):
        return ScaleByBeliefState(_count(), zeros_like_tree(params), zeros_like_tree(params))

    def update(updates, state, params=None):
        mu = _ema(updates, state.mu, b1)
        errors = _map(lambda g, m: g - m, updates, state.mu)
        nu = _map(lambda s: s + eps_root, _ema_sq(errors, state.nu, b2))
        count = _next(state.count)
        first = state.count == 0
        previous = _bias_corrected(state.nu, b2, fnp.where(first, count, state.count))
        out = _map(lambda g, s: g / (fnp.sqrt(fnp.where(first, 1, s)) + eps), updates, previous)
        return out, ScaleByBeliefState(count, mu, nu)

    return GradientTransformation(init, update)


def acprop(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-16,
    eps_root: float = 1e-16,
    weight_decay: float = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> GradientTransformation:
    """ACProp with decoupled weight decay."""
    return chain(
        scale_by_acprop(b1, b2, eps, eps_root),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )
