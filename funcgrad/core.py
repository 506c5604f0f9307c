"""The tracing core: abstract values, primitives, traces and tracers.

Every operation is a `Primitive` applied with `bind`, which hands it to the *current trace*.
A transformation makes a child trace whose parent is the trace that was current, makes it
current while the user's function runs, and runs its rules with the parent current again. So a
tracer of an outer trace is simply a constant to an inner one, and no global level counter is
needed. The current trace lives in a thread-local context; at the bottom is the eval trace,
which runs each primitive's NumPy implementation. A trace's tracers are valid while its
transformation runs (`trace_lifetime`), which can check, on request, that none outlives it.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from funcgrad import dtypes
from funcgrad.config import config
from funcgrad.errors import (
    ConcretizationTypeError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerIntegerConversionError,
    TracerLeakError,
    UnexpectedTracerError,
)

# ---------------------------------------------------------------------------------------------
# Abstract values


_SHORT_DTYPE_NAMES = {
    "bool": "bool",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int1": "i1",
    "int2": "i2",
    "int4": "i4",
    "uint1": "u1",
    "uint2": "u2",
    "uint4": "u4",
    # float8_e4m3fn is f8_e4m3fn, float4_e2m1fn f4_e2m1fn
    **{d.name: d.name.replace("float", "f", 1) for d in dtypes.narrow_float_dtypes},
}


def short_dtype_name(dtype: np.dtype) -> str:
    return _SHORT_DTYPE_NAMES.get(dtype.name, dtype_name(dtype))


def dtype_name(dtype: np.dtype) -> str:
    """A dtype's name, float0's included (NumPy calls its structured dtype "void")."""
    return "float0" if dtype == dtypes.float0 else dtype.name


def is_float0(x) -> bool:
    """True for the tangent of an integer or boolean value: a NumPy array of float0, which
    holds no data and so is never traced or staged."""
    return isinstance(x, np.ndarray) and x.dtype == dtypes.float0


class ShapedArray:
    """What tracing knows of an array: its shape, dtype and whether its type is weak."""

    __slots__ = ("shape", "dtype", "weak_type")
    array_abstraction_level = 1

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, weak_type: bool = False):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = weak_type

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def update(self, shape=None, dtype=None, weak_type=None) -> ShapedArray:
        return ShapedArray(
            self.shape if shape is None else shape,
            self.dtype if dtype is None else dtype,
            self.weak_type if weak_type is None else weak_type,
        )

    def str_short(self) -> str:
        return f"{short_dtype_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __eq__(self, other) -> bool:
        return (
            type(other) is ShapedArray
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.weak_type == other.weak_type
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.weak_type))

    def __repr__(self) -> str:
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.str_short()}{weak})"


class ShapeDtypeStruct:
    """A shape and dtype standing in for an array (as returned by eval_shape)."""

    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape, dtype, weak_type: bool = False):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = weak_type

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        size = 1
        for d in self.shape:
            size *= d
        return size

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, ShapeDtypeStruct)
            and self.shape == other.shape
            and self.dtype == other.dtype
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={dtype_name(self.dtype)})"


def get_aval(x) -> ShapedArray:
    """The abstract value of anything that can be a primitive operand."""
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval
    if is_float0(x):
        return ShapedArray(x.shape, dtypes.float0)
    if isinstance(x, (np.ndarray, np.generic)):
        return ShapedArray(x.shape, dtypes.check_supported(x.dtype), False)
    if isinstance(x, (bool, int, float, complex)):
        dtype, weak = dtypes.scalar_dtype(x)
        return ShapedArray((), dtype, weak)
    if isinstance(x, ShapeDtypeStruct):
        return ShapedArray(x.shape, dtypes.check_supported(x.dtype), x.weak_type)
    raise TypeError(f"{type(x).__name__} {x!r} is not a valid funcgrad array type")


# ---------------------------------------------------------------------------------------------
# Primitives


def _all_operands_weak(weak_flags: Sequence[bool], **params) -> bool:
    return bool(weak_flags) and all(weak_flags)


class Primitive:
    """A named operation with one rule table per interpretation.

    Rules are registered beside the primitive's declaration (see `funcgrad.lax`):
    `abstract_eval` maps input avals to output shapes and dtypes, `impl` is the NumPy
    reference, `jvp`, `transpose` and `batch` serve the transformations, and `lowerings`
    holds one entry per compiled backend. Weakness of the output type is decided by one
    `weak_type_rule` for both eager execution and tracing, so the two cannot disagree.
    """

    RULES = ("abstract_eval", "impl", "jvp", "transpose", "batch")

    def __init__(self, name: str, *, multiple_results: bool = False, higher_order: bool = False):
        if name in PRIMITIVES:
            raise ValueError(f"a primitive named {name!r} is already declared")
        self.name = name
        self.multiple_results = multiple_results
        # A higher-order primitive's params hold programs (jaxprs, functions); its impl runs
        # them on funcgrad arrays by binding their primitives, instead of calling NumPy.
        self.higher_order = higher_order
        self.abstract_eval_rule: Callable | None = None
        self.impl: Callable | None = None
        self.jvp: Callable | None = None
        self.transpose: Callable | None = None
        self.batch: Callable | None = None
        self.lowerings: dict[str, Callable] = {}
        # How partial evaluation splits it when some operands are known (higher-order
        # primitives); others are staged whole once any operand is unknown.
        self.partial_eval: Callable | None = None
        self.weak_type_rule: Callable = _all_operands_weak
        # Rules that do not apply to this primitive, each with the reason (see the coverage tool).
        self.not_applicable: dict[str, str] = {}
        PRIMITIVES[name] = self

    def __repr__(self) -> str:
        return self.name

    def bind(self, *args, **params):
        return _context.trace.process_primitive(self, args, params)

    def abstract_eval(self, *avals: ShapedArray, **params):
        """Output aval(s): shape and dtype from the rule, weakness from `weak_type_rule`."""
        out = self.abstract_eval_rule(*avals, **params)
        weak = self.weak_type_rule([a.weak_type for a in avals], **params)
        if self.multiple_results:
            if isinstance(weak, bool):
                weak = [weak] * len(out)
            return [a.update(weak_type=w) for a, w in zip(out, weak)]
        return out.update(weak_type=weak)

    def has_rule(self, rule: str) -> bool:
        if rule == "abstract_eval":
            return self.abstract_eval_rule is not None
        if rule in self.RULES:
            return getattr(self, rule) is not None
        return rule in self.lowerings

    # Decorators that fill the tables.
    def def_abstract_eval(self, rule: Callable) -> Callable:
        self.abstract_eval_rule = rule
        return rule

    def def_impl(self, rule: Callable) -> Callable:
        self.impl = rule
        return rule

    def def_jvp(self, rule: Callable) -> Callable:
        self.jvp = rule
        return rule

    def def_transpose(self, rule: Callable) -> Callable:
        self.transpose = rule
        return rule

    def def_batch(self, rule: Callable) -> Callable:
        self.batch = rule
        return rule

    def def_weak_type(self, rule: Callable) -> Callable:
        self.weak_type_rule = rule
        return rule

    def def_lowering(self, backend: str) -> Callable:
        def register(rule: Callable) -> Callable:
            self.lowerings[backend] = rule
            return rule

        return register


PRIMITIVES: dict[str, Primitive] = {}


def library_primitives() -> dict[str, Primitive]:
    """funcgrad's own primitives: the registry without those a user declared
    (`funcgrad.extend.core.Primitive`), which the coverage matrix and rule checks leave out."""
    return {n: p for n, p in PRIMITIVES.items() if not getattr(p, "user_defined", False)}


def never_weak(weak_flags: Sequence[bool], **params) -> bool:
    """The weak-type rule of primitives whose output dtype does not come from their inputs."""
    return False


# ---------------------------------------------------------------------------------------------
# Traces and the current-trace context


class Trace:
    """One interpretation of primitives. Subclasses implement `process_primitive`.

    `parent` is the trace that was current when this one was made; rules run with it current.
    `debug_info` names the transformation and the user's function, for error messages.
    """

    def __init__(self, parent: Trace | None, debug_info: str | None = None):
        self.parent = parent
        self.debug_info = debug_info
        self.alive = True
        # Where each tracer made by an operation came from, by id, for the leak checker's
        # message. Recording wraps this trace's `process_primitive`, so that with the checker
        # off nothing is added to the path every operation takes.
        self.origins: dict[int, Any] | None = None
        if config.check_tracer_leaks:
            self.origins = {}
            self.process_primitive = _recording_origins(self, self.process_primitive)

    def process_primitive(self, primitive: Primitive, args: Sequence[Any], params: dict):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.debug_info or ''})"


class _TraceContext(threading.local):
    def __init__(self):
        self.trace = _eval_trace


_eval_trace: Trace | None = None
_context: _TraceContext


def install_eval_trace(trace: Trace) -> None:
    """Make `trace` the bottom trace of every thread (done once by the eval interpreter)."""
    global _eval_trace, _context
    _eval_trace = trace
    _context = _TraceContext()


def current_trace() -> Trace:
    return _context.trace


def eval_trace() -> Trace:
    return _eval_trace


class set_current_trace:
    """Context manager: make `trace` current for the duration of the block."""

    __slots__ = ("trace", "previous")

    def __init__(self, trace: Trace):
        self.trace = trace

    def __enter__(self):
        self.previous = _context.trace
        _context.trace = self.trace

    def __exit__(self, *exc_info):
        _context.trace = self.previous


def bind(primitive: Primitive, *args, **params):
    return _context.trace.process_primitive(primitive, args, params)


# ---------------------------------------------------------------------------------------------
# The lifetime of a trace, and the leak checker


@contextlib.contextmanager
def trace_lifetime(trace: Trace) -> Iterator[None]:
    """The block in which `trace`'s tracers may be used: after it, using one raises
    `UnexpectedTracerError`. With `config.check_tracer_leaks`, a block that ends normally
    must have dropped its own references to them (`del`), and any tracer of `trace` still
    referenced then has escaped: `TracerLeakError` names each one and the line that made it."""
    try:
        yield
    finally:
        trace.alive = False
    if config.check_tracer_leaks:
        described = _leak_descriptions(trace)
        if described:
            raise TracerLeakError(trace.debug_info, described)


def _recording_origins(trace: Trace, process_primitive: Callable) -> Callable:
    from funcgrad.interpreters.staging import user_source_info  # (staging builds on this)

    def recording(primitive, args, params):
        out = process_primitive(primitive, args, params)
        where = user_source_info()
        for x in out if primitive.multiple_results else [out]:
            if isinstance(x, Tracer) and x._trace is trace:
                trace.origins[id(x)] = (x.aval, primitive.name, where)
        return out

    return recording


def _leaked_tracers(trace: Trace) -> list[Tracer]:
    """The tracers of `trace` that something still references (found through their reference
    to the trace: no list of them is kept, which would keep them alive)."""
    held = [x for x in gc.get_referrers(trace) if isinstance(x, Tracer)]
    if held:
        del held
        gc.collect()  # tracers kept only by reference cycles are garbage, not leaks
        held = [x for x in gc.get_referrers(trace) if isinstance(x, Tracer)]
    return held


def _leak_descriptions(trace: Trace) -> list[str]:
    """A line for each leaked tracer of `trace`. The checker's own references to a tracer it
    describes are no holders: its list, and the frames running now, or the generators whose
    frames they are (from Python 3.12 a comprehension's variable lives in the frame around
    it, and `trace_lifetime`'s generator was named as holding each tracer described)."""
    leaked = _leaked_tracers(trace)
    own = {id(leaked)}
    frame = sys._getframe()
    while frame is not None:
        own.add(id(frame))
        frame = frame.f_back
    described = []
    for tracer in leaked:
        described.append(_leak_description(trace, tracer, own))
    return described


def _leak_description(trace: Trace, tracer: Tracer, own: set[int]) -> str:
    # None recorded: an input, a trace begun before the option was on, or a dead tracer's id
    # reused by one of another type.
    aval, primitive, where = (trace.origins or {}).get(id(tracer), (None, None, None))
    if aval != tracer.aval:
        origin = "with no recorded origin (an input of the traced function, or made before "
        origin += "leak checking began)"
    else:
        origin = f"made by {primitive}" + (f" at {where}" if where is not None else "")
    holders = sorted(
        {
            type(r).__name__
            for r in gc.get_referrers(tracer)
            if id(r) not in own
            and id(getattr(r, "gi_frame", None) or getattr(r, "cr_frame", None)) not in own
            and not isinstance(r, Tracer)
        }
    )
    held = f", held by a {' and a '.join(holders)}" if holders else ""
    return f"{tracer.aval.str_short()} {origin}{held}"


# ---------------------------------------------------------------------------------------------
# Tracers


class Tracer:
    """A value under a transformation. Subclasses hold their interpretation's data.

    Array methods and operators (`+`, `.sum()`, `.at[...]`, ...) are installed by
    `funcgrad.numpy` on both `Tracer` and the concrete `Array`, so they behave the same.
    """

    __slots__ = ("_trace",)
    __array_priority__ = 1000

    @property
    def aval(self) -> ShapedArray:
        raise NotImplementedError

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    @property
    def size(self) -> int:
        return self.aval.size

    @property
    def weak_type(self) -> bool:
        return self.aval.weak_type

    def to_concrete_value(self):
        """The concrete value behind this tracer, where the interpretation knows one."""
        raise ConcretizationTypeError(self)

    def _concrete(self, error_type):
        try:
            return self.to_concrete_value()
        except ConcretizationTypeError:
            raise error_type(self) from None

    def __bool__(self):
        return bool(self._concrete(TracerBoolConversionError))

    def __int__(self):
        return int(self._concrete(TracerIntegerConversionError))

    def __float__(self):
        return float(self._concrete(TracerIntegerConversionError))

    def __complex__(self):
        return complex(self._concrete(TracerIntegerConversionError))

    def __index__(self):
        return self._concrete(TracerIntegerConversionError).__index__()

    def item(self, *index):
        return np.asarray(self.to_concrete_value()).item(*index)

    def tolist(self):
        return np.asarray(self.to_concrete_value()).tolist()

    def __array__(self, dtype=None, copy=None):
        raise TracerArrayConversionError(self)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d array)")
        return self.shape[0]

    def __hash__(self):
        raise TypeError(f"unhashable type: traced array {self.aval.str_short()}")

    def __repr__(self) -> str:
        return f"Traced<{self.aval.str_short()}>with<{type(self._trace).__name__}>"

    def check_alive(self) -> None:
        if not self._trace.alive:
            raise UnexpectedTracerError(self)


def concrete_or_error(value, message: str):
    """`value`, or the concrete value behind it where it is a tracer; a tracer without one
    (traced under jit) raises ConcretizationTypeError saying `message`: why the caller needs
    the value now."""
    if isinstance(value, Tracer):
        try:
            return value.to_concrete_value()
        except ConcretizationTypeError:
            raise ConcretizationTypeError(value, message) from None
    return value


def is_tracer_of(x, trace: Trace) -> bool:
    return isinstance(x, Tracer) and x._trace is trace
