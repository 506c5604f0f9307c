"""The multivariate normal distribution, as scipy.stats.multivariate_normal.

`mean` has the event size as its last axis and `cov` is a matrix over it (or a scalar: an
isotropic covariance; with a scalar `mean`, the univariate variance). Leading axes broadcast.
The density goes through the Cholesky factor L of cov: the Mahalanobis term is |L^-1 (x - mean)|^2
and log det cov is twice the sum of log diag L, so no inverse or determinant is formed.
"""

from __future__ import annotations

import math

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_dtypes_inexact

_LOG_2PI = math.log(2 * math.pi)


def logpdf(x: ArrayLike, mean: ArrayLike, cov: ArrayLike, allow_singular: None = None) -> Array:
    if allow_singular is not None:
        raise NotImplementedError(
            "multivariate_normal.logpdf: allow_singular is not supported; the covariance must "
            "be positive definite"
        )
    x, mean, cov = promote_dtypes_inexact(x, mean, cov)
    if mean.ndim == 0:
        return -0.5 * fnp.square(x - mean) / cov - 0.5 * (_LOG_2PI + fnp.log(cov))
    n = mean.shape[-1]
    y = x - mean
    if cov.ndim == 0:
        return -0.5 * fnp.sum(y * y, axis=-1) / cov - 0.5 * n * (_LOG_2PI + fnp.log(cov))
    if cov.ndim < 2 or cov.shape[-2:] != (n, n):
        raise ValueError(
            f"multivariate_normal.logpdf: cov must have shape (..., {n}, {n}) for a mean of "
            f"shape {mean.shape}, got {cov.shape}"
        )
    factor = lax.cholesky(cov)
    batch = fnp.broadcast_shapes(factor.shape[:-2], y.shape[:-1])
    factor = fnp.broadcast_to(factor, (*batch, n, n))
    y = fnp.broadcast_to(y, (*batch, n))
    whitened = lax.triangular_solve(factor, y[..., None], left_side=True, lower=True)[..., 0]
    half_log_det = fnp.sum(fnp.log(fnp.diagonal(factor, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * fnp.sum(whitened * whitened, axis=-1) - 0.5 * n * _LOG_2PI - half_log_det


def pdf(x: ArrayLike, mean: ArrayLike, cov: ArrayLike) -> Array:
    return fnp.exp(logpdf(x, mean, cov))
