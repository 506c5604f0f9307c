"""funcgrad.experimental: APIs that may still change, under JAX's experimental names."""

from funcgrad.callbacks import io_callback
from funcgrad.experimental import (
    checkify,
    compilation_cache,
    jet,
    key_reuse,
    mesh_utils,
    multihost_utils,
    ode,
    shard_map,
    sparse,
)

__all__ = [
    "checkify",
    "compilation_cache",
    "io_callback",
    "jet",
    "key_reuse",
    "mesh_utils",
    "multihost_utils",
    "ode",
    "shard_map",
    "sparse",
]
