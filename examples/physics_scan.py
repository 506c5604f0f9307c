"""Fitting a physical system's parameters by differentiating through its simulation.

    python examples/physics_scan.py [--steps 300] [--seed 0]

A damped pendulum, theta'' = -(g / L) sin(theta) - c theta', is integrated for 400 time
steps with semi-implicit (symplectic) Euler inside `lax.scan`. Noisy observations of a
trajectory with unknown g/L and damping c are then fitted by gradient descent: `grad` flows
back through all 400 steps of the scan (reverse-mode through a loop, compiled natively by
`jit`). About a second here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax, optim

DT = 0.02
STEPS = 400


def simulate(params, start):
    """The angle at each of STEPS steps from `start` = (angle, angular velocity)."""
    stiffness, damping = fnp.exp(params["log_stiffness"]), fnp.exp(params["log_damping"])

    def tick(state, _):
        angle, velocity = state
        velocity = velocity + DT * (-stiffness * fnp.sin(angle) - damping * velocity)
        angle = angle + DT * velocity  # the new velocity: symplectic Euler
        return (angle, velocity), angle

    _, angles = lax.scan(tick, start, None, length=STEPS)
    return angles


def loss_fn(params, start, observed):
    return fnp.mean((simulate(params, start) - observed) ** 2)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    truth = {"stiffness": 9.81 / 1.5, "damping": 0.3}
    true_params = {
        k: fnp.log(fnp.float32(v))
        for k, v in (("log_stiffness", truth["stiffness"]), ("log_damping", truth["damping"]))
    }
    start = (fnp.float32(1.2), fnp.float32(0.0))
    noise = fg.random.normal(fg.random.PRNGKey(args.seed), (STEPS,)) * 0.02
    observed = simulate(true_params, start) + noise

    params = {"log_stiffness": fnp.log(fnp.float32(3.0)), "log_damping": fnp.log(fnp.float32(1.0))}
    optimizer = optim.adam(0.05)
    state = optimizer.init(params)

    @fg.jit
    def step(params, state):
        loss, grads = fg.value_and_grad(loss_fn)(params, start, observed)
        updates, state = optimizer.update(grads, state, params)
        return optim.apply_updates(params, updates), state, loss

    for i in range(args.steps):
        params, state, loss = step(params, state)
        if (i + 1) % max(args.steps // 5, 1) == 0:
            print(f"step {i + 1:4d}  loss {float(loss):.5f}")
    fitted = {
        "stiffness": float(np.exp(params["log_stiffness"])),
        "damping": float(np.exp(params["log_damping"])),
    }
    for name in ("stiffness", "damping"):
        print(f"{name}: fitted {fitted[name]:.3f}, true {truth[name]:.3f}")
    return {"fitted": fitted, "truth": truth}


if __name__ == "__main__":
    main()
