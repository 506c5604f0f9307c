"""Complex numbers: values against NumPy, derivatives against finite differences in the
conjugate convention, and the compiled backend against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.backends.cuda import emulator
from funcgrad.test_util import check_grads
from funcgrad.tools.recipes import COMPILED_BACKENDS
from tests import strategies as fst

TOLERANCE = {
    np.dtype(np.complex64): dict(rtol=2e-5, atol=2e-5),
    np.dtype(np.complex128): dict(rtol=1e-12, atol=1e-12),
}


def complex_arrays(low=-3.0, high=3.0, shape=None):
    shapes = fst.shapes(1, 3) if shape is None else shape
    return fst.arrays(fst.complex_dtypes, shapes, min_value=low, max_value=high)


def assert_matches(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    # Results in double precision (complex128 and its float64 parts) get the tight tolerance.
    double = dtypes.real_dtype(actual.dtype) == np.float64
    tol = TOLERANCE[np.dtype(np.complex128 if double else np.complex64)]
    np.testing.assert_allclose(actual, expected, **tol)


# ---------------------------------------------------------------------------------------------
# Values, eager and compiled

UNARY = {
    "exp": (fnp.exp, np.exp),
    "log": (fnp.log, np.log),
    "log1p": (fnp.log1p, np.log1p),
    "expm1": (fnp.expm1, np.expm1),
    "sqrt": (fnp.sqrt, np.sqrt),
    "sin": (fnp.sin, np.sin),
    "cos": (fnp.cos, np.cos),
    "tan": (fnp.tan, np.tan),
    "sinh": (fnp.sinh, np.sinh),
    "cosh": (fnp.cosh, np.cosh),
    "tanh": (fnp.tanh, np.tanh),
    "arcsinh": (fnp.arcsinh, np.arcsinh),
    "arccosh": (fnp.arccosh, np.arccosh),
    "arctanh": (fnp.arctanh, np.arctanh),
    "arcsin": (fnp.arcsin, np.arcsin),
    "arccos": (fnp.arccos, np.arccos),
    "arctan": (fnp.arctan, np.arctan),
    "abs": (fnp.abs, np.abs),
    "angle": (fnp.angle, np.angle),
    "real": (fnp.real, np.real),
    "imag": (fnp.imag, np.imag),
    "conj": (fnp.conj, np.conj),
    "square": (fnp.square, np.square),
    "reciprocal": (fnp.reciprocal, np.reciprocal),
    "sign": (fnp.sign, lambda z: _sign(z)),
}


def _sign(z):
    z = np.where(np.abs(z) < 1e-300, z * 2.0**600, z)  # exact rescaling of subnormal values
    magnitude = np.abs(z)
    safe = np.where(magnitude == 0, 1, magnitude)
    return np.where(magnitude == 0, 0, z.real / safe + 1j * (z.imag / safe))


def _off_the_cuts(name, z):
    """Inverse functions have branch cuts on the axes; keep away from them (the reference and
    the compiled formulas may take either side of a cut)."""
    if name in ("arcsinh", "arccosh", "arctanh", "arcsin", "arccos", "arctan", "log", "sqrt"):
        return np.all(np.abs(z.real) > 1e-2) and np.all(np.abs(z.imag) > 1e-2)
    return True


@pytest.mark.parametrize("name", sorted(UNARY))
@given(z=complex_arrays())
def test_unary_functions_match_numpy_eager_and_compiled(name, z):
    ours, reference = UNARY[name]
    if not _off_the_cuts(name, z):
        return
    tiny = np.finfo(z.real.dtype).tiny
    if name == "reciprocal" and np.any(np.abs(z) < 1 / np.finfo(z.real.dtype).max + tiny):
        return  # 1/z overflows: where each part lands between inf and huge is not specified
    expected = reference(z.astype(np.complex128))
    expected = expected.astype(z.dtype if np.iscomplexobj(expected) else z.real.dtype)
    eager = ours(z)
    assert_matches(eager, expected)
    assert_matches(fg.jit(ours)(z), expected)


# Parts on the axes (zeros of both signs, on the branch cuts), tiny, subnormal and huge.
EDGE_PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 700.0, -700.0, 1e-30, 1e30]


def _edge_values(dtype) -> np.ndarray:
    info = np.finfo(dtypes.real_dtype(dtype))
    huge = [info.max / 8, info.max, -info.max / 2]
    parts = np.array(EDGE_PARTS + [info.smallest_subnormal * 6072] + huge, info.dtype)
    z = np.empty(len(parts) ** 2, dtype)
    z.real, z.imag = np.repeat(parts, len(parts)), np.tile(parts, len(parts))
    return z


def _on_reference(fun, *args):
    with jit_backend("numpy"):
        return np.asarray(fg.jit(fun)(*args))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize(
    "fun",
    [
        fnp.sqrt,
        fnp.log,
        fnp.arcsin,
        fnp.arccos,
        fnp.arcsinh,
        fnp.arccosh,
        fnp.arctanh,
        fnp.arctan,
        lax.rsqrt,
    ],
)
def test_compiled_functions_on_the_cuts_and_at_tiny_and_huge_arguments_match_the_reference(
    fun, dtype
):
    """Compiled formulas used to lose these: sqrt(-1 - 0j) was +1j (the zero's sign picks the
    cut's side), arcsin(1e-30j) 0, arcsinh(1e300j) inf, arccos(1 + 1e-30j) 11% off, log
    and sqrt of subnormal z a few digits, arctanh(1e-20 + 2j) 0 + 1.107j (right: 2e-21 +
    1.107j) and arctan(2 + 0j) 1.107 - 0j; near the largest float, where |z| or a sum of
    parts overflows, log(3e38 + 3e38j) was inf + 0.785j in complex64, sqrt(-3e38 + 1j) 0 +
    inf j and arcsinh(3e38 + 3e38j) inf + 0.785j (found by fuzzing)."""
    z = _edge_values(dtype)
    with np.errstate(all="ignore"):
        expected = _on_reference(fun, z)
    got = np.asarray(fg.jit(fun)(z))
    tol = 8 * np.finfo(dtypes.real_dtype(dtype)).eps
    for g, e in ((got.real, expected.real), (got.imag, expected.imag)):
        # (each part within a few ulp of the whole: a part may be tiny beside the other)
        close = np.isclose(g, e, rtol=tol, atol=0, equal_nan=True)
        close |= np.abs(g - e) <= tol * np.abs(expected)
        assert close.all(), (z[~close], got[~close], expected[~close])
        zero = e == 0
        assert (np.signbit(g) == np.signbit(e))[zero].all(), (z[zero], got[zero])


def test_compiled_division_and_reciprocal_by_zero_match_the_reference():
    """1 / 0j is inf + nan j (NumPy's division), 0j ** -1 and 0j ** -2 nan + nan j (its power);
    Smith's division gave nan + nan j for all three."""
    z = np.array([0j, -0.0 - 0j, 2 + 0j, 1e-30j], np.complex128)

    def f(z):
        return 1 / z, (1 - 2j) / z, fnp.reciprocal(z), lax.integer_pow(z, -2)

    with np.errstate(all="ignore"):
        expected = _on_reference(f, z)
    for got, wanted in zip(fg.jit(f)(z), expected):
        np.testing.assert_array_equal(np.asarray(got), wanted)


def test_compiled_trigonometric_and_hyperbolic_parts_of_huge_arguments_on_the_axes():
    """sinh(1e30 + 0j) is inf + 0j: its imaginary part cosh(1e30) sin(0) was inf * 0 = nan
    (and likewise cosh's, and the real parts of sin and cos on the imaginary axis)."""
    z = np.array([1e30 + 0j, 1e300 - 0j, -1e30 + 0j, 1e30j, -0.0 - 1e300j, 0j], np.complex128)

    def f(z):
        return fnp.sinh(z), fnp.cosh(z), fnp.sin(z), fnp.cos(z)

    with np.errstate(all="ignore"):
        expected = _on_reference(f, z)
    for got, wanted in zip(fg.jit(f)(z), expected):
        got = np.asarray(got)
        np.testing.assert_array_equal(got, wanted)
        np.testing.assert_array_equal(np.signbit(got.imag), np.signbit(wanted.imag))
        np.testing.assert_array_equal(np.signbit(got.real), np.signbit(wanted.real))


def test_compiled_modulus_of_an_infinite_part_beside_a_nan_is_infinite():
    """|inf + nan j| is inf (C's hypot, NumPy): the compiled modulus took the larger part's
    magnitude with a NaN-propagating max and gave nan, and so did log, log1p and sqrt."""
    z = np.array([complex(np.inf, np.nan), complex(np.nan, -np.inf), complex(-np.inf, np.nan)])

    def f(z):
        return fnp.abs(z), fnp.log(z), fnp.log1p(z), fnp.sqrt(z)

    with np.errstate(all="ignore"):
        expected = _on_reference(f, z)
    for got, wanted in zip(fg.jit(f)(z), expected):
        np.testing.assert_array_equal(np.asarray(got), wanted)


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_sign_of_numbers_whose_modulus_overflows_is_their_direction(backend, dtype):
    """sign(3e38 + 3e38j) in complex64 is (1 + 1j) / sqrt(2): the reference took |z|, which
    overflows to inf there, and gave 0 (eager and on the NumPy backend). Against mpmath."""
    import mpmath as mp

    huge = np.finfo(dtypes.real_dtype(dtype)).max
    z = np.array([huge + huge * 1j, -huge / 2 + huge * 1j, 0.9 * huge - 0.8j * huge, 1 + 1j], dtype)
    want = np.array([complex(mp.mpc(complex(v)) / abs(mp.mpc(complex(v)))) for v in z])
    want = want.astype(dtype)
    if backend == "eager":
        got = np.asarray(fnp.sign(z))
    else:
        with jit_backend(backend):
            got = np.asarray(fg.jit(lax.sign)(z))
    eps = np.finfo(dtypes.real_dtype(dtype)).eps
    np.testing.assert_allclose(got.real, want.real, rtol=4 * eps, atol=0)
    np.testing.assert_allclose(got.imag, want.imag, rtol=4 * eps, atol=0)


def test_compiled_log_near_the_unit_circle_keeps_the_real_parts_relative_accuracy():
    """log|z| of z near the unit circle is small: log of the modulus kept only its absolute
    accuracy (log(1.00000025 - 5.7e-6j) had a real part 6e-10 relative off)."""
    z = np.array([1.0000002552786997 - 5.669757804700067e-06j, 1e-6 + 0.9999999j, -0.99999 + 1e-3j])
    expected = _on_reference(fnp.log, z)
    got = np.asarray(fg.jit(fnp.log)(z))
    np.testing.assert_allclose(got.real, expected.real, rtol=1e-15)
    np.testing.assert_allclose(got.imag, expected.imag, rtol=1e-15)


def test_compiled_complex_powers_with_whole_real_exponents_multiply_as_numpy_does():
    """(1 + 1j) ** 2.0 is 2j exactly: exp(2 log z) left 1.2e-16 in the real part. NumPy (the
    reference) squares repeatedly for a whole real exponent below 100 in magnitude; it also
    makes 0 ** y NaN for y not real and positive, and z ** 0 one for every z."""
    z = np.array([1 + 1j, -1 + 0j, 2 - 3j, 1j, 0.5 + 0.5j, 0j, 0j, 0j, np.inf + 0j, 1.1 + 0.1j])
    y = np.array([2, 2, 3, 2, -2, -1, 1j, 2, 0, -7], np.complex128)
    with np.errstate(all="ignore"):
        expected = _on_reference(lambda a, b: a**b, z, y)
    got = np.asarray(fg.jit(lambda a, b: a**b)(z, y))
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    whole = np.isfinite(expected) & (expected.real % 1 == 0) & (expected.imag % 1 == 0)
    np.testing.assert_array_equal(got[whole], expected[whole])  # (2j, 1, -46 - 9j, -1, 1)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_compiled_exp_and_hyperbolic_parts_past_the_overflow_of_e_to_the_a_stay_in_range(dtype):
    """e^a overflows a little before e^a sin b does for small b: exp(90 + 1e-30j) in complex64
    is inf + 1.2e9j (the reference's), where e^a sin b gave inf + inf j."""
    a = 90.0 if dtype == np.complex64 else 711.0
    z = np.array([a + 1e-30j, a + 1.5707963j, a + 3j, a / 2 + 1j, a + 0j, -a + 2j], dtype)

    def f(z):
        # (sinh, cosh, sin and cos as their parts hold cosh and sinh: sinh(90 + 1e-30j) in
        # complex64 is inf + 6.1e8j)
        return fnp.exp(z), fnp.sinh(z), fnp.cosh(z), fnp.sin(z * 1j), fnp.cos(z * 1j)

    tol = 8 * np.finfo(dtypes.real_dtype(dtype)).eps
    for got, expected in zip(fg.jit(f)(z), _on_reference(f, z)):
        got = np.asarray(got)
        np.testing.assert_allclose(got.real, expected.real, rtol=tol)
        np.testing.assert_allclose(got.imag, expected.imag, rtol=tol)


# Infinite and NaN parts, where C99's Annex G defines the values NumPy gives. The large part
# is a power of two, so that products of parts round alike with and without fused
# multiply-adds (the LLVM backend's).
SPECIAL_UNARY = (
    "exp exp2 log log2 log10 log1p expm1 sqrt sin cos tan sinh cosh tanh arcsin arccos "
    "arctan arcsinh arccosh arctanh reciprocal square absolute sign"
).split()
# Whole exponents as Python ints (integer_pow), the others together as an array (pow).
WHOLE_EXPONENTS = [3, 5, -1, -2]
EXPONENTS = [2.0, 4.0, -3.0, 0.5, -2.5, 1j, 0.5 + 1j]


def _special_values(dtype) -> np.ndarray:
    large = 2.0**500 if dtype == np.complex128 else 2.0**60
    parts = [0.0, -0.0, 0.25, 1.5, -1.5, large, -large, np.inf, -np.inf, np.nan]
    return np.array([complex(a, b) for a in parts for b in parts], dtype)


def _special_functions(z):
    unary = [getattr(fnp, name)(z) for name in SPECIAL_UNARY]
    powers = [fnp.power(z, n) for n in WHOLE_EXPONENTS]
    return unary + powers + [fnp.power(z[:, None], np.array(EXPONENTS, z.dtype))]


def _parts_differ(got, expected, signed_zeros):
    """Where parts differ: NaN against a number (a NaN's sign and payload do not count), a
    zero or an infinity of the other sign (zeros' signs only where `signed_zeros`), or
    numbers further apart than a few ulp."""
    eps = np.finfo(got.dtype).eps
    with np.errstate(invalid="ignore"):
        close = np.abs(got - expected) <= 8 * eps * np.abs(expected)
    same = (got == expected) & ((np.signbit(got) == np.signbit(expected)) | ~signed_zeros)
    same |= close & (expected != 0) & np.isfinite(expected)
    return ~((np.isnan(got) & np.isnan(expected)) | same)


@pytest.mark.parametrize(
    "backend, dtype",
    [(backend, np.complex128) for backend in ["eager", *COMPILED_BACKENDS]]
    # (complex64's thresholds are the lowering's, which the CUDA renderer shares with LLVM's)
    + [(backend, np.complex64) for backend in ["eager", "numpy", "llvm"]],
)
def test_functions_at_infinite_and_nan_parts_match_numpy(backend, dtype):
    """The compiled formulas gave nan + nan j where Annex G has values: exp(-inf + inf j) is
    a zero, arcsin(inf + 0j) pi/2 + inf j, arcsinh(inf j) inf + (pi/2) j, tanh(inf + nan j)
    1 + 0j, z ** 0.5 at inf j inf + nan j; eagerly log10(inf + nan j) was nan + nan j."""
    if backend.startswith("cuda") and emulator.compiler() is None:
        pytest.skip("the emulator needs a C++ compiler")
    z = _special_values(dtype)
    with np.errstate(all="ignore"):
        expected = [getattr(np, name)(z) for name in SPECIAL_UNARY]
        expected += [np.power(z, n) for n in WHOLE_EXPONENTS]
        expected += [np.power(z[:, None], np.array(EXPONENTS, z.dtype))]
        if backend == "eager":
            results = _special_functions(z)
        else:
            with jit_backend(backend):
                results = fg.jit(_special_functions)(z)
    names = SPECIAL_UNARY + [f"power(z, {n})" for n in WHOLE_EXPONENTS] + ["power"]
    # A zero's sign taken from a NaN's is not specified (power(inf + nan j, -2.5) is a zero).
    nan_part = np.isnan(z.real) | np.isnan(z.imag)
    failures = []
    for name, got, wanted in zip(names, results, expected):
        got, wanted = np.asarray(got), np.asarray(wanted)
        assert got.dtype == wanted.dtype, (name, got.dtype, wanted.dtype)
        signed = np.broadcast_to(~nan_part if "power" in name else True, z.shape)
        signed = np.broadcast_to(signed.reshape(signed.shape + (1,) * (got.ndim - 1)), got.shape)
        if got.dtype.kind == "c":
            wrong = _parts_differ(got.real, wanted.real, signed)
            wrong |= _parts_differ(got.imag, wanted.imag, signed)
        else:
            wrong = _parts_differ(got, wanted, signed)
        for index in zip(*np.nonzero(wrong)):
            exponent = f", {EXPONENTS[index[1]]}" if len(index) > 1 else ""
            place = f"{name}({z[index[0]]}{exponent})"
            failures.append(f"{place} = {got[index]}, not {wanted[index]}")
    assert not failures, "\n".join(failures[:40])


BINARY = {
    "add": (fnp.add, np.add),
    "subtract": (fnp.subtract, np.subtract),
    "multiply": (fnp.multiply, np.multiply),
    "divide": (fnp.divide, np.divide),
    "power": (fnp.power, np.power),
    "equal": (fnp.equal, np.equal),
    "not_equal": (fnp.not_equal, np.not_equal),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_functions_match_numpy_eager_and_compiled(name, data):
    dtype = data.draw(fst.complex_dtypes)
    shape = data.draw(fst.shapes(1, 3))
    z = data.draw(fst.arrays(dtype, shape, min_value=0.2, max_value=3.0))
    w = data.draw(fst.arrays(dtype, shape, min_value=-2.0, max_value=2.0))
    if name == "divide":
        z, w = w, z  # divisors away from zero (dividing by 0 + 0j has no agreed answer)
    if name == "equal":
        w = np.where(np.arange(w.size).reshape(shape) % 2 == 0, z, w).astype(dtype)
    ours, reference = BINARY[name]
    expected = reference(z.astype(np.complex128), w.astype(np.complex128))
    if expected.dtype != np.bool_:
        expected = expected.astype(dtype)
    assert_matches(ours(z, w), expected)
    assert_matches(fg.jit(ours)(z, w), expected)


@given(z=complex_arrays(shape=fst.shapes(2, 3)), data=st.data())
def test_reductions_and_products_match_numpy(z, data):
    axis = data.draw(st.integers(0, z.ndim - 1))
    wide = z.astype(np.complex128)
    cases = [
        (lambda x: fnp.sum(x, axis), np.sum(wide, axis)),
        (lambda x: fnp.prod(x, axis), np.prod(wide, axis)),
        (lambda x: fnp.cumsum(x, axis), np.cumsum(wide, axis)),
        (lambda x: fnp.cumprod(x, axis), np.cumprod(wide, axis)),
        (lambda x: fnp.mean(x, axis), np.mean(wide, axis)),
    ]
    for fun, expected in cases:
        expected = expected.astype(z.dtype)
        assert_matches(fun(z), expected)
        assert_matches(fg.jit(fun)(z), expected)
    variance = np.var(wide, axis).astype(z.real.dtype)
    np.testing.assert_allclose(fnp.var(z, axis), variance, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        fg.jit(lambda x: fnp.var(x, axis))(z), variance, rtol=1e-4, atol=1e-4
    )


@given(data=st.data())
def test_matmul_of_complex_and_mixed_operands(data):
    dtype = data.draw(fst.complex_dtypes)
    a = data.draw(fst.arrays(dtype, (3, 4)))
    b = data.draw(fst.arrays(dtype, (4, 2)))
    real = data.draw(fst.arrays(np.dtype(dtype).type(0).real.dtype, (4, 2)))
    for x, y in ((a, b), (a, real)):
        expected = (x.astype(np.complex128) @ y.astype(np.complex128)).astype(dtype)
        assert_matches(fnp.matmul(x, y), expected)
        assert_matches(fg.jit(fnp.matmul)(x, y), expected)
    expected = np.vdot(a.astype(np.complex128), a.astype(np.complex128)).astype(dtype)
    assert_matches(fg.jit(fnp.vdot)(a, a), expected)


def test_compiled_control_flow_carries_complex_values():
    z = (np.arange(6) + 1j * np.arange(6, 0, -1)).astype(np.complex64) / 4

    def program(z):
        total, partial = lax.scan(lambda c, x: (c * x + 1j, c), 1 + 0j * z[0], z)
        looped = lax.fori_loop(0, 3, lambda i, c: c * z[i] - c.conj(), z)
        chosen = lax.cond(total.real > 0, lambda x: x * 2, lambda x: x * 1j, looped)
        return total, partial, chosen

    eager = program(fnp.asarray(z))
    compiled = fg.jit(program)(z)
    for actual, expected in zip(compiled, eager):
        assert_matches(actual, np.asarray(expected))


def test_compiled_programs_take_complex_views_and_scalars():
    z = (np.arange(12).reshape(3, 4) * (1 - 2j)).astype(np.complex128)
    fun = fg.jit(lambda x, s: x * s + fnp.exp(1j * x.real))
    expected = z.T * (2 + 1j) + np.exp(1j * z.T.real)
    assert_matches(fun(z.T, 2 + 1j), expected)
    scalar = fg.jit(lambda x: x * x)(np.complex64(1 + 1j))
    assert scalar.shape == () and complex(scalar) == 2j


def test_bitcast_of_complex_values_compiles():
    z = np.array([1 + 2j, -3.5 + 0.25j], np.complex64)
    for dtype in (np.uint64, np.float32, np.uint8):
        expected = z.view(dtype).reshape(lax.bitcast_convert_type(z, dtype).shape)
        np.testing.assert_array_equal(
            fg.jit(lambda x, d=dtype: lax.bitcast_convert_type(x, d))(z), expected
        )
    bits = z.view(np.uint64)
    np.testing.assert_array_equal(
        fg.jit(lambda b: lax.bitcast_convert_type(b, np.complex64))(bits), z
    )


# ---------------------------------------------------------------------------------------------
# Derivatives


def _partials(f, z: complex, h: float = 1e-6) -> complex:
    """∂f/∂x - i ∂f/∂y of a real function by central differences: JAX's (and funcgrad's)
    gradient of a real-valued function of a complex variable."""
    dx = (f(z + h) - f(z - h)) / (2 * h)
    dy = (f(z + 1j * h) - f(z - 1j * h)) / (2 * h)
    return dx - 1j * dy


@given(
    z=st.complex_numbers(
        min_magnitude=0.2, max_magnitude=3.0, allow_nan=False, allow_infinity=False
    )
)
def test_grad_of_real_functions_of_complex_inputs_is_conjugate_convention(z):
    functions = [
        (lambda x: fnp.abs(x) ** 2, lambda x: abs(x) ** 2),
        (lambda x: fnp.real(fnp.exp(x) * x), lambda x: (np.exp(x) * x).real),
        (lambda x: fnp.imag(fnp.sin(x)) + fnp.abs(x), lambda x: np.sin(x).imag + abs(x)),
        (lambda x: fnp.angle(x), lambda x: np.angle(x)),
    ]
    point = np.complex128(z)
    if point.real < 0 and abs(point.imag) < 1e-2:
        functions.pop()  # angle jumps by 2π across the negative real axis
    for ours, reference in functions:
        expected = _partials(reference, complex(point))
        np.testing.assert_allclose(complex(fg.grad(ours)(point)), expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(
            complex(fg.jit(fg.grad(ours))(point)), expected, rtol=1e-6, atol=1e-6
        )


def test_grad_of_squared_modulus_is_twice_the_conjugate():
    assert complex(fg.grad(lambda z: fnp.abs(z) ** 2)(np.complex64(3 + 4j))) == 6 - 8j


@given(
    z=st.complex_numbers(
        min_magnitude=0.2, max_magnitude=2.0, allow_nan=False, allow_infinity=False
    )
)
def test_holomorphic_grad_is_the_complex_derivative(z):
    point, h = np.complex128(z), 1e-6

    def f(x):
        return fnp.sin(x) * fnp.exp(x) + x**3 / (x + 3)

    def reference(x):
        return np.sin(x) * np.exp(x) + x**3 / (x + 3)

    expected = (reference(point + h) - reference(point - h)) / (2 * h)
    np.testing.assert_allclose(complex(fg.grad(f, holomorphic=True)(point)), expected, rtol=1e-6)
    np.testing.assert_allclose(complex(fg.jacfwd(f, holomorphic=True)(point)), expected, rtol=1e-6)
    np.testing.assert_allclose(complex(fg.jacrev(f, holomorphic=True)(point)), expected, rtol=1e-6)


@given(z=complex_arrays(0.3, 2.0, shape=(3,)))
def test_jvp_and_vjp_of_complex_programs_pass_the_derivative_checks(z):
    z = z.astype(np.complex128)

    def f(x):
        return fnp.sum(fnp.sin(x) * fnp.conj(x)) + fnp.real(x[0] * x[1]) + fnp.abs(x[2])

    check_grads(f, (z,), order=2)
    check_grads(lambda x: fnp.cumprod(fnp.exp(x) / x), (z,), order=1)


def test_vmap_of_complex_functions_is_the_loop():
    z = (np.linspace(0.1, 1, 8).reshape(4, 2) * (1 + 2j)).astype(np.complex64)

    def f(x):
        return fnp.sum(fnp.exp(x) * fnp.conj(x))

    np.testing.assert_allclose(
        fg.vmap(f)(z), np.stack([np.asarray(f(row)) for row in z]), rtol=1e-6
    )


# ---------------------------------------------------------------------------------------------
# Promotion, the NumPy layer and errors


def test_promotion_and_weak_complex_scalars():
    x32 = fnp.ones(2, fnp.float32)
    x64 = fnp.ones(2, fnp.float64)
    assert (x32 * 1j).dtype == np.complex64
    assert (x64 * 1j).dtype == np.complex128
    assert (fnp.ones(2, fnp.complex64) * x64).dtype == np.complex128
    assert (fnp.ones(2, fnp.int32) + 1j).dtype == np.complex64
    assert fnp.result_type(fnp.float32, fnp.complex64) == np.complex64
    assert fnp.asarray(1j).weak_type


def test_numpy_layer_parts_and_predicates():
    z = fnp.array([3 + 4j, -1.0, 2j])
    np.testing.assert_array_equal(z.real, [3, -1, 0])
    np.testing.assert_array_equal(z.imag, [4, 0, 2])
    np.testing.assert_array_equal(fnp.conj(z), np.conj(np.asarray(z)))
    np.testing.assert_array_equal(fnp.isreal(z), [False, True, False])
    np.testing.assert_array_equal(fnp.iscomplex(z), [True, False, True])
    assert fnp.iscomplexobj(z) and not fnp.isrealobj(z) and fnp.isrealobj(fnp.ones(2))
    assert fnp.abs(z).dtype == np.float32
    assert fnp.isdtype(fnp.complex64, "complex floating")
    assert complex(z[0]) == 3 + 4j


@pytest.mark.parametrize(
    "fun, name",
    [
        (lambda z: fnp.max(z), "max"),
        (lambda z: fnp.nanmin(z, initial=3.5), "min"),
        (lambda z: fnp.argmax(z), "argmax"),
        (lambda z: fnp.floor(z), "floor"),
        (lambda z: fnp.signbit(z), "signbit"),
        (lambda z: fnp.copysign(z, 1.0), "copysign"),
        (lambda z: fnp.fabs(z), "fabs"),
        (lambda z: fnp.isposinf(z), "isposinf"),
        (lambda z: fnp.i0(z), "i0"),
        (lambda z: fnp.frexp(z), "frexp"),
        (lambda z: lax.erf(z), "erf"),
    ],
)
def test_complex_values_where_real_ones_are_required_raise(fun, name):
    """signbit, copysign, fabs, isposinf and i0 gave real answers from the parts' bits or the
    real parts; NumPy refuses complex values there."""
    z = fnp.array([1 + 1j, 2.0])
    with pytest.raises(TypeError, match=f"{name}.*complex64|complex64.*{name}"):
        fun(z)


def _complex_grid(seed: int, shape) -> np.ndarray:
    """Complex numbers with many ties in either part and NaNs in either or both parts."""
    rng = np.random.default_rng(seed)
    parts = rng.integers(-2, 3, size=(2, *shape)).astype(np.float32)
    parts[rng.random(parts.shape) < 0.15] = np.nan
    z = np.empty(shape, np.complex64)
    z.real, z.imag = parts
    return z


@pytest.mark.parametrize(
    "name",
    ["less", "less_equal", "greater", "greater_equal", "maximum", "minimum", "fmax", "fmin"],
)
def test_complex_numbers_compare_in_numpys_order(name):
    """By real part, then imaginary part; a NaN in either part compares false, and maximum and
    minimum return it (these raised on complex operands)."""
    x, y = _complex_grid(0, (40,)), _complex_grid(1, (40,))
    expected = getattr(np, name)(x, y)
    for ours in (getattr(fnp, name)(x, y), fg.jit(getattr(fnp, name))(x, y)):
        np.testing.assert_array_equal(np.asarray(ours), expected)
    np.testing.assert_array_equal(np.asarray(fnp.asarray(x) > y), x > y)


def test_complex_numbers_sort_by_real_then_imaginary_part():
    """sort and argsort take complex arrays (they raised), ordering as sort_complex does: by
    real part, then imaginary part, NaNs last in each."""
    z = _complex_grid(2, (3, 30))
    order = np.stack([np.lexsort((row.imag, row.real)) for row in z])
    np.testing.assert_array_equal(fnp.argsort(z), order)
    np.testing.assert_array_equal(fnp.sort(z), np.take_along_axis(z, order, -1))
    descending = np.asarray(fnp.sort(z, descending=True))
    np.testing.assert_array_equal(descending, np.take_along_axis(z, order, -1)[:, ::-1])
    np.testing.assert_array_equal(fg.jit(fnp.sort)(z), np.take_along_axis(z, order, -1))


def test_rint_rounds_both_parts_of_complex_numbers():
    z = np.array([0.5 + 1.5j, -2.5 - 0.5j, np.nan + 2.7j], np.complex64)
    np.testing.assert_array_equal(fnp.rint(z), np.rint(z))


def test_grad_of_complex_outputs_needs_holomorphic():
    with pytest.raises(TypeError, match="holomorphic=True"):
        fg.grad(lambda z: z * z)(np.complex64(1j))
    with pytest.raises(TypeError, match="complex inputs"):
        fg.grad(lambda x: x * x, holomorphic=True)(np.float32(1.0))
    with pytest.raises(TypeError, match="real inputs"):
        fg.jacfwd(lambda z: fnp.abs(z))(np.complex64(1j))


def test_loops_carry_complex_tangents():
    # A complex carry's tangent must flow through while loops (forward and reverse).
    def cube(x):
        return fnp.real(lax.fori_loop(0, 3, lambda i, c: c * x, 1 + 0j * x))

    def counted(x):
        _, power = lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x), (0, 1 + 0j * x)
        )
        return fnp.real(power)

    z = np.complex128(1 + 1j)
    assert complex(fg.grad(cube)(z)) == pytest.approx(6j)
    _, tangent = fg.jvp(counted, (z,), (np.complex128(1.0),))
    assert float(tangent) == pytest.approx((3 * z**2).real)


def test_nan_aware_statistics_and_closeness_of_complex_values():
    z = np.array([1 + 2j, np.nan, 3 - 1j, 2j])
    for name in ("nansum", "nanmean", "nanvar", "nanstd", "nanprod"):
        np.testing.assert_allclose(getattr(fnp, name)(z), getattr(np, name)(z), rtol=1e-12)
    finite = z[~np.isnan(z)]
    for dtype in (np.complex64, np.complex128):  # a requested dtype keeps the imaginary parts
        np.testing.assert_allclose(fnp.var(finite, dtype=dtype), np.var(finite), rtol=1e-6)
        np.testing.assert_allclose(fnp.nanvar(z, dtype=dtype), np.nanvar(z), rtol=1e-6)
    np.testing.assert_array_equal(fnp.isclose(z, z + 1e-9j), np.isclose(z, z + 1e-9j))
    np.testing.assert_array_equal(fnp.isnan(z), np.isnan(z))
    np.testing.assert_array_equal(fnp.isfinite(z * np.inf), np.isfinite(z * np.inf))
    np.testing.assert_allclose(fnp.round(z * 1.26, 1), np.round(z * 1.26, 1))


@given(data=st.data())
def test_complex_solve_inverse_and_determinant_match_numpy(data):
    n = data.draw(st.integers(1, 4))
    a = data.draw(fst.arrays(np.complex128, (n, n))) + 4 * np.eye(n)  # far from singular
    b = data.draw(fst.arrays(np.complex128, (n, 2)))
    np.testing.assert_allclose(fnp.linalg.solve(a, b), np.linalg.solve(a, b), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fnp.linalg.inv(a), np.linalg.inv(a), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fnp.linalg.det(a), np.linalg.det(a), rtol=1e-9)
    sign, logabsdet = fnp.linalg.slogdet(a)
    expected_sign, expected_log = np.linalg.slogdet(a)
    np.testing.assert_allclose(sign, expected_sign, rtol=1e-9)
    np.testing.assert_allclose(logabsdet, expected_log, rtol=1e-9, atol=1e-12)


def test_complex_linear_algebra_derivatives_pass_the_checks():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3)) + 3 * np.eye(3)
    b = rng.normal(size=(3, 2)) + 1j * rng.normal(size=(3, 2))
    check_grads(lambda m: fnp.linalg.solve(m, b), (a,), order=2)
    check_grads(fnp.linalg.det, (a,), order=1)
    np.testing.assert_allclose(fg.jit(fnp.linalg.solve)(a, b), np.linalg.solve(a, b), atol=1e-12)
    np.testing.assert_allclose(fg.jit(fnp.linalg.det)(a), np.linalg.det(a), rtol=1e-12)
    gradient = fg.grad(lambda m: fnp.abs(fnp.linalg.det(m)))
    np.testing.assert_allclose(fg.jit(gradient)(a), gradient(a), rtol=1e-10)


