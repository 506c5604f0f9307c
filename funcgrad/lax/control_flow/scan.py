"""scan, map, fori_loop and associative_scan.

`scan_p` carries one program, the loop body `(consts, carry, x) -> (carry, y)`, and its
operands are `(*consts, *init_carry, *xs)`: each iteration reads one slice of every xs along
its leading axis and writes one slice of every ys. Because the trip count is static, reverse
mode can store what the backward pass needs per iteration: partial evaluation splits the body
into a known scan, which also emits the residuals as extra stacked ys, and an unknown scan
that reads them back as extra xs; transposing that unknown scan runs the transposed body in
the opposite direction. `associative_scan` is written in lax ops and needs no primitive.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.array import Array
from funcgrad.compiler import passes
from funcgrad.config import config
from funcgrad.core import Primitive, ShapedArray
from funcgrad.errors import ConcretizationTypeError
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import (
    UndefinedPrimal,
    Zero,
    add_tangents,
    backward_pass,
    instantiate,
    is_undefined,
    jvp_jaxpr,
    tangent_aval,
    zeros_like_aval,
)
from funcgrad.interpreters.partial_eval import (
    PartialEvalTrace,
    partial_eval_jaxpr,
    split_jaxpr,
    unknown_outputs,
)
from funcgrad.interpreters.staging import StagingTrace, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow.common import (
    avals_of,
    check_callable,
    promote_weak_carry,
    stage,
)
from funcgrad.lax.elementwise import add, convert_element_type_p, lt
from funcgrad.lax.shapes import (
    concatenate,
    expand_dims,
    index_in_dim,
    iota,
    reshape,
    rev,
    slice_in_dim,
)

__all__ = ["scan", "map", "fori_loop", "associative_scan"]


# ---------------------------------------------------------------------------------------------
# The primitive

scan_p = Primitive("scan", multiple_results=True, higher_order=True)


def _split3(items: Sequence, first: int, second: int) -> tuple[list, list, list]:
    items = list(items)
    return items[:first], items[first : first + second], items[first + second :]


def _unstacked(aval: ShapedArray) -> ShapedArray:
    return aval.update(shape=aval.shape[1:])


def _stacked(aval: ShapedArray, length: int) -> ShapedArray:
    return aval.update(shape=(length, *aval.shape))


def _differ(a: ShapedArray, b: ShapedArray) -> bool:
    return a.shape != b.shape or a.dtype != b.dtype


@scan_p.def_abstract_eval
def _scan_abstract_eval(*avals, jaxpr, num_consts, num_carry, length, reverse, unroll):
    if len(avals) != len(jaxpr.in_avals):
        raise TypeError(
            f"scan: the body takes {len(jaxpr.in_avals)} inputs but the scan has "
            f"{len(avals)} operands"
        )
    consts, init, xs = _split3(avals, num_consts, num_carry)
    for x in xs:
        if x.ndim == 0 or x.shape[0] != length:
            raise TypeError(
                f"scan: every xs operand needs a leading axis of size length={length}, got "
                f"{x.str_short()}"
            )
    operand_types = consts + init + [_unstacked(x) for x in xs]
    for i, (operand, body_in) in enumerate(zip(operand_types, jaxpr.in_avals)):
        if _differ(operand, body_in):
            raise TypeError(
                f"scan: body input {i} is {body_in.str_short()} but the operand gives "
                f"{operand.str_short()}"
            )
    carry_out, ys = jaxpr.out_avals[:num_carry], jaxpr.out_avals[num_carry:]
    for i, (a, b) in enumerate(zip(init, carry_out)):
        if _differ(a, b):
            raise TypeError(
                f"scan: carry {i} enters the body as {a.str_short()} and leaves it as "
                f"{b.str_short()}"
            )
    return list(init) + [_stacked(y, length) for y in ys]


@scan_p.def_weak_type
def _scan_weak_type(weak_flags, *, jaxpr, num_consts, num_carry, **params) -> list[bool]:
    # The carry keeps the type it entered with; the ys have the body's output types.
    carry = list(weak_flags[num_consts : num_consts + num_carry])
    return carry + [a.weak_type for a in jaxpr.out_avals[num_carry:]]


@scan_p.def_impl
def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, unroll):
    """The reference backend: a Python loop over the iterations (unroll does not apply)."""
    consts, carry, xs = _split3(args, num_consts, num_carry)
    body_in = jaxpr.in_avals
    carry_weak = [a.weak_type for a in body_in[num_consts : num_consts + num_carry]]
    x_weak = [a.weak_type for a in body_in[num_consts + num_carry :]]
    y_avals = jaxpr.out_avals[num_carry:]
    ys = [np.empty((length, *a.shape), a.dtype) for a in y_avals]
    for i in reversed(range(length)) if reverse else range(length):
        x_slices = [Array(x._value[i], weak) for x, weak in zip(xs, x_weak)]
        outs = eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *consts, *carry, *x_slices)
        carry = [Array(c._value, weak) for c, weak in zip(outs[:num_carry], carry_weak)]
        for y, out in zip(ys, outs[num_carry:]):
            y[i] = out._value
    init = args[num_consts : num_consts + num_carry]
    return [Array(c._value, a.weak_type) for c, a in zip(carry, init)] + [
        Array(y, a.weak_type) for y, a in zip(ys, y_avals)
    ]


# ---------------------------------------------------------------------------------------------
# Forward mode


@scan_p.def_jvp
def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse, unroll):
    nonzero = [type(t) is not Zero for t in tangents]
    const_nz, init_nz, xs_nz = _split3(nonzero, num_consts, num_carry)
    # A carry's tangent is nonzero if it starts so or if some iteration makes it so.
    carry_nz = init_nz
    while True:
        jvp_closed, out_nz = jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz)
        grown = [a or b for a, b in zip(carry_nz, out_nz[:num_carry])]
        if grown == carry_nz:
            break
        carry_nz = grown
    body = _jvp_body(jaxpr, jvp_closed, out_nz, const_nz, carry_nz, xs_nz, num_consts, num_carry)
    consts, init, xs = _split3(primals, num_consts, num_carry)
    const_t, init_t, xs_t = _split3(tangents, num_consts, num_carry)
    outs = scan_p.bind(
        *consts,
        *[t for t, nz in zip(const_t, const_nz) if nz],
        *init,
        *[instantiate(t) for t, nz in zip(init_t, carry_nz) if nz],
        *xs,
        *[t for t, nz in zip(xs_t, xs_nz) if nz],
        jaxpr=body,
        num_consts=num_consts + sum(const_nz),
        num_carry=num_carry + sum(carry_nz),
        length=length,
        reverse=reverse,
        unroll=unroll,
    )
    num_carry_t = sum(carry_nz)
    carry_out, carry_t = outs[:num_carry], iter(outs[num_carry : num_carry + num_carry_t])
    ys_and_tangents = outs[num_carry + num_carry_t :]
    num_ys = len(jaxpr.out_avals) - num_carry
    ys, ys_t = ys_and_tangents[:num_ys], iter(ys_and_tangents[num_ys:])
    tangents_out = [next(carry_t) if nz else Zero.like(c) for c, nz in zip(carry_out, carry_nz)]
    tangents_out += [next(ys_t) if nz else Zero.like(y) for y, nz in zip(ys, out_nz[num_carry:])]
    return carry_out + ys, tangents_out


def _jvp_body(jaxpr, jvp_closed, out_nz, const_nz, carry_nz, xs_nz, num_consts, num_carry):
    """The jvp of the body in scan's layout: consts, carry and xs each followed by their
    nonzero tangents; carry tangents the body leaves zero are materialized, as the loop needs
    one type per carry."""
    consts, carry, xs = _split3(jaxpr.in_avals, num_consts, num_carry)

    def tangents_of(avals, nz):
        return [tangent_aval(a) for a, n in zip(avals, nz) if n]

    groups = [
        consts,
        tangents_of(consts, const_nz),
        carry,
        tangents_of(carry, carry_nz),
        xs,
        tangents_of(xs, xs_nz),
    ]
    carry_out_avals = jaxpr.out_avals[:num_carry]
    num_out = len(jaxpr.out_avals)

    def body(*args):
        it = iter(args)
        c, ct, k, kt, x, xt = ([next(it) for _ in group] for group in groups)
        outs = eval_jaxpr(jvp_closed.jaxpr, jvp_closed.consts, *c, *k, *x, *ct, *kt, *xt)
        primal_out, tangent_out = outs[:num_out], iter(outs[num_out:])
        tangents = [next(tangent_out) if nz else None for nz in out_nz]
        carry_t = [
            zeros_like_aval(tangent_aval(a)) if t is None else t
            for t, a, nz in zip(tangents[:num_carry], carry_out_avals, carry_nz)
            if nz
        ]
        ys_t = [t for t in tangents[num_carry:] if t is not None]
        return primal_out[:num_carry] + carry_t + primal_out[num_carry:] + ys_t

    closed, _ = trace_to_jaxpr(body, [a for group in groups for a in group], "jvp of a scan body")
    return closed


# ---------------------------------------------------------------------------------------------
# Partial evaluation: the known iterations run now and store their residuals per iteration


def _save_everything(*args, **params) -> bool:
    return True


def _scan_partial_eval(trace: PartialEvalTrace, args: Sequence, params: dict) -> list:
    jaxpr, num_consts, num_carry = params["jaxpr"], params["num_consts"], params["num_carry"]
    unknowns = [trace.is_unknown(a) for a in args]
    const_uk, carry_uk, xs_uk = _split3(unknowns, num_consts, num_carry)
    force = [False] * (len(jaxpr.out_avals) - num_carry)
    # A carry is unknown if it starts so or if some iteration makes it so.
    while True:
        if all(const_uk + carry_uk + xs_uk):
            return StagingTrace.process_primitive(trace, scan_p, args, params)
        body = _split_body(jaxpr, const_uk + carry_uk + xs_uk, carry_uk + force)
        grown = [a or b for a, b in zip(carry_uk, body.out_unknown[:num_carry])]
        if grown == carry_uk:
            break
        carry_uk = grown
    out_uk = body.out_unknown
    consts, init, xs = _split3(args, num_consts, num_carry)
    known_consts = [c for c, u in zip(consts, const_uk) if not u]
    known_xs = [x for x, u in zip(xs, xs_uk) if not u]
    num_known_carry = num_carry - sum(carry_uk)
    known = _arrange_known_body(
        _forward_call_inputs(body.known), body.num_residuals, len(known_consts), num_known_carry
    )
    with core.set_current_trace(trace.parent):
        hoisted = eval_jaxpr(known.hoisted.jaxpr, known.hoisted.consts, *known_consts)
        num_invariant = sum(known.invariant)
        invariant_res, loop_consts = hoisted[:num_invariant], hoisted[num_invariant:]
        known_outs = scan_p.bind(
            *loop_consts,
            *[c for c, u in zip(init, carry_uk) if not u],
            *known_xs,
            **dict(
                params, jaxpr=known.loop, num_consts=len(loop_consts), num_carry=num_known_carry
            ),
        )
    num_known_out = len(out_uk) - sum(out_uk)
    known_iter = iter(known_outs[:num_known_out])
    if not any(out_uk):
        return [next(known_iter) for _ in out_uk]
    stacked = iter(known_outs[num_known_out:])
    varying_res = [next(stacked) if i is None else known_xs[i] for i in known.forwarded_xs]
    unknown_consts = [c for c, u in zip(consts, const_uk) if u]
    staged = StagingTrace.process_primitive(
        trace,
        scan_p,
        [
            *invariant_res,
            *unknown_consts,
            *[c for c, u in zip(init, carry_uk) if u],
            *varying_res,
            *[x for x, u in zip(xs, xs_uk) if u],
        ],
        dict(
            params,
            jaxpr=_unknown_body(body.unknown, known.invariant, len(unknown_consts), sum(carry_uk)),
            num_consts=num_invariant + len(unknown_consts),
            num_carry=sum(carry_uk),
        ),
    )
    staged_iter = iter(staged)
    return [next(staged_iter) if u else next(known_iter) for u in out_uk]


scan_p.partial_eval = _scan_partial_eval


def _split_body(closed: ClosedJaxpr, unknowns: Sequence[bool], force: Sequence[bool]):
    """Split the body so that the scans, jits and conds nested in it split themselves; outputs
    marked in `force` go to the unknown side even if known."""
    return split_jaxpr(closed, unknowns, force, what="a scan body")


# Primitives whose operands are their program's inputs, one to one.
_CALL_PRIMITIVES = ("jit", "checkpoint")


def _forward_call_inputs(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` where each use of a call's output that is just one of the call's inputs reads
    that input instead.

    A checkpointed body returns its inputs as residuals; seeing through it shows which of them
    are loop consts or xs, which then need no stacked copy.
    """
    jaxpr = closed.jaxpr
    alias: dict = {}
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [alias.get(v, v) for v in eqn.invars]
        if invars != eqn.invars:
            eqn = JaxprEqn(eqn.primitive, invars, eqn.outvars, eqn.params, eqn.source_info)
        if eqn.primitive.name in _CALL_PRIMITIVES:
            inner = eqn.params["jaxpr"].jaxpr
            position = {v: i for i, v in enumerate(inner.invars)}
            for out, inner_out in zip(eqn.outvars, inner.outvars):
                if inner_out in position:
                    alias[out] = invars[position[inner_out]]
        eqns.append(eqn)
    if not alias:
        return closed
    outvars = [alias.get(v, v) for v in jaxpr.outvars]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns), closed.consts)


