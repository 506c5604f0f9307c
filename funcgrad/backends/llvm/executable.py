"""A jaxpr compiled to one native entry point.

optimize (jaxpr passes; complex values become pairs of reals) -> schedule (fused kernels,
control-flow regions) -> memory plan -> render (LLVM IR) -> machine code. A call allocates the
outputs and the arena, hands their addresses and the inputs' to `entry`, and wraps the
outputs. The GIL is released while native code runs, and every call has its own arena, so one
executable serves several threads at once.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import sys
import threading

import numpy as np

from funcgrad.array import Array
from funcgrad.backends.llvm import blas, buffers, engine, pool, render, tiles
from funcgrad.backends.llvm.engine import Compiled
from funcgrad.backends.llvm.render import (
    CALLBACK_TABLE,
    LIBRARY_THREADS_OFF,
    PROFILE_COUNTERS,
    ModuleRenderer,
)
from funcgrad.backends.numpy.executor import NumpyExecutable
from funcgrad.compiler import cache, fingerprint, stages
from funcgrad.compiler.donation import donated_outputs, warn_unusable
from funcgrad.compiler.memory import MemoryPlan
from funcgrad.compiler.parallel import ReductionSplit
from funcgrad.compiler.schedule import (
    CallbackStep,
    Program,
    all_steps,
    convolves_in_tiles,
    products_in_tiles,
)
from funcgrad.config import config
from funcgrad.interpreters import parallel
from funcgrad.ir import ClosedJaxpr

# Whole-array reductions fold this many contiguous parts, a thread taking a run of them: as
# many as the threads of any CPU this runs on may usefully take.
REDUCTION_PARTS = 64

_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_BYTE = np.dtype(np.uint8)
_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))


class LlvmExecutable:
    """Call it with funcgrad arrays, get funcgrad arrays back (as `NumpyExecutable`)."""

    def __init__(self, closed: ClosedJaxpr, donated: tuple[int, ...] = (), profiled: bool = False):
        """`profiled`: the program counts each kernel's, GEMM's, LAPACK call's and
        callback's time and calls (`profile`)."""
        self.closed = closed
        self._plan = None  # (optimized jaxpr, program, memory plan), planned when first asked
        self._profiled = profiled
        self._twin = None  # a profiled build of this program, made by `profile`
        blas.library()
        # A program an earlier process compiled is found by its jaxpr, before planning and
        # rendering (`compiler.fingerprint`); one with callbacks or donations is planned
        # again (its callbacks are this process's functions, its donations warn).
        key = None if donated or profiled else fingerprint.digest(closed, *_plan_context())
        saved = None if key is None else cache.load(_PLANS, key)
        if saved is not None:
            self._restore(saved)
        else:
            self._compile(closed, donated)
            if key is not None and not self._callbacks:
                cache.store(_PLANS, key, self._saved())
        self._entry = _ENTRY(self.machine_code.entry_address)
        out_avals = closed.out_avals
        self._arena_shape = (self._arena_bytes,) if self._arena_bytes else None
        self._empty_arena = buffers.allocator((self._arena_bytes,), _BYTE)
        self._out_specs = [
            (buffers.allocator(a.shape, a.dtype), a.shape, a.dtype) for a in out_avals
        ]
        self._out_weak = [a.weak_type for a in out_avals]
        self._in_dtypes = [a.dtype for a in closed.in_avals]
        self._reference = None
        # The entry's argument array type, and whether any loop runs on threads (else the
        # thread count is not worth looking up): both fixed per program.
        self._arguments = ctypes.c_void_p * (len(self._in_dtypes) + len(out_avals) + 2)
        self._threaded = "parallel_for(" in self.ir  # fg_parallel_for, or parallel_for
        if self.ir.startswith(LIBRARY_THREADS_OFF):
            self._entry = _library_threads_off(self._entry)

    def _compile(self, closed: ClosedJaxpr, donated: tuple[int, ...]) -> None:
        self.donated = donated_outputs(self.program, donated)  # output -> input whose memory
        warn_unusable(closed, sorted(set(donated) - set(self.donated.values())))
        callback_steps = _callback_steps(self.program)
        self._callbacks = [_callback(step) for step in callback_steps]
        renderer = ModuleRenderer(
            self.program, self.memory, callback_steps, self.donated, self._profiled
        )
        self.ir = renderer.render()
        self.profile_labels = renderer.profile_labels
        self.machine_code = Compiled(renderer.modules())
        if self._callbacks:
            addresses = [ctypes.cast(fn, ctypes.c_void_p).value for fn in self._callbacks]
            self.machine_code.fill_table(CALLBACK_TABLE, addresses)
        self._arena_bytes = self.memory.arena_bytes

    def _saved(self) -> bytes:
        """What a later process needs instead of planning and rendering: the arena's size,
        the IR and its modules (whose machine code the engine's cache holds)."""
        arena = str(self._arena_bytes).encode()
        return engine.pack(
            [arena, self.ir.encode(), *(m.encode() for m in self.machine_code.modules)]
        )

    def _restore(self, saved: bytes) -> None:
        arena, ir, *modules = (part.decode() for part in engine.unpack(saved))
        self.donated = {}
        self._callbacks = []
        self.ir = ir
        self._arena_bytes = int(arena)
        for name in _LIBRARY_CALL.findall(ir):  # as rendering makes them known
            blas.symbol(name)
        if pool.SYMBOL in ir:
            pool.install()
        self.machine_code = Compiled(modules)

    @property
    def optimized(self) -> ClosedJaxpr:
        return self._planned()[0]

    @property
    def program(self) -> Program:
        return self._planned()[1]

    @property
    def memory(self) -> MemoryPlan:
        return self._planned()[2]

    def _planned(self):
        if self._plan is None:
            with (
                products_in_tiles.chosen(tiles.takes_product),
                convolves_in_tiles.chosen(tiles.CONVOLUTIONS),
            ):
                self._plan = stages.plan(
                    self.closed, ReductionSplit(render.PARALLEL_WORK, REDUCTION_PARTS)
                )
        return self._plan

    def __call__(self, *args) -> list[Array]:
        if self.donated:
            return self._call_donating(args)
        inputs = []  # holds converted copies alive through the call
        pointers = []
        for a, dtype in zip(args, self._in_dtypes):
            value = a._value if type(a) is Array else a
            if (
                type(value) is not np.ndarray
                or value.dtype != dtype
                or not value.flags.c_contiguous
            ):
                value = np.ascontiguousarray(value, dtype)
                inputs.append(value)
            pointers.append(_address(value))
        outputs = [empty(shape, dtype) for empty, shape, dtype in self._out_specs]
        pointers += [_address(x) for x in outputs]
        arena = self._arena()
        pointers.append(None if arena is None else _address(arena))
        pointers.append(_native_threads() if self._threaded else 1)
        self._entry(self._arguments(*pointers))
        if self._callbacks:
            _raise_callback_errors()
        if config.debug_nans or config.debug_infs:
            self._check_values(args)
        return [
            Array(out[()] if out.ndim == 0 else out, weak)
            for out, weak in zip(outputs, self._out_weak)
        ]

    def _call_donating(self, args) -> list[Array]:
        """A call whose outputs take over donated arguments' buffers. An argument's buffer is
        taken only when nothing else holds it (no other array, view or caller); otherwise the
        output goes into a copy. Either way the donated array is deleted, as promised."""
        sole = {i: _sole_owner(args[i]) for i in self.donated.values()}
        inputs = [
            np.asarray(_value_of(a), dtype, order="C") for a, dtype in zip(args, self._in_dtypes)
        ]
        outputs = [empty(shape, dtype) for empty, shape, dtype in self._out_specs]
        for k, i in self.donated.items():
            if not sole[i] or any(x is inputs[i] for j, x in enumerate(inputs) if j != i):
                inputs[i] = inputs[i].copy()
            # (an output only as large as the input, maybe of another shape: a view of it)
            outputs[k] = inputs[i].reshape(self._out_specs[k][1])
        pointers = [_address(x) for x in inputs] + [_address(x) for x in outputs]
        arena = self._arena()
        pointers.append(None if arena is None else _address(arena))
        pointers.append(_native_threads() if self._threaded else 1)
        self._entry(self._arguments(*pointers))
        if self._callbacks:
            _raise_callback_errors()
        for i in self.donated.values():
            if type(args[i]) is Array:
                args[i].delete()
        return [
            Array(out[()] if out.ndim == 0 else out, weak)
            for out, weak in zip(outputs, self._out_weak)
        ]

    def _arena(self) -> np.ndarray | None:
        return self._empty_arena(self._arena_shape, _BYTE) if self._arena_shape else None

    def _check_values(self, args) -> None:
        """Re-run on the reference backend, which names the first primitive making a NaN or
        an infinity."""
        if self._reference is None:
            self._reference = NumpyExecutable(self.closed)
        self._reference(*args)

    def profile(self, *args) -> list[tuple[str, int, float]]:
        """One call of a build of this program that times each kernel, GEMM, LAPACK call and
        callback by the monotonic clock (made at the first profile): (what ran: a kernel by
        its name in `as_text`, a GEMM by its shape, a routine by its symbol; how many times;
        its seconds in all), the costliest first."""
        if self._twin is None:
            self._twin = LlvmExecutable(self.closed, profiled=True)
        twin = self._twin
        labels = twin.profile_labels
        if not labels:  # (nothing to time: the outputs are inputs or constants)
            return []
        counters = twin.machine_code.int64s(PROFILE_COUNTERS, 2 * len(labels))
        counters[:] = 0
        twin(*args)
        rows = [(label, int(counters[2 * k + 1]), float(counters[2 * k]) / 1e9) for k, label in
                enumerate(labels)]  # fmt: skip
        return sorted(rows, key=lambda row: -row[2])

    def as_text(self) -> str:
        """The LLVM IR of the program, before LLVM's own optimizations."""
        return self.ir

    def fusion_plan(self) -> str:
        return self.program.as_text()

    def memory_analysis(self) -> MemoryPlan:
        return self.memory


