"""Block-scaled matrix products, jax.nn's `scaled_matmul` and `scaled_dot_general`: operands
quantized in blocks along the contraction, each block a low-precision float format times a
scale of its own, as in the MX (mxfp8) and NVFP4 formats.

funcgrad computes them in float32 on every device. The quantized values and the scales are
held as float32 numbers that the formats represent exactly, rounded as a conversion to the
format rounds (to nearest, ties to even), so the products are those the formats' own dtypes
give.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import ml_dtypes
import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.transforms.custom_derivatives import custom_vjp

__all__ = [
    "BlockScaleConfig",
    "get_scaled_dot_general_config",
    "scaled_dot_general",
    "scaled_matmul",
]

_FLOAT8_E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
_FLOAT8_E8M0FNU = np.dtype(ml_dtypes.float8_e8m0fnu)
_FLOAT4_E2M1FN = np.dtype(ml_dtypes.float4_e2m1fn)
_OUTPUT_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)


@dataclasses.dataclass(slots=True)
class BlockScaleConfig:
    """How `scaled_dot_general` quantizes one operand: `block_size` consecutive elements of the
    contraction share a scale of `scale_type`, and are stored in `data_type`; "nvfp4" divides
    the operand by `global_scale` first."""

    mode: str
    block_size: int
    data_type: Any
    scale_type: Any
    global_scale: Any
    infer_only: bool


def get_scaled_dot_general_config(mode: str, global_scale=None) -> BlockScaleConfig:
    """The configuration of "mxfp8" (float8_e4m3fn in blocks of 32 with power-of-two scales)
    or "nvfp4" (float4_e2m1fn in blocks of 16 with float8_e4m3fn scales, after a float32
    `global_scale` of shape (1,), by default 1)."""
    if mode == "nvfp4":
        if global_scale is None:
            global_scale = fnp.ones((1,), dtypes.float32)
        return BlockScaleConfig("nvfp4", 16, _FLOAT4_E2M1FN, _FLOAT8_E4M3FN, global_scale, False)
    if mode == "mxfp8":
        return BlockScaleConfig("mxfp8", 32, _FLOAT8_E4M3FN, _FLOAT8_E8M0FNU, None, False)
    raise ValueError(
        f"get_scaled_dot_general_config: mode must be 'nvfp4' or 'mxfp8', got {mode!r}"
    )


def scaled_matmul(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.float32):
    """einsum('BMK,BNK->BMN') of lhs and rhs, each element times its block's scale: lhs (B, M,
    K) has scales (B, M, K_a), one per block of K // K_a consecutive elements of K (K_a
    dividing K), and rhs (B, N, K) likewise. Computed in float32."""
    lhs, rhs, lhs_scales, rhs_scales = (fnp.asarray(x) for x in (lhs, rhs, lhs_scales, rhs_scales))
    if lhs.ndim != 3 or rhs.ndim != 3 or lhs.shape[::2] != rhs.shape[::2]:
        raise ValueError(
            f"scaled_matmul takes lhs (B, M, K) and rhs (B, N, K), got shapes {lhs.shape} and "
            f"{rhs.shape}"
        )
    lhs = _scaled_blocks("lhs", lhs, lhs_scales)
    rhs = _scaled_blocks("rhs", rhs, rhs_scales)
    out = lax.dot_general(lhs, rhs, (((2,), (2,)), ((0,), (0,))))
    return lax.convert_element_type(out, dtypes.canonicalize(preferred_element_type))


def _scaled_blocks(name: str, x, scales):
    """x (B, M, K) in float32, each block of K // K_s elements times its scale."""
    if scales.ndim != 3 or scales.shape[:2] != x.shape[:2] or not _divides(scales.shape[2], x):
        raise ValueError(
            f"scaled_matmul: {name}_scales must have shape (B, M, K_s) with K_s dividing K for "
            f"{name} of shape {x.shape}, got {scales.shape}"
        )
    block = x.shape[2] // scales.shape[2] if scales.shape[2] else 0
    scales = fnp.repeat(lax.convert_element_type(scales, dtypes.float32), block, axis=2)
    return lax.mul(lax.convert_element_type(x, dtypes.float32), scales)


