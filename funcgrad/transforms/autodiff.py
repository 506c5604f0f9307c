"""Differentiation transforms: jvp, linearize, vjp, grad, value_and_grad, jacfwd, jacrev, hessian.

Reverse mode is linearize + transpose: `linearize` stages the tangent part of the JVP into a
linear jaxpr (its residuals are the constvars), and `vjp` transposes that jaxpr. Everything is
built from the JVP trace, so there is one derivative rule per primitive.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.interpreters.ad import (
    JVPTrace,
    JVPTracer,
    UndefinedPrimal,
    Zero,
    backward_pass,
    float0,
    instantiate,
    tangent_aval,
)
from funcgrad.interpreters.partial_eval import PartialEvalTrace
from funcgrad.ir import ClosedJaxpr, eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.transforms.jit import jit
from funcgrad.transforms.make_jaxpr import function_name


def _as_primal(x):
    try:
        return asarray(x)
    except TypeError:
        raise TypeError(
            f"differentiated functions take arrays, scalars or pytrees of them; got a value of "
            f"type {type(x).__name__}"
        ) from None


def _output_leaves(out, what: str) -> tuple[list, Any]:
    leaves, tree = tree_util.tree_flatten(out)
    for leaf in leaves:
        if not isinstance(leaf, (core.Tracer, np.ndarray, np.generic, bool, int, float)) and (
            type(leaf).__name__ != "Array"
        ):
            raise TypeError(
                f"{what} needs the function to return arrays (or pytrees of them); it returned a "
                f"value of type {type(leaf).__name__}: {leaf!r}"
            )
    # float0 outputs (another transformation's tangents of integers) hold no data: they are
    # constants, whose tangents and cotangents are float0 too.
    return [x if core.is_float0(x) else _as_primal(x) for x in leaves], tree


def _materialize(tangent, aval):
    """A user-facing tangent: float0 zeros for integer values, real zeros for symbolic ones."""
    if aval.dtype == float0 or tangent_aval(aval).dtype == float0:
        return np.zeros(aval.shape, float0)
    return instantiate(tangent)


def _as_cotangent_of(ct, aval):
    """An input's cotangent with its primal's weak type: the gradient at a Python scalar is
    weakly typed, as the scalar was, whatever strongly typed values it met on the way (so
    `grad(f)(1.0)` added to a bfloat16 array stays bfloat16)."""
    if ct.dtype == float0 or core.get_aval(ct).weak_type == aval.weak_type:
        return ct
    from funcgrad.lax.elementwise import convert_element_type_p

    return convert_element_type_p.bind(ct, new_dtype=ct.dtype, weak_type=aval.weak_type)


# ---------------------------------------------------------------------------------------------
# Forward mode


def jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False):
    """(fun(*primals), the directional derivative of fun at primals along tangents)."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError(
            "jvp takes primals and tangents as tuples or lists with one entry per argument, got "
            f"{type(primals).__name__} and {type(tangents).__name__}"
        )
    primal_leaves, in_tree = tree_util.tree_flatten(tuple(primals))
    tangent_leaves, tangent_tree = tree_util.tree_flatten(tuple(tangents))
    if in_tree != tangent_tree:
        raise TypeError(
            f"primal and tangent arguments to jvp must have the same tree structure; got "
            f"{in_tree} and {tangent_tree}"
        )
    primal_leaves = [_as_primal(p) for p in primal_leaves]
    trace = JVPTrace(core.current_trace(), f"jvp({function_name(fun)})")
    in_values = []
    for primal, tangent in zip(primal_leaves, tangent_leaves):
        expected = tangent_aval(primal.aval)
        tangent = _check_tangent(tangent, expected)
        in_values.append(primal if type(tangent) is Zero else JVPTracer(trace, primal, tangent))
    with core.trace_lifetime(trace):
        with core.set_current_trace(trace):
            out = fun(*tree_util.tree_unflatten(in_tree, in_values))
        if has_aux:
            out, aux = _split_aux(out, "jvp")
            aux = _strip_tangents(aux, trace)
        out_leaves, out_tree = _output_leaves(out, "jvp")
        pairs = [trace.primal_and_tangent(x) for x in out_leaves]
        del in_values, out, out_leaves  # (the leak checker finds any tracer still referenced)
    primals_out = [p for p, _ in pairs]
    tangents_out = [_materialize(t, core.get_aval(p)) for p, t in pairs]
    result = (
        tree_util.tree_unflatten(out_tree, primals_out),
        tree_util.tree_unflatten(out_tree, tangents_out),
    )
    return (*result, aux) if has_aux else result


