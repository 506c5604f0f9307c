"""custom_jvp and custom_vjp: derivative rules that users write for their own functions.

A decorated function is staged into a jaxpr and bound as a higher-order primitive carrying the
user's rule, so the rule survives any transformation that stages the function first. Values the
function closes over are hoisted into explicit operands; differentiating through them is an
error that says so, since the user's rule cannot know about them.

custom_vjp follows JAX: under the JVP trace, `fwd` runs on the primals and the tangent becomes a
`custom_lin` equation over the residuals, linear in the tangents, whose transpose calls `bwd`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, tree_util
from funcgrad.core import Primitive
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import Zero, float0, instantiate, tangent_aval
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.lax.elementwise import convert_element_type
from funcgrad.transforms.make_jaxpr import function_name


def _resolve_args(fun: Callable, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments become positional, so rules see one argument order."""
    if not kwargs:
        return args
    bound = inspect.signature(fun).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.args


def _stage(fun: Callable, leaves: list, name: str) -> tuple[ClosedJaxpr, list, object]:
    """Stage fun on `leaves`; consts are hoisted to leading invars and returned separately."""
    closed, out_tree = trace_to_jaxpr(fun, [x.aval for x in leaves], name)
    jaxpr = closed.jaxpr
    hoisted = Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns)
    return ClosedJaxpr(hoisted, []), closed.consts, out_tree


class _StagedCall:
    """A custom-derivative function staged on one call's arguments: its non-differentiable
    arguments (static), the flattened differentiable ones, and the staged program."""

    def __init__(self, fun: Callable, args: tuple, nondiff_argnums: tuple[int, ...], what: str):
        self.static, dynamic = _split_static(args, nondiff_argnums)
        leaves, self.in_tree = tree_util.tree_flatten(dynamic)
        self.leaves = [asarray(x) for x in leaves]

        def flat_fun(*flat):
            dynamic_args = tree_util.tree_unflatten(self.in_tree, flat)
            return fun(*_merge_static(self.static, dynamic_args, nondiff_argnums))

        self.jaxpr, self.consts, self.out_tree = _stage(flat_fun, self.leaves, what)


def _split_static(args: tuple, nondiff_argnums: tuple[int, ...]) -> tuple[list, list]:
    static = [args[i] for i in nondiff_argnums]
    dynamic = [a for i, a in enumerate(args) if i not in nondiff_argnums]
    return static, dynamic


def _merge_static(static: list, dynamic: Sequence, nondiff_argnums: tuple[int, ...]) -> list:
    static_iter, dynamic_iter = iter(static), iter(dynamic)
    total = len(static) + len(dynamic)
    return [next(static_iter) if i in nondiff_argnums else next(dynamic_iter) for i in range(total)]


def _check_no_closed_over_tangents(name: str, const_tangents: Sequence) -> None:
    if any(type(t) is not Zero for t in const_tangents):
        raise TypeError(
            f"{name} closes over a value that is being differentiated; a custom derivative rule "
            "cannot see such values. Pass the value to the function as an argument instead."
        )


def _call_impl(*args, call_jaxpr: ClosedJaxpr, **params):
    return eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)


def _call_abstract_eval(*avals, call_jaxpr: ClosedJaxpr, **params):
    return call_jaxpr.out_avals


def _call_weak_type(weak_flags, *, call_jaxpr: ClosedJaxpr, **params) -> list[bool]:
    return [a.weak_type for a in call_jaxpr.out_avals]


def _declare_call(name: str) -> Primitive:
    prim = Primitive(name, multiple_results=True, higher_order=True)
    prim.def_impl(_call_impl)
    prim.def_abstract_eval(_call_abstract_eval)
    prim.def_weak_type(_call_weak_type)
    prim.not_applicable["transpose"] = "not linear: it calls a user's function"
    return prim


# ---------------------------------------------------------------------------------------------
# Symbolic zeros: what rules defined with `symbolic_zeros=True` see of a zero tangent or
# cotangent, and of whether an argument is differentiated at all.


