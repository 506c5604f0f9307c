"""while_loop: a loop whose trip count is decided at run time.

`while_p` carries two programs: `cond_jaxpr` ((cond_consts, carry) -> bool scalar) and
`body_jaxpr` ((body_consts, carry) -> carry); its operands are (*cond_consts, *body_consts,
*carry). Forward mode is a while over (primal, tangent) carries. Reverse mode is not
supported: the backward pass would need every iteration's values, and how many there are is
known only once the loop has run (fori_loop with static bounds and scan store them).
Batching runs a single loop for all lanes; when lanes stop at different iterations, the loop
runs until every lane is done and finished lanes keep their values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from funcgrad import core, dtypes, tree_util
from funcgrad.array import Array
from funcgrad.compiler import passes
from funcgrad.config import config
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import Zero, instantiate, jvp_jaxpr, tangent_aval, zeros_like_aval
from funcgrad.interpreters.partial_eval import PartialEvalTrace, split_jaxpr
from funcgrad.interpreters.staging import StagingTrace, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, JaxprEqn, eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow.common import (
    avals_of,
    check_callable,
    check_same_types,
    promote_weak_carry,
    stage,
)
from funcgrad.lax.elementwise import select_n
from funcgrad.lax.reductions import reduce_or
from funcgrad.lax.shapes import broadcast_in_dim

__all__ = ["while_loop"]

while_p = Primitive("while", multiple_results=True, higher_order=True)


def _split(items: Sequence, cond_nconsts: int, body_nconsts: int) -> tuple[list, list, list]:
    """(cond consts, body consts, carry) of a while's operands."""
    items = list(items)
    body_start = cond_nconsts + body_nconsts
    return items[:cond_nconsts], items[cond_nconsts:body_start], items[body_start:]


def _run(closed: ClosedJaxpr, *args) -> list:
    return eval_jaxpr(closed.jaxpr, closed.consts, *args)


@while_p.def_impl
def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts, body_consts, carry = _split(args, cond_nconsts, body_nconsts)
    weak = [x.weak_type for x in carry]
    while bool(_run(cond_jaxpr, *cond_consts, *carry)[0]):
        carry = _run(body_jaxpr, *body_consts, *carry)
    # The carry's type is the loop's: a body returning a weak value does not weaken it.
    return [Array(x._value, w) for x, w in zip(carry, weak)]


@while_p.def_abstract_eval
def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    _, _, carry = _split(avals, cond_nconsts, body_nconsts)
    body_out = body_jaxpr.out_avals
    if [(a.shape, a.dtype) for a in body_out] != [(a.shape, a.dtype) for a in carry]:
        raise TypeError(
            "while: body_jaxpr must return the carry's types, got carry "
            f"({', '.join(a.str_short() for a in carry)}) and body outputs "
            f"({', '.join(a.str_short() for a in body_out)})"
        )
    if not _is_bool_scalar(cond_jaxpr.out_avals):
        raise TypeError(
            "while: cond_jaxpr must return one bool scalar, got "
            f"({', '.join(a.str_short() for a in cond_jaxpr.out_avals)})"
        )
    return list(carry)


