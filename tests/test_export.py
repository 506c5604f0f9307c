"""funcgrad.export: programs written to bytes and read back compute, differentiate and batch
as the functions they came from (each primitive's round trip is also checked by the rule
checks' `export` column, tests/test_rules.py)."""

from __future__ import annotations

import collections
import json
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import test_compiled_random_programs as random_programs
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import export, lax
from funcgrad.test_util import check_grads


def _round_trip(fun, *specs, vjp_order=3, **kwargs) -> export.Exported:
    exported = export.export(fg.jit(fun))(*specs, **kwargs)
    return export.deserialize(exported.serialize(vjp_order=vjp_order))


def _spec(shape, dtype=np.float32):
    return fg.ShapeDtypeStruct(shape, dtype)


def _header(blob) -> bytes:
    start = len(b"funcgrad export\n") + 12
    (length,) = struct.unpack_from("<Q", blob, start - 8)
    return bytes(blob[start : start + length])


def _with_header(blob, edit) -> bytes:
    """The file with its header edited (the arrays' bytes kept)."""
    start = len(b"funcgrad export\n") + 12
    old = _header(blob)
    new = edit(old)
    prefix = bytes(blob[: start - 8]) + struct.pack("<Q", len(new))
    return prefix + new + bytes(blob[start + len(old) :])


def _close(actual, expected, rtol=1e-6):
    for a, e in zip(fg.tree_util.tree_leaves(actual), fg.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=1e-6)


def test_structures_and_values_come_back():
    def f(x, scale=2.0):
        return {"sin": fnp.sin(x) * scale, "sum": x.sum()}

    restored = _round_trip(f, _spec((3,)), scale=1.0)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    _close(restored.call(x, scale=3.0), f(fnp.asarray(x), 3.0))
    assert restored.fun_name == "f"
    assert restored.in_tree == fg.tree_util.tree_structure(((x,), {"scale": 1.0}))
    assert restored.out_tree == fg.tree_util.tree_structure({"sin": 0, "sum": 0})
    assert [a.str_short() for a in restored.in_avals] == ["f32[3]", "f32[]"]


def test_control_flow_and_closed_over_constants():
    table = np.linspace(-1.0, 1.0, 12).reshape(3, 4).astype(np.float32)

    def f(x, n):
        def body(i, carry):
            return carry * 0.5 + fnp.tanh(carry @ table[:, :3]) + i

        y = lax.fori_loop(0, 4, body, x)
        y = lax.cond(y.sum() > 0, lambda v: v * 2.0, lambda v: -v, y)
        y = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.1), (0, y))[1]
        ys = lax.scan(lambda c, row: (c + row, c * row), fnp.zeros(3), y)[1]
        return ys + table[:, :3].sum()

    x = np.arange(9, dtype=np.float32).reshape(3, 3) / 9
    restored = _round_trip(f, _spec((3, 3)), _spec((), np.int32))
    _close(restored.call(x, np.int32(3)), fg.jit(f)(x, 3))


def test_gradients_to_second_order_and_vmap_and_jit():
    def f(w, x):
        return fnp.sum(fnp.tanh(x @ w) ** 2) + fg.nn.logsumexp(w)

    w = np.linspace(-1, 1, 12).reshape(4, 3)
    x = np.linspace(0.5, 2, 8).reshape(2, 4)
    restored = _round_trip(f, _spec((4, 3), np.float64), _spec((2, 4), np.float64))
    check_grads(lambda w: restored.call(w, x), (w,), order=2, modes=("fwd", "rev"))
    _close(fg.hessian(lambda w: restored.call(w, x))(w), fg.hessian(lambda w: f(w, x))(w), 1e-10)
    xs = np.stack([x, 2 * x, -x])
    batched = fg.vmap(restored.call, in_axes=(None, 0))(w, xs)
    _close(batched, np.array([f(w, xi) for xi in xs]), 1e-12)
    _close(fg.jit(lambda w: restored.call(w, x) * 2)(w), 2 * f(w, x), 1e-12)


def test_custom_jvp_rule_is_kept():
    @fg.custom_jvp
    def f(x):
        return fnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 100.0 * t  # a derivative that is not sin's, so keeping it shows

    restored = _round_trip(f, _spec((2,), np.float64))
    x = np.array([0.3, 1.2])
    _close(restored.call(x), np.sin(x))
    _close(fg.grad(lambda x: restored.call(x).sum())(x), [100.0, 100.0])
    _close(fg.jvp(restored.call, (x,), (np.ones(2),))[1], [100.0, 100.0])
    # The rule's program calls f itself: one table entry serves every order.
    exported = export.export(fg.jit(f))(_spec((), np.float64))
    blob = exported.serialize(vjp_order=3)
    assert len(json.loads(_header(blob))["rules"]) == 1
    scalar = export.deserialize(blob)
    assert fg.grad(fg.grad(scalar.call))(np.float64(0.7)) == 0.0
    assert fg.grad(fg.grad(fg.grad(scalar.call)))(np.float64(0.7)) == 0.0


