"""The accuracy a caller asks of a transcendental function (`lax.exp(x, accuracy=...)`).

A request names a mode (`AccuracyMode.HIGHEST` or `DEFAULT`) or the error it tolerates
(`Tolerance`). funcgrad computes each function one way on every backend, as accurately as its
implementation allows, so a request is checked and then changes nothing: the functions that
take one (exp, exp2, log, log1p, expm1, tanh, logistic, sin, cos, tan, sqrt, rsqrt, cbrt)
give the same values whatever it says.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["AccuracyMode", "Tolerance"]


class AccuracyMode(enum.Enum):
    HIGHEST = 1
    DEFAULT = 2


class Tolerance:
    """The errors a transcendental function may make: absolute (`atol`), relative (`rtol`)
    or in units in the last place (`ulps`); at least one of them, none negative."""

    def __init__(self, atol: float = 0.0, rtol: float = 0.0, ulps: int = 0):
        if atol < 0.0 or rtol < 0.0 or ulps < 0:
            raise ValueError(
                f"Tolerance: tolerances must be non-negative, got atol={atol}, rtol={rtol}, "
                f"ulps={ulps}"
            )
        if atol == 0.0 and rtol == 0.0 and ulps == 0:
            raise ValueError("Tolerance: give at least one of atol, rtol and ulps")
        self.atol = atol
        self.rtol = rtol
        self.ulps = ulps

    def __repr__(self) -> str:
        return f"Tolerance(atol={self.atol}, rtol={self.rtol}, ulps={self.ulps})"


def check_accuracy(name: str, accuracy: Any) -> None:
    """Refuse an `accuracy` that is neither None, an AccuracyMode nor a Tolerance."""
    if accuracy is not None and not isinstance(accuracy, AccuracyMode | Tolerance):
        raise TypeError(
            f"{name}: accuracy must be None, an AccuracyMode or a Tolerance, got "
            f"{type(accuracy).__name__} {accuracy!r}"
        )
