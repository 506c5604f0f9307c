"""funcgrad.lax: the primitives and their public wrappers, with JAX's signatures.

Each family module declares its primitives with all their rules and lists its public wrappers
in `__all__`.
"""

import sys
import warnings

from funcgrad import core
from funcgrad.lax import (
    complex_pairs,  # noqa: F401  (the compiler's complex decompositions)
    fft_passes,  # noqa: F401  (the compiler's Fourier transform passes)
)
from funcgrad.lax.accuracy import *
from funcgrad.lax.base import asarray
from funcgrad.lax.composed import *
from funcgrad.lax.control_flow import *
from funcgrad.lax.convolutions import *
from funcgrad.lax.dot_algorithms import *
from funcgrad.lax.eig import *
from funcgrad.lax.elementwise import *
from funcgrad.lax.extra import *
from funcgrad.lax.fft import *
from funcgrad.lax.indexing import *
from funcgrad.lax.linalg import *
from funcgrad.lax.linalg_decomp import *
from funcgrad.lax.parallel import *
from funcgrad.lax.platform import *
from funcgrad.lax.random_bits import *
from funcgrad.lax.reductions import *
from funcgrad.lax.shapes import *
from funcgrad.lax.sharding_constraint import *
from funcgrad.lax.sorting import *
from funcgrad.lax.special import *

# Every primitive under its name and "_p" (`add_p`, `scan_p`), as JAX's lax exports its own:
# interpreters of programs compare `eqn.primitive` with them.
_FAMILIES = (
    "control_flow.conditionals",
    "control_flow.loops",
    "control_flow.scan",
    "control_flow.solves",
    "eig",
    "elementwise",
    "extra",
    "fft",
    "indexing",
    "linalg",
    "linalg_decomp",
    "parallel",
    "platform",
    "random_bits",
    "reductions",
    "schur",
    "shapes",
    "sharding_constraint",
    "sorting",
)
globals().update(
    {
        name: value
        for family in _FAMILIES
        for name, value in vars(sys.modules[f"{__name__}.{family}"]).items()
        if isinstance(value, core.Primitive) and name == f"{value.name}_p"
    }
)

# The NumPy reference implementations produce IEEE results (inf, nan) for out-of-domain inputs
# exactly as compiled code does; NumPy's warnings about them are noise to a funcgrad user. They
# are raised from the impl's module, or from what calls a NumPy ufunc impl directly: the eval
# trace and the backend executor.
warnings.filterwarnings(
    "ignore",
    category=RuntimeWarning,
    module=r"funcgrad\.(lax|interpreters\.eval|backends\.numpy\.executor)(\.|$)",
)