class SymbolicZero:
    """A tangent or cotangent known to be zero, never computed: a rule may skip the work it
    would feed (its `shape`, `dtype` and `aval` are the zero's)."""

    __slots__ = ("aval",)

    def __init__(self, aval: core.ShapedArray):
        self.aval = aval

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @staticmethod
    def from_primal_value(value) -> SymbolicZero:
        """The symbolic zero tangent of `value`."""
        return SymbolicZero(tangent_aval(core.get_aval(asarray(value))))

    def __repr__(self) -> str:
        return f"SymbolicZero({self.aval.str_short()})"


class CustomVJPPrimal:
    """An argument's value as a `custom_vjp` fwd defined with `symbolic_zeros=True` gets it:
    `perturbed` is False where the argument is not differentiated (its cotangent is never
    asked for), so fwd may keep no residuals for it."""

    __slots__ = ("value", "perturbed")

    def __init__(self, value, perturbed: bool):
        self.value = value
        self.perturbed = perturbed

    def __repr__(self) -> str:
        return f"CustomVJPPrimal({self.value!r}, perturbed={self.perturbed})"


def custom_vjp_primal_tree_values(tree):
    """The values of a pytree of `CustomVJPPrimal`s."""
    return tree_util.tree_map(
        lambda x: x.value, tree, is_leaf=lambda x: isinstance(x, CustomVJPPrimal)
    )


def zero_from_primal(value, symbolic_zeros: bool = False):
    """Zero tangents for a pytree of primal values: `SymbolicZero`s, or arrays of zeros."""
    from funcgrad import numpy as fnp

    make = SymbolicZero.from_primal_value if symbolic_zeros else fnp.zeros_like
    return tree_util.tree_map(make, value)


def _symbolic(tangent):
    return SymbolicZero(tangent.aval) if type(tangent) is Zero else tangent


# ---------------------------------------------------------------------------------------------
# custom_jvp

custom_jvp_call_p = _declare_call("custom_jvp_call")


class _FlatJVPRule:
    """The user's jvp rule on flat lists of leaves, checked against the function's outputs."""

    def __init__(
        self, rule, static, nondiff_argnums, in_tree, out_tree, out_avals, name, symbolic_zeros
    ):
        self.rule = rule
        self.static = static
        self.nondiff_argnums = nondiff_argnums
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.out_avals = out_avals
        self.__name__ = name
        # Whether the rule takes zero tangents as `SymbolicZero`s (its caller then passes
        # symbolic `Zero`s on rather than instantiating them).
        self.symbolic_zeros = symbolic_zeros

    def __call__(self, primals: list, tangents: list) -> tuple[list, list]:
        primal_args = tree_util.tree_unflatten(self.in_tree, primals)
        tangent_args = tree_util.tree_unflatten(self.in_tree, [_symbolic(t) for t in tangents])
        out = self.rule(*self.static, tuple(primal_args), tuple(tangent_args))
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(
                f"the jvp rule of {self.__name__} must return a pair (primal_out, tangent_out)"
            )
        primal_leaves, primal_tree = tree_util.tree_flatten(out[0])
        tangent_leaves, tangent_tree = tree_util.tree_flatten(out[1])
        if primal_tree != self.out_tree or tangent_tree != self.out_tree:
            raise TypeError(
                f"the jvp rule of {self.__name__} must return primal and tangent outputs with "
                f"the function's output structure {self.out_tree}; got {primal_tree} and "
                f"{tangent_tree}"
            )
        primal_leaves = [asarray(p) for p in primal_leaves]
        for aval, primal in zip(self.out_avals, primal_leaves):
            if primal.shape != aval.shape or primal.dtype != aval.dtype:
                raise TypeError(
                    f"the jvp rule of {self.__name__} returned a primal output of type "
                    f"{primal.aval.str_short()} for an output of type {aval.str_short()}"
                )
        return primal_leaves, [
            self._checked_tangent(t, aval) for t, aval in zip(tangent_leaves, self.out_avals)
        ]

    def _checked_tangent(self, tangent, aval):
        expected = tangent_aval(aval)
        if isinstance(tangent, SymbolicZero):
            if tangent.shape != expected.shape or tangent.dtype != expected.dtype:
                raise TypeError(
                    f"the jvp rule of {self.__name__} returned a {tangent!r} for an output of "
                    f"type {aval.str_short()}"
                )
            return Zero(expected)
        if expected.dtype == float0:
            if getattr(tangent, "dtype", None) != float0 or tangent.shape != expected.shape:
                raise TypeError(
                    f"the jvp rule of {self.__name__} must return float0 zeros of shape "
                    f"{expected.shape} as the tangent of its {aval.str_short()} output"
                )
            return Zero(expected)
        tangent = asarray(tangent)
        if tangent.shape != expected.shape or tangent.dtype != expected.dtype:
            raise TypeError(
                f"the jvp rule of {self.__name__} returned a tangent of type "
                f"{tangent.aval.str_short()} for an output of type {aval.str_short()}"
            )
        return tangent


