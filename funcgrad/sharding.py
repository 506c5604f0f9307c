"""Meshes of devices and the shardings that lay arrays out over them, with JAX's names.

A `Mesh` arranges devices in an n-dimensional grid with named axes; a `PartitionSpec` says,
for each dimension of an array, which mesh axes split it (None: none, the dimension is whole
on every device); a `NamedSharding` pairs the two. `shard_map` runs a function on every
device of a mesh, each on its block of the arguments as their specs split them, and the
collectives (`lax.psum`, `all_gather`, ...) name the mesh's axes.

funcgrad has no partitioner that rewrites whole-array programs for a mesh: a sharding is
carried by the arrays that `device_put`, `shard_map` and jit's `out_shardings` make, so that
`.sharding` and `.addressable_shards` describe their layout, and `with_sharding_constraint`
(`lax/sharding_constraint.py`) records a layout without moving data. Virtual CPU devices
share the host's memory, so their arrays are whole on the host and the shards are views of
them.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from funcgrad import core, tree_util
from funcgrad.array import Array, Device, GpuDevice, Shard, put_on_gpu, to_host

__all__ = [
    "AxisType",
    "Mesh",
    "NamedSharding",
    "PartitionSpec",
    "Sharding",
    "SingleDeviceSharding",
    "get_mesh",
    "make_mesh",
    "make_single_device_sharding",
    "reshard",
    "set_mesh",
]


class _CurrentMesh(threading.local):
    mesh: Mesh | None = None


_current = _CurrentMesh()


class AxisType(enum.Enum):
    """How a program treats a mesh axis. Without a partitioner funcgrad records the types
    (`Mesh.axis_types`) and treats every axis alike: shard_map maps over the axes it is given,
    and layouts are recorded on arrays, whatever the type."""

    Auto = enum.auto()
    Explicit = enum.auto()
    Manual = enum.auto()

    def __repr__(self) -> str:
        return self.name


def _axis_types(axis_types: Any, names: tuple[str, ...]) -> tuple[AxisType, ...]:
    if axis_types is None:
        return (AxisType.Auto,) * len(names)
    types = (axis_types,) if isinstance(axis_types, AxisType) else tuple(axis_types)
    if not all(isinstance(t, AxisType) for t in types):
        raise TypeError(f"Mesh: axis_types must be AxisType members, got {axis_types!r}")
    if len(types) != len(names):
        raise ValueError(
            f"Mesh: {len(types)} axis_types {types} for {len(names)} axis names {names}; give "
            "one type per axis"
        )
    return types


class Mesh:
    """Devices in a grid whose axes have names: `Mesh(np.array(devices).reshape(2, 4),
    ('data', 'model'))`. Within `with mesh:` it is the mesh that `shard_map` and specs without
    one use."""

    def __init__(self, devices: Any, axis_names: str | Sequence[str], axis_types: Any = None):
        grid = np.empty(np.shape(devices), dtype=object)
        grid[...] = devices if isinstance(devices, np.ndarray) else _nested_lists(devices)
        names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
        if grid.ndim != len(names):
            raise ValueError(
                f"Mesh: the devices form an array of shape {grid.shape} ({grid.ndim} axes) but "
                f"{len(names)} axis names were given ({names!r}); give one name per axis"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"Mesh: the axis names {names!r} repeat a name")
        if grid.size == 0 or not all(isinstance(d, Device) for d in grid.flat):
            raise TypeError(
                "Mesh takes a non-empty array of devices (entries of funcgrad.devices()), got "
                f"{devices!r}"
            )
        if len(set(map(id, grid.flat))) != grid.size:
            raise ValueError(f"Mesh: a device appears twice in {list(grid.flat)}")
        if len({isinstance(d, GpuDevice) and d.backend for d in grid.flat}) > 1:
            raise ValueError(
                f"Mesh: the devices mix kinds ({list(grid.flat)}); a mesh holds virtual CPU "
                "devices or GPUs"
            )
        grid.flags.writeable = False
        self.devices = grid
        self.axis_names = names
        self.axis_types = _axis_types(axis_types, names)
        self._previous: list[Mesh | None] = []

    @property
    def shape(self) -> dict[str, int]:
        """Each axis name with its size, in the mesh's order."""
        return dict(zip(self.axis_names, self.devices.shape))

    @property
    def axis_sizes(self) -> tuple[int, ...]:
        return self.devices.shape

    @property
    def size(self) -> int:
        return self.devices.size

    @property
    def device_ids(self) -> np.ndarray:
        return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

    @property
    def local_devices(self) -> list[Device]:
        from funcgrad import distributed

        return [d for d in self.devices.flat if d.process_index == distributed.process_index()]

    @property
    def empty(self) -> bool:
        return False

    def __enter__(self) -> Mesh:
        self._previous.append(_current.mesh)
        _current.mesh = self
        return self

    def __exit__(self, *exc) -> None:
        _current.mesh = self._previous.pop()

    def _key(self) -> tuple:
        return (self.axis_names, self.devices.shape, tuple(map(id, self.devices.flat)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mesh) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        axes = ", ".join(f"{name!r}: {size}" for name, size in self.shape.items())
        return f"Mesh({axes})"


def _nested_lists(devices: Any) -> Any:
    """`devices` as nested lists (so a NumPy object array takes the devices, not their parts)."""
    if isinstance(devices, Device):
        return devices
    return [_nested_lists(d) for d in devices]


def make_mesh(
    axis_shapes: Sequence[int],
    axis_names: Sequence[str],
    axis_types: Any = None,
    *,
    devices: Sequence[Device] | None = None,
) -> Mesh:
    """A mesh of the given shape over the first devices of `devices` (by default every device
    of the default platform)."""
    from funcgrad.devices import devices as all_devices

    shape = tuple(axis_shapes)
    if not all(isinstance(s, int | np.integer) and s > 0 for s in shape):
        raise ValueError(f"make_mesh: axis_shapes must be positive integers, got {axis_shapes!r}")
    available = list(all_devices() if devices is None else devices)
    count = math.prod(shape)
    if count > len(available):
        raise ValueError(
            f"make_mesh: a mesh of shape {shape} needs {count} devices but only "
            f"{len(available)} are available; set FUNCGRAD_NUM_CPU_DEVICES (or config "
            "num_cpu_devices) to at least that, or make a smaller mesh"
        )
    grid = np.empty(count, dtype=object)
    grid[:] = available[:count]
    return Mesh(grid.reshape(shape), axis_names, axis_types)


class _MeshSetting:
    """The current mesh from `set_mesh` on, until the block it opens ends."""

    def __init__(self, mesh: Mesh | None):
        self.previous = _current.mesh
        _current.mesh = mesh

    def __enter__(self) -> Mesh | None:
        return _current.mesh

    def __exit__(self, *exc) -> None:
        _current.mesh = self.previous


def set_mesh(mesh: Mesh | None) -> _MeshSetting:
    """Make `mesh` the current mesh of this thread: from now on, or, used as `with
    set_mesh(mesh):`, until the block ends."""
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(f"set_mesh takes a Mesh, got {type(mesh).__name__}")
    return _MeshSetting(mesh)


def get_mesh() -> Mesh | None:
    """The current mesh (`with mesh:` or `set_mesh`), or None."""
    return _current.mesh


# ---------------------------------------------------------------------------------------------
# Partition specs


class PartitionSpec:
    """How an array's dimensions split over mesh axes, one entry per leading dimension: a mesh
    axis name, a tuple of names (the dimension split over their product, row-major), or None
    (not split). Dimensions past the spec's length are not split, and a dimension split over
    no axis is the same on every device along the axes the spec leaves out."""

    UNCONSTRAINED = "unconstrained"

    __slots__ = ("_partitions",)

    def __init__(self, *partitions: Any):
        normal = []
        for entry in partitions:
            if isinstance(entry, list):
                entry = tuple(entry)
            if entry == self.UNCONSTRAINED:
                raise NotImplementedError(
                    "PartitionSpec.UNCONSTRAINED is not supported: funcgrad has no partitioner "
                    "to choose a layout; name the axes, or None"
                )
            if not (entry is None or isinstance(entry, str | tuple)):
                raise TypeError(
                    f"PartitionSpec entries are mesh axis names, tuples of names or None; "
                    f"got {entry!r}"
                )
            normal.append(entry)
        self._partitions = tuple(normal)

    def __iter__(self):
        return iter(self._partitions)

    def __len__(self) -> int:
        return len(self._partitions)

    def __getitem__(self, index):
        return self._partitions[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionSpec) and self._partitions == other._partitions

    def __hash__(self) -> int:
        return hash(self._partitions)

    def __repr__(self) -> str:
        return f"PartitionSpec({', '.join(map(repr, self._partitions))})"


P = PartitionSpec


def spec_names(spec: PartitionSpec) -> tuple[tuple[str, ...], ...]:
    """Per entry of `spec`, the mesh axes splitting that dimension (none for None)."""
    return tuple(() if e is None else (e,) if isinstance(e, str) else e for e in spec)


def check_spec(spec: Any, mesh: Mesh, what: str) -> tuple[tuple[str, ...], ...]:
    """`spec`'s axis names per entry, after checking that it is a PartitionSpec naming axes of
    `mesh`, each at most once."""
    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"{what} must be a PartitionSpec, got {type(spec).__name__} {spec!r}")
    names = spec_names(spec)
    seen: set[str] = set()
    for entry in names:
        for name in entry:
            if name not in mesh.shape:
                raise ValueError(
                    f"{what} is {spec}, which names mesh axis {name!r}, but {mesh} has axes "
                    f"{', '.join(map(repr, mesh.axis_names))}"
                )
            if name in seen:
                raise ValueError(
                    f"{what} is {spec}, which names mesh axis {name!r} twice; a mesh axis "
                    "splits at most one dimension"
                )
            seen.add(name)
    return names


