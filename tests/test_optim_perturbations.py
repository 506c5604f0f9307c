"""funcgrad.optim.perturbations against closed-form expectations, with fixed keys: a
Gumbel-perturbed argmax averages to the softmax (and its derivative to the softmax's), a
normally perturbed ReLU to sigma phi(x / sigma) + x Phi(x / sigma) with derivative
Phi(x / sigma); the tolerances are several Monte-Carlo standard errors."""

from __future__ import annotations

import math

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import random
from funcgrad.optim import perturbations

KEY = random.PRNGKey(0)


def one_hot_argmax(scores):
    return fnp.asarray(scores == fnp.max(scores), scores.dtype)


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def test_gumbel_argmax_averages_to_the_softmax():
    scores, sigma = np.array([0.3, -0.2, 0.5, 0.0]), 0.5
    smoothed = perturbations.make_perturbed_fun(one_hot_argmax, 20_000, sigma)
    probabilities = softmax(scores / sigma)
    np.testing.assert_allclose(smoothed(KEY, scores), probabilities, atol=0.02)
    jacobian = np.asarray(fg.jacrev(smoothed, argnums=1)(KEY, scores))
    wanted = (np.diag(probabilities) - np.outer(probabilities, probabilities)) / sigma
    np.testing.assert_allclose(jacobian, wanted, atol=0.06)


def normal_cdf(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def test_normal_relu_value_and_derivative_on_a_pytree():
    sigma = 0.3
    x = {"a": np.array([-0.2, 0.1]), "b": np.array(0.4)}

    def relu_total(tree):
        return sum(fnp.sum(fnp.maximum(leaf, 0.0)) for leaf in fg.tree_util.tree_leaves(tree))

    smoothed = perturbations.make_perturbed_fun(
        relu_total, 40_000, sigma, noise=perturbations.Normal()
    )
    flat = [-0.2, 0.1, 0.4]
    value = sum(
        sigma * math.exp(-((t / sigma) ** 2) / 2) / math.sqrt(2 * math.pi)
        + t * normal_cdf(t / sigma)
        for t in flat
    )
    np.testing.assert_allclose(fg.jit(smoothed)(KEY, x), value, atol=0.01)
    grads = fg.grad(smoothed, argnums=1)(KEY, x)
    got = [*np.asarray(grads["a"]), float(grads["b"])]
    np.testing.assert_allclose(got, [normal_cdf(t / sigma) for t in flat], atol=0.03)


def test_noise_log_densities_are_the_standard_ones_up_to_a_constant():
    z = np.linspace(-2, 2, 5)
    np.testing.assert_allclose(perturbations.Normal().log_prob(z), -(z**2) / 2)
    np.testing.assert_allclose(perturbations.Gumbel().log_prob(z), -z - np.exp(-z))
    draws = perturbations.Gumbel().sample(KEY, (50_000,))
    np.testing.assert_allclose(np.mean(draws), 0.5772, atol=0.02)  # Euler's constant
