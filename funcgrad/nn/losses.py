"""Losses with Optax's names and conventions: each returns the per-example loss (reduce it
yourself, usually with `.mean()`)."""

from __future__ import annotations

import numpy as np

import funcgrad.numpy as fnp
from funcgrad.nn import functions as F


def softmax_cross_entropy(logits, labels):
    """-sum(labels * log_softmax(logits)) over the last axis; `labels` are probabilities
    (one-hot or soft) of the logits' shape."""
    logits, labels = fnp.asarray(logits), fnp.asarray(labels)
    if logits.shape != labels.shape:
        raise ValueError(
            f"softmax_cross_entropy: logits {tuple(logits.shape)} and labels "
            f"{tuple(labels.shape)} must have the same shape"
        )
    return -(labels * F.log_softmax(logits, axis=-1)).sum(axis=-1)


def softmax_cross_entropy_with_integer_labels(logits, labels):
    """-log_softmax(logits)[label] for integer class labels of shape logits.shape[:-1]."""
    logits, labels = fnp.asarray(logits), fnp.asarray(labels)
    if not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise TypeError(
            "softmax_cross_entropy_with_integer_labels: labels must be integers, got "
            f"{np.dtype(labels.dtype).name}"
        )
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            "softmax_cross_entropy_with_integer_labels: labels must have shape "
            f"logits.shape[:-1] = {tuple(logits.shape[:-1])}, got {tuple(labels.shape)}"
        )
    log_probs = F.log_softmax(logits, axis=-1)
    return -fnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def squared_error(predictions, targets=None):
    """(predictions - targets)^2 elementwise (targets default to zero)."""
    predictions = fnp.asarray(predictions)
    error = predictions if targets is None else predictions - fnp.asarray(targets)
    return error * error


def l2_loss(predictions, targets=None):
    """Half the squared error, as Optax defines it."""
    return 0.5 * squared_error(predictions, targets)


def mean_squared_error(predictions, targets=None):
    """The squared error averaged over the last axis."""
    return squared_error(predictions, targets).mean(axis=-1)


mse = mean_squared_error


def sigmoid_binary_cross_entropy(logits, labels):
    """-labels log sigmoid(logits) - (1 - labels) log(1 - sigmoid(logits)), elementwise, in a
    form that stays finite for large logits."""
    logits, labels = fnp.asarray(logits), fnp.asarray(labels)
    return -labels * F.log_sigmoid(logits) - (1 - labels) * F.log_sigmoid(-logits)
