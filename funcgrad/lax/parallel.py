"""Collectives: operations across the lanes of a named axis (psum, all_gather, ppermute, ...).

A collective has a meaning only inside a transformation that names an axis, such as
`vmap(f, axis_name='i')`: each lane runs `f`, and `psum(x, 'i')` gives every lane the sum of
`x` over all lanes. Under vmap the lanes are the batch, so each collective's axis rule
(`batching.collective_axis_rules`) turns it into ordinary array operations across the batch
axis: psum becomes a `reduce_sum`, all_gather a transpose, ppermute a gather. A collective over
another trace's axis passes this trace's batch through (its `batch` rule). Under pmap every
device runs the program on its own thread and a collective's shard rule
(`parallel.shard_rules`) computes this device's result from the buffers of all devices
(`funcgrad/interpreters/parallel.py`). Outside every named axis a collective raises
`NameError`, as JAX does.

`axis_name` is one hashable name or a tuple of names; a tuple means the product of those axes,
its lanes numbered row-major in the order of the names. Each trace reduces over its own name
and binds the collective again with the remaining names, for the traces above it.

Derivatives follow JAX: the linear collectives transpose to collectives (psum to psum,
all_gather to psum_scatter, ppermute to the inverse permutation, all_to_all to all_to_all with
its axes swapped, pbroadcast to a psum kept by the source lane), so reverse mode inside vmap
differentiates the sum over lanes of the per-lane outputs.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.interpreters import batching, parallel
from funcgrad.interpreters.ad import defjvp_zero, deflinear
from funcgrad.interpreters.batching import BatchTracer, broadcast_batch, moveaxis, not_mapped
from funcgrad.lax import elementwise, shapes
from funcgrad.lax.base import NUMERIC, REAL, asarray, canonical_axes, check_dtype_class
from funcgrad.lax.indexing import GatherDimensionNumbers, dynamic_slice_in_dim, gather
from funcgrad.lax.reductions import reduce_max, reduce_min, reduce_sum

__all__ = [
    "all_gather",
    "all_to_all",
    "axis_index",
    "axis_size",
    "pbroadcast",
    "pcast",
    "pmax",
    "pmean",
    "pmin",
    "ppermute",
    "psum",
    "psum_scatter",
    "pshuffle",
    "pswapaxes",
]

# ---------------------------------------------------------------------------------------------
# Axis names


def _names(axis_name) -> tuple:
    return axis_name if isinstance(axis_name, tuple) else (axis_name,)


def _unbound(name: Hashable) -> NameError:
    return NameError(f"unbound axis name: {name}")


def _axis_size(axis_name) -> int:
    """The number of lanes of `axis_name` (the product over a tuple of names), as seen from the
    current trace: the innermost enclosing trace that names the axis gives its size."""
    size = 1
    for name in _names(axis_name):
        trace = core.current_trace()
        while trace is not None and getattr(trace, "axis_name", None) != name:
            trace = trace.parent
        if trace is None:
            raise _unbound(name)
        size *= trace.axis_size
    return size


def _axis_name(name: str, axis_name):
    """`axis_name` in its canonical hashable form, after checking that every name is bound."""
    if isinstance(axis_name, list):
        axis_name = tuple(axis_name)
    if axis_name is None or (isinstance(axis_name, tuple) and not axis_name):
        raise ValueError(f"{name}: axis_name must name an axis, got {axis_name!r}")
    _axis_size(axis_name)
    return axis_name


def _index_groups(name: str, axis_name, axis_index_groups, *, equal: bool) -> tuple | None:
    """`axis_index_groups` as a tuple of tuples, after checking that the groups hold every
    position of `axis_name` exactly once (and, where `equal`, that they have one size: a
    gather or an exchange needs as many blocks from every group). None stays None."""
    if axis_index_groups is None:
        return None
    try:
        groups = tuple(tuple(operator.index(i) for i in group) for group in axis_index_groups)
    except TypeError:
        raise TypeError(
            f"{name}: axis_index_groups must be a sequence of sequences of axis positions "
            f"(ints), got {axis_index_groups!r}"
        ) from None
    size = _axis_size(axis_name)
    positions = [i for group in groups for i in group]
    if sorted(positions) != list(range(size)):
        raise ValueError(
            f"{name}: axis_index_groups {groups} must hold each position 0..{size - 1} of axis "
            f"{axis_name!r} (size {size}) exactly once"
        )
    if equal and len({len(group) for group in groups}) > 1:
        raise ValueError(
            f"{name}: the groups of axis_index_groups {groups} must all have the same size"
        )
    return groups


def _split_names(axis_name, own: Hashable) -> tuple[tuple, tuple]:
    """The names of `axis_name` before and after the trace's own name `own`."""
    names = _names(axis_name)
    k = names.index(own)
    return names[:k], names[k + 1 :]


def _single_name(name: str, axis_name) -> None:
    if len(_names(axis_name)) > 1:
        raise NotImplementedError(
            f"{name} over several axes at once ({axis_name!r}) is not supported; "
            "apply it over one axis name"
        )


