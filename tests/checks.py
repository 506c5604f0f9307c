"""Checks shared by the primitive suites: eager results against NumPy, and against tracing."""

from __future__ import annotations

import contextlib

import ml_dtypes
import numpy as np

import funcgrad as fg
from funcgrad import tree_util
from funcgrad.config import _scoped as scoped
from funcgrad.ir import eval_jaxpr


def jit_backend(name: str):
    """Run jitted programs on backend `name` inside the block."""
    return scoped("jit_backend", name)


def cpu_devices(count: int):
    """`count` virtual CPU devices inside the block (pmap, shard_map and meshes over them)."""
    return scoped("num_cpu_devices", count)


@contextlib.contextmanager
def products_as(path: str):
    """On the LLVM backend, matrix products and convolutions inside the block run as the
    library's GEMMs ("library") or in register tiles wherever their layout allows ("tiles"),
    whatever this CPU and library would choose."""
    from funcgrad.backends.llvm import tiles

    policy = {"library": lambda *shape: False, "tiles": tiles.fits_tiles}[path]
    saved = tiles.takes_product, tiles.CONVOLUTIONS
    tiles.takes_product, tiles.CONVOLUTIONS = policy, path == "tiles"
    try:
        yield
    finally:
        tiles.takes_product, tiles.CONVOLUTIONS = saved


def tolerance(dtype) -> dict:
    dtype = np.dtype(dtype)
    if dtype.kind != "f" and dtype.name != "bfloat16":
        return dict(rtol=0, atol=0)
    known = {
        "float64": dict(rtol=1e-12, atol=1e-12),
        "float32": dict(rtol=2e-6, atol=2e-6),
        "float16": dict(rtol=2e-3, atol=2e-3),
        "bfloat16": dict(rtol=2e-2, atol=2e-2),
    }
    if dtype.name in known:
        return known[dtype.name]
    eps = float(ml_dtypes.finfo(dtype).eps)  # the 8-bit formats: one step of their mantissa
    return dict(rtol=eps, atol=eps)


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


def check_staging(fun, *args, exact: bool = False) -> None:
    """Eager outputs have exactly the avals (shape, dtype, weak type) that tracing predicts, and
    the staged program, evaluated or compiled by jit, gives exactly the eager outputs. `exact`:
    compiled backends too give them exactly (an operation with one correct result, where a
    tolerance of a few ulp would let a step of one ulp go unseen)."""
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
    # The compiled program gives the eager outputs: the same avals, and the same values
    # exactly on the reference backend; compiled backends have their own implementations of
    # transcendental functions, so their floats agree to within a few ulp.
    jitted_leaves = tree_util.tree_leaves(fg.jit(fun)(*args))
    assert len(jitted_leaves) == len(eager_leaves)
    for leaf, value in zip(eager_leaves, jitted_leaves):
        assert value.aval == leaf.aval, f"eager {leaf.aval} vs jit {value.aval}"
        if exact or fg.config.jit_backend == "numpy":
            np.testing.assert_array_equal(_comparable(leaf), _comparable(value))
        else:
            assert_close(value, _comparable(leaf))


def _comparable(x) -> np.ndarray:
    # NumPy's testing helpers see the formats it does not know (bfloat16, float4, the 4- and
    # 2-bit integers, float8_e8m0fnu) as opaque and miss their NaNs; float32 holds each exactly.
    value = np.asarray(x)
    return value.astype(np.float32) if value.dtype.kind == "V" else value


def check_batching(fun, args, in_axes, out_axes=0, **tol) -> None:
    """vmap(fun) equals stacking fun's results over a Python loop of the lanes.

    `args` are arrays, `in_axes` one int or None per argument, `out_axes` one int for every
    output leaf. Outputs must match in shape and dtype exactly and in value up to `tol`.
    """
    args = [np.asarray(a) if not isinstance(a, (int, float)) else a for a in args]
    sizes = {np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None}
    assert len(sizes) == 1, f"mapped axes disagree: {sizes}"
    (size,) = sizes
    batched = fg.vmap(fun, in_axes=tuple(in_axes), out_axes=out_axes)(*args)
    lanes = [
        fun(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)])
        for i in range(size)
    ]
    batched_leaves, batched_tree = tree_util.tree_flatten(batched)
    lane_leaves = [tree_util.tree_leaves(lane) for lane in lanes]
    assert tree_util.tree_structure(lanes[0]) == batched_tree
    for j, leaf in enumerate(batched_leaves):
        expected = np.stack([_comparable(lane[j]) for lane in lane_leaves], axis=out_axes)
        actual = np.asarray(leaf)
        assert actual.dtype == np.asarray(lane_leaves[0][j]).dtype, (actual.dtype, j)
        assert actual.shape == expected.shape, (actual.shape, expected.shape)
        np.testing.assert_allclose(
            _comparable(actual).astype(np.float64) if actual.dtype.kind == "f" else actual,
            expected.astype(np.float64) if expected.dtype.kind == "f" else expected,
            equal_nan=True,
            **(tol or tolerance(actual.dtype)),
        )


def assert_close_or_as_near_the_truth(got, expected, tolerance: float, truth) -> None:
    """`got` within `tolerance` of `expected` (the reference's result, in the same precision),
    or else no further from `truth()` (the same computation in float64 or complex128) than
    four times the reference is. An ill-conditioned computation (a pole of a complex tanh
    nearby, a training loop amplifying its rounding) leaves the reference's own float32
    result far from the wide one, and a compiled one, rounding in another order, about as
    far: only a result much further than the reference's is wrong."""
    got, expected = np.asarray(got), np.asarray(expected)
    if np.allclose(got, expected, rtol=tolerance, atol=tolerance):
        return
    exact = np.asarray(truth())
    own, reference = np.abs(got - exact).max(), np.abs(expected - exact).max()
    assert own <= 4 * reference, (
        f"{own} from the wide computation, where the reference's own result is {reference} "
        f"from it (and {np.abs(got - expected).max()} from this one)"
    )
