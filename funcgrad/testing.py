"""A testing kit for your own functions: hypothesis strategies for arrays, shapes, pytrees and
PRNG keys, and property checks of the transformations.

    from funcgrad import testing
    from hypothesis import given

    @given(testing.arrays(shape=(3, 4)))
    def test_my_layer(x):
        testing.check_jit(my_layer, x)                 # jit(f) == f
        testing.check_vmap(my_layer, x, in_axes=0)     # vmap(f) == a Python loop over rows
        testing.check_grads(my_loss, (x,), order=2)    # derivatives == finite differences

The checks raise AssertionError naming the output leaf, the index and the size of the
difference. Hypothesis is needed only for the strategies (`pip install hypothesis`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from funcgrad import dtypes, tree_util
from funcgrad.test_util import check_grads
from funcgrad.transforms.jit import jit
from funcgrad.transforms.vmap import vmap

__all__ = [
    "arrays",
    "broadcastable_shapes",
    "check_grads",
    "check_jit",
    "check_vmap",
    "prng_keys",
    "pytrees_of_arrays",
    "shapes",
]


def _hypothesis():
    try:
        from hypothesis import strategies
        from hypothesis.extra import numpy as hypothesis_numpy
    except ImportError:
        raise ImportError(
            "funcgrad.testing's strategies need hypothesis: pip install hypothesis"
        ) from None
    return strategies, hypothesis_numpy


# ---------------------------------------------------------------------------------------------
# Strategies


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 5):
    """Array shapes with `min_dims`..`max_dims` axes of `min_side`..`max_side` elements."""
    _, hnp = _hypothesis()
    return hnp.array_shapes(
        min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side
    )


def broadcastable_shapes(n: int = 2, min_dims: int = 0, max_dims: int = 3, max_side: int = 5):
    """Tuples of `n` shapes that broadcast together (NumPy's rules)."""
    _, hnp = _hypothesis()
    return hnp.mutually_broadcastable_shapes(
        num_shapes=n, min_dims=min_dims, max_dims=max_dims, max_side=max_side
    ).map(lambda drawn: drawn.input_shapes)


def narrow_bounds(dtype: np.dtype, min_value, max_value) -> tuple:
    """Bounds within a narrow format's finite range: floats default to [-10, 10], integers to
    the whole range."""
    if dtypes.is_float(dtype):
        info = dtypes.finfo(dtype)
        lo = -10.0 if min_value is None else min_value
        hi = 10.0 if max_value is None else max_value
        return max(lo, float(info.min)), min(hi, float(info.max))
    info = dtypes.iinfo(dtype)
    lo = info.min if min_value is None else max(int(min_value), int(info.min))
    return lo, info.max if max_value is None else min(int(max_value), int(info.max))


def arrays(
    dtype: Any = np.float32,
    shape: Any = None,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    allow_nan: bool = False,
    allow_infinity: bool = False,
):
    """NumPy arrays of `dtype` and `shape` (either may be a strategy; shape defaults to
    `shapes()`), finite unless asked otherwise; floats within [-10, 10] by default."""
    st, hnp = _hypothesis()
    shape = shapes() if shape is None else shape

    def build(dtype, shape):
        dtype = np.dtype(dtype)
        if dtype == dtypes.bfloat16:
            return build(np.float32, shape).map(lambda a: a.astype(dtypes.bfloat16))
        if dtypes.is_narrow(dtype):
            # Drawn in the compute dtype within the format's range, and rounded to it.
            lo, hi = narrow_bounds(dtype, min_value, max_value)
            wide = arrays(
                dtypes.compute_dtype(dtype),
                shape,
                min_value=lo,
                max_value=hi,
                allow_nan=allow_nan,
                allow_infinity=allow_infinity,
            )
            return wide.map(lambda a: a.astype(dtype))
        if dtype.kind == "f":
            width = min(dtype.itemsize * 8, 64)
            narrow = np.dtype(f"float{width}").type
            lo = float(narrow(-10.0 if min_value is None else min_value))
            hi = float(narrow(10.0 if max_value is None else max_value))
            elements = st.floats(lo, hi, width=width, allow_nan=False, allow_infinity=False)
            specials = [float("nan")] * allow_nan + [float("inf"), float("-inf")] * allow_infinity
            if specials:
                elements = elements | st.sampled_from(specials)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            lo = info.min if min_value is None else max(int(min_value), int(info.min))
            hi = info.max if max_value is None else min(int(max_value), int(info.max))
            elements = st.integers(lo, hi)
        else:
            elements = st.booleans()
        return hnp.arrays(dtype, shape, elements=elements)

    dtype_st = dtype if isinstance(dtype, st.SearchStrategy) else st.just(dtype)
    shape_st = shape if isinstance(shape, st.SearchStrategy) else st.just(tuple(shape))
    return st.tuples(dtype_st, shape_st).flatmap(lambda drawn: build(*drawn))


def pytrees_of_arrays(leaves=None, max_leaves: int = 6):
    """Nested dicts, lists and tuples whose leaves are drawn from `leaves` (default:
    float32 arrays)."""
    st, _ = _hypothesis()
    leaves = arrays() if leaves is None else leaves
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, min_size=1, max_size=3)
            | st.tuples(children, children)
            | st.dictionaries(
                st.text("abcdefgh", min_size=1, max_size=4), children, min_size=1, max_size=3
            )
        ),
        max_leaves=max_leaves,
    )


