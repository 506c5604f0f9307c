"""The jaxpr: funcgrad's typed, first-order IR, its pretty-printer and its evaluator.

A jaxpr is a list of equations `outvars = primitive[params] invars` over typed variables. It is
the contract between tracing and compilation: transformations produce it, passes rewrite it,
backends lower it. `eval_jaxpr` binds each equation's primitive, so evaluating a jaxpr under
any trace applies that trace's interpretation to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from funcgrad import core, dtypes
from funcgrad.core import ShapedArray


class Var:
    """A jaxpr variable. Names are given when printing, so variables never need renaming."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"Var({self.aval.str_short()})"


class Literal:
    """A scalar constant written inline in the program text; or a float0 array of any shape,
    which holds no data, among the outputs of `make_jaxpr`'s programs (the tangents of
    integer and boolean values)."""

    __slots__ = ("val", "aval")

    def __init__(self, val: np.generic, aval: ShapedArray):
        self.val = val
        self.aval = aval

    def __repr__(self) -> str:
        return f"Literal({self.val})"


class SourceInfo(NamedTuple):
    """Where in the user's code an equation was traced, and the `named_scope` path it was
    traced in ("outer/inner", empty outside any)."""

    file: str
    line: int
    function: str
    scope: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line} ({self.function})"
        return f"{where} [{self.scope}]" if self.scope else where


class JaxprEqn:
    __slots__ = ("primitive", "invars", "outvars", "params", "source_info")

    def __init__(
        self,
        primitive: core.Primitive,
        invars: list[Var | Literal],
        outvars: list[Var],
        params: dict[str, Any],
        source_info: SourceInfo | None = None,
    ):
        self.primitive = primitive
        self.invars = invars
        self.outvars = outvars
        self.params = params
        self.source_info = source_info

    def __repr__(self) -> str:
        return pp_eqn(self, _Namer())


class Jaxpr:
    __slots__ = ("constvars", "invars", "outvars", "eqns")

    def __init__(
        self,
        constvars: list[Var],
        invars: list[Var],
        outvars: list[Var | Literal],
        eqns: list[JaxprEqn],
    ):
        self.constvars = constvars
        self.invars = invars
        self.outvars = outvars
        self.eqns = eqns

    @property
    def in_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.invars]

    @property
    def out_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.outvars]

    def pretty_print(self, source_info: bool = False) -> str:
        return pp_jaxpr(self, source_info=source_info)

    def __str__(self) -> str:
        return pp_jaxpr(self)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from funcgrad.viz import jaxpr_html

        return jaxpr_html(self)


class ClosedJaxpr:
    """A jaxpr with values for its constvars."""

    __slots__ = ("jaxpr", "consts", "compiled")

    def __init__(self, jaxpr: Jaxpr, consts: Sequence[Any]):
        if len(consts) != len(jaxpr.constvars):
            raise ValueError(
                f"ClosedJaxpr got {len(consts)} consts for {len(jaxpr.constvars)} constvars"
            )
        self.jaxpr = jaxpr
        self.consts = list(consts)
        # The programs compiled from it, by backend, donated inputs and GPU: they live as long
        # as it does (`transforms.jit._compile`).
        self.compiled: dict | None = None

    @property
    def in_avals(self) -> list[ShapedArray]:
        return self.jaxpr.in_avals

    @property
    def out_avals(self) -> list[ShapedArray]:
        return self.jaxpr.out_avals

    @property
    def eqns(self) -> list[JaxprEqn]:
        return self.jaxpr.eqns

    def pretty_print(self, source_info: bool = False) -> str:
        return pp_jaxpr(self.jaxpr, source_info=source_info)

    def __str__(self) -> str:
        return pp_jaxpr(self.jaxpr)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from funcgrad.viz import jaxpr_html

        return jaxpr_html(self)


# ---------------------------------------------------------------------------------------------
# Evaluation