class _KnownLoop(NamedTuple):
    """The known body (consts, carry, xs) -> (outs, residuals), arranged to store little.

    hoisted:      consts -> (loop-invariant residuals, loop consts), run once before the loop
    loop:         (loop consts, carry, xs) -> (outs, stacked residuals)
    invariant:    per residual, whether it is loop-invariant (passed once, as a const)
    forwarded_xs: per varying residual, the index of the known xs it is (read from the xs
                  themselves), or None (stacked by the loop)
    """

    hoisted: ClosedJaxpr
    loop: ClosedJaxpr
    invariant: list[bool]
    forwarded_xs: list[int | None]


def _arrange_known_body(
    known: ClosedJaxpr, num_res: int, num_consts: int, num_carry: int
) -> _KnownLoop:
    num_out = len(known.out_avals) - num_res
    varies = [i >= num_consts for i in range(len(known.in_avals))]
    invariant = [not v for v in unknown_outputs(known.jaxpr, varies)[num_out:]]
    in_loop = [True] * num_out + [not inv for inv in invariant]
    hoisted, loop, num_loop_consts = partial_eval_jaxpr(known, varies, in_loop, _save_everything)
    jaxpr = loop.jaxpr
    xs_position = {v: i for i, v in enumerate(jaxpr.invars[num_loop_consts + num_carry :])}
    forwarded = [xs_position.get(v) for v in jaxpr.outvars[num_out:]]
    stacked = [v for v, i in zip(jaxpr.outvars[num_out:], forwarded) if i is None]
    loop = ClosedJaxpr(
        Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars[:num_out] + stacked, jaxpr.eqns),
        loop.consts,
    )
    return _KnownLoop(hoisted, loop, invariant, forwarded)


