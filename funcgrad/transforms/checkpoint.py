"""checkpoint (remat): recompute a function's intermediates in the backward pass.

`checkpoint(f)` stages f into a jaxpr bound as the `checkpoint` primitive. Its jvp rule splits
the jvp of that jaxpr in two with a *policy*: a known part that computes the primal outputs and
the residuals the policy lets it save, and an unknown part that takes those residuals and the
tangents and recomputes everything else. Under linearize only the unknown part is staged into
the linear program, so the backward pass stores the inputs (and the saved values) instead of
every intermediate.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from funcgrad import core, tree_util
from funcgrad.compiler.passes import dead_code_elimination, inline_calls
from funcgrad.config import config
from funcgrad.core import Primitive
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import (
    UndefinedPrimal,
    Zero,
    backward_pass,
    is_undefined,
    jvp_jaxpr,
    tangent_aval,
)
from funcgrad.interpreters.partial_eval import (
    PartialEvalTrace,
    partial_eval_jaxpr,
    split_jaxpr,
    unknown_outputs,
)
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.transforms.make_jaxpr import function_name

# ---------------------------------------------------------------------------------------------
# Policies: which primal values may be saved for the backward pass instead of recomputed


def nothing_saveable(primitive: Primitive, *avals, **params) -> bool:
    return False


def everything_saveable(primitive: Primitive, *avals, **params) -> bool:
    return True


def dots_saveable(primitive: Primitive, *avals, **params) -> bool:
    return primitive.name in ("dot_general", "conv_general_dilated")


def dots_with_no_batch_dims_saveable(primitive: Primitive, *avals, **params) -> bool:
    if primitive.name != "dot_general":
        return False
    (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
    return not lhs_batch and not rhs_batch


class checkpoint_policies:
    """The policies, under the names JAX uses."""

    nothing_saveable = staticmethod(nothing_saveable)
    everything_saveable = staticmethod(everything_saveable)
    dots_saveable = staticmethod(dots_saveable)
    checkpoint_dots = staticmethod(dots_saveable)
    dots_with_no_batch_dims_saveable = staticmethod(dots_with_no_batch_dims_saveable)


# ---------------------------------------------------------------------------------------------
# The primitive

checkpoint_p = Primitive("checkpoint", multiple_results=True, higher_order=True)


@checkpoint_p.def_impl
def _checkpoint_impl(*args, jaxpr: ClosedJaxpr, policy, prevent_cse: bool):
    return eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)


@checkpoint_p.def_abstract_eval
def _checkpoint_abstract_eval(*avals, jaxpr: ClosedJaxpr, policy, prevent_cse: bool):
    return jaxpr.out_avals


@checkpoint_p.def_weak_type
def _checkpoint_weak_type(weak_flags, *, jaxpr: ClosedJaxpr, policy, prevent_cse) -> list[bool]:
    return [a.weak_type for a in jaxpr.out_avals]


@checkpoint_p.def_jvp
def _checkpoint_jvp(primals, tangents, *, jaxpr: ClosedJaxpr, policy, prevent_cse: bool):
    nonzero = [type(t) is not Zero for t in tangents]
    jvp_closed, out_nonzero = jvp_jaxpr(jaxpr, nonzero)
    # Calls are inlined so that the policy sees (and may save) the equations inside them.
    jvp_closed = inline_calls(jvp_closed)
    num_primal_out = len(jaxpr.out_avals)
    unknowns = [False] * len(primals) + [True] * sum(nonzero)
    params = dict(policy=policy, prevent_cse=prevent_cse)
    nonzero_tangents = [t for t in tangents if type(t) is not Zero]
    if any(unknown_outputs(jvp_closed.jaxpr, unknowns)[:num_primal_out]):
        # A higher-order equation (cond, scan, ...) computes primal and tangent values
        # together, so the policy cannot split it: save only the inputs and recompute all.
        primal_jaxpr = _forward_pass(jvp_closed, unknowns, num_primal_out)
        primal_outs = checkpoint_p.bind(*primals, jaxpr=primal_jaxpr or jaxpr, **params)
        tangent_jaxpr = _recomputation(_outputs_from(jvp_closed, num_primal_out))
        tangent_outs = checkpoint_p.bind(*primals, *nonzero_tangents, jaxpr=tangent_jaxpr, **params)
    else:
        out_unknown = [i >= num_primal_out for i in range(len(jvp_closed.out_avals))]
        known, unknown, _ = partial_eval_jaxpr(
            jvp_closed, unknowns, out_unknown, policy or nothing_saveable
        )
        known_outs = checkpoint_p.bind(*primals, jaxpr=known, **params)
        primal_outs, residuals = known_outs[:num_primal_out], known_outs[num_primal_out:]
        unknown = _recomputation(unknown)
        tangent_outs = checkpoint_p.bind(*residuals, *nonzero_tangents, jaxpr=unknown, **params)
    tangent_iter = iter(tangent_outs)
    return primal_outs, [
        next(tangent_iter) if nz else Zero(tangent_aval(aval))
        for nz, aval in zip(out_nonzero, jaxpr.out_avals)
    ]


def _forward_pass(jvp_closed: ClosedJaxpr, unknowns: list, num_primal_out: int):
    """The primal outputs as the jvp program computes them, split from its tangents by
    evaluation (nested conds and scans split themselves), or None if they do not split off.
    A transformation differentiating the primal outputs further must see this forward pass
    rather than the original program: a custom_vjp function's forward pass is its fwd rule,
    while the function itself refuses forward mode."""
    split = split_jaxpr(jvp_closed, unknowns, what="the jvp of a checkpoint")
    if any(split.out_unknown[:num_primal_out]):
        return None
    known = split.known.jaxpr
    primal_only = Jaxpr(known.constvars, known.invars, known.outvars[:num_primal_out], known.eqns)
    return dead_code_elimination(ClosedJaxpr(primal_only, split.known.consts))


def _recomputation(closed: ClosedJaxpr) -> ClosedJaxpr:
    """The part of the jvp program that recomputes primal values: under key-reuse checking,
    without the key uses the primal computation has recorded already."""
    if not config.debug_key_reuse:
        return closed
    from funcgrad.key_reuse import without_key_uses  # (it builds on this module)

    return without_key_uses(closed)


def _outputs_from(closed: ClosedJaxpr, start: int) -> ClosedJaxpr:
    jaxpr = closed.jaxpr
    kept = Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars[start:], jaxpr.eqns)
    return ClosedJaxpr(kept, closed.consts)


def _checkpoint_transpose(cotangents, *operands, jaxpr: ClosedJaxpr, policy, prevent_cse):
    """Transpose the linear part by rematerializing: re-run the program with its defined
    operands known (recomputing what was not saved), stage what depends on the undefined ones
    into a linear program, and run that backwards. Partial evaluation (rather than transposing
    the equations as they are) lets nested scans and conds split themselves."""
    trace = PartialEvalTrace(core.current_trace(), "transpose of checkpoint")
    inputs = [trace.new_arg(op.aval) if is_undefined(op) else op for op in operands]
    try:
        with core.set_current_trace(trace):
            outs = eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *inputs)
        linear_outs = [(o, ct) for o, ct in zip(outs, cotangents) if trace.is_unknown(o)]
        linear = trace.to_closed_jaxpr([o for o, _ in linear_outs])
    finally:
        trace.alive = False
    args = [UndefinedPrimal(v.aval) for v in linear.jaxpr.invars]
    cts_in = iter(backward_pass(linear.jaxpr, linear.consts, args, [ct for _, ct in linear_outs]))
    return [next(cts_in) if is_undefined(op) else None for op in operands]


checkpoint_p.def_transpose(_checkpoint_transpose)


@checkpoint_p.def_batch
def _checkpoint_batch(values, dims, *, jaxpr: ClosedJaxpr, policy, prevent_cse: bool):
    size = batching.batch_size(values, dims)
    in_batched = [d is not None for d in dims]
    values = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(values, dims)]
    batched = batching.batch_jaxpr(jaxpr, in_batched, size)
    outs = checkpoint_p.bind(*values, jaxpr=batched, policy=policy, prevent_cse=prevent_cse)
    return outs, [0] * len(outs)


# ---------------------------------------------------------------------------------------------
# The public transform


# The default of checkpoint's `concrete`, an option that no longer exists.
_NO_CONCRETE = object()


def checkpoint(
    fun: Callable,
    *,
    prevent_cse: bool = True,
    policy: Callable | None = None,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Iterable[str] = (),
    concrete: Any = _NO_CONCRETE,
) -> Callable:
    """`fun`, differentiated by recomputing its intermediates instead of storing them.

    `policy(primitive, *avals, **params) -> bool` names the values that may be saved anyway,
    e.g. `checkpoint_policies.dots_saveable`; by default only the inputs are saved. The
    arguments `static_argnums` and `static_argnames` point at (by position or by name, either
    way they are passed) reach `fun` as the Python values they are, not traced.
    """
    if concrete is not _NO_CONCRETE:
        raise NotImplementedError(
            "checkpoint: the concrete option is gone; mark the arguments Python control flow "
            "depends on with static_argnums or static_argnames instead"
        )
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    static_names = (
        (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    )
    static = static + _positions_of(fun, static_names)

    @functools.wraps(fun)
    def checkpointed(*args, **kwargs):
        static_values = {i: args[i] for i in static if i < len(args)}
        dynamic = [a for i, a in enumerate(args) if i not in static]
        static_kwargs = {k: v for k, v in kwargs.items() if k in static_names}
        kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
        leaves, in_tree = tree_util.tree_flatten((dynamic, kwargs))
        leaves = [x if core.is_float0(x) else asarray(x) for x in leaves]
        # float0 values (tangents of integers) hold no data: the function gets such arguments
        # as they are, and such outputs are put back around the staged program, as jit does.
        structure: list = []

        def flat_fun(*flat):
            staged = iter(flat)
            flat = [x if core.is_float0(x) else next(staged) for x in leaves]
            dynamic_args, dynamic_kwargs = tree_util.tree_unflatten(in_tree, flat)
            dynamic_args = iter(dynamic_args)
            full = [
                static_values[i] if i in static else next(dynamic_args) for i in range(len(args))
            ]
            out = fun(*full, **dynamic_kwargs, **static_kwargs)
            out_leaves, out_tree = tree_util.tree_flatten(out)
            structure.append((out_tree, [x if core.is_float0(x) else None for x in out_leaves]))
            return [x for x in out_leaves if not core.is_float0(x)]

        inputs = [x for x in leaves if not core.is_float0(x)]
        closed, _ = trace_to_jaxpr(
            flat_fun, [x.aval for x in inputs], f"checkpoint({function_name(fun)})"
        )
        ((out_tree, float0_outs),) = structure
        jaxpr = closed.jaxpr
        hoisted = Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)
        outs = iter(
            checkpoint_p.bind(
                *closed.consts,
                *inputs,
                jaxpr=ClosedJaxpr(hoisted, []),
                policy=policy,
                prevent_cse=prevent_cse,
            )
        )
        out_leaves = [next(outs) if x is None else x for x in float0_outs]
        return tree_util.tree_unflatten(out_tree, out_leaves)

    return checkpointed


def _positions_of(fun: Callable, names: tuple[str, ...]) -> tuple[int, ...]:
    """The positions of `fun`'s parameters named `names` that may be passed by position."""
    if not names:
        return ()
    try:
        parameters = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):  # no signature: the names are static when passed by name
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p.name for p in parameters if p.kind in kinds]
    return tuple(i for i, name in enumerate(positional) if name in names)


remat = checkpoint
