"""funcgrad.numpy.linalg: norms and decompositions with NumPy's names."""

from __future__ import annotations

__all__: list[str] = []
