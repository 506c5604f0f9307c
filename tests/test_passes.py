"""Jaxpr optimization passes: each removes exactly what it should, and none changes results."""

import copy
import textwrap

import numpy as np
import strategies as fst
from checks import jit_backend
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.compiler import passes
from funcgrad.ir import eval_jaxpr
from funcgrad.lax.elementwise import convert_element_type_p, neg_p, sin_p
from funcgrad.lax.shapes import broadcast_in_dim_p, reshape_p, transpose_p
from funcgrad.transforms.jit import jit_p

F32_3 = np.ones(3, np.float32)

# sin with declared effects, standing in for a debug callback; a copy is not registered as a
# primitive of its own.
effect_p = copy.copy(sin_p)
effect_p.name = "effect"
effect_p.has_effects = True


def program(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def evaluate(closed, *args):
    """Nested jit calls run on the reference backend too: inlining one moves its operations
    from compiled code to the reference, whose transcendental functions may round the other
    way (the dev profile drew jit(sin) at 1.0: 0.84147096 compiled, NumPy's float32 0.841471)."""
    with jit_backend("numpy"):
        return eval_jaxpr(closed.jaxpr, closed.consts, *map(fnp.asarray, args))


def assert_bits_equal(actual, expected) -> None:
    """Same shape, dtype and values, with signed zeros told apart and NaNs equal."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)
    if actual.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


def check_pass(run_pass, fun, *args, expected: str):
    """`run_pass` turns fun's jaxpr into `expected`, leaves its input alone, keeps results."""
    closed = fg.make_jaxpr(fun)(*args)
    before = str(closed)
    optimized = run_pass(closed)
    assert str(closed) == before
    assert str(optimized) == program(expected)
    assert optimized.out_avals == closed.out_avals
    for out, ref in zip(evaluate(optimized, *args), evaluate(closed, *args)):
        assert_bits_equal(out, ref)
    return optimized


# ---------------------------------------------------------------------------------------------
# inline_calls


def test_inline_calls_splices_nested_calls_with_fresh_variables():
    inner = fg.jit(lambda x: fnp.sin(x) * 2.0)
    outer = fg.jit(lambda x: inner(x) + x)
    check_pass(
        passes.inline_calls,
        lambda x: outer(x) * outer(x),
        F32_3,
        expected="""
        { lambda ; a:f32[3]. let
            b:f32[3] = sin a
            c:f32[3] = mul b 2.0:f32[]
            d:f32[3] = add c a
            e:f32[3] = sin a
            f:f32[3] = mul e 2.0:f32[]
            g:f32[3] = add f a
            h:f32[3] = mul d g
          in (h,) }
        """,
    )


def test_inline_calls_makes_inner_consts_outer_consts_once():
    table = np.arange(3.0, dtype=np.float32)
    inner = fg.make_jaxpr(lambda x: x + table)(F32_3)
    assert inner.consts and inner.jaxpr.constvars

    def fun(x):
        y = jit_p.bind(x, jaxpr=inner, name="inner")[0]
        return jit_p.bind(y, jaxpr=inner, name="inner")[0]

    optimized = check_pass(
        passes.inline_calls,
        fun,
        F32_3,
        expected="""
        { lambda a:f32[3]; b:f32[3]. let
            c:f32[3] = add b a
            d:f32[3] = add c a
          in (d,) }
        """,
    )
    np.testing.assert_array_equal(np.asarray(optimized.consts[0]), table)


def test_inline_calls_returns_a_program_without_calls_unchanged():
    closed = fg.make_jaxpr(fnp.sin)(F32_3)
    assert passes.inline_calls(closed) is closed


# ---------------------------------------------------------------------------------------------
# dead_code_elimination


def test_dce_drops_unused_equations_and_consts_but_keeps_effects_and_inputs():
    table = np.arange(3.0, dtype=np.float32)

    def fun(x, y):
        unused = fnp.cos(x) + table
        effect_p.bind(unused * 2.0)
        fnp.exp(unused)
        return fnp.sin(x)

    check_pass(
        passes.dead_code_elimination,
        fun,
        F32_3,
        F32_3,
        expected="""
        { lambda a:f32[3]; b:f32[3] c:f32[3]. let
            d:f32[3] = cos b
            e:f32[3] = add d a
            f:f32[3] = mul e 2.0:f32[]
            g:f32[3] = effect f
            h:f32[3] = sin b
          in (h,) }
        """,
    )


def _called(x, y):
    return fnp.sin(x), fnp.cos(y), fnp.exp(x)


def _effectful(x):
    return effect_p.bind(x) + 1.0


def test_dce_prunes_unused_outputs_and_inputs_of_a_call():
    check_pass(
        passes.dead_code_elimination,
        lambda x, y: fg.jit(_called)(x, y)[2],
        F32_3,
        F32_3,
        expected="""
        { lambda ; a:f32[3] b:f32[3]. let
            c:f32[3] = jit[jaxpr=
              { lambda ; a:f32[3]. let
                  b:f32[3] = exp a
                in (b,) } name=_called] a
          in (c,) }
        """,
    )


def test_dce_drops_an_unused_call_unless_it_has_effects():
    pure = fg.jit(fnp.sin)
    effectful = fg.jit(_effectful)

    def fun(x):
        pure(x)
        effectful(x)
        return x

    optimized = passes.dead_code_elimination(fg.make_jaxpr(fun)(F32_3))
    assert str(optimized) == program(
        """
        { lambda ; a:f32[3]. let
            _ = jit[jaxpr=
              { lambda ; a:f32[3]. let
                  b:f32[3] = effect a
                in () } name=_effectful] a
          in (a,) }
        """
    )


def test_dce_consults_registered_rules(monkeypatch):
    calls = []

    def keep_everything(eqn, used_outputs):
        calls.append(used_outputs)
        return eqn, [True] * len(eqn.invars)

    monkeypatch.setitem(passes.dce_rules, sin_p, keep_everything)
    closed = fg.make_jaxpr(lambda x: (fnp.sin(x), x)[1])(F32_3)
    assert passes.dead_code_elimination(closed) is closed
    assert calls == [[False]]


# ---------------------------------------------------------------------------------------------
# common_subexpression_elimination


def test_cse_merges_equal_equations_with_equal_operands():
    def fun(x):
        a = fnp.sin(x) * 2.0
        b = fnp.sin(x) * 2.0
        signed = (x + 0.0) * (x + -0.0)  # literals differing only in sign stay apart
        weak_and_strong = lax.neg(2.0), lax.neg(np.float32(2.0))  # results of two types
        return a + b, signed, fnp.sum(x, axis=0) + fnp.sum(x), *weak_and_strong

    check_pass(
        passes.common_subexpression_elimination,
        fun,
        F32_3,
        expected="""
        { lambda ; a:f32[3]. let
            b:f32[3] = sin a
            c:f32[3] = mul b 2.0:f32[]
            d:f32[3] = add a 0.0:f32[]
            e:f32[3] = add a -0.0:f32[]
            f:f32[3] = mul d e
            g:f32[] = neg 2.0:f32[]
            h:f32[] = neg 2.0:f32[]
            i:f32[3] = add c c
            j:f32[] = reduce_sum[axes=(0,)] a
            k:f32[] = add j j
          in (i, f, k, g, h) }
        """,
    )


def test_cse_never_merges_effects():
    closed = fg.make_jaxpr(lambda x: effect_p.bind(x) + effect_p.bind(x))(F32_3)
    assert passes.common_subexpression_elimination(closed) is closed


# ---------------------------------------------------------------------------------------------
# constant_folding


def test_constant_folding_evaluates_scalar_equations_of_literals():
    two = np.float32(2.0)
    check_pass(
        passes.constant_folding,
        lambda x: x * fnp.sin(two) + fnp.cos(fnp.sin(two)) + fnp.ones(3),
        F32_3,
        expected=f"""
        {{ lambda ; a:f32[3]. let
            b:f32[3] = mul a {np.sin(two).item()!r}:f32[]
            c:f32[3] = add b {np.cos(np.sin(two)).item()!r}:f32[]
            d:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,)] 1.0:f32[]
            e:f32[3] = add c d
          in (e,) }}
        """,
    )


def test_constant_folding_keeps_weak_types_and_skips_effects():
    closed = fg.make_jaxpr(lambda: (lax.add(2, 3), effect_p.bind(lax.asarray(np.float32(1.0)))))()
    folded = passes.constant_folding(closed)
    assert str(folded) == program(
        """
        { lambda ; . let
            a:f32[] = effect 1.0:f32[]
          in (5:i32[], a) }
        """
    )
    assert folded.out_avals == closed.out_avals
    assert folded.out_avals[0].weak_type


# ---------------------------------------------------------------------------------------------
# algebraic_simplification


def test_simplification_removes_arithmetic_identities_that_keep_every_bit():
    def fun(x, i):
        return (
            x * 1.0,
            1.0 * x,
            x + -0.0,
            x - 0.0,
            x + 0.0,  # kept: -0.0 + 0.0 is +0.0
            i + 0,
            0 + i,
            lax.neg(lax.neg(x)),
            lax.mul(2.0, np.float32(1.0)),  # kept: the weak 2.0 is not the result's type
            lax.mul(1.0, np.float32(1.0)),  # the strong 1.0 is
        )

    check_pass(
        passes.algebraic_simplification,
        fun,
        F32_3,
        np.ones(3, np.int32),
        expected="""
        { lambda ; a:f32[3] b:i32[3]. let
            c:f32[3] = add a 0.0:f32[]
            d:f32[3] = neg a
            e:f32[] = mul 2.0:f32[] 1.0:f32[]
          in (a, a, a, a, c, b, b, a, e, 1.0:f32[]) }
        """,
    )


def test_simplification_removes_identity_conversions_and_broadcasts():
    def fun(x):
        same = convert_element_type_p.bind(x, new_dtype=np.dtype("float32"), weak_type=False)
        weak = convert_element_type_p.bind(x, new_dtype=np.dtype("float32"), weak_type=True)
        wide = convert_element_type_p.bind(x, new_dtype=np.dtype("float64"), weak_type=False)
        broadcast = broadcast_in_dim_p.bind(x, shape=(3,), broadcast_dimensions=(0,))
        return same, weak, wide, broadcast

    check_pass(
        passes.algebraic_simplification,
        fun,
        F32_3,
        expected="""
        { lambda ; a:f32[3]. let
            b:f32[3] = convert_element_type[new_dtype=float32 weak_type=True] a
            c:f64[3] = convert_element_type[new_dtype=float64 weak_type=False] a
          in (a, b, c, a) }
        """,
    )


def test_simplification_turns_reductions_over_axes_of_one_into_reshapes():
    """Each result of a reduction over axes of size 1 is one element: a reshape (a float sum
    adds +0, as the fold from zero gives +0 for -0.0), so a GPU runs it as a map, where it
    ran a fold of one row on one thread. A reduction over a longer axis stays."""
    x = np.array([[-0.0, np.nan, 2.5, -np.inf]], np.float32)

    def fun(x, i):
        return (
            lax.reduce_sum(x, (0,)),
            lax.reduce_max(x, (0,)),
            lax.reduce_prod(x, (0,)),
            lax.reduce_sum(i, (0,)),
            lax.reduce_or(i > 0, (0,)),
            lax.reduce_sum(x, (1,)),
        )

    optimized = check_pass(
        passes.algebraic_simplification,
        fun,
        x,
        np.array([[3, 0, -1, 7]], np.int32),
        expected="""
        { lambda ; a:f32[1,4] b:i32[1,4]. let
            c:f32[4] = reshape[dimensions=None new_sizes=(4,)] a
            d:f32[4] = add c 0.0:f32[]
            e:f32[4] = reshape[dimensions=None new_sizes=(4,)] a
            f:f32[4] = reshape[dimensions=None new_sizes=(4,)] a
            g:i32[4] = reshape[dimensions=None new_sizes=(4,)] b
            h:bool[1,4] = gt b 0:i32[]
            i:bool[4] = reshape[dimensions=None new_sizes=(4,)] h
            j:f32[1] = reduce_sum[axes=(1,)] a
          in (d, e, f, g, i, j) }
        """,
    )
    assert not np.signbit(np.asarray(evaluate(optimized, x, np.ones((1, 4), np.int32))[0])[0])
    for backend in ("llvm", "cuda_emulator"):
        with jit_backend(backend):
            compiled = fg.jit(fun)(x, np.array([[3, 0, -1, 7]], np.int32))
        for out, ref in zip(compiled, fun(x, np.array([[3, 0, -1, 7]], np.int32))):
            assert_bits_equal(np.asarray(out), np.asarray(ref))


def test_simplification_merges_chains_of_transposes_and_reshapes():
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)

    def fun(x):
        t = transpose_p.bind(x, permutation=(1, 2, 0))
        back = transpose_p.bind(t, permutation=(2, 0, 1))
        swapped = transpose_p.bind(t, permutation=(1, 0, 2))
        r = reshape_p.bind(x, new_sizes=(6, 4), dimensions=(2, 0, 1))
        flat = reshape_p.bind(r, new_sizes=(24,), dimensions=None)
        flat_x = reshape_p.bind(x, new_sizes=(24,), dimensions=None)
        round_trip = reshape_p.bind(flat_x, new_sizes=(2, 3, 4), dimensions=None)
        kept = reshape_p.bind(r, new_sizes=(24,), dimensions=(1, 0))
        return back, swapped, flat, round_trip, kept

    simplified = passes.algebraic_simplification(fg.make_jaxpr(fun)(x))
    assert len(simplified.eqns) == 6  # the inner transpose and reshapes are left to DCE
    check_pass(
        lambda closed: passes.dead_code_elimination(passes.algebraic_simplification(closed)),
        fun,
        x,
        expected="""
        { lambda ; a:f32[2,3,4]. let
            b:f32[4,3,2] = transpose[permutation=(2, 1, 0)] a
            c:f32[6,4] = reshape[dimensions=(2, 0, 1) new_sizes=(6, 4)] a
            d:f32[24] = reshape[dimensions=(2, 0, 1) new_sizes=(24,)] a
            e:f32[24] = reshape[dimensions=(1, 0) new_sizes=(24,)] c
          in (a, b, d, a, e) }
        """,
    )


