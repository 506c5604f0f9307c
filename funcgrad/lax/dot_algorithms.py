"""Dot-product algorithms: the storage type of each operand, the accumulation type, and the
splitting of an operand into several narrow components whose products sum to a more accurate
one (bfloat16 x3, x6, x9).

A `precision=` naming an algorithm rewrites the contraction into those steps (rounding each
operand, one exact product per pair of components, summed in the accumulation type, the sum
rounded to the result's dtype), so every backend and every transformation computes the same
numbers: what a GPU's tensor cores compute for that algorithm, on a CPU too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from funcgrad import dtypes

__all__ = ["DotAlgorithm", "DotAlgorithmPreset"]

# TensorFloat-32: float32's exponent with a 10-bit mantissa (held in float32).
TF32 = "tf32"


class DotAlgorithm(NamedTuple):
    """A contraction's algorithm: each operand rounded to its precision type (split into
    `*_component_count` parts of it, the first rounded and each next rounding what is left),
    the first `num_primitive_operations` products of parts taken in order of the sum of their
    indices, accumulated in `accumulation_type`."""

    lhs_precision_type: Any
    rhs_precision_type: Any
    accumulation_type: Any
    lhs_component_count: int = 1
    rhs_component_count: int = 1
    num_primitive_operations: int = 1
    allow_imprecise_accumulation: bool = False


class DotAlgorithmPreset(enum.Enum):
    """The named algorithms. DEFAULT is the contraction without one; ANY_F8 takes operands of
    8-bit float types as they are."""

    DEFAULT = enum.auto()
    ANY_F8_ANY_F8_F32 = enum.auto()
    ANY_F8_ANY_F8_F32_FAST_ACCUM = enum.auto()
    ANY_F8_ANY_F8_ANY = enum.auto()
    ANY_F8_ANY_F8_ANY_FAST_ACCUM = enum.auto()
    F16_F16_F16 = enum.auto()
    F16_F16_F32 = enum.auto()
    BF16_BF16_BF16 = enum.auto()
    BF16_BF16_F32 = enum.auto()
    BF16_BF16_F32_X3 = enum.auto()
    BF16_BF16_F32_X6 = enum.auto()
    BF16_BF16_F32_X9 = enum.auto()
    TF32_TF32_F32 = enum.auto()
    TF32_TF32_F32_X3 = enum.auto()
    F32_F32_F32 = enum.auto()
    F64_F64_F64 = enum.auto()

    def __repr__(self) -> str:
        return f"DotAlgorithmPreset.{self.name}"


def _presets() -> dict[DotAlgorithmPreset, DotAlgorithm]:
    f16, bf16, f32, f64 = (np.dtype(n) for n in ("float16", "bfloat16", "float32", "float64"))
    p = DotAlgorithmPreset
    return {
        p.F16_F16_F16: DotAlgorithm(f16, f16, f16),
        p.F16_F16_F32: DotAlgorithm(f16, f16, f32),
        p.BF16_BF16_BF16: DotAlgorithm(bf16, bf16, bf16),
        p.BF16_BF16_F32: DotAlgorithm(bf16, bf16, f32),
        p.BF16_BF16_F32_X3: DotAlgorithm(bf16, bf16, f32, 2, 2, 3),
        p.BF16_BF16_F32_X6: DotAlgorithm(bf16, bf16, f32, 3, 3, 6),
        p.BF16_BF16_F32_X9: DotAlgorithm(bf16, bf16, f32, 3, 3, 9),
        p.TF32_TF32_F32: DotAlgorithm(TF32, TF32, f32),
        p.TF32_TF32_F32_X3: DotAlgorithm(TF32, TF32, f32, 2, 2, 3),
        p.F32_F32_F32: DotAlgorithm(f32, f32, f32),
        p.F64_F64_F64: DotAlgorithm(f64, f64, f64),
    }


def is_algorithm(precision) -> bool:
    return isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)) and (
        precision is not DotAlgorithmPreset.DEFAULT
    )


def resolve(algorithm, lhs: np.dtype, rhs: np.dtype, name: str) -> DotAlgorithm:
    """The algorithm for operands of these dtypes, with its types as dtypes (or TF32)."""
    for dtype in (lhs, rhs):
        if not dtypes.is_float(dtype):
            raise TypeError(
                f"{name}: the algorithm {algorithm!r} contracts real floating-point operands, "
                f"got {lhs.name} and {rhs.name}"
            )
    if isinstance(algorithm, DotAlgorithmPreset):
        if algorithm.name.startswith("ANY_F8"):
            if lhs.itemsize != 1 or rhs.itemsize != 1:
                raise TypeError(
                    f"{name}: {algorithm!r} contracts 8-bit float operands, got {lhs.name} and "
                    f"{rhs.name}"
                )
            return DotAlgorithm(lhs, rhs, np.dtype("float32"))
        return _presets()[algorithm]
    kinds = [algorithm.lhs_precision_type, algorithm.rhs_precision_type]
    types = [t if t == TF32 else dtypes.canonicalize(t) for t in kinds]
    accumulation = dtypes.canonicalize(algorithm.accumulation_type)
    counts = (algorithm.lhs_component_count, algorithm.rhs_component_count)
    if min(counts) < 1 or not 1 <= algorithm.num_primitive_operations <= counts[0] * counts[1]:
        raise ValueError(
            f"{name}: {algorithm!r} needs at least one component per operand and between 1 "
            "and lhs_component_count * rhs_component_count primitive operations"
        )
    return algorithm._replace(
        lhs_precision_type=types[0], rhs_precision_type=types[1], accumulation_type=accumulation
    )


def contract(product: Callable, lhs, rhs, algorithm, result: np.dtype, name: str):
    """`product(lhs, rhs, accumulation)` (one exact contraction with that result type) under
    `algorithm`, rounded to `result`."""
    from funcgrad.lax import add, convert_element_type

    spec = resolve(algorithm, lhs.dtype, rhs.dtype, name)
    lhs_parts = _components(lhs, spec.lhs_precision_type, spec.lhs_component_count)
    rhs_parts = _components(rhs, spec.rhs_precision_type, spec.rhs_component_count)
    pairs = sorted(
        ((i, j) for i in range(len(lhs_parts)) for j in range(len(rhs_parts))),
        key=lambda ij: (ij[0] + ij[1], ij[0]),
    )[: spec.num_primitive_operations]
    total = None
    for i, j in reversed(pairs):  # the smallest products first
        term = product(lhs_parts[i], rhs_parts[j], spec.accumulation_type)
        total = term if total is None else add(total, term)
    return convert_element_type(total, result)


def _components(x, kind, count: int) -> list:
    """x as `count` numbers of type `kind` whose sum approaches it: each rounds what the
    previous ones leave (computed in x's own type, or float32 for a narrower one)."""
    from funcgrad.lax import convert_element_type, reduce_precision, sub

    wide = x.dtype if x.dtype.itemsize >= 4 else np.dtype("float32")
    rest = convert_element_type(x, wide)
    parts = []
    for _ in range(count):
        if kind == TF32:
            part = reduce_precision(rest, exponent_bits=8, mantissa_bits=10)
        else:
            part = convert_element_type(rest, kind)
        parts.append(part)
        rest = sub(rest, convert_element_type(part, wide))
    return parts
