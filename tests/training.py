"""Random training loops: a small network's training step drawn at random, for the tests
that run steps call after call on a compiled backend against the reference (GPU replays,
donated updates)."""

from __future__ import annotations

import functools

import numpy as np
from checks import assert_close_or_as_near_the_truth, jit_backend
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp

ACTIVATIONS = {
    "tanh": fnp.tanh,
    "relu": fg.nn.relu,
    "sigmoid": fg.nn.sigmoid,
    "sin": fnp.sin,
    "gelu": fg.nn.gelu,
}
STEPS = 7


def _loss(kind: str, out, target):
    if kind == "cross_entropy":  # rows of the class count: short rows, narrow products
        return -(fg.nn.log_softmax(out, axis=1) * target).sum() / out.shape[0]
    if kind == "squared":
        return ((out - target) ** 2).mean()
    # rows normalized first (a row's mean and variance), then compared
    centered = out - out.mean(axis=1, keepdims=True)
    normed = centered / fnp.sqrt((centered**2).mean(axis=1, keepdims=True) + 1.0)
    return ((normed - target) ** 2).sum()


@st.composite
def loops(draw) -> dict:
    """A training step drawn with the shapes compilers handle apart (few classes: products of
    few columns and short rows; one example or several; products large enough for a GEMM or
    not), its loss, its update, what it donates and where a GPU's data lives."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    sizes = (
        draw(st.integers(1, 40)),  # examples
        draw(st.integers(2, 70)),  # features
        draw(st.integers(1, 40)),  # hidden units
        draw(st.one_of(st.integers(1, 16), st.integers(17, 40))),  # outputs
    )
    return dict(
        dtype=dtype,
        sizes=sizes,
        depth=draw(st.sampled_from([1, 2])),
        activation=draw(st.sampled_from(sorted(ACTIVATIONS))),
        loss=draw(st.sampled_from(["cross_entropy", "squared", "normalized"])),
        momentum=draw(st.booleans()),
        donate=draw(st.sampled_from(["none", "parameters", "state"])),
        data=draw(st.sampled_from(["host", "device, one place", "device, new places"])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def donated(loop: dict) -> tuple[int, ...]:
    return {"none": (), "parameters": (0,), "state": (0, 1)}[loop["donate"]]


def initial_state(loop: dict) -> tuple[list, list, list, list]:
    """(parameters, momentum, batches, targets) as NumPy arrays, a batch and target a step."""
    dtype = loop["dtype"]
    n, d, h, c = loop["sizes"]
    rng = np.random.default_rng(loop["seed"])
    widths = [d, h, c] if loop["depth"] == 2 else [d, c]
    params = []
    for fan_in, fan_out in zip(widths, widths[1:]):
        params += [
            (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(dtype),
            (rng.standard_normal(fan_out) * 0.1).astype(dtype),
        ]
    velocity = [np.zeros_like(p) for p in params]
    batches = [rng.standard_normal((n, d)).astype(dtype) for _ in range(STEPS)]
    if loop["loss"] == "cross_entropy":
        targets = [np.eye(c, dtype=dtype)[rng.integers(0, c, n)] for _ in range(STEPS)]
    else:
        targets = [rng.standard_normal((n, c)).astype(dtype) for _ in range(STEPS)]
    return params, velocity, batches, targets


def step(loop: dict):
    """step(params, velocity, x, target) -> (params, velocity, loss): SGD, with momentum or
    not, on the drawn network and loss."""
    activation, kind = ACTIVATIONS[loop["activation"]], loop["loss"]
    depth, lr = loop["depth"], 0.1

    def predict(params, x):
        h = x
        for k in range(depth):
            w, b = params[2 * k], params[2 * k + 1]
            h = h @ w + b
            if k < depth - 1:
                h = activation(h)
        return h

    def train(params, velocity, x, target):
        loss, grads = fg.value_and_grad(lambda p: _loss(kind, predict(p, x), target))(params)
        if loop["momentum"]:
            velocity = tuple(0.9 * v + g for v, g in zip(velocity, grads))
            grads = velocity
        return tuple(p - lr * g for p, g in zip(params, grads)), velocity, loss

    return train


def assert_step_close(loop: dict, got: list, expected: list, before: tuple, x, target) -> None:
    """A compiled step's results (flat) against the reference's from the same state `before`
    ((params, velocity)): in float64 within 1e-9; in float32 within 2e-4, or no further from
    the step computed in float64 than four times the reference's own is (a loop drawn with
    large values can be ill-conditioned: one float32 step of the reference's lay 5e-4 from
    float64's)."""
    if loop["dtype"] == np.float64:
        for g, e in zip(got, expected):
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-9, atol=1e-9)
        return
    wide = fg.tree_util.tree_map(lambda a: np.asarray(a, np.float64), (*before, x, target))

    @functools.cache
    def exact():
        with jit_backend("numpy"):
            return fg.tree_util.tree_leaves(fg.jit(step(loop))(*wide))

    for k, (g, e) in enumerate(zip(got, expected)):
        assert_close_or_as_near_the_truth(g, e, 2e-4, lambda k=k: exact()[k])
