"""Transformations applied on some steps only: by a condition on the step count
(`conditionally_transform`, `conditionally_mask`) or every k steps on the sum of the
gradients in between (`apply_every`). The choice is a `where` on both outcomes, so it
traces under jit into one program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import funcgrad.numpy as fnp
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    check_matches,
    with_extra_args_support,
    zeros_like_tree,
)
from funcgrad.optim.transforms import _count, _map, _next
from funcgrad.optim.wrappers import _select


class ConditionFn(Protocol):
    """The condition of `conditionally_transform` and `conditionally_mask`: whether to
    apply the inner transformation at `step` (the extra arguments of `update` too, with
    forward_extra_args)."""

    def __call__(self, step: Any, **extra_args: Any) -> Any: ...


class ConditionallyMaskState(NamedTuple):
    step: Any
    inner_state: Any


class ConditionallyTransformState(NamedTuple):
    inner_state: Any
    step: Any


class ApplyEvery(NamedTuple):
    count: Any
    grad_acc: Any


def _conditionally(inner, should_transform_fn, forward_extra_args, otherwise, make_state):
    inner = with_extra_args_support(inner)

    def update(updates, state, params=None, **extra_args):
        condition_args = extra_args if forward_extra_args else {}
        apply = fnp.asarray(should_transform_fn(state.step, **condition_args))
        new, inner_state = inner.update(updates, state.inner_state, params, **extra_args)
        new = _select(apply, new, otherwise(updates))
        inner_state = _select(apply, inner_state, state.inner_state)
        return new, make_state(inner_state, _next(state.step))

    def init(params):
        return make_state(inner.init(params), _count())

    return GradientTransformationExtraArgs(init, update)


def conditionally_transform(
    inner: GradientTransformation,
    should_transform_fn: Callable[..., Any],
    forward_extra_args: bool = False,
) -> GradientTransformationExtraArgs:
    """`inner` on the steps where should_transform_fn(step) is true (step counting every
    call from 0; with forward_extra_args it also gets update's extra keyword arguments);
    on the others the updates pass unchanged and `inner`'s state stays as it was."""
    return _conditionally(
        inner,
        should_transform_fn,
        forward_extra_args,
        lambda updates: updates,
        lambda inner_state, step: ConditionallyTransformState(inner_state, step),
    )


def conditionally_mask(
    inner: GradientTransformation,
    should_transform_fn: Callable[..., Any],
    forward_extra_args: bool = False,
) -> GradientTransformationExtraArgs:
    """As `conditionally_transform`, but the other steps give zero updates."""
    return _conditionally(
        inner,
        should_transform_fn,
        forward_extra_args,
        zeros_like_tree,
        lambda inner_state, step: ConditionallyMaskState(step, inner_state),
    )


def apply_every(k: int = 1) -> GradientTransformation:
    """The sum of the last k updates every k-th step, zero updates on the others."""

    def init(params):
        return ApplyEvery(_count(), zeros_like_tree(params))

    def update(updates, state, params=None):
        check_matches(updates, state.grad_acc, "gradients", "optimizer state")
        position = state.count % k
        restart = position == 0
        acc = _map(
            lambda g, a: fnp.where(restart, g, a + g).astype(a.dtype), updates, state.grad_acc
        )
        emit = position == k - 1
        out = _map(lambda a: fnp.where(emit, a, 0).astype(a.dtype), acc)
        return out, ApplyEvery(_next(state.count) % k, acc)

    return GradientTransformation(init, update)
