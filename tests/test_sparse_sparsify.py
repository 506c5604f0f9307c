"""funcgrad.experimental.sparse.sparsify: dense code run on BCOO arguments through its sparse
rules (division, where, reshape, reversal, dynamic slices, elementwise maps that keep zeros,
powers, nested jit and cond), against the same code on the dense forms in NumPy or eagerly,
derivatives against central finite differences, and vmap against a loop of the lanes."""

from __future__ import annotations

import functools

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
        sparse.sparsify(lambda a, p: lax.cond(p, lambda b: b * b, lambda b: b, a))(mat, True)


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


# ---- custom derivatives


def data_function(mat, fn):
    """`fn` of the sparse array with `mat`'s indices holding the given data."""

    def of_data(data, *rest):
        return fn(BCOO((data, mat.indices), shape=mat.shape), *rest)

    return of_data


@pytest.mark.parametrize("activation", [fg.nn.relu, fg.nn.relu6])
def test_custom_jvp_activations_stay_sparse_and_keep_their_derivative_rule(activation):
    rng = np.random.default_rng(40)
    dense = 4 * sparse_array(rng, (3, 5))
    mat = messy(dense, rng)
    f = sparse.sparsify(activation)
    out = f(mat)
    assert isinstance(out, BCOO)
    np.testing.assert_allclose(out.todense(), activation(fnp.asarray(dense)), atol=1e-12)
    np.testing.assert_allclose(fg.jit(f)(mat).todense(), out.todense(), atol=1e-12)
    # Away from the corners the derivative matches finite differences.
    smooth = BCOO.fromdense(np.where(np.abs(dense - 3) < 0.1, 0.0, dense), nse=mat.nse)
    x = rng.normal(size=5)
    activated = data_function(smooth, lambda a, x: sparse.sparsify(activation)(a) @ x)
    check_grads(activated, (smooth.data, x), order=1)
    # At a stored 0 the rule's derivative (0) applies, not max's tie (1/2).
    zero = BCOO((np.array([0.0, 1.0]), np.array([[0], [1]])), shape=(2,))
    grad = fg.grad(data_function(zero, lambda a: fnp.sum(f(a).todense())))(zero.data)
    np.testing.assert_array_equal(grad, [0.0, 1.0])


def test_custom_jvp_rule_is_used_under_jvp_grad_jit_and_vmap():
    @fg.custom_jvp
    def f(x):
        return fnp.sin(x)

    f.defjvps(lambda t, ans, x: 3.0 * fnp.cos(x) * t)  # deliberately not sin's derivative

    rng = np.random.default_rng(41)
    dense = sparse_array(rng, (3, 4))
    mat = messy(dense, rng)
    w = rng.normal(size=(3, 4))

    def loss(data):
        out = sparse.sparsify(f)(BCOO((data, mat.indices), shape=mat.shape))
        return fnp.sum(out.todense() * w)

    # The rule on the dense form, read at the stored elements (every copy of an index).
    expected_dense = 3.0 * np.cos(dense) * w
    expected = np.asarray(sparse.bcoo_extract(mat, expected_dense, assume_unique=True).data)
    valid = np.all(np.asarray(mat.indices) < np.array(mat.shape), axis=-1)
    expected = np.where(valid, expected, 0.0)
    np.testing.assert_allclose(fg.grad(loss)(mat.data), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fg.jit(fg.grad(loss))(mat.data), expected, rtol=1e-12, atol=1e-12)
    tangent = rng.normal(size=mat.data.shape)
    _, jvp_out = fg.jvp(loss, (mat.data,), (tangent,))
    np.testing.assert_allclose(jvp_out, expected @ tangent, rtol=1e-12)
    lanes = np.stack([np.asarray(mat.data), 2 * np.asarray(mat.data)])
    batched = fg.vmap(fg.grad(loss))(lanes)
    for lane, data in zip(batched, lanes):
        np.testing.assert_allclose(lane, fg.grad(loss)(data), rtol=1e-12, atol=1e-12)


