"""vmap of dot_general, conv_general_dilated and threefry2x32 against a Python loop of the lanes.

Each property draws the lanes' problem with the strategies of test_lax_linalg, maps a drawn axis
of each operand (counted from the end half the time, or no axis for some operands) and stacks
the results at a drawn output axis. The batched programs are checked to hold one contraction
(or one cipher call) for all lanes, and per-example gradients against a loop of gradients.
"""

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_batching
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lax_linalg import PREFERRED_COMBOS, conv_problems, dot_problems, to_layout

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax

BATCH_SIZES = st.sampled_from([2, 3, 1])  # one lane is the odd case: draw it last


@st.composite
def maybe_batched(draw, dtype, lane_shape, size: int, batched: bool, position=None, **array_kwargs):
    """An operand whose lanes have `lane_shape`: if `batched`, `size` of them along axis
    `position` (drawn if None), with that axis as in_axis, negative half the time; else one lane,
    with in_axis None."""
    if not batched:
        return draw(fst.arrays(dtype, tuple(lane_shape), **array_kwargs)), None
    if position is None:
        position = draw(st.integers(0, len(lane_shape)))
    shape = (*lane_shape[:position], size, *lane_shape[position:])
    x = distinct_lanes(draw(fst.arrays(dtype, shape, **array_kwargs)), position)
    return x, draw(st.sampled_from([position, position - len(shape)]))


def distinct_lanes(x: np.ndarray, axis: int) -> np.ndarray:
    """`x` with lane i shifted by i (flipped for odd i, for bools): hypothesis likes to fill
    arrays with one value, and identical lanes would hide lanes mixed up by a rule."""
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    offsets = np.arange(x.shape[axis]).reshape(shape)
    if x.dtype == np.bool_:
        return x ^ (offsets % 2 == 1)
    return x + offsets.astype(x.dtype)  # integers wrap around


@st.composite
def which_batched(draw, count: int):
    """For each of `count` operands, whether it is batched; at least one is."""
    flags = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    if not any(flags):
        flags[draw(st.integers(0, count - 1))] = True
    return flags


def out_axis(ndim: int):
    """An out_axes entry for lane results of rank `ndim`, negative ones included."""
    return st.integers(-(ndim + 1), ndim)


def count_primitive(name: str, fun, *args) -> int:
    return sum(eqn.primitive.name == name for eqn in fg.make_jaxpr(fun)(*args).eqns)


# ---------------------------------------------------------------------------------------------
# dot_general


@st.composite
def batched_dot_problems(draw, problems=None):
    """A dot_general problem with operands stacked into lanes, in_axes and an out_axes."""
    lhs, rhs, dimension_numbers = draw(dot_problems() if problems is None else problems)
    size = draw(BATCH_SIZES)
    lhs_batched, rhs_batched = draw(which_batched(2))
    lhs, lhs_axis = draw(maybe_batched(lhs.dtype, lhs.shape, size, lhs_batched))
    rhs, rhs_axis = draw(maybe_batched(rhs.dtype, rhs.shape, size, rhs_batched))
    (lhs_contract, _), (lhs_batch, _) = dimension_numbers
    out_ndim = lhs.ndim + rhs.ndim - 2 * len(lhs_contract) - len(lhs_batch) - 1
    out_ndim -= lhs_axis is not None and rhs_axis is not None
    out_axes = draw(out_axis(out_ndim))
    return lhs, rhs, dimension_numbers, (lhs_axis, rhs_axis), out_axes


@given(batched_dot_problems())
def test_dot_general_batching(problem):
    lhs, rhs, dimension_numbers, in_axes, out_axes = problem
    check_batching(
        lambda x, y: lax.dot_general(x, y, dimension_numbers), (lhs, rhs), in_axes, out_axes
    )


@settings(max_examples=8)
@given(
    st.sampled_from(PREFERRED_COMBOS).flatmap(
        lambda c: st.tuples(
            st.just(c[2]), batched_dot_problems(dot_problems(st.just(c[0]), st.just(c[1])))
        )
    ),
    st.sampled_from([None, lax.Precision.HIGHEST]),
)
def test_dot_general_batching_keeps_preferred_type_and_precision(case, precision):
    preferred, (lhs, rhs, dimension_numbers, in_axes, out_axes) = case

    def f(x, y):
        return lax.dot_general(x, y, dimension_numbers, precision, preferred)

    check_batching(f, (lhs, rhs), in_axes, out_axes)
    eqns = fg.make_jaxpr(fg.vmap(f, in_axes, out_axes))(lhs, rhs).eqns
    (dot,) = [eqn for eqn in eqns if eqn.primitive.name == "dot_general"]
    assert dot.params["precision"] == precision
    assert dot.params["preferred_element_type"] == np.dtype(preferred)


