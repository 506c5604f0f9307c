"""dot_general and conv_general_dilated against independent definitions.

dot_general is checked against np.einsum computed in 64 bits (integers wrap to the result width
afterwards, which is exact since 2**64 is a multiple of every narrower modulus); convolution
against a direct loop over output positions, kernel offsets and features that locates each
input element by index arithmetic instead of padding and dilating arrays.
"""

import itertools
import math
import string

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_staging, tolerance
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import dtypes, lax
from funcgrad.lax import ConvDimensionNumbers, Precision

CONTRACTION_DTYPES = st.sampled_from(
    [
        dtypes.float32,
        dtypes.float64,
        dtypes.float16,
        dtypes.bfloat16,
        dtypes.int8,
        dtypes.int32,
        dtypes.int64,
        dtypes.uint8,
        dtypes.uint32,
        dtypes.bool_,
    ]
)


def wide(x: np.ndarray) -> np.ndarray:
    """`x` in the 64-bit type of its kind, where the reference computes."""
    if dtypes.is_float(x.dtype):
        return x.astype(np.float64)
    if dtypes.is_unsigned(x.dtype):
        return x.astype(np.uint64)
    return x.astype(np.int64)


def narrow(wide_result: np.ndarray, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == dtypes.bool_:
        return wide_result != 0
    return wide_result.astype(dtype)


def assert_contraction_close(actual, expected_wide, magnitude, dtype) -> None:
    """Exact for integers and bools; for floats within rounding of the summed magnitudes."""
    actual = np.asarray(actual)
    assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    expected = narrow(expected_wide, dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if not dtypes.is_float(dtype):
        np.testing.assert_array_equal(actual, expected)
        return
    error = np.abs(actual.astype(np.float64) - expected_wide)
    assert np.all(error <= tolerance(dtype)["rtol"] * (magnitude + 1)), error.max()


# ---------------------------------------------------------------------------------------------
# dot_general


@st.composite
def dot_problems(draw, lhs_dtype=CONTRACTION_DTYPES, rhs_dtype=None):
    """Operands and dimension numbers with batch, contracting and free dims in random places."""
    sizes = st.integers(0, 3)
    batch = draw(st.lists(sizes, max_size=2))
    contract = draw(st.lists(sizes, max_size=2))
    lhs_free = draw(st.lists(sizes, max_size=2))
    rhs_free = draw(st.lists(sizes, max_size=2))
    roles_lhs = [("b", i) for i in range(len(batch))] + [("c", i) for i in range(len(contract))]
    roles_rhs = list(roles_lhs)
    roles_lhs += [("f", i) for i in range(len(lhs_free))]
    roles_rhs += [("g", i) for i in range(len(rhs_free))]
    roles_lhs = draw(st.permutations(roles_lhs))
    roles_rhs = draw(st.permutations(roles_rhs))
    size_of = {"b": batch, "c": contract, "f": lhs_free, "g": rhs_free}
    lhs_shape = tuple(size_of[kind][i] for kind, i in roles_lhs)
    rhs_shape = tuple(size_of[kind][i] for kind, i in roles_rhs)
    lhs_dtype = draw(lhs_dtype)
    rhs_dtype = lhs_dtype if rhs_dtype is None else draw(rhs_dtype)
    lhs = draw(fst.arrays(lhs_dtype, lhs_shape))
    rhs = draw(fst.arrays(rhs_dtype, rhs_shape))

    def dims(roles, kind):
        return tuple(roles.index((kind, i)) for i in range(len(size_of[kind])))

    dimension_numbers = (
        (dims(roles_lhs, "c"), dims(roles_rhs, "c")),
        (dims(roles_lhs, "b"), dims(roles_rhs, "b")),
    )
    return lhs, rhs, dimension_numbers


def einsum_reference(lhs, rhs, dimension_numbers, transform=wide):
    """np.einsum with one letter per dimension: batch, then lhs free, then rhs free."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    letters = iter(string.ascii_letters)
    lhs_letters = [next(letters) for _ in range(lhs.ndim)]
    rhs_letters = [next(letters) for _ in range(rhs.ndim)]
    for lhs_dim, rhs_dim in zip(lhs_contract + lhs_batch, rhs_contract + rhs_batch):
        rhs_letters[rhs_dim] = lhs_letters[lhs_dim]
    used = set(lhs_contract + lhs_batch)
    out = [lhs_letters[d] for d in lhs_batch]
    out += [c for d, c in enumerate(lhs_letters) if d not in used]
    out += [c for d, c in enumerate(rhs_letters) if d not in set(rhs_contract + rhs_batch)]
    spec = f"{''.join(lhs_letters)},{''.join(rhs_letters)}->{''.join(out)}"
    return np.einsum(spec, transform(lhs), transform(rhs))


@given(dot_problems())
def test_dot_general_matches_einsum(problem):
    lhs, rhs, dimension_numbers = problem
    actual = lax.dot_general(lhs, rhs, dimension_numbers)
    expected = einsum_reference(lhs, rhs, dimension_numbers)
    magnitude = einsum_reference(lhs, rhs, dimension_numbers, lambda x: np.abs(wide(x)))
    assert_contraction_close(actual, expected, magnitude, lhs.dtype)
    check_staging(lambda x, y: lax.dot_general(x, y, dimension_numbers), lhs, rhs)


# Valid (lhs, rhs, preferred_element_type) combinations: widening, narrowing floats, mixing.
PREFERRED_COMBOS = [
    (dtypes.int8, dtypes.int8, dtypes.int32),
    (dtypes.int8, dtypes.int32, dtypes.int32),
    (dtypes.uint8, dtypes.int8, dtypes.int16),
    (dtypes.int8, dtypes.int8, dtypes.float32),
    (dtypes.bfloat16, dtypes.bfloat16, dtypes.float32),
    (dtypes.float16, dtypes.float32, dtypes.float32),
    (dtypes.float32, dtypes.float32, dtypes.bfloat16),
    (dtypes.float32, dtypes.float32, dtypes.float64),
    (dtypes.bool_, dtypes.bool_, dtypes.int32),
]


@given(
    st.sampled_from(PREFERRED_COMBOS).flatmap(
        lambda c: st.tuples(st.just(c), dot_problems(st.just(c[0]), st.just(c[1])))
    )
)
def test_dot_general_preferred_element_type(case):
    (_, _, preferred), (lhs, rhs, dimension_numbers) = case
    actual = lax.dot_general(lhs, rhs, dimension_numbers, preferred_element_type=preferred)

    def to_preferred(x):
        return wide(x.astype(preferred))

    expected = einsum_reference(lhs, rhs, dimension_numbers, to_preferred)
    magnitude = einsum_reference(lhs, rhs, dimension_numbers, lambda x: np.abs(to_preferred(x)))
    assert_contraction_close(actual, expected, magnitude, preferred)


def test_integer_dot_wraps_around_in_the_operand_type():
    x = np.array([100, 100, 100], np.int8)
    out = lax.dot(x, x)
    assert out.dtype == np.int8
    assert int(out) == np.int8(np.int64(30000).astype(np.int8))
    big = np.array([2**31 - 1, 2], np.int32)
    assert int(lax.dot(big, np.array([2, 1], np.int32))) == np.int64(2**32).astype(np.int32)
    assert int(lax.dot(x, x, preferred_element_type=np.int32)) == 30000


@pytest.mark.parametrize(
    "lhs_dtype, rhs_dtype, expected",
    [
        (np.int16, np.int8, np.int16),
        (np.bool_, np.uint8, np.uint8),
        (np.uint8, np.int8, np.int8),  # (signed wins a tie of widths)
        (np.float32, np.float16, np.float32),
        (np.float32, np.int32, np.float32),
        (dtypes.bfloat16, np.float32, np.float32),
        (np.float16, dtypes.bfloat16, dtypes.bfloat16),  # (the wider exponent)
        (np.complex64, np.float64, np.complex64),
        (np.float32, np.float64, np.float64),
    ],
)
def test_dot_of_mixed_dtypes_gives_the_higher_precision_one(lhs_dtype, rhs_dtype, expected):
    # They raised; JAX contracts them in the operand type of higher precision.
    lhs = np.arange(6).reshape(2, 3).astype(lhs_dtype)
    rhs = np.arange(6).reshape(3, 2).astype(rhs_dtype)
    out = lax.dot(lhs, rhs)
    assert out.dtype == np.dtype(expected)
    want = lhs.astype(np.float64) @ rhs.astype(np.float64)
    np.testing.assert_array_equal(np.asarray(out).astype(np.float64), want.astype(expected))
    assert fg.jit(lax.dot)(lhs, rhs).dtype == np.dtype(expected)


def test_bool_dot_is_or_of_ands():
    a = np.array([[True, False], [False, False]])
    b = np.array([[False, True], [True, True]])
    out = lax.dot(a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, [[False, True], [False, False]])


def test_half_precision_dot_accumulates_in_float32():
    # 4096 ones summed one by one in float16 stall at 2048; a float32 accumulator reaches 4096.
    ones = np.ones(4096, np.float16)
    assert float(lax.dot(ones, ones)) == 4096.0
    assert lax.dot(ones, ones).dtype == np.float16
    bf = ones.astype(dtypes.bfloat16)
    assert float(lax.dot(bf, bf, preferred_element_type=np.float32)) == 4096.0


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4))]
)
def test_dot_of_vectors_and_matrices(lhs_shape, rhs_shape):
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal(lhs_shape)
    rhs = rng.standard_normal(rhs_shape)
    assert_close(lax.dot(lhs, rhs), np.dot(lhs, rhs), dtype=np.float64)


@given(fst.shapes(min_dims=0, max_dims=2, max_side=3), st.integers(0, 3), st.integers(0, 3))
def test_batch_matmul_matches_numpy_matmul(batch, m, n):
    rng = np.random.default_rng(len(batch) + m + n)
    lhs = rng.standard_normal(batch + (m, 3)).astype(np.float32)
    rhs = rng.standard_normal(batch + (3, n)).astype(np.float32)
    assert_close(lax.batch_matmul(lhs, rhs), np.matmul(lhs, rhs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "precision",
    [None, Precision.HIGHEST, "highest", "default", (Precision.DEFAULT, Precision.HIGH)],
)
def test_precision_is_accepted_and_results_are_full_precision(precision):
    lhs = np.arange(6, dtype=np.float32).reshape(2, 3)
    rhs = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(lax.dot(lhs, rhs, precision=precision), lhs @ rhs)


def test_dot_general_errors_name_shapes_dims_and_dtypes():
    f32 = np.ones((2, 3), np.float32)
    with pytest.raises(
        TypeError, match=r"contracting dimension sizes must match.*\(2, 3\).*\(4, 5\)"
    ):
        lax.dot_general(f32, np.ones((4, 5), np.float32), (((1,), (0,)), ((), ())))
    with pytest.raises(TypeError, match=r"batch dimension sizes must match.*\(2, 3\).*\(3, 3\)"):
        lax.dot_general(f32, np.ones((3, 3), np.float32), (((1,), (1,)), ((0,), (0,))))
    with pytest.raises(TypeError, match=r"lhs contracting dimension 2 is out of range.*\(2, 3\)"):
        lax.dot_general(f32, f32, (((2,), (1,)), ((), ())))
    with pytest.raises(TypeError, match=r"at most once.*\(0,\).*\(0,\)"):
        lax.dot_general(f32, f32, (((0,), (0,)), ((0,), (0,))))
    with pytest.raises(TypeError, match="preferred_element_type int32.*float32"):
        lax.dot(f32, f32.T, preferred_element_type=np.int32)
    with pytest.raises(TypeError, match="preferred_element_type int8.*int32"):
        lax.dot(np.ones(3, np.int32), np.ones(3, np.int32), preferred_element_type=np.int8)
    with pytest.raises(TypeError, match=r"dot takes vectors and matrices.*\(1, 2, 3\)"):
        lax.dot(np.ones((1, 2, 3)), np.ones(3))
    with pytest.raises(ValueError, match=r"batch_matmul.*\(2, 3\).*\(1, 3, 2\)"):
        lax.batch_matmul(f32, np.ones((1, 3, 2), np.float32))
    with pytest.raises(TypeError, match="dimension_numbers must be"):
        lax.dot_general(f32, f32, ((1,), (1,)))
    with pytest.raises(TypeError, match="precision must be"):
        lax.dot(f32, f32.T, precision="fast")


def test_dot_general_staged_errors_match_eager_ones():
    with pytest.raises(TypeError, match=r"contracting dimension sizes must match.*\(2, 3\)"):
        fg.make_jaxpr(lambda x, y: lax.dot(x, y))(np.ones((2, 3)), np.ones((2, 3)))


def test_dot_general_output_layout_is_batch_then_lhs_then_rhs_free():
    lhs = np.zeros((5, 2, 7, 3), np.float32)  # batch 7, contract 3, free 5 and 2
    rhs = np.zeros((3, 4, 7), np.float32)  # contract 3, free 4, batch 7
    out = lax.dot_general(lhs, rhs, (((3,), (0,)), ((2,), (2,))))
    assert out.shape == (7, 5, 2, 4)


# ---------------------------------------------------------------------------------------------
# conv_general_dilated


def dilated(size: int, dilation: int) -> int:
    return 0 if size == 0 else 1 + dilation * (size - 1)


def conv_reference(lhs, rhs, strides, padding, lhs_dilation, rhs_dilation, groups, batch_groups):
    """Direct definition on (N, C, spatial...) and (O, I, spatial...) operands.

    Output element (n, o, p) sums lhs[n', c, q] * rhs[o, i, k] where the kernel offset k lands
    on position p * stride + k * rhs_dilation - pad_low of the dilated input, which holds
    lhs element q when that position is q * lhs_dilation.
    """
    batch, _ = lhs.shape[:2]
    out_features, in_features = rhs.shape[:2]
    out_spatial = []
    for size, k, s, (low, high), ld, rd in zip(
        lhs.shape[2:], rhs.shape[2:], strides, padding, lhs_dilation, rhs_dilation
    ):
        padded = dilated(size, ld) + low + high
        out_spatial.append(max(0, (padded - dilated(k, rd)) // s + 1))
    out_batch = batch // batch_groups
    out = np.zeros((out_batch, out_features, *out_spatial), np.float64)
    per_feature_group = out_features // groups
    per_batch_group = out_features // batch_groups
    for n_out, o in itertools.product(range(out_batch), range(out_features)):
        n = (o // per_batch_group) * out_batch + n_out
        first_feature = (o // per_feature_group) * in_features
        for p in itertools.product(*map(range, out_spatial)):
            total = 0.0
            for i in range(in_features):
                for k in itertools.product(*map(range, rhs.shape[2:])):
                    q = []
                    for pj, kj, s, (low, _), ld, rd, size in zip(
                        p, k, strides, padding, lhs_dilation, rhs_dilation, lhs.shape[2:]
                    ):
                        position = pj * s + kj * rd - low
                        if position % ld or not 0 <= position // ld < size:
                            break
                        q.append(position // ld)
                    else:
                        total += float(lhs[(n, first_feature + i, *q)]) * float(rhs[(o, i, *k)])
            out[(n_out, o, *p)] = total
    return out


@st.composite
def conv_problems(draw):
    """Small convolutions, 1-d or 2-d, with every parameter drawn."""
    spatial = draw(st.integers(1, 2))
    groups, batch_groups = draw(st.sampled_from([(1, 1), (2, 1), (3, 1), (1, 2), (1, 3)]))
    in_features = draw(st.integers(1, 2))
    out_features = max(groups, batch_groups) * draw(st.integers(1, 2))
    batch = batch_groups * draw(st.integers(1, 2))
    in_sizes = draw(st.lists(st.integers(1, 5), min_size=spatial, max_size=spatial))
    kernel = draw(st.lists(st.integers(1, 3), min_size=spatial, max_size=spatial))
    strides = draw(st.lists(st.integers(1, 2), min_size=spatial, max_size=spatial))
    lhs_dilation = draw(st.lists(st.integers(1, 2), min_size=spatial, max_size=spatial))
    rhs_dilation = draw(st.lists(st.integers(1, 2), min_size=spatial, max_size=spatial))
    padding = []
    for size, ld in zip(in_sizes, lhs_dilation):
        low = draw(st.integers(-1, 2))
        high = draw(st.integers(max(-1, -dilated(size, ld) - low), 2))
        padding.append((low, high))
    ndim = spatial + 2
    specs = ConvDimensionNumbers(*(tuple(draw(st.permutations(range(ndim)))) for _ in range(3)))
    dtype = draw(st.sampled_from([dtypes.float32, dtypes.float64, dtypes.int32]))
    lhs = draw(
        fst.arrays(dtype, (batch, groups * in_features, *in_sizes), min_value=-9, max_value=9)
    )
    rhs = draw(fst.arrays(dtype, (out_features, in_features, *kernel), min_value=-9, max_value=9))
    params = dict(
        window_strides=tuple(strides),
        padding=tuple(padding),
        lhs_dilation=tuple(lhs_dilation),
        rhs_dilation=tuple(rhs_dilation),
        feature_group_count=groups,
        batch_group_count=batch_groups,
    )
    return lhs, rhs, specs, params


def to_layout(canonical: np.ndarray, spec) -> np.ndarray:
    """The array whose `spec` dimensions, in order, are `canonical`'s dimensions."""
    return np.transpose(canonical, np.argsort(spec))


@given(conv_problems())
def test_conv_general_dilated_matches_direct_definition(problem):
    lhs, rhs, specs, params = problem
    out = lax.conv_general_dilated(
        to_layout(lhs, specs.lhs_spec),
        to_layout(rhs, specs.rhs_spec),
        dimension_numbers=specs,
        **params,
    )
    reference_params = [
        params[name]
        for name in (
            "window_strides",
            "padding",
            "lhs_dilation",
            "rhs_dilation",
            "feature_group_count",
            "batch_group_count",
        )
    ]
    expected = conv_reference(lhs, rhs, *reference_params)
    magnitude = conv_reference(np.abs(wide(lhs)), np.abs(wide(rhs)), *reference_params)
    assert_contraction_close(np.transpose(out, specs.out_spec), expected, magnitude, lhs.dtype)


def test_conv_general_dilated_staging():
    lhs = np.arange(2 * 4 * 5 * 3, dtype=np.float32).reshape(2, 5, 3, 4)
    rhs = np.ones((2, 2, 2, 6), np.float32)

    def f(x, w):
        return lax.conv_general_dilated(
            x, w, (2, 1), "SAME", (1, 2), (1, 1), ("NHWC", "HWIO", "NCHW"), feature_group_count=2
        )

    check_staging(f, lhs, rhs)


def test_one_dimensional_convolution_is_a_cross_correlation():
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]], np.float32)  # N=1, C=1, W=4
    np.testing.assert_array_equal(
        lax.conv(x, np.array([[[1.0, 1.0]]], np.float32), (1,), "VALID"), [[[3, 5, 7]]]
    )
    # No kernel flip: output[i] = x[i] - x[i + 2].
    kernel = np.array([[[1.0, 0.0, -1.0]]], np.float32)
    np.testing.assert_array_equal(lax.conv(x, kernel, (1,), "VALID"), [[[-2, -2]]])
    np.testing.assert_array_equal(lax.conv(x, kernel, (2,), "SAME"), [[[-2, 3]]])


