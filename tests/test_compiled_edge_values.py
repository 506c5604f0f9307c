"""Compiled programs at the edge values of every dtype: ±0, subnormals, the smallest and largest
finite values, ±inf, NaNs of either sign and with payloads (a signaling one among them), the
integers' minimum and maximum. Each compiled backend (LLVM, and the CUDA renderer's code run
by the host emulator) must agree with the NumPy reference backend: NaN where it has NaN, zeros
of its sign, integers and exactly rounded operations bit for bit, transcendental functions to
a few ulp. Many operations share one program (the compiler fuses them), so each backend
compiles few. Where the reference itself had a rule of NumPy's rather than funcgrad's (the
order of signed zeros in maxima, powers of signaling NaNs, quotients by subnormal complex
numbers), its values are checked against an independent definition too.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from checks import jit_backend

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.backends.cuda import emulator

BACKENDS = [
    "llvm",
    pytest.param(
        "cuda_emulator",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(
                emulator.compiler() is None, reason="the emulator needs a C++ compiler"
            ),
        ],
    ),
]
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
INTS = [np.dtype(f"{kind}int{bits}") for kind in ("", "u") for bits in (8, 16, 32, 64)]
COMPLEXES = [np.dtype(np.complex64), np.dtype(np.complex128)]


def bits_of(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def nans(dtype: np.dtype) -> np.ndarray:
    """A negative quiet NaN and a signaling NaN whose payload is its lowest bit."""
    info = ml_dtypes.finfo(dtype)
    width = 8 * dtype.itemsize
    exponent = ((1 << (width - 1 - info.nmant)) - 1) << info.nmant
    quiet_bit = 1 << (info.nmant - 1)
    patterns = [(1 << (width - 1)) | exponent | quiet_bit, exponent | 1]
    return np.array(patterns, np.dtype(f"u{dtype.itemsize}")).view(dtype)


def float_edges(dtype: np.dtype) -> np.ndarray:
    info = ml_dtypes.finfo(dtype)
    smallest, tiny, largest = (float(v) for v in (info.smallest_subnormal, info.tiny, info.max))
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 0.99, -7.25, 100.0]
    values += [smallest, -smallest, tiny, -tiny, 0.75 * tiny, largest, -largest, float(info.eps)]
    values += [math.inf, -math.inf, math.nan, 2.0**-30]
    return np.concatenate([np.array(values).astype(dtype), nans(dtype)])


def int_edges(dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    values = [0, 1, 2, 3, 7, 100, info.max, info.max - 1, info.max // 2 + 1, info.min, info.min + 1]
    values += [8 * dtype.itemsize, 8 * dtype.itemsize - 1]
    if info.min < 0:
        values += [-1, -2, -7, info.min // 2]
    return np.array(values, dtype=object).astype(dtype)


def complex_edges(dtype: np.dtype) -> np.ndarray:
    """Every pair of a few real edge values as the parts."""
    real = np.dtype(np.float32) if dtype == np.complex64 else np.dtype(np.float64)
    parts = float_edges(real)[[0, 1, 2, 3, 6, 10, 12, 15, 16, 18, 19, 20]]
    out = np.empty(len(parts) ** 2, dtype)
    out.real, out.imag = np.repeat(parts, len(parts)), np.tile(parts, len(parts))
    return out


def pairs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.repeat(values, len(values)), np.tile(values, len(values))


def run(backend: str, fun, *args) -> list[np.ndarray]:
    with jit_backend(backend):
        return [np.asarray(x) for x in fg.tree_util.tree_leaves(fg.jit(fun)(*args))]


def agree(got: np.ndarray, expected: np.ndarray, ulps: float = 0) -> np.ndarray:
    """Where `got` matches `expected`: NaN for NaN, equal values, zeros of one sign; with
    `ulps`, nonzero finite values within that many of the format's epsilon of |expected|
    (but of its smallest normal number)."""
    if expected.dtype.kind == "c":
        return agree(got.real, expected.real, ulps) & agree(got.imag, expected.imag, ulps)
    if expected.dtype.kind in "biu":
        return got == expected
    with np.errstate(invalid="ignore"):
        g, e = got.astype(np.float64), expected.astype(np.float64)
    same = (g == e) & (np.signbit(g) == np.signbit(e)) | (np.isnan(g) & np.isnan(e))
    if ulps:
        info = ml_dtypes.finfo(expected.dtype)
        scale = np.maximum(np.abs(e), float(info.tiny))
        finite = np.isfinite(g) & np.isfinite(e) & ((g != 0) | (e != 0))
        with np.errstate(invalid="ignore"):
            same |= finite & (np.abs(g - e) <= ulps * float(info.eps) * scale)
    return same


def assert_agree(backend: str, fun, args, names: list[str], ulps=None) -> None:
    """fun's outputs (one per name) compiled for `backend` agree with the reference's, exactly
    or, for the names `ulps` lists, within that many ulp."""
    ulps = ulps or {}
    expected = run("numpy", fun, *args)
    got = run(backend, fun, *args)
    assert len(got) == len(expected) == len(names)
    failures = []
    for name, g, e in zip(names, got, expected):
        assert (g.dtype, g.shape) == (e.dtype, e.shape), name
        wrong = np.flatnonzero(~agree(g, e, ulps.get(name, 0)))
        if len(wrong):
            failures.append(
                f"{name}: {g.ravel()[wrong[:3]]} where the reference has "
                f"{e.ravel()[wrong[:3]]} (at {wrong[:3]})"
            )
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------------
# Elementwise operations: every float dtype in one program


FLOAT_UNARY = {
    "neg": lax.neg,
    "abs": lax.abs,
    "sign": lax.sign,
    "floor": lax.floor,
    "ceil": lax.ceil,
    "round": lax.round,
    "round_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    "is_finite": lax.is_finite,
    "sqrt": lax.sqrt,
    "square": lambda x: lax.integer_pow(x, 2),
    "reciprocal": lambda x: lax.integer_pow(x, -1),
    "power_0": lambda x: lax.integer_pow(x, 0),
    "precision_5_10": lambda x: lax.reduce_precision(x, 5, 10),
    "precision_8_7": lambda x: lax.reduce_precision(x, 8, 7),
    "precision_2_1": lambda x: lax.reduce_precision(x, 2, 1),
    "to_int8": lambda x: lax.convert_element_type(x, np.int8),
    "to_uint32": lambda x: lax.convert_element_type(x, np.uint32),
    "to_int64": lambda x: lax.convert_element_type(x, np.int64),
    "to_uint64": lambda x: lax.convert_element_type(x, np.uint64),
    "to_bool": lambda x: lax.convert_element_type(x, np.bool_),
    "is_nan": lambda x: x != x,
}
FLOAT_TRANSCENDENTAL = {
    name: getattr(lax, name)
    for name in (
        "exp exp2 expm1 log log1p tanh logistic sin cos tan asin acos atan sinh cosh asinh "
        "acosh atanh rsqrt cbrt erf erfc erf_inv lgamma digamma"
    ).split()
}
# The binary operations of every dtype.
ARITHMETIC = {
    "add": lax.add,
    "sub": lax.sub,
    "mul": lax.mul,
    "div": lax.div,
    "rem": lax.rem,
    "max": lax.max,
    "min": lax.min,
}
FLOAT_BINARY = {
    **ARITHMETIC,
    "nextafter": lax.nextafter,
    "pow": lax.pow,
    "atan2": lax.atan2,
    "lt": lax.lt,
    "eq": lax.eq,
    "clamp": lambda x, y: lax.clamp(y, x, y),
    "select": lambda x, y: lax.select(x < y, x, y),
}


def float_program(*operands):
    """Each dtype's (edges, pair lhs, pair rhs) through every operation above."""
    outs = []
    for x, lhs, rhs in zip(operands[::3], operands[1::3], operands[2::3]):
        outs += [f(x) for f in FLOAT_UNARY.values()]
        outs += [f(x) for f in FLOAT_TRANSCENDENTAL.values()]
        outs += [f(lhs, rhs) for f in FLOAT_BINARY.values()]
    return outs


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_operations_at_edge_values(backend):
    """lgamma(-5e-324) was 744.486, not 744.440, and lgamma of the largest negative floats
    (poles) NaN, not inf, on LLVM; clamp's float16 zeros took NumPy's tie rule in the
    reference; pow(1, sNaN) was NaN on the emulator and in the reference's float16."""
    operands, names, ulps = [], [], {}
    for dtype in FLOATS:
        edges = float_edges(dtype)
        operands += [edges, *pairs(edges)]
        ops = [*FLOAT_UNARY, *FLOAT_TRANSCENDENTAL, *FLOAT_BINARY]
        names += [f"{dtype.name} {op}" for op in ops]
        # Halves compute in float32 and round: an ulp of theirs. The others: digamma (a
        # composition) and lgamma's reflection are the furthest, 7 ulp in float64.
        tolerance = 2 if dtype.itemsize == 2 else 16
        for op in [*FLOAT_TRANSCENDENTAL, "pow", "atan2"]:
            ulps[f"{dtype.name} {op}"] = tolerance
    assert_agree(backend, float_program, operands, names, ulps)


