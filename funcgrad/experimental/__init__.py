"""funcgrad.experimental: APIs that may still change, under JAX's experimental names."""

from funcgrad.experimental import checkify, ode

__all__ = ["checkify", "ode"]
