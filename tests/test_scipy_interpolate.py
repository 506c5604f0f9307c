"""funcgrad.scipy.interpolate.RegularGridInterpolator against scipy.interpolate: linear and
nearest on an uneven grid with trailing value axes, fill values and extrapolation, NaN query
points, meshgrid-style queries; the interpolator through jit as a pytree, and derivatives in
the values and the query points."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.interpolate as si

import funcgrad as fg
from funcgrad.scipy.interpolate import RegularGridInterpolator
from funcgrad.test_util import check_grads
from tests.checks import assert_close

TOL = dict(rtol=1e-12, atol=1e-12)


def problem():
    rng = np.random.default_rng(0)
    points = (np.sort(rng.uniform(0, 5, 5)), np.array([0.0, 1.0, 3.0]), np.linspace(-1, 1, 4))
    values = rng.standard_normal((5, 3, 4, 2))
    lows, highs = [p[0] - 0.5 for p in points], [p[-1] + 0.5 for p in points]
    xi = rng.uniform(lows, highs, size=(11, 3))
    xi[0, 0] = np.nan
    return points, values, xi


@pytest.mark.parametrize("method", ["linear", "nearest"])
@pytest.mark.parametrize("fill_value", [np.nan, None, 2.5])
def test_matches_scipy(method, fill_value):
    points, values, xi = problem()
    expected = si.RegularGridInterpolator(points, values, method, False, fill_value)(xi)
    interpolator = RegularGridInterpolator(points, values, method, fill_value=fill_value)
    assert_close(interpolator(xi), expected, **TOL)
    assert_close(fg.jit(lambda f, xi: f(xi))(interpolator, xi), expected, **TOL)
    other = "nearest" if method == "linear" else "linear"
    expected = si.RegularGridInterpolator(points, values, other, False, fill_value)(xi)
    assert_close(interpolator(xi, method=other), expected, **TOL)


def test_tuple_of_coordinate_arrays():
    points, values, _ = problem()
    rows, cols = np.meshgrid(np.linspace(0.5, 4, 3), np.linspace(0, 2, 4), indexing="ij")
    expected = si.RegularGridInterpolator(points[:2], values[:, :, 0, 0])((rows, cols))
    assert_close(
        RegularGridInterpolator(points[:2], values[:, :, 0, 0])((rows, cols)), expected, **TOL
    )


@pytest.mark.parametrize("method", ["linear", "nearest"])
def test_complex_values_interpolate_at_real_points(method):
    # The points were promoted with the values to complex, and searching the grid for them
    # failed deep inside ("lt does not accept dtype complex128").
    rng = np.random.default_rng(4)
    grid = (np.linspace(0, 1, 4), np.array([-2.0, -0.5, 1.0]))
    values = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    xi = np.array([[0.2, -1.0], [0.9, 0.7], [1.5, 0.0]])
    want = si.RegularGridInterpolator(grid, values, method, bounds_error=False)(xi)
    interpolator = RegularGridInterpolator(grid, values, method)
    for got in (interpolator(xi), fg.jit(lambda x: interpolator(x))(xi)):
        assert np.asarray(got).dtype == np.complex128
        assert_close(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="must be real"):
        interpolator(xi + 1j)


def test_built_inside_jit_and_differentiated():
    points, values, xi = problem()
    xi = xi[1:]  # away from the NaN
    inside = np.clip(xi, [p[0] for p in points], [p[-1] for p in points])

    def f(values, xi):
        return RegularGridInterpolator(points, values, fill_value=None)(xi)

    assert_close(fg.jit(f)(values, xi), f(values, xi), **TOL)
    check_grads(f, (values, inside * 0.97 + 0.01), order=1)


def test_bad_arguments_are_named():
    points, values, xi = problem()
    with pytest.raises(ValueError, match="method"):
        RegularGridInterpolator(points, values, "cubic")
    with pytest.raises(NotImplementedError, match="bounds_error"):
        RegularGridInterpolator(points, values, bounds_error=True)
    with pytest.raises(ValueError, match="strictly ascending"):
        RegularGridInterpolator((points[0][::-1],), values)
    with pytest.raises(ValueError, match="coordinates"):
        RegularGridInterpolator(points, values)(xi[:, :2])