def test_custom_vjp_rule_is_used_for_sparse_operands():
    @fg.custom_vjp
    def f(x, y):
        return fnp.sin(x) * y

    def f_fwd(x, y):
        return f(x, y), (x, y)

    def f_bwd(residuals, ct):
        x, y = residuals
        return 2.0 * fnp.cos(x) * y * ct, fnp.sum(fnp.sin(x) * ct, axis=0)  # x: doubled

    f.defvjp(f_fwd, f_bwd)
    rng = np.random.default_rng(42)
    dense = sparse_array(rng, (3, 4))
    mat = messy(dense, rng)
    y = rng.normal(size=4)
    out = sparse.sparsify(f)(mat, y)
    assert isinstance(out, BCOO)
    np.testing.assert_allclose(out.todense(), np.sin(dense) * y, atol=1e-12)

    def loss(data, y):
        out = sparse.sparsify(f)(BCOO((data, mat.indices), shape=mat.shape), y)
        return fnp.sum(out.todense() ** 2)

    data_grad, y_grad = fg.grad(loss, argnums=(0, 1))(mat.data, y)
    ct = 2 * np.sin(dense) * y
    expected = 2 * np.cos(dense) * y * ct
    positions = tuple(np.minimum(np.asarray(mat.indices), np.array(mat.shape) - 1).T)
    valid = np.all(np.asarray(mat.indices) < np.array(mat.shape), axis=-1)
    np.testing.assert_allclose(data_grad, np.where(valid, expected[positions], 0), atol=1e-12)
    np.testing.assert_allclose(y_grad, np.sum(np.sin(dense) * ct, axis=0), atol=1e-12)
    jitted = fg.jit(fg.grad(loss, argnums=(0, 1)))(mat.data, y)
    np.testing.assert_allclose(jitted[0], data_grad, atol=1e-12)
    with pytest.raises(TypeError, match="forward-mode"):
        fg.jvp(lambda d: loss(d, y), (mat.data,), (mat.data,))


def test_custom_derivative_functions_closing_over_traced_values_are_refused():
    mat = BCOO.fromdense(np.eye(3))

    def f(a, x):
        scaled = fg.custom_jvp(lambda b: b * fnp.sum(x))
        scaled.defjvps(lambda t, ans, b: t * fnp.sum(x))
        return scaled(a)

    np.testing.assert_allclose(
        sparse.sparsify(f)(mat, np.ones(2)).todense(), 2 * np.eye(3), atol=1e-12
    )

    def closing(a):
        scaled = fg.custom_jvp(lambda b: b * fnp.sum(a))
        scaled.defjvps(lambda t, ans, b: t * fnp.sum(a))
        return scaled(a)

    with pytest.raises(NotImplementedError, match="closes over a traced value"):
        fg.jit(sparse.sparsify(closing))(mat)


# ---- max and min against constants


def test_max_and_min_against_constants_keep_zeros_and_refuse_the_rest():
    rng = np.random.default_rng(43)
    dense = 3 * sparse_array(rng, (4, 3))
    mat = messy(dense, rng)

    def f(a):
        return fnp.maximum(a, -1.0), fnp.minimum(a, 0.5), fnp.maximum(0, a), fnp.clip(a, -1, 1)

    results = sparse.sparsify(f)(mat)
    assert all(isinstance(r, BCOO) for r in results)
    assert_same(results, f(fnp.asarray(dense)))
    assert_same(fg.jit(sparse.sparsify(f))(mat), f(fnp.asarray(dense)))
    for fn in (lambda a: fnp.maximum(a, 1.0), lambda a: fnp.minimum(a, -0.5)):
        with pytest.raises(NotImplementedError, match="constant scalar"):
            sparse.sparsify(fn)(mat)
    with pytest.raises(NotImplementedError, match="constant scalar"):
        fg.jit(sparse.sparsify(lambda a, c: fnp.maximum(a, c)))(mat, -1.0)
    with pytest.raises(NotImplementedError, match="two sparse arrays"):
        sparse.sparsify(fnp.maximum)(mat, mat)