def eval_jaxpr(jaxpr: Jaxpr, consts: Sequence[Any], *args) -> list[Any]:
    """Evaluate `jaxpr` by binding each equation under the current trace."""
    if len(args) != len(jaxpr.invars):
        raise TypeError(f"jaxpr takes {len(jaxpr.invars)} arguments, got {len(args)}")
    env: dict[Var, Any] = {}

    def read(v):
        return literal_value(v) if type(v) is Literal else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        outs = eqn.primitive.bind(*map(read, eqn.invars), **eqn.params)
        if eqn.primitive.multiple_results:
            env.update(zip(eqn.outvars, outs))
        else:
            env[eqn.outvars[0]] = outs
    return [read(v) for v in jaxpr.outvars]


def literal_value(literal: Literal):
    from funcgrad.array import Array

    if core.is_float0(literal.val):
        return literal.val  # (as transformations give float0 values: NumPy arrays)
    return Array(literal.val, literal.aval.weak_type)


def float0_literal(shape: tuple[int, ...]) -> Literal:
    """The float0 zeros of `shape`, written inline."""
    return Literal(np.zeros(shape, dtypes.float0), ShapedArray(shape, dtypes.float0))


# ---------------------------------------------------------------------------------------------
# Type checking


def check_jaxpr(jaxpr: Jaxpr | ClosedJaxpr) -> None:
    """Raise `JaxprTypeError` unless every variable is defined once before it is read, every
    literal's value has its type, and every equation's results have the types its primitive's
    abstract evaluation gives its operands (nested programs too). What a transformation or a
    compiler pass builds must type as what tracing builds; `config.enable_checks` checks each
    program as it is made."""
    if type(jaxpr) is ClosedJaxpr:
        _check_consts(jaxpr, "the program")
        jaxpr = jaxpr.jaxpr
    _check(jaxpr, [])


def _check(jaxpr: Jaxpr, where: list[str]) -> None:
    from funcgrad.errors import JaxprTypeError

    defined: set = set()

    def fail(message: str, *variables):
        """`message` with `{}` for the names `variables` have in the program printed below."""
        namer = _Namer()
        text = "\n".join(_pp_jaxpr_lines(jaxpr, namer, 0, False))
        message = message.format(*map(namer, variables))
        place = " in ".join(reversed(where))
        raise JaxprTypeError(f"{message}{' in ' + place if place else ''}:\n{text}")

    def define(v) -> None:
        if type(v) is not Var:
            fail(f"{v!r} stands where a variable is defined")
        if v in defined:
            fail("variable {} is defined twice", v)
        defined.add(v)

    def read(v, what: str) -> None:
        if type(v) is Literal:
            value = np.asarray(v.val)
            if value.shape != v.aval.shape or (
                value.dtype != v.aval.dtype and not core.is_float0(v.val)
            ):
                fail(
                    f"literal {value} of {what}, a {value.dtype} of shape {value.shape}, is "
                    f"typed {v.aval.str_short()}"
                )
        elif v not in defined:
            fail(what + " reads variable {}, which is not defined before it", v)

    for v in (*jaxpr.constvars, *jaxpr.invars):
        define(v)
    for number, eqn in enumerate(jaxpr.eqns):
        what = f"equation {number} ({eqn.primitive.name})"
        for v in eqn.invars:
            read(v, what)
        try:
            produced = eqn.primitive.abstract_eval(*(v.aval for v in eqn.invars), **eqn.params)
        except Exception as error:
            fail(f"{what} does not type: {type(error).__name__}: {error}")
        produced = produced if eqn.primitive.multiple_results else [produced]
        recorded = [v.aval for v in eqn.outvars]
        if [(a.shape, a.dtype) for a in produced] != [(a.shape, a.dtype) for a in recorded]:
            fail(
                f"{what} makes {[a.str_short() for a in produced]} but its results are typed "
                f"{[a.str_short() for a in recorded]}"
            )
        for v in eqn.outvars:
            define(v)
        for name, value in eqn.params.items():
            for inner in _programs_in(value):
                if type(inner) is ClosedJaxpr:
                    _check_consts(inner, f"parameter {name!r} of {what}")
                    inner = inner.jaxpr
                _check(inner, [*where, f"parameter {name!r} of {what}"])
    for v in jaxpr.outvars:
        read(v, "the program's outputs")


