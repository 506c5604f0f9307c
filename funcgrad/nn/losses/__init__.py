"""Losses with Optax's names, signatures and conventions (also `funcgrad.optim.losses`).

Each returns the loss per example, or per element for the elementwise ones; reduce it
yourself, usually with `.mean()`. The exceptions reduce by definition: `ntxent` and
`multiclass_generalized_dice_loss` compare the examples of a batch with each other, and
`ranking_softmax_loss` takes a `reduce_fn`.
"""

from funcgrad.nn.losses.contrastive import ntxent, triplet_margin_loss
from funcgrad.nn.losses.cross_entropy import (
    poly_loss_cross_entropy,
    safe_softmax_cross_entropy,
    sigmoid_binary_cross_entropy,
    sigmoid_focal_loss,
    smooth_labels,
    softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels,
)
from funcgrad.nn.losses.ctc import ctc_loss, ctc_loss_with_forward_probs
from funcgrad.nn.losses.divergence import (
    convex_kl_divergence,
    generalized_kl_divergence,
    kl_divergence,
    kl_divergence_with_log_targets,
)
from funcgrad.nn.losses.margin import (
    hinge_loss,
    make_fenchel_young_loss,
    multiclass_hinge_loss,
    multiclass_perceptron_loss,
    multiclass_sparsemax_loss,
    perceptron_loss,
    sparsemax_loss,
)
from funcgrad.nn.losses.ranking import ranking_softmax_loss
from funcgrad.nn.losses.regression import (
    cosine_distance,
    cosine_similarity,
    huber_loss,
    l2_loss,
    log_cosh,
    mean_squared_error,
    mse,
    squared_error,
)
from funcgrad.nn.losses.segmentation import (
    binary_dice_loss,
    dice_loss,
    multiclass_generalized_dice_loss,
)

__all__ = [
    "binary_dice_loss",
    "convex_kl_divergence",
    "cosine_distance",
    "cosine_similarity",
    "ctc_loss",
    "ctc_loss_with_forward_probs",
    "dice_loss",
    "generalized_kl_divergence",
    "hinge_loss",
    "huber_loss",
    "kl_divergence",
    "kl_divergence_with_log_targets",
    "l2_loss",
    "log_cosh",
    "make_fenchel_young_loss",
    "mean_squared_error",
    "mse",
    "multiclass_generalized_dice_loss",
    "multiclass_hinge_loss",
    "multiclass_perceptron_loss",
    "multiclass_sparsemax_loss",
    "ntxent",
    "perceptron_loss",
    "poly_loss_cross_entropy",
    "ranking_softmax_loss",
    "safe_softmax_cross_entropy",
    "sigmoid_binary_cross_entropy",
    "sigmoid_focal_loss",
    "smooth_labels",
    "softmax_cross_entropy",
    "softmax_cross_entropy_with_integer_labels",
    "sparsemax_loss",
    "squared_error",
    "triplet_margin_loss",
]
