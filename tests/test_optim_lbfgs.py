"""funcgrad.optim's zoom line search against the strong Wolfe conditions it promises (checked
on the objective written again in NumPy float64, slopes by central differences), its bounded
number of evaluations and its failures; lbfgs against closed-form minimizers and
scipy.optimize.minimize(method='L-BFGS-B')'s x, under jit, with pytrees of parameters."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.optimize as so
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import debug, lax, optim

SLOPE_RTOL, CURV_RTOL = 1e-4, 0.9


def quadratic(x, xp=fnp):
    hessian = xp.asarray([[3.0, 1.0], [1.0, 2.0]])
    return 0.5 * x @ hessian @ x - xp.asarray([1.0, -1.0]) @ x


def rosenbrock(x, xp=fnp):
    return xp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def steep(x, xp=fnp):
    """Its minimizer along -grad lies at step 0.01: the first trial, 1, is far too long."""
    return 50.0 * xp.sum(x**2)


def flat(x, xp=fnp):
    """Its minimizer along -grad lies at step 1000: the first trial is far too short."""
    return 0.0005 * xp.sum(x**2)


def exp_linear(x, xp=fnp):
    return xp.sum(xp.exp(x) - 2.0 * x)


def sqrt_well(x, xp=fnp):
    """Not finite beyond x = 4 (NaN), minimal at 3."""
    return xp.sum(-x - 2.0 * xp.sqrt(4.0 - x))


def cliff(x, xp=fnp):
    """Along +1 from 0 it falls steadily, then rises steeply past 1.9: the trial 2 has
    turned upwards below the value at 1, so the bracket starts reversed ([2, 1]), and a
    zoom trial short of the acceptable steps must flip it."""
    return xp.sum(-x + xp.exp(20.0 * (x - 2.05)))


CASES = [
    # (objective, start, direction as a multiple of -grad)
    (quadratic, [1.0, -1.0], 1.0),
    (rosenbrock, [-1.2, 1.0], 1.0),
    (steep, [1.0, -2.0], 1.0),
    (flat, [1.0, -2.0], 1.0),
    (exp_linear, [2.0, -1.0], 1.0),
    (sqrt_well, [0.0, 1.0], 20.0),
    (cliff, [0.0], 1.0),
]


@functools.cache
def _searcher(f, options):
    linesearch = optim.scale_by_zoom_linesearch(**dict(options))

    @fg.jit
    def run(x, direction, fn_kwargs):
        value, grad = fg.value_and_grad(f)(x, **fn_kwargs)
        state = linesearch.init(x)
        return linesearch.update(
            direction, state, x, value=value, grad=grad, value_fn=f, **fn_kwargs
        )

    return run


def search(f, x, direction, fn_kwargs=None, **options):
    """One jitted zoom line search from x along direction; fn_kwargs go to f."""
    options = tuple(sorted({"max_linesearch_steps": 30, **options}.items()))
    return _searcher(f, options)(fnp.asarray(x), fnp.asarray(direction), fn_kwargs or {})


def line(f, x, direction):
    """phi(eta) = f(x + eta d) in NumPy float64, and its slope by central differences."""
    x, direction = np.asarray(x, np.float64), np.asarray(direction, np.float64)

    def phi(eta):
        return float(f(x + eta * direction, np))

    def slope(eta):
        h = 1e-6 * max(1.0, abs(eta))
        return (phi(eta + h) - phi(eta - h)) / (2 * h)

    return phi, slope


def assert_strong_wolfe(f, x, direction, eta):
    phi, slope = line(f, x, direction)
    assert eta > 0
    assert phi(eta) <= phi(0.0) + SLOPE_RTOL * eta * slope(0.0) + 1e-12 * abs(phi(0.0))
    assert abs(slope(eta)) <= CURV_RTOL * abs(slope(0.0)) * (1 + 1e-6)


@pytest.mark.parametrize("f, start, scale", CASES, ids=[case[0].__name__ for case in CASES])
def test_the_step_taken_meets_the_strong_wolfe_conditions(f, start, scale):
    x = np.asarray(start, np.float64)
    direction = -scale * np.asarray(fg.grad(f)(fnp.asarray(x)))
    updates, state = search(f, x, direction)
    eta = float(state.learning_rate)
    assert_strong_wolfe(f, x, direction, eta)
    np.testing.assert_allclose(np.asarray(updates), eta * direction, rtol=1e-12)
    info = state.info
    assert float(info.decrease_error) == 0 and float(info.curvature_error) == 0
    # The state holds f and its gradient at the accepted point, for value_and_grad_from_state.
    accepted = x + eta * direction
    np.testing.assert_allclose(
        float(state.value), f(accepted, np), rtol=1e-12, atol=1e-12 * abs(f(x, np))
    )
    np.testing.assert_allclose(
        np.asarray(state.grad),
        np.asarray(fg.grad(f)(fnp.asarray(accepted))),
        rtol=1e-12,
        atol=1e-12 * np.abs(direction).max(),
    )
    if f in (rosenbrock, steep, sqrt_well):
        # The first trial went too far: the search zoomed into [0, 1].
        assert eta < 1 and int(info.num_linesearch_steps) > 1
    if f is flat:
        # The first trial was too short: the search grew it (doubling) before zooming.
        assert eta > 64 and int(info.num_linesearch_steps) > 7


def shifted_quadratic(x, hessian, shift, xp=fnp):
    d = x - shift
    return 0.5 * d @ hessian @ d


@settings(deadline=None, max_examples=20)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-3, 1.0, 30.0]),
    st.sampled_from([1e-6, None]),
)
def test_strong_wolfe_on_random_quadratics_and_directions(seed, scale, approx_dec_rtol):
    """Descent directions -P g (P random positive definite, scaled) put the first trial both
    short of and beyond the acceptable steps; the objective's data comes as value_fn's
    keyword arguments."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((4, 4))
    hessian = a @ a.T + 0.1 * np.eye(4)
    p = rng.standard_normal((4, 4))
    precondition = scale * (p @ p.T + 0.1 * np.eye(4))
    x, shift = rng.standard_normal(4), rng.standard_normal(4)
    direction = -precondition @ hessian @ (x - shift)
    data = {"hessian": fnp.asarray(hessian), "shift": fnp.asarray(shift)}
    _, state = search(shifted_quadratic, x, direction, data, approx_dec_rtol=approx_dec_rtol)
    assert_strong_wolfe(
        lambda z, xp: shifted_quadratic(z, hessian, shift, xp),
        x,
        direction,
        float(state.learning_rate),
    )


