"""funcgrad.optim.tree_utils (and its short spelling optim.tree) against NumPy on the leaves
of a tree of mixed shapes, and tree_get/tree_set on real optimizer states."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import optim, random, tree_util
from funcgrad.optim import tree_utils as tu

rng = np.random.default_rng(0)


def make_tree(seed_shift=0.0):
    return {
        "w": rng.standard_normal((2, 3)) + seed_shift,
        "b": [rng.standard_normal(3), rng.standard_normal(())],
    }


def leaves(tree):
    return [np.asarray(x, np.float64) for x in tree_util.tree_leaves(tree)]


def close(got, wanted, tol=1e-12):
    np.testing.assert_allclose(np.asarray(got, np.float64), wanted, rtol=tol, atol=tol)


def each(f, *trees):
    """f leaf by leaf on NumPy copies of the trees' leaves."""
    return [f(*xs) for xs in zip(*(leaves(t) for t in trees))]


def assert_leaves(got_tree, wanted_leaves, tol=1e-12):
    got = leaves(got_tree)
    assert len(got) == len(wanted_leaves)
    for g, w in zip(got, wanted_leaves):
        close(g, w, tol)


def test_arithmetic_is_leafwise():
    with fg.enable_x64():
        x, y, z = make_tree(), make_tree(), make_tree(3.0)
        fx, fy, fz = (tree_util.tree_map(fnp.asarray, t) for t in (x, y, z))
        assert_leaves(tu.tree_add(fx, fy, fz), each(lambda a, b, c: a + b + c, x, y, z))
        assert_leaves(tu.tree_sub(fx, fy), each(np.subtract, x, y))
        assert_leaves(tu.tree_mul(fx, fy), each(np.multiply, x, y))
        assert_leaves(tu.tree_div(fx, fz), each(np.divide, x, z))
        assert_leaves(tu.tree_scale(2.5, fx), each(lambda a: 2.5 * a, x))
        assert_leaves(tu.tree_add_scale(fx, -0.5, fy), each(lambda a, b: a - 0.5 * b, x, y))
        close(tu.tree_vdot(fx, fy), sum(np.vdot(a, b) for a, b in zip(leaves(x), leaves(y))))
        total = sum(a.sum() for a in leaves(x))
        close(tu.tree_sum(fx), total)
        close(tu.tree_sum(fx, associative_reduction=True), total)
        close(tu.tree_max(fx), max(a.max() for a in leaves(x)))
        close(tu.tree_min(fx), min(a.min() for a in leaves(x)))
        assert tu.tree_size(fx) == 10
        flat = np.concatenate([a.ravel() for a in leaves(x)])
        close(tu.tree_norm(fx), np.linalg.norm(flat))
        close(tu.tree_norm(fx, squared=True), np.sum(flat**2))
        close(tu.tree_norm(fx, 1), np.abs(flat).sum())
        close(tu.tree_norm(fx, "inf"), np.abs(flat).max())
        close(tu.tree_norm(fx, np.inf, squared=True), np.abs(flat).max() ** 2)
        assert_leaves(tu.tree_clip(fx, -0.5, 0.25), each(lambda a: np.clip(a, -0.5, 0.25), x))
        assert_leaves(tu.tree_clip(fx, max_value=0.0), each(lambda a: np.minimum(a, 0.0), x))
        assert_leaves(tu.tree_where(False, fx, fy), leaves(y))
        assert bool(tu.tree_allclose(fx, tu.tree_add_scale(fx, 1e-9, fy)))
        assert not bool(tu.tree_allclose(fx, fy))
        assert not bool(tu.tree_allclose(fx, tu.tree_full_like(fx, np.nan), equal_nan=True))
    with pytest.raises(ValueError, match="ord must be None, 1, 2 or inf, got 3"):
        tu.tree_norm(fx, 3)


def test_empty_trees_and_complex_leaves():
    assert float(tu.tree_max({})) == -np.inf and float(tu.tree_min([fnp.zeros(0)])) == np.inf
    assert float(tu.tree_sum({})) == 0.0 and tu.tree_size({}) == 0
    z = {"a": fnp.asarray([3 + 4j, 1j], fnp.complex64)}
    close(tu.tree_norm(z), np.sqrt(26.0), 1e-6)
    close(tu.tree_norm(z, 1), 6.0, 1e-6)
    np.testing.assert_allclose(np.asarray(tu.tree_vdot(z, z)), 26.0, rtol=1e-6)  # conjugated
    assert_leaves(tu.tree_real(tu.tree_conj(z)), [np.array([3.0, 0.0])])
    np.testing.assert_allclose(np.asarray(tu.tree_conj(z)["a"]), [3 - 4j, -1j])
    moment = tu.tree_update_moment_per_elem_norm(z, {"a": fnp.zeros(2)}, 0.5, 2)
    np.testing.assert_allclose(np.asarray(moment["a"]), [12.5, 0.5])  # |g|**2, real