def test_same_padding_box_filter():
    ones = np.ones((1, 1, 3, 3), np.float32)
    out = lax.conv(ones, ones, (1, 1), "SAME")
    np.testing.assert_array_equal(out[0, 0], [[4, 6, 4], [6, 9, 6], [4, 6, 4]])


def test_same_lower_puts_the_odd_padding_first():
    x = np.array([[[1.0, 2.0, 3.0]]], np.float32)
    kernel = np.array([[[1.0, 10.0]]], np.float32)
    same = lax.conv(x, kernel, (1,), "SAME")  # pads (0, 1)
    same_lower = lax.conv_general_dilated(x, kernel, (1,), "SAME_LOWER")  # pads (1, 0)
    np.testing.assert_array_equal(same, [[[21, 32, 3]]])
    np.testing.assert_array_equal(same_lower, [[[10, 21, 32]]])


def test_lhs_dilation_spreads_the_input():
    x = np.array([[[1.0, 2.0, 3.0]]], np.float32)
    out = lax.conv_with_general_padding(
        x, np.array([[[1.0, 1.0]]], np.float32), (1,), ((0, 0),), (2,), (1,)
    )
    np.testing.assert_array_equal(out, [[[1, 2, 2, 3]]])


def test_negative_padding_crops():
    x = np.array([[[1.0, 2.0, 3.0, 4.0, 5.0]]], np.float32)
    out = lax.conv(x, np.array([[[1.0]]], np.float32), (1,), ((-1, -2),))
    np.testing.assert_array_equal(out, [[[2, 3]]])


