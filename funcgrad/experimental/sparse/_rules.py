"""The sparse rules of `sparsify` for primitives without programs: how each computes its result
when an operand is a BCOO array, without forming the operand's dense form.

A rule takes the equation's operands (BCOO arrays or dense ones) and parameters and returns
its result. The rules of `ZERO_AWARE` also receive None for each case that the program makes
of zeros (`where(m, a, 0)` stages a broadcast zero), so that selecting between a sparse array
and zeros stays sparse.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from funcgrad import core, lax
from funcgrad import numpy as fnp
from funcgrad.core import Primitive
from funcgrad.experimental.sparse import _layout
from funcgrad.experimental.sparse.bcoo import (
    BCOO,
    _add_sparse,
    _positive_scalar,
    bcoo_reduce_sum,
    bcoo_reshape,
    bcoo_transpose,
    map_values,
)
from funcgrad.experimental.sparse.bcoo_products import (
    _relaid,
    bcoo_conv_general_dilated,
    bcoo_dot_general,
)
from funcgrad.experimental.sparse.bcoo_structure import (
    bcoo_broadcast_in_dim,
    bcoo_concatenate,
    bcoo_dynamic_slice,
    bcoo_gather,
    bcoo_rev,
    bcoo_slice,
    bcoo_squeeze,
)
from funcgrad.lax import elementwise


def is_sparse(x) -> bool:
    return isinstance(x, BCOO)


def _mul(x, y):
    return y * x if is_sparse(y) else x * y


def _add(x, y):
    return y + x if is_sparse(y) else x + y


def _sub(x, y):
    return x - y if is_sparse(x) else (-y) + x


def _div(x, y):
    if is_sparse(y):
        raise NotImplementedError(
            "sparsify: dividing by a sparse array gives a dense result (x / 0 is not 0); "
            "convert the divisor with .todense() first if that is meant"
        )
    data = _layout.divide_dense(x.data, x.indices, x.shape, fnp.asarray(y), lax.div)
    return x._like(data)


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
    if not all(is_sparse(x) for x in operands):
        raise NotImplementedError(
            "sparsify: concatenating sparse and dense arrays is not implemented; make every "
            "operand sparse (BCOO.fromdense) or dense (.todense())"
        )
    return bcoo_concatenate(operands, dimension=dimension)


def _slice(operand, *, start_indices, limit_indices, strides):
    return bcoo_slice(
        operand, start_indices=start_indices, limit_indices=limit_indices, strides=strides
    )


def _dynamic_slice(operand, *start_indices, slice_sizes):
    if not is_sparse(operand):
        raise NotImplementedError("sparsify: dynamic_slice with sparse start indices")
    return bcoo_dynamic_slice(operand, start_indices, slice_sizes)


def _gather(operand, start_indices, **params):
    if is_sparse(start_indices):
        raise NotImplementedError(
            "sparsify: gather with sparse indices is not implemented; convert the indices "
            "with .todense() first"
        )
    return bcoo_gather(operand, start_indices, **params)


def _broadcast_in_dim(operand, *, shape, broadcast_dimensions, **params):
    return bcoo_broadcast_in_dim(operand, shape=shape, broadcast_dimensions=broadcast_dimensions)


def _reshape(operand, *, new_sizes, dimensions):
    return bcoo_reshape(operand, new_sizes=new_sizes, dimensions=dimensions)


def _convert_element_type(operand, *, new_dtype, **params):
    return operand.astype(new_dtype)


def _integer_pow(operand, *, y):
    if y <= 0:
        raise NotImplementedError(
            f"sparsify: integer_pow with exponent {y} gives a dense result (0 ** {y} is not 0); "
            "convert the operand with .todense() first if that is meant"
        )
    return map_values(operand, lambda data: lax.integer_pow(data, y), linear=False)


def _pow(x, y):
    if is_sparse(y) or not _positive_scalar(y):
        raise NotImplementedError(
            "sparsify: pow keeps a sparse base sparse only with a constant positive scalar "
            "exponent (0 ** y is not 0 for y <= 0); convert the operands with .todense() "
            "first if a dense result is meant"
        )
    return map_values(x, lambda data: lax.pow(data, fnp.asarray(y, data.dtype)), linear=False)


def _extremum(primitive: Primitive, keeps_zero) -> Callable:
    """The rule of max or min against zeros or a constant scalar `c` for which the extremum of
    0 and c is 0 (`keeps_zero(c)`), as relu's max(x, 0) is: the result is zero wherever the
    sparse operand is."""

    def rule(x, y):
        sparse, other = (x, y) if is_sparse(x) else (y, x)
        if is_sparse(other):
            raise NotImplementedError(
                f"sparsify: {primitive.name} of two sparse arrays is not implemented; convert "
                "one with .todense() first"
            )
        if other is not None and not (
            _constant_scalar(other) and bool(keeps_zero(np.asarray(other)))
        ):
            raise NotImplementedError(
                f"sparsify: {primitive.name} keeps a sparse operand sparse only against zeros "
                f"or a constant scalar c with {primitive.name}(0, c) = 0; convert the operand "
                "with .todense() first if a dense result is meant"
            )
        value = 0 if other is None else other
        return map_values(
            sparse,
            lambda data: primitive.bind(data, fnp.asarray(value, data.dtype)),
            linear=False,
        )

    return rule


def _constant_scalar(x) -> bool:
    return not isinstance(x, core.Tracer) and np.ndim(x) == 0


def _todense(x, like):
    """A case of `select_n` in dense form (`like`, a case that is not None, gives the shape of
    the zeros a None case stands for)."""
    if x is None:
        return fnp.zeros(like.shape, like.dtype)
    return x.todense() if is_sparse(x) else x


def _select_n(predicate, *cases):
    """`select_n` where a case is sparse: each sparse case keeps its elements at the positions
    that select it, and the result stores those of every case. A dense case that may be
    nonzero makes the result dense (as large as that case already is)."""
    if is_sparse(predicate):
        raise NotImplementedError(
            "sparsify: select_n (where) with a sparse predicate is not implemented; convert "
            "the predicate with .todense() first"
        )
    like = next(c for c in cases if c is not None)
    if any(c is not None and not is_sparse(c) for c in cases):
        return lax.select_n(predicate, *(_todense(c, like) for c in cases))
    predicate = fnp.asarray(predicate)
    kept = []
    for which, case in enumerate(cases):
        if case is None:
            continue
        chosen = predicate == (which == 1) if predicate.dtype == bool else predicate == which
        chosen = _layout.dense_values(case.indices, case.shape, chosen)
        chosen = fnp.broadcast_to(chosen, case.data.shape)
        kept.append(case._like(fnp.where(chosen, case.data, fnp.zeros((), case.dtype))))
    if len(kept) == 1:
        return kept[0]
    n_batch, n_dense = min(c.n_batch for c in kept), min(c.n_dense for c in kept)
    kept = [_relaid(c, n_batch, n_dense) for c in kept]
    return functools.reduce(_add_sparse, kept)


def _unary(primitive: Primitive, linear: bool) -> Callable:
    """The rule of an elementwise primitive that maps 0 to 0."""

    def rule(operand, **params):
        return map_values(operand, lambda data: primitive.bind(data, **params), linear=linear)

    return rule


# Elementwise primitives that map 0 to 0. The linear ones apply to each stored element as it
# is; the others need elements that share an index merged first.
_LINEAR_UNARY = (
    elementwise.neg_p,
    elementwise.real_p,
    elementwise.imag_p,
    elementwise.conj_p,
    elementwise.stop_gradient_p,
)
_NONLINEAR_UNARY = (
    elementwise.abs_p,
    elementwise.sign_p,
    elementwise.floor_p,
    elementwise.ceil_p,
    elementwise.round_p,
    elementwise.sqrt_p,
    elementwise.cbrt_p,
    elementwise.sin_p,
    elementwise.tan_p,
    elementwise.asin_p,
    elementwise.atan_p,
    elementwise.sinh_p,
    elementwise.tanh_p,
    elementwise.asinh_p,
    elementwise.atanh_p,
    elementwise.expm1_p,
    elementwise.log1p_p,
    elementwise.erf_p,
    elementwise.erf_inv_p,
)

SPARSE_RULES: dict[str, Callable] = {
    "mul": _mul,
    "add": _add,
    "sub": _sub,
    "div": _div,
    "pow": _pow,
    "integer_pow": _integer_pow,
    "dot_general": _dot_general,
    "reduce_sum": _reduce_sum,
    "transpose": lambda x, *, permutation: bcoo_transpose(x, permutation=permutation),
    "reshape": _reshape,
    "rev": lambda x, *, dimensions: bcoo_rev(x, dimensions),
    "convert_element_type": _convert_element_type,
    "concatenate": _concatenate,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "gather": _gather,
    "conv_general_dilated": bcoo_conv_general_dilated,
    "squeeze": lambda x, *, dimensions: bcoo_squeeze(x, dimensions=dimensions),
    "broadcast_in_dim": _broadcast_in_dim,
    "select_n": _select_n,
    "max": _extremum(elementwise.max_p, lambda c: c <= 0),
    "min": _extremum(elementwise.min_p, lambda c: c >= 0),
    **{p.name: _unary(p, linear=True) for p in _LINEAR_UNARY},
    **{p.name: _unary(p, linear=False) for p in _NONLINEAR_UNARY},
}

# The rules told which operands, from the given position on, the program makes of zeros.
ZERO_AWARE = {"select_n": 1, "max": 0, "min": 0}

# The primitives whose rule maps every stored value, keeping the array's structure.
MAPS = frozenset(
    {"integer_pow", "pow", "max", "min", *(p.name for p in _LINEAR_UNARY + _NONLINEAR_UNARY)}
)

# Elementwise primitives whose result is nonzero where the operand is 0: a sparse operand
# would give a dense result.
DENSIFYING = frozenset(
    {
        "exp", "exp2", "log", "log2", "log10", "cos", "cosh", "acos", "acosh", "logistic",
        "rsqrt", "erfc", "lgamma", "digamma", "is_finite", "not", "eq", "ne", "lt", "le",
        "gt", "ge",
    }
)  # fmt: skip
