"""Derivatives of dot_general, conv_general_dilated and threefry2x32.

The contractions are bilinear, so forward mode is checked against central finite differences
and reverse mode through the adjoint identity <u, J v> = <J^T u, v> (J v by finite differences), in
float64, over drawn dimension numbers and convolution configurations. A few small cases are
compared with gradients worked out by hand.
"""

import numpy as np
import strategies as fst
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lax_linalg import conv_problems, dilated, dot_problems, to_layout

import funcgrad as fg
from funcgrad import dtypes, lax
from funcgrad.interpreters.ad import Zero, tangent_aval
from funcgrad.lax import ConvDimensionNumbers
from funcgrad.lax.random_bits import threefry2x32_p
from funcgrad.test_util import check_grads, check_vjp

# ---------------------------------------------------------------------------------------------
# dot_general


@given(dot_problems(st.just(dtypes.float64)))
def test_dot_general_derivatives_to_second_order(problem):
    lhs, rhs, dimension_numbers = problem

    def f(x, y):
        return lax.dot_general(x, y, dimension_numbers)

    check_grads(f, (lhs, rhs), order=2)


@given(dot_problems(st.just(dtypes.float64)))
def test_dot_general_derivative_in_one_operand(problem):
    # The other operand is a constant, so only one of the two transpose rules is used.
    lhs, rhs, dimension_numbers = problem
    check_grads(lambda x: lax.dot_general(x, rhs, dimension_numbers), (lhs,), order=1)
    check_grads(lambda y: lax.dot_general(lhs, y, dimension_numbers), (rhs,), order=1)


@given(dot_problems(st.just(dtypes.float32)))
def test_dot_general_cotangents_take_the_operand_dtype(problem):
    # float32 operands with a float64 result: the cotangents are float32 again.
    lhs, rhs, dimension_numbers = problem

    def f(x, y):
        return lax.dot_general(x, y, dimension_numbers, preferred_element_type=np.float64)

    out, pullback = fg.vjp(f, lhs, rhs)
    assert out.dtype == np.float64
    lhs_ct, rhs_ct = pullback(np.ones(out.shape, np.float64))
    assert lhs_ct.dtype == rhs_ct.dtype == np.float32
    check_vjp(f, (lhs, rhs))


def test_dot_general_with_an_integer_operand():
    x = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])
    counts = np.array([[1, 2], [0, -1], [3, 1]], np.int32)

    def f(x, n):
        return lax.dot_general(x, n, (((1,), (0,)), ((), ())), preferred_element_type=np.float64)

    ct = np.array([[1.0, 2.0], [3.0, 4.0]])
    x_ct, n_ct = fg.vjp(f, x, counts)[1](ct)
    np.testing.assert_allclose(x_ct, ct @ counts.T)
    assert n_ct.dtype == fg.dtypes.float0 and n_ct.shape == counts.shape
    check_grads(lambda x: f(x, counts), (x,), order=2)


def test_matmul_gradients_by_hand():
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = np.array([[1.0, -1.0], [0.5, 2.0], [-3.0, 0.0]])
    ct = np.array([[1.0, 2.0], [3.0, 4.0]])
    a_ct, b_ct = fg.vjp(lax.dot, a, b)[1](ct)
    np.testing.assert_allclose(a_ct, ct @ b.T)
    np.testing.assert_allclose(b_ct, a.T @ ct)


def test_batched_dot_gradients_by_hand():
    # Batch dim 2 of lhs pairs with dim 0 of rhs; the cotangents keep each operand's layout.
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((3, 4, 2))  # (contract, free, batch)
    rhs = rng.standard_normal((2, 5, 3))  # (batch, free, contract)
    dimension_numbers = (((0,), (2,)), ((2,), (0,)))
    ct = rng.standard_normal((2, 4, 5))  # (batch, lhs free, rhs free)
    _, pullback = fg.vjp(lambda x, y: lax.dot_general(x, y, dimension_numbers), lhs, rhs)
    lhs_ct, rhs_ct = pullback(ct)
    np.testing.assert_allclose(lhs_ct, np.einsum("bfg,bgc->cfb", ct, rhs))
    np.testing.assert_allclose(rhs_ct, np.einsum("bfg,cfb->bgc", ct, lhs))


# ---------------------------------------------------------------------------------------------
# conv_general_dilated


