"""Derivatives of reductions, cumulative reductions, pooling and select_and_scatter_add.

Forward mode is checked against central finite differences, reverse mode against forward mode
(the adjoint identity, which also checks every transpose rule), second order by the same checks
on the derivative functions; the points where a derivative needs care (ties, zeros in
products, infinities) are checked against hand-computed values.
"""

import functools
import itertools
import math

import numpy as np
import pytest
import strategies as fst
from hypothesis import assume, example, given
from hypothesis import strategies as st
from test_lax_reductions import tie_heavy, windowing

import funcgrad as fg
from funcgrad import dtypes, lax
from funcgrad.lax.elementwise import ge_p, le_p
from funcgrad.test_util import check_grads

SHAPES = fst.shapes(max_dims=3, max_side=4)


def smooth(shape=SHAPES, bound=2.0):
    return fst.arrays(dtypes.float64, shape, min_value=-bound, max_value=bound)


@st.composite
def distinct(draw, shape=SHAPES):
    """float64 values at least 0.25 apart, so that every max, min and order is strict."""
    shape = draw(shape)
    size = math.prod(shape)
    values = np.array(draw(st.permutations(range(size))), np.float64)
    return (values / 4 - size / 8).reshape(shape)


@st.composite
def operand_and_axes(draw, arrays):
    x = draw(arrays)
    return x, draw(fst.axes(x.ndim))


@st.composite
def operand_and_axis(draw, arrays):
    x = draw(arrays)
    return x, draw(st.integers(0, x.ndim - 1)), draw(st.booleans())


def jvp_tangent(f, x, t):
    return np.asarray(fg.jvp(f, (x,), (t,))[1])


def vjp_cotangent(f, x, u):
    return np.asarray(fg.vjp(f, x)[1](u)[0])


# ---------------------------------------------------------------------------------------------
# Reductions over axes


@given(operand_and_axes(smooth()))
def test_reduce_sum(case):
    x, axes = case
    check_grads(lambda x: lax.reduce_sum(x, axes), (x,), order=2)


@given(
    st.sampled_from([lax.reduce_max, lax.reduce_min]),
    operand_and_axes(distinct(fst.shapes(0, 3, 1, 4))),  # empty reductions give constant infs
)
def test_reduce_max_min(reduce, case):
    x, axes = case
    check_grads(lambda x: reduce(x, axes), (x,), order=2)


def test_reduce_max_min_ties_share_the_tangent():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [-1.0, 0.0, -1.0]])
    t = np.array([[1.0, 10.0, 100.0], [1.0, 2.0, 6.0], [4.0, 8.0, 16.0]])
    np.testing.assert_allclose(jvp_tangent(lambda x: lax.reduce_max(x, (1,)), x, t), [55, 3, 8])
    np.testing.assert_allclose(jvp_tangent(lambda x: lax.reduce_min(x, (1,)), x, t), [1, 3, 10])
    grad = fg.grad(lambda x: lax.reduce_max(x, (0, 1)))(np.array([[3.0, 1.0], [3.0, 3.0]]))
    np.testing.assert_allclose(np.asarray(grad), np.array([[1, 0], [1, 1]]) / 3)
    empty = np.zeros((2, 0))
    np.testing.assert_array_equal(
        jvp_tangent(lambda x: lax.reduce_max(x, (1,)), empty, empty), [0, 0]
    )


def _two_zeros_among_ones():
    x = np.ones((4, 4, 4))
    x[0, 0, :2] = 0.0
    return x, (0, 1, 2)


# Entries within [-1, 1]: where a line holds two zeros (hypothesis draws them beside a repeated
# value) the derivative is 0, and central differences' error eps^2/6 D^3f[v, v, v] grows as
# bound^(n-3); at bound 2, 62 twos and two zeros gave 1.6e7. At bound 1 it stays below
# eps^2/6 (sum |v_i|)^3, about 2e-6 for 64 normal v_i.
@given(operand_and_axes(smooth(bound=1.0)))
@example(case=_two_zeros_among_ones())
def test_reduce_prod(case):
    x, axes = case
    check_grads(lambda x: lax.reduce_prod(x, axes), (x,), order=2)


