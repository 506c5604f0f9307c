"""Matrix decompositions (lax.lu, cholesky, qr, eigh, svd, triangular_solve) and the
funcgrad.numpy.linalg functions built on them: values against NumPy, shape rules against
tracing, derivatives against finite differences, vmap against a loop of the lanes."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close, check_batching, check_staging, jit_backend, tolerance

TOL = {
    np.dtype(np.float32): dict(rtol=2e-4, atol=2e-4),
    np.dtype(np.float64): dict(rtol=1e-9, atol=1e-9),
}
GRAD_TOL = dict(atol=1e-5, rtol=1e-5)


@st.composite
def matrices(draw, square: bool = False, min_side: int = 1, max_side: int = 4, batch_dims=1):
    """Well-conditioned-ish random matrices of float32 or float64, with leading batch axes."""
    dtype = draw(fst.float_dtypes)
    rows = draw(st.integers(min_side, max_side))
    columns = rows if square else draw(st.integers(min_side, max_side))
    batch = draw(st.lists(st.integers(1, 3), max_size=batch_dims))
    seed = draw(st.integers(0, 2**16))
    x = np.random.default_rng(seed).normal(size=(*batch, rows, columns))
    return x.astype(dtype)


def spd(x: np.ndarray) -> np.ndarray:
    n = x.shape[-1]
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(x.dtype)


def lower_triangular_system(x: np.ndarray) -> np.ndarray:
    """A triangular matrix comfortably away from singular."""
    n = x.shape[-1]
    return (x + 3 * n * np.eye(n)).astype(x.dtype)


def tol(x) -> dict:
    return TOL[np.asarray(x).dtype]


# ---------------------------------------------------------------------------------------------
# The primitives


@given(matrices(square=True), st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.data())
def test_triangular_solve_matches_numpy(a, left_side, lower, transpose_a, unit_diagonal, data):
    a = lower_triangular_system(a)
    k = data.draw(st.integers(1, 3))
    n = a.shape[-1]
    b_shape = a.shape[:-2] + ((n, k) if left_side else (k, n))
    b = np.random.default_rng(k).normal(size=b_shape).astype(a.dtype)
    params = dict(
        left_side=left_side, lower=lower, transpose_a=transpose_a, unit_diagonal=unit_diagonal
    )
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        t = t * (1 - np.eye(n)) + np.eye(n)
    op = np.swapaxes(t, -1, -2) if transpose_a else t
    expected = (
        np.linalg.solve(op, b)
        if left_side
        else np.swapaxes(np.linalg.solve(np.swapaxes(op, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    )
    actual = lax.triangular_solve(a, b, **params)
    assert_close(actual, expected, a.dtype, **tol(a))
    check_staging(lambda a, b: lax.triangular_solve(a, b, **params), a, b)


@given(matrices(max_side=5))
def test_lu_reconstructs_and_pivots_like_lapack(a):
    lu, pivots, permutation = (np.asarray(o) for o in lax.lu(a))
    m, n = a.shape[-2:]
    k = min(m, n)
    assert pivots.dtype == permutation.dtype == np.int32
    lower = np.tril(lu, -1)[..., :, :k] + np.eye(m, k, dtype=a.dtype)
    upper = np.triu(lu)[..., :k, :]
    permuted = np.take_along_axis(a, permutation[..., :, None], axis=-2)
    # Backward error of Gaussian elimination: |L U - P A| <= gamma_k |L| |U| elementwise,
    # gamma_k = k eps / (1 - k eps) (twice that for complex arithmetic); |L| |U| may exceed
    # |A|, so a tolerance on A's scale alone fails on some well-pivoted matrices (a float32
    # 4x5 stack drew an error of 3.3e-6 at an entry of 0.64). Products in float64 here.
    eps = np.finfo(a.dtype).eps
    gamma = 2 * k * eps / (1 - k * eps)
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    residual = np.abs(lower.astype(wide) @ upper.astype(wide) - permuted)
    bound = gamma * (np.abs(lower).astype(np.float64) @ np.abs(upper).astype(np.float64))
    assert np.all(residual <= bound + np.finfo(a.dtype).tiny), (residual - bound).max()
    # Partial pivoting keeps every multiplier at most 1 in magnitude.
    assert np.all(np.abs(np.tril(lu, -1)) <= 1 + 1e-6)
    # The pivots, applied as successive row swaps, give the permutation.
    order = np.broadcast_to(np.arange(m), a.shape[:-1]).copy().reshape(-1, m)
    for row, swaps in zip(order, pivots.reshape(-1, k)):
        for i, p in enumerate(swaps):
            row[[i, p]] = row[[p, i]]
    np.testing.assert_array_equal(order.reshape(permutation.shape), permutation)
    check_staging(lax.lu, a)


def test_lu_of_a_singular_column_leaves_it_unpivoted():
    lu, pivots, _ = lax.lu(np.array([[0.0, 1.0], [0.0, 2.0]]))
    assert np.all(np.isfinite(np.asarray(lu)))
    np.testing.assert_array_equal(pivots, [0, 1])


@given(matrices(square=True))
def test_cholesky_matches_numpy_and_reads_the_lower_triangle(x):
    a = spd(x)
    assert_close(lax.cholesky(a), np.linalg.cholesky(a), a.dtype, **tol(a))
    upper_garbage = a + np.triu(np.ones_like(a), 1) * 100
    assert_close(
        lax.cholesky(upper_garbage, symmetrize_input=False),
        np.linalg.cholesky(a),
        a.dtype,
        **tol(a),
    )
    check_staging(lax.cholesky, a)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
@pytest.mark.parametrize("jitted", [False, True])
def test_cholesky_of_an_indefinite_matrix_is_nan_for_that_matrix_only(dtype, jitted):
    # The NaN fills the factor's triangle; the other triangle stays zero, as in every factor.
    a = np.stack([np.eye(2), -np.eye(2), np.array([[4.0, 2.0], [2.0, 1.0]])]).astype(dtype)
    cholesky = fg.jit(lax.cholesky) if jitted else lax.cholesky
    factor = np.asarray(cholesky(a))
    np.testing.assert_array_equal(factor[0], np.eye(2))
    for failed in factor[1:]:
        assert np.all(np.isnan(failed[np.tril_indices(2)])) and failed[0, 1] == 0
    upper = fnp.linalg.cholesky
    upper = np.asarray((fg.jit(upper, static_argnames="upper") if jitted else upper)(a, upper=True))
    assert np.all(np.isnan(upper[1][np.triu_indices(2)])) and upper[1][1, 0] == 0


@given(matrices(max_side=5), st.booleans())
def test_qr_matches_numpy(a, full_matrices):
    q, r = lax.qr(a, full_matrices=full_matrices)
    expected_q, expected_r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    assert_close(q, expected_q, a.dtype, **tol(a))
    assert_close(r, expected_r, a.dtype, **tol(a))
    check_staging(lambda a: lax.qr(a, full_matrices=full_matrices), a)


@given(matrices(square=True), st.booleans())
def test_eigh_matches_numpy(x, lower):
    v, w = lax.eigh(x, lower=lower, symmetrize_input=False)
    expected_w, expected_v = np.linalg.eigh(x, UPLO="L" if lower else "U")
    assert_close(w, expected_w, x.dtype, **tol(x))
    # Eigenvectors are unique up to sign: compare the projections v v^T.
    projections = np.asarray(v)[..., :, None, :] * np.asarray(v)[..., None, :, :]
    expected = expected_v[..., :, None, :] * expected_v[..., None, :, :]
    assert_close(projections, expected, x.dtype, **{k: 100 * t for k, t in tol(x).items()})
    # (the projections again: a GPU's solver may choose other signs than the host's LAPACK)
    check_staging(lambda x: projected(*lax.eigh(x, lower=lower)), x)


def projected(v, w):
    return w, v[..., :, None, :] * v[..., None, :, :]


def test_eigh_subset_by_index():
    x = spd(np.random.default_rng(0).normal(size=(4, 4)))
    v, w = lax.eigh(x, subset_by_index=(1, 3))
    assert v.shape == (4, 2)
    assert_close(w, np.linalg.eigvalsh(x)[1:3])


@given(matrices(max_side=5), st.booleans(), st.booleans())
def test_svd_matches_numpy(a, full_matrices, compute_uv):
    out = lax.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    if not compute_uv:
        assert_close(out, np.linalg.svd(a, compute_uv=False), a.dtype, **tol(a))
    else:
        u, s, vh = out
        expected_u, expected_s, expected_vh = np.linalg.svd(a, full_matrices=full_matrices)
        assert u.shape == expected_u.shape and vh.shape == expected_vh.shape
        assert_close(s, expected_s, a.dtype, **tol(a))
        k = s.shape[-1]
        reconstructed = (np.asarray(u)[..., :, :k] * np.asarray(s)[..., None, :]) @ np.asarray(vh)[
            ..., :k, :
        ]
        assert_close(reconstructed, a, a.dtype, **tol(a))
    check_staging(lambda a: lax.svd(a, full_matrices=full_matrices, compute_uv=compute_uv), a)


def test_svd_of_nan_is_nan_not_an_error():
    s = np.asarray(lax.svd(np.full((2, 2), np.nan), compute_uv=False))
    assert np.all(np.isnan(s))


def test_eigh_of_an_infinite_matrix_is_nan_for_that_matrix_only():
    # LAPACK fails to converge on it: eagerly this raised LinAlgError, where jit gave NaNs.
    a = np.stack([np.diag([1.0, 2.0]), np.array([[1.0, np.inf], [np.inf, 2.0]])])
    for v, w in (lax.eigh(a), fg.jit(lax.eigh)(a)):
        np.testing.assert_array_equal(np.asarray(w)[0], [1.0, 2.0])
        assert np.all(np.isnan(np.asarray(w)[1])) and np.all(np.isnan(np.asarray(v)[1]))


def _returns_within(seconds: float, compute):
    """compute()'s value, failing (rather than hanging the suite) if it takes longer."""
    result = {}
    worker = threading.Thread(target=lambda: result.update(value=compute()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"did not return within {seconds} s"
    return result["value"]


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("jitted", [False, True])
def test_svd_of_a_matrix_with_an_infinity_is_nan_and_returns(dtype, jitted):
    # LAPACK's gesdd never returned for it (NumPy's own svd, pinv and lstsq hang there too).
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 4, 4)).astype(dtype)
    a[1, 0, 0] = np.inf
    svd = fg.jit(lax.svd) if jitted else lax.svd
    u, s, vh = _returns_within(120, lambda: [np.asarray(f) for f in svd(a)])
    assert np.isnan(u[1]).all() and np.isnan(s[1]).all() and np.isnan(vh[1]).all()
    np.testing.assert_allclose(s[0], np.linalg.svd(a[0], compute_uv=False), rtol=1e-12)
    pinv = _returns_within(120, lambda: np.asarray(fnp.linalg.pinv(a)))
    assert np.isnan(pinv[1]).all()
    np.testing.assert_allclose(pinv[0], np.linalg.pinv(a[0]), rtol=1e-10, atol=1e-12)