def conv_function(specs, params):
    def f(x, w):
        return lax.conv_general_dilated(x, w, dimension_numbers=specs, **params)

    return f


def float64_operands(lhs, rhs, specs):
    x = to_layout(lhs.astype(np.float64), specs.lhs_spec)
    w = to_layout(rhs.astype(np.float64), specs.rhs_spec)
    return x, w


@given(conv_problems())
def test_conv_derivatives(problem):
    lhs, rhs, specs, params = problem
    check_grads(conv_function(specs, params), float64_operands(lhs, rhs, specs), order=1)


@settings(max_examples=5)
@given(conv_problems())
def test_conv_second_order(problem):
    # The vjp of the vjp transposes the transposed convolutions: lhs dilation from strides,
    # batch groups from feature groups, and back.
    lhs, rhs, specs, params = problem
    check_grads(conv_function(specs, params), float64_operands(lhs, rhs, specs), order=2)


@st.composite
def wide_conv_configs(draw):
    """Convolutions up to 3-d with large strides and dilations, and padding from cropping
    (almost) everything to more padding than input: many outputs are tiny or empty."""
    spatial = draw(st.integers(1, 3))
    groups, batch_groups = draw(st.sampled_from([(1, 1), (2, 1), (3, 1), (1, 2), (1, 3)]))
    in_features = draw(st.integers(1, 2))
    out_features = max(groups, batch_groups) * draw(st.integers(1, 2))
    batch = batch_groups * draw(st.integers(1, 2))

    def per_dim(low, high):
        return tuple(draw(st.lists(st.integers(low, high), min_size=spatial, max_size=spatial)))

    in_sizes, kernel = per_dim(1, 6), per_dim(1, 4)
    lhs_dilation = per_dim(1, 3)
    padding = []
    for size, dilation in zip(in_sizes, lhs_dilation):
        low = draw(st.integers(-dilated(size, dilation), 5))
        padding.append((low, draw(st.integers(-dilated(size, dilation) - low, 5))))
    params = dict(
        window_strides=per_dim(1, 4),
        padding=tuple(padding),
        lhs_dilation=lhs_dilation,
        rhs_dilation=per_dim(1, 3),
        feature_group_count=groups,
        batch_group_count=batch_groups,
    )
    specs = ConvDimensionNumbers(
        *(tuple(draw(st.permutations(range(spatial + 2)))) for _ in range(3))
    )
    lhs = draw(fst.arrays(np.float64, (batch, groups * in_features, *in_sizes)))
    rhs = draw(fst.arrays(np.float64, (out_features, in_features, *kernel)))
    return lhs, rhs, specs, params


@given(wide_conv_configs())
def test_conv_transposes_satisfy_the_adjoint_identity(problem):
    lhs, rhs, specs, params = problem
    x, w = float64_operands(lhs, rhs, specs)
    f = conv_function(specs, params)
    check_vjp(f, (x, w))
    check_vjp(lambda x: f(x, w), (x,))
    check_vjp(lambda w: f(x, w), (w,))


def test_conv_cotangents_take_the_operand_dtype():
    x = np.linspace(-1, 1, 2 * 3 * 5).reshape(2, 3, 5).astype(np.float32)
    w = np.linspace(-1, 1, 4 * 3 * 2).reshape(4, 3, 2).astype(np.float32)

    def f(x, w):
        return lax.conv_general_dilated(x, w, (2,), "SAME", preferred_element_type=np.float64)

    out, pullback = fg.vjp(f, x, w)
    x_ct, w_ct = pullback(np.ones(out.shape, np.float64))
    assert out.dtype == np.float64 and x_ct.dtype == w_ct.dtype == np.float32
    check_vjp(f, (x, w))


def conv_cotangents(f, x, w, ct):
    return fg.vjp(f, x, w)[1](np.asarray(ct, np.float64))


