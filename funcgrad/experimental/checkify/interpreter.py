"""The checkify transformation: a jaxpr evaluated with an error value threaded through it.

`checkify` stages the user's function into a jaxpr, then evaluates the jaxpr equation by
equation under the current trace (so checkify composes with jit, vmap and grad around it).
Most equations are bound as they are; `check` equations merge their error into the threaded
one; the enabled automatic checks (`automatic.py`) add an error after the primitives they
watch; and the control-flow primitives and jit get new programs that take and return the
error's values beside their own (`rules`). The first failure in program order wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from funcgrad import caches
from funcgrad.experimental.checkify import automatic
from funcgrad.experimental.checkify.check import check_p
from funcgrad.experimental.checkify.error import Error, Signature, layout_avals
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, literal_value
from funcgrad.lax.control_flow.conditionals import cond_p
from funcgrad.lax.control_flow.loops import while_p
from funcgrad.lax.control_flow.scan import scan_p
from funcgrad.transforms.jit import jit_p

Layout = tuple[Signature, ...]


def eval_checkified(
    jaxpr: Jaxpr, consts: Sequence, args: Sequence, error: Error, enabled: frozenset
) -> tuple[list, Error]:
    """Evaluate `jaxpr` under the current trace, threading `error` through it."""
    env: dict = {}

    def read(v):
        return literal_value(v) if type(v) is Literal else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        rule = rules.get(eqn.primitive)
        if rule is None:
            outs = eqn.primitive.bind(*invals, **eqn.params)
        else:
            outs, error = rule(error, enabled, eqn, invals)
        for new_error in automatic.errors(eqn, invals, outs, enabled):
            error = error.merged(new_error)
        if eqn.primitive.multiple_results:
            env.update(zip(eqn.outvars, outs))
        else:
            env[eqn.outvars[0]] = outs
    return [read(v) for v in jaxpr.outvars], error


# ---------------------------------------------------------------------------------------------
# Programs that take and return the error


def _union(*layouts: Layout) -> Layout:
    return tuple(sorted(set().union(*layouts)))


def _stage_with_error(
    fun: Callable, in_avals: Sequence, layout: Layout, error_at: int, what: str
) -> tuple[ClosedJaxpr, Layout, tuple]:
    """Stage `fun(error, args) -> (outs, error)` into a program whose inputs are `in_avals`
    with the error's values inserted at `error_at`, and whose outputs are the error's values
    followed by `outs`. Returns it, its output error's layout and the messages it adds."""
    error_avals = layout_avals(layout)
    num_error = len(error_avals)
    out_error = None

    def flat_fun(*flat):
        nonlocal out_error
        error = Error.from_leaves(layout, flat[error_at : error_at + num_error], {})
        args = list(flat[:error_at]) + list(flat[error_at + num_error :])
        outs, out_error = fun(error, args)
        return out_error.leaves() + list(outs)

    avals = list(in_avals[:error_at]) + error_avals + list(in_avals[error_at:])
    closed, _ = trace_to_jaxpr(flat_fun, avals, f"checkify({what})")
    return closed, out_error.layout, tuple(out_error.messages.items())


@caches.program_cache
def _checkified_program(
    closed: ClosedJaxpr, enabled: frozenset, layout: Layout, error_at: int
) -> tuple[ClosedJaxpr, Layout, tuple]:
    """`closed` taking and returning the error (see `_stage_with_error`)."""

    def fun(error, args):
        return eval_checkified(closed.jaxpr, closed.consts, args, error, enabled)

    return _stage_with_error(fun, closed.in_avals, layout, error_at, "a program")


def _grown(error: Error, messages: tuple, layout: Layout) -> Error:
    """`error` given the slots of `layout` and the messages of a program it passes through."""
    padded = error.padded(layout)
    return Error(padded.flag, padded.code, padded.payloads, {**error.messages, **dict(messages)})


def _loop_program(
    make: Callable[[Layout], tuple[ClosedJaxpr, Layout, tuple]], layout: Layout
) -> tuple[ClosedJaxpr, Layout, tuple]:
    """The checkified body of a loop: its error must leave with the slots it entered with, so
    the body is staged again with the slots it added until it adds none."""
    while True:
        program, out_layout, messages = make(layout)
        if out_layout == layout:
            return program, layout, messages
        layout = _union(layout, out_layout)


# ---------------------------------------------------------------------------------------------
# Rules: rule(error, enabled, eqn, invals) -> (outs, error)


def _check_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    new_error = Error.tree_unflatten(eqn.params["error_aux"], invals).only(enabled)
    return [], error if new_error is None else error.merged(new_error)


def _outputs_with_error(outs: list, layout: Layout, messages: dict) -> tuple[list, Error]:
    num_error = len(layout_avals(layout))
    return outs[num_error:], Error.from_leaves(layout, outs[:num_error], messages)


def _jit_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    program, layout, messages = _checkified_program(eqn.params["jaxpr"], enabled, error.layout, 0)
    params = {**eqn.params, "jaxpr": program, "name": f"checkify({eqn.params['name']})"}
    outs = jit_p.bind(*error.leaves(), *invals, **params)
    return _outputs_with_error(outs, layout, {**error.messages, **dict(messages)})


