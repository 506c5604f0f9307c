"""while_loop against plain Python loops: eagerly, under jit, jvp (vs finite differences) and
vmap (vs a loop of the lanes, including lanes that stop at different iterations); grad raises."""

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_batching, check_staging
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads, check_jvp

MAX_STEPS = 40


def grow(x, limit):
    """Grow x until its largest magnitude passes `limit`: the trip count depends on the data
    (max is exact, so the trip count is the reference loop's)."""

    def cond(carry):
        i, y = carry
        return fnp.logical_and(fnp.max(fnp.abs(y)) < limit, i < MAX_STEPS)

    def body(carry):
        i, y = carry
        return i + 1, y * 1.5 + 0.25

    return lax.while_loop(cond, body, (0, x))


def grow_reference(x, limit):
    i, y = 0, np.asarray(x)
    while np.max(np.abs(y)) < limit and i < MAX_STEPS:
        i, y = i + 1, y * 1.5 + 0.25
    return i, y


def orbit(x, w, steps):
    """A fixed number of nonlinear steps; tangents enter through the initial carry and through
    the closed-over `w`."""

    def body(carry):
        i, y = carry
        return i + 1, fnp.sin(y) * w + y * 0.5

    return lax.while_loop(lambda carry: carry[0] < steps, body, (0, x))[1]


def orbit_reference(x, w, steps):
    y = np.asarray(x)
    for _ in range(int(steps)):
        y = np.sin(y) * w + y * 0.5
    return y


def assert_trees_close(actual, expected, **tol):
    actual_leaves, actual_tree = fg.tree_util.tree_flatten(actual)
    expected_leaves, expected_tree = fg.tree_util.tree_flatten(expected)
    assert actual_tree == expected_tree
    for a, e in zip(actual_leaves, expected_leaves):
        assert_close(a, e, **tol)


# ---------------------------------------------------------------------------------------------
# Values


@given(
    fst.arrays(fst.float_dtypes, fst.shapes(0, 2, 1, 3), min_value=-2, max_value=2),
    st.floats(0, 100),
)
def test_matches_a_python_loop(x, limit):
    limit = np.float32(limit).astype(x.dtype)
    expected = grow_reference(x, limit)
    steps, y = grow(x, limit)
    assert int(steps) == expected[0]
    assert_close(y, expected[1], x.dtype)
    steps, y = fg.jit(grow)(x, limit)
    assert int(steps) == expected[0]
    assert_close(y, expected[1], x.dtype)
    check_staging(grow, x, limit)


def test_pytree_carry_with_closed_over_values():
    """An Euler-integrated oscillator: a dict carry, consts read by both cond and body."""
    dt, t_end, stiffness = np.float64(0.1), np.float64(2.05), np.array([1.0, 4.0])

    def simulate(position, velocity):
        def body(state):
            x, v = state["xv"]
            return {"t": state["t"] + dt, "xv": (x + dt * v, v - dt * stiffness * x)}

        init = {"t": np.float64(0.0), "xv": (position, velocity)}
        return lax.while_loop(lambda state: state["t"] < t_end, body, init)

    def reference(x, v):
        t = 0.0
        while t < t_end:
            t, x, v = t + dt, x + dt * v, v - dt * stiffness * x
        return {"t": t, "xv": (x, v)}

    x0, v0 = np.array([1.0, 0.5]), np.array([0.0, -1.0])
    assert_trees_close(simulate(x0, v0), reference(x0, v0))
    assert_trees_close(fg.jit(simulate)(x0, v0), reference(x0, v0))
    check_staging(simulate, x0, v0)


def test_zero_iterations_return_the_initial_carry():
    x = np.array([3.0, -4.0])
    steps, y = grow(x, 1.0)
    assert int(steps) == 0
    assert_close(y, x)
    assert_close(fg.jit(grow)(x, 1.0)[1], x)


