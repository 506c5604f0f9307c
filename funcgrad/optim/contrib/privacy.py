"""Differentially private SGD (Abadi et al. 2016): per-example gradients are clipped to a
global norm, summed, and Gaussian noise of standard deviation l2_norm_clip *
noise_multiplier is added before dividing by the batch size."""

from __future__ import annotations

from typing import Any, NamedTuple

from funcgrad import random, tree_util
from funcgrad.optim.base import GradientTransformation, chain, identity
from funcgrad.optim.constraints import per_example_global_norm_clip
from funcgrad.optim.transforms import ScalarOrSchedule, scale_by_learning_rate, trace


class DifferentiallyPrivateAggregateState(NamedTuple):
    rng_key: Any


def differentially_private_aggregate(
    l2_norm_clip: float, noise_multiplier: float, key=None, *, seed: int | None = None
) -> GradientTransformation:
    """Per-example gradients (leaves with the examples on axis 0) to one private gradient:
    (sum of the clipped examples + N(0, (l2_norm_clip * noise_multiplier)**2)) / batch.
    `key` is an `fg.random` key or an integer seed (0 when None); `seed` is its older
    name."""
    if seed is not None:
        if key is not None:
            raise ValueError("differentially_private_aggregate: give key or seed, not both")
        key = seed
    if key is None or isinstance(key, int):
        key = random.PRNGKey(0 if key is None else key)
    noise_std = l2_norm_clip * noise_multiplier

    def init(params):
        return DifferentiallyPrivateAggregateState(key)

    def update(updates, state, params=None):
        leaves, treedef = tree_util.tree_flatten(updates)
        clipped, _ = per_example_global_norm_clip(leaves, l2_norm_clip)
        keys = random.split(state.rng_key, len(leaves) + 1)
        batch = leaves[0].shape[0]
        noised = [
            (g + noise_std * random.normal(k, g.shape, g.dtype)) / batch
            for g, k in zip(clipped, keys[1:])
        ]
        return tree_util.tree_unflatten(treedef, noised), DifferentiallyPrivateAggregateState(
            keys[0]
        )

    return GradientTransformation(init, update)


def dpsgd(
    learning_rate: ScalarOrSchedule,
    l2_norm_clip: float,
    noise_multiplier: float,
    seed: int,
    momentum: float | None = None,
    nesterov: bool = False,
) -> GradientTransformation:
    """DP-SGD: the private aggregate of per-example gradients, with optional momentum."""
    return chain(
        differentially_private_aggregate(l2_norm_clip, noise_multiplier, seed=seed),
        trace(momentum, nesterov) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate),
    )
