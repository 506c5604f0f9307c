"""Corners where control flow meets transformations, each against a definition that needs no
transformation: Python loops and `if`s for values, central differences in float64 for
derivatives, a loop over the lanes for vmap, eager execution for jit (on the NumPy and LLVM
backends). Also the errors bad arguments get: they name the argument, never crash deep inside
or give a wrong answer."""

import functools

import numpy as np
import pytest
from checks import assert_close, check_batching, check_staging, jit_backend
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax, tree_util
from funcgrad.core import ShapedArray
from funcgrad.errors import ConcretizationTypeError

EPS = 1e-6
BACKENDS = ("numpy", "llvm")


def directional_difference(fun, x, direction):
    """Central difference of the scalar fun at the float64 point x along direction."""
    return (float(fun(x + EPS * direction)) - float(fun(x - EPS * direction))) / (2 * EPS)


def assert_gradient_matches_differences(fun, x, seed=0):
    direction = np.random.default_rng(seed).normal(size=np.shape(x))
    expected = directional_difference(fun, x, direction)
    np.testing.assert_allclose(float(np.sum(fg.grad(fun)(x) * direction)), expected, rtol=1e-6)
    np.testing.assert_allclose(float(fg.jvp(fun, (x,), (direction,))[1]), expected, rtol=1e-6)


def assert_trees_close(actual, expected, **tol):
    actual_leaves, actual_tree = tree_util.tree_flatten(actual)
    expected_leaves, expected_tree = tree_util.tree_flatten(expected)
    assert actual_tree == expected_tree, (actual_tree, expected_tree)
    for a, e in zip(actual_leaves, expected_leaves):
        assert_close(a, e, **tol)


def assert_jit_equals_eager(fun, *args):
    expected = fun(*args)
    for backend in BACKENDS:
        with jit_backend(backend):
            assert_trees_close(fg.jit(fun)(*args), expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# A weakly typed initial carry the body makes strong is strong after the loop, whichever loop


def _scan_carry(x):
    return lax.scan(lambda c, a: (c + a, c), 1.0, x)[0]


def _fori_static_carry(x):
    return lax.fori_loop(0, 3, lambda i, c: c + x[i], 1.0)


def _fori_traced_carry(x, n=3):
    return fg.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c + x[i], 1.0))(n)


def _while_carry(x):
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + x[c[0]]), (0, 1.0))[1]


@pytest.mark.parametrize(
    "loop", [_scan_carry, _fori_static_carry, _fori_traced_carry, _while_carry]
)
def test_a_weak_init_the_body_makes_strong_is_strong_after_the_loop(loop):
    # `1.0 + float32` is a strong float32, so the carry is one: as a weak float32 it would
    # promote differently afterwards (times a float16 array it would give float16).
    x = fnp.asarray(np.array([0.5, 0.25, 2.0], np.float32))
    carry = loop(x)
    assert carry.aval == ShapedArray((), np.float32, False)
    assert float(carry) == 3.75
    assert (carry * np.ones(2, np.float16)).dtype == np.float32


def test_the_promoted_scan_carry_stages_as_it_runs():
    x = np.array([0.5, 0.25, 2.0], np.float32)
    check_staging(lambda x: lax.scan(lambda c, a: (c * a + 1.0, c), 1.0, x), x)
    out = fg.vmap(_scan_carry)(np.stack([x, 2 * x]))
    assert out.aval == ShapedArray((2,), np.float32, False)


# ---------------------------------------------------------------------------------------------
# fori_loop bounds of mixed types: the index has their promoted type, and a known bound that
# does not fit it is refused (converted, it wrapped around: wrong indices, wrong trip counts)

SMALL_INTS = [np.int8, np.uint8, np.int16]


