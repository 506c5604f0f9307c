"""Compiled Fourier transforms (radix passes, `lax.fft_passes`, and Bluestein's convolution
through them for lengths with a prime factor above 13) against NumPy's in float64.

Tolerances grow with the length: a transform by log n passes errs by a few ulp times log n
relative to the spectrum's largest magnitude; Bluestein's two transforms of about 2n points
stay within the same bound."""

from __future__ import annotations

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler import schedule
from funcgrad.compiler.complex_lowering import lower_complex
from funcgrad.compiler.parallel import value_at
from funcgrad.ir import eval_jaxpr
from funcgrad.test_util import check_grads
from funcgrad.tools.recipes import CUDA_BACKENDS

# Powers of 2, 3 and 5, mixed radices, lengths 1 and 2, primes that radix passes take (7, 11,
# 13) and lengths with a larger prime factor, transformed by Bluestein's convolution (17, 34,
# 97), and lengths whose real transforms go through half the length (even) or not (odd).
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 16, 17, 25, 27, 30, 32, 34, 60, 64, 97, 120, 128]
LONG = [256, 243, 625, 1000, 1024, 4096, 6 * 97, 65536]
# Bluestein's lengths: a large prime, twice one (the real transforms halve to it), a cube.
LONG_BLUESTEIN = [10007, 2 * 4099, 17**3]
# The backends that render the passes' kernels (the CUDA renderer's through its emulator).
RENDERING_BACKENDS = ["llvm"] + [pytest.param(b, marks=pytest.mark.cuda) for b in CUDA_BACKENDS]


def tolerance(n: int, dtype) -> float:
    """Error bound relative to the largest magnitude: 8 ulp per pass, at least 16 ulp."""
    return float(np.finfo(dtype).eps) * 8 * max(2.0, np.log2(max(n, 2)))


def assert_close(got, wanted, n: int, dtype) -> None:
    got, wanted = np.asarray(got), np.asarray(wanted)
    assert got.shape == wanted.shape, (got.shape, wanted.shape)
    scale = max(np.abs(wanted).max(), np.finfo(np.float64).tiny)
    error = np.abs(got.astype(wanted.dtype) - wanted).max() / scale
    assert error <= tolerance(n, dtype), (n, dtype, error / np.finfo(dtype).eps)


