"""Optimizers as chains of transformations, with Optax's names, signatures and defaults."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import funcgrad.numpy as fnp
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    chain,
    identity,
)
from funcgrad.optim.constraints import clip_by_block_rms, scale_by_param_block_rms
from funcgrad.optim.factorized import scale_by_factored_rms, scale_by_sm3
from funcgrad.optim.lbfgs import scale_by_lbfgs
from funcgrad.optim.scaling import (
    add_noise,
    ema,
    scale_by_adan,
    scale_by_optimistic_gradient,
    scale_by_polyak,
    scale_by_rprop,
    scale_by_sign,
)
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    add_decayed_weights,
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
    scale_by_stddev,
    scale_by_trust_ratio,
    scale_by_yogi,
    trace,
)
from funcgrad.optim.wrappers import masked
from funcgrad.optim.zoom_linesearch import scale_by_zoom_linesearch

# The `mask` of the optimizers with weight decay: a tree of bools like the parameters (or a
# prefix of it), a function of the parameters returning one, or None for every leaf.
MaskOrFn = Any | Callable[[Any], Any] | None


def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: float | None = None,
    nesterov: bool = False,
    accumulator_dtype=None,
) -> GradientTransformation:
    return chain(
        trace(momentum, nesterov, accumulator_dtype) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate),
    )


def adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    """Adam (Kingma & Ba); `nesterov` makes it NAdam, `mu_dtype` stores the first moment in
    that dtype."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
        scale_by_learning_rate(learning_rate),
    )


def adamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    weight_decay: float = 1e-4,
    mask=None,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter), scaled by the learning rate."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def rmsprop(
    learning_rate: ScalarOrSchedule,
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    centered: bool = False,
    momentum: float | None = None,
    nesterov: bool = False,
    bias_correction: bool = False,
) -> GradientTransformation:
    scaling = scale_by_stddev if centered else scale_by_rms
    return chain(
        scaling(decay, eps, initial_scale, eps_in_sqrt, bias_correction),
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
    mu_dtype=None,
    weight_decay: float = 1e-3,
    mask=None,
) -> GradientTransformation:
    return chain(
        scale_by_lion(b1, b2, mu_dtype),
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
    mu_dtype=None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> GradientTransformation:
    """Adam whose denominator is the running maximum of the second moment."""
    return chain(
        scale_by_amsgrad(b1, b2, eps, eps_root, mu_dtype, bias_correction_mu, bias_correction_nu),
        scale_by_learning_rate(learning_rate),
    )


def nadam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    *,
    nesterov: bool = True,
) -> GradientTransformation:
    """Adam with Nesterov's look-ahead in the first moment (Dozat); plain Adam with
    nesterov=False."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
        scale_by_learning_rate(learning_rate),
    )


def nadamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    weight_decay: float = 1e-4,
    mask=None,
    *,
    nesterov: bool = True,
) -> GradientTransformation:
    """NAdam with decoupled weight decay."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
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
    learning_rate: ScalarOrSchedule | None = None,
    rho: float = 0.9,
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    weight_decay_mask=None,
) -> GradientTransformation:
    """The weight decay is added to the gradient before Adadelta's rescaling. Without a
    learning rate the rescaled gradient is the update as it is (not negated), as Optax's."""
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


