"""pure_callback and io_callback: call a Python function on NumPy arrays from inside a
transformed program.

JAX's name and contract: the callback is taken to be pure (no side effects, same result for the
same arguments), so the program may run it, or skip it when its results go unused, as any other
equation. Its results must have the shapes and dtypes declared at the call; the one
`pure_callback` equation checks them each time the callback runs.

Under vmap, `vmap_method` says how the callback sees the batch: "sequential" calls it once per
example (a lax.map), "sequential_unrolled" the same in a Python loop, "expand_dims" once with
the mapped operands' batch axis first and unmapped ones given a leading axis of size 1,
"broadcast_all" the same with unmapped operands broadcast to the batch size, and
"legacy_vectorized" with unmapped operands as they are. Without a method, vmap is an error.

`io_callback` (JAX's `experimental.io_callback`) is for callbacks with side effects: its
equation runs every time the program does, even when its results go unused, in program
order; under vmap it runs once per example (an `ordered` one refuses vmap), and it has no
derivative.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import core, tree_util
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import Zero
from funcgrad.lax.base import asarray
from funcgrad.lax.shapes import concatenate, expand_dims, index_in_dim

__all__ = ["effects_barrier", "io_callback", "pure_callback"]

VMAP_METHODS = (
    "sequential",
    "sequential_unrolled",
    "expand_dims",
    "broadcast_all",
    "legacy_vectorized",
)


class _UserCallback:
    """The user's function with the structure of its arguments and declared results. Compared
    by identity, like every callback, so two calls are never merged into one."""

    __slots__ = ("fun", "in_tree", "result_tree")

    def __init__(self, fun: Callable, in_tree, result_tree) -> None:
        self.fun = fun
        self.in_tree = in_tree
        self.result_tree = result_tree

    def __repr__(self) -> str:
        return getattr(self.fun, "__name__", repr(self.fun))


# Params: `callback` (a _UserCallback), `result_avals` (the declared results, flat; under vmap
# with a vectorizing method they gain the batch axis) and `vmap_method`.
pure_callback_p = Primitive("pure_callback", multiple_results=True)
pure_callback_p.def_weak_type(core.never_weak)


@pure_callback_p.def_abstract_eval
def _pure_callback_abstract_eval(*avals, callback, result_avals, vmap_method):
    return list(result_avals)


@pure_callback_p.def_impl
def _pure_callback_impl(*values, callback, result_avals, vmap_method):
    return _run("pure_callback", values, callback, result_avals)


def _run(name: str, values, callback: _UserCallback, result_avals) -> list[np.ndarray]:
    """The callback's results on `values`, checked against the declared ones."""
    args, kwargs = tree_util.tree_unflatten(callback.in_tree, [_read_only(v) for v in values])
    results = callback.fun(*args, **kwargs)
    leaves, tree = tree_util.tree_flatten(results)
    if tree != callback.result_tree:
        raise TypeError(
            f"{name}: {callback!r} returned results with structure {tree}, but "
            f"result_shape_dtypes declares {callback.result_tree}"
        )
    checked = []
    for k, (leaf, aval) in enumerate(zip(leaves, result_avals)):
        value = np.asarray(leaf)
        if value.shape != aval.shape or value.dtype != aval.dtype:
            raise TypeError(
                f"{name}: result {k} of {callback!r} has shape {value.shape} and dtype "
                f"{value.dtype}, but result_shape_dtypes declares shape {aval.shape} and dtype "
                f"{aval.dtype}"
            )
        checked.append(value)
    return checked


def _read_only(value) -> np.ndarray:
    """A copy the callback may keep: the program's own buffers are reused after it returns."""
    copy = np.array(value)
    copy.flags.writeable = False
    return copy


@pure_callback_p.def_jvp
def _pure_callback_jvp(primals, tangents, **params):
    raise TypeError(
        f"pure_callback ({params['callback']!r}) has no derivative: funcgrad cannot "
        "differentiate a Python function; wrap the call in a custom_jvp or custom_vjp function "
        "that gives its derivative"
    )


pure_callback_p.not_applicable["transpose"] = (
    "it has no jvp, so it never appears in a linear program that reverse mode transposes"
)


@pure_callback_p.def_batch
def _pure_callback_batch(values, dims, *, callback, result_avals, vmap_method):
    if vmap_method not in VMAP_METHODS:
        raise NotImplementedError(
            f"pure_callback ({callback!r}) under vmap needs vmap_method, one of {VMAP_METHODS}; "
            "it was called with vmap_method=None"
        )
    size = batching.batch_size(values, dims)
    params = dict(callback=callback, result_avals=result_avals, vmap_method=vmap_method)
    if vmap_method in ("sequential", "sequential_unrolled"):
        return _sequential(values, dims, size, params, unrolled=vmap_method != "sequential")
    moved = []
    for value, dim in zip(values, dims):
        if dim is not batching.not_mapped:
            moved.append(batching.moveaxis(value, dim, 0))
        elif vmap_method == "expand_dims":
            moved.append(expand_dims(value, (0,)))
        elif vmap_method == "broadcast_all":
            moved.append(batching.broadcast_batch(value, size, 0))
        else:
            moved.append(value)
    batched_avals = tuple(ShapedArray((size, *a.shape), a.dtype) for a in result_avals)
    outs = pure_callback_p.bind(*moved, **{**params, "result_avals": batched_avals})
    return outs, [0] * len(outs)


