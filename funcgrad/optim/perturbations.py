"""Smoothing by random perturbation, with Optax's `perturbations` names:
`make_perturbed_fun(f)` estimates f_sigma(x) = E_z f(x + sigma z) by Monte Carlo, and its
derivatives of every order through the score function: each sample's value is weighted by
exp(log p(z) - stop_gradient(log p(z))), which is 1 but differentiates to the score, so f
itself is only evaluated, never differentiated (it may be piecewise constant, an argmax)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import funcgrad.numpy as fnp
from funcgrad import lax, random, tree_util
from funcgrad.optim.tree_utils import tree_add_scale, tree_random_like, tree_scale, tree_sum
from funcgrad.transforms.vmap import vmap

__all__ = ["Gumbel", "Normal", "make_perturbed_fun"]


class Normal:
    """Standard normal noise: `sample` draws it, `log_prob` is its log-density up to a
    constant (-z^2 / 2)."""

    def sample(self, key: Any, sample_shape: tuple[int, ...] = (), dtype: Any = float) -> Any:
        return random.normal(key, sample_shape, dtype)

    def log_prob(self, inputs: Any) -> Any:
        return -0.5 * inputs**2


class Gumbel:
    """Standard Gumbel noise (log-density -z - exp(-z)): perturbing the scores of an argmax
    by it gives the softmax probabilities."""

    def sample(self, key: Any, sample_shape: tuple[int, ...] = (), dtype: Any = float) -> Any:
        return random.gumbel(key, sample_shape, dtype)

    def log_prob(self, inputs: Any) -> Any:
        return -inputs - fnp.exp(-inputs)


_GUMBEL = Gumbel()


def _magic_box(x):
    """1 in value, with the derivative of exp(x) at 1: the score-function weight."""
    return fnp.exp(x - lax.stop_gradient(x))


def make_perturbed_fun(
    fun: Callable[[Any], Any],
    num_samples: int = 1000,
    sigma: float = 0.1,
    noise: Any = _GUMBEL,
    use_baseline: bool = True,
) -> Callable[[Any, Any], Any]:
    """`(key, x) -> ` the mean of fun(x + sigma z) over num_samples draws of `noise` (a tree
    of draws like x), differentiable in x through the score function. With use_baseline
    fun(x) is subtracted inside the score term (it changes no expectation, only the
    variance of the derivatives)."""

    def estimate(key, x):
        baseline = fun(lax.stop_gradient(x)) if use_baseline else None

        def one_sample(sample_key):
            z = tree_random_like(sample_key, x, sampler=noise.sample)
            shifted = lax.stop_gradient(tree_util.tree_map(lambda a, b: a + sigma * b, x, z))
            # The noise recovered from the shifted point carries x's derivative.
            z = tree_util.tree_map(lambda a, s: (s - a) / sigma, x, shifted)
            weight = _magic_box(tree_sum(tree_util.tree_map(noise.log_prob, z)))
            out = tree_scale(weight, fun(shifted))
            return out if baseline is None else tree_add_scale(out, 1 - weight, baseline)

        samples = vmap(one_sample)(random.split(key, num_samples))
        return tree_util.tree_map(lambda s: fnp.mean(s, axis=0), samples)

    return estimate
