"""vmap: vectorize a function over an axis of its arguments, with JAX's semantics."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.interpreters.batching import (
    BatchTrace,
    BatchTracer,
    broadcast_batch,
    moveaxis,
    not_mapped,
)
from funcgrad.lax.base import asarray
from funcgrad.lax.reductions import reduce_sum
from funcgrad.transforms.make_jaxpr import function_name


def _flat_axes(axes, tree, what: str) -> list:
    """One axis per leaf of `tree`, from `axes`: an int, None, or a tree prefix of `tree`."""
    for axis in tree_util.tree_leaves(axes):
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise TypeError(
                f"vmap {what} must be an int, None, or a pytree of ints and Nones; got "
                f"{axis!r} of type {type(axis).__name__} in {what}={axes!r}"
            )
    try:
        return _expand_prefix(axes, tree)
    except ValueError:
        raise ValueError(
            f"vmap {what} must be an int, None, or a tree prefix of the arguments; "
            f"{what}={axes!r} does not match the argument structure "
            f"{tree_util.tree_structure(tree)}"
        ) from None


def _expand_prefix(prefix, tree) -> list:
    if prefix is None or isinstance(prefix, int):
        return [prefix] * len(tree_util.tree_leaves(tree))
    prefix_children, prefix_node = _one_level(prefix)
    tree_children, tree_node = _one_level(tree)
    if prefix_node != tree_node:
        raise ValueError("prefix mismatch")
    return [axis for p, t in zip(prefix_children, tree_children) for axis in _expand_prefix(p, t)]


def _one_level(x):
    """The children of the pytree node `x`, and the node's structure."""
    return tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)


def _mapped_size(leaves, axes, name: str) -> int | None:
    sizes = {}
    for i, (leaf, axis) in enumerate(zip(leaves, axes)):
        if axis is None:
            continue
        shape = np.shape(leaf) if _is_float0(leaf) else core.get_aval(leaf).shape
        if not -len(shape) <= axis < len(shape):
            raise ValueError(
                f"vmap was asked to map axis {axis} of argument {i} of {name}, which has shape "
                f"{shape}"
            )
        sizes[i] = shape[axis % len(shape)]
    if not sizes:
        return None
    if len(set(sizes.values())) > 1:
        described = ", ".join(f"argument {i} has size {s}" for i, s in sizes.items())
        raise ValueError(f"vmap got inconsistent sizes for the mapped axes of {name}: {described}")
    return next(iter(sizes.values()))


def vmap(
    fun: Callable,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Any = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
    sum_match: bool = False,
) -> Callable:
    """Vectorize `fun` over the axes `in_axes` of its arguments, stacking results at `out_axes`.

    Axes are ints (negative ones count from the end), None (not mapped), or pytree prefixes of
    the positional arguments; keyword arguments are always mapped along axis 0. `axis_name`
    names the axis for collectives (psum, ...); `axis_size` gives the size when no argument is
    mapped. An output that varies along the mapped axis may have out_axes None only with
    `sum_match`, which sums it over that axis.
    """
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    name = function_name(fun)

    @functools.wraps(fun)
    def vmapped(*args, **kwargs):
        leaves, in_tree = tree_util.tree_flatten((args, kwargs))
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(
                f"vmap({name}) got in_axes of length {len(in_axes)} for {len(args)} positional "
                "arguments; give one entry per argument"
            )
        # in_axes covers the positional arguments; keyword arguments are always mapped
        # along their leading axis.
        axes = _flat_axes(in_axes, tuple(args), "in_axes") + [0] * len(
            tree_util.tree_leaves(kwargs)
        )
        # Unmapped Python scalars reach `fun` as they are, as in JAX: one may be a jitted
        # function's static argument, or a loop bound.
        leaves = [
            x if (axis is None and type(x) in (bool, int, float)) or _is_float0(x) else asarray(x)
            for x, axis in zip(leaves, axes)
        ]
        size = _mapped_size(leaves, axes, name)
        if size is None:
            if axis_size is None:
                raise ValueError(
                    f"vmap({name}) maps no argument (all in_axes are None); pass axis_size"
                )
            size = axis_size
        elif axis_size is not None and axis_size != size:
            raise ValueError(
                f"vmap({name}) got axis_size={axis_size} but the mapped arguments have size {size}"
            )
        trace = BatchTrace(core.current_trace(), size, axis_name, f"vmap({name})")
        in_values = [_mapped_input(trace, x, axis) for x, axis in zip(leaves, axes)]
        with core.trace_lifetime(trace):
            with core.set_current_trace(trace):
                in_args, in_kwargs = tree_util.tree_unflatten(in_tree, in_values)
                out = fun(*in_args, **in_kwargs)
            out_leaves, out_tree = tree_util.tree_flatten(out)
            pairs = [
                (x, not_mapped) if _is_float0(x) else trace.value_and_dim(asarray(x))
                for x in out_leaves
            ]
            out_axes_flat = _flat_axes(out_axes, out, "out_axes")
            # (the leak checker finds any tracer still referenced)
            del in_values, in_args, in_kwargs, out, out_leaves
        results = [
            _place_output(value, dim, axis, size, name, sum_match)
            for (value, dim), axis in zip(pairs, out_axes_flat)
        ]
        return tree_util.tree_unflatten(out_tree, results)

    return vmapped


def _is_float0(x) -> bool:
    """float0 arrays (the tangents of integers) hold no data: vmap passes them through as
    NumPy arrays, removing or inserting the mapped axis in their shape."""
    return isinstance(x, np.ndarray) and x.dtype == dtypes.float0


def _mapped_input(trace: BatchTrace, x, axis):
    if axis is None:
        return x
    if _is_float0(x):
        shape = list(x.shape)
        del shape[axis % x.ndim]
        return np.zeros(shape, dtypes.float0)
    return BatchTracer(trace, x, axis % x.ndim)


def _place_output(value, dim, out_axis, size: int, name: str, sum_match: bool):
    if out_axis is not None and _is_float0(value):
        ndim = value.ndim + 1
        if not -ndim <= out_axis < ndim:
            raise ValueError(
                f"vmap({name}): out_axes {out_axis} is out of bounds for an output of rank {ndim}"
            )
        shape = list(value.shape)
        shape.insert(out_axis % ndim, size)
        return np.zeros(shape, dtypes.float0)
    if out_axis is None:
        if dim is not_mapped:
            return value
        if sum_match:
            return reduce_sum(value, (dim,))
        raise ValueError(
            f"vmap({name}) has an output that varies along the mapped axis, but its "
            "out_axes is None; only outputs that do not depend on mapped inputs may have "
            "out_axes None (or pass sum_match=True to sum them over the mapped axis)"
        )
    # The output's rank: the value's own, plus the batch axis it gains if it has none yet.
    ndim = core.get_aval(value).ndim + (dim is not_mapped)
    if not -ndim <= out_axis < ndim:
        raise ValueError(
            f"vmap({name}): out_axes {out_axis} is out of bounds for an output of rank {ndim}"
        )
    out_axis %= ndim
    if dim is not_mapped:
        return broadcast_batch(value, size, out_axis)
    return moveaxis(value, dim, out_axis)