def test_moments_and_bias_correction_match_their_formulas():
    with fg.enable_x64():
        g, m = make_tree(), make_tree(1.0)
        fg_, fm = (tree_util.tree_map(fnp.asarray, t) for t in (g, m))
        assert_leaves(
            tu.tree_update_moment(fg_, fm, 0.9, 2), each(lambda a, b: 0.1 * a**2 + 0.9 * b, g, m)
        )
        assert_leaves(
            tu.tree_update_infinity_moment(fg_, fm, 0.9, 1e-3),
            each(lambda a, b: np.maximum(np.abs(a) + 1e-3, 0.9 * b), g, m),
        )
        assert_leaves(
            tu.tree_update_moment_per_elem_norm(fg_, fm, 0.8, 3),
            each(lambda a, b: 0.2 * a**3 + 0.8 * b, g, m),
        )
        assert_leaves(
            tu.tree_bias_correction(fm, 0.9, fnp.asarray(3)), each(lambda b: b / (1 - 0.9**3), m)
        )
        with_hole = tu.tree_update_moment(
            {"a": None, "b": fnp.ones(2)}, {"a": None, "b": fnp.zeros(2)}, 0.5, 1
        )
        assert with_hole["a"] is None


def test_fills_casts_and_dtypes():
    tree = {"a": fnp.ones((2,), fnp.float32), "b": fnp.zeros((), fnp.bfloat16)}
    assert_leaves(tu.tree_zeros_like(tree), [np.zeros(2), np.zeros(())])
    assert_leaves(tu.tree_ones_like(tree), [np.ones(2), np.ones(())])
    full = tu.tree_full_like(tree, 7, dtype=fnp.int32)
    assert {np.dtype(x.dtype) for x in tree_util.tree_leaves(full)} == {np.dtype(np.int32)}
    batched = tu.tree_batch_shape(tree, (4, 5))
    assert [x.shape for x in tree_util.tree_leaves(batched)] == [(4, 5, 2), (4, 5)]
    assert tu.tree_cast(tree, None) is tree
    cast = tu.tree_cast(tree, fnp.float16)
    assert tu.tree_dtype(cast) == np.dtype(np.float16)
    back = tu.tree_cast_like(cast, tree)
    assert [x.dtype for x in tree_util.tree_leaves(back)] == [np.float32, fnp.bfloat16]
    assert tu.tree_dtype(tree, "promote") == np.dtype(np.float32)
    assert tu.tree_dtype(tree, "highest") == np.dtype(np.float32)
    assert tu.tree_dtype(tree, "lowest") == fnp.bfloat16
    with pytest.raises(ValueError, match=r"\['b'\] is bfloat16"):
        tu.tree_dtype(tree)
    with pytest.raises(ValueError, match="neither of float16 and bfloat16 promotes"):
        tu.tree_dtype({"a": fnp.ones(1, fnp.float16), "b": fnp.ones(1, fnp.bfloat16)}, "lowest")
    with pytest.raises(ValueError, match="mixed_dtype_handler must be"):
        tu.tree_dtype(tree, "widest")


def test_random_trees_draw_each_leaf_from_its_own_key():
    tree = {"a": fnp.zeros((3,)), "b": fnp.zeros((2, 2), fnp.float16)}
    key = random.PRNGKey(1)
    keys = tu.tree_split_key_like(key, tree)
    split = random.split(key, 2)
    np.testing.assert_array_equal(np.asarray(keys["a"]), np.asarray(split[0]))
    np.testing.assert_array_equal(np.asarray(keys["b"]), np.asarray(split[1]))
    drawn = tu.tree_random_like(key, tree)
    np.testing.assert_array_equal(np.asarray(drawn["a"]), np.asarray(random.normal(split[0], (3,))))
    assert drawn["b"].dtype == fnp.float16
    uniform = tu.tree_random_like(key, tree, random.uniform, dtype=fnp.float32)
    assert uniform["b"].dtype == fnp.float32 and 0 <= float(uniform["b"].min())
    assert tu.tree_unwrap_random_key_data(keys) is keys


def test_short_names_are_the_same_functions():
    assert optim.tree.add is tu.tree_add and optim.tree.get is tu.tree_get
    assert optim.tree.map_params is optim.tree_map_params


