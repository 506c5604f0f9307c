"""Device meshes as grids of devices, under JAX's `jax.experimental.mesh_utils` names.

funcgrad's devices have no physical topology to follow (virtual CPU devices, GPUs of one
machine, processes joined over MPI), so a mesh is the devices in their listed order, laid
out row-major; a hybrid mesh puts each process's devices in a block of their own."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from funcgrad.devices import devices as all_devices


def create_device_mesh(
    mesh_shape: Sequence[int],
    devices: Sequence | None = None,
    *,
    contiguous_submeshes: bool = False,
    allow_split_physical_axes: bool = False,
) -> np.ndarray:
    """`devices` (by default every device) as an array of `mesh_shape`, in order.
    `contiguous_submeshes` and `allow_split_physical_axes` concern physical topologies, which
    funcgrad's devices do not have."""
    del contiguous_submeshes, allow_split_physical_axes
    devices = list(all_devices() if devices is None else devices)
    mesh_shape = tuple(mesh_shape)
    if any(not isinstance(n, int) or n < 1 for n in mesh_shape) or math.prod(mesh_shape) != len(
        devices
    ):
        raise ValueError(
            f"Number of devices {len(devices)} must equal the product of mesh_shape {mesh_shape}"
        )
    grid = np.empty(len(devices), dtype=object)
    grid[:] = devices
    return grid.reshape(mesh_shape)


def create_hybrid_device_mesh(
    mesh_shape: Sequence[int],
    dcn_mesh_shape: Sequence[int],
    devices: Sequence | None = None,
    *,
    process_is_granule: bool = False,
    should_sort_granules_by_key: bool = True,
    allow_split_physical_axes: bool = False,
) -> np.ndarray:
    """A mesh of `dcn_mesh_shape` blocks, one per process, each its devices as a mesh of
    `mesh_shape`: dimension i has `dcn_mesh_shape[i] * mesh_shape[i]` devices, and the
    processes change along it only every `mesh_shape[i]` of them. funcgrad's devices belong to
    no slices, so `process_is_granule=True` is required, as JAX requires it for devices
    without a `slice_index`."""
    del allow_split_physical_axes
    if not process_is_granule:
        raise ValueError(
            "create_hybrid_device_mesh: funcgrad's devices have no slice_index; pass "
            "process_is_granule=True to make each process's devices one block of the mesh"
        )
    devices = list(all_devices() if devices is None else devices)
    granules: dict[int, list] = {}
    for device in devices:
        granules.setdefault(device.process_index, []).append(device)
    keys = sorted(granules) if should_sort_granules_by_key else list(granules)
    mesh_shape, dcn_mesh_shape = tuple(mesh_shape), tuple(dcn_mesh_shape)
    if len(mesh_shape) != len(dcn_mesh_shape):
        raise ValueError(
            f"mesh_shape {mesh_shape} and dcn_mesh_shape {dcn_mesh_shape} must have one rank"
        )
    if len(keys) != math.prod(dcn_mesh_shape):
        raise ValueError(
            f"Number of processes {len(keys)} must equal the product of dcn_mesh_shape "
            f"{dcn_mesh_shape}"
        )
    blocks = np.stack([create_device_mesh(mesh_shape, granules[k]) for k in keys])
    rank = len(mesh_shape)
    blocks = blocks.reshape(dcn_mesh_shape + mesh_shape)
    # (d0, ..., m0, ...) -> (d0, m0, d1, m1, ...) -> (d0 * m0, d1 * m1, ...)
    order = [axis for pair in zip(range(rank), range(rank, 2 * rank)) for axis in pair]
    return blocks.transpose(order).reshape(tuple(d * m for d, m in zip(dcn_mesh_shape, mesh_shape)))
