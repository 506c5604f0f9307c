"""The CUDA backend without a GPU: every program here is rendered to CUDA C, compiled by NVRTC
(as a GPU would compile it) and run by the host emulator, and its results are compared with
the NumPy reference backend. The generic rule checks (`tests/test_rules.py`, jit[cuda_emulator])
and the random-program test run the same path for every primitive."""

from __future__ import annotations

import re
import warnings
from functools import partial

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.backends.cuda import emulator, executable, nvrtc, solver
from funcgrad.backends.cuda.render import memory_type, module_source, render_kernel
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler import parallel
from funcgrad.compiler.lapack import FortranCall
from funcgrad.compiler.parallel import statements_in, value_at
from funcgrad.compiler.schedule import KernelStep, all_steps
from funcgrad.devices import gpu_available
from funcgrad.errors import OutOfDeviceMemoryError
from funcgrad.lax import linalg_decomp
from funcgrad.tools.recipes import CUDA_BACKENDS

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler"),
]


def run_on(backend: str, fun, *args):
    with jit_backend(backend):
        return [np.asarray(x) for x in fg.tree_util.tree_leaves(fg.jit(fun)(*args))]


def assert_same_as_reference(fun, *args, exact: bool = True, rtol: float = 1e-6):
    """The emulator (and the GPU, where there is one) against the NumPy backend. The emulator
    calls the host's libm as the reference does, so `exact` holds there; a GPU's own math
    library may round transcendental functions differently, within a few ulps."""
    expected = run_on("numpy", fun, *args)
    for backend in CUDA_BACKENDS:
        got = run_on(backend, fun, *args)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            wide = np.complex128 if g.dtype.kind == "c" else np.float64
            if exact and (backend == "cuda_emulator" or g.dtype.kind in "biu"):
                np.testing.assert_array_equal(g.astype(wide), e.astype(wide))
            else:
                ulps = 4 * float(dtypes.finfo(g.dtype).eps) if exact else rtol
                np.testing.assert_allclose(g.astype(wide), e.astype(wide), rtol=ulps, atol=ulps)


def compiled_text(fun, *args) -> str:
    """The module's text, less the replay's forms of the kernels writing results in place
    (`render.addressed`: the same statements)."""
    with jit_backend("cuda_emulator"):
        text = fg.jit(fun).lower(*args).compile().as_text()
    return "\n\n".join(part for part in text.split("\n\n") if "_addressed(" not in part)


def test_nvrtc_is_installed_where_the_tests_run():
    # The test extra brings NVRTC on Linux x86-64, so CI compiles every generated module.
    import platform

    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the NVRTC wheel is for Linux x86-64")
    assert nvrtc.library() is not None
    assert nvrtc.version() >= (12, 0)


def test_the_compiled_text_is_cuda_c_with_one_kernel_per_fused_step():
    x = np.ones((5, 7), np.float32)
    text = compiled_text(lambda x: (fnp.tanh(x * 2.0).sum(axis=1), fnp.exp(x).max()), x)
    assert text.count("__global__ void") == 2
    assert "tanhf(" in text and "expf(" in text
    # The row reduction runs its rows on the grid; the full reduction on one block.
    assert "blockIdx.x * blockDim.x + threadIdx.x" in text
    assert "__syncthreads();" in text
    cumulative = compiled_text(lambda x: fnp.cumsum(x.reshape(-1)), x)
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" in cumulative  # one thread
    if nvrtc.library() is not None:
        ptx = nvrtc.compile_ptx(text)
        assert ".entry k0_" in ptx and ".entry k1_" in ptx


def test_ptx_is_kept_in_the_compilation_cache_per_architecture(tmp_path, monkeypatch):
    if nvrtc.library() is None:
        pytest.skip("NVRTC is not installed")
    compiled = []
    real = nvrtc.compile_ptx
    monkeypatch.setattr(nvrtc, "compile_ptx", lambda *a: compiled.append(a[1:]) or real(*a))
    monkeypatch.setattr(nvrtc, "_compiled", {})
    previous = fg.config.compilation_cache_dir
    fg.config.update("compilation_cache_dir", str(tmp_path))
    try:
        source = compiled_text(lambda x: fnp.exp(x).sum(), np.ones(100, np.float32))
        first = nvrtc.ptx(source)
        nvrtc._compiled.clear()  # as a new process would start
        assert nvrtc.ptx(source) == first  # from disk
        assert ".entry k0_" in nvrtc.ptx(source, "compute_80")  # another architecture
        assert compiled == [("compute_90",), ("compute_80",)]
        (entry,) = [p for p in (tmp_path / "cuda").iterdir() if p.stat().st_size > 0][:1]
        entry.write_bytes(entry.read_bytes()[:-10])  # cut short: compiled again, not loaded
        nvrtc._compiled.clear()
        nvrtc.ptx(source)
        nvrtc.ptx(source, "compute_80")
        assert len(compiled) == 3
    finally:
        fg.config.update("compilation_cache_dir", previous)


def test_an_nvrtc_error_shows_the_generated_line_and_its_kernel():
    if nvrtc.library() is None:
        pytest.skip("NVRTC is not installed")
    source = (
        'extern "C" __global__ void k0_exp(const float* in0, float* out1) {\n'
        "  out1[0] = expf(in0[0]);\n"
        "}\n"
        'extern "C" __global__ void k1_add(const float* in0, float* out2) {\n'
        "  out2[0] = in0[0] + undefined_name;\n"
        "}\n"
    )
    with pytest.raises(nvrtc.NvrtcError) as error:
        nvrtc.compile_ptx(source)
    message = str(error.value)
    assert "undefined_name" in message
    assert "line 5: out2[0] = in0[0] + undefined_name;" in message
    assert "in kernel k1_add" in message


INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _edge_integers(dtype, size: int, rng) -> np.ndarray:
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, 0, 1, info.max // 2, info.min // 2], dtype=dtype)
    if info.min < 0:
        edges = np.concatenate([edges, np.array([-1, -2], dtype)])
    random = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
    return np.concatenate([edges, random])


@settings(deadline=None, max_examples=8)
@given(st.sampled_from(INTS), st.integers(0, 2**31 - 1))
def test_integer_arithmetic_wraps_and_divides_as_the_reference(dtype, seed):
    rng = np.random.default_rng(seed)
    a = _edge_integers(dtype, 32, rng)
    b = np.where(rng.random(len(a)) < 0.2, 0, rng.permutation(a)).astype(dtype)  # x / 0 too
    bits = np.iinfo(dtype).bits
    amounts = np.resize(np.array([0, 1, bits - 1, bits, bits + 3], dtype), len(a))

    def f(a, b, amounts):
        return (
            a + b,
            a - b,
            a * b,
            lax.div(a, b),
            lax.rem(a, b),
            lax.max(a, b),
            lax.min(a, b),
            -a,
            lax.abs(a),
            lax.sign(a),
            lax.bitwise_not(a),
            lax.population_count(a),
            lax.shift_left(a, amounts),
            lax.shift_right_logical(a, amounts),
            lax.shift_right_arithmetic(a, amounts),
            a & b,
            a | b,
            a ^ b,
        )

    assert_same_as_reference(f, a, b, amounts)


FLOAT_EDGES = np.array(
    [
        np.nan,
        np.inf,
        -np.inf,
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        1e30,
        -1e30,
        3e9,
        -3e9,
        127.5,
        128.0,
        -128.5,
        255.5,
        65504.0,
        65519.0,
        65520.0,
        6e-8,
        3e-8,
        1e-40,
        -1e-45,
        1.0 / 3,
    ]
)


@pytest.mark.parametrize("source", [np.float32, np.float64, dtypes.float16, dtypes.bfloat16])
def test_float_conversions_saturate_and_round_as_the_reference(source):
    with np.errstate(over="ignore"):  # (float16 holds the largest edges as infinities)
        x = FLOAT_EDGES.astype(source)

    def f(x):
        ints = [lax.convert_element_type(x, t) for t in INTS + [np.bool_]]
        halves = [lax.convert_element_type(x, t) for t in (dtypes.float16, dtypes.bfloat16)]
        rounded = [lax.round(x), fnp.floor(x), fnp.ceil(x), fnp.rint(x)]
        return ints + halves + rounded

    assert_same_as_reference(f, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_and_min_propagate_nan_and_sign_keeps_signed_zeros(dtype):
    x = np.array([np.nan, 1.0, -0.0, 0.0, np.inf, -3.0, 2.0, -0.0, np.nan], dtype)
    y = np.array([1.0, np.nan, 5.0, -0.0, np.nan, -3.0, -np.inf, 0.0, np.nan], dtype)

    def f(x, y):
        # The sign of a zero shows in one divided by it. (The sign of the maximum of two zeros
        # is the compiled backends' -0 < +0, which NumPy's maximum does not follow.)
        return lax.max(x, y), lax.min(x, y), lax.sign(x), 1.0 / lax.sign(x), x.max(), x.min()

    assert_same_as_reference(f, x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lgamma_of_infinities_zeros_and_poles_is_the_references(dtype):
    """C's lgamma gives +inf at -inf; the reference, after SciPy's gammaln, gives -inf."""
    x = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 1.0, 2.0, -1.0, -7.0], dtype)
    assert_same_as_reference(lax.lgamma, x)


def test_float_erf_erfc_and_lgamma_are_computed_in_double_and_rounded_once():
    """CUDA's erfcf, erff and lgammaf are several ulp off (erfc 3.2 ulp at 6.11, lgamma 3 at
    73.8, on an H200), where the host's compiled ones are within an ulp: a float's are CUDA's
    double functions, rounded once (and float erf_inv, polynomials in a double logarithm,
    calls none of them: a GPU keeps it, where a CPU computes it in float arithmetic)."""
    x = np.linspace(0.01, 9.0, 64, dtype=np.float32)
    for fun in (lax.erf, lax.erfc, lax.lgamma):
        source = compiled_text(fun, x)
        assert not re.search(r"\b(erff|erfcf|lgammaf)\(", source), fun
        assert re.search(r"\(float\)(erf|erfc|lgamma)\(\(double\)", source), fun
    erf_inv_source = compiled_text(lax.erf_inv, x / 9)
    assert not re.search(r"\b(erff|erfcf|logf)\(", erf_inv_source)
    assert re.search(r"\blog\(", erf_inv_source)  # (a CPU's is float32 arithmetic)
    assert_same_as_reference(
        lambda x: (lax.erf(x), lax.erfc(x), lax.lgamma(x), lax.erf_inv(x / 9)), x
    )


def test_the_negation_of_a_negative_constant_compiles():
    # -x rendered beside a literal -30.0 read `--30.0`, a decrement that NVRTC refused.
    def f(x):
        minus_thirty = lax.full_like(x, -30.0)
        return lax.exp(lax.neg(minus_thirty)) + x, lax.logistic(minus_thirty) + x

    assert_same_as_reference(f, np.ones(3))


def test_kernels_never_get_a_buffer_of_no_elements(monkeypatch):
    """A pad loads its operand at a clamped index, discarding the value where the place is
    padding, so it loads element 0 of an empty operand (an empty axis transformed at a given
    length); a GPU gives an empty array a null pointer, and the load was an illegal address.
    Every buffer a kernel gets has memory for an element: the device's spare where empty."""
    sizes = []
    launch = executable.Emulator.launch

    def recording(self, module, kernel, buffers):
        sizes.extend(b.nbytes for b in buffers)
        launch(self, module, kernel, buffers)

    monkeypatch.setattr(executable.Emulator, "launch", recording)
    empty = np.zeros((3, 0))
    with jit_backend("cuda_emulator"):
        for f in (
            lambda x: fnp.fft.ifft(x, n=3, axis=1),
            lambda x: fnp.pad(x, ((0, 0), (1, 2)), constant_values=2.0),
        ):
            expected = f(empty)  # (eager, on the host)
            for _ in range(2):  # (the second call replays the first's launches)
                np.testing.assert_array_equal(fg.jit(f)(empty), expected)
    assert sizes and min(sizes) > 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, dtypes.bfloat16])
