"""Debugging: debug.print / debug.callback under every transform, debug_nans, disable_jit,
source locations in staged programs, and the errors that explain tracing to a user."""

import inspect
import io
import logging
import os

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given
from hypothesis import strategies as st
from strategies import arrays, float_dtypes, shapes

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.errors import ConcretizationTypeError, UnexpectedTracerError

THIS_FILE = __file__


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def line_of(fun, text: str) -> int:
    """The line number, in this file, of the first line of `fun` containing `text`."""
    source, start = inspect.getsourcelines(fun)
    return start + next(i for i, line in enumerate(source) if text in line)


@pytest.fixture
def debug_nans():
    fg.config.update("debug_nans", True)
    yield
    fg.config.update("debug_nans", False)


# ---------------------------------------------------------------------------------------------
# debug.print and debug.callback


def test_print_formats_positional_and_keyword_arguments_eagerly(capsys):
    fg.debug.print("x={} y={y} s={}", fnp.asarray(2.0), "static", y=np.arange(3))
    assert lines(capsys) == ["x=2.0 y=[0 1 2] s=static"]


def test_print_inside_jit_prints_on_every_call_not_at_trace_time(capsys):
    @fg.jit
    def f(x):
        fg.debug.print("x: {}", x)
        y = fnp.sin(x)
        fg.debug.print("y: {y:.3f}", y=y)
        return y

    f.lower(1.0)  # tracing alone runs nothing
    assert lines(capsys) == []
    f(0.0)
    f(2.0)
    assert lines(capsys) == ["x: 0.0", "y: 0.000", "x: 2.0", f"y: {np.sin(2.0):.3f}"]


def test_print_inside_vmap_prints_each_lane_in_order(capsys):
    def f(x, scale):
        fg.debug.print("x: {} scale: {}", x, scale)
        # Exact arithmetic, so the printed values are the same on every backend.
        y = (x * x + 0.5) * scale
        fg.debug.print("y: {}", y)
        return y

    xs = np.arange(3.0, dtype=np.float32)
    fg.vmap(f, in_axes=(0, None))(xs, np.float32(2.0))
    ys = (xs * xs + np.float32(0.5)) * np.float32(2.0)
    expected = [f"x: {x} scale: 2.0" for x in xs] + [f"y: {y}" for y in ys]
    assert lines(capsys) == expected
    # Staged under jit, the lanes print when the program runs, in the same order.
    fg.jit(fg.vmap(f, in_axes=(0, None)))(xs, np.float32(2.0))
    assert lines(capsys) == expected


def test_print_inside_nested_vmap_follows_jax_lane_order(capsys):
    # JAX unrolls the inner vmap's lanes first: lane (i, j) prints in the order of (j, i).
    def f(x):
        fg.debug.print("{}", x)
        return x

    xs = np.arange(6.0).reshape(2, 3)
    fg.vmap(fg.vmap(f))(xs)
    assert lines(capsys) == [str(v) for v in xs.T.reshape(-1)]


