"""Compile a jaxpr into a plan of NumPy calls.

Shapes and dtypes were checked when the program was staged, so running it needs neither the
eval trace's checks nor funcgrad arrays between equations: values stay NumPy values in a flat
list of slots, and each step calls one primitive's implementation. Higher-order primitives
(whose impls run programs on funcgrad arrays) get their operands wrapped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from funcgrad import dtypes
from funcgrad.array import Array
from funcgrad.config import config
from funcgrad.ir import ClosedJaxpr, JaxprEqn, Literal


class NumpyExecutable:
    """A ClosedJaxpr ready to run: call it with funcgrad arrays, get funcgrad arrays back."""

    def __init__(self, closed: ClosedJaxpr):
        self.closed = closed
        jaxpr = closed.jaxpr
        slot_of: dict = {}
        self.initial_slots: list[Any] = []

        def slot(var) -> int:
            if type(var) is Literal:
                self.initial_slots.append(var.val)
                return len(self.initial_slots) - 1
            if var not in slot_of:
                slot_of[var] = len(self.initial_slots)
                self.initial_slots.append(None)
            return slot_of[var]

        self.const_slots = [slot(v) for v in jaxpr.constvars]
        self.const_values = [_unwrap(c) for c in closed.consts]
        self.arg_slots = [slot(v) for v in jaxpr.invars]
        self.steps = []
        for eqn in jaxpr.eqns:
            ins = [slot(v) for v in eqn.invars]
            outs = [slot(v) for v in eqn.outvars]
            self.steps.append((eqn, ins, outs))
        self.out_slots = [slot(v) for v in jaxpr.outvars]
        self.out_weak = [v.aval.weak_type for v in jaxpr.outvars]

    def __call__(self, *args) -> list[Array]:
        values = list(self.initial_slots)
        for i, value in zip(self.const_slots, self.const_values):
            values[i] = value
        for i, arg in zip(self.arg_slots, args):
            values[i] = arg._value
        for eqn, ins, outs in self.steps:
            primitive = eqn.primitive
            if primitive.higher_order:
                operands = [Array(values[i], v.aval.weak_type) for i, v in zip(ins, eqn.invars)]
                results = [r._value for r in _as_list(primitive.impl(*operands, **eqn.params))]
            else:
                result = primitive.impl(*[values[i] for i in ins], **eqn.params)
                results = result if primitive.multiple_results else (result,)
            for i, value in zip(outs, results):
                values[i] = value
            if config.debug_nans:
                _check_nans(eqn, results)
        return [Array(values[i], weak) for i, weak in zip(self.out_slots, self.out_weak)]

    def as_text(self) -> str:
        return str(self.closed)


def _as_list(out) -> list:
    return out if isinstance(out, list) else [out]


def _unwrap(value):
    return value._value if type(value) is Array else value


def _check_nans(eqn: JaxprEqn, results) -> None:
    for value in results:
        value = np.asarray(value)
        if dtypes.is_float(value.dtype) and np.isnan(value.astype(np.float64)).any():
            where = f" at {eqn.source_info}" if eqn.source_info is not None else ""
            raise FloatingPointError(
                f"invalid value (nan) encountered in {eqn.primitive.name}{where} "
                "(reported because debug_nans is on)"
            )
