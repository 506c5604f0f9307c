"""The promotion lattice: algebraic properties and the weak-type rules.

The narrow formats (8- and 4-bit floats, 2- and 4-bit integers) have no upper bounds of their
own, so the lattice is partial: a join either exists or raises TypePromotionError, and the
properties hold of the outcome (a dtype, or the error)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes
from funcgrad.errors import TypePromotionError

NODES = [(d, False) for d in dtypes.supported_dtypes] + [
    (dtypes.int32, True),
    (dtypes.float32, True),
    (dtypes.complex64, True),
]
nodes = st.sampled_from(NODES)


def joined(*operands):
    """The promotion of `operands`, or None where they have none."""
    try:
        return dtypes.result_type_of(list(operands))
    except TypePromotionError:
        return None


@given(nodes, nodes)
def test_promotion_is_commutative(a, b):
    assert joined(a, b) == joined(b, a)


@given(nodes, nodes, nodes)
def test_promotion_is_associative(a, b, c):
    ab, bc = joined(a, b), joined(b, c)
    left = None if ab is None else joined(ab, c)
    right = None if bc is None else joined(a, bc)
    assert left == right


@given(nodes)
def test_promotion_is_idempotent(a):
    assert dtypes.result_type_of([a, a]) == a


@given(nodes, nodes)
def test_result_is_an_upper_bound(a, b):
    ab = joined(a, b)
    if ab is not None:
        assert dtypes.result_type_of([ab, a]) == ab


def test_only_the_narrow_formats_lack_a_join():
    for a in NODES:
        for b in NODES:
            if joined(a, b) is None:
                assert dtypes.is_narrow(a[0]) or dtypes.is_narrow(b[0]), (a, b)


def test_python_scalars_are_weak_and_take_the_arrays_dtype():
    assert dtypes.result_type_of([(dtypes.float16, False), (dtypes.float32, True)]) == (
        dtypes.float16,
        False,
    )
    assert dtypes.result_type_of([(dtypes.int8, False), (dtypes.int32, True)]) == (
        dtypes.int8,
        False,
    )
    # A weak float meeting an integer array gives the default float, still weak.
    assert dtypes.result_type_of([(dtypes.int32, False), (dtypes.float32, True)]) == (
        dtypes.float32,
        True,
    )


def test_float64_is_never_downcast():
    assert dtypes.promote_types(dtypes.float64, dtypes.float32) == dtypes.float64
    assert dtypes.result_type_of([(dtypes.float64, False), (dtypes.float32, True)]) == (
        dtypes.float64,
        False,
    )


def test_mixed_kinds():
    assert dtypes.promote_types(dtypes.bfloat16, dtypes.float16) == dtypes.float32
    assert dtypes.promote_types(dtypes.uint8, dtypes.int8) == dtypes.int16
    assert dtypes.promote_types(dtypes.int64, dtypes.uint64) == dtypes.float32
    assert dtypes.promote_types(dtypes.bool_, dtypes.uint32) == dtypes.uint32


def test_unsupported_dtypes_are_named():
    with pytest.raises(TypeError, match=np.dtype(np.longdouble).name):
        dtypes.check_supported(np.longdouble)
    assert dtypes.canonicalize(float) == dtypes.float32
    assert dtypes.canonicalize(int) == dtypes.int32


def test_default_scalar_types_follow_enable_x64():
    """fnp.float_, int_ and complex_ name the defaults: 32-bit, 64-bit under enable_x64 (they
    were float32, int32 and complex64 constants, so fnp.zeros(2, fnp.float_) stayed float32
    under x64)."""
    import funcgrad as fg
    import funcgrad.numpy as fnp

    assert (fnp.float_, fnp.int_, fnp.complex_) == (np.float32, np.int32, np.complex64)
    with fg.enable_x64():
        assert (fnp.float_, fnp.int_, fnp.complex_) == (np.float64, np.int64, np.complex128)
        assert fnp.zeros(2, fnp.float_).dtype == np.float64
        assert fnp.arange(3, dtype=fnp.int_).dtype == np.int64
    assert fnp.zeros(2, fnp.float_).dtype == np.float32
    with pytest.raises(AttributeError, match="no attribute 'float128'"):
        fnp.float128  # noqa: B018


def test_prng_key_dtype_names_no_funcgrad_key():
    """Keys are uint32 arrays, so code that unwraps typed keys first leaves them alone."""
    key = fg.random.key(0)
    assert not dtypes.issubdtype(key.dtype, dtypes.prng_key)
    assert not fg.numpy.issubdtype(np.float32, dtypes.extended)
    assert dtypes.issubdtype(dtypes.prng_key, dtypes.extended)
    assert dtypes.issubdtype(dtypes.prng_key, dtypes.prng_key)
    assert not dtypes.issubdtype(dtypes.extended, dtypes.prng_key)


def test_jax_dtypes_helpers():
    assert dtypes.canonicalize_dtype(float) == np.float32
    assert dtypes.canonicalize_dtype(np.float64) == np.float64
    assert dtypes.result_type(1.0, np.float16) == np.float16
    assert dtypes.result_type(1.0, return_weak_type_flag=True) == (np.float32, True)
    assert dtypes.result_type(fg.numpy.ones(2, np.int8), 3, return_weak_type_flag=True) == (
        np.int8,
        False,
    )
    scalar_types = [
        (True, bool),
        (np.ones(2, np.uint8), int),
        (fg.numpy.ones(2, dtypes.bfloat16), float),
        (1j, complex),
        (np.float16(1), float),
    ]
    for value, expected in scalar_types:
        assert dtypes.scalar_type_of(value) is expected
    bits = {np.bool_: 8, np.int8: 8, dtypes.bfloat16: 16, np.float32: 32, np.complex128: 128}
    for dtype, expected in bits.items():
        assert dtypes.itemsize_bits(dtype) == expected
    with pytest.raises(TypeError, match="does not support dtype"):
        dtypes.canonicalize_dtype(np.str_)


def test_arrays_in_the_other_byte_order_are_converted_to_this_ones():
    """A file's big-endian data: the same values, in the native dtype, everywhere."""
    big = np.arange(6, dtype=">f4").reshape(2, 3) / 7
    native = big.astype("=f4")
    assert fnp.asarray(big).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(fnp.sin(big)), np.asarray(fnp.sin(native)))
    np.testing.assert_array_equal(np.asarray(fg.jit(fnp.cos)(big)), np.asarray(fnp.cos(native)))
    np.testing.assert_array_equal(np.asarray(fg.grad(lambda x: (x**2).sum())(big)), 2 * native)
    np.testing.assert_array_equal(np.asarray(fg.vmap(fnp.sum)(big)), native.sum(1))
    assert fnp.asarray(np.arange(3, dtype=">i2")).dtype == np.int16


def test_a_jitted_function_refusing_an_argument_names_its_type_not_its_contents():
    with pytest.raises(
        TypeError, match=r"type ndarray \(funcgrad does not support dtype <U6"
    ) as caught:
        fg.jit(lambda a: a)(np.array(["secret", "words"] * 1000))
    assert "secret" not in str(caught.value)
