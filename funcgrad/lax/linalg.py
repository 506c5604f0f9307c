"""Linear algebra primitives: dot_general and conv_general_dilated.

Both contract operands of one dtype (or of any dtypes, given `preferred_element_type`) and
accumulate as XLA does: integers wrap around in the result type, bool contracts with or/and,
and 16-bit floats accumulate in float32 before rounding to the result type.

As `funcgrad.lax.linalg` this module is also JAX's `lax.linalg` namespace (cholesky, eig, lu,
...): see `__getattr__` at the end.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from funcgrad import core, dtypes
from funcgrad.config import config
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters.ad import Zero, defjvp, is_undefined, tangent_aval
from funcgrad.interpreters.batching import batch_size, moveaxis
from funcgrad.lax import dot_algorithms
from funcgrad.lax.base import asarray
from funcgrad.lax.elementwise import convert_element_type
from funcgrad.lax.reductions import padtype_to_pads
from funcgrad.lax.shapes import full, reshape, rev, transpose
from funcgrad.lax.sharding_constraint import placed

__all__ = [
    "ConvDimensionNumbers",
    "Precision",
    "batch_matmul",
    "conv",
    "conv_dimension_numbers",
    "conv_general_dilated",
    "conv_with_general_padding",
    "dot",
    "dot_general",
]


class Precision(enum.Enum):
    """Requested accuracy of a contraction. The NumPy backend always computes at full accuracy."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


PRECISION_NAMES = {
    "default": Precision.DEFAULT,
    "fastest": Precision.DEFAULT,
    "bfloat16": Precision.DEFAULT,
    "high": Precision.HIGH,
    "tensorfloat32": Precision.HIGH,
    "bfloat16_3x": Precision.HIGH,
    "highest": Precision.HIGHEST,
    "float32": Precision.HIGHEST,
}


def allows_tf32(precision) -> bool:
    """Whether a float32 contraction at `precision` (a dot_general's param; None defers to
    `config.default_matmul_precision`, None there meaning HIGHEST) may round its operands to
    TF32 on tensor cores: any precision below HIGHEST, on both operands, allows it."""
    if precision is None:
        name = config.default_matmul_precision
        precision = Precision.HIGHEST if name is None else PRECISION_NAMES[name]
    if isinstance(precision, tuple):
        return all(allows_tf32(p) for p in precision)
    return precision != Precision.HIGHEST


def _canonical_precision(precision):
    """None, one Precision, or a (lhs, rhs) pair of them; names are accepted as in JAX. A
    product naming none takes `config.default_matmul_precision` where one is set as it is
    traced (or run eagerly), as JAX's does: a `default_matmul_precision` block inside a jitted
    function reaches its products, and jit keys its traces by the setting."""
    if precision is None or precision is dot_algorithms.DotAlgorithmPreset.DEFAULT:
        name = config.default_matmul_precision
        return None if name is None else PRECISION_NAMES[name]
    if isinstance(precision, Precision):
        return precision
    if isinstance(precision, str) and precision.lower() in PRECISION_NAMES:
        return PRECISION_NAMES[precision.lower()]
    if isinstance(precision, (tuple, list)) and len(precision) == 2:
        return tuple(_canonical_precision(p) for p in precision)
    raise TypeError(
        f"precision must be None, a Precision, one of {sorted(PRECISION_NAMES)}, a pair of "
        f"them, a DotAlgorithm or a DotAlgorithmPreset, got {precision!r}"
    )


def _canonical_preferred(preferred_element_type):
    if preferred_element_type is None:
        return None
    return dtypes.canonicalize(preferred_element_type)


# ---------------------------------------------------------------------------------------------
# Result and accumulation dtypes, shared by dot_general and conv_general_dilated


def _kind_rank(dtype: np.dtype) -> int:
    """Kinds in the order a preferred_element_type may widen them: bool -> integer -> float ->
    complex (by funcgrad's classes: NumPy's kind is "V" for ml_dtypes' floats and ints)."""
    if dtypes.is_bool(dtype):
        return 0
    if dtypes.is_int(dtype):
        return 1
    return 2 if dtypes.is_float(dtype) else 3


def _result_dtype(name: str, lhs: np.dtype, rhs: np.dtype, preferred: np.dtype | None):
    if preferred is None:
        if lhs != rhs:
            raise TypeError(
                f"{name} requires operands of one dtype, got {lhs.name} and {rhs.name} "
                "(pass preferred_element_type to contract operands of different dtypes)"
            )
        return lhs
    for operand in (lhs, rhs):
        narrower_int = (
            dtypes.is_int(operand)
            and dtypes.is_int(preferred)
            and preferred.itemsize < operand.itemsize
        )
        if _kind_rank(preferred) < _kind_rank(operand) or narrower_int:
            raise TypeError(
                f"{name}: preferred_element_type {preferred.name} cannot hold the result of "
                f"contracting {lhs.name} and {rhs.name} operands"
            )
    return preferred


def _accumulation_dtype(out: np.dtype, lhs: np.dtype, rhs: np.dtype) -> np.dtype:
    """Integers and bools contract in the result type (the narrow integers in int32, which
    wraps as they do); floats in at least float32."""
    if not dtypes.is_float(out):
        return dtypes.compute_dtype(out)
    return dtypes.float64 if dtypes.float64 in (out, lhs, rhs) else dtypes.float32


def _finish(out: np.ndarray, dtype: np.dtype):
    out = out.astype(dtype, copy=False)
    return out[()] if out.ndim == 0 else out


# ---------------------------------------------------------------------------------------------
# dot_general

dot_general_p = Primitive("dot_general")


