"""jax.lax's convolution helpers written with `conv_general_dilated` and `dot_general`:
`conv_transpose`, `conv_general_dilated_patches`, `conv_general_dilated_local`, and the shape
utilities (`conv_shape_tuple`, `conv_general_shape_tuple`, `conv_transpose_shape_tuple`,
`conv_general_permutations`, `reduce_window_shape_tuple`).

No primitive is added: every transformation and backend applies through the primitives used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from funcgrad.lax.base import asarray
from funcgrad.lax.linalg import (
    ConvDimensionNumbers,
    conv_dimension_numbers,
    conv_general_dilated,
    dot_general,
)
from funcgrad.lax.reductions import padtype_to_pads
from funcgrad.lax.shapes import rev, transpose

__all__ = [
    "ConvGeneralDilatedDimensionNumbers",
    "DotDimensionNumbers",
    "conv_general_dilated_local",
    "conv_general_dilated_patches",
    "conv_general_permutations",
    "conv_general_shape_tuple",
    "conv_shape_tuple",
    "conv_transpose",
    "conv_transpose_shape_tuple",
    "reduce_window_shape_tuple",
]

# What `dimension_numbers` of a convolution may be: None (NCHW, OIHW, NCHW), specs, or layout
# strings such as ('NHWC', 'HWIO', 'NHWC').
ConvGeneralDilatedDimensionNumbers = None | ConvDimensionNumbers | tuple[str, str, str]

# dot_general's ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)).
DotDimensionNumbers = tuple[
    tuple[Sequence[int], Sequence[int]], tuple[Sequence[int], Sequence[int]]
]

_TRANSPOSE_LAYOUTS = {
    2: ("NC", "IO", "NC"),
    3: ("NHC", "HIO", "NHC"),
    4: ("NHWC", "HWIO", "NHWC"),
    5: ("NHWDC", "HWDIO", "NHWDC"),
}


def _dilate_dim(size: int, dilation: int) -> int:
    return 0 if size == 0 else 1 + dilation * (size - 1)


def _stride_dim(size: int, window: int, stride: int) -> int:
    return max((size - window) // stride + 1, 0)


def _transpose_padding(kernel: int, stride: int, padding: str) -> tuple[int, int]:
    """(low, high) padding of the stride-dilated input that makes conv_transpose the gradient
    of a forward convolution with this string padding: 'VALID' gives (in - 1) * s + k outputs,
    'SAME' in * s."""
    if padding == "SAME":
        total = kernel + stride - 2
        low = kernel - 1 if stride > kernel - 1 else math.ceil(total / 2)
    elif padding == "VALID":
        total = kernel + stride - 2 + max(kernel - stride, 0)
        low = kernel - 1
    else:
        raise ValueError(
            f"conv_transpose: padding must be 'SAME', 'VALID' or pairs, got {padding!r}"
        )
    return low, total - low


def _forward_padding_transposed(padding, kernel: list[int]) -> list[tuple[int, int]]:
    """The padding of the dilated input that transposes a forward convolution padded by
    `padding` ((low, high) per spatial dimension) with kernels of `kernel` sizes."""
    try:
        pairs = [(int(low), int(high)) for low, high in padding]
    except (TypeError, ValueError):
        raise TypeError(
            f"conv_transpose: padding must be 'SAME', 'VALID' or (low, high) pairs, got {padding!r}"
        ) from None
    if len(pairs) != len(kernel):
        raise TypeError(
            f"conv_transpose: needs one (low, high) pair per spatial dimension ({len(kernel)}), "
            f"got {padding!r}"
        )
    return [(k - 1 - low, k - 1 - high) for (low, high), k in zip(pairs, kernel)]


def conv_transpose(
    lhs,
    rhs,
    strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
    transpose_kernel: bool = False,
    precision=None,
    preferred_element_type=None,
    use_consistent_padding: bool = False,
):
    """The transposed ("deconvolution") convolution: an input dilated by `strides`, convolved.

    Its layouts default to channels-last (NHWC, HWIO, NHWC and their 1-3 spatial-dimension
    forms). String padding follows JAX: 'VALID' gives (n - 1) * s + k outputs per spatial
    dimension, 'SAME' n * s; explicit (low, high) pairs pad the dilated input, or, with
    `use_consistent_padding`, are the padding of the forward convolution this one transposes
    (the dilated input is padded by k - 1 - low and k - 1 - high, k the dilated kernel's size,
    as PyTorch reads them). With `transpose_kernel` the kernel is flipped spatially and its I
    and O roles swapped, so the result is the gradient of conv_general_dilated with that
    kernel.
    """
    lhs, rhs = asarray(lhs), asarray(rhs)
    if lhs.ndim != rhs.ndim or lhs.ndim < 2:
        raise TypeError(
            f"conv_transpose: lhs and rhs must have one rank of at least 2, got shapes "
            f"{lhs.shape} and {rhs.shape}"
        )
    if dimension_numbers is None:
        if lhs.ndim not in _TRANSPOSE_LAYOUTS:
            raise ValueError(
                f"conv_transpose: no default layout for operands of rank {lhs.ndim}; pass "
                "dimension_numbers"
            )
        dimension_numbers = _TRANSPOSE_LAYOUTS[lhs.ndim]
    dnums = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    spatial = lhs.ndim - 2
    strides = tuple(int(s) for s in strides)
    if len(strides) != spatial:
        raise TypeError(
            f"conv_transpose: needs one stride per spatial dimension ({spatial}), got {strides}"
        )
    rhs_dilation = (1,) * spatial if rhs_dilation is None else tuple(int(r) for r in rhs_dilation)
    kernel = [_dilate_dim(rhs.shape[d], r) for d, r in zip(dnums.rhs_spec[2:], rhs_dilation)]
    if isinstance(padding, str):
        padding = [_transpose_padding(k, s, padding) for k, s in zip(kernel, strides)]
    elif use_consistent_padding:
        padding = _forward_padding_transposed(padding, kernel)
    if transpose_kernel:
        rhs = rev(rhs, tuple(dnums.rhs_spec[2:]))
        out_dim, in_dim = dnums.rhs_spec[:2]
        perm = list(range(rhs.ndim))
        perm[out_dim], perm[in_dim] = in_dim, out_dim
        rhs = transpose(rhs, tuple(perm))
    return conv_general_dilated(
        lhs,
        rhs,
        (1,) * spatial,
        padding,
        lhs_dilation=strides,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dnums,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def _patch_dimension_numbers(lhs_shape, filter_shape, dimension_numbers) -> ConvDimensionNumbers:
    return conv_dimension_numbers(lhs_shape, (1, 1, *filter_shape), dimension_numbers)


def conv_general_dilated_patches(
    lhs,
    filter_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
    precision=None,
    preferred_element_type=None,
):
    """The patches a convolution with a kernel of spatial shape `filter_shape` would see: the
    output's feature dimension holds, for each input channel c and window position p (in
    row-major order over filter_shape), lhs at that position, at index c * prod(filter_shape) + p.

    It is a grouped convolution with a one-hot kernel, so every transformation applies and the
    values are exact (each output is one input times 1).
    """
    lhs = asarray(lhs)
    filter_shape = tuple(int(k) for k in filter_shape)
    if len(filter_shape) != lhs.ndim - 2:
        raise TypeError(
            f"conv_general_dilated_patches: filter_shape {filter_shape} needs one size per "
            f"spatial dimension of lhs of shape {lhs.shape}"
        )
    dnums = _patch_dimension_numbers(lhs.shape, filter_shape, dimension_numbers)
    window = math.prod(filter_shape)
    channels = lhs.shape[dnums.lhs_spec[1]]
    one_hot = np.eye(window, dtype=lhs.dtype).reshape((window, 1, *filter_shape))
    kernel = np.tile(one_hot, (channels,) + (1,) * (one_hot.ndim - 1))
    kernel = np.moveaxis(kernel, (0, 1), (dnums.rhs_spec[0], dnums.rhs_spec[1]))
    return conv_general_dilated(
        lhs,
        asarray(kernel),
        window_strides,
        padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dnums,
        feature_group_count=channels,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def conv_general_dilated_local(
    lhs,
    rhs,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    filter_shape: Sequence[int],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
    precision=None,
):
    """A locally connected layer: a convolution whose kernel differs at each output position.

    rhs's spatial dimensions are the output's positions; its I dimension fuses the input
    channel with the window position (channel-major, as in conv_general_dilated_patches), and
    its O dimension the output features. Written as patches contracted with rhs by dot_general.
    """
    lhs, rhs = asarray(lhs), asarray(rhs)
    patches = conv_general_dilated_patches(
        lhs,
        filter_shape,
        window_strides,
        padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers,
        precision=precision,
    )
    dnums = _patch_dimension_numbers(lhs.shape, filter_shape, dimension_numbers)
    out_spatial = dnums.out_spec[2:]
    if rhs.ndim != lhs.ndim:
        raise TypeError(
            f"conv_general_dilated_local: rhs of shape {rhs.shape} must have the rank of lhs "
            f"{lhs.shape}"
        )
    for out_dim, rhs_dim in zip(out_spatial, dnums.rhs_spec[2:]):
        if patches.shape[out_dim] != rhs.shape[rhs_dim]:
            raise TypeError(
                f"conv_general_dilated_local: rhs of shape {rhs.shape} must have the output's "
                f"spatial sizes {tuple(patches.shape[d] for d in out_spatial)} in its spatial "
                "dimensions"
            )
    if patches.shape[dnums.out_spec[1]] != rhs.shape[dnums.rhs_spec[1]]:
        raise TypeError(
            f"conv_general_dilated_local: rhs's I dimension must have size channels x "
            f"window = {patches.shape[dnums.out_spec[1]]}, got shape {rhs.shape}"
        )
    # Batch the spatial positions (in the output's order), contract the fused features.
    order = sorted(range(len(out_spatial)), key=lambda i: out_spatial[i])
    lhs_batch = tuple(out_spatial[i] for i in order)
    rhs_batch = tuple(dnums.rhs_spec[2 + i] for i in order)
    contracting = ((dnums.out_spec[1],), (dnums.rhs_spec[1],))
    out = dot_general(patches, rhs, (contracting, (lhs_batch, rhs_batch)), precision=precision)
    # dot_general gives (spatial in sorted order..., batch N, features O); place N and O.
    ndim = out.ndim
    n_dim, o_dim = dnums.out_spec[0], dnums.out_spec[1]
    rest = iter(range(ndim - 2))
    perm = [ndim - 2 if d == n_dim else ndim - 1 if d == o_dim else next(rest) for d in range(ndim)]
    return transpose(out, tuple(perm))


# ---------------------------------------------------------------------------------------------
# Shapes


def conv_shape_tuple(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    strides: Sequence[int],
    pads: str | Sequence[tuple[int, int]],
    batch_group_count: int = 1,
) -> tuple[int, ...]:
    """The output shape of a convolution of NCHW-ordered lhs and OIHW-ordered rhs shapes."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(
            f"conv_shape_tuple: expected {len(lhs_shape) - 2} (low, high) pads, got {pads}"
        )
    padded = [int(n) + int(lo) + int(hi) for n, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError(
            f"conv_shape_tuple: negative padding {pads} is larger than lhs spatial shape "
            f"{tuple(lhs_shape[2:])}"
        )
    spatial = tuple(
        _stride_dim(p, int(k), int(s)) for p, k, s in zip(padded, rhs_shape[2:], strides)
    )
    if batch_group_count > 1 and lhs_shape[0] % batch_group_count:
        raise ValueError(
            f"conv_shape_tuple: batch size {lhs_shape[0]} is not a multiple of "
            f"batch_group_count {batch_group_count}"
        )
    return (int(lhs_shape[0]) // batch_group_count, int(rhs_shape[0]), *spatial)


def conv_general_permutations(
    dimension_numbers: tuple[str, str, str],
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """For layout strings (lhs, rhs, out), the permutations that bring each operand to the
    canonical NC..., OI..., NC... order, spatial dimensions in the kernel's order."""
    roles = (("N", "C"), ("O", "I"), ("N", "C"))
    for i, ((a, b), spec) in enumerate(zip(roles, dimension_numbers)):
        if not spec.count(a) == spec.count(b) == 1:
            raise TypeError(
                f"convolution dimension_numbers[{i}] must contain the characters {a!r} and "
                f"{b!r} exactly once, got {spec!r}"
            )
        if len(spec) != len(set(spec)):
            raise TypeError(
                f"convolution dimension_numbers[{i}] cannot repeat characters, got {spec!r}"
            )
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    if not set(lhs_spec) - {"N", "C"} == set(rhs_spec) - {"O", "I"} == set(out_spec) - {"N", "C"}:
        raise TypeError(
            "convolution dimension_numbers must each have the same spatial characters, got "
            f"{tuple(dimension_numbers)}"
        )

    def permutation(spec: str, pair: tuple[str, str]) -> tuple[int, ...]:
        spatial = sorted(
            (i for i, c in enumerate(spec) if c not in pair), key=lambda i: rhs_spec.index(spec[i])
        )
        return (spec.index(pair[0]), spec.index(pair[1]), *spatial)

    lhs_perm, rhs_perm, out_perm = (
        permutation(spec, pair) for spec, pair in zip(dimension_numbers, roles)
    )
    return lhs_perm, rhs_perm, out_perm


def conv_general_shape_tuple(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    dimension_numbers: tuple[str, str, str],
) -> tuple[int, ...]:
    """The output shape of a convolution whose operands have layouts `dimension_numbers`."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    canonical = conv_shape_tuple(
        tuple(lhs_shape[i] for i in lhs_perm),
        tuple(rhs_shape[i] for i in rhs_perm),
        window_strides,
        padding,
    )
    return tuple(int(canonical[i]) for i in np.argsort(out_perm))


def conv_transpose_shape_tuple(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    dimension_numbers: tuple[str, str, str],
) -> tuple[int, ...]:
    """The output shape of conv_transpose with layouts `dimension_numbers`.

    A window wider than the padded, dilated input leaves no output position, so a spatial
    size is never below 0: this is the shape conv_transpose returns.
    """
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    lhs_canonical = [int(lhs_shape[i]) for i in lhs_perm]
    rhs_canonical = [int(rhs_shape[i]) for i in rhs_perm]
    if isinstance(padding, str):
        padding = [
            _transpose_padding(k, int(s), padding)
            for k, s in zip(rhs_canonical[2:], window_strides)
        ]
    spatial = [
        max(0, (n - 1) * int(s) - k + 2 + int(lo) + int(hi))
        for n, k, s, (lo, hi) in zip(lhs_canonical[2:], rhs_canonical[2:], window_strides, padding)
    ]
    canonical = (lhs_canonical[0], rhs_canonical[0], *spatial)
    return tuple(int(canonical[i]) for i in np.argsort(out_perm))


def reduce_window_shape_tuple(
    operand_shape: Sequence[int],
    window_dimensions: Sequence[int],
    window_strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    base_dilation: Sequence[int] | None = None,
    window_dilation: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The output shape of reduce_window with explicit (low, high) padding."""
    operand_shape = [int(n) for n in operand_shape]
    window_dimensions = [int(w) for w in window_dimensions]
    if base_dilation is not None:
        operand_shape = [_dilate_dim(n, int(d)) for n, d in zip(operand_shape, base_dilation)]
    if window_dilation is not None:
        window_dimensions = [
            _dilate_dim(w, int(d)) for w, d in zip(window_dimensions, window_dilation)
        ]
    if not len(operand_shape) == len(window_dimensions) == len(window_strides) == len(padding):
        raise TypeError(
            f"reduce_window_shape_tuple: operand shape {tuple(operand_shape)}, window "
            f"{tuple(window_dimensions)}, strides {tuple(window_strides)} and padding "
            f"{tuple(padding)} must have one entry per dimension"
        )
    return tuple(
        _stride_dim(n + int(lo) + int(hi), w, int(s))
        for n, w, s, (lo, hi) in zip(operand_shape, window_dimensions, window_strides, padding)
    )