def _unknown_body(
    unknown: ClosedJaxpr, invariant: list[bool], num_consts: int, num_carry: int
) -> ClosedJaxpr:
    """The unknown body (residuals, consts, carry, xs) in scan's layout: loop-invariant
    residuals join the consts, the others are read per iteration as xs."""
    jaxpr = unknown.jaxpr
    num_res = len(invariant)
    res, rest = jaxpr.invars[:num_res], jaxpr.invars[num_res:]
    consts, carry, xs = _split3(rest, num_consts, num_carry)
    invars = (
        [v for v, inv in zip(res, invariant) if inv]
        + consts
        + carry
        + [v for v, inv in zip(res, invariant) if not inv]
        + xs
    )
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns), unknown.consts)


# ---------------------------------------------------------------------------------------------
# Transposition


@scan_p.def_transpose
def _scan_transpose(cotangents, *operands, jaxpr, num_consts, num_carry, length, reverse, unroll):
    """Linear in the carry and in the undefined consts and xs; the defined ones are residuals.

    The transposed loop runs the other way: its carry is the carry's cotangent together with
    accumulators for the linear consts' cotangents, and its ys are the linear xs' cotangents.
    """
    consts, init, xs = _split3(operands, num_consts, num_carry)
    const_lin = [is_undefined(c) for c in consts]
    xs_lin = [is_undefined(x) for x in xs]
    ct_carry, ct_ys = list(cotangents[:num_carry]), list(cotangents[num_carry:])
    ys_nz = [type(ct) is not Zero for ct in ct_ys]
    body = _transposed_body(jaxpr, num_consts, num_carry, const_lin, xs_lin, ys_nz)
    res_consts = [c for c, lin in zip(consts, const_lin) if not lin]
    accumulators = [
        zeros_like_aval(tangent_aval(c.aval)) for c, lin in zip(consts, const_lin) if lin
    ]
    outs = scan_p.bind(
        *res_consts,
        *accumulators,
        *[instantiate(ct) for ct in ct_carry],
        *[x for x, lin in zip(xs, xs_lin) if not lin],
        *[ct for ct, nz in zip(ct_ys, ys_nz) if nz],
        jaxpr=body,
        num_consts=len(res_consts),
        num_carry=len(accumulators) + num_carry,
        length=length,
        reverse=not reverse,
        unroll=unroll,
    )
    ct_consts = iter(outs[: len(accumulators)])
    ct_init = outs[len(accumulators) : len(accumulators) + num_carry]
    ct_xs = iter(outs[len(accumulators) + num_carry :])
    return (
        [next(ct_consts) if lin else None for lin in const_lin]
        + [ct if is_undefined(op) else None for ct, op in zip(ct_init, init)]
        + [next(ct_xs) if lin else None for lin in xs_lin]
    )


