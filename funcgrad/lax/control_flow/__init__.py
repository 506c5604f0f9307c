"""Control flow primitives: cond/switch, while_loop/fori_loop, scan/map/associative_scan.

Each is a higher-order primitive carrying the jaxprs of its branches or body, with jvp,
transpose (where linear), partial-evaluation and batching rules, so it works eagerly and
under every transformation, and compiles to native loops and branches.
"""

from funcgrad.lax.control_flow.conditionals import *
from funcgrad.lax.control_flow.loops import *
from funcgrad.lax.control_flow.scan import *
from funcgrad.lax.control_flow.solves import *
