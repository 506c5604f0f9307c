"""Type annotations under JAX's `jax.typing` names: `ArrayLike` for anything funcgrad
converts to an array (its arrays and tracers, NumPy arrays and scalars, Python numbers), and
`DTypeLike` for anything naming a dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from funcgrad.array import Array
from funcgrad.core import Tracer

__all__ = ["ArrayLike", "DTypeLike"]

ArrayLike = Array | Tracer | np.ndarray | np.bool_ | np.number | bool | int | float | complex
DTypeLike = str | type[Any] | np.dtype