def test_make_jaxpr_is_one_while_equation():
    def count_doublings(x):
        return lax.while_loop(lambda c: c[1] < 100.0, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))

    assert str(fg.make_jaxpr(count_doublings)(np.float32(1))) == (
        "{ lambda ; a:f32[]. let\n"
        "    b:i32[] c:f32[] = while[body_jaxpr=\n"
        "      { lambda ; a:i32[] b:f32[]. let\n"
        "          c:i32[] = add a 1:i32[]\n"
        "          d:f32[] = mul b 2.0:f32[]\n"
        "        in (c, d) } body_nconsts=0 cond_jaxpr=\n"
        "      { lambda ; a:i32[] b:f32[]. let\n"
        "          c:bool[] = lt b 100.0:f32[]\n"
        "        in (c,) } cond_nconsts=0] 0:i32[] a\n"
        "  in (b, c) }"
    )


def test_weak_types_follow_jax():
    # A weak carry the body makes a float becomes a strong float32, traced again.
    out = lax.while_loop(lambda c: c < 10, lambda c: c + 1.5, 0)
    assert out.aval == fg.core.ShapedArray((), np.float32, False)
    assert float(out) == 10.5
    # A weak scalar carried through strong arithmetic becomes strong.
    out = lax.while_loop(lambda c: c < 10.0, lambda c: c + np.float64(1.5), 0.0)
    assert out.aval == fg.core.ShapedArray((), np.float64, False)
    # A strong carry stays strong when the body returns a weak value; a weak one stays weak.
    assert not lax.while_loop(lambda c: c < 1.0, lambda c: 5.0, np.float32(0)).weak_type
    assert lax.while_loop(lambda c: c < 3, lambda c: c + 1, 0).weak_type
    check_staging(lambda x: lax.while_loop(lambda c: c < 1.0, lambda c: 5.0, x), np.float32(0))
    check_staging(lambda x: lax.while_loop(lambda c: c < 10, lambda c: c + 1.5, 0), 0.0)


def test_disable_jit_runs_the_body_in_python():
    calls = []

    def body(c):
        calls.append(c)
        return c + 1

    with fg.disable_jit():
        assert int(lax.while_loop(lambda c: c < 4, body, 0)) == 4
    assert len(calls) == 4


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    "body, message",
    [
        (lambda c: c.astype(np.int32), r"f32\[\] in one and i32\[\] in the other"),
        (lambda c: fnp.ones(2, np.float32), r"f32\[\] in one and f32\[2\] in the other"),
        (lambda c: (c, c), r"pytree structure: PyTreeDef\(\*\) and PyTreeDef\(\(\*, \*\)\)"),
    ],
)
def test_body_must_return_the_carry_type(body, message):
    with pytest.raises(TypeError, match=r"while_loop: the carry init_val and body_fun's output"):
        lax.while_loop(lambda c: c < 3, body, np.float32(1))
    with pytest.raises(TypeError, match=message):
        lax.while_loop(lambda c: c < 3, body, np.float32(1))


@pytest.mark.parametrize(
    "cond, returned",
    [
        (lambda c: c, r"\(f32\[\]\)"),
        (lambda c: fnp.array([True, False]), r"\(bool\[2\]\)"),
        (lambda c: (c < 3, c < 4), r"\(bool\[\], bool\[\]\)"),
    ],
)
def test_cond_must_return_a_bool_scalar(cond, returned):
    with pytest.raises(TypeError, match=r"cond_fun must return a bool scalar, got " + returned):
        lax.while_loop(cond, lambda c: c + 1, np.float32(1))


# ---------------------------------------------------------------------------------------------
# Forward mode


@given(
    fst.arrays(np.float64, fst.shapes(0, 2, 1, 3), min_value=-2, max_value=2),
    st.floats(-1.5, 1.5),
    st.integers(0, 4),
)
def test_jvp_matches_finite_differences(x, w, steps):
    w, steps = np.float64(w), np.int32(steps)
    assert_close(orbit(x, w, steps), orbit_reference(x, w, steps))
    check_grads(orbit, (x, w, steps), order=2, modes=("fwd",))
    check_grads(fg.jit(orbit), (x, w, steps), order=1, modes=("fwd",))


