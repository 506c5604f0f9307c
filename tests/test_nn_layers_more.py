"""funcgrad.nn's 3-d and transposed convolutions, 1-d/3-d pooling, group norms and recurrent
cells against NumPy definitions written out here: convolutions as loops over output
positions, the transposed one as the scatter of each input position through the kernel,
pooling as loops over windows, group statistics per example and group, and each cell's step
equations with its gates sliced out by hand."""

import itertools

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import nn, optim, random
from funcgrad.test_util import check_grads

rng = np.random.default_rng(0)
KEY = random.PRNGKey(0)


def close(got, wanted, tol=2e-5):
    np.testing.assert_allclose(np.asarray(got), wanted, rtol=tol, atol=tol)


def floats(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def with_param(module, name, value):
    return nn.tree_at(lambda m: getattr(m, name), module, fnp.asarray(value))


# -- reference implementations ------------------------------------------------------------------


def conv_reference(x, w, stride, pads, dilation, groups=1):
    """(N, *spatial, C) x, (*window, C / groups, O) w, by a loop over output positions."""
    n = w.ndim - 2
    x = np.pad(x, ((0, 0), *pads, (0, 0)))
    window = [(k - 1) * d + 1 for k, d in zip(w.shape[:n], dilation)]
    out_shape = [(x.shape[1 + a] - window[a]) // stride[a] + 1 for a in range(n)]
    cin_g, cout = w.shape[-2:]
    per_group = cout // groups
    out = np.zeros((x.shape[0], *out_shape, cout))
    for position in itertools.product(*map(range, out_shape)):
        patch = x[
            (slice(None),)
            + tuple(
                slice(p * s, p * s + e, d) for p, s, e, d in zip(position, stride, window, dilation)
            )
        ]
        for g in range(groups):
            outs = slice(g * per_group, (g + 1) * per_group)
            chans = patch[..., g * cin_g : (g + 1) * cin_g]
            out[(slice(None), *position, outs)] = np.tensordot(
                chans, w[..., outs], axes=(list(range(1, n + 2)), list(range(n + 1)))
            )
    return out


def conv_transpose_reference(x, w, stride, crop, output_padding):
    """Each input position scattered through the kernel, x[i] @ w[k] landing at i * s + k,
    then `crop` (lo, hi) positions removed from each end and `output_padding` zeros added."""
    n = w.ndim - 2
    full_shape = [(size - 1) * s + k for size, s, k in zip(x.shape[1:-1], stride, w.shape[:n])]
    full = np.zeros((x.shape[0], *full_shape, w.shape[-1]))
    for position in itertools.product(*map(range, x.shape[1:-1])):
        for tap in itertools.product(*map(range, w.shape[:n])):
            target = tuple(p * s + k for p, s, k in zip(position, stride, tap))
            full[(slice(None), *target)] += x[(slice(None), *position)] @ w[tap]
    full = np.pad(full, ((0, 0), *[(0, e) for e in output_padding], (0, 0)))
    keep = tuple(slice(lo, full.shape[1 + a] - hi) for a, (lo, hi) in enumerate(crop))
    return full[(slice(None), *keep)]


def pool_reference(x, window, stride, reduce):
    """(N, *spatial, C) with VALID windows, by a loop over output positions."""
    out_shape = [(size - k) // s + 1 for size, k, s in zip(x.shape[1:-1], window, stride)]
    out = np.zeros((x.shape[0], *out_shape, x.shape[-1]))
    axes = tuple(range(1, len(window) + 1))
    for position in itertools.product(*map(range, out_shape)):
        patch = x[
            (slice(None), *(slice(p * s, p * s + k) for p, s, k in zip(position, stride, window)))
        ]
        out[(slice(None), *position)] = reduce(patch, axis=axes)
    return out


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def gates_of(cell, count):
    """Per-gate (input weight, hidden weight, input bias, hidden bias), columns sliced in
    the cell's documented gate order."""
    h = cell.hidden_size
    params = [np.asarray(p, np.float64) for p in (cell.input_weight, cell.hidden_weight)]
    params += [np.asarray(p, np.float64) for p in (cell.input_bias, cell.hidden_bias)]
    return [tuple(p[..., g * h : (g + 1) * h] for p in params) for g in range(count)]


def gru_step(cell, h, x):
    (wir, whr, bir, bhr), (wiz, whz, biz, bhz), (win, whn, bin_, bhn) = gates_of(cell, 3)
    r = sigmoid(x @ wir + bir + h @ whr + bhr)
    z = sigmoid(x @ wiz + biz + h @ whz + bhz)
    n = np.tanh(x @ win + bin_ + r * (h @ whn + bhn))
    return (1 - z) * n + z * h


def lstm_step(cell, carry, x):
    h, c = carry
    (wii, whi, bii, bhi), (wif, whf, bif, bhf), (wig, whg, big, bhg), (wio, who, bio, bho) = (
        gates_of(cell, 4)
    )
    i = sigmoid(x @ wii + bii + h @ whi + bhi)
    f = sigmoid(x @ wif + bif + h @ whf + bhf)
    g = np.tanh(x @ wig + big + h @ whg + bhg)
    o = sigmoid(x @ wio + bio + h @ who + bho)
    c = f * c + i * g
    return o * np.tanh(c), c


def simple_step(cell, h, x):
    ((wi, wh, bi, bh),) = gates_of(cell, 1)
    return np.tanh(x @ wi + bi + h @ wh + bh)


def with_random_biases(cell):
    """Zero-initialized biases would hide a bias added in the wrong place."""
    size = cell.input_bias.shape
    cell = with_param(cell, "input_bias", floats(*size))
    return with_param(cell, "hidden_bias", floats(*size))


# -- convolutions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stride, padding, dilation, groups",
    [(1, "SAME", 1, 1), (2, "VALID", 1, 2), ((1, 2, 3), ((1, 0), (2, 1), (0, 2)), (2, 1, 1), 1)],
)
def test_conv3d_matches_explicit_loops(stride, padding, dilation, groups):
    conv = nn.Conv3d(
        4, 2, (2, 3, 2), stride=stride, padding=padding, dilation=dilation, groups=groups, key=KEY
    )
    conv = with_param(conv, "bias", floats(2))
    x = floats(2, 5, 7, 6, 4)
    n = 3
    strides, dilations = ((s,) * n if isinstance(s, int) else s for s in (stride, dilation))
    if padding == "SAME":
        pads = []
        for size, k, s, d in zip(x.shape[1:4], conv.kernel_size, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            pads.append((total // 2, total - total // 2))
    elif padding == "VALID":
        pads = [(0, 0)] * n
    else:
        pads = padding
    wanted = conv_reference(x, np.asarray(conv.weight), strides, pads, dilations, groups)
    wanted = wanted + np.asarray(conv.bias)
    close(conv(x), wanted, 1e-4)
    close(conv(x[1]), wanted[1], 1e-4)
    channels_first = nn.Conv3d(
        4,
        2,
        (2, 3, 2),
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        data_format="NCDHW",
        key=KEY,
    )
    channels_first = with_param(channels_first, "bias", conv.bias)
    close(channels_first(x.transpose(0, 4, 1, 2, 3)), wanted.transpose(0, 4, 1, 2, 3), 1e-4)


def test_conv3d_names_a_bad_input():
    conv = nn.Conv3d(3, 2, 2, key=KEY)
    with pytest.raises(ValueError, match=r"expected 3 channels"):
        conv(floats(1, 4, 4, 4, 2))
    with pytest.raises(ValueError, match=r"5 dimensions \(NDHWC\) or 4"):
        conv(floats(4, 4, 3))


@pytest.mark.parametrize(
    "layer, spatial, padding, output_padding",
    [
        (nn.ConvTranspose1d, (5,), "VALID", 0),
        (nn.ConvTranspose1d, (6,), ((1, 2),), 1),
        (nn.ConvTranspose3d, (3, 2, 3), "VALID", 0),
        (nn.ConvTranspose3d, (2, 3, 2), ((1, 0), (0, 1), (1, 1)), (1, 0, 0)),
    ],
)
def test_conv_transpose_scatters_each_input_through_the_kernel(
    layer, spatial, padding, output_padding
):
    n = len(spatial)
    kernel, stride = (3, 2, 2)[:n], (2, 1, 3)[:n]
    conv = layer(
        3, 2, kernel, stride=stride, padding=padding, output_padding=output_padding, key=KEY
    )
    conv = with_param(conv, "bias", floats(2))
    x = floats(2, *spatial, 3)
    crop = [(0, 0)] * n if padding == "VALID" else padding
    extra = (output_padding,) * n if isinstance(output_padding, int) else output_padding
    wanted = conv_transpose_reference(x, np.asarray(conv.weight), stride, crop, extra)
    close(conv(x), wanted + np.asarray(conv.bias), 1e-4)


@pytest.mark.parametrize(
    "layer, transpose, spatial",
    [(nn.Conv1d, nn.ConvTranspose1d, (7,)), (nn.Conv3d, nn.ConvTranspose3d, (4, 5, 3))],
)
def test_same_conv_transpose_upsamples_by_the_stride_as_the_adjoint(layer, transpose, spatial):
    """<conv(x), y> = <conv_transpose(y), x> for the transpose holding the same kernel with
    its channel axes swapped; with SAME padding it maps size n back to n * stride."""
    n = len(spatial)
    kernel, stride = (3, 2, 1)[:n], (2, 3, 1)[:n]
    conv = layer(3, 5, kernel, stride=stride, use_bias=False, key=KEY)
    back = transpose(5, 3, kernel, stride=stride, use_bias=False, key=KEY)
    back = with_param(back, "weight", fnp.swapaxes(conv.weight, -2, -1))
    size = [-(-s // t) * t for s, t in zip(spatial, stride)]
    x = floats(2, *size, 3)
    y = floats(*np.asarray(conv(x)).shape)
    upsampled = np.asarray(back(y))
    assert upsampled.shape == x.shape
    close(np.vdot(np.asarray(conv(x)), y), np.vdot(upsampled, x), 1e-3)


def grouped_conv_transpose_reference(x, w, groups, *args):
    """Each channel group through its own ungrouped transpose, the outputs side by side."""
    cin_g, per_group = x.shape[-1] // groups, w.shape[-1] // groups
    return np.concatenate(
        [
            conv_transpose_reference(
                x[..., g * cin_g : (g + 1) * cin_g],
                w[..., g * per_group : (g + 1) * per_group],
                *args,
            )
            for g in range(groups)
        ],
        axis=-1,
    )


@pytest.mark.parametrize(
    "layer, spatial, groups, padding, data_format",
    [
        (nn.ConvTranspose1d, (5,), 2, "VALID", None),
        (nn.ConvTranspose1d, (4,), 3, ((1, 2),), "NCW"),
        (nn.ConvTranspose2d, (3, 4), 2, ((0, 1), (1, 0)), None),
        (nn.ConvTranspose2d, (3, 3), 3, "VALID", "NCHW"),
        (nn.ConvTranspose3d, (2, 3, 2), 2, "VALID", None),
    ],
)
def test_grouped_conv_transpose_is_one_transpose_per_group(
    layer, spatial, groups, padding, data_format
):
    n = len(spatial)
    kernel, stride = (3, 2, 2)[:n], (2, 1, 3)[:n]
    conv = layer(
        2 * groups,
        3 * groups,
        kernel,
        stride=stride,
        padding=padding,
        groups=groups,
        data_format=data_format,
        key=KEY,
    )
    assert conv.weight.shape == (*kernel, 2, 3 * groups)
    conv = with_param(conv, "bias", floats(3 * groups))
    x = floats(2, *spatial, 2 * groups)
    crop = [(0, 0)] * n if padding == "VALID" else padding
    w = np.asarray(conv.weight)
    wanted = grouped_conv_transpose_reference(x, w, groups, stride, crop, (0,) * n)
    wanted = wanted + np.asarray(conv.bias)
    if data_format is None:
        close(conv(x), wanted, 1e-4)
    else:  # channels first in and out
        got = conv(np.moveaxis(x, -1, 1))
        close(np.moveaxis(np.asarray(got), 1, -1), wanted, 1e-4)


def test_grouped_same_conv_transpose_is_the_adjoint_of_the_grouped_convolution():
    """The transpose of Conv2d(4, 6, groups=2) is ConvTranspose2d(6, 4, groups=2) holding, for
    each group, that group's kernel block with its channel axes swapped."""
    groups, stride = 2, (2, 3)
    conv = nn.Conv2d(4, 6, (3, 2), stride=stride, groups=groups, use_bias=False, key=KEY)
    w = np.asarray(conv.weight)  # (3, 2, 2, 6)
    blocks = [np.swapaxes(w[..., 3 * g : 3 * (g + 1)], -2, -1) for g in range(groups)]
    back = nn.ConvTranspose2d(6, 4, (3, 2), stride=stride, groups=groups, use_bias=False, key=KEY)
    back = with_param(back, "weight", np.concatenate(blocks, axis=-1))
    x = floats(2, 6, 9, 4)
    y = floats(*np.asarray(conv(x)).shape)
    upsampled = np.asarray(back(y))
    assert upsampled.shape == x.shape
    close(np.vdot(np.asarray(conv(x)), y), np.vdot(upsampled, x), 1e-3)


def test_conv_transpose_groups_must_divide_the_channels():
    with pytest.raises(ValueError, match=r"ConvTranspose3d: groups=2 must divide in_channels=3"):
        nn.ConvTranspose3d(3, 2, 2, groups=2, key=KEY)
    with pytest.raises(ValueError, match=r"ConvTranspose1d: groups=2 .* out_channels=3"):
        nn.ConvTranspose1d(4, 3, 2, groups=2, key=KEY)


# -- pooling ------------------------------------------------------------------------------------


@pytest.mark.parametrize("window, stride", [(3, 2), (2, None)])
def test_pooling_1d_and_3d_match_loops(window, stride):
    step = window if stride is None else stride
    x1 = floats(2, 9, 3)
    close(nn.MaxPool1d(window, stride)(x1), pool_reference(x1, (window,), (step,), np.max))
    close(nn.AvgPool1d(window, stride)(x1[0]), pool_reference(x1, (window,), (step,), np.mean)[0])
    x3 = floats(2, 5, 7, 4, 2)
    windows, strides = (window, 2, 1), (step, 1, 2)
    close(nn.MaxPool3d(windows, strides)(x3), pool_reference(x3, windows, strides, np.max))
    close(nn.AvgPool3d(windows, strides)(x3), pool_reference(x3, windows, strides, np.mean), 1e-5)


def test_same_avg_pooling_counts_padding_as_zeros_and_pools_check_their_rank():
    x = floats(1, 5, 2)
    got = np.asarray(nn.AvgPool1d(3, 1, padding="SAME")(x))
    padded = np.pad(x, ((0, 0), (1, 1), (0, 0)))
    close(got, pool_reference(padded, (3,), (1,), np.sum) / 3, 1e-5)
    assert np.asarray(nn.MaxPool1d(2, padding=((0, 1),))(x)).shape == (1, 3, 2)
    with pytest.raises(ValueError, match=r"MaxPool3d: window_shape must be an int or 3 ints"):
        nn.MaxPool3d((2, 2))
    with pytest.raises(ValueError, match="a window of 1 dimensions"):
        nn.AvgPool1d(2)(floats(1, 4, 4, 2))


# -- normalization ------------------------------------------------------------------------------


def group_norm_reference(x, groups, eps, weight, bias):
    """(N, *spatial, C): statistics over each example's spatial axes and group channels."""
    grouped = x.reshape(*x.shape[:-1], groups, -1).astype(np.float64)
    axes = (*range(1, x.ndim - 1), x.ndim)
    mean = grouped.mean(axis=axes, keepdims=True)
    variance = grouped.var(axis=axes, keepdims=True)
    y = ((grouped - mean) / np.sqrt(variance + eps)).reshape(x.shape)
    return y * weight + bias


def test_group_norm_matches_per_group_statistics_on_either_channel_axis():
    norm = nn.GroupNorm(3, 6)
    weight, bias = floats(6), floats(6)
    norm = with_param(with_param(norm, "weight", weight), "bias", bias)
    x = floats(2, 3, 5, 6) * 3 + 1
    wanted = group_norm_reference(x, 3, 1e-5, weight, bias)
    close(norm(x), wanted, 1e-4)
    channels_first = nn.GroupNorm(3, 6, axis=1)
    channels_first = with_param(with_param(channels_first, "weight", weight), "bias", bias)
    close(channels_first(x.transpose(0, 3, 1, 2)), wanted.transpose(0, 3, 1, 2), 1e-4)
    close(norm(x[:1]), wanted[:1], 1e-4)  # no statistics cross the batch
    instance = nn.InstanceNorm(6, use_weight=False, use_bias=False)
    spatial = x.astype(np.float64)
    per_channel = (spatial - spatial.mean(axis=(1, 2), keepdims=True)) / np.sqrt(
        spatial.var(axis=(1, 2), keepdims=True) + 1e-5
    )
    close(instance(x), per_channel, 1e-4)
    assert instance.weight is None and instance.num_groups == 6


def test_group_norm_names_bad_sizes():
    with pytest.raises(ValueError, match="num_groups=4 must divide num_channels=6"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="expected 6 channels on axis -1"):
        nn.GroupNorm(3, 6)(floats(2, 4, 5))
    with pytest.raises(ValueError, match=r"\(batch, ..., channels\)"):
        nn.GroupNorm(3, 6)(floats(6))


# -- recurrent cells ----------------------------------------------------------------------------


def test_cells_match_their_step_equations():
    key1, key2, key3 = random.split(KEY, 3)
    x, h, c = floats(4, 3), floats(4, 5), floats(4, 5)
    gru = with_random_biases(nn.GRUCell(3, 5, key=key1))
    carry, out = gru(h, x)
    close(carry, gru_step(gru, h, x), 1e-5)
    close(out, carry)
    lstm = with_random_biases(nn.LSTMCell(3, 5, key=key2))
    (new_h, new_c), out = lstm((h, c), x)
    wanted_h, wanted_c = lstm_step(lstm, (h, c), x)
    close(new_h, wanted_h, 1e-5)
    close(new_c, wanted_c, 1e-5)
    close(out, wanted_h, 1e-5)
    simple = with_random_biases(nn.SimpleRNNCell(3, 5, key=key3))
    close(simple(h, x)[0], simple_step(simple, h, x), 1e-5)
    relu = with_random_biases(nn.SimpleRNNCell(3, 5, activation=nn.relu, key=key3))
    ((wi, wh, bi, bh),) = gates_of(relu, 1)
    close(relu(h, x)[0], np.maximum(x @ wi + bi + h @ wh + bh, 0), 1e-5)


def test_cell_parameters_have_the_documented_layout_and_initialization():
    lstm = nn.LSTMCell(3, 5, key=KEY)
    assert lstm.input_weight.shape == (3, 20) and lstm.hidden_weight.shape == (5, 20)
    assert lstm.input_bias.shape == lstm.hidden_bias.shape == (20,)
    hidden = np.asarray(lstm.hidden_weight)
    for g in range(4):  # each gate's recurrent block is orthogonal by default
        block = hidden[:, 5 * g : 5 * (g + 1)]
        close(block.T @ block, np.eye(5), 1e-5)
    carry = lstm.initial_carry((2,))
    assert [np.asarray(part).shape for part in carry] == [(2, 5), (2, 5)]
    bare = nn.GRUCell(3, 5, use_bias=False, key=KEY)
    assert bare.input_bias is None and bare.hidden_bias is None
    with pytest.raises(ValueError, match=r"GRUCell\(input_size=3, hidden_size=5\).*size 3"):
        bare(bare.initial_carry(), floats(4))


def test_cells_vmap_over_a_batch_as_a_loop():
    lstm = with_random_biases(nn.LSTMCell(3, 4, key=KEY))
    xs, hs, cs = floats(5, 3), floats(5, 4), floats(5, 4)
    (h, c), _ = fg.vmap(lambda carry, x: lstm(carry, x))((hs, cs), xs)
    for k in range(5):
        wanted_h, wanted_c = lstm_step(lstm, (hs[k], cs[k]), xs[k])
        close(h[k], wanted_h, 1e-5)
        close(c[k], wanted_c, 1e-5)
    gru = nn.GRUCell(3, 4, key=KEY)
    batched = fg.vmap(gru, in_axes=(0, 0))(hs, xs)[0]
    close(batched, np.stack([np.asarray(gru(hs[k], xs[k])[0]) for k in range(5)]), 1e-6)


def run_cell(step, carry, xs):
    outputs = []
    for x in xs:
        carry = step(carry, x)
        outputs.append(carry[0] if isinstance(carry, tuple) else carry)
    return carry, np.stack(outputs)


def test_rnn_scans_a_cell_over_time_in_either_layout_and_direction():
    gru = with_random_biases(nn.GRUCell(3, 4, key=KEY))
    x = floats(2, 6, 3)  # (batch, time, features)

    def step(h, xt):
        return gru_step(gru, h, xt)

    wanted_carry, wanted = run_cell(step, np.zeros((2, 4)), x.transpose(1, 0, 2))
    carry, outputs = nn.RNN(gru)(x)
    close(outputs, wanted.transpose(1, 0, 2), 1e-5)
    close(carry, wanted_carry, 1e-5)
    time_major_carry, time_major = nn.RNN(gru, time_major=True)(x.transpose(1, 0, 2))
    close(time_major, wanted, 1e-5)
    close(time_major_carry, wanted_carry, 1e-5)
    start = floats(2, 4)
    back_carry, back = run_cell(step, start, x.transpose(1, 0, 2)[::-1])
    carry, outputs = nn.RNN(gru, reverse=True)(x, start)
    close(outputs, back[::-1].transpose(1, 0, 2), 1e-5)  # output t read input t
    close(carry, back_carry, 1e-5)
    close(nn.RNN(gru)(x[0])[1], wanted[:, 0], 1e-5)  # no batch axis
    with pytest.raises(ValueError, match=r"\(\.\.\., time, features\)"):
        nn.RNN(gru)(floats(3))


def test_lstm_rnn_and_bidirectional_concatenate_both_directions():
    key1, key2 = random.split(KEY)
    forward = with_random_biases(nn.LSTMCell(3, 4, key=key1))
    backward = with_random_biases(nn.LSTMCell(3, 2, key=key2))
    x = floats(5, 2, 3)  # time-major
    zeros = (np.zeros((2, 4)), np.zeros((2, 4)))
    forward_carry, forward_out = run_cell(lambda c, xt: lstm_step(forward, c, xt), zeros, x)
    zeros = (np.zeros((2, 2)), np.zeros((2, 2)))
    backward_carry, backward_out = run_cell(
        lambda c, xt: lstm_step(backward, c, xt), zeros, x[::-1]
    )
    (got_forward, got_backward), outputs = nn.Bidirectional(forward, backward, time_major=True)(x)
    close(outputs, np.concatenate([forward_out, backward_out[::-1]], axis=-1), 1e-5)
    for got, wanted in zip((*got_forward, *got_backward), (*forward_carry, *backward_carry)):
        close(got, wanted, 1e-5)


# -- transformations ----------------------------------------------------------------------------


def test_new_layers_under_jit_match_eager():
    key1, key2, key3 = random.split(KEY, 3)
    x3 = floats(1, 4, 5, 3, 2)
    layers = [
        (nn.Conv3d(2, 3, 2, stride=2, key=key1), x3),
        (nn.ConvTranspose3d(2, 3, 2, stride=2, key=key1), x3),
        (nn.ConvTranspose1d(2, 3, 3, stride=2, key=key1), x3[:, 0, 0]),
        (nn.MaxPool3d(2), x3),
        (nn.AvgPool1d(2), x3[:, 0, 0]),
        (nn.GroupNorm(1, 2), x3),
        (nn.RNN(nn.LSTMCell(2, 3, key=key2)), x3[:, 0, 0]),
        (nn.Bidirectional(nn.GRUCell(2, 3, key=key2), nn.SimpleRNNCell(2, 1, key=key3)), x3[0, 0]),
    ]
    for layer, x in layers:
        eager = fg.tree_util.tree_leaves(layer(x))
        jitted = fg.tree_util.tree_leaves(fg.jit(lambda m, v: m(v))(layer, x))
        for got, wanted in zip(jitted, eager):
            close(got, np.asarray(wanted), 1e-5)


def summed(module, x):
    return sum(leaf.sum() for leaf in fg.tree_util.tree_leaves(module(x)))


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda key: nn.Conv3d(2, 2, 2, stride=(1, 2, 1), key=key), (1, 3, 3, 2, 2)),
        (lambda key: nn.ConvTranspose1d(2, 1, 3, stride=2, key=key), (1, 3, 2)),
        (lambda key: nn.ConvTranspose1d(4, 2, 3, stride=2, groups=2, key=key), (1, 3, 4)),
        (lambda key: nn.GroupNorm(2, 4), (2, 3, 4)),
        (lambda key: nn.RNN(nn.GRUCell(2, 3, key=key)), (2, 3, 2)),
        (lambda key: nn.RNN(nn.LSTMCell(2, 2, key=key), reverse=True), (3, 2)),
        (lambda key: nn.RNN(nn.SimpleRNNCell(2, 2, key=key)), (3, 2)),
    ],
)
def test_gradients_match_finite_differences(make, shape):
    with fg.enable_x64():
        module = fg.tree_util.tree_map(lambda p: fnp.asarray(p, fnp.float64), make(KEY))
        if isinstance(module, nn.GroupNorm):  # a non-trivial scale and shift
            module = with_param(module, "weight", rng.standard_normal(4))
            module = with_param(module, "bias", rng.standard_normal(4))
        x = fnp.asarray(rng.standard_normal(shape))
        check_grads(summed, (module, x), order=1, modes=("rev",))
        if isinstance(module, nn.GroupNorm):
            weights = fnp.asarray(rng.standard_normal(shape))
            check_grads(lambda v: (module(v) * weights).sum(), (x,), order=1, modes=("fwd",))


def test_pooling_gradients_match_finite_differences():
    with fg.enable_x64():
        x = fnp.asarray(rng.permutation(24).reshape(1, 3, 4, 2, 1) / 7.0)  # distinct: no ties
        check_grads(lambda v: (nn.MaxPool3d((2, 2, 1), 1)(v) ** 2).sum(), (x,), order=1)
        check_grads(lambda v: (nn.AvgPool1d(2, 1)(v[0, 0]) ** 2).sum(), (x,), order=1)


def test_an_lstm_learns_to_recall_the_first_input():
    """Five jitted Adam steps on predicting a sequence's first element from its last output
    lower the loss: the gradient flows back through the whole scan."""
    key1, key2 = random.split(KEY)
    model = (nn.RNN(nn.LSTMCell(1, 8, key=key1)), nn.Linear(8, 1, key=key2))
    x = floats(16, 5, 1)
    target = x[:, 0]

    def loss(model):
        rnn, head = model
        _, outputs = rnn(x)
        return ((head(outputs[:, -1]) - target) ** 2).mean()

    optimizer = optim.adam(0.05)

    @fg.jit
    def train_step(model, state):
        value, grads = fg.value_and_grad(loss)(model)
        updates, state = optimizer.update(grads, state, model)
        return optim.apply_updates(model, updates), state, value

    state = optimizer.init(model)
    losses = []
    for _ in range(6):
        model, state, value = train_step(model, state)
        losses.append(float(value))
    assert losses[-1] < 0.8 * losses[0], losses


# -- padded sequences ---------------------------------------------------------------------------


def run_padded(step, start, x, lengths, reverse=False):
    """Per sequence, a loop over its first `length` steps (read backwards with `reverse`),
    then on over the padding (from the end, with `reverse`): the carry after the valid steps
    and each step's output at the position of the input it read."""
    hidden = start[0].shape[-1] if isinstance(start, tuple) else start.shape[-1]
    carries, outputs = [], np.zeros((*x.shape[:2], hidden))
    for b, length in enumerate(lengths):
        start_b = tuple(part[b] for part in start) if isinstance(start, tuple) else start[b]
        valid = range(length - 1, -1, -1) if reverse else range(length)
        padding = range(x.shape[1] - 1, length - 1, -1) if reverse else range(length, x.shape[1])
        carry = start_b
        for t in valid:
            carry = step(carry, x[b, t])
            outputs[b, t] = carry[0] if isinstance(carry, tuple) else carry
        carries.append(carry)
        running = carry
        for t in padding:
            running = step(running, x[b, t])
            outputs[b, t] = running[0] if isinstance(running, tuple) else running
    if isinstance(start, tuple):
        return tuple(np.stack(parts) for parts in zip(*carries)), outputs
    return np.stack(carries), outputs


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("kind", ["simple", "gru", "lstm"])
def test_rnn_with_seq_lengths_matches_a_loop_over_each_truncated_sequence(kind, reverse):
    key1, key2 = random.split(KEY)
    cell = {
        "simple": lambda: nn.SimpleRNNCell(3, 4, key=key1),
        "gru": lambda: nn.GRUCell(3, 4, key=key1),
        "lstm": lambda: nn.LSTMCell(3, 4, key=key1),
    }[kind]()
    cell = with_random_biases(cell)
    step = {
        "simple": lambda h, xt: simple_step(cell, h, xt),
        "gru": lambda h, xt: gru_step(cell, h, xt),
        "lstm": lambda c, xt: lstm_step(cell, c, xt),
    }[kind]
    x = floats(4, 6, 3)  # (batch, time, features)
    lengths = np.array([6, 3, 0, 1])
    start = (floats(4, 4), floats(4, 4)) if kind == "lstm" else floats(4, 4)
    wanted_carry, wanted = run_padded(step, start, x, lengths, reverse)
    carry, outputs = nn.RNN(cell, reverse=reverse)(x, start, seq_lengths=lengths)
    close(outputs, wanted, 1e-5)
    for got, expected in zip(
        fg.tree_util.tree_leaves(carry), fg.tree_util.tree_leaves(wanted_carry)
    ):
        close(got, expected, 1e-5)
    # the same on the time-major layout, with the lengths as a jitted argument
    time_major = nn.RNN(cell, time_major=True, reverse=reverse)
    carry, outputs = fg.jit(lambda v, c, n: time_major(v, c, seq_lengths=n))(
        x.transpose(1, 0, 2), start, fnp.asarray(lengths)
    )
    close(np.asarray(outputs).transpose(1, 0, 2), wanted, 1e-5)
    for got, expected in zip(
        fg.tree_util.tree_leaves(carry), fg.tree_util.tree_leaves(wanted_carry)
    ):
        close(got, expected, 1e-5)


def test_full_lengths_change_nothing_and_lengths_take_any_batch_shape():
    gru = with_random_biases(nn.GRUCell(2, 3, key=KEY))
    x = floats(2, 3, 5, 2)  # two batch axes
    for reverse in (False, True):
        rnn = nn.RNN(gru, reverse=reverse)
        plain_carry, plain = rnn(x)
        carry, outputs = rnn(x, seq_lengths=np.full((2, 3), 5))
        close(outputs, np.asarray(plain), 1e-6)
        close(carry, np.asarray(plain_carry), 1e-6)
    lengths = np.array([[5, 2, 4], [1, 3, 0]])
    carry, outputs = nn.RNN(gru, reverse=True)(x, seq_lengths=lengths)
    flat_carry, flat = nn.RNN(gru, reverse=True)(x.reshape(6, 5, 2), seq_lengths=lengths.ravel())
    close(outputs, np.asarray(flat).reshape(2, 3, 5, 3), 1e-6)
    close(carry, np.asarray(flat_carry).reshape(2, 3, 3), 1e-6)
    # one length for the whole batch broadcasts; lengths past the end are clipped
    close(nn.RNN(gru)(x, seq_lengths=9)[0], np.asarray(nn.RNN(gru)(x)[0]), 1e-6)
    close(
        nn.RNN(gru)(x, seq_lengths=2)[0],
        np.asarray(nn.RNN(gru)(x[:, :, :2])[0]),
        1e-6,
    )


def test_seq_lengths_vmap_as_a_loop_and_name_bad_lengths():
    lstm = with_random_biases(nn.LSTMCell(2, 3, key=KEY))
    rnn = nn.RNN(lstm, reverse=True)
    x, lengths = floats(4, 5, 2), np.array([2, 5, 0, 3])
    (h, c), outputs = fg.vmap(lambda v, n: rnn(v, seq_lengths=n))(x, lengths)
    for b in range(4):
        (hb, cb), out_b = rnn(x[b], seq_lengths=lengths[b])
        close(h[b], np.asarray(hb), 1e-6)
        close(c[b], np.asarray(cb), 1e-6)
        close(outputs[b], np.asarray(out_b), 1e-6)
    with pytest.raises(TypeError, match="seq_lengths must be integers, got float32"):
        rnn(x, seq_lengths=np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"seq_lengths of shape \(3,\).*batch shape \(4,\)"):
        rnn(x, seq_lengths=np.ones(3, int))


def test_bidirectional_with_seq_lengths_reads_each_sequence_back_from_its_end():
    key1, key2 = random.split(KEY)
    forward = with_random_biases(nn.GRUCell(3, 4, key=key1))
    backward = with_random_biases(nn.SimpleRNNCell(3, 2, key=key2))
    x, lengths = floats(3, 5, 3), np.array([5, 2, 4])
    forward_carry, forward_out = run_padded(
        lambda h, xt: gru_step(forward, h, xt), np.zeros((3, 4)), x, lengths
    )
    backward_carry, backward_out = run_padded(
        lambda h, xt: simple_step(backward, h, xt), np.zeros((3, 2)), x, lengths, reverse=True
    )
    (got_forward, got_backward), outputs = nn.Bidirectional(forward, backward)(
        x, seq_lengths=lengths
    )
    close(got_forward, forward_carry, 1e-5)
    close(got_backward, backward_carry, 1e-5)
    close(outputs, np.concatenate([forward_out, backward_out], axis=-1), 1e-5)
    for b, length in enumerate(lengths):  # the valid steps ignore the padding's values
        alone = nn.Bidirectional(forward, backward)(x[b, :length])[1]
        close(outputs[b, :length], np.asarray(alone), 1e-5)


def test_seq_lengths_gradients_match_finite_differences_and_skip_the_padding():
    with fg.enable_x64():
        cell = fg.tree_util.tree_map(
            lambda p: fnp.asarray(p, fnp.float64), nn.LSTMCell(2, 2, key=KEY)
        )
        rnn = nn.RNN(cell, reverse=True)
        x = fnp.asarray(rng.standard_normal((2, 4, 2)))
        lengths = np.array([3, 1])

        def loss(module, v):
            (h, c), outputs = module(v, seq_lengths=lengths)
            return (h**2).sum() + c.sum() + (outputs[:, :1] ** 2).sum()

        check_grads(loss, (rnn, x), order=1, modes=("rev",))
        grad_x = np.asarray(fg.grad(loss, argnums=1)(rnn, x))
        assert np.all(grad_x[0, 3] == 0) and np.all(grad_x[1, 1:] == 0)
