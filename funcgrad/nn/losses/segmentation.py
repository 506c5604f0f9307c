"""Dice losses of segmentation: one minus the soft overlap of predicted and target masks per
class, summed over the spatial axes, so that a small class counts as much as a large one."""

from __future__ import annotations

from typing import Any

import numpy as np

import funcgrad.numpy as fnp
from funcgrad import core
from funcgrad.nn import functions as F

ArrayLike = Any

_REDUCTIONS = ("mean", "sum", "none")


def _check_distributions(probs) -> None:
    """Probabilities given directly must sum to 1 over the classes; checked where they are
    known (not while traced), since Dice of unnormalized scores is silently meaningless."""
    if isinstance(probs, core.Tracer) or probs.shape[-1] == 1:
        return
    totals = np.asarray(fnp.sum(probs, axis=-1))
    if not np.allclose(totals, 1, rtol=1e-5, atol=1e-8):
        raise ValueError(
            "dice_loss: with apply_softmax=False the predictions must be probabilities that "
            f"sum to 1 over the class axis; their sums range over [{totals.min():.6g}, "
            f"{totals.max():.6g}]"
        )


def dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    class_weights: ArrayLike | None = None,
    smooth: ArrayLike = 1.0,
    alpha: ArrayLike = 0.5,
    beta: ArrayLike = 0.5,
    apply_softmax: bool = True,
    reduction: str = "mean",
    ignore_background: bool = False,
    axis: int | tuple[int, ...] | None = None,
):
    """The soft Dice (Tversky) loss per example, classes on the last axis.

    Per class, with I = sum(p * t), P = sum(p), T = sum(t) over `axis` (by default every axis
    but the first and the last): 1 - (I + smooth) / (I + alpha (P - I) + beta (T - I) + smooth).
    alpha = beta = 1/2 is Dice; alpha > beta penalizes false positives more. Predictions are
    logits (softmax over classes, sigmoid for a single channel) unless apply_softmax is
    False. A target (or prediction) one rank short gets a channel axis. The per-class losses
    are multiplied by `class_weights`, lose class 0 with ignore_background, and are averaged
    or summed over the classes (`reduction`, or "none" to keep them)."""
    predictions, targets = fnp.asarray(predictions), fnp.asarray(targets)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"dice_loss: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if predictions.ndim == targets.ndim - 1:
        predictions = predictions[..., None]
    if targets.ndim == predictions.ndim - 1:
        targets = targets[..., None]
    if predictions.shape != targets.shape:
        raise ValueError(
            f"dice_loss: predictions {tuple(predictions.shape)} and targets "
            f"{tuple(targets.shape)} must have the same shape (up to a channel axis)"
        )
    if not apply_softmax:
        probs = predictions
        _check_distributions(probs)
    elif predictions.shape[-1] == 1:
        probs = F.sigmoid(predictions)
    else:
        probs = F.softmax(predictions, axis=-1)
    if axis is None:
        axis = tuple(range(1, probs.ndim - 1))

    overlap = fnp.sum(probs * targets, axis=axis)
    false_positives = fnp.sum(probs, axis=axis) - overlap
    false_negatives = fnp.sum(targets, axis=axis) - overlap
    denominator = overlap + alpha * false_positives + beta * false_negatives + smooth
    loss = 1 - (overlap + smooth) / denominator
    if class_weights is not None:
        class_weights = fnp.asarray(class_weights)
        if class_weights.ndim != 1:
            raise ValueError(
                f"dice_loss: class_weights must be one weight per class, got shape "
                f"{tuple(class_weights.shape)}"
            )
        loss = loss * class_weights
    if ignore_background and probs.shape[-1] > 1:
        loss = loss[..., 1:]
    if reduction == "mean":
        return fnp.mean(loss, axis=-1)
    if reduction == "sum":
        return fnp.sum(loss, axis=-1)
    return loss


def binary_dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    smooth: ArrayLike = 1.0,
    apply_sigmoid: bool = True,
):
    """dice_loss of one foreground channel: predictions (logits, or probabilities with
    apply_sigmoid=False) and targets of shape [...] or [..., 1]; the result is per example."""
    predictions, targets = fnp.asarray(predictions), fnp.asarray(targets)
    if predictions.ndim == targets.ndim and predictions.shape[-1] != 1:
        predictions, targets = predictions[..., None], targets[..., None]
    return dice_loss(
        predictions, targets, smooth=smooth, apply_softmax=apply_sigmoid, reduction="mean"
    )


def multiclass_generalized_dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    smooth: ArrayLike = 1.0,
    apply_softmax: bool = True,
    ignore_background: bool = False,
):
    """Generalized Dice: dice_loss with each class weighted by 1 / (its target volume)**2
    over the whole batch (normalized to average 1), so rare classes weigh as much as common
    ones; a scalar, the mean over examples and classes."""
    predictions, targets = fnp.asarray(predictions), fnp.asarray(targets)
    if predictions.shape != targets.shape:
        raise ValueError(
            f"multiclass_generalized_dice_loss: predictions {tuple(predictions.shape)} and "
            f"targets {tuple(targets.shape)} must have the same shape"
        )
    volumes = fnp.sum(targets, axis=tuple(range(targets.ndim - 1)))
    # The small constant keeps an absent class's weight finite (and then dominant).
    weights = 1 / (volumes * volumes + 1e-7)
    weights = weights * (weights.shape[0] / fnp.sum(weights))
    per_class = dice_loss(
        predictions,
        targets,
        class_weights=weights,
        smooth=smooth,
        apply_softmax=apply_softmax,
        reduction="none",
        ignore_background=ignore_background,
    )
    return fnp.mean(per_class)