def test_error_messages_name_the_shapes():
    with pytest.raises(ValueError, match=r"cholesky needs square matrices.*\(2, 3\)"):
        lax.cholesky(np.ones((2, 3)))
    with pytest.raises(
        ValueError, match=r"eigh needs an array of rank at least 2, got shape \(3,\)"
    ):
        lax.eigh(np.ones(3))
    with pytest.raises(TypeError, match="qr does not accept dtype int32"):
        lax.qr(np.ones((2, 2), np.int32))
    # (symmetrizing an integer matrix failed first, on the dtypes of x + x^H and 0.5)
    with pytest.raises(TypeError, match="cholesky does not accept dtype int32"):
        lax.cholesky(np.eye(2, dtype=np.int32))
    with pytest.raises(TypeError, match="eigh does not accept dtype int32"):
        lax.eigh(np.eye(2, dtype=np.int32))
    with pytest.raises(TypeError, match="svd does not accept dtype float16"):
        lax.svd(np.ones((2, 2), np.float16))
    with pytest.raises(ValueError, match=r"b of shape \(3, 2\) does not match a of shape \(2, 2\)"):
        lax.triangular_solve(np.eye(2), np.ones((3, 2)), left_side=True)
    with pytest.raises(TypeError, match="float32 and float64"):
        lax.triangular_solve(np.eye(2, dtype=np.float32), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"svd needs an array of rank at least 2.*\(3,\)"):
        lax.svd(np.ones(3))


