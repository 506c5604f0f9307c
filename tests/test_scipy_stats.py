"""funcgrad.scipy.stats against scipy.stats: values over drawn arguments (float64, and float32
within its own tolerance), derivatives against central finite differences, jit against eager,
vmap against a Python loop, and the conventions at the edges: outside the support, invalid
parameters, the far tails, broadcasting and dtypes."""

import math
import warnings

import numpy as np
import pytest
import scipy.integrate as integrate
import scipy.stats as ss
import strategies as fst
from checks import assert_close, check_batching, check_staging
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.scipy.stats as stats
from funcgrad import dtypes
from funcgrad.test_util import check_grads

f64 = np.float64
TOLERANCE = {
    np.dtype(np.float64): dict(rtol=1e-9, atol=1e-12),
    np.dtype(np.float32): dict(rtol=2e-4, atol=2e-5),
}

# name -> (ranges of the drawn x and parameters, in scipy's order; the functions to check).
# The quantile functions take q from the x slot's own range, given separately.
CONTINUOUS = {
    "norm": ([(-10, 10), (-3, 3), (0.1, 5)], ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]),
    "cauchy": ([(-30, 30), (-3, 3), (0.1, 5)], ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]),
    "laplace": ([(-10, 10), (-3, 3), (0.1, 5)], ["logpdf", "pdf", "cdf"]),
    "logistic": ([(-10, 10), (-3, 3), (0.1, 5)], ["logpdf", "pdf", "cdf", "sf"]),
    "expon": ([(-2, 20), (-1, 1), (0.1, 5)], ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]),
    "uniform": ([(-3, 6), (-1, 1), (0.1, 5)], ["logpdf", "pdf", "cdf"]),
    "gumbel_l": ([(-5, 5), (-1, 1), (0.2, 3)], ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]),
    "gumbel_r": ([(-5, 5), (-1, 1), (0.2, 3)], ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]),
    "t": ([(-10, 10), (0.5, 50), (-3, 3), (0.1, 5)], ["logpdf", "pdf"]),
    "beta": (
        [(-0.5, 1.5), (0.2, 10), (0.2, 10), (-0.2, 0.2), (0.5, 3)],
        ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"],
    ),
    "gamma": (
        [(-1, 30), (0.2, 20), (-1, 1), (0.2, 5)],
        ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"],
    ),
    "chi2": (
        [(-1, 40), (0.5, 30), (-1, 1), (0.2, 5)],
        ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"],
    ),
    "pareto": (
        [(5, 30), (0.2, 5), (-1, 1), (0.5, 3)],
        ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"],
    ),
    "lognorm": (
        [(-1, 20), (0.1, 3), (-1, 1), (0.2, 3)],
        ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"],
    ),
    "vonmises": ([(-7, 7), (0.01, 50)], ["logpdf", "pdf"]),
    "wrapcauchy": ([(0, 6.28), (0.01, 0.99)], ["logpdf", "pdf"]),
    "gennorm": ([(-5, 5), (0.3, 5)], ["logpdf", "pdf", "cdf"]),
}
# name -> (range of q, the quantile functions).
QUANTILES = {
    "norm": ((1e-12, 1 - 1e-12), ["ppf", "isf"]),
    "cauchy": ((0.01, 0.99), ["ppf", "isf"]),
    "logistic": ((1e-3, 1 - 1e-3), ["ppf", "isf"]),
    "expon": ((0, 0.999), ["ppf"]),
    "uniform": ((0, 1), ["ppf"]),
    "gumbel_l": ((1e-3, 1 - 1e-3), ["ppf"]),
    "gumbel_r": ((1e-3, 1 - 1e-3), ["ppf"]),
    "pareto": ((0, 0.999), ["ppf"]),
    "lognorm": ((1e-12, 1 - 1e-12), ["ppf", "isf"]),
}


@st.composite
def drawn_args(draw, ranges):
    """A dtype, then x of a drawn shape and each parameter as a weakly typed Python float, or
    an array of x's last axis or of x's whole shape (so parameters broadcast).

    Values within 1e-20 of 0 are made 0: a float32 subnormal offset rounds differently in
    float32 and in SciPy's float64, and can move a point across an end of the support."""
    dtype = draw(fst.float_dtypes)
    shape = draw(fst.shapes(max_dims=2, max_side=4))
    (lo, hi), *parameter_ranges = ranges
    args = [draw(fst.arrays(dtype, shape, min_value=lo, max_value=hi))]
    for lo, hi in parameter_ranges:
        form = draw(st.sampled_from(["scalar", "row", "full"]))
        if form == "scalar":
            args.append(draw(st.floats(lo, hi)))
        else:
            part = shape[-1:] if form == "row" else shape
            args.append(draw(fst.arrays(dtype, part, min_value=lo, max_value=hi)))
    return dtype, [_without_tiny(a) for a in args]


def _without_tiny(a):
    if isinstance(a, float):
        return 0.0 if abs(a) < 1e-20 else a
    return np.where(np.abs(a) < 1e-20, 0, a).astype(a.dtype)


def _as_scipy(dtype, args) -> list:
    """The arguments as funcgrad sees them (Python floats rounded to `dtype`), in float64."""
    return [np.asarray(a, dtype).astype(np.float64) for a in args]


def _check_against_scipy(module, reference, names, dtype, args, continuous=True) -> None:
    """Each function against SciPy's. For a continuous distribution, points so near an end of
    the support that the rounding of loc + scale or (x - loc) / scale moves the result by more
    than the tolerance are left out: the functions jump there (in or out of the support) or
    have a log singularity (truncnorm's logcdf at a). The ends have tests of their own."""
    wide = _as_scipy(dtype, args)
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    compared = ~_near_support_ends(reference, dtype, wide) if continuous else np.ones(shape, bool)
    with np.errstate(all="ignore"):
        for name in names:
            expected = np.broadcast_to(getattr(reference, name)(*wide), shape)
            actual = getattr(module, name)(*args)
            assert actual.shape == shape and actual.dtype == dtype, (name, actual.aval)
            assert_close(
                np.asarray(actual)[compared], expected[compared], **TOLERANCE[np.dtype(dtype)]
            )


def _near_support_ends(reference, dtype, wide_args):
    x, *parameters = wide_args
    margin = 4 * np.finfo(dtype).eps / TOLERANCE[np.dtype(dtype)]["rtol"]
    with np.errstate(all="ignore"):
        ends = reference.support(*parameters)
        near = [np.isfinite(end) & (np.abs(x - end) <= margin * (1 + np.abs(end))) for end in ends]
    return np.broadcast_to(near[0] | near[1], np.broadcast_shapes(*map(np.shape, wide_args)))


def test_only_points_at_finite_ends_of_the_support_are_left_out():
    x = np.array([-1.0, 0.0, 1e-12, 0.5, 2.0])
    assert not _near_support_ends(ss.norm, np.float64, [x, f64(0.0), f64(1.0)]).any()
    near = _near_support_ends(ss.uniform, np.float64, [x, f64(0.0), f64(2.0)])
    np.testing.assert_array_equal(near, [False, True, True, False, True])


@pytest.mark.parametrize("name", CONTINUOUS)
@given(data=st.data())
def test_continuous_match_scipy(name, data):
    ranges, names = CONTINUOUS[name]
    dtype, args = data.draw(drawn_args(ranges))
    _check_against_scipy(getattr(stats, name), getattr(ss, name), names, dtype, args)


