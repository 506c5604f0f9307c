"""Batching: the interpretation behind vmap.

A `BatchTracer` holds a value with one extra axis, at `batch_dim`, that vmap maps over. Each
primitive's `batch` rule takes the values and their batch dims (None for a value that is not
batched) and returns the output and its batch dim, computing all lanes at once: there is no
loop over the batch. Unbatched values stay unbatched: a rule sees `None` and must not
broadcast such an operand unless the computation needs it.

A trace carries its axis name and size, so collectives (`psum` over an axis name, ...) bound
inside vmap reduce over that axis; collectives over another axis name pass the batch through.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from funcgrad import core
from funcgrad.core import ShapedArray
from funcgrad.ir import ClosedJaxpr, Jaxpr

not_mapped = None


class BatchTracer(core.Tracer):
    __slots__ = ("val", "batch_dim")

    def __init__(self, trace: BatchTrace, val, batch_dim: int):
        self._trace = trace
        self.val = val
        self.batch_dim = batch_dim

    @property
    def aval(self) -> ShapedArray:
        aval = core.get_aval(self.val)
        shape = aval.shape[: self.batch_dim] + aval.shape[self.batch_dim + 1 :]
        return ShapedArray(shape, aval.dtype, aval.weak_type)

    def to_concrete_value(self):
        raise core.ConcretizationTypeError(
            self, "A value batched by vmap has one value per lane, not one concrete value."
        )


class BatchTrace(core.Trace):
    def __init__(
        self, parent: core.Trace, axis_size: int, axis_name: Any = None, debug_info: str = ""
    ):
        super().__init__(parent, debug_info)
        self.axis_size = axis_size
        self.axis_name = axis_name

    def value_and_dim(self, x):
        if type(x) is BatchTracer and x._trace is self:
            return x.val, x.batch_dim
        if isinstance(x, core.Tracer):
            x.check_alive()
        return x, not_mapped

    def process_primitive(self, primitive, args, params):
        values, dims = zip(*map(self.value_and_dim, args)) if args else ((), ())
        collective = collective_axis_rules.get(primitive)
        if collective is not None and self.axis_name is not None:
            if self.axis_name in _axis_names(params):
                with core.set_current_trace(self.parent):
                    out, out_dim = collective(self, list(values), list(dims), **params)
                return self.wrap(out, out_dim, primitive.multiple_results)
        if all(d is not_mapped for d in dims) and not self._collects_over_own_axis(params):
            with core.set_current_trace(self.parent):
                return primitive.bind(*values, **params)
        if primitive.batch is None:
            raise NotImplementedError(
                f"batching rule for primitive '{primitive.name}' is not implemented"
            )
        previous, _rule_context.trace = _rule_context.trace, self
        try:
            with core.set_current_trace(self.parent):
                out, out_dim = primitive.batch(list(values), list(dims), **params)
        finally:
            _rule_context.trace = previous
        return self.wrap(out, out_dim, primitive.multiple_results)

    def _collects_over_own_axis(self, params: dict) -> bool:
        """Whether programs in `params` hold a collective over this trace's axis: such a
        primitive is batched even when no operand is, since the collective's result depends on
        the lanes (a psum of an unbatched value is the value times the axis size)."""
        if self.axis_name is None:
            return False
        return any(_collects_over(jaxpr, self.axis_name) for jaxpr in _programs(params))

    def wrap(self, out, out_dim, multiple_results: bool):
        if multiple_results:
            return [self._wrap_one(o, d) for o, d in zip(out, out_dim)]
        return self._wrap_one(out, out_dim)

    def _wrap_one(self, value, dim):
        return value if dim is not_mapped else BatchTracer(self, value, dim)


class _RuleContext(threading.local):
    trace: BatchTrace | None = None


_rule_context = _RuleContext()


def current_axis_name() -> Any:
    """The axis name of the vmap whose batching rule is running (None outside one).

    Higher-order primitives batch the programs they carry under this name, so collectives
    inside a jit, checkpoint, cond or loop body reduce over the vmap's axis.
    """
    trace = _rule_context.trace
    return None if trace is None else trace.axis_name


def _axis_names(params: dict) -> tuple:
    names = params["axis_name"]
    return names if isinstance(names, tuple) else (names,)


def _programs(params: dict):
    for value in params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, Jaxpr):
                yield item


def _collects_over(jaxpr: Jaxpr, axis_name: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive in collective_axis_rules and axis_name in _axis_names(eqn.params):
            return True
        if any(_collects_over(inner, axis_name) for inner in _programs(eqn.params)):
            return True
    return False


_CURRENT = object()  # default axis name: the running rule's vmap's

# Rules that reduce a collective over the trace's own axis: rule(trace, values, dims, **params).
collective_axis_rules: dict[core.Primitive, Callable] = {}


# ---------------------------------------------------------------------------------------------
# Helpers for writing batching rules


def moveaxis(x, source: int, destination: int):
    """`x` with axis `source` moved to `destination` (one transpose, or nothing)."""
    if source == destination:
        return x
    from funcgrad.lax.shapes import transpose

    ndim = core.get_aval(x).ndim
    perm = [d for d in range(ndim) if d != source]
    perm.insert(destination, source)
    return transpose(x, tuple(perm))


def _broadcast_in_dim(x, shape, dims):
    from funcgrad.lax.shapes import broadcast_in_dim

    return broadcast_in_dim(x, shape, dims)


def broadcast_batch(x, size: int, axis: int):
    """An unbatched `x` given a batch axis of `size` at `axis` (a broadcast, materialized)."""
    aval = core.get_aval(x)
    shape = aval.shape[:axis] + (size,) + aval.shape[axis:]
    return _broadcast_in_dim(x, shape, tuple(d for d in range(len(shape)) if d != axis))


def bdim_at_front(x, dim: int | None, size: int):
    """`x` with its batch axis first, broadcasting an unbatched `x`."""
    if dim is not_mapped:
        return broadcast_batch(x, size, 0)
    return moveaxis(x, dim, 0)


def batch_size(values: Sequence, dims: Sequence) -> int:
    """The size of the batched operands' batch axis; with none batched (a program holding a
    collective over the vmap's axis), the running vmap's size."""
    for value, dim in zip(values, dims):
        if dim is not not_mapped:
            return core.get_aval(value).shape[dim]
    if _rule_context.trace is not None:
        return _rule_context.trace.axis_size
    raise ValueError("no operand is batched")


def defvectorized(primitive: core.Primitive) -> None:
    """One-operand elementwise primitives: batching is applying the primitive as it is."""

    def rule(values, dims, **params):
        return primitive.bind(*values, **params), dims[0]

    primitive.def_batch(rule)


def defbroadcasting(primitive: core.Primitive, scalar_operands: Sequence[int] | None = None):
    """Elementwise primitives of several operands, where rank-0 operands broadcast.

    `scalar_operands` lists the operands that may be rank-0 (select_n's selector, clamp's
    bounds); by default any may. When the batched operands share one shape and batch axis and
    every unbatched operand may stay rank-0, the primitive applies as it is. Otherwise batched
    operands move their axis to the front, per-lane scalars are broadcast to the lane shape,
    and unbatched operands are broadcast along the batch axis, as the computation needs.
    """

    def may_be_scalar(i: int) -> bool:
        return scalar_operands is None or i in scalar_operands

    def rule(values, dims, **params):
        avals = [core.get_aval(v) for v in values]
        batched = [(a, d) for a, d in zip(avals, dims) if d is not not_mapped]
        first_aval, first_dim = batched[0]
        if all(a.shape == first_aval.shape and d == first_dim for a, d in batched) and all(
            a.ndim == 0 and may_be_scalar(i)
            for i, (a, d) in enumerate(zip(avals, dims))
            if d is not_mapped
        ):
            return primitive.bind(*values, **params), first_dim
        size = first_aval.shape[first_dim]
        lane_shape = _lane_shape(avals, dims)
        full_shape = (size,) + lane_shape
        moved = []
        for i, (value, aval, dim) in enumerate(zip(values, avals, dims)):
            if dim is not not_mapped:
                value = moveaxis(value, dim, 0)
                if aval.ndim == 1 and lane_shape:
                    value = _broadcast_in_dim(value, full_shape, (0,))
            elif aval.ndim:
                value = broadcast_batch(value, size, 0)
            elif not may_be_scalar(i):
                value = _broadcast_in_dim(value, full_shape, ())
            moved.append(value)
        return primitive.bind(*moved, **params), 0

    primitive.def_batch(rule)


def _lane_shape(avals, dims) -> tuple[int, ...]:
    """The shape one lane computes: that of the operands that are not per-lane scalars."""
    for aval, dim in zip(avals, dims):
        lane = aval.shape[:dim] + aval.shape[dim + 1 :] if dim is not not_mapped else aval.shape
        if lane:
            return lane
    return ()


def batch_jaxpr(closed, in_batched: Sequence[bool], axis_size: int, axis_name: Any = _CURRENT):
    """`closed` vmapped over axis 0 of the inputs marked batched; every output batched at 0.

    Higher-order primitives batch the programs they carry with it.
    """
    batched, _ = batch_jaxpr_outputs(closed, in_batched, axis_size, axis_name, instantiate=True)
    return batched


def batch_jaxpr_outputs(
    closed,
    in_batched: Sequence[bool],
    axis_size: int,
    axis_name: Any = _CURRENT,
    instantiate: bool = False,
):
    """Like `batch_jaxpr`, but outputs that do not depend on batched inputs stay unbatched
    (unless `instantiate`); returns the jaxpr and which outputs are batched (at axis 0).

    The axis name defaults to that of the vmap whose rule is running."""
    if axis_name is _CURRENT:
        axis_name = current_axis_name()
    from funcgrad.interpreters.staging import trace_to_jaxpr
    from funcgrad.ir import eval_jaxpr

    in_avals = [
        ShapedArray((axis_size,) + a.shape, a.dtype, a.weak_type) if batched else a
        for a, batched in zip(closed.in_avals, in_batched)
    ]
    out_batched: list[bool] = []

    def batched_fun(*args):
        trace = BatchTrace(core.current_trace(), axis_size, axis_name, "vmap of a jaxpr")
        inputs = [BatchTracer(trace, x, 0) if b else x for x, b in zip(args, in_batched)]
        try:
            with core.set_current_trace(trace):
                outs = eval_jaxpr(closed.jaxpr, closed.consts, *inputs)
            pairs = [trace.value_and_dim(o) for o in outs]
        finally:
            trace.alive = False
        out_batched.extend(instantiate or dim is not not_mapped for _, dim in pairs)
        return [
            bdim_at_front(value, dim, axis_size) if batched else value
            for (value, dim), batched in zip(pairs, out_batched)
        ]

    batched, _ = trace_to_jaxpr(batched_fun, in_avals, "vmap of a jaxpr")
    return batched, out_batched
