"""A program with many kernels compiles as several LLVM modules, on threads at once, linked
into one: it computes what the NumPy backend computes, on any thread count, and its split and
its on-disk cache entry do not depend on the thread count."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from checks import products_as
from test_llvm_threads import settings as backend

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.backends.llvm import render
from funcgrad.backends.llvm.engine import WRITTEN_AS_IT_RUNS
from funcgrad.config import config

rng = np.random.default_rng(0)
X = rng.standard_normal((64, 48)).astype(np.float32)
W = rng.standard_normal((48, 48)).astype(np.float32)
TABLE = rng.standard_normal(48).astype(np.float32)  # becomes a constant of the module


def program(x, w):
    """Kernels of many kinds: elementwise with a closed-over constant, float16 arithmetic,
    C library calls (fmod, lgamma), row reductions, a matrix product, a scan over kernels and
    a host callback."""
    y = fnp.tanh(x @ w) + TABLE
    half = (x.astype(fnp.float16) * 1.5 + 0.25).astype(np.float32)
    library = fnp.fmod(x, 0.7) + lax.lgamma(fnp.abs(x) + 1.0)
    softmax = fnp.exp(y - y.max(axis=1, keepdims=True))
    softmax = softmax / softmax.sum(axis=1, keepdims=True)

    def step(carry, row):
        carry = carry * 0.5 + fnp.sin(row)
        return carry, carry.sum()

    last, sums = lax.scan(step, fnp.zeros(48, np.float32), x)
    fg.debug.callback(lambda v: None, last)
    return softmax, half + library, last, sums


@contextlib.contextmanager
def settings(threads: int, module_text: int = 1, all_threaded: bool = False):
    """The LLVM backend on `threads` threads (test_llvm_threads' settings), a module per
    `module_text` characters of kernels (every kernel a module of its own by default), and
    with `all_threaded` every kernel's outer loop run on threads."""
    saved = render.MODULE_TEXT, render.MAX_MODULES
    render.MODULE_TEXT, render.MAX_MODULES = module_text, 64
    try:
        with backend("llvm", threads, split_all=all_threaded):
            yield
    finally:
        render.MODULE_TEXT, render.MAX_MODULES = saved


def reference():
    with backend("numpy"):
        return [np.asarray(v) for v in fg.jit(program)(X, W)]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("all_threaded", [False, True])
def test_a_program_split_into_modules_matches_the_reference(threads, all_threaded):
    with settings(threads, all_threaded=all_threaded):
        compiled = fg.jit(program).lower(X, W).compile()
        got = compiled(X, W)
    modules = compiled.executable.machine_code.modules
    assert len(modules) > 2
    assert sum("define void @entry" in m for m in modules) == 1
    assert "define void @entry" in modules[-1]
    for module in modules[:-1]:  # kernels or tile functions, defined for the last to call
        tiles = module.startswith(WRITTEN_AS_IT_RUNS)
        defined = "define void @tiles" if tiles else "define void @k"
        assert defined in module and "define internal void @" not in module
    for g, e in zip(got, reference()):
        np.testing.assert_allclose(np.asarray(g), e, rtol=2e-5, atol=2e-6)


def test_products_of_one_shape_share_a_tile_function_in_a_lightly_optimized_module():
    """The tile function of a product's shape is rendered once however many products have
    it, in a module marked as written as it runs, apart even from a program small enough
    to be one module otherwise."""
    a, b = rng.standard_normal((2, 40, 48)).astype(np.float32)

    def products(a, b, w):
        return fnp.tanh(a @ w) @ w, (b @ w) * 2.0

    with products_as("tiles"), settings(2, module_text=render.MODULE_TEXT):
        compiled = fg.jit(products).lower(a, b, W).compile()
        got = compiled(a, b, W)
    executable = compiled.executable
    assert executable.fusion_plan().count("tiles[") == 3
    modules = executable.machine_code.modules
    lightly = [m for m in modules if m.startswith(WRITTEN_AS_IT_RUNS)]
    assert len(lightly) == 1 and lightly[0].count("define void @tiles") == 1
    assert "define internal void @tiles" not in modules[-1]
    expected = [np.tanh(a @ W) @ W, (b @ W) * 2.0]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-4)


def test_the_split_does_not_depend_on_the_thread_count():
    texts = []
    for threads in (1, 4):
        with settings(threads, module_text=2_000):
            texts.append(fg.jit(program).lower(X, W).compile().executable.machine_code.modules)
    assert texts[0] == texts[1] and len(texts[0]) > 1


def test_a_small_program_stays_one_module_whose_text_is_the_programs():
    with settings(2, module_text=render.MODULE_TEXT):
        executable = fg.jit(lambda x: fnp.sin(x) * 2.0).lower(X).compile().executable
    assert executable.machine_code.modules == [executable.ir]


def test_a_split_program_is_cached_whole_and_loaded_by_any_thread_count(tmp_path):
    saved = config.enable_compilation_cache, config.compilation_cache_dir
    config.update("enable_compilation_cache", True)
    config.update("compilation_cache_dir", tmp_path)
    try:
        with settings(3):
            cold = fg.jit(program).lower(X, W).compile()
            cold_values = cold(X, W)
        with settings(1):
            warm = fg.jit(program).lower(X, W).compile()
            warm_values = warm(X, W)
    finally:
        config.update("enable_compilation_cache", saved[0])
        config.update("compilation_cache_dir", saved[1])
    assert not cold.executable.machine_code.from_cache
    assert warm.executable.machine_code.from_cache
    assert len(warm.executable.machine_code.modules) > 2
    for c, w in zip(cold_values, warm_values):
        np.testing.assert_array_equal(np.asarray(w), np.asarray(c))
