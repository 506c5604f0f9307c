"""Evaluating a function on a large batch one microbatch at a time, in a `fori_loop`, so
peak memory is that of one microbatch: `microbatch` combines the results by an
`Accumulator` (sum, mean, running mean, or concatenation back into the batch),
`micro_vmap` is a vmap evaluated in such pieces, and `micro_grad` gives per-example
gradients transformed (clipped, squared) before they are combined, with per-example values
and metrics beside them.

A batch of size n * microbatch_size is split column-major: microbatch i holds the rows i,
i + n, i + 2n, ..., so concatenation puts every row back in its place."""

from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Any

import funcgrad.numpy as fnp
from funcgrad import lax, tree_util
from funcgrad.transforms.autodiff import value_and_grad
from funcgrad.transforms.make_jaxpr import eval_shape
from funcgrad.transforms.vmap import vmap

__all__ = [
    "AccumulationType",
    "Accumulator",
    "micro_grad",
    "micro_vmap",
    "microbatch",
    "reshape_batch_axis",
]

IndividualOutputs = collections.namedtuple("Aux", ["values", "metrics", "aux"])


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How the results x_0, ..., x_{n-1} of the microbatches combine: `carry = init(shape of
    x_0)`, `carry = update(carry, x_i, i)` for each i, `finalize(carry)`; `aggregate` reduces
    the results of one microbatch's rows (stacked on axis 0) the same way, for `micro_vmap`."""

    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], Any]
    finalize: Callable[[Any], Any]
    aggregate: Callable[[Any], Any]


class AccumulationType(enum.Enum):
    MEAN = enum.auto()  # the average of the microbatches' results
    SUM = enum.auto()
    RUNNING_MEAN = enum.auto()  # the average of those run (num_real_microbatches of them)
    CONCAT = enum.auto()  # the results joined on axis 0, rows in the batch's order


def reshape_batch_axis(tree: Any, microbatch_size: int, axis: int = 0) -> Any:
    """Each leaf's batch axis split into (number of microbatches, microbatch_size), in
    column-major order (microbatch i takes every n-th row from row i)."""

    def split(x):
        x = fnp.asarray(x)
        shape = (*x.shape[:axis], -1, microbatch_size, *x.shape[axis + 1 :])
        return fnp.reshape(x, shape, order="F")

    return tree_util.tree_map(split, tree)


def _leafwise(accumulator: Accumulator) -> Accumulator:
    """An accumulator of arrays applied to each leaf of a tree of results."""
    tree_map = tree_util.tree_map
    return Accumulator(
        lambda shapes: tree_map(accumulator.init, shapes),
        lambda carry, value, i: tree_map(lambda c, v: accumulator.update(c, v, i), carry, value),
        lambda carry: tree_map(accumulator.finalize, carry),
        lambda values: tree_map(accumulator.aggregate, values),
    )


def _zeros(shape_dtype, floating_only: bool = False):
    if floating_only and not fnp.issubdtype(shape_dtype.dtype, fnp.floating):
        raise ValueError(
            "microbatch: MEAN and RUNNING_MEAN accumulate floating-point results, got one of "
            f"dtype {shape_dtype.dtype}"
        )
    return fnp.zeros(shape_dtype.shape, shape_dtype.dtype)


def _count_must_be_positive(num_microbatches: int) -> None:
    if num_microbatches <= 0:
        raise ValueError(
            f"microbatch: the number of microbatches must be positive, got {num_microbatches}"
        )


def _sum() -> Accumulator:
    return _leafwise(
        Accumulator(
            _zeros, lambda carry, value, i: carry + value, lambda c: c, lambda v: fnp.sum(v, 0)
        )
    )


def _mean(num_microbatches: int) -> Accumulator:
    _count_must_be_positive(num_microbatches)
    return _leafwise(
        Accumulator(
            lambda s: _zeros(s, floating_only=True),
            lambda carry, value, i: carry + value,
            lambda carry: carry / num_microbatches,
            lambda values: fnp.mean(values, 0),
        )
    )