def block_shape(
    shape: tuple[int, ...], names: tuple[tuple[str, ...], ...], mesh: Mesh, what: str
) -> tuple[int, ...]:
    """The shape of each device's block of an array of `shape` split as `names` say, after
    checking that the spec fits the array."""
    if len(names) > len(shape):
        raise ValueError(
            f"{what} has {len(names)} entries but the array has rank {len(shape)} (shape "
            f"{shape}); a spec has at most one entry per dimension"
        )
    block = list(shape)
    for dim, entry in enumerate(names):
        count = math.prod(mesh.shape[name] for name in entry)
        if shape[dim] % count:
            axes = " x ".join(f"{name!r} (size {mesh.shape[name]})" for name in entry)
            raise ValueError(
                f"{what} splits dimension {dim} of the array of shape {shape} over mesh "
                f"{'axis' if len(entry) == 1 else 'axes'} {axes}, but its size {shape[dim]} is "
                f"not a multiple of {count}"
            )
        block[dim] = shape[dim] // count
    return tuple(block)


def block_index(
    names: tuple[tuple[str, ...], ...], mesh: Mesh, coords: dict[str, int], rank: int
) -> tuple[int, ...]:
    """Which block along each dimension the device at mesh position `coords` holds: the
    row-major position of its coordinates along that dimension's axes."""
    index = []
    for dim in range(rank):
        position = 0
        for name in names[dim] if dim < len(names) else ():
            position = position * mesh.shape[name] + coords[name]
        index.append(position)
    return tuple(index)