def test_three_dimensional_convolution():
    rng = np.random.default_rng(1)
    lhs = rng.standard_normal((1, 2, 4, 3, 3))
    rhs = rng.standard_normal((2, 2, 2, 2, 2))
    out = lax.conv_general_dilated(lhs, rhs, (1, 2, 1), ((1, 0), (0, 1), (1, 1)), None, (1, 1, 2))
    expected = conv_reference(
        lhs, rhs, (1, 2, 1), ((1, 0), (0, 1), (1, 1)), (1, 1, 1), (1, 1, 2), 1, 1
    )
    assert_close(out, expected, dtype=np.float64)


def test_layout_strings_match_the_canonical_layout():
    rng = np.random.default_rng(2)
    nchw = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    oihw = rng.standard_normal((6, 3, 3, 2)).astype(np.float32)
    expected = lax.conv(nchw, oihw, (1, 2), "SAME")
    out = lax.conv_general_dilated(
        nchw.transpose(0, 2, 3, 1),
        oihw.transpose(2, 3, 1, 0),
        (1, 2),
        "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    assert_close(np.transpose(out, (0, 3, 1, 2)), expected, rtol=1e-5, atol=1e-5)


def test_conv_dimension_numbers():
    assert lax.conv_dimension_numbers((1, 5, 5, 3), (3, 3, 3, 4), ("NHWC", "HWIO", "NHWC")) == (
        ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    )
    # Spatial dimensions follow the kernel's order of the letters.
    assert lax.conv_dimension_numbers((1, 2, 3, 4), (1, 2, 3, 4), ("NCHW", "OIWH", "NCHW")) == (
        ConvDimensionNumbers((0, 1, 3, 2), (0, 1, 2, 3), (0, 1, 3, 2))
    )
    assert lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3), None) == ((0, 1, 2),) * 3


