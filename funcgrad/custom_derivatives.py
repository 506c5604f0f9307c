"""jax.custom_derivatives: functions with user-defined derivatives (see
`funcgrad.transforms.custom_derivatives`), the symbolic zeros their rules may work with, and
`closure_convert` for the values their rules close over."""

from funcgrad.transforms.custom_derivatives import (
    CustomVJPPrimal,
    SymbolicZero,
    custom_gradient,
    custom_jvp,
    custom_vjp,
    custom_vjp_primal_tree_values,
    zero_from_primal,
)
from funcgrad.transforms.tracing_tools import closure_convert

__all__ = [
    "CustomVJPPrimal",
    "SymbolicZero",
    "closure_convert",
    "custom_gradient",
    "custom_jvp",
    "custom_vjp",
    "custom_vjp_primal_tree_values",
    "zero_from_primal",
]
