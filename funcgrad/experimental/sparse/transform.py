"""sparsify: run a function written for dense arrays on BCOO arguments.

`sparsify(f)` stages `f` with every BCOO argument standing in as a dense array of its shape and
dtype, then evaluates the program with the BCOO values themselves: an equation whose operands
are all dense binds as usual (so outer transformations see it), and one with a sparse operand
goes to that primitive's sparse rule, which never forms the dense array. A primitive without a
sparse rule raises an error naming it. The staged program depends only on the arguments' tree
structure, shapes and dtypes, so it is kept per structure and traced once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from funcgrad import core, tree_util
from funcgrad.experimental.sparse.bcoo import BCOO, bcoo_reduce_sum, bcoo_transpose
from funcgrad.experimental.sparse.bcoo_products import bcoo_dot_general
from funcgrad.experimental.sparse.bcoo_structure import (
    bcoo_broadcast_in_dim,
    bcoo_concatenate,
    bcoo_slice,
    bcoo_squeeze,
)
from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr
from funcgrad.ir import Literal, literal_value
from funcgrad.lax.base import asarray
from funcgrad.transforms.make_jaxpr import function_name

__all__ = ["sparsify"]


def _is_sparse(x) -> bool:
    return isinstance(x, BCOO)


def sparsify(f: Callable) -> Callable:
    """`f` made to accept BCOO arrays wherever it takes arrays; results that its sparse rules
    keep sparse are BCOO arrays."""

    staged = {}  # (in_tree, in_avals) -> (closed jaxpr, out_tree)

    @functools.wraps(f)
    def sparsified(*args, **kwargs):
        leaves, in_tree = tree_util.tree_flatten((args, kwargs), is_leaf=_is_sparse)
        leaves = [x if _is_sparse(x) else asarray(x) for x in leaves]
        in_avals = tuple(
            core.ShapedArray(x.shape, x.dtype) if _is_sparse(x) else abstractify(x) for x in leaves
        )
        key = (in_tree, in_avals)
        if key not in staged:

            def flat_f(*flat_args):
                call_args, call_kwargs = tree_util.tree_unflatten(in_tree, flat_args)
                return f(*call_args, **call_kwargs)

            staged[key] = trace_to_jaxpr(flat_f, list(in_avals), f"sparsify({function_name(f)})")
        closed, out_tree = staged[key]
        outs = _eval_sparse(closed.jaxpr, closed.consts, leaves, function_name(f))
        return tree_util.tree_unflatten(out_tree, outs)

    return sparsified


def _eval_sparse(jaxpr, consts, args, name: str) -> list:
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(v):
        return literal_value(v) if type(v) is Literal else env[v]

    for eqn in jaxpr.eqns:
        operands = [read(v) for v in eqn.invars]
        if any(_is_sparse(x) for x in operands):
            rule = _SPARSE_RULES.get(eqn.primitive.name)
            if rule is None:
                raise NotImplementedError(
                    f"sparsify({name}): primitive {eqn.primitive.name} has no sparse rule (at "
                    f"{eqn.source_info}); sparse rules exist for {sorted(_SPARSE_RULES)}. "
                    "Convert its sparse operand with .todense() first if the dense form is meant"
                )
            outs = [rule(*operands, **eqn.params)]
        else:
            outs = eqn.primitive.bind(*operands, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _mul(x, y):
    return y * x if _is_sparse(y) else x * y


def _add(x, y):
    return y + x if _is_sparse(y) else x + y


def _sub(x, y):
    return x - y if _is_sparse(x) else (-y) + x


def _dot_general(lhs, rhs, *, dimension_numbers, precision, preferred_element_type):
    return bcoo_dot_general(
        lhs,
        rhs,
        dimension_numbers=dimension_numbers,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def _reduce_sum(operand, *, axes):
    out = bcoo_reduce_sum(operand, axes=axes)
    return out.todense() if out.ndim == 0 else out


def _concatenate(*operands, dimension):
    if not all(_is_sparse(x) for x in operands):
        raise NotImplementedError(
            "sparsify: concatenating sparse and dense arrays is not implemented; make every "
            "operand sparse (BCOO.fromdense) or dense (.todense())"
        )
    return bcoo_concatenate(operands, dimension=dimension)


def _slice(operand, *, start_indices, limit_indices, strides):
    return bcoo_slice(
        operand, start_indices=start_indices, limit_indices=limit_indices, strides=strides
    )


def _broadcast_in_dim(operand, *, shape, broadcast_dimensions, **params):
    return bcoo_broadcast_in_dim(operand, shape=shape, broadcast_dimensions=broadcast_dimensions)


def _convert_element_type(operand, *, new_dtype, **params):
    return operand.astype(new_dtype)


_SPARSE_RULES: dict[str, Callable] = {
    "mul": _mul,
    "add": _add,
    "sub": _sub,
    "neg": lambda x: -x,
    "dot_general": _dot_general,
    "reduce_sum": _reduce_sum,
    "transpose": lambda x, *, permutation: bcoo_transpose(x, permutation=permutation),
    "convert_element_type": _convert_element_type,
    "concatenate": _concatenate,
    "slice": _slice,
    "squeeze": lambda x, *, dimensions: bcoo_squeeze(x, dimensions=dimensions),
    "broadcast_in_dim": _broadcast_in_dim,
}
