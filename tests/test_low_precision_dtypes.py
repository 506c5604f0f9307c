"""The narrow formats: ml_dtypes' 8- and 4-bit floats and 2- and 4-bit integers.

Their independent definition is ml_dtypes itself: its conversions say what every byte pattern
means and where each float32 rounds to (to nearest even, with each format's own overflow and
NaN), and arithmetic is the float32 (int32) result rounded (wrapped) back, as NumPy computes
it on the widened values. Compiled programs are checked against that on every backend, and
conversions bit for bit over every pattern of each format.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.errors import TypePromotionError
from funcgrad.tools import strategies as fst
from funcgrad.tools.recipes import COMPILED_BACKENDS

NARROW = dtypes.narrow_dtypes
FLOATS = dtypes.narrow_float_dtypes
INTS = dtypes.narrow_int_dtypes
NAMES = [d.name for d in NARROW]
# Where a program runs: eagerly, or jitted on each backend.
PLACES = ["eager", *COMPILED_BACKENDS]


def run(place: str, fun, *args):
    """`fun(*args)` eagerly, or jitted on backend `place`, as NumPy arrays."""
    if place == "eager":
        out = fun(*(fnp.asarray(a) for a in args))
    else:
        with jit_backend(place):
            out = fg.jit(fun)(*args)
    return [np.asarray(x) for x in fg.tree_util.tree_leaves(out)]


def patterns(dtype) -> np.ndarray:
    """Every value of a format, as its byte patterns (the low bits of the byte)."""
    return np.arange(1 << dtypes.bit_width(dtype), dtype=np.uint8).view(dtype)


def finite(dtype) -> np.ndarray:
    values = patterns(dtype)
    return values[np.isfinite(values.astype(np.float32))]


def same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    width = np.dtype(f"uint{8 * got.dtype.itemsize}") if got.dtype != np.bool_ else np.uint8
    np.testing.assert_array_equal(got.view(width), expected.view(width))


def same_values(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal values, any NaN matching any NaN (their payloads are not values)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    wide = np.float64 if got.dtype != np.bool_ else np.bool_
    np.testing.assert_array_equal(got.astype(wide), expected.astype(wide))


# ---------------------------------------------------------------------------------------------
# Names, dtypes, finfo and iinfo


@pytest.mark.parametrize("name", NAMES)
def test_every_format_is_a_scalar_type_and_a_dtype(name):
    scalar_type = getattr(fnp, name)
    assert scalar_type == getattr(ml_dtypes, name) and scalar_type.dtype == np.dtype(name)
    assert fnp.dtype(scalar_type) == fnp.dtype(name) == getattr(dtypes, name)
    x = fnp.asarray([1, 0], scalar_type)
    assert x.dtype == np.dtype(scalar_type)
    same_bits(np.asarray(x), np.array([1, 0]).astype(scalar_type))
    # Programs print them by their short names: f8_e4m3fn, f4_e2m1fn, i4, u2.
    short = {"int1": "i1", "int2": "i2", "int4": "i4", "uint1": "u1", "uint2": "u2", "uint4": "u4"}
    short = short.get(name)
    assert f"{short or name.replace('float', 'f', 1)}[2]" in str(fg.make_jaxpr(lambda a: a)(x))


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_finfo_is_ml_dtypes(dtype):
    ours, theirs = fnp.finfo(dtype), ml_dtypes.finfo(dtype)
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_subnormal", "nexp", "nmant"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert fnp.issubdtype(dtype, fnp.floating) and fnp.issubdtype(dtype, fnp.inexact)
    assert not fnp.issubdtype(dtype, fnp.integer)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_iinfo_is_the_formats_range(dtype):
    info = fnp.iinfo(dtype)
    values = patterns(dtype).astype(np.int32)
    assert (info.min, info.max, info.bits) == (values.min(), values.max(), dtypes.bit_width(dtype))
    unsigned = dtype.name.startswith("u")
    assert fnp.issubdtype(dtype, fnp.unsignedinteger if unsigned else fnp.signedinteger)
    assert fnp.issubdtype(dtype, fnp.integer) and not fnp.issubdtype(dtype, fnp.floating)


def test_extrema_identities_are_the_formats_own():
    # Formats without infinity take their largest finite value as max's and min's identity.
    assert dtypes.lowest(fnp.float8_e4m3fn) == -448 and dtypes.highest(fnp.float8_e4m3fn) == 448
    assert np.isinf(np.float32(dtypes.lowest(fnp.float8_e5m2)))
    assert dtypes.lowest(fnp.int4) == -8 and dtypes.highest(fnp.uint2) == 3


# ---------------------------------------------------------------------------------------------
# Promotion


def expected_promotion(narrow, other, weak: bool):
    """The rule: a narrow format meets itself, booleans, Python ints (and, for floats,
    Python floats and every integer dtype) and stays itself; nothing else."""
    if other == narrow and not weak:
        return narrow
    if other == dtypes.bool_ and not weak:
        return narrow
    if dtypes.is_float(narrow):
        if weak and other.kind in "if":
            return narrow
        if not weak and other.kind in "iu" and not dtypes.is_narrow(other):
            return narrow
        return None
    return narrow if weak and other.kind == "i" else None


OTHERS = [(d, False) for d in sorted(dtypes.supported_dtypes, key=lambda d: d.name)] + [
    (dtypes.int32, True),
    (dtypes.float32, True),
    (dtypes.complex64, True),
]


@pytest.mark.parametrize("narrow", NARROW, ids=lambda d: d.name)
def test_promotion_of_each_pair(narrow):
    for other, weak in OTHERS:
        expected = expected_promotion(narrow, other, weak)
        for pair in ([(narrow, False), (other, weak)], [(other, weak), (narrow, False)]):
            if expected is None:
                with pytest.raises(TypePromotionError, match="astype"):
                    dtypes.result_type_of(pair)
            else:
                assert dtypes.result_type_of(pair) == (expected, False), (pair, expected)


def test_promotion_errors_name_both_dtypes_and_the_way_out():
    with pytest.raises(TypePromotionError, match=r"float8_e4m3fn and float32 .*8-bit floats"):
        fnp.promote_types(fnp.float8_e4m3fn, fnp.float32)
    with pytest.raises(TypePromotionError, match=r"int4 and int8 .*4-bit integers.*'int8'"):
        fnp.ones(2, fnp.int4) + fnp.ones(2, fnp.int8)
    with pytest.raises(TypePromotionError, match=r"int4 and Python float"):
        fnp.ones(2, fnp.int4) * 2.5
    with pytest.raises(TypePromotionError, match="float8_e5m2 and float8_e4m3fn"):
        fnp.ones(2, fnp.float8_e5m2) - fnp.ones(2, fnp.float8_e4m3fn)
    assert issubclass(TypePromotionError, ValueError) and fg.dtypes.TypePromotionError


def test_weak_scalars_take_the_narrow_dtype_and_round_or_wrap_into_it():
    x = fnp.asarray([1.0, 3.0, 448.0], fnp.float8_e4m3fn)
    scale = np.float32(np.array(1.1).astype(x.dtype))  # the scalar in the format: 1.125
    same_bits(np.asarray(x * 1.1), rounded(np.asarray(x).astype(np.float32) * scale, x.dtype))
    assert (x + 1).dtype == x.dtype and (x > 2.0).dtype == np.bool_
    i = fnp.asarray([1, 2, 7], fnp.int4)
    same_bits(np.asarray(i * 9), np.array([9, 18, 63]).astype(ml_dtypes.int4))  # wraps
    same_bits(np.asarray(i + True), np.array([2, 3, 8]).astype(ml_dtypes.int4))


# ---------------------------------------------------------------------------------------------
# Creation


@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: d.name)
def test_creation_functions(dtype):
    top = 3 if dtype in (dtypes.int2, dtypes.uint2) else 5
    for got, expected in [
        (fnp.zeros(3, dtype), np.zeros(3).astype(dtype)),
        (fnp.ones((2, 2), dtype), np.ones((2, 2)).astype(dtype)),
        (fnp.full(3, 1, dtype), np.ones(3).astype(dtype)),
        (fnp.arange(top, dtype=dtype), np.arange(top).astype(dtype)),
        (fnp.zeros_like(fnp.ones(2, dtype)), np.zeros(2).astype(dtype)),
    ]:
        same_bits(np.asarray(got), expected)
    for place in PLACES:
        (got,) = run(place, lambda: fnp.arange(top, dtype=dtype) + fnp.ones(top, dtype))
        wide = np.arange(top).astype(dtype).astype(dtypes.compute_dtype(dtype))
        same_bits(got, (wide + 1).astype(dtype))  # each operation rounded


def test_values_beyond_a_format_go_where_its_encoding_sends_them():
    big = [1e6, -1e6, float("inf"), float("nan")]
    for dtype in FLOATS:
        same_bits(np.asarray(fnp.asarray(big, dtype)), np.array(big, np.float32).astype(dtype))
        same_bits(np.asarray(fnp.full(2, 1e6, dtype)), np.full(2, 1e6).astype(dtype))
    # e4m3fn has no infinity: overflow is NaN; float4_e2m1fn saturates; e5m2 overflows to inf.
    assert np.isnan(np.float32(np.asarray(fnp.asarray(500.0, fnp.float8_e4m3fn))))
    assert float(np.asarray(fnp.asarray(100.0, fnp.float4_e2m1fn)).astype(np.float32)) == 6
    assert np.isinf(np.float32(np.asarray(fnp.asarray(1e6, fnp.float8_e5m2))))


# ---------------------------------------------------------------------------------------------
# Conversions, bit for bit


WIDE = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.int8, np.uint8]
WIDE += [np.int64, np.bool_]


def reference_conversion(values: np.ndarray, target) -> np.ndarray:
    """ml_dtypes' conversion of a narrow format's values, through float32 (int32), which
    holds them exactly (ml_dtypes converts between some narrow formats only so); a float
    converts to an integer saturating, NaN to 0, as every conversion of funcgrad's does."""
    target = np.dtype(target)
    if target == values.dtype:
        return values  # no conversion: NaN payloads stay
    wide = values.astype(dtypes.compute_dtype(values.dtype))
    with np.errstate(all="ignore"):
        if dtypes.is_float(values.dtype) and dtypes.is_int(target):
            low, high = (int(v) for v in (dtypes.iinfo(target).min, dtypes.iinfo(target).max))
            whole = np.trunc(np.nan_to_num(wide.astype(np.float64), nan=0.0))
            inside = np.where((whole > low) & (whole < high), whole, 0).astype(np.int64)
            saturated = np.where(whole >= high, high, np.where(whole <= low, low, inside))
            return saturated.astype(target)
        return wide.astype(target)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: d.name)
