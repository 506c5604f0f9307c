"""funcgrad.optim.microbatching against the same computation on the whole batch in NumPy:
sums, means and concatenations of per-row results, the running mean of the microbatches
run, and per-example gradients of a least-squares loss (written out by hand) clipped before
they are averaged, eagerly and under jit."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import optim
from funcgrad.optim import microbatching as mb

rng = np.random.default_rng(0)
Kind = mb.AccumulationType


def test_microbatch_combines_each_result_as_told():
    rows = rng.standard_normal((12, 3))
    weights = rng.standard_normal(12)

    def fun(x, w):
        return {"sum": fnp.sum(x, 0), "rows": x * 2, "weighted": [fnp.sum(w)]}

    spec = {"sum": Kind.SUM, "rows": Kind.CONCAT, "weighted": Kind.MEAN}
    for run in (lambda f: f, fg.jit):
        got = run(mb.microbatch(fun, (0, 1), 4, spec))(rows, weights)
        np.testing.assert_allclose(got["sum"], rows.sum(0), rtol=1e-12)
        np.testing.assert_array_equal(got["rows"], rows * 2)
        # Microbatch i holds the rows i, i + 3, i + 6, i + 9.
        np.testing.assert_allclose(got["weighted"][0], weights.sum() / 3, rtol=1e-12)


def test_keyword_batches_other_axes_and_running_mean():
    x = rng.standard_normal((2, 8))

    def fun(scale, *, batch):
        return scale * fnp.sum(batch, axis=1)

    got = mb.microbatch(
        fun, (), 2, Kind.RUNNING_MEAN, argnames="batch", in_axes=1, num_real_microbatches=3
    )(2.0, batch=x)
    pieces = x.reshape(2, 2, 4).transpose(0, 2, 1)  # (row, microbatch, member)
    wanted = np.mean([2 * pieces[:, i].sum(1) for i in range(3)], axis=0)
    np.testing.assert_allclose(got, wanted, rtol=1e-12)


def test_reshape_batch_axis_is_column_major():
    x = np.arange(24).reshape(2, 12)
    got = np.asarray(mb.reshape_batch_axis(x, 3, axis=1))
    assert got.shape == (2, 4, 3)
    for i in range(4):
        np.testing.assert_array_equal(got[:, i], x[:, i::4])


def test_micro_vmap_is_vmap_in_pieces():
    x, y = rng.standard_normal((8, 3)), rng.standard_normal(3)

    def f(a, b):
        return fnp.tanh(a) @ b

    wanted = np.tanh(x) @ y
    np.testing.assert_allclose(mb.micro_vmap(f, (0, None), microbatch_size=2)(x, y), wanted)
    total = mb.micro_vmap(f, (0, None), microbatch_size=4, accumulator=Kind.SUM)(x, y)
    np.testing.assert_allclose(total, wanted.sum(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="out_axes"):
        mb.micro_vmap(f, out_axes=1)


def test_micro_grad_clips_each_example_before_averaging():
    features, targets = rng.standard_normal((6, 3)), rng.standard_normal(6)
    params = {"w": rng.standard_normal(3), "b": np.array(0.3)}

    def loss(p, x, y):
        return 0.5 * fnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    def clip(grads):
        norm = optim.tree_utils.tree_norm(grads)
        return optim.tree_utils.tree_scale(fnp.minimum(1.0, 0.5 / norm), grads)

    grad_fn = mb.micro_grad(
        loss,
        batch_argnums=(1, 2),
        microbatch_size=2,
        accumulator=Kind.MEAN,
        transform_fn=clip,
        metrics_fn=optim.tree_utils.tree_norm,
    )
    (mean_grads, aux) = fg.jit(grad_fn)(params, features, targets)
    residuals = features @ params["w"] + params["b"] - targets
    per_example_w, per_example_b = residuals[:, None] * features, residuals
    norms = np.sqrt((per_example_w**2).sum(1) + per_example_b**2)
    factor = np.minimum(1.0, 0.5 / norms)
    np.testing.assert_allclose(mean_grads["w"], (factor[:, None] * per_example_w).mean(0))
    np.testing.assert_allclose(mean_grads["b"], (factor * per_example_b).mean())
    np.testing.assert_allclose(aux.values, 0.5 * residuals**2, rtol=1e-12)
    np.testing.assert_allclose(aux.metrics, norms, rtol=1e-12)


def test_errors_name_the_cause():
    with pytest.raises(ValueError, match="batch axes of sizes"):
        mb.microbatch(lambda a, b: a, (0, 1), 2)(np.ones(4), np.ones(6))
    with pytest.raises(ValueError, match="not a multiple of microbatch_size=4"):
        mb.microbatch(lambda a: a, 0, 4)(np.ones(6))
    with pytest.raises(ValueError, match="floating-point"):
        mb.microbatch(lambda a: a, 0, 2, Kind.MEAN)(np.arange(4))
    assert mb.microbatch(fnp.sin, 0, None) is fnp.sin