def test_float_negation_flips_a_nans_sign_bit_in_the_ptx_too(dtype):
    """IEEE negation flips the sign bit of every value, a NaN's too, as the host's does:
    PTX's neg gives an unspecified NaN for a NaN, and on an H200 arctan(inf + nan j)'s
    imaginary part, a zero signed from a negated NaN, came out -0 where NumPy's is +0. So
    the PTX negates with a bit operation, and no neg instruction remains."""
    x = np.array([np.nan, -np.nan, 0.0, -0.0, 1.5, -np.inf], dtype)
    with jit_backend("cuda_emulator"):
        negated = np.asarray(fg.jit(lax.neg)(x))
    assert (np.signbit(negated) != np.signbit(x)).all() and np.isnan(negated[:2]).all()
    source = compiled_text(lambda x: (lax.neg(x), fnp.arctan(x.astype(fnp.complex64))), x)
    if nvrtc.library() is not None:
        assert "neg.f" not in nvrtc.compile_ptx(source, arch="compute_90")


def test_float_max_and_min_are_one_instruction_from_ampere_on():
    """A GPU of compute capability 8.0 or later computes a float maximum or minimum (NaN
    wins, -0 < +0) in one PTX instruction, which ptxas accepts; older ones, and doubles,
    compare and select."""
    source = compiled_text(lambda x, y: (lax.max(x, y), lax.min(x, y)), *np.ones((2, 8), "f"))
    ampere = nvrtc.compile_ptx(source, arch="compute_90")
    assert "max.NaN.f32" in ampere and "min.NaN.f32" in ampere
    nvrtc.compile_ptx(source, arch="sm_90")  # (ptxas checks the instructions)
    turing = nvrtc.compile_ptx(source, arch="compute_75")
    assert ".NaN" not in turing and "setp" in turing
    doubles = np.ones((2, 8))
    source = compiled_text(lambda x, y: (lax.max(x, y), lax.min(x, y)), *doubles)
    assert ".NaN" not in nvrtc.compile_ptx(source, arch="compute_90")


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_half_precision_values_round_after_every_operation(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200).astype(dtype)
    y = rng.standard_normal(200).astype(dtype)

    def f(x, y):
        return x * y + x, x / (fnp.abs(y) + 1), fnp.exp(x), fnp.sqrt(fnp.abs(y)), x.sum()

    assert_same_as_reference(f, x, y, exact=False, rtol=2e-2)
    # Products, sums and quotients of halves are exact in float32 before the rounding.
    assert_same_as_reference(lambda x, y: (x * y, x + y, x - y, x / y), x, y)


def test_indices_are_32_bit_unless_a_kernel_reaches_two_to_the_30():
    """Buffers, loop bounds and a loop nest's iterations below 2^30: int indices (a GPU's
    64-bit integer arithmetic takes several instructions); past it, long long."""

    def copy_kernel(rows: int, cols: int, size: int) -> K.Kernel:
        source, target = (
            K.Buffer("src", np.dtype(np.float32), size),
            K.Buffer("dst", np.dtype(np.float32), size),
        )
        i, j = K.Index("i"), K.Index("j")
        offset = K.binary("rem", i * cols + j, K.const(size, K.INDEX))
        store = K.Store(target, offset, K.Load(source, offset))
        loop = K.Loop(i, 0, rows, [K.Loop(j, 0, cols, [store])])
        return K.Kernel("k_copy", [source], [target], [loop])

    def index_type(kernel: K.Kernel) -> str:
        text = render_kernel(kernel, "k0_copy").text()
        (declared,) = set(re.findall(r"for \((int|long long) i\d+ = ", text))
        return declared

    assert index_type(copy_kernel(1000, 1000, 1 << 20)) == "int"
    assert index_type(copy_kernel(1 << 15, 1 << 15, 1 << 20)) == "long long"  # 2^30 iterations
    assert index_type(copy_kernel(2, 4, 1 << 30)) == "long long"  # a 2^30-element buffer


def test_grid_stride_loops_cover_more_elements_than_the_grid_has_threads():
    x = np.arange(5003, dtype=np.float64) / 7  # the emulator's grid has 4 x 32 threads
    assert_same_as_reference(lambda x: (fnp.sin(x) * 2 + 1, x.reshape(1, -1).sum(axis=0)), x)


@pytest.mark.parametrize("size", [8, 9, 1001, 5003])
@pytest.mark.parametrize(
    "dtype, lanes",
    [
        (np.float32, 4),
        (np.int32, 4),
        (np.float64, 2),
        (np.int64, 2),
        (dtypes.float16, 8),
        (dtypes.bfloat16, 8),
        (np.int16, 8),
    ],
)
def test_elementwise_loops_move_16_byte_vectors_and_finish_with_scalars(size, dtype, lanes):
    """Buffers read and written at the loop's index go by 16-byte vectors, lane by lane;
    elements at other places (a broadcast element, a gather) are read one by one, and the
    iterations past the last whole vector run in the scalar loop."""
    x = (np.arange(size) * 3 - size).astype(dtype)
    y = (np.arange(size)[::-1] % 11 + 1).astype(dtype)

    def f(a, b):
        return a * b + b[3] - a[::-1], a - b

    assert_same_as_reference(f, x, y)
    text = compiled_text(f, x, y)
    assert f"fg_vector<{memory_type(np.dtype(dtype))}, {lanes}>" in text
    assert re.search(rf"in\d+_v\.lane\[{lanes - 1}\]", text)  # the last lane of an input
    assert re.search(r"in\d+\[3\]", text)  # b[3], one element


def test_a_vector_loop_over_unaligned_slices_runs_the_scalar_loop():
    """A scan's body reads slices that start 36 bytes apart: where a slice is not 16-byte
    aligned, the whole loop runs element by element."""
    xs = np.arange(5 * 9, dtype=np.float32).reshape(5, 9) / 7

    def f(xs):
        return lax.scan(lambda c, x: (c + x, x * x * 2 - c), fnp.zeros(9, np.float32), xs)

    assert_same_as_reference(f, xs)
    assert "fg_vector<float, 4>" in compiled_text(f, xs)


def test_loops_of_mixed_element_sizes_stay_scalar():
    x = np.arange(100, dtype=np.float32)
    assert "fg_vector<" not in compiled_text(lambda a: a.astype(np.float64) * 2, x)
    assert "fg_vector<" not in compiled_text(lambda a: a > 3, x)


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int32, np.uint8, np.int64, dtypes.float16]
)
def test_whole_array_reductions_run_on_a_cooperating_block(dtype):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((37, 41)) * 4).astype(dtype)
    flags = x > 1

    def f(x, flags):
        return (
            x.sum(),
            x.max(),
            x.min(),
            fnp.prod(x[:2, :5]),
            flags.any(),
            flags.all(),
            lax.reduce(x, np.array(3, x.dtype), lax.add, (0, 1)),  # an init that is no identity
            x[:1, :0].sum(),  # nothing to reduce
        )

    exact = np.dtype(dtype).kind in "iu"
    assert_same_as_reference(
        f, x, flags, exact=exact, rtol=2e-3 if dtype == dtypes.float16 else 1e-5
    )
    text = compiled_text(f, x, flags)
    assert "__syncthreads();" in text and "__shared__" in text


def test_a_nan_anywhere_reaches_the_block_reductions_result():
    x = np.arange(1000, dtype=np.float32)
    for position in (0, 31, 32, 999):
        y = x.copy()
        y[position] = np.nan
        assert_same_as_reference(lambda y: (y.max(), y.min(), y.sum()), y)


@pytest.mark.parametrize("size", [(1 << 15) + 3, 3 << 15])
def test_long_reductions_fold_strided_parts_on_the_grid_then_one_block(size):
    """Past REDUCTIONS.min_work a reduction is 2^14 strided partial folds (a grid-stride loop)
    and a block's fold of them with the init and the elements left over; NaNs anywhere
    arrive, and integer sums wrap as the reference's do."""
    x = np.random.default_rng(3).standard_normal(size).astype(np.float32)
    nan = x.copy()
    nan[[5, size - 2]] = np.nan
    ints = (x * 1e6).astype(np.int32)

    def f(x, nan, ints):
        return (
            x.sum(),
            fnp.max(x),
            fnp.min(x),
            fnp.prod(fnp.where(x > 2.5, 2.0, fnp.where(x < -2.5, 0.5, 1.0))),  # exact
            (x > 3.5).any(),
            (x < 4.5).all(),
            nan.max(),
            nan.sum(),
            ints.sum(),
            lax.reduce(x, np.float32(5.0), lax.max, (0,)),  # an init that is no identity
        )

    assert_same_as_reference(f, x, nan, ints, exact=False, rtol=1e-4)
    text = compiled_text(f, x, nan, ints)
    assert "_parts" in text and "__syncthreads();" in text


def test_running_out_of_device_memory_names_every_buffer_and_runs_nothing():
    seen = []

    def f(s, x):
        fg.debug.callback(lambda: seen.append(1))
        return lax.broadcast_in_dim(s, (1 << 42,), ()) + 1, x * 2

    x = np.ones((3, 4), np.float32)
    with jit_backend("cuda_emulator"), pytest.raises(OutOfDeviceMemoryError) as caught:
        fg.jit(f)(np.float32(1), x)
    message = str(caught.value)
    assert isinstance(caught.value, MemoryError)
    for part in ("16.0 TiB", "float32[4398046511104]", "float32[3, 4] (48 B)", "Nothing ran"):
        assert part in message
    assert seen == []  # no step ran
    np.testing.assert_array_equal(x, np.ones((3, 4), np.float32))


def test_long_rows_run_on_a_block_each_and_short_rows_on_a_thread_each():
    x = np.random.default_rng(1).standard_normal((5, 10000)).astype(np.float32)

    def softmax(x):
        e = fnp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def layernorm(v):
        centered = v - v.mean(axis=1, keepdims=True)
        return centered / fnp.sqrt((centered * centered).mean(axis=1, keepdims=True) + 1e-5)

    for width in (64, 300, 1030, 6000, 10000):
        assert_same_as_reference(softmax, x[:, :width], exact=False)
        assert_same_as_reference(layernorm, x[:, :width], exact=False, rtol=1e-5)
    wide = x[:, :1030].astype(np.float64)  # vectors of 2 lanes, every other row misaligned
    assert_same_as_reference(layernorm, wide, exact=False, rtol=1e-12)
    # Each lane computes with its own element's index.
    ramp = lambda v: softmax(v) * (fnp.arange(v.shape[1], dtype=v.dtype) % 7)  # noqa: E731
    assert_same_as_reference(ramp, x[:, :1030], exact=False)
    # A thread per row, its scratch in its own memory; a block per row, each thread holding
    # its vectors of the row's scratch in registers (rows of 6,000: 1,500 vectors of 4, on a
    # block of 256 threads taking 6 each, the most its two intermediates' 256 bytes a thread
    # take, up to 8; rows of 10,000, whose scratch shared memory would not hold, 512 threads
    # taking 5 each); a row whose scratch neither fits runs on one thread.
    assert "float s" in compiled_text(softmax, x[:, :16])
    assert "blockIdx.x; i0 < 5;" not in compiled_text(softmax, x[:, :16])
    # Rows of a warp's width or more take a block each where they are too few to fill the
    # GPU a thread each (an attention's softmax: 8,192 rows of 64), else a thread each.
    assert "blockIdx.x; i0 < 5;" in compiled_text(softmax, x[:, :64])
    many = np.zeros((1 << 16, 64), np.float32)
    assert "blockIdx.x; i0 < 65536;" not in compiled_text(softmax, many)
    wide = compiled_text(softmax, x[:, :6000])
    assert "i0 = blockIdx.x; i0 < 5; i0 += gridDim.x" in wide and "__shared__ float s" not in wide
    assert re.search(r"\n  float s\d+\[24\];", wide) and "h0 < 6; ++h0" in wide
    assert "__launch_bounds__(256)" in wide
    widest = compiled_text(softmax, x)
    assert "__launch_bounds__(512)" in widest and "h0 < 5; ++h0" in widest
    wider = np.tile(x, 4)
    assert_same_as_reference(softmax, wider, exact=False)
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" in compiled_text(softmax, wider)
    # The input is read from memory once per row: the first loop keeps its elements for the
    # later ones.
    for f in (softmax, layernorm):
        text = compiled_text(f, x[:, :300])
        assert len(re.findall(r"_v = reinterpret_cast<const fg_vector<float, 4>\*>", text)) == 1
        assert "  float row0[12];" in text
    # A row's loops read and write its memory as 16-byte vectors where the row is aligned (the
    # loops of 1,030: 258 vectors, the last of two elements, element by element; every other
    # row element by element).
    text = compiled_text(softmax, x[:, :1030])
    assert re.search(r"fg_vector<float, 4> in\d+_v;", text)
    assert re.search(r"reinterpret_cast<fg_vector<float, 4>\*>\(\(out\d+ \+ ", text)
    assert "if (q0 < 258) {" in text and "aligned0 && 4 * q0 + 4 <= 1030;" in text

    # A row whose loops index none of its intermediates (a sum over part of the row, then the
    # quotients) runs them strided over the block, the fold's total in shared memory.
    def part(x):
        return x / (x[:, :100] ** 2).sum(axis=1, keepdims=True)

    assert_same_as_reference(part, x[:, :300], exact=False)
    assert "__shared__ float s" in compiled_text(part, x[:, :300])