def adamaxw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask=None,
) -> GradientTransformation:
    """AdaMax with decoupled weight decay."""
    return chain(
        scale_by_adamax(b1, b2, eps),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def adan(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.98,
    b2: float = 0.92,
    b3: float = 0.99,
    eps: float = 1e-8,
    eps_root: float = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask=None,
) -> GradientTransformation:
    """Adan (Xie et al.) with decoupled weight decay."""
    return chain(
        scale_by_adan(b1, b2, b3, eps, eps_root),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


def adafactor(
    learning_rate: ScalarOrSchedule | None = None,
    min_dim_size_to_factor: int = 128,
    decay_rate: float = 0.8,
    decay_offset: int = 0,
    multiply_by_parameter_scale: bool = True,
    clipping_threshold: float | None = 1.0,
    momentum: float | None = None,
    dtype_momentum=fnp.float32,
    weight_decay_rate: ScalarOrSchedule | None = None,
    eps: float = 1e-30,
    factored: bool = True,
    weight_decay_mask=None,
) -> GradientTransformation:
    """Adafactor (Shazeer & Stern): factored second moments, each leaf's step clipped to a
    root mean square of clipping_threshold, then times the learning rate and (with
    multiply_by_parameter_scale) the parameter's own root mean square, so the step is
    relative to the parameter's size; optional momentum and weight decay, each skipped
    when None."""
    steps = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
    if clipping_threshold is not None:
        steps.append(clip_by_block_rms(clipping_threshold))
    if learning_rate is not None:
        steps.append(scale_by_learning_rate(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        steps.append(scale_by_param_block_rms())
    if momentum is not None:
        steps.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        steps.append(add_decayed_weights(weight_decay_rate, weight_decay_mask))
    steps.append(scale(-1.0))
    return chain(*steps)


def sm3(learning_rate: float, momentum: float = 0.9) -> GradientTransformation:
    """SM3 (Anil et al.): Adagrad-like steps from per-axis second-moment covers."""
    return chain(scale_by_sm3(momentum), scale(-learning_rate))


def fromage(learning_rate: ScalarOrSchedule, min_norm: float = 1e-6) -> GradientTransformation:
    """Fromage (Bernstein et al.): x <- (x - lr * g * |x| / |g|) / sqrt(1 + lr**2), per leaf,
    so the step is relative to each leaf's norm and the norm does not drift up."""
    if callable(learning_rate):

        def shrink(count):
            return 1 / (1 + learning_rate(count) ** 2) ** 0.5

        return chain(
            scale_by_trust_ratio(min_norm),
            scale_by_learning_rate(lambda count: shrink(count) * learning_rate(count)),
            add_decayed_weights(lambda count: shrink(count) - 1),
        )
    shrink = 1 / (1 + learning_rate**2) ** 0.5
    return chain(
        scale_by_trust_ratio(min_norm),
        scale_by_learning_rate(learning_rate * shrink),
        add_decayed_weights(shrink - 1),
    )


def noisy_sgd(
    learning_rate: ScalarOrSchedule,
    eta: float = 0.01,
    gamma: float = 0.55,
    key=None,
    *,
    seed: int | None = None,
) -> GradientTransformation:
    """SGD on gradients plus Gaussian noise of variance eta / t**gamma at step t; `seed` is
    the older name of an integer `key`."""
    return chain(add_noise(eta, gamma, key, seed=seed), scale_by_learning_rate(learning_rate))


def sign_sgd(learning_rate: ScalarOrSchedule) -> GradientTransformation:
    """SGD on the gradients' signs (Bernstein et al.)."""
    return chain(scale_by_sign(), scale_by_learning_rate(learning_rate))


def signum(
    learning_rate: ScalarOrSchedule, beta: float = 0.9, accumulator_dtype=None
) -> GradientTransformation:
    """signSGD with momentum: the sign of the (not debiased) moving average of the gradients."""
    return chain(
        ema(beta, debias=False, accumulator_dtype=accumulator_dtype),
        scale_by_sign(),
        scale_by_learning_rate(learning_rate),
    )


def rprop(
    learning_rate: float,
    eta_minus: float = 0.5,
    eta_plus: float = 1.2,
    min_step_size: float = 1e-6,
    max_step_size: float = 50.0,
) -> GradientTransformation:
    """Rprop: learning_rate is each element's initial step size."""
    return chain(
        scale_by_rprop(learning_rate, eta_minus, eta_plus, min_step_size, max_step_size),
        scale(-1.0),
    )


def optimistic_gradient_descent(
    learning_rate: ScalarOrSchedule, alpha: float = 1.0, beta: float = 1.0
) -> GradientTransformation:
    """Descent along (alpha + beta) * g - beta * g_prev, for min-max games."""
    return chain(scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(learning_rate))


def optimistic_adam(
    learning_rate: float,
    optimism: float | None = None,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    *,
    nesterov: bool = True,
) -> GradientTransformation:
    """Optimistic Adam (Daskalakis et al.): the optimistic step on NAdam's direction, with
    alpha = learning_rate and beta = optimism (learning_rate when None). A number only;
    optimistic_adam_v2 takes a schedule."""
    if callable(learning_rate):
        raise ValueError(
            "optimistic_adam takes a number as learning_rate; use optimistic_adam_v2 for a schedule"
        )
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
        scale_by_optimistic_gradient(
            learning_rate, learning_rate if optimism is None else optimism
        ),
        scale_by_learning_rate(1.0),
    )


def optimistic_adam_v2(
    learning_rate: ScalarOrSchedule,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype=None,
    nesterov: bool = True,
) -> GradientTransformation:
    """Optimistic Adam: (alpha + beta) * d - beta * d_prev on NAdam's direction d, times
    the learning rate."""
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
        scale_by_optimistic_gradient(alpha, beta),
        scale_by_learning_rate(learning_rate),
    )


def polyak_sgd(
    max_learning_rate: float = 1.0,
    scaling: ScalarOrSchedule = 1.0,
    f_min: float = 0.0,
    eps: float = 0.0,
    variant: str = "sps",
) -> GradientTransformation:
    """SGD with Polyak's step size (Loizou et al.) on the gradient times `scaling`; pass the
    loss as update(grads, state, params, value=loss)."""
    return chain(
        sgd(learning_rate=scaling),
        scale_by_polyak(f_min, max_learning_rate, eps, variant),
    )


# A transformation holds no state of its own, so one default serves every lbfgs.
_LBFGS_LINESEARCH = scale_by_zoom_linesearch(max_linesearch_steps=20, initial_guess_strategy="one")


def lbfgs(
    learning_rate: ScalarOrSchedule | None = None,
    memory_size: int = 10,
    scale_init_precond: bool = True,
    linesearch: GradientTransformation | None = _LBFGS_LINESEARCH,
) -> GradientTransformationExtraArgs:
    """L-BFGS: the descent direction -H g of `scale_by_lbfgs`, times the learning rate, with
    its step size from `linesearch` (None: the learning rate alone). A line search evaluates
    f, so pass update(grads, state, params, value=f(params), grad=grads, value_fn=f); with
    the default one, `value_and_grad_from_state(f)` reuses what it computed at the accepted
    point."""
    return chain(
        scale_by_lbfgs(memory_size, scale_init_precond),
        scale(-1.0) if learning_rate is None else scale_by_learning_rate(learning_rate),
        identity() if linesearch is None else linesearch,
    )
