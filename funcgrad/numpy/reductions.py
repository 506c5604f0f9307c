"""Reductions with NumPy's names: sum, mean, var, max, argmax, cumsum, ..."""

from __future__ import annotations

__all__: list[str] = []