def test_a_single_long_row_takes_a_block():
    """A softmax and a sum over an array of one row of 8,200 (a row loop of one iteration)
    ran on one thread, folding the row in turn: a float32 sum 15 times further from the
    float64 one than the reference's. The row takes a block, as rows do when there are more."""
    x = np.random.default_rng(3).standard_normal((1, 8200)).astype(np.float32)

    def f(v):
        e = fnp.exp(v - v.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True) * v.shape[1], fnp.exp(v).sum(axis=1)

    wide = [np.asarray(r) for r in f(x.astype(np.float64))]
    reference = run_on("numpy", f, x)
    for got, expected, exact in zip(run_on("cuda_emulator", f, x), reference, wide):
        own, theirs = np.abs(got - exact).max(), np.abs(expected - exact).max()
        assert own <= 4 * theirs, (own, theirs)
    text = compiled_text(f, x)
    assert "i0 = blockIdx.x; i0 < 1; i0 += gridDim.x" in text
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" not in text


def _run_rows(kernel: K.Kernel, *arrays: np.ndarray) -> str:
    """Runs a hand-made kernel on the emulator over `arrays` (its buffers, in place); returns
    its CUDA C."""
    rendered = render_kernel(kernel, "k0_rows")
    device = executable.emulator()
    module = device.load(module_source([rendered.text()]), [rendered])
    device.launch(module, rendered, [a.reshape(-1) for a in arrays])
    return rendered.text()


@pytest.mark.parametrize("held", [True, False])
def test_row_blocks_hold_intermediates_where_every_loop_reads_its_own_elements(held):
    """Rows of 301: a loop keeps 2x in scratch and folds its maximum, a second writes the
    scratch less the maximum. Each thread holds its vectors' elements of the scratch (the
    tail vector of one element, and rows misaligned in turn); where the second loop reads
    the scratch reversed, the scratch is the block's, in shared memory."""
    rows, width = 6, 301
    f32 = np.dtype(np.float32)
    x, y = K.Buffer("x", f32, rows * width), K.Buffer("y", f32, rows * width)
    top = K.Buffer("top", f32, rows)
    scratch = K.Buffer("s", f32, width)
    i, j, k = K.Index("i"), K.Index("j"), K.Index("k")
    largest = K.Acc("largest", f32)
    doubled = K.binary("mul", K.Load(x, i * width + j), K.const(2, f32))
    read_at = k if held else K.binary("sub", K.const(width - 1, K.INDEX), k)
    row = K.Loop(i, 0, rows, [
        K.SetAcc(largest, K.const(-np.inf, f32)),
        K.Loop(j, 0, width, [
            K.Store(scratch, j, doubled),
            K.SetAcc(largest, K.binary("max", largest.read(), K.Load(scratch, j))),
        ]),
        K.Store(top, i, largest.read()),
        K.Loop(k, 0, width, [
            K.Store(y, i * width + k, K.binary("sub", K.Load(scratch, read_at), largest.read())),
        ]),
    ])  # fmt: skip
    kernel = K.Kernel("rows", [x], [y, top, scratch], [row], scratch=[scratch])
    data = np.random.default_rng(5).standard_normal((rows, width)).astype(np.float32)
    got, got_top = np.zeros_like(data), np.zeros(rows, np.float32)
    text = _run_rows(kernel, data, got, got_top)
    doubled = data * 2
    np.testing.assert_array_equal(got_top, doubled.max(axis=1))
    expected = doubled if held else doubled[:, ::-1]
    np.testing.assert_array_equal(got, expected - doubled.max(axis=1, keepdims=True))
    if held:  # 76 vectors of 4: 32 threads taking 3 each
        assert "  float s[12];" in text and "h0 < 3; ++h0" in text and "q0 < 76" in text
    else:
        assert "__shared__ float s[301];" in text


def test_rows_in_a_nest_take_a_block_each():
    """An attention's softmax over (batch, queries, heads, keys) read as (batch, heads,
    queries): one loop over its 48 rows (`index_algebra.collapse_row_nests`), a block each
    holding its row, where the nest gave each of the 2 batch elements one thread."""
    scores = np.random.default_rng(8).standard_normal((2, 8, 3, 200)).astype(np.float32)

    def attention_softmax(s):
        return fg.nn.softmax(fnp.transpose(s, (0, 2, 1, 3)) * 0.5, axis=-1)

    assert_same_as_reference(attention_softmax, scores, exact=False)
    text = compiled_text(attention_softmax, scores)
    assert "i0 = blockIdx.x; i0 < 48; i0 += gridDim.x" in text and "h0 < " in text


def test_held_rows_wait_where_a_loop_writes_what_another_thread_reads():
    """Rows shifted left in place: a loop holds each thread's elements of the row read one
    place on, the next writes them over the row. Holding its intermediates does not order
    the threads' accesses of the row itself: a barrier after each loop does (the first reads
    what the second writes, and the second writes what the first reads)."""
    rows, width = 4, 256
    f32 = np.dtype(np.float32)
    x, scratch = K.Buffer("x", f32, rows * width), K.Buffer("s", f32, width - 1)
    i, j, k = K.Index("i"), K.Index("j"), K.Index("k")
    row = K.Loop(i, 0, rows, [
        K.Loop(j, 0, width - 1, [K.Store(scratch, j, K.Load(x, i * width + j + 1))]),
        K.Loop(k, 0, width - 1, [K.Store(x, i * width + k, K.Load(scratch, k))]),
        K.Store(x, i * width + width - 1, K.const(0, f32)),
    ])  # fmt: skip
    kernel = K.Kernel("rows", [x], [x, scratch], [row], scratch=[scratch])
    data = np.random.default_rng(6).standard_normal((rows, width)).astype(np.float32)
    got = data.copy()
    text = _run_rows(kernel, got)
    np.testing.assert_array_equal(got, np.pad(data[:, 1:], ((0, 0), (0, 1))))
    assert "  float s[8];" in text and text.count("__syncthreads();") == 2


@pytest.mark.parametrize("dtype", [np.float32, np.int32, dtypes.float16])
def test_row_blocks_fold_every_kind_of_reduction(dtype):
    # Rows of 300 run on a block each: sums, products, extrema, several folds in one loop,
    # boolean folds, argmax (not a plain fold: a thread per row) and a cumulative sum.
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((7, 300)) * 3).astype(dtype)

    def f(x):
        y = x * 2 + 1
        return (
            y.sum(axis=1),
            (x * x).sum(axis=1) - x.sum(axis=1),
            x.max(axis=1),
            fnp.min(y, axis=1, keepdims=True) + x,
            (x > 0).any(axis=1),
            (x > -100).all(axis=1),
            fnp.argmax(x, axis=1),
            fnp.cumsum(x[:, :40].astype(np.float32), axis=1),  # not a fold: a thread per row
            lax.reduce(x, np.array(5, dtype), lax.add, (1,)),
        )

    exact = dtype == np.int32
    assert_same_as_reference(f, x, exact=exact, rtol=1e-2 if dtype == dtypes.float16 else 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, dtypes.bfloat16])
def test_reductions_over_the_leading_axis_give_few_columns_a_block_and_many_a_thread(dtype):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((300, 37)) * 3).astype(dtype)

    def f(x):
        return (
            x.sum(axis=0),
            (x * x).sum(axis=0) + x.max(axis=0),
            fnp.max(-fnp.abs(x) - 1, axis=0),  # every column below zero
            fnp.min(x, axis=0, keepdims=True) - x,
            (x > 1).any(axis=0),
            lax.reduce(x, np.array(5, dtype), lax.add, (0,)),
            x.reshape(3, 100, 37).sum(axis=(0, 1)),
        )

    exact = dtype == np.int32
    assert_same_as_reference(f, x, exact=exact, rtol=5e-2 if dtype == dtypes.bfloat16 else 1e-5)
    text = compiled_text(lambda x: x.sum(axis=0), x)
    # The scheduler streams rows (for j: out[j] = 0; for i: for j: out[j] += x[i, j]); the GPU
    # takes the columns outermost. Few columns take a block each, its threads sharing the
    # column's fold; many columns of few rows (1,100 of 30 rows: too few rows to fold in
    # parts) a thread each, neighbouring threads reading neighbouring elements.
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" not in text
    assert "i0 = blockIdx.x; i0 < 37; i0 += gridDim.x" in text and "__shared__" in text
    many = (rng.standard_normal((30, 1100)) * 3).astype(dtypes.bfloat16)
    assert_same_as_reference(lambda x: x.sum(axis=0), many)  # (in the same order)
    text = compiled_text(lambda x: x.sum(axis=0), many)
    assert "threadIdx.x); i0 < 1100; i0 += (int)(gridDim.x * blockDim.x)" in text
    assert "__shared__" not in text


def test_a_reduction_over_leading_axes_read_through_a_transpose_spreads_over_the_gpu():
    """Summing axes 0 and 1 of a transposed (32, 48, 64) array (a bias gradient in a
    transformer's backward pass): the rows' offsets keep quotients of one row index, but its
    rows are made one loop all the same, so that its 64 columns' folds split over the grid,
    where the kernel ran on one thread."""
    x = np.random.default_rng(7).standard_normal((32, 64, 48)).astype(np.float32)

    def f(v):
        t = v.transpose(0, 2, 1)
        return t.sum(axis=(0, 1)), t.max(axis=(0, 1)), (t * t).sum(axis=(0, 1))

    assert_same_as_reference(f, x, exact=False, rtol=1e-4)
    text = compiled_text(lambda v: v.transpose(0, 2, 1).sum(axis=(0, 1)), x)
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" not in text
    assert "_parts(" in text