@pytest.mark.parametrize(
    "lhs_dtype, rhs_dtype, preferred, expected_dtype",
    [
        (np.int8, np.int8, np.int32, np.int32),
        (dtypes.bfloat16, dtypes.bfloat16, None, dtypes.bfloat16),
        (dtypes.bfloat16, dtypes.bfloat16, np.float32, np.float32),
        (np.float16, np.float16, None, np.float16),
    ],
)
def test_conv_dtypes(lhs_dtype, rhs_dtype, preferred, expected_dtype):
    lhs = np.full((1, 2, 4, 4), 100).astype(lhs_dtype)
    rhs = np.full((1, 2, 3, 3), 1).astype(rhs_dtype)
    out = lax.conv(lhs, rhs, (1, 1), "VALID", preferred_element_type=preferred)
    assert out.dtype == np.dtype(expected_dtype)
    np.testing.assert_array_equal(np.asarray(out).astype(np.float64), np.full((1, 1, 2, 2), 1800))


def test_integer_conv_wraps_around():
    lhs = np.full((1, 1, 3), 100, np.int8)
    out = lax.conv(lhs, np.ones((1, 1, 3), np.int8), (1,), "VALID")
    assert out.dtype == np.int8 and int(out[0, 0, 0]) == np.int16(300).astype(np.int8)