@pytest.mark.parametrize("name", QUANTILES)
@given(data=st.data())
def test_quantiles_match_scipy(name, data):
    ranges, _ = CONTINUOUS[name]
    q_range, names = QUANTILES[name]
    dtype, args = data.draw(drawn_args([q_range, *ranges[1:]]))
    _check_against_scipy(getattr(stats, name), getattr(ss, name), names, dtype, args, False)


@given(data=st.data())
def test_truncnorm_matches_scipy(data):
    """a is drawn, b = a + a drawn width, so that the interval is never empty."""
    dtype, (x, a, width, loc, scale) = data.draw(
        drawn_args([(-6, 6), (-4, 3), (0.2, 6), (-1, 1), (0.2, 3)])
    )
    b = np.asarray(a, dtype) + np.asarray(width, dtype)
    names = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]
    _check_against_scipy(stats.truncnorm, ss.truncnorm, names, dtype, [x, a, b, loc, scale])


# name -> (ranges of k and the parameters; which of them are whole numbers). k may be
# fractional or negative, off the support.
DISCRETE = {
    "poisson": ([(-2, 40), (0.1, 30), (0, 2)], [True, False, True]),
    "bernoulli": ([(-1, 2), (0, 1), (0, 1)], [True, False, True]),
    "binom": ([(-1, 25), (0, 20), (0, 1), (0, 2)], [True, True, False, True]),
    "geom": ([(-1, 30), (0.01, 1), (0, 2)], [True, False, True]),
    "nbinom": ([(-1, 30), (0.5, 10), (0.05, 1), (0, 2)], [True, False, False, True]),
    "betabinom": (
        [(-1, 25), (0, 20), (0.2, 10), (0.2, 10), (0, 2)],
        [True, True, False, False, True],
    ),
}


@pytest.mark.parametrize("name", DISCRETE)
@given(data=st.data())
def test_discrete_match_scipy(name, data):
    ranges, whole = DISCRETE[name]
    dtype, args = data.draw(drawn_args(ranges))
    args = [np.round(a).astype(dtype) if w else a for a, w in zip(args, whole)]
    if data.draw(st.booleans()):
        args[0] = args[0] + np.asarray(0.5, dtype)  # every k off the support
    names = ["logpmf", "pmf", "cdf"] if name == "poisson" else ["logpmf", "pmf"]
    _check_against_scipy(getattr(stats, name), getattr(ss, name), names, dtype, args, False)


@given(k=st.floats(-2, 3), p=st.floats(0, 1), q=st.floats(1e-6, 1 - 1e-6))
def test_bernoulli_cdf_and_ppf_match_scipy(k, p, q):
    k, p, q = f64(k), f64(p), f64(q)
    assert_close(stats.bernoulli.cdf(k, p), ss.bernoulli.cdf(k, p))
    assert_close(stats.bernoulli.ppf(q, p), ss.bernoulli.ppf(q, p))


def _summed_poisson_entropy(mu: float) -> float:
    k = np.arange(0, int(mu + 40 * math.sqrt(mu) + 60))
    log_p = ss.poisson.logpmf(k, mu)
    log_p = log_p[np.isfinite(log_p)]
    return -math.fsum(np.exp(log_p) * log_p)


@given(mu=st.floats(0, 2000), dtype=fst.float_dtypes)
def test_poisson_entropy_matches_the_summed_definition(mu, dtype):
    """-sum p log p summed directly over every k of non-negligible mass (SciPy's own entropy
    truncates its sum for large means)."""
    mu = float(np.asarray(mu, dtype))
    expected = _summed_poisson_entropy(mu)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == np.float64 else TOLERANCE[dtype]
    assert_close(stats.poisson.entropy(np.asarray(mu, dtype)), expected, dtype, **tol)


def test_poisson_entropy_on_both_sides_of_its_switch_to_the_expansion():
    mu = np.array([99.5, 100.0, 130.0, 1000.0])
    expected = [_summed_poisson_entropy(m) for m in mu]
    assert_close(stats.poisson.entropy(mu), expected, rtol=1e-12)


@given(data=st.data(), size=st.integers(1, 4), dtype=fst.float_dtypes)
def test_multivariate_normal_matches_scipy(data, size, dtype):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    factor = rng.normal(size=(size, size))
    cov = (factor @ factor.T + size * np.eye(size)).astype(dtype)
    mean = rng.normal(size=size).astype(dtype)
    x = rng.normal(size=(3, size)).astype(dtype)
    tol = TOLERANCE[np.dtype(dtype)]
    expected = ss.multivariate_normal.logpdf(x, mean.astype(f64), cov.astype(f64))
    assert_close(stats.multivariate_normal.logpdf(x, mean, cov), expected, dtype, **tol)
    assert_close(stats.multivariate_normal.pdf(x, mean, cov), np.exp(expected), dtype, **tol)
    isotropic = ss.multivariate_normal.logpdf(x, mean.astype(f64), 2.5 * np.eye(size))
    assert_close(stats.multivariate_normal.logpdf(x, mean, 2.5), isotropic, dtype, **tol)


def test_multivariate_normal_broadcasts_batches_and_the_univariate_case():
    rng = np.random.default_rng(0)
    factors = rng.normal(size=(4, 3, 3))
    covs = factors @ factors.transpose(0, 2, 1) + 3 * np.eye(3)
    means = rng.normal(size=(4, 3))
    x = rng.normal(size=(5, 1, 3))
    expected = np.array(
        [
            [ss.multivariate_normal.logpdf(x[i, 0], means[j], covs[j]) for j in range(4)]
            for i in range(5)
        ]
    )
    assert_close(stats.multivariate_normal.logpdf(x, means, covs), expected)
    univariate = stats.multivariate_normal.logpdf(x, 0.5, 2.0)
    assert_close(univariate, ss.norm.logpdf(x, 0.5, math.sqrt(2.0)))
    with pytest.raises(ValueError, match=r"cov must have shape \(\.\.\., 3, 3\)"):
        stats.multivariate_normal.logpdf(x, means, np.eye(2))
    with pytest.raises(NotImplementedError, match="allow_singular"):
        stats.multivariate_normal.logpdf(x, means, covs, allow_singular=True)