def _check_tangent(tangent, expected: core.ShapedArray):
    if expected.dtype == float0:
        if getattr(tangent, "dtype", None) != float0:
            got = getattr(tangent, "dtype", type(tangent).__name__)
            raise TypeError(
                "the tangent of an integer or boolean primal must have dtype float0 (as "
                f"np.zeros(shape, funcgrad.dtypes.float0)), got {got}"
            )
        return Zero(expected)
    tangent = _as_primal(tangent)
    if tangent.aval.weak_type and tangent.dtype != expected.dtype:
        # A Python float takes the dtype it would take in arithmetic with the primal's.
        promoted, _ = dtypes.result_type_of([(tangent.dtype, True), (expected.dtype, False)])
        inexact = dtypes.is_inexact(tangent.dtype)
        if inexact and promoted == expected.dtype and tangent.shape == expected.shape:
            tangent = tangent.astype(expected.dtype)
    if tangent.shape != expected.shape or tangent.dtype != expected.dtype:
        raise TypeError(
            f"primal and tangent must have the same shape and dtype: the primal is "
            f"{expected.str_short()}, the tangent {tangent.aval.str_short()}"
        )
    return tangent


def _strip_tangents(tree, trace: JVPTrace):
    """Auxiliary outputs are not differentiated: keep only their primal values (and any other
    Python value as it is)."""
    return tree_util.tree_map(
        lambda x: trace.primal_and_tangent(x)[0] if isinstance(x, core.Tracer) else x, tree
    )


def _split_aux(out, who: str):
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"{who} with has_aux=True needs the function to return a pair (out, aux)")
    return out[0], out[1]


# ---------------------------------------------------------------------------------------------
# Linearization and reverse mode


class _Linearized:
    """The result of linearizing a flat function: primal outputs and the linear tangent map."""

    def __init__(self, primals_out, linear_jaxpr: ClosedJaxpr, out_is_zero, in_avals, aux):
        self.primals_out = primals_out
        self.linear_jaxpr = linear_jaxpr
        self.out_is_zero = out_is_zero
        self.in_avals = in_avals
        self.aux = aux


def _linearize_flat(
    fun: Callable, primal_leaves: list, name: str, has_aux: bool, user_fun: Callable
) -> tuple:
    debug_info = f"{name}({function_name(user_fun)})"
    pe_trace = PartialEvalTrace(core.current_trace(), debug_info)
    jvp_trace = JVPTrace(pe_trace, debug_info)
    in_avals = [p.aval for p in primal_leaves]
    # Every input gets a tangent input of the linear program (float0 ones too, unused).
    tangents = [pe_trace.new_arg(tangent_aval(aval)) for aval in in_avals]
    in_values = [
        JVPTracer(jvp_trace, primal, tangent) if tangent.aval.dtype != float0 else primal
        for primal, tangent in zip(primal_leaves, tangents)
    ]
    del tangents
    aux = None
    with core.trace_lifetime(pe_trace):
        with core.trace_lifetime(jvp_trace):
            with core.set_current_trace(jvp_trace):
                out = fun(*in_values)
            if has_aux:
                out, aux = _split_aux(out, name)
                aux = _strip_tangents(aux, jvp_trace)
            out_leaves, out_tree = _output_leaves(out, name)
            pairs = [jvp_trace.primal_and_tangent(x) for x in out_leaves]
            del in_values, out, out_leaves  # (the leak checker finds any tracer still referenced)
        out_is_zero = [type(t) is Zero for _, t in pairs]
        linear_jaxpr = pe_trace.to_closed_jaxpr([t for _, t in pairs if type(t) is not Zero])
        primals_out = [p for p, _ in pairs]
        del pairs
    return _Linearized(primals_out, linear_jaxpr, out_is_zero, in_avals, aux), out_tree


class _LinearMap:
    """The linear map of one linearization without its residuals (the linear program's
    constants), which it is called with: `tree_util.Partial(map, residuals)` is the map as a
    pytree whose leaves are the residuals, so it can be returned from a jitted function and
    passed to one, which then traces it once."""

    def __init__(self, lin: _Linearized, in_tree, out_tree):
        self.jaxpr = lin.linear_jaxpr.jaxpr
        self.out_is_zero = tuple(lin.out_is_zero)
        self.in_avals = tuple(lin.in_avals)
        self.out_avals = tuple(core.get_aval(p) for p in lin.primals_out)
        self.in_tree = in_tree
        self.out_tree = out_tree


