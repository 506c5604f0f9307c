"""vmap maps keyword arguments along axis 0; in_axes covers positional arguments only."""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp


def _row(tree, i):
    return fg.tree_util.tree_map(lambda a: a[i], tree)


def _loop(f, n, *args, **kwargs):
    """The reference: call `f` on each row of every argument and stack the results."""
    return np.stack([np.asarray(f(*_row(args, i), **_row(kwargs, i))) for i in range(n)])


def test_keyword_argument_is_mapped_along_axis_0():
    x = np.arange(12.0).reshape(3, 4)
    s = np.array([1.0, -2.0, 0.5])

    def f(x, scale):
        return fnp.sum(x) * scale

    np.testing.assert_allclose(fg.vmap(f)(x, scale=s), _loop(f, 3, x, scale=s))


def test_in_axes_applies_to_positional_arguments_only():
    x = np.arange(12.0).reshape(4, 3)
    b = {"w": np.arange(3.0) + 1.0, "c": np.array([2.0, 3.0, 4.0])}

    def f(x, bias):
        return x * bias["w"] + bias["c"]

    got = fg.vmap(f, in_axes=1)(x, bias=b)
    want = _loop(f, 3, x.T, bias=b)
    np.testing.assert_allclose(got, want)


def test_keyword_argument_with_a_different_size_is_reported():
    with pytest.raises(ValueError, match="inconsistent sizes"):
        fg.vmap(lambda x, y: x + y)(np.zeros(3), y=np.zeros(4))


def test_keyword_only_call_under_grad():
    s = np.array([1.0, 2.0, 3.0])
    g = fg.vmap(fg.grad(lambda x, scale: fnp.sin(x) * scale))(np.array([0.1, 0.2, 0.3]), scale=s)
    np.testing.assert_allclose(g, np.cos([0.1, 0.2, 0.3]) * s, rtol=1e-6)
