"""Shape manipulation with NumPy's names: reshape, transpose, concatenate, stack, pad, ..."""

from __future__ import annotations

__all__: list[str] = []
