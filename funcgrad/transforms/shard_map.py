"""shard_map: run one function on every device of a mesh, each on its block of the arguments.

It runs on pmap's machinery (`interpreters/parallel.py`): the function is staged once per
signature, for one device's blocks, under one `AxisEnvTrace` per mesh axis (so collectives
name mesh axes, alone or in tuples), and every device of the mesh runs the staged program on
its own thread. A collective over some of the mesh's axes exchanges within the groups of
devices that differ only along them (`parallel.AxisGroup`).

The call binds one `shard_map` primitive on the whole arrays. Each operand and result carries
its names: per dimension, the mesh axes that split it (from the specs). A device's block of an
operand is the one its position along those axes picks; a result whose spec leaves a mesh axis
out is the same on every device along it and is read from the devices at position 0 there.
With `check_vma` (the default) the staged program is checked to make that so: each value is
followed by the mesh axes along which it may differ (the operands' split axes, plus the axes
of axis_index, ppermute, psum_scatter and all_to_all; psum, pmax, pmin, all_gather and
pbroadcast make their results the same along theirs, unless they combine groups of an axis's
positions, each its own: `axis_index_groups`), and a result that may differ along an axis its spec
leaves out is an error. Control flow is followed: a cond's result may differ where any branch's
may or where the devices pick different branches, and a loop's carry where an iteration can
make it differ (found by growing its axes until they settle), or where the devices' trip
counts can differ. `check_vma=False` trusts a program the check cannot see is the same
everywhere.

The rules are those of a call, as pmap's: jvp is a shard_map of the jvp program, transpose a
shard_map of the transposed program (a result read from position 0 along the axes its spec
leaves out gets its cotangent there only; an operand the same along an axis gets the sum over
that axis of the devices' cotangents), vmap a shard_map of the batched program (the batch
axis first, split over no mesh axis), and partial evaluation two shard_maps joined by each
device's residuals, stacked along a leading axis split over the whole mesh.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from funcgrad import caches, core, distributed, tree_util
from funcgrad.array import Array, GpuDevice, place, put_on_gpu, to_host
from funcgrad.config import config
from funcgrad.core import Primitive, ShapedArray
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
from funcgrad.ir import ClosedJaxpr, Jaxpr, Var, eval_jaxpr
from funcgrad.lax import elementwise, shapes
from funcgrad.lax.base import asarray
from funcgrad.lax.parallel import (
    all_gather_p,
    all_to_all_p,
    axis_index_p,
    pbroadcast_p,
    pmax_p,
    pmin_p,
    ppermute_p,
    psum_p,
    psum_scatter_p,
)
from funcgrad.lax.sharding_constraint import result_layout_rules
from funcgrad.sharding import (
    Mesh,
    NamedSharding,
    PartitionSpec,
    block_index,
    block_shape,
    broadcast_prefix,
    check_spec,
    get_mesh,
    mesh_coords,
)
from funcgrad.transforms.jit import (
    _batched_program,
    _hoisted,
    _jvp_program,
    _split_program,
    _typed_static_key,
)
from funcgrad.transforms.make_jaxpr import function_name
from funcgrad.transforms.pmap import _device_executable

# ---------------------------------------------------------------------------------------------
# The primitive
#
# params: jaxpr (one device's program, no consts), mesh, in_names / out_names (per operand and
# result, per dimension: the mesh axes splitting it, a tuple as long as its rank), name.

shard_map_p = Primitive("shard_map", multiple_results=True, higher_order=True)
# Its blocks run on its mesh's devices, wherever its operands are.
shard_map_p.places_itself = True

Names = tuple[tuple[str, ...], ...]


def _count(entry: tuple[str, ...], mesh: Mesh) -> int:
    return math.prod(mesh.shape[name] for name in entry)


def _global_aval(aval: ShapedArray, names: Names, mesh: Mesh) -> ShapedArray:
    return aval.update(shape=tuple(s * _count(e, mesh) for s, e in zip(aval.shape, names)))


def _block_aval(aval: ShapedArray, names: Names, mesh: Mesh) -> ShapedArray:
    return aval.update(shape=tuple(s // _count(e, mesh) for s, e in zip(aval.shape, names)))


def _unmentioned(names: Names, mesh: Mesh) -> tuple[str, ...]:
    """The mesh axes along which a value split as `names` is the same on every device."""
    mentioned = {name for entry in names for name in entry}
    return tuple(name for name in mesh.axis_names if name not in mentioned)


def _spec(names: Names) -> PartitionSpec:
    """The spec splitting dimensions as `names` says, without trailing None entries."""
    entries = [None if not e else e[0] if len(e) == 1 else e for e in names]
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


@shard_map_p.def_abstract_eval
def _shard_map_abstract_eval(*avals, jaxpr: ClosedJaxpr, mesh, out_names, **params):
    return [_global_aval(a, n, mesh) for a, n in zip(jaxpr.out_avals, out_names)]


@shard_map_p.def_weak_type
def _shard_map_weak_type(weak_flags, *, jaxpr: ClosedJaxpr, **params) -> list[bool]:
    return [a.weak_type for a in jaxpr.out_avals]


def _slices(names: Names, mesh: Mesh, coords: dict, block: tuple[int, ...]) -> tuple:
    index = block_index(names, mesh, coords, len(block))
    return tuple(slice(k * b, (k + 1) * b) for k, b in zip(index, block))


def _device_operands(args, in_names, mesh: Mesh, devices: list) -> list[list]:
    """Each device's block of every operand: views of the host value, copied to a GPU."""
    operands: list[list] = [[] for _ in devices]
    for x, names in zip(args, in_names):
        host = np.asarray(to_host(x)._value)
        block = block_shape(host.shape, names, mesh, "a shard_map operand")
        for device_operands, coords, device in zip(operands, mesh_coords(mesh), devices):
            value = host[_slices(names, mesh, coords, block)]
            value = value[()] if value.ndim == 0 else value
            if isinstance(device, GpuDevice):
                value = place(value, device)
            device_operands.append(Array(value, x.weak_type))
    return operands


