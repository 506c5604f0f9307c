"""example_libraries.stax and .optimizers: every layer's init shape is its output's shape and
its values are NumPy's (loops for convolutions and pools); every optimizer follows its update
formula, written out here as a NumPy loop, eagerly and jitted with the step traced; schedules
follow their formulas; states survive pickling; a small network learns."""

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import random
from funcgrad.example_libraries import optimizers, stax

KEY = random.PRNGKey(0)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def check_layer(layer, x, expected, params=None, rtol=1e-5, atol=1e-5, **kwargs):
    """The layer's init shape and apply's output shape agree, and its output is `expected`
    (a function of the params init made, or given ones)."""
    init_fun, apply_fun = layer
    out_shape, init_params = init_fun(KEY, x.shape)
    params = init_params if params is None else params
    out = apply_fun(params, fnp.asarray(x), **kwargs)
    assert tuple(out_shape) == out.shape
    np.testing.assert_allclose(np.asarray(out), expected(params), rtol=rtol, atol=atol)
    return params


# ---------------------------------------------------------------------------------------------
# stax: layers with parameters


def test_dense_is_x_at_w_plus_b():
    x = rand(4, 3, 5)
    params = check_layer(stax.Dense(7), x, lambda p: x @ np.asarray(p[0]) + np.asarray(p[1]))
    W, b = params
    assert W.shape == (5, 7) and b.shape == (7,)


def test_dense_initializers_are_the_ones_given():
    layer = stax.Dense(3, W_init=stax.ones, b_init=stax.zeros)
    _, (W, b) = layer[0](KEY, (2, 4))
    np.testing.assert_array_equal(np.asarray(W), np.ones((4, 3)))
    np.testing.assert_array_equal(np.asarray(b), np.zeros(3))


def test_dense_default_weights_have_glorot_normal_scale():
    _, (W, b) = stax.Dense(400)[0](KEY, (1, 600))
    # Glorot normal: variance 2 / (fan_in + fan_out); the bias is normal with stddev 0.01.
    assert np.std(np.asarray(W)) == pytest.approx(math.sqrt(2 / 1000), rel=0.05)
    assert np.std(np.asarray(b)) == pytest.approx(0.01, rel=0.3)


def same_pads(size: int, window: int, stride: int) -> tuple[int, int]:
    """'SAME': ceil(size / stride) outputs, the odd padding element at the end."""
    total = max((-(-size // stride) - 1) * stride + window - size, 0)
    return total // 2, total - total // 2


def conv_nhwc_reference(x, W, strides, padding):
    """Cross-correlation by a loop over output positions: x NHWC, W HWIO."""
    (kh, kw), (sh, sw) = W.shape[:2], strides
    if padding == "SAME":
        pads = [same_pads(x.shape[1], kh, sh), same_pads(x.shape[2], kw, sw)]
    else:
        pads = [(0, 0), (0, 0)]
    x = np.pad(x, [(0, 0), *pads, (0, 0)])
    out_h, out_w = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], out_h, out_w, W.shape[3]), np.float64)
    for i in range(out_h):
        for j in range(out_w):
            window = x[:, i * sh : i * sh + kh, j * sw : j * sw + kw, :]
            out[:, i, j, :] = np.einsum("nhwi,hwio->no", window, W)
    return out


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
@pytest.mark.parametrize("strides", [None, (2, 1)])
def test_conv_against_a_loop(padding, strides):
    x = rand(2, 7, 6, 3)
    layer = stax.Conv(4, (3, 2), strides, padding)

    def expected(p):
        W, b = np.asarray(p[0]), np.asarray(p[1])
        return conv_nhwc_reference(x, W, strides or (1, 1), padding) + b

    W, b = check_layer(layer, x, expected)
    assert W.shape == (3, 2, 3, 4) and b.shape == (1, 1, 1, 4)


def test_general_conv_in_channels_first_layouts():
    x = rand(2, 3, 6, 5)
    layer = stax.GeneralConv(("NCHW", "OIHW", "NCHW"), 4, (2, 3), (1, 2), "SAME")

    def expected(p):
        W = np.asarray(p[0]).transpose(2, 3, 1, 0)  # OIHW to HWIO
        out = conv_nhwc_reference(x.transpose(0, 2, 3, 1), W, (1, 2), "SAME")
        return out.transpose(0, 3, 1, 2) + np.asarray(p[1])

    W, b = check_layer(layer, x, expected)
    assert W.shape == (4, 3, 2, 3) and b.shape == (1, 4, 1, 1)