def test_linalg_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"solve: the batch shapes \(2,\), \(4,\)"):
        fnp.linalg.solve(np.ones((2, 3, 3)), np.ones((4, 3, 1)))
    with pytest.raises(ValueError, match=r"solve: b of shape \(2,\) does not fit a of shape"):
        fnp.linalg.solve(np.eye(3), np.ones(2))
    with pytest.raises(ValueError, match=r"solve: b of shape \(\) does not fit"):
        fnp.linalg.solve(np.eye(3), 1.0)
    with pytest.raises(TypeError, match="matrix_power: n must be an integer, got 1.5"):
        fnp.linalg.matrix_power(np.eye(2), 1.5)
    with pytest.raises(ValueError, match="matrix_rank: give rtol or tol, not both"):
        fnp.linalg.matrix_rank(np.eye(2), rtol=0.1, tol=0.1)


# ---------------------------------------------------------------------------------------------
# Derivatives and batching of the primitives


def _rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize(
    "params",
    [
        dict(left_side=True, lower=True),
        dict(left_side=False, lower=False, transpose_a=True),
        dict(left_side=True, lower=False, transpose_a=True, unit_diagonal=True),
    ],
)
def test_triangular_solve_derivatives(params):
    a = lower_triangular_system(_rng().normal(size=(2, 3, 3)))
    b = _rng(1).normal(size=(2, 3, 2) if params["left_side"] else (2, 2, 3))
    check_grads(lambda a, b: lax.triangular_solve(a, b, **params), (a, b), 2, **GRAD_TOL)


