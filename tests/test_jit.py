"""jit: the compiled program equals the Python function, is traced once per signature, and
composes with every other transformation as one `jit` equation.

Every primitive suite also checks jit against eager for each of its cases, through
`checks.check_staging`.
"""

import collections
import functools
import os
import re
import sys

import numpy as np
import pytest
from checks import assert_close, jit_backend
from hypothesis import given
from hypothesis import strategies as st
from strategies import arrays, float_dtypes, shapes

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import core
from funcgrad.errors import UnexpectedTracerError

RNG = np.random.default_rng(0)


def assert_same(actual, expected, **tol) -> None:
    """Equal pytrees: the same structure, and leaves equal in aval (shape, dtype, weak type)
    and value."""
    actual_leaves, actual_tree = fg.tree_util.tree_flatten(actual)
    expected_leaves, expected_tree = fg.tree_util.tree_flatten(expected)
    assert actual_tree == expected_tree
    for a, e in zip(actual_leaves, expected_leaves):
        assert fnp.asarray(a).aval == fnp.asarray(e).aval
        assert_close(a, e, **tol)


class Counted:
    """A function that counts how often Python runs it (i.e. how often jit traces it)."""

    def __init__(self, fun):
        functools.update_wrapper(self, fun)  # keeps fun's signature for static_argnames
        self.fun = fun
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fun(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# jit(f) equals f on random programs

UNARY = [
    fnp.sin,
    fnp.tanh,
    fnp.abs,
    fnp.negative,
    lambda a: a * a,
    lambda a: fnp.sqrt(fnp.abs(a)),
    lambda a: a * 2.0 + 1,  # weakly typed constants
    lambda a: a - a.mean(axis=-1, keepdims=True),
    lambda a: fnp.cumsum(a, axis=0),
    lambda a: fnp.flip(a, 0),
    lambda a: a.max(axis=0, keepdims=True) * a,
    lambda a: fnp.clip(a, -1.0, 1.0),
]
BINARY = [
    fnp.add,
    fnp.subtract,
    fnp.multiply,
    fnp.maximum,
    fnp.minimum,
    lambda a, b: fnp.where(a > b, a, b * 3),
]


@st.composite
def programs(draw):
    """A straight-line program over two inputs: each step applies a unary or binary function
    to earlier values; the program returns its last value and one other."""
    steps = []
    for k in range(draw(st.integers(1, 6))):
        num_values = 2 + k
        if draw(st.booleans()):
            steps.append(
                (draw(st.integers(0, len(UNARY) - 1)), draw(st.integers(0, num_values - 1)))
            )
        else:
            i, j = draw(st.integers(0, num_values - 1)), draw(st.integers(0, num_values - 1))
            steps.append((draw(st.integers(0, len(BINARY) - 1)), i, j))
    other = draw(st.integers(0, 1 + len(steps)))

    def program(x, y):
        values = [x, y]
        for step in steps:
            if len(step) == 2:
                values.append(UNARY[step[0]](values[step[1]]))
            else:
                values.append(BINARY[step[0]](values[step[1]], values[step[2]]))
        return values[-1], {"other": values[other]}

    return program


@given(programs(), float_dtypes, shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), st.data())
def test_jit_equals_eager_on_random_programs(program, dtype, shape, data):
    x = data.draw(arrays(dtype, shape))
    y = data.draw(arrays(dtype, shape))
    expected = program(fnp.asarray(x), fnp.asarray(y))
    assert_same(fg.jit(program)(x, y), expected)


# ---------------------------------------------------------------------------------------------
# The signature cache