def _two_zeros_among_twos():
    x = np.full((2, 3, 4), 2.0)
    x[0, 0, :2] = 0.0
    return x, (0, 1, 2)


@given(operand_and_axes(fst.arrays(dtypes.float64, SHAPES, min_value=-3, max_value=3)))
@example(case=_two_zeros_among_twos())
@example(case=(np.full((3, 4, 4), 3.0), (0, 1, 2)))
def test_reduce_prod_is_exact_at_zeros(case):
    # Integer values, zeros among them: the derivative by x_i is the product of the others,
    # computed here exactly in Python integers, with no division. Products past 2^53 (3^34)
    # round, by half an ulp at each of at most n - 2 multiplications in whatever order funcgrad
    # takes (48 threes came 1 ulp from the sequential product, FUNCGRAD_TEST_SEED=5); zeros
    # and products below 2^53 are exact.
    x, axes = case
    x = np.round(x)
    kept = [d for d in range(x.ndim) if d not in axes]
    kept_shape = [x.shape[d] for d in kept]
    lines = np.transpose(x, kept + list(axes)).reshape(
        math.prod(kept_shape), math.prod(x.shape[a] for a in axes)
    )
    others = np.array(
        [
            [float(math.prod(map(int, np.delete(line, i)))) for i in range(line.size)]
            for line in lines
        ]
    )
    expected = np.transpose(
        others.reshape([x.shape[d] for d in kept + list(axes)]), np.argsort(kept + list(axes))
    )
    u = np.ones(kept_shape)
    np.testing.assert_allclose(
        vjp_cotangent(lambda x: lax.reduce_prod(x, axes), x, u),
        expected,
        rtol=lines.shape[1] * 2.0**-53,
        atol=0,
    )
    # Central differences err by eps^2/6 D^3f[v, v, v]. Where a line holds two zeros the first
    # derivative is 0 and that error is all there is: up to eps^2/6 |v|^3 3^(n-3) with n <= 64
    # entries of size 3 (2.6e-4 for 22 twos, drawn by the 2026-12-06 seed). At x / 3 no entry
    # exceeds 1 and the error stays below eps^2/6 (sum |v_i|)^3, about 2e-6 for 64 normal v_i.
    check_grads(lambda x: lax.reduce_prod(x, axes), (x / 3,), order=2)


def test_reduce_prod_gradient_example():
    grad = fg.grad(lambda x: lax.reduce_prod(x, (0,)))
    np.testing.assert_array_equal(np.asarray(grad(np.array([2.0, 0.0, 3.0, 5.0]))), [0, 30, 0, 0])
    np.testing.assert_array_equal(np.asarray(grad(np.array([2.0, 0.0, 3.0, 0.0]))), [0, 0, 0, 0])


@pytest.mark.parametrize("op", [lax.argmax, lax.argmin])
def test_argmax_argmin_have_zero_tangents(op):
    x = np.array([[1.0, 4.0, 2.0], [3.0, -1.0, 0.5]])
    _, tangent = fg.jvp(lambda x: op(x, 1, np.int32), (x,), (np.ones_like(x),))
    assert tangent.dtype == dtypes.float0 and tangent.shape == (2,)


@pytest.mark.parametrize("op", [lax.reduce_and, lax.reduce_or])
def test_reduce_and_or_have_zero_tangents(op):
    bits = np.array([[True, False], [True, True]])
    _, tangent = fg.jvp(lambda b: op(b, (1,)), (bits,), (np.zeros(bits.shape, dtypes.float0),))
    assert tangent.dtype == dtypes.float0 and tangent.shape == (2,)


# ---------------------------------------------------------------------------------------------
# Cumulative reductions


@given(operand_and_axis(smooth(fst.shapes(1, 3, 0, 5))))
def test_cumsum(case):
    x, axis, reverse = case
    check_grads(lambda x: lax.cumsum(x, axis, reverse), (x,), order=2)


CUMULATIVE_SHAPES = fst.shapes(1, 2, 0, 7)


