"""Taylor-mode differentiation: the jet trace.

A `JetTracer` carries a truncated path x(t) = x_0 + x_1 t + x_2 t^2 / 2! + ... + x_K t^K / K!:
its primal x_0 and its terms [x_1, ..., x_K], the derivatives of the path at t = 0. Each
primitive p maps it to the derivatives of p(x(t)), so a program of primitives propagates the
whole polynomial in one pass (Faà di Bruno's formula, evaluated numerically).

No primitive declares a rule of its own for this:
- a primitive linear in its operands (one with a transpose rule, as `linear_transpose` reads
  it) maps each term as its jvp rule maps a tangent;
- `mul`, `dot_general` and `conv_general_dilated` combine the terms of their two operands by
  Leibniz's rule, and `div` by the quotient recurrence;
- every other primitive is differentiated through its jvp rule, because the derivative of
  y(t) = p(x(t)) is y'(t) = jvp_p(x(t); x'(t)): the terms y_1..y_K are the jet of order K - 1
  of the jvp rule, at the path (x_0..x_{K-1}) with the tangent path (x_1..x_K). So a jet of
  order K recurses into jets of order K - 1, down to plain evaluation. sin's rule asks for cos
  of the same path, whose rule asks for sin again: the jets each call computes are memoized by
  the identity of their terms, so an elementwise function of order K costs O(K) jets of
  products, O(K^3) operations, rather than the O(2^K) of nested jvps.
A jitted function's program is transformed into the jet program of the same order, and that is
jitted (compiled once for each order and set of operands on paths); scan, while and cond run on
the jet programs of their body and branches (through their jvp rules, each order would triple
the body); checkpoint calls and custom_vjp functions are inlined; a custom_jvp function's
Taylor terms come from its jvp rule, so that its first term is the rule's jvp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import reduce

from funcgrad import caches, core, dtypes
from funcgrad.errors import ConcretizationTypeError
from funcgrad.interpreters.ad import Zero, instantiate, zeros_like_aval
from funcgrad.ir import ClosedJaxpr, eval_jaxpr

# Linear in each of these operands alone; when another operand carries a path too, the
# product rule (`_BILINEAR`), the quotient rule (`div`) or the jvp rule applies instead.
_LINEAR_OPERANDS: dict[str, tuple[int, ...]] = {
    "div": (0,),
    "triangular_solve": (1,),
    "scatter_mul": (0,),
    "select_and_scatter_add": (0,),
}
_BILINEAR = ("mul", "dot_general", "conv_general_dilated")
# Calls whose program is evaluated on the paths directly (jit's is transformed and compiled).
_INLINED = {"checkpoint": "jaxpr", "custom_vjp_call": "call_jaxpr"}


class JetTracer(core.Tracer):
    __slots__ = ("primal", "terms")

    def __init__(self, trace: JetTrace, primal, terms: list):
        self._trace = trace
        self.primal = primal
        self.terms = terms

    @property
    def aval(self) -> core.ShapedArray:
        return core.get_aval(self.primal)

    def to_concrete_value(self):
        primal = self.primal
        return primal.to_concrete_value() if isinstance(primal, core.Tracer) else primal

    # As under jvp: a Python float of a value on a path would drop its derivatives.
    def __float__(self):
        raise ConcretizationTypeError(
            self, "float() of a value carrying Taylor terms would drop them; keep it an array"
        )

    def __complex__(self):
        raise ConcretizationTypeError(
            self, "complex() of a value carrying Taylor terms would drop them; keep it an array"
        )


class JetTrace(core.Trace):
    """Propagates paths of `order` terms. `memo` is shared by the traces of one jet call."""

    def __init__(self, parent: core.Trace, order: int, memo: dict, debug_info: str):
        super().__init__(parent, debug_info)
        self.order = order
        self.memo = memo

    def path_of(self, x) -> tuple:
        """(primal, terms), terms None for a value constant along the path."""
        if type(x) is JetTracer and x._trace is self:
            return x.primal, x.terms
        if isinstance(x, core.Tracer):
            x.check_alive()
        return x, None

    def process_primitive(self, primitive, args, params):
        paths = [self.path_of(x) for x in args]
        if all(terms is None for _, terms in paths):
            with core.set_current_trace(self.parent):
                return primitive.bind(*(p for p, _ in paths), **params)
        if primitive.name in _HIGHER_ORDER_RULES:
            return _HIGHER_ORDER_RULES[primitive.name](self, paths, **params)
        if primitive.name in _INLINED:
            closed = params[_INLINED[primitive.name]]
            with core.set_current_trace(self):
                return eval_jaxpr(closed.jaxpr, closed.consts, *args)
        with core.set_current_trace(self.parent):
            outs = _propagate(self, primitive, paths, params)
        wrapped = [self.wrap(primal, terms) for primal, terms in outs]
        return wrapped if primitive.multiple_results else wrapped[0]

    def wrap(self, primal, terms):
        if terms is None or not _is_inexact(primal):
            return primal  # integer values have no derivatives
        return JetTracer(self, primal, terms)


def _propagate(trace: JetTrace, primitive, paths: list, params: dict) -> list:
    """The output paths [(primal, terms or None)] of `primitive` at the operand `paths`."""
    name = primitive.name
    if name == "stop_gradient":
        return [(primitive.bind(paths[0][0], **params), None)]
    if primitive.transpose is not None and not primitive.higher_order and name != "custom_lin":
        carrying = tuple(i for i, (_, terms) in enumerate(paths) if terms is not None)
        if name in _BILINEAR:
            if len(carrying) == 2:
                return _leibniz(trace.order, primitive, paths, params)
            return _bilinear_in_one(trace.order, primitive, paths, params)
        linear = _LINEAR_OPERANDS.get(name)
        if linear is None or set(carrying) <= set(linear):
            return _linear(trace.order, primitive, paths, params)
        if name == "div":
            return _quotient(trace.order, paths)
    return _through_jvp(trace, primitive, paths, params)


def _outputs(primitive, out) -> list:
    return list(out) if primitive.multiple_results else [out]


def _zeros(x):
    return zeros_like_aval(core.get_aval(x))


def _linear(order: int, primitive, paths: list, params: dict) -> list:
    """Each term is the jvp rule's tangent for the operands' terms of that order: the primitive
    is linear in them, and its rule knows what of its parameters is affine (a gather's fill
    value, which tangents do not take)."""
    primals = [p for p, _ in paths]
    out_terms: list = []
    for k in range(order):
        tangents = [Zero.like(p) if t is None else t[k] for p, t in paths]
        primal_out, tangent_out = primitive.jvp(primals, tangents, **params)
        out_terms.append(_outputs(primitive, tangent_out))
    outs = []
    for i, y in enumerate(_outputs(primitive, primal_out)):
        terms = [tangents_k[i] for tangents_k in out_terms]
        outs.append(
            (y, None if all(type(t) is Zero for t in terms) else list(map(instantiate, terms)))
        )
    return outs


def _bilinear_in_one(order: int, primitive, paths: list, params: dict) -> list:
    """A product with one operand constant along the path: the product of each term."""
    (a, a_terms), (b, b_terms) = paths
    terms = [
        primitive.bind(a_term, b, **params)
        if a_terms is not None
        else primitive.bind(a, b_term, **params)
        for a_term, b_term in zip(a_terms or [None] * order, b_terms or [None] * order)
    ]
    return [(primitive.bind(a, b, **params), terms)]


def _scaled(coefficient: int, x):
    from funcgrad.lax import full_like, mul

    return x if coefficient == 1 else mul(x, full_like(x, coefficient))


def _leibniz(order: int, primitive, paths: list, params: dict) -> list:
    """A product of two paths: y_k = sum_j C(k, j) p(a_j, b_(k-j))."""
    from funcgrad.lax import add

    (a, a_terms), (b, b_terms) = paths
    a_path, b_path = [a, *a_terms], [b, *b_terms]
    terms = []
    for k in range(1, order + 1):
        parts = [
            _scaled(math.comb(k, j), primitive.bind(a_path[j], b_path[k - j], **params))
            for j in range(k + 1)
        ]
        terms.append(reduce(add, parts))
    return [(primitive.bind(a, b, **params), terms)]


def _quotient(order: int, paths: list) -> list:
    """y = a / b with b on a path: from b y = a,
    y_k = (a_k - sum over j = 1..k of C(k, j) b_j y_(k-j)) / b_0."""
    from funcgrad.lax import div, mul, sub

    (a, a_terms), (b, b_terms) = paths
    y = [div(a, b)]
    for k in range(1, order + 1):
        numerator = a_terms[k - 1] if a_terms is not None else _zeros(y[0])
        for j in range(1, k + 1):
            numerator = sub(numerator, _scaled(math.comb(k, j), mul(b_terms[j - 1], y[k - j])))
        y.append(div(numerator, b))
    return [(y[0], y[1:])]


def _memo_key(primitive, paths: list, params: dict, order: int):
    try:
        key = (primitive, tuple(sorted(params.items())), order)
        hash(key)
    except TypeError:  # parameters that are arrays or lists: computed anew
        return None
    identities = tuple((id(p), None if t is None else tuple(map(id, t))) for p, t in paths)
    return (*key, identities)


def _through_jvp(trace: JetTrace, primitive, paths: list, params: dict) -> list:
    """The terms of p(x(t)) as the jet of order K - 1 of p's jvp rule at (x(t), x'(t))."""
    if primitive.jvp is None:
        reason = primitive.not_applicable.get("jvp")
        raise NotImplementedError(
            f"Taylor-mode differentiation of primitive '{primitive.name}' is not implemented"
            + (f": {reason}" if reason else "")
        )
    key = _memo_key(primitive, paths, params, trace.order)
    if key is not None and key in trace.memo:
        return trace.memo[key][0]
    lower = trace.order - 1
    if lower == 0:
        primals = [p for p, _ in paths]
        tangents = [Zero.like(p) if t is None else t[0] for p, t in paths]
        primal_out, tangent_out = primitive.jvp(primals, tangents, **params)
        outs = [
            (y, None if type(dy) is Zero else [dy])
            for y, dy in zip(_outputs(primitive, primal_out), _outputs(primitive, tangent_out))
        ]
    else:
        sub = JetTrace(trace.parent, lower, trace.memo, trace.debug_info)
        primals = [p if t is None else JetTracer(sub, p, t[:lower]) for p, t in paths]
        tangents = [Zero.like(p) if t is None else JetTracer(sub, t[0], t[1:]) for p, t in paths]
        with core.set_current_trace(sub):
            primal_out, tangent_out = primitive.jvp(primals, tangents, **params)
        outs = []
        for y, dy in zip(_outputs(primitive, primal_out), _outputs(primitive, tangent_out)):
            y0, _ = sub.path_of(y)
            if type(dy) is Zero:
                outs.append((y0, None))
                continue
            dy0, dy_terms = sub.path_of(dy)
            if dy_terms is None:  # a tangent constant along the path
                dy_terms = [_zeros(dy0) for _ in range(lower)]
            outs.append((y0, [dy0, *dy_terms]))
        sub.alive = False
    if key is not None:
        trace.memo[key] = (outs, paths)  # (the paths keep the ids in the key unique)
    return outs


def _grouped(primals: list, terms: list, groups: tuple[int, ...]) -> list:
    """Operands in a higher-order primitive's layout: each group's primals, then the terms of
    its members on paths (all K of one member, then the next), as its jvp lays out tangents."""
    flat: list = []
    start = 0
    for size in groups:
        members = range(start, start + size)
        flat += [primals[i] for i in members]
        flat += [term for i in members if terms[i] is not None for term in terms[i]]
        start += size
    return flat


def _ungrouped(flat, on_path, groups: tuple[int, ...], order: int) -> list:
    """The (primal, terms or None) pairs of a flat list in `_grouped`'s layout."""
    values = iter(flat)
    paths: list = []
    start = 0
    for size in groups:
        members = range(start, start + size)
        primals = [next(values) for _ in members]
        paths += [
            (p, [next(values) for _ in range(order)] if on_path[i] else None)
            for p, i in zip(primals, members)
        ]
        start += size
    return paths