def _check_dot_dims(side: str, shape: tuple[int, ...], contracting, batch) -> None:
    for kind, dims in (("contracting", contracting), ("batch", batch)):
        for d in dims:
            if not 0 <= d < len(shape):
                raise TypeError(
                    f"dot_general: {side} {kind} dimension {d} is out of range for {side} shape "
                    f"{shape}"
                )
    if len(set(contracting) | set(batch)) != len(contracting) + len(batch):
        raise TypeError(
            f"dot_general: {side} dimensions must each be used at most once, got contracting "
            f"dims {contracting} and batch dims {batch} for {side} shape {shape}"
        )


class _MatmulPlan(NamedTuple):
    """dot_general as one matmul: permute each operand (None: already in order), reshape it to
    (batch, rows, columns) (no batch dimension when there are no batch dims), multiply, and
    reshape the product to `out_shape`."""

    lhs_perm: tuple[int, ...] | None
    rhs_perm: tuple[int, ...] | None
    lhs_matrix: tuple[int, ...]
    rhs_matrix: tuple[int, ...]
    out_shape: tuple[int, ...]


# Eager MLPs call dot_general with the same shapes over and over: validate and plan once.
@functools.lru_cache(maxsize=4096)
def _matmul_plan(lhs_shape, rhs_shape, dimension_numbers) -> _MatmulPlan:
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    _check_dot_dims("lhs", lhs_shape, lhs_contract, lhs_batch)
    _check_dot_dims("rhs", rhs_shape, rhs_contract, rhs_batch)
    for kind, lhs_dims, rhs_dims in (
        ("contracting", lhs_contract, rhs_contract),
        ("batch", lhs_batch, rhs_batch),
    ):
        if tuple(lhs_shape[d] for d in lhs_dims) != tuple(rhs_shape[d] for d in rhs_dims):
            raise TypeError(
                f"dot_general: {kind} dimension sizes must match, got lhs shape {lhs_shape} and "
                f"rhs shape {rhs_shape} with {kind} dims ({lhs_dims}, {rhs_dims})"
            )
    lhs_free = _free_dims(len(lhs_shape), lhs_contract, lhs_batch)
    rhs_free = _free_dims(len(rhs_shape), rhs_contract, rhs_batch)
    batch_shape = tuple(lhs_shape[d] for d in lhs_batch)
    lhs_free_shape = tuple(lhs_shape[d] for d in lhs_free)
    rhs_free_shape = tuple(rhs_shape[d] for d in rhs_free)
    lead = (math.prod(batch_shape),) if lhs_batch else ()
    k = math.prod(lhs_shape[d] for d in lhs_contract)
    lhs_perm = lhs_batch + lhs_free + lhs_contract
    rhs_perm = rhs_batch + rhs_contract + rhs_free
    return _MatmulPlan(
        None if lhs_perm == tuple(range(len(lhs_shape))) else lhs_perm,
        None if rhs_perm == tuple(range(len(rhs_shape))) else rhs_perm,
        lead + (math.prod(lhs_free_shape), k),
        lead + (k, math.prod(rhs_free_shape)),
        batch_shape + lhs_free_shape + rhs_free_shape,
    )


def _free_dims(ndim: int, contracting, batch) -> tuple[int, ...]:
    return tuple(d for d in range(ndim) if d not in contracting and d not in batch)


@dot_general_p.def_abstract_eval
def _dot_general_abstract_eval(
    lhs: ShapedArray, rhs: ShapedArray, *, dimension_numbers, precision, preferred_element_type
) -> ShapedArray:
    plan = _matmul_plan(lhs.shape, rhs.shape, dimension_numbers)
    dtype = _result_dtype("dot_general", lhs.dtype, rhs.dtype, preferred_element_type)
    return ShapedArray(plan.out_shape, dtype)


_MATRIX_PRODUCT = (((1,), (0,)), ((), ()))
_NATIVE_MATMUL_DTYPES = frozenset([dtypes.float32, dtypes.float64])


@dot_general_p.def_impl
def _dot_general_impl(lhs, rhs, *, dimension_numbers, precision, preferred_element_type):
    if (
        dimension_numbers == _MATRIX_PRODUCT
        and lhs.ndim == 2
        and rhs.ndim == 2
        and preferred_element_type is None
        and lhs.dtype == rhs.dtype
        and lhs.dtype in _NATIVE_MATMUL_DTYPES
    ):
        return np.matmul(lhs, rhs)  # a plain matrix product: NumPy's own layout and dtype
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    plan = _matmul_plan(lhs.shape, rhs.shape, dimension_numbers)
    out_dtype = preferred_element_type or lhs.dtype
    compute = _accumulation_dtype(out_dtype, lhs.dtype, rhs.dtype)
    lhs, rhs = lhs.astype(compute, copy=False), rhs.astype(compute, copy=False)
    if plan.lhs_perm is not None:
        lhs = lhs.transpose(plan.lhs_perm)
    if plan.rhs_perm is not None:
        rhs = rhs.transpose(plan.rhs_perm)
    out = np.matmul(lhs.reshape(plan.lhs_matrix), rhs.reshape(plan.rhs_matrix))
    return _finish(out.reshape(plan.out_shape), out_dtype)


# dot_general is bilinear: the tangent is the sum of the products with one tangent each.
defjvp(
    dot_general_p,
    lambda t, lhs, rhs, **params: dot_general_p.bind(t, rhs, **params),
    lambda t, lhs, rhs, **params: dot_general_p.bind(lhs, t, **params),
)