def conv_transpose_reference(x, W, strides, padding):
    """Transposed convolution by scattering: input position i adds x[i] * W[k - 1 - m] at
    output i * s + m (the window flipped, as the input dilated by s and cross-correlated with
    W at full padding would give). 'VALID' keeps all of it (padded with zeros to n * s where
    the window is shorter than the stride); 'SAME' keeps n * s positions, dropping
    (k - s) // 2 at the start. x is N, spatial..., C; W spatial..., I, O."""
    spatial = x.shape[1:-1]
    window = W.shape[:-2]
    full_shape = [(n - 1) * s + k for n, s, k in zip(spatial, strides, window)]
    full = np.zeros((x.shape[0], *full_shape, W.shape[-1]))
    for i in np.ndindex(*spatial):
        for m in np.ndindex(*window):
            at = tuple(a * s + b for a, s, b in zip(i, strides, m))
            flipped = tuple(k - 1 - b for k, b in zip(window, m))
            full[(slice(None), *at)] += x[(slice(None), *i)] @ W[flipped]
    kept = []
    for n, s, k in zip(spatial, strides, window):
        start = (k - s) // 2 if padding == "SAME" else 0
        length = n * s if padding == "SAME" else max((n - 1) * s + k, n * s)
        kept.append((start, length))
    padded = np.pad(
        full, [(0, 0), *[(0, max(0, st + ln - f)) for (st, ln), f in zip(kept, full_shape)], (0, 0)]
    )
    return padded[(slice(None), *[slice(st, st + ln) for st, ln in kept])]


@pytest.mark.parametrize(
    "padding, strides, window",
    [
        ("VALID", (2, 2), (3, 3)),
        ("VALID", (3, 1), (2, 2)),
        ("SAME", (2, 2), (3, 3)),
        ("SAME", (2, 1), (4, 2)),
    ],
)
def test_conv_transpose_against_a_scatter(padding, strides, window):
    x = rand(2, 4, 3, 3)
    layer = stax.ConvTranspose(5, window, strides, padding)

    def expected(p):
        return conv_transpose_reference(x, np.asarray(p[0]), strides, padding) + np.asarray(p[1])

    W, b = check_layer(layer, x, expected)
    assert W.shape == (*window, 3, 5) and b.shape == (1, 1, 1, 5)


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_conv1d_transpose_against_a_scatter(padding):
    x = rand(3, 5, 2)
    layer = stax.Conv1DTranspose(4, (3,), (2,), padding)

    def expected(p):
        return conv_transpose_reference(x, np.asarray(p[0]), (2,), padding) + np.asarray(p[1])

    W, _ = check_layer(layer, x, expected)
    assert W.shape == (3, 2, 4)


def test_conv_whose_filter_shape_misses_the_layouts_dimensions_says_so():
    with pytest.raises(ValueError, match=r"filter_shape \(3,\) has 1 dimensions.*'HWIO' has 2"):
        stax.Conv(4, (3,))[0](KEY, (1, 5, 5, 2))


@pytest.mark.parametrize(
    "center, scale", [(True, True), (True, False), (False, True), (False, False)]
)
def test_batch_norm_standardizes_over_its_axes(center, scale):
    x = rand(5, 3, 4, 2) * 3 + 1
    init_fun, apply_fun = stax.BatchNorm(axis=(0, 1), center=center, scale=scale)
    out_shape, (beta, gamma) = init_fun(KEY, x.shape)
    assert out_shape == x.shape
    # Switched off parameters are empty; the others cover the axes not normalized, and start
    # at gamma = 1, beta = 0. Use others to see them broadcast.
    assert isinstance(beta, tuple) != center and isinstance(gamma, tuple) != scale
    if center:
        np.testing.assert_array_equal(np.asarray(beta), np.zeros((4, 2)))
    if scale:
        np.testing.assert_array_equal(np.asarray(gamma), np.ones((4, 2)))
    beta = fnp.asarray(rand(4, 2, seed=1)) if center else ()
    gamma = fnp.asarray(rand(4, 2, seed=2)) if scale else ()
    out = apply_fun((beta, gamma), fnp.asarray(x))
    z = (x - x.mean((0, 1))) / np.sqrt(x.var((0, 1)) + 1e-5)
    expected = (np.asarray(gamma) if scale else 1) * z + (np.asarray(beta) if center else 0)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-5)