def test_custom_vjp_rule_is_kept_with_nondiff_arguments():
    @fg.custom_vjp
    def clip_gradient(x, bound):
        return x

    def fwd(x, bound):
        return clip_gradient(x, bound), bound

    def bwd(bound, g):
        return (fnp.clip(g, -bound, bound), None)

    clip_gradient.defvjp(fwd, bwd)

    def f(x, bound):
        return (clip_gradient(x, bound) * 10.0).sum()

    restored = _round_trip(f, _spec((3,)), _spec(()))
    x = np.array([1.0, 2.0, 3.0], np.float32)
    _close(restored.call(x, np.float32(4.0)), 60.0)
    _close(fg.grad(restored.call)(x, np.float32(4.0)), [4.0, 4.0, 4.0])
    per_bound = fg.vmap(fg.grad(restored.call), in_axes=(None, 0))(x, np.float32([2.0, 20.0]))
    _close(per_bound, np.array([[2.0] * 3, [10.0] * 3]))


def test_rules_past_the_kept_order_are_refused():
    """A solver whose adjoint calls the solver again (a rule at every order) is written to
    the order asked for; beyond it, differentiating names the cause."""
    from funcgrad.experimental.ode import odeint

    def decay(y0, k):
        return odeint(lambda y, t, k: -k * y, y0, fnp.linspace(0.0, 1.0, 3), k)[-1]

    args = (np.float64(1.0), np.float64(0.5))
    exported = export.export(fg.jit(decay))(*args)
    plain = export.deserialize(exported.serialize())
    np.testing.assert_allclose(plain.call(*args), np.exp(-0.5), rtol=1e-6)
    assert not plain.has_vjp() and exported.has_vjp()
    with pytest.raises(export.ExportError, match="rules of .* were left out.*vjp_order"):
        fg.grad(plain.call, argnums=1)(*args)
    # Batching needs no rule.
    batched = fg.vmap(plain.call, in_axes=(None, 0))(args[0], np.array([0.5, 1.0]))
    np.testing.assert_allclose(batched, np.exp([-0.5, -1.0]), rtol=1e-6)

    first = export.deserialize(exported.serialize(vjp_order=1))
    assert first.has_vjp()
    np.testing.assert_allclose(fg.grad(first.call, argnums=1)(*args), -np.exp(-0.5), rtol=1e-5)
    with pytest.raises(export.ExportError, match="vjp_order"):
        fg.grad(fg.grad(first.call, argnums=1), argnums=1)(*args)
    with pytest.raises(ValueError, match="vjp_order"):
        exported.serialize(vjp_order=-1)


def test_programs_without_rules_differentiate_at_any_order():
    restored = _round_trip(lambda x: fnp.sin(x) * x, _spec((), np.float64), vjp_order=0)
    assert restored.has_vjp()
    x = np.float64(0.4)
    third = fg.grad(fg.grad(fg.grad(restored.call)))(x)
    np.testing.assert_allclose(third, -3 * np.sin(x) - x * np.cos(x), rtol=1e-12)


def test_integer_arguments_and_results():
    def f(x, n):
        return x * n, n + 1

    restored = _round_trip(f, _spec((2,)), _spec((2,), np.int32))
    x, n = np.float32([1.5, 2.0]), np.int32([3, 4])
    out, next_n = restored.call(x, n)
    _close(out, x * n)
    np.testing.assert_array_equal(next_n, n + 1)
    grads = fg.grad(lambda x, n: restored.call(x, n)[0].sum(), argnums=(0, 1), allow_int=True)(x, n)
    _close(grads[0], n.astype(np.float32))
    assert grads[1].dtype == fg.dtypes.float0


def test_random_numbers_in_the_program():
    def f(key, x):
        return x + fg.random.normal(key, x.shape)

    key = fg.random.PRNGKey(7)
    x = np.zeros(4, np.float32)
    restored = export.deserialize(export.export(fg.jit(f))(key, x).serialize())
    np.testing.assert_array_equal(restored.call(key, x), fg.jit(f)(key, x))