def _assembled(blocks: list[Array], names: Names, mesh: Mesh, devices: list) -> Array:
    """The whole result from the devices' blocks, each part read from the device at position
    0 along the axes that `names` leaves out; it records its layout."""
    values = [np.asarray(to_host(b)._value) for b in blocks]
    block = values[0].shape
    whole = np.empty(tuple(s * _count(e, mesh) for s, e in zip(block, names)), values[0].dtype)
    unmentioned = _unmentioned(names, mesh)
    for value, coords in zip(values, mesh_coords(mesh)):
        if not any(coords[name] for name in unmentioned):
            whole[_slices(names, mesh, coords, block)] = value
    out = Array(whole[()] if whole.ndim == 0 else whole, blocks[0].weak_type)
    if isinstance(devices[0], GpuDevice):
        out = put_on_gpu(out, devices[0])
    out._sharding = NamedSharding(mesh, _spec(names))
    return out


@shard_map_p.def_impl
def _shard_map_impl(*args, jaxpr, mesh, in_names, out_names, name):
    devices = list(mesh.devices.flat)
    if isinstance(devices[0], GpuDevice):
        runs = [_device_executable(jaxpr, d.backend, d) for d in devices]
    else:
        runs = [_device_executable(jaxpr, config.jit_backend)] * len(devices)
    device_args = _device_operands(args, in_names, mesh, devices)
    outs = parallel.run_on_devices(runs, device_args, devices, tuple(mesh.shape.items()))
    return [
        _assembled([device_outs[k] for device_outs in outs], names, mesh, devices)
        for k, names in enumerate(out_names)
    ]


@shard_map_p.def_jvp
def _shard_map_jvp(primals, tangents, *, jaxpr, mesh, in_names, out_names, name, **params):
    nonzero = tuple(type(t) is not Zero for t in tangents)
    jvp_closed, out_nonzero = _jvp_program(jaxpr, nonzero)
    outs = shard_map_p.bind(
        *primals,
        *[t for t in tangents if type(t) is not Zero],
        jaxpr=jvp_closed,
        mesh=mesh,
        in_names=in_names + tuple(n for n, nz in zip(in_names, nonzero) if nz),
        out_names=out_names + tuple(n for n, nz in zip(out_names, out_nonzero) if nz),
        name=f"jvp({name})",
        **params,
    )
    num_out = len(jaxpr.out_avals)
    tangent_outs = iter(outs[num_out:])
    return outs[:num_out], [
        next(tangent_outs) if nz else Zero(tangent_aval(_global_aval(aval, n, mesh)))
        for nz, aval, n in zip(out_nonzero, jaxpr.out_avals, out_names)
    ]


