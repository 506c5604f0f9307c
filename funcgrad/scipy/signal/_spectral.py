"""Spectral analysis over windowed segments: `stft`, `istft`, `csd`, `welch`, `coherence`.

A signal's axis is cut into segments of `nperseg` samples that start every
`nperseg - noverlap` samples (one gather with static indices); each is detrended, windowed and
transformed. Segment counts, FFT lengths and windows given by name are static; a window given
as an array may be traced.
"""

from __future__ import annotations

import warnings

import numpy as np

from funcgrad import dtypes
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.numpy._promotion import broadcast_shapes, convert, promote_dtypes_inexact
from funcgrad.numpy.shape_ops import canonicalize_axis
from funcgrad.scipy.signal._convolve import detrend as _detrend
from funcgrad.scipy.signal._windows import window_values
from funcgrad.transforms.vmap import vmap


def _window(name: str, window, nperseg: int | None, length: int, dtype) -> tuple[Array, int]:
    """The window in the signal's real dtype, and the segment length: 256 (at most the signal's
    length) for a window by name unless `nperseg` says otherwise, else the array's length."""
    real = dtypes.real_dtype(dtype)
    if nperseg is not None:
        nperseg = int(nperseg)
        if nperseg < 1:
            raise ValueError(f"{name}: nperseg must be a positive integer, got {nperseg}")
    if isinstance(window, (str, tuple)):
        nperseg = 256 if nperseg is None else nperseg
        if nperseg > length:
            warnings.warn(
                f"{name}: nperseg = {nperseg} is greater than the signal's length {length}, "
                f"using nperseg = {length}",
                stacklevel=3,
            )
            nperseg = length
        return fnp.asarray(window_values(window, nperseg), dtype=real), nperseg
    win = fnp.asarray(window)
    if win.ndim != 1:
        raise ValueError(f"{name}: a window array must be 1-d, got shape {win.shape}")
    if win.shape[0] > length:
        raise ValueError(
            f"{name}: the window ({win.shape[0]} samples) is longer than the signal ({length})"
        )
    if nperseg is not None and nperseg != win.shape[0]:
        raise ValueError(
            f"{name}: nperseg = {nperseg} differs from the window's length {win.shape[0]}"
        )
    return convert(win, real) if not dtypes.is_complex(win.dtype) else win, win.shape[0]


def _overlap_and_fft(name: str, nperseg: int, noverlap, nfft) -> tuple[int, int]:
    nfft = nperseg if nfft is None else int(nfft)
    if nfft < nperseg:
        raise ValueError(f"{name}: nfft = {nfft} must be at least nperseg = {nperseg}")
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    if not 0 <= noverlap < nperseg:
        raise ValueError(f"{name}: noverlap = {noverlap} must lie in [0, nperseg = {nperseg})")
    return noverlap, nfft


def _detrend_function(detrend, axis: int, ndim: int, per_time_slice: bool):
    """What detrends segments laid out (..., segment, sample). A function is called as SciPy
    1.17 calls it: by csd and welch (`per_time_slice`) on the segments starting at one sample,
    of shape (..., nperseg) with the signal's other axes first; by stft on the whole stack,
    its samples along the signal's axis."""
    if detrend is False or detrend is None:
        return lambda segments: segments
    if callable(detrend) and per_time_slice:
        # Handed the whole stack, `lambda s: s - s.mean()` mixed every segment into each.
        return vmap(detrend, in_axes=-2, out_axes=-2)
    if callable(detrend):
        if axis == ndim - 1:
            return detrend
        return lambda segments: fnp.moveaxis(detrend(fnp.moveaxis(segments, -1, axis)), axis, -1)
    return lambda segments: _detrend(segments, axis=-1, type=detrend)


def _spectra(x, win, detrend_func, nperseg: int, step: int, nfft: int, onesided: bool):
    """The windowed FFTs of x's segments along its last axis: shape (..., segment, frequency)."""
    count = (x.shape[-1] - nperseg) // step + 1
    starts = np.arange(count)[:, None] * step
    segments = x[..., starts + np.arange(nperseg)]
    segments = detrend_func(segments) * win
    if onesided:
        return fnp.fft.rfft(fnp.real(segments), n=nfft)
    return fnp.fft.fft(segments, n=nfft)


