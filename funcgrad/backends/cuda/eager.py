"""Eager operations on GPU arrays: a primitive applied to arrays on a GPU runs there, as a
one-equation program compiled by the CUDA backend once per signature (primitive, operand
shapes, dtypes and weak types, params) and launched on every later call, without waiting for
the GPU. Operands still on the host are copied to the GPU first, as JAX moves uncommitted
arrays to a committed array's device."""

from __future__ import annotations

import numpy as np

from funcgrad import caches, core
from funcgrad.array import Array, DeviceValue, GpuDevice, default_gpu, place
from funcgrad.compiler.fusion import CompileError
from funcgrad.interpreters import parallel

_programs: dict = {}
_MAX_PROGRAMS = 4096
caches.on_clear(_programs.clear)


def run(primitive: core.Primitive, args: list[Array], params: dict, signature: tuple):
    """The primitive's results as arrays on the GPU (weak types as its abstract evaluation
    gives them)."""
    device = device_of(args, primitive.name)
    key = (device, signature, tuple(a.weak_type for a in args))
    try:
        executable = _programs.get(key)
    except TypeError:  # an unhashable param: compile every time
        key, executable = None, None
    if executable is None:
        executable = _compile(primitive, args, params, device)
        if key is not None:
            if len(_programs) >= _MAX_PROGRAMS:
                _programs.clear()
            _programs[key] = executable
    return executable.on_device(args, device)


def device_of(args, what: str) -> GpuDevice:
    """The one GPU holding the GPU arrays among `args`; the default GPU when none does."""
    found = {a._value.device for a in args if type(a) is Array and type(a._value) is DeviceValue}
    if not found:
        return default_gpu()
    if len(found) > 1:
        raise ValueError(
            f"{what} got arrays on different devices ({sorted(map(repr, found))}): move them "
            "to one with funcgrad.device_put"
        )
    return found.pop()


class _Collective:
    """A collective on the buffers of a pmap's GPU: instead of running a program, it moves
    them between the GPUs (`collectives.py`), or else meets the other devices' on the host
    (`interpreters/parallel.py`)."""

    def __init__(self, primitive: core.Primitive, params: dict):
        self.primitive = primitive
        self.params = params

    def on_device(self, args: list[Array], device: GpuDevice) -> list[Array]:
        from funcgrad.backends.cuda.collectives import device_rules, transport

        rule = device_rules.get(self.primitive)
        if rule is not None:
            frame = parallel.frame_of(
                self.params["axis_name"], self.params.get("axis_index_groups")
            )
            moving = transport(frame)
            value = args[0]._value
            if type(value) is not DeviceValue:
                value = place(value, device)
            out = None if moving is None else rule(frame, moving, value, **self.params)
            if out is not None:
                return [Array(out)]
        out = parallel.apply_collective(self.primitive, [a._value for a in args], self.params)
        return [Array(place(out, device))]


class _Unlowered:
    """A primitive the compiler needs no lowering for, by design (custom_lin exists only to be
    transposed), applied eagerly to GPU arrays: its implementation, on host copies, says what
    it says on the CPU (custom_lin: that forward mode cannot go through a custom_vjp)."""

    def __init__(self, primitive: core.Primitive, params: dict):
        self.primitive = primitive
        self.params = params

    def on_device(self, args: list[Array], device: GpuDevice) -> list[Array]:
        out = self.primitive.impl(*[np.asarray(a._value) for a in args], **self.params)
        outs = out if self.primitive.multiple_results else [out]
        return [Array(place(value, device)) for value in outs]


def _compile(primitive, args, params, device: GpuDevice):
    from funcgrad.backends.cuda.executable import CudaExecutable
    from funcgrad.transforms.make_jaxpr import make_jaxpr

    if primitive in parallel.shard_rules:
        return _Collective(primitive, params)

    shapes = [core.ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in args]
    closed = make_jaxpr(lambda *xs: primitive.bind(*xs, **params))(*shapes)
    try:
        return CudaExecutable(closed, device=device.runtime)
    except CompileError as error:
        from funcgrad.backends.cuda import lowerings  # noqa: F401  (the reasons for no lowering)

        if "cuda" in primitive.not_applicable:
            return _Unlowered(primitive, params)
        raise CompileError(
            f"{primitive.name} cannot run on {device!r} yet: {error}. Move its operands to the "
            "CPU with funcgrad.device_put(x, funcgrad.devices('cpu')[0])"
        ) from error