def test_conv_gradients_by_hand():
    # out = [x0 - x2, x1 - x3], so x_ct = [c0, c1, -c0, -c1] and w_ct[k] = c0 x_k + c1 x_k+1.
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]])
    w = np.array([[[1.0, 0.0, -1.0]]])
    x_ct, w_ct = conv_cotangents(lambda x, w: lax.conv(x, w, (1,), "VALID"), x, w, [[[1.0, 10.0]]])
    np.testing.assert_allclose(x_ct, [[[1.0, 10.0, -1.0, -10.0]]])
    np.testing.assert_allclose(w_ct, [[[21.0, 32.0, 43.0]]])
    # Stride 2 with padding (1, 1): out[p] = x[2p - 1] + 10 x[2p] on padded x = [0, 1, 2, 3, 4, 0].
    w = np.array([[[1.0, 10.0]]])
    x_ct, w_ct = conv_cotangents(
        lambda x, w: lax.conv(x, w, (2,), ((1, 1),)), x, w, [[[1.0, 2.0, 3.0]]]
    )
    np.testing.assert_allclose(x_ct, [[[10.0, 2.0, 20.0, 3.0]]])
    np.testing.assert_allclose(w_ct, [[[0.0 + 2 * 2.0 + 3 * 4.0, 1.0 + 2 * 3.0 + 0.0]]])


def test_grouped_conv_gradient_by_hand():
    # Two feature groups of one channel each: out channel g sees only in channel g.
    x = np.array([[[1.0, 2.0], [3.0, 4.0]]])  # (N=1, C=2, W=2)
    w = np.array([[[2.0]], [[5.0]]])  # (O=2, I=1, K=1)
    x_ct, w_ct = conv_cotangents(
        lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID", feature_group_count=2),
        x,
        w,
        [[[1.0, 1.0], [1.0, -1.0]]],
    )
    np.testing.assert_allclose(x_ct, [[[2.0, 2.0], [5.0, -5.0]]])
    np.testing.assert_allclose(w_ct, [[[3.0]], [[-1.0]]])


def test_batch_grouped_conv_gradient_by_hand():
    # Two batch groups: out channel g sees only batch element g, and the output has batch 1.
    x = np.array([[[1.0, 2.0]], [[3.0, 4.0]]])  # (N=2, C=1, W=2)
    w = np.array([[[2.0]], [[5.0]]])  # (O=2, I=1, K=1)
    x_ct, w_ct = conv_cotangents(
        lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID", batch_group_count=2),
        x,
        w,
        [[[1.0, 1.0], [1.0, -1.0]]],
    )
    np.testing.assert_allclose(x_ct, [[[2.0, 2.0]], [[5.0, -5.0]]])
    np.testing.assert_allclose(w_ct, [[[3.0]], [[-1.0]]])


# ---------------------------------------------------------------------------------------------
# threefry2x32


def test_threefry2x32_has_zero_float0_tangents():
    words = [np.array([1, 2, 3], np.uint32)] * 4
    tangents = [np.zeros(3, fg.dtypes.float0)] * 4
    outs, tangents_out = fg.jvp(lambda *w: lax.threefry2x32(*w), words, tangents)
    np.testing.assert_array_equal(outs[0], lax.threefry2x32(*words)[0])
    assert all(t.dtype == fg.dtypes.float0 and t.shape == (3,) for t in tangents_out)


def test_threefry2x32_jvp_rule_gives_symbolic_zeros():
    # Integer operands only ever have zero tangents, so the trace never calls the rule: call it.
    words = [lax.asarray(np.array([7, 8], np.uint32))] * 4
    zeros = [Zero(tangent_aval(w.aval)) for w in words]
    outs, tangents_out = threefry2x32_p.jvp(words, zeros)
    for out, expected, tangent in zip(outs, lax.threefry2x32(*words), tangents_out):
        np.testing.assert_array_equal(out, expected)
        assert type(tangent) is Zero and tangent.aval.dtype == fg.dtypes.float0
    assert "not linear" in threefry2x32_p.not_applicable["transpose"]


def test_gradient_through_random_bits_flows_only_to_the_float_operand():
    def f(x, counter):
        bits, _ = lax.threefry2x32(0, 42, counter, np.uint32(0))
        noise = lax.convert_element_type(bits, np.float64) / 2.0**32
        return lax.dot(noise, x)

    counter = np.arange(4, dtype=np.uint32)
    x_ct, counter_ct = fg.grad(f, argnums=(0, 1), allow_int=True)(np.ones(4), counter)
    bits, _ = lax.threefry2x32(0, 42, counter, np.uint32(0))
    np.testing.assert_allclose(x_ct, np.asarray(bits) / 2.0**32)
    assert counter_ct.dtype == fg.dtypes.float0