@caches.program_cache
def _transpose_program(
    jaxpr: ClosedJaxpr,
    undefined: tuple[bool, ...],
    ct_nonzero: tuple[bool, ...],
    in_names: tuple[Names, ...],
    out_names: tuple[Names, ...],
    mesh: Mesh,
) -> ClosedJaxpr:
    """One device's (defined operands, nonzero cotangents) -> cotangents of the undefined
    operands. A result read from position 0 along the axes its spec leaves out gets its
    cotangent on those devices only; an operand the same along some axes gets the sum of its
    cotangents over them."""
    in_avals, out_avals = jaxpr.in_avals, jaxpr.out_avals
    defined_avals = [a for a, u in zip(in_avals, undefined) if not u]
    ct_avals = [tangent_aval(a) for a, nz in zip(out_avals, ct_nonzero) if nz]

    def transposed(*args):
        defined, cts = iter(args[: len(defined_avals)]), iter(args[len(defined_avals) :])
        operands = [UndefinedPrimal(a) if u else next(defined) for a, u in zip(in_avals, undefined)]
        cts_out = []
        for aval, nz, names in zip(out_avals, ct_nonzero, out_names):
            if not nz:
                cts_out.append(Zero(tangent_aval(aval)))
                continue
            ct = next(cts)
            unmentioned = _unmentioned(names, mesh)
            if unmentioned:
                first = elementwise.eq(axis_index_p.bind(axis_name=unmentioned), 0)
                ct = elementwise.mul(ct, elementwise.convert_element_type(first, ct.dtype))
            cts_out.append(ct)
        cts_in = backward_pass(jaxpr.jaxpr, jaxpr.consts, operands, cts_out)
        outs = []
        for ct, u, names in zip(cts_in, undefined, in_names):
            if u:
                unmentioned = _unmentioned(names, mesh)
                ct = instantiate(ct)
                outs.append(
                    psum_p.bind(ct, axis_name=unmentioned, axis_index_groups=None)
                    if unmentioned
                    else ct
                )
        return outs

    closed, _ = trace_to_jaxpr(transposed, defined_avals + ct_avals, "transpose of a shard_map")
    return closed


@shard_map_p.def_transpose
def _shard_map_transpose(cotangents, *operands, jaxpr, mesh, in_names, out_names, name, **params):
    undefined = tuple(is_undefined(op) for op in operands)
    ct_nonzero = tuple(type(ct) is not Zero for ct in cotangents)
    transposed = _transpose_program(jaxpr, undefined, ct_nonzero, in_names, out_names, mesh)
    cts = shard_map_p.bind(
        *[op for op in operands if not is_undefined(op)],
        *[ct for ct in cotangents if type(ct) is not Zero],
        jaxpr=transposed,
        mesh=mesh,
        in_names=tuple(n for n, u in zip(in_names, undefined) if not u)
        + tuple(n for n, nz in zip(out_names, ct_nonzero) if nz),
        out_names=tuple(n for n, u in zip(in_names, undefined) if u),
        name=f"transpose({name})",
        **params,
    )
    cts = iter(cts)
    return [next(cts) if u else None for u in undefined]


@shard_map_p.def_batch
def _shard_map_batch(values, dims, *, jaxpr, in_names, out_names, name, **params):
    """The batch axis goes first, split over no mesh axis, so each device's program is the
    program batched along its axis 0."""
    size = batching.batch_size(values, dims)
    values = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(values, dims)]
    in_batched = tuple(d is not None for d in dims)
    axis_name = batching.current_axis_name()
    with parallel.axes_bound(tuple(params["mesh"].shape.items()), f"vmap of shard_map({name})"):
        batched, out_batched = _batched_program(jaxpr, in_batched, size, axis_name)
    outs = shard_map_p.bind(
        *values,
        jaxpr=batched,
        in_names=tuple(((),) + n if b else n for n, b in zip(in_names, in_batched)),
        out_names=tuple(((),) + n if b else n for n, b in zip(out_names, out_batched)),
        name=f"vmap({name})",
        **params,
    )
    return outs, [0 if b else None for b in out_batched]


