"""ir.check_jaxpr and config.enable_checks: ill-typed programs are named where they are made."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.compiler import passes
from funcgrad.core import ShapedArray
from funcgrad.errors import JaxprTypeError
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, check_jaxpr
from funcgrad.lax.elementwise import add_p, sin_p


def _program():
    return fg.make_jaxpr(lambda x, y: fnp.sin(x) + y * 2)(
        np.ones(3, np.float32), np.ones(3, np.float32)
    )


def test_traced_programs_type():
    check_jaxpr(_program())
    check_jaxpr(
        fg.make_jaxpr(fg.grad(lambda x: fg.lax.fori_loop(0, 3, lambda i, c: fnp.tanh(c), x).sum()))(
            np.ones(3)
        )
    )


def _retyped(closed: ClosedJaxpr, edit) -> ClosedJaxpr:
    jaxpr = closed.jaxpr
    eqns = list(jaxpr.eqns)
    invars, outvars = list(jaxpr.invars), list(jaxpr.outvars)
    edit(eqns, invars, outvars)
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, invars, outvars, eqns), closed.consts)


def test_each_kind_of_fault_is_named():
    closed = _program()
    f32 = ShapedArray((3,), np.float32)

    def wrong_result_type(eqns, invars, outvars):
        eqns[0] = JaxprEqn(sin_p, eqns[0].invars, [Var(ShapedArray((4,), np.float32))], {})

    with pytest.raises(
        JaxprTypeError,
        match=r"equation 0 \(sin\) makes \['f32\[3\]'\] but its results are typed \['f32\[4\]'\]",
    ):
        check_jaxpr(_retyped(closed, wrong_result_type))

    def read_before_defined(eqns, invars, outvars):
        eqns[0] = JaxprEqn(sin_p, [Var(f32)], eqns[0].outvars, {})

    with pytest.raises(
        JaxprTypeError, match=r"equation 0 \(sin\) reads variable \w+, which is not defined"
    ):
        check_jaxpr(_retyped(closed, read_before_defined))

    def defined_twice(eqns, invars, outvars):
        eqns.append(JaxprEqn(sin_p, [invars[0]], [invars[1]], {}))

    with pytest.raises(JaxprTypeError, match=r"variable b is defined twice"):
        check_jaxpr(_retyped(closed, defined_twice))

    def bad_literal(eqns, invars, outvars):
        literal = Literal(np.float64(2.0), ShapedArray((), np.float32))
        eqns.append(JaxprEqn(add_p, [invars[0], literal], [Var(f32)], {}))

    literal_fault = r"literal 2.0 of equation 3 \(add\), a float64 of shape \(\), is typed f32\[\]"
    with pytest.raises(JaxprTypeError, match=literal_fault):
        check_jaxpr(_retyped(closed, bad_literal))

    def undefined_output(eqns, invars, outvars):
        outvars[0] = Var(f32)

    with pytest.raises(JaxprTypeError, match="the program's outputs reads variable"):
        check_jaxpr(_retyped(closed, undefined_output))

    with pytest.raises(JaxprTypeError, match="a constant of the program is a f32"):
        check_jaxpr(
            ClosedJaxpr(Jaxpr([Var(ShapedArray((2,), np.float32))], [], [], []), [fnp.ones(3)])
        )


def test_nested_programs_are_checked():
    closed = fg.make_jaxpr(lambda x: fg.lax.cond(x.sum() > 0, fnp.sin, fnp.cos, x))(
        np.ones(3, np.float32)
    )
    branch = closed.eqns[-1].params["branches"][0]
    inner = branch.jaxpr
    broken = JaxprEqn(sin_p, inner.eqns[0].invars, [Var(ShapedArray((5,), np.float32))], {})
    branch.jaxpr.eqns[0] = broken
    with pytest.raises(JaxprTypeError, match=r"in parameter 'branches' of equation \d+ \(cond\)"):
        check_jaxpr(closed)


def test_enable_checks_names_the_pass(monkeypatch):
    def faulty_pass(closed):
        """Retypes the first equation's result: what a broken rewrite would do."""
        jaxpr = closed.jaxpr
        if not jaxpr.eqns:
            return closed
        first = jaxpr.eqns[0]
        wrong = [Var(v.aval.update(shape=(*v.aval.shape, 1))) for v in first.outvars]
        renamed = dict(zip(first.outvars, wrong))
        eqns = [JaxprEqn(first.primitive, first.invars, wrong, first.params)] + [
            JaxprEqn(e.primitive, [renamed.get(v, v) for v in e.invars], e.outvars, e.params)
            for e in jaxpr.eqns[1:]
        ]
        outvars = [renamed.get(v, v) for v in jaxpr.outvars]
        return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns), closed.consts)

    monkeypatch.setattr(passes, "_PIPELINE", [*passes._PIPELINE, faulty_pass])
    closed = _program()
    passes.optimize(closed)  # (checks off: the broken program goes by)
    with _checks():
        with pytest.raises(JaxprTypeError, match="after the compiler pass faulty_pass"):
            passes.optimize(closed)


class _checks:
    def __enter__(self):
        fg.config.update("enable_checks", True)

    def __exit__(self, *exc):
        fg.config.update("enable_checks", False)


def test_enable_checks_checks_what_is_staged(monkeypatch):
    from funcgrad.interpreters import staging

    checked = []
    monkeypatch.setattr(staging, "check_jaxpr", lambda closed: checked.append(closed))
    with pytest.raises(TypeError, match="enable_checks must be True or False"):
        fg.config.update("jax_enable_checks", "yes")
    fg.jit(lambda x: fnp.sin(x) * 2)(np.ones(3))
    assert checked == []
    fg.config.update("jax_enable_checks", True)
    try:
        np.testing.assert_allclose(fg.jit(lambda x: fnp.sin(x) * 3)(np.ones(3)), 3 * np.sin(1.0))
    finally:
        fg.config.update("enable_checks", False)
    assert len(checked) == 1 and "sin" in str(checked[0])