def mesh_coords(mesh: Mesh) -> list[dict[str, int]]:
    """Each device's position along every axis, in the mesh's row-major order."""
    return [dict(zip(mesh.axis_names, position)) for position in np.ndindex(*mesh.devices.shape)]


# ---------------------------------------------------------------------------------------------
# Shardings


class Sharding:
    """Where the parts of an array live."""

    @property
    def device_set(self) -> set[Device]:
        raise NotImplementedError

    @property
    def addressable_devices(self) -> set[Device]:
        return self.device_set

    @property
    def memory_kind(self) -> None:
        return None


class SingleDeviceSharding(Sharding):
    """The whole array on one device."""

    def __init__(self, device: Device):
        self.device = device

    @property
    def device_set(self) -> set[Device]:
        return {self.device}

    @property
    def num_devices(self) -> int:
        return 1

    @property
    def is_fully_replicated(self) -> bool:
        return True

    def shard_shape(self, global_shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(global_shape)

    def devices_indices_map(self, global_shape: tuple[int, ...]) -> dict[Device, tuple]:
        """The device with the slices of the array it holds: all of it."""
        return {self.device: tuple(slice(0, n) for n in global_shape)}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SingleDeviceSharding) and other.device is self.device

    def __hash__(self) -> int:
        return hash(id(self.device))

    def __repr__(self) -> str:
        return f"SingleDeviceSharding(device={self.device!r})"


def make_single_device_sharding(
    device: Device, *, memory_kind: str | None = None
) -> SingleDeviceSharding:
    """The sharding that puts whole arrays on `device`. funcgrad's devices have one memory
    each, so `memory_kind` can only be None."""
    if not isinstance(device, Device):
        raise TypeError(
            f"make_single_device_sharding takes a device (an entry of funcgrad.devices()), got "
            f"{type(device).__name__} {device!r}"
        )
    if memory_kind is not None:
        raise ValueError(
            f"make_single_device_sharding: memory_kind {memory_kind!r} is not available; "
            "funcgrad's devices have one memory each (memory_kind None)"
        )
    return SingleDeviceSharding(device)


