"""Reductions, cumulative reductions and windowed reductions (pooling)."""

from __future__ import annotations

__all__: list[str] = []
