"""funcgrad.scipy: SciPy's functions over funcgrad arrays, with SciPy's names."""

from funcgrad.scipy import linalg, special, stats

__all__ = ["linalg", "special", "stats"]