@given(data=st.data())
def test_hermitian_eigh_matches_numpy_eager_and_compiled(data):
    dtype = data.draw(fst.complex_dtypes)
    n = data.draw(st.integers(1, 4))
    a = data.draw(fst.arrays(dtype, (2, n, n)))
    hermitian = (a + np.swapaxes(a.conj(), -1, -2)).astype(dtype)
    expected_w, expected_v = np.linalg.eigh(hermitian)
    eager = fnp.linalg.eigh(hermitian)
    compiled = fg.jit(fnp.linalg.eigh)(hermitian)
    assert eager.eigenvalues.dtype == hermitian.real.dtype
    scale = 1 + np.abs(expected_w).max()
    distinct = n == 1 or np.diff(expected_w, axis=-1).min() > 1e-2 * scale
    for result in (eager, compiled):
        np.testing.assert_allclose(result.eigenvalues, expected_w, rtol=1e-4, atol=1e-4)
        v, w = np.asarray(result.eigenvectors), np.asarray(result.eigenvalues)
        # V diag(w) V^H is the matrix and V^H V the identity, whatever basis a repeated
        # eigenvalue's eigenvectors take.
        rebuilt = (v * w[..., None, :]) @ np.swapaxes(v.conj(), -1, -2)
        np.testing.assert_allclose(rebuilt, hermitian, atol=1e-3 * scale)
        identity = np.swapaxes(v.conj(), -1, -2) @ v
        np.testing.assert_allclose(identity, np.broadcast_to(np.eye(n), identity.shape), atol=1e-3)
        if distinct:  # each eigenvector unique up to a phase: compare the projections v v^H
            np.testing.assert_allclose(
                v[..., :, None, :] * v[..., None, :, :].conj(),
                expected_v[..., :, None, :] * expected_v[..., None, :, :].conj(),
                atol=1e-3,
            )
    # A GPU's solver may choose other phases, and so may the emulated one: the batched Jacobi
    # solver's matrices are conditioned first (entries below eps^2 of the largest flushed to
    # +0: an imaginary part of 9e-241 beside 1, or a -0), where the host's LAPACK sees them.
    if fg.config.jit_backend not in ("cuda", "cuda_emulator"):
        np.testing.assert_array_equal(compiled.eigenvectors, eager.eigenvectors)


