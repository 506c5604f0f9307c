"""Data-parallel training of a small MLP with pmap, on every device of every process.

Each device holds a replica of the parameters and its own slice of the batch; it computes its
gradient, `pmean` averages the gradients over all devices (and over MPI processes when run
under mpiexec), and every replica takes the same step. The loss curve is that of full-batch
training on a single device.

    FUNCGRAD_NUM_CPU_DEVICES=4 python examples/data_parallel.py
    mpiexec -n 2 python examples/data_parallel.py       # after pip install "funcgrad[distributed]"

The data is scikit-learn's digits when scikit-learn is installed, otherwise a synthetic
10-class task of the same shape.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax

LEARNING_RATE = 0.2
LAYER_SIZES = (64, 32, 10)


def load_data() -> tuple[np.ndarray, np.ndarray]:
    """Inputs (float32, scaled to [0, 1]) and integer labels; the row count is a multiple of 8
    so that the batch splits evenly over 1, 2, 4 or 8 devices."""
    try:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x, y = digits.data / 16.0, digits.target
    except ImportError:
        rng = np.random.default_rng(0)
        x = rng.random((1024, LAYER_SIZES[0]))
        teacher = rng.standard_normal((LAYER_SIZES[0], LAYER_SIZES[-1]))
        y = np.argmax(x @ teacher, axis=1)
    rows = len(x) // 8 * 8
    return x[:rows].astype(np.float32), y[:rows].astype(np.int32)


def init_params(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (
            (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
            np.zeros(n, np.float32),
        )
        for m, n in zip(LAYER_SIZES[:-1], LAYER_SIZES[1:])
    ]


def loss(params, x, y):
    """Mean softmax cross-entropy of the MLP on the batch (x, y)."""
    for w, b in params[:-1]:
        x = fnp.tanh(x @ w + b)
    w, b = params[-1]
    logits = x @ w + b
    log_probs = logits - fg.nn.logsumexp(logits, axis=1, keepdims=True)
    return -fnp.mean(fnp.take_along_axis(log_probs, y[:, None], axis=1))


def sgd(params, grads):
    return fg.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)


def parallel_step(params, x, y):
    """One device's step: its gradient, averaged over every device of the 'batch' axis."""
    value, grads = fg.value_and_grad(loss)(params, x, y)
    grads = lax.pmean(grads, "batch")
    return sgd(params, grads), lax.pmean(value, "batch")


def train_data_parallel(x, y, num_steps: int) -> list[float]:
    """Train on all devices of all processes; returns the loss before each step."""
    local = fg.local_device_count()
    shards = local * fg.process_count()
    if len(x) % shards:
        raise ValueError(f"{len(x)} rows do not split evenly over {shards} devices")
    rows = len(x) // fg.process_count()
    start = fg.process_index() * rows  # this process's part of the batch
    x = x[start : start + rows].reshape(local, rows // local, -1)
    y = y[start : start + rows].reshape(local, rows // local)
    # One replica per local device; pmap's results stay sharded from step to step.
    params = fg.tree_util.tree_map(lambda p: np.stack([p] * local), init_params())
    step = fg.pmap(parallel_step, axis_name="batch")
    losses = []
    for _ in range(num_steps):
        params, value = step(params, x, y)
        losses.append(float(value.addressable_shards[0].data))
    return losses


def train_single_device(x, y, num_steps: int) -> list[float]:
    """The reference: full-batch gradient descent on one device."""
    step = fg.jit(
        lambda params, x, y: (sgd(params, fg.grad(loss)(params, x, y)), loss(params, x, y))
    )
    params = init_params()
    losses = []
    for _ in range(num_steps):
        params, value = step(params, x, y)
        losses.append(float(value))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ:  # under mpiexec
        fg.distributed.initialize()
    x, y = load_data()
    losses = train_data_parallel(x, y, args.steps)
    if fg.process_index() == 0:
        print(
            f"{fg.process_count()} process(es) x {fg.local_device_count()} device(s), "
            f"{len(x)} examples"
        )
        for i, value in enumerate(losses):
            print(f"step {i} loss {value:.9g}")


if __name__ == "__main__":
    main()
