"""cond and switch: run one of several programs, chosen by an index.

`cond_p` carries one ClosedJaxpr per branch, all with the same input and output types. Every
branch takes the same operands: the values any branch closes over, then the user's operands,
and ignores those it does not use. Eagerly, and in the NumPy backend, only the chosen branch
runs. Under vmap with a batched index every branch runs and a select picks each lane's result
(as in JAX), and a branch's operands carry derivatives only in the lanes that take it; reverse
mode stores only the chosen branch's residuals, padded to one layout that all branches share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.array import Array
from funcgrad.compiler import passes
from funcgrad.config import config
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import (
    UndefinedPrimal,
    Zero,
    backward_pass,
    float0,
    instantiate,
    is_undefined,
    jvp_jaxpr,
    tangent_aval,
    zeros_like_aval,
)
from funcgrad.interpreters.partial_eval import PartialEvalTrace, split_jaxpr
from funcgrad.interpreters.staging import StagingTrace, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Var, eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow.common import (
    avals_of,
    check_callable,
    check_same_types,
    stage,
)
from funcgrad.lax.elementwise import (
    clamp,
    convert_element_type,
    eq,
    ne,
    select_n,
    stop_gradient,
)
from funcgrad.lax.shapes import broadcast_in_dim

__all__ = ["cond", "switch"]

# ---------------------------------------------------------------------------------------------
# The primitive

cond_p = Primitive("cond", multiple_results=True, higher_order=True)


@cond_p.def_impl
def _cond_impl(index, *args, branches: tuple[ClosedJaxpr, ...]):
    # The wrappers clamp the index; clamping here as well gives every index a branch, the
    # same one the batched select picks.
    chosen = branches[int(np.clip(index._value, 0, len(branches) - 1))]
    return eval_jaxpr(chosen.jaxpr, chosen.consts, *args)


@cond_p.def_abstract_eval
def _cond_abstract_eval(index: ShapedArray, *avals: ShapedArray, branches):
    if index.shape != () or index.dtype != dtypes.int32:
        raise TypeError(f"cond: the branch index must be an i32[] scalar, got {index.str_short()}")
    expected = branches[0].in_avals
    if len(avals) != len(expected) or any(
        a.shape != e.shape or a.dtype != e.dtype for a, e in zip(avals, expected)
    ):
        raise TypeError(
            "cond: operands of types "
            + ", ".join(a.str_short() for a in avals)
            + " do not match the branches' inputs "
            + ", ".join(e.str_short() for e in expected)
        )
    return branches[0].out_avals


@cond_p.def_weak_type
def _cond_weak_type(weak_flags, *, branches) -> list[bool]:
    return [a.weak_type for a in branches[0].out_avals]


# ---------------------------------------------------------------------------------------------
# Rebuilding branches: every transformation makes new branches, which must agree on types


def _new_branch(fun: Callable, in_avals: Sequence[ShapedArray]) -> ClosedJaxpr:
    return trace_to_jaxpr(fun, list(in_avals), "a cond branch")[0]


def _join_outputs(branches: Sequence[ClosedJaxpr]) -> tuple[ClosedJaxpr, ...]:
    """The branches with one output type: an output weak in one branch and strong in another
    is strong in all (the weak one is converted), as in JAX."""
    weak = [all(flags) for flags in zip(*([a.weak_type for a in b.out_avals] for b in branches))]

    def strengthen(closed: ClosedJaxpr) -> ClosedJaxpr:
        if [a.weak_type for a in closed.out_avals] == weak:
            return closed

        def fun(*args):
            outs = eval_jaxpr(closed.jaxpr, closed.consts, *args)
            return [o if w else convert_element_type(o, o.dtype) for o, w in zip(outs, weak)]

        return _new_branch(fun, closed.in_avals)

    return tuple(map(strengthen, branches))


# ---------------------------------------------------------------------------------------------
# Differentiation


@cond_p.def_jvp
def _cond_jvp(primals, tangents, *, branches):
    index, *operands = primals
    nonzero = [type(t) is not Zero for t in tangents[1:]]
    jvps = [jvp_jaxpr(b, nonzero) for b in branches]
    out_nonzero = [any(flags) for flags in zip(*(flags for _, flags in jvps))]
    jvp_branches = _join_outputs(
        [_instantiate_tangents(closed, flags, out_nonzero) for closed, flags in jvps]
    )
    nonzero_tangents = [t for t in tangents[1:] if type(t) is not Zero]
    outs = cond_p.bind(index, *operands, *nonzero_tangents, branches=jvp_branches)
    out_avals = branches[0].out_avals
    tangent_outs = iter(outs[len(out_avals) :])
    return outs[: len(out_avals)], [
        next(tangent_outs) if nz else Zero(tangent_aval(aval))
        for nz, aval in zip(out_nonzero, out_avals)
    ]


def _instantiate_tangents(
    closed: ClosedJaxpr, out_nonzero: Sequence[bool], wanted: Sequence[bool]
) -> ClosedJaxpr:
    """A jvp branch returning a tangent (zeros if need be) for every output `wanted`."""
    if list(out_nonzero) == list(wanted):
        return closed
    num_primals = len(out_nonzero)

    def fun(*args):
        outs = eval_jaxpr(closed.jaxpr, closed.consts, *args)
        primals, tangents = outs[:num_primals], iter(outs[num_primals:])
        filled = []
        for nz, want, primal in zip(out_nonzero, wanted, primals):
            if nz:
                filled.append(next(tangents))
            elif want:
                filled.append(zeros_like_aval(tangent_aval(core.get_aval(primal))))
        return primals + filled

    return _new_branch(fun, closed.in_avals)


def _cond_transpose(cotangents, index, *operands, branches):
    """A cond of the branches' transposes: each branch is linear in the undefined operands
    and may read the others (residuals), which the transposed cond takes as operands."""
    linear = [is_undefined(op) for op in operands]
    ct_nonzero = [type(ct) is not Zero for ct in cotangents]
    transposed = _join_outputs([_transpose_branch(b, linear, ct_nonzero) for b in branches])
    residuals = [op for op in operands if not is_undefined(op)]
    nonzero_cts = [ct for ct in cotangents if type(ct) is not Zero]
    cts = iter(cond_p.bind(index, *residuals, *nonzero_cts, branches=transposed))
    return [None] + [_next_cotangent(cts, op.aval) if is_undefined(op) else None for op in operands]


cond_p.def_transpose(_cond_transpose)


def _has_cotangent(aval: ShapedArray) -> bool:
    return tangent_aval(aval).dtype != float0


def _next_cotangent(cts, aval: ShapedArray):
    return next(cts) if _has_cotangent(aval) else Zero(tangent_aval(aval))


def _transpose_branch(
    closed: ClosedJaxpr, linear: Sequence[bool], ct_nonzero: Sequence[bool]
) -> ClosedJaxpr:
    """(residuals, nonzero cotangents) -> cotangents of the linear inputs (zeros if none)."""
    in_avals = closed.in_avals
    residual_avals = [a for a, lin in zip(in_avals, linear) if not lin]
    ct_avals = [tangent_aval(a) for a, nz in zip(closed.out_avals, ct_nonzero) if nz]

    def fun(*args):
        residuals = iter(args[: len(residual_avals)])
        cts = iter(args[len(residual_avals) :])
        operands = [
            UndefinedPrimal(a) if lin else next(residuals) for a, lin in zip(in_avals, linear)
        ]
        cts_out = [
            next(cts) if nz else Zero(tangent_aval(a))
            for a, nz in zip(closed.out_avals, ct_nonzero)
        ]
        cts_in = backward_pass(closed.jaxpr, closed.consts, operands, cts_out)
        return [
            instantiate(ct)
            for ct, a, lin in zip(cts_in, in_avals, linear)
            if lin and _has_cotangent(a)
        ]

    return _new_branch(fun, residual_avals + ct_avals)


def _cond_partial_eval(trace: PartialEvalTrace, args: Sequence, params: dict) -> list:
    """Split a cond whose operands are partly known, when the index is known.

    The known parts of the branches run now in one cond, which also returns their residuals
    in a layout all branches share; the unknown parts are staged as a cond taking the index,
    the residuals and the unknown operands. So reverse mode keeps the chosen branch's values
    rather than recomputing them. An unknown index stages the whole cond.
    """
    index, *operands = args
    if trace.is_unknown(index):
        return StagingTrace.process_primitive(trace, cond_p, args, params)
    branches = params["branches"]
    unknowns = [trace.is_unknown(op) for op in operands]
    splits = [_split_branch(b, unknowns) for b in branches]
    out_unknown = [any(flags) for flags in zip(*(flags for _, _, flags in splits))]
    num_known_out = out_unknown.count(False)
    if any(out_unknown):
        residual_avals = [_residual_avals(known, flags, out_unknown) for known, _, flags in splits]
    else:
        residual_avals = [[] for _ in splits]
    layout, slots = _residual_layout(residual_avals)
    known_branches = _join_outputs(
        [
            _known_branch(known, flags, out_unknown, branch_slots, layout)
            for (known, _, flags), branch_slots in zip(splits, slots)
        ]
    )
    known_ops = [op for op, u in zip(operands, unknowns) if not u]
    with core.set_current_trace(trace.parent):
        known_outs = cond_p.bind(index, *known_ops, branches=known_branches)
    if not any(out_unknown):
        return known_outs
    layout = known_branches[0].out_avals[num_known_out:]
    unknown_avals = [a for a, u in zip(branches[0].in_avals, unknowns) if u]
    unknown_branches = _join_outputs(
        [
            _unknown_branch(unknown, flags, out_unknown, branch_slots, layout, unknown_avals)
            for (_, unknown, flags), branch_slots in zip(splits, slots)
        ]
    )
    residuals = known_outs[num_known_out:]
    unknown_ops = [op for op, u in zip(operands, unknowns) if u]
    staged = StagingTrace.process_primitive(
        trace, cond_p, [index, *residuals, *unknown_ops], dict(branches=unknown_branches)
    )
    known_iter, staged_iter = iter(known_outs[:num_known_out]), iter(staged)
    return [next(staged_iter) if u else next(known_iter) for u in out_unknown]


cond_p.partial_eval = _cond_partial_eval


def _split_branch(
    closed: ClosedJaxpr, unknowns: Sequence[bool]
) -> tuple[ClosedJaxpr, ClosedJaxpr, list[bool]]:
    """Split one branch: known inputs -> (the outputs known here, residuals), and (residuals,
    unknown inputs) -> the other outputs; also which outputs are unknown here."""
    known, unknown, _, out_unknown = split_jaxpr(closed, unknowns, what="a cond branch")
    return known, unknown, out_unknown


def _residual_avals(
    known: ClosedJaxpr, branch_unknown: Sequence[bool], out_unknown: Sequence[bool]
) -> list[ShapedArray]:
    """A branch's residuals: its own, then the outputs it knows that another branch does not
    (the unknown cond returns them, so they travel as residuals)."""
    num_known_here = branch_unknown.count(False)
    known_avals = iter(known.out_avals[:num_known_here])
    passed = [next(known_avals) if not here else None for here in branch_unknown]
    own = known.out_avals[num_known_here:]
    return own + [a for a, here, u in zip(passed, branch_unknown, out_unknown) if u and not here]


def _residual_layout(
    residual_avals: Sequence[Sequence[ShapedArray]],
) -> tuple[list[ShapedArray], list[list[int]]]:
    """Slots for every branch's residuals, shared across branches by shape and dtype.

    Only one branch runs, so a slot holds a value of whichever branch that is: the layout has
    as many slots of each type as the branch needing the most, not the sum over branches.
    Returns the slots' avals and, per branch, the slot of each of its residuals.
    """
    layout: list[ShapedArray] = []
    slots = []
    for avals in residual_avals:
        taken: set[int] = set()
        branch_slots = []
        for aval in avals:
            slot = next(
                (
                    i
                    for i, s in enumerate(layout)
                    if i not in taken and s.shape == aval.shape and s.dtype == aval.dtype
                ),
                None,
            )
            if slot is None:
                slot = len(layout)
                layout.append(aval)
            taken.add(slot)
            branch_slots.append(slot)
        slots.append(branch_slots)
    return layout, slots


def _known_branch(
    known: ClosedJaxpr,
    branch_unknown: Sequence[bool],
    out_unknown: Sequence[bool],
    slots: Sequence[int],
    layout: Sequence[ShapedArray],
) -> ClosedJaxpr:
    """The known part of a branch: the outputs known in every branch, then its residuals in
    `layout` (zeros in the slots it leaves)."""
    num_known_here = branch_unknown.count(False)

    def fun(*args):
        outs = eval_jaxpr(known.jaxpr, known.consts, *args)
        known_here = iter(outs[:num_known_here])
        results, passed = [], []
        for here, u in zip(branch_unknown, out_unknown):
            if not here:
                (passed if u else results).append(next(known_here))
        padded = [zeros_like_aval(a) for a in layout]
        for slot, residual in zip(slots, outs[num_known_here:] + passed):
            padded[slot] = residual
        return results + padded

    return _new_branch(fun, known.in_avals)


def _unknown_branch(
    unknown: ClosedJaxpr,
    branch_unknown: Sequence[bool],
    out_unknown: Sequence[bool],
    slots: Sequence[int],
    layout: Sequence[ShapedArray],
    unknown_avals: Sequence[ShapedArray],
) -> ClosedJaxpr:
    """The unknown part of a branch, taking the whole residual layout and the unknown
    operands, and returning every output unknown in some branch."""
    num_own = len(unknown.in_avals) - len(unknown_avals)

    def fun(*args):
        residuals = [args[slot] for slot in slots]
        operands = args[len(layout) :]
        outs = iter(eval_jaxpr(unknown.jaxpr, unknown.consts, *residuals[:num_own], *operands))
        passed = iter(residuals[num_own:])
        return [
            next(outs) if here else next(passed)
            for here, u in zip(branch_unknown, out_unknown)
            if u
        ]

    return _new_branch(fun, list(layout) + list(unknown_avals))


# ---------------------------------------------------------------------------------------------
# Batching


@cond_p.def_batch
def _cond_batch(values, dims, *, branches):
    """An unbatched index picks one batched branch for all lanes. A batched index picks per
    lane, so every branch runs on the whole batch and a select takes each lane's result."""
    size = batching.batch_size(values, dims)
    (index, *operands), (index_dim, *operand_dims) = values, dims
    operands = [
        op if d is None else batching.moveaxis(op, d, 0) for op, d in zip(operands, operand_dims)
    ]
    in_batched = [d is not None for d in operand_dims]
    if index_dim is None:
        batched = [batching.batch_jaxpr_outputs(b, in_batched, size) for b in branches]
        out_batched = [any(flags) for flags in zip(*(flags for _, flags in batched))]
        batched_branches = _join_outputs(
            [_batch_outputs(closed, flags, out_batched, size) for closed, flags in batched]
        )
        outs = cond_p.bind(index, *operands, branches=batched_branches)
        return outs, [0 if b else None for b in out_batched]
    index = batching.moveaxis(index, index_dim, 0)
    index = clamp(np.int32(0), index, np.int32(len(branches) - 1))
    # Unbatched inexact operands are broadcast, so that _lanes_taking can mask them per lane
    # too: a shared operand's cotangent sums over every lane, those that do not take a branch
    # included, and one NaN there (sqrt of a negative in the branch not taken) made it NaN.
    operands = [
        batching.broadcast_batch(op, size, 0) if not b and _is_inexact(op) else op
        for op, b in zip(operands, in_batched)
    ]
    in_batched = [b or _is_inexact(op) for op, b in zip(operands, in_batched)]
    batched = [batching.batch_jaxpr(b, in_batched, size) for b in branches]
    branch_outs = [
        eval_jaxpr(b.jaxpr, b.consts, *_lanes_taking(k, index, operands, in_batched))
        for k, b in enumerate(batched)
    ]
    outs = [
        select_n(broadcast_in_dim(index, core.get_aval(cases[0]).shape, (0,)), *cases)
        for cases in zip(*branch_outs)
    ]
    return outs, [0] * len(outs)


