"""lax.linalg's structured solves and Householder reductions against independent definitions:
dense NumPy solves and Cholesky factors, and LAPACK's own packed outputs (geqrf/orgqr, gehrd,
sytrd/hetrd) through scipy.linalg.lapack; derivatives against central finite differences; jit
against eager and vmap against a Python loop."""

import numpy as np
import pytest
from scipy.linalg import lapack, polar

import funcgrad as fg
from funcgrad import lax
from funcgrad.lax.householder import geqrf
from funcgrad.test_util import check_grads

linalg = lax.linalg


def dense_tridiagonal(dl, d, du):
    return np.diag(d) + np.diag(dl[1:], -1) + np.diag(du[:-1], 1)


def tridiagonal_system(rng, batch=(), m=6, n=2, dtype=np.float64):
    def draw(shape):
        x = rng.normal(size=shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.normal(size=shape)
        return x.astype(dtype)

    dl, du, b = draw((*batch, m)), draw((*batch, m)), draw((*batch, m, n))
    d = draw((*batch, m)) + 6  # diagonally dominant: no pivoting needed
    return dl, d, du, b


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_tridiagonal_solve_matches_dense_solve(dtype):
    rng = np.random.default_rng(0)
    dl, d, du, b = tridiagonal_system(rng, batch=(3,), dtype=dtype)
    x = np.asarray(linalg.tridiagonal_solve(dl, d, du, b))
    assert x.dtype == dtype
    for i in range(3):
        expected = np.linalg.solve(dense_tridiagonal(dl[i], d[i], du[i]), b[i])
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(x[i], expected, rtol=tol, atol=tol)


def test_tridiagonal_solve_ignores_corner_entries():
    rng = np.random.default_rng(1)
    dl, d, du, b = tridiagonal_system(rng)
    dl[0], du[-1] = 1e3, -1e3
    expected = np.linalg.solve(dense_tridiagonal(dl, d, du), b)
    np.testing.assert_allclose(linalg.tridiagonal_solve(dl, d, du, b), expected, rtol=1e-12)


def test_tridiagonal_solve_grads_jit_vmap():
    rng = np.random.default_rng(2)
    dl, d, du, b = tridiagonal_system(rng, m=5)
    check_grads(linalg.tridiagonal_solve, (dl, d, du, b), order=2, modes=("fwd", "rev"))
    eager = linalg.tridiagonal_solve(dl, d, du, b)
    np.testing.assert_allclose(fg.jit(linalg.tridiagonal_solve)(dl, d, du, b), eager, rtol=1e-14)
    stacked = tridiagonal_system(rng, batch=(3,), m=5)
    looped = [linalg.tridiagonal_solve(*(x[i] for x in stacked)) for i in range(3)]
    np.testing.assert_allclose(fg.vmap(linalg.tridiagonal_solve)(*stacked), np.stack(looped))
    # A shared matrix with batched right-hand sides.
    in_axes = (None, None, None, 0)
    batched_b = fg.vmap(linalg.tridiagonal_solve, in_axes=in_axes)(dl, d, du, stacked[3])
    looped = [linalg.tridiagonal_solve(dl, d, du, stacked[3][i]) for i in range(3)]
    np.testing.assert_allclose(batched_b, np.stack(looped), rtol=1e-14)


def test_tridiagonal_solve_rejects_mismatched_shapes():
    d = np.ones(4)
    with pytest.raises(ValueError, match="does not fit"):
        linalg.tridiagonal_solve(d, d, d, np.ones((5, 1)))
    with pytest.raises(ValueError, match="one shape"):
        linalg.tridiagonal_solve(np.ones(3), d, d, np.ones((4, 1)))
    with pytest.raises(TypeError, match="one dtype"):
        linalg.tridiagonal_solve(d, d, d, np.ones((4, 1), np.float32))


def spd(rng, n):
    m = rng.normal(size=(n, n))
    return m @ m.T + n * np.eye(n)


def test_cholesky_update_matches_cholesky_of_updated_matrix():
    rng = np.random.default_rng(3)
    for n in (1, 4, 7):
        a, w = spd(rng, n), rng.normal(size=n)
        r = np.linalg.cholesky(a).T
        expected = np.linalg.cholesky(a + np.outer(w, w)).T
        np.testing.assert_allclose(linalg.cholesky_update(r, w), expected, atol=1e-13)
    # A zero entry of w at the first row: no rotation there.
    w = np.array([0.0, 1.0, 2.0])
    a = spd(rng, 3)
    updated = linalg.cholesky_update(np.linalg.cholesky(a).T, w)
    np.testing.assert_allclose(updated, np.linalg.cholesky(a + np.outer(w, w)).T, atol=1e-13)


def test_cholesky_update_grads_jit_vmap():
    rng = np.random.default_rng(4)
    r, w = np.linalg.cholesky(spd(rng, 4)).T, rng.normal(size=4)
    check_grads(linalg.cholesky_update, (r, w), order=1, modes=("fwd", "rev"))
    eager = linalg.cholesky_update(r, w)
    np.testing.assert_allclose(fg.jit(linalg.cholesky_update)(r, w), eager, atol=1e-14)
    rs = np.stack([np.linalg.cholesky(spd(rng, 4)).T for _ in range(3)])
    ws = rng.normal(size=(3, 4))
    looped = np.stack([linalg.cholesky_update(rs[i], ws[i]) for i in range(3)])
    np.testing.assert_allclose(fg.vmap(linalg.cholesky_update)(rs, ws), looped, atol=1e-14)


def test_cholesky_update_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        linalg.cholesky_update(np.eye(3), np.ones(4))
    with pytest.raises(TypeError, match="complex128"):
        linalg.cholesky_update(np.eye(3, dtype=complex), np.ones(3, complex))


def test_symmetric_product():
    rng = np.random.default_rng(5)
    a, c = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 3))
    c = c + np.swapaxes(c, -1, -2)
    expected = 2.0 * a @ np.swapaxes(a, -1, -2) + 0.5 * c
    product = linalg.symmetric_product(a, c, alpha=2.0, beta=0.5)
    np.testing.assert_allclose(np.tril(product), np.tril(expected), rtol=1e-14)
    # Symmetrized: the upper triangle mirrors the lower one exactly, whatever c's upper part.
    c_lower = np.tril(c)
    mirrored = np.asarray(
        linalg.symmetric_product(a, c_lower, alpha=2.0, beta=0.5, symmetrize_output=True)
    )
    np.testing.assert_array_equal(mirrored, np.swapaxes(mirrored, -1, -2))
    np.testing.assert_allclose(np.tril(mirrored), np.tril(expected), rtol=1e-14)
    f = lambda a, c: linalg.symmetric_product(a, c, alpha=2.0, beta=0.5)  # noqa: E731
    check_grads(f, (a[0], c[0]), order=2, modes=("fwd", "rev"))
    np.testing.assert_allclose(fg.jit(f)(a, c), f(a, c), rtol=1e-14)
    with pytest.raises(ValueError, match="C \\[..., m, m\\]"):
        linalg.symmetric_product(a, c[..., :2])


