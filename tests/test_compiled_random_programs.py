"""Random programs, compiled: hypothesis draws programs from elementwise math, broadcasting,
reductions, slices and concatenation, selects, casts, cond, scan and fori_loop, over float32,
float64, int32, complex64 and complex128, then applies jit, grad or vmap on top; each compiled
backend (LLVM, and the CUDA renderer's code run by the host emulator) must agree with the NumPy
reference backend on every one, at each of three calls with new arguments (on a GPU: walked step
by step, captured as a graph, replayed).

A second kind of program, exact, draws gathers and scatters in every mode, dynamic slices,
sorts, cumulative ops, interior padding, conversions, switch, cond, while_loop and reversed
scans on whole numbers with NaN, infinities and signed zeros among them and indices outside
their ranges, in int32, uint8, float16, float32 and complex64, under jit or vmap: the compiled
results must equal the reference's element for element.

A third kind, layouts and rows, draws programs over (batch, rows, cols) with rows of widths
about the GPU renderer's thresholds: reductions over any axes through transposes and
reshapes, softmax and layernorm chains, batched and transposed products with their update and
bias epilogues, argmax and argmin, cumulative ops along any axis, row statistics read by other
rows and loops around row kernels, returning several values (inputs among them, maybe twice)
under jit, grad, vmap along any axis, or with a donated input."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from checks import assert_close_or_as_near_the_truth, jit_backend
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.tools.recipes import CUDA_BACKENDS

FLOAT_STEPS = [
    "exp",
    "tanh",
    "sin",
    "log1p_abs",
    "sqrt_abs",
    "logistic",
    "neg",
    "floor",
    "add",
    "mul",
    "sub",
    "max",
    "min",
    "div",
    "row_broadcast",
    "col_broadcast",
    "row_max_broadcast",
    "where",
    "slice_concat",
    "reverse",
    "cast_roundtrip",
    "cond",
    "scan_rows",
    "fori",
]
# Complex values: math kept away from poles and branch cuts, the parts, and control flow
# deciding on real parts.
COMPLEX_STEPS = [
    "exp_scaled",
    "tanh_scaled",
    "sin",
    "sqrt_abs",
    "log_shifted",
    "neg",
    "conj",
    "real_imag",
    "abs",
    "add",
    "mul",
    "sub",
    "div",
    "complex_div",
    "row_broadcast",
    "col_broadcast",
    "where_real",
    "slice_concat",
    "reverse",
    "cond_real",
    "scan_complex",
    "fori_complex",
    "cumsum",
    "cumprod",
    "matmul_complex",
    "pad_slice",
    "take_rows",
    "roll",
    "square",
    "fft_rows",
]
INT_STEPS = [
    "add",
    "mul",
    "sub",
    "max",
    "min",
    "rem",
    "neg",
    "row_broadcast",
    "where",
    "slice_concat",
    "reverse",
    "cond",
    "scan_rows",
    "fori",
]


def apply_step(step: str, pool: list, pick: list[int]):
    """One step on values of one shape (rows, cols); `pick` chooses operands from the pool."""
    a, b = pool[pick[0] % len(pool)], pool[pick[1] % len(pool)]
    is_float = fnp.issubdtype(a.dtype, fnp.inexact)
    if step == "exp":
        return fnp.exp(fnp.clip(a, -4, 4))
    if step == "tanh":
        return fnp.tanh(a)
    if step == "sin":
        return fnp.sin(a)
    if step == "log1p_abs":
        return fnp.log1p(fnp.abs(a))
    if step == "sqrt_abs":
        return fnp.sqrt(fnp.abs(a) + 0.5)
    if step == "logistic":
        return fg.nn.sigmoid(a)
    if step == "neg":
        return -a
    if step == "floor":
        return fnp.floor(a * 3) / 3
    if step == "add":
        return a + b
    if step == "mul":
        return a * b if is_float else (a * b) % 1000
    if step == "sub":
        return a - b
    if step == "max":
        return fnp.maximum(a, b)
    if step == "min":
        return fnp.minimum(a, b)
    if step == "div":
        return a / (fnp.abs(b) + 1.0)
    if step == "rem":
        return lax.rem(a, fnp.abs(b) % 7 + 1)
    if step == "row_broadcast":
        return a + b.sum(axis=0, keepdims=True)
    if step == "col_broadcast":
        return a * fnp.mean(b, axis=1, keepdims=True)
    if step == "row_max_broadcast":
        return a - b.max(axis=1, keepdims=True)
    if step == "where":
        return fnp.where(a > b, a, b * 2)
    if step == "slice_concat":
        k = a.shape[1] // 2
        return fnp.concatenate([a[:, k:], b[:, :k]], axis=1)
    if step == "reverse":
        return a[::-1] + b[:, ::-1]
    if step == "cast_roundtrip":
        return a.astype(fnp.float16).astype(a.dtype) + b
    if step == "cond":
        return lax.cond(fnp.sum(a) > 0, lambda u, v: u * 2 - v, lambda u, v: u + v, a, b)
    if step == "scan_rows":

        def row_step(carry, row):
            new = fnp.tanh(carry + row) if is_float else (carry + row) % 100
            return new, new * 2

        _, rows = lax.scan(row_step, b[0], a)
        return rows
    if step == "fori":
        if is_float:
            return lax.fori_loop(0, 3, lambda i, v: fnp.tanh(v * 0.9 + b * 0.1), a)
        return lax.fori_loop(0, 3, lambda i, v: (v + b + i) % 50, a)
    if step == "cumsum":
        return fnp.cumsum(a, axis=1) + b if is_float else (fnp.cumsum(a, axis=0) + b) % 1000
    if step == "sort_rows":
        return fnp.sort(a, axis=1) - b
    if step == "argmax_onehot":
        return a + (fnp.arange(a.shape[1]) == fnp.argmax(b, axis=1)[:, None]).astype(a.dtype)
    if step == "matmul":
        return fnp.tanh(a @ b.T @ a * 0.3)
    if step == "col_sum_broadcast":
        return a - b.sum(axis=0) if is_float else a - b.max(axis=0)
    if step == "pad_slice":
        return fnp.pad(a, ((1, 0), (0, 2)))[:-1, 2:] + b
    if step == "take_rows":
        return fnp.take(a, fnp.array([a.shape[0] - 1] + [0] * (a.shape[0] - 1)), axis=0) * b
    if step == "roll":
        return fnp.roll(a, 1, axis=1) - b
    if step == "while":

        def body(carry):
            i, v = carry
            return i + 1, (fnp.tanh(v + b) if is_float else (v + b) % 97)

        return lax.while_loop(lambda c: c[0] < 3, body, (0, a))[1]
    if step == "erf":
        return lax.erf(a * 0.7)
    if step == "atan2":
        return fnp.arctan2(a, b)
    if step == "square":
        return a * a
    if step == "clamp":
        return fnp.clip(a, -1, 1) if is_float else fnp.clip(a, -5, 5)
    if step == "expm1":
        return fnp.expm1(fnp.clip(a, -3, 3))
    if step == "softmax_rows":
        return fg.nn.softmax(a, axis=1) + b
    if step == "bits":
        return (a ^ (b << 2)) & 0x3F
    if step == "compare_cast":
        return (a >= b).astype(a.dtype) * 3 - (a == b).astype(a.dtype)
    if step == "exp_scaled":
        return fnp.exp(a * 0.3)
    if step == "tanh_scaled":
        return fnp.tanh(a * 0.3)
    if step == "log_shifted":
        return fnp.log(a + 3.0)
    if step == "conj":
        return fnp.conj(a) * b
    if step == "real_imag":
        return lax.complex(fnp.real(a) * 2, fnp.imag(b)) if fnp.iscomplexobj(a + b) else a + b
    if step == "abs":
        return fnp.abs(a) + b
    if step == "complex_div":
        return a / (b * b + 1.5)
    if step == "where_real":
        return fnp.where(fnp.real(a) > fnp.real(b), a, b * 2)
    # Steps that carry or choose values need one type for them: an abs may have made one real.
    if step == "cond_real":
        a, b = _complex(a, b)
        return lax.cond(
            fnp.real(fnp.sum(a)) > 0, lambda u, v: u * 2 - v, lambda u, v: u * 1j + v, a, b
        )
    if step == "scan_complex":
        a, b = _complex(a, b)

        def complex_row(carry, row):
            new = fnp.tanh((carry + row) * 0.3)
            return new, new * 2

        _, rows = lax.scan(complex_row, b[0], a)
        return rows
    if step == "fori_complex":
        a, b = _complex(a, b)
        return lax.fori_loop(0, 3, lambda i, v: fnp.tanh((v * 0.9 + b * 0.1) * 0.3), a)
    if step == "cumprod":
        return fnp.cumprod(fnp.tanh(a * 0.3) + 1, axis=1) - b
    if step == "matmul_complex":
        return fnp.tanh((a @ b.T @ a) * 0.1)
    if step == "fft_rows":
        return fnp.fft.ifft(fnp.fft.fft(a, axis=1) * fnp.arange(1.0, a.shape[1] + 1), axis=1) + b
    raise AssertionError(step)


def _complex(a, b):
    """`a` and `b` in their common complex type."""
    common = fnp.result_type(a, b, 1j)
    return a.astype(common), b.astype(common)


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32, np.complex64, np.complex128]))
    steps = {np.int32: INT_STEPS, np.complex64: COMPLEX_STEPS, np.complex128: COMPLEX_STEPS}.get(
        dtype, FLOAT_STEPS
    )
    program = draw(
        st.lists(
            st.tuples(st.sampled_from(steps), st.integers(0, 9), st.integers(0, 9)),
            min_size=1,
            max_size=12,
        )
    )
    # (rows of 130 run on a GPU block each, their intermediates held by its threads)
    rows, cols = draw(st.integers(1, 4)), draw(st.one_of(st.integers(2, 6), st.just(130)))
    transform = draw(
        st.sampled_from(["jit", "grad", "vmap"] if dtype != np.int32 else ["jit", "vmap"])
    )
    return dtype, program, (rows, cols), transform


def make_function(program):
    def f(x, y):
        pool = [x, y]
        for step, i, j in program:
            pool.append(apply_step(step, pool, [i, j]))
        return pool[-1]

    return f


def run_on(backend: str, fun, calls: list) -> list[np.ndarray]:
    """jit(fun) on `backend`, called with each argument tuple in `calls` in turn: on a GPU the
    first call is walked step by step, the second captured as a graph and the third replays
    it."""
    with jit_backend(backend):
        jitted = fg.jit(fun)
        return [np.asarray(jitted(*args)) for args in calls]


def leaves_on(backend: str, fun, calls: list, donated=()) -> list[list[np.ndarray]]:
    """As `run_on`, for a function returning a tuple: each call's results, as arrays. The
    arguments at `donated` are placed on the device first, and given up to the call."""
    with jit_backend(backend):
        jitted = fg.jit(fun, donate_argnums=donated)
        results = []
        for args in calls:
            args = [fg.device_put(a) if k in donated else a for k, a in enumerate(args)]
            results.append([np.asarray(r) for r in fg.tree.leaves(jitted(*args))])
        return results


@pytest.mark.parametrize(
    "backend", ["llvm"] + [pytest.param(b, marks=pytest.mark.cuda) for b in CUDA_BACKENDS]
)
@settings(deadline=None)
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_compile_to_what_the_reference_computes(backend, case, seed):
    dtype, program, shape, transform = case
    rng = np.random.default_rng(seed)

    def arguments():
        if dtype == np.int32:
            return [rng.integers(-20, 20, shape).astype(dtype) for _ in range(2)]
        if np.dtype(dtype).kind == "c":
            return [
                (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
                for _ in range(2)
            ]
        return [rng.standard_normal(shape).astype(dtype) for _ in range(2)]

    calls = [arguments() for _ in range(3)]
    f = make_function(program)
    if transform == "grad":
        fun = fg.grad(lambda u, v: fnp.sum(fnp.real(fnp.tanh(f(u, v) * 0.3))), argnums=(0, 1))
    elif transform == "vmap":
        fun = fg.vmap(f, in_axes=(0, None))
        calls = [[np.stack([x, x * 2 if dtype != np.int32 else x + 1, -x]), y] for x, y in calls]
    else:
        fun = f
    # (the same calls in float64 or complex128, for results far from the reference's)
    wide = {np.float32: np.float64, np.complex64: np.complex128}.get(dtype)

    @functools.cache
    def exact():
        return run_on("numpy", fun, [[a.astype(wide) for a in args] for args in calls])

    results = zip(run_on(backend, fun, calls), run_on("numpy", fun, calls))
    for k, (got, expected) in enumerate(results):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        if dtype == np.int32:
            np.testing.assert_array_equal(got, expected)
        elif wide is None:
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
        else:
            assert_close_or_as_near_the_truth(got, expected, 2e-4, lambda k=k: exact()[k])


# ---------------------------------------------------------------------------------------------
# Indexing, data movement and control flow, exactly: whole numbers (so that no sum or product
# rounds, in whatever order it is taken) with NaN, infinities and signed zeros among them,
# indices and trip counts that reach outside their ranges, in integer, half, single and complex
# dtypes. Each compiled backend must give the reference's values element for element.

EXACT_DTYPES = [np.int32, np.uint8, np.float32, np.float16, np.complex64]
EXACT_STEPS = [
    "take_fill",
    "take_clip",
    "scatter_add",
    "scatter_mul",
    "scatter_max",
    "update_slice",
    "slice_row",
    "sort_by",
    "argsort_take",
    "cumulative",
    "pad_interior",
    "corner",
    "reverse",
    "where",
    "convert",
    "switch",
    "cond",
    "while",
    "scan_reverse",
]


def _order_key(v):
    """A real value to compare by: a complex value's real part."""
    return fnp.real(v) if fnp.iscomplexobj(v) else v


