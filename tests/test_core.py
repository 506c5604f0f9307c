"""The tracing core: traces, tracers, staging into jaxprs, and the errors that teach."""

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import core, lax
from funcgrad.errors import (
    ConcretizationTypeError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerLeakError,
    UnexpectedTracerError,
)
from funcgrad.interpreters.staging import StagingTrace
from funcgrad.ir import ClosedJaxpr, eval_jaxpr
from funcgrad.lax.elementwise import sin_p


def test_make_jaxpr_pins_a_simple_program():
    jaxpr = fg.make_jaxpr(lambda x: fnp.sin(x) * 2.0 + x)(np.ones(3, np.float32))
    assert str(jaxpr) == (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = sin a\n"
        "    c:f32[3] = mul b 2.0:f32[]\n"
        "    d:f32[3] = add c a\n"
        "  in (d,) }"
    )


def test_make_jaxpr_of_pytrees_flattens_inputs_and_outputs():
    def f(params, x):
        return {"y": params["w"] * x + params["b"], "x": x}

    params = {"b": np.zeros(2, np.float32), "w": np.ones(2, np.float32)}
    jaxpr, shapes = fg.make_jaxpr(f, return_shape=True)(params, np.ones(2, np.float32))
    assert str(jaxpr) == (
        "{ lambda ; a:f32[2] b:f32[2] c:f32[2]. let\n"
        "    d:f32[2] = mul b c\n"
        "    e:f32[2] = add d a\n"
        "  in (c, e) }"
    )
    assert shapes == {
        "x": fg.ShapeDtypeStruct((2,), np.float32),
        "y": fg.ShapeDtypeStruct((2,), np.float32),
    }


def test_closed_over_arrays_become_constvars_and_scalars_literals():
    table = fnp.array([1.0, 2.0, 3.0])
    closed = fg.make_jaxpr(lambda x: x * table + 1.0)(np.ones(3, np.float32))
    assert str(closed).startswith("{ lambda a:f32[3]; b:f32[3]. let")
    assert "add c 1.0:f32[]" in str(closed)
    assert len(closed.consts) == 1 and closed.consts[0] is table


def test_eval_jaxpr_reproduces_eager_values():
    def f(x, y):
        return fnp.tanh(x) * y - fnp.exp(y) / 3.0

    x = fnp.array([0.5, -1.0, 2.0])
    y = fnp.array([1.0, 2.0, 0.25])
    closed = f and fg.make_jaxpr(f)(x, y)
    assert isinstance(closed, ClosedJaxpr)
    (out,) = eval_jaxpr(closed.jaxpr, closed.consts, x, y)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(f(x, y)))


def test_make_jaxpr_of_float0_tangents():
    """Tangents of integer values hold no data: returned, they are literal outputs of the
    program; passed in, they are inputs nothing reads. The program still evaluates to what the
    function returns."""
    count = np.int32(3)
    float0 = fg.dtypes.float0

    def f(x):
        return fg.jvp(lambda a, i: (a * i, i), (x, count), (np.float32(1), np.zeros((), float0)))

    closed, shapes = fg.make_jaxpr(f, return_shape=True)(np.float32(2))
    assert str(closed).endswith("  in (c, 3:i32[], d, 0:float0[]) }")
    assert closed.out_avals[3] == core.ShapedArray((), float0)
    assert shapes[1][1] == fg.ShapeDtypeStruct((), float0)
    assert repr(shapes[1][1]) == "ShapeDtypeStruct(shape=(), dtype=float0)"
    *values, tangent = eval_jaxpr(closed.jaxpr, closed.consts, fnp.asarray(np.float32(2)))
    np.testing.assert_array_equal(values, [6.0, 3.0, 3.0])
    assert tangent.dtype == float0 and tangent.shape == ()

    def push(x, t):
        return fg.jvp(lambda a: a * 2, (x,), (t,))

    ints, zeros = np.ones(3, np.int32), np.zeros(3, float0)
    closed = fg.make_jaxpr(push)(ints, zeros)
    assert str(closed) == (
        "{ lambda ; a:i32[3] b:float0[3]. let\n"
        "    c:i32[3] = mul a 2:i32[]\n"
        "  in (c, 0:float0[3]) }"
    )
    doubled, tangent = eval_jaxpr(closed.jaxpr, closed.consts, fnp.asarray(ints), zeros)
    np.testing.assert_array_equal(doubled, [2, 2, 2])
    assert tangent.dtype == float0 and tangent.shape == (3,)
    # The program runs under jit too: the float0 output comes back as jit returns them.
    _, jitted = fg.jit(lambda x: eval_jaxpr(closed.jaxpr, closed.consts, x, zeros))(ints)
    assert jitted.dtype == float0 and jitted.shape == (3,)


