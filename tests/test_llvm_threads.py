"""Threads in compiled programs: which kernels split their outer loop, and that programs give
the reference backend's results whatever the thread count."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.array import CPU
from funcgrad.backends.llvm import pool, render
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.parallel import parallel_loop
from funcgrad.compiler.schedule import KernelStep
from funcgrad.config import config


@contextlib.contextmanager
def settings(backend: str = "llvm", threads: int | None = None, split_all: bool = False):
    """Run on `backend` with `threads` threads; `split_all` splits even tiny kernels."""
    saved = config.jit_backend, config.num_threads, render.PARALLEL_WORK
    config.update("jit_backend", backend)
    if threads is not None:
        config.update("num_threads", threads)
    if split_all:
        render.PARALLEL_WORK = 1
    try:
        yield
    finally:
        config.update("jit_backend", saved[0])
        config.update("num_threads", saved[1])
        render.PARALLEL_WORK = saved[2]


def kernels(f, *args) -> list:
    with settings():
        program = fg.jit(f).lower(*args).compile().executable.program
    return [step.kernel for step in program.steps if isinstance(step, KernelStep)]


def splits(f, *args) -> list[bool]:
    return [parallel_loop(k) is not None for k in kernels(f, *args)]


X = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)


@pytest.mark.parametrize(
    "f, expected",
    [
        (lambda x: fnp.tanh(x) * 2.0 + 1.0, True),  # one flat elementwise loop
        (lambda x: x.T + 1.0, True),  # each output row written by one iteration
        (lambda x: fg.nn.softmax(x, axis=1), True),  # rows, with per-row scratch
        (lambda x: x.sum(1), True),  # a reduction per output element
        (lambda x: (fnp.exp(x), fnp.exp(x).sum(1)), True),  # a row reads back its own row
        (lambda x: x.sum(), False),  # one accumulator over everything
        (lambda x: fnp.sort(x, axis=1), True),  # a radix sort per row, in one row's scratch
        (lambda x: fnp.sort(x[:, :8], axis=1), False),  # a merge sort: reads back what it writes
        # rows in a nest (an attention's scores): each row's fold set afresh inside it
        (lambda x: fg.nn.softmax(x.reshape(4, 2, 8, 48), axis=-1), True),
    ],
)
def test_which_kernels_split_their_outer_loop(f, expected):
    assert any(splits(f, X)) == expected


def test_large_elementwise_kernels_run_on_threads():
    x = np.ones(1 << 20, np.float32)
    with settings():
        ir = fg.jit(lambda v: fnp.exp(v) + 1.0).lower(x).compile().as_text()
    if pool.available():
        assert f"call void @{pool.SYMBOL}(" in ir
    else:
        assert "@parallel_for" in ir and "pthread_create" in ir
    with settings():
        small = fg.jit(lambda v: fnp.exp(v) + 1.0).lower(x[:1000]).compile().as_text()
    assert "parallel_for" not in small


@pytest.mark.skipif(not pool.available(), reason="the pool of worker threads is Linux's")
def test_the_worker_pool_serves_calls_back_to_back_at_once_and_after_fork():
    x = np.random.default_rng(2).standard_normal((4096, 64)).astype(np.float32)
    expected = np.tanh(x).sum(axis=1) * 2
    with settings(threads=4, split_all=True):
        f = fg.jit(lambda v: fnp.tanh(v).sum(axis=1) * 2)
        for _ in range(200):  # workers found spinning, asleep, or between the two
            np.testing.assert_allclose(np.asarray(f(x)), expected, rtol=1e-5, atol=1e-5)
        compiled, _ = pool.install()
        workers = compiled.engine.get_global_value_address("workers")
        assert ctypes.c_int64.from_address(workers).value >= 1  # the pool did the work
        # Several callers at once: one uses the pool, the others start threads of their own.
        results: list = []
        callers = [
            threading.Thread(target=lambda: results.extend(np.asarray(f(x)) for _ in range(20)))
            for _ in range(4)
        ]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        assert len(results) == 80
        for got in results:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        # A forked child has no workers (threads do not survive a fork): it starts its own.
        child = os.fork()
        if child == 0:  # pragma: no cover (the child exits)
            signal.alarm(30)  # a hang ends the child, and the test fails
            good = np.allclose(np.asarray(f(x)), expected, rtol=1e-5, atol=1e-5)
            os._exit(0 if good else 1)
        _, status = os.waitpid(child, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


PROGRAMS = {
    "elementwise": lambda x, y: fnp.exp(-x * x) * y + fnp.tanh(y),
    "broadcast": lambda x, y: x - x.mean(0) + y[:1],
    "transpose": lambda x, y: (x.T @ y) + x.T.sum(1, keepdims=True),
    "softmax": lambda x, y: fg.nn.softmax(x, axis=1) * y,
    "layernorm": lambda x, y: (x - x.mean(1, keepdims=True)) / fnp.sqrt(x.var(1, keepdims=True)),
    "column sums": lambda x, y: (x * y).sum(0),
    "argmax": lambda x, y: fnp.argmax(x + y, axis=1),
    "cumsum": lambda x, y: fnp.cumsum(x, axis=1) - fnp.cumsum(y, axis=0),
    "gather": lambda x, y: x[fnp.argsort(y[:, 0])],
    "scan": lambda x, y: lax.scan(lambda c, r: (fnp.tanh(c + r), c.sum()), x[0], y)[1],
    "cond": lambda x, y: lax.cond(x.sum() > 0, lambda: x * y, lambda: x - y),
    "int": lambda x, y: (x * 100).astype(fnp.int32) // 7 + (y > 0),
    "rows read back": lambda x, y: fg.grad(lambda u: (fg.nn.log_softmax(u, axis=1) * y).sum())(x),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@given(
    rows=st.integers(1, 37),
    cols=st.integers(1, 19),
    threads=st.integers(2, 5),
    seed=st.integers(0, 2**16),
)
def test_split_kernels_match_the_reference(name, rows, cols, threads, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = rng.standard_normal((rows, cols)).astype(np.float32)
    f = PROGRAMS[name]
    with settings("numpy"):
        expected = fg.jit(f)(x, y)
    with settings("llvm", threads=threads, split_all=True):
        got = fg.jit(f)(x, y)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=2e-5, atol=2e-5)


def test_an_iteration_reading_what_another_writes_stays_on_one_thread():
    # out[i] = x[i] + out[i - 1] over a flat loop: each iteration reads the previous one's
    # element, and two stores to one buffer with different strides overlap across rows.
    i = K.Index("i")
    x, out = K.Buffer("x", np.dtype(np.float32), 8), K.Buffer("out", np.dtype(np.float32), 8)

    def kernel(body):
        return K.Kernel("k", [x], [out], [K.Loop(i, 0, 4, body)])

    previous = K.binary("sub", i, K.const(1, K.INDEX))
    row = K.binary("mul", i, K.const(2, K.INDEX))
    own = K.Store(out, row, K.Load(x, row))
    assert parallel_loop(kernel([own, K.Store(out, row, K.Load(out, row))])) is not None
    assert parallel_loop(kernel([K.Store(out, i, K.Load(out, previous))])) is None
    assert parallel_loop(kernel([own, K.Store(out, i, K.Load(x, i))])) is None
    next_row = K.binary("add", row, K.const(2, K.INDEX))
    assert parallel_loop(kernel([own, K.Store(out, row, K.Load(out, next_row))])) is None


def test_large_whole_array_reductions_fold_parts_on_threads():
    x = np.ones((1 << 17) + 5, np.float32)
    found = kernels(lambda v: (v * 2).max(), x)
    assert [parallel_loop(k) is not None for k in found] == [True, False]
    assert found[0].name.endswith("_parts")
    assert kernels(lambda v: v.max(), x[:1000])[0].name.endswith("reduce_max")


REDUCTIONS = {
    "sum": lambda x: (x * 3.0).sum(),
    "mean": lambda x: x.mean(),
    "max": lambda x: fnp.max(x - 1.0),
    "min": lambda x: fnp.min(x * x),
    "prod": lambda x: fnp.prod(1.0 + 0.01 * fnp.tanh(x)),
    "any": lambda x: fnp.any(x > 1.5),
    "all": lambda x: fnp.all(x < 1.5),
    "int sum": lambda x: (x * 1000).astype(fnp.int32).sum(),
    "int max": lambda x: (x * 1000).astype(fnp.int16).max(),
    "init": lambda x: lax.reduce(x, np.float32(-2.5), lax.max, (0, 1)),
    "in scan": lambda x: lax.scan(lambda c, r: (fnp.tanh(c * (r * c).sum()), c.max()), x[0], x)[1],
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@given(
    rows=st.integers(1, 150),
    cols=st.integers(1, 9),
    threads=st.integers(1, 4),
    nans=st.lists(st.integers(0, 10**6), max_size=2),
    seed=st.integers(0, 2**16),
)
@example(rows=131, cols=2, threads=3, nans=[], seed=1)  # 64 parts of 2 rows, 3 rows left
@example(rows=70, cols=3, threads=2, nans=[209], seed=2)  # a NaN in the rows left over
def test_split_whole_array_reductions_match_the_reference(name, rows, cols, threads, nans, seed):
    """Split into at most 64 partial folds over the outer loop (fewer when it is shorter), the
    rest folded after the parts; NaNs anywhere in the array come through."""
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    x.flat[[k % x.size for k in nans]] = np.nan
    f = REDUCTIONS[name]
    with settings("numpy"):
        expected = np.asarray(fg.jit(f)(x))
    with settings("llvm", threads=threads, split_all=True):
        got = np.asarray(fg.jit(f)(x))
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-5)


def test_one_thread_and_many_give_identical_bits():
    x = np.random.default_rng(1).standard_normal((512, 300)).astype(np.float32)
    f = lambda v: (fg.nn.softmax(fnp.tanh(v) * 3.0, axis=1), v.sum())  # noqa: E731
    with settings("llvm", threads=1):
        one = fg.jit(f)(x)
    with settings("llvm", threads=4, split_all=True):
        many = fg.jit(f)(x)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_thread_count_comes_from_the_environment():
    code = "import funcgrad as fg; print(fg.config.num_threads)"
    env = dict(os.environ, FUNCGRAD_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "3", out.stderr
    default = subprocess.run(
        [sys.executable, "-c", code],
        env={k: v for k, v in os.environ.items() if k != "FUNCGRAD_NUM_THREADS"},
        capture_output=True,
        text=True,
    )
    assert int(default.stdout) == len(os.sched_getaffinity(0))


def test_devices_running_at_once_share_openblas_threads():
    """pmap's devices call GEMMs at once: while they run, OpenBLAS gets each one's share of
    the threads, and its own count comes back after."""
    from funcgrad.backends.llvm import blas
    from funcgrad.interpreters import parallel

    library = blas.library()
    before = library.scipy_openblas_get_num_threads64_()
    previous = config.num_threads
    config.update("num_threads", 4)
    try:
        count = library.scipy_openblas_get_num_threads64_
        seen = parallel.run_on_devices([count, count], [(), ()], [CPU, CPU], (("i", 2),))
    finally:
        config.update("num_threads", previous)
    assert seen == [2, 2]
    assert library.scipy_openblas_get_num_threads64_() == before
    with blas.threads_limited_to(3), blas.threads_limited_to(1):
        assert library.scipy_openblas_get_num_threads64_() == 1
    assert library.scipy_openblas_get_num_threads64_() == before


@pytest.mark.parametrize("runs", [True, False])
def test_a_fold_first_set_in_an_inner_loop_is_private_only_where_that_loop_runs(runs):
    """`for i: (for j: acc = x[i]); y[i] = acc`: each iteration sets its own accumulator when
    the inner loop runs; an empty inner loop would leave the last iteration's value, so the
    outer loop then stays on one thread."""
    f32 = np.dtype(np.float32)
    x, y = K.Buffer("x", f32, 8), K.Buffer("y", f32, 8)
    i, j, acc = K.Index("i"), K.Index("j"), K.Acc("acc", f32)
    inner = K.Loop(j, 0, 1 if runs else 0, [K.SetAcc(acc, K.Load(x, i))])
    kernel = K.Kernel("k", [x], [y], [K.Loop(i, 0, 8, [inner, K.Store(y, i, acc.read())])])
    assert (parallel_loop(kernel) is not None) == runs


# (m, k, n) of products large enough to run in blocks: taller than wide (row blocks), wider
# than tall (column blocks), two rows. (A single row is a fused kernel:
# `test_products_of_a_matrix_and_a_vector_are_fused_kernels`.)
BLOCKED_SHAPES = [(256, 784, 1024), (1024, 256, 784), (70, 300, 257), (2, 2048, 1024)]


@pytest.mark.usefixtures("library_products")
@pytest.mark.parametrize("m, k, n", BLOCKED_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_products_run_in_blocks_on_the_pool(m, k, n, dtype, threads):
    """Each transposition of each operand, a batch, and a product fused with a scaled addend
    (an SGD step's update), against NumPy in float64; the library's thread count comes back."""
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype)
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    cases = [
        (lambda a, b, c: a @ b, (a, b, c), a64 @ b64),
        (lambda at, b, c: at.T @ b, (a.T.copy(), b, c), a64 @ b64),
        (lambda a, bt, c: a @ bt.T, (a, b.T.copy(), c), a64 @ b64),
        (lambda at, bt, c: at.T @ bt.T, (a.T.copy(), b.T.copy(), c), a64 @ b64),
        (lambda a, b, c: c - 0.01 * (a @ b), (a, b, c), c64 - 0.01 * (a64 @ b64)),
        (
            lambda a, b, c: fnp.stack([a, 2 * a]) @ b,
            (a, b, c),
            np.stack([a64 @ b64, 2 * a64 @ b64]),
        ),
    ]
    library = blas_library()
    before = library.scipy_openblas_get_num_threads64_()
    with settings(threads=threads):
        for f, args, expected in cases:
            compiled = fg.jit(f).lower(*args).compile()
            assert render.GEMM_BLOCKS in compiled.executable.ir
            got = np.asarray(compiled(*args), np.float64)
            scale = np.abs(expected).max()
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * scale)
    assert library.scipy_openblas_get_num_threads64_() == before


@pytest.fixture
def threads_seen():
    """`(then, seen)`: `then(f)` is `f` followed, in the same program, by a callback that
    appends the library's thread count to `seen` while the program runs. The count is 2
    meanwhile, and as it was after."""
    library = blas_library()
    before = library.scipy_openblas_get_num_threads64_()
    library.scipy_openblas_set_num_threads64_(ctypes.c_int(2))
    seen = []

    def record(result):
        seen.append(library.scipy_openblas_get_num_threads64_())
        return result

    def then(f):
        def g(a):
            result = f(a)
            shape = fg.ShapeDtypeStruct(result.shape, result.dtype)
            return fg.pure_callback(record, shape, result)

        return g

    try:
        with settings():
            yield then, seen
    finally:
        library.scipy_openblas_set_num_threads64_(ctypes.c_int(before))


@pytest.mark.usefixtures("library_products")
@pytest.mark.skipif(not pool.available(), reason="the pool runs on Linux alone")
def test_the_library_threads_no_product_inside_a_program(threads_seen):
    """A product the library would thread (80x80x80) runs while its thread count is 1, seen
    by a callback that runs after it in the same program; one it runs alone (32^3) leaves the
    count as it is; the count comes back after the call."""
    then, seen = threads_seen
    f = then(lambda a: a @ a)
    for n, threads_inside in [(80, 1), (32, 2)]:
        a = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
        compiled = fg.jit(f).lower(a).compile()
        marked = compiled.as_text().startswith(render.LIBRARY_THREADS_OFF)
        assert marked == (threads_inside == 1)
        got = np.asarray(compiled(a), np.float64)
        expected = a.astype(np.float64) @ a.astype(np.float64)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
        assert seen.pop() == threads_inside
        assert blas_library().scipy_openblas_get_num_threads64_() == 2


def test_decompositions_of_small_matrices_run_on_one_library_thread(threads_seen):
    """A Cholesky factor of 64x64 runs while the library's thread count is 1 (seen by a
    callback after it); one of 600x600 keeps the library's threads."""
    then, seen = threads_seen
    f = then(fnp.linalg.cholesky)
    for n, single in [(64, True), (600, False)]:
        a = np.random.default_rng(n).standard_normal((n, n))
        a = a @ a.T + n * np.eye(n)
        compiled = fg.jit(f).lower(a).compile()
        assert compiled.as_text().startswith(render.LIBRARY_THREADS_OFF) == single
        np.testing.assert_allclose(np.asarray(compiled(a)), np.linalg.cholesky(a))
        assert seen.pop() == (1 if single else 2)


