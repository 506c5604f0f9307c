"""funcgrad.experimental.sparse's grad, value_and_grad, jacfwd and jacrev: derivatives with
respect to sparse arguments as sparse arrays of their indices, against central finite
differences of the stored data, jit against eager and vmap against a loop."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.experimental import sparse
from funcgrad.experimental.sparse import BCOO, BCSR


def sparse_array(rng, shape, density=0.5):
    values = rng.normal(size=shape)
    return np.where(rng.random(shape) < density, values, 0.0)


def finite_difference_jacobian(f, x, eps=1e-6):
    """d f(x) / d x by central differences: shape f(x).shape + x.shape."""
    x = np.asarray(x, np.float64)
    columns = []
    for i in range(x.size):
        step = np.zeros(x.size)
        step[i] = eps
        step = step.reshape(x.shape)
        columns.append((np.asarray(f(x + step)) - np.asarray(f(x - step))) / (2 * eps))
    out_shape = np.shape(f(x))
    return np.stack(columns, axis=-1).reshape(*out_shape, *x.shape)


def with_data(mat, data):
    if isinstance(mat, BCSR):
        return BCSR((data, mat.indices, mat.indptr), shape=mat.shape)
    return BCOO((data, mat.indices), shape=mat.shape)


def layouts(rng):
    dense = sparse_array(rng, (2, 3, 4))
    return [
        BCOO.fromdense(dense),
        BCOO.fromdense(dense, n_batch=1, nse=10),  # with padding
        BCOO.fromdense(dense, n_dense=1),
        BCSR.fromdense(dense, n_batch=1),
    ]


@pytest.mark.parametrize("layout", range(4))
def test_grad_with_respect_to_a_sparse_argument_is_sparse(layout):
    rng = np.random.default_rng(layout)
    mat = layouts(rng)[layout]
    y = rng.normal(size=4)

    def f(a, y):
        return fnp.sum(fnp.sin(a.todense() @ y) ** 2)

    grad = sparse.grad(f)(mat, y)
    assert type(grad) is type(mat) and grad.shape == mat.shape
    np.testing.assert_array_equal(grad.indices, mat.indices)
    expected = finite_difference_jacobian(lambda d: f(with_data(mat, d), y), mat.data)
    np.testing.assert_allclose(grad.data, expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(fg.jit(sparse.grad(f))(mat, y).data, grad.data, rtol=1e-12)
    # Several argnums: a tuple of derivatives, the dense argument's dense.
    (value, aux), (g_mat, g_y) = sparse.value_and_grad(
        lambda a, y: (f(a, y), 7), argnums=(0, 1), has_aux=True
    )(mat, y)
    assert aux == 7 and np.isclose(value, f(mat, y))
    np.testing.assert_allclose(g_mat.data, grad.data, rtol=1e-12)
    np.testing.assert_allclose(g_y, fg.grad(f, argnums=1)(mat, y), rtol=1e-12)
    g, aux = sparse.grad(lambda a, y: (f(a, y), "aux"), has_aux=True)(mat, y)
    assert aux == "aux" and isinstance(g, type(mat))


@pytest.mark.parametrize("layout", range(4))
@pytest.mark.parametrize("transform", [sparse.jacfwd, sparse.jacrev, sparse.jacobian])
def test_jacobians_with_respect_to_sparse_arguments(transform, layout):
    rng = np.random.default_rng(10 + layout)
    mat = layouts(rng)[layout]
    y = rng.normal(size=4)

    def f(a, y):
        return fnp.tanh(a.todense() @ y).reshape(-1)

    jac = transform(f)(mat, y)
    out_size = 6
    assert type(jac) is type(mat) and jac.shape == (out_size, *mat.shape)
    assert jac.n_batch == mat.n_batch + 1
    expected = finite_difference_jacobian(lambda d: f(with_data(mat, d), y), mat.data)
    np.testing.assert_allclose(jac.data, expected, rtol=1e-6, atol=1e-8)
    for row in range(out_size):  # each output's Jacobian has the argument's indices
        np.testing.assert_array_equal(jac.indices[row], mat.indices)
    # A pytree of outputs, and several arguments.
    jacs = transform(lambda a, y: {"v": f(a, y), "s": fnp.sum(f(a, y))}, argnums=(0, 1))(mat, y)
    np.testing.assert_allclose(jacs["v"][0].data, jac.data, rtol=1e-10)
    np.testing.assert_allclose(
        jacs["s"][1], finite_difference_jacobian(lambda v: np.sum(f(mat, v)), y), rtol=1e-6
    )
    with pytest.raises(NotImplementedError, match="dense outputs"):
        transform(lambda a: a)(mat)


def test_vmap_of_sparse_grad_matches_a_loop():
    rng = np.random.default_rng(20)
    mat = BCOO.fromdense(sparse_array(rng, (3, 4)))
    ys = rng.normal(size=(2, 4))

    def f(a, y):
        return fnp.sum((a @ y) ** 2)

    batched = fg.vmap(sparse.grad(f), in_axes=(None, 0))(mat, ys)
    for lane, y in enumerate(ys):
        np.testing.assert_allclose(batched.data[lane], sparse.grad(f)(mat, y).data, rtol=1e-12)


def test_argnums_out_of_range_are_named():
    mat = BCOO.fromdense(np.eye(2))
    with pytest.raises(ValueError, match="argnums 2 out of range"):
        sparse.grad(lambda a: fnp.sum(a.todense()), argnums=2)(mat)
