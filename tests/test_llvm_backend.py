"""The LLVM backend against the NumPy reference backend: values, fusion, vectorization,
control flow, memory plans and errors."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pytest
from checks import jit_backend, products_as
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.backends.llvm import engine, prefetch, render
from funcgrad.compiler import jacobi, rows, schedule
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.parallel import linear
from funcgrad.config import config
from funcgrad.transforms.jit import compile_jaxpr


def assert_same_as_reference(f, *args, rtol=2e-6, atol=1e-6):
    """jit(f) on LLVM equals jit(f) on the NumPy backend (dtypes exact, values close)."""
    with jit_backend("numpy"):
        expected = fg.jit(f)(*args)
    with jit_backend("llvm"):
        got = fg.jit(f)(*args)
    for e, g in zip(fg.tree_util.tree_leaves(expected), fg.tree_util.tree_leaves(got)):
        e, g = np.asarray(e), np.asarray(g)
        assert g.dtype == e.dtype and g.shape == e.shape
        if e.dtype.kind == "f" or e.dtype == fnp.bfloat16:
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol, atol)
        else:
            np.testing.assert_array_equal(g, e)


def compiled(f, *args):
    with jit_backend("llvm"):
        return fg.jit(f).lower(*args).compile().executable


rng = np.random.default_rng(0)
x32 = rng.standard_normal((5, 7)).astype(np.float32)
y32 = rng.standard_normal((5, 7)).astype(np.float32)


# -- values ------------------------------------------------------------------------------------

UNARY = [
    fnp.exp,
    fnp.tanh,
    fnp.sin,
    fnp.cos,
    fnp.log1p,
    fnp.expm1,
    fnp.sqrt,
    fnp.abs,
    fnp.floor,
    fnp.ceil,
    fnp.round,
    fnp.sign,
    fnp.negative,
    lambda x: fg.nn.sigmoid(x),
    fnp.arctan,
    fnp.sinh,
    fnp.cbrt,
    lambda x: lax.rsqrt(x),
    fnp.isfinite,
]


@pytest.mark.parametrize("f", UNARY)
def test_unary_float32(f):
    x = np.abs(x32) if f in (fnp.sqrt, fnp.log1p) else x32
    assert_same_as_reference(f, x, rtol=1e-5)


@pytest.mark.parametrize(
    "f",
    [
        fnp.add,
        fnp.subtract,
        fnp.multiply,
        fnp.divide,
        fnp.maximum,
        fnp.minimum,
        fnp.less,
        fnp.greater_equal,
        fnp.equal,
        fnp.arctan2,
        fnp.power,
        fnp.fmod,
    ],
)
def test_binary_float32(f):
    y = np.abs(y32) + 0.5 if f is fnp.power else y32
    x = np.abs(x32) if f is fnp.power else x32
    assert_same_as_reference(f, x, y, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_integer_arithmetic_matches_reference_including_division_by_zero(dtype):
    info = np.iinfo(dtype)
    if info.min < 0:
        x = np.array([7, -7, 0, info.max, info.min, 3, -1, 5], dtype)
        y = np.array([2, 2, 0, -1, -1, 0, 3, 7], dtype)
    else:
        x = np.array([7, 250, 0, info.max, 1, 3, 9, 5], dtype)
        y = np.array([2, 3, 0, 1, 9, 0, 3, 7], dtype)

    def f(a, b):
        return (
            a + b,
            a - b,
            a * b,
            lax.div(a, b),
            lax.rem(a, b),
            fnp.maximum(a, b),
            a & b,
            a ^ b,
            lax.shift_left(a, b),
            lax.shift_right_logical(a, b),
            lax.shift_right_arithmetic(a, b),
            lax.population_count(a),
            a < b,
        )

    assert_same_as_reference(f, x, y)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int16", "uint16", "bool"])
def test_conversions_between_dtypes(dtype):
    values = np.array([0.0, -1.5, 2.5, 1e4, -7.25, np.nan, np.inf, -3e9], np.float32)

    def f(x):
        converted = lax.convert_element_type(x, dtype)
        return converted, lax.convert_element_type(converted, "float32")

    assert_same_as_reference(f, values)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_high_integer_powers_stay_within_a_few_ulp_of_the_reference(dtype):
    # Repeated squaring doubles the error it inherits at each step: x^100 was 80 ulp from
    # the reference's power and x^-1000 800.
    x = (1 + rng.random(1000) * 0.01).astype(dtype)
    for y in (7, 100, -1000):
        expected = np.asarray(lax.integer_pow(x, y))
        got = np.asarray(fg.jit(lambda a, y=y: lax.integer_pow(a, y))(x))
        ulps = np.abs(got - expected) / np.spacing(expected)
        assert ulps.max() <= 2, (y, ulps.max())


def test_negative_integer_powers_reach_subnormal_results():
    # 1 / x^2 overflowed to 1 / inf = 0 where x^-2 is a subnormal.
    for x in (np.float32(2.0**64), np.float64(1e160), fnp.bfloat16(2.0**64)):
        expected = np.asarray(lax.integer_pow(x, -2))
        assert expected != 0
        assert_same_as_reference(lambda a: (lax.integer_pow(a, -2), lax.integer_pow(a, -3)), x)
        assert np.asarray(fg.jit(lambda a: lax.integer_pow(a, -2))(x)) == expected


def test_half_precision_arithmetic_rounds_each_operation():
    x = (x32 * 100).astype(fg.numpy.bfloat16)
    assert_same_as_reference(lambda a: a * a + a, x, rtol=1e-2)
    h = (x32 * 100).astype(np.float16)
    assert_same_as_reference(lambda a: (a * a - a) / 3, h, rtol=1e-3)


def test_half_precision_is_not_fused_where_the_cpu_has_half_arithmetic():
    """On a CPU with AVX512-FP16, LLVM turns the float32 operations that compute halves into
    half ones; each must still round on its own (a fused a*a - a rounds once, unlike the
    reference). Code generation for such a CPU runs on any host."""
    import llvmlite.binding as llvm

    from funcgrad.backends.llvm import engine

    h = np.linspace(-3, 3, 64).astype(np.float16)
    executable = compiled(lambda a: (a * a - a) / 3, h)
    engine.target_machine()  # initializes LLVM's native target
    machine = llvm.Target.from_default_triple().create_target_machine(cpu="sapphirerapids", opt=3)
    if "x86" not in machine.triple:
        pytest.skip("AVX512-FP16 is an x86 feature")
    assembly = machine.emit_assembly(engine._optimized_module(executable.ir, machine))
    assert "vmulph" in assembly and "vsubph" in assembly  # computed in half precision
    assert not re.search(r"vf(n?m)(add|sub)\w*(ph|sh)\b", assembly)


@pytest.mark.parametrize("size", [1, 3, 17])
def test_half_results_of_float64_math_link(size):
    """atan2 on halves is computed in float64 and ends in copysign: code generation merges
    its narrowings into one float64 -> half conversion, a C runtime call the module defines."""
    y = np.linspace(-3, 3, size).astype(np.float16)
    x = np.linspace(2, -3, size).astype(np.float16)
    assert_same_as_reference(lax.atan2, y, x, rtol=1e-3)


def test_a_row_reduction_reading_another_waits_for_it():
    """sum(e + x - max(e)) per row: the sum reads the row's maximum, so it cannot share the
    maximum's pass over the row (it read the maximum before it was computed)."""

    def f(a):
        e = fnp.exp(a)
        return a * (e + (a - e.max(axis=1, keepdims=True))).sum(axis=1, keepdims=True)

    assert_same_as_reference(f, rng.standard_normal((3, 5)).astype(np.float32), rtol=1e-5)


