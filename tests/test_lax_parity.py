"""jax.lax names added for parity: implicit differentiation (custom_linear_solve, custom_root),
the convolution helpers (conv_transpose, patches, local convolutions, shape utilities), and the
smaller ones (platform_dependent, ragged dots, random bits, mulhi, index_take, ...).

Values are checked against loops written here in NumPy; transformations against their
definitions (vmap against a loop, jit against eager, derivatives by `check_grads`).

Derivatives of the implicit solvers are checked against central differences of the solution in
float64 (`check_grads`) with solvers that cannot be differentiated themselves (a while loop,
which refuses reverse mode, or a stop_gradient), so a right answer shows the implicit rule ran.
"""

import functools

import numpy as np
import pytest
import strategies as fst
from hypothesis import example, given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(0)
_M = RNG.standard_normal((4, 4))
SPD = _M @ _M.T + 4 * np.eye(4)
GENERAL = RNG.standard_normal((4, 4)) + 5 * np.eye(4)
B = RNG.standard_normal(4)


def assert_allclose(actual, expected, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


def conjugate_gradient(matvec, b):
    """CG in a while_loop: not reverse-differentiable itself."""

    def cond(state):
        _, r, _, k = state
        return (fnp.vdot(r, r) > 1e-28) & (k < 100)

    def body(state):
        x, r, p, k = state
        ap = matvec(p)
        alpha = fnp.vdot(r, r) / fnp.vdot(p, ap)
        r_next = r - alpha * ap
        beta = fnp.vdot(r_next, r_next) / fnp.vdot(r, r)
        return x + alpha * p, r_next, r_next + beta * p, k + 1

    return lax.while_loop(cond, body, (fnp.zeros_like(b), b, b, 0))[0]


def cg_solve(a, b):
    return lax.custom_linear_solve(lambda x: a @ x, b, conjugate_gradient, symmetric=True)


def dense_solve(a, b):
    """A non-symmetric system: solve and transpose_solve are stop_gradient'ed dense solves, and
    transpose_solve builds its matrix from the vecmat it is given (the transposed matvec)."""

    def solve(matvec, y):
        return lax.stop_gradient(fnp.linalg.solve(a, y))

    def transpose_solve(vecmat, y):
        matrix = fg.vmap(vecmat)(fnp.eye(y.shape[0], dtype=y.dtype)).T
        return lax.stop_gradient(fnp.linalg.solve(matrix, y))

    return lax.custom_linear_solve(lambda x: a @ x, b, solve, transpose_solve)


# ---------------------------------------------------------------------------------------------
# custom_linear_solve


@pytest.mark.parametrize("solver, matrix", [(cg_solve, SPD), (dense_solve, GENERAL)])
def test_linear_solve_values_and_derivatives(solver, matrix):
    assert_allclose(solver(matrix, B), np.linalg.solve(matrix, B))
    check_grads(solver, (matrix, B), order=2, modes=("fwd", "rev"))


def test_linear_solve_never_differentiates_the_solver():
    # The solve's derivative would be zero (stop_gradient) or refused (while_loop); the right
    # one comes from the equation.
    grad = fg.grad(lambda a, b: fnp.sum(cg_solve(a, b) ** 2), argnums=(0, 1))(SPD, B)
    x = np.linalg.solve(SPD, B)
    ct_b = np.linalg.solve(SPD.T, 2 * x)
    assert_allclose(grad[1], ct_b)
    assert_allclose(grad[0], -np.outer(ct_b, x))


def test_linear_solve_reverse_mode_needs_transpose_solve():
    def f(a, b):
        return lax.custom_linear_solve(lambda x: a @ x, b, lambda matvec, y: fnp.linalg.solve(a, y))

    tangent = fg.jvp(lambda b: f(GENERAL, b), (B,), (np.ones(4),))[1]
    assert_allclose(tangent, np.linalg.solve(GENERAL, np.ones(4)))
    with pytest.raises(TypeError, match="transpose_solve"):
        fg.grad(lambda b: fnp.sum(f(GENERAL, b)))(B)


def test_linear_solve_pytrees_and_aux():
    def matvec(x):
        return {"u": 3.0 * x["u"] + x["v"], "v": x["u"] + 2.0 * x["v"]}

    def solve(matvec, b):
        # Jacobi iterations; the count is the auxiliary output.
        def body(state):
            x, k = state
            return {"u": (b["u"] - x["v"]) / 3.0, "v": (b["v"] - x["u"]) / 2.0}, k + 1

        def cond(state):
            residual = fg.tree.map(lambda r, c: r - c, matvec(state[0]), b)
            return (fnp.max(fnp.abs(residual["u"])) + fnp.max(fnp.abs(residual["v"])) > 1e-14) & (
                state[1] < 500
            )

        return lax.while_loop(cond, body, (fg.tree.map(fnp.zeros_like, b), 0))

    def f(b):
        x, count = lax.custom_linear_solve(matvec, b, solve, symmetric=True, has_aux=True)
        return x, count

    b = {"u": np.array([1.0, 2.0]), "v": np.array([-1.0, 0.5])}
    x, count = f(b)
    dense = np.array([[3.0, 1.0], [1.0, 2.0]])
    expected = np.linalg.solve(dense, np.stack([b["u"], b["v"]]))
    assert_allclose(x["u"], expected[0])
    assert_allclose(x["v"], expected[1])
    assert int(count) > 1
    check_grads(lambda b: f(b)[0], (b,), order=1)


def test_linear_solve_vmap_matches_a_loop():
    matrices = np.stack([SPD, SPD + np.eye(4), 2 * SPD])
    rhs = RNG.standard_normal((3, 4))
    for in_axes in [(0, 0), (None, 0), (0, None)]:
        batched = fg.vmap(cg_solve, in_axes)(
            matrices if in_axes[0] == 0 else SPD, rhs if in_axes[1] == 0 else B
        )
        for i in range(3):
            a = matrices[i] if in_axes[0] == 0 else SPD
            b = rhs[i] if in_axes[1] == 0 else B
            assert_allclose(batched[i], cg_solve(a, b))
    grads = fg.vmap(fg.grad(lambda a, b: fnp.sum(dense_solve(a, b))))(
        np.stack([GENERAL, GENERAL.T]), rhs[:2]
    )
    for i, a in enumerate([GENERAL, GENERAL.T]):
        assert_allclose(grads[i], fg.grad(lambda a, b: fnp.sum(dense_solve(a, b)))(a, rhs[i]))


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_linear_solve_jit_matches_eager(backend):
    from checks import jit_backend

    def loss(a, b):
        return fnp.sum(cg_solve(a, b) ** 2)

    with jit_backend(backend):
        assert_allclose(fg.jit(cg_solve)(SPD, B), cg_solve(SPD, B))
        assert_allclose(fg.jit(fg.grad(loss))(SPD, B), fg.grad(loss)(SPD, B))


def test_linear_solve_errors_name_the_shapes():
    with pytest.raises(TypeError, match=r"f64\[3\]"):
        lax.custom_linear_solve(lambda x: x[:3], B, lambda mv, b: b)
    with pytest.raises(TypeError, match="solution"):
        lax.custom_linear_solve(lambda x: x, B, lambda mv, b: b[:2])
    with pytest.raises(TypeError, match="pair"):
        lax.custom_linear_solve(lambda x: x, B, lambda mv, b: b, has_aux=True)


# ---------------------------------------------------------------------------------------------
# custom_root


def newton(f, x0):
    """Newton's method in a while_loop, its derivative taken with finite differences inside a
    stop_gradient: nothing here is differentiable."""

    def step(x):
        slope = lax.stop_gradient((f(x + 1e-7) - f(x - 1e-7)) / 2e-7)
        return x - f(x) / slope

    return lax.while_loop(lambda x: fnp.abs(f(x)) > 1e-13, step, x0)


def scalar_tangent_solve(g, y):
    return y / g(1.0)


def root_sqrt(a):
    return lax.custom_root(lambda x: x * x - a, fnp.ones_like(a), newton, scalar_tangent_solve)


def test_root_scalar_values_and_derivatives():
    a = np.float64(2.0)
    assert_allclose(root_sqrt(a), np.sqrt(2.0))
    assert_allclose(fg.grad(root_sqrt)(a), 0.5 / np.sqrt(2.0))
    assert_allclose(fg.grad(fg.grad(root_sqrt))(a), -0.25 * 2.0**-1.5)
    check_grads(root_sqrt, (a,), order=2, modes=("fwd", "rev"))


def vector_root(params):
    """The root of tanh(x) + W x - c (a vector system) as a function of (W, c), by Newton
    iterations and a tangent solve by custom_linear_solve over the linearized map."""
    w, c = params["w"], params["c"]

    def f(x):
        return fnp.tanh(x) + w @ x - c

    def solve(f, x0):
        def step(x):
            jacobian = lax.stop_gradient(fg.jacfwd(f)(x))
            return x - fnp.linalg.solve(jacobian, f(x))

        return lax.fori_loop(0, 20, lambda i, x: step(x), x0)

    def tangent_solve(g, y):
        matrix = fg.jacfwd(g)(y)
        return lax.custom_linear_solve(
            g,
            y,
            lambda matvec, b: fnp.linalg.solve(matrix, b),
            lambda vecmat, b: fnp.linalg.solve(matrix.T, b),
        )

    return lax.custom_root(f, fnp.zeros_like(c), solve, tangent_solve)


def test_root_vector_derivatives():
    params = {"w": GENERAL / 4, "c": B}
    x = vector_root(params)
    assert_allclose(np.tanh(x) + params["w"] @ np.asarray(x), B, atol=1e-12)
    check_grads(vector_root, (params,), order=1)


def test_root_has_aux_and_vmap_and_jit():
    def f(a):
        def solve(f, x0):
            x = newton(f, x0)
            return x, fnp.asarray(7)

        return lax.custom_root(
            lambda x: x**3 - a, fnp.ones_like(a), solve, scalar_tangent_solve, has_aux=True
        )

    a = np.array([2.0, 5.0, 0.5])
    roots, aux = fg.vmap(f)(a)
    assert_allclose(roots, np.cbrt(a))
    assert np.asarray(aux).tolist() == [7, 7, 7]
    grads = fg.vmap(fg.grad(lambda a: f(a)[0]))(a)
    assert_allclose(grads, [fg.grad(lambda a: f(a)[0])(v) for v in a])
    assert_allclose(grads, a ** (-2 / 3) / 3)
    assert_allclose(fg.jit(fg.grad(lambda a: f(a)[0]))(a[1]), grads[1])
    assert_allclose(fg.jit(root_sqrt)(a[1]), root_sqrt(a[1]))


def test_root_errors_name_the_types():
    with pytest.raises(TypeError, match="f32"):
        lax.custom_root(lambda x: x[:1], np.ones(2, np.float32), newton, scalar_tangent_solve)


# ---------------------------------------------------------------------------------------------
# Convolution helpers, against loops in NumPy


def transposed_conv_reference(x, w, strides, padding):
    """NHWC input, HWIO kernel: every input pixel scatters its kernel-weighted copy into the
    output, offset by (kernel size - 1 - low padding)."""
    n, height, width, _ = x.shape
    kh, kw, _, features = w.shape
    (sh, sw) = strides
    full = np.zeros((n, (height - 1) * sh + kh, (width - 1) * sw + kw, features))
    for i in range(height):
        for j in range(width):
            for a in range(kh):
                for b in range(kw):
                    full[:, i * sh + kh - 1 - a, j * sw + kw - 1 - b] += x[:, i, j] @ w[a, b]
    if isinstance(padding, str):
        padding = [
            lax.convolutions._transpose_padding(k, s, padding) for k, s in zip(w.shape, strides)
        ]
    out_shape = [  # a kernel wider than the padded, dilated input leaves no positions
        max((size - 1) * s + 1 + lo + hi - k + 1, 0)
        for size, s, k, (lo, hi) in zip((height, width), strides, (kh, kw), padding)
    ]
    out = np.zeros((n, *out_shape, features))
    for p in range(out_shape[0]):
        for q in range(out_shape[1]):
            fp, fq = p + kh - 1 - padding[0][0], q + kw - 1 - padding[1][0]
            if 0 <= fp < full.shape[1] and 0 <= fq < full.shape[2]:
                out[:, p, q] = full[:, fp, fq]
    return out


def dilate(w, axes, factor):
    for axis in axes:
        shape = list(w.shape)
        shape[axis] = (shape[axis] - 1) * factor + 1
        spread = np.zeros(shape)
        index = [slice(None)] * w.ndim
        index[axis] = slice(None, None, factor)
        spread[tuple(index)] = w
        w = spread
    return w


@pytest.mark.parametrize("padding", ["SAME", "VALID", [(2, 1), (0, 3)]])
@pytest.mark.parametrize("strides", [(1, 1), (2, 3), (3, 1)])
def test_conv_transpose_against_a_scatter_loop(padding, strides):
    x = RNG.standard_normal((2, 4, 3, 3))
    w = RNG.standard_normal((3, 2, 3, 2))
    out = lax.conv_transpose(x, w, strides, padding)
    assert_allclose(out, transposed_conv_reference(x, w, strides, padding))
    dilated = lax.conv_transpose(x, w, strides, padding, rhs_dilation=(2, 2))
    assert_allclose(dilated, transposed_conv_reference(x, dilate(w, (0, 1), 2), strides, padding))
    flipped = lax.conv_transpose(
        x, w.transpose(0, 1, 3, 2), strides, padding, transpose_kernel=True
    )
    assert_allclose(flipped, transposed_conv_reference(x, w[::-1, ::-1], strides, padding))


@settings(max_examples=30, deadline=None)
@given(
    size=fst.shapes(2, 2, 1, 4),
    kernel=fst.shapes(2, 2, 1, 3),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.one_of(
        st.sampled_from(["SAME", "VALID"]),
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=2),
    ),
    seed=st.integers(0, 2**16),
)
@example(size=(1, 2), kernel=(3, 1), strides=(1, 1), padding=[(0, 0), (0, 0)], seed=0)
def test_conv_transpose_property(size, kernel, strides, padding, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, *size, 2))
    w = rng.standard_normal((*kernel, 2, 3))
    out = lax.conv_transpose(x, w, strides, padding)
    dn = ("NHWC", "HWIO", "NHWC")
    assert out.shape == lax.conv_transpose_shape_tuple(x.shape, w.shape, strides, padding, dn)
    assert_allclose(out, transposed_conv_reference(x, w, strides, padding))


