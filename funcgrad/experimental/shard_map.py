"""shard_map under its experimental name and signature: mesh and specs positional, and
`check_rep` for `check_vma`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from funcgrad.sharding import Mesh
from funcgrad.transforms.shard_map import ShardMapped

__all__ = ["shard_map"]


def shard_map(
    f: Callable,
    mesh: Mesh,
    in_specs: Any,
    out_specs: Any,
    check_rep: bool = True,
    auto: frozenset = frozenset(),
) -> ShardMapped:
    """`funcgrad.shard_map(f, mesh=mesh, in_specs=..., out_specs=..., check_vma=check_rep)`."""
    if auto:
        raise NotImplementedError(
            f"shard_map: auto={set(auto)} leaves mesh axes to a partitioner, which funcgrad "
            "does not have; map over every axis"
        )
    if not callable(f):
        raise TypeError(f"shard_map expects a callable, got {type(f).__name__}")
    return ShardMapped(f, mesh, in_specs, out_specs, check_rep)
