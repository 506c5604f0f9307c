"""Ranking losses: the cost of the order that item scores induce, against relevance labels,
over the last axis (a list of items); leading axes are lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import funcgrad.numpy as fnp
from funcgrad.nn import functions as F
from funcgrad.numpy._promotion import promote_args_inexact

ArrayLike = Any


def ranking_softmax_loss(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    where: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    reduce_fn: Callable | None = fnp.mean,
):
    """The listwise softmax loss -sum_i y_i log softmax(s)_i per list, reduced over lists.

    `where` leaves items out of their list (and lists with no item left out of the
    reduction), `weights` scale the labels. reduce_fn(loss, where=valid_lists) reduces; with
    the default mean, a batch with no valid list gives 0 rather than the nan of an empty mean
    (a nan already in the losses is kept). With reduce_fn=None the per-list losses come back,
    0 for lists with no valid item."""
    (logits,) = promote_args_inexact("ranking_softmax_loss", logits)
    labels = fnp.asarray(labels).astype(logits.dtype)
    if where is not None:
        where = fnp.asarray(where)
        labels = fnp.where(where, labels, 0)
    if weights is not None:
        labels = labels * weights
    log_probs = F.log_softmax(logits, axis=-1, where=where)
    loss = -fnp.sum(labels * log_probs, axis=-1, where=where)
    valid_lists = None if where is None else fnp.any(where, axis=-1)
    if reduce_fn is None:
        return loss if valid_lists is None else fnp.where(valid_lists, loss, 0)
    reduced = reduce_fn(loss, where=valid_lists)
    if reduce_fn is fnp.mean:
        nothing_to_average = fnp.isnan(reduced) & ~fnp.any(fnp.isnan(loss))
        reduced = fnp.where(nothing_to_average, 0, reduced)
    return reduced