# ---------------------------------------------------------------------------------------------
# optimize


def test_optimize_runs_every_pass_to_a_fixed_point():
    scale = fg.jit(lambda x: x * fnp.cos(np.float32(0.0)) * 2.0)

    def fun(x, unused):
        y = scale(fnp.transpose(x)) - 0
        return fnp.transpose(y) + fnp.transpose(scale(y)).T.T

    x = np.ones((2, 3), np.float32)
    optimized = check_pass(
        passes.optimize,
        fun,
        x,
        x,
        expected="""
        { lambda ; a:f32[2,3] b:f32[2,3]. let
            c:f32[3,2] = transpose[permutation=(1, 0)] a
            d:f32[3,2] = mul c 2.0:f32[]
            e:f32[2,3] = transpose[permutation=(1, 0)] d
            f:f32[3,2] = mul d 2.0:f32[]
            g:f32[2,3] = transpose[permutation=(1, 0)] f
            h:f32[2,3] = add e g
          in (h,) }
        """,
    )
    assert passes.optimize(optimized) is optimized


def test_lowered_as_text_shows_the_optimized_program_on_request():
    def fun(x):
        return fnp.sin(x) * 1.0 + fnp.sin(x)

    lowered = fg.jit(fun).lower(F32_3)
    assert lowered.as_text() == program(
        """
        { lambda ; a:f32[3]. let
            b:f32[3] = sin a
            c:f32[3] = mul b 1.0:f32[]
            d:f32[3] = sin a
            e:f32[3] = add c d
          in (e,) }
        """
    )
    assert lowered.as_text(optimized=True) == program(
        """
        { lambda ; a:f32[3]. let
            b:f32[3] = sin a
            c:f32[3] = add b b
          in (c,) }
        """
    )