def test_batch_norm_default_axes_and_an_int_axis():
    x = rand(4, 3, 3, 2)
    _, (beta, gamma) = stax.BatchNorm()[0](KEY, x.shape)
    assert beta.shape == gamma.shape == (2,)
    z = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3)
    check_layer(stax.BatchNorm(axis=0, epsilon=1e-3), x, lambda p: z, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# stax: elementwise layers


def softmax_reference(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
ELEMENTWISE = {
    "Tanh": np.tanh,
    "Relu": lambda x: np.maximum(x, 0),
    "Exp": np.exp,
    "LogSoftmax": lambda x: np.log(softmax_reference(x)),
    "Softmax": softmax_reference,
    "Softplus": lambda x: np.log1p(np.exp(x)),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "LeakyRelu": lambda x: np.where(x >= 0, x, 0.01 * x),
    "Selu": lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x)),
    "Gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "Identity": lambda x: x,
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_layers(name):
    x = rand(3, 4, 5) * 2
    params = check_layer(getattr(stax, name), x, lambda p: ELEMENTWISE[name](x), atol=1e-6)
    assert params == ()


def test_elementwise_passes_its_keyword_arguments():
    x = rand(3, 4)
    layer = stax.elementwise(stax.leaky_relu, negative_slope=0.5)
    check_layer(layer, x, lambda p: np.where(x >= 0, x, 0.5 * x))


def test_reexported_names_are_funcgrad_nns():
    assert stax.glorot is fg.nn.initializers.glorot_normal
    assert stax.randn is fg.nn.initializers.normal
    assert stax.logsoftmax is fg.nn.log_softmax
    for name in ["relu", "softmax", "softplus", "sigmoid", "elu", "leaky_relu", "selu", "gelu"]:
        assert getattr(stax, name) is getattr(fg.nn, name)
    assert stax.standardize is fg.nn.standardize


# ---------------------------------------------------------------------------------------------
# stax: pooling


def pool_reference(x, reduce, window, strides, padding, average=False):
    """Pool NHWC inputs by a loop over output positions; padded positions take no part (an
    average divides by the real inputs its window covers)."""
    pads = [
        same_pads(n, w, s) if padding == "SAME" else (0, 0)
        for n, w, s in zip(x.shape[1:3], window, strides)
    ]
    sizes = [
        (n + lo + hi - w) // s + 1 for n, (lo, hi), w, s in zip(x.shape[1:3], pads, window, strides)
    ]
    out = np.zeros((x.shape[0], *sizes, x.shape[3]))
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            h0, w0 = i * strides[0] - pads[0][0], j * strides[1] - pads[1][0]
            block = x[:, max(h0, 0) : h0 + window[0], max(w0, 0) : w0 + window[1], :]
            value = reduce(block, axis=(1, 2))
            out[:, i, j, :] = value / (block.shape[1] * block.shape[2]) if average else value
    return out


POOLS = {"MaxPool": (np.max, False), "SumPool": (np.sum, False), "AvgPool": (np.sum, True)}


@pytest.mark.parametrize("name", sorted(POOLS))
@given(
    size=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    window=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    strides=st.none() | st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.sampled_from(["VALID", "SAME"]),
)
def test_pools_against_a_loop(name, size, window, strides, padding):
    if padding == "VALID" and (size[0] < window[0] or size[1] < window[1]):
        window = (min(window[0], size[0]), min(window[1], size[1]))
    x = rand(2, *size, 3)
    reduce, average = POOLS[name]
    layer = getattr(stax, name)(window, strides, padding)
    expected = pool_reference(x, reduce, window, strides or (1, 1), padding, average)
    check_layer(layer, x, lambda p: expected)


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pools_with_a_spec_put_batch_and_channels_where_it_says(name):
    x = rand(2, 3, 5, 4)  # NCHW
    reduce, average = POOLS[name]
    layer = getattr(stax, name)((2, 3), (2, 1), "SAME", spec="NCHW")
    nhwc = pool_reference(x.transpose(0, 2, 3, 1), reduce, (2, 3), (2, 1), "SAME", average)
    check_layer(layer, x, lambda p: nhwc.transpose(0, 3, 1, 2))


def test_pool_of_inputs_of_the_wrong_rank_says_so():
    with pytest.raises(ValueError, match=r"2-d window takes inputs of 4 dimensions.*\(5, 5, 3\)"):
        stax.MaxPool((2, 2))[0](KEY, (5, 5, 3))


# ---------------------------------------------------------------------------------------------
# stax: reshaping, routing, dropout and combinators


def test_flatten_keeps_the_first_axis():
    x = rand(3, 2, 4, 5)
    check_layer(stax.Flatten, x, lambda p: x.reshape(3, 40))


def test_fan_out_parallel_fan_in():
    x = rand(4, 3)
    init_fun, apply_fun = stax.serial(
        stax.FanOut(3),
        stax.parallel(stax.Dense(5), stax.Dense(5), stax.Dense(2)),
    )
    shapes, params = init_fun(KEY, x.shape)
    assert list(shapes) == [(4, 5), (4, 5), (4, 2)]
    # parallel's init returns a pair of tuples, which can be read more than once.
    assert isinstance(stax.parallel(stax.Tanh, stax.Relu)[0](KEY, [(1,), (2,)]), tuple)
    outs = apply_fun(params, fnp.asarray(x))
    branch_params = params[1]
    for out, (W, b) in zip(outs, branch_params):
        np.testing.assert_allclose(np.asarray(out), x @ np.asarray(W) + np.asarray(b), rtol=1e-5)

    concat = stax.serial(
        stax.FanOut(2), stax.parallel(stax.Dense(5), stax.Dense(2)), stax.FanInConcat()
    )
    summed = stax.serial(stax.FanOut(2), stax.parallel(stax.Dense(5), stax.Identity), stax.FanInSum)
    for layer, join in [(concat, np.concatenate), (summed, None)]:
        out_shape, params = layer[0](KEY, (4, 5 if join is None else 3))
        inputs = rand(4, 5 if join is None else 3, seed=3)
        out = layer[1](params, fnp.asarray(inputs))
        assert out.shape == tuple(out_shape)
        (W, b), *rest = params[1]
        first = inputs @ np.asarray(W) + np.asarray(b)
        if join is None:
            expected = first + inputs
        else:
            W2, b2 = rest[0]
            expected = join([first, inputs @ np.asarray(W2) + np.asarray(b2)], -1)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)