def test_every_pattern_converts_to_every_dtype_as_ml_dtypes_does(place, dtype):
    values = patterns(dtype)
    targets = [np.dtype(t) for t in WIDE] + list(NARROW)
    got = run(place, lambda x: tuple(x.astype(t) for t in targets), values)
    for target, converted in zip(targets, got):
        same_bits(converted, reference_conversion(values, target))


def float32_sweep() -> np.ndarray:
    """Float32 values whose bits take every top half, each with low halves at and around
    the rounding points of every narrow format (which all lie in the top half: the formats
    keep at most 4 of float32's 23 fraction bits) and beyond, NaNs and infinities included."""
    top = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    return (top[:, None] | low[None, :]).reshape(-1).view(np.float32)


@np.errstate(all="ignore")
def sources() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    f32 = float32_sweep()
    # float64 values a hair off float32's ties (ml_dtypes rounds float64 through float32),
    # integers across and beyond every format's range, and the half floats.
    f64 = np.concatenate([f32.astype(np.float64) * (1 + 2.0**-40), rng.normal(0, 300, 5000)])
    ints = np.arange(-70000, 70000, 7, dtype=np.int32)
    return [
        f32,
        f64,
        ints,
        ints.astype(np.int64) << np.int64(20),
        ints.astype(np.int8),
        ints.astype(np.float16),
        f32.astype(ml_dtypes.bfloat16),
        np.array([True, False]),
    ]


