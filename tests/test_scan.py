"""scan, map, fori_loop and associative_scan against definitions without control flow.

Values are checked against Python loops over the same body, derivatives against finite
differences and against the unrolled loop, batching against a loop over the lanes. Reverse
mode is checked for what makes scan worth having: the linear program is one scan whose
residuals are stacked per iteration, and checkpointing the body stores fewer of them.
"""

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_batching, check_staging
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads


def loop_scan(f, init, xs=None, length=None, reverse=False):
    """scan's definition: a Python loop over the slices, ys stacked along a new axis 0."""
    xs_leaves, xs_tree = fg.tree_util.tree_flatten(xs)
    length = length if length is not None else xs_leaves[0].shape[0]
    carry, ys = init, [None] * length
    for i in reversed(range(length)) if reverse else range(length):
        x = fg.tree_util.tree_unflatten(xs_tree, [leaf[i] for leaf in xs_leaves])
        carry, ys[i] = f(carry, x)
    if not length:
        return carry, None
    stacked = fg.tree_util.tree_map(lambda *y: np.stack([np.asarray(v) for v in y]), *ys)
    return carry, stacked


def assert_trees_close(actual, expected, **tol):
    assert fg.tree_util.tree_structure(actual) == fg.tree_util.tree_structure(expected)
    for a, e in zip(fg.tree_util.tree_leaves(actual), fg.tree_util.tree_leaves(expected)):
        assert_close(a, np.asarray(e), **tol)


def rnn_args(seed=0, length=5, size=3):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((size, size)) / 2
    h0 = rng.standard_normal(size)
    xs = rng.standard_normal((length, size))
    return w, h0, xs


def rnn(w, h0, xs, reverse=False):
    """A recurrent net: the carry is the state, ys are a per-step readout."""

    def step(h, x):
        h = fnp.tanh(w @ h + x)
        return h, fnp.sin(h) * x

    return lax.scan(step, h0, xs, reverse=reverse)


def rnn_unrolled(w, h0, xs, reverse=False):
    h, ys = h0, [None] * xs.shape[0]
    for i in reversed(range(xs.shape[0])) if reverse else range(xs.shape[0]):
        h = fnp.tanh(w @ h + xs[i])
        ys[i] = fnp.sin(h) * xs[i]
    return h, fnp.stack(ys)


def rnn_loss(w, h0, xs, reverse=False):
    h, ys = rnn(w, h0, xs, reverse)
    return fnp.sum(h**2) + fnp.sum(fnp.cos(ys))


def rnn_unrolled_loss(w, h0, xs, reverse=False):
    h, ys = rnn_unrolled(w, h0, xs, reverse)
    return fnp.sum(h**2) + fnp.sum(fnp.cos(ys))


# ---------------------------------------------------------------------------------------------
# Values


def body(c, x):
    """Carry (a, n) with an int counter; ys a pytree, one leaf reduced."""
    a, n = c
    new_a = fnp.sin(a) * x + a
    return (new_a, n + 1), {"twice": new_a * 2, "total": fnp.sum(x)}


@given(
    fst.float_dtypes,
    fst.shapes(max_dims=2, max_side=3),
    st.integers(0, 4),
    st.booleans(),
    st.data(),
)
def test_scan_matches_a_python_loop(dtype, shape, length, reverse, data):
    a = data.draw(fst.arrays(dtype, shape, min_value=-2, max_value=2))
    xs = data.draw(fst.arrays(dtype, (length, *shape), min_value=-2, max_value=2))
    init = (a, np.int32(0))
    expected = loop_scan(body, init, xs, reverse=reverse)

    def f(init, xs):
        return lax.scan(body, init, xs, reverse=reverse)

    for fun in (f, fg.jit(f)):
        carry, ys = fun(init, xs)
        assert_trees_close(carry, expected[0])
        assert ys["twice"].shape == (length, *shape) and ys["twice"].dtype == dtype
        if length:
            assert_trees_close(ys, expected[1])
    check_staging(f, init, xs)


