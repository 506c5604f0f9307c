"""The compiler's vectorizable transcendentals against NumPy: error in ulp over dense sweeps,
random arguments over many magnitudes, hypothesis-drawn floats and special values (inf, NaN,
signed zeros, subnormals, domain edges, the overflow and underflow thresholds), jitted on the
LLVM backend. float32 results are compared with NumPy's float64 values, float64 results with
NumPy's long double values (64-bit mantissa on x86), so each figure includes at most a
fraction of an ulp from the reference itself. A last test checks that each function leaves
its loop vectorized: vector types in the optimized IR and no call to the C library."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
import funcgrad.scipy.special as fsp
from funcgrad import lax
from funcgrad.backends.llvm import render
from funcgrad.compiler import mathlib
from funcgrad.lax import _special


def _from_math(f):
    """A float64 NumPy function from the standard library's (math.erf and math.erfc)."""
    elementwise = np.frompyfunc(f, 1, 1)
    return lambda x: elementwise(x).astype(np.float64)


# The measured maxima of funcgrad/compiler/mathlib.py's docstring, rounded up.
UNARY = {
    "exp": (fnp.exp, np.exp, {np.float32: 1.7, np.float64: 1.5}),
    "exp2": (fnp.exp2, np.exp2, {np.float32: 1.0, np.float64: 1.0}),
    "log": (fnp.log, np.log, {np.float32: 2.7, np.float64: 2.5}),
    "log1p": (fnp.log1p, np.log1p, {np.float32: 2.7, np.float64: 2.5}),
    "log10": (fnp.log10, np.log10, {np.float32: 0.51, np.float64: 0.51}),
    "log2": (fnp.log2, np.log2, {np.float32: 0.51, np.float64: 0.51}),
    "expm1": (fnp.expm1, np.expm1, {np.float32: 2.5, np.float64: 2.5}),
    "tanh": (fnp.tanh, np.tanh, {np.float32: 1.8, np.float64: 1.5}),
    "sin": (fnp.sin, np.sin, {np.float32: 0.51, np.float64: 2.5}),
    "cos": (fnp.cos, np.cos, {np.float32: 0.51, np.float64: 2.5}),
    "tan": (fnp.tan, np.tan, {np.float32: 0.51, np.float64: 4.0}),
    "atan": (fnp.arctan, np.arctan, {np.float32: 0.51, np.float64: 2.5}),
    "asin": (fnp.arcsin, np.arcsin, {np.float32: 0.51, np.float64: 3.0}),
    "acos": (fnp.arccos, np.arccos, {np.float32: 0.51, np.float64: 3.0}),
    "sinh": (fnp.sinh, np.sinh, {np.float32: 0.51, np.float64: 2.0}),
    "cosh": (fnp.cosh, np.cosh, {np.float32: 0.51, np.float64: 1.5}),
    "asinh": (fnp.arcsinh, np.arcsinh, {np.float32: 0.51, np.float64: 4.0}),
    "acosh": (fnp.arccosh, np.arccosh, {np.float32: 0.51, np.float64: 4.0}),
    "atanh": (fnp.arctanh, np.arctanh, {np.float32: 0.51, np.float64: 4.0}),
    "cbrt": (fnp.cbrt, np.cbrt, {np.float32: 0.51, np.float64: 1.0}),
    "logistic": (
        fg.nn.sigmoid,
        lambda x: 1 / (1 + np.exp(-x)),
        {np.float32: 2.5, np.float64: 2.5},
    ),
    "erf": (fsp.erf, _from_math(math.erf), {np.float32: 0.8, np.float64: 2.5}),
    "erfc": (fsp.erfc, _from_math(math.erfc), {np.float32: 0.7, np.float64: 5.5}),
}
UNARY_CASES = [(n, d) for n in sorted(UNARY) for d in sorted(UNARY[n][2], key=str)]
TRIG = ("sin", "cos", "tan")
# Up to here, arguments of every size in the moderate range (past it, `large_arguments`).
MODERATE = 1.6e9


