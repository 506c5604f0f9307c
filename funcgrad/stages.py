"""The stages of a jitted function under JAX's `jax.stages` names, for annotations:
`jit(f)` is `Wrapped`, `.lower(...)` gives `Lowered`, `.compile()` gives `Compiled`."""

from funcgrad.transforms.jit import Compiled, Lowered
from funcgrad.transforms.jit import Jitted as Wrapped

__all__ = ["Compiled", "Lowered", "Wrapped"]