@caches.program_cache
def _split_with_stacked_residuals(jaxpr: ClosedJaxpr, unknowns: tuple[bool, ...]):
    """jit's split of one device's program, its residuals given a leading axis of length 1 in
    the known part and stripped of it in the unknown part: across the mesh they are then one
    array stacked along an axis split over every mesh axis."""
    known, unknown, num_residuals, out_unknown = _split_program(jaxpr, unknowns)
    num_known_out = len(known.out_avals) - num_residuals

    def stacking(*args):
        outs = eval_jaxpr(known.jaxpr, known.consts, *args)
        residuals = outs[num_known_out:]
        return outs[:num_known_out] + [shapes.expand_dims(r, (0,)) for r in residuals]

    def unstacking(*args):
        residuals = [shapes.squeeze(r, (0,)) for r in args[:num_residuals]]
        return eval_jaxpr(unknown.jaxpr, unknown.consts, *residuals, *args[num_residuals:])

    stacked_avals = [a.update(shape=(1,) + a.shape) for a in unknown.in_avals[:num_residuals]]
    known, _ = trace_to_jaxpr(stacking, known.in_avals, "known part of a shard_map")
    unknown, _ = trace_to_jaxpr(
        unstacking,
        stacked_avals + list(unknown.in_avals[num_residuals:]),
        "unknown part of a shard_map",
    )
    residual_ranks = tuple(len(a.shape) for a in stacked_avals)
    return known, unknown, residual_ranks, out_unknown


def _shard_map_partial_eval(trace: PartialEvalTrace, args: Sequence, params: dict) -> list:
    """The known part runs now as one shard_map; the unknown part is staged as another,
    reading the known part's residuals."""
    jaxpr, mesh = params["jaxpr"], params["mesh"]
    in_names, out_names = params["in_names"], params["out_names"]
    unknowns = tuple(trace.is_unknown(a) for a in args)
    known, unknown, residual_ranks, out_unknown = _split_with_stacked_residuals(jaxpr, unknowns)
    residual_names = tuple((mesh.axis_names,) + ((),) * (r - 1) for r in residual_ranks)
    known_params = dict(
        params,
        jaxpr=known,
        in_names=tuple(n for n, u in zip(in_names, unknowns) if not u),
        out_names=tuple(n for n, u in zip(out_names, out_unknown) if not u) + residual_names,
    )
    with core.set_current_trace(trace.parent):
        known_outs = shard_map_p.bind(*[a for a, u in zip(args, unknowns) if not u], **known_params)
    num_known_out = out_unknown.count(False)
    if not unknown.eqns and not any(out_unknown):
        return known_outs
    unknown_params = dict(
        params,
        jaxpr=unknown,
        in_names=residual_names + tuple(n for n, u in zip(in_names, unknowns) if u),
        out_names=tuple(n for n, u in zip(out_names, out_unknown) if u),
    )
    unknown_args = known_outs[num_known_out:] + [a for a, u in zip(args, unknowns) if u]
    staged = StagingTrace.process_primitive(trace, shard_map_p, unknown_args, unknown_params)
    known_iter, staged_iter = iter(known_outs[:num_known_out]), iter(staged)
    return [next(staged_iter) if u else next(known_iter) for u in out_unknown]


shard_map_p.partial_eval = _shard_map_partial_eval
result_layout_rules[shard_map_p] = lambda eqn, k: NamedSharding(
    eqn.params["mesh"], _spec(eqn.params["out_names"][k])
)


# ---------------------------------------------------------------------------------------------
# The replication check


def _axis_names(axis_name) -> frozenset:
    return frozenset(axis_name if isinstance(axis_name, tuple) else (axis_name,))


# Collectives whose result is the same along their axes (unless they combine groups of the
# axis's positions, each group its own), and those whose result differs.
_SAME_ALONG = (psum_p, pmax_p, pmin_p, all_gather_p, pbroadcast_p)
_DIFFERS_ALONG = (axis_index_p, ppermute_p, psum_scatter_p, all_to_all_p)


def _makes_same(eqn) -> bool:
    return eqn.primitive in _SAME_ALONG and eqn.params.get("axis_index_groups") is None


def _makes_differ(eqn) -> bool:
    return eqn.primitive in _DIFFERS_ALONG or (
        eqn.primitive in _SAME_ALONG and eqn.params.get("axis_index_groups") is not None
    )


def _sub_jaxprs(params: dict):
    for value in params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, Jaxpr):
                yield item


