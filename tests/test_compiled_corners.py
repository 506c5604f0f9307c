"""Corners the random compiled programs do not draw, each found by differential fuzzing: a
program jitted for the LLVM backend must give the NumPy reference backend's results (which
are eager's), bit for bit where the operation has one correct result."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from checks import jit_backend

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax


def both_backends(fun, *args) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """fun's jitted outputs on (LLVM, the reference backend)."""
    results = []
    for backend in ("llvm", "numpy"):
        with jit_backend(backend):
            results.append([np.asarray(x) for x in fg.tree_util.tree_leaves(fg.jit(fun)(*args))])
    return results[0], results[1]


def assert_same_bits(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert (g.dtype, g.shape) == (e.dtype, e.shape)
        np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), e.view(f"u{e.itemsize}"))


def test_complex_times_one_is_a_product():
    """x * 1 was simplified to x for complex x, but (a + bi)(1 + 0i) is NaN in its real part
    where b is infinite and +0 where a part is -0: the compiled program returned x."""
    z = np.array(
        [complex(1, np.inf), complex(np.inf, 1), complex(-0.0, -0.0), complex(2, -0.0)],
        np.complex64,
    )
    got, expected = both_backends(lambda z: (z * 1, 1 * z, z * np.complex64(1)), z)
    assert np.isnan(expected[0][0].real) and np.signbit(expected[0][2].real) == 0
    assert_same_bits(got, expected)


def test_equations_with_parameters_of_equal_value_but_other_bits_stay_apart():
    """Common subexpression elimination compared parameters with ==, so two gathers filling
    with -0.0 and with 0.0 became one: both filled with -0.0."""
    x = fnp.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    outside = np.array([5, -9, 1], np.int32)

    def fills(x, i):
        return x.at[i].get(mode="fill", fill_value=-0.0), x.at[i].get(mode="fill", fill_value=0.0)

    got, expected = both_backends(fills, x, outside)
    assert np.signbit(expected[0][0]) and not np.signbit(expected[1][0])
    assert_same_bits(got, expected)


def test_constant_bfloat16_arrays_saturate_when_converted_to_integers():
    """A constant bfloat16 array (not of NumPy's float kind) was converted to integers by
    NumPy's astype when the kernel was built, wrapping: 300 became 44 in int8, 1e10 became
    -2147483648 in int32, -8.5 became 248 in uint8, where a value read at run time saturates."""
    bf16 = ml_dtypes.bfloat16
    targets = (np.int8, np.uint8, np.int16, np.int32, np.uint32)

    def converted(value):
        filled = fnp.full((3,), value, dtype=bf16)
        return [lax.convert_element_type(filled, t) for t in targets]

    for value in (300.0, -8.5, 1e10, -1e10, np.inf, -np.inf, np.nan):
        got, expected = both_backends(functools.partial(converted, value))
        assert_same_bits(got, expected)
        if value == 300.0:
            assert expected[0][0] == 127


def test_a_product_scaled_by_zero_keeps_its_nans_in_an_update():
    """`0 * w + a @ b` and `w + 0 * (a @ b)` ran as one GEMM with the factor 0 as its beta or
    alpha, and a BLAS reads no operand whose factor is 0: w's NaN and infinity, and a's
    infinite row, vanished where the reference (0 * NaN, 0 * inf) has NaN."""
    rng = np.random.default_rng(0)
    a, b, w = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3))
    w[0, 0], w[1, 1], a[2] = np.nan, np.inf, np.inf

    # One program each: a product read by several updates is not fused into any.
    updates = (
        lambda a, b, w: 0.0 * w + a @ b,
        lambda a, b, w: w + 0.0 * (a @ b),
        lambda a, b, w: a @ b - 0.0 * w,
    )
    for update in updates:
        [got], [expected] = both_backends(update, a, b, w)
        assert np.isnan(expected[0, 0]) and np.isnan(expected).sum() > 1
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
