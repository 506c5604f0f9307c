"""funcgrad.experimental: APIs that may still change, under JAX's experimental names."""

from funcgrad.experimental import checkify, ode, shard_map, sparse

__all__ = ["checkify", "ode", "shard_map", "sparse"]