@pytest.mark.parametrize("shape", [(2, 4, 4), (5, 3), (3, 5)])
def test_lu_derivatives(shape):
    check_grads(lambda a: lax.lu(a)[0], (_rng().normal(size=shape),), 2, **GRAD_TOL)


def test_cholesky_derivatives():
    a = spd(_rng().normal(size=(2, 3, 3)))
    check_grads(lax.cholesky, (a,), 2, **GRAD_TOL)
    check_grads(lambda a: lax.cholesky(a, symmetrize_input=False), (a,), 1, **GRAD_TOL)


@pytest.mark.parametrize(
    "shape, full_matrices",
    [((2, 4, 3), False), ((3, 3), True), ((2, 4), False), ((2, 3, 5), True), ((5, 2), True)],
)
def test_qr_derivatives(shape, full_matrices):
    # Wide matrices, and the complete Q of tall ones, whose last columns Householder's
    # construction fixes, are differentiated too.
    a = _rng().normal(size=shape)
    check_grads(lambda a: lax.qr(a, full_matrices=full_matrices), (a,), 2, **GRAD_TOL)


@pytest.mark.parametrize("shape", [(4, 2), (2, 4)])
def test_complex_qr_derivatives(shape):
    r = _rng()
    a = r.normal(size=shape) + 1j * r.normal(size=shape)
    check_grads(lambda a: lax.qr(a, full_matrices=True), (a,), 1, **GRAD_TOL)


def test_eigh_derivatives():
    # Eigenvectors are defined up to sign: differentiate sign-free functions of them.
    def f(a, **params):
        v, w = lax.eigh(a, **params)
        return v * v, w

    check_grads(f, (_rng().normal(size=(2, 3, 3)),), 2, **GRAD_TOL)
    upper_only = dict(lower=False, symmetrize_input=False)
    check_grads(lambda a: f(a, **upper_only), (_rng(1).normal(size=(3, 3)),), 1, **GRAD_TOL)


@pytest.mark.parametrize("lower", [True, False])
def test_complex_derivatives_reading_one_triangle(lower):
    # The imaginary part of the diagonal is not read (nor is the other triangle), so
    # perturbing it changes nothing: the derivatives leave it out too.
    r = _rng(3)
    x = r.normal(size=(3, 3)) + 1j * r.normal(size=(3, 3))
    a = x @ x.conj().T + 3 * np.eye(3)

    def eigh(a):
        v, w = lax.eigh(a, lower=lower, symmetrize_input=False)
        return fnp.abs(v) ** 2, w

    check_grads(eigh, (a,), 1, **GRAD_TOL)
    if lower:
        check_grads(lambda a: lax.cholesky(a, symmetrize_input=False), (a,), 1, **GRAD_TOL)


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4)])
def test_svd_derivatives(shape):
    def f(a):
        u, s, vh = lax.svd(a, full_matrices=False)
        return u * u, s, vh * vh, (u * s[..., None, :]) @ vh

    a = _rng().normal(size=shape)
    check_grads(f, (a,), 2, **GRAD_TOL)
    check_grads(lambda a: lax.svd(a, compute_uv=False), (a,), 2, **GRAD_TOL)


def test_svd_derivative_with_full_matrices_of_a_rectangle_says_so():
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
        fg.jvp(lax.svd, (np.ones((3, 2)),), (np.ones((3, 2)),))


