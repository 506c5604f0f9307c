"""JAX's `experimental.compilation_cache` module path, for its `compilation_cache` module."""

from funcgrad.experimental.compilation_cache import compilation_cache

__all__ = ["compilation_cache"]