def _frequencies(nfft: int, fs, onesided: bool, dtype):
    unit = np.fft.rfftfreq(nfft) if onesided else np.fft.fftfreq(nfft)
    return fnp.asarray(unit, dtype=dtypes.real_dtype(dtype)) * fs


def _signal_last(name: str, x, axis: int):
    (x,) = promote_dtypes_inexact(x)
    if x.ndim == 0:
        raise ValueError(f"{name}: the signal must have at least one axis, got a scalar")
    axis = canonicalize_axis(axis, x.ndim, name)
    if x.shape[axis] == 0:
        raise ValueError(f"{name}: the signal's axis {axis} is empty, shape {x.shape}")
    return fnp.moveaxis(x, axis, -1), axis


# ---------------------------------------------------------------------------------------------
# The short-time Fourier transform


def _odd_extension(x, n: int):
    left = 2 * x[..., :1] - fnp.flip(x[..., 1 : n + 1], -1)
    right = 2 * x[..., -1:] - fnp.flip(x[..., -n - 1 : -1], -1)
    return fnp.concatenate([left, x, right], axis=-1)


def _extend(name: str, x, n: int, boundary):
    """x extended by n samples at both ends of its last axis."""
    if boundary is None or n == 0:
        return x
    if boundary in ("even", "odd") and n > x.shape[-1] - 1:
        raise ValueError(
            f"{name}: boundary {boundary!r} extends by {n} samples, more than the signal's "
            f"length less one ({x.shape[-1] - 1})"
        )
    widths = [(0, 0)] * (x.ndim - 1) + [(n, n)]
    if boundary == "even":
        return fnp.pad(x, widths, mode="reflect")
    if boundary == "odd":
        return _odd_extension(x, n)
    if boundary == "constant":
        return fnp.pad(x, widths, mode="edge")
    return fnp.pad(x, widths)


_BOUNDARIES = ("even", "odd", "constant", "zeros", None)


def stft(
    x,
    fs=1.0,
    window="hann",
    nperseg: int = 256,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend=False,
    return_onesided: bool = True,
    boundary: str | None = "zeros",
    padded: bool = True,
    axis: int = -1,
    scaling: str = "spectrum",
) -> tuple[Array, Array, Array]:
    """The short-time Fourier transform (f, t, Zxx) of x along `axis`: Zxx has x's axes with
    `axis` replaced by the frequencies f and the segment times t appended last."""
    if scaling not in ("spectrum", "psd"):
        raise ValueError(f"stft: scaling must be 'spectrum' or 'psd', got {scaling!r}")
    if boundary not in _BOUNDARIES:
        raise ValueError(f"stft: boundary must be one of {_BOUNDARIES}, got {boundary!r}")
    x, axis = _signal_last("stft", x, axis)
    win, nperseg = _window("stft", window, nperseg, x.shape[-1], x.dtype)
    noverlap, nfft = _overlap_and_fft("stft", nperseg, noverlap, nfft)
    step = nperseg - noverlap
    x = _extend("stft", x, nperseg // 2, boundary)
    if padded:
        extra = (-(x.shape[-1] - nperseg) % step) % nperseg
        x = fnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, extra)])
    onesided = return_onesided and not dtypes.is_complex(x.dtype)
    detrend_func = _detrend_function(detrend, axis, x.ndim, per_time_slice=False)
    spectra = _spectra(x, win, detrend_func, nperseg, step, nfft, onesided)
    if scaling == "psd":
        spectra = spectra / fnp.sqrt(fs * fnp.sum(win * win))
    else:
        spectra = spectra / fnp.sum(win)
    times = np.arange(nperseg / 2, x.shape[-1] - nperseg / 2 + 1, step)
    if boundary is not None:
        times = times - nperseg / 2
    real = dtypes.real_dtype(spectra.dtype)
    times = fnp.asarray(times, dtype=real) / fs
    zxx = fnp.moveaxis(fnp.swapaxes(spectra, -1, -2), -2, axis)
    return _frequencies(nfft, fs, onesided, real), times, zxx


