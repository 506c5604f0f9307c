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
jitted (compiled once for each order and set of operands on paths); checkpoint calls and
custom_vjp functions are inlined; a custom_jvp function's Taylor terms come from its jvp rule,
so that its first term is the rule's jvp.
"""

from __future__ import annotations

import math
from functools import reduce

from funcgrad import caches, core, dtypes
from funcgrad.errors import ConcretizationTypeError
from funcgrad.interpreters.ad import Zero, zeros_like_aval
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
        if primitive.name == "jit":
            return _jet_of_jit(self, paths, **params)
        if primitive.name in _INLINED:
            closed = params[_INLINED[primitive.name]]
            with core.set_current_trace(self):
                return eval_jaxpr(closed.jaxpr, closed.consts, *args)
        with core.set_current_trace(self.parent):
            outs = _propagate(self, primitive, paths, params)
        wrapped = [self.wrap(primal, terms) for primal, terms in outs]
        return wrapped if primitive.multiple_results else wrapped[0]

    def wrap(self, primal, terms):
        if terms is None or not dtypes.is_inexact(core.get_aval(primal).dtype):
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
            (y, None if all(type(t) is Zero for t in terms) else list(map(_instantiate, terms)))
        )
    return outs


def _instantiate(term):
    return zeros_like_aval(term.aval) if type(term) is Zero else term


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


@caches.program_cache
def _jet_program(closed: ClosedJaxpr, on_path: tuple[bool, ...], order: int):
    """(primals, the terms of those `on_path`) -> (primal outs, the terms of outs on paths),
    and which outputs are on paths."""
    from funcgrad.interpreters.staging import trace_to_jaxpr

    out_on_path: list[bool] = []

    def jet_fun(*flat):
        primals, terms = flat[: len(on_path)], iter(flat[len(on_path) :])
        trace = JetTrace(core.current_trace(), order, {}, "jet of a jaxpr")
        inputs = [
            JetTracer(trace, p, [next(terms) for _ in range(order)]) if carried else p
            for p, carried in zip(primals, on_path)
        ]
        with core.set_current_trace(trace):
            outs = eval_jaxpr(closed.jaxpr, closed.consts, *inputs)
        paths = [trace.path_of(x) for x in outs]
        trace.alive = False
        out_on_path.extend(t is not None for _, t in paths)
        return [p for p, _ in paths] + [term for _, t in paths if t is not None for term in t]

    term_avals = [
        a for a, carried in zip(closed.in_avals, on_path) if carried for _ in range(order)
    ]
    jet_closed, _ = trace_to_jaxpr(jet_fun, [*closed.in_avals, *term_avals], "jet of a jaxpr")
    return jet_closed, tuple(out_on_path)


def _jet_of_jit(trace: JetTrace, paths: list, *, jaxpr: ClosedJaxpr, name: str) -> list:
    from funcgrad.transforms.jit import jit_p

    on_path = tuple(t is not None for _, t in paths)
    with core.set_current_trace(trace.parent):
        jet_closed, out_on_path = _jet_program(jaxpr, on_path, trace.order)
        terms_in = [term for _, t in paths if t is not None for term in t]
        outs = jit_p.bind(*(p for p, _ in paths), *terms_in, jaxpr=jet_closed, name=f"jet({name})")
    primals_out, terms_out = outs[: len(out_on_path)], iter(outs[len(out_on_path) :])
    return [
        trace.wrap(p, [next(terms_out) for _ in range(trace.order)] if carried else None)
        for p, carried in zip(primals_out, out_on_path)
    ]