@while_p.def_weak_type
def _while_weak_type(weak_flags, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    return list(weak_flags[cond_nconsts + body_nconsts :])


def _is_bool_scalar(avals: Sequence[ShapedArray]) -> bool:
    return len(avals) == 1 and avals[0].shape == () and avals[0].dtype == dtypes.bool_


# ---------------------------------------------------------------------------------------------
# Forward mode


def _tangent_fixed_point(body_jaxpr: ClosedJaxpr, const_nonzero: list, carry_nonzero: list):
    """The carries with nonzero tangents: those given nonzero ones, and every carry the body
    makes depend on a nonzero tangent, iterated until no carry is added. Returns them with
    the body's jvp and which of its outputs have nonzero tangents."""
    while True:
        body_jvp, out_nonzero = jvp_jaxpr(body_jaxpr, const_nonzero + carry_nonzero)
        grown = [c or o for c, o in zip(carry_nonzero, out_nonzero)]
        if grown == carry_nonzero:
            return carry_nonzero, body_jvp, out_nonzero
        carry_nonzero = grown


def _jvp_body(body_jvp, out_nonzero, carry_nonzero, carry_avals, num_consts, num_const_tangents):
    """The body of the jvp while: (consts, const tangents, carry, carry tangents) ->
    (carry, carry tangents), with zeros for the carries whose tangent the body zeroes."""
    num_carry = len(carry_avals)

    def body(*args):
        consts, const_tangents, rest = _split(args, num_consts, num_const_tangents)
        carry, carry_tangents = rest[:num_carry], rest[num_carry:]
        outs = _run(body_jvp, *consts, *carry, *const_tangents, *carry_tangents)
        tangents_out = iter(outs[num_carry:])
        return outs[:num_carry] + [
            next(tangents_out) if out_nz else zeros_like_aval(tangent_aval(aval))
            for nz, out_nz, aval in zip(carry_nonzero, out_nonzero, carry_avals)
            if nz
        ]

    consts, carry, tangents = _split(body_jvp.in_avals, num_consts, num_carry)
    avals = consts + tangents[:num_const_tangents] + carry + tangents[num_const_tangents:]
    return trace_to_jaxpr(body, avals, "jvp of a while body")[0]


def _jvp_cond(cond_jaxpr: ClosedJaxpr, tangent_avals: list) -> ClosedJaxpr:
    """The cond of the jvp while: it reads the primal carries and ignores the tangents."""
    num_primal = len(cond_jaxpr.in_avals)

    def cond(*args):
        return _run(cond_jaxpr, *args[:num_primal])

    return trace_to_jaxpr(cond, cond_jaxpr.in_avals + tangent_avals, "jvp of a while cond")[0]


@while_p.def_jvp
def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    params = dict(
        cond_jaxpr=cond_jaxpr,
        body_jaxpr=body_jaxpr,
        cond_nconsts=cond_nconsts,
        body_nconsts=body_nconsts,
    )
    nonzero = [
        type(t) is not Zero and dtypes.is_inexact(core.get_aval(p).dtype)
        for p, t in zip(primals, tangents)
    ]
    cond_consts, body_consts, carry = _split(primals, cond_nconsts, body_nconsts)
    _, const_tangents, carry_tangents = _split(tangents, cond_nconsts, body_nconsts)
    _, const_nonzero, carry_nonzero = _split(nonzero, cond_nconsts, body_nconsts)
    carry_avals = [core.get_aval(c) for c in carry]
    carry_nonzero, body_jvp, out_nonzero = _tangent_fixed_point(
        body_jaxpr, const_nonzero, carry_nonzero
    )
    if not any(carry_nonzero):
        return while_p.bind(*primals, **params), [Zero(tangent_aval(a)) for a in carry_avals]
    const_tangents = [t for t, nz in zip(const_tangents, const_nonzero) if nz]
    carry_tangents = [instantiate(t) for t, nz in zip(carry_tangents, carry_nonzero) if nz]
    body = _jvp_body(
        body_jvp, out_nonzero, carry_nonzero, carry_avals, body_nconsts, len(const_tangents)
    )
    cond = _jvp_cond(cond_jaxpr, avals_of(carry_tangents))
    outs = while_p.bind(
        *cond_consts,
        *body_consts,
        *const_tangents,
        *carry,
        *carry_tangents,
        cond_jaxpr=cond,
        body_jaxpr=body,
        cond_nconsts=cond_nconsts,
        body_nconsts=body_nconsts + len(const_tangents),
    )
    num_carry = len(carry)
    tangents_out = iter(outs[num_carry:])
    return outs[:num_carry], [
        next(tangents_out) if nz else Zero(tangent_aval(aval))
        for nz, aval in zip(carry_nonzero, carry_avals)
    ]


# ---------------------------------------------------------------------------------------------
# Reverse mode

_NO_REVERSE_MODE = (
    "reverse-mode differentiation (grad, vjp) of while_loop is not supported: the number of "
    "iterations is known only at run time, so the values of each iteration cannot be stored "
    "for the backward pass. Use fori_loop with static (Python int) bounds, or scan, which "
    "support reverse mode; forward mode (jvp, jacfwd) works through while_loop."
)

while_p.not_applicable["transpose"] = _NO_REVERSE_MODE


def _while_partial_eval(trace: PartialEvalTrace, args: Sequence, params: dict) -> list:
    """Some operands are known, some not (linearize: the primals are known, the tangents not).

    When the predicate depends only on known values, the known carries are computed now by a
    loop over them alone, and the unknown carries by staging the whole loop, which recomputes
    the known carries beside them: no iteration's values need storing, so linearize works, while
    transposing the staged loop (reverse mode) still meets while_loop's missing transpose.
    """
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    unknowns = [trace.is_unknown(a) for a in args]
    cond_unknown, const_unknown, carry_unknown = _split(unknowns, cond_nconsts, body_nconsts)
    carry_unknown, pred_unknown = _dependency_fixed_point(
        params["cond_jaxpr"], params["body_jaxpr"], cond_unknown, const_unknown, carry_unknown
    )
    staged = StagingTrace.process_primitive(trace, while_p, args, params)
    if pred_unknown or all(carry_unknown):
        return staged
    cond_consts, body_consts, carry = _split(args, cond_nconsts, body_nconsts)
    known = [not u for u in carry_unknown]
    cond_jaxpr = _known_part(
        params["cond_jaxpr"], cond_unknown + carry_unknown, [True], "a while_loop predicate"
    )
    body_jaxpr = _known_part(
        params["body_jaxpr"], const_unknown + carry_unknown, known, "a while_loop body"
    )
    known_cond_consts = [c for c, u in zip(cond_consts, cond_unknown) if not u]
    known_body_consts = [c for c, u in zip(body_consts, const_unknown) if not u]
    with core.set_current_trace(trace.parent):
        known_outs = iter(
            while_p.bind(
                *known_cond_consts,
                *known_body_consts,
                *[c for c, k in zip(carry, known) if k],
                cond_jaxpr=cond_jaxpr,
                body_jaxpr=body_jaxpr,
                cond_nconsts=len(known_cond_consts),
                body_nconsts=len(known_body_consts),
            )
        )
    return [next(known_outs) if k else out for out, k in zip(staged, known)]


def _known_part(closed: ClosedJaxpr, unknowns: list, outputs: list, what: str) -> ClosedJaxpr:
    """`closed` on its known inputs alone, returning the `outputs` marked (which depend on no
    unknown input). The program is split by evaluation, so a cond or scan in it that computes
    primal and tangent values together gives up its known part."""
    split = split_jaxpr(closed, unknowns, what=what)
    kept = [keep for keep, unknown in zip(outputs, split.out_unknown) if not unknown]
    num_known_inputs = len(split.known.in_avals)
    return passes.prune_jaxpr(
        split.known, kept + [False] * split.num_residuals, [True] * num_known_inputs
    )


while_p.partial_eval = _while_partial_eval


def _dependency_fixed_point(cond_jaxpr, body_jaxpr, cond_marked, const_marked, carry_marked):
    """Which carries depend on the marked (unknown) operands over any number of iterations,
    and whether the predicate does. A marked predicate marks every carry: which
    iteration a carry stops at then depends on the marked values. The programs are split by
    evaluation, not by a pass over their equations: a cond in a jvp'd body reads primal and
    tangent carries together, yet its primal outputs stay known."""
    while True:
        cond_split = split_jaxpr(
            cond_jaxpr, cond_marked + carry_marked, what="a while_loop predicate"
        )
        if cond_split.out_unknown[0]:
            return [True] * len(carry_marked), True
        body_split = split_jaxpr(body_jaxpr, const_marked + carry_marked, what="a while_loop body")
        out_marked = body_split.out_unknown
        grown = [c or o for c, o in zip(carry_marked, out_marked)]
        if grown == carry_marked:
            return carry_marked, False
        carry_marked = grown


# ---------------------------------------------------------------------------------------------
# Batching


def _batch_program(closed: ClosedJaxpr, in_batched: list, size: int, out_batched: list):
    """`closed` vmapped over axis 0 of the inputs marked batched, with the outputs marked in
    `out_batched` batched at 0 and the others unbatched (they must not depend on a batched
    input)."""
    in_avals = [
        ShapedArray((size,) + a.shape, a.dtype, a.weak_type) if b else a
        for a, b in zip(closed.in_avals, in_batched)
    ]

    def batched_fun(*args):
        trace = batching.BatchTrace(
            core.current_trace(), size, batching.current_axis_name(), "vmap of a while_loop"
        )
        inputs = [batching.BatchTracer(trace, x, 0) if b else x for x, b in zip(args, in_batched)]
        try:
            with core.set_current_trace(trace):
                outs = _run(closed, *inputs)
            pairs = [trace.value_and_dim(o) for o in outs]
        finally:
            trace.alive = False
        return [
            batching.bdim_at_front(value, dim, size) if batched else value
            for (value, dim), batched in zip(pairs, out_batched)
        ]

    return trace_to_jaxpr(batched_fun, in_avals, "vmap of a while_loop")[0]


def _any_lane_cond(batched_cond: ClosedJaxpr) -> ClosedJaxpr:
    """The predicate of a loop whose lanes stop at different iterations: some lane goes on."""

    def cond(*args):
        (pred,) = _run(batched_cond, *args)
        return reduce_or(pred, (0,))

    return trace_to_jaxpr(cond, batched_cond.in_avals, "vmap of a while cond")[0]


def _masked_body(batched_cond, batched_body, cond_nconsts: int) -> ClosedJaxpr:
    """(cond consts, body consts, carry) -> carry: the body on the lanes whose predicate holds;
    the others keep their carry."""

    def body(*args):
        cond_consts, rest = args[:cond_nconsts], args[cond_nconsts:]
        num_carry = len(batched_body.out_avals)
        carry = rest[len(rest) - num_carry :]
        (pred,) = _run(batched_cond, *cond_consts, *carry)
        new_carry = _run(batched_body, *rest)
        return [
            select_n(broadcast_in_dim(pred, core.get_aval(old).shape, (0,)), old, new)
            for old, new in zip(carry, new_carry)
        ]

    avals = batched_cond.in_avals[:cond_nconsts] + batched_body.in_avals
    return trace_to_jaxpr(body, avals, "vmap of a while body")[0]


def _batched_fixed_point(cond_jaxpr, body_jaxpr, cond_batched, const_batched, carry_batched, size):
    """Which carries come out batched over any number of iterations, and whether the predicate
    does (then every carry is). Unlike a dependency pass over the equations, batching the
    programs lets nested loops and conds say which of their outputs are batched."""
    while True:
        in_batched = cond_batched + carry_batched
        _, (pred_batched,) = batching.batch_jaxpr_outputs(cond_jaxpr, in_batched, size)
        if pred_batched:
            return [True] * len(carry_batched), True
        in_batched = const_batched + carry_batched
        _, out_batched = batching.batch_jaxpr_outputs(body_jaxpr, in_batched, size)
        grown = [c or o for c, o in zip(carry_batched, out_batched)]
        if grown == carry_batched:
            return carry_batched, False
        carry_batched = grown


@while_p.def_batch
def _while_batch(values, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    size = batching.batch_size(values, dims)
    values = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(values, dims)]
    cond_consts, body_consts, carry = _split(values, cond_nconsts, body_nconsts)
    cond_batched, const_batched, carry_given = _split(
        [d is not None for d in dims], cond_nconsts, body_nconsts
    )
    carry_batched, pred_batched = _batched_fixed_point(
        cond_jaxpr, body_jaxpr, cond_batched, const_batched, carry_given, size
    )
    carry = [
        batching.broadcast_batch(c, size, 0) if want and not given else c
        for c, want, given in zip(carry, carry_batched, carry_given)
    ]
    cond = _batch_program(cond_jaxpr, cond_batched + carry_batched, size, [pred_batched])
    body = _batch_program(body_jaxpr, const_batched + carry_batched, size, carry_batched)
    if pred_batched:
        outs = while_p.bind(
            *cond_consts,
            *cond_consts,
            *body_consts,
            *carry,
            cond_jaxpr=_any_lane_cond(cond),
            body_jaxpr=_masked_body(cond, body, cond_nconsts),
            cond_nconsts=cond_nconsts,
            body_nconsts=cond_nconsts + body_nconsts,
        )
    else:
        outs = while_p.bind(
            *cond_consts,
            *body_consts,
            *carry,
            cond_jaxpr=cond,
            body_jaxpr=body,
            cond_nconsts=cond_nconsts,
            body_nconsts=body_nconsts,
        )
    return outs, [0 if b else None for b in carry_batched]


# ---------------------------------------------------------------------------------------------
# The public wrapper


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """Run `val = body_fun(val)` while `cond_fun(val)`, starting from `init_val`; return `val`.

    `init_val` is a pytree; `body_fun` must return the same structure, shapes and dtypes, and
    `cond_fun` a bool scalar. Differentiable in forward mode only (see the module docstring).
    """
    check_callable("while_loop", cond_fun=cond_fun, body_fun=body_fun)
    if config.disable_jit and core.current_trace() is core.eval_trace():
        val = tree_util.tree_map(asarray, init_val)
        while cond_fun(val):
            val = tree_util.tree_map(asarray, body_fun(val))
        return val
    leaves, in_tree = tree_util.tree_flatten((init_val,))
    carry_tree = tree_util.tree_structure(init_val)
    leaves = [asarray(x) for x in leaves]
    body_jaxpr, body_consts, body_tree = stage(body_fun, in_tree, avals_of(leaves), "while_body")
    if body_tree == carry_tree:
        leaves, changed = promote_weak_carry(leaves, body_jaxpr.out_avals)
        if changed:
            body_jaxpr, body_consts, body_tree = stage(
                body_fun, in_tree, avals_of(leaves), "while_body"
            )
    check_same_types(
        "while_loop: the carry init_val and body_fun's output",
        avals_of(leaves),
        body_jaxpr.out_avals,
        carry_tree,
        body_tree,
    )
    cond_jaxpr, cond_consts, cond_tree = stage(cond_fun, in_tree, avals_of(leaves), "while_cond")
    is_leaf = tree_util.treedef_is_leaf(cond_tree)
    if not (is_leaf and _is_bool_scalar(cond_jaxpr.out_avals)):
        returned = ", ".join(a.str_short() for a in cond_jaxpr.out_avals)
        container = "" if is_leaf else f" in a {cond_tree}"
        raise TypeError(
            f"while_loop: cond_fun must return a bool scalar, got ({returned}){container}"
        )
    outs = while_p.bind(
        *cond_consts,
        *body_consts,
        *leaves,
        cond_jaxpr=cond_jaxpr,
        body_jaxpr=body_jaxpr,
        cond_nconsts=len(cond_consts),
        body_nconsts=len(body_consts),
    )
    return tree_util.tree_unflatten(carry_tree, outs)


def _while_dce(eqn: JaxprEqn, used_outputs: list[bool]):
    """Drop carries that neither the predicate nor a used output needs (a fixed point, since
    a carry may feed another through the loop). The loop itself stays: it may not terminate,
    and its trip count depends on the carries the predicate reads."""
    params = eqn.params
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    _, cond_read = passes.dce_closed_jaxpr(cond, [True])
    used_carry = [u or r for u, r in zip(used_outputs, cond_read[cond_nconsts:])]
    while True:
        _, body_read = passes.dce_closed_jaxpr(body, used_carry)
        needed = [u or r for u, r in zip(used_carry, body_read[body_nconsts:])]
        if needed == used_carry:
            break
        used_carry = needed
    if all(used_carry):
        return eqn, [True] * len(eqn.invars)
    cond_kept = cond_read[:cond_nconsts] + used_carry
    body_kept = body_read[:body_nconsts] + used_carry
    kept = cond_read[:cond_nconsts] + body_read[:body_nconsts] + used_carry
    new_eqn = JaxprEqn(
        while_p,
        [v for v, k in zip(eqn.invars, kept) if k],
        [v for v, u in zip(eqn.outvars, used_carry) if u],
        dict(
            params,
            cond_jaxpr=passes.prune_jaxpr(cond, [True], cond_kept),
            body_jaxpr=passes.prune_jaxpr(body, used_carry, body_kept),
            cond_nconsts=sum(cond_read[:cond_nconsts]),
            body_nconsts=sum(body_read[:body_nconsts]),
        ),
        eqn.source_info,
    )
    return new_eqn, kept


passes.dce_rules[while_p] = _while_dce
