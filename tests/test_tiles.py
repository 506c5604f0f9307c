"""Products and convolutions computed in register tiles on the CPU (`TileStep`,
`backends/llvm/tiles.py`). Matrix products against NumPy's in float64: batched, `a` stored
transposed, sizes that are not a whole number of tiles, and the update a product feeds.
Convolutions against one written out in NumPy (float64, padding by np.pad, a sum over the
window's offsets), for both layouts the tiles take (features innermost, NHWC; places
innermost, NCHW), every spatial rank, strides, dilations, padding that crops, and the
gradients; and which convolutions do not run so."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from checks import jit_backend, products_as
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import lax
from funcgrad.backends.llvm import engine

rng = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch, m, n, k", [(1, 37, 20, 50), (5, 3, 33, 12), (2, 130, 70, 300)])
@pytest.mark.parametrize("transposed", [False, True])
def test_matrix_products(batch, m, n, k, transposed, dtype):
    """`a` stored (m, k) or (k, m); `b` (k, n)."""
    a = rng.standard_normal((batch, k, m) if transposed else (batch, m, k)).astype(dtype)
    b = rng.standard_normal((batch, k, n)).astype(dtype)

    def product(a, b):
        return (a.transpose(0, 2, 1) if transposed else a) @ b

    with products_as("tiles"), jit_backend("llvm"):
        compiled = fg.jit(product).lower(a, b).compile()
        got = np.asarray(compiled(a, b))
    want = product(a.astype(np.float64), b.astype(np.float64))
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=0, atol=50 * eps * np.sqrt(k))
    assert "tiles[" in compiled.executable.fusion_plan()


def test_the_update_a_product_feeds():
    """w - 0.1 * (x.T @ g): the tiles scale their product and add the scaled parameter as
    they store it (in place where it is donated: tests/test_donation.py)."""
    w = rng.standard_normal((40, 48)).astype(np.float32)
    x, g = rng.standard_normal((64, 40)), rng.standard_normal((64, 48))
    x, g = x.astype(np.float32), g.astype(np.float32)

    def step(w, x, g):
        return w - 0.1 * (x.T @ g)

    want = w.astype(np.float64) - 0.1 * (x.T.astype(np.float64) @ g)
    with products_as("tiles"), jit_backend("llvm"):
        plan = fg.jit(step).lower(w, x, g).compile().executable.fusion_plan()
        got = np.asarray(fg.jit(step)(w, x, g))
    assert "= -0.1 * tiles[" in plan and ") + 1.0 * in" in plan, plan
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


# Layout names by spatial rank: (input, weights, output).
LAYOUTS = {
    "features_inner": {
        1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")
    },
    "places_inner": {
        1: ("NCW", "OIW", "NCW"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")
    },
}  # fmt: skip


def reference_conv(x, w, strides, padding, dilation, names):
    """The convolution in float64, computed in NC... / OI... order and put back in the
    output's layout."""
    lhs, rhs, out = names
    spatial = len(lhs) - 2
    x = np.moveaxis(np.asarray(x, np.float64), [lhs.index("N"), lhs.index("C")], [0, 1])
    w = np.moveaxis(np.asarray(w, np.float64), [rhs.index("O"), rhs.index("I")], [0, 1])
    spatial_names = [c for c in lhs if c not in "NC"]  # x's order now
    rhs_spatial = [c for c in rhs if c not in "OI"]  # w's
    w = np.moveaxis(w, [2 + rhs_spatial.index(c) for c in spatial_names], range(2, 2 + spatial))
    for s, (low, high) in enumerate(padding):
        axis = 2 + s
        x = np.pad(
            x, [(0, 0)] * axis + [(max(low, 0), max(high, 0))] + [(0, 0)] * (spatial - s - 1)
        )
        stop = x.shape[axis] + min(high, 0)
        x = np.take(x, np.arange(max(-low, 0), stop), axis=axis)
    window = w.shape[2:]
    places = [
        (x.shape[2 + s] - (window[s] - 1) * dilation[s] - 1) // strides[s] + 1
        for s in range(spatial)
    ]
    result = np.zeros((x.shape[0], w.shape[0], *places))
    for offsets in itertools.product(*(range(k) for k in window)):
        index = tuple(
            slice(o * d, o * d + (p - 1) * st + 1, st)
            for o, d, p, st in zip(offsets, dilation, places, strides)
        )
        patch = x[(slice(None), slice(None), *index)]
        result += np.einsum("nc...,oc->no...", patch, w[(slice(None), slice(None), *offsets)])
    order = [out.index("N"), out.index("C")] + [out.index(c) for c in spatial_names]
    return np.moveaxis(result, list(range(len(out))), order)


