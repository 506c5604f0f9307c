"""Metric-learning losses on embeddings: triplets of anchor, positive and negative, and the
NT-Xent loss of contrastive learning."""

from __future__ import annotations

from typing import Any

import funcgrad.numpy as fnp
from funcgrad.nn import functions as F
from funcgrad.nn.losses.regression import cosine_similarity
from funcgrad.numpy._promotion import promote_args_inexact

ArrayLike = Any


def triplet_margin_loss(
    anchors: ArrayLike,
    positives: ArrayLike,
    negatives: ArrayLike,
    axis: int = -1,
    norm_degree: ArrayLike = 2,
    margin: ArrayLike = 1.0,
    eps: ArrayLike = 1e-6,
):
    """max(d(anchor, positive) - d(anchor, negative) + margin, 0) per triplet, where d is the
    `norm_degree`-norm of the difference over `axis`, (sum |x - y|**p + eps)**(1 / p).

    eps keeps the norm's derivative finite where two embeddings coincide."""
    anchors, positives, negatives = promote_args_inexact(
        "triplet_margin_loss", anchors, positives, negatives
    )

    def distance(x, y):
        return (fnp.sum(fnp.abs(x - y) ** norm_degree, axis=axis) + eps) ** (1 / norm_degree)

    return fnp.maximum(distance(anchors, positives) - distance(anchors, negatives) + margin, 0)


def ntxent(embeddings: ArrayLike, labels: ArrayLike, temperature: ArrayLike = 0.07):
    """The normalized temperature-scaled cross-entropy (NT-Xent) of a batch of embeddings
    (batch, features), a scalar.

    Embeddings with equal `labels` (batch,) are positive pairs, the rest negatives. For each
    ordered positive pair (i, j) the loss is the cross-entropy of picking j among j and all of
    i's negatives, by cosine similarity over `temperature`; the result is its mean over the
    positive pairs (nan if there are none)."""
    (embeddings,) = promote_args_inexact("ntxent", embeddings)
    labels = fnp.asarray(labels)
    if embeddings.ndim != 2 or labels.shape != embeddings.shape[:1]:
        raise ValueError(
            f"ntxent: embeddings must have shape (batch, features) and labels (batch,), got "
            f"{tuple(embeddings.shape)} and {tuple(labels.shape)}"
        )
    epsilon = fnp.finfo(embeddings.dtype).eps
    similarity = (
        cosine_similarity(embeddings[:, None, :], embeddings[None, :, :], epsilon=epsilon)
        / temperature
    )
    same_label = labels[:, None] == labels[None, :]
    positive = same_label & ~fnp.eye(labels.shape[0], dtype=bool)
    log_negatives = F.logsumexp(similarity, axis=1, keepdims=True, where=~same_label)
    log_picked = similarity - fnp.logaddexp(similarity, log_negatives)
    total = -fnp.sum(fnp.where(positive, log_picked, 0))
    return total / fnp.sum(positive)