@caches.program_cache
def _jet_program(
    closed: ClosedJaxpr,
    on_path: tuple[bool, ...],
    order: int,
    in_groups: tuple[int, ...],
    out_groups: tuple[int, ...],
    forced_out: tuple[bool, ...],
):
    """The jet of `closed` as a program in `_grouped`'s layout, and which outputs are on paths.
    Outputs `forced_out` are on paths even when constant (zero terms): a loop's carry must keep
    its type and a cond's branches must agree."""
    from funcgrad.interpreters.staging import trace_to_jaxpr

    out_on_path: list[bool] = []

    def jet_fun(*flat):
        trace = JetTrace(core.current_trace(), order, {}, "jet of a jaxpr")
        inputs = [
            p if t is None else JetTracer(trace, p, t)
            for p, t in _ungrouped(flat, on_path, in_groups, order)
        ]
        with core.set_current_trace(trace):
            outs = eval_jaxpr(closed.jaxpr, closed.consts, *inputs)
        paths = [trace.path_of(x) for x in outs]
        trace.alive = False
        paths = _on_paths(order, paths, forced_out)
        out_on_path.extend(t is not None for _, t in paths)
        return _grouped([p for p, _ in paths], [t for _, t in paths], out_groups)

    term_avals = [[a] * order if carried else None for a, carried in zip(closed.in_avals, on_path)]
    in_avals = _grouped(closed.in_avals, term_avals, in_groups)
    jet_closed, _ = trace_to_jaxpr(jet_fun, in_avals, "jet of a jaxpr")
    return jet_closed, tuple(out_on_path)


