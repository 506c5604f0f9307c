"""Checks shared by the primitive suites: eager results against NumPy, and against tracing."""

from __future__ import annotations

import numpy as np

import funcgrad as fg
from funcgrad import tree_util
from funcgrad.ir import eval_jaxpr


def tolerance(dtype) -> dict:
    dtype = np.dtype(dtype)
    if dtype.kind != "f" and dtype.name != "bfloat16":
        return dict(rtol=0, atol=0)
    return {
        "float64": dict(rtol=1e-12, atol=1e-12),
        "float32": dict(rtol=2e-6, atol=2e-6),
        "float16": dict(rtol=2e-3, atol=2e-3),
        "bfloat16": dict(rtol=2e-2, atol=2e-2),
    }[dtype.name]


def assert_close(actual, expected, dtype=None, **tol) -> None:
    """`actual` (a funcgrad array) equals `expected` (NumPy) in shape, dtype and values."""
    actual_np = np.asarray(actual)
    expected_np = np.asarray(expected)
    assert actual_np.shape == expected_np.shape, (actual_np.shape, expected_np.shape)
    if dtype is not None:
        assert actual_np.dtype == np.dtype(dtype), (actual_np.dtype, np.dtype(dtype))
    tol = tol or tolerance(actual_np.dtype)
    np.testing.assert_allclose(
        actual_np.astype(np.float64) if actual_np.dtype.name == "bfloat16" else actual_np,
        expected_np.astype(np.float64) if expected_np.dtype.name == "bfloat16" else expected_np,
        equal_nan=True,
        **tol,
    )


def check_staging(fun, *args) -> None:
    """Eager outputs have exactly the avals (shape, dtype, weak type) that tracing predicts."""
    args = tree_util.tree_map(
        lambda x: fg.numpy.asarray(x) if isinstance(x, np.ndarray) else x, args
    )
    eager_leaves = tree_util.tree_leaves(fun(*args))
    closed = fg.make_jaxpr(fun)(*args)
    staged_avals = closed.out_avals
    assert len(eager_leaves) == len(staged_avals)
    for leaf, aval in zip(eager_leaves, staged_avals):
        assert leaf.aval == aval, f"eager {leaf.aval} vs traced {aval}"
    # Evaluating the staged program gives the eager values.
    flat_args = [fg.lax.asarray(x) for x in tree_util.tree_leaves(args)]
    staged = eval_jaxpr(closed.jaxpr, closed.consts, *flat_args)
    for leaf, value in zip(eager_leaves, staged):
        np.testing.assert_array_equal(_comparable(leaf), _comparable(value))


def _comparable(x) -> np.ndarray:
    # NumPy's testing helpers do not recognise bfloat16 NaNs; float32 holds bfloat16 exactly.
    value = np.asarray(x)
    return value.astype(np.float32) if value.dtype.name == "bfloat16" else value