def _axes_made_different(jaxpr: Jaxpr) -> frozenset:
    """The axes of every collective in `jaxpr` (and the programs inside it) whose result
    differs along them."""
    axes: frozenset = frozenset()
    for eqn in jaxpr.eqns:
        if _makes_differ(eqn):
            axes |= _axis_names(eqn.params["axis_name"])
        for inner in _sub_jaxprs(eqn.params):
            axes |= _axes_made_different(inner)
    return axes


def _union(first: list[frozenset], second: list[frozenset]) -> list[frozenset]:
    return [a | b for a, b in zip(first, second)]


def _loop_fixpoint(carry: list[frozenset], step: Callable) -> list[frozenset]:
    """The axes a loop's carry may differ along after any number of iterations: its initial
    axes grown by `step` (one iteration's result axes, from the carry's) until they settle,
    which they do, as they only grow and the mesh has finitely many."""
    while True:
        grown = _union(carry, step(carry))
        if grown == carry:
            return carry
        carry = grown


def _cond_varying(eqn, in_varying: list[frozenset]) -> list[frozenset]:
    """Any branch may run, and the devices disagree on which where the index differs."""
    index, operands = in_varying[0], in_varying[1:]
    outs = [index] * len(eqn.outvars)
    for branch in eqn.params["branches"]:
        outs = _union(outs, _varying_axes(branch.jaxpr, operands))
    return outs


def _while_varying(eqn, in_varying: list[frozenset]) -> list[frozenset]:
    """The carry, where the predicate differing means the devices' trip counts may too."""
    params = eqn.params
    cond_end = params["cond_nconsts"]
    body_end = cond_end + params["body_nconsts"]
    cond_consts, body_consts = in_varying[:cond_end], in_varying[cond_end:body_end]

    def step(carry):
        (predicate,) = _varying_axes(params["cond_jaxpr"].jaxpr, cond_consts + carry)
        body = _varying_axes(params["body_jaxpr"].jaxpr, body_consts + carry)
        return [axes | predicate for axes in body]

    return _loop_fixpoint(in_varying[body_end:], step)


def _scan_varying(eqn, in_varying: list[frozenset]) -> list[frozenset]:
    params = eqn.params
    body = params["jaxpr"].jaxpr
    consts_end = params["num_consts"]
    carry_end = consts_end + params["num_carry"]
    consts, xs = in_varying[:consts_end], in_varying[carry_end:]

    def step(carry):
        return _varying_axes(body, consts + carry + xs)[: len(carry)]

    carry = _loop_fixpoint(in_varying[consts_end:carry_end], step)
    return carry + _varying_axes(body, consts + carry + xs)[len(carry) :]


_CONTROL_FLOW = {"cond": _cond_varying, "while": _while_varying, "scan": _scan_varying}


def _eqn_varying(eqn, in_varying: list[frozenset]) -> list[frozenset]:
    """The axes each result of an equation holding programs may differ along: followed into
    control flow and into a call of one program on the equation's operands (checkpoint, a
    custom derivative's function); otherwise bounded by the operands' axes and those its
    collectives make different."""
    rule = _CONTROL_FLOW.get(eqn.primitive.name)
    if rule is not None:
        return rule(eqn, in_varying)
    programs = list(_sub_jaxprs(eqn.params))
    if (
        len(programs) == 1
        and len(programs[0].invars) == len(eqn.invars)
        and len(programs[0].outvars) == len(eqn.outvars)
    ):
        return _varying_axes(programs[0], in_varying)
    axes = frozenset().union(*in_varying)
    for inner in programs:
        axes |= _axes_made_different(inner)
    return [axes] * len(eqn.outvars)


