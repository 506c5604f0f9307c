"""custom_vmap: a function whose batching under vmap is a rule the user writes.

The decorated function is staged and bound as the higher-order primitive `custom_vmap_call`,
carrying the program and the user's rule. Every interpreter but batching runs the program
(eagerly, compiled by jit, where the compiler inlines it); the batching rule calls the user's
rule instead, with the batched arguments' vmapped axis moved to the front.

Differentiation follows JAX, and goes one step further. The jvp of a call is two calls: the
primal outputs, by the same call, and the tangent outputs, by a call of the jvp program (its
tangent outputs) whose batching rule is the jvp of the user's rule. So vmap of jvp, and jvp
of vmap, use the user's rule (vmap of the tangent call differentiates the rule). Under
linearize the tangent call is staged with the primals as residuals; it is linear in the
tangents, and its transpose is that of its program (the rule plays no part in reverse mode, as
the transposed program is batched like any other). So grad works, where JAX refuses it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, tree_util
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
)
from funcgrad.ir import ClosedJaxpr, Jaxpr
from funcgrad.lax.base import asarray
from funcgrad.transforms.custom_derivatives import _declare_call, _resolve_args, _stage
from funcgrad.transforms.make_jaxpr import function_name

custom_vmap_call_p = _declare_call("custom_vmap_call")
del custom_vmap_call_p.not_applicable["transpose"]


class custom_vmap:
    """A function with a user-defined vmap rule.

    @custom_vmap
    def f(x, y): ...

    @f.def_vmap
    def f_vmap_rule(axis_size, in_batched, xs, ys):
        # in_batched: one tree of bools per argument (True: mapped, along axis 0);
        # an unbatched argument is passed as it is.
        return out, out_batched  # out_batched: a bool, or a tree of bools like out

    Outside vmap (eagerly, under jit, grad or jvp) the function itself runs. Under vmap the
    rule computes every lane at once: an output marked batched has the vmapped axis first.
    Values the function closes over must not be batched (pass them as arguments).
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vmap_rule: Callable | None = None

    def def_vmap(self, vmap_rule: Callable) -> Callable:
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args, **kwargs):
        name = function_name(self.fun)
        if self.vmap_rule is None:
            raise AttributeError(
                f"no vmap rule is defined for custom_vmap function {name}; use def_vmap"
            )
        args = _resolve_args(self.fun, args, kwargs)
        if core.current_trace() is core.eval_trace():
            return self.fun(*args)
        leaves, in_tree = tree_util.tree_flatten(args)
        leaves = [asarray(x) for x in leaves]

        def flat_fun(*flat):
            return self.fun(*tree_util.tree_unflatten(in_tree, flat))

        call_jaxpr, consts, out_tree = _stage(flat_fun, leaves, f"custom_vmap({name})")
        rule = _FlatRule(self.vmap_rule, in_tree, out_tree, call_jaxpr.out_avals, name)
        outs = custom_vmap_call_p.bind(
            *consts, *leaves, call_jaxpr=call_jaxpr, rule=rule, num_consts=len(consts)
        )
        return tree_util.tree_unflatten(out_tree, outs)


class _FlatRule:
    """The user's rule on flat lists of leaves: `(axis_size, in_batched, leaves)` ->
    `(out_leaves, out_batched)`, its results checked against the function's outputs."""

    def __init__(self, rule, in_tree, out_tree, out_avals, name: str):
        self.rule = rule
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.out_avals = list(out_avals)
        self.__name__ = name

    def __call__(self, axis_size: int, in_batched: list[bool], leaves: list):
        args = tree_util.tree_unflatten(self.in_tree, leaves)
        batched_args = tree_util.tree_unflatten(self.in_tree, in_batched)
        result = self.rule(axis_size, list(batched_args), *args)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise TypeError(
                f"the vmap rule of {self.__name__} must return a pair (out, out_batched)"
            )
        out, out_batched = result
        out_leaves, out_tree = tree_util.tree_flatten(out)
        if out_tree != self.out_tree:
            raise TypeError(
                f"the vmap rule of {self.__name__} returned output structure {out_tree}, but the "
                f"function returns {self.out_tree}"
            )
        batched = self._out_batched(out_batched)
        out_leaves = [asarray(x) for x in out_leaves]
        for i, (x, aval, b) in enumerate(zip(out_leaves, self.out_avals, batched)):
            shape = (axis_size, *aval.shape) if b else aval.shape
            if x.shape != shape or x.dtype != aval.dtype:
                expected = core.ShapedArray(shape, aval.dtype).str_short()
                raise TypeError(
                    f"the vmap rule of {self.__name__} returned {x.aval.str_short()} for output "
                    f"{i}, which it marks {'batched' if b else 'unbatched'}; that output must be "
                    f"{expected} (the function's output {aval.str_short()}"
                    f"{', with the batch axis first' if b else ''})"
                )
        return out_leaves, batched

    def _out_batched(self, out_batched) -> list[bool]:
        if isinstance(out_batched, (bool, np.bool_)):
            return [bool(out_batched)] * self.out_tree.num_leaves
        flags, tree = tree_util.tree_flatten(out_batched)
        if tree != self.out_tree or not all(isinstance(f, (bool, np.bool_)) for f in flags):
            raise TypeError(
                f"the vmap rule of {self.__name__} must return out_batched as a bool or a tree "
                f"of bools with the output's structure {self.out_tree}; got {out_batched!r}"
            )
        return [bool(f) for f in flags]

    def __repr__(self) -> str:
        return self.__name__


