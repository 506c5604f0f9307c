"""What the control-flow primitives share: staging a user's branch or body into a jaxpr, and
checking and settling the types of what it returns."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from funcgrad import core, dtypes, tree_util
from funcgrad.core import ShapedArray
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr
from funcgrad.lax.elementwise import convert_element_type
from funcgrad.transforms.make_jaxpr import function_name


def stage(
    fun: Callable, in_tree, in_avals: Sequence[ShapedArray], what: str
) -> tuple[ClosedJaxpr, list, object]:
    """Stage `fun` (taking the pytree `in_tree` of `in_avals`) into a jaxpr.

    The values it closes over are hoisted into leading inputs and returned as `consts`, so a
    control-flow primitive passes them as operands and every transformation sees them (a
    closed-over tracer must reach its trace). Returns (jaxpr, consts, out_tree).
    """

    def flat_fun(*leaves):
        return fun(*tree_util.tree_unflatten(in_tree, leaves))

    closed, out_tree = trace_to_jaxpr(flat_fun, in_avals, f"{what}({function_name(fun)})")
    jaxpr = closed.jaxpr
    hoisted = Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)
    return ClosedJaxpr(hoisted, []), list(closed.consts), out_tree


def check_callable(where: str, **functions) -> None:
    """Raise naming the argument that is not a function, before it is called deep in staging."""
    for name, fun in functions.items():
        if not callable(fun):
            raise TypeError(f"{where}: {name} must be callable, got {type(fun).__name__}")


def avals_of(leaves: Sequence) -> list[ShapedArray]:
    return [core.get_aval(x) for x in leaves]


def check_same_types(
    what: str, expected: Sequence[ShapedArray], got: Sequence[ShapedArray], expected_tree, got_tree
) -> None:
    """Raise naming both pytree structures and types when a branch or body output differs."""
    if expected_tree != got_tree:
        raise TypeError(
            f"{what} must have the same pytree structure: {expected_tree} and {got_tree}"
        )
    for i, (a, b) in enumerate(zip(expected, got)):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise TypeError(
                f"{what} must have the same shapes and dtypes: leaf {i} is "
                f"{a.str_short()} in one and {b.str_short()} in the other"
            )


def promote_weak_carry(leaves: list, body_out_avals: Sequence[ShapedArray]) -> tuple[list, bool]:
    """The rule for a weakly typed initial carry whose type the body changes (`0` carried
    through `x + 0.5`, or a weak scalar through a strong one of its own dtype): the carry
    takes the promoted type, strongly, and the loop is traced again. A carry left weak would
    promote differently after the loop (a weak float32 times a float16 array is float16).
    Returns the leaves and whether any changed."""
    promoted, changed = [], False
    for x, out in zip(leaves, body_out_avals):
        aval = x.aval
        keeps_type = out.weak_type and out.dtype == aval.dtype
        if aval.weak_type and aval.shape == out.shape and not keeps_type:
            dtype, _ = dtypes.result_type_of([(aval.dtype, True), (out.dtype, out.weak_type)])
            x, changed = convert_element_type(x, dtype), True
        promoted.append(x)
    return promoted, changed
