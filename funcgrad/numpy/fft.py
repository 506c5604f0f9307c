"""funcgrad.numpy.fft: NumPy's discrete Fourier transforms over the `fft` primitive.

Each function brings the transformed axes to the end, pads or crops them to the requested
lengths, applies `lax.fft` and scales by the normalization: "backward" (the default: the
inverse divides by n), "ortho" (both by sqrt(n)) or "forward" (the forward transform divides).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes, lax
from funcgrad.lax.fft import FftType
from funcgrad.numpy._promotion import convert, to_array
from funcgrad.numpy.shape_ops import canonicalize_axis

__all__ = [
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
]

_NORMS = ("backward", "ortho", "forward")


def _scale(norm: str | None, n: int, inverse: bool) -> float:
    """The factor applied after `lax.fft` (whose inverse already divides by n)."""
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise ValueError(f"fft: norm must be one of {_NORMS} or None, got {norm!r}")
    if norm == "backward":
        return 1.0
    if norm == "ortho":
        return math.sqrt(n) if inverse else 1 / math.sqrt(n)
    return float(n) if inverse else 1 / n


def _resized(x, axis: int, size: int):
    """`x` cropped or zero-padded to `size` along `axis`."""
    have = x.shape[axis]
    if size < have:
        return lax.slice_in_dim(x, 0, size, 1, axis)
    if size > have:
        config = [(0, 0, 0)] * x.ndim
        config[axis] = (0, size - have, 0)
        return lax.pad(x, lax.full((), 0, x.dtype), config)
    return x


def _axes_and_lengths(name: str, x, s, axes, default_all: bool, fft_type: FftType):
    """The transformed axes and their lengths. Lengths taken from the input need data on
    every transformed axis (an inverse real transform's only on its last); lengths given in
    `s` zero-pad even an empty axis."""
    if axes is None:
        if s is not None:
            axes = tuple(range(x.ndim - len(s), x.ndim))
        else:
            axes = tuple(range(x.ndim)) if default_all else (x.ndim - 1,)
    axes = tuple(canonicalize_axis(a, x.ndim, name) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{name}: repeated axis in {axes}")
    if s is None:
        for i, a in enumerate(axes):
            if x.shape[a] == 0 and (fft_type != FftType.IRFFT or i == len(axes) - 1):
                raise ValueError(f"{name}: axis {a} has length 0; there is nothing to transform")
        s = tuple(x.shape[a] for a in axes)
    s = tuple(int(n) for n in s)
    if len(s) != len(axes):
        raise ValueError(f"{name}: s has {len(s)} entries for {len(axes)} axes")
    for a, n in zip(axes, s):
        if n < 1:
            raise ValueError(
                f"{name}: the transform length n (or s) must be at least 1, got {n} for axis {a}"
            )
    return axes, s


# The most axes one `lax.fft` transforms; more are transformed in groups.
_MOST_AXES = 3


def _transform(name: str, a, s, axes, norm, fft_type: FftType, default_all: bool):
    x = to_array(a)
    if x.ndim == 0:
        raise ValueError(f"{name}: the input must have at least one axis, got a scalar")
    if axes is not None and len(axes) == 0 and (s is None or len(s) == 0):
        if fft_type in (FftType.RFFT, FftType.IRFFT):
            raise ValueError(f"{name}: needs at least one axis to transform, got axes=()")
        # No axis transformed: the input as a complex array, as NumPy returns it unchanged.
        return convert(x, dtypes.complex_dtype(dtypes.real_dtype(dtypes.to_inexact(x.dtype))))
    axes, s = _axes_and_lengths(name, x, s, axes, default_all, fft_type)
    if len(axes) > _MOST_AXES:
        return _grouped(name, x, s, axes, norm, fft_type)
    if fft_type == FftType.RFFT:
        if dtypes.is_complex(x.dtype):
            raise TypeError(f"{name} takes real input, got {x.dtype.name}")
        wide = dtypes.to_inexact(x.dtype) == dtypes.float64
        x = convert(x, dtypes.float64 if wide else dtypes.float32)
    else:
        x = convert(x, dtypes.complex_dtype(dtypes.real_dtype(dtypes.to_inexact(x.dtype))))
    # Bring the axes to the end, in the order given, and size them.
    rest = [d for d in range(x.ndim) if d not in axes]
    order = rest + list(axes)
    x = lax.transpose(x, tuple(order)) if order != list(range(x.ndim)) else x
    k = len(axes)
    for i, n in enumerate(s):
        axis = x.ndim - k + i
        stored = n // 2 + 1 if fft_type == FftType.IRFFT and i == k - 1 else n
        x = _resized(x, axis, stored)
    out = lax.fft(x, fft_type, s)
    factor = _scale(norm, math.prod(s), fft_type in (FftType.IFFT, FftType.IRFFT))
    if factor != 1.0:
        out = lax.mul(out, lax.full((), factor, out.dtype))
    inverse_order = [order.index(d) for d in range(len(order))]
    return lax.transpose(out, tuple(inverse_order)) if order != list(range(len(order))) else out


def _grouped(name: str, x, s, axes, norm, fft_type: FftType):
    """A transform of more axes than one `lax.fft` takes, as complex transforms of the
    leading axes and one of the last three: a real transform's real side (the input of rfft,
    the output of irfft) is its last axis, so the complex leading axes go after an rfft and
    before an irfft. Each group scales by its own lengths, whose product is the whole."""
    lead_axes, lead_s = axes[:-_MOST_AXES], s[:-_MOST_AXES]
    last_axes, last_s = axes[-_MOST_AXES:], s[-_MOST_AXES:]
    complex_type = FftType.IFFT if fft_type in (FftType.IFFT, FftType.IRFFT) else FftType.FFT
    if fft_type == FftType.IRFFT:
        x = _transform(name, x, lead_s, lead_axes, norm, complex_type, True)
        return _transform(name, x, last_s, last_axes, norm, fft_type, True)
    x = _transform(name, x, last_s, last_axes, norm, fft_type, True)
    return _transform(name, x, lead_s, lead_axes, norm, complex_type, True)


def fft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    return _transform("fft", a, None if n is None else (n,), (axis,), norm, FftType.FFT, False)


def ifft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    return _transform("ifft", a, None if n is None else (n,), (axis,), norm, FftType.IFFT, False)


def rfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    return _transform("rfft", a, None if n is None else (n,), (axis,), norm, FftType.RFFT, False)


def irfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The inverse of rfft; the output length is `n`, by default 2 (m - 1) for m inputs."""
    a = to_array(a)
    if n is None:
        n = 2 * (a.shape[axis] - 1) if a.ndim else 0
    return _transform("irfft", a, (n,), (axis,), norm, FftType.IRFFT, False)


def fftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm=None):
    return _transform("fftn", a, s, axes, norm, FftType.FFT, True)


def ifftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm=None):
    return _transform("ifftn", a, s, axes, norm, FftType.IFFT, True)


def rfftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm=None):
    return _transform("rfftn", a, s, axes, norm, FftType.RFFT, True)


def irfftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm=None):
    a = to_array(a)
    if s is None and (a.ndim == 0 or (axes is not None and len(axes) == 0)):
        raise ValueError(
            f"irfftn: needs at least one axis to transform, got shape {a.shape} and axes {axes}"
        )
    if s is None:
        last = (a.ndim - 1) if axes is None else int(axes[-1]) % a.ndim
        chosen = range(a.ndim) if axes is None else [int(x) % a.ndim for x in axes]
        s = [a.shape[d] for d in chosen]
        s[-1] = 2 * (a.shape[last] - 1)
    return _transform("irfftn", a, s, axes, norm, FftType.IRFFT, True)


def fft2(a, s=None, axes: Sequence[int] = (-2, -1), norm=None):
    return fftn(a, s, axes, norm)


def ifft2(a, s=None, axes: Sequence[int] = (-2, -1), norm=None):
    return ifftn(a, s, axes, norm)


def rfft2(a, s=None, axes: Sequence[int] = (-2, -1), norm=None):
    return rfftn(a, s, axes, norm)


def irfft2(a, s=None, axes: Sequence[int] = (-2, -1), norm=None):
    return irfftn(a, s, axes, norm)


_SWAPPED = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


def hfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The transform of a signal with Hermitian symmetry, given by its first half: real."""
    a = to_array(a)
    if norm not in _SWAPPED:
        raise ValueError(f"hfft: norm must be one of {_NORMS} or None, got {norm!r}")
    conjugate = lax.conj(a) if dtypes.is_complex(a.dtype) else a
    return irfft(conjugate, n, axis, _SWAPPED[norm])


def ihfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The inverse of hfft: the first half of a Hermitian spectrum."""
    if norm not in _SWAPPED:
        raise ValueError(f"ihfft: norm must be one of {_NORMS} or None, got {norm!r}")
    return lax.conj(rfft(a, n, axis, _SWAPPED[norm]))


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None):
    """The sample frequencies of an n-point transform with sample spacing d."""
    from funcgrad.numpy.creation import asarray

    values = np.fft.fftfreq(_transform_length("fftfreq", n), d)
    return asarray(values, dtype=dtype or dtypes.default_float, device=device)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None):
    from funcgrad.numpy.creation import asarray

    values = np.fft.rfftfreq(_transform_length("rfftfreq", n), d)
    return asarray(values, dtype=dtype or dtypes.default_float, device=device)


def _transform_length(name: str, n) -> int:
    """n as an int, refused below 1 by name (NumPy divides by it: ZeroDivisionError)."""
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"{name}: the transform length n must be at least 1, got {n}")
    return n


def _shift(x, axes, sign: int):
    from funcgrad.numpy.shape_ops import roll

    x = to_array(x)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    shifts = tuple(sign * (x.shape[ax] // 2) for ax in axes)
    return roll(x, shifts, axes)


def fftshift(x, axes: int | Sequence[int] | None = None):
    """The zero frequency moved to the middle."""
    return _shift(x, axes, 1)


def ifftshift(x, axes: int | Sequence[int] | None = None):
    """The inverse of fftshift."""
    return _shift(x, axes, -1)
