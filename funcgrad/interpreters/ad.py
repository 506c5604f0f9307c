"""Automatic differentiation: the JVP trace, symbolic zeros, and transposition of linear jaxprs.

Forward mode is an interpretation: a `JVPTracer` carries a primal and a tangent, and each
primitive's `jvp` rule maps (primals, tangents) to (primal_out, tangent_out). Reverse mode is
not written separately: `linearize` runs the JVP trace under a partial-evaluation trace so the
tangent computation is staged into a linear jaxpr, and `backward_pass` runs that jaxpr
backwards with each linear primitive's `transpose` rule.

Tangents of integer and boolean values are always symbolic zeros; at the API boundary they have
the `float0` dtype, as in JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from funcgrad import core, dtypes
from funcgrad.core import ShapedArray
from funcgrad.errors import ConcretizationTypeError
from funcgrad.ir import ClosedJaxpr, Jaxpr, Literal, eval_jaxpr, literal_value

float0 = dtypes.float0


def tangent_aval(aval: ShapedArray) -> ShapedArray:
    """Tangents of floats share the primal's type; integers and bools have float0 tangents."""
    if dtypes.is_inexact(aval.dtype):
        return ShapedArray(aval.shape, aval.dtype, aval.weak_type)
    return ShapedArray(aval.shape, float0)


class Zero:
    """A symbolic zero tangent or cotangent: its aval is known, its values never computed."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    @staticmethod
    def like(x) -> Zero:
        return Zero(tangent_aval(core.get_aval(x)))

    def __repr__(self) -> str:
        return f"Zero({self.aval.str_short()})"


def zeros_like_aval(aval: ShapedArray):
    from funcgrad.lax.shapes import full

    if aval.dtype == float0:
        return np.zeros(aval.shape, float0)
    return full(aval.shape, 0, aval.dtype)


def instantiate(tangent):
    """A concrete array for `tangent`, materializing a symbolic zero."""
    return zeros_like_aval(tangent.aval) if type(tangent) is Zero else tangent


def add_tangents(a, b):
    if type(a) is Zero:
        return b
    if type(b) is Zero:
        return a
    from funcgrad.lax.elementwise import add_p

    return add_p.bind(a, b)


# ---------------------------------------------------------------------------------------------
# The JVP trace


class JVPTracer(core.Tracer):
    __slots__ = ("primal", "tangent")

    def __init__(self, trace: JVPTrace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self) -> ShapedArray:
        return core.get_aval(self.primal)

    def to_concrete_value(self):
        primal = self.primal
        if isinstance(primal, core.Tracer):
            return primal.to_concrete_value()
        return primal

    # bool() and int() are piecewise constant, so their derivative, 0, is what dropping the
    # tangent gives; a float is not: float(x) * x would silently differentiate as x. As JAX,
    # float() and complex() of a value being differentiated raise instead.
    def __float__(self):
        self._check_no_tangent("float")
        return super().__float__()

    def __complex__(self):
        self._check_no_tangent("complex")
        return super().__complex__()

    def _check_no_tangent(self, conversion: str) -> None:
        if type(self.tangent) is not Zero:
            raise ConcretizationTypeError(
                self,
                f"{conversion}() of a value being differentiated would be a constant and drop "
                "its derivative; keep it an array (funcgrad.numpy functions differentiate).",
            )


class JVPTrace(core.Trace):
    def primal_and_tangent(self, x):
        if type(x) is JVPTracer and x._trace is self:
            return x.primal, x.tangent
        if isinstance(x, core.Tracer):
            x.check_alive()
        return x, Zero.like(x)

    def process_primitive(self, primitive, args, params):
        primals, tangents = zip(*map(self.primal_and_tangent, args)) if args else ((), ())
        if all(type(t) is Zero for t in tangents):
            with core.set_current_trace(self.parent):
                return primitive.bind(*primals, **params)
        if primitive.jvp is None:
            reason = primitive.not_applicable.get("jvp")
            raise NotImplementedError(
                f"differentiation rule for primitive '{primitive.name}' is not implemented"
                + (f": {reason}" if reason else "")
            )
        with core.set_current_trace(self.parent):
            primal_out, tangent_out = primitive.jvp(list(primals), list(tangents), **params)
        if primitive.multiple_results:
            return [self.wrap(p, t) for p, t in zip(primal_out, tangent_out)]
        return self.wrap(primal_out, tangent_out)

    def wrap(self, primal, tangent):
        # A value with a zero tangent is a constant to this trace: no tracer needed.
        return primal if type(tangent) is Zero else JVPTracer(self, primal, tangent)


# ---------------------------------------------------------------------------------------------
# Rule-writing helpers, so that most primitives declare their derivative in one line


def defjvp(primitive: core.Primitive, *tangent_rules: Callable | None) -> None:
    """Declare a jvp from one rule per operand: `rule(tangent, *primals, **params)` returns
    that operand's contribution to the output tangent (None marks a non-differentiable one)."""

    def jvp(primals, tangents, **params):
        primal_out = primitive.bind(*primals, **params)
        tangent_out = Zero.like(primal_out)
        for rule, tangent in zip(tangent_rules, tangents):
            if rule is not None and type(tangent) is not Zero:
                tangent_out = add_tangents(tangent_out, rule(tangent, *primals, **params))
        return primal_out, tangent_out

    primitive.def_jvp(jvp)