def test_traced_once_per_signature_and_again_for_each_new_one():
    f = Counted(lambda x, y: x * y + 1)
    jf = fg.jit(f)
    x32, y32 = np.ones(3, np.float32), np.ones(3, np.float32)
    jf(x32, y32)
    jf(x32 * 2, y32)
    jf(fnp.asarray(x32), fnp.asarray(y32))  # funcgrad arrays and NumPy arrays share entries
    assert f.calls == 1
    calls = 1
    for args in [
        (np.ones(4, np.float32), np.ones(4, np.float32)),  # shape
        (np.ones(3, np.float64), np.ones(3, np.float64)),  # dtype
        (np.ones(3, np.float32), 2.0),  # weak type: a Python scalar
        (np.ones(3, np.float32), np.float32(2.0)),  # the same, strongly typed
    ]:
        jf(*args)
        calls += 1
        assert f.calls == calls
        jf(*args)
        assert f.calls == calls
    jf.clear_cache()
    jf(x32, y32)
    assert f.calls == calls + 1


def test_retrace_on_new_static_value_and_new_pytree_structure():
    f = Counted(lambda tree, n: sum(leaf * n for leaf in fg.tree_util.tree_leaves(tree)))
    jf = fg.jit(f, static_argnums=1)
    a = np.ones(2, np.float32)
    jf({"a": a}, 2)
    jf({"a": a}, 2)
    assert f.calls == 1
    jf({"a": a}, 3)  # static value
    assert f.calls == 2
    jf({"b": a}, 3)  # pytree key
    jf((a, a), 3)  # pytree structure
    jf([a, a], 3)  # a list is another structure than a tuple
    assert f.calls == 5
    assert_same(jf({"b": a}, 3), a * 3)


def test_cached_calls_on_pytrees_of_arrays_retrace_exactly_on_new_structure_or_types():
    """Calls whose arguments are pytrees of funcgrad arrays find their program without a
    treedef; the key still tells structures, dict keys, shapes and dtypes apart."""
    Pair = collections.namedtuple("Pair", "first second")
    f = Counted(
        lambda tree: sum(leaf.sum() * k for k, leaf in enumerate(fg.tree_util.tree_leaves(tree), 1))
    )
    jf = fg.jit(f)
    a, b = fnp.arange(3.0, dtype=np.float32), fnp.ones(2, np.float32)
    calls = [
        ({"w": a, "b": b}, 1),
        ({"w": a, "b": b}, 1),  # cached
        ({"b": b, "w": a}, 1),  # cached: the same keys in another order, flattened sorted
        ({"w": b, "b": a}, 2),  # shapes swap
        ({"v": a, "b": b}, 3),  # a key
        ([a, b], 4),
        ((a, b), 5),
        (Pair(a, b), 6),
        ([a, [b]], 7),
        ([a.astype(np.float64), b], 8),
        ([a, b], 8),  # cached
        ([a, None, b], 9),  # (None: keyed by tree_util, not by jit's own walk)
        ([a, None, b], 9),
        ({"l": {"w": a}, "m": [b, (a,)]}, 10),
        ({"m": [b, (a,)], "l": {"w": a}}, 10),
        ({"l": {"w": a}, "m": [b, [a]]}, 11),
        ([{"w": a}, b], 12),
        ([(a,), b], 13),
    ]
    for tree, expected_calls in calls:
        leaves = fg.tree_util.tree_leaves(tree)
        wanted = sum(np.asarray(x).sum() * k for k, x in enumerate(leaves, 1))
        np.testing.assert_allclose(np.asarray(jf(tree)), wanted, rtol=1e-6)
        assert f.calls == expected_calls
    # A weakly typed leaf (from a Python float) is another type: its result is weak too.
    scale = fg.jit(lambda tree: tree["w"] * 2)
    assert scale({"w": fnp.asarray(2.0)}).weak_type
    assert not scale({"w": fnp.asarray(np.float32(2.0))}).weak_type


def test_unhashable_static_argument_is_rejected_by_name():
    jf = fg.jit(lambda x, sizes: x, static_argnums=1)
    with pytest.raises(ValueError, match=r"static argument 1 must be hashable.*list \[1, 2\]"):
        jf(1.0, [1, 2])
    jg = fg.jit(lambda x, *, sizes: x, static_argnames="sizes")
    with pytest.raises(ValueError, match=r"static argument 'sizes' must be hashable"):
        jg(1.0, sizes={"a": 1})


