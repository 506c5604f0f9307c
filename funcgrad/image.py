"""jax.image: resizing, scaling and translating images by separable resampling kernels.

Resampling along one axis is a linear map: output pixel i is a weighted sum of the input pixels
near the point it samples. Each spatial axis gets its own weight matrix (input size x output
size), computed from the kernel in array code, and the image is contracted with one matrix per
axis. There is no primitive of its own, so grad (with respect to the image, and to the scale and
translation of `scale_and_translate`, which the weights depend on smoothly), vmap and jit apply.

Conventions (JAX's, which follow TensorFlow and Pillow): pixel centres sit at half-integer
coordinates, so output pixel i samples the input at (i + 0.5) / scale - translation / scale -
0.5; when downsampling with `antialias` the kernel is stretched by 1 / scale, so it low-pass
filters as it interpolates; each output pixel's weights are normalised to sum to one, and an
output pixel whose sample point falls outside the input is zero.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import dtypes
from funcgrad import numpy as fnp
from funcgrad.lax import Precision

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    """The resampling kernels.

    NEAREST: the input pixel whose cell holds the sample point (only `resize`).
    LINEAR: the triangle kernel, max(0, 1 - |x|) (bilinear, trilinear, ...).
    LANCZOS3, LANCZOS5: the windowed sinc a sin(pi x) sin(pi x / a) / (pi x)^2 for |x| <= a.
    CUBIC: Keys' cubic convolution kernel with a = -0.5 (what TensorFlow, Pillow and PyTorch
      use when antialiasing).
    CUBIC_PYTORCH: PyTorch's and OpenCV's cubic kernel (a = -0.75) with the image's edge
      pixels repeated, when `antialias` is False; with antialiasing it is CUBIC.
    AREA: each output pixel averages the input pixels its cell covers, weighted by the overlap
      (a box filter when upsampling).
    """

    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4
    CUBIC_PYTORCH = 5
    AREA = 6

    @staticmethod
    def from_string(s: str) -> ResizeMethod:
        method = _NAMES.get(s)
        if method is None:
            raise ValueError(f'Unknown resize method "{s}"; the methods are {sorted(_NAMES)}')
        return method


_NAMES = {
    "nearest": ResizeMethod.NEAREST,
    "linear": ResizeMethod.LINEAR,
    "bilinear": ResizeMethod.LINEAR,
    "trilinear": ResizeMethod.LINEAR,
    "triangle": ResizeMethod.LINEAR,
    "lanczos3": ResizeMethod.LANCZOS3,
    "lanczos5": ResizeMethod.LANCZOS5,
    "cubic": ResizeMethod.CUBIC,
    "bicubic": ResizeMethod.CUBIC,
    "tricubic": ResizeMethod.CUBIC,
    "cubic-pytorch": ResizeMethod.CUBIC_PYTORCH,
    "bicubic-pytorch": ResizeMethod.CUBIC_PYTORCH,
    "area": ResizeMethod.AREA,
}


# ---------------------------------------------------------------------------------------------
# Kernels, functions of the distance |x| >= 0 in input pixels


def _triangle(x):
    return fnp.maximum(0.0, 1.0 - x)


def _lanczos(radius: float) -> Callable:
    def kernel(x):
        # Near 0 the quotient is 0/0; its limit is 1 (and its slope 0, so grad stays finite).
        safe = fnp.where(x > 1e-3, x, 1.0)
        value = radius * fnp.sin(np.pi * safe) * fnp.sin(np.pi * safe / radius)
        value = fnp.where(x > 1e-3, value / (np.pi**2 * safe**2), 1.0)
        return fnp.where(x > radius, 0.0, value)

    return kernel


def _cubic(a: float) -> Callable:
    """Keys' cubic convolution kernel with parameter a."""

    def kernel(x):
        near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
        return fnp.where(x >= 2.0, 0.0, fnp.where(x >= 1.0, far, near))

    return kernel


# (radius, kernel) per method; AREA has no kernel of the distance.
_KERNELS = {
    ResizeMethod.LINEAR: (1, _triangle),
    ResizeMethod.LANCZOS3: (3, _lanczos(3.0)),
    ResizeMethod.LANCZOS5: (5, _lanczos(5.0)),
    ResizeMethod.CUBIC: (2, _cubic(-0.5)),
    ResizeMethod.CUBIC_PYTORCH: (2, _cubic(-0.75)),
    ResizeMethod.AREA: (1, None),
}