def defjvp_with_output(primitive: core.Primitive, *tangent_rules: Callable | None) -> None:
    """Like `defjvp`, with rules `rule(tangent, primal_out, *primals, **params)` that reuse the
    primal output (exp, tanh, sqrt, ...)."""

    def jvp(primals, tangents, **params):
        primal_out = primitive.bind(*primals, **params)
        tangent_out = Zero.like(primal_out)
        for rule, tangent in zip(tangent_rules, tangents):
            if rule is not None and type(tangent) is not Zero:
                contribution = rule(tangent, primal_out, *primals, **params)
                tangent_out = add_tangents(tangent_out, contribution)
        return primal_out, tangent_out

    primitive.def_jvp(jvp)


def defjvp_zero(primitive: core.Primitive) -> None:
    """The output is piecewise constant in the inputs (comparisons, floor, sign, ...)."""

    def jvp(primals, tangents, **params):
        primal_out = primitive.bind(*primals, **params)
        if primitive.multiple_results:
            return primal_out, [Zero.like(p) for p in primal_out]
        return primal_out, Zero.like(primal_out)

    primitive.def_jvp(jvp)


def deflinear(primitive: core.Primitive, transpose_rule: Callable) -> None:
    """A primitive linear in all its operands jointly: its tangent is itself applied to the
    tangents, and `transpose_rule(cotangent, *operands, **params)` gives operand cotangents."""

    def jvp(primals, tangents, **params):
        primal_out = primitive.bind(*primals, **params)
        if all(type(t) is Zero for t in tangents):
            return primal_out, Zero.like(primal_out)
        tangent_out = primitive.bind(*map(instantiate, tangents), **params)
        return primal_out, tangent_out

    primitive.def_jvp(jvp)
    primitive.def_transpose(transpose_rule)


# ---------------------------------------------------------------------------------------------
# Transposition