def test_fan_in_concat_along_another_axis():
    xs = [rand(2, 3, 4), rand(2, 5, 4, seed=1)]
    init_fun, apply_fun = stax.FanInConcat(axis=1)
    out_shape, _ = init_fun(KEY, [x.shape for x in xs])
    out = apply_fun((), [fnp.asarray(x) for x in xs])
    assert out_shape == out.shape == (2, 8, 4)
    np.testing.assert_array_equal(np.asarray(out), np.concatenate(xs, 1))


def test_serial_composes_and_gives_one_params_entry_per_layer():
    x = rand(6, 4)
    init_fun, apply_fun = stax.serial(stax.Dense(8), stax.Tanh, stax.Dense(3), stax.LogSoftmax)
    out_shape, params = init_fun(KEY, (-1, 4))
    assert out_shape == (-1, 3) and len(params) == 4 and params[1] == () and params[3] == ()
    (W1, b1), _, (W2, b2), _ = [tuple(np.asarray(a) for a in p) for p in params]
    logits = np.tanh(x @ W1 + b1) @ W2 + b2
    expected = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(
        np.asarray(apply_fun(params, fnp.asarray(x))), expected, rtol=1e-5, atol=1e-6
    )


def test_serial_of_a_constructor_not_called_says_so():
    with pytest.raises(TypeError, match=r"layer 1 is not an \(init_fun, apply_fun\) pair.*call it"):
        stax.serial(stax.Dense(3), stax.Dense)


def test_shape_dependent_builds_its_layer_from_the_input_shape():
    layer = stax.shape_dependent(lambda shape: stax.Dense(shape[-1] * 2))
    x = rand(3, 4)
    check_layer(layer, x, lambda p: x @ np.asarray(p[0]) + np.asarray(p[1]))
    assert layer[0](KEY, (3, 4))[0] == (3, 8)


def test_dropout_keeps_with_probability_rate_and_rescales():
    x = rand(200, 50) + 3.0  # no zeros among the inputs
    init_fun, apply_fun = stax.Dropout(0.8)
    assert init_fun(KEY, x.shape) == (x.shape, ())
    key = random.PRNGKey(7)
    out = np.asarray(apply_fun((), fnp.asarray(x), rng=key))
    keep = np.asarray(random.bernoulli(key, 0.8, x.shape))
    np.testing.assert_allclose(out, np.where(keep, x / 0.8, 0), rtol=1e-6)
    assert keep.mean() == pytest.approx(0.8, abs=0.02)
    # Outside training it passes inputs through, though it still asks for a key.
    test_mode = stax.Dropout(0.8, mode="test")[1]
    np.testing.assert_array_equal(np.asarray(test_mode((), fnp.asarray(x), rng=key)), x)


def test_dropout_in_serial_draws_the_same_mask_under_jit():
    init_fun, apply_fun = stax.serial(stax.Dense(50), stax.Dropout(0.6), stax.Dense(4))
    _, params = init_fun(KEY, (3, 8))
    x = fnp.asarray(rand(3, 8))
    eager = apply_fun(params, x, rng=random.PRNGKey(5))
    jitted = fg.jit(apply_fun)(params, x, rng=random.PRNGKey(5))
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-5, atol=1e-6)
    other_key = apply_fun(params, x, rng=random.PRNGKey(6))
    assert not np.allclose(np.asarray(other_key), np.asarray(eager))


def test_dropout_without_a_key_names_the_cause():
    net = stax.serial(stax.Dense(3), stax.Dropout(0.5))
    _, params = net[0](KEY, (2, 4))
    with pytest.raises(ValueError, match=r"Dropout's apply_fun needs a PRNG key.*rng=key"):
        net[1](params, fnp.ones((2, 4)))
    out = net[1](params, fnp.ones((2, 4)), rng=random.PRNGKey(1))
    assert out.shape == (2, 3)