def _transposed_body(jaxpr, num_consts, num_carry, const_lin, xs_lin, ys_nz) -> ClosedJaxpr:
    """(residual consts, const cotangent sums, carry cotangent, residual x, y cotangent) ->
    (const cotangent sums, carry-in cotangent, linear x cotangents): one iteration run
    backwards with `backward_pass`."""
    consts, carry, xs = _split3(jaxpr.in_avals, num_consts, num_carry)
    ys = jaxpr.out_avals[num_carry:]
    groups = [
        [a for a, lin in zip(consts, const_lin) if not lin],
        [tangent_aval(a) for a, lin in zip(consts, const_lin) if lin],
        [tangent_aval(a) for a in carry],
        [a for a, lin in zip(xs, xs_lin) if not lin],
        [tangent_aval(a) for a, nz in zip(ys, ys_nz) if nz],
    ]

    def defined_or_linear(avals, linear, values):
        values = iter(values)
        return [UndefinedPrimal(a) if lin else next(values) for a, lin in zip(avals, linear)]

    def body(*args):
        it = iter(args)
        res_c, sums, ct_carry, res_x, ct_y = ([next(it) for _ in group] for group in groups)
        primals = (
            defined_or_linear(consts, const_lin, res_c)
            + [UndefinedPrimal(a) for a in carry]
            + defined_or_linear(xs, xs_lin, res_x)
        )
        ct_y = iter(ct_y)
        cts_out = ct_carry + [
            next(ct_y) if nz else Zero(tangent_aval(a)) for a, nz in zip(ys, ys_nz)
        ]
        cts_in = backward_pass(jaxpr.jaxpr, jaxpr.consts, primals, cts_out)
        ct_c, ct_k, ct_x = _split3(cts_in, num_consts, num_carry)
        linear_ct_c = [ct for ct, lin in zip(ct_c, const_lin) if lin]
        new_sums = [instantiate(add_tangents(s, ct)) for s, ct in zip(sums, linear_ct_c)]
        ct_xs = [instantiate(ct) for ct, lin in zip(ct_x, xs_lin) if lin]
        return new_sums + [instantiate(ct) for ct in ct_k] + ct_xs

    closed, _ = trace_to_jaxpr(
        body, [a for group in groups for a in group], "transpose of a scan body"
    )
    return closed


# ---------------------------------------------------------------------------------------------
# Batching