def test_sorts_merge_a_pass_per_kernel_or_give_each_line_a_thread(monkeypatch):
    """Sorting each row of a matrix (keys with ties, NaNs and signed zeros; a second operand
    moving with them), argsort, top_k and the median. Few lines: each merge pass is a kernel
    over every element, which finds its place by binary search in the other run (stable:
    ties keep their order). Many lines: a thread per line takes the line's whole merge sort
    (each line its own row of the permutation buffers). Either way the sorted elements are
    then gathered on the grid, where all the lines ran on one thread."""
    rng = np.random.default_rng(10)
    x = np.round(rng.standard_normal((37, 300)), 1).astype(np.float32)
    x[3, ::7], x[5, 10], x[5, 11] = np.nan, -0.0, 0.0
    payload = rng.integers(0, 1000, x.shape).astype(np.int32)

    def f(v, p):
        keys, moved = lax.sort((v, p), dimension=1, num_keys=1)
        values, indices = lax.top_k(v, 5)
        return keys, moved, fnp.argsort(v, axis=1), values, indices, fnp.median(v, axis=1)

    assert_same_as_reference(f, x, payload)
    text = compiled_text(lambda v: fnp.sort(v, axis=1), x)
    assert "_sort_merge8(" in text and "_sort_merge9(" not in text  # 9 passes over 300
    assert "threadIdx.x); i0 < 11100; i0 += (int)(gridDim.x * blockDim.x)" in text
    # One line: 5,000 values with ties and NaNs, and where others fall among them.
    line = np.round(rng.standard_normal(5000), 2).astype(np.float32)
    line[::97] = np.nan
    assert_same_as_reference(
        lambda v: (fnp.sort(v), fnp.argsort(v), fnp.searchsorted(fnp.sort(v), v[:50])), line
    )

    # Inside a scan's body (a region: one block runs the passes in turn).
    def sorted_steps(c, row):
        return c + 1, (fnp.sort(row * c), fnp.argsort(row))

    assert_same_as_reference(lambda xs: lax.scan(sorted_steps, np.float32(1), xs), x[:5])
    monkeypatch.setattr(parallel, "RANKED_MERGES_BELOW", 37)
    assert_same_as_reference(f, x, payload)
    text = compiled_text(lambda v: fnp.sort(v, axis=1), x)
    assert "_sort_lines(" in text
    assert "threadIdx.x); i0 < 37; i0 += (int)(gridDim.x * blockDim.x)" in text


@settings(deadline=None, max_examples=10)
@given(st.integers(1, 700), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_ranked_merges_sort_lines_of_any_length_stably(n, lines, seed):
    """Lines of any length (runs of every width, a last run cut short) with few distinct
    values, NaNs and signed zeros: the sorted keys, the payload moved with them and the
    stable argsort match NumPy's."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(-3, 4, (lines, n)).astype(np.float32)
    keys[rng.random((lines, n)) < 0.1] = np.nan
    keys[keys == 0] *= rng.choice([-1, 1], int((keys == 0).sum()))
    payload = np.arange(lines * n, dtype=np.int32).reshape(lines, n)
    with jit_backend("cuda_emulator"):
        got_keys, got_payload = fg.jit(lambda k, p: lax.sort((k, p), dimension=1, num_keys=1))(
            keys, payload
        )
        order = fg.jit(lambda k: fnp.argsort(k, axis=1))(keys)
    expected = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(np.asarray(order), expected)
    np.testing.assert_array_equal(np.asarray(got_payload), np.take_along_axis(payload, expected, 1))
    sorted_keys = np.take_along_axis(keys, expected, 1)
    np.testing.assert_array_equal(np.signbit(np.asarray(got_keys)), np.signbit(sorted_keys))
    np.testing.assert_array_equal(np.asarray(got_keys), sorted_keys)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, dtypes.bfloat16])
def test_an_argmax_over_a_whole_array_finds_each_parts_first_then_carries_them_in_order(dtype):
    """40,000 elements below zero (1,024 parts of 39, 64 left over): the maximum ties at
    three places in different parts, the first opening the first part (it wins); the minimum is
    among the elements left over; with NaNs, the first NaN wins, in a later part than the
    maximum, before another among the elements left over."""
    rng = np.random.default_rng(11)
    x = np.round(-np.abs(rng.standard_normal(40000) * 100) - 1).astype(np.float32)
    x[[5000, 0, 39990]] = -0.5  # the first maximum opens the first part
    x[[31000, 123]] = -1000
    x[39950] = -2000
    values = [x.astype(dtype)]
    if dtype != np.int32:
        with_nan = x.copy()
        with_nan[[20000, 39970]] = np.nan
        values.append(with_nan.astype(dtype))
    for v in values:
        assert_same_as_reference(lambda a: (fnp.argmax(a), fnp.argmin(a)), v)
    text = compiled_text(lambda a: fnp.argmax(a), values[0])
    assert "_argmax_parts(" in text and "threadIdx.x); i0 < 1024;" in text


def test_cumulative_ops_along_one_long_line_run_in_parts():
    """40,000 elements (1,000 parts of 40: a count near 1,024 that divides them): each part
    folds its elements, one thread carries the running value over the parts, then each part
    runs down its elements again from the value before it; a reverse one walks its parts
    down memory. Maxima and minima and integer sums are exact; float sums and products are
    regrouped (within 1e-4). A line of a prime length (32,771) takes parts of 33, the last
    one of 2: past the line's end a part keeps its running value."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal(40000).astype(np.float32)
    below = -np.abs(x) - 1  # every part's running maximum below zero
    integers = rng.integers(-1000, 1000, 40000).astype(np.int32)

    def exact(v, w, k):
        return (
            lax.cummax(w),
            lax.cummin(-w),
            lax.cummax(v),
            fnp.cumsum(k),
            lax.cummax(w, reverse=True),
            lax.cumsum(k, reverse=True),
        )

    assert_same_as_reference(exact, x, below, integers)

    def regrouped(v):  # (sums of magnitudes: relative errors stay at float32's)
        reverse = lax.cumsum(fnp.abs(v), reverse=True)
        return fnp.cumsum(fnp.abs(v)), fnp.cumprod(1 + v * 1e-3), lax.cumlogsumexp(v), reverse

    assert_same_as_reference(regrouped, x, exact=False, rtol=1e-4)
    prime = (x[:32771], below[:32771], integers[:32771])
    assert_same_as_reference(exact, *prime)
    assert_same_as_reference(regrouped, prime[0], exact=False, rtol=1e-4)
    text = compiled_text(lambda v: fnp.cumsum(v), x)
    assert "_cumsum_parts(" in text and "_cumsum_carry(" in text
    assert text.count("threadIdx.x); i0 < 1000; i0 += (int)(gridDim.x * blockDim.x)") == 2
    backwards = compiled_text(lambda v: lax.cumsum(v, reverse=True), x)
    assert backwards.count("threadIdx.x); i0 < 1000; i0 += (int)(gridDim.x * blockDim.x)") == 2
    uneven = compiled_text(lambda v: fnp.cumsum(v), x[:32771])
    assert uneven.count("threadIdx.x); i0 < 994; i0 += (int)(gridDim.x * blockDim.x)") == 2
    # The last kernel alone writes the result, pointwise: a donated operand still hosts it.
    for line in (integers, integers[:32771]):
        placed = fg.device_put(line, fg.devices("cuda_emulator")[0])
        with jit_backend("cuda_emulator"), warnings.catch_warnings():
            warnings.simplefilter("error")  # (an unusable donation warns)
            in_place = fg.jit(fnp.cumsum, donate_argnums=0)(placed)
        np.testing.assert_array_equal(np.asarray(in_place), np.cumsum(line))


def test_cumulative_ops_down_columns_give_each_column_a_thread():
    """A cumulative sum, product or maximum over axis 0 runs down each column, its columns'
    stores interleaved in memory but never meeting: a thread per column (it ran on one
    thread for all), each in the reference's order."""
    x = (np.random.default_rng(9).standard_normal((300, 37)) * 0.1 + 1).astype(np.float32)

    def f(v):
        return fnp.cumsum(v, axis=0), fnp.cumprod(v, axis=0), lax.cummax(v, axis=0)

    assert_same_as_reference(f, x)
    text = compiled_text(lambda v: fnp.cumsum(v, axis=0), x)
    assert "threadIdx.x); i0 < 37; i0 += (int)(gridDim.x * blockDim.x)" in text


def column_folds(x):
    """Folds over the leading axis of each kind a column's kernel takes: sums, a sum beside
    a maximum, statements after a fold, a minimum read back by every row, a boolean any, and
    an init above some columns."""
    return (
        x.sum(axis=0),
        (x * x).sum(axis=0) + x.max(axis=0),
        (x * x).sum(axis=0) * 2 + 1,
        fnp.min(x, axis=0, keepdims=True) - x[:3],
        (x > 4).any(axis=0),
        lax.reduce(x, np.array(5, x.dtype), lax.max, (0,)),
    )


@pytest.mark.parametrize("dtype", [np.float32, np.int32, dtypes.bfloat16])
def test_long_reductions_over_few_columns_fold_parts_of_the_rows_at_once(dtype):
    """1,499 rows of 37 columns: 93 parts of 16 rows per column, each a thread, then a fold
    of each column's parts with the 11 rows left over and the init. (1,500 rows: 75 parts of
    20, which divide them, none left over.)"""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((1499, 37)) * 3).astype(dtype)
    if dtype != np.int32:
        x[700, 5] = np.nan  # a NaN in one column's middle part
    x[1495, 9] = 1000  # the column's maximum, in the rows left over

    exact = dtype == np.int32
    # The parts reassociate float sums: 1,500 terms of size 3 round differently (up to 1e-4).
    rtol = 5e-2 if dtype == dtypes.bfloat16 else 1e-3
    assert_same_as_reference(column_folds, x, exact=exact, rtol=rtol)
    if dtype == dtypes.bfloat16:
        return  # its folds round to bfloat16 at every row, so each column keeps one thread
    text = compiled_text(lambda x: x.max(axis=0), x)
    assert "_parts(" in text and "i0 < 3441;" in text  # 93 parts x 37 columns
    assert re.search(r"for \(int i\d+ = 1488; i\d+ < 1499; \+\+i\d+\)", text)
    text = compiled_text(lambda x: x.max(axis=0), np.concatenate([x, x[:1]]))
    assert "i0 < 2775;" in text and "= 1500;" not in text  # 75 parts x 37 columns


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_column_folds_of_few_parts_run_as_one_kernel_a_block_per_group_of_columns(dtype):
    """262 rows of 128 columns (a bias gradient's shape): 16 parts of 16 rows per column and
    6 rows left over, in one kernel where two were: a block per 8 neighbouring columns, its
    128 threads each folding 16 rows of one column into shared memory, then per column its
    16 partials in order, the rows left over, the init and the statements after."""
    rng = np.random.default_rng(26)
    x = (rng.standard_normal((262, 128)) * 3).astype(dtype)
    if dtype != np.int32:
        x[100, 5] = np.nan  # a NaN in one column's seventh part
    x[258, 9] = 1000  # the column's maximum, in the rows left over

    assert_same_as_reference(column_folds, x, exact=dtype == np.int32, rtol=1e-5)
    text = compiled_text(lambda x: x.max(axis=0), x)
    assert "_parts(" not in text and "__shared__" in text
    assert "i0 = blockIdx.x; i0 < 16; i0 += gridDim.x" in text  # 128 columns, 8 a block
    assert re.search(r"for \(int i\d+ = 256; i\d+ < 262; \+\+i\d+\)", text)
    mlp = np.zeros((256, 1024), dtype)  # 128 blocks of 8 columns, 16 parts of 16 rows
    assert "i0 = blockIdx.x; i0 < 128; i0 += gridDim.x" in compiled_text(
        lambda g: g.sum(axis=0), mlp
    )
    wide = np.zeros((1024, 1024), dtype)  # 64 parts of each column: two kernels
    assert "_parts(" in compiled_text(lambda g: g.sum(axis=0), wide)
    halves = (rng.standard_normal((130, 1100)) * 3).astype(dtypes.bfloat16)  # float32 partials
    assert_same_as_reference(lambda x: x.sum(axis=0), halves, exact=False, rtol=2e-2)
    assert "__shared__ float partials" in compiled_text(lambda x: x.sum(axis=0), halves)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_a_map_makes_the_fold_down_the_columns_of_a_value_it_stores(dtype):
    """A map whose value is also read elsewhere (a product's operand, a result) and folded
    down its columns (a bias gradient beside the gradient it sums) is one kernel where it was
    two: the fold's blocks each store the map's values for a group of columns as they fold
    them (`schedule.column_folds_with_maps`). Leading axes of any number are its rows, and
    the rows left over past the parts come along. Where the fold would not run on blocks
    (too little work), the map and the fold stay two kernels; a CPU keeps them apart."""
    rng = np.random.default_rng(27)

    def step(a, b, w):
        delta = a * (b - b * b)  # (a map, read by the product and two folds)
        return delta @ w, delta.sum(axis=0), fnp.tanh(delta.astype(np.float32)).max(axis=0)

    def images(a, b):
        delta = fnp.maximum(a, 0) * b  # rows of batch, height and width
        return delta, delta.max(axis=(0, 1, 2))

    x = (rng.standard_normal((262, 128)) * 3).astype(dtype)
    b = (rng.uniform(-1, 1, (262, 128)) * (3 if dtype == np.int32 else 1)).astype(dtype)
    w = rng.standard_normal((128, 40)).astype(dtype)
    x[258, 9] = 1000  # (a fold's maximum in the rows left over)
    tolerance = dict(exact=dtype == np.int32, rtol=1e-4)  # (float sums in parts)
    assert_same_as_reference(step, x, b, w, **tolerance)
    fused = r"^  t\d+, out\d+, .* = k\d+_reduce_sum\(in\d+, in\d+\)  # fuses: mul, sub, mul, \S+$"
    assert re.search(fused, fusion_plan(step, x, b, w), re.M)  # (the map, the sum, one kernel)
    text = compiled_text(step, x, b, w)
    assert "i0 = blockIdx.x; i0 < 16; i0 += gridDim.x" in text  # 128 columns, 8 a block
    image = (rng.standard_normal((2, 8, 16, 128)) * 3).astype(dtype)
    assert_same_as_reference(images, image, image[::-1], **tolerance)
    assert "= k" in (plan := fusion_plan(images, image, image)) and plan.count("= k") == 1
    small = x[:16, :100]  # 1,600 elements: a map kernel, then a fold of its result
    assert_same_as_reference(step, small, b[:16, :100], w[:100], **tolerance)
    plan = fusion_plan(step, small, b[:16, :100], w[:100])
    assert re.search(r"= k\d+_reduce_sum\(t\d+\)", plan)
    assert "mul, reduce_sum" not in fusion_plan(step, x, b, w, backend="llvm")