@pytest.mark.parametrize(
    "op, arrays",
    [
        (lax.cumprod, smooth(CUMULATIVE_SHAPES, bound=1.5)),
        (lax.cumlogsumexp, smooth(CUMULATIVE_SHAPES, bound=5.0)),
        (lax.cummax, distinct(CUMULATIVE_SHAPES)),
        (lax.cummin, distinct(CUMULATIVE_SHAPES)),
    ],
    ids=["cumprod", "cumlogsumexp", "cummax", "cummin"],
)
@given(data=st.data())
def test_cumulative(op, arrays, data):
    x, axis, reverse = data.draw(operand_and_axis(arrays))
    check_grads(lambda x: op(x, axis, reverse), (x,), order=2)


def cumprod_jacobian(x: np.ndarray, reverse: bool) -> np.ndarray:
    """d y_i / d x_j = the product of x_k over k in i's prefix with k != j, by Python loops."""
    n = x.size
    jac = np.zeros((n, n))
    for i, j in itertools.product(range(n), range(n)):
        prefix = range(i, n) if reverse else range(i + 1)
        if j in prefix:
            jac[i, j] = math.prod(float(x[k]) for k in prefix if k != j)
    return jac


@given(fst.arrays(dtypes.float64, fst.shapes(1, 1, 0, 8), min_value=-2, max_value=2), st.booleans())
def test_cumprod_is_exact_at_zeros(x, reverse):
    x = np.round(x)  # zeros are common
    f = functools.partial(lax.cumprod, axis=0, reverse=reverse)
    jac = cumprod_jacobian(x, reverse)
    t = np.arange(1.0, x.size + 1)
    np.testing.assert_array_equal(jvp_tangent(f, x, t), jac @ t)
    np.testing.assert_array_equal(vjp_cotangent(f, x, t), jac.T @ t)


def test_cummax_cummin_ties_split_like_max():
    # The derivative of the running fold y[i] = max(y[i - 1], x[i]) with max's tie rule: where
    # x[i] ties the running maximum, each side gets half.
    t = np.array([1.0, 10.0, 100.0, 1000.0])
    x = np.array([1.0, 3.0, 3.0, 2.0])
    np.testing.assert_allclose(jvp_tangent(lax.cummax, x, t), [1, 10, 55, 55])
    np.testing.assert_allclose(jvp_tangent(lax.cummin, -x, t), [1, 10, 55, 55])
    reverse = functools.partial(lax.cummax, reverse=True)
    np.testing.assert_allclose(jvp_tangent(reverse, x[::-1].copy(), t), [55, 55, 100, 1000])


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("prim", [lax.cummax, lax.cummin])
def test_cummax_cummin_first_output_is_the_first_element_even_when_nan(prim, reverse):
    """y[0] is x[0] by definition (the scan's first element meets no comparison), so its
    derivative is 1 there, NaN or not: the tie rule compared NaN with itself and gave 0. Later
    NaN outputs take no tangent (max's rule: NaN equals neither operand)."""
    x = np.array([np.nan, 1.0, 3.0, 2.0])
    f = functools.partial(prim, reverse=reverse)
    if reverse:
        x = x[::-1].copy()
    t = np.array([1.0, 10.0, 100.0, 1000.0])
    first = -1 if reverse else 0
    expected = np.zeros(4)
    expected[first] = t[first]
    np.testing.assert_array_equal(jvp_tangent(f, x, t), expected)
    np.testing.assert_array_equal(vjp_cotangent(f, x, t), expected)
    np.testing.assert_array_equal(
        np.asarray(fg.jit(fg.grad(lambda v: f(v)[first]))(x)), expected / t
    )


