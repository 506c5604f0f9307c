"""nn.scaled_matmul and nn.scaled_dot_general against NumPy: operands quantized block by block
with ml_dtypes' own float8/float4 conversions (and the scales' rounding written with log2),
dequantized and multiplied in float64; the reverse-mode rule against the same quantized
products of the cotangent; vmap against a loop, jit against eager."""

import ml_dtypes
import numpy as np
import pytest

import funcgrad as fg
from funcgrad import nn

BATCHED = (((2,), (2,)), ((0,), (0,)))


def blockwise(x, scales):
    return x * np.repeat(scales, x.shape[-1] // scales.shape[-1], axis=-1)


def test_scaled_matmul_matches_dequantize_then_matmul():
    rng = np.random.default_rng(0)
    lhs, rhs = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8))
    lhs_scales, rhs_scales = rng.uniform(0.5, 2, (2, 3, 2)), rng.uniform(0.5, 2, (2, 5, 4))
    expected = np.einsum("bmk,bnk->bmn", blockwise(lhs, lhs_scales), blockwise(rhs, rhs_scales))
    out = nn.scaled_matmul(lhs, rhs, lhs_scales, rhs_scales)
    assert out.dtype == np.float32 and out.shape == (2, 3, 5)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    half = nn.scaled_matmul(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.float16)
    assert half.dtype == np.float16
    ones = np.ones((1, 1, 1))
    np.testing.assert_array_equal(nn.scaled_matmul([[[1, 2, 3]]], [[[4, 5, 6]]], ones, ones), 32)
    looped = [
        nn.scaled_matmul(*(x[i : i + 1] for x in (lhs, rhs, lhs_scales, rhs_scales)))
        for i in range(2)
    ]
    np.testing.assert_allclose(np.concatenate(looped), out, rtol=1e-6)
    batched = fg.vmap(nn.scaled_matmul)(*(x[:, None] for x in (lhs, rhs, lhs_scales, rhs_scales)))
    np.testing.assert_allclose(batched[:, 0], out, rtol=1e-6)
    np.testing.assert_allclose(
        fg.jit(nn.scaled_matmul)(lhs, rhs, lhs_scales, rhs_scales), out, rtol=1e-6
    )

    # Reverse mode: the products' cotangents, moved through the blockwise scaling by hand.
    g = rng.normal(size=out.shape)
    _, pullback = fg.vjp(nn.scaled_matmul, lhs, rhs, lhs_scales, rhs_scales)
    lhs_bar, _, lhs_scales_bar, _ = pullback(g.astype(np.float32))
    through_rhs = np.einsum("bmn,bnk->bmk", g, blockwise(rhs, rhs_scales))
    np.testing.assert_allclose(lhs_bar, blockwise(through_rhs, lhs_scales), rtol=1e-4, atol=1e-4)
    per_block = (through_rhs * lhs).reshape(2, 3, 2, 4).sum(-1)
    np.testing.assert_allclose(lhs_scales_bar, per_block, rtol=1e-4, atol=1e-4)


def test_scaled_matmul_rejects_bad_shapes():
    x, s = np.ones((1, 2, 6)), np.ones((1, 2, 4))
    with pytest.raises(ValueError, match="K_s dividing K"):
        nn.scaled_matmul(x, x, s, np.ones((1, 2, 3)))
    with pytest.raises(ValueError, match="lhs \\(B, M, K\\) and rhs \\(B, N, K\\)"):
        nn.scaled_matmul(x, np.ones((1, 2, 5)), s, s)


