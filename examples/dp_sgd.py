"""Differentially private SGD on the digits: per-example gradients with `vmap(grad)`.

    python examples/dp_sgd.py [--steps 1000] [--noise 1.0] [--clip 1.0] [--seed 0]

DP-SGD (Abadi et al., 2016) bounds each example's influence: every example's gradient is
clipped to norm `--clip`, the clipped gradients are summed, Gaussian noise of standard
deviation `noise * clip` is added, and the sum is divided by the batch size. Per-example
gradients are one `vmap` of `grad` over the batch, inside one jitted step. The script trains
the same MLP with plain SGD for comparison. About 10 seconds here.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import nn, optim


def example_loss(model, image, label):
    """The loss of one example (no batch axis: vmap adds it)."""
    return nn.losses.softmax_cross_entropy_with_integer_labels(model(image), label)


def private_gradient(model, images, labels, key, clip: float, noise: float):
    per_example = fg.vmap(fg.grad(example_loss), in_axes=(None, 0, 0))(model, images, labels)
    leaves, treedef = fg.tree_util.tree_flatten(per_example)
    norms = fnp.sqrt(sum(fnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))
    scale = fnp.minimum(1.0, clip / (norms + 1e-12))  # each example's gradient to norm <= clip
    keys = fg.random.split(key, len(leaves))
    noisy = [
        (fnp.tensordot(scale, g, axes=1) + noise * clip * fg.random.normal(k, g.shape[1:]))
        / images.shape[0]
        for g, k in zip(leaves, keys)
    ]
    return treedef.unflatten(noisy)


def train(model, data, steps, batch_size, key, gradient_fn, learning_rate):
    optimizer = optim.sgd(learning_rate, momentum=0.9)
    state = optimizer.init(model)

    @fg.jit
    def step(model, state, images, labels, key):
        grads = gradient_fn(model, images, labels, key)
        updates, state = optimizer.update(grads, state, model)
        return optim.apply_updates(model, updates), state

    shuffle_key, noise_key = fg.random.split(key)
    per_epoch = data[0].shape[0] // batch_size
    epochs = fg.data.epochs(data, batch_size, key=shuffle_key, num_epochs=-(-steps // per_epoch))
    count, start = 0, None
    for epoch in epochs:
        for images, labels in epoch:
            if count == steps:
                break
            model, state = step(model, state, images, labels, fg.random.fold_in(noise_key, count))
            if count == 0:
                fg.block_until_ready(model)
                start = time.perf_counter()  # after compiling
            count += 1
    fg.block_until_ready(model)
    return model, (time.perf_counter() - start) / max(steps - 1, 1)


def accuracy(model, images, labels) -> float:
    return float(fnp.mean(fnp.argmax(model(images), axis=-1) == labels))


def main(argv: Sequence[str] | None = None) -> tuple[float, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data_key, model_key, train_key = fg.random.split(fg.random.PRNGKey(args.seed), 3)
    train_data, (test_x, test_y) = fg.data.load_digits(key=data_key, layout="flat")
    model = nn.MLP(64, 10, width_size=64, depth=1, activation=nn.tanh, key=model_key)

    def private(model, images, labels, key):
        return private_gradient(model, images, labels, key, args.clip, args.noise)

    def plain(model, images, labels, key):
        return fg.grad(
            lambda m: fg.vmap(example_loss, in_axes=(None, 0, 0))(m, images, labels).mean()
        )(model)

    dp_model, dp_seconds = train(
        model, train_data, args.steps, args.batch_size, train_key, private, 0.1
    )
    sgd_model, sgd_seconds = train(
        model, train_data, args.steps, args.batch_size, train_key, plain, 0.1
    )
    dp_accuracy, sgd_accuracy = (
        accuracy(dp_model, test_x, test_y),
        accuracy(sgd_model, test_x, test_y),
    )
    print(
        f"per-example gradients: {args.batch_size / dp_seconds:,.0f} examples/s "
        f"({dp_seconds * 1e3:.2f} ms a DP-SGD step, {sgd_seconds * 1e3:.2f} ms an SGD step)"
    )
    print(
        f"test accuracy: DP-SGD {dp_accuracy:.3f} (noise {args.noise}, clip {args.clip}), "
        f"SGD {sgd_accuracy:.3f}"
    )
    return dp_accuracy, sgd_accuracy


if __name__ == "__main__":
    main()
