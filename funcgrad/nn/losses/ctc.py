"""Connectionist temporal classification: the negative log-probability of a label sequence
summed over all its alignments to the frames, by the forward algorithm in log space.

An alignment emits one symbol per frame, a label or the blank; it reads as the label
sequence once runs of a repeated symbol are merged and blanks dropped (so two equal labels
in a row need a blank between them). The forward variables follow each prefix of the labels
in two states: `blank[n]`, n labels done and the last frame a blank (or no frame yet), and
`label[n]`, the last frame emitting label n (0-based). Impossible states hold `log_epsilon`
instead of -inf, so that no difference of infinities appears in the values or derivatives.
The derivative is that of the recursion, taken by reverse-mode autodiff through the scan.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.nn import functions as F
from funcgrad.numpy._promotion import promote_args_inexact

ArrayLike = Any


def _check_shapes(logits, logit_paddings, labels, label_paddings) -> None:
    if logits.ndim != 3 or logits.shape[1] == 0:
        raise ValueError(
            f"ctc_loss: logits must have shape (batch, frames, classes) with at least one "
            f"frame, got {tuple(logits.shape)}"
        )
    if tuple(logit_paddings.shape) != tuple(logits.shape[:2]):
        raise ValueError(
            f"ctc_loss: logit_paddings must have shape (batch, frames) = "
            f"{tuple(logits.shape[:2])}, got {tuple(logit_paddings.shape)}"
        )
    if labels.ndim != 2 or labels.shape[0] != logits.shape[0]:
        raise ValueError(
            f"ctc_loss: labels must have shape (batch, max_labels) with batch "
            f"{logits.shape[0]}, got {tuple(labels.shape)}"
        )
    if tuple(label_paddings.shape) != tuple(labels.shape):
        raise ValueError(
            f"ctc_loss: label_paddings must have the labels' shape {tuple(labels.shape)}, "
            f"got {tuple(label_paddings.shape)}"
        )
    if not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise TypeError(f"ctc_loss: labels must be integers, got {np.dtype(labels.dtype).name}")


def _pass_on(blank, finished):
    """blank[n + 1] gains `finished[n]`: a finished label n counts as n + 1 labels done."""
    return fnp.concatenate([blank[:, :1], fnp.logaddexp(blank[:, 1:], finished)], axis=1)


def ctc_loss_with_forward_probs(
    logits: ArrayLike,
    logit_paddings: ArrayLike,
    labels: ArrayLike,
    label_paddings: ArrayLike,
    *,
    blank_id: int = 0,
    log_epsilon: ArrayLike = -1e5,
):
    """The CTC loss and the forward log-probabilities behind it.

    logits: (B, T, K) scores of K classes, the blank among them at `blank_id`, per frame.
    logit_paddings: (B, T), 1 where a frame is padding (it is skipped), 0 where it is real.
    labels: (B, N) integer label sequences, right-padded; label_paddings: (B, N), 1 on the
    padding. log_epsilon stands for log(0).

    Returns (loss, log_alpha_blank, log_alpha_label): loss (B,) is -log p(labels | logits);
    log_alpha_blank (T, B, N + 1) and log_alpha_label (T, B, N) hold, after each frame, the
    log-probability of having emitted n labels and last a blank (or, at the last frame, being
    done with n labels either way), and of last emitting label n."""
    (logits,) = promote_args_inexact("ctc_loss", logits)
    logit_paddings, labels = fnp.asarray(logit_paddings), fnp.asarray(labels)
    label_paddings = fnp.asarray(label_paddings)
    _check_shapes(logits, logit_paddings, labels, label_paddings)
    batch, frames, classes = logits.shape
    max_labels = labels.shape[1]
    dtype = logits.dtype

    log_probs = F.log_softmax(logits, axis=-1)
    # Padding labels may be any integer; their states never reach the loss.
    label_ids = fnp.clip(labels, 0, classes - 1)
    frame_label_ids = fnp.broadcast_to(label_ids[:, None, :], (batch, frames, max_labels))
    label_log_probs = fnp.take_along_axis(log_probs, frame_label_ids, axis=2)
    # Transitions from label n to label n + 1 without a blank between are ruled out (cost
    # log_epsilon) where the two are equal.
    repeats = fnp.concatenate(
        [labels[:, 1:] == labels[:, :-1], fnp.zeros((batch, 1), dtype=bool)], axis=1
    )[:, :max_labels].astype(dtype)

    def frame_step(state, frame):
        blank, label = state
        frame_label_log_probs, frame_blank_log_probs, padded = frame
        blank_log_probs = frame_blank_log_probs[:, None]
        ready = _pass_on(blank, label + log_epsilon * repeats)
        next_label = fnp.logaddexp(ready[:, :-1], label) + frame_label_log_probs
        next_blank = ready + blank_log_probs
        # Label n, then a blank, reaches blank[n + 1]; `ready` already holds that path
        # unless label n + 1 repeats label n.
        next_blank = _pass_on(next_blank, label + blank_log_probs + log_epsilon * (1 - repeats))
        skip = padded[:, None] != 0
        next_blank = fnp.where(skip, blank, next_blank)
        next_label = fnp.where(skip, label, next_label)
        return (next_blank, next_label), (next_blank, next_label)

    no_labels_done = fnp.full((batch, max_labels + 1), log_epsilon, dtype=dtype)
    initial = (
        fnp.concatenate([fnp.zeros((batch, 1), dtype), no_labels_done[:, 1:]], axis=1),
        fnp.full((batch, max_labels), log_epsilon, dtype=dtype),
    )
    frames_first = (
        fnp.transpose(label_log_probs, (1, 0, 2)),
        fnp.transpose(log_probs[:, :, blank_id], (1, 0)),
        fnp.transpose(logit_paddings, (1, 0)),
    )
    _, (log_alpha_blank, log_alpha_label) = lax.scan(frame_step, initial, frames_first)

    # After the last frame a sequence may also end on its last label.
    done = _pass_on(log_alpha_blank[-1], log_alpha_label[-1])
    log_alpha_blank = fnp.concatenate([log_alpha_blank[:-1], done[None]], axis=0)
    label_lengths = max_labels - fnp.sum(label_paddings != 0, axis=1)
    loss = -fnp.take_along_axis(done, label_lengths[:, None].astype(np.int32), axis=1)[:, 0]
    return loss, log_alpha_blank, log_alpha_label


def ctc_loss(
    logits: ArrayLike,
    logit_paddings: ArrayLike,
    labels: ArrayLike,
    label_paddings: ArrayLike,
    *,
    blank_id: int = 0,
    log_epsilon: ArrayLike = -1e5,
):
    """-log p(labels | logits) per sequence, (B,); the arguments are those of
    ctc_loss_with_forward_probs."""
    loss, _, _ = ctc_loss_with_forward_probs(
        logits, logit_paddings, labels, label_paddings, blank_id=blank_id, log_epsilon=log_epsilon
    )
    return loss
