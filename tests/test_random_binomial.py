"""random.binomial and random.multinomial against SciPy's distributions: goodness of fit,
moments, edge cases, and jit/vmap consistency."""

import numpy as np
import pytest
import scipy.stats as stats

import funcgrad as fg

KEY = fg.random.PRNGKey(42)


def chi_square_p_value(samples, n, p):
    """Goodness of fit to Binomial(n, p), over bins with at least 5 expected samples."""
    support = np.arange(int(n) + 1)
    expected = stats.binom.pmf(support, n, p) * samples.size
    observed = np.bincount(samples.astype(np.int64), minlength=support.size)[: support.size]
    keep = expected >= 5
    observed = np.append(observed[keep], observed[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    if expected[-1] < 5:  # fold a too-small remainder into the largest bin
        top = np.argmax(expected[:-1])
        observed[top] += observed[-1]
        expected[top] += expected[-1]
        observed, expected = observed[:-1], expected[:-1]
    expected *= observed.sum() / expected.sum()
    return stats.chisquare(observed, expected).pvalue


@pytest.mark.parametrize(
    ("n", "p"),
    [(5, 0.3), (30, 0.1), (12, 0.9), (60, 0.5), (200, 0.3), (1000, 0.95), (40, 0.6)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binomial_fits_the_distribution(n, p, dtype):
    samples = np.asarray(fg.random.binomial(KEY, n, p, shape=(20000,), dtype=dtype))
    assert samples.dtype == dtype
    assert np.all(samples == np.round(samples)) and samples.min() >= 0 and samples.max() <= n
    assert chi_square_p_value(samples, n, p) > 1e-4


@pytest.mark.parametrize(("n", "p"), [(1e6, 0.01), (1e7, 0.4), (3e4, 0.999)])
def test_binomial_moments_for_large_counts_in_float32(n, p):
    samples = np.asarray(fg.random.binomial(KEY, n, p, shape=(20000,)), np.float64)
    mean, variance = n * p, n * p * (1 - p)
    assert abs(samples.mean() - mean) < 5 * np.sqrt(variance / samples.size)
    assert abs(samples.var() / variance - 1) < 5 * np.sqrt(2 / samples.size)


def test_binomial_edge_cases_broadcasting_and_transforms():
    edges = fg.random.binomial(
        KEY,
        np.array([0.0, 7, 7, -1, 2.5, np.nan, 3, 3]),
        np.array([0.5, 0.0, 1.0, 0.5, 0.5, 0.5, -0.1, 1.5]),
    )
    np.testing.assert_array_equal(np.asarray(edges)[:3], [0, 0, 7])
    assert np.isnan(np.asarray(edges)[3:]).all()
    grid = fg.random.binomial(
        KEY, np.array([[10.0], [50.0], [500.0]]), np.array([0.1, 0.5, 0.8, 0.99])
    )
    assert grid.shape == (3, 4)
    eager = np.asarray(fg.random.binomial(KEY, 30.0, 0.4, shape=(64,)))
    jitted = np.asarray(fg.jit(lambda k: fg.random.binomial(k, 30.0, 0.4, shape=(64,)))(KEY))
    np.testing.assert_array_equal(jitted, eager)
    keys = fg.random.split(KEY, 3)
    mapped = np.asarray(fg.vmap(lambda k: fg.random.binomial(k, 300.0, 0.3, shape=(5,)))(keys))
    looped = np.stack([np.asarray(fg.random.binomial(k, 300.0, 0.3, shape=(5,))) for k in keys])
    np.testing.assert_array_equal(mapped, looped)


def test_multinomial_counts_sum_to_n_with_the_right_moments():
    p = np.array([0.2, 0.3, 0.5])
    counts = np.asarray(fg.random.multinomial(KEY, 100, p, shape=(20000,)), np.float64)
    assert counts.shape == (20000, 3)
    np.testing.assert_array_equal(counts.sum(axis=1), 100)
    np.testing.assert_allclose(counts.mean(axis=0), 100 * p, atol=0.2)
    covariance = np.cov(counts.T)
    wanted = 100 * (np.diag(p) - np.outer(p, p))
    np.testing.assert_allclose(covariance, wanted, atol=0.6)
    assert chi_square_p_value(counts[:, 1], 100, 0.3) > 1e-4


def test_multinomial_batches_over_n_and_p():
    p = np.array([[0.5, 0.5, 0.0], [0.1, 0.1, 0.8]])
    counts = np.asarray(fg.random.multinomial(KEY, np.array([[10.0], [1000.0]]), p))
    assert counts.shape == (2, 2, 3)
    np.testing.assert_array_equal(counts.sum(-1), [[10, 10], [1000, 1000]])
    assert (counts[:, 0, 2] == 0).all()  # a category of probability 0 gets nothing
    with pytest.raises(ValueError, match="multinomial: p needs a last axis"):
        fg.random.multinomial(KEY, 3, 0.5)