def test_pytrees_and_none_ys():
    xs = {"u": np.arange(4.0), "v": (np.ones((4, 2)), np.arange(4))}

    def f(c, x):
        return {"s": c["s"] + x["u"] * x["v"][0], "k": c["k"] * 2}, None

    init = {"s": np.zeros(2), "k": np.int64(1)}
    carry, ys = lax.scan(f, init, xs)
    assert ys is None
    assert_trees_close(carry, loop_scan(f, init, xs)[0])


def test_length_without_xs_and_zero_length():
    carry, ys = lax.scan(lambda c, _: (c * 2.0, c), 1.0, length=4)
    assert_close(carry, np.float32(16.0))
    assert_close(ys, np.array([1.0, 2.0, 4.0, 8.0], np.float32))
    carry, ys = lax.scan(lambda c, x: (c + fnp.sum(x), (c, x * 2)), 1.5, np.zeros((0, 3)))
    assert float(carry) == 1.5
    assert ys[0].shape == (0,) and ys[1].shape == (0, 3) and ys[1].dtype == np.float64


def test_weakly_typed_init_takes_the_carried_type():
    # init 0.0 is a weak float32; the body returns a float64 carry, so the init is promoted.
    carry, ys = lax.scan(lambda c, x: (c + x, c), 0.0, np.arange(3.0))
    assert carry.dtype == np.float64 and not carry.weak_type
    assert_close(ys, np.array([0.0, 0.0, 1.0]))
    # A Python int init with a float body becomes a float carry, as in JAX.
    carry, _ = lax.scan(lambda c, x: (c + x, None), 0, np.ones(3, np.float32))
    assert carry.dtype == np.float32
    # A weak carry that stays weak stays weak.
    carry, ys = lax.scan(lambda c, _: (c + 1, c), 0, length=3)
    assert carry.weak_type and ys.weak_type and ys.dtype == np.int32


def test_disable_jit_runs_the_body_eagerly():
    seen = []

    def f(c, x):
        seen.append(type(x).__name__)
        return c + x, c * x

    xs = np.arange(1.0, 4.0)
    with fg.disable_jit():
        carry, ys = lax.scan(f, 0.0, xs, reverse=True)
    assert seen.count("Array") == 3
    assert_trees_close((carry, ys), loop_scan(f, np.float64(0.0), xs, reverse=True))


def test_errors():
    with pytest.raises(ValueError, match=r"equal leading axis sizes, got sizes \[3, 4\]"):
        lax.scan(lambda c, x: (c, None), 0.0, (np.ones(3), np.ones(4)))
    with pytest.raises(ValueError, match=r"length=5 but .* leading axis sizes \[3\]"):
        lax.scan(lambda c, x: (c, None), 0.0, np.ones(3), length=5)
    with pytest.raises(ValueError, match="pass xs to scan over, or .* length"):
        lax.scan(lambda c, x: (c, None), 0.0)
    with pytest.raises(ValueError, match="leading axis to scan over, got a scalar f32"):
        lax.scan(lambda c, x: (c, None), 0.0, np.float32(1.0))
    with pytest.raises(
        TypeError, match=r"leaf 0 of init is f32\[3\] but the body returned f32\[\]"
    ):
        lax.scan(lambda c, x: (fnp.sum(c), None), np.ones(3, np.float32), length=2)
    with pytest.raises(TypeError, match=r"init is i32\[\] but the body returned f64\[\]"):
        lax.scan(lambda c, x: (c * x, None), np.int32(1), np.ones(2))
    with pytest.raises(TypeError, match="pytree structure of init"):
        lax.scan(lambda c, x: ((c, c), None), 1.0, length=2)
    with pytest.raises(TypeError, match="must return a pair"):
        lax.scan(lambda c, x: c, 1.0, length=2)
    with pytest.raises(ValueError, match="unroll must be a non-negative integer"):
        lax.scan(lambda c, x: (c, x), 1.0, np.ones(2), unroll=-1)