def _is_inexact(x) -> bool:
    return dtypes.is_inexact(core.get_aval(x).dtype)


def _inexact(avals) -> tuple[bool, ...]:
    return tuple(dtypes.is_inexact(a.dtype) for a in avals)


def _on_paths(order: int, paths: list, forced: Sequence[bool]) -> list:
    """`paths` with those `forced` on paths, constant ones with `order` zero terms."""
    return [
        (p, [_zeros(p) for _ in range(order)] if t is None and force else t)
        for (p, t), force in zip(paths, forced)
    ]


def _jet_of_jit(trace: JetTrace, paths: list, *, jaxpr: ClosedJaxpr, name: str) -> list:
    from funcgrad.transforms.jit import jit_p

    on_path = tuple(t is not None for _, t in paths)
    groups, out_groups = (len(paths),), (len(jaxpr.out_avals),)
    no_force = (False,) * len(jaxpr.out_avals)
    with core.set_current_trace(trace.parent):
        program, out_on_path = _jet_program(
            jaxpr, on_path, trace.order, groups, out_groups, no_force
        )
        operands = _grouped([p for p, _ in paths], [t for _, t in paths], groups)
        outs = jit_p.bind(*operands, jaxpr=program, name=f"jet({name})")
    return [trace.wrap(p, t) for p, t in _ungrouped(outs, out_on_path, out_groups, trace.order)]


