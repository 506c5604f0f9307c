"""Small data for examples and notebooks: the digits set, and batches drawn by explicit keys.

Shuffles take an ``fg.random`` key, never a global seed, so the same key gives the same
split, the same batches and the same epochs on every run and every machine.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import numpy as np

from funcgrad import random, tree_util
from funcgrad.array import Array

__all__ = ["batches", "epochs", "load_digits"]

Split = tuple[Array, Array]


def _as_key(key: Any) -> Array:
    """A PRNG key from an int seed or a key; None means seed 0, so the default is fixed too."""
    if key is None:
        return random.key(0)
    if isinstance(key, int) and not isinstance(key, bool):
        return random.key(key)
    return key


def load_digits(
    *, test_fraction: float = 0.2, key: Any = None, layout: str = "NHWC", stratify: bool = True
) -> tuple[Split, Split]:
    """The 1797 8x8 handwritten digits of scikit-learn, split into ``(train, test)``.

    Each split is ``(images, labels)``: float32 images in [0, 1], shaped ``(n, 8, 8, 1)``
    (``layout="NHWC"``) or ``(n, 64)`` (``layout="flat"``), and int32 labels 0..9. The split
    shuffles by ``key`` (an int seed or an ``fg.random`` key; None is seed 0). With
    ``stratify`` each digit gives the same fraction of its examples to the test split, so both
    splits keep the classes balanced. The data ships with scikit-learn; nothing is downloaded.
    """
    try:
        from sklearn import datasets
    except ImportError:
        raise ImportError(
            'funcgrad.data.load_digits needs scikit-learn: pip install -e ".[examples]"'
        ) from None
    if layout not in ("NHWC", "flat"):
        raise ValueError(f'load_digits: layout must be "NHWC" or "flat", got {layout!r}')
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"load_digits: test_fraction must be in [0, 1), got {test_fraction!r}")

    digits = datasets.load_digits()
    # The pixels are counts of 0..16 marked cells in a 4x4 block of the original scan.
    images = (digits.data / 16.0).astype(np.float32)
    images = images.reshape(-1, 8, 8, 1) if layout == "NHWC" else images
    labels = digits.target.astype(np.int32)

    order = _shuffled(_as_key(key), len(labels))
    in_test = np.zeros(len(labels), dtype=bool)
    groups = [order[labels[order] == c] for c in np.unique(labels)] if stratify else [order]
    for group in groups:
        in_test[group[: round(len(group) * test_fraction)]] = True
    train, test = order[~in_test[order]], order[in_test[order]]
    return (Array(images[train]), Array(labels[train])), (Array(images[test]), Array(labels[test]))


def _check_batching(name: str, arrays: Any, batch_size: Any, drop_remainder: bool):
    """The host arrays, their structure and row count, after checking they can be batched."""
    leaves, treedef = tree_util.tree_flatten(arrays)
    if not leaves:
        raise ValueError(f"{name}: arrays holds no arrays to batch")
    hosts = [np.asarray(leaf) for leaf in leaves]
    shapes = [h.shape for h in hosts]
    if any(len(s) == 0 for s in shapes) or len({s[0] for s in shapes}) != 1:
        raise ValueError(
            f"{name}: every array needs the same leading (example) axis; got shapes {shapes}"
        )
    num_examples = shapes[0][0]
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"{name}: batch_size must be an int, got {batch_size!r}")
    batch_size = operator.index(batch_size)
    if batch_size < 1:
        raise ValueError(f"{name}: batch_size must be at least 1, got {batch_size}")
    if drop_remainder and batch_size > num_examples:
        raise ValueError(
            f"{name}: batch_size {batch_size} exceeds the {num_examples} examples, so with "
            "drop_remainder=True there would be no batch at all"
        )
    return hosts, treedef, num_examples, batch_size


def _batches(hosts, treedef, order: np.ndarray, batch_size: int, drop_remainder: bool):
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        if drop_remainder and len(rows) < batch_size:
            return
        yield treedef.unflatten([Array(h[rows]) for h in hosts])


def batches(
    arrays: Any, batch_size: int, *, key: Any = None, drop_remainder: bool = True
) -> Iterator[Any]:
    """Batches of ``batch_size`` rows of every array in ``arrays`` (e.g. ``(images, labels)``).

    Each batch has the structure of ``arrays``. With an ``fg.random`` key the rows are
    shuffled (the same key gives the same order); with None they come in order. The last,
    short batch is dropped unless ``drop_remainder=False``, so that jitted steps see one shape.
    """
    hosts, treedef, num_examples, batch_size = _check_batching(
        "batches", arrays, batch_size, drop_remainder
    )
    if key is None:
        order = np.arange(num_examples)
    else:
        order = _shuffled(key, num_examples)
    return _batches(hosts, treedef, order, batch_size, drop_remainder)


def epochs(
    arrays: Any, batch_size: int, *, key: Any, num_epochs: int, drop_remainder: bool = True
) -> Iterator[Iterator[Any]]:
    """``num_epochs`` passes over ``arrays``, each an iterator of batches in a new order.

    Epoch ``e`` shuffles with ``fg.random.fold_in(key, e)``: its order does not depend on
    ``num_epochs``, so a run resumed at epoch ``e`` sees the batches the first run would have.
    """
    hosts, treedef, num_examples, batch_size = _check_batching(
        "epochs", arrays, batch_size, drop_remainder
    )
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 0:
        raise ValueError(f"epochs: num_epochs must be an int >= 0, got {num_epochs!r}")
    return (
        _batches(
            hosts,
            treedef,
            _shuffled(random.fold_in(key, epoch), num_examples),
            batch_size,
            drop_remainder,
        )
        for epoch in range(num_epochs)
    )


def _shuffled(key: Any, num_examples: int) -> np.ndarray:
    return np.asarray(random.permutation(key, num_examples))
