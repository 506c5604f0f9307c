"""scan, map and associative_scan."""

from __future__ import annotations

__all__: list[str] = []
