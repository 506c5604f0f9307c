"""The threefry2x32 counter-based random bit generator, as a primitive."""

from __future__ import annotations

__all__: list[str] = []
