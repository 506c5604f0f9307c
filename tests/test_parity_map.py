"""lax.map with batch_size: vmap over whole batches inside a scan, then the remainder."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax


def f(x):
    return {"norm": fnp.sum(x["a"] ** 2) * x["b"], "rev": x["a"][::-1]}


def loop(xs):
    """The reference: f on each slice in a Python loop, stacked with NumPy."""
    outs = [f({"a": xs["a"][i], "b": xs["b"][i]}) for i in range(len(xs["b"]))]
    return {k: np.stack([np.asarray(o[k]) for o in outs]) for k in ("norm", "rev")}


@given(length=st.integers(1, 9), batch_size=st.integers(1, 11))
def test_batched_map_matches_a_loop(length, batch_size):
    xs = {"a": np.arange(length * 3.0).reshape(length, 3), "b": np.arange(length) % 4 - 1.5}
    want = loop(xs)
    for fun in (lax.map, fg.jit(lax.map, static_argnums=0, static_argnames="batch_size")):
        got = fun(f, xs, batch_size=batch_size)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6)


def test_whole_batches_are_a_scan_of_vmapped_steps_and_the_rest_one_vmap():
    jaxpr = fg.make_jaxpr(lambda x: lax.map(fnp.sin, x, batch_size=3))(np.zeros(8)).jaxpr
    names = [e.primitive.name for e in jaxpr.eqns]
    scans = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert len(scans) == 1 and scans[0].params["length"] == 2
    assert "concatenate" in names


def test_gradient_through_batched_map():
    x = np.linspace(-1.0, 1.0, 7)
    g = fg.grad(lambda x: fnp.sum(lax.map(fnp.sin, x, batch_size=3) ** 2))(x)
    np.testing.assert_allclose(g, 2 * np.sin(x) * np.cos(x), rtol=1e-6)


@pytest.mark.parametrize("bad", [-2, 1.5, True])
def test_batch_size_must_be_a_non_negative_int(bad):
    with pytest.raises(ValueError, match="batch_size must be a non-negative int"):
        lax.map(fnp.sin, np.zeros(4), batch_size=bad)


def test_leading_axes_must_agree():
    with pytest.raises(ValueError, match="same leading axis length"):
        lax.map(lambda x: x[0] + x[1], (np.zeros(4), np.zeros(5)), batch_size=2)