@scan_p.def_batch
def _scan_batch(values, dims, *, jaxpr, num_consts, num_carry, length, reverse, unroll):
    """One scan over all lanes: batched consts and carries get the batch axis at 0, batched xs
    at 1 (axis 0 is the scanned one). A carry is batched if it enters batched or some
    iteration makes it so; unbatched values stay unbatched."""
    size = batching.batch_size(values, dims)
    const_dims, init_dims, xs_dims = _split3(dims, num_consts, num_carry)
    const_b = [d is not None for d in const_dims]
    xs_b = [d is not None for d in xs_dims]
    carry_b = [d is not None for d in init_dims]
    num_ys = len(jaxpr.out_avals) - num_carry
    while True:
        body, out_b = _batch_body(jaxpr, const_b + carry_b + xs_b, size, carry_b + [False] * num_ys)
        grown = [a or b for a, b in zip(carry_b, out_b[:num_carry])]
        if grown == carry_b:
            break
        carry_b = grown
    consts, init, xs = _split3(values, num_consts, num_carry)
    consts = [c if d is None else batching.moveaxis(c, d, 0) for c, d in zip(consts, const_dims)]
    init = [
        batching.bdim_at_front(c, d, size) if b else c for c, d, b in zip(init, init_dims, carry_b)
    ]
    xs = [x if d is None else batching.moveaxis(x, d, 1) for x, d in zip(xs, xs_dims)]
    outs = scan_p.bind(
        *consts,
        *init,
        *xs,
        jaxpr=body,
        num_consts=num_consts,
        num_carry=num_carry,
        length=length,
        reverse=reverse,
        unroll=unroll,
    )
    out_dims = [0 if b else None for b in carry_b] + [1 if b else None for b in out_b[num_carry:]]
    return outs, out_dims


def _batch_body(closed: ClosedJaxpr, in_batched, size: int, force_batched):
    """`closed` vmapped over axis 0 of the inputs marked batched, and which outputs come out
    batched (at axis 0); outputs marked in `force_batched` are broadcast if need be."""
    in_avals = [
        a.update(shape=(size, *a.shape)) if b else a for a, b in zip(closed.in_avals, in_batched)
    ]
    out_batched: list[bool] = []

    def batched_fun(*args):
        trace = batching.BatchTrace(
            core.current_trace(), size, batching.current_axis_name(), "vmap of a scan body"
        )
        inputs = [batching.BatchTracer(trace, x, 0) if b else x for x, b in zip(args, in_batched)]
        try:
            with core.set_current_trace(trace):
                outs = eval_jaxpr(closed.jaxpr, closed.consts, *inputs)
            pairs = [trace.value_and_dim(o) for o in outs]
        finally:
            trace.alive = False
        out_batched[:] = [d is not None or f for (_, d), f in zip(pairs, force_batched)]
        return [
            batching.bdim_at_front(v, d, size) if b else v for (v, d), b in zip(pairs, out_batched)
        ]

    batched, _ = trace_to_jaxpr(batched_fun, in_avals, "vmap of a scan body")
    return batched, out_batched


# ---------------------------------------------------------------------------------------------
# The public functions


def _scan_length(xs_leaves: list, length) -> int:
    for x in xs_leaves:
        if x.ndim == 0:
            raise ValueError(
                f"scan: every leaf of xs needs a leading axis to scan over, got a scalar "
                f"{x.aval.str_short()}"
            )
    sizes = [x.shape[0] for x in xs_leaves]
    if length is not None:
        length = _static_int_argument(length, "length")
        if length < 0:
            raise ValueError(f"scan: length must be non-negative, got {length}")
        if any(s != length for s in sizes):
            raise ValueError(
                f"scan got length={length} but the leaves of xs have leading axis sizes {sizes}"
            )
        return length
    if not sizes:
        raise ValueError("scan: pass xs to scan over, or the number of iterations as length")
    if any(s != sizes[0] for s in sizes):
        shapes = ", ".join(str(x.shape) for x in xs_leaves)
        raise ValueError(
            f"scan: the leaves of xs must have equal leading axis sizes, got sizes {sizes} "
            f"(shapes {shapes})"
        )
    return sizes[0]


def _static_int_argument(value, name: str) -> int:
    """scan's `length` or `unroll` as a Python int: they shape the staged loop, so they must be
    integers known while tracing."""
    try:
        return operator.index(value)
    except ConcretizationTypeError:
        raise ConcretizationTypeError(
            value,
            f"scan: {name} must be known while tracing; a loop whose number of iterations is "
            "known only at run time is a fori_loop or while_loop.",
        ) from None
    except TypeError:
        raise TypeError(
            f"scan: {name} must be an int, got {value!r} of type {type(value).__name__}"
        ) from None


def _canonical_unroll(unroll, length: int) -> int:
    if isinstance(unroll, bool):
        return max(length, 1) if unroll else 1
    unroll = _static_int_argument(unroll, "unroll")
    if unroll < 0:
        raise ValueError(f"scan: unroll must be a non-negative integer or a bool, got {unroll}")
    return max(unroll, 1)  # 0 unrolls nothing, as 1 does


def _stage_body(f: Callable, in_tree, carry_avals: list, x_avals: list):
    """Stage f(carry, x) -> (carry, y); returns (jaxpr, consts, carry treedef, y treedef)."""
    trees = {}

    def body(carry, x):
        out = f(carry, x)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            got = (
                f"a {type(out).__name__} of {len(out)} elements"
                if isinstance(out, (tuple, list))
                else f"a value of type {type(out).__name__}"
            )
            raise TypeError(f"scan: the body function must return a pair (carry, y), got {got}")
        carry_leaves, trees["carry"] = tree_util.tree_flatten(out[0])
        y_leaves, trees["y"] = tree_util.tree_flatten(out[1])
        return carry_leaves + y_leaves

    jaxpr, consts, _ = stage(body, in_tree, carry_avals + x_avals, "scan")
    return jaxpr, consts, trees["carry"], trees["y"]