@custom_jvp_call_p.def_jvp
def _custom_jvp_call_jvp(primals, tangents, *, call_jaxpr, jvp, num_consts):
    _check_no_closed_over_tangents(jvp.__name__, tangents[:num_consts])
    args = primals[num_consts:]
    if getattr(jvp, "symbolic_zeros", False):
        return jvp(args, list(tangents[num_consts:]))
    return jvp(args, [instantiate(t) for t in tangents[num_consts:]])


class custom_jvp:
    """A function with a user-defined forward-mode derivative (and so reverse mode too).

    @custom_jvp
    def f(x): ...

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), ...
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None
        self.symbolic_zeros = False

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        """`symbolic_zeros=True`: the rule gets a `SymbolicZero` for each tangent known to be
        zero (an argument not differentiated), and may return one."""
        self.jvp = jvp
        self.symbolic_zeros = symbolic_zeros
        return jvp

    def defjvps(self, *tangent_rules: Callable | None) -> None:
        """One rule per argument: `rule(tangent, primal_out, *primals)` is its contribution."""

        def jvp(primals, tangents):
            primal_out = self(*primals)
            tangent_out = None
            for rule, tangent in zip(tangent_rules, tangents):
                if rule is None:
                    continue
                contribution = rule(tangent, primal_out, *primals)
                tangent_out = (
                    contribution
                    if tangent_out is None
                    else tree_util.tree_map(lambda a, b: a + b, tangent_out, contribution)
                )
            if tangent_out is None:
                from funcgrad import numpy as fnp

                tangent_out = tree_util.tree_map(fnp.zeros_like, primal_out)
            return primal_out, tangent_out

        self.defjvp(jvp)

    def __call__(self, *args, **kwargs):
        name = function_name(self.fun)
        if self.jvp is None:
            raise AttributeError(
                f"no jvp rule is defined for custom_jvp function {name}; use defjvp"
            )
        args = _resolve_args(self.fun, args, kwargs)
        if core.current_trace() is core.eval_trace():
            return self.fun(*args)
        staged = _StagedCall(self.fun, args, self.nondiff_argnums, f"custom_jvp({name})")
        static, leaves, in_tree = staged.static, staged.leaves, staged.in_tree
        call_jaxpr, consts, out_tree = staged.jaxpr, staged.consts, staged.out_tree
        rule = _FlatJVPRule(
            self.jvp,
            static,
            self.nondiff_argnums,
            in_tree,
            out_tree,
            call_jaxpr.out_avals,
            name,
            self.symbolic_zeros,
        )
        outs = custom_jvp_call_p.bind(
            *consts, *leaves, call_jaxpr=call_jaxpr, jvp=rule, num_consts=len(consts)
        )
        return tree_util.tree_unflatten(out_tree, outs)


# ---------------------------------------------------------------------------------------------
# custom_vjp

custom_vjp_call_p = _declare_call("custom_vjp_call")


class _FlatVJPRules:
    """The user's fwd and bwd on flat lists of leaves."""

    def __init__(
        self, fwd, bwd, static, nondiff_argnums, in_tree, out_tree, in_avals, name, symbolic_zeros
    ):
        self.fwd = fwd
        self.bwd = bwd
        self.static = static
        self.nondiff_argnums = nondiff_argnums
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.in_avals = in_avals
        self.__name__ = name
        self.residual_tree = None
        # Whether fwd takes `CustomVJPPrimal`s and bwd `SymbolicZero` cotangents (its callers
        # then say which arguments are perturbed, and pass symbolic `Zero`s on).
        self.symbolic_zeros = symbolic_zeros

    def forward(self, primals: list, perturbed: Sequence[bool] | None = None) -> tuple[list, list]:
        """`perturbed`: per argument leaf, whether it is differentiated (all, if not said)."""
        if self.symbolic_zeros:
            flags = [True] * len(primals) if perturbed is None else perturbed
            primals = [CustomVJPPrimal(p, bool(f)) for p, f in zip(primals, flags)]
        args = _merge_static(
            self.static, tree_util.tree_unflatten(self.in_tree, primals), self.nondiff_argnums
        )
        out = self.fwd(*args)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(f"the fwd rule of {self.__name__} must return a pair (out, residuals)")
        out_leaves, out_tree = tree_util.tree_flatten(out[0])
        if out_tree != self.out_tree:
            raise TypeError(
                f"the fwd rule of {self.__name__} returned output structure {out_tree}, but the "
                f"function returns {self.out_tree}"
            )
        residual_leaves, self.residual_tree = tree_util.tree_flatten(out[1])
        return [asarray(x) for x in out_leaves], [asarray(x) for x in residual_leaves]

    def backward(self, residuals: list, cotangents: list) -> list:
        res = tree_util.tree_unflatten(self.residual_tree, residuals)
        ct = tree_util.tree_unflatten(self.out_tree, [_symbolic(c) for c in cotangents])
        cts_in = self.bwd(*self.static, res, ct)
        if not isinstance(cts_in, (tuple, list)):
            raise TypeError(
                f"the bwd rule of {self.__name__} must return a tuple with one cotangent per "
                f"differentiable argument, got {type(cts_in).__name__}"
            )
        leaves = self._cotangent_leaves(cts_in)
        return [self._checked_cotangent(ct, aval) for ct, aval in zip(leaves, self.in_avals)]

    def _cotangent_leaves(self, cts_in: Sequence) -> list:
        """bwd's cotangents as leaves; None stands for zeros of a whole argument or a leaf."""
        arg_trees = self.in_tree.children()
        trees = [tree_util.tree_structure(ct, is_leaf=_is_none) for ct in cts_in]
        if len(cts_in) != len(arg_trees) or any(
            ct is not None and tree != arg_tree
            for ct, tree, arg_tree in zip(cts_in, trees, arg_trees)
        ):
            tree = tree_util.tree_structure(list(cts_in), is_leaf=_is_none)
            raise TypeError(
                f"the bwd rule of {self.__name__} returned cotangents with structure {tree}; "
                f"the differentiable arguments have structure {self.in_tree} (None may stand "
                "for a zero cotangent)"
            )
        leaves = []
        for ct, arg_tree in zip(cts_in, arg_trees):
            if ct is None:
                leaves.extend([None] * arg_tree.num_leaves)
            else:
                leaves.extend(tree_util.tree_leaves(ct, is_leaf=_is_none))
        return leaves

    def _checked_cotangent(self, ct, aval):
        expected = tangent_aval(aval)
        if ct is None or isinstance(ct, SymbolicZero) or expected.dtype == float0:
            return Zero(expected)
        ct = asarray(ct)
        # A Python scalar argument is weakly typed: its cotangent may come in any float dtype.
        dtype_ok = ct.dtype == expected.dtype or aval.weak_type
        if ct.shape != expected.shape or not dtype_ok:
            raise ValueError(
                f"the bwd rule of {self.__name__} returned a cotangent of type "
                f"{ct.aval.str_short()} for an argument of type {aval.str_short()}"
            )
        return ct if ct.dtype == expected.dtype else convert_element_type(ct, expected.dtype)

    def __repr__(self) -> str:
        return self.__name__


