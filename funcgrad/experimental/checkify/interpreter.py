"""The checkify transformation: a jaxpr evaluated with an error value threaded through it.

`checkify` stages the user's function into a jaxpr, then evaluates the jaxpr equation by
equation under the current trace (so checkify composes with jit, vmap and grad around it).
Most equations are bound as they are; `check` equations merge their error into the threaded
one; the enabled automatic checks (`automatic.py`) add an error after the primitives they
watch; and the primitives that carry programs (control flow, jit, pmap, checkpoint, the
custom_jvp / custom_vjp / custom_vmap calls, linear_solve) get new programs that take and
return the error's values beside their own (`rules`). The first failure in program order wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from funcgrad import caches, core
from funcgrad.experimental.checkify import automatic
from funcgrad.experimental.checkify.check import check_p, first_failed_lane
from funcgrad.experimental.checkify.error import Error, Signature, layout_avals
from funcgrad.interpreters.ad import Zero, tangent_aval
from funcgrad.interpreters.parallel import AxisEnvTrace
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, literal_value
from funcgrad.lax.control_flow.conditionals import cond_p
from funcgrad.lax.control_flow.loops import while_p
from funcgrad.lax.control_flow.scan import scan_p
from funcgrad.lax.control_flow.solves import linear_solve_p
from funcgrad.transforms.checkpoint import checkpoint_p
from funcgrad.transforms.custom_batching import custom_vmap_call_p
from funcgrad.transforms.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p
from funcgrad.transforms.jit import jit_p
from funcgrad.transforms.pmap import pmap_p

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
    found = {}  # the output error's static part (its values are tracers of the staging)

    def flat_fun(*flat):
        error = Error.from_leaves(layout, flat[error_at : error_at + num_error], {})
        args = list(flat[:error_at]) + list(flat[error_at + num_error :])
        outs, out_error = fun(error, args)
        found.update(layout=out_error.layout, messages=tuple(out_error.messages.items()))
        return out_error.leaves() + list(outs)

    avals = list(in_avals[:error_at]) + error_avals + list(in_avals[error_at:])
    closed, _ = trace_to_jaxpr(flat_fun, avals, f"checkify({what})")
    return closed, found["layout"], found["messages"]


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


def _checkpoint_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    program, layout, messages = _checkified_program(eqn.params["jaxpr"], enabled, error.layout, 0)
    outs = checkpoint_p.bind(*error.leaves(), *invals, **{**eqn.params, "jaxpr": program})
    return _outputs_with_error(outs, layout, {**error.messages, **dict(messages)})


def _hoisted(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """`closed` with its consts made leading inputs, and the consts."""
    jaxpr = closed.jaxpr
    hoisted = Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)
    return ClosedJaxpr(hoisted, []), list(closed.consts)


def _pmap_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    """Every device checks its own shard from the error before the call; the error after it
    is that of the first device that failed (of device 0 if none did)."""
    params = eqn.params
    name = params["name"]
    axis_env = AxisEnvTrace(
        core.current_trace(), params["axis_name"], params["axis_size"], f"pmap({name})"
    )
    with core.set_current_trace(axis_env):
        program, layout, messages = _checkified_program(params["jaxpr"], enabled, error.layout, 0)
    program, consts = _hoisted(program)
    error_values = error.leaves()
    num_error = len(layout_avals(layout))
    outs = pmap_p.bind(
        *consts,
        *error_values,
        *invals,
        **{
            **params,
            "jaxpr": program,
            "in_mapped": (False,) * (len(consts) + len(error_values)) + params["in_mapped"],
            "out_mapped": (True,) * num_error + params["out_mapped"],
            "name": f"checkify({name})",
        },
    )
    per_device = Error.from_leaves(layout, outs[:num_error], {**error.messages, **dict(messages)})
    return outs[num_error:], first_failed_lane(per_device)


def _error_outputs_last(closed: ClosedJaxpr, num_error: int) -> ClosedJaxpr:
    jaxpr = closed.jaxpr
    outvars = jaxpr.outvars[num_error:] + jaxpr.outvars[:num_error]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, jaxpr.eqns), closed.consts)


def _ignoring_inputs(closed: ClosedJaxpr, position: int, avals: list) -> ClosedJaxpr:
    """`closed` with unused inputs of `avals` inserted at `position`."""
    jaxpr = closed.jaxpr
    invars = jaxpr.invars[:position] + [Var(a) for a in avals] + jaxpr.invars[position:]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns), closed.consts)


def _linear_solve_rule(error: Error, enabled, eqn: JaxprEqn, invals):
    """The solve that runs is checked; the programs only derivatives use (matvec, vecmat, the
    transpose solve) are not. The error's values join the solve's own consts, and its new
    values follow the solution and aux as more aux outputs, so the primitive's rules (a
    tangent or transposed solve reads the solution alone) carry them unchanged."""
    params = eqn.params
    matvec, vecmat, solve, transpose_solve = params["const_lengths"]
    error_at = matvec + vecmat + solve
    program, layout, messages = _checkified_program(
        params["call_jaxpr"], enabled, error.layout, error_at
    )
    num_error = len(layout_avals(layout))
    error_values = error.leaves()
    transpose_call = params["transpose_call_jaxpr"]
    if transpose_call is not None:
        # Its operands: (vecmat, matvec, transpose solve, solve) consts, then b.
        transpose_call = _ignoring_inputs(
            transpose_call, error_at + transpose_solve, layout_avals(error.layout)
        )
    outs = linear_solve_p.bind(
        *invals[:error_at],
        *error_values,
        *invals[error_at:],
        **{
            **params,
            "call_jaxpr": _error_outputs_last(program, num_error),
            "transpose_call_jaxpr": transpose_call,
            "const_lengths": (matvec, vecmat, solve + len(error_values), transpose_solve),
        },
    )
    num_out = len(outs) - num_error
    new_error = Error.from_leaves(layout, outs[num_out:], {**error.messages, **dict(messages)})
    return outs[:num_out], new_error


# The primitives carrying a user's derivative or batching rule. The function the call runs is
# checked: its program takes and returns the error's values after the consts it closes over.
# The user's rules stand in for the function where a transformation outside checkify
# differentiates or batches the call; they are not checked, and pass the error on unchanged.


class _Passing:
    """What the wrapped rules share: the error's slots on entry and on exit."""

    def __init__(self, rule, in_layout: Layout, out_layout: Layout):
        self.rule = rule
        self.in_layout = in_layout
        self.out_layout = out_layout
        self.num_in = len(layout_avals(in_layout))
        self.__name__ = rule.__name__

    def passed_on(self, error_values: list) -> list:
        """The error's values on exit: those it entered with, with zeros in new slots."""
        error = Error.from_leaves(self.in_layout, error_values, {})
        return error.padded(self.out_layout).leaves()

    def __repr__(self) -> str:
        return self.__name__


