"""funcgrad.numpy.fft against NumPy's, eager and compiled, and derivatives through it."""

from __future__ import annotations

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads
from funcgrad.tools.recipes import COMPILED_BACKENDS
from tests import strategies as fst

NORMS = st.sampled_from([None, "backward", "ortho", "forward"])


def assert_matches(actual, expected, single: bool):
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    tol = dict(rtol=2e-4, atol=2e-4) if single else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(actual, expected, **tol)


def both_ways(fun, *args):
    """fun eager and compiled."""
    return fun(*args), fg.jit(fun)(*args)


@given(data=st.data(), norm=NORMS)
def test_one_axis_transforms_match_numpy(data, norm):
    single = data.draw(st.booleans())
    shape = data.draw(fst.shapes(1, 3, 1, 6))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = data.draw(st.one_of(st.none(), st.integers(1, 9)))
    real_dtype = np.float32 if single else np.float64
    x = data.draw(fst.arrays(real_dtype, shape))
    z = data.draw(fst.arrays(np.complex64 if single else np.complex128, shape))
    cases = [
        (fnp.fft.fft, np.fft.fft, z),
        (fnp.fft.ifft, np.fft.ifft, z),
        (fnp.fft.rfft, np.fft.rfft, x),
        (fnp.fft.ihfft, np.fft.ihfft, x),
    ]
    if shape[axis] > 1 or n is not None:
        cases += [(fnp.fft.irfft, np.fft.irfft, z), (fnp.fft.hfft, np.fft.hfft, z)]
    for ours, reference, value in cases:
        expected = reference(
            value.astype(np.complex128 if value.dtype.kind == "c" else np.float64), n, axis, norm
        )
        for result in both_ways(lambda v, ours=ours: ours(v, n, axis, norm), value):
            assert_matches(result, expected, single)
            assert np.asarray(result).dtype.itemsize in ((4, 8) if single else (8, 16)), np.asarray(
                result
            ).dtype


@given(data=st.data(), norm=NORMS)
def test_many_axis_transforms_match_numpy(data, norm):
    shape = data.draw(fst.shapes(2, 3, 1, 5))
    axes = tuple(
        data.draw(st.permutations(range(len(shape))))[: data.draw(st.integers(1, len(shape)))]
    )
    s = data.draw(
        st.one_of(st.none(), st.lists(st.integers(2, 6), min_size=len(axes), max_size=len(axes)))
    )
    x = data.draw(fst.arrays(np.float64, shape))
    z = data.draw(fst.arrays(np.complex128, shape))
    for ours, reference, value in [
        (fnp.fft.fftn, np.fft.fftn, z),
        (fnp.fft.ifftn, np.fft.ifftn, z),
        (fnp.fft.rfftn, np.fft.rfftn, x),
        (fnp.fft.irfftn, np.fft.irfftn, z),
    ]:
        if reference is np.fft.irfftn and s is None and value.shape[axes[-1]] < 2:
            continue
        expected = reference(value, s, axes, norm)
        for result in both_ways(lambda v, ours=ours: ours(v, s, axes, norm), value):
            assert_matches(result, expected, False)


def test_two_dimensional_shorthands_and_helpers():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(3, 4, 6)) + 1j * rng.normal(size=(3, 4, 6))
    x = z.real
    np.testing.assert_allclose(fnp.fft.fft2(z), np.fft.fft2(z), atol=1e-12)
    np.testing.assert_allclose(fnp.fft.ifft2(z), np.fft.ifft2(z), atol=1e-12)
    np.testing.assert_allclose(fnp.fft.rfft2(x), np.fft.rfft2(x), atol=1e-12)
    np.testing.assert_allclose(fnp.fft.irfft2(z), np.fft.irfft2(z), atol=1e-12)
    np.testing.assert_allclose(fnp.fft.fftfreq(7, 0.5), np.fft.fftfreq(7, 0.5), rtol=1e-6)
    np.testing.assert_allclose(fnp.fft.rfftfreq(8), np.fft.rfftfreq(8), rtol=1e-6)
    np.testing.assert_array_equal(fnp.fft.fftshift(x), np.fft.fftshift(x))
    np.testing.assert_array_equal(fnp.fft.ifftshift(x, axes=1), np.fft.ifftshift(x, axes=1))