def test_static_argnums_are_python_values_in_the_trace():
    def f(x, n):
        for _ in range(n):
            x = x * 2.0
        return x

    closed = fg.make_jaxpr(f, static_argnums=1)(np.ones(2, np.float32), 3)
    assert [e.primitive.name for e in closed.eqns] == ["mul", "mul", "mul"]


def test_weak_types_flow_through_staging():
    closed = fg.make_jaxpr(lambda x: x + 1.0)(1.0)
    assert closed.in_avals[0].weak_type
    assert closed.out_avals[0].weak_type
    closed = fg.make_jaxpr(lambda x: x + 1.0)(np.float32(1.0))
    assert not closed.out_avals[0].weak_type


def test_source_info_names_the_users_line():
    def f(x):
        return fnp.cos(x)  # the line recorded for `cos`

    closed = fg.make_jaxpr(f)(np.ones(2, np.float32))
    (eqn,) = closed.eqns
    assert eqn.source_info.file == __file__
    assert eqn.source_info.function == "f"
    assert "test_core.py" in closed.pretty_print(source_info=True)


def test_bool_of_a_traced_value_raises_a_teaching_error():
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(TracerBoolConversionError, match="make_jaxpr\\(.*f\\)") as info:
        fg.make_jaxpr(f)(1.0)
    assert "static_argnums" in str(info.value)
    assert "lax.cond" in str(info.value)


def test_int_and_numpy_conversion_of_a_traced_value_raise():
    with pytest.raises(ConcretizationTypeError, match="concrete value"):
        fg.make_jaxpr(lambda x: int(x))(1)
    with pytest.raises(TracerArrayConversionError, match="cannot be converted to a NumPy"):
        fg.make_jaxpr(lambda x: np.asarray(x))(np.ones(2, np.float32))


def test_escaped_tracer_is_reported_where_it_was_created(monkeypatch):
    # Found where the escaped tracer is used, also with the leak checker off (as by default).
    monkeypatch.setattr(fg.config, "check_tracer_leaks", False)
    leaked = []

    def leak(x):
        leaked.append(x)
        return x

    fg.make_jaxpr(leak)(np.ones(2, np.float32))
    with pytest.raises(UnexpectedTracerError, match="escaped tracer.*make_jaxpr\\(.*leak\\)"):
        fnp.sin(leaked[0])
    with pytest.raises(UnexpectedTracerError):
        fg.make_jaxpr(lambda y: y + leaked[0])(np.ones(2, np.float32))


def test_nested_staging_treats_outer_tracers_as_constants(monkeypatch):
    # The inner jaxpr is kept to be read, with the outer tracer it holds: a leak, on purpose.
    monkeypatch.setattr(fg.config, "check_tracer_leaks", False)
    inner_jaxprs = []

    def outer(x):
        inner_jaxprs.append(fg.make_jaxpr(lambda y: y * x)(np.ones(2, np.float32)))
        return x

    fg.make_jaxpr(outer)(np.ones(2, np.float32))
    (inner,) = inner_jaxprs
    assert len(inner.jaxpr.constvars) == 1
    assert isinstance(inner.consts[0], core.Tracer)


def test_current_trace_is_restored_after_an_error():
    before = core.current_trace()
    with pytest.raises(TracerBoolConversionError):
        fg.make_jaxpr(lambda x: bool(x))(1.0)
    assert core.current_trace() is before is core.eval_trace()


def test_the_current_trace_is_per_thread():
    import threading

    seen = []
    trace = StagingTrace(core.eval_trace(), "test")
    with core.set_current_trace(trace):
        thread = threading.Thread(target=lambda: seen.append(core.current_trace()))
        thread.start()
        thread.join()
    assert seen == [core.eval_trace()]


def test_primitive_names_are_unique():
    with pytest.raises(ValueError, match="already declared"):
        core.Primitive("sin")


