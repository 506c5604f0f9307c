"""pure_callback: a Python function called on NumPy arrays, eagerly, under jit on both backends,
and under vmap with each vmap_method (compared with a Python loop over the examples)."""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp


@pytest.fixture(params=["numpy", "llvm"])
def backend(request):
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", request.param)
    yield request.param
    fg.config.update("jit_backend", previous)


def like(x):
    return fg.ShapeDtypeStruct(x.shape, x.dtype)


def host_stats(x, *, offset):
    """NumPy-only work: a pytree of results with different shapes and dtypes."""
    return {"total": np.sum(x, dtype=x.dtype) + offset, "order": np.argsort(x).astype(np.int32)}


def stats(x, offset):
    declared = {"total": like(x[0]), "order": fg.ShapeDtypeStruct(x.shape, np.int32)}
    return fg.pure_callback(host_stats, declared, x, offset=offset, vmap_method="sequential")


X = np.array([0.5, -2.0, 3.25, 1.0], np.float32)


def test_eager_call_returns_the_callbacks_results():
    out = stats(X, np.float32(1.0))
    np.testing.assert_allclose(out["total"], X.sum() + 1.0)
    np.testing.assert_array_equal(out["order"], np.argsort(X))
    assert out["order"].dtype == np.int32


def test_jit_runs_the_callback_each_call(backend):
    calls = []

    def host(x):
        calls.append(x.copy())
        return np.cumsum(x)

    f = fg.jit(lambda x: fg.pure_callback(host, like(x), fnp.sin(x)) * 2.0)
    for k in range(2):
        np.testing.assert_allclose(f(X + k), 2 * np.cumsum(np.sin(X + k)), rtol=1e-6)
    assert len(calls) == 2
    out = fg.jit(stats)(X, np.float32(2.0))
    np.testing.assert_allclose(out["total"], X.sum() + 2.0)
    np.testing.assert_array_equal(out["order"], np.argsort(X))


def test_a_wrong_result_is_reported(backend):
    wrong_dtype = fg.jit(lambda x: fg.pure_callback(lambda x: x.astype(np.float64), like(x), x))
    with pytest.raises(TypeError, match="dtype float64, but result_shape_dtypes declares"):
        wrong_dtype(X)
    wrong_shape = fg.jit(lambda x: fg.pure_callback(lambda x: x[:2], like(x), x))
    with pytest.raises(TypeError, match=r"shape \(2,\)"):
        wrong_shape(X)
    wrong_tree = fg.jit(lambda x: fg.pure_callback(lambda x: (x, x), like(x), x))
    with pytest.raises(TypeError, match="structure"):
        wrong_tree(X)


def test_bad_declarations_are_reported():
    with pytest.raises(TypeError, match="needs a .shape and a .dtype"):
        fg.pure_callback(np.sin, 3, X)
    with pytest.raises(ValueError, match="vmap_method must be None or one of"):
        fg.pure_callback(np.sin, like(X), X, vmap_method="vectorized")


def seen_shapes(vmap_method):
    """The shapes the callback is called with under vmap, and its stacked results."""
    shapes = []

    def host(x, y):
        shapes.append((x.shape, y.shape))
        return x * 10 + y

    def f(x, y):
        return fg.pure_callback(host, like(x), x, y, vmap_method=vmap_method)

    xs = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    y = np.array([0.5, 0.25], np.float32)
    out = fg.vmap(f, in_axes=(0, None))(xs, y)
    np.testing.assert_allclose(out, np.stack([x * 10 + y for x in xs]))
    return shapes


def test_vmap_methods_pass_the_batch_as_each_defines():
    assert seen_shapes("sequential") == [((2,), (2,))] * 3
    assert seen_shapes("sequential_unrolled") == [((2,), (2,))] * 3
    assert seen_shapes("expand_dims") == [((3, 2), (1, 2))]
    assert seen_shapes("broadcast_all") == [((3, 2), (3, 2))]
    assert seen_shapes("legacy_vectorized") == [((3, 2), (2,))]


def test_vmap_of_a_pytree_result_matches_a_loop(backend):
    xs = np.stack([X, X[::-1], X * 2])
    out = fg.jit(fg.vmap(stats, in_axes=(0, None)))(xs, np.float32(1.0))
    for i, x in enumerate(xs):
        np.testing.assert_allclose(out["total"][i], x.sum() + 1.0, rtol=1e-6)
        np.testing.assert_array_equal(out["order"][i], np.argsort(x))


def test_vmap_without_a_method_is_an_error():
    f = fg.vmap(lambda x: fg.pure_callback(np.cumsum, like(x), x))
    with pytest.raises(NotImplementedError, match="needs vmap_method"):
        f(np.ones((2, 3), np.float32))


def test_differentiation_is_an_error_naming_pure_callback():
    f = lambda x: fnp.sum(fg.pure_callback(np.cumsum, like(x), x))  # noqa: E731
    with pytest.raises(TypeError, match="pure_callback .* has no derivative"):
        fg.grad(f)(X)
    with pytest.raises(TypeError, match="pure_callback .* has no derivative"):
        fg.jvp(f, (X,), (X,))


# ---------------------------------------------------------------------------------------------
# io_callback: a callback with side effects


def recorder():
    """A callback that records each array it sees and returns it doubled."""
    seen = []

    def record(x):
        seen.append(np.array(x))
        return 2 * x

    return seen, record


def test_io_callback_runs_each_time_even_when_unused(backend):
    seen, record = recorder()

    def f(x):
        doubled = fg.experimental.io_callback(record, like(x), x)
        fg.experimental.io_callback(record, like(x), x + 1)  # result unused: it still runs
        return doubled + 1

    np.testing.assert_array_equal(f(X), 2 * X + 1)
    jitted = fg.jit(f)
    for _ in range(2):
        np.testing.assert_array_equal(jitted(X), 2 * X + 1)
    assert len(seen) == 6
    for k, array in enumerate(seen):  # in program order: x, then x + 1
        np.testing.assert_array_equal(array, X + k % 2)


def test_io_callback_under_vmap_runs_once_per_example():
    seen, record = recorder()
    batch = np.stack([X, -X, 3 * X])
    out = fg.vmap(lambda x: fg.experimental.io_callback(record, like(x), x))(batch)
    np.testing.assert_array_equal(out, 2 * batch)
    assert len(seen) == 3
    for lane, array in zip(batch, seen):
        np.testing.assert_array_equal(array, lane)
    with pytest.raises(ValueError, match="an ordered callback cannot be vmapped"):
        fg.vmap(lambda x: fg.experimental.io_callback(record, like(x), x, ordered=True))(batch)


def test_io_callback_differentiates_only_around_constant_inputs():
    _, record = recorder()

    def f(x, through):
        value = fg.experimental.io_callback(record, like(x), through(x))
        return fnp.sum(x * x + value)

    np.testing.assert_allclose(fg.grad(f)(X, fg.lax.stop_gradient), 2 * X)
    with pytest.raises(TypeError, match="io_callback \\(record\\) has no derivative"):
        fg.grad(f)(X, lambda x: x)


def test_io_callback_checks_its_results():
    with pytest.raises(TypeError, match="io_callback: result 0 of .* has shape \\(4,\\)"):
        fg.experimental.io_callback(lambda x: x, fg.ShapeDtypeStruct((3,), np.float32), X)