def _collective_primitive(name: str) -> Primitive:
    """A collective primitive. Its eager impl runs on a pmap device (the shard rule, given the
    buffers of all devices) and otherwise reports that its axis is unbound; under vmap, the
    axis rules compute it across the batch."""
    prim = Primitive(name)
    prim.foldable = False  # its value depends on the device running it, even from constants

    @prim.def_impl
    def impl(*args, **params):
        return parallel.apply_collective(prim, args, params)

    return prim


def _def_shard_rule(prim: Primitive):
    def register(rule):
        parallel.shard_rules[prim] = rule
        return rule

    return register


def _def_axis_rule(prim: Primitive):
    """Register the rule computing `prim` across a trace's own axis; the lanes' operands are
    checked by `prim`'s shape rule first, so errors read as they do outside vmap."""

    def register(rule):
        def checked(trace, values, dims, **params):
            if params.get("axis_index_groups") is not None:
                raise NotImplementedError(
                    f"{prim.name}: axis_index_groups is not supported over a vmapped axis "
                    f"({trace.axis_name!r}); use it inside pmap or shard_map"
                )
            prim.abstract_eval(*map(_lane_aval, values, dims), **params)
            return rule(trace, values, dims, **params)

        batching.collective_axis_rules[prim] = checked
        return rule

    return register


def _lane_aval(value, dim) -> ShapedArray:
    aval = core.get_aval(value)
    if dim is not_mapped:
        return aval
    return aval.update(shape=aval.shape[:dim] + aval.shape[dim + 1 :])


def _merge_axes(x, start: int, count: int):
    """`x` with its `count` axes from `start` merged into one (row-major)."""
    if count == 1:
        return x
    shape = core.get_aval(x).shape
    merged = math.prod(shape[start : start + count])
    return shapes.reshape(x, shape[:start] + (merged,) + shape[start + count :])


def _check_axis(name: str, what: str, axis: int, rank: int, shape) -> None:
    if not 0 <= axis < rank:
        raise ValueError(
            f"{name}: {what} {axis} is out of range for an operand of shape {tuple(shape)}"
        )


# ---------------------------------------------------------------------------------------------
# psum, pmax, pmin: lane-wise reductions whose result every lane receives


def _reduction_collective(name: str, accepted) -> Primitive:
    prim = _collective_primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, *, axis_name, axis_index_groups) -> ShapedArray:
        check_dtype_class(name, x, accepted)
        return ShapedArray(x.shape, x.dtype)

    @prim.def_batch
    def batch(values, dims, **params):
        # Over another trace's axis the reduction is lane-wise in this trace's batch.
        return prim.bind(values[0], **params), dims[0]

    return prim


psum_p = _reduction_collective("psum", NUMERIC)
# Complex values have no order here, as lax.max and reduce_max refuse them too.
pmax_p = _reduction_collective("pmax", REAL)
pmin_p = _reduction_collective("pmin", REAL)


def _psum_transpose(ct, x, **params):
    # Every lane's output is the sum of every lane's input (in its group), so every input's
    # cotangent is the sum of the output cotangents over the lanes (of its group).
    return [psum_p.bind(ct, **params)]


deflinear(psum_p, _psum_transpose)


def _extremum_jvp(prim: Primitive) -> None:
    """pmax/pmin: the tangent at the lanes that attain the extreme, shared equally among ties
    (as reduce_max's derivative does, so a derivative inside vmap equals one outside it).
    JAX has no derivative for these; this one extends it."""

    def jvp(primals, tangents, **params):
        (x,), (t,) = primals, tangents
        ans = prim.bind(x, **params)
        attains = elementwise.convert_element_type(elementwise.eq(x, ans), x.dtype)
        count = psum_p.bind(attains, **params)
        total = psum_p.bind(elementwise.mul(t, attains), **params)
        return ans, elementwise.div(total, elementwise.max(count, 1))

    prim.def_jvp(jvp)
    prim.not_applicable["transpose"] = "not linear"


_extremum_jvp(pmax_p)
_extremum_jvp(pmin_p)


def _reduction_axis_rule(prim: Primitive, reduce, unbatched):
    """Reduce over the batch axis; the result is the same in every lane (unbatched)."""

    def rule(trace, values, dims, *, axis_name, axis_index_groups):
        (x,), (dim,) = values, dims
        out = unbatched(x, trace.axis_size) if dim is not_mapped else reduce(x, (dim,))
        prefix, suffix = _split_names(axis_name, trace.axis_name)
        if prefix or suffix:
            out = prim.bind(out, axis_name=prefix + suffix, axis_index_groups=None)
        return out, not_mapped

    _def_axis_rule(prim)(rule)


_reduction_axis_rule(psum_p, reduce_sum, elementwise.mul)
_reduction_axis_rule(pmax_p, reduce_max, lambda x, size: x)
_reduction_axis_rule(pmin_p, reduce_min, lambda x, size: x)


