"""Jaxpr optimization passes: inlining, simplification, constant folding, CSE and DCE.

Each pass is a pure function `ClosedJaxpr -> ClosedJaxpr` that never changes its input and
returns the input itself when it has nothing to do, so `optimize` can run them to a fixed
point. Every rewrite keeps results bit-for-bit and keeps each variable's aval (shape, dtype,
weak type), so an optimized program is interchangeable with the one it came from.

Higher-order primitives take part through per-primitive tables: `dce_rules` (drop unused
outputs and inputs of the program a primitive carries) and `simplification_rules` (local
rewrites); primitives without an entry are left as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from funcgrad import core, dtypes
from funcgrad.array import CPU, Array
from funcgrad.config import config
from funcgrad.core import Primitive
from funcgrad.errors import JaxprTypeError
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, check_jaxpr
from funcgrad.lax.elementwise import (
    add_p,
    convert_element_type_p,
    mul_p,
    neg_p,
    sub_p,
)
from funcgrad.lax.random_bits import random_clone_p, random_consume_p
from funcgrad.lax.reductions import AXES_REDUCTIONS, reduce_sum_p
from funcgrad.lax.shapes import broadcast_in_dim_p, reshape_p, transpose_p
from funcgrad.lax.sharding_constraint import sharding_constraint_p

Atom = Var | Literal

# ---------------------------------------------------------------------------------------------
# Effects


def has_effects(eqn: JaxprEqn) -> bool:
    """Whether an equation must run even if its outputs are unused (and may not be merged,
    folded or duplicated): its primitive declares effects, or a program it carries has any."""
    if getattr(eqn.primitive, "has_effects", False):
        return True
    return any(jaxpr_has_effects(jaxpr) for jaxpr in _param_jaxprs(eqn.params))


def jaxpr_has_effects(jaxpr: Jaxpr) -> bool:
    return any(has_effects(eqn) for eqn in jaxpr.eqns)


def _param_jaxprs(params: dict) -> Iterator[Jaxpr]:
    stack = list(params.values())
    while stack:
        value = stack.pop()
        if isinstance(value, ClosedJaxpr):
            yield value.jaxpr
        elif isinstance(value, Jaxpr):
            yield value
        elif isinstance(value, (tuple, list)):
            stack.extend(value)


# ---------------------------------------------------------------------------------------------
# Rewriting a program equation by equation


class _Rewriter:
    """Builds a new equation list from an old one. A removed equation's outputs are
    substituted by other atoms in every later equation and in the program's outputs."""

    def __init__(self):
        self.env: dict[Var, Atom] = {}
        self.eqns: list[JaxprEqn] = []
        self.producers: dict[Var, JaxprEqn] = {}
        self.changed = False

    def read(self, atom: Atom) -> Atom:
        return self.env.get(atom, atom) if type(atom) is Var else atom

    def with_inputs_read(self, eqn: JaxprEqn) -> JaxprEqn:
        if not self.env:  # nothing substituted yet (a pass that changes nothing never has)
            return eqn
        invars = [self.read(v) for v in eqn.invars]
        if all(new is old for new, old in zip(invars, eqn.invars)):
            return eqn
        return JaxprEqn(eqn.primitive, invars, eqn.outvars, eqn.params, eqn.source_info)

    def emit(self, eqn: JaxprEqn) -> None:
        self.eqns.append(eqn)
        for v in eqn.outvars:
            self.producers[v] = eqn

    def substitute(self, outvar: Var, atom: Atom) -> None:
        self.env[outvar] = atom
        self.changed = True

    def producer(self, atom: Atom) -> JaxprEqn | None:
        return self.producers.get(atom) if type(atom) is Var else None

    def finish(self, closed: ClosedJaxpr, constvars=None, consts=None) -> ClosedJaxpr:
        if not self.changed:
            return closed
        jaxpr = closed.jaxpr
        constvars = jaxpr.constvars if constvars is None else constvars
        consts = closed.consts if consts is None else consts
        outvars = [self.read(v) for v in jaxpr.outvars]
        return ClosedJaxpr(Jaxpr(constvars, jaxpr.invars, outvars, self.eqns), consts)


