"""funcgrad.scipy.stats: SciPy's probability distributions over funcgrad arrays, with the
submodules and functions of jax.scipy.stats (one module per distribution, its functions named
as SciPy's methods: logpdf, cdf, sf, ppf, ...).

Every function is a composition of funcgrad.numpy, lax and scipy.special operations, so grad,
vmap and jit apply. Integer and boolean arguments compute in float32, funcgrad's default float;
float64 arguments compute in float64. Beside the distributions are JAX's descriptive
statistics (mode, rankdata, sem) and its kernel density estimate (gaussian_kde).
"""

from funcgrad.scipy.stats import (
    bernoulli,
    beta,
    betabinom,
    binom,
    cauchy,
    chi2,
    dirichlet,
    expon,
    gamma,
    gennorm,
    geom,
    gumbel_l,
    gumbel_r,
    laplace,
    logistic,
    lognorm,
    multinomial,
    multivariate_normal,
    nbinom,
    norm,
    pareto,
    poisson,
    t,
    truncnorm,
    uniform,
    vonmises,
    wrapcauchy,
)
from funcgrad.scipy.stats._descriptive import ModeResult, mode, rankdata, sem
from funcgrad.scipy.stats._kde import gaussian_kde

__all__ = [
    "ModeResult",
    "bernoulli",
    "beta",
    "betabinom",
    "binom",
    "cauchy",
    "chi2",
    "dirichlet",
    "expon",
    "gamma",
    "gaussian_kde",
    "gennorm",
    "geom",
    "gumbel_l",
    "gumbel_r",
    "laplace",
    "logistic",
    "lognorm",
    "mode",
    "multinomial",
    "multivariate_normal",
    "nbinom",
    "norm",
    "pareto",
    "poisson",
    "rankdata",
    "sem",
    "t",
    "truncnorm",
    "uniform",
    "vonmises",
    "wrapcauchy",
]
