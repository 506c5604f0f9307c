"""donate_argnums: outputs take over donated arguments' buffers on the compiled backend, and the
results stay those of the reference backend whatever the program's access pattern."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import training
from checks import jit_backend, products_as
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp


def fresh(shape, seed=0, dtype=np.float32):
    """An array that owns its buffer alone (nothing else may see it overwritten)."""
    return fnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def address(x) -> int:
    return np.asarray(x).__array_interface__["data"][0]


def quiet_jit(f, **kwargs):
    """jit(f), without the warning about donations that cannot be used."""
    jitted = fg.jit(f, **kwargs)

    def call(*args):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return jitted(*args)

    return call


def test_optimizer_step_updates_parameters_in_place():
    step = fg.jit(lambda p, g: p - 0.1 * g, donate_argnums=0)
    with jit_backend("llvm"):
        p, g = fresh(1000), fresh(1000, 1)
        expected = np.asarray(p) - np.float32(0.1) * np.asarray(g)
        where = address(p)
        out = step(p, g)
    assert address(out) == where
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert p.is_deleted() and not g.is_deleted()
    assert "deleted" in repr(p)
    with pytest.raises(RuntimeError, match="deleted.*donate"):
        p + 1
    with pytest.raises(RuntimeError, match="deleted"):
        np.asarray(p)


@pytest.mark.parametrize(
    "copy",
    [lambda a: a.copy(), fnp.copy, fnp.array, lambda a: fnp.asarray(a, copy=True)],
    ids=["method", "fnp.copy", "fnp.array", "asarray(copy=True)"],
)
def test_donating_a_copy_leaves_the_original(copy):
    # Copies shared the array object itself, so donating the copy deleted the original.
    step = fg.jit(lambda p: p * 2.0, donate_argnums=0)
    p = fresh(100)
    expected = 2 * np.asarray(p)
    with jit_backend("llvm"):
        out = step(copy(p))
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert not p.is_deleted()
    np.testing.assert_allclose(p * 2.0, expected, rtol=1e-6)
    # (a traced value's copy is the value: nothing is donated while tracing)
    np.testing.assert_allclose(fg.jit(lambda p: copy(p) * 2.0)(p), expected, rtol=1e-6)
    np.testing.assert_allclose(fg.grad(lambda p: (copy(p) * 2.0).sum())(p), 2.0 * np.ones(100))


@pytest.mark.parametrize("path", ["library", "tiles"])
def test_a_gemm_updates_a_donated_parameter_where_it_is(path):
    """A gradient step whose gradient is a product is that GEMM (`GemmStep.addend`), or those
    register tiles (`TileStep.addend`), which update the donated parameter in place: no
    copy, no kernel. A parameter the product also multiplies is read by it to the end: its
    update goes to memory of its own."""

    def step(w, x):
        return w - 0.1 * fg.grad(lambda w: fnp.tanh(x @ w).sum())(w)

    def squared(w):
        return w - 0.1 * (w @ w)

    with jit_backend("numpy"):
        expected = [
            fg.jit(step)(fresh((24, 40)), fresh((32, 24), 1)),
            fg.jit(squared)(fresh((24, 24))),
        ]
    with jit_backend("llvm"), products_as(path):
        plan = fg.jit(step).lower(fresh((24, 40)), fresh((32, 24), 1)).compile()
        assert ("gemm[" if path == "library" else "tiles[") in plan.executable.fusion_plan()
        w, x = fresh((24, 40)), fresh((32, 24), 1)
        where = address(w)
        out = quiet_jit(step, donate_argnums=0)(w, x)
        assert address(out) == where and w.is_deleted()
        w = fresh((24, 24))
        where = address(w)
        out_squared = quiet_jit(squared, donate_argnums=0)(w)
        assert address(out_squared) != where  # (the donation goes unused, with a warning)
    for got, e in zip((out, out_squared), expected):
        np.testing.assert_allclose(np.asarray(got), np.asarray(e), rtol=1e-5, atol=1e-5)


def test_a_scalar_parameter_is_updated_in_place_too():
    step = fg.jit(lambda t, g: t - 0.1 * g, donate_argnums=0)  # (a learned temperature)
    with jit_backend("llvm"), warnings.catch_warnings():
        warnings.simplefilter("error")  # (a donation no output can take warns)
        t, g = fresh(()), fresh((), 1)
        expected = np.asarray(t) - np.float32(0.1) * np.asarray(g)
        out = step(t, g)  # (its store, in no loop, is pointwise: no warning)
    assert t.is_deleted()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_donated_pytree_of_parameters():
    @fg.jit
    def unused(p):
        return p

    step = fg.jit(
        lambda params, grads: fg.tree_util.tree_map(lambda p, g: p - g, params, grads),
        donate_argnums=(0,),
    )
    with jit_backend("llvm"):
        params = {"w": fresh((3, 4)), "b": fresh(4, 1)}
        grads = {"w": fresh((3, 4), 2), "b": fresh(4, 3)}
        expected = {k: np.asarray(params[k]) - np.asarray(grads[k]) for k in params}
        places = {k: address(v) for k, v in params.items()}
        new = step(params, grads)
    for k in params:
        assert params[k].is_deleted()
        assert address(new[k]) == places[k]
        np.testing.assert_allclose(new[k], expected[k], rtol=1e-6)


def test_a_buffer_seen_elsewhere_is_copied_not_overwritten():
    step = fg.jit(lambda p: p * 2, donate_argnums=0)
    with jit_backend("llvm"):
        p = fresh(16)
        view = np.asarray(p)  # the caller still reads this buffer
        before = view.copy()
        out = step(p)
    np.testing.assert_array_equal(view, before)
    np.testing.assert_allclose(out, before * 2)
    assert address(out) != address(view)


def test_the_same_array_donated_and_read_twice():
    f = quiet_jit(lambda a, b: (a * 3 + b, b - a), donate_argnums=0)
    with jit_backend("llvm"):
        x = fresh(32)
        value = np.asarray(x).copy()
        first, second = f(x, x)
    np.testing.assert_allclose(first, value * 4, rtol=1e-6)
    np.testing.assert_allclose(second, np.zeros_like(value))


def test_an_output_of_another_shape_takes_over_a_donated_buffer_in_its_own_shape():
    # An output as large as the donated input may live in its buffer whatever its shape; the
    # result was the input's array, of the input's shape.
    f = fg.jit(lambda x: x.reshape(6) + 1.0, donate_argnums=0)
    with jit_backend("llvm"):
        x = fresh((2, 3))
        value = np.asarray(x).copy()
        where = address(x)
        flat = f(x)
    assert address(flat) == where and flat.shape == (6,)
    np.testing.assert_allclose(flat, value.reshape(6) + 1.0)


def test_unusable_donation_warns_and_keeps_the_argument():
    f = fg.jit(lambda x, y: x.sum() + y, donate_argnums=0)
    unusable = r"donated buffers were not usable: f32\[5\]"
    with jit_backend("llvm"), pytest.warns(UserWarning, match=unusable):
        f(fresh(5), fresh(()))


def test_static_and_donated_together_is_an_error():
    with pytest.raises(ValueError, match="both static and donated"):
        fg.jit(lambda x, n: x * n, static_argnums=1, donate_argnums=1)


def test_reference_backend_accepts_donation_and_allocates():
    f = fg.jit(lambda p: p + 1, donate_argnums=0)
    with jit_backend("numpy"):
        p = fresh(8)
        out = f(p)
    assert not p.is_deleted()
    np.testing.assert_allclose(out, np.asarray(p) + 1)


# Programs that read the donated input in every pattern the scheduler fuses: only the ones
# proven safe may write in place, and every one must give the reference's answer.
PROGRAMS = {
    "pointwise": lambda x, y: x * y + 1.0,
    "transpose": lambda x, y: x.T * 2.0 + y,
    "reverse": lambda x, y: x[::-1, ::-1] - y,
    "roll": lambda x, y: fnp.roll(x, 1, axis=1) + y,
    "row softmax": lambda x, y: fg.nn.softmax(x, axis=1) * y,
    "normalized": lambda x, y: x / fnp.sqrt((x * x).sum()) + y,
    "broadcast row": lambda x, y: x[:1] + y,
    "two outputs": lambda x, y: (fnp.tanh(x), x + y),
    "read after": lambda x, y: (x * 2.0, (x * y).sum(0)),
    "cumulative": lambda x, y: fnp.cumsum(x, axis=1) + y,
    "matmul": lambda x, y: x @ y,
    "scan": lambda x, y: fg.lax.scan(lambda c, r: (c + r, c * r), x[0], x)[1] + y,
    "cond": lambda x, y: fg.lax.cond(x.sum() > 0, lambda a: a[::-1], lambda a: a * 2.0, x),
}


DONATING = {
    (name, donate): quiet_jit(f, donate_argnums=donate)
    for name, f in PROGRAMS.items()
    for donate in [(0,), (1,), (0, 1)]
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@given(seed=st.integers(0, 2**16), donate=st.sampled_from([(0,), (1,), (0, 1)]))
def test_programs_with_donation_match_the_reference(name, seed, donate):
    f = PROGRAMS[name]
    shape = (6, 6)
    with jit_backend("numpy"):
        expected = fg.jit(f)(fresh(shape, seed), fresh(shape, seed + 1))
    with jit_backend("llvm"):
        x, y = fresh(shape, seed), fresh(shape, seed + 1)
        got = DONATING[name, donate](x, y)
    for e, g in zip(fg.tree_util.tree_leaves(expected), fg.tree_util.tree_leaves(got)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-6, atol=2e-6)


@settings(max_examples=max(settings().max_examples // 2, 8), deadline=None)
@given(training.loops())
def test_random_training_loops_with_donation_match_the_reference(loop):
    """Training loops drawn at random, their parameters (and momentum) donated or not, step
    by step on the compiled backend, each step's results the next one's arguments (updated in
    place where donated, weights by their gradients' GEMMs): every step's parameters, state
    and loss are what the reference computes from the same values."""
    params, velocity, batches, targets = training.initial_state(loop)
    step = training.step(loop)
    jitted = quiet_jit(step, donate_argnums=training.donated(loop))
    state = fg.tree_util.tree_map(fnp.asarray, (tuple(params), tuple(velocity)))
    for k in range(training.STEPS):
        before = fg.tree_util.tree_map(np.array, state)  # (copies: donated arrays are deleted)
        with jit_backend("llvm"):
            *state, loss = jitted(*state, batches[k], targets[k])
        with jit_backend("numpy"):
            expected = fg.jit(step)(*before, batches[k], targets[k])
        got = fg.tree_util.tree_leaves((state, loss))
        want = fg.tree_util.tree_leaves(expected)
        training.assert_step_close(loop, got, want, before, batches[k], targets[k])