def _jet_of_scan(trace: JetTrace, paths: list, *, jaxpr, num_consts, num_carry, **params) -> list:
    from funcgrad.lax.control_flow.scan import scan_p

    order = trace.order
    num_xs, num_ys = len(paths) - num_consts - num_carry, len(jaxpr.out_avals) - num_carry
    carries = range(num_consts, num_consts + num_carry)
    with core.set_current_trace(trace.parent):
        carried = [i in carries and _is_inexact(p) for i, (p, _) in enumerate(paths)]
        paths = _on_paths(order, paths, carried)
        on_path = tuple(t is not None for _, t in paths)
        forced = _inexact(jaxpr.out_avals[:num_carry]) + (False,) * num_ys
        groups, out_groups = (num_consts, num_carry, num_xs), (num_carry, num_ys)
        body, out_on_path = _jet_program(jaxpr, on_path, order, groups, out_groups, forced)
        outs = scan_p.bind(
            *_grouped([p for p, _ in paths], [t for _, t in paths], groups),
            jaxpr=body,
            num_consts=num_consts + order * sum(on_path[:num_consts]),
            num_carry=num_carry + order * sum(on_path[num_consts : num_consts + num_carry]),
            **params,
        )
    return [trace.wrap(p, t) for p, t in _ungrouped(outs, out_on_path, out_groups, order)]


