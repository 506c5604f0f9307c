"""Small tools around tracing: naming staged code, evaluating at trace time, types, closures.

- `named_scope` / `named_call` label the equations staged inside them: the path ("outer/inner")
  is kept in each equation's `SourceInfo.scope`, printed by
  `make_jaxpr(f)(x).pretty_print(source_info=True)` and `jit(f).lower(x).as_text(source_info=
  True)`, and named in errors that point at an equation (debug_nans, linear_transpose, the
  compiler's). They change no result and no program.
- `ensure_compile_time_eval` makes primitives whose operands are all concrete run at once while
  a function is traced, so their results are concrete (usable in Python control flow, as shapes,
  as static values) rather than staged.
- `typeof` is a value's abstract value, `closure_convert` hoists the traced values a function
  closes over into explicit arguments.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from funcgrad import core, tree_util
from funcgrad.interpreters.staging import abstractify, compile_time_eval, options, trace_to_jaxpr
from funcgrad.ir import eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.transforms.make_jaxpr import function_name


@contextlib.contextmanager
def named_scope(name: str) -> Iterator[None]:
    """Label the equations staged inside the block with `name` (nested scopes join with "/").

    with fg.named_scope("attention"):
        scores = q @ k.T

    The label is recorded in each equation's source info (see this module's docstring); eager
    operations are not affected.
    """
    if not isinstance(name, str):
        raise TypeError(f"named_scope takes a string name, got {type(name).__name__}")
    previous = options.scope
    options.scope = f"{previous}/{name}" if previous else name
    try:
        yield
    finally:
        options.scope = previous


def named_call(fun: Callable, *, name: str | None = None) -> Callable:
    """`fun` with its staged equations labelled `name` (by default its own name), as if its
    body ran inside `named_scope(name)`."""
    scope = function_name(fun) if name is None else name

    @functools.wraps(fun)
    def named(*args, **kwargs):
        with named_scope(scope):
            return fun(*args, **kwargs)

    return named


def ensure_compile_time_eval() -> contextlib.AbstractContextManager[None]:
    """Inside the block, operations whose operands are all concrete run immediately, even
    while a function is being traced by jit (or any staging transformation), and give concrete
    arrays. Operations on traced values are staged as usual.

    @fg.jit
    def f(x):
        with fg.ensure_compile_time_eval():
            table = fnp.cos(fnp.arange(4.0))  # a concrete array, computed once at trace time
        return x * table

    Without it, jit stages every operation, constant ones included, so that `table` would be
    traced and e.g. `int(table.argmax())` would raise a ConcretizationTypeError.
    """
    return compile_time_eval()


def typeof(x) -> core.ShapedArray:
    """The abstract value of `x` (shape, dtype, weak type): what a transformation sees of it.
    Works on arrays, tracers and Python or NumPy scalars and arrays."""
    return abstractify(x)


def closure_convert(fun: Callable, *example_args) -> tuple[Callable, list]:
    """(converted, hoisted): `converted(*args, *hoisted)` computes `fun(*args)`, with the traced
    values `fun` closes over (tracers of an enclosing grad, jit or vmap) passed explicitly.

    custom_vjp and custom_jvp rules must receive, as arguments, every value that is being
    differentiated; a function handed to such a rule (a solver's objective, a fixed point's
    step) may close over such values, and this makes them arguments. Concrete values it closes
    over stay closed over. `example_args` fix the arguments' shapes, dtypes and structure.
    """
    leaves, in_tree = tree_util.tree_flatten(example_args)
    in_avals = [abstractify(x) for x in leaves]

    def flat_fun(*flat):
        return fun(*tree_util.tree_unflatten(in_tree, flat))

    closed, out_tree = trace_to_jaxpr(flat_fun, in_avals, f"closure_convert({function_name(fun)})")
    consts = list(closed.consts)
    hoisted_positions = [i for i, c in enumerate(consts) if isinstance(c, core.Tracer)]
    hoisted = [consts[i] for i in hoisted_positions]
    name = function_name(fun)

    def converted(*args) -> Any:
        if len(args) != len(example_args) + len(hoisted):
            raise TypeError(
                f"the closure-converted {name} takes its {len(example_args)} arguments followed "
                f"by the {len(hoisted)} hoisted values; got {len(args)} arguments"
            )
        arg_leaves, arg_tree = tree_util.tree_flatten(args[: len(example_args)])
        if arg_tree != in_tree:
            raise TypeError(
                f"the closure-converted {name} was traced for arguments of structure {in_tree}; "
                f"got {arg_tree}"
            )
        values = list(consts)
        for i, value in zip(hoisted_positions, args[len(example_args) :]):
            values[i] = value
        outs = eval_jaxpr(closed.jaxpr, values, *map(asarray, arg_leaves))
        return tree_util.tree_unflatten(out_tree, outs)

    converted.__name__ = f"closure_convert({name})"
    return converted, hoisted