def random_matrix(rng, shape, dtype):
    x = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.normal(size=shape)
    return x.astype(dtype)


REAL_OR_COMPLEX = [(np.float64, "d"), (np.complex128, "z")]


@pytest.mark.parametrize("dtype, prefix", REAL_OR_COMPLEX)
def test_householder_product_matches_orgqr(dtype, prefix):
    rng = np.random.default_rng(6)
    a = random_matrix(rng, (6, 4), dtype)
    packed, taus, *_ = getattr(lapack, prefix + "geqrf")(a)
    orgqr = lapack.dorgqr if prefix == "d" else lapack.zungqr
    q = orgqr(packed, taus)[0]
    np.testing.assert_allclose(linalg.householder_product(packed, taus), q, atol=1e-14)
    # Fewer reflectors than columns.
    q_two = orgqr(packed, taus[:2])[0]
    np.testing.assert_allclose(linalg.householder_product(packed, taus[:2]), q_two, atol=1e-14)
    # No reflectors at all (the loop's body, traced though it never runs, indexed no taus).
    np.testing.assert_allclose(linalg.householder_product(packed, taus[:0]), np.eye(6, 4))
    stacked = np.stack([packed, 2 * packed])
    stacked_taus = np.stack([taus, taus])
    looped = [linalg.householder_product(stacked[i], stacked_taus[i]) for i in range(2)]
    batched = fg.vmap(linalg.householder_product)(stacked, stacked_taus)
    np.testing.assert_allclose(batched, np.stack(looped), atol=1e-14)
    jitted = fg.jit(linalg.householder_product)(packed, taus)
    np.testing.assert_allclose(jitted, q, atol=1e-14)
    with pytest.raises(ValueError, match="m >= n"):
        linalg.householder_product(packed.T, taus)