def _reduction_shard_rule(prim: Primitive, combine, op: str) -> None:
    """Every device gets the buffers of all devices (of its group) combined (this process's in
    device order, then across processes)."""

    def rule(frame, x, *, axis_name, axis_index_groups):
        # Each device gets its own copy of the combined buffer, as it would of its own result.
        return np.array(frame.all_reduce(x, combine, op, prim.name), x.dtype)

    _def_shard_rule(prim)(rule)


_reduction_shard_rule(psum_p, np.add, "sum")
_reduction_shard_rule(pmax_p, np.maximum, "max")
_reduction_shard_rule(pmin_p, np.minimum, "min")


def _positional(name: str, axis_name, axis_index_groups) -> tuple[tuple[int, ...], Any]:
    """`axis_name` split into the array dimensions it names by position (its ints, which
    psum, pmax, pmin and pmean reduce within each lane, as NumPy's reductions do) and the named
    axes (None for none), after checking the names are bound."""
    if isinstance(axis_name, list):
        axis_name = tuple(axis_name)
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    dims = tuple(a for a in names if isinstance(a, int))
    if not dims:
        return (), (_axis_name(name, axis_name) if names else None)
    if axis_index_groups is not None:
        raise ValueError(
            f"{name}: axis_index_groups apply to named axes only, and {axis_name!r} names "
            "dimensions by position"
        )
    named = tuple(a for a in names if not isinstance(a, int))
    return dims, (_axis_name(name, named) if named else None)


def _reduce_within(reduce, leaf, dims: tuple[int, ...], name: str):
    if not dims:
        return leaf
    return reduce(leaf, canonical_axes(dims, leaf.ndim, name))


def _reduction(name: str, prim: Primitive, reduce, prepare):
    """psum, pmax or pmin of a pytree: each leaf (as `prepare` makes it) reduced over the
    dimensions `axis_name` names by position, then over its named axes."""

    def collective(x: Any, axis_name: Hashable, *, axis_index_groups=None) -> Any:
        dims, named = _positional(name, axis_name, axis_index_groups)
        if not dims and named is None:
            return x
        groups = (
            None if named is None else _index_groups(name, named, axis_index_groups, equal=False)
        )

        def leaf_result(leaf):
            out = _reduce_within(reduce, prepare(leaf), dims, name)
            if named is None:
                return out
            return prim.bind(out, axis_name=named, axis_index_groups=groups)

        return tree_util.tree_map(leaf_result, x)

    collective.__name__ = collective.__qualname__ = name
    return collective


def _counted(leaf):
    """A leaf as psum adds it: booleans count as int32, as a sum of flags is a count."""
    leaf = asarray(leaf)
    if leaf.dtype == np.bool_:
        return elementwise.convert_element_type(leaf, np.int32)
    return leaf


psum = _reduction("psum", psum_p, reduce_sum, _counted)
psum.__doc__ = """The sum of `x` (an array or a pytree of arrays) over the lanes of `axis_name`,
    or over those of each lane's group of `axis_index_groups` (lists of positions along the
    axis); booleans are counted (int32). Ints in `axis_name` name dimensions of `x`, summed
    within each lane."""
pmax = _reduction("pmax", pmax_p, reduce_max, asarray)
pmax.__doc__ = "The maximum of `x` over the lanes of `axis_name` (as psum takes them)."
pmin = _reduction("pmin", pmin_p, reduce_min, asarray)
pmin.__doc__ = "The minimum of `x` over the lanes of `axis_name` (as psum takes them)."


def pmean(x: Any, axis_name: Hashable, *, axis_index_groups=None) -> Any:
    """The mean of `x` over the lanes of `axis_name` (of each lane's group of
    `axis_index_groups`; over the dimensions its ints name too); integers average to the
    default float."""
    dims, named = _positional("pmean", axis_name, axis_index_groups)
    groups = (
        None if named is None else _index_groups("pmean", named, axis_index_groups, equal=False)
    )
    if named is None:
        lanes = 1
    elif groups is None:
        lanes = _axis_size(named)
    elif len({len(group) for group in groups}) == 1:
        lanes = len(groups[0])
    else:  # each lane divides by the size of its own group
        lanes = psum_p.bind(asarray(np.int32(1)), axis_name=named, axis_index_groups=groups)

    def mean(leaf):
        leaf = _counted(leaf)
        total = psum(leaf, axis_name, axis_index_groups=axis_index_groups)
        if not dtypes.is_inexact(total.dtype):
            total = elementwise.convert_element_type(total, dtypes.default_float)
        within = math.prod(leaf.shape[d] for d in canonical_axes(dims, leaf.ndim, "pmean"))
        if isinstance(lanes, int):
            return elementwise.div(total, lanes * within)
        count = elementwise.mul(lanes, np.int32(within)) if within != 1 else lanes
        return elementwise.div(total, elementwise.convert_element_type(count, total.dtype))

    return tree_util.tree_map(mean, x)


# ---------------------------------------------------------------------------------------------
# axis_index

axis_index_p = _collective_primitive("axis_index")


@axis_index_p.def_abstract_eval
def _axis_index_abstract_eval(*, axis_name) -> ShapedArray:
    return ShapedArray((), dtypes.int32)


