"""Train a small convolutional network on scikit-learn's handwritten digits.

    python -m funcgrad.demo [--epochs N] [--batch-size B] [--learning-rate LR] [--seed S]
                            [--no-progress]

The whole training step (forward pass, gradients by `value_and_grad`, Adam's update) is one
function compiled by `fg.jit` to native code; the data are the 1797 8x8 digits that ship with
scikit-learn (`pip install -e ".[examples]"`), split 80/20 by an explicit random key.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax, optim


def init_params(key, channels=(16, 32), hidden=64, classes=10) -> dict:
    """He-normal weights: two 3x3 convolutions (HWIO), a dense layer, and the classifier."""
    shapes = {
        "conv1": (3, 3, 1, channels[0]),
        "conv2": (3, 3, channels[0], channels[1]),
        "dense": (4 * 4 * channels[1], hidden),
        "out": (hidden, classes),
    }
    params = {}
    for (name, shape), k in zip(shapes.items(), fg.random.split(key, len(shapes))):
        fan_in = int(np.prod(shape[:-1]))
        params[name] = {
            "w": fg.random.normal(k, shape) * float(np.sqrt(2.0 / fan_in)),
            "b": fnp.zeros(shape[-1]),
        }
    return params


def conv(x, layer):
    x = x.astype(layer["w"].dtype)  # (float32 images meet float64 weights under enable_x64)
    y = lax.conv_general_dilated(
        x, layer["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return fg.nn.relu(y + layer["b"])


def logits(params, images):
    """(n, 8, 8, 1) images -> (n, 10) class scores."""
    x = conv(images, params["conv1"])
    x = conv(x, params["conv2"])
    x = lax.reduce_window(x, -fnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # 4x4
    x = x.reshape(x.shape[0], -1)
    x = fg.nn.relu(x @ params["dense"]["w"] + params["dense"]["b"])
    return x @ params["out"]["w"] + params["out"]["b"]


def loss_and_accuracy(params, images, labels):
    scores = logits(params, images)
    log_probabilities = fg.nn.log_softmax(scores)
    loss = -fnp.mean(fnp.take_along_axis(log_probabilities, labels[:, None], axis=1))
    accuracy = fnp.mean(fnp.argmax(scores, axis=1) == labels)
    return loss, accuracy


def main(argv: Sequence[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    key = fg.random.PRNGKey(args.seed)
    data_key, init_key, shuffle_key = fg.random.split(key, 3)
    train, test = fg.data.load_digits(key=data_key)
    steps_per_epoch = train[0].shape[0] // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    schedule = optim.warmup_cosine_decay_schedule(
        0.0, args.learning_rate, max(total_steps // 20, 1), max(total_steps, 2)
    )
    optimizer = optim.adam(schedule)
    params = init_params(init_key)
    opt_state = optimizer.init(params)

    @fg.jit
    def train_step(params, opt_state, images, labels):
        (loss, accuracy), grads = fg.value_and_grad(loss_and_accuracy, has_aux=True)(
            params, images, labels
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, loss, accuracy

    evaluate = fg.jit(loss_and_accuracy)

    images, labels = train[0][: args.batch_size], train[1][: args.batch_size]
    start = time.perf_counter()
    train_step.lower(params, opt_state, images, labels).compile()
    compile_seconds = time.perf_counter() - start

    progress = _progress(total_steps, disable=args.no_progress)
    step_seconds = []
    for epoch in fg.data.epochs(train, args.batch_size, key=shuffle_key, num_epochs=args.epochs):
        for images, labels in epoch:
            start = time.perf_counter()
            params, opt_state, loss, accuracy = train_step(params, opt_state, images, labels)
            loss.block_until_ready()
            step_seconds.append(time.perf_counter() - start)
            progress.set_postfix(loss=f"{float(loss):.3f}", acc=f"{float(accuracy):.3f}")
            progress.update()
    progress.close()

    _, test_accuracy = evaluate(params, *test)
    print(f"compile time: {compile_seconds * 1e3:.0f} ms")
    print(
        f"time per step: {statistics.median(step_seconds) * 1e3:.2f} ms "
        f"(batch {args.batch_size}, {total_steps} steps)"
    )
    print(f"test accuracy: {float(test_accuracy):.3f}")
    return float(test_accuracy)


def _progress(total: int, disable: bool):
    """A tqdm bar, or a stand-in with its methods when tqdm is missing or disabled."""
    try:
        from tqdm import tqdm
    except ImportError:
        disable = True
    if disable:
        return _Silent()
    return tqdm(total=total, desc="training", unit="step", file=sys.stdout, leave=False)


class _Silent:
    def set_postfix(self, **values) -> None:
        pass

    def update(self) -> None:
        pass

    def close(self) -> None:
        pass


if __name__ == "__main__":
    main()
