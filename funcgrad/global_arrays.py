"""Arrays assembled from parts: `make_array_from_callback` (a block per device, from a
function of its index), `make_array_from_single_device_arrays` (a block per device, given)
and `make_array_from_process_local_data` (the blocks of this process's devices, as one array).

A funcgrad array laid out by a sharding holds its whole value on every process, recorded with
the sharding (`sharding.laid_out`): there is no partitioner that would keep only a process's
blocks. So each process contributes its part, the box of the array its own devices' blocks
cover, and with several processes (`funcgrad.distributed`) every process receives every
other's box with one MPI all-gather and assembles the whole. The devices of a process must
cover a box (as a mesh whose processes own sub-grids makes them), and every process's box
has one shape."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import distributed, dtypes
from funcgrad.array import Array, Device
from funcgrad.sharding import (
    NamedSharding,
    SingleDeviceSharding,
    block_index,
    laid_out,
    mesh_coords,
)


def _check_sharding(sharding, what: str) -> None:
    if not isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        raise TypeError(
            f"{what} takes a NamedSharding or SingleDeviceSharding, got "
            f"{type(sharding).__name__} {sharding!r}"
        )


def _is_local(device: Device) -> bool:
    return device.process_index == distributed.process_index()


def _blocks(sharding, rank: int) -> list[tuple[Device, tuple[int, ...]]]:
    """Each device of the sharding with the position of its block along every dimension."""
    if isinstance(sharding, SingleDeviceSharding):
        return [(sharding.device, (0,) * rank)]
    mesh = sharding.mesh
    names = sharding._names
    return [
        (device, block_index(names, mesh, coords, rank))
        for device, coords in zip(mesh.devices.flat, mesh_coords(mesh))
    ]


def _block_counts(sharding, rank: int) -> tuple[int, ...]:
    """How many blocks the sharding cuts each dimension into."""
    if isinstance(sharding, SingleDeviceSharding):
        return (1,) * rank
    names = sharding._names
    return tuple(
        math.prod(sharding.mesh.shape[n] for n in (names[d] if d < len(names) else ()))
        for d in range(rank)
    )


def _local_box_blocks(sharding, rank: int, what: str) -> tuple[tuple[int, int], ...]:
    """The range of blocks (first, last + 1) along each dimension that this process's devices
    hold, checked to be every block of that box."""
    local = {position for device, position in _blocks(sharding, rank) if _is_local(device)}
    if not local:
        raise ValueError(f"{what}: none of the sharding's devices belongs to this process")
    ranges = tuple((min(p[d] for p in local), max(p[d] for p in local) + 1) for d in range(rank))
    if len(local) != math.prod(stop - start for start, stop in ranges):
        raise ValueError(
            f"{what}: this process's devices hold blocks {sorted(local)}, which do not fill a "
            "box of the array; give a mesh whose processes own sub-grids of it"
        )
    return ranges


def process_box(sharding, global_shape: tuple[int, ...], what: str) -> tuple[slice, ...]:
    """The slices of an array of `global_shape` that this process's devices hold."""
    rank = len(global_shape)
    if isinstance(sharding, NamedSharding):
        sharding.shard_shape(tuple(global_shape))  # (checks the spec fits)
    counts = _block_counts(sharding, rank)
    ranges = _local_box_blocks(sharding, rank, what)
    return tuple(
        slice(start * size // count, stop * size // count)
        for (start, stop), size, count in zip(ranges, global_shape, counts)
    )


def assembled(sharding, global_shape: tuple[int, ...], box: tuple[slice, ...], local, what: str):
    """The whole array, laid out by `sharding`, from this process's `box` of it (`local`) and,
    with several processes, every other process's."""
    local = np.asarray(local)
    if distributed.process_count() == 1:
        whole = local
    else:
        starts = np.array([s.start for s in box], np.int64)
        every_start = distributed.all_gather(starts, what)
        shapes = distributed.all_gather(np.array(local.shape, np.int64), what)
        if (shapes != shapes[0]).any():
            raise ValueError(
                f"{what}: the processes' parts have different shapes "
                f"{[tuple(s) for s in shapes.tolist()]}; every process must give one shape"
            )
        parts = distributed.all_gather(local, what)
        whole = np.empty(global_shape, local.dtype)
        for start, part in zip(every_start, parts):
            whole[tuple(slice(b, b + n) for b, n in zip(start, part.shape))] = part
    return laid_out(Array(whole), sharding)


def make_array_from_process_local_data(sharding, local_data, global_shape=None) -> Array:
    """The array laid out by `sharding` whose part on this process's devices is `local_data`
    (with one process, the whole array). Without `global_shape`, each dimension is
    `local_data`'s times the share of that dimension's blocks this process holds."""
    what = "make_array_from_process_local_data"
    _check_sharding(sharding, what)
    local = np.asarray(local_data)
    dtypes.check_supported(local.dtype)
    rank = local.ndim
    ranges = _local_box_blocks(sharding, rank, what)
    counts = _block_counts(sharding, rank)
    if global_shape is None:
        global_shape = []
        for d, ((start, stop), count) in enumerate(zip(ranges, counts)):
            if local.shape[d] % (stop - start):
                raise ValueError(
                    f"{what}: dimension {d} of the local data (size {local.shape[d]}) does not "
                    f"split into this process's {stop - start} blocks"
                )
            global_shape.append(local.shape[d] // (stop - start) * count)
    global_shape = tuple(int(n) for n in global_shape)
    if len(global_shape) != rank:
        raise ValueError(
            f"{what}: global_shape {global_shape} has another rank than the local data's "
            f"shape {local.shape}"
        )
    box = process_box(sharding, global_shape, what)
    box_shape = tuple(s.stop - s.start for s in box)
    if box_shape != local.shape:
        raise ValueError(
            f"{what}: this process holds the part {box_shape} of an array of shape "
            f"{global_shape}, but the local data has shape {local.shape}"
        )
    return assembled(sharding, global_shape, box, local, what)


def _local_indices(sharding, shape: tuple[int, ...]) -> list[tuple[Device, tuple]]:
    """This process's devices with the index (a tuple of slices) of their blocks."""
    if isinstance(sharding, SingleDeviceSharding):
        index = tuple(slice(None) for _ in shape)
        return [(sharding.device, index)] if _is_local(sharding.device) else []
    indices = sharding.devices_indices_map(tuple(shape))
    return [(device, index) for device, index in indices.items() if _is_local(device)]


def _filled(shape, sharding, blocks: list, what: str, dtype) -> Array:
    """The array from this process's blocks ((index, value) pairs)."""
    shape = tuple(int(n) for n in shape)
    box = process_box(sharding, shape, what)
    values = [np.asarray(v) for _, v in blocks]
    dtype = dtypes.check_supported(dtype if dtype is not None else values[0].dtype)
    local = np.empty(tuple(s.stop - s.start for s in box), dtype)
    offset = [s.start for s in box]
    for (index, _), value in zip(blocks, values):
        within = tuple(
            slice((i.start or 0) - b, (i.start or 0) - b + n)
            for i, b, n in zip(index, offset, value.shape)
        )
        expected = tuple(len(range(*i.indices(n))) for i, n in zip(index, shape))
        if value.shape != expected:
            raise ValueError(
                f"{what}: the block at {index} of an array of shape {shape} has shape "
                f"{expected}, got {value.shape}"
            )
        local[within] = value
    return assembled(sharding, shape, box, local, what)


def make_array_from_callback(
    shape: Sequence[int], sharding, data_callback: Callable, dtype=None
) -> Array:
    """The array of `shape` laid out by `sharding` whose block on each of this process's
    devices is `data_callback(index)`, `index` the block's tuple of slices (called once per
    device, as devices that share a block each ask for it)."""
    what = "make_array_from_callback"
    _check_sharding(sharding, what)
    shape = tuple(int(n) for n in shape)
    blocks = [(index, data_callback(index)) for _, index in _local_indices(sharding, shape)]
    return _filled(shape, sharding, blocks, what, dtype)


def make_array_from_single_device_arrays(
    shape: Sequence[int], sharding, arrays: Sequence, *, dtype=None
) -> Array:
    """The array of `shape` laid out by `sharding` from one array per device of this process,
    in the order of the sharding's devices (the mesh's, row-major), each that device's
    block."""
    what = "make_array_from_single_device_arrays"
    _check_sharding(sharding, what)
    shape = tuple(int(n) for n in shape)
    indices = _local_indices(sharding, shape)
    if len(arrays) != len(indices):
        raise ValueError(
            f"{what}: the sharding has {len(indices)} device(s) on this process, got "
            f"{len(arrays)} array(s)"
        )
    blocks = [(index, array) for (_, index), array in zip(indices, arrays)]
    return _filled(shape, sharding, blocks, what, dtype)
