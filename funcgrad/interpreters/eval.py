"""The eval trace: outside any transformation a primitive runs its NumPy implementation.

This is the hot path of eager execution, so it does the least work it can: unwrap, check,
call, wrap. The check is the primitive's abstract evaluation, so eager execution rejects
exactly what tracing rejects (NumPy would often broadcast or promote silently instead); it runs
once per signature of shapes, dtypes and params, and later calls only look the signature up.
Weak types follow the primitive's `weak_type_rule`, consulted only when an operand is weak.
"""

from __future__ import annotations

import numpy as np

from funcgrad import core, dtypes
from funcgrad.array import Array, DeviceValue, on_gpu
from funcgrad.config import config
from funcgrad.errors import UnexpectedTracerError

_MAX_CHECKED_SIGNATURES = 8192


class EvalTrace(core.Trace):
    def __init__(self, parent, debug_info=None):
        super().__init__(parent, debug_info)
        self.checked_signatures: set = set()

    def process_primitive(self, primitive, args, params):
        if primitive.higher_order:
            for arg in args:
                if type(arg) is not Array:
                    raise _bad_operand(primitive, arg)
            if (
                DeviceValue.made
                and not getattr(primitive, "places_itself", False)
                and on_gpu([arg._value for arg in args])
            ):
                return _on_gpu(primitive, args, params)
            return primitive.impl(*args, **params)
        values = []
        signature = [primitive]
        any_weak = False
        for arg in args:
            if type(arg) is not Array:
                raise _bad_operand(primitive, arg)
            value = arg._value
            values.append(value)
            signature.append(value.shape)
            signature.append(value.dtype)
            if arg.weak_type:
                any_weak = True
        if params:
            signature.extend(params.items())
        signature = tuple(signature)
        try:
            checked = signature in self.checked_signatures
        except TypeError:  # an unhashable param: check every time
            checked = False
        if not checked:
            self.check(primitive, args, params, signature)
        if DeviceValue.made and on_gpu(values):
            from funcgrad.backends.cuda import eager

            out = [a._value for a in eager.run(primitive, args, params, signature)]
            out = out if primitive.multiple_results else out[0]
        else:
            out = primitive.impl(*values, **params)
        if config.debug_nans or config.debug_infs:
            _check_values(primitive, out)
        if any_weak or primitive.weak_type_rule is not core._all_operands_weak:
            weak = primitive.weak_type_rule([a.weak_type for a in args], **params)
        else:
            weak = False
        if primitive.multiple_results:
            if isinstance(weak, bool):
                return [Array(value, weak) for value in out]
            return [Array(value, w) for value, w in zip(out, weak)]
        return Array(out, weak)

    def check(self, primitive, args, params, signature: tuple) -> None:
        primitive.abstract_eval(*(a.aval for a in args), **params)
        if len(self.checked_signatures) >= _MAX_CHECKED_SIGNATURES:
            self.checked_signatures.clear()
        try:
            self.checked_signatures.add(signature)
        except TypeError:
            pass  # unhashable params are checked on every call


def _on_gpu(primitive, args, params) -> list[Array] | Array:
    """A control-flow or call primitive over GPU arrays: compiled whole for the GPU (its
    regions run there as the CUDA backend runs them), results left there."""
    from funcgrad.backends.cuda import eager

    signature = (primitive, *(a.aval for a in args), *params.items())
    outs = eager.run(primitive, args, params, signature)
    return outs if primitive.multiple_results else outs[0]


def _check_values(primitive, out) -> None:
    from funcgrad.interpreters.staging import user_source_info

    for value in out if primitive.multiple_results else [out]:
        invalid = dtypes.first_invalid(np.asarray(value), config.debug_nans, config.debug_infs)
        if invalid is not None:
            where = user_source_info()
            raise FloatingPointError(
                f"invalid value ({invalid}) encountered in {primitive.name}"
                + (f" at {where}" if where is not None else "")
                + f" (reported because debug_{invalid}s is on)"
            )


def _bad_operand(primitive, arg) -> Exception:
    if isinstance(arg, core.Tracer):
        return UnexpectedTracerError(arg)
    return TypeError(
        f"primitive {primitive.name} got an operand of type {type(arg).__name__}; "
        "primitive operands are funcgrad arrays (funcgrad.lax wrappers convert "
        "Python scalars and NumPy arrays)"
    )


core.install_eval_trace(EvalTrace(None, "eager execution"))
