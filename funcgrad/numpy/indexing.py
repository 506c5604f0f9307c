"""NumPy indexing: x[...], x.at[...].set/add/..., take and take_along_axis."""

from __future__ import annotations

__all__: list[str] = []