@pytest.mark.parametrize("place", PLACES)
def test_conversions_into_every_format_round_as_ml_dtypes_does(place):
    for source in sources():
        got = run(place, lambda x: tuple(x.astype(t) for t in NARROW), source)
        for target, converted in zip(NARROW, got):
            if dtypes.is_int(target) and dtypes.is_float(source.dtype):
                expected = reference_conversion(source, target)  # saturating
            elif dtypes.is_int(target):
                expected = source.astype(np.int64).astype(target)  # the low bits
            else:
                with np.errstate(invalid="ignore"):
                    expected = source.astype(target)
            same_bits(converted, expected)


@pytest.mark.parametrize("place", PLACES)
def test_bitcasts_between_8_bit_formats_and_bytes(place):
    raw = np.arange(256, dtype=np.uint8)
    formats = [d for d in FLOATS if dtypes.bit_width(d) == 8]
    got = run(place, lambda x: tuple(lax.bitcast_convert_type(x, d) for d in formats), raw)
    for dtype, cast in zip(formats, got):
        same_bits(cast, raw.view(dtype))
    (back,) = run(place, lambda x: lax.bitcast_convert_type(x, np.int8), raw.view(formats[0]))
    same_bits(back, raw.view(np.int8))


@pytest.mark.parametrize("dtype", [dtypes.int4, dtypes.uint2, dtypes.float4_e2m1fn])
def test_sub_byte_formats_have_no_bitcast(dtype):
    with pytest.raises(TypeError, match=f"sub-byte dtype {dtype.name}.*convert_element_type"):
        lax.bitcast_convert_type(np.zeros(3, np.uint8), dtype)
    with pytest.raises(TypeError, match="sub-byte"):
        lax.bitcast_convert_type(fnp.zeros(3, dtype), np.int8)