def test_unroll_zero_steps_one_iteration_at_a_time():
    """unroll=0 is accepted and unrolls nothing: the cumulative sums of a Python loop."""
    xs = np.arange(1.0, 6.0, dtype=np.float32)

    def cumulative(xs):
        return lax.scan(lambda c, x: (c + x, c + x), np.float32(0.0), xs, unroll=0)

    for scan in (cumulative, fg.jit(cumulative)):
        total, partial = scan(xs)
        np.testing.assert_array_equal(np.asarray(partial), np.cumsum(xs))
        assert float(total) == 15.0


def test_make_jaxpr_pins_the_staged_scan():
    def f(w, xs):
        return lax.scan(lambda c, x: (c * w + x, c), np.float32(0.0), xs, reverse=True)

    text = str(fg.make_jaxpr(f)(np.float32(2.0), np.ones(3, np.float32)))
    assert text == (
        "{ lambda ; a:f32[] b:f32[3]. let\n"
        "    c:f32[] d:f32[3] = scan[jaxpr=\n"
        "      { lambda ; a:f32[] b:f32[] c:f32[]. let\n"
        "          d:f32[] = mul b a\n"
        "          e:f32[] = add d c\n"
        "        in (e, b) } length=3 num_carry=1 num_consts=1 reverse=True unroll=1] "
        "a 0.0:f32[] b\n"
        "  in (c, d) }"
    )


# ---------------------------------------------------------------------------------------------
# Differentiation


@pytest.mark.parametrize("reverse", [False, True])
def test_grad_matches_finite_differences_and_the_unrolled_loop(reverse):
    args = rnn_args(length=3, size=2)
    check_grads(lambda *a: rnn(*a, reverse=reverse), args, order=2)
    expected = fg.grad(rnn_unrolled_loss, argnums=(0, 1, 2))(*args, reverse)
    grad = fg.grad(rnn_loss, argnums=(0, 1, 2))
    grad_of_jit = fg.grad(fg.jit(rnn_loss, static_argnums=3), argnums=(0, 1, 2))
    for fun in (grad, fg.jit(grad, static_argnums=3), grad_of_jit):
        assert_trees_close(fun(*args, reverse), expected)


@pytest.mark.parametrize("argnums", [0, 1, 2, (0, 2)])
def test_grad_with_respect_to_some_inputs(argnums):
    # Only some consts, carries or xs are unknown; the carry becomes unknown in the loop.
    args = rnn_args(seed=1)
    expected = fg.grad(rnn_unrolled_loss, argnums)(*args)
    assert_trees_close(fg.grad(rnn_loss, argnums)(*args), expected)


def test_tangents_that_appear_and_vanish_in_the_loop():
    xs = np.linspace(0.5, 1.5, 4)

    def appear(xs):
        # The init carry is a constant: its tangent is zero until the first iteration.
        return lax.scan(lambda c, x: (c * x + fnp.sin(c), c), 1.0, xs)

    def vanish(c0, xs):
        # The carry is reset to a constant: its tangent leaves the loop as zero.
        return lax.scan(lambda c, x: (fnp.ones_like(c), c * x), c0, xs)

    check_grads(appear, (xs,), order=2)
    check_grads(vanish, (np.float64(2.0), xs), order=1)
    _, ct = fg.vjp(vanish, np.float64(2.0), xs)
    grads = ct((np.float64(1.0), np.ones(4)))
    assert_close(grads[0], np.float64(xs[0]))


def test_int_carries_and_int_xs_have_zero_tangents():
    def f(a, xs):
        def step(c, x):
            n, s = c
            return (n + x, s * fnp.cos(s + n)), n

        return lax.scan(step, (np.int32(0), a), xs)[0][1]

    xs = np.arange(4, dtype=np.int32)
    check_grads(lambda a: f(a, xs), (np.float64(0.3),), order=2)
    assert fg.grad(lambda a: f(a, xs))(0.3).dtype == np.float32