@given(arrays(float_dtypes, shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)), st.data())
def test_callback_under_vmap_gets_every_lane_along_any_axis(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    seen = []
    fg.vmap(lambda lane: fg.debug.callback(seen.append, lane), in_axes=axis)(x)
    assert len(seen) == x.shape[axis]
    for i, lane in enumerate(seen):
        assert lane.dtype == x.dtype
        np.testing.assert_array_equal(lane, np.take(x, i, axis=axis))


def test_print_inside_grad_prints_the_primal_once(capsys):
    def f(x):
        fg.debug.print("x: {}", x)
        return fnp.sin(x) * x

    g = fg.grad(f)(1.5)
    assert lines(capsys) == ["x: 1.5"]
    np.testing.assert_allclose(g, np.cos(1.5) * 1.5 + np.sin(1.5), rtol=1e-6)
    fg.grad(fg.jit(f))(0.5)
    fg.jit(fg.grad(f))(0.25)
    fg.jvp(f, (2.0,), (1.0,))
    assert lines(capsys) == ["x: 0.5", "x: 0.25", "x: 2.0"]


def test_prints_and_callbacks_run_in_program_order_under_jit(capsys):
    events = []

    @fg.jit
    def f(x):
        fg.debug.callback(lambda v: events.append(("first", float(v))), x)
        fg.debug.print("middle {}", x + 1)
        fg.debug.callback(lambda v: events.append(("last", float(v))), x * 10)
        return x

    f(1.0)
    f(2.0)
    assert events == [("first", 1.0), ("last", 10.0), ("first", 2.0), ("last", 20.0)]
    assert lines(capsys) == ["middle 2.0", "middle 3.0"]


def test_an_exception_in_a_callback_reaches_the_caller_of_the_jitted_function():
    def check(x):
        if x.sum() > 2:
            raise ValueError(f"sum too large: {x.sum()}")

    @fg.jit
    def f(x):
        fg.debug.callback(check, x)
        return x * 2

    with pytest.raises(ValueError, match="sum too large: 3.0"):
        f(fnp.ones(3))
    np.testing.assert_array_equal(f(fnp.ones(1)), [2.0])  # the next call is clean


def test_callback_receives_read_only_numpy_arrays_and_static_leaves():
    received = []

    def record(*args, **kwargs):
        received.append((args, kwargs))

    @fg.jit
    def f(x, tree):
        assert fg.debug.callback(record, x, "label", tree, n=3) is None
        return x

    x = np.arange(4.0)
    f(x, {"a": np.ones(2, np.int32), "b": (np.float32(1.5),)})
    ((args, kwargs),) = received
    value, label, tree = args
    assert type(value) is np.ndarray and value.dtype == np.float64
    np.testing.assert_array_equal(value, x)
    assert label == "label"
    assert tree["a"].dtype == np.int32 and tree["b"][0].shape == ()
    assert kwargs["n"] == 3 and type(kwargs["n"]) is np.ndarray
    with pytest.raises(ValueError, match="read-only"):
        value[0] = 1.0


def test_debug_callback_is_one_effectful_equation_with_no_outputs():
    def f(x):
        fg.debug.print("{}", x)
        return x * 2

    jaxpr = fg.make_jaxpr(f)(1.0)
    (eqn, _) = jaxpr.eqns
    assert eqn.primitive.name == "debug_callback" and eqn.outvars == []
    assert eqn.primitive.has_effects
    assert "print('{}')" in str(jaxpr)


def test_print_checks_its_format_fields_at_trace_time():
    with pytest.raises(IndexError, match=r"positional argument 1, but 1"):
        fg.make_jaxpr(lambda x: fg.debug.print("{} {}", x))(1.0)
    with pytest.raises(KeyError, match=r"keyword argument 'y'"):
        fg.make_jaxpr(lambda x: fg.debug.print("{y}", x))(1.0)
    with pytest.raises(TypeError, match="expects a callable"):
        fg.debug.callback("not callable", 1.0)


def test_log_records_each_run_at_info_with_the_callers_line(caplog):
    @fg.jit
    def f(x):
        fg.debug.log("x={} tag={tag}", x, tag="t")
        return x + 1

    caplog.set_level(logging.INFO, logger="funcgrad.debug")
    f(1.0)
    f(2.0)
    assert [r.getMessage() for r in caplog.records] == ["x=1.0 tag=t", "x=2.0 tag=t"]
    for record in caplog.records:
        assert (record.name, record.levelno) == ("funcgrad.debug", logging.INFO)
        assert (record.pathname, record.lineno) == (THIS_FILE, line_of(f, "debug.log"))
    with pytest.raises(IndexError, match="debug.log: format string 'x={}' refers to positional"):
        fg.debug.log("x={}")


def test_log_below_the_loggers_level_records_nothing(caplog):
    caplog.set_level(logging.WARNING, logger="funcgrad.debug")
    fg.debug.log("quiet {}", 1)
    assert caplog.records == []


# ---------------------------------------------------------------------------------------------
# debug.breakpoint, driven through its stdin and stdout


def scripted(*commands: str) -> dict:
    """Streams for a breakpoint's debugger: it reads `commands` (every session continuing
    where the last stopped) and writes what it shows to `stdout`."""
    return {"stdin": io.StringIO("".join(c + "\n" for c in commands)), "stdout": io.StringIO()}


def test_breakpoint_under_jit_shows_each_runs_values():
    streams = scripted("p y", "p params['w'] * 10", "c", "p y", "c")

    @fg.jit
    def f(x):
        params = {"w": x, "scale": 2}
        y = params["w"] * params["scale"] + 1
        fg.debug.breakpoint(**streams)
        return y

    f.lower(np.zeros(2, np.float32))  # tracing alone opens no debugger
    assert streams["stdout"].getvalue() == ""
    np.testing.assert_array_equal(f(np.array([0.0, 1.0], np.float32)), [1.0, 3.0])
    f(np.array([2.0, 3.0], np.float32))
    assert streams["stdout"].getvalue() == (
        "Entering fgdb:\n"
        "(fgdb) Array([1., 3.], dtype=float32)\n"
        "(fgdb) Array([ 0., 10.], dtype=float32)\n"
        "(fgdb) Entering fgdb:\n"
        "(fgdb) Array([5., 7.], dtype=float32)\n"
        "(fgdb) "
    )


def test_breakpoint_under_vmap_opens_once_per_lane():
    streams = scripted("p x, y", "c", "p x, y", "c")

    def f(x):
        y = x * 3
        fg.debug.breakpoint(**streams)
        return y

    fg.vmap(f)(np.array([1.0, 2.0], np.float32))
    assert streams["stdout"].getvalue() == (
        "Entering fgdb:\n"
        "(fgdb) (Array(1., dtype=float32), Array(3., dtype=float32))\n"
        "(fgdb) Entering fgdb:\n"
        "(fgdb) (Array(2., dtype=float32), Array(6., dtype=float32))\n"
        "(fgdb) "
    )


def test_breakpoint_under_grad_shows_primals_once_and_keeps_the_gradient():
    streams = scripted("p x", "c")

    def f(x):
        fg.debug.breakpoint(**streams)
        return x * x

    assert float(fg.grad(f)(3.0)) == 6.0
    assert streams["stdout"].getvalue() == (
        "Entering fgdb:\n(fgdb) Array(3., dtype=float32, weak_type=True)\n(fgdb) "
    )


def test_breakpoint_moves_between_frames_and_lists_source():
    streams = scripted("w", "up", "p outer_value", "down", "p nope", "c")

    def inner(x):
        fg.debug.breakpoint(**streams)
        return x

    def outer(x):
        outer_value = x + 1
        return inner(outer_value)

    fg.jit(outer)(1.0)
    inner_line = line_of(inner, "debug.breakpoint")
    outer_line = line_of(outer, "return inner")
    top_line = line_of(test_breakpoint_moves_between_frames_and_lists_source, "fg.jit(outer)")
    shown = streams["stdout"].getvalue().split("(fgdb) ")
    assert shown[0] == "Entering fgdb:\n"
    # `where`: the frames outside funcgrad, outermost first, down to the breakpoint's caller.
    where = shown[1].splitlines()
    assert where[0] == "Traceback:"
    assert where[-4:] == [
        f'  File "{THIS_FILE}", line {outer_line}, in outer',
        "    return inner(outer_value)",
        f'  File "{THIS_FILE}", line {inner_line}, in inner',
        "    fg.debug.breakpoint(**streams)",
    ]
    assert f'  File "{THIS_FILE}", line {top_line}, in ' in shown[1]
    assert "funcgrad" + os.sep not in shown[1].replace(THIS_FILE, "")
    assert shown[2] == (
        f"> {THIS_FILE}({outer_line})outer()\n"
        "        def outer(x):\n"
        "            outer_value = x + 1\n"
        "->          return inner(outer_value)\n"
    )
    assert shown[3] == "Array(2., dtype=float32, weak_type=True)\n"
    assert shown[4] == (
        f"> {THIS_FILE}({inner_line})inner()\n"
        "        def inner(x):\n"
        "->          fg.debug.breakpoint(**streams)\n"
        "            return x\n"
    )
    assert shown[5] == "*** NameError: name 'nope' is not defined\n"


def test_breakpoint_frame_selection():
    streams = scripted("w", "c", "w", "c")

    @fg.jit
    def f(x):
        fg.debug.breakpoint(num_frames=1, **streams)
        fg.debug.breakpoint(filter_frames=False, num_frames=2, **streams)
        return x

    f(1.0)
    first, second = streams["stdout"].getvalue().split("Entering fgdb:\n")[1:]
    assert first.splitlines() == [
        "(fgdb) Traceback:",
        f'  File "{THIS_FILE}", line {line_of(f, "num_frames=1")}, in f',
        "    fg.debug.breakpoint(num_frames=1, **streams)",
        "(fgdb) ",
    ]
    # Unfiltered, the frame above the function is funcgrad's own (the jit tracing it).
    caller_file = second.splitlines()[1].split('"')[1]
    assert os.path.dirname(fg.__file__) in caller_file


def test_breakpoint_returns_the_token_and_checks_its_arguments():
    streams = scripted("c")
    token = {"a": fnp.ones(2)}
    assert fg.debug.breakpoint(token=token, **streams) is token
    assert streams["stdout"].getvalue() == "Entering fgdb:\n(fgdb) "
    with pytest.raises(ValueError, match="`ordered` and `token` cannot be given together"):
        fg.debug.breakpoint(token=token, ordered=True)
    with pytest.raises(ValueError, match=r"unknown backend 'web'; available: \['cli'\]"):
        fg.debug.breakpoint(backend="web")
    with pytest.raises(ValueError, match="num_frames must be a positive int, got 0"):
        fg.debug.breakpoint(num_frames=0)


# ---------------------------------------------------------------------------------------------
# debug_nans


def nan_producer(x):
    y = fnp.log(x)
    return y * 2


def test_debug_nans_names_the_primitive_and_the_line_eagerly(debug_nans):
    line = line_of(nan_producer, "fnp.log")
    with pytest.raises(FloatingPointError, match=rf"nan.* in log at .*test_debug.py:{line}"):
        nan_producer(fnp.asarray(-1.0))
    nan_producer(fnp.asarray(1.0))  # finite values pass


def test_debug_nans_names_the_primitive_and_the_line_inside_jit(debug_nans):
    line = line_of(nan_producer, "fnp.log")
    f = fg.jit(nan_producer)
    f(fnp.asarray(1.0))
    with pytest.raises(FloatingPointError, match=rf"nan.* in log at .*test_debug.py:{line}"):
        f(fnp.asarray(-1.0))


def test_config_takes_jax_option_names():
    fg.config.update("jax_debug_nans", True)
    try:
        assert fg.config.debug_nans
        with pytest.raises(FloatingPointError):
            fg.jit(nan_producer)(-1.0)
    finally:
        fg.config.update("jax_debug_nans", False)
    with pytest.raises(AttributeError, match="unknown configuration option 'no_such'"):
        fg.config.update("jax_no_such", True)


def inf_producer(x):
    y = fnp.exp(x)
    return y - 1.0


@pytest.mark.parametrize("backend", ["llvm", "numpy"])
def test_debug_infs_names_the_primitive_and_the_line(backend):
    line = line_of(inf_producer, "fnp.exp")
    fg.config.update("jax_debug_infs", True)
    try:
        with pytest.raises(
            FloatingPointError, match=rf"\(inf\) .* in exp at .*test_debug.py:{line}"
        ):
            inf_producer(fnp.asarray(1000.0, np.float32))
        with jit_backend(backend):
            f = fg.jit(inf_producer)
            assert float(f(fnp.asarray(1.0, np.float32))) == pytest.approx(np.e - 1)
            with pytest.raises(FloatingPointError, match=rf"\(inf\) .* in exp at .*:{line}"):
                f(fnp.asarray(1000.0, np.float32))
        assert np.isnan(float(nan_producer(fnp.asarray(-1.0))))  # NaNs are debug_nans' own
    finally:
        fg.config.update("debug_infs", False)
    assert np.isinf(float(fg.jit(inf_producer)(1000.0)))


def test_nans_pass_silently_without_debug_nans():
    assert np.isnan(fg.jit(nan_producer)(-1.0))
    assert np.isnan(nan_producer(fnp.asarray(-1.0)))


# ---------------------------------------------------------------------------------------------
# disable_jit


def test_disable_jit_runs_the_python_function_every_call_on_concrete_values(capsys):
    seen_types = []

    @fg.jit
    def f(x):
        print("python print")
        seen_types.append(type(x))
        if x > 0:  # a concrete value can steer Python control flow
            return x * 2
        return -x

    with fg.disable_jit():
        assert float(f(fnp.asarray(3.0))) == 6.0
        assert float(f(fnp.asarray(-1.0))) == 1.0
    assert lines(capsys) == ["python print", "python print"]
    assert seen_types == [fg.Array, fg.Array]
    assert not fg.config.disable_jit


# ---------------------------------------------------------------------------------------------
# Source locations and errors


def located(x):
    y = fnp.sin(x)
    return fnp.exp(y)


def test_equations_record_the_users_source_line():
    sin_line, exp_line = line_of(located, "fnp.sin"), line_of(located, "fnp.exp")
    texts = [
        fg.make_jaxpr(located)(1.0).pretty_print(source_info=True),
        fg.jit(located).lower(1.0).as_text(source_info=True),
    ]
    for text in texts:
        sin_text, exp_text = text.splitlines()[1:3]
        assert sin_text.startswith("    b:f32[] = sin a")
        assert sin_text.endswith(f"# {THIS_FILE}:{sin_line} (located)")
        assert exp_text.endswith(f"# {THIS_FILE}:{exp_line} (located)")
    assert "#" not in fg.jit(located).lower(1.0).as_text()


def test_concretization_error_inside_jit_names_the_function_and_the_remedies():
    def branchy(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(ConcretizationTypeError) as info:
        fg.jit(branchy)(1.0)
    message = str(info.value)
    assert "jit(" in message and "branchy" in message
    assert "static_argnums" in message and "lax.cond" in message


def test_escaped_tracer_names_the_jit_that_made_it(monkeypatch):
    # Found where the escaped tracer is used, also with the leak checker off (as by default).
    monkeypatch.setattr(fg.config, "check_tracer_leaks", False)
    leaked = []

    def leaky(x):
        leaked.append(x)
        return x + 1

    fg.jit(leaky)(1.0)
    with pytest.raises(UnexpectedTracerError, match=r"jit\(.*leaky\)"):
        fnp.sin(leaked[0])
    with pytest.raises(UnexpectedTracerError, match=r"jit\(.*leaky\)"):
        fg.jit(lambda y: y * leaked[0])(2.0)


def test_optimized_program_keeps_every_print():
    def f(x):
        fg.debug.print("{}", x)
        fg.debug.print("{}", x)  # the same print twice is two effects, not one
        fnp.sin(x)  # unused: removed
        return x

    text = fg.jit(f).lower(1.0).as_text(optimized=True)
    assert text.count("debug_callback") == 2 and "sin" not in text