def _running_mean() -> Accumulator:
    def update(carry, value, i):
        index = fnp.asarray(i, carry.dtype)  # the weights in the results' precision
        kept = index / (index + 1)
        return carry * kept + value * (1 - kept)

    return _leafwise(
        Accumulator(
            lambda s: _zeros(s, floating_only=True),
            update,
            lambda c: c,
            lambda values: fnp.mean(values, 0),
        )
    )


def _concat(num_microbatches: int) -> Accumulator:
    _count_must_be_positive(num_microbatches)

    def init(shape_dtype):
        return fnp.zeros((num_microbatches, *shape_dtype.shape), shape_dtype.dtype)

    def finalize(carry):
        return fnp.reshape(carry, (-1, *carry.shape[2:]), order="F")

    return _leafwise(
        Accumulator(init, lambda carry, value, i: carry.at[i].set(value), finalize, lambda v: v)
    )


def _accumulator_tree(accumulator: Any, num_microbatches: int) -> Accumulator:
    """One accumulator for a tree of results from a prefix tree of accumulators and
    AccumulationTypes."""

    def resolve(spec):
        if isinstance(spec, Accumulator):
            return spec
        if spec is AccumulationType.SUM:
            return _sum()
        if spec is AccumulationType.MEAN:
            return _mean(num_microbatches)
        if spec is AccumulationType.RUNNING_MEAN:
            return _running_mean()
        if spec is AccumulationType.CONCAT:
            return _concat(num_microbatches)
        raise ValueError(
            f"microbatch: an accumulator is an Accumulator or an AccumulationType, got {spec!r}"
        )

    def is_spec(x):
        return isinstance(x, (Accumulator, AccumulationType))

    specs = tree_util.tree_map(resolve, accumulator, is_leaf=is_spec)

    def each(method, *trees):
        return tree_util.tree_map(
            lambda acc, *parts: getattr(acc, method)(*parts), specs, *trees, is_leaf=is_spec
        )

    return Accumulator(
        lambda shapes: each("init", shapes),
        lambda carry, value, i: tree_util.tree_map(
            lambda acc, c, v: acc.update(c, v, i), specs, carry, value, is_leaf=is_spec
        ),
        lambda carry: each("finalize", carry),
        lambda values: each("aggregate", values),
    )


def microbatch(
    fun: Callable[..., Any],
    argnums: int | Sequence[int],
    microbatch_size: int | None,
    accumulator: Any = AccumulationType.SUM,
    *,
    argnames: str | Sequence[str] = (),
    in_axes: int | Sequence[int] = 0,
    num_real_microbatches: Any = None,
) -> Callable[..., Any]:
    """`fun` evaluated once per microbatch of the batch arguments (positions `argnums`,
    keywords `argnames`, batch axes `in_axes` in that order), its results combined by
    `accumulator` (one, or a prefix tree of them matching the results). With
    num_real_microbatches (may be traced) only that many run. microbatch_size None gives
    `fun` itself."""
    if microbatch_size is None:
        return fun
    argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    argnames = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    count = len(argnums) + len(argnames)
    in_axes = (in_axes,) * count if isinstance(in_axes, int) else tuple(in_axes)
    if len(in_axes) != count:
        raise ValueError(
            f"microbatch: in_axes has {len(in_axes)} entries for {count} batch arguments"
        )

    def microbatched(*args, **kwargs):
        args, kwargs = list(args), dict(kwargs)
        places = [(args, i) for i in argnums] + [(kwargs, name) for name in argnames]
        sizes = {
            fnp.shape(leaf)[axis]
            for (holder, key), axis in zip(places, in_axes)
            for leaf in tree_util.tree_leaves(holder[key])
        }
        if len(sizes) > 1:
            raise ValueError(
                f"microbatch: the batch arguments have batch axes of sizes {sorted(sizes)}"
            )
        (batch_size,) = sizes
        if batch_size % microbatch_size:
            raise ValueError(
                f"microbatch: the batch size {batch_size} is not a multiple of "
                f"microbatch_size={microbatch_size}"
            )
        num_microbatches = batch_size // microbatch_size
        for (holder, key), axis in zip(places, in_axes):
            holder[key] = reshape_batch_axis(holder[key], microbatch_size, axis)
        combine = _accumulator_tree(accumulator, num_microbatches)

        def run(index):
            args_i, kwargs_i = list(args), dict(kwargs)
            for (holder, key), axis in zip(places, in_axes):
                target = args_i if holder is args else kwargs_i
                target[key] = tree_util.tree_map(
                    lambda x, axis=axis: fnp.take(x, index, axis=axis), holder[key]
                )
            return fun(*args_i, **kwargs_i)

        carry = combine.init(eval_shape(run, 0))
        steps = num_microbatches if num_real_microbatches is None else num_real_microbatches
        carry = lax.fori_loop(0, steps, lambda i, c: combine.update(c, run(i), i), carry)
        return combine.finalize(carry)

    return microbatched


