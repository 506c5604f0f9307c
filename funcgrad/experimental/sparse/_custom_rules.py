"""The sparse rules of custom_jvp and custom_vjp functions (nn.relu among them).

The function's program is made sparse like any other and bound as the same primitive, so its
value is computed sparsely and differentiation still meets the user's rule. The rule is written
for dense arrays: it is applied to the dense forms of the sparse operands, and its results are
read back at the stored elements (a tangent at the result's indices, a cotangent at the
operand's), so derivatives hold the dense arrays' memory while they are computed. Derivatives
of the stored data follow from those of the dense forms: the dense form of a BCOO array is the
sum of its stored elements at their indices, so a tangent of the result is read at the first
copy of each index, and a cotangent of an operand at every copy.

Values the function closes over are passed as leading operands; the rules keep the concrete
ones to compute the value again, and refuse traced ones, which the rules would have to carry
to another trace.
"""

from __future__ import annotations

import numpy as np

from funcgrad import core, tree_util
from funcgrad import numpy as fnp
from funcgrad.experimental.sparse import _convert
from funcgrad.experimental.sparse._interpreter import (
    PROGRAM_RULES,
    flattened,
    hoisted,
    is_sparse,
    sparse_program,
)
from funcgrad.experimental.sparse.bcoo import BCOO, bcoo_extract
from funcgrad.experimental.sparse.bcsr import BCSR
from funcgrad.interpreters.ad import Zero, float0, tangent_aval
from funcgrad.ir import eval_jaxpr
from funcgrad.transforms.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p


