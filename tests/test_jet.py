"""jet (Taylor mode) against definitions that need no jet: mpmath's derivatives of
t -> f(x(t)) for scalar functions, nested jvps for programs of arrays, exact polynomials."""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.experimental.jet import jet
from funcgrad.ir import ClosedJaxpr
from funcgrad.scipy import special
from tests.test_transform_properties import Features, cases

ORDER = 4


def mpmath_path_derivatives(f_mp, x0: float, terms: list, order: int) -> list[float]:
    """f(x(t)) and its first `order` derivatives at t = 0, by mpmath at 40 digits."""
    with mpmath.workdps(40):

        def along_path(t):
            return f_mp(x0 + sum(c * t**k / mpmath.factorial(k) for k, c in enumerate(terms, 1)))

        return [float(d) for d in mpmath.diffs(along_path, 0, order)]


# name: (funcgrad function, mpmath function, lowest x0, highest x0)
SCALAR_FUNCTIONS = {
    "sin": (fnp.sin, mpmath.sin, -3.0, 3.0),
    "cos": (fnp.cos, mpmath.cos, -3.0, 3.0),
    "tan": (fnp.tan, mpmath.tan, -1.2, 1.2),
    "exp": (fnp.exp, mpmath.exp, -3.0, 3.0),
    "expm1": (fnp.expm1, mpmath.expm1, -3.0, 3.0),
    "log": (fnp.log, mpmath.log, 0.3, 5.0),
    "log1p": (fnp.log1p, mpmath.log1p, -0.5, 5.0),
    "sqrt": (fnp.sqrt, mpmath.sqrt, 0.3, 5.0),
    "cbrt": (fnp.cbrt, mpmath.cbrt, 0.3, 5.0),
    "tanh": (fnp.tanh, mpmath.tanh, -3.0, 3.0),
    "sinh": (fnp.sinh, mpmath.sinh, -3.0, 3.0),
    "arctan": (fnp.arctan, mpmath.atan, -3.0, 3.0),
    "arcsin": (fnp.arcsin, mpmath.asin, -0.7, 0.7),
    "arccosh": (fnp.arccosh, mpmath.acosh, 1.5, 4.0),
    "reciprocal": (fnp.reciprocal, lambda x: 1 / x, 0.3, 5.0),
    "power_2_5": (lambda x: x**2.5, lambda x: x**2.5, 0.3, 3.0),
    "integer_power": (lambda x: x**5, lambda x: x**5, -2.0, 2.0),
    "logistic": (fg.nn.sigmoid, lambda x: 1 / (1 + mpmath.exp(-x)), -4.0, 4.0),
    "softplus": (fg.nn.softplus, lambda x: mpmath.log1p(mpmath.exp(x)), -4.0, 4.0),
    "erf": (special.erf, mpmath.erf, -2.0, 2.0),
    "erfc": (special.erfc, mpmath.erfc, -2.0, 2.0),
    "lgamma": (lax.lgamma, mpmath.loggamma, 0.5, 6.0),
    "digamma": (lax.digamma, mpmath.digamma, 0.5, 6.0),
    "atan2_by_const": (lambda x: fnp.arctan2(x, 2.0), lambda x: mpmath.atan2(x, 2), -3.0, 3.0),
    "composite": (
        lambda x: fnp.exp(fnp.sin(x) * x) / (1.0 + x * x),
        lambda x: mpmath.exp(mpmath.sin(x) * x) / (1 + x * x),
        -2.0,
        2.0,
    ),
}


def check_scalar_jet(name: str, x0: float, terms: list) -> None:
    fun, fun_mp, _, _ = SCALAR_FUNCTIONS[name]
    primal_out, terms_out = jet(fun, (np.float64(x0),), ([np.float64(t) for t in terms],))
    want = mpmath_path_derivatives(fun_mp, x0, terms, len(terms))
    got = [float(primal_out)] + [float(t) for t in terms_out]
    # Each derivative is a sum of products of up to k terms and derivatives of f.
    scale = [max(1.0, abs(w)) for w in want]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * max(scale))
    for term in terms_out:
        assert term.dtype == np.float64 and term.shape == ()


