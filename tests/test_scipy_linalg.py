"""funcgrad.scipy.linalg against scipy.linalg: values on drawn well-conditioned matrices
(tightly in double precision, within tolerances in single, complex where a function conjugates),
derivatives against central finite differences, jit against eager, vmap against a loop of the
lanes, and the errors that name a bad shape."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.scipy.linalg as fl
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close, check_batching, check_staging

TOL = {
    np.dtype(np.float32): dict(rtol=2e-4, atol=2e-4),
    np.dtype(np.complex64): dict(rtol=2e-4, atol=2e-4),
    np.dtype(np.float64): dict(rtol=1e-9, atol=1e-9),
    np.dtype(np.complex128): dict(rtol=1e-9, atol=1e-9),
}
GRAD_TOL = dict(atol=1e-5, rtol=1e-5)
inexact_dtypes = st.one_of(fst.float_dtypes, fst.complex_dtypes)


def tol(dtype) -> dict:
    return TOL[np.dtype(dtype)]


# ---------------------------------------------------------------------------------------------
# Drawn problems: sizes, batches and dtypes from hypothesis, values from a drawn seed, built so
# the reference's answer is well conditioned.


@st.composite
def problems(draw, dtypes=inexact_dtypes, max_side: int = 4, max_batch_dims: int = 1):
    """(dtype, n, batch, seed) for a drawn problem of n x n matrices."""
    dtype = np.dtype(draw(dtypes))
    n = draw(st.integers(1, max_side))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=max_batch_dims)))
    return dtype, n, batch, draw(st.integers(0, 2**32 - 1))


def normal(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def well_conditioned(rng, shape, dtype):
    """Matrices U diag(s) V with random unitary U and V and s in [1, 3]: condition number <= 3."""
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    u, _ = np.linalg.qr(normal(rng, shape, wide))
    v, _ = np.linalg.qr(normal(rng, shape, wide))
    s = rng.uniform(1, 3, shape[:-1])
    return ((u * s[..., None, :]) @ v).astype(dtype)


def positive_definite(rng, shape, dtype):
    """Hermitian matrices with eigenvalues in [1, 9]."""
    a = well_conditioned(rng, shape, np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    return (a @ adjoint(a)).astype(dtype)


def triangular_system(rng, shape, dtype, lower: bool):
    """Triangular matrices whose diagonal (in [1, 2]) dominates each row; the other triangle
    holds garbage, which a solve that reads one triangle must not see."""
    n = shape[-1]
    x = (
        rng.uniform(-1, 1, shape)
        + (1j * rng.uniform(-1, 1, shape) if np.dtype(dtype).kind == "c" else 0)
    ) / (2 * n)
    x = x + np.eye(n) * rng.uniform(1, 2, shape[:-1])[..., None]
    garbage = normal(rng, shape, dtype)
    triangle = np.tril(x) if lower else np.triu(x)
    other = np.triu(garbage, 1) if lower else np.tril(garbage, -1)
    return (triangle + other).astype(dtype)


def assert_close_to_scale(actual, expected, dtype, factor: float = 10) -> None:
    """Each matrix compared relative to its largest expected entry: the rounding errors of a
    large exponential reach its small entries too."""
    assert np.asarray(actual).dtype == dtype
    scale = np.max(np.abs(expected), axis=(-2, -1), keepdims=True)
    t = tol(dtype)
    assert_close(
        np.asarray(actual) / scale,
        expected / scale,
        rtol=factor * t["rtol"],
        atol=factor * t["atol"],
    )


def adjoint(x):
    return np.conj(np.swapaxes(x, -1, -2))


def wide(x):
    """x in double precision: the reference computes there."""
    x = np.asarray(x)
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def per_matrix(reference, *arrays, core_ranks=None):
    """`reference` (a SciPy function of single matrices) over the broadcast batch of `arrays`;
    a tuple result gives a tuple of stacked arrays."""
    core_ranks = core_ranks or [2] * len(arrays)
    batch = np.broadcast_shapes(*(a.shape[: a.ndim - r] for a, r in zip(arrays, core_ranks)))
    arrays = [np.broadcast_to(a, batch + a.shape[a.ndim - r :]) for a, r in zip(arrays, core_ranks)]
    results = [reference(*(a[index] for a in arrays)) for index in np.ndindex(batch)]
    if isinstance(results[0], tuple):
        return tuple(np.stack(parts).reshape(batch + parts[0].shape) for parts in zip(*results))
    return np.stack(results).reshape(batch + np.shape(results[0]))


def right_hand_side(rng, dtype, n: int, batch, vector: bool):
    return normal(rng, (n,) if vector else batch + (n, 2), dtype)


# ---------------------------------------------------------------------------------------------
# Triangular, Cholesky and LU solves


@given(
    problems(),
    st.sampled_from([0, 1, 2, "N", "T", "C"]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_solve_triangular_matches_scipy(problem, trans, lower, unit_diagonal, vector):
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = triangular_system(rng, batch + (n, n), dtype, lower)
    b = right_hand_side(rng, dtype, n, batch, vector)
    expected = per_matrix(
        lambda a, b: sl.solve_triangular(a, b, trans, lower, unit_diagonal),
        wide(a),
        wide(b),
        core_ranks=[2, 1 if vector else 2],
    )
    actual = fl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)
    assert_close(actual, expected, dtype, **tol(dtype))


@given(problems(), st.booleans(), st.booleans())
def test_cholesky_and_its_solves_match_scipy(problem, lower, vector):
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = positive_definite(rng, batch + (n, n), dtype)
    # Garbage outside the triangle that is read.
    garbage = normal(rng, a.shape, dtype)
    a_read = np.tril(a) + np.triu(garbage, 1) if lower else np.triu(a) + np.tril(garbage, -1)
    b = right_hand_side(rng, dtype, n, batch, vector)
    ranks = [2, 1 if vector else 2]
    t = tol(dtype)
    expected_factor = per_matrix(lambda a: sl.cholesky(a, lower), wide(a))
    assert_close(fl.cholesky(a_read, lower), expected_factor, dtype, **t)
    c, lower_out = fl.cho_factor(a_read, lower=lower)
    assert lower_out == lower
    assert_close(c, expected_factor, dtype, **t)
    expected = per_matrix(
        lambda a, b: sl.cho_solve((sl.cholesky(a, lower), lower), b),
        wide(a),
        wide(b),
        core_ranks=ranks,
    )
    assert_close(fl.cho_solve((c, lower), b), expected, dtype, **t)
    assert_close(fl.solve(a_read, b, lower=lower, assume_a="pos"), expected, dtype, **t)


@given(problems(), st.integers(1, 4), st.booleans())
def test_lu_matches_scipy(problem, columns, permute_l):
    dtype, m, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = normal(rng, batch + (m, columns), dtype)
    expected = per_matrix(lambda a: sl.lu(a, permute_l), wide(a))
    actual = fl.lu(a, permute_l=permute_l)
    assert len(actual) == len(expected)
    real = np.dtype(dtype).type(0).real.dtype
    if not permute_l:
        assert_close(actual[0], expected[0], real)
    for x, y in zip(actual[-2:], expected[-2:]):
        assert_close(x, y, dtype, **tol(dtype))


@given(problems(), st.sampled_from([0, 1, 2]), st.booleans())
def test_lu_factor_and_lu_solve_match_scipy(problem, trans, vector):
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, batch + (n, n), dtype)
    b = right_hand_side(rng, dtype, n, batch, vector)
    t = tol(dtype)
    factors, pivots = fl.lu_factor(a)
    expected_factors, expected_pivots = per_matrix(sl.lu_factor, wide(a))
    assert_close(factors, expected_factors, dtype, **t)
    assert_close(pivots, expected_pivots.astype(np.int32), np.int32)
    ranks = [2, 1 if vector else 2]
    op = {0: lambda a: a, 1: lambda a: np.swapaxes(a, -1, -2), 2: adjoint}[trans]
    expected = per_matrix(sl.solve, op(wide(a)), wide(b), core_ranks=ranks)
    assert_close(fl.lu_solve((factors, pivots), b, trans=trans), expected, dtype, **t)
    if not batch:
        # SciPy's own factors and pivots: lu_solve reads LAPACK's pivot encoding.
        lu_and_piv = sl.lu_factor(a)
        assert_close(
            fl.lu_solve(lu_and_piv, b, trans), sl.lu_solve(lu_and_piv, b, trans), dtype, **t
        )


def test_solve_assuming_symmetry_reads_the_whole_matrix():
    """docs/differences.md: "sym" and "her" solve with the whole matrix, as JAX does (SciPy
    reads one triangle); "pos" reads the triangle `lower` names, as SciPy does."""
    a = np.array([[4.0, 1.0, 0.5], [2.0, 5.0, 1.0], [0.0, 3.0, 6.0]])
    b = np.array([1.0, 2.0, 3.0])
    for assume_a in ("sym", "her"):
        assert_close(fl.solve(a, b, assume_a=assume_a), np.linalg.solve(a, b))
    for lower in (False, True):
        want = sl.solve(a, b, assume_a="pos", lower=lower)
        assert_close(fl.solve(a, b, assume_a="pos", lower=lower), want)


@given(problems(), st.sampled_from(["gen", "sym", "her"]), st.booleans())
def test_solve_inv_det_match_scipy(problem, assume_a, vector):
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, batch + (n, n), dtype)
    if assume_a == "sym":
        a = a + np.swapaxes(a, -1, -2) + 8 * np.eye(n, dtype=dtype)
    elif assume_a == "her":
        a = a + adjoint(a) + 8 * np.eye(n, dtype=dtype)
    b = right_hand_side(rng, dtype, n, batch, vector)
    t = tol(dtype)
    ranks = [2, 1 if vector else 2]
    expected = per_matrix(
        lambda a, b: sl.solve(a, b, assume_a=assume_a), wide(a), wide(b), core_ranks=ranks
    )
    assert_close(fl.solve(a, b, assume_a=assume_a), expected, dtype, **t)
    assert_close(fl.inv(a), per_matrix(sl.inv, wide(a)), dtype, **t)
    assert_close(
        fl.det(a), per_matrix(sl.det, wide(a)), dtype, rtol=10 * t["rtol"], atol=10 * t["atol"]
    )


# ---------------------------------------------------------------------------------------------
# Decompositions


@given(problems(), st.booleans())
def test_eigh_matches_scipy_and_reads_one_triangle(problem, lower):
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = normal(rng, batch + (n, n), dtype)
    w, v = fl.eigh(a, lower=lower)
    expected_w, expected_v = per_matrix(lambda a: sl.eigh(a, lower=lower), wide(a))
    t = tol(dtype)
    real = np.dtype(dtype).type(0).real.dtype
    assert_close(w, expected_w, real, rtol=10 * t["rtol"], atol=10 * t["atol"])
    assert_close(fl.eigh(a, lower=lower, eigvals_only=True), w)
    # Eigenvectors are unique up to a phase (the drawn spectra are distinct): |v^H v_ref| = I.
    overlap = np.abs(adjoint(np.asarray(v)) @ expected_v)
    assert_close(overlap, np.broadcast_to(np.eye(n), overlap.shape), rtol=0, atol=50 * t["atol"])


@given(problems(max_batch_dims=0), st.sampled_from([1, 2, 3]), st.booleans())
def test_generalized_eigh_matches_scipy(problem, type, lower):
    dtype, n, _, seed = problem
    rng = np.random.default_rng(seed)
    a = normal(rng, (n, n), dtype)
    b = positive_definite(rng, (n, n), dtype)
    w, v = fl.eigh(a, b, lower=lower, type=type)
    expected_w = sl.eigh(wide(a), wide(b), lower=lower, type=type, eigvals_only=True)
    t = tol(dtype)
    real = np.dtype(dtype).type(0).real.dtype
    assert_close(w, expected_w, real, rtol=50 * t["rtol"], atol=50 * t["atol"])
    # SciPy's normalization: v^H b v = I (types 1, 2), v^H inv(b) v = I (type 3).
    v = wide(v)
    gram = adjoint(v) @ (np.linalg.inv(wide(b)) if type == 3 else wide(b)) @ v
    assert_close(gram, np.eye(n), rtol=50 * t["rtol"], atol=50 * t["atol"])


@given(problems(), st.integers(1, 4), st.booleans())
def test_svd_qr_and_polar_match_scipy(problem, columns, full_matrices):
    dtype, m, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = normal(rng, batch + (m, columns), dtype)
    t = tol(dtype)
    real = np.dtype(dtype).type(0).real.dtype
    u, s, vh = fl.svd(a, full_matrices=full_matrices)
    expected = per_matrix(lambda a: sl.svd(a, full_matrices), wide(a))
    assert_close(s, expected[1], real, **t)
    assert np.shape(u) == expected[0].shape and np.shape(vh) == expected[2].shape
    k = min(m, columns)
    product = (wide(u)[..., :, :k] * wide(s)[..., None, :]) @ wide(vh)[..., :k, :]
    assert_close(product, a, rtol=10 * t["rtol"], atol=10 * t["atol"])
    assert_close(fl.svd(a, compute_uv=False), expected[1], real, **t)
    for mode in ("full", "economic", "r"):
        expected_qr = per_matrix(lambda a, mode=mode: tuple(sl.qr(a, mode=mode)), wide(a))
        actual_qr = fl.qr(a, mode=mode)
        assert len(actual_qr) == len(expected_qr)
        for x, y in zip(actual_qr, expected_qr):
            assert_close(x, y, dtype, **t)
    for side in ("right", "left"):
        expected_polar = per_matrix(lambda a, side=side: sl.polar(a, side), wide(a))
        for x, y in zip(fl.polar(a, side), expected_polar):
            assert_close(x, y, dtype, rtol=10 * t["rtol"], atol=10 * t["atol"])


@given(
    problems(max_batch_dims=0),
    st.integers(1, 4),
    st.sampled_from(["left", "right"]),
    st.booleans(),
    st.booleans(),
)
def test_qr_multiply_matches_scipy(problem, columns, mode, conjugate, vector):
    dtype, m, _, seed = problem
    rng = np.random.default_rng(seed)
    a = normal(rng, (m, columns), dtype)
    k = min(m, columns)
    c_shape = {
        ("left", True): (k,),
        ("left", False): (k, 2),
        ("right", True): (m,),
        ("right", False): (2, m),
    }
    c = normal(rng, c_shape[mode, vector], dtype)
    expected = sl.qr_multiply(wide(a), wide(c), mode, conjugate=conjugate)
    for x, y in zip(fl.qr_multiply(a, c, mode, conjugate=conjugate), expected):
        assert_close(x, y, dtype, **tol(dtype))


@given(problems(max_side=5))
def test_hessenberg_matches_scipy(problem):
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "c" and n == 2:
        n = 3  # SciPy returns a 2 x 2 matrix as it is; LAPACK (and funcgrad) make h[1, 0] real
    a = normal(rng, batch + (n, n), dtype)
    expected = per_matrix(lambda a: sl.hessenberg(a, calc_q=True), wide(a))
    h, q = fl.hessenberg(a, calc_q=True)
    t = tol(dtype)
    assert_close(h, expected[0], dtype, rtol=10 * t["rtol"], atol=10 * t["atol"])
    assert_close(q, expected[1], dtype, rtol=10 * t["rtol"], atol=10 * t["atol"])
    assert_close(fl.hessenberg(a), h)


@given(problems(dtypes=fst.float_dtypes, max_side=5), st.booleans())
def test_eigh_tridiagonal_matches_scipy(problem, select_some):
    dtype, n, _, seed = problem
    rng = np.random.default_rng(seed)
    d, e = normal(rng, (n,), dtype), normal(rng, (n - 1,), dtype)
    select = dict(select="i", select_range=(n // 2, n - 1)) if select_some else {}
    w, v = fl.eigh_tridiagonal(d, e, **select)
    expected_w, expected_v = sl.eigh_tridiagonal(wide(d), wide(e), **select)
    t = tol(dtype)
    assert_close(w, expected_w, dtype, rtol=10 * t["rtol"], atol=10 * t["atol"])
    overlap = np.abs(adjoint(np.asarray(v)) @ expected_v)
    assert_close(overlap, np.eye(len(expected_w)), rtol=0, atol=50 * t["atol"])
    assert_close(fl.eigh_tridiagonal(d, e, eigvals_only=True, **select), w)


def test_eigh_tridiagonal_of_a_complex_matrix_matches_the_dense_one():
    # e lies above the diagonal, conj(e) below it, as in JAX.
    rng = np.random.default_rng(0)
    d, e = normal(rng, 4, np.complex128), normal(rng, 3, np.complex128)
    dense = np.diag(d.real) + np.diag(e, 1) + np.diag(np.conj(e), -1)
    w, v = fl.eigh_tridiagonal(d, e)
    assert_close(w, np.linalg.eigvalsh(dense))
    assert_close(dense @ np.asarray(v), np.asarray(v) * np.asarray(w), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The matrix exponential


@given(problems(), st.sampled_from([1e-3, 0.1, 0.5, 1.0, 3.0, 10.0]))
def test_expm_matches_scipy(problem, scale):
    # The scales reach each Padé degree, and past the largest one the squarings.
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = (scale * well_conditioned(rng, batch + (n, n), dtype)).astype(dtype)
    assert_close_to_scale(fl.expm(a), per_matrix(sl.expm, wide(a)), dtype)


@given(problems(), st.sampled_from([0.1, 3.0]))
def test_expm_of_triangular_matrices_and_frechet_match_scipy(problem, scale):
    dtype, n, batch, seed = problem
    rng = np.random.default_rng(seed)
    a = np.triu(scale * triangular_system(rng, batch + (n, n), dtype, lower=False)).astype(dtype)
    expected = per_matrix(sl.expm, wide(a))
    assert_close_to_scale(fl.expm(a, upper_triangular=True), expected, dtype)
    direction = normal(rng, a.shape, dtype)
    expected_expm, expected_frechet = per_matrix(sl.expm_frechet, wide(a), wide(direction))
    actual_expm, actual_frechet = fl.expm_frechet(a, direction)
    assert_close_to_scale(actual_expm, expected_expm, dtype)
    assert_close_to_scale(actual_frechet, expected_frechet, dtype, factor=50)
    assert_close(fl.expm_frechet(a, direction, compute_expm=False), actual_frechet)


def test_expm_past_max_squarings_is_nan():
    a = np.array([[0.0, 40.0], [-40.0, 0.0]])  # 1-norm 40: 3 squarings past theta_13
    assert np.all(np.isnan(np.asarray(fl.expm(a, max_squarings=2))))
    assert_close(fl.expm(a, max_squarings=3), sl.expm(a), rtol=1e-9, atol=1e-9)
    assert_close(fl.expm(np.zeros((0, 0))), np.zeros((0, 0)))


def test_solve_sylvester_eigen_matches_scipy():
    rng = np.random.default_rng(0)
    a, b, c = (
        rng.normal(size=(3, 3)) + 4 * np.eye(3),
        rng.normal(size=(2, 2)) + 4 * np.eye(2),
        rng.normal(size=(3, 2)),
    )
    assert_close(
        fl.solve_sylvester(a, b, c, method="eigen"),
        sl.solve_sylvester(a, b, c),
        rtol=1e-9,
        atol=1e-9,
    )
    # No unique solution where an eigenvalue of a is minus one of b's.
    assert np.all(
        np.isnan(np.asarray(fl.solve_sylvester(np.eye(2), -np.eye(2), c[:2], method="eigen")))
    )
    with pytest.raises(ValueError, match="method must be"):
        fl.solve_sylvester(a, b, c, method="kron")


def _sylvester_problem(rng, m, n, complex_a=False, complex_b=False, complex_c=False):
    def draw(shape, complex_):
        x = rng.normal(size=shape)
        return x + 1j * rng.normal(size=shape) if complex_ else x

    return draw((m, m), complex_a), draw((n, n), complex_b), draw((m, n), complex_c)


def _sylvester_by_kronecker(a, b, c):
    """X from the linear system (I kron A + B^T kron I) vec X = vec C, vec stacking columns."""
    m, n = c.shape
    system = np.kron(np.eye(n), a) + np.kron(b.T, np.eye(m))
    return np.linalg.solve(system, c.reshape(-1, order="F")).reshape((m, n), order="F")


@pytest.mark.parametrize("m, n", [(1, 1), (3, 2), (2, 5), (6, 4)])
@pytest.mark.parametrize("complex_", [False, True])
def test_solve_sylvester_schur_matches_scipy(m, n, complex_):
    a, b, c = _sylvester_problem(np.random.default_rng(m * 10 + n), m, n, *[complex_] * 3)
    x = fl.solve_sylvester(a, b, c)
    assert x.dtype == c.dtype
    assert_close(x, sl.solve_sylvester(a, b, c), rtol=1e-9, atol=1e-9)
    assert_close(a @ np.asarray(x) + np.asarray(x) @ b, c, rtol=1e-9, atol=1e-9)
    # Compiled complex products may round differently from eager ones, so a tolerance.
    assert_close(fg.jit(fl.solve_sylvester)(a, b, c), x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kinds", [(True, False, True), (False, True, False), (True, True, False)])
def test_solve_sylvester_schur_of_mixed_real_and_complex(kinds):
    # SciPy's own answer is wrong where exactly one of a and b is complex (it pairs a complex
    # triangular Schur form with a real quasi-triangular one), so the Kronecker form of the
    # equation is the reference here.
    a, b, c = _sylvester_problem(np.random.default_rng(7), 4, 5, *kinds)
    # One complex input makes all of them complex, and the solution.
    assert_close(
        fl.solve_sylvester(a, b, c),
        _sylvester_by_kronecker(a, b, c),
        dtype=np.complex128,
        rtol=1e-9,
        atol=1e-9,
    )


def test_solve_sylvester_schur_in_single_precision():
    a, b, c = _sylvester_problem(np.random.default_rng(1), 4, 3)
    a, b, c = (
        x.astype(np.float32) + 3 * np.eye(len(x), x.shape[1], dtype=np.float32) for x in (a, b, c)
    )
    x = fl.solve_sylvester(a, b, c)
    assert x.dtype == np.float32
    assert_close(
        x, sl.solve_sylvester(*(v.astype(np.float64) for v in (a, b, c))), rtol=1e-4, atol=1e-4
    )


def test_solve_sylvester_schur_batches_match_a_loop():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(3, 4, 4))
    b = rng.normal(size=(2, 2))
    c = rng.normal(size=(2, 3, 4, 2))  # batch (2, 3) broadcast against a's (3,)
    x = np.asarray(fl.solve_sylvester(a, b, c))
    for i, j in np.ndindex(2, 3):
        assert_close(x[i, j], sl.solve_sylvester(a[j], b, c[i, j]), rtol=1e-9, atol=1e-9)
    check_batching(fl.solve_sylvester, [a, b, c[0]], in_axes=[0, None, 0], rtol=1e-9, atol=1e-9)


def test_solve_sylvester_schur_edge_cases_and_no_derivative():
    # No unique solution where an eigenvalue of a is minus one of b's: NaN.
    assert np.all(np.isnan(np.asarray(fl.solve_sylvester(np.eye(2), -np.eye(2), np.ones((2, 2))))))
    # A defective a (one Jordan block), where eigenvectors cannot serve.
    a, b, c = np.array([[2.0, 1.0], [0.0, 2.0]]), np.array([[1.0]]), np.array([[1.0], [2.0]])
    assert_close(fl.solve_sylvester(a, b, c), sl.solve_sylvester(a, b, c), rtol=1e-12, atol=1e-12)
    assert fl.solve_sylvester(np.zeros((0, 0)), np.eye(2), np.zeros((0, 2))).shape == (0, 2)
    assert fl.solve_sylvester(np.eye(2), np.zeros((0, 0)), np.zeros((2, 0))).shape == (2, 0)
    with pytest.raises(NotImplementedError, match="schur"):
        fg.grad(lambda a: fl.solve_sylvester(a, np.eye(1), np.ones((2, 1))).sum())(np.eye(2) * 2)


# ---------------------------------------------------------------------------------------------
# Structured and named matrices


@st.composite
def vectors(draw, min_size: int = 1):
    dtype = draw(st.sampled_from([np.int32, np.float32, np.float64, np.complex128]))
    size = draw(st.integers(min_size, 5))
    return draw(fst.arrays(dtype, (size,), min_value=-5, max_value=5))


@given(vectors(), vectors())
def test_vector_built_matrices_match_scipy(c, r):
    assert_close(fl.toeplitz(c), sl.toeplitz(c))
    assert_close(fl.toeplitz(c, r), sl.toeplitz(c, r))
    assert_close(fl.hankel(c), sl.hankel(c))
    assert_close(fl.hankel(c, r), sl.hankel(c, r))
    assert_close(fl.circulant(c), sl.circulant(c))
    assert_close(fl.fiedler(c), sl.fiedler(c))
    for n in (1, 3):
        for mode in ("full", "same", "valid"):
            assert_close(fl.convolution_matrix(c, n, mode), sl.convolution_matrix(c, n, mode))


@given(vectors(min_size=2))
def test_polynomial_and_population_matrices_match_scipy(a):
    a = a.astype(np.float64 if a.dtype.kind != "c" else a.dtype)
    a[0] = 1.5  # a leading coefficient away from 0
    assert_close(fl.companion(a), sl.companion(a), rtol=1e-12, atol=1e-12)
    expected = sl.fiedler_companion(a).reshape(len(a) - 1, len(a) - 1)
    assert_close(fl.fiedler_companion(a), expected, rtol=1e-12, atol=1e-12)
    assert_close(fl.leslie(a, a[1:]), sl.leslie(a, a[1:]))


def test_vector_built_matrices_batch_their_leading_axes():
    rng = np.random.default_rng(0)
    c, r = rng.normal(size=(2, 3, 4)), rng.normal(size=(3, 5))
    lanes = np.ndindex(2, 3)
    assert_close(
        fl.toeplitz(c, r), np.stack([sl.toeplitz(c[i], r[i[1]]) for i in lanes]).reshape(2, 3, 4, 5)
    )
    assert_close(
        fl.hankel(c, r),
        np.stack([sl.hankel(c[i], r[i[1]]) for i in np.ndindex(2, 3)]).reshape(2, 3, 4, 5),
    )
    assert_close(fl.circulant(c)[1, 2], sl.circulant(c[1, 2]))
    assert_close(fl.companion(c)[1, 0], sl.companion(c[1, 0]))
    assert_close(
        fl.convolution_matrix(c, 3, "same")[0, 1], sl.convolution_matrix(c[0, 1], 3, "same")
    )
    assert_close(fl.leslie(c, r[:, :3])[1, 2], sl.leslie(c[1, 2], r[2, :3]))


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_named_matrices_match_scipy(n):
    f32 = dict(rtol=1e-6, atol=0)
    assert_close(fl.hilbert(n), sl.hilbert(n), np.float32, **f32)
    assert_close(fl.invhilbert(n), sl.invhilbert(n), np.float32, **f32)
    for kind in (None, "lower", "upper"):
        assert_close(fl.pascal(n, kind), sl.pascal(n, kind or "symmetric"), np.float32)
        assert_close(fl.invpascal(n, kind), sl.invpascal(n, kind or "symmetric"), np.float32)
    for full in (False, True):
        assert_close(fl.helmert(n, full), sl.helmert(n, full), np.float32, **f32)
    for scale in (None, "sqrtn", "n"):
        assert_close(fl.dft(n, scale), sl.dft(n, scale), np.complex64, rtol=1e-6, atol=1e-6)
    assert_close(fl.dft(n, dtype=np.complex128), sl.dft(n), np.complex128, rtol=1e-14, atol=1e-14)
    assert_close(fl.hadamard(2 ** (n - 1)), sl.hadamard(2 ** (n - 1)), np.int32)
    assert_close(fl.hadamard(4, np.float32), sl.hadamard(4), np.float32)


def test_block_diag_matches_scipy():
    blocks = [
        np.float32(2),
        np.arange(3, dtype=np.int32),
        np.ones((2, 2), np.float32),
        np.zeros((0, 2)),
    ]
    assert_close(fl.block_diag(*blocks), sl.block_diag(*blocks))
    assert_close(fl.block_diag(np.ones((2, 3), np.int32)), np.ones((2, 3)), np.int32)
    assert fl.block_diag().shape == (1, 0)


# ---------------------------------------------------------------------------------------------
# Derivatives against central finite differences (float64; complex where a solve conjugates)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _derivative_cases():
    r = _rng()
    a = well_conditioned(r, (2, 3, 3), np.float64)
    b = r.normal(size=(2, 3, 2))
    upper = triangular_system(r, (2, 3, 3), np.float64, lower=False)
    spd = positive_definite(r, (3, 3), np.float64)
    ac = well_conditioned(r, (3, 3), np.complex128)
    bc = normal(r, (3, 2), np.complex128)
    upper_c = triangular_system(r, (3, 3), np.complex128, lower=False)
    cases = [
        ("solve_triangular", lambda a, b: fl.solve_triangular(a, b), (upper, b), 2),
        (
            "solve_triangular T unit",
            lambda a, b: fl.solve_triangular(a, b, "T", unit_diagonal=True),
            (upper, b),
            2,
        ),
        (
            "solve_triangular C complex",
            lambda a, b: fl.solve_triangular(a, b, "C"),
            (upper_c, bc),
            1,
        ),
        ("cho_solve", lambda c, b: fl.cho_solve((c, True), b), (np.linalg.cholesky(spd), b[0]), 2),
        ("solve", fl.solve, (a, b), 2),
        ("solve pos", lambda a, b: fl.solve(a, b, assume_a="pos"), (spd, b[0]), 2),
        ("inv", fl.inv, (a,), 2),
        ("det", fl.det, (a,), 2),
        ("lu_solve", lambda a, b: fl.lu_solve(fl.lu_factor(a), b), (a, b), 1),
        ("lu_solve C complex", lambda a, b: fl.lu_solve(fl.lu_factor(a), b, trans=2), (ac, bc), 1),
        ("expm", fl.expm, (0.5 * a,), 2),
        # A 1-norm of at least 10 / sqrt(3), past theta_13 = 5.37: at least one squaring.
        ("expm with squarings", fl.expm, (10.0 * a[0],), 1),
        ("expm upper_triangular", lambda a: fl.expm(a, upper_triangular=True), (np.triu(a[0]),), 1),
        ("expm complex", fl.expm, (ac,), 1),
        (
            "expm_frechet",
            lambda a, e: fl.expm_frechet(a, e, compute_expm=False),
            (a[0], b[0] @ b[1].T),
            1,
        ),
        ("cholesky", fl.cholesky, (spd,), 1),
        ("eigh eigenvalues", lambda a: fl.eigh(a, eigvals_only=True), (a[0],), 1),
        (
            "generalized eigh eigenvalues",
            lambda a, b: fl.eigh(a, b, eigvals_only=True),
            (a[0], spd),
            1,
        ),
        ("polar", fl.polar, (a[0],), 1),
        ("hessenberg", lambda a: fl.hessenberg(a, calc_q=True), (a[0],), 1),
        (
            "eigh_tridiagonal",
            lambda d, e: fl.eigh_tridiagonal(d, e, eigvals_only=True),
            (r.normal(size=4), r.normal(size=3)),
            1,
        ),
        ("toeplitz", fl.toeplitz, (r.normal(size=3), r.normal(size=4)), 1),
    ]
    return [pytest.param(*case, id=name) for name, *case in cases]


@pytest.mark.parametrize("fun, args, order", _derivative_cases())
def test_derivatives_match_finite_differences(fun, args, order):
    check_grads(fun, args, order, **GRAD_TOL)


# ---------------------------------------------------------------------------------------------
# jit against eager, vmap against a loop


def _transform_cases():
    r = _rng(1)
    a = well_conditioned(r, (3, 3, 3), np.float64) * np.array([0.01, 1.0, 10.0])[:, None, None]
    b = r.normal(size=(3, 3, 2))
    b_lanes_last = r.normal(size=(3, 2, 3))
    upper = triangular_system(r, (3, 3, 3), np.float64, lower=False)
    spd = positive_definite(r, (3, 3, 3), np.float64)
    cases = [
        # Each lane of expm takes another Padé degree, and the last squarings.
        ("expm", fl.expm, [a], (0,)),
        (
            "lu_solve, b unbatched",
            lambda a, b: fl.lu_solve(fl.lu_factor(a), b, 1),
            [a, b[0]],
            (0, None),
        ),
        (
            "solve_triangular",
            lambda a, b: fl.solve_triangular(a, b, 2, lower=False),
            [upper, b_lanes_last],
            (0, 2),
        ),
        ("cho_solve", lambda a, b: fl.cho_solve(fl.cho_factor(a), b), [spd, b], (0, 0)),
        ("hessenberg", lambda a: fl.hessenberg(a, calc_q=True), [a], (0,)),
        ("lu", fl.lu, [a], (0,)),
        ("toeplitz", fl.toeplitz, [r.normal(size=(3, 4)), r.normal(size=(5, 3))], (0, 1)),
    ]
    return [pytest.param(*case, id=name) for name, *case in cases]


@pytest.mark.parametrize("fun, args, in_axes", _transform_cases())
def test_vmap_matches_a_loop_and_jit_matches_eager(fun, args, in_axes):
    check_batching(fun, args, in_axes, rtol=1e-10, atol=1e-10)
    # The last lane: expm's squarings.
    lane = [x if axis is None else np.take(x, -1, axis=axis) for x, axis in zip(args, in_axes)]
    check_staging(fun, *lane)


def test_grad_of_vmap_of_expm_matches_a_loop_of_grads():
    a = well_conditioned(_rng(2), (3, 3, 3), np.float64) * np.array([0.01, 1.0, 3.0])[:, None, None]
    gradient = fg.grad(lambda a: fg.vmap(fl.expm)(a).sum())(a)
    lanes = [fg.grad(lambda a: fl.expm(a).sum())(lane) for lane in a]
    assert_close(gradient, np.stack([np.asarray(g) for g in lanes]), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    "name, call",
    [
        ("solve_triangular", lambda x: fl.solve_triangular(x, np.ones(3))),
        ("cholesky", fl.cholesky),
        ("cho_solve", lambda x: fl.cho_solve((x, False), np.ones(3))),
        ("lu_solve", lambda x: fl.lu_solve((x, np.zeros(2, np.int32)), np.ones(2))),
        ("solve", lambda x: fl.solve(x, np.ones(2), assume_a="pos")),
        ("solve", lambda x: fl.solve(x, np.ones(2))),
        ("inv", fl.inv),
        ("det", fl.det),
        ("eigh", fl.eigh),
        ("expm", fl.expm),
        ("hessenberg", fl.hessenberg),
    ],
)
def test_non_square_matrices_are_refused_with_their_shape(name, call):
    with pytest.raises(ValueError, match=rf"{name}: needs square matrices.*\(2, 3\)"):
        call(np.ones((2, 3)))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=r"b of shape \(2,\) does not fit a of shape \(3, 3\)"):
        fl.solve_triangular(np.eye(3), np.ones(2))
    with pytest.raises(ValueError, match=r"b of shape \(4, 1\) does not fit a of shape \(3, 3\)"):
        fl.lu_solve(fl.lu_factor(np.eye(3)), np.ones((4, 1)))
    with pytest.raises(ValueError, match="trans must be"):
        fl.solve_triangular(np.eye(2), np.ones(2), trans="X")
    with pytest.raises(ValueError, match="assume_a"):
        fl.solve(np.eye(2), np.ones(2), assume_a="banded")
    with pytest.raises(ValueError, match="mode"):
        fl.qr(np.eye(2), mode="raw")
    with pytest.raises(ValueError, match="power of 2"):
        fl.hadamard(6)
    with pytest.raises(NotImplementedError, match="select='v'"):
        fl.eigh_tridiagonal(np.ones(3), np.ones(2), select="v", select_range=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"shapes \(3,\) and \(3,\)"):
        fl.eigh_tridiagonal(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match=r"at most 2 dimensions, got shape \(1, 1, 1\)"):
        fl.block_diag(np.ones(2), np.ones((1, 1, 1)))
    with pytest.raises(ValueError, match=r"A and E must have one shape"):
        fl.expm_frechet(np.eye(2), np.eye(3))
    with pytest.raises(ValueError, match=r"cho_solve: the batch shapes \(2,\), \(3,\)"):
        fl.cho_solve((np.ones((2, 3, 3)), True), np.ones((3, 3, 1)))
    with pytest.raises(ValueError, match=r"toeplitz: the batch shapes \(2,\), \(3,\)"):
        fl.toeplitz(np.ones((2, 4)), np.ones((3, 4)))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5), (2, 5, 3)])
def test_qr_with_column_pivoting_orders_columns_as_lapack(dtype, shape):
    """x[..., p] = q r with |diag r| non-increasing, p as SciPy's geqp3 gives it, eagerly,
    compiled and under vmap; with mode 'r' and in qr_multiply the order comes last."""
    rng = np.random.default_rng(31)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    a = a.astype(dtype)
    tolerance = 1e-4 if dtype == np.float32 else 1e-12
    for qr in (fl.qr, fg.jit(lambda m: fl.qr(m, pivoting=True, mode="economic"))):
        q, r, p = (np.asarray(x) for x in (fl.qr(a, pivoting=True) if qr is fl.qr else qr(a)))
        assert p.dtype == np.int32 and p.shape == (*shape[:-2], shape[-1])
        for k in np.ndindex(*shape[:-2]):
            expected = sl.qr(a[k].astype(np.complex128 if a.dtype.kind == "c" else np.float64),
                             pivoting=True)[2]  # fmt: skip
            np.testing.assert_array_equal(p[k], expected)
            np.testing.assert_allclose(q[k] @ r[k], a[k][:, p[k]], atol=tolerance * 10)
            diagonal = np.abs(np.diagonal(r[k]))
            assert (diagonal[1:] <= diagonal[:-1] * (1 + tolerance)).all()
    batched = fg.vmap(lambda m: fl.qr(m, pivoting=True)[2])(np.stack([a, a[..., ::-1]]))
    np.testing.assert_array_equal(batched[0], fl.qr(a, pivoting=True)[2])
    np.testing.assert_array_equal(batched[1], fl.qr(a[..., ::-1], pivoting=True)[2])
    r_only, p_only = fl.qr(a, mode="r", pivoting=True)
    np.testing.assert_array_equal(p_only, fl.qr(a, pivoting=True)[2])
    if len(shape) == 2:
        c = np.ones((min(shape), 2), dtype)
        product, _, order = fl.qr_multiply(a, c, mode="left", pivoting=True)
        q, _, _ = fl.qr(a, pivoting=True, mode="economic")
        np.testing.assert_allclose(product, np.asarray(q) @ c, atol=tolerance)
        np.testing.assert_array_equal(order, p_only)


def test_pivoted_qr_derivatives_hold_the_order_fixed():
    """The derivative of q and r is that of the unpivoted decomposition of x[:, p], p fixed:
    against central differences in float64 (p does not change for small steps)."""
    a = np.random.default_rng(32).standard_normal((5, 4))
    order = np.asarray(fl.qr(a, pivoting=True)[2])
    check_grads(lambda m: fl.qr(m, pivoting=True)[:2], (a,), order=1, modes=("fwd", "rev"))
    _, tangent = fg.jvp(lambda m: fl.qr(m, pivoting=True)[1], (a,), (np.eye(5, 4),))
    _, expected = fg.jvp(lambda m: fl.qr(m[:, order])[1], (a,), (np.eye(5, 4),))
    np.testing.assert_allclose(tangent, expected, rtol=1e-12)