# ---------------------------------------------------------------------------------------------
# Arithmetic and elementwise math: float32 (int32) results rounded (wrapped) back

# (funcgrad operation, NumPy's on the widened operands)
FLOAT_EXACT = [
    (lambda x, y: x + y, np.add),
    (lambda x, y: x - y, np.subtract),
    (lambda x, y: x * y, np.multiply),
    (lambda x, y: x / y, np.divide),
    (lambda x, y: fnp.sqrt(x), lambda x, y: np.sqrt(x)),
    (lambda x, y: fnp.maximum(x, y), np.maximum),
    (lambda x, y: -x, lambda x, y: -x),
    (lambda x, y: fnp.abs(x), lambda x, y: np.abs(x)),
    (lambda x, y: fnp.floor(x), lambda x, y: np.floor(x)),
    (lambda x, y: fnp.where(x < y, x, y), lambda x, y: np.where(x < y, x, y)),
    (lambda x, y: x**2, lambda x, y: x * x),
    (lambda x, y: fnp.fmod(x, y), np.fmod),
]
FLOAT_ROUNDED = [  # float32 results within a few ulps, then rounded
    (fnp.exp, np.exp),
    (fnp.tanh, np.tanh),
    (fnp.log1p, np.log1p),
    (fnp.sin, np.sin),
    (lax.logistic, lambda x: 1 / (1 + np.exp(-x))),
]


def operands(dtype):
    """Every finite value against a shuffle of them (a small format: every pair)."""
    values = finite(dtype)
    if len(values) <= 16:
        return np.repeat(values, len(values)), np.tile(values, len(values))
    return values, np.random.default_rng(1).permutation(values)


def rounded(result: np.ndarray, dtype) -> np.ndarray:
    return np.asarray(result, np.float32).astype(dtype)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_exactly_rounded_arithmetic(place, dtype):
    x, y = operands(dtype)
    wide = x.astype(np.float32), y.astype(np.float32)
    funs = [fun for fun, _ in FLOAT_EXACT]
    got = run(place, lambda a, b: tuple(f(a, b) for f in funs), x, y)
    with np.errstate(all="ignore"):
        for (_, reference), result in zip(FLOAT_EXACT, got):
            same_values(result, rounded(reference(*wide), dtype))