@contextlib.contextmanager
def on_llvm():
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", "llvm")
    try:
        yield
    finally:
        fg.config.update("jit_backend", previous)


def run(f, *args):
    with on_llvm():
        return np.asarray(fg.jit(f)(*args))


def exact(reference, dtype, *args):
    wide = np.float64 if dtype == np.float32 else np.longdouble
    with np.errstate(all="ignore"):
        return reference(*(a.astype(wide) for a in args))


def ulp_error(got, wanted, dtype):
    """|got - wanted| in ulp of the wanted value rounded to dtype (subnormal spacing below)."""
    with np.errstate(over="ignore"):
        spacing = np.maximum(
            np.spacing(np.abs(wanted.astype(dtype))), np.finfo(dtype).smallest_subnormal
        )
    return np.abs(got.astype(wanted.dtype) - wanted) / spacing.astype(wanted.dtype)


def check(name, got, wanted, dtype, x):
    """Same NaNs, same infinities, signed zeros kept, and finite values within the bound."""
    with np.errstate(over="ignore"):
        rounded = wanted.astype(dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(rounded), err_msg=name)
    infinite = np.isinf(rounded)
    np.testing.assert_array_equal(got[infinite], rounded[infinite], err_msg=name)
    zero = rounded == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(rounded[zero]), err_msg=name)
    finite = np.isfinite(rounded)
    if not finite.any():
        return
    error = ulp_error(got[finite], wanted[finite], dtype)
    bound = UNARY[name][2][dtype] if name in UNARY else BINARY[name][2][dtype]
    assert error.max() <= bound, (name, x[finite][error.argmax()], float(error.max()))


def arguments(dtype) -> np.ndarray:
    rng = np.random.default_rng(0)  # (its own: the same arguments whatever the tests' order)
    info = np.finfo(dtype)
    tiny = [info.smallest_subnormal, info.tiny, 1e-30, 1e-8, 2.0**-28]
    edges = [0.0, 0.5, 0.625, 1.0, 2.0, 2.0**28, 88.72, 88.73, 89.4, 89.5, 104.0, 709.78]
    edges += [710.47, 710.48, 745.1, 1e8, 1e9, float(info.max), np.inf]
    magnitudes = np.array(tiny + edges, dtype)
    return np.concatenate(
        [
            magnitudes,
            -magnitudes,
            [np.nan],
            np.linspace(-120, 100, 20001),
            np.linspace(-1.25, 1.25, 10001),
            rng.standard_normal(10000) * 10,
            np.exp(rng.uniform(-80, 80, 10000)) * rng.choice([-1, 1], 10000),
            np.exp(rng.uniform(0, np.log(MODERATE), 10000)) * rng.choice([-1, 1], 10000),
        ]
    ).astype(dtype)


@pytest.mark.parametrize(("name", "dtype"), UNARY_CASES)
def test_unary_error_in_ulp_and_special_values(name, dtype):
    assert mathlib.handles(name, np.dtype(dtype))
    ours, reference, _ = UNARY[name]
    x = arguments(dtype)
    check(name, run(ours, x), exact(reference, dtype, x), dtype, x)


@pytest.mark.parametrize(("name", "dtype"), UNARY_CASES)
@given(data=st.data())
def test_unary_on_drawn_floats(name, dtype, data):
    ours, reference, _ = UNARY[name]
    width = 32 if dtype == np.float32 else 64
    drawn = data.draw(st.lists(st.floats(width=width), min_size=1, max_size=16))
    x = np.array(drawn, dtype)
    check(name, run(ours, x), exact(reference, dtype, x), dtype, x)