def _is_none(x) -> bool:
    return x is None


@custom_vjp_call_p.def_jvp
def _custom_vjp_call_jvp(primals, tangents, *, call_jaxpr, rules, num_consts):
    _check_no_closed_over_tangents(rules.__name__, tangents[:num_consts])
    if getattr(rules, "symbolic_zeros", False):
        perturbed = [type(t) is not Zero for t in tangents[num_consts:]]
        primal_outs, residuals = rules.forward(primals[num_consts:], perturbed)
    else:
        primal_outs, residuals = rules.forward(primals[num_consts:])
    # Integer arguments have float0 tangents, which are no operands: custom_lin skips them.
    arg_tangents = [instantiate(t) for t in tangents[num_consts:] if t.aval.dtype != float0]
    tangent_outs = custom_lin_p.bind(
        *residuals,
        *arg_tangents,
        num_residuals=len(residuals),
        rules=rules,
        out_avals=tuple(tangent_aval(core.get_aval(p)) for p in primal_outs),
    )
    return primal_outs, tangent_outs


custom_lin_p = Primitive("custom_lin", multiple_results=True)


@custom_lin_p.def_abstract_eval
def _custom_lin_abstract_eval(*avals, num_residuals, rules, out_avals):
    return list(out_avals)


@custom_lin_p.def_weak_type
def _custom_lin_weak_type(weak_flags, *, num_residuals, rules, out_avals) -> list[bool]:
    return [a.weak_type for a in out_avals]


