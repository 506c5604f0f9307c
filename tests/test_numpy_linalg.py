"""funcgrad.numpy products (matmul, dot, einsum, ...) and fnp.linalg norms against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close, check_staging

TOL = dict(rtol=1e-5, atol=1e-5)
LETTERS = "abcdef"


def _arrays(shape, dtype=np.float32):
    return fst.arrays(dtype, shape, min_value=-2, max_value=2)


def _dot_general_count(fun, *args) -> int:
    jaxpr = fg.make_jaxpr(fun)(*args).jaxpr
    return sum(eqn.primitive.name == "dot_general" for eqn in jaxpr.eqns)


# ---------------------------------------------------------------------------------------------
# matmul


@st.composite
def matmul_operands(draw):
    """Operands NumPy's matmul accepts: 1-d or batched matrices with broadcastable batches."""
    m, k, n = draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(1, 3))
    batch = draw(fst.shapes(0, 3, min_side=1, max_side=3))
    a_rank, b_rank = draw(st.integers(1, 2 + len(batch))), draw(st.integers(1, 2 + len(batch)))

    def operand_shape(rank, core):
        if rank == 1:
            return (k,)
        own_batch = batch[len(batch) - (rank - 2) :] if rank > 2 else ()
        return tuple(d if draw(st.booleans()) else 1 for d in own_batch) + core

    a_shape, b_shape = operand_shape(a_rank, (m, k)), operand_shape(b_rank, (k, n))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32]))
    return draw(_arrays(a_shape, dtype)), draw(_arrays(b_shape, dtype))


@given(matmul_operands())
def test_matmul_matches_numpy(operands):
    a, b = operands
    expected = np.matmul(a, b)
    assert_close(fnp.matmul(a, b), expected, expected.dtype, **TOL)
    assert_close(fnp.asarray(a) @ b, expected, expected.dtype, **TOL)
    assert _dot_general_count(fnp.matmul, a, b) == 1
    check_staging(fnp.matmul, a, b)


def test_matmul_promotes_dtypes():
    a, b = np.ones((2, 3), np.int8), np.ones((3,), np.float32)
    assert fnp.matmul(a, b).dtype == np.float32
    assert fnp.matmul(np.ones((2, 2), np.bool_), np.ones((2, 2), np.bool_)).dtype == np.bool_


def test_batch_axes_of_size_one_broadcast_against_size_zero():
    """A 1 met by a 0 took the larger size, 1 (dot_general then refused the shapes)."""
    for a, b in [((0, 2, 5), (1, 5, 1)), ((1, 2, 5), (0, 5, 1)), ((2, 1, 2, 5), (0, 5, 3))]:
        assert fnp.matmul(np.ones(a), np.ones(b)).shape == np.matmul(np.ones(a), np.ones(b)).shape
    for a, b in [((0, 5), (1, 1, 5)), ((3, 0, 5), (1, 5))]:
        assert fnp.vecdot(np.ones(a), np.ones(b)).shape == np.vecdot(np.ones(a), np.ones(b)).shape
    assert fnp.broadcast_shapes() == np.broadcast_shapes() == ()


def test_matmul_errors_name_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        fnp.matmul(np.ones((2, 3)), np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"\(2, 2, 3\).*\(3, 3, 1\)"):
        fnp.matmul(np.ones((2, 2, 3)), np.ones((3, 3, 1)))
    with pytest.raises(ValueError, match=r"\(\).*\(3,\)"):
        fnp.matmul(np.float32(1), np.ones(3))


# ---------------------------------------------------------------------------------------------
# dot, vdot, inner, outer, tensordot, kron, cross, vecdot


@given(
    fst.shapes(0, 3, min_side=1, max_side=3), fst.shapes(0, 3, min_side=1, max_side=3), st.data()
)
def test_dot_matches_numpy(a_shape, b_shape, data):
    # NumPy's dot: the last axis of a against the second-to-last (or only) axis of b.
    if a_shape and b_shape:
        b_axis = max(len(b_shape) - 2, 0)
        b_shape = b_shape[:b_axis] + (a_shape[-1],) + b_shape[b_axis + 1 :]
    a, b = data.draw(_arrays(a_shape)), data.draw(_arrays(b_shape))
    assert_close(fnp.dot(a, b), np.dot(a, b), np.float32, **TOL)
    check_staging(fnp.dot, a, b)


