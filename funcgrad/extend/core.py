"""Primitives of the user's own, and the IR's types, for code that extends funcgrad.

A `Primitive` made here is an operation like lax's: it appears in jaxprs under its name, and
each interpretation asks its rules. What a rule is not given is derived from the primitive's
composite (`def_composite`: a funcgrad function of the operands and params that computes
it), when there is one:

- `impl` (eager execution, and compiled programs without a composite, which call it on host
  copies): the composite run eagerly;
- `abstract_eval`: the composite's output shapes and dtypes;
- `jvp` and `batch`: the composite differentiated and vmapped (the primal output is the
  primitive's own, so it stays one equation);
- compiled programs: the composite's equations, inlined, so they fuse with their neighbours.

`transpose` (for linear primitives) is given by hand, as in lax.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from funcgrad import core
from funcgrad.core import ShapedArray, ShapeDtypeStruct
from funcgrad.interpreters.ad import instantiate
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, eval_jaxpr

__all__ = [
    "ClosedJaxpr",
    "Jaxpr",
    "JaxprEqn",
    "Literal",
    "Primitive",
    "ShapedArray",
    "Var",
    "jaxpr_as_fun",
]


class Primitive(core.Primitive):
    """A primitive of the user's own (see the module's docstring). Declaring a name again
    (a notebook cell run twice) makes the new primitive the one files and the registry name;
    the old one keeps working where it is used."""

    user_defined = True

    def __init__(self, name: str, *, multiple_results: bool = False):
        if getattr(core.PRIMITIVES.get(name), "user_defined", False):
            del core.PRIMITIVES[name]
        super().__init__(name, multiple_results=multiple_results)
        self.composite: Callable | None = None
        self._user_impl: Callable | None = None
        self._user_abstract_eval: Callable | None = None
        self.impl = self._run_impl
        self.abstract_eval_rule = self._run_abstract_eval
        self.jvp = self._composite_jvp
        self.batch = self._composite_batch

    def bind(self, *args, **params):
        """Apply the primitive; NumPy arrays and Python scalars are taken as arrays."""
        from funcgrad.array import Array
        from funcgrad.lax.base import asarray

        operands = [
            x if type(x) is Array or isinstance(x, core.Tracer) else asarray(x) for x in args
        ]
        return super().bind(*operands, **params)

    def def_impl(self, rule: Callable) -> Callable:
        """`rule(*operands, **params)`: the operation on NumPy arrays; it may return NumPy or
        funcgrad arrays."""
        self._user_impl = rule
        return rule

    def def_abstract_eval(self, rule: Callable) -> Callable:
        """`rule(*avals, **params)`: the output's `ShapedArray` (or `ShapeDtypeStruct`; a list
        of them with `multiple_results`)."""
        self._user_abstract_eval = rule
        return rule

    def def_composite(self, fun: Callable) -> Callable:
        """`fun(*operands, **params)`: the operation as funcgrad code, from which the rules not
        given are derived and which compiled programs inline."""
        self.composite = fun
        return fun

    # ----- the rules, from the user's or from the composite

    def _run_impl(self, *values, **params):
        if self._user_impl is not None:
            out = self._user_impl(*values, **params)
            self._check_outputs(out, values, params)
        elif self.composite is not None:
            from funcgrad.lax.base import asarray

            out = self.composite(*(asarray(v) for v in values), **params)
        else:
            raise NotImplementedError(f"primitive {self.name} has no impl; use def_impl")
        if self.multiple_results:
            return [np.asarray(o) for o in out]
        return np.asarray(out)

    def _check_outputs(self, out, values, params) -> None:
        """The impl's results against the abstract evaluation's types, which every program
        around the primitive was typed by."""
        avals = self.abstract_eval(*(core.get_aval(v) for v in values), **params)
        outs, avals = (list(out), avals) if self.multiple_results else ([out], [avals])
        for i, (o, aval) in enumerate(zip(outs, avals)):
            o = np.asarray(o)
            if o.shape != aval.shape or o.dtype != aval.dtype:
                raise TypeError(
                    f"the impl of primitive {self.name} returned a {o.dtype}{list(o.shape)} as "
                    f"output {i}, where its abstract evaluation says {aval.str_short()}"
                )

    def _run_abstract_eval(self, *avals, **params):
        if self._user_abstract_eval is not None:
            out = self._user_abstract_eval(*avals, **params)
        elif self.composite is not None:
            out = self.composite_program(tuple(avals), params).out_avals
            out = out if self.multiple_results else out[0]
        else:
            raise NotImplementedError(
                f"primitive {self.name} has no abstract evaluation rule; use def_abstract_eval"
            )
        if self.multiple_results:
            return [_shaped(a, self.name) for a in out]
        return _shaped(out, self.name)

    def _composite_jvp(self, primals, tangents, **params):
        from funcgrad.transforms.autodiff import jvp

        fun = self._needs_composite("jvp rule (def_jvp)")
        primal_out = self.bind(*primals, **params)
        _, tangent_out = jvp(
            lambda *xs: fun(*xs, **params), tuple(primals), tuple(map(instantiate, tangents))
        )
        return primal_out, tangent_out

    def _composite_batch(self, values, dims, **params):
        from funcgrad.transforms.vmap import vmap

        fun = self._needs_composite("batching rule (def_batch)")
        out = vmap(lambda *xs: fun(*xs, **params), in_axes=tuple(dims))(*values)
        return out, ([0] * len(out) if self.multiple_results else 0)

    def _needs_composite(self, rule: str) -> Callable:
        if self.composite is None:
            raise NotImplementedError(
                f"primitive {self.name} has no {rule}, and no composite (def_composite) to "
                "derive one from"
            )
        return self.composite

    def composite_program(self, avals: tuple, params: dict) -> ClosedJaxpr:
        """The composite traced on operands of these types (what compiled programs inline)."""
        return _traced_composite(self, avals, _hashable(params))


@functools.lru_cache(maxsize=256)
def _traced_composite(primitive: Primitive, avals: tuple, params: tuple) -> ClosedJaxpr:
    from funcgrad.interpreters.staging import trace_to_jaxpr

    keywords = dict(params)
    closed, _ = trace_to_jaxpr(
        lambda *xs: primitive.composite(*xs, **keywords), list(avals), primitive.name
    )
    return closed


def _hashable(params: dict) -> tuple:
    try:
        items = tuple(sorted(params.items()))
        hash(items)
    except TypeError:
        raise TypeError(
            "a primitive's params must be hashable to derive its rules from its composite"
        ) from None
    return items


def _shaped(aval, name: str) -> ShapedArray:
    if isinstance(aval, ShapedArray):
        return aval
    if isinstance(aval, ShapeDtypeStruct):
        return ShapedArray(aval.shape, aval.dtype)
    raise TypeError(
        f"the abstract evaluation rule of primitive {name} returned {aval!r}; it returns a "
        "ShapedArray or ShapeDtypeStruct per output"
    )


def jaxpr_as_fun(closed: ClosedJaxpr) -> Callable:
    """A closed jaxpr as a function of its inputs, returning its outputs as a list."""
    return functools.partial(eval_jaxpr, closed.jaxpr, closed.consts)