def _check_carry(init_tree, carry_tree, init_avals: list, carry_out: list) -> None:
    if carry_tree != init_tree:
        raise TypeError(
            "scan: the body function must return a carry with the pytree structure of init: "
            f"init is {init_tree}, the returned carry is {carry_tree}"
        )
    for i, (a, b) in enumerate(zip(init_avals, carry_out)):
        if _differ(a, b):
            raise TypeError(
                "scan: the body function must return a carry of the same shapes and dtypes as "
                f"init: leaf {i} of init is {a.str_short()} but the body returned "
                f"{b.str_short()}"
            )


def scan(
    f: Callable,
    init,
    xs=None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
):
    """Loop `f(carry, x) -> (carry, y)` over the leading axis of `xs`; return the final carry
    and the stacked ys. One traced body, so it stages, differentiates and batches as one
    loop instead of `length` copies of the body. `_split_transpose` asks for the reverse loop
    of a derivative in two parts, which changes no value: it is accepted and not used."""
    check_callable("scan", f=f)
    in_tree = tree_util.tree_structure((init, xs))
    init_leaves, init_tree = tree_util.tree_flatten(init)
    init_leaves = [asarray(x) for x in init_leaves]
    xs_leaves, xs_tree = tree_util.tree_flatten(xs)
    xs_leaves = [asarray(x) for x in xs_leaves]
    num_carry = len(init_leaves)
    length = _scan_length(xs_leaves, length)
    unroll = _canonical_unroll(unroll, length)
    x_avals = [_unstacked(x.aval) for x in xs_leaves]
    jaxpr, consts, carry_tree, y_tree = _stage_body(f, in_tree, avals_of(init_leaves), x_avals)
    carry_out = jaxpr.out_avals[:num_carry]
    if carry_tree == init_tree:
        init_leaves, changed = promote_weak_carry(init_leaves, carry_out)
        if changed:
            jaxpr, consts, carry_tree, y_tree = _stage_body(
                f, in_tree, avals_of(init_leaves), x_avals
            )
            carry_out = jaxpr.out_avals[:num_carry]
    _check_carry(init_tree, carry_tree, avals_of(init_leaves), carry_out)
    if config.disable_jit and core.current_trace() is core.eval_trace() and length:
        init = tree_util.tree_unflatten(init_tree, init_leaves)
        return _python_scan(f, init, xs_leaves, xs_tree, length, reverse)
    outs = scan_p.bind(
        *consts,
        *init_leaves,
        *xs_leaves,
        jaxpr=jaxpr,
        num_consts=len(consts),
        num_carry=num_carry,
        length=length,
        reverse=bool(reverse),
        unroll=unroll,
    )
    carry = tree_util.tree_unflatten(init_tree, outs[:num_carry])
    return carry, tree_util.tree_unflatten(y_tree, outs[num_carry:])


def _python_scan(f: Callable, init, xs_leaves: list, xs_tree, length: int, reverse: bool):
    """scan under disable_jit: the body runs eagerly, once per iteration, as written."""
    carry, ys = init, []
    for i in reversed(range(length)) if reverse else range(length):
        x = tree_util.tree_unflatten(xs_tree, [index_in_dim(x, i, 0, False) for x in xs_leaves])
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()

    def stack(*slices):
        return concatenate([expand_dims(asarray(y), (0,)) for y in slices], 0)

    return carry, tree_util.tree_map(stack, *ys)


def map(f: Callable, xs, *, batch_size: int | None = None):
    """`f` applied to each slice of `xs` along the leading axis, results stacked: a scan
    without a carry, so one slice is live at a time.

    With `batch_size`, each scan step maps `f` over `batch_size` slices at once with vmap,
    trading memory for fewer, wider steps; the slices left over after the last whole batch
    are mapped by one more vmap outside the scan. `batch_size=0` maps every slice in one
    vmap.
    """
    check_callable("funcgrad.lax.map", f=f)
    if batch_size is None:
        _, ys = scan(lambda carry, x: (carry, f(x)), (), xs)
        return ys
    batch_size = _batch_size(batch_size)
    from funcgrad.transforms.vmap import vmap  # lax is imported by the transforms

    leaves, tree = tree_util.tree_flatten(xs)
    if not leaves:
        raise ValueError("funcgrad.lax.map: xs has no arrays to map over")
    leaves = [asarray(x) for x in leaves]
    length = _mapped_length(leaves)
    if batch_size == 0:
        return vmap(f)(tree_util.tree_unflatten(tree, leaves))
    num_batches, remainder = divmod(length, batch_size)
    whole = num_batches * batch_size
    batched_xs = tree_util.tree_unflatten(
        tree,
        [
            reshape(slice_in_dim(x, 0, whole, 1, 0), (num_batches, batch_size, *x.shape[1:]))
            for x in leaves
        ],
    )
    _, batched_ys = scan(lambda carry, x: (carry, vmap(f)(x)), (), batched_xs)
    ys = tree_util.tree_map(lambda y: reshape(y, (whole, *y.shape[2:])), batched_ys)
    if remainder:
        rest = [slice_in_dim(x, whole, length, 1, 0) for x in leaves]
        rest_ys = vmap(f)(tree_util.tree_unflatten(tree, rest))
        ys = tree_util.tree_map(lambda a, b: concatenate([a, b], 0), ys, rest_ys)
    return ys