def _sequential(values, dims, size: int, params: dict, unrolled: bool, primitive=pure_callback_p):
    """One callback per example, results stacked along a new leading axis."""
    mapped = [k for k, dim in enumerate(dims) if dim is not batching.not_mapped]

    def one_example(slices):
        lane = list(values)
        for k, x in zip(mapped, slices):
            lane[k] = x
        return primitive.bind(*lane, **params)

    if unrolled:
        lanes = [
            one_example([index_in_dim(values[k], i, dims[k], keepdims=False) for k in mapped])
            for i in range(size)
        ]
        outs = [
            concatenate([expand_dims(lane[j], (0,)) for lane in lanes], 0)
            for j in range(len(params["result_avals"]))
        ]
    else:
        from funcgrad.lax.control_flow.scan import map as lax_map  # control flow imports us

        outs = lax_map(one_example, [batching.moveaxis(values[k], dims[k], 0) for k in mapped])
    return list(outs), [0] * len(outs)


# Params: `callback`, `result_avals` (as pure_callback's) and `ordered`.
io_callback_p = Primitive("io_callback", multiple_results=True)
io_callback_p.def_weak_type(core.never_weak)
io_callback_p.has_effects = True


@io_callback_p.def_abstract_eval
def _io_callback_abstract_eval(*avals, callback, result_avals, ordered):
    return list(result_avals)


@io_callback_p.def_impl
def _io_callback_impl(*values, callback, result_avals, ordered):
    return _run("io_callback", values, callback, result_avals)


@io_callback_p.def_jvp
def _io_callback_jvp(primals, tangents, **params):
    if all(type(t) is Zero for t in tangents):
        outs = io_callback_p.bind(*primals, **params)
        return outs, [Zero(ShapedArray(a.shape, a.dtype)) for a in params["result_avals"]]
    raise TypeError(
        f"io_callback ({params['callback']!r}) has no derivative: its inputs must not depend "
        "on what is differentiated (stop_gradient them), or give its derivative with a "
        "custom_jvp or custom_vjp function"
    )


io_callback_p.not_applicable["transpose"] = (
    "it has no jvp, so it never appears in a linear program that reverse mode transposes"
)


@io_callback_p.def_batch
def _io_callback_batch(values, dims, *, callback, result_avals, ordered):
    if ordered:
        raise ValueError(
            f"io_callback ({callback!r}): an ordered callback cannot be vmapped, since the "
            "examples have no order"
        )
    size = batching.batch_size(values, dims)
    params = dict(callback=callback, result_avals=result_avals, ordered=ordered)
    return _sequential(values, dims, size, params, unrolled=False, primitive=io_callback_p)


def io_callback(
    callback: Callable[..., Any],
    result_shape_dtypes: Any,
    *args: Any,
    sharding: Any = None,
    ordered: bool = False,
    **kwargs: Any,
) -> Any:
    """Call `callback(*args, **kwargs)`, which may have side effects, with NumPy arrays each
    time the program runs, and return its results (declared as `pure_callback`'s are).

    Unlike `pure_callback` it is never skipped; calls run in program order whether `ordered`
    or not. `sharding` only names where the callback runs: funcgrad runs it on the host.
    """
    del sharding
    if not callable(callback):
        raise TypeError(f"io_callback expects a callable, got {type(callback).__name__}")
    result_avals, result_tree = _declared("io_callback", result_shape_dtypes)
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    outs = io_callback_p.bind(
        *[asarray(x) for x in leaves],
        callback=_UserCallback(callback, in_tree, result_tree),
        result_avals=result_avals,
        ordered=bool(ordered),
    )
    return tree_util.tree_unflatten(result_tree, outs)


def _declared(name: str, result_shape_dtypes) -> tuple[tuple[ShapedArray, ...], Any]:
    """The avals of the declared results, and their structure."""
    declared, result_tree = tree_util.tree_flatten(result_shape_dtypes)
    result_avals = []
    for k, leaf in enumerate(declared):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(
                f"{name}: result_shape_dtypes leaf {k} is {leaf!r}; each leaf needs a "
                ".shape and a .dtype (a ShapeDtypeStruct, for instance)"
            )
        result_avals.append(ShapedArray(tuple(leaf.shape), np.dtype(leaf.dtype)))
    return tuple(result_avals), result_tree


def pure_callback(
    callback: Callable[..., Any],
    result_shape_dtypes: Any,
    *args: Any,
    vmap_method: str | None = None,
    **kwargs: Any,
) -> Any:
    """Call `callback(*args, **kwargs)` with NumPy arrays each time the program runs, and
    return its results as arrays.

    `result_shape_dtypes` is a pytree of objects with `.shape` and `.dtype` (ShapeDtypeStruct,
    NumPy arrays) declaring the results; the callback must return that structure with exactly
    those shapes and dtypes. The callback must be pure. It has no derivative, and under vmap it
    needs a `vmap_method` (see the module docstring).
    """
    if not callable(callback):
        raise TypeError(f"pure_callback expects a callable, got {type(callback).__name__}")
    if vmap_method is not None and vmap_method not in VMAP_METHODS:
        raise ValueError(
            f"pure_callback: vmap_method must be None or one of {VMAP_METHODS}, got {vmap_method!r}"
        )
    result_avals, result_tree = _declared("pure_callback", result_shape_dtypes)
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    outs = pure_callback_p.bind(
        *[asarray(x) for x in leaves],
        callback=_UserCallback(callback, in_tree, result_tree),
        result_avals=result_avals,
        vmap_method=vmap_method,
    )
    return tree_util.tree_unflatten(result_tree, outs)


def effects_barrier() -> None:
    """Wait for the callbacks of the calls made so far: there is nothing to wait for, since a
    program runs each callback as it reaches it, before the call returns."""