def _filler(dtype) -> np.ndarray:
    """2.5 (7 for integers): a fill or padding value whose parts differ for complex values."""
    return np.asarray(7 if np.issubdtype(dtype, np.integer) else 2.5, dtype)


def apply_exact_step(step: str, pool: list, pick: list[int], at, k):
    """One step on values of one shape (rows, cols) and dtype; `at` (cols,) and `k` are
    traced int32 indices that may lie outside the values."""
    a, b = pool[pick[0] % len(pool)], pool[pick[1] % len(pool)]
    is_complex = fnp.iscomplexobj(a)
    cols = a.shape[1]
    if step == "take_fill":
        return fnp.take(a, at, axis=1, mode="fill", fill_value=_filler(a.dtype))
    if step == "take_clip":
        return fnp.take(b, at, axis=1, mode="clip")
    if step == "scatter_add":
        return a.at[:, at].add(b, mode="drop")
    if step == "scatter_mul":  # (exact factors: 2, and -1 or i)
        factor = fnp.where(_order_key(b) > 0, 2, 1j if is_complex else -1).astype(a.dtype)
        return a.at[:, at].multiply(factor, mode="clip")
    if step == "scatter_max":
        if is_complex:
            return a.at[:, at[:1]].set(b[:, :1])
        return a.at[:, at].max(b)
    if step == "update_slice":
        return lax.dynamic_update_slice(a, b[:1, : max(1, cols // 2)], (k, k - 2))
    if step == "slice_row":
        return fnp.broadcast_to(lax.dynamic_slice(b, (k, 0), (1, cols)), a.shape)
    if step == "sort_by":
        return lax.sort((_order_key(b), a), dimension=1, num_keys=1)[1]
    if step == "argsort_take":
        return fnp.take_along_axis(a, fnp.argsort(_order_key(b), axis=1, stable=True), axis=1)
    if step == "cumulative":
        if is_complex or np.issubdtype(a.dtype, np.integer):
            return lax.cumsum(a, 1, reverse=True)
        return lax.cummax(a, 1)
    if step == "pad_interior":
        padded = lax.pad(a, _filler(a.dtype), ((0, 0, 0), (-1, 1, 1)))
        return padded[:, :cols]
    if step == "corner":  # (scalars, the input k among them, through a reshape into a pad)
        first = fnp.where(k > 1, a[0, 0], k.astype(a.dtype))
        padding = ((a.shape[0] - 1, 0, 0), (0, cols - 1, 0))
        return lax.pad(lax.reshape(first, (1, 1)), _filler(a.dtype), padding)
    if step == "reverse":
        return lax.rev(a, (0, 1))
    if step == "where":
        return fnp.where(_order_key(a) > _order_key(b), a, b)
    if step == "convert":  # floats to int32 saturate (NaN is 0); integers through float16
        middle = np.float16 if np.issubdtype(a.dtype, np.integer) else np.int32
        return lax.convert_element_type(lax.convert_element_type(a, middle), a.dtype)
    if step == "switch":  # (an index outside the branches takes the nearest one)
        branches = [lambda u, v: u, lambda u, v: v, lambda u, v: lax.rev(u, (1,))]
        return lax.switch(k, branches, a, b)
    if step == "cond":
        return lax.cond(k > 1, lambda u, v: lax.rev(v, (0,)), lambda u, v: u, a, b)
    if step == "while":  # (as many turns as k says, none when it is negative)

        def rotate(carry):
            i, v = carry
            return i + 1, fnp.concatenate([v[:, 1:], v[:, :1]], axis=1)

        return lax.while_loop(lambda c: (c[0] < k) & (c[0] < 5), rotate, (0, a))[1]
    if step == "scan_reverse":  # (carries of three dtypes)

        def row_step(carry, row):
            kept, count, flag = carry
            kept = fnp.where(flag, kept, row)
            return (kept, count + 1, ~flag), kept

        (_, count, _), rows = lax.scan(row_step, (b[0], k, k > 0), a, reverse=True)
        return lax.dynamic_update_slice(rows, b[:1], (count % a.shape[0], 0))
    raise AssertionError(step)


@st.composite
def exact_programs(draw):
    dtype = draw(st.sampled_from(EXACT_DTYPES))
    program = draw(
        st.lists(
            st.tuples(st.sampled_from(EXACT_STEPS), st.integers(0, 9), st.integers(0, 9)),
            min_size=1,
            max_size=8,
        )
    )
    rows, cols = draw(st.integers(1, 4)), draw(st.one_of(st.integers(2, 6), st.just(130)))
    return dtype, program, (rows, cols), draw(st.sampled_from(["jit", "vmap"]))


def exact_arguments(rng, dtype, shape) -> list[np.ndarray]:
    """Two whole-number operands, with NaN, infinities and -0.0 among the floats; indices
    along a row from twice the row's length below to twice above; a scalar index around the
    rows."""
    rows, cols = shape
    operands = []
    for _ in range(2):
        values = rng.integers(0 if dtype == np.uint8 else -20, 21, shape).astype(np.float64)
        if not np.issubdtype(dtype, np.integer):
            special = np.array([np.nan, np.inf, -np.inf, -0.0])[rng.integers(0, 4, shape)]
            values = np.where(rng.random(shape) < 0.15, special, values)
        if np.issubdtype(dtype, np.complexfloating):
            values = values + 1j * rng.integers(-20, 21, shape)
        operands.append(values.astype(dtype))
    at = rng.integers(-2 * cols, 2 * cols, cols).astype(np.int32)
    return operands + [at, np.int32(rng.integers(-3, rows + 3))]


@pytest.mark.parametrize(
    "backend", ["llvm"] + [pytest.param(b, marks=pytest.mark.cuda) for b in CUDA_BACKENDS]
)
@settings(deadline=None)
@given(exact_programs(), st.integers(0, 2**31 - 1))
def test_random_indexing_and_control_programs_compile_exactly(backend, case, seed):
    dtype, program, shape, transform = case
    rng = np.random.default_rng(seed)

    def f(x, y, at, k):
        pool = [x, y]
        for step, i, j in program:
            pool.append(apply_exact_step(step, pool, [i, j], at, k))
        return pool[-1]

    calls = [exact_arguments(rng, dtype, shape) for _ in range(3)]
    fun = f
    if transform == "vmap":  # (the indices too: each lane its own)
        fun = fg.vmap(f, in_axes=(0, None, 0, 0))
        calls = [
            [np.stack([x, x[::-1], y]), y, np.stack([at, at[::-1], -at]), np.stack([k, k + 1, -k])]
            for x, y, at, k in calls
        ]
    with np.errstate(all="ignore"):
        results = zip(run_on(backend, fun, calls), run_on("numpy", fun, calls))
    for got, expected in results:
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------------------------------------
# Layouts and rows: values of shape (batch, rows, cols), rows of widths about the GPU
# renderer's thresholds (a thread or a block per row, held or shared scratch), through
# reductions over any axes (kept or broadcast back through transposes and reshapes), row
# chains (softmax, layernorm), products with batch dimensions and transposed operands with
# their epilogues (GEMM updates, biases), argmax and argmin, cumulative sums and products
# along any axis, and row statistics read by the same rows and by others. A program returns
# several values: its last, others of its pool (an input among them, maybe twice).

LAYOUT_STEPS = [
    "softmax",
    "layernorm",
    "center_axes",
    "transpose_reduce",
    "reshape_reduce",
    "rows_reshaped",
    "batched_product_update",
    "transposed_product_bias",
    "flat_product_update",
    "argbest",
    "cumulative",
    "row_stats_other_rows",
    "stat_chain",
    "linear_layer",
    "onehot_best",
    "input_map",
    "shifted",
    "regrouped",
    "broadcast_stat",
    "scan_softmax",
    "fori_layernorm",
    "cond_stat",
    "tanh",
    "mul",
]
# (a width of one, of a warp and either side, of a short row's limit, of a block's and either
# side, of several blocks' and past shared memory's scratch in float64)
LAYOUT_WIDTHS = [1, 2, 31, 32, 33, 64, 127, 128, 129, 1030, 4100]
LAYOUT_ROWS = [1, 2, 3, 5, 33, 70]
LAYOUT_AXES = [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]
PERMUTATIONS = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]


def _reduce(kind: int, a, axis, keepdims=True):
    """A sum, mean, max or min of `a` over `axis`."""
    reducer = [fnp.sum, fnp.mean, fnp.max, fnp.min][kind % 4]
    return reducer(a, axis=axis, keepdims=keepdims)


def apply_layout_step(step: str, pool: list, pick: list[int]):
    """One step on values of one shape (batch, rows, cols); `pick` chooses operands from the
    pool (and an axis, a permutation or a variant)."""
    a, b = pool[pick[0] % len(pool)], pool[pick[1] % len(pool)]
    variant = pick[2]
    batch, rows, cols = a.shape
    axis = variant % 3
    if step == "softmax":  # (max, subtract, exp, sum, divide along an axis)
        e = fnp.exp(a - fnp.max(a, axis=axis, keepdims=True))
        return e / fnp.sum(e, axis=axis, keepdims=True) + b * 0.5
    if step == "layernorm":  # (over the row or over each batch element; a bias-like scale)
        axes = (2,) if variant % 2 else (1, 2)
        centred = a - fnp.mean(a, axis=axes, keepdims=True)
        scale = fnp.mean(b, axis=(0, 1)) + 1.0
        return (
            centred / fnp.sqrt(fnp.mean(centred * centred, axis=axes, keepdims=True) + 1e-3) * scale
            + b[0, 0]
        )
    if step == "center_axes":
        return a - _reduce(variant, b, LAYOUT_AXES[variant % len(LAYOUT_AXES)])
    if step == "transpose_reduce":  # (reduce a transpose's last axis, transpose back)
        order = PERMUTATIONS[variant % len(PERMUTATIONS)]
        reduced = _reduce(variant // 6, fnp.transpose(a, order), -1)
        return b * 0.5 - fnp.transpose(reduced, np.argsort(order))
    if step == "reshape_reduce":  # (rows and columns regrouped, not transposed)
        regrouped = fnp.reshape(a, (batch, cols, rows))
        if variant % 2:
            return b + fnp.reshape(_reduce(variant // 2, regrouped, 1, False), (batch, rows, 1))
        return b + fnp.reshape(_reduce(variant // 2, regrouped, 2, False), (batch, 1, cols))
    if step == "rows_reshaped":  # (a softmax over the flattened rows of all batch elements)
        flat = (
            fnp.reshape(a, (batch * rows, cols))
            if variant % 2
            else fnp.reshape(a, (batch, rows * cols))
        )
        return fnp.reshape(fg.nn.softmax(flat, axis=-1) * cols, a.shape) - b
    if step == "batched_product_update":  # (w - lr * g and 0.9 * v + g, g a batched product)
        scores = fnp.einsum("brc,bsc->brs", a / cols, b)
        update = fnp.einsum("brs,bsc->brc", scores / rows, b)
        return a - 0.1 * update if variant % 2 else 0.9 * b + update
    if step == "transposed_product_bias":  # (contract the rows, batch the batch, a bias)
        gram = lax.dot_general(a / rows, b, (((1,), (1,)), ((0,), (0,))))  # (batch, cols, cols)
        product = fnp.swapaxes(lax.dot_general(gram / cols, a, (((1,), (2,)), ((0,), (0,)))), 1, 2)
        return fnp.tanh(product + fnp.sum(b, axis=(0, 1)) * 0.1)
    if step == "flat_product_update":  # (a 2-D GEMM on flattened rows, its weights transposed)
        flat_a, flat_b = fnp.reshape(a, (-1, cols)), fnp.reshape(b, (-1, cols))
        weights = flat_b.T @ (flat_b / (flat_b.shape[0] * cols))
        product = flat_a @ weights.T if variant % 2 else (weights @ flat_a.T).T
        return fnp.reshape(flat_a - 0.5 * product, a.shape)
    if step == "linear_layer":  # (rows times a weight, a bias, a rectifier; maybe transposed)
        flat_a = fnp.reshape(a, (-1, cols))
        weights = fnp.tanh(b[0, : min(rows, cols)]).T @ b[-1, : min(rows, cols)] / cols
        out = fnp.maximum(flat_a @ weights + b[0, 0], 0.0)
        if variant % 2:
            return fnp.reshape(out.T, (cols, -1)).T.reshape(a.shape)
        return fnp.reshape(out, a.shape)
    if step == "argbest":  # (of an input, whose ties cannot come from rounding)
        source = pool[variant % 2]
        best = fnp.argmax if variant % 4 < 2 else fnp.argmin
        where = best(source, axis=axis, keepdims=True)
        return a - fnp.take_along_axis(b, where, axis=axis) + where.astype(a.dtype) * 0.01
    if step == "cumulative":
        kind = variant // 3 % 4
        if kind == 0:
            return fnp.cumprod(1.0 + 0.01 * fnp.tanh(a), axis=axis) - b
        if kind == 1:
            return lax.cumsum(a, axis, reverse=True) / math.sqrt(a.shape[axis]) + b
        if kind == 2:
            counts = fnp.arange(1, a.shape[axis] + 1, dtype=a.dtype).reshape(
                [-1 if n == axis else 1 for n in range(3)]
            )
            return lax.cumlogsumexp(a, axis) - fnp.log(counts) * b
        return fnp.cumsum(a, axis=axis) / math.sqrt(a.shape[axis]) + b
    if step == "onehot_best":  # (an input's argmax or argmin against an iota along the axis)
        order = PERMUTATIONS[variant % 6]
        best = fnp.argmax if variant % 4 < 2 else fnp.argmin
        where = best(fnp.transpose(pool[variant % 2], order), axis=2, keepdims=True)
        iota = lax.broadcasted_iota(np.int32, a.shape, order[2])
        return fnp.where(iota == fnp.transpose(where, np.argsort(order)), a, b * 0.5)
    if step == "shifted":  # (other elements of the row, and of other rows)
        rolled = fnp.concatenate([a[..., 1:], a[..., :1]], axis=-1)
        return rolled * b + a[..., ::-1] - a[:, ::-1] * 0.5
    if step == "regrouped":  # (flat rows shifted, reversed or read transposed, regrouped)
        flat = fnp.reshape(a, (batch, rows * cols))
        kind = variant % 4
        if kind == 0:
            moved = fnp.pad(flat[:, 1:], ((0, 0), (0, 1)))
        elif kind == 1:
            moved = flat[:, ::-1]
        elif kind == 2:
            moved = fnp.reshape(fnp.transpose(a, (0, 2, 1)), (batch, -1))
        else:
            moved = fnp.reshape(fnp.transpose(a, (2, 1, 0)), (-1, batch)).T
        return fnp.reshape(moved, a.shape) * b + fnp.max(
            fnp.reshape(moved[:, ::-1], a.shape), axis=2, keepdims=True
        )
    if step == "broadcast_stat":  # (a statistic spread over its axis, later steps reading it)
        return fnp.broadcast_to(_reduce(variant // 3, a, axis) * 0.5, a.shape)
    if step == "scan_softmax":  # (row kernels inside a loop: a GPU runs it on one block)

        def batch_step(carry, pair):
            u, v = pair
            e = fnp.exp(u + carry - fnp.max(u + carry, axis=axis % 2, keepdims=True))
            out = e / fnp.sum(e, axis=axis % 2, keepdims=True) + v
            return fnp.mean(out, axis=0) * 0.5, out

        start = fnp.zeros(cols, fnp.result_type(a, b))
        return lax.scan(batch_step, start, (a, b), reverse=variant % 2 == 1)[1]
    if step == "fori_layernorm":

        def normalize(i, v):
            centred = v - fnp.mean(v, axis=axis, keepdims=True)
            scale = fnp.sqrt(fnp.mean(centred * centred, axis=axis, keepdims=True) + 0.5)
            return centred / scale + b * 0.1

        return lax.fori_loop(0, 2, normalize, a)
    if step == "cond_stat":  # (a reduction deciding, reductions in both branches)
        return lax.cond(
            fnp.sum(a[0]) > 0,
            lambda u, v: u - fnp.max(v, axis=axis, keepdims=True),
            lambda u, v: (
                fnp.cumsum(u, axis=2 - axis) * 0.1 + fnp.min(v, axis=(1, 2), keepdims=True)
            ),
            a,
            b,
        )
    if step == "input_map":  # (a map of the inputs alone, beside the program's chain)
        return fnp.sin(pool[variant % 2]) * pool[pick[0] % 2] + 0.5
    if step == "row_stats_other_rows":  # (a row's statistic read by its row and others)
        stat = _reduce(variant, a, 2)
        return b * stat[:, ::-1] + a - stat + fnp.roll(stat, 1, axis=0)
    if step == "stat_chain":  # (a second statistic of a value scaled by the first)
        first = fnp.mean(a, axis=axis, keepdims=True)
        second = fnp.mean(a * first - b, axis=axis, keepdims=True)
        return a * second - b * first
    if step == "tanh":
        return fnp.tanh(a)
    if step == "mul":
        return a * b
    raise AssertionError(step)


@st.composite
def layout_programs(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    program = draw(
        st.lists(
            st.tuples(
                st.sampled_from(LAYOUT_STEPS),
                st.integers(0, 9),
                st.integers(0, 9),
                st.integers(0, 23),
            ),
            min_size=1,
            max_size=6,
        )
    )
    # (fewer rows of the wider widths: the emulator runs a block's threads at once, meeting
    # at barriers, so its time goes with the rows that take blocks)
    width = draw(st.sampled_from(LAYOUT_WIDTHS))
    fitting = [r for r in LAYOUT_ROWS if r * width <= 10_000 and (width < 32 or r <= 33)]
    rows = draw(st.sampled_from(fitting))
    shape = (draw(st.integers(1, 2)), rows, width)
    # (the pool's values returned besides the last: an input may be among them, or twice)
    returned = draw(st.lists(st.integers(0, 12), max_size=3))
    # (vmap's lanes along any axis of the first input and of the results; a donated input)
    transform = draw(st.sampled_from(["jit", "grad", "vmap", "donate"]))
    lanes = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    return dtype, program, shape, returned, transform, lanes


@pytest.mark.parametrize(
    "backend", ["llvm"] + [pytest.param(b, marks=pytest.mark.cuda) for b in CUDA_BACKENDS]
)
@pytest.mark.filterwarnings("ignore:some donated buffers were not usable")
# (half the profile's cases: each compiles more kernels than the others' do, and the emulator
# runs its rows' blocks with their threads at once)
@settings(deadline=None, max_examples=max(1, settings().max_examples // 2))
@given(layout_programs(), st.integers(0, 2**31 - 1))
def test_random_layout_and_row_programs_compile_to_what_the_reference_computes(backend, case, seed):
    dtype, program, shape, returned, transform, (lanes_in, lanes_out) = case
    rng = np.random.default_rng(seed)

    def f(x, y):
        pool = [x, y]
        for step, i, j, variant in program:
            pool.append(apply_layout_step(step, pool, [i, j, variant]))
        return (pool[-1], *(pool[k % len(pool)] for k in returned))

    calls = [[rng.standard_normal(shape).astype(dtype) for _ in range(2)] for _ in range(3)]
    if transform == "grad":
        fun = fg.grad(
            lambda u, v: sum(fnp.sum(fnp.tanh(out * 0.3)) for out in f(u, v)), argnums=(0, 1)
        )
    elif transform == "vmap":
        fun = fg.vmap(f, in_axes=(lanes_in, None), out_axes=lanes_out)
        calls = [[np.stack([x, -x], axis=lanes_in), y] for x, y in calls]
    else:
        fun = f
    donated = (0,) if transform == "donate" else ()

    @functools.cache
    def exact():
        wide = [[a.astype(np.float64) for a in args] for args in calls]
        return leaves_on("numpy", fun, wide)

    compiled = leaves_on(backend, fun, calls, donated)
    reference = leaves_on("numpy", fun, calls)
    for k, (got_all, expected_all) in enumerate(zip(compiled, reference)):
        for n, (got, expected) in enumerate(zip(got_all, expected_all)):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            if dtype == np.float64:
                np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
            else:
                assert_close_or_as_near_the_truth(
                    got, expected, 2e-4, lambda k=k, n=n: exact()[k][n]
                )