def shaped(names, batch, features, sizes):
    """An input's shape in layout `names`."""
    dims = dict(zip([c for c in names if c not in "NC"], sizes), N=batch, C=features)
    return tuple(dims[c] for c in names)


def weights_shape(names, cin, cout, window):
    dims = dict(zip([c for c in names if c not in "OI"], window), O=cout, I=cin)
    return tuple(dims[c] for c in names)


def run(x, w, strides, padding, dilation, names):
    def conv(x, w):
        return lax.conv_general_dilated(
            x, w, strides, padding, rhs_dilation=dilation, dimension_numbers=names
        )

    with jit_backend("llvm"):
        compiled = fg.jit(conv).lower(x, w).compile()
        got = np.asarray(compiled(x, w))
    LAST_IR[0] = compiled.executable.ir
    return got, compiled.executable.fusion_plan()


LAST_IR = [""]  # the module text of the last convolution `run` compiled


def assert_conv(layout, spatial, batch, cin, cout, sizes, window, strides, padding, dilation,
                dtype=np.float32, tiles=True):  # fmt: skip
    names = LAYOUTS[layout][spatial]
    x = rng.standard_normal(shaped(names[0], batch, cin, sizes)).astype(dtype)
    w = rng.standard_normal(weights_shape(names[1], cin, cout, window)).astype(dtype)
    got, plan = run(x, w, strides, padding, dilation, names)
    want = reference_conv(x, w, strides, padding, dilation, names)
    assert got.shape == want.shape and got.dtype == dtype
    scale = np.sqrt(cin * np.prod(window))
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=0, atol=50 * eps * scale)
    assert ("tiles[" in plan) == tiles, plan


