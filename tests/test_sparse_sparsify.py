"""funcgrad.experimental.sparse.sparsify: dense code run on BCOO arguments through its sparse
rules (division, where, reshape, reversal, dynamic slices, elementwise maps that keep zeros,
powers, nested jit and cond), against the same code on the dense forms in NumPy or eagerly,
derivatives against central finite differences, and vmap against a loop of the lanes."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.experimental import sparse
from funcgrad.experimental.sparse import BCOO
from funcgrad.test_util import check_grads


def sparse_array(rng, shape, density=0.5):
    """A dense NumPy array with about `density` of its entries nonzero."""
    values = rng.normal(size=shape)
    return np.where(rng.random(shape) < density, values, 0.0)


def messy(dense, rng, nse_extra=2):
    """The BCOO form of `dense` with each element split into two copies at one index (so that
    duplicates must be merged where a map is not linear) and padding slots holding data."""
    mat = BCOO.fromdense(dense)
    share = rng.uniform(0.2, 0.8, size=mat.nse)
    data = np.concatenate([mat.data * share, mat.data * (1 - share), rng.normal(size=nse_extra)])
    padding = np.broadcast_to(np.array(dense.shape, np.int32), (nse_extra, dense.ndim))
    indices = np.concatenate([mat.indices, mat.indices, padding])
    return BCOO((data, indices), shape=dense.shape)


def assert_same(results, expected):
    for result, want in zip(results, expected):
        np.testing.assert_allclose(sparse.todense(result), want, rtol=1e-12, atol=1e-12)


# ---- division, where, reshape, reversal, dynamic slices


def test_division_by_dense_arrays_stays_sparse():
    rng = np.random.default_rng(0)
    dense = sparse_array(rng, (3, 4))
    mat = messy(dense, rng)
    row, full = rng.uniform(1, 2, size=4), rng.uniform(1, 2, size=(3, 4))

    def f(a, row, full):
        return a / 2.0, a / row, a / full, a / row[None, :] / 3.0

    results = sparse.sparsify(f)(mat, row, full)
    assert all(isinstance(r, BCOO) for r in results)
    assert_same(results, f(dense, row, full))
    # Integer division truncates, as lax.div does on the dense form.
    integers = BCOO.fromdense(np.array([[7, 0, -7], [0, 5, 0]], np.int32))
    out = sparse.sparsify(lambda a: lax.div(a, np.int32(2)))(integers)
    np.testing.assert_array_equal(out.todense(), [[3, 0, -3], [0, 2, 0]])
    with pytest.raises(NotImplementedError, match="dividing by a sparse array"):
        sparse.sparsify(lambda a, x: x / a)(mat, full)

    def loss(data, row):
        a = BCOO((data, mat.indices), shape=mat.shape)
        return sparse.sparsify(lambda a, row: fnp.sum((a / row) ** 2))(a, row)

    check_grads(loss, (mat.data, row), order=1)


def test_where_with_zeros_stays_sparse_and_with_dense_values_is_dense():
    rng = np.random.default_rng(1)
    a_dense, b_dense = sparse_array(rng, (3, 4)), sparse_array(rng, (3, 4))
    a, b = messy(a_dense, rng), BCOO.fromdense(b_dense, n_batch=1)
    mask = rng.random((3, 4)) < 0.5
    other = rng.normal(size=(3, 4))
    choice = rng.integers(0, 3, size=(3, 4)).astype(np.int32)

    def f(a, b, mask, other, choice):
        return (
            fnp.where(mask, a, 0.0),
            fnp.where(mask, 0.0, a),
            fnp.where(mask, a, b),
            fnp.where(mask, a, fnp.zeros_like(a)),
            lax.select_n(choice, a, b, a * 2.0),
            lax.select_n(mask[0, 0], b, a),
            fnp.where(mask, a, other),
        )

    results = sparse.sparsify(f)(a, b, mask, other, choice)
    assert [isinstance(r, BCOO) for r in results] == [True] * 6 + [False]
    assert_same(results, f(a_dense, b_dense, mask, other, choice))
    # Under jit, and vmapped over the mask against a loop.
    jitted = fg.jit(sparse.sparsify(f))(a, b, mask, other, choice)
    assert_same(jitted, f(a_dense, b_dense, mask, other, choice))
    masks = rng.random((2, 3, 4)) < 0.5
    where = sparse.sparsify(lambda a, m: fnp.where(m, a, 0.0))
    batched = fg.vmap(where, in_axes=(None, 0))(a, masks)
    for lane, m in enumerate(masks):
        np.testing.assert_allclose(
            bcoo_lane(batched, lane).todense(), np.where(m, a_dense, 0), atol=1e-12
        )
    with pytest.raises(NotImplementedError, match="sparse predicate"):
        sparse.sparsify(lambda m, a: fnp.where(m, a, 0.0))(BCOO.fromdense(mask), a_dense)


def bcoo_lane(mat, i):
    return BCOO((mat.data[i], mat.indices[i]), shape=mat.shape[1:])


def test_reshape_rev_and_dynamic_slice_rules_match_numpy():
    rng = np.random.default_rng(2)
    dense = sparse_array(rng, (2, 3, 4))
    mat = BCOO.fromdense(dense, n_batch=1)

    def f(a, start):
        return (
            a.reshape(2, 12),
            a.reshape(2, 2, 6),
            fnp.flip(a, (0, 2)),
            lax.dynamic_slice(a, (0, start, 1), (2, 2, 3)),
            a[:, ::-1],
        )

    for start in (0, 1, 5):
        results = sparse.sparsify(f)(mat, start)
        assert all(isinstance(r, BCOO) for r in results)
        assert_same(results, f(fnp.asarray(dense), start))
    with pytest.raises(ValueError, match="cannot reshape"):
        sparse.sparsify(lambda a: a.reshape(24))(mat)  # the batch dimension must stay leading


# ---- elementwise maps that keep zeros


UNARY = [
    (fnp.abs, None),
    (fnp.sign, None),
    (fnp.floor, None),
    (fnp.ceil, None),
    (fnp.round, None),
    (fnp.sqrt, fnp.abs),
    (fnp.cbrt, None),
    (fnp.sin, None),
    (fnp.tan, None),
    (fnp.arcsin, fnp.tanh),
    (fnp.arctan, None),
    (fnp.sinh, None),
    (fnp.tanh, None),
    (fnp.arcsinh, None),
    (fnp.arctanh, fnp.tanh),
    (fnp.expm1, None),
    (fnp.log1p, fnp.abs),
    (fg.scipy.special.erf, None),
    (fg.lax.erf_inv, fnp.tanh),
    (fnp.negative, None),
    (fnp.real, None),
    (fnp.conj, None),
    (fg.lax.stop_gradient, None),
    (fnp.square, None),
    (lambda x: x**3, None),
    (lambda x: fnp.power(x, 2.5), fnp.abs),
]


@pytest.mark.parametrize("case", range(len(UNARY)))
def test_zero_preserving_maps_stay_sparse_and_merge_duplicates(case):
    fn, into_domain = UNARY[case]
    rng = np.random.default_rng(10 + case)
    dense = sparse_array(rng, (3, 5))
    if into_domain is not None:
        dense = np.asarray(into_domain(dense))
    mat = messy(dense, rng)

    def f(a):
        return fn(a)

    out = sparse.sparsify(f)(mat)
    assert isinstance(out, BCOO)
    np.testing.assert_allclose(out.todense(), fn(fnp.asarray(dense)), rtol=1e-12, atol=1e-12)
    jitted = fg.jit(sparse.sparsify(f))(mat)
    np.testing.assert_allclose(jitted.todense(), out.todense(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [fnp.sin, fnp.tanh, fnp.expm1, fnp.sqrt, fnp.abs])
def test_grad_of_zero_preserving_maps_matches_finite_differences(fn):
    rng = np.random.default_rng(20)
    dense = np.abs(sparse_array(rng, (3, 4), density=0.7)) + np.where(
        rng.random((3, 4)) < 0.7, 0.5, 0.0
    )
    mat = BCOO.fromdense(dense, nse=BCOO.fromdense(dense).nse + 2)  # with padding slots

    def loss(data, x):
        # Unique indices: no merge first, which would leave padding out anyway.
        a = BCOO((data, mat.indices), shape=mat.shape, unique_indices=True)
        return sparse.sparsify(lambda a, x: fn(a) @ x)(a, x)

    check_grads(loss, (mat.data, rng.normal(size=4)), order=1)
    # The padding slots hold 0, where sqrt's derivative is infinite; none reaches them.
    grad = fg.grad(lambda data: fnp.sum(loss(data, np.ones(4))))(mat.data)
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(np.asarray(grad)[-2:], 0.0)


def test_maps_that_make_zeros_nonzero_are_refused_with_the_reason():
    mat = BCOO.fromdense(np.eye(2))
    for fn in (fnp.exp, fnp.cos, lambda a: a > 0):
        with pytest.raises(NotImplementedError, match="maps 0 to a nonzero value"):
            sparse.sparsify(fn)(mat)
    for fn in (lambda a: a**0, lambda a: 1.0 / a, lambda a: fnp.power(a, -0.5)):
        with pytest.raises(NotImplementedError, match="dense result|positive scalar"):
            sparse.sparsify(fn)(mat)
    power = sparse.sparsify(lambda a, y: fnp.power(a, y))
    np.testing.assert_array_equal(power(mat, 2.0).todense(), np.eye(2))  # a known exponent
    with pytest.raises(NotImplementedError, match="positive scalar exponent"):
        fg.jit(power)(mat, 2.0)  # a traced one may be 0 or negative


# ---- programs inside: nested jit and cond


def test_nested_jit_stays_one_jit_and_matches_dense():
    rng = np.random.default_rng(30)
    dense = sparse_array(rng, (3, 4))
    mat = BCOO.fromdense(dense)
    x = rng.normal(size=4)
    traces = []

    @fg.jit
    def inner(a, x):
        traces.append(None)
        return a * 2.0, a @ x, fnp.sum(a, axis=1)

    def f(a, x):
        scaled, product, sums = inner(a, x)
        return fnp.abs(scaled), product + 1.0, sums

    expected = f(fnp.asarray(dense), x)
    sparsified = sparse.sparsify(f)
    for _ in range(2):
        results = sparsified(mat, x)
        assert [isinstance(r, BCOO) for r in results] == [True, False, True]
        assert_same(results, expected)
    assert len(traces) == 1  # the sparse program is made from the jitted program, not traced
    program = fg.make_jaxpr(sparsified)(mat, x)
    calls = [e.params["name"] for e in program.jaxpr.eqns if e.primitive.name == "jit"]
    assert len(calls) == 1 and calls[0].startswith("sparsify(") and calls[0].endswith("inner)")
    jitted = fg.jit(sparsified)(mat, x)
    assert_same(jitted, expected)

    def loss(data, x):
        a = BCOO((data, mat.indices), shape=mat.shape)
        scaled, product, sums = sparsified(a, x)
        return fnp.sum(product**2) + fnp.sum(sums.todense() ** 2)

    check_grads(loss, (mat.data, x), order=1)

    # vmap over stacked arrays against a loop of the lanes.
    stacked = BCOO.fromdense(sparse_array(rng, (2, 3, 4)), n_batch=1)
    batched = fg.vmap(sparsified, in_axes=(0, None))(stacked, x)
    for lane in range(2):
        one = sparsified(bcoo_lane(stacked, lane), x)
        np.testing.assert_allclose(bcoo_lane(batched[0], lane).todense(), one[0].todense())
        np.testing.assert_allclose(batched[1][lane], one[1], rtol=1e-12)


def test_cond_on_sparse_operands_runs_the_chosen_branch_sparsely():
    rng = np.random.default_rng(31)
    dense = sparse_array(rng, (3, 4))
    mat = BCOO.fromdense(dense)

    def f(a, flag):
        return lax.cond(flag, lambda b: b * 2.0, lambda b: fnp.sin(b), a)

    for flag in (True, False):
        out = sparse.sparsify(f)(mat, flag)
        assert isinstance(out, BCOO)
        np.testing.assert_allclose(out.todense(), f(fnp.asarray(dense), flag), rtol=1e-12)
        out = fg.jit(sparse.sparsify(f))(mat, flag)
        np.testing.assert_allclose(out.todense(), f(fnp.asarray(dense), flag), rtol=1e-12)

    def loss(data, flag):
        a = BCOO((data, mat.indices), shape=mat.shape)
        return fnp.sum(sparse.sparsify(f)(a, flag).todense() ** 2)

    check_grads(lambda data: loss(data, False), (mat.data,), order=1)
    with pytest.raises(NotImplementedError, match="different sparse structures"):
        sparse.sparsify(lambda a, p: lax.cond(p, lambda b: b + b, lambda b: b, a))(mat, True)


def test_checkpoint_on_sparse_operands_stays_a_checkpoint():
    rng = np.random.default_rng(32)
    dense = sparse_array(rng, (3, 4))
    mat = BCOO.fromdense(dense)
    x = rng.normal(size=4)
    f = sparse.sparsify(lambda a, x: fg.checkpoint(lambda b, x: fnp.sin(b) @ x)(a, x))
    np.testing.assert_allclose(f(mat, x), np.sin(dense) @ x, rtol=1e-12)
    program = fg.make_jaxpr(f)(mat, x)
    assert [e.primitive.name for e in program.jaxpr.eqns] == ["checkpoint"]

    def loss(data, x):
        return fnp.sum(f(BCOO((data, mat.indices), shape=mat.shape), x) ** 2)

    check_grads(loss, (mat.data, x), order=1)
