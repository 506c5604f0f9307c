"""JAX's smaller top-level modules: fg.ops (segment reductions), fg.flatten_util (ravel_pytree),
fg.dlpack, fg.custom_derivatives, fg.version, and the config options as context managers
(debug_nans, debug_infs, log_compiles).

Segment reductions are checked against NumPy's unbuffered ufunc.at over the in-range ids,
their derivatives against central differences and a hand-written product rule, vmap against a
Python loop and jit against eager calls.
"""

import logging
import re
from importlib import metadata
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import ops
from funcgrad.errors import ConcretizationTypeError
from funcgrad.flatten_util import ravel_pytree
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(0)

# ---------------------------------------------------------------------------------------------
# fg.ops


REDUCTIONS = {
    "sum": (ops.segment_sum, np.add),
    "prod": (ops.segment_prod, np.multiply),
    "max": (ops.segment_max, np.maximum),
    "min": (ops.segment_min, np.minimum),
}


def identity(name: str, dtype: np.dtype):
    if name in ("sum", "prod"):
        return {"sum": 0, "prod": 1}[name]
    if dtype.kind == "b":
        return name == "min"
    if dtype.kind in "iu":
        return np.iinfo(dtype).min if name == "max" else np.iinfo(dtype).max
    return -np.inf if name == "max" else np.inf


def np_segment(name, data, ids, num_segments, mode=None):
    """The reference: each row of `data` combined into its segment's row with ufunc.at, ids
    outside [0, num_segments) dropped (or clamped, for mode="clip")."""
    ufunc = REDUCTIONS[name][1]
    trailing = np.shape(data)[np.ndim(ids) :]
    ids = np.asarray(ids).reshape(-1)
    data = np.asarray(data).reshape((ids.size, *trailing))
    out = np.full((num_segments, *data.shape[1:]), identity(name, data.dtype), data.dtype)
    if mode == "clip":
        ids = np.clip(ids, 0, num_segments - 1)
    keep = (ids >= 0) & (ids < num_segments)
    ufunc.at(out, ids[keep], data[keep])
    return out


def random_data(shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-3, 4, shape).astype(dtype)
    return RNG.uniform(-2.0, 2.0, shape).astype(dtype)


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize(
    "data_shape, ids_shape", [((7,), (7,)), ((9, 2, 3), (9,)), ((4, 3, 2), (4, 3)), ((0, 2), (0,))]
)
@pytest.mark.parametrize("bucket_size", [None, 1, 2, 4])
def test_segment_reductions_match_ufunc_at(name, dtype, data_shape, ids_shape, bucket_size):
    data = random_data(data_shape, dtype)
    # Repeated, unsorted ids, some out of range on both sides, and segments no id names.
    ids = RNG.integers(-2, 7, ids_shape)
    fun = REDUCTIONS[name][0]
    got = fun(data, ids, num_segments=5, bucket_size=bucket_size)
    assert got.dtype == dtype and got.shape == (5, *data_shape[len(ids_shape) :])
    np.testing.assert_allclose(np.asarray(got), np_segment(name, data, ids, 5), rtol=1e-6)


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("bucket_size", [None, 3])
def test_clip_mode_clamps_out_of_range_ids(name, bucket_size):
    data, ids = random_data((8, 2), np.float64), np.array([0, -1, 1, 2, 7, 3, 3, 9])
    got = REDUCTIONS[name][0](data, ids, 4, mode="clip", bucket_size=bucket_size)
    np.testing.assert_allclose(np.asarray(got), np_segment(name, data, ids, 4, mode="clip"))


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_default_num_segments_is_the_largest_id_plus_one(name):
    data, ids = random_data((6,), np.float32), np.array([3, 0, 3, 1, -1, 0])
    got = REDUCTIONS[name][0](data, ids)
    np.testing.assert_allclose(np.asarray(got), np_segment(name, data, ids, 4), rtol=1e-6)
    assert REDUCTIONS[name][0](np.zeros(0), np.zeros(0, np.int32)).shape == (0,)


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int64, np.bool_]
)
def test_empty_segments_hold_the_identity(dtype):
    dtype = np.dtype(dtype)
    data, ids = np.ones(2, dtype), np.array([1, 1])
    for name, (fun, _) in REDUCTIONS.items():
        if dtype.kind == "b" and name in ("sum", "prod"):
            continue
        got = fun(data, ids, 3)
        assert got.dtype == dtype
        assert np.asarray(got)[0] == np.array(identity(name, dtype)).astype(dtype), name
        assert np.asarray(got)[2] == np.asarray(got)[0]


