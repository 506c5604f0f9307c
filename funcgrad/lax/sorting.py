"""Sorting primitives: multi-operand stable sort and top_k."""

from __future__ import annotations

__all__: list[str] = []
