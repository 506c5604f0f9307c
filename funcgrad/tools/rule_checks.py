"""The generic rule checks: one per rule, run on any primitive that has a recipe.

Each check draws one example from the primitive's recipe (`funcgrad.tools.recipes`) with a
hypothesis `data` object and asserts one rule against an independent definition:

    impl            the NumPy implementation against the recipe's reference (float64)
    abstract_eval   the avals tracing predicts against those eager execution returns
    jvp             forward derivatives against central finite differences in float64,
                    to second order where the primitive is twice differentiable
    transpose       the adjoint identity <ct, J t> = <J^T ct, t> of the linearized function
    batch           vmap against a Python loop over lanes, for a drawn placement of the batch
                    dimension of each operand (first, last, middle or unbatched), >= 2 lanes
    empty_batch     vmap over zero lanes, eager and compiled on the CPU backends, and its
                    jvp and vjp: every result is empty, with the lane's shape and dtype
    jit             a jitted call on each compiled backend against eager execution

Each check also asserts that the example reached the rule it checks, so a recipe that misses
its primitive fails instead of passing vacuously. `watched` and `mutated` wrap one rule of one
primitive for the duration of a block: the first counts calls, the second perturbs what the
rule returns (the mutation self-check, `funcgrad.tools.mutate_rules`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import core, dtypes, tree_util
from funcgrad.config import config
from funcgrad.interpreters.ad import Zero, float0
from funcgrad.ir import eval_jaxpr
from funcgrad.lax.base import asarray
from funcgrad.test_util import _conj, _inner, check_grads
from funcgrad.tools.recipes import COMPILED_BACKENDS, CUDA_BACKENDS, RECIPES, Case, Recipe

RULE_CHECKS = ("impl", "abstract_eval", "jvp", "transpose", "batch", "empty_batch", "jit")


# ---------------------------------------------------------------------------------------------
# Watching and perturbing one rule


_RULE_ATTRIBUTES = {"impl": "impl", "jvp": "jvp", "transpose": "transpose", "batch": "batch"}


@contextlib.contextmanager
def _wrapped_rule(primitive: core.Primitive, rule: str, wrap: Callable) -> Iterator[None]:
    attribute = _RULE_ATTRIBUTES[rule]
    original = getattr(primitive, attribute)
    setattr(primitive, attribute, wrap(original))
    try:
        yield
    finally:
        setattr(primitive, attribute, original)


@contextlib.contextmanager
def watched(primitive: core.Primitive, rule: str) -> Iterator[list]:
    """Count the calls of one rule: the yielded list gets one entry per call."""
    calls: list = []

    def wrap(original):
        def counting(*args, **params):
            calls.append(None)
            return original(*args, **params)

        return counting

    with _wrapped_rule(primitive, rule, wrap):
        yield calls


def perturb(value):
    """A wrong version of a rule's output: floats scaled by 1.25, integers with their lowest
    bit flipped, booleans negated; symbolic zeros, float0 and missing values stay as they are."""
    if isinstance(value, (list, tuple)):
        return type(value)(perturb(v) for v in value)
    if value is None or type(value) is Zero or not hasattr(value, "dtype"):
        return value
    dtype = np.dtype(value.dtype)
    if dtype == float0:
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        if dtype.kind == "b":
            return np.logical_not(value)
        if dtype.kind in "iu":
            return value ^ dtype.type(1)
        return (value * 1.25).astype(dtype)
    if dtype.kind == "b":
        return ~value
    if dtype.kind in "iu":
        return value ^ 1
    return value * 1.25


def _perturbing(rule: str):
    def wrap(original):
        def mutant(*args, **params):
            out = original(*args, **params)
            if rule == "jvp":
                primal_out, tangent_out = out
                return primal_out, perturb(tangent_out)
            if rule == "batch":
                values, batch_dims = out
                return perturb(values), batch_dims
            return perturb(out)

        return mutant

    return wrap


@contextlib.contextmanager
def mutated(primitive: core.Primitive, rule: str) -> Iterator[None]:
    """Perturb what one rule returns for the duration of the block."""
    with _wrapped_rule(primitive, rule, _perturbing(rule)):
        yield


# ---------------------------------------------------------------------------------------------
# Drawing examples


def _draw_case(data, recipe: Recipe, derivative: bool = False) -> Case:
    case = data.draw(recipe.case, label="case")
    return recipe.derivative_case(case) if derivative else case


def _draw_operands(data, recipe: Recipe, case: Case) -> list[np.ndarray]:
    return [data.draw(recipe.operand(case, i), label=f"operand {i}") for i in range(case.arity)]


def _bound(recipe: Recipe, case: Case) -> Callable:
    def fun(*operands):
        return recipe.fun(*[asarray(x) for x in operands], **case.params)

    return fun


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in tree_util.tree_leaves(tree)]


def _as_float64(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x.astype(np.float64) if dtypes.is_float(x.dtype) else x


def _assert_values(actual, expected, tolerance: dict, what: str) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if actual.dtype.kind in "biu" and expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    np.testing.assert_allclose(
        _as_float64(actual), _as_float64(expected), equal_nan=True, err_msg=what, **tolerance
    )


def _reached(calls: list, primitive: str, rule: str) -> None:
    assert calls, f"the recipe for {primitive} never reached its {rule} rule"


# ---------------------------------------------------------------------------------------------
# The checks


def check_impl(name: str, data) -> None:
    """Eager execution and the staged program, evaluated equation by equation (so the
    primitive's impl runs even where eager execution takes another path, as for jit), both
    against the reference."""
    recipe = RECIPES[name]
    case = _draw_case(data, recipe)
    operands = _draw_operands(data, recipe, case)
    fun = _bound(recipe, case)
    eager = _leaves(fun(*operands))
    closed = fg.make_jaxpr(fun)(*operands)
    # On the host: with a GPU as the default platform, eager operations would run there.
    with fg.default_device(fg.devices("cpu")[0]), watched(core.PRIMITIVES[name], "impl") as calls:
        staged = _leaves(eval_jaxpr(closed.jaxpr, closed.consts, *map(asarray, operands)))
    _reached(calls, name, "impl")
    expected = _leaves(recipe.reference(*[_as_float64(x) for x in operands], **case.params))
    assert len(eager) == len(expected), (
        f"{len(eager)} outputs vs {len(expected)} from the reference"
    )
    for i, (actual, evaluated, reference) in enumerate(zip(eager, staged, expected)):
        tolerance = recipe.tolerance(actual.dtype)
        _assert_values(actual, reference, tolerance, f"{name} output {i} (eager)")
        _assert_values(evaluated, reference, tolerance, f"{name} output {i} (staged)")


def check_abstract_eval(name: str, data) -> None:
    recipe = RECIPES[name]
    case = _draw_case(data, recipe)
    operands = _draw_operands(data, recipe, case)
    fun = _bound(recipe, case)
    eager = tree_util.tree_leaves(fun(*operands))
    with watched(core.PRIMITIVES[name], "impl"):
        closed = fg.make_jaxpr(fun)(*operands)
    assert any(eqn.primitive.name == name for eqn in closed.jaxpr.eqns), (
        f"the recipe for {name} does not bind it:\n{closed}"
    )
    staged = closed.out_avals
    assert len(eager) == len(staged)
    for leaf, aval in zip(eager, staged):
        assert leaf.aval == aval, f"{name}: eager {leaf.aval} vs traced {aval}"


def check_jvp(name: str, data, order: int | None = None) -> None:
    recipe = RECIPES[name]
    order = recipe.jvp_order if order is None else order
    case = _draw_case(data, recipe, derivative=True)
    operands = _draw_operands(data, recipe, case)
    assume(_has_float(case.dtypes) and recipe.smooth(*operands, **case.params))
    with watched(core.PRIMITIVES[name], "jvp") as calls:
        check_grads(_float_outputs(_bound(recipe, case)), operands, order=order, modes=("fwd",))
    _reached(calls, name, "jvp")


def _has_float(operand_dtypes) -> bool:
    return any(np.dtype(d).kind in "fc" for d in operand_dtypes)


def _float_outputs(fun: Callable) -> Callable:
    """fun with its integer and boolean outputs dropped: they have no derivative to check."""

    def differentiable(*operands):
        leaves = tree_util.tree_leaves(fun(*operands))
        return [x for x in leaves if np.dtype(x.dtype).kind in "fc"]

    return differentiable


def check_transpose(name: str, data) -> None:
    recipe = RECIPES[name]
    case = _draw_case(data, recipe, derivative=True)
    operands = _draw_operands(data, recipe, case)
    assume(_has_float(case.dtypes) and recipe.smooth(*operands, **case.params))
    fun = _float_outputs(_bound(recipe, case))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    tangents = [_random_tangent(x, rng) for x in operands]
    _, tangent_out = fg.jvp(fun, tuple(operands), tuple(tangents))
    with watched(core.PRIMITIVES[name], "transpose") as calls:
        out, pullback = fg.vjp(fun, *operands)
        cotangent = tree_util.tree_map(lambda x: _random_tangent(np.asarray(x), rng), out)
        # The transpose of a complex derivative pairs with conjugates (see funcgrad.test_util).
        cotangent_in = _conj(pullback(tree_util.tree_map(_cotangent_arg, _conj(cotangent))))
    _reached(calls, name, "transpose")
    lhs = _inner(tangent_out, cotangent)
    rhs = _inner(tangents, cotangent_in)
    scale = max(1.0, abs(lhs), abs(rhs))
    coarsest_eps = max(
        np.finfo(x.dtype).eps for x in _leaves(out) + operands if x.dtype.kind in "fc"
    )
    tolerance = 1e-9 if coarsest_eps < 1e-15 else 1e-5
    np.testing.assert_allclose(
        lhs / scale, rhs / scale, rtol=tolerance, atol=tolerance, err_msg=name
    )


def _random_tangent(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if x.dtype.kind not in "fc":
        return np.zeros(x.shape, float0)
    if x.dtype.kind == "c":
        parts = rng.standard_normal((2,) + x.shape)
        return (parts[0] + 1j * parts[1]).astype(x.dtype)
    return rng.standard_normal(x.shape).astype(x.dtype)


def _cotangent_arg(x):
    return x if x.dtype == float0 else asarray(x)


def check_batch(name: str, data) -> None:
    """vmap against a loop over 2-3 lanes, for three placements of the batch axes: one drawn
    per operand (any axis, or unbatched), all first, and all last."""
    recipe = RECIPES[name]
    case = _draw_case(data, recipe)
    lanes = data.draw(st.integers(2, 3), label="lanes")
    values = [
        [data.draw(recipe.operand(case, i), label=f"operand {i} lane {k}") for k in range(lanes)]
        for i in range(case.arity)
    ]
    drawn = [
        data.draw(st.sampled_from([None, *range(len(shape) + 1)]), label=f"in_axis {i}")
        for i, shape in enumerate(case.shapes)
    ]
    placements = [
        drawn,
        [0] * case.arity,
        [len(shape) for shape in case.shapes],
    ]
    fun = _bound(recipe, case)
    for in_axes in placements:
        if all(axis is None for axis in in_axes):
            continue
        operands = [
            lane_values[0] if axis is None else np.stack(lane_values, axis=axis)
            for lane_values, axis in zip(values, in_axes)
        ]
        with watched(core.PRIMITIVES[name], "batch") as calls:
            batched = _leaves(fg.vmap(fun, in_axes=tuple(in_axes))(*operands))
        _reached(calls, name, "batch")
        per_lane = [
            _leaves(fun(*[v[0] if axis is None else v[k] for v, axis in zip(values, in_axes)]))
            for k in range(lanes)
        ]
        for j, actual in enumerate(batched):
            expected = np.stack([lane[j] for lane in per_lane])
            what = f"{name} output {j}, in_axes {in_axes}"
            assert actual.dtype == expected.dtype, f"{what}: {actual.dtype} vs {expected.dtype}"
            _assert_values(actual, expected, recipe.tolerance(actual.dtype), what)


def check_empty_batch(name: str, data) -> None:
    """vmap over a batch of zero lanes: every operand batched along a leading axis of size 0.

    Batching rules build helper operations (gathers, scatters, broadcasts) whose own shape
    checks meet an empty axis here; so do the jvp and transpose rules on empty operands, and
    the compiled programs. Each result must be empty with the lane's shape and dtype; a
    derivative with respect to an empty operand is empty too.
    """
    recipe = RECIPES[name]
    case = _draw_case(data, recipe)
    operands = _draw_operands(data, recipe, case)
    fun = _bound(recipe, case)
    lane = _leaves(fun(*operands))
    expected = [((0,) + x.shape, x.dtype) for x in lane]
    no_lanes = [_no_lanes(x) for x in operands]
    with watched(core.PRIMITIVES[name], "batch") as calls:
        eager = _leaves(fg.vmap(fun)(*no_lanes))
    _reached(calls, name, "batch")
    _assert_empty_results(eager, expected, f"{name} vmapped over zero lanes")
    previous = config.jit_backend
    for backend in () if "jit" in recipe.reasons else ("numpy", "llvm"):
        try:
            config.update("jit_backend", backend)
            jitted = _leaves(fg.jit(fg.vmap(fun))(*no_lanes))
        finally:
            config.update("jit_backend", previous)
        _assert_empty_results(jitted, expected, f"{name} vmapped over zero lanes, jit[{backend}]")
    if "jvp" not in checked_rules(name) or not _has_float(case.dtypes):
        return
    case = recipe.derivative_case(case)
    no_lanes = [_no_lanes(x) for x in _draw_operands(data, recipe, case)]
    batched = _float_outputs(fg.vmap(_bound(recipe, case)))
    rng = np.random.default_rng(0)
    tangents = [_random_tangent(x, rng) for x in no_lanes]
    _, tangent_out = fg.jvp(batched, tuple(no_lanes), tuple(tangents))
    assert all(np.size(t) == 0 for t in tangent_out), f"{name}: tangents of empty outputs"
    if "transpose" in recipe.reasons:  # (not reverse-differentiable)
        return
    out, pullback = fg.vjp(batched, *no_lanes)
    zeros = tree_util.tree_map(lambda x: _cotangent_arg(np.zeros(x.shape, x.dtype)), out)
    cotangents = pullback(zeros)
    for i, (x, ct) in enumerate(zip(no_lanes, cotangents)):
        if x.dtype.kind in "fc":
            assert ct.shape == x.shape and ct.dtype == x.dtype, (
                f"{name}: the cotangent of empty operand {i} is {ct.aval}, not {x.dtype}{x.shape}"
            )


def _no_lanes(x) -> np.ndarray:
    """An empty stack of arrays like `x`: a leading axis of size 0."""
    x = np.asarray(x)
    return np.zeros((0,) + x.shape, x.dtype)


def _assert_empty_results(actual: list, expected: list, what: str) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs vs {len(expected)}"
    for j, (value, (shape, dtype)) in enumerate(zip(actual, expected)):
        assert value.shape == shape and value.dtype == dtype, (
            f"{what}: output {j} is {value.dtype}{value.shape}, not {dtype}{shape}"
        )


def check_jit(name: str, data, backend: str) -> None:
    recipe = RECIPES[name]
    case = _draw_case(data, recipe)
    operands = _draw_operands(data, recipe, case)
    fun = _bound(recipe, case)
    previous = config.jit_backend
    try:
        # Eager is the reference: programs it runs (a jit inside `fun`) run on the reference
        # backend too.
        config.update("jit_backend", "numpy")
        eager = tree_util.tree_leaves(fun(*operands))
        config.update("jit_backend", backend)
        jitted = tree_util.tree_leaves(fg.jit(fun)(*operands))
    finally:
        config.update("jit_backend", previous)
    assert len(jitted) == len(eager)
    for j, (value, leaf) in enumerate(zip(jitted, eager)):
        assert value.aval == leaf.aval, f"{name} output {j}: eager {leaf.aval} vs jit {value.aval}"
        if backend == "numpy":
            np.testing.assert_array_equal(
                _as_float64(np.asarray(value)), _as_float64(np.asarray(leaf))
            )
        else:
            _assert_values(
                value, leaf, recipe.tolerance(value.dtype), f"{name} output {j} ({backend})"
            )


def check_export(name: str, data) -> None:
    """The primitive's program exported, written to bytes and read back (`funcgrad.export`):
    the copy computes what the original does, bit for bit on the reference backend."""
    recipe = RECIPES[name]
    case = _draw_case(data, recipe)
    operands = _draw_operands(data, recipe, case)
    jitted = fg.jit(_bound(recipe, case))
    specs = [core.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in operands]
    restored = fg.export.deserialize(fg.export.export(jitted)(*specs).serialize())
    previous = config.jit_backend
    try:
        config.update("jit_backend", "numpy")
        expected = tree_util.tree_leaves(jitted(*operands))
        actual = tree_util.tree_leaves(restored.call(*operands))
    finally:
        config.update("jit_backend", previous)
    assert len(actual) == len(expected)
    for j, (value, leaf) in enumerate(zip(actual, expected)):
        assert value.aval == leaf.aval, f"{name} output {j}: {leaf.aval} vs exported {value.aval}"
        np.testing.assert_array_equal(_as_float64(np.asarray(value)), _as_float64(np.asarray(leaf)))


def check_eager_on_gpu(name: str, data, backend: str) -> None:
    """The primitive applied eagerly to operands placed on a GPU (or the emulated one):
    computed there, left there, equal to the host's eager result."""
    recipe = RECIPES[name]
    case = _draw_case(data, recipe)
    operands = _draw_operands(data, recipe, case)
    fun = _bound(recipe, case)
    device = fg.devices(backend)[0]
    previous = config.jit_backend
    try:
        config.update("jit_backend", "numpy")  # the host's eager result, the reference
        expected = tree_util.tree_leaves(fun(*operands))
        got = tree_util.tree_leaves(fun(*fg.device_put(operands, device)))
    finally:
        config.update("jit_backend", previous)
    assert len(got) == len(expected)
    for j, (value, leaf) in enumerate(zip(got, expected)):
        assert value.aval == leaf.aval, f"{name} output {j}: host {leaf.aval} vs GPU {value.aval}"
        if operands:  # (operand-less primitives make arrays on the default device, the CPU)
            assert value.device == device, f"{name} output {j} is on {value.device}, not GPU"
        what = f"{name} output {j} (eager on {device!r})"
        _assert_values(value, leaf, recipe.tolerance(value.dtype), what)


CHECKS: dict[str, Callable] = {
    "impl": check_impl,
    "abstract_eval": check_abstract_eval,
    "jvp": check_jvp,
    "transpose": check_transpose,
    "batch": check_batch,
    "empty_batch": check_empty_batch,
}

# Checks named for what they draw rather than for the rule they exercise.
_NEEDS = {"empty_batch": "batch"}


def checked_rules(name: str) -> list[str]:
    """The rules of `name` that the generic checks exercise (jit counted once per backend)."""
    recipe = RECIPES.get(name)
    if recipe is None:
        return []
    primitive = core.PRIMITIVES[name]
    rules = [
        rule
        for rule in CHECKS
        if rule not in recipe.reasons
        and _NEEDS.get(rule, rule) not in recipe.reasons
        and (rule == "abstract_eval" or primitive.has_rule(_NEEDS.get(rule, rule)))
    ]
    if "jit" in recipe.reasons:  # (what cannot be compiled cannot run on a GPU either)
        return rules
    compiled = [f"jit[{b}]" for b in COMPILED_BACKENDS] + [f"eager[{b}]" for b in CUDA_BACKENDS]
    return rules + compiled + ([] if "export" in recipe.reasons else ["export"])


def run_check(name: str, rule: str, data, jvp_order: int | None = None) -> None:
    if rule.startswith("jit["):
        check_jit(name, data, rule[4:-1])
    elif rule.startswith("eager["):
        check_eager_on_gpu(name, data, rule[6:-1])
    elif rule == "jvp":
        check_jvp(name, data, jvp_order)
    elif rule == "export":
        check_export(name, data)
    else:
        CHECKS[rule](name, data)