@given(fst.shapes(0, 3, max_side=3), fst.shapes(0, 3, max_side=3), st.data())
def test_inner_outer_vdot_match_numpy(a_shape, b_shape, data):
    if a_shape and b_shape:
        b_shape = b_shape[:-1] + a_shape[-1:]
    a, b = data.draw(_arrays(a_shape)), data.draw(_arrays(b_shape))
    assert_close(fnp.inner(a, b), np.inner(a, b), np.float32, **TOL)
    assert_close(fnp.outer(a, b), np.outer(a, b), np.float32, **TOL)
    assert_close(fnp.vdot(a, a), np.vdot(a, a), np.float32, **TOL)


@given(fst.shapes(0, 4, max_side=3), st.integers(0, 4), st.data())
def test_tensordot_matches_numpy(a_shape, n_axes, data):
    n_axes = min(n_axes, len(a_shape))
    b_shape = a_shape[len(a_shape) - n_axes :] + data.draw(fst.shapes(0, 2, max_side=3))
    a, b = data.draw(_arrays(a_shape)), data.draw(_arrays(b_shape))
    assert_close(fnp.tensordot(a, b, n_axes), np.tensordot(a, b, n_axes), np.float32, **TOL)
    # The same contraction as explicit pairs of axes, listed in a shuffled order.
    pairs = data.draw(st.permutations(list(range(n_axes))))
    axes = ([len(a_shape) - n_axes + i for i in pairs], list(pairs))
    assert_close(fnp.tensordot(a, b, axes), np.tensordot(a, b, axes), np.float32, **TOL)


def test_tensordot_error_names_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        fnp.tensordot(np.ones((2, 3)), np.ones(4), axes=([1], [0]))


@given(fst.shapes(0, 3, max_side=3), fst.shapes(0, 3, max_side=3), st.data())
def test_kron_matches_numpy(a_shape, b_shape, data):
    a, b = data.draw(_arrays(a_shape, np.int32)), data.draw(_arrays(b_shape, np.int32))
    assert_close(fnp.kron(a, b), np.kron(a, b), np.int32)


@given(fst.shapes(0, 2, min_side=1, max_side=3), st.data())
def test_cross_matches_numpy(batch, data):
    axis = data.draw(st.integers(-len(batch) - 1, len(batch)))
    shape = list(batch)
    shape.insert(axis % (len(batch) + 1), 3)
    a, b = data.draw(_arrays(shape)), data.draw(_arrays(shape))
    assert_close(fnp.cross(a, b, axis=axis), np.cross(a, b, axis=axis), np.float32, **TOL)
    a_last = np.moveaxis(a, axis, -1)
    expected = np.cross(a_last, b, axisb=axis, axisc=0)
    assert_close(fnp.cross(a_last, b, axisb=axis, axisc=0), expected, np.float32, **TOL)


def test_cross_needs_two_or_three_components():
    with pytest.raises(ValueError, match=r"2 or 3 components.*\(2, 4\)"):
        fnp.cross(np.ones((2, 4)), np.ones((2, 3)))


def _cross_in_three_dimensions(a, b):
    """The cross product of vectors of 2 or 3 components, those of 2 taken as lying in the
    z = 0 plane, and only the z component kept where both have 2 (NumPy's rule before 2.5
    dropped 2-vectors)."""
    a3, b3 = (np.concatenate([v, np.zeros((*v.shape[:-1], 3 - v.shape[-1]))], -1) for v in (a, b))
    product = np.cross(a3, b3)
    return product[..., 2] if a.shape[-1] == b.shape[-1] == 2 else product


@pytest.mark.parametrize("a_shape, b_shape", [((2,), (2,)), ((4, 2), (2,)), ((3,), (5, 2))])
def test_cross_of_two_vectors_matches_numpy(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    out = fnp.cross(a, b)
    expected = _cross_in_three_dimensions(a, b)
    assert out.shape == expected.shape
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12)


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3), st.data())
def test_vecdot_matches_numpy(batch_shapes, data):
    k = data.draw(st.integers(0, 3))
    a_shape, b_shape = (shape + (k,) for shape in batch_shapes.input_shapes)
    a, b = data.draw(_arrays(a_shape)), data.draw(_arrays(b_shape))
    assert_close(fnp.vecdot(a, b), np.vecdot(a, b), np.float32, **TOL)
    if a.ndim == b.ndim:
        expected = np.vecdot(np.moveaxis(a, -1, 0), np.moveaxis(b, -1, 0), axis=0)
        actual = fnp.vecdot(np.moveaxis(a, -1, 0), np.moveaxis(b, -1, 0), axis=0)
        assert_close(actual, expected, np.float32, **TOL)


