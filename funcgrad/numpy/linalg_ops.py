"""Products with NumPy's names: matmul, dot, tensordot, einsum, outer, ..."""

from __future__ import annotations

__all__: list[str] = []