INT_BINARY = {
    **ARITHMETIC,
    "and": lax.bitwise_and,
    "xor": lax.bitwise_xor,
    "shift_left": lax.shift_left,
    "shift_right_logical": lax.shift_right_logical,
    "shift_right_arithmetic": lax.shift_right_arithmetic,
    "lt": lax.lt,
    "clamp": lambda x, y: lax.clamp(y, x, y),
    "floor_divide": fnp.floor_divide,
    "mod": fnp.mod,
}
INT_UNARY = {
    "neg": lax.neg,
    "abs": lax.abs,
    "sign": lax.sign,
    "not": lax.bitwise_not,
    "population_count": lax.population_count,
    "clz": lax.clz,
    "cube": lambda x: lax.integer_pow(x, 3),
    "power_64": lambda x: lax.integer_pow(x, 64),
    "to_float16": lambda x: lax.convert_element_type(x, np.float16),
    "to_bfloat16": lambda x: lax.convert_element_type(x, BF16),
    "to_float32": lambda x: lax.convert_element_type(x, np.float32),
    "to_float64": lambda x: lax.convert_element_type(x, np.float64),
    "to_int8": lambda x: lax.convert_element_type(x, np.int8),
    "to_uint64": lambda x: lax.convert_element_type(x, np.uint64),
}