@pytest.mark.parametrize("rate", [0.0, 1.5, -0.1])
def test_dropout_rate_outside_its_range_names_it(rate):
    with pytest.raises(ValueError, match="probability of keeping"):
        stax.Dropout(rate)


@pytest.mark.parametrize(
    "layer, shape",
    [
        (stax.Dense(3), (-1, 4)),
        (stax.Conv(3, (3, 3), (2, 2), "SAME"), (-1, 6, 6, 2)),
        (stax.ConvTranspose(3, (3, 3), (2, 2)), (-1, 6, 6, 2)),
        (stax.Conv1DTranspose(3, (3,), (2,)), (-1, 6, 2)),
        (stax.MaxPool((2, 2), (2, 2)), (-1, 6, 6, 2)),
        (stax.AvgPool((2, 2), padding="SAME", spec="HWCN"), (6, 6, 2, -1)),
        (stax.BatchNorm(), (-1, 6, 6, 2)),
        (stax.Flatten, (-1, 6, 6, 2)),
    ],
)
def test_an_unknown_batch_size_stays_unknown(layer, shape):
    out_shape, _ = layer[0](KEY, shape)
    batch = shape.index(-1)
    assert out_shape[batch] == -1
    known = tuple(1 if n == -1 else n for n in shape)
    known_shape, _ = layer[0](KEY, known)
    assert tuple(out_shape[:batch]) + tuple(out_shape[batch + 1 :]) == tuple(
        known_shape[:batch]
    ) + tuple(known_shape[batch + 1 :])


def test_stax_network_under_jit_grad_and_vmap():
    init_fun, apply_fun = stax.serial(
        stax.Conv(4, (3, 3), padding="SAME"),
        stax.Relu,
        stax.AvgPool((2, 2), (2, 2)),
        stax.Flatten,
        stax.Dropout(0.9, mode="test"),
        stax.Dense(3),
        stax.LogSoftmax,
    )
    out_shape, params = init_fun(KEY, (-1, 6, 6, 2))
    x = fnp.asarray(rand(5, 6, 6, 2))
    assert out_shape == (-1, 3)
    eager = apply_fun(params, x, rng=KEY)
    np.testing.assert_allclose(
        np.asarray(fg.jit(apply_fun)(params, x, rng=KEY)), np.asarray(eager), rtol=1e-5, atol=1e-6
    )
    per_example = fg.vmap(lambda xi: apply_fun(params, xi[None], rng=KEY)[0])(x)
    np.testing.assert_allclose(np.asarray(per_example), np.asarray(eager), rtol=1e-5, atol=1e-6)

    def loss(p):
        return -apply_fun(p, x, rng=KEY)[:, 0].sum()

    grads = fg.grad(loss)(params)
    assert fg.tree_util.tree_structure(grads) == fg.tree_util.tree_structure(params)


# ---------------------------------------------------------------------------------------------
# optimizers: each against its update formula as a NumPy loop


def numpy_sgd(lr):
    def step(i, g, x, s):
        return x - lr * g, s

    return step


def numpy_momentum(lr, mass, nesterov=False):
    def step(i, g, x, s):
        v = mass * s.get("v", 0) + g
        return x - lr * ((mass * v + g) if nesterov else v), {"v": v}

    return step


def numpy_adagrad(lr, momentum=0.9):
    def step(i, g, x, s):
        G = s.get("G", 0) + g**2
        scaled = np.where(G > 0, g / np.sqrt(np.where(G > 0, G, 1)), 0)
        m = (1 - momentum) * scaled + momentum * s.get("m", 0)
        return x - lr * m, {"G": G, "m": m}

    return step


def numpy_rmsprop(lr, gamma=0.9, eps=1e-8):
    def step(i, g, x, s):
        a = gamma * s.get("a", 0) + (1 - gamma) * g**2
        return x - lr * g / np.sqrt(a + eps), {"a": a}

    return step


def numpy_rmsprop_momentum(lr, gamma=0.9, eps=1e-8, momentum=0.9):
    def step(i, g, x, s):
        a = gamma * s.get("a", 0) + (1 - gamma) * g**2
        v = momentum * s.get("v", 0) + lr * g / np.sqrt(a + eps)
        return x - v, {"a": a, "v": v}

    return step


def numpy_adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(i, g, x, s):
        m = b1 * s.get("m", 0) + (1 - b1) * g
        v = b2 * s.get("v", 0) + (1 - b2) * g**2
        m_hat, v_hat = m / (1 - b1 ** (i + 1)), v / (1 - b2 ** (i + 1))
        return x - lr * m_hat / (np.sqrt(v_hat) + eps), {"m": m, "v": v}

    return step