def test_the_approximate_condition_accepts_a_step_within_round_off_of_f():
    """phi(eta) = 1000 - eta + 2.5015 eta**2 - 1.501 eta**3 has phi(1) = 1000.0005 > phi(0),
    so 1 fails sufficient decrease, but phi(1) is within 1e-6 |phi(0)| of phi(0) and
    phi'(1) = -0.5 meets the approximate condition and small curvature."""

    def f(x, xp=fnp):
        return xp.sum(1000.0 - x + 2.5015 * x**2 - 1.501 * x**3)

    x, direction = np.zeros(1), np.ones(1)
    _, state = search(f, x, direction)
    assert float(state.learning_rate) == 1.0 and int(state.info.num_linesearch_steps) == 1
    _, state = search(f, x, direction, approx_dec_rtol=None)
    assert float(state.learning_rate) < 1.0 and int(state.info.num_linesearch_steps) > 1
    assert_strong_wolfe(f, x, direction, float(state.learning_rate))


def counting(f):
    """f, and the list that grows by one each time a compiled program evaluates it."""
    calls = []

    def counted(x):
        debug.callback(lambda _: calls.append(1), x)
        return f(x)

    return counted, calls


def test_on_a_quadratic_the_zoom_lands_on_the_minimizer_along_the_line():
    """The cubic through the bracket's values and slopes is the quadratic itself, so the
    first zoom trial is the exact minimizer, 0.4 here, and is accepted."""

    def f(x, xp=fnp):
        return 1.25 * xp.sum(x**2)

    x = np.array([1.0, -2.0])
    _, state = search(f, x, -2.5 * x)
    np.testing.assert_allclose(float(state.learning_rate), 0.4, rtol=1e-12)
    assert int(state.info.num_linesearch_steps) == 2


