"""funcgrad.scipy.signal against scipy.signal: convolutions and correlations in every mode and
method (complex too), the 2-d boundary rules, fftconvolve over axes, detrend, the windows of
get_window, and the spectral estimates stft/istft/csd/welch/coherence; jit against eager,
derivatives against central finite differences, and the errors that name a bad argument."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.signal as ss

import funcgrad as fg
import funcgrad.scipy.signal as fs
from funcgrad.test_util import check_grads
from tests.checks import assert_close

TOL = dict(rtol=1e-9, atol=1e-9)
MODES = ("full", "same", "valid")
# Pairs of shapes: kernel smaller, larger, equal; odd and even lengths; 1 to 3 axes.
SHAPE_PAIRS = [
    ((7,), (3,)),
    ((3,), (6,)),
    ((6,), (6,)),
    ((5, 6), (2, 3)),
    ((2, 3), (5, 6)),
    ((4, 5, 3), (2, 2, 3)),
]


def normal(rng, shape, complex_=False):
    x = rng.standard_normal(shape)
    return x + 1j * rng.standard_normal(shape) if complex_ else x


@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", ["direct", "fft", "auto"])
@pytest.mark.parametrize("complex_", [False, True])
def test_convolve_and_correlate_match_scipy(shapes, mode, method, complex_):
    rng = np.random.default_rng(0)
    a, b = normal(rng, shapes[0], complex_), normal(rng, shapes[1], complex_)
    assert_close(fs.convolve(a, b, mode, method), ss.convolve(a, b, mode, method), **TOL)
    assert_close(fs.correlate(a, b, mode, method), ss.correlate(a, b, mode, method), **TOL)


@pytest.mark.parametrize("shapes", [p for p in SHAPE_PAIRS if len(p[0]) == 2] + [((4, 4), (3, 2))])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
def test_convolve2d_and_correlate2d_match_scipy(shapes, mode, boundary):
    rng = np.random.default_rng(1)
    a, b = normal(rng, shapes[0], True), normal(rng, shapes[1], True)
    for fill in (0, 1.5):
        expected = ss.convolve2d(a, b, mode, boundary, fill)
        assert_close(fs.convolve2d(a, b, mode, boundary, fill), expected, **TOL)
        expected = ss.correlate2d(a, b, mode, boundary, fill)
        assert_close(fs.correlate2d(a, b, mode, boundary, fill), expected, **TOL)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axes", [None, 1, [1, 2], [-1, 0]])
def test_fftconvolve_over_axes_broadcasts_the_others(mode, axes):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 7, 3))
    b_shape = {None: (2, 3, 3), 1: (1, 3, 3), (1, 2): (1, 3, 3), (-1, 0): (2, 1, 2)}
    b = rng.standard_normal(b_shape[axes if axes is None or isinstance(axes, int) else tuple(axes)])
    assert_close(fs.fftconvolve(a, b, mode, axes), ss.fftconvolve(a, b, mode, axes), **TOL)


def test_single_precision_stays_single():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(9).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    for method in ("direct", "fft"):
        out = fs.convolve(a, b, method=method)
        assert_close(out, ss.convolve(a, b), dtype=np.float32, rtol=1e-5, atol=1e-5)
    assert fs.convolve(np.arange(4), np.arange(3)).dtype == fg.dtypes.default_float


@pytest.mark.parametrize("kind", ["linear", "constant", "l", "c"])
@pytest.mark.parametrize("bp", [0, 7, [5, 12], [3, 3, 19]])
@pytest.mark.parametrize("axis", [-1, 0])
def test_detrend_matches_scipy(kind, bp, axis):
    x = np.random.default_rng(4).standard_normal((3, 20) if axis == -1 else (20, 3))
    expected = ss.detrend(x, axis=axis, type=kind, bp=bp)
    assert_close(fs.detrend(x, axis=axis, type=kind, bp=bp), expected, **TOL)


WINDOWS = [
    "hann", "hamming", "boxcar", "blackman", "bartlett", "triang", "nuttall", "blackmanharris",
    "flattop", "barthann", "bohman", "cosine", "parzen", "lanczos", "hann_symmetric",
    "hamming_periodic", ("kaiser", 4.0), ("gaussian", 2.0), ("general_gaussian", 1.5, 3.0),
    ("general_cosine", [0.5, 0.3, 0.2]), ("general_hamming", 0.6), ("tukey", 0.3), "tukey",
    ("tukey", 1.0), ("exponential", None, 2.0), 3.5,
]  # fmt: skip


@pytest.mark.parametrize("window", WINDOWS, ids=str)
def test_get_window_matches_scipy(window):
    for n in (1, 2, 7, 8):
        for fftbins in (True, False):
            expected = ss.get_window(window, n, fftbins=fftbins)
            out = fs.get_window(window, n, fftbins=fftbins)
            assert_close(out, expected.astype(np.float32), dtype=fg.dtypes.default_float)


# ---------------------------------------------------------------------------------------------
# Spectral estimates

SPECTRAL_OPTIONS = [
    dict(),
    dict(nperseg=16),
    dict(nperseg=16, noverlap=5, nfft=20, window="hamming"),
    dict(nperseg=15, detrend="linear", return_onesided=False),
    dict(nperseg=16, average="median", scaling="spectrum"),
    dict(nperseg=16, average="median", detrend=False),
    dict(window=np.hanning(10)),
    dict(nperseg=16, window=("kaiser", 5.0), axis=0),
]


def _signals(axis):
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, 100)), rng.standard_normal((2, 90))
    y = y + 0.5 * x[:, :90]
    return (x.T.copy(), y.T.copy()) if axis == 0 else (x, y)


@pytest.mark.parametrize("options", SPECTRAL_OPTIONS, ids=str)
def test_welch_csd_and_coherence_match_scipy(options):
    x, y = _signals(options.get("axis", -1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nperseg larger than the signal, as both warn
        for ours, theirs in zip(fs.welch(x, **options), ss.welch(x, **options)):
            assert_close(ours, theirs, **TOL)
        for ours, theirs in zip(fs.csd(x, y, **options), ss.csd(x, y, **options)):
            assert_close(ours, theirs, **TOL)
        common = {
            k: v for k, v in options.items() if k not in ("return_onesided", "average", "scaling")
        }
        cut = (slice(None, 90),) if options.get("axis") == 0 else (slice(None), slice(None, 90))
        ours = fs.coherence(x[cut], y, **common)
        assert_close(ours[1], ss.coherence(x[cut], y, **common)[1], **TOL)


def test_a_detrending_function_sees_one_time_slice_at_a_time():
    """By csd and welch, as SciPy 1.17 calls it: on the segments starting at one sample, of
    shape (channels, nperseg) here; handed the whole stack, a function that subtracts the mean
    mixed the segments."""
    x, y = _signals(-1)
    seen = []

    def demean(segment):
        seen.append(segment.shape)
        return segment - segment.mean()

    for axis, (a, b) in ((-1, (x, y)), (0, (x.T.copy(), y.T.copy()))):
        options = dict(nperseg=16, detrend=demean, axis=axis)
        for ours, theirs in zip(fs.welch(a, **options), ss.welch(a, **options)):
            assert_close(ours, theirs, **TOL)
        for ours, theirs in zip(fs.csd(a, b, **options), ss.csd(a, b, **options)):
            assert_close(ours, theirs, **TOL)
        compiled = fg.jit(lambda s, options=options: fs.welch(s, **options)[1])(a)
        assert_close(compiled, ss.welch(a, **options)[1], **TOL)
    assert set(seen) == {(2, 16)}
    # stft hands it the whole stack (SciPy's stft still does), its samples along the axis.
    for axis, a in ((-1, x), (0, x.T.copy())):
        options = dict(nperseg=16, detrend=lambda s: s - s.mean(), axis=axis)
        assert_close(fs.stft(a, **options)[2], ss.stft(a, **options)[2], **TOL)


def test_welch_of_complex_input_is_two_sided():
    rng = np.random.default_rng(6)
    x = rng.standard_normal(64) + 1j * rng.standard_normal(64)
    for ours, theirs in zip(fs.welch(x, nperseg=16), ss.welch(x, nperseg=16)):
        assert_close(ours, theirs, **TOL)


STFT_OPTIONS = [
    dict(),
    dict(nperseg=16),
    dict(nperseg=15, noverlap=4, nfft=18, window="hamming"),
    dict(nperseg=16, boundary="even", padded=False),
    dict(nperseg=16, boundary="odd", scaling="psd"),
    dict(nperseg=16, boundary="constant", detrend="constant"),
    dict(nperseg=16, boundary=None, return_onesided=False),
    dict(nperseg=16, axis=0),
]


@pytest.mark.parametrize("options", STFT_OPTIONS, ids=str)
def test_stft_and_istft_match_scipy(options):
    x, _ = _signals(options.get("axis", -1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ss.stft(x, **options)
        for ours, theirs in zip(fs.stft(x, **options), expected):
            assert_close(ours, theirs, **TOL)
        inverse = {
            k: v
            for k, v in options.items()
            if k in ("nperseg", "noverlap", "nfft", "window", "scaling")
        }
        inverse["input_onesided"] = options.get("return_onesided", True)
        inverse["boundary"] = options.get("boundary", "zeros") is not None
        if options.get("axis") == 0:
            inverse.update(time_axis=-1, freq_axis=0)
        for ours, theirs in zip(fs.istft(expected[2], **inverse), ss.istft(expected[2], **inverse)):
            assert_close(ours, theirs, **TOL)


def test_istft_inverts_stft():
    x = np.random.default_rng(7).standard_normal(64)
    _, _, zxx = fs.stft(x, nperseg=16)
    _, back = fs.istft(zxx, nperseg=16)
    assert_close(back[:64], x, **TOL)


# ---------------------------------------------------------------------------------------------
# Transforms


def test_jit_gives_the_eager_results():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((6, 5)), rng.standard_normal((3, 2))
    signal = rng.standard_normal(80)
    cases = [
        lambda a, b, s: fs.convolve(a, b, "same"),
        lambda a, b, s: fs.correlate(a, b, "full", method="fft"),
        lambda a, b, s: fs.convolve2d(a, b, "same", "wrap"),
        lambda a, b, s: fs.fftconvolve(a, b[:, :1], "valid", axes=0),
        lambda a, b, s: fs.detrend(s, bp=[30]),
        lambda a, b, s: fs.welch(s, nperseg=16),
        lambda a, b, s: fs.istft(fs.stft(s, nperseg=16)[2], nperseg=16),
    ]
    for f in cases:
        for eager, jitted in zip(fg.tree_util.tree_leaves(f(a, b, signal)),
                                 fg.tree_util.tree_leaves(fg.jit(f)(a, b, signal))):  # fmt: skip
            assert_close(jitted, eager, **TOL)


def test_window_array_may_be_traced():
    x = np.random.default_rng(9).standard_normal(64)
    window = np.hamming(16)
    jitted = fg.jit(lambda x, w: fs.welch(x, window=w)[1])(x, window)
    assert_close(jitted, ss.welch(x, window=window)[1], **TOL)


@pytest.mark.parametrize("mode", MODES)
def test_convolution_derivatives_match_finite_differences(mode):
    rng = np.random.default_rng(10)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((2, 3))
    check_grads(lambda a, b: fs.convolve(a, b, mode), (a, b), order=2)
    check_grads(lambda a, b: fs.fftconvolve(a, b, mode), (a, b), order=1)
    check_grads(lambda a, b: fs.correlate2d(a, b, mode, "symm"), (a, b), order=1)


def test_spectral_derivatives_match_finite_differences():
    x = np.random.default_rng(11).standard_normal(40)
    check_grads(lambda x: fs.welch(x, nperseg=8)[1], (x,), order=1)
    check_grads(lambda x: fs.stft(x, nperseg=8)[2], (x,), order=1)
    check_grads(lambda x: fs.detrend(x, bp=[11]), (x,), order=1)


def test_vmap_over_a_batch_of_signals():
    rng = np.random.default_rng(12)
    signals, kernel = rng.standard_normal((3, 10)), rng.standard_normal(4)
    batched = fg.vmap(lambda s: fs.convolve(s, kernel, "same"))(signals)
    assert_close(batched, np.stack([ss.convolve(s, kernel, "same") for s in signals]), **TOL)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="mode"):
        fs.convolve(np.ones(3), np.ones(2), "middle")
    with pytest.raises(ValueError, match="method"):
        fs.convolve(np.ones(3), np.ones(2), method="fast")
    with pytest.raises(ValueError, match="same number of axes"):
        fs.convolve(np.ones(3), np.ones((2, 2)))
    with pytest.raises(ValueError, match="at least as large"):
        fs.convolve(np.ones((3, 2)), np.ones((2, 3)), "valid")
    with pytest.raises(ValueError, match="boundary"):
        fs.convolve2d(np.ones((3, 3)), np.ones((2, 2)), boundary="edge")
    with pytest.raises(ValueError, match="2-d"):
        fs.convolve2d(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="breakpoints"):
        fs.detrend(np.ones(5), bp=9)
    with pytest.raises(ValueError, match="unknown window"):
        fs.get_window("nosuch", 8)
    with pytest.raises(ValueError, match="noverlap"):
        fs.welch(np.ones(32), nperseg=8, noverlap=8)
    with pytest.raises(ValueError, match="nfft"):
        fs.stft(np.ones(32), nperseg=8, nfft=4)