def _is_inexact(x) -> bool:
    return dtypes.is_inexact(core.get_aval(x).dtype)


def _lanes_taking(k: int, index, operands: Sequence, in_batched: Sequence[bool]) -> list:
    """Branch k's operands, differentiable only in the lanes that take branch k.

    The other lanes run branch k on values it was never meant for (the zeros that pad another
    branch's residuals, say), where its derivatives may be infinite; a zero cotangent times an
    infinite derivative is NaN, which would reach the shared operands' cotangents."""
    taken = eq(index, np.int32(k))
    masked = []
    for op, batched in zip(operands, in_batched):
        aval = core.get_aval(op)
        if batched and dtypes.is_inexact(aval.dtype):
            lanes = broadcast_in_dim(taken, aval.shape, (0,))
            op = select_n(lanes, stop_gradient(op), op)
        masked.append(op)
    return masked


def _batch_outputs(
    closed: ClosedJaxpr, out_batched: Sequence[bool], wanted: Sequence[bool], size: int
) -> ClosedJaxpr:
    """A batched branch whose outputs are batched (at axis 0) exactly where `wanted`."""
    if list(out_batched) == list(wanted):
        return closed

    def fun(*args):
        outs = eval_jaxpr(closed.jaxpr, closed.consts, *args)
        return [
            batching.broadcast_batch(o, size, 0) if want and not b else o
            for o, b, want in zip(outs, out_batched, wanted)
        ]

    return _new_branch(fun, closed.in_avals)


