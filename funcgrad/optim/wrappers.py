"""Transformations of transformations, with Optax's names and semantics: apply one to some
leaves only (`masked`, `multi_transform`), skip non-finite steps (`apply_if_finite`),
accumulate gradients over steps (`MultiSteps`), keep hyperparameters in the state
(`inject_hyperparams`).

Every choice made per step is a `where` on both outcomes, never Python control flow, so each
wrapper traces under jit into one program."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

import funcgrad.numpy as fnp
from funcgrad import tree_util
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    abs_sq,
    set_to_zero,
    with_extra_args_support,
    zeros_like_tree,
)
from funcgrad.optim.transforms import _count, _next


class MaskedState(NamedTuple):
    inner_state: Any


class MultiTransformState(NamedTuple):
    inner_states: Any  # dict: label -> MaskedState


PartitionState = MultiTransformState


class ApplyIfFiniteState(NamedTuple):
    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    inner_state: Any


class MultiStepsState(NamedTuple):
    mini_step: Any
    gradient_step: Any
    inner_opt_state: Any
    acc_grads: Any
    skip_state: Any = ()


class InjectHyperparamsState(NamedTuple):
    count: Any
    hyperparams: Any  # dict: name -> scalar array
    inner_state: Any


class InjectStatefulHyperparamsState(NamedTuple):
    """What `inject_hyperparams` keeps: beside the values, each schedule's own state."""

    count: Any
    hyperparams: Any  # dict: name -> scalar array
    hyperparams_states: Any  # dict: scheduled name -> its schedule's state
    inner_state: Any


@runtime_checkable
class StatefulSchedule(Protocol):
    """A schedule that keeps a state of its own, advanced once per step and given the extra
    arguments of `update` (a loss value, say): `init()`, `update(state, **extra_args)` and
    `__call__(state, **extra_args)` for the value at that state."""

    def init(self) -> Any: ...

    def update(self, state: Any, **extra_args: Any) -> Any: ...

    def __call__(self, state: Any, **extra_args: Any) -> Any: ...


class WrappedScheduleState(NamedTuple):
    count: Any  # int32 steps taken


