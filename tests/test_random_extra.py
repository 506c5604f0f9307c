"""funcgrad.random's further distributions: each against its scipy.stats distribution by a
Kolmogorov-Smirnov or chi-square test on draws from fixed keys (deterministic), plus special
parameter values, shapes, dtypes and transformations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as stats

import funcgrad as fg
from funcgrad import dtypes
from funcgrad import random as fr

N = 4000
KEY = fr.PRNGKey(7)
# Fixed keys make these deterministic; a correct sampler fails one only with this probability.
P_MIN = 1e-4


def assert_distributed_as(draws, cdf, *args) -> None:
    draws = np.asarray(draws, np.float64).ravel()
    assert stats.kstest(draws, cdf, args=args).pvalue > P_MIN


@pytest.mark.parametrize(
    "name, draw, cdf, args",
    [
        ("gamma small a", lambda k: fr.gamma(k, 0.3, (N,)), "gamma", (0.3,)),
        ("gamma large a", lambda k: fr.gamma(k, 7.5, (N,), dtype=np.float64), "gamma", (7.5,)),
        ("loggamma", lambda k: np.exp(fr.loggamma(k, 2.5, (N,))), "gamma", (2.5,)),
        ("beta", lambda k: fr.beta(k, 0.5, 2.0, (N,)), "beta", (0.5, 2.0)),
        ("chisquare", lambda k: fr.chisquare(k, 3.0, (N,)), "chi2", (3.0,)),
        ("t", lambda k: fr.t(k, 4.0, (N,)), "t", (4.0,)),
        ("f", lambda k: fr.f(k, 3.0, 7.0, (N,)), "f", (3.0, 7.0)),
        ("laplace", lambda k: fr.laplace(k, (N,)), "laplace", ()),
        ("logistic", lambda k: fr.logistic(k, (N,)), "logistic", ()),
        ("cauchy", lambda k: fr.cauchy(k, (N,)), "cauchy", ()),
        ("maxwell", lambda k: fr.maxwell(k, (N,)), "maxwell", ()),
        ("lognormal", lambda k: fr.lognormal(k, 0.5, (N,)), "lognorm", (0.5,)),
        ("pareto", lambda k: fr.pareto(k, 3.0, (N,)), "pareto", (3.0,)),
        ("weibull_min", lambda k: fr.weibull_min(k, 2.0, 1.5, (N,)), "weibull_min", (1.5, 0, 2.0)),
        ("rayleigh", lambda k: fr.rayleigh(k, 2.0, (N,)), "rayleigh", (0, 2.0)),
        ("triangular", lambda k: fr.triangular(k, 1.0, 2.0, 4.0, (N,)), "triang", (1 / 3, 1, 3)),
        ("wald", lambda k: fr.wald(k, 1.5, (N,)), "invgauss", (1.5,)),
        # Large means: the root of the quadratic was computed with a cancellation that gave
        # 0 or negative draws (40% of them at mean 1e4).
        ("wald large mean", lambda k: fr.wald(k, 1e4, (N,)), "invgauss", (1e4,)),
        ("wald larger mean", lambda k: fr.wald(k, 1e7, (N,)), "invgauss", (1e7,)),
        ("generalized_normal", lambda k: fr.generalized_normal(k, 1.5, (N,)), "gennorm", (1.5,)),
        (
            "double_sided_maxwell",
            lambda k: (np.asarray(fr.double_sided_maxwell(k, 1.0, 2.0, (N,))) - 1) / 2,
            lambda x: 0.5 + 0.5 * np.sign(x) * stats.maxwell.cdf(np.abs(x)),
            (),
        ),
        (
            "dirichlet marginal",
            lambda k: fr.dirichlet(k, np.array([0.5, 1.0, 2.0]), (N,))[:, 0],
            "beta",
            (0.5, 3.0),
        ),
        (
            "ball radius",
            lambda k: np.linalg.norm(fr.ball(k, 3, 2, (N,)), axis=-1) ** 3,
            "uniform",
            (),
        ),
    ],
)
def test_continuous_distributions(name, draw, cdf, args):
    assert_distributed_as(draw(KEY), cdf, *args)


@pytest.mark.parametrize("lam", [0.5, 4.0, 12.0, 150.0])
def test_poisson_frequencies(lam):
    draws = np.asarray(fr.poisson(KEY, lam, (N,)))
    assert draws.dtype == np.int32
    # Chi-square over the bins holding all but the outer tails, which are merged.
    low, high = (int(v) for v in stats.poisson.ppf([0.005, 0.995], lam))
    counts = np.bincount(np.clip(draws, low, high) - low, minlength=high - low + 1)
    edges = np.arange(low, high + 1)
    expected = stats.poisson.pmf(edges, lam)
    expected[0] = stats.poisson.cdf(low, lam)
    expected[-1] = stats.poisson.sf(high - 1, lam)
    assert stats.chisquare(counts, expected * N / expected.sum()).pvalue > P_MIN


def test_geometric_and_rademacher():
    g = np.asarray(fr.geometric(KEY, 0.3, (N,)))
    assert g.dtype == np.int32 and g.min() >= 1
    assert abs(g.mean() - 1 / 0.3) < 5 * np.sqrt(0.7 / 0.09 / N)
    r = np.asarray(fr.rademacher(KEY, (N,)))
    assert r.dtype == np.int32 and set(np.unique(r)) == {-1, 1}
    assert abs(r.mean()) < 5 / np.sqrt(N)


def test_t_and_f_with_tiny_degrees_of_freedom_stay_in_range():
    """For df = 0.01 the gamma draws underflow float32 while t and F are often still finite:
    inf only as often as the distribution passes float32's largest value, and never nan
    (f(0.01, 0.01) was nan for a third of its draws, from 0 / 0; t(0.01) inf for 62%)."""
    n = 20_000
    largest, smallest = (
        float(np.finfo(np.float32).max),
        float(np.finfo(np.float32).smallest_subnormal),
    )

    # Each frequency within 6 standard errors of its probability.
    def assert_frequency(observed, probability):
        assert abs(observed - probability) < 6 * np.sqrt(probability * (1 - probability) / n)

    x = np.asarray(fr.t(KEY, 0.01, (n,)), np.float64)
    assert not np.isnan(x).any()
    assert_frequency(np.isinf(x).mean(), 2 * stats.t(0.01).sf(largest))
    assert_frequency((x <= 1).mean(), stats.t(0.01).cdf(1))
    y = np.asarray(fr.f(KEY, 0.01, 0.01, (n,)), np.float64)
    assert not np.isnan(y).any()
    assert_frequency(np.isinf(y).mean(), stats.f(0.01, 0.01).sf(largest))
    assert_frequency((y < smallest).mean(), stats.f(0.01, 0.01).cdf(smallest))
    assert_frequency((y <= 1).mean(), 0.5)


def test_sixteen_bit_dtypes_draw_from_the_right_distributions():
    """float16 and bfloat16 draws are rounded float32 draws: computed in the 16-bit dtype,
    bfloat16 gamma(50) had a mean of 49.3, float16 binomial(1000, 1/2) a variance of 1080,
    bfloat16 bernoulli(0.001) a rate of 0.0077 (8 random bits against p) and choice with
    p = (0.999, 0.001) in bfloat16 never drew 1. Means and rates within 6 standard errors."""
    n = 20_000
    bf16, f16 = dtypes.bfloat16, np.float16

    def assert_mean(draws, mean, variance):
        draws = np.asarray(draws, np.float64)
        assert abs(draws.mean() - mean) < 6 * np.sqrt(variance / n)

    for dtype in (bf16, f16):
        g = fr.gamma(KEY, 50.0, (n,), dtype)
        assert g.dtype == dtype
        assert_mean(g, 50.0, 50.0)
        b = np.asarray(fr.binomial(KEY, 1000.0, 0.5, (n,), dtype), np.float64)
        assert_mean(b, 500.0, 250.0)
        assert abs(b.var() / 250.0 - 1) < 6 * np.sqrt(2 / n)
        assert_mean(fr.poisson(KEY, np.array(3.0, dtype), (n,)), 3.0, 3.0)
        p = float(np.array(0.001, dtype).astype(np.float64))
        assert_mean(fr.bernoulli(KEY, np.array(0.001, dtype), (n,)), p, p * (1 - p))
    logits = np.log(np.array([0.99, 0.01])).astype(bf16)
    p1 = float(np.exp(logits.astype(np.float64))[1] / np.exp(logits.astype(np.float64)).sum())
    assert_mean(fr.categorical(KEY, logits, shape=(n,)), p1, p1 * (1 - p1))
    weights = np.array([0.999, 0.001], bf16)
    p1 = float(weights.astype(np.float64)[1] / weights.astype(np.float64).sum())
    assert_mean(fr.choice(KEY, 2, (n,), p=weights), p1, p1 * (1 - p1))


def test_special_parameters_give_nan_or_minus_one():
    a = np.array([0.0, -1.0, np.nan, np.inf, 2.0])
    g = np.asarray(fr.gamma(KEY, a))
    assert g[0] == 0 and np.isnan(g[1]) and np.isnan(g[2]) and g[3] == np.inf and g[4] > 0
    p = np.asarray(fr.poisson(KEY, np.array([-1.0, 0.0, np.nan, np.inf, 1e6])))
    np.testing.assert_array_equal(p[:4], [-1, 0, -1, -1])
    assert abs(p[4] - 1e6) < 5e3


def test_geometry_of_vector_and_matrix_draws():
    assert np.all(np.abs(np.asarray(fr.ball(KEY, 2, 1, (500,)))).sum(-1) <= 1)
    d = np.asarray(fr.dirichlet(KEY, np.array([[0.1, 1.0], [2.0, 3.0]]), (5, 2)))
    assert d.shape == (5, 2, 2)
    np.testing.assert_allclose(d.sum(-1), 1, rtol=1e-6)
    for n, m in [(4, 4), (4, 2), (2, 4)]:
        q = np.asarray(fr.orthogonal(KEY, n, (3,), m=m))
        assert q.shape == (3, n, m)
        gram = q @ np.swapaxes(q, -1, -2) if n <= m else np.swapaxes(q, -1, -2) @ q
        np.testing.assert_allclose(gram, np.broadcast_to(np.eye(min(n, m)), gram.shape), atol=1e-5)


@pytest.mark.parametrize("method", ["cholesky", "eigh", "svd"])
def test_multivariate_normal_moments(method):
    mean, cov = np.array([1.0, -1.0]), np.array([[2.0, 0.5], [0.5, 1.0]])
    draws = np.asarray(fr.multivariate_normal(KEY, mean, cov, (20000,), method=method))
    np.testing.assert_allclose(draws.mean(0), mean, atol=0.05)
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.08)
    with pytest.raises(ValueError, match=r"shapes \(3,\) and \(2, 2\)"):
        fr.multivariate_normal(KEY, np.zeros(3), cov)


def test_shapes_and_dtypes():
    assert fr.gamma(KEY, np.ones((2, 3))).shape == (2, 3)
    assert fr.beta(KEY, 1.0, np.ones(3), (4, 3)).shape == (4, 3)
    assert fr.laplace(KEY, (2,), np.float16).dtype == np.float16
    assert fr.t(KEY, 3.0).dtype == np.float32
    assert fr.pareto(KEY, np.array(2.0)).dtype == np.float32
    assert fr.pareto(KEY, 2.0, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(fr.clone(KEY), KEY)
    with pytest.raises(TypeError, match="floating-point"):
        fr.cauchy(KEY, (2,), np.int32)


def test_transformations():
    keys = fr.split(KEY, 4)
    a = np.array([0.5, 1.0, 2.0, 3.0])
    batched = fg.vmap(lambda k, a: fr.gamma(k, a, (3,)))(keys, a)
    lanes = np.stack([np.asarray(fr.gamma(k, x, (3,))) for k, x in zip(keys, a)])
    np.testing.assert_allclose(batched, lanes, rtol=1e-6)
    jitted = fg.jit(lambda k: fr.poisson(k, np.array([2.0, 30.0])))(KEY)
    np.testing.assert_array_equal(jitted, fr.poisson(KEY, np.array([2.0, 30.0])))
    grads = fg.grad(lambda loc: fr.double_sided_maxwell(KEY, loc, 1.0, (5,)).sum())(0.0)
    assert float(grads) == 5.0


def test_gamma_draws_move_with_a_at_a_fixed_cdf_value():
    """The derivative of a draw x with respect to a is the implicit one, -(dF/da) / (dF/dx)
    for the regularized incomplete gamma function F(a, x) (here by central differences of
    scipy's, in float64), in forward and reverse mode alike; so E[dX/da] = dE[X]/da = 1."""
    import scipy.special as sc

    a = np.array([0.05, 0.7, 2.0, 9.0, 40.0])

    def draw(a):
        return fr.gamma(KEY, a, dtype=np.float64)

    x = np.asarray(draw(a))
    h = 1e-6 * a
    dF_da = (sc.gammainc(a + h, x) - sc.gammainc(a - h, x)) / (2 * h)
    dF_dx = np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))
    implicit = -dF_da / dF_dx
    _, tangent = fg.jvp(draw, (a,), (np.ones(5),))
    np.testing.assert_allclose(tangent, implicit, rtol=1e-5)
    np.testing.assert_allclose(fg.grad(lambda a: draw(a).sum())(a), implicit, rtol=1e-5)
    # loggamma's: d log x / da = (dx / da) / x.
    _, log_tangent = fg.jvp(lambda a: fr.loggamma(KEY, a, dtype=np.float64), (a,), (np.ones(5),))
    np.testing.assert_allclose(log_tangent, implicit / x, rtol=1e-5)

    def mean_derivative(a):
        return fg.grad(lambda a: fr.gamma(KEY, a, (N,), dtype=np.float64).mean())(a)

    for a in (0.4, 3.0):  # the draws' derivatives have variance below a's
        assert abs(mean_derivative(a) - 1) < 5 * np.sqrt(max(a, 1) / N)


