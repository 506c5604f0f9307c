"""Implicit differentiation: custom_linear_solve and custom_root.

A solver's iterations are a poor thing to differentiate: they cost memory in reverse mode (a
while loop refuses it), and their derivative is that of the iteration, not of the solution. Both
functions here run the user's solver for the value and take derivatives from the equation the
solution satisfies (the implicit function theorem), so the solver itself is never
differentiated and may be anything: a while loop, a stop_gradient, a library call.

`linear_solve` is a higher-order primitive carrying the programs of the linear map (`matvec`),
its transpose (`vecmat`), the solve and the transpose solve. It is linear in the right-hand
side b: its jvp is another solve (x' = A⁻¹(b' - A' x)) and its transpose a solve with the
transposed programs, which is what makes reverse mode need `transpose_solve`. Its operands are
(*matvec_consts, *vecmat_consts, *solve_consts, *transpose_solve_consts, *b); `call_jaxpr` is
the solve as a program of all of them (what runs, and what the compiler inlines), and
`transpose_call_jaxpr` likewise for the transposed operands.

`custom_root` is a custom_jvp function: its jvp runs the solve on the primals and applies the
user's `tangent_solve` to the linearized equation f(params, x) = 0 at the solution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, dtypes, tree_util
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import (
    UndefinedPrimal,
    Zero,
    add_tangents,
    backward_pass,
    float0,
    instantiate,
    is_undefined,
    jvp_jaxpr,
    tangent_aval,
)
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, Var, eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.lax.control_flow.common import avals_of, check_same_types, stage
from funcgrad.lax.elementwise import neg
from funcgrad.lax.shapes import full
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = ["custom_linear_solve", "custom_root"]

linear_solve_p = Primitive("linear_solve", multiple_results=True, higher_order=True)


# ---------------------------------------------------------------------------------------------
# Programs over the primitive's operands


def _reading(closed: ClosedJaxpr, avals: Sequence[ShapedArray], used: Sequence[int]) -> ClosedJaxpr:
    """`closed` as a program of inputs of `avals`, of which it reads those at `used` (in
    order) and ignores the others."""
    invars = [Var(a) for a in avals]
    for position, var in zip(used, closed.jaxpr.invars):
        invars[position] = var
    jaxpr = closed.jaxpr
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns), closed.consts)


def _groups(items: Sequence, const_lengths: Sequence[int]) -> list[list]:
    """Operands cut into (matvec, vecmat, solve, transpose_solve) consts and b."""
    groups, start = [], 0
    for length in const_lengths:
        groups.append(list(items[start : start + length]))
        start += length
    groups.append(list(items[start:]))
    return groups


def _transposed(const_lengths: Sequence[int]) -> tuple[int, ...]:
    matvec, vecmat, solve, transpose_solve = const_lengths
    return (vecmat, matvec, transpose_solve, solve)


def _swap(items: Sequence, const_lengths: Sequence[int]) -> list:
    matvec, vecmat, solve, transpose_solve, b = _groups(items, const_lengths)
    return [*vecmat, *matvec, *transpose_solve, *solve, *b]


def _args_tree(*trees):
    """The structure of a tuple of arguments of the structures `trees`, as `stage` takes it."""
    return tree_util.tree_structure(
        tuple(tree_util.tree_unflatten(t, [0] * t.num_leaves) for t in trees)
    )


# ---------------------------------------------------------------------------------------------
# The primitive's rules


@linear_solve_p.def_impl
def _linear_solve_impl(*operands, call_jaxpr, **params):
    return eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *operands)


@linear_solve_p.def_abstract_eval
def _linear_solve_abstract_eval(*avals, call_jaxpr, **params):
    return call_jaxpr.out_avals


@linear_solve_p.def_weak_type
def _linear_solve_weak_type(weak_flags, *, call_jaxpr, **params):
    return [a.weak_type for a in call_jaxpr.out_avals]


@linear_solve_p.def_jvp
def _linear_solve_jvp(primals, tangents, **params):
    # A x = b, so A' x + A x' = b' and x' = A⁻¹ (b' - A' x): another solve, whatever the
    # solver did. Tangents of the solvers' own consts do not enter (the solution does not
    # depend on how it was found).
    const_lengths = params["const_lengths"]
    outs = linear_solve_p.bind(*primals, **params)
    matvec_consts, *_, b = _groups(primals, const_lengths)
    matvec_dots, *_, b_dots = _groups(tangents, const_lengths)
    x = outs[: len(b)]
    rhs = list(b_dots)
    const_nonzero = [type(t) is not Zero for t in matvec_dots]
    if any(const_nonzero):
        matvec_jvp, out_nonzero = jvp_jaxpr(params["matvec"], const_nonzero + [False] * len(x))
        nonzero_dots = [t for t in matvec_dots if type(t) is not Zero]
        results = eval_jaxpr(matvec_jvp.jaxpr, matvec_jvp.consts, *matvec_consts, *x, *nonzero_dots)
        matvec_dots_out = iter(results[len(x) :])
        rhs = [
            add_tangents(r, neg(next(matvec_dots_out))) if nonzero else r
            for r, nonzero in zip(rhs, out_nonzero)
        ]
    aux_zeros = [Zero(tangent_aval(core.get_aval(a))) for a in outs[len(b) :]]
    if all(type(r) is Zero for r in rhs):
        return outs, [Zero(tangent_aval(core.get_aval(v))) for v in x] + aux_zeros
    consts = primals[: sum(const_lengths)]
    x_dot = linear_solve_p.bind(*consts, *map(instantiate, rhs), **params)[: len(b)]
    return outs, list(x_dot) + aux_zeros


@linear_solve_p.def_transpose
def _linear_solve_transpose(cotangents, *operands, **params):
    const_lengths = params["const_lengths"]
    num_consts = sum(const_lengths)
    if any(is_undefined(c) for c in operands[:num_consts]):
        raise NotImplementedError(
            "custom_linear_solve is linear in b only: it cannot be transposed with respect to "
            "the values matvec or solve close over"
        )
    if params["transpose_call_jaxpr"] is None:
        raise TypeError(
            "custom_linear_solve needs transpose_solve (or symmetric=True) for reverse-mode "
            "differentiation: the cotangent of b is the solution of the transposed system"
        )
    num_b = len(operands) - num_consts
    cts_x = [instantiate(ct) for ct in cotangents[:num_b]]
    transposed = dict(
        matvec=params["vecmat"],
        vecmat=params["matvec"],
        call_jaxpr=params["transpose_call_jaxpr"],
        transpose_call_jaxpr=params["call_jaxpr"],
        const_lengths=_transposed(const_lengths),
    )
    consts = _swap(list(operands[:num_consts]) + cts_x, const_lengths)
    cts_b = linear_solve_p.bind(*consts, **transposed)[:num_b]
    return [None] * num_consts + list(cts_b)


@linear_solve_p.def_batch
def _linear_solve_batch(values, dims, **params):
    # Every lane solves its own system: b and x are batched whenever anything is (a batched
    # matrix gives a batched solution), and the consts keep their own batching.
    const_lengths = params["const_lengths"]
    num_consts = sum(const_lengths)
    size = batching.batch_size(values, dims)
    values = [
        batching.bdim_at_front(v, d, size) if d is not None or i >= num_consts else v
        for i, (v, d) in enumerate(zip(values, dims))
    ]
    batched = [d is not None or i >= num_consts for i, d in enumerate(dims)]
    matvec_b, vecmat_b, *_, b_b = _groups(batched, const_lengths)

    def batch(closed, flags):
        return None if closed is None else batching.batch_jaxpr(closed, flags, size)

    outs = linear_solve_p.bind(
        *values,
        matvec=batch(params["matvec"], matvec_b + b_b),
        vecmat=batch(params["vecmat"], vecmat_b + b_b),
        call_jaxpr=batch(params["call_jaxpr"], batched),
        transpose_call_jaxpr=batch(params["transpose_call_jaxpr"], _swap(batched, const_lengths)),
        const_lengths=const_lengths,
    )
    return outs, [0] * len(outs)


# ---------------------------------------------------------------------------------------------
# custom_linear_solve


def _staged_solve(solve, matvec, b_tree, b_avals, has_aux: bool, what: str, input_name: str):
    """Stage `solve(matvec, b)`; returns (jaxpr of (consts, b) -> (*x, *aux), consts, aux tree)."""

    def solved(b):
        out = solve(matvec, b)
        if has_aux and not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(
                f"{what} must return a pair (x, aux) when has_aux=True, got {type(out).__name__}"
            )
        return tuple(out) if has_aux else out

    jaxpr, consts, out_tree = stage(solved, _args_tree(b_tree), b_avals, what)
    x_tree, aux_tree = out_tree.children() if has_aux else (out_tree, None)
    num_x = x_tree.num_leaves
    check_same_types(
        f"{what}'s solution and {input_name}",
        b_avals,
        jaxpr.out_avals[:num_x],
        b_tree,
        x_tree,
    )
    return jaxpr, consts, aux_tree


def _linear_transpose_program(matvec: ClosedJaxpr, num_consts: int) -> ClosedJaxpr:
    """The program (consts, y) -> Aᵀ y of matvec's (consts, x) -> A x, by transposition."""
    const_avals = matvec.in_avals[:num_consts]
    x_avals = matvec.in_avals[num_consts:]

    def vecmat(*args):
        consts, y = args[:num_consts], args[num_consts:]
        undefined = [UndefinedPrimal(a) for a in x_avals]
        cts = backward_pass(matvec.jaxpr, matvec.consts, [*consts, *undefined], list(y))
        return [instantiate(ct) for ct in cts[num_consts:]]

    closed, _ = trace_to_jaxpr(
        vecmat, [*const_avals, *matvec.out_avals], "custom_linear_solve vecmat"
    )
    return closed


