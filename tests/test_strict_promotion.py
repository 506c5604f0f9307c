"""`numpy_dtype_promotion("strict")`: operands of different dtypes do not meet implicitly.

The expected outcomes come from the rule itself, written out below with no lattice: equal
dtypes meet, a Python scalar meets an array whose kind is its own or above it (int < float <
complex), and booleans meet only booleans."""

import itertools

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
import funcgrad.scipy.special as fsp
from funcgrad.errors import TypePromotionError

ARRAY_DTYPES = ["bool", "int8", "uint8", "int32", "float16", "bfloat16", "float32", "complex64"]
SCALARS = [True, 2, 2.0, 2j]
KIND_RANK = {"i": 0, "u": 0, "f": 1, "V": 1, "c": 2}  # (bfloat16's NumPy kind is "V")


def _scalar_rank(x) -> int:
    return {int: 0, float: 1, complex: 2}[type(x)]


def _strict_result(a, b):
    """The dtype (and weak type) of a + b under the strict rule, or None where it raises."""
    a_scalar, b_scalar = not isinstance(a, fg.Array), not isinstance(b, fg.Array)
    if a_scalar and b_scalar:
        if (type(a) is bool) != (type(b) is bool):
            return None
        if type(a) is bool:
            return np.dtype(bool), False
        rank = max(_scalar_rank(a), _scalar_rank(b))
        return np.dtype(["int32", "float32", "complex64"][rank]), True
    if a_scalar:
        a, b, b_scalar = b, a, True
    if not b_scalar:
        return (a.dtype, False) if a.dtype == b.dtype else None
    if type(b) is bool or a.dtype == np.dtype(bool):
        return (a.dtype, False) if type(b) is bool and a.dtype == np.dtype(bool) else None
    fits = KIND_RANK[a.dtype.kind] >= _scalar_rank(b)
    return (a.dtype, False) if fits else None


def _operands():
    arrays = [fnp.ones(3, d) for d in ARRAY_DTYPES]
    return arrays + SCALARS


def _name(x) -> str:
    return str(x.dtype) if isinstance(x, fg.Array) else type(x).__name__


@pytest.mark.parametrize("how", ["eager", "jit", "vmap"])
def test_every_pair_meets_as_the_strict_rule_says(how):
    add = {
        "eager": fnp.add,
        "jit": fg.jit(fnp.add),
        "vmap": lambda a, b: fg.vmap(fnp.add, in_axes=(0, None))(fnp.stack([a, a]), b)[0],
    }[how]
    with fg.numpy_dtype_promotion("strict"):
        for a, b in itertools.product(_operands(), repeat=2):
            if how == "vmap" and not isinstance(a, fg.Array):
                continue
            expected = _strict_result(a, b)
            where = f"{_name(a)} + {_name(b)}"
            if expected is None:
                with pytest.raises(TypePromotionError, match="numpy_dtype_promotion"):
                    add(a, b)
                continue
            out = add(a, b)
            assert (out.dtype, out.weak_type) == expected, where


def test_standard_promotion_is_unchanged_outside_the_block():
    with fg.numpy_dtype_promotion("strict"):
        with pytest.raises(TypePromotionError):
            fnp.ones(2, "int32") + fnp.ones(2, "float32")
    assert (fnp.ones(2, "int32") + fnp.ones(2, "float32")).dtype == np.float32
    assert fg.config.numpy_dtype_promotion == "standard"


def test_the_error_names_both_dtypes_and_a_conversion():
    with fg.numpy_dtype_promotion("strict"):
        with pytest.raises(TypePromotionError, match=r"int32 and float32 .*astype\('float32'\)"):
            fnp.ones(2, "int32") * fnp.ones(2, "float32")
        with pytest.raises(TypePromotionError, match=r"int32 and Python float"):
            fnp.ones(2, "int32") * 2.5
        with pytest.raises(TypePromotionError, match="int32 and float32"):
            fnp.promote_types("int32", "float32")
        # The narrow formats keep their own message under either setting.
        with pytest.raises(TypePromotionError, match="8-bit floats"):
            fnp.ones(2, "float8_e4m3fn") + fnp.ones(2, "float32")