def test_booleans_reduce_to_any_and_all():
    data, ids = np.array([True, False, False, False, True, True]), np.array([0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(np.asarray(ops.segment_max(data, ids, 4)), [1, 0, 1, 0])
    np.testing.assert_array_equal(np.asarray(ops.segment_min(data, ids, 4)), [0, 0, 1, 1])


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_num_segments_none_needs_concrete_ids(name):
    fun = REDUCTIONS[name][0]
    with pytest.raises(ConcretizationTypeError, match=f"segment_{name}: num_segments"):
        fg.jit(fun)(np.ones(3), np.array([0, 1, 1]))
    with pytest.raises(ConcretizationTypeError, match=f"segment_{name}: num_segments"):
        fg.vmap(fun)(np.ones((2, 3)), np.array([[0, 1, 1], [0, 0, 0]]))
    with pytest.raises(ConcretizationTypeError, match="num_segments decides the shape"):
        fg.jit(lambda x, n: fun(x, np.array([0, 1, 1]), n))(np.ones(3), 2)


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("bucket_size", [None, 2])
def test_jit_gives_the_eager_values(name, bucket_size):
    fun = REDUCTIONS[name][0]
    data, ids = random_data((7, 3), np.float32), RNG.integers(-1, 5, 7)
    jitted = fg.jit(fun, static_argnums=(2, 3, 4, 5))
    np.testing.assert_allclose(
        np.asarray(jitted(data, ids, 5, False, False, bucket_size)),
        np.asarray(fun(data, ids, 5, bucket_size=bucket_size)),
        rtol=1e-6,
    )


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_vmap_matches_a_loop(name):
    fun = REDUCTIONS[name][0]
    data, ids = random_data((3, 6, 2), np.float64), RNG.integers(-1, 4, (3, 6))
    expected = [np.asarray(fun(d, i, 4)) for d, i in zip(data, ids)]
    np.testing.assert_allclose(np.asarray(fg.vmap(lambda d, i: fun(d, i, 4))(data, ids)), expected)
    # Shared ids, batched data (the batch axis not leading), and the reverse.
    shared = [np.asarray(fun(d, ids[0], 4)) for d in data]
    got = fg.vmap(lambda d: fun(d, ids[0], 4), in_axes=2)(np.moveaxis(data, 0, 2))
    np.testing.assert_allclose(np.asarray(got), shared)
    by_ids = [np.asarray(fun(data[0], i, 4)) for i in ids]
    np.testing.assert_allclose(np.asarray(fg.vmap(lambda i: fun(data[0], i, 4))(ids)), by_ids)


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("bucket_size, mode", [(None, None), (2, None), (None, "clip")])
def test_derivatives_match_finite_differences(name, bucket_size, mode):
    fun = REDUCTIONS[name][0]
    # Distinct values keep max and min away from ties, where they have no derivative.
    data = RNG.permutation(np.linspace(0.5, 2.0, 14)).reshape(7, 2)
    # Every segment is named (an empty one's infinite identity has no finite difference).
    ids = np.array([2, 0, 2, 2, -1, 1, 4])
    order = 1 if name in ("max", "min") else 2
    check_grads(lambda x: fun(x, ids, 3, bucket_size=bucket_size, mode=mode), (data,), order=order)


def others_product(data, ids, num_segments):
    """d segment_prod / d data[i]: the product of the other rows of i's segment."""
    out = np.zeros_like(data)
    for i, s in enumerate(ids):
        if 0 <= s < num_segments:
            others = [data[j] for j in range(len(ids)) if ids[j] == s and j != i]
            out[i] = np.prod(others, axis=0) if others else 1.0
    return out


@pytest.mark.parametrize("bucket_size", [None, 2])
def test_segment_prod_derivative_with_zeros(bucket_size):
    # Segment 0 has one zero, segment 1 two, segment 2 none; id 5 is dropped.
    data = np.array([2.0, 0.0, 3.0, 0.0, 4.0, 0.0, 1.5, -2.0, 7.0])
    ids = np.array([0, 0, 0, 1, 1, 1, 2, 2, 5])

    def total(x):
        return (
            ops.segment_prod(x, ids, 3, bucket_size=bucket_size) * np.array([1.0, 2.0, 3.0])
        ).sum()

    expected = others_product(data, ids, 3) * np.array([1.0, 2.0, 3.0, 0.0])[np.minimum(ids, 3)]
    np.testing.assert_allclose(np.asarray(fg.grad(total)(data)), expected)
    check_grads(lambda x: ops.segment_prod(x, ids, 3, bucket_size=bucket_size), (data,), order=2)
    # Through jit and vmap too.
    np.testing.assert_allclose(np.asarray(fg.jit(fg.grad(total))(data)), expected)
    batch = np.stack([data, data[::-1]])
    looped = [np.asarray(fg.grad(total)(x)) for x in batch]
    np.testing.assert_allclose(np.asarray(fg.vmap(fg.grad(total))(batch)), looped)
    # Batched ids as well: each lane groups its rows its own way.

    def weighted(x, i):
        return (ops.segment_prod(x, i, 3, bucket_size=bucket_size) * np.arange(1.0, 4.0)).sum()

    id_batch = np.stack([ids, ids[::-1], np.array([1, 0, 1, 0, 0, 2, 2, 2, 1])])
    data_batch = np.stack([data, data[::-1], data])
    looped = [np.asarray(fg.grad(weighted)(x, i)) for x, i in zip(data_batch, id_batch)]
    got = fg.vmap(fg.grad(weighted))(data_batch, id_batch)
    np.testing.assert_allclose(np.asarray(got), looped)
    for x, i, g in zip(data_batch, id_batch, looped):
        coefficients = np.append(np.arange(1.0, 4.0), 0.0)[np.where(i < 3, i, 3)]
        np.testing.assert_allclose(g, others_product(x, i, 3) * coefficients)


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("bucket_size", [None, 2])
def test_derivatives_of_no_rows(name, bucket_size):
    fun = REDUCTIONS[name][0]
    no_ids = np.zeros(0, np.int32)
    got = fg.grad(lambda x: fun(x, no_ids, 3, bucket_size=bucket_size)[0, 0])(np.zeros((0, 2)))
    assert got.shape == (0, 2)


def test_segment_max_ties_share_the_derivative():
    data, ids = np.array([1.0, 3.0, 3.0, 2.0]), np.array([0, 0, 0, 1])
    got = fg.grad(lambda x: ops.segment_max(x, ids, 2).sum())(data)
    np.testing.assert_allclose(np.asarray(got), [0.0, 0.5, 0.5, 1.0])


def test_segment_reductions_check_their_arguments():
    data = np.ones((4, 2))
    with pytest.raises(TypeError, match="segment_ids must be integers"):
        ops.segment_sum(data, np.zeros(4), 2)
    with pytest.raises(ValueError, match=r"shape of segment_ids \(3,\).*data \(4, 2\)"):
        ops.segment_sum(data, np.zeros(3, np.int32), 2)
    with pytest.raises(ValueError, match="num_segments must be non-negative"):
        ops.segment_max(data, np.zeros(4, np.int32), -1)
    with pytest.raises(TypeError, match="num_segments must be an int"):
        ops.segment_min(data, np.zeros(4, np.int32), 2.5)
    with pytest.raises(ValueError, match="bucket_size must be a positive int"):
        ops.segment_prod(data, np.zeros(4, np.int32), 2, bucket_size=0)


def test_ops_names():
    assert set(ops.__all__) == {"segment_sum", "segment_prod", "segment_max", "segment_min"}


# ---------------------------------------------------------------------------------------------
# fg.flatten_util


TREE = {
    "w": RNG.standard_normal((2, 3)).astype(np.float32),
    "layers": [RNG.standard_normal(4).astype(np.float32), (np.float32(1.5), None)],
}


def test_ravel_pytree_concatenates_the_leaves_in_flatten_order():
    flat, unravel = ravel_pytree(TREE)
    leaves = fg.tree.leaves(TREE)
    assert flat.dtype == np.float32 and flat.shape == (11,)
    np.testing.assert_array_equal(np.asarray(flat), np.concatenate([np.ravel(x) for x in leaves]))
    back = unravel(flat)
    assert fg.tree.structure(back) == fg.tree.structure(TREE)
    for got, leaf in zip(fg.tree.leaves(back), leaves):
        assert got.dtype == leaf.dtype
        np.testing.assert_array_equal(np.asarray(got), leaf)


@pytest.mark.parametrize(
    "leaves, flat_dtype",
    [
        ([np.arange(3, dtype=np.int32), np.ones(2, np.float16)], np.float16),
        ([np.array([True, False]), np.arange(3, dtype=np.int8)], np.int8),
        ([np.arange(2, dtype=np.int32), 2.5], np.float32),
        ([np.ones(2, np.float32), np.ones(1, np.float64)], np.float64),
        ([np.ones(2, np.float32), np.array([1 + 2j], np.complex64)], np.complex64),
    ],
)
def test_ravel_pytree_promotes_and_unravel_casts_back(leaves, flat_dtype):
    flat, unravel = ravel_pytree(leaves)
    assert flat.dtype == flat_dtype
    expected = np.concatenate([np.ravel(x).astype(flat_dtype) for x in leaves])
    np.testing.assert_array_equal(np.asarray(flat), expected)
    back = unravel(flat)
    for got, leaf in zip(back, leaves):
        assert got.dtype == fnp.asarray(leaf).dtype
        np.testing.assert_array_equal(np.asarray(got), leaf)
    with pytest.raises(TypeError, match=f"dtype {np.dtype(flat_dtype)}"):
        unravel(flat.astype(np.float64 if flat_dtype != np.float64 else np.float32))


def test_unravel_of_one_dtype_keeps_the_vectors_dtype():
    _, unravel = ravel_pytree(TREE)
    back = unravel(np.arange(11.0))
    assert all(leaf.dtype == np.float64 for leaf in fg.tree.leaves(back))


def test_unravel_checks_the_size():
    _, unravel = ravel_pytree(TREE)
    with pytest.raises(ValueError, match=r"vector of 11 elements.*got shape \(10,\)"):
        unravel(np.zeros(10, np.float32))
    with pytest.raises(ValueError, match=r"got shape \(1, 11\)"):
        unravel(np.zeros((1, 11), np.float32))


def test_ravel_pytree_of_no_leaves():
    flat, unravel = ravel_pytree({"a": None, "b": ()})
    assert flat.shape == (0,) and flat.dtype == np.float32
    assert unravel(flat) == {"a": None, "b": ()}
    with pytest.raises(ValueError, match="vector of 0 elements"):
        unravel(np.zeros(1))


def test_ravel_pytree_under_grad_jit_and_vmap():
    tree = {"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)}
    x = RNG.standard_normal(3)

    def loss(params):
        return fnp.sum(fnp.tanh(x @ params["w"] + params["b"]) ** 2)

    flat, unravel = ravel_pytree(tree)
    by_tree = ravel_pytree(fg.grad(loss)(tree))[0]
    np.testing.assert_allclose(np.asarray(fg.grad(lambda v: loss(unravel(v)))(flat)), by_tree)
    check_grads(lambda v: loss(unravel(v)), (flat,), order=2)
    np.testing.assert_allclose(
        np.asarray(fg.grad(lambda t: ravel_pytree(t)[0] @ flat)(tree)["w"]), tree["w"]
    )
    # jit of both directions; unravel is hashable and equal across calls, so it may be static.
    np.testing.assert_allclose(np.asarray(fg.jit(lambda t: ravel_pytree(t)[0])(tree)), flat)
    assert unravel == ravel_pytree(tree)[1] and hash(unravel) == hash(ravel_pytree(tree)[1])
    apply = fg.jit(lambda u, v: loss(u(v)), static_argnums=0)
    np.testing.assert_allclose(np.asarray(apply(unravel, flat)), np.asarray(loss(tree)))
    # vmap of unravel against a loop.
    vectors = RNG.standard_normal((4, flat.size))
    batched = fg.vmap(unravel)(vectors)
    for k, v in enumerate(vectors):
        for got, want in zip(fg.tree.leaves(batched), fg.tree.leaves(unravel(v))):
            np.testing.assert_array_equal(np.asarray(got)[k], np.asarray(want))


# ---------------------------------------------------------------------------------------------
# fg.dlpack


class Exporter:
    """An array from elsewhere that offers only the DLPack protocol."""

    def __init__(self, value):
        self._value = value

    def __dlpack__(self, **kwargs):
        return self._value.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._value.__dlpack_device__()


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int8, np.uint16, np.bool_, np.complex64]
)
def test_from_dlpack_takes_any_exporter(dtype):
    value = RNG.integers(0, 2, (3, 2)).astype(dtype)
    for source in (value, Exporter(value), Exporter(value[:, ::-1])):
        got = fg.dlpack.from_dlpack(source)
        assert isinstance(got, fg.Array) and got.dtype == dtype
        np.testing.assert_array_equal(
            np.asarray(got), np.asarray(source._value if isinstance(source, Exporter) else source)
        )


def test_arrays_export_through_dlpack():
    x = fnp.arange(6.0).reshape(2, 3).T
    np.testing.assert_array_equal(np.from_dlpack(x), np.arange(6.0).reshape(2, 3).T)
    np.testing.assert_array_equal(np.asarray(fg.dlpack.from_dlpack(x)), np.asarray(x))
    assert fg.dlpack.from_dlpack is fnp.from_dlpack


def test_is_supported_dtype():
    for dtype in (np.float16, np.float32, np.float64, np.int8, np.uint64, np.bool_, np.complex128):
        assert fg.dlpack.is_supported_dtype(dtype)
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.int4, np.str_):
        assert not fg.dlpack.is_supported_dtype(dtype)


