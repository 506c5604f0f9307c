"""funcgrad.extend.core: primitives of the user's own, through every interpretation: against
NumPy for values, finite differences for derivatives, a loop for vmap, eager for jit."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import export, lax
from funcgrad.config import config
from funcgrad.extend.core import Primitive, ShapedArray
from funcgrad.test_util import check_grads

# A primitive given only its composite: every rule is derived.
softsign_p = Primitive("test_extend_softsign")


@softsign_p.def_composite
def _softsign(x, *, scale):
    return scale * x / (1 + fnp.abs(x))


def softsign(x, scale=1.0):
    return softsign_p.bind(fnp.asarray(x), scale=scale)


def _softsign_reference(x, scale=1.0):
    return scale * x / (1 + np.abs(x))


# A linear primitive given its impl and every rule by hand (no composite): compiled programs
# call its impl on the host.
triple_p = Primitive("test_extend_triple")
triple_p.def_impl(lambda x: 3 * x)
triple_p.def_abstract_eval(lambda x: ShapedArray(x.shape, x.dtype))
triple_p.def_jvp(lambda primals, tangents: (triple_p.bind(*primals), triple_p.bind(*tangents)))
triple_p.def_transpose(lambda ct, x: [triple_p.bind(ct)])
triple_p.def_batch(lambda values, dims: (triple_p.bind(*values), dims[0]))

# Two results.
split_p = Primitive("test_extend_split", multiple_results=True)


@split_p.def_composite
def _split(x):
    return [fnp.maximum(x, 0.0), fnp.minimum(x, 0.0) * 2]


X = np.linspace(-2.3, 3.1, 12).reshape(3, 4)  # (no 0: softsign has a kink there)


@pytest.fixture(params=["llvm", "numpy", pytest.param("cuda_emulator", marks=pytest.mark.cuda)])
def backend(request):
    previous = config.jit_backend
    config.update("jit_backend", request.param)
    yield request.param
    config.update("jit_backend", previous)


def test_the_primitive_is_one_equation():
    jaxpr = fg.make_jaxpr(lambda x: softsign(x, 2.0) + 1)(X)
    assert [e.primitive for e in jaxpr.eqns][0] is softsign_p
    assert "test_extend_softsign[scale=2.0]" in str(jaxpr)


def test_derived_rules_compute_the_composite(backend):
    np.testing.assert_allclose(softsign(X, 2.0), _softsign_reference(X, 2.0), rtol=1e-12)
    jitted = fg.jit(lambda x: softsign(x, 2.0) * x)(X)
    np.testing.assert_allclose(jitted, _softsign_reference(X, 2.0) * X, rtol=1e-12)
    check_grads(lambda x: softsign(x, 0.5), (X,), order=2, modes=("fwd", "rev"))
    per_row = fg.vmap(lambda r: softsign(r, 3.0), in_axes=1, out_axes=1)(X)
    np.testing.assert_allclose(per_row, _softsign_reference(X, 3.0), rtol=1e-12)
    looped = fg.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: softsign(c), x))(X)
    expected = X
    for _ in range(3):
        expected = _softsign_reference(expected)
    np.testing.assert_allclose(looped, expected, rtol=1e-12)


def test_compiled_programs_inline_the_composite():
    previous = config.jit_backend
    config.update("jit_backend", "llvm")
    try:
        plan = fg.jit(lambda x: softsign(x) * 2).lower(X).compile().fusion_plan()
        hosted = fg.jit(lambda x: triple_p.bind(x) * 2).lower(X).compile().fusion_plan()
    finally:
        config.update("jit_backend", previous)
    assert "callback" not in plan.lower() and "test_extend_softsign" not in plan
    assert "test_extend_triple" in hosted


def test_rules_given_by_hand(backend):
    x = fnp.asarray(X)
    np.testing.assert_array_equal(fg.jit(lambda x: triple_p.bind(x) + 1)(x), 3 * X + 1)
    check_grads(triple_p.bind, (X,), order=2, modes=("fwd", "rev"))
    np.testing.assert_array_equal(fg.vmap(triple_p.bind, in_axes=1)(x), 3 * X.T)
    transposed = fg.linear_transpose(triple_p.bind, X)(np.ones_like(X))
    np.testing.assert_array_equal(transposed[0], np.full_like(X, 3.0))


def test_multiple_results(backend):
    positive, negative = fg.jit(split_p.bind)(X)
    np.testing.assert_array_equal(positive, np.maximum(X, 0))
    np.testing.assert_array_equal(negative, np.minimum(X, 0) * 2)
    grad = fg.grad(lambda x: sum(o.sum() for o in split_p.bind(x)))(X)
    np.testing.assert_array_equal(grad, np.where(X > 0, 1.0, 2.0))


def test_exported_programs_name_the_primitive():
    blob = export.export(fg.jit(lambda x: softsign(x, 2.0)))(X).serialize()
    np.testing.assert_allclose(
        export.deserialize(blob).call(X), _softsign_reference(X, 2.0), rtol=1e-12
    )


def test_a_name_declared_again_is_the_new_primitive():
    first = Primitive("test_extend_redeclared")
    first.def_composite(lambda x: x + 1)
    second = Primitive("test_extend_redeclared")
    second.def_composite(lambda x: x + 2)
    assert fg.core.PRIMITIVES["test_extend_redeclared"] is second
    assert float(first.bind(fnp.asarray(0.0))) == 1.0
    assert "test_extend_redeclared" not in fg.core.library_primitives()
    with pytest.raises(ValueError, match="already declared"):
        fg.core.Primitive("test_extend_redeclared")


def test_what_is_missing_or_wrong_is_named():
    bare = Primitive("test_extend_bare")
    with pytest.raises(NotImplementedError, match="test_extend_bare has no abstract evaluation"):
        bare.bind(fnp.asarray(1.0))
    bare.def_abstract_eval(lambda x: x)
    with pytest.raises(NotImplementedError, match="has no impl"):
        bare.bind(fnp.asarray(1.0))
    bare.def_impl(lambda x: np.stack([x, x]))
    with pytest.raises(TypeError, match=r"returned a float32\[2\] as output 0.*f32\[\]"):
        bare.bind(fnp.asarray(1.0))
    with pytest.raises(NotImplementedError, match="no jvp rule.*no composite"):
        fg.jvp(bare.bind, (1.0,), (1.0,))
    wrong = Primitive("test_extend_wrong_aval")
    wrong.def_abstract_eval(lambda x: (x.shape, x.dtype))
    with pytest.raises(TypeError, match="returns a ShapedArray or ShapeDtypeStruct"):
        wrong.bind(fnp.asarray(1.0))
