"""funcgrad.optim.assignment against brute force over every injective pairing of a small
cost matrix (ties included, from integer costs), in both output orders, under jit and
vmap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad.optim import assignment

ALGORITHMS = [assignment.hungarian_algorithm, assignment.base_hungarian_algorithm]


def least_cost(costs):
    rows, cols = costs.shape
    if rows <= cols:
        return min(
            costs[range(rows), list(p)].sum() for p in itertools.permutations(range(cols), rows)
        )
    return least_cost(costs.T)


cost_matrices = st.tuples(st.integers(1, 5), st.integers(1, 5), st.booleans()).flatmap(
    lambda shape: st.lists(
        st.integers(0, 4) if shape[2] else st.floats(-10, 10, allow_subnormal=False),
        min_size=shape[0] * shape[1],
        max_size=shape[0] * shape[1],
    ).map(lambda xs: np.array(xs, np.float64).reshape(shape[:2]))
)


def assert_optimal_assignment(costs, rows, cols):
    rows, cols = np.asarray(rows), np.asarray(cols)
    assert rows.shape == cols.shape == (min(costs.shape),)
    assert len(set(rows)) == len(rows) and len(set(cols)) == len(cols)
    np.testing.assert_allclose(costs[rows, cols].sum(), least_cost(costs), atol=1e-9)


@given(cost_matrices)
def test_least_total_cost(costs):
    for algorithm in ALGORITHMS:
        assert_optimal_assignment(costs, *algorithm(costs))


def test_output_orders():
    costs = np.random.default_rng(3).random((3, 5))
    rows, cols = assignment.base_hungarian_algorithm(costs)
    np.testing.assert_array_equal(rows, [0, 1, 2])
    rows_t, cols_t = assignment.base_hungarian_algorithm(costs.T)
    assert list(np.asarray(rows_t)) == sorted(np.asarray(rows_t))  # by row of the tall one
    pairs = set(zip(np.asarray(rows).tolist(), np.asarray(cols).tolist()))
    assert set(zip(np.asarray(cols_t).tolist(), np.asarray(rows_t).tolist())) == pairs
    rows, cols = assignment.hungarian_algorithm(costs)
    assert list(np.asarray(rows)) == sorted(np.asarray(rows), reverse=True)
    square = np.random.default_rng(4).random((4, 4))
    np.testing.assert_array_equal(assignment.hungarian_algorithm(square)[1], np.arange(4))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_jit_vmap_and_empty(algorithm):
    batch = np.random.default_rng(5).random((3, 4, 4))
    rows, cols = fg.vmap(algorithm)(batch)
    for costs, r, c in zip(batch, np.asarray(rows), np.asarray(cols)):
        assert_optimal_assignment(costs, r, c)
    r, c = fg.jit(algorithm)(batch[0, :2])
    assert_optimal_assignment(batch[0, :2], r, c)
    assert [x.shape for x in algorithm(np.zeros((0, 3)))] == [(0,), (0,)]
    with pytest.raises(ValueError, match="must be 2-D"):
        algorithm(np.zeros(3))
