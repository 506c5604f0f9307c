"""Matrix routines optimizers build on, with Optax's names: the dominant eigenpair by power
iteration (of a matrix or of any linear map on pytrees), the inverse p-th root of a
symmetric positive definite matrix by a coupled Newton iteration (Shampoo's
preconditioner), non-negative least squares by accelerated projected gradient, and the
diagonal normal distribution evolution strategies sample from (`multi_normal`)."""

from __future__ import annotations

import math
from typing import Any

import funcgrad.numpy as fnp
from funcgrad import lax, random
from funcgrad.optim.tree_utils import tree_norm, tree_scale, tree_sub, tree_vdot

__all__ = [
    "MultiNormalDiagFromLogScale",
    "matrix_inverse_pth_root",
    "multi_normal",
    "nnls",
    "power_iteration",
]


def _unit(tree):
    return tree_scale(1.0 / tree_norm(tree), tree)


def power_iteration(
    matrix: Any,
    *,
    v0: Any = None,
    num_iters: int = 100,
    error_tolerance: float = 1e-6,
    precision: Any = lax.Precision.HIGHEST,
    key: Any = None,
) -> tuple[Any, Any]:
    """(eigenvalue, unit eigenvector) of the eigenvalue of largest magnitude, iterating
    v <- A v / |A v| until |A v - lambda v| / |lambda| < error_tolerance or num_iters
    steps. `matrix` is a square array (v0 then defaults to a uniform draw in [-1, 1] from
    `key`, or key 0) or a function applying the map to a pytree (v0 required)."""
    if callable(matrix):
        if v0 is None:
            raise ValueError("power_iteration: pass v0 when the matrix is given as a function")
        apply = matrix
    else:
        matrix = fnp.asarray(matrix)

        def apply(v):
            return fnp.matmul(matrix, v, precision=precision)

        if v0 is None:
            key = random.PRNGKey(0) if key is None else key
            v0 = random.uniform(key, matrix.shape[-1:], matrix.dtype, -1.0, 1.0)
    v0 = _unit(v0)

    def unconverged(loop):
        vector, image, value, step = loop
        residual = tree_norm(tree_sub(image, tree_scale(value, vector)))
        return ~(fnp.abs(residual / value) < error_tolerance) & (step < num_iters)

    def step(loop):
        _, image, _, count = loop
        vector = _unit(image)
        image = apply(vector)
        return vector, image, tree_vdot(vector, image), count + 1

    start = (v0, apply(v0), fnp.asarray(0.0), fnp.asarray(0))
    _, image, value, _ = lax.while_loop(unconverged, step, start)
    return value, _unit(image)


def matrix_inverse_pth_root(
    matrix: Any,
    p: int,
    num_iters: int = 100,
    ridge_epsilon: float = 1e-6,
    error_tolerance: float = 1e-6,
    precision: Any = lax.Precision.HIGHEST,
) -> tuple[Any, Any]:
    """((A + eps I)^(-1/p), error) for a symmetric positive semi-definite A and p in
    1, 2, 4, 8, with eps = ridge_epsilon * the largest eigenvalue. The coupled Newton
    iteration keeps M = H^p A, which tends to I as H tends to the root; the error is
    max |M - I|, and the iteration stops early once it no longer shrinks (keeping the
    previous H)."""
    matrix = fnp.asarray(matrix)
    size = matrix.shape[0]
    alpha = fnp.asarray(-1.0 / p, fnp.float32)
    identity = fnp.eye(size, dtype=fnp.float32)
    largest, _ = power_iteration(matrix, num_iters=100, error_tolerance=1e-6, precision=precision)
    ridge = ridge_epsilon * fnp.maximum(largest, 1e-16)
    if size == 1:
        return (matrix + ridge) ** alpha, 0

    def matmul(a, b):
        return fnp.matmul(a, b, precision=precision)

    def power(m):
        """m ** p by repeated squaring, p a power of two up to 8 (a traced choice)."""
        squarings = [lambda x: x]
        for _ in range(3):
            squarings.append(lambda x, previous=squarings[-1]: matmul(previous(x), previous(x)))
        exponent = fnp.round(fnp.log2(fnp.asarray(p, fnp.float32))).astype(fnp.int32)
        return lax.switch(exponent, squarings, m)

    def unconverged(loop):
        step, _, _, _, error, improving = loop
        return (step < num_iters) & (error > error_tolerance) & improving

    def newton_step(loop):
        step, m, h, _, error, _ = loop
        factor = (1 - alpha) * identity + alpha * m
        new_m = matmul(power(factor), m)
        new_error = fnp.max(fnp.abs(new_m - identity))
        return step + 1, new_m, matmul(h, factor), h, new_error, new_error < error * 1.2

    damped = matrix + ridge * identity
    z = (1 + p) / (2 * fnp.linalg.norm(damped))
    m0 = damped * z
    h0 = identity * fnp.power(z, 1.0 / p)
    start = (0, m0, h0, h0, fnp.max(fnp.abs(m0 - identity)), True)
    _, m, h, previous_h, _, improving = lax.while_loop(unconverged, newton_step, start)
    error = fnp.max(fnp.abs(m - identity))
    improving = fnp.asarray(improving, previous_h.dtype)
    root = improving * h + (1 - improving) * previous_h
    return fnp.asarray(root, matrix.dtype), error


