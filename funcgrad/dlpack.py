"""jax.dlpack: arrays exchanged with other libraries (NumPy, PyTorch, CuPy, ...) through the
DLPack protocol.

`from_dlpack` takes any object exporting `__dlpack__` and `__dlpack_device__`; the other way,
a funcgrad array exports itself (`Array.__dlpack__`), so `torch.from_dlpack(x)` or
`np.from_dlpack(x)` take it directly.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad.numpy import from_dlpack

__all__ = ["from_dlpack", "is_supported_dtype"]

# What DLPack carries between funcgrad and other libraries: the host exchange goes through
# NumPy's DLPack support and the GPU one through CuPy's, which take booleans, integers, floats
# and complex numbers, and none of ml_dtypes' (bfloat16, float8, int4: kind "V").
_SUPPORTED_KINDS = "biufc"


def is_supported_dtype(dtype) -> bool:
    """Whether funcgrad arrays of `dtype` can be exchanged through DLPack."""
    dtype = np.dtype(dtype)
    supported = dtype in dtypes.supported_dtypes and dtype.kind in _SUPPORTED_KINDS
    return supported and not dtypes.is_narrow(dtype)  # (float8_e5m2's kind is "f")
