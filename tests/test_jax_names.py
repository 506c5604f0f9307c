"""JAX's names that funcgrad exposes over what it already computes: `fg.tree` (jax.tree),
`fg.lax.linalg` (jax.lax.linalg), lax's special functions (igamma, betainc, zeta, ...) and
`nn.initializers.delta_orthogonal`.

Each is checked against a definition of its own: tree functions against tree_util and
hand-written recursive walks, decompositions by reconstructing their matrices with NumPy,
special functions and their derivatives against SciPy and central differences in float64.
Where JAX is importable, the same inputs are also compared with JAX's functions (CI has no JAX;
the other checks always run).
"""

import dataclasses
import operator

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.special as sc
from hypothesis import given
from hypothesis import strategies as st
from trees import Point, ref_map, tree_strategy

import funcgrad as fg
import funcgrad.tree_util as tu

scalars = st.integers(-1000, 1000)
trees = tree_strategy(scalars)


def jax_or_skip():
    return pytest.importorskip("jax")


# --- fg.tree --------------------------------------------------------------------------------


def ref_walk(tree, stop=lambda path, node: False, path=()):
    """(path, leaf) pairs of the node types the strategy draws, depth first, a node where
    `stop(path, node)` holds being a leaf."""
    if stop(path, tree):
        return [(path, tree)]
    if tree is None:
        return []
    if isinstance(tree, dict):
        return [p for k in sorted(tree) for p in ref_walk(tree[k], stop, (*path, tu.DictKey(k)))]
    if isinstance(tree, Point):
        return [
            p
            for name in Point._fields
            for p in ref_walk(getattr(tree, name), stop, (*path, tu.GetAttrKey(name)))
        ]
    if isinstance(tree, (list, tuple)):
        return [
            p for i, c in enumerate(tree) for p in ref_walk(c, stop, (*path, tu.SequenceKey(i)))
        ]
    return [(path, tree)]


@dataclasses.dataclass(frozen=True)
class Tagged:
    """What a mapped function returns: not a pytree node, so a leaf of the result."""

    tag: object
    leaf: object


def grow(x):
    """A subtree standing in for one leaf, so that a tree of these has the original's
    structure as a proper prefix."""
    return [x, (None, {"k": x})]


def test_fg_tree_is_public():
    assert "tree" in fg.__all__
    assert fg.tree.map(lambda x: x + 1, {"x": 7, "y": 42}) == {"x": 8, "y": 43}


@given(trees)
def test_tree_names_agree_with_tree_util(tree):
    leaves, treedef = fg.tree.flatten(tree)
    assert (leaves, treedef) == tu.tree_flatten(tree)
    assert leaves == [leaf for _, leaf in ref_walk(tree)]
    assert fg.tree.leaves(tree) == leaves
    assert fg.tree.structure(tree) == treedef
    assert fg.tree.unflatten(treedef, leaves) == tree
    pairs, path_treedef = fg.tree.flatten_with_path(tree)
    assert pairs == ref_walk(tree) and path_treedef == treedef
    assert fg.tree.leaves_with_path(tree) == pairs
    assert (
        fg.tree.map(lambda x: -x, tree)
        == ref_map(lambda x: -x, tree)
        == tu.tree_map(lambda x: -x, tree)
    )
    assert fg.tree.all(tree) == all(leaves) == tu.tree_all(tree)
    assert fg.tree.reduce(operator.add, tree, 7) == 7 + sum(leaves)


@given(trees)
def test_map_with_path_passes_each_leafs_path(tree):
    got = fg.tree.map_with_path(lambda p, x, y: Tagged(tu.keystr(p), x + y), tree, tree)
    assert fg.tree.leaves(got) == [Tagged(tu.keystr(p), 2 * x) for p, x in ref_walk(tree)]
    assert got == tu.tree_map_with_path(lambda p, x, y: Tagged(tu.keystr(p), x + y), tree, tree)


