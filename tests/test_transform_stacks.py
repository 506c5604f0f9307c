"""Random stacks of transformations over programs taking and returning pytrees.

The programs are test_transform_properties' random programs, taking a dict holding a None leaf
and returning a dict with a None leaf, an integer leaf, an argument and a constant, so that
pytrees, None leaves, float0 tangents and outputs that are inputs or depend on none flow
through every stage. Each stage of a stack is checked
against its definition applied to the stage below it, as that stage is: jit and checkpoint
against the function itself, vmap against a loop of the lanes, and every derivative against
central differences in float64 along random directions. A stage that fails is thus the one
that composes wrongly with what it wraps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import tree_util
from tests.test_transform_properties import Features, cases

FLOAT0 = fg.dtypes.float0
EPS = 1e-6
TOL = dict(rtol=1e-5, atol=1e-5)
FORWARD = {"jvp", "linearize", "linear_transpose", "jacfwd", "hessian"}
REVERSE = {"vjp", "linear_transpose", "grad", "jacrev", "hessian"}
JACOBIANS = ["jacfwd", "jacrev", "hessian"]
STAGES = ["jit", "checkpoint", "vmap", "jvp", "linearize", "vjp", "linear_transpose", "grad"]


def _is_float(leaf) -> bool:  # of arrays and tracers
    return np.dtype(leaf.dtype).kind == "f"


def _floats(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in tree_util.tree_leaves(tree) if _is_float(np.asarray(x))]


def _float_part(tree):
    """`tree` with its integer and float0 leaves replaced by None."""
    return tree_util.tree_map(lambda x: x if _is_float(x) else None, tree)


def _loss(tree):
    floats = [x for x in tree_util.tree_leaves(tree) if _is_float(x)]
    return sum(fnp.sum(fnp.sin(x)) * (i + 1) for i, x in enumerate(floats))


def _cotangent(tree):
    """cos of the float leaves (a cotangent depending on the point), float0 zeros elsewhere."""
    return tree_util.tree_map(
        lambda x: fnp.cos(x) if _is_float(x) else np.zeros(x.shape, FLOAT0),
        tree,
    )


def _to_numpy(tree):
    return tree_util.tree_map(np.asarray, tree)


def _along(params, direction, step: float):
    return tree_util.tree_map(lambda p, d: np.asarray(p) + step * d, params, direction)


def _directional(fun: Callable, params, direction) -> list[np.ndarray]:
    """Central differences of the float leaves of fun's output along `direction`."""
    plus = _floats(fun(_along(params, direction, EPS)))
    minus = _floats(fun(_along(params, direction, -EPS)))
    return [(a - b) / (2 * EPS) for a, b in zip(plus, minus)]


def _dot(a, b) -> float:
    return sum(float(np.sum(np.asarray(x) * y)) for x, y in zip(_floats(a), _floats(b)))


def _assert_trees_equal(actual, expected, **tol):
    actual_leaves, actual_tree = tree_util.tree_flatten(actual)
    expected_leaves, expected_tree = tree_util.tree_flatten(expected)
    assert actual_tree == expected_tree, (actual_tree, expected_tree)
    for a, e in zip(actual_leaves, expected_leaves):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, e, **(tol or dict(rtol=1e-12, atol=1e-12)))
        elif a.dtype != FLOAT0:
            np.testing.assert_array_equal(a, e)


