"""sparsify: run a function written for dense arrays on BCOO arguments.

`sparsify(f)` stages `f` with every BCOO argument standing in as a dense array of its shape and
dtype, then evaluates the program with the BCOO values themselves: an equation whose operands
are all dense binds as usual (so outer transformations see it), and one with a sparse operand
goes to that primitive's sparse rule (`_rules`), which never forms the dense array. A primitive
without a sparse rule raises an error naming it. The staged program depends only on the
arguments' tree structure, shapes and dtypes, so it is kept per structure and traced once.

An equation that holds programs (a nested jit, a checkpoint, a cond) is evaluated the same way
inside: each program is staged again over the flattened sparse operands, evaluating it with its
sparse rules, and bound as the same primitive, so a jitted function called inside stays one
call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from funcgrad import caches, core, tree_util
from funcgrad.core import Primitive
from funcgrad.experimental.sparse._rules import DENSIFYING, SPARSE_RULES, ZERO_AWARE, is_sparse
from funcgrad.experimental.sparse.bcoo import BCOO
from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Literal, literal_value
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow.conditionals import cond_p
from funcgrad.transforms.checkpoint import checkpoint_p
from funcgrad.transforms.jit import jit_p
from funcgrad.transforms.make_jaxpr import function_name

__all__ = ["sparsify"]


def sparsify(f: Callable) -> Callable:
    """`f` made to accept BCOO arrays wherever it takes arrays; results that its sparse rules
    keep sparse are BCOO arrays."""

    staged = {}  # (in_tree, in_avals) -> (closed jaxpr, out_tree)

    @functools.wraps(f)
    def sparsified(*args, **kwargs):
        leaves, in_tree = tree_util.tree_flatten((args, kwargs), is_leaf=is_sparse)
        leaves = [x if is_sparse(x) else asarray(x) for x in leaves]
        in_avals = tuple(
            core.ShapedArray(x.shape, x.dtype) if is_sparse(x) else abstractify(x) for x in leaves
        )
        key = (in_tree, in_avals)
        if key not in staged:

            def flat_f(*flat_args):
                call_args, call_kwargs = tree_util.tree_unflatten(in_tree, flat_args)
                return f(*call_args, **call_kwargs)

            staged[key] = trace_to_jaxpr(flat_f, list(in_avals), f"sparsify({function_name(f)})")
        closed, out_tree = staged[key]
        outs = _eval_sparse(closed.jaxpr, closed.consts, leaves, function_name(f))
        return tree_util.tree_unflatten(out_tree, outs)

    return sparsified


# Primitives whose result is zero where their (first) operand is.
_KEEPS_ZEROS = frozenset(
    {"broadcast_in_dim", "convert_element_type", "reshape", "transpose", "squeeze"}
)


def _eval_sparse(jaxpr, consts, args, name: str) -> list:
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
            rule = _rule(eqn, name)
            first = ZERO_AWARE.get(eqn.primitive.name)
            if first is not None:
                operands[first:] = [
                    None if is_zero(v) else x for v, x in zip(eqn.invars[first:], operands[first:])
                ]
            outs = rule(*operands, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        else:
            outs = eqn.primitive.bind(*operands, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
            if eqn.primitive.name in _KEEPS_ZEROS and is_zero(eqn.invars[0]):
                zeros.update(eqn.outvars)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _rule(eqn, name: str) -> Callable:
    primitive = eqn.primitive.name
    rule = SPARSE_RULES.get(primitive) or _PROGRAM_RULES.get(primitive)
    if rule is not None:
        return rule
    why = (
        "it maps 0 to a nonzero value, so its result would be dense"
        if primitive in DENSIFYING
        else f"sparse rules exist for {sorted({*SPARSE_RULES, *_PROGRAM_RULES})}"
    )
    raise NotImplementedError(
        f"sparsify({name}): primitive {primitive} has no sparse rule (at {eqn.source_info}): "
        f"{why}. Convert its sparse operand with .todense() first if the dense form is meant"
    )


@caches.program_cache
def _sparse_program(
    jaxpr: ClosedJaxpr, in_tree, in_avals: tuple, name: str, forget_order: bool = False
):
    """`jaxpr` evaluated with its sparse rules on operands of the structure `in_tree` (BCOO
    arrays flattened to their leaves), staged into a program over those leaves; and the
    structure of its results (`forget_order`: with their BCOO results' promises of sorted and
    unique indices dropped, which branches that must agree may keep differently)."""

    def flat_program(*leaves):
        operands = tree_util.tree_unflatten(in_tree, leaves)
        outs = _eval_sparse(jaxpr.jaxpr, jaxpr.consts, operands, name)
        if forget_order:
            outs = [BCOO((x.data, x.indices), shape=x.shape) if is_sparse(x) else x for x in outs]
        return outs

    return trace_to_jaxpr(flat_program, list(in_avals), f"sparsify({name})")


def _flattened(operands) -> tuple[list, object, tuple]:
    leaves, in_tree = tree_util.tree_flatten(list(operands))
    return leaves, in_tree, tuple(abstractify(x) for x in leaves)


def _call(primitive: Primitive) -> Callable:
    """The rule of a primitive that calls its program `jaxpr` on its operands (jit,
    checkpoint): the same call of the program made sparse."""

    def rule(*operands, jaxpr: ClosedJaxpr, **params) -> list:
        leaves, in_tree, in_avals = _flattened(operands)
        name = params.get("name", primitive.name)
        program, out_tree = _sparse_program(jaxpr, in_tree, in_avals, name)
        if "name" in params:
            params = {**params, "name": f"sparsify({name})"}
        outs = primitive.bind(*leaves, jaxpr=program, **params)
        return tree_util.tree_unflatten(out_tree, outs)

    return rule


def _cond(index, *operands, branches: tuple[ClosedJaxpr, ...]) -> list:
    if is_sparse(index):
        raise NotImplementedError("sparsify: cond with a sparse branch index")
    leaves, in_tree, in_avals = _flattened(operands)
    for forget_order in (False, True):
        programs = [
            _sparse_program(branch, in_tree, in_avals, f"branch {i}", forget_order)
            for i, branch in enumerate(branches)
        ]
        layouts = [
            (out_tree, tuple((a.shape, a.dtype) for a in program.out_avals))
            for program, out_tree in programs
        ]
        if all(layout == layouts[0] for layout in layouts):
            outs = cond_p.bind(index, *leaves, branches=tuple(program for program, _ in programs))
            return tree_util.tree_unflatten(programs[0][1], outs)
    raise NotImplementedError(
        "sparsify: the branches of a cond give results of different sparse structures "
        f"(sparse or dense, and the number of stored elements), {[t for t, _ in layouts]}; "
        "make them agree, for instance with .todense() or sum_duplicates(nse=...)"
    )


_PROGRAM_RULES: dict[str, Callable] = {
    "jit": _call(jit_p),
    "checkpoint": _call(checkpoint_p),
    "cond": _cond,
}
