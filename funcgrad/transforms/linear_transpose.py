"""linear_transpose: the transpose of a function that is linear in its inputs.

The function is staged once with every input unknown; what does not depend on the inputs is
computed (nested conds and scans split by partial evaluation), and the rest is checked to be
linear and run backwards by `backward_pass`, the same machinery that gives vjp its pullback:
each primitive's transpose rule. The transposed function binds primitives, so it composes with jit,
vmap, grad and with linear_transpose itself.

A program is linear when every equation that reads the inputs is a linear primitive in the
operands that carry them: a product or quotient of two input-dependent values, a nonlinear
primitive (sin, exp, ...) applied to one, or an added constant that is not zero (an affine map)
makes the function nonlinear, and the error names the equation and the user's line. The
check follows the inputs into the programs of conds (each branch), scans (the body, until the
set of carries holding them stops growing) and calls.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.compiler.passes import dead_code_elimination
from funcgrad.core import PRIMITIVES
from funcgrad.interpreters.ad import UndefinedPrimal, backward_pass, instantiate, tangent_aval
from funcgrad.interpreters.partial_eval import PartialEvalTrace
from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, JaxprEqn, Literal, literal_value
from funcgrad.lax.base import asarray
from funcgrad.transforms.make_jaxpr import function_name

# Primitives linear in each of the listed operands separately but not jointly (a product of two
# input-dependent values is quadratic): at most one of these operands may carry the inputs, and
# the others must not.
_ONE_LINEAR_OPERAND: dict[str, tuple[int, ...]] = {
    "mul": (0, 1),
    "div": (0,),
    "dot_general": (0, 1),
    "conv_general_dilated": (0, 1),
    "triangular_solve": (1,),
    "scatter_mul": (0,),
}


def _calls() -> dict:
    """The call primitives whose programs are transposed in place where they read the inputs:
    a custom derivative rule says nothing about a transpose, and the check must see inside
    calls. A call of constants alone stays a call, so that transformations of the transpose
    differentiate it with its own rules."""
    names = ("jit", "checkpoint", "custom_jvp_call", "custom_vjp_call")
    params = ("jaxpr", "jaxpr", "call_jaxpr", "call_jaxpr")
    return {PRIMITIVES[n]: p for n, p in zip(names, params) if n in PRIMITIVES}


def linear_transpose(fun: Callable, *primals, reduce_axes: tuple = ()) -> Callable:
    """The transpose of the linear function `fun`, as a function of an output cotangent.

    `primals` fix only the inputs' shapes and dtypes (arrays or `ShapeDtypeStruct`s, pytrees of
    them); their values are never read. `linear_transpose(f, *xs)(ct)` returns one cotangent per
    entry of `primals` (a tuple), with <ct, f(*x)> = <transpose(ct), x> for every x. Unlike vjp
    it runs no forward pass: nothing of `fun` is evaluated but its constants.

    Inputs and outputs are floating point or complex. A nonlinear or affine `fun` raises a
    TypeError naming the operation that breaks linearity.
    """
    if reduce_axes:
        raise NotImplementedError(
            "linear_transpose's reduce_axes is not supported (JAX deprecated it); sum the "
            "cotangents over the axes yourself"
        )
    name = function_name(fun)
    leaves, in_tree = tree_util.tree_flatten(primals)
    in_avals = [abstractify(x) for x in leaves]

    def flat_fun(*flat):
        return fun(*tree_util.tree_unflatten(in_tree, flat))

    closed, out_tree = trace_to_jaxpr(flat_fun, in_avals, f"linear_transpose({name})")
    out_avals = closed.out_avals
    _check_dtypes(in_avals, out_avals)
    # (dead code need not be linear: a jvp rule may leave an unused tangent that is not)
    closed = dead_code_elimination(_linear_part(closed, name))
    _check_linear(closed, name)

    def transposed_fun(out_cotangent):
        ct_leaves, ct_tree = tree_util.tree_flatten(out_cotangent)
        if ct_tree != out_tree:
            raise TypeError(
                f"the cotangent passed to the transpose of {name} must have the structure of "
                f"its output, {out_tree}; got {ct_tree}"
            )
        cts = [_checked_cotangent(ct, aval, name) for ct, aval in zip(ct_leaves, out_avals)]
        args = [UndefinedPrimal(aval) for aval in in_avals]
        cts_in = backward_pass(closed.jaxpr, closed.consts, args, cts)
        return tree_util.tree_unflatten(in_tree, [instantiate(ct) for ct in cts_in])

    transposed_fun.__name__ = f"transpose({name})"
    return transposed_fun


def _check_dtypes(in_avals: list, out_avals: list) -> None:
    bad = [a for a in in_avals + out_avals if not dtypes.is_inexact(a.dtype)]
    if bad:
        described = ", ".join(a.str_short() for a in bad)
        raise TypeError(
            "linear_transpose supports functions whose inputs and outputs are all floating "
            f"point or complex; got {described} among "
            f"[{', '.join(a.str_short() for a in in_avals)}] -> "
            f"[{', '.join(a.str_short() for a in out_avals)}]"
        )


def _checked_cotangent(ct, aval: core.ShapedArray, name: str):
    ct = asarray(ct)
    expected = tangent_aval(aval)
    if ct.shape != expected.shape or ct.dtype != expected.dtype:
        raise TypeError(
            f"the transpose of {name} takes cotangents of the output's type {expected.str_short()}"
            f", got {ct.aval.str_short()}"
        )
    return ct


def _linear_part(closed: ClosedJaxpr, name: str) -> ClosedJaxpr:
    """The program with what does not depend on its inputs computed now, kept as constants.

    A checkpoint's derivative can leave a cond or scan that computes primal and tangent values
    together; only splitting it with its own partial-evaluation rule separates the primal
    outputs (which a nonlinear primitive may read) from the tangent ones. Each staged equation
    keeps the source line of the equation it came from, for the errors of `_check_linear`.
    """
    trace = PartialEvalTrace(core.current_trace(), f"linear_transpose({name})")
    inputs = [trace.new_arg(v.aval) for v in closed.jaxpr.invars]
    try:
        with core.set_current_trace(trace):
            outs = _evaluate(closed.jaxpr, closed.consts, inputs, trace, _calls())
            return trace.to_closed_jaxpr(outs)
    finally:
        trace.alive = False


def _evaluate(jaxpr, consts, args, trace: PartialEvalTrace, calls: dict) -> list:
    """Bind the equations of `jaxpr` under `trace`, a call that reads the inputs by the
    equations of its program (recursively)."""
    env: dict = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(atom):
        return literal_value(atom) if type(atom) is Literal else env[atom]

    for eqn in jaxpr.eqns:
        operands = list(map(read, eqn.invars))
        if eqn.primitive in calls and any(map(trace.is_unknown, operands)):
            program = eqn.params[calls[eqn.primitive]]
            outs = _evaluate(program.jaxpr, program.consts, operands, trace, calls)
        else:
            first_staged = len(trace.eqns)
            outs = eqn.primitive.bind(*operands, **eqn.params)
            for staged in trace.eqns[first_staged:]:
                staged.source_info = eqn.source_info
            outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _check_linear(closed: ClosedJaxpr, name: str) -> None:
    """Raise a TypeError at the first equation that makes the program nonlinear in its inputs.

    Values that do not depend on the inputs are the program's constants (`_linear_part`
    computed them), so that an added constant is accepted exactly when it is zero.
    """
    jaxpr = closed.jaxpr
    known = {v: c for v, c in zip(jaxpr.constvars, closed.consts) if not isinstance(c, core.Tracer)}
    linear_outs, zero_outs = _check_program(jaxpr, known, [True] * len(jaxpr.invars), name, "")
    if not all(linear or zero for linear, zero in zip(linear_outs, zero_outs)):
        raise TypeError(
            f"linear_transpose needs a linear function, but {name} returns an output that "
            "does not depend on its inputs and is not zero (an affine map)"
        )


def _check_program(jaxpr, known: dict, linear_ins: list[bool], name: str, context: str):
    """Check the equations of `jaxpr` whose inputs flagged in `linear_ins` carry the function's
    inputs, nested programs included; `known` holds the values of its variables that are
    constants, and `context` names the equations holding it, for errors. Returns, for each
    output, whether it carries the inputs and whether it is (or may be) zero.

    A value that cannot be computed here (a tracer of an enclosing jit, a loop's carry, a
    value computed inside a nested program) gets the benefit of the doubt: it may be zero."""
    linear = {v for v, flag in zip(jaxpr.invars, linear_ins) if flag}

    def is_linear(atom) -> bool:
        return type(atom) is not Literal and atom in linear

    def is_zero(atom) -> bool:
        if type(atom) is Literal:  # read by NumPy: under jit an Array's .any() would stage
            return core.is_float0(atom.val) or not np.any(atom.val)
        value = known.get(atom)
        return value is None or not asarray(value)._value.any()

    for eqn in jaxpr.eqns:
        carried = [i for i, v in enumerate(eqn.invars) if is_linear(v)]
        if not carried:
            continue
        _check_equation(eqn, carried, is_linear, is_zero, name, context)
        flags = [is_linear(v) for v in eqn.invars]
        outs = _nested_linear_outputs(eqn, flags, known, is_zero, name, context)
        linear.update(v for v, flag in zip(eqn.outvars, outs) if flag)
    return [is_linear(v) for v in jaxpr.outvars], [is_zero(v) for v in jaxpr.outvars]


def _check_nested(eqn: JaxprEqn, closed: ClosedJaxpr, operands, known, linear_ins, name, context):
    """`_check_program` of a program nested in `eqn`, whose inputs are `operands` of the
    outer one. Restaging a nested program (splitting it by partial evaluation) can lose its
    equations' lines, so errors also name the line of the equation holding it."""
    context = f" inside '{eqn.primitive.name}'{_at(eqn)}{context}"
    inner = closed.jaxpr
    inner_known = {
        v: c for v, c in zip(inner.constvars, closed.consts) if not isinstance(c, core.Tracer)
    }
    for v, atom in zip(inner.invars, operands):
        value = literal_value(atom) if type(atom) is Literal else known.get(atom)
        if value is not None:
            inner_known[v] = value
    return _check_program(inner, inner_known, linear_ins, name, context)