def int_program(*operands):
    outs = []
    for x, lhs, rhs in zip(operands[::3], operands[1::3], operands[2::3]):
        outs += [f(x) for f in INT_UNARY.values()]
        outs += [f(lhs, rhs) for f in INT_BINARY.values()]
    return outs


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_operations_at_edge_values(backend):
    operands, names = [], []
    for dtype in INTS:
        edges = int_edges(dtype)
        operands += [edges, *pairs(edges)]
        names += [f"{dtype.name} {op}" for op in [*INT_UNARY, *INT_BINARY]]
    assert_agree(backend, int_program, operands, names)


def half_moves(x):
    """A half array copied, reversed, rotated, transposed, reinterpreted and widened."""
    rotated = fnp.concatenate([x[3:], x[:3]])
    as_bits = lax.bitcast_convert_type(x, np.uint16)
    return [x, lax.rev(x, (0,)), rotated, x.reshape(2, -1).T, as_bits]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bits_survive_copies_and_bitcasts(backend):
    """The emulator's float16 and bfloat16 stores quieted a signaling NaN: a copy, a reversal
    or a bitcast of one changed its bits."""
    halves = [float_edges(d) for d in FLOATS if d.itemsize == 2]
    others = [float_edges(d) for d in FLOATS if d.itemsize > 2] + [int_edges(d) for d in INTS]

    def program(*operands):
        outs = [out for x in operands[:2] for out in half_moves(x)]
        for x in operands[2:]:
            same_width = [d for d in FLOATS + INTS if d.itemsize == x.dtype.itemsize]
            outs += [lax.bitcast_convert_type(x, d) for d in same_width if d != x.dtype]
        return outs

    expected = run("numpy", program, *halves, *others)
    got = run(backend, program, *halves, *others)
    assert len(got) == len(expected)
    for index, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, index
        np.testing.assert_array_equal(bits_of(g), bits_of(e), err_msg=str(index))