def prng_keys():
    """funcgrad PRNG keys, from seeds."""
    st, _ = _hypothesis()
    from funcgrad import random

    return st.integers(0, 2**32 - 1).map(random.PRNGKey)


# ---------------------------------------------------------------------------------------------
# Property checks


def check_jit(f: Callable, *args, rtol: float = 1e-5, atol: float = 1e-6, **kwargs) -> None:
    """`jit(f)(*args)` equals `f(*args)` run op by op, leaf by leaf."""
    _assert_trees_close(jit(f)(*args, **kwargs), f(*args, **kwargs), "jit(f)", "f", rtol, atol)


def check_vmap(
    f: Callable,
    *args,
    in_axes: int | None | Sequence = 0,
    out_axes: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """`vmap(f, in_axes, out_axes)(*args)` equals calling `f` on each slice along the mapped
    axes in a Python loop and stacking the results along `out_axes`."""
    axes = list(in_axes) if isinstance(in_axes, list | tuple) else [in_axes] * len(args)
    if len(axes) != len(args):
        raise ValueError(f"check_vmap: in_axes has {len(axes)} entries for {len(args)} arguments")
    sizes = {
        np.shape(leaf)[axis]
        for arg, axis in zip(args, axes)
        if axis is not None
        for leaf in tree_util.tree_leaves(arg)
    }
    if len(sizes) != 1:
        raise ValueError(f"check_vmap: the mapped axes have sizes {sorted(sizes)}; need one size")
    (size,) = sizes
    batched = vmap(f, in_axes=tuple(axes), out_axes=out_axes)(*args)
    lanes = [f(*(_lane(arg, axis, i) for arg, axis in zip(args, axes))) for i in range(size)]
    looped = tree_util.tree_map(
        lambda *xs: np.stack([np.asarray(x) for x in xs], axis=out_axes), *lanes
    )
    _assert_trees_close(batched, looped, "vmap(f)", "a loop of f", rtol, atol)


def _lane(arg, axis: int | None, i: int):
    """Slice `i` of `arg` along `axis` (all of it when the argument is not mapped)."""
    if axis is None:
        return arg
    return tree_util.tree_map(lambda x: np.take(np.asarray(x), i, axis=axis), arg)


def _assert_trees_close(actual, expected, name: str, reference: str, rtol: float, atol: float):
    actual_leaves, actual_tree = tree_util.tree_flatten(actual)
    expected_leaves, expected_tree = tree_util.tree_flatten(expected)
    if actual_tree != expected_tree:
        raise AssertionError(
            f"{name} returns structure {actual_tree}, but {reference} returns {expected_tree}"
        )
    for k, (a, e) in enumerate(zip(actual_leaves, expected_leaves)):
        where = f"output leaf {k}" if len(actual_leaves) > 1 else "the output"
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape or a.dtype != e.dtype:
            raise AssertionError(
                f"{name}: {where} is {a.dtype}{list(a.shape)}, but {reference} gives "
                f"{e.dtype}{list(e.shape)}"
            )
        wide_a, wide_e = a.astype(np.float64), e.astype(np.float64)
        bad = ~np.isclose(wide_a, wide_e, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            difference = np.abs(wide_a - wide_e)[bad].max()
            raise AssertionError(
                f"{name}: {where} differs from {reference} at {int(bad.sum())} of {a.size} "
                f"elements; first at index {index}: {a[index]!r} vs {e[index]!r}; largest "
                f"difference {difference:.3g} (rtol={rtol}, atol={atol})"
            )
