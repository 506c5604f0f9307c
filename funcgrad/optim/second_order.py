"""Curvature of a loss `loss(params, inputs, targets)` at the parameters, with Optax's
`second_order` names: Hessian-vector products by forward-over-reverse differentiation, the
Hessian's diagonal one product per parameter, and the diagonal of the observed Fisher
information (the squared gradient of a negative log-likelihood)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import funcgrad.numpy as fnp
from funcgrad.flatten_util import ravel_pytree
from funcgrad.transforms.autodiff import grad, jvp
from funcgrad.transforms.vmap import vmap

__all__ = ["fisher_diag", "hessian_diag", "hvp"]

LossFn = Callable[[Any, Any, Any], Any]


def hvp(loss: LossFn, v: Any, params: Any, inputs: Any, targets: Any) -> Any:
    """H v for the Hessian H of loss in params; `v` is a flat vector of all the parameters'
    elements (in ravel_pytree's order), the product is a tree like params."""
    _, unravel = ravel_pytree(params)
    gradient = grad(lambda p: loss(p, inputs, targets))
    return jvp(gradient, (params,), (unravel(v),))[1]


def hessian_diag(loss: LossFn, params: Any, inputs: Any, targets: Any) -> Any:
    """The diagonal of the Hessian of loss in params, as one flat vector: e_i . H e_i for
    each basis vector e_i (one Hessian-vector product each)."""
    flat = ravel_pytree(params)[0]

    def along(basis_vector):
        product = hvp(loss, basis_vector, params, inputs, targets)
        return fnp.vdot(basis_vector, ravel_pytree(product)[0])

    return vmap(along)(fnp.eye(flat.size, dtype=flat.dtype))


def fisher_diag(negative_log_likelihood: LossFn, params: Any, inputs: Any, targets: Any) -> Any:
    """The diagonal of the observed Fisher information, the gradient of the negative
    log-likelihood squared elementwise, as one flat vector."""
    gradient = grad(negative_log_likelihood)(params, inputs, targets)
    return fnp.square(ravel_pytree(gradient)[0])
