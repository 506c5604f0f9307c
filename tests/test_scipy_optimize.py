"""funcgrad.scipy.optimize: minimize's solutions against closed-form minimizers and
scipy.optimize.minimize's x (not its iteration counts, which depend on the line search), the
line search against the strong Wolfe conditions it promises, jit against eager, vmap over
starting points against a loop, and the errors that name a bad argument."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize as so

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.scipy.optimize import OptimizeResults, line_search, minimize

METHODS = ["BFGS", "l-bfgs-experimental-do-not-rely-on-this"]
RNG = np.random.default_rng(3)
_Q = RNG.standard_normal((5, 5))
HESSIAN = _Q @ _Q.T + np.eye(5)
LINEAR = RNG.standard_normal(5)


def rosenbrock(x):
    return fnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def quadratic(x, hessian, linear):
    return 0.5 * x @ hessian @ x - linear @ x


@pytest.mark.parametrize("method", METHODS)
def test_rosenbrock_reaches_its_minimum_like_scipy(method):
    x0 = np.array([-1.2, 1.0, 0.5, -0.3])
    result = minimize(rosenbrock, x0, method=method)
    assert isinstance(result, OptimizeResults)
    reference = so.minimize(so.rosen, x0, jac=so.rosen_der, method="BFGS", tol=1e-10)
    np.testing.assert_allclose(result.x, reference.x, atol=1e-5)
    np.testing.assert_allclose(result.x, np.ones(4), atol=1e-5)
    np.testing.assert_allclose(result.fun, rosenbrock(result.x), rtol=1e-12)
    np.testing.assert_allclose(result.jac, fg.grad(rosenbrock)(result.x), rtol=1e-12)
    assert int(result.nit) > 0 and int(result.nfev) >= int(result.nit)
    assert int(result.njev) == int(result.nfev)


def test_bfgs_reports_success_and_an_inverse_hessian():
    result = minimize(quadratic, np.zeros(5), (HESSIAN, LINEAR), method="BFGS", tol=1e-9)
    assert bool(result.success) and int(result.status) == 0
    np.testing.assert_allclose(result.x, np.linalg.solve(HESSIAN, LINEAR), atol=1e-9)
    assert np.abs(np.asarray(result.jac)).max() < 1e-9
    # The inverse Hessian estimate stays symmetric positive definite, near the true one.
    hess_inv = np.asarray(result.hess_inv)
    np.testing.assert_allclose(hess_inv, hess_inv.T, atol=1e-12)
    assert np.linalg.eigvalsh(hess_inv).min() > 0
    np.testing.assert_allclose(hess_inv, np.linalg.inv(HESSIAN), atol=1e-2)


def test_lbfgs_on_a_quadratic_and_its_missing_hessian():
    result = minimize(
        quadratic,
        np.zeros(5),
        (HESSIAN, LINEAR),
        method="l-bfgs-experimental-do-not-rely-on-this",
        options={"gtol": 1e-9, "ftol": 0.0},
    )
    assert bool(result.success) and result.hess_inv is None
    np.testing.assert_allclose(result.x, np.linalg.solve(HESSIAN, LINEAR), atol=1e-8)


@pytest.mark.parametrize("method", METHODS)
def test_float32_problems_stay_float32(method):
    result = minimize(quadratic, np.zeros(5, np.float32), (HESSIAN, LINEAR), method=method)
    # The search runs in x0's dtype even where the objective computes in a wider one.
    assert result.x.dtype == np.float32 and result.fun.dtype == np.float32
    np.testing.assert_allclose(result.x, np.linalg.solve(HESSIAN, LINEAR), atol=1e-4)
    # A minimum value of 0 leaves float32 the resolution to see the last steps' decrease.
    result = minimize(
        lambda x: fnp.sum((x - 2) ** 2 * (1 + x**2)), np.ones(3, np.float32), method=method
    )
    assert result.x.dtype == np.float32 and bool(result.success)
    reference = so.minimize(lambda x: np.sum((x - 2) ** 2 * (1 + x**2)), np.ones(3)).x
    np.testing.assert_allclose(result.x, reference, atol=1e-4)


@pytest.mark.parametrize(
    "method, x0, tol",
    [
        ("l-bfgs-experimental-do-not-rely-on-this", [-1.2, 1.0, -1.2, 1.0], None),
        ("l-bfgs-experimental-do-not-rely-on-this", [0.0, 0.0, 0.0, 0.0, 0.0], None),
        ("BFGS", [-1.2, 1.0, -1.2, 1.0, -1.2, 1.0], None),
        ("BFGS", [0.5, -0.5, 1.5], 1e-8),
    ],
)
def test_float32_searches_that_stop_at_the_minimum_succeed(method, x0, tol):
    """float32's Rosenbrock has gradients of 1e-4 at its minimum to float32's precision (the
    rounding of 400 x (x² - y)): below the default gtol of 1e-5 they never get, and the
    searches stopped by ftol or a failed line search with success False, at (1, ..., 1) to
    3e-6. Now a stop where the gradient is within sqrt(eps) max(|f|, 1) succeeds."""
    result = minimize(rosenbrock, np.array(x0, np.float32), method=method, tol=tol)
    np.testing.assert_allclose(np.asarray(result.x), np.ones(len(x0)), atol=1e-4)
    assert bool(result.success) and int(result.status) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", METHODS)
def test_a_search_stuck_at_a_kink_still_fails(method, dtype):
    # The line search cannot pass the kink of |x - 0.3|, where the gradient stays 100.
    result = minimize(lambda x: 100 * fnp.sum(fnp.abs(x - 0.3)), np.zeros(2, dtype), method=method)
    assert not bool(result.success) and int(result.status) != 0


@pytest.mark.parametrize("method", METHODS)
def test_an_unbounded_objective_fails(method):
    # -sum(x) has gradient (-1, -1) everywhere and no minimum. L-BFGS's line search gave out
    # at f = -1e6, where sqrt(eps) |f| = 345 took in the gradient: success with status 0.
    result = minimize(lambda x: -fnp.sum(x), np.array([1.0, 2.0], np.float32), method=method)
    assert not bool(result.success) and int(result.status) != 0
    np.testing.assert_array_equal(result.jac, [-1.0, -1.0])


@pytest.mark.parametrize("method", METHODS)
def test_maxiter_option(method):
    result = minimize(rosenbrock, np.array([-1.2, 1.0]), method=method, options={"maxiter": 3})
    assert int(result.nit) == 3 and int(result.status) == 1 and not bool(result.success)


@pytest.mark.parametrize("method", METHODS)
def test_jit_matches_eager(method):
    def solve(x0, linear):
        return minimize(quadratic, x0, (HESSIAN, linear), method=method).x

    x0 = np.full(5, 0.5)
    np.testing.assert_allclose(fg.jit(solve)(x0, LINEAR), solve(x0, LINEAR), atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_vmap_over_starting_points_matches_a_loop(method):
    starts = np.array([[-1.2, 1.0], [2.0, 2.0], [0.0, 0.0]])

    def solve(x0):
        return minimize(rosenbrock, x0, method=method).x

    batched = fg.vmap(solve)(starts)
    np.testing.assert_allclose(batched, np.stack([solve(x0) for x0 in starts]), atol=1e-12)
    np.testing.assert_allclose(batched, np.ones((3, 2)), atol=1e-5)


def test_line_search_meets_the_strong_wolfe_conditions():
    x = np.array([-1.2, 1.0])
    gradient = np.asarray(fg.grad(rosenbrock)(x))
    direction = -gradient
    c1, c2 = 1e-4, 0.9
    result = line_search(rosenbrock, x, direction, c1=c1, c2=c2)
    assert not bool(result.failed) and int(result.status) == 0
    step = float(result.a_k)
    slope0 = gradient @ direction
    new_value = rosenbrock(x + step * direction)
    assert step > 0
    assert new_value <= rosenbrock(x) + c1 * step * slope0
    assert abs(np.asarray(fg.grad(rosenbrock)(x + step * direction)) @ direction) <= -c2 * slope0
    np.testing.assert_allclose(result.f_k, new_value, rtol=1e-12)
    np.testing.assert_allclose(result.g_k, fg.grad(rosenbrock)(x + step * direction))
    # scipy's line search finds a step meeting the same conditions, possibly another one.
    assert so.line_search(so.rosen, so.rosen_der, x, direction, c1=c1, c2=c2)[0] is not None


def test_line_search_reports_failure_along_an_ascent_direction():
    x = np.array([-1.2, 1.0])
    result = line_search(rosenbrock, x, fg.grad(rosenbrock)(x))
    assert bool(result.failed)
    assert float(result.f_k) <= float(rosenbrock(x))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="method"):
        minimize(rosenbrock, np.zeros(2), method="Nelder-Mead")
    with pytest.raises(TypeError, match="args must be a tuple"):
        minimize(quadratic, np.zeros(5), [HESSIAN, LINEAR], method="BFGS")
    with pytest.raises(ValueError, match="x0 must be a vector"):
        minimize(rosenbrock, np.zeros((2, 2)), method="BFGS")
    with pytest.raises(TypeError, match="unknown options"):
        minimize(rosenbrock, np.zeros(2), method="BFGS", options={"maxcor": 3})


def test_namespace():
    assert {"minimize", "OptimizeResults", "line_search"} <= set(fg.scipy.optimize.__all__)
    assert "optimize" in fg.scipy.__all__
