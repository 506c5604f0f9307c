"""checkify: user checks and automatic checks as error values, eagerly and under jit, through
cond, while_loop and scan, under vmap and grad; the error-set algebra; staged checks outside
checkify. Expected messages are written from the inputs; vmap is compared with a Python loop
over the lanes, jit with eager."""

import numpy as np
import pytest
from checks import jit_backend

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.experimental import checkify as ck


def positive_sin(x):
    ck.check(x > 0, "x must be positive, got {}", x)
    return fnp.sin(x)


# ---------------------------------------------------------------------------------------------
# User checks


@pytest.mark.parametrize("transform", ["eager", "jit outside", "jit inside"])
def test_user_check_passes_and_fails(transform):
    checked = {
        "eager": ck.checkify(positive_sin),
        "jit outside": fg.jit(ck.checkify(positive_sin)),
        "jit inside": ck.checkify(fg.jit(positive_sin)),
    }[transform]
    err, out = checked(np.float32(0.5))
    assert err.get() is None
    np.testing.assert_allclose(out, np.sin(np.float32(0.5)), rtol=1e-6)
    err, out = checked(np.float32(-3.0))
    assert err.get() == "x must be positive, got -3.0 (`check` failed)"
    np.testing.assert_allclose(out, np.sin(np.float32(-3.0)), rtol=1e-6)


def test_message_formats_positional_and_keyword_pytrees():
    def f(x, y):
        ck.check(x < y["limit"], "{0} >= {limit:.1f} (pair {0})", x, limit=y["limit"])
        return x

    err, _ = fg.jit(ck.checkify(f))(np.float32(2.5), {"limit": np.float32(1.25)})
    assert err.get() == "2.5 >= 1.2 (pair 2.5) (`check` failed)"


def test_eager_check_raises_outside_checkify():
    positive_sin(1.0)
    with pytest.raises(ck.FailedCheckError, match="x must be positive, got -2.0"):
        positive_sin(-2.0)
    assert issubclass(ck.FailedCheckError, ck.FuncgradRuntimeError)


def test_throw_raises_the_failure_and_nothing_otherwise():
    err, _ = ck.checkify(positive_sin)(-1.0)
    with pytest.raises(ck.FuncgradRuntimeError, match="x must be positive, got -1.0"):
        err.throw()
    ok, _ = ck.checkify(positive_sin)(1.0)
    ok.throw()
    assert ok.get() is None and ok.get_exception() is None
    assert str(ok) == "Error(None)"


def test_first_failure_in_program_order_wins():
    def f(x):
        ck.check(x > 10, "first {}", x)
        ck.check(x > 20, "second {}", x)
        return x

    assert ck.checkify(f)(5.0)[0].get() == "first 5.0 (`check` failed)"
    assert ck.checkify(f)(15.0)[0].get() == "second 15.0 (`check` failed)"


def test_make_jaxpr_and_eval_shape_trace_a_check():
    jaxpr = fg.make_jaxpr(positive_sin)(1.0)
    assert [e.primitive.name for e in jaxpr.eqns].count("check") == 1
    assert "check[" in str(jaxpr)
    assert fg.eval_shape(positive_sin, 1.0) == fg.ShapeDtypeStruct((), np.float32)


def scanned_positive_sin(xs):
    return lax.scan(lambda total, x: (total + positive_sin(x), x), 0.0, xs)[0]


def looped_positive_sin(x):
    # Three steps from x, each adding 1 after checking the carry: fails for x <= 0 only.
    body = lambda c: (c[0] + 1, c[1] + 0.0 * positive_sin(c[1]) + 1.0)  # noqa: E731
    return lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1]


@pytest.mark.parametrize("backend", ["numpy", "llvm", "cuda_emulator"])
@pytest.mark.parametrize(
    "fun, good, bad, message",
    [
        (positive_sin, 1.0, -1.0, "got -1.0"),
        (scanned_positive_sin, np.ones(2, np.float32), np.array([1.0, -2.0], np.float32), "-2.0"),
        (looped_positive_sin, 5.0, -1.5, "got -1.5"),
        (lambda x: lax.cond(x < 10, positive_sin, fnp.cos, x), 1.0, -1.0, "got -1.0"),
    ],
)
def test_jitted_check_outside_checkify_raises_when_the_program_runs(
    backend, fun, good, bad, message
):
    with jit_backend(backend):
        np.testing.assert_allclose(fg.jit(fun)(good), fun(good), rtol=1e-6)  # eager reference
        with pytest.raises(ck.FailedCheckError, match=message):
            fun(bad)
        with pytest.raises(ck.FailedCheckError, match=message):
            fg.jit(fun)(bad)