def within_ulps_then_rounded(got: np.ndarray, exact: np.ndarray, dtype, ulps: int = 4) -> None:
    """`got` is the rounding of some float32 within `ulps` of the exact float32 result: the
    compiled transcendental functions and NumPy's may differ by an ulp before rounding."""
    candidates = [exact.astype(np.float32)]
    for direction in (np.inf, -np.inf):
        step = candidates[0]
        for _ in range(ulps):
            step = np.nextafter(step, np.float32(direction))
            candidates.append(step)
    fits = np.zeros(got.shape, bool)
    for candidate in candidates:
        fits |= rounded(candidate, dtype).astype(np.float64) == got.astype(np.float64)
        fits |= np.isnan(got.astype(np.float32)) & np.isnan(
            rounded(candidate, dtype).astype(np.float32)
        )
    assert fits.all(), (got[~fits][:5], exact[~fits][:5])


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_elementwise_math(place, dtype):
    x, _ = operands(dtype)
    got = run(place, lambda a: tuple(f(a) for f, _ in FLOAT_ROUNDED), x)
    with np.errstate(all="ignore"):
        for (_, reference), result in zip(FLOAT_ROUNDED, got):
            assert result.dtype == dtype
            within_ulps_then_rounded(result, reference(x.astype(np.float64)), dtype)


INT_OPS = [
    (lambda x, y: x + y, np.add),
    (lambda x, y: x - y, np.subtract),
    (lambda x, y: x * y, np.multiply),
    (lambda x, y: -x, lambda x, y: -x),
    (lambda x, y: ~x, lambda x, y: ~x),
    (lambda x, y: x & y, np.bitwise_and),
    (lambda x, y: x ^ y, np.bitwise_xor),
    (lambda x, y: fnp.maximum(x, y), np.maximum),
    (lambda x, y: x < y, np.less),
    (lambda x, y: lax.div(x, fnp.where(y == 0, 1, y).astype(y.dtype)), None),
]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_integer_arithmetic_wraps(place, dtype):
    x, y = operands(dtype)
    wide = x.astype(np.int32), y.astype(np.int32)
    got = run(place, lambda a, b: tuple(f(a, b) for f, _ in INT_OPS), x, y)
    safe = np.where(wide[1] == 0, 1, wide[1])
    truncated = np.trunc(wide[0] / safe).astype(np.int32)  # C's division, toward zero
    for (_, reference), result in zip(INT_OPS, got):
        expected = truncated if reference is None else reference(*wide)
        expected = expected if expected.dtype == np.bool_ else expected.astype(dtype)
        same_bits(result, expected)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_shifts_and_bit_counts_see_the_formats_own_bits(place, dtype):
    bits = dtypes.bit_width(dtype)
    x, y = operands(dtype)
    pattern_x, pattern_y = (v.view(np.uint8).astype(np.int64) for v in (x, y))
    value_x = x.astype(np.int64)
    got = run(
        place,
        lambda a, b: (
            lax.shift_right_logical(a, b),
            lax.shift_right_arithmetic(a, b),
            lax.shift_left(a, b),
            lax.population_count(a),
        ),
        x,
        y,
    )
    # Amounts are read as the format's unsigned patterns for the logical shift;
    # beyond the width, a logical shift gives 0 and an arithmetic one the sign.
    logical = np.where(pattern_y < bits, pattern_x >> np.minimum(pattern_y, 63), 0)
    amount = y.astype(np.int64)
    arithmetic = value_x >> np.clip(amount, 0, 63)
    arithmetic = np.where((amount < 0) | (amount >= bits), value_x >> 63, arithmetic)
    left = np.where((amount >= 0) & (amount < bits), value_x << np.clip(amount, 0, 63), 0)
    count = np.array([bin(int(p)).count("1") for p in pattern_x])
    for result, expected in zip(got, (logical, arithmetic, left, count)):
        same_bits(result, expected.astype(dtype))


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_nextafter_steps_to_the_formats_own_neighbour(place, dtype):
    values = patterns(dtype)
    x, y = np.repeat(values, len(values)), np.tile(values, len(values))
    (got,) = run(place, lax.nextafter, x, y)
    same_values(got, np.nextafter(x, y))  # ml_dtypes' nextafter, in the format itself


