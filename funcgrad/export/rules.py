"""The user's derivative rules in an exported program, traced into programs of their own.

A `custom_jvp` function's jvp rule and a `custom_vjp` function's fwd and bwd are Python
functions. Exporting traces each at the types its equation gives it (a jvp rule on the
primals and their tangents; fwd on the primals; bwd on fwd's residuals and the outputs'
cotangents) and writes the programs in the file's rules table, so that the exported function
keeps the derivatives its author defined, at every order and under every transformation.
Reading builds rule objects that run those programs where the user's functions ran.

A rule's own program often calls the function it belongs to (a jvp rule computing the primal,
a fwd returning the function's value): that call's rule is the same rule, recognised by the
user's functions, the static arguments and the types, and written once.
"""

from __future__ import annotations

import numpy as np

from funcgrad import core
from funcgrad.export.encoding import ExportError, Reader, Writer
from funcgrad.interpreters.ad import Zero, float0, instantiate, tangent_aval
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, JaxprEqn, eval_jaxpr
from funcgrad.transforms.custom_derivatives import _FlatJVPRule, _FlatVJPRules


def write(writer: Writer, eqn: JaxprEqn, rule) -> dict:
    """How the equation's rule is written: the number of its entry in the table (tracing and
    writing it the first time), or, past the derivative order the file keeps, its name
    alone."""
    key = _identity(writer, eqn, rule)
    number = writer.rule_numbers.get(key)
    if number is not None:
        return {"rule": number}
    if writer.rule_depth == writer.vjp_order:
        return {"rule": None, "name": rule.__name__, "in_avals": _in_avals(writer, eqn, rule)}
    number = writer.rule_numbers[key] = len(writer.rules)
    writer.rules.append(None)
    writer.where.append(f"the derivative rules of {rule.__name__} in")
    writer.rule_depth += 1
    try:
        writer.rules[number] = _traced(writer, eqn, rule)
    finally:
        writer.rule_depth -= 1
        writer.where.pop()
    return {"rule": number}


def _in_avals(writer: Writer, eqn: JaxprEqn, rule) -> list | None:
    """A vjp rule's argument types, which batching reads without running the rule."""
    in_avals = getattr(rule, "in_avals", None)
    return None if in_avals is None else [writer.aval(a) for a in in_avals]


def _identity(writer: Writer, eqn: JaxprEqn, rule) -> tuple:
    """What makes two rule objects the same rule: for the rules of a user's function, the
    user's functions, the static arguments and the operand types; for any other (a batched
    rule), the object itself. Objects are compared by identity, and held by the writer so that
    their ids stay theirs."""
    avals = tuple(v.aval for v in eqn.invars)
    if type(rule) is _FlatJVPRule:
        held = (rule.rule, *rule.static)
    elif type(rule) is _FlatVJPRules:
        held = (rule.fwd, rule.bwd, *rule.static)
    else:
        held = (rule,)
    writer.held.append(held)
    return (eqn.primitive.name, tuple(map(id, held)), avals)


def _traced(writer: Writer, eqn: JaxprEqn, rule) -> dict:
    name = eqn.primitive.name
    if name == "custom_jvp_call":
        return _traced_jvp(writer, eqn, rule)
    if name == "custom_vjp_call":
        num_consts = eqn.params["num_consts"]
        primal_avals = [v.aval for v in eqn.invars[num_consts:]]
        forward, num_residuals = _traced_forward(writer, rule, primal_avals)
        residual_avals = forward.out_avals[len(forward.out_avals) - num_residuals :]
        out_avals = forward.out_avals[: len(forward.out_avals) - num_residuals]
        backward = _traced_backward(writer, rule, residual_avals, out_avals)
        return {
            "kind": "vjp",
            "name": rule.__name__,
            "forward": writer.closed(forward),
            "num_residuals": num_residuals,
            **backward,
        }
    # custom_lin: only the backward pass, its forward having run already.
    num_residuals = eqn.params["num_residuals"]
    residual_avals = [v.aval for v in eqn.invars[:num_residuals]]
    backward = _traced_backward(writer, rule, residual_avals, list(eqn.params["out_avals"]))
    return {
        "kind": "vjp",
        "name": rule.__name__,
        "forward": None,
        "num_residuals": num_residuals,
        **backward,
    }


def _traced_jvp(writer: Writer, eqn: JaxprEqn, rule) -> dict:
    num_consts = eqn.params["num_consts"]
    primal_avals = [v.aval for v in eqn.invars[num_consts:]]
    tangent_avals = [tangent_aval(a) for a in primal_avals]
    kept = [a.dtype != float0 for a in tangent_avals]
    out_avals = eqn.params["call_jaxpr"].out_avals
    out_kept = [tangent_aval(a).dtype != float0 for a in out_avals]

    def program(*flat):
        primals, given = list(flat[: len(primal_avals)]), iter(flat[len(primal_avals) :])
        tangents = [
            next(given) if keep else np.zeros(a.shape, float0)
            for keep, a in zip(kept, tangent_avals)
        ]
        primal_outs, tangent_outs = rule(primals, tangents)
        return list(primal_outs) + [
            instantiate(t) for t, keep in zip(tangent_outs, out_kept) if keep
        ]

    in_avals = primal_avals + [a for a, keep in zip(tangent_avals, kept) if keep]
    closed, _ = trace_to_jaxpr(program, in_avals, f"jvp rule of {rule.__name__}")
    return {
        "kind": "jvp",
        "name": rule.__name__,
        "program": writer.closed(closed),
        "tangents_kept": kept,
        "out_tangents_kept": out_kept,
    }