def test_nan_semantics_of_max_min_and_argmax():
    x = np.array([[1.0, np.nan, 3.0], [2.0, 5.0, -1.0], [np.nan, np.nan, 0.0]], np.float32)

    def f(a):
        return (
            fnp.max(a, axis=1),
            fnp.min(a, axis=0),
            fnp.argmax(a, axis=1),
            fnp.argmin(a, axis=0),
            fnp.maximum(a, 0.0),
        )

    assert_same_as_reference(f, x)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), 2])
def test_reductions(axis):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)

    def f(a):
        return fnp.sum(a * 2, axis=axis), fnp.max(a, axis=axis), fnp.prod(a, axis=axis)

    assert_same_as_reference(f, x, rtol=1e-5, atol=1e-5)


def test_shape_ops_fuse_and_match():
    x = rng.standard_normal((4, 6)).astype(np.float32)

    def f(a):
        b = fnp.transpose(a)[::2, 1:]
        c = fnp.pad(a, ((1, 2), (0, 3)), constant_values=9.0)
        d = fnp.concatenate([a, a * 2], axis=1).reshape(8, 6)
        e = fnp.flip(a, 0) + fnp.arange(6.0)
        return (
            b,
            c,
            d,
            e,
            fnp.cumsum(a, axis=1),
            lax.cumsum(a, axis=0, reverse=True),
        )

    assert_same_as_reference(f, x)


def test_one_scalar_reshaped_twice_into_a_concatenation():
    # Both operands of the concatenation read the scalar at the index (), but at different
    # flat offsets; fused by one builder they were one memoized load at the second's offset,
    # so the first element read before the buffer. A branch keeps the two reshapes apart
    # (CSE merges them at the top level).
    def twice(b):
        w = b[0:1].squeeze(0)[0:1].reshape(())
        return fnp.concatenate([w.reshape(1), w.reshape(1)])

    x = np.full((2, 3), 1.5, np.float32)
    with jit_backend("llvm"):
        got = fg.jit(lambda i, b: lax.switch(i, [lambda b: fnp.zeros(2), twice], b))(1, x)
    np.testing.assert_array_equal(np.asarray(got), [1.5, 1.5])


def test_indexing_gather_and_dynamic_slices():
    x = rng.standard_normal((6, 5)).astype(np.float32)
    idx = np.array([0, 5, 2, 7, -1], np.int32)

    def f(a, i):
        return a[i], a[:, 1], lax.dynamic_slice(a, (i[1], 1), (3, 2)), a.at[2].set(1.0)

    assert_same_as_reference(f, x, idx)


@given(
    shape=st.sampled_from([(40,), (12, 16), (6, 5, 8)]),
    data=st.data(),
)
def test_small_dynamic_updates_written_in_their_windows_match_the_reference(shape, data):
    """An update under a quarter of its operand is written over its window alone (the
    operand copied first); its start, drawn past either end, is clamped to fit, and its
    values may read the operand anywhere (they are made apart first)."""
    window = tuple(data.draw(st.integers(1, max(1, n // 2)), label="window") for n in shape)
    starts = [data.draw(st.integers(-n, 2 * n), label="start") for n in shape]
    x = rng.standard_normal(shape).astype(np.float32)
    read_at = tuple(data.draw(st.integers(0, n - w)) for n, w in zip(shape, window))

    def f(a, starts):
        update = lax.dynamic_slice(a, read_at, window) * 2.0 + 1.0
        return lax.dynamic_update_slice(a, update, list(starts))

    starts = np.array(starts, np.int32)
    assert_same_as_reference(f, x, starts)
    (kernel,) = [
        step.kernel
        for step in compiled(f, x, starts).program.steps
        if isinstance(step, schedule.KernelStep) and "dynamic_update_slice" in step.kernel.name
    ]
    last = kernel.body[-1]
    if np.prod(window) * 4 < x.size:  # the copy, then a loop over the window's first axis
        assert len(kernel.body) == 2 and (last.start, last.stop) == (0, window[0])
    else:
        assert len(kernel.body) == 1


def test_uint64_indices_past_int64_saturate_instead_of_wrapping_negative():
    # Cast to int64, 2**63 + 5 was negative: clamped to the start where it is past the end.
    x = np.arange(17, dtype=np.float32)
    i = np.array([2**63 + 5, 3], np.uint64)
    dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    sdn = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )

    def f(a, i):
        return (
            lax.dynamic_slice(a, [i[0]], [5]),
            lax.dynamic_update_slice(a, fnp.zeros(5, a.dtype), [i[0]]),
            lax.gather(a, i[:, None], dn, (1,), mode="clip"),
            lax.scatter(a, i[:, None], -a[:2], sdn, mode="clip"),
        )

    assert_same_as_reference(f, x, i)
    np.testing.assert_array_equal(fg.jit(f)(x, i)[0], x[12:])


def test_a_fused_scalar_read_through_a_reshape_reads_its_one_element():
    """A rank-0 value read through a reshape took its reader's flat offset as its own (out of
    range, in the arm of a pad's select that is discarded), and where a kernel's flat loop
    gave way to a nest of loops, that offset named the flat loop's index, which no loop
    defined there: the compiler failed (found by fuzzing)."""

    def square(x, y):
        return lax.reshape(fnp.where(x > y, x, y), (1, 1))

    def padded(x, y):
        return lax.pad(square(x, y), np.float32(-1), ((1, 0, 0), (1, 1, 0)))

    def emptied(x, y):
        return lax.slice(square(x, y), (1, 1), (1, 1), (1, 2))

    x, y = np.float32(3), np.float32(2)
    for f in (padded, emptied):
        assert_same_as_reference(f, x, y)
    np.testing.assert_array_equal(fg.jit(padded)(x, y), [[-1, -1, -1], [-1, 3, -1]])


def test_dot_general_layouts():
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 2)).astype(np.float32)
    assert_same_as_reference(lambda p, q: p @ q, a, b, rtol=1e-5)
    assert_same_as_reference(lambda p, q: fnp.einsum("bij,bjk->ik", p, q), a, b, rtol=1e-5)
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert_same_as_reference(lambda p: p @ p.T, ints)


# -- control flow --------------------------------------------------------------------------------


def test_cond_while_and_scan_run_natively():
    def f(x, n):
        y = lax.cond(n > 2, lambda v: v * 2, lambda v: v - 1, x)
        count, total = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + c[0]), (0, 0))

        def step(carry, row):
            new = fnp.tanh(carry * 0.5 + row)
            return new, new.sum()

        final, sums = lax.scan(step, fnp.zeros(7, np.float32), x)
        back, _ = lax.scan(step, fnp.zeros(7, np.float32), x, reverse=True)
        return y, count, total, final, sums, back

    for n in (0, 5):
        assert_same_as_reference(f, x32, np.int32(n), rtol=1e-5)


def test_nested_control_flow():
    def f(x):
        def outer(carry, _):
            inner = lax.fori_loop(0, 3, lambda i, c: c * 0.9 + i, carry)
            return lax.cond(inner.sum() > 0, lambda v: v, lambda v: -v, inner), inner[0]

        return lax.scan(outer, x, None, length=4)

    assert_same_as_reference(f, x32[0], rtol=1e-5)


def test_grad_of_jit_runs_compiled():
    def loss(w, x):
        return fnp.mean(fnp.tanh(x @ w) ** 2)

    w = rng.standard_normal((7, 3)).astype(np.float32)
    assert_same_as_reference(fg.grad(loss), w, x32, rtol=1e-5)
    assert_same_as_reference(fg.vmap(fg.grad(loss), in_axes=(None, 0)), w, x32[:, None], rtol=1e-5)