def _weights(
    input_size: int,
    output_size: int,
    scale,
    translation,
    method: ResizeMethod,
    antialias: bool,
    edge_padding: bool,
    dtype: np.dtype,
):
    """The (input_size, output_size) matrix taking one axis of the input to the output,
    computed in `dtype`."""
    radius, kernel = _KERNELS[method]
    inv_scale = 1.0 / fnp.asarray(scale, dtype)
    # Centre of each output pixel, in input coordinates (pixel j covers [j - 0.5, j + 0.5]).
    sample = (fnp.arange(output_size, dtype=dtype) + 0.5) * inv_scale - translation * inv_scale
    sample = sample - 0.5
    pad = radius if edge_padding else 0
    positions = np.arange(-pad, input_size + pad)
    if kernel is None:
        # The overlap of output cell [left, left + 1/scale] with input cell [j, j + 1].
        left = fnp.arange(output_size, dtype=dtype) * inv_scale - translation * inv_scale
        right = left + inv_scale
        cells = positions.astype(dtype)[:, None]
        weights = fnp.maximum(
            0.0, fnp.minimum(right[None, :], cells + 1.0) - fnp.maximum(left[None, :], cells)
        )
    else:
        stretch = fnp.maximum(inv_scale, 1.0) if antialias else 1.0
        distance = fnp.abs(sample[None, :] - positions.astype(dtype)[:, None]) / stretch
        weights = kernel(distance)
    if edge_padding:
        # The weights of the pixels beyond the edges go to the edge pixels (a constant 0/1
        # matrix folding each padded position onto its clamped one).
        fold = np.zeros((input_size, positions.size), dtype)
        fold[np.clip(positions, 0, input_size - 1), np.arange(positions.size)] = 1.0
        weights = fnp.asarray(fold) @ weights
    total = fnp.sum(weights, axis=0, keepdims=True)
    tiny = 1000.0 * float(np.finfo(np.float32).eps)
    weights = fnp.where(fnp.abs(total) > tiny, weights / fnp.where(total != 0, total, 1.0), 0.0)
    if edge_padding:
        return weights
    inside = (sample >= -0.5) & (sample <= input_size - 0.5)
    return fnp.where(inside[None, :], weights, 0.0)


def _contract(image, weights: list, spatial_dims: Sequence[int], precision):
    """Apply each axis's weight matrix along its axis."""
    for d, w in zip(spatial_dims, weights):
        out = fnp.tensordot(image, w.astype(image.dtype), axes=([d], [0]), precision=precision)
        image = fnp.moveaxis(out, -1, d)
    return image


def _method(method: str | ResizeMethod) -> ResizeMethod:
    if isinstance(method, str):
        return ResizeMethod.from_string(method)
    if not isinstance(method, ResizeMethod):
        raise TypeError(f"method must be a string or a ResizeMethod, got {method!r}")
    return method


