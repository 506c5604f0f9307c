"""funcgrad.experimental.checkify: run-time checks that survive jit, vmap and grad.

A staged program cannot raise a Python exception where a value goes wrong. `checkify(f)` makes
the failures values instead: it returns a function giving `(err, out)`, where `err` records the
first failed `check` (and, when enabled, the first NaN, division by zero or index out of
bounds). `err.get()` is its message and `err.throw()` raises it, outside the staged code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from funcgrad import tree_util
from funcgrad.errors import FuncgradRuntimeError
from funcgrad.experimental.checkify.check import (
    check,
    check_error,
    debug_check,
)
from funcgrad.experimental.checkify.error import (
    DivisionByZeroError,
    Error,
    ErrorCategory,
    FailedCheckError,
    NaNError,
    OOBError,
    init_error,
)
from funcgrad.experimental.checkify.interpreter import eval_checkified
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.transforms.make_jaxpr import function_name

__all__ = [
    "DivisionByZeroError",
    "Error",
    "ErrorCategory",
    "FailedCheckError",
    "FuncgradRuntimeError",
    "NaNError",
    "OOBError",
    "all_checks",
    "automatic_checks",
    "check",
    "check_error",
    "checkify",
    "debug_check",
    "div_checks",
    "float_checks",
    "index_checks",
    "init_error",
    "nan_checks",
    "user_checks",
]

user_checks: frozenset = frozenset({FailedCheckError})
nan_checks: frozenset = frozenset({NaNError})
index_checks: frozenset = frozenset({OOBError})
div_checks: frozenset = frozenset({DivisionByZeroError})
float_checks: frozenset = nan_checks | div_checks
automatic_checks: frozenset = float_checks | index_checks
all_checks: frozenset = automatic_checks | user_checks


def checkify(f: Callable, errors: frozenset = user_checks) -> Callable:
    """`f` returning `(err, out)`: `err` holds the first failure of the checks in `errors`.

    `errors` is a set of categories, combined with `|` and `-`: `user_checks` (the `check`s
    in `f`), `nan_checks`, `div_checks`, `index_checks`, `float_checks` (nan and div),
    `automatic_checks` and `all_checks`. `f` is staged (so its Python control flow cannot
    depend on array values); the checkified function works under jit, vmap and grad, and
    checks inside cond, while_loop, scan, jitted, pmapped and remat functions, custom_jvp,
    custom_vjp and custom_vmap functions and custom_linear_solve / custom_root solvers are
    carried out of them. The user's derivative and batching rules are not checked: where a
    transformation outside checkify runs them in place of the function, the error passes
    through them unchanged.
    """
    enabled = frozenset(errors)
    for category in enabled:
        if not (isinstance(category, type) and issubclass(category, FuncgradRuntimeError)):
            raise TypeError(
                "checkify's errors must be a set of error categories such as "
                f"checkify.user_checks | checkify.nan_checks, got {category!r} in {errors!r}"
            )
    name = function_name(f)

    @functools.wraps(f)
    def checked(*args, **kwargs):
        # The arguments are closed over, not abstracted: static values reach `f` as they are.
        closed, out_tree = trace_to_jaxpr(lambda: f(*args, **kwargs), [], f"checkify({name})")
        outs, error = eval_checkified(closed.jaxpr, closed.consts, [], init_error, enabled)
        return error, tree_util.tree_unflatten(out_tree, outs)

    return checked