class NamedSharding(Sharding):
    """An array laid out over `mesh` as `spec` says: each device holds the block its position
    along the named axes picks, and the same block as the devices that differ from it only
    along axes the spec does not name."""

    def __init__(self, mesh: Mesh, spec: PartitionSpec):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"NamedSharding takes a Mesh, got {type(mesh).__name__}")
        self.mesh = mesh
        self.spec = spec
        self._names = check_spec(spec, mesh, "the NamedSharding's spec")

    @property
    def device_set(self) -> set[Device]:
        return set(self.mesh.devices.flat)

    @property
    def num_devices(self) -> int:
        return self.mesh.size

    @property
    def is_fully_replicated(self) -> bool:
        """Whether every device holds the whole array: the spec splits over no axis longer
        than 1."""
        return all(self.mesh.shape[name] == 1 for entry in self._names for name in entry)

    def shard_shape(self, global_shape: tuple[int, ...]) -> tuple[int, ...]:
        return block_shape(tuple(global_shape), self._names, self.mesh, f"spec {self.spec}")

    def devices_indices_map(self, global_shape: tuple[int, ...]) -> dict[Device, tuple]:
        """Each device with the slices of the array it holds."""
        block = self.shard_shape(global_shape)
        rank = len(block)
        return {
            device: tuple(
                slice(k * b, (k + 1) * b)
                for k, b in zip(block_index(self._names, self.mesh, c, rank), block)
            )
            for device, c in zip(self.mesh.devices.flat, mesh_coords(self.mesh))
        }

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NamedSharding)
            and other.mesh == self.mesh
            and spec_names(other.spec) == self._names
        )

    def __hash__(self) -> int:
        return hash((self.mesh, self._names))

    def __repr__(self) -> str:
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"


def resolve(sharding: Any, what: str) -> Sharding:
    """`sharding` as a Sharding: a bare PartitionSpec means one over the current mesh."""
    if isinstance(sharding, PartitionSpec):
        if _current.mesh is None:
            raise ValueError(
                f"{what}: {sharding} needs a mesh; give a NamedSharding(mesh, spec), or set "
                "one with `with mesh:` or set_mesh(mesh)"
            )
        return NamedSharding(_current.mesh, sharding)
    if not isinstance(sharding, Sharding):
        raise TypeError(
            f"{what}: expected a NamedSharding or PartitionSpec, got {type(sharding).__name__} "
            f"{sharding!r}"
        )
    return sharding


def broadcast_prefix(
    prefix: Any, tree: Any, is_leaf, what: str, leaf_kind: str, of: str = "the arguments"
) -> list:
    """One entry of `prefix` per leaf of `tree` (`of` says what the tree is), `prefix` being a
    tree prefix of it whose leaves are those `is_leaf` accepts (`leaf_kind` names them)."""
    if is_leaf(prefix):
        return [prefix] * len(tree_util.tree_leaves(tree))
    leaves = tree_util.tree_leaves(prefix)
    if len(leaves) == 1 and leaves[0] is prefix:
        raise TypeError(f"{what} must hold {leaf_kind}s, got {type(prefix).__name__} {prefix!r}")

    def one_level(x):
        return tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)

    prefix_children, prefix_node = one_level(prefix)
    tree_children, tree_node = one_level(tree)
    if prefix_node != tree_node:
        raise ValueError(
            f"{what} must be a tree prefix of {of}: {prefix!r} does not match the "
            f"structure {tree_util.tree_structure(tree)}"
        )
    return [
        leaf
        for p, t in zip(prefix_children, tree_children)
        for leaf in broadcast_prefix(p, t, is_leaf, what, leaf_kind, of)
    ]


def _is_sharding_or_none(x: Any) -> bool:
    return x is None or isinstance(x, Sharding | PartitionSpec)


def laid_out(x: Array, sharding: Sharding) -> Array:
    """`x` recorded as laid out by `sharding`: on the host (the virtual CPU devices' memory),
    or, for one device, on it."""
    if isinstance(sharding, SingleDeviceSharding):
        return _on_one_device(x, sharding)
    sharding.shard_shape(x.shape)  # (checks the spec fits)
    out = Array(to_host(x)._value, x.weak_type)
    out._sharding = sharding
    return out