@pytest.mark.parametrize(
    "name, fun, make, in_axes",
    [
        ("lu", lax.lu, lambda r: [r.normal(size=(3, 4, 4))], (1,)),
        ("cholesky", lax.cholesky, lambda r: [spd(r.normal(size=(3, 4, 4)))], (0,)),
        ("qr", lax.qr, lambda r: [r.normal(size=(4, 3, 2))], (2,)),
        ("eigh", lambda x: lax.eigh(x)[1], lambda r: [spd(r.normal(size=(3, 3, 3)))], (0,)),
        ("svd", lambda x: lax.svd(x, compute_uv=False), lambda r: [r.normal(size=(2, 3, 4))], (1,)),
        (
            "triangular_solve, both batched",
            lambda a, b: lax.triangular_solve(a, b, left_side=True, lower=True),
            lambda r: [lower_triangular_system(r.normal(size=(3, 4, 4))), r.normal(size=(4, 2, 3))],
            (0, 2),
        ),
        (
            "triangular_solve, a unbatched",
            lambda a, b: lax.triangular_solve(a, b, lower=True),
            lambda r: [lower_triangular_system(r.normal(size=(4, 4))), r.normal(size=(3, 2, 4))],
            (None, 0),
        ),
    ],
)
def test_vmap_matches_a_loop(name, fun, make, in_axes):
    check_batching(fun, make(_rng()), in_axes, rtol=1e-10, atol=1e-10)


def test_vmap_of_grad_of_slogdet():
    a = _rng().normal(size=(3, 4, 4))
    grads = fg.vmap(fg.grad(lambda a: fnp.linalg.slogdet(a).logabsdet))(a)
    assert_close(grads, np.swapaxes(np.linalg.inv(a), -1, -2), rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# funcgrad.numpy.linalg


@given(matrices(square=True, batch_dims=2))
def test_det_slogdet_inv_match_numpy(a):
    t = tol(a)
    assert_close(
        fnp.linalg.det(a), np.linalg.det(a), a.dtype, rtol=50 * t["rtol"], atol=50 * t["atol"]
    )
    sign, logabsdet = fnp.linalg.slogdet(a)
    expected_sign, expected_logabsdet = np.linalg.slogdet(a)
    assert_close(sign, expected_sign, a.dtype)
    assert_close(logabsdet, expected_logabsdet, a.dtype, **t)
    assert_close(
        fnp.linalg.inv(a), np.linalg.inv(a), a.dtype, rtol=100 * t["rtol"], atol=100 * t["atol"]
    )
    check_staging(fnp.linalg.det, a)


def test_singular_matrices():
    assert float(fnp.linalg.det(np.zeros((2, 2)))) == 0.0
    sign, logabsdet = fnp.linalg.slogdet(np.array([[1.0, 2.0], [2.0, 4.0]]))
    assert float(sign) == 0.0 and float(logabsdet) == -np.inf
    assert float(fnp.linalg.det(np.eye(3, dtype=np.int32))) == 1.0


@given(matrices(square=True, batch_dims=1), st.integers(0, 2), st.booleans())
def test_solve_matches_numpy(a, k, vector_rhs):
    n = a.shape[-1]
    b_shape = (n,) if vector_rhs else (2,) * (a.ndim - 2) + (n, k)
    if not vector_rhs and a.ndim > 2:
        b_shape = (1,) + b_shape[1:]  # broadcasts against a's batch
    b = np.random.default_rng(1).normal(size=b_shape).astype(a.dtype)
    expected = np.linalg.solve(a, b[..., None])[..., 0] if vector_rhs else np.linalg.solve(a, b)
    t = tol(a)
    assert_close(
        fnp.linalg.solve(a, b), expected, a.dtype, rtol=100 * t["rtol"], atol=100 * t["atol"]
    )


def test_linalg_derivatives():
    a, b = _rng().normal(size=(2, 3, 3)), _rng(1).normal(size=(2, 3, 2))
    check_grads(fnp.linalg.det, (a,), 2, **GRAD_TOL)
    check_grads(fnp.linalg.inv, (a,), 2, **GRAD_TOL)
    check_grads(fnp.linalg.solve, (a, b), 2, **GRAD_TOL)
    check_grads(lambda a: fnp.linalg.slogdet(a).logabsdet, (a,), 2, **GRAD_TOL)
    # At singular matrices the derivative is the adjugate's, finite for complex ones too.
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]) * (1 + 0.5j)
    check_grads(fnp.linalg.det, (singular,), 2, **GRAD_TOL)
    check_grads(fnp.linalg.det, (np.diag([1.0, 0.0, 0.0]).astype(complex),), 1, **GRAD_TOL)
    # The pseudo-inverse's rule stays finite at repeated singular values (the identity).
    check_grads(fnp.linalg.pinv, (np.eye(3),), 1, **GRAD_TOL)
    check_grads(fnp.linalg.pinv, (_rng(2).normal(size=(4, 3)),), 2, **GRAD_TOL)