def test_hermitian_eigh_derivatives_pass_the_checks():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))
    hermitian = a + a.conj().T
    check_grads(fnp.linalg.eigvalsh, (hermitian,), order=2)
    check_grads(lambda m: fnp.abs(fnp.linalg.eigh(m).eigenvectors) ** 2, (hermitian,), order=1)
    gradient = fg.grad(lambda m: fnp.linalg.eigvalsh(m)[-1])
    w, v = np.linalg.eigh(hermitian)
    # d λ_max = v^H dA v: the gradient, in the conjugate convention, is conj(v v^H).
    np.testing.assert_allclose(
        gradient(hermitian), np.outer(v[:, -1], v[:, -1].conj()).conj(), atol=1e-12
    )
    np.testing.assert_allclose(fg.jit(gradient)(hermitian), gradient(hermitian), atol=1e-12)


@given(data=st.data())
def test_complex_cholesky_and_qr_match_numpy_eager_and_compiled(data):
    dtype = data.draw(fst.complex_dtypes)
    n = data.draw(st.integers(1, 4))
    a = data.draw(fst.arrays(dtype, (2, n, n)))
    positive = (a @ np.swapaxes(a.conj(), -1, -2) + n * np.eye(n)).astype(dtype)
    expected = np.linalg.cholesky(positive.astype(np.complex128))
    factor = fnp.linalg.cholesky(positive)
    compiled_factor = fg.jit(fnp.linalg.cholesky)(positive)
    for result in (factor, compiled_factor):
        np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)
    rows = data.draw(st.integers(n, 5))
    b = data.draw(fst.arrays(dtype, (rows, n)))
    q, r = fnp.linalg.qr(b)
    compiled_q, compiled_r = fg.jit(fnp.linalg.qr)(b)
    scale = 1 + np.abs(b).max()
    for q_, r_ in ((q, r), (compiled_q, compiled_r)):
        q_, r_ = np.asarray(q_), np.asarray(r_)
        # Q R is the matrix, Q's columns orthonormal, R upper triangular with NumPy's
        # diagonal up to phases: whatever a rank-deficient matrix's later columns of Q are.
        np.testing.assert_allclose(q_ @ r_, b, rtol=1e-4, atol=1e-4 * scale)
        np.testing.assert_allclose(q_.conj().T @ q_, np.eye(n), atol=1e-4)
        assert (np.tril(r_, -1) == 0).all()
        np.testing.assert_allclose(
            np.abs(np.diagonal(r_)),
            np.abs(np.diagonal(np.linalg.qr(b)[1])),
            rtol=1e-4,
            atol=1e-4 * scale,
        )
    # The host's LAPACK computes both alike, bit for bit; a GPU's solver is another
    # implementation (a real part of 4e-17 where LAPACK's was 0, in complex128 before rounding).
    if fg.config.jit_backend != "cuda":
        np.testing.assert_array_equal(compiled_factor, factor)
        np.testing.assert_array_equal(compiled_q, q)
        np.testing.assert_array_equal(compiled_r, r)