def test_dot_general_with_one_batched_operand_does_not_broadcast_the_other():
    # The lanes of x become a free dimension of the lhs: one dot_general, and no broadcast.
    x = np.ones((5, 2, 3), np.float32)  # vmap over axis 1
    w = np.ones((3, 4), np.float32)
    jaxpr = fg.make_jaxpr(fg.vmap(lambda x: lax.dot(x, w), in_axes=1, out_axes=1))(x)
    assert [eqn.primitive.name for eqn in jaxpr.eqns] == ["dot_general"]
    assert jaxpr.out_avals[0].shape == (5, 2, 4)
    lhs = x[:, 0]
    jaxpr = fg.make_jaxpr(fg.vmap(lambda w: lax.dot(lhs, w), in_axes=2, out_axes=2))(
        np.ones((3, 4, 6), np.float32)
    )
    assert [eqn.primitive.name for eqn in jaxpr.eqns] == ["dot_general"]
    assert jaxpr.out_avals[0].shape == (5, 4, 6)


def test_nested_vmap_of_dot():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4))  # outer lanes on axis 0, inner on axis 1
    y = rng.standard_normal((4, 5, 3))  # outer lanes unmapped, inner on axis 2
    inner = fg.vmap(lambda a, b: lax.dot(a, b), in_axes=(0, 2), out_axes=1)
    out = fg.vmap(inner, in_axes=(0, None))(x, y)
    expected = np.einsum("oik,kji->oji", x, y)
    assert_close(out, expected, dtype=np.float64)
    assert count_primitive("dot_general", fg.vmap(inner, in_axes=(0, None)), x, y) == 1


def test_per_example_gradients_of_a_linear_model():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3))
    xs = rng.standard_normal((6, 4))

    def loss(w, x):
        return fnp.sum(fnp.tanh(lax.dot(x, w)) ** 2)

    per_example = fg.vmap(fg.grad(loss), in_axes=(None, 0))(w, xs)
    expected = np.stack([fg.grad(loss)(w, x) for x in xs])
    assert_close(per_example, expected, dtype=np.float64)


@st.composite
def matrix_operands(draw):
    """Operands of matmul/dot: a vector or a matrix each, each batched or not, and the einsum
    spec of their product."""
    sizes = {c: draw(st.integers(1, 3)) for c in "mkn"}
    lhs_spec = draw(st.sampled_from(["k", "mk"]))
    rhs_spec = draw(st.sampled_from(["k", "kn"]))
    size = draw(BATCH_SIZES)
    flags = draw(which_batched(2))
    lhs, lhs_axis = draw(maybe_batched(np.float32, [sizes[c] for c in lhs_spec], size, flags[0]))
    rhs, rhs_axis = draw(maybe_batched(np.float32, [sizes[c] for c in rhs_spec], size, flags[1]))
    out_spec = (lhs_spec + rhs_spec).replace("k", "")
    return (lhs, rhs), (lhs_axis, rhs_axis), f"{lhs_spec},{rhs_spec}->{out_spec}"


@given(matrix_operands())
def test_vmap_of_numpy_products(operands):
    args, in_axes, spec = operands
    check_batching(fnp.matmul, args, in_axes)
    check_batching(fnp.dot, args, in_axes)
    check_batching(lambda x, y: fnp.einsum(spec, x, y), args, in_axes)


# ---------------------------------------------------------------------------------------------
# conv_general_dilated


@st.composite
def batched_conv_problems(draw, flags: tuple[bool, bool]):
    """A convolution with its operands in their drawn layouts, stacked into lanes."""
    lhs, rhs, specs, params = draw(conv_problems())
    lhs, rhs = to_layout(lhs, specs.lhs_spec), to_layout(rhs, specs.rhs_spec)
    size = draw(BATCH_SIZES)
    lhs_batched, rhs_batched = flags
    lhs, lhs_axis = draw(
        maybe_batched(lhs.dtype, lhs.shape, size, lhs_batched, min_value=-9, max_value=9)
    )
    rhs, rhs_axis = draw(
        maybe_batched(rhs.dtype, rhs.shape, size, rhs_batched, min_value=-9, max_value=9)
    )
    out_axes = draw(out_axis(lhs.ndim - (lhs_axis is not None)))
    return lhs, rhs, specs, params, (lhs_axis, rhs_axis), out_axes


def conv_function(specs, params):
    def f(x, w):
        return lax.conv_general_dilated(x, w, dimension_numbers=specs, **params)

    return f


@pytest.mark.parametrize("flags", [(True, False), (False, True), (True, True)])
@given(data=st.data())
def test_conv_batching(flags, data):
    # One property per choice of batched operands: each takes its own path through the rule.
    lhs, rhs, specs, params, in_axes, out_axes = data.draw(batched_conv_problems(flags))
    check_batching(conv_function(specs, params), (lhs, rhs), in_axes, out_axes)