@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("layout", ["features_inner", "places_inner"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_3x3_convolution_with_same_padding(layout, dtype, vector_bytes, monkeypatch):
    """With AVX2's vectors and AVX-512's, whichever this CPU has (LLVM splits wider ones)."""
    monkeypatch.setattr(engine, "vector_bytes", lambda: vector_bytes)
    assert_conv(layout, 2, 2, 5, 20, (9, 37), (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), dtype)
    lanes = vector_bytes // np.dtype(dtype).itemsize
    assert f"<{lanes} x {'float' if dtype == np.float32 else 'double'}>" in LAST_IR[0]


@pytest.mark.parametrize(
    "spatial, sizes, window, strides, padding, dilation",
    [
        (1, (70,), (5,), (1,), [(2, 2)], (1,)),
        (1, (70,), (3,), (1,), [(0, 0)], (3,)),
        (2, (11, 40), (2, 3), (1, 1), [(0, 1), (2, 0)], (2, 1)),
        (2, (12, 33), (3, 3), (1, 1), [(-1, 2), (1, -2)], (1, 1)),  # padding that crops
        (3, (4, 5, 36), (2, 2, 3), (1, 1, 1), [(1, 0), (0, 1), (1, 1)], (1, 1, 1)),
    ],
)
@pytest.mark.parametrize("layout", ["features_inner", "places_inner"])
def test_ranks_dilations_and_padding(layout, spatial, sizes, window, strides, padding, dilation):
    assert_conv(layout, spatial, 2, 3, 17, sizes, window, strides, padding, dilation)


def test_strides_with_features_innermost():
    """Features innermost, any strides: the rows step over the input by the stride."""
    assert_conv("features_inner", 2, 3, 4, 24, (15, 17), (3, 3), (2, 3), [(1, 1), (0, 2)], (1, 1))


def test_a_stride_along_the_places_takes_the_features_as_columns():
    """Places innermost, but strided: the columns are the features, the weights copied with
    them innermost and the output computed so, then copied into its layout."""
    assert_conv("places_inner", 2, 2, 4, 24, (15, 40), (3, 3), (1, 2), [(1, 1), (1, 1)], (1, 1))


def test_fewer_columns_than_a_vector_takes_the_gemm():
    assert_conv("features_inner", 2, 2, 16, 8, (20, 20), (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1),
                tiles=False)  # fmt: skip


def test_fewer_rows_than_a_tile():
    """Two output features (places innermost) or two places (features innermost): a tile of
    fewer rows."""
    assert_conv("places_inner", 2, 1, 3, 2, (5, 40), (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1))
    assert_conv("features_inner", 2, 1, 3, 40, (5, 2), (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1))


def test_enough_work_runs_on_the_threads():
    """Work past the split threshold: the tiles in chunks on the pool's threads."""
    assert_conv("places_inner", 2, 4, 16, 32, (24, 48), (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1))
    assert_conv("features_inner", 2, 4, 16, 32, (24, 48), (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1))


def test_fused_input_and_weights_and_the_gradients():
    """An input computed in the program (fused into the padded copy), weights reversed (the
    input gradient's), and both gradients, channels first, against the NumPy backend."""
    x = rng.standard_normal((2, 6, 14, 20))
    w = rng.standard_normal((18, 6, 3, 3))

    def loss(x, w):
        y = lax.conv_general_dilated(fg.nn.relu(x) * 2.0, w, (1, 1), "SAME")
        return (y * y).sum()

    grads = fg.grad(loss, argnums=(0, 1))
    with jit_backend("numpy"):
        expected = grads(x, w)
    with jit_backend("llvm"):
        got = fg.jit(grads)(x, w)
        plan = fg.jit(grads).lower(x, w).compile().executable.fusion_plan()
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-10, atol=1e-9)
    # the forward convolution, the input gradient and the weight gradient (its output's
    # features made innermost)
    assert plan.count("tiles[") == 3 and "gemm" not in plan


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_weight_gradient_sums_in_blocks(dtype):
    """A channels-last weight gradient in tiles: rows the input features, columns the
    output features, and a sum over the batch and every place (4 x 40 x 40 terms) taken in
    blocks of 40 x 40, each added to what the output holds. Against the written-out
    gradient: sum over n, y, x of the padded input under each window element times the
    output's cotangent (2y)."""
    x = rng.standard_normal((4, 40, 40, 24)).astype(dtype)
    w = (rng.standard_normal((3, 3, 24, 20)) / 8).astype(dtype)
    names = ("NHWC", "HWIO", "NHWC")

    def loss(w, x):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=names)
        return (y * y).sum()

    with jit_backend("llvm"):
        compiled = fg.jit(fg.grad(loss)).lower(w, x).compile()
        got = np.asarray(compiled(w, x))
    assert "terms=4x40x40" in compiled.executable.fusion_plan()
    cotangent = 2 * reference_conv(x, w, (1, 1), [(1, 1), (1, 1)], (1, 1), names)
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros(w.shape)
    for ky, kx in itertools.product(range(3), range(3)):
        window = padded[:, ky : ky + 40, kx : kx + 40, :]
        want[ky, kx] = np.einsum("nyxc,nyxo->co", window, cotangent)
    scale = np.abs(want).max()
    np.testing.assert_allclose(
        got, want, rtol=0, atol=(1e-5 if dtype == np.float32 else 1e-12) * scale
    )


@settings(deadline=None)
@given(
    layout=st.sampled_from(["features_inner", "places_inner"]),
    spatial=st.integers(1, 2),
    batch=st.integers(1, 3),
    cin=st.integers(1, 6),
    cout=st.integers(1, 40),
    size=st.integers(1, 40),
    window=st.integers(1, 4),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 2),
    low=st.integers(-1, 3),
    high=st.integers(-1, 3),
)
def test_any_convolution_equals_the_written_out_sum(
    layout, spatial, batch, cin, cout, size, window, stride, dilation, low, high
):
    """Whichever way it runs (tiles or a GEMM), the convolution's values are the sum's."""
    sizes = (size + 2,) * (spatial - 1) + (size,)
    extent = (window - 1) * dilation + 1
    if size + low + high < extent or sizes[0] + low + high < extent:
        return  # no output place
    strides = (1,) * (spatial - 1) + (stride,)
    names = LAYOUTS[layout][spatial]
    x = rng.standard_normal(shaped(names[0], batch, cin, sizes)).astype(np.float32)
    w_shape = weights_shape(names[1], cin, cout, (window,) * spatial)
    w = rng.standard_normal(w_shape).astype(np.float32)
    padding = [(low, high)] * spatial
    dilations = (dilation,) * spatial
    got, _ = run(x, w, strides, padding, dilations, names)
    want = reference_conv(x, w, strides, padding, dilations, names)
    scale = np.sqrt(cin * window**spatial)
    np.testing.assert_allclose(got, want, rtol=0, atol=50 * np.finfo(np.float32).eps * scale)
