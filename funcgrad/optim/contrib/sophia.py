"""Sophia (Liu et al. 2023): a second-order clipped optimizer. The momentum is divided by an
estimate of the Hessian's diagonal (kept as a moving average, refreshed every
`update_interval` steps) and clipped element-wise, which bounds the step where the
curvature is small or negative."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import debug, lax, random, tree_util
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    chain,
    with_extra_args_support,
    zeros_like_tree,
)
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    _bias_corrected,
    _cast,
    _count,
    _ema,
    _map,
    _next,
    _zeros,
    add_decayed_weights,
    scale_by_learning_rate,
)
from funcgrad.optim.tree_utils import tree_cast, tree_dtype, tree_random_like, tree_size
from funcgrad.transforms.autodiff import grad, jvp


class HutchinsonState(NamedTuple):
    key: Any


class SophiaState(NamedTuple):
    count: Any
    mu: Any
    nu: Any  # the moving average of the Hessian diagonal estimates
    hessian_fn_state: Any


def _rademacher(key, shape, dtype):
    return (2 * random.bernoulli(key, 0.5, shape).astype(dtype) - 1).astype(dtype)


def hutchinson_estimator_diag_hessian(random_seed=None) -> GradientTransformationExtraArgs:
    """An unbiased estimate of the Hessian's diagonal, u * (H u) for random signs u (one
    Hessian-vector product), as a transformation whose update ignores the updates and takes
    the objective: update(updates, state, params, obj_fn=f). `random_seed` is a key."""

    def init(params):
        return HutchinsonState(random.PRNGKey(0) if random_seed is None else random_seed)

    def update(updates, state, params=None, obj_fn=None, **extra_args):
        if params is None:
            raise ValueError("hutchinson_estimator_diag_hessian needs params")
        if obj_fn is None:
            raise ValueError("hutchinson_estimator_diag_hessian needs update(..., obj_fn=f)")
        key, subkey = random.split(state.key)
        signs = tree_random_like(subkey, params, _rademacher, dtype=fnp.float32)
        signs = tree_cast(signs, tree_dtype(params, "lowest"))
        hvp = jvp(grad(obj_fn), (params,), (signs,))[1]
        return _map(lambda h, u: h * u, hvp, signs), HutchinsonState(key)

    return GradientTransformationExtraArgs(init, update)


# A transformation keeps no state of its own, so one default estimator serves every Sophia.
_HUTCHINSON = hutchinson_estimator_diag_hessian()


def scale_by_sophia(
    b1: float = 0.965,
    b2: float = 0.99,
    eps: float = 1e-8,
    gamma: float = 0.01,
    clip_threshold: float | None = 1.0,
    update_interval: int = 10,
    hessian_diagonal_fn: GradientTransformation = _HUTCHINSON,
    mu_dtype=None,
    verbose: bool = False,
    print_win_rate_every_n_steps: int = 0,
) -> GradientTransformationExtraArgs:
    """clip(m_hat / max(gamma h, eps), +-clip_threshold): the bias-corrected momentum over
    the Hessian diagonal estimate h (its moving average of decay b2, updated before every
    update_interval-th step from `hessian_diagonal_fn`, Hutchinson's by default, to which
    update's extra arguments such as obj_fn go). verbose prints the fraction of elements
    left unclipped every print_win_rate_every_n_steps steps."""
    hessian_fn = with_extra_args_support(hessian_diagonal_fn)

    def init(params):
        return SophiaState(
            _count(), _zeros(params, mu_dtype), zeros_like_tree(params), hessian_fn.init(params)
        )

    def update(updates, state, params=None, **hessian_kwargs):
        if params is None:
            raise ValueError("scale_by_sophia needs params: call update(grads, state, params)")
        count = _next(state.count)
        mu = _ema(updates, state.mu, b1)
        out = _map(
            lambda m, h: m / fnp.maximum(gamma * h, eps), _bias_corrected(mu, b1, count), state.nu
        )
        if clip_threshold is not None:
            if verbose and print_win_rate_every_n_steps:
                unclipped = sum(
                    fnp.sum(fnp.abs(u) < clip_threshold) for u in tree_util.tree_leaves(out)
                )
                _print_win_rate(count, unclipped / tree_size(out), print_win_rate_every_n_steps)
            out = _map(lambda u: fnp.clip(u, -clip_threshold, clip_threshold), out)

        def refresh(hessian_state, nu):
            estimate, hessian_state = hessian_fn.update(
                updates, hessian_state, params, **hessian_kwargs
            )
            return hessian_state, _ema(estimate, nu, b2)

        def keep(hessian_state, nu):
            return hessian_state, nu

        hessian_state, nu = lax.cond(
            state.count % update_interval == 0, refresh, keep, state.hessian_fn_state, state.nu
        )
        return out, SophiaState(count, _cast(mu, mu_dtype), nu, hessian_state)

    return GradientTransformationExtraArgs(init, update)


def _print_win_rate(count, rate, every: int) -> None:
    lax.cond(
        count % every == 0,
        lambda: debug.print("Sophia optimizer win rate: {}", rate),
        lambda: None,
    )


def sophia(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.965,
    b2: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 1e-4,
    weight_decay_mask: Any | Callable[[Any], Any] | None = None,
    gamma: float = 0.01,
    clip_threshold: float | None = 1.0,
    update_interval: int = 10,
    hessian_diagonal_fn: GradientTransformation = _HUTCHINSON,
    mu_dtype=None,
    verbose: bool = False,
    print_win_rate_every_n_steps: int = 0,
) -> GradientTransformationExtraArgs:
    """Sophia with decoupled weight decay; pass the objective for the Hessian estimate as
    update(grads, state, params, obj_fn=f)."""
    return chain(
        scale_by_sophia(
            b1,
            b2,
            eps,
            gamma,
            clip_threshold,
            update_interval,
            hessian_diagonal_fn,
            mu_dtype,
            verbose,
            print_win_rate_every_n_steps,
        ),
        add_decayed_weights(weight_decay, weight_decay_mask),
        scale_by_learning_rate(learning_rate),
    )