# The arguments that come nearest to multiples of pi/2, as m 2^e, from the continued fractions
# of 2^e 2/pi: 6381956970095103 2^797 within 2^-60.9 (the nearest of all float64s, where
# NumPy's own float64 cosine is 1e5 ulp off) and 16367173 2^72 within 2^-29.2 (of all
# float32s); below 2^30, 45.553093477052 within 2^-60.5 and 252.89820861816406 within 2^-27.8.
NEAR_MULTIPLES = {
    np.float64: [
        (6381956970095103, 797),
        (5916243447979695, 79),
        (8444920710073313, 939),
        (5850965514341686, 525),
        (8160885118204141, 808),
        (8360820580228475, 628),
        (8583082635084172, 145),
        (7958046405119485, 243),
        (6411027962775774, -47),
        (7763785107565477, -29),
        (5520028710995367, -34),
        (7295746205504726, -32),
        (7074237752028440, -52),
    ],
    np.float32: [
        (16367173, 72),
        (10741887, 11),
        (10057457, 62),
        (11617958, 17),
        (9012376, 53),
        (14173733, 88),
        (16573937, -16),
        (10695401, 2),
        (9882596, -21),
        (13444207, -8),
    ],
}


def large_arguments(dtype) -> np.ndarray:
    """Arguments of every size up to the largest finite: random ones in each binade from 1 on,
    powers of ten with random digits, the powers of two, the largest finite values, and those
    nearest to multiples of pi/2; with both signs."""
    rng = np.random.default_rng(1)  # (its own: the same arguments whatever the tests' order)
    info = np.finfo(dtype)
    binades = np.arange(info.maxexp)
    tens = np.arange(int(np.log10(info.max)) + 1)
    near = [m * 2.0**e for m, e in NEAR_MULTIPLES[dtype]]
    with np.errstate(over="ignore"):
        x = np.concatenate(
            [
                np.ldexp(rng.uniform(1, 2, (binades.size, 20)), binades[:, None]).ravel(),
                (rng.uniform(1, 10, (tens.size, 20)) * 10.0 ** tens[:, None]).ravel(),
                10.0**tens,
                2.0**binades,
                [info.max, np.nextafter(info.max, 0, dtype=dtype)],
                near,
            ]
        ).astype(dtype)
    x = x[np.isfinite(x)]
    return np.concatenate([x, -x])


@pytest.mark.parametrize(
    ("name", "dtype"), [(n, d) for n in TRIG for d in (np.float32, np.float64)]
)
def test_trig_of_large_arguments(name, dtype):
    ours, reference, _ = UNARY[name]
    x = large_arguments(dtype)
    check(name, run(ours, x), exact(reference, dtype, x), dtype, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trig_nearest_multiples_of_half_pi(dtype):
    x = np.array([m * 2.0**e for m, e in NEAR_MULTIPLES[dtype]], dtype)
    x = np.concatenate([x, -x])
    for name in TRIG:
        ours, reference, _ = UNARY[name]
        check(name, run(ours, x), exact(reference, dtype, x), dtype, x)
    # The nearest of all float64s, x = j pi/2 + 4.687e-19 with j = 1 modulo 4: its cosine is
    # -sin(4.687e-19), -4.687165924254628e-19 rounded.
    if dtype == np.float64:
        cosine = -4.687165924254628e-19
        assert abs(run(fnp.cos, x[:1])[0] - cosine) <= np.spacing(-cosine)


def test_domain_edges():
    for dtype in (np.float32, np.float64):
        one = np.array([1.0, -1.0], dtype)
        np.testing.assert_array_equal(
            run(fnp.arcsin, one), np.array([np.pi / 2, -np.pi / 2], dtype)
        )
        np.testing.assert_array_equal(run(fnp.arccos, one), np.array([0, np.pi], dtype))
        np.testing.assert_array_equal(run(fnp.arctanh, one), np.array([np.inf, -np.inf], dtype))
        assert run(fnp.arccosh, np.array([1.0], dtype))[0] == 0
        outside = np.array([1.5, -1.5, np.inf, -np.inf], dtype)
        for f in (fnp.arcsin, fnp.arccos, fnp.arctanh):
            assert np.isnan(run(f, outside)).all(), f
        assert np.isnan(run(fnp.arccosh, np.array([0.5, -2.0, -np.inf], dtype))).all()


def test_exp_overflows_to_inf_inside_an_add_reading_it():
    """e^x past the largest finite result is inf even where the add reading it is fused with
    its last multiply (one rounding, no overflow): inf - e^x is NaN, as eagerly; just below
    the edge e^x is finite."""
    for dtype in (np.float32, np.float64):
        edge = float(np.log(np.finfo(dtype).max))
        x = np.array([np.inf, 2 * edge, np.nextafter(dtype(edge), dtype(np.inf)), 1.0], dtype)
        expected = np.float64(np.inf) - np.exp(x.astype(np.float64)).astype(dtype)
        got = run(lambda x, y: y - fnp.exp(x), x, dtype(np.inf))
        np.testing.assert_array_equal(got, expected.astype(dtype))
        assert np.isfinite(run(fnp.exp, np.array([np.nextafter(dtype(edge), dtype(0))], dtype)))


# -- binary functions -----------------------------------------------------------------------

BINARY = {
    "atan2": (fnp.arctan2, np.arctan2, {np.float32: 0.51, np.float64: 2.5}),
    "pow": (fnp.power, np.power, {np.float32: 0.51, np.float64: 0.65}),
    "nextafter": (fnp.nextafter, np.nextafter, {np.float32: 0.0, np.float64: 0.0}),
}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5]