COMPLEX_EXACT = {
    "neg": lax.neg,
    "conj": lax.conj,
    "real": lax.real,
    "imag": lax.imag,
    "eq": lambda z: z == z,
    "is_finite": fnp.isfinite,
    "power_0": lambda z: lax.integer_pow(z, 0),
}
COMPLEX_ROUNDED = {
    "abs": lax.abs,
    "sign": lax.sign,
    "reciprocal": lambda z: lax.integer_pow(z, -1),
    "power_-2": lambda z: lax.integer_pow(z, -2),
    "exp": lax.exp,
    "log": lax.log,
    "sqrt": lax.sqrt,
    "expm1": lax.expm1,
    "log1p": lax.log1p,
    "tanh": lax.tanh,
    "sin": lax.sin,
    "asinh": lax.asinh,
    "atan": lax.atan,
    "atanh": lax.atanh,
    "div": lambda z: z / z[::-1],
    "div_by_subnormal": lambda z: z / z[5],
}


def complex_program(*operands):
    outs = []
    for z in operands:
        outs += [f(z) for f in COMPLEX_EXACT.values()]
        outs += [f(z) for f in COMPLEX_ROUNDED.values()]
    return outs


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_operations_at_edge_values(backend):
    """The reference's quotients by subnormal divisors were NaN or infinite (NumPy multiplies
    by the denominator's reciprocal), and the compiled atan and atanh of the largest numbers
    lost a subnormal part (its inverse overflowed)."""
    operands, names, ulps = [], [], {}
    for dtype in COMPLEXES:
        edges = complex_edges(dtype)
        assert 0 < abs(edges[5]) < ml_dtypes.finfo(np.float32).tiny  # the subnormal divisor
        operands.append(edges)
        names += [f"{dtype.name} {op}" for op in [*COMPLEX_EXACT, *COMPLEX_ROUNDED]]
        ulps |= {f"{dtype.name} {op}": 16 for op in COMPLEX_ROUNDED}
    assert_agree(backend, complex_program, operands, names, ulps)


def test_quotients_by_subnormal_complex_numbers_are_the_exact_ones_rounded():
    """The reference's quotients against exact rational arithmetic."""
    tiny = 5e-324
    numerators = np.array([1 + 1j, 0j, tiny + tiny * 1j, 2.2250738585072014e-308 + 0j, 3 - 2j])
    divisors = np.array(
        [tiny + tiny * 1j, tiny + tiny * 1j, tiny + tiny * 1j, 3 * tiny, -tiny * 1j]
    )

    def rounded(value: Fraction) -> float:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf

    def exact(x: complex, y: complex) -> complex:
        a, b, c, d = (Fraction(v) for v in (x.real, x.imag, y.real, y.imag))
        norm = c * c + d * d
        return complex(rounded((a * c + b * d) / norm), rounded((b * c - a * d) / norm))

    got = np.asarray(fnp.asarray(numerators) / fnp.asarray(divisors))
    want = np.array([exact(x, y) for x, y in zip(numerators, divisors)])
    np.testing.assert_allclose(got, want, rtol=4e-16)
    reciprocal = np.asarray(lax.integer_pow(fnp.asarray(divisors), -1))
    np.testing.assert_allclose(reciprocal, [exact(1, y) for y in divisors], rtol=4e-16)


# ---------------------------------------------------------------------------------------------
# Reductions, cumulative operations, windows, scatters and sorts


def reductions_program(*operands):
    outs = []
    for rows in operands:
        dtype = rows.dtype
        outs += [
            lax.reduce_max(rows, (1,)),
            lax.reduce_min(rows, (0,)),
            lax.argmax(rows, 1, np.int32),
            lax.argmin(rows, 0, np.int32),
            lax.cummax(rows, 1),
            lax.cummin(rows, 1, reverse=True),
            lax.sort(rows, 1),
            lax.sort((rows, lax.broadcasted_iota(np.int32, rows.shape, 1)), 1, num_keys=1)[1],
            *lax.top_k(rows, 4),
            lax.reduce_window(rows, -np.inf, lax.max, (1, 3), (1, 1), "SAME"),
            lax.reduce_window(rows, np.inf, lax.min, (2, 2), (1, 2), "VALID"),
            fnp.zeros(4, dtype).at[np.arange(rows.size) % 4].max(rows.ravel()),
            fnp.zeros(4, dtype).at[np.arange(rows.size) % 4].min(rows.ravel()),
        ]
    return outs