def _divides(k_s: int, x) -> bool:
    k = x.shape[2]
    return k % k_s == 0 if k_s else k == 0


def scaled_dot_general(
    lhs,
    rhs,
    dimension_numbers,
    preferred_element_type=np.float32,
    configs: list[BlockScaleConfig] | None = None,
    implementation=None,
):
    """`lax.dot_general` of lhs and rhs quantized by `configs[0]` and `configs[1]` (blocks
    along the contraction, which each operand must hold a multiple of its block size of), their
    product computed as `scaled_matmul`; reverse mode quantizes the cotangent by `configs[2]`
    and the other operand by its own config (nvfp4's cotangents are exact products, zero
    where the forward pass clipped). Without `configs`, plain `lax.dot_general`."""
    if implementation is not None:
        warnings.warn(
            "scaled_dot_general: implementation is ignored; the backend is chosen by itself",
            DeprecationWarning,
            stacklevel=2,
        )
    if configs is None:
        return lax.dot_general(
            lhs, rhs, dimension_numbers, preferred_element_type=preferred_element_type
        )
    preferred_element_type = dtypes.canonicalize(preferred_element_type)
    if preferred_element_type not in _OUTPUT_DTYPES:
        raise TypeError(
            f"scaled_dot_general: preferred_element_type must be float32, bfloat16 or float16, "
            f"got {preferred_element_type.name}"
        )
    if len(configs) != 3:
        raise ValueError(
            f"scaled_dot_general takes 3 configs (lhs, rhs, and the cotangent), got {len(configs)}"
        )
    lhs, rhs = fnp.asarray(lhs), fnp.asarray(rhs)
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_contract, rhs_contract, lhs_batch, rhs_batch = (
        tuple(int(d) for d in dims) for dims in (lhs_contract, rhs_contract, lhs_batch, rhs_batch)
    )
    unbatched = not lhs_batch and not rhs_batch
    if unbatched:  # a batch of one, dropped at the end
        lhs, rhs = fnp.expand_dims(lhs, lhs.ndim), fnp.expand_dims(rhs, rhs.ndim)
        lhs_batch, rhs_batch = (lhs.ndim - 1,), (rhs.ndim - 1,)
    numbers = ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))
    out = _quantized_dot(numbers, preferred_element_type, configs)(lhs, rhs)
    return fnp.squeeze(out, 0) if unbatched else out


