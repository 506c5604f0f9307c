"""Lookahead (Zhang et al.): a fast optimizer takes sync_period steps, then slow weights move
slow_step_size of the way towards the fast ones, and the fast weights restart from there."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import tree_util
from funcgrad.optim.base import GradientTransformation
from funcgrad.optim.transforms import _count
from funcgrad.optim.wrappers import _select


class LookaheadParams(NamedTuple):
    """The fast parameters (take gradients here) and the slow ones (evaluate these)."""

    fast: Any
    slow: Any

    @classmethod
    def init_synced(cls, params) -> LookaheadParams:
        return cls(fast=params, slow=params)


class LookaheadState(NamedTuple):
    fast_state: Any
    steps_since_sync: Any


def lookahead(
    fast_optimizer: GradientTransformation,
    sync_period: int,
    slow_step_size: float,
    reset_state: bool = False,
) -> GradientTransformation:
    """Updates for `LookaheadParams`, to be applied unchanged with `apply_updates`. On a
    synchronising step (every sync_period-th) the fast step x_fast + u is taken first, then
    slow <- slow + slow_step_size * (x_fast + u - slow) and fast <- the new slow; with
    reset_state the fast optimizer's state also restarts. Gradients are those of the fast
    parameters; init takes `LookaheadParams` or the fast parameters alone."""
    if sync_period < 1:
        raise ValueError(f"lookahead: sync_period must be at least 1, got {sync_period}")

    def init(params):
        fast = params.fast if isinstance(params, LookaheadParams) else params
        return LookaheadState(fast_optimizer.init(fast), _count())

    def update(updates, state, params=None):
        if not isinstance(params, LookaheadParams):
            raise ValueError(
                "lookahead needs LookaheadParams (fast and slow parameters) as params, got "
                f"{type(params).__name__}"
            )
        fast_updates, fast_state = fast_optimizer.update(updates, state.fast_state, params.fast)
        sync = state.steps_since_sync == sync_period - 1
        difference = tree_util.tree_map(
            lambda f, u, s: f + u - s, params.fast, fast_updates, params.slow
        )
        slow_out = tree_util.tree_map(
            lambda d: fnp.where(sync, slow_step_size * d, 0).astype(d.dtype), difference
        )
        fast_out = tree_util.tree_map(
            lambda u, d: fnp.where(sync, u - (1 - slow_step_size) * d, u).astype(u.dtype),
            fast_updates,
            difference,
        )
        if reset_state:
            fast_state = _select(sync, fast_optimizer.init(params.fast), fast_state)
        steps = ((state.steps_since_sync + 1) % sync_period).astype(fnp.int32)
        return LookaheadParams(fast_out, slow_out), LookaheadState(fast_state, steps)

    return GradientTransformation(init, update)
