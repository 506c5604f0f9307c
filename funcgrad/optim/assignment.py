"""The linear assignment problem, with Optax's `assignment` names: for an n x m cost matrix,
the pairing of min(n, m) rows with distinct columns of least total cost, by the Hungarian
method with potentials (Kuhn-Munkres in the shortest-augmenting-path form of Jonker and
Volgenant), O(min^2 max) steps written as traceable loops so it runs under jit and vmap.

Rows are added one at a time; each grows a tree of shortest reduced-cost paths from the new
row until it reaches a free column, then flips the assignment along that path. The
potentials u (rows) and v (columns) keep every reduced cost c[i, j] - u[i] - v[j]
non-negative and zero on assigned pairs, which certifies the result optimal."""

from __future__ import annotations

from typing import Any

import funcgrad.numpy as fnp
from funcgrad import lax

__all__ = ["base_hungarian_algorithm", "hungarian_algorithm"]


def _column_owners(costs):
    """For costs with rows <= columns: owner[j] = 1 + the row assigned column j (0 for a
    free column), 1-based at index j + 1 with index 0 the new row's virtual column."""
    rows, cols = costs.shape
    dummy_row = rows + 1  # where potential updates for unused columns go
    costs = costs.astype(fnp.result_type(costs.dtype, fnp.float32))
    inf = fnp.asarray(fnp.inf, costs.dtype)

    def add_row(state, row):
        u, v, owner = state
        owner = owner.at[0].set(row + 1)
        used = fnp.zeros(cols + 1, bool)
        min_reduced = fnp.full(cols, inf)
        came_from = fnp.zeros(cols, fnp.int32)  # the previous column on the shortest path

        def grow(loop):
            u, v, used, min_reduced, came_from, column = loop
            used = used.at[column].set(True)
            free = ~used[1:]
            from_row = owner[column]
            reduced = costs[from_row - 1] - u[from_row] - v[1:]
            better = free & (reduced < min_reduced)
            came_from = fnp.where(better, column, came_from)
            min_reduced = fnp.where(better, reduced, min_reduced)
            candidates = fnp.where(free, min_reduced, inf)
            nearest = fnp.argmin(candidates).astype(fnp.int32)
            delta = candidates[nearest]
            u = u.at[fnp.where(used, owner, dummy_row)].add(delta)
            v = fnp.where(used, v - delta, v)
            min_reduced = fnp.where(free, min_reduced - delta, min_reduced)
            return u, v, used, min_reduced, came_from, nearest + 1

        loop = (u, v, used, min_reduced, came_from, fnp.int32(0))
        u, v, _, _, came_from, column = lax.while_loop(lambda s: owner[s[-1]] != 0, grow, loop)

        def flip(loop):
            owner, column = loop
            previous = came_from[column - 1]
            return owner.at[column].set(owner[previous]), previous

        owner, _ = lax.while_loop(lambda s: s[1] != 0, flip, (owner, column))
        return (u, v, owner), None

    start = (
        fnp.zeros(rows + 2, costs.dtype),
        fnp.zeros(cols + 1, costs.dtype),
        fnp.zeros(cols + 1, fnp.int32),
    )
    (_, _, owner), _ = lax.scan(add_row, start, fnp.arange(rows, dtype=fnp.int32))
    return owner[1:]


def _owners_of_wide(cost_matrix) -> tuple[Any, bool]:
    """Each column's assigned row (1-based, 0 if free) of the matrix laid out wide (a taller
    one transposed), and whether it was transposed."""
    transpose = cost_matrix.shape[0] > cost_matrix.shape[1]
    return _column_owners(cost_matrix.T if transpose else cost_matrix), transpose


def _empty(costs) -> bool:
    if fnp.ndim(costs) != 2:
        raise ValueError(
            f"hungarian_algorithm: the cost matrix must be 2-D, got shape {fnp.shape(costs)}"
        )
    return 0 in fnp.shape(costs)


def hungarian_algorithm(cost_matrix: Any) -> tuple[Any, Any]:
    """(row indices, column indices) of a least-cost assignment, min(n, m) pairs. With
    n <= m the pairs are listed by column: for a square matrix, column j's row at place j;
    otherwise the assigned columns by decreasing row. A taller matrix is solved transposed."""
    cost_matrix = fnp.asarray(cost_matrix)
    if _empty(cost_matrix):
        return fnp.zeros(0, fnp.int32), fnp.zeros(0, fnp.int32)
    owner, transpose = _owners_of_wide(cost_matrix)
    rows, cols = sorted(cost_matrix.shape)
    if rows == cols:
        row_of_pair, column_of_pair = owner, fnp.arange(cols, dtype=fnp.int32)
    else:
        row_of_pair, column_of_pair = lax.top_k(owner, rows)
    row_of_pair = row_of_pair - 1
    if transpose:
        return column_of_pair, row_of_pair
    return row_of_pair, column_of_pair


def base_hungarian_algorithm(cost_matrix: Any) -> tuple[Any, Any]:
    """(row indices, column indices) of a least-cost assignment, min(n, m) pairs listed by
    increasing row."""
    cost_matrix = fnp.asarray(cost_matrix)
    if _empty(cost_matrix):
        return fnp.zeros(0, fnp.int32), fnp.zeros(0, fnp.int32)
    owner, transpose = _owners_of_wide(cost_matrix)
    rows, cols = sorted(cost_matrix.shape)
    # Each row's column: scatter the assigned columns to their rows (free ones to a spare).
    column_of_row = fnp.full(rows + 1, -1, fnp.int32)
    column_of_row = column_of_row.at[fnp.where(owner > 0, owner - 1, rows)].set(
        fnp.arange(cols, dtype=fnp.int32)
    )[:rows]
    if transpose:
        order = fnp.argsort(column_of_row).astype(fnp.int32)
        return column_of_row[order], order
    return fnp.arange(rows, dtype=fnp.int32), column_of_row