def test_a_rows_fold_reading_weights_strided_keeps_its_scratch_to_its_row():
    """A softmax's gradient through a product with weights (4,100 by 3) folds each row of
    4,100 reading the weights three apart, storing the row's values in its scratch: a fold
    striding across memory, split into parts of the rows as a column's fold is. The parts of
    both rows wrote their values into the one row of scratch, which each row then read: a
    third of the gradient was wrong. A fold whose map stores are not an element each of every
    row and column stays whole."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4100)).astype(np.float32)
    w = rng.standard_normal((4100, 3)).astype(np.float32)

    def loss(x):
        e = fnp.exp(x - x.max(axis=1, keepdims=True))
        return fnp.sum(fnp.tanh(e / e.sum(axis=1, keepdims=True) @ w))

    assert_same_as_reference(fg.grad(loss), x, exact=False, rtol=1e-5)


def test_a_map_folded_down_its_columns_in_two_kernels_stores_its_values_in_both(monkeypatch):
    """Where a fold a map makes does not fit blocks after all (1,030 rows of 512 columns: 64
    parts a column), its partial folds' kernel stores the map's values for the parts' rows,
    and the kernel folding the partials those of the rows left over."""
    monkeypatch.setattr(parallel, "column_fold_on_blocks", lambda rows, columns, split: True)
    rng = np.random.default_rng(28)
    x, b = (rng.standard_normal((1030, 512)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((512, 24)).astype(np.float32)

    def step(a, b, w):
        delta = a * (b - b * b)
        return delta @ w, delta.sum(axis=0)

    assert_same_as_reference(step, x, b, w, exact=False, rtol=1e-4)
    text = compiled_text(step, x, b, w)
    assert "_parts(" in text and "fuses: mul, sub, mul, reduce_sum" in fusion_plan(step, x, b, w)


def test_control_flow_matmuls_and_callbacks_run_in_program_order():
    x = np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32)
    w = np.linspace(0, 2, 20).reshape(4, 5).astype(np.float32)
    seen = []

    def f(x, w):
        def body(carry, row):
            carry = fnp.tanh(carry + row @ w)
            return carry, carry.sum()

        carry, ys = lax.scan(body, fnp.zeros(5, np.float32), x)
        ys = lax.cond(ys.sum() > 0, lambda v: v * 2, lambda v: v - 1, ys)
        count = lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.5), (0, ys))
        fg.debug.callback(lambda v: seen.append(np.asarray(v)), carry)
        doubled = fg.pure_callback(
            lambda v: np.asarray(v) * 2, fg.ShapeDtypeStruct((5,), np.float32), carry
        )
        return carry, ys, count, doubled, x @ w, fnp.einsum("ij,kj->ik", x, x)

    assert_same_as_reference(f, x, w, exact=False)
    assert len(seen) == 1 + len(CUDA_BACKENDS)  # the reference's run and each CUDA one


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_convolutions_run_as_tiled_implicit_gemms_that_gather_their_windows(dtype):
    """Convolutions large enough for a GEMM run as one tiled product kernel each, gathering
    each window element as a tile is staged (no copy of the windows in memory): channels
    first and last, strides, padding, dilations of the weights and of a strided input, one
    and three spatial dimensions, tiles cut by the output's edges (130 positions by 70
    features, 27 and 45 terms), tiles of 16, 32 and 64 columns (as many output features as
    there are, up to 64), and the convolutions of the gradients. Grouped ones stay direct
    kernels."""
    rng = np.random.default_rng(7)
    normal = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    tol = dict(exact=False, rtol=1e-4 if dtype == np.float32 else 1e-10)

    def nchw(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)))

    def nhwc(x, w):
        return lax.conv_general_dilated(
            x, w, (2, 1), ((0, 2), (1, 1)), lhs_dilation=(2, 1), rhs_dilation=(1, 2),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )  # fmt: skip

    images, weights = normal(2, 3, 5, 13), normal(70, 3, 3, 3)
    assert_same_as_reference(nchw, images, weights, **tol)
    with jit_backend("cuda_emulator"):
        compiled = fg.jit(nchw).lower(images, weights).compile()
    assert "a_tile[ak][ap] = av;" in compiled.as_text() and "gemm[" not in compiled.fusion_plan()
    assert "b_tile[16][65]" in compiled.as_text()  # 64 columns of the 70 output features
    assert_same_as_reference(nhwc, normal(2, 6, 7, 5), normal(3, 3, 5, 8), **tol)
    line = lambda x, w: lax.conv_general_dilated(x, w, (3,), "SAME")  # noqa: E731
    assert_same_as_reference(line, normal(4, 6, 50), normal(24, 6, 5), **tol)
    narrow = compiled_text(line, normal(4, 6, 50), normal(9, 6, 5))
    assert "a_tile[16][257]" in narrow and "b_tile[16][17]" in narrow  # 256 x 16: 9 features
    volume = lambda x, w: lax.conv_general_dilated(x, w, (1, 2, 1), "VALID")  # noqa: E731
    assert_same_as_reference(volume, normal(1, 2, 5, 6, 7), normal(4, 2, 2, 3, 2), **tol)
    loss = lambda x, w: (nchw(x, w) ** 2).sum()  # noqa: E731
    assert_same_as_reference(fg.grad(loss, argnums=(0, 1)), images, weights, **tol)
    strided = lambda x, w: (nhwc(x, w) ** 2).sum()  # noqa: E731
    assert_same_as_reference(
        fg.grad(strided, argnums=(0, 1)), normal(2, 6, 7, 5), normal(3, 3, 5, 8), **tol
    )
    grouped = lambda x, w: lax.conv_general_dilated(  # noqa: E731
        x, w, (1, 1), "SAME", feature_group_count=3
    )
    assert_same_as_reference(grouped, normal(2, 6, 9, 9), normal(12, 2, 3, 3), **tol)
    assert "a_tile" not in compiled_text(grouped, normal(2, 6, 9, 9), normal(12, 2, 3, 3))


def test_a_conv_training_step_spreads_every_kernel_over_the_gpu():
    """A convolutional network's training step (NHWC, 3x3 convolutions, the second strided):
    its bias gradients (sums over batch, height and width: a nest of rows), its weight
    gradients (few weights, each a sum over the batch's windows: split into parts of the sum,
    as products of tiles or, too few for a tile, as folds), its gathered input gradient
    (a nest over images) and its bias additions (a nest over pixels and channels) each run on
    many threads, no kernel on one thread alone.
    Values against the reference, float64 (sums of thousands of terms compared)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 28, 28, 1))
    k1 = rng.standard_normal((3, 3, 1, 16)) / 3
    k2 = rng.standard_normal((3, 3, 16, 32)) / 12
    w = rng.standard_normal((14 * 14 * 32, 10)) / 40

    def loss(k1, b1, k2, b2, w, x):
        conv = partial(lax.conv_general_dilated, padding="SAME")
        numbers = ("NHWC", "HWIO", "NHWC")
        h = fnp.maximum(conv(x, k1, (1, 1), dimension_numbers=numbers) + b1, 0.0)
        h = fnp.maximum(conv(h, k2, (2, 2), dimension_numbers=numbers) + b2, 0.0)
        return fnp.tanh(h.reshape(h.shape[0], -1) @ w).sum()

    step = fg.grad(loss, argnums=(0, 1, 2, 3))
    args = (k1, np.zeros(16), k2, np.zeros(32), w, x)
    assert_same_as_reference(step, *args, exact=False, rtol=1e-9)
    text = compiled_text(step, *args)
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" not in text
    # Both weight gradients are split: the second's 4,608 weights as a product of parts (each
    # its own tiles), the first's 144 (too few for a tile) as folds of parts of the batch.
    assert text.count("conv_general_dilated_parts(") == 2
    assert len(re.findall(r"const (int|long long) part = block /", text)) == 1
    assert text.count("_reduce_sum_parts(") >= 2  # (the bias gradients' partial sums)
    # The first bias gradient's 294 partials a channel summed on a block per channel; the
    # bias added to the first convolution's 6 x 28 x 28 x 16 outputs, a thread per element.
    assert re.search(r"for \(int i0 = blockIdx\.x; i0 < 16; i0 \+= gridDim\.x\)", text)
    assert re.search(r"i0 < 75264; i0 \+= \(int\)\(gridDim", text)


