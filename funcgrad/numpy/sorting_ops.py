"""Sorting and searching with NumPy's names: sort, argsort, searchsorted, unique, where, ..."""

from __future__ import annotations

__all__: list[str] = []