def pairs(name, dtype):
    rng = np.random.default_rng(0)  # (its own: the same arguments whatever the tests' order)
    info = np.finfo(dtype)
    special = SPECIAL + [float(info.smallest_subnormal), float(info.max), -float(info.max)]
    x, y = (v.ravel() for v in np.meshgrid(special, special))
    n = 20000
    if name == "pow":  # bases of all magnitudes; fractional and whole exponents, and exponents
        # that take the result across the whole range
        span = np.log(info.max) - 1
        base = np.exp(rng.uniform(-span, span, n))
        near_one = np.exp(rng.uniform(-1, 1, n))
        base = np.concatenate([base, -rng.integers(1, 20, n), near_one])
        power = np.concatenate(
            [
                rng.uniform(-1.2, 1.2, n),
                rng.integers(-30, 30, n),
                rng.uniform(-span, span, n) / np.abs(np.log(near_one)),
            ]
        )
    else:
        base = rng.standard_normal(2 * n) * np.exp(rng.uniform(-30, 30, 2 * n))
        power = rng.standard_normal(2 * n) * np.exp(rng.uniform(-30, 30, 2 * n))
    return np.concatenate([x, base]).astype(dtype), np.concatenate([y, power]).astype(dtype)


@pytest.mark.parametrize(
    ("name", "dtype"), [(n, d) for n in sorted(BINARY) for d in sorted(BINARY[n][2], key=str)]
)
def test_binary_error_in_ulp_and_special_values(name, dtype):
    assert mathlib.handles(name, np.dtype(dtype))
    ours, reference, _ = BINARY[name]
    x, y = pairs(name, dtype)
    got = run(ours, x, y)
    if name == "nextafter":  # exact: compare bit patterns
        with np.errstate(over="ignore"):
            wanted = reference(x, y)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(wanted))
        keep = ~np.isnan(wanted)
        np.testing.assert_array_equal(got[keep].tobytes(), wanted[keep].tobytes())
        return
    check(name, got, exact(reference, dtype, x, y), dtype, x)


@given(st.lists(st.tuples(st.floats(width=32), st.floats(width=32)), min_size=1, max_size=16))
def test_float32_pow_on_drawn_floats(drawn):
    x, y = (np.array(v, np.float32) for v in zip(*drawn))
    check("pow", run(fnp.power, x, y), exact(np.power, np.float32, x, y), np.float32, x)


# -- lgamma, against 90-digit decimal arithmetic ---------------------------------------------


