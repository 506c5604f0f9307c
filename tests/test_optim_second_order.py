"""funcgrad.optim.second_order against the explicit Hessian of a small loss, built column by
column from central differences of its hand-written gradient (float64)."""

from __future__ import annotations

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.optim import second_order

rng = np.random.default_rng(0)
inputs, targets = rng.standard_normal((5, 3)), rng.standard_normal(5)
params = {"b": np.array(0.2), "w": rng.standard_normal(3)}  # raveled as [b, w0, w1, w2]


def loss(p, x, y):
    return fnp.sum((fnp.tanh(x @ p["w"]) + p["b"] - y) ** 2)


def gradient_by_hand(flat):
    b, w = flat[0], flat[1:]
    hidden = np.tanh(inputs @ w)
    residual = hidden + b - targets
    return np.concatenate([[2 * residual.sum()], inputs.T @ (2 * residual * (1 - hidden**2))])


def hessian_by_differences(flat, step=1e-5):
    columns = []
    for i in range(flat.size):
        e = np.zeros_like(flat)
        e[i] = step
        columns.append((gradient_by_hand(flat + e) - gradient_by_hand(flat - e)) / (2 * step))
    return np.stack(columns, axis=1)


FLAT = np.concatenate([[params["b"]], params["w"]])
HESSIAN = hessian_by_differences(FLAT)


def test_hvp_is_the_hessian_times_v():
    v = rng.standard_normal(4)
    product = second_order.hvp(loss, v, params, inputs, targets)
    got = np.concatenate([[product["b"]], product["w"]])
    np.testing.assert_allclose(got, HESSIAN @ v, rtol=1e-6, atol=1e-8)


def test_hessian_diag_eagerly_and_under_jit():
    wanted = np.diag(HESSIAN)
    np.testing.assert_allclose(
        second_order.hessian_diag(loss, params, inputs, targets), wanted, rtol=1e-6
    )
    jitted = fg.jit(second_order.hessian_diag, static_argnums=0)
    np.testing.assert_allclose(jitted(loss, params, inputs, targets), wanted, rtol=1e-6)


def test_fisher_diag_is_the_squared_gradient():
    got = second_order.fisher_diag(loss, params, inputs, targets)
    np.testing.assert_allclose(got, gradient_by_hand(FLAT) ** 2, rtol=1e-12)
