"""Losses on the margin of raw scores: hinge and perceptron (binary and multiclass), and
the Fenchel-Young losses built on a max function, sparsemax's among them.

The binary forms take targets in {-1, 1} (hinge, perceptron) or labels in {0, 1}
(sparsemax); the multiclass forms take one integer label per row of scores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import funcgrad.numpy as fnp
from funcgrad.nn import functions as F
from funcgrad.numpy._promotion import promote_args_inexact

ArrayLike = Any


def _label_scores(name: str, scores, labels):
    """scores[..., labels]: the score of each row's label, with the checks that keep a wrong
    label array from being broadcast or rounded into a plausible loss."""
    labels = fnp.asarray(labels)
    if not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise TypeError(f"{name}: labels must be integers, got {np.dtype(labels.dtype).name}")
    if tuple(labels.shape) != tuple(scores.shape[:-1]):
        raise ValueError(
            f"{name}: labels must have shape scores.shape[:-1] = {tuple(scores.shape[:-1])}, "
            f"got {tuple(labels.shape)}"
        )
    return fnp.take_along_axis(scores, labels[..., None], axis=-1)[..., 0]


def hinge_loss(predictor_outputs: ArrayLike, targets: ArrayLike):
    """max(0, 1 - output * target): zero once the output has the target's sign with margin 1."""
    return fnp.maximum(0, 1 - fnp.asarray(predictor_outputs) * fnp.asarray(targets))


def perceptron_loss(predictor_outputs: ArrayLike, targets: ArrayLike):
    """max(0, -output * target): zero once the output has the target's sign, with no margin."""
    if fnp.shape(predictor_outputs) != fnp.shape(targets):
        raise ValueError(
            f"perceptron_loss: predictor_outputs {fnp.shape(predictor_outputs)} and targets "
            f"{fnp.shape(targets)} must have the same shape"
        )
    return fnp.maximum(0, -fnp.asarray(predictor_outputs) * fnp.asarray(targets))


def multiclass_hinge_loss(scores: ArrayLike, labels: ArrayLike):
    """max_k(scores_k + [k != label]) - scores_label: zero once the label's score beats every
    other class by a margin of 1 (Crammer and Singer's multiclass hinge)."""
    scores = fnp.asarray(scores)
    label_scores = _label_scores("multiclass_hinge_loss", scores, labels)
    margins = 1 - F.one_hot(labels, scores.shape[-1], dtype=scores.dtype)
    return fnp.max(scores + margins, axis=-1) - label_scores


def multiclass_perceptron_loss(scores: ArrayLike, labels: ArrayLike):
    """max_k(scores_k) - scores_label: zero once the label has the highest score."""
    scores = fnp.asarray(scores)
    label_scores = _label_scores("multiclass_perceptron_loss", scores, labels)
    return fnp.max(scores, axis=-1) - label_scores


def sparsemax_loss(logits: ArrayLike, labels: ArrayLike):
    """The binary sparsemax loss: sparse_plus(logits) for label 0 and sparse_plus(-logits)
    for label 1. It is zero exactly where sparse_sigmoid(logits) equals the label, so unlike
    the logistic loss it stops pushing once |logit| >= 1 on the right side."""
    (logits,) = promote_args_inexact("sparsemax_loss", logits)
    return F.sparse_plus(fnp.where(fnp.asarray(labels) != 0, -logits, logits))


def _sparsemax(scores):
    """The Euclidean projection of each last-axis row onto the probability simplex: the
    scores shifted down by the threshold tau that leaves the positive parts summing to 1,
    negative parts cut to 0. tau comes from the sorted scores: the support is the k largest
    for the largest k with k * z_(k) > (z_(1) + ... + z_(k)) - 1."""
    descending = fnp.flip(fnp.sort(scores, axis=-1), axis=-1)
    cumulative = fnp.cumsum(descending, axis=-1)
    ranks = fnp.arange(1, scores.shape[-1] + 1, dtype=scores.dtype)
    support_size = fnp.sum(ranks * descending > cumulative - 1, axis=-1, keepdims=True)
    support_total = fnp.take_along_axis(cumulative, support_size - 1, axis=-1)
    tau = (support_total - 1) / support_size.astype(scores.dtype)
    return fnp.maximum(scores - tau, 0)


def multiclass_sparsemax_loss(scores: ArrayLike, labels: ArrayLike):
    """The multiclass sparsemax loss: the Fenchel-Young loss of the Gini entropy,
    <p, scores> + (1 - |p|**2) / 2 - scores_label with p = sparsemax(scores) over the last
    axis. Zero exactly when sparsemax puts all its mass on the label; its gradient is
    p - onehot(label).

    <p, scores> - scores_label is summed as <p, scores - scores_label> (p sums to 1), which
    keeps the digits that large scores would cancel, and only over p's support, so a score
    of -inf outside it adds 0 rather than 0 * inf."""
    (scores,) = promote_args_inexact("multiclass_sparsemax_loss", scores)
    label_scores = _label_scores("multiclass_sparsemax_loss", scores, labels)
    probs = _sparsemax(scores)
    gaps = fnp.where(probs > 0, scores - label_scores[..., None], 0)
    return fnp.sum(probs * gaps, axis=-1) + 0.5 * (1 - fnp.sum(probs * probs, axis=-1))


def make_fenchel_young_loss(max_fun: Callable) -> Callable:
    """The Fenchel-Young loss of a max function: (scores, targets, *args, **kwargs) ->
    max_fun(scores, *args, **kwargs) - <targets, scores>, over the last axis of each (leading
    axes are examples). With logsumexp it is the softmax cross-entropy of probability targets.
    `max_fun` sees one 1-d row of scores at a time; the extra arguments are passed unmapped."""

    def fenchel_young_loss(scores, targets, *args, **kwargs):
        def row_max(row):
            return max_fun(row, *args, **kwargs)

        max_value = fnp.vectorize(row_max, signature="(n)->()")(scores)
        return max_value - fnp.sum(fnp.asarray(targets) * fnp.asarray(scores), axis=-1)

    return fenchel_young_loss