@pytest.mark.parametrize("backend", ["numpy", "llvm", "cuda_emulator"])
def test_check_cached_inside_checkify_still_checks_when_run_without_it(backend):
    # jit(f) traced inside checkify keeps the staged check: run on its own, it raises there.
    jitted = fg.jit(positive_sin)
    with jit_backend(backend):
        ck.checkify(jitted)(1.0)
        np.testing.assert_allclose(jitted(1.0), np.sin(1.0), rtol=1e-6)
        with pytest.raises(ck.FailedCheckError, match="got -1.0"):
            jitted(-1.0)


def test_check_rejects_bad_arguments():
    with pytest.raises(TypeError, match="scalar boolean pred, got bool\\[2\\]"):
        ck.check(fnp.array([True, False]), "msg")
    with pytest.raises(TypeError, match="scalar boolean pred, got f32\\[\\]"):
        ck.check(fnp.float32(1.0), "msg")
    with pytest.raises(TypeError, match="pytrees of arrays"):
        ck.check(True, "msg {}", "a string")
    with pytest.raises(TypeError, match="error categories"):
        ck.checkify(positive_sin, errors={"nan"})
    with pytest.raises(TypeError, match="takes a checkify Error"):
        ck.check_error("not an error")


def test_debug_check_is_a_no_op_outside_checkify():
    def f(x):
        ck.debug_check(x > 0, "debug {}", x)
        return x * 2

    assert float(f(-1.0)) == -2.0
    assert float(fg.jit(f)(-1.0)) == -2.0
    assert ck.checkify(f)(-1.0)[0].get() == "debug -1.0 (`check` failed)"
    assert ck.checkify(f)(1.0)[0].get() is None


def test_check_error_reraises_an_inner_error_inside_checkify():
    def with_inner_checkify(x):
        err, out = fg.jit(ck.checkify(positive_sin))(x)
        ck.check_error(err)
        return out

    assert ck.checkify(with_inner_checkify)(-1.0)[0].get() == (
        "x must be positive, got -1.0 (`check` failed)"
    )
    assert ck.checkify(with_inner_checkify)(1.0)[0].get() is None
    with pytest.raises(ck.FailedCheckError):
        with_inner_checkify(-1.0)


# ---------------------------------------------------------------------------------------------
# Automatic checks


def test_nan_checks():
    checked = fg.jit(ck.checkify(fnp.log, errors=ck.nan_checks))
    err, _ = checked(np.float32(-1.0))
    assert isinstance(err.get_exception(), ck.NaNError)
    assert err.get().startswith("nan generated by primitive log at ")
    assert checked(np.float32(1.0))[0].get() is None
    # Integer arithmetic makes no NaN, and a disabled category reports nothing.
    assert ck.checkify(lambda x: x + 1, errors=ck.nan_checks)(3)[0].get() is None
    assert ck.checkify(fnp.log, errors=ck.index_checks)(-1.0)[0].get() is None
    for name in ("log10", "log2"):
        err, _ = ck.checkify(getattr(fnp, name), errors=ck.nan_checks)(-1.0)
        assert err.get().startswith(f"nan generated by primitive {name} at ")


