"""funcgrad.nn against float64 NumPy/SciPy definitions, including extreme values and dtypes."""

import math

import ml_dtypes
import numpy as np
import pytest
import scipy.special as sc
import strategies as fst
from checks import assert_close, check_staging, tolerance
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes

nn = fg.nn

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _gelu_tanh(x):
    # 0.5 x (1 + tanh(u)) written as x sigmoid(2u): the same function, without the cancellation
    # that makes the negative tail 0 even in float64.
    return x * sc.expit(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))


# name -> (funcgrad function, float64 reference)
ACTIVATIONS = {
    "relu": (nn.relu, lambda x: np.maximum(x, 0)),
    "relu6": (nn.relu6, lambda x: np.clip(x, 0, 6)),
    "hard_tanh": (nn.hard_tanh, lambda x: np.clip(x, -1, 1)),
    "hard_sigmoid": (nn.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "hard_silu": (nn.hard_silu, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hard_swish": (nn.hard_swish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "leaky_relu": (nn.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x)),
    "sigmoid": (nn.sigmoid, sc.expit),
    "softplus": (nn.softplus, lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)),
    "log_sigmoid": (nn.log_sigmoid, sc.log_expit),
    "soft_sign": (nn.soft_sign, lambda x: x / (1 + np.abs(x))),
    "silu": (nn.silu, lambda x: x * sc.expit(x)),
    "swish": (nn.swish, lambda x: x * sc.expit(x)),
    "gelu": (nn.gelu, _gelu_tanh),
    "gelu_exact": (lambda x: nn.gelu(x, approximate=False), lambda x: x * sc.ndtr(x)),
    "elu": (nn.elu, _elu),
    "elu_alpha": (lambda x: nn.elu(x, alpha=0.5), lambda x: _elu(x, 0.5)),
    "selu": (nn.selu, lambda x: SELU_SCALE * _elu(x, SELU_ALPHA)),
    "celu": (
        lambda x: nn.celu(x, alpha=2.0),
        lambda x: np.maximum(x, 0) + 2.0 * np.expm1(np.minimum(x, 0) / 2.0),
    ),
}


def _loose(dtype) -> dict:
    """Tolerance for a few chained roundings in `dtype` (each op rounds, unlike the reference)."""
    return {k: 4 * v for k, v in tolerance(dtype).items()}


@pytest.mark.parametrize("name", ACTIVATIONS)
@given(x=fst.arrays(fst.float_dtypes, fst.shapes(max_dims=3)))
def test_activation_matches_reference(name, x):
    fn, reference = ACTIVATIONS[name]
    assert_close(fn(x), reference(x.astype(np.float64)), x.dtype, **_loose(x.dtype))


@pytest.mark.parametrize("name", ["relu6", "gelu", "gelu_exact", "silu", "softplus", "elu"])
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_low_precision_stays_low_precision(name, dtype):
    fn, reference = ACTIVATIONS[name]
    x = np.linspace(-8, 8, 101).astype(dtype)
    out = fn(x)
    assert out.dtype == dtype
    tol = dict(rtol=2e-2, atol=5e-3) if dtype == dtypes.float16 else dict(rtol=8e-2, atol=3e-2)
    assert_close(out, reference(x.astype(np.float64)), **tol)


def test_python_scalar_constants_do_not_upcast():
    assert nn.relu6(np.float16([1.0, 7.0])).dtype == dtypes.float16
    assert nn.gelu(np.array([1.0], ml_dtypes.bfloat16)).dtype == dtypes.bfloat16
    assert nn.leaky_relu(np.float16([-1.0])).dtype == dtypes.float16
    assert nn.hard_tanh(np.float16([3.0])).dtype == dtypes.float16


def test_integer_inputs():
    ints = np.array([-7, 0, 3, 9], np.int32)
    assert nn.relu(ints).dtype == dtypes.int32
    np.testing.assert_array_equal(np.asarray(nn.relu6(ints)), [0, 0, 3, 6])
    for fn in (nn.sigmoid, nn.softplus, nn.gelu, nn.elu, nn.softmax, nn.relu6):
        assert fn(ints).dtype == dtypes.float32
    # x + 3 wrapped in int8 (127 -> -126): hard_sigmoid gave 0 for 1, hard_silu 0 for 127.
    small = np.array([127, -128, 2, -3], np.int8)
    want = np.float32([1.0, 0.0, 5 / 6, 0.0])
    np.testing.assert_array_equal(np.asarray(nn.hard_sigmoid(small)), want)
    np.testing.assert_array_equal(np.asarray(nn.hard_silu(small)), small * want)
    assert nn.hard_silu(np.int16(32767)) == 32767.0


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_softplus_and_log_sigmoid_tails(dtype):
    x = np.array([-100.0, 100.0], dtype)
    exact_tail = math.exp(-100.0)  # 3.7e-44: a float32 subnormal, so only atol applies there
    assert_close(nn.softplus(x), np.array([exact_tail, 100.0], dtype), rtol=1e-6, atol=1e-45)
    assert_close(nn.log_sigmoid(x), np.array([-100.0, -exact_tail], dtype), rtol=1e-6, atol=1e-45)
    assert np.isfinite(np.asarray(nn.sigmoid(x))).all()


def test_gelu_negative_tail_keeps_relative_precision():
    x = np.float32([-9.0, -12.0])
    assert_close(nn.gelu(x, approximate=False), x * sc.ndtr(x.astype(np.float64)), rtol=1e-5)
    # -1.3e-28 at -9; 0 at -12, whose value (-1.6e-61) float32 cannot hold.
    assert_close(nn.gelu(x), _gelu_tanh(x.astype(np.float64)).astype(np.float32), rtol=1e-4)


@given(
    x=fst.arrays(fst.float_dtypes, fst.shapes(min_dims=1, max_dims=2, min_side=2, max_side=4)),
    axis=st.integers(-1, 0),
)
def test_glu(x, axis):
    x = np.concatenate([x, x[::-1] * 0.5], axis=axis)  # an even size along `axis`
    a, b = np.split(x.astype(np.float64), 2, axis=axis)
    assert_close(nn.glu(x, axis=axis), a * sc.expit(b), x.dtype)


def test_glu_errors():
    with pytest.raises(ValueError, match=r"glu: axis -1 must have an even size.*\(2, 3\)"):
        nn.glu(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"glu: axis 2 is out of bounds.*\(2, 4\)"):
        nn.glu(np.ones((2, 4), np.float32), axis=2)


# ---------------------------------------------------------------------------------------------
# softmax, log_softmax, logsumexp


@st.composite
def array_and_axis(draw, dtype=fst.float_dtypes, min_side=1):
    x = draw(fst.arrays(dtype, fst.shapes(min_dims=1, max_dims=3, min_side=min_side)))
    axis = draw(st.one_of(st.integers(-x.ndim, x.ndim - 1), fst.axes(x.ndim, min_size=1)))
    return x, axis


@given(array_and_axis())
def test_softmax_and_log_softmax(x_axis):
    x, axis = x_axis
    x64 = x.astype(np.float64)
    assert_close(nn.softmax(x, axis=axis), sc.softmax(x64, axis=axis), x.dtype, **_loose(x.dtype))
    assert_close(
        nn.log_softmax(x, axis=axis), sc.log_softmax(x64, axis=axis), x.dtype, **_loose(x.dtype)
    )


@given(array_and_axis(), st.data())
def test_softmax_where(x_axis, data):
    x, axis = x_axis
    mask = data.draw(fst.arrays(dtypes.bool_, x.shape))
    x64 = np.where(mask, x.astype(np.float64), -np.inf)
    with np.errstate(invalid="ignore"):
        x_max = np.max(x64, axis=axis, keepdims=True)
        unnormalized = np.exp(x64 - x_max)
        expected = unnormalized / unnormalized.sum(axis=axis, keepdims=True)
        log_expected = x64 - x_max - np.log(unnormalized.sum(axis=axis, keepdims=True))
    assert_close(nn.softmax(x, axis, where=mask), np.where(mask, expected, 0), **_loose(x.dtype))
    assert_close(
        nn.log_softmax(x, axis, where=mask),
        np.where(mask, log_expected, -np.inf),
        **_loose(x.dtype),
    )


def test_softmax_extreme_values():
    big = np.float32([[1e30, 0.0, -1e30], [3e38, 3e38, 3e38]])
    assert_close(nn.softmax(big), [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], dtypes.float32)
    spread = np.float32([1e4, 0.0, -1e4])
    assert_close(nn.log_softmax(spread), [0.0, -1e4, -2e4], dtypes.float32)
    assert nn.softmax(np.float16([60000.0, 0.0])).dtype == dtypes.float16


def test_softmax_of_a_slice_with_an_infinite_logit_is_nan():
    """exp(x - max) / sum, as NumPy computes it, is nan throughout a slice whose max is inf
    (inf - inf), and so is the log; other slices keep their values, derivatives included."""
    inf = np.inf
    x = np.array([[inf, 1.0], [inf, -inf], [-inf, -inf], [0.5, -1.0]])
    with np.errstate(invalid="ignore"):
        shifted = x - x.max(axis=1, keepdims=True)
        expected = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        log_expected = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    for jit in (False, True):
        softmax, log_softmax = (fg.jit(f) if jit else f for f in (nn.softmax, nn.log_softmax))
        assert_close(softmax(x), expected)
        assert_close(log_softmax(x), log_expected)
    mask = np.array([[True, True], [True, False], [False, False], [True, True]])
    masked = [[np.nan, np.nan], [np.nan, 0.0], [0.0, 0.0], expected[3]]
    assert_close(nn.softmax(x, where=mask), masked)
    grad = fg.grad(lambda row: nn.log_softmax(row)[1])
    assert np.isnan(np.asarray(grad(x[0]))).all()
    assert_close(grad(x[3]), [-expected[3, 0], expected[3, 0]])


@given(
    array_and_axis(min_side=0),
    st.booleans(),
    st.data(),
)
def test_logsumexp(x_axis, keepdims, data):
    a, axis = x_axis
    axis = data.draw(st.one_of(st.none(), st.just(axis)))
    a64 = a.astype(np.float64)
    if a.size:
        expected = sc.logsumexp(a64, axis=axis, keepdims=keepdims)
    else:  # SciPy 1.17 fails on empty arrays; the empty sum is 0 and its log -inf
        expected = np.full(np.sum(a64, axis=axis, keepdims=keepdims).shape, -np.inf)
    assert_close(
        nn.logsumexp(a, axis=axis, keepdims=keepdims), expected, a.dtype, **_loose(a.dtype)
    )


@given(array_and_axis(), st.data())
def test_logsumexp_weights_and_sign(a_axis, data):
    a, axis = a_axis
    b = data.draw(fst.arrays(a.dtype, a.shape, min_value=-2, max_value=2))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out, sign = nn.logsumexp(a, axis=axis, b=b, return_sign=True)
    expected, expected_sign = sc.logsumexp(a64, axis=axis, b=b64, return_sign=True)
    # Where the weighted sum nearly cancels, its sign and log are not determined by a float
    # computation; compare only the well-conditioned entries.
    magnitude = sc.logsumexp(a64, axis=axis, b=np.abs(b64))
    with np.errstate(invalid="ignore"):
        well_conditioned = (expected - magnitude > -3) | np.isneginf(magnitude)
    tol = _loose(a.dtype)
    np.testing.assert_array_equal(
        np.asarray(sign)[well_conditioned], expected_sign[well_conditioned]
    )
    assert_close(np.asarray(out)[well_conditioned], expected[well_conditioned], **tol)
    plain = np.asarray(nn.logsumexp(a, axis=axis, b=b))
    assert np.isnan(plain[well_conditioned & (expected_sign < 0)]).all()


def test_logsumexp_extremes():
    assert float(nn.logsumexp(np.float32([-np.inf, -np.inf]))) == -np.inf
    assert float(nn.logsumexp(np.zeros((0,), np.float32))) == -np.inf
    assert float(nn.logsumexp(np.float32([np.inf, 1.0]))) == np.inf
    assert_close(nn.logsumexp(np.float32([1e4, 1e4])), np.float32(1e4 + math.log(2)))
    # A zero weight removes an infinite term instead of making 0 * inf = nan.
    assert_close(nn.logsumexp(np.float32([np.inf, 0.0]), b=np.float32([0.0, 2.0])), np.log(2.0))
    # So does it a nan term (a masked-out entry), in the value and the gradient; it made both
    # nan.
    a, b = np.float32([np.nan, 0.0, 1.0]), np.float32([0.0, 2.0, 1.0])
    assert_close(nn.logsumexp(a, b=b), np.float32(np.log(2 + np.e)))
    gradient = fg.grad(lambda a: nn.logsumexp(a, b=b))(a)
    assert_close(gradient, np.float32([0.0, 2, np.e]) / np.float32(2 + np.e))
    out, sign = nn.logsumexp(np.float32([1.0, 2.0]), b=np.float32([1.0, -1.0]), return_sign=True)
    assert_close(out, np.log(np.e**2 - np.e), rtol=1e-6)
    assert float(sign) == -1.0
    masked = nn.logsumexp(np.float32([[1.0, 50.0]]), axis=1, where=np.array([[True, False]]))
    assert_close(masked, np.float32([1.0]))


# ---------------------------------------------------------------------------------------------
# one_hot and standardize


@given(
    labels=fst.arrays(fst.signed_int_dtypes, fst.shapes(max_dims=2), min_value=-3, max_value=7),
    num_classes=st.integers(0, 5),
    data=st.data(),
)
def test_one_hot(labels, num_classes, data):
    axis = data.draw(st.integers(-labels.ndim - 1, labels.ndim))
    expected = np.zeros(labels.shape + (num_classes,), np.float32)
    for index in np.ndindex(labels.shape):
        if 0 <= labels[index] < num_classes:
            expected[index + (labels[index],)] = 1
    expected = np.moveaxis(expected, -1, axis)
    assert_close(nn.one_hot(labels, num_classes, axis=axis), expected, dtypes.float32)


def test_one_hot_out_of_range_and_dtype():
    out = nn.one_hot(np.array([-1, 3, 1, 300]), 3, dtype=fnp.int8)
    np.testing.assert_array_equal(np.asarray(out), [[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]])
    assert out.dtype == dtypes.int8
    # A uint8 label is compared after promotion, so class 256 is not mistaken for label 0.
    wide = np.asarray(nn.one_hot(np.array([0], np.uint8), 300))
    assert wide[0, 0] == 1 and wide[0, 256] == 0


def test_one_hot_errors():
    with pytest.raises(ValueError, match=r"one_hot: axis 3 is out of bounds.*\(2, 2\)"):
        nn.one_hot(np.zeros((2, 2), np.int32), 4, axis=3)
    with pytest.raises(TypeError):
        nn.one_hot(np.zeros((2,), np.int32), 2.5)


@given(array_and_axis(min_side=2), st.data())
def test_standardize(x_axis, data):
    x, axis = x_axis
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axis, keepdims=True)
    variance = x64.var(axis=axis, keepdims=True)
    scale = 1 / np.sqrt(variance + 1e-5)
    out = nn.standardize(x, axis=axis)
    assert out.dtype == x.dtype
    # Rounding x and its mean to x's dtype moves x - mean by about eps * max|x|, which the
    # division by the (possibly tiny) standard deviation amplifies.
    bound = _loose(x.dtype)["rtol"] * (1 + np.abs(x64).max()) * scale
    assert (np.abs(np.asarray(out, np.float64) - (x64 - mean) * scale) <= bound).all()
    given_stats = nn.standardize(x, axis, mean=mean.astype(x.dtype), variance=4.0, epsilon=0.0)
    assert_close(given_stats, (x64 - mean) / 2, x.dtype, **_loose(x.dtype))