def _quantized_dot(numbers, out_dtype, configs):
    """The product with its reverse-mode rule, for these static dimension numbers and configs."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = numbers
    lhs_config, rhs_config, cotangent_config = configs

    @custom_vjp
    def dot(lhs, rhs):
        return _forward(lhs, rhs, numbers, out_dtype, lhs_config, rhs_config)

    def dot_fwd(lhs, rhs):
        return dot(lhs, rhs), (lhs, rhs)

    def dot_bwd(residuals, g):
        lhs, rhs = residuals
        lhs_bar = _transpose_lhs(g, lhs, rhs, numbers, out_dtype, [cotangent_config, rhs_config])
        swapped = ((rhs_contract, lhs_contract), (rhs_batch, lhs_batch))
        rhs_bar = _transpose_lhs(
            g, rhs, lhs, swapped, out_dtype, [cotangent_config, lhs_config], swap_ans=True
        )
        if cotangent_config.mode == "nvfp4":
            lhs_bar = _zero_where_clipped(lhs_bar, lhs, lhs_config)
            rhs_bar = _zero_where_clipped(rhs_bar, rhs, rhs_config)
        return lhs_bar.astype(lhs.dtype), rhs_bar.astype(rhs.dtype)

    dot.defvjp(dot_fwd, dot_bwd)
    return dot


def _forward(lhs, rhs, numbers, out_dtype, lhs_config, rhs_config):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = numbers
    lhs_q, lhs_scales = _quantize(_as_bmk(lhs, lhs_contract, lhs_batch), lhs_config, "lhs")
    rhs_q, rhs_scales = _quantize(_as_bmk(rhs, rhs_contract, rhs_batch), rhs_config, "rhs")
    nvfp4 = lhs_config.mode == "nvfp4"
    out = scaled_matmul(
        lhs_q, rhs_q, lhs_scales, rhs_scales, dtypes.float32 if nvfp4 else out_dtype
    )
    if nvfp4:
        out = (out * (lhs_config.global_scale * rhs_config.global_scale)).astype(out_dtype)
    return fnp.reshape(out, _dot_shape(lhs, rhs, numbers))


def _transpose_lhs(g, x, y, numbers, out_dtype, configs, swap_ans=False):
    """The cotangent of x in dot_general(x, y) (of y in dot_general(y, x) if `swap_ans`): g
    contracted with y over y's free dimensions, laid out as x."""
    (x_contract, y_contract), (x_batch, y_batch) = numbers
    x_kept = [d for d in range(x.ndim) if d not in x_contract and d not in x_batch]
    y_kept = [d for d in range(y.ndim) if d not in y_contract and d not in y_batch]
    n_batch = len(x_batch)
    g_batch = tuple(range(n_batch))
    if swap_ans:
        g_y = tuple(range(n_batch, n_batch + len(y_kept)))
    else:
        g_y = tuple(range(n_batch + len(x_kept), n_batch + len(x_kept) + len(y_kept)))
    g_3d = _as_bmk(g, g_y, g_batch)
    y_3d = _as_bmk(y, tuple(y_kept), y_batch)
    g_config, y_config = configs
    if g_config.mode == "nvfp4":
        out = fnp.matmul(g_3d, fnp.swapaxes(y_3d, 1, 2), preferred_element_type=out_dtype)
    else:
        g_q, g_scales = _quantize(g_3d, g_config, "the cotangent")
        y_q, y_scales = _quantize(y_3d, y_config, "rhs" if not swap_ans else "lhs")
        out = scaled_matmul(g_q, y_q, g_scales, y_scales, out_dtype)
    g_dims, y_dims = (g_y, g_batch), (tuple(y_kept), y_batch)
    out = fnp.reshape(out, _dot_shape(g, y, ((g_dims[0], y_dims[0]), (g_dims[1], y_dims[1]))))
    x_contract_by_y = [x_contract[i] for i in np.argsort(y_contract)]
    return lax.transpose(out, tuple(np.argsort([*x_batch, *x_kept, *x_contract_by_y])))


def _zero_where_clipped(cotangent, x, config):
    """The straight-through estimator's rule: no derivative where quantization clipped x."""
    limit = _max(config.data_type) * _max(config.scale_type)
    kept = fnp.abs(x) <= config.global_scale * limit
    return fnp.where(kept, cotangent, 0)


def _as_bmk(x, contract, batch):
    """x transposed and reshaped to (batch, free, contracting), each group in x's order."""
    free = [d for d in range(x.ndim) if d not in contract and d not in batch]
    batch, contract = sorted(batch), sorted(contract)
    sizes = [int(np.prod([x.shape[d] for d in group], dtype=int)) for group in (batch, free)]
    k = int(np.prod([x.shape[d] for d in contract], dtype=int))
    return fnp.reshape(fnp.transpose(x, (*batch, *free, *contract)), (*sizes, k))


def _dot_shape(lhs, rhs, numbers) -> tuple[int, ...]:
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = numbers
    batch = [lhs.shape[d] for d in range(lhs.ndim) if d in lhs_batch]
    lhs_free = [lhs.shape[d] for d in range(lhs.ndim) if d not in lhs_contract + lhs_batch]
    rhs_free = [rhs.shape[d] for d in range(rhs.ndim) if d not in rhs_contract + rhs_batch]
    return (*batch, *lhs_free, *rhs_free)


def _max(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).max)


