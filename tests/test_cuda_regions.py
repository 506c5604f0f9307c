"""Control flow on the device (`backends/cuda/regions.py`): a cond, while_loop or scan whose
regions are small runs as one kernel on one block, without host round trips. Each program is
run by the emulator (its region kernels on a block of POSIX threads meeting at barriers, as a
GPU's block would) and, where one exists, a GPU, and compared with the NumPy reference."""

from __future__ import annotations

import re

import numpy as np
import pytest
from checks import jit_backend
from test_cuda import assert_same_as_reference, compiled_text

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.backends.cuda import emulator, executable, regions

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler"),
]


@pytest.fixture
def host_walk(monkeypatch):
    """Records the kernels the host launches and the values it reads back from the device."""
    seen = {"launched": [], "read": 0}
    launch, scalar = executable.Emulator.launch, executable._Walk.scalar

    def launching(self, module, kernel, buffers):
        seen["launched"].append(kernel.name)
        return launch(self, module, kernel, buffers)

    def reading(self, buffer):
        seen["read"] += 1
        return scalar(self, buffer)

    monkeypatch.setattr(executable.Emulator, "launch", launching)
    monkeypatch.setattr(executable._Walk, "scalar", reading)
    return seen


def run_emulated(fun, *args):
    with jit_backend("cuda_emulator"):
        return fg.jit(fun)(*args)


def regions_in(text: str) -> list[str]:
    return re.findall(r"__global__ void r\d+_(\w+)Step", text)


def test_a_loop_a_branch_and_a_while_each_run_as_one_launch_without_reading_back(host_walk):
    xs = np.linspace(-1, 1, 24).reshape(6, 4).astype(np.float32)

    def f(xs, n):
        def body(carry, x):
            carry = fnp.tanh(carry * 0.9 + x)
            return carry, carry.sum()

        carry, sums = lax.scan(body, fnp.zeros(4, np.float32), xs, reverse=True)
        sums = lax.cond(sums.sum() > 0, lambda v: v * 2, lambda v: v - 1, sums)
        count, grown = lax.while_loop(
            lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5 + c[0]), (0, sums)
        )
        branch = lax.switch(n % 3, [lambda v: v + 1, lambda v: v * v, lambda v: -v], carry)
        return carry, sums, count, grown, branch

    for n in (0, 1, 4, 5):
        assert_same_as_reference(f, xs, np.int32(n), exact=False)
    text = compiled_text(f, xs, np.int32(4))
    assert regions_in(text) == ["Scan", "Cond", "While", "Cond"]
    host_walk["launched"].clear()
    run_emulated(f, xs, np.int32(4))
    launched = host_walk["launched"]
    assert [name for name in launched if name.startswith("r")] == [
        "r0_ScanStep",
        "r1_CondStep",
        "r2_WhileStep",
        "r3_CondStep",
    ]
    assert len(launched) < 10 and host_walk["read"] == 0
    # The kernels the regions call are device functions, not launched by the host, and no
    # pointer of a region is restricted, the region's own or its functions': its steps' buffers
    # may share memory, and a restricted pointer lets the compiler keep values the region's
    # own writes change (on a GPU, not the emulator: a while loop's carries stayed as they
    # were but in thread 0).
    assert "__device__ void k1_" in text and "r0_ScanStep" in text
    device_functions = re.findall(r"__device__ void k\d+_\w*\(([^)]*)\)", text)
    regions = re.findall(r"__global__ void r\d+_\w*\(([^)]*)\)", text)
    assert device_functions and len(regions) == 4
    assert not any("__restrict__" in s for s in device_functions + regions)
    assert re.search(r"__global__ void k\d+_\w*\([^)]*__restrict__", text)  # (the others)
    with jit_backend("cuda_emulator"):
        plan = fg.jit(f).lower(xs, np.int32(4)).compile().fusion_plan()
    assert re.search(
        r"on the device, one block \(r0_ScanStep\): .* = scan\[length=6, reverse\]", plan
    )
    assert re.search(r"on the device, one block \(r2_WhileStep\): .* = while\(", plan)


