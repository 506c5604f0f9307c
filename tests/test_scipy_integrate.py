"""funcgrad.scipy.integrate.trapezoid against scipy.integrate.trapezoid: sample points or a
spacing, any axis, its derivative against finite differences, and jit against eager."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate as si

import funcgrad as fg
from funcgrad.scipy.integrate import trapezoid
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_matches_scipy_with_a_spacing_or_sample_points(axis):
    y = RNG.standard_normal((4, 5, 6))
    x = np.sort(RNG.uniform(0, 3, y.shape[axis]))
    np.testing.assert_allclose(trapezoid(y, dx=0.3, axis=axis), si.trapezoid(y, dx=0.3, axis=axis))
    np.testing.assert_allclose(trapezoid(y, x, axis=axis), si.trapezoid(y, x, axis=axis))
    xs = np.sort(RNG.uniform(0, 3, y.shape), axis=axis)
    np.testing.assert_allclose(trapezoid(y, xs, axis=axis), si.trapezoid(y, xs, axis=axis))


def test_derivatives_and_jit():
    y, x = RNG.standard_normal((3, 7)), np.sort(RNG.uniform(0, 1, 7))
    check_grads(trapezoid, (y, x), order=2)
    np.testing.assert_allclose(fg.jit(trapezoid)(y, x), trapezoid(y, x), rtol=1e-12)


def test_namespace():
    assert "integrate" in fg.scipy.__all__ and fg.scipy.integrate.trapezoid is trapezoid