def _quantize(x, config: BlockScaleConfig, name: str):
    """(values, scales) of x (B, M, K) in blocks of the contraction: each block's scale
    brings its largest magnitude to the data type's largest number (rounded up to a power of
    two for mxfp8, to the nearest float8_e4m3fn for nvfp4), and the values are x over the
    scale, clipped and rounded to the data type. Both come as float32."""
    k, block = x.shape[-1], config.block_size
    if k < block or k % block:
        raise ValueError(
            f"scaled_dot_general: {name} contracts {k} elements, which is not a multiple of "
            f"{config.mode}'s block size {block}"
        )
    blocks = fnp.reshape(x, (*x.shape[:-1], k // block, block))
    largest = _max(config.data_type)
    if config.mode == "mxfp8":
        scales = _power_of_two_above(fnp.max(fnp.abs(blocks), axis=-1, keepdims=True) / largest)
        scaled = blocks / _divisor(scales, x.dtype)
    elif config.mode == "nvfp4":
        blocks = blocks / config.global_scale
        scales = fnp.max(fnp.abs(blocks), axis=-1, keepdims=True) / largest
        scales = _rounded_to(fnp.clip(scales, 0, _max(config.scale_type)), config.scale_type)
        scaled = blocks / scales
    else:
        raise ValueError(f"scaled_dot_general: unknown config mode {config.mode!r}")
    values = _rounded_to(fnp.clip(scaled, -largest, largest), config.data_type)
    return fnp.reshape(values, x.shape), scales[..., 0]


def _float32_bits(x):
    return lax.bitcast_convert_type(lax.convert_element_type(x, dtypes.float32), dtypes.uint32)


def _float32_of_bits(bits):
    return lax.bitcast_convert_type(bits, dtypes.float32)


def _power_of_two_above(x):
    """The float8_e8m0fnu nearest x from above (x >= 0), as float32: 2^e, e in -127..127.
    x's exponent, plus one when any mantissa bit is set (except at the largest exponent, and
    for the subnormals no larger than 2^-127, which become 2^-127 itself)."""
    bits = _float32_bits(x)
    exponent = lax.shift_right_logical(bits, np.uint32(23))
    mantissa = lax.bitwise_and(bits, np.uint32(0x7FFFFF))
    up = (mantissa > 0) & (exponent != 0xFE) & ~((exponent == 0) & (mantissa <= 0x400000))
    exponent = lax.bitwise_and(fnp.where(up, exponent + np.uint32(1), exponent), np.uint32(0xFF))
    smallest = np.float32(2.0**-127)  # the format's 0 exponent, a float32 subnormal
    return fnp.where(
        exponent == 0, smallest, _float32_of_bits(lax.shift_left(exponent, np.uint32(23)))
    )


def _divisor(scales, dtype):
    """The scales in the dtype the blocks are divided in; float16 cannot hold 2^-127 and takes
    2^-15 for it."""
    smallest = 2.0**-15 if dtype == dtypes.float16 else 2.0**-127
    scales = fnp.where(scales == np.float32(2.0**-127), np.float32(smallest), scales)
    return scales.astype(dtype)


def _rounded_to(x, fmt):
    """x (within fmt's range) rounded to the float format `fmt`, to nearest with ties to even,
    as float32: a multiple of the quantum 2^(e - nmant) of x's binade e, e at least the
    format's smallest normal exponent (below it the format's numbers are subnormal). A format
    without NaN takes 0 for it."""
    info = ml_dtypes.finfo(fmt)
    x = lax.convert_element_type(x, dtypes.float32)
    biased = lax.shift_right_logical(lax.bitwise_and(_float32_bits(x), np.uint32(0x7F800000)), 23)
    exponent = fnp.maximum(lax.convert_element_type(biased, dtypes.int32), info.minexp + 127)
    quantum_bits = lax.shift_left(
        lax.convert_element_type(exponent - info.nmant, dtypes.uint32), np.uint32(23)
    )
    quantum = _float32_of_bits(quantum_bits)
    rounded = lax.round(x / quantum, lax.RoundingMethod.TO_NEAREST_EVEN) * quantum
    if not np.isnan(np.float32(np.nan).astype(fmt)):
        rounded = fnp.where(fnp.isnan(rounded), np.float32(0), rounded)
    return rounded