def test_padding_and_dilation_holes_skip_non_finite_kernel_taps():
    # Padded and dilation-hole positions hold no input element, so an inf or nan kernel tap
    # over them contributes nothing rather than 0 * inf = nan; eager and jit agree on it.
    lhs = np.array([[[1.0, 2.0], [3.0, -1.0]]])
    rhs = np.repeat(np.array([[[np.inf, 1.0, np.nan]], [[2.0, -np.inf, 0.5]]]), 2, axis=1)
    params = dict(window_strides=(1,), padding=((2, 1),), lhs_dilation=(2,))
    expected = conv_reference(lhs, rhs, (1,), ((2, 1),), (2,), (1,), 1, 1)
    assert np.isfinite(expected).any() and np.isnan(expected).any()
    eager = lax.conv_general_dilated(lhs, rhs, **params)
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(
        fg.jit(lambda x, w: lax.conv_general_dilated(x, w, **params))(lhs, rhs), eager
    )


def test_zero_sized_convolutions():
    empty_batch = lax.conv(
        np.ones((0, 2, 4), np.float32), np.ones((3, 2, 2), np.float32), (1,), "VALID"
    )
    assert empty_batch.shape == (0, 3, 3)
    too_small = lax.conv(
        np.ones((1, 1, 2), np.float32), np.ones((1, 1, 3), np.float32), (1,), "VALID"
    )
    assert too_small.shape == (1, 1, 0)
    only_padding = lax.conv(
        np.ones((1, 1, 0), np.float32), np.ones((1, 1, 1), np.float32), (1,), ((2, 1),)
    )
    np.testing.assert_array_equal(only_padding, np.zeros((1, 1, 3)))