def test_eager_outputs_are_funcgrad_arrays_with_the_staged_aval():
    x = fnp.array([1.0, 2.0])
    out = lax.add(x, 2.0)
    assert isinstance(out, fg.Array)
    assert out.aval == fg.make_jaxpr(lambda x: lax.add(x, 2.0))(x).out_avals[0]


def test_eager_rejects_raw_numpy_operands_at_bind_with_a_clear_error():
    with pytest.raises(TypeError, match="operand of type ndarray"):
        sin_p.bind(np.ones(2, np.float32))


def test_tracer_shape_properties():
    def f(x):
        assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and len(x) == 2
        assert x.dtype == np.float32
        return x

    fg.make_jaxpr(f)(np.ones((2, 3), np.float32))


# ---------------------------------------------------------------------------------------------
# The tracer leak checker


def _leak_into(store: list):
    def f(x):
        doubled = x * 2.0
        store.append(doubled)
        return fnp.sin(x)

    return f


_LEAK_LINE = _leak_into.__code__.co_firstlineno + 2  # the line of `doubled = x * 2.0`


@pytest.mark.parametrize(
    "transform, arg, name, expected",
    [
        (fg.jit, np.float32(1.0), "jit", np.sin(1.0)),
        (fg.grad, np.float32(1.0), "vjp", np.cos(1.0)),
        (fg.vmap, np.ones(3, np.float32), "vmap", np.sin(np.ones(3))),
        (lambda f: lambda x: fg.jvp(f, (x,), (x,))[1], np.float32(1.0), "jvp", np.cos(1.0)),
    ],
)
def test_leak_checker_names_the_transformation_value_and_line(
    transform, arg, name, expected, monkeypatch
):
    leaked = []
    with fg.checking_leaks():
        with pytest.raises(TracerLeakError) as info:
            transform(_leak_into(leaked))(arg)
    message = str(info.value)
    assert f"leaked from {name}(" in message
    assert f"f32[] made by mul at {__file__}:{_LEAK_LINE} (f), held by a list" in message
    # Off (the default), the transformation returns, and the escaped tracer fails where used.
    monkeypatch.setattr(fg.config, "check_tracer_leaks", False)
    leaked.clear()
    np.testing.assert_allclose(transform(_leak_into(leaked))(arg), expected, rtol=1e-6)
    with pytest.raises(UnexpectedTracerError):
        leaked[0] + 1


def test_leak_checker_finds_inputs_and_closures_and_takes_its_option_names():
    keep = {}

    def closure_leak(x):
        keep["later"] = lambda: x
        return x

    fg.config.update("jax_check_tracer_leaks", True)
    try:
        with pytest.raises(
            TracerLeakError, match=r"f32\[2\] with no recorded origin \(an input.*held by a cell"
        ):
            fg.jit(closure_leak)(np.ones(2, np.float32))
    finally:
        fg.config.update("check_tracer_leaks", False)
    assert not fg.config.check_tracer_leaks
    with pytest.raises(TypeError, match="True or False"):
        fg.config.update("check_tracer_leaks", 1)


def test_leak_checker_names_a_users_generator_but_not_its_own():
    """The checker runs in a generator (`trace_lifetime`) whose frame, from Python 3.12,
    holds the tracers it describes (the test above fails there if that one is named); a
    user's generator holding a tracer is still named."""

    def suspended(value):
        yield value

    generators = []

    def f(x):
        generators.append(suspended(x * 2.0))
        return x

    with fg.checking_leaks(), pytest.raises(TracerLeakError) as info:
        fg.jit(f)(np.float32(1.0))
    assert "f32[] made by mul" in str(info.value)
    assert "held by a generator\n" in str(info.value)


def test_leak_checker_passes_clean_nested_transformations():
    def f(x):
        inner = fg.jit(lambda y: fg.vmap(lambda z: z * y)(fnp.ones(3)))(x)
        return fnp.sum(inner * x)

    with fg.checking_leaks():
        grads = fg.vmap(fg.grad(f))(np.arange(3.0, dtype=np.float32))
        values = fg.jit(fg.vmap(f))(np.arange(3.0, dtype=np.float32))
    np.testing.assert_allclose(grads, 6 * np.arange(3.0), rtol=1e-6)  # d/dx 3x^2
    np.testing.assert_allclose(values, 3 * np.arange(3.0) ** 2, rtol=1e-6)
    assert not fg.config.check_tracer_leaks
