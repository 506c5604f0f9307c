"""A CPU's compiled sorts and top_k (a radix sort of each line's keys from
`radix_sort.RADIX_FROM` elements on, a merge sort below): element for element the NumPy
reference backend's results, in every key dtype, with NaNs of both signs and payloads,
signed zeros, infinities, ties among equal keys, several keys and operands, along any axis,
and with enough lines that a CPU's threads share them."""

from __future__ import annotations

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.compiler import radix_sort

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTEGERS = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def _bits(value) -> np.ndarray:
    """An array's bytes, so that NaNs (and their signs and payloads) and -0.0 compare too."""
    value = np.asarray(value)
    return np.ascontiguousarray(value).view(np.uint8).reshape(value.shape + (-1,))


def _agree(fun, *args) -> None:
    with jit_backend("numpy"):
        expected = fg.jit(fun)(*args)
    with jit_backend("llvm"):
        got = fg.jit(fun)(*args)
    for want, have in zip(fg.tree_util.tree_leaves(expected), fg.tree_util.tree_leaves(got)):
        assert np.asarray(have).dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(_bits(have), _bits(want))


def _values(rng, dtype: str, shape: tuple) -> np.ndarray:
    """Values with many ties and, in floats, every special value of the IEEE order."""
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in INTEGERS:
        info = np.iinfo(dtype)
        extremes = np.array([info.min, info.max, 0, 1], dtype)
        values = rng.integers(-5, 6, shape).astype(dtype)
        flat = values.reshape(-1)
        picks = rng.integers(0, flat.size, flat.size // 8)
        flat[picks] = extremes[rng.integers(0, 4, picks.size)]
        return values
    values = np.round(rng.standard_normal(shape) * 4) / 4
    flat = values.reshape(-1)
    specials = [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf]
    picks = rng.integers(0, flat.size, flat.size // 6)
    flat[picks] = np.array(specials)[rng.integers(0, len(specials), picks.size)]
    values = fnp.asarray(values.astype(np.float64)).astype(dtype)
    if dtype in ("float32", "float64"):  # NaNs of other payloads, both signs
        raw = np.array(values)
        bits = raw.view(f"uint{raw.dtype.itemsize * 8}").reshape(-1)
        nan = np.isnan(raw.reshape(-1))
        bits[nan] |= np.array(rng.integers(1, 1 << 20, nan.sum()), bits.dtype)
        values = fnp.asarray(raw)
    return values


def test_long_lines_take_the_radix_sort():
    assert radix_sort.RADIX_FROM <= 300 and radix_sort.RADIX_FROM > 8


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS)
def test_sort_and_argsort_every_key_dtype(dtype):
    rng = np.random.default_rng(0)
    values = _values(rng, dtype, (3, 700))
    _agree(lambda v: (fnp.sort(v, axis=1), fnp.argsort(v, axis=1, stable=True)), values)


@pytest.mark.parametrize("dtype", FLOATS + ["int8", "uint8", "int32", "uint32", "int64"])
def test_top_k_every_dtype(dtype):
    rng = np.random.default_rng(1)
    values = _values(rng, dtype, (4, 300))
    for k in (1, 40, 300):
        _agree(lambda v, k=k: lax.top_k(v, k), values)


def test_sorts_along_a_leading_axis_and_of_one_long_line():
    rng = np.random.default_rng(2)
    _agree(lambda v: fnp.sort(v, axis=0), _values(rng, "float32", (257, 3, 2)))
    _agree(fnp.argsort, _values(rng, "float32", (100_000,)))


def test_several_keys_carry_every_operand():
    rng = np.random.default_rng(3)
    first = rng.integers(0, 3, (2, 500)).astype(np.int32)
    second = _values(rng, "float32", (2, 500))
    payload = rng.standard_normal((2, 500))
    _agree(lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=2), first, second, payload)
    _agree(lambda a, b: fnp.lexsort((a, b)), first[0], second[0].astype(np.float64))


def test_complex_keys_sort_by_real_then_imaginary_part():
    rng = np.random.default_rng(4)
    real = np.round(rng.standard_normal(400) * 2) / 2
    values = (real + 1j * rng.integers(-2, 3, 400)).astype(np.complex64)
    values[[5, 9]] = np.nan
    _agree(fnp.sort, values)


def test_many_lines_shared_by_threads_and_sorts_inside_transforms():
    rng = np.random.default_rng(5)
    values = _values(rng, "float32", (3000, 64))
    _agree(lambda v: lax.top_k(v, 5), values)
    _agree(fg.vmap(lambda v: fnp.sort(v)), values[:40])

    def scanned(carry, row):
        return carry + fnp.sort(row)[:4].sum(), fnp.argsort(row)

    _agree(lambda v: lax.scan(scanned, np.float32(0), v), values[:20])


@settings(deadline=None)
@given(
    dtype=st.sampled_from(FLOATS + INTEGERS),
    lines=st.integers(1, 5),
    n=st.integers(radix_sort.RADIX_FROM, 400),
    seed=st.integers(0, 2**31 - 1),
)
def test_drawn_sorts_equal_the_reference(dtype, lines, n, seed):
    values = _values(np.random.default_rng(seed), dtype, (lines, n))
    _agree(lambda v: (fnp.sort(v), fnp.argsort(v, stable=True)), values)
