"""The compiled backend's pool of large buffers: memory is reused only when nothing can see it."""

import threading

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.backends.llvm import buffers
from tests.checks import jit_backend

pytestmark = pytest.mark.usefixtures("llvm_backend")

LARGE = buffers.MIN_BYTES // 4  # float32 elements in a pooled buffer


@pytest.fixture
def llvm_backend():
    with jit_backend("llvm"):
        yield


def _address(x) -> int:
    return np.asarray(x).__array_interface__["data"][0]


@pytest.fixture
def empty_pool():
    """The pool with no blocks from earlier tests: one of theirs freed midway (by a cache
    letting go of an array) is older than the block this test drops, and the pool hands out
    the oldest free block of a size first."""
    kept = buffers.pool._blocks
    buffers.pool._blocks = []
    try:
        yield
    finally:
        buffers.pool._blocks = kept


@pytest.mark.usefixtures("empty_pool")
def test_a_dropped_output_is_reused_and_a_held_one_never_is():
    plus = fg.jit(lambda v: v + 1)
    x = fnp.arange(LARGE, dtype=np.float32)
    first = plus(x)
    address = _address(first)
    second = plus(x)  # `first` is still held
    assert _address(second) != address
    np.testing.assert_array_equal(first, np.arange(LARGE, dtype=np.float32) + 1)
    del first
    third = plus(x * 0)
    assert _address(third) == address
    np.testing.assert_array_equal(third, np.ones(LARGE, np.float32))


@pytest.mark.parametrize(
    "keep",
    [
        lambda out: np.asarray(out)[::3],  # a view
        lambda out: memoryview(np.asarray(out)),  # an exported buffer
        lambda out: np.asarray(out).reshape(-1, 4)[1:],  # a view of a view
    ],
)
def test_a_view_of_a_dropped_output_keeps_its_values(keep):
    double = fg.jit(lambda v: v * 2)
    x = fnp.arange(LARGE, dtype=np.float32)
    out = double(x)
    kept = keep(out)
    expected = np.array(kept, copy=True)
    del out
    for _ in range(3):
        double(x + 7)
    np.testing.assert_array_equal(np.asarray(kept), expected)


def test_the_arena_of_a_call_is_reused_without_leaking_values():
    def chain(v):
        w = fnp.sort(v)  # a buffered intermediate in the arena
        return (w * 2).sum(), fnp.cumsum(w)[-1]

    compiled = fg.jit(chain)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.integers(-8, 8, LARGE).astype(np.float32)  # sums are exact
        total, last = compiled(x)
        assert float(total) == 2 * float(x.sum()) and float(last) == float(x.sum())


def test_calls_from_several_threads_get_their_own_buffers():
    scale = fg.jit(lambda v, k: v * k)
    x = fnp.ones(LARGE, dtype=np.float32)
    results = {}

    def worker(k):
        for _ in range(20):
            out = scale(x, np.float32(k))
            assert float(np.asarray(out).min()) == float(np.asarray(out).max()) == k
        results[k] = out

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [1, 2, 3, 4]
    for k, out in results.items():
        np.testing.assert_array_equal(out, np.full(LARGE, k, np.float32))


def test_the_pool_keeps_at_most_its_bound_and_lets_the_oldest_go():
    pool = buffers.BufferPool(kept_bytes=3 * buffers.MIN_BYTES)
    dtype = np.dtype(np.uint8)
    held = [pool.empty((buffers.MIN_BYTES,), dtype) for _ in range(5)]
    assert len(pool._blocks) == 3
    assert all(block.base is None for block in pool._blocks)
    kept = {_address(block) for block in pool._blocks}
    assert kept == {_address(a) for a in held[2:]}  # the newest three
    del held
    again = pool.empty((buffers.MIN_BYTES,), dtype)
    assert _address(again) in kept
    bigger = pool.empty((4 * buffers.MIN_BYTES,), dtype)  # over the bound: never kept
    assert all(block is not bigger.base for block in pool._blocks)


def test_small_buffers_come_from_numpy():
    assert buffers.allocator((10,), np.dtype(np.float32)) is np.empty
    assert buffers.allocator((LARGE,), np.dtype(np.float32)) == buffers.pool.empty
