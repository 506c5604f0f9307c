"""pmap: run one function on several devices at once, each on its slice of the mapped axis.

As in JAX, the function is staged once per signature (as jit stages it, with the axis name
bound so collectives can be traced) and the staged program runs on every device through the
executable jit compiles for it. The call binds one `pmap` primitive whose operands are either
mapped along axis 0 (one slice per device) or the same for every device, so the wrapper moves
the user's `in_axes`/`out_axes` to and from axis 0 and the primitive's rules stay simple: the
jvp of a pmap is a pmap of the jvp, its transpose a pmap of the transposed program (summing
over devices the cotangents of inputs that every device shared), vmap a pmap of the batched
program, and partial evaluation splits it into two pmaps with per-device residuals.

Results are sharded arrays: one buffer per device, handed back to the next pmap as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from funcgrad import caches, core, distributed, tree_util
from funcgrad.array import (
    CPU,
    Array,
    Device,
    DeviceValue,
    GpuDevice,
    place,
    placement,
    put_on_gpu,
    sharded,
    to_host,
)
from funcgrad.backends.numpy.executor import NumpyExecutable
from funcgrad.compiler import passes
from funcgrad.compiler.fusion import CompileError
from funcgrad.config import config
from funcgrad.core import Primitive, ShapedArray
from funcgrad.devices import GPU_BACKENDS, local_devices
from funcgrad.interpreters import batching, parallel
from funcgrad.interpreters.ad import (
    UndefinedPrimal,
    Zero,
    backward_pass,
    instantiate,
    is_undefined,
    tangent_aval,
)
from funcgrad.interpreters.partial_eval import PartialEvalTrace
from funcgrad.interpreters.staging import StagingTrace, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, Var
from funcgrad.lax import elementwise
from funcgrad.lax.base import asarray
from funcgrad.lax.parallel import axis_index_p, psum_p
from funcgrad.transforms.jit import (
    _batched_program,
    _compile,
    _hoisted,
    _jvp_program,
    _split_program,
)
from funcgrad.transforms.make_jaxpr import function_name
from funcgrad.transforms.vmap import _expand_prefix

# ---------------------------------------------------------------------------------------------
# The primitive
#
# params: jaxpr (one device's program, no consts), axis_name, axis_size (devices along the
# axis, over all processes), devices (this process's), in_mapped / out_mapped (per operand and
# result: sliced along axis 0, or the same on every device), name.

pmap_p = Primitive("pmap", multiple_results=True, higher_order=True)
# Its shards run on its own devices (the `devices` param: virtual CPU devices or GPUs),
# wherever its operands are: eager dispatch leaves it to its impl.
pmap_p.places_itself = True


def _outer_aval(aval: ShapedArray, mapped: bool, count: int) -> ShapedArray:
    return aval.update(shape=(count,) + aval.shape) if mapped else aval


@pmap_p.def_abstract_eval
def _pmap_abstract_eval(*avals, jaxpr: ClosedJaxpr, devices, out_mapped, **params):
    return [_outer_aval(a, m, len(devices)) for a, m in zip(jaxpr.out_avals, out_mapped)]


@pmap_p.def_weak_type
def _pmap_weak_type(weak_flags, *, jaxpr: ClosedJaxpr, **params) -> list[bool]:
    return [a.weak_type for a in jaxpr.out_avals]


def _holds_shards_for(x: Array, devices: Sequence[Device]) -> bool:
    """Whether `x` is sharded so that each device can take its own buffer as it is: GPUs
    their own buffers, virtual CPU devices any host buffers (all share the host's memory)."""
    shards = getattr(x, "_shards", None)
    if shards is None or len(shards) != len(devices):
        return False
    if isinstance(devices[0], GpuDevice):
        return all(held_by is device for (held_by, _), device in zip(shards, devices))
    return all(type(buffer) is not DeviceValue for _, buffer in shards)


def _device_operands(args: Sequence[Array], in_mapped, devices: Sequence[Device]) -> list[list]:
    """Each device's operands: its slice of each mapped operand (its own buffer when the
    operand is sharded so) and the shared operands, on the device when it is a GPU."""
    on_gpus = isinstance(devices[0], GpuDevice)
    operands: list[list] = [[] for _ in devices]
    for x, mapped in zip(args, in_mapped):
        if mapped and _holds_shards_for(x, devices):
            for device_operands, (_, buffer) in zip(operands, x._shards):
                device_operands.append(Array(buffer, x.weak_type))
            continue
        if mapped or not on_gpus:
            x = to_host(x)
        for i, device in enumerate(devices):
            value = x._value[i] if mapped else x._value
            if on_gpus and not (type(value) is DeviceValue and value.device is device):
                value = place(value, device)
            operands[i].append(x if value is x._value else Array(value, x.weak_type))
    return operands


class _OnHost:
    """The NumPy reference running a stretch that no compiled backend takes (a collective
    inside control flow) for a GPU: on host copies, its results placed on the GPU."""

    def __init__(self, closed: ClosedJaxpr, device: GpuDevice):
        self.reference = NumpyExecutable(closed)
        self.device = device

    def __call__(self, *args) -> list[Array]:
        previous, placement.device = placement.device, CPU
        try:
            outs = self.reference(*[to_host(a) for a in args])
        finally:
            placement.device = previous
        return [Array(place(o._value, self.device), o.weak_type) for o in outs]


class _OnGpu:
    """A CUDA executable run on its GPU, results left there."""

    def __init__(self, executable, device: GpuDevice):
        self.executable = executable
        self.device = device

    def __call__(self, *args) -> list[Array]:
        return self.executable.on_device(args, self.device)


def _compiled(closed: ClosedJaxpr, backend: str, device: GpuDevice | None):
    """jit's executable for `closed` on `backend`, run on `device` when it is a GPU."""
    if device is None:
        return _compile(closed, backend, ())
    return _OnGpu(_compile(closed, backend, (), device.runtime), device)


def _stretch_executable(closed: ClosedJaxpr, backend: str, device: GpuDevice | None):
    try:
        return _compiled(closed, backend, device)
    except CompileError:
        return NumpyExecutable(closed) if device is None else _OnHost(closed, device)


class _SegmentedExecutable:
    """One device's program split at its collectives, for a compiled backend, which does not
    lower them: the stretches between collectives run as jit's compiled programs and the
    collectives run between them, exchanging buffers through the communicator. (A collective
    nested in control flow keeps its whole stretch on the NumPy reference.)"""

    def __init__(self, closed: ClosedJaxpr, backend: str, device: GpuDevice | None):
        closed = passes.inline_calls(closed)  # collectives inside jit calls become top level
        jaxpr = closed.jaxpr
        self.consts = dict(zip(jaxpr.constvars, closed.consts))
        self.invars, self.outvars = jaxpr.invars, jaxpr.outvars
        groups: list = []  # lists of equations between collectives, and collective equations
        for eqn in jaxpr.eqns:
            if eqn.primitive in parallel.shard_rules:
                groups.append(eqn)
            elif groups and isinstance(groups[-1], list):
                groups[-1].append(eqn)
            else:
                groups.append([eqn])
        # Backwards: a stretch returns what is read after it and reads what it does not define.
        live = {v for v in jaxpr.outvars if type(v) is Var}
        self.steps: list = []
        for group in reversed(groups):
            if not isinstance(group, list):
                self.steps.append(group)
                live.difference_update(group.outvars)
                live.update(v for v in group.invars if type(v) is Var)
                continue
            defined = [v for eqn in group for v in eqn.outvars]
            outs = [v for v in defined if v in live]
            ins: list = []
            for eqn in group:
                for v in eqn.invars:
                    if type(v) is Var and v not in ins and v not in defined:
                        ins.append(v)
            stretch = ClosedJaxpr(Jaxpr([], ins, outs, group), [])
            self.steps.append((_stretch_executable(stretch, backend, device), ins, outs))
            live.difference_update(defined)
            live.update(ins)
        self.steps.reverse()

    def __call__(self, *args) -> list[Array]:
        env = dict(self.consts)
        env.update(zip(self.invars, args))

        def read(v):
            if type(v) is Var:
                return env[v]
            return Array(np.asarray(v.val, v.aval.dtype), v.aval.weak_type)

        for step in self.steps:
            if isinstance(step, tuple):
                executable, ins, outs = step
                env.update(zip(outs, executable(*[env[v] for v in ins])))
            else:
                env.update(
                    zip(step.outvars, [step.primitive.bind(*map(read, step.invars), **step.params)])
                )
        return [read(v) for v in self.outvars]


@caches.program_cache
def _device_executable(jaxpr: ClosedJaxpr, backend: str, device: GpuDevice | None = None):
    """jit's executable for one device's program on `backend` (for a GPU, on that GPU, its
    results left there), or, where the backend cannot lower the collectives, the program
    split at them."""
    try:
        return _compiled(jaxpr, backend, device)
    except CompileError:
        return _SegmentedExecutable(jaxpr, backend, device)


@pmap_p.def_impl
def _pmap_impl(*args, jaxpr, axis_name, axis_size, devices, in_mapped, out_mapped, name):
    if isinstance(devices[0], GpuDevice):
        runs = [_device_executable(jaxpr, d.backend, d) for d in devices]
    else:
        runs = [_device_executable(jaxpr, config.jit_backend)] * len(devices)
    device_args = _device_operands(args, in_mapped, devices)
    outs = parallel.run_on_devices(runs, device_args, devices, ((axis_name, axis_size),))
    if isinstance(devices[0], GpuDevice):  # literal results were made on the host
        outs = [[put_on_gpu(o, d) for o in device_outs] for device_outs, d in zip(outs, devices)]
    return [
        sharded([device_outs[k]._value for device_outs in outs], list(devices), out.weak_type)
        if mapped
        else outs[0][k]
        for k, (out, mapped) in enumerate(zip(outs[0], out_mapped))
    ]


@pmap_p.def_jvp
def _pmap_jvp(primals, tangents, *, jaxpr, in_mapped, out_mapped, name, **params):
    nonzero = tuple(type(t) is not Zero for t in tangents)
    jvp_closed, out_nonzero = _jvp_program(jaxpr, nonzero)
    outs = pmap_p.bind(
        *primals,
        *[t for t in tangents if type(t) is not Zero],
        jaxpr=jvp_closed,
        in_mapped=in_mapped + tuple(m for m, nz in zip(in_mapped, nonzero) if nz),
        out_mapped=out_mapped + tuple(m for m, nz in zip(out_mapped, out_nonzero) if nz),
        name=f"jvp({name})",
        **params,
    )
    count = len(params["devices"])
    num_out = len(jaxpr.out_avals)
    tangent_outs = iter(outs[num_out:])
    return outs[:num_out], [
        next(tangent_outs) if nz else Zero(tangent_aval(_outer_aval(aval, m, count)))
        for nz, aval, m in zip(out_nonzero, jaxpr.out_avals, out_mapped)
    ]


@caches.program_cache
def _transpose_program(
    jaxpr: ClosedJaxpr,
    undefined: tuple[bool, ...],
    ct_nonzero: tuple[bool, ...],
    in_mapped: tuple[bool, ...],
    out_mapped: tuple[bool, ...],
    axis_name: Hashable,
) -> ClosedJaxpr:
    """One device's (defined operands, nonzero cotangents) -> cotangents of the undefined
    operands. A result every device shares was taken from device 0, so only device 0 receives
    its cotangent; an operand every device shares gets the sum of the devices' cotangents."""
    in_avals, out_avals = jaxpr.in_avals, jaxpr.out_avals
    defined_avals = [a for a, u in zip(in_avals, undefined) if not u]
    ct_avals = [tangent_aval(a) for a, nz in zip(out_avals, ct_nonzero) if nz]

    def transposed(*args):
        defined, cts = iter(args[: len(defined_avals)]), iter(args[len(defined_avals) :])
        operands = [UndefinedPrimal(a) if u else next(defined) for a, u in zip(in_avals, undefined)]
        on_first_device = None
        cts_out = []
        for aval, nz, mapped in zip(out_avals, ct_nonzero, out_mapped):
            if not nz:
                cts_out.append(Zero(tangent_aval(aval)))
                continue
            ct = next(cts)
            if not mapped:
                if on_first_device is None:
                    first = elementwise.eq(axis_index_p.bind(axis_name=axis_name), 0)
                    on_first_device = elementwise.convert_element_type(first, ct.dtype)
                ct = elementwise.mul(ct, on_first_device)
            cts_out.append(ct)
        cts_in = backward_pass(jaxpr.jaxpr, jaxpr.consts, operands, cts_out)
        return [
            instantiate(ct)
            if m
            else psum_p.bind(instantiate(ct), axis_name=axis_name, axis_index_groups=None)
            for ct, u, m in zip(cts_in, undefined, in_mapped)
            if u
        ]

    closed, _ = trace_to_jaxpr(transposed, defined_avals + ct_avals, "transpose of a pmap")
    return closed


@pmap_p.def_transpose
def _pmap_transpose(cotangents, *operands, jaxpr, axis_name, in_mapped, out_mapped, name, **params):
    undefined = tuple(is_undefined(op) for op in operands)
    ct_nonzero = tuple(type(ct) is not Zero for ct in cotangents)
    transposed = _transpose_program(jaxpr, undefined, ct_nonzero, in_mapped, out_mapped, axis_name)
    cts = pmap_p.bind(
        *[op for op in operands if not is_undefined(op)],
        *[ct for ct in cotangents if type(ct) is not Zero],
        jaxpr=transposed,
        axis_name=axis_name,
        in_mapped=tuple(m for m, u in zip(in_mapped, undefined) if not u)
        + tuple(m for m, nz in zip(out_mapped, ct_nonzero) if nz),
        out_mapped=tuple(m for m, u in zip(in_mapped, undefined) if u),
        name=f"transpose({name})",
        **params,
    )
    cts = iter(cts)
    return [next(cts) if u else None for u in undefined]


@pmap_p.def_batch
def _pmap_batch(values, dims, *, jaxpr, in_mapped, out_mapped, name, **params):
    """The vmapped axis goes right after the device axis (or first, for shared operands), so
    each device's program is the program batched along its axis 0."""
    size = batching.batch_size(values, dims)
    values = [
        v if d is None else batching.moveaxis(v, d, 1 if m else 0)
        for v, d, m in zip(values, dims, in_mapped)
    ]
    in_batched = tuple(d is not None for d in dims)
    axis_name = batching.current_axis_name()
    device_axis = ((params["axis_name"], params["axis_size"]),)
    with parallel.axes_bound(device_axis, f"vmap of pmap({name})"):
        batched, out_batched = _batched_program(jaxpr, in_batched, size, axis_name)
    outs = pmap_p.bind(
        *values,
        jaxpr=batched,
        in_mapped=in_mapped,
        out_mapped=out_mapped,
        name=f"vmap({name})",
        **params,
    )
    return outs, [(1 if m else 0) if b else None for b, m in zip(out_batched, out_mapped)]


def _pmap_partial_eval(trace: PartialEvalTrace, args: Sequence, params: dict) -> list:
    """The known part runs now as one pmap; the unknown part is staged as another, reading the
    known part's per-device residuals."""
    jaxpr, in_mapped, out_mapped = params["jaxpr"], params["in_mapped"], params["out_mapped"]
    unknowns = tuple(trace.is_unknown(a) for a in args)
    known, unknown, num_residuals, out_unknown = _split_program(jaxpr, unknowns)
    known_params = dict(
        params,
        jaxpr=known,
        in_mapped=tuple(m for m, u in zip(in_mapped, unknowns) if not u),
        out_mapped=tuple(m for m, u in zip(out_mapped, out_unknown) if not u)
        + (True,) * num_residuals,
    )
    with core.set_current_trace(trace.parent):
        known_outs = pmap_p.bind(*[a for a, u in zip(args, unknowns) if not u], **known_params)
    num_known_out = out_unknown.count(False)
    if not unknown.eqns and not any(out_unknown):
        return known_outs
    unknown_params = dict(
        params,
        jaxpr=unknown,
        in_mapped=(True,) * num_residuals + tuple(m for m, u in zip(in_mapped, unknowns) if u),
        out_mapped=tuple(m for m, u in zip(out_mapped, out_unknown) if u),
    )
    unknown_args = known_outs[num_known_out:] + [a for a, u in zip(args, unknowns) if u]
    staged = StagingTrace.process_primitive(trace, pmap_p, unknown_args, unknown_params)
    known_iter, staged_iter = iter(known_outs[:num_known_out]), iter(staged)
    return [next(staged_iter) if u else next(known_iter) for u in out_unknown]


pmap_p.partial_eval = _pmap_partial_eval


# ---------------------------------------------------------------------------------------------
# The transform


class _AnonymousAxis:
    """The axis of a pmap given no axis_name: collectives cannot name it, but the rules of
    pmap itself (the transpose's sum over devices) can."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<axis of pmap({self.name})>"


def _static_tuple(argnums) -> tuple:
    if argnums is None:
        return ()
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


class Pmapped:
    """A function mapped over devices: call it with arguments whose mapped axes have one entry
    per device."""

    def __init__(
        self,
        fun: Callable,
        axis_name: Hashable | None,
        in_axes: Any,
        out_axes: Any,
        static_broadcasted_argnums,
        devices: Sequence[Device] | None,
        backend: str | None,
        donate_argnums,
        axis_size: int | None = None,
    ):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.name = function_name(fun)
        self.axis_name = _AnonymousAxis(self.name) if axis_name is None else axis_name
        self.in_axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
        self.out_axes = out_axes
        self.static_argnums = _static_tuple(static_broadcasted_argnums)
        self.devices = None if devices is None else _checked_devices(devices, self.name)
        self.backend = backend
        # Buffers are not reused by the NumPy backend, so donation is accepted and ignored.
        self.donate_argnums = _static_tuple(donate_argnums)
        self.axis_size = axis_size  # (checked against the mapped size, as a promise)
        self._cache: dict = {}
        caches.track(self)

    def clear_cache(self) -> None:
        self._cache.clear()

    def _split(self, args: tuple):
        count = len(args)
        static_positions = {i % count for i in self.static_argnums if -count <= i < count}
        static = tuple((i, args[i]) for i in sorted(static_positions))
        for i, value in static:
            try:
                hash(value)
            except TypeError:
                raise ValueError(
                    f"pmap({self.name}): static argument {i} must be hashable, got "
                    f"{type(value).__name__} {value!r}"
                ) from None
        return (
            static,
            static_positions,
            [a for i, a in enumerate(args) if i not in static_positions],
        )

    def _flat_in_axes(self, dynamic_args: list, kwargs: dict) -> list:
        in_axes = self.in_axes
        if isinstance(in_axes, tuple) and len(in_axes) != len(dynamic_args):
            raise ValueError(
                f"pmap({self.name}) got in_axes of length {len(in_axes)} for "
                f"{len(dynamic_args)} positional arguments; give one entry per argument"
            )
        try:
            axes = _expand_prefix(in_axes, tuple(dynamic_args))
        except ValueError:
            raise ValueError(
                f"pmap in_axes must be an int, None, or a tree prefix of the arguments; "
                f"in_axes={in_axes!r} does not match the argument structure "
                f"{tree_util.tree_structure(tuple(dynamic_args))}"
            ) from None
        return axes + [0] * len(tree_util.tree_leaves(kwargs))  # keyword arguments map axis 0

    def _devices_for(self, size: int) -> tuple[Device, ...]:
        if size == 0:
            raise ValueError(
                f"pmap({self.name}): the mapped axis has size 0; a pmap runs one entry on each "
                "device, so it needs at least one entry"
            )
        if self.devices is not None:
            if size != len(self.devices):
                raise ValueError(
                    f"pmap({self.name}): the mapped axis has size {size} but {len(self.devices)} "
                    f"devices were given (devices=); the sizes must be equal"
                )
            return self.devices
        available = local_devices(backend=self.backend)  # the default platform's by default
        if size > len(available):
            more = (
                "this process's GPUs are all there are"
                if getattr(available[0], "backend", None) == "cuda"
                else f"set FUNCGRAD_NUM_CPU_DEVICES (or config num_cpu_devices) to at least {size}"
            )
            raise ValueError(
                f"pmap({self.name}): the mapped axis has size {size}, more than the "
                f"{len(available)} local device(s) ({available[0]!r} ...); {more}, or map "
                "fewer entries"
            )
        return tuple(available[:size])

    def __call__(self, *args, **kwargs):
        static, static_positions, dynamic_args = self._split(args)
        axes = self._flat_in_axes(dynamic_args, kwargs)
        leaves, in_tree = tree_util.tree_flatten((dynamic_args, kwargs))
        leaves = [
            x if type(x) is Array or isinstance(x, core.Tracer) else asarray(x) for x in leaves
        ]
        avals = [core.get_aval(x) for x in leaves]
        size = self._mapped_size(avals, axes)
        axes = [a if a is None else a % aval.ndim for a, aval in zip(axes, avals)]
        devices = self._devices_for(size)
        axis_size = size * distributed.process_count()
        leaves = [x if a in (None, 0) else batching.moveaxis(x, a, 0) for x, a in zip(leaves, axes)]
        device_avals = [
            aval if a is None else aval.update(shape=aval.shape[:a] + aval.shape[a + 1 :])
            for aval, a in zip(avals, axes)
        ]
        key = (
            in_tree,
            tuple(device_avals),
            tuple(a is None for a in axes),
            static,
            axis_size,
            config.default_matmul_precision,  # (its products' precision, as traced)
            config.enable_x64,  # (its defaults' widths, as traced)
            config.numpy_dtype_promotion,  # (which promotions it allowed)
            config.debug_key_reuse,  # (whether its key uses are recorded)
        )
        entry = self._cache.get(key)
        if entry is None:
            entry = self._trace(args, static_positions, in_tree, device_avals, axis_size)
            if not any(isinstance(c, core.Tracer) for c in entry[1]):
                self._cache[key] = entry
        jaxpr, consts, out_tree = entry
        out_axes = self._flat_out_axes(out_tree)
        outs = pmap_p.bind(
            *consts,
            *leaves,
            jaxpr=jaxpr,
            axis_name=self.axis_name,
            axis_size=axis_size,
            devices=devices,
            in_mapped=(False,) * len(consts) + tuple(a is not None for a in axes),
            out_mapped=tuple(a is not None for a in out_axes),
            name=self.name,
        )
        outs = [
            o if a in (None, 0) else batching.moveaxis(o, 0, a % core.get_aval(o).ndim)
            for o, a in zip(outs, out_axes)
        ]
        return tree_util.tree_unflatten(out_tree, outs)

    def _mapped_size(self, avals: list, axes: list) -> int:
        sizes: dict[int, int] = {}
        for i, (aval, axis) in enumerate(zip(avals, axes)):
            if axis is None:
                continue
            if not -aval.ndim <= axis < aval.ndim:
                raise ValueError(
                    f"pmap({self.name}) was asked to map axis {axis} of argument leaf {i}, "
                    f"which has shape {aval.shape}"
                )
            sizes[i] = aval.shape[axis % aval.ndim]
        if not sizes:
            raise ValueError(f"pmap({self.name}) maps no argument (all in_axes are None)")
        if len(set(sizes.values())) > 1:
            described = ", ".join(f"argument leaf {i} has size {s}" for i, s in sizes.items())
            raise ValueError(
                f"pmap({self.name}) got inconsistent sizes for the mapped axes: {described}"
            )
        size = next(iter(sizes.values()))
        if self.axis_size is not None and self.axis_size != size:
            raise ValueError(
                f"pmap({self.name}) was given axis_size={self.axis_size}, but its mapped axes "
                f"have size {size}"
            )
        return size

    def _trace(self, args, static_positions, in_tree, device_avals, axis_size):
        def flat_fun(*flat):
            dynamic_args, kwargs = tree_util.tree_unflatten(in_tree, flat)
            dynamic_iter = iter(dynamic_args)
            full = [
                args[i] if i in static_positions else next(dynamic_iter) for i in range(len(args))
            ]
            return self.fun(*full, **kwargs)

        env = parallel.AxisEnvTrace(
            core.current_trace(), self.axis_name, axis_size, f"pmap({self.name})"
        )
        with core.set_current_trace(env):
            closed, out_tree = trace_to_jaxpr(flat_fun, device_avals, f"pmap({self.name})")
        return _hoisted(closed), closed.consts, out_tree

    def _flat_out_axes(self, out_tree) -> list:
        out_axes = self.out_axes
        if out_axes is None or isinstance(out_axes, int):
            axes = [out_axes] * out_tree.num_leaves
        else:
            placeholder = tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
            try:
                axes = _expand_prefix(out_axes, placeholder)
            except ValueError:
                raise ValueError(
                    f"pmap({self.name}) out_axes={out_axes!r} is not a tree prefix of the "
                    f"output structure {out_tree}"
                ) from None
        return axes

    def __repr__(self) -> str:
        return f"<pmapped function {self.name}>"


def _checked_devices(devices: Sequence[Device], name: str) -> tuple[Device, ...]:
    devices = tuple(devices)
    if not devices or not all(isinstance(d, Device) for d in devices):
        raise TypeError(
            f"pmap({name}): devices= takes a non-empty list of devices, got {devices!r}"
        )
    if len({isinstance(d, GpuDevice) and d.backend for d in devices}) > 1:
        raise ValueError(
            f"pmap({name}): devices= mixes kinds of device ({list(devices)}); a pmap runs on "
            "virtual CPU devices or on GPUs"
        )
    return devices


def pmap(
    fun: Callable,
    axis_name: Hashable | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    static_broadcasted_argnums: int | Sequence[int] = (),
    devices: Sequence[Device] | None = None,
    backend: str | None = None,
    axis_size: int | None = None,
    donate_argnums: int | Sequence[int] = (),
) -> Pmapped:
    """Run `fun` on several devices at once: device i gets slice i of every argument's mapped
    axis (`in_axes`; None shares an argument with every device), and results are stacked along
    `out_axes` as arrays with one buffer per device. Collectives name the axis `axis_name`.

    It runs on `devices`, else on the first local devices of `backend` ("cpu", "gpu" or
    "cuda_emulator"), by default the default platform's: virtual CPU devices, or GPUs."""
    if not callable(fun):
        raise TypeError(f"pmap expects a callable, got {type(fun).__name__}")
    if backend not in (None, "cpu", *GPU_BACKENDS):
        raise ValueError(
            f"pmap: unknown backend {backend!r}; choose one of cpu, {', '.join(GPU_BACKENDS)}"
        )
    return Pmapped(
        fun,
        axis_name,
        in_axes,
        out_axes,
        static_broadcasted_argnums,
        devices,
        backend,
        donate_argnums,
        axis_size,
    )
