"""The passes of a compiled fast Fourier transform, on the real and imaginary parts of values.

The complex lowering writes a Fourier transform as a sequence of these (`compiler.
complex_lowering`), so that every pass is one loop kernel over memory. Both work on the middle
axis of (G, n, B) arrays (G transforms side by side, each over n points of B interleaved
columns): a B of 16 or more puts the vector lanes on the columns, which are contiguous.

- `fft_radix_pass`: one Stockham step of radix r. Holding for each of the S * r classes of
  points (class c: the points c, c + S r, ...) the length-L transforms of its points, at L x r
  x S, it combines r classes into one, whose transform of length L r it writes at r x L x S:

      out[k1, k2, c] = sum_j w_r^(j k1) t[k2, j] in[k2, j, c],   t[k2, j] = w_(L r)^(j k2)

  (w_m = exp(-2 pi i / m), its conjugate for the inverse). From L = 1 to L = n the points end
  in their natural order, with no reordering pass.
- `fft_transpose_pass`: the middle step of the four-step method, (n1, n2) -> (n2, n1) with
  each element multiplied by its twiddle factor, in blocks that stay in cache.

The twiddle factors are operands (tables the lowering computes in float64), so the reference
implementation applies exactly what the compiled kernels apply.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray

__all__ = ["fft_radix_pass", "fft_transpose_pass"]

_REAL = (dtypes.float32, dtypes.float64)

fft_radix_pass_p = Primitive("fft_radix_pass", multiple_results=True)
fft_transpose_pass_p = Primitive("fft_transpose_pass", multiple_results=True)


def _check_parts(name: str, re: ShapedArray, im: ShapedArray, rank: int) -> None:
    if re.shape != im.shape or re.dtype != im.dtype or re.ndim != rank or re.dtype not in _REAL:
        raise TypeError(
            f"{name} takes real and imaginary parts of one float32 or float64 shape of rank "
            f"{rank}, got {re} and {im}"
        )


@fft_radix_pass_p.def_abstract_eval
def _radix_abstract_eval(re, im, twiddle_re, twiddle_im, *, radix, stride, inverse):
    _check_parts("fft_radix_pass", re, im, 3)
    n = re.shape[1]
    if radix < 2 or stride < 1 or n % (radix * stride):
        raise ValueError(
            f"fft_radix_pass: radix {radix} and stride {stride} do not divide length {n}"
        )
    table = (n // (radix * stride), radix - 1)
    for twiddle in (twiddle_re, twiddle_im):
        if twiddle.shape != table or twiddle.dtype != re.dtype:
            raise TypeError(
                f"fft_radix_pass: twiddles must be {re.dtype.name}{table}, got {twiddle}"
            )
    return [re, im]


def _as_complex(re, im) -> np.ndarray:
    return np.asarray(re, np.float64) + 1j * np.asarray(im, np.float64)


def _as_parts(z: np.ndarray, dtype) -> list:
    return [np.ascontiguousarray(z.real).astype(dtype), np.ascontiguousarray(z.imag).astype(dtype)]


@fft_radix_pass_p.def_impl
def _radix_impl(re, im, twiddle_re, twiddle_im, *, radix, stride, inverse):
    dtype = np.asarray(re).dtype
    g, n, b = np.shape(re)
    length = n // (radix * stride)
    z = _as_complex(re, im).reshape(g, length, radix, stride, b)
    twiddles = np.concatenate([np.ones((length, 1)), _as_complex(twiddle_re, twiddle_im)], 1)
    z = z * twiddles[None, :, :, None, None]
    turns = np.outer(np.arange(radix), np.arange(radix)) % radix
    matrix = np.exp((2j if inverse else -2j) * np.pi * turns / radix)
    out = np.einsum("kj,gljcb->gklcb", matrix, z).reshape(g, n, b)
    return _as_parts(out, dtype)


@fft_transpose_pass_p.def_abstract_eval
def _transpose_abstract_eval(re, im, twiddle_re, twiddle_im):
    _check_parts("fft_transpose_pass", re, im, 4)
    table = re.shape[1:3]
    for twiddle in (twiddle_re, twiddle_im):
        if twiddle.shape != table or twiddle.dtype != re.dtype:
            raise TypeError(
                f"fft_transpose_pass: twiddles must be {re.dtype.name}{table}, got {twiddle}"
            )
    g, n1, n2, b = re.shape
    out = ShapedArray((g, n2, n1, b), re.dtype)
    return [out, out]


@fft_transpose_pass_p.def_impl
def _transpose_impl(re, im, twiddle_re, twiddle_im):
    dtype = np.asarray(re).dtype
    z = _as_complex(re, im) * _as_complex(twiddle_re, twiddle_im)[None, :, :, None]
    return _as_parts(np.swapaxes(z, 1, 2), dtype)


_COMPILER_ONLY = "exists only inside compiled programs, after every transformation has run"
for _primitive in (fft_radix_pass_p, fft_transpose_pass_p):
    for _rule in ("jvp", "transpose", "batch"):
        _primitive.not_applicable[_rule] = _COMPILER_ONLY


def fft_radix_pass(re, im, twiddle_re, twiddle_im, *, radix: int, stride: int, inverse: bool):
    return fft_radix_pass_p.bind(
        re, im, twiddle_re, twiddle_im, radix=radix, stride=stride, inverse=inverse
    )


def fft_transpose_pass(re, im, twiddle_re, twiddle_im):
    return fft_transpose_pass_p.bind(re, im, twiddle_re, twiddle_im)
