"""Regression losses: elementwise penalties on the error `predictions - targets`, and the
cosine similarity of vectors."""

from __future__ import annotations

import math
from typing import Any

import funcgrad.numpy as fnp
from funcgrad.numpy._promotion import promote_args_inexact

ArrayLike = Any
Axis = int | tuple[int, ...] | None


def _error(name: str, predictions: ArrayLike, targets: ArrayLike | None):
    """predictions - targets (or predictions alone), in a floating dtype."""
    (predictions,) = promote_args_inexact(name, predictions)
    if targets is None:
        return predictions
    return predictions - fnp.asarray(targets)


def squared_error(predictions: ArrayLike, targets: ArrayLike | None = None):
    """(predictions - targets)**2 elementwise; targets default to zero.

    The shapes must be equal: a target of shape (n, 1) against predictions of shape (n,)
    would broadcast to an (n, n) loss whose mean looks plausible and is wrong."""
    if targets is not None and fnp.shape(predictions) != fnp.shape(targets):
        raise ValueError(
            f"squared_error: predictions {fnp.shape(predictions)} and targets "
            f"{fnp.shape(targets)} must have the same shape"
        )
    error = _error("squared_error", predictions, targets)
    return error * error


def l2_loss(predictions: ArrayLike, targets: ArrayLike | None = None):
    """Half the squared error, so that its derivative is the error itself."""
    return 0.5 * squared_error(predictions, targets)


def mean_squared_error(predictions: ArrayLike, targets: ArrayLike | None = None):
    """The squared error averaged over the last axis."""
    return squared_error(predictions, targets).mean(axis=-1)


mse = mean_squared_error


def huber_loss(predictions: ArrayLike, targets: ArrayLike | None = None, *, delta: ArrayLike = 1.0):
    """error**2 / 2 where |error| <= delta, and delta * (|error| - delta / 2) beyond: the
    l2 loss with its derivative clipped to [-delta, delta].

    Written as the quadratic part min(|e|, delta) plus the linear rest |e| - min(|e|, delta),
    so that the derivative at |e| == delta is delta however min splits the tie."""
    magnitude = fnp.abs(_error("huber_loss", predictions, targets))
    quadratic = fnp.minimum(magnitude, delta)
    return 0.5 * quadratic * quadratic + delta * (magnitude - quadratic)


def log_cosh(predictions: ArrayLike, targets: ArrayLike | None = None):
    """log(cosh(error)): error**2 / 2 near 0 and |error| - log 2 far away, smooth everywhere.

    cosh overflows from |error| > 89 in float32; log(exp(e) + exp(-e)) - log 2 does not."""
    error = _error("log_cosh", predictions, targets)
    return fnp.logaddexp(error, -error) - math.log(2.0)


def cosine_similarity(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    epsilon: ArrayLike = 0.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
):
    """The cosine of the angle between `predictions` and `targets` over `axis` (the entries
    `where` selects), in [-1, 1].

    Each vector is divided by sqrt(max(its squared norm, epsilon)): with the default epsilon
    of 0 a zero vector gives nan, a positive epsilon makes it 0."""
    predictions, targets = promote_args_inexact("cosine_similarity", predictions, targets)

    def unit(x):
        squared_norm = fnp.sum(x * x, axis=axis, where=where, keepdims=True)
        return x / fnp.sqrt(fnp.maximum(squared_norm, epsilon))

    return fnp.sum(unit(predictions) * unit(targets), axis=axis, where=where)


def cosine_distance(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    epsilon: ArrayLike = 0.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
):
    """1 - cosine_similarity: 0 for vectors pointing the same way, 2 for opposite ones."""
    similarity = cosine_similarity(predictions, targets, epsilon=epsilon, axis=axis, where=where)
    return 1.0 - similarity