@pytest.mark.parametrize("dtype, prefix", REAL_OR_COMPLEX)
def test_hessenberg_matches_gehrd(dtype, prefix):
    rng = np.random.default_rng(7)
    n = 5
    a = random_matrix(rng, (n, n), dtype)
    expected, expected_taus, _ = getattr(lapack, prefix + "gehrd")(a)
    packed, taus = fg.jit(linalg.hessenberg)(a)
    np.testing.assert_allclose(packed, expected, atol=1e-13)
    np.testing.assert_allclose(taus, expected_taus[: n - 1], atol=1e-13)
    # Q H Q^H = a, with Q rebuilt from the reflectors.
    packed = np.asarray(packed)
    q = np.eye(n, dtype=dtype)
    q[1:, 1:] = linalg.householder_product(packed[1:, : n - 1], taus)
    h = np.triu(packed, -1)
    np.testing.assert_allclose(q @ h @ q.conj().T, a, atol=1e-13)
    batch = np.stack([a, a.T])
    looped = [linalg.hessenberg(m)[0] for m in batch]
    np.testing.assert_allclose(fg.vmap(linalg.hessenberg)(batch)[0], np.stack(looped), atol=1e-14)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype, prefix", REAL_OR_COMPLEX)
def test_tridiagonal_matches_sytrd(dtype, prefix, lower):
    rng = np.random.default_rng(8)
    n = 5
    a = random_matrix(rng, (n, n), dtype)
    sytrd = lapack.dsytrd if prefix == "d" else lapack.zhetrd
    expected, expected_d, expected_e, expected_taus, _ = sytrd(a, lower=int(lower))
    packed, d, e, taus = linalg.tridiagonal(a, lower=lower)
    assert np.asarray(d).dtype == np.float64 and np.asarray(e).dtype == np.float64
    np.testing.assert_allclose(packed, expected, atol=1e-13)
    np.testing.assert_allclose(d, expected_d, atol=1e-13)
    np.testing.assert_allclose(e, expected_e, atol=1e-13)
    np.testing.assert_allclose(taus, expected_taus, atol=1e-13)
    # The reduction is a similarity of the Hermitian matrix the triangle describes.
    triangle = np.tril(a, -1) if lower else np.triu(a, 1)
    hermitian = triangle + triangle.conj().T + np.diag(a.diagonal().real)
    t = np.diag(d) + np.diag(e, -1) + np.diag(e, 1)
    np.testing.assert_allclose(np.linalg.eigvalsh(t), np.linalg.eigvalsh(hermitian), atol=1e-12)
    jitted = fg.jit(lambda x: linalg.tridiagonal(x, lower=lower))(a)
    np.testing.assert_allclose(jitted[0], packed, atol=1e-14)


@pytest.mark.parametrize("jitted", [False, True])
def test_reductions_of_one_by_one_matrices_are_the_matrix(jitted):
    # No reflector: the form is the matrix itself, with no taus and no off-diagonal.
    a = np.array([[[2.0 - 1.0j]], [[-3.0 + 0.5j]]])
    hessenberg = fg.jit(linalg.hessenberg) if jitted else linalg.hessenberg
    tridiagonal = (
        fg.jit(linalg.tridiagonal, static_argnames="lower") if jitted else linalg.tridiagonal
    )
    packed, taus = hessenberg(a)
    np.testing.assert_array_equal(packed, a)
    assert np.shape(taus) == (2, 0)
    for lower in (True, False):
        packed, d, e, taus = tridiagonal(a, lower=lower)
        np.testing.assert_array_equal(packed, a.real.astype(a.dtype))
        np.testing.assert_array_equal(d, a.real[..., 0])
        assert np.shape(e) == np.shape(taus) == (2, 0)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_qdwh_matches_polar(dtype):
    rng = np.random.default_rng(9)
    x = random_matrix(rng, (6, 4), dtype)
    u, h, num_iters, is_converged = linalg.qdwh(x)
    expected_u, expected_h = polar(x)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(u, expected_u, atol=tol)
    np.testing.assert_allclose(h, expected_h, atol=10 * tol)
    assert bool(is_converged) and 0 < int(num_iters) <= 10
    jitted = fg.jit(linalg.qdwh)(x)
    np.testing.assert_allclose(jitted[0], u, atol=tol)


