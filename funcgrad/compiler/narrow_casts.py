"""Conversions to and from the narrow formats, spelled in the kernel IR's integer operations.

The narrow formats (ml_dtypes' 8- and 4-bit floats, 2- and 4-bit integers) are storage types,
one value a byte: kernels compute in their compute dtype (float32, int32) and round each
result back, as the reference backend does. `kernel_ir.cast` hands every conversion with a
narrow side here, so the renderers only load, store, select and bitcast these formats (as
bytes) and never need to know one.

Reading a narrow float builds float32's bits from its fields; writing one from float32 is
rounding on the float's bits: to nearest, ties to even (the exponent-only float8_e8m0fnu
rounds ties up), with overflow, infinity and NaN going where each format's encoding of them
sends them (`dtypes.NARROW_FLOATS`); ml_dtypes converts wider floats through float32, and so
does this. Writing a narrow integer keeps the low bits (wrapping), after float sources have
been saturated to the format's range, as every float-to-integer conversion is.
"""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes
from funcgrad.compiler import kernel_ir as K

U8 = np.dtype(np.uint8)
U32 = np.dtype(np.uint32)
I32 = np.dtype(np.int32)
F32 = np.dtype(np.float32)


def cast(x: K.Expr, dtype: np.dtype) -> K.Expr:
    """`x` converted to `dtype`, one of them narrow."""
    if dtypes.is_narrow(x.dtype):
        return K.cast(_read(x), dtype)
    wide = dtypes.compute_dtype(dtype)
    if dtypes.is_float(x.dtype) and dtypes.is_int(dtype):
        info = dtypes.iinfo(dtype)
        value = K.cast(x, wide)
        value = K.binary("max", value, K.const(int(info.min), wide))
        value = K.binary("min", value, K.const(int(info.max), wide))
    else:
        value = K.cast(x, wide)
    if isinstance(value, K.Const):
        return K.Const(np.array(value.value, wide).astype(dtype)[()], dtype)
    if dtypes.is_int(dtype):
        return K.Bitcast(_low_bits(value, dtype), dtype)
    return K.Bitcast(K.cast(_float_code(value, dtype), U8), dtype)


def _read(x: K.Expr) -> K.Expr:
    """A narrow value in its compute dtype."""
    wide = dtypes.compute_dtype(x.dtype)
    if isinstance(x, K.Const):
        return K.const(np.array(x.value, x.dtype).astype(wide), wide)
    byte = K.cast(K.Bitcast(x, U8), U32)
    if dtypes.is_int(x.dtype):  # its low bits (as ml_dtypes reads a byte), sign-extended
        bits = dtypes.bit_width(x.dtype)
        if dtypes.is_unsigned(x.dtype):
            return K.Bitcast(K.binary("and", byte, _u((1 << bits) - 1)), wide)
        spare = _i(32 - bits)
        return K.binary("shr_arith", K.binary("shl", K.Bitcast(byte, wide), spare), spare)
    return K.Bitcast(_float32_bits(byte, x.dtype), wide)


def _float32_bits(byte: K.Expr, dtype: np.dtype) -> K.Expr:
    """The float32 bits of the narrow float whose byte (uint32) is `byte`. A finite value is
    its significand (the hidden bit set where the exponent is not 0) times a power of two,
    both exact in float32; NaN is float32's quiet NaN with the format's sign, as ml_dtypes
    reads it (the one NaN of the "fnuz" formats is negative)."""
    flavour = dtypes.NARROW_FLOATS[dtype]
    info = dtypes.finfo(dtype)
    if flavour == "e8m0":  # 2**(byte - 127); byte 0 is float32's subnormal 2**-127
        power = K.select(K.binary("eq", byte, _u(0)), _u(0x400000), K.binary("shl", byte, _u(23)))
        return K.select(K.binary("eq", byte, _u(255)), _u(0x7FC00000), power)
    mantissa_bits, bias = info.nmant, 1 - info.minexp
    sign_bit = 1 << (info.bits - 1)
    sign = K.binary("shl", K.binary("shr_logical", byte, _u(info.bits - 1)), _u(31))
    magnitude = K.binary("and", byte, _u(sign_bit - 1))
    exponent = K.binary("shr_logical", magnitude, _u(mantissa_bits))
    hidden = K.select(K.binary("gt", exponent, _u(0)), _u(1 << mantissa_bits), _u(0))
    significand = K.binary("or", K.binary("and", magnitude, _u((1 << mantissa_bits) - 1)), hidden)
    scale = K.binary("max", exponent, _u(1)) + _u(127 - bias - mantissa_bits)
    value = K.binary(
        "mul", K.cast(significand, F32), K.Bitcast(K.binary("shl", scale, _u(23)), F32)
    )
    bits = K.binary("or", sign, K.Bitcast(value, U32))
    nan = _u(0x7FC00000)
    if flavour == "ieee":
        all_ones = (1 << info.nexp) - 1
        special = K.binary("eq", exponent, _u(all_ones))
        infinite = K.binary("eq", magnitude, _u(all_ones << mantissa_bits))
        infinity = K.binary("or", sign, _u(0x7F800000))
        return K.select(special, K.select(infinite, infinity, K.binary("or", sign, nan)), bits)
    if flavour == "fn":
        is_nan = K.binary("eq", magnitude, _u(sign_bit - 1))
        return K.select(is_nan, K.binary("or", sign, nan), bits)
    if flavour == "fnuz":
        return K.select(K.binary("eq", byte, _u(sign_bit)), _u(0xFFC00000), bits)
    return bits  # "finite"


