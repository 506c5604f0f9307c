"""Cross-entropy losses of probabilistic classifiers given logits: softmax over classes,
sigmoid per binary decision, and their focal, polynomial and label-smoothed variants."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

import funcgrad.numpy as fnp
from funcgrad.nn import functions as F
from funcgrad.numpy._promotion import promote_args_inexact

ArrayLike = Any
Axis = int | tuple[int, ...] | None


def _floating(name: str, x: ArrayLike):
    (x,) = promote_args_inexact(name, x)
    return x


def _class_axes(name: str, axis: Axis, ndim: int) -> tuple[int, ...]:
    """`axis` as a sorted tuple of non-negative axes of an array of rank `ndim`."""
    axes = tuple(range(ndim)) if axis is None else (axis,) if np.ndim(axis) == 0 else axis
    normalized = []
    for a in axes:
        a = operator.index(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"{name}: axis {a} is out of bounds for logits of rank {ndim}")
        normalized.append(a % ndim)
    return tuple(sorted(set(normalized)))


def _where_over_classes(where: ArrayLike | None, ndim: int, axis: Axis):
    """A per-example mask (the logits' rank less the class axes) gets its class axes back, so
    that it selects whole examples; a mask of the logits' rank selects single classes."""
    if where is None:
        return None
    where = fnp.asarray(where)
    if where.ndim != ndim:
        where = fnp.expand_dims(where, _class_axes("where", axis, ndim))
    return where


def sigmoid_binary_cross_entropy(logits: ArrayLike, labels: ArrayLike):
    """-labels log sigmoid(logits) - (1 - labels) log(1 - sigmoid(logits)), elementwise:
    independent binary decisions with labels in [0, 1]. log(1 - sigmoid(x)) is computed as
    log_sigmoid(-x), which stays finite where sigmoid(x) rounds to 1."""
    logits = _floating("sigmoid_binary_cross_entropy", logits)
    labels = fnp.asarray(labels).astype(logits.dtype)
    return -labels * F.log_sigmoid(logits) - (1 - labels) * F.log_sigmoid(-logits)


def softmax_cross_entropy(
    logits: ArrayLike, labels: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
):
    """-sum(labels * log_softmax(logits)) over the class `axis`; `labels` are probabilities
    (one-hot or soft) of the logits' shape. `where` masks out classes (the logits' shape) or
    whole examples (the result's shape)."""
    logits = _floating("softmax_cross_entropy", logits)
    labels = fnp.asarray(labels)
    if logits.shape != labels.shape:
        raise ValueError(
            f"softmax_cross_entropy: logits {tuple(logits.shape)} and labels "
            f"{tuple(labels.shape)} must have the same shape"
        )
    where = _where_over_classes(where, logits.ndim, axis)
    log_probs = F.log_softmax(logits, axis=axis, where=where)
    if where is not None:
        # The masked-out log-probabilities are -inf; as 0 they give their labels a derivative
        # of 0 rather than 0 * inf.
        log_probs = fnp.where(where, log_probs, 0)
    return -fnp.sum(labels * log_probs, axis=axis, where=where)


def safe_softmax_cross_entropy(logits: ArrayLike, labels: ArrayLike):
    """softmax_cross_entropy over the last axis, taking 0 * log(0) as 0: a class ruled out by
    a logit of -inf, with label 0, adds nothing (softmax_cross_entropy gives nan there).
    `labels` broadcast against the logits."""
    logits = _floating("safe_softmax_cross_entropy", logits)
    labels = fnp.asarray(labels)
    log_probs = F.log_softmax(logits, axis=-1)
    terms = fnp.where(labels != 0, labels * log_probs, 0)
    return -fnp.sum(terms, axis=-1)


def softmax_cross_entropy_with_integer_labels(
    logits: ArrayLike,
    labels: ArrayLike,
    axis: int | tuple[int, ...] = -1,
    where: ArrayLike | None = None,
):
    """-log_softmax(logits)[label] for integer class labels, one per example.

    The result and `labels` have the logits' shape without the class `axis`. With several
    class axes a label is the flat (C order) index into the block of classes. `where` masks
    out classes (the logits' shape) or whole examples (the labels' shape); an example with
    no class left has loss 0."""
    logits = _floating("softmax_cross_entropy_with_integer_labels", logits)
    labels = fnp.asarray(labels)
    if not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise TypeError(
            "softmax_cross_entropy_with_integer_labels: labels must be integers, got "
            f"{np.dtype(labels.dtype).name}"
        )
    class_axes = _class_axes("softmax_cross_entropy_with_integer_labels", axis, logits.ndim)
    batch_axes = tuple(a for a in range(logits.ndim) if a not in class_axes)
    batch_shape = tuple(logits.shape[a] for a in batch_axes)
    if tuple(labels.shape) != batch_shape:
        raise ValueError(
            f"softmax_cross_entropy_with_integer_labels: labels must have shape {batch_shape} "
            f"(the logits' without the class axes {class_axes}), got {tuple(labels.shape)}"
        )
    where = _where_over_classes(where, logits.ndim, class_axes)

    def classes_last(x):
        return fnp.transpose(x, batch_axes + class_axes).reshape(batch_shape + (-1,))

    if where is not None:
        where = classes_last(fnp.broadcast_to(where, logits.shape))
    logits = classes_last(logits)
    label_logits = fnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    loss = F.logsumexp(logits, axis=-1, where=where) - label_logits
    if where is None:
        return loss
    return fnp.where(fnp.any(where, axis=-1), loss, 0)


def poly_loss_cross_entropy(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    epsilon: ArrayLike = 2.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
):
    """PolyLoss (Poly-1): softmax_cross_entropy + epsilon * (1 - p_t), where p_t is the
    probability given to the labels, sum(labels * softmax(logits)).

    Cross-entropy's series in (1 - p_t) has leading coefficient 1; epsilon moves it (positive
    values push harder on examples already mostly right)."""
    logits = _floating("poly_loss_cross_entropy", logits)
    labels = fnp.asarray(labels)
    cross_entropy = softmax_cross_entropy(logits, labels, axis=axis, where=where)
    where = _where_over_classes(where, logits.ndim, axis)
    probs = F.softmax(logits, axis=axis, where=where)
    one_minus_p_t = fnp.sum(labels * (1 - probs), axis=axis, where=where)
    return cross_entropy + epsilon * one_minus_p_t


def sigmoid_focal_loss(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    alpha: ArrayLike | None = None,
    gamma: ArrayLike = 2.0,
):
    """sigmoid_binary_cross_entropy scaled by (1 - p_t)**gamma, where p_t is the probability
    of the label: confident right answers count for little, so rare hard examples are not
    drowned by many easy ones. `alpha` weights positives by alpha and negatives by 1 - alpha.

    1 - p_t = (1 - y) p + y (1 - p) is formed in log space from log_sigmoid(+-logits), so the
    weight stays exact (and its derivative finite) where p rounds to 0 or 1, and for gamma
    below 1, where (1 - p_t)**gamma has an infinite slope at 0. Labels may be soft, in
    [0, 1]."""
    logits = _floating("sigmoid_focal_loss", logits)
    labels = fnp.asarray(labels).astype(logits.dtype)
    labels = fnp.broadcast_to(labels, fnp.broadcast_shapes(labels.shape, logits.shape))
    logits = fnp.broadcast_to(logits, labels.shape)
    cross_entropy = sigmoid_binary_cross_entropy(logits, labels)
    log_p, log_not_p = F.log_sigmoid(logits), F.log_sigmoid(-logits)
    log_one_minus_p_t = F.logsumexp(
        fnp.stack([log_p, log_not_p], axis=-1),
        axis=-1,
        b=fnp.stack([1 - labels, labels], axis=-1),
    )
    loss = fnp.exp(gamma * log_one_minus_p_t) * cross_entropy
    if alpha is None:
        return loss
    return (alpha * labels + (1 - alpha) * (1 - labels)) * loss


def smooth_labels(
    labels: ArrayLike,
    alpha: ArrayLike,
    *,
    axis: Axis = -1,
    where: ArrayLike | None = None,
):
    """(1 - alpha) * labels + alpha / num_classes: one-hot labels mixed with the uniform
    distribution over the classes on `axis` (those `where` selects), to be used with a
    cross-entropy loss; it keeps the model from driving logit gaps to infinity."""
    labels = _floating("smooth_labels", labels)
    if where is None:
        axes = _class_axes("smooth_labels", axis, labels.ndim)
        num_classes = int(np.prod([labels.shape[a] for a in axes]))
    else:
        num_classes = fnp.sum(where, axis=axis, keepdims=True).astype(labels.dtype)
    return (1 - alpha) * labels + alpha / num_classes