# ---------------------------------------------------------------------------------------------
# Public wrappers


# The default of `operand`, which no caller's value can be.
_NO_OPERAND = object()


def _single_operand(name: str, operands: tuple, operand) -> tuple:
    """The operands of a cond or switch called in the older form with one `operand=`."""
    if operand is _NO_OPERAND:
        return operands
    if operands:
        raise TypeError(
            f"{name}: pass the operands by position or one operand= by name, not both; got "
            f"operand={operand!r} and {len(operands)} operand(s) by position"
        )
    return (operand,)


def cond(pred, true_fun: Callable, false_fun: Callable, *operands, operand=_NO_OPERAND):
    """`true_fun(*operands)` if `pred` else `false_fun(*operands)`, as one staged primitive.

    Both functions are staged (so both must return the same pytree of shapes and dtypes);
    only the chosen one runs, except under vmap with a batched `pred`, where both run.
    `operand=x` is the older spelling of one operand x.
    """
    operands = _single_operand("cond", operands, operand)
    check_callable("cond", true_fun=true_fun, false_fun=false_fun)
    pred = asarray(pred)
    if pred.ndim != 0:
        raise TypeError(f"cond: pred must be a scalar, got an array of shape {pred.shape}")
    if pred.dtype != dtypes.bool_:
        if not (dtypes.is_inexact(pred.dtype) or dtypes.is_int(pred.dtype)):
            raise TypeError(f"cond: pred must be a boolean or a number, got {pred.dtype.name}")
        pred = ne(pred, asarray(np.zeros((), pred.dtype)))
    if config.disable_jit and type(pred) is Array:
        return true_fun(*operands) if bool(pred) else false_fun(*operands)
    index = convert_element_type(pred, np.int32)
    consts, leaves, (on_true, on_false), out_tree = _stage_branches(
        (true_fun, false_fun), ("true_fun", "false_fun"), operands
    )
    outs = cond_p.bind(index, *consts, *leaves, branches=_join_outputs([on_false, on_true]))
    return tree_util.tree_unflatten(out_tree, outs)


