"""The keyword arguments funcgrad's public functions share with JAX's: each does what it does
there (values against NumPy or the documented meaning), and the values a parameter cannot
take in funcgrad are refused with a clear error."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import numpy as np
import pytest
from checks import cpu_devices, jit_backend
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax, random, tree_util
from funcgrad.scipy import special
from funcgrad.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

NUM_DEVICES = 4


@pytest.fixture(autouse=True)
def four_devices():
    with cpu_devices(NUM_DEVICES):
        yield


def mesh_of(size: int = NUM_DEVICES) -> Mesh:
    return Mesh(np.array(fg.devices()[:size]), ("x",))


def split_rows() -> NamedSharding:
    return NamedSharding(mesh_of(), PartitionSpec("x"))


# ---------------------------------------------------------------------------------------------
# Positional names that follow JAX's


def test_positional_names_follow_jax():
    names = {
        fnp.arctan2: ["x1", "x2"],
        fnp.atan2: ["x1", "x2"],
        fnp.divide: ["x1", "x2"],
        fnp.true_divide: ["x1", "x2"],
        fnp.real: ["val"],
        fnp.linalg.cross: ["x1", "x2", "axis"],
        lax.nextafter: ["x1", "x2"],
    }
    for function, expected in names.items():
        assert list(inspect.signature(function).parameters) == expected, function
    assert list(inspect.signature(fnp.clip).parameters)[0] == "arr"


def test_renamed_parameters_are_taken_by_their_new_names():
    assert fnp.issubdtype(arg1=np.float32, arg2=np.floating)
    assert not fnp.issubdtype(arg1=np.int8, arg2=fnp.floating)
    np.testing.assert_allclose(special.erf(x=0.5), 0.5204998778, rtol=1e-6)
    np.testing.assert_allclose(special.erfinv(x=0.5204998778), 0.5, rtol=1e-5)
    p, q = np.array([0.2, 0.5, 0.0]), np.array([0.4, 0.5, 0.3])
    np.testing.assert_allclose(special.rel_entr(p=p, q=q), p * np.log(np.where(p, p / q, 1)))
    np.testing.assert_allclose(
        special.kl_div(p=p, q=q), p * np.log(np.where(p, p / q, 1)) - p + q, atol=1e-15
    )
    np.testing.assert_allclose(fnp.empty_like(prototype=np.ones((2, 3))).shape, (2, 3))
    assert fg.reshard(xs=fnp.ones(4), out_shardings=split_rows()).sharding == split_rows()


def test_config_context_managers_take_new_val():
    with fg.enable_x64(new_val=True):
        assert fnp.ones(2).dtype == np.float64
    assert fnp.ones(2).dtype == np.float32
    with fg.numpy_dtype_promotion(new_val="strict"):
        with pytest.raises(fg.errors.TypePromotionError):
            fnp.ones(2, np.float32) + fnp.ones(2, np.float64)
    with fg.default_device(new_val=fg.devices()[0]), fg.transfer_guard(new_val="allow"):
        pass


# ---------------------------------------------------------------------------------------------
# The ufuncs' out and where, stack's and isposinf's out


UFUNCS = [
    fnp.add,
    fnp.subtract,
    fnp.multiply,
    fnp.maximum,
    fnp.minimum,
    fnp.logaddexp,
    fnp.logaddexp2,
    fnp.logical_and,
    fnp.logical_or,
    fnp.logical_xor,
]
INTEGER_UFUNCS = [fnp.bitwise_and, fnp.bitwise_or, fnp.bitwise_xor]


@pytest.mark.parametrize("ufunc", UFUNCS + INTEGER_UFUNCS, ids=lambda u: u.__name__)
def test_binary_ufuncs_take_out_and_where_at_their_defaults(ufunc):
    integer = ufunc in INTEGER_UFUNCS
    x = np.array([3, -1, 4, 0]) if integer else np.array([0.5, -1.5, 2.0, 0.0], np.float32)
    y = np.array([1, 5, -9, 2]) if integer else np.array([1.5, 2.5, -0.25, 0.0], np.float32)
    expected = getattr(np, ufunc.__name__)(x, y)
    for options in ({}, {"out": None}, {"where": None}, {"where": True}):
        np.testing.assert_allclose(ufunc(x, y, **options), expected, rtol=1e-6)
    with pytest.raises(NotImplementedError, match="out argument"):
        ufunc(x, y, out=np.empty_like(expected))
    with pytest.raises(NotImplementedError, match="where argument"):
        ufunc(x, y, where=np.array([True, False, True, True]))


def test_unary_functions_refuse_out():
    x = np.array([-np.inf, 1.0, np.inf], np.float32)
    np.testing.assert_array_equal(fnp.negative(x, out=None, where=True), -x)
    np.testing.assert_array_equal(fnp.isneginf(x, out=None), np.isneginf(x))
    np.testing.assert_array_equal(fnp.isposinf(x, out=None), np.isposinf(x))
    for call in (
        lambda: fnp.negative(x, out=x),
        lambda: fnp.negative(x, where=x > 0),
        lambda: fnp.isneginf(x, out=x),
        lambda: fnp.isposinf(x, out=x),
        lambda: fnp.stack([x, x], out=np.empty((2, 3))),
    ):
        with pytest.raises(NotImplementedError, match="immutable|where argument"):
            call()
    np.testing.assert_array_equal(fnp.stack([x, x], 1, None, np.float64), np.stack([x, x], 1))


def test_ufunc_options_leave_the_jitted_program_alone():
    program = fg.make_jaxpr(lambda a, b: fnp.add(a, b, out=None, where=True))(1.0, 2.0)
    assert [e.primitive.name for e in program.jaxpr.eqns] == ["add"]


# ---------------------------------------------------------------------------------------------
# device= and out_sharding=: placement and layout of results


CREATIONS = {
    "zeros": lambda **kw: fnp.zeros(8, **kw),
    "ones": lambda **kw: fnp.ones((8,), np.int32, **kw),
    "empty": lambda **kw: fnp.empty(8, **kw),
    "full": lambda **kw: fnp.full(8, 2.5, **kw),
    "zeros_like": lambda **kw: fnp.zeros_like(np.ones(8), **kw),
    "ones_like": lambda **kw: fnp.ones_like(np.ones(8), **kw),
    "full_like": lambda **kw: fnp.full_like(np.ones(8), 3, **kw),
    "arange": lambda **kw: fnp.arange(8, **kw),
    "array": lambda **kw: fnp.array(np.arange(8.0), **kw),
    "asarray": lambda **kw: fnp.asarray(np.arange(8.0), **kw),
}
PLACED_ONLY = {
    "empty_like": lambda **kw: fnp.empty_like(np.ones(8), **kw),
    "eye": lambda **kw: fnp.eye(8, **kw),
    "linspace": lambda **kw: fnp.linspace(0, 1, 8, **kw),
    "fftfreq": lambda **kw: fnp.fft.fftfreq(8, **kw),
    "rfftfreq": lambda **kw: fnp.fft.rfftfreq(14, **kw),
}


@pytest.mark.parametrize("name", sorted({**CREATIONS, **PLACED_ONLY}))
def test_creation_functions_place_their_result_on_device(name):
    make = {**CREATIONS, **PLACED_ONLY}[name]
    device = fg.devices()[2]
    placed = make(device=device)
    assert placed.sharding == SingleDeviceSharding(device)
    np.testing.assert_array_equal(placed, make())
    assert placed.dtype == make().dtype
    laid_out = make(device=split_rows())  # device= takes what device_put takes
    assert laid_out.sharding == split_rows()


@pytest.mark.parametrize("name", sorted(CREATIONS))
def test_creation_functions_lay_out_their_result(name):
    make = CREATIONS[name]
    laid_out = make(out_sharding=split_rows())
    assert laid_out.sharding == split_rows()
    np.testing.assert_array_equal(laid_out, make())
    with mesh_of():
        assert make(out_sharding=PartitionSpec("x")).sharding == split_rows()
    with pytest.raises(ValueError, match="not both"):
        make(device=fg.devices()[1], out_sharding=split_rows())
    with pytest.raises(TypeError, match="NamedSharding or a PartitionSpec"):
        make(out_sharding=fg.devices()[1])
    with pytest.raises(ValueError, match="needs a mesh"):
        make(out_sharding=PartitionSpec("x"))


def test_placement_inside_jit_lays_out_the_program_result():
    x = np.arange(8.0, dtype=np.float32)
    laid_out = fg.jit(lambda a: fnp.asarray(a, out_sharding=split_rows()) + 1)
    np.testing.assert_array_equal(laid_out(x), x + 1)
    constrained = fg.jit(lambda a: fnp.asarray(a + 1, out_sharding=split_rows()))
    assert constrained(x).sharding == split_rows()
    program = fg.make_jaxpr(lambda a: fnp.asarray(a, out_sharding=split_rows()))(x)
    assert [e.primitive.name for e in program.jaxpr.eqns] == ["sharding_constraint"]
    # One device inside a program: the value stays where the program runs.
    on_device = fg.jit(lambda a: fg.device_put(a * 2, fg.devices()[1]))
    np.testing.assert_array_equal(on_device(x), 2 * x)
    np.testing.assert_array_equal(fg.grad(lambda a: fnp.asarray(a, device=fg.devices()[1]))(2.0), 1)


def test_operations_lay_out_their_result():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(8, 3)), rng.normal(size=(3, 4))
    layout = split_rows()
    cases = {
        "dot": (lambda **kw: fnp.dot(a, b, **kw), a @ b),
        "matmul": (lambda **kw: fnp.matmul(a, b, **kw), a @ b),
        "tensordot": (lambda **kw: fnp.tensordot(a, b, 1, **kw), a @ b),
        "linalg.tensordot": (lambda **kw: fnp.linalg.tensordot(a, b, axes=1, **kw), a @ b),
        "einsum": (lambda **kw: fnp.einsum("ij,jk->ik", a, b, **kw), a @ b),
        "reshape": (lambda **kw: fnp.reshape(a.T, (12, 2), **kw), a.T.reshape(12, 2)),
        "ravel": (lambda **kw: fnp.ravel(a, **kw), a.ravel()),
        "broadcast_to": (lambda **kw: fnp.broadcast_to(b[0], (8, 4), **kw), np.tile(b[0], (8, 1))),
        "repeat": (
            lambda **kw: fnp.repeat(b[:, 0], [2, 3, 3], **kw),
            np.repeat(b[:, 0], [2, 3, 3]),
        ),
        "bincount": (
            lambda **kw: fnp.bincount(np.array([0, 2, 2, 7]), length=8, **kw),
            np.bincount([0, 2, 2, 7], minlength=8),
        ),
        "percentile": (
            lambda **kw: fnp.percentile(a, 30, axis=1, **kw),
            np.percentile(a, 30, axis=1),
        ),
        "lax.dot_general": (
            lambda **kw: lax.dot_general(a, b, (((1,), (0,)), ((), ())), **kw),
            a @ b,
        ),
        "lax.dot": (lambda **kw: lax.dot(a, b, **kw), a @ b),
        "lax.reshape": (lambda **kw: lax.reshape(a, (4, 6), **kw), a.reshape(4, 6)),
        "lax.broadcast": (lambda **kw: lax.broadcast(b[0], (8,), **kw), np.tile(b[0], (8, 1))),
        "lax.broadcast_in_dim": (
            lambda **kw: lax.broadcast_in_dim(a[:, 0], (8, 2), (0,), **kw),
            np.tile(a[:, :1], (1, 2)),
        ),
        "lax.broadcasted_iota": (
            lambda **kw: lax.broadcasted_iota(np.int32, (8, 2), 0, **kw),
            np.tile(np.arange(8)[:, None], (1, 2)),
        ),
        "lax.reduce_sum": (lambda **kw: lax.reduce_sum(a, (1,), **kw), a.sum(1)),
        "lax.reduce": (lambda **kw: lax.reduce(a, 0.0, lax.add, (1,), **kw), a.sum(1)),
        "lax.empty": (lambda **kw: lax.empty((8,), np.float32, **kw), np.zeros(8)),
    }
    for name, (compute, expected) in cases.items():
        laid_out = compute(out_sharding=layout)
        assert laid_out.sharding == layout, name
        np.testing.assert_allclose(laid_out, expected, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(compute(), expected, rtol=1e-12, err_msg=name)


def test_lax_full_takes_a_sharding_as_device_put_does():
    device = fg.devices()[3]
    for sharding in (split_rows(), SingleDeviceSharding(device)):
        full = lax.full((8,), 1.5, sharding=sharding)
        assert full.sharding == sharding
        np.testing.assert_array_equal(full, np.full(8, 1.5))
        like = lax.full_like(np.zeros(8, np.int32), 7, sharding=sharding)
        assert like.sharding == sharding and like.dtype == np.int32
        np.testing.assert_array_equal(like, np.full(8, 7))


def test_convolutions_and_ragged_products_lay_out_their_result():
    rng = np.random.default_rng(1)
    lhs, rhs = rng.normal(size=(8, 5, 2)), rng.normal(size=(3, 2, 4))
    plain = lax.conv_general_dilated(
        lhs, rhs, (1,), "SAME", dimension_numbers=("NHC", "HIO", "NHC")
    )
    laid_out = lax.conv_general_dilated(
        lhs,
        rhs,
        (1,),
        "SAME",
        dimension_numbers=("NHC", "HIO", "NHC"),
        out_sharding=split_rows(),
    )
    assert laid_out.sharding == split_rows()
    np.testing.assert_array_equal(laid_out, plain)
    rows, experts = rng.normal(size=(8, 3)), rng.normal(size=(2, 3, 4))
    sizes = np.array([5, 3], np.int32)
    ragged = lax.ragged_dot(rows, experts, sizes, out_sharding=split_rows())
    assert ragged.sharding == split_rows()
    expected = np.concatenate([rows[:5] @ experts[0], rows[5:] @ experts[1]])
    np.testing.assert_allclose(ragged, expected, rtol=1e-12)


def test_rng_bit_generator_lays_out_its_bits():
    key = np.array([1, 2, 3, 4], np.uint32)
    new_key, bits = lax.rng_bit_generator(key, (8,), out_sharding=split_rows())
    assert bits.sharding == split_rows() and not hasattr(new_key, "_sharding")
    np.testing.assert_array_equal(bits, lax.rng_bit_generator(key, (8,))[1])


SAMPLERS = {
    "uniform": lambda k, **kw: random.uniform(k, (8,), **kw),
    "normal": lambda k, **kw: random.normal(k, (8,), **kw),
    "bits": lambda k, **kw: random.bits(k, (8,), **kw),
    "randint": lambda k, **kw: random.randint(k, (8,), 0, 10, **kw),
    "bernoulli": lambda k, **kw: random.bernoulli(k, 0.3, (8,), **kw),
    "gamma": lambda k, **kw: random.gamma(k, 2.0, (8,), **kw),
    "permutation": lambda k, **kw: random.permutation(k, 8, **kw),
    "categorical": lambda k, **kw: random.categorical(k, np.zeros(3), shape=(8,), **kw),
    "multivariate_normal": lambda k, **kw: random.multivariate_normal(
        k, np.zeros(2), np.eye(2), (8,), **kw
    ),
    "orthogonal": lambda k, **kw: random.orthogonal(k, 8, **kw),
    "truncated_normal": lambda k, **kw: random.truncated_normal(k, -1.0, 1.0, (8,), **kw),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_lay_out_the_same_draws(name):
    draw = SAMPLERS[name]
    key = random.key(5)
    laid_out = draw(key, out_sharding=split_rows())
    assert laid_out.sharding == split_rows()
    np.testing.assert_array_equal(laid_out, draw(key))
    assert "out_sharding" in inspect.signature(random.normal).parameters


def test_random_keys_have_no_dtype_but_none():
    np.testing.assert_array_equal(random.key(3, dtype=None), random.PRNGKey(3))
    words = np.array([1, 2], np.uint32)
    np.testing.assert_array_equal(random.wrap_key_data(words, dtype=None), words)
    for call in (
        lambda: random.key(3, dtype=np.uint32),
        lambda: random.wrap_key_data(words, dtype="key"),
    ):
        with pytest.raises(NotImplementedError, match="no key dtypes"):
            call()


def test_device_put_options():
    x = fnp.arange(4.0)
    assert fg.device_put(x) is x
    copied = fg.device_put(x, may_alias=False)
    assert copied is not x
    np.testing.assert_array_equal(copied, x)
    tree = fg.device_put({"a": x, "b": x}, may_alias={"a": False, "b": None})
    assert tree["a"] is not x and tree["b"] is x
    kept = fg.device_put(x, fg.devices()[0], src=fg.devices()[0], donate=True)
    assert not x.is_deleted()
    np.testing.assert_array_equal(kept, x)
    with pytest.raises(ValueError, match="cannot both be True"):
        fg.device_put(x, donate=True, may_alias=True)
    with pytest.raises(TypeError, match="must hold bools"):
        fg.device_put(x, may_alias="no")


# ---------------------------------------------------------------------------------------------
# Statistics, sorting, indexing


@given(
    shape=st.sampled_from([(5,), (3, 4), (2, 3, 4)]),
    ddof=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_variances_take_a_given_mean(shape, ddof, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape)
    a.flat[0] = np.nan
    axis = len(shape) - 1
    mean = rng.normal(size=shape[:-1] + (1,))
    for name in ("var", "std", "nanvar", "nanstd"):
        ours = getattr(fnp, name)(a, axis, ddof=ddof, mean=mean)
        np.testing.assert_allclose(ours, getattr(np, name)(a, axis, ddof=ddof, mean=mean))
    # The true mean gives the plain variance.
    true_mean = np.nanmean(a, axis, keepdims=True)
    np.testing.assert_allclose(fnp.nanvar(a, axis, mean=true_mean), np.nanvar(a, axis))


def test_a_mean_of_the_wrong_shape_is_refused():
    a = np.ones((3, 4))
    with pytest.raises(ValueError, match=r"mean of shape \(3,\) does not broadcast"):
        fnp.var(a, 1, mean=np.ones(3))
    with pytest.raises(ValueError, match="keepdims=True"):
        fnp.nanstd(a, 1, mean=np.ones((3, 2)))


def test_unique_sorts_whatever_sorted_says():
    a = np.array([3, 1, 2, 3, 1])
    for flag in (True, False):
        values, counts = fnp.unique(a, return_counts=True, sorted=flag)
        np.testing.assert_array_equal(values, [1, 2, 3])
        np.testing.assert_array_equal(counts, [2, 1, 2])


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int64])
@pytest.mark.parametrize("descending", [False, True])
def test_argsort_gives_indices_of_dtype(dtype, descending):
    a = np.random.default_rng(2).integers(0, 5, size=(3, 7))
    indices = fnp.argsort(a, axis=1, descending=descending, dtype=dtype)
    assert indices.dtype == dtype
    expected = np.argsort(-a if descending else a, axis=1, kind="stable")
    np.testing.assert_array_equal(indices, expected)


def test_argsort_refuses_an_index_dtype_that_cannot_hold_the_indices():
    with pytest.raises(TypeError, match="integer dtype"):
        fnp.argsort(np.ones(3), dtype=np.float32)
    with pytest.raises(ValueError, match="cannot hold"):
        fnp.argsort(np.ones(300), dtype=np.int8)


def test_ravel_multi_index_gives_indices_of_dtype():
    index = (np.array([1, 4, 0]), np.array([5, 0, 2]))
    flat = fnp.ravel_multi_index(index, (5, 6), dtype=np.int16)
    assert flat.dtype == np.int16
    np.testing.assert_array_equal(flat, np.ravel_multi_index(index, (5, 6)))
    np.testing.assert_array_equal(
        fnp.ravel_multi_index(index, (5, 6), order="F", dtype=np.uint8),
        np.ravel_multi_index(index, (5, 6), order="F"),
    )
    with pytest.raises(ValueError, match="cannot hold"):
        fnp.ravel_multi_index(index, (500, 600), dtype=np.int16)
    with pytest.raises(TypeError, match="integer dtype"):
        fnp.ravel_multi_index(index, (5, 6), dtype=np.float32)


@pytest.mark.parametrize("method", [None, "scan", "scan_unrolled", "sort", "compare_all"])
@pytest.mark.parametrize("right", [False, True])
def test_digitize_by_each_search_method(method, right):
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.5, 9.0])
    for bins in (np.array([0.0, 1.0, 2.5]), np.array([2.5, 1.0, 0.0])):
        np.testing.assert_array_equal(
            fnp.digitize(x, bins, right, method=method), np.digitize(x, bins, right)
        )
    with pytest.raises(ValueError, match="method must be"):
        fnp.digitize(x, bins, method="binary")


def test_reshape_takes_any_copy():
    a = np.arange(6.0)
    for copy in (None, True, False):
        np.testing.assert_array_equal(fnp.reshape(a, (2, 3), copy=copy), a.reshape(2, 3))
        np.testing.assert_array_equal(
            fnp.reshape(a, (3, 2), "F", copy=copy), a.reshape(3, 2, order="F")
        )


def test_array_order_is_k_only():
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(fnp.array(a, order="K"), a)
    np.testing.assert_array_equal(fnp.asarray(a, order=None), a)
    for order in ("C", "F", "A"):
        with pytest.raises(NotImplementedError, match="no memory layout"):
            fnp.asarray(a, order=order)
        with pytest.raises(NotImplementedError, match="no memory layout"):
            fnp.array(a, order=order)


def take_along_reference(values, indices, mode, wrap):
    """NumPy's reading of take_along_axis on a 1-d array: a negative index counts from the end
    when `wrap`, then an index out of bounds is clamped ('clip', 'promise_in_bounds') or gives
    NaN ('fill', None)."""
    n = len(values)
    out = []
    for i in indices:
        if wrap and i < 0:
            i += n
        if 0 <= i < n:
            out.append(values[i])
        elif mode in ("clip", "promise_in_bounds"):
            out.append(values[min(max(i, 0), n - 1)])
        else:
            out.append(np.nan)
    return np.array(out)


@pytest.mark.parametrize("mode", [None, "fill", "clip", "promise_in_bounds"])
@pytest.mark.parametrize("wrap", [None, True, False])
@pytest.mark.parametrize("index_dtype", [np.int8, np.int32])
def test_take_along_axis_wraps_negative_indices_as_asked(mode, wrap, index_dtype):
    values = np.arange(10.0, 15.0)
    indices = np.array([-1, 0, 2, -6, 5, 7], index_dtype)
    expected = take_along_reference(
        values, indices, mode, wrap if wrap is not None else mode != "promise_in_bounds"
    )

    def take(v, i):
        return fnp.take_along_axis(v, i, 0, mode=mode, wrap_negative_indices=wrap)

    np.testing.assert_array_equal(take(values, indices), expected)
    np.testing.assert_array_equal(fg.jit(take)(values, indices), expected)


# ---------------------------------------------------------------------------------------------
# funcgrad.lax


TRANSCENDENTAL = [
    lax.exp,
    lax.exp2,
    lax.log,
    lax.log1p,
    lax.expm1,
    lax.tanh,
    lax.logistic,
    lax.sin,
    lax.cos,
    lax.tan,
    lax.sqrt,
    lax.rsqrt,
    lax.cbrt,
]


@pytest.mark.parametrize("function", TRANSCENDENTAL, ids=lambda f: f.__name__)
def test_accuracy_requests_are_checked_and_change_no_value(function):
    x = np.array([0.25, 0.5, 1.5], np.float32)
    plain = function(x)
    for accuracy in (
        None,
        lax.AccuracyMode.HIGHEST,
        lax.AccuracyMode.DEFAULT,
        lax.Tolerance(atol=1e-3),
        lax.Tolerance(rtol=1e-6, ulps=2),
    ):
        np.testing.assert_array_equal(function(x, accuracy=accuracy), plain)
    np.testing.assert_array_equal(
        fg.jit(lambda a: function(a, accuracy=lax.AccuracyMode.HIGHEST))(x),
        fg.jit(function)(x),
    )
    with pytest.raises(TypeError, match="AccuracyMode or a Tolerance"):
        function(x, accuracy="highest")


def test_tolerances_are_checked():
    with pytest.raises(ValueError, match="non-negative"):
        lax.Tolerance(atol=-1.0)
    with pytest.raises(ValueError, match="at least one"):
        lax.Tolerance()


def test_mul_with_out_dtype_multiplies_the_converted_operands():
    x, y = np.array([100, -128, 7], np.int8), np.array([3, -1, 100], np.int8)
    product = lax.mul(x, y, out_dtype=np.int32)
    assert product.dtype == np.int32
    np.testing.assert_array_equal(product, x.astype(np.int32) * y.astype(np.int32))
    half = np.array([1.01, 3.01], dtype=fnp.bfloat16)
    widened = lax.mul(half, half, out_dtype=np.float32)
    np.testing.assert_array_equal(widened, half.astype(np.float32) ** 2)
    np.testing.assert_allclose(
        fg.grad(lambda a: lax.mul(a, a, out_dtype=np.float64))(np.float32(3.0)), 6.0
    )
    mixed = lax.mul(np.full(2, 100, np.int8), np.full(2, 3, np.int32), out_dtype=np.int16)
    np.testing.assert_array_equal(mixed, np.full(2, 300, np.int16))
    with pytest.raises(TypeError, match="same dtypes"):
        lax.mul(np.ones(2, np.int8), np.ones(2, np.int32))


def test_dot_with_dimension_numbers_is_dot_general():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 3, 5))
    product = lax.dot(a, b, dimension_numbers=(((2,), (1,)), ((0,), (0,))))
    np.testing.assert_allclose(product, np.einsum("bij,bjk->bik", a, b), rtol=1e-12)
    with pytest.raises(TypeError, match="dimension_numbers"):
        lax.dot(a, b)


def test_einsum_contracts_pairs_with_the_given_dot_general():
    calls = []

    def counting_dot_general(lhs, rhs, dimension_numbers, precision=None, **kw):
        calls.append(dimension_numbers)
        return lax.dot_general(lhs, rhs, dimension_numbers, precision, **kw)

    rng = np.random.default_rng(4)
    a, b, c = rng.normal(size=(2, 3)), rng.normal(size=(3, 4)), rng.normal(size=(4, 5))
    out = fnp.einsum("ij,jk,kl->il", a, b, c, _dot_general=counting_dot_general)
    np.testing.assert_allclose(out, a @ b @ c, rtol=1e-12)
    assert len(calls) == 2


def test_dynamic_slices_count_negative_indices_from_the_end_only_if_allowed():
    x = np.arange(10.0)
    np.testing.assert_array_equal(lax.dynamic_slice(x, (-2,), (3,)), [7, 8, 9])
    minus_two = np.int32(-2)
    for allow, expected in ((True, [7, 8, 9]), (False, [0, 1, 2])):
        np.testing.assert_array_equal(
            lax.dynamic_slice(x, (minus_two,), (3,), allow_negative_indices=allow), expected
        )
        np.testing.assert_array_equal(
            fg.jit(lambda i, a=allow: lax.dynamic_slice_in_dim(x, i, 3, allow_negative_indices=a))(
                minus_two
            ),
            expected,
        )
    np.testing.assert_array_equal(
        lax.dynamic_index_in_dim(x, np.int32(-1), allow_negative_indices=False), [0]
    )
    updated = lax.dynamic_update_slice(x, np.ones(2), (np.int32(-1),), allow_negative_indices=False)
    np.testing.assert_array_equal(updated, np.r_[1.0, np.arange(1.0, 10.0)])
    np.testing.assert_array_equal(
        lax.dynamic_update_index_in_dim(x, 5.0, np.int32(-1), 0, allow_negative_indices=False),
        np.r_[5.0, np.arange(1.0, 10.0)],
    )
    np.testing.assert_array_equal(
        lax.dynamic_update_slice_in_dim(x, np.ones(2), np.int32(-2), 0),
        np.r_[np.arange(8.0), 1.0, 1.0],
    )
    grid = np.arange(9.0).reshape(3, 3)
    corner = lax.dynamic_slice(
        grid, (np.int32(-1), np.int32(-1)), (1, 1), allow_negative_indices=(True, False)
    )
    np.testing.assert_array_equal(corner, [[6.0]])
    with pytest.raises(ValueError, match="allow_negative_indices=False"):
        lax.dynamic_slice(x, (-2,), (3,), allow_negative_indices=False)
    with pytest.raises(TypeError, match="one per dimension"):
        lax.dynamic_slice(grid, (0, 0), (1, 1), allow_negative_indices=(True,))


def test_cond_and_switch_take_one_operand_by_name():
    assert lax.cond(True, lambda v: v + 1, lambda v: v - 1, operand=2.0) == 3.0
    assert lax.cond(False, lambda v: v + 1, lambda v: v - 1, operand=2.0) == 1.0
    branches = [lambda v: v * 2, lambda v: v * 3]
    assert lax.switch(1, branches, operand=2.0) == 6.0
    assert fg.jit(lambda i, v: lax.switch(i, branches, operand=v))(0, 2.0) == 4.0
    with pytest.raises(TypeError, match="not both"):
        lax.cond(True, lambda v: v, lambda v: v, 1.0, operand=2.0)
    with pytest.raises(TypeError, match="not both"):
        lax.switch(0, branches, 1.0, operand=2.0)


def test_all_gather_to_names_the_result_kind():
    x = np.arange(4.0)

    def gathered(to):
        return fg.vmap(lambda v: lax.all_gather(v, "i", to=to), axis_name="i")(x)

    np.testing.assert_array_equal(gathered("invarying"), np.tile(x, (4, 1)))
    np.testing.assert_array_equal(gathered("varying"), gathered("invarying"))
    with pytest.raises(ValueError, match="'varying' or 'invarying'"):
        gathered("reduced")
    with pytest.raises(NotImplementedError, match="axis_index_groups"):
        fg.vmap(
            lambda v: lax.all_gather(v, "i", axis_index_groups=[[0, 1], [2, 3]], to="invarying"),
            axis_name="i",
        )(x)


def input_gradient(cotangent, kernel, size, stride, low, dilation):
    """The gradient with respect to its input of the 1-d convolution
    y[o] = sum_j x[o * stride + j * dilation - low] kernel[j]."""
    grad = np.zeros(size)
    for o, c in enumerate(cotangent):
        for j, w in enumerate(kernel):
            i = o * stride + j * dilation - low
            if 0 <= i < size:
                grad[i] += c * w
    return grad


@pytest.mark.parametrize(
    "size, kernel_size, stride, low, high, dilation",
    [(7, 3, 2, 1, 1, 1), (8, 3, 1, 0, 2, 1), (9, 2, 3, 2, 0, 1), (10, 3, 2, 2, 1, 2)],
)
def test_conv_transpose_with_consistent_padding_transposes_the_forward_convolution(
    size, kernel_size, stride, low, high, dilation
):
    rng = np.random.default_rng(size)
    kernel = rng.normal(size=kernel_size)
    outputs = (size + low + high - (kernel_size - 1) * dilation - 1) // stride + 1
    cotangent = rng.normal(size=outputs)
    transposed = lax.conv_transpose(
        cotangent.reshape(1, outputs, 1),
        kernel.reshape(kernel_size, 1, 1),
        (stride,),
        ((low, high),),
        rhs_dilation=(dilation,),
        transpose_kernel=True,
        use_consistent_padding=True,
    )
    np.testing.assert_allclose(
        np.asarray(transposed).ravel(),
        input_gradient(cotangent, kernel, size, stride, low, dilation),
        rtol=1e-12,
        atol=1e-12,
    )


def test_scan_accepts_split_transpose():
    def cumulative(xs, split):
        return lax.scan(lambda c, x: (c + x, c * x), 0.0, xs, _split_transpose=split)

    xs = np.arange(1.0, 5.0)
    np.testing.assert_array_equal(cumulative(xs, True)[1], cumulative(xs, False)[1])
    grads = [fg.grad(lambda v, s=s: cumulative(v, s)[1].sum())(xs) for s in (True, False)]
    np.testing.assert_array_equal(grads[0], grads[1])


# ---------------------------------------------------------------------------------------------
# Transformations


def test_checkpoint_static_argnames_by_name_or_position():
    def scaled(x, n):
        return x * n if n > 1 else x  # Python control flow on n: it must be static

    remat = fg.checkpoint(scaled, static_argnames="n")
    assert remat(2.0, n=3) == 6.0 and remat(2.0, 3) == 6.0
    assert fg.grad(remat)(2.0, n=3) == 3.0
    assert fg.grad(remat)(2.0, 1) == 1.0
    with pytest.raises(NotImplementedError, match="static_argnums or static_argnames"):
        fg.checkpoint(scaled, concrete=True)
    with pytest.raises(NotImplementedError, match="concrete"):
        fg.remat(scaled, concrete=False)


def test_reduce_axes_is_refused_unless_empty():
    def square(x):
        return x * x

    assert fg.grad(square, reduce_axes=())(3.0) == 6.0
    assert fg.value_and_grad(square, reduce_axes=())(3.0) == (9.0, 6.0)
    assert fg.vjp(square, 3.0, reduce_axes=())[1](1.0) == (6.0,)
    for call in (
        lambda: fg.grad(square, reduce_axes=("i",)),
        lambda: fg.value_and_grad(square, reduce_axes=("i",)),
        lambda: fg.vjp(square, 3.0, reduce_axes=("i",)),
    ):
        with pytest.raises(NotImplementedError, match="reduce_axes"):
            call()


def test_make_jaxpr_binds_the_axis_env():
    program = fg.make_jaxpr(
        lambda x: lax.psum(x, "i") + lax.axis_index("j"), axis_env=[("i", 4), ("j", 2)]
    )(1.0)
    assert {e.primitive.name for e in program.jaxpr.eqns} >= {"psum", "axis_index"}
    gathered = fg.make_jaxpr(lambda x: lax.all_gather(x, "i"), axis_env=[("i", 4)])(1.0)
    assert gathered.out_avals[0].shape == (4,)
    with pytest.raises(NameError, match="unbound axis name"):
        fg.make_jaxpr(lambda x: lax.psum(x, "i"))(1.0)
    with pytest.raises(ValueError, match="positive"):
        fg.make_jaxpr(lambda x: x, axis_env=[("i", 0)])(1.0)


def test_vmap_sum_match_sums_mapped_outputs_of_unmapped_axes():
    xs = np.arange(6.0).reshape(3, 2)

    def f(x):
        return x * 2.0, x.sum()

    mapped, summed = fg.vmap(f, out_axes=(0, None), sum_match=True)(xs)
    np.testing.assert_array_equal(mapped, xs * 2.0)
    assert summed == sum(row.sum() for row in xs)
    constant = fg.vmap(lambda x: 5.0, out_axes=None, sum_match=True)(xs)
    assert constant == 5.0  # an unmapped output is returned as it is
    with pytest.raises(ValueError, match="sum_match=True"):
        fg.vmap(f, out_axes=(0, None))(xs)


def test_local_devices_takes_the_older_host_id():
    with pytest.warns(DeprecationWarning, match="process_index"):
        assert fg.local_devices(host_id=0) == fg.local_devices(process_index=0)
    with pytest.raises(ValueError, match="disagree"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fg.local_devices(process_index=0, host_id=1)


def test_jit_donates_arguments_by_name():
    step = fg.jit(lambda p, g: p - 0.5 * g, donate_argnames="p")
    with jit_backend("llvm"):
        for call in (lambda p, g: step(p, g), lambda p, g: step(p=p, g=g)):
            p, g = fnp.asarray(np.arange(1000.0, dtype=np.float32)), fnp.ones(1000)
            expected = np.asarray(p) - 0.5
            np.testing.assert_array_equal(call(p, g), expected)
            assert p.is_deleted() and not g.is_deleted()
    with pytest.raises(ValueError, match="both static and donated"):
        fg.jit(lambda p, n: p * n, static_argnames="n", donate_argnames="n")


def test_jit_runs_on_the_device_or_backend_asked_for():
    x = np.arange(3.0, dtype=np.float32)
    device = fg.devices()[2]
    out = fg.jit(lambda a: a + 1, device=device)(x)
    np.testing.assert_array_equal(out, x + 1)
    assert out.sharding == SingleDeviceSharding(device)
    np.testing.assert_array_equal(
        fg.jit(lambda a: a * 2, backend="cpu", keep_unused=True)(x), 2 * x
    )
    with pytest.raises(RuntimeError, match="not available"):
        fg.jit(lambda a: a, backend="tpu")
    with pytest.raises(ValueError, match="not both"):
        fg.jit(lambda a: a, device=device, backend="cpu")
    with pytest.raises(ValueError, match="not both"):
        fg.jit(lambda a: a, device=device, out_shardings=split_rows())


def test_jit_inline_traces_into_the_caller():
    inner = fg.jit(lambda a: a * 2.0 + 1.0, inline=True)
    program = fg.make_jaxpr(lambda a: inner(a) - 1.0)(1.0)
    assert [e.primitive.name for e in program.jaxpr.eqns] == ["mul", "add", "sub"]
    staged = fg.make_jaxpr(lambda a: fg.jit(lambda b: b * 2.0)(a))(1.0)
    assert [e.primitive.name for e in staged.jaxpr.eqns] == ["jit"]
    assert inner(2.0) == 5.0 and fg.grad(inner)(2.0) == 2.0


def test_jit_takes_no_compiler_options():
    assert fg.jit(lambda a: a + 1, compiler_options={})(1.0) == 2.0
    with pytest.raises(ValueError, match="no options.*xla_cpu_enable_fast_math"):
        fg.jit(lambda a: a, compiler_options={"xla_cpu_enable_fast_math": False})


# ---------------------------------------------------------------------------------------------
# tree_util


def test_register_dataclass_drops_fields():
    @dataclasses.dataclass
    class Point:
        x: float
        y: float
        cache: object = None

    tree_util.register_dataclass(Point, ["x", "y"], [], drop_fields=["cache"])
    leaves, tree = tree_util.tree_flatten(Point(1.0, 2.0, cache="stale"))
    assert leaves == [1.0, 2.0]
    assert tree_util.tree_unflatten(tree, [3.0, 4.0]) == Point(3.0, 4.0)
    with pytest.raises(ValueError, match="drop_fields"):
        tree_util.register_dataclass(Point, ["x"], [], drop_fields=["cache"])
    with pytest.raises(ValueError, match="kept and dropped"):
        tree_util.register_dataclass(Point, ["x", "y"], ["cache"], drop_fields=["cache"])


def test_register_pytree_node_takes_keys():
    class Pair:
        def __init__(self, first, second):
            self.first, self.second = first, second

    tree_util.register_pytree_node(
        Pair,
        lambda p: ((p.first, p.second), None),
        lambda _, children: Pair(*children),
        lambda p: (
            ((tree_util.GetAttrKey("first"), p.first), (tree_util.GetAttrKey("second"), p.second)),
            None,
        ),
    )
    paths = [path for path, _ in tree_util.tree_flatten_with_path(Pair(1, 2))[0]]
    assert paths == [(tree_util.GetAttrKey("first"),), (tree_util.GetAttrKey("second"),)]
    assert tree_util.tree_map(lambda v: v * 10, Pair(1, 2)).second == 20