def test_conv_transpose_is_the_gradient_of_a_strided_conv():
    # With transpose_kernel, conv_transpose is the vjp of conv_general_dilated in its input.
    x = RNG.standard_normal((1, 6, 6, 2))
    w = RNG.standard_normal((3, 3, 2, 4))
    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x):
        return lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=dn)

    out, pullback = fg.vjp(conv, x)
    ct = RNG.standard_normal(out.shape)
    assert_allclose(
        lax.conv_transpose(ct, w, (2, 2), "SAME", transpose_kernel=True), pullback(ct)[0]
    )


def test_conv_transpose_transformations():
    x = RNG.standard_normal((3, 1, 4, 3, 2))
    w = RNG.standard_normal((2, 3, 2, 2))

    def f(x, w):
        return lax.conv_transpose(x, w, (2, 1), "SAME")

    check_grads(f, (x[0], w), order=1)
    batched = fg.vmap(f, (0, None))(x, w)
    for i in range(3):
        assert_allclose(batched[i], f(x[i], w))
    assert_allclose(fg.jit(f)(x[0], w), f(x[0], w))
    nchw = lax.conv_transpose(
        x[0].transpose(0, 3, 1, 2),
        w.transpose(3, 2, 0, 1),
        (2, 1),
        "SAME",
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )
    assert_allclose(nchw, f(x[0], w).transpose(0, 3, 1, 2))