def _checked_shape(image, shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if len(shape) != image.ndim:
        raise ValueError(
            "shape must have one entry per dimension of the image; got shape "
            f"{shape} for an image of shape {image.shape}"
        )
    if any(s < 0 for s in shape):
        raise ValueError(f"shape must not have negative entries, got {shape}")
    return shape


def _as_inexact(x):
    x = fnp.asarray(x)
    if dtypes.is_inexact(x.dtype):
        return x
    return x.astype(dtypes.default_float)


def _resize_nearest(image, shape: tuple[int, ...]):
    for d, (m, n) in enumerate(zip(image.shape, shape)):
        if m == n:
            continue
        # Computed in float32, as JAX does, so that ties round the same way.
        centres = (np.arange(n, dtype=np.float32) + np.float32(0.5)) * np.float32(m)
        indices = np.floor(centres / np.float32(n)).astype(np.int32)
        image = fnp.take(image, fnp.asarray(indices), axis=d)
    return image


def resize(
    image,
    shape: Sequence[int],
    method: str | ResizeMethod,
    antialias: bool = True,
    precision=Precision.HIGHEST,
):
    """The image resampled to `shape` (one entry per dimension; any dimension may change).

    `method` is a `ResizeMethod` or its name ("nearest", "linear"/"bilinear"/"trilinear",
    "cubic"/"bicubic"/"tricubic", "lanczos3", "lanczos5", "cubic-pytorch", "area"). Every
    method but NEAREST returns a floating-point image (integer images are converted) and, with
    `antialias`, filters when downsampling. Dimensions whose size does not change are left as
    they are (every kernel interpolates: it reproduces the input at its own pixel centres).
    """
    image = fnp.asarray(image)
    shape = _checked_shape(image, shape)
    method = _method(method)
    for d, (m, n) in enumerate(zip(image.shape, shape)):
        if m == 0 and n > 0:
            raise ValueError(
                f"resize: dimension {d} of the image is empty, so there is nothing to resample "
                f"to size {n}; got an image of shape {image.shape} and shape {shape}"
            )
    if method is ResizeMethod.NEAREST:
        return _resize_nearest(image, shape)
    image = _as_inexact(image)
    spatial_dims = [d for d in range(image.ndim) if image.shape[d] != shape[d]]
    scale = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in spatial_dims]
    # The weights in float32, or in float64 for a float64 image, whose precision they keep.
    dtype = np.dtype(np.float64 if np.dtype(image.dtype).itemsize * 8 in (64, 128) else np.float32)
    translation = [0.0] * len(spatial_dims)
    return _scale_and_translate(
        image, shape, spatial_dims, scale, translation, method, antialias, precision, dtype
    )


def scale_and_translate(
    image,
    shape: Sequence[int],
    spatial_dims: Sequence[int],
    scale,
    translation,
    method: str | ResizeMethod,
    antialias: bool = True,
    precision=Precision.HIGHEST,
):
    """Resample `image` to `shape`, mapping input point x to output point x * scale +
    translation along each of `spatial_dims` (scale and translation hold one entry per spatial
    dimension and may be traced: the result is differentiable in them).

    Coordinates are those of pixel edges: pixel j covers [j, j + 1], so its centre is j + 0.5.
    The methods are those of `resize` except NEAREST.
    """
    image = _as_inexact(image)
    shape = _checked_shape(image, shape)
    method = _method(method)
    if method is ResizeMethod.NEAREST:
        raise ValueError(
            "nearest-neighbour resampling is not available in scale_and_translate; use resize"
        )
    spatial_dims = [d % image.ndim for d in spatial_dims]
    for d in range(image.ndim):
        if d not in spatial_dims and shape[d] != image.shape[d]:
            raise ValueError(
                f"dimension {d} is not among spatial_dims {spatial_dims}, so its size cannot "
                f"change: the image has shape {image.shape}, the output {shape}"
            )
    scale, translation = fnp.asarray(scale), fnp.asarray(translation)
    if not dtypes.is_inexact(scale.dtype):
        scale = scale.astype(dtypes.default_float)
    if not dtypes.is_inexact(translation.dtype):
        translation = translation.astype(dtypes.default_float)
    if scale.shape != (len(spatial_dims),) or translation.shape != (len(spatial_dims),):
        raise ValueError(
            f"scale and translation need one entry per spatial dimension ({len(spatial_dims)}); "
            f"got shapes {scale.shape} and {translation.shape}"
        )
    dtype = np.dtype(fnp.result_type(scale, translation))
    scales = [scale[i].astype(dtype) for i in range(len(spatial_dims))]
    translations = [translation[i].astype(dtype) for i in range(len(spatial_dims))]
    return _scale_and_translate(
        image, shape, spatial_dims, scales, translations, method, antialias, precision, dtype
    )


def _scale_and_translate(
    image, shape, spatial_dims, scales, translations, method, antialias, precision, dtype
):
    if method is ResizeMethod.CUBIC_PYTORCH and antialias:
        method = ResizeMethod.CUBIC
    edge_padding = method is ResizeMethod.CUBIC_PYTORCH
    weights = [
        _weights(image.shape[d], shape[d], s, t, method, antialias, edge_padding, dtype)
        for d, s, t in zip(spatial_dims, scales, translations)
    ]
    return _contract(image, weights, spatial_dims, precision)
