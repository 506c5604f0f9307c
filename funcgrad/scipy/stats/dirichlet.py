"""The Dirichlet distribution over the simplex, as scipy.stats.dirichlet.

`alpha` holds the K concentrations; `x` has the components on its first axis (further axes
are a batch), K of them, or K - 1 with the last taken as 1 minus their sum. logpdf is -inf
off the simplex: where a component is not positive or the components sum to 1 only within
1e-6.
"""

from __future__ import annotations

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.scipy.special import gammaln, xlogy

_SIMPLEX_TOLERANCE = 1e-6


def logpdf(x: ArrayLike, alpha: ArrayLike) -> Array:
    x, alpha = promote_dtypes_inexact(x, alpha)
    if alpha.ndim != 1:
        raise ValueError(
            f"dirichlet.logpdf: alpha must be one-dimensional, got shape {alpha.shape}"
        )
    (size,) = alpha.shape
    if x.ndim == 0 or x.shape[0] not in (size, size - 1):
        raise ValueError(
            f"dirichlet.logpdf: x must have {size} or {size - 1} entries on its first axis "
            f"for alpha of shape {alpha.shape}, got shape {x.shape}"
        )
    if x.shape[0] == size - 1:
        x = fnp.concatenate([x, 1 - fnp.sum(x, axis=0, keepdims=True)], axis=0)
    alpha = alpha.reshape((size,) + (1,) * (x.ndim - 1))
    on_simplex = fnp.all(x > 0, axis=0) & (fnp.abs(fnp.sum(x, axis=0) - 1) < _SIMPLEX_TOLERANCE)
    # Off the simplex x is replaced by its centre, so that the discarded branch passes no nan
    # to derivatives.
    x = fnp.where(on_simplex, x, 1 / size)
    # (in float64: the lgamma terms cancel, which float32 lost: 10.0 for 15.56 at alpha =
    # (1e6, 2e6, 3e6))
    dtype, x, alpha = x.dtype, x.astype(np.float64), alpha.astype(np.float64)
    log_normalizer = fnp.sum(gammaln(alpha)) - gammaln(fnp.sum(alpha))
    value = (fnp.sum(xlogy(alpha - 1, x), axis=0) - log_normalizer).astype(dtype)
    return fnp.where(on_simplex, value, -fnp.inf)


def pdf(x: ArrayLike, alpha: ArrayLike) -> Array:
    return fnp.exp(logpdf(x, alpha))