def test_static_argnums_out_of_range_of_the_signature():
    with pytest.raises(ValueError, match=r"static_argnums \(2,\) out of range.*2 positional"):
        fg.jit(lambda x, n: x, static_argnums=2)


def test_static_argnames_by_name_or_position_and_static_defaults():
    def f(x, n=2, *, scale=1.0):
        return x * float(n) * scale  # float(n) needs a concrete n

    f_counted = Counted(f)
    jf = fg.jit(f_counted, static_argnames="n")
    assert float(jf(1.0, n=3)) == 3.0
    assert float(jf(1.0, 3)) == 3.0  # a static name passed by position is static too
    assert float(jf(1.0)) == 2.0  # left to its default
    assert float(jf(1.0, n=3, scale=2.0)) == 6.0  # scale is dynamic
    assert float(jf(1.0, n=3, scale=4.0)) == 12.0
    assert f_counted.calls == 4  # n=3 by name, by position, default, with scale
    jg = fg.jit(f, static_argnums=1)
    assert float(jg(1.0, n=5)) == 5.0  # a static position passed by name is static too
    assert float(jg(1.0)) == 2.0


def test_kwargs_pytrees_in_and_out_and_closures():
    w = fnp.asarray(RNG.standard_normal(3))

    def f(params, x, *, bias):
        h = fnp.tanh(params["w"] * x + bias) * w  # closes over the concrete array w
        return {"h": h, "pair": (h.sum(), None), "list": [x]}

    params = {"w": RNG.standard_normal(3)}
    x = RNG.standard_normal(3)
    assert_same(fg.jit(f)(params, x, bias=0.5), f(params, fnp.asarray(x), bias=0.5))


def test_python_and_constant_outputs_and_weak_types():
    out = fg.jit(lambda x: (x * 2, 3.0, fnp.zeros(2)))(1.0)
    assert_same(out, (fnp.asarray(1.0) * 2, fnp.asarray(3.0), fnp.zeros(2)))
    assert out[0].weak_type and out[1].weak_type
    assert fg.jit(lambda x: None)(1.0) is None


def test_bad_argument_type_suggests_static_arguments():
    with pytest.raises(TypeError, match=r"jit\(.*\) got an argument of type str.*static"):
        fg.jit(lambda x, mode: x)(1.0, "fast")
    with pytest.raises(TypeError, match="expects a callable"):
        fg.jit(3)


def test_donate_argnums_is_accepted():
    jf = fg.jit(lambda x, y: x + y, donate_argnums=(0,))
    assert_same(jf(np.ones(2), np.ones(2)), fnp.full(2, 2.0, np.float64))


# ---------------------------------------------------------------------------------------------
# Composition with the other transformations


def loss(w, x):
    return fnp.sum(fnp.tanh(x @ w) ** 2) + 0.5 * fnp.sum(w * w)


W = RNG.standard_normal((3, 2))
XS = RNG.standard_normal((4, 5, 3))