def numpy_adamax(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(i, g, x, s):
        m = b1 * s.get("m", 0) + (1 - b1) * g
        u = np.maximum(b2 * s.get("u", 0), np.abs(g))
        return x - lr / (1 - b1 ** (i + 1)) * m / (u + eps), {"m": m, "u": u}

    return step


def numpy_sm3(lr, momentum=0.9):
    """Accumulators: one vector per axis (a scalar is a vector of one); the accumulator of
    an entry is the least of its axes' entries plus g^2, and each vector then keeps the
    largest accumulator along its axis."""

    def step(i, g, x, s):
        shape = np.shape(x)
        g2 = np.atleast_1d(g)
        vectors = s.get("vectors", [np.zeros(n) for n in g2.shape])
        least = np.full(g2.shape, np.inf)
        for axis, vector in enumerate(vectors):
            least = np.minimum(
                least, np.expand_dims(vector, [a for a in range(g2.ndim) if a != axis])
            )
        accumulator = least + g2**2
        scaled = np.where(
            accumulator > 0, g2 / np.sqrt(np.where(accumulator > 0, accumulator, 1)), 0
        )
        m = (1 - momentum) * scaled + momentum * s.get("m", 0)
        vectors = [
            accumulator.max(axis=tuple(a for a in range(g2.ndim) if a != axis), initial=-np.inf)
            for axis in range(g2.ndim)
        ]
        return (np.atleast_1d(x) - lr * m).reshape(shape), {"m": m, "vectors": vectors}

    return step


OPTIMIZERS = {
    "sgd": ((0.1,), numpy_sgd(0.1)),
    "momentum": ((0.1, 0.9), numpy_momentum(0.1, 0.9)),
    "nesterov": ((0.1, 0.8), numpy_momentum(0.1, 0.8, nesterov=True)),
    "adagrad": ((0.1,), numpy_adagrad(0.1)),
    "adagrad(momentum=0.5)": ((0.1, 0.5), numpy_adagrad(0.1, 0.5)),
    "rmsprop": ((0.05, 0.8, 1e-6), numpy_rmsprop(0.05, 0.8, 1e-6)),
    "rmsprop_momentum": ((0.05,), numpy_rmsprop_momentum(0.05)),
    "adam": ((0.1,), numpy_adam(0.1)),
    "adam(b1=0.5, b2=0.9)": ((0.1, 0.5, 0.9), numpy_adam(0.1, 0.5, 0.9)),
    "adamax": ((0.1,), numpy_adamax(0.1)),
    "sm3": ((0.1,), numpy_sm3(0.1)),
}


def parameters_and_gradients(steps=5):
    """A tree of a matrix, a vector and a scalar, and `steps` gradients for it, some entries
    exactly zero (where adagrad's and sm3's accumulators stay 0)."""
    rng = np.random.default_rng(1)
    params = {"W": rng.normal(size=(3, 2)), "b": rng.normal(size=2), "scale": np.float64(0.5)}
    grads = []
    for _ in range(steps):
        g = {k: rng.normal(size=np.shape(v)) for k, v in params.items()}
        g["W"][0, 0] = 0.0
        grads.append(g)
    return params, grads


def to_funcgrad(tree):
    return fg.tree_util.tree_map(lambda v: fnp.asarray(np.float32(v)), tree)


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_follows_its_update_formula(name, jitted):
    args, numpy_step = OPTIMIZERS[name]
    init_fun, update_fun, get_params = getattr(optimizers, name.split("(")[0])(*args)
    if jitted:
        update_fun = fg.jit(update_fun)
    params, grads = parameters_and_gradients()
    opt_state = init_fun(to_funcgrad(params))
    expected = {k: np.asarray(v, np.float64) for k, v in params.items()}
    numpy_states = {k: {} for k in params}
    for i, g in enumerate(grads):
        opt_state = update_fun(i, to_funcgrad(g), opt_state)
        for k in params:
            expected[k], numpy_states[k] = numpy_step(i, g[k], expected[k], numpy_states[k])
        got = get_params(opt_state)
        for k in params:
            assert got[k].shape == np.shape(params[k])
            np.testing.assert_allclose(np.asarray(got[k]), expected[k], rtol=2e-5, atol=2e-6)


def test_jitted_update_traces_once_for_all_steps():
    traces = []

    def schedule(i):
        traces.append(i)
        return 0.1

    init_fun, update_fun, get_params = optimizers.adam(schedule)
    update_fun = fg.jit(update_fun)
    opt_state = init_fun(fnp.ones(3))
    for i in range(4):
        opt_state = update_fun(i, fnp.ones(3), opt_state)
    assert len(traces) == 1 and isinstance(traces[0], fg.core.Tracer)


def test_optimizer_state_is_a_pytree_of_its_arrays():
    init_fun, _, _ = optimizers.momentum(0.1, 0.9)
    opt_state = init_fun({"a": fnp.ones(2), "b": (fnp.zeros(3),)})
    leaves = fg.tree_util.tree_leaves(opt_state)
    assert [leaf.shape for leaf in leaves] == [(2,), (2,), (3,), (3,)]
    assert isinstance(opt_state, optimizers.OptimizerState)
    assert opt_state.packed_state[0][0].shape == (2,)


def test_a_state_unpacked_pickled_and_packed_continues_the_same():
    params, grads = parameters_and_gradients(6)
    for name in ["adam", "sm3", "momentum"]:
        init_fun, update_fun, get_params = getattr(optimizers, name)(
            0.1, *([0.9] if name == "momentum" else [])
        )
        uninterrupted = init_fun(to_funcgrad(params))
        for i, g in enumerate(grads):
            uninterrupted = update_fun(i, to_funcgrad(g), uninterrupted)
        opt_state = init_fun(to_funcgrad(params))
        for i, g in enumerate(grads[:3]):
            opt_state = update_fun(i, to_funcgrad(g), opt_state)
        marked = optimizers.unpack_optimizer_state(opt_state)
        assert all(
            isinstance(leaf, optimizers.JoinPoint) for leaf in fg.tree_util.tree_leaves(marked)
        )
        opt_state = optimizers.pack_optimizer_state(pickle.loads(pickle.dumps(marked)))
        for i, g in enumerate(grads[3:], start=3):
            opt_state = update_fun(i, to_funcgrad(g), opt_state)
        for a, b in zip(
            fg.tree_util.tree_leaves(opt_state), fg.tree_util.tree_leaves(uninterrupted)
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert fg.tree_util.tree_structure(opt_state) == fg.tree_util.tree_structure(uninterrupted)
        # The state itself pickles too (its tree structures do).
        loaded = pickle.loads(pickle.dumps(uninterrupted))
        assert fg.tree_util.tree_structure(loaded) == fg.tree_util.tree_structure(uninterrupted)
        for a, b in zip(fg.tree_util.tree_leaves(loaded), fg.tree_util.tree_leaves(uninterrupted)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_pack_of_a_tree_without_join_points_names_the_leaf():
    with pytest.raises(TypeError, match="leaves are all JoinPoints; got a leaf 3"):
        optimizers.pack_optimizer_state({"a": 3})


def test_update_with_gradients_of_another_structure_names_both():
    init_fun, update_fun, _ = optimizers.sgd(0.1)
    opt_state = init_fun({"a": fnp.ones(2), "b": fnp.ones(2)})
    with pytest.raises(TypeError, match=r"gradients of structure .*'a'.*initialized for .*'b'"):
        update_fun(0, {"a": fnp.ones(2)}, opt_state)


def test_the_optimizer_decorator_lifts_a_single_array_optimizer():
    @optimizers.optimizer
    def halving():
        def init(x0):
            return x0, fnp.zeros(())

        def update(i, g, state):
            x, count = state
            return x / 2 - g, count + 1

        return init, update, lambda state: state[0]

    init_fun, update_fun, get_params = halving()
    assert isinstance(halving(), optimizers.Optimizer) and halving.__name__ == "halving"
    opt_state = update_fun(
        0, [fnp.ones(2), fnp.ones(())], init_fun([fnp.full(2, 4.0), fnp.full((), 2.0)])
    )
    got = get_params(opt_state)
    np.testing.assert_array_equal(np.asarray(got[0]), [1.0, 1.0])
    assert float(got[1]) == 0.0

    @optimizers.optimizer
    def changing():
        return (lambda x0: (x0,)), (lambda i, g, state: (state[0], g)), (lambda state: state[0])

    init_fun, update_fun, _ = changing()
    with pytest.raises(
        TypeError, match="update returned a state of structure.*must keep its structure"
    ):
        update_fun(0, fnp.ones(2), init_fun(fnp.ones(2)))


def test_a_jitted_training_step_with_value_and_grad():
    init_fun, update_fun, get_params = optimizers.sgd(0.5)

    def loss(params):
        return fnp.sum((params["x"] - 3.0) ** 2)

    @fg.jit
    def step(i, opt_state):
        value, grads = fg.value_and_grad(loss)(get_params(opt_state))
        return value, update_fun(i, grads, opt_state)

    opt_state = init_fun({"x": fnp.zeros(2)})
    for i in range(3):
        _, opt_state = step(i, opt_state)
    # x <- x - 0.5 * 2 (x - 3) lands on 3 in one step.
    np.testing.assert_allclose(np.asarray(get_params(opt_state)["x"]), [3.0, 3.0])


# ---------------------------------------------------------------------------------------------
# Schedules


SCHEDULES = {
    "constant(0.3)": (optimizers.constant(0.3), lambda i: 0.3),
    "exponential_decay(0.1, 4, 0.5)": (
        optimizers.exponential_decay(0.1, 4, 0.5),
        lambda i: 0.1 * 0.5 ** (i / 4),
    ),
    "inverse_time_decay(0.1, 3, 2.0)": (
        optimizers.inverse_time_decay(0.1, 3, 2.0),
        lambda i: 0.1 / (1 + 2.0 * i / 3),
    ),
    "inverse_time_decay(staircase)": (
        optimizers.inverse_time_decay(0.1, 3, 2.0, staircase=True),
        lambda i: 0.1 / (1 + 2.0 * (i // 3)),
    ),
    "polynomial_decay(0.1, 5, 0.01, 2)": (
        optimizers.polynomial_decay(0.1, 5, 0.01, 2.0),
        lambda i: (0.1 - 0.01) * (1 - min(i, 5) / 5) ** 2 + 0.01,
    ),
    "piecewise_constant": (
        optimizers.piecewise_constant([2, 5], [1.0, 0.5, 0.1]),
        lambda i: 1.0 if i <= 2 else 0.5 if i <= 5 else 0.1,
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_follows_its_formula(name):
    schedule, formula = SCHEDULES[name]
    jitted = fg.jit(schedule)
    for i in range(9):
        assert float(schedule(i)) == pytest.approx(formula(i), rel=1e-6)
        assert float(jitted(i)) == pytest.approx(formula(i), rel=1e-6)


def test_sgd_takes_a_schedule():
    init_fun, update_fun, get_params = optimizers.sgd(
        optimizers.piecewise_constant([1], [1.0, 0.1])
    )
    opt_state = init_fun(fnp.zeros(()))
    steps = []
    for i in range(3):
        before = float(get_params(opt_state))
        opt_state = fg.jit(update_fun)(i, fnp.ones(()), opt_state)
        steps.append(before - float(get_params(opt_state)))
    np.testing.assert_allclose(steps, [1.0, 1.0, 0.1], rtol=1e-6)


def test_make_schedule():
    assert optimizers.make_schedule(0.25)(7) == 0.25
    schedule = optimizers.exponential_decay(1.0, 1, 0.5)
    assert optimizers.make_schedule(schedule) is schedule
    with pytest.raises(TypeError, match=r"scalar or a schedule.*shape \(3,\)"):
        optimizers.make_schedule(np.ones(3))


def test_piecewise_constant_with_mismatched_lengths_names_the_cause():
    with pytest.raises(
        ValueError, match="one value more than boundaries.*2 boundaries and 2 values"
    ):
        optimizers.piecewise_constant([1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"must be sequences \(1-d\)"):
        optimizers.piecewise_constant([[1, 2]], [1.0, 2.0, 3.0])


# ---------------------------------------------------------------------------------------------
# Utilities


def test_l2_norm_and_clip_grads():
    tree = {"a": rand(3, 2), "b": (rand(4, seed=1),)}
    norm = math.sqrt(sum(float(np.sum(v**2)) for v in [tree["a"], tree["b"][0]]))
    assert float(optimizers.l2_norm(to_funcgrad(tree))) == pytest.approx(norm, rel=1e-6)
    clipped = optimizers.clip_grads(to_funcgrad(tree), norm / 2)
    np.testing.assert_allclose(np.asarray(clipped["a"]), tree["a"] / 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["b"][0]), tree["b"][0] / 2, rtol=1e-6)
    kept = optimizers.clip_grads(to_funcgrad(tree), norm * 2)
    np.testing.assert_array_equal(np.asarray(kept["a"]), tree["a"])


# ---------------------------------------------------------------------------------------------
# End to end


def test_a_stax_mlp_trained_with_adam_fits_a_small_problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 2)).astype(np.float32)
    labels = (x[:, 0] * x[:, 1] > 0).astype(np.int32)  # XOR of the signs: not linearly separable
    targets = fnp.asarray(np.eye(2, dtype=np.float32)[labels])
    init_fun, apply_fun = stax.serial(
        stax.Dense(16), stax.Relu, stax.Dense(16), stax.Relu, stax.Dense(2), stax.LogSoftmax
    )
    _, params = init_fun(random.PRNGKey(3), (-1, 2))
    opt_init, opt_update, get_params = optimizers.adam(0.05)

    def loss(params):
        return -fnp.mean(fnp.sum(apply_fun(params, fnp.asarray(x)) * targets, axis=1))

    @fg.jit
    def step(i, opt_state):
        value, grads = fg.value_and_grad(loss)(get_params(opt_state))
        return value, opt_update(i, grads, opt_state)

    opt_state = opt_init(params)
    first, _ = step(0, opt_state)
    for i in range(150):
        value, opt_state = step(i, opt_state)
    assert float(value) < 0.3 * float(first)
    predictions = np.argmax(np.asarray(apply_fun(get_params(opt_state), fnp.asarray(x))), 1)
    assert np.mean(predictions == labels) > 0.9