def _at(eqn: JaxprEqn) -> str:
    return f" (at {eqn.source_info})" if eqn.source_info else ""


def _affine_output(name: str, what: str, eqn: JaxprEqn, context: str) -> TypeError:
    return TypeError(
        f"linear_transpose needs a linear function, but in {name} {what} that depends on its "
        f"inputs on one path and is a constant that is not zero on another (an affine "
        f"map){_at(eqn)}{context}"
    )


def _nested_linear_outputs(eqn: JaxprEqn, flags, known: dict, is_zero, name: str, context: str):
    """Which outputs of `eqn` carry the inputs, given which of its operands do; a cond's
    branches, a scan's body and a call's program are checked on the way."""
    prim = eqn.primitive
    if prim.name == "cond":
        operands, branch_flags = eqn.invars[1:], flags[1:]
        branches = eqn.params["branches"]
        index = eqn.invars[0]
        value = index.val if type(index) is Literal else known.get(index)
        # (a scan's xs are known as the whole array, to tell zeros: not one iteration's index)
        if value is not None and np.shape(value) == ():  # only the branch taken runs
            branches = [branches[int(np.clip(np.asarray(value), 0, len(branches) - 1))]]
        results = [
            _check_nested(eqn, b, operands, known, branch_flags, name, context) for b in branches
        ]
        outs = [any(r[0][i] for r in results) for i in range(len(eqn.outvars))]
        for linear_outs, zero_outs in results:
            if any(o and not (lin or z) for o, lin, z in zip(outs, linear_outs, zero_outs)):
                raise _affine_output(name, "a branch of 'cond' returns a value", eqn, context)
        return outs
    if prim.name == "scan":
        return _scan_linear_outputs(eqn, flags, known, is_zero, name, context)
    calls = _calls()
    if prim in calls:
        program = eqn.params[calls[prim]]
        return _check_nested(eqn, program, eqn.invars, known, flags, name, context)[0]
    return [True] * len(eqn.outvars)


