"""`make_jaxpr`: show the program that funcgrad stages out of a Python function."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Hashable, Sequence

from funcgrad import dtypes, tree_util
from funcgrad.config import config
from funcgrad.core import ShapedArray, ShapeDtypeStruct, is_float0
from funcgrad.interpreters.parallel import axes_bound
from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, float0_literal


def function_name(fun: Callable) -> str:
    """The name errors and programs call `fun` by: a partial application by its function's
    name (its repr would print the bound arrays), a callable object by its class's."""
    if isinstance(fun, functools.partial):
        return function_name(fun.func)
    name = getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None)
    return name or type(fun).__name__


def make_jaxpr(
    fun: Callable,
    static_argnums: int | Sequence[int] = (),
    axis_env: Sequence[tuple[Hashable, int]] | None = None,
    return_shape: bool = False,
) -> Callable[..., ClosedJaxpr]:
    """Return a function that stages `fun` on its arguments and returns the ClosedJaxpr.

    Arguments may be pytrees of arrays and scalars; only their shapes and dtypes are used.
    `axis_env`, (name, size) pairs, binds axis names for the collectives `fun` calls, as a
    pmap over them would. With `return_shape=True` it also returns the output pytree of
    `ShapeDtypeStruct`s.
    """
    axis_env = _checked_axis_env(axis_env)
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    static_argnums = tuple(static_argnums)

    @functools.wraps(fun)
    def make_jaxpr_fun(*args, **kwargs):
        static = {i: args[i] for i in static_argnums}
        dynamic = [a for i, a in enumerate(args) if i not in static]
        leaves, in_tree = tree_util.tree_flatten((dynamic, kwargs))
        in_avals = [_float0_aval(x) if is_float0(x) else abstractify(x) for x in leaves]
        structure: list = []

        def flat_fun(*flat_args):
            # float0 values hold no data: the function gets the arguments as they are (the
            # program keeps an input for each, which nothing reads), and the outputs become
            # literals of the program.
            flat_args = [x if is_float0(x) else a for x, a in zip(leaves, flat_args)]
            dyn_args, dyn_kwargs = tree_util.tree_unflatten(in_tree, flat_args)
            dyn_iter = iter(dyn_args)
            full_args = [static[i] if i in static else next(dyn_iter) for i in range(len(args))]
            out_leaves, out_tree = tree_util.tree_flatten(fun(*full_args, **dyn_kwargs))
            structure.append(
                (out_tree, [leaf.shape if is_float0(leaf) else None for leaf in out_leaves])
            )
            return [leaf for leaf in out_leaves if not is_float0(leaf)]

        what = f"make_jaxpr({function_name(fun)})"
        with axes_bound(axis_env, what):
            closed_jaxpr, _ = trace_to_jaxpr(flat_fun, in_avals, what)
        if config.debug_key_reuse:
            from funcgrad.key_reuse import check_key_reuse_jaxpr  # (it builds on transforms)

            check_key_reuse_jaxpr(closed_jaxpr)
        ((out_tree, float0_shapes),) = structure
        if any(shape is not None for shape in float0_shapes):
            closed_jaxpr = _with_float0_outputs(closed_jaxpr, float0_shapes)
        if return_shape:
            shapes = [
                ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed_jaxpr.out_avals
            ]
            return closed_jaxpr, tree_util.tree_unflatten(out_tree, shapes)
        return closed_jaxpr

    return make_jaxpr_fun


def _checked_axis_env(axis_env) -> tuple[tuple[Hashable, int], ...]:
    if axis_env is None:
        return ()
    try:
        pairs = tuple((name, operator.index(size)) for name, size in axis_env)
    except (TypeError, ValueError):
        raise TypeError(
            f"make_jaxpr: axis_env must be a sequence of (axis name, size) pairs, got {axis_env!r}"
        ) from None
    if any(size < 1 for _, size in pairs):
        raise ValueError(f"make_jaxpr: axis sizes in axis_env must be positive, got {pairs}")
    return pairs


def _float0_aval(x) -> ShapedArray:
    return ShapedArray(x.shape, dtypes.float0)


def _with_float0_outputs(closed: ClosedJaxpr, float0_shapes: list) -> ClosedJaxpr:
    """The program with a float0 literal output where `float0_shapes` has a shape."""
    staged = iter(closed.jaxpr.outvars)
    outvars = [next(staged) if shape is None else float0_literal(shape) for shape in float0_shapes]
    jaxpr = closed.jaxpr
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, jaxpr.eqns), closed.consts)


def eval_shape(fun: Callable, *args, **kwargs):
    """The output shapes and dtypes of `fun(*args, **kwargs)`, found by tracing, not running."""
    _, shapes = make_jaxpr(fun, return_shape=True)(*args, **kwargs)
    return shapes