def test_nested_scans_and_jit_in_the_body():
    # The inner scan is split by its own rule inside the outer body, so the linear program
    # holds only its tangent part and transposes.
    xs = np.random.default_rng(2).standard_normal((3, 4))

    def inner_step(a, x):
        return fnp.sin(a) * x + 0.5, a * x

    def nested(c, xs):
        def outer_step(c, row):
            a, ys = lax.scan(fg.jit(inner_step), c, row)
            return a * c, fnp.sum(ys)

        return lax.scan(outer_step, c, xs)

    def unrolled(c, xs):
        outs = []
        for row in xs:
            a, ys = c, 0.0
            for x in row:
                a, y = inner_step(a, x)
                ys = ys + y
            c = a * c
            outs.append(ys)
        return c, fnp.stack(outs)

    c0 = np.float64(0.3)
    assert_trees_close(nested(c0, xs), unrolled(c0, xs))
    check_grads(nested, (c0, xs), order=2)
    loss = lambda f: lambda c, xs: fnp.sum(f(c, xs)[1] ** 2)  # noqa: E731
    expected = fg.grad(loss(unrolled), (0, 1))(c0, xs)
    assert_trees_close(fg.grad(loss(nested), (0, 1))(c0, xs), expected)


def test_linearize_stores_residuals_per_iteration():
    w, h0, xs = rnn_args(length=5, size=3)

    def f(h0, xs):
        return rnn(w, h0, xs)

    def linearized(h0, xs, dh0, dxs):
        return fg.linearize(f, h0, xs)[1](dh0, dxs)

    jaxpr = fg.make_jaxpr(linearized)(h0, xs, h0, xs)
    known, linear = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    num_primal_out = 2
    residuals = known.outvars[num_primal_out:]
    assert residuals and all(v.aval.shape[0] == 5 for v in residuals)
    # The linear scan reads them as xs (one slice per iteration) and the closed-over weights
    # once, as a const: loop-invariant values are not stacked.
    lin_xs = linear.invars[linear.params["num_consts"] + linear.params["num_carry"] :]
    assert all(r in lin_xs for r in residuals)
    lin_consts = linear.invars[: linear.params["num_consts"]]
    assert [v.aval.shape for v in lin_consts] == [(3, 3)]
    # The linear program is itself a scan, evaluating the jvp.
    _, f_jvp = fg.linearize(f, h0, xs)
    assert_trees_close(f_jvp(h0, xs), fg.jvp(f, (h0, xs), (h0, xs))[1])


def test_checkpointed_body_stacks_fewer_residuals():
    w, h0, xs = rnn_args(length=4, size=3)

    def step(h, x):
        for _ in range(3):
            h = fnp.sin(fnp.tanh(w @ h + x))
        return h, None

    def stacked_residuals(body):
        def linearized(h0, xs):
            f = lambda h0, xs: fnp.sum(lax.scan(body, h0, xs)[0])  # noqa: E731
            return fg.linearize(f, h0, xs)[1](h0, xs)

        jaxpr = fg.make_jaxpr(linearized)(h0, xs)
        known = next(e for e in jaxpr.eqns if e.primitive.name == "scan")
        return known.outvars[1:]

    plain, checkpointed = stacked_residuals(step), stacked_residuals(fg.checkpoint(step))
    # Only the carry is stored per iteration; the xs and weights are read where they are.
    assert [v.aval.shape for v in checkpointed] == [(4, 3)]
    assert len(plain) > 3 * len(checkpointed)
    expected = fg.grad(lambda h: fnp.sum(lax.scan(step, h, xs)[0]))(h0)
    actual = fg.grad(lambda h: fnp.sum(lax.scan(fg.checkpoint(step), h, xs)[0]))(h0)
    assert_close(actual, expected)


# ---------------------------------------------------------------------------------------------
# Batching


def lanes(x, axis, size=3):
    return np.stack([x * (1 + 0.25 * i) for i in range(size)], axis=axis)


