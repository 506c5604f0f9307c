"""Contractions under a DotAlgorithm or DotAlgorithmPreset against NumPy: each operand rounded
to the algorithm's type (split into components), products of the parts in float64, summed and
rounded as the algorithm says."""

import ml_dtypes
import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax

P = lax.DotAlgorithmPreset
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to 10 mantissa bits, to nearest, ties to even (by the bits)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    dropped = 13
    half, last_kept = 1 << (dropped - 1), (bits >> dropped) & 1
    rounded = (bits + half - 1 + last_kept) >> dropped << dropped
    return rounded.astype(np.uint32).view(np.float32)


def parts(x: np.ndarray, kind, count: int) -> list[np.ndarray]:
    rest, out = x.astype(np.float32), []
    for _ in range(count):
        part = tf32(rest) if kind == "tf32" else rest.astype(kind).astype(np.float32)
        out.append(part)
        rest = rest - part
    return out


# preset: (operand type, accumulation type, components, products)
PRESETS = {
    P.F16_F16_F16: (F16, F16, 1, 1),
    P.F16_F16_F32: (F16, np.float32, 1, 1),
    P.BF16_BF16_BF16: (BF16, BF16, 1, 1),
    P.BF16_BF16_F32: (BF16, np.float32, 1, 1),
    P.BF16_BF16_F32_X3: (BF16, np.float32, 2, 3),
    P.BF16_BF16_F32_X6: (BF16, np.float32, 3, 6),
    P.BF16_BF16_F32_X9: (BF16, np.float32, 3, 9),
    P.TF32_TF32_F32: ("tf32", np.float32, 1, 1),
    P.TF32_TF32_F32_X3: ("tf32", np.float32, 2, 3),
    P.F32_F32_F32: (np.float32, np.float32, 1, 1),
}
ORDER = [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0), (1, 2), (2, 1), (2, 2)]


def reference(a, b, kind, accumulation, count, products):
    a_parts, b_parts = parts(a, kind, count), parts(b, kind, count)
    total = sum(a_parts[i].astype(np.float64) @ b_parts[j] for i, j in ORDER[:products])
    return total.astype(accumulation).astype(np.float32)


@pytest.mark.parametrize("preset", list(PRESETS), ids=lambda p: p.name)
def test_presets_round_split_and_accumulate_as_named(preset):
    kind, accumulation, count, products = PRESETS[preset]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 200)).astype(np.float32)
    b = rng.standard_normal((200, 7)).astype(np.float32)
    got = np.asarray(lax.dot(a, b, precision=preset))
    assert got.dtype == np.float32
    expected = reference(a, b, kind, accumulation, count, products)
    # The products are exact; only the summation's rounding (in float32, or in the
    # accumulation type) separates the two.
    eps = float(ml_dtypes.finfo(accumulation).eps)
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    np.testing.assert_array_less(np.abs(got - expected), 200 * eps * scale + 1e-30)
    exact = a.astype(np.float64) @ b
    if kind != np.float32 and count == 1:  # the rounding shows: more than float32's own
        assert np.abs(expected - exact).max() > 50 * np.finfo(np.float32).eps * scale.max()


def test_more_components_are_more_accurate():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 500)).astype(np.float32), rng.standard_normal((500, 4))
    b = b.astype(np.float32)
    exact = a.astype(np.float64) @ b
    errors = [
        np.abs(np.asarray(lax.dot(a, b, precision=p), np.float64) - exact).max()
        for p in (P.BF16_BF16_F32, P.BF16_BF16_F32_X3, P.BF16_BF16_F32_X6)
    ]
    assert errors[0] > 10 * errors[1] > 100 * errors[2]


def test_float64_accumulation_of_float32_operands_rounds_once():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 1000)).astype(np.float32)
    b = rng.standard_normal((1000, 3)).astype(np.float32)
    got = np.asarray(lax.dot(a, b, precision=P.F64_F64_F64))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (a.astype(np.float64) @ b).astype(np.float32))


def test_eight_bit_operands_accumulate_in_float32():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 64)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((64, 4)).astype(ml_dtypes.float8_e5m2)
    got = np.asarray(
        lax.dot_general(
            a,
            b,
            (((1,), (0,)), ((), ())),
            precision=P.ANY_F8_ANY_F8_F32,
            preferred_element_type=np.float32,
        )
    )
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_an_explicit_algorithm_equals_its_preset():
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((3, 40)).astype(np.float32) for _ in range(2))
    algorithm = lax.DotAlgorithm(ml_dtypes.bfloat16, ml_dtypes.bfloat16, np.float32, 2, 2, 3)
    np.testing.assert_array_equal(
        np.asarray(lax.dot(a, b.T, precision=algorithm)),
        np.asarray(lax.dot(a, b.T, precision=P.BF16_BF16_F32_X3)),
    )
    # DEFAULT is the contraction without an algorithm.
    np.testing.assert_array_equal(
        np.asarray(lax.dot(a, b.T, precision=P.DEFAULT)), np.asarray(lax.dot(a, b.T))
    )


def test_convolutions_take_algorithms():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    k = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got = lax.conv_general_dilated(x, k, (1, 1), "SAME", precision=P.BF16_BF16_F32)
    rounded = lax.conv_general_dilated(
        x.astype(BF16).astype(np.float32),
        k.astype(BF16).astype(np.float32),
        (1, 1),
        "SAME",
        precision=lax.Precision.HIGHEST,
    )
    np.testing.assert_allclose(np.asarray(got), np.asarray(rounded), rtol=1e-5, atol=1e-5)


def test_numpy_functions_pass_algorithms_on_and_transforms_compose():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 5)).astype(np.float32)

    def f(a, b):
        return fnp.matmul(a, b, precision=P.TF32_TF32_F32)

    eager = np.asarray(f(a, b))
    # (Sums of other orders differ in the last bits; operands left unrounded, by about 1e-3.)
    np.testing.assert_allclose(np.asarray(fg.jit(f)(a, b)), eager, rtol=1e-6, atol=1e-6)
    lanes = np.stack([np.asarray(f(a[i], b)) for i in range(3)])
    vmapped = fg.vmap(f, in_axes=(0, None))(a, b)
    np.testing.assert_allclose(np.asarray(vmapped), lanes, rtol=1e-6, atol=1e-6)
    expected = (tf32(a).astype(np.float64) @ tf32(b)).astype(np.float32)
    np.testing.assert_allclose(eager, expected, rtol=1e-5, atol=1e-5)
    einsum = fnp.einsum("bij,jk->bik", a, b, precision=P.TF32_TF32_F32)
    np.testing.assert_allclose(np.asarray(einsum), eager, rtol=1e-6, atol=1e-6)


def test_bad_algorithms_name_the_cause():
    ints = np.ones((2, 2), np.int32)
    with pytest.raises(TypeError, match="real floating-point operands, got int32"):
        lax.dot(ints, ints, precision=P.BF16_BF16_F32)
    with pytest.raises(TypeError, match="real floating-point operands, got complex64"):
        lax.dot(ints.astype(np.complex64), ints.astype(np.complex64), precision=P.F32_F32_F32)
    floats = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="8-bit float operands, got float32"):
        lax.dot(floats, floats, precision=P.ANY_F8_ANY_F8_F32)
    with pytest.raises(ValueError, match="between 1 and lhs_component_count"):
        lax.dot(floats, floats, precision=lax.DotAlgorithm(BF16, BF16, np.float32, 1, 1, 2))