@given(data=st.data(), dtype=fst.float_dtypes)
def test_dirichlet_matches_scipy(data, dtype):
    """Components of 0.01 or more, so that float32's rounding of them moves the density only
    within float32's tolerance; SciPy sees the rounded components, the last one 1 minus the
    others in float64 (it wants the simplex to 1e-9)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    alpha = rng.uniform(0.3, 5, size=data.draw(st.integers(2, 5))).astype(dtype)
    x = np.maximum(rng.dirichlet(alpha, size=3).T, 0.01)
    x = (x / x.sum(axis=0)).astype(dtype)
    rounded = x.astype(f64)
    rounded[-1] = 1 - rounded[:-1].sum(axis=0)
    expected = ss.dirichlet.logpdf(rounded, alpha.astype(f64))
    tol = TOLERANCE[np.dtype(dtype)]
    assert_close(stats.dirichlet.logpdf(x, alpha), expected, dtype, **tol)
    # The last component may be left out: it is 1 minus the others.
    assert_close(stats.dirichlet.logpdf(x[:-1], alpha), expected, dtype, **tol)
    assert_close(stats.dirichlet.pdf(x, alpha), np.exp(expected), dtype, **tol)


def test_dirichlet_off_the_simplex_and_bad_shapes():
    alpha = np.array([1.5, 2.0, 3.0])
    x = np.array([[0.2, 0.5, 0.0], [0.3, 0.6, 0.5], [0.5, -0.1, 0.5]])
    assert_close(
        stats.dirichlet.logpdf(x, alpha), [ss.dirichlet.logpdf(x[:, 0], alpha), -np.inf, -np.inf]
    )
    assert_close(stats.dirichlet.logpdf(np.array([0.2, 0.3, 0.6]), alpha), -np.inf)
    with pytest.raises(ValueError, match="one-dimensional"):
        stats.dirichlet.logpdf(x, alpha[None])
    with pytest.raises(ValueError, match="3 or 2 entries"):
        stats.dirichlet.logpdf(np.ones((4, 2)) / 4, alpha)


def test_multinomial_matches_scipy():
    p = np.array([0.2, 0.3, 0.5])
    counts = np.array([[1, 2, 3], [0, 0, 6], [2, 2, 1], [6, 0, 0]])
    assert_close(stats.multinomial.logpmf(counts, 6, p), ss.multinomial.logpmf(counts, 6, p))
    assert_close(stats.multinomial.pmf(counts, 6, p), ss.multinomial.pmf(counts, 6, p))
    # n broadcasts against the leading axes of x.
    n = np.array([6, 6, 5, 6])
    assert_close(stats.multinomial.logpmf(counts, n, p), ss.multinomial.logpmf(counts, n, p))
    with pytest.raises(ValueError, match="integer counts"):
        stats.multinomial.logpmf(counts.astype(np.float32), 6, p)


# -- derivatives ---------------------------------------------------------------------------------

# (function, arguments): each derivative, in x and in every parameter, against central finite
# differences in float64. Points inside the support, a few in the tails.
GRADIENT_CASES = [
    (stats.norm.logpdf, (0.3, 0.1, 1.3)),
    (stats.norm.logcdf, (-12.0, 0.1, 1.3)),
    (stats.norm.logsf, (12.0, 0.1, 1.3)),
    (stats.norm.ppf, (0.3, 0.1, 1.3)),
    (stats.norm.isf, (0.01, 0.1, 1.3)),
    (stats.cauchy.logpdf, (-40.0, 0.1, 1.3)),
    (stats.cauchy.cdf, (0.3, 0.1, 1.3)),
    (stats.cauchy.ppf, (0.3, 0.1, 1.3)),
    (stats.laplace.cdf, (-0.3, 0.1, 1.3)),
    (stats.laplace.cdf, (0.7, 0.1, 1.3)),
    (stats.logistic.logpdf, (0.3, 0.1, 1.3)),
    (stats.logistic.isf, (0.3, 0.1, 1.3)),
    (stats.expon.logcdf, (0.7, 0.1, 1.3)),
    (stats.expon.ppf, (0.7, 0.1, 1.3)),
    (stats.uniform.cdf, (0.5, 0.1, 1.3)),
    (stats.gumbel_l.logcdf, (0.3, 0.1, 1.3)),
    (stats.gumbel_r.logsf, (0.3, 0.1, 1.3)),
    (stats.gumbel_r.ppf, (0.3, 0.1, 1.3)),
    (stats.t.logpdf, (0.3, 3.5, 0.1, 1.3)),
    (stats.beta.logpdf, (0.3, 2.5, 1.5, 0.1, 1.3)),
    (stats.beta.cdf, (0.3, 2.5, 1.5, 0.1, 1.3)),
    (stats.beta.logsf, (0.9, 2.5, 1.5, 0.1, 1.3)),
    (stats.gamma.logpdf, (0.7, 2.5, 0.1, 1.3)),
    (stats.gamma.logcdf, (0.7, 2.5, 0.1, 1.3)),
    (stats.gamma.sf, (4.0, 2.5, 0.1, 1.3)),
    (stats.chi2.logpdf, (0.7, 3.5, 0.1, 1.3)),
    (stats.chi2.cdf, (2.7, 3.5, 0.1, 1.3)),
    (stats.pareto.logpdf, (2.7, 2.5, 0.1, 1.3)),
    (stats.pareto.logcdf, (2.7, 2.5, 0.1, 1.3)),
    (stats.pareto.ppf, (0.3, 2.5, 0.1, 1.3)),
    (stats.lognorm.logpdf, (0.7, 0.8, 0.1, 1.3)),
    (stats.lognorm.logsf, (0.7, 0.8, 0.1, 1.3)),
    (stats.truncnorm.logpdf, (0.3, -1.0, 2.0, 0.1, 1.3)),
    (stats.truncnorm.logcdf, (0.3, -1.0, 2.0, 0.1, 1.3)),
    (stats.truncnorm.logcdf, (3.5, 3.0, 4.0, 0.0, 1.0)),
    (stats.truncnorm.logsf, (1.9, -1.0, 2.0, 0.1, 1.3)),
    (stats.vonmises.logpdf, (0.3, 2.5)),
    (stats.wrapcauchy.logpdf, (0.3, 0.4)),
    (stats.gennorm.logpdf, (-1.3, 1.5)),
    (stats.gennorm.cdf, (-1.3, 2.5)),
    (lambda p: stats.bernoulli.logpmf(f64(1.0), p), (0.3,)),
    (lambda p: stats.bernoulli.logpmf(f64(0.0), p), (0.3,)),
    (lambda mu: stats.poisson.logpmf(f64(3.0), mu), (2.5,)),
    (lambda mu: stats.poisson.cdf(f64(3.0), mu), (2.5,)),
    (stats.poisson.entropy, (2.5,)),
    (stats.poisson.entropy, (250.0,)),
    (lambda n, p: stats.binom.logpmf(f64(3.0), n, p), (10.0, 0.3)),
    (lambda p: stats.geom.logpmf(f64(3.0), p), (0.3,)),
    (lambda n, p: stats.nbinom.logpmf(f64(3.0), n, p), (4.5, 0.3)),
    (lambda a, b: stats.betabinom.logpmf(f64(3.0), f64(10.0), a, b), (2.5, 1.5)),
    (lambda p: stats.multinomial.logpmf(np.array([1, 2, 3]), 6, p), (np.array([0.2, 0.3, 0.5]),)),
]


@pytest.mark.parametrize("case", range(len(GRADIENT_CASES)))
def test_derivatives_match_finite_differences(case):
    fn, args = GRADIENT_CASES[case]
    check_grads(fn, [np.asarray(a, f64) for a in args], order=1, rtol=1e-5, atol=1e-8)


def test_second_derivatives_match_finite_differences():
    rng = np.random.default_rng(0)
    factor = rng.normal(size=(3, 3))
    cov = factor @ factor.T + 3 * np.eye(3)
    check_grads(stats.multivariate_normal.logpdf, [rng.normal(size=3), rng.normal(size=3), cov], 2)
    check_grads(stats.dirichlet.logpdf, [np.array([0.2, 0.3]), np.array([0.5, 2.0, 3.0])], 2)
    check_grads(stats.norm.logcdf, [f64(-45.0), f64(0.5), f64(2.0)], 2)
    check_grads(stats.t.logpdf, [f64(0.3), f64(3.5), f64(0.1), f64(1.3)], 2)


def test_derivatives_are_finite_outside_the_support():
    """The discarded branches see arguments inside the support, so they pass no nan."""
    cases = [
        (stats.beta.logpdf, (-0.5, 2.5, 1.5, 0.0, 1.0)),
        (stats.gamma.logpdf, (-0.5, 2.5, 0.0, 1.0)),
        (stats.chi2.logpdf, (-0.5, 3.0, 0.0, 1.0)),
        (stats.pareto.logpdf, (0.5, 2.0, 0.0, 1.0)),
        (stats.lognorm.logpdf, (-0.5, 0.8, 0.0, 1.0)),
        (stats.truncnorm.logpdf, (5.0, -1.0, 2.0, 0.0, 1.0)),
        (stats.truncnorm.logcdf, (5.0, -1.0, 2.0, 0.0, 1.0)),
        (stats.truncnorm.logcdf, (0.3, -np.inf, 1.0, 0.0, 1.0)),
        (stats.laplace.cdf, (-800.0, 0.0, 1.0)),
        (lambda k, mu: stats.poisson.logpmf(k, mu), (2.5, 3.0)),
        (lambda k, p: stats.geom.logpmf(k, p), (0.0, 0.3)),
    ]
    for fn, args in cases:
        grads = fg.grad(fn, argnums=tuple(range(len(args))))(*map(f64, args))
        assert all(np.isfinite(np.asarray(g)) for g in grads), (fn, grads)


# -- transformations -----------------------------------------------------------------------------

STAGED = [
    (stats.norm.logcdf, (np.linspace(-50, 10, 6),)),
    (stats.truncnorm.logcdf, (np.linspace(-2, 3, 6), -1.0, 2.5)),
    (stats.gamma.cdf, (np.linspace(0.1, 10, 6), 2.5)),
    (stats.poisson.entropy, (np.array([0.0, 0.5, 40.0, 150.0]),)),
    (stats.binom.logpmf, (np.arange(6.0), 5.0, 0.3)),
    (stats.multivariate_normal.logpdf, (np.ones((2, 2)), np.zeros(2), np.eye(2) * 2)),
    (stats.dirichlet.logpdf, (np.array([[0.2, 0.5], [0.8, 0.5]]), np.array([1.5, 2.0]))),
]


@pytest.mark.parametrize("case", range(len(STAGED)))
def test_jit_matches_eager(case):
    fn, args = STAGED[case]
    check_staging(fn, *(np.asarray(a, np.float32) for a in args))


def test_vmap_matches_a_loop():
    rng = np.random.default_rng(1)
    factors = rng.normal(size=(4, 2, 2))
    covs = factors @ factors.transpose(0, 2, 1) + 2 * np.eye(2)
    x = rng.normal(size=(4, 2))
    check_batching(stats.multivariate_normal.logpdf, [x, np.zeros(2), covs], [0, None, 0])
    alphas = rng.uniform(0.5, 3, size=(4, 3))
    simplex = rng.dirichlet([1, 1, 1], size=4)
    check_batching(stats.dirichlet.logpdf, [simplex, alphas], [0, 0])
    check_batching(
        stats.beta.cdf, [rng.uniform(size=4), 2.0, rng.uniform(1, 3, size=4)], [0, None, 0]
    )
    check_batching(stats.poisson.entropy, [np.array([0.5, 5.0, 120.0, 0.0])], [0])


# -- edges ---------------------------------------------------------------------------------------


def test_normal_tails_keep_their_precision():
    x = np.array([-40.0, -10.0, 10.0])
    assert_close(stats.norm.logcdf(x), ss.norm.logcdf(x), rtol=1e-13)
    assert_close(stats.norm.logsf(x), ss.norm.logsf(x), rtol=1e-13)
    assert_close(stats.norm.sf(f64(10.0)), ss.norm.sf(10.0), rtol=1e-13)
    assert_close(stats.norm.logcdf(np.float32(-40.0)), ss.norm.logcdf(-40.0), rtol=1e-6)


def test_log_densities_of_large_counts_and_shapes_in_float32():
    # Their lgamma terms, of size n log n, cancel to a result of size log n: in float32 that
    # left binom.logpmf(5e6; 1e7, 0.5) at -16 (for -8.28), poisson.logpmf(1e8; 1e8) at 0 (for
    # -10.13) and chi2.logpdf(1e8; 1e8) at -0.69 (for -10.48). They compute in float64 now.
    f32 = np.float32
    cases = [
        (stats.binom.logpmf, ss.binom.logpmf, (5e6, 1e7, 0.5)),
        (stats.binom.logpmf, ss.binom.logpmf, (3.0, 1e6, 0.25)),
        (stats.poisson.logpmf, ss.poisson.logpmf, (1e8, 1e8)),
        (stats.nbinom.logpmf, ss.nbinom.logpmf, (1e6, 1e6, 0.5)),
        (stats.betabinom.logpmf, ss.betabinom.logpmf, (5e5, 1e6, 2.0, 3.0)),
        (stats.gamma.logpdf, ss.gamma.logpdf, (1e6, 1e6)),
        (stats.chi2.logpdf, ss.chi2.logpdf, (1e8, 1e8)),
        (stats.beta.logpdf, ss.beta.logpdf, (0.5, 1e6, 1e6)),
    ]
    for ours, scipys, args in cases:
        got = ours(*map(f32, args))
        assert got.dtype == np.float32
        assert_close(got, scipys(*[float(f32(a)) for a in args]), rtol=2e-7)
    x, alpha = np.array([0.25, 0.25, 0.5]), np.array([1e6, 2e6, 3e6])
    got = stats.dirichlet.logpdf(x.astype(f32), alpha.astype(f32))
    assert_close(got, ss.dirichlet.logpdf(x, alpha), np.float32, rtol=2e-7)
    counts, p = np.array([2_500_000, 2_500_000, 5_000_000], np.int32), np.array([0.25, 0.25, 0.5])
    got = stats.multinomial.logpmf(counts, np.int32(10**7), p.astype(f32))
    assert_close(got, ss.multinomial.logpmf(counts, 10**7, p), np.float32, rtol=2e-7)


def test_heavy_and_light_tails():
    assert_close(stats.cauchy.cdf(f64(-1e10)), 1 / (math.pi * 1e10), rtol=1e-12)
    assert_close(stats.cauchy.sf(f64(1e10)), 1 / (math.pi * 1e10), rtol=1e-12)
    huge = np.float32(1e30)  # y^2 overflows float32; the density does not
    assert_close(stats.cauchy.logpdf(huge), ss.cauchy.logpdf(1e30), rtol=1e-6)
    # log of a side rounded to 1 (logsf(-3.6e6) was 32% off in float32), and the quantile
    # near its poles (isf(0.0026) 11% off in float16); both against SciPy in float64.
    x = np.float32([-3.6e6, -656.0, 656.0, 3.6e6])
    assert_close(stats.cauchy.logsf(x), ss.cauchy.logsf(x.astype(np.float64)), rtol=1e-6)
    assert_close(stats.cauchy.logcdf(x), ss.cauchy.logcdf(x.astype(np.float64)), rtol=1e-6)
    q = np.float16([0.0026, 0.1, 0.5, 0.9, 0.9974, 0.0, 1.0])
    want = ss.cauchy.isf(q.astype(np.float64), 0.0, 1.07).astype(np.float16)
    assert_close(stats.cauchy.isf(q, 0.0, np.float16(1.07)), want, rtol=2e-3)
    assert_close(stats.cauchy.ppf(np.array([-0.1, 1.1])), [np.nan, np.nan])
    # t: the gammaln difference of its normalizer cancelled (27% off at df = 1e7 in float32),
    # z^2 overflowed (-inf at 1e20), and df = inf (the normal) was NaN; a NaN df gave the
    # normal's density.
    x = np.float32([0.5, 0.5, 0.5, 1e20, 1e4, -3.0, 0.5])
    df = np.float32([1e5, 1e7, np.inf, 3.0, 1e-3, 0.1, np.nan])
    want = ss.t.logpdf(x.astype(np.float64), df.astype(np.float64))
    assert_close(stats.t.logpdf(x, df), want, rtol=1e-6)
    # The log of a probability near 1 is log1p of the other side (was 8.5e-6 off here).
    args = (f64(16.64594958823473), f64(4.011938197584579e-07), f64(0.21881426767181897))
    assert_close(stats.chi2.logcdf(*args), ss.chi2.logcdf(*args), rtol=1e-12)
    assert_close(stats.beta.logsf(f64(1e-9), 2.0, 3.0), ss.beta.logsf(1e-9, 2.0, 3.0), rtol=1e-9)
    # exp(y) underflowed and the log with it: gumbel_l.logcdf(-200) was -inf in float32.
    # (SciPy's own is -inf from -746 on in float64; log(1 - exp(-e^y)) is y there.)
    y = np.float32([-1e30, -800.0, -200.0, -25.0, -19.9, -5.0, 3.0])
    want = np.where(y < -700, y, ss.gumbel_l.logcdf(y.astype(np.float64)))
    assert_close(stats.gumbel_l.logcdf(y), want, rtol=1e-6)
    assert_close(stats.gumbel_r.logsf(-y), want, rtol=1e-6)
    assert_close(stats.expon.cdf(f64(1e-20)), 1e-20, rtol=1e-12)
    assert_close(stats.expon.logcdf(f64(50.0)), -math.exp(-50.0), rtol=1e-12)
    assert_close(stats.expon.logcdf(f64(1e-10)), math.log(-math.expm1(-1e-10)), rtol=1e-14)
    assert_close(stats.pareto.cdf(f64(1 + 1e-12), 2.0), ss.pareto.cdf(1 + 1e-12, 2.0), rtol=1e-6)
    assert_close(stats.gumbel_r.sf(f64(40.0)), ss.gumbel_r.sf(40.0), rtol=1e-12)
    assert_close(stats.gumbel_l.cdf(f64(-40.0)), ss.gumbel_l.cdf(-40.0), rtol=1e-12)
    assert_close(stats.gennorm.cdf(f64(-6.0), 2.0), ss.gennorm.cdf(-6.0, 2.0), rtol=1e-10)
    # At x = 0 the density is (1 + c) / (2 pi (1 - c)), which SciPy's 1 + c^2 - 2c cancels.
    c = 1 - 1e-9
    expected = math.log((1 + c) / (2 * math.pi * (1 - c)))
    assert_close(stats.wrapcauchy.logpdf(f64(0.0), c), expected, rtol=1e-9)
    assert_close(
        stats.vonmises.logpdf(f64(0.5), 2000.0), ss.vonmises.logpdf(0.5, 2000.0), rtol=1e-10
    )
    # cos(x) - 1 rounded to 0 near the peak of a large concentration (392 for 241.79).
    got = stats.vonmises.pdf(np.float32(1e-3), np.float32(946176.0))
    assert_close(got, ss.vonmises.pdf(float(np.float32(1e-3)), 946176.0), rtol=1e-5)
    assert_close(
        stats.truncnorm.logpdf(f64(30.5), 30.0, 31.0),
        ss.truncnorm.logpdf(30.5, 30.0, 31.0),
        rtol=1e-10,
    )
    assert_close(
        stats.truncnorm.logcdf(f64(-30.5), -31.0, -30.0),
        ss.truncnorm.logcdf(-30.5, -31.0, -30.0),
        rtol=1e-10,
    )


def test_small_tails_of_the_incomplete_functions():
    """beta.sf as 1 - cdf while the cdf is small (I_{1-y} would round a tiny y away), and the
    logs of float32 tails taken in float64 (the probabilities underflow float32)."""
    assert_close(stats.beta.sf(f64(1e-12), 0.25, 1.0), ss.beta.sf(1e-12, 0.25, 1.0), rtol=1e-13)
    assert_close(stats.beta.sf(np.float32(1e-9), 0.25, 1.0), ss.beta.sf(1e-9, 0.25, 1.0), rtol=1e-6)
    low = np.float32
    assert_close(stats.gamma.logsf(low(200.0), 1.0), low(-200.0), rtol=1e-6)
    assert_close(stats.chi2.logsf(low(400.0), 2.0), low(-200.0), rtol=1e-6)
    assert_close(stats.gamma.logcdf(low(1e-30), 2.0), low(ss.gamma.logcdf(1e-30, 2.0)), rtol=1e-6)
    assert_close(stats.chi2.logcdf(low(1e-30), 3.0), low(ss.chi2.logcdf(1e-30, 3.0)), rtol=1e-6)
    assert_close(
        stats.beta.logcdf(low(1e-30), 2.0, 3.0), low(ss.beta.logcdf(1e-30, 2.0, 3.0)), rtol=1e-6
    )
    assert_close(
        stats.beta.logsf(low(1 - 2**-20), 2.0, 9.0),
        low(ss.beta.logsf(1 - 2**-20, 2.0, 9.0)),
        rtol=1e-6,
    )


def test_outside_the_support():
    below = np.array([-1.0, -0.5])
    for fn, args in [
        (stats.beta.logpdf, (2.0, 3.0)),
        (stats.gamma.logpdf, (2.0,)),
        (stats.chi2.logpdf, (3.0,)),
        (stats.expon.logpdf, ()),
        (stats.uniform.logpdf, ()),
        (stats.lognorm.logpdf, (1.0,)),
        (stats.pareto.logpdf, (2.0,)),
        (stats.truncnorm.logpdf, (0.0, 1.0)),
        (stats.wrapcauchy.logpdf, (0.5,)),
    ]:
        assert_close(fn(below, *args), [-np.inf, -np.inf])
    assert_close(stats.beta.logpdf(np.array([1.5, 2.0]), 2.0, 3.0), [-np.inf, -np.inf])
    assert_close(stats.uniform.logpdf(f64(1.5)), -np.inf)
    # docs/differences.md: the Gumbel ppfs are nan at q = 0 and 1 (SciPy: -inf and inf).
    for ppf in (stats.gumbel_r.ppf, stats.gumbel_l.ppf):
        assert_close(ppf(f64([0.0, 1.0])), [np.nan, np.nan])
    # A nan loc or scale leaves the support unknown: nan, not -inf.
    args = (f64([0.5, 0.5, 2.0]), f64([np.nan, 0.0, 0.0]), f64([1.0, np.nan, 1.0]))
    for fn in (stats.uniform.logpdf, fg.jit(stats.uniform.logpdf)):
        assert_close(fn(*args), ss.uniform.logpdf(*args))
    assert_close(stats.truncnorm.cdf(np.array([-5.0, 5.0]), -1.0, 2.0), [0.0, 1.0])
    assert_close(stats.truncnorm.logsf(np.array([-5.0, 5.0]), -1.0, 2.0), [0.0, -np.inf])
    assert_close(stats.gamma.cdf(below, 2.0), [0.0, 0.0])
    assert_close(stats.gamma.sf(below, 2.0), [1.0, 1.0])
    assert_close(stats.lognorm.logsf(below, 1.0), [0.0, 0.0])
    # pmfs are 0 off the non-negative integers, at negative, fractional and infinite k.
    k = np.array([-1.0, 1.5, np.inf])
    for fn, args in [
        (stats.poisson.logpmf, (3.0,)),
        (stats.binom.logpmf, (2.0, 0.5)),
        (stats.nbinom.logpmf, (2.0, 0.5)),
        (stats.betabinom.logpmf, (2.0, 1.5, 2.5)),
        (stats.bernoulli.logpmf, (0.3,)),
        (stats.geom.logpmf, (0.3,)),
    ]:
        assert_close(fn(k, *args), [-np.inf, -np.inf, -np.inf])
    assert_close(stats.geom.logpmf(f64(0.0), 0.3), -np.inf)
    assert_close(stats.poisson.cdf(np.array([-1.0, 2.5]), 3.0), [0.0, ss.poisson.cdf(2, 3.0)])


def test_limits_at_the_ends_of_the_support():
    assert_close(stats.chi2.logpdf(f64(0.0), 2.0), math.log(0.5))  # not 0 * log 0
    assert_close(stats.gamma.logpdf(f64(0.0), 1.0), 0.0)
    assert_close(stats.beta.logpdf(np.array([0.0, 1.0]), 1.0, 1.0), [0.0, 0.0])
    assert_close(stats.beta.logpdf(f64(0.0), 0.5, 2.0), np.inf)
    assert_close(stats.binom.pmf(np.array([0.0, 4.0]), 4.0, np.array([0.0, 1.0])), [1.0, 1.0])
    assert_close(stats.poisson.logpmf(f64(0.0), 0.0), 0.0)
    assert_close(stats.poisson.entropy(np.array([0.0, -1.0])), [0.0, np.nan])


def test_invalid_parameters_give_nan():
    nan = np.nan
    assert_close(
        stats.beta.logpdf(
            f64(0.5),
            np.array([0.0, 1.0, 1.0]),
            np.array([1.0, -1.0, 1.0]),
            0.0,
            np.array([1.0, 1.0, 0.0]),
        ),
        [nan] * 3,
    )
    assert_close(
        stats.betabinom.logpmf(f64(1.0), np.array([-1.0, 3.0]), np.array([1.0, 0.0]), 1.0),
        [nan, nan],
    )
    assert_close(stats.gumbel_l.logpdf(f64(0.5), 0.0, np.array([0.0, -1.0])), [nan, nan])
    assert_close(stats.gumbel_r.cdf(f64(0.5), 0.0, -1.0), nan)
    assert_close(stats.gumbel_r.ppf(np.array([0.0, 1.0, 1.5]), 0.0, 1.0), [nan] * 3)
    assert_close(stats.vonmises.logpdf(f64(0.5), np.array([0.0, -1.0])), [nan, nan])
    assert_close(stats.wrapcauchy.logpdf(f64(0.5), np.array([0.0, 1.0])), [nan, nan])
    assert_close(stats.truncnorm.logpdf(f64(0.5), 1.0, np.array([1.0, 0.0])), [nan, nan])
    assert_close(stats.truncnorm.cdf(f64(0.5), 1.0, 0.0), nan)
    assert_close(stats.bernoulli.cdf(f64(0.5), np.array([-0.1, 1.1, nan])), [nan] * 3)
    assert_close(
        stats.bernoulli.ppf(np.array([-0.1, 1.1, 0.5]), np.array([0.3, 0.3, 2.0])), [nan] * 3
    )
    for ppf in (stats.expon.ppf, stats.uniform.ppf, lambda q: stats.pareto.ppf(q, 2.0)):
        assert_close(ppf(np.array([-0.1, 1.1])), [nan, nan])
    # A nan argument propagates rather than reading as outside the support.
    for fn, args in [
        (stats.gamma.logpdf, (2.0,)),
        (stats.uniform.logpdf, ()),
        (stats.uniform.cdf, ()),
        (stats.truncnorm.logcdf, (-1.0, 2.0)),
        (stats.poisson.logpmf, (3.0,)),
        (stats.binom.logpmf, (3.0, 0.5)),
    ]:
        assert_close(fn(f64(nan), *args), nan)


# name -> (valid parameters after the point, {index of a parameter: its invalid values}).
INVALID_PARAMETERS = {
    "bernoulli": ((0.3,), {0: (-0.1, 1.1, np.nan)}),
    "binom": ((3.0, 0.3), {0: (-1.0, np.nan), 1: (-0.1, 1.1, np.nan)}),
    "betabinom": ((3.0, 1.5, 2.5), {0: (-1.0,), 1: (0.0, -1.0, np.nan), 2: (0.0, np.nan)}),
    "geom": ((0.3,), {0: (-0.1, 1.1, np.nan)}),
    "nbinom": ((3.0, 0.3), {0: (-1.0, np.nan), 1: (-0.1, 1.1, np.nan)}),
    "poisson": ((3.0,), {0: (-1.0, np.nan)}),
    "cauchy": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "expon": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "uniform": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "gamma": ((2.0, 0.0, 1.0), {0: (0.0, -1.0, np.nan), 2: (0.0, -1.0, np.nan)}),
    "chi2": ((3.0, 0.0, 1.0), {0: (0.0, -1.0, np.nan), 2: (0.0, -1.0)}),
    "gennorm": ((2.0,), {0: (0.0, -1.0, np.nan)}),
    "lognorm": ((1.0, 0.0, 1.0), {0: (0.0, -1.0, np.nan), 2: (0.0, -1.0, np.nan)}),
    "pareto": ((2.0, 0.0, 1.0), {0: (0.0, -1.0, np.nan), 2: (0.0, -1.0, np.nan)}),
    "norm": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "laplace": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "logistic": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "gumbel_l": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "gumbel_r": ((0.0, 1.0), {1: (0.0, -1.0, np.nan)}),
    "t": ((3.0, 0.0, 1.0), {0: (0.0, -1.0, np.nan), 2: (0.0, -1.0, np.nan)}),
    "beta": ((2.0, 3.0, 0.0, 1.0), {0: (0.0, -1.0, np.nan), 1: (0.0, np.nan), 3: (0.0, np.nan)}),
    "truncnorm": ((-1.0, 2.0, 0.0, 1.0), {0: (np.nan,), 1: (-1.0, -2.0), 3: (0.0, -1.0)}),
}
FUNCTIONS = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf", "logpmf", "pmf"]


@pytest.mark.parametrize("name", sorted(INVALID_PARAMETERS))
def test_parameters_outside_their_domain_give_nan_at_every_point(name):
    """As SciPy's: nan, not the support's -inf, 0 or 1, nor a finite value (expon.cdf of a
    negative scale was 0.63, bernoulli.logpmf off the support -inf for p = 1.1)."""
    valid, invalid = INVALID_PARAMETERS[name]
    points = np.array([-np.inf, -1.0, 0.0, 0.5, 1.0, 3.0, np.inf])
    quantiles = np.array([0.0, 0.3, 1.0])
    for fn in [fn for fn in FUNCTIONS if hasattr(getattr(stats, name), fn)]:
        at = quantiles if fn in ("ppf", "isf") else points
        for index, values in invalid.items():
            for value in values:
                params = [f64(v) for v in valid]
                params[index] = f64(value)
                with np.errstate(all="ignore"):
                    expected = getattr(getattr(ss, name), fn)(at, *params)
                assert np.isnan(expected).all()
                call = getattr(getattr(stats, name), fn)
                assert_close(call(at, *params), expected)
                # One compiled check a distribution: the others compile the same test around
                # their formulas, some of which take seconds to compile (beta's ppf and cdf).
                if fn in ("logpdf", "logpmf"):
                    assert_close(fg.jit(call)(at, *params), expected)


def test_jax_conventions_where_scipy_differs():
    """bernoulli.ppf(0) is 0, the bottom of the support (SciPy: -1); gumbel ppf is nan at 0
    and 1 (SciPy: -inf and inf)."""
    assert_close(stats.bernoulli.ppf(np.array([0.0, 0.7, 0.71, 1.0]), 0.3), [0.0, 0.0, 1.0, 1.0])
    assert_close(stats.gumbel_l.ppf(np.array([0.0, 1.0]), 0.0, 1.0), [np.nan, np.nan])


def test_parameters_broadcast():
    x = np.linspace(0.1, 3, 6).reshape(2, 3)
    loc = np.array([[0.0], [0.5]])
    scale = np.array([1.0, 2.0, 3.0])
    out = stats.gamma.cdf(x, 2.0, loc, scale)
    assert out.shape == (2, 3)
    assert_close(out, ss.gamma.cdf(x, 2.0, loc, scale), rtol=1e-12)
    out = stats.norm.logpdf(0.5, loc, scale)
    assert out.shape == (2, 3)
    assert_close(out, ss.norm.logpdf(0.5, loc, scale).astype(np.float32), rtol=1e-6)
    assert stats.poisson.entropy(np.array([1.0, 2.0]), np.zeros((3, 1))).shape == (3, 2)


@pytest.mark.parametrize(
    "fn, args",
    [
        (stats.norm.cdf, (np.array([0, 1, 2], np.int32),)),
        (stats.poisson.logpmf, (np.array([0, 1, 2], np.int32), 3)),
        (stats.binom.pmf, (np.array([0, 1, 2], np.int8), 4, 0.5)),
        (stats.gamma.logpdf, (np.array([1, 2], np.int64), 2)),
        (stats.multivariate_normal.logpdf, (np.array([0, 1], np.int32), np.zeros(2, np.int32), 2)),
    ],
)
def test_integer_arguments_compute_in_the_default_float(fn, args):
    assert fn(*args).dtype == dtypes.default_float


def test_float_widths_are_kept():
    for dtype in (np.float64, np.float16):
        x = np.linspace(0.1, 0.9, 5).astype(dtype)
        assert stats.norm.logcdf(x, 0.5).dtype == dtype
        assert stats.beta.cdf(x, 2.0, 3.0).dtype == dtype
        assert stats.poisson.entropy(x).dtype == dtype
    low = stats.norm.logcdf(np.array([-30.0, 0.0, 3.0], np.float16))
    assert_close(low, ss.norm.logcdf([-30.0, 0.0, 3.0]).astype(np.float16), rtol=2e-3)


def test_truncnorm_keeps_narrow_intervals():
    """A narrow interval's mass from its midpoint density, where the difference of two log_ndtr
    (or of 1 and two tails) would cancel. The reference integrates the density numerically."""

    def mass(lo, hi):
        return integrate.quad(ss.norm.pdf, lo, hi, epsabs=0, epsrel=1e-13)[0]

    for a, width in [(-30.0, 1e-6), (-5e-13, 1e-12), (0.5, 1e-8), (25.0, 1e-4), (-3.0, 2e-3)]:
        b = a + width
        x = a + width / 4
        total = mass(a, b)
        assert_close(
            stats.truncnorm.logpdf(f64(x), a, b), ss.norm.logpdf(x) - math.log(total), rtol=1e-12
        )
        assert_close(stats.truncnorm.logcdf(f64(x), a, b), math.log(mass(a, x) / total), rtol=1e-9)
        assert_close(stats.truncnorm.logsf(f64(x), a, b), math.log(mass(x, b) / total), rtol=1e-9)
    # Just below b the cdf is 1 minus a tiny mass, which its log keeps.
    a, b, x = -1.0, 2.0, 2.0 - 1e-8
    expected = math.log1p(-mass(x, b) / mass(a, b))
    assert_close(stats.truncnorm.logcdf(f64(x), a, b), expected, rtol=1e-9)


# -- descriptive statistics ----------------------------------------------------------------------


@given(
    x=fst.arrays(fst.int_dtypes, fst.shapes(max_dims=3), min_value=0, max_value=3),
    data=st.data(),
)
def test_mode_matches_scipy(x, data):
    """Few distinct values, so that there are ties: the smallest of the most frequent wins."""
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    keepdims = data.draw(st.booleans())
    got = stats.mode(x, axis=axis, keepdims=keepdims)
    want = ss.mode(x, axis=axis, keepdims=keepdims)
    assert_close(got.mode, want.mode.astype(x.dtype), x.dtype)
    assert_close(got.count, want.count.astype(np.int32), np.int32)


def test_mode_edges():
    """nans count as one value (as in JAX); an empty axis has mode nan and count 0."""
    result = stats.mode(np.array([1.0, np.nan, np.nan, 2.0]), axis=None)
    assert_close(result.mode, np.nan)
    assert_close(result.count, 2)
    empty = stats.mode(np.zeros((0, 3)), axis=0)
    assert_close(empty.mode, np.full(3, np.nan, np.float32))
    assert_close(empty.count, np.zeros(3, np.float32))
    assert stats.mode(np.array(3.0), axis=None, keepdims=True).mode.shape == (1,)
    with pytest.raises(NotImplementedError, match="nan_policy"):
        stats.mode(np.ones(3), nan_policy="omit")
    with pytest.raises(ValueError, match="nan_policy"):
        stats.mode(np.ones(3), nan_policy="ignore")


@pytest.mark.parametrize("method", ["average", "min", "max", "dense", "ordinal"])
@given(
    x=fst.arrays(fst.float_dtypes, fst.shapes(max_dims=2), min_value=0, max_value=3), data=st.data()
)
def test_rankdata_matches_scipy(method, x, data):
    x = np.round(x)  # ties
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    want = ss.rankdata(x, method, axis=axis).astype(np.float32)
    assert_close(stats.rankdata(x, method, axis=axis), want, np.float32)


def test_rankdata_edges():
    x = np.array([[3.0, np.nan, 1.0], [2.0, 2.0, 1.0]])
    assert_close(stats.rankdata(x, axis=1), [[np.nan] * 3, [2.5, 2.5, 1.0]])
    assert_close(stats.rankdata(x), [np.nan] * 6)
    with pytest.raises(ValueError, match="method"):
        stats.rankdata(x, "first")
    with pytest.raises(NotImplementedError, match="nan_policy"):
        stats.rankdata(x, nan_policy="raise")
    check_staging(
        lambda a: stats.rankdata(a, "average", axis=0), np.float32([[3, 1], [1, 1], [2, 5]])
    )
    check_batching(lambda a: stats.rankdata(a, "min"), [np.float32([[3, 1, 3], [1, 1, 2]])], [0])


@given(
    x=fst.arrays(fst.float_dtypes, fst.shapes(min_dims=2, max_dims=2, min_side=2)), data=st.data()
)
def test_sem_matches_scipy(x, data):
    axis = data.draw(st.sampled_from([None, 0, 1, -1]))
    ddof = data.draw(st.integers(0, 1))
    keepdims = data.draw(st.booleans())
    want = ss.sem(x.astype(f64), axis=axis, ddof=ddof, keepdims=keepdims)
    got = stats.sem(x, axis=axis, ddof=ddof, keepdims=keepdims)
    assert_close(got, np.asarray(want).astype(x.dtype), x.dtype, **TOLERANCE[x.dtype])
    # With nans omitted: NumPy's nanstd over the count of the rest (SciPy gives nan where
    # fewer than two values are left; JAX and funcgrad give what the formula gives).
    x = np.where(x > 5, np.nan, x).astype(x.dtype)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # slices with ddof values or fewer
        count = np.sum(~np.isnan(x), axis=axis, keepdims=keepdims)
        want = np.nanstd(x.astype(f64), axis=axis, ddof=ddof, keepdims=keepdims) / np.sqrt(count)
    got = stats.sem(x, axis=axis, ddof=ddof, nan_policy="omit", keepdims=keepdims)
    assert_close(got, np.asarray(want).astype(x.dtype), x.dtype, **TOLERANCE[x.dtype])


def test_sem_rejects_unknown_nan_policies():
    with pytest.raises(ValueError, match="nan_policy"):
        stats.sem(np.ones(3), nan_policy="raise")


# -- gaussian_kde --------------------------------------------------------------------------------


@pytest.mark.parametrize("bw_method", [None, "scott", "silverman", 0.4, lambda kde: 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_gaussian_kde_matches_scipy(bw_method, weighted):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(2, 25))
    weights = rng.uniform(0.1, 1, size=25) if weighted else None
    points = rng.normal(size=(2, 6)) * 2
    kde, reference = (
        stats.gaussian_kde(data, bw_method, weights),
        ss.gaussian_kde(data, bw_method, weights),
    )
    assert_close(kde.evaluate(points), reference.evaluate(points), rtol=1e-12)
    assert_close(kde(points), reference(points), rtol=1e-12)
    assert_close(kde.logpdf(points), reference.logpdf(points), rtol=1e-12)
    assert_close(kde.neff, reference.neff, rtol=1e-12)
    assert_close(kde.covariance, reference.covariance, rtol=1e-12)
    assert_close(kde.inv_cov, reference.inv_cov, rtol=1e-12)
    assert (kde.d, kde.n) == (2, 25)
    mean, cov = np.array([0.3, -0.2]), np.array([[1.0, 0.2], [0.2, 0.5]])
    assert_close(
        kde.integrate_gaussian(mean, cov), reference.integrate_gaussian(mean, cov), rtol=1e-12
    )
    others = rng.normal(size=(2, 9)) + 0.5
    assert_close(
        kde.integrate_kde(stats.gaussian_kde(others)),
        reference.integrate_kde(ss.gaussian_kde(others)),
        rtol=1e-12,
    )


def test_gaussian_kde_in_one_dimension():
    rng = np.random.default_rng(1)
    data = rng.normal(size=40)
    kde, reference = stats.gaussian_kde(data), ss.gaussian_kde(data)
    assert_close(kde.integrate_box_1d(-0.5, 1.0), reference.integrate_box_1d(-0.5, 1.0), rtol=1e-12)
    assert_close(kde.pdf(0.3), reference.pdf(0.3), rtol=1e-12)
    # Far from the data the density underflows, and its log does not.
    assert_close(kde.logpdf(60.0), reference.logpdf(60.0), rtol=1e-10)
    with pytest.raises(ValueError, match="scalars"):
        kde.integrate_box_1d(np.zeros(2), 1.0)
    with pytest.raises(ValueError, match="one-dimensional"):
        stats.gaussian_kde(rng.normal(size=(2, 5))).integrate_box_1d(0.0, 1.0)


def test_gaussian_kde_resamples_from_the_estimate():
    rng = np.random.default_rng(2)
    data = rng.normal(size=(2, 30))
    weights = rng.uniform(0.1, 1, size=30)
    kde = stats.gaussian_kde(data, weights=weights)
    key = fg.random.PRNGKey(0)
    draws = np.asarray(kde.resample(key, (20000,)))
    assert draws.shape == (2, 20000)
    np.testing.assert_array_equal(draws, np.asarray(kde.resample(key, (20000,))))
    # The estimate's mean is the weighted mean of the data, its covariance the data's
    # weighted covariance plus the kernel's.
    mean = np.average(data, axis=1, weights=weights)
    covariance = np.cov(data, aweights=weights, bias=True) + np.asarray(kde.covariance)
    standard_error = np.sqrt(np.diag(covariance) / draws.shape[1])
    assert np.all(np.abs(draws.mean(axis=1) - mean) < 5 * standard_error)
    assert kde.resample(key).shape == (2,)
    assert kde.resample(key, (3, 4)).shape == (2, 3, 4)


def test_gaussian_kde_is_a_pytree_through_transformations():
    rng = np.random.default_rng(3)
    data, points = rng.normal(size=(2, 12)), rng.normal(size=(2, 4))
    kde = stats.gaussian_kde(data)
    assert_close(fg.jit(lambda k, x: k.logpdf(x))(kde, points), kde.logpdf(points), rtol=1e-13)
    check_grads(lambda d: stats.gaussian_kde(d).logpdf(points), [data], order=1)
    batched = fg.vmap(lambda d: stats.gaussian_kde(d).logpdf(points))(np.stack([data, data + 1]))
    assert_close(batched[1], stats.gaussian_kde(data + 1).logpdf(points), rtol=1e-13)


def test_gaussian_kde_errors():
    data = np.random.default_rng(4).normal(size=(2, 10))
    kde = stats.gaussian_kde(data)
    with pytest.raises(ValueError, match="more than one element"):
        stats.gaussian_kde(np.ones(1))
    with pytest.raises(ValueError, match=r"weights must have shape \(10,\)"):
        stats.gaussian_kde(data, weights=np.ones(3))
    with pytest.raises(ValueError, match="bw_method"):
        stats.gaussian_kde(data, bw_method="wide")
    with pytest.raises(ValueError, match="2 rows"):
        kde.logpdf(np.ones((3, 4)))
    with pytest.raises(ValueError, match="mean must have shape"):
        kde.integrate_gaussian(np.zeros(3), np.eye(2))
    with pytest.raises(NotImplementedError):
        kde.integrate_box(np.zeros(2), np.ones(2))
    with pytest.raises(NotImplementedError):
        kde.set_bandwidth("silverman")
    with pytest.raises(AttributeError, match="immutable"):
        kde.dataset = data
    # One point may be given as a flat vector of its coordinates.
    assert_close(kde.logpdf(np.array([0.1, 0.2])), kde.logpdf(np.array([[0.1], [0.2]])))
