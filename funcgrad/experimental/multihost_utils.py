"""Helpers for programs run by several processes (`funcgrad.distributed`), under JAX's
`jax.experimental.multihost_utils` names. With one process each is what it would be for a
job of one: a barrier returns at once, a gather gives the process's own data."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from funcgrad import distributed, dtypes, tree_util
from funcgrad.array import Array
from funcgrad.global_arrays import make_array_from_process_local_data, process_box
from funcgrad.lax.base import asarray
from funcgrad.sharding import Mesh, NamedSharding, PartitionSpec, broadcast_prefix, laid_out


def sync_global_devices(name: str) -> None:
    """Return once every process has called it with the same `name`; an AssertionError names
    the processes' names where they differ (a process took another path)."""
    if distributed.process_count() == 1:
        return
    what = f"sync_global_devices({name!r})"
    digest = np.array([zlib.crc32(name.encode())], np.uint32)
    digests = distributed.all_gather(digest, what)[:, 0]
    if (digests != digests[0]).any():
        raise AssertionError(
            f"{what}: the processes called it with different names (crc32 by process: "
            f"{digests.tolist()})"
        )


def _host_value(leaf) -> np.ndarray:
    """A leaf as a NumPy array: Python scalars get funcgrad's default dtypes."""
    if dtypes.is_python_scalar(leaf):
        leaf = asarray(leaf)
    return np.asarray(leaf)


def _is_global(leaf) -> bool:
    """An array laid out over devices of other processes too (it holds the whole value)."""
    sharding = getattr(leaf, "_sharding", None) if isinstance(leaf, Array) else None
    here = distributed.process_index()
    return sharding is not None and any(d.process_index != here for d in sharding.device_set)


def process_allgather(in_tree: Any, tiled: bool = False) -> Any:
    """Every process's leaves as NumPy arrays, stacked along a new leading axis in process
    order (or, `tiled`, concatenated along the first). An array laid out over several
    processes' devices is already global: its whole value comes back as it is."""

    def gather(leaf):
        value = _host_value(leaf)
        if _is_global(leaf):
            return value
        if distributed.process_count() == 1:
            stacked = value[None]
        else:
            stacked = distributed.all_gather(value, "process_allgather")
        if tiled and value.ndim:
            return stacked.reshape((-1,) + value.shape[1:])
        return stacked

    return tree_util.tree_map(gather, in_tree)


def broadcast_one_to_all(in_tree: Any, is_source: bool | None = None) -> Any:
    """The source process's leaves (process 0's, or the one process passing
    `is_source=True`) on every process, as funcgrad arrays; every process gives leaves of the
    same shapes and dtypes. With one process, `in_tree` itself."""
    if distributed.process_count() == 1:
        return in_tree
    what = "broadcast_one_to_all"
    here = distributed.process_index()
    flags = distributed.all_gather(np.array([here == 0 if is_source is None else is_source]), what)
    sources = np.flatnonzero(flags[:, 0])
    if len(sources) != 1:
        raise ValueError(
            f"{what}: exactly one process must be the source, got processes {sources.tolist()}"
        )
    (source,) = sources

    def share(leaf):
        value = _host_value(leaf)
        if source == 0:
            return Array(distributed.broadcast(value, what))
        return Array(np.ascontiguousarray(distributed.all_gather(value, what)[source]))

    return tree_util.tree_map(share, in_tree)


def _specs(pspecs: Any, tree: Any, what: str) -> list:
    return broadcast_prefix(
        pspecs, tree, lambda x: isinstance(x, PartitionSpec), what, "PartitionSpec"
    )


def host_local_array_to_global_array(local_inputs: Any, global_mesh: Mesh, pspecs: Any) -> Any:
    """Each leaf, this process's part of an array laid out over `global_mesh` as its spec in
    `pspecs` (a tree prefix of PartitionSpecs) says, as the whole array: the parts of every
    process joined (`make_array_from_process_local_data`)."""
    leaves, tree = tree_util.tree_flatten(local_inputs)
    specs = _specs(pspecs, local_inputs, "host_local_array_to_global_array's pspecs")
    outs = [
        make_array_from_process_local_data(NamedSharding(global_mesh, spec), _host_value(leaf))
        for leaf, spec in zip(leaves, specs)
    ]
    return tree_util.tree_unflatten(tree, outs)


def _local_mesh(mesh: Mesh) -> Mesh:
    """The sub-grid of `mesh` that this process's devices make up."""
    here = distributed.process_index()
    mine = np.vectorize(lambda d: d.process_index == here, otypes=[bool])(mesh.devices)
    rows = [
        np.flatnonzero(mine.any(axis=tuple(a for a in range(mine.ndim) if a != axis)))
        for axis in range(mine.ndim)
    ]
    grid = mesh.devices[np.ix_(*rows)]
    if not mine[np.ix_(*rows)].all():
        raise ValueError(
            "this process's devices do not make up a sub-grid of the mesh; give a mesh whose "
            "processes own sub-grids of it"
        )
    return Mesh(grid, mesh.axis_names, mesh.axis_types)


def global_array_to_host_local_array(global_inputs: Any, global_mesh: Mesh, pspecs: Any) -> Any:
    """Each leaf, an array laid out over `global_mesh` as its spec in `pspecs` says, cut down
    to the part this process's devices hold, laid out over their sub-mesh (the inverse of
    `host_local_array_to_global_array`)."""
    leaves, tree = tree_util.tree_flatten(global_inputs)
    specs = _specs(pspecs, global_inputs, "global_array_to_host_local_array's pspecs")
    local_mesh = _local_mesh(global_mesh)
    outs = []
    for leaf, spec in zip(leaves, specs):
        value = _host_value(leaf)
        box = process_box(
            NamedSharding(global_mesh, spec), value.shape, "global_array_to_host_local_array"
        )
        part = Array(np.ascontiguousarray(value[box]))
        outs.append(laid_out(part, NamedSharding(local_mesh, spec)))
    return tree_util.tree_unflatten(tree, outs)