def _batch_size(batch_size) -> int:
    """map's batch_size as a Python int: any integer (a NumPy one too) but a bool."""
    size = -1
    if not isinstance(batch_size, bool):
        try:
            size = operator.index(batch_size)
        except TypeError:  # a float, or a traced value
            pass
    if size < 0:
        raise ValueError(
            "funcgrad.lax.map: batch_size must be a non-negative int (0 maps every slice at "
            f"once), got {batch_size!r}"
        )
    return size


def _mapped_length(leaves: list) -> int:
    lengths = {x.shape[0] if x.ndim else None for x in leaves}
    if None in lengths or len(lengths) != 1:
        shapes = [x.shape for x in leaves]
        raise ValueError(
            "funcgrad.lax.map: every array in xs needs the same leading axis length; got "
            f"shapes {shapes}"
        )
    return lengths.pop()


def _static_int(x) -> int | None:
    """The value of a loop bound known while tracing (a float one truncated, as int() does),
    or None for a traced bound."""
    try:
        return operator.index(x)
    except TypeError:
        pass
    try:
        return int(x)
    except TypeError:  # a ConcretizationTypeError: the bound is traced
        return None


def fori_loop(lower, upper, body_fun: Callable, init_val, *, unroll: int | bool | None = None):
    """`val = body_fun(i, val)` for i from lower up to upper, starting from `init_val`.

    With bounds known while tracing it is a scan over the indices, so reverse mode can store
    each iteration's residuals; traced bounds make it a while_loop (forward mode only).
    """
    check_callable("fori_loop", body_fun=body_fun)
    lower_arr, upper_arr = asarray(lower), asarray(upper)
    for name, bound in (("lower", lower_arr), ("upper", upper_arr)):
        if dtypes.is_bool(bound.dtype) or bound.ndim != 0:
            raise TypeError(
                f"fori_loop: {name} must be a numeric scalar, got {bound.aval.str_short()}"
            )
    # The index has the bounds' promoted type, weak when both are Python ints.
    dtype, weak = dtypes.result_type_of(
        [(lower_arr.dtype, lower_arr.weak_type), (upper_arr.dtype, upper_arr.weak_type)]
    )
    start, stop = _static_int(lower), _static_int(upper)
    if not dtypes.is_int(dtype) and start is not None and stop is not None:
        # Known float bounds count as JAX counts them: truncated, with a Python int index.
        dtype, weak = dtypes.int32, True
    if dtypes.is_int(dtype):
        _check_bounds_fit(dtype, lower=start, upper=stop)
    if start is None or stop is None:
        if unroll is not None:
            raise ValueError("fori_loop: unroll needs bounds known while tracing")
        return _fori_while(
            _index(lower_arr, dtype, weak), _index(upper_arr, dtype, weak), body_fun, init_val
        )
    indices = add(iota(dtype, max(stop - start, 0)), Array(np.array(start, dtype)[()]))

    def step(val, i):
        return body_fun(i, val), None

    unroll = 1 if unroll is None else unroll
    result, _ = scan(step, init_val, _index(indices, dtype, weak), unroll=unroll)
    return result


def _check_bounds_fit(dtype, **bounds: int | None) -> None:
    """Refuse a known bound outside the index's integer type (a Python int beside an int8
    bound, say): converted, it would wrap around and change the number of iterations, and the
    indices the body sees would wrap too."""
    info = dtypes.iinfo(dtype)
    for name, value in bounds.items():
        if value is not None and not info.min <= value <= info.max:
            raise OverflowError(
                f"fori_loop: {name}={value} does not fit the loop index's type "
                f"{np.dtype(dtype).name} (the promoted type of the bounds); give the bounds a "
                "wider integer type"
            )


def _index(x, dtype, weak: bool):
    if x.dtype == dtype and x.weak_type == weak:
        return x
    return convert_element_type_p.bind(x, new_dtype=dtype, weak_type=weak)


def _fori_while(lower, upper, body_fun: Callable, init_val):
    """fori_loop with traced bounds: a while_loop over (index, value)."""
    from funcgrad.lax.control_flow.loops import while_loop

    one = Array(np.array(1, lower.dtype)[()], lower.weak_type)

    def cond(state):
        return lt(state[0], upper)

    def body(state):
        i, val = state
        return add(i, one), body_fun(i, val)

    _, result = while_loop(cond, body, (lower, init_val))
    return result


# ---------------------------------------------------------------------------------------------
# associative_scan: a parallel prefix in lax ops