def test_an_eager_loop_on_gpu_arrays_runs_on_the_device_too(host_walk):
    gpu = fg.devices("cuda_emulator")[0]
    x = fg.device_put(np.arange(5.0, dtype=np.float32), gpu)
    out = lax.fori_loop(0, 10, lambda i, v: v * 1.1 + i, x)  # a scan: its bounds are static
    grown = lax.while_loop(lambda v: v.sum() < 1000, lambda v: v * 1.5, x + 1)
    assert out.device == gpu and grown.device == gpu and host_walk["read"] == 0
    regions_run = [name for name in host_walk["launched"] if name.startswith("r")]
    assert regions_run == ["r0_ScanStep", "r0_WhileStep"]
    expected = np.arange(5.0, dtype=np.float32)
    for i in range(10):
        expected = expected * np.float32(1.1) + np.float32(i)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)
    expected = np.arange(1.0, 6.0, dtype=np.float32)
    while expected.sum() < 1000:
        expected = expected * np.float32(1.5)
    np.testing.assert_array_equal(np.asarray(grown), expected)


def test_gemms_in_a_loop_body_run_as_the_blocks_gemm_forward_and_backward():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((24, 24)) / 5).astype(np.float32)
    xs = rng.standard_normal((7, 8, 24)).astype(np.float32)

    def loss(w, xs):
        def cell(h, x):
            h = fnp.tanh(h @ w + x)  # (8, 24) @ (24, 24): a GEMM
            return h, (h * h).sum()

        h, sums = lax.scan(cell, fnp.ones((8, 24), np.float32), xs)
        return h.sum() + sums.sum()

    # The gradient's loop multiplies by w transposed.
    for f in (loss, fg.grad(loss, argnums=(0, 1))):
        assert_same_as_reference(f, w, xs, exact=False, rtol=2e-5)
        text = compiled_text(f, w, xs)
        assert regions_in(text) and "fg_block_gemm<float" in text.split("r0_")[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, dtypes.float16, dtypes.bfloat16])
def test_the_blocks_gemm_takes_either_operand_transposed_and_batches(dtype):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((3, 16, 40)).astype(dtype)
    v = rng.standard_normal((32, 24)).astype(dtype)
    stacks = rng.standard_normal((3, 4, 24, 12)).astype(dtype)

    def f(xs, v, stacks):
        def body(c, inputs):
            x, stack = inputs
            left = x.T @ c  # (40, 16) @ (16, 24), x stored (16, 40)
            right = c @ v.T  # (16, 24) @ (24, 32), v stored (32, 24)
            batched = fnp.einsum("bij,bjk->bik", stack.transpose(0, 2, 1), stack)  # 4 of 12x12
            c = fnp.tanh(c + left[:16] * 0.1 + right[:, :24] * 0.1)
            return c, batched.sum(0)

        return lax.scan(body, fnp.ones((16, 24), dtype), (xs, stacks))

    tolerance = {2: 3e-2, 4: 1e-5, 8: 1e-12}[np.dtype(dtype).itemsize]
    assert_same_as_reference(f, xs, v, stacks, exact=False, rtol=tolerance)
    text = compiled_text(f, xs, v, stacks)
    gemms = re.findall(r"fg_block_gemm<.*\);", text.split("r0_")[1])
    flags = [re.search(r"LL, (true|false), (true|false), ", call).groups() for call in gemms]
    assert ("true", "false") in flags and ("false", "true") in flags
    assert any("4LL, 12LL, 12LL, 24LL" in call for call in gemms)


def test_nested_loops_and_branches_run_inside_one_region():
    xs = np.arange(20, dtype=np.int32).reshape(5, 4)

    def f(xs):
        def outer(carry, x):
            def inner(i, c):
                return lax.cond(i % 2 == 0, lambda c: c + x * i, lambda c: c - 1, c)

            carry = lax.fori_loop(0, x[0] % 4 + 1, inner, carry)  # a while with a dynamic bound
            inner_ys = lax.scan(lambda c, y: (c + y, c * y), carry[0], x)[1]
            return carry, inner_ys

        return lax.scan(outer, fnp.zeros(4, np.int32), xs, reverse=True)

    assert_same_as_reference(f, xs)
    assert regions_in(compiled_text(f, xs)) == ["Scan"]