def test_standardize_where():
    x = np.float32([[1.0, 2.0, 3.0, 100.0]])
    where = np.array([[True, True, True, False]])
    expected = (x - 2.0) / np.sqrt(2 / 3 + 1e-5)
    assert_close(nn.standardize(x, where=where), expected)


def test_standardize_algorithms_both_avoid_cancellation():
    """Around 1e4, float32's E[x^2] - E[x]^2 loses the variance of 1 to rounding; both
    algorithms give the deviations' own."""
    x = np.float32([[1e4 - 1, 1e4, 1e4 + 1]])
    expected = np.array([[-1.0, 0.0, 1.0]]) / np.sqrt(2 / 3 + 1e-5)
    for algorithm in ("fast", "stable"):
        assert_close(nn.standardize(x, algorithm=algorithm), expected)
    with pytest.raises(ValueError, match="algorithm must be 'fast' or 'stable'"):
        nn.standardize(x, algorithm="welford")


# ---------------------------------------------------------------------------------------------
# Staging


@pytest.mark.parametrize(
    "fn",
    [
        nn.gelu,
        nn.log_sigmoid,
        nn.hard_silu,
        lambda x: nn.softmax(x, axis=0),
        lambda x: nn.log_softmax(x, where=x > 0),
        lambda x: nn.logsumexp(x, axis=1, b=x, return_sign=True),
        nn.standardize,
        lambda x: nn.glu(x, axis=0),
        lambda x: nn.one_hot(x > 0, 3),
    ],
)
def test_stages_under_make_jaxpr(fn):
    check_staging(fn, np.linspace(-3, 3, 12, dtype=np.float32).reshape(4, 3))
    check_staging(fn, np.linspace(-3, 3, 12, dtype=np.float16).reshape(4, 3))