class Stage(NamedTuple):
    name: str
    axes: tuple | None = None  # vmap: (x's axis, y's axis, out axis); None where unmapped
    size: int = 0

    def transform(self, g: Callable) -> Callable:
        if self.name == "jit":
            return fg.jit(g)
        if self.name == "checkpoint":
            return fg.checkpoint(g, policy=fg.checkpoint_policies.dots_saveable)
        if self.name == "vmap":
            x_axis, y_axis, out_axis = self.axes
            in_axes = ({"x": x_axis, "y": (y_axis, None)},)
            return fg.vmap(g, in_axes=in_axes, out_axes=out_axis, axis_size=self.size)
        if self.name == "jvp":
            return lambda p: fg.jvp(g, (p,), (tree_util.tree_map(fnp.cos, p),))
        if self.name == "linearize":
            return lambda p: fg.linearize(g, p)[1](tree_util.tree_map(fnp.cos, p))
        if self.name == "vjp":
            return lambda p: fg.vjp(g, p)[1](_cotangent(g(p)))[0]
        if self.name == "linear_transpose":

            def transposed(p):
                def tangent_map(t):
                    return _float_part(fg.jvp(g, (p,), (t,))[1])

                return fg.linear_transpose(tangent_map, p)(_cotangent(_float_part(g(p))))[0]

            return transposed
        if self.name == "grad":
            return fg.grad(lambda p: (_loss(g(p)), g(p)), has_aux=True)
        if self.name == "hessian":
            return fg.hessian(lambda p: _loss(g(p)))
        return getattr(fg, self.name)(lambda p: _float_part(g(p)))  # jacfwd, jacrev

    def check(self, out, g: Callable, params, rng) -> None:
        """`out` (this stage at `params`) against the definition of the stage over `g`."""
        name = self.name
        if name in ("jit", "checkpoint"):
            _assert_trees_equal(out, g(params), rtol=1e-9, atol=1e-9)
        elif name == "vmap":
            self._check_lanes(out, g, params)
        elif name in ("jvp", "linearize"):
            tangent_out = out[1] if name == "jvp" else out
            if name == "jvp":
                _assert_trees_equal(out[0], g(params), rtol=1e-9, atol=1e-9)
            expected_tree = tree_util.tree_structure(g(params))
            assert tree_util.tree_structure(tangent_out) == expected_tree
            for leaf in tree_util.tree_leaves(tangent_out):
                assert _is_float(leaf) or np.asarray(leaf).dtype == FLOAT0
            direction = tree_util.tree_map(np.cos, params)
            for got, fd in zip(_floats(tangent_out), _directional(g, params, direction)):
                np.testing.assert_allclose(got, fd, **TOL)
        elif name in ("vjp", "linear_transpose", "grad"):
            cotangent_in = out[0] if name == "grad" else out
            assert tree_util.tree_structure(cotangent_in) == tree_util.tree_structure(params)
            at = _to_numpy(g(params))
            if name == "grad":
                _assert_trees_equal(out[1], at, rtol=1e-9, atol=1e-9)
                weights = [(i + 1) * np.cos(x) for i, x in enumerate(_floats(at))]
            else:
                weights = [np.cos(x) for x in _floats(at)]

            def paired(p):  # <weights, g(p)>: its gradient is the pulled-back cotangent
                return [
                    np.asarray(sum(float(np.sum(w * x)) for w, x in zip(weights, _floats(g(p)))))
                ]

            direction = _random_like(rng, params)
            (fd,) = _directional(paired, params, direction)
            np.testing.assert_allclose(_dot(cotangent_in, direction), fd, **TOL)
        else:
            self._check_jacobian(out, g, params, rng)

    def _check_lanes(self, out, g, params):
        x_axis, y_axis, out_axis = self.axes
        lanes = []
        for i in range(self.size):
            x = params["x"] if x_axis is None else np.take(params["x"], i, x_axis)
            y = params["y"][0] if y_axis is None else np.take(params["y"][0], i, y_axis)
            lanes.append(_to_numpy(g({"x": x, "y": (y, None)})))
        leaves = [tree_util.tree_leaves(lane) for lane in lanes]
        stacked = [
            np.stack([lane[k] for lane in leaves], out_axis % (leaves[0][k].ndim + 1))
            for k in range(len(leaves[0]))
        ]
        expected = tree_util.tree_unflatten(tree_util.tree_structure(lanes[0]), stacked)
        _assert_trees_equal(out, expected, rtol=1e-9, atol=1e-9)

    def _check_jacobian(self, out, g, params, rng):
        """The Jacobian (of g, or of the gradient of the loss of g) contracted with a random
        direction, against differences of g (or of the gradient) along it."""
        direction = _random_like(rng, params)
        if self.name == "hessian":
            below = fg.grad(lambda p: _loss(g(p)))
            out_tree = params
        else:
            below = g
            out_tree = _float_part(_to_numpy(g(params)))
        fd = _directional(below, params, direction)
        # out: for each output leaf, a params-shaped tree of blocks (output shape + input shape)
        blocks = tree_util.tree_structure(out_tree).flatten_up_to(out)
        in_leaves = tree_util.tree_leaves(direction)
        for block, expected in zip(blocks, fd):
            contracted = sum(
                np.tensordot(np.asarray(b), d, axes=d.ndim)
                for b, d in zip(tree_util.tree_leaves(block), in_leaves)
            )
            np.testing.assert_allclose(contracted, expected, **TOL)


