"""The passes of a compiled fast Fourier transform, on the real and imaginary parts of values.

The complex lowering writes a Fourier transform as a sequence of these (`compiler.
complex_lowering`), so that every pass is one loop kernel over memory.

- `fft_radix_pass`: one Stockham step of radix r along the middle axis of (G, n, B) parts (G
  transforms one after another, each over n points of B columns side by side). Holding for
  each of the S r classes of points (class c: the points c, c + S r, ...) the length-L
  transforms of its points, at L x r x S, it combines r classes into one, whose transform of
  length L r it writes at r x L x S:

      out[k1, k2, c] = sum_j w_r^(j k1) t[j, k2] in[k2, j, c],   t[j, k2] = w_(L r)^(j k2)

  (w_m = exp(-2 pi i / m), its conjugate for the inverse), times `scale` (the last pass of an
  inverse takes its 1 / n). From L = 1 to L = n the points end in their natural order, with no
  reordering pass.
- `fft_real_pass`: the spectrum of n real points from the transform Z of the h = n / 2
  complex points x[2j] + i x[2j+1], each spectrum of real points being its own mirror image
  conjugated: X[k] = (Z[k] + conj Z[h-k]) / 2 + f[k] (Z[k] - conj Z[h-k]), f[k] = w_n^k / 2i
  (Z[h] = Z[0]), for 2-D parts (G, h).
- `fft_real_inverse_pass`: back, the h + 1 stored frequencies X of n real points to the Z
  whose inverse transform of length h holds those points as x[2j] + i x[2j+1]: with M[k] =
  X[h-k], Z[k] = s (X[k] + conj M[k]) + f[k] (X[k] - conj M[k]), f[k] = i s w_n^-k, s the
  transform's scale (the imaginary parts of X[0] and X[h] do not count).

A radix pass may write the last transform's result as one array of the shape `interleaved`
holding the parts interleaved (the layout of a complex array in memory), as `fft_real_pass`
always does (of the shape `shape`), so that no copy pass interleaves or reshapes them.

The twiddle factors are operands (tables the lowering computes in float64, rounded to the
parts' dtype; the radix pass's for j >= 1 only), so the reference implementation applies
exactly what the compiled kernels apply.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray

__all__ = ["fft_radix_pass", "fft_real_inverse_pass", "fft_real_pass"]

_REAL = (dtypes.float32, dtypes.float64)

fft_radix_pass_p = Primitive("fft_radix_pass", multiple_results=True)
fft_real_pass_p = Primitive("fft_real_pass")
fft_real_inverse_pass_p = Primitive("fft_real_inverse_pass", multiple_results=True)


def _check_parts(name: str, re: ShapedArray, im: ShapedArray, rank: int) -> None:
    if re.shape != im.shape or re.dtype != im.dtype or re.ndim != rank or re.dtype not in _REAL:
        raise TypeError(
            f"{name} takes real and imaginary parts of one float32 or float64 shape of rank "
            f"{rank}, got {re} and {im}"
        )


@fft_radix_pass_p.def_abstract_eval
def _radix_abstract_eval(
    re, im, twiddle_re, twiddle_im, *, radix, stride, inverse, interleaved, scale
):
    _check_parts("fft_radix_pass", re, im, 3)
    n = re.shape[1]
    if radix < 2 or stride < 1 or n % (radix * stride):
        raise ValueError(
            f"fft_radix_pass: radix {radix} and stride {stride} do not divide length {n}"
        )
    table = (radix - 1, n // (radix * stride))
    for twiddle in (twiddle_re, twiddle_im):
        if twiddle.shape != table or twiddle.dtype != re.dtype:
            raise TypeError(
                f"fft_radix_pass: twiddles must be {re.dtype.name}{table}, got {twiddle}"
            )
    if interleaved is None:
        return [re, im]
    _check_interleaved("fft_radix_pass", interleaved, 2 * re.size)
    return [ShapedArray(interleaved, re.dtype)]


def _check_interleaved(name: str, shape: tuple, size: int) -> None:
    if math.prod(shape) != size:
        raise ValueError(f"{name}: cannot write {size // 2} complex numbers as parts of {shape}")


def _as_complex(re, im) -> np.ndarray:
    return np.asarray(re, np.float64) + 1j * np.asarray(im, np.float64)


def _as_parts(z: np.ndarray, dtype, interleaved: tuple | None = None) -> list:
    if interleaved is not None:
        return [np.stack([z.real, z.imag], -1).astype(dtype).reshape(interleaved)]
    return [np.ascontiguousarray(z.real).astype(dtype), np.ascontiguousarray(z.imag).astype(dtype)]


@fft_radix_pass_p.def_impl
def _radix_impl(re, im, twiddle_re, twiddle_im, *, radix, stride, inverse, interleaved, scale):
    dtype = np.asarray(re).dtype
    g, n, b = np.shape(re)
    length = n // (radix * stride)
    z = _as_complex(re, im).reshape(g, length, radix, stride, b)
    twiddles = np.concatenate([np.ones((1, length)), _as_complex(twiddle_re, twiddle_im)]).T
    z = z * twiddles[None, :, :, None, None]
    turns = np.outer(np.arange(radix), np.arange(radix)) % radix
    matrix = np.exp((2j if inverse else -2j) * np.pi * turns / radix)
    out = np.einsum("kj,gljcb->gklcb", matrix, z).reshape(g, n, b)
    return _as_parts(out * scale if scale != 1 else out, dtype, interleaved)


@fft_real_pass_p.def_abstract_eval
def _real_abstract_eval(re, im, twiddle_re, twiddle_im, *, shape):
    _check_parts("fft_real_pass", re, im, 2)
    table = re.shape[1:]
    for twiddle in (twiddle_re, twiddle_im):
        if twiddle.shape != table or twiddle.dtype != re.dtype:
            raise TypeError(
                f"fft_real_pass: twiddles must be {re.dtype.name}{table}, got {twiddle}"
            )
    g, half = re.shape
    _check_interleaved("fft_real_pass", shape, 2 * g * (half + 1))
    return ShapedArray(shape, re.dtype)


@fft_real_pass_p.def_impl
def _real_impl(re, im, twiddle_re, twiddle_im, *, shape):
    dtype = np.asarray(re).dtype
    z = _as_complex(re, im)
    ahead = np.concatenate([z, z[:, :1]], 1)
    mirror = np.conj(np.concatenate([z[:, :1], z[:, :0:-1], z[:, :1]], 1))
    factors = np.concatenate([_as_complex(twiddle_re, twiddle_im), [0.5j]])
    out = (ahead + mirror) / 2 + factors * (ahead - mirror)
    return _as_parts(out, dtype, shape)[0]


@fft_real_inverse_pass_p.def_abstract_eval
def _real_inverse_abstract_eval(re, im, twiddle_re, twiddle_im, *, scale):
    _check_parts("fft_real_inverse_pass", re, im, 2)
    g, stored = re.shape
    table = (stored - 1,)
    for twiddle in (twiddle_re, twiddle_im):
        if twiddle.shape != table or twiddle.dtype != re.dtype:
            raise TypeError(
                f"fft_real_inverse_pass: twiddles must be {re.dtype.name}{table}, got {twiddle}"
            )
    half = ShapedArray((g, stored - 1), re.dtype)
    return [half, half]


@fft_real_inverse_pass_p.def_impl
def _real_inverse_impl(re, im, twiddle_re, twiddle_im, *, scale):
    dtype = np.asarray(re).dtype
    x = _as_complex(re, im)
    half = x.shape[1] - 1
    # The imaginary parts of the real frequencies 0 and h do not count.
    x[:, [0, half]] = x[:, [0, half]].real
    ahead, mirror = x[:, :half], np.conj(x[:, :0:-1])
    factors = _as_complex(twiddle_re, twiddle_im)
    return _as_parts(scale * (ahead + mirror) + factors * (ahead - mirror), dtype)


_COMPILER_ONLY = "exists only inside compiled programs, after every transformation has run"
for _primitive in (fft_radix_pass_p, fft_real_pass_p, fft_real_inverse_pass_p):
    for _rule in ("jvp", "transpose", "batch"):
        _primitive.not_applicable[_rule] = _COMPILER_ONLY


def fft_radix_pass(
    re,
    im,
    twiddle_re,
    twiddle_im,
    *,
    radix: int,
    stride: int,
    inverse: bool,
    interleaved: tuple[int, ...] | None,
    scale: float = 1.0,
):
    return fft_radix_pass_p.bind(
        re,
        im,
        twiddle_re,
        twiddle_im,
        radix=radix,
        stride=stride,
        inverse=inverse,
        interleaved=interleaved,
        scale=scale,
    )


def fft_real_pass(re, im, twiddle_re, twiddle_im, *, shape: tuple[int, ...]):
    return fft_real_pass_p.bind(re, im, twiddle_re, twiddle_im, shape=shape)


def fft_real_inverse_pass(re, im, twiddle_re, twiddle_im, *, scale: float):
    return fft_real_inverse_pass_p.bind(re, im, twiddle_re, twiddle_im, scale=scale)