class WrappedSchedule:
    """A schedule of the step count as a `StatefulSchedule` whose state is that count."""

    def __init__(self, schedule_fn: Callable[[Any], Any]):
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(_count())

    def update(self, state: WrappedScheduleState, **extra_args: Any) -> WrappedScheduleState:
        return WrappedScheduleState(_next(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args: Any) -> Any:
        return self.schedule_fn(state.count)


def _select(condition, on_true, on_false):
    """Leaf-wise where over two trees of one structure, each leaf keeping its dtype."""
    return tree_util.tree_map(
        lambda a, b: fnp.where(condition, a, b).astype(fnp.asarray(b).dtype), on_true, on_false
    )


def _spread(prefix, tree) -> list:
    """The value of `prefix` (a tree whose leaves stand for whole subtrees of `tree`) at
    each leaf of `tree`, in leaf order."""
    full = tree_util.tree_map(lambda v, sub: tree_util.tree_map(lambda _: v, sub), prefix, tree)
    return tree_util.tree_leaves(full)


def masked(
    inner: GradientTransformation, mask, *, mask_compatible_extra_args: bool = False
) -> GradientTransformationExtraArgs:
    """`inner` on the leaves `mask` selects, the rest passed through unchanged. The mask is a
    pytree of bools with the structure of the parameters or a prefix of it, or a function
    of the parameters (of the updates, in `update`) returning one. `inner` sees the
    selected leaves as a flat list, so its state is made for that list. With
    mask_compatible_extra_args, extra arguments of `update` that have the updates' tree
    structure reach `inner` as the same selection."""
    inner = with_extra_args_support(inner)

    def chosen(tree) -> list[bool]:
        flags = _spread(mask(tree) if callable(mask) else mask, tree)
        return [bool(f) for f in flags]

    def pick(tree, flags):
        return [x for x, f in zip(tree_util.tree_leaves(tree), flags) if f]

    def init(params):
        return MaskedState(inner.init(pick(params, chosen(params))))

    def update(updates, state, params=None, **extra_args):
        flags = chosen(updates)
        leaves, treedef = tree_util.tree_flatten(updates)
        if len(flags) != len(leaves):
            raise ValueError(
                f"masked: the mask covers {len(flags)} leaves where the updates have {len(leaves)}"
            )
        inner_params = None if params is None else pick(params, flags)
        if mask_compatible_extra_args:
            extra_args = {
                name: pick(value, flags) if tree_util.tree_structure(value) == treedef else value
                for name, value in extra_args.items()
            }
        new, inner_state = inner.update(
            pick(updates, flags), state.inner_state, inner_params, **extra_args
        )
        new = iter(new)
        out = [next(new) if f else x for x, f in zip(leaves, flags)]
        return tree_util.tree_unflatten(treedef, out), MaskedState(inner_state)

    return GradientTransformationExtraArgs(init, update)


def freeze(mask) -> GradientTransformationExtraArgs:
    """Zero updates on the leaves `mask` selects (a mask as `masked` takes), so those
    parameters stay where they are; the rest pass through."""
    return masked(set_to_zero(), mask)


def selective_transform(
    optimizer: GradientTransformation, *, freeze_mask
) -> GradientTransformationExtraArgs:
    """`optimizer` on the leaves `freeze_mask` leaves trainable (False), zero updates on the
    frozen ones (True); the mask is a pytree of bools like the parameters, or a prefix."""

    def labels(params):
        return tree_util.tree_map(lambda frozen: "freeze" if frozen else "train", freeze_mask)

    return partition({"train": optimizer, "freeze": set_to_zero()}, labels)


def partition(
    transforms: dict[Any, GradientTransformation],
    param_labels,
    *,
    mask_compatible_extra_args: bool = False,
) -> GradientTransformationExtraArgs:
    """A different transformation per group of leaves: `param_labels` (a pytree of labels
    with the parameters' structure or a prefix of it, or a function of the parameters
    returning one) names each leaf's key in `transforms`. mask_compatible_extra_args hands
    each group its part of the extra arguments shaped as the updates, as `masked` does."""

    def masks(tree):
        labels = param_labels(tree) if callable(param_labels) else param_labels
        flat = _spread(labels, tree)
        missing = sorted({repr(label) for label in flat if label not in transforms})
        if missing:
            raise ValueError(
                f"partition: labels {', '.join(missing)} have no transformation; "
                f"transforms has {sorted(map(repr, transforms))}"
            )
        treedef = tree_util.tree_structure(tree)
        return {
            label: tree_util.tree_unflatten(treedef, [lab == label for lab in flat])
            for label in transforms
        }

    compatible = {"mask_compatible_extra_args": mask_compatible_extra_args}

    def init(params):
        return MultiTransformState(
            {
                label: masked(transforms[label], mask, **compatible).init(params)
                for label, mask in masks(params).items()
            }
        )

    def update(updates, state, params=None, **extra_args):
        new_states = {}
        for label, mask in masks(updates).items():
            updates, new_states[label] = masked(transforms[label], mask, **compatible).update(
                updates, state.inner_states[label], params, **extra_args
            )
        return updates, MultiTransformState(new_states)

    return GradientTransformationExtraArgs(init, update)


multi_transform = partition


def apply_if_finite(
    inner: GradientTransformation, max_consecutive_errors: int
) -> GradientTransformation:
    """`inner`'s update where every incoming update is finite; otherwise zero updates and
    `inner`'s state unchanged, unless more than `max_consecutive_errors` non-finite steps
    came in a row (then the update goes through, NaN and all)."""
    inner = with_extra_args_support(inner)

    def init(params):
        return ApplyIfFiniteState(_count(), fnp.asarray(True), _count(), inner.init(params))

    def update(updates, state, params=None, **extra_args):
        finite = fnp.asarray(True)
        for leaf in tree_util.tree_leaves(updates):
            finite = finite & fnp.all(fnp.isfinite(leaf))
        notfinite_count = fnp.where(finite, 0, _next(state.notfinite_count)).astype(fnp.int32)
        total = fnp.where(finite, state.total_notfinite, _next(state.total_notfinite))
        apply = finite | (notfinite_count > max_consecutive_errors)
        new, inner_state = inner.update(updates, state.inner_state, params, **extra_args)
        new = _select(apply, new, zeros_like_tree(updates))
        inner_state = _select(apply, inner_state, state.inner_state)
        return new, ApplyIfFiniteState(
            notfinite_count, finite, total.astype(fnp.int32), inner_state
        )

    return GradientTransformationExtraArgs(init, update)


class ShouldSkipUpdateFunction(Protocol):
    """MultiSteps' `should_skip_update_fn`: whether to drop this step's gradients, and a
    dict of values to keep in `MultiStepsState.skip_state`."""

    def __call__(self, updates: Any, gradient_step: Any, params: Any) -> tuple[Any, Any]: ...


def skip_not_finite(updates, gradient_step, params) -> tuple[Any, dict]:
    """A `should_skip_update_fn` for MultiSteps: skip gradients with an inf or a NaN."""
    count = sum(
        fnp.sum(~fnp.isfinite(leaf)).astype(fnp.int32) for leaf in tree_util.tree_leaves(updates)
    )
    should_skip = fnp.asarray(count > 0)
    return should_skip, {"should_skip": should_skip, "num_not_finite": fnp.asarray(count)}


def skip_large_updates(updates, gradient_step, params, max_squared_norm: float):
    """A `should_skip_update_fn` for MultiSteps (bind max_squared_norm with
    functools.partial): skip gradients whose squared global norm is not below it (NaN
    included)."""
    norm_sq = sum(fnp.sum(abs_sq(leaf)) for leaf in tree_util.tree_leaves(updates))
    should_skip = ~(fnp.asarray(norm_sq) < max_squared_norm)
    return should_skip, {"should_skip": should_skip, "norm_squared": fnp.asarray(norm_sq)}


def _never_skip(updates, gradient_step, params):
    return fnp.asarray(False), ()


class MultiSteps:
    """Gradient accumulation: `opt` steps once every k calls (k = every_k_schedule(number
    of steps taken so far), or a constant) on the mean of the k gradients (their sum with
    use_grad_mean=False); the calls in between return zero updates. A call for which
    should_skip_update_fn(updates, gradient_step, params) returns (True, _) is ignored:
    zero updates, nothing accumulated, only `skip_state` (its second result) recorded."""

    def __init__(
        self,
        opt: GradientTransformation,
        every_k_schedule: int | Callable[[Any], Any],
        use_grad_mean: bool = True,
        should_skip_update_fn: Callable[..., tuple[Any, Any]] | None = None,
    ):
        self.inner_opt = with_extra_args_support(opt)
        self.use_grad_mean = use_grad_mean
        self.should_skip_update_fn = should_skip_update_fn or _never_skip
        if callable(every_k_schedule):
            self.every_k_schedule = every_k_schedule
        else:
            self.every_k_schedule = lambda step: every_k_schedule

    def init(self, params) -> MultiStepsState:
        gradient_step = _count()
        _, skip_state = self.should_skip_update_fn(zeros_like_tree(params), gradient_step, params)
        return MultiStepsState(
            mini_step=_count(),
            gradient_step=gradient_step,
            inner_opt_state=self.inner_opt.init(params),
            acc_grads=zeros_like_tree(params),
            skip_state=skip_state,
        )

    def update(self, updates, state: MultiStepsState, params=None, **extra_args):
        should_skip, skip_state = self.should_skip_update_fn(updates, state.gradient_step, params)
        should_skip = fnp.asarray(should_skip)
        if should_skip.dtype != fnp.bool_ or should_skip.shape != ():
            raise ValueError(
                "MultiSteps: should_skip_update_fn must return a boolean scalar first, got "
                f"dtype {should_skip.dtype} and shape {should_skip.shape}"
            )
        k_steps = fnp.asarray(self.every_k_schedule(state.gradient_step)).astype(fnp.int32)
        n = state.mini_step.astype(fnp.float32)

        def accumulate(g, acc):
            if self.use_grad_mean:
                return acc + (g - acc) / (n + 1).astype(fnp.asarray(acc).dtype)
            return acc + g

        acc_grads = tree_util.tree_map(accumulate, updates, state.acc_grads)
        new, inner_state = self.inner_opt.update(
            acc_grads, state.inner_opt_state, params, **extra_args
        )
        emit = state.mini_step == k_steps - 1
        stepped = MultiStepsState(
            mini_step=fnp.where(emit, 0, _next(state.mini_step)).astype(fnp.int32),
            gradient_step=fnp.where(emit, _next(state.gradient_step), state.gradient_step),
            inner_opt_state=_select(emit, inner_state, state.inner_opt_state),
            acc_grads=_select(emit, zeros_like_tree(acc_grads), acc_grads),
            skip_state=skip_state,
        )
        new_state = _select(should_skip, state._replace(skip_state=skip_state), stepped)
        return _select(emit & ~should_skip, new, zeros_like_tree(new)), new_state

    def has_updated(self, state: MultiStepsState) -> Any:
        """Whether the last `update` stepped the inner optimizer."""
        return (state.mini_step == 0) & (state.gradient_step > 0)

    def gradient_transformation(self) -> GradientTransformationExtraArgs:
        return GradientTransformationExtraArgs(self.init, self.update)


def _widest_float(params):
    dtypes = [
        fnp.asarray(leaf).dtype
        for leaf in tree_util.tree_leaves(params)
        if fnp.issubdtype(fnp.asarray(leaf).dtype, fnp.floating)
    ]
    return max(dtypes, key=lambda d: d.itemsize, default=fnp.float32)


def inject_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype=None,
) -> Callable[..., GradientTransformationExtraArgs]:
    """Wrap an optimizer factory so that its numeric arguments live in the state
    (`state.hyperparams[name]`, which may be changed between steps) and callable ones are
    schedules: a `StatefulSchedule` as it is, a function of the step count as a
    `WrappedSchedule`, each evaluated and advanced once per update. Bools, the names in
    `static_args` and other values stay fixed arguments of the factory."""
    static = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)
    unknown = static - set(signature.parameters)
    if unknown:
        raise ValueError(
            f"inject_hyperparams: static_args {sorted(unknown)} are not parameters of "
            f"{inner_factory.__name__} ({', '.join(signature.parameters)})"
        )

    def wrapped(*args, **kwargs) -> GradientTransformationExtraArgs:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        schedules, numeric, fixed = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static or isinstance(value, bool):
                fixed[name] = value
            elif isinstance(value, StatefulSchedule):
                schedules[name] = value
            elif callable(value):
                schedules[name] = WrappedSchedule(value)
            elif isinstance(value, (int, float, np.ndarray, fnp.ndarray)):
                numeric[name] = value
            else:
                fixed[name] = value

        def convert(value, params):
            """Floats in hyperparam_dtype, or else in the widest float dtype of the
            parameters (Optax's choice)."""
            value = fnp.asarray(value)
            if fnp.issubdtype(value.dtype, fnp.floating):
                return value.astype(hyperparam_dtype or _widest_float(params))
            return value

        def init(params):
            schedule_states = {k: f.init() for k, f in schedules.items()}
            hyperparams = {k: convert(v, params) for k, v in numeric.items()}
            for k, f in schedules.items():
                hyperparams[k] = convert(f(schedule_states[k]), params)
            inner_state = inner_factory(**fixed, **hyperparams).init(params)
            return InjectStatefulHyperparamsState(
                _count(), hyperparams, schedule_states, inner_state
            )

        def update(updates, state, params=None, **extra_args):
            hyperparams = {k: convert(v, params) for k, v in state.hyperparams.items()}
            schedule_states = {}
            for k, f in schedules.items():
                hyperparams[k] = convert(f(state.hyperparams_states[k], **extra_args), params)
                schedule_states[k] = f.update(state.hyperparams_states[k], **extra_args)
            inner = with_extra_args_support(inner_factory(**fixed, **hyperparams))
            updates, inner_state = inner.update(updates, state.inner_state, params, **extra_args)
            new_state = InjectStatefulHyperparamsState(
                _next(state.count), hyperparams, schedule_states, inner_state
            )
            return updates, new_state

        return GradientTransformationExtraArgs(init, update)

    return wrapped


