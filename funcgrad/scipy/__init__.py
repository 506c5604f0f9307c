"""funcgrad.scipy: SciPy's functions over funcgrad arrays, with SciPy's names."""

from funcgrad.scipy import integrate, linalg, optimize, sparse, special, stats

__all__ = ["integrate", "linalg", "optimize", "sparse", "special", "stats"]
