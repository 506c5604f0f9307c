"""Errors that teach: each names the abstract value, the transformation and what to do instead."""

from __future__ import annotations


class FuncgradTypeError(TypeError):
    """Base of the errors raised when a traced value is used where a concrete one is needed."""


class ConcretizationTypeError(FuncgradTypeError):
    def __init__(self, tracer, context: str = ""):
        where = _trace_description(tracer)
        super().__init__(
            f"Abstract tracer value encountered where a concrete value is expected: {tracer}.\n"
            f"{context}\n"
            f"The value was created {where}; while a function is traced, its array arguments "
            "are abstract: only their shape and dtype are known, not their values.\n"
            "Pass the argument as static (jit's static_argnums / static_argnames) if its value "
            "decides the program's structure, or use lax.cond / lax.while_loop / fnp.where "
            "to decide on traced values."
        )


class TracerBoolConversionError(ConcretizationTypeError):
    def __init__(self, tracer):
        super().__init__(
            tracer,
            "Python's `if`, `while`, `and`, `or`, `not` and bool() need a concrete truth value.",
        )


class TracerIntegerConversionError(ConcretizationTypeError):
    def __init__(self, tracer):
        super().__init__(tracer, "int(), float() and use as an index need a concrete value.")


class TracerArrayConversionError(FuncgradTypeError):
    def __init__(self, tracer):
        super().__init__(
            f"The traced value {tracer} cannot be converted to a NumPy array: it is abstract "
            f"while the function is traced ({_trace_description(tracer)}). Use funcgrad.numpy "
            "functions on it instead of numpy ones, or funcgrad.debug.callback to reach host code."
        )


class UnexpectedTracerError(FuncgradTypeError):
    def __init__(self, tracer):
        super().__init__(
            f"Encountered an escaped tracer {tracer}: it was created {_trace_description(tracer)}, "
            "and that transformation has already returned. This happens when a traced value is "
            "stored outside the function (a global, a list, an attribute of self) and used later. "
            "Return the value from the transformed function instead."
        )


class TracerLeakError(FuncgradTypeError):
    """A transformation returned while a tracer it made was still referenced (raised where
    `config.check_tracer_leaks` is on)."""

    def __init__(self, transformation: str | None, tracers: list[str]):
        listed = "\n".join(f"  {t}" for t in tracers)
        super().__init__(
            f"{len(tracers)} tracer(s) leaked from {transformation or 'a transformation'}: it "
            f"has returned, but these values it traced are still referenced:\n{listed}\n"
            "A traced value stored outside the function (in a global, a list, a closure or an "
            "attribute that outlives the call) is abstract and invalid once the transformation "
            "returns. Return the value from the transformed function instead."
        )


def _trace_description(tracer) -> str:
    trace = getattr(tracer, "_trace", None)
    info = getattr(trace, "debug_info", None)
    return f"while tracing {info}" if info else "under a transformation"


class OutOfDeviceMemoryError(MemoryError):
    """A device could not hold a compiled call's buffers; the message names each one's size.
    Nothing ran, so no output or argument was written."""


class NonConcreteBooleanIndexError(IndexError):
    """A boolean mask indexing an array while it is traced: the result's shape would depend
    on the mask's values."""


class JaxprTypeError(TypeError):
    """A jaxpr that does not type: a variable used before it is defined or defined twice, or
    an equation whose result types are not those its primitive's rules give (raised by
    `ir.check_jaxpr`, and where `config.enable_checks` is on)."""


class FuncgradRuntimeError(ValueError):
    """A failure found while a program ran: a `checkify.check` whose predicate was false, or an
    automatic check (a NaN, a division by zero, an index out of bounds) that `checkify` added."""


class TypePromotionError(ValueError):
    """Two dtypes have no implicit promotion (a narrow format met another dtype)."""


class KeyReuseError(FuncgradTypeError):
    """A random key was consumed twice (raised where `config.debug_key_reuse` is on): the two
    draws it gave would be the same numbers, or derived from each other's. Split the key (or
    fold in a counter) to get a new key for each use."""
