"""`make_jaxpr`: show the program that funcgrad stages out of a Python function."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from funcgrad import tree_util
from funcgrad.core import ShapeDtypeStruct
from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr


def function_name(fun: Callable) -> str:
    return getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None) or repr(fun)


def make_jaxpr(
    fun: Callable, static_argnums: int | Sequence[int] = (), return_shape: bool = False
) -> Callable[..., ClosedJaxpr]:
    """Return a function that stages `fun` on its arguments and returns the ClosedJaxpr.

    Arguments may be pytrees of arrays and scalars; only their shapes and dtypes are used.
    With `return_shape=True` it also returns the output pytree of `ShapeDtypeStruct`s.
    """
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    static_argnums = tuple(static_argnums)

    @functools.wraps(fun)
    def make_jaxpr_fun(*args, **kwargs):
        static = {i: args[i] for i in static_argnums}
        dynamic = [a for i, a in enumerate(args) if i not in static]
        leaves, in_tree = tree_util.tree_flatten((dynamic, kwargs))
        in_avals = [abstractify(x) for x in leaves]

        def flat_fun(*flat_args):
            dyn_args, dyn_kwargs = tree_util.tree_unflatten(in_tree, flat_args)
            dyn_iter = iter(dyn_args)
            full_args = [static[i] if i in static else next(dyn_iter) for i in range(len(args))]
            return fun(*full_args, **dyn_kwargs)

        closed_jaxpr, out_tree = trace_to_jaxpr(
            flat_fun, in_avals, f"make_jaxpr({function_name(fun)})"
        )
        if return_shape:
            shapes = [
                ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed_jaxpr.out_avals
            ]
            return closed_jaxpr, tree_util.tree_unflatten(out_tree, shapes)
        return closed_jaxpr

    return make_jaxpr_fun


def eval_shape(fun: Callable, *args, **kwargs):
    """The output shapes and dtypes of `fun(*args, **kwargs)`, found by tracing, not running."""
    _, shapes = make_jaxpr(fun, return_shape=True)(*args, **kwargs)
    return shapes