def test_jvp_is_one_while_over_primal_and_tangent_carries():
    x, w, steps = np.ones(3), np.float64(0.5), np.int32(3)
    closed = fg.make_jaxpr(lambda x, t: fg.jvp(lambda y: orbit(y, w, steps), (x,), (t,)))(x, x)
    assert [e.primitive.name for e in closed.eqns] == ["while"]


def test_tangent_reaches_a_carry_through_the_body():
    """The initial carry is a constant; only the body's w gives it a tangent (fixed point)."""

    def power(w):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * w), (0, 1.0))[1]

    w = np.float64(1.3)
    _, tangent = fg.jvp(power, (w,), (np.float64(1.0),))
    assert_close(tangent, 3 * w**2)
    check_jvp(power, (w,))


def test_tangent_of_a_carry_the_body_resets():
    def reset(x):
        carry = lax.while_loop(
            lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] * x, fnp.zeros_like(c[2])), (0, x, x)
        )
        return carry[1:]

    tangents = fg.jvp(reset, (np.float64(2.0),), (np.float64(1.0),))[1]
    assert_close(tangents[0], 3 * 2.0**2)
    assert_close(tangents[1], 0.0)


def test_grad_raises_with_a_clear_message():
    def loss(x):
        return fnp.sum(orbit(x, np.float64(0.5), 3))

    message = (
        r"reverse-mode differentiation \(grad, vjp\) of while_loop is not supported.*fori_loop"
    )
    # The loop linearizes (forward mode is staged); transposing it is what fails.
    with pytest.raises(NotImplementedError, match=message):
        fg.grad(loss)(np.ones(2))
    _, loss_vjp = fg.vjp(loss, np.ones(2))
    with pytest.raises(NotImplementedError, match=message):
        loss_vjp(np.float64(1.0))
    with pytest.raises(NotImplementedError, match=message):
        fg.grad(fg.jit(loss))(np.ones(2))
    reason = fg.core.PRIMITIVES["while"].not_applicable["transpose"]
    assert reason.startswith("reverse-mode differentiation")


def test_grad_where_the_loop_is_constant_in_the_input():
    """x only decides when the loop stops: the loop's value is known, and grad goes on."""

    def doublings(x):
        return lax.while_loop(lambda c: c < x, lambda c: c * 2.0, np.float64(1.0))

    assert_close(fg.grad(lambda x: doublings(x) * x)(np.float64(5.0)), 8.0)


@pytest.mark.parametrize("branch", ["cond", "switch"])
def test_linearize_through_a_branch_in_the_body_returns_known_primals(branch):
    """The jvp'd cond in the body reads primal and tangent carries together; its primal outputs
    are still known, so linearize returns values, not tracers of the staged loop."""

    def step(c):
        if branch == "cond":
            return lax.cond(c[0] > 0, fnp.sin, fnp.cos, c)
        return lax.switch(fnp.argmax(c), [fnp.sin, fnp.cos], c)

    def loop(x):
        return lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, step(s[1])), (0, x))[1]

    x, tangent = np.array([0.3, -0.2]), np.array([1.0, -0.5])
    out, loop_lin = fg.linearize(loop, x)
    expected = x
    for _ in range(3):
        takes_sin = expected[0] > 0 if branch == "cond" else np.argmax(expected) == 0
        expected = np.sin(expected) if takes_sin else np.cos(expected)
    assert_close(np.asarray(out), expected)
    assert_close(loop_lin(tangent), fg.jvp(loop, (x,), (tangent,))[1])
    check_jvp(loop, (x,))


# ---------------------------------------------------------------------------------------------
# Batching


def count_primitives(fun, *args) -> dict:
    counts: dict = {}
    for eqn in fg.make_jaxpr(fun)(*args).eqns:
        counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
    return counts


