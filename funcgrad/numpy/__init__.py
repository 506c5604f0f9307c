"""funcgrad.numpy: NumPy's API over funcgrad arrays, written only in terms of funcgrad.lax."""

import numpy as _np

from funcgrad import dtypes as _dtypes
from funcgrad.array import Array as ndarray
from funcgrad.numpy import array_methods as _array_methods
from funcgrad.numpy import fft, linalg
from funcgrad.numpy._bessel import i0
from funcgrad.numpy._promotion import broadcast_shapes, result_type
from funcgrad.numpy.creation import *
from funcgrad.numpy.extra import *
from funcgrad.numpy.indexing import *
from funcgrad.numpy.linalg_ops import *
from funcgrad.numpy.misc import *
from funcgrad.numpy.reductions import *
from funcgrad.numpy.scalar_types import scalar_type as _scalar_type
from funcgrad.numpy.shape_ops import *
from funcgrad.numpy.sorting_ops import *
from funcgrad.numpy.ufunc_objects import *
from funcgrad.numpy.ufuncs import *

bool_ = _scalar_type(_dtypes.bool_)
int8, int16, int32, int64 = map(_scalar_type, _dtypes.signed_dtypes)
uint8, uint16, uint32, uint64 = map(_scalar_type, _dtypes.unsigned_dtypes)
bfloat16, float16, float32, float64 = map(_scalar_type, _dtypes.float_dtypes)
complex64, complex128 = map(_scalar_type, _dtypes.complex_dtypes)
float8_e3m4 = _scalar_type(_dtypes.float8_e3m4)
float8_e4m3 = _scalar_type(_dtypes.float8_e4m3)
float8_e4m3b11fnuz = _scalar_type(_dtypes.float8_e4m3b11fnuz)
float8_e4m3fn = _scalar_type(_dtypes.float8_e4m3fn)
float8_e4m3fnuz = _scalar_type(_dtypes.float8_e4m3fnuz)
float8_e5m2 = _scalar_type(_dtypes.float8_e5m2)
float8_e5m2fnuz = _scalar_type(_dtypes.float8_e5m2fnuz)
float8_e8m0fnu = _scalar_type(_dtypes.float8_e8m0fnu)
float6_e2m3fn = _scalar_type(_dtypes.float6_e2m3fn)
float6_e3m2fn = _scalar_type(_dtypes.float6_e3m2fn)
float4_e2m1fn = _scalar_type(_dtypes.float4_e2m1fn)
int1, int2, int4, uint1, uint2, uint4 = map(_scalar_type, _dtypes.narrow_int_dtypes)
csingle, cdouble = complex64, complex128
dtype = _np.dtype
promote_types = _dtypes.promote_types
finfo = _dtypes.finfo
iinfo = _dtypes.iinfo
floating, integer, signedinteger, unsignedinteger = (
    _np.floating,
    _np.integer,
    _np.signedinteger,
    _np.unsignedinteger,
)
inexact, number, generic = _np.inexact, _np.number, _np.generic
complexfloating = _np.complexfloating
# NumPy's abstract string, flexible and object scalar types and its warning class, for code
# that tests against them (no funcgrad array holds such elements).
character, flexible, object_ = _np.character, _np.flexible, _np.object_
ComplexWarning = _np.exceptions.ComplexWarning
pi, e, inf, nan, euler_gamma = _np.pi, _np.e, _np.inf, _np.nan, _np.euler_gamma
newaxis = None

_array_methods.install()


def __getattr__(name: str):
    """float_, int_ and complex_: the default dtypes' scalar types, read when asked for, so
    that they follow `enable_x64` (float64, int64 and complex128 under it)."""
    if name == "float_":
        return _scalar_type(_dtypes.default_float)
    if name == "int_":
        return _scalar_type(_dtypes.default_int)
    if name == "complex_":
        return _scalar_type(_dtypes.default_complex())
    raise AttributeError(f"module 'funcgrad.numpy' has no attribute {name!r}")