@custom_lin_p.def_impl
def _custom_lin_impl(*args, num_residuals, rules, out_avals):
    raise TypeError(
        f"cannot apply forward-mode differentiation (jvp) to custom_vjp function "
        f"{rules.__name__}: it only defines a reverse-mode rule. Use grad/vjp, or define the "
        "function with custom_jvp instead."
    )


@custom_lin_p.def_transpose
def _custom_lin_transpose(cotangents, *operands, num_residuals, rules, out_avals):
    residuals = list(operands[:num_residuals])
    symbolic = getattr(rules, "symbolic_zeros", False)
    cts = list(cotangents) if symbolic else [instantiate(ct) for ct in cotangents]
    cts_in = rules.backward(residuals, cts)
    return [None] * num_residuals + [
        ct for ct, aval in zip(cts_in, rules.in_avals) if tangent_aval(aval).dtype != float0
    ]


custom_lin_p.def_jvp(lambda primals, tangents, **params: _custom_lin_impl(**params))


class custom_vjp:
    """A function with a user-defined reverse-mode derivative.

    @custom_vjp
    def f(x): ...

    def f_fwd(x): return f(x), residuals
    def f_bwd(residuals, g): return (cotangent_of_x,)

    f.defvjp(f_fwd, f_bwd)
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        self.symbolic_zeros = False

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False) -> None:
        """`symbolic_zeros=True`: fwd gets each argument leaf as a `CustomVJPPrimal` (its value,
        and whether it is differentiated), and bwd a `SymbolicZero` for each cotangent known
        to be zero; bwd may return `SymbolicZero`s (or None) for zero cotangents."""
        self.fwd = fwd
        self.bwd = bwd
        self.symbolic_zeros = symbolic_zeros

    def __call__(self, *args, **kwargs):
        name = function_name(self.fun)
        if self.fwd is None:
            raise AttributeError(
                f"no vjp rule is defined for custom_vjp function {name}; use defvjp"
            )
        args = _resolve_args(self.fun, args, kwargs)
        if core.current_trace() is core.eval_trace():
            return self.fun(*args)
        staged = _StagedCall(self.fun, args, self.nondiff_argnums, f"custom_vjp({name})")
        static, leaves, in_tree = staged.static, staged.leaves, staged.in_tree
        call_jaxpr, consts, out_tree = staged.jaxpr, staged.consts, staged.out_tree
        rules = _FlatVJPRules(
            self.fwd,
            self.bwd,
            static,
            self.nondiff_argnums,
            in_tree,
            out_tree,
            [x.aval for x in leaves],
            name,
            self.symbolic_zeros,
        )
        outs = custom_vjp_call_p.bind(
            *consts, *leaves, call_jaxpr=call_jaxpr, rules=rules, num_consts=len(consts)
        )
        return tree_util.tree_unflatten(out_tree, outs)


# ---------------------------------------------------------------------------------------------
# Batching: the staged function is batched as a jaxpr, and the user's rules are vmapped.


def _batched_operands(values, dims):
    size = batching.batch_size(values, dims)
    in_batched = [d is not None for d in dims]
    moved = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(values, dims)]
    return moved, in_batched, size


class _BatchedJVPRule:
    """A custom_jvp rule applied lane by lane (vmapped over the batched arguments)."""

    def __init__(self, rule, in_batched: Sequence[bool]):
        self.rule = rule
        self.in_axes = [0 if b else None for b in in_batched]
        self.__name__ = rule.__name__

    def __call__(self, primals: list, tangents: list) -> tuple[list, list]:
        from funcgrad.transforms.vmap import vmap

        # The float0 tangents of integer arguments are no arrays to map: each lane gets zeros.
        lane_zeros = [
            np.zeros(t.shape[1:] if axis == 0 else t.shape, float0) if t.dtype == float0 else None
            for t, axis in zip(tangents, self.in_axes)
        ]
        mapped = [t for t, zeros in zip(tangents, lane_zeros) if zeros is None]
        mapped_axes = [axis for axis, zeros in zip(self.in_axes, lane_zeros) if zeros is None]

        zero_outs: list[bool] = []  # likewise the symbolic zero tangents of integer outputs

        def lane_rule(lane_primals, lane_tangents):
            lane_iter = iter(lane_tangents)
            full = [next(lane_iter) if zeros is None else zeros for zeros in lane_zeros]
            primal_outs, tangent_outs = self.rule(lane_primals, full)
            zero_outs.extend(type(t) is Zero for t in tangent_outs)
            return primal_outs, [t for t in tangent_outs if type(t) is not Zero]

        vmapped = vmap(lane_rule, in_axes=(self.in_axes, mapped_axes))
        primal_outs, nonzero = vmapped(primals, mapped)
        nonzero = iter(nonzero)
        return primal_outs, [
            Zero.like(p) if zero else next(nonzero) for p, zero in zip(primal_outs, zero_outs)
        ]

    def __repr__(self) -> str:
        return self.__name__


@custom_jvp_call_p.def_batch
def _custom_jvp_call_batch(values, dims, *, call_jaxpr, jvp, num_consts):
    values, in_batched, size = _batched_operands(values, dims)
    outs = custom_jvp_call_p.bind(
        *values,
        call_jaxpr=batching.batch_jaxpr(call_jaxpr, in_batched, size),
        jvp=_BatchedJVPRule(jvp, in_batched[num_consts:]),
        num_consts=num_consts,
    )
    return outs, [0] * len(outs)


class _BatchedVJPRules:
    """A custom_vjp function's fwd and bwd applied lane by lane.

    Residuals and output cotangents are batched at axis 0; the cotangent of an argument that
    was not batched is the sum over the lanes.
    """

    def __init__(self, rules, in_batched: Sequence[bool], size: int):
        self.rules = rules
        self.in_batched = list(in_batched)
        # The arguments' avals at this level, so that an outer vmap can wrap these rules again.
        self.in_avals = [
            core.ShapedArray((size, *a.shape), a.dtype, a.weak_type) if b else a
            for a, b in zip(rules.in_avals, in_batched)
        ]
        self.__name__ = rules.__name__

    def forward(self, primals: list) -> tuple[list, list]:
        from funcgrad.transforms.vmap import vmap

        in_axes = [0 if b else None for b in self.in_batched]
        return vmap(self.rules.forward, in_axes=(in_axes,))(primals)

    def backward(self, residuals: list, cotangents: list) -> list:
        from funcgrad.lax.reductions import reduce_sum
        from funcgrad.transforms.vmap import vmap

        is_zero = [tangent_aval(a).dtype == float0 for a in self.rules.in_avals]
        # The float0 cotangents of integer outputs are no arrays to map: each lane gets zeros.
        lane_zeros = [
            np.zeros(ct.shape[1:], float0) if ct.dtype == float0 else None for ct in cotangents
        ]

        def nonzero_backward(res, mapped_cts):
            mapped_iter = iter(mapped_cts)
            cts = [next(mapped_iter) if zeros is None else zeros for zeros in lane_zeros]
            cts_in = self.rules.backward(res, cts)
            return [instantiate(ct) for ct, zero in zip(cts_in, is_zero) if not zero]

        mapped = [ct for ct, zeros in zip(cotangents, lane_zeros) if zeros is None]
        lanes = iter(vmap(nonzero_backward)(residuals, mapped))
        cts_in = []
        for aval, zero, batched in zip(self.in_avals, is_zero, self.in_batched):
            if zero:
                cts_in.append(Zero(tangent_aval(aval)))
            else:
                ct = next(lanes)
                cts_in.append(ct if batched else reduce_sum(ct, (0,)))
        return cts_in

    def __repr__(self) -> str:
        return self.__name__


@custom_vjp_call_p.def_batch
def _custom_vjp_call_batch(values, dims, *, call_jaxpr, rules, num_consts):
    values, in_batched, size = _batched_operands(values, dims)
    outs = custom_vjp_call_p.bind(
        *values,
        call_jaxpr=batching.batch_jaxpr(call_jaxpr, in_batched, size),
        rules=_BatchedVJPRules(rules, in_batched[num_consts:], size),
        num_consts=num_consts,
    )
    return outs, [0] * len(outs)


# custom_lin is only ever transposed: evaluating it forwards, batched or not, is the
# forward-mode error (reached e.g. by jacfwd, which vmaps a jvp).
custom_lin_p.def_batch(lambda values, dims, **params: _custom_lin_impl(**params))


# ---------------------------------------------------------------------------------------------
# custom_gradient: the function returns its value and its own vjp function, built on custom_vjp.
# The vjp function closes over values of the forward pass; it is staged into a jaxpr so those
# values become the residuals that custom_vjp carries from fwd to bwd.


class _VJPProgram:
    """The staged vjp function: static (compared by identity) in the residuals' structure."""

    __slots__ = ("jaxpr", "cotangent_tree")

    def __init__(self, jaxpr: Jaxpr, cotangent_tree) -> None:
        self.jaxpr = jaxpr
        self.cotangent_tree = cotangent_tree