# ---------------------------------------------------------------------------------------------
# Passes never change results: random programs of elementwise and shape operations


def _literal(data, dtype: np.dtype):
    """A scalar operand that the simplifier may or may not treat as an identity."""
    values = [0, 1, 2] if dtype.kind in "iu" else [0.0, -0.0, 1.0, 2.0, 0.5]
    value = data.draw(st.sampled_from(values))
    weak = data.draw(st.booleans())
    return value if weak else np.array(value, dtype)[()]


def _random_op(data, pool: list):
    """Draw one operation on values of `pool`; returns it with its operands, so that it can
    be applied again to the same operands (a common subexpression)."""
    x = data.draw(st.sampled_from(pool))
    kinds = ["unary", "binary", "literal", "scalar", "transpose", "reshape", "convert"]
    kind = data.draw(st.sampled_from([*kinds, "broadcast", "call"]))
    if kind == "unary":
        names = ["neg", "abs"] + (["sin", "floor"] if x.dtype.kind == "f" else [])
        op = getattr(lax, data.draw(st.sampled_from(names)))
        return op, [x]
    if kind == "binary":
        partners = [
            y
            for y in pool
            if y.dtype == x.dtype and (x.ndim == 0 or y.ndim == 0 or y.shape == x.shape)
        ]
        op = getattr(lax, data.draw(st.sampled_from(["add", "sub", "mul", "max"])))
        return op, [x, data.draw(st.sampled_from(partners))]
    if kind in ("literal", "scalar"):
        op = getattr(lax, data.draw(st.sampled_from(["add", "sub", "mul"])))
        literal = _literal(data, x.dtype)
        if kind == "scalar":  # only literals: constant folding's work
            first = np.array(_literal(data, x.dtype), x.dtype)[()]
            return lambda: op(first, literal), []
        if data.draw(st.booleans()):
            return lambda v: op(literal, v), [x]
        return lambda v: op(v, literal), [x]
    if kind == "transpose":
        permutation = tuple(data.draw(st.permutations(range(x.ndim))))
        return lambda v: transpose_p.bind(v, permutation=permutation), [x]
    if kind == "reshape":
        new_sizes = data.draw(st.sampled_from([x.shape, x.shape[::-1], (x.size,)]))
        dimensions = data.draw(st.none() | st.permutations(range(x.ndim)).map(tuple))
        return lambda v: reshape_p.bind(v, new_sizes=new_sizes, dimensions=dimensions), [x]
    if kind == "convert":
        new_dtype = data.draw(st.sampled_from([x.dtype, np.dtype("float32"), np.dtype("int32")]))
        weak = data.draw(st.booleans())
        return lambda v: convert_element_type_p.bind(v, new_dtype=new_dtype, weak_type=weak), [x]
    if kind == "broadcast":
        shape = pool[0].shape if x.ndim == 0 else x.shape
        dims = () if x.ndim == 0 else tuple(range(x.ndim))
        return lambda v: broadcast_in_dim_p.bind(v, shape=shape, broadcast_dimensions=dims), [x]
    inner, operands = _random_op(data, pool)
    return fg.jit(lambda *vs: neg_p.bind(neg_p.bind(inner(*vs)))), operands


