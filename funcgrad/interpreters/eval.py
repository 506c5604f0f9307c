"""The eval trace: outside any transformation a primitive runs its NumPy implementation.

This is the hot path of eager execution, so it does the least work it can: unwrap, call,
wrap. Weak types follow the primitive's `weak_type_rule`, checked only when an operand is weak.
"""

from __future__ import annotations

from funcgrad import core
from funcgrad.array import Array
from funcgrad.errors import UnexpectedTracerError


class EvalTrace(core.Trace):
    def process_primitive(self, primitive, args, params):
        values = []
        any_weak = False
        for arg in args:
            if type(arg) is Array:
                values.append(arg._value)
                any_weak = any_weak or arg.weak_type
            elif isinstance(arg, core.Tracer):
                raise UnexpectedTracerError(arg)
            else:
                raise TypeError(
                    f"primitive {primitive.name} got an operand of type {type(arg).__name__}; "
                    "primitive operands are funcgrad arrays (funcgrad.lax wrappers convert "
                    "Python scalars and NumPy arrays)"
                )
        out = primitive.impl(*values, **params)
        if any_weak or primitive.weak_type_rule is not core._all_operands_weak:
            weak = primitive.weak_type_rule([a.weak_type for a in args], **params)
        else:
            weak = False
        if primitive.multiple_results:
            if isinstance(weak, bool):
                return [Array(value, weak) for value in out]
            return [Array(value, w) for value, w in zip(out, weak)]
        return Array(out, weak)


core.install_eval_trace(EvalTrace(None, "eager execution"))