class _Jvp(_LinearMap):
    __name__ = "f_jvp"  # what errors call it (`function_name`)

    def __call__(self, residuals, *tangents):
        tangent_leaves, tangent_tree = tree_util.tree_flatten(tangents)
        if tangent_tree != self.in_tree:
            raise TypeError(
                f"f_jvp expects tangents with structure {self.in_tree}, got {tangent_tree}"
            )
        checked = [
            _check_tangent(t, tangent_aval(a)) for t, a in zip(tangent_leaves, self.in_avals)
        ]
        nonzero = iter(eval_jaxpr(self.jaxpr, residuals, *map(_jaxpr_arg, checked)))
        outs = [
            _materialize(Zero(tangent_aval(aval)), aval) if zero else next(nonzero)
            for aval, zero in zip(self.out_avals, self.out_is_zero)
        ]
        return tree_util.tree_unflatten(self.out_tree, outs)


class _Vjp(_LinearMap):
    __name__ = "vjp_fn"

    def __call__(self, residuals, cotangents):
        ct_leaves, ct_tree = tree_util.tree_flatten(cotangents)
        if ct_tree != self.out_tree:
            raise TypeError(
                f"the cotangent must have the structure of the function's output "
                f"{self.out_tree}, got {ct_tree}"
            )
        cts = []
        for ct, aval, zero in zip(ct_leaves, self.out_avals, self.out_is_zero):
            if not zero:
                cts.append(_check_tangent(ct, tangent_aval(aval)))
        args = [UndefinedPrimal(v.aval) for v in self.jaxpr.invars]
        cts_in = backward_pass(self.jaxpr, residuals, args, cts)
        cts_in = [
            _as_cotangent_of(_materialize(ct, aval), aval)
            for ct, aval in zip(cts_in, self.in_avals)
        ]
        return tree_util.tree_unflatten(self.in_tree, cts_in)


def linearize(fun: Callable, *primals, has_aux: bool = False):
    """(fun(*primals), f_jvp) where f_jvp evaluates the linear map of tangents, with the
    primal computation already done (its residuals are kept, not recomputed). f_jvp is a
    pytree of the residuals."""
    primal_leaves, in_tree = tree_util.tree_flatten(primals)
    primal_leaves = [_as_primal(p) for p in primal_leaves]
    flat_fun = _flatten_fun(fun, in_tree)
    lin, out_tree = _linearize_flat(flat_fun, primal_leaves, "linearize", has_aux, fun)
    f_jvp = tree_util.Partial(_Jvp(lin, in_tree, out_tree), list(lin.linear_jaxpr.consts))
    primals_out = tree_util.tree_unflatten(out_tree, lin.primals_out)
    return (primals_out, f_jvp, lin.aux) if has_aux else (primals_out, f_jvp)


def _jaxpr_arg(tangent):
    # float0 tangent inputs of the linear jaxpr are never read; any placeholder will do.
    return np.zeros((), np.float32) if type(tangent) is Zero else tangent


def _flatten_fun(fun: Callable, in_tree) -> Callable:
    def flat_fun(*leaves):
        return fun(*tree_util.tree_unflatten(in_tree, leaves))

    return flat_fun


def _check_no_reduce_axes(name: str, reduce_axes) -> None:
    if tuple(reduce_axes):
        raise NotImplementedError(
            f"{name}: reduce_axes is no longer supported; sum the cotangents over the named "
            f"axes yourself (lax.psum), got reduce_axes={reduce_axes!r}"
        )


def vjp(fun: Callable, *primals, has_aux: bool = False, reduce_axes=()):
    """(fun(*primals), vjp_fn) where vjp_fn maps an output cotangent to input cotangents.
    vjp_fn is a pytree of the residuals, so a jitted function may return it, and another take
    it (`fwd_and_bwd`). `reduce_axes` is gone (only () is accepted)."""
    _check_no_reduce_axes("vjp", reduce_axes)
    primal_leaves, in_tree = tree_util.tree_flatten(primals)
    primal_leaves = [_as_primal(p) for p in primal_leaves]
    flat_fun = _flatten_fun(fun, in_tree)
    lin, out_tree = _linearize_flat(flat_fun, primal_leaves, "vjp", has_aux, fun)
    vjp_fn = tree_util.Partial(_Vjp(lin, in_tree, out_tree), list(lin.linear_jaxpr.consts))
    primals_out = tree_util.tree_unflatten(out_tree, lin.primals_out)
    return (primals_out, vjp_fn, lin.aux) if has_aux else (primals_out, vjp_fn)