def test_cumlogsumexp_at_infinities():
    f = lax.cumlogsumexp
    x = np.array([-np.inf, -np.inf, 0.0, 1.0])
    t = np.array([1.0, 10.0, 100.0, 1000.0])
    # The running value is -inf (and stays so) until the first finite element; after it, the
    # tangent is the softmax-weighted sum of the tangents so far.
    weights = np.exp([0.0, 1.0]) / (1 + np.e)
    np.testing.assert_allclose(jvp_tangent(f, x, t), [0, 0, 100, weights @ [100, 1000]])
    np.testing.assert_allclose(vjp_cotangent(f, x, np.ones(4)), [0, 0, 1 + weights[0], weights[1]])
    np.testing.assert_array_equal(jvp_tangent(f, np.full(3, -np.inf), t[:3]), [0, 0, 0])
    np.testing.assert_allclose(jvp_tangent(f, np.array([1e3, 1e3]), t[:2]), [1, 5.5])


# ---------------------------------------------------------------------------------------------
# Windowed reductions and select_and_scatter_add


@given(smooth(fst.shapes(1, 2, 0, 5)), st.data())
def test_reduce_window_sum(x, data):
    window = data.draw(windowing(x.ndim))
    check_grads(lambda x: lax.reduce_window(x, 0.0, lax.add, **window), (x,), order=2)


@given(
    st.sampled_from([(lax.max, -np.inf), (lax.min, np.inf)]),
    distinct(fst.shapes(1, 2, 1, 5)),
    st.data(),
)
def test_reduce_window_max_min(computation, x, data):
    computation, identity = computation
    window = data.draw(windowing(x.ndim, max_pad=1))

    def pool(x):
        return lax.reduce_window(x, identity, computation, **window)

    # A window holding only padding or dilation holes is constant: its finite difference is nan.
    assume(np.all(np.isfinite(np.asarray(pool(x)))))
    check_grads(pool, (x,), order=2)


@given(
    st.sampled_from([(ge_p, lax.max, -np.inf), (le_p, lax.min, np.inf)]),
    fst.arrays(dtypes.float64, fst.shapes(1, 2, 0, 5), min_value=-2, max_value=2),
    st.data(),
)
def test_pooling_gradient_is_select_and_scatter_add(select, x, data):
    # Ties are common: both must select the same element of every window.
    select_prim, computation, identity = select
    x = tie_heavy(x)
    window = data.draw(windowing(x.ndim, dilations=False))
    del window["base_dilation"], window["window_dilation"]
    pooled_shape = lax.reduce_window(x, 0.0, lax.add, **window).shape
    c = data.draw(fst.arrays(dtypes.float64, pooled_shape))
    _, pullback = fg.vjp(lambda x: lax.reduce_window(x, identity, computation, **window), x)
    expected = lax.select_and_scatter_add(c, x, select_prim, **window)
    np.testing.assert_array_equal(np.asarray(pullback(c)[0]), np.asarray(expected))


def test_max_pooling_tangent_example():
    x = np.array([[1.0, 5.0], [5.0, 2.0]])
    t = np.array([[1.0, 10.0], [100.0, 1000.0]])
    max_pool = functools.partial(
        lax.reduce_window,
        init_value=-np.inf,
        computation=lax.max,
        window_dimensions=(2, 2),
        window_strides=(1, 1),
        padding="VALID",
    )
    np.testing.assert_array_equal(jvp_tangent(max_pool, x, t), [[10.0]])  # the first maximum


@given(
    st.sampled_from([ge_p, le_p]),
    fst.arrays(dtypes.float64, fst.shapes(1, 2, 0, 5), min_value=-2, max_value=2),
    st.data(),
)
def test_select_and_scatter_add(select_prim, operand, data):
    # Linear in source for a fixed operand; ties in the operand must be resolved alike by the
    # primitive and by its transpose (check_grads' adjoint check compares them).
    operand = tie_heavy(operand)
    window = data.draw(windowing(operand.ndim, dilations=False))
    del window["base_dilation"], window["window_dilation"]
    source_shape = lax.reduce_window(operand, 0.0, lax.add, **window).shape
    source = data.draw(smooth(source_shape))

    def scatter(source, operand):
        return lax.select_and_scatter_add(source, operand, select_prim, **window)

    check_grads(lambda s: scatter(s, operand), (source,), order=2)
    _, tangent = fg.jvp(scatter, (source, operand), (np.zeros_like(source), np.ones_like(operand)))
    np.testing.assert_array_equal(np.asarray(tangent), np.zeros(operand.shape))