# ---------------------------------------------------------------------------------------------
# fg.custom_derivatives


def test_custom_derivatives_module():
    cd = fg.custom_derivatives
    transformations = {"custom_jvp", "custom_vjp", "custom_gradient", "closure_convert"}
    symbolic = {"SymbolicZero", "CustomVJPPrimal", "custom_vjp_primal_tree_values"}
    assert set(cd.__all__) == transformations | symbolic | {"zero_from_primal"}
    for name in transformations:
        assert getattr(cd, name) is getattr(fg, name)

    @cd.custom_jvp
    def f(x):
        return fnp.sin(x)

    f.defjvp(lambda primals, tangents: (f(*primals), 2.0 * tangents[0]))
    assert float(fg.grad(f)(0.3)) == 2.0


# ---------------------------------------------------------------------------------------------
# Config options as context managers


@pytest.mark.parametrize(
    "context, option, make",
    [
        (fg.debug_nans, "debug_nans", lambda: fnp.log(fnp.asarray(-1.0))),
        (fg.debug_infs, "debug_infs", lambda: fnp.log(fnp.asarray(0.0))),
    ],
)
def test_debug_contexts(context, option, make):
    assert not getattr(fg.config, option)
    make()  # off: the NaN or infinity is returned
    with context():
        assert getattr(fg.config, option) is True
        with pytest.raises(FloatingPointError, match=option):
            make()
        with pytest.raises(FloatingPointError, match=option):
            fg.jit(make)()
        with context(False):
            make()
        with pytest.raises(FloatingPointError):
            make()
    assert not getattr(fg.config, option)
    # The setting is restored when the block raises, and bad values are refused.
    with pytest.raises(ZeroDivisionError), context(True):
        raise ZeroDivisionError
    assert not getattr(fg.config, option)
    with pytest.raises(TypeError, match=f"{option} must be True or False"):
        with context(1):
            pass
    assert not getattr(fg.config, option)