def _dot_operand_cotangent(ct, other, aval, own_dims, other_dims, other_free_in_ct, params):
    """The cotangent of one dot_general operand, given the other one.

    Writing the product as out[b, f, g] = sum_c own[b, f, c] * other[b, c, g], the cotangent
    own_ct[b, f, c] = sum_g ct[b, f, g] * other[b, c, g] is itself a dot_general of the output
    cotangent with the other operand: it contracts the other operand's free dims (at
    `other_free_in_ct` in ct) and pairs up the batch dims, which lead ct. Its result holds the
    batch dims, then own free dims, then own contracting dims in the order of the other
    operand's contracting dims; a transpose puts them back into the operand's layout.
    """
    (own_contract, own_batch), (other_contract, other_batch) = own_dims, other_dims
    other_ndim = core.get_aval(other).ndim
    other_free = _free_dims(other_ndim, other_contract, other_batch)
    ct_batch = tuple(range(len(own_batch)))
    dimension_numbers = ((other_free_in_ct, other_free), (ct_batch, other_batch))
    product = dot_general_p.bind(ct, other, dimension_numbers=dimension_numbers, **params)
    # The other operand's remaining dims are its contracting dims, in increasing order.
    own_contract_in_product = [own_contract[i] for i in np.argsort(other_contract)]
    own_free = _free_dims(aval.ndim, own_contract, own_batch)
    held = own_batch + own_free + tuple(own_contract_in_product)
    product = transpose(product, tuple(int(i) for i in np.argsort(held)))
    return convert_element_type(product, aval.dtype)


def _dot_general_transpose(ct, lhs, rhs, *, dimension_numbers, **params):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_dims, rhs_dims = (lhs_contract, lhs_batch), (rhs_contract, rhs_batch)
    lhs_aval, rhs_aval = core.get_aval(lhs), core.get_aval(rhs)
    n_batch = len(lhs_batch)
    n_lhs_free = lhs_aval.ndim - len(lhs_contract) - n_batch
    n_rhs_free = rhs_aval.ndim - len(rhs_contract) - n_batch
    # ct's dims: batch, then lhs free, then rhs free.
    lhs_free_in_ct = tuple(range(n_batch, n_batch + n_lhs_free))
    rhs_free_in_ct = tuple(range(n_batch + n_lhs_free, n_batch + n_lhs_free + n_rhs_free))
    if is_undefined(lhs):
        ct_lhs = _dot_operand_cotangent(
            ct, rhs, lhs_aval, lhs_dims, rhs_dims, rhs_free_in_ct, params
        )
        return [ct_lhs, None]
    ct_rhs = _dot_operand_cotangent(ct, lhs, rhs_aval, rhs_dims, lhs_dims, lhs_free_in_ct, params)
    return [None, ct_rhs]


dot_general_p.def_transpose(_dot_general_transpose)


def _with_batch_axis(contract, batch, batch_dim: int | None):
    """An operand's contracting and batch dims, renumbered for the operand with a vmap axis at
    `batch_dim` (None: no vmap axis)."""
    if batch_dim is None:
        return contract, batch
    return tuple(d + (d >= batch_dim) for d in contract), tuple(d + (d >= batch_dim) for d in batch)


def _dot_general_batch(values, dims, *, dimension_numbers, **params):
    """Both operands batched: the vmap axes pair up as the first batch dimension. One operand
    batched: its vmap axis is one more free dimension, so the other operand is not broadcast."""
    (lhs, rhs), (lhs_dim, rhs_dim) = values, dims
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_contract, lhs_batch = _with_batch_axis(lhs_contract, lhs_batch, lhs_dim)
    rhs_contract, rhs_batch = _with_batch_axis(rhs_contract, rhs_batch, rhs_dim)
    lhs_ndim, rhs_ndim = core.get_aval(lhs).ndim, core.get_aval(rhs).ndim
    # The output holds the batch dims, then lhs's free dims in order, then rhs's.
    if lhs_dim is not None and rhs_dim is not None:
        lhs_batch, rhs_batch = (lhs_dim, *lhs_batch), (rhs_dim, *rhs_batch)
        out_dim = 0
    elif lhs_dim is not None:
        lhs_free = _free_dims(lhs_ndim, lhs_contract, lhs_batch)
        out_dim = len(lhs_batch) + lhs_free.index(lhs_dim)
    else:
        n_lhs_free = lhs_ndim - len(lhs_contract) - len(lhs_batch)
        rhs_free = _free_dims(rhs_ndim, rhs_contract, rhs_batch)
        out_dim = len(rhs_batch) + n_lhs_free + rhs_free.index(rhs_dim)
    dimension_numbers = ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))
    out = dot_general_p.bind(lhs, rhs, dimension_numbers=dimension_numbers, **params)
    return out, out_dim


dot_general_p.def_batch(_dot_general_batch)