def quantized(x, config):
    """(values, scales) of x (B, M, K), blocks along K, with ml_dtypes doing the rounding."""
    b, m, k = x.shape
    size = config.block_size
    blocks = x.reshape(b, m, k // size, size).astype(np.float32)
    largest = np.float32(ml_dtypes.finfo(config.data_type).max)
    if config.mode == "mxfp8":
        ratio = np.abs(blocks).max(-1, keepdims=True) / largest
        exponent = np.ceil(np.log2(np.where(ratio > 0, ratio, 2.0**-127)))
        scales = np.float32(2.0) ** np.clip(exponent, -127, 127).astype(np.float32)
    else:
        blocks = blocks / np.asarray(config.global_scale, np.float32)
        ratio = np.abs(blocks).max(-1, keepdims=True) / largest
        scale_max = float(ml_dtypes.finfo(config.scale_type).max)
        scales = np.clip(ratio, 0, scale_max).astype(config.scale_type).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.clip(blocks / scales, -largest, largest).astype(config.data_type)
    return values.astype(np.float64).reshape(b, m, k), scales[..., 0].astype(np.float64)


def quantized_product(x, y, x_config, y_config):
    """einsum('bmk,bnk->bmn') of the dequantized x and y."""
    (xq, xs), (yq, ys) = quantized(x, x_config), quantized(y, y_config)
    return np.einsum("bmk,bnk->bmn", blockwise(xq, xs), blockwise(yq, ys))


@pytest.mark.parametrize("mode", ["mxfp8", "nvfp4"])
def test_scaled_dot_general_forward_and_reverse(mode):
    rng = np.random.default_rng(1)
    lhs = rng.normal(size=(2, 32, 64)).astype(np.float32)
    rhs = (3 * rng.normal(size=(2, 32, 64))).astype(np.float32)
    lhs[0, 0, :16] = 0  # a block of zeros: a zero scale for nvfp4
    global_scale = np.array([0.5], np.float32) if mode == "nvfp4" else None
    config = nn.get_scaled_dot_general_config(mode, global_scale)
    configs = [config] * 3
    out = nn.scaled_dot_general(lhs, rhs, BATCHED, configs=configs)
    expected = quantized_product(lhs, rhs, config, config)
    if mode == "nvfp4":
        expected = expected * 0.25
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
    assert np.abs(expected - np.einsum("bmk,bnk->bmn", lhs, rhs)).max() > 0.1  # it quantized
    np.testing.assert_allclose(
        fg.jit(lambda a, b: nn.scaled_dot_general(a, b, BATCHED, configs=configs))(lhs, rhs),
        out,
        rtol=1e-6,
    )

    g = rng.normal(size=out.shape).astype(np.float32)
    _, pullback = fg.vjp(
        lambda a, b: nn.scaled_dot_general(a, b, BATCHED, configs=configs), lhs, rhs
    )
    lhs_bar, rhs_bar = pullback(g)
    if mode == "mxfp8":
        # Both cotangents are quantized products along the dimension they contract.
        expected_lhs = quantized_product(g, np.swapaxes(rhs, 1, 2), config, config)
        expected_rhs = quantized_product(
            np.swapaxes(g, 1, 2), np.swapaxes(lhs, 1, 2), config, config
        )
    else:
        expected_lhs = np.einsum("bmn,bnk->bmk", g, rhs)
        expected_rhs = np.einsum("bmn,bmk->bnk", g, lhs)
    np.testing.assert_allclose(lhs_bar, expected_lhs, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(rhs_bar, expected_rhs, rtol=1e-5, atol=1e-4)


def test_nvfp4_cotangents_are_zero_where_the_forward_pass_clipped():
    config = nn.get_scaled_dot_general_config("nvfp4", np.array([1e-3], np.float32))
    limit = 1e-3 * 6 * 448  # global scale x largest float4_e2m1fn x largest float8_e4m3fn
    lhs = np.full((1, 1, 16), 1.0, np.float32)
    lhs[0, 0, 3] = 2 * limit
    rhs = np.ones((1, 1, 16), np.float32)
    lhs_bar, _ = fg.grad(
        lambda a, b: nn.scaled_dot_general(a, b, BATCHED, configs=[config] * 3).sum(), (0, 1)
    )(lhs, rhs)
    expected = np.ones(16)
    expected[3] = 0
    np.testing.assert_array_equal(np.asarray(lhs_bar)[0, 0], expected)


def test_scaled_dot_general_dimension_layouts():
    """Contractions in front, no batch dimension, several free dimensions: the same numbers as
    the operands moved to (batch, free, contracting) by hand."""
    rng = np.random.default_rng(2)
    config = nn.get_scaled_dot_general_config("mxfp8")
    lhs = rng.normal(size=(32, 4, 8)).astype(np.float32)  # contract axis 0
    rhs = rng.normal(size=(3, 32)).astype(np.float32)  # contract axis 1
    numbers = (((0,), (1,)), ((), ()))
    out = nn.scaled_dot_general(lhs, rhs, numbers, configs=[config] * 3)
    assert out.shape == (4, 8, 3)
    lhs_3d = np.moveaxis(lhs, 0, -1).reshape(1, 32, 32)
    expected = quantized_product(lhs_3d, rhs[None], config, config).reshape(4, 8, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
    # With configs=None it is dot_general.
    plain = nn.scaled_dot_general(lhs, rhs, numbers)
    np.testing.assert_allclose(plain, np.einsum("kab,ck->abc", lhs, rhs), rtol=1e-5, atol=1e-5)
    # The cotangents come back in the operands' layouts.
    lhs_bar, rhs_bar = fg.grad(
        lambda a, b: nn.scaled_dot_general(a, b, numbers, configs=[config] * 3).sum(), (0, 1)
    )(np.tile(lhs, (1, 8, 4)), np.tile(rhs, (32, 1)))
    assert lhs_bar.shape == (32, 32, 32) and rhs_bar.shape == (96, 32)


def test_scaled_dot_general_errors():
    config = nn.get_scaled_dot_general_config("mxfp8")
    x = np.ones((1, 4, 48), np.float32)
    with pytest.raises(
        ValueError, match="contracts 48 elements, which is not a multiple of mxfp8's block size 32"
    ):
        nn.scaled_dot_general(x, x, BATCHED, configs=[config] * 3)
    with pytest.raises(
        TypeError, match="preferred_element_type must be float32, bfloat16 or float16"
    ):
        nn.scaled_dot_general(x, x, BATCHED, np.float64, configs=[config] * 3)
    with pytest.raises(ValueError, match="mode must be 'nvfp4' or 'mxfp8'"):
        nn.get_scaled_dot_general_config("fp8")


@pytest.mark.parametrize("mode", ["mxfp8", "nvfp4"])
def test_quantization_rounds_ties_to_even(mode):
    """A block whose largest magnitude is the data type's largest number has scale 1, so its
    values are rounded as they are: 17 and 19 lie halfway between float8_e4m3fn's 16, 18 and
    20 (2.5 and 3.5 between float4_e2m1fn's 2, 3 and 4), and go to the even mantissas."""
    rng = np.random.default_rng(3)
    config = nn.get_scaled_dot_general_config(mode)
    size = config.block_size
    largest, ties = (448.0, [17.0, 19.0, -17.0]) if mode == "mxfp8" else (6.0, [2.5, 3.5, -2.5])
    lhs = np.zeros((1, 1, size), np.float32)
    lhs[0, 0, :4] = [largest, *ties]
    rhs = rng.normal(size=(1, 3, size)).astype(np.float32)
    out = nn.scaled_dot_general(lhs, rhs, BATCHED, configs=[config] * 3)
    np.testing.assert_allclose(out, quantized_product(lhs, rhs, config, config), rtol=1e-6)
    even = [16.0, 20.0, -16.0] if mode == "mxfp8" else [2.0, 4.0, -2.0]
    np.testing.assert_array_equal(quantized(lhs, config)[0][0, 0, 1:4], even)


def test_scaled_dot_general_vmap_matches_a_loop():
    rng = np.random.default_rng(4)
    config = nn.get_scaled_dot_general_config("mxfp8")
    lhs, rhs = rng.normal(size=(3, 1, 4, 32)), rng.normal(size=(3, 1, 5, 32))
    lhs, rhs = lhs.astype(np.float32), rhs.astype(np.float32)

    def product(a, b):
        return nn.scaled_dot_general(a, b, BATCHED, configs=[config] * 3)

    looped = np.stack([product(lhs[i], rhs[i]) for i in range(3)])
    np.testing.assert_allclose(fg.vmap(product)(lhs, rhs), looped, rtol=1e-6)