def _check_consts(closed: ClosedJaxpr, what: str) -> None:
    from funcgrad.errors import JaxprTypeError

    for v, c in zip(closed.jaxpr.constvars, closed.consts):
        aval = core.get_aval(c)
        if (aval.shape, aval.dtype) != (v.aval.shape, v.aval.dtype):
            raise JaxprTypeError(
                f"a constant of {what} is a {aval.str_short()} for a variable typed "
                f"{v.aval.str_short()}"
            )


def _programs_in(value) -> list:
    if type(value) in (Jaxpr, ClosedJaxpr):
        return [value]
    if type(value) in (tuple, list):
        return [p for v in value for p in _programs_in(v)]
    return []


# ---------------------------------------------------------------------------------------------
# Pretty-printing


class _Namer:
    """Names variables a, b, ..., z, ba, bb, ... in order of first appearance."""

    def __init__(self):
        self.names: dict[Var, str] = {}

    def __call__(self, v: Var | Literal) -> str:
        if type(v) is Literal:
            return f"{_literal_text(v.val)}:{v.aval.str_short()}"
        name = self.names.get(v)
        if name is None:
            name = self.names[v] = _nth_name(len(self.names))
        return name

    def binder(self, v: Var) -> str:
        return f"{self(v)}:{v.aval.str_short()}"


def _nth_name(n: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    name = letters[n % 26]
    n //= 26
    while n:
        name = letters[n % 26] + name
        n //= 26
    return name


def _literal_text(val) -> str:
    if core.is_float0(val):
        return "0"
    value = np.asarray(val).item()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _param_text(value, namer: _Namer, indent: int) -> str:
    if isinstance(value, ClosedJaxpr):
        value = value.jaxpr
    if isinstance(value, Jaxpr):
        inner = _pp_jaxpr_lines(value, _Namer(), indent + 2, source_info=False)
        return "\n" + "\n".join(inner)
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, (Jaxpr, ClosedJaxpr)) for v in value)
    ):
        return (
            "("
            + "".join(_param_text(v, namer, indent) for v in value)
            + "\n"
            + " " * (indent + 2)
            + ")"
        )
    if isinstance(value, np.dtype):
        return value.name
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return str(value)


def pp_eqn(eqn: JaxprEqn, namer: _Namer, indent: int = 0, source_info: bool = False) -> str:
    lhs = " ".join(namer.binder(v) for v in eqn.outvars) or "_"
    params = ""
    if eqn.params:
        params = (
            "["
            + " ".join(
                f"{k}={_param_text(v, namer, indent)}" for k, v in sorted(eqn.params.items())
            )
            + "]"
        )
    args = " ".join(namer(v) for v in eqn.invars)
    text = f"{lhs} = {eqn.primitive.name}{params} {args}".rstrip()
    if source_info and eqn.source_info is not None:
        text += f"    # {eqn.source_info}"
    return text


def _pp_jaxpr_lines(jaxpr: Jaxpr, namer: _Namer, indent: int, source_info: bool) -> list[str]:
    pad = " " * indent
    consts = " ".join(namer.binder(v) for v in jaxpr.constvars)
    args = " ".join(namer.binder(v) for v in jaxpr.invars)
    lines = [f"{pad}{{ lambda {consts}; {args}. let"]
    for eqn in jaxpr.eqns:
        lines.append(f"{pad}    {pp_eqn(eqn, namer, indent + 4, source_info)}")
    outs = ", ".join(namer(v) for v in jaxpr.outvars)
    outs = f"({outs},)" if len(jaxpr.outvars) == 1 else f"({outs})"
    lines.append(f"{pad}  in {outs} }}")
    return lines


def pp_jaxpr(jaxpr: Jaxpr, source_info: bool = False) -> str:
    return "\n".join(_pp_jaxpr_lines(jaxpr, _Namer(), 0, source_info))