def test_a_product_of_few_results_sums_parts_of_its_terms_then_the_terms_left_over():
    """A weight gradient of 4,608 weights, each a sum of 845 products (5 images of 13 x 13):
    three parts of 281 terms, each part the tiles of its own product (`part = block / 2`),
    then per weight the three partials and the 2 terms left over. Values against the
    reference, float32 and float64; a product of the same weights summing 200 terms is not
    split."""
    rng = np.random.default_rng(8)

    def weight_gradient(x, w):
        conv = lambda w: lax.conv_general_dilated(  # noqa: E731
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return fg.grad(lambda w: (conv(w) ** 2).sum())(w)

    for dtype, rtol in ((np.float32, 2e-3), (np.float64, 1e-10)):  # (sums of terms to 300)
        x = rng.standard_normal((5, 13, 13, 16)).astype(dtype)
        w = rng.standard_normal((3, 3, 16, 32)).astype(dtype)
        assert_same_as_reference(weight_gradient, x, w, exact=False, rtol=rtol)
    text = compiled_text(weight_gradient, x, w)
    assert re.search(r"const int part = block / 2;", text)
    assert re.search(r"for \(int (i|k)\d+ = 843; \1\d+ < 845; \+\+\1\d+\)", text)
    few = compiled_text(weight_gradient, x[:2, :10, :10], w)  # (200 terms)
    assert "part = block" not in few and "a_tile" in few


def test_products_of_up_to_8_terms_fuse_into_their_readers():
    """A layer of few outputs' backward product (64 x terms by terms x 128), times the tanh's
    derivative: up to 8 terms, one kernel of as many multiply-adds per element, on the GPU as
    on the CPU; 10 terms a GEMM on both (fused, it ran slower on each), or on the CPU
    register tiles where it takes them."""
    rng = np.random.default_rng(16)

    def backward(g, w, h):
        return (g @ w.T) * (1 - h * h)

    h = np.tanh(rng.standard_normal((64, 128))).astype(np.float32)
    for terms, fused in ((8, True), (10, False)):
        g = rng.standard_normal((64, terms)).astype(np.float32)
        w = rng.standard_normal((128, terms)).astype(np.float32)
        assert_same_as_reference(backward, g, w, h, exact=False, rtol=1e-5)
        for backend in ("cuda_emulator", "llvm"):
            with jit_backend(backend):
                plan = fg.jit(backward).lower(g, w, h).compile().fusion_plan()
            assert ("gemm[" in plan or "tiles[" in plan) != fused
            assert bool(re.search("# fuses: .*dot_general", plan)) == fused


def test_a_loss_gradient_over_short_rows_is_one_kernel_on_the_gpu_alone():
    """The softmax cross-entropy's gradient (the MLP step's: 13 kernels over its rows) shares
    one loop over rows of up to 32 elements on the GPU, a thread a row, where the CPU keeps
    two (at most 8 members a loop: one ran slower there); rows of 33 are two on both."""
    rng = np.random.default_rng(33)

    def loss_grad(logits, b, y):
        def loss(z):
            z = z + b
            z = z - z.max(axis=1, keepdims=True)
            log_probs = z - fnp.log(fnp.exp(z).sum(axis=1, keepdims=True))
            return -(log_probs * y).sum() / z.shape[0]

        return fg.grad(loss)(logits)

    for width, gpu_kernels in ((10, 1), (32, 1), (33, 2)):
        z = rng.standard_normal((256, width)).astype(np.float32)
        b = rng.standard_normal(width).astype(np.float32)
        y = np.eye(width, dtype=np.float32)[rng.integers(0, width, 256)]
        assert_same_as_reference(loss_grad, z, b, y, exact=False, rtol=1e-5)
        for backend, kernels in (("cuda_emulator", gpu_kernels), ("llvm", 2)):
            with jit_backend(backend):
                plan = fg.jit(loss_grad).lower(z, b, y).compile().fusion_plan()
            assert plan.count(" = k") == kernels, plan


def test_independent_maps_run_as_one_kernel_each_loop_over_the_whole_grid():
    """An SGD update of six parameters of different shapes (a map kernel each, after the
    products making the gradients) launches as one kernel, each update a grid-stride loop of
    its own (16-byte vectors where aligned); with the parameters donated, each update is
    still written in place. Sixty updates are two kernels, neither taking more than 128
    buffers. A map reading another map's result waits for it: two kernels."""
    rng = np.random.default_rng(27)
    shapes = [(64, 32), (33,), (17, 10), (10,), (7,), ()]  # (a scalar's: a loop of one)
    params = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    x = rng.standard_normal((16, 64)).astype(np.float32)

    def sgd(params, x):
        grads = [fnp.tanh(x @ params[0]).sum(axis=0).mean() * p for p in params]
        return [p - 0.01 * g for p, g in zip(params, grads)]

    assert_same_as_reference(sgd, params, x, exact=False, rtol=1e-6)
    with jit_backend("cuda_emulator"):
        program = fg.jit(sgd).lower(params, x).compile()
    steps = [s for s in program.executable.program.steps if isinstance(s, KernelStep)]
    merged = [s for s in steps if s.kernel.concurrent_loops]
    assert len(merged) == 1 and len(merged[0].kernel.outputs) == 6
    text = program.as_text()
    assert all(f"const bool aligned{k} =" in text for k in range(5))
    expected = run_on("numpy", sgd, params, x)
    gpu = fg.devices("cuda_emulator")[0]
    step = fg.jit(sgd, donate_argnums=0)
    with jit_backend("cuda_emulator"), warnings.catch_warnings():
        warnings.simplefilter("error")  # (a donation no output can take warns)
        got = step(fg.device_put(params, gpu), x)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-6)

    many = [rng.standard_normal(k + 1).astype(np.float32) for k in range(60)]

    def updates(params, grads):  # 60 maps of 3 buffers each: two kernels of at most 128
        return [p - 0.01 * g for p, g in zip(params, grads)]

    grads = [rng.standard_normal(p.shape).astype(np.float32) for p in many]
    assert_same_as_reference(updates, many, grads, exact=False)
    with jit_backend("cuda_emulator"):
        program = fg.jit(updates).lower(many, grads).compile().executable.program
    sizes = [len(set(s.kernel.buffers)) for s in program.steps]
    assert sorted(sizes) == [54, 126]

    def dependent(x, y):
        a = fnp.exp(x)
        return a, a[::-1] * y

    v = rng.standard_normal(100).astype(np.float32)
    assert_same_as_reference(dependent, v, v, exact=False)
    with jit_backend("cuda_emulator"):
        plan = fg.jit(dependent).lower(v, v).compile().fusion_plan()
    assert plan.count(" = k") == 2


def test_maps_sharing_only_their_leading_rows_keep_loops_over_all_their_elements():
    """Attention's value bias (batch x tokens x width) beside its masked scores (batch x heads
    x tokens x tokens), neither reading the other, share only the batch axis: a kernel of
    both would give each of the 4 batch elements one thread. Each keeps a loop over all its
    elements; a map reading another's row still shares its loop."""
    rng = np.random.default_rng(31)
    q, k, v = (rng.standard_normal((4, 16, 2, 8)).astype(np.float32) for _ in range(3))
    bias = rng.standard_normal(16).astype(np.float32)
    mask = np.tril(np.ones((16, 16), bool))

    def attention_inputs(q, k, v, bias):
        scores = fnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.25
        return v.reshape(4, 16, 16) + bias, fnp.where(mask, scores, -1e30)

    assert_same_as_reference(attention_inputs, q, k, v, bias, exact=False)
    with jit_backend("cuda_emulator"):
        program = fg.jit(attention_inputs).lower(q, k, v, bias).compile().executable.program
    for step in (s for s in program.steps if isinstance(s, KernelStep)):
        loops = (
            step.kernel.body
            if step.kernel.concurrent_loops
            else [parallel.parallel_loop(step.kernel)]
        )
        for loop in loops:
            stored = {s.buffer.size for s in statements_in(loop.body) if isinstance(s, K.Store)}
            assert loop.stop - loop.start >= max(stored), step.kernel.name

    def normalized(x):  # (the row's sum, read by the quotient: one kernel)
        return x / x.sum(axis=(1, 2), keepdims=True)

    x = rng.standard_normal((4, 8, 8)).astype(np.float32)
    assert_same_as_reference(normalized, x, exact=False)
    with jit_backend("cuda_emulator"):
        assert fg.jit(normalized).lower(x).compile().fusion_plan().count(" = k") == 1


def test_a_profile_times_each_launch_gemm_and_copy_of_one_walked_call(monkeypatch):
    """`profile` runs the program launch by launch and sums each kernel's, GEMM's and copy's
    device time: every kernel of the module, a scan's body kernels once per iteration (its
    loop walked by the host here), and the GEMM by its shape."""
    from funcgrad.backends.cuda import regions

    monkeypatch.setattr(regions, "REGION_WORK", 0)  # (the scan's iterations launched one by one)
    x = np.random.default_rng(3).standard_normal((16, 300)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((300, 300)).astype(np.float32)

    def f(x, w):
        h = fnp.tanh(x @ w)
        e = fnp.exp(h - h.max(axis=1, keepdims=True))
        return lax.scan(lambda c, r: (c * 0.5 + r.sum(), c), 0.0, e / e.sum(axis=1)[:, None])

    with jit_backend("cuda_emulator"):
        compiled = fg.jit(f).lower(x, w).compile()
        rows = compiled.profile(x, w)
    calls = {what: count for what, count, _ in rows}
    launched = re.findall(
        r"__global__ (?:__launch_bounds__\(\d+\) )?void (\w+)\(", compiled.as_text()
    )
    assert set(calls) == set(launched) | {"gemm 16x300x300 float32", "copy"}
    body = [name for name in launched if name != launched[0]]  # (the row kernel runs once)
    assert calls[launched[0]] == 1 and all(calls[name] == 16 for name in body)
    assert calls["copy"] >= 16 and all(seconds >= 0 for _, _, seconds in rows)
    assert [row[2] for row in rows] == sorted((row[2] for row in rows), reverse=True)


def test_the_kernel_keeping_a_gpu_busy_reads_the_devices_timer():
    """A profile keeps a GPU busy before each span it times (`Gpu.occupy`), with a kernel
    reading the device's nanosecond timer through inline PTX, which ptxas checks when NVRTC
    compiles for a real architecture (an unknown register or a wrong operand raises). On a
    GPU, the device's clock then moves on by at least the time asked for."""
    nvrtc.compile_ptx(executable.OCCUPY_SOURCE, arch="sm_90")
    if not gpu_available():
        return
    device = executable.gpu()
    start = device.clock()
    device.occupy(2e-3)
    end = device.clock()
    device.synchronize()
    assert device.seconds_between(start, end) >= 2e-3


def _spread_scatter(fun, *args) -> tuple[K.Loop, K.Store]:
    """The loop over threads of the program's scatter spread over threads, and its store."""
    with jit_backend("cuda_emulator"):
        program = fg.jit(fun).lower(*args).compile()
    [kernel] = [
        step.kernel
        for step in all_steps(program.executable.program)
        if isinstance(step, KernelStep) and step.kernel.independent_outer
    ]
    [loop] = kernel.body
    [store] = [s for s in statements_in([loop]) if isinstance(s, K.Store)]
    return loop, store


def _dropped_updates_places(fun, *args) -> np.ndarray:
    """Where each thread of the program's scatter spread over its threads stores a dropped
    update (its store's offset when out of bounds), by thread."""
    loop, store = _spread_scatter(fun, *args)
    assert isinstance(store.offset, K.Select)
    return value_at(store.offset.on_false, {loop.index: np.arange(loop.start, loop.stop)})


def test_a_row_scatter_gives_each_window_position_a_thread_in_update_order(monkeypatch):
    """An embedding's gradient (`table.at[ids].add(rows)`, ids repeated, some past the table):
    the copy runs on the grid, then a thread per element of the table takes every row in
    order and combines those landing on its element (owner computes: 3,200 threads, where a
    thread per column would be 64), so each element's sum is the reference's to the bit and
    the last of several sets wins (`bincount`: a thread per bin). With more work than that
    allows, a thread per column
    takes every row, a dropped row rewriting its thread's own element. A scatter whose
    window moves along a dimension the indices place (windows of 4 at traced columns) keeps
    its updates on one thread, after the copy."""
    rng = np.random.default_rng(8)
    table = rng.standard_normal((50, 64)).astype(np.float32)
    ids = rng.integers(-3, 55, 300).astype(np.int32)
    rows = rng.standard_normal((300, 64)).astype(np.float32)

    def f(t, i, r, mode):
        return t.at[i].add(r, mode=mode), t.at[i].set(r, mode=mode), t.at[i].max(r, mode=mode)

    add = lambda t, i, r: t.at[i].add(r, mode="drop")  # noqa: E731
    for mode in ("drop", "clip"):
        assert_same_as_reference(partial(f, mode=mode), table, ids, rows)
    text = compiled_text(add, table, ids, rows)
    assert "_scatter_add_copy(" in text
    assert "threadIdx.x); i0 < 3200; i0 += (int)(gridDim.x * blockDim.x)" in text
    loop, store = _spread_scatter(add, table, ids, rows)  # each thread its own element alone
    threads = np.arange(3200)
    np.testing.assert_array_equal(value_at(store.offset, {loop.index: threads}), threads)
    # Single elements (`bincount`): a thread per bin, walking every value.
    values = rng.integers(0, 64, 1000).astype(np.int32)
    assert_same_as_reference(lambda v: fnp.bincount(v, length=64), values)
    loop, store = _spread_scatter(lambda v: fnp.bincount(v, length=64), values)
    assert (loop.start, loop.stop) == (0, 64)

    monkeypatch.setattr(parallel, "OWNER_WORK", 50 * 64 * 300 - 1)
    for mode in ("drop", "clip"):
        assert_same_as_reference(partial(f, mode=mode), table, ids, rows)
    text = compiled_text(add, table, ids, rows)
    assert "threadIdx.x); i0 < 64; i0 += (int)(gridDim.x * blockDim.x)" in text
    # A dropped row's store goes to its thread's own element (column w of row 0): threads
    # never meet, which the emulator, running them one after another, could not show.
    np.testing.assert_array_equal(_dropped_updates_places(add, table, ids, rows), np.arange(64))

    numbers = lax.ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0, 1)
    )
    places = np.stack([rng.integers(0, 50, 300), rng.integers(0, 61, 300)], 1).astype(np.int32)

    def windows(t, p, r):
        return lax.scatter_add(t, p, r[:, :4], numbers, mode="clip")

    assert_same_as_reference(windows, table, places, rows)
    text = compiled_text(windows, table, places, rows)
    assert "_scatter_add_copy(" in text
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" in text