def test_exported_vjp():
    def f(x, y):
        return fnp.sin(x) * y, (x * y).sum()

    x, y = np.array([0.1, 0.7], np.float64), np.array([2.0, -1.0])
    exported = export.export(fg.jit(f))(x, y)
    backward = export.deserialize(exported.vjp().serialize())
    cts = (np.array([1.0, 0.5]), np.float64(2.0))
    _, pullback = fg.vjp(f, x, y)
    _close(backward.call(x, y, *cts), pullback(cts), 1e-12)


def test_registered_structures():
    Point = collections.namedtuple("Point", "x y")
    export.register_namedtuple_serialization(Point, serialized_name="test_export.Point")

    class Scaled:
        def __init__(self, value, factor):
            self.value, self.factor = value, factor

    fg.tree_util.register_pytree_node(
        Scaled, lambda s: ((s.value,), s.factor), lambda factor, kids: Scaled(kids[0], factor)
    )

    def f(p, s):
        return Point(p.y * s.factor, s.value + p.x)

    point, scaled = Point(np.float32(1), np.float32(2)), Scaled(np.float32(3), 4.0)
    with pytest.raises(export.ExportError, match="register_pytree_node_serialization"):
        export.export(fg.jit(f))(point, scaled).serialize()
    export.register_pytree_node_serialization(
        Scaled,
        serialized_name="test_export.Scaled",
        serialize_auxdata=lambda factor: json.dumps(factor).encode(),
        deserialize_auxdata=lambda data: json.loads(data),
    )
    restored = export.deserialize(export.export(fg.jit(f))(point, scaled).serialize())
    out = restored.call(point, scaled)
    assert type(out) is Point and float(out.x) == 8.0 and float(out.y) == 4.0