def test_complex_cholesky_and_qr_derivatives_pass_the_checks():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))
    positive = a @ a.conj().T + 3 * np.eye(3)
    check_grads(fnp.linalg.cholesky, (positive,), order=2)
    tall = rng.normal(size=(4, 3)) + 1j * rng.normal(size=(4, 3))
    check_grads(fnp.linalg.qr, (tall,), order=1)
    check_grads(fnp.linalg.qr, (a,), order=1)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (3, 3)])
def test_complex_svd_pinv_and_lstsq(shape):
    rng = np.random.default_rng(sum(shape))
    a = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    u, s, vh = fnp.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    assert s.dtype == np.float64
    np.testing.assert_allclose((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), a, atol=1e-12)
    for compiled, eager in zip(fg.jit(fnp.linalg.svd)(a), fnp.linalg.svd(a)):
        np.testing.assert_array_equal(compiled, eager)
    check_grads(lambda m: fnp.linalg.svd(m, compute_uv=False), (a,), order=2)
    # Phase-independent functions of the singular vectors, and the reconstruction.
    check_grads(lambda m: fnp.abs(fnp.linalg.svd(m, full_matrices=False)[0]) ** 2, (a,), order=1)
    check_grads(lambda m: (lambda u, s, vh: (u * s) @ vh)(*fnp.linalg.svd(m, False)), (a,), order=1)
    np.testing.assert_allclose(fg.jit(fnp.linalg.pinv)(a), np.linalg.pinv(a), atol=1e-12)
    check_grads(fnp.linalg.pinv, (a,), order=1)
    b = rng.normal(size=(shape[0], 2)) + 1j * rng.normal(size=(shape[0], 2))
    x, residuals, rank, _ = fnp.linalg.lstsq(a, b)
    expected_x, expected_residuals, expected_rank, _ = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(x, expected_x, atol=1e-12)
    assert int(rank) == expected_rank
    if expected_residuals.size:
        np.testing.assert_allclose(residuals, expected_residuals, atol=1e-12)


