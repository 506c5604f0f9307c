"""jax.custom_batching: functions with user-defined vmap rules (see
`funcgrad.transforms.custom_batching`)."""

from funcgrad.transforms.custom_batching import custom_vmap, sequential_vmap

__all__ = ["custom_vmap", "sequential_vmap"]