def _traced_forward(writer: Writer, rules, primal_avals) -> tuple[ClosedJaxpr, int]:
    counts = []

    def program(*primals):
        outs, residuals = rules.forward(list(primals))
        counts.append(len(residuals))
        return list(outs) + list(residuals)

    closed, _ = trace_to_jaxpr(program, primal_avals, f"fwd rule of {rules.__name__}")
    return closed, counts[0]


def _traced_backward(writer: Writer, rules, residual_avals, out_avals) -> dict:
    ct_avals = [tangent_aval(a) for a in out_avals]
    cts_kept = [a.dtype != float0 for a in ct_avals]
    in_ct_kept = [tangent_aval(a).dtype != float0 for a in rules.in_avals]

    def program(*flat):
        residuals, given = list(flat[: len(residual_avals)]), iter(flat[len(residual_avals) :])
        cts = [
            next(given) if keep else np.zeros(a.shape, float0)
            for keep, a in zip(cts_kept, ct_avals)
        ]
        cts_in = rules.backward(residuals, cts)
        return [instantiate(ct) for ct, keep in zip(cts_in, in_ct_kept) if keep]

    in_avals = list(residual_avals) + [a for a, keep in zip(ct_avals, cts_kept) if keep]
    closed, _ = trace_to_jaxpr(program, in_avals, f"bwd rule of {rules.__name__}")
    return {
        "backward": writer.closed(closed),
        "cotangents_kept": cts_kept,
        "in_avals": [writer.aval(a) for a in rules.in_avals],
    }


# ---------------------------------------------------------------------------------------------
# Reading


class ExportedJVPRule:
    """A jvp rule read back: runs its traced program on the primals and the tangents."""

    def __init__(self, entry: dict):
        self.__name__ = entry["name"]
        self.tangents_kept = entry["tangents_kept"]
        self.out_tangents_kept = entry["out_tangents_kept"]
        self.program: ClosedJaxpr | None = None  # read after every rule object exists

    def __call__(self, primals: list, tangents: list) -> tuple[list, list]:
        kept = [t for t, keep in zip(tangents, self.tangents_kept) if keep]
        outs = _run(self.program, [*primals, *kept])
        primal_outs, tangent_outs = (
            outs[: len(self.out_tangents_kept)],
            iter(outs[len(self.out_tangents_kept) :]),
        )
        return primal_outs, [
            next(tangent_outs) if keep else Zero(tangent_aval(core.get_aval(p)))
            for keep, p in zip(self.out_tangents_kept, primal_outs)
        ]

    def programs(self) -> list[ClosedJaxpr]:
        return [self.program]

    def __repr__(self) -> str:
        return self.__name__


class ExportedVJPRules:
    """A custom_vjp function's fwd and bwd read back (the protocol of the rules objects in
    `funcgrad.transforms.custom_derivatives`)."""

    def __init__(self, entry: dict, reader: Reader):
        self.__name__ = entry["name"]
        self.num_residuals = entry["num_residuals"]
        self.cotangents_kept = entry["cotangents_kept"]
        self.in_avals = [reader.aval(a) for a in entry["in_avals"]]
        self.forward_program: ClosedJaxpr | None = None
        self.backward_program: ClosedJaxpr | None = None

    def forward(self, primals: list) -> tuple[list, list]:
        if self.forward_program is None:
            raise ExportError(f"the exported rules of {self.__name__} hold its backward pass alone")
        outs = _run(self.forward_program, primals)
        split = len(outs) - self.num_residuals
        return outs[:split], outs[split:]

    def backward(self, residuals: list, cotangents: list) -> list:
        kept = [ct for ct, keep in zip(cotangents, self.cotangents_kept) if keep]
        cts = iter(_run(self.backward_program, [*residuals, *kept]))
        return [
            next(cts) if tangent_aval(a).dtype != float0 else Zero(tangent_aval(a))
            for a in self.in_avals
        ]

    def programs(self) -> list[ClosedJaxpr]:
        forward = [] if self.forward_program is None else [self.forward_program]
        return [*forward, self.backward_program]

    def __repr__(self) -> str:
        return self.__name__


class LeftOutRule:
    """The rule of a function whose derivatives the file does not keep to this order (see
    `Exported.serialize`): the function computes, and differentiating it says why not."""

    def __init__(self, written: dict, reader: Reader):
        self.__name__ = written["name"]
        avals = written["in_avals"]
        self.in_avals = None if avals is None else [reader.aval(a) for a in avals]

    def _refuse(self, *args):
        raise ExportError(
            f"the exported function's derivative rules of {self.__name__} were left out: it "
            "was serialized with a vjp_order below the order of this derivative; serialize "
            "it with a higher vjp_order"
        )

    __call__ = forward = backward = _refuse

    def programs(self) -> list[ClosedJaxpr]:
        return []

    def __repr__(self) -> str:
        return self.__name__


def read_table(entries: list, reader: Reader) -> None:
    """Fill `reader.rules` from the table: every rule object first, then their programs,
    which may refer to any of them."""
    for entry in entries:
        kind = entry["kind"]
        reader.rules.append(
            ExportedJVPRule(entry) if kind == "jvp" else ExportedVJPRules(entry, reader)
        )
    for rule, entry in zip(reader.rules, entries):
        if entry["kind"] == "jvp":
            rule.program = reader.closed(entry["program"])
        else:
            forward = entry["forward"]
            rule.forward_program = None if forward is None else reader.closed(forward)
            rule.backward_program = reader.closed(entry["backward"])


def _run(program: ClosedJaxpr, args: list) -> list:
    return list(eval_jaxpr(program.jaxpr, program.consts, *args))
