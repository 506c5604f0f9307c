"""Array creation (funcgrad.numpy.creation) and the behaviour of the Array object itself."""

import copy
import pickle

import ml_dtypes
import numpy as np
import pytest
import strategies as fst
from checks import check_staging
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax

ALL_DTYPES = sorted(dtypes.supported_dtypes, key=lambda d: d.name)

# ---------------------------------------------------------------------------------------------
# array / asarray


@st.composite
def nested_lists(draw):
    """Nested lists of Python scalars of one kind, and the NumPy array they describe."""
    dtype = draw(st.sampled_from([dtypes.bool_, dtypes.int32, dtypes.float32]))
    values = draw(fst.arrays(dtype, fst.shapes(min_dims=1, max_dims=3, min_side=1)))
    return values.tolist(), values


@given(case=nested_lists())
def test_array_from_nested_lists_takes_default_dtypes(case):
    nested, values = case
    for make in (fnp.array, fnp.asarray):
        out = make(nested)
        assert out.dtype == values.dtype and out.shape == values.shape
        assert not out.weak_type
        np.testing.assert_array_equal(out, values)


def test_array_from_lists_examples():
    cases = [
        ([[1, 2], [3, 4]], dtypes.int32),
        ([1.0, 2.0], dtypes.float32),
        ([True, False], dtypes.bool_),
        ([1, 2.5], dtypes.float32),  # ints and floats mix to the default float
        ([True, 2], dtypes.int32),
        (((1, 2), (3, 4)), dtypes.int32),
        ([np.float64(1), 2], dtypes.float64),  # a NumPy float64 leaf is kept
        ([], dtypes.float32),
    ]
    for nested, dtype in cases:
        out = fnp.array(nested)
        assert out.dtype == dtype, nested
        np.testing.assert_array_equal(out, np.array(nested, dtype))


@given(x=fst.arrays(st.sampled_from(ALL_DTYPES), fst.shapes(max_dims=3)))
def test_array_from_numpy_keeps_dtype_and_copies(x):
    source = x.copy()
    for make in (fnp.array, fnp.asarray):
        out = make(source)
        assert out.dtype == x.dtype and out.shape == x.shape and not out.weak_type
        source.reshape(-1).view(np.uint8)[...] ^= 0xFF  # change every element of the source
        np.testing.assert_array_equal(out, x)  # the later write did not reach it
        source[...] = x


def test_numpy_scalars_and_float64_are_kept():
    assert fnp.asarray(np.float64(2.0)).dtype == dtypes.float64
    assert fnp.asarray(np.array(3, np.uint16)).dtype == dtypes.uint16
    assert fnp.array(np.ones((2, 2))).dtype == dtypes.float64
    assert (fnp.asarray(np.ones(3)) * 2.0).dtype == dtypes.float64


def test_python_scalars_are_weakly_typed():
    for value, dtype in ((1.0, dtypes.float32), (2, dtypes.int32)):
        for make in (fnp.array, fnp.asarray):
            out = make(value)
            assert out.dtype == dtype and out.weak_type and out.shape == ()
    assert not fnp.asarray(True).weak_type
    assert not fnp.array(1.0, dtype=np.float32).weak_type
    x_f16 = fnp.asarray(np.ones(2, np.float16))
    assert (fnp.asarray(1.0) + x_f16).dtype == dtypes.float16


@pytest.mark.parametrize("dtype", [*ALL_DTYPES, float, int, bool, "float16"], ids=str)
def test_dtype_argument(dtype):
    expected = dtypes.canonicalize(dtype) if not isinstance(dtype, str) else np.dtype(dtype)
    for source in ([1, 0, 1], np.array([1.0, 0.0, 1.0]), 1):
        out = fnp.array(source, dtype=dtype)
        assert out.dtype == expected and not out.weak_type
        # (bytes: NumPy's comparisons see no NaN of ml_dtypes' float8_e8m0fnu, 0 as it holds)
        assert np.asarray(out).tobytes() == np.array(source).astype(expected).tobytes()
    assert fnp.asarray(np.ones(2), dtype=dtype).dtype == expected


def test_array_of_an_array_and_ndmin():
    x = fnp.asarray(np.arange(3, dtype=np.int8))
    assert fnp.asarray(x) is x
    assert fnp.array(x, dtype=np.float32).dtype == dtypes.float32
    assert fnp.array([1.0, 2.0], ndmin=3).shape == (1, 1, 2)