def test_tree_get_and_set_find_hyperparameters_and_states_by_name():
    params = {"w": fnp.ones(3)}
    opt = optim.chain(optim.inject_hyperparams(optim.adam)(learning_rate=0.1), optim.trace(0.5))
    state = opt.init(params)
    assert float(tu.tree_get(state, "learning_rate")) == pytest.approx(0.1)
    adam_state = tu.tree_get(state, "ScaleByAdamState")
    assert isinstance(adam_state, optim.ScaleByAdamState)
    found = tu.tree_get_all_with_path(state, "count")
    assert len(found) == 2  # inject_hyperparams' and Adam's
    with pytest.raises(KeyError, match="'count' is found at several places"):
        tu.tree_get(state, "count")
    only_adam = tu.tree_get(
        state, "count", filtering=lambda path, v: "ScaleByAdamState" in tree_util.keystr(path)
    )
    assert int(only_adam) == 0
    assert tu.tree_get(state, "momentum", default="none") == "none"
    path, _ = tu.tree_get_all_with_path(state, "trace")[0]
    assert str(path[-1]) == "TraceState.trace"

    new = tu.tree_set(state, learning_rate=fnp.asarray(0.01))
    assert float(tu.tree_get(new, "learning_rate")) == pytest.approx(0.01)
    updates, _ = opt.update(params, new, params)  # the state still works, with the new rate
    first, _ = opt.update(params, state, params)
    np.testing.assert_allclose(np.asarray(updates["w"]), 0.1 * np.asarray(first["w"]), rtol=1e-5)
    zeroed = tu.tree_set(
        state, lambda path, v: "Trace" in tree_util.keystr(path), trace={"w": fnp.full(3, 2.0)}
    )
    np.testing.assert_array_equal(np.asarray(tu.tree_get(zeroed, "trace")["w"]), [2.0, 2.0, 2.0])
    replaced = tu.tree_set(state, TraceState=optim.TraceState({"w": fnp.ones(3)}))
    assert float(tu.tree_get(replaced, "trace")["w"][0]) == 1.0
    with pytest.raises(KeyError, match="'momentum' is found nowhere"):
        tu.tree_set(state, momentum=0.9)


# -- the top level's small utilities --------------------------------------------------------------


def test_target_network_updates():
    online = {"w": fnp.asarray([1.0, 2.0]), "skip": None}
    target = {"w": fnp.asarray([0.0, 4.0]), "skip": None}
    mixed = optim.incremental_update(online, target, 0.25)
    np.testing.assert_allclose(np.asarray(mixed["w"]), [0.25, 3.5])
    assert mixed["skip"] is None
    copy_every_3 = fg.jit(lambda step: optim.periodic_update(online, target, step, 3))
    for step in range(7):
        wanted = [1.0, 2.0] if step % 3 == 0 else [0.0, 4.0]
        np.testing.assert_array_equal(np.asarray(copy_every_3(step)["w"]), wanted)


def test_safe_norms_clamp_and_keep_finite_gradients():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(np.asarray(optim.safe_norm(fnp.asarray(x), 0.5, axis=1)), [5.0, 0.5])
    kept = optim.safe_norm(fnp.asarray(x), 0.5, axis=1, keepdims=True)
    assert kept.shape == (2, 1)
    assert float(optim.safe_norm(fnp.asarray(x), 0.5, ord=1)) == np.linalg.norm(x, 1)  # matrix
    assert float(optim.safe_norm(fnp.zeros(3), 1e-3)) == pytest.approx(1e-3)
    grad = fg.grad(lambda v: optim.safe_norm(v, 1e-3))(fnp.zeros(3))
    np.testing.assert_array_equal(np.asarray(grad), np.zeros(3))
    rms = optim.safe_root_mean_squares(fnp.asarray([3.0, 4.0]), 0.1)
    assert float(rms) == pytest.approx(np.sqrt(12.5))
    grad = fg.grad(lambda v: optim.safe_root_mean_squares(v, 0.1))(fnp.zeros(2))
    np.testing.assert_array_equal(np.asarray(grad), np.zeros(2))


def test_safe_increment_saturates():
    top = np.iinfo(np.int32).max
    assert int(optim.safe_int32_increment(fnp.asarray(top - 1, fnp.int32))) == top
    assert int(optim.safe_increment(fnp.asarray(top, fnp.int32))) == top
    assert float(optim.safe_increment(fnp.asarray(2.5))) == 3.5
    with pytest.raises(ValueError, match="integer or a float"):
        optim.safe_increment(fnp.asarray(True))


def test_normalize_by_update_norm_and_selective_transform():
    g = {"a": fnp.asarray([3.0, 0.0]), "b": fnp.asarray(4.0)}
    opt = optim.normalize_by_update_norm(scale_factor=2.0, eps=0.0)
    out, _ = opt.update(g, opt.init(g))
    np.testing.assert_allclose(np.asarray(out["a"]), [1.2, 0.0])
    assert float(out["b"]) == pytest.approx(1.6)
    frozen = optim.selective_transform(optim.sgd(0.5), freeze_mask={"a": True, "b": False})
    out, _ = frozen.update(g, frozen.init(g), g)
    np.testing.assert_array_equal(np.asarray(out["a"]), [0.0, 0.0])
    assert float(out["b"]) == -2.0
    assert optim.init_empty_state(g) == optim.EmptyState() == optim.ScaleState()
    assert optim.update_moment is tu.tree_update_moment