def fwd_and_bwd(
    fun: Callable, argnums: int | Sequence[int], has_aux: bool = False, jitted: bool = True
) -> tuple[Callable, Callable]:
    """(fwd, bwd): fwd(*args) is `vjp` of fun in the arguments `argnums` ((out, vjp_fn), and
    aux with `has_aux`), bwd(vjp_fn, cotangent) the cotangents of those arguments (one
    without a sequence of argnums). Jitted (by default), each compiles once however many
    times a loop calls them."""

    def fwd(*args):
        nums = _argnums_tuple(argnums, len(args), "fwd_and_bwd")

        def of_differentiated(*differentiated):
            full = list(args)
            for i, x in zip(nums, differentiated):
                full[i] = x
            return fun(*full)

        return vjp(of_differentiated, *(args[i] for i in nums), has_aux=has_aux)

    def bwd(vjp_fn, cotangent):
        cotangents = vjp_fn(cotangent)
        return cotangents[0] if isinstance(argnums, int) else cotangents

    if jitted:
        return jit(fwd), jit(bwd)
    return fwd, bwd


# ---------------------------------------------------------------------------------------------
# grad and friends


def _argnums_tuple(argnums, num_args: int, who: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for n in nums:
        if not -num_args <= n < num_args:
            raise ValueError(
                f"{who}: argnums {argnums} out of range for a function called with {num_args} "
                "positional arguments"
            )
    return tuple(n % num_args for n in nums)


def _check_grad_inputs(
    args, who: str, allow_int: bool, holomorphic: bool, complex_allowed: bool = True
) -> None:
    """Inputs are float or complex (complex only when `holomorphic`, where they must be)."""
    for leaf in tree_util.tree_leaves(args):
        dtype = core.get_aval(_as_primal(leaf)).dtype
        if holomorphic and not dtypes.is_complex(dtype):
            raise TypeError(
                f"{who} with holomorphic=True requires complex inputs, got an input of dtype "
                f"{dtype.name}"
            )
        if dtypes.is_complex(dtype) and not (holomorphic or complex_allowed):
            raise TypeError(
                f"{who} requires real inputs, got an input of dtype {dtype.name}. For a "
                "holomorphic function pass holomorphic=True; for a non-holomorphic function of "
                "complex inputs use jvp directly."
            )
        if not dtypes.is_inexact(dtype) and not allow_int:
            remedy = (
                "use jvp"  # jacfwd has no allow_int
                if who == "jacfwd"
                else "pass allow_int=True to get float0 zero gradients for them"
            )
            raise TypeError(
                f"{who} requires floating-point inputs, got an input of dtype {dtype.name}. "
                f"Differentiate with respect to float arguments only (argnums), or for integer "
                f"inputs {remedy}."
            )


def _check_output_dtype(aval, who: str, holomorphic: bool) -> None:
    """Reverse mode needs real outputs, or complex ones of a function declared holomorphic:
    the cotangent seeded at a complex output would otherwise not be a gradient."""
    if holomorphic and not dtypes.is_complex(aval.dtype):
        raise TypeError(
            f"{who} with holomorphic=True requires complex outputs, got {aval.dtype.name}"
        )
    if not holomorphic and not dtypes.is_float(aval.dtype):
        hint = (
            " For a holomorphic function pass holomorphic=True; for a non-holomorphic function "
            "with complex outputs use vjp directly."
            if dtypes.is_complex(aval.dtype)
            else " For a function with integer or boolean outputs use vjp directly."
        )
        raise TypeError(
            f"{who}: the output must be real floating-point to be differentiated, got "
            f"{aval.dtype.name}.{hint}"
        )


def value_and_grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence = (),
) -> Callable:
    """A function returning (fun(*args), the gradient of fun with respect to args[argnums]).
    `reduce_axes` is gone (only () is accepted)."""
    name = f"value_and_grad({function_name(fun)})"
    _check_no_reduce_axes(name, reduce_axes)

    @functools.wraps(fun)
    def value_and_grad_fun(*args, **kwargs):
        nums = _argnums_tuple(argnums, len(args), name)
        diff_args = tuple(args[i] for i in nums)
        _check_grad_inputs(diff_args, name, allow_int, holomorphic)

        @functools.wraps(fun)
        def partial_fun(*diff):
            full = list(args)
            for i, value in zip(nums, diff):
                full[i] = value
            return fun(*full, **kwargs)

        result = vjp(partial_fun, *diff_args, has_aux=has_aux)
        out, pullback = result[0], result[1]
        _check_scalar_output(out, name, holomorphic)
        grads = pullback(_one_like(out))
        grads = grads[0] if isinstance(argnums, int) else grads
        return ((out, result[2]), grads) if has_aux else (out, grads)

    return value_and_grad_fun


def grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence = (),
) -> Callable:
    """The gradient of a scalar-valued `fun` with respect to its argument(s) `argnums`.
    `reduce_axes` is gone (only () is accepted)."""
    _check_no_reduce_axes(f"grad({function_name(fun)})", reduce_axes)
    value_and_grad_fun = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    @functools.wraps(fun)
    def grad_fun(*args, **kwargs):
        (_, aux), grads = (
            value_and_grad_fun(*args, **kwargs)
            if has_aux
            else ((None, None), value_and_grad_fun(*args, **kwargs)[1])
        )
        return (grads, aux) if has_aux else grads

    return grad_fun


def _check_scalar_output(out, who: str, holomorphic: bool) -> None:
    if not isinstance(out, (core.Tracer,)) and type(out).__name__ != "Array":
        raise TypeError(
            f"{who}: the function must return a scalar array, got a value of type "
            f"{type(out).__name__}"
        )
    aval = core.get_aval(out)
    if aval.shape != ():
        raise TypeError(
            f"{who}: gradients are only defined for scalar-output functions; the output had "
            f"shape {aval.shape}. Use jacrev/jacfwd or vjp for non-scalar outputs."
        )
    _check_output_dtype(aval, who, holomorphic)


def _one_like(out):
    from funcgrad.lax.shapes import full_like

    return full_like(out, 1)


def _jacobian_tree(out_tree, in_tree, blocks: dict, num_out: int, num_in: int, single: bool):
    """Blocks[(j, i)] = d out_leaf_j / d in_leaf_i, arranged as JAX does: the output's
    structure outside, the differentiated arguments' structure inside."""
    per_output = []
    for j in range(num_out):
        args = tree_util.tree_unflatten(in_tree, [blocks[(j, i)] for i in range(num_in)])
        per_output.append(args[0] if single else tuple(args))
    return tree_util.tree_unflatten(out_tree, per_output)


def _standard_basis(leaves: list) -> tuple[list, list[int]]:
    """Rows of the identity over all leaves' elements, cut per leaf and shaped like it.

    Returns, per leaf, an array of shape (total,) + leaf.shape, and each leaf's offset.
    """
    from funcgrad import numpy as fnp

    sizes = [leaf.size for leaf in leaves]
    offsets = list(np.cumsum([0] + sizes[:-1]))
    total = sum(sizes)
    basis = []
    for leaf, offset, size in zip(leaves, offsets, sizes):
        rows = fnp.eye(total, size, k=-int(offset), dtype=leaf.dtype)
        basis.append(rows.reshape((total,) + tuple(leaf.shape)))
    return basis, [int(o) for o in offsets]


def _partial_in(fun: Callable, args: tuple, nums: tuple[int, ...], kwargs: dict) -> Callable:
    """`fun` of the arguments `nums` alone, the others and the keyword arguments fixed."""

    @functools.wraps(fun)
    def partial_fun(*diff):
        full = list(args)
        for i, value in zip(nums, diff):
            full[i] = value
        return fun(*full, **kwargs)

    return partial_fun