def _scan_linear_outputs(eqn: JaxprEqn, flags, known: dict, is_zero, name: str, context: str):
    """A carry carries the inputs when its initial value does or when the body makes it from
    one that does: the body is checked until the carried set stops growing."""
    num_consts, num_carry = eqn.params["num_consts"], eqn.params["num_carry"]
    body = eqn.params["jaxpr"]
    carry = flags[num_consts : num_consts + num_carry]
    # A loop's carry changes between iterations, so only its constants and xs are known
    # (zero-ness of a slice of xs is that of the whole array).
    operands = list(eqn.invars)
    for i in range(num_consts, num_consts + num_carry):
        operands[i] = None
    while True:
        body_flags = flags[:num_consts] + carry + flags[num_consts + num_carry :]
        linear_outs, zero_outs = _check_nested(
            eqn, body, operands, known, body_flags, name, context
        )
        grown = [a or b for a, b in zip(carry, linear_outs[:num_carry])]
        if grown == carry:
            break
        carry = grown
    for i, carried in enumerate(carry):
        init = eqn.invars[num_consts + i]
        body_constant = not linear_outs[i] and not zero_outs[i]
        if carried and (body_constant or (not flags[num_consts + i] and not is_zero(init))):
            raise _affine_output(name, "a carry of 'scan' is a value", eqn, context)
    return carry + linear_outs[num_carry:]


def _check_equation(eqn: JaxprEqn, carried: list[int], is_linear, is_zero, name, context) -> None:
    prim = eqn.primitive
    where = _at(eqn) + context
    if prim.transpose is None:
        raise TypeError(
            f"linear_transpose needs a linear function, but {name} applies '{prim.name}', which "
            f"is not linear, to a value that depends on its inputs{where}"
        )
    if prim.higher_order:
        return  # _nested_linear_outputs checks the programs it carries
    if prim.name in _ONE_LINEAR_OPERAND:
        allowed = _ONE_LINEAR_OPERAND[prim.name]
        if len(carried) > 1 or carried[0] not in allowed:
            raise TypeError(
                f"linear_transpose needs a linear function, but {name} applies '{prim.name}' to "
                f"operands {carried} that all depend on its inputs; '{prim.name}' is linear only "
                f"in one of the operands {list(allowed)} at a time{where}"
            )
        return
    for i, atom in enumerate(eqn.invars):
        if i in carried or not dtypes.is_inexact(atom.aval.dtype):
            continue
        if not is_zero(atom):
            raise TypeError(
                f"linear_transpose needs a linear function, but {name} combines a value that "
                f"depends on its inputs with one that does not and is not zero in '{prim.name}' "
                f"(an affine map){where}"
            )
