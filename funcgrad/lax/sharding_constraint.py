"""with_sharding_constraint: a layout asked of a value, eagerly or inside a program.

funcgrad has no partitioner, so a constraint moves no data. Eagerly it records the layout on
the array (`sharding.laid_out`, checked against its shape). Staged, it is an equation,
`sharding_constraint`, that computes the identity and holds the sharding, so that a jitted
function's results made by one are laid out as it says when the call returns
(`result_layouts`), as a partitioner would lay them out. The compiler drops the equation
(`compiler.passes`' simplification); the NumPy reference runs its identity.

Derivatives keep the constraint: the tangent is constrained as the primal, and the cotangent
as well (transpose). vmap constrains the batched value with its batch dimension split over no
mesh axis. Inside shard_map (or pmap) each device holds its own block, so a constraint there
may not name the axes it maps over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from funcgrad import core, tree_util
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters.ad import Zero
from funcgrad.interpreters.parallel import AxisEnvTrace
from funcgrad.ir import Jaxpr, JaxprEqn, Var
from funcgrad.lax.base import asarray
from funcgrad.sharding import (
    NamedSharding,
    PartitionSpec,
    Sharding,
    broadcast_prefix,
    laid_out,
    resolve,
)

__all__ = ["with_sharding_constraint"]

sharding_constraint_p = Primitive("sharding_constraint")


@sharding_constraint_p.def_abstract_eval
def _sharding_constraint_abstract_eval(x: ShapedArray, *, sharding: Sharding) -> ShapedArray:
    if isinstance(sharding, NamedSharding):
        sharding.shard_shape(x.shape)  # (checks that the spec fits the shape)
    return ShapedArray(x.shape, x.dtype)


@sharding_constraint_p.def_impl
def _sharding_constraint_impl(x, *, sharding: Sharding):
    return x


def _constrained(x, sharding: Sharding):
    """`x` constrained: laid out when concrete, an equation when traced."""
    if isinstance(x, core.Tracer):
        return sharding_constraint_p.bind(x, sharding=sharding)
    return laid_out(asarray(x), sharding)


@sharding_constraint_p.def_jvp
def _sharding_constraint_jvp(primals, tangents, *, sharding: Sharding):
    # (as a linear primitive's, with the primal laid out when it is concrete)
    (x,), (t,) = primals, tangents
    out = _constrained(x, sharding)
    return out, Zero.like(out) if type(t) is Zero else _constrained(t, sharding)


@sharding_constraint_p.def_transpose
def _sharding_constraint_transpose(ct, x, *, sharding: Sharding):
    return [_constrained(ct, sharding)]


def _with_batch_dimension(sharding: Sharding, rank: int, dim: int) -> Sharding:
    """`sharding` for the value with a batch dimension at `dim` (of `rank` dimensions with
    it), split over no mesh axis."""
    if not isinstance(sharding, NamedSharding):
        return sharding
    entries = list(sharding.spec) + [None] * (rank - 1 - len(sharding.spec))
    entries.insert(dim, None)
    return NamedSharding(sharding.mesh, PartitionSpec(*entries))


@sharding_constraint_p.def_batch
def _sharding_constraint_batch(values, dims, *, sharding: Sharding):
    (x,), (dim,) = values, dims
    rank = core.get_aval(x).ndim
    return _constrained(x, _with_batch_dimension(sharding, rank, dim)), dim


def _mapped_axis_names() -> set:
    """The axis names that the pmap or shard_map being staged maps over."""
    names, trace = set(), core.current_trace()
    while trace is not None:
        if isinstance(trace, AxisEnvTrace):
            names.add(trace.axis_name)
        trace = trace.parent
    return names


def _check_unmapped(sharding: Sharding, what: str) -> None:
    if not isinstance(sharding, NamedSharding):
        return
    named = {name for entry in sharding._names for name in entry}
    mapped = sorted(named & _mapped_axis_names(), key=str)
    if mapped:
        raise ValueError(
            f"{what}: {sharding} names mesh axis {', '.join(map(repr, mapped))}, which the "
            "shard_map or pmap under way maps over: each device holds its own block there, "
            "so a layout may name only the mesh axes it does not map over"
        )


def with_sharding_constraint(x: Any, shardings: Any) -> Any:
    """`x` constrained to be laid out as `shardings` say (a sharding, a PartitionSpec over the
    current mesh, or a tree prefix of them): checked against the shapes and recorded on
    concrete arrays; inside jit, on the results the constrained values become."""
    what = "with_sharding_constraint"
    leaves, tree = tree_util.tree_flatten(x)
    per_leaf = broadcast_prefix(
        shardings,
        x,
        lambda s: s is None or isinstance(s, Sharding | PartitionSpec),
        what,
        "sharding",
        "its operand",
    )
    outs = []
    for leaf, sharding in zip(leaves, per_leaf):
        if sharding is None:
            raise ValueError(
                f"{what}: a sharding is None; give a sharding or a PartitionSpec for every "
                "value (PartitionSpec() for one whole on every device)"
            )
        sharding = resolve(sharding, what)
        _check_unmapped(sharding, what)
        outs.append(_constrained(leaf, sharding))
    return tree_util.tree_unflatten(tree, outs)


def placed(x: Any, what: str, device: Any = None, out_sharding: Any = None) -> Any:
    """The result `x` (an array or a pytree of them) of `what`, where its `device=` or
    `out_sharding=` argument puts it: placed as `device_put` places arrays, or laid out as
    `with_sharding_constraint` lays them out (`out_sharding` a NamedSharding, or a
    PartitionSpec over the current mesh)."""
    if device is not None:
        if out_sharding is not None:
            raise ValueError(
                f"{what}: give device or out_sharding, not both; got device={device!r} and "
                f"out_sharding={out_sharding!r}"
            )
        from funcgrad.array import device_put

        return device_put(x, device)
    if out_sharding is None:
        return x
    if not isinstance(out_sharding, NamedSharding | PartitionSpec):
        raise TypeError(
            f"{what}: out_sharding must be a NamedSharding or a PartitionSpec, got "
            f"{type(out_sharding).__name__} {out_sharding!r}; place a result on one device with "
            "device_put"
        )
    sharding = resolve(out_sharding, what)
    _check_unmapped(sharding, what)
    return tree_util.tree_map(lambda leaf: _constrained(leaf, sharding), x)


# ---------------------------------------------------------------------------------------------
# The layouts of a program's results

# rule(eqn, k) -> the layout of result k of an equation of the primitive, or None.
result_layout_rules: dict[Primitive, Callable[[JaxprEqn, int], Sharding | None]] = {}


def result_layouts(jaxpr: Jaxpr) -> tuple[Sharding | None, ...] | None:
    """Per result of `jaxpr`, the layout of the equation that makes it (a constraint, or a
    call or map holding one: `result_layout_rules`); None where no layout is asked for, and
    instead of the tuple where none is asked for any result."""
    made_by = {v: (eqn, k) for eqn in jaxpr.eqns for k, v in enumerate(eqn.outvars)}
    layouts = []
    for v in jaxpr.outvars:
        eqn, k = made_by.get(v, (None, 0)) if type(v) is Var else (None, 0)
        rule = None if eqn is None else result_layout_rules.get(eqn.primitive)
        layouts.append(None if rule is None else rule(eqn, k))
    return tuple(layouts) if any(s is not None for s in layouts) else None


result_layout_rules[sharding_constraint_p] = lambda eqn, k: eqn.params["sharding"]
