"""JAX's smaller top-level names: linear_transpose, clear_caches, named_call and named_scope,
ensure_compile_time_eval, typeof, closure_convert, custom_batching.custom_vmap, ..."""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 3))
B = RNG.standard_normal((3, 2))


def assert_allclose(actual, expected, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# linear_transpose


def linear_map(x):
    """A linear map from R^(3x2) to R^(4*2 + 3) built from several linear primitives."""
    y = fnp.asarray(A) @ x
    z = x[:, ::-1].sum(axis=1) * 3.0 - fnp.roll(x, 1, axis=0)[:, 0] / 2.0
    return fnp.concatenate([y.reshape(-1), z])


def test_linear_transpose_is_the_jacobian_transposed():
    x = RNG.standard_normal((3, 2))
    jac = np.asarray(fg.jacfwd(linear_map)(x)).reshape(11, 6)
    transpose = fg.linear_transpose(linear_map, x)
    ct = RNG.standard_normal(11)
    (got,) = transpose(ct)
    assert got.shape == (3, 2) and got.dtype == np.float64
    assert_allclose(np.asarray(got).reshape(-1), jac.T @ ct)


def test_linear_transpose_of_complex_maps_is_the_transpose_not_the_adjoint():
    m = RNG.standard_normal((4, 3)) + 1j * RNG.standard_normal((4, 3))
    ct = RNG.standard_normal(4) + 1j * RNG.standard_normal(4)
    (got,) = fg.linear_transpose(lambda x: fnp.asarray(m) @ x, np.ones(3, complex))(ct)
    assert_allclose(got, m.T @ ct)
    # A real input mapped to complex outputs: the transpose keeps the real part.
    (got,) = fg.linear_transpose(lambda x: fnp.asarray(m) @ x, np.ones(3))(ct)
    assert got.dtype == np.float64
    assert_allclose(got, (m.T @ ct).real)


def test_linear_transpose_only_reads_shapes_and_dtypes():
    transpose = fg.linear_transpose(lambda x: 2.0 * x.T, fg.ShapeDtypeStruct((3, 2), np.float32))
    (got,) = transpose(np.ones((2, 3), np.float32))
    assert got.shape == (3, 2) and got.dtype == np.float32
    assert_allclose(got, np.full((3, 2), 2.0))


def test_linear_transpose_of_pytrees():
    def f(params):
        return {"sum": params["w"] @ B + params["b"], "w": 2.0 * params["w"]}, params["b"]

    params = {"w": np.zeros((4, 3)), "b": np.zeros(2)}
    transpose = fg.linear_transpose(f, params)
    cts = (
        {"sum": RNG.standard_normal((4, 2)), "w": RNG.standard_normal((4, 3))},
        RNG.standard_normal(2),
    )
    (got,) = transpose(cts)
    assert_allclose(got["w"], cts[0]["sum"] @ B.T + 2.0 * cts[0]["w"])
    assert_allclose(got["b"], cts[0]["sum"].sum(0) + cts[1])
    # The adjoint identity <ct, f(x)> = <f^T(ct), x> at a random point.
    x = {"w": RNG.standard_normal((4, 3)), "b": RNG.standard_normal(2)}
    out = f(x)
    lhs = sum(np.vdot(c, o) for c, o in zip(fg.tree.leaves(cts), fg.tree.leaves(out)))
    rhs = sum(np.vdot(g, v) for g, v in zip(fg.tree.leaves(got), fg.tree.leaves(x)))
    assert_allclose(lhs, rhs)


def test_linear_transpose_several_arguments_and_unused_ones():
    transpose = fg.linear_transpose(lambda x, y, z: x + 2.0 * y, np.ones(3), np.ones(3), np.ones(2))
    gx, gy, gz = transpose(np.arange(3.0))
    assert_allclose(gx, np.arange(3.0))
    assert_allclose(gy, 2.0 * np.arange(3.0))
    assert_allclose(gz, np.zeros(2))


def test_linear_transpose_under_jit_vmap_and_grad():
    x = np.zeros((3, 2))
    transpose = fg.linear_transpose(linear_map, x)
    cts = RNG.standard_normal((5, 11))
    eager = np.stack([np.asarray(transpose(ct)[0]) for ct in cts])
    assert_allclose(fg.jit(transpose)(cts[0])[0], eager[0])
    assert_allclose(fg.vmap(transpose)(cts)[0], eager)
    # The transpose is linear, so its gradient of <v, T(ct)> is T's transpose: the map itself.
    v = RNG.standard_normal((3, 2))
    grad = fg.grad(lambda ct: fnp.vdot(v, transpose(ct)[0]))(cts[0])
    assert_allclose(grad, linear_map(v))
    # A jitted linear function is transposed through its program.
    (got,) = fg.linear_transpose(fg.jit(linear_map), x)(cts[0])
    assert_allclose(got, eager[0])


def test_linear_transpose_inside_jit():
    @fg.jit
    def f(ct, scale):
        return fg.linear_transpose(lambda x: scale * x, np.ones(3))(ct)[0]

    assert_allclose(f(np.arange(3.0), 2.0), 2.0 * np.arange(3.0))


def test_linear_transpose_inside_jit_of_a_program_holding_literals():
    # The padding value 0.0 reaches the linearity check as a literal; under jit, reading it
    # through an Array method staged the read and asked a tracer for its truth value.
    def pad_and_stride(t):
        return fg.lax.slice(fg.lax.pad(t, 0.0, ((0, 1, 0),)), (0,), (4,), (2,))

    def transposed(ct):
        return fg.linear_transpose(pad_and_stride, np.ones(3))(ct)[0]

    ct = np.array([1.0, 2.0])
    assert_allclose(fg.jit(transposed)(ct), [1.0, 0.0, 2.0])


def test_linear_transpose_checks_only_the_branch_a_known_index_takes():
    # The linearization of a program holding a cond keeps the cond, its index known; the
    # branch not taken may compute anything (here a constant), as it never runs.
    scale = np.array([-2.0, 3.0])

    def switched(t):
        return fg.lax.switch(1, [lambda t: fnp.ones_like(t), lambda t: scale * t], t)

    def conditional(t):
        return fg.lax.cond(scale[0] > 0, lambda t: fnp.ones_like(t), lambda t: scale * t, t)

    def in_a_loop(t):  # the index comes from the scanned array: each iteration's differs
        def body(total, i):
            return total + fg.lax.switch(i, [lambda t: 2.0 * t, lambda t: scale * t], t), None

        return fg.lax.scan(body, np.zeros(2), np.array([0, 1, 1]))[0]

    ct = np.array([1.0, 2.0])
    for linear_map in (switched, conditional):
        (got,) = fg.linear_transpose(linear_map, np.ones(2))(ct)
        assert_allclose(got, scale * ct)
    (got,) = fg.linear_transpose(in_a_loop, np.ones(2))(ct)
    assert_allclose(got, (2.0 + 2 * scale) * ct)


def test_errors_name_a_partial_application_by_its_function_not_its_arrays():
    quadratic = fg.tree_util.Partial(lambda c, t: t * t + c, np.full(3, 7.0))
    with pytest.raises(TypeError, match="<lambda> applies 'mul'") as error:
        fg.linear_transpose(quadratic, np.ones(3))
    assert "7." not in str(error.value)


@fg.custom_jvp
def _sin_with_slope_100(x):
    return fnp.sin(x)


_sin_with_slope_100.defjvp(lambda primals, tangents: (fnp.sin(primals[0]), 100.0 * tangents[0]))


@fg.custom_vjp
def _sin_with_slope_7(x):
    return fnp.sin(x)


_sin_with_slope_7.defvjp(lambda x: (fnp.sin(x), None), lambda _, ct: (7.0 * ct,))


@pytest.mark.parametrize("custom, slope", [(_sin_with_slope_100, 100.0), (_sin_with_slope_7, 7.0)])
def test_derivatives_of_a_transpose_keep_the_custom_rules_of_its_constants(custom, slope):
    # The transpose of t -> custom(x) t is custom(x): differentiated in x, by the custom rule
    # (the custom function was inlined, and differentiated as its body, sin, instead).
    def transposed(x):
        return fg.linear_transpose(lambda t: t * custom(x), x)(np.float64(1.0))[0]

    x = np.float64(0.3)
    assert_allclose(transposed(x), np.sin(x))
    assert_allclose(fg.grad(transposed)(x), slope)
    if custom is _sin_with_slope_100:  # (forward mode refuses a custom_vjp function)
        assert_allclose(fg.jvp(transposed, (x,), (np.float64(1.0),))[1], slope)


def test_transpose_of_transpose_is_the_function():
    x = RNG.standard_normal((3, 2))
    transpose = fg.linear_transpose(linear_map, x)
    twice = fg.linear_transpose(transpose, np.zeros(11))
    (got,) = twice((x,))
    assert_allclose(got, linear_map(x))


# A predicate that does not depend on the input, unknown to tracing (a Python bool would pick
# the branch while tracing).
_FLAG = np.bool_(True)


@pytest.mark.parametrize(
    "fun, message",
    [
        (lambda x: x * x, "'mul'"),
        (lambda x: fnp.sin(x), "'sin', which is not linear"),
        (lambda x: x + 1.0, "affine"),
        (lambda x: fnp.concatenate([x, fnp.ones(1)]), "affine"),
        (lambda x: (x, fnp.ones(2)), "not zero"),
        (lambda x: 1.0 / x, "'div'"),
        (fg.jit(lambda x: fnp.exp(x)), "'exp'"),
        (fg.checkpoint(lambda x: 2.0 * fnp.exp(x)), "'exp'.*test_top_level_parity.py"),
        # Nonlinear inside the programs that cond and scan carry: named with the line of the
        # cond or scan, before their transpose rules meet what they cannot transpose.
        (
            lambda x: fg.lax.cond(_FLAG, fnp.sin, lambda y: 2.0 * y, x),
            "'sin', which is not linear.*inside 'cond' .*test_top_level_parity.py",
        ),
        (
            lambda x: fg.lax.scan(lambda c, y: (c * c, y), x, np.ones((2, 3)))[0],
            "'mul' to operands \\[0, 1\\].*inside 'scan' .*test_top_level_parity.py",
        ),
        (
            lambda x: fg.lax.cond(_FLAG, lambda y: fg.jit(fnp.exp)(y), lambda y: y, x),
            "'exp'.*inside 'jit'.*inside 'cond'",
        ),
        (
            lambda x: fg.lax.scan(lambda c, y: (c + y, c), np.ones(3), fnp.stack([x, x]))[0],
            "affine",
        ),
    ],
)
def test_linear_transpose_refuses_nonlinear_functions(fun, message):
    with pytest.raises(TypeError, match=message):
        fg.linear_transpose(fun, np.ones(3))


def test_linear_transpose_through_linear_cond_and_scan():
    def f(x):
        y = fg.lax.cond(_FLAG, lambda v: 3.0 * v, lambda v: -v, x)
        return fg.lax.scan(lambda c, w: (2.0 * c + w * x, c), y, np.ones((2, 3)))[0]

    (got,) = fg.linear_transpose(f, np.ones(3))(np.array([1.0, 2.0, 3.0]))
    # f(x) = 2 (2 (3x) + x) + x = 15x, a scalar multiple, so its transpose too.
    assert_allclose(got, 15.0 * np.array([1.0, 2.0, 3.0]))


def test_linear_transpose_accepts_added_zeros():
    transpose = fg.linear_transpose(lambda x: (x + fnp.zeros(3), fnp.zeros(2)), np.ones(3))
    assert_allclose(transpose((np.ones(3), np.ones(2, np.float32)))[0], np.ones(3))


def test_linear_transpose_ignores_unused_values_that_are_not_linear():
    # A jvp rule can leave such a value behind in a linearized program (here written out).
    def doubled(t):
        unused = fnp.sin(t) + 1.0  # noqa: F841
        return 2.0 * t

    (got,) = fg.linear_transpose(doubled, np.ones(3))(np.arange(3.0))
    assert_allclose(got, 2.0 * np.arange(3.0))


def test_linear_transpose_checks_dtypes_and_cotangents():
    with pytest.raises(TypeError, match="floating point or complex"):
        fg.linear_transpose(lambda x: x, np.ones(3, np.int32))
    transpose = fg.linear_transpose(lambda x: x, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="f32\\[3\\]"):
        transpose(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="structure"):
        transpose((np.ones(3, np.float32),))


# A checkpoint's derivative keeps a cond or scan inside it as one program computing primal and
# tangent values together; a nonlinear function of its primal outputs must not make the
# linearized function look nonlinear.
_MIXED_IN_CHECKPOINT = {
    "cond": lambda a: fnp.arctan(fg.lax.cond(a[0] > 0, fnp.sin, fnp.cos, a)),
    "switch": lambda a: fnp.arctan(fg.lax.switch(1, [fnp.sin, fnp.cos, fnp.tanh], a)),
    "scan": lambda a: fnp.arctan(
        fg.lax.scan(lambda c, y: (fnp.sin(c) * y, c), a, fnp.stack([a, 2.0 * a]))[0]
    ),
    "fori_loop": lambda a: fnp.arctan(fg.lax.fori_loop(0, 3, lambda i, c: fnp.sin(c) * c, a)),
    "jit": lambda a: fnp.arctan(fg.jit(lambda b: fg.lax.cond(b[1] > 0, fnp.sin, fnp.cos, b))(a)),
    "checkpoint": lambda a: fnp.arctan(
        fg.checkpoint(lambda b: fg.lax.cond(b[0] > 0, fnp.sin, fnp.exp, b))(a) ** 2
    ),
}


@pytest.mark.parametrize("inner", _MIXED_IN_CHECKPOINT)
def test_linear_transpose_of_linearized_checkpoint_holding_control_flow(inner):
    def f(x):
        return fg.checkpoint(_MIXED_IN_CHECKPOINT[inner])(x)

    x = np.array([0.3, -0.7, 1.1])
    ct, t = np.array([1.0, 2.0, -0.5]), np.array([-0.4, 0.9, 0.2])
    _, f_lin = fg.linearize(f, x)
    (got,) = fg.linear_transpose(f_lin, x)(ct)
    # Central differences give the Jacobian independently of funcgrad's derivative rules.
    eps = 1e-6
    jac = np.stack(
        [(np.asarray(f(x + eps * e)) - np.asarray(f(x - eps * e))) / (2 * eps) for e in np.eye(3)],
        axis=1,
    )
    assert_allclose(got, jac.T @ ct, rtol=1e-6, atol=1e-8)
    assert_allclose(got, fg.vjp(f, x)[1](ct)[0])
    assert_allclose(np.dot(ct, f_lin(t)), np.dot(got, t))


# ---------------------------------------------------------------------------------------------
# clear_caches


def test_clear_caches_retraces_jitted_functions():
    traces = []

    @fg.jit
    def f(x):
        traces.append(1)
        return x * 2.0

    grad_f = fg.grad(lambda x: f(x) ** 2)
    f(1.0), f(2.0), grad_f(1.0)
    assert len(traces) == 1
    fg.clear_caches()
    assert float(f(3.0)) == 6.0 and len(traces) == 2
    assert float(grad_f(1.0)) == 8.0 and len(traces) == 2
    pmapped = fg.pmap(lambda x: (traces.append(1), x + 1.0)[1])
    pmapped(np.ones(1)), pmapped(np.ones(1))
    assert len(traces) == 3
    fg.clear_caches()
    pmapped(np.ones(1))
    assert len(traces) == 4


# ---------------------------------------------------------------------------------------------
# named_scope, named_call


def scoped(x):
    with fg.named_scope("outer"):
        y = fnp.sin(x)
        with fg.named_scope("inner"):
            y = y * 2.0
    return fg.named_call(lambda z: z + 1.0, name="plus")(y) - fg.named_call(fnp.cos)(x)


def test_named_scopes_label_equations():
    closed = fg.make_jaxpr(scoped)(1.0)
    scopes = [eqn.source_info.scope for eqn in closed.eqns]
    assert scopes == ["outer", "outer/inner", "plus", "cos", ""]
    text = fg.jit(scoped).lower(1.0).as_text(source_info=True)
    assert "[outer/inner]" in text and "[plus]" in text
    # Names change nothing about what is computed, under any transformation.
    expected = 2 * np.sin(0.5) + 1 - np.cos(0.5)
    assert_allclose(scoped(0.5), expected, rtol=1e-6)
    assert_allclose(fg.grad(scoped)(0.5), 2 * np.cos(0.5) + np.sin(0.5), rtol=1e-6)
    assert_allclose(fg.vmap(scoped)(np.full(2, 0.5)), [expected] * 2, rtol=1e-6)


def test_named_scope_rejects_non_strings():
    with pytest.raises(TypeError, match="string"):
        with fg.named_scope(3):
            pass


# ---------------------------------------------------------------------------------------------
# ensure_compile_time_eval


def test_ensure_compile_time_eval_gives_concrete_values_under_jit():
    @fg.jit
    def f(x):
        with fg.ensure_compile_time_eval():
            table = fnp.cos(fnp.arange(4.0))
            peak = int(table.argmin())  # concrete: usable in Python
        assert not isinstance(table, fg.core.Tracer)
        return x * table[peak], x * fnp.ones(peak)

    scaled, ones = f(2.0)
    assert_allclose(scaled, 2 * np.cos(3.0), rtol=1e-6)
    assert ones.shape == (3,)
    # Operations on traced values are still staged.
    closed = fg.make_jaxpr(f)(2.0)
    assert "cos" not in str(closed) and "mul" in str(closed)


def test_without_ensure_compile_time_eval_constants_are_traced():
    @fg.jit
    def f(x):
        return int(fnp.cos(fnp.arange(4.0)).argmin())

    with pytest.raises(fg.errors.ConcretizationTypeError):
        f(1.0)


# ---------------------------------------------------------------------------------------------
# typeof, print_environment_info


def test_typeof():
    assert fg.typeof(np.ones((2, 3), np.float32)) == fg.ShapedArray((2, 3), np.dtype(np.float32))
    assert fg.typeof(1.0).weak_type
    seen = []
    fg.jit(lambda x: seen.append(fg.typeof(x)) or x)(np.ones(3))
    assert seen == [fg.ShapedArray((3,), np.dtype(np.float64))]


def test_print_environment_info(capsys):
    text = fg.print_environment_info(return_string=True)
    assert "funcgrad:" in text and "numpy:" in text and "devices:" in text
    assert fg.print_environment_info() is None
    assert "funcgrad:" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# closure_convert


def test_closure_convert_hoists_traced_values_only():
    w = np.arange(3.0)

    def f(x):
        return x * w

    converted, hoisted = fg.closure_convert(f, np.ones(3))
    assert hoisted == []
    assert_allclose(converted(np.ones(3)), w)

    def outer(scale):
        def g(x):
            return {"y": x * scale + w}

        converted, hoisted = fg.closure_convert(g, 1.0)
        assert len(hoisted) == isinstance(scale, fg.core.Tracer)
        return converted(2.0, *hoisted)["y"].sum()

    assert_allclose(outer(3.0), 18.0 + w.sum())
    assert_allclose(fg.grad(outer)(3.0), 6.0)
    assert_allclose(fg.jit(outer)(3.0), 18.0 + w.sum())


def test_closure_convert_lets_custom_vjp_see_closed_over_values():
    """A fixed-point-style helper whose rule needs the function's parameters as arguments."""

    def apply(fun, x):
        converted, hoisted = fg.closure_convert(fun, x)
        return _apply(converted, x, *hoisted)

    def _apply_impl(fun, x, *params):
        return fun(x, *params)

    _apply = fg.custom_vjp(_apply_impl, nondiff_argnums=(0,))

    def fwd(fun, x, *params):
        return fun(x, *params), (x, params)

    def bwd(fun, residuals, ct):
        x, params = residuals
        _, pullback = fg.vjp(fun, x, *params)
        return pullback(ct)

    _apply.defvjp(fwd, bwd)

    def loss(scale):
        return apply(lambda x: fnp.sin(x * scale), 2.0)

    assert_allclose(fg.grad(loss)(0.3), 2.0 * np.cos(0.6), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# custom_batching.custom_vmap


def make_sin_with_cos_rule():
    """sin(x) * y whose vmap rule (deliberately) computes cos(x) * y, so a result shows which
    ran; the rule's calls are recorded."""
    calls = []

    @fg.custom_batching.custom_vmap
    def f(x, y):
        return fnp.sin(x) * y

    @f.def_vmap
    def rule(axis_size, in_batched, xs, ys):
        calls.append((axis_size, in_batched, fnp.shape(xs), fnp.shape(ys)))
        return fnp.cos(xs) * ys, in_batched[0] or in_batched[1]

    return f, calls


X3 = np.array([0.3, -1.2, 2.0])


def test_custom_vmap_runs_the_function_outside_vmap():
    f, calls = make_sin_with_cos_rule()
    expected = np.sin(0.5) * 2.0
    assert_allclose(f(0.5, 2.0), expected, rtol=1e-6)
    assert_allclose(fg.jit(f)(0.5, 2.0), expected, rtol=1e-6)
    assert_allclose(f(x=0.5, y=2.0), expected, rtol=1e-6)
    assert_allclose(fg.grad(f)(0.5, 2.0), np.cos(0.5) * 2.0, rtol=1e-6)
    assert calls == []


def test_custom_vmap_calls_the_rule_under_vmap():
    f, calls = make_sin_with_cos_rule()
    assert_allclose(fg.vmap(f)(X3, X3), np.cos(X3) * X3)
    assert calls == [(3, [True, True], (3,), (3,))]
    # Unbatched arguments reach the rule as they are; other axes are moved to the front.
    assert_allclose(fg.vmap(f, in_axes=(0, None))(X3, 2.0), np.cos(X3) * 2.0)
    assert calls[-1] == (3, [True, False], (3,), ())
    xs = np.stack([X3, 2 * X3], axis=1)
    assert_allclose(fg.vmap(f, in_axes=(1, None))(xs, 2.0), np.cos(xs.T) * 2.0)
    assert calls[-1][2] == (2, 3)
    assert_allclose(fg.jit(fg.vmap(f))(X3, X3), np.cos(X3) * X3)
    assert_allclose(fg.vmap(fg.jit(f))(X3, X3), np.cos(X3) * X3)
    assert_allclose(fg.vmap(fg.vmap(f))(X3[None], X3[None]), np.cos(X3)[None] * X3)


def test_custom_vmap_with_pytrees_and_unbatched_outputs():
    @fg.custom_batching.custom_vmap
    def f(p):
        return {"sum": p["a"].sum(), "scaled": p["a"] * p["b"]}

    @f.def_vmap
    def rule(axis_size, in_batched, p):
        assert in_batched == [{"a": True, "b": False}]
        # "sum" is claimed unbatched: the rule returns the first lane's sum for every lane.
        return {"sum": p["a"][0].sum(), "scaled": p["a"] * p["b"]}, {"sum": False, "scaled": True}

    a = RNG.standard_normal((4, 3))
    out = fg.vmap(f, in_axes=({"a": 0, "b": None},))({"a": a, "b": 2.0})
    assert_allclose(out["sum"], np.full(4, a[0].sum()))
    assert_allclose(out["scaled"], 2.0 * a)


def test_custom_vmap_forward_mode_uses_the_rule_under_vmap():
    f, calls = make_sin_with_cos_rule()
    primal, tangent = fg.jvp(f, (0.5, 2.0), (1.0, 0.0))
    assert_allclose(tangent, np.cos(0.5) * 2.0, rtol=1e-6)
    # vmap of jvp batches the jvp of the rule: d/dx cos(x) * y.
    primals, tangents = fg.vmap(lambda x, t: fg.jvp(f, (x, 2.0), (t, 0.0)))(X3, np.ones(3))
    assert_allclose(primals, np.cos(X3) * 2.0)
    assert_allclose(tangents, -np.sin(X3) * 2.0)
    assert_allclose(fg.jacfwd(lambda x: f(x, 2.0))(X3), np.diag(-np.sin(X3) * 2.0))


def test_custom_vmap_reverse_mode():
    f, calls = make_sin_with_cos_rule()
    # grad of vmap differentiates the rule (JAX's semantics)...
    got = fg.grad(lambda x: fg.vmap(f)(x, x).sum())(X3)
    assert_allclose(got, -np.sin(X3) * X3 + np.cos(X3))
    # ... and grad of the function differentiates the function, also where JAX refuses: its
    # pullback is the transposed derivative of the function, which vmap batches as usual.
    assert_allclose(fg.jit(fg.grad(f))(0.5, 2.0), np.cos(0.5) * 2.0, rtol=1e-6)
    assert_allclose(fg.vmap(fg.grad(f))(X3, X3), np.cos(X3) * X3)
    check_grads(f, (X3, X3 + 1.0), order=2, modes=["fwd", "rev"])


def test_custom_vmap_closing_over_values():
    scale = np.float64(3.0)

    def outer(scale):
        @fg.custom_batching.custom_vmap
        def f(x):
            return x * scale

        @f.def_vmap
        def rule(axis_size, in_batched, xs):
            return xs * scale, True

        return f

    assert_allclose(fg.vmap(outer(scale))(X3), 3.0 * X3)
    assert_allclose(fg.grad(lambda s: fg.vmap(outer(s))(X3).sum())(scale), X3.sum())
    with pytest.raises(TypeError, match="closes over a value that vmap is batching"):
        fg.vmap(lambda s: outer(s)(1.0))(X3)


def test_custom_vmap_checks_the_rule():
    @fg.custom_batching.custom_vmap
    def f(x):
        return x + 1.0

    with pytest.raises(AttributeError, match="def_vmap"):
        fg.vmap(f)(X3)
    f.def_vmap(lambda axis_size, in_batched, x: (x + 1.0, False))
    with pytest.raises(TypeError, match="marks unbatched"):
        fg.vmap(f)(X3)
    f.def_vmap(lambda axis_size, in_batched, x: (x + 1.0, [True]))
    with pytest.raises(TypeError, match="out_batched"):
        fg.vmap(f)(X3)
    f.def_vmap(lambda axis_size, in_batched, x: x)
    with pytest.raises(TypeError, match="pair"):
        fg.vmap(f)(X3)


def test_sequential_vmap_runs_lanes_in_a_loop():
    @fg.custom_batching.sequential_vmap
    def f(x, y):
        return fnp.sum(x) * y

    xs = RNG.standard_normal((3, 4))
    assert_allclose(fg.vmap(f, in_axes=(0, None))(xs, 2.0), xs.sum(1) * 2.0)
    closed = fg.make_jaxpr(fg.vmap(f, in_axes=(0, None)))(xs, 2.0)
    assert [eqn.primitive.name for eqn in closed.eqns] == ["scan"]


def test_linear_transpose_differentiates_in_closed_over_values():
    def f(scale):
        transpose = fg.linear_transpose(lambda x: scale * x[::-1], np.ones(3))
        return transpose(np.arange(3.0))[0].sum()

    assert_allclose(fg.grad(f)(2.0), 3.0, rtol=1e-6)


def test_new_names_are_public():
    names = {
        "linear_transpose",
        "image",
        "clear_caches",
        "named_call",
        "named_scope",
        "ensure_compile_time_eval",
        "typeof",
        "print_environment_info",
        "closure_convert",
        "custom_batching",
    }
    assert names <= set(fg.__all__)
    assert {"resize", "scale_and_translate", "ResizeMethod"} <= set(fg.image.__all__)
    assert {"custom_vmap", "sequential_vmap"} <= set(fg.custom_batching.__all__)


# ---------------------------------------------------------------------------------------------
# Option scopes, namespaces and small names


def test_option_scopes_set_and_restore():
    for scope, option, inside in [
        (fg.check_tracer_leaks(), "check_tracer_leaks", True),
        (fg.numpy_rank_promotion("raise"), "numpy_rank_promotion", "raise"),
        (fg.threefry_partitionable(False), "threefry_partitionable", False),
    ]:
        before = getattr(fg.config, option)
        with scope:
            assert getattr(fg.config, option) == inside
        assert getattr(fg.config, option) == before
    with fg.numpy_rank_promotion("raise"):
        with pytest.raises(ValueError, match="rank"):
            fnp.add(fnp.ones(3), fnp.ones((2, 3)))
    with pytest.raises(ValueError, match="numpy_rank_promotion must be"):
        with fg.numpy_rank_promotion("sometimes"):
            pass
    # The earlier derivation: the counters 0 .. 2n-1 halved into blocks, not one per key.
    with fg.threefry_partitionable(False):
        earlier = np.asarray(fg.random.split(fg.random.PRNGKey(0), 3))
    counters = np.arange(6, dtype=np.uint32)
    expected = fg.lax.threefry2x32(np.uint32(0), np.uint32(0), counters[:3], counters[3:])
    np.testing.assert_array_equal(earlier, np.concatenate(expected).reshape(3, 2))


def test_lax_exports_its_primitives_under_their_names():
    def f(x):
        return fg.lax.cond(True, fnp.sin, fnp.cos, x) + fnp.linalg.qr(x)[0]

    closed = fg.make_jaxpr(f)(np.eye(2))
    for eqn in closed.eqns:
        namespace = fg.lax.linalg if eqn.primitive.name == "qr" else fg.lax
        assert getattr(namespace, f"{eqn.primitive.name}_p") is eqn.primitive
    assert {"add_p", "scan_p", "while_p", "psum_p", "dot_general_p"} <= set(dir(fg.lax))


def test_effects_barrier_finds_callbacks_done():
    seen = []
    f = fg.jit(lambda x: fg.debug.callback(seen.append, x) or x + 1)
    f(np.float32(1))
    assert len(seen) == 1
    assert fg.effects_barrier() is None and len(seen) == 1


def test_stages_typing_and_other_namespaces(tmp_path):
    jitted = fg.jit(lambda x: x * 2)
    lowered = jitted.lower(np.ones(2, np.float32))
    assert isinstance(jitted, fg.stages.Wrapped) and isinstance(lowered, fg.stages.Lowered)
    assert isinstance(lowered.compile(), fg.stages.Compiled)
    for value in (fnp.ones(2), np.ones(2), np.float32(1), 3, 2.5, True, 1j):
        assert isinstance(value, fg.typing.ArrayLike)
    assert not isinstance("3", fg.typing.ArrayLike)
    assert fg.NamedSharding is fg.sharding.NamedSharding
    assert fg.process_indices() == list(range(fg.process_count())) == [0]
    from funcgrad.experimental.compilation_cache import compilation_cache

    before = fg.config.compilation_cache_dir
    try:
        compilation_cache.set_cache_dir(tmp_path)
        assert fg.config.compilation_cache_dir == str(tmp_path)
        compilation_cache.reset_cache()
        assert fg.config.compilation_cache_dir != str(tmp_path)
    finally:
        fg.config.update("compilation_cache_dir", before)