def _on_one_device(x: Array, sharding: SingleDeviceSharding) -> Array:
    """`x` whole on `sharding`'s device, no longer laid out over the devices it was (pmap's or
    a mesh's). A virtual CPU device other than the first, where unplaced arrays are, is
    recorded, as the host memory they share cannot tell them apart."""
    if hasattr(x, "_sharding") or hasattr(x, "_shards"):
        x = Array(x._value, x.weak_type)
    if isinstance(sharding.device, GpuDevice):
        return put_on_gpu(x, sharding.device)
    x = to_host(x)
    if sharding.device is not x.device:
        x = Array(x._value, x.weak_type)
        x._sharding = sharding
    return x


def put(x: Any, shardings: Any) -> Any:
    """`device_put` with a sharding (or a tree prefix of shardings) for a pytree of arrays."""
    from funcgrad.array import device_put
    from funcgrad.lax.base import asarray

    leaves, tree = tree_util.tree_flatten(x)
    per_leaf = broadcast_prefix(
        shardings, x, _is_sharding_or_none, "device_put's shardings", "sharding", "its operand"
    )
    outs = []
    for leaf, s in zip(leaves, per_leaf):
        if s is None:
            outs.append(device_put(leaf))
        elif isinstance(leaf, core.Tracer):
            outs.append(_put_traced(leaf, resolve(s, "device_put")))
        else:
            outs.append(laid_out(asarray(leaf), resolve(s, "device_put")))
    return tree_util.tree_unflatten(tree, outs)


def _put_traced(x: core.Tracer, sharding: Sharding) -> Any:
    """`device_put` of a traced value: a layout over a mesh is a sharding constraint; one
    device leaves the value where the program runs, as a program's values all live there."""
    if isinstance(sharding, SingleDeviceSharding):
        return x
    from funcgrad.lax.sharding_constraint import with_sharding_constraint

    return with_sharding_constraint(x, sharding)


def constrained(x: Any, shardings: Any, what: str, of: str) -> Any:
    """`x` laid out as `shardings` say, for jit's in_shardings and out_shardings (`what`,
    which errors name with what `x` is, `of`): checked against the shapes and recorded on
    concrete arrays; traced values pass through. A None sharding leaves its values as they
    are (their layout unspecified)."""
    from funcgrad.lax.base import asarray

    leaves, tree = tree_util.tree_flatten(x)
    per_leaf = broadcast_prefix(shardings, x, _is_sharding_or_none, what, "sharding", of)
    outs = []
    for leaf, s in zip(leaves, per_leaf):
        if s is None:
            outs.append(leaf)
            continue
        sharding = resolve(s, what)
        leaf = leaf if isinstance(leaf, core.Tracer) else asarray(leaf)
        if isinstance(sharding, NamedSharding):
            sharding.shard_shape(core.get_aval(leaf).shape)
        outs.append(leaf if isinstance(leaf, core.Tracer) else laid_out(leaf, sharding))
    return tree_util.tree_unflatten(tree, outs)


def reshard(xs: Any, out_shardings: Any) -> Any:
    """`xs` (a pytree of arrays) laid out as `out_shardings` say (a sharding, a PartitionSpec
    over the current mesh, or a tree prefix of them). Without a partitioner this is
    `with_sharding_constraint`: concrete arrays are laid out anew (as `device_put` does),
    traced ones are constrained."""
    from funcgrad.lax.sharding_constraint import with_sharding_constraint

    return with_sharding_constraint(xs, out_shardings)


def sharding_of(x: Array) -> Sharding:
    """The layout an array records: its NamedSharding, pmap's one row per device, or its
    one device."""
    recorded = getattr(x, "_sharding", None)
    if recorded is not None:
        return recorded
    shards = getattr(x, "_shards", None)
    if shards is None:
        return SingleDeviceSharding(x.device)
    grid = np.empty(len(shards), dtype=object)
    grid[:] = [device for device, _ in shards]
    return NamedSharding(Mesh(grid, ("pmap",)), PartitionSpec("pmap"))


def shards_of(x: Array) -> list[Shard]:
    """Every device's part of a NamedSharding-laid-out array: a view of the host array on
    virtual CPU devices, a copy on a GPU."""
    sharding: NamedSharding = x._sharding
    value = to_host(x)._value
    shards = []
    for device, index in sharding.devices_indices_map(x.shape).items():
        data = Array(np.asarray(value)[index], x.weak_type)
        if isinstance(device, GpuDevice):
            data = put_on_gpu(data, device)
        shards.append(Shard(device, data, index))
    return shards
