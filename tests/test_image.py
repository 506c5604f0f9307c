"""fg.image (jax.image): resize and scale_and_translate against a NumPy reference written here
from the kernels' definitions, one output pixel at a time, in float64; and under grad, vmap and
jit."""

import math

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.image import ResizeMethod
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(0)
METHODS = ["linear", "cubic", "lanczos3", "lanczos5", "cubic-pytorch", "area"]


# ---------------------------------------------------------------------------------------------
# The reference


def keys_cubic(a):
    def kernel(x):
        if x < 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    return kernel


def lanczos(radius):
    def kernel(x):
        if x == 0:
            return 1.0
        if x > radius:
            return 0.0
        return radius * math.sin(math.pi * x) * math.sin(math.pi * x / radius) / (math.pi * x) ** 2

    return kernel


REFERENCE_KERNELS = {
    "linear": lambda x: max(0.0, 1.0 - x),
    "cubic": keys_cubic(-0.5),
    "cubic-pytorch": keys_cubic(-0.75),
    "lanczos3": lanczos(3),
    "lanczos5": lanczos(5),
}


def reference_weights(m, n, scale, translation, method, antialias):
    """weights[j, i]: the weight of input pixel j in output pixel i."""
    weights = np.zeros((m, n))
    if method == "cubic-pytorch" and antialias:
        method = "cubic"
    for i in range(n):
        # Output pixel i covers [i, i + 1]; its preimage is [left, right] in input coordinates.
        left, right = (i - translation) / scale, (i + 1 - translation) / scale
        centre = (left + right) / 2 - 0.5  # in input pixel-centre coordinates
        if method == "area":
            for j in range(m):
                weights[j, i] = max(0.0, min(right, j + 1) - max(left, j))
        elif method == "cubic-pytorch":
            # Edge pixels repeated: positions beyond the image read the nearest edge pixel.
            kernel = REFERENCE_KERNELS[method]
            for p in range(-2, m + 2):
                weights[min(max(p, 0), m - 1), i] += kernel(abs(centre - p))
        else:
            kernel = REFERENCE_KERNELS[method]
            stretch = max(1 / scale, 1.0) if antialias else 1.0
            for j in range(m):
                weights[j, i] = kernel(abs(centre - j) / stretch)
        total = weights[:, i].sum()
        weights[:, i] = weights[:, i] / total if abs(total) > 1000 * np.finfo(np.float32).eps else 0
        if method != "cubic-pytorch" and not -0.5 <= centre <= m - 0.5:
            weights[:, i] = 0.0
    return weights


def reference_scale_and_translate(x, shape, dims, scale, translation, method, antialias):
    x = np.asarray(x, np.float64)
    for d, s, t in zip(dims, scale, translation):
        w = reference_weights(x.shape[d], shape[d], s, t, method, antialias)
        x = np.moveaxis(np.tensordot(x, w, axes=([d], [0])), -1, d)
    return x


def reference_nearest(x, shape):
    for d, (m, n) in enumerate(zip(x.shape, shape)):
        # The input pixel whose cell [j, j + 1] holds output centre (i + 0.5) * m / n.
        x = np.take(x, [int((i + 0.5) * m / n) for i in range(n)], axis=d)
    return x


def assert_allclose(actual, expected, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("src, dst", [((5, 7, 2), (9, 3, 2)), ((8, 6), (3, 13)), ((4,), (1,))])
def test_resize_matches_the_reference(method, antialias, src, dst):
    x = RNG.standard_normal(src)
    got = fg.image.resize(x, dst, method, antialias=antialias)
    dims = [d for d in range(len(src)) if src[d] != dst[d]]
    scale = [dst[d] / src[d] for d in dims]
    expected = reference_scale_and_translate(
        x, dst, dims, scale, [0.0] * len(dims), method, antialias
    )
    assert got.dtype == np.float64
    assert_allclose(got, expected)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("antialias", [True, False])
def test_scale_and_translate_matches_the_reference(method, antialias):
    x = RNG.standard_normal((6, 5, 3))
    scale, translation = np.array([1.7, 0.6]), np.array([-0.8, 1.3])
    got = fg.image.scale_and_translate(
        x, (9, 4, 3), (0, 1), scale, translation, method, antialias=antialias
    )
    expected = reference_scale_and_translate(
        x, (9, 4, 3), (0, 1), scale, translation, method, antialias
    )
    assert_allclose(got, expected)


@pytest.mark.parametrize("src, dst", [((5, 7), (9, 3)), ((4, 4), (4, 11)), ((6,), (1,))])
def test_resize_nearest(src, dst):
    x = np.arange(math.prod(src)).reshape(src)
    got = fg.image.resize(x, dst, "nearest")
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(got), reference_nearest(x, dst))