def test_div_checks():
    checked = ck.checkify(lambda x, y: x // y, errors=ck.div_checks)
    err, _ = checked(fnp.array([3, 4]), fnp.array([1, 0]))
    assert isinstance(err.get_exception(), ck.DivisionByZeroError)
    assert err.get().startswith("division by zero in div at ")
    assert checked(fnp.array([3, 4]), fnp.array([1, 2]))[0].get() is None


def test_float_checks_report_the_first_of_nan_and_division():
    def f(x, y):
        return fnp.sqrt(x) / y

    assert ck.checkify(f, errors=ck.float_checks)(-1.0, 0.0)[0].get().startswith("nan generated")
    assert ck.checkify(f, errors=ck.float_checks)(1.0, 0.0)[0].get().startswith("division by")


@pytest.mark.parametrize(
    "index_fun, primitive",
    [
        (lambda x, i: x[i], "dynamic_slice"),
        (lambda x, i: x[fnp.stack([0, i])], "gather"),
        (lambda x, i: x.at[fnp.stack([0, i])].add(1.0), "scatter_add"),
        (lambda x, i: lax.dynamic_update_slice(x, fnp.ones(2), (i,)), "dynamic_update_slice"),
    ],
)
def test_index_checks(index_fun, primitive):
    checked = ck.checkify(index_fun, errors=ck.index_checks)
    x = fnp.zeros(3)
    assert checked(x, fnp.array(1))[0].get() is None
    err, _ = checked(x, fnp.array(5))
    assert isinstance(err.get_exception(), ck.OOBError)
    # A window of 2 at start 5 (dynamic_update_slice) is out of bounds as a start past 3 - 2.
    assert err.get().startswith(
        f"out-of-bounds indexing in {primitive} of an array of shape (3,): index 5 is out of "
        "bounds for axis 0 with size 3"
    )


def test_index_checks_name_the_failing_axis():
    err, _ = ck.checkify(lambda x, i, j: x[i, j], errors=ck.index_checks)(
        fnp.zeros((2, 4)), fnp.array(1), fnp.array(7)
    )
    assert "index 7 is out of bounds for axis 1 with size 4" in err.get()


def test_error_set_algebra():
    assert ck.float_checks == ck.nan_checks | ck.div_checks
    assert ck.automatic_checks == ck.float_checks | ck.index_checks
    assert ck.all_checks == ck.automatic_checks | ck.user_checks
    assert ck.all_checks - ck.user_checks == ck.automatic_checks
    assert ck.float_checks - ck.nan_checks == ck.div_checks

    def f(x):
        ck.check(x < 0, "user {}", x)
        return fnp.log(x)

    # With user checks removed, the user's check is dropped and only the NaN is reported.
    err, _ = ck.checkify(f, errors=ck.all_checks - ck.user_checks)(-1.0)
    assert err.get().startswith("nan generated by primitive log")
    assert ck.checkify(f, errors=ck.all_checks)(1.0)[0].get() == "user 1.0 (`check` failed)"
    assert ck.checkify(f, errors=ck.automatic_checks - ck.nan_checks)(-1.0)[0].get() is None


# ---------------------------------------------------------------------------------------------
# Control flow


def test_checks_inside_cond():
    def f(pred, x):
        def positive(x):
            ck.check(x > 0, "positive branch got {}", x)
            return x

        return lax.cond(pred, positive, fnp.sqrt, x)

    checked = fg.jit(ck.checkify(f, errors=ck.all_checks))
    assert checked(True, 1.0)[0].get() is None
    assert checked(True, -1.0)[0].get() == "positive branch got -1.0 (`check` failed)"
    assert checked(False, 1.0)[0].get() is None
    assert checked(False, -1.0)[0].get().startswith("nan generated by primitive sqrt")


def test_checks_inside_while_loop_body_and_predicate():
    def f(step):
        def cond(carry):
            ck.check(carry[0] < 8, "predicate saw {}", carry[0])
            return carry[0] < 5

        def body(carry):
            ck.check(carry[1] > -3.0, "body saw {}", carry[1])
            return carry[0] + 1, carry[1] - step

        return lax.while_loop(cond, body, (0, 0.0))

    checked = ck.checkify(f)
    # Five iterations; the body sees 0, -s, ..., -4s before each step.
    assert checked(0.5)[0].get() is None
    assert checked(1.0)[0].get() == "body saw -3.0 (`check` failed)"
    err, out = fg.jit(checked)(1.0)
    assert err.get() == "body saw -3.0 (`check` failed)"
    assert int(out[0]) == 5


def test_checks_inside_scan_report_the_first_failing_iteration():
    def f(xs):
        def body(total, x):
            ck.check(x < 3.0, "element {} too big after total {total}", x, total=total)
            return total + x, fnp.log(x)

        return lax.scan(body, 0.0, xs)

    checked = ck.checkify(f, errors=ck.all_checks)
    assert checked(fnp.array([1.0, 2.0]))[0].get() is None
    err, (total, logs) = checked(fnp.array([1.0, 2.0, 5.0, 7.0]))
    assert err.get() == "element 5.0 too big after total 3.0 (`check` failed)"
    np.testing.assert_allclose(total, 15.0)
    np.testing.assert_allclose(logs, np.log([1.0, 2.0, 5.0, 7.0]), rtol=1e-6)
    # A NaN in the second iteration comes before the failed check of the third.
    err, _ = fg.jit(checked)(fnp.array([1.0, -2.0, 5.0]))
    assert err.get().startswith("nan generated by primitive log")


def test_nested_control_flow_and_jit():
    def f(xs):
        def body(carry, x):
            y = lax.cond(x > 0, fg.jit(lambda v: v), fnp.sqrt, x)
            return carry, y

        return lax.scan(body, 0.0, xs)[1]

    checked = ck.checkify(f, errors=ck.nan_checks)
    assert checked(fnp.array([1.0, 2.0]))[0].get() is None
    assert checked(fnp.array([1.0, -2.0]))[0].get().startswith("nan generated by primitive sqrt")


# ---------------------------------------------------------------------------------------------
# vmap and grad


def negative_doubled(x):
    ck.check(x < 0, "lane value {}", x)
    return x * 2


def test_vmap_of_checkify_reports_each_failing_lane():
    xs = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    err, out = fg.vmap(ck.checkify(negative_doubled))(xs)
    expected = [ck.checkify(negative_doubled)(x)[0].get() for x in xs]  # one lane at a time
    assert err.get() == "\n".join(
        f"at mapped index {i}: {message}" for i, message in enumerate(expected) if message
    )
    assert err.get() == (
        "at mapped index 1: lane value 2.0 (`check` failed)\n"
        "at mapped index 3: lane value 4.0 (`check` failed)"
    )
    np.testing.assert_allclose(out, xs * 2)
    assert fg.vmap(ck.checkify(negative_doubled))(-xs[[1, 3]])[0].get() is None


def test_checkify_of_vmap_reports_the_first_failing_lane():
    xs = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    err, out = fg.jit(ck.checkify(fg.vmap(negative_doubled)))(xs)
    assert err.get() == "lane value 2.0 (`check` failed)"
    np.testing.assert_allclose(out, xs * 2)
    assert ck.checkify(fg.vmap(negative_doubled))(-np.abs(xs))[0].get() is None


def test_eager_vmap_of_a_check_raises_for_the_first_failing_lane():
    with pytest.raises(ck.FailedCheckError, match="lane value 2.0"):
        fg.vmap(negative_doubled)(fnp.array([-1.0, 2.0, 4.0]))


def test_vmap_of_automatic_checks_through_a_scan():
    def f(x):
        return lax.scan(lambda c, v: (c, fnp.log(v * x)), 0.0, fnp.ones(2))[1]

    err, _ = fg.vmap(ck.checkify(f, errors=ck.nan_checks))(fnp.array([1.0, -1.0]))
    assert err.get().startswith("at mapped index 1: nan generated by primitive log")


def test_checkify_of_grad_checks_the_forward_pass():
    checked = ck.checkify(fg.grad(positive_sin))
    err, g = checked(np.float32(-1.0))
    assert err.get() == "x must be positive, got -1.0 (`check` failed)"
    np.testing.assert_allclose(g, np.cos(-1.0), rtol=1e-6)
    err, g = checked(np.float32(0.5))
    assert err.get() is None
    np.testing.assert_allclose(g, np.cos(0.5), rtol=1e-6)
    err, _ = ck.checkify(fg.grad(fnp.sqrt), errors=ck.nan_checks)(-1.0)
    assert err.get().startswith("nan generated by primitive sqrt")


def test_grad_of_a_checkified_output():
    def loss(x):
        err, out = ck.checkify(positive_sin)(x)
        return out

    np.testing.assert_allclose(fg.grad(loss)(np.float32(-1.0)), np.cos(-1.0), rtol=1e-6)
    np.testing.assert_allclose(fg.jit(fg.grad(loss))(np.float32(2.0)), np.cos(2.0), rtol=1e-6)


def test_grad_of_a_check_outside_checkify_checks_the_primal():
    np.testing.assert_allclose(fg.grad(positive_sin)(1.0), np.cos(1.0), rtol=1e-6)
    with pytest.raises(ck.FailedCheckError, match="got -1.0"):
        fg.grad(positive_sin)(-1.0)


def test_check_error_of_a_batched_error_keeps_its_first_failing_lane():
    def f(xs):
        err, out = fg.vmap(fg.vmap(ck.checkify(negative_doubled)))(xs)
        ck.check_error(err)
        return out

    xs = fnp.array([[-1.0, -2.0], [3.0, 4.0]])
    assert ck.checkify(f)(xs)[0].get() == "lane value 3.0 (`check` failed)"
    assert ck.checkify(f)(-fnp.abs(xs))[0].get() is None
    with pytest.raises(ck.FailedCheckError, match="^lane value 3.0"):
        f(xs)


# ---------------------------------------------------------------------------------------------
# Functions with their own derivative or batching rules, remat, solves and pmap: the function
# that runs is checked; the user's rules, standing in for it under a transformation outside
# checkify, pass the error on unchanged.


@fg.custom_jvp
def checked_log(x):
    ck.check(x > 0, "log of {}", x)
    return fnp.log(x)


@checked_log.defjvp
def _checked_log_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return checked_log(x), 2.0 * t / x  # twice the true derivative: shows the rule was used


@fg.custom_vjp
def checked_sqrt(x):
    ck.check(x >= 0, "sqrt of {}", x)
    return fnp.sqrt(x)


def _checked_sqrt_fwd(x):
    return fnp.sqrt(x), x


def _checked_sqrt_bwd(x, g):
    return (3.0 * g,)  # not the true derivative: shows the rule was used


checked_sqrt.defvjp(_checked_sqrt_fwd, _checked_sqrt_bwd)


@pytest.mark.parametrize("fun, bad", [(checked_log, -2.0), (checked_sqrt, -4.0)])
@pytest.mark.parametrize("jit_outside", [False, True])
def test_checks_inside_custom_derivative_functions(fun, bad, jit_outside):
    checked = ck.checkify(fun, errors=ck.all_checks)
    checked = fg.jit(checked) if jit_outside else checked
    err, out = checked(4.0)
    assert err.get() is None
    np.testing.assert_allclose(out, {checked_log: np.log(4.0), checked_sqrt: 2.0}[fun], rtol=1e-6)
    err, _ = checked(bad)
    assert err.get().startswith(f"{fun.__name__.split('_')[1]} of {bad} (`check` failed)")
    # The automatic checks run inside too: the NaN of log or sqrt comes after the failed check.
    err, _ = ck.checkify(fun, errors=ck.nan_checks)(bad)
    assert err.get().startswith("nan generated by primitive")


def test_grad_of_checkified_custom_derivatives_uses_the_rules_and_passes_the_error_on():
    for fun, derivative in [(checked_log, lambda x: 2.0 / x), (checked_sqrt, lambda x: 3.0)]:

        def value(x, fun=fun):
            err, out = ck.checkify(fun)(x)
            return out

        np.testing.assert_allclose(fg.grad(value)(4.0), derivative(4.0), rtol=1e-6)
        np.testing.assert_allclose(fg.jit(fg.grad(value))(4.0), derivative(4.0), rtol=1e-6)
        # The error of an earlier check reaches the output through the rule.
        err, (out, g) = ck.checkify(
            lambda x, fun=fun: (ck.check(x < 0, "first {}", x), fg.value_and_grad(fun)(x))[1]
        )(4.0)
        assert err.get() == "first 4.0 (`check` failed)"


def test_checkify_of_grad_checks_the_function_a_jvp_rule_calls():
    err, g = ck.checkify(fg.grad(checked_log))(-2.0)
    assert err.get() == "log of -2.0 (`check` failed)"
    np.testing.assert_allclose(g, 2.0 / -2.0, rtol=1e-6)
    assert ck.checkify(fg.grad(checked_log))(2.0)[0].get() is None


@pytest.mark.parametrize("fun", [checked_log, checked_sqrt])
def test_vmap_of_checkified_custom_derivative_function(fun):
    xs = np.array([1.0, -1.0, 4.0, -2.0], np.float32)
    err, out = fg.vmap(ck.checkify(fun))(xs)
    per_lane = [ck.checkify(fun)(x)[0].get() for x in xs]  # one lane at a time
    assert err.get() == "\n".join(f"at mapped index {i}: {m}" for i, m in enumerate(per_lane) if m)
    assert per_lane[0] is None and per_lane[1] is not None


def test_checks_inside_checkpoint():
    @fg.checkpoint
    def f(x):
        ck.check(x < 3.0, "big {}", x)
        return fnp.sin(x) * x

    checked = ck.checkify(f)
    assert checked(1.0)[0].get() is None
    assert fg.jit(checked)(5.0)[0].get() == "big 5.0 (`check` failed)"
    err, g = ck.checkify(fg.grad(f))(5.0)
    assert err.get() == "big 5.0 (`check` failed)"
    np.testing.assert_allclose(g, np.cos(5.0) * 5.0 + np.sin(5.0), rtol=1e-5)
    g = fg.grad(lambda x: ck.checkify(f)(x)[1])(5.0)  # remat of the checkified program
    np.testing.assert_allclose(g, np.cos(5.0) * 5.0 + np.sin(5.0), rtol=1e-5)


def test_checks_inside_custom_vmap():
    @fg.custom_batching.custom_vmap
    def f(x):
        ck.check(x > 0, "function saw {}", x)
        return x * 2.0

    @f.def_vmap
    def rule(axis_size, in_batched, xs):
        ck.check(fnp.all(xs < 100), "rule saw {}", xs)
        return xs * 2.0, in_batched[0]

    assert ck.checkify(f)(-1.0)[0].get() == "function saw -1.0 (`check` failed)"
    xs = np.array([1.0, -1.0, 200.0], np.float32)
    # vmap inside checkify: the rule runs in its place, checked.
    err, out = ck.checkify(fg.vmap(f))(xs)
    assert err.get() == "rule saw [  1.  -1. 200.] (`check` failed)"
    np.testing.assert_allclose(out, xs * 2)
    # vmap outside checkify: the rule stands in for the checked function (whose check would
    # fail at -1.0); it is not checkified, so its own checks raise as outside checkify.
    err, out = fg.vmap(ck.checkify(f))(xs[:2])
    assert err.get() is None
    np.testing.assert_allclose(out, xs[:2] * 2)
    with pytest.raises(ck.FailedCheckError, match="rule saw"):
        fg.vmap(ck.checkify(f))(xs)
    err, out = fg.vmap(ck.checkify(lambda x: f(x) + fnp.log(x), errors=ck.nan_checks))(xs[:2])
    assert err.get().startswith("at mapped index 1: nan generated by primitive log")


def test_checks_inside_custom_linear_solve_and_custom_root():
    a = np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)

    def solve(matvec, b):
        ck.check(fnp.all(fnp.isfinite(b)), "solve got {}", b)
        return fnp.linalg.solve(a, b)

    def solved(b):
        return lax.custom_linear_solve(lambda x: a @ x, b, solve, symmetric=True)

    b = np.array([1.0, 2.0], np.float32)
    err, x = fg.jit(ck.checkify(solved))(b)
    assert err.get() is None
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-5)
    err, _ = ck.checkify(solved)(np.array([1.0, np.inf], np.float32))
    assert err.get() == "solve got [ 1. inf] (`check` failed)"
    # Derivatives through the checkified solve: d(sum x)/db = A^-T 1.
    g = fg.grad(lambda b: fnp.sum(ck.checkify(solved)(b)[1]))(b)
    np.testing.assert_allclose(g, np.linalg.solve(a.T, np.ones(2)), rtol=1e-5)
    err, g = ck.checkify(fg.grad(lambda b: fnp.sum(solved(b))))(np.array([np.inf, 1.0], np.float32))
    assert err.get() == "solve got [inf  1.] (`check` failed)"

    def root(c):  # the positive root of x^2 = c, by Newton steps from 1
        def newton(f, x0):
            ck.check(c > 0, "no real root of {}", c)
            return lax.fori_loop(0, 20, lambda i, x: x - f(x) / (2 * x), x0)

        return lax.custom_root(lambda x: x * x - c, 1.0, newton, lambda g, y: y / g(1.0))

    assert ck.checkify(root)(4.0)[0].get() is None
    np.testing.assert_allclose(ck.checkify(root)(4.0)[1], 2.0, rtol=1e-5)
    assert ck.checkify(root)(-4.0)[0].get() == "no real root of -4.0 (`check` failed)"
    np.testing.assert_allclose(fg.grad(lambda c: ck.checkify(root)(c)[1])(4.0), 0.25, rtol=1e-4)


def test_checks_inside_pmap(monkeypatch):
    monkeypatch.setattr(fg.config, "num_cpu_devices", 4)

    def f(x):
        ck.check(x < 2.0, "device value {}", x)
        return fg.lax.psum(fnp.log(x), "i")

    xs = np.array([1.0, 3.0, -1.0, 5.0], np.float32)
    checked = ck.checkify(fg.pmap(f, axis_name="i"), errors=ck.all_checks)
    err, out = checked(xs)
    assert err.get() == "device value 3.0 (`check` failed)"  # the first device that failed
    assert np.isnan(out).all()
    err, out = checked(np.array([1.0, 0.5, 1.5, 1.0], np.float32))
    assert err.get() is None
    np.testing.assert_allclose(out, np.full(4, np.log(0.75)), rtol=1e-5)
    err, _ = checked(np.array([1.0, 0.5, -1.0, 1.0], np.float32))
    assert err.get().startswith("nan generated by primitive log")