def test_a_batched_scatter_gives_each_line_a_thread_in_update_order():
    """The gradient of take_along_axis (a cross-entropy's: each position's label picks a logit
    of its own line) is a scatter batched over the other axes, each line's updates going into
    that line alone: after the copy, a thread per line takes them in order. A label past the
    line is dropped, its store rewriting the first element of its own line."""
    rng = np.random.default_rng(9)
    logits = rng.standard_normal((8, 16, 10)).astype(np.float32)
    labels = rng.integers(-2, 12, (8, 16)).astype(np.int32)  # some past the line: dropped
    picked = lambda x, y: fnp.take_along_axis(x, y[..., None], axis=-1)  # noqa: E731
    gradient = fg.grad(lambda x, y: (picked(x, y) * fnp.arange(128.0).reshape(8, 16, 1)).sum())
    assert_same_as_reference(gradient, logits, labels)
    assert_same_as_reference(picked, logits, np.clip(labels, 0, 9))
    text = compiled_text(gradient, logits, labels)
    assert "_scatter_add_copy(" in text
    assert "threadIdx.x); i0 < 128; i0 += (int)(gridDim.x * blockDim.x)" in text
    own = _dropped_updates_places(gradient, logits, labels)
    np.testing.assert_array_equal(own, np.arange(128) * 10)


def test_complex_programs_run_as_pairs_of_reals():
    z = (np.arange(6) + 1j * np.arange(6)[::-1]).astype(np.complex64)
    assert_same_as_reference(lambda z: (fnp.exp(z * 0.1), z / (z + 1), fnp.abs(z)), z, exact=False)


def fusion_plan(fun, *args, backend: str = "cuda_emulator") -> str:
    with jit_backend(backend):
        return fg.jit(fun).lower(*args).compile().fusion_plan()


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_half_precision_products_run_as_the_gpus_library_gemms(dtype):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 40, 50)).astype(dtype)
    b = rng.standard_normal((3, 50, 30)).astype(dtype)

    def f(a, b):
        return a @ b, fnp.einsum("bij,bkj->bik", a, a), a[0].T @ a[1]

    # float32 sums rounded once, as the reference contracts halves (a GPU's order differs).
    assert_same_as_reference(f, a, b, rtol=1e-2 if dtype == dtypes.bfloat16 else 2e-3)
    assert fusion_plan(f, a, b).count("gemm[") == 3
    assert "gemm[" not in fusion_plan(f, a, b, backend="llvm")  # no half GEMM in a CPU BLAS


def _tf32(x: np.ndarray) -> np.ndarray:
    """x with 11 significant bits (TF32's 10 stored and the implicit one), to nearest even."""
    mantissa, exponent = np.frexp(x.astype(np.float64))
    return np.ldexp(np.round(mantissa * 2.0**11) / 2.0**11, exponent).astype(np.float32)


def test_float32_products_round_to_tf32_only_where_the_user_allows_it():
    rng = np.random.default_rng(4)
    a = (1 + rng.random((2, 64, 48)) * 1e-2).astype(np.float32)  # low bits that TF32 drops
    b = (1 + rng.random((48, 32)) * 1e-2).astype(np.float32)
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    rounded = np.matmul(_tf32(a).astype(np.float64), _tf32(b).astype(np.float64))
    assert np.abs(exact - rounded).max() > 1e-3  # TF32 is visible in these products

    def product(precision=None):
        return lambda a, b: lax.dot_general(a, b, (((2,), (0,)), ((), ())), precision)

    def close_to(expected, got) -> bool:
        return np.allclose(got, expected, rtol=2e-6, atol=0)

    def inside(a, b):  # a block inside the function reaches its products, as in JAX
        with fg.default_matmul_precision("tensorfloat32"):
            return product()(a, b)

    assert "precision=Precision.HIGH " in str(fg.make_jaxpr(inside)(a, b))
    for backend in CUDA_BACKENDS:
        with jit_backend(backend):
            assert close_to(exact, fg.jit(product())(a, b))  # full float32 by default
            assert close_to(rounded, fg.jit(product("tensorfloat32"))(a, b))
            assert close_to(rounded, fg.jit(inside)(a, b))
            with fg.default_matmul_precision("tensorfloat32"):
                assert close_to(rounded, fg.jit(product())(a, b))
                assert close_to(exact, fg.jit(product(lax.Precision.HIGHEST))(a, b))
                assert close_to(exact, fg.jit(product((None, "highest")))(a, b))
            assert fg.config.default_matmul_precision is None
            # One jitted function traced under each setting: a trace of its own for each.
            f, placed = fg.jit(product()), fg.device_put((a, b), fg.devices(backend)[0])
            for _ in range(2):
                assert close_to(exact, f(*placed))
                with fg.default_matmul_precision("tensorfloat32"):
                    assert close_to(rounded, f(*placed))
            assert len(f._array_cache) == 2
    with jit_backend("llvm"), fg.default_matmul_precision("tensorfloat32"):
        assert close_to(exact, fg.jit(product())(a, b))  # a CPU has no TF32
    with pytest.raises(ValueError, match="unknown matmul precision 'tf32'.*tensorfloat32"):
        fg.config.update("default_matmul_precision", "tf32")


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_the_batched_jacobi_eigensolver_gets_conditioned_matrices(dtype, monkeypatch):
    """Before the batched Jacobi eigensolver runs (stacks of up to 32 rows), each matrix's
    entries below eps^2 times its largest are zero (cuSOLVER's returned the diagonal of
    [[t, t - i], [t + i, t]], t = 4e-288, as its eigenvalues, where zero diagonals were
    right), and a matrix whose largest entry lies outside LAPACK's safe range is scaled by a
    power of two, its eigenvalues scaled back. The matrices the solver sees, and the results
    against the reference."""
    seen, emulated = [], solver.emulated_call

    def recording(call, locate):
        if call.routine in solver.JACOBI_ROUTINES:
            base, offset = locate(call.args[3])
            seen.append(base[offset:].view(dtype).reshape(-1, 2, 2).copy())
        emulated(call, locate)

    monkeypatch.setattr(solver, "emulated_call", recording)
    complex_form = np.dtype(dtype).kind == "c"
    rng = np.random.default_rng(28)
    a = rng.standard_normal((3, 2, 2)) + (
        1j * rng.standard_normal((3, 2, 2)) if complex_form else 0
    )
    tiny, huge, t = 1e-300, 1e300, 4e-288
    stack = np.stack(
        [
            np.array([[t, t - 1j], [t + 1j, t]]) if complex_form else [[t, 1.0], [1.0, t]],
            tiny * (a[1] + a[1].conj().T),
            huge * (a[2] + a[2].conj().T),
        ]
    ).astype(dtype)
    with jit_backend("cuda_emulator"):
        w, v = fg.jit(fnp.linalg.eigh)(stack)
    expected = np.linalg.eigh(stack)[0]
    np.testing.assert_allclose(np.asarray(w), expected, rtol=1e-12)
    v = np.asarray(v)
    rebuilt = v @ (np.asarray(w)[..., None] * v.conj().transpose(0, 2, 1))
    scales = np.abs(stack).max(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(rebuilt / scales, stack / scales, atol=1e-12)
    (solved,) = seen
    assert (np.diagonal(solved[0]) == 0).all()  # t flushed: the off-diagonals stay
    assert np.abs(solved[0, 0, 1]) == 1
    for m in solved[1:]:  # scaled to [1/2, 1)
        assert 0.5 <= np.abs(m.view(np.float64)).max() < 1


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("batched", [True, False])
def test_eigh_of_a_matrix_with_a_non_finite_off_diagonal_is_nan_though_the_solver_says_not(
    dtype, batched, monkeypatch
):
    """cuSOLVER's eigensolvers report no failure for [[1, inf], [inf, 2]] (its batched Jacobi
    solver gave NaN eigenvalues, the identity as eigenvectors and info 0), where LAPACK's
    eigenvectors are NaN too; the emulated solver here answers as cuSOLVER did, and such a
    matrix's results must still be NaN, and the other matrices' untouched."""
    emulated = solver.emulated_call

    def silent(call, locate):
        emulated(call, locate)
        if call.routine not in ("syevd", "heevd"):  # (a batched call: its matrices' come here)
            return
        n, (values, values_at) = call.args[2], locate(call.args[5])
        if np.isnan(values[values_at : values_at + n]).any():  # answered as cuSOLVER did
            matrix, at = locate(call.args[3])
            infos, info_at = locate(call.args[8])
            columns = matrix[at : at + n * n * (2 if call.routine == "heevd" else 1)]
            columns[...] = np.eye(n).astype(dtype).reshape(-1).view(matrix.dtype)
            infos[info_at] = 0

    monkeypatch.setattr(solver, "emulated_call", silent)
    if not batched:
        monkeypatch.setattr(solver, "BATCHED_EIGH_LIMIT", 1)
    finite = np.array([[2.0, 1.0], [1.0, 3.0]])
    stack = np.stack(
        [finite, [[1.0, np.inf], [np.inf, 2.0]], finite, [[np.nan, 0.0], [0.0, 1.0]]]
    ).astype(dtype)
    stack[2, 0, 1] = -np.inf  # the upper triangle, which the lower solver does not read
    with jit_backend("cuda_emulator"):
        v, w = (np.asarray(x) for x in fg.jit(lambda m: lax.eigh(m, symmetrize_input=False))(stack))
    assert np.isnan(w[1]).all() and np.isnan(v[1]).all()
    expected_w, expected_v = np.linalg.eigh(finite)
    for i in (0, 2):
        np.testing.assert_allclose(w[i], expected_w, rtol=1e-14)
        np.testing.assert_allclose(np.abs(v[i]), np.abs(expected_v), rtol=1e-14)
    assert not np.isnan(v[3]).any()  # a non-finite diagonal alone is the solver's to answer


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_decompositions_run_on_the_devices_solver_and_svd_on_the_host(dtype, monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 5, 5))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((3, 5, 5))
    spd = (a @ np.conj(a.transpose(0, 2, 1)) + 5 * np.eye(5)).astype(dtype)
    spd[1, 0, 0] = -100  # not positive definite: that matrix's factor is NaN
    b = rng.standard_normal((3, 5, 2)).astype(dtype)

    def f(m, b):
        q, r = fnp.linalg.qr(m)
        w, v = fnp.linalg.eigh(m)
        lower = fnp.linalg.cholesky(m)
        return (
            lower,
            linalg_decomp.triangular_solve(lower, b, left_side=True, lower=True),
            q @ r,
            w,
            v @ (w[..., None] * fnp.conj(fnp.swapaxes(v, -1, -2))),  # its signs are free
            linalg_decomp.lu(m),
            fnp.linalg.solve(m, b),
            fnp.linalg.svd(m, compute_uv=False),
        )

    single = np.dtype(dtype) in (np.float32, np.complex64)
    assert_same_as_reference(f, spd, b, exact=False, rtol=2e-4 if single else 1e-10)
    with jit_backend("cuda_emulator"):
        executable = fg.jit(f).lower(spd, b).compile().executable
    on_device = {plan.calls[0].routine for plan in executable.solves.values()}
    complex_form = np.dtype(dtype).kind == "c"
    # The stack's Cholesky, LU and eigen decompositions and its triangular solves are one
    # batched call each; the others a call a matrix.
    jacobi = "heevjBatched" if complex_form else "syevjBatched"
    calls = {plan.calls[0].routine: len(plan.calls) for plan in executable.solves.values()}
    assert calls["potrfBatched"] == calls["getrfBatched"] == calls["trsmBatched"] == 1
    assert calls[jacobi] == 1 and calls["geqrf"] == 3
    assert on_device == {"potrfBatched", "trsmBatched", "geqrf", "getrfBatched", jacobi} | (
        {"ungqr"} if complex_form else {"orgqr"}
    )
    steps = [s for s in all_steps(executable.program) if isinstance(s, FortranCall)]
    assert {s.routine for s in steps if s not in executable.solves} == {"gesdd"}
    # Matrices past the batched LU's bound are factored a cuSOLVER call each; past the
    # batched Jacobi eigensolver's, a stack is one call of the batched solver of any size.
    monkeypatch.setattr(solver, "BATCHED_LU_LIMIT", 4)
    monkeypatch.setattr(solver, "BATCHED_EIGH_LIMIT", 4)
    tolerance = 2e-4 if single else 1e-10
    for decompose, routine, count in (
        (linalg_decomp.lu, "getrf", 3),
        (fnp.linalg.eigvalsh, "syevBatched", 1),
    ):
        with jit_backend("cuda_emulator"):
            solves = fg.jit(decompose).lower(spd).compile().executable.solves.values()
            value = fg.tree_util.tree_leaves(fg.jit(decompose)(spd))[0]
        expected = fg.tree_util.tree_leaves(decompose(spd))[0]
        np.testing.assert_allclose(value, expected, rtol=tolerance, atol=tolerance)
        assert [(p.calls[0].routine, len(p.calls)) for p in solves] == [(routine, count)]


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_a_stack_of_large_eigenproblems_is_one_call_or_a_call_a_matrix(dtype, monkeypatch):
    """Past the batched Jacobi solver's 32 rows a stack of eigendecompositions is one call of
    cuSOLVER's batched solver of any size, whose arguments (its workspaces being its own)
    are jobz, uplo, n, the matrices, lda, the eigenvalues, the infos and the count, as
    `eigh_batched.solve` takes them; a device whose library lacks it (`solver.Unavailable`)
    decomposes the matrices one by one, with the same results."""
    from funcgrad.backends.cuda import solver as cuda_solver

    rng = np.random.default_rng(9)
    a = rng.standard_normal((3, 40, 40))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((3, 40, 40))
    stack = (a + np.conj(a.transpose(0, 2, 1))).astype(dtype)
    with jit_backend("cuda_emulator"):
        (plan,) = fg.jit(fnp.linalg.eigh).lower(stack).compile().executable.solves.values()
    (call,) = plan.calls
    args = [a for a in call.args if a not in (cuda_solver.WORK, cuda_solver.LWORK)]
    assert call.routine == "syevBatched" and len(args) == 8
    jobz, uplo, n, matrices, lda, values, infos, count = args
    assert (jobz, uplo, n, lda, count) == ("vector", "lower", 40, 40, 3)
    assert all(isinstance(p, cuda_solver.Pointer) for p in (matrices, values, infos))
    assert infos.narrow and matrices.offset == values.offset == 0

    emulated, made = cuda_solver.emulated_call, []

    def lacking(call, locate):
        made.append(call.routine)
        if call.routine == "syevBatched":
            raise cuda_solver.Unavailable(call.routine)
        emulated(call, locate)

    tolerance = 2e-4 if dtype == np.float32 else 1e-10
    for make in (emulated, lacking):
        monkeypatch.setattr(cuda_solver, "emulated_call", make)
        with jit_backend("cuda_emulator"):
            w, v = (np.asarray(x) for x in fg.jit(fnp.linalg.eigh)(stack))
        np.testing.assert_allclose(w, np.linalg.eigvalsh(stack), rtol=tolerance, atol=tolerance)
        rebuilt = v @ (w[..., None] * np.conj(v.transpose(0, 2, 1)))
        np.testing.assert_allclose(rebuilt, stack, rtol=tolerance, atol=50 * tolerance)
    expected_single = "heevd" if np.dtype(dtype).kind == "c" else "syevd"
    assert made == ["syevBatched"] + [expected_single] * 3


