"""funcgrad.optim: optimizers as composable gradient transformations, with Optax's names,
signatures and update equations.

    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(1e-3))
    state = opt.init(params)
    updates, state = opt.update(grads, state, params)
    params = optim.apply_updates(params, updates)

Wrappers change how an optimizer is applied: `masked` and `multi_transform` (to some leaves),
`apply_if_finite` (skip NaN steps), `MultiSteps` (gradient accumulation), `inject_hyperparams`
(learning rate and the rest in the state, where they may be schedules or changed by hand).
"""

from funcgrad.optim.base import (
    EmptyState,
    GradientTransformation,
    apply_updates,
    chain,
    global_norm,
    identity,
)
from funcgrad.optim.optimizers import (
    adabelief,
    adadelta,
    adagrad,
    adam,
    adamax,
    adamw,
    amsgrad,
    lamb,
    lars,
    lion,
    nadam,
    nadamw,
    novograd,
    radam,
    rmsprop,
    sgd,
    yogi,
)
from funcgrad.optim.schedules import (
    constant_schedule,
    cosine_decay_schedule,
    exponential_decay,
    join_schedules,
    linear_schedule,
    piecewise_constant_schedule,
    warmup_cosine_decay_schedule,
)
from funcgrad.optim.transforms import (
    ScaleByAdaDeltaState,
    ScaleByAdamState,
    ScaleByAmsgradState,
    ScaleByBeliefState,
    ScaleByLionState,
    ScaleByNovogradState,
    ScaleByRmsState,
    ScaleByRssState,
    ScaleByRStdDevState,
    ScaleByScheduleState,
    ScaleByTrustRatioState,
    TraceState,
    add_decayed_weights,
    clip,
    clip_by_global_norm,
    scale,
    scale_by_adadelta,
    scale_by_adam,
    scale_by_adamax,
    scale_by_amsgrad,
    scale_by_belief,
    scale_by_learning_rate,
    scale_by_lion,
    scale_by_novograd,
    scale_by_radam,
    scale_by_rms,
    scale_by_rss,
    scale_by_schedule,
    scale_by_stddev,
    scale_by_trust_ratio,
    scale_by_yogi,
    trace,
)
from funcgrad.optim.wrappers import (
    ApplyIfFiniteState,
    InjectHyperparamsState,
    MaskedState,
    MultiSteps,
    MultiStepsState,
    MultiTransformState,
    apply_if_finite,
    inject_hyperparams,
    masked,
    multi_transform,
)

# isort: split
# Losses: the module, and the names that Optax's top level also gives them.
from funcgrad.optim import losses
from funcgrad.optim.losses import (
    convex_kl_divergence,
    cosine_distance,
    cosine_similarity,
    ctc_loss,
    ctc_loss_with_forward_probs,
    generalized_kl_divergence,
    hinge_loss,
    huber_loss,
    kl_divergence,
    l2_loss,
    log_cosh,
    ntxent,
    safe_softmax_cross_entropy,
    sigmoid_binary_cross_entropy,
    sigmoid_focal_loss,
    smooth_labels,
    softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels,
    squared_error,
)
