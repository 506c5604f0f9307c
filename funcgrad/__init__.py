"""funcgrad: composable transformations (grad, vmap, jit) of pure functions over arrays."""

from funcgrad import dtypes, lax, numpy, tree_util
from funcgrad.array import Array, Device, devices
from funcgrad.core import ShapedArray
from funcgrad.interpreters import eval as _eval  # noqa: F401  (installs the eval trace)
from funcgrad.transforms.make_jaxpr import ShapeDtypeStruct, make_jaxpr

__version__ = "0.1.0"

__all__ = [
    "Array",
    "Device",
    "ShapeDtypeStruct",
    "ShapedArray",
    "devices",
    "dtypes",
    "lax",
    "make_jaxpr",
    "numpy",
    "tree_util",
]