@given(
    st.lists(
        st.sampled_from(["exp", "tanh", "mul", "add", "sub", "max", "sum0", "sum1", "T"]),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 5),
    st.integers(1, 5),
)
def test_random_programs_match_reference(ops, rows, cols):
    """Random chains of elementwise ops, reductions and transposes."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)

    def f(a):
        value = a
        for op in ops:
            if op == "exp":
                value = fnp.exp(fnp.clip(value, -5, 5))
            elif op == "tanh":
                value = fnp.tanh(value)
            elif op == "mul":
                value = value * a if value.shape == a.shape else value * 2
            elif op == "add":
                value = value + 1.5
            elif op == "sub":
                value = value - fnp.mean(value)
            elif op == "max":
                value = fnp.maximum(value, 0.25)
            elif op == "sum0" and value.ndim == 2:
                value = value.sum(0, keepdims=True) + value
            elif op == "sum1" and value.ndim == 2:
                value = value / (1 + fnp.abs(value).sum(1, keepdims=True))
            elif op == "T" and value.ndim == 2:
                value = value.T
        return value

    assert_same_as_reference(f, x, rtol=1e-5, atol=1e-5)


# -- fusion, vectorization, memory ---------------------------------------------------------------


def test_elementwise_chain_is_one_vectorized_kernel():
    def chain(x):  # GELU: tanh expands into arithmetic, so the loop still vectorizes
        return 0.5 * x * (1 + fnp.tanh(0.7978845608 * (x + 0.044715 * x**3)))

    executable = compiled(chain, np.ones(4096, np.float32))
    plan = executable.fusion_plan()
    assert plan.count(" = k") == 1, plan
    assert "<16 x float>" in executable.machine_code.optimized_ir or (
        "<8 x float>" in executable.machine_code.optimized_ir
    )


def test_a_table_lookup_is_an_expression_like_the_others():
    i = K.fresh_index()
    e = K.lookup([0.5, 1.5], i, np.float64)
    assert K.same(e, K.lookup([0.5, 1.5], i, np.float64))
    assert not K.same(e, K.lookup([0.5, 2.5], i, np.float64))
    assert any(node is i for node in K.nodes(e))
    out = K.Buffer("out", np.dtype(np.float64), 2)
    kernel = K.Kernel("k", [], [out], [K.Loop(i, 0, 2, [K.Store(out, i, e)])])
    assert f"out[{i.name}] = table<float64 x 2>[{i.name}]" in kernel.as_text()


def test_each_module_holds_the_constant_tables_its_kernels_read():
    # sin, cos and tan of float64 arguments past 64 read tables of 2/pi's chunks at places
    # their exponents pick (`K.Lookup`), private globals: a program split into modules (one
    # per kernel here) gives each module its copy.
    def f(v):
        return fnp.cos(v) * fnp.sin(v).sum(), fnp.tan(v)

    x = np.array([1e300, -3.5e22, 2.0**70, 100.0, 0.5])
    saved = render.MODULE_TEXT, render.MAX_MODULES
    render.MODULE_TEXT, render.MAX_MODULES = 1, 64
    try:
        with jit_backend("llvm"):
            program = fg.jit(f).lower(x).compile()
            got = program(x)
    finally:
        render.MODULE_TEXT, render.MAX_MODULES = saved
    modules = program.executable.machine_code.modules
    assert len(modules) > 1 and re.search(r"ptr @table\d", modules[0])
    for module in modules:
        read = set(re.findall(r"ptr (@table\d+)", module))
        assert read <= set(re.findall(r"^(@table\d+) = private constant", module, re.M))
    wide = x.astype(np.longdouble)
    np.testing.assert_allclose(np.asarray(got[0]), np.cos(wide) * np.sin(wide).sum(), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(got[1]), np.tan(wide), rtol=1e-15)


def _softmax(x):
    e = fnp.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm(x):
    centered = x - x.mean(axis=1, keepdims=True)
    return centered / fnp.sqrt((centered * centered).mean(axis=1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("f", [_softmax, _layernorm])
def test_row_softmax_and_layernorm_are_one_kernel_with_row_sized_scratch(f):
    x = rng.standard_normal((64, 128)).astype(np.float32)
    executable = compiled(f, x)
    assert executable.fusion_plan().count(" = k") == 1, executable.fusion_plan()
    memory = executable.memory_analysis()
    assert memory.output_bytes == x.nbytes and memory.argument_bytes == x.nbytes
    # Only one row's intermediates (and a few scalars) live in the arena.
    assert memory.arena_bytes <= 128 * 4 + 8 * 64, memory.as_text()
    assert "arena" in memory.as_text()
    assert_same_as_reference(f, x, rtol=1e-5, atol=1e-6)
    with jit_backend("llvm"):
        assert "define void @entry" in fg.jit(f).lower(x).compile().as_text()


def _row_kernel(f, *args):
    """The one kernel of `f`'s program and its loop over rows."""
    executable = compiled(f, *args)
    [step] = [s for s in executable.program.steps if isinstance(s, schedule.KernelStep)]
    [row] = [s for s in step.kernel.body if isinstance(s, K.Loop)]
    return step.kernel, row, executable


@pytest.mark.parametrize("f", [_softmax, _layernorm])
def test_row_kernels_fetch_the_next_row_while_computing(f):
    x = rng.standard_normal((16, 1024)).astype(np.float32)
    bias = rng.standard_normal(1024).astype(np.float32)

    def shifted(a, b):
        return f(a + b)

    kernel, row, executable = _row_kernel(shifted, x, bias)
    second_pass, [span] = prefetch.next_rows(row, set(kernel.inputs))
    # The next row of x, before the pass after the one that read it; the bias, the same for
    # every row, is not fetched again.
    assert span.buffer is kernel.inputs[0] and span.lines == 1024 * 4 // 64 + 1
    assert linear(span.start, row.index, {}) == (1024, 1024, 1024)
    assert second_pass is [s for s in row.body if isinstance(s, K.Loop)][1]
    assert executable.ir.count("call void @llvm.prefetch") == 1
    assert_same_as_reference(shifted, x, bias, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(16, 128), (4, 8192)])
def test_rows_too_short_or_too_long_to_fetch_ahead_are_left_to_the_hardware(shape):
    x = rng.standard_normal(shape).astype(np.float32)
    kernel, row, executable = _row_kernel(_softmax, x)
    assert prefetch.next_rows(row, set(kernel.inputs)) is None
    assert "llvm.prefetch" not in executable.ir


def test_kernels_reading_other_rows_are_not_merged():
    # (Positive, so that no row's sum nearly cancels: a quotient by one would magnify rounding.)
    x = np.random.default_rng(5).uniform(0.5, 1.5, (8, 16)).astype(np.float32)

    def f(a):
        total = a.sum(axis=1, keepdims=True)
        shifted = fnp.roll(total, 1, axis=0)  # reads the neighbouring row's sum
        return a / shifted

    assert_same_as_reference(f, x, rtol=1e-5)


def test_intermediates_share_the_arena():
    def f(x):
        for _ in range(6):
            x = fnp.exp(x).sum(axis=0, keepdims=True) * x
        return x

    executable = compiled(f, np.ones((256, 64), np.float32))
    # Six intermediates of 64 KiB each, but at most a few are live at once.
    assert executable.memory_analysis().arena_bytes <= 3 * 256 * 64 * 4


