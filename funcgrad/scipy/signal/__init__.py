"""funcgrad.scipy.signal: convolution, correlation, detrending, windows and spectral analysis
with SciPy's names and semantics, composed of funcgrad.numpy and lax so that grad, vmap and
jit apply."""

from funcgrad.scipy.signal._convolve import (
    convolve,
    convolve2d,
    correlate,
    correlate2d,
    detrend,
    fftconvolve,
)
from funcgrad.scipy.signal._spectral import coherence, csd, istft, stft, welch
from funcgrad.scipy.signal._windows import get_window

__all__ = [
    "coherence",
    "convolve",
    "convolve2d",
    "correlate",
    "correlate2d",
    "csd",
    "detrend",
    "fftconvolve",
    "get_window",
    "istft",
    "stft",
    "welch",
]
