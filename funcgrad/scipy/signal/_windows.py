"""Window functions by name, as `get_window` names them.

A window's length and parameters are static, so each is computed once with NumPy in float64
and enters a program as a constant. A periodic window (the default, `fftbins=True`, for
spectral analysis) is the symmetric window one sample longer without its last sample.
"""

from __future__ import annotations

import numbers

import numpy as np

from funcgrad import dtypes
from funcgrad import numpy as fnp
from funcgrad.array import Array


def _general_cosine(M: int, a) -> np.ndarray:
    phase = np.linspace(-np.pi, np.pi, M)
    return sum(coefficient * np.cos(k * phase) for k, coefficient in enumerate(a))


def _triang(M: int) -> np.ndarray:
    n = np.arange(1, (M + 1) // 2 + 1)
    if M % 2 == 0:
        half = (2 * n - 1.0) / M
        return np.concatenate([half, half[::-1]])
    half = 2 * n / (M + 1.0)
    return np.concatenate([half, half[-2::-1]])


def _bartlett(M: int) -> np.ndarray:
    n = np.arange(M)
    return np.where(n <= (M - 1) / 2, 2 * n / (M - 1), 2 - 2 * n / (M - 1))


def _barthann(M: int) -> np.ndarray:
    distance = np.abs(np.arange(M) / (M - 1) - 0.5)
    return 0.62 - 0.48 * distance + 0.38 * np.cos(2 * np.pi * distance)


def _bohman(M: int) -> np.ndarray:
    distance = np.abs(np.linspace(-1, 1, M)[1:-1])
    inner = (1 - distance) * np.cos(np.pi * distance) + np.sin(np.pi * distance) / np.pi
    return np.concatenate([[0.0], inner, [0.0]])


def _cosine(M: int) -> np.ndarray:
    return np.sin(np.pi / M * (np.arange(M) + 0.5))


def _parzen(M: int) -> np.ndarray:
    n = np.abs(np.arange(M) - (M - 1) / 2) / (M / 2)
    outer = 2 * (1 - n) ** 3
    inner = 1 - 6 * n**2 + 6 * n**3
    return np.where(n * (M / 2) <= (M - 1) / 4, inner, outer)


def _lanczos(M: int) -> np.ndarray:
    half = np.sinc(2.0 * np.arange((M + 1) // 2, M) / (M - 1) - 1.0)
    middle = [1.0] if M % 2 else []
    return np.concatenate([half[::-1], middle, half])


def _kaiser(M: int, beta) -> np.ndarray:
    alpha = (M - 1) / 2
    ratio = (np.arange(M) - alpha) / alpha
    return np.i0(beta * np.sqrt(np.clip(1 - ratio**2, 0, None))) / np.i0(beta)


def _gaussian(M: int, std) -> np.ndarray:
    n = np.arange(M) - (M - 1) / 2
    return np.exp(-(n**2) / (2 * std * std))


def _general_gaussian(M: int, p, sig) -> np.ndarray:
    n = np.arange(M) - (M - 1) / 2
    return np.exp(-0.5 * np.abs(n / sig) ** (2 * p))


def _tukey(M: int, alpha=0.5) -> np.ndarray:
    if alpha <= 0:
        return np.ones(M)
    if alpha >= 1:
        return _general_cosine(M, [0.5, 0.5])
    n = np.arange(M)
    width = int(np.floor(alpha * (M - 1) / 2))
    rising = 0.5 * (1 + np.cos(np.pi * (-1 + 2 * n[: width + 1] / alpha / (M - 1))))
    falling = n[M - width - 1 :]
    falling = 0.5 * (1 + np.cos(np.pi * (-2 / alpha + 1 + 2 * falling / alpha / (M - 1))))
    return np.concatenate([rising, np.ones(M - 2 * (width + 1)), falling])


def _cosine_sum(*a):
    return lambda M: _general_cosine(M, a)


# name -> (window of a symmetric length M and the parameters, how many parameters it takes)
_WINDOWS = {
    "boxcar": (np.ones, (0, 0)),
    "triang": (_triang, (0, 0)),
    "bartlett": (_bartlett, (0, 0)),
    "hann": (_cosine_sum(0.5, 0.5), (0, 0)),
    "hamming": (_cosine_sum(0.54, 0.46), (0, 0)),
    "blackman": (_cosine_sum(0.42, 0.50, 0.08), (0, 0)),
    "nuttall": (_cosine_sum(0.3635819, 0.4891775, 0.1365995, 0.0106411), (0, 0)),
    "blackmanharris": (_cosine_sum(0.35875, 0.48829, 0.14128, 0.01168), (0, 0)),
    "flattop": (
        _cosine_sum(0.21557895, 0.41663158, 0.277263158, 0.083578947, 0.006947368),
        (0, 0),
    ),
    "barthann": (_barthann, (0, 0)),
    "bohman": (_bohman, (0, 0)),
    "cosine": (_cosine, (0, 0)),
    "parzen": (_parzen, (0, 0)),
    "lanczos": (_lanczos, (0, 0)),
    "kaiser": (_kaiser, (1, 1)),
    "gaussian": (_gaussian, (1, 1)),
    "general_gaussian": (_general_gaussian, (2, 2)),
    "general_cosine": (lambda M, a: _general_cosine(M, a), (1, 1)),
    "general_hamming": (lambda M, alpha: _general_cosine(M, [alpha, 1 - alpha]), (1, 1)),
    "tukey": (_tukey, (0, 1)),
}
_ALIASES = {
    "box": "boxcar", "ones": "boxcar", "rect": "boxcar", "rectangular": "boxcar",
    "tri": "triang", "triangle": "triang", "bart": "bartlett", "brt": "bartlett",
    "han": "hann", "hamm": "hamming", "ham": "hamming", "black": "blackman", "blk": "blackman",
    "nut": "nuttall", "nutl": "nuttall", "blackharr": "blackmanharris", "bkh": "blackmanharris",
    "flat": "flattop", "flt": "flattop", "brthan": "barthann", "bth": "barthann",
    "bman": "bohman", "bmn": "bohman", "halfcosine": "cosine", "par": "parzen",
    "parz": "parzen", "sinc": "lanczos", "ksr": "kaiser", "gauss": "gaussian", "gss": "gaussian",
    "general gaussian": "general_gaussian", "general_gauss": "general_gaussian",
    "general gauss": "general_gaussian", "ggs": "general_gaussian",
    "general cosine": "general_cosine", "general hamming": "general_hamming", "tuk": "tukey",
}  # fmt: skip


def _exponential(M: int, sym: bool, center=None, tau=1.0) -> np.ndarray:
    if sym and center is not None:
        raise ValueError("get_window: an exponential window with a center must be periodic")
    center = (M - 1) / 2 if center is None else center
    return np.exp(-np.abs(np.arange(M) - center) / tau)


def window_values(window, Nx: int, fftbins: bool = True) -> np.ndarray:
    """The window as a float64 NumPy array (see `get_window`)."""
    if not isinstance(Nx, numbers.Integral) or Nx <= 0:
        raise ValueError(f"get_window: the length Nx must be a positive integer, got {Nx!r}")
    if not isinstance(window, (str, tuple)):
        try:
            beta = float(window)
        except (TypeError, ValueError):
            raise ValueError(
                f"get_window: window must be a name, a tuple (name, parameters...) or a "
                f"Kaiser window's beta, got {window!r}"
            ) from None
        window = ("kaiser", beta)
    name, args = (window, ()) if isinstance(window, str) else (window[0], tuple(window[1:]))
    if not isinstance(name, str):
        raise ValueError(f"get_window: a window tuple starts with its name, got {window!r}")
    symmetric = not fftbins
    if name.endswith("_symmetric"):
        symmetric, name = True, name[: -len("_symmetric")]
    elif name.endswith("_periodic"):
        symmetric, name = False, name[: -len("_periodic")]
    name = _ALIASES.get(name, name)
    length = Nx if symmetric or Nx == 1 else Nx + 1
    if name in ("exponential", "poisson"):
        if len(args) > 2:
            raise ValueError(f"get_window: {name} takes at most 2 parameters, got {window!r}")
        values = _exponential(length, symmetric, *args)
    elif name in _WINDOWS:
        shape, (least, most) = _WINDOWS[name]
        if not least <= len(args) <= most:
            raise ValueError(
                f"get_window: window {name!r} takes {least} to {most} parameters, got {window!r}"
            )
        values = np.ones(1) if length == 1 else shape(length, *args)
    else:
        raise ValueError(f"get_window: unknown window {name!r}")
    values = np.asarray(values, dtype=np.float64)
    return values if symmetric else values[:Nx]


def get_window(window, Nx: int, fftbins: bool = True) -> Array:
    """A window of Nx samples: by name ("hann", "hamming", "blackman", "boxcar", ...), by a
    tuple of a name and its parameters (("kaiser", beta), ("tukey", alpha), ("gaussian",
    std), ...), or a number (a Kaiser window's beta). It is periodic when `fftbins` (the
    default) and symmetric otherwise, unless the name ends in "_periodic" or "_symmetric"."""
    return fnp.asarray(window_values(window, Nx, fftbins), dtype=dtypes.default_float)
