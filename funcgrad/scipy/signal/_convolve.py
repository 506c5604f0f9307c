"""Convolution and correlation of N-d arrays, directly (one `conv_general_dilated`) or through
the FFT, and `detrend`.

Integer and boolean inputs compute in the default float. A direct convolution keeps the first
input as the convolved signal and the flipped second as the kernel, so `full` and `same` never
need the inputs in any order; `valid` convolves the larger into the smaller, as convolution
commutes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.numpy._promotion import broadcast_shapes, promote_dtypes_inexact
from funcgrad.numpy.shape_ops import canonicalize_axes, canonicalize_axis

_MODES = ("full", "same", "valid")


def _check_mode(name: str, mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"{name}: mode must be one of {_MODES}, got {mode!r}")


def _inexact_operands(name: str, in1, in2) -> tuple[Array, Array]:
    in1, in2 = promote_dtypes_inexact(in1, in2)
    if in1.ndim != in2.ndim:
        raise ValueError(
            f"{name}: in1 and in2 must have the same number of axes, got shapes "
            f"{in1.shape} and {in2.shape}"
        )
    if in1.size == 0 or in2.size == 0:
        raise ValueError(f"{name}: needs non-empty inputs, got shapes {in1.shape} and {in2.shape}")
    return in1, in2


def _valid_order(name: str, shape1, shape2) -> bool:
    """Whether 'valid' mode takes the second input as the larger one (and the first as the
    kernel). One of them must be at least as large as the other along every axis."""
    if all(a >= b for a, b in zip(shape1, shape2)):
        return False
    if all(a <= b for a, b in zip(shape1, shape2)):
        return True
    raise ValueError(
        f"{name}: in 'valid' mode one input must be at least as large as the other along every "
        f"axis, got shapes {tuple(shape1)} and {tuple(shape2)}"
    )


def _direct(signal, kernel, padding, precision):
    """The convolution of `signal` with `kernel` over every axis, `signal` padded by `padding`
    (pairs of non-negative widths) and the kernel sliding over it without leaving it."""
    flipped = lax.rev(kernel, tuple(range(kernel.ndim)))
    out = lax.conv_general_dilated(
        signal[None, None],
        flipped[None, None],
        (1,) * signal.ndim,
        padding,
        precision=precision,
    )
    return out[0, 0]


def _convolve_direct(name: str, in1, in2, mode: str, precision):
    _check_mode(name, mode)
    in1, in2 = _inexact_operands(name, in1, in2)
    if in1.ndim == 0:
        return in1 * in2
    if mode == "valid":
        if _valid_order(name, in1.shape, in2.shape):
            in1, in2 = in2, in1
        padding = [(0, 0)] * in1.ndim
    elif mode == "full":
        padding = [(k - 1, k - 1) for k in in2.shape]
    else:
        # The middle in1.shape entries of the full convolution, starting at (k - 1) // 2.
        padding = [(k - 1 - (k - 1) // 2, (k - 1) // 2) for k in in2.shape]
    return _direct(in1, in2, padding, precision)


def convolve(in1, in2, mode: str = "full", method: str = "auto", precision=None) -> Array:
    """The N-d convolution of in1 and in2 (of the same number of axes). `method` "fft" goes
    through `fftconvolve`; "auto" and "direct" convolve directly."""
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method not in ("auto", "direct"):
        raise ValueError(f"convolve: method must be 'auto', 'direct' or 'fft', got {method!r}")
    return _convolve_direct("convolve", in1, in2, mode, precision)


def correlate(in1, in2, mode: str = "full", method: str = "auto", precision=None) -> Array:
    """The N-d cross-correlation z[k] = sum_n in1[n + k] conj(in2[n]), offset as SciPy's:
    the convolution of in1 with in2 reversed and conjugated."""
    in2 = fnp.asarray(in2)
    reversed_conj = fnp.conj(lax.rev(in2, tuple(range(in2.ndim))))
    return convolve(in1, reversed_conj, mode=mode, method=method, precision=precision)


# ---------------------------------------------------------------------------------------------
# Two dimensions with a boundary rule

# boundary -> the padding mode of funcgrad.numpy.pad that extends in1 by it
_BOUNDARY_PADS = {
    "fill": "constant",
    "pad": "constant",
    "wrap": "wrap",
    "circular": "wrap",
    "symm": "symmetric",
    "symmetric": "symmetric",
}


def _convolve_2d(name: str, in1, in2, mode: str, boundary: str, fillvalue, precision, same_start):
    """The 2-d convolution of in1 with in2, in1 extended by `boundary`; mode "same" keeps the
    full result's entries from `same_start(k)` on along an axis where the kernel is k long."""
    _check_mode(name, mode)
    if boundary not in _BOUNDARY_PADS:
        raise ValueError(
            f"{name}: boundary must be one of {sorted(_BOUNDARY_PADS)}, got {boundary!r}"
        )
    in1, in2 = _inexact_operands(name, in1, in2)
    if in1.ndim != 2:
        raise ValueError(f"{name}: needs 2-d inputs, got shapes {in1.shape} and {in2.shape}")
    if mode == "valid":
        return _convolve_direct(name, in1, in2, mode, precision)
    starts = [0 if mode == "full" else same_start(k) for k in in2.shape]
    widths = [
        (k - 1 - start, start if mode == "same" else k - 1) for k, start in zip(in2.shape, starts)
    ]
    pad_mode = _BOUNDARY_PADS[boundary]
    if pad_mode == "constant":
        fill = fnp.asarray(fillvalue, dtype=in1.dtype)
        extended = lax.pad(in1, fill, [(lo, hi, 0) for lo, hi in widths])
    else:
        extended = fnp.pad(in1, widths, mode=pad_mode)
    return _direct(extended, in2, [(0, 0), (0, 0)], precision)


