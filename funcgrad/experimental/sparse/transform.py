"""sparsify: run a function written for dense arrays on BCOO and BCSR arguments.

`sparsify(f)` stages `f` with every sparse argument standing in as a dense array of its shape
and dtype, then evaluates the program with the sparse values themselves (`_interpreter`): an
equation whose operands are all dense binds as usual, and one with a sparse operand goes to
that primitive's sparse rule (`_rules`, `_program_rules`, `_custom_rules`), which never forms
the dense array. The staged program depends only on the arguments' tree structure, shapes and
dtypes, so it is kept per structure and traced once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from funcgrad import core, tree_util
from funcgrad.experimental.sparse import _custom_rules, _program_rules  # noqa: F401 (rules)
from funcgrad.experimental.sparse._interpreter import eval_sparse, is_sparse
from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.transforms.make_jaxpr import function_name

__all__ = ["sparsify"]


def sparsify(f: Callable) -> Callable:
    """`f` made to accept BCOO and BCSR arrays wherever it takes arrays; results that its
    sparse rules keep sparse are sparse arrays."""

    staged = {}  # (in_tree, in_avals) -> (closed jaxpr, out_tree)

    @functools.wraps(f)
    def sparsified(*args, **kwargs):
        leaves, in_tree = tree_util.tree_flatten((args, kwargs), is_leaf=is_sparse)
        leaves = [x if is_sparse(x) else asarray(x) for x in leaves]
        in_avals = tuple(
            core.ShapedArray(x.shape, x.dtype) if is_sparse(x) else abstractify(x) for x in leaves
        )
        key = (in_tree, in_avals)
        if key not in staged:

            def flat_f(*flat_args):
                call_args, call_kwargs = tree_util.tree_unflatten(in_tree, flat_args)
                return f(*call_args, **call_kwargs)

            staged[key] = trace_to_jaxpr(flat_f, list(in_avals), f"sparsify({function_name(f)})")
        closed, out_tree = staged[key]
        outs = eval_sparse(closed.jaxpr, closed.consts, leaves, function_name(f))
        return tree_util.tree_unflatten(out_tree, outs)

    return sparsified