def complex_values(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def check_transforms(n: int, lead: tuple, real_dtype) -> None:
    """fft, ifft, rfft and irfft of `lead` rows of n points, compiled, against NumPy's."""
    rng = np.random.default_rng(n)
    complex_dtype = np.result_type(real_dtype, np.complex64)
    z = complex_values(rng, lead + (n,), complex_dtype)
    x = rng.standard_normal(lead + (n,)).astype(real_dtype)
    spectrum = complex_values(rng, lead + (n // 2 + 1,), complex_dtype)
    wide = z.astype(np.complex128)
    assert_close(fg.jit(fnp.fft.fft)(z), np.fft.fft(wide), n, real_dtype)
    assert_close(fg.jit(fnp.fft.ifft)(z), np.fft.ifft(wide), n, real_dtype)
    assert_close(fg.jit(fnp.fft.rfft)(x), np.fft.rfft(x.astype(np.float64)), n, real_dtype)
    got = fg.jit(lambda s: fnp.fft.irfft(s, n))(spectrum)
    assert_close(got, np.fft.irfft(spectrum.astype(np.complex128), n), n, real_dtype)
    assert np.asarray(got).dtype == real_dtype
    assert np.asarray(fg.jit(fnp.fft.rfft)(x)).dtype == complex_dtype


@pytest.mark.parametrize("real_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", LENGTHS)
def test_transforms_of_many_lengths_match_numpy(n, real_dtype):
    check_transforms(n, (3,), real_dtype)


@pytest.mark.parametrize("n", LONG)
def test_long_transforms_match_numpy(n):
    check_transforms(n, (), np.float32 if n > 4096 else np.float64)


@pytest.mark.parametrize("real_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", LONG_BLUESTEIN)
def test_long_bluestein_transforms_match_numpy(n, real_dtype):
    """In float64 these pin the chirp exp(-pi i t^2 / n) to its angle taken from t^2 mod 2n:
    pi t^2 / n rounded as a float errs by about eps n radians near t = n (1.5e4 ulp at 10007)."""
    check_transforms(n, (), real_dtype)


def is_padded_length(m: int) -> bool:
    """8 times a number with no prime factor above 7."""
    if m % 8:
        return False
    for p in (2, 3, 5, 7):
        while m % p == 0:
            m //= p
    return m == 1


@pytest.mark.parametrize("n", [17, 97, 2 * 4099, 10007])
def test_a_length_with_a_large_prime_factor_is_a_convolution_by_radix_passes(n):
    """No DFT matrix (n^2 numbers, a product of O(n^2) time): a transform forward and one back
    of the shortest length m >= 2n - 1 that is 8 times a 7-smooth number, with O(m)
    constants."""
    z = complex_values(np.random.default_rng(n), (n,), np.complex64)
    lowered = lower_complex(fg.make_jaxpr(fnp.fft.fft)(z))
    names = {eqn.primitive.name for eqn in lowered.jaxpr.eqns}
    assert "dot_general" not in names and "fft" not in names, names
    passes = [e for e in lowered.jaxpr.eqns if e.primitive.name == "fft_radix_pass"]
    (m,) = {e.invars[0].aval.shape[1] for e in passes}
    assert m >= 2 * n - 1 and is_padded_length(m), m
    assert not any(is_padded_length(k) for k in range(2 * n - 1, m)), m
    assert {e.params["inverse"] for e in passes} == {False, True}
    assert sum(np.size(c) for c in lowered.consts) <= 16 * m


@st.composite
def transform_cases(draw):
    """A transform, a length (small ones, large primes, products with one), rows, a dtype."""
    n = draw(st.one_of(st.integers(1, 40), st.sampled_from([97, 127, 1009, 2 * 4099, 17**3])))
    kind = draw(st.sampled_from(["fft", "ifft", "rfft", "irfft"]))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    return kind, n, lead, draw(st.sampled_from([np.float32, np.float64]))


@given(case=transform_cases(), backend=st.sampled_from(["numpy", "llvm"]))
def test_transforms_of_any_length_match_numpy(case, backend):
    kind, n, lead, real_dtype = case
    rng = np.random.default_rng(n)
    complex_dtype = np.result_type(real_dtype, np.complex64)
    if kind == "rfft":
        x = rng.standard_normal(lead + (n,)).astype(real_dtype)
    else:
        x = complex_values(rng, lead + ((n // 2 + 1) if kind == "irfft" else n,), complex_dtype)
    wide = x.astype(np.float64 if kind == "rfft" else np.complex128)
    if kind == "irfft":
        ours, wanted = (lambda v: fnp.fft.irfft(v, n)), np.fft.irfft(wide, n)
    else:
        ours, wanted = getattr(fnp.fft, kind), getattr(np.fft, kind)(wide)
    with jit_backend(backend):
        got = fg.jit(ours)(x)
    assert_close(got, wanted, n, real_dtype)


def test_bluestein_along_a_middle_axis_and_over_many_axes():
    """The convolution runs down (G, n, B) columns like the passes, and fftn combines it with
    radix passes along the other axes."""
    rng = np.random.default_rng(4)
    z = complex_values(rng, (3, 37, 5), np.complex128)
    x = rng.standard_normal((6, 19, 34))
    assert_close(fg.jit(lambda v: fnp.fft.fft(v, axis=1))(z), np.fft.fft(z, axis=1), 37, np.float64)
    assert_close(fg.jit(fnp.fft.ifftn)(z), np.fft.ifftn(z), 555, np.float64)
    assert_close(fg.jit(fnp.fft.rfftn)(x), np.fft.rfftn(x), 3876, np.float64)
    spectrum = np.fft.rfftn(x)
    got = fg.jit(lambda s: fnp.fft.irfftn(s, x.shape))(spectrum)
    assert_close(got, x, 3876, np.float64)


def test_derivatives_at_a_prime_length_match_finite_differences():
    """fft's transposes (fft, rfft, irfft) compiled at a Bluestein length."""
    rng = np.random.default_rng(6)
    n = 101
    x = rng.standard_normal((2, n))
    z = x + 1j * rng.standard_normal((2, n))
    weights = rng.standard_normal(n // 2 + 1)
    check_grads(fg.jit(fnp.fft.fft), (z,), order=1)
    check_grads(fg.jit(lambda v: fnp.fft.irfft(fnp.fft.rfft(v) * weights, n)), (x,), order=1)
    lanes = fg.jit(fg.vmap(fnp.fft.ifft))(z)
    assert_close(lanes, np.stack([np.fft.ifft(row) for row in z]), n, np.float64)


@pytest.mark.parametrize("lead", [(), (1,), (2, 3), (16,)])
def test_batches_of_transforms_match_numpy(lead):
    for n in (8, 12, 64, 250):
        check_transforms(n, lead, np.float32)


@given(
    n=st.sampled_from([2, 3, 4, 6, 8, 10, 16, 24, 45, 64]),
    before=st.integers(1, 3),
    after=st.sampled_from([1, 2, 5, 16, 17]),
    inverse=st.booleans(),
    single=st.booleans(),
)
def test_a_middle_axis_is_transformed_in_place_of_its_columns(n, before, after, inverse, single):
    """An axis with columns after it: the passes run down the columns (no transposes)."""
    dtype = np.complex64 if single else np.complex128
    z = complex_values(np.random.default_rng(n), (before, n, after), dtype)
    ours, reference = (fnp.fft.ifft, np.fft.ifft) if inverse else (fnp.fft.fft, np.fft.fft)
    got = fg.jit(lambda v: ours(v, axis=1))(z)
    wanted = reference(z.astype(np.complex128), axis=1)
    assert_close(got, wanted, n, np.float32 if single else np.float64)


def test_many_axes_match_numpy():
    rng = np.random.default_rng(0)
    z = complex_values(rng, (2, 12, 16), np.complex128)
    x = rng.standard_normal((2, 12, 16))
    wide = z.astype(np.complex128)
    assert_close(fg.jit(fnp.fft.fftn)(z), np.fft.fftn(wide), 384, np.float64)
    assert_close(fg.jit(fnp.fft.ifft2)(z), np.fft.ifft2(wide), 192, np.float64)
    assert_close(fg.jit(fnp.fft.rfftn)(x), np.fft.rfftn(x), 384, np.float64)
    spectrum = np.fft.rfft2(x)
    got = fg.jit(lambda s: fnp.fft.irfft2(s, (12, 16)))(spectrum)
    assert_close(got, np.fft.irfft2(spectrum, (12, 16)), 192, np.float64)


@pytest.mark.parametrize("backend", RENDERING_BACKENDS)
def test_each_compiled_backend_runs_the_passes(backend):
    """Every radix (8, 4, 2, 3, 5, 7), a pass over columns and rfft/irfft's packing passes on
    each backend that renders kernels."""
    rng = np.random.default_rng(1)
    z = complex_values(rng, (2, 840, 3), np.complex64)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    with jit_backend(backend):
        got = fg.jit(lambda v: (fnp.fft.fft(v, axis=1), fnp.fft.ifft(v[..., 0])))(z)
        real = fg.jit(lambda v: (fnp.fft.rfft(v), fnp.fft.irfft(fnp.fft.rfft(v), 96)))(x)
    assert_close(got[0], np.fft.fft(z.astype(np.complex128), axis=1), 840, np.float32)
    assert_close(got[1], np.fft.ifft(z[..., 0].astype(np.complex128)), 840, np.float32)
    assert_close(real[0], np.fft.rfft(x.astype(np.float64)), 96, np.float32)
    assert_close(real[1], x, 96, np.float32)


@pytest.mark.parametrize("backend", RENDERING_BACKENDS)
def test_each_compiled_backend_runs_bluestein_s_convolution(backend):
    """A prime length down columns (the chirps' products fused into the passes) and a real
    transform that halves to one (19 = 38 / 2, packed and unpacked around the convolution)."""
    rng = np.random.default_rng(8)
    z = complex_values(rng, (2, 37, 3), np.complex64)
    x = rng.standard_normal((3, 38)).astype(np.float32)
    with jit_backend(backend):
        got = fg.jit(lambda v: fnp.fft.ifft(v, axis=1))(z)
        real = fg.jit(lambda v: (fnp.fft.rfft(v), fnp.fft.irfft(fnp.fft.rfft(v), 38)))(x)
    assert_close(got, np.fft.ifft(z.astype(np.complex128), axis=1), 37, np.float32)
    assert_close(real[0], np.fft.rfft(x.astype(np.float64)), 38, np.float32)
    assert_close(real[1], x, 38, np.float32)


def test_the_passes_reference_implementations_compose_to_numpys_transforms():
    """The lowered program (radix, packing and unpacking passes, and Bluestein's convolution
    for 37 and 38 = 2 * 19) run by the primitives' own NumPy implementations equals NumPy's
    FFT: the reference the compiled kernels follow."""
    rng = np.random.default_rng(2)
    z = complex_values(rng, (2, 60), np.complex128)
    x = rng.standard_normal((2, 64))
    prime = complex_values(rng, (2, 37), np.complex128)
    halving = rng.standard_normal((2, 38))
    cases = [
        (fnp.fft.fft, z, np.fft.fft(z)),
        (fnp.fft.ifft, z, np.fft.ifft(z)),
        (fnp.fft.rfft, x, np.fft.rfft(x)),
        (lambda s: fnp.fft.irfft(s, 64), np.fft.rfft(x), x),
        (fnp.fft.fft, prime, np.fft.fft(prime)),
        (fnp.fft.rfft, halving, np.fft.rfft(halving)),
        (lambda s: fnp.fft.irfft(s, 38), np.fft.rfft(halving), halving),
    ]
    for fun, value, wanted in cases:
        closed = fg.make_jaxpr(fun)(value)
        lowered = lower_complex(closed)
        names = {eqn.primitive.name for eqn in lowered.jaxpr.eqns}
        assert "fft" not in names and "fft_radix_pass" in names, names
        argument = value
        if value.dtype.kind == "c":
            argument = np.ascontiguousarray(value).view(np.float64).reshape(value.shape + (2,))
        (out,) = eval_jaxpr(lowered.jaxpr, lowered.consts, fnp.asarray(argument))
        out = np.asarray(out)
        if wanted.dtype.kind == "c":
            out = out[..., 0] + 1j * out[..., 1]
        np.testing.assert_allclose(out, wanted, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", RENDERING_BACKENDS)
def test_a_nan_at_the_first_point_stays_in_its_part(backend):
    """The first point is never multiplied by a twiddle factor (exactly 1 there), so a NaN in
    its real part leaves every imaginary part finite, as in NumPy (the DFT matrices' products
    made every output nan + nan j)."""
    z = np.arange(1.0, 17.0) + 1j * np.arange(16.0, 0.0, -1.0)
    z[0] = complex(np.nan, 2.0)
    with np.errstate(invalid="ignore"):
        wanted = np.fft.fft(z)
    with jit_backend(backend):
        got = np.asarray(fg.jit(fnp.fft.fft)(z))
    assert np.isnan(got.real).all() and np.isnan(wanted.real).all()
    np.testing.assert_allclose(got.imag, wanted.imag, rtol=1e-12, atol=1e-12)


def one_bad_point(n: int, kinds=(np.nan, np.inf, complex(0, np.inf)), most=64) -> np.ndarray:
    """Rows of the points 0, 1, ..., n - 1, each row with one of them NaN or infinite (each
    kind at each position; at most `most` positions, spread over the row)."""
    rows = []
    for position in np.unique(np.linspace(0, n - 1, min(n, most)).astype(int)):
        for bad in kinds:
            z = np.arange(n, dtype=np.complex128)
            z[position] = bad
            rows.append(z)
    return np.stack(rows)


def special_parts(z) -> np.ndarray:
    z = np.asarray(z)
    return np.stack([np.isnan(z.real), np.isinf(z.real), np.isnan(z.imag), np.isinf(z.imag)])


# Lengths whose compiled transforms make NaN or infinite exactly the parts NumPy's do: powers
# of two up to 16 and products of two odd primes up to 13, whose one or two passes have the
# radices of NumPy's in its order (ours multiply by twiddle factors before a butterfly and
# NumPy's after one, the same place when there are two passes; both leave out products with
# 1, -1 and ±i), and primes NumPy too transforms by Bluestein's method (every part of every
# output NaN). Elsewhere the parts differ (docs/differences.md).
SAME_SPECIALS = [8, 16, 15, 21, 89, 101]


@pytest.mark.parametrize("backend", RENDERING_BACKENDS)
def test_nan_and_inf_reach_the_parts_numpy_s_transforms_reach(backend):
    cases = [one_bad_point(n) for n in SAME_SPECIALS]
    with jit_backend(backend):
        got = fg.jit(lambda zs: [(fnp.fft.fft(z), fnp.fft.ifft(z)) for z in zs])(cases)
    with np.errstate(invalid="ignore"):
        wanted = [(np.fft.fft(z), np.fft.ifft(z)) for z in cases]
    for n, transforms, references in zip(SAME_SPECIALS, got, wanted):
        for g, w in zip(transforms, references):
            assert np.array_equal(special_parts(g), special_parts(w)), n


def test_a_nan_or_infinity_makes_the_outputs_numpy_s_makes_non_finite():
    """At every length, by radix passes, halved real transforms or Bluestein's convolution:
    the outputs with a NaN or infinite part are those of NumPy's transforms (which parts,
    real or imaginary, and NaN or infinite, may differ: docs/differences.md)."""
    for n in [3, 6, 17, 34, 45, 64, 10007]:
        z = one_bad_point(n, (np.nan, np.inf, -np.inf, complex(0, np.inf)), 16)
        x = one_bad_point(n, (np.nan, np.inf, -np.inf), 16).real
        got = fg.jit(lambda z, x: (fnp.fft.fft(z), fnp.fft.ifft(z), fnp.fft.rfft(x)))(z, x)
        with np.errstate(invalid="ignore"):
            wanted = np.fft.fft(z), np.fft.ifft(z), np.fft.rfft(x)
        for g, w in zip(got, wanted):
            assert np.array_equal(np.isfinite(np.asarray(g)), np.isfinite(w)), n


def accesses_out_of_bounds(fun, *args) -> list:
    """Every load and store of the compiled kernels of `fun` whose offset leaves its buffer at
    some iteration of the loops around it (selects compute both sides, so a load in a branch
    not taken still reads memory)."""
    executable = fg.jit(fun).lower(*args).compile().executable
    found = []

    def check(buffer, offset, at) -> None:
        offsets = np.asarray(value_at(offset, at))
        if offsets.size and (offsets.min() < 0 or offsets.max() >= buffer.size):
            found.append((buffer, int(offsets.min()), int(offsets.max())))

    def visit(body: list, at: dict) -> None:
        for statement in body:
            if isinstance(statement, K.Loop):
                values = np.arange(statement.start, statement.stop)
                inner = {i: v[..., None] for i, v in at.items()}
                visit(statement.body, {**inner, statement.index: values})
                continue
            if isinstance(statement, K.Store):
                check(statement.buffer, statement.offset, at)
            roots = [statement.value] + ([statement.offset] if hasattr(statement, "offset") else [])
            for root in roots:
                for node in K.nodes(root):
                    if isinstance(node, K.Load):
                        check(node.buffer, node.offset, at)

    for step in schedule.all_steps(executable.program):
        if isinstance(step, schedule.KernelStep):
            visit(step.kernel.body, {})
    return found


def test_every_access_of_the_passes_stays_in_its_buffer():
    z = complex_values(np.random.default_rng(3), (3, 48, 2), np.complex64)
    x = np.ones((3, 40), np.float32)
    assert accesses_out_of_bounds(lambda v: fnp.fft.fft(v, axis=1), z) == []
    assert accesses_out_of_bounds(lambda v: fnp.fft.irfft(fnp.fft.rfft(v), 40), x) == []
    assert accesses_out_of_bounds(lambda v: fnp.fft.irfft(fnp.fft.rfft(v), 38), x[:, :38]) == []


@pytest.mark.parametrize("shape", [(0, 8), (0, 17), (2, 0, 12)])
def test_transforms_of_an_empty_batch_write_nothing(shape):
    """A radix pass over no rows left its empty loop out and ran its body once: it wrote
    past the end of its empty buffers (the heap corrupted, the process crashed later)."""
    z = np.zeros(shape, np.complex64)
    x = np.zeros(shape, np.float32)
    assert accesses_out_of_bounds(fnp.fft.fft, z) == []
    assert accesses_out_of_bounds(lambda v: fnp.fft.irfft(fnp.fft.rfft(v), shape[-1]), x) == []
    assert np.asarray(fg.jit(fnp.fft.ifft)(z)).shape == shape


def test_concatenate_keeps_each_pieces_loads_in_bounds():
    """A concatenate computes every piece at every position and selects one: a later piece's
    index was only clamped from above, so before its start it read before its buffer (the
    first rfft of length 8 read Z[-4], and crashed)."""
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)

    def mirrored(v):
        first = v[:, :1]
        return fnp.concatenate([first, v[:, :0:-1] * 2, first], axis=1)

    assert accesses_out_of_bounds(mirrored, x) == []
    np.testing.assert_array_equal(
        fg.jit(mirrored)(x), np.concatenate([x[:, :1], x[:, :0:-1] * 2, x[:, :1]], 1)
    )