@given(
    dtype=st.sampled_from(SMALL_INTS),
    typed_bound=st.integers(-130, 300),
    python_bound=st.integers(-300, 300),
    typed_is_lower=st.booleans(),
    traced=st.booleans(),
)
def test_fori_loop_index_of_mixed_bound_types(
    dtype, typed_bound, python_bound, typed_is_lower, traced
):
    info = np.iinfo(dtype)
    typed_bound = int(np.clip(typed_bound, info.min, info.max))
    lower, upper = (typed_bound, python_bound) if typed_is_lower else (python_bound, typed_bound)

    def loop(typed):
        bounds = (typed, python_bound) if typed_is_lower else (python_bound, typed)
        return lax.fori_loop(*bounds, lambda i, c: c + i.astype(np.int32) * 3 + 1, 0)

    run = fg.jit(loop) if traced else loop
    typed = dtype(typed_bound)
    if not info.min <= python_bound <= info.max:
        with pytest.raises(OverflowError, match=rf"fori_loop: .*{python_bound} does not fit"):
            run(typed)
        return
    assert int(run(typed)) == sum(i * 3 + 1 for i in range(lower, upper))


# ---------------------------------------------------------------------------------------------
# lax.map's batch_size


@pytest.mark.parametrize("batch_size", [0, np.int64(2), np.int32(4)])
def test_map_batch_sizes_zero_and_numpy_ints(batch_size):
    xs = {"a": np.arange(15.0).reshape(5, 3), "b": np.arange(5) - 2}

    def f(x):
        return fnp.sum(fnp.sin(x["a"])) * x["b"], x["a"][::-1]

    expected = [f({"a": xs["a"][i], "b": xs["b"][i]}) for i in range(5)]
    expected = tree_util.tree_map(lambda *ys: np.stack(ys), *expected)
    assert_trees_close(lax.map(f, xs, batch_size=batch_size), expected)
    assert_trees_close(
        fg.jit(lambda xs: lax.map(f, xs, batch_size=batch_size))(xs), expected, rtol=1e-12
    )


def test_map_batch_size_zero_is_one_vmap():
    jaxpr = fg.make_jaxpr(lambda x: lax.map(fnp.sin, x, batch_size=0))(np.zeros(6)).jaxpr
    assert [e.primitive.name for e in jaxpr.eqns] == ["sin"]


@given(length=st.integers(1, 7), batch_size=st.integers(0, 8))
def test_map_batches_under_grad_and_vmap(length, batch_size):
    x = np.linspace(-1.0, 1.5, length * 2).reshape(length, 2)

    def loss(x):
        return fnp.sum(lax.map(lambda r: fnp.sin(r) * r[0], x, batch_size=batch_size) ** 2)

    assert_gradient_matches_differences(loss, x)
    check_batching(
        lambda x: lax.map(lambda r: fnp.cos(r) + r[1], x, batch_size=batch_size),
        [np.stack([x, -x])],
        [0],
    )


