"""The further funcgrad.scipy.special functions against scipy.special."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given

import funcgrad.scipy.special as special
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close

# Values away from the poles of Gamma at the non-positive integers.
reals = fst.arrays(fst.float_dtypes, fst.shapes(1, 2, 1, 5), min_value=-4.5, max_value=6.0).map(
    lambda x: np.where(np.abs(x - np.round(x)) < 0.05, x + 0.25, x).astype(x.dtype)
)


def close(x, dtype) -> dict:
    return dict(rtol=1e-4, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-12)


@given(reals)
def test_gamma_family_matches_scipy(x):
    tol = close(x, x.dtype)
    with np.errstate(all="ignore"):
        assert_close(special.gamma(x), sc.gamma(x).astype(x.dtype), x.dtype, **tol)
        assert_close(
            special.loggamma(x),
            np.where(x < 0, np.nan, sc.gammaln(x)).astype(x.dtype),
            x.dtype,
            **tol,
        )
        assert_close(special.factorial(x), sc.factorial(x).astype(x.dtype), x.dtype, **tol)
        assert_close(special.beta(x, 0.75), sc.beta(x, 0.75).astype(x.dtype), x.dtype, **tol)
        assert_close(special.poch(x, 1.5), sc.poch(x, 1.5).astype(x.dtype), x.dtype, **tol)
    positive = np.abs(x) + 1.5
    assert_close(
        special.betaln(positive, positive[::-1]),
        sc.betaln(positive, positive[::-1]).astype(x.dtype),
        x.dtype,
        **tol,
    )
    assert_close(
        special.multigammaln(positive, 2),
        sc.multigammaln(positive, 2).astype(x.dtype),
        x.dtype,
        **tol,
    )


@pytest.mark.parametrize("name", ["rel_entr", "kl_div"])
def test_divergences_match_scipy_including_edges(name):
    x = np.array([0.0, 0.0, 1.0, 2.0, -1.0, 1.0, 0.5])
    y = np.array([0.0, 1.0, 2.0, 0.0, 1.0, -1.0, 0.25])
    assert_close(getattr(special, name)(x, y), getattr(sc, name)(x, y))
    check_grads(getattr(special, name), (x[[2, 6]], y[[2, 6]]), 2)
