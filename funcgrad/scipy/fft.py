"""funcgrad.scipy.fft: discrete cosine transforms of types 1 to 4 over funcgrad.numpy.fft.

Each type is the real part of one FFT of twice the length (of 2 (n - 1) for type 1), with
twiddle factors before or after: no cosine matrix is formed. Complex input transforms its real
and imaginary parts separately. `norm` scales as SciPy's transforms do: "backward" (the
default) leaves the forward transform unscaled and divides the inverse by the length M of the
underlying FFT, "forward" the other way round, "ortho" both by sqrt(M); `orthogonalize`
(by default, with "ortho") also rescales the first (and for type 1 the last) terms so that
the transform's matrix is orthogonal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.numpy.fft import _resized
from funcgrad.numpy.shape_ops import canonicalize_axis

__all__ = ["dct", "dctn", "idct", "idctn"]

_NORMS = ("backward", "ortho", "forward")
_INVERSE_TYPE = {1: 1, 2: 3, 3: 2, 4: 4}


def _twiddle(angles: np.ndarray, dtype):
    """exp(-i angles) as a constant of the complex dtype matching `dtype`."""
    return fnp.asarray(np.exp(-1j * angles), dtype=dtypes.complex_dtype(dtype))


def _raw(x, type: int):
    """The unnormalized transform of real x along its last axis."""
    n = x.shape[-1]
    k = np.arange(n)
    if type == 1:
        spectrum = fnp.fft.rfft(x, n=2 * (n - 1))
        alternating = fnp.asarray((-1.0) ** k, dtype=x.dtype)
        return 2 * fnp.real(spectrum) - x[..., :1] - alternating * x[..., -1:]
    if type == 2:
        spectrum = fnp.fft.rfft(x, n=2 * n)[..., :n]
        return 2 * fnp.real(_twiddle(np.pi * k / (2 * n), x.dtype) * spectrum)
    spectrum = fnp.fft.fft(x * _twiddle(np.pi * k / (2 * n), x.dtype), n=2 * n)[..., :n]
    if type == 3:
        return 2 * fnp.real(spectrum) - x[..., :1]
    return 2 * fnp.real(_twiddle(np.pi * (2 * k + 1) / (4 * n), x.dtype) * spectrum)


def _edge_factors(n: int, type: int, dtype, before: bool):
    """The factors that orthogonalize a type's first (and type 1's last) terms: on the input
    (`before`) or on the output. None where the type leaves them alone."""
    factors = np.ones(n)
    if type == 1:
        edge = math.sqrt(2) if before else 1 / math.sqrt(2)
        factors[0] = factors[-1] = edge
    elif type == 2 and not before:
        factors[0] = 1 / math.sqrt(2)
    elif type == 3 and before:
        factors[0] = math.sqrt(2)
    else:
        return None
    return fnp.asarray(factors, dtype=dtype)


def _transform(name: str, x, type: int, n, axis: int, norm, orthogonalize, inverse: bool):
    if type not in _INVERSE_TYPE:
        raise ValueError(f"{name}: type must be 1, 2, 3 or 4, got {type!r}")
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise ValueError(f"{name}: norm must be one of {_NORMS} or None, got {norm!r}")
    orthogonalize = norm == "ortho" if orthogonalize is None else orthogonalize
    (x,) = promote_dtypes_inexact(x)
    if x.ndim == 0:
        raise ValueError(f"{name}: the input must have at least one axis, got a scalar")
    axis = canonicalize_axis(axis, x.ndim, name)
    x = fnp.moveaxis(x, axis, -1)
    if n is not None:
        if int(n) < 1:
            raise ValueError(f"{name}: the length n must be at least 1, got {n}")
        x = _resized(x, x.ndim - 1, int(n))
    length = x.shape[-1]
    minimum = 2 if type == 1 else 1
    if length < minimum:
        raise ValueError(f"{name}: type {type} needs at least {minimum} points, got {length}")
    if dtypes.is_complex(x.dtype):
        parts = (fnp.real(x), fnp.imag(x))
        real, imag = (
            _transform(name, p, type, None, -1, norm, orthogonalize, inverse) for p in parts
        )
        return fnp.moveaxis(lax.complex(real, imag), -1, axis)
    applied = _INVERSE_TYPE[type] if inverse else type
    if orthogonalize and (factors := _edge_factors(length, applied, x.dtype, True)) is not None:
        x = x * factors
    y = _raw(x, applied)
    if orthogonalize and (factors := _edge_factors(length, applied, x.dtype, False)) is not None:
        y = y * factors
    fft_length = 2 * (length - 1) if type == 1 else 2 * length
    unscaled = "forward" if inverse else "backward"
    if norm == "ortho":
        y = y / math.sqrt(fft_length)
    elif norm != unscaled:
        y = y / fft_length
    return fnp.moveaxis(y, -1, axis)


def dct(
    x, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None,
    overwrite_x: bool = False, workers=None, orthogonalize: bool | None = None,
) -> Array:  # fmt: skip
    """The discrete cosine transform of the given type along `axis`, x cropped or zero-padded
    to `n` points first. `overwrite_x` and `workers` are accepted and ignored."""
    return _transform("dct", x, type, n, axis, norm, orthogonalize, inverse=False)


def idct(
    x, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None,
    overwrite_x: bool = False, workers=None, orthogonalize: bool | None = None,
) -> Array:  # fmt: skip
    """The inverse of `dct` of the same type and norm: the transform of the inverse type
    (3 for 2, 2 for 3; types 1 and 4 are their own), scaled."""
    return _transform("idct", x, type, n, axis, norm, orthogonalize, inverse=True)


def _axes_and_sizes(name: str, x, s, axes):
    ndim = fnp.ndim(x)
    if axes is None:
        axes = tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    axes = tuple(canonicalize_axis(a, ndim, name) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{name}: repeated axis in {axes}")
    if s is None:
        s = (None,) * len(axes)
    elif isinstance(s, int):
        s = (s,)
    if len(s) != len(axes):
        raise ValueError(f"{name}: s has {len(s)} entries for {len(axes)} axes")
    return axes, s


def _transform_n(name, x, type, s, axes, norm, orthogonalize, inverse):
    x = fnp.asarray(x)
    axes, s = _axes_and_sizes(name, x, s, axes)
    for axis, n in zip(axes, s):
        x = _transform(name, x, type, n, axis, norm, orthogonalize, inverse)
    return x


def dctn(
    x, type: int = 2, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
    norm: str | None = None, overwrite_x: bool = False, workers=None,
    orthogonalize: bool | None = None,
) -> Array:  # fmt: skip
    """The discrete cosine transform along each of `axes` (all by default, or the last len(s)
    when only `s` is given), each cropped or zero-padded to its entry of `s`."""
    return _transform_n("dctn", x, type, s, axes, norm, orthogonalize, inverse=False)


def idctn(
    x, type: int = 2, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
    norm: str | None = None, overwrite_x: bool = False, workers=None,
    orthogonalize: bool | None = None,
) -> Array:  # fmt: skip
    """The inverse of `dctn` of the same type and norm."""
    return _transform_n("idctn", x, type, s, axes, norm, orthogonalize, inverse=True)