class _SparseCall:
    """A custom-derivative call on sparse operands: the function's program made sparse (over
    the leaves of its closed-over values and arguments), and how to move between the
    arguments' leaves and the dense values the user's rule takes. It holds no traced values:
    the rules built on it live in programs that outlast the trace."""

    def __init__(self, consts, args, call_jaxpr, name: str):
        leaves, in_tree, in_avals = flattened([*consts, *args])
        program, self.out_tree = sparse_program(call_jaxpr, in_tree, in_avals, name)
        self.program, program_consts = hoisted(program)
        n_const_leaves = len(leaves) - len(tree_util.tree_leaves(list(args)))
        self.consts = [*program_consts, *leaves[:n_const_leaves]]
        self.args_tree = tree_util.tree_structure(list(args))
        self.arg_avals = [core.get_aval(x) for x in leaves[n_const_leaves:]]
        self.name = name

    def value(self, arg_leaves: list) -> list:
        """The function's outputs (leaves) on the arguments' leaves, computed sparsely."""
        return eval_jaxpr(self.program.jaxpr, [], *self.consts, *arg_leaves)

    def arguments(self, arg_leaves: list) -> list:
        return tree_util.tree_unflatten(self.args_tree, arg_leaves)

    def outputs(self, out_leaves: list) -> list:
        return tree_util.tree_unflatten(self.out_tree, out_leaves)

    def shapes(self, of) -> list:
        """The arguments' or outputs' (`of`) structure, with placeholders for leaves."""
        avals = self.arg_avals if of == "arguments" else self.program.out_avals
        placeholders = [core.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
        return getattr(self, of)(placeholders)


def _bind(primitive, operands, call_jaxpr, num_consts: int, param: str, sparse_rule, user_rule):
    """`primitive` bound on the leaves of `operands`, with the function's program made sparse
    and the user's rule (the parameter `param`) wrapped in `sparse_rule`."""
    name = user_rule.__name__
    consts, args = operands[:num_consts], operands[num_consts:]
    if any(isinstance(x, core.Tracer) for x in tree_util.tree_leaves(list(consts))):
        raise NotImplementedError(
            f"sparsify: the custom-derivative function {name} closes over a traced value "
            "(one computed from the sparsified function's arguments); pass it to the "
            "function as an argument instead"
        )
    call = _SparseCall(consts, args, call_jaxpr, name)
    outs = primitive.bind(
        *call.consts,
        *tree_util.tree_leaves(list(args)),
        call_jaxpr=call.program,
        num_consts=len(call.consts),
        **{param: sparse_rule(call, user_rule)},
    )
    return call.outputs(outs)


def _dense_leaves(values) -> list:
    """The dense forms of `values` (sparse or dense), flattened as the user's rule takes them."""
    return tree_util.tree_leaves([x.todense() if is_sparse(x) else x for x in values])


def _zero_data(mat):
    return fnp.zeros(mat.data.shape, mat.data.dtype)


def _dense_tangent(mat, data):
    """The dense form of the tangent (or cotangent) of the sparse `mat` whose data's is
    `data`: float0 zeros where the values are integers."""
    if data.dtype == float0:
        return np.zeros(mat.shape, float0)
    return _with_data(mat, data).todense()


def _with_data(mat, data):
    """The sparse array `mat` holding `data` in place of its stored values."""
    if isinstance(mat, BCSR):
        return BCSR((data, mat.indices, mat.indptr), shape=mat.shape)
    return BCOO((data, mat.indices), shape=mat.shape)


def _as_bcoo(mat) -> BCOO:
    return mat.to_bcoo() if isinstance(mat, BCSR) else mat


def _index_tangents(mat) -> list:
    """The (zero) tangents of a sparse array's integer leaves."""
    return [Zero(tangent_aval(core.get_aval(x))) for x in tree_util.tree_leaves(mat)[1:]]


def _tangent_values(values, tangent_leaves: list) -> list:
    """Each value's tangent in dense form, from the tangents of its leaves (a sparse value's
    tangent is its data's tangent at its indices)."""
    tangents = tree_util.tree_unflatten(tree_util.tree_structure(list(values)), tangent_leaves)
    dense = []
    for x, t in zip(values, tangents):
        dense.append(_dense_tangent(x, tree_util.tree_leaves(t)[0]) if is_sparse(x) else t)
    return tree_util.tree_leaves(dense)


class _SparseJVPRule:
    """A custom_jvp rule on the leaves of sparse operands: the user's rule on the dense forms,
    its tangents read at the stored elements of the sparse results."""

    def __init__(self, call: _SparseCall, rule):
        self.call, self.rule = call, rule
        self.__name__ = getattr(rule, "__name__", call.name)

    def __call__(self, primals: list, tangents: list) -> tuple[list, list]:
        args = self.call.arguments(primals)
        out_leaves = self.call.value(primals)
        _, dense_tangents = self.rule(_dense_leaves(args), _tangent_values(args, tangents))
        outs = self.call.outputs(out_leaves)
        tangent_outs = tree_util.tree_unflatten(
            tree_util.tree_structure([0] * len(outs)), list(dense_tangents)
        )
        flat = []
        for out, tangent in zip(outs, tangent_outs):
            if not is_sparse(out):
                flat.append(tangent)
                continue
            if type(tangent) is Zero:
                data = Zero(tangent_aval(core.get_aval(out.data)))
            else:
                data = bcoo_extract(_as_bcoo(out), tangent, assume_unique=_unique(out)).data
            flat.extend([data, *_index_tangents(out)])
        return out_leaves, flat


def _unique(mat) -> bool:
    return isinstance(mat, BCOO) and mat.unique_indices


class _SparseVJPRules:
    """A custom_vjp function's fwd and bwd on the leaves of sparse operands: the user's rules
    on the dense forms, the value computed sparsely, an output cotangent made dense at the
    result's indices and an argument's cotangent read at its stored elements."""

    def __init__(self, call: _SparseCall, rules):
        self.call, self.rules = call, rules
        self.in_avals = call.arg_avals
        self.__name__ = rules.__name__

    def forward(self, primals: list) -> tuple[list, list]:
        args = self.call.arguments(primals)
        out_leaves = self.call.value(primals)
        _, residuals = self.rules.forward(_dense_leaves(args))
        # The backward pass needs the indices of the sparse arguments and results.
        structure = [x for x in [*args, *self.call.outputs(out_leaves)] if is_sparse(x)]
        index_leaves = [leaf for x in structure for leaf in tree_util.tree_leaves(x)[1:]]
        self.n_residuals = len(residuals)
        return out_leaves, [*residuals, *index_leaves]

    def backward(self, residuals: list, cotangents: list) -> list:
        user_residuals = residuals[: self.n_residuals]
        index_leaves = iter(residuals[self.n_residuals :])
        args = self.call.shapes("arguments")
        arg_patterns = [_pattern(x, index_leaves) if is_sparse(x) else None for x in args]
        outs = self.call.shapes("outputs")
        cts = self.call.outputs(cotangents)
        dense_cts = []
        for out, ct in zip(outs, cts):
            if is_sparse(out):
                data = tree_util.tree_leaves(ct)[0]
                ct = _dense_tangent(_pattern(out, index_leaves, data), data)
            dense_cts.append(ct)
        arg_cts = self.rules.backward(user_residuals, tree_util.tree_leaves(dense_cts))
        arg_cts = tree_util.tree_unflatten(tree_util.tree_structure([0] * len(args)), list(arg_cts))
        flat = []
        for pattern, ct in zip(arg_patterns, arg_cts):
            if pattern is None:
                flat.append(ct)
                continue
            if type(ct) is Zero:
                data = Zero(tangent_aval(core.get_aval(pattern.data)))
            else:
                data = _convert.extract(_as_bcoo(pattern).indices, ct)
            flat.extend([data, *_index_tangents(pattern)])
        return flat


def _pattern(mat, index_leaves, data=None):
    """A sparse array of `mat`'s structure with the next index leaves of `index_leaves` (and
    `data`, or zeros)."""
    indices = [next(index_leaves) for _ in tree_util.tree_leaves(mat)[1:]]
    if data is None:
        data = _zero_data(mat)
    return tree_util.tree_unflatten(tree_util.tree_structure(mat), [data, *indices])


def _custom_jvp_call(*operands, call_jaxpr, jvp, num_consts: int) -> list:
    return _bind(custom_jvp_call_p, operands, call_jaxpr, num_consts, "jvp", _SparseJVPRule, jvp)


def _custom_vjp_call(*operands, call_jaxpr, rules, num_consts: int) -> list:
    rule = _SparseVJPRules
    return _bind(custom_vjp_call_p, operands, call_jaxpr, num_consts, "rules", rule, rules)


PROGRAM_RULES.update({"custom_jvp_call": _custom_jvp_call, "custom_vjp_call": _custom_vjp_call})
