"""Dtypes and type promotion.

funcgrad promotes like JAX: a lattice in which Python scalars are *weakly typed* (they take the
dtype of the array they meet), float32 is the default float and int32 the default int (float64
and int64 under `config.enable_x64`), and float64 given by the user is kept, never silently
downcast. Complex numbers sit above the
floats: float32 meets complex64 in complex64, float64 meets it in complex128, and a Python
complex scalar is a weak complex that takes the width of the floats it meets.

The narrow formats (8- and 4-bit floats, 2- and 4-bit integers) sit above the weak scalars of
their kind and below nothing: they meet Python scalars, booleans and (the floats) integers, and
any other dtype only through an explicit conversion (`TypePromotionError` otherwise), so that
no computation widens or narrows them unnoticed.
"""

from __future__ import annotations

import builtins
import functools

import ml_dtypes
import numpy as np

from funcgrad.errors import TypePromotionError

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)
# The half-precision floats, which compute in float32 and round after every operation.
HALF_FLOATS = (float16, bfloat16)

float8_e3m4 = np.dtype(ml_dtypes.float8_e3m4)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3b11fnuz = np.dtype(ml_dtypes.float8_e4m3b11fnuz)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e4m3fnuz = np.dtype(ml_dtypes.float8_e4m3fnuz)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e5m2fnuz = np.dtype(ml_dtypes.float8_e5m2fnuz)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
float6_e2m3fn = np.dtype(ml_dtypes.float6_e2m3fn)
float6_e3m2fn = np.dtype(ml_dtypes.float6_e3m2fn)
float4_e2m1fn = np.dtype(ml_dtypes.float4_e2m1fn)
int1 = np.dtype(ml_dtypes.int1)
uint1 = np.dtype(ml_dtypes.uint1)
int2 = np.dtype(ml_dtypes.int2)
int4 = np.dtype(ml_dtypes.int4)
uint2 = np.dtype(ml_dtypes.uint2)
uint4 = np.dtype(ml_dtypes.uint4)

# The narrow floats, one value a byte (the 6- and 4-bit ones in its low bits), each with how it
# spells infinity and NaN, which decides where rounding sends overflow and NaN:
#   "ieee":   both, as IEEE formats do (all-ones exponent); overflow rounds to infinity.
#   "fn":     no infinity; NaN is all ones after the sign; overflow and infinity give NaN.
#   "fnuz":   no infinity and no -0; the one NaN is the pattern of -0; overflow gives NaN.
#   "e8m0":   a power of two, unsigned; NaN is all ones; zero, negatives and overflow give NaN.
#   "finite": neither; overflow and infinity saturate to the largest value.
NARROW_FLOATS = {
    float8_e3m4: "ieee",
    float8_e4m3: "ieee",
    float8_e5m2: "ieee",
    float8_e4m3fn: "fn",
    float8_e4m3fnuz: "fnuz",
    float8_e4m3b11fnuz: "fnuz",
    float8_e5m2fnuz: "fnuz",
    float8_e8m0fnu: "e8m0",
    float6_e2m3fn: "finite",
    float6_e3m2fn: "finite",
    float4_e2m1fn: "finite",
}
# The narrow integers, one value a byte, in its low bits.
NARROW_INTS = (int1, int2, int4, uint1, uint2, uint4)

# The dtype of tangents of integer and boolean values: they carry no information.
float0 = np.dtype([("float0", np.void, 0)])

# The defaults: what Python scalars, `float` and `int` as dtypes, creation functions, indices and
# counts become. 32-bit unless `config.enable_x64` (`use_x64`) makes them 64-bit.
float_ = float32
int_ = int32
default_float = float32
default_int = int32

bool_dtypes = (bool_,)
signed_dtypes = (int8, int16, int32, int64)
unsigned_dtypes = (uint8, uint16, uint32, uint64)
int_dtypes = signed_dtypes + unsigned_dtypes
float_dtypes = (bfloat16, float16, float32, float64)
complex_dtypes = (complex64, complex128)
narrow_float_dtypes = tuple(NARROW_FLOATS)
narrow_int_dtypes = NARROW_INTS
narrow_dtypes = narrow_float_dtypes + narrow_int_dtypes
supported_dtypes = frozenset(
    bool_dtypes + int_dtypes + float_dtypes + complex_dtypes + narrow_dtypes
)