def test_qdwh_ill_conditioned_vmap_and_errors():
    rng = np.random.default_rng(10)
    # Singular values 1e-10 .. 3: the QR steps carry it.
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    x = q @ np.diag([3.0, 1.0, 1e-10])
    u, h, _, is_converged = linalg.qdwh(x)
    np.testing.assert_allclose(u, q, atol=1e-9)
    np.testing.assert_allclose(np.asarray(u) @ np.asarray(h), x, atol=1e-13)
    assert bool(is_converged)
    stacked = rng.normal(size=(2, 4, 3))
    batched = fg.vmap(linalg.qdwh)(stacked)
    for i in range(2):
        np.testing.assert_allclose(batched[0][i], linalg.qdwh(stacked[i])[0], atol=1e-14)
    with pytest.raises(ValueError, match="m >= n"):
        linalg.qdwh(stacked[0].T)


def lapack_ormqr(prefix, packed, taus, c, left, transpose):
    """LAPACK's own product with Q, from the packed a's first k columns."""
    ormqr = lapack.dormqr if prefix == "d" else lapack.zunmqr
    trans = ("T" if prefix == "d" else "C") if transpose else "N"
    k = len(taus)
    return ormqr("L" if left else "R", trans, packed[:, :k], taus, c, max(c.shape) * 64)[0]


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (1, 3)])
@pytest.mark.parametrize("dtype, prefix", REAL_OR_COMPLEX)
def test_geqrf_and_ormqr_match_lapack(dtype, prefix, shape):
    rng = np.random.default_rng(11)
    a = random_matrix(rng, shape, dtype)
    expected_packed, expected_taus, *_ = getattr(lapack, prefix + "geqrf")(a)
    packed, taus = geqrf(a)
    np.testing.assert_allclose(packed, expected_packed, atol=1e-13)
    np.testing.assert_allclose(taus, expected_taus, atol=1e-13)
    raw_h, raw_taus = fg.numpy.linalg.qr(a, mode="raw")
    expected_h, expected_raw_taus = np.linalg.qr(a, mode="raw")
    np.testing.assert_allclose(raw_h, expected_h, atol=1e-13)
    np.testing.assert_allclose(raw_taus, expected_raw_taus, atol=1e-13)
    m = shape[0]
    for left in (True, False):
        for transpose in (False, True):
            c = random_matrix(rng, (m, 2) if left else (2, m), dtype)
            product = linalg.ormqr(
                expected_packed, expected_taus, c, left=left, transpose=transpose
            )
            expected = lapack_ormqr(prefix, expected_packed, expected_taus, c, left, transpose)
            np.testing.assert_allclose(product, expected, atol=1e-13)


def test_ormqr_fewer_reflectors_and_float32():
    rng = np.random.default_rng(12)
    a = rng.normal(size=(5, 3))
    packed, taus, *_ = lapack.dgeqrf(a)
    c = rng.normal(size=(5, 4))
    # Two reflectors: Q = H_0 H_1, built here from the reflectors one by one.
    q = np.eye(5)
    for i in range(2):
        v = np.concatenate([np.zeros(i), [1.0], packed[i + 1 :, i]])
        q = q @ (np.eye(5) - taus[i] * np.outer(v, v))
    np.testing.assert_allclose(linalg.ormqr(packed, taus[:2], c), q @ c, atol=1e-14)
    np.testing.assert_allclose(linalg.ormqr(packed, taus[:0], c), c)
    empty_packed, empty_taus = geqrf(np.ones((0, 3)))
    assert empty_packed.shape == (0, 3) and empty_taus.shape == (0,)
    single = linalg.ormqr(packed.astype(np.float32), taus.astype(np.float32), c.astype(np.float32))
    assert np.asarray(single).dtype == np.float32
    np.testing.assert_allclose(single, lapack_ormqr("d", packed, taus, c, True, False), atol=1e-5)