def _low_bits(value: K.Expr, dtype: np.dtype) -> K.Expr:
    mask = (1 << dtypes.bit_width(dtype)) - 1
    return K.binary("and", K.cast(value, U8), K.const(mask, U8))


def _u(value: int) -> K.Const:
    return K.const(value, U32)


def _i(value: int) -> K.Const:
    return K.const(value, I32)


def _shift_rounding(v: K.Expr, shift: K.Expr) -> K.Expr:
    """v / 2**shift rounded to nearest, ties to even (shift >= 1; past 31 it gives 0)."""
    half = K.binary("shl", _u(1), K.binary("sub", shift, _u(1)))
    odd = K.binary("and", K.binary("shr_logical", v, shift), _u(1))
    return K.binary("shr_logical", v + half - _u(1) + odd, shift)


def _float_code(x: K.Expr, dtype: np.dtype) -> K.Expr:
    """The byte pattern (uint32) of the narrow float nearest float32 `x`."""
    flavour = dtypes.NARROW_FLOATS[dtype]
    info = dtypes.finfo(dtype)
    bits = K.Bitcast(x, U32)
    sign = K.binary("shr_logical", bits, _u(31))
    magnitude = K.binary("and", bits, _u(0x7FFFFFFF))
    exponent = K.binary("shr_logical", magnitude, _u(23))
    fraction = K.binary("and", magnitude, _u(0x7FFFFF))
    is_nan = K.binary("gt", magnitude, _u(0x7F800000))
    if flavour == "e8m0":
        return _e8m0_code(sign, magnitude, exponent, fraction, is_nan)
    mantissa_bits, bias = info.nmant, 1 - info.minexp
    # Magnitudes from the format's least normal up round on float32's bits: dropping the low
    # fraction bits rounds them, a carry reaching the exponent as it should, and the exponent
    # is rebiased. Below, the significand (with float32's hidden bit) shifts right by as much
    # more as the exponent falls short: the format's subnormals, or zero.
    least_normal = 128 - bias  # in float32's biased exponent
    drop = 23 - mantissa_bits
    normal = _shift_rounding(magnitude, _u(drop)) - _u((127 - bias) << mantissa_bits)
    hidden = K.select(K.binary("gt", exponent, _u(0)), _u(0x800000), _u(0))
    significand = K.binary("or", fraction, hidden)
    shortfall = _u(least_normal + drop) - K.binary("max", exponent, _u(1))
    subnormal = _shift_rounding(significand, shortfall)
    code = K.select(K.binary("ge", exponent, _u(least_normal)), normal, subnormal)
    sign_bit = 1 << (info.bits - 1)
    largest = sign_bit - 1  # all ones after the sign: NaN ("fn"), or the largest ("finite")

    def signed(code: K.Expr, sign: K.Expr = sign) -> K.Expr:
        return K.binary("or", K.binary("shl", sign, _u(info.bits - 1)), code)

    if flavour == "ieee":
        infinity = ((1 << info.nexp) - 1) << mantissa_bits
        code = K.binary("min", code, _u(infinity))  # overflow (infinity too) is infinity
        return signed(K.select(is_nan, _u(infinity | 1 << (mantissa_bits - 1)), code))
    if flavour == "fn":  # overflow, infinity and NaN are NaN, which keeps its sign
        return signed(K.binary("min", code, _u(largest)))
    if flavour == "fnuz":  # no -0; the one NaN takes overflow, infinity and NaN
        unsigned_zero = K.select(K.binary("eq", code, _u(0)), code, signed(code))
        return K.select(K.binary("gt", code, _u(largest)), _u(sign_bit), unsigned_zero)
    # "finite": overflow and infinity saturate; NaN becomes a zero of the opposite sign, as
    # ml_dtypes converts it.
    code = K.select(is_nan, _u(0), K.binary("min", code, _u(largest)))
    return signed(code, K.select(is_nan, K.binary("xor", sign, _u(1)), sign))


def _e8m0_code(sign, magnitude, exponent, fraction, is_nan) -> K.Expr:
    """float8_e8m0fnu: a power of two, its float32 exponent rounded on the fraction's top bit
    (ties up, as ml_dtypes rounds); a subnormal float32 above 2**-127 rounds up to 2**-126 and
    one at or below it to 2**-127. Zero, negatives, infinity, NaN and overflow are NaN."""
    half = K.cast(K.binary("ge", fraction, _u(0x400000)), U32)
    above_least = K.cast(K.binary("gt", fraction, _u(0x400000)), U32)
    code = K.select(K.binary("eq", exponent, _u(0)), above_least, exponent + half)
    nan = K.binary("or", is_nan, K.binary("ne", sign, _u(0)))
    nan = K.binary("or", nan, K.binary("eq", magnitude, _u(0)))
    nan = K.binary("or", nan, K.binary("gt", code, _u(254)))
    return K.select(nan, _u(255), code)
