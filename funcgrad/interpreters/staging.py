"""The staging trace: records primitives into a jaxpr instead of running them.

Every input is *unknown* (only its aval is known), so each primitive becomes an equation whose
output avals come from the primitive's abstract evaluation. Values that are not this trace's
tracers — concrete arrays, or tracers of an enclosing transformation — become constvars of the
jaxpr (scalars are written inline as literals).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from funcgrad import core, tree_util
from funcgrad.array import Array
from funcgrad.config import config
from funcgrad.core import ShapedArray
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, SourceInfo, Var, check_jaxpr

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Options(threading.local):
    """What the user asked of staging on this thread: the `named_scope` path recorded with
    each equation ("outer/inner"), and whether primitives over concrete values run now
    (`ensure_compile_time_eval`) instead of being staged."""

    scope: str = ""
    compile_time_eval: bool = False


options = _Options()


@contextlib.contextmanager
def compile_time_eval() -> Iterator[None]:
    """Inside the block, primitives whose operands are all concrete run at once instead of
    being staged (`fg.ensure_compile_time_eval`)."""
    previous = options.compile_time_eval
    options.compile_time_eval = True
    try:
        yield
    finally:
        options.compile_time_eval = previous


def user_source_info() -> SourceInfo | None:
    """The innermost frame of the caller's code outside funcgrad, and the named scope."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            return SourceInfo(filename, frame.f_lineno, frame.f_code.co_name, options.scope)
        frame = frame.f_back
    return None


class StagingTracer(core.Tracer):
    __slots__ = ("_aval", "_var")

    def __init__(self, trace: StagingTrace, aval: ShapedArray, var: Var):
        self._trace = trace
        self._aval = aval
        self._var = var

    @property
    def aval(self) -> ShapedArray:
        return self._aval


class StagingTrace(core.Trace):
    def __init__(self, parent: core.Trace, debug_info: str | None = None):
        super().__init__(parent, debug_info)
        self.eqns: list[JaxprEqn] = []
        self.invars: list[Var] = []
        self.constvars: list[Var] = []
        self.consts: list[Any] = []
        self._constvar_of_id: dict[int, Var] = {}

    def new_arg(self, aval: ShapedArray) -> StagingTracer:
        var = Var(aval)
        self.invars.append(var)
        return StagingTracer(self, aval, var)

    def var_of(self, x) -> Var | Literal:
        if isinstance(x, StagingTracer) and x._trace is self:
            return x._var
        if isinstance(x, core.Tracer):
            x.check_alive()
        elif type(x) is Array and x.ndim == 0:
            return Literal(x._value, x.aval)
        elif not isinstance(x, Array):
            raise TypeError(
                f"cannot stage a value of type {type(x).__name__}: primitive operands are "
                "funcgrad arrays"
            )
        var = self._constvar_of_id.get(id(x))
        if var is None:
            var = self._constvar_of_id[id(x)] = Var(core.get_aval(x))
            self.constvars.append(var)
            self.consts.append(x)
        return var

    def process_primitive(self, primitive, args, params):
        if options.compile_time_eval and not any(isinstance(a, core.Tracer) for a in args):
            with core.set_current_trace(self.parent):
                return primitive.bind(*args, **params)
        invars = [self.var_of(a) for a in args]
        out_avals = primitive.abstract_eval(*(v.aval for v in invars), **params)
        if not primitive.multiple_results:
            out_avals = [out_avals]
        outvars = [Var(aval) for aval in out_avals]
        self.eqns.append(JaxprEqn(primitive, invars, outvars, params, user_source_info()))
        out = [StagingTracer(self, v.aval, v) for v in outvars]
        return out if primitive.multiple_results else out[0]

    def to_closed_jaxpr(self, outs: Sequence[Any]) -> ClosedJaxpr:
        outvars = [self.var_of(x) for x in outs]
        closed = ClosedJaxpr(Jaxpr(self.constvars, self.invars, outvars, self.eqns), self.consts)
        if config.enable_checks:
            check_jaxpr(closed)
        return closed


def abstractify(x) -> ShapedArray:
    """The aval a staged function sees for argument `x`."""
    if isinstance(
        x, (np.ndarray, np.generic, Array, core.Tracer, core.ShapeDtypeStruct, bool, int, float)
    ):
        return core.get_aval(x)
    raise TypeError(
        f"argument of type {type(x).__name__} is not a valid funcgrad type: arguments of "
        "transformed functions are arrays, scalars, or pytrees of them"
    )


def trace_to_jaxpr(
    fun: Callable, in_avals: Sequence[ShapedArray], debug_info: str | None = None
) -> tuple[ClosedJaxpr, Any]:
    """Stage `fun(*args)` (flat arguments, pytree output) into a ClosedJaxpr.

    Returns the jaxpr, whose outputs are the flattened output leaves, and the output treedef.
    """
    trace = StagingTrace(core.current_trace(), debug_info)
    with core.trace_lifetime(trace):
        args = [trace.new_arg(aval) for aval in in_avals]
        with core.set_current_trace(trace):
            out = fun(*args)
        out_leaves, out_tree = tree_util.tree_flatten(out)
        closed = trace.to_closed_jaxpr([_as_operand(x) for x in out_leaves])
        del args, out, out_leaves  # (the leak checker finds any tracer still referenced)
    return closed, out_tree


def _as_operand(x):
    if isinstance(x, (Array, core.Tracer)):
        return x
    if core.is_float0(x):
        raise TypeError(
            f"a staged function (a control-flow branch or body, a custom rule's function) "
            f"returned a float0 array of shape {x.shape}, the tangent of an integer value; it "
            "holds no data, so return it outside the staged function instead"
        )
    from funcgrad.lax import asarray

    try:
        return asarray(x)
    except TypeError:
        raise TypeError(
            f"a transformed function returned a value of type {type(x).__name__}; outputs of "
            "transformed functions are arrays, scalars, or pytrees of them"
        ) from None