def jacfwd(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
) -> Callable:
    """The Jacobian by forward mode: the jvp vmapped over the input basis vectors."""
    from funcgrad import numpy as fnp
    from funcgrad.transforms.vmap import vmap

    @functools.wraps(fun)
    def jacfwd_fun(*args, **kwargs):
        nums = _argnums_tuple(argnums, len(args), "jacfwd")
        diff_args = tuple(tree_util.tree_map(_as_primal, args[i]) for i in nums)
        _check_grad_inputs(diff_args, "jacfwd", False, holomorphic, complex_allowed=False)
        in_leaves, in_tree = tree_util.tree_flatten(diff_args)
        partial_fun = _partial_in(fun, args, nums, kwargs)

        def flat_fun(*leaves):
            return partial_fun(*tree_util.tree_unflatten(in_tree, leaves))

        def pushforward(*tangents):
            result = jvp(flat_fun, in_leaves, list(tangents), has_aux=has_aux)
            # An integer output's tangent is float0, which cannot be stacked; its Jacobian is
            # zeros of the output's own dtype.
            tangents_out = tree_util.tree_map(_zeros_for_float0, result[0], result[1])
            return (result[0], tangents_out, *result[2:])

        basis, offsets = _standard_basis(in_leaves)
        result = vmap(pushforward, out_axes=(None, 0, None) if has_aux else (None, 0))(*basis)
        out, tangents = result[0], result[1]
        out_leaves, out_tree = tree_util.tree_flatten(out)
        if holomorphic:
            for leaf in out_leaves:
                _check_output_dtype(core.get_aval(leaf), "jacfwd", True)
        tangent_leaves = tree_util.tree_leaves(tangents)
        blocks = {}
        for j, (out_leaf, tangent) in enumerate(zip(out_leaves, tangent_leaves)):
            for i, (leaf, offset) in enumerate(zip(in_leaves, offsets)):
                rows = tangent[offset : offset + leaf.size]
                columns = fnp.moveaxis(rows, 0, -1)
                blocks[(j, i)] = columns.reshape(tuple(out_leaf.shape) + tuple(leaf.shape))
        jac = _jacobian_tree(
            out_tree, in_tree, blocks, len(out_leaves), len(in_leaves), isinstance(argnums, int)
        )
        return (jac, result[2]) if has_aux else jac

    return jacfwd_fun


def _zeros_for_float0(primal, tangent):
    from funcgrad import numpy as fnp

    if np.dtype(tangent.dtype) == float0:
        return fnp.zeros(np.shape(primal), fnp.asarray(primal).dtype)
    return tangent


def jacrev(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable:
    """The Jacobian by reverse mode: the pullback vmapped over the output basis vectors.
    With `allow_int`, integer inputs get zero blocks of their dtype."""
    from funcgrad import numpy as fnp
    from funcgrad.transforms.vmap import vmap

    @functools.wraps(fun)
    def jacrev_fun(*args, **kwargs):
        nums = _argnums_tuple(argnums, len(args), "jacrev")
        diff_args = tuple(tree_util.tree_map(_as_primal, args[i]) for i in nums)
        _check_grad_inputs(diff_args, "jacrev", allow_int, holomorphic)
        result = vjp(_partial_in(fun, args, nums, kwargs), *diff_args, has_aux=has_aux)
        pullback = result[1]
        out_leaves, out_tree = tree_util.tree_flatten(result[0])
        for leaf in out_leaves:
            _check_output_dtype(core.get_aval(leaf), "jacrev", holomorphic)
        in_leaves, in_tree = tree_util.tree_flatten(diff_args)
        basis, offsets = _standard_basis(out_leaves)

        def pull(*cotangent_leaves):
            return tree_util.tree_leaves(
                pullback(tree_util.tree_unflatten(out_tree, cotangent_leaves))
            )

        # axis_size: a function with no outputs has no basis to map over, only its size, 0.
        rows = sum(leaf.size for leaf in out_leaves)
        cotangents = vmap(pull, axis_size=rows)(*basis)
        blocks = {}
        for j, (out_leaf, offset) in enumerate(zip(out_leaves, offsets)):
            for i, (leaf, ct) in enumerate(zip(in_leaves, cotangents)):
                shape = tuple(out_leaf.shape) + tuple(leaf.shape)
                if core.is_float0(ct):  # an integer input (allow_int): zeros of its dtype
                    blocks[(j, i)] = fnp.zeros(shape, leaf.dtype)
                    continue
                rows = ct[offset : offset + out_leaf.size]
                blocks[(j, i)] = rows.reshape(shape)
        jac = _jacobian_tree(
            out_tree, in_tree, blocks, len(out_leaves), len(in_leaves), isinstance(argnums, int)
        )
        return (jac, result[2]) if has_aux else jac

    return jacrev_fun


def hessian(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
) -> Callable:
    """The Hessian of a scalar function: forward-over-reverse, jacfwd(jacrev(fun))."""
    inner = jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic)
    return jacfwd(inner, argnums, has_aux=has_aux, holomorphic=holomorphic)