def test_complex_normal_samples_have_unit_variance_split_between_parts():
    z = np.asarray(fg.random.normal(fg.random.key(3), (200_000,), fnp.complex64))
    assert z.dtype == np.complex64
    # E|z|² = 1 and each part has variance 1/2 (tolerances: 5 standard errors).
    assert abs(np.mean(np.abs(z) ** 2) - 1) < 5 * np.sqrt(1 / 200_000)
    assert abs(np.var(z.real) - 0.5) < 5 * np.sqrt(0.5 / 200_000)
    assert abs(np.mean(z.real * z.imag)) < 5 * np.sqrt(0.25 / 200_000)
    compiled = fg.jit(lambda k: fg.random.normal(k, (4,), fnp.complex64))(fg.random.key(3))
    eager = fg.random.normal(fg.random.key(3), (4,), fnp.complex64)
    # Bit for bit on the CPU; a GPU's log and cos may round differently, by an ulp or two.
    tolerance = 1e-6 if fg.config.jit_backend == "cuda" else 0
    np.testing.assert_allclose(compiled, eager, rtol=tolerance, atol=0)


def test_compiled_scatters_of_complex_updates():
    rng = np.random.default_rng(4)
    x = rng.normal(size=5) + 1j * rng.normal(size=5)
    u = rng.normal(size=4) + 1j * rng.normal(size=4)
    u[2] = 0
    index = np.array([1, 3, 1, 0])
    for method, combine in (("multiply", np.multiply), ("add", np.add)):
        expected = x.copy()
        combine.at(expected, index, u)

        def scatter(values, updates, method=method):
            return getattr(values.at[index], method)(updates)

        np.testing.assert_allclose(fg.jit(scatter)(x, u), expected, atol=1e-12)
        np.testing.assert_allclose(scatter(fnp.asarray(x), u), expected, atol=1e-12)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