# The on-disk cache's kind for a jaxpr's rendered modules (`LlvmExecutable._saved`).
_PLANS = "llvm-plans"
_LIBRARY_CALL = re.compile(r"^declare [^@]*@(scipy_\w+)\(", re.MULTILINE)


def _plan_context() -> tuple[str, ...]:
    """What a program's modules depend on besides its jaxpr and funcgrad's sources: whether
    loops call the thread pool, the LAPACK library (its workspace sizes are in the IR), and
    the renderer's settings that a process may change (tests do)."""
    settings = (render.PARALLEL_WORK, render.MODULE_TEXT, render.MAX_MODULES, REDUCTION_PARTS)
    return (f"pool {pool.available()}", _library_name(), f"settings {settings}")


@functools.cache
def _library_name() -> str:
    return os.path.basename(blas.library()._name)


def _library_threads_off(entry):
    """`entry` run with the library's own threads off: its products run on the pool's
    threads or on one (`ModuleRenderer.gemm`)."""

    def run(arguments) -> None:
        with blas.threads_limited_to(1):
            entry(arguments)

    return run


def _native_threads() -> int:
    """Threads for this call's large loops: all of config.num_threads, shared among the
    devices when pmap runs one program per virtual device at once (no oversubscription)."""
    devices = parallel.local_devices_running()
    return max(1, config.num_threads // devices)


def _value_of(argument):
    return argument._value if type(argument) is Array else argument


def _sole_owner(argument) -> bool:
    """Whether the array `argument` is the only holder of its buffer: then the buffer may be
    written over. (Three references: the array's own, `value` and getrefcount's argument.)"""
    if type(argument) is not Array:
        return False
    value = argument._value
    return (
        type(value) is np.ndarray
        and value.base is None
        and value.flags.c_contiguous
        and sys.getrefcount(value) == 3
    )


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
    return [step for step in all_steps(program) if isinstance(step, CallbackStep)]


def _callback(step: CallbackStep):
    """A C-callable function running the step's primitive on copies of its operands and
    writing its results (if any) into the step's result buffers."""
    avals = [v.aval for v in step.eqn.invars]

    def run(table) -> None:
        try:
            values = []
            for k, aval in enumerate(avals):
                count = aval.size * aval.dtype.itemsize
                raw = ctypes.string_at(table[k], count) if count else b""
                values.append(np.frombuffer(raw, aval.dtype).copy())
            for k, result in enumerate(step.run(values)):
                ctypes.memmove(table[len(avals) + k], result.ctypes.data, result.nbytes)
        except BaseException as error:  # re-raised once native code returns
            _callback_errors.__dict__.setdefault("raised", []).append(error)

    return _CALLBACK(run)


# Exceptions raised by callbacks while this thread's native code ran: native code cannot
# unwind, so the program runs to its end and the call then raises the first of them.
_callback_errors = threading.local()


def _raise_callback_errors() -> None:
    raised = getattr(_callback_errors, "raised", None)
    if raised:
        _callback_errors.raised = []
        raise raised[0]
