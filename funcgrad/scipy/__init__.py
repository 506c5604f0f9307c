"""funcgrad.scipy: SciPy's functions over funcgrad arrays, with SciPy's names."""

from funcgrad.scipy import special

__all__ = ["special"]