def test_compiled_complex_scatter_mul_multiplies_in_turn_as_the_reference(backend):
    """Each update multiplies its element as a complex number, infinite and NaN parts as in
    NumPy's product: the compiled scatter_mul took the updates in polar form (moduli
    multiplied, angles added), so (5.5 + 9e18j)(inf - 2j) came out nan + inf j, not inf + inf
    j, and finite products a few ulp off the reference's (found by fuzzing)."""
    if backend.startswith("cuda") and emulator.compiler() is None:
        pytest.skip("the emulator needs a C++ compiler")
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(3, 6)) + 1j * rng.normal(size=(3, 6))).astype(np.complex128)
    x[0, :2] = [5.5 + 9.2e18j, 1 + 0j]
    u = (rng.normal(size=(3, 5)) + 1j * rng.normal(size=(3, 5))).astype(np.complex128)
    u[0, :2] = [np.inf - 2j, np.inf + 0j]
    index = np.array([0, 1, 2, 9, 2], np.int32)  # a place outside, and a repeat

    def scatter(x, u):
        return x.at[index].multiply(u), x.at[index].multiply(u, mode="clip")

    batched = fg.vmap(scatter)  # (a scatter with batching dimensions)
    with np.errstate(all="ignore"), jit_backend("numpy"):
        expected = [np.asarray(r) for r in fg.jit(batched)(x, u)]
    with jit_backend(backend):
        results = [np.asarray(r) for r in fg.jit(batched)(x, u)]
    for got, wanted in zip(results, expected):
        # (LLVM may fuse a product into the sum of the parts: an ulp apart)
        np.testing.assert_allclose(got, wanted, rtol=1e-15)
        np.testing.assert_array_equal(
            got[0, :2], [complex(np.inf, np.inf), complex(np.inf, np.nan)]
        )


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
@pytest.mark.parametrize("reverse", [False, True])
def test_compiled_complex_cumprod_keeps_the_elements_with_no_earlier_factor(backend, reverse):
    """The first element (the last, reversed) of a prefix product is the element itself: the
    compiled doubling multiplied it by 1 + 0j, which made (inf + 2.5j) inf + nan j (found by
    fuzzing eager against jit)."""
    if backend.startswith("cuda") and emulator.compiler() is None:
        pytest.skip("the emulator needs a C++ compiler")
    x = np.array([np.inf + 2.5j, 2 - 1j, 0.5 + 3j, -1 + 0j, 1j], np.complex64)
    if reverse:
        x = x[::-1].copy()
    with jit_backend(backend):
        got = np.asarray(fg.jit(lambda x: fg.lax.cumprod(x, reverse=reverse))(x))
        single = np.asarray(fg.jit(lambda x: fg.lax.cumprod(x, reverse=reverse))(x[:1]))
    edge = -1 if reverse else 0
    assert got[edge] == x[edge] and single[0] == x[0]


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
def test_compiled_complex_prod_carries_an_odd_factor_out_unmultiplied(backend):
    """A product of three factors multiplied the third by the padding 1 + 0j, which turned
    an infinite factor's other part into NaN before it was used: prod([1j, 0.5 - 1j,
    inf + 2.5j]) was nan + nan j for NumPy's inf + inf j (found by fuzzing eager against
    jit)."""
    if backend.startswith("cuda") and emulator.compiler() is None:
        pytest.skip("the emulator needs a C++ compiler")
    x = np.array([1j, 0.5 - 1j, np.inf + 2.5j], np.complex64)
    with np.errstate(invalid="ignore"):
        expected = np.prod(x)
    with jit_backend(backend):
        got = np.asarray(fg.jit(fnp.prod)(x))
    np.testing.assert_array_equal(got, expected)  # (NaNs in the same parts count as equal)


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
@pytest.mark.parametrize("method, combine", [("max", np.maximum), ("min", np.minimum)])
def test_compiled_complex_scatter_max_and_min_keep_numpys_order(backend, method, combine):
    """Each update is compared with its element in NumPy's order of complex numbers (real
    parts, then imaginary parts; a NaN part wins), in turn: the compiler had no rule for
    complex scatter_max/min (found by fuzzing)."""
    if backend.startswith("cuda") and emulator.compiler() is None:
        pytest.skip("the emulator needs a C++ compiler")
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(3, 7)) + 1j * rng.normal(size=(3, 7))).astype(np.complex64)
    u = (rng.normal(size=(3, 6)) + 1j * rng.normal(size=(3, 6))).astype(np.complex64)
    x[0, :4] = [1 + 2j, 1 + 2j, complex(np.nan, 1), 2 - 1j]
    u[0, :6] = [1 + 3j, 1 + 1j, 5 + 0j, complex(2, np.nan), 0j, 7j]
    u[1, :2] = x[1, :2]  # ties
    index = np.array([0, 1, 2, 3, 9, 3], np.int32)  # a place outside, and a repeat
    expected = []
    for row_x, row_u in zip(x, u):
        row = row_x.copy()
        combine.at(row, index[index < 7], row_u[index < 7])
        expected.append(row)

    def scatter(x, u):
        return getattr(x.at[index], method)(u)

    with jit_backend(backend):
        got = np.asarray(fg.jit(fg.vmap(scatter))(x, u))
    eager = np.asarray(fg.vmap(scatter)(fnp.asarray(x), u))
    np.testing.assert_array_equal(got, np.array(expected))
    np.testing.assert_array_equal(eager, np.array(expected))


