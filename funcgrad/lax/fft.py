"""The `fft` primitive: discrete Fourier transforms over an array's trailing axes.

One primitive with four kinds, as in JAX's lax.fft: FFT and IFFT (complex to complex, the
inverse scaled by 1/N), RFFT (real to the non-negative frequencies, the last axis of length n
becoming n // 2 + 1) and IRFFT (back, reading those as the halves of a Hermitian spectrum).
All four are linear, so differentiation needs only their transposes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters import ad, batching
from funcgrad.lax import elementwise, shapes
from funcgrad.lax.base import asarray

__all__ = ["FftType", "fft"]


class FftType(enum.IntEnum):
    FFT = 0
    IFFT = 1
    RFFT = 2
    IRFFT = 3


fft_p = Primitive("fft")


@fft_p.def_abstract_eval
def _fft_abstract_eval(x: ShapedArray, *, fft_type: FftType, fft_lengths: tuple[int, ...]):
    k = len(fft_lengths)
    if not 1 <= k <= 3 or x.ndim < k:
        raise ValueError(
            f"fft transforms 1 to 3 trailing axes of an array of at least that rank; got "
            f"fft_lengths {fft_lengths} for shape {x.shape}"
        )
    if any(n < 1 for n in fft_lengths):
        raise ValueError(f"fft: every length in fft_lengths must be at least 1, got {fft_lengths}")
    leading, trailing = x.shape[:-k], x.shape[-k:]
    if fft_type == FftType.RFFT:
        if not dtypes.is_float(x.dtype) or x.dtype not in (dtypes.float32, dtypes.float64):
            raise TypeError(f"fft: RFFT takes float32 or float64 operands, got {x.dtype.name}")
        _check_lengths(trailing, fft_lengths, x.shape)
        return ShapedArray(
            leading + fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,), dtypes.complex_dtype(x.dtype)
        )
    if not dtypes.is_complex(x.dtype):
        raise TypeError(f"fft: {fft_type.name} takes complex operands, got {x.dtype.name}")
    if fft_type == FftType.IRFFT:
        _check_lengths(trailing, fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,), x.shape)
        return ShapedArray(leading + fft_lengths, dtypes.real_dtype(x.dtype))
    _check_lengths(trailing, fft_lengths, x.shape)
    return ShapedArray(x.shape, x.dtype)


def _check_lengths(trailing, expected, shape) -> None:
    if tuple(trailing) != tuple(expected):
        raise ValueError(
            f"fft: the trailing axes of an operand of shape {shape} must have lengths "
            f"{tuple(expected)}"
        )


@fft_p.def_impl
def _fft_impl(x, *, fft_type, fft_lengths):
    axes = tuple(range(-len(fft_lengths), 0))
    x = np.asarray(x)
    if fft_type == FftType.FFT:
        out, dtype = np.fft.fftn(x, fft_lengths, axes), x.dtype
    elif fft_type == FftType.IFFT:
        out, dtype = np.fft.ifftn(x, fft_lengths, axes), x.dtype
    elif fft_type == FftType.RFFT:
        out, dtype = np.fft.rfftn(x, fft_lengths, axes), dtypes.complex_dtype(x.dtype)
    else:
        out, dtype = np.fft.irfftn(x, fft_lengths, axes), dtypes.real_dtype(x.dtype)
    return out.astype(dtype)


def _fft_transpose(ct, x, *, fft_type, fft_lengths):
    """The transposes (no conjugation: the pullback is the transpose of the derivative).

    The DFT matrix is symmetric, so FFT and IFFT are their own transposes. RFFT keeps the
    first n // 2 + 1 rows of the full transform of a real input: its transpose pads the
    cotangent with zeros to the full spectrum, transforms it and keeps the real part. IRFFT
    weighs each stored frequency once or twice (its mirror image is implied) and then takes
    the inverse transform's real part: its transpose is the RFFT of the cotangent, scaled by
    those weights over N, conjugated (the real part pairs with the conjugate)."""
    if fft_type in (FftType.FFT, FftType.IFFT):
        return [fft_p.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)]
    n = fft_lengths[-1]
    if fft_type == FftType.RFFT:
        config = [(0, 0, 0)] * (ct.ndim - 1) + [(0, n - ct.shape[-1], 0)]
        full = shapes.pad(ct, elementwise._const(ct, 0), config)
        spectrum = fft_p.bind(full, fft_type=FftType.FFT, fft_lengths=fft_lengths)
        return [elementwise.real(spectrum)]
    spectrum = fft_p.bind(ct, fft_type=FftType.RFFT, fft_lengths=fft_lengths)
    stored = spectrum.shape[-1]
    weights = np.full(stored, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    weights /= math.prod(fft_lengths)
    scale = shapes.broadcast_in_dim(
        asarray(weights.astype(spectrum.dtype)), spectrum.shape, (spectrum.ndim - 1,)
    )
    return [elementwise.conj(elementwise.mul(spectrum, scale))]


ad.deflinear(fft_p, _fft_transpose)


def _fft_batch(values, dims, *, fft_type, fft_lengths):
    (x,), (dim,) = values, dims
    return fft_p.bind(batching.moveaxis(x, dim, 0), fft_type=fft_type, fft_lengths=fft_lengths), 0


fft_p.def_batch(_fft_batch)


def fft(x, fft_type: FftType | str, fft_lengths: Sequence[int]):
    """The transform `fft_type` over the trailing len(fft_lengths) axes of `x`."""
    if isinstance(fft_type, str):
        fft_type = FftType[fft_type.upper()]
    return fft_p.bind(
        asarray(x), fft_type=FftType(fft_type), fft_lengths=tuple(int(n) for n in fft_lengths)
    )