@custom_vmap_call_p.def_batch
def _custom_vmap_call_batch(values, dims, *, call_jaxpr, rule, num_consts):
    if any(d is not None for d in dims[:num_consts]):
        raise TypeError(
            f"custom_vmap function {rule.__name__} closes over a value that vmap is batching; "
            "its vmap rule cannot see such values. Pass the value to the function as an argument."
        )
    size = batching.batch_size(values, dims)
    args = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(values, dims)]
    in_batched = [d is not None for d in dims[num_consts:]]
    outs, out_batched = rule(size, in_batched, args[num_consts:])
    return outs, [0 if b else None for b in out_batched]


# ---------------------------------------------------------------------------------------------
# Differentiation


class _TangentRule:
    """The vmap rule of a tangent call: the jvp of the primal rule, returning the tangents.

    Its operands are the primals and the nonzero tangents. A primal and its tangent are given to
    the primal rule's jvp batched alike (the unbatched one broadcast), and each tangent output is
    batched as its primal output is (the two have one shape).
    """

    def __init__(self, rule, nonzero: Sequence[bool], out_nonzero: Sequence[bool], in_avals):
        self.rule = rule
        self.nonzero = list(nonzero)
        self.out_nonzero = list(out_nonzero)
        self.in_avals = list(in_avals)
        self.__name__ = f"jvp({rule.__name__})"

    def __call__(self, axis_size: int, in_batched: list[bool], leaves: list):
        from funcgrad.transforms.autodiff import jvp

        num = len(self.in_avals)
        primals, tangent_iter = list(leaves[:num]), iter(leaves[num:])
        tangent_batched = iter(in_batched[num:])
        batched = list(in_batched[:num])
        tangents = []
        for i, nz in enumerate(self.nonzero):
            if not nz:
                tangents.append(None)
                continue
            tangent, tb = next(tangent_iter), next(tangent_batched)
            if tb and not batched[i]:
                primals[i] = batching.broadcast_batch(primals[i], axis_size, 0)
                batched[i] = True
            elif batched[i] and not tb:
                tangent = batching.broadcast_batch(tangent, axis_size, 0)
            tangents.append(tangent)
        tangents = [
            _zero_tangent(p) if t is None else t for p, t in zip(primals, tangents, strict=True)
        ]
        out_batched: list[bool] = []

        def primal_rule(*flat):
            outs, flags = self.rule(axis_size, batched, list(flat))
            out_batched.extend(flags)
            return outs

        _, tangent_outs = jvp(primal_rule, primals, tangents)
        kept = [(t, b) for t, b, nz in zip(tangent_outs, out_batched, self.out_nonzero) if nz]
        return [t for t, _ in kept], [b for _, b in kept]

    def __repr__(self) -> str:
        return self.__name__


def _zero_tangent(primal):
    aval = tangent_aval(core.get_aval(primal))
    if aval.dtype == float0:
        return np.zeros(aval.shape, float0)
    return instantiate(Zero(aval))