def istft(
    Zxx,
    fs=1.0,
    window="hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    input_onesided: bool = True,
    boundary: bool = True,
    time_axis: int = -1,
    freq_axis: int = -2,
    scaling: str = "spectrum",
) -> tuple[Array, Array]:
    """The inverse of `stft` (t, x): each segment's inverse FFT, windowed again and
    overlap-added, divided by the overlapping windows' summed squares."""
    if scaling not in ("spectrum", "psd"):
        raise ValueError(f"istft: scaling must be 'spectrum' or 'psd', got {scaling!r}")
    (zxx,) = promote_dtypes_inexact(Zxx)
    zxx = convert(zxx, dtypes.complex_dtype(dtypes.real_dtype(zxx.dtype)))
    if zxx.ndim < 2:
        raise ValueError(f"istft: the stft must have at least 2 axes, got shape {zxx.shape}")
    freq_axis = canonicalize_axis(freq_axis, zxx.ndim, "istft")
    time_axis = canonicalize_axis(time_axis, zxx.ndim, "istft")
    if freq_axis == time_axis:
        raise ValueError(f"istft: time_axis and freq_axis are both axis {time_axis}")
    zxx = fnp.moveaxis(zxx, (freq_axis, time_axis), (-2, -1))
    default_length = 2 * (zxx.shape[-2] - 1) if input_onesided else zxx.shape[-2]
    nperseg = default_length if nperseg is None else int(nperseg)
    if nperseg < 1:
        raise ValueError(f"istft: nperseg must be a positive integer, got {nperseg}")
    if nfft is None:
        odd_unpadded = input_onesided and nperseg == default_length + 1
        nfft = nperseg if odd_unpadded else default_length
    noverlap, nfft = _overlap_and_fft("istft", nperseg, noverlap, nfft)
    step = nperseg - noverlap
    if isinstance(window, (str, tuple)):
        win = fnp.asarray(window_values(window, nperseg), dtype=dtypes.real_dtype(zxx.dtype))
    else:
        win = fnp.asarray(window)
        if win.shape != (nperseg,):
            raise ValueError(f"istft: the window must be 1-d of length {nperseg}, got {win.shape}")
    inverse = fnp.fft.irfft if input_onesided else fnp.fft.ifft
    frames = inverse(zxx, n=nfft, axis=-2)[..., :nperseg, :]
    if scaling == "spectrum":
        frames = frames * fnp.sum(win)
    else:
        frames = frames * fnp.sqrt(fs * fnp.sum(win * win))
    count = zxx.shape[-1]
    length = nperseg + (count - 1) * step
    positions = np.arange(count)[:, None] * step + np.arange(nperseg)
    frames = fnp.swapaxes(frames, -1, -2) * win
    x = fnp.zeros(frames.shape[:-2] + (length,), frames.dtype).at[..., positions].add(frames)
    norm = (
        fnp.zeros((length,), win.dtype)
        .at[positions]
        .add(fnp.broadcast_to(win * win, positions.shape))
    )
    if boundary:
        kept = slice(nperseg // 2, -(nperseg // 2))
        x, norm = x[..., kept], norm[kept]
    x = x / fnp.where(norm > 1e-10, norm, 1.0)
    if input_onesided:
        x = fnp.real(x)
    if x.ndim > 1 and time_axis != zxx.ndim - 1:
        x = fnp.moveaxis(x, -1, time_axis - 1 if freq_axis < time_axis else time_axis)
    # The times count x's first axis, whichever axis holds its samples.
    times = fnp.asarray(np.arange(x.shape[0]), dtype=dtypes.real_dtype(x.dtype))
    return times / fs, x


# ---------------------------------------------------------------------------------------------
# Welch's method: spectra averaged over segments


def _median_bias(n: int) -> float:
    """The median of n periodograms over their mean, for chi-squared(2) distributed values."""
    even = 2 * np.arange(1, (n - 1) // 2 + 1)
    return float(1 + np.sum(1.0 / (even + 1) - 1.0 / even))


def _cross_spectrum(
    name,
    x,
    y,
    fs,
    window,
    nperseg,
    noverlap,
    nfft,
    detrend,
    return_onesided,
    scaling,
    axis,
    average,
):
    """Welch's estimate of the cross spectral density of x and y (y None: x with itself)."""
    if scaling not in ("density", "spectrum"):
        raise ValueError(f"{name}: scaling must be 'density' or 'spectrum', got {scaling!r}")
    if average not in ("mean", "median"):
        raise ValueError(f"{name}: average must be 'mean' or 'median', got {average!r}")
    if y is not None:
        x, y = promote_dtypes_inexact(x, y)
        if x.ndim != y.ndim:
            raise ValueError(
                f"{name}: x and y must have the same number of axes, got shapes {x.shape} and "
                f"{y.shape}"
            )
    x, axis = _signal_last(name, x, axis)
    if y is not None:
        y, _ = _signal_last(name, y, axis)
        try:
            broadcast_shapes(x.shape[:-1], y.shape[:-1])
        except ValueError:
            raise ValueError(
                f"{name}: x and y do not broadcast outside axis {axis}: shapes "
                f"{fnp.moveaxis(x, -1, axis).shape} and {fnp.moveaxis(y, -1, axis).shape}"
            ) from None
        longest = max(x.shape[-1], y.shape[-1])
        x = fnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, longest - x.shape[-1])])
        y = fnp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, longest - y.shape[-1])])
    win, nperseg = _window(name, window, nperseg, x.shape[-1], x.dtype)
    noverlap, nfft = _overlap_and_fft(name, nperseg, noverlap, nfft)
    step = nperseg - noverlap
    complex_input = dtypes.is_complex(x.dtype)
    onesided = return_onesided and not complex_input
    detrend_func = _detrend_function(detrend, axis, x.ndim, per_time_slice=True)
    x_spectra = _spectra(x, win, detrend_func, nperseg, step, nfft, onesided)
    if y is None:
        density = fnp.real(fnp.conj(x_spectra) * x_spectra)
    else:
        density = fnp.conj(x_spectra) * _spectra(
            y, win, detrend_func, nperseg, step, nfft, onesided
        )
    if scaling == "density":
        density = density / (fs * fnp.sum(win * win))
    else:
        density = density / fnp.sum(win) ** 2
    if onesided:
        # Every frequency but zero and an even length's Nyquist stands for itself and its negative.
        doubled = np.full(density.shape[-1], 2.0)
        doubled[0] = 1.0
        if nfft % 2 == 0:
            doubled[-1] = 1.0
        density = density * fnp.asarray(doubled, dtype=dtypes.real_dtype(density.dtype))
    count = density.shape[-2]
    if count == 1:
        density = density[..., 0, :]
    elif average == "mean":
        density = fnp.mean(density, axis=-2)
    elif dtypes.is_complex(density.dtype):
        median = fnp.median(fnp.real(density), axis=-2) + 1j * fnp.median(
            fnp.imag(density), axis=-2
        )
        density = median / _median_bias(count)
    else:
        density = fnp.median(density, axis=-2) / _median_bias(count)
    return _frequencies(nfft, fs, onesided, x.dtype), fnp.moveaxis(density, -1, axis)