def test_log_gamma_derivatives_hold_for_draws_below_the_smallest_float():
    """For a = 0.01 many float32 log-gamma draws lie below log(tiny) = -87.3 (their exp
    underflows); their derivative, forward and reverse, is still the implicit one, here by
    mpmath (its incomplete gamma function at x = e^L, differentiated in a)."""
    import mpmath as mp

    a = np.full(8, 0.01, np.float32)
    log_x = np.asarray(fr.loggamma(KEY, a))
    assert (log_x < -90).any() and (log_x > -80).any()

    def implicit(a, log_x):
        x = mp.e ** mp.mpf(float(log_x))

        def cdf(s):
            return mp.gammainc(s, 0, x, regularized=True)

        density = x ** (a - 1) * mp.e ** (-x) / mp.gamma(a)
        return float(-mp.diff(cdf, mp.mpf(a)) / density / x)

    expected = [implicit(0.01, v) for v in log_x]
    _, tangent = fg.jvp(lambda a: fr.loggamma(KEY, a), (a,), (np.ones(8, np.float32),))
    np.testing.assert_allclose(tangent, expected, rtol=1e-4)
    weights = np.arange(1.0, 9.0, dtype=np.float32)
    grads = fg.grad(lambda a: (fr.loggamma(KEY, a) * weights).sum())(a)
    np.testing.assert_allclose(grads, weights * np.array(expected), rtol=1e-4)


def test_derivatives_of_samplers_built_on_gamma_match_their_means():
    """Beta(a, b)'s mean a / (a + b) has derivative b / (a + b)**2 in a; chi-square's mean df
    has derivative 1; Dirichlet's first coordinate's mean a0 / sum(a) moves as Beta's."""
    n = 20000

    def beta_mean(a):
        return fr.beta(KEY, a, 3.0, (n,), dtype=np.float64).mean()

    def chisquare_mean(df):
        return fr.chisquare(KEY, df, (n,), dtype=np.float64).mean()

    def dirichlet_mean(a):
        alpha = fg.numpy.stack([a, fg.numpy.asarray(3.0, np.float64)])
        return fr.dirichlet(KEY, alpha, (n,), dtype=np.float64)[:, 0].mean()

    assert abs(fg.grad(beta_mean)(2.0) - 3 / 25) < 0.01
    assert abs(fg.grad(dirichlet_mean)(2.0) - 3 / 25) < 0.01
    assert abs(fg.grad(chisquare_mean)(4.0) - 1) < 0.05