def _tangent_program(call_jaxpr: ClosedJaxpr, nonzero: tuple[bool, ...]):
    """(primals, nonzero tangents) -> nonzero tangent outputs, and which outputs those are."""
    from funcgrad.compiler.passes import dead_code_elimination

    jvp_closed, out_nonzero = jvp_jaxpr(call_jaxpr, nonzero)
    jaxpr = jvp_closed.jaxpr
    num_out = len(call_jaxpr.out_avals)
    tangents_only = Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars[num_out:], jaxpr.eqns)
    return dead_code_elimination(ClosedJaxpr(tangents_only, jvp_closed.consts)), out_nonzero


@custom_vmap_call_p.def_jvp
def _custom_vmap_call_jvp(primals, tangents, *, call_jaxpr, rule, num_consts):
    nonzero = tuple(type(t) is not Zero for t in tangents)
    primal_outs = custom_vmap_call_p.bind(
        *primals, call_jaxpr=call_jaxpr, rule=rule, num_consts=num_consts
    )
    tangent_jaxpr, out_nonzero = _tangent_program(call_jaxpr, nonzero)
    tangent_rule = _TangentRule(
        rule, nonzero[num_consts:], out_nonzero, call_jaxpr.in_avals[num_consts:]
    )
    # Closed-over values and their tangents are operands the user's rule does not see: the
    # tangent call treats the closed-over primals and tangents as its own closed-over values.
    const_primals, arg_primals = list(primals[:num_consts]), list(primals[num_consts:])
    const_tangents = [t for t, nz in zip(tangents[:num_consts], nonzero) if nz]
    arg_tangents = [t for t, nz in zip(tangents[num_consts:], nonzero[num_consts:]) if nz]
    tangent_jaxpr = _consts_first(tangent_jaxpr, num_consts, len(primals), len(const_tangents))
    nonzero_outs = custom_vmap_call_p.bind(
        *const_primals,
        *const_tangents,
        *arg_primals,
        *arg_tangents,
        call_jaxpr=tangent_jaxpr,
        rule=tangent_rule,
        num_consts=num_consts + len(const_tangents),
    )
    nonzero_iter = iter(nonzero_outs)
    tangent_outs = [
        next(nonzero_iter) if nz else Zero(tangent_aval(aval))
        for nz, aval in zip(out_nonzero, call_jaxpr.out_avals)
    ]
    return primal_outs, tangent_outs


def _consts_first(closed: ClosedJaxpr, num_consts: int, num_primals: int, num_const_tangents):
    """Reorder the inputs (const primals, arg primals, const tangents, arg tangents) to (const
    primals, const tangents, arg primals, arg tangents)."""
    invars = closed.jaxpr.invars
    const_primals, arg_primals = invars[:num_consts], invars[num_consts:num_primals]
    const_tangents = invars[num_primals : num_primals + num_const_tangents]
    arg_tangents = invars[num_primals + num_const_tangents :]
    order = const_primals + const_tangents + arg_primals + arg_tangents
    jaxpr = closed.jaxpr
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, order, jaxpr.outvars, jaxpr.eqns), closed.consts)


@custom_vmap_call_p.def_transpose
def _custom_vmap_call_transpose(cotangents, *operands, call_jaxpr, rule, num_consts):
    """The transpose of a call linear in its undefined operands (a tangent call): that of its
    program."""
    jaxpr = call_jaxpr
    args = [UndefinedPrimal(op.aval) if is_undefined(op) else op for op in operands]
    cts = backward_pass(jaxpr.jaxpr, jaxpr.consts, args, list(cotangents))
    return [
        (None if type(ct) is Zero else ct) if is_undefined(op) else None
        for ct, op in zip(cts, operands)
    ]


def sequential_vmap(fun: Callable) -> custom_vmap:
    """`fun` as a custom_vmap function whose vmap rule runs it once per lane in a loop
    (`lax.map`) instead of vectorizing it: for code that has no batching rule, or whose
    batched form would use too much memory."""
    from funcgrad.lax.control_flow.scan import map as lax_map

    wrapped = custom_vmap(fun)

    @wrapped.def_vmap
    def rule(axis_size: int, in_batched: list, *args):
        leaves, in_tree = tree_util.tree_flatten(args)
        flags = tree_util.tree_leaves(in_batched)
        mapped = [x for x, b in zip(leaves, flags) if b]

        def lane(mapped_lane):
            lane_iter = iter(mapped_lane)
            lane_leaves = [next(lane_iter) if b else x for x, b in zip(leaves, flags)]
            return fun(*tree_util.tree_unflatten(in_tree, lane_leaves))

        return lax_map(lane, mapped), True

    return wrapped
