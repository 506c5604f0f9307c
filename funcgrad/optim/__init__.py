"""funcgrad.optim: optimizers as composable gradient transformations, with Optax's names,
signatures and update equations.

    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(1e-3))
    state = opt.init(params)
    updates, state = opt.update(grads, state, params)
    params = optim.apply_updates(params, updates)
"""

from funcgrad.optim.base import (
    EmptyState,
    GradientTransformation,
    apply_updates,
    chain,
    global_norm,
    identity,
)
from funcgrad.optim.optimizers import adagrad, adam, adamw, lion, rmsprop, sgd
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
    ScaleByAdamState,
    ScaleByLionState,
    ScaleByRmsState,
    ScaleByRssState,
    ScaleByRStdDevState,
    ScaleByScheduleState,
    TraceState,
    add_decayed_weights,
    clip,
    clip_by_global_norm,
    scale,
    scale_by_adam,
    scale_by_learning_rate,
    scale_by_lion,
    scale_by_rms,
    scale_by_rss,
    scale_by_schedule,
    scale_by_stddev,
    trace,
)