@given(fst.arrays(fst.numeric_dtypes, fst.shapes(2, 4)))
def test_matrix_transpose_matches_numpy(x):
    assert_close(fnp.matrix_transpose(x), np.matrix_transpose(x), x.dtype)


# ---------------------------------------------------------------------------------------------
# einsum


@st.composite
def einsum_problems(draw, min_operands=1, max_operands=3):
    """Random valid subscripts with matching operands.

    Labels are shared, batch (kept) or summed at random; a label may repeat within one term
    (a diagonal), and terms may carry an ellipsis whose axes broadcast (size 1 or full).
    """
    sizes = {c: draw(st.integers(1, 3)) for c in LETTERS}
    ellipsis_shape = draw(fst.shapes(0, 2, min_side=2, max_side=3))
    any_ellipsis = False
    terms, operands = [], []
    for _ in range(draw(st.integers(min_operands, max_operands))):
        letters = draw(st.lists(st.sampled_from(LETTERS), max_size=3))
        shape = [sizes[c] for c in letters]
        term = "".join(letters)
        if draw(st.booleans()):
            any_ellipsis = True
            rank = draw(st.integers(0, len(ellipsis_shape)))
            own = ellipsis_shape[len(ellipsis_shape) - rank :]
            own = [d if draw(st.booleans()) else 1 for d in own]
            at = draw(st.integers(0, len(letters)))
            term = term[:at] + "..." + term[at:]
            shape = shape[:at] + own + shape[at:]
        terms.append(term)
        operands.append(draw(_arrays(tuple(shape), np.float64)))
    subscripts = ",".join(terms)
    if draw(st.booleans()):
        used = sorted({c for t in terms for c in t if c.isalpha()})
        output = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
        if any_ellipsis:
            at = draw(st.integers(0, len(output)))
            output = output[:at] + "..." + output[at:]
        subscripts += "->" + output
    return subscripts, operands


@given(einsum_problems(), st.booleans())
def test_einsum_matches_numpy(problem, optimize):
    subscripts, operands = problem
    expected = np.einsum(subscripts, *operands)
    actual = fnp.einsum(subscripts, *operands, optimize=optimize)
    assert_close(actual, expected, np.float64, rtol=1e-10, atol=1e-10)


@settings(max_examples=10)
@given(einsum_problems(min_operands=3, max_operands=3))
def test_einsum_contracts_pairwise_and_stages_like_eager(problem):
    subscripts, operands = problem
    check_staging(lambda *ops: fnp.einsum(subscripts, *ops), *operands)
    assert _dot_general_count(lambda *ops: fnp.einsum(subscripts, *ops), *operands) == 2


def test_three_operand_einsum_is_two_dot_generals():
    a, b, c = np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))
    assert _dot_general_count(lambda *ops: fnp.einsum("ij,jk,kl->il", *ops), a, b, c) == 2
    x, y, z = np.ones((2, 3, 4)), np.ones((2, 4, 5)), np.ones((2, 5))
    assert _dot_general_count(lambda *ops: fnp.einsum("bij,bjk,bk->bi", *ops), x, y, z) == 2


def test_einsum_greedy_order_avoids_large_intermediates():
    # Contracting the two vectors first would build a 50x60 outer product.
    u, m, v = np.ones(50), np.ones((50, 60)), np.ones(60)
    jaxpr = fg.make_jaxpr(lambda *ops: fnp.einsum("i,ij,j->", *ops))(u, m, v).jaxpr
    shapes = [
        eqn.outvars[0].aval.shape for eqn in jaxpr.eqns if eqn.primitive.name == "dot_general"
    ]
    assert shapes[0] in ((50,), (60,))


def test_einsum_keeps_preferred_element_type():
    a = np.ones((2, 3), np.int8)
    out = fnp.einsum("ij,jk->ik", a, a.T, preferred_element_type=np.int32)
    assert out.dtype == np.int32
    assert_close(out, np.full((2, 2), 3), np.int32)


