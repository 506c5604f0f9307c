"""funcgrad.scipy.cluster.vq: `vq`, the nearest code of a code book for each observation."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.numpy._promotion import promote_dtypes_inexact

__all__ = ["vq"]


def vq(obs, code_book, check_finite: bool = True) -> tuple[Array, Array]:
    """(code, dist): for each observation (a row of obs, M x N, or an entry of a 1-d obs) the
    index of the nearest code (row of code_book) in Euclidean distance, the first of equals,
    and that distance. `check_finite` is accepted and ignored: a compiled program cannot look
    at its values before it runs."""
    del check_finite
    obs, code_book = promote_dtypes_inexact(obs, code_book)
    if obs.ndim != code_book.ndim:
        raise ValueError(
            f"vq: obs and code_book must have the same number of axes, got shapes {obs.shape} "
            f"and {code_book.shape}"
        )
    if obs.ndim == 1:
        obs, code_book = obs[:, None], code_book[:, None]
    if obs.ndim != 2 or obs.shape[1] != code_book.shape[1]:
        raise ValueError(
            f"vq: expected obs (M, N) and code_book (K, N) (or both 1-d), got shapes "
            f"{obs.shape} and {code_book.shape}"
        )
    if code_book.shape[0] == 0:
        raise ValueError("vq: the code book is empty; there is no code to choose")
    difference = obs[:, None, :] - code_book[None, :, :]
    distances = fnp.sqrt(fnp.sum(fnp.abs(difference) ** 2, axis=-1))
    code = fnp.argmin(distances, axis=-1)
    return code, fnp.take_along_axis(distances, code[:, None], axis=-1)[:, 0]