@given(
    st.sampled_from([None, 0, 1, -1]),
    st.sampled_from([None, 0, -1]),
    st.sampled_from([None, 0, 2]),
    st.booleans(),
)
@settings(max_examples=10)
def test_vmap_matches_a_loop_over_lanes(w_axis, h_axis, xs_axis, reverse):
    if w_axis is None and h_axis is None and xs_axis is None:
        xs_axis = 1
    w, h0, xs = rnn_args(length=3, size=2)
    in_axes = (w_axis, h_axis, xs_axis)
    args = [a if ax is None else lanes(a, ax) for a, ax in zip((w, h0, xs), in_axes)]
    check_batching(lambda *a: rnn(*a, reverse=reverse), args, in_axes)
    check_batching(lambda *a: rnn(*a, reverse=reverse), args, in_axes, out_axes=-1)


def test_vmap_keeps_unbatched_carries_unbatched():
    def f(x, xs):
        def step(c, x_t):
            count, acc = c
            return (count + 1.0, acc + x * x_t), count

        return lax.scan(step, (0.0, 0.0), xs)

    jaxpr = fg.make_jaxpr(fg.vmap(f, in_axes=(0, None)))(np.ones(3), np.ones(4))
    (scan,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    count_in, acc_in = scan.invars[scan.params["num_consts"] :][:2]
    assert count_in.aval.shape == () and acc_in.aval.shape == (3,)
    check_batching(f, [np.arange(3.0), np.arange(4.0)], (0, None), out_axes=0)


def test_vmap_of_grad_and_nested_vmap():
    w, h0, xs = rnn_args(length=3, size=2)
    args = [w, lanes(h0, 0), lanes(xs, 1)]
    check_batching(fg.grad(rnn_loss, argnums=(0, 1, 2)), args, (None, 0, 1))
    nested = fg.vmap(fg.vmap(rnn, in_axes=(None, 0, None)), in_axes=(0, None, None))
    ws, hs = lanes(w, 0, 2), lanes(h0, 0)
    expected = [[rnn(wi, hj, xs) for hj in hs] for wi in ws]
    carry, ys = nested(ws, hs, xs)
    for i in range(2):
        for j in range(3):
            assert_trees_close((carry[i, j], ys[i, j]), expected[i][j])


# ---------------------------------------------------------------------------------------------
# map and fori_loop


def test_map():
    xs = {"a": np.arange(6.0).reshape(3, 2), "b": np.arange(3)}

    def f(x):
        return fnp.sum(x["a"]) * x["b"], x["a"][::-1]

    expected = [f({"a": xs["a"][i], "b": xs["b"][i]}) for i in range(3)]
    for fun in (lambda xs: lax.map(f, xs), fg.jit(lambda xs: lax.map(f, xs))):
        out = fun(xs)
        assert_close(out[0], np.stack([np.asarray(e[0]) for e in expected]))
        assert_close(out[1], np.stack([np.asarray(e[1]) for e in expected]))
    check_grads(lambda a: lax.map(fnp.sin, a), (np.arange(3.0),), order=2)


def test_fori_loop_with_static_bounds_is_a_scan():
    def f(x, lower=1, upper=5):
        return lax.fori_loop(lower, upper, lambda i, c: fnp.sin(c) * i + c, x)

    def unrolled(x):
        for i in range(1, 5):
            x = np.sin(x) * i + x
        return x

    assert_close(f(np.float64(0.3)), unrolled(0.3))
    jaxpr = fg.make_jaxpr(f)(np.float64(0.3))
    assert [e.primitive.name for e in jaxpr.eqns][-1] == "scan"
    assert jaxpr.eqns[-1].params["length"] == 4
    check_grads(f, (np.float64(0.3),), order=2)
    assert_close(f(np.float64(0.3), np.int64(7), 3), np.float64(0.3))
    # The index is weakly typed, like the Python int bounds it comes from.
    out = lax.fori_loop(0, 3, lambda i, c: c + i, np.int8(1))
    assert out.dtype == np.int8 and int(out) == 4


def test_fori_loop_with_traced_bounds_is_a_while_loop():
    def f(n, x):
        return lax.fori_loop(0, n, lambda i, c: c * 2.0 + i, x)

    assert_close(fg.jit(f)(4, np.float64(1.0)), np.float64(((1 * 2 + 0) * 2 + 1) * 2 + 2) * 2 + 3)
    assert "while" in [e.primitive.name for e in fg.make_jaxpr(f)(4, 1.0).eqns]


# ---------------------------------------------------------------------------------------------
# associative_scan


@given(
    fst.shapes(min_dims=1, max_dims=3, min_side=1, max_side=9),
    st.integers(-3, 2),
    st.booleans(),
    st.data(),
)
@settings(max_examples=10)
def test_associative_scan_matches_cumulative_ops(shape, axis, reverse, data):
    axis = axis % len(shape)
    x = data.draw(fst.arrays(np.float64, shape, min_value=-2, max_value=2))

    def cumulative(op, x):
        flipped = np.flip(x, axis) if reverse else x
        out = op(flipped, axis=axis)
        return np.flip(out, axis) if reverse else out

    assert_close(lax.associative_scan(lax.add, x, reverse, axis), cumulative(np.cumsum, x))
    assert_close(lax.associative_scan(lax.mul, x, reverse, axis), cumulative(np.cumprod, x))
    assert_close(
        lax.associative_scan(lax.max, x, reverse, axis), cumulative(np.maximum.accumulate, x)
    )


@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_of_a_non_commutative_op(n, reverse):
    mats = np.random.default_rng(n).standard_normal((n, 2, 2))
    expected, acc = [], None
    for m in mats[::-1] if reverse else mats:
        acc = m if acc is None else acc @ m
        expected.append(acc)
    expected = np.stack(expected[::-1] if reverse else expected)
    assert_close(lax.associative_scan(fnp.matmul, mats, reverse), expected, rtol=1e-12, atol=1e-12)
    check_grads(lambda m: lax.associative_scan(fnp.matmul, m, reverse), (mats,), order=2)


def test_associative_scan_pytrees_and_errors():
    # A linear recurrence h_t = a_t h_{t-1} + b_t as a scan of (a, b) pairs.
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 1.0, 6), rng.standard_normal(6)

    def compose(first, second):
        return second[0] * first[0], second[0] * first[1] + second[1]

    _, h = fg.jit(lambda a, b: lax.associative_scan(compose, (a, b)))(a, b)
    _, expected = loop_scan(lambda h, ab: (ab[0] * h + ab[1],) * 2, 0.0, (a, b))
    assert_close(h, expected)
    check_grads(lambda a, b: lax.associative_scan(compose, (a, b))[1], (a, b), order=1)
    with pytest.raises(ValueError, match=r"equal sizes along axis 0, got shapes \(3,\), \(4,\)"):
        lax.associative_scan(compose, (np.ones(3), np.ones(4)))


def test_fori_loop_with_float_bounds_counts_as_jax_does():
    # Known float bounds are truncated and the index is an integer, as in a Python loop over
    # range(int(lower), int(upper)).
    total = lax.fori_loop(0.5, 3.7, lambda i, v: v + i, 0)
    assert int(total) == sum(range(0, 3)) and np.asarray(total).dtype == np.int32
    powers = fg.grad(lambda x: lax.fori_loop(0.0, 3.0, lambda i, v: v * x, 1.0))(2.0)
    assert float(powers) == 3 * 2.0**2
    # A bound whose value grad knows is static: a scan, so reverse mode works.
    assert float(fg.grad(lambda x: lax.fori_loop(0.0, x, lambda i, v: v * 2.0, x))(3.0)) == 8.0
    # A traced float bound runs a while loop over a float index.
    traced = fg.jit(lambda upper: lax.fori_loop(0.0, upper, lambda i, v: v + i, 0.0))
    assert float(traced(3.0)) == 0.0 + 1.0 + 2.0
    with pytest.raises(TypeError, match="numeric scalar"):
        lax.fori_loop(np.zeros(2), 3, lambda i, v: v, 0)
