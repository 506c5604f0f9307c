"""The stages of a jitted function under JAX's `jax.stages` names, for annotations:
`jit(f)` is `Wrapped`, `.trace(...)` gives `Traced`, `.lower(...)` (of either) gives
`Lowered`, `.compile()` gives `Compiled`."""

from funcgrad.transforms.jit import ArgInfo, Compiled, Lowered, Traced
from funcgrad.transforms.jit import Jitted as Wrapped

__all__ = ["ArgInfo", "Compiled", "Lowered", "Traced", "Wrapped"]
