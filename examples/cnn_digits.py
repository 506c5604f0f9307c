"""A convolutional network on scikit-learn's 8x8 digits, built from funcgrad.nn layers.

    python examples/cnn_digits.py [--epochs 15] [--seed 0]

Two 3x3 convolutions, max pooling, dropout and a linear classifier in an `nn.Sequential`;
dropout draws from a key split per step, and evaluation passes `inference=True`. The model is
a pytree, so the jitted step takes and returns it like any array. About 10 seconds here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import nn, optim


def make_model(key) -> nn.Sequential:
    k1, k2, k3 = fg.random.split(key, 3)
    return nn.Sequential(
        [
            nn.Conv2d(1, 16, 3, key=k1, weight_init=nn.initializers.he_normal()),
            nn.relu,
            nn.Conv2d(16, 32, 3, key=k2, weight_init=nn.initializers.he_normal()),
            nn.relu,
            nn.MaxPool2d((2, 2)),
            lambda h: h.reshape(h.shape[0], -1),
            nn.Dropout(0.2),
            nn.Linear(4 * 4 * 32, 10, key=k3),
        ]
    )


def loss_fn(model, images, labels, key):
    logits = model(images, key=key)
    return nn.losses.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def main(argv: Sequence[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data_key, model_key, shuffle_key, dropout_key = fg.random.split(fg.random.PRNGKey(args.seed), 4)
    train, (test_x, test_y) = fg.data.load_digits(key=data_key)
    model = make_model(model_key)
    optimizer = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(2e-3, weight_decay=1e-4))
    state = optimizer.init(model)

    @fg.jit
    def step(model, state, images, labels, key):
        loss, grads = fg.value_and_grad(loss_fn)(model, images, labels, key)
        updates, state = optimizer.update(grads, state, model)
        return optim.apply_updates(model, updates), state, loss

    @fg.jit
    def test_accuracy(model, images, labels):
        return fnp.mean(fnp.argmax(model(images, inference=True), axis=-1) == labels)

    count = 0
    for e, epoch in enumerate(
        fg.data.epochs(train, args.batch_size, key=shuffle_key, num_epochs=args.epochs)
    ):
        for images, labels in epoch:
            model, state, loss = step(
                model, state, images, labels, fg.random.fold_in(dropout_key, count)
            )
            count += 1
        if (e + 1) % max(args.epochs // 5, 1) == 0:
            print(f"epoch {e + 1:3d}  loss {float(loss):.4f}")
    accuracy = float(test_accuracy(model, test_x, test_y))
    print(f"test accuracy: {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main()