# What arithmetic on a storage dtype runs in: each operation widens its operands, computes,
# and rounds its result back (the narrow integers wrap, as their arithmetic does).
_COMPUTED_IN = {
    float16: float32,
    bfloat16: float32,
    **{d: float32 for d in narrow_float_dtypes},
    **{d: int32 for d in narrow_int_dtypes},
}
NARROW = frozenset(narrow_dtypes)
_EXTENSION_FLOATS = frozenset((bfloat16, *narrow_float_dtypes))
_NARROW_UNSIGNED = frozenset((uint1, uint2, uint4))

# The promotion lattice: each node lists the nodes directly above it. `i*` and `f*` are the
# weak int, float and complex of Python scalars, which sit below every array type of their kind.
_WEAK_INT = "i*"
_WEAK_FLOAT = "f*"
_WEAK_COMPLEX = "c*"
_LATTICE_UP: dict = {
    bool_: [_WEAK_INT],
    _WEAK_INT: [uint8, int8, *narrow_int_dtypes],
    uint8: [int16, uint16],
    uint16: [int32, uint32],
    uint32: [int64, uint64],
    uint64: [_WEAK_FLOAT],
    int8: [int16],
    int16: [int32],
    int32: [int64],
    int64: [_WEAK_FLOAT],
    _WEAK_FLOAT: [bfloat16, float16, *narrow_float_dtypes, _WEAK_COMPLEX],
    bfloat16: [float32],
    float16: [float32],
    float32: [float64, complex64],
    float64: [complex128],
    _WEAK_COMPLEX: [complex64],
    complex64: [complex128],
    complex128: [],
    **{d: [] for d in narrow_dtypes},
}


# The lattice of `numpy_dtype_promotion("strict")`: a Python scalar still meets any array of
# its kind or above it (an int a float, a float a complex), but no two different array dtypes
# meet, and booleans meet only booleans.
_STRICT_LATTICE_UP: dict = {
    **{node: [] for node in _LATTICE_UP},
    _WEAK_INT: [_WEAK_FLOAT, *int_dtypes, *narrow_int_dtypes],
    _WEAK_FLOAT: [_WEAK_COMPLEX, *float_dtypes, *narrow_float_dtypes],
    _WEAK_COMPLEX: list(complex_dtypes),
}


def _upper_bounds(node, lattice: dict) -> frozenset:
    seen = {node}
    stack = [node]
    while stack:
        for above in lattice[stack.pop()]:
            if above not in seen:
                seen.add(above)
                stack.append(above)
    return frozenset(seen)


_UPPER = {node: _upper_bounds(node, _LATTICE_UP) for node in _LATTICE_UP}
_STRICT_UPPER = {node: _upper_bounds(node, _STRICT_LATTICE_UP) for node in _LATTICE_UP}

# How implicit promotion between different dtypes behaves (`config.numpy_dtype_promotion`,
# which sets it through `use_promotion`): "standard" (the lattice above) or "strict".
promotion = "standard"


_INEXACT = frozenset(float_dtypes + narrow_float_dtypes + complex_dtypes)
# For each Python scalar type, the strong dtypes it meets without changing them: the fast path
# of funcgrad.numpy's promotion reads it (under "strict" a bool meets only bools).
scalar_fits = {
    builtins.complex: frozenset(complex_dtypes),
    builtins.float: _INEXACT,
    builtins.int: _INEXACT | frozenset(int_dtypes + narrow_int_dtypes),
    builtins.bool: supported_dtypes,
}


def use_promotion(mode: str) -> None:
    """Promote along the standard or the strict lattice; only
    `config.update("numpy_dtype_promotion", ...)` calls this."""
    global promotion
    promotion = mode
    scalar_fits[builtins.bool] = frozenset((bool_,)) if mode == "strict" else supported_dtypes


@functools.cache
def _join(a, b, strict: bool):
    upper = _STRICT_UPPER if strict else _UPPER
    common = upper[a] & upper[b]
    # The least upper bound is the common bound that every other common bound lies above.
    for candidate in common:
        if common <= upper[candidate]:
            return candidate
    if strict:
        standard = _join(a, b, False)  # (raises where the standard lattice has no join either)
        weak_defaults = {_WEAK_INT: "int32", _WEAK_FLOAT: "float32", _WEAK_COMPLEX: "complex64"}
        raise TypePromotionError(
            f"{_node_name(a)} and {_node_name(b)} have no implicit promotion under "
            "numpy_dtype_promotion('strict'), where arrays of different dtypes do not meet and "
            "Python scalars meet only arrays of their kind or above (an int a float, a float a "
            "complex; a bool only bools). Convert explicitly, e.g. "
            f"x.astype({weak_defaults.get(standard) or standard.name!r}), or use "
            "numpy_dtype_promotion('standard')"
        )
    # Only the narrow formats lack common bounds: they sit below nothing.
    narrow = next(node for node in (a, b) if node in NARROW)
    other = b if narrow is a else a
    partners = (
        "Python ints and floats, booleans and integers"
        if is_float(narrow)
        else "Python ints and booleans"
    )
    raise TypePromotionError(
        f"{_node_name(a)} and {_node_name(b)} have no implicit promotion: {bit_width(narrow)}-bit "
        f"{'floats' if is_float(narrow) else 'integers'} meet only {partners} implicitly, so "
        "that no computation widens or narrows them unnoticed. Convert explicitly, e.g. "
        f"x.astype({_suggestion(other, narrow)!r})"
    )