@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_scalar_functions_match_mpmath(name):
    _, _, low, high = SCALAR_FUNCTIONS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x0 = float(rng.uniform(low, high))
    check_scalar_jet(name, x0, list(rng.uniform(-1.5, 1.5, ORDER)))


@given(
    name=st.sampled_from(sorted(SCALAR_FUNCTIONS)),
    position=st.floats(0.0, 1.0),
    terms=st.lists(st.floats(-1.5, 1.5), min_size=1, max_size=5),
)
def test_scalar_functions_match_mpmath_on_drawn_paths(name, position, terms):
    _, _, low, high = SCALAR_FUNCTIONS[name]
    check_scalar_jet(name, low + position * (high - low), terms)


def test_a_polynomial_is_exact_and_its_higher_terms_vanish():
    # p(x) = x^3 - 2x along x(t) = 2 + t: p(2 + t) = 4 + 10 t + 6 t^2 + t^3.
    primal_out, terms = jet(lambda x: x**3 - 2.0 * x, (2.0,), ([1.0, 0.0, 0.0, 0.0, 0.0],))
    assert float(primal_out) == 4.0
    assert [float(t) for t in terms] == [10.0, 12.0, 6.0, 0.0, 0.0]


def test_taylor_coefficients_when_not_factorial_scaled():
    # exp along x(t) = t: coefficients 1 / k!, given and returned unscaled.
    _, terms = jet(fnp.exp, (0.0,), ([1.0, 0.0, 0.0, 0.0],), factorial_scaled=False)
    np.testing.assert_allclose(
        [float(t) for t in terms], [1 / math.factorial(k) for k in (1, 2, 3, 4)]
    )
    # sin along x(t) = t + t^2 (coefficients 1, 1): sin(t + t^2) = t + t^2 - t^3 / 6 - t^4 / 2.
    _, terms = jet(fnp.sin, (0.0,), ([1.0, 1.0, 0.0, 0.0],), factorial_scaled=False)
    np.testing.assert_allclose([float(t) for t in terms], [1.0, 1.0, -1 / 6, -1 / 2], atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Programs of arrays, against nested jvps along the path


def nested_jvp_derivatives(fun, primals: tuple, series: tuple, order: int) -> list:
    """fun(x(t)) and its derivatives at t = 0, each by one more jvp in t."""

    def along_path(t):
        points = [
            x + sum(c * t**k / math.factorial(k) for k, c in enumerate(terms, 1))
            for x, terms in zip(primals, series)
        ]
        return fun(*points)

    derivatives = [along_path]
    for _ in range(order):
        previous = derivatives[-1]
        derivatives.append(lambda t, g=previous: fg.jvp(g, (t,), (np.float64(1.0),))[1])
    return [np.asarray(d(np.float64(0.0))) for d in derivatives]


def random_path(rng, shape, order):
    return rng.normal(size=shape), [rng.normal(size=shape) for _ in range(order)]


def check_program(fun, *shapes, order=3, seed=0, rtol=1e-9, reference=None):
    rng = np.random.default_rng(seed)
    paths = [random_path(rng, shape, order) for shape in shapes]
    primals = tuple(x for x, _ in paths)
    series = tuple(terms for _, terms in paths)
    primal_out, terms_out = jet(fun, primals, series)
    want = nested_jvp_derivatives(reference or fun, primals, series, order)
    got = [np.asarray(primal_out)] + [np.asarray(t) for t in terms_out]
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(
            g, w, rtol=rtol, atol=rtol * (1 + np.abs(w).max()), err_msg=f"order {k}"
        )


def mlp(x, w):
    return fnp.tanh(x @ w) @ w.T


PROGRAMS = {
    "matmul_of_two_paths": (mlp, [(3, 4), (4, 5)]),
    "quotient_of_two_paths": (lambda a, b: a / (b * b + 1.0), [(4,), (4,)]),
    "softmax": (lambda x: fg.nn.softmax(x, axis=-1), [(2, 5)]),
    "logsumexp": (lambda x: special.logsumexp(x, axis=0), [(4, 3)]),
    "max_and_sort": (lambda x: fnp.max(x, axis=1) + fnp.sort(x)[:, 1], [(3, 4)]),
    "cumulative": (lambda x: fnp.cumsum(x * x) + fnp.cumprod(x), [(5,)]),
    "indexing_and_where": (lambda x: fnp.where(x > 0, x[::-1] ** 2, fnp.sin(x)), [(6,)]),
    "concatenate_and_pad": (
        lambda x, y: fnp.pad(fnp.concatenate([x, fnp.exp(y)]), 1, constant_values=2.0),
        [(3,), (2,)],
    ),
    "linear_solve": (
        lambda a, b: fnp.linalg.solve(a @ a.T + 4.0 * fnp.eye(3), b),
        [(3, 3), (3, 2)],
    ),
    "determinant_and_inverse": (
        lambda a: fnp.linalg.det(a + 3.0 * fnp.eye(3)) * fnp.linalg.inv(a + 3.0 * fnp.eye(3)),
        [(3, 3)],
    ),
    "symmetric_eigenvalues": (lambda a: fnp.linalg.eigh(a + a.T)[0], [(3, 3)]),
    "convolution": (
        lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME"),
        [(1, 2, 5, 5), (3, 2, 3, 3)],
    ),
    "complex_holomorphic": (
        lambda x: fnp.real(fnp.exp(lax.complex(x, 0.5 * x)) * (1.0 + 2.0j)),
        [(4,)],
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_match_nested_jvps(name):
    fun, shapes = PROGRAMS[name]
    check_program(fun, *shapes)


@given(cases(Features(reverse=False)), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_random_programs_match_nested_jvps(case, order, seed):
    """test_transform_properties' random programs (control flow, calls, custom_jvp rules,
    sorts, gathers, scatters, windows, ...) along random paths of both arguments."""
    rng = np.random.default_rng(seed)
    primals = (case.x, case.y)
    series = tuple([rng.standard_normal(p.shape) for _ in range(order)] for p in primals)
    primal_out, terms_out = jet(case.f, primals, series)
    want = nested_jvp_derivatives(case.f, primals, series, order)
    for k, (got, expected) in enumerate(zip([primal_out, *terms_out], want)):
        scale = 1.0 + np.abs(expected).max(initial=0.0)
        np.testing.assert_allclose(
            np.asarray(got), expected, rtol=1e-7, atol=1e-7 * scale, err_msg=f"order {k}"
        )


def test_control_flow_and_calls():
    def program(x):
        y = lax.cond(x.sum() > 0, lambda v: fnp.sin(v) * v, lambda v: fnp.cos(v), x)
        y = lax.fori_loop(0, 3, lambda i, c: fnp.tanh(c) + 0.5 * c, y)
        y = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, fnp.exp(-c[1]) * c[1]), (0, y))[
            1
        ]
        y = fg.jit(lambda v: v * fnp.log1p(v * v))(y)
        return fg.checkpoint(lambda v: fnp.sinh(v).sum())(y)

    check_program(program, (4,))


def test_a_jitted_function_stays_one_compiled_call():
    inner = fg.jit(lambda v: fnp.tanh(v @ v.T) @ v)
    staged = fg.make_jaxpr(lambda x, t1, t2: jet(inner, (x,), ([t1, t2],)))(*[np.ones((3, 3))] * 3)
    (call,) = staged.jaxpr.eqns
    assert call.primitive.name == "jit" and call.params["name"].startswith("jet(")
    check_program(inner, (3, 3))


def test_scan_with_carry_and_outputs():
    def program(x, w):
        def step(carry, row):
            carry = fnp.tanh(carry @ w + row)
            return carry, carry.sum()

        final, sums = lax.scan(step, fnp.zeros(3, x.dtype), x)
        return final.sum() + (sums**2).sum()

    check_program(program, (4, 3), (3, 3))


def test_loops_with_constant_and_integer_carries():
    def program(x, xs):
        def step(carry, x_row):
            count, constant, value = carry
            return (count + 1, constant * 2.0, fnp.sin(value) * x_row + constant), value * count

        (_, constant, value), ys = lax.scan(step, (0, fnp.ones(()), x[0]), xs)
        looped = lax.while_loop(
            lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * 0.5, fnp.tanh(c[2]) + c[1]), (0, 1.0, x)
        )
        return value + ys.sum() + constant + looped[2].sum() + looped[1]

    check_program(program, (3,), (5,), order=4)


def test_control_flow_cost_grows_polynomially_with_the_order():
    # Through their jvp rules, each order would triple the loop body: order 8 stages about
    # 80,000 equations where the loop's own jet program stages some 600.
    def taylor(x, *terms):
        loop = lambda v: lax.fori_loop(0, 10, lambda i, c: fnp.sin(c) * c + 0.1, v)  # noqa: E731
        return jet(loop, (x,), (list(terms),))

    def size(jaxpr) -> int:
        inner = [
            size(p.jaxpr)
            for e in jaxpr.eqns
            for v in e.params.values()
            for p in (v if isinstance(v, tuple) else (v,))
            if isinstance(p, ClosedJaxpr)
        ]
        return len(jaxpr.eqns) + sum(inner)

    assert size(fg.make_jaxpr(taylor)(1.0, *([1.0] * 8)).jaxpr) < 2000


def test_custom_jvp_terms_come_from_its_rule():
    # A rule that differs from the function's own derivative: the jet's terms are the rule's,
    # as jvp's tangent is.
    @fg.custom_jvp
    def f(x):
        return fnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (dx,) = primals, tangents
        return f(x), 2.0 * fnp.cos(x) * dx

    x0, terms = np.float64(0.3), [np.float64(0.7), np.float64(-0.4)]
    _, (y1, y2) = jet(f, (x0,), (terms,))
    np.testing.assert_allclose(float(y1), fg.jvp(f, (x0,), (terms[0],))[1], rtol=1e-14)
    # d/dt [2 cos(x(t)) x'(t)] = -2 sin(x) x1^2 + 2 cos(x) x2
    want = -2 * np.sin(x0) * terms[0] ** 2 + 2 * np.cos(x0) * terms[1]
    np.testing.assert_allclose(float(y2), want, rtol=1e-12)


def test_custom_vjp_functions_give_their_body_terms():
    def body(x):
        return fnp.exp(x) * x

    f = fg.custom_vjp(body)
    f.defvjp(lambda x: (f(x), x), lambda x, g: (g * 0.0,))
    check_program(f, (3,), reference=body)


def test_composes_with_jit_vmap_and_grad():
    x0, terms = np.linspace(0.1, 0.9, 4), [np.full(4, 0.5), np.full(4, -0.2), np.full(4, 0.1)]

    def taylor(x, *ts):
        return jet(lambda v: fnp.sin(v) * fnp.exp(v), (x,), (list(ts),))

    eager_primal, eager_terms = taylor(x0, *terms)
    jit_primal, jit_terms = fg.jit(taylor)(x0, *terms)
    for a, b in zip([eager_primal, *eager_terms], [jit_primal, *jit_terms]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
    # vmap over the points, against the loop of single points.
    mapped = fg.vmap(taylor)(x0, *terms)
    for i in range(4):
        single = taylor(x0[i], *[t[i] for t in terms])
        for a, b in zip([mapped[0], *mapped[1]], [single[0], *single[1]]):
            np.testing.assert_allclose(np.asarray(a)[i], np.asarray(b), rtol=1e-12)
    # The gradient of the second term with respect to the point, against finite differences.
    second = lambda x: taylor(x, *terms)[1][1].sum()  # noqa: E731
    step = 1e-6
    fd = [(second(x0 + step * e) - second(x0 - step * e)) / (2 * step) for e in np.eye(4)]
    np.testing.assert_allclose(np.asarray(fg.grad(second)(x0)), np.asarray(fd), rtol=1e-6)


def test_jet_of_vmap_and_nested_jets():
    check_program(fg.vmap(lambda v: fnp.sin(v) * v.sum()), (3, 2))

    # A jet of a jet along the same path: the second-order term of the first term's path.
    def first_term(x):
        return jet(fnp.exp, (x,), ([fnp.ones_like(x)],))[1][0]

    _, (d1,) = jet(first_term, (np.float64(0.5),), ([np.float64(1.0)],))
    np.testing.assert_allclose(float(d1), np.exp(0.5), rtol=1e-14)


def test_outputs_without_derivatives_get_zero_terms():
    outputs, terms = jet(
        lambda x: (fnp.floor(x), 3.0, x.astype(np.int32), lax.stop_gradient(x) * 2.0),
        (np.float64(1.5),),
        ([np.float64(1.0), np.float64(2.0)],),
    )
    assert [float(o) for o in outputs] == [1.0, 3.0, 1.0, 3.0]
    for term_list, dtype in zip(terms, [np.float64, np.float32, np.int32, np.float64]):
        assert [float(t) for t in term_list] == [0.0, 0.0]
        assert all(t.dtype == dtype for t in term_list)


def test_pytree_arguments():
    primals = ({"a": np.float64(0.5), "b": np.ones(2)},)
    series = ([{"a": np.float64(1.0), "b": np.zeros(2)}, {"a": np.float64(0.0), "b": np.ones(2)}],)
    out, terms = jet(lambda p: fnp.sin(p["a"]) * p["b"], primals, series)
    np.testing.assert_allclose(np.asarray(out), np.sin(0.5) * np.ones(2))
    np.testing.assert_allclose(np.asarray(terms[0]), np.cos(0.5) * np.ones(2))
    # d2/dt2 sin(a(t)) b(t) = -sin(a) a1^2 b + 2 cos(a) a1 b1 + sin(a) b2 = -sin + sin = 0
    np.testing.assert_allclose(np.asarray(terms[1]), np.zeros(2), atol=1e-15)


def test_cost_grows_polynomially_with_the_order():
    # sin's rule asks for cos of the same path and cos's for sin: without sharing those jets,
    # order 8 stages more than 2000 equations.
    def taylor(x, *terms):
        return jet(fnp.sin, (x,), (list(terms),))

    staged = fg.make_jaxpr(taylor)(1.0, *([1.0] * 8))
    assert len(staged.jaxpr.eqns) < 1000


def test_bad_input_names_the_cause():
    with pytest.raises(ValueError, match="inconsistent lengths"):
        jet(fnp.sin, (1.0, 2.0), ([1.0], [1.0, 2.0]))
    with pytest.raises(ValueError, match="one series per primal"):
        jet(fnp.sin, (1.0,), ([1.0], [2.0]))
    with pytest.raises(TypeError, match=r"term 2 of argument 0 .* f32\[3\]; got f32\[2\]"):
        jet(fnp.sin, (np.ones(3, np.float32),), ([np.ones(3, np.float32), np.ones(2, np.float32)],))
    with pytest.raises(TypeError, match="floating-point or complex arguments; argument 0"):
        jet(fnp.sin, (np.int32(1),), ([np.int32(1)],))
    with pytest.raises(TypeError, match="structure"):
        jet(lambda p: p["a"], ({"a": 1.0},), ([1.0],))
    with pytest.raises(fg.errors.ConcretizationTypeError, match="Taylor terms"):
        jet(lambda x: float(x), (1.0,), ([1.0],))