@pytest.mark.parametrize("place", PLACES)
def test_reduce_precision_rounds_in_float32(place):
    x = finite(fnp.float8_e5m2)
    (coarse, same) = run(
        place, lambda a: (lax.reduce_precision(a, 3, 1), lax.reduce_precision(a, 5, 2)), x
    )
    wide = x.astype(np.float32)
    (expected,) = run("eager", lambda a: lax.reduce_precision(a, 3, 1), wide)
    same_values(coarse, expected.astype(x.dtype))
    same_bits(same, x)


# ---------------------------------------------------------------------------------------------
# Reductions, sorting, products


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", [fnp.float8_e4m3fn, fnp.float8_e5m2, fnp.float4_e2m1fn])
def test_reductions_accumulate_in_float32_and_round_once(place, dtype):
    # Small integers: every partial sum is exact in float32, whatever the order.
    values = np.array([[1, 2, 3, 0.5], [4, -1, 0.5, 1.5], [2, 2, -3, 1]], np.float32)
    x = values.astype(dtype)
    wide = x.astype(np.float32)
    got = run(
        place,
        lambda a: (a.sum(), a.sum(0), a.mean(1), a.max(1), a.argmin(1), fnp.cumsum(a, 1)),
        x,
    )
    expected = (
        wide.sum(),
        wide.sum(0),
        wide.mean(1, dtype=np.float32),
        wide.max(1),
        wide.argmin(1).astype(np.int32),
        np.cumsum(wide, 1),
    )
    for result, reference in zip(got, expected):
        if result.dtype == np.int32:
            np.testing.assert_array_equal(result, reference)
        else:
            same_values(result, rounded(reference, dtype))


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", [fnp.float8_e4m3fnuz, fnp.float8_e3m4, fnp.int4, fnp.uint2])
def test_sorting_orders_by_value(place, dtype):
    values = np.random.default_rng(2).permutation(np.tile(patterns(dtype), 2))
    got = run(place, lambda a: (fnp.sort(a), fnp.argsort(a), lax.top_k(a, 3)[0]), values)
    wide = values.astype(dtypes.compute_dtype(dtype))
    order = np.argsort(wide, kind="stable")
    same_values(got[0], values[order])
    np.testing.assert_array_equal(got[1], order)

    # top_k ranks by the IEEE total order of the values: a NaN by its sign (the fnuz formats'
    # one NaN has its sign bit set, so it ranks last), 0.0 above -0.0.
    def descending(i):
        value = float(wide[i])
        negative = math.copysign(1.0, value) < 0
        if value != value:
            return (2, 0.0, False) if negative else (0, 0.0, False)
        return (1, -value, negative)

    top = sorted(range(len(wide)), key=descending)[:3]
    same_values(got[2], values[top])


@pytest.mark.parametrize("place", PLACES)
def test_float8_products_with_a_float32_result(place):
    rng = np.random.default_rng(3)
    # Powers of two and small integers: the float32 sums are exact in any order.
    a = rng.choice([-2.0, -1, -0.5, 0, 0.25, 1, 2, 3], (5, 7)).astype(fnp.float8_e4m3fn)
    b = rng.choice([-4.0, -1, 0, 0.5, 1, 1.5, 2], (7, 3)).astype(fnp.float8_e5m2)
    product = a.astype(np.float32) @ b.astype(np.float32)
    got = run(
        place,
        lambda a, b: (
            lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=fnp.float32),
            fnp.matmul(a, b, preferred_element_type=fnp.float32),
            fnp.einsum("ij,jk->ik", a, b, preferred_element_type=fnp.float32),
            a @ a.T,  # one dtype and no preferred type: the operands' dtype
        ),
        a,
        b,
    )
    for result in got[:3]:
        assert result.dtype == np.float32
        np.testing.assert_array_equal(result, product)
    square = a.astype(np.float32) @ a.astype(np.float32).T
    same_values(got[3], rounded(square, fnp.float8_e4m3fn))


