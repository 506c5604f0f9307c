"""Host callbacks inside transformed functions: `funcgrad.debug.print`, `.log`, `.callback`
and `.breakpoint` (`funcgrad/debugger.py`); and shardings drawn as text
(`funcgrad/sharding_text.py`).

A Python `print` inside a jitted function runs once, while it is traced, and sees abstract
values. These functions instead stage one `debug_callback` equation that calls the user's Python
function with the concrete values each time the program runs, in program order. The equation
has no outputs, so it is an *effect*: `has_effects` tells passes such as dead-code elimination
to keep it although nothing reads it.
"""

from __future__ import annotations

import builtins
import inspect
import logging
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import core, tree_util
from funcgrad.array import Array
from funcgrad.core import Primitive
from funcgrad.debugger import breakpoint
from funcgrad.interpreters import batching
from funcgrad.lax.base import asarray
from funcgrad.lax.shapes import index_in_dim
from funcgrad.sharding_text import (
    inspect_array_sharding,
    visualize_array_sharding,
    visualize_sharding,
)

__all__ = [
    "breakpoint",
    "callback",
    "inspect_array_sharding",
    "log",
    "print",
    "visualize_array_sharding",
    "visualize_sharding",
]

# Params: `callback` (the user's function, hashed by identity), `in_tree` (the structure of
# `(args, kwargs)`), `static_leaves` (the leaves that are not arrays, as (position, value)
# pairs, passed to the callback unchanged) and `ordered` (JAX's flag; every callback already
# runs in program order on the NumPy backend).
debug_callback_p = Primitive("debug_callback", multiple_results=True)
debug_callback_p.has_effects = True


@debug_callback_p.def_abstract_eval
def _debug_callback_abstract_eval(*avals, callback, in_tree, static_leaves, ordered):
    return []


@debug_callback_p.def_impl
def _debug_callback_impl(*values, callback, in_tree, static_leaves, ordered):
    leaves = [_read_only(v) for v in values]
    for position, leaf in static_leaves:
        leaves.insert(position, leaf)
    args, kwargs = tree_util.tree_unflatten(in_tree, leaves)
    callback(*args, **kwargs)
    return []


def _read_only(value) -> np.ndarray:
    """The callback sees the program's own buffers; a read-only view keeps them immutable."""
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


@debug_callback_p.def_jvp
def _debug_callback_jvp(primals, tangents, **params):
    # The callback sees values, not derivatives: under grad it runs once, on the primals.
    return debug_callback_p.bind(*primals, **params), []


debug_callback_p.not_applicable["transpose"] = (
    "no outputs, so no cotangent reaches it: backward passes skip it"
)


@debug_callback_p.def_batch
def _debug_callback_batch(values, dims, **params):
    # A side effect has no vectorized form: the user's function expects one example's values.
    # So, as in JAX, the callback runs once per lane, in lane order, with that lane's values
    # (unbatched operands are passed whole to every lane). This is the one batching rule that
    # loops over the batch.
    size = batching.batch_size(values, dims)
    for lane in range(size):
        lane_values = [
            value if dim is None else index_in_dim(value, lane, dim, keepdims=False)
            for value, dim in zip(values, dims)
        ]
        debug_callback_p.bind(*lane_values, **params)
    return [], []


# ---------------------------------------------------------------------------------------------
# Public API


def _is_array_leaf(leaf) -> bool:
    return isinstance(leaf, (Array, core.Tracer, np.ndarray, np.generic, bool, int, float))


def callback(callback: Callable[..., Any], *args, ordered: bool = False, **kwargs) -> None:
    """Call `callback(*args, **kwargs)` with NumPy arrays each time the program runs.

    Array leaves of the arguments (including Python scalars) arrive as read-only NumPy arrays
    holding their run-time values; other leaves (strings, ...) arrive unchanged. Under vmap the
    callback runs once per lane; under grad, once, with the primal values.
    """
    if not callable(callback):
        raise TypeError(f"debug.callback expects a callable, got {type(callback).__name__}")
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    operands, static_leaves = [], []
    for position, leaf in enumerate(leaves):
        if _is_array_leaf(leaf):
            operands.append(asarray(leaf))
        else:
            static_leaves.append((position, leaf))
    debug_callback_p.bind(
        *operands,
        callback=callback,
        in_tree=in_tree,
        static_leaves=tuple(static_leaves),
        ordered=bool(ordered),
    )


class _FormattedPrint:
    """debug.print's callback. Like every callback it compares by identity, so two prints of
    the same values are never merged into one."""

    __slots__ = ("fmt",)

    def __init__(self, fmt: str):
        self.fmt = fmt

    def __call__(self, *args, **kwargs) -> None:
        builtins.print(self.fmt.format(*args, **kwargs))

    def __repr__(self) -> str:
        return f"print({self.fmt!r})"


def print(fmt: str, *args, ordered: bool = False, **kwargs) -> None:
    """Print `fmt.format(*args, **kwargs)` with the run-time values each time the program runs
    (a Python print inside a jitted function runs only once, at trace time)."""
    if not isinstance(fmt, str):
        raise TypeError(f"debug.print expects a format string, got {type(fmt).__name__}")
    _check_fields("debug.print", fmt, len(args), kwargs)
    callback(_FormattedPrint(fmt), *args, ordered=ordered, **kwargs)


_logger = logging.getLogger(__name__)


class _FormattedLog:
    """debug.log's callback: the formatted message as an INFO record of the `funcgrad.debug`
    logger, attributed to the line that called debug.log (not to this module)."""

    __slots__ = ("fmt", "filename", "lineno")

    def __init__(self, fmt: str, filename: str, lineno: int):
        self.fmt = fmt
        self.filename = filename
        self.lineno = lineno

    def __call__(self, *args, **kwargs) -> None:
        if not _logger.isEnabledFor(logging.INFO):
            return
        message = self.fmt.format(*args, **kwargs)
        record = _logger.makeRecord(
            _logger.name, logging.INFO, self.filename, self.lineno, message, (), None
        )
        _logger.handle(record)

    def __repr__(self) -> str:
        return f"log({self.fmt!r})"


def log(fmt: str, *args, ordered: bool = False, **kwargs) -> None:
    """`print`, to the `funcgrad.debug` logger at INFO level instead of standard output: each
    time the program runs, one record of `fmt.format(*args, **kwargs)` with the run-time
    values, carrying the file and line of this call."""
    if not isinstance(fmt, str):
        raise TypeError(f"debug.log expects a format string, got {type(fmt).__name__}")
    _check_fields("debug.log", fmt, len(args), kwargs)
    caller = inspect.currentframe().f_back
    callback(
        _FormattedLog(fmt, caller.f_code.co_filename, caller.f_lineno),
        *args,
        ordered=ordered,
        **kwargs,
    )


def _check_fields(name: str, fmt: str, num_args: int, kwargs: dict) -> None:
    """Reject a format string whose fields name missing arguments now, at trace time, rather
    than from inside a compiled program."""
    next_index = 0
    for _, field, _, _ in string.Formatter().parse(fmt):
        if field is None:
            continue
        key = field.split(".")[0].split("[")[0]
        if key == "":
            key, next_index = str(next_index), next_index + 1
        if key.isdigit() and int(key) >= num_args:
            raise IndexError(
                f"{name}: format string {fmt!r} refers to positional argument {key}, but "
                f"{num_args} positional argument(s) were given"
            )
        if not key.isdigit() and key not in kwargs:
            raise KeyError(
                f"{name}: format string {fmt!r} refers to keyword argument {key!r}, but "
                f"only {sorted(kwargs)} were given"
            )
