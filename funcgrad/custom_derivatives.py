"""jax.custom_derivatives: functions with user-defined derivatives (see
`funcgrad.transforms.custom_derivatives`), and `closure_convert` for the values their rules
close over."""

from funcgrad.transforms.custom_derivatives import custom_gradient, custom_jvp, custom_vjp
from funcgrad.transforms.tracing_tools import closure_convert

__all__ = ["closure_convert", "custom_gradient", "custom_jvp", "custom_vjp"]