@st.composite
def batched_grow_args(draw):
    """x batched along a drawn axis (or not), limits batched (or not), lanes of one shape."""
    size = draw(st.integers(1, 4))
    lane_shape = draw(fst.shapes(0, 2, 1, 3))
    x_axis = draw(st.sampled_from([None, 0, len(lane_shape), -1]))
    limit_axis = draw(st.sampled_from([None, 0])) if x_axis is not None else 0
    x_shape = lane_shape
    if x_axis is not None:
        position = x_axis % (len(lane_shape) + 1)
        x_shape = lane_shape[:position] + (size,) + lane_shape[position:]
    x = draw(fst.arrays(np.float64, x_shape, min_value=-2, max_value=2))
    limits = draw(
        fst.arrays(np.float64, (size,) if limit_axis == 0 else (), min_value=0, max_value=100)
    )
    return x, limits, (x_axis, limit_axis), draw(st.sampled_from([0, -1]))


@given(batched_grow_args())
def test_vmap_matches_a_loop_of_lanes(args):
    x, limits, in_axes, out_axis = args
    check_batching(grow, [x, limits], in_axes, out_axis)


def test_vmap_batched_predicate_runs_until_every_lane_is_done():
    x = np.array([[0.5, -1.0], [0.1, 0.2], [2.0, 0.0]])
    limits = np.array([3.0, 50.0, 0.5])
    counts = [grow_reference(xi, li)[0] for xi, li in zip(x, limits)]
    assert len(set(counts)) == 3
    check_batching(grow, [x, limits], (0, 0))
    check_batching(fg.jit(grow), [x, limits], (0, 0))
    primitives = count_primitives(fg.vmap(grow), x, limits)
    assert primitives["while"] == 1


def test_vmap_unbatched_predicate_keeps_the_plain_loop():
    xs, w, steps = np.linspace(-1, 1, 8).reshape(4, 2), np.float64(0.7), np.int32(3)
    check_batching(orbit, [xs, w, steps], (0, None, None))
    check_batching(orbit, [xs, np.array([0.1, 0.5, 1.0, 1.5]), steps], (0, 0, None))
    text = str(fg.make_jaxpr(fg.vmap(orbit, in_axes=(0, None, None)))(xs, w, steps))
    assert text.count("while[") == 1
    assert "reduce_or" not in text and "select_n" not in text
    # Batched trip counts: the predicate becomes batched and the carry with it.
    check_batching(orbit, [xs[0], w, np.array([0, 2, 3, 1], np.int32)], (None, None, 0))


def test_nested_vmap():
    x = np.linspace(-1.5, 1.5, 24).reshape(2, 3, 4)
    limits = np.array([[1.0, 5.0, 30.0], [0.5, 100.0, 2.0]])
    actual = fg.vmap(fg.vmap(grow))(x, limits)
    expected = [[grow_reference(x[i, j], limits[i, j]) for j in range(3)] for i in range(2)]
    assert_close(actual[0], np.array([[e[0] for e in row] for row in expected], np.int32))
    assert_close(actual[1], np.array([[e[1] for e in row] for row in expected]))
    inner = fg.vmap(grow, in_axes=(1, 0))
    jitted = fg.jit(fg.vmap(inner, in_axes=(0, None)))(np.swapaxes(x, 1, 2), limits[0])
    for i in range(2):
        for j in range(3):
            assert_close(jitted[1][i, j], grow_reference(x[i, j], limits[0, j])[1])


def test_vmap_of_jvp_and_jvp_of_vmap():
    x = np.array([[0.5, -1.0], [0.1, 0.2], [2.0, 0.3]])
    limits = np.array([1.0, 50.0, 0.5])
    t = np.ones_like(x)

    def grow_jvp(x, t, limit):
        return fg.jvp(lambda y: grow(y, limit)[1], (x,), (t,))

    check_batching(grow_jvp, [x, t, limits], (0, 0, 0))
    primal, tangent = fg.jvp(lambda y: fg.vmap(grow)(y, limits)[1], (x,), (t,))
    for i in range(3):
        expected = grow_jvp(x[i], t[i], limits[i])
        assert_close(primal[i], expected[0])
        assert_close(tangent[i], expected[1])
    xs, w, steps = np.linspace(-1, 1, 6).reshape(3, 2), np.float64(0.7), np.int32(3)
    jacobians = fg.vmap(fg.jacfwd(orbit), in_axes=(0, None, None))(xs, w, steps)
    for i in range(3):
        assert_close(jacobians[i], fg.jacfwd(orbit)(xs[i], w, steps))