def patches_reference(x, filter_shape, strides, padding, lhs_dilation, rhs_dilation):
    """NCHW: the output's channel c * (kh * kw) + a * kw + b at (y, z) is the dilated, padded
    input at (y * stride + a * dilation, z * stride + b * dilation)."""
    x = dilate(x, (2, 3), lhs_dilation)
    (lo_h, hi_h), (lo_w, hi_w) = padding
    x = np.pad(x, ((0, 0), (0, 0), (lo_h, hi_h), (lo_w, hi_w)))
    kh, kw = filter_shape
    out_h = (x.shape[2] - ((kh - 1) * rhs_dilation + 1)) // strides[0] + 1
    out_w = (x.shape[3] - ((kw - 1) * rhs_dilation + 1)) // strides[1] + 1
    out = np.zeros((x.shape[0], x.shape[1] * kh * kw, out_h, out_w))
    for c in range(x.shape[1]):
        for a in range(kh):
            for b in range(kw):
                for y in range(out_h):
                    for z in range(out_w):
                        out[:, c * kh * kw + a * kw + b, y, z] = x[
                            :,
                            c,
                            y * strides[0] + a * rhs_dilation,
                            z * strides[1] + b * rhs_dilation,
                        ]
    return out


@pytest.mark.parametrize("dilations", [(1, 1), (2, 1), (1, 2)])
def test_conv_patches_against_a_loop(dilations):
    x = RNG.standard_normal((2, 3, 5, 4))
    padding = [(1, 0), (2, 1)]
    out = lax.conv_general_dilated_patches(
        x, (2, 3), (2, 1), padding, (dilations[0],) * 2, (dilations[1],) * 2
    )
    assert_allclose(out, patches_reference(x, (2, 3), (2, 1), padding, *dilations))
    same = lax.conv_general_dilated_patches(x, (3, 3), (1, 1), "SAME")
    assert_allclose(same, patches_reference(x, (3, 3), (1, 1), [(1, 1), (1, 1)], 1, 1))
    nhwc = lax.conv_general_dilated_patches(
        x.transpose(0, 2, 3, 1),
        (2, 3),
        (2, 1),
        padding,
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    assert_allclose(nhwc, patches_reference(x, (2, 3), (2, 1), padding, 1, 1).transpose(0, 2, 3, 1))


def test_conv_local_against_a_loop_and_transformations():
    x = RNG.standard_normal((2, 3, 5, 4))
    filter_shape, strides, padding = (2, 2), (1, 2), [(0, 1), (1, 0)]
    patches = patches_reference(x, filter_shape, strides, padding, 1, 1)
    rhs = RNG.standard_normal((4, 3 * 4, *patches.shape[2:]))  # O, C*window, output positions
    expected = np.zeros((2, 4, *patches.shape[2:]))
    for y in range(patches.shape[2]):
        for z in range(patches.shape[3]):
            expected[:, :, y, z] = patches[:, :, y, z] @ rhs[:, :, y, z].T

    def local(x, rhs):
        return lax.conv_general_dilated_local(x, rhs, strides, padding, filter_shape)

    assert_allclose(local(x, rhs), expected)
    check_grads(local, (x, rhs), order=1)
    batched = fg.vmap(local, (None, 0))(x, np.stack([rhs, 2 * rhs]))
    assert_allclose(batched[1], 2 * expected)
    assert_allclose(fg.jit(local)(x, rhs), expected)
    with pytest.raises(TypeError, match="spatial sizes"):
        local(x, rhs[..., :1])


def test_conv_shape_tuples():
    dn = ("NHWC", "HWIO", "NHWC")
    x = np.zeros((2, 7, 5, 3))
    w = np.zeros((3, 2, 3, 4))
    for padding in ["SAME", "VALID", [(1, 0), (2, 1)]]:
        conv = lax.conv_general_dilated(x, w, (2, 1), padding, dimension_numbers=dn)
        assert lax.conv_general_shape_tuple(x.shape, w.shape, (2, 1), padding, dn) == conv.shape
        transposed = lax.conv_transpose(x, w, (2, 1), padding)
        assert lax.conv_transpose_shape_tuple(x.shape, w.shape, (2, 1), padding, dn) == (
            transposed.shape
        )
    assert lax.conv_shape_tuple((4, 3, 7, 9), (5, 3, 3, 2), (2, 1), "VALID", 2) == (2, 5, 3, 8)
    assert lax.conv_general_permutations(("NHWC", "WHIO", "CNHW")) == (
        (0, 3, 2, 1),
        (3, 2, 0, 1),
        (1, 0, 3, 2),
    )
    assert lax.reduce_window_shape_tuple(
        (5, 7), (2, 3), (1, 2), [(0, 1), (2, 0)], (2, 1), (1, 2)
    ) == (9, 3)
    with pytest.raises(TypeError, match="'N' and 'C'"):
        lax.conv_general_permutations(("NHW", "HWIO", "NHWC"))


# ---------------------------------------------------------------------------------------------
# Small ones


def test_dtype():
    assert lax.dtype(1.0) == np.float32 and lax.dtype(3) == np.int32 and lax.dtype(True) == np.bool_
    assert lax.dtype(float) == np.float32 and lax.dtype("int8") == np.int8
    assert lax.dtype(np.zeros(2)) == np.float64 and lax.dtype(fnp.ones(2)) == np.float32
    with fg.enable_x64():
        assert lax.dtype(1.0) == np.float64


def test_broadcast_like():
    out = lax.broadcast_like(np.array([[1.0], [2.0]]), np.zeros((3, 2, 4)))
    assert_allclose(out, np.broadcast_to(np.array([[1.0], [2.0]]), (3, 2, 4)))
    assert fg.jit(lax.broadcast_like)(np.float32(2.0), np.zeros((2,))).shape == (2,)
    with pytest.raises(ValueError, match=r"\(3,\) to shape \(2, 4\)"):
        lax.broadcast_like(np.ones(3), np.zeros((2, 4)))


@pytest.mark.parametrize(
    "dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
)
def test_mulhi_against_python_integers(dtype):
    info = np.iinfo(dtype)
    bits = info.bits
    x = RNG.integers(info.min, info.max, size=40, dtype=dtype, endpoint=True)
    y = RNG.integers(info.min, info.max, size=40, dtype=dtype, endpoint=True)
    x[:4] = [info.min, info.max, 0, info.max]
    y[:4] = [info.min, info.min, info.max, info.max]

    def high(a, b):
        value = ((int(a) * int(b)) >> bits) % (1 << bits)
        return value - (1 << bits) if info.min < 0 and value >= 1 << (bits - 1) else value

    expected = [high(a, b) for a, b in zip(x, y)]
    out = lax.mulhi(x, y)
    assert out.dtype == np.dtype(dtype)
    assert np.asarray(out).tolist() == expected
    assert np.asarray(fg.jit(lax.mulhi)(x, y)).tolist() == expected
    assert np.asarray(fg.vmap(lax.mulhi)(x, y)).tolist() == expected
    with pytest.raises(TypeError, match="float32"):
        lax.mulhi(np.ones(2, np.float32), np.ones(2, np.float32))


def test_index_take():
    src = RNG.standard_normal((5, 4, 3))
    rows, cols = np.array([0, 4, -1, 2]), np.array([1, 3, 3, -4])
    out = lax.index_take(src, (rows, cols), (0, 1))
    assert_allclose(out, src[rows, cols])
    assert_allclose(lax.index_take(src, (cols,), (1,)), src[:, cols].transpose(1, 0, 2))
    check_grads(lambda s: lax.index_take(s, (rows, cols), (0, 1)), (src,), order=1)
    batched = fg.vmap(lambda s: lax.index_take(s, (rows, cols), (0, 1)))(np.stack([src, 2 * src]))
    assert_allclose(batched[1], 2 * src[rows, cols])
    with pytest.raises(TypeError, match="index array"):
        lax.index_take(src, (rows, cols[:2]), (0, 1))


def test_scatter_apply_applies_once_per_index():
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    operand = np.arange(6.0)
    indices = np.array([[1], [3], [1], [5]])

    def apply(x):
        return lax.scatter_apply(x, indices, lambda v: v * 2.0 + 1.0, dnums, update_shape=(4,))

    expected = operand.copy()
    for (i,) in indices:
        expected[i] = expected[i] * 2 + 1
    assert_allclose(apply(operand), expected)
    assert_allclose(fg.jit(apply)(operand), expected)
    assert_allclose(fg.vmap(apply)(np.stack([operand, -operand]))[1], apply(-operand))
    tangent = fg.jvp(apply, (operand,), (np.ones(6),))[1]
    assert_allclose(tangent, [1, 4, 1, 2, 1, 2])


def ragged_reference(lhs, rhs, group_sizes):
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for group, size in enumerate(group_sizes):
        out[start : start + size] = lhs[start : start + size] @ rhs[group]
        start += size
    return out


@pytest.mark.parametrize("group_sizes", [[2, 0, 4], [3, 4, 0], [1, 1, 1]])
def test_ragged_dot(group_sizes):
    group_sizes = np.array(group_sizes, np.int32)
    lhs = RNG.standard_normal((7, 3))
    rhs = RNG.standard_normal((3, 3, 2))
    assert_allclose(lax.ragged_dot(lhs, rhs, group_sizes), ragged_reference(lhs, rhs, group_sizes))
    check_grads(lambda a, b: lax.ragged_dot(a, b, group_sizes), (lhs, rhs), order=1)
    assert_allclose(
        fg.jit(lax.ragged_dot)(lhs, rhs, group_sizes), ragged_reference(lhs, rhs, group_sizes)
    )
    batched = fg.vmap(lax.ragged_dot, (None, None, 0))(
        lhs, rhs, np.stack([group_sizes, group_sizes[::-1]])
    )
    assert_allclose(batched[1], ragged_reference(lhs, rhs, group_sizes[::-1]))
    with pytest.raises(TypeError, match=r"\(3,\)"):
        lax.ragged_dot(lhs, rhs, group_sizes[:2])


@settings(max_examples=30, deadline=None)
@given(
    group_sizes=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    extra_rows=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_ragged_dot_property(group_sizes, extra_rows, seed):
    rng = np.random.default_rng(seed)
    m = sum(group_sizes) + extra_rows  # rows after the last group come out zero
    lhs = rng.standard_normal((m, 3))
    rhs = rng.standard_normal((len(group_sizes), 3, 2))
    sizes = np.array(group_sizes, np.int32)
    assert_allclose(lax.ragged_dot(lhs, rhs, sizes), ragged_reference(lhs, rhs, sizes))


def test_ragged_dot_general_forms():
    sizes = np.array([2, 0, 3], np.int32)
    dims = lax.RaggedDotDimensionNumbers
    # A ragged non-contracting dimension with a batch dimension: rows of each group use
    # their own rhs[g] in every batch.
    lhs = RNG.standard_normal((2, 6, 4))
    rhs = RNG.standard_normal((3, 2, 4, 5))
    out = lax.ragged_dot_general(lhs, rhs, sizes, dims(((((2,), (2,)), ((0,), (1,)))), (1,), (0,)))
    for b in range(2):
        assert_allclose(out[b], ragged_reference(lhs[b], rhs[:, b], sizes))
    # A ragged contracting dimension: one product per group over its columns.
    lhs = RNG.standard_normal((5, 6))
    rhs = RNG.standard_normal((6, 3))

    def by_columns(lhs, rhs):
        return lax.ragged_dot_general(lhs, rhs, sizes, dims((((1,), (0,)), ((), ())), (1,), ()))

    out = by_columns(lhs, rhs)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for g in range(3):
        cols = slice(starts[g], starts[g + 1])
        assert_allclose(out[g], lhs[:, cols] @ rhs[cols])
    check_grads(by_columns, (lhs, rhs), order=1)
    batched = fg.vmap(by_columns, (0, None))(np.stack([lhs, -lhs]), rhs)
    assert_allclose(batched[1], -out)
    # A ragged batch dimension: dot_general.
    lhs, rhs = RNG.standard_normal((6, 5, 4)), RNG.standard_normal((6, 4, 3))
    out = lax.ragged_dot_general(lhs, rhs, sizes, dims((((2,), (1,)), ((0,), (0,))), (0,), ()))
    assert_allclose(out, np.einsum("bmk,bkn->bmn", lhs, rhs))
    with pytest.raises(TypeError, match="group dimension of size 3"):
        lax.ragged_dot_general(lhs[0], rhs[:2], sizes, dims((((1,), (1,)), ((), ())), (0,), (0,)))


def test_rng_bit_generator():
    key = np.array([1, 2, 3, 4], np.uint32)
    for dtype in [np.uint8, np.uint16, np.uint32, np.uint64]:
        new_key, bits = lax.rng_bit_generator(key, (3, 5), dtype)
        assert new_key.shape == (4,) and new_key.dtype == np.uint32
        assert bits.shape == (3, 5) and bits.dtype == np.dtype(dtype)
    new_key, bits = lax.rng_bit_generator(key, (2000,))
    assert not np.array_equal(np.asarray(new_key), key)
    assert np.array_equal(np.asarray(lax.rng_bit_generator(key, (2000,))[1]), np.asarray(bits))
    assert not np.array_equal(
        np.asarray(lax.rng_bit_generator(new_key, (2000,))[1]), np.asarray(bits)
    )
    ones = np.unpackbits(np.asarray(bits).view(np.uint8)).mean()
    assert abs(ones - 0.5) < 0.01
    keys = np.stack([key, np.asarray(new_key)])
    batched = fg.vmap(lambda k: lax.rng_bit_generator(k, (4,), np.uint64))(keys)
    for i in range(2):
        one = lax.rng_bit_generator(keys[i], (4,), np.uint64)
        assert np.array_equal(np.asarray(batched[1][i]), np.asarray(one[1]))
    jitted = fg.jit(lambda k: lax.rng_bit_generator(k, (4,), np.uint8))(key)
    assert np.array_equal(
        np.asarray(jitted[1]), np.asarray(lax.rng_bit_generator(key, (4,), np.uint8)[1])
    )
    assert lax.RandomAlgorithm.RNG_DEFAULT == 0
    with pytest.raises(TypeError, match="uint32"):
        lax.rng_bit_generator(np.array([1, 2], np.uint32), (2,))
    with pytest.raises(TypeError, match="int32"):
        lax.rng_bit_generator(key, (2,), np.int32)


def test_rng_uniform():
    first = np.asarray(lax.rng_uniform(np.float32(-1), np.float32(2), (1000,)))
    second = np.asarray(lax.rng_uniform(np.float32(-1), np.float32(2), (1000,)))
    assert first.dtype == np.float32 and first.shape == (1000,)
    assert first.min() >= -1 and first.max() < 2 and abs(first.mean() - 0.5) < 0.1
    assert not np.array_equal(first, second)
    wide = np.asarray(lax.rng_uniform(np.float64(0), np.float64(1e-3), (10,)))
    assert wide.dtype == np.float64 and (wide < 1e-3).all()
    with pytest.raises(ValueError, match="scalars"):
        lax.rng_uniform(np.zeros(2), 1.0, (2,))


def test_platform_dependent_follows_the_platform_that_runs():
    from checks import jit_backend

    def f(x):
        return lax.platform_dependent(x, cpu=lambda v: v + 1.0, cuda=lambda v: v - 1.0)

    x = np.ones(3, np.float32)
    assert_allclose(f(x), 2.0)
    assert_allclose(fg.vmap(f)(np.ones((2, 3), np.float32)), 2.0)
    assert_allclose(fg.grad(lambda v: fnp.sum(f(v) ** 2))(x), 4.0)
    for backend, expected in [("numpy", 2.0), ("llvm", 2.0), ("cuda_emulator", 0.0)]:
        with jit_backend(backend):
            assert_allclose(fg.jit(f)(x), expected)
    g = fg.jit(lambda x: lax.platform_dependent(x, cuda=lambda v: 2 * v, default=lambda v: 3 * v))
    for backend, expected in [("numpy", 3.0), ("llvm", 3.0), ("cuda_emulator", 2.0)]:
        with jit_backend(backend):
            assert_allclose(g(x), expected)
    with pytest.raises(ValueError, match="tpu"):
        lax.platform_dependent(x, tpu=lambda v: v)
    with pytest.raises(NotImplementedError, match="no default"):
        lax.platform_dependent(x, cuda=lambda v: v)


def test_axis_size():
    def f(x):
        return x * lax.axis_size("i") + lax.axis_size(("i", "j"))

    out = fg.vmap(fg.vmap(f, axis_name="j"), axis_name="i")(np.ones((3, 2)))
    assert_allclose(out, np.full((3, 2), 3.0 + 6.0))
    assert_allclose(
        fg.vmap(fg.jit(lambda x: x * lax.axis_size("i")), axis_name="i")(np.ones(4)), 4.0
    )
    devices = fg.device_count("cpu")
    assert_allclose(
        fg.pmap(lambda x: x * lax.axis_size("d"), axis_name="d")(np.ones(devices)), devices
    )
    with pytest.raises(NameError, match="unbound axis name: k"):
        lax.axis_size("k")


def test_pshuffle_and_pswapaxes():
    x = np.arange(12.0).reshape(4, 3)
    shuffled = fg.vmap(lambda v: lax.pshuffle(v, "i", [2, 0, 3, 1]), axis_name="i")(x)
    assert_allclose(shuffled, x[[2, 0, 3, 1]])
    square = np.arange(9.0).reshape(3, 3)
    swapped = fg.vmap(lambda v: lax.pswapaxes(v, "i", 0), axis_name="i")(square)
    assert_allclose(swapped, square.T)
    with pytest.raises(ValueError, match="permutation"):
        fg.vmap(lambda v: lax.pshuffle(v, "i", [0, 0, 1, 2]), axis_name="i")(x)


def test_composite_is_its_decomposition():
    @functools.partial(lax.composite, name="my.double")
    def double(x):
        return 2 * x

    assert_allclose(double(np.ones(2)), 2.0)
    softplus = lax.composite(lambda x: fnp.log1p(fnp.exp(x)), "my.softplus", version=1)
    assert_allclose(fg.grad(softplus)(0.0), 0.5)
    assert softplus.composite_name == "my.softplus"


def test_conv_transpose_shape_tuple_is_never_negative():
    # A 3-wide kernel over one unpadded position leaves no output, not -1 of them.
    x = np.zeros((1, 1, 2, 2))
    w = np.zeros((3, 1, 2, 3))
    dn = ("NHWC", "HWIO", "NHWC")
    out = lax.conv_transpose(x, w, (1, 1), [(0, 0), (0, 0)])
    assert out.shape == (1, 0, 2, 3)
    shape = lax.conv_transpose_shape_tuple(x.shape, w.shape, (1, 1), [(0, 0), (0, 0)], dn)
    assert shape == (1, 0, 2, 3)