def switch(index, branches: Sequence[Callable], *operands, operand=_NO_OPERAND):
    """`branches[index](*operands)`, with `index` clamped to the valid range.

    Every branch is staged and must return the same pytree of shapes and dtypes; only the
    chosen one runs, except under vmap with a batched `index`, where all run. `operand=x` is
    the older spelling of one operand x.
    """
    operands = _single_operand("switch", operands, operand)
    branches = tuple(branches)
    if not branches:
        raise ValueError("switch: branches must be a non-empty sequence of functions")
    check_callable("switch", **{f"branch {i}": b for i, b in enumerate(branches)})
    index = asarray(index)
    if index.ndim != 0:
        raise TypeError(f"switch: index must be a scalar, got an array of shape {index.shape}")
    if dtypes.is_bool(index.dtype):
        index = convert_element_type(index, np.int32)
    if not dtypes.is_int(index.dtype):
        raise TypeError(f"switch: index must be an integer, got {index.dtype.name}")
    # Clamp before narrowing to int32, so a large 64-bit index cannot wrap around.
    last = min(len(branches) - 1, int(np.iinfo(index.dtype).max))
    index = clamp(np.zeros((), index.dtype), index, np.asarray(last, index.dtype)[()])
    index = convert_element_type(index, np.int32)
    if len(branches) == 1:
        return branches[0](*operands)
    if config.disable_jit and type(index) is Array:
        return branches[int(index)](*operands)
    names = tuple(f"branch {i}" for i in range(len(branches)))
    consts, leaves, staged, out_tree = _stage_branches(branches, names, operands)
    outs = cond_p.bind(index, *consts, *leaves, branches=_join_outputs(staged))
    return tree_util.tree_unflatten(out_tree, outs)