def _varying_axes(jaxpr: Jaxpr, in_varying: list[frozenset]) -> list[frozenset]:
    """Per result of one device's program, the axes along which it may differ between
    devices."""
    varying = dict(zip(jaxpr.invars, in_varying))

    def read(v) -> frozenset:
        return varying.get(v, frozenset()) if type(v) is Var else frozenset()

    for eqn in jaxpr.eqns:
        operands = [read(v) for v in eqn.invars]
        if any(True for _ in _sub_jaxprs(eqn.params)):
            outs = _eqn_varying(eqn, operands)
        else:
            axes = frozenset().union(*operands)
            if _makes_same(eqn):
                axes -= _axis_names(eqn.params["axis_name"])
            elif _makes_differ(eqn):
                axes |= _axis_names(eqn.params["axis_name"])
            outs = [axes] * len(eqn.outvars)
        varying.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _check_replication(jaxpr: ClosedJaxpr, in_names, out_names, out_specs, mesh, name) -> None:
    """Refuse a result that may differ along a mesh axis its spec leaves out; `out_specs`
    holds (where the result is in the output, its spec)."""
    from funcgrad.compiler import passes

    closed = passes.inline_calls(jaxpr)
    in_varying = [frozenset(a for e in names for a in e) for names in in_names]
    outs = _varying_axes(closed.jaxpr, in_varying)
    for (path, spec), names, axes in zip(out_specs, out_names, outs):
        left_out = [a for a in _unmentioned(names, mesh) if a in axes]
        if left_out:
            raise ValueError(
                f"shard_map({name}): out_specs for {_output(path)} is {spec}, which "
                f"leaves out mesh axis {', '.join(map(repr, left_out))}, so the output must be "
                f"the same on every device along it; but it may differ along it (it depends on "
                f"a value split over it, or on axis_index, ppermute, psum_scatter, all_to_all "
                f"or a collective over axis_index_groups over it). Reduce or gather it over "
                f"that axis (psum, pmean, all_gather), name the axis in out_specs, or pass "
                f"check_vma=False to trust that it is the same"
            )


# ---------------------------------------------------------------------------------------------
# The transform


def _is_spec(x: Any) -> bool:
    return isinstance(x, PartitionSpec)


def _is_spec_or_none(x: Any) -> bool:
    return x is None or isinstance(x, PartitionSpec)


def _static_key(values: list) -> tuple | None:
    """The cache key of the arguments passed as they are (a None in_spec): each value with its
    type; None where one cannot be hashed (an array), whose call is traced anew."""
    key = tuple(_typed_static_key(v) for v in values)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _output(path: str) -> str:
    return f"output{path}" if path else "the output"


def _names_for(spec: Any, mesh: Mesh, rank: int, what: str) -> Names:
    names = check_spec(spec, mesh, what)
    if len(names) > rank:
        raise ValueError(
            f"{what} is {spec}, with {len(names)} entries, but the value has rank {rank}; a "
            "spec has at most one entry per dimension"
        )
    return names + ((),) * (rank - len(names))