def test_a_new_process_reads_it(tmp_path):
    """Nothing of the exporting process is needed: a fresh interpreter runs the file."""

    @fg.custom_jvp
    def softplus(x):
        return fnp.log1p(fnp.exp(x))

    softplus.defjvps(lambda t, ans, x: t * fg.nn.sigmoid(x))

    def f(x):
        return softplus(x).sum()

    path = tmp_path / "f.bin"
    path.write_bytes(export.export(fg.jit(f))(_spec((3,), np.float64)).serialize(vjp_order=1))
    x = [0.5, -2.0, 3.0]
    script = textwrap.dedent(
        f"""
        import numpy as np, funcgrad as fg
        restored = fg.export.deserialize(open({str(path)!r}, "rb").read())
        x = np.array({x!r})
        print(float(restored.call(x)), *fg.grad(restored.call)(x).tolist())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    values = [float(v) for v in done.stdout.split()]
    x = np.array(x)
    np.testing.assert_allclose(values[0], np.log1p(np.exp(x)).sum(), rtol=1e-12)
    np.testing.assert_allclose(values[1:], 1 / (1 + np.exp(-x)), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Bad input


def test_calls_with_another_signature_are_refused():
    restored = _round_trip(lambda x: x * 2, _spec((3,)))
    with pytest.raises(ValueError, match=r"takes a f32\[3\] as argument leaf 0; .* shape \(4,\)"):
        restored.call(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="called with dtype int32"):
        restored.call(np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="structure"):
        restored.call(np.zeros(3, np.float32), np.zeros(3, np.float32))


def test_what_cannot_be_written_is_refused_with_its_place():
    def calls_back(x):
        return fg.pure_callback(np.sin, fg.ShapeDtypeStruct(x.shape, x.dtype), x)

    with pytest.raises(export.ExportError, match=r"equation 0 \(pure_callback\).*Python function"):
        export.export(fg.jit(calls_back))(_spec((2,)))
    with pytest.raises(TypeError, match="funcgrad.jit"):
        export.export(lambda x: x)(_spec((2,)))
    with pytest.raises(ValueError, match="platforms"):
        export.export(fg.jit(lambda x: x), platforms=["tpu"])


def test_files_from_elsewhere_are_refused():
    blob = export.export(fg.jit(lambda x: fnp.sin(x)))(_spec((2,))).serialize()
    with pytest.raises(export.ExportError, match="not an exported funcgrad function"):
        export.deserialize(b"not a program" + bytes(blob))
    newer = bytearray(blob)
    newer[len(b"funcgrad export\n")] = 99
    with pytest.raises(export.ExportError, match="format version 99"):
        export.deserialize(newer)
    with pytest.raises(export.ExportError, match="damaged"):
        export.deserialize(bytes(blob)[:-40])
    # A primitive this funcgrad lacks, and an equation whose types no longer agree.
    unknown = _with_header(blob, lambda h: h.replace(b'"sin"', b'"sine"'))
    with pytest.raises(export.ExportError, match="primitive 'sine'"):
        export.deserialize(unknown)
    retyped = _with_header(
        blob, lambda h: h.replace(b'[[2],"float32",false]]', b'[[5],"float32",false]]', 1)
    )
    with pytest.raises(export.ExportError, match="does not type here"):
        export.deserialize(retyped)
    # (the edits themselves are sound: the same header with another primitive runs it)
    named = _with_header(blob, lambda h: h.replace(b'"sin"', b'"exp"'))
    np.testing.assert_array_equal(export.deserialize(named).call(np.zeros(2, np.float32)), 1.0)


def test_names_outside_funcgrad_are_never_resolved():
    from funcgrad.export.encoding import Reader

    reader = Reader([], [])
    with pytest.raises(export.ExportError, match="not funcgrad's"):
        reader.value({"function": "os:system"})
    with pytest.raises(export.ExportError, match="does not have"):
        reader.value({"function": "funcgrad.lax:__class__"})


def test_checks_platform_branches_and_remat_policies():
    from funcgrad.experimental import checkify

    def f(x):
        checkify.check(fnp.all(x > 0), "x must be positive, got {}", x.sum())
        y = lax.platform_dependent(x, cpu=lambda v: v * 2, cuda=lambda v: v * 3)
        policy = fg.checkpoint_policies.dots_saveable
        return fg.checkpoint(lambda v: fnp.sin(v) * v, policy=policy)(y)

    checked = checkify.checkify(f)
    restored = _round_trip(checked, _spec((2,), np.float64))
    error, out = restored.call(np.array([1.0, 2.0]))
    assert error.get() is None
    _close(out, np.sin([2.0, 4.0]) * [2.0, 4.0], 1e-12)
    error, _ = restored.call(np.array([-1.0, 2.0]))
    assert error.get() == "x must be positive, got 1.0 (`check` failed)"
    grad = fg.grad(lambda x: restored.call(x)[1].sum())(np.array([1.0, 2.0]))
    _close(grad, fg.grad(lambda x: checked(x)[1].sum())(np.array([1.0, 2.0])), 1e-12)


def test_platform_branches_are_the_exported_platforms_wherever_the_program_runs():
    """Exported for one platform, the program takes that platform's branch on any backend
    (as a program lowered for it does); exported for both, the branch of where it runs."""
    from checks import jit_backend

    def f(x):
        return lax.platform_dependent(x, cpu=lambda v: v + 1.0, cuda=lambda v: v - 1.0)

    x = np.ones(2, np.float32)
    exported = {
        platforms: export.deserialize(
            export.export(fg.jit(f), platforms=platforms)(_spec((2,))).serialize()
        )
        for platforms in [("cpu",), ("cuda",), ("cpu", "cuda")]
    }
    for backend, running in [("numpy", 2.0), ("llvm", 2.0), ("cuda_emulator", 0.0)]:
        with jit_backend(backend):
            np.testing.assert_array_equal(exported[("cpu",)].call(x), 2.0)
            np.testing.assert_array_equal(exported[("cuda",)].call(x), 0.0)
            np.testing.assert_array_equal(exported[("cpu", "cuda")].call(x), running)
    assert exported[("cuda",)].platforms == ("cuda",)


# ---------------------------------------------------------------------------------------------
# The compiler's random programs, read back


@settings(deadline=None)
@given(st.data())
def test_random_programs_read_back_compute_the_same(data):
    dtype, program, shape, transform = data.draw(random_programs.exact_programs())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))

    def f(x, y, at, k):
        pool = [x, y]
        for step, i, j in program:
            pool.append(random_programs.apply_exact_step(step, pool, [i, j], at, k))
        return pool[-1]

    args = random_programs.exact_arguments(rng, dtype, shape)
    fun = fg.vmap(f, in_axes=(0, None, 0, 0)) if transform == "vmap" else f
    if transform == "vmap":
        x, y, at, k = args
        args = [np.stack([x, y]), y, np.stack([at, -at]), np.stack([k, k + 1])]
    restored = export.deserialize(export.export(fg.jit(fun))(*args).serialize())
    previous = fg.config.jit_backend
    try:
        fg.config.update("jit_backend", "numpy")
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(restored.call(*args), fg.jit(fun)(*args))
    finally:
        fg.config.update("jit_backend", previous)


def test_programs_with_float0_literals_are_written():
    from funcgrad.export.encoding import Reader, Writer
    from funcgrad.ir import check_jaxpr

    grad = fg.grad(lambda x, n: x * n, argnums=(0, 1), allow_int=True)
    closed = fg.make_jaxpr(grad)(np.float32(2), np.int32(3))
    writer = Writer()
    read = Reader(writer.blobs, []).closed(writer.closed(closed))
    check_jaxpr(read)
    assert str(read) == str(closed) and "0:float0[]" in str(read)
