"""Size-0 arrays under every transform: vmap over zero lanes, derivatives of operations that
read or write nothing, and the compiled backends on empty operands.

An empty batch or an empty index set is where a rule that builds a helper operation (a
gather for a batched slice, a gather for a scatter's cotangent) meets shape checks written
for the non-empty case. References: the empty results NumPy gives, a loop over the lanes,
and, for derivatives, central finite differences (`check_grads`).
"""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.config import config
from funcgrad.test_util import check_grads

BACKENDS = ["numpy", "llvm"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    previous = config.jit_backend
    config.update("jit_backend", request.param)
    yield request.param
    config.update("jit_backend", previous)


# ---------------------------------------------------------------------------------------------
# Gathers vmapped over zero lanes: the batched gather slices 1 from a batch axis of size 0


def _dynamic_slice(x, i):
    return lax.dynamic_slice(x, (i, 0), (2, 3))


def _take_along(x, i):
    return fnp.take_along_axis(x, i, axis=1)


def _index(x, i):
    return lax.dynamic_index_in_dim(x, i, 1, keepdims=False)


@pytest.mark.parametrize(
    "fun, lane_shapes",
    [
        (_dynamic_slice, [(4, 3), ()]),
        (_take_along, [(4, 3), (4, 2)]),
        (_index, [(3, 2), ()]),
    ],
    ids=["dynamic_slice", "take_along_axis", "dynamic_index_in_dim"],
)
def test_vmap_of_a_gather_over_zero_lanes(backend, fun, lane_shapes):
    x = np.zeros((0,) + lane_shapes[0])
    i = np.zeros((0,) + lane_shapes[1], np.int32)
    lane_out = fg.eval_shape(fun, np.zeros(lane_shapes[0]), np.zeros(lane_shapes[1], np.int32))
    for batched in (fg.vmap(fun), fg.jit(fg.vmap(fun))):
        out = batched(x, i)
        assert out.shape == (0,) + lane_out.shape and out.dtype == lane_out.dtype
    grad = fg.jit(fg.grad(lambda x: fg.vmap(fun)(x, i).sum()))(x)
    assert grad.shape == x.shape


def test_vmap_of_a_gather_over_lanes_whose_operand_is_empty(backend):
    x = np.zeros((2, 0, 3))
    i = np.array([1, 5], np.int32)

    def fun(x, i):
        return lax.dynamic_slice(x, (i, i), (0, 2))

    out = fg.jit(fg.vmap(fun))(x, i)
    assert out.shape == (2, 0, 2)
    assert fg.jit(fg.grad(lambda x: fg.vmap(fun)(x, i).sum()))(x).shape == x.shape


def test_gather_still_checks_the_windows_it_reads():
    dn = lax.GatherDimensionNumbers(
        offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    with pytest.raises(TypeError, match="slice_sizes"):
        lax.gather(np.zeros((0, 3)), np.zeros((2, 1), np.int32), dn, (1, 3))


# ---------------------------------------------------------------------------------------------
# Scatters into an operand none of whose windows fit: dropped updates get zero cotangents

_ROWS = lax.ScatterDimensionNumbers(
    update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
)


@pytest.mark.parametrize("scatter", [lax.scatter, lax.scatter_add, lax.scatter_max])
def test_scatter_into_an_empty_axis_drops_every_update(backend, scatter):
    x, indices, updates = np.zeros((0, 3)), np.array([[0], [1]], np.int32), np.ones((2, 3))

    def fun(x, updates):
        return (scatter(x, indices, updates, _ROWS) ** 2).sum() + (updates**3).sum()

    check_grads(fun, (x, updates), order=1)
    ct_x, ct_updates = fg.jit(fg.grad(fun, argnums=(0, 1)))(x, updates)
    assert ct_x.shape == (0, 3)
    np.testing.assert_array_equal(ct_updates, 3 * updates**2)


def test_at_set_into_an_empty_array_under_grad_and_vmap():
    indices = np.array([0, 1])

    def fun(updates):
        return fnp.zeros((0, 3)).at[indices].set(updates).sum() + (updates**2).sum()

    updates = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(fg.grad(fun)(updates), 2 * updates)
    lanes = np.stack([updates, updates + 1])
    np.testing.assert_array_equal(fg.vmap(fg.grad(fun))(lanes), 2 * lanes)


def test_clip_scatter_into_an_empty_axis_raises():
    with pytest.raises(TypeError, match="'clip' cannot place the 2 update windows"):
        lax.scatter(
            np.zeros((0, 3)), np.array([[0], [1]], np.int32), np.ones((2, 3)), _ROWS, mode="clip"
        )


# ---------------------------------------------------------------------------------------------
# Linear algebra of empty matrices and of empty stacks

EMPTY_MATRICES = [(0, 0), (3, 0, 0), (0, 2, 2)]


def _stack_of(shape):
    """Well-conditioned matrices of `shape` (any of its sides may be 0)."""
    return np.broadcast_to(np.eye(shape[-1]) * 2 + 0.5, shape).copy()


_LU_BASED = {
    "inv": (fnp.linalg.inv, np.linalg.inv),
    "det": (fnp.linalg.det, np.linalg.det),
    "slogdet": (fnp.linalg.slogdet, np.linalg.slogdet),
    "solve": (
        lambda a: fnp.linalg.solve(a, np.ones(a.shape[:-1] + (1,))),
        lambda a: np.linalg.solve(a, np.ones(a.shape[:-1] + (1,))),
    ),
    "matrix_rank": (fnp.linalg.matrix_rank, np.linalg.matrix_rank),
}


@pytest.mark.parametrize("shape", EMPTY_MATRICES, ids=str)
@pytest.mark.parametrize("name", sorted(_LU_BASED))
def test_linalg_of_empty_matrices(backend, name, shape):
    fun, reference = _LU_BASED[name]
    a = _stack_of(shape)
    expected = [np.asarray(x) for x in fg.tree_util.tree_leaves(reference(a))]
    for got in (fun(a), fg.jit(fun)(a)):
        got = fg.tree_util.tree_leaves(got)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-12)


@pytest.mark.parametrize("shape", [(0, 0), (3, 0), (0, 2), (2, 3, 0)], ids=str)
def test_lu_of_an_empty_matrix(backend, shape):
    for lu in (lax.linalg.lu, fg.jit(lax.linalg.lu)):
        factors, pivots, permutation = lu(np.zeros(shape))
        *batch, m, n = shape
        assert factors.shape == shape and pivots.shape == (*batch, 0)
        np.testing.assert_array_equal(permutation, np.broadcast_to(np.arange(m), (*batch, m)))


@pytest.mark.parametrize("shape", EMPTY_MATRICES, ids=str)
def test_derivatives_of_lu_based_linalg_of_empty_matrices(shape):
    a = _stack_of(shape)
    check_grads(lambda a: fnp.linalg.det(a), (a,), order=1)
    check_grads(lambda a: fnp.linalg.inv(a), (a,), order=1)
    grad = fg.jit(fg.grad(lambda a: fnp.linalg.slogdet(a)[1].sum()))(a)
    np.testing.assert_allclose(grad, np.linalg.inv(a).swapaxes(-1, -2), rtol=1e-12)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0), (2, 3, 0)], ids=str)
@pytest.mark.parametrize("ord", [1, -1, 2, -2, np.inf, -np.inf, "nuc", "fro"], ids=str)
def test_matrix_norms_of_empty_matrices(shape, ord):
    x = np.zeros(shape)
    try:
        expected = np.linalg.norm(x, ord, axis=(-2, -1))
    except ValueError:  # the smallest sum or singular value of none
        with pytest.raises(ValueError):
            fnp.linalg.norm(x, ord, axis=(-2, -1))
        return
    np.testing.assert_array_equal(fnp.linalg.norm(x, ord, axis=(-2, -1)), expected)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 3, 0)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64], ids=str)
def test_full_svd_of_an_empty_matrix_gives_identity_bases(backend, shape, dtype):
    a = np.zeros(shape, dtype)
    u, s, vh = fg.jit(lambda a: fnp.linalg.svd(a, full_matrices=True))(a)
    expected_u, expected_s, expected_vh = np.linalg.svd(a, full_matrices=True)
    np.testing.assert_array_equal(u, expected_u)
    np.testing.assert_array_equal(vh, expected_vh)
    assert s.shape == expected_s.shape and u.dtype == dtype