# ---------------------------------------------------------------------------------------------
# Inlining


# Call primitives (params: `jaxpr`, a ClosedJaxpr run on the operands as they are), registered
# by the modules that declare them; `jit` is one.
inlinable_calls: set[Primitive] = set()


def inline_calls(closed: ClosedJaxpr, calls: Mapping[Primitive, Any] | None = None) -> ClosedJaxpr:
    """Replace every call equation (`jit`) by the equations of its program, so that later
    passes see across call boundaries. Inner variables are renamed (one program may be called
    twice); inner consts become consts of the outer program, each distinct value once.

    `calls` maps the call primitives to inline to the param holding their program, or to a
    function of the equation making it (default: `inlinable_calls`, whose program is
    `jaxpr`); the compiler also inlines custom-derivative and checkpoint calls, whose rules
    matter only to transformations, and the composites of the user's primitives."""
    if calls is None:
        calls = dict.fromkeys(inlinable_calls, "jaxpr")
    if not any(eqn.primitive in calls for eqn in closed.eqns):
        return closed
    constvars, consts = list(closed.jaxpr.constvars), list(closed.consts)
    constvar_of_id = {id(c): v for c, v in zip(consts, constvars)}

    def constvar_for(value, aval) -> Var:
        if id(value) not in constvar_of_id:
            constvar_of_id[id(value)] = Var(aval)
            constvars.append(constvar_of_id[id(value)])
            consts.append(value)
        return constvar_of_id[id(value)]

    rewriter = _Rewriter()
    rewriter.changed = True

    def splice(eqn: JaxprEqn) -> None:
        program = calls[eqn.primitive]
        inner = inline_calls(program(eqn) if callable(program) else eqn.params[program], calls)
        renamed: dict[Var, Atom] = {}

        def rename(atom: Atom) -> Atom:
            return renamed[atom] if type(atom) is Var else atom

        for v, value in zip(inner.jaxpr.constvars, inner.consts):
            renamed[v] = constvar_for(value, v.aval)
        renamed.update(zip(inner.jaxpr.invars, map(rewriter.read, eqn.invars)))
        for inner_eqn in inner.eqns:
            outvars = [Var(v.aval) for v in inner_eqn.outvars]
            renamed.update(zip(inner_eqn.outvars, outvars))
            invars = list(map(rename, inner_eqn.invars))
            params, source_info = inner_eqn.params, inner_eqn.source_info
            rewriter.emit(JaxprEqn(inner_eqn.primitive, invars, outvars, params, source_info))
        for outvar, inner_out in zip(eqn.outvars, inner.jaxpr.outvars):
            rewriter.substitute(outvar, rename(inner_out))

    for eqn in closed.eqns:
        if eqn.primitive in calls:
            splice(eqn)
        else:
            rewriter.emit(rewriter.with_inputs_read(eqn))
    return rewriter.finish(closed, constvars, consts)


# ---------------------------------------------------------------------------------------------
# Dead code elimination

DceRule = Callable[[JaxprEqn, list[bool]], tuple[JaxprEqn | None, list[bool]]]

# rule(eqn, used_outputs) -> (new_eqn or None, used_inputs): `used_inputs` has one flag per
# operand of `eqn`; `new_eqn` (None to drop the equation) may drop unused outputs and must read
# only the operands flagged as used. A rule must keep an equation that has effects.
dce_rules: dict[Primitive, DceRule] = {}


def _live_eqns(eqns: Sequence[JaxprEqn], outvars: Sequence[Atom]) -> tuple[list, set[Var]]:
    """The equations needed for `outvars` (or for their effects), and the variables they read."""
    live = {v for v in outvars if type(v) is Var}
    kept = []
    for eqn in reversed(eqns):
        invars = eqn.invars  # `used_inputs` flags these, not a pruned equation's operands
        used_outputs = [v in live for v in eqn.outvars]
        rule = dce_rules.get(eqn.primitive)
        if rule is not None:
            eqn, used_inputs = rule(eqn, used_outputs)
        elif any(used_outputs) or has_effects(eqn):
            used_inputs = [True] * len(eqn.invars)
        else:
            eqn = None
        if eqn is not None:
            kept.append(eqn)
            live.update(v for v, used in zip(invars, used_inputs) if used and type(v) is Var)
    kept.reverse()
    return kept, live