REDUCTIONS = (
    "max min argmax argmin cummax cummin sort argsort top_k top_k_indices window_max "
    "window_min scatter_max scatter_min"
).split()


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_and_sorts_at_edge_values(backend):
    """The reference's cummax, cummin, max and min windows and scatters kept NumPy's zero of a
    tie (cummax(1, -0.0, 0.0) ended in -0.0); LLVM ranked a float16 signaling NaN in top_k by
    its quieted bits."""
    rng = np.random.default_rng(0)
    operands, names = [], []
    for dtype in FLOATS:
        edges = float_edges(dtype)
        operands.append(rng.choice(edges, (48, 7)))
        names += [f"{dtype.name} {op}" for op in REDUCTIONS]
    assert_agree(backend, reductions_program, operands, names)


def test_every_maximum_and_minimum_orders_minus_zero_below_plus_zero():
    """The reference's values against the rule itself: a maximum of zeros is +0 where any is,
    a minimum -0 where any is, whatever their order."""
    for dtype in FLOATS:
        zeros = np.array([[0.0, -0.0, 0.0], [-0.0, 0.0, -0.0]], dtype)
        plus, minus = np.zeros((), dtype), -np.zeros((), dtype)
        signs = {
            "cummax": (lax.cummax(zeros, 1), [[plus] * 3, [minus, plus, plus]]),
            "cummin": (lax.cummin(zeros, 1), [[plus, minus, minus], [minus] * 3]),
            "clamp": (lax.clamp(zeros[1], zeros[0], zeros[1]), [minus, plus, minus]),
            "window": (
                lax.reduce_window(zeros, -np.inf, lax.max, (1, 2), (1, 1), "VALID"),
                [[plus, plus], [plus, plus]],
            ),
            "scatter": (
                fnp.full(2, -0.0, dtype)
                .at[np.array([0, 0, 1])]
                .max(np.array([0.0, -0.0, -0.0], dtype)),
                [plus, minus],
            ),
        }
        for name, (got, want) in signs.items():
            got, want = np.asarray(got), np.asarray(want, dtype)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_split_in_parts_pick_the_first_nan_and_the_first_extreme(backend):
    """Large reductions and scans run in parts on threads (LLVM); argmax and argmin must still
    pick the first NaN, else the first extreme, across the parts; max and min the NaN, and
    -0 below +0; integer sums wrap alike; float sums agree to their rounding."""
    n = 1 << 18 if backend == "llvm" else 1 << 12
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n).astype(np.float32)
    x[[n // 3, 5, n - 7]] = np.inf
    x[[n // 2 + 1, n - 2]] = np.nan
    ints = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    ints[[n // 4, 3, n - 1]] = np.iinfo(np.int32).min

    def program(x, ints):
        rows = x.reshape(16, -1)
        finite = fnp.where(fnp.isnan(x), 0.0, x)
        return (
            fnp.argmax(x),
            fnp.argmax(finite),
            fnp.argmin(-finite),
            fnp.max(x),
            fnp.min(finite),
            fnp.argmax(rows, axis=1),
            fnp.argmin(rows, axis=0),
            fnp.max(rows, axis=1),
            fnp.argmin(ints),
            fnp.min(ints),
            fnp.max(ints.reshape(-1, 16), axis=0),
            lax.cummax(x, 0),
            lax.cummin(finite * 0, 0),
            lax.cumsum(ints, 0),
            fnp.sum(ints),
            fnp.sum(fnp.where(fnp.isfinite(x), x, 0.0)),
        )

    expected = run("numpy", program, x, ints)
    got = run(backend, program, x, ints)
    for g, e in zip(got[:-1], expected[:-1]):
        assert agree(g, e).all(), (g, e)
    np.testing.assert_allclose(got[-1], expected[-1], rtol=1e-5, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# Single cases: each a bug that the edge values above found


@pytest.mark.parametrize("backend", BACKENDS)
def test_lgamma_next_to_zero_and_at_the_poles_of_huge_negative_floats(backend):
    """log |Gamma(x)| of negative subnormals: pi x is subnormal there and kept 1 to 3 bits in
    the reflection's sine; at -1e306 and below log Gamma(1 - x) overflows and inf - inf
    was NaN."""
    x = np.array([-5e-324, -1e-320, -1e-310, -2.2250738585072014e-308, -1e-300, -1e-9])
    poles = np.array([-1.7976931348623157e308, -3e305, -1e306, -(2.0**60), -1.0, -0.0])
    (got,) = run(backend, lambda a: lax.lgamma(a), np.concatenate([x, poles]))
    np.testing.assert_allclose(got[: len(x)], [math.lgamma(v) for v in x], rtol=1e-15)
    assert (got[len(x) :] == np.inf).all()


@pytest.mark.parametrize("place", ["eager", "numpy", "llvm", *BACKENDS[1:]])
def test_pow_of_one_and_to_the_power_zero_is_one_for_every_nan(place):
    """x^0 = 1^y = 1 even for NaN operands, signaling ones too (C's pow gave NaN for one on the
    emulator, NumPy's float16 and bfloat16 powers in the reference)."""
    for dtype in FLOATS:
        quiet, signaling = np.full(1, np.nan, dtype), nans(dtype)[1:]
        x = np.concatenate([np.ones(3, dtype), quiet, signaling, signaling])
        y = np.concatenate([quiet, signaling, nans(dtype)[:1], np.array([0, 0, -0.0], dtype)])
        assert bits_of(x[4]) == bits_of(signaling[0]) == bits_of(y[1])
        if place == "eager":
            got = np.asarray(lax.pow(x, y))
        else:
            (got,) = run(place, lax.pow, x, y)
        np.testing.assert_array_equal(got.astype(np.float64), np.ones(6), err_msg=dtype.name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_and_min_keep_a_signaling_nan_beside_a_value_never_nan(backend):
    """x86's code for a scalar maximum whose other operand LLVM proves never NaN (a constant,
    an integer converted) tested the operand for quiet NaNs only: max(1.0, sNaN) was 1.0. A
    remainder (a C library call) keeps the loop scalar."""
    for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        signaling = nans(dtype)[1]
        y = np.array([signaling, -signaling, signaling, 2.0], dtype)
        counts = np.array([1, 2, 0, 3], np.int32)

        def program(counts, y, dtype=dtype):
            converted = lax.convert_element_type(counts, dtype)
            return (
                lax.max(converted, y),
                lax.min(y, converted),
                lax.max(y, dtype.type(1.5)),
                lax.clamp(dtype.type(-1), y, dtype.type(1)),
                lax.rem(converted, y),
                lax.max(converted[0], y[0]),
                lax.min(y[1], dtype.type(3)),
            )

        expected = run("numpy", program, counts, y)
        got = run(backend, program, counts, y)
        for g, e in zip(got, expected):
            assert agree(g, e).all(), (dtype, g, e)
        assert np.isnan(got[0][:3]).all() and np.isnan(got[-2]) and np.isnan(got[-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_top_k_ranks_half_nans_by_their_own_bits(backend):
    """The IEEE total order puts a NaN with a larger payload higher; LLVM widened float16 to
    float32 first, which quieted a signaling NaN and ranked it above quiet ones."""
    negative, signaling = nans(np.dtype(np.float16))
    x = np.array([[0, 1.0, np.nan, np.inf, 0, 2.0]], np.float16)
    x[0, 0], x[0, 4] = signaling, negative
    assert bits_of(x)[0, 0] == 0x7C01 and bits_of(x)[0, 2] == 0x7E00
    values, indices = run(backend, lambda a: lax.top_k(a, 6), x)
    # 0x7e00 (quiet) > 0x7c01 (signaling) > inf > 2 > 1 > -NaN
    np.testing.assert_array_equal(indices, [[2, 0, 3, 5, 1, 4]])
    np.testing.assert_array_equal(bits_of(values), bits_of(x[:, [2, 0, 3, 5, 1, 4]]))
    np.testing.assert_array_equal(np.asarray(lax.top_k(x, 6)[1]), indices)