def test_known_values():
    # Upsampling [0, 1] linearly by 2 samples at -0.25, 0.25, 0.75, 1.25: the ends clamp.
    assert_allclose(fg.image.resize(np.array([0.0, 1.0]), (4,), "linear"), [0, 0.25, 0.75, 1])
    # Downsampling by 2 with area averages pairs.
    assert_allclose(fg.image.resize(np.arange(4.0), (2,), "area"), [0.5, 2.5])
    # Any method interpolates: an unchanged shape is the image itself.
    x = RNG.standard_normal((3, 4))
    for method in METHODS:
        assert_allclose(fg.image.resize(x, (3, 4), method), x)


def test_method_names_and_dtypes():
    assert ResizeMethod.from_string("bilinear") is ResizeMethod.LINEAR
    assert ResizeMethod.from_string("tricubic") is ResizeMethod.CUBIC
    assert ResizeMethod.from_string("bicubic-pytorch") is ResizeMethod.CUBIC_PYTORCH
    with pytest.raises(ValueError, match="Unknown resize method"):
        fg.image.resize(np.ones(3), (2,), "keys")
    x = np.arange(12).reshape(3, 4)
    assert fg.image.resize(x, (2, 3), ResizeMethod.LINEAR).dtype == np.float32
    assert fg.image.resize(x.astype(np.float16), (2, 3), "cubic").dtype == np.float16
    assert fg.image.resize(x.astype(np.complex64), (5, 3), "lanczos3").dtype == np.complex64
    with pytest.raises(ValueError, match="one entry per dimension"):
        fg.image.resize(x, (2,), "linear")
    with pytest.raises(ValueError, match="not available in scale_and_translate"):
        fg.image.scale_and_translate(x, (3, 4), (0,), [1.0], [0.0], "nearest")
    with pytest.raises(ValueError, match="not among spatial_dims"):
        fg.image.scale_and_translate(x, (6, 8), (0,), [2.0], [0.0], "linear")
    # Resampling an empty dimension was a ZeroDivisionError (nearest: an IndexError).
    for method in ("nearest", "linear", "area"):
        with pytest.raises(ValueError, match="dimension 0 of the image is empty"):
            fg.image.resize(np.zeros((0, 3)), (2, 3), method)
    assert fg.image.resize(np.zeros((0, 3)), (0, 5), "linear").shape == (0, 5)


# ---------------------------------------------------------------------------------------------
# Transformations


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos3", "area"])
def test_grads_of_resize(method):
    x = RNG.standard_normal((5, 4))
    check_grads(lambda x: fg.image.resize(x, (3, 7), method), (x,), order=2, modes=["fwd", "rev"])


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos5"])
def test_grads_with_respect_to_scale_and_translation(method):
    x = RNG.standard_normal((6, 5))

    def f(scale, translation):
        return fg.image.scale_and_translate(x, (7, 5), (0,), scale, translation, method)

    # Away from the kernels' knots, the weights are smooth in scale and translation.
    check_grads(f, (np.array([1.13]), np.array([0.37])), order=1, modes=["fwd", "rev"])


def test_vmap_and_jit_of_resize():
    xs = RNG.standard_normal((3, 5, 4))
    loop = np.stack([np.asarray(fg.image.resize(x, (8, 2), "cubic")) for x in xs])
    assert_allclose(fg.vmap(lambda x: fg.image.resize(x, (8, 2), "cubic"))(xs), loop)
    assert_allclose(fg.jit(lambda x: fg.image.resize(x, (8, 2), "cubic"))(xs[0]), loop[0])


def test_vmap_and_jit_over_translations():
    xs = RNG.standard_normal((3, 5, 4))
    translations = RNG.standard_normal((3, 1))

    def shift(t):
        return fg.image.scale_and_translate(xs[0], (5, 4), (1,), fnp.ones(1), t, "linear")

    loop = np.stack([np.asarray(shift(t)) for t in translations])
    assert_allclose(fg.vmap(shift)(translations), loop)
    assert_allclose(fg.jit(shift)(translations[1]), loop[1])
    nearest = fg.jit(lambda x: fg.image.resize(x, (2, 9), "nearest"))
    assert_allclose(nearest(xs[0]), reference_nearest(xs[0], (2, 9)))