def _random_like(rng, tree):
    return tree_util.tree_map(lambda x: rng.standard_normal(np.shape(x)), tree)


def tree_program(case) -> Callable:
    """The case's program on a dict of arguments, returning a dict with None and integer
    leaves, an argument as it came and a constant."""

    def f(params):
        x, (y, unused) = params["x"], params["y"]
        assert unused is None
        out = case.f(x, y)
        more = [fnp.sin(y), None, y, fnp.zeros(2)]  # an input as it is, and a constant
        return {"out": out, "more": more, "index": fnp.argmax(fnp.ravel(out))}

    return f


@st.composite
def stage_names(draw) -> list[str]:
    names = draw(st.lists(st.sampled_from(STAGES), min_size=1, max_size=3))
    if draw(st.booleans()):  # at most one Jacobian: their outputs grow fast
        names.insert(draw(st.integers(0, len(names))), draw(st.sampled_from(JACOBIANS)))
    return names


def _draw_vmap(data, params, out) -> Stage:
    """Axes for x and y (None: unmapped) and for the outputs, valid for the shapes at hand."""
    axes = []
    for value in (params["x"], params["y"][0]):
        axes.append(data.draw(st.one_of(st.none(), st.integers(-value.ndim - 1, value.ndim))))
    min_ndim = min(np.ndim(leaf) for leaf in tree_util.tree_leaves(out))
    axes.append(data.draw(st.integers(-min_ndim - 1, min_ndim)))
    return Stage("vmap", tuple(axes), data.draw(st.integers(1, 3)))


def _batched(params, axes, size):
    def batch(value, axis):
        if axis is None:
            return value
        return np.stack([value * (1.0 + 0.3 * i) for i in range(size)], axis % (value.ndim + 1))

    return {"x": batch(params["x"], axes[0]), "y": (batch(params["y"][0], axes[1]), None)}


@given(st.data(), stage_names(), st.integers(0, 2**16))
def test_each_stage_of_a_random_stack_over_pytrees_agrees_with_its_definition(data, names, seed):
    forward = any(name in FORWARD for name in names)
    reverse = any(name in REVERSE for name in names)
    case = data.draw(cases(Features(forward=forward, reverse=reverse)))
    rng = np.random.default_rng(seed)
    params = {"x": case.x, "y": (case.y, None)}
    g = tree_program(case)
    out = _to_numpy(g(params))
    for name in names:
        stage = _draw_vmap(data, params, out) if name == "vmap" else Stage(name)
        note(f"stage {stage}")
        if stage.name == "vmap":
            params = _batched(params, stage.axes[:2], stage.size)
        transformed = stage.transform(g)
        out = _to_numpy(transformed(params))
        stage.check(out, g, params, rng)
        g = transformed
    shapes = fg.eval_shape(g, params)
    assert tree_util.tree_structure(shapes) == tree_util.tree_structure(out)
    for shape, leaf in zip(tree_util.tree_leaves(shapes), tree_util.tree_leaves(out)):
        assert (shape.shape, np.dtype(shape.dtype)) == (leaf.shape, leaf.dtype)