class UndefinedPrimal:
    """A linear input of a transposed primitive: its value is unknown, its cotangent wanted."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined(x) -> bool:
    return type(x) is UndefinedPrimal


def backward_pass(
    jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Any], cotangents_out: Sequence[Any]
) -> list:
    """Transpose a jaxpr that is linear in the `args` given as `UndefinedPrimal`.

    Equations whose inputs are all defined (residual computations) are evaluated forwards
    first; the linear ones are then run backwards, accumulating cotangents. Returns one
    cotangent per arg (a `Zero` where none flowed; None for defined args).
    """
    known: dict = dict(zip(jaxpr.constvars, consts))
    linear_vars: set = set()
    for var, arg in zip(jaxpr.invars, args):
        if is_undefined(arg):
            linear_vars.add(var)
        else:
            known[var] = arg

    def read_known(v):
        return literal_value(v) if type(v) is Literal else known[v]

    linear_eqns = []
    for eqn in jaxpr.eqns:
        if any(type(v) is not Literal and v in linear_vars for v in eqn.invars):
            linear_eqns.append(eqn)
            linear_vars.update(eqn.outvars)
        else:
            outs = eqn.primitive.bind(*map(read_known, eqn.invars), **eqn.params)
            known.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))

    cotangents: dict = {}

    def accumulate(var, ct) -> None:
        if type(var) is Literal or var not in linear_vars or ct is None:
            return
        cotangents[var] = add_tangents(cotangents[var], ct) if var in cotangents else ct

    for var, ct in zip(jaxpr.outvars, cotangents_out):
        accumulate(var, ct)
    for eqn in reversed(linear_eqns):
        cts_out = [cotangents.pop(v, Zero(tangent_aval(v.aval))) for v in eqn.outvars]
        if all(type(ct) is Zero for ct in cts_out):
            continue
        operands = [
            UndefinedPrimal(v.aval)
            if type(v) is not Literal and v in linear_vars
            else read_known(v)
            for v in eqn.invars
        ]
        if eqn.primitive.transpose is None:
            reason = eqn.primitive.not_applicable.get("transpose", "it is not implemented")
            raise NotImplementedError(
                f"cannot transpose primitive '{eqn.primitive.name}' (reverse-mode "
                f"differentiation): {reason}"
            )
        ct_arg = cts_out if eqn.primitive.multiple_results else cts_out[0]
        cts_in = eqn.primitive.transpose(ct_arg, *operands, **eqn.params)
        for var, ct in zip(eqn.invars, cts_in):
            accumulate(var, ct)
    return [
        cotangents.get(var, Zero(tangent_aval(var.aval))) if is_undefined(arg) else None
        for var, arg in zip(jaxpr.invars, args)
    ]


# ---------------------------------------------------------------------------------------------
# Differentiating programs


def jvp_jaxpr(closed: ClosedJaxpr, nonzero: Sequence[bool]) -> tuple[ClosedJaxpr, list[bool]]:
    """A jaxpr (primals, nonzero tangents) -> (primal outs, nonzero tangent outs), and which
    outputs have nonzero tangents. Higher-order primitives differentiate their programs with it.
    """
    in_avals = closed.in_avals
    out_nonzero: list[bool] = []

    def jvp_fun(*args):
        primals, tangents = args[: len(in_avals)], iter(args[len(in_avals) :])
        trace = JVPTrace(core.current_trace(), "jvp of a jaxpr")
        inputs = [
            JVPTracer(trace, p, next(tangents)) if nz else p for p, nz in zip(primals, nonzero)
        ]
        with core.set_current_trace(trace):
            outs = eval_jaxpr(closed.jaxpr, closed.consts, *inputs)
        pairs = [trace.primal_and_tangent(o) for o in outs]
        trace.alive = False
        out_nonzero.extend(type(t) is not Zero for _, t in pairs)
        return [p for p, _ in pairs] + [t for _, t in pairs if type(t) is not Zero]

    tangent_avals = [tangent_aval(a) for a, nz in zip(in_avals, nonzero) if nz]
    jvp_closed, _ = _trace_to_jaxpr(jvp_fun, list(in_avals) + tangent_avals, "jvp of a jaxpr")
    return jvp_closed, out_nonzero


def _trace_to_jaxpr(fun, avals, name):
    from funcgrad.interpreters.staging import trace_to_jaxpr

    return trace_to_jaxpr(fun, avals, name)