class _StagedVJP:
    """The residuals of custom_gradient: the staged vjp function and the values it closes over."""

    def __init__(self, program: _VJPProgram, consts: list) -> None:
        self.program = program
        self.consts = consts


tree_util.register_pytree_node(
    _StagedVJP,
    lambda r: (r.consts, r.program),
    lambda program, consts: _StagedVJP(program, list(consts)),
)


def custom_gradient(fun: Callable) -> Callable:
    """Give `fun` a reverse-mode derivative written inside it: `fun(*args)` returns
    `(value, vjp_fn)`, and `vjp_fn(cotangent_of_value)` returns one cotangent per positional
    argument (a tuple; a single cotangent may come bare).

    Forward mode is not available for such a function, as for custom_vjp.
    """
    name = function_name(fun)

    @functools.wraps(fun)
    def value_only(*args):
        return _split_pair(fun(*args), name)[0]

    def fwd(*args):
        value, vjp_fn = _split_pair(fun(*args), name)
        value_leaves, value_tree = tree_util.tree_flatten(value)
        cotangent_avals = [tangent_aval(asarray(x).aval) for x in value_leaves]

        def flat_vjp(*cotangents):
            return vjp_fn(tree_util.tree_unflatten(value_tree, cotangents))

        closed, cotangent_tree = trace_to_jaxpr(
            flat_vjp, cotangent_avals, f"custom_gradient({name}) vjp"
        )
        return value, _StagedVJP(_VJPProgram(closed.jaxpr, cotangent_tree), closed.consts)

    def bwd(residuals: _StagedVJP, cotangent):
        program = residuals.program
        outs = eval_jaxpr(program.jaxpr, residuals.consts, *tree_util.tree_leaves(cotangent))
        cotangents = tree_util.tree_unflatten(program.cotangent_tree, outs)
        if tree_util.treedef_is_leaf(program.cotangent_tree):
            return (cotangents,)
        return cotangents

    wrapped = custom_vjp(value_only)
    wrapped.defvjp(fwd, bwd)
    return wrapped


def _split_pair(out, name: str) -> tuple:
    if not (isinstance(out, tuple) and len(out) == 2 and callable(out[1])):
        raise TypeError(
            f"custom_gradient function {name} must return a pair (value, vjp_fn), got "
            f"{type(out).__name__}"
        )
    return out