def convolve2d(
    in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0, precision=None
) -> Array:
    """The 2-d convolution of in1 and in2, in1 extended beyond its edges by `boundary`: "fill"
    (with `fillvalue`), "wrap" (periodically) or "symm" (mirrored, the edge repeated)."""
    return _convolve_2d(
        "convolve2d", in1, in2, mode, boundary, fillvalue, precision, lambda k: (k - 1) // 2
    )


def correlate2d(
    in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0, precision=None
) -> Array:
    """The 2-d cross-correlation of in1 and in2, in1 extended beyond its edges by `boundary`.
    Its "same" window starts at k // 2 of the full result, one later than convolve2d's for an
    even kernel length k; in "valid" mode with in2 the larger, the result is conjugated."""
    in1, in2 = fnp.asarray(in1), fnp.asarray(in2)
    reversed_conj = fnp.conj(lax.rev(in2, tuple(range(in2.ndim))))
    out = _convolve_2d(
        "correlate2d", in1, reversed_conj, mode, boundary, fillvalue, precision, lambda k: k // 2
    )
    if mode == "valid" and _valid_order("correlate2d", in1.shape, in2.shape):
        return fnp.conj(out)
    return out


# ---------------------------------------------------------------------------------------------
# Through the FFT


def fftconvolve(in1, in2, mode: str = "full", axes: int | Sequence[int] | None = None) -> Array:
    """The convolution of in1 and in2 over `axes` (all by default) through the FFT; along the
    other axes the inputs broadcast against each other."""
    _check_mode("fftconvolve", mode)
    in1, in2 = _inexact_operands("fftconvolve", in1, in2)
    if in1.ndim == 0:
        return in1 * in2
    axes = (
        tuple(range(in1.ndim)) if axes is None else canonicalize_axes(axes, in1.ndim, "fftconvolve")
    )
    if len(set(axes)) != len(axes):
        raise ValueError(f"fftconvolve: repeated axis in {axes}")
    others = [a for a in range(in1.ndim) if a not in axes]
    try:
        broadcast_shapes(tuple(in1.shape[a] for a in others), tuple(in2.shape[a] for a in others))
    except ValueError:
        raise ValueError(
            f"fftconvolve: shapes {in1.shape} and {in2.shape} do not broadcast along the axes "
            f"{tuple(others)} that are not convolved"
        ) from None
    shape1 = [in1.shape[a] for a in axes]
    shape2 = [in2.shape[a] for a in axes]
    if mode == "valid":
        _valid_order("fftconvolve", shape1, shape2)
    lengths = [n1 + n2 - 1 for n1, n2 in zip(shape1, shape2)]
    if dtypes.is_complex(in1.dtype):
        spectrum = fnp.fft.fftn(in1, lengths, axes) * fnp.fft.fftn(in2, lengths, axes)
        full = fnp.fft.ifftn(spectrum, lengths, axes)
    else:
        spectrum = fnp.fft.rfftn(in1, lengths, axes) * fnp.fft.rfftn(in2, lengths, axes)
        full = fnp.fft.irfftn(spectrum, lengths, axes)
    for axis, n1, n2, length in zip(axes, shape1, shape2, lengths):
        size = {"full": length, "same": n1, "valid": abs(n1 - n2) + 1}[mode]
        start = (length - size) // 2
        full = lax.slice_in_dim(full, start, start + size, 1, axis)
    return full


# ---------------------------------------------------------------------------------------------
# Trend removal


def detrend(data, axis: int = -1, type: str = "linear", bp=0, overwrite_data: bool = False):
    """`data` less its mean ("constant") or less its least-squares line ("linear") along
    `axis`, the line fitted separately between consecutive breakpoints `bp`."""
    del overwrite_data  # funcgrad arrays cannot be overwritten
    if type not in ("linear", "l", "constant", "c"):
        raise ValueError(f"detrend: type must be 'linear' or 'constant', got {type!r}")
    (data,) = promote_dtypes_inexact(data)
    if data.ndim == 0:
        raise ValueError("detrend: the data must have at least one axis, got a scalar")
    axis = canonicalize_axis(axis, data.ndim, "detrend")
    if type in ("constant", "c"):
        return data - fnp.mean(data, axis=axis, keepdims=True)
    n = data.shape[axis]
    breakpoints = np.unique(np.concatenate([[0], np.atleast_1d(np.asarray(bp, dtype=int)), [n]]))
    if breakpoints[0] < 0 or breakpoints[-1] > n:
        raise ValueError(
            f"detrend: breakpoints must lie in [0, {n}] (the length along axis {axis}), got {bp}"
        )
    pieces = []
    for start, stop in zip(breakpoints[:-1], breakpoints[1:]):
        pieces.append(_without_line(lax.slice_in_dim(data, int(start), int(stop), 1, axis), axis))
    return fnp.concatenate(pieces, axis=axis) if len(pieces) > 1 else pieces[0]


def _without_line(segment, axis: int):
    """`segment` less its least-squares line along `axis`, in closed form about the centre
    (a single point is its own line)."""
    n = segment.shape[axis]
    centred = segment - fnp.mean(segment, axis=axis, keepdims=True)
    if n < 2:
        return centred
    offsets = np.arange(n) - (n - 1) / 2
    shape = [1] * segment.ndim
    shape[axis] = n
    t = fnp.asarray(offsets.reshape(shape), dtype=dtypes.real_dtype(segment.dtype))
    slope = fnp.sum(t * centred, axis=axis, keepdims=True) / float(np.sum(offsets * offsets))
    return centred - slope * t