def test_array_of_traced_values_stacks_them():
    check_staging(lambda x: fnp.array([x, 2 * x]), np.ones(3, np.float32))
    check_staging(lambda x: fnp.asarray(x, dtype=np.int32), np.ones(3, np.float32))


# ---------------------------------------------------------------------------------------------
# zeros, ones, full, empty and their *_like forms


def assert_same_values(actual, expected) -> None:
    """Equal elementwise, a NaN matching a NaN. NumPy's comparison treats the formats it does not
    know as floating (float4, the exponent-only float8_e8m0fnu, whose zeros are NaN) as opaque,
    so those are compared by their bits."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype
    if actual.dtype.kind == "V":
        actual, expected = (
            np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in (actual, expected)
        )
    np.testing.assert_array_equal(actual, expected)


shapes_as_int_or_tuple = fst.shapes(max_dims=3).flatmap(
    lambda s: st.sampled_from([s, s[0]]) if len(s) == 1 else st.just(s)
)


@given(shape=shapes_as_int_or_tuple, dtype=st.sampled_from([None, *ALL_DTYPES]))
def test_zeros_ones_full_empty(shape, dtype):
    tuple_shape = (shape,) if isinstance(shape, int) else shape
    expected_dtype = dtypes.float32 if dtype is None else dtype
    for make, value in ((fnp.zeros, 0), (fnp.ones, 1), (fnp.empty, None)):
        out = make(shape, dtype)
        assert out.shape == tuple_shape and out.dtype == expected_dtype and not out.weak_type
        if value is not None:
            assert_same_values(out, np.full(tuple_shape, value, expected_dtype))
    filled = fnp.full(shape, 1, dtype)
    assert filled.shape == tuple_shape
    assert filled.dtype == (dtypes.int32 if dtype is None else dtype)
    assert_same_values(filled, np.ones(tuple_shape, filled.dtype))


def test_full_fill_values():
    assert fnp.full((2,), 1.5).dtype == dtypes.float32
    assert fnp.full((2,), 1.5).weak_type  # a Python fill value stays weak, as in lax.full
    assert fnp.full(3, np.float64(1)).dtype == dtypes.float64
    assert fnp.full((2,), 7, np.int8).dtype == dtypes.int8
    rows = fnp.full((2, 3), [1, 2, 3])
    np.testing.assert_array_equal(rows, [[1, 2, 3], [1, 2, 3]])
    assert fnp.zeros(3, np.float64).dtype == dtypes.float64
    assert fnp.ones(2, float).dtype == dtypes.float32


def test_float_fill_values_of_integer_arrays_convert_as_arrays_do():
    # A Python float filling an integer array converts as an array of it does (NaN to 0, the
    # rest truncated and held to the dtype's range); NaN and the infinities raised ValueError.
    values = np.array([np.nan, np.inf, -np.inf, 1e10, -1.5, 2.7])
    for dtype in [np.int8, np.uint8, np.int32]:
        expected = np.asarray(fnp.asarray(values).astype(dtype))
        for k, value in enumerate(values.tolist()):
            filled = fnp.full(2, value, dtype=dtype)
            np.testing.assert_array_equal(filled, np.full(2, expected[k]), strict=True)
            like = fnp.full_like(np.zeros(2, dtype), value)
            np.testing.assert_array_equal(like, np.full(2, expected[k]), strict=True)
    multiplied = np.asarray(fnp.zeros(2, np.int32).at[0].multiply(np.nan))
    np.testing.assert_array_equal(multiplied, np.zeros(2, np.int32), strict=True)
    with pytest.raises(ValueError, match="NaN"):  # as NumPy: an array of NaN is not made
        fnp.asarray(np.nan, dtype=np.int32)


@given(x=fst.arrays(st.sampled_from(ALL_DTYPES), fst.shapes(max_dims=3)))
def test_like_functions_take_shape_and_dtype(x):
    for make, value in ((fnp.zeros_like, 0), (fnp.ones_like, 1), (fnp.empty_like, None)):
        out = make(x)
        assert out.shape == x.shape and out.dtype == x.dtype
        if value is not None:
            assert_same_values(out, np.full(x.shape, value, x.dtype))
        assert make(x, dtype=np.int8).dtype == dtypes.int8
        assert make(x, shape=4).shape == (4,)
        assert make(x, shape=(2, 1)).shape == (2, 1)
    full = fnp.full_like(x, 1)
    assert full.shape == x.shape and full.dtype == x.dtype
    assert_same_values(full, np.ones(x.shape, x.dtype))
    check_staging(fnp.zeros_like, x)
    check_staging(lambda x: fnp.full_like(x, 1), x)


def test_like_functions_accept_lists_and_keep_weak_types():
    assert fnp.ones_like([1, 2]).dtype == dtypes.int32
    assert fnp.zeros_like([1.0, 2.0]).shape == (2,)
    weak = fnp.asarray(2.0)
    for out in (fnp.zeros_like(weak), fnp.ones_like(weak), fnp.full_like(weak, 3)):
        assert out.weak_type and out.dtype == dtypes.float32  # as JAX: weakness follows `a`
    assert not fnp.zeros_like(weak, dtype=np.float32).weak_type
    check_staging(fnp.ones_like, 2.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: fnp.asarray(np.array([1.0], np.longdouble)),
        lambda: fnp.array(np.array([1.0]), dtype=np.longdouble),
        lambda: fnp.zeros(2, np.longdouble),
        lambda: fnp.ones_like(np.ones(2), dtype=np.longdouble),
    ],
)
def test_unsupported_dtypes_are_named(make):
    with pytest.raises(TypeError, match=np.dtype(np.longdouble).name):
        make()


def test_complex_python_values_make_complex64():
    z = fnp.array([1 + 2j, 3])
    assert z.dtype == np.complex64 and not z.weak_type
    np.testing.assert_array_equal(z, np.array([1 + 2j, 3], np.complex64))
    assert fnp.asarray(1j).weak_type and fnp.asarray(1j).dtype == np.complex64
    np.testing.assert_array_equal(fnp.full((2,), 1j, np.complex128), np.full(2, 1j))


# ---------------------------------------------------------------------------------------------
# The Array object


def test_arrays_are_immutable():
    x = fnp.array([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\.at\["):
        x[0] = 1
    view = np.asarray(x)
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[...] = 0
    np.testing.assert_array_equal(x, [1.0, 2.0])
    scalar = lax.add(1.0, 2.0)
    with pytest.raises(ValueError):
        np.asarray(scalar)[...] = 0
    assert float(scalar) == 3.0


def test_0d_exports_are_read_only():
    assert not np.asarray(lax.add(1.0, 2.0)).flags.writeable


def test_repr():
    assert repr(fnp.array([1.0, 2.0])) == "Array([1., 2.], dtype=float32)"
    assert repr(fnp.array(np.array([1.0, 2.0]))) == "Array([1., 2.], dtype=float64)"
    assert repr(fnp.array(np.array([1, 2], np.int8))) == "Array([1, 2], dtype=int8)"
    assert repr(fnp.array([[1, 2], [3, 4]])) == "Array([[1, 2],\n       [3, 4]], dtype=int32)"
    assert repr(fnp.asarray(3.0)) == "Array(3., dtype=float32, weak_type=True)"
    assert repr(fnp.zeros((0,))) == "Array([], dtype=float32)"
    assert repr(fnp.array([True, False])) == "Array([ True, False], dtype=bool)"
    assert repr(fnp.array(np.array([1.5, 2], ml_dtypes.bfloat16))) == (
        "Array([1.5, 2], dtype=bfloat16)"
    )
    assert str(fnp.array([1.0, 2.0])) == "[1. 2.]"


@given(
    x=fst.arrays(
        st.sampled_from([d for d in ALL_DTYPES if fg.dlpack.is_supported_dtype(d)]),
        fst.shapes(min_dims=1, max_dims=3),
    )
)
def test_dlpack_round_trip(x):
    out = np.from_dlpack(fnp.asarray(x))
    assert out.dtype == x.dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, x)


def test_from_dlpack_copies_host_memory_which_the_exporter_may_change():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    imported = fnp.from_dlpack(x)
    x[0, 0] = 7.0
    assert np.asarray(imported)[0, 0] == 0.0 and imported.shape == (2, 3)


def test_dlpack_round_trip_of_a_scalar():
    assert np.from_dlpack(fnp.asarray(np.float32(3.0))).shape == ()


def test_device_and_block_until_ready():
    x = fnp.array([1.0, 2.0])
    assert x.block_until_ready() is x
    assert x.device == fg.devices()[0]
    assert x.devices() == {fg.devices()[0]}
    assert x.device.platform == "cpu"


def test_python_conversions_of_0d_arrays():
    assert float(fnp.array(2.5)) == 2.5 and type(float(fnp.array(2.5))) is float
    assert int(fnp.array(7)) == 7 and type(int(fnp.array(7))) is int
    assert int(fnp.array(2.7)) == 2
    assert bool(fnp.array(True)) is True and bool(fnp.array(0.0)) is False
    assert [10, 20, 30][fnp.array(1)] == 20  # __index__
    with pytest.raises(TypeError, match="index"):
        [10, 20][fnp.array(1.0)]


def test_len_and_iteration():
    x = fnp.asarray(np.arange(6, dtype=np.int8).reshape(3, 2))
    assert len(x) == 3
    rows = list(x)
    assert len(rows) == 3 and all(isinstance(r, fg.Array) for r in rows)
    for row, expected in zip(rows, np.arange(6).reshape(3, 2)):
        assert row.dtype == dtypes.int8
        np.testing.assert_array_equal(row, expected)
    scalar = fnp.array(1.0)
    with pytest.raises(TypeError, match="0-d"):
        len(scalar)
    with pytest.raises(TypeError, match="0-d"):
        iter(scalar)
    assert [float(v) for v in fnp.array([1.5, 2.5])] == [1.5, 2.5]


@pytest.mark.parametrize(
    "x",
    [
        fnp.array([1.0, 2.0]),
        fnp.asarray(np.arange(4, dtype=np.uint16).reshape(2, 2)),
        fnp.asarray(np.float64(2.0)),
        fnp.asarray(np.array([1.5], ml_dtypes.bfloat16)),
        fnp.asarray(3.0),
    ],
    ids=["f32", "u16", "f64-0d", "bf16", "weak"],
)
def test_pickle_round_trip(x):
    out = pickle.loads(pickle.dumps(x))
    assert isinstance(out, fg.Array)
    assert out.aval == x.aval  # shape, dtype and weak type
    np.testing.assert_array_equal(out, x)
    assert copy.deepcopy(x) is x and copy.copy(x) is x  # immutable: copies may share


def test_arrays_are_unhashable():
    with pytest.raises(TypeError, match="unhashable"):
        hash(fnp.array([1.0]))
    with pytest.raises(TypeError, match="unhashable"):
        {fnp.array(1.0): 0}


@pytest.mark.parametrize(
    "name",
    [
        "bool_",
        "int8",
        "uint32",
        "int64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "float8_e4m3fn",
        "int4",
    ],
)
def test_scalar_types_are_dtypes_and_make_arrays_even_of_traced_values(name):
    scalar_type = getattr(fnp, name)
    dtype = np.dtype(scalar_type)  # NumPy reads the dtype from the name
    assert dtype == scalar_type.dtype and np.zeros(2, scalar_type).dtype == dtype
    assert scalar_type == dtype.type and hash(scalar_type) == hash(dtype.type)
    assert isinstance(dtype.type(1), scalar_type) and not isinstance(fnp.ones(2), scalar_type)
    assert fnp.ones(2).astype(scalar_type).dtype == dtype
    value = scalar_type(1)
    assert isinstance(value, fg.Array) and value.dtype == dtype and int(value.real) == 1
    traced = fg.jit(lambda x: scalar_type(x))(np.float32(1.0))
    assert traced.dtype == dtype and int(traced.real) == 1


def test_scalar_types_convert_as_numpy_does_and_pickle_by_name():
    np.testing.assert_array_equal(fnp.int32([2.7, -2.7]), np.int32([2.7, -2.7]))
    assert fnp.float32("1.5").dtype == np.float32 and float(fnp.float32("1.5")) == 1.5
    assert float(fnp.float8_e4m3fn(3.3)) == float(ml_dtypes.float8_e4m3fn(3.3))
    assert fnp.issubdtype(fnp.float32, fnp.floating) and np.issubdtype(fnp.int8, np.integer)
    assert pickle.loads(pickle.dumps(fnp.float32)) is fnp.float32
    assert repr(fnp.float32) == "<class 'funcgrad.numpy.float32'>"
    assert fnp.float_ == (np.float64 if fg.config.enable_x64 else np.float32)