@pytest.mark.skipif("cuda" in CUDA_BACKENDS, reason="a GPU is present")
def test_the_gpu_backend_names_what_is_missing():
    with jit_backend("cuda"), pytest.raises(RuntimeError, match="CuPy|GPU"):
        fg.jit(lambda x: x + 1)(np.ones(3, np.float32))


def test_a_row_kernels_in_place_update_between_its_loops_is_made_once():
    """A bias updated in place beside its weights' rows (an SGD step with its parameters
    donated: a block per row, the bias gradient a fold over the row): the bias's statement,
    between the row's loops, runs on every thread of the block, and each thread's update of
    the element read and written in place applied once more (the bias moved 32 times its
    step on the emulator). One thread writes it, after every thread has read it."""
    rng = np.random.default_rng(41)
    b = rng.standard_normal(64).astype(np.float32)
    w, g = rng.standard_normal((2, 64, 256)).astype(np.float32)

    def step(b, w, g):
        return b - 0.01 * g.sum(axis=1), w - 0.01 * g

    expected = [b - 0.01 * g.astype(np.float64).sum(axis=1), w - 0.01 * g]
    gpu = fg.devices("cuda_emulator")[0]
    jitted = fg.jit(step, donate_argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (both donations usable)
        for _ in range(2):  # walked, then captured
            placed = fg.device_put((b, w, g), gpu)
            where = [gpu.runtime.address(a._value.storage) for a in placed[:2]]
            got = jitted(*placed)
            assert [gpu.runtime.address(a._value.storage) for a in got] == where
            for value, want in zip(got, expected):
                np.testing.assert_allclose(np.asarray(value), want, rtol=1e-5, atol=1e-5)
    with jit_backend("cuda_emulator"):
        text = jitted.lower(b, w, g).compile().as_text()
    once = r"if \(threadIdx\.x == 0\) \{\n[^}]*\b(in\d+)\[i0\];\n[^}]*\b\1\[i0\] = "
    assert re.search(once, text)  # (the element read and written by one thread)


def _mlp_sgd(params, x, y):
    def loss(params):
        h = x
        for w, b in params[:-1]:
            h = fnp.tanh(h @ w + b)
        logits = h @ params[-1][0] + params[-1][1]
        logits = logits - logits.max(axis=1, keepdims=True)
        log_probs = logits - fnp.log(fnp.exp(logits).sum(axis=1, keepdims=True))
        return -(log_probs * y).sum() / x.shape[0]

    grads = fg.grad(loss)(params)
    return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)]


def _layernorm_sgd(params, x, y):
    def loss(params):
        scale, shift = params
        mean = x.mean(axis=1, keepdims=True)
        normed = (x - mean) / fnp.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
        return (((normed * scale + shift) - y) ** 2).sum()

    return [p - 0.01 * g for p, g in zip(params, fg.grad(loss)(params))]


@pytest.mark.parametrize("model", [_mlp_sgd, _layernorm_sgd])
def test_donated_training_steps_compute_what_the_reference_does(model):
    """Training steps with their parameters donated, updated in place on the emulated GPU
    call after call (walked, captured, replayed), against the reference backend's steps."""
    rng = np.random.default_rng(43)
    if model is _mlp_sgd:
        sizes = [48, 160, 144, 10]
        params = [
            ((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
            for m, n in zip(sizes, sizes[1:])
        ]
        x = rng.standard_normal((32, 48)).astype(np.float32)
        y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 32)]
    else:
        params = [np.ones(200, np.float32), np.zeros(200, np.float32)]
        x, y = rng.standard_normal((2, 16, 200)).astype(np.float32)
    gpu = fg.devices("cuda_emulator")[0]
    placed = fg.device_put(params, gpu)
    xs = fg.device_put((x, y), gpu)
    step = fg.jit(model, donate_argnums=0)
    expected = params
    for _ in range(4):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (every parameter's donation usable)
            placed = step(placed, *xs)
        with jit_backend("numpy"):
            expected = fg.jit(model)(expected, x, y)
        for got, want in zip(fg.tree_util.tree_leaves(placed), fg.tree_util.tree_leaves(expected)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("columns", [40, 10])
def test_a_gemm_makes_the_update_of_a_donated_parameter(backend, columns):
    """`w - lr * g` with g a product is one GEMM (`GemmStep.addend`): with w donated it
    updates w where it is (cuBLAS's `alpha` and `beta`), else it reads w apart from its
    result (cuBLASLt's C and D). Momentum's
    `0.9 * v + g` alike, and a loop's steps."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 24)).astype(np.float32)
    w0 = (rng.standard_normal((24, columns)) / 5).astype(np.float32)

    def grad(w):
        return fg.grad(lambda w: fnp.tanh(x @ w).sum())(w)

    def sgd(w):
        return w - 0.1 * grad(w)

    def momentum(v, w):
        return 0.9 * v + grad(w)

    def steps_on_the_device(w):
        return lax.scan(lambda w, _: (sgd(w), None), w, None, length=3)[0]

    gpu = fg.devices(backend)[0]
    for f, args in ((sgd, (w0,)), (momentum, (w0 * 2, w0)), (steps_on_the_device, (w0,))):
        expected = run_on("numpy", f, *args)
        for donated in ((), (0,)):
            placed = fg.device_put(args, gpu)
            where = gpu.runtime.address(placed[0]._value.storage)
            with warnings.catch_warnings(), jit_backend(backend):
                warnings.simplefilter("ignore")  # (a loop's carry takes no donation)
                jitted = fg.jit(f, donate_argnums=donated)
                got = jitted(*placed)
                plan = jitted.lower(*args).compile().fusion_plan()
            assert "* gemm[" in plan
            if donated and f is not steps_on_the_device:  # (a loop's carry takes none)
                assert gpu.runtime.address(got._value.storage) == where
            np.testing.assert_allclose(np.asarray(got), expected[0], rtol=2e-5, atol=2e-5)
    stacked = rng.standard_normal((3, 32, 24)).astype(np.float32)
    ws, vs = (rng.standard_normal((3, n, columns)).astype(np.float32) for n in (32, 24))

    def batched(ws, vs):  # (a batch of products)
        return ws - 0.1 * (stacked @ vs)

    assert_same_as_reference(batched, ws, vs, exact=False, rtol=2e-5)
    with jit_backend("cuda_emulator"):
        assert "* gemm[batch=3," in fg.jit(batched).lower(ws, vs).compile().fusion_plan()
    # On a GPU, cuBLASLt made the updates apart from their results (none fell back to a copy).
    assert getattr(gpu.runtime, "_lt_refused", None) is None
    tall, wide = x.T[:, :8], rng.standard_normal((8, columns)).astype(np.float32)

    def short_update(w, tall, wide):  # (a product of 8 terms fuses into the update instead)
        return w - 0.1 * (tall @ wide)

    assert_same_as_reference(short_update, w0, tall, wide, exact=False, rtol=2e-5)
    with jit_backend("cuda_emulator"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = fg.jit(short_update, donate_argnums=0).lower(w0, tall, wide).compile()
    assert "gemm[" not in plan.fusion_plan()


def test_a_donated_argument_and_the_output_it_hosts_are_one_kernel_parameter():
    """Every parameter is `__restrict__`: a kernel updating a buffer in place must see one."""
    x = np.ones(64, np.float32)
    step = fg.jit(lambda p, g: p - 0.1 * g, donate_argnums=0)
    with jit_backend("cuda_emulator"):
        text = step.lower(x, x).compile().as_text()
    (signature,) = re.findall(r"__global__ void \w+\(([^)]*)\)", text)
    parameters = signature.split(", ")
    assert len(parameters) == 2  # p (written in place) and g, not p, g and the output
    assert sum(p.startswith("const ") for p in parameters) == 1