# ---- loops


def test_while_loop_carries_sparse_arrays_and_keeps_their_structure():
    rng = np.random.default_rng(50)
    dense = sparse_array(rng, (3, 4))
    mat = messy(dense, rng)
    x = rng.normal(size=4)

    def f(a, x):
        def body(carry):
            i, b, v = carry
            return i + 1, b + b, v * 0.5 + a @ x  # b + b keeps b's indices: nse stays

        return lax.while_loop(lambda c: c[0] < 3, body, (0, a, fnp.zeros(3, x.dtype)))

    expected = f(fnp.asarray(dense), x)
    for g in (sparse.sparsify(f), fg.jit(sparse.sparsify(f))):
        i, b, v = g(mat, x)
        assert int(i) == 3 and isinstance(b, BCOO) and b.nse == mat.nse
        np.testing.assert_allclose(b.todense(), expected[1], rtol=1e-12)
        np.testing.assert_allclose(v, expected[2], rtol=1e-12)
    # Forward mode through the loop, against finite differences.
    looped = data_function(mat, lambda a, x: f(a, x)[2])
    check_grads(looped, (mat.data, x), order=1, modes=("fwd",))
    # A sparse carry that the body makes dense is dense from the start; a dense carry that
    # the body makes sparse stays dense.
    out = sparse.sparsify(lambda a, x: lax.fori_loop(0, 2, lambda i, c: c * 0.5 + x, a))(mat, x)
    np.testing.assert_allclose(out, dense * 0.25 + 1.5 * x, rtol=1e-12)
    ones = np.ones((3, 4))
    out = sparse.sparsify(lambda a, c: lax.fori_loop(0, 2, lambda i, c: c * a, c))(mat, ones)
    assert not isinstance(out, BCOO)
    np.testing.assert_allclose(out, dense**2, rtol=1e-12)
    # A body that changes the number of stored elements is refused, naming the structures.
    with pytest.raises(NotImplementedError, match="changes the structure of its carry"):
        sparse.sparsify(lambda a: lax.fori_loop(0, 2, lambda i, c: c * a, a))(mat)


def test_scan_over_sparse_consts_carry_and_rows():
    rng = np.random.default_rng(51)
    dense = sparse_array(rng, (4, 3, 5))
    stacked = BCOO.fromdense(dense, n_batch=1)
    mat = BCOO.fromdense(dense[0])
    x = rng.normal(size=5)

    def f(rows, a, x):
        def body(carry, row):
            scaled, total, v = carry
            v = fnp.tanh(row @ x + (scaled @ x) * v)
            return (scaled * 0.9, total + row, v), (fnp.sin(row), row @ x)

        init = (a, fnp.zeros((3, 5), x.dtype), fnp.ones(3, x.dtype))
        return lax.scan(body, init, rows, reverse=True)

    expected = f(fnp.asarray(dense), fnp.asarray(dense[0]), x)
    for g in (sparse.sparsify(f), fg.jit(sparse.sparsify(f))):
        (scaled, total, v), (sines, products) = g(stacked, mat, x)
        assert isinstance(scaled, BCOO) and scaled.nse == mat.nse
        assert isinstance(sines, BCOO) and sines.n_batch == 1 and sines.shape == (4, 3, 5)
        assert_same([scaled, total, v, sines, products], [*expected[0], *expected[1]])

    def loss(data, a_data, x):
        rows = BCOO((data, stacked.indices), shape=stacked.shape)
        a = BCOO((a_data, mat.indices), shape=mat.shape)
        (_, _, v), (_, products) = sparse.sparsify(f)(rows, a, x)
        return fnp.sum(v**2) + fnp.sum(products)

    check_grads(loss, (stacked.data, mat.data, x), order=1)
    with pytest.raises(NotImplementedError, match="leading dimension to be a batch"):
        sparse.sparsify(lambda rows: lax.scan(lambda c, r: (c, r), 0.0, rows))(
            BCOO.fromdense(dense)
        )