def test_conv_errors_name_shapes():
    x = np.ones((1, 4, 5, 5), np.float32)
    with pytest.raises(TypeError, match=r"lhs feature size \(4\).*\(1, 4, 5, 5\).*\(2, 3, 3, 3\)"):
        lax.conv(x, np.ones((2, 3, 3, 3), np.float32), (1, 1), "VALID")
    with pytest.raises(TypeError, match=r"multiple of feature_group_count.*\(3, 2, 3, 3\)"):
        lax.conv_general_dilated(
            x, np.ones((3, 2, 3, 3), np.float32), (1, 1), "VALID", feature_group_count=2
        )
    with pytest.raises(TypeError, match=r"batch size \(1\).*batch_group_count \(2\)"):
        lax.conv_general_dilated(
            x, np.ones((2, 4, 3, 3), np.float32), (1, 1), "VALID", batch_group_count=2
        )
    with pytest.raises(TypeError, match=r"same rank.*\(1, 4, 5, 5\).*\(2, 4, 3\)"):
        lax.conv(x, np.ones((2, 4, 3), np.float32), (1, 1), "VALID")
    with pytest.raises(TypeError, match=r"window_strides \(1,\) must have one entry"):
        lax.conv(x, np.ones((2, 4, 3, 3), np.float32), (1,), ((0, 0), (0, 0)))
    with pytest.raises(TypeError, match=r"negative padding \(-3, -3\).*\(1, 4, 5, 5\)"):
        lax.conv(x, np.ones((2, 4, 1, 1), np.float32), (1, 1), ((-3, -3), (0, 0)))
    with pytest.raises(TypeError, match="float32 and float64"):
        lax.conv(x, np.ones((2, 4, 3, 3)), (1, 1), "VALID")
    with pytest.raises(TypeError, match="layout 'NHW'"):
        lax.conv_general_dilated(
            x,
            np.ones((2, 4, 3, 3), np.float32),
            (1, 1),
            "VALID",
            dimension_numbers=("NHW", "OIHW", "NCHW"),
        )
    with pytest.raises(TypeError, match="same spatial dimension names"):
        lax.conv_general_dilated(
            x,
            np.ones((2, 4, 3, 3), np.float32),
            (1, 1),
            "VALID",
            dimension_numbers=("NCHW", "OIXY", "NCHW"),
        )
    with pytest.raises(TypeError, match=r"window_strides must be positive, got \(0, 1\)"):
        lax.conv(x, np.ones((2, 4, 3, 3), np.float32), (0, 1), "SAME")
    with pytest.raises(ValueError, match="padding"):
        lax.conv(x, np.ones((2, 4, 3, 3), np.float32), (1, 1), "FULL")


