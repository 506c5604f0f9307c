"""optim.contrib.galore against a NumPy float64 loop of its definition: each matrix
gradient projected on its top singular vectors on the longer side, Adam on the projection,
the update projected back; leaves without dimension numbers get plain Adam. Singular
vectors are defined up to sign, so trajectories are compared within one projection period
and the refreshed projector by the subspace it spans (P P^T)."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
from funcgrad import optim
from funcgrad.optim.contrib import GaLoreDimensionNumbers, galore

rng = np.random.default_rng(0)
SHAPES = {"b": (4,), "k": (2, 3, 4), "v": (3, 7), "w": (6, 4)}
DIMS = {
    "b": None,
    "k": GaLoreDimensionNumbers(reduction_axis=(0, 1), output_axis=2),
    "v": GaLoreDimensionNumbers(),
    "w": GaLoreDimensionNumbers(),
}


def as_matrix(name, x):
    return x.reshape(6, 4) if name == "k" else x


def top_vectors(matrix, rank):
    u, _, vh = np.linalg.svd(matrix, full_matrices=False)
    rows, cols = matrix.shape
    return u[:, :rank] if rows >= cols else vh[:rank].T


def galore_reference(grads, lr, rank, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, params=None):
    """The updates of each step, projectors fixed after the first step's SVD."""
    memory, out = {}, []
    for t, g in enumerate(grads, start=1):
        step = {}
        for name, grad in g.items():
            m = memory.setdefault(name, {})
            if DIMS[name] is None:
                low = grad
            else:
                matrix = as_matrix(name, grad)
                if t == 1:
                    m["P"] = top_vectors(matrix, rank)
                left = matrix.shape[0] >= matrix.shape[1]
                low = m["P"].T @ matrix if left else matrix @ m["P"]
            m["mu"] = b1 * m.get("mu", 0.0) + (1 - b1) * low
            m["nu"] = b2 * m.get("nu", 0.0) + (1 - b2) * low**2
            adam = (m["mu"] / (1 - b1**t)) / (np.sqrt(m["nu"] / (1 - b2**t)) + eps)
            if DIMS[name] is not None:
                adam = m["P"] @ adam if left else adam @ m["P"].T
                adam = adam.reshape(grad.shape)
            step[name] = -lr * (adam + wd * params[name])
        out.append(step)
    return out


def test_galore_follows_its_definition_within_a_projection_period():
    params = {k: rng.standard_normal(s) for k, s in SHAPES.items()}
    grads = [{k: rng.standard_normal(s) for k, s in SHAPES.items()} for _ in range(4)]
    opt = galore(0.1, rank=2, update_proj_gap=10, weight_decay=0.01, weight_dimension_numbers=DIMS)
    state = opt.init(params)
    wanted = galore_reference(grads, 0.1, 2, wd=0.01, params=params)
    for g, expected in zip(grads, wanted):
        updates, state = fg.jit(opt.update)(g, state, params)
        for name in SHAPES:
            np.testing.assert_allclose(updates[name], expected[name], rtol=1e-5, atol=1e-7)
    galore_state = state[0]
    assert galore_state.projector["b"].shape == (0, 0)
    assert galore_state.base_optimizer_state.mu["w"].shape == (2, 4)  # rank x n, not m x n


def test_projector_is_refreshed_every_gap_steps():
    params = {"w": np.zeros((6, 4))}
    opt = optim.contrib.scale_by_galore(rank=2, update_proj_gap=2)
    state = opt.init(params)
    for step in range(5):
        g = {"w": rng.standard_normal((6, 4))}
        previous = np.asarray(state.projector["w"])
        _, state = opt.update(g, state)
        projector = np.asarray(state.projector["w"])
        if step % 2 == 0:
            wanted = top_vectors(g["w"], 2)
            np.testing.assert_allclose(projector @ projector.T, wanted @ wanted.T, atol=1e-5)
        else:
            np.testing.assert_array_equal(projector, previous)


def test_default_dimension_numbers_and_errors():
    state = optim.contrib.scale_by_galore(rank=3).init({"w": np.zeros((5, 8)), "b": np.zeros(5)})
    assert state.projector["w"].shape == (8, 3) and state.projector["b"].shape == (0, 0)
    with pytest.raises(TypeError, match="rank must be an int"):
        optim.contrib.scale_by_galore(rank=2.0)
    with pytest.raises(ValueError, match="rank must be positive"):
        optim.contrib.scale_by_galore(rank=0)
    bad = optim.contrib.scale_by_galore(
        weight_dimension_numbers=GaLoreDimensionNumbers(reduction_axis=0, output_axis=0)
    )
    with pytest.raises(ValueError, match="must split the axes"):
        bad.init({"w": np.zeros((3, 3))})