@pytest.mark.parametrize("max_steps", [1, 4, 15])
def test_evaluations_are_bounded_by_max_linesearch_steps(max_steps):
    f, calls = counting(flat)
    x = np.array([1.0, -2.0])
    direction = -np.asarray(fg.grad(flat)(fnp.asarray(x)))
    _, state = search(f, x, direction, max_linesearch_steps=max_steps)
    evaluations = len(calls) - 1  # the first is f at x
    assert evaluations == int(state.info.num_linesearch_steps)
    # Growing from 1 by doubling needs 8 trials to reach a step with small curvature.
    assert evaluations == min(max_steps, 8)
    if max_steps < 8:
        eta = float(state.learning_rate)
        assert eta == 2.0 ** (max_steps - 1)  # the last trial, which decreases f enough
        assert float(state.info.decrease_error) == 0 and float(state.info.curvature_error) > 0


def test_max_learning_rate_caps_the_growing_steps():
    x = np.array([1.0, -2.0])
    direction = -np.asarray(fg.grad(flat)(fnp.asarray(x)))
    _, state = search(flat, x, direction, max_learning_rate=4.0)
    assert float(state.learning_rate) == 4.0 and int(state.info.num_linesearch_steps) == 3
    assert float(state.info.decrease_error) == 0 and float(state.info.curvature_error) > 0


def test_a_non_descent_direction_fails_clearly_without_nan(capsys):
    f, calls = counting(quadratic)
    x = np.array([1.0, -1.0])
    uphill = np.asarray(fg.grad(quadratic)(fnp.asarray(x)))
    updates, state = search(f, x, uphill, max_linesearch_steps=12, verbose=True)
    assert len(calls) - 1 == int(state.info.num_linesearch_steps) == 12
    leaves = [updates, state.learning_rate, state.value, state.grad, *state.info]
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in leaves)
    assert 0 < float(state.info.decrease_error) < np.inf
    # The step taken is the last, tiny, trial: f rises by at most that little.
    phi, _ = line(quadratic, x, uphill)
    assert float(state.learning_rate) < 1e-3
    np.testing.assert_allclose(float(state.value), phi(float(state.learning_rate)), rtol=1e-12)
    assert "not a descent direction" in capsys.readouterr().out


def test_no_step_where_f_is_not_finite_at_any_trial():
    # sqrt_well is NaN beyond x = 4: from 2.9 along 1000 times -grad (46.5 per unit step),
    # the trials 1, 1/2, ..., 1/16 all overshoot.
    x = np.array([2.9])
    grad = np.asarray(fg.grad(sqrt_well)(fnp.asarray(x)))
    updates, state = search(sqrt_well, x, -1000 * grad, max_linesearch_steps=5)
    assert float(state.learning_rate) == 0 and np.all(np.asarray(updates) == 0)
    assert float(state.info.decrease_error) == np.inf
    np.testing.assert_allclose(float(state.value), sqrt_well(x, np), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(state.grad), grad, rtol=1e-12)
    # With more trials the search comes back inside and finds a step.
    _, state = search(sqrt_well, x, -1000 * grad, max_linesearch_steps=30)
    assert_strong_wolfe(sqrt_well, x, -1000 * grad, float(state.learning_rate))