@pytest.mark.parametrize(
    "subscripts, shapes, match",
    [
        ("ij,jk", [(2, 3), (4, 5)], r"label 'j' has sizes 3 and 4"),
        ("ij,jk", [(2, 3)], r"name 2 operand\(s\), but 1 were given"),
        ("ijk", [(2, 3)], r"'ijk'.*shape \(2, 3\)"),
        ("ij->ik", [(2, 3)], r"output label 'k'"),
        ("ij->ii", [(2, 2)], "repeats a label"),
        ("i1", [(2, 3)], "invalid term"),
    ],
)
def test_einsum_errors(subscripts, shapes, match):
    with pytest.raises(ValueError, match=match):
        fnp.einsum(subscripts, *[np.ones(s) for s in shapes])


# ---------------------------------------------------------------------------------------------
# fnp.linalg norms


@pytest.mark.parametrize("ord", [None, 1, 2, 3, 0.5, 0, np.inf, -np.inf, -1])
@given(x=_arrays(fst.shapes(1, 3, min_side=1, max_side=4), np.float64), data=st.data())
def test_vector_norm_matches_numpy(ord, x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    keepdims = data.draw(st.booleans())
    expected = np.linalg.norm(x, ord, axis, keepdims)
    assert_close(fnp.linalg.norm(x, ord, axis, keepdims), expected, np.float64, **TOL)
    ord = 2 if ord is None else ord
    expected = np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
    actual = fnp.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
    assert_close(actual, expected, np.float64, **TOL)


@pytest.mark.parametrize("ord", [None, "fro", 1, -1, np.inf, -np.inf])
@given(x=_arrays(fst.shapes(2, 4, min_side=1, max_side=4), np.float32), data=st.data())
def test_matrix_norm_matches_numpy(ord, x, data):
    axis = tuple(data.draw(st.permutations(range(x.ndim)))[:2])
    keepdims = data.draw(st.booleans())
    expected = np.linalg.norm(x, ord, axis, keepdims)
    assert_close(fnp.linalg.norm(x, ord, axis, keepdims), expected, np.float32, **TOL)
    expected = np.linalg.matrix_norm(x, ord="fro" if ord is None else ord)
    actual = fnp.linalg.matrix_norm(x, ord="fro" if ord is None else ord)
    assert_close(actual, expected, np.float32, **TOL)


def test_norm_defaults_and_dtypes():
    x = np.arange(24).reshape(2, 3, 4)
    assert fnp.linalg.norm(x).dtype == np.float32
    assert_close(fnp.linalg.norm(x), np.linalg.norm(x).astype(np.float32), np.float32)
    assert_close(fnp.linalg.norm(x[0], 1), np.linalg.norm(x[0], 1).astype(np.float32))
    check_staging(lambda x: fnp.linalg.norm(x, np.inf, axis=(0, 2), keepdims=True), x)


def test_norm_errors():
    with pytest.raises(ValueError, match=r"shape \(2, 2, 2\)"):
        fnp.linalg.norm(np.ones((2, 2, 2)), 1)
    with pytest.raises(ValueError, match="not a vector norm"):
        fnp.linalg.norm(np.ones(3), "fro")


def test_cond_of_empty_and_hermitian_rank_of_rectangular_matrices_raise():
    # As NumPy's (they gave 0.0 and a rank computed as if hermitian were not set).
    for p in (None, "fro"):
        with pytest.raises(ValueError, match="cond: is not defined for empty matrices"):
            fnp.linalg.cond(np.zeros((2, 0, 0)), p)
    with pytest.raises(ValueError, match="hermitian=True needs square matrices"):
        fnp.linalg.matrix_rank(np.ones((2, 3)), hermitian=True)
    assert int(fnp.linalg.matrix_rank(np.diag([1.0, 0.0, 2.0]), hermitian=True)) == 2


def test_linalg_products_take_the_array_apis_operands():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5))
    np.testing.assert_allclose(fnp.linalg.matmul(a, b), np.linalg.matmul(a, b), rtol=1e-12)
    u, v = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    np.testing.assert_allclose(fnp.linalg.cross(u, v), np.linalg.cross(u, v), rtol=1e-12)
    np.testing.assert_allclose(
        fnp.linalg.cross(u.T, v.T, axis=0), np.cross(u.T, v.T, axis=0), rtol=1e-12
    )
    x, y = rng.normal(size=3), rng.normal(size=4)
    np.testing.assert_allclose(fnp.linalg.outer(x, y), np.linalg.outer(x, y), rtol=1e-12)
    c = rng.normal(size=(4, 5, 2))
    np.testing.assert_allclose(
        fnp.linalg.tensordot(b, c, axes=2), np.linalg.tensordot(b, c, axes=2), rtol=1e-12
    )
    with pytest.raises(ValueError, match="3-vectors"):
        fnp.linalg.cross(u[:, :2], v[:, :2])  # numpy.cross takes 2-vectors, linalg.cross not
    with pytest.raises(ValueError, match="1-d"):
        fnp.linalg.outer(u, v)


