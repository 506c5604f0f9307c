"""Array creation ranges and other NumPy functions: arange, linspace, eye, clip, where, ..."""

from __future__ import annotations

__all__: list[str] = []
