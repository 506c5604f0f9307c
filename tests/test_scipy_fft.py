"""funcgrad.scipy.fft's cosine transforms against scipy.fft: every type, norm and
orthogonalization, cropped and padded lengths, complex input, the n-d forms over chosen axes;
jit against eager and derivatives against central finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft as sf

import funcgrad as fg
import funcgrad.scipy.fft as ff
from funcgrad.test_util import check_grads
from tests.checks import assert_close

TOL = dict(rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("type", [1, 2, 3, 4])
@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
@pytest.mark.parametrize("orthogonalize", [None, True, False])
@pytest.mark.parametrize("n", [None, 3, 9])
def test_dct_and_idct_match_scipy(type, norm, orthogonalize, n):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3))
    options = dict(type=type, norm=norm, orthogonalize=orthogonalize, n=n, axis=0)
    assert_close(ff.dct(x, **options), sf.dct(x, **options), **TOL)
    assert_close(ff.idct(x, **options), sf.idct(x, **options), **TOL)


@pytest.mark.parametrize("type", [1, 2, 3, 4])
@pytest.mark.parametrize("norm", [None, "ortho"])
def test_complex_input_transforms_both_parts(type, norm):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(7) + 1j * rng.standard_normal(7)
    assert_close(ff.dct(x, type, norm=norm), sf.dct(x, type, norm=norm), **TOL)
    assert_close(ff.idct(x, type, norm=norm), sf.idct(x, type, norm=norm), **TOL)


@pytest.mark.parametrize("type", [1, 2, 3, 4])
@pytest.mark.parametrize(
    "options", [dict(), dict(axes=(0,)), dict(s=(3, 4)), dict(axes=[-1, 0], s=[4, 2])], ids=str
)
def test_dctn_and_idctn_match_scipy(type, options):
    x = np.random.default_rng(2).standard_normal((3, 6, 5))
    for norm in (None, "ortho"):
        assert_close(
            ff.dctn(x, type, norm=norm, **options), sf.dctn(x, type, norm=norm, **options), **TOL
        )
        assert_close(
            ff.idctn(x, type, norm=norm, **options), sf.idctn(x, type, norm=norm, **options), **TOL
        )


@pytest.mark.parametrize("type", [1, 2, 3, 4])
def test_idct_inverts_dct(type):
    x = np.random.default_rng(3).standard_normal(8)
    for norm in ("backward", "ortho", "forward"):
        assert_close(ff.idct(ff.dct(x, type, norm=norm), type, norm=norm), x, **TOL)


def test_single_precision_stays_single():
    x = np.random.default_rng(4).standard_normal(16).astype(np.float32)
    assert_close(ff.dct(x), sf.dct(x.astype(np.float64)), dtype=np.float32, rtol=1e-5, atol=1e-5)


def test_jit_and_derivatives():
    x = np.random.default_rng(5).standard_normal((5, 4))
    for type in (1, 2, 3, 4):
        f = lambda x, type=type: ff.dctn(x, type, norm="ortho")  # noqa: E731
        assert_close(fg.jit(f)(x), f(x), **TOL)
        check_grads(f, (x,), order=2)
        check_grads(lambda x, type=type: ff.idct(x, type, axis=0), (x,), order=1)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="type"):
        ff.dct(np.ones(4), type=5)
    with pytest.raises(ValueError, match="norm"):
        ff.dct(np.ones(4), norm="unit")
    with pytest.raises(ValueError, match="at least 2 points"):
        ff.dct(np.ones(1), type=1)
    with pytest.raises(ValueError, match="repeated axis"):
        ff.dctn(np.ones((2, 2)), axes=(0, 0))