def _spectral_radius_bound(matrix):
    """min(Frobenius norm, max column sum): both bound the largest eigenvalue's size."""
    if matrix.size == 0:
        return fnp.asarray(0.0, matrix.dtype)
    return fnp.minimum(fnp.linalg.norm(matrix, "fro"), fnp.linalg.norm(matrix, 1))


def nnls(A: Any, b: Any, iters: int, unroll: int | bool = 1, L: Any = None) -> Any:  # noqa: N803
    """argmin_{x >= 0} ||A x - b||^2 (b a vector, or a matrix of right-hand sides) after
    `iters` steps of Nesterov-accelerated projected gradient on the normal equations, the
    step 1 / L with L a bound on the largest eigenvalue of A^T A (computed when None)."""
    A, b = fnp.asarray(A), fnp.asarray(b)  # noqa: N806
    if A.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ValueError(
            f"nnls: A must be 2-D and b 1-D or 2-D with as many rows, got A of shape "
            f"{A.shape} and b of shape {b.shape}"
        )
    gram, projected = A.T @ A, A.T @ b
    L = _spectral_radius_bound(gram) if L is None else fnp.asarray(L)  # noqa: N806
    L = fnp.where(L == 0, 1, L)  # noqa: N806

    def step(loop, _):
        x, lookahead, momentum = loop
        next_momentum = (1 + fnp.sqrt(1 + 4 * momentum**2)) / 2
        weight = (momentum - 1) / next_momentum
        next_x = fnp.clip(lookahead - (gram @ lookahead - projected) / L, 0)
        return (next_x, next_x + weight * (next_x - x), next_momentum), None

    x = fnp.zeros((A.shape[1], *b.shape[1:]), b.dtype)
    (x, _, _), _ = lax.scan(step, (x, x, fnp.asarray(0.0)), length=iters, unroll=unroll)
    return x


class MultiNormalDiagFromLogScale:
    """A normal distribution with independent coordinates, parameterized by its mean and
    the log of its scales (so a gradient step on them keeps the scales positive); evolution
    strategies sample from it and differentiate its log-density."""

    def __init__(self, loc: Any, log_scale: Any):
        self._mean = fnp.asarray(loc)
        self._log_scale = fnp.asarray(log_scale)
        self._scale = fnp.exp(self._log_scale)
        self._param_shape = fnp.broadcast_shapes(self._mean.shape, self._scale.shape)

    def sample(self, shape: tuple[int, ...], key: Any) -> Any:
        """Draws of shape (*shape, *param_shape)."""
        noise = random.normal(key, (*tuple(shape), *self._param_shape))
        return noise * self._scale + self._mean

    def log_prob(self, x: Any) -> Any:
        """The log-density of x, summed over the parameter axes."""
        standardized = (fnp.asarray(x) - self._mean) / self._scale
        per_coordinate = -0.5 * standardized**2 - self._log_scale - 0.5 * math.log(2 * math.pi)
        return fnp.sum(per_coordinate, axis=tuple(range(-len(self._param_shape), 0)))

    @property
    def log_scale(self) -> Any:
        return self._log_scale

    @property
    def params(self) -> list[Any]:
        return [self._mean, self._log_scale]


def multi_normal(loc: Any, log_scale: Any) -> MultiNormalDiagFromLogScale:
    return MultiNormalDiagFromLogScale(loc=loc, log_scale=log_scale)