class ShardMapped:
    """A function run on every device of a mesh: call it with whole arrays, which each device
    sees split as `in_specs` say; results are assembled as `out_specs` say."""

    def __init__(
        self, fun: Callable, mesh: Mesh | None, in_specs: Any, out_specs: Any, check_vma: bool
    ):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.name = function_name(fun)
        self.mesh = mesh
        self.in_specs = in_specs
        self.out_specs = out_specs
        self.check_vma = bool(check_vma)
        self._cache: dict = {}
        caches.track(self)

    def clear_cache(self) -> None:
        self._cache.clear()

    def _mesh(self) -> Mesh:
        mesh = self.mesh if self.mesh is not None else get_mesh()
        if mesh is None:
            raise ValueError(
                f"shard_map({self.name}) has no mesh: pass mesh=, or call it within `with "
                "mesh:` or after set_mesh(mesh)"
            )
        if not isinstance(mesh, Mesh):
            raise TypeError(f"shard_map({self.name}): mesh must be a Mesh, got {mesh!r}")
        if distributed.process_count() > 1 and len(mesh.local_devices) != mesh.size:
            raise NotImplementedError(
                f"shard_map({self.name}): {mesh} holds other processes' devices; a shard_map "
                "runs on one process's devices"
            )
        return mesh

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(
                f"shard_map({self.name}) takes positional arguments only (in_specs matches "
                f"them), got keyword arguments {sorted(kwargs)}"
            )
        mesh = self._mesh()
        path_leaves, in_tree = tree_util.tree_flatten_with_path(args)
        specs = broadcast_prefix(
            self.in_specs,
            args,
            _is_spec_or_none,
            f"shard_map({self.name}) in_specs",
            "PartitionSpec",
        )
        # A None spec passes its arguments to the function as they are, on every device.
        passed = tuple(spec is None for spec in specs)
        static = [x for (_, x), p in zip(path_leaves, passed) if p]
        leaves, in_names = [], []
        for (path, x), spec in zip(path_leaves, specs):
            if spec is None:
                continue
            x = x if type(x) is Array or isinstance(x, core.Tracer) else asarray(x)
            aval = core.get_aval(x)
            what = f"shard_map({self.name}): in_specs for args{tree_util.keystr(path)}"
            names = _names_for(spec, mesh, aval.ndim, what)
            block_shape(aval.shape, names, mesh, what)
            leaves.append(x)
            in_names.append(names)
        avals = [core.get_aval(x) for x in leaves]
        block_avals = tuple(_block_aval(a, n, mesh) for a, n in zip(avals, in_names))
        static_key = _static_key(static)
        key = (
            in_tree,
            passed,
            static_key,
            block_avals,
            tuple(in_names),
            mesh,
            config.default_matmul_precision,
            config.enable_x64,
            config.numpy_dtype_promotion,
            config.debug_key_reuse,
        )
        entry = self._cache.get(key)
        if entry is None:
            entry = self._trace(mesh, in_tree, passed, static, block_avals, tuple(in_names))
            closes_over_tracers = any(isinstance(c, core.Tracer) for c in entry[1])
            if static_key is not None and not closes_over_tracers:
                self._cache[key] = entry
        jaxpr, consts, out_tree, out_names = entry
        outs = shard_map_p.bind(
            *consts,
            *leaves,
            jaxpr=jaxpr,
            mesh=mesh,
            in_names=tuple(((),) * core.get_aval(c).ndim for c in consts) + tuple(in_names),
            out_names=out_names,
            name=self.name,
        )
        return tree_util.tree_unflatten(out_tree, outs)

    def _trace(self, mesh: Mesh, in_tree, passed, static, block_avals, in_names):
        def flat_fun(*flat):
            staged, given = iter(flat), iter(static)
            leaves = [next(given) if p else next(staged) for p in passed]
            return self.fun(*tree_util.tree_unflatten(in_tree, leaves))

        with parallel.axes_bound(tuple(mesh.shape.items()), f"shard_map({self.name})"):
            closed, out_tree = trace_to_jaxpr(flat_fun, block_avals, f"shard_map({self.name})")
        out_names, out_specs = self._out_names(mesh, closed, out_tree)
        hoisted = _hoisted(closed)
        if self.check_vma:
            consts_names = [((),) * core.get_aval(c).ndim for c in closed.consts]
            _check_replication(
                hoisted, consts_names + list(in_names), out_names, out_specs, mesh, self.name
            )
        return hoisted, closed.consts, out_tree, out_names

    def _out_names(self, mesh: Mesh, closed: ClosedJaxpr, out_tree):
        placeholder = tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
        paths = [tree_util.keystr(p) for p, _ in tree_util.tree_leaves_with_path(placeholder)]
        specs = broadcast_prefix(
            self.out_specs,
            placeholder,
            _is_spec,
            f"shard_map({self.name}) out_specs",
            "PartitionSpec",
            "the output",
        )
        out_names = tuple(
            _names_for(
                spec, mesh, aval.ndim, f"shard_map({self.name}): out_specs for {_output(path)}"
            )
            for path, spec, aval in zip(paths, specs, closed.out_avals)
        )
        return out_names, list(zip(paths, specs))

    def __repr__(self) -> str:
        return f"<shard_mapped function {self.name}>"


def shard_map(
    f: Callable | None = None,
    /,
    *,
    out_specs: Any,
    in_specs: Any,
    mesh: Mesh | None = None,
    axis_names: Any = frozenset(),
    check_vma: bool = True,
) -> Any:
    """Run `f` on every device of `mesh` (by default the current one, `with mesh:`), each on
    its block of the arguments as `in_specs` split them (a PartitionSpec per argument, or a
    tree prefix of the arguments), and assemble the blocks of the results as `out_specs` say.
    Inside `f`, collectives name the mesh's axes. A mesh axis that a result's spec leaves out
    means the result is the same on every device along it; `check_vma` checks that it is.

    Used without `f`, it returns a decorator."""
    if axis_names and mesh is not None and set(axis_names) != set(mesh.axis_names):
        raise NotImplementedError(
            f"shard_map: axis_names={set(axis_names)} maps over part of the mesh's axes "
            f"{mesh.axis_names}; funcgrad maps over all of them"
        )
    if f is None:
        return lambda g: shard_map(
            g,
            out_specs=out_specs,
            in_specs=in_specs,
            mesh=mesh,
            axis_names=axis_names,
            check_vma=check_vma,
        )
    if not callable(f):
        raise TypeError(f"shard_map expects a callable, got {type(f).__name__}")
    return ShardMapped(f, mesh, in_specs, out_specs, check_vma)