def test_keep_starts_from_the_last_step_taken():
    """On steep, the step with small curvature along -grad is the same from every point, so
    a second search that starts from the first one's step accepts it at once."""
    linesearch = optim.scale_by_zoom_linesearch(15, initial_guess_strategy="keep")
    x = fnp.asarray([1.0, -2.0], fnp.float64)
    state = linesearch.init(x)
    steps = []
    for _ in range(2):
        value, grad = fg.value_and_grad(steep)(x)
        updates, state = linesearch.update(-grad, state, x, value=value, grad=grad, value_fn=steep)
        x = optim.apply_updates(x, updates) + 0.5  # move off the minimizer
        steps.append(int(state.info.num_linesearch_steps))
    assert steps[0] > 1 and steps[1] == 1


def test_eager_and_vmapped_searches_equal_jitted_ones():
    linesearch = optim.scale_by_zoom_linesearch(15)
    starts = np.array([[2.0, -1.0], [0.5, 0.3], [-1.0, 1.5]])

    def one(x):
        value, grad = fg.value_and_grad(exp_linear)(x)
        state = linesearch.init(x)
        return linesearch.update(-grad, state, x, value=value, grad=grad, value_fn=exp_linear)

    batched = fg.vmap(one)(fnp.asarray(starts))
    for i, x in enumerate(starts):
        eager = one(fnp.asarray(x))
        jitted = fg.jit(one)(fnp.asarray(x))
        for a, b, c in zip(
            fg.tree_util.tree_leaves(eager),
            fg.tree_util.tree_leaves(jitted),
            fg.tree_util.tree_leaves(batched),
        ):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
            np.testing.assert_allclose(np.asarray(c)[i], np.asarray(b), rtol=1e-12)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="max_linesearch_steps"):
        optim.scale_by_zoom_linesearch(0)
    with pytest.raises(ValueError, match="initial_guess_strategy"):
        optim.scale_by_zoom_linesearch(10, initial_guess_strategy="last")
    linesearch = optim.scale_by_zoom_linesearch(10)
    x = fnp.zeros(2)
    state = linesearch.init(x)
    with pytest.raises(TypeError, match="'scale'"):
        linesearch.update(x, state, x, value=0.0, grad=x, value_fn=quadratic, scale=2.0)
    with pytest.raises(ValueError, match="params"):
        linesearch.update(x, state, value=0.0, grad=x, value_fn=quadratic)
    with pytest.raises(ValueError, match="shape"):
        linesearch.update(x, state, x, value=0.0, grad=fnp.zeros(3), value_fn=quadratic)


def run_lbfgs(f, x, steps, **kwargs):
    """lbfgs as a Python loop of jitted steps reusing the line search's value and gradient;
    returns the iterates' values and the last state too."""
    opt = optim.lbfgs(**kwargs)
    state = opt.init(x)
    value_and_grad = optim.value_and_grad_from_state(f)

    @fg.jit
    def step(x, state):
        value, grad = value_and_grad(x, state=state)
        updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
        return optim.apply_updates(x, updates), state

    values = []
    for _ in range(steps):
        x, state = step(x, state)
        values.append(float(state[-1].value))
    return x, values, state


def test_lbfgs_reaches_rosenbrocks_minimum_like_scipy():
    x0 = np.array([-1.2, 1.0, -0.5, 0.8, 0.3])
    x, values, state = run_lbfgs(rosenbrock, fnp.asarray(x0), 60)
    reference = so.minimize(
        so.rosen, x0, jac=so.rosen_der, method="L-BFGS-B", options={"ftol": 0, "gtol": 1e-12}
    )
    np.testing.assert_allclose(np.asarray(x), reference.x, atol=1e-6)
    np.testing.assert_allclose(np.asarray(x), np.ones(5), atol=1e-8)
    # Sufficient decrease makes the values fall at every step (until they reach 0).
    assert all(b <= a for a, b in zip(values, values[1:]))
    np.testing.assert_allclose(values[-1], rosenbrock(np.asarray(x), np), atol=1e-20)


