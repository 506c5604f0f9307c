"""funcgrad.scipy.integrate: integration of sampled functions, with SciPy's names."""

from funcgrad.numpy import trapezoid

__all__ = ["trapezoid"]