def blas_library():
    from funcgrad.backends.llvm import blas

    return blas.library()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_of_a_matrix_and_a_vector_are_fused_kernels(dtype):
    """A CPU's library would run them as GEMMs of one row or column, several times slower
    than one walk of the matrix; batched ones stay GEMMs. Against NumPy in float64."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 2048)).astype(dtype)
    v, w = rng.standard_normal(2048).astype(dtype), rng.standard_normal(300).astype(dtype)
    a64, v64, w64 = (x.astype(np.float64) for x in (a, v, w))
    cases = [
        (lambda a, v, w: a @ v, a64 @ v64, False),
        (lambda a, v, w: w @ a, w64 @ a64, False),
        (lambda a, v, w: a @ v[:, None], (a64 @ v64)[:, None], False),
        (
            lambda a, v, w: fnp.stack([a, -a]) @ fnp.stack([v, 2 * v])[:, :, None],
            np.stack([a64 @ v64, -2 * a64 @ v64])[:, :, None],
            True,
        ),
    ]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for f, expected, gemm in cases:
        compiled = fg.jit(f).lower(a, v, w).compile()
        steps = compiled.executable.program.steps
        assert any(type(step).__name__ == "GemmStep" for step in steps) == gemm
        got = np.asarray(compiled(a, v, w), np.float64)
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())
