"""while_loop and fori_loop."""

from __future__ import annotations

__all__: list[str] = []