TRANSFORMS = {
    "grad": fg.grad,
    "value_and_grad": fg.value_and_grad,
    "jvp": lambda f: lambda w, x: fg.jvp(f, (w, x), (fnp.ones_like(w), fnp.zeros_like(x))),
    "jacfwd": fg.jacfwd,
    "hessian": fg.hessian,
    "vmap": lambda f: fg.vmap(f, in_axes=(None, 0)),
    "per_example_grads": lambda f: fg.vmap(fg.grad(f), in_axes=(None, 0)),
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_jit_inside_and_outside_transforms_equals_the_plain_composition(name):
    transform = TRANSFORMS[name]
    x = XS if "vmap" in name or "per_example" in name else XS[0]
    expected = transform(loss)(fnp.asarray(W), fnp.asarray(x))
    tol = dict(rtol=1e-12, atol=1e-12)
    assert_same(transform(fg.jit(loss))(W, x), expected, **tol)
    assert_same(fg.jit(transform(loss))(W, x), expected, **tol)
    assert_same(fg.jit(transform(fg.jit(loss)))(W, x), expected, **tol)


def test_nested_jits_under_reverse_mode_keep_primal_values_concrete():
    inner = fg.jit(lambda x: fnp.sin(x) * 2)
    outer = fg.jit(lambda x: inner(x).sum() * 3)
    x = np.arange(3.0)
    value, grad = fg.value_and_grad(outer)(x)
    assert type(value) is fg.Array
    assert_close(value, 6 * np.sin(x).sum())
    assert_close(grad, 6 * np.cos(x))
    primal, f_jvp = fg.linearize(inner, x)
    assert type(primal) is fg.Array
    assert_close(f_jvp(np.ones(3)), 2 * np.cos(x))


def test_vmap_of_jit_keeps_unbatched_outputs_unbatched():
    f = fg.jit(lambda x, y: (x * 2, y * 3))
    xs, y = np.arange(3.0), np.float64(2.0)
    out = fg.vmap(f, in_axes=(0, None), out_axes=(0, None))(xs, y)
    assert_same(out, (fnp.asarray(xs * 2), fnp.asarray(y * 3)))


def test_transformations_of_a_jit_do_not_retrace_it():
    f = Counted(loss)
    jf = fg.jit(f)
    grad_fn, vmapped = fg.grad(jf), fg.vmap(jf, in_axes=(None, 0))
    for _ in range(3):
        grad_fn(W, XS[0])
        vmapped(W, XS)
        fg.jvp(jf, (W, XS[0]), (np.ones_like(W), np.zeros_like(XS[0])))
    assert f.calls == 1


def eqn_names(closed) -> list[str]:
    return [eqn.primitive.name for eqn in closed.eqns]


def test_jvp_of_jit_is_a_jit_of_the_jvp():
    jf = fg.jit(fnp.sin)
    closed = fg.make_jaxpr(lambda x, t: fg.jvp(jf, (x,), (t,)))(1.0, 1.0)
    assert eqn_names(closed) == ["jit"]
    params = closed.eqns[0].params
    assert params["name"] == "jvp(sin)"
    assert eqn_names(params["jaxpr"]) == ["sin", "cos", "mul"]


def sin3(x):
    return fnp.sin(x) * 3.0


def test_grad_of_jit_is_two_jits_forward_and_transposed():
    jf = fg.jit(sin3)
    closed = fg.make_jaxpr(fg.grad(jf))(1.0)
    jits = [eqn.params["name"] for eqn in closed.eqns if eqn.primitive.name == "jit"]
    assert jits == ["jvp(sin3)", "transpose(jvp(sin3))"]
    assert_close(fg.grad(jf)(1.0), 3 * np.cos(np.float32(1.0)))


def test_vmap_of_jit_is_a_single_jit_of_the_batched_program():
    jf = fg.jit(lambda x, y: fnp.sin(x) * y)
    closed = fg.make_jaxpr(fg.vmap(jf, in_axes=(0, None)))(np.ones((5, 3)), np.ones(3))
    assert eqn_names(closed) == ["jit"]
    inner = closed.eqns[0].params["jaxpr"]
    assert [v.aval.shape for v in inner.jaxpr.invars] == [(5, 3), (3,)]
    assert "sin" in eqn_names(inner)


# ---------------------------------------------------------------------------------------------
# Lowering, compiling and shapes


def test_lower_shows_the_staged_program():
    scale = fnp.asarray(np.arange(3.0, dtype=np.float32))

    def f(x, y):
        return fnp.sin(x) * scale + y * 2

    # The closed-over array is a constant (before `;`); the weakly typed Python scalar y is
    # made strong before it meets the float32 array.
    text = fg.jit(f).lower(np.ones(3, np.float32), 1.0).as_text()
    assert text == (
        "{ lambda a:f32[3]; b:f32[3] c:f32[]. let\n"
        "    d:f32[3] = sin b\n"
        "    e:f32[3] = mul d a\n"
        "    f:f32[] = mul c 2.0:f32[]\n"
        "    g:f32[] = convert_element_type[new_dtype=float32 weak_type=False] f\n"
        "    h:f32[3] = add e g\n"
        "  in (h,) }"
    )


def test_compile_runs_its_signature_and_rejects_others():
    jf = fg.jit(lambda x: fnp.cos(x) + 1)
    x = np.linspace(0, 1, 4, dtype=np.float32)
    compiled = jf.lower(x).compile()
    assert_same(compiled(x), fnp.cos(fnp.asarray(x)) + 1)
    if fg.config.jit_backend == "numpy":
        assert "cos" in compiled.as_text()  # the program's text is its jaxpr
    else:  # LLVM IR, or CUDA C
        assert "cos" in compiled.fusion_plan()
        assert re.search(r"define void @entry|__global__ void k0_add", compiled.as_text())
    with pytest.raises(TypeError, match="lowered for other argument shapes"):
        compiled(np.ones(5, np.float32))
    with pytest.raises(TypeError, match="lowered for other argument shapes"):
        compiled(x.astype(np.float64))


def test_lower_and_eval_shape_take_shape_dtype_structs():
    jf = fg.jit(lambda x: fnp.sin(x) * 2)
    spec = fg.ShapeDtypeStruct((3,), np.float32)
    assert jf.eval_shape(spec) == spec
    compiled = jf.lower(spec).compile()
    x = np.linspace(0, 1, 3, dtype=np.float32)
    assert_same(compiled(x), fnp.sin(fnp.asarray(x)) * 2)
    with pytest.raises(TypeError, match="argument of type ShapeDtypeStruct"):
        jf(spec)  # running needs data


def test_eval_shape_traces_without_running():
    f = Counted(lambda x, y: {"s": (x @ y).sum(axis=0), "t": x.T})
    jf = fg.jit(f)
    x, y = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    expected = {
        "s": fg.ShapeDtypeStruct((2,), np.float32),
        "t": fg.ShapeDtypeStruct((3, 4), np.float32),
    }
    assert jf.eval_shape(x, y) == expected
    assert fg.eval_shape(jf, x, y) == expected
    assert fg.eval_shape(jf, fg.ShapeDtypeStruct((4, 3), np.float32), y) == expected
    assert f.calls == 1  # traced under fg.eval_shape, the jit finds its signature cached


def test_escaped_tracer_is_detected(monkeypatch):
    # Found where the escaped tracer is used, also with the leak checker off (as by default).
    monkeypatch.setattr(fg.config, "check_tracer_leaks", False)
    leaked = []

    @fg.jit
    def store(x):
        leaked.append(x * 2)
        return x

    store(1.0)
    with pytest.raises(UnexpectedTracerError, match=r"jit\(.*store\)"):
        leaked[0] + 1


def test_static_arguments_that_compare_equal_but_differ_in_type_are_traced_apart():
    f = fg.jit(lambda x, v: fnp.full(2, v), static_argnums=1)
    assert f(0.0, 1).dtype == np.int32
    assert f(0.0, 1.0).dtype == np.float32
    assert f(0.0, True).dtype == np.bool_
    assert f(0.0, 1).dtype == np.int32
    g = fg.jit(
        lambda x, shape_and_fill: fnp.full(shape_and_fill[0], shape_and_fill[1]),
        static_argnames="shape_and_fill",
    )
    assert g(0.0, shape_and_fill=(2, 1)).dtype == np.int32
    assert g(0.0, shape_and_fill=(2, 1.0)).dtype == np.float32


def test_cached_calls_with_static_arguments_and_arrays_retrace_exactly_on_new_statics():
    """Such calls find their program without flattening (the static value, with its type,
    and the arrays' shapes and dtypes are the key)."""
    f = Counted(lambda x, n, y: fnp.full(y.shape, n) + y + x.sum())
    x, y = fnp.ones(3, np.float32), fnp.ones(3, np.float32)
    for static in (1, -2):
        jf = fg.jit(f, static_argnums=static)
        calls = f.calls
        assert jf(x, 1, y).dtype == np.float32 and f.calls == calls + 1
        assert jf(x, 1, y).dtype == np.float32 and f.calls == calls + 1
        assert_same(jf(x, 2, y), np.full(3, 6.0, np.float32))
        assert jf(x, True, y).dtype == np.float32 and f.calls == calls + 3
        assert_same(jf(x, True, y), np.full(3, 5.0, np.float32))
        assert jf(x, 1.0, y).dtype == np.float32 and f.calls == calls + 4
        assert jf(x, 1, fnp.ones(4, np.float32)).shape == (4,) and f.calls == calls + 5
        assert jf(x, 1, fnp.ones(3, np.int32)).dtype == np.float32 and f.calls == calls + 6
        assert jf(x.astype(np.int32), 1, y.astype(np.int32)).dtype == np.int32
        with pytest.raises(ValueError, match=r"static argument 1 must be hashable"):
            jf(x, [1], y)


@pytest.mark.parametrize("convert", [lambda x: x.tolist(), lambda x: x[0].item()])
def test_tolist_and_item_of_a_traced_value_name_the_concretization(convert):
    with pytest.raises(fg.errors.ConcretizationTypeError):
        fg.jit(convert)(fnp.arange(2.0))
    # Where a transformation knows the value (grad's primal), it is returned.
    assert fg.grad(lambda x: x * float(np.max(convert(fnp.stack([x, x])))))(3.0) == 3.0


def test_array_methods_work_on_traced_values():
    # Every method of an array is also a method of a traced array inside jit (a tracer
    # attribute once shadowed `x.var()`).
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    for name in ["var", "std", "mean", "sum", "max", "min", "prod", "argmax", "cumsum"]:
        got = fg.jit(lambda v, name=name: getattr(v, name)(axis=1))(x)
        np.testing.assert_allclose(got, getattr(x, name)(axis=1), rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_pauses_while_a_program_is_staged_and_compiled(enabled):
    import gc

    collections_seen = []
    compiler_source = os.path.join("llvm", "executable.py")  # LlvmExecutable.__init__

    def count(phase, info):
        """Record a collection started from inside the compiler or the staged function."""
        frame = sys._getframe()
        while frame is not None:
            code = frame.f_code
            compiling = code.co_name == "__init__" and code.co_filename.endswith(compiler_source)
            if compiling or code is chain.__code__:
                collections_seen.append(code.co_name)
                return
            frame = frame.f_back

    def chain(x):
        for k in range(200):
            x = x * 1.0001 + k
        return x

    threshold = gc.get_threshold()
    (gc.enable if enabled else gc.disable)()
    gc.set_threshold(1)  # a collection at nearly every allocation, where it runs
    gc.callbacks.append(count)
    try:
        with jit_backend("llvm"):
            executable = fg.jit(chain).lower(np.ones(8, np.float32)).compile()
        assert collections_seen == []
        assert gc.isenabled() == enabled  # as the compiler found it
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
        gc.enable()
    np.testing.assert_allclose(executable(np.ones(8, np.float32)), chain(np.ones(8, np.float32)))


def test_float0_tangents_come_out_of_jit_as_they_do_eagerly():
    """jvp of a boolean output, and grad with allow_int for an integer argument, give float0
    tangents: no data, so the program does not compute them, and jit hands them back
    unchanged, alone or beside computed outputs, nested, mapped and abstractly."""

    def f(x):
        return fg.jvp(lambda a: (a > 0, a * 2), (x,), (fnp.ones(3),))

    x = fnp.asarray([1.0, -2.0, 3.0])
    eager = f(x)
    for jitted in (fg.jit(f), fg.jit(lambda x: fg.jit(f)(x))):
        (positive, doubled), (bool_tangent, tangent) = jitted(x)
        np.testing.assert_array_equal(positive, eager[0][0])
        np.testing.assert_array_equal(doubled, eager[0][1])
        np.testing.assert_array_equal(tangent, [2.0, 2.0, 2.0])
        assert bool_tangent.dtype == fg.dtypes.float0 and bool_tangent.shape == (3,)
    assert fg.jit(f).eval_shape(x)[1][0].dtype == fg.dtypes.float0
    assert fg.vmap(fg.jit(f))(fnp.stack([x, x]))[1][0].shape == (2, 3)
    _, integer_grad = fg.jit(
        lambda x: fg.grad(lambda a, i: (a * i).sum(), argnums=(0, 1), allow_int=True)(x, 3)
    )(x)
    assert integer_grad.dtype == fg.dtypes.float0 and integer_grad.shape == ()


def test_float0_arguments_are_not_program_inputs():
    """A float0 argument (a tangent for an integer primal) holds no data: the program does not
    take it, and the function gets it as it was passed, as eagerly."""

    def push(x, t):
        return fg.jvp(lambda a: a * 2, (x,), (t,))

    ints, zeros = np.arange(3, dtype=np.int32), np.zeros(3, fg.dtypes.float0)
    (doubled, tangent), eager = fg.jit(push)(ints, zeros), push(ints, zeros)
    np.testing.assert_array_equal(doubled, eager[0])
    assert tangent.dtype == fg.dtypes.float0 and tangent.shape == (3,)
    assert fg.jit(push).lower(ints, zeros).jaxpr.in_avals == [core.ShapedArray((3,), np.int32)]
    assert fg.jit(push).eval_shape(ints, zeros)[1].dtype == fg.dtypes.float0
    # Donation counts the program's inputs, which the float0 argument is not.
    passed, scaled = fg.jit(lambda t, x: (t, x * 2), donate_argnums=(1,))(zeros, fnp.ones(3))
    assert passed.dtype == fg.dtypes.float0
    np.testing.assert_array_equal(scaled, [2.0, 2.0, 2.0])


def test_trace_gives_the_program_and_its_types_before_lowering():
    def f(x, scale=1.0):
        return x * scale, {"total": x.sum(), "count": fnp.int32(x.size)}

    traced = fg.jit(f).trace(fg.ShapeDtypeStruct((3,), np.float32), scale=2.0)
    assert isinstance(traced, fg.stages.Traced) and traced.fun_name == "f"
    assert traced.in_tree == fg.tree_util.tree_structure(((0,), {"scale": 0}))
    assert [a.str_short() for a in fg.tree_util.tree_leaves(traced.in_avals)] == ["f32[3]", "f32[]"]
    out = traced.out_info
    assert out[0].shape == (3,) and out[1]["total"].dtype == np.float32
    assert out[1]["count"].dtype == np.int32
    assert "reduce_sum" in str(traced.jaxpr)
    compiled = traced.lower().compile()
    scaled, extra = compiled(np.arange(3, dtype=np.float32), scale=2.0)
    np.testing.assert_array_equal(scaled, [0.0, 2.0, 4.0])
    assert float(extra["total"]) == 3.0 and int(extra["count"]) == 3
    assert fg.jit(f).eval_shape(np.ones(3, np.float32))[1]["total"].shape == ()


def test_traced_args_info_says_what_is_donated():
    traced = fg.jit(lambda w, x: w - x, donate_argnums=0).trace(
        np.ones((2, 3), np.float32), fg.ShapeDtypeStruct((2, 3), np.float32)
    )
    (w_info, x_info), kwargs = traced.args_info
    assert kwargs == {}
    assert isinstance(w_info, fg.stages.ArgInfo) and w_info.donated and not x_info.donated
    assert w_info.shape == (2, 3) and x_info.dtype == np.float32