def test_compiled_program_called_from_threads():
    import concurrent.futures

    f = fg.jit(lambda a: fnp.tanh(a) @ a.T)
    with jit_backend("llvm"):
        expected = np.asarray(f(x32))
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: np.asarray(f(x32)), range(16)))
    for r in results:
        np.testing.assert_array_equal(r, expected)


def test_debug_callbacks_run_in_program_order(capsys):
    def f(x):
        fg.debug.print("first {}", x[0])
        y = lax.fori_loop(0, 2, lambda i, v: v + 1.0, x)
        fg.debug.print("then {}", y[0])
        return y

    with jit_backend("llvm"):
        fg.jit(f)(np.zeros(3, np.float32))
    assert capsys.readouterr().out.split("\n")[:2] == ["first 0.0", "then 2.0"]


# -- configuration and errors --------------------------------------------------------------------


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown jit backend 'tpu'"):
        config.update("jit_backend", "tpu")


def test_backend_choice_selects_the_executable():
    jaxpr = fg.make_jaxpr(lambda a: a + 1)(x32)
    with jit_backend("numpy"):
        assert type(compile_jaxpr(jaxpr)).__name__ == "NumpyExecutable"
    with jit_backend("llvm"):
        assert type(compile_jaxpr(jaxpr)).__name__ == "LlvmExecutable"


