"""funcgrad.flatten_util.ravel_pytree: the flat vector's layout and dtype, the round trip back
to the pytree in each leaf's dtype, and its use under jit, vmap and grad."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.flatten_util import ravel_pytree


def test_layout_dtype_and_round_trip():
    tree = {"b": (np.arange(3, dtype=np.int32), np.float32(2.0)), "a": np.ones((2, 2))}
    flat, unravel = ravel_pytree(tree)
    # Leaves in the pytree's order (dict keys sorted), in their common dtype.
    np.testing.assert_array_equal(flat, [1, 1, 1, 1, 0, 1, 2, 2])
    assert flat.dtype == np.float64
    back = unravel(flat * 2)
    assert back["b"][0].dtype == np.int32 and back["b"][1].dtype == np.float32
    np.testing.assert_array_equal(back["a"], 2 * np.ones((2, 2)))
    np.testing.assert_array_equal(back["b"][0], [0, 2, 4])


def test_empty_tree_and_bad_vector():
    flat, unravel = ravel_pytree(())
    assert flat.shape == (0,) and unravel(flat) == ()
    with pytest.raises(ValueError, match="8 elements"):
        ravel_pytree({"a": np.ones(8)})[1](np.ones(7))


def test_under_transformations():
    def norm_of_tree(tree):
        flat, _ = ravel_pytree(tree)
        return fnp.sum(flat**2)

    tree = {"w": np.ones((2, 3)), "b": np.arange(3.0)}
    gradient = fg.grad(norm_of_tree)(tree)
    np.testing.assert_allclose(gradient["w"], 2 * tree["w"])
    np.testing.assert_allclose(fg.jit(norm_of_tree)(tree), norm_of_tree(tree))
    _, unravel = ravel_pytree(tree)
    batched = fg.vmap(unravel)(np.arange(18.0).reshape(2, 9))
    np.testing.assert_array_equal(batched["b"], [[0, 1, 2], [9, 10, 11]])