# ---- gathers (indexing by arrays)


@pytest.mark.parametrize("n_batch, n_dense", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_indexing_by_integer_arrays_gathers_sparsely(n_batch, n_dense):
    rng = np.random.default_rng(52)
    dense = sparse_array(rng, (4, 3, 5))
    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    rows = np.array([3, 0, -1, 3], np.int32)
    cols = np.array([[2, 0], [1, 1]], np.int32)

    def f(a, rows, cols):
        return a[rows], a[:, cols], a[rows[:2], 1:, cols[0]], a[..., cols], a[1, cols]

    expected = [np.asarray(r) for r in f(fnp.asarray(dense), rows, cols)]
    for g in (sparse.sparsify(f), fg.jit(sparse.sparsify(f))):
        results = g(mat, rows, cols)
        assert all(isinstance(r, BCOO) for r in results)
        assert_same(results, expected)

    def loss(data):
        out = sparse.sparsify(f)(BCOO((data, mat.indices), shape=mat.shape), rows, cols)
        return sum(fnp.sum(r.todense() ** 2) for r in out)

    check_grads(loss, (mat.data,), order=1)
    # vmap over the indices, against a loop.
    take = sparse.sparsify(lambda a, i: a[i])
    batched = fg.vmap(take, in_axes=(None, 0))(mat, cols)
    for lane, index in enumerate(cols):
        np.testing.assert_allclose(bcoo_lane(batched, lane).todense(), dense[index], atol=1e-12)


def test_gather_modes_and_batched_gathers():
    rng = np.random.default_rng(53)
    dense = sparse_array(rng, (3, 4))
    mat = BCOO.fromdense(dense)
    index = np.array([5, -7, 1], np.int32)
    clipped = sparse.sparsify(lambda a, i: a.at[:, i].get(mode="clip"))(mat, index)
    np.testing.assert_allclose(clipped.todense(), dense[:, [3, 0, 1]], atol=1e-12)
    filled = sparse.sparsify(lambda a, i: a.at[:, i].get(mode="fill", fill_value=0))(mat, index)
    np.testing.assert_allclose(filled.todense(), dense[:, [1]] * [0, 0, 1], atol=1e-12)
    with pytest.raises(NotImplementedError, match="fill_value"):
        sparse.sparsify(lambda a, i: a.at[:, i].get(mode="fill"))(mat, index)
    # vmap inside sparsify gathers with operand batching dimensions.
    stacked = BCOO.fromdense(sparse_array(rng, (2, 3, 4)), n_batch=1)
    picks = np.array([[2, 0], [1, 1]], np.int32)
    out = sparse.sparsify(fg.vmap(lambda a, i: a[i]))(stacked, picks)
    expected = np.stack([np.asarray(stacked.todense())[b][picks[b]] for b in range(2)])
    np.testing.assert_allclose(out.todense(), expected, atol=1e-12)
    numbers = lax.GatherDimensionNumbers((1,), (0,), (0,))
    for operand in (dense, mat):
        with pytest.raises(NotImplementedError, match="sparse indices"):
            sparse.sparsify(lambda x, i: lax.gather(x, i, numbers, (1, 4)))(
                operand, BCOO.fromdense(np.array([[1], [0]]))
            )


# ---- convolutions


def numpy_conv1d(lhs, rhs, stride, padding, lhs_dilation, rhs_dilation):
    """conv_general_dilated of two 1-D signals by its definition (cross-correlation)."""
    dilated = np.zeros((len(lhs) - 1) * lhs_dilation + 1)
    dilated[::lhs_dilation] = lhs
    low, high = padding
    padded = np.concatenate([np.zeros(max(low, 0)), dilated, np.zeros(max(high, 0))])
    padded = padded[max(-low, 0) : len(padded) - max(-high, 0)]
    kernel = np.zeros((len(rhs) - 1) * rhs_dilation + 1)
    kernel[::rhs_dilation] = rhs
    width = len(padded) - len(kernel) + 1
    return np.array([padded[o : o + len(kernel)] @ kernel for o in range(0, max(width, 0), stride)])


@pytest.mark.parametrize(
    "stride, padding, lhs_dilation, rhs_dilation",
    [
        (1, (0, 0), 1, 1),
        (1, (2, 3), 1, 1),
        (2, (1, 0), 1, 2),
        (1, (-1, 2), 2, 1),
        (3, (4, 4), 2, 3),
    ],
)
def test_conv_general_dilated_of_sparse_signals(stride, padding, lhs_dilation, rhs_dilation):
    rng = np.random.default_rng(54)
    signal = sparse_array(rng, (9,))
    kernel = sparse_array(rng, (3,), density=0.7)
    expected = numpy_conv1d(signal, kernel, stride, padding, lhs_dilation, rhs_dilation)

    def conv(a, b):
        return lax.conv_general_dilated(
            a[None, None], b[None, None], (stride,), [padding], (lhs_dilation,), (rhs_dilation,)
        )[0, 0]

    operands = [
        (messy(signal, rng), kernel),
        (signal, BCOO.fromdense(kernel)),
        (BCOO.fromdense(signal), BCOO.fromdense(kernel)),
    ]
    for a, b in operands:
        out = sparse.sparsify(conv)(a, b)
        assert isinstance(out, BCOO)
        np.testing.assert_allclose(out.todense(), expected, atol=1e-12)
    mat = BCOO.fromdense(signal, nse=8)
    convolved = data_function(mat, lambda a, b: sparse.sparsify(conv)(a, b).todense())
    check_grads(convolved, (mat.data, kernel), order=1)
    for mode in ("full", "same", "valid"):
        out = sparse.sparsify(functools.partial(fnp.convolve, mode=mode))(mat, kernel)
        np.testing.assert_allclose(out.todense(), np.convolve(signal, kernel, mode), atol=1e-12)
    with pytest.raises(NotImplementedError, match="one spatial dimension"):
        sparse.sparsify(lambda a, b: lax.conv_general_dilated(a, b, (1,), "VALID"))(
            BCOO.fromdense(np.ones((2, 1, 4))), np.ones((1, 1, 2))
        )


# ---- BCSR arguments


def test_bcsr_arguments_keep_their_format_where_their_elements_are_kept():
    rng = np.random.default_rng(55)
    dense = sparse_array(rng, (4, 5))
    mat = sparse.BCSR.fromdense(dense)
    row, x = rng.uniform(1, 2, size=5), rng.normal(size=5)

    def f(a, row, x):
        kept = (fnp.sin(a), a * 2.0, a / row, fg.nn.relu(a), a**3, fnp.concatenate([a, a]))
        return (*kept, a * a, a.T, a[1:3], a @ x, fnp.sum(a, axis=0))

    expected = f(fnp.asarray(dense), row, x)
    for g in (sparse.sparsify(f), fg.jit(sparse.sparsify(f))):
        results = g(mat, row, x)
        kinds = [type(r).__name__ for r in results]
        assert kinds == ["BCSR"] * 6 + ["BCOO"] * 3 + ["Array", "BCOO"], kinds
        assert_same(results, expected)
    assert results[0].nse == mat.nse

    def loss(data, x):
        a = sparse.BCSR((data, mat.indices, mat.indptr), shape=mat.shape)
        b = sparse.sparsify(lambda a: lax.fori_loop(0, 2, lambda i, c: fnp.tanh(c), a))(a)
        assert isinstance(b, sparse.BCSR)
        return fnp.sum(sparse.sparsify(lambda a, x: fnp.sin(a) @ x + b @ x)(a, x) ** 2)

    check_grads(loss, (mat.data, x), order=1, modes=("fwd",))