def csd(
    x,
    y,
    fs=1.0,
    window="hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend="constant",
    return_onesided: bool = True,
    scaling: str = "density",
    axis: int = -1,
    average: str = "mean",
) -> tuple[Array, Array]:
    """Welch's estimate (f, Pxy) of the cross spectral density of x and y along `axis`: the
    segments' conj(X) Y averaged; the other axes of x and y broadcast."""
    same = y is x
    return _cross_spectrum(
        "csd",
        x,
        None if same else y,
        fs,
        window,
        nperseg,
        noverlap,
        nfft,
        detrend,
        return_onesided,
        scaling,
        axis,
        average,
    )


def welch(
    x,
    fs=1.0,
    window="hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend="constant",
    return_onesided: bool = True,
    scaling: str = "density",
    axis: int = -1,
    average: str = "mean",
) -> tuple[Array, Array]:
    """Welch's estimate (f, Pxx) of the power spectral density of x along `axis`."""
    return _cross_spectrum(
        "welch",
        x,
        None,
        fs,
        window,
        nperseg,
        noverlap,
        nfft,
        detrend,
        return_onesided,
        scaling,
        axis,
        average,
    )


def coherence(
    x,
    y,
    fs=1.0,
    window="hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend="constant",
    axis: int = -1,
) -> tuple[Array, Array]:
    """The magnitude-squared coherence (f, Cxy) = |Pxy|^2 / (Pxx Pyy) of x and y."""
    options = dict(
        fs=fs,
        window=window,
        nperseg=nperseg,
        noverlap=noverlap,
        nfft=nfft,
        detrend=detrend,
        axis=axis,
    )
    freqs, pxx = welch(x, **options)
    _, pyy = welch(y, **options)
    _, pxy = csd(x, y, **options)
    return freqs, fnp.abs(pxy) ** 2 / pxx / pyy