def _same_eqns(new: Sequence[JaxprEqn], old: Sequence[JaxprEqn]) -> bool:
    return len(new) == len(old) and all(a is b for a, b in zip(new, old))


def dce_closed_jaxpr(
    closed: ClosedJaxpr, used_outputs: Sequence[bool]
) -> tuple[ClosedJaxpr, list[bool]]:
    """Keep only the used outputs and what they need, dropping unused inputs and consts too.

    For the rules of higher-order primitives: returns the pruned program (the same object if
    nothing was pruned) and one flag per input telling whether the program still reads it.
    """
    jaxpr = closed.jaxpr
    outvars = [v for v, used in zip(jaxpr.outvars, used_outputs) if used]
    eqns, live = _live_eqns(jaxpr.eqns, outvars)
    used_inputs = [v in live for v in jaxpr.invars]
    used_consts = [v in live for v in jaxpr.constvars]
    if all(used_outputs) and all(used_inputs) and all(used_consts):
        if _same_eqns(eqns, jaxpr.eqns):
            return closed, used_inputs
    pruned = Jaxpr(
        [v for v, used in zip(jaxpr.constvars, used_consts) if used],
        [v for v, used in zip(jaxpr.invars, used_inputs) if used],
        outvars,
        eqns,
    )
    consts = [c for c, used in zip(closed.consts, used_consts) if used]
    return ClosedJaxpr(pruned, consts), used_inputs


def prune_jaxpr(
    closed: ClosedJaxpr, used_outputs: Sequence[bool], kept_inputs: Sequence[bool]
) -> ClosedJaxpr:
    """Keep the used outputs and what they need, and exactly the inputs marked kept (read or
    not): rules use it when several programs must keep one signature (a cond's branches)."""
    jaxpr = closed.jaxpr
    outvars = [v for v, used in zip(jaxpr.outvars, used_outputs) if used]
    eqns, live = _live_eqns(jaxpr.eqns, outvars)
    used_consts = [v in live for v in jaxpr.constvars]
    pruned = Jaxpr(
        [v for v, used in zip(jaxpr.constvars, used_consts) if used],
        [v for v, kept in zip(jaxpr.invars, kept_inputs) if kept],
        outvars,
        eqns,
    )
    return ClosedJaxpr(pruned, [c for c, used in zip(closed.consts, used_consts) if used])


