"""`check`, `debug_check` and `check_error`: the one `check` primitive and its rules.

The primitive's operands are an error's values and its params the error's static part, so a
new check (an error holding one failure) and a re-raised error are the same equation.
`checkify` turns each equation into an update of the error value it threads through the
program. Anywhere else a check is an assertion, the same wherever it runs: eagerly it raises
the error's failure, and staged (by jit, make_jaxpr, control flow) it is an equation like any
other, which a compiled program runs as a host call that raises the failure when the program
runs. So a function traces alike inside checkify and out, and a jitted function keeps its
checks whether it was first traced inside checkify or not. A `debug_check` does nothing
outside checkify.
"""

from __future__ import annotations

from funcgrad import core, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.core import Primitive
from funcgrad.experimental.checkify.error import (
    Error,
    UserFailure,
    failure_error,
    signature,
)
from funcgrad.interpreters import batching
from funcgrad.lax.base import asarray

__all__ = ["check", "check_error", "debug_check"]

# Params: `error_aux` (the error's static part: its payload layout and messages) and `debug`
# (a debug_check, which only checkify runs).
check_p = Primitive("check", multiple_results=True)
check_p.has_effects = True


@check_p.def_abstract_eval
def _check_abstract_eval(*avals, error_aux, debug):
    return []


@check_p.def_impl
def _check_impl(*values, error_aux, debug):
    if not debug:
        Error.tree_unflatten(error_aux, values).throw()
    return []


@check_p.def_jvp
def _check_jvp(primals, tangents, **params):
    # A check reads values, not derivatives: under grad it runs once, on the primals.
    check_p.bind(*primals, **params)
    return [], []


check_p.not_applicable["transpose"] = (
    "no outputs, so no cotangent reaches it: backward passes skip it"
)


@check_p.def_batch
def _check_batch(values, dims, *, error_aux, debug):
    size = batching.batch_size(values, dims)
    values = [batching.bdim_at_front(v, d, size) for v, d in zip(values, dims)]
    lane_error = first_failed_lane(Error.tree_unflatten(error_aux, values))
    check_p.bind(*lane_error.leaves(), error_aux=error_aux, debug=debug)
    return [], []


def first_failed_lane(error: Error) -> Error:
    """The error of the first lane of a batched `error` that failed (of lane 0 if none did)."""
    lane = fnp.argmax(fnp.asarray(error.flag, "int32"))
    payloads = {sig: tuple(v[lane] for v in values) for sig, values in error.payloads.items()}
    return Error(fnp.any(error.flag), error.code[lane], payloads, error.messages)


def _bind(error: Error, debug: bool) -> None:
    leaves, aux = error.tree_flatten()
    check_p.bind(*leaves, error_aux=aux, debug=debug)


def _check(pred, msg: str, debug: bool, fmt_args: tuple, fmt_kwargs: dict) -> None:
    name = "debug_check" if debug else "check"
    if not isinstance(msg, str):
        raise TypeError(f"{name} expects a message string, got {type(msg).__name__}")
    pred = asarray(pred)
    if pred.shape != () or pred.dtype != bool:
        raise TypeError(f"{name} takes a scalar boolean pred, got {pred.aval.str_short()}")
    leaves, args_tree = tree_util.tree_flatten((fmt_args, fmt_kwargs))
    for leaf in leaves:
        if not isinstance(leaf, (Array, core.Tracer, bool, int, float, complex)) and not hasattr(
            leaf, "__array__"
        ):
            raise TypeError(
                f"the formatting arguments of {name} must be pytrees of arrays, got {leaf!r} of "
                f"type {type(leaf).__name__}"
            )
    payload = [asarray(leaf) for leaf in leaves]
    failure = UserFailure(msg, args_tree, signature(payload))
    _bind(failure_error(fnp.logical_not(pred), failure, payload), debug)


def check(pred, msg: str, *fmt_args, debug: bool = False, **fmt_kwargs) -> None:
    """Fail with `msg.format(*fmt_args, **fmt_kwargs)` where the scalar `pred` is false.

    Inside `checkify` a failed check becomes the error value checkify returns, which works
    under jit, vmap, grad and control flow. Elsewhere it raises a `FailedCheckError`: eagerly
    at once, and in a jitted function when the compiled program runs. The format
    arguments may be traced arrays: the message shows their run-time values. `debug=True`
    makes it a `debug_check`.
    """
    _check(pred, msg, debug, fmt_args, fmt_kwargs)


def debug_check(pred, msg: str, *fmt_args, **fmt_kwargs) -> None:
    """`check` that only `checkify` runs: elsewhere (eagerly or staged) it does nothing."""
    _check(pred, msg, True, fmt_args, fmt_kwargs)


def check_error(error: Error) -> None:
    """Raise `error`'s failure, if any: the inverse of checkify, and checkify turns it back
    into an error value (so an error returned by an inner checkified function joins the
    outer one's)."""
    if not isinstance(error, Error):
        raise TypeError(f"check_error takes a checkify Error, got {type(error).__name__}")
    lanes = core.get_aval(error.flag).shape
    if lanes:
        # An error returned through vmap: its first failing lane, as one error.
        flat = [fnp.reshape(v, (-1, *core.get_aval(v).shape[len(lanes) :])) for v in error.leaves()]
        error = first_failed_lane(Error.tree_unflatten(error.tree_flatten()[1], flat))
    _bind(error, False)
