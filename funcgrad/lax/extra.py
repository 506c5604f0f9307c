"""More of jax.lax: the generic `reduce`, `reduce_precision`, and functions composed from the
other families (split, tile, stack, unstack, reduce_xor, clz, approx_max_k, ...).

`reduce_precision` is a primitive (rounding a float to fewer exponent and mantissa bits); the
rest are written with existing primitives, so every transformation applies to them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters.ad import deflinear
from funcgrad.interpreters.batching import defvectorized
from funcgrad.lax import elementwise, reductions, shapes
from funcgrad.lax.base import asarray, canonical_axes
from funcgrad.lax.indexing import gather_along_axis, scatter_add
from funcgrad.lax.sharding_constraint import placed
from funcgrad.lax.sorting import top_k

__all__ = [
    "approx_max_k",
    "approx_min_k",
    "broadcast_shapes",
    "clz",
    "empty",
    "optimization_barrier",
    "reduce",
    "reduce_precision",
    "reduce_xor",
    "scatter_sub",
    "split",
    "stack",
    "tile",
    "unstack",
]


# ---------------------------------------------------------------------------------------------
# reduce_precision

reduce_precision_p = Primitive("reduce_precision")


@reduce_precision_p.def_abstract_eval
def _reduce_precision_abstract_eval(
    x: ShapedArray, *, exponent_bits: int, mantissa_bits: int
) -> ShapedArray:
    if not dtypes.is_float(x.dtype):
        raise TypeError(
            f"reduce_precision does not accept dtype {x.dtype.name}; it takes floating-point arrays"
        )
    if exponent_bits < 1 or mantissa_bits < 0:
        raise ValueError(
            f"reduce_precision: needs exponent_bits >= 1 and mantissa_bits >= 0, got "
            f"exponent_bits={exponent_bits} and mantissa_bits={mantissa_bits}"
        )
    return ShapedArray(x.shape, x.dtype)


@reduce_precision_p.def_impl
def _reduce_precision_impl(x, *, exponent_bits, mantissa_bits):
    """Round to nearest even at `mantissa_bits`, then send exponents beyond the smaller
    format's range to infinity, and below its smallest normal number to zero (as XLA does:
    no subnormals). NaNs stay NaN. A narrow format is rounded in float32, unless the format
    asked for holds its own."""
    x = np.asarray(x)
    info = dtypes.finfo(x.dtype)
    if dtypes.is_narrow(x.dtype):
        if exponent_bits >= info.nexp and mantissa_bits >= info.nmant:
            return x[()] if x.ndim == 0 else x
        wide = x.astype(dtypes.compute_dtype(x.dtype))
        out = _reduce_precision_impl(wide, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits)
        return np.asarray(out).astype(x.dtype)[()] if x.ndim == 0 else out.astype(x.dtype)
    unsigned = np.dtype(f"uint{info.bits}")
    u = x.view(unsigned)
    one = unsigned.type(1)
    if mantissa_bits < info.nmant:
        dropped = unsigned.type(info.nmant - mantissa_bits)
        last_kept = (u >> dropped) & one
        half_minus_one = (one << (dropped - one)) - one
        u = (u + half_minus_one + last_kept) & ~((one << dropped) - one)
    if exponent_bits < info.nexp:
        source_bias = (1 << (info.nexp - 1)) - 1
        target_bias = (1 << (exponent_bits - 1)) - 1
        exponent = (u >> unsigned.type(info.nmant)) & unsigned.type((1 << info.nexp) - 1)
        sign = u & (one << unsigned.type(info.bits - 1))
        infinity = sign | (unsigned.type((1 << info.nexp) - 1) << unsigned.type(info.nmant))
        u = np.where(exponent > source_bias + target_bias, infinity, u)
        u = np.where(exponent <= source_bias - target_bias, sign, u)
    out = u.view(x.dtype)
    return np.where(np.isnan(x), x, out)[()] if x.ndim == 0 else np.where(np.isnan(x), x, out)


def _reduce_precision_transpose(ct, x, **params):
    return [reduce_precision_p.bind(ct, **params)]


# As in JAX, derivatives pass through the rounding (applied to them too) rather than being zero.
deflinear(reduce_precision_p, _reduce_precision_transpose)
defvectorized(reduce_precision_p)


def reduce_precision(operand, exponent_bits: int, mantissa_bits: int):
    """operand rounded to a float format of `exponent_bits` and `mantissa_bits` (e.g. 8 and 7
    for bfloat16, 5 and 10 for float16), keeping its dtype. The operand's own format leaves
    its value as it is, rounded where it is made: the compiler does not fuse the product that
    makes it into a following sum with one rounding."""
    return reduce_precision_p.bind(
        asarray(operand), exponent_bits=int(exponent_bits), mantissa_bits=int(mantissa_bits)
    )


# ---------------------------------------------------------------------------------------------
# reduce with a Python computation

_MONOID_REDUCERS = {
    elementwise.add_p: reductions.reduce_sum,
    elementwise.mul_p: reductions.reduce_prod,
    elementwise.max_p: reductions.reduce_max,
    elementwise.min_p: reductions.reduce_min,
    elementwise.and_p: reductions.reduce_and,
    elementwise.or_p: reductions.reduce_or,
}


def reduce(
    operands,
    init_values,
    computation: Callable,
    dimensions: Sequence[int],
    out_sharding=None,
):
    """Reduce `dimensions` of operands with `computation`, starting from init_values.

    A single operand reduced by one of the monoids funcgrad has reductions for (addition,
    multiplication, max, min, logical and/or; recognised by tracing the computation on two
    scalars) becomes that one reduction. Any other computation, over one operand or a pytree
    of them, is applied to halves of the operands until one element is left along each
    dimension; it must be associative and commutative (the order of its applications is not
    specified), and elementwise, since it then sees arrays rather than scalars.
    """
    reduced = _reduce(operands, init_values, computation, dimensions)
    return placed(reduced, "reduce", out_sharding=out_sharding)


def _reduce(operands, init_values, computation: Callable, dimensions: Sequence[int]):
    flat_operands, tree = tree_util.tree_flatten(operands)
    flat_inits, init_tree = tree_util.tree_flatten(init_values)
    if init_tree != tree:
        raise ValueError(
            f"reduce: operands and init_values must have the same structure, got {tree} and "
            f"{init_tree}"
        )
    if not flat_operands:
        raise TypeError("reduce needs at least one operand")
    xs = [asarray(x) for x in flat_operands]
    if any(x.shape != xs[0].shape for x in xs):
        raise TypeError(
            "reduce: operands must have the same shape, got " + ", ".join(str(x.shape) for x in xs)
        )
    inits = []
    for x, init in zip(xs, flat_inits):
        init = asarray(init, x.dtype) if dtypes.is_python_scalar(init) else asarray(init)
        if init.shape != () or init.dtype != x.dtype:
            raise TypeError(
                f"reduce: init_values must be scalars of the operands' dtypes, got "
                f"{init.aval.str_short()} for an operand of dtype {x.dtype.name}"
            )
        inits.append(init)
    dims = canonical_axes(dimensions, xs[0].ndim, "reduce")
    if not dims:  # no element meets another, nor an init value
        return tree_util.tree_unflatten(tree, xs)
    primitive = _monoid_of(computation, xs[0].dtype, tree) if len(xs) == 1 else None
    if primitive is not None:
        (x,), (init,) = xs, inits
        reduced = _MONOID_REDUCERS[primitive](x, dims)
        if not _is_identity(primitive, init):
            reduced = primitive.bind(reduced, init)
        return tree_util.tree_unflatten(tree, [reduced])
    return tree_util.tree_unflatten(tree, _reduce_by_halves(xs, inits, computation, dims, tree))


def _reduce_by_halves(xs: list, inits: list, computation: Callable, dims, tree) -> list:
    """A general reduction: along each dimension the operands' two halves are combined by
    `computation` until one element is left, and the init values are combined with the result
    once (with no element at all, the result is the init values)."""

    def combine(a: list, b: list) -> list:
        out = tree_util.tree_leaves(
            computation(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        )
        out = [asarray(o) for o in out]
        if [(o.shape, o.dtype) for o in out] != [(x.shape, x.dtype) for x in a]:
            expected = ", ".join(x.dtype.name for x in a)
            got = ", ".join(
                o.dtype.name if o.shape == a[0].shape else "a reshaped value" for o in out
            )
            raise TypeError(
                f"reduce: the computation must return one value of each operand's dtype "
                f"({expected}), elementwise; got ({got})"
            )
        return out

    out_shape = tuple(s for d, s in enumerate(xs[0].shape) if d not in dims)
    inits = [shapes.broadcast_in_dim(init, out_shape, ()) for init in inits]
    if any(xs[0].shape[d] == 0 for d in dims):
        return inits
    for axis in sorted(dims, reverse=True):
        while xs[0].shape[axis] > 1:
            size = xs[0].shape[axis]
            half = size // 2
            low = [shapes.slice_in_dim(x, 0, half, axis=axis) for x in xs]
            high = [shapes.slice_in_dim(x, half, 2 * half, axis=axis) for x in xs]
            paired = combine(low, high)
            if size % 2:
                paired = [
                    shapes.concatenate([p, shapes.slice_in_dim(x, size - 1, size, axis=axis)], axis)
                    for p, x in zip(paired, xs)
                ]
            xs = paired
        xs = [shapes.squeeze(x, (axis,)) for x in xs]
    return combine(inits, xs)


def _monoid_of(computation: Callable, dtype: np.dtype, tree) -> Primitive | None:
    """The reduction primitive `computation` is, on one operand of `dtype` in pytree `tree`;
    None for any other computation."""
    from funcgrad.interpreters.staging import trace_to_jaxpr

    def on_leaves(a, b):
        return computation(tree_util.tree_unflatten(tree, [a]), tree_util.tree_unflatten(tree, [b]))

    scalar = ShapedArray((), dtype)
    closed, out_tree = trace_to_jaxpr(on_leaves, [scalar, scalar], "reduce")
    jaxpr = closed.jaxpr
    if (
        out_tree == tree
        and len(jaxpr.eqns) == 1
        and jaxpr.eqns[0].primitive in _MONOID_REDUCERS
        and list(jaxpr.eqns[0].invars) == list(jaxpr.invars)
        and list(jaxpr.outvars) == list(jaxpr.eqns[0].outvars)
    ):
        return jaxpr.eqns[0].primitive
    return None


def _is_identity(primitive: Primitive, init) -> bool:
    if isinstance(init, core.Tracer):
        return False
    value = np.asarray(init)
    if primitive is elementwise.add_p:
        return bool(value == 0)
    if primitive is elementwise.mul_p:
        return bool(value == 1)
    if primitive is elementwise.and_p:
        return bool(np.all(value == ~np.zeros((), value.dtype)))
    if primitive is elementwise.or_p:
        return bool(value == 0)
    lowest = primitive is elementwise.max_p
    if dtypes.is_float(value.dtype):
        return bool(value == (-np.inf if lowest else np.inf))
    if value.dtype == dtypes.bool_:
        return bool(value == (not lowest))
    info = np.iinfo(value.dtype)
    return bool(value == (info.min if lowest else info.max))


def reduce_xor(operand, axes: Sequence[int]):
    """The exclusive or of all entries along `axes` (for booleans: the parity of the Trues),
    by halving the axes repeatedly."""
    x = asarray(operand)
    if not (dtypes.is_int(x.dtype) or x.dtype == dtypes.bool_):
        raise TypeError(f"reduce_xor does not accept dtype {x.dtype.name}")
    axes = canonical_axes(axes, x.ndim, "reduce_xor")
    for axis in sorted(axes, reverse=True):
        x = _xor_along(x, axis)
    return x


def _xor_along(x, axis: int):
    while x.shape[axis] > 1:
        n = x.shape[axis]
        half = n // 2
        paired = elementwise.bitwise_xor(
            shapes.slice_in_dim(x, 0, half, axis=axis),
            shapes.slice_in_dim(x, half, 2 * half, axis=axis),
        )
        if n % 2:
            paired = shapes.concatenate([paired, shapes.slice_in_dim(x, n - 1, n, axis=axis)], axis)
        x = paired
    if x.shape[axis] == 0:
        return shapes.full(x.shape[:axis] + x.shape[axis + 1 :], 0, x.dtype)
    return shapes.squeeze(x, (axis,))


# ---------------------------------------------------------------------------------------------
# Composed from other families


def clz(x):
    """The number of leading zero bits of integers."""
    x = asarray(x)
    if not dtypes.is_int(x.dtype):
        raise TypeError(f"clz does not accept dtype {x.dtype.name}; it takes integer arrays")
    # Smearing the highest set bit into every lower position leaves popcount = width - clz.
    smeared = x
    shift = 1
    while shift < x.dtype.itemsize * 8:
        smeared = elementwise.bitwise_or(
            smeared, elementwise.shift_right_logical(smeared, shapes.full((), shift, x.dtype))
        )
        shift *= 2
    width = shapes.full((), x.dtype.itemsize * 8, x.dtype)
    return elementwise.sub(width, elementwise.population_count(smeared))


def _top_k_along(operand, k: int, dimension: int, largest: bool):
    x = asarray(operand)
    dimension = canonical_axes((dimension,), x.ndim, "approx_max_k")[0]
    last = x.ndim - 1
    perm = [d for d in range(x.ndim) if d != dimension] + [dimension]
    moved = shapes.transpose(x, tuple(perm))
    rank = moved
    if dtypes.is_float(x.dtype):
        # These searches compare -0.0 and 0.0 as equal (the lower index first), where top_k's
        # total order puts 0.0 first.
        zero = shapes.full_like(moved, 0)
        rank = elementwise.select(elementwise.eq(moved, zero), zero, moved)
    if not largest:
        # Negation reverses floats; bitwise not reverses integers without overflowing.
        flip = elementwise.neg if dtypes.is_float(x.dtype) else elementwise.bitwise_not
        rank = flip(rank)
    values, indices = top_k(rank, k)
    if moved.size:  # else the outputs are empty
        values = gather_along_axis(moved, indices, last, unique_indices=True)
    inverse = tuple(int(i) for i in np.argsort(perm))
    if dimension != last:
        values, indices = shapes.transpose(values, inverse), shapes.transpose(indices, inverse)
    return values, indices


def approx_max_k(
    operand,
    k: int,
    reduction_dimension: int = -1,
    recall_target: float = 0.95,
    reduction_input_size_override: int = -1,
    aggregate_to_topk: bool = True,
):
    """The k largest entries along reduction_dimension and their indices: the exact top k,
    which meets any recall target."""
    return _top_k_along(operand, k, reduction_dimension, largest=True)


def approx_min_k(
    operand,
    k: int,
    reduction_dimension: int = -1,
    recall_target: float = 0.95,
    reduction_input_size_override: int = -1,
    aggregate_to_topk: bool = True,
):
    """The k smallest entries along reduction_dimension and their indices (exactly)."""
    return _top_k_along(operand, k, reduction_dimension, largest=False)


def broadcast_shapes(*shapes_: Sequence[int]) -> tuple[int, ...]:
    """NumPy's broadcasting of shapes."""
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes_)))
    except ValueError:
        raise ValueError(
            f"broadcast_shapes: incompatible shapes {[tuple(s) for s in shapes_]}"
        ) from None