@given(trees)
def test_later_trees_need_only_the_first_as_a_prefix(tree):
    full = ref_map(grow, tree)
    assert fg.tree.map(lambda x, sub: (x, sub), tree, full) == ref_map(lambda x: (x, grow(x)), tree)
    got = fg.tree.map_with_path(lambda p, x, sub: (p, sub), tree, full)
    paths = iter(p for p, _ in ref_walk(tree))
    assert got == ref_map(lambda x: (next(paths), grow(x)), tree)
    # broadcast fills each subtree of the full tree with the prefix leaf standing over it
    zeros = ref_map(lambda x: grow(0), tree)
    assert fg.tree.broadcast(tree, zeros) == ref_map(lambda x: [x, (None, {"k": x})], tree)


@given(trees, st.integers(0, 3))
def test_is_leaf_may_take_the_path(tree, depth):
    def stop(path, node):
        return len(path) == depth

    want = ref_walk(tree, stop)
    assert fg.tree.leaves_with_path(tree, stop, is_leaf_takes_path=True) == want
    pairs, treedef = fg.tree.flatten_with_path(tree, is_leaf=stop, is_leaf_takes_path=True)
    assert pairs == want and treedef.num_leaves == len(want)
    got = fg.tree.map_with_path(
        lambda p, x: Tagged(p, x), tree, is_leaf=stop, is_leaf_takes_path=True
    )
    assert fg.tree.leaves(got) == [Tagged(p, x) for p, x in want]