def custom_linear_solve(
    matvec: Callable,
    b,
    solve: Callable,
    transpose_solve: Callable | None = None,
    symmetric: bool = False,
    has_aux: bool = False,
):
    """x solving the linear system matvec(x) == b, by `solve(matvec, b)`, differentiated
    implicitly.

    Derivatives never go through `solve` (which may iterate, stop gradients, or call anything):
    the tangent of x is solve(matvec, b' - matvec'(x)), the derivative of the equation, and
    reverse mode solves the transposed system with `transpose_solve(vecmat, ct)`, where vecmat
    is matvec's transpose (found by transposing matvec, or matvec itself when `symmetric`).
    `b` and x are pytrees of one structure; with `has_aux`, solve and transpose_solve return
    (x, aux) and so does this function (aux is not differentiated).
    """
    b_leaves, b_tree = tree_util.tree_flatten(b)
    b_leaves = [asarray(leaf) for leaf in b_leaves]
    b_avals = avals_of(b_leaves)
    matvec_jaxpr, matvec_consts, matvec_tree = stage(
        matvec, _args_tree(b_tree), b_avals, "custom_linear_solve matvec"
    )
    check_same_types(
        "custom_linear_solve's matvec(x) and b",
        b_avals,
        matvec_jaxpr.out_avals,
        b_tree,
        matvec_tree,
    )
    solve_jaxpr, solve_consts, aux_tree = _staged_solve(
        solve, matvec, b_tree, b_avals, has_aux, "custom_linear_solve solve", "b"
    )
    if symmetric and transpose_solve is None:
        transpose_solve = solve
    if transpose_solve is None:
        vecmat_jaxpr, vecmat_consts = None, []
        tsolve_jaxpr, tsolve_consts = None, []
    else:
        if symmetric:
            vecmat_jaxpr, vecmat_consts = matvec_jaxpr, matvec_consts
        else:
            vecmat_jaxpr = _linear_transpose_program(matvec_jaxpr, len(matvec_consts))
            vecmat_consts = matvec_consts

        def vecmat(y):
            leaves = tree_util.tree_leaves(y)
            out = eval_jaxpr(vecmat_jaxpr.jaxpr, vecmat_jaxpr.consts, *vecmat_consts, *leaves)
            return tree_util.tree_unflatten(b_tree, out)

        tsolve_jaxpr, tsolve_consts, _ = _staged_solve(
            transpose_solve,
            vecmat,
            b_tree,
            b_avals,
            has_aux,
            "custom_linear_solve transpose_solve",
            "b",
        )
    groups = [matvec_consts, vecmat_consts, solve_consts, tsolve_consts]
    const_lengths = tuple(len(g) for g in groups)
    operands = [asarray(c) for g in groups for c in g] + b_leaves
    avals = avals_of(operands)
    b_positions = list(range(sum(const_lengths), len(operands)))
    # Both orders put the matvec and vecmat consts first, then the solve's own.
    solve_start = const_lengths[0] + const_lengths[1]
    solve_reads = list(range(solve_start, solve_start + const_lengths[2]))
    call_jaxpr = _reading(solve_jaxpr, avals, solve_reads + b_positions)
    transpose_call = None
    if tsolve_jaxpr is not None:
        tsolve_reads = list(range(solve_start, solve_start + const_lengths[3]))
        transpose_call = _reading(
            tsolve_jaxpr, _swap(avals, const_lengths), tsolve_reads + b_positions
        )
    outs = linear_solve_p.bind(
        *operands,
        matvec=matvec_jaxpr,
        vecmat=vecmat_jaxpr,
        call_jaxpr=call_jaxpr,
        transpose_call_jaxpr=transpose_call,
        const_lengths=const_lengths,
    )
    x = tree_util.tree_unflatten(b_tree, outs[: len(b_leaves)])
    if has_aux:
        return x, tree_util.tree_unflatten(aux_tree, outs[len(b_leaves) :])
    return x