def bit_width(dtype: np.dtype) -> int:
    """The bits of its byte a narrow format uses (the low ones)."""
    widths = {float6_e2m3fn: 6, float6_e3m2fn: 6, float4_e2m1fn: 4, int1: 1, uint1: 1}
    widths.update({int2: 2, uint2: 2, int4: 4, uint4: 4})
    return widths.get(np.dtype(dtype), 8)


def _node_name(node) -> str:
    weak = {_WEAK_INT: "Python int", _WEAK_FLOAT: "Python float", _WEAK_COMPLEX: "Python complex"}
    return weak.get(node) or node.name


def _suggestion(other, narrow: np.dtype) -> str:
    """The dtype to suggest converting to: the other operand's, or the default of the narrow
    operand's kind where the other is a weak scalar or itself narrow."""
    if other in NARROW or other in (_WEAK_INT, _WEAK_FLOAT, _WEAK_COMPLEX):
        return "float32" if is_float(narrow) else "int32"
    return other.name


def _node(dtype: np.dtype, weak_type: bool):
    if weak_type and is_int(dtype):
        return _WEAK_INT
    if weak_type and is_float(dtype):
        return _WEAK_FLOAT
    if weak_type and dtype.kind == "c":
        return _WEAK_COMPLEX
    return dtype


