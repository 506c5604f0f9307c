"""funcgrad.optim.projections: each result is checked to be the nearest point of its set by
an independent characterization (for a polytope, the variational inequality <x - p, v - p>
<= 0 at every vertex v is necessary and sufficient; the simplex's threshold found by
bisection rather than sorting), on pytrees, under jit and vmap, and the simplex projection's
derivative against central differences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import tree_util
from funcgrad.optim import projections as proj

TOL = 1e-10


def as_tree(vector):
    """A pytree of mixed shapes holding the 7 elements of `vector`."""
    return {"a": vector[:4].reshape(2, 2), "b": [vector[4:6], vector[6]]}


def flat(tree):
    return np.concatenate(
        [np.ravel(np.asarray(x, np.float64)) for x in tree_util.tree_leaves(tree)]
    )


vectors = st.lists(
    st.floats(-5, 5, allow_nan=False, allow_subnormal=False), min_size=7, max_size=7
).map(lambda xs: np.array(xs, np.float64))
radii = st.floats(0.25, 4.0)


def simplex_by_bisection(x, scale):
    """The nearest point of {p >= 0, sum p = scale}: max(x - tau, 0) with the tau at which
    the sum equals scale, found by bisection on the decreasing sum."""
    low, high = x.min() - scale, x.max()
    for _ in range(200):
        tau = (low + high) / 2
        low, high = (tau, high) if np.maximum(x - tau, 0).sum() > scale else (low, tau)
    return np.maximum(x - (low + high) / 2, 0)


def assert_nearest_in_polytope(x, p, vertices):
    """p is the projection of x onto conv(vertices): <x - p, v - p> <= 0 for every v."""
    residual = x - p
    worst = max(residual @ (v - p) for v in vertices)
    assert worst <= 1e-9 * max(1.0, np.abs(x).max()), worst


@given(vectors, radii)
def test_simplex_is_the_nearest_point(x, scale):
    got = flat(proj.projection_simplex(as_tree(x), scale))
    np.testing.assert_allclose(got, simplex_by_bisection(x, scale), atol=1e-9)
    assert got.min() >= 0 and abs(got.sum() - scale) < 1e-9
    assert_nearest_in_polytope(x, got, scale * np.eye(7))


@given(vectors, radii)
def test_l1_ball_is_the_nearest_point(x, scale):
    got = flat(proj.projection_l1_ball(as_tree(x), scale))
    assert np.abs(got).sum() <= scale + 1e-9
    vertices = np.concatenate([scale * np.eye(7), -scale * np.eye(7)])
    assert_nearest_in_polytope(x, got, vertices)
    if np.abs(x).sum() <= scale:
        np.testing.assert_array_equal(got, x)


@given(vectors, radii)
def test_l1_sphere_keeps_signs_and_has_the_radius(x, scale):
    x = np.where(x == 0, 1.0, x)
    got = flat(proj.projection_l1_sphere(as_tree(x), scale))
    assert abs(np.abs(got).sum() - scale) < 1e-9
    assert np.all(got * x >= 0)
    wanted = np.sign(x) * simplex_by_bisection(np.abs(x), scale)
    np.testing.assert_allclose(got, wanted, atol=1e-9)


@given(vectors, radii)
def test_l2_and_linf_balls_and_spheres(x, scale):
    norm = np.linalg.norm(x)
    tree = as_tree(x)
    wanted_ball = x if norm <= scale else x * scale / norm
    np.testing.assert_allclose(flat(proj.projection_l2_ball(tree, scale)), wanted_ball, rtol=TOL)
    if norm > 0:
        sphere = flat(proj.projection_l2_sphere(tree, scale))
        np.testing.assert_allclose(sphere, x * scale / norm, rtol=TOL)
    box = flat(proj.projection_linf_ball(tree, scale))
    corners = np.array(list(itertools.product([-scale, scale], repeat=7)))
    assert_nearest_in_polytope(x, box, corners)


@given(vectors)
def test_orthant_box_and_hypercube(x):
    tree = as_tree(x)
    np.testing.assert_array_equal(flat(proj.projection_non_negative(tree)), np.maximum(x, 0))
    np.testing.assert_array_equal(flat(proj.projection_hypercube(tree)), np.clip(x, 0, 1))
    np.testing.assert_array_equal(flat(proj.projection_hypercube(tree, 2.5)), np.clip(x, 0, 2.5))
    lower, upper = as_tree(-np.arange(7.0)), as_tree(np.arange(7.0) / 2)
    got = flat(proj.projection_box(tree, lower, upper))
    np.testing.assert_array_equal(got, np.clip(x, -np.arange(7.0), np.arange(7.0) / 2))


@given(vectors, vectors, st.floats(-3, 3))
def test_vector_hyperplane_and_halfspace(x, a, b):
    a = np.where(np.abs(a) < 0.1, 1.0, a)
    tree_x, tree_a = as_tree(x), as_tree(a)
    along = flat(proj.projection_vector(tree_x, tree_a))
    np.testing.assert_allclose(along, (x @ a) / (a @ a) * a, rtol=1e-9, atol=1e-12)
    plane = flat(proj.projection_hyperplane(tree_x, tree_a, b))
    # On the plane, and x - p is normal to it.
    assert abs(plane @ a - b) < 1e-9 * max(1.0, np.abs(a).sum() * 5)
    moved = x - plane
    np.testing.assert_allclose(moved, (moved @ a) / (a @ a) * a, atol=1e-9)
    half = flat(proj.projection_halfspace(tree_x, tree_a, b))
    np.testing.assert_allclose(half, x if x @ a <= b else plane, rtol=1e-12, atol=1e-12)


def test_simplex_derivative_matches_central_differences():
    x = np.array([0.3, 0.5, -0.2, 0.4, 0.05, 1.1], np.float64)
    jacobian = np.asarray(fg.jacfwd(proj.projection_simplex)(x, 1.5))
    jacobian_reverse = np.asarray(fg.jacrev(proj.projection_simplex)(x, 1.5))
    step = 1e-6
    for i in range(x.size):
        dx = np.zeros_like(x)
        dx[i] = step
        central = (simplex_by_bisection(x + dx, 1.5) - simplex_by_bisection(x - dx, 1.5)) / (
            2 * step
        )
        np.testing.assert_allclose(jacobian[:, i], central, atol=1e-6)
        np.testing.assert_allclose(jacobian_reverse[:, i], central, atol=1e-6)


@pytest.mark.parametrize(
    "project",
    [
        proj.projection_simplex,
        proj.projection_l1_ball,
        proj.projection_l1_sphere,
        proj.projection_l2_ball,
        proj.projection_linf_ball,
    ],
)
def test_jit_and_vmap_agree_with_eager(project):
    batch = np.random.default_rng(1).standard_normal((5, 7)) * 2
    eager = np.stack([flat(project(as_tree(x), 1.5)) for x in batch])
    jitted = np.stack([flat(fg.jit(project)(as_tree(x), 1.5)) for x in batch])
    mapped = fg.vmap(lambda v: project(v, 1.5))(batch)
    np.testing.assert_allclose(jitted, eager, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(mapped), eager, rtol=1e-12, atol=1e-12)


def test_scale_broadcasts_over_a_tree_of_bounds():
    tree = {"a": np.array([-1.0, 0.5, 3.0]), "b": np.array(2.0)}
    got = proj.projection_hypercube(tree, {"a": 2.0, "b": 0.5})
    np.testing.assert_array_equal(got["a"], [0.0, 0.5, 2.0])
    np.testing.assert_array_equal(got["b"], 0.5)