def test_ormqr_and_geqrf_grads_vmap_jit():
    rng = np.random.default_rng(13)
    a = rng.normal(size=(4, 3))
    packed, taus, *_ = lapack.dgeqrf(a)
    c = rng.normal(size=(3, 4))
    for left, transpose in [(True, False), (False, True)]:
        operand = c.T if left else c

        def f(packed, taus, operand, left=left, transpose=transpose):
            return linalg.ormqr(packed, taus, operand, left=left, transpose=transpose)

        check_grads(f, (packed, taus, operand), order=2, modes=("fwd", "rev"))
        stacked = (np.stack([packed, 2 * packed]), np.stack([taus, -taus]), np.stack([operand] * 2))
        looped = np.stack([f(*(x[i] for x in stacked)) for i in range(2)])
        np.testing.assert_allclose(fg.vmap(f)(*stacked), looped, atol=1e-14)
        np.testing.assert_allclose(fg.jit(f)(packed, taus, operand), f(packed, taus, operand))
    check_grads(geqrf, (a,), order=1, modes=("fwd", "rev"))
    complex_a = random_matrix(rng, (4, 3), np.complex128)
    check_grads(geqrf, (complex_a,), order=1, modes=("fwd", "rev"))
    batch = np.stack([a, a[::-1]])
    looped = [geqrf(x)[0] for x in batch]
    np.testing.assert_allclose(fg.vmap(geqrf)(batch)[0], np.stack(looped), atol=1e-14)


def test_ormqr_rejects_bad_operands():
    packed, taus = geqrf(np.ones((4, 3)))
    with pytest.raises(ValueError, match="left=True needs c \\[..., 4, p\\]"):
        linalg.ormqr(packed, taus, np.ones((3, 2)))
    with pytest.raises(ValueError, match="left=False needs c \\[..., 4, p\\]"):
        linalg.ormqr(packed, taus, np.ones((4, 2)), left=False)
    with pytest.raises(ValueError, match="batch shape"):
        linalg.ormqr(packed, taus, np.ones((2, 4, 2)))
    with pytest.raises(ValueError, match="k <= min"):
        linalg.ormqr(packed, np.ones(4), np.ones((4, 2)))
    with pytest.raises(TypeError, match="c of a's dtype float64, got float32"):
        linalg.ormqr(packed, taus, np.ones((4, 2), np.float32))
    with pytest.raises(TypeError, match="does not accept dtype int32"):
        linalg.ormqr(np.ones((4, 3), np.int32), np.ones(3, np.int32), np.ones((4, 2), np.int32))


def test_decomposition_choices():
    x = np.array([[2.0, 1.0], [1.0, 3.0]])
    w = np.linalg.eigvalsh(x)
    for implementation in (*linalg.EighImplementation, "qr", None):
        np.testing.assert_allclose(linalg.eigh(x, implementation=implementation)[1], w)
    for algorithm in linalg.SvdAlgorithm:
        np.testing.assert_allclose(linalg.svd(x, algorithm=algorithm)[1], w[::-1])
    for implementation in linalg.EigImplementation:
        values = linalg.eig(x, implementation=implementation)[0]
        np.testing.assert_allclose(np.sort(np.asarray(values).real), w)
    with pytest.raises(ValueError, match="EighImplementation.QR"):
        linalg.eigh(x, implementation="magma")
    with pytest.raises(ValueError, match="SvdAlgorithm.POLAR"):
        linalg.svd(x, algorithm=linalg.EighImplementation.QR)


def test_householder_family_under_x64():
    """Under x64 the loops' step index is int64; the row masks compare it with int32 rows."""
    rng = np.random.default_rng(14)
    a = rng.normal(size=(4, 4))
    packed, taus, *_ = lapack.dgeqrf(a)
    with fg.enable_x64():
        np.testing.assert_allclose(geqrf(a)[0], packed, atol=1e-13)
        q = linalg.householder_product(packed, taus)
        np.testing.assert_allclose(linalg.ormqr(packed, taus, np.eye(4)), q, atol=1e-14)
        np.testing.assert_allclose(linalg.hessenberg(a)[0], lapack.dgehrd(a)[0], atol=1e-13)
        np.testing.assert_allclose(
            linalg.tridiagonal(a)[0], lapack.dsytrd(a, lower=1)[0], atol=1e-13
        )
