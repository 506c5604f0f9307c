"""Indexing primitives: dynamic slices, gather and scatter."""

from __future__ import annotations

__all__: list[str] = []
