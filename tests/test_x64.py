"""`config.enable_x64`: 64-bit defaults, as under JAX's flag of the same name.

With the flag on, funcgrad's defaults are NumPy's own on a 64-bit platform, so NumPy is the
reference for the dtypes below; weak typing is unchanged (a Python scalar still takes the dtype
of the array it meets), and jit keeps the traces made under each setting apart.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from checks import assert_close

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax, nn


@pytest.fixture
def x64():
    with fg.enable_x64():
        yield


def test_python_scalars_and_creation_functions_take_numpys_64_bit_defaults(x64):
    made = {
        "array(1.0)": (fnp.array(1.0), np.array(1.0)),
        "array(1)": (fnp.array(1), np.array(1)),
        "array([1, 2])": (fnp.array([1, 2]), np.array([1, 2])),
        "array(1j)": (fnp.array(1j), np.array(1j)),
        "arange(3)": (fnp.arange(3), np.arange(3)),
        "arange(0.0, 1.0, 0.25)": (fnp.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25)),
        "zeros(2)": (fnp.zeros(2), np.zeros(2)),
        "ones(2)": (fnp.ones(2), np.ones(2)),
        "full(2, 1.5)": (fnp.full(2, 1.5), np.full(2, 1.5)),
        "eye(2)": (fnp.eye(2), np.eye(2)),
        "linspace(0, 1, 3)": (fnp.linspace(0, 1, 3), np.linspace(0, 1, 3)),
        "mean(arange(3))": (fnp.mean(fnp.arange(3)), np.mean(np.arange(3))),
        "sum(bools)": (fnp.sum(fnp.ones(3, bool)), np.sum(np.ones(3, bool))),
        "sum(int8)": (fnp.sum(fnp.ones(3, np.int8)), np.sum(np.ones(3, np.int8))),
        "sum(uint8)": (fnp.sum(fnp.ones(3, np.uint8)), np.sum(np.ones(3, np.uint8))),
        "float(x) dtype": (fnp.zeros(2, float), np.zeros(2, float)),
        "int dtype": (fnp.zeros(2, int), np.zeros(2, int)),
    }
    for what, (ours, numpy_value) in made.items():
        assert ours.dtype == numpy_value.dtype, what
        assert_close(ours, numpy_value, rtol=0, atol=0)
    assert fnp.array(1.0).weak_type and fnp.asarray(np.float32(1)).dtype == np.float32


def test_indices_and_counts_are_int64_like_numpys(x64):
    x = np.array([3.0, 1.0, 2.0, 1.0])
    ours = fnp.asarray(x)
    pairs = [
        (fnp.argmax(ours), np.argmax(x)),
        (fnp.argsort(ours), np.argsort(x, kind="stable")),
        (fnp.lexsort([ours]), np.lexsort([x])),
        (fnp.nonzero(ours > 1)[0], np.nonzero(x > 1)[0]),
        (fnp.argwhere(ours > 1), np.argwhere(x > 1)),
        (fnp.count_nonzero(ours > 1), np.count_nonzero(x > 1)),
        (fnp.bincount(fnp.array([0, 2, 2])), np.bincount(np.array([0, 2, 2]))),
        (fnp.unravel_index(fnp.array([5]), (2, 3))[1], np.unravel_index(np.array([5]), (2, 3))[1]),
        (fnp.ravel_multi_index((fnp.array([1]), fnp.array([2])), (2, 3)),
         np.ravel_multi_index((np.array([1]), np.array([2])), (2, 3))),
        (fnp.linalg.matrix_rank(fnp.eye(3)), np.linalg.matrix_rank(np.eye(3))),
        (fnp.linalg.lstsq(fnp.eye(3), fnp.ones(3))[2], np.int64(3)),
    ]  # fmt: skip
    for ours_value, numpy_value in pairs:
        assert ours_value.dtype == numpy_value.dtype == np.int64
        assert_close(ours_value, numpy_value, rtol=0, atol=0)
    values, index, inverse, counts = fnp.unique(
        ours, return_index=True, return_inverse=True, return_counts=True
    )
    expected = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for got, want in zip((values, index, inverse, counts), expected):
        assert got.dtype == want.dtype
        assert_close(got, want, rtol=0, atol=0)
    padded = fnp.unique(ours, size=5, fill_value=-1.0, return_counts=True)
    assert_close(padded[0], [1.0, 2.0, 3.0, -1.0, -1.0], rtol=0, atol=0)
    assert padded[1].dtype == np.int64


def test_weak_types_still_take_the_arrays_dtype(x64):
    f32 = fnp.ones(3, np.float32)
    i32 = fnp.ones(3, np.int32)
    assert (f32 * 2.0).dtype == np.float32
    assert (i32 + 1).dtype == np.int32
    assert (f32 + fnp.arange(3)).dtype == np.float32  # JAX's lattice: ints meet floats below
    assert lax.add(f32, 1.0).dtype == np.float32


def test_integers_up_to_32_bits_become_float32_where_a_float_is_needed(x64):
    """As in JAX: bool and integers of up to 32 bits compute in float32, 64-bit integers (and
    Python ints) in float64; funcgrad gave float64 for every integer under the flag."""
    narrow = [np.ones(3, d) for d in (np.bool_, np.int8, np.uint16, np.int32, np.uint32)]
    for x in narrow:
        for out in (
            fnp.sqrt(x),
            fnp.mean(x),
            fnp.divide(x, x),
            fnp.std(x),
            fnp.median(x),
            fnp.linalg.norm(x),
            fnp.interp(x, x, x),
            fnp.cov(np.stack([x, x])),
        ):
            assert out.dtype == np.float32, (x.dtype, out.dtype)
        assert fnp.fft.fft(x).dtype == np.complex64
        assert fnp.fft.irfft(x).dtype == np.float32
    wide = np.ones(3, np.int64)
    assert fnp.sqrt(wide).dtype == fnp.mean(wide).dtype == np.float64
    assert fnp.fft.fft(wide).dtype == np.complex128
    assert fnp.sqrt(3).dtype == fnp.divide(3, 4).dtype == np.float64
    assert fnp.divide(np.int32(3), 4).dtype == np.float32
    assert fnp.sort_complex(np.ones(2, np.float16)).dtype == np.complex64
    assert fnp.sort_complex(np.ones(2, np.int32)).dtype == np.complex64
    assert fnp.sort_complex(np.ones(2, np.int64)).dtype == np.complex128
    assert fnp.arctan2(np.int32(1), np.int64(1)).dtype == np.float64
    assert_close(fnp.sqrt(np.array([4, 9], np.int32)), np.float32([2, 3]), rtol=0, atol=0)


def test_python_scalars_compute_in_float64(x64):
    # float32 keeps about 7 digits: a sum of a million tenths would be off in the 4th.
    total = fnp.sum(fnp.arange(1_000_000) * 0.1)
    assert total.dtype == np.float64
    assert_close(total, np.sum(np.arange(1_000_000) * 0.1), rtol=1e-12)
    assert_close(fnp.exp(1.0), np.exp(1.0), rtol=1e-15)


def test_random_values_and_parameters_are_64_bit(x64):
    key = fg.random.PRNGKey(0)
    assert fg.random.PRNGKey(1).dtype == np.uint32  # keys stay uint32[2]
    assert fg.random.normal(key, (2,)).dtype == np.float64
    assert fg.random.uniform(key, (2,)).dtype == np.float64
    assert fg.random.randint(key, (2,), 0, 5).dtype == np.int64
    assert fg.random.categorical(key, fnp.zeros(3)).dtype == np.int64
    assert fg.random.permutation(key, 4).dtype == np.int64
    assert fg.random.bits(key, (2,)).dtype == np.uint64
    assert nn.initializers.lecun_normal()(key, (3, 2)).dtype == np.float64
    assert nn.one_hot(fnp.array([1]), 3).dtype == np.float64
    layer = nn.Linear(3, 2, key=key)
    assert layer.weight.dtype == np.float64
    uniform = np.asarray(fg.random.uniform(key, (10_000,)))
    assert 0 <= uniform.min() and uniform.max() < 1 and abs(uniform.mean() - 0.5) < 0.02


def test_a_convolution_layer_promotes_float32_inputs_to_its_float64_kernel(x64):
    key = fg.random.PRNGKey(1)
    conv = nn.Conv2d(2, 3, (3, 3), key=key)
    images = np.random.default_rng(0).standard_normal((1, 5, 5, 2)).astype(np.float32)
    out = conv(images)
    assert out.dtype == np.float64
    again = conv(images.astype(np.float64))
    assert_close(out, again, rtol=0, atol=0)


def test_derivatives_and_batching_take_64_bit_scalars(x64):
    def f(x):
        return fnp.sin(x) * x**3

    def reference(v):
        return np.sin(v) * v**3

    for x in (0.3, 1.7):
        derivative = fg.grad(f)(x)  # a Python float: float64 now
        assert derivative.dtype == np.float64
        h = 1e-6
        assert_close(derivative, (reference(x + h) - reference(x - h)) / (2 * h), rtol=1e-8)
    batched = fg.vmap(lambda x: x * 2 + fnp.arange(3))(fnp.ones((2, 3), np.int32))
    assert batched.dtype == np.int64
    assert_close(batched, [[2, 3, 4], [2, 3, 4]], rtol=0, atol=0)


def test_jit_traces_each_setting_apart():
    @fg.jit
    def f(x):
        return x + fnp.arange(3) * 0.5

    x = fnp.ones(3, np.int32)
    assert f(x).dtype == np.float32
    with fg.enable_x64():
        assert f(x).dtype == np.float64
        assert fg.jit(lambda: fnp.zeros(2))().dtype == np.float64
    assert f(x).dtype == np.float32
    assert_close(f(x), [1.0, 1.5, 2.0], rtol=0, atol=0)


def test_the_setting_is_a_flag_with_jaxs_name():
    assert not fg.config.enable_x64
    fg.config.update("jax_enable_x64", True)
    try:
        assert fnp.array(1.0).dtype == np.float64
    finally:
        fg.config.update("enable_x64", False)
    assert fnp.array(1.0).dtype == np.float32
    with pytest.raises(TypeError, match="enable_x64 must be True or False"):
        fg.config.update("enable_x64", 1)
    with fg.enable_x64(), fg.enable_x64(False):
        assert fnp.arange(2).dtype == np.int32


def test_the_environment_variable_turns_it_on():
    code = "import funcgrad.numpy as fnp; print(fnp.array(1.0).dtype, fnp.arange(2).dtype)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FUNCGRAD_ENABLE_X64": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["float64", "int64"]


def test_lax_helpers_index_with_int32_under_x64(x64):
    pivots = fnp.array([2, 2, 2], np.int32)
    permutation = fg.lax.linalg.lu_pivots_to_permutation(pivots, 3)
    order = list(range(3))
    for i, p in enumerate([2, 2, 2]):
        order[i], order[p] = order[p], order[i]
    assert_close(permutation, order, rtol=0, atol=0)