def test_operations_on_formats_without_zero_or_beyond_jax():
    # float8_e8m0fnu has no zero: sums start from float32's, and arange steps in float32.
    e8m0 = fnp.asarray([1.0, 2.0, 4.0], fnp.float8_e8m0fnu)
    assert float(np.float32(np.asarray(e8m0.sum()))) == 8
    same_bits(
        np.asarray(fnp.arange(1.0, 4.0, dtype=e8m0.dtype)), np.array([1.0, 2, 3]).astype(e8m0.dtype)
    )
    # The narrow integers take every integer operation, computed in int32 and wrapped.
    i4 = fnp.asarray([-8, -3, 7], fnp.int4)
    same_bits(np.asarray(fnp.abs(i4)), np.array([8, 3, 7]).astype(i4.dtype))  # |-8| wraps
    assert int(fnp.sum(i4)) == -4 and fnp.sum(i4).dtype == np.int32


def test_products_of_two_float8_formats_promote_only_in_lax():
    a, b = fnp.ones((2, 3), fnp.float8_e4m3fn), fnp.ones((3, 2), fnp.float8_e5m2)
    with pytest.raises(TypePromotionError):
        a @ b
    # lax.dot_general contracts mixed operands into the wider exponent's format
    out = lax.dot_general(a, b, (((1,), (0,)), ((), ())))
    assert out.dtype == fnp.float8_e5m2
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.full((2, 2), 3.0))


@pytest.mark.parametrize("place", PLACES)
def test_narrow_integer_products(place):
    a = np.arange(-8, 7).reshape(3, 5).astype(ml_dtypes.int4)
    b = np.arange(10).reshape(5, 2).astype(ml_dtypes.int4)
    got = run(
        place,
        lambda a, b: (
            lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=fnp.int32),
            a @ b,
        ),
        a,
        b,
    )
    exact = a.astype(np.int32) @ b.astype(np.int32)
    same_bits(got[0], exact)
    same_bits(got[1], exact.astype(ml_dtypes.int4))  # wraps


@settings(deadline=None)
@given(
    x=fst.arrays(st.sampled_from(NARROW), fst.shapes(max_dims=3)), place=st.sampled_from(PLACES[1:])
)
def test_compiled_programs_compute_as_eager_ones(x, place):
    def program(a):
        squares = a * a + a
        return squares, squares.sum(axis=-1), fnp.max(a, axis=0), fnp.sort(a, axis=-1)

    for got, expected in zip(run(place, program, x), run("eager", program, x)):
        same_values(got, expected)


# ---------------------------------------------------------------------------------------------
# Transformations


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", [d for d in FLOATS if d != dtypes.float8_e8m0fnu])
def test_grad_has_tangents_of_the_same_format(place, dtype):
    x = np.array([0.5, 1.0, -1.5, 2.0], np.float32).astype(dtype)
    (got,) = run(place, fg.grad(lambda a: fnp.sum(fnp.sin(a) * a)), x)
    # d/da sin(a) a = cos(a) a + sin(a), each operation rounded to the format, as computed.
    wide = x.astype(np.float32)
    sin, cos = rounded(np.sin(wide), dtype), rounded(np.cos(wide), dtype)
    expected = rounded(
        rounded(cos.astype(np.float32) * wide, dtype).astype(np.float32) + sin.astype(np.float32),
        dtype,
    )
    same_values(got, expected)
    primal, tangent = fg.jvp(lambda a: a * a, (x,), (np.ones(4, np.float32).astype(dtype),))
    assert primal.dtype == tangent.dtype == dtype


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("dtype", [fnp.float8_e4m3fn, fnp.int4])
def test_vmap_is_a_loop(place, dtype):
    x = np.arange(-4, 8).reshape(3, 4).astype(dtype)

    def f(row):
        return fnp.cumsum(row * row) - row[0]

    (got,) = run(place, fg.vmap(f), x)
    looped = np.stack([np.asarray(f(fnp.asarray(row))) for row in x])
    same_bits(got, looped)


