"""A jaxpr compiled to one native entry point.

optimize (jaxpr passes) -> schedule (fused kernels, control-flow regions) -> memory plan ->
render (LLVM IR) -> machine code. A call allocates the outputs and the arena, hands their
addresses and the inputs' to `entry`, and wraps the outputs. The GIL is released while native
code runs, and every call has its own arena, so one executable serves several threads at once.
"""

from __future__ import annotations

import ctypes

import numpy as np

from funcgrad.array import Array
from funcgrad.backends.llvm import blas
from funcgrad.backends.llvm.engine import Compiled
from funcgrad.backends.llvm.render import ModuleRenderer
from funcgrad.backends.numpy.executor import NumpyExecutable
from funcgrad.compiler import passes
from funcgrad.compiler.memory import MemoryPlan, plan_memory
from funcgrad.compiler.schedule import (
    CallbackStep,
    CondStep,
    Program,
    ScanStep,
    WhileStep,
    schedule,
)
from funcgrad.config import config
from funcgrad.ir import ClosedJaxpr

_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))


class LlvmExecutable:
    """Call it with funcgrad arrays, get funcgrad arrays back (as `NumpyExecutable`)."""

    def __init__(self, closed: ClosedJaxpr):
        self.closed = closed
        self.optimized = passes.optimize(closed)
        self.program: Program = schedule(self.optimized)
        self.memory: MemoryPlan = plan_memory(self.program)
        # An exception inside a callback cannot cross native code: it is kept here and raised
        # once the program returns.
        self._callback_errors: list[BaseException] = []
        self._callbacks = {
            step: _callback(step, self._callback_errors) for step in _callback_steps(self.program)
        }
        addresses = {
            step: ctypes.cast(fn, ctypes.c_void_p).value for step, fn in self._callbacks.items()
        }
        blas.library()
        self.ir = ModuleRenderer(self.program, self.memory, addresses).render()
        self.machine_code = Compiled(self.ir)
        self._entry = _ENTRY(self.machine_code.entry_address)
        out_avals = closed.out_avals
        self._out_shapes = [(a.shape, a.dtype) for a in out_avals]
        self._out_weak = [a.weak_type for a in out_avals]
        self._in_dtypes = [a.dtype for a in closed.in_avals]
        self._reference = None

    def __call__(self, *args) -> list[Array]:
        inputs = []
        for a, dtype in zip(args, self._in_dtypes):
            value = a._value if type(a) is Array else a
            if (
                type(value) is not np.ndarray
                or value.dtype != dtype
                or not value.flags.c_contiguous
            ):
                value = np.ascontiguousarray(value, dtype)
            inputs.append(value)
        outputs = [np.empty(shape, dtype) for shape, dtype in self._out_shapes]
        pointers = [_address(x) for x in inputs] + [_address(x) for x in outputs]
        if self.memory.arena_bytes:
            arena = np.empty(self.memory.arena_bytes, np.uint8)
            pointers.append(_address(arena))
        else:
            pointers.append(None)
        self._entry((ctypes.c_void_p * len(pointers))(*pointers))
        if self._callback_errors:
            error = self._callback_errors[0]
            self._callback_errors.clear()
            raise error
        if config.debug_nans:
            self._check_nans(args, outputs)
        return [
            Array(out[()] if out.ndim == 0 else out, weak)
            for out, weak in zip(outputs, self._out_weak)
        ]

    def _check_nans(self, args, outputs) -> None:
        """Re-run on the reference backend, which names the first primitive making a NaN."""
        if self._reference is None:
            self._reference = NumpyExecutable(self.closed)
        self._reference(*args)

    def as_text(self) -> str:
        """The LLVM IR of the program, before LLVM's own optimizations."""
        return self.ir

    def fusion_plan(self) -> str:
        return self.program.as_text()

    def memory_analysis(self) -> MemoryPlan:
        return self.memory


def _struct_address(array: np.ndarray) -> int:
    # The data pointer is the first field after the object header of NumPy's array struct;
    # reading it costs a tenth of `array.ctypes.data`. Used only where it is checked to agree.
    return _read_pointer(id(array) + _DATA_FIELD).value


_read_pointer = ctypes.c_void_p.from_address
_DATA_FIELD = 2 * ctypes.sizeof(ctypes.c_void_p)  # after the reference count and the type


def _choose_address():
    probe = np.arange(3.0)
    if _struct_address(probe) == probe.ctypes.data:
        return _struct_address
    return lambda array: array.ctypes.data


_address = _choose_address()


def _callback_steps(program: Program) -> list[CallbackStep]:
    found = []
    for step in program.steps:
        if isinstance(step, CallbackStep):
            found.append(step)
        inner = []
        if isinstance(step, CondStep):
            inner = step.branches
        elif isinstance(step, WhileStep):
            inner = [step.cond, step.body]
        elif isinstance(step, ScanStep):
            inner = [step.body]
        for program_inside in inner:
            found += _callback_steps(program_inside)
    return found


def _callback(step: CallbackStep, errors: list[BaseException]):
    """A C-callable function running the step's primitive on copies of its operands and
    copying its results, if any, into the result buffers."""
    eqn = step.eqn
    num_inputs = len(step.operands) - step.num_results
    avals = [v.aval for v in eqn.invars]

    def run(table) -> None:
        values = []
        for k, aval in enumerate(avals):
            count = aval.size * aval.dtype.itemsize
            raw = ctypes.string_at(table[k], count) if count else b""
            value = np.frombuffer(raw, aval.dtype).reshape(aval.shape).copy()
            values.append(value[()] if value.ndim == 0 else value)
        try:
            results = eqn.primitive.impl(*values, **eqn.params)
        except Exception as error:
            errors.append(error)
            return
        for k, result in enumerate(results[: step.num_results]):
            result = np.ascontiguousarray(result)
            if result.nbytes:
                ctypes.memmove(table[num_inputs + k], result.ctypes.data, result.nbytes)

    return _CALLBACK(run)
