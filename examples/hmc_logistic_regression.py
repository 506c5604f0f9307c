"""Bayesian logistic regression sampled with Hamiltonian Monte Carlo.

    python examples/hmc_logistic_regression.py [--samples 1000] [--chains 4] [--seed 0]

Synthetic data come from known weights; the posterior over the weights (standard normal
prior) is sampled by HMC: momenta drawn from `fg.random` keys split explicitly, leapfrog
integration of the log density's gradient (`fg.grad`) inside `lax.fori_loop`, a
Metropolis correction, all samples of a chain in one `lax.scan`, and several chains at once
with `vmap`, jitted as one program. About 3 seconds here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax, nn


def log_density(weights, features, labels):
    """log p(weights | data) up to a constant: Bernoulli likelihood, N(0, 1) prior."""
    logits = features @ weights
    likelihood = fnp.sum(labels * nn.log_sigmoid(logits) + (1 - labels) * nn.log_sigmoid(-logits))
    return likelihood - 0.5 * fnp.sum(weights**2)


def hmc_chain(key, start, features, labels, samples, leapfrog_steps, step_size):
    """`samples` draws of one chain, and its acceptance rate."""
    grad = fg.grad(log_density)

    def leapfrog(_, state):
        position, momentum = state
        momentum = momentum + 0.5 * step_size * grad(position, features, labels)
        position = position + step_size * momentum
        momentum = momentum + 0.5 * step_size * grad(position, features, labels)
        return position, momentum

    def transition(position, key):
        momentum_key, accept_key = fg.random.split(key)
        momentum = fg.random.normal(momentum_key, position.shape)
        proposal, new_momentum = lax.fori_loop(0, leapfrog_steps, leapfrog, (position, momentum))
        energy = -log_density(position, features, labels) + 0.5 * fnp.sum(momentum**2)
        new_energy = -log_density(proposal, features, labels) + 0.5 * fnp.sum(new_momentum**2)
        accept = fnp.log(fg.random.uniform(accept_key)) < energy - new_energy
        return fnp.where(accept, proposal, position), (
            fnp.where(accept, proposal, position),
            accept,
        )

    _, (draws, accepted) = lax.scan(transition, start, fg.random.split(key, samples))
    return draws, fnp.mean(accepted.astype(fnp.float32))


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--leapfrog-steps", type=int, default=10)
    parser.add_argument("--step-size", type=float, default=0.12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data_key, label_key, chain_key = fg.random.split(fg.random.PRNGKey(args.seed), 3)
    true_weights = fnp.array([1.5, -2.0, 0.5], fnp.float32)
    features = fg.random.normal(data_key, (300, 3))
    labels = fg.random.bernoulli(label_key, nn.sigmoid(features @ true_weights)).astype(fnp.float32)

    @fg.jit
    def run(keys):
        def one_chain(key):
            start = fg.random.normal(key, (3,))
            return hmc_chain(
                key, start, features, labels, args.samples, args.leapfrog_steps, args.step_size
            )

        return fg.vmap(one_chain)(keys)

    draws, acceptance = run(fg.random.split(chain_key, args.chains))
    kept = np.asarray(draws)[:, args.samples // 4 :].reshape(-1, 3)  # the first quarter is burn-in
    mean, spread = kept.mean(axis=0), kept.std(axis=0)
    print(f"acceptance rate: {float(np.mean(acceptance)):.2f} over {args.chains} chains")
    for k in range(3):
        print(
            f"weight {k}: posterior mean {mean[k]:+.3f} (sd {spread[k]:.3f}), "
            f"true {float(true_weights[k]):+.3f}"
        )
    return {
        "mean": mean,
        "sd": spread,
        "true": np.asarray(true_weights),
        "acceptance": float(np.mean(acceptance)),
    }


if __name__ == "__main__":
    main()