axis_index_p.def_weak_type(never_weak)
defjvp_zero(axis_index_p)
axis_index_p.not_applicable["transpose"] = "no operands"
axis_index_p.not_applicable["batch"] = "no operands: never batched"


@_def_axis_rule(axis_index_p)
def _axis_index_axis_rule(trace, values, dims, *, axis_name):
    """The lane's position in the product of the named axes: this axis's iota, scaled by the
    sizes of the names after it and offset by their indices and those of the names before."""
    prefix, suffix = _split_names(axis_name, trace.axis_name)
    index = shapes.iota(dtypes.int32, trace.axis_size)
    if suffix:
        index = elementwise.mul(index, _axis_size(suffix))
        index = elementwise.add(index, axis_index_p.bind(axis_name=suffix))
    if prefix:
        stride = trace.axis_size * _axis_size(suffix)
        index = elementwise.add(elementwise.mul(axis_index_p.bind(axis_name=prefix), stride), index)
    return index, 0


@_def_shard_rule(axis_index_p)
def _axis_index_shard_rule(frame, *, axis_name):
    return np.asarray(frame.index, np.int32)


def axis_size(axis_name: Hashable) -> int:
    """The number of lanes of the mapped axis `axis_name` (the product over a tuple of names):
    a Python int, since vmap and pmap know their sizes when they trace."""
    return _axis_size(_axis_name("axis_size", axis_name))


def axis_index(axis_name: Hashable) -> Any:
    """This lane's position (int32) along `axis_name`; row-major over a tuple of names."""
    return axis_index_p.bind(axis_name=_axis_name("axis_index", axis_name))


# ---------------------------------------------------------------------------------------------
# all_gather and psum_scatter (its transpose)

all_gather_p = _collective_primitive("all_gather")


@all_gather_p.def_abstract_eval
def _all_gather_abstract_eval(
    x: ShapedArray,
    *,
    axis_name,
    axis_index_groups,
    all_gather_dimension: int,
    axis_size: int,
    tiled: bool,
) -> ShapedArray:
    dim = all_gather_dimension
    shape = list(x.shape)
    if tiled:
        _check_axis("all_gather", "axis", dim, x.ndim, x.shape)
        shape[dim] *= axis_size
    else:
        _check_axis("all_gather", "axis", dim, x.ndim + 1, x.shape)
        shape.insert(dim, axis_size)
    return ShapedArray(tuple(shape), x.dtype)


def _all_gather_transpose(
    ct, x, *, axis_name, axis_index_groups, all_gather_dimension, axis_size, tiled
):
    return [
        psum_scatter_p.bind(
            ct,
            axis_name=axis_name,
            axis_index_groups=axis_index_groups,
            scatter_dimension=all_gather_dimension,
            axis_size=axis_size,
            tiled=tiled,
        )
    ]


deflinear(all_gather_p, _all_gather_transpose)


@all_gather_p.def_batch
def _all_gather_batch(values, dims, *, all_gather_dimension, tiled, **params):
    (x,), (dim,) = values, dims
    axis = all_gather_dimension
    if tiled:
        at, out_dim = axis + (axis >= dim), dim
    else:
        at, out_dim = (axis, dim + 1) if axis <= dim else (axis + 1, dim)
    out = all_gather_p.bind(x, all_gather_dimension=at, tiled=tiled, **params)
    return out, out_dim


@_def_axis_rule(all_gather_p)
def _all_gather_axis_rule(trace, values, dims, *, axis_name, all_gather_dimension, tiled, **_):
    """The batch axis becomes the gathered axis; other names gather around it, and the gathered
    axes (with the operand's axis, when tiled) merge in the order of the names."""
    (x,), (dim,) = values, dims
    axis = all_gather_dimension
    if dim is not_mapped:
        x, dim = broadcast_batch(x, trace.axis_size, axis), axis
    out = moveaxis(x, dim, axis)
    prefix, suffix = _split_names(axis_name, trace.axis_name)
    for names, at in ((suffix, axis + 1), (prefix, axis)):
        if names:
            out = all_gather_p.bind(
                out,
                axis_name=names,
                axis_index_groups=None,
                all_gather_dimension=at,
                axis_size=_axis_size(names),
                tiled=False,
            )
    return _merge_axes(out, axis, 1 + bool(prefix) + bool(suffix) + tiled), not_mapped


@_def_shard_rule(all_gather_p)
def _all_gather_shard_rule(
    frame, x, *, axis_name, axis_index_groups, all_gather_dimension, axis_size, tiled
):
    buffers = frame.all_gather(x, "all_gather")
    join = np.concatenate if tiled else np.stack
    return join(buffers, axis=all_gather_dimension)