def test_conv_staged_errors():
    with pytest.raises(TypeError, match=r"lhs feature size \(4\)"):
        fg.make_jaxpr(lambda x, w: lax.conv(x, w, (1, 1), "VALID"))(
            np.ones((1, 4, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float32)
        )


def test_conv_of_an_image_batch():
    x = np.ones((8, 3, 32, 32), np.float32)
    w = np.ones((16, 3, 3, 3), np.float32)
    out = lax.conv(x, w, (1, 1), "SAME")
    assert out.shape == (8, 16, 32, 32)
    assert math.isclose(float(out[0, 0, 5, 5]), 27.0)


@pytest.mark.parametrize("groups, batch_groups", [(1, 1), (2, 1), (4, 1), (1, 2), (1, 4)])
def test_grouped_convolutions(groups, batch_groups):
    rng = np.random.default_rng(groups + 10 * batch_groups)
    lhs = rng.standard_normal((4, 4, 5, 3))
    rhs = rng.standard_normal((4, 4 // groups, 2, 2))
    out = lax.conv_general_dilated(
        lhs, rhs, (1, 1), "VALID", feature_group_count=groups, batch_group_count=batch_groups
    )
    expected = conv_reference(lhs, rhs, (1, 1), ((0, 0),) * 2, (1, 1), (1, 1), groups, batch_groups)
    assert_close(out, expected, dtype=np.float64)