def test_lbfgs_in_a_while_loop_solves_an_ill_conditioned_quadratic():
    rng = np.random.default_rng(5)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    hessian = q @ np.diag(np.logspace(0, 4, 8)) @ q.T
    linear = rng.standard_normal(8)

    def f(x):
        return 0.5 * x @ fnp.asarray(hessian) @ x - fnp.asarray(linear) @ x

    opt = optim.lbfgs()
    value_and_grad = optim.value_and_grad_from_state(f)

    @fg.jit
    def minimize(x):
        def unfinished(carry):
            k, x, state, grad_norm = carry
            return (k < 200) & (grad_norm > 1e-9)

        def step(carry):
            k, x, state, _ = carry
            value, grad = value_and_grad(x, state=state)
            updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
            return k + 1, optim.apply_updates(x, updates), state, optim.global_norm(grad)

        start = (0, x, opt.init(x), fnp.asarray(np.inf))
        return lax.while_loop(unfinished, step, start)

    iterations, x, state, _ = minimize(fnp.zeros(8, fnp.float64))
    closed_form = np.linalg.solve(hessian, linear)
    np.testing.assert_allclose(np.asarray(x), closed_form, rtol=1e-8, atol=1e-10)
    reference = so.minimize(
        lambda z: 0.5 * z @ hessian @ z - linear @ z,
        np.zeros(8),
        jac=lambda z: hessian @ z - linear,
        method="L-BFGS-B",
        options={"ftol": 0, "gtol": 1e-10, "maxiter": 1000},
    )
    np.testing.assert_allclose(np.asarray(x), reference.x, rtol=1e-6, atol=1e-8)
    assert int(iterations) < 200
    assert int(state[-1].info.num_linesearch_steps) <= 20


def test_lbfgs_on_a_pytree_of_parameters_with_data_as_keyword_arguments():
    """Least squares in a dict of a weight matrix and a bias, against np.linalg.lstsq."""
    rng = np.random.default_rng(11)
    inputs = rng.standard_normal((30, 3))
    targets = rng.standard_normal((30, 2))

    def loss(params, inputs, targets):
        predictions = inputs @ params["w"] + params["b"]
        return 0.5 * fnp.sum((predictions - targets) ** 2)

    opt = optim.lbfgs()
    params = {"w": fnp.zeros((3, 2), fnp.float64), "b": fnp.zeros(2, fnp.float64)}
    state = opt.init(params)
    value_and_grad = optim.value_and_grad_from_state(loss)

    @fg.jit
    def step(params, state, inputs, targets):
        data = {"inputs": inputs, "targets": targets}
        value, grad = value_and_grad(params, state=state, **data)
        updates, state = opt.update(
            grad, state, params, value=value, grad=grad, value_fn=loss, **data
        )
        return optim.apply_updates(params, updates), state

    for _ in range(20):
        params, state = step(params, state, fnp.asarray(inputs), fnp.asarray(targets))
    design = np.hstack([inputs, np.ones((30, 1))])
    solution = np.linalg.lstsq(design, targets, rcond=None)[0]
    np.testing.assert_allclose(np.asarray(params["w"]), solution[:3], atol=1e-8)
    np.testing.assert_allclose(np.asarray(params["b"]), solution[3], atol=1e-8)
    assert np.asarray(state[-1].grad["w"]).shape == (3, 2)


def test_lbfgs_with_a_learning_rate_and_no_line_search_is_the_scaled_direction():
    x0 = np.array([1.0, -1.0])
    opt = optim.lbfgs(learning_rate=0.1, linesearch=None)
    x = fnp.asarray(x0)
    updates, _ = fg.jit(opt.update)(fg.grad(quadratic)(x), opt.init(x), x)
    # The first direction is min(1, 1/|g|) g.
    grad = np.array([[3.0, 1.0], [1.0, 2.0]]) @ x0 - np.array([1.0, -1.0])
    expected = -0.1 * min(1.0, 1.0 / np.linalg.norm(grad)) * grad
    np.testing.assert_allclose(np.asarray(updates), expected, rtol=1e-12)