@pytest.mark.parametrize("backend", COMPILED_BACKENDS)
def test_compiled_gathers_of_complex_values_fill_each_part_with_its_own_part(backend):
    """A gather's fill value is a parameter the complex lowering gave both parts whole: 2.5
    filled as 2.5 + 2.5j, the default NaN as nan + nan j, and 1j as 0j (found by fuzzing)."""
    if backend.startswith("cuda") and emulator.compiler() is None:
        pytest.skip("the emulator needs a C++ compiler")
    x = np.array([1 + 2j, 3 - 4j], np.complex64)
    index = np.array([1, 5, -7, 0], np.int32)

    def gathers(x, index):
        return (
            x.at[index].get(mode="fill", fill_value=2.5),
            x.at[index].get(mode="fill"),
            fnp.take(x, index, mode="fill", fill_value=-1j),
        )

    with jit_backend(backend):
        results = [np.asarray(r) for r in fg.jit(gathers)(x, index)]
    inside = x[[1, 0, 0, 0]]
    for got, fill in zip(results, [2.5, complex(np.nan, 0), -1j]):
        np.testing.assert_array_equal(got, np.where([True, False, False, True], inside, fill))


@pytest.mark.parametrize("backend", ["eager", *COMPILED_BACKENDS])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_iota_counts_in_the_real_part(backend, dtype):
    """iota of a complex dtype is the count plus 0j (it was refused as "not numeric"), and so
    are funcgrad.numpy.arange's and broadcasted_iota's; bool is still refused, by name."""

    def make():
        return (
            lax.iota(dtype, 5),
            lax.broadcasted_iota(dtype, (2, 3), 1) * (1 - 2j),
            fnp.arange(1, 3, 0.5, dtype=dtype),
        )

    if backend == "eager":
        got = make()
    else:
        with jit_backend(backend):
            got = fg.jit(make)()
    wanted = (
        np.arange(5, dtype=dtype),
        np.broadcast_to(np.arange(3, dtype=dtype), (2, 3)) * dtype(1 - 2j),
        np.arange(1, 3, 0.5, dtype=dtype),
    )
    for g, w in zip(got, wanted):
        assert np.asarray(g).dtype == dtype
        np.testing.assert_array_equal(np.asarray(g), w)
    with pytest.raises(TypeError, match="integer, floating or complex type, got bool"):
        lax.iota(np.bool_, 3)


def test_log1p_of_small_complex_numbers_keeps_their_digits():
    """The reference (eager, NumPy backend) took log|1 + z| as NumPy does, to its absolute
    accuracy only: log1p(1e-20j) had real part 0 for 5e-41, log1p(1e-10 + 1e-10j) 8e-8 off.
    Against mpmath, as the compiled programs already were."""
    import mpmath as mp

    z = np.array([1e-10 + 1e-10j, 1e-20j, 1e-8 - 3e-9j, -1e-12 + 1e-3j, 0.3 - 0.2j])
    want = np.array([complex(mp.log1p(mp.mpc(v))) for v in z])
    with jit_backend("numpy"):
        for got in (fnp.log1p(z), fg.jit(fnp.log1p)(z)):
            np.testing.assert_allclose(np.asarray(got).real, want.real, rtol=1e-15)
            np.testing.assert_allclose(np.asarray(got).imag, want.imag, rtol=1e-15)