@pytest.mark.parametrize("n", [1, 6, 7, 64, 100, 1024, 3 * 97])
def test_compiled_transforms_of_many_lengths(n):
    # 3 * 97 has a prime factor above 13: Bluestein's convolution by radix passes.
    rng = np.random.default_rng(n)
    z = (rng.normal(size=(2, n)) + 1j * rng.normal(size=(2, n))).astype(np.complex64)
    np.testing.assert_allclose(
        fg.jit(fnp.fft.fft)(z),
        np.fft.fft(z.astype(np.complex128)),
        rtol=1e-4,
        atol=1e-4 * np.sqrt(n),
    )
    x = z.real.astype(np.float64)
    spectrum = fg.jit(fnp.fft.rfft)(x)
    np.testing.assert_allclose(fg.jit(lambda v: fnp.fft.irfft(v, n))(spectrum), x, atol=1e-12)


def _same_parts(got, wanted):
    """Equal, NaN for NaN, part by part (a NaN in one part is not a NaN in the other)."""
    got, wanted = np.asarray(got), np.asarray(wanted)
    for g, w in ((got.real, wanted.real), (np.imag(got), np.imag(wanted))):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
@pytest.mark.parametrize("n", [1, 2])
def test_compiled_transforms_of_lengths_one_and_two_keep_nan_and_inf_to_their_parts(n, backend):
    """The compiled transforms multiplied length 1 and 2 by their DFT matrix, whose zeros made
    NaN of an infinite part's products and spread a NaN part to the other part of every
    output: fft([inf]) was inf + nan j, fft([nan, 1]) nan + nan j twice (NumPy: nan + 0j)."""
    parts = [np.nan, np.inf, -np.inf, 1.5]
    z = np.array([complex(a, b) for a in parts for b in parts[::-1]])
    z = np.stack([np.roll(z, shift)[:n] for shift in range(len(z))])
    x = z.real
    with np.errstate(all="ignore"):
        wanted = [
            np.fft.fft(z),
            np.fft.ifft(z),
            np.fft.rfft(x),
            np.fft.irfft(np.fft.rfft(x), n),
            np.fft.irfft(z, n),
        ]
    with jit_backend(backend):
        got = fg.jit(
            lambda z, x: (
                fnp.fft.fft(z),
                fnp.fft.ifft(z),
                fnp.fft.rfft(x),
                fnp.fft.irfft(fnp.fft.rfft(x), n),
                fnp.fft.irfft(z, n),
            )
        )(z, x)
    for g, w in zip(got, wanted):
        _same_parts(g, w)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
def test_compiled_transforms_turn_by_exact_quarter_turns(backend):
    """Twiddles at multiples of a quarter turn are exactly 0 and ±1: cos(π/2) rounded to 6e-17
    gave fft([1, 2, 3, 4])[2] the imaginary part -7e-16 (NumPy: exactly -2). Integer inputs
    then have exact spectra at length 4, and exact real bins 0 and n/2 at length 8 and 16."""
    z = np.array([1.0, 2.0, 3.0, 4.0]) + 1j * np.array([0.0, -1.0, 5.0, 2.0])
    with jit_backend(backend):
        np.testing.assert_array_equal(fg.jit(fnp.fft.fft)(z), np.fft.fft(z))
        np.testing.assert_array_equal(fg.jit(fnp.fft.ifft)(z), np.fft.ifft(z))
        for n in (8, 16):
            x = np.arange(1.0, n + 1) ** 2
            got = np.asarray(fg.jit(fnp.fft.rfft)(x))
            np.testing.assert_array_equal(got[[0, -1]], np.fft.rfft(x)[[0, -1]])


def test_gradients_through_spectral_code():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 8))
    z = x + 1j * rng.normal(size=(2, 8))
    # Parseval: sum |fft(x)|² = N sum x², so its gradient is 2 N x.
    energy = fg.grad(lambda v: fnp.sum(fnp.abs(fnp.fft.fft(v)) ** 2))(x)
    np.testing.assert_allclose(energy, 16 * x, rtol=1e-10)
    check_grads(lambda v: fnp.fft.irfft(fnp.fft.rfft(v) * fnp.arange(5.0), 8), (x,), order=2)
    check_grads(lambda v: fnp.fft.ifft2(fnp.sin(fnp.fft.fft2(v, norm="ortho"))), (z,), order=1)
    check_grads(lambda v: fnp.fft.hfft(v, 9), (z,), order=1)
    lanes = fg.vmap(lambda v: fnp.fft.rfft(v, 6))(x)
    np.testing.assert_allclose(lanes, np.fft.rfft(x, 6), atol=1e-12)


