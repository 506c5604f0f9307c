"""Optimizers as chains of transformations, with Optax's names, signatures and defaults."""

from __future__ import annotations

from funcgrad.optim.base import GradientTransformation, chain, identity
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    add_decayed_weights,
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
    scale_by_stddev,
    scale_by_trust_ratio,
    scale_by_yogi,
    trace,
)
from funcgrad.optim.wrappers import masked


def sgd(
    learning_rate: ScalarOrSchedule, momentum: float | None = None, nesterov: bool = False
) -> GradientTransformation:
    return chain(
        trace(momentum, nesterov) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate),
    )


def adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> GradientTransformation:
    return chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate))


def adamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 1e-4,
    mask=None,
) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter), scaled by the learning rate."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def rmsprop(
    learning_rate: ScalarOrSchedule,
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    centered: bool = False,
    momentum: float | None = None,
    nesterov: bool = False,
) -> GradientTransformation:
    scaling = scale_by_stddev if centered else scale_by_rms
    return chain(
        scaling(decay, eps, initial_scale),
        scale_by_learning_rate(learning_rate),
        trace(momentum, nesterov) if momentum is not None else identity(),
    )


def adagrad(
    learning_rate: ScalarOrSchedule, initial_accumulator_value: float = 0.1, eps: float = 1e-7
) -> GradientTransformation:
    return chain(
        scale_by_rss(initial_accumulator_value, eps), scale_by_learning_rate(learning_rate)
    )


def lion(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.99,
    weight_decay: float = 1e-3,
    mask=None,
) -> GradientTransformation:
    return chain(
        scale_by_lion(b1, b2),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def adamax(
    learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
) -> GradientTransformation:
    """Adam under the infinity norm: the denominator is a decaying maximum of |g|."""
    return chain(scale_by_adamax(b1, b2, eps), scale_by_learning_rate(learning_rate))


def amsgrad(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> GradientTransformation:
    """Adam whose denominator is the running maximum of the second moment."""
    return chain(scale_by_amsgrad(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate))


def nadam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> GradientTransformation:
    """Adam with Nesterov's look-ahead in the first moment (Dozat)."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, nesterov=True), scale_by_learning_rate(learning_rate)
    )


def nadamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 1e-4,
    mask=None,
) -> GradientTransformation:
    """NAdam with decoupled weight decay."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, nesterov=True),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def radam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    threshold: float = 5.0,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    """Adam rectified while the adaptive rate's variance is intractable (Liu et al.)."""
    return chain(
        scale_by_radam(b1, b2, eps, eps_root, threshold, nesterov=nesterov),
        scale_by_learning_rate(learning_rate),
    )


def yogi(
    learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-3
) -> GradientTransformation:
    """Adam with an additive second-moment update (Zaheer et al.); eps defaults to 1e-3."""
    return chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))


def adadelta(
    learning_rate: ScalarOrSchedule,
    rho: float = 0.9,
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    weight_decay_mask=None,
) -> GradientTransformation:
    """The weight decay is added to the gradient before Adadelta's rescaling."""
    return chain(
        add_decayed_weights(weight_decay, weight_decay_mask),
        scale_by_adadelta(rho, eps),
        scale_by_learning_rate(learning_rate),
    )


def lamb(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    mask=None,
) -> GradientTransformation:
    """AdamW's direction rescaled per leaf by the trust ratio |params| / |direction|."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root),
        add_decayed_weights(weight_decay, mask),
        scale_by_trust_ratio(),
        scale_by_learning_rate(learning_rate),
    )


def lars(
    learning_rate: ScalarOrSchedule,
    weight_decay: float = 0.0,
    weight_decay_mask=True,
    trust_coefficient: float = 0.001,
    eps: float = 0.0,
    trust_ratio_mask=True,
    momentum: float = 0.9,
    nesterov: bool = False,
) -> GradientTransformation:
    """SGD with momentum on the trust-ratio-scaled, weight-decayed gradient (You et al.);
    the momentum is taken after the learning rate, as in Optax."""
    return chain(
        add_decayed_weights(weight_decay, weight_decay_mask),
        masked(
            scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps), trust_ratio_mask
        ),
        scale_by_learning_rate(learning_rate),
        trace(momentum, nesterov),
    )


def novograd(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.25,
    eps: float = 1e-6,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
) -> GradientTransformation:
    """Adam-like with one second moment per leaf, its squared norm (Ginsburg et al.)."""
    return chain(
        scale_by_novograd(b1, b2, eps, eps_root, weight_decay),
        scale_by_learning_rate(learning_rate),
    )


def adabelief(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-16,
    eps_root: float = 1e-16,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    """Adam whose second moment is that of g - mu, the belief in the gradient."""
    return chain(
        scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov),
        scale_by_learning_rate(learning_rate),
    )
