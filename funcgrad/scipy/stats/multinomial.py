"""The multinomial distribution of `n` draws over the categories of `p`, as
scipy.stats.multinomial.

The categories are the last axis of `x` and `p`; leading axes broadcast with `n`. `x` and `n`
are counts and must have integer dtypes. logpmf is -inf where the counts do not sum to n.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import gammaln, xlogy


def logpmf(x: ArrayLike, n: ArrayLike, p: ArrayLike) -> Array:
    x, n = fnp.asarray(x), fnp.asarray(n)
    if not (dtypes.issubdtype(x.dtype, fnp.integer) and dtypes.issubdtype(n.dtype, fnp.integer)):
        raise ValueError(
            f"multinomial.logpmf: x and n must be integer counts, got dtypes {x.dtype} and "
            f"{n.dtype}"
        )
    (p,) = promote_args_inexact("multinomial.logpmf", p)
    sums_to_n = fnp.sum(x, axis=-1) == n
    # (in float64: the lgamma terms cancel, which float32 lost)
    dtype, wide_p = p.dtype, p.astype(np.float64)
    x, n = x.astype(np.float64), n.astype(np.float64)
    value = gammaln(n + 1) + fnp.sum(xlogy(x, wide_p) - gammaln(x + 1), axis=-1)
    return fnp.where(sums_to_n, value.astype(dtype), -fnp.inf)


def pmf(x: ArrayLike, n: ArrayLike, p: ArrayLike) -> Array:
    return fnp.exp(logpmf(x, n, p))