def _lgamma_decimal(x: float) -> float:
    """log |Gamma(x)|: Stirling's series at x + 40 (x > 0; the shift's logs subtracted), the
    reflection formula with a decimal sine series for x < 0."""
    from decimal import Decimal, localcontext
    from fractions import Fraction

    bernoulli = [Fraction(1)]
    for m in range(1, 41):
        bernoulli.append(-sum(math.comb(m + 1, k) * bernoulli[k] for k in range(m)) / (m + 1))
    with localcontext() as context:
        context.prec = 90
        pi = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781")

        def positive(d: Decimal) -> Decimal:
            z = d + 40
            series = sum(
                Decimal(b.numerator)
                / Decimal(b.denominator)
                / (2 * k * (2 * k - 1))
                / z ** (2 * k - 1)
                for k, b in ((k, bernoulli[2 * k]) for k in range(1, 21))
            )
            stirling = (z - Decimal("0.5")) * z.ln() - z + (2 * pi).ln() / 2 + series
            return stirling - sum((d + i).ln() for i in range(40))

        d = Decimal(float(x))
        if d > 0:
            return float(positive(d))
        angle = pi * (d - d.to_integral_value())
        term, sine, n = angle, angle, 1
        while abs(term) > Decimal(10) ** -85:
            term = -term * angle * angle / ((n + 1) * (n + 2))
            sine, n = sine + term, n + 2
        return float(pi.ln() - abs(sine).ln() - positive(1 - d))