def associative_scan(fn: Callable, elems, reverse: bool = False, axis: int = 0):
    """All prefix combinations `[e0, fn(e0, e1), fn(fn(e0, e1), e2), ...]` along `axis`, for an
    associative `fn` that acts elementwise along `axis`, in O(log n) rounds of `fn`.

    With reverse=True the elements are combined from the end instead. Written in lax ops, so
    every transformation applies to it.
    """
    check_callable("associative_scan", fn=fn)
    leaves, tree = tree_util.tree_flatten(elems)
    leaves = [asarray(x) for x in leaves]
    if not leaves:
        raise ValueError("associative_scan: elems has no arrays")
    axes = []
    for x in leaves:
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(
                f"associative_scan: axis {axis} is out of bounds for an element of shape {x.shape}"
            )
        axes.append(axis % x.ndim)
    sizes = [x.shape[a] for x, a in zip(leaves, axes)]
    if any(s != sizes[0] for s in sizes):
        raise ValueError(
            f"associative_scan: the elements must have equal sizes along axis {axis}, got "
            f"shapes {', '.join(str(x.shape) for x in leaves)}"
        )

    def combine(a: list, b: list) -> list:
        out = fn(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        out_leaves, out_tree = tree_util.tree_flatten(out)
        if out_tree != tree:
            raise TypeError(
                f"associative_scan: fn must return the structure of elems {tree}, got {out_tree}"
            )
        out_leaves = [asarray(x) for x in out_leaves]
        for i, (x, y) in enumerate(zip(a, out_leaves)):
            if _differ(x.aval, y.aval):
                raise TypeError(
                    "associative_scan: fn must combine elements elementwise, returning the shapes "
                    f"and dtypes it is given: leaf {i} is {x.aval.str_short()} in its arguments "
                    f"and {y.aval.str_short()} in its result"
                )
        return out_leaves

    if reverse:
        leaves = [rev(x, (a,)) for x, a in zip(leaves, axes)]
    result = _prefix_scan(combine, leaves, axes)
    if reverse:
        result = [rev(x, (a,)) for x, a in zip(result, axes)]
    return tree_util.tree_unflatten(tree, result)


def _prefix_scan(combine: Callable, leaves: list, axes: list[int]) -> list:
    """Odd positions of the result are the prefix scan of adjacent pairs (a recursion on half
    the elements); each even position is the odd result before it combined with its element."""
    n = leaves[0].shape[axes[0]]
    if n < 2:
        return leaves

    def every_other(start: int, stop: int):
        return [slice_in_dim(x, start, stop, 2, a) for x, a in zip(leaves, axes)]

    pairs = combine(every_other(0, n - 1), every_other(1, n))
    odd = _prefix_scan(combine, pairs, axes)
    num_even = (n + 1) // 2
    first = [slice_in_dim(x, 0, 1, 1, a) for x, a in zip(leaves, axes)]
    if num_even > 1:
        before = [slice_in_dim(x, 0, num_even - 1, 1, a) for x, a in zip(odd, axes)]
        later = combine(before, every_other(2, n))
        even = [concatenate([f, e], a) for f, e, a in zip(first, later, axes)]
    else:
        even = first
    return [_interleave(e, o, a) for e, o, a in zip(even, odd, axes)]


def _interleave(even, odd, axis: int):
    """[even0, odd0, even1, odd1, ...] along `axis`; `even` may be one longer than `odd`."""
    extra = even.shape[axis] - odd.shape[axis]
    if extra:
        # Pad odd with a copy of even's last element, interleave, and drop that copy.
        odd = concatenate([odd, slice_in_dim(even, -1, None, 1, axis)], axis)
    pair = concatenate([expand_dims(even, (axis + 1,)), expand_dims(odd, (axis + 1,))], axis + 1)
    shape = list(even.shape)
    shape[axis] *= 2
    merged = reshape(pair, shape)
    return slice_in_dim(merged, 0, shape[axis] - extra, 1, axis) if extra else merged


def _scan_dce(eqn: JaxprEqn, used_outputs: list[bool]):
    """Drop unused ys, and carries that neither reach a used output nor feed one (found by
    iterating to a fixed point, since a carry may feed another through the loop)."""
    params = eqn.params
    body, num_consts, num_carry = params["jaxpr"], params["num_consts"], params["num_carry"]
    has_effects = passes.jaxpr_has_effects(body.jaxpr)
    if not any(used_outputs) and not has_effects:
        return None, [False] * len(eqn.invars)
    used_carry, used_ys = list(used_outputs[:num_carry]), list(used_outputs[num_carry:])
    while True:
        _, read = passes.dce_closed_jaxpr(body, used_carry + used_ys)
        needed = [u or r for u, r in zip(used_carry, read[num_consts : num_consts + num_carry])]
        if needed == used_carry:
            break
        used_carry = needed
    kept = read[:num_consts] + used_carry + read[num_consts + num_carry :]
    if all(kept) and all(used_carry + used_ys):
        return eqn, kept
    pruned = passes.prune_jaxpr(body, used_carry + used_ys, kept)
    new_eqn = JaxprEqn(
        scan_p,
        [v for v, k in zip(eqn.invars, kept) if k],
        [v for v, k in zip(eqn.outvars, used_carry + used_ys) if k],
        dict(
            params,
            jaxpr=pruned,
            num_consts=sum(read[:num_consts]),
            num_carry=sum(used_carry),
        ),
        eqn.source_info,
    )
    return new_eqn, kept


passes.dce_rules[scan_p] = _scan_dce