@given(matrices(max_side=5))
def test_decomposition_wrappers_match_numpy(a):
    t = tol(a)
    assert_close(
        fnp.linalg.svd(a, compute_uv=False), np.linalg.svd(a, compute_uv=False), a.dtype, **t
    )
    assert_close(fnp.linalg.svdvals(a), np.linalg.svd(a, compute_uv=False), a.dtype, **t)
    assert_close(fnp.linalg.qr(a, mode="r"), np.linalg.qr(a, mode="r"), a.dtype, **t)
    assert_close(
        fnp.linalg.pinv(a), np.linalg.pinv(a), a.dtype, rtol=100 * t["rtol"], atol=100 * t["atol"]
    )
    assert_close(fnp.linalg.matrix_rank(a), np.linalg.matrix_rank(a), np.int32)
    for ord in (2, -2, "nuc"):
        assert_close(
            fnp.linalg.matrix_norm(a, ord=ord), np.linalg.matrix_norm(a, ord=ord), a.dtype, **t
        )


def test_upper_cholesky_factor_of_a_complex_matrix_is_the_conjugate_transpose():
    """U = L^H, so that a = U^H U; it was L^T, whose off-diagonal imaginary parts have the
    wrong sign. U is exactly the conjugate transpose of the lower factor; NumPy's upper factor
    comes from LAPACK's upper routine, whose sums round apart from the lower one's (by an
    ulp, with some OpenBLAS kernels), so it is met within float64's tolerance."""
    rng = _rng()
    z = rng.normal(size=(2, 3, 3)) + 1j * rng.normal(size=(2, 3, 3))
    x = z @ np.conj(np.swapaxes(z, -1, -2)) + 3 * np.eye(3)
    upper = np.asarray(fnp.linalg.cholesky(x, upper=True))
    lower = np.asarray(fnp.linalg.cholesky(x))
    np.testing.assert_array_equal(upper, np.conj(np.swapaxes(lower, -1, -2)))
    assert_close(lower, np.linalg.cholesky(x), **tolerance(np.float64))
    assert_close(upper, np.linalg.cholesky(x, upper=True), **tolerance(np.float64))
    assert_close(np.conj(np.swapaxes(upper, -1, -2)) @ upper, x, rtol=1e-12, atol=1e-12)


def test_symmetric_wrappers():
    x = spd(_rng().normal(size=(2, 4, 4)))
    w, v = fnp.linalg.eigh(x)
    assert_close(w, np.linalg.eigvalsh(x))
    assert_close(fnp.linalg.eigvalsh(x, "U"), np.linalg.eigvalsh(x, "U"))
    assert_close(fnp.linalg.cholesky(x, upper=True), np.linalg.cholesky(x, upper=True))
    indefinite = x - 6 * np.eye(4)
    assert_close(
        fnp.linalg.svd(indefinite, hermitian=True).S, np.linalg.svd(indefinite, compute_uv=False)
    )
    u, s, vh = fnp.linalg.svd(indefinite, hermitian=True)
    assert_close(
        (np.asarray(u) * np.asarray(s)[..., None, :]) @ np.asarray(vh),
        indefinite,
        rtol=1e-9,
        atol=1e-9,
    )
    with pytest.raises(ValueError, match="UPLO"):
        fnp.linalg.eigh(x, UPLO="X")


