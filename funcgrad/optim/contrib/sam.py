"""Sharpness-aware minimization (Foret et al. 2021): descend with the gradient taken at an
adversarially perturbed point, x + rho * g / |g|, so the step favours flat minima.

In the default (transparent) mode the perturbation is itself a step the optimizer hands out:
of every `sync_period` updates, the first ones move the parameters uphill with
`adv_optimizer` (normalize then SGD with rate rho, typically), and the last takes the outer
optimizer's step from the point they started at, with the gradient the caller computed at the
perturbed point. In opaque mode one update does everything, calling `grad_fn(params, i)`
for the gradients at the perturbed points."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.optim.base import (
    EmptyState,
    GradientTransformation,
    GradientTransformationExtraArgs,
    apply_updates,
)
from funcgrad.optim.transforms import _map, _stateless
from funcgrad.optim.tree_utils import tree_norm

NormalizeState = EmptyState


class SAMState(NamedTuple):
    steps_since_sync: Any
    opt_state: Any
    adv_state: Any
    cache: Any  # the parameters the perturbation started from (None in opaque mode)


def normalize() -> GradientTransformation:
    """The updates divided by their global l2 norm."""

    def scaled(updates, params):
        norm = tree_norm(updates)
        return _map(lambda g: g / norm.astype(g.dtype), updates)

    return _stateless(scaled)


def _select(condition, on_true, on_false):
    return _map(
        lambda a, b: fnp.where(condition, a, b).astype(fnp.asarray(b).dtype), on_true, on_false
    )


def sam(
    optimizer: GradientTransformation,
    adv_optimizer: GradientTransformation,
    sync_period: int = 2,
    reset_state: bool = True,
    opaque_mode: bool = False,
    batch_axis_name: str | None = None,
) -> GradientTransformationExtraArgs:
    """SAM around `optimizer` (the outer step) with `adv_optimizer` making the perturbation,
    whose updates are negated so a descent optimizer climbs. `reset_state` restarts the
    adversary's state after each outer step. In opaque mode, `update(grads, state, params,
    grad_fn=...)` takes sync_period - 1 adversarial steps itself, averaging each gradient
    over `batch_axis_name` (under pmap) when given."""
    if sync_period < 1:
        raise ValueError(f"sam: sync_period must be at least 1, got {sync_period}")

    def init(params):
        return SAMState(
            fnp.zeros((), fnp.int32),
            optimizer.init(params),
            adv_optimizer.init(params),
            None if opaque_mode else params,
        )

    def climb(grads, adv_state, params):
        steps, adv_state = adv_optimizer.update(grads, adv_state, params)
        return _map(lambda u: -u, steps), adv_state

    def transparent_update(updates, state, params=None, *, grad_fn=None, **extra_args):
        first = state.steps_since_sync == 0
        last = state.steps_since_sync == sync_period - 1
        adv_steps, adv_state = climb(updates, state.adv_state, params)
        opt_steps, opt_state = optimizer.update(updates, state.opt_state, state.cache)
        # The outer step lands at cache + step, wherever the perturbation has taken params.
        opt_steps = _map(lambda c, p, u: c - p + u, state.cache, params, opt_steps)
        cache = _select(first, params, state.cache)
        new_updates = _select(last, opt_steps, adv_steps)
        kept_adv = adv_optimizer.init(params) if reset_state else state.adv_state
        adv_state = _select(last, kept_adv, adv_state)
        opt_state = _select(last, opt_state, state.opt_state)
        steps_since_sync = (state.steps_since_sync + 1) % sync_period
        return new_updates, SAMState(steps_since_sync, opt_state, adv_state, cache)

    def opaque_update(
        updates, state, params=None, *, grad_fn: Callable | None = None, **extra_args
    ):
        if grad_fn is None:
            raise ValueError("sam: opaque_mode needs update(..., grad_fn=grad_fn)")
        adv_params, adv_grads, adv_state = params, updates, state.adv_state
        for i in range(sync_period - 1):
            steps, adv_state = climb(adv_grads, adv_state, adv_params)
            adv_params = apply_updates(adv_params, steps)
            adv_grads = grad_fn(adv_params, i)
            if batch_axis_name is not None:
                adv_grads = lax.pmean(adv_grads, axis_name=batch_axis_name)
        if reset_state:
            adv_state = adv_optimizer.init(params)
        new_updates, opt_state = optimizer.update(adv_grads, state.opt_state, params)
        return new_updates, SAMState(fnp.zeros((), fnp.int32), opt_state, adv_state, None)

    return GradientTransformationExtraArgs(
        init, opaque_update if opaque_mode else transparent_update
    )