def split(operand, sizes: Sequence[int], axis: int = 0) -> list:
    """operand cut along axis into consecutive pieces of the given sizes."""
    x = asarray(operand)
    axis = canonical_axes((axis,), x.ndim, "split")[0]
    sizes = [int(s) for s in sizes]
    if sum(sizes) != x.shape[axis] or any(s < 0 for s in sizes):
        raise ValueError(
            f"split: sizes {sizes} must be non-negative and add up to the size "
            f"{x.shape[axis]} of axis {axis} of shape {x.shape}"
        )
    starts = np.cumsum([0] + sizes)
    return [shapes.slice_in_dim(x, int(a), int(b), axis=axis) for a, b in zip(starts, starts[1:])]


def stack(operands: Sequence, axis: int = 0):
    """The operands (of one shape) joined along a new axis."""
    operands = [asarray(x) for x in operands]
    if not operands:
        raise ValueError("stack: needs at least one operand")
    axis = canonical_axes((axis,), operands[0].ndim + 1, "stack")[0]
    return shapes.concatenate([shapes.expand_dims(x, (axis,)) for x in operands], axis)


def unstack(x, axis: int = 0) -> tuple:
    """The slices of x along axis."""
    x = asarray(x)
    axis = canonical_axes((axis,), x.ndim, "unstack")[0]
    return tuple(shapes.index_in_dim(x, i, axis, keepdims=False) for i in range(x.shape[axis]))


