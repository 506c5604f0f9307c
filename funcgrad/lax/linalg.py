"""Linear algebra primitives: dot_general and conv_general_dilated."""

from __future__ import annotations

__all__: list[str] = []