def _canonical_dot_dimension_numbers(dimension_numbers):
    try:
        (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
        return (
            (tuple(int(d) for d in lhs_contract), tuple(int(d) for d in rhs_contract)),
            (tuple(int(d) for d in lhs_batch), tuple(int(d) for d in rhs_batch)),
        )
    except (TypeError, ValueError):
        raise TypeError(
            "dot_general: dimension_numbers must be ((lhs_contracting_dims, "
            f"rhs_contracting_dims), (lhs_batch_dims, rhs_batch_dims)), got {dimension_numbers!r}"
        ) from None


def dot_general(
    lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, *, out_sharding=None
):
    """Contract `dimension_numbers[0]` and pair up `dimension_numbers[1]` of two arrays.

    The result's dimensions are the batch dimensions, then lhs's free dimensions, then rhs's.
    Operands of different dtypes give the one of higher precision (complex over real, then
    the wider exponent, the longer mantissa, more bits, signed over unsigned), as in JAX.
    """
    lhs, rhs = asarray(lhs), asarray(rhs)
    preferred_element_type = _canonical_preferred(preferred_element_type)
    if preferred_element_type is None and lhs.dtype != rhs.dtype:
        preferred_element_type = max(lhs.dtype, rhs.dtype, key=_precision_rank)
    dimension_numbers = _canonical_dot_dimension_numbers(dimension_numbers)
    out = _bind_contraction(
        dot_general_p,
        lhs,
        rhs,
        precision,
        preferred_element_type,
        dimension_numbers=dimension_numbers,
    )
    if out_sharding is not None:
        return placed(out, "dot_general", out_sharding=out_sharding)
    return out


def _bind_contraction(primitive, lhs, rhs, precision, preferred, **params):
    """Bind dot_general or conv_general_dilated; a DotAlgorithm as `precision` becomes its
    rounding, exact products and accumulation (`dot_algorithms.contract`)."""
    if dot_algorithms.is_algorithm(precision):

        def product(lhs, rhs, accumulation):
            return primitive.bind(
                lhs, rhs, **params, precision=Precision.HIGHEST, preferred_element_type=accumulation
            )

        result = preferred or lhs.dtype
        return dot_algorithms.contract(product, lhs, rhs, precision, result, primitive.name)
    return primitive.bind(
        lhs,
        rhs,
        **params,
        precision=_canonical_precision(precision),
        preferred_element_type=preferred,
    )


def _precision_rank(dtype: np.dtype) -> tuple:
    real = dtypes.real_dtype(dtype) if dtypes.is_complex(dtype) else dtype
    floating = dtypes.is_float(real)
    info = dtypes.finfo(real) if floating else None
    bits = 1 if real == dtypes.bool_ else 8 * real.itemsize
    return (
        dtypes.is_complex(dtype),
        info.maxexp if floating else -1,
        info.nmant if floating else -1,
        bits,
        not dtypes.is_unsigned(real),
    )


def dot(
    lhs,
    rhs,
    precision=None,
    preferred_element_type=None,
    *,
    dimension_numbers=None,
    out_sharding=None,
):
    """Vector/matrix products: the last dimension of `lhs` against the first of `rhs`; with
    `dimension_numbers`, `dot_general` of any ranks."""
    lhs, rhs = asarray(lhs), asarray(rhs)
    if dimension_numbers is None:
        if lhs.ndim not in (1, 2) or rhs.ndim not in (1, 2):
            raise TypeError(
                f"dot takes vectors and matrices, got shapes {lhs.shape} and {rhs.shape} "
                "(pass dimension_numbers, or use dot_general, for higher ranks)"
            )
        dimension_numbers = (((lhs.ndim - 1,), (0,)), ((), ()))
    return dot_general(
        lhs,
        rhs,
        dimension_numbers,
        precision,
        preferred_element_type,
        out_sharding=out_sharding,
    )


def batch_matmul(lhs, rhs, precision=None):
    """Matrix products over the last two dimensions, pairing up all leading dimensions."""
    lhs, rhs = asarray(lhs), asarray(rhs)
    if lhs.ndim < 2 or lhs.ndim != rhs.ndim:
        raise ValueError(
            "batch_matmul needs operands of one rank, at least 2, got shapes "
            f"{lhs.shape} and {rhs.shape}"
        )
    batch = tuple(range(lhs.ndim - 2))
    dimension_numbers = (((lhs.ndim - 1,), (rhs.ndim - 2,)), (batch, batch))
    return dot_general(lhs, rhs, dimension_numbers, precision)


# ---------------------------------------------------------------------------------------------
# conv_general_dilated


class ConvDimensionNumbers(NamedTuple):
    """Where each role lives in the operands of a convolution.

    `lhs_spec` is (batch dim, feature dim, spatial dims...), `rhs_spec` is (output feature dim,
    input feature dim, spatial dims...), `out_spec` is (batch dim, feature dim, spatial dims...).
    """

    lhs_spec: tuple[int, ...]
    rhs_spec: tuple[int, ...]
    out_spec: tuple[int, ...]


def conv_dimension_numbers(
    lhs_shape: Sequence[int], rhs_shape: Sequence[int], dimension_numbers
) -> ConvDimensionNumbers:
    """Canonical ConvDimensionNumbers from None (NCHW, OIHW, NCHW), layout strings or specs."""
    ndim = len(lhs_shape)
    if len(rhs_shape) != ndim:
        raise TypeError(
            "convolution operands must have the same rank, got lhs shape "
            f"{tuple(lhs_shape)} and rhs shape {tuple(rhs_shape)}"
        )
    if dimension_numbers is None:
        default = tuple(range(ndim))
        return ConvDimensionNumbers(default, default, default)
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        specs = dimension_numbers
    elif (
        isinstance(dimension_numbers, (tuple, list))
        and len(dimension_numbers) == 3
        and all(isinstance(s, str) for s in dimension_numbers)
    ):
        specs = _specs_from_layouts(ndim, *dimension_numbers)
    else:
        raise TypeError(
            "dimension_numbers must be None, a ConvDimensionNumbers or a tuple of three layout "
            f"strings such as ('NHWC', 'HWIO', 'NHWC'), got {dimension_numbers!r}"
        )
    specs = ConvDimensionNumbers(*(tuple(int(d) for d in spec) for spec in specs))
    for spec in specs:
        if sorted(spec) != list(range(ndim)):
            raise TypeError(
                f"convolution dimension numbers {tuple(specs)} must each be a permutation of the "
                f"dimensions of operands of rank {ndim}"
            )
    return specs


def _specs_from_layouts(ndim: int, lhs: str, rhs: str, out: str) -> ConvDimensionNumbers:
    """Spatial dimensions are ordered as they appear in the kernel's layout string."""
    for layout, roles in ((lhs, "NC"), (rhs, "OI"), (out, "NC")):
        if len(layout) != ndim or len(set(layout)) != ndim or not set(roles) <= set(layout):
            raise TypeError(
                f"convolution layout {layout!r} must name each of the {ndim} dimensions once, "
                f"including {roles[0]!r} and {roles[1]!r}"
            )
    spatial = [c for c in rhs if c not in "OI"]
    if not set(lhs) - set("NC") == set(spatial) == set(out) - set("NC"):
        raise TypeError(
            f"convolution layouts {(lhs, rhs, out)} must share the same spatial dimension names"
        )

    def spec(layout: str, roles: str) -> tuple[int, ...]:
        return tuple(layout.index(c) for c in roles) + tuple(layout.index(c) for c in spatial)

    return ConvDimensionNumbers(spec(lhs, "NC"), spec(rhs, "OI"), spec(out, "NC"))


def _dilate_dim(size: int, dilation: int) -> int:
    """The extent of `size` elements spread `dilation` apart."""
    return 0 if size == 0 else 1 + dilation * (size - 1)


conv_general_dilated_p = Primitive("conv_general_dilated")


def _check_conv_params(ndim, window_strides, padding, lhs_dilation, rhs_dilation) -> None:
    spatial = ndim - 2
    for name, value in (
        ("window_strides", window_strides),
        ("padding", padding),
        ("lhs_dilation", lhs_dilation),
        ("rhs_dilation", rhs_dilation),
    ):
        if len(value) != spatial:
            raise TypeError(
                f"conv_general_dilated: {name} {value} must have one entry per spatial dimension "
                f"({spatial} for operands of rank {ndim})"
            )
    for name, value in (
        ("window_strides", window_strides),
        ("lhs_dilation", lhs_dilation),
        ("rhs_dilation", rhs_dilation),
    ):
        if any(v < 1 for v in value):
            raise TypeError(f"conv_general_dilated: {name} must be positive, got {value}")


def _check_conv_groups(lhs_shape, rhs_shape, batch, feature, out_feature, in_feature, groups):
    feature_groups, batch_groups = groups
    if feature_groups < 1 or batch_groups < 1 or (feature_groups > 1 and batch_groups > 1):
        raise TypeError(
            "conv_general_dilated: feature_group_count and batch_group_count must be positive "
            f"and at most one of them above 1, got {feature_groups} and {batch_groups}"
        )
    shapes = f"lhs shape {lhs_shape} and rhs shape {rhs_shape}"
    if feature % feature_groups or feature // feature_groups != in_feature:
        raise TypeError(
            f"conv_general_dilated: the lhs feature size ({feature}) must be feature_group_count "
            f"({feature_groups}) times the rhs input feature size ({in_feature}), got {shapes}"
        )
    for count, name in (
        (feature_groups, "feature_group_count"),
        (batch_groups, "batch_group_count"),
    ):
        if out_feature % count:
            raise TypeError(
                f"conv_general_dilated: the rhs output feature size ({out_feature}) must be a "
                f"multiple of {name} ({count}), got {shapes}"
            )
    if batch % batch_groups:
        raise TypeError(
            f"conv_general_dilated: the lhs batch size ({batch}) must be a multiple of "
            f"batch_group_count ({batch_groups}), got {shapes}"
        )


@conv_general_dilated_p.def_abstract_eval
def _conv_general_dilated_abstract_eval(
    lhs: ShapedArray,
    rhs: ShapedArray,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    precision,
    preferred_element_type,
) -> ShapedArray:
    if lhs.ndim != rhs.ndim or lhs.ndim < 2:
        raise TypeError(
            "conv_general_dilated: operands must have one rank, at least 2, got lhs shape "
            f"{lhs.shape} and rhs shape {rhs.shape}"
        )
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    _check_conv_params(lhs.ndim, window_strides, padding, lhs_dilation, rhs_dilation)
    batch, feature = (lhs.shape[d] for d in lhs_spec[:2])
    out_feature, in_feature = (rhs.shape[d] for d in rhs_spec[:2])
    groups = (feature_group_count, batch_group_count)
    _check_conv_groups(lhs.shape, rhs.shape, batch, feature, out_feature, in_feature, groups)
    out_spatial = []
    for i, (lhs_dim, rhs_dim) in enumerate(zip(lhs_spec[2:], rhs_spec[2:])):
        low, high = padding[i]
        padded = _dilate_dim(lhs.shape[lhs_dim], lhs_dilation[i]) + low + high
        if padded < 0:
            raise TypeError(
                f"conv_general_dilated: negative padding {padding[i]} removes more than the "
                f"(dilated) size of lhs dimension {lhs_dim}, lhs shape {lhs.shape}"
            )
        window = _dilate_dim(rhs.shape[rhs_dim], rhs_dilation[i])
        out_spatial.append(max(0, (padded - window) // window_strides[i] + 1))
    canonical = (batch // batch_group_count, out_feature, *out_spatial)
    shape = [0] * lhs.ndim
    for role, dim in enumerate(out_spec):
        shape[dim] = canonical[role]
    dtype = _result_dtype("conv_general_dilated", lhs.dtype, rhs.dtype, preferred_element_type)
    return ShapedArray(tuple(shape), dtype)


def _dilate_and_pad(x: np.ndarray, dilation, padding) -> np.ndarray:
    """Spread the spatial elements of an (N, C, spatial...) array apart, then pad or crop."""
    if any(d > 1 for d in dilation):
        spread = np.zeros(
            x.shape[:2] + tuple(_dilate_dim(s, d) for s, d in zip(x.shape[2:], dilation)), x.dtype
        )
        spread[(Ellipsis, *(slice(None, None, d) for d in dilation))] = x
        x = spread
    grow = [(0, 0), (0, 0)] + [(max(low, 0), max(high, 0)) for low, high in padding]
    if any(g != (0, 0) for g in grow):
        x = np.pad(x, grow)
    crop = tuple(
        slice(max(-low, 0), size - max(-high, 0)) for size, (low, high) in zip(x.shape[2:], padding)
    )
    return x[(slice(None), slice(None), *crop)]


@conv_general_dilated_p.def_impl
def _conv_general_dilated_impl(lhs, rhs, **params):
    # A cross-correlation (the kernel is not flipped), computed as one batched matmul over
    # groups of im2col patches.
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    out_aval = _conv_general_dilated_abstract_eval(
        ShapedArray(lhs.shape, lhs.dtype), ShapedArray(rhs.shape, rhs.dtype), **params
    )
    if out_aval.size == 0 or rhs.size == 0:
        return _finish(np.zeros(out_aval.shape), out_aval.dtype)
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    strides, rhs_dilation = params["window_strides"], params["rhs_dilation"]
    compute = _accumulation_dtype(out_aval.dtype, lhs.dtype, rhs.dtype)
    x = lhs.astype(compute, copy=False).transpose(lhs_spec)
    x = _dilate_and_pad(x, params["lhs_dilation"], params["padding"])
    w = rhs.astype(compute, copy=False).transpose(rhs_spec)
    extent = tuple(_dilate_dim(k, d) for k, d in zip(w.shape[2:], rhs_dilation))

    def patches_of(spread):
        # (N, C, positions..., offsets...), keeping every stride-th position and every
        # dilation-th offset.
        windows = sliding_window_view(spread, extent, axis=tuple(range(2, spread.ndim)))
        return windows[
            (slice(None), slice(None))
            + tuple(slice(None, None, s) for s in strides)
            + tuple(slice(None, None, d) for d in rhs_dilation)
        ]

    patches = patches_of(x)
    groups = (params["feature_group_count"], params["batch_group_count"])
    if np.all(np.isfinite(w)):
        out = _grouped_contraction(patches, w, *groups)
    else:
        # Padding and dilation holes contribute nothing, not 0 * w: an inf or nan kernel tap
        # that lands only on holes must leave the output finite.
        ones = np.ones((1, 1) + tuple(lhs.shape[d] for d in lhs_spec[2:]), bool)
        real = patches_of(_dilate_and_pad(ones, params["lhs_dilation"], params["padding"]))
        out = _masked_contraction(patches, w, real[0, 0], groups)
    return _finish(out.transpose(np.argsort(out_spec)), out_aval.dtype)


def _masked_contraction(patches, w, real, groups) -> np.ndarray:
    """`_grouped_contraction` that drops every product of a kernel tap with a padded element.

    `real` (out..., k...) says which patch elements come from the lhs. One kernel tap at a time,
    every feature of a patch element is real or none is, so masking each tap's sum is exact.
    """
    out = 0
    for tap in np.ndindex(w.shape[2:]):
        keep = (Ellipsis,) + tuple(slice(k, k + 1) for k in tap)
        term = _grouped_contraction(patches[keep], w[keep], *groups)
        out = out + np.where(real[(Ellipsis,) + tap], term, 0)
    return out


def _grouped_contraction(patches, w, feature_groups: int, batch_groups: int) -> np.ndarray:
    """Contract (N, C, out..., k...) patches with an (O, C / feature_groups, k...) kernel.

    Group g takes its slice of lhs features (feature groups) or lhs batch (batch groups) and
    produces the g-th block of output features. Returns (N / batch_groups, O, out...).
    """
    batch, feature = patches.shape[:2]
    spatial = len(w.shape) - 2
    out_sizes = patches.shape[2 : 2 + spatial]
    groups = feature_groups * batch_groups
    group_batch, group_feature = batch // batch_groups, feature // feature_groups
    positions, window = math.prod(out_sizes), math.prod(w.shape[1:])
    grouped = patches.reshape(
        (batch_groups, group_batch, feature_groups, group_feature) + patches.shape[2:]
    )
    # -> (batch groups, feature groups, batch, out..., feature, k...), then im2col matrices.
    order = (
        (0, 2, 1) + tuple(range(4, 4 + spatial)) + (3,) + tuple(range(4 + spatial, grouped.ndim))
    )
    columns = grouped.transpose(order).reshape(groups, group_batch * positions, window)
    kernels = w.reshape(groups, w.shape[0] // groups, window).transpose(0, 2, 1)
    out = np.matmul(columns, kernels)  # (groups, group batch * positions, group out features)
    out = out.reshape((groups, group_batch) + out_sizes + (w.shape[0] // groups,))
    # -> (batch, groups, group out features, out...) and merge the feature blocks.
    out = out.transpose((1, 0, 2 + spatial) + tuple(range(2, 2 + spatial)))
    return out.reshape((group_batch, w.shape[0]) + out_sizes)


# Convolution is bilinear too.
defjvp(
    conv_general_dilated_p,
    lambda t, lhs, rhs, **params: conv_general_dilated_p.bind(t, rhs, **params),
    lambda t, lhs, rhs, **params: conv_general_dilated_p.bind(lhs, t, **params),
)


# In one spatial dimension, with input size Q, kernel size K, output size P, stride s, padding
# low, lhs dilation ld and rhs dilation rd, the convolution is
#     out[p] = sum over (k, q) with p*s + k*rd - low == q*ld of  w[k] * x[q].
# Both transposes keep this index relation and make it a convolution again.
#
# lhs: x_ct[q] = sum of ct[p] * w[k]. With the kernel reversed (k' = K - 1 - k), this is a
# convolution of ct spread out by s (lhs_dilation s), stride ld, rhs dilation rd, low padding
# (K - 1)*rd - low, and high padding making the output exactly Q long.
#
# rhs: w_ct[k] = sum of x[q] * ct[p]: a convolution of x (lhs dilation ld, low padding low)
# with ct as the kernel (rhs dilation s), stride rd, and high padding making the output
# exactly K long. Batch is contracted here, so it plays the feature role, and features the
# batch role: feature groups become batch groups and the other way round.


def _conv_lhs_padding(q, k, p, stride, low, lhs_dilation, rhs_dilation) -> tuple[int, int]:
    window = _dilate_dim(k, rhs_dilation)
    new_low = window - 1 - low
    padded = (q - 1) * lhs_dilation + window
    return new_low, padded - _dilate_dim(p, stride) - new_low


def _conv_rhs_padding(q, k, p, stride, low, lhs_dilation, rhs_dilation) -> tuple[int, int]:
    padded = (k - 1) * rhs_dilation + _dilate_dim(p, stride)
    return low, padded - _dilate_dim(q, lhs_dilation) - low


def _conv_spatial_padding(padding_rule, lhs_shape, rhs_shape, out_shape, params):
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    return tuple(
        padding_rule(
            lhs_shape[lhs_spec[2 + i]],
            rhs_shape[rhs_spec[2 + i]],
            out_shape[out_spec[2 + i]],
            params["window_strides"][i],
            params["padding"][i][0],
            params["lhs_dilation"][i],
            params["rhs_dilation"][i],
        )
        for i in range(len(lhs_spec) - 2)
    )


def _conv_lhs_cotangent(ct, rhs, lhs_aval: ShapedArray, params):
    """The input's cotangent: a convolution of the output's cotangent with the kernel reversed
    in space, its two feature axes trading roles, in the operands' own layouts (the kernel's
    and the cotangent's dimension numbers), so that a compiled convolution gathers and
    writes along the features where the caller stores them innermost."""
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    batch_groups = params["batch_group_count"]
    groups = params["feature_group_count"] * batch_groups
    padding = _conv_spatial_padding(
        _conv_lhs_padding, lhs_aval.shape, core.get_aval(rhs).shape, core.get_aval(ct).shape, params
    )
    kernel = rhs
    if groups > 1:
        # Group g's output features o = g * (O / groups) + j map back to its input features:
        # the group moves from the output-feature axis into the input-feature one (major).
        out_features = kernel.shape[rhs_spec[0]]
        kernel = _split_axis(kernel, rhs_spec[0], groups, out_features // groups)
        kernel = _merge_axis(kernel, rhs_spec[0], rhs_spec[1])
    kernel = rev(kernel, tuple(rhs_spec[2:]))
    x_ct = conv_general_dilated_p.bind(
        ct,
        kernel,
        window_strides=params["lhs_dilation"],
        padding=padding,
        lhs_dilation=params["window_strides"],
        rhs_dilation=params["rhs_dilation"],
        dimension_numbers=ConvDimensionNumbers(out_spec, _swap_roles(rhs_spec), lhs_spec),
        feature_group_count=groups,
        batch_group_count=1,
        precision=params["precision"],
        preferred_element_type=params["preferred_element_type"],
    )
    if batch_groups > 1:
        # The features of group g belong to the g-th block of the batch.
        features = x_ct.shape[lhs_spec[1]]
        x_ct = _split_axis(x_ct, lhs_spec[1], batch_groups, features // batch_groups)
        x_ct = _merge_axis(x_ct, lhs_spec[1], lhs_spec[0])
    return convert_element_type(x_ct, lhs_aval.dtype)


def _swap_roles(spec: tuple[int, ...]) -> tuple[int, ...]:
    return (spec[1], spec[0], *spec[2:])


def _conv_rhs_cotangent(ct, lhs, rhs_aval: ShapedArray, params):
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    padding = _conv_spatial_padding(
        _conv_rhs_padding, core.get_aval(lhs).shape, rhs_aval.shape, core.get_aval(ct).shape, params
    )
    w_ct = conv_general_dilated_p.bind(
        lhs,
        ct,
        window_strides=params["rhs_dilation"],
        padding=padding,
        lhs_dilation=params["lhs_dilation"],
        rhs_dilation=params["window_strides"],
        dimension_numbers=ConvDimensionNumbers(
            _swap_roles(lhs_spec), _swap_roles(out_spec), _swap_roles(rhs_spec)
        ),
        feature_group_count=params["batch_group_count"],
        batch_group_count=params["feature_group_count"],
        precision=params["precision"],
        preferred_element_type=params["preferred_element_type"],
    )
    return convert_element_type(w_ct, rhs_aval.dtype)


def _conv_general_dilated_transpose(ct, lhs, rhs, **params):
    # With an empty operand or output the convolution is the zero map (and the padding
    # formulas, which assume non-empty sizes, do not apply).
    avals = [core.get_aval(x) for x in (ct, lhs, rhs)]
    if is_undefined(lhs):
        if any(aval.size == 0 for aval in avals):
            return [Zero(tangent_aval(avals[1])), None]
        return [_conv_lhs_cotangent(ct, rhs, avals[1], params), None]
    if any(aval.size == 0 for aval in avals):
        return [None, Zero(tangent_aval(avals[2]))]
    return [None, _conv_rhs_cotangent(ct, lhs, avals[2], params)]


conv_general_dilated_p.def_transpose(_conv_general_dilated_transpose)


def _merge_axis(x, src: int, dst: int, groups: int = 1):
    """`x` with its axis `src` merged into axis `dst` (numbered as if `src` were gone).

    `dst` is seen as `groups` equal blocks, and within each block the merged axis is the major
    part: block g of the result holds block g of every lane, so a grouped convolution keeps
    its groups.
    """
    x = moveaxis(x, src, dst)
    shape = core.get_aval(x).shape
    size, target = shape[dst], shape[dst + 1]
    if groups > 1:
        x = reshape(x, (*shape[:dst], size, groups, target // groups, *shape[dst + 2 :]))
        x = moveaxis(x, dst + 1, dst)
    return reshape(x, (*shape[:dst], size * target, *shape[dst + 2 :]))


def _split_axis(x, dim: int, size: int, lane: int, groups: int = 1):
    """The inverse of `_merge_axis`: axis `dim` of `x`, holding `size` lanes of `lane` elements
    in `groups` blocks, becomes a lane axis at `dim` followed by the lane's own axis."""
    shape = core.get_aval(x).shape
    if groups > 1:
        x = reshape(x, (*shape[:dim], groups, size, lane // groups, *shape[dim + 1 :]))
        x = moveaxis(x, dim + 1, dim)
    return reshape(x, (*shape[:dim], size, lane, *shape[dim + 1 :]))


def _conv_general_dilated_batch(values, dims, **params):
    """One convolution for all lanes: a batched lhs folds its lanes into the lhs batch, a batched
    kernel folds them into the output features, and when both are batched each lane becomes
    its own feature group (or batch group, if the convolution already has batch groups)."""
    (lhs, rhs), (lhs_dim, rhs_dim) = values, dims
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    feature_groups, batch_groups = params["feature_group_count"], params["batch_group_count"]
    size = batch_size(values, dims)
    if lhs_dim is not None and rhs_dim is not None and size == 0:
        # No lanes: any one kernel gives the (empty) result, and groups of zero do not exist.
        rhs_aval = core.get_aval(rhs)
        lane_shape = rhs_aval.shape[:rhs_dim] + rhs_aval.shape[rhs_dim + 1 :]
        rhs, rhs_dim = full(lane_shape, 0, rhs_aval.dtype), None
    if rhs_dim is None:
        batch = core.get_aval(lhs).shape[lhs_spec[0] + (lhs_dim <= lhs_spec[0])]
        lhs = _merge_axis(lhs, lhs_dim, lhs_spec[0], batch_groups)
        out = conv_general_dilated_p.bind(lhs, rhs, **params)
        return _split_axis(out, out_spec[0], size, batch // batch_groups), out_spec[0]
    out_features = core.get_aval(rhs).shape[rhs_spec[0] + (rhs_dim <= rhs_spec[0])]
    if lhs_dim is None:
        groups = feature_groups * batch_groups
        rhs = _merge_axis(rhs, rhs_dim, rhs_spec[0], groups)
        out = conv_general_dilated_p.bind(lhs, rhs, **params)
        return _split_axis(out, out_spec[1], size, out_features, groups), out_spec[1]
    # Lane b's kernel block, output features b*O to (b+1)*O, sees only lane b's inputs.
    rhs = _merge_axis(rhs, rhs_dim, rhs_spec[0])
    if batch_groups > 1:
        lhs = _merge_axis(lhs, lhs_dim, lhs_spec[0])
        params = dict(params, batch_group_count=size * batch_groups)
    else:
        lhs = _merge_axis(lhs, lhs_dim, lhs_spec[1])
        params = dict(params, feature_group_count=size * feature_groups)
    out = conv_general_dilated_p.bind(lhs, rhs, **params)
    return _split_axis(out, out_spec[1], size, out_features), out_spec[1]


conv_general_dilated_p.def_batch(_conv_general_dilated_batch)


def _int_tuple(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def conv_general_dilated(
    lhs,
    rhs,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision=None,
    preferred_element_type=None,
    out_sharding=None,
):
    """N-d convolution (XLA's cross-correlation) with strides, padding, dilations and groups.

    `lhs_dilation` spreads the input apart (transposed convolution); `rhs_dilation` spreads the
    kernel (atrous convolution). String padding is computed from the undilated input and the
    dilated kernel.
    """
    lhs, rhs = asarray(lhs), asarray(rhs)
    dnums = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    spatial = lhs.ndim - 2
    window_strides = _int_tuple(window_strides)
    lhs_dilation = (1,) * spatial if lhs_dilation is None else _int_tuple(lhs_dilation)
    rhs_dilation = (1,) * spatial if rhs_dilation is None else _int_tuple(rhs_dilation)
    if isinstance(padding, str):
        if any(s < 1 for s in window_strides):
            raise TypeError(
                f"conv_general_dilated: window_strides must be positive, got {window_strides}"
            )
        in_shape = [lhs.shape[d] for d in dnums.lhs_spec[2:]]
        window = [_dilate_dim(rhs.shape[d], r) for d, r in zip(dnums.rhs_spec[2:], rhs_dilation)]
        padding = padtype_to_pads(in_shape, window, window_strides, padding)
    try:
        padding = tuple((int(low), int(high)) for low, high in padding)
    except (TypeError, ValueError):
        raise TypeError(
            f"conv_general_dilated: padding must be a string or (low, high) pairs, got {padding!r}"
        ) from None
    params = dict(
        window_strides=window_strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dnums,
        feature_group_count=int(feature_group_count),
        batch_group_count=int(batch_group_count),
    )
    preferred_element_type = _canonical_preferred(preferred_element_type)
    out = _bind_contraction(
        conv_general_dilated_p, lhs, rhs, precision, preferred_element_type, **params
    )
    return placed(out, "conv_general_dilated", out_sharding=out_sharding)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """Convolution of NCHW-style inputs with OIHW-style kernels, without dilation."""
    return conv_general_dilated(
        lhs,
        rhs,
        window_strides,
        padding,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def conv_with_general_padding(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    precision=None,
    preferred_element_type=None,
):
    """Convolution of NCHW-style inputs with OIHW-style kernels and both dilations."""
    return conv_general_dilated(
        lhs,
        rhs,
        window_strides,
        padding,
        lhs_dilation,
        rhs_dilation,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


# ---------------------------------------------------------------------------------------------
# JAX's lax.linalg namespace


def __getattr__(name: str):
    """The decompositions of JAX's `lax.linalg` (funcgrad.lax.linalg_namespace), looked up when
    first asked for: they are built on this module, so importing them here would be a cycle."""
    if not name.startswith("_"):
        from funcgrad.lax import linalg_namespace

        if name in linalg_namespace.__all__:
            return getattr(linalg_namespace, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    from funcgrad.lax import linalg_namespace

    return sorted({*globals(), *linalg_namespace.__all__})