def test_batched_conv_is_one_convolution():
    x = np.ones((3, 2, 4, 6), np.float32)  # lanes on axis 0 of NCW inputs
    w = np.ones((3, 4, 1, 2), np.float32)  # lanes on axis 0 of OIW kernels

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1,), "SAME", feature_group_count=4)

    for in_axes in [(0, None), (None, 0), (0, 0)]:
        args = (x if in_axes[0] is not None else x[0], w if in_axes[1] is not None else w[0])
        assert count_primitive("conv_general_dilated", fg.vmap(conv, in_axes), *args) == 1


def test_vmap_of_a_conv_with_no_lanes():
    x = np.ones((0, 1, 2, 5), np.float32)
    w = np.ones((0, 3, 2, 2), np.float32)
    out = fg.vmap(lambda x, w: lax.conv(x, w, (1,), "VALID"))(x, w)
    assert out.shape == (0, 1, 3, 4) and out.dtype == np.float32


def test_nested_vmap_of_conv():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 1, 2, 5))  # (outer, inner, N, C, W)
    w = rng.standard_normal((3, 4, 2, 2))  # inner lanes of OIW kernels

    def conv(x, w):
        return lax.conv(x, w, (1,), "SAME")

    out = fg.vmap(fg.vmap(conv), in_axes=(0, None))(x, w)
    expected = np.stack([np.stack([conv(x[i, j], w[j]) for j in range(3)]) for i in range(2)])
    assert_close(out, expected, dtype=np.float64)


def test_per_example_gradients_of_a_convolution():
    # The kernel's cotangent is a convolution of batched inputs with batched output cotangents:
    # both operands batched, in the transposed roles.
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 2, 3))
    xs = rng.standard_normal((5, 1, 2, 7))  # five examples, each an NCW batch of one

    def loss(w, x):
        return fnp.sum(fnp.sin(lax.conv_general_dilated(x, w, (2,), "SAME", rhs_dilation=(2,))))

    per_example = fg.vmap(fg.grad(loss), in_axes=(None, 0))(w, xs)
    expected = np.stack([fg.grad(loss)(w, x) for x in xs])
    assert_close(per_example, expected, dtype=np.float64)
    input_grads = fg.vmap(fg.grad(loss, argnums=1), in_axes=(None, 0))(w, xs)
    assert_close(input_grads, np.stack([fg.grad(loss, argnums=1)(w, x) for x in xs]), np.float64)


# ---------------------------------------------------------------------------------------------
# threefry2x32


@st.composite
def batched_threefry_operands(draw):
    """Four uint32 words, each of the lane shape or rank 0, each batched or not; half the time
    lined up (batched words of the lane shape on one axis, the others rank 0), as the rule's
    shortcut expects."""
    lane_shape = draw(fst.shapes(max_dims=2, max_side=3))
    size = draw(BATCH_SIZES)
    flags = draw(which_batched(4))
    if draw(st.booleans()):
        position = draw(st.integers(0, len(lane_shape)))
        shapes = [lane_shape if batched else () for batched in flags]
    else:
        position = None
        shapes = [draw(st.sampled_from([(), lane_shape])) for _ in flags]
    operands, in_axes = zip(
        *[
            draw(maybe_batched(dtypes.uint32, shape, size, batched, position))
            for shape, batched in zip(shapes, flags)
        ]
    )
    return list(operands), list(in_axes), draw(out_axis(max(map(len, shapes))))


@given(batched_threefry_operands())
def test_threefry2x32_batching(case):
    operands, in_axes, out_axes = case
    check_batching(lambda *words: lax.threefry2x32(*words), operands, in_axes, out_axes)


def test_threefry2x32_batched_is_one_cipher_call():
    keys = np.arange(10, dtype=np.uint32).reshape(5, 2)
    counters = np.arange(6, dtype=np.uint32)

    def bits(key):
        return lax.threefry2x32(key[0], key[1], counters[:3], counters[3:])

    assert count_primitive("threefry2x32", fg.vmap(bits), keys) == 1


def test_random_functions_batch_over_keys():
    keys = fg.random.split(fg.random.PRNGKey(0), 5)
    for draw in [
        lambda k: fg.random.normal(k, (3,)),
        lambda k: fg.random.uniform(k, (2, 2)),
        lambda k: fg.random.split(k, 3),
    ]:
        out = fg.vmap(draw)(keys)
        np.testing.assert_array_equal(out, np.stack([draw(k) for k in keys]))


def test_nested_vmap_over_a_grid_of_keys():
    keys = fg.random.split(fg.random.PRNGKey(1), (2, 3))

    def draw(k):
        return fg.random.normal(k, (4,))

    # The outer vmap maps the grid's columns, the inner one its rows.
    out = fg.vmap(fg.vmap(draw), in_axes=1, out_axes=1)(keys)
    expected = [[draw(keys[i, j]) for j in range(3)] for i in range(2)]
    np.testing.assert_array_equal(out, np.asarray(expected))