def inject_stateful_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype=None,
) -> Callable[..., GradientTransformationExtraArgs]:
    """The older name of `inject_hyperparams`, which now takes stateful schedules itself."""
    warnings.warn(
        "inject_stateful_hyperparams is deprecated: use inject_hyperparams, which takes "
        "stateful schedules",
        DeprecationWarning,
        stacklevel=2,
    )
    return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)


def flatten(inner: GradientTransformation) -> GradientTransformationExtraArgs:
    """`inner` on all leaves raveled and joined into one vector, the result split back into
    the leaves' shapes (and dtypes): fewer, larger operations for transformations that act
    element by element."""
    inner = with_extra_args_support(inner)

    def ravel(tree):
        leaves = [fnp.ravel(leaf) for leaf in tree_util.tree_leaves(tree)]
        return fnp.concatenate(leaves) if leaves else fnp.zeros((0,), fnp.float32)

    def unravel(flat, like):
        leaves, treedef = tree_util.tree_flatten(like)
        out, start = [], 0
        for leaf in leaves:
            size = int(np.size(leaf))
            piece = flat[start : start + size]
            out.append(fnp.reshape(piece, np.shape(leaf)).astype(fnp.asarray(leaf).dtype))
            start += size
        return tree_util.tree_unflatten(treedef, out)

    def init(params):
        return inner.init(ravel(params))

    def update(updates, state, params=None, **extra_args):
        flat_params = None if params is None else ravel(params)
        flat, state = inner.update(ravel(updates), state, flat_params, **extra_args)
        return unravel(flat, updates), state

    return GradientTransformationExtraArgs(init, update)