# ---------------------------------------------------------------------------------------------
# Errors that name their cause


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: lax.cond(True, 1.0, fnp.sin, 0.0), "cond: true_fun must be callable, got float"),
        (lambda: lax.cond(True, fnp.sin, None, 0.0), "cond: false_fun must be callable"),
        (lambda: lax.switch(1, [fnp.sin, 2]), "switch: branch 1 must be callable, got int"),
        (lambda: lax.while_loop(True, fnp.sin, 0.0), "while_loop: cond_fun must be callable"),
        (lambda: lax.while_loop(fnp.isnan, 1, 0.0), "while_loop: body_fun must be callable"),
        (lambda: lax.scan(None, 0.0, np.ones(3)), "scan: f must be callable, got NoneType"),
        (lambda: lax.fori_loop(0, 3, 1.0, 0.0), "fori_loop: body_fun must be callable"),
        (lambda: lax.map("sin", np.ones(3)), "map: f must be callable, got str"),
        (lambda: lax.associative_scan(0, np.ones(3)), "associative_scan: fn must be callable"),
    ],
)
def test_arguments_that_are_not_functions_are_named(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_scan_length_and_unroll_must_be_ints_known_while_tracing():
    body = lambda c, x: (c + 1, c)  # noqa: E731
    with pytest.raises(TypeError, match="scan: length must be an int, got 3.0"):
        lax.scan(body, 0, None, length=3.0)
    with pytest.raises(TypeError, match="scan: unroll must be an int, got 2.0"):
        lax.scan(body, 0, np.ones(3), unroll=2.0)
    with pytest.raises(ConcretizationTypeError, match="scan: length must be known while tracing"):
        fg.jit(lambda n: lax.scan(body, 0, None, length=n))(3)
    # A NumPy integer is an int.
    assert lax.scan(body, 0, None, length=np.int64(3))[1].shape == (3,)


def test_scan_body_returning_more_than_a_pair():
    with pytest.raises(TypeError, match=r"return a pair \(carry, y\), got a tuple of 3 elements"):
        lax.scan(lambda c, x: (c, x, x), 0.0, np.ones(3))


@pytest.mark.parametrize("container", [lambda p: (p,), lambda p: [p], lambda p: {"p": p}])
def test_while_cond_returning_a_container_is_refused(container):
    # Python's `while (pred,)` would never stop; the staged loop must not read it as `pred`.
    with pytest.raises(TypeError, match=r"cond_fun must return a bool scalar, got \(bool\[\]\) in"):
        lax.while_loop(lambda c: container(c < 3), lambda c: c + 1, 0)


@pytest.mark.parametrize(
    "fn, given, returned",
    [
        (lambda a, b: (a + b)[:1], r"f32\[2\]", r"f32\[1\]"),  # was a wrong answer, 3 long
        (lambda a, b: fnp.sum(a + b), r"f32\[2\]", r"f32\[\]"),  # was an IndexError
        (lambda a, b: (a + b) * 0.5, r"i32\[2\]", r"f32\[2\]"),  # was concatenate's error
    ],
)
def test_associative_scan_fn_must_keep_its_elements_shapes_and_dtypes(fn, given, returned):
    elems = np.arange(4, dtype=np.int32 if "i32" in given else np.float32)
    with pytest.raises(TypeError, match=rf"elementwise.* {given} in its arguments and {returned}"):
        lax.associative_scan(fn, elems)


# ---------------------------------------------------------------------------------------------
# switch: the index is clamped, eagerly, staged and per lane, whatever its integer type


@given(
    dtype=st.sampled_from([np.int8, np.uint8, np.int32, np.uint32, np.int64]),
    indices=st.lists(st.integers(-128, 127), min_size=1, max_size=6),
    num_branches=st.integers(2, 4),
)
def test_switch_clamps_every_index_type_under_jit_and_vmap(dtype, indices, num_branches):
    indices = np.array(indices).astype(dtype)  # negative values wrap in unsigned types
    branches = [functools.partial(lambda k, x: x * (k + 1) - k, k) for k in range(num_branches)]
    x = np.linspace(0.5, 1.5, len(indices))

    def expected(i, v):
        return branches[int(np.clip(int(i), 0, num_branches - 1))](v)

    def f(i, v):
        return lax.switch(i, branches, v)

    want = np.array([expected(i, v) for i, v in zip(indices, x)])
    assert_close(fg.vmap(f)(indices, x), want)
    for backend in BACKENDS:
        with jit_backend(backend):
            assert_close(fg.jit(fg.vmap(f))(indices, x), want)
            assert_close(fg.jit(f)(indices[0], x[0]), want[0])


# ---------------------------------------------------------------------------------------------
# scan: reverse, unroll, carries with None leaves, no xs, zero iterations


def _scan_corner(x, length, reverse, unroll):
    """A carry of (float, None, int) leaves; ys of a None leaf and the int iteration count."""
    xs = fnp.stack([x * (k + 1) for k in range(length)]) if length else fnp.zeros((0, x.size))

    def body(carry, a):
        value, nothing, count = carry
        value = fnp.sin(value) * a + value * 0.5
        return (value, nothing, count + 1), {"y": value * count, "none": None, "count": count}

    return lax.scan(body, (x, None, 0), xs, reverse=reverse, unroll=unroll)


def _scan_corner_reference(x, length, reverse):
    value, count, ys = np.asarray(x), 0, [None] * length
    for k in reversed(range(length)) if reverse else range(length):
        value = np.sin(value) * (x * (k + 1)) + value * 0.5
        ys[k] = (value * count, count)
        count += 1
    return value, count, ys


@given(
    length=st.integers(0, 5),
    reverse=st.booleans(),
    unroll=st.one_of(st.integers(0, 6), st.booleans()),
)
def test_scan_corners_against_a_python_loop_finite_differences_and_lanes(length, reverse, unroll):
    x = np.array([0.3, -0.8, 1.2])
    (value, nothing, count), ys = _scan_corner(x, length, reverse, unroll)
    want_value, want_count, want_ys = _scan_corner_reference(x, length, reverse)
    assert nothing is None and ys["none"] is None
    assert_close(value, want_value)
    assert int(count) == want_count
    assert ys["y"].shape == (length, 3) and ys["count"].dtype == np.int32
    for k, (y, c) in enumerate(want_ys):
        assert_close(ys["y"][k], y)
        assert int(ys["count"][k]) == c
    assert_jit_equals_eager(lambda x: _scan_corner(x, length, reverse, unroll), x)

    def loss(x):
        (value, _, _), ys = _scan_corner(x, length, reverse, unroll)
        return fnp.sum(fnp.cos(value)) + fnp.sum(ys["y"] ** 2)

    assert_gradient_matches_differences(loss, x)
    lanes = np.stack([x, x[::-1], x * 0.5])
    check_batching(lambda x: _scan_corner(x, length, reverse, unroll), [lanes], [0])
    check_batching(fg.grad(loss), [lanes.T], [1])


def test_scan_of_length_zero_under_every_transformation():
    def f(x):
        return lax.scan(lambda c, a: (c * a + fnp.sin(c), c * 2.0), x, fnp.zeros((0, 2)))

    x = np.array([0.5, -1.5])
    carry, ys = f(x)
    assert_close(carry, x)
    assert ys.shape == (0, 2) and ys.dtype == np.float64
    assert_jit_equals_eager(f, x)
    np.testing.assert_array_equal(fg.grad(lambda x: fnp.sum(f(x)[0] ** 2))(x), 2 * x)
    np.testing.assert_array_equal(fg.jvp(f, (x,), (np.ones(2),))[1][0], np.ones(2))
    carry, ys = fg.vmap(f, out_axes=-1)(np.stack([x, -x]))
    assert carry.shape == (2, 2) and ys.shape == (0, 2, 2)


# ---------------------------------------------------------------------------------------------
# fori_loop and while_loop: zero and negative trip counts, traced and batched trip counts


@pytest.mark.parametrize("bounds", [(0, 0), (3, 1), (-2, 2), (1, 4)])
def test_fori_loop_trip_counts_static_and_traced(bounds):
    def step(i, c):
        return fnp.sin(c) * (i + 2) + c

    def reference(x):
        for i in range(*bounds):
            x = np.sin(x) * (i + 2) + x
        return x

    x = np.array([0.4, -1.1])
    static = lax.fori_loop(*bounds, step, x)
    traced = fg.jit(lambda lo, hi, x: lax.fori_loop(lo, hi, step, x))(*bounds, x)
    assert_close(static, reference(x))
    assert_close(traced, reference(x))
    assert_gradient_matches_differences(lambda x: fnp.sum(lax.fori_loop(*bounds, step, x)), x)
    # Traced bounds are a while loop: forward mode only.
    direction = np.array([0.7, -0.2])
    forward = fg.jvp(
        lambda x: fg.jit(lax.fori_loop, static_argnums=2)(*bounds, step, x), (x,), (direction,)
    )[1]
    expected = (reference(x + EPS * direction) - reference(x - EPS * direction)) / (2 * EPS)
    assert_close(forward, expected, rtol=1e-6, atol=1e-7)


def _tangent(fun, n, x):
    """The derivative of fun(n, x) in x."""
    return fg.jvp(lambda x: fun(n, x), (x,), (1.0,))[1]


@given(trips=st.lists(st.integers(-3, 5), min_size=1, max_size=5))
def test_batched_trip_counts_and_lower_bounds(trips):
    """Each lane runs its own number of iterations, a negative one none."""
    trips = np.array(trips, np.int32)
    x = np.linspace(-1.0, 1.0, len(trips))

    def count_up(n, x):
        return lax.fori_loop(0, n, lambda i, c: c * 0.5 + fnp.cos(c) * i, x)

    def count_down(lower, x):
        return lax.fori_loop(lower, 3, lambda i, c: c * 0.5 + fnp.cos(c) * i, x)

    for fun in (count_up, count_down):
        check_batching(fun, [trips, x], [0, 0])
        check_batching(fun, [trips, 0.25], [0, None])
        with jit_backend("llvm"):
            check_batching(fg.jit(fun), [trips, x], [0, 0])
        jvps = fg.vmap(functools.partial(_tangent, fun))(trips, x)
        for n, xi, t in zip(trips, x, np.asarray(jvps)):
            want = (fun(n, xi + EPS) - fun(n, xi - EPS)) / (2 * EPS)
            assert_close(t, want, rtol=1e-6, atol=1e-7)


def _traced_trips(x, n):
    return lax.fori_loop(0, n, lambda i, c: c * fnp.sin(c) + 1.0, x)


@pytest.mark.parametrize(
    "transformed",
    [
        lambda x: fg.grad(fg.jit(_traced_trips))(x, 3),
        lambda x: fg.vmap(fg.grad(_traced_trips))(fnp.stack([x, x]), np.array([2, 3])),
        lambda x: fg.grad(
            lambda x: fnp.sum(fg.vmap(_traced_trips)(fnp.stack([x, x]), np.array([1, 2])))
        )(x),
        lambda x: fg.grad(
            lambda x: lax.cond(x > 0, lambda x: fg.jit(_traced_trips)(x, 2), fnp.sin, x)
        )(x),
        lambda x: fg.grad(
            lambda x: lax.scan(
                lambda c, n: (fg.jit(_traced_trips)(c, n), None), x, np.array([1, 2])
            )[0]
        )(x),
        lambda x: fg.grad(fg.checkpoint(lambda x: fg.jit(_traced_trips)(x, 2)))(x),
        lambda x: fg.jacrev(lambda x: fg.jit(_traced_trips)(x, 2))(x),
        lambda x: fg.hessian(lambda x: fg.jit(_traced_trips)(x, 2))(x),
    ],
)
def test_reverse_mode_through_a_traced_trip_count_names_the_while_loop(transformed):
    with pytest.raises(NotImplementedError, match="reverse-mode differentiation .* of while_loop"):
        transformed(0.3)


def test_forward_mode_through_a_traced_trip_count_at_second_order():
    def f(x):
        return fg.jit(_traced_trips)(x, 2)

    def reference(x):
        for _ in range(2):
            x = x * np.sin(x) + 1.0
        return x

    x = 0.7
    second = fg.jacfwd(fg.jacfwd(f))(np.float64(x))
    want = (reference(x + 1e-4) - 2 * reference(x) + reference(x - 1e-4)) / 1e-8
    np.testing.assert_allclose(float(second), want, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# cond: operand pytrees with None and integer leaves; a batched predicate is a select


def _cond_on_a_pytree(x):
    operands = {"x": x, "nothing": None, "k": 3, "pair": (x[0], x[1:])}

    def on_true(o):
        return {"v": o["x"] * o["k"], "w": o["pair"][0] * o["pair"][1], "n": None}

    def on_false(o):
        return {"v": fnp.exp(o["x"]), "w": o["pair"][1] ** 2, "n": None}

    return lax.cond(x[2] > 0, on_true, on_false, operands)


def _cond_on_a_pytree_reference(x):
    if x[2] > 0:
        return {"v": x * 3, "w": x[0] * x[1:], "n": None}
    return {"v": np.exp(x), "w": x[1:] ** 2, "n": None}


def test_cond_pytree_operands_against_python_if():
    lanes = np.array([[0.3, -0.7, 1.1], [1.5, 0.2, -0.4], [-1.2, 0.9, 0.05]])
    for x in lanes:
        assert_trees_close(_cond_on_a_pytree(x), _cond_on_a_pytree_reference(x))
        assert_jit_equals_eager(_cond_on_a_pytree, x)

        def loss(x):
            out = _cond_on_a_pytree(x)
            return fnp.sum(fnp.sin(out["v"])) + fnp.sum(out["w"])

        assert_gradient_matches_differences(loss, x)
    check_batching(_cond_on_a_pytree, [lanes], [0])
    check_batching(_cond_on_a_pytree, [lanes.T], [1], out_axes=-1)
    with jit_backend("llvm"):
        check_batching(fg.jit(fg.grad(loss)), [lanes], [0])


# ---------------------------------------------------------------------------------------------
# Custom derivative rules and checkpoint policies inside loops and branches


@fg.custom_jvp
def _soft(x):
    return fnp.log1p(fnp.exp(x))


@_soft.defjvp
def _soft_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _soft(x), t / (1 + fnp.exp(-x))


@fg.custom_vjp
def _scaled_sin(x, w):
    return fnp.sin(x) * w


def _scaled_sin_fwd(x, w):
    return fnp.sin(x) * w, (x, w)


def _scaled_sin_bwd(residuals, g):
    x, w = residuals
    return g * fnp.cos(x) * w, g * fnp.sin(x)


_scaled_sin.defvjp(_scaled_sin_fwd, _scaled_sin_bwd)

POLICIES = [
    None,
    fg.checkpoint_policies.nothing_saveable,
    fg.checkpoint_policies.everything_saveable,
    fg.checkpoint_policies.dots_saveable,
]


def _custom_rules_in_loops(x, policy):
    w = fnp.outer(x, x) * 0.2

    @functools.partial(fg.checkpoint, policy=policy)
    def step(c, a):
        h = _scaled_sin(w @ c, a * fnp.ones_like(c)) + _soft(c)
        h = lax.cond(
            a > 0, lambda h: _soft(h) * a, lambda h: _scaled_sin(h, fnp.full_like(h, 0.5)), h
        )
        return h, fnp.sum(h)

    carry, ys = lax.scan(step, x, x, reverse=True)
    return lax.fori_loop(0, 2, lambda i, c: _soft(c) * 0.5 + c, carry), ys


def _custom_rules_reference(x):
    w = np.outer(x, x) * 0.2
    soft = lambda v: np.log1p(np.exp(v))  # noqa: E731
    c, ys = x, [0.0] * len(x)
    for k in reversed(range(len(x))):
        a = x[k]
        h = np.sin(w @ c) * a + soft(c)
        h = soft(h) * a if a > 0 else np.sin(h) * 0.5
        c, ys[k] = h, np.sum(h)
    for _ in range(2):
        c = soft(c) * 0.5 + c
    return c, np.array(ys)


@pytest.mark.parametrize("policy", POLICIES)
def test_custom_rules_and_checkpoint_policies_inside_loops(policy):
    lanes = np.array([[0.3, -0.7, 1.1], [1.5, 0.2, -0.4], [-1.2, 0.9, 0.05]])
    f = functools.partial(_custom_rules_in_loops, policy=policy)

    def loss(x):
        carry, ys = f(x)
        return fnp.sum(carry**2) + fnp.sum(fnp.sin(ys))

    for x in lanes:
        assert_trees_close(f(x), _custom_rules_reference(x), rtol=1e-12, atol=1e-12)
        direction = np.random.default_rng(1).normal(size=3)
        np.testing.assert_allclose(
            float(np.sum(fg.grad(loss)(x) * direction)),
            directional_difference(loss, x, direction),
            rtol=1e-6,
        )
    check_batching(fg.grad(loss), [lanes], [0])
    with jit_backend("llvm"):
        check_batching(fg.jit(fg.grad(fg.jit(loss))), [lanes], [0])
    gradient_of_sum = fg.grad(lambda xs: fnp.sum(fg.vmap(loss)(xs)))(lanes)
    assert_close(gradient_of_sum, np.stack([fg.grad(loss)(x) for x in lanes]))


# ---------------------------------------------------------------------------------------------
# associative_scan along any axis, in either direction


def _affine_compose(first, second):
    """(a, b) then (c, d) is x -> c (a x + b) + d: associative, not commutative."""
    (a, b), (c, d) = first, second
    return a * c, b * c + d


@given(
    shape=st.sampled_from([(5,), (3, 4), (2, 3, 2)]),
    axis_choice=st.integers(0, 5),
    reverse=st.booleans(),
)
def test_associative_scan_against_a_sequential_fold(shape, axis_choice, reverse):
    axis = axis_choice % len(shape) - (len(shape) if axis_choice % 2 else 0)  # negative too
    rng = np.random.default_rng(len(shape) + axis_choice)
    a, b = rng.uniform(0.5, 1.5, shape), rng.normal(size=shape)

    def scanned(a, b):
        return lax.associative_scan(_affine_compose, (a, b), reverse=reverse, axis=axis)

    moved = [np.moveaxis(v, axis, 0) for v in (a, b)]
    order = range(shape[axis])
    folded, acc = [None] * shape[axis], None
    for k in reversed(order) if reverse else order:
        element = (moved[0][k], moved[1][k])
        acc = element if acc is None else _affine_compose(acc, element)
        folded[k] = acc
    expected = [np.moveaxis(np.stack([f[i] for f in folded]), 0, axis) for i in range(2)]
    assert_trees_close(scanned(a, b), tuple(expected), rtol=1e-12, atol=1e-12)
    assert_jit_equals_eager(scanned, a, b)

    def loss(b):
        return fnp.sum(fnp.sin(scanned(a, b)[1]))

    assert_gradient_matches_differences(loss, b)


# ---------------------------------------------------------------------------------------------
# Stacks: vmap of grad of jit of scan, grad of vmap, on both backends


def _rnn(params, xs):
    w, u = params

    def step(h, x):
        h = fnp.tanh(w @ h + u * x)
        return h, lax.cond(h[0] > 0, lambda h: fnp.sum(h), lambda h: -fnp.sum(h**2), h)

    h, ys = lax.scan(step, fnp.zeros(2, xs.dtype), xs, unroll=2)
    return fnp.sum(h) + fnp.sum(ys)


def _rnn_reference(params, xs):
    w, u = params
    h, total = np.zeros(2), 0.0
    for x in xs:
        h = np.tanh(w @ h + u * x)
        total += np.sum(h) if h[0] > 0 else -np.sum(h**2)
    return np.sum(h) + total


def test_per_example_gradients_of_a_jitted_scan_on_every_backend():
    rng = np.random.default_rng(3)
    params = (rng.normal(size=(2, 2)), rng.normal(size=2))
    batch = rng.normal(size=(4, 5))
    for xs in batch:
        np.testing.assert_allclose(float(_rnn(params, xs)), _rnn_reference(params, xs), rtol=1e-12)
    loop = [fg.grad(_rnn)(params, xs) for xs in batch]
    for k in range(4):
        direction = tuple(rng.normal(size=np.shape(p)) for p in params)
        along = tuple(p + EPS * d for p, d in zip(params, direction))
        against = tuple(p - EPS * d for p, d in zip(params, direction))
        want = (_rnn_reference(along, batch[k]) - _rnn_reference(against, batch[k])) / (2 * EPS)
        got = sum(float(np.sum(g * d)) for g, d in zip(loop[k], direction))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    expected = tree_util.tree_map(lambda *gs: np.stack(gs), *loop)
    for backend in BACKENDS:
        with jit_backend(backend):
            per_example = fg.vmap(fg.grad(fg.jit(_rnn)), in_axes=(None, 0))(params, batch)
            assert_trees_close(per_example, expected, rtol=1e-12, atol=1e-12)
            summed = fg.jit(fg.grad(lambda p: fnp.sum(fg.vmap(_rnn, in_axes=(None, 0))(p, batch))))
            assert_trees_close(
                summed(params), tree_util.tree_map(lambda g: g.sum(0), expected), rtol=1e-12
            )
