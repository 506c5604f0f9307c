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

_SINGLE, _MULTIPLE, _HIGHER_ORDER = range(3)


class NumpyExecutable:
    """A ClosedJaxpr ready to run: call it with funcgrad arrays, get funcgrad arrays back.

    Each step is (kind, impl, params, input slots, output slot(s), equation), worked out once
    here so that a call does no more than index lists and call implementations.
    """

    def __init__(self, closed: ClosedJaxpr, donated: tuple[int, ...] = ()):
        # The reference backend allocates every result: donated buffers are not reused.
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

        for var, value in zip(jaxpr.constvars, closed.consts):
            self.initial_slots[slot(var)] = _unwrap(value)
        self.arg_slots = [slot(v) for v in jaxpr.invars]
        self.steps = []
        for eqn in jaxpr.eqns:
            primitive = eqn.primitive
            ins = [slot(v) for v in eqn.invars]
            outs = [slot(v) for v in eqn.outvars]
            if primitive.higher_order:
                kind, target = _HIGHER_ORDER, outs
            elif primitive.multiple_results:
                kind, target = _MULTIPLE, outs
            else:
                kind, target = _SINGLE, outs[0]
            self.steps.append((kind, primitive.impl, eqn.params, ins, target, eqn))
        self.out_slots = [slot(v) for v in jaxpr.outvars]
        self.out_weak = [v.aval.weak_type for v in jaxpr.outvars]

    def __call__(self, *args) -> list[Array]:
        values = self.initial_slots.copy()
        for i, arg in zip(self.arg_slots, args):
            values[i] = arg._value
        nans, infs = config.debug_nans, config.debug_infs
        for kind, impl, params, ins, target, eqn in self.steps:
            if kind == _SINGLE:
                values[target] = impl(*[values[i] for i in ins], **params)
                results = (values[target],)
            elif kind == _MULTIPLE:
                results = impl(*[values[i] for i in ins], **params)
                for i, value in zip(target, results):
                    values[i] = value
            else:
                operands = [Array(values[i], v.aval.weak_type) for i, v in zip(ins, eqn.invars)]
                results = [r._value for r in _as_list(impl(*operands, **params))]
                for i, value in zip(target, results):
                    values[i] = value
            if nans or infs:
                _check_values(eqn, results, nans, infs)
        return [Array(values[i], weak) for i, weak in zip(self.out_slots, self.out_weak)]

    def as_text(self) -> str:
        return str(self.closed)


def _as_list(out) -> list:
    return out if isinstance(out, list) else [out]


def _unwrap(value):
    return value._value if type(value) is Array else value


def _check_values(eqn: JaxprEqn, results, nans: bool, infs: bool) -> None:
    for value in results:
        invalid = dtypes.first_invalid(np.asarray(value), nans, infs)
        if invalid is not None:
            where = f" at {eqn.source_info}" if eqn.source_info is not None else ""
            raise FloatingPointError(
                f"invalid value ({invalid}) encountered in {eqn.primitive.name}{where} "
                f"(reported because debug_{invalid}s is on)"
            )