def test_lstsq_cond_and_friends_match_numpy():
    r = _rng()
    a, b = r.normal(size=(5, 3)), r.normal(size=(5, 2))
    for actual, expected in zip(fnp.linalg.lstsq(a, b), np.linalg.lstsq(a, b)):
        assert_close(actual, np.asarray(expected), rtol=1e-9, atol=1e-9)
    assert fnp.linalg.lstsq(a.T, b[:3, 0], numpy_resid=True)[1].shape == (0,)
    # A negative rcond stands for epsilon: the rank-one matrix's roundoff stays out of x.
    rank_one = np.outer([1.0, 2.0, 3.0], [1.0, 1.0, 2.0])
    x, _, rank, s = np.linalg.lstsq(rank_one, b[:3], -1)  # (NumPy's residuals: none here)
    for lstsq in (fnp.linalg.lstsq, fg.jit(fnp.linalg.lstsq)):
        actual = lstsq(rank_one, b[:3], -1)
        assert_close(actual[0], x, rtol=1e-9, atol=1e-9)
        assert int(actual[2]) == rank == 1
        assert_close(actual[3], s, rtol=1e-9, atol=1e-9)
    square = r.normal(size=(2, 3, 3))
    for p in (None, 2, -2, 1, np.inf, "fro"):
        assert_close(fnp.linalg.cond(square, p), np.linalg.cond(square, p), rtol=1e-9, atol=1e-9)
    assert float(fnp.linalg.cond(np.array([[1.0, 0.0], [0.0, 0.0]]), "fro")) == np.inf
    for p in (None, 2, -2):
        assert float(fnp.linalg.cond(np.zeros((2, 2)), p)) == np.linalg.cond(np.zeros((2, 2)), p)
    # rtol is relative to the largest singular value, tol absolute, as in NumPy.
    scaled = np.diag([100.0, 1.0, 0.01])
    for rtol in (0.05, 0.005, 1e-5):
        assert int(fnp.linalg.matrix_rank(scaled, rtol)) == np.linalg.matrix_rank(scaled, rtol=rtol)
        assert int(fnp.linalg.matrix_rank(scaled, tol=rtol)) == np.linalg.matrix_rank(scaled, rtol)
    for n in (-2, 0, 3):
        assert_close(
            fnp.linalg.matrix_power(square, n),
            np.linalg.matrix_power(square, n),
            rtol=1e-9,
            atol=1e-9,
        )
    chain = [r.normal(size=4), r.normal(size=(4, 6)), r.normal(size=(6, 2)), r.normal(size=(2, 3))]
    assert_close(fnp.linalg.multi_dot(chain), np.linalg.multi_dot(chain), rtol=1e-9, atol=1e-9)
    t = r.normal(size=(6, 2, 3))
    assert_close(fnp.linalg.tensorinv(t, 1), np.linalg.tensorinv(t, 1), rtol=1e-9, atol=1e-9)
    t, y = r.normal(size=(2, 3, 6)), r.normal(size=(2, 3))
    assert_close(fnp.linalg.tensorsolve(t, y), np.linalg.tensorsolve(t, y), rtol=1e-9, atol=1e-9)
    assert_close(fnp.linalg.trace(square, offset=1), np.linalg.trace(square, offset=1))
    assert_close(fnp.linalg.diagonal(square), np.linalg.diagonal(square))


@settings(max_examples=5)
@given(matrices(square=True))
def test_linalg_under_jit(a):
    check_staging(lambda a: (fnp.linalg.inv(a), fnp.linalg.slogdet(a)), a)


def test_compiled_float32_decompositions_pick_the_references_signs():
    # float32 decompositions compute in float64, as the reference does: a float32 routine
    # returned this matrix's second eigenvector with the opposite sign.
    x = np.array(
        [
            [0.34558418, 0.82161814, 0.33043706, -1.3031572],
            [0.9053559, 0.44637457, -0.5369532, 0.5811181],
            [0.3645724, 0.2941325, 0.02842224, 0.546713],
            [-0.73645407, -0.16290995, -0.48211932, 0.5988462],
        ],
        np.float32,
    )
    x = fg.device_put(x, fg.devices("cpu")[0])  # (a GPU's solver may choose other signs)
    for decomposition in (lax.eigh, lax.svd, lax.qr):
        eager = decomposition(x)
        with jit_backend("llvm"):
            compiled = fg.jit(decomposition)(x)
        for expected, actual in zip(eager, compiled):
            actual, expected = np.asarray(actual), np.asarray(expected)
            assert actual.dtype == np.float32
            if decomposition is lax.eigh and actual.ndim == 2:
                # A CPU's small eigendecompositions take Jacobi's rotations (`jacobi.py`),
                # whose eigenvectors may have the other sign.
                actual = actual * np.sign(actual[0] * expected[0])
            np.testing.assert_allclose(actual, expected, atol=1e-6)