def all_gather(
    x: Any,
    axis_name: Hashable,
    *,
    axis_index_groups=None,
    axis: int = 0,
    tiled: bool = False,
    to: str = "varying",
) -> Any:
    """Every lane receives the lanes' `x` stacked along a new axis `axis` (concatenated along
    `axis` when `tiled`); with `axis_index_groups`, those of its group's lanes, in the group's
    order.

    `to` names the result's kind, "varying" or "invarying" (the same on every lane). Values
    carry no varying axes in funcgrad's types (shard_map's `check_vma` knows that an
    all_gather's result is the same along its axes), so both compute the same."""
    if to not in ("varying", "invarying"):
        raise ValueError(
            f"all_gather: to must be 'varying' or 'invarying', got {to!r} (funcgrad has no "
            "explicit sharding, so no 'reduced' results)"
        )
    if to == "invarying" and axis_index_groups is not None:
        raise NotImplementedError("all_gather: to='invarying' takes no axis_index_groups")
    axis_name = _axis_name("all_gather", axis_name)
    groups = _index_groups("all_gather", axis_name, axis_index_groups, equal=True)
    size = _axis_size(axis_name) if groups is None else len(groups[0])

    def gather_leaf(leaf):
        leaf = asarray(leaf)
        rank = leaf.ndim if tiled else leaf.ndim + 1
        _check_axis("all_gather", "axis", axis + rank if axis < 0 else axis, rank, leaf.shape)
        return all_gather_p.bind(
            leaf,
            axis_name=axis_name,
            axis_index_groups=groups,
            all_gather_dimension=axis % rank,
            axis_size=size,
            tiled=bool(tiled),
        )

    return tree_util.tree_map(gather_leaf, x)


psum_scatter_p = _collective_primitive("psum_scatter")


@psum_scatter_p.def_abstract_eval
def _psum_scatter_abstract_eval(
    x: ShapedArray,
    *,
    axis_name,
    axis_index_groups,
    scatter_dimension: int,
    axis_size: int,
    tiled: bool,
) -> ShapedArray:
    check_dtype_class("psum_scatter", x, NUMERIC)
    dim = scatter_dimension
    _check_axis("psum_scatter", "scatter_dimension", dim, x.ndim, x.shape)
    shape = list(x.shape)
    if tiled:
        if shape[dim] % axis_size:
            raise ValueError(
                f"psum_scatter: scatter_dimension {dim} of the operand of shape {x.shape} must "
                f"be a multiple of the axis size {axis_size} (tiled)"
            )
        shape[dim] //= axis_size
    else:
        if shape[dim] != axis_size:
            raise ValueError(
                f"psum_scatter: scatter_dimension {dim} of the operand of shape {x.shape} must "
                f"have the axis size {axis_size}"
            )
        del shape[dim]
    return ShapedArray(tuple(shape), x.dtype)


def _psum_scatter_transpose(
    ct, x, *, axis_name, axis_index_groups, scatter_dimension, axis_size, tiled
):
    return [
        all_gather_p.bind(
            ct,
            axis_name=axis_name,
            axis_index_groups=axis_index_groups,
            all_gather_dimension=scatter_dimension,
            axis_size=axis_size,
            tiled=tiled,
        )
    ]


deflinear(psum_scatter_p, _psum_scatter_transpose)


@psum_scatter_p.def_batch
def _psum_scatter_batch(values, dims, *, scatter_dimension, tiled, **params):
    (x,), (dim,) = values, dims
    at = scatter_dimension + (scatter_dimension >= dim)
    out_dim = dim - (at < dim and not tiled)
    return psum_scatter_p.bind(x, scatter_dimension=at, tiled=tiled, **params), out_dim


