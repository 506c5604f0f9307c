"""funcgrad.nn layers, initializers, losses and filtering against NumPy definitions written
out here (explicit loops for convolutions and pooling, attention with its mask by hand)."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import nn, random
from funcgrad.test_util import check_grads

rng = np.random.default_rng(0)
KEY = random.PRNGKey(0)


def close(got, wanted, tol=2e-5):
    np.testing.assert_allclose(np.asarray(got), wanted, rtol=tol, atol=tol)


# -- reference implementations ------------------------------------------------------------------


def conv2d_reference(x, w, stride, pads, dilation, groups):
    """NHWC x, HWIO w (I = in / groups), explicit loops over output positions."""
    n, h, wd, c = x.shape
    kh, kw, cin_g, cout = w.shape
    x = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    eff_h, eff_w = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    out_h = (x.shape[1] - eff_h) // stride[0] + 1
    out_w = (x.shape[2] - eff_w) // stride[1] + 1
    out = np.zeros((n, out_h, out_w, cout))
    per_group = cout // groups
    for i in range(out_h):
        for j in range(out_w):
            patch = x[
                :,
                i * stride[0] : i * stride[0] + eff_h : dilation[0],
                j * stride[1] : j * stride[1] + eff_w : dilation[1],
            ]
            for g in range(groups):
                chans = patch[..., g * cin_g : (g + 1) * cin_g]
                outs = slice(g * per_group, (g + 1) * per_group)
                out[:, i, j, outs] = np.einsum("nhwc,hwco->no", chans, w[..., outs])
    return out


def same_pads(size, k, stride, dilation):
    eff = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return (total // 2, total - total // 2)


def attention_reference(q, k, v, causal):
    """(B, T, H, D) per head; softmax over keys; causal keeps j <= i."""
    logits = np.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    if causal:
        t, s = logits.shape[-2:]
        logits = np.where(np.tril(np.ones((t, s), bool)), logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", weights, v)


def floats(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- layers -------------------------------------------------------------------------------------


def test_linear_matches_numpy_on_any_leading_axes_and_names_a_bad_input():
    layer = nn.Linear(3, 4, key=KEY)
    x = floats(2, 5, 3)
    close(layer(x), x @ np.asarray(layer.weight) + np.asarray(layer.bias))
    assert nn.Linear(3, 4, use_bias=False, key=KEY).bias is None
    with pytest.raises(ValueError, match=r"Linear\(in_features=3\).*size 3.*\(2, 5\)"):
        layer(floats(2, 5))


@given(
    stride=st.sampled_from([1, 2, (2, 1)]),
    padding=st.sampled_from(["SAME", "VALID", 1, ((1, 0), (0, 2))]),
    dilation=st.sampled_from([1, (1, 2)]),
    groups=st.sampled_from([1, 2]),
    batched=st.booleans(),
)
def test_conv2d_matches_explicit_loops(stride, padding, dilation, groups, batched):
    conv = nn.Conv2d(
        4, 6, (3, 2), stride=stride, padding=padding, dilation=dilation, groups=groups, key=KEY
    )
    x = floats(2, 7, 6, 4)
    w, b = np.asarray(conv.weight), np.asarray(conv.bias)
    strides = conv.stride
    if padding == "SAME":
        pads = [same_pads(x.shape[1 + d], w.shape[d], strides[d], conv.dilation[d]) for d in (0, 1)]
    elif padding == "VALID":
        pads = [(0, 0), (0, 0)]
    else:
        pads = list(conv.padding)
    wanted = conv2d_reference(x, w, strides, pads, conv.dilation, groups) + b
    if batched:
        close(conv(x), wanted, 1e-4)
    else:
        close(conv(x[0]), wanted[0], 1e-4)


def test_conv_data_formats_and_conv1d_agree_with_the_default_layout():
    conv = nn.Conv2d(3, 5, 3, key=KEY)
    nchw = nn.tree_at(
        lambda m: m.weight, nn.Conv2d(3, 5, 3, data_format="NCHW", key=KEY), conv.weight
    )
    x = floats(2, 6, 6, 3)
    close(np.moveaxis(np.asarray(nchw(np.moveaxis(x, -1, 1))), 1, -1), np.asarray(conv(x)), 1e-4)
    conv1 = nn.Conv1d(3, 4, 3, stride=2, key=KEY)
    x1 = floats(2, 9, 3)
    wanted = conv2d_reference(
        x1[:, :, None],
        np.asarray(conv1.weight)[:, None],
        (2, 1),
        [same_pads(9, 3, 2, 1), (0, 0)],
        (1, 1),
        1,
    )[:, :, 0]
    close(conv1(x1), wanted + np.asarray(conv1.bias), 1e-4)
    with pytest.raises(ValueError, match=r"Conv2d\(in_channels=3.*expected 3 channels.*4"):
        conv(floats(2, 6, 6, 4))
    with pytest.raises(ValueError, match=r"Conv2d.*4 dimensions.*\(6, 6\)"):
        conv(floats(6, 6))


@pytest.mark.parametrize(
    ("padding", "size", "kernel", "stride"),
    [
        ("SAME", 8, 3, 2),
        ("VALID", 9, 3, 2),
        # Kernels smaller than the stride: the SAME transpose used to pad the wrong side
        # first, giving the right shape but values shifted by a row and a column.
        ("SAME", 8, 1, 2),
        ("SAME", 9, 2, 3),
        ("SAME", 8, 4, 2),
        ("VALID", 8, 2, 3),
    ],
)
def test_conv_transpose_is_the_adjoint_of_the_strided_convolution(padding, size, kernel, stride):
    """<conv(x), y> = <conv_transpose(y), x> when the transpose holds the same kernel with
    its channel axes swapped."""
    conv = nn.Conv2d(3, 5, kernel, stride=stride, padding=padding, use_bias=False, key=KEY)
    transpose = nn.tree_at(
        lambda m: m.weight,
        nn.ConvTranspose2d(5, 3, kernel, stride=stride, padding=padding, use_bias=False, key=KEY),
        fnp.swapaxes(conv.weight, 2, 3),
    )
    x = floats(2, size, size, 3)
    y_shape = np.asarray(conv(x)).shape
    y = floats(*y_shape)
    back = np.asarray(transpose(y))
    assert back.shape == x.shape
    close(np.vdot(np.asarray(conv(x)), y), np.vdot(back, x), 1e-3)


def test_embedding_picks_rows_and_rejects_float_ids():
    table = nn.Embedding(10, 4, key=KEY)
    ids = np.array([[1, 9], [0, 3]])
    close(table(ids), np.asarray(table.weight)[ids])
    with pytest.raises(TypeError, match="Embedding: ids must be integers, got float32"):
        table(np.ones(2, np.float32))


def test_layer_norm_and_rms_norm_match_numpy():
    x = floats(3, 4, 5)
    norm = nn.LayerNorm((4, 5))
    norm = nn.tree_at(lambda m: (m.weight, m.bias), norm, (floats(4, 5), floats(4, 5)))
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    wanted = (x - mean) / np.sqrt(var + 1e-5) * np.asarray(norm.weight) + np.asarray(norm.bias)
    close(norm(x), wanted, 1e-4)
    rms = nn.tree_at(lambda m: m.weight, nn.RMSNorm(5), floats(5))
    wanted = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * np.asarray(rms.weight)
    close(rms(x), wanted, 1e-4)
    with pytest.raises(ValueError, match=r"LayerNorm\(shape=\(4, 5\)\).*\(3, 5, 4\)"):
        norm(floats(3, 5, 4))


def test_norms_of_bfloat16_inputs_take_statistics_in_float32():
    """Rows of mean 1 and deviation 0.1: a bfloat16 mean rounds to 1.0 and shifted whole
    normalized rows (by up to 0.04); the result, in bfloat16, is within a unit in the last
    place (1/128 below 2) of the float64 normalization."""
    bf16 = np.dtype(fg.dtypes.bfloat16)
    x = (np.random.default_rng(3).standard_normal((4, 1024)) * 0.1 + 1).astype(bf16)
    wide = x.astype(np.float64)
    centred = wide - wide.mean(-1, keepdims=True)
    layer_norm = nn.LayerNorm(1024, dtype=bf16)(x)
    assert layer_norm.dtype == bf16
    expected = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(layer_norm).astype(np.float64), expected, atol=1 / 128)
    rms_norm = nn.RMSNorm(1024, dtype=bf16)(x)
    assert rms_norm.dtype == bf16
    expected = wide / np.sqrt((wide**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.asarray(rms_norm).astype(np.float64), expected, atol=1 / 128)
    # BatchNorm over the batch axis; in inference it returned float32 (the running
    # statistics' dtype) where training returned bfloat16.
    batch_norm = nn.BatchNorm(4, dtype=bf16)
    state = batch_norm.initial_state()
    trained, state = batch_norm(x.T, state, training=True)
    assert trained.dtype == bf16 and batch_norm(x.T, state, training=False)[0].dtype == bf16
    centred = wide.T - wide.T.mean(0)
    expected = centred / np.sqrt((centred**2).mean(0) + 1e-5)
    np.testing.assert_allclose(np.asarray(trained).astype(np.float64), expected, atol=1 / 128)


def test_batch_norm_uses_batch_statistics_in_training_and_running_ones_in_inference():
    bn = nn.BatchNorm(3, momentum=0.9)
    x = floats(8, 2, 3) * 2 + 1
    state = bn.initial_state()
    y, new_state = bn(x, state, training=True)
    mean, var = x.mean(axis=(0, 1)), x.var(axis=(0, 1))
    close(y, (x - mean) / np.sqrt(var + 1e-5), 1e-4)
    close(new_state["mean"], 0.9 * 0 + 0.1 * mean, 1e-5)
    close(new_state["var"], 0.9 * 1 + 0.1 * var * 16 / 15, 1e-5)
    y_eval, same = bn(x, new_state, training=False)
    wanted = (x - np.asarray(new_state["mean"])) / np.sqrt(np.asarray(new_state["var"]) + 1e-5)
    close(y_eval, wanted, 1e-4)
    assert same is new_state
    channels_first = nn.BatchNorm(3, axis=1)
    z, _ = channels_first(np.moveaxis(x, -1, 1), channels_first.initial_state(), training=True)
    close(np.moveaxis(np.asarray(z), 1, -1), np.asarray(y), 1e-4)
    with pytest.raises(ValueError, match=r"BatchNorm\(num_features=3.*\(8, 4\)"):
        bn(floats(8, 4), state, training=True)


def test_dropout_keeps_the_expectation_and_is_the_identity_at_inference():
    drop = nn.Dropout(0.25)
    x = np.ones((200, 200), np.float32)
    y = np.asarray(drop(x, key=KEY))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    close(y[kept], 1 / 0.75)
    assert abs(y.mean() - 1) < 0.02
    close(drop(x, inference=True), x)
    with pytest.raises(ValueError, match="Dropout: a PRNG key is needed"):
        drop(x)


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_matches_numpy(causal):
    mha = nn.MultiHeadAttention(2, 8, key=KEY)
    x = floats(3, 5, 8)

    def project(layer, v):
        return v @ np.asarray(layer.weight) + np.asarray(layer.bias)

    q, k, v = (
        project(p, x).reshape(3, 5, 2, 4) for p in (mha.query_proj, mha.key_proj, mha.value_proj)
    )
    heads = attention_reference(q, k, v, causal).reshape(3, 5, 8)
    close(mha(x, causal=causal), project(mha.output_proj, heads), 1e-4)
    # An explicit mask equal to the causal one gives the same result.
    if causal:
        close(mha(x, mask=np.tril(np.ones((5, 5), bool))), np.asarray(mha(x, causal=True)), 1e-5)
    memory = floats(3, 7, 8)
    q = project(mha.query_proj, x).reshape(3, 5, 2, 4)
    k, v = (project(p, memory).reshape(3, 7, 2, 4) for p in (mha.key_proj, mha.value_proj))
    cross = attention_reference(q, k, v, False).reshape(3, 5, 8)
    close(mha(x, memory), project(mha.output_proj, cross), 1e-4)
    with pytest.raises(
        ValueError, match=r"MultiHeadAttention\(num_heads=2, embed_dim=8\).*\(3, 5, 6\)"
    ):
        mha(floats(3, 5, 6))
    # Leading axes of the same size but another shape were flattened alike and paired the
    # wrong sequences: queries of batch (2, 3) attended to key_value of batch (3, 2).
    with pytest.raises(ValueError, match=r"same leading \(batch\) axes"):
        mha(floats(2, 3, 5, 8), floats(3, 2, 7, 8))


def test_pooling_matches_numpy_windows():
    x = floats(2, 6, 7, 3)
    got = np.asarray(nn.max_pool(x, (2, 3), strides=(2, 2)))
    wanted = np.array(
        [
            [
                [x[:, 2 * i : 2 * i + 2, 2 * j : 2 * j + 3].max(axis=(1, 2)) for j in range(3)]
                for i in range(3)
            ]
        ]
    )[0].transpose(2, 0, 1, 3)
    close(got, wanted)
    avg = np.asarray(nn.AvgPool2d((2, 2))(x[0]))
    close(avg, x[0, :6, :6].reshape(3, 2, 3, 2, 3).mean(axis=(1, 3)), 1e-5)
    padded = np.asarray(nn.avg_pool(x, (3, 3), strides=(1, 1), padding="SAME"))
    zero_padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    close(padded[:, 0, 0], zero_padded[:, :3, :3].sum(axis=(1, 2)) / 9, 1e-5)
    assert np.asarray(nn.MaxPool2d((2, 2))(x)).shape == (2, 3, 3, 3)


def test_sequential_and_mlp_compose_their_layers():
    key1, key2 = random.split(KEY)
    first, second = nn.Linear(3, 4, key=key1), nn.Linear(4, 2, key=key2)
    model = nn.Sequential([first, nn.relu, nn.Dropout(0.5), second])
    x = floats(5, 3)
    hidden = np.maximum(np.asarray(first(x)), 0)
    close(model(x, inference=True), np.asarray(second(hidden)), 1e-5)
    dropped = np.asarray(model(x, key=KEY))
    assert not np.allclose(dropped, np.asarray(model(x, inference=True)))
    mlp = nn.MLP(3, 2, 6, 2, activation=nn.tanh, key=KEY)
    h = x
    for layer in mlp.layers[:-1]:
        h = np.tanh(h @ np.asarray(layer.weight) + np.asarray(layer.bias))
    last = mlp.layers[-1]
    close(mlp(x), h @ np.asarray(last.weight) + np.asarray(last.bias), 1e-5)
    assert [layer.weight.shape for layer in mlp.layers] == [(3, 6), (6, 6), (6, 2)]


# -- modules as pytrees -------------------------------------------------------------------------


def small_cnn(key):
    k1, k2 = random.split(key)
    return nn.Sequential(
        [
            nn.Conv2d(1, 4, 3, key=k1),
            nn.relu,
            nn.MaxPool2d((2, 2)),
            lambda h: h.reshape(*h.shape[:-3], -1),
            nn.Linear(4 * 3 * 3, 2, key=k2),
        ]
    )


def test_modules_go_through_jit_vmap_and_grad():
    model = small_cnn(KEY)
    x = floats(4, 6, 6, 1)
    close(fg.jit(lambda m, v: m(v))(model, x), np.asarray(model(x)), 1e-5)
    one_by_one = np.stack([np.asarray(model(v)) for v in x])
    close(fg.vmap(lambda m, v: m(v), in_axes=(None, 0))(model, x), one_by_one, 1e-5)
    grads = fg.grad(lambda m: (m(x) ** 2).sum())(model)
    assert type(grads) is nn.Sequential
    assert grads.layers[0].weight.shape == model.layers[0].weight.shape
    mlp = nn.MLP(2, 1, 3, 1, activation=nn.tanh, key=KEY)
    check_grads(lambda m: mlp_output(m, x[:, 0, :2, 0]), (mlp,), order=1, modes=("rev",))


def mlp_output(m, x):
    return m(x).sum()


def test_modules_are_frozen_and_print_shapes():
    layer = nn.Linear(3, 4, key=KEY)
    with pytest.raises(dataclasses.FrozenInstanceError, match="Linear is immutable.*tree_at"):
        layer.weight = fnp.zeros((3, 4))
    assert (
        repr(layer)
        == "Linear(weight=float32[3, 4], bias=float32[4], in_features=3, out_features=4)"
    )
    assert "activation=relu" in repr(nn.MLP(2, 1, 3, 1, key=KEY))


def test_partition_freezes_leaves_and_gradients_reach_only_the_trainable_part():
    model = nn.MLP(3, 2, 4, 1, key=KEY)
    x = floats(5, 3)
    # Freeze the first layer: a filter tree over the model's structure.
    spec = nn.tree_at(
        lambda m: m.layers, fg.tree_util.tree_map(lambda _: True, model), [False, True]
    )
    trainable, frozen = nn.partition(model, spec)
    assert trainable.layers[0].weight is None and frozen.layers[0].weight is not None
    assert trainable.layers[1].weight is not None and frozen.layers[1].weight is None

    def loss(train):
        return (nn.combine(train, frozen)(x) ** 2).sum()

    grads = fg.grad(loss)(trainable)
    assert grads.layers[0].weight is None and grads.layers[0].bias is None
    full = fg.grad(lambda m: (m(x) ** 2).sum())(model)
    close(grads.layers[1].weight, np.asarray(full.layers[1].weight), 1e-5)
    merged = nn.combine(trainable, frozen)
    assert all(
        a is b for a, b in zip(fg.tree_util.tree_leaves(merged), fg.tree_util.tree_leaves(model))
    )
    floats_only, rest = nn.partition({"w": fnp.ones(2), "step": fnp.array(3)}, nn.is_inexact_array)
    assert floats_only["step"] is None and rest["w"] is None
    for bad in ("trainable", {"w": "yes", "step": True}):  # a leaf that is not a bool
        with pytest.raises(TypeError, match="a filter is a bool, a predicate, or a tree"):
            nn.partition({"w": fnp.ones(2), "step": fnp.array(3)}, bad)


def test_tree_at_replaces_one_node_or_several():
    model = nn.MLP(3, 2, 4, 1, key=KEY)
    replaced = nn.tree_at(lambda m: m.layers[1].bias, model, fnp.ones(2))
    close(replaced.layers[1].bias, np.ones(2))
    assert replaced.layers[0].weight is model.layers[0].weight
    both = nn.tree_at(
        lambda m: (m.layers[0].bias, m.layers[1].bias), model, (fnp.ones(4), fnp.zeros(2))
    )
    close(both.layers[0].bias, np.ones(4))
    swapped = nn.tree_at(lambda m: m.layers[0], model, nn.Linear(3, 4, use_bias=False, key=KEY))
    assert swapped.layers[0].bias is None
    # A list of nodes is a container of `where`'s own, not a node of the tree: it returned
    # the model unchanged.
    with pytest.raises(ValueError, match="not a node of the tree"):
        nn.tree_at(lambda m: [m.layers[0].bias], model, [fnp.ones(4)])


# -- initializers and losses --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "variance"),
    [
        ("glorot_normal", 2 / (300 + 200)),
        ("glorot_uniform", 2 / (300 + 200)),
        ("he_normal", 2 / 300),
        ("he_uniform", 2 / 300),
        ("lecun_normal", 1 / 300),
        ("lecun_uniform", 1 / 300),
        ("xavier_uniform", 2 / (300 + 200)),
        ("kaiming_normal", 2 / 300),
    ],
)
def test_variance_scaling_initializers_have_their_variance(name, variance):
    sample = np.asarray(getattr(nn.initializers, name)()(KEY, (300, 200)))
    assert sample.dtype == np.float32
    assert abs(sample.mean()) < 0.05 * math.sqrt(variance)
    assert abs(sample.var() / variance - 1) < 0.03
    if "uniform" in name:
        assert np.abs(sample).max() <= math.sqrt(3 * variance) + 1e-6
    else:
        assert np.abs(sample).max() <= 2 * math.sqrt(variance) / 0.8796 + 1e-6


@pytest.mark.parametrize(
    ("mode", "fan"), [("fan_in", 20), ("fan_out", 6), ("fan_geo_avg", math.sqrt(120))]
)
def test_variance_scaling_with_several_axes_a_batch_axis_and_the_geometric_mean(mode, fan):
    # JAX's signature: in_axis and out_axis may name several axes, batch_axis leaves the
    # receptive field; these raised (and fan_geo_avg was refused).
    init = nn.initializers.variance_scaling(
        1.0, mode, "uniform", in_axis=(0, 1), out_axis=2, batch_axis=3
    )
    sample = np.asarray(init(KEY, (4, 5, 6, 300)))
    limit = math.sqrt(3 / fan)
    assert np.abs(sample).max() <= limit * (1 + 1e-6)
    assert np.abs(sample).max() > 0.99 * limit
    assert abs(sample.var() / (1 / fan) - 1) < 0.05
    kernel = np.asarray(nn.initializers.lecun_normal(batch_axis=0)(KEY, (50, 3, 40, 60)))
    assert abs(kernel.var() / (1 / (3 * 40)) - 1) < 0.05


def test_conv_kernel_fans_include_the_window_and_simple_initializers():
    kernel = np.asarray(nn.initializers.he_normal()(KEY, (3, 3, 40, 60)))
    assert abs(kernel.var() / (2 / (9 * 40)) - 1) < 0.05
    close(nn.initializers.zeros(KEY, (2, 3)), np.zeros((2, 3)))
    close(nn.initializers.ones(KEY, (2,)), np.ones(2))
    close(nn.initializers.constant(0.5)(KEY, (3,)), np.full(3, 0.5))
    assert abs(np.asarray(nn.initializers.normal(0.1)(KEY, (400, 400))).std() - 0.1) < 0.002
    u = np.asarray(nn.initializers.uniform(0.3)(KEY, (10000,)))
    assert u.min() >= 0 and u.max() < 0.3


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (3, 3, 2, 5)])
def test_orthogonal_initializer_is_orthogonal(shape):
    w = np.asarray(nn.initializers.orthogonal(scale=2.0)(KEY, shape)).reshape(-1, shape[-1])
    small = min(w.shape)
    gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
    close(gram, 4 * np.eye(small), 1e-4)


def test_losses_match_their_definitions():
    logits = floats(4, 5)
    labels = rng.integers(0, 5, 4)
    one_hot = np.eye(5)[labels].astype(np.float32)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    close(nn.losses.softmax_cross_entropy(logits, one_hot), -(one_hot * log_probs).sum(-1), 1e-5)
    close(
        nn.losses.softmax_cross_entropy_with_integer_labels(logits, labels),
        -log_probs[np.arange(4), labels],
        1e-5,
    )
    target = floats(4, 5)
    close(nn.losses.squared_error(logits, target), (logits - target) ** 2)
    close(nn.losses.l2_loss(logits, target), 0.5 * (logits - target) ** 2)
    close(nn.losses.mse(logits, target), ((logits - target) ** 2).mean(-1))
    z = np.array([-100.0, -1.0, 0.0, 2.0, 100.0], np.float32)
    y = np.array([0.0, 1.0, 0.5, 0.0, 1.0], np.float32)
    p = 1 / (1 + np.exp(-z.astype(np.float64)))
    with np.errstate(divide="ignore", invalid="ignore"):
        wanted = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    wanted[0], wanted[-1] = 0.0, 0.0  # log(0) times 0 labels: the limits
    close(nn.losses.sigmoid_binary_cross_entropy(z, y), wanted, 1e-5)
    with pytest.raises(ValueError, match=r"labels must have shape \(4,\) \(the logits' without"):
        nn.losses.softmax_cross_entropy_with_integer_labels(logits, labels[:3])