def tile(operand, reps: Sequence[int]):
    """operand repeated reps[i] times along axis i (as many reps as axes)."""
    x = asarray(operand)
    reps = tuple(int(r) for r in reps)
    if len(reps) != x.ndim:
        raise ValueError(f"tile: needs one repetition per axis of shape {x.shape}, got {reps}")
    # Broadcast to (r0, d0, r1, d1, ...), then merge each pair.
    interleaved = tuple(v for pair in zip(reps, x.shape) for v in pair)
    spread = shapes.broadcast_in_dim(x, interleaved, tuple(range(1, 2 * x.ndim, 2)))
    return shapes.reshape(spread, tuple(r * d for r, d in zip(reps, x.shape)))


def empty(shape: Sequence[int], dtype, *, out_sharding=None):
    """An array of shape and dtype whose values do not matter (zeros)."""
    out = shapes.full(tuple(shape), 0, dtypes.canonicalize(dtype))
    return placed(out, "empty", out_sharding=out_sharding)


def optimization_barrier(operand, /):
    """operand unchanged: funcgrad's compiler does not move computations across calls."""
    return tree_util.tree_map(asarray, operand)


def scatter_sub(
    operand,
    scatter_indices,
    updates,
    dimension_numbers,
    *,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    mode=None,
):
    """scatter_add of the negated updates."""
    return scatter_add(
        operand,
        scatter_indices,
        elementwise.neg(asarray(updates)),
        dimension_numbers,
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
        mode=mode,
    )