def _cond_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    index, *operands = invals
    branches = eqn.params["branches"]
    staged = [_checkified_program(b, enabled, error.layout, 0) for b in branches]
    layout = _union(error.layout, *(out_layout for _, out_layout, _ in staged))
    if any(out_layout != layout for _, out_layout, _ in staged):
        # Each branch must return every slot some branch adds.
        staged = [_checkified_program(b, enabled, layout, 0) for b in branches]
    for _, _, messages in staged:
        error = _grown(error, messages, layout)
    new_branches = tuple(program for program, _, _ in staged)
    outs = cond_p.bind(index, *error.leaves(), *operands, branches=new_branches)
    return _outputs_with_error(outs, layout, error.messages)


def _scan_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    params = eqn.params
    num_consts = params["num_consts"]
    body, layout, messages = _loop_program(
        lambda layout: _checkified_program(params["jaxpr"], enabled, layout, num_consts),
        error.layout,
    )
    error = _grown(error, messages, layout)
    error_values = error.leaves()
    outs = scan_p.bind(
        *invals[:num_consts],
        *error_values,
        *invals[num_consts:],
        **{**params, "jaxpr": body, "num_carry": params["num_carry"] + len(error_values)},
    )
    return _outputs_with_error(outs, layout, error.messages)


@caches.program_cache
def _while_body(
    cond_jaxpr: ClosedJaxpr,
    body_jaxpr: ClosedJaxpr,
    cond_nconsts: int,
    enabled: frozenset,
    layout: Layout,
) -> tuple[ClosedJaxpr, Layout, tuple]:
    """(cond consts, body consts, error, carry) -> (error, carry): the body, then the loop's
    predicate on the new carry, both checked (the predicate's checks run on every carry the
    loop tests)."""
    body_in = body_jaxpr.in_avals
    carry_avals = body_in[len(body_in) - len(body_jaxpr.out_avals) :]
    in_avals = cond_jaxpr.in_avals[:cond_nconsts] + body_in

    def fun(error, args):
        cond_consts, rest = args[:cond_nconsts], args[cond_nconsts:]
        body_consts = rest[: len(rest) - len(carry_avals)]
        carry = rest[len(body_consts) :]
        carry, error = eval_checkified(
            body_jaxpr.jaxpr, body_jaxpr.consts, body_consts + carry, error, enabled
        )
        _, error = eval_checkified(
            cond_jaxpr.jaxpr, cond_jaxpr.consts, cond_consts + carry, error, enabled
        )
        return carry, error

    return _stage_with_error(fun, in_avals, layout, len(in_avals) - len(carry_avals), "a loop")


@caches.program_cache
def _while_predicate(cond_jaxpr: ClosedJaxpr, cond_nconsts: int, layout: Layout) -> ClosedJaxpr:
    """(cond consts, error, carry) -> predicate. Its checks are counted by the body (and
    before the loop), so here they are evaluated with every category disabled."""
    num_error = len(layout_avals(layout))
    in_avals = cond_jaxpr.in_avals
    avals = in_avals[:cond_nconsts] + layout_avals(layout) + in_avals[cond_nconsts:]

    def predicate(*flat):
        error = Error.from_leaves(layout, flat[cond_nconsts : cond_nconsts + num_error], {})
        args = list(flat[:cond_nconsts]) + list(flat[cond_nconsts + num_error :])
        outs, _ = eval_checkified(cond_jaxpr.jaxpr, cond_jaxpr.consts, args, error, frozenset())
        return outs

    return trace_to_jaxpr(predicate, avals, "checkify(a loop predicate)")[0]


def _while_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    params = eqn.params
    cond_jaxpr, body_jaxpr = params["cond_jaxpr"], params["body_jaxpr"]
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    cond_consts = invals[:cond_nconsts]
    body_consts = invals[cond_nconsts : cond_nconsts + body_nconsts]
    carry = invals[cond_nconsts + body_nconsts :]
    # The predicate's checks on the initial carry.
    _, error = eval_checkified(
        cond_jaxpr.jaxpr, cond_jaxpr.consts, cond_consts + carry, error, enabled
    )
    body, layout, messages = _loop_program(
        lambda layout: _while_body(cond_jaxpr, body_jaxpr, cond_nconsts, enabled, layout),
        error.layout,
    )
    error = _grown(error, messages, layout)
    outs = while_p.bind(
        *cond_consts,
        *cond_consts,
        *body_consts,
        *error.leaves(),
        *carry,
        cond_jaxpr=_while_predicate(cond_jaxpr, cond_nconsts, layout),
        body_jaxpr=body,
        cond_nconsts=cond_nconsts,
        body_nconsts=cond_nconsts + body_nconsts,
    )
    return _outputs_with_error(outs, layout, error.messages)


rules: dict = {
    check_p: _check_rule,
    jit_p: _jit_rule,
    cond_p: _cond_rule,
    scan_p: _scan_rule,
    while_p: _while_rule,
}
