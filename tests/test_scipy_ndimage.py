"""funcgrad.scipy.ndimage.map_coordinates against scipy.ndimage: orders 0 and 1 in every mode
(funcgrad's "constant" and "wrap" are SciPy's "grid-constant" and "grid-wrap") at points
inside and well beyond the edges; integer input, jit, vmap and derivatives in the values and
the coordinates."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as sn

import funcgrad as fg
from funcgrad.scipy.ndimage import map_coordinates
from funcgrad.test_util import check_grads
from tests.checks import assert_close

MODES = {
    "constant": "grid-constant",
    "nearest": "nearest",
    "wrap": "grid-wrap",
    "mirror": "mirror",
    "reflect": "reflect",
    "grid-constant": "grid-constant",
    "grid-wrap": "grid-wrap",
    "grid-mirror": "grid-mirror",
}


def points(rng, shape, count=9):
    # Never a half-integer, where order 0's rounding would be a tie.
    return [rng.uniform(-2 * n - 1.3, 2 * n + 1.3, size=(count,)) for n in shape]


@pytest.mark.parametrize("shape", [(1,), (5,), (4, 6), (3, 4, 2)])
@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("mode", list(MODES))
def test_map_coordinates_matches_scipy(shape, order, mode):
    rng = np.random.default_rng(0)
    image = rng.standard_normal(shape)
    coordinates = points(rng, shape)
    expected = sn.map_coordinates(
        image, np.array(coordinates), order=order, mode=MODES[mode], cval=0.7
    )
    assert_close(
        map_coordinates(image, coordinates, order, mode, 0.7), expected, rtol=1e-12, atol=1e-12
    )


def test_integer_input_rounds_and_coordinates_broadcast():
    image = np.arange(12, dtype=np.int32).reshape(3, 4)
    rows, cols = np.array([[0.3], [1.6]]), np.array([1.2, 2.7, 0.1])
    expected = sn.map_coordinates(image, np.broadcast_arrays(rows, cols), order=1)
    out = map_coordinates(image, [rows, cols], 1)
    assert_close(out, expected, dtype=np.int32)


def test_boolean_input_is_true_where_a_true_sample_has_weight():
    # It was rounded as integers are: a true sample of weight 0.3 beside cval 0 gave False.
    image = np.array([True, False, False, True])
    coordinates = np.array([0.7, 1.5, -0.4, 3.2, 2.0])
    weights = np.clip(1 - np.abs(coordinates[:, None] - np.arange(4)), 0, None)
    expected = (weights * image).sum(axis=1) != 0
    for out in (
        map_coordinates(image, [coordinates], 1),
        fg.jit(lambda c: map_coordinates(image, [c], 1))(coordinates),
    ):
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("order", [0, 1])
def test_coordinates_beyond_int32_and_nan_coordinates(order):
    # Indices were converted to int32 before the mode folded them: 3e9 wrapped over 5 samples
    # read sample 2 (for 0), and 2^31 + 0.5 in "nearest" read sample 2, not the edge. A NaN
    # coordinate read sample 0 at order 0.
    image = np.arange(5.0)
    far = np.array([3e9, -3e9 - 1, 1e10 + 3, 2.0**40 + 4])
    for mode, scipy_mode in MODES.items():
        f = lambda c, mode=mode: map_coordinates(image, [c], order, mode, -7.0)  # noqa: E731
        want = sn.map_coordinates(image, [far], order=order, mode=scipy_mode, cval=-7.0)
        for got in (f(far), fg.jit(f)(far)):
            assert_close(got, want, rtol=0, atol=0)
    for g in (map_coordinates, fg.jit(map_coordinates, static_argnums=(2, 3))):
        for mode in MODES:
            got = g(image, [np.array([np.nan, 1.0])], order, mode)
            assert np.isnan(got[0]) and float(got[1]) == 1.0
    # (a periodic mode has no sample for an infinite coordinate; an integer image gives cval)
    assert np.isnan(map_coordinates(image, [np.array([np.inf])], order, "wrap")[0])
    nearest = float(map_coordinates(image, [np.array([np.inf])], order, "nearest")[0])
    assert nearest == 4 if order == 0 else np.isnan(nearest)  # (inf - inf weighs order 1's)
    integers = map_coordinates(np.arange(5), [np.array([np.nan, 2.0])], order, "mirror", 9)
    np.testing.assert_array_equal(np.asarray(integers), [9, 2])


def test_jit_vmap_and_derivatives():
    rng = np.random.default_rng(1)
    image = rng.standard_normal((4, 5))
    coordinates = np.stack(points(rng, image.shape, 6))
    for mode in ("constant", "reflect"):
        f = lambda image, c, mode=mode: map_coordinates(image, c, 1, mode)  # noqa: E731
        assert_close(fg.jit(f)(image, coordinates), f(image, coordinates), rtol=1e-12, atol=1e-12)
        check_grads(f, (image, coordinates), order=1)
    stack = rng.standard_normal((3, 4, 5))
    batched = fg.vmap(lambda image: map_coordinates(image, coordinates, 1))(stack)
    looped = [sn.map_coordinates(s, coordinates, order=1, mode="grid-constant") for s in stack]
    assert_close(batched, np.stack(looped), rtol=1e-12, atol=1e-12)


def test_bad_arguments_are_named():
    with pytest.raises(NotImplementedError, match="order"):
        map_coordinates(np.ones((3, 3)), [np.zeros(2), np.zeros(2)], 3)
    with pytest.raises(NotImplementedError, match="mode"):
        map_coordinates(np.ones(3), [np.zeros(2)], 1, mode="edge")
    with pytest.raises(ValueError, match="one coordinate array per axis"):
        map_coordinates(np.ones((3, 3)), [np.zeros(2)], 1)
