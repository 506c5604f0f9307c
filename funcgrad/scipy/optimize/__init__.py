"""funcgrad.scipy.optimize: unconstrained minimization with SciPy's names (minimize with
BFGS, or L-BFGS under its experimental name) and the strong-Wolfe line search it uses."""

from funcgrad.scipy.optimize._line_search import LineSearchResults, line_search
from funcgrad.scipy.optimize._minimize import OptimizeResults, minimize

__all__ = ["LineSearchResults", "OptimizeResults", "line_search", "minimize"]
