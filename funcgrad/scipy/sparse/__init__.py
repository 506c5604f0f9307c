"""funcgrad.scipy.sparse: SciPy's sparse namespace; its linear solvers take A as a function."""

from funcgrad.scipy.sparse import linalg

__all__ = ["linalg"]