def _stage_branches(funs: Sequence[Callable], names: Sequence[str], operands: tuple):
    """Stage every function on the operands, check that their outputs agree, and give them
    one list of inputs. Returns (consts, operand leaves, branches, output treedef)."""
    leaves, in_tree = tree_util.tree_flatten(operands)
    leaves = [asarray(x) for x in leaves]
    in_avals = avals_of(leaves)
    staged = [stage(fun, in_tree, in_avals, name) for fun, name in zip(funs, names)]
    first_jaxpr, _, first_tree = staged[0]
    for name, (jaxpr, _, out_tree) in zip(names[1:], staged[1:]):
        check_same_types(
            f"{names[0]} and {name} outputs",
            first_jaxpr.out_avals,
            jaxpr.out_avals,
            first_tree,
            out_tree,
        )
    consts, branches = _share_consts([(jaxpr, branch_consts) for jaxpr, branch_consts, _ in staged])
    return consts, leaves, branches, first_tree


def _share_consts(staged: Sequence[tuple[ClosedJaxpr, list]]) -> tuple[list, list[ClosedJaxpr]]:
    """One list of the values any branch closes over (each once), and the branches taking all
    of them as leading inputs, ignoring the others' values."""
    consts: list = []
    position: dict[int, int] = {}
    for _, branch_consts in staged:
        for c in branch_consts:
            if id(c) not in position:
                position[id(c)] = len(consts)
                consts.append(c)
    const_avals = avals_of(consts)
    branches = []
    for closed, branch_consts in staged:
        jaxpr = closed.jaxpr
        const_vars = [Var(a) for a in const_avals]
        for c, var in zip(branch_consts, jaxpr.invars):
            const_vars[position[id(c)]] = var
        invars = const_vars + jaxpr.invars[len(branch_consts) :]
        branches.append(
            ClosedJaxpr(Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns), closed.consts)
        )
    return consts, branches


def _cond_dce(eqn, used_outputs: list[bool]):
    """Drop the outputs nobody reads from every branch, and the operands no branch reads."""
    branches = eqn.params["branches"]
    if not any(used_outputs) and not any(passes.jaxpr_has_effects(b.jaxpr) for b in branches):
        return None, [False] * len(eqn.invars)
    read = [False] * (len(eqn.invars) - 1)
    for branch in branches:
        _, branch_read = passes.dce_closed_jaxpr(branch, used_outputs)
        read = [a or b for a, b in zip(read, branch_read)]
    if all(used_outputs) and all(read):
        return eqn, [True] * len(eqn.invars)
    pruned = tuple(passes.prune_jaxpr(b, used_outputs, read) for b in branches)
    new_eqn = JaxprEqn(
        cond_p,
        [eqn.invars[0]] + [v for v, r in zip(eqn.invars[1:], read) if r],
        [v for v, used in zip(eqn.outvars, used_outputs) if used],
        dict(eqn.params, branches=pruned),
        eqn.source_info,
    )
    return new_eqn, [True] + read


passes.dce_rules[cond_p] = _cond_dce