def test_rows_block_reductions_and_split_reductions_run_inside_a_region():
    rng = np.random.default_rng(1)
    rows = rng.integers(-50, 50, (3, 16, 200)).astype(np.int32)
    long = rng.integers(-50, 50, (3, 40000)).astype(np.int32)

    def f(rows, long):
        def body(carry, xs):
            row, big = xs
            row_sums = (row * carry).sum(axis=1)  # a block per row of 200
            total = row_sums.sum() + big.sum()  # a block reduction; a split one (40,000)
            return carry + total % 7, (row_sums, total, big.max())

        return lax.scan(body, np.int32(1), (rows, long))

    assert_same_as_reference(f, rows, long)
    text = compiled_text(f, rows, long)
    assert regions_in(text) == ["Scan"]
    device_functions = text.split("__global__ void r0_")[0]
    assert "blockIdx.x; " in device_functions  # a row kernel's loop over rows (by blocks)
    assert "__shared__" in device_functions


def test_a_region_with_too_much_work_or_a_host_step_stays_on_the_host_walk(host_walk):
    big = np.ones((3, regions.REGION_WORK + 1), np.float32)

    def heavy(big):
        return lax.scan(lambda c, x: (c + fnp.sin(x).sum(), c), np.float32(0), big)

    assert_same_as_reference(heavy, big, exact=False, rtol=1e-5)
    assert regions_in(compiled_text(heavy, big)) == []
    xs = np.arange(4, dtype=np.float32)
    seen = []

    def printing(xs):
        def body(c, x):
            fg.debug.callback(lambda v: seen.append(float(v)), x)
            counted = lax.while_loop(lambda k: k < x, lambda k: k + 1.0, 0.0)
            return c + counted, counted

        return lax.scan(body, np.float32(0), xs)

    assert_same_as_reference(printing, xs)
    # The scan holds a callback, so the host walks it; the while inside is a region.
    assert regions_in(compiled_text(printing, xs)) == ["While"]
    host_walk["read"] = 0
    seen.clear()
    run_emulated(printing, xs)
    assert seen == [0.0, 1.0, 2.0, 3.0] and host_walk["read"] == 0


def test_a_region_whose_shared_arrays_exceed_a_block_stays_on_the_host_walk():
    x = np.linspace(0, 1, 64)

    def f(x):
        def body(c, _):
            for _ in range(7):  # seven dependent float64 block reductions: 8 KiB of shared each
                c = c + (x * c).sum()
            return c, None

        return lax.scan(body, 1e-3, None, length=3)[0]

    assert_same_as_reference(f, x, exact=False)
    assert regions_in(compiled_text(f, x)) == []
    assert regions_in(
        compiled_text(
            lambda x: lax.scan(lambda c, _: (c + (x * c).sum(), None), 1e-3, None, length=3)[0], x
        )
    ) == ["Scan"]


def test_rows_held_by_their_threads_run_in_a_region_on_at_least_their_block():
    """Softmaxes of rows of 300 (a block of 32 threads, each holding 3 vectors of each row)
    and of 1,030 (64 threads) in a scan's body: the region's block has as many threads as
    the larger needs, and the threads past the smaller's block take no vectors of its rows.
    Rows of 10,000 need 512 threads, more than a GPU gives a region: that scan stays on the
    host walk."""
    rng = np.random.default_rng(2)
    narrow = rng.standard_normal((3, 4, 300)).astype(np.float32)
    wide = rng.standard_normal((3, 2, 1030)).astype(np.float32)

    def softmax(x):
        e = fnp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def f(narrow, wide):
        def body(scale, rows):
            return scale * 1.5, [softmax(r * scale) for r in rows]

        return lax.scan(body, np.float32(1), [narrow, wide])

    assert_same_as_reference(f, narrow, wide, exact=False)
    text = compiled_text(f, narrow, wide)
    assert regions_in(text) == ["Scan"]
    assert "h0 < 3; ++h0" in text.split("__global__ void r0_")[0]
    longer = rng.standard_normal((3, 2, 10000)).astype(np.float32)
    assert regions_in(compiled_text(f, narrow, longer)) == []