@pytest.mark.parametrize(
    "spec",
    [
        "bij,bjk->bik",
        "ij,kj->ik",
        "ji,jk->ik",
        "bij,jbk->bik",
        "ijb,bjk->bik",
        "abij,abjk->abik",
        "ijk,jkl->il",
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("path", ["library", "tiles"])
def test_products_for_every_layout(spec, dtype, path):
    """As library GEMMs, and in register tiles where the columns fill a vector (else GEMMs;
    a right operand stored (n, k) copied (k, n) first)."""
    sizes = {"a": 2, "b": 3, "i": 16, "j": 24, "k": 20, "l": 8}
    lhs_spec, rhs_spec = spec.split("->")[0].split(",")
    lhs = rng.standard_normal([sizes[c] for c in lhs_spec]).astype(dtype)
    rhs = rng.standard_normal([sizes[c] for c in rhs_spec]).astype(dtype)

    def f(p, q):
        return fnp.einsum(spec, p, q), fnp.einsum(spec, p * 2, q) + 1

    with products_as(path):
        assert_same_as_reference(f, lhs, rhs, rtol=1e-4, atol=1e-4)
        plan = compiled(f, lhs, rhs).fusion_plan()
    columns = sizes[spec[-1]]
    vector_wide = columns * np.dtype(dtype).itemsize >= engine.vector_bytes()
    assert ("tiles[" if path == "tiles" and vector_wide else "gemm[") in plan
    if path == "tiles" and spec == "bij,bjk->bik":
        assert "tiles[outer=3, rows=16, columns=20, terms=24]" in plan


@pytest.mark.usefixtures("library_products")
@pytest.mark.parametrize(
    "lhs_dtype, rhs_dtype, preferred",
    [
        (fnp.bfloat16, np.float32, np.float32),
        (fnp.bfloat16, fnp.bfloat16, np.float32),
        (np.float16, np.float32, np.float32),
        (np.float32, np.float32, np.float64),
        (fnp.bfloat16, np.float64, np.float64),
    ],
)
@pytest.mark.parametrize("backend", ["llvm", "cuda_emulator"])
def test_narrower_float_operands_of_a_wider_product_take_the_library_gemm(
    lhs_dtype, rhs_dtype, preferred, backend
):
    """A bfloat16 operand beside a float32 one, with preferred_element_type float32, is
    converted (exactly) into float32 and contracted by the GEMM: it ran as a loop kernel, 3x
    slower than the GEMM at 512x512x512. Against NumPy's product of the converted operands;
    the second product reads its rhs transposed."""
    lhs = rng.standard_normal((48, 40)).astype(lhs_dtype)
    rhs = rng.standard_normal((40, 32)).astype(rhs_dtype)
    rhs_t = np.ascontiguousarray(rhs.T)

    def f(p, q, q_t):
        straight = lax.dot_general(p, q, (((1,), (0,)), ((), ())), preferred_element_type=preferred)
        crossed = lax.dot_general(
            p, q_t, (((1,), (1,)), ((), ())), preferred_element_type=preferred
        )
        return straight, crossed

    wanted = np.matmul(lhs.astype(preferred), rhs.astype(preferred))
    with jit_backend(backend):
        results = fg.jit(f)(lhs, rhs, rhs_t)
        plan = fg.jit(f).lower(lhs, rhs, rhs_t).compile().executable.fusion_plan()
    rtol = 1e-5 if preferred == np.float32 else 1e-12
    for got in results:
        assert np.asarray(got).dtype == preferred
        np.testing.assert_allclose(np.asarray(got), wanted, rtol=rtol, atol=rtol)
    assert plan.count("gemm[") == 2, plan


@pytest.mark.usefixtures("library_products")
def test_a_transposed_product_is_written_in_its_readers_layout():
    """A transpose that is a product's only reader becomes the product of the swapped
    operands: a weight gradient (a product over the batch, transposed to the weights' layout)
    and `(x @ w).T` leave the GEMM in the layout their readers want, no kernel reading it
    across rows. A product read elsewhere too is computed once, as it is written."""
    x = rng.standard_normal((32, 24)).astype(np.float32)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    stack = rng.standard_normal((3, 32, 24)).astype(np.float32)
    weights = rng.standard_normal((3, 24, 40)).astype(np.float32)

    def update(w, x):
        g = fg.grad(lambda w: fnp.tanh(x @ w).sum())(w)
        return w - 0.1 * g

    def transposed(x, w, stack, weights):
        return (x @ w).T + 1, fnp.einsum("bij,bjk->bki", stack, weights) * 2

    def read_twice(x, w):
        p = x @ w
        return p.T + 1, p * 2

    for f, args in ((update, (w, x)), (transposed, (x, w, stack, weights)), (read_twice, (x, w))):
        assert_same_as_reference(f, *args, rtol=1e-4, atol=1e-4)

    def fused_transposes(plan: str) -> int:  # (not the GEMMs' operand flags)
        return plan.replace("transpose_", "").count("transpose")

    plan = compiled(update, w, x).fusion_plan()
    assert "gemm[batch=1, m=24, n=40, k=32, transpose_lhs]" in plan
    assert fused_transposes(plan) == 0
    plan = compiled(transposed, x, w, stack, weights).fusion_plan()
    assert "gemm[batch=1, m=40, n=32, k=24, transpose_lhs, transpose_rhs]" in plan
    assert "gemm[batch=3, m=40, n=32, k=24, transpose_lhs, transpose_rhs]" in plan
    assert fused_transposes(plan) == 0
    plan = compiled(read_twice, x, w).fusion_plan()
    assert "gemm[batch=1, m=32, n=40, k=24]" in plan and fused_transposes(plan) == 1


@pytest.mark.usefixtures("library_products")
def test_a_gemm_makes_the_update_its_product_feeds():
    """`w - lr * g`, `0.9 * v + g` and the like, with g a GEMM's product read nowhere else
    and w an array of the product's shape, are one GEMM (`alpha` times the product plus
    `beta` times w, the BLAS's own update), not a GEMM and a kernel reading its product back.
    A product read elsewhere too, or added to a broadcast row, keeps its kernel."""
    x = rng.standard_normal((32, 24)).astype(np.float32)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    row = rng.standard_normal(40).astype(np.float32)
    stacks = rng.standard_normal((3, 24, 32)).astype(np.float32)

    def grad(w, x):
        return fg.grad(lambda w: fnp.tanh(x @ w).sum())(w)

    def hidden(x):  # (32, 40)
        return fnp.tanh(x @ w)

    def product(x):  # (24, 40), as w
        return x.T @ hidden(x)

    folded = {
        "sgd": (lambda w, x: w - 0.1 * grad(w, x), "-0.1", "1.0"),
        "momentum": (lambda w, x: 0.9 * w + grad(w, x), "1.0", "0.9"),
        "reversed": (lambda w, x: grad(w, x) * 0.5 - w, "0.5", "-1.0"),
        "plain": (lambda w, x: w + product(x), "1.0", "1.0"),
        "batched": (
            lambda w, x: w - fnp.einsum("bij,bjk->bik", stacks, fnp.stack([hidden(x)] * 3)),
            "-1.0",
            "1.0",
        ),
        "float64": (lambda w, x: w - 0.1 * grad(w, x.astype(np.float64)), "-0.1", "1.0"),
        "in a loop": (
            lambda w, x: lax.scan(lambda w, _: (w - 0.1 * grad(w, x), None), w, None, 3)[0],
            "-0.1",
            "1.0",
        ),
    }
    for name, (f, alpha, beta) in folded.items():
        w_in = w.astype(np.float64) if name == "float64" else w
        w_in = np.broadcast_to(w_in, (3, 24, 40)).copy() if name == "batched" else w_in
        assert_same_as_reference(f, w_in, x, rtol=1e-4, atol=1e-4)
        plan = compiled(f, w_in, x).fusion_plan()
        update = re.search(r"\S+ = (\S+) \* gemm\[.*\]\(.*\) \+ (\S+) \* in\d+$", plan, re.M)
        assert update is not None and update.groups() == (alpha, beta), name

    kept = {
        "product read twice": lambda w, x: (lambda p: (w - 0.1 * p, p))(product(x)),
        "broadcast addend": lambda w, x: row - 0.1 * product(x),
        "scaled by an array": lambda w, x: w - w * product(x),
    }
    for name, f in kept.items():
        assert_same_as_reference(f, w, x, rtol=1e-4, atol=1e-4)
        assert "* gemm[" not in compiled(f, w, x).fusion_plan(), name


def test_random_bits_and_reduce_precision():
    key = fg.random.PRNGKey(42)

    def f(k, x):
        return (
            fg.random.bits(k, (5, 3)),
            fg.random.uniform(k, (4,)),
            lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
            lax.reduce_precision(x * 1e30, exponent_bits=8, mantissa_bits=7),
        )

    assert_same_as_reference(f, key, x32, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_precision_to_the_own_format_rounds_a_product_before_the_sum(dtype):
    """A product and a sum may fuse into one rounding, but not a product reduced to its own
    format (nor a choice between products): (1 + e)(1 + e) rounds to 1 + 2e, so adding
    -(1 + 2e) gives 0, where one rounding gives e^2. Many elements, so that the vectorized
    loop computes them too."""
    e = float(np.finfo(dtype).eps) ** 0.5 / 2
    a = np.full(1000, 1 + e, dtype)
    c = np.full(1000, -(1 + 2 * e), dtype)
    info = fnp.finfo(dtype)

    def rounded(x):
        return lax.reduce_precision(x, info.nexp, info.nmant)

    def product_then_sum(a, c):
        return rounded(a * a) + c

    def chosen_product_then_sum(a, c):
        return rounded(lax.select(a > 0, a * a, a * c)) + c

    for f in (product_then_sum, chosen_product_then_sum):
        np.testing.assert_array_equal(np.asarray(fg.jit(f)(a, c)), np.zeros(1000, dtype))


def test_convolutions_pooling_and_their_gradients():
    images = rng.standard_normal((2, 6, 7, 3)).astype(np.float32)
    kernel = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)

    def conv(x, w):
        return lax.conv_general_dilated(
            x,
            w,
            (1, 2),
            ((1, 1), (0, 2)),
            rhs_dilation=(1, 2),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )

    def pooled_loss(x, w):
        y = conv(x, w)
        pooled = lax.reduce_window(y, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 1, 1), "SAME")
        return fnp.sum(pooled**2) + fnp.sum(
            lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")
        )

    assert_same_as_reference(conv, images, kernel, rtol=1e-5, atol=1e-5)
    assert_same_as_reference(
        fg.grad(pooled_loss, argnums=(0, 1)), images, kernel, rtol=1e-4, atol=1e-4
    )
    grouped = rng.standard_normal((3, 3, 1, 6)).astype(np.float32)

    def depthwise(x, w):
        return lax.conv_general_dilated(
            x, w, (1, 1), "SAME", feature_group_count=3, dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    assert_same_as_reference(depthwise, images, grouped, rtol=1e-5, atol=1e-5)
    assert_same_as_reference(
        fg.grad(lambda x, w: depthwise(x, w).sum(), argnums=1),
        images,
        grouped,
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_sort_and_top_k(n):
    values = rng.standard_normal((3, n)).astype(np.float32)
    values[0, ::3] = np.nan
    values[1, ::2] = 0.5
    values[2, 1::4] = -0.0
    ints = rng.integers(-3, 3, (3, n)).astype(np.int32)

    def f(x, i):
        return (
            fnp.sort(x, axis=1),
            fnp.sort(x, axis=0),
            fnp.argsort(x, axis=1),
            lax.sort((i, x), num_keys=1),
            lax.top_k(x, min(n, 3)),
            lax.top_k(i, 1),
            fnp.sort(x.astype(fnp.bfloat16), axis=1),
        )

    assert_same_as_reference(f, values, ints)


def test_programs_compile_after_others_are_freed():
    """Each native engine owns its target machine; freeing one must not break the next."""
    import gc

    from funcgrad.backends.llvm.executable import LlvmExecutable

    for scale in range(4):
        executable = LlvmExecutable(fg.make_jaxpr(lambda a, s=scale: a * s)(x32))
        np.testing.assert_array_equal(np.asarray(executable(fnp.asarray(x32))[0]), x32 * scale)
        del executable
        gc.collect()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_triangular_solve_cholesky_and_lu(dtype):
    a = rng.standard_normal((2, 5, 5)).astype(dtype)
    spd = a @ np.swapaxes(a, -1, -2) + 5 * np.eye(5, dtype=dtype)
    b = rng.standard_normal((2, 5, 3)).astype(dtype)

    def f(m, s, r):
        solves = [
            lax.triangular_solve(
                m,
                r if left else np.swapaxes(r, -1, -2),
                left_side=left,
                lower=lower,
                transpose_a=transpose,
            )
            for left in (True, False)
            for lower in (True, False)
            for transpose in (True, False)
        ]
        return solves, lax.cholesky(s), lax.lu(m), fnp.linalg.det(m)

    tol = 1e-4 if dtype == np.float32 else 1e-10
    assert_same_as_reference(f, a + 4 * np.eye(5, dtype=dtype), spd, b, rtol=tol, atol=tol)
    not_positive = -spd
    with jit_backend("llvm"):
        factor = np.asarray(fg.jit(lax.cholesky)(not_positive))
        lower = np.tril_indices(factor.shape[-1])
        assert np.isnan(factor[..., lower[0], lower[1]]).all()
        np.testing.assert_array_equal(np.triu(factor, 1), 0)
    plan = compiled(f, a, spd, b).fusion_plan()
    assert all(f"lapack {name}[" in plan for name in ("trsm", "potrf", "getrf"))


@given(
    batch=st.sampled_from([(), (3,), (2, 2)]),
    m=st.integers(1, 7),
    n=st.integers(1, 7),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_library_factorizations_match_the_reference(batch, m, n, flags, dtype):
    left, lower, transpose, unit = flags
    k = m if left else n
    t = (rng.standard_normal((*batch, k, k)) + 3 * np.eye(k)).astype(dtype)
    b = rng.standard_normal((*batch, m, n)).astype(dtype)
    rect = rng.standard_normal((*batch, m, n)).astype(dtype)
    singular = rect.copy()
    singular[..., :, 0] = 0  # a zero pivot: the column is left as it is
    spd = t @ np.swapaxes(t, -1, -2)

    def f(t, b, rect, singular, spd):
        solve = lax.triangular_solve(
            t, b, left_side=left, lower=lower, transpose_a=transpose, unit_diagonal=unit
        )
        return solve, lax.lu(rect), lax.lu(singular), lax.cholesky(spd)

    tol = 2e-3 if dtype == np.float32 else 1e-9
    assert_same_as_reference(f, t, b, rect, singular, spd, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 3), (3, 6)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lapack_decompositions(shape, dtype):
    """Values and QR factors equal the reference's; eigenvectors and singular vectors are
    unique up to sign (the library may pick either for nearly equal inputs), so they are
    checked through the identities they satisfy. The matrix comes from its own generator, so
    it does not depend on how many draws earlier tests made."""
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    square = a[..., : min(shape[-2:]), : min(shape[-2:])]
    symmetric = square + np.swapaxes(square, -1, -2)

    def values(m, s):
        return (
            lax.qr(m, full_matrices=False),
            lax.qr(m, full_matrices=True),
            lax.eigh(s)[1],
            lax.svd(m, compute_uv=False),
        )

    tol = 2e-4 if dtype == np.float32 else 1e-10
    assert_same_as_reference(values, a, symmetric, rtol=tol, atol=tol)
    with jit_backend("llvm"):
        v, w = (np.asarray(t) for t in fg.jit(lax.eigh)(symmetric))
        rebuilt = (v * w[..., None, :]) @ np.swapaxes(v, -1, -2)
        np.testing.assert_allclose(rebuilt, symmetric, rtol=10 * tol, atol=10 * tol)
        for full in (False, True):
            u, s, vt = (np.asarray(t) for t in fg.jit(partial(lax.svd, full_matrices=full))(a))
            k = s.shape[-1]
            rebuilt = (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]
            np.testing.assert_allclose(rebuilt, a, rtol=10 * tol, atol=10 * tol)
        plan = compiled(values, a, symmetric).fusion_plan()
    assert "lapack geqrf" in plan and "lapack gesdd" in plan
    assert ("lapack syevd" in plan) == (min(shape[-2:]) > jacobi.MAX_SIZE)  # (else rotations)


def test_siblings_reading_one_input_share_a_loop_and_plans_are_public():
    x = rng.standard_normal((64, 32)).astype(np.float32)

    def f(a):
        return fnp.sin(a) * 2, fnp.cos(a) + 1, a * a

    with jit_backend("llvm"):
        compiled_f = fg.jit(f).lower(x).compile()
        assert compiled_f.fusion_plan().count(" = k") == 1, compiled_f.fusion_plan()
        assert compiled_f.memory_analysis().output_bytes == 3 * x.nbytes
    assert_same_as_reference(f, x, rtol=1e-5)
    with jit_backend("numpy"), pytest.raises(AttributeError, match="describes a compiled program"):
        fg.jit(f).lower(x).compile().memory_analysis()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_inv_and_digamma_compositions(dtype):
    y = np.concatenate([np.linspace(-1, 1, 401), [0.0, -0.0, 1.5, np.nan, 1e-30, 0.9999]])
    x = np.concatenate([np.linspace(-12.3, 12.3, 401), [0.0, -0.0, -3.0, 1e-7, np.inf, -np.inf]])
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
    assert_same_as_reference(
        lambda a, b: (lax.erf_inv(a), lax.digamma(b)), y.astype(dtype), x.astype(dtype), **tol
    )
    key = fg.random.PRNGKey(3)
    assert_same_as_reference(lambda k: fg.random.normal(k, (64,)), key, rtol=1e-5, atol=1e-5)


def test_short_contractions_fuse_into_their_readers():
    a = rng.standard_normal((32,)).astype(np.float32)
    b = rng.standard_normal((16,)).astype(np.float32)
    acc = rng.standard_normal((32, 16)).astype(np.float32)

    def f(x, y, total):
        return total + fnp.outer(x, y) * 2, fnp.einsum("i,j->ij", x[:3], y[:3]).sum()

    executable = compiled(f, a, b, acc)
    assert "dot_general" not in executable.fusion_plan().split("# fuses")[0]
    assert executable.fusion_plan().count(" = k") <= 2, executable.fusion_plan()
    assert_same_as_reference(f, a, b, acc, rtol=1e-5, atol=1e-5)


def test_a_program_the_compiler_cannot_lower_names_the_primitive_and_line():
    from funcgrad.compiler.fusion import CompileError
    from funcgrad.core import PRIMITIVES, Primitive, ShapedArray

    unlowered = Primitive("test_unlowered")
    try:
        unlowered.def_impl(lambda x: x)
        unlowered.def_abstract_eval(lambda x: ShapedArray(x.shape, x.dtype))

        def f(x):
            return unlowered.bind(fnp.sin(x))  # the line the error must name

        jitted = fg.jit(f)
        where = r"test_unlowered\(f32\[5,7\]\) at .*test_llvm_backend\.py"
        with jit_backend("llvm"):
            for _ in range(2):  # a failed compilation leaves nothing cached
                with pytest.raises(CompileError, match=where):
                    jitted(x32)
        with jit_backend("numpy"):
            np.testing.assert_allclose(np.asarray(jitted(x32)), np.sin(x32), rtol=1e-6)
    finally:
        del PRIMITIVES["test_unlowered"]  # the registry holds only real primitives


def test_a_reduction_shares_the_loop_of_what_it_reads_only_elementwise():
    x = rng.standard_normal((6, 10)).astype(np.float32)

    def f(a):
        centered = a - a.mean(axis=1, keepdims=True)
        same = (centered * centered).sum(axis=1, keepdims=True)
        flipped = (centered * fnp.flip(centered, axis=1)).sum(axis=1, keepdims=True)
        return centered / (same + 1) + flipped

    assert_same_as_reference(f, x, rtol=1e-5, atol=1e-5)


def test_narrowing_float64_to_half_precision_rounds_as_the_reference():
    """float64 to float16 is one correct rounding (through float32 rounded to odd); to
    bfloat16 it goes through float32, as the reference does."""
    halfway = [1 + 2**-11 + 2**-40 * k for k in range(-3, 4)] + [
        1 + 2**-8 + 2**-35 * k for k in range(-3, 4)
    ]
    x = np.concatenate(
        [
            rng.standard_normal(2000) * 10.0 ** rng.integers(-8, 6, 2000),
            halfway,
            [np.nan, np.inf, -0.0, 65504.0, 65520.0, 1e39, 2**-25],
        ]
    )
    for dtype in ("float16", "bfloat16"):
        assert_same_as_reference(
            lambda a, d=dtype: lax.convert_element_type(a, d), x, rtol=0, atol=0
        )


def test_a_very_long_elementwise_chain_compiles_in_several_kernels():
    # 3,000 links: building and rendering one expression that deep would exhaust Python's
    # recursion; the scheduler cuts the chain, and each kernel stays of a size LLVM handles.
    def chain(v):
        for i in range(1500):
            v = v * 1.0001 + 0.001 if i % 2 else fnp.maximum(v, -0.5)
        return v

    x = np.linspace(-1, 1, 10).astype(np.float32)
    assert_same_as_reference(chain, x, rtol=1e-4)  # 750 fused multiply-adds drift apart
    kernels = [line for line in compiled(chain, x).fusion_plan().splitlines() if "fuses:" in line]
    assert len(kernels) > 5
    # A shared loop computes about MAX_GROUP_WORK equations per element (the plan lists some
    # members' roots twice): several chains cut at MAX_FUSION_DEPTH links, not eight.
    sizes = [line.count(",") + 1 for line in kernels]
    assert 2 * schedule.MAX_FUSION_DEPTH < max(sizes) <= rows.MAX_GROUP_WORK + rows.MAX_GROUP


@given(
    layout=st.sampled_from(
        [("NHWC", "HWIO", "NHWC"), ("NCHW", "OIHW", "NCHW"), ("NHWC", "OIHW", "NCHW")]
    ),
    stride=st.sampled_from([(1, 1), (2, 1), (2, 2)]),
    rhs_dilation=st.sampled_from([(1, 1), (1, 2)]),
    lhs_dilation=st.sampled_from([(1, 1), (2, 1)]),
    padding=st.sampled_from(["SAME", "VALID", [(1, 0), (2, 1)]]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_convolutions_as_gemm_match_the_reference(
    layout, stride, rhs_dilation, lhs_dilation, padding, dtype
):
    lhs_spec, rhs_spec, _ = layout
    lhs_shape = {"N": 4, "H": 9, "W": 8, "C": 4}
    rhs_shape = {"H": 3, "W": 2, "I": 4, "O": 6}
    lhs = rng.standard_normal([lhs_shape[c] for c in lhs_spec]).astype(dtype)
    rhs = rng.standard_normal([rhs_shape[c] for c in rhs_spec]).astype(dtype)
    if padding == "SAME" and lhs_dilation != (1, 1):
        padding = "VALID"  # string padding is not defined with input dilation

    def f(x, w):
        return lax.conv_general_dilated(
            x,
            w,
            stride,
            padding,
            lhs_dilation=lhs_dilation,
            rhs_dilation=rhs_dilation,
            dimension_numbers=layout,
        )

    def loss(x, w):
        return (f(x, w) ** 2).sum()

    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    with products_as("library"):  # whether this CPU's vectors would take tiles or not
        assert_same_as_reference(f, lhs, rhs, rtol=tolerance, atol=tolerance)
        assert_same_as_reference(
            fg.grad(loss, argnums=(0, 1)), lhs, rhs, rtol=tolerance, atol=tolerance
        )
        plan = compiled(f, lhs, rhs).fusion_plan()
    assert "gemm[" in plan
    if lhs_dilation != (1, 1) and stride == (1, 1):
        # The spread-out input's GEMM runs over its actual elements, not the zeros between.
        assert f"m={lhs.size // lhs_shape['C']}, n={6 * 3 * 2}, k=4]" in plan


@pytest.mark.usefixtures("library_products")
def test_a_profile_counts_and_times_each_kernel_and_library_call():
    """`profile` runs a build of the program that reads the clock around each step: every
    kernel the module defines is listed (a scan's body kernels once per iteration), the GEMM
    by its shape, the LAPACK routine by its symbol and the callback by its primitive; the
    program itself keeps no counters, and the reference backend has no profile."""
    x = rng.standard_normal((8, 300)).astype(np.float32)
    w = rng.standard_normal((300, 300)).astype(np.float32)
    seen = []

    def f(x, w):
        h = fnp.tanh(x @ w)
        s = h / fnp.abs(h).sum(axis=1, keepdims=True)
        c, _ = lax.scan(lambda c, r: (c * 0.5 + r.sum(), c), 0.0, s)
        fg.debug.callback(seen.append, c)
        gram = w[:16, :16] @ w[:16, :16].T + 16 * fnp.eye(16, dtype=np.float32)
        return s, c, fnp.linalg.cholesky(gram)

    program = compiled(f, x, w)
    rows = program.profile(x, w)
    calls = {what: count for what, count, _ in rows}
    kernels = re.findall(r"^define internal void @(k\d+_\w+)\(", program.as_text(), re.M)
    assert set(kernels) | {"gemm 8x300x300 float32", "callback debug_callback"} <= set(calls)
    assert any(what.startswith("scipy_dpotrf") and n == 1 for what, n, _ in rows)
    body = [k for k in kernels if calls[k] == 8]  # the scan's sum and carry, once a row
    assert len(body) == 2 and all(calls[k] == 1 for k in kernels if k not in body)
    assert len(seen) == 1  # (the profiled build ran once, the compiled program never)
    assert all(seconds >= 0 for _, _, seconds in rows)
    assert [row[2] for row in rows] == sorted((row[2] for row in rows), reverse=True)
    assert "funcgrad_profile" not in program.as_text()
    with jit_backend("numpy"), pytest.raises(AttributeError, match="profile times a compiled"):
        fg.jit(f).lower(x, w).compile().profile(x, w)


@pytest.mark.usefixtures("library_products")
def test_a_weight_gradient_gathers_its_windows_along_the_inputs_rows():
    """The weight gradient of a channels-last convolution is a convolution whose batch is the
    input's innermost dimension (the activations' channels): its windows are gathered
    transposed, the gather walking the input along its rows, and the GEMM reads them so.
    Values against the reference, strided and not."""
    images = rng.standard_normal((8, 12, 12, 6))  # (float64: sums of 1,152 terms compared)
    kernel = rng.standard_normal((3, 3, 6, 10))

    def loss(w, x, stride):
        y = lax.conv_general_dilated(
            x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return (y * y).sum()

    for stride in (1, 2):
        grad = partial(fg.grad(loss), stride=stride)
        assert_same_as_reference(grad, kernel, images, rtol=1e-10, atol=1e-9)
        plan = compiled(grad, kernel, images).fusion_plan()
        assert re.search(r"gemm\[batch=1, m=54, n=10, k=\d+, transpose_lhs", plan)  # 3x3x6


def test_rows_in_a_nest_run_as_one_loop_over_the_rows():
    """An attention's softmax, rows of (batch, heads, queries), is one loop over 2 x 3 x 8
    rows at plain offsets (no quotient by a row's coordinates left in them), whichever the
    axis order it reads."""
    scores = rng.standard_normal((2, 8, 3, 40)).astype(np.float32)

    def attention_softmax(s):
        return fg.nn.softmax(fnp.transpose(s, (0, 2, 1, 3)) * 0.5, axis=-1)

    assert_same_as_reference(attention_softmax, scores)
    program = fg.jit(attention_softmax).lower(scores).compile().executable.program
    (rows,) = [s.kernel.body[0] for s in program.steps if isinstance(s, schedule.KernelStep)]
    assert (rows.start, rows.stop) == (0, 48)
    offsets = [s.offset for s in rows.body[-1].body if isinstance(s, K.Store)]
    assert offsets and not [
        n for o in offsets for n in K.nodes(o) if isinstance(n, K.Binary) and n.op in ("div", "rem")
    ]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_lgamma_of_minus_infinity_is_the_references(dtype):
    """The reference gives -inf there, as SciPy's gammaln does (JAX gives +inf)."""
    x = np.array([-np.inf, np.inf, np.nan, 0.0, 1.0, 2.0, -2.0], dtype)
    with jit_backend("numpy"):
        expected = np.asarray(fg.jit(lax.lgamma)(x))
    np.testing.assert_array_equal(np.asarray(fg.jit(lax.lgamma)(x)), expected)


def test_a_sum_read_through_a_transpose_folds_along_memory_as_precisely_as_numpy():
    """Summing x.T down its columns, x (8, 2^17) float32: the kernel kept one running value
    per column, out[j] += x[j, i] for each i in turn, whose rounding errors gathered to 4e-4
    relative where the reference (NumPy's pairwise sum along the rows in memory) is 5e-8; it
    now folds each row of x, as a row sum does."""
    x = (np.random.default_rng(0).random((8, 1 << 17)) + 1000).astype(np.float32)
    exact = x.astype(np.float64).sum(axis=1)
    got = np.asarray(fg.jit(lambda v: v.T.sum(axis=0))(x))
    assert np.max(np.abs(got - exact) / exact) < 2e-6


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_ops_along_leading_axes_fold_slice_after_slice(name, axis, reverse):
    """Along an axis with many elements after it, a CPU folds a whole slice after the one
    before it (its loops walk memory in order): every line still folds in order, so the
    results are the reference's (bit for bit, but for cumlogsumexp's exp and log)."""
    values = rng.standard_normal((6, 5, 16)).astype(np.float32)
    values[2, 3, 4] = np.nan

    def f(v):
        return getattr(lax, name)(v, axis=axis, reverse=reverse)

    executable = compiled(f, values)
    (step,) = executable.program.steps
    innermost = step.kernel.body
    while any(isinstance(s, K.Loop) for s in innermost):
        innermost = next(s for s in innermost if isinstance(s, K.Loop)).body
    assert not any(isinstance(s, K.SetAcc) for s in innermost)  # no running accumulator
    if name == "cumlogsumexp":
        assert_same_as_reference(f, values)
        return
    with jit_backend("numpy"):
        expected = np.asarray(fg.jit(f)(values))
    with jit_backend("llvm"):
        got = np.asarray(fg.jit(f)(values))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int8", "uint8"])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_and_argmin_take_the_first_extreme_nan_first(dtype, name):
    """A CPU's two folds (the extreme, then the least index holding it) pick what the one
    fold picks: the first NaN where there is one, the first of equal extremes, -0.0 and 0.0
    alike, along any axis."""
    local = np.random.default_rng(9)
    for _ in range(5):
        shape = tuple(local.integers(1, 9, 3))
        if dtype in ("int8", "uint8"):
            x = local.integers(0, 4, shape).astype(dtype)
        else:
            values = np.round(local.standard_normal(shape) * 2) / 2
            flat = values.reshape(-1)
            places = local.integers(0, flat.size, flat.size // 3)
            flat[places] = local.choice([np.nan, -0.0, 0.0, np.inf, -np.inf], places.size)
            x = np.asarray(fnp.asarray(values).astype(dtype))
        for axis in range(3):
            assert_same_as_reference(lambda v, axis=axis: getattr(fnp, name)(v, axis=axis), x)


def test_costly_work_feeding_an_argmax_is_a_kernel_of_its_own():
    """Categorical sampling's Gumbel noise (random bits, two logarithms an element) is made
    by a map kernel that vectorizes, not inside the argmax's fold."""
    logits = rng.standard_normal((16, 300)).astype(np.float32)

    def sample(logits):
        return fg.random.categorical(fg.random.key(0), logits)

    executable = compiled(sample, logits)
    (fold,) = [s.kernel for s in executable.program.steps if "argmax" in s.kernel.name]
    assert "log" not in fold.as_text() and "xor" not in fold.as_text()
    assert_same_as_reference(sample, logits)


@pytest.mark.parametrize(
    "shape, dtype, tiled",
    [((64, 48), np.float32, True), ((40, 24), np.float64, True), ((50, 48), np.float32, False)],
)
def test_transposing_nests_walk_in_tiles_of_a_line(shape, dtype, tiled):
    """A nest storing along memory and loading across it is walked in tiles of a cache line's
    elements each way (`tiling`), and its tiles' rows still go to threads; a nest that is not
    whole tiles stays as it is. Values as the reference's either way."""
    from funcgrad.compiler.parallel import parallel_loop

    x = rng.standard_normal(shape).astype(dtype)

    def f(v):
        return v.T * 2.0 + 1.0

    (step,) = compiled(f, x).program.steps
    depth, body = 0, step.kernel.body
    while len(body) == 1 and isinstance(body[0], K.Loop):
        depth, body = depth + 1, body[0].body
    assert depth == (4 if tiled else 2)
    assert parallel_loop(step.kernel) is not None
    assert_same_as_reference(f, x)


def test_float_to_integer_conversions_saturate_and_send_nan_to_zero():
    """Written as compares, selects and a plain conversion (which vectorize), every float to
    integer conversion matches the reference at NaN, infinities, the types' bounds and just
    past them, and fractions either side of zero."""
    edges = [np.nan, np.inf, -np.inf, 1e30, -1e30, 2.0**64, 2.0**63, 2.0**63 - 2048, -0.7, 0.7]
    edges += [3.9, -3.9, 255.9, 256, -129, 65535.5, 2.0**31, -(2.0**31), 2.0**32, -(2.0**63)]
    x = np.array(edges)
    for integer in (
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
    ):
        for source in (np.float64, np.float32, np.float16):
            with np.errstate(over="ignore"):
                values = x.astype(source)
            assert_same_as_reference(lambda v, t=integer: v.astype(t), values)
    assert ".sat." not in compiled(lambda v: v.astype(np.uint64), x).as_text()


def test_a_pooling_window_s_loops_are_left_to_unroll_whole():
    """Loops of at most `render.UNROLLED_WHOLE` iterations (a 2x2 window's) carry no hint
    against unrolling, so the loop over the output's places vectorizes; longer ones keep it.
    Values as the reference's."""
    x = rng.standard_normal((2, 3, 8, 10)).astype(np.float32)

    def pool(a):
        return lax.reduce_window(a, -np.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    ir = compiled(pool, x).as_text()
    assert re.search(r"^(!\d+) = distinct !\{\1\}$", ir, re.MULTILINE)
    assert_same_as_reference(pool, x)
    long_rows = compiled(lambda a: a.sum(1), rng.standard_normal((9, 12)).astype(np.float32))
    assert "llvm.loop.unroll.disable" in long_rows.as_text()


def test_a_nest_storing_across_memory_walks_in_tiles_too():
    """A copy into column-major order for LAPACK loads along memory and stores across it (a
    float32 matrix into float64): it is walked in tiles of a line of the stored elements."""
    a = rng.standard_normal((64, 64)).astype(np.float32)
    spd = a @ a.T + 64 * np.eye(64, dtype=np.float32)
    (copy,) = [
        step.kernel
        for step in compiled(fnp.linalg.cholesky, spd).program.steps
        if isinstance(step, schedule.KernelStep) and step.kernel.outputs[0].dtype == np.float64
    ]
    depth, body = 0, copy.body
    while len(body) == 1 and isinstance(body[0], K.Loop):
        depth, body = depth + 1, body[0].body
    assert depth == 4
    assert_same_as_reference(fnp.linalg.cholesky, spd, rtol=1e-5, atol=1e-5)


def test_a_window_that_never_leaves_its_operand_reads_it_unchecked():
    """A VALID pool's windows lie inside the operand: its kernel reads without the
    padding's bounds checks (selects). A padded one keeps them. Values against the
    reference either way."""
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)

    def pool(padding):
        return lambda a: lax.reduce_window(a, -np.inf, lax.max, (1, 1, 2, 3), (1, 1, 2, 2), padding)

    for padding, checked in (("VALID", False), ("SAME", True)):
        assert_same_as_reference(pool(padding), x)
        (step,) = compiled(pool(padding), x).program.steps
        assert ("select(" in step.kernel.as_text()) == checked