# ---------------------------------------------------------------------------------------------
# Random numbers


@pytest.mark.parametrize(
    "dtype", [d for d in FLOATS if d != dtypes.float8_e8m0fnu and dtypes.finfo(d).bits >= 8]
)
def test_uniform_and_normal_draw_the_format(dtype):
    key = fg.random.key(0)
    u = np.asarray(fg.random.uniform(key, (4000,), dtype)).astype(np.float64)
    assert fg.random.uniform(key, (2,), dtype).dtype == dtype
    # The format's mantissa bits under 1.0's exponent: 2**nmant values, 0 to 1 - 2**-nmant.
    steps = 2 ** dtypes.finfo(dtype).nmant
    assert set(np.unique(u * steps)) == set(range(steps))
    assert abs(u.mean() - (1 - 1 / steps) / 2) < 0.05
    # Normal numbers from those few uniform ones (erf_inv of 2**nmant levels): coarse, but
    # finite and spread about 0 by about 1.
    z = np.asarray(fg.random.normal(key, (4000,), dtype)).astype(np.float64)
    assert np.isfinite(z).all() and abs(z).max() < 4
    assert abs(z.mean()) < 0.25 and abs(z.std() - 1) < 0.25
    # Each draw is a value of the format, computed as jit computes it.
    same_bits(
        np.asarray(fg.jit(lambda k: fg.random.normal(k, (50,), dtype))(key)),
        np.asarray(fg.random.normal(key, (50,), dtype)),
    )


@pytest.mark.parametrize("dtype", [fnp.float8_e4m3fn, fnp.float8_e4m3fnuz, fnp.float8_e5m2])
def test_truncated_normal_stays_inside_formats_without_infinity(dtype):
    # Its clamp steps from the bounds toward the format's extremes; infinity, which e4m3fn
    # spells NaN, made every draw NaN.
    draws = np.asarray(fg.random.truncated_normal(fg.random.key(0), -1, 1, (2000,), dtype))
    wide = draws.astype(np.float32)
    assert draws.dtype == dtype and (wide > -1).all() and (wide < 1).all()
    assert np.isfinite(
        np.asarray(fg.nn.initializers.glorot_normal()(fg.random.key(1), (4, 4), dtype)).astype(
            np.float32
        )
    ).all()


def test_4_bit_floats_are_not_drawn():
    with pytest.raises(TypeError, match="8 bits or more.*float4_e2m1fn"):
        fg.random.uniform(fg.random.key(0), (2,), fnp.float4_e2m1fn)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_randint_covers_the_format_evenly(dtype):
    info = fnp.iinfo(dtype)
    # Bounds past the format's range are clipped to it (the top included).
    draws = np.asarray(fg.random.randint(fg.random.key(1), (4000,), -100, 100, dtype))
    assert draws.dtype == dtype
    counts = np.bincount(draws.astype(np.int64) - int(info.min))
    span = int(info.max) - int(info.min) + 1
    assert len(counts) == span and counts.min() > 4000 / span * 0.7


# ---------------------------------------------------------------------------------------------
# Checkpoints


def test_checkpoints_hold_the_safetensors_float8_formats(tmp_path):
    tree = {
        "a": fnp.asarray(patterns(fnp.float8_e4m3fn)),
        "b": fnp.asarray(patterns(fnp.float8_e5m2)),
    }
    path = tmp_path / "weights.safetensors"
    fg.checkpoints.save(path, tree)
    loaded = fg.checkpoints.load(path, tree)
    for name in tree:
        same_bits(np.asarray(loaded[name]), np.asarray(tree[name]))
    assert math.prod(loaded["a"].shape) == 256