@_def_axis_rule(psum_scatter_p)
def _psum_scatter_axis_rule(trace, values, dims, *, axis_name, scatter_dimension, **params):
    """The sum over the batch; lane i's block of the scattered axis is lane i's result, so
    that axis simply becomes the batch axis (split into lanes first when tiled)."""
    (x,), (dim,) = values, dims
    if len(_names(axis_name)) > 1:
        return _psum_scatter_by_slicing(trace, x, dim, axis_name, scatter_dimension, **params)
    size = trace.axis_size
    total = elementwise.mul(x, size) if dim is not_mapped else reduce_sum(x, (dim,))
    if params["tiled"]:
        shape = core.get_aval(total).shape
        d = scatter_dimension
        total = shapes.reshape(total, shape[:d] + (size, shape[d] // size) + shape[d + 1 :])
    return total, scatter_dimension


def _psum_scatter_by_slicing(
    trace, x, dim, axis_name, scatter_dimension, axis_size, tiled, axis_index_groups
):
    """Over several axes: psum over all of them, then each lane slices out its own block."""
    with core.set_current_trace(trace):
        value = x if dim is not_mapped else BatchTracer(trace, x, dim)
        total = psum_p.bind(value, axis_name=axis_name, axis_index_groups=None)
        block = core.get_aval(total).shape[scatter_dimension] // axis_size
        start = elementwise.mul(axis_index_p.bind(axis_name=axis_name), block)
        out = dynamic_slice_in_dim(total, start, block, scatter_dimension)
        if not tiled:
            out = shapes.squeeze(out, (scatter_dimension,))
        return trace.value_and_dim(out)


@_def_shard_rule(psum_scatter_p)
def _psum_scatter_shard_rule(
    frame, x, *, axis_name, axis_index_groups, scatter_dimension, axis_size, tiled
):
    total = np.asarray(functools.reduce(np.add, frame.all_gather(x, "psum_scatter")), x.dtype)
    if not tiled:
        return np.take(total, frame.index, axis=scatter_dimension)
    block = total.shape[scatter_dimension] // axis_size
    start = frame.index * block
    return np.take(total, np.arange(start, start + block), axis=scatter_dimension)


def psum_scatter(
    x: Any,
    axis_name: Hashable,
    *,
    scatter_dimension: int = 0,
    axis_index_groups=None,
    tiled: bool = False,
) -> Any:
    """psum, of which each lane keeps only its block along `scatter_dimension`: lane i gets
    index i of that axis (of size the axis size), or the i-th of equal blocks when `tiled`.
    With `axis_index_groups`, the sum is over each lane's group, and i its place there."""
    axis_name = _axis_name("psum_scatter", axis_name)
    groups = _index_groups("psum_scatter", axis_name, axis_index_groups, equal=True)
    size = _axis_size(axis_name) if groups is None else len(groups[0])

    def scatter_leaf(leaf):
        leaf = asarray(leaf)
        dim = scatter_dimension + leaf.ndim if scatter_dimension < 0 else scatter_dimension
        return psum_scatter_p.bind(
            leaf,
            axis_name=axis_name,
            axis_index_groups=groups,
            scatter_dimension=dim,
            axis_size=size,
            tiled=bool(tiled),
        )

    return tree_util.tree_map(scatter_leaf, x)


# ---------------------------------------------------------------------------------------------
# ppermute

ppermute_p = _collective_primitive("ppermute")


def _check_perm(perm: tuple, axis_size: int | None = None) -> None:
    sources = [s for s, _ in perm]
    destinations = [d for _, d in perm]
    if len(set(sources)) != len(sources) or len(set(destinations)) != len(destinations):
        raise ValueError(
            f"ppermute: perm {perm} must send from each source and to each destination at most once"
        )
    limit = math.inf if axis_size is None else axis_size
    if any(not 0 <= i < limit for i in sources + destinations):
        raise ValueError(
            f"ppermute: perm {perm} names lanes outside the axis of size {axis_size}"
            if axis_size is not None
            else f"ppermute: perm {perm} names negative lanes"
        )


@ppermute_p.def_abstract_eval
def _ppermute_abstract_eval(x: ShapedArray, *, axis_name, perm) -> ShapedArray:
    _check_perm(perm)
    return ShapedArray(x.shape, x.dtype)


def _ppermute_transpose(ct, x, *, axis_name, perm):
    inverse = tuple((d, s) for s, d in perm)
    return [ppermute_p.bind(ct, axis_name=axis_name, perm=inverse)]


deflinear(ppermute_p, _ppermute_transpose)


@ppermute_p.def_batch
def _ppermute_batch(values, dims, *, axis_name, perm):
    return ppermute_p.bind(values[0], axis_name=axis_name, perm=perm), dims[0]


@_def_axis_rule(ppermute_p)
def _ppermute_axis_rule(trace, values, dims, *, axis_name, perm):
    """One gather along the batch axis brings each destination lane its source's value; lanes
    that no pair reaches get zeros."""
    _single_name("ppermute", axis_name)
    (x,), (dim,) = values, dims
    size = trace.axis_size
    _check_perm(perm, size)
    source_of = dict((d, s) for s, d in perm)
    reached = np.array([d in source_of for d in range(size)])
    if dim is not_mapped:
        if reached.all():
            return x, not_mapped
        out, dim = broadcast_batch(x, size, 0), 0
    else:
        shape = core.get_aval(x).shape
        indices = np.array([[source_of.get(d, 0)] for d in range(size)], np.int32)
        dn = GatherDimensionNumbers(
            offset_dims=tuple(k for k in range(len(shape)) if k != dim),
            collapsed_slice_dims=(dim,),
            start_index_map=(dim,),
        )
        slice_sizes = shape[:dim] + (1,) + shape[dim + 1 :]
        out = gather(x, indices, dn, slice_sizes, indices_are_sorted=False, unique_indices=False)
    if not reached.all():
        shape = core.get_aval(out).shape
        mask = shapes.broadcast_in_dim(reached, shape, (dim,))
        out = elementwise.select(mask, out, shapes.full(shape, 0, out.dtype))
    return out, dim


@_def_shard_rule(ppermute_p)
def _ppermute_shard_rule(frame, x, *, axis_name, perm):
    buffers = frame.all_gather(x, "ppermute")
    source_of = dict((d, s) for s, d in perm)
    if frame.index not in source_of:
        return np.zeros_like(x)
    return buffers[source_of[frame.index]]


def ppermute(x: Any, axis_name: Hashable, perm: Sequence[tuple[int, int]]) -> Any:
    """Send each lane's `x` to other lanes: `perm` holds (source, destination) pairs, and a
    lane that is no pair's destination receives zeros."""
    axis_name = _axis_name("ppermute", axis_name)
    perm = tuple((int(s), int(d)) for s, d in perm)
    _check_perm(perm, _axis_size(axis_name))
    return tree_util.tree_map(
        lambda leaf: ppermute_p.bind(asarray(leaf), axis_name=axis_name, perm=perm), x
    )


# ---------------------------------------------------------------------------------------------
# all_to_all

all_to_all_p = _collective_primitive("all_to_all")


@all_to_all_p.def_abstract_eval
def _all_to_all_abstract_eval(
    x: ShapedArray,
    *,
    axis_name,
    axis_index_groups,
    split_axis: int,
    concat_axis: int,
    axis_size: int,
    tiled: bool,
) -> ShapedArray:
    _check_axis("all_to_all", "split_axis", split_axis, x.ndim, x.shape)
    _check_axis("all_to_all", "concat_axis", concat_axis, x.ndim, x.shape)
    shape = list(x.shape)
    if tiled:
        if shape[split_axis] % axis_size:
            raise ValueError(
                f"all_to_all: split_axis {split_axis} of the operand of shape {x.shape} must be "
                f"a multiple of the axis size {axis_size} (tiled)"
            )
        shape[split_axis] //= axis_size
        shape[concat_axis] *= axis_size
    else:
        if shape[split_axis] != axis_size:
            raise ValueError(
                f"all_to_all: split_axis {split_axis} of the operand of shape {x.shape} must "
                f"have the axis size {axis_size}"
            )
        del shape[split_axis]
        shape.insert(concat_axis, axis_size)
    return ShapedArray(tuple(shape), x.dtype)


def _all_to_all_transpose(ct, x, *, split_axis, concat_axis, **params):
    # Block j of lane i went to lane j as its block i: sending the blocks back is the same
    # exchange with the split and concatenated axes swapped.
    return [all_to_all_p.bind(ct, split_axis=concat_axis, concat_axis=split_axis, **params)]


deflinear(all_to_all_p, _all_to_all_transpose)


@all_to_all_p.def_batch
def _all_to_all_batch(values, dims, *, split_axis, concat_axis, **params):
    x = moveaxis(values[0], dims[0], 0)
    out = all_to_all_p.bind(x, split_axis=split_axis + 1, concat_axis=concat_axis + 1, **params)
    return out, 0


@_def_axis_rule(all_to_all_p)
def _all_to_all_axis_rule(trace, values, dims, *, axis_name, split_axis, concat_axis, tiled, **_):
    """A transpose between the batch axis and the split axis: lane j's block i lands in lane i
    at position j of the concatenated axis."""
    _single_name("all_to_all", axis_name)
    (x,), (dim,) = values, dims
    size = trace.axis_size
    if dim is not_mapped:
        x, dim = broadcast_batch(x, size, 0), 0
    x = moveaxis(x, dim, 0)  # (source lane j, *lane shape)
    lane = core.get_aval(x).shape[1:]
    rank = len(lane)
    if tiled:
        # Split the split axis into (destination lane i, block); `rest` locates every lane
        # axis, the split axis now meaning the block.
        block = lane[split_axis] // size
        x = shapes.reshape(x, (size,) + lane[:split_axis] + (size, block) + lane[split_axis + 1 :])
        rest = [1 + t + (t >= split_axis) for t in range(rank)]
    else:
        rest = [1 + t for t in range(rank) if t != split_axis]
    destination = 1 + split_axis
    out = shapes.transpose(x, [destination] + rest[:concat_axis] + [0] + rest[concat_axis:])
    if tiled:
        out = _merge_axes(out, 1 + concat_axis, 2)
    return out, 0


@_def_shard_rule(all_to_all_p)
def _all_to_all_shard_rule(
    frame, x, *, axis_name, axis_index_groups, split_axis, concat_axis, axis_size, tiled
):
    """This device's block of every device's buffer, joined along the concatenated axis."""
    buffers = frame.all_gather(x, "all_to_all")
    if tiled:
        block = x.shape[split_axis] // axis_size
        mine = np.arange(frame.index * block, (frame.index + 1) * block)
        return np.concatenate([np.take(b, mine, axis=split_axis) for b in buffers], concat_axis)
    return np.stack([np.take(b, frame.index, axis=split_axis) for b in buffers], concat_axis)


def all_to_all(
    x: Any,
    axis_name: Hashable,
    split_axis: int,
    concat_axis: int,
    *,
    axis_index_groups=None,
    tiled: bool = False,
) -> Any:
    """Lane i sends block j of `x` (split along `split_axis` into one block per lane) to lane
    j, and receives the lanes' blocks along `concat_axis`: a new axis of the lanes' size at
    `concat_axis` replacing `split_axis`, or, when `tiled`, concatenated along it. With
    `axis_index_groups`, the lanes of each group exchange among themselves."""
    axis_name = _axis_name("all_to_all", axis_name)
    groups = _index_groups("all_to_all", axis_name, axis_index_groups, equal=True)
    size = _axis_size(axis_name) if groups is None else len(groups[0])

    def exchange(leaf):
        leaf = asarray(leaf)
        split, concat = (a + leaf.ndim if a < 0 else a for a in (split_axis, concat_axis))
        return all_to_all_p.bind(
            leaf,
            axis_name=axis_name,
            axis_index_groups=groups,
            split_axis=split,
            concat_axis=concat,
            axis_size=size,
            tiled=bool(tiled),
        )

    return tree_util.tree_map(exchange, x)


# ---------------------------------------------------------------------------------------------
# pbroadcast

pbroadcast_p = _collective_primitive("pbroadcast")


@pbroadcast_p.def_abstract_eval
def _pbroadcast_abstract_eval(x: ShapedArray, *, axis_name, source: int) -> ShapedArray:
    return ShapedArray(x.shape, x.dtype)


def _pbroadcast_transpose(ct, x, *, axis_name, source):
    # Every lane's output is lane `source`'s input, so that input's cotangent is the sum of
    # the output cotangents over the lanes, and the other lanes' inputs get none.
    total = psum_p.bind(ct, axis_name=axis_name, axis_index_groups=None)
    is_source = elementwise.eq(axis_index_p.bind(axis_name=axis_name), np.int32(source))
    shape = core.get_aval(total).shape
    chosen = shapes.broadcast_in_dim(is_source, shape, ())
    return [elementwise.select(chosen, total, shapes.full(shape, 0, total.dtype))]


deflinear(pbroadcast_p, _pbroadcast_transpose)


@pbroadcast_p.def_batch
def _pbroadcast_batch(values, dims, **params):
    return pbroadcast_p.bind(values[0], **params), dims[0]


@_def_axis_rule(pbroadcast_p)
def _pbroadcast_axis_rule(trace, values, dims, *, axis_name, source):
    """The lanes gathered over every name of the axis, and the source's taken: every lane's
    result is the same (unbatched)."""
    (x,), (dim,) = values, dims
    with core.set_current_trace(trace):
        value = x if dim is not_mapped else BatchTracer(trace, x, dim)
        gathered = all_gather_p.bind(
            value,
            axis_name=axis_name,
            axis_index_groups=None,
            all_gather_dimension=0,
            axis_size=_axis_size(axis_name),
            tiled=False,
        )
        return trace.value_and_dim(shapes.index_in_dim(gathered, source, 0, keepdims=False))


@_def_shard_rule(pbroadcast_p)
def _pbroadcast_shard_rule(frame, x, *, axis_name, source):
    return frame.all_gather(x, "pbroadcast")[source]


def pbroadcast(x: Any, axis_name: Hashable, source: int) -> Any:
    """Every lane receives lane `source`'s `x`: a broadcast from one lane of `axis_name`
    (row-major position over a tuple of names)."""
    axis_name = _axis_name("pbroadcast", axis_name)
    size = _axis_size(axis_name)
    source = operator.index(source)
    if not 0 <= source < size:
        raise ValueError(
            f"pbroadcast: source {source} is not a lane of axis {axis_name!r} (size {size})"
        )
    return tree_util.tree_map(
        lambda leaf: pbroadcast_p.bind(asarray(leaf), axis_name=axis_name, source=source), x
    )


# ---------------------------------------------------------------------------------------------
# pcast

PCAST_TARGETS = ("varying", "reduced", "unreduced")


def pcast(x: Any, axis_name: Hashable, *, to: str) -> Any:
    """`x` unchanged, cast to a value that may differ along `axis_name` (`to="varying"`).

    Programs whose values carry the axes they vary along in their types need the cast where a
    value the same on every device meets one that differs (a loop's carry, say). funcgrad's
    values carry no such axes: shard_map's `check_vma` follows them through the program by
    itself, and a value cast is still the same value everywhere. So the cast checks its
    names and changes nothing; its derivative is the identity too, as the cotangents of a
    value the same on every device are summed over the devices where shard_map takes it."""
    if isinstance(axis_name, set | frozenset):
        raise TypeError(f"pcast: axis_name must be a name or a tuple of names, got {axis_name!r}")
    if to not in PCAST_TARGETS:
        raise ValueError(f"pcast: to must be one of {PCAST_TARGETS}, got {to!r}")
    if to != "varying":
        raise NotImplementedError(
            f"pcast to {to!r} needs mesh axes whose shardings are part of the values' types "
            "(explicit sharding), which funcgrad does not have; only to='varying' is supported"
        )
    if axis_name == ():
        return x
    _axis_name("pcast", axis_name)
    return tree_util.tree_map(asarray, x)


def pshuffle(x: Any, axis_name: Hashable, perm: Sequence[int]) -> Any:
    """ppermute with the permutation given by sources: lane i receives lane perm[i]'s `x`.
    perm must name every lane of the axis once."""
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(perm))):
        raise ValueError(f"pshuffle: perm {perm} is not a permutation of 0..{len(perm) - 1}")
    return ppermute(x, axis_name, [(source, i) for i, source in enumerate(perm)])


def pswapaxes(x: Any, axis_name: Hashable, axis: int, *, axis_index_groups=None) -> Any:
    """The mapped axis `axis_name` exchanged with the unmapped `axis` of x (whose size must be
    the number of lanes): all_to_all splitting and concatenating along `axis`."""
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)