@st.composite
def random_programs(draw):
    dtype = np.dtype(draw(st.sampled_from(["float32", "float64", "int32"])))
    shape = draw(fst.shapes(max_dims=3, min_side=1, max_side=3))
    x = draw(fst.arrays(dtype, shape))
    s = draw(fst.arrays(dtype, ()))
    if dtype.kind == "f" and draw(st.booleans()):
        # Small whole numbers and zeros of both signs, where identities like x + 0.0 fail.
        x, s = np.trunc(x / 4), np.trunc(s / 4)
    data = draw(st.data())

    def fun(x, s):
        pool, applied = [x, s], []
        for _ in range(data.draw(st.integers(1, 12))):
            if applied and data.draw(st.integers(0, 4)) == 0:
                op, operands = data.draw(st.sampled_from(applied))
            else:
                op, operands = _random_op(data, pool)
            applied.append((op, operands))
            pool.append(op(*operands))
        return data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4))

    return fg.make_jaxpr(fun)(x, s), (x, s)


def test_an_inlined_jit_is_compared_on_the_reference_backend():
    """The dev profile's draw: jit(sin, then two negations) at 1.0, which optimizing inlines
    and simplifies to the reference's sin."""
    x = np.ones(2, np.float32)
    closed = fg.make_jaxpr(fg.jit(lambda a: lax.neg(lax.neg(lax.sin(a)))))(x)
    optimized = passes.optimize(closed)
    assert not any(eqn.primitive is jit_p for eqn in optimized.eqns)
    assert_bits_equal(evaluate(optimized, x)[0], evaluate(closed, x)[0])


@given(random_programs())
def test_optimize_never_changes_results_or_avals(case):
    closed, args = case
    before = str(closed)
    optimized = passes.optimize(closed)
    assert str(closed) == before
    assert optimized.out_avals == closed.out_avals
    assert not any(eqn.primitive is jit_p for eqn in optimized.eqns)
    for out, ref in zip(evaluate(optimized, *args), evaluate(closed, *args)):
        assert_bits_equal(out, ref)
    assert passes.optimize(optimized) is optimized