def test_jit_keeps_a_trace_per_setting():
    f = fg.jit(lambda x, y: x + y)
    x, y = fnp.ones(2, "int32"), fnp.ones(2, "float32")
    assert f(x, y).dtype == np.float32  # traced under "standard"
    with fg.numpy_dtype_promotion("strict"):
        with pytest.raises(TypePromotionError):
            f(x, y)
        with pytest.raises(TypePromotionError):
            f.lower(x, y)
    assert f(x, y).dtype == np.float32


def test_transformed_code_is_checked_too():
    with fg.numpy_dtype_promotion("strict"):
        with pytest.raises(TypePromotionError):
            fg.grad(lambda x: (x * fnp.ones(2, "int32")).sum())(1.0)
        with pytest.raises(TypePromotionError):
            fg.make_jaxpr(lambda x: x + fnp.ones(2, "bfloat16"))(fnp.ones(2))
        assert fg.grad(lambda x: (x * 3.0).sum())(fnp.ones(2)).tolist() == [3.0, 3.0]


def test_updates_meet_the_array_they_update():
    x = fnp.zeros(3, "int32")
    assert x.at[0].set(1.5).tolist() == [1, 0, 0]  # (standard: the value is converted)
    with fg.numpy_dtype_promotion("strict"):
        with pytest.raises(TypePromotionError):
            x.at[0].set(1.5)
        assert x.at[0].set(4).tolist() == [4, 0, 0]


def test_the_setting_is_checked_and_has_the_config_name():
    with pytest.raises(ValueError, match="'standard' or 'strict'"):
        fg.config.update("jax_numpy_dtype_promotion", "loose")
    fg.config.update("jax_numpy_dtype_promotion", "strict")
    try:
        with pytest.raises(TypePromotionError):
            fnp.ones(2, "int8") + fnp.ones(2, "int16")
    finally:
        fg.config.update("numpy_dtype_promotion", "standard")
    assert (fnp.ones(2, "int8") + True).dtype == np.int8


# Functions whose own computations mixed kinds; under strict they must give what they give
# under the standard setting.
FUNCTIONS_OF_ONE_DTYPE = [
    (lambda x: fnp.corrcoef(x), "complex64"),
    (lambda x: fnp.compress(x[0], x), "bool"),
    (lambda x: fnp.packbits(x), "bool"),
    (lambda x: fnp.union1d(x[0], x[1]), "bool"),
    (lambda x: fnp.linspace(x[0, 0], x[1, 1], 5), "int32"),
    (lambda x: fnp.geomspace(x[0, 0], x[1, 1] * 4, 5), "bfloat16"),
    (lambda x: fsp.fresnel(x), "float32"),
    (lambda x: fsp.sici(x), "float32"),
    (lambda x: fnp.linalg.pinv(x), "complex64"),
    (lambda x: fnp.linalg.lstsq(x, x)[0], "complex64"),
    (lambda x: fnp.linalg.slogdet(x), "complex64"),
]


@pytest.mark.parametrize("index", range(len(FUNCTIONS_OF_ONE_DTYPE)))
def test_library_functions_do_not_mix_dtypes_of_their_own(index):
    f, dtype = FUNCTIONS_OF_ONE_DTYPE[index]
    values = np.array([[1.5, 0.25, 3.0], [0.5, 2.0, 0.0], [1.0, 1.0, 4.0]])
    if dtype == "complex64":
        values = values + 1j * values[::-1]
    x = fnp.asarray(values.astype(dtype) if dtype != "bfloat16" else values, dtype)
    expected = fg.tree_util.tree_leaves(f(x))
    with fg.numpy_dtype_promotion("strict"):
        got = fg.tree_util.tree_leaves(f(x))
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


def test_linspace_of_integer_ends_is_float32_under_x64():
    with fg.enable_x64():
        assert fnp.linspace(fnp.int32(0), fnp.int32(1), 3).dtype == np.float32
        assert fnp.linspace(0, 1, 3).dtype == np.float64
        assert fnp.geomspace(fnp.int8(1), 2, 3).dtype == np.float32