def test_log_compiles_logs_each_new_program(caplog):
    def scaled(x, factor):
        return x * factor

    f = fg.jit(scaled, static_argnums=1)
    caplog.set_level(logging.WARNING, logger="funcgrad")
    f(np.ones(3, np.float32), 2)
    assert not caplog.records  # off by default
    f.clear_cache()
    with fg.log_compiles():
        f(np.ones(3, np.float32), 2)
        f(np.ones(3, np.float32), 2)  # a cache hit: nothing
        f(np.ones((2, 2), np.float64), 2)
        f(1.0, 3)
    messages = [r.getMessage() for r in caplog.records if r.name == "funcgrad"]
    assert len(messages) == 3, messages
    assert re.match(
        r"jit\(.*scaled\): .*\(f32\[3\]\) and static arguments args\[1\]=2", messages[0]
    )
    assert (
        "(f64[2,2])" in messages[1] and "(weak f32[]) and static arguments args[1]=3" in messages[2]
    )
    assert not fg.config.log_compiles
    fg.config.update("jax_log_compiles", True)
    try:
        fg.jit(lambda x: x + 1)(np.ones(2))
    finally:
        fg.config.update("log_compiles", False)
    assert (
        "<lambda>): traced a new program for arguments (f64[2])" in caplog.records[-1].getMessage()
    )


# ---------------------------------------------------------------------------------------------
# Version


def pyproject_version() -> str:
    text = (Path(fg.__file__).parent.parent / "pyproject.toml").read_text()
    return re.search(r'^version = "(.+)"', text, re.MULTILINE).group(1)


def test_version():
    assert isinstance(fg.__version__, str) and fg.__version__ == fg.version.__version__
    assert fg.__version__ == pyproject_version()
    assert fg.__version_info__ == tuple(int(p) for p in pyproject_version().split("."))


def test_version_falls_back_to_pyproject(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert fg.version._version() == pyproject_version()
    assert fg.version._version_info("1.2.3rc1") == (1, 2, 3)


def test_new_module_names_are_public():
    names = {"ops", "flatten_util", "dlpack", "custom_derivatives", "version"}
    names |= {"debug_nans", "debug_infs", "log_compiles"}
    assert names <= set(fg.__all__)
