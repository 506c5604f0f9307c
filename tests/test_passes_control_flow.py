"""Dead-code elimination through control flow: unused outputs of cond, scan and while_loop
are pruned from their programs, and results never change."""

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.compiler.passes import optimize
from funcgrad.ir import eval_jaxpr


def optimized_and_plain(f, *args):
    closed = fg.make_jaxpr(f)(*args)
    optimized = optimize(closed)
    plain = eval_jaxpr(closed.jaxpr, closed.consts, *map(fnp.asarray, args))
    fast = eval_jaxpr(optimized.jaxpr, optimized.consts, *map(fnp.asarray, args))
    for a, b in zip(plain, fast):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    return optimized


def primitive_names(closed) -> list[str]:
    names = []
    for eqn in closed.eqns:
        names.append(eqn.primitive.name)
        for value in eqn.params.values():
            for inner in value if isinstance(value, tuple) else (value,):
                if hasattr(inner, "jaxpr") and hasattr(inner, "consts"):
                    names.extend(primitive_names(inner))
    return names


def test_cond_drops_unused_outputs_in_every_branch():
    def f(p, x, y):
        sin_or_double, cos_or_y = fg.lax.cond(
            p, lambda a, b: (fnp.sin(a), fnp.cos(b)), lambda a, b: (a * 2.0, b), x, y
        )
        return sin_or_double

    for p in (True, False):
        optimized = optimized_and_plain(f, p, np.arange(3.0), np.ones(3))
        assert "cos" not in primitive_names(optimized)
        (cond_eqn,) = [e for e in optimized.eqns if e.primitive.name == "cond"]
        assert len(cond_eqn.outvars) == 1 and len(cond_eqn.invars) == 2


def test_scan_drops_unused_ys_and_carries():
    def f(xs):
        def body(carry, x):
            total, product = carry
            return (total + x, product * x), (fnp.sin(x), fnp.cos(x))

        (total, _), (sines, _) = fg.lax.scan(body, (0.0, 1.0), xs)
        return total, sines

    optimized = optimized_and_plain(f, np.arange(1.0, 4.0))
    names = primitive_names(optimized)
    assert "cos" not in names and "mul" not in names
    (scan_eqn,) = [e for e in optimized.eqns if e.primitive.name == "scan"]
    assert scan_eqn.params["num_carry"] == 1


def test_scan_keeps_a_carry_that_feeds_a_used_one():
    def f(xs):
        def body(carry, x):
            a, b = carry
            return (a + b, b + x), None

        (a, _), _ = fg.lax.scan(body, (np.float64(0.0), np.float64(0.0)), xs)
        return a

    optimized = optimized_and_plain(f, np.arange(4.0))
    (scan_eqn,) = [e for e in optimized.eqns if e.primitive.name == "scan"]
    assert scan_eqn.params["num_carry"] == 2


def test_while_drops_carries_nobody_needs_but_keeps_the_predicates():
    def f(x):
        _, doubled, _ = fg.lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0, fnp.sin(c[2])), (0, x, x)
        )
        return doubled

    optimized = optimized_and_plain(f, np.float32(1.5))
    assert "sin" not in primitive_names(optimized)
    (while_eqn,) = [e for e in optimized.eqns if e.primitive.name == "while"]
    assert len(while_eqn.outvars) == 2  # the counter stays: the predicate reads it
