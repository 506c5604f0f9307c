"""funcgrad.optim: optimizers as composable gradient transformations, with Optax's names,
signatures and update equations.

    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(1e-3))
    state = opt.init(params)
    updates, state = opt.update(grads, state, params)
    params = optim.apply_updates(params, updates)

Wrappers change how an optimizer is applied: `masked`, `partition` (alias `multi_transform`)
and `freeze` (to some leaves), `flatten` (to all leaves as one vector), `apply_if_finite` (skip
NaN steps), `MultiSteps` (gradient accumulation), `conditionally_transform` (on some steps),
`lookahead` (slow and fast weights), `inject_hyperparams` (learning rate and the rest in the
state, where they may be schedules or changed by hand).

`update` may take extra keyword arguments (`value=loss` for `polyak_sgd`); `chain` and the
wrappers pass them to the transformations that take them.
"""

from funcgrad.optim.base import (
    EmptyState,
    GradientTransformation,
    GradientTransformationExtraArgs,
    OptState,
    Params,
    TransformInitFn,
    TransformUpdateExtraArgsFn,
    TransformUpdateFn,
    Updates,
    apply_updates,
    chain,
    global_norm,
    identity,
    incremental_update,
    init_empty_state,
    named_chain,
    periodic_update,
    set_to_zero,
    stateless,
    stateless_with_tree_map,
    with_extra_args_support,
)
from funcgrad.optim.conditional import (
    ApplyEvery,
    ConditionallyMaskState,
    ConditionallyTransformState,
    ConditionFn,
    apply_every,
    conditionally_mask,
    conditionally_transform,
)
from funcgrad.optim.constraints import (
    AdaptiveGradClipState,
    NonNegativeParamsState,
    ZeroNansState,
    adaptive_grad_clip,
    centralize,
    clip_by_block_rms,
    keep_params_nonnegative,
    per_example_global_norm_clip,
    per_example_layer_norm_clip,
    scale_by_param_block_norm,
    scale_by_param_block_rms,
    scale_gradient,
    zero_nans,
)
from funcgrad.optim.factorized import (
    FactoredState,
    ScaleBySM3State,
    scale_by_factored_rms,
    scale_by_sm3,
)
from funcgrad.optim.lbfgs import (
    BacktrackingLinesearchInfo,
    ScaleByBacktrackingLinesearchState,
    ScaleByLBFGSState,
    scale_by_backtracking_linesearch,
    scale_by_lbfgs,
    value_and_grad_from_state,
)
from funcgrad.optim.lookahead import LookaheadParams, LookaheadState, lookahead
from funcgrad.optim.monitoring import (
    MonitorState,
    SnapshotState,
    measure_with_ema,
    monitor,
    snapshot,
)
from funcgrad.optim.numerics import (
    safe_increment,
    safe_int32_increment,
    safe_norm,
    safe_root_mean_squares,
)
from funcgrad.optim.optimizers import (
    MaskOrFn,
    adabelief,
    adadelta,
    adafactor,
    adagrad,
    adam,
    adamax,
    adamaxw,
    adamw,
    adan,
    amsgrad,
    fromage,
    lamb,
    lars,
    lbfgs,
    lion,
    nadam,
    nadamw,
    noisy_sgd,
    novograd,
    optimistic_adam,
    optimistic_adam_v2,
    optimistic_gradient_descent,
    polyak_sgd,
    radam,
    rmsprop,
    rprop,
    sgd,
    sign_sgd,
    signum,
    sm3,
    yogi,
)
from funcgrad.optim.scaling import (
    AddNoiseState,
    EmaState,
    ScaleByAdanState,
    ScaleByDistanceOverGradientsState,
    ScaleByOptimisticGradientState,
    ScaleByRpropState,
    add_noise,
    ema,
    scale_by_adan,
    scale_by_distance_over_gradients,
    scale_by_optimistic_gradient,
    scale_by_polyak,
    scale_by_rprop,
    scale_by_sign,
)
from funcgrad.optim.schedules import (
    constant_schedule,
    cosine_decay_schedule,
    cosine_onecycle_schedule,
    exponential_decay,
    join_schedules,
    linear_onecycle_schedule,
    linear_schedule,
    piecewise_constant_schedule,
    piecewise_interpolate_schedule,
    polynomial_schedule,
    sgdr_schedule,
    warmup_constant_schedule,
    warmup_cosine_decay_schedule,
    warmup_exponential_decay_schedule,
)
from funcgrad.optim.state_utils import tree_map_params
from funcgrad.optim.transforms import (
    AddDecayedWeightsState,
    ClipByGlobalNormState,
    ClipState,
    ScalarOrSchedule,
    ScaleByAdaDeltaState,
    ScaleByAdamState,
    ScaleByAmsgradState,
    ScaleByBeliefState,
    ScaleByLionState,
    ScaleByNovogradState,
    ScaleByRmsState,
    ScaleByRmsWithCountState,
    ScaleByRssState,
    ScaleByRStdDevState,
    ScaleByRStdDevWithCountState,
    ScaleByScheduleState,
    ScaleByTrustRatioState,
    ScaleState,
    Schedule,
    TraceState,
    add_decayed_weights,
    clip,
    clip_by_global_norm,
    normalize_by_update_norm,
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
    InjectStatefulHyperparamsState,
    MaskedState,
    MultiSteps,
    MultiStepsState,
    MultiTransformState,
    PartitionState,
    ShouldSkipUpdateFunction,
    StatefulSchedule,
    WrappedSchedule,
    apply_if_finite,
    flatten,
    freeze,
    inject_hyperparams,
    inject_stateful_hyperparams,
    masked,
    multi_transform,
    partition,
    selective_transform,
    skip_large_updates,
    skip_not_finite,
)
from funcgrad.optim.zoom_linesearch import (
    ScaleByZoomLinesearchState,
    ZoomLinesearchInfo,
    scale_by_zoom_linesearch,
)

# isort: split
# Pytree arithmetic, under Optax's two spellings (tree_utils.tree_add, tree.add), the newer
# optimizers Optax keeps in contrib, and Optax's other submodules: projections onto
# constraint sets, evaluation in microbatches, curvature, perturbed smoothing, assignment.
from funcgrad.optim import (
    assignment,
    contrib,
    microbatching,
    perturbations,
    projections,
    second_order,
    tree,
    tree_utils,
)
from funcgrad.optim.linear_algebra import (
    MultiNormalDiagFromLogScale,
    matrix_inverse_pth_root,
    multi_normal,
    nnls,
    power_iteration,
)
from funcgrad.optim.microbatching import microbatch

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

# Optax's top level names the moment helpers without the tree_ prefix too.
bias_correction = tree_utils.tree_bias_correction
update_moment = tree_utils.tree_update_moment
update_infinity_moment = tree_utils.tree_update_infinity_moment
update_moment_per_elem_norm = tree_utils.tree_update_moment_per_elem_norm