def micro_vmap(
    fun: Callable[..., Any],
    in_axes: int | Sequence[int | None] = 0,
    out_axes: Any = 0,
    *,
    microbatch_size: int | None = None,
    vmap_fn: Callable[..., Any] = vmap,
    accumulator: Any = AccumulationType.CONCAT,
    num_real_microbatches: Any = None,
) -> Callable[..., Any]:
    """vmap of `fun` over the batch axes `in_axes`, evaluated microbatch_size rows at a
    time; the rows' results are stacked (CONCAT, vmap's result) or reduced (SUM, MEAN) by
    `accumulator`. Keyword arguments are batched on axis 0."""
    if out_axes != 0:
        raise NotImplementedError("micro_vmap: only out_axes=0 is supported")
    in_axes = (in_axes,) if isinstance(in_axes, int) else tuple(in_axes)

    def vmapped_and_reduced(*args, kwargs):
        output = vmap_fn(fun, in_axes, out_axes)(*args, **kwargs)
        rows = fnp.shape(tree_util.tree_leaves(output)[0])[0]
        return _accumulator_tree(accumulator, rows).aggregate(output)

    pieces = microbatch(
        vmapped_and_reduced,
        argnums=tuple(i for i, axis in enumerate(in_axes) if axis is not None),
        argnames="kwargs",
        microbatch_size=microbatch_size,
        accumulator=accumulator,
        in_axes=(*(axis for axis in in_axes if axis is not None), 0),
        num_real_microbatches=num_real_microbatches,
    )
    return lambda *args, **kwargs: pieces(*args, kwargs=kwargs)


def micro_grad(
    fun: Callable[..., Any],
    has_aux: bool = False,
    argnums: int | Sequence[int] = 0,
    *,
    batch_argnums: int | Sequence[int] = 1,
    keep_batch_dim: bool = True,
    microbatch_size: int | None = None,
    accumulator: Any = AccumulationType.SUM,
    transform_fn: Callable[[Any], Any] = lambda grads: grads,
    metrics_fn: Callable[[Any], Any] = lambda grads: None,
    num_real_microbatches: Any = None,
) -> Callable[..., Any]:
    """Per-example gradients of `fun` with respect to `argnums`, each passed through
    `transform_fn` (clipping, squaring) and then combined over the batch by `accumulator`.
    Returns (combined, Aux(values, metrics, aux)) with the per-example loss values,
    metrics_fn of each example's gradient and fun's aux. With keep_batch_dim, `fun` sees
    each example with a batch axis of 1."""
    batch_argnums = (batch_argnums,) if isinstance(batch_argnums, int) else tuple(batch_argnums)
    with_aux = fun if has_aux else (lambda *a, **k: (fun(*a, **k), None))
    value_and_grads = value_and_grad(with_aux, argnums, has_aux=True)

    def per_example(*args, **kwargs):
        (value, aux), grads = value_and_grads(*args, **kwargs)
        return transform_fn(grads), IndividualOutputs(value, metrics_fn(grads), aux)

    in_axes = [None] * (max(batch_argnums) + 1)
    for i in batch_argnums:
        in_axes[i] = 0
    mapped = micro_vmap(
        per_example,
        in_axes=in_axes,
        accumulator=(accumulator, AccumulationType.CONCAT),
        microbatch_size=microbatch_size,
        num_real_microbatches=num_real_microbatches,
    )
    if not keep_batch_dim:
        return mapped

    def with_batch_axis(*args, **kwargs):
        args = list(args)
        for i in batch_argnums:
            args[i] = tree_util.tree_map(lambda x: fnp.expand_dims(x, 1), args[i])
        return mapped(*args, **kwargs)

    return with_batch_axis
