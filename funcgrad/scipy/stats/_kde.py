"""Gaussian kernel density estimation, as jax.scipy.stats.gaussian_kde.

The estimate is a weighted mixture of normals centred on the data points, all with the data's
weighted covariance scaled by the squared bandwidth factor. Densities and integrals go through
the Cholesky factor L of that covariance: squared Mahalanobis distances are |L^-1 (x - y)|^2
between whitened points, and densities are summed in logs (logsumexp), so far points underflow
gracefully. The object is a pytree of arrays, so it passes through jit, vmap and grad.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from funcgrad import dtypes, lax, random
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike, logsumexp
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.scipy.special import ndtr
from funcgrad.tree_util import register_pytree_node_class

_FIELDS = ("neff", "dataset", "weights", "covariance", "inv_cov")


@register_pytree_node_class
class gaussian_kde:
    """A kernel density estimate of `dataset`, of shape (d, n): n points in d dimensions (a 1-d
    dataset is n points in one dimension). `weights` (n of them) default to equal ones.
    `bw_method` chooses the bandwidth factor: 'scott' (the default), 'silverman', a scalar, or
    a callable taking this object (its dataset, weights and neff are set) to a scalar.

    Attributes: dataset, weights (summing to 1), neff (the effective number of points),
    covariance (of the kernel) and inv_cov (its inverse); d and n.
    """

    __slots__ = _FIELDS

    def __init__(
        self,
        dataset: ArrayLike,
        bw_method: None | str | ArrayLike | Callable[[Any], Array] = None,
        weights: ArrayLike | None = None,
    ):
        dataset = fnp.atleast_2d(fnp.asarray(dataset))
        if dtypes.issubdtype(dataset.dtype, fnp.complexfloating):
            raise NotImplementedError("gaussian_kde: complex data is not supported")
        if dataset.size <= 1:
            raise ValueError("gaussian_kde: dataset must have more than one element")
        d, n = dataset.shape
        if weights is None:
            (dataset,) = promote_dtypes_inexact(dataset)
            weights = fnp.full(n, 1 / n, dataset.dtype)
        else:
            dataset, weights = promote_dtypes_inexact(dataset, fnp.atleast_1d(weights))
            if weights.shape != (n,):
                raise ValueError(
                    f"gaussian_kde: weights must have shape ({n},) for a dataset of shape "
                    f"{dataset.shape}, got {weights.shape}"
                )
            weights = weights / fnp.sum(weights)
        self._set("dataset", dataset)
        self._set("weights", weights)
        self._set("neff", 1 / fnp.sum(weights * weights))
        factor = self._bandwidth_factor("scott" if bw_method is None else bw_method)
        data_covariance = fnp.atleast_2d(fnp.cov(dataset, rowvar=True, aweights=weights))
        self._set("covariance", data_covariance * factor**2)
        self._set("inv_cov", fnp.linalg.inv(data_covariance) / factor**2)

    def _bandwidth_factor(self, bw_method):
        d = self.d
        if isinstance(bw_method, str):
            if bw_method == "scott":
                return self.neff ** (-1 / (d + 4))
            if bw_method == "silverman":
                return (self.neff * (d + 2) / 4) ** (-1 / (d + 4))
        elif callable(bw_method):
            return bw_method(self)
        elif fnp.ndim(bw_method) == 0:
            return bw_method
        raise ValueError(
            "gaussian_kde: bw_method must be 'scott', 'silverman', a scalar or a callable, got "
            f"{bw_method!r}"
        )

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"gaussian_kde is immutable; cannot set {name!r}")

    def tree_flatten(self):
        return tuple(getattr(self, name) for name in _FIELDS), None

    @classmethod
    def tree_unflatten(cls, aux_data, children) -> gaussian_kde:
        kde = object.__new__(cls)
        for name, value in zip(_FIELDS, children):
            kde._set(name, value)
        return kde

    @property
    def d(self) -> int:
        return self.dataset.shape[0]

    @property
    def n(self) -> int:
        return self.dataset.shape[1]

    def logpdf(self, x: ArrayLike) -> Array:
        """The log density at the points of `x`, shape (d, m) (or one point of d coordinates)."""
        points, dataset, weights, covariance = promote_dtypes_inexact(
            x, self.dataset, self.weights, self.covariance
        )
        points = self._points(points)
        factor = lax.cholesky(covariance)
        whitened_points = _solve_lower(factor, points)
        whitened_data = _solve_lower(factor, dataset)
        difference = whitened_points[:, :, None] - whitened_data[:, None, :]
        log_kernels = -0.5 * fnp.sum(difference * difference, axis=0) + fnp.log(weights)
        return logsumexp(log_kernels, axis=1) - _log_normalizer(factor)

    def evaluate(self, points: ArrayLike) -> Array:
        return fnp.exp(self.logpdf(points))

    __call__ = evaluate
    pdf = evaluate

    def integrate_gaussian(self, mean: ArrayLike, cov: ArrayLike) -> Array:
        """The integral of the estimate times the normal density N(mean, cov)."""
        mean, cov, dataset, covariance, weights = promote_dtypes_inexact(
            mean, cov, self.dataset, self.covariance, self.weights
        )
        mean, cov = fnp.atleast_1d(fnp.squeeze(mean)), fnp.atleast_2d(cov)
        if mean.shape != (self.d,):
            raise ValueError(
                f"integrate_gaussian: mean must have shape ({self.d},), got {mean.shape}"
            )
        if cov.shape != (self.d, self.d):
            raise ValueError(
                f"integrate_gaussian: cov must have shape ({self.d}, {self.d}), got {cov.shape}"
            )
        return _gaussian_overlap(covariance + cov, dataset, mean[:, None], weights)

    def integrate_box_1d(self, low: ArrayLike, high: ArrayLike) -> Array:
        """The mass of a one-dimensional estimate between the scalars low and high."""
        if self.d != 1:
            raise ValueError(
                f"integrate_box_1d: the estimate must be one-dimensional, not {self.d}"
            )
        if fnp.ndim(low) != 0 or fnp.ndim(high) != 0:
            raise ValueError("integrate_box_1d: low and high must be scalars")
        sigma = fnp.sqrt(self.covariance[0, 0])
        upper = ndtr((high - self.dataset[0]) / sigma)
        lower = ndtr((low - self.dataset[0]) / sigma)
        return fnp.sum(self.weights * (upper - lower))

    def integrate_kde(self, other: gaussian_kde) -> Array:
        """The integral of the product of this estimate and `other`."""
        if other.d != self.d:
            raise ValueError(f"integrate_kde: the estimates have {self.d} and {other.d} dimensions")
        d = self.d
        centres = self.dataset[:, :, None]
        others = other.dataset[:, None, :]
        pair_weights = self.weights[:, None] * other.weights[None, :]
        return _gaussian_overlap(
            self.covariance + other.covariance,
            (centres - others).reshape(d, -1),
            fnp.zeros((d, 1), self.dataset.dtype),
            pair_weights.reshape(-1),
        )

    def resample(self, key: Array, shape: tuple[int, ...] = ()) -> Array:
        """Draws from the estimate, of shape (d, *shape): data points chosen by weight, each
        moved by a draw from the kernel."""
        index_key, noise_key = random.split(key)
        index = random.choice(index_key, self.n, shape=shape, p=self.weights)
        mean = fnp.zeros(self.d, self.covariance.dtype)
        noise = random.multivariate_normal(noise_key, mean, self.covariance, shape=shape)
        return self.dataset[:, index] + fnp.moveaxis(noise, -1, 0).astype(self.dataset.dtype)

    def integrate_box(self, low_bounds, high_bounds, maxpts=None):
        raise NotImplementedError(
            "gaussian_kde.integrate_box: only one-dimensional boxes are supported; use "
            "integrate_box_1d"
        )

    def set_bandwidth(self, bw_method=None):
        raise NotImplementedError(
            "gaussian_kde.set_bandwidth: the estimate is immutable; make a new gaussian_kde "
            "with the bandwidth"
        )

    def _points(self, points: Array) -> Array:
        """`points` as shape (d, m); a flat vector of d coordinates is one point."""
        points = fnp.atleast_2d(points)
        if dtypes.issubdtype(points.dtype, fnp.complexfloating):
            raise NotImplementedError("gaussian_kde: complex points are not supported")
        if points.shape[0] != self.d:
            if points.shape == (1, self.d):
                return points.reshape(self.d, 1)
            raise ValueError(
                f"gaussian_kde: points must have {self.d} rows (one per dimension), got shape "
                f"{points.shape}"
            )
        return points


def _solve_lower(factor, b):
    return lax.triangular_solve(factor, b, left_side=True, lower=True)


def _log_normalizer(factor):
    """log of sqrt(det(2 pi L L^T)), the normalizer of a normal density with factor L."""
    d = factor.shape[-1]
    return fnp.sum(fnp.log(fnp.diagonal(factor))) + 0.5 * d * math.log(2 * math.pi)


def _gaussian_overlap(covariance, points, mean, weights):
    """sum_i weights_i N(points_i; mean, covariance), for points of shape (d, n)."""
    factor = lax.cholesky(covariance)
    whitened = _solve_lower(factor, points - mean)
    log_kernels = -0.5 * fnp.sum(whitened * whitened, axis=0) - _log_normalizer(factor)
    return fnp.sum(weights * fnp.exp(log_kernels))
