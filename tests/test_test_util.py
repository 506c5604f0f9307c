"""check_grads, check_jvp and check_vjp: they pass on right derivatives and catch wrong ones.

Wrong rules are planted on throwaway primitives declared here (and removed from the primitive
table afterwards, so the coverage suite never sees them): a wrong jvp, a jvp that is right to
first order but wrong to second, and a linear primitive with a wrong transpose.
"""

import contextlib
import itertools

import numpy as np
import pytest
import strategies as fst
from hypothesis import given, settings

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import core, lax
from funcgrad.interpreters import ad
from funcgrad.test_util import check_grads, check_jvp, check_vjp

X = np.array([0.4, -1.3, 2.1])
_ids = itertools.count()


@contextlib.contextmanager
def throwaway_primitive(impl):
    """An elementwise primitive with a unique name, removed from the table on exit."""
    prim = core.Primitive(f"test_util_throwaway_{next(_ids)}")
    prim.def_impl(impl)
    prim.def_abstract_eval(lambda aval: aval)
    try:
        yield prim
    finally:
        del core.PRIMITIVES[prim.name]


# ---------------------------------------------------------------------------------------------
# Right derivatives pass


def sin_times(x, y):
    return fnp.sin(x) * y + fnp.exp(y / 4)


def tanh_layer(w, x):
    return fnp.tanh(w @ x)


def pytree_in_and_out(params, x):
    hidden = fnp.tanh(params["w"] * x + params["b"])
    return {"sum": fnp.sum(hidden**2), "pair": (hidden, x * 2.0)}


RNG = np.random.default_rng(0)
CASES = {
    "elementwise": (sin_times, (X, np.array([0.5, 1.5, -2.0]))),
    "matmul": (tanh_layer, (RNG.standard_normal((2, 3)), X)),
    "pytree": (pytree_in_and_out, ({"w": X, "b": X[::-1].copy()}, np.array([1.0, 0.5, -0.5]))),
}


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("mode", ["fwd", "rev"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_right_derivatives_pass(case, mode, order):
    f, args = CASES[case]
    check_grads(f, args, order=order, modes=(mode,))


@given(fst.arrays(np.float64, fst.shapes(max_dims=2, max_side=3), min_value=-2, max_value=2))
@settings(max_examples=10)
def test_right_derivatives_pass_over_drawn_shapes(x):
    check_grads(lambda x: fnp.cos(x) * fnp.sum(x * x), (x,), order=2)


def test_integer_arguments_and_float32():
    check_grads(lambda x, n: x * n, (X, np.arange(3)), order=2)
    check_grads(lambda x: fnp.sin(x) * x, (X.astype(np.float32),), order=2)


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="unknown mode 'backward'"):
        check_grads(fnp.sin, (X,), order=1, modes=("backward",))


# ---------------------------------------------------------------------------------------------
# Wrong derivatives fail


def test_a_wrong_jvp_rule_fails_in_both_modes():
    with throwaway_primitive(lambda x: x**3) as cube_p:

        def cube(x):
            return cube_p.bind(lax.asarray(x))

        def wrong_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return cube_p.bind(x), lax.mul(lax.mul(x, x), t) * 2.0  # should be 3x^2 t

        cube_p.def_jvp(wrong_jvp)
        for mode in ("fwd", "rev"):
            with pytest.raises(AssertionError):
                check_grads(cube, (X,), order=1, modes=(mode,))
        with pytest.raises(AssertionError, match="finite difference"):
            check_jvp(cube, (X,))
        with pytest.raises(AssertionError):
            check_vjp(cube, (X,))

        cube_p.def_jvp(
            lambda primals, tangents: (
                cube_p.bind(primals[0]),
                lax.mul(lax.mul(primals[0], primals[0]), tangents[0]) * 3.0,
            )
        )
        check_grads(cube, (X,), order=3)
    assert cube_p.name not in core.PRIMITIVES


def test_integer_arguments_leave_float64_tolerances_tight():
    # A derivative 1% off passes float32's tolerances; an int argument beside float64 data
    # must not loosen them to those.
    with throwaway_primitive(lambda x: x**3) as cube_p:

        def slightly_wrong_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return cube_p.bind(x), lax.mul(lax.mul(x, x), t) * 3.03  # 3x^2 t, 1% off

        cube_p.def_jvp(slightly_wrong_jvp)

        def scaled_cube(x, n):
            return cube_p.bind(lax.asarray(x)) * n

        steps = np.array([2, 3, 4], np.int32)
        with pytest.raises(AssertionError):
            check_jvp(scaled_cube, (X, steps))
        check_jvp(scaled_cube, (X.astype(np.float32), steps))  # float32 data: loose, as documented


def test_a_wrong_second_derivative_fails_only_at_order_two():
    with (
        throwaway_primitive(lambda x: x**3) as cube_p,
        throwaway_primitive(lambda x: x * x) as square_p,
    ):
        ad.defjvp_zero(square_p)  # wrong: d(x^2) = 2x dx

        def cube_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return cube_p.bind(x), lax.mul(square_p.bind(x), t) * 3.0

        cube_p.def_jvp(cube_jvp)

        def cube(x):
            return cube_p.bind(lax.asarray(x))

        check_grads(cube, (X,), order=1)
        for mode in ("fwd", "rev"):
            with pytest.raises(AssertionError):
                check_grads(cube, (X,), order=2, modes=(mode,))


def test_a_wrong_transpose_rule_fails_in_reverse_mode():
    with throwaway_primitive(lambda x: 2.0 * x) as double_p:

        def double(x):
            return double_p.bind(lax.asarray(x))

        ad.deflinear(double_p, lambda ct, x: [ct * 3.0])  # should be 2 ct
        check_grads(double, (X,), order=2, modes=("fwd",))
        with pytest.raises(AssertionError, match="<u, J v>"):
            check_grads(double, (X,), order=1, modes=("rev",))

        ad.deflinear(double_p, lambda ct, x: [ct * 2.0])
        check_grads(lambda x: fnp.sin(double(x)), (X,), order=2)


def test_a_custom_rule_that_is_not_the_derivative_fails():
    @fg.custom_jvp
    def f(x):
        return fnp.sin(x)

    f.defjvp(lambda p, t: (f(p[0]), fnp.cos(p[0]) * t[0] * 1.01))
    with pytest.raises(AssertionError):
        check_grads(f, (X,), order=1, modes=("fwd",))
    with pytest.raises(AssertionError):
        check_grads(f, (X,), order=1, modes=("rev",))

    @fg.custom_vjp
    def g(x):
        return fnp.sin(x)

    g.defvjp(lambda x: (g(x), x), lambda x, ct: (-fnp.cos(x) * ct,))
    with pytest.raises(AssertionError):
        check_grads(g, (X,), order=1, modes=("rev",))
