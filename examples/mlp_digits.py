"""A multilayer perceptron on scikit-learn's 8x8 digits, written with funcgrad.nn and
funcgrad.optim.

    python examples/mlp_digits.py [--steps 1500] [--seed 0]

The model is an `nn.MLP` (a pytree: `value_and_grad` differentiates it directly), the
optimizer Adam with a cosine schedule, and the step one jitted function. About 5 seconds here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import nn, optim


def loss_fn(model, images, labels):
    logits = model(images)
    return nn.losses.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def accuracy(model, images, labels) -> float:
    return float(fnp.mean(fnp.argmax(model(images), axis=-1) == labels))


def main(argv: Sequence[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data_key, model_key, shuffle_key = fg.random.split(fg.random.PRNGKey(args.seed), 3)
    (train_x, train_y), (test_x, test_y) = fg.data.load_digits(key=data_key, layout="flat")
    model = nn.MLP(64, 10, width_size=128, depth=2, activation=nn.gelu, key=model_key)
    optimizer = optim.adam(optim.cosine_decay_schedule(3e-3, args.steps))
    state = optimizer.init(model)

    @fg.jit
    def step(model, state, images, labels):
        loss, grads = fg.value_and_grad(loss_fn)(model, images, labels)
        updates, state = optimizer.update(grads, state, model)
        return optim.apply_updates(model, updates), state, loss

    batches_per_epoch = train_x.shape[0] // args.batch_size
    epochs = fg.data.epochs(
        (train_x, train_y),
        args.batch_size,
        key=shuffle_key,
        num_epochs=-(-args.steps // batches_per_epoch),
    )
    done = 0
    for epoch in epochs:
        for images, labels in epoch:
            if done == args.steps:
                break
            model, state, loss = step(model, state, images, labels)
            done += 1
            if done % max(args.steps // 5, 1) == 0:
                print(f"step {done:5d}  loss {float(loss):.4f}")
    test_accuracy = accuracy(model, test_x, test_y)
    print(f"test accuracy: {test_accuracy:.3f}")
    return test_accuracy


if __name__ == "__main__":
    main()