class _PassingJVPRule(_Passing):
    def __call__(self, primals: list, tangents: list) -> tuple[list, list]:
        primal_outs, tangent_outs = self.rule(primals[self.num_in :], tangents[self.num_in :])
        error_values = self.passed_on(primals[: self.num_in])
        error_tangents = [Zero(tangent_aval(core.get_aval(v))) for v in error_values]
        return error_values + list(primal_outs), error_tangents + list(tangent_outs)


class _PassingVJPRules(_Passing):
    def __init__(self, rules, in_layout: Layout, out_layout: Layout):
        super().__init__(rules, in_layout, out_layout)
        self.in_avals = layout_avals(in_layout) + list(rules.in_avals)

    def forward(self, primals: list) -> tuple[list, list]:
        outs, residuals = self.rule.forward(primals[self.num_in :])
        return self.passed_on(primals[: self.num_in]) + list(outs), residuals

    def backward(self, residuals: list, cotangents: list) -> list:
        num_out = len(layout_avals(self.out_layout))
        cts = self.rule.backward(residuals, cotangents[num_out:])
        return [Zero(tangent_aval(a)) for a in layout_avals(self.in_layout)] + list(cts)


class _PassingVmapRule(_Passing):
    def __call__(self, axis_size: int, in_batched: list[bool], leaves: list):
        outs, out_batched = self.rule(axis_size, in_batched[self.num_in :], leaves[self.num_in :])
        # Which of the error's values on exit are batched: those it entered with, as they came.
        entered = Error.from_leaves(self.in_layout, in_batched[: self.num_in], {})
        error_batched = [entered.flag, entered.code] + [
            b for sig in self.out_layout for b in entered.payloads.get(sig, (False,) * len(sig))
        ]
        error_values = self.passed_on(leaves[: self.num_in])
        return error_values + list(outs), error_batched + list(out_batched)


def _custom_call_rule(primitive, rule_param: str, wrap: type):
    def rule(error: Error, enabled, eqn: JaxprEqn, invals):
        params = eqn.params
        num_consts = params["num_consts"]
        program, layout, messages = _checkified_program(
            params["call_jaxpr"], enabled, error.layout, num_consts
        )
        program, consts = _hoisted(program)
        outs = primitive.bind(
            *consts,
            *invals[:num_consts],
            *error.leaves(),
            *invals[num_consts:],
            call_jaxpr=program,
            num_consts=len(consts) + num_consts,
            **{rule_param: wrap(params[rule_param], error.layout, layout)},
        )
        return _outputs_with_error(outs, layout, {**error.messages, **dict(messages)})

    return rule


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
    checkpoint_p: _checkpoint_rule,
    pmap_p: _pmap_rule,
    cond_p: _cond_rule,
    scan_p: _scan_rule,
    while_p: _while_rule,
    linear_solve_p: _linear_solve_rule,
    custom_jvp_call_p: _custom_call_rule(custom_jvp_call_p, "jvp", _PassingJVPRule),
    custom_vjp_call_p: _custom_call_rule(custom_vjp_call_p, "rules", _PassingVJPRules),
    custom_vmap_call_p: _custom_call_rule(custom_vmap_call_p, "rule", _PassingVmapRule),
}