@given(st.lists(scalars, min_size=1, max_size=12))
def test_reduce_associative_combines_halves_first(values):
    def balanced(xs):
        if len(xs) == 1:
            return xs[0]
        return (balanced(xs[: len(xs) // 2]), balanced(xs[len(xs) // 2 :]))

    nested = {"a": values[:3], "b": tuple(values[3:])}
    assert fg.tree.reduce_associative(lambda x, y: (x, y), nested) == balanced(values)
    assert fg.tree.reduce_associative(operator.add, nested) == sum(values)


def test_documented_examples():
    """The examples of jax.tree's docstrings, with their documented results."""
    assert fg.tree.all([True, {"a": True, "b": (True, True)}])
    assert not fg.tree.all([False, (True, False)])
    vals, treedef = fg.tree.flatten([1, (2, 3), [4, 5]])
    assert vals == [1, 2, 3, 4, 5] and repr(treedef) == "PyTreeDef([*, (*, *), [*, *]])"
    assert fg.tree.unflatten(treedef, [100, 200, 300, 400, 500]) == [100, (200, 300), [400, 500]]
    assert fg.tree.map(lambda x, y: [x] + y, [5, 6], [[7, 9], [1, 2]]) == [[5, 7, 9], [6, 1, 2]]
    assert fg.tree.reduce(operator.add, [1, (2, 3), [4, 5, 6]]) == 21
    assert fg.tree.reduce_associative(operator.add, [1, (2, 3), [4, 5, 6]]) == 21
    assert fg.tree.reduce_associative(operator.add, [None, ()], identity=0) == 0
    with pytest.raises(TypeError, match="identity"):
        fg.tree.reduce_associative(operator.add, [])
    tree = [(1, 2, 3), (4, 5, 6)]
    inner, outer = fg.tree.structure(("*", "*", "*")), fg.tree.structure(["*", "*"])
    assert fg.tree.transpose(outer, inner, tree) == ([1, 4], [2, 5], [3, 6])
    assert fg.tree.transpose(outer, None, tree) == ([1, 4], [2, 5], [3, 6])
    assert fg.tree.leaves_with_path([1, {"x": 3}]) == [
        ((tu.SequenceKey(0),), 1),
        ((tu.SequenceKey(1), tu.DictKey("x")), 3),
    ]
    assert fg.tree.map_with_path(lambda path, x: x + path[0].idx, [1, 2, 3]) == [1, 3, 5]
    full = (0, {"a": 0, "b": 0}, (0, 0))
    assert fg.tree.broadcast((1, 2, 3), full) == (1, {"a": 2, "b": 2}, (3, 3))


def test_structure_mismatches_are_errors():
    with pytest.raises(ValueError, match="prefix"):
        fg.tree.map(operator.add, [1, 2], [1])
    with pytest.raises(ValueError, match="prefix"):
        fg.tree.map(operator.add, {"a": 1}, {"b": 1})
    with pytest.raises(ValueError, match="prefix"):
        fg.tree.map(operator.add, [1, None], [1, 2])
    with pytest.raises(ValueError, match="prefix"):
        fg.tree.broadcast((1, 2), [0, 0])
    with pytest.raises(ValueError, match="inner_treedef"):
        fg.tree.transpose(fg.tree.structure([]), None, [])


def test_static_fields_are_part_of_the_structure():
    @tu.register_dataclass
    @dataclasses.dataclass
    class Op:
        x: int
        name: str = fg.tree.static(default="add")

    leaves, treedef = fg.tree.flatten(Op(3, "mul"))
    assert leaves == [3]
    assert fg.tree.unflatten(treedef, [4]) == Op(4, "mul")
    assert fg.tree.structure(Op(3, "add")) != treedef


# JAX's jax.tree on the same trees; its key classes print as funcgrad's do.


def jax_paths(pairs):
    import jax

    return [(jax.tree_util.keystr(p), x) for p, x in pairs]


def fg_paths(pairs):
    return [(tu.keystr(p), x) for p, x in pairs]


def test_every_jax_tree_name_is_here():
    jax = jax_or_skip()
    assert {n for n in dir(jax.tree) if not n.startswith("_")} <= set(fg.tree.__all__)


@given(trees, st.integers(0, 3))
def test_tree_names_agree_with_jax(tree, depth):
    jax = jax_or_skip()

    def stop(path, node):
        return len(path) == depth

    assert fg.tree.leaves(tree) == jax.tree.leaves(tree)
    assert fg.tree.structure(tree).num_leaves == jax.tree.structure(tree).num_leaves
    assert fg.tree.map(lambda x: 2 * x, tree) == jax.tree.map(lambda x: 2 * x, tree)
    full = ref_map(grow, tree)
    pair = lambda x, sub: (x, sub)  # noqa: E731
    assert fg.tree.map(pair, tree, full) == jax.tree.map(pair, tree, full)
    zeros = ref_map(lambda x: grow(0), tree)
    assert fg.tree.broadcast(tree, zeros) == jax.tree.broadcast(tree, zeros)
    assert fg_paths(fg.tree.leaves_with_path(tree)) == jax_paths(jax.tree.leaves_with_path(tree))
    assert fg_paths(fg.tree.leaves_with_path(tree, stop, True)) == jax_paths(
        jax.tree.leaves_with_path(tree, stop, True)
    )
    record = lambda x, y: (x, y)  # noqa: E731
    assert fg.tree.reduce_associative(record, tree, identity=0) == jax.tree.reduce_associative(
        record, tree, identity=0
    )
    assert fg.tree.all(tree) == jax.tree.all(tree)
    outer = [tree, tree]
    assert fg.tree.transpose(fg.tree.structure([0, 0]), None, outer) == jax.tree.transpose(
        jax.tree.structure([0, 0]), None, outer
    )


# --- fg.lax.linalg --------------------------------------------------------------------------

L = fg.lax.linalg
matrix_shapes = st.tuples(st.sampled_from([(), (2,)]), st.integers(1, 5), st.integers(1, 5))
seeds = st.integers(0, 2**32 - 1)


def random_matrices(seed, shape, complex_=False):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    return a + 1j * rng.standard_normal(shape) if complex_ else a


def mT(x):
    return np.swapaxes(x, -1, -2)


def test_linalg_names_are_reachable():
    names = {
        "cholesky",
        "eig",
        "eigh",
        "lu",
        "lu_pivots_to_permutation",
        "qr",
        "svd",
        "triangular_solve",
        "tridiagonal_solve",
        "cholesky_update",
        "symmetric_product",
        "householder_product",
        "hessenberg",
        "tridiagonal",
        "qdwh",
        "schur",
    }
    assert names <= set(dir(L))
    from funcgrad.lax.linalg import cholesky, lu_pivots_to_permutation  # noqa: F401


def test_linalg_names_are_jax_names():
    jax = jax_or_skip()
    from funcgrad.lax import linalg_namespace

    assert set(linalg_namespace.__all__) <= set(dir(jax.lax.linalg))


@given(matrix_shapes, seeds)
def test_cholesky_reconstructs(shape, seed):
    batch, n, _ = shape
    a = random_matrices(seed, (*batch, n, n))
    spd = a @ mT(a) + n * np.eye(n)
    factor = np.asarray(L.cholesky(spd))
    np.testing.assert_allclose(factor @ mT(factor), spd, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(factor, np.tril(factor))
    np.testing.assert_allclose(factor, np.linalg.cholesky(spd), rtol=1e-12, atol=1e-12)
    # without symmetrize_input only the lower triangle is read
    garbage = np.tril(spd) + np.triu(a, 1)
    lower = np.asarray(L.cholesky(garbage, symmetrize_input=False))
    np.testing.assert_allclose(lower, factor, rtol=1e-12, atol=1e-12)


@given(matrix_shapes, seeds)
def test_lu_reconstructs_and_pivots_as_lapack(shape, seed):
    batch, m, n = shape
    a = random_matrices(seed, (*batch, m, n))
    lu, pivots, permutation = (np.asarray(x) for x in L.lu(a))
    k = min(m, n)
    assert pivots.dtype == permutation.dtype == np.int32
    assert pivots.shape == (*batch, k) and permutation.shape == (*batch, m)
    lower = np.tril(lu, -1)[..., :, :k] + np.eye(m, k)
    upper = np.triu(lu)[..., :k, :]
    rows = np.take_along_axis(a, permutation[..., None], axis=-2)
    np.testing.assert_allclose(lower @ upper, rows, rtol=1e-12, atol=1e-12)
    for index in np.ndindex(*batch):
        np.testing.assert_array_equal(pivots[index], sl.lu_factor(a[index])[1][:k])
    np.testing.assert_array_equal(np.asarray(L.lu_pivots_to_permutation(pivots, m)), permutation)


@given(matrix_shapes, seeds, st.booleans())
def test_qr_reconstructs(shape, seed, full_matrices):
    batch, m, n = shape
    a = random_matrices(seed, (*batch, m, n))
    q, r = (np.asarray(x) for x in L.qr(a, full_matrices=full_matrices))
    k = m if full_matrices else min(m, n)
    assert q.shape == (*batch, m, k) and r.shape == (*batch, k, n)
    np.testing.assert_allclose(q @ r, a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        mT(q) @ q, np.broadcast_to(np.eye(k), mT(q).shape[:-1] + (k,)), atol=1e-12
    )
    np.testing.assert_array_equal(r, np.triu(r))


@given(matrix_shapes, seeds, st.booleans())
def test_eigh_returns_vectors_then_ascending_values(shape, seed, lower):
    batch, n, _ = shape
    a = random_matrices(seed, (*batch, n, n))
    symmetric = a + mT(a)
    v, w = (np.asarray(x) for x in L.eigh(symmetric))
    assert v.shape == (*batch, n, n) and w.shape == (*batch, n)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(symmetric), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(symmetric @ v, v * w[..., None, :], rtol=1e-10, atol=1e-10)
    # without symmetrize_input only the triangle `lower` names is read
    triangle = np.tril(symmetric) if lower else np.triu(symmetric)
    _, w_triangle = L.eigh(triangle, lower=lower, symmetrize_input=False)
    np.testing.assert_allclose(np.asarray(w_triangle), w, rtol=1e-12, atol=1e-12)


@given(matrix_shapes, seeds, st.booleans())
def test_svd_reconstructs(shape, seed, full_matrices):
    batch, m, n = shape
    a = random_matrices(seed, (*batch, m, n))
    u, s, vh = (np.asarray(x) for x in L.svd(a, full_matrices=full_matrices))
    k = min(m, n)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=1e-12)
    only_s = np.asarray(L.svd(a, compute_uv=False))
    np.testing.assert_allclose(only_s, s, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("conjugate_a", [True, False])
def test_triangular_solve_solves_op_a(left_side, lower, transpose_a, conjugate_a):
    a = random_matrices(0, (2, 4, 4), complex_=True) + 4 * np.eye(4)
    b = random_matrices(1, (2, 4, 3) if left_side else (2, 3, 4), complex_=True)
    x = np.asarray(
        L.triangular_solve(
            a, b, left_side=left_side, lower=lower, transpose_a=transpose_a, conjugate_a=conjugate_a
        )
    )
    op = np.tril(a) if lower else np.triu(a)
    op = mT(op) if transpose_a else op
    op = op.conj() if conjugate_a else op
    np.testing.assert_allclose(op @ x if left_side else x @ op, b, rtol=1e-12, atol=1e-12)
    if left_side:
        want = sl.solve_triangular(a[0].real, b[0].real, lower=lower, trans=int(transpose_a))
        got = L.triangular_solve(
            a[0].real, b[0].real, left_side=True, lower=lower, transpose_a=transpose_a
        )
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@given(st.integers(1, 5), seeds, st.booleans())
def test_eig_left_and_right_eigenvectors(n, seed, complex_):
    a = random_matrices(seed, (2, n, n), complex_)
    w, left, right = (np.asarray(x) for x in L.eig(a))
    np.testing.assert_allclose(
        np.sort_complex(w.ravel()),
        np.sort_complex(np.linalg.eigvals(a).ravel()),
        rtol=1e-9,
        atol=1e-9,
    )
    np.testing.assert_allclose(a @ right, right * w[..., None, :], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        mT(left).conj() @ a, w[..., :, None] * mT(left).conj(), rtol=1e-8, atol=1e-8
    )
    # geev's scaling: unit columns, the largest component real and positive
    np.testing.assert_allclose(np.linalg.norm(left, axis=-2), 1, rtol=1e-12)
    largest = np.take_along_axis(left, np.abs(left).argmax(axis=-2)[..., None, :], axis=-2)
    assert np.all(largest.real > 0) and np.all(np.abs(largest.imag) < 1e-12)
    assert [x.shape for x in L.eig(a, compute_right_eigenvectors=False)] == [w.shape, left.shape]
    only_right = L.eig(a, compute_left_eigenvectors=False)
    np.testing.assert_array_equal(np.asarray(only_right[1]), right)
    assert len(L.eig(a, compute_left_eigenvectors=False, compute_right_eigenvectors=False)) == 1


def test_eig_eigenvalue_derivative_through_the_namespace():
    a = random_matrices(3, (3, 3))

    def largest_real_part(x):
        (w,) = L.eig(x, compute_left_eigenvectors=False, compute_right_eigenvectors=False)
        return fg.numpy.max(fg.numpy.real(w))

    eps = 1e-6
    direction = random_matrices(4, (3, 3))
    numeric = (
        np.max(np.linalg.eigvals(a + eps * direction).real)
        - np.max(np.linalg.eigvals(a - eps * direction).real)
    ) / (2 * eps)
    _, tangent = fg.jvp(largest_real_part, (a,), (direction,))
    np.testing.assert_allclose(np.asarray(tangent), numeric, rtol=1e-6, atol=1e-8)


def ref_pivots_to_permutation(pivots, size):
    permutation = list(range(size))
    for i, p in enumerate(pivots):
        permutation[i], permutation[p] = permutation[p], permutation[i]
    return permutation


@given(st.integers(0, 6), st.integers(0, 3), seeds)
def test_lu_pivots_to_permutation_replays_the_swaps(steps, extra, seed):
    size = steps + extra
    rng = np.random.default_rng(seed)
    pivots = np.stack([rng.integers(np.arange(steps), size) for _ in range(3)]).astype(np.int32)
    want = np.array([ref_pivots_to_permutation(p, size) for p in pivots]).reshape(3, size)
    got = L.lu_pivots_to_permutation(pivots, size)
    np.testing.assert_array_equal(np.asarray(got), want)
    batched = fg.vmap(lambda p: L.lu_pivots_to_permutation(p, size))(pivots)
    np.testing.assert_array_equal(np.asarray(batched), want)
    jitted = fg.jit(lambda p: L.lu_pivots_to_permutation(p, size))(pivots)
    np.testing.assert_array_equal(np.asarray(jitted), want)


def test_lu_pivots_to_permutation_documented_and_errors():
    got = L.lu_pivots_to_permutation(np.array([2, 2, 3], np.int32), 5)
    np.testing.assert_array_equal(np.asarray(got), [2, 0, 3, 1, 4])
    with pytest.raises(TypeError, match="int32"):
        L.lu_pivots_to_permutation(np.array([0], np.int64), 2)
    with pytest.raises(ValueError, match="permutation_size"):
        L.lu_pivots_to_permutation(np.array([0, 1, 2], np.int32), 2)


def test_linalg_agrees_with_jax():
    """Against JAX on the host, as funcgrad's eager operations run here: on a GPU JAX's LU
    (cuBLAS's batched getrf) picks a complex column's pivot by its modulus, not by |re| + |im|
    as LAPACK does, and of this stack's first matrix it swapped rows 2 and 3."""
    jax = jax_or_skip()
    a = random_matrices(5, (2, 4, 4), complex_=True)
    with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):
        for got, want in zip(L.lu(a), jax.lax.linalg.lu(a)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
        b = random_matrices(6, (2, 4, 2), complex_=True)
        options = dict(left_side=True, lower=True, transpose_a=True, conjugate_a=True)
        np.testing.assert_allclose(
            np.asarray(L.triangular_solve(a, b, **options)),
            np.asarray(jax.lax.linalg.triangular_solve(a, b, **options)),
            rtol=1e-12,
        )
        _, left, _ = (np.asarray(x) for x in L.eig(a))
        w_jax, left_jax, _ = (np.asarray(x) for x in jax.lax.linalg.eig(a))
        for index in np.ndindex(2, 4):
            batch, column = index
            # the same eigenvalue's left vectors agree up to a unit phase
            match = np.argmin(np.abs(w_jax[batch] - np.asarray(L.eig(a)[0])[batch, column]))
            overlap = np.vdot(left_jax[batch, :, match], left[batch, :, column])
            np.testing.assert_allclose(np.abs(overlap), 1, rtol=1e-9)
        p = np.array([[3, 1, 2], [0, 2, 2]], np.int32)
        np.testing.assert_array_equal(
            np.asarray(L.lu_pivots_to_permutation(p, 4)),
            np.asarray(jax.lax.linalg.lu_pivots_to_permutation(p, 4)),
        )


# --- lax special functions -------------------------------------------------------------------

f64 = np.float64
positive = st.floats(0.1, 30.0)
unit = st.floats(0.01, 0.99)


def central_difference(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def derivative(fun, argnum, *args):
    """fun's derivative in argument argnum at args, elementwise, by fg.jvp."""
    tangents = [np.zeros_like(a) for a in args]
    tangents[argnum] = np.ones_like(args[argnum])
    return np.asarray(fg.jvp(fun, args, tuple(tangents))[1])


@given(st.lists(st.tuples(positive, st.floats(0.0, 40.0)), min_size=1, max_size=6))
def test_incomplete_gamma_against_scipy(pairs):
    a, x = (np.array(v, f64) for v in zip(*pairs))
    np.testing.assert_allclose(
        np.asarray(fg.lax.igamma(a, x)), sc.gammainc(a, x), rtol=1e-10, atol=1e-300
    )
    np.testing.assert_allclose(
        np.asarray(fg.lax.igammac(a, x)), sc.gammaincc(a, x), rtol=1e-10, atol=1e-300
    )
    inside = x > 0.05
    a, x = a[inside], x[inside]
    if a.size == 0:
        return
    by_a = central_difference(lambda s: sc.gammainc(s, x), a)
    by_x = central_difference(lambda s: sc.gammainc(a, s), x)
    np.testing.assert_allclose(np.asarray(fg.lax.igamma_grad_a(a, x)), by_a, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(derivative(fg.lax.igamma, 0, a, x), by_a, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(derivative(fg.lax.igamma, 1, a, x), by_x, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(derivative(fg.lax.igammac, 0, a, x), -by_a, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(derivative(fg.lax.igammac, 1, a, x), -by_x, rtol=1e-5, atol=1e-9)


@given(st.lists(st.tuples(positive, unit), min_size=1, max_size=6))
def test_random_gamma_grad_is_the_quantiles_derivative(pairs):
    """A Gamma(a) sample x at quantile u = P(a, x) moves with a as gammaincinv(a, u) does."""
    a, u = (np.array(v, f64) for v in zip(*pairs))
    x = sc.gammaincinv(a, u)
    want = central_difference(lambda s: sc.gammaincinv(s, u), a)
    np.testing.assert_allclose(
        np.asarray(fg.lax.random_gamma_grad(a, x)), want, rtol=1e-5, atol=1e-8
    )
    got32 = np.asarray(fg.lax.random_gamma_grad(a.astype(np.float32), x.astype(np.float32)))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-3, atol=1e-4)


@given(st.lists(st.tuples(positive, positive, unit), min_size=1, max_size=6))
def test_betainc_against_scipy(triples):
    a, b, x = (np.array(v, f64) for v in zip(*triples))
    np.testing.assert_allclose(
        np.asarray(fg.lax.betainc(a, b, x)), sc.betainc(a, b, x), rtol=1e-9, atol=1e-300
    )
    by_x = central_difference(lambda s: sc.betainc(a, b, s), x, h=1e-7)
    np.testing.assert_allclose(derivative(fg.lax.betainc, 2, a, b, x), by_x, rtol=1e-4, atol=1e-7)


@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0.2, 20.0)), min_size=1, max_size=6))
def test_polygamma_against_scipy(pairs):
    m, x = (np.array(v, f64) for v in zip(*pairs))
    want = sc.polygamma(m.astype(int), x)
    np.testing.assert_allclose(np.asarray(fg.lax.polygamma(m, x)), want, rtol=1e-11)
    by_x = central_difference(lambda s: sc.polygamma(m.astype(int), s), x)
    np.testing.assert_allclose(derivative(fg.lax.polygamma, 1, m, x), by_x, rtol=1e-5, atol=1e-8)


@given(st.lists(st.tuples(st.floats(1.1, 30.0), positive), min_size=1, max_size=6))
def test_zeta_against_scipy(pairs):
    s, q = (np.array(v, f64) for v in zip(*pairs))
    np.testing.assert_allclose(np.asarray(fg.lax.zeta(s, q)), sc.zeta(s, q), rtol=1e-12)


@pytest.mark.parametrize("name, reference", [("bessel_i0e", sc.i0e), ("bessel_i1e", sc.i1e)])
def test_scaled_bessel_against_scipy(name, reference):
    fun = getattr(fg.lax, name)
    x = np.concatenate([np.linspace(-50, 50, 401), [1e-9, 29.999, 30.001, 300.0]])
    np.testing.assert_allclose(np.asarray(fun(x)), reference(x), rtol=1e-13, atol=1e-300)
    got32 = np.asarray(fun(x.astype(np.float32)))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, reference(x), rtol=1e-6)
    away = x[np.abs(x) > 1e-3]
    by_x = central_difference(reference, away)
    np.testing.assert_allclose(derivative(fun, 0, away), by_x, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name, reference", [("bessel_i0e", sc.i0e), ("bessel_i1e", sc.i1e)])
def test_scaled_bessel_derivative_where_the_expansions_meet(name, reference):
    """At |x| = 30 the series hands over to the asymptotic expansion: the branch taken gets
    the whole derivative (minimum and maximum, which split it at a tie, gave half)."""
    x = np.array([-30.0, 30.0])
    by_x = central_difference(reference, x)
    np.testing.assert_allclose(derivative(getattr(fg.lax, name), 0, x), by_x, rtol=1e-6)


def test_special_functions_keep_lax_dtype_rules():
    f32, x64 = np.float32(2.0), np.float64(3.0)
    with pytest.raises(TypeError, match="same dtypes"):
        fg.lax.igamma(f32, x64)
    with pytest.raises(TypeError, match="same dtypes"):
        fg.lax.betainc(f32, f32, x64)
    with pytest.raises(TypeError, match="floating"):
        fg.lax.zeta(np.int32(2), np.int32(3))
    with pytest.raises(TypeError, match="floating"):
        fg.lax.bessel_i0e(np.int32(1))
    with pytest.raises(TypeError, match="shapes"):
        fg.lax.igammac(np.ones(3), np.ones(2))
    # a Python scalar takes the other operands' dtype; rank-0 operands broadcast
    assert fg.lax.polygamma(1.0, f32).dtype == np.float32
    assert fg.lax.igamma(2.0, np.ones(3)).dtype == np.float64
    assert fg.lax.igamma(2.0, 3.0).dtype == np.float32
    assert fg.lax.betainc(2.0, np.ones(4, np.float32), 0.5).shape == (4,)


def test_special_functions_under_jit_and_vmap():
    a, x = np.linspace(0.5, 5, 4), np.linspace(0.1, 6, 4)
    want = sc.gammainc(a, x)
    np.testing.assert_allclose(np.asarray(fg.jit(fg.lax.igamma)(a, x)), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(fg.vmap(fg.lax.igamma)(a, x)), want, rtol=1e-10)
    grads = fg.vmap(fg.grad(fg.lax.bessel_i1e))(x)
    np.testing.assert_allclose(np.asarray(grads), central_difference(sc.i1e, x), rtol=1e-6)


def test_special_names_are_jax_names_and_agree():
    jax = jax_or_skip()
    names = ["igamma", "igamma_grad_a", "random_gamma_grad", "betainc", "polygamma", "zeta"]
    names += ["bessel_i0e", "bessel_i1e"]
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 8, 6), rng.uniform(0.5, 8, 6)
    x, u = rng.uniform(0.2, 10, 6), rng.uniform(0.05, 0.95, 6)
    m = np.array([0.0, 1, 2, 3, 1, 0])
    arguments = {
        "igamma": (a, x),
        "igamma_grad_a": (a, x),
        "random_gamma_grad": (a, x),
        "betainc": (a, b, u),
        "polygamma": (m, x),
        "zeta": (a + 1.5, x),
        "bessel_i0e": (x - 5,),
        "bessel_i1e": (x - 5,),
    }
    with jax.enable_x64(True):
        for name in names:
            args = arguments[name]
            want = getattr(jax.lax, name)(*(jax.numpy.asarray(arg) for arg in args))
            got = getattr(fg.lax, name)(*args)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, err_msg=name)


# --- nn.initializers.delta_orthogonal --------------------------------------------------------


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.integers(1, 4),
    st.integers(0, 3),
    st.sampled_from([1.0, 0.5]),
    seeds,
)
def test_delta_orthogonal_is_orthogonal_at_the_centre(window, fan_in, more, scale, seed):
    shape = (*window, fan_in, fan_in + more)
    init = fg.nn.initializers.delta_orthogonal(scale=scale)
    kernel = np.asarray(init(fg.random.PRNGKey(seed % 2**31), shape))
    assert kernel.shape == shape and kernel.dtype == np.float32
    centre = tuple((k - 1) // 2 for k in window)
    matrix = kernel[centre].astype(np.float64)
    np.testing.assert_allclose(matrix @ matrix.T, scale**2 * np.eye(fan_in), atol=1e-5)
    rest = kernel.copy()
    rest[centre] = 0
    assert not rest.any()


def test_delta_orthogonal_dtype_keys_and_shape_errors():
    init = fg.nn.initializers.delta_orthogonal()
    key, other = fg.random.split(fg.random.PRNGKey(0))
    wide = np.asarray(init(key, (3, 3, 3), np.float64))
    assert wide.dtype == np.float64
    np.testing.assert_allclose(wide[1] @ wide[1].T, np.eye(3), atol=1e-12)
    assert not np.allclose(np.asarray(init(other, (3, 3, 3))), wide)
    with pytest.raises(ValueError, match="3, 4 or 5"):
        init(key, (4, 4))
    with pytest.raises(ValueError, match="output channels"):
        init(key, (3, 5, 4))