def dead_code_elimination(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Drop equations whose outputs are unused (unless they have effects) and unused consts.
    The program's inputs stay, since they are its signature."""
    jaxpr = closed.jaxpr
    eqns, live = _live_eqns(jaxpr.eqns, jaxpr.outvars)
    used_consts = [v in live for v in jaxpr.constvars]
    if all(used_consts) and _same_eqns(eqns, jaxpr.eqns):
        return closed
    pruned = Jaxpr(
        [v for v, used in zip(jaxpr.constvars, used_consts) if used],
        jaxpr.invars,
        jaxpr.outvars,
        eqns,
    )
    return ClosedJaxpr(pruned, [c for c, used in zip(closed.consts, used_consts) if used])


def dce_call(eqn: JaxprEqn, used_outputs: list[bool]) -> tuple[JaxprEqn | None, list[bool]]:
    """The DCE rule of a call primitive: prune its program's unused outputs and inputs."""
    inner, used_inputs = dce_closed_jaxpr(eqn.params["jaxpr"], used_outputs)
    if not any(used_outputs) and not jaxpr_has_effects(inner.jaxpr):
        return None, [False] * len(eqn.invars)
    if inner is eqn.params["jaxpr"]:
        return eqn, used_inputs
    new_eqn = JaxprEqn(
        eqn.primitive,
        [v for v, used in zip(eqn.invars, used_inputs) if used],
        [v for v, used in zip(eqn.outvars, used_outputs) if used],
        dict(eqn.params, jaxpr=inner),
        eqn.source_info,
    )
    return new_eqn, used_inputs


# ---------------------------------------------------------------------------------------------
# Common subexpression elimination


def _atom_key(atom: Atom):
    if type(atom) is Var:
        return atom
    # Literals compare by their bits, so 0.0 and -0.0 (or two NaNs) are told apart correctly.
    return (atom.aval, np.asarray(atom.val).tobytes())


def _param_key(value):
    """A parameter as CSE compares it: numbers by their type and bits (a gather's fill value
    -0.0 is not 0.0, though the two are equal, and True is not 1), tuples item by item."""
    kind = type(value)
    if kind in (float, complex) or isinstance(value, np.generic):
        return (kind, np.asarray(value).dtype.str, np.asarray(value).tobytes())
    if isinstance(value, tuple):
        return (kind, tuple(_param_key(item) for item in value))
    return (kind, value)


def common_subexpression_elimination(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Merge equations that apply one primitive with equal params to the same operands."""
    rewriter = _Rewriter()
    seen: dict[tuple, list[Var]] = {}
    for eqn in closed.eqns:
        eqn = rewriter.with_inputs_read(eqn)
        if has_effects(eqn):
            rewriter.emit(eqn)
            continue
        key = (
            eqn.primitive,
            tuple((name, _param_key(value)) for name, value in sorted(eqn.params.items())),
            tuple(_atom_key(v) for v in eqn.invars),
        )
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = eqn.outvars
            rewriter.emit(eqn)
        else:
            for outvar, earlier_var in zip(eqn.outvars, earlier):
                rewriter.substitute(outvar, earlier_var)
    return rewriter.finish(closed)


# ---------------------------------------------------------------------------------------------
# Constant folding


def _foldable(eqn: JaxprEqn) -> bool:
    # A primitive that is not `foldable` gives different values where it runs (collectives).
    return (
        getattr(eqn.primitive, "foldable", True)
        and not eqn.primitive.higher_order
        and eqn.primitive.impl is not None
        and all(type(v) is Literal for v in eqn.invars)
        and all(v.aval.ndim == 0 for v in eqn.outvars)
        and not has_effects(eqn)
    )


def _evaluate(eqn: JaxprEqn) -> list:
    """Run one equation on its literal operands with the reference implementation, on the
    host whatever the default platform (its results become the program's literals)."""
    from funcgrad.devices import default_device  # (imports the compiler on a GPU platform)

    operands = [Array(v.val, v.aval.weak_type) for v in eqn.invars]
    with core.set_current_trace(core.eval_trace()), default_device(CPU):
        outs = eqn.primitive.bind(*operands, **eqn.params)
    return outs if eqn.primitive.multiple_results else [outs]


def constant_folding(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Evaluate scalar equations whose operands are all literals, writing the results inline."""
    rewriter = _Rewriter()
    for eqn in closed.eqns:
        eqn = rewriter.with_inputs_read(eqn)
        if not _foldable(eqn):
            rewriter.emit(eqn)
            continue
        for outvar, value in zip(eqn.outvars, _evaluate(eqn)):
            rewriter.substitute(outvar, Literal(value._value, outvar.aval))
    return rewriter.finish(closed)


# ---------------------------------------------------------------------------------------------
# Algebraic simplification

# rule(eqn, producer) -> an atom that replaces the equation's one output (used only when its
# aval equals the output's exactly), a rewritten equation with the same outputs, or None to
# keep it. `producer(atom)` is the equation that computed an operand, if any.
SimplificationRule = Callable[[JaxprEqn, Callable[[Atom], JaxprEqn | None]], Atom | JaxprEqn | None]
simplification_rules: dict[Primitive, SimplificationRule] = {}


def algebraic_simplification(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Remove identities (x*1, x+0, same-type converts, ...) and merge chains of shape ops."""
    rewriter = _Rewriter()
    for eqn in closed.eqns:
        eqn = rewriter.with_inputs_read(eqn)
        rule = simplification_rules.get(eqn.primitive)
        result = None if rule is None else rule(eqn, rewriter.producer)
        if isinstance(result, (JaxprEqn, list)):
            rewriter.changed = True
            for new in result if isinstance(result, list) else [result]:
                rewriter.emit(new)
        elif result is not None and result.aval == eqn.outvars[0].aval:
            rewriter.substitute(eqn.outvars[0], result)
        else:
            rewriter.emit(eqn)
    return rewriter.finish(closed)


def _literal_equal(atom: Atom, value) -> bool:
    return type(atom) is Literal and atom.val == value


def _is_additive_identity(atom: Atom, *, subtracted: bool) -> bool:
    """A zero that leaves every value, signed zeros included, unchanged: x + (-0.0) and
    x - (+0.0) are x exactly, but (-0.0) + (+0.0) is +0.0, so x + 0.0 is not x."""
    if not _literal_equal(atom, 0):
        return False
    if dtypes.is_complex(atom.aval.dtype):
        return False  # (-0 + 0j) + 0j has a +0 real part: not worth the bookkeeping
    if not dtypes.is_float(atom.aval.dtype):
        return True
    negative = math.copysign(1.0, float(atom.val)) < 0
    return negative != subtracted


def _operand_beside_identity(eqn: JaxprEqn, is_identity: Callable[[Atom], bool]) -> Atom | None:
    """For a commutative binary equation: the operand whose partner is an identity element,
    if it already has the result's aval."""
    x, y = eqn.invars
    out = eqn.outvars[0].aval
    for operand, partner in ((x, y), (y, x)):
        if is_identity(partner) and operand.aval == out:
            return operand
    return None


def _mul_simplify(eqn, producer):
    """x * 1 is x, but for complex x: (a + bi)(1 + 0i) is (a - 0b) + (0a + b)i, which is NaN
    where b is infinite and +0 where a part is -0."""
    if dtypes.is_complex(eqn.outvars[0].aval.dtype):
        return None
    return _operand_beside_identity(eqn, lambda atom: _literal_equal(atom, 1))


def _add_simplify(eqn, producer):
    return _operand_beside_identity(eqn, lambda atom: _is_additive_identity(atom, subtracted=False))


def _sub_simplify(eqn, producer):
    x, y = eqn.invars
    return x if _is_additive_identity(y, subtracted=True) else None


def _neg_simplify(eqn, producer):
    inner = producer(eqn.invars[0])
    return inner.invars[0] if inner is not None and inner.primitive is neg_p else None


def _identity_if_same_type(eqn, producer):
    """convert_element_type and broadcast_in_dim are the identity exactly when their output has
    their operand's aval (broadcast dimensions of a same-shape broadcast can only be 0, 1, ...),
    which is what `algebraic_simplification` checks before substituting; the key-use markers
    always are (they only tell key-reuse checking what happened to a key)."""
    return eqn.invars[0]


def _operand(eqn, producer):
    """A sharding constraint computes its operand: the layout it holds is read off the
    program before it is compiled (`lax.sharding_constraint.result_layouts`)."""
    return eqn.invars[0]


def _transpose_simplify(eqn, producer):
    (x,) = eqn.invars
    permutation = eqn.params["permutation"]
    inner = producer(x)
    if inner is not None and inner.primitive is transpose_p:
        x = inner.invars[0]
        permutation = tuple(inner.params["permutation"][d] for d in permutation)
    if permutation == tuple(range(len(permutation))):
        return x
    if x is eqn.invars[0]:
        return None
    return JaxprEqn(transpose_p, [x], eqn.outvars, dict(permutation=permutation), eqn.source_info)


def _reshape_simplify(eqn, producer):
    """Row-major reshapes compose, so an inner reshape's transpose (its `dimensions`) is all
    that survives of it when the outer reshape has none."""
    (x,) = eqn.invars
    new_sizes, dimensions = eqn.params["new_sizes"], eqn.params["dimensions"]
    inner = producer(x)
    if dimensions is None and inner is not None and inner.primitive is reshape_p:
        x, dimensions = inner.invars[0], inner.params["dimensions"]
    if dimensions is None and new_sizes == x.aval.shape:
        return x
    if x is eqn.invars[0]:
        return None
    params = dict(new_sizes=new_sizes, dimensions=dimensions)
    return JaxprEqn(reshape_p, [x], eqn.outvars, params, eqn.source_info)


def _reduction_over_ones(eqn, producer):
    """A reduction over axes of size 1 alone (or over none) is its operand reshaped: each
    result is one element. (Compiled as a fold, a GPU ran it on one thread: the bias gradient
    of a batch of one, a column sum of one row.) A float or complex sum adds +0 to that
    element, as the fold from zero does (-0.0 + 0 is +0)."""
    (x,) = eqn.invars
    axes = eqn.params["axes"]
    if any(x.aval.shape[a] != 1 for a in axes):
        return None
    if not axes:
        return x
    (out,) = eqn.outvars
    summed = eqn.primitive is reduce_sum_p and dtypes.is_inexact(x.aval.dtype)
    reshaped = Var(out.aval) if summed else out
    params = dict(new_sizes=out.aval.shape, dimensions=None)
    reshape = JaxprEqn(reshape_p, [x], [reshaped], params, eqn.source_info)
    if not summed:
        return reshape
    zero = Literal(np.zeros((), x.aval.dtype)[()], core.ShapedArray((), x.aval.dtype))
    return [reshape, JaxprEqn(add_p, [reshaped, zero], [out], {}, eqn.source_info)]


simplification_rules.update(
    {
        mul_p: _mul_simplify,
        add_p: _add_simplify,
        sub_p: _sub_simplify,
        neg_p: _neg_simplify,
        convert_element_type_p: _identity_if_same_type,
        broadcast_in_dim_p: _identity_if_same_type,
        transpose_p: _transpose_simplify,
        reshape_p: _reshape_simplify,
        sharding_constraint_p: _operand,
        random_consume_p: _identity_if_same_type,
        random_clone_p: _identity_if_same_type,
        **dict.fromkeys(AXES_REDUCTIONS, _reduction_over_ones),
    }
)

# ---------------------------------------------------------------------------------------------
# The platform


def resolve_platform(closed: ClosedJaxpr, platform: str) -> ClosedJaxpr:
    """`closed` with every `platform_index` (lax.platform_dependent's choice), in it or in
    the programs its equations carry, replaced by the branch number for `platform`, the one
    the program is compiled for."""
    from funcgrad.lax.platform import index_for, platform_index_p

    def mentions(jaxpr: Jaxpr) -> bool:
        return any(
            eqn.primitive is platform_index_p or any(map(mentions, _param_jaxprs(eqn.params)))
            for eqn in jaxpr.eqns
        )

    def resolved_param(value):
        if isinstance(value, ClosedJaxpr):
            return resolve_platform(value, platform)
        if isinstance(value, tuple) and any(isinstance(v, ClosedJaxpr) for v in value):
            return tuple(map(resolved_param, value))
        return value

    if not mentions(closed.jaxpr):
        return closed
    rewriter = _Rewriter()
    rewriter.changed = True
    for eqn in closed.eqns:
        eqn = rewriter.with_inputs_read(eqn)
        if eqn.primitive is platform_index_p:
            (out,) = eqn.outvars
            index = index_for(platform, eqn.params["platforms"], eqn.params["default"])
            rewriter.substitute(out, Literal(np.int32(index), out.aval))
            continue
        params = {name: resolved_param(value) for name, value in eqn.params.items()}
        rewriter.emit(JaxprEqn(eqn.primitive, eqn.invars, eqn.outvars, params, eqn.source_info))
    return rewriter.finish(closed)


# ---------------------------------------------------------------------------------------------
# The pipeline

_MAX_ROUNDS = 8
_PIPELINE = (
    inline_calls,
    algebraic_simplification,
    constant_folding,
    common_subexpression_elimination,
    dead_code_elimination,
)


def _checked(closed: ClosedJaxpr, pass_name: str) -> None:
    try:
        check_jaxpr(closed)
    except JaxprTypeError as error:
        raise JaxprTypeError(f"after the compiler pass {pass_name}: {error}") from None


def optimize(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Run every pass in turn until a whole round changes nothing. Each round leaves fewer
    calls, equations or non-literal operands, so a fixed point comes in a few rounds; the bound
    is a guard against a rule that keeps rewriting, not a tuning knob."""
    for _ in range(_MAX_ROUNDS):
        start = closed
        for run_pass in _PIPELINE:
            closed = run_pass(closed)
            if config.enable_checks:
                _checked(closed, run_pass.__name__)
        if closed is start:
            break
    return closed
