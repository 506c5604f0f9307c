"""funcgrad.testing: the strategies produce what they promise, and each check passes on a
correct function and fails, with a report naming the place, on a wrong one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import testing


@given(testing.arrays(dtype=st.sampled_from([np.float32, np.int8, np.bool_]), shape=(2, 3)))
def test_arrays_have_the_asked_dtype_and_shape_and_are_finite(x):
    assert x.shape == (2, 3) and x.dtype in (np.float32, np.int8, np.bool_)
    if x.dtype == np.float32:
        assert np.isfinite(x).all() and np.abs(x).max(initial=0) <= 10


@given(testing.broadcastable_shapes(n=3))
def test_broadcastable_shapes_broadcast(shapes):
    assert len(shapes) == 3
    np.broadcast_shapes(*shapes)  # raises if they do not


@given(testing.pytrees_of_arrays(), testing.prng_keys())
def test_pytrees_and_keys(tree, key):
    assert all(isinstance(leaf, np.ndarray) for leaf in fg.tree_util.tree_leaves(tree))
    assert np.asarray(key).shape == (2,) and np.asarray(key).dtype == np.uint32


@given(testing.arrays(shape=testing.shapes(min_dims=1)))
def test_checks_pass_on_correct_functions(x):
    testing.check_jit(lambda v: fnp.tanh(v) * 2 + v.sum(), x)
    testing.check_vmap(lambda v: fnp.sin(v) * v.sum(), x, in_axes=0)


def test_check_vmap_with_unmapped_arguments_and_out_axes():
    x, w = np.arange(12.0).reshape(4, 3), np.arange(3.0)
    testing.check_vmap(lambda row, w: row * w, x, w, in_axes=(0, None))
    testing.check_vmap(lambda col: col * 2, x, in_axes=1, out_axes=1)


def test_check_jit_reports_the_leaf_and_index_of_a_difference():
    calls = []

    def impure(v):  # differs between tracing and eager calls: a defect check_jit must catch
        calls.append(1)
        return {"a": v * 1.0, "b": v + len(calls)}

    with pytest.raises(
        AssertionError, match=r"jit\(f\): output leaf 1 differs from f .*index \(0,\)"
    ):
        testing.check_jit(impure, np.ones(3, np.float32))


def test_check_vmap_catches_a_function_that_batches_wrongly():
    def centered(v):
        # A host function declared to vectorize, which centers by the mean of everything it is
        # given: under vmap that is the whole batch, not one example.
        shape = fg.ShapeDtypeStruct(v.shape, v.dtype)
        return fg.pure_callback(lambda a: a - a.mean(), shape, v, vmap_method="expand_dims")

    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    with pytest.raises(AssertionError, match=r"vmap\(f\): the output differs from a loop of f"):
        testing.check_vmap(centered, x)


def test_mismatched_axis_sizes_are_an_error():
    with pytest.raises(ValueError, match="sizes"):
        testing.check_vmap(lambda a, b: a + b, np.ones((2, 3)), np.ones((4, 3)))


def test_check_grads_is_the_test_util_one():
    testing.check_grads(lambda v: fnp.sum(fnp.tanh(v) ** 2), (np.linspace(-1, 1, 4),), order=2)
    with pytest.raises(AssertionError):
        wrong = fg.custom_jvp(fnp.sin)
        wrong.defjvp(lambda primals, tangents: (fnp.sin(primals[0]), tangents[0]))
        testing.check_grads(wrong, (np.linspace(-1, 1, 4),), order=1)