# Positive arguments: ulp of the result (zeros at 1 and 2 included). Negative ones: ulp of
# max(|result|, 1), as the reflection's terms cancel near the zeros there.
LGAMMA_BOUNDS = {np.float32: (0.51, 0.51), np.float64: (6.5, 5.5)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lgamma_error_in_ulp_and_special_values(dtype):
    local = np.random.default_rng(7)
    positive = np.concatenate(
        [
            local.uniform(0, 12, 300),
            local.uniform(0.99, 1.01, 100),
            local.uniform(1.99, 2.01, 100),
            np.exp(local.uniform(-80, 80, 100)),
        ]
    )
    negative = -np.concatenate([local.uniform(0, 12, 300), np.exp(local.uniform(2.5, 16, 50))])
    x = np.concatenate([positive, negative]).astype(dtype)
    x = x[x != np.round(x)]
    wanted = np.array([_lgamma_decimal(v) for v in x.astype(np.float64)])
    got = run(fg.lax.lgamma, x).astype(np.float64)
    rounded = wanted.astype(dtype)
    finite = np.isfinite(rounded)
    assert (got[~finite] == rounded[~finite]).all()
    spacing = np.spacing(np.abs(rounded)).astype(np.float64)
    relative = np.abs(got - wanted) / spacing
    above_one = np.abs(got - wanted) / np.spacing(np.maximum(np.abs(rounded), 1)).astype(np.float64)
    bound_positive, bound_negative = LGAMMA_BOUNDS[dtype]
    is_positive = x > 0
    assert relative[finite & is_positive].max() <= bound_positive
    assert above_one[finite & ~is_positive].max() <= bound_negative

    info = np.finfo(dtype)
    special = np.array(
        [
            0.0,
            -0.0,
            1.0,
            2.0,
            -1.0,
            -7.0,
            np.inf,
            -np.inf,
            np.nan,
            info.max,
            info.smallest_subnormal,
        ],
        dtype,
    )
    got = run(fg.lax.lgamma, special)
    tiny = float(info.smallest_subnormal)
    # (-inf gives -inf, as the reference backend, after SciPy's gammaln, does; JAX gives +inf)
    wanted = [np.inf, np.inf, 0.0, 0.0, np.inf, np.inf, np.inf, -np.inf, np.nan, np.inf]
    np.testing.assert_array_equal(got[:-1], np.array(wanted, dtype))
    np.testing.assert_allclose(got[-1], -math.log(tiny), rtol=4 * float(info.eps))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trig_loops_run_again_only_where_an_argument_needs_it(dtype):
    """A loop of trigonometric functions runs each chunk of its iterations with the
    Cody-Waite reduction alone, and again with the exact one only where an argument needs it
    (`render._Function.versioned_loop`): large arguments at a chunk's edges, in its middle
    and in the last, partial chunk, among moderate ones, all within the bound. A loop that
    accumulates, or reads what it writes (a donated argument updated in place), runs both
    reductions at once instead: a second run would add or read its results again."""
    chunk = render.VERSION_CHUNK
    rng = np.random.default_rng(2)
    x = rng.uniform(-100, 100, 10 * chunk + 37).astype(dtype)
    large = large_arguments(dtype)
    at = [0, chunk - 1, chunk, 3 * chunk + 5, 10 * chunk + 36]
    past = {np.float32: 2.0**30, np.float64: 2.0**20}[dtype]
    x[at] = rng.choice(large[np.abs(large) >= past], len(at))
    for name in TRIG:
        ours, reference, _ = UNARY[name]
        check(name, run(ours, x), exact(reference, dtype, x), dtype, x)
    np.testing.assert_allclose(
        run(lambda v: fnp.sin(v).sum(), x), exact(np.sin, dtype, x).sum(), rtol=1e-4
    )
    with on_llvm():
        in_place = np.asarray(fg.jit(fnp.sin, donate_argnums=0)(fnp.asarray(x.copy())))
    check("sin", in_place, exact(np.sin, dtype, x), dtype, x)

    def rendered(f, *donated):
        with on_llvm():
            return fg.jit(f, donate_argnums=donated).lower(x).compile().as_text()

    assert "alloca i1" in rendered(fnp.sin)
    assert "alloca i1" not in rendered(lambda v: fnp.sin(v).sum())
    assert "alloca i1" not in rendered(fnp.sin, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trig_of_scalars_in_a_loop_computes_again_only_where_an_argument_needs_it(dtype):
    """A loop body's scalar trigonometry computes with the Cody-Waite reduction alone, and
    again with the exact one only where an argument needs it, storing once
    (`render._Function.versioned_statements`): a scan's steps over moderate and large
    arguments, each within the bound, and its carry (updated in place: the body reads it
    before it writes it) their sum."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-100, 100, 40).astype(dtype)
    large = large_arguments(dtype)
    past = {np.float32: 2.0**30, np.float64: 2.0**20}[dtype]
    x[[0, 7, 8, 39]] = rng.choice(large[np.abs(large) >= past], 4)

    def scan(xs):
        return fg.lax.scan(lambda total, v: (total + fnp.cos(v), fnp.sin(v)), dtype(0), xs)

    with on_llvm():
        total, sines = fg.jit(scan)(x)
        text = fg.jit(scan).lower(x).compile().as_text()
    assert "versioned" in text
    check("sin", np.asarray(sines), exact(np.sin, dtype, x), dtype, x)
    np.testing.assert_allclose(np.asarray(total), exact(np.cos, dtype, x).sum(), rtol=1e-5)


# -- vectorization ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY) + ["lgamma"])
def test_loop_vectorizes_without_library_calls(name, dtype):
    if not mathlib.handles(name, np.dtype(dtype)):
        pytest.skip(f"{name} is not expanded for {np.dtype(dtype).name}")
    ours = {**UNARY, **BINARY}[name][0] if name != "lgamma" else fg.lax.lgamma
    x = np.linspace(0.1, 0.9, 4096).astype(dtype)
    with on_llvm():
        lowered = fg.jit(ours).lower(*([x] * (2 if name in BINARY else 1)))
        ir = lowered.compile().executable.machine_code.optimized_ir
    scalar = "float" if dtype == np.float32 else "double"
    assert f"x {scalar}>" in ir, f"{name} did not vectorize"
    library = name + ("f" if dtype == np.float32 else "")
    assert f"@{library}(" not in ir


def test_float64_powers_that_are_floats_come_out_exactly():
    """10.0 ** 15 was 999999999999999.9 and 9.0 ** 0.5 2.9999999999999996: e^r and its
    correction were rounded apart, so a power sitting exactly on a float missed it by one
    ulp (int(10.0 ** 15) = 999999999999999)."""
    k = np.arange(23.0)
    x = np.concatenate([np.full(23, 10.0), np.full(23, 3.0), [9.0, 2.0, 0.25, 49.0, 7.0]])
    y = np.concatenate([k, k, [0.5, -10.0, 0.5, 0.5, 18.0]])
    wanted = [10.0**i for i in range(23)] + [float(3**i) for i in range(23)]
    wanted += [3.0, 2.0**-10, 0.5, 7.0, float(7**18)]
    np.testing.assert_array_equal(run(fnp.power, x, y), np.array(wanted))


def test_float64_pow_rounds_as_decimal_arithmetic():
    """Powers of ten from 1e-30 to 1e40 are correctly rounded (10.0 ** -24, ** 29 and ** 39
    were an ulp off), and so is 0.712... ** -2066.8..., where y log x is near 700: its reduced
    argument's low part, multiplied by 1 + r + r^2 / 2 rather than e^r, cost 6 ulp. Of 729
    whole powers of small integers, 63 were an ulp off; now one in a few hundred is."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(3)
    ten_to = np.arange(-30.0, 41.0)
    x = np.concatenate([np.full(ten_to.size, 10.0), [0.7120797828873354], rng.integers(2, 30, 729)])
    y = np.concatenate([ten_to, [-2066.8019775537578], rng.integers(-40, 40, 729)])
    x, y = x.astype(np.float64), y.astype(np.float64)
    with mpmath.workprec(120):
        wanted = np.array([float(mpmath.power(mpmath.mpf(a), mpmath.mpf(b))) for a, b in zip(x, y)])
    got = run(fnp.power, x, y)
    exact_part = ten_to.size + 1
    np.testing.assert_array_equal(got[:exact_part], wanted[:exact_part])
    assert np.count_nonzero(got[exact_part:] != wanted[exact_part:]) <= 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log10_and_log2_round_once_against_mpmath(dtype):
    """float64: log x as a pair of float64s times 1 / ln(base) as a pair; float32: float64's
    log rounded once. Either way within a hair of half an ulp of the exact value, over random
    bit patterns of the whole positive range (subnormals included) and arguments near 1,
    where the result is small."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(4)
    bits = np.dtype(f"i{np.dtype(dtype).itemsize}")
    infinity_bits = np.array(np.inf, dtype).view(bits)
    patterns = rng.integers(1, infinity_bits, 1500).astype(bits).view(dtype)
    x = np.concatenate([patterns, 1 + rng.uniform(-0.01, 0.01, 500)]).astype(dtype)
    for fun, base in ((fnp.log10, 10), (fnp.log2, 2)):
        got = run(fun, x)
        with mpmath.workprec(120):
            wanted = [mpmath.log(mpmath.mpf(float(v)), base) for v in x]
            error = [
                float(abs(mpmath.mpf(float(g)) - w)) / float(np.spacing(abs(dtype(float(w)))))
                for g, w in zip(got, wanted)
            ]
        assert max(error) <= 0.501, (fun.__name__, x[np.argmax(error)], max(error))


def _float32_neighbours(at: float, count: int) -> np.ndarray:
    """The `count` float32s on either side of `at` (and `at` itself), both signs."""
    bits = np.array(at, np.float32).view(np.int32) + np.arange(-count, count + 1, dtype=np.int32)
    values = bits.view(np.float32)
    return np.concatenate([values, -values])


def test_float32_erf_and_erfc_at_their_seams_and_through_erfc_tail():
    """float32's erf and erfc change their computation at 3/4, 2 and 3.92 (erf) and 1/2 and
    10.1 (erfc, whose tail past 1/2 is computed in float64 down to its last subnormal at 10.05):
    every float32 next to each seam, and erfc densely through its tail, within the bounds of
    UNARY; and the values that come out exactly."""
    seams = {"erf": (0.75, 2.0, 3.92), "erfc": (0.5, 10.05, 10.1)}
    for name, at in seams.items():
        ours, reference, _ = UNARY[name]
        x = np.concatenate([_float32_neighbours(s, 3000) for s in at])
        if name == "erfc":
            tail = np.linspace(0.5, 10.2, 200001, dtype=np.float32)
            x = np.concatenate([x, tail, -tail])
        check(name, run(ours, x), exact(reference, np.float32, x), np.float32, x)
    specials = np.array([np.inf, -np.inf, 0.0, -0.0, 3.92, 10.1, 1e30, -10.1, np.nan], np.float32)
    erf, erfc = run(fsp.erf, specials), run(fsp.erfc, specials)
    np.testing.assert_array_equal(erf, [1, -1, 0, -0.0, 1, 1, 1, -1, np.nan])
    np.testing.assert_array_equal(np.signbit(erf), [0, 1, 0, 1, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(erfc, [0, 2, 1, 1, erfc[4], 0, 0, 2, np.nan])
    smallest = np.finfo(np.float32).smallest_subnormal
    assert run(fsp.erfc, np.array([10.05], np.float32))[0] == smallest  # (7.6e-46 rounds up)


def test_float32_erf_inv_within_its_bound():
    """A CPU's float32 erf_inv, computed in float32 (`special._erf_inv_float32`), within 0.85 ulp
    (0.82 measured over 2.4 million arguments) of mpmath's values over the whole range, and of
    the float64 reference's over dense sweeps: from 0 to 0.6, every float32 within 3000 of the
    seam of its two pieces (w = 2) and the last 100,000 below 1; and its special values."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(11)
    ys = np.concatenate(
        [
            rng.uniform(-1, 1, 1500),
            1 - np.exp(-rng.uniform(0, 16.5, 500)),
            np.nextafter(np.float32(1), np.float32(0)) - np.arange(8) * np.float32(6e-8),
            np.geomspace(1e-40, 1e-3, 30),
        ]
    ).astype(np.float32)
    got = run(lax.erf_inv, ys)
    with mpmath.workdps(30):
        wanted = np.array([float(mpmath.erfinv(mpmath.mpf(float(y)))) for y in ys])
    error = ulp_error(got, wanted, np.float32)
    assert error.max() <= 0.85, (ys[error.argmax()], got[error.argmax()])
    last_below_one = np.nextafter(np.float32(1), np.float32(0))
    dense = np.concatenate(
        [
            np.linspace(0, 0.6, 100001, dtype=np.float32),
            _float32_neighbours(np.sqrt(-np.expm1(-2.0)), 3000),
            last_below_one - np.arange(100000, dtype=np.float32) * np.float32(2.0**-24),
            rng.uniform(-1, 1, 100000).astype(np.float32),
        ]
    )
    error = ulp_error(
        run(lax.erf_inv, dense), _special.erf_inv(dense.astype(np.float64)), np.float32
    )
    assert error.max() <= 0.85, (dense[error.argmax()], error.max())
    specials = np.array([0.0, -0.0, 1.0, -1.0, 1.5, -2.0, np.nan], np.float32)
    values = run(lax.erf_inv, specials)
    np.testing.assert_array_equal(values, [0.0, -0.0, np.inf, -np.inf, np.nan, np.nan, np.nan])
    assert np.signbit(values[1])
    tiny = np.array([1e-45, -1e-45, 1e-38, -3e-39], np.float32)  # x = 0.886 y, rounded once
    np.testing.assert_array_equal(
        run(lax.erf_inv, tiny), (tiny.astype(np.float64) * (np.sqrt(np.pi) / 2)).astype(np.float32)
    )
