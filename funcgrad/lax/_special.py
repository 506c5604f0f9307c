"""Special functions for the NumPy reference implementations (placeholder, being replaced)."""

import math

import numpy as np


def _vectorized(scalar_fn):
    def fn(x):
        x = np.asarray(x)
        out = np.vectorize(scalar_fn, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)
        return out[()] if out.ndim == 0 else out

    return fn


erf = _vectorized(math.erf)
erfc = _vectorized(math.erfc)
lgamma = _vectorized(math.lgamma)
erf_inv = _vectorized(lambda v: float("nan"))
digamma = _vectorized(lambda v: float("nan"))
