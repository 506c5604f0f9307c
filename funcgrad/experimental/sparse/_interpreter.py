"""The evaluator behind `sparsify`: a staged program run with sparse values.

`eval_sparse` evaluates a jaxpr whose inputs may be BCOO or BCSR arrays: an equation whose
operands are all dense binds as usual (so outer transformations see it), and one with a sparse
operand goes to its primitive's sparse rule, which never forms the dense array. A primitive
without a sparse rule raises an error naming it.

The rules of `_rules` are written for BCOO operands. A BCSR operand reaches them as its BCOO
form; a result that keeps the operand's stored elements (a map over the values, a product or
quotient by a dense array) is given back in BCSR form, as are the results of the rules that keep
BCSR arrays BCSR (`BCSR_RESULTS`, where the result has two sparse dimensions); every other
result stays BCOO.

An equation holding programs (a jit, a loop, a custom derivative) goes to a rule of
`PROGRAM_RULES`, which stages each program again over the flattened sparse operands with
`sparse_program` and binds the same primitive, so that it stays one equation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from funcgrad import caches, core, tree_util
from funcgrad.experimental.sparse._rules import DENSIFYING, MAPS, SPARSE_RULES, ZERO_AWARE
from funcgrad.experimental.sparse.bcoo import BCOO
from funcgrad.experimental.sparse.bcsr import BCSR
from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, Literal, literal_value

# The rules of primitives that hold programs, filled in by `_program_rules` and `_custom_rules`.
PROGRAM_RULES: dict[str, Callable] = {}

# Primitives whose result, from BCSR operands alone, is a BCSR array where it has two sparse
# dimensions: the maps over the values and the structure rules that keep rows whole.
BCSR_RESULTS = MAPS | {"broadcast_in_dim", "concatenate", "convert_element_type"}

# Primitives whose result is zero where their (first) operand is.
_KEEPS_ZEROS = frozenset(
    {"broadcast_in_dim", "convert_element_type", "reshape", "transpose", "squeeze"}
)


def is_sparse(x) -> bool:
    return isinstance(x, (BCOO, BCSR))


def eval_sparse(jaxpr: Jaxpr, consts, args, name: str) -> list:
    """The outputs of `jaxpr` on `args` (sparse or dense), computed with the sparse rules."""
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    zeros = set()  # the variables that the program makes of zeros

    def read(v):
        return literal_value(v) if type(v) is Literal else env[v]

    def is_zero(v) -> bool:
        if type(v) is Literal:
            return not core.is_float0(v.val) and bool(np.all(v.val == 0))
        return v in zeros

    for eqn in jaxpr.eqns:
        operands = [read(v) for v in eqn.invars]
        if any(is_sparse(x) for x in operands):
            first = ZERO_AWARE.get(eqn.primitive.name)
            if first is not None:
                operands[first:] = [
                    None if is_zero(v) else x for v, x in zip(eqn.invars[first:], operands[first:])
                ]
            outs = _apply_rule(eqn, operands, name)
        else:
            outs = eqn.primitive.bind(*operands, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
            if eqn.primitive.name in _KEEPS_ZEROS and is_zero(eqn.invars[0]):
                zeros.update(eqn.outvars)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _apply_rule(eqn, operands: list, name: str) -> list:
    primitive = eqn.primitive.name
    program_rule = PROGRAM_RULES.get(primitive)
    if program_rule is not None:  # the programs take BCSR operands as they are
        return program_rule(*operands, **eqn.params)
    rule = SPARSE_RULES.get(primitive)
    if rule is None:
        why = (
            "it maps 0 to a nonzero value, so its result would be dense"
            if primitive in DENSIFYING
            else f"sparse rules exist for {sorted({*SPARSE_RULES, *PROGRAM_RULES})}"
        )
        raise NotImplementedError(
            f"sparsify({name}): primitive {primitive!r} has no sparse rule (at {eqn.source_info}): "
            f"{why}. Convert its sparse operand with .todense() first if the dense form is meant"
        )
    forms = [(x.to_bcoo(), x) for x in operands if isinstance(x, BCSR)]
    all_compressed = not any(isinstance(x, BCOO) for x in operands)
    if forms:
        form_of = iter(form for form, _ in forms)
        operands = [next(form_of) if isinstance(x, BCSR) else x for x in operands]
    outs = rule(*operands, **eqn.params)
    if not eqn.primitive.multiple_results:
        outs = [outs]
    if forms:
        keeps_bcsr = all_compressed and primitive in BCSR_RESULTS
        outs = [_recompressed(out, forms, keeps_bcsr) for out in outs]
    return outs


def _recompressed(out, forms: list, keeps_bcsr: bool):
    """A rule's result from the BCOO forms of BCSR operands (`forms`: pairs of the BCOO form
    and the BCSR array), in BCSR form where it keeps an operand's stored elements, or where the
    rule keeps BCSR arrays BCSR and it has two sparse dimensions."""
    if not isinstance(out, BCOO):
        return out
    for form, mat in forms:
        same_layout = (out.shape, out.n_batch, out.n_dense) == (mat.shape, mat.n_batch, mat.n_dense)
        if out.indices is form.indices and same_layout:
            return BCSR((out.data, mat.indices, mat.indptr), shape=mat.shape)
    if keeps_bcsr and out.n_sparse == 2:
        return BCSR.from_bcoo(out)
    return out


def flattened(operands) -> tuple[list, object, tuple]:
    """The leaves of `operands` (sparse arrays flattened), their structure and their avals."""
    leaves, in_tree = tree_util.tree_flatten(list(operands))
    return leaves, in_tree, tuple(abstractify(x) for x in leaves)


def forget_order(x):
    """`x` without its promises of sorted and unique indices (which two programs that must
    agree may keep differently)."""
    return BCOO((x.data, x.indices), shape=x.shape) if isinstance(x, BCOO) else x


@caches.program_cache
def sparse_program(
    jaxpr: ClosedJaxpr,
    in_tree,
    in_avals: tuple,
    name: str,
    forget: bool = False,
    densify: frozenset = frozenset(),
):
    """`jaxpr` evaluated with its sparse rules on operands of the structure `in_tree` (sparse
    arrays flattened to their leaves), staged into a program over those leaves; and the
    structure of its results. With `forget`, the BCOO operands and results drop their promises
    of sorted and unique indices; the results at the positions `densify` are made dense."""

    def flat_program(*leaves):
        operands = tree_util.tree_unflatten(in_tree, leaves)
        if forget:
            operands = [forget_order(x) for x in operands]
        outs = eval_sparse(jaxpr.jaxpr, jaxpr.consts, operands, name)
        if forget:
            outs = [forget_order(x) for x in outs]
        return [x.todense() if i in densify and is_sparse(x) else x for i, x in enumerate(outs)]

    return trace_to_jaxpr(flat_program, list(in_avals), f"sparsify({name})")


def hoisted(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """`closed` with its constants made leading inputs, and those constants: the operands a
    loop or custom-derivative primitive passes in front of the others."""
    jaxpr = closed.jaxpr
    program = Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)
    return ClosedJaxpr(program, []), list(closed.consts)
