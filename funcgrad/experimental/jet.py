"""jet: Taylor-mode higher-order differentiation (`funcgrad.interpreters.jet` propagates it).

Where nested jvps give the K-th derivative of f along a path at a cost that doubles with each
order, a jet carries the path's first K derivatives through each operation at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from funcgrad import core, dtypes, tree_util
from funcgrad.interpreters.ad import zeros_like_aval
from funcgrad.interpreters.jet import JetTrace, JetTracer
from funcgrad.transforms.autodiff import _as_primal, _output_leaves
from funcgrad.transforms.make_jaxpr import function_name

__all__ = ["jet"]


def jet(fun: Callable, primals: Sequence, series: Sequence, factorial_scaled: bool = True):
    """The value and first K derivatives of t -> fun(x(t)) at t = 0, for the path
    x(t) = primals + series[0] t + series[1] t^2 / 2! + ... + series[K-1] t^K / K!.

    `primals` holds one argument of `fun` per entry (an array, or a pytree of arrays), and
    `series` one sequence of K terms per argument, each with its argument's structure, shapes
    and dtypes. Returns `(fun(*primals), terms)`: `terms` has the structure of the output,
    with a list of its K derivatives in place of each array. With `factorial_scaled=False` the
    terms given and returned are the Taylor coefficients instead (the derivatives over k!).
    Integer outputs and outputs constant along the path have zero terms.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(series, (tuple, list)):
        raise TypeError(
            "jet takes primals and series as tuples or lists with one entry per argument, got "
            f"{type(primals).__name__} and {type(series).__name__}"
        )
    if len(primals) != len(series):
        raise ValueError(
            f"jet needs one series per primal argument; got {len(primals)} primals and "
            f"{len(series)} series"
        )
    orders = {len(terms) for terms in series}
    if len(orders) > 1:
        raise ValueError(
            f"jet terms have inconsistent lengths for different arguments: {sorted(orders)}"
        )
    order = orders.pop() if orders else 0
    primal_leaves, in_tree = tree_util.tree_flatten(tuple(primals))
    primal_leaves = [_as_primal(x) for x in primal_leaves]
    leaf_terms = _terms_per_leaf(primals, series, primal_leaves, order)
    if not factorial_scaled:
        leaf_terms = [[t * math.factorial(k) for k, t in enumerate(ts, 1)] for ts in leaf_terms]

    trace = JetTrace(core.current_trace(), order, {}, f"jet({function_name(fun)})")
    with core.trace_lifetime(trace):
        in_values = [
            JetTracer(trace, x, ts) if order else x for x, ts in zip(primal_leaves, leaf_terms)
        ]
        with core.set_current_trace(trace):
            out = fun(*tree_util.tree_unflatten(in_tree, in_values))
        out_leaves, out_tree = _output_leaves(out, "jet")
        paths = [trace.path_of(x) for x in out_leaves]
        del in_values, out, out_leaves
    trace.memo.clear()
    primals_out = [p for p, _ in paths]
    terms_out = [
        [zeros_like_aval(core.get_aval(p))] * order if ts is None else list(ts) for p, ts in paths
    ]
    if not factorial_scaled:
        terms_out = [
            [
                t / math.factorial(k) if dtypes.is_inexact(t.dtype) else t
                for k, t in enumerate(ts, 1)
            ]
            for ts in terms_out
        ]
    return (
        tree_util.tree_unflatten(out_tree, primals_out),
        tree_util.tree_unflatten(out_tree, terms_out),
    )


def _terms_per_leaf(primals: Sequence, series: Sequence, primal_leaves: list, order: int) -> list:
    """The K terms of each primal leaf, checked against its shape and dtype."""
    per_leaf: list[list] = []
    for position, (primal, terms) in enumerate(zip(primals, series)):
        tree = tree_util.tree_structure(primal)
        flat_terms = []
        for k, term in enumerate(terms, 1):
            leaves, term_tree = tree_util.tree_flatten(term)
            if term_tree != tree:
                raise TypeError(
                    f"term {k} of argument {position} of jet must have the argument's "
                    f"structure {tree}; got {term_tree}"
                )
            flat_terms.append(leaves)
        for j in range(tree.num_leaves):
            x = primal_leaves[len(per_leaf)]
            if not dtypes.is_inexact(x.dtype):
                raise TypeError(
                    f"jet differentiates along floating-point or complex arguments; argument "
                    f"{position} has a {x.aval.str_short()} leaf (make it a float array)"
                )
            per_leaf.append(
                [_checked_term(ts[j], x, position, k) for k, ts in enumerate(flat_terms, 1)]
            )
    return per_leaf


def _checked_term(term, primal, position: int, k: int):
    term = _as_primal(term)
    if term.aval.weak_type and term.dtype != primal.dtype and term.shape == primal.shape:
        term = term.astype(primal.dtype)  # a Python scalar takes the argument's dtype
    if term.shape != primal.shape or term.dtype != primal.dtype:
        raise TypeError(
            f"term {k} of argument {position} of jet must have the argument's shape and dtype "
            f"{primal.aval.str_short()}; got {term.aval.str_short()}"
        )
    return term