@caches.program_cache
def _cond_of_primals(cond_jaxpr: ClosedJaxpr, term_avals: tuple) -> ClosedJaxpr:
    """A while loop's cond that also takes the carries' terms, and reads only the primals."""
    from funcgrad.interpreters.staging import trace_to_jaxpr

    num_primal = len(cond_jaxpr.in_avals)

    def cond(*args):
        return eval_jaxpr(cond_jaxpr.jaxpr, cond_jaxpr.consts, *args[:num_primal])

    return trace_to_jaxpr(cond, [*cond_jaxpr.in_avals, *term_avals], "jet of a while cond")[0]


def _jet_of_while(
    trace: JetTrace, paths: list, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts
) -> list:
    from funcgrad.lax.control_flow.loops import while_p

    order = trace.order
    cond_consts, body_paths = [p for p, _ in paths[:cond_nconsts]], paths[cond_nconsts:]
    num_carry = len(body_paths) - body_nconsts
    with core.set_current_trace(trace.parent):
        carry_forced = _inexact(body_jaxpr.out_avals)
        body_paths = _on_paths(order, body_paths, (False,) * body_nconsts + carry_forced)
        on_path = tuple(t is not None for _, t in body_paths)
        groups = (body_nconsts, num_carry)
        body, out_on_path = _jet_program(
            body_jaxpr, on_path, order, groups, (num_carry,), carry_forced
        )
        term_avals = tuple(
            a
            for a, carried in zip(body_jaxpr.out_avals, carry_forced)
            if carried
            for _ in range(order)
        )
        outs = while_p.bind(
            *cond_consts,
            *_grouped([p for p, _ in body_paths], [t for _, t in body_paths], groups),
            cond_jaxpr=_cond_of_primals(cond_jaxpr, term_avals),
            body_jaxpr=body,
            cond_nconsts=cond_nconsts,
            body_nconsts=body_nconsts + order * sum(on_path[:body_nconsts]),
        )
    return [trace.wrap(p, t) for p, t in _ungrouped(outs, out_on_path, (num_carry,), order)]


def _jet_of_cond(trace: JetTrace, paths: list, *, branches) -> list:
    from funcgrad.lax.control_flow.conditionals import _join_outputs, cond_p

    order = trace.order
    (index, _), operands = paths[0], paths[1:]
    on_path = tuple(t is not None for _, t in operands)
    out_avals = branches[0].out_avals
    forced = _inexact(out_avals)
    groups, out_groups = (len(operands),), (len(out_avals),)
    with core.set_current_trace(trace.parent):
        programs = [_jet_program(b, on_path, order, groups, out_groups, forced) for b in branches]
        outs = cond_p.bind(
            index,
            *_grouped([p for p, _ in operands], [t for _, t in operands], groups),
            branches=_join_outputs([program for program, _ in programs]),
        )
    out_on_path = programs[0][1]
    return [trace.wrap(p, t) for p, t in _ungrouped(outs, out_on_path, out_groups, order)]


_HIGHER_ORDER_RULES = {
    "jit": _jet_of_jit,
    "scan": _jet_of_scan,
    "while": _jet_of_while,
    "cond": _jet_of_cond,
}
