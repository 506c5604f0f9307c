"""Partial evaluation: splitting what is known now from what is known later.

`PartialEvalTrace` does it while tracing: a primitive whose operands are all known runs right
away on the parent trace, the rest is staged. `partial_eval_jaxpr` does it to a jaxpr that
exists already, with a policy deciding which known values the unknown part may keep as
residuals and which it recomputes; higher-order primitives (jit, checkpoint) use it to split
the programs they carry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from funcgrad import core
from funcgrad.interpreters.staging import StagingTrace, StagingTracer, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, eval_jaxpr


class PartialEvalTrace(StagingTrace):
    """Staging that splits known from unknown: a primitive none of whose operands is this
    trace's tracer is computed by the parent right away, and only the rest is staged.

    Under it, the JVP trace's primal computations run (they are known) while its tangent
    computations, which depend on the unknown tangent inputs, become a linear jaxpr whose
    constvars are the residuals.
    """

    def is_unknown(self, x) -> bool:
        return isinstance(x, StagingTracer) and x._trace is self

    def process_primitive(self, primitive, args, params):
        if not any(self.is_unknown(a) for a in args):
            with core.set_current_trace(self.parent):
                return primitive.bind(*args, **params)
        rule = primitive.partial_eval
        if rule is not None and not all(self.is_unknown(a) for a in args):
            return rule(self, args, params)
        return super().process_primitive(primitive, args, params)


def unknown_outputs(jaxpr: Jaxpr, unknowns: Sequence[bool]) -> list[bool]:
    """Which outputs of `jaxpr` depend on the inputs marked unknown."""
    unknown_vars = {v for v, u in zip(jaxpr.invars, unknowns) if u}
    for eqn in jaxpr.eqns:
        if any(type(v) is not Literal and v in unknown_vars for v in eqn.invars):
            unknown_vars.update(eqn.outvars)
    return [type(v) is not Literal and v in unknown_vars for v in jaxpr.outvars]


def partial_eval_jaxpr(
    closed: ClosedJaxpr,
    unknowns: Sequence[bool],
    out_unknown: Sequence[bool],
    saveable: Callable,
) -> tuple[ClosedJaxpr, ClosedJaxpr, int]:
    """Split a jaxpr into a known part and an unknown part that recomputes what is not saved.

    known:   known inputs -> (known outputs, residuals)
    unknown: (residuals, unknown inputs) -> unknown outputs
    Residuals are known inputs and outputs of saveable equations that the unknown part reads.
    `out_unknown` marks the outputs the unknown part returns; it may include outputs that
    depend on no unknown input (a jvp rule may return a tangent it knows is zero), which then
    travel as residuals or are recomputed.
    """
    jaxpr = closed.jaxpr
    unknown_vars = {v for v, u in zip(jaxpr.invars, unknowns) if u}
    producer: dict[Var, JaxprEqn] = {}
    unknown_eqns = []
    for eqn in jaxpr.eqns:
        if any(type(v) is not Literal and v in unknown_vars for v in eqn.invars):
            unknown_eqns.append(eqn)
            unknown_vars.update(eqn.outvars)
        else:
            for v in eqn.outvars:
                producer[v] = eqn

    # Walk back from the unknown side's needs: saved values become residuals, the rest is
    # recomputed on the unknown side.
    residuals: list[Var] = []
    recomputed: set[int] = set()
    unknown_outvars = [v for v, u in zip(jaxpr.outvars, out_unknown) if u]
    needed = [v for e in unknown_eqns for v in e.invars] + unknown_outvars
    pending = [v for v in needed if type(v) is not Literal]
    seen: set[Var] = set(jaxpr.constvars)  # consts are closed over by both sides
    while pending:
        v = pending.pop()
        if v in seen or v in unknown_vars:
            continue
        seen.add(v)
        eqn = producer.get(v)
        if eqn is None or saveable(eqn.primitive, *(x.aval for x in eqn.invars), **eqn.params):
            residuals.append(v)
        elif id(eqn) not in recomputed:
            recomputed.add(id(eqn))
            pending.extend(x for x in eqn.invars if type(x) is not Literal)
    # Outputs on the known side are the primal outputs; the unknown side returns the rest.
    known_outvars = [v for v, u in zip(jaxpr.outvars, out_unknown) if not u]
    known_jaxpr = Jaxpr(
        jaxpr.constvars,
        [v for v, u in zip(jaxpr.invars, unknowns) if not u],
        known_outvars + residuals,
        [e for e in jaxpr.eqns if e not in unknown_eqns],  # by what they read: some have no outputs
    )
    unknown_jaxpr = Jaxpr(
        jaxpr.constvars,
        residuals + [v for v, u in zip(jaxpr.invars, unknowns) if u],
        unknown_outvars,
        [e for e in jaxpr.eqns if id(e) in recomputed or e in unknown_eqns],
    )
    return (
        ClosedJaxpr(known_jaxpr, closed.consts),
        ClosedJaxpr(unknown_jaxpr, closed.consts),
        len(residuals),
    )


class SplitJaxpr(NamedTuple):
    """A program split in two by `split_jaxpr`.

    known:   known inputs -> (known outputs, residuals)
    unknown: (residuals, unknown inputs) -> unknown outputs
    """

    known: ClosedJaxpr
    unknown: ClosedJaxpr
    num_residuals: int
    out_unknown: list[bool]


def split_jaxpr(
    closed: ClosedJaxpr,
    unknowns: Sequence[bool],
    force_unknown: Sequence[bool] | None = None,
    what: str = "a program",
) -> SplitJaxpr:
    """Split a program by evaluating it under a partial-evaluation trace.

    Unlike `partial_eval_jaxpr`, a pass over the equations, this lets the higher-order
    primitives nested in the program (jit, cond, scan) split themselves with their own rules,
    so the unknown part keeps only their unknown parts. Every known value the unknown part
    reads is a residual (nothing is recomputed). Outputs marked in `force_unknown` are returned
    by the unknown part even when they are known.
    """
    in_avals = closed.in_avals
    force = force_unknown if force_unknown is not None else [False] * len(closed.out_avals)
    found: dict = {}

    def known_fun(*known_args):
        trace = PartialEvalTrace(core.current_trace(), f"partial evaluation of {what}")
        known_iter = iter(known_args)
        inputs = [trace.new_arg(a) if u else next(known_iter) for a, u in zip(in_avals, unknowns)]
        try:
            with core.set_current_trace(trace):
                outs = eval_jaxpr(closed.jaxpr, closed.consts, *inputs)
            out_unknown = [trace.is_unknown(o) or f for o, f in zip(outs, force)]
            staged = trace.to_closed_jaxpr([o for o, u in zip(outs, out_unknown) if u])
        finally:
            trace.alive = False
        jaxpr = staged.jaxpr
        hoisted = Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)
        found.update(
            unknown=ClosedJaxpr(hoisted, []),
            num_residuals=len(staged.consts),
            out_unknown=out_unknown,
        )
        return [o for o, u in zip(outs, out_unknown) if not u] + staged.consts

    known_avals = [a for a, u in zip(in_avals, unknowns) if not u]
    known, _ = trace_to_jaxpr(known_fun, known_avals, f"partial evaluation of {what}")
    return SplitJaxpr(known, found["unknown"], found["num_residuals"], found["out_unknown"])
