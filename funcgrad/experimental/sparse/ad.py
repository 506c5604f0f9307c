"""Derivatives with respect to sparse arguments: `grad`, `value_and_grad`, `jacfwd`, `jacrev`
and `jacobian`, as funcgrad's, except that the derivative with respect to a sparse argument
(BCOO, BCSR, or a COO, CSR or CSC matrix) is taken in the subspace of its sparsity pattern.

Each sparse array among the differentiated arguments is differentiated through its data alone
(its indices stay as they are), and its derivative comes back as a sparse array with the same
indices holding the derivative of the data. A Jacobian's leading dimensions (those of the
function's output) become leading batch dimensions of that array, which the older matrix formats
(COO, CSR, CSC) do not have.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from funcgrad import numpy as fnp
from funcgrad import tree_util
from funcgrad.experimental.sparse.bcoo import BCOO
from funcgrad.experimental.sparse.bcsr import BCSR
from funcgrad.experimental.sparse.coo import COO
from funcgrad.experimental.sparse.csr import CSC, CSR
from funcgrad.transforms import autodiff

__all__ = ["grad", "jacfwd", "jacobian", "jacrev", "value_and_grad"]


_MATRIX_FORMATS = (COO, CSR, CSC)


def _is_sparse(x) -> bool:
    return isinstance(x, (BCOO, BCSR, *_MATRIX_FORMATS))


def _data_of(arg):
    """`arg` with each sparse array replaced by its data."""
    return tree_util.tree_map(lambda x: x.data if _is_sparse(x) else x, arg, is_leaf=_is_sparse)


def _with_data(template, arg):
    """`arg` (a `_data_of(template)`) with each data put back into its sparse array."""
    return tree_util.tree_map(
        lambda t, x: _holding(t, x) if _is_sparse(t) else x, template, arg, is_leaf=_is_sparse
    )


def _holding(mat, data):
    """The sparse array `mat` with `data` in place of its stored values; `data`'s extra
    leading dimensions (a Jacobian's) become leading batch dimensions."""
    lead = tuple(data.shape[: data.ndim - mat.data.ndim])
    if isinstance(mat, _MATRIX_FORMATS):
        if lead:
            name = type(mat).__name__
            raise NotImplementedError(
                f"the Jacobian with respect to a {name} matrix would hold the output's "
                f"dimensions as batch dimensions, which a {name} matrix has not; pass the "
                "argument as a BCOO or BCSR array"
            )
        return tree_util.tree_unflatten(
            tree_util.tree_structure(mat), [data, *tree_util.tree_leaves(mat)[1:]]
        )
    index_leaves = [fnp.broadcast_to(x, lead + x.shape) for x in tree_util.tree_leaves(mat)[1:]]
    shape = lead + tuple(mat.shape)
    if isinstance(mat, BCSR):
        return BCSR((data, *index_leaves), shape=shape)
    flags = {"indices_sorted": mat.indices_sorted, "unique_indices": mat.unique_indices}
    return BCOO((data, index_leaves[0]), shape=shape, **flags)


class _DataFunction:
    """`fun` as a function of the data of its differentiated arguments' sparse arrays, which
    records the structure of its output (less the auxiliary data); for a Jacobian (`who`), its
    output must be dense."""

    def __init__(self, fun: Callable, args: tuple, argnums, has_aux: bool, kwargs: dict, who: str):
        self.fun, self.has_aux, self.kwargs, self.who = fun, has_aux, kwargs, who
        self.templates = {i: args[i] for i in argnums}
        self.args = tuple(_data_of(a) if i in self.templates else a for i, a in enumerate(args))
        self.out_tree = None

    def __call__(self, *data_args):
        call_args = [
            _with_data(self.templates[i], a) if i in self.templates else a
            for i, a in enumerate(data_args)
        ]
        out = self.fun(*call_args, **self.kwargs)
        leaves, self.out_tree = tree_util.tree_flatten(
            out[0] if self.has_aux else out, is_leaf=_is_sparse
        )
        if self.who.startswith("jac") and any(_is_sparse(x) for x in leaves):
            raise NotImplementedError(
                f"sparse.{self.who}: the function returns a sparse array; Jacobians are "
                "implemented for dense outputs (return .todense())"
            )
        return out

    def sparse_derivatives(self, derivatives, argnums):
        """The derivatives with respect to the data, as sparse arrays where the arguments
        were (for `argnums` an int or a sequence, as the transformation returned them)."""
        if isinstance(argnums, int):
            return _with_data(self.templates[argnums % len(self.args)], derivatives)
        nums = [n % len(self.args) for n in argnums]
        return tuple(_with_data(self.templates[n], d) for n, d in zip(nums, derivatives))


def _argnums(argnums, args: tuple, who: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for n in nums:
        if not -len(args) <= n < len(args):
            raise ValueError(
                f"sparse.{who}: argnums {argnums} out of range for a function called with "
                f"{len(args)} positional arguments"
            )
    return tuple(n % len(args) for n in nums)


def value_and_grad(
    fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, **kwargs
) -> Callable:
    """`value_and_grad` whose gradient with respect to a sparse argument is a sparse array of
    its indices (the gradient in the subspace of its sparsity pattern)."""

    @functools.wraps(fun)
    def value_and_grad_fun(*args, **fun_kwargs):
        nums = _argnums(argnums, args, "value_and_grad")
        data_fun = _DataFunction(fun, args, nums, has_aux, fun_kwargs, "value_and_grad")
        transformed = autodiff.value_and_grad(data_fun, argnums, has_aux, **kwargs)
        value, grads = transformed(*data_fun.args)
        return value, data_fun.sparse_derivatives(grads, argnums)

    return value_and_grad_fun


def grad(
    fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, **kwargs
) -> Callable:
    """`grad` whose gradient with respect to a sparse argument is a sparse array of its
    indices (the gradient in the subspace of its sparsity pattern)."""
    value_and_grad_fun = value_and_grad(fun, argnums, has_aux, **kwargs)

    @functools.wraps(fun)
    def grad_fun(*args, **fun_kwargs):
        value, grads = value_and_grad_fun(*args, **fun_kwargs)
        return (grads, value[1]) if has_aux else grads

    return grad_fun


def _jacobian(transform: Callable, who: str) -> Callable:
    def sparse_transform(
        fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, **kwargs
    ) -> Callable:
        @functools.wraps(fun)
        def jacobian_fun(*args, **fun_kwargs):
            nums = _argnums(argnums, args, who)
            data_fun = _DataFunction(fun, args, nums, has_aux, fun_kwargs, who)
            out = transform(data_fun, argnums, has_aux, **kwargs)(*data_fun.args)
            jac, aux = out if has_aux else (out, None)
            per_output = data_fun.out_tree.flatten_up_to(jac)
            jac = data_fun.out_tree.unflatten(
                [data_fun.sparse_derivatives(j, argnums) for j in per_output]
            )
            return (jac, aux) if has_aux else jac

        return jacobian_fun

    sparse_transform.__name__ = who
    sparse_transform.__doc__ = (
        f"`{who}` whose Jacobian with respect to a sparse argument is a sparse array of its "
        "indices (in the subspace of its sparsity pattern), with the output's dimensions as "
        "leading batch dimensions. The function's outputs must be dense."
    )
    return sparse_transform


jacfwd = _jacobian(autodiff.jacfwd, "jacfwd")
jacrev = _jacobian(autodiff.jacrev, "jacrev")
jacobian = jacrev