def test_det_gradient_at_a_singular_matrix_is_the_adjugate_transposed():
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    gradient = fg.grad(fnp.linalg.det)(singular)
    # d det / dA = adj(A)^T; adj([[a, b], [c, d]]) = [[d, -b], [-c, a]].
    np.testing.assert_allclose(np.asarray(gradient), [[4.0, -2.0], [-2.0, 1.0]], atol=1e-6)


@pytest.mark.parametrize(
    "matrix",
    [
        np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]]),  # rank 2
        np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [-1.0, -2.0, -3.0]]),  # rank 1
        np.random.default_rng(0).standard_normal((2, 3, 3)),
        np.eye(3),  # repeated singular values
        np.zeros((3, 3)),  # singular values all 0
        np.diag([2.0, 0.0, 0.0, 0.0]),  # rank n - 3: the Hessian of det is 0, not NaN
        np.diag([2.0, 3.0, 0.0, 0.0]),  # rank n - 2: a nonzero Hessian
        np.stack([np.eye(2), [[1.0, 2.0], [2.0, 4.0]]]),  # one regular, one singular
    ],
)
def test_det_derivatives_at_singular_and_regular_matrices(matrix):
    check_grads(fnp.linalg.det, (matrix,), order=2, atol=1e-5, rtol=1e-5)


def test_slogdet_sign_of_a_complex_matrix_has_a_derivative():
    """A complex determinant's phase det / |det| moves with the matrix (the sign of a real one
    is piecewise constant); it came out constant, through sign(), whose derivative is 0."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    check_grads(lambda m: fnp.linalg.slogdet(m).sign, (a,), order=2, atol=1e-6, rtol=1e-6)
    check_grads(lambda m: fnp.linalg.slogdet(m).logabsdet, (a,), order=1, atol=1e-6, rtol=1e-6)


def test_det_of_empty_matrices_is_one():
    np.testing.assert_array_equal(np.asarray(fnp.linalg.det(fnp.ones((0, 0)))), 1.0)
    np.testing.assert_array_equal(np.asarray(fnp.linalg.det(fnp.ones((2, 0, 0)))), [1.0, 1.0])


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0)])
def test_empty_matrices_give_empty_results(shape):
    """The reference LU reshaped its stack with -1, which an empty stack cannot resolve: lu,
    slogdet, inv and solve raised on 0 x 0 matrices (and matrix_rank reduced an empty max).
    Against NumPy, eagerly and under jit."""
    import scipy.linalg as sl

    import funcgrad.scipy.linalg as fsl
    from funcgrad import lax

    a, b = np.zeros(shape), np.zeros((*shape[:-1], 2))
    cases = [
        (lambda m: fnp.linalg.slogdet(m), lambda m: np.linalg.slogdet(m)),
        (fnp.linalg.inv, np.linalg.inv),
        (lambda m: fnp.linalg.solve(m, b), lambda m: np.linalg.solve(m, b)),
        (fnp.linalg.det, np.linalg.det),
        (fnp.linalg.matrix_rank, np.linalg.matrix_rank),
        (lambda m: fg.grad(lambda t: fnp.linalg.slogdet(t)[1].sum())(m), np.zeros_like),
    ]
    if len(shape) == 2:
        cases.append((fsl.lu_factor, sl.lu_factor))
        cases.append((lambda m: fsl.solve(m, b), lambda m: sl.solve(m, b)))
    for ours, theirs in cases:
        want = theirs(a)
        for got in (ours(a), fg.jit(ours)(a)):
            for g, w in zip(fg.tree_util.tree_leaves(got), fg.tree_util.tree_leaves(want)):
                np.testing.assert_array_equal(np.asarray(g), w)
                assert np.shape(g) == np.shape(w)
    lu, pivots, permutation = lax.linalg.lu(a)
    assert (lu.shape, pivots.shape, permutation.shape) == (shape, shape[:-1], shape[:-1])
