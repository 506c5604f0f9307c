"""funcgrad.experimental: APIs that may still change, under JAX's experimental names."""

from funcgrad.experimental import ode

__all__ = ["ode"]
