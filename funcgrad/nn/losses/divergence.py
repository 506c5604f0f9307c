"""Kullback-Leibler divergences of a predicted distribution (given by its log) from a target
one, summed over `axis` (the entries `where` selects)."""

from __future__ import annotations

from typing import Any

import funcgrad.numpy as fnp
from funcgrad.numpy._promotion import promote_args_inexact

ArrayLike = Any
Axis = int | tuple[int, ...] | None


def kl_divergence(
    log_predictions: ArrayLike,
    targets: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
):
    """KL(targets || predictions) = sum(targets * (log(targets) - log_predictions)).

    A target of 0 adds 0 (0 log 0 = 0) against any finite log-prediction; its log is computed
    at 1 instead, so that the derivative in the target is not 0 * inf there either."""
    log_predictions, targets = promote_args_inexact("kl_divergence", log_predictions, targets)
    zero = targets == 0
    log_targets = fnp.where(zero, 0, fnp.log(fnp.where(zero, 1, targets)))
    return fnp.sum(targets * (log_targets - log_predictions), axis=axis, where=where)


def kl_divergence_with_log_targets(
    log_predictions: ArrayLike,
    log_targets: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
):
    """kl_divergence with the targets given by their logs, for targets too small for their
    own dtype. A log-target of -inf (a target of 0) adds 0, as in kl_divergence."""
    log_predictions, log_targets = promote_args_inexact(
        "kl_divergence_with_log_targets", log_predictions, log_targets
    )
    zero = log_targets == -fnp.inf
    finite_log_targets = fnp.where(zero, 0, log_targets)
    terms = fnp.exp(finite_log_targets) * (finite_log_targets - log_predictions)
    return fnp.sum(fnp.where(zero, 0, terms), axis=axis, where=where)


def generalized_kl_divergence(
    log_predictions: ArrayLike,
    targets: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
):
    """kl_divergence + sum(predictions - targets): the Bregman divergence of x log x - x,
    which stays non-negative (and 0 only at equality) for unnormalized measures, where the
    plain KL sum can be negative."""
    log_predictions, targets = promote_args_inexact(
        "generalized_kl_divergence", log_predictions, targets
    )
    mass_gap = fnp.sum(fnp.exp(log_predictions) - targets, axis=axis, where=where)
    return kl_divergence(log_predictions, targets, axis=axis, where=where) + mass_gap


# The earlier name of generalized_kl_divergence.
convex_kl_divergence = generalized_kl_divergence
