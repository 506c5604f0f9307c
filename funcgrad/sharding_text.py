"""Shardings drawn as text: which device holds which block of an array.

`funcgrad.debug.visualize_sharding(shape, sharding)` prints a grid with one cell per block of
an array of `shape` (rows along the first dimension, columns along the last), each cell
naming the devices that hold that block, e.g. for an (8, 8) array laid out as
`NamedSharding(mesh_2x2, P('x', 'y'))`:

    ┌───────┬───────┐
    │ CPU 0 │ CPU 1 │
    ├───────┼───────┤
    │ CPU 2 │ CPU 3 │
    └───────┴───────┘

A dimension the sharding does not split is one block, and a block several devices hold
(replication) names them all.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

from funcgrad import core, tree_util
from funcgrad.array import Array
from funcgrad.sharding import Sharding

__all__ = ["inspect_array_sharding", "visualize_array_sharding", "visualize_sharding"]


def sharding_grid(shape: Sequence[int], sharding: Sharding) -> list[list[str]]:
    """The grid's cell labels, row by row: per block of an array of `shape` (at most two
    dimensions), the kind and ids of the devices holding it."""
    shape = tuple(shape)
    if len(shape) > 2:
        raise ValueError(
            f"visualize_sharding draws arrays of at most two dimensions; the shape {shape} has "
            f"{len(shape)}"
        )
    if not isinstance(sharding, Sharding):
        raise TypeError(f"visualize_sharding takes a Sharding, got {type(sharding).__name__}")
    holders: dict[tuple[int, ...], list[Any]] = {}
    for device, index in sharding.devices_indices_map(shape).items():
        starts = tuple(s.indices(n)[0] for s, n in zip(index, shape))
        holders.setdefault(starts, []).append(device)
    # A vector's blocks make one row; a scalar is one cell.
    rows = sorted({starts[0] for starts in holders}) if len(shape) == 2 else [None]
    cols = sorted({starts[-1] for starts in holders}) if shape else [None]

    def label(row: int | None, col: int | None) -> str:
        starts = tuple(s for s in (row, col) if s is not None)
        devices = sorted(holders[starts], key=lambda d: d.id)
        return f"{devices[0].platform.upper()} {','.join(str(d.id) for d in devices)}"

    return [[label(row, col) for col in cols] for row in rows]


def _draw(grid: list[list[str]]) -> str:
    width = max(len(text) for row in grid for text in row) + 2
    columns = len(grid[0])

    def rule(left: str, middle: str, right: str) -> str:
        return left + middle.join(["─" * width] * columns) + right

    lines = [rule("┌", "┬", "┐")]
    for i, row in enumerate(grid):
        if i:
            lines.append(rule("├", "┼", "┤"))
        lines.append("│" + "│".join(text.center(width) for text in row) + "│")
    lines.append(rule("└", "┴", "┘"))
    return "\n".join(lines)


def visualize_sharding(shape: Sequence[int], sharding: Sharding) -> None:
    """Print which device holds which block of an array of `shape` (at most two dimensions)
    laid out by `sharding`."""
    builtins.print(_draw(sharding_grid(shape, sharding)))


def visualize_array_sharding(arr: Any) -> None:
    """Print which device holds which block of `arr`, a concrete array of at most two
    dimensions."""
    visualize_sharding(_concrete(arr, "visualize_array_sharding").shape, arr.sharding)


def inspect_array_sharding(value: Any, *, callback: Callable[[Sharding], Any]) -> None:
    """Call `callback` with the sharding of every array leaf of `value`.

    The arrays must be concrete: funcgrad has no partitioner choosing layouts inside a jitted
    program, so a traced value has none to report.
    """
    for leaf in tree_util.tree_leaves(value):
        callback(_concrete(leaf, "inspect_array_sharding").sharding)


def _concrete(arr: Any, name: str) -> Array:
    if isinstance(arr, core.Tracer):
        raise TypeError(
            f"{name} needs a concrete array, got a traced value ({core.get_aval(arr)}): funcgrad "
            "has no partitioner that lays out values inside a transformed function; call it on "
            "the function's inputs or outputs instead"
        )
    if not isinstance(arr, Array):
        raise TypeError(f"{name} takes a funcgrad Array, got {type(arr).__name__}")
    return arr