# ---------------------------------------------------------------------------------------------
# custom_root


class _RootPrograms:
    """custom_root's staged programs, static to its custom_jvp function: f ((f_consts, x) ->
    f(x)), solve ((solve_consts, guess) -> (x, aux)) and linearize-and-solve
    ((ls_consts, x, y) -> tangent_solve(∂f/∂x at x, y))."""

    def __init__(self, f, solve, linearize_and_solve, num_x: int):
        self.f = f
        self.solve = solve
        self.linearize_and_solve = linearize_and_solve
        self.num_x = num_x


def _run(closed: ClosedJaxpr, *args) -> list:
    return eval_jaxpr(closed.jaxpr, closed.consts, *args)


def _root_call(programs: _RootPrograms, f_consts, solve_consts, ls_consts, guess):
    return _run(programs.solve, *solve_consts, *guess)


def _zero_tangent_like(x):
    aval = core.get_aval(x)
    if dtypes.is_inexact(aval.dtype):
        return full(aval.shape, 0, aval.dtype)
    return np.zeros(aval.shape, float0)


def _root_jvp(programs: _RootPrograms, primals, tangents):
    # f(p, x(p)) = 0, so ∂f/∂p p' + ∂f/∂x x' = 0 and x' = -(∂f/∂x)⁻¹ (∂f/∂p p'), whose solve
    # is the user's tangent_solve; the solver's own values get no derivative.
    from funcgrad.transforms.autodiff import jvp

    f_consts, solve_consts, ls_consts, guess = primals
    f_dots = tangents[0]
    # The solve again through _root, so that an outer derivative takes this rule too.
    outs = _root(programs, *primals)
    solution = outs[: programs.num_x]
    differentiable = [dtypes.is_inexact(core.get_aval(c).dtype) for c in f_consts]

    def f_of_params(*params):
        params = iter(params)
        consts = [next(params) if d else c for c, d in zip(f_consts, differentiable)]
        return _run(programs.f, *consts, *solution)

    params = [c for c, d in zip(f_consts, differentiable) if d]
    params_dot = [t for t, d in zip(f_dots, differentiable) if d]
    if params:
        _, rhs = jvp(f_of_params, params, params_dot)
    else:
        rhs = [_zero_tangent_like(x) for x in solution]
    solution_dot = _run(programs.linearize_and_solve, *ls_consts, *solution, *rhs)
    solution_dot = [
        neg(t) if dtypes.is_inexact(core.get_aval(x).dtype) else np.zeros(x.shape, float0)
        for t, x in zip(solution_dot, solution)
    ]
    aux_dots = [_zero_tangent_like(a) for a in outs[programs.num_x :]]
    return outs, solution_dot + aux_dots