@pytest.mark.parametrize(
    "name, shape, options",
    [
        ("fft", (0,), dict(n=2)),
        ("ifft", (3, 0), dict(n=3, axis=1)),
        ("rfft", (0,), dict(n=4)),
        ("fft2", (0, 0), dict(s=(2, 3))),
        ("fftn", (2, 0), dict(s=(2, 2))),
    ],
)
def test_a_given_length_zero_pads_an_empty_axis(name, shape, options):
    x = np.zeros(shape)
    transform = getattr(fnp.fft, name)
    expected = getattr(np.fft, name)(x, **options)
    for got in (transform(x, **options), fg.jit(lambda x: transform(x, **options))(x)):
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    grad = fg.grad(lambda x: fnp.sum(fnp.abs(transform(x, **options) + 1)))(x)
    assert grad.shape == shape


def test_bad_lengths_and_empty_axes_are_named():
    with pytest.raises(ValueError, match="at least 1"):
        fnp.fft.fft(np.ones(4), 0)
    with pytest.raises(ValueError, match="axis 0 has length 0"):
        fnp.fft.fft(np.ones(0))
    with pytest.raises(ValueError, match="norm"):
        fnp.fft.fft(np.ones(4), norm="sideways")
    with pytest.raises(TypeError, match="real input"):
        fnp.fft.rfft(np.ones(4) * 1j)
    # NumPy's divide by the length: these raised ZeroDivisionError.
    for freq in (fnp.fft.fftfreq, fnp.fft.rfftfreq):
        with pytest.raises(ValueError, match="n must be at least 1, got 0"):
            freq(0)


def test_axes_out_of_range_raise_axis_errors():
    # They were taken modulo the rank: fft(x, axis=3) of a 3-d x transformed axis 0.
    x = np.ones((2, 1, 3))
    with pytest.raises(np.exceptions.AxisError, match="axis 3 is out of bounds"):
        fnp.fft.fft(x, axis=3)
    with pytest.raises(np.exceptions.AxisError, match="axis -4 is out of bounds"):
        fnp.fft.ifft(x, axis=-4)
    with pytest.raises(np.exceptions.AxisError, match="axis 1 is out of bounds"):
        fnp.fft.fftn(np.ones(3), axes=(1,))
    with pytest.raises(np.exceptions.AxisError, match="axis 5 is out of bounds"):
        fnp.fft.irfftn(x, axes=(0, 5))
    np.testing.assert_allclose(fnp.fft.fft(x, axis=-3), np.fft.fft(x, axis=-3), rtol=1e-6)


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
@pytest.mark.parametrize(
    "s, axes", [(None, None), ((3, 2, 5, 4), (0, 1, 2, 4)), (None, (4, 0, 1, 3))]
)
def test_transforms_of_more_than_three_axes_match_numpy(name, s, axes):
    # One lax.fft takes at most three axes; these raised for four or five.
    x = np.random.default_rng(4).normal(size=(2, 3, 2, 4, 3))
    transform = getattr(fnp.fft, name)
    expected = getattr(np.fft, name)(x, s=s, axes=axes, norm="ortho")
    for got in both_ways(lambda v: transform(v, s=s, axes=axes, norm="ortho"), x):
        assert_matches(got, expected, single=False)


def test_gradient_through_a_four_axis_transform():
    x = np.random.default_rng(5).normal(size=(2, 2, 3, 2))
    check_grads(lambda v: fnp.fft.irfftn(fnp.sin(fnp.fft.rfftn(v)), s=x.shape), (x,), order=1)


def test_no_axes_and_scalars():
    # No axis transformed: NumPy returns the input; as complex, the type a transform returns.
    x = np.arange(6.0).reshape(2, 3)
    for name in ("fftn", "ifftn"):
        got = getattr(fnp.fft, name)(x, axes=())
        assert got.dtype == np.complex128
        np.testing.assert_array_equal(got, x)
    # A real transform has no last axis to halve; irfftn of these was an IndexError.
    for name in ("rfftn", "irfftn"):
        with pytest.raises(ValueError, match="at least one axis"):
            getattr(fnp.fft, name)(x, axes=())
    with pytest.raises(ValueError, match="at least one axis"):
        fnp.fft.irfftn(np.float32(2.0))