def is_float(dtype) -> bool:
    """True for the real floating-point dtypes (complex ones are not)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in _EXTENSION_FLOATS


def is_complex(dtype) -> bool:
    return np.dtype(dtype).kind == "c"


def is_inexact(dtype) -> bool:
    """True for the dtypes that carry derivatives: real and complex floating point."""
    return is_float(dtype) or is_complex(dtype)


def real_dtype(dtype) -> np.dtype:
    """The dtype of the real and imaginary parts of `dtype` (itself when it is real)."""
    dtype = np.dtype(dtype)
    return {complex64: float32, complex128: float64}.get(dtype, dtype)


def to_inexact(dtype) -> np.dtype:
    """The dtype a function that needs floating point (sqrt, mean, divide, fft) computes
    booleans and integers in: float32 for bool and integers of up to 32 bits, the default
    float for 64-bit integers (float64 under `enable_x64`), as in JAX, so an int32 array
    does not silently widen to float64 under the flag. Inexact dtypes stay as they are."""
    dtype = np.dtype(dtype)
    if is_inexact(dtype):
        return dtype
    return default_float if dtype.itemsize == 8 else float32


def complex_dtype(dtype) -> np.dtype:
    """The complex dtype whose parts are `dtype` (half floats widen to complex64)."""
    dtype = np.dtype(dtype)
    if is_complex(dtype):
        return dtype
    return complex128 if dtype == float64 else complex64


def is_int(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind in "iu" or dtype in NARROW_INTS


def is_unsigned(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind == "u" or dtype in _NARROW_UNSIGNED


def is_narrow(dtype) -> bool:
    """True for the formats stored as a few bits of a byte (ml_dtypes' float8, float4, int2,
    int4 and their unsigned kin)."""
    return (dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)) in NARROW


def compute_dtype(dtype) -> np.dtype:
    """The dtype arithmetic on `dtype` runs in: float32 for the half and narrow floats, int32
    for the narrow integers (each operation's result rounds or wraps back), else `dtype`."""
    dtype = np.dtype(dtype)
    return _COMPUTED_IN.get(dtype, dtype)


def is_bool(dtype) -> bool:
    return np.dtype(dtype) == bool_


def lowest(dtype) -> np.generic:
    """The identity of max: nothing of `dtype` is smaller (-inf, the least integer, False)."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return dtype.type(-np.inf if _has_infinity(dtype) else finfo(dtype).min)
    if is_bool(dtype):
        return dtype.type(False)
    return dtype.type(iinfo(dtype).min)


def highest(dtype) -> np.generic:
    """The identity of min: nothing of `dtype` is larger (inf, the greatest integer, True)."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return dtype.type(np.inf if _has_infinity(dtype) else finfo(dtype).max)
    if is_bool(dtype):
        return dtype.type(True)
    return dtype.type(iinfo(dtype).max)


def _has_infinity(dtype: np.dtype) -> bool:
    return NARROW_FLOATS.get(dtype, "ieee") == "ieee"


def check_supported(dtype) -> np.dtype:
    """Return `dtype` as a NumPy dtype in this CPU's byte order (arrays in the other are
    converted), or raise naming it when funcgrad does not support it."""
    try:
        dtype = np.dtype(dtype)
    except TypeError as err:
        raise TypeError(f"{dtype!r} is not a dtype") from err
    if not dtype.isnative:
        dtype = dtype.newbyteorder("=")
    if dtype not in supported_dtypes:
        raise TypeError(
            f"funcgrad does not support dtype {dtype}; supported: "
            + ", ".join(sorted(d.name for d in supported_dtypes))
        )
    return dtype


def use_x64(enabled: bool) -> None:
    """Make the defaults 64-bit (float64, int64, complex128) or 32-bit again; only
    `config.update("enable_x64", ...)` calls this, which also keeps jit's traces apart."""
    global float_, int_, default_float, default_int
    default_float = float_ = float64 if enabled else float32
    default_int = int_ = int64 if enabled else int32


def default_complex() -> np.dtype:
    return complex128 if default_float == float64 else complex64


def canonicalize(dtype) -> np.dtype:
    """Map NumPy's platform defaults for *requested* dtypes to funcgrad's supported set.

    Python's `float`/`int`/`complex` used as a dtype mean the defaults (float32, int32 and
    complex64; 64-bit under `enable_x64`), as in JAX.
    """
    if dtype is builtins.float:
        return default_float
    if dtype is builtins.int:
        return default_int
    if dtype is builtins.bool:
        return bool_
    if dtype is builtins.complex:
        return default_complex()
    return check_supported(dtype)


def is_python_scalar(x) -> bool:
    """True for Python's bool, int, float and complex, which are weakly typed; NumPy scalars
    are not (np.float64 subclasses float but has a definite dtype)."""
    return isinstance(
        x, (builtins.bool, builtins.int, builtins.float, builtins.complex)
    ) and not isinstance(x, np.generic)


def scalar_dtype(x) -> tuple[np.dtype, bool]:
    """The (dtype, weak_type) funcgrad gives a Python scalar."""
    if isinstance(x, builtins.bool):
        return bool_, False
    if isinstance(x, builtins.int):
        return default_int, True
    if isinstance(x, builtins.float):
        return default_float, True
    if isinstance(x, builtins.complex):
        return default_complex(), True
    raise TypeError(f"{type(x).__name__} is not a scalar")


def promote_types(a, b) -> np.dtype:
    """Promote two (strong) dtypes along funcgrad's lattice (the strict one under
    `numpy_dtype_promotion("strict")`, where only equal dtypes meet)."""
    return result_type_of([(check_supported(a), False), (check_supported(b), False)])[0]


def widened(a, b) -> np.dtype:
    """The standard promotion of two strong dtypes whatever `promotion` says: for code of
    funcgrad's own that computes in at least a dtype it chose (statistics in float32)."""
    return result_type_of([(check_supported(a), False), (check_supported(b), False)], False)[0]


def result_type_of(
    dtypes_and_weak: list[tuple[np.dtype, bool]], strict: bool | None = None
) -> tuple[np.dtype, bool]:
    """The promoted (dtype, weak_type) of operands given as (dtype, weak_type) pairs, along
    the strict lattice if `strict`, the standard one if False, and as `promotion` says if None
    (code of funcgrad's own that widens to a dtype it chose passes False).

    The result is weak only when every operand is weak: `weak_f32 * f16_array` is f16.
    """
    if strict is None:
        strict = promotion == "strict"
    node = None
    for dtype, weak in dtypes_and_weak:
        here = _node(dtype, weak)
        node = here if node is None else _join(node, here, strict)
    if node == _WEAK_INT:
        weak_dtype = _widest_weak(dtypes_and_weak, "iu", default_int)
        return weak_dtype, True
    if node == _WEAK_FLOAT:
        weak_dtype = _widest_weak(dtypes_and_weak, "f", default_float)
        return weak_dtype, True
    if node == _WEAK_COMPLEX:
        parts = [(real_dtype(dtype), weak) for dtype, weak in dtypes_and_weak]
        return complex_dtype(_widest_weak(parts, "f", default_float)), True
    if node.itemsize == 8 and default_int == int32:
        # Without enable_x64, 64 bits are kept only where an operand brought them: uint32
        # meeting a signed integer gives int32 there, not int64.
        if all(dtype.itemsize < 8 for dtype, _ in dtypes_and_weak):
            return _THIRTY_TWO_BIT[node], False
    return node, False


_THIRTY_TWO_BIT = {int64: int32, uint64: uint32, float64: float32, complex128: complex64}


def _widest_weak(dtypes_and_weak, kinds: str, default: np.dtype) -> np.dtype:
    # A weak value keeps its own width (a weak float64 from a traced computation stays float64
    # until it meets a strong float); among several weak values the widest wins.
    best = None
    for dtype, weak in dtypes_and_weak:
        if weak and dtype.kind in kinds and (best is None or dtype.itemsize > best.itemsize):
            best = dtype
    return default if best is None else best


def first_invalid(value: np.ndarray, nans: bool, infs: bool) -> str | None:
    """ "nan" or "inf" when a float or complex array holds one (in any part) and it is asked
    about, else None; half floats are widened, which NumPy's isnan does not take."""
    if not is_inexact(value.dtype):
        return None
    wide = value.astype(np.complex128 if is_complex(value.dtype) else np.float64)
    if nans and np.isnan(wide).any():
        return "nan"
    if infs and np.isinf(wide).any():
        return "inf"
    return None


def finfo(dtype) -> ml_dtypes.finfo:
    """Machine limits of a float dtype; a complex dtype has those of its parts."""
    return ml_dtypes.finfo(real_dtype(check_supported(dtype)))


def iinfo(dtype) -> ml_dtypes.iinfo:
    return ml_dtypes.iinfo(check_supported(dtype))


def issubdtype(a, b) -> bool:
    """NumPy's issubdtype, which places ml_dtypes' types under no abstract type: here they sit
    where their kind does (bfloat16 and float8_e5m2 under np.floating, int4 under
    np.signedinteger)."""
    if isinstance(a, type) and issubclass(a, extended):
        return isinstance(b, type) and issubclass(a, b)
    try:
        a = np.dtype(a)
    except TypeError:
        return np.issubdtype(a, b)
    if a in _EXTENSION_FLOATS:
        return b in (a.type, a, np.floating, np.inexact, np.number, np.generic)
    if a in NARROW_INTS:
        family = np.unsignedinteger if a in _NARROW_UNSIGNED else np.signedinteger
        return b in (a.type, a, family, np.integer, np.number, np.generic)
    return np.issubdtype(a, b)


# ---------------------------------------------------------------------------------------------
# JAX's `jax.dtypes` names over the above


class extended(np.generic):
    """The dtypes beyond NumPy's. funcgrad has none: its keys are uint32 arrays, so
    `issubdtype(key.dtype, prng_key)` is False, as for JAX's raw `PRNGKey` keys."""


class prng_key(extended):
    """The dtype of typed PRNG keys, which funcgrad does not have (see `extended`)."""


def canonicalize_dtype(dtype, allow_extended_dtype: bool = False) -> np.dtype:
    """The dtype an array requested as `dtype` gets: Python's types become the defaults;
    float64 and int64 stay themselves, as funcgrad keeps 64-bit data."""
    del allow_extended_dtype  # (there are no extended dtypes)
    return canonicalize(dtype)


def result_type(*args, return_weak_type_flag: bool = False):
    """The dtype arrays, scalars and dtypes promote to, with its weak type if asked."""
    from funcgrad.numpy._promotion import result_type_and_weak  # (it reads arrays and tracers)

    dtype, weak_type = result_type_and_weak(*args)
    return (dtype, weak_type) if return_weak_type_flag else dtype


def scalar_type_of(x) -> type:
    """The Python scalar type (bool, int, float or complex) of x's dtype."""
    dtype = result_type(x)
    if is_bool(dtype):
        return builtins.bool
    if is_int(dtype):
        return builtins.int
    return builtins.complex if is_complex(dtype) else builtins.float


def itemsize_bits(dtype) -> int:
    """Bits per element: a dtype narrower than a byte still takes a whole byte in NumPy."""
    dtype = np.dtype(dtype)
    if is_int(dtype):
        return ml_dtypes.iinfo(dtype).bits
    if is_float(dtype):
        return ml_dtypes.finfo(dtype).bits
    return 8 * dtype.itemsize