_root = custom_jvp(_root_call, nondiff_argnums=(0,))
_root.defjvp(_root_jvp)


def custom_root(
    f: Callable, initial_guess, solve: Callable, tangent_solve: Callable, has_aux: bool = False
):
    """The root x of f(x) = 0 found by `solve(f, initial_guess)`, differentiated implicitly.

    The derivative of x with respect to what f closes over comes from the implicit function
    theorem, x' = -(∂f/∂x)⁻¹ (∂f/∂params · params'), never from solve's iterations (solve may be
    a while loop, stop gradients or be non-differentiable). `tangent_solve(g, y)` solves the
    linear system g(x') = y, where g is f linearized at the root: for a scalar,
    `lambda g, y: y / g(1.0)`; in general a linear solve (e.g. with custom_linear_solve) that
    reverse mode can transpose. initial_guess, f's outputs and the root are pytrees of one
    structure; with `has_aux`, solve returns (x, aux), and so does this function (aux is not
    differentiated).
    """
    from funcgrad.transforms.autodiff import jvp

    guess_leaves, guess_tree = tree_util.tree_flatten(initial_guess)
    guess_leaves = [asarray(x) for x in guess_leaves]
    guess_avals = avals_of(guess_leaves)
    num_x = len(guess_leaves)
    f_jaxpr, f_consts, f_tree = stage(f, _args_tree(guess_tree), guess_avals, "custom_root f")
    check_same_types(
        "custom_root's f(x) and initial_guess", guess_avals, f_jaxpr.out_avals, guess_tree, f_tree
    )
    solve_jaxpr, solve_consts, aux_tree = _staged_solve(
        solve, f, guess_tree, guess_avals, has_aux, "custom_root solve", "initial_guess"
    )

    def linearize_and_solve(x, y):
        def linearized(v):
            # A Python scalar direction (g(1.0)) takes the dtype of x.
            v = tree_util.tree_map(
                lambda d, p: asarray(d, p.dtype) if dtypes.is_python_scalar(d) else d, v, x
            )
            return jvp(f, (x,), (v,))[1]

        return tangent_solve(linearized, y)

    ls_jaxpr, ls_consts, ls_tree = stage(
        linearize_and_solve,
        _args_tree(guess_tree, guess_tree),
        guess_avals * 2,
        "custom_root tangent_solve",
    )
    check_same_types(
        "custom_root's tangent_solve(g, y) and initial_guess",
        guess_avals,
        ls_jaxpr.out_avals,
        guess_tree,
        ls_tree,
    )
    programs = _RootPrograms(f_jaxpr, solve_jaxpr, ls_jaxpr, num_x)
    outs = _root(programs, f_consts, solve_consts, ls_consts, guess_leaves)
    x = tree_util.tree_unflatten(guess_tree, outs[:num_x])
    if has_aux:
        return x, tree_util.tree_unflatten(aux_tree, outs[num_x:])
    return x
