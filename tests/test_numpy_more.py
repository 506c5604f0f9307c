"""numpy.i0, kaiser, roots, sort_complex, einsum_path, array_repr, array_str and the csingle
and cdouble aliases against NumPy."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads


def test_i0_matches_numpy_with_i1_as_its_derivative():
    x = np.concatenate([np.linspace(-40, 40, 161), [0.0, 29.999, 30.0, 30.001, 700.0]])
    want = np.i0(x)
    np.testing.assert_allclose(np.asarray(fnp.i0(x)), want, rtol=2e-14)
    np.testing.assert_allclose(np.asarray(fg.jit(fnp.i0)(x)), want, rtol=2e-14)
    got32 = fnp.i0(x[np.abs(x) < 80].astype(np.float32))
    assert got32.dtype == np.float32 and fnp.i0(np.int32(2)).dtype == np.float32
    # I0' = I1, and I0'' = I1' = 1/2 at 0 (where |x| would have lost it)
    np.testing.assert_allclose(
        np.asarray(fg.vmap(fg.grad(fnp.i0))(x[:40])), sc.i1(x[:40]), rtol=2e-14
    )
    assert float(fg.grad(fg.grad(fnp.i0))(0.0)) == 0.5
    check_grads(fnp.i0, (np.float64(1.3),), order=2)


def test_i0_of_the_largest_floats_overflows_to_inf():
    # 2 pi x overflowed past 2.8e307, so the scaled form was 0 and I0 = 0 * inf = NaN.
    x = np.array([1e307, 5e307, -1.7e308, np.finfo(np.float64).max])
    with np.errstate(over="ignore"):
        want = np.i0(x)
    np.testing.assert_array_equal(np.asarray(fnp.i0(x)), want)
    np.testing.assert_array_equal(np.asarray(fg.jit(fnp.i0)(x)), want)


@pytest.mark.parametrize("M", [0, 1, 2, 5, 12])
@pytest.mark.parametrize("beta", [0.0, 3.0, 14.0])
def test_kaiser_matches_numpy(M, beta):
    got = fnp.kaiser(M, beta)
    assert got.dtype == np.float32 and got.shape == (M,)
    np.testing.assert_allclose(np.asarray(got), np.kaiser(M, beta), rtol=2e-6, atol=1e-7)


def test_kaiser_stays_finite_for_large_beta_and_takes_traced_beta():
    with fg.enable_x64():
        window = np.asarray(fnp.kaiser(7, 1000.0))
        assert np.isfinite(window).all() and window[3] == 1.0
        n = np.arange(7)
        r = [mp.sqrt(1 - (mp.mpf(2) * k / 6 - 1) ** 2) for k in n]
        want = [float(mp.besseli(0, 1000 * t) / mp.besseli(0, 1000)) for t in r]
        np.testing.assert_allclose(window, want, rtol=1e-12)
        np.testing.assert_allclose(
            np.asarray(fg.jit(lambda b: fnp.kaiser(6, b))(5.0)), np.kaiser(6, 5.0), rtol=1e-14
        )


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-5, 5).filter(lambda r: abs(r) > 1e-3), min_size=1, max_size=6))
def test_roots_recovers_polynomial_roots(zeros):
    p = np.poly(zeros)
    got = np.sort_complex(np.asarray(fnp.roots(p)))
    want = np.sort_complex(np.roots(p).astype(np.complex128))
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, want, atol=1e-5 * max(1, np.abs(want).max()))


def test_roots_edges_follow_jax():
    p = np.array([0.0, 1.0, -3.0, 2.0])
    np.testing.assert_allclose(np.sort_complex(np.asarray(fnp.roots(p))), [1, 2], atol=1e-12)
    assert np.isnan(np.asarray(fnp.roots(p, strip_zeros=False))).all()
    np.testing.assert_allclose(np.asarray(fnp.roots(np.array([1.0, 0, 0]))), [0, 0])
    assert fnp.roots(np.array([3.0])).shape == (0,) and fnp.roots(np.zeros(3)).shape == (0,)
    assert fnp.roots(np.float32([1, -1])).dtype == np.complex64
    jitted = fg.jit(lambda q: fnp.roots(q, strip_zeros=False))(np.array([1.0, -3.0, 2.0]))
    np.testing.assert_allclose(np.sort_complex(np.asarray(jitted)), [1, 2], atol=1e-12)
    with pytest.raises(fg.errors.ConcretizationTypeError, match="strip_zeros"):
        fg.jit(fnp.roots)(p)
    # d root / d coefficients: for x^2 - s x + 2 the roots move as ds * r / (2r - s)
    slope = fg.grad(lambda s: fnp.roots(fnp.stack([1.0, -s, 2.0]), strip_zeros=False).real.max())
    np.testing.assert_allclose(float(slope(3.0)), 2 / (4 - 3), rtol=1e-12)


def test_sort_complex_matches_numpy():
    a = np.array([1 + 2j, 1 - 1j, 0.5, 3, -2 + 5j, 1 + 0j])
    np.testing.assert_array_equal(np.asarray(fnp.sort_complex(a)), np.sort_complex(a))
    b = np.array([[3, 1, 2], [0, -1, 5]])
    got = fnp.sort_complex(b)
    assert got.dtype == np.complex64
    np.testing.assert_array_equal(np.asarray(got), np.sort_complex(b))
    assert fnp.sort_complex(np.float64([2, 1])).dtype == np.complex128
    np.testing.assert_array_equal(np.asarray(fg.jit(fnp.sort_complex)(a)), np.sort_complex(a))


def test_einsum_path_gives_einsums_order_in_numpys_format():
    x, y, z = np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))
    path, description = fnp.einsum_path("ij,jk,kl->il", x, y, z)
    assert path == [(0, 1), (0, 1)]
    assert "ij,jk->ik" in description and description.endswith("->il")
    assert fnp.einsum_path("ij,jk,kl->il", x, y, z, optimize=False)[0] == [(0, 1), (0, 1)]
    # the second pair is the smaller intermediate here, as NumPy's greedy order also finds
    a, b, c = np.ones((50, 2)), np.ones((2, 50)), np.ones((50, 3))
    assert fnp.einsum_path("ij,jk,kl->il", a, b, c)[0] == [(1, 2), (0, 1)]
    assert np.einsum_path("ij,jk,kl->il", a, b, c, optimize="greedy")[0][1:] == [(1, 2), (0, 1)]
    # a path from NumPy is accepted as einsum_path's result and given back
    numpy_path = np.einsum_path("ij,jk,kl->il", a, b, c, optimize="greedy")[0]
    assert fnp.einsum_path("ij,jk,kl->il", a, b, c, optimize=numpy_path)[0] == [(1, 2), (0, 1)]


def test_array_repr_and_str_format_the_values_as_numpy():
    x = fnp.asarray(np.float32([[1.5, 2.0], [3.0, 4.25]]))
    assert fnp.array_str(x) == np.array_str(np.asarray(x))
    assert fnp.array_repr(x) == "Array" + np.array_repr(np.asarray(x))[len("array") :]
    assert fnp.array_repr(x, precision=1).startswith("Array([[1.5, 2. ],")
    assert fnp.array_str(fnp.arange(3.0), suppress_small=True) == "[0. 1. 2.]"


def test_complex_aliases():
    assert fnp.csingle == np.complex64 and fnp.cdouble == np.complex128
    assert fnp.zeros(2, fnp.csingle).dtype == np.complex64
