"""pmap over virtual CPU devices: values against NumPy references of the collectives (the
lanes' values in, the lanes' results out, as in test_parallel), sharded results, composition
with vmap, jit and grad (against central differences and a single-device full batch), and
bad input and failing devices, which must end in a clear error and never in a hang."""

import functools
import threading
import warnings

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, cpu_devices
from hypothesis import given
from hypothesis import strategies as st
from test_parallel import (
    all_to_all_case,
    batched,
    perms,
    ref_all_gather,
    ref_all_to_all,
    ref_axis_index,
    ref_pbroadcast,
    ref_pmax,
    ref_pmin,
    ref_ppermute,
    ref_psum,
    ref_psum_scatter,
    single_reference,
)

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.array import Array
from funcgrad.devices import gpu_available
from funcgrad.distributed import CollectiveTimeoutError
from funcgrad.test_util import check_grads
from funcgrad.transforms.pmap import _device_executable, _device_operands

NUM_DEVICES = 4


@pytest.fixture(autouse=True)
def four_devices():
    with cpu_devices(NUM_DEVICES):
        yield


def run_pmap(fun, x, in_axis):
    return fg.pmap(fun, axis_name="i", in_axes=in_axis)(x)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else {}


# ---------------------------------------------------------------------------------------------
# Devices


def test_devices():
    """The CPU's devices (where a GPU is, `devices()` lists it first: test_default_platform)."""
    devices = fg.devices("cpu")
    assert [d.id for d in devices] == list(range(NUM_DEVICES))
    assert fg.process_index() == 0 and fg.process_count() == 1
    assert all(d.platform == "cpu" and d.process_index == 0 for d in devices)
    if gpu_available():
        return
    assert fg.devices() == fg.local_devices() == devices
    assert fg.device_count() == fg.local_device_count() == NUM_DEVICES
    with pytest.raises(RuntimeError, match="gpu"):
        fg.devices("gpu")


def test_bad_device_count():
    fg.config.update("num_cpu_devices", 0)
    with pytest.raises(ValueError, match="positive integer, got 0"):
        fg.devices()


# ---------------------------------------------------------------------------------------------
# Mapping and sharded results


def test_in_axes_out_axes_and_pytrees():
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)  # mapped along axis 2
    w = np.float32(3.0)

    def f(tree, scale):
        return {"sum": tree["a"] * scale + tree["b"], "scale": scale}

    g = fg.pmap(f, in_axes=({"a": 2, "b": None}, None), out_axes={"sum": 1, "scale": None})
    out = g({"a": x, "b": np.float32(1.0)}, w)
    assert_close(out["sum"], np.moveaxis(x, 2, 1) * 3 + 1)
    assert_close(out["scale"], w)


def test_sharded_results():
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    y = fg.pmap(lambda v: v * 2)(x)
    assert isinstance(y, Array)
    assert y.devices() == set(fg.devices())
    assert not y.is_fully_replicated()
    shards = y.addressable_shards
    assert [s.device for s in shards] == fg.devices()
    for i, shard in enumerate(shards):
        assert_close(shard.data, x[i] * 2)
    # Fed back into pmap, each device takes its own buffer as it is (no copy, no gather).
    operands = _device_operands([y], (True,), fg.devices())
    for (_, buffer), (operand,) in zip(y._shards, operands):
        assert operand._value is buffer
    z = fg.pmap(lambda v: v + 1)(y)
    # Whole-array uses see the stacked value.
    assert_close(z, x * 2 + 1)
    assert_close(z[1], x[1] * 2 + 1)
    assert y.shape == (4, 2) and y.dtype == np.float32
    assert str(y) == str(x * 2)
    assert repr(y) == repr(fg.numpy.asarray(x * 2))
    assert_close(fnp.sum(z), np.sum(x * 2 + 1))


def test_fewer_entries_than_devices_use_the_first_devices():
    y = fg.pmap(lambda v: v)(np.ones((2, 3)))
    assert [s.device for s in y.addressable_shards] == fg.devices()[:2]


def test_staged_once_and_devices_run_at_once():
    traces = []
    # Passed only when every device is inside the callback at the same time.
    all_devices_at_once = threading.Barrier(NUM_DEVICES, timeout=10)

    def f(v):
        traces.append(1)
        fg.debug.callback(all_devices_at_once.wait)
        return v + 1

    g = fg.pmap(f)
    x = np.zeros((NUM_DEVICES, 2))
    g(x)
    assert_close(g(x + 1), x + 2)
    assert len(traces) == 1


def test_static_broadcasted_argnums_and_devices():
    f = fg.pmap(lambda x, power: x**power, static_broadcasted_argnums=1, devices=fg.devices()[1:3])
    out = f(np.array([2.0, 3.0]), 3)
    assert_close(out, [8.0, 27.0])
    assert [s.device for s in out.addressable_shards] == fg.devices()[1:3]


def test_pmap_of_jit():
    x = np.arange(8.0).reshape(4, 2)
    inner = fg.jit(lambda v: lax.psum(v, "i") * v)
    assert_close(fg.pmap(inner, "i")(x), x.sum(0) * x)


def test_jit_of_pmap():
    x = np.arange(8.0).reshape(4, 2)
    inner = lambda v: lax.psum(v, "i") * v  # noqa: E731
    assert_close(fg.jit(fg.pmap(inner, "i"))(x), x.sum(0) * x)
    # Inside a larger compiled program, and differentiated: the pmap runs on the devices'
    # threads between the program's own kernels.
    outer = fg.jit(lambda v: fg.pmap(inner, "i")(v * 2.0) + 1.0)
    assert_close(outer(x), (2 * x).sum(0) * (2 * x) + 1.0)
    loss = fg.jit(fg.grad(lambda v: fg.pmap(inner, "i")(v).sum()))
    assert_close(loss(x), np.broadcast_to(2 * x.sum(0), x.shape))  # d(sum_j S_j^2)/dv = 2S


# ---------------------------------------------------------------------------------------------
# Collectives against NumPy references (one device per lane)


@pytest.mark.parametrize(
    "collective, ref", [(lax.psum, ref_psum), (lax.pmax, ref_pmax), (lax.pmin, ref_pmin)]
)
@given(data=batched(dtype=fst.numeric_dtypes))
def test_reductions(collective, ref, data):
    x, in_axis, _ = data
    out = run_pmap(lambda v: collective(v, "i"), x, in_axis)
    assert_close(out, single_reference(ref, x, in_axis), x.dtype, **_tol(x.dtype))


@given(data=batched(), axis=st.integers(-4, 3), tiled=st.booleans())
def test_all_gather(data, axis, tiled):
    x, in_axis, lane = data
    rank = len(lane) + (not tiled)
    if not -rank <= axis < rank or (tiled and not lane):
        return
    out = run_pmap(lambda v: lax.all_gather(v, "i", axis=axis, tiled=tiled), x, in_axis)
    expected = single_reference(lambda ls: ref_all_gather(ls, axis % rank, tiled), x, in_axis)
    assert_close(out, expected, x.dtype)


@given(n=st.integers(1, NUM_DEVICES))
def test_axis_index(n):
    out = fg.pmap(lambda v: lax.axis_index("i"), "i")(np.zeros(n))
    assert_close(out, np.stack(ref_axis_index([0] * n)))


@given(data=st.data())
def test_ppermute(data):
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes))
    perm = data.draw(perms(np.moveaxis(x, in_axis, 0).shape[0]))
    out = run_pmap(lambda v: lax.ppermute(v, "i", perm), x, in_axis)
    assert_close(out, single_reference(lambda ls: ref_ppermute(ls, perm), x, in_axis), x.dtype)


@given(data=st.data())
def test_pbroadcast(data):
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes))
    source = data.draw(st.integers(0, np.moveaxis(x, in_axis, 0).shape[0] - 1))
    out = run_pmap(lambda v: lax.pbroadcast(v, "i", source), x, in_axis)
    expected = single_reference(lambda ls: ref_pbroadcast(ls, source), x, in_axis)
    assert_close(out, expected, x.dtype)


@given(data=st.data())
def test_all_to_all(data):
    n, lane, split_axis, concat_axis, tiled = data.draw(all_to_all_case())
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes, lane=lane, size=n))
    out = run_pmap(
        lambda v: lax.all_to_all(v, "i", split_axis, concat_axis, tiled=tiled), x, in_axis
    )
    ref = lambda ls: ref_all_to_all(ls, split_axis, concat_axis, tiled)  # noqa: E731
    assert_close(out, single_reference(ref, x, in_axis), x.dtype)


@given(data=st.data())
def test_psum_scatter(data):
    n = data.draw(st.integers(1, 3))
    tiled = data.draw(st.booleans())
    lane = list(data.draw(fst.shapes(min_dims=1, max_dims=3, max_side=3)))
    dim = data.draw(st.integers(0, len(lane) - 1))
    lane[dim] = n * (data.draw(st.integers(1, 2)) if tiled else 1)
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes, lane=tuple(lane), size=n))
    out = run_pmap(
        lambda v: lax.psum_scatter(v, "i", scatter_dimension=dim, tiled=tiled), x, in_axis
    )
    expected = single_reference(lambda ls: ref_psum_scatter(ls, dim, tiled), x, in_axis)
    assert_close(out, expected, x.dtype, **_tol(x.dtype))


# ---------------------------------------------------------------------------------------------
# axis_index_groups: each group of devices runs the collective among its own


@st.composite
def index_groups(draw, n: int, equal: bool):
    """A partition of the positions 0..n-1 into groups, each in an order of its own: of one
    size when `equal`, of any sizes otherwise."""
    order = draw(st.permutations(range(n)))
    if equal:
        size = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
        cuts = list(range(size, n, size))
    else:
        cuts = sorted(draw(st.sets(st.integers(1, n - 1))))
    bounds = [0, *cuts, n]
    return tuple(tuple(order[a:b]) for a, b in zip(bounds, bounds[1:]))


def grouped_reference(ref, lanes, groups):
    """`ref` run on each group's lanes (in the group's order), its results put back at the
    group's positions."""
    out = [None] * len(lanes)
    for group in groups:
        for position, result in zip(group, ref([lanes[p] for p in group])):
            out[position] = result
    return np.stack(out)


def ref_pmean(lanes):
    return [np.mean(np.stack(lanes), axis=0)] * len(lanes)


# name: (groups of one size, lane shape for groups of size n, collective, reference)
GROUPED = {
    "psum": (False, lambda n: (2, 3), lax.psum, ref_psum),
    "pmax": (False, lambda n: (2, 3), lax.pmax, ref_pmax),
    "pmin": (False, lambda n: (2, 3), lax.pmin, ref_pmin),
    "pmean": (False, lambda n: (2, 3), lax.pmean, ref_pmean),
    "all_gather": (
        True,
        lambda n: (2, 3),
        functools.partial(lax.all_gather, axis=1),
        lambda ls: ref_all_gather(ls, 1, False),
    ),
    "all_gather_tiled": (
        True,
        lambda n: (2, 3),
        functools.partial(lax.all_gather, axis=1, tiled=True),
        lambda ls: ref_all_gather(ls, 1, True),
    ),
    "psum_scatter": (
        True,
        lambda n: (2, n),
        functools.partial(lax.psum_scatter, scatter_dimension=1),
        lambda ls: ref_psum_scatter(ls, 1, False),
    ),
    "psum_scatter_tiled": (
        True,
        lambda n: (2 * n, 3),
        functools.partial(lax.psum_scatter, tiled=True),
        lambda ls: ref_psum_scatter(ls, 0, True),
    ),
    "all_to_all": (
        True,
        lambda n: (n, 3),
        lambda v, name, **kw: lax.all_to_all(v, name, 0, 1, **kw),
        lambda ls: ref_all_to_all(ls, 0, 1, False),
    ),
    "all_to_all_tiled": (
        True,
        lambda n: (2, 2 * n),
        lambda v, name, **kw: lax.all_to_all(v, name, 1, 0, tiled=True, **kw),
        lambda ls: ref_all_to_all(ls, 1, 0, True),
    ),
}


@pytest.mark.parametrize("name", sorted(GROUPED))
@given(data=st.data())
def test_collectives_over_axis_index_groups(name, data):
    """Each group's devices (in the group's order) against the collective's reference run on
    their lanes alone; reductions take groups of any sizes, the others of one size."""
    equal, lane, collective, ref = GROUPED[name]
    groups = data.draw(index_groups(NUM_DEVICES, equal))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    x = data.draw(fst.arrays(dtype, (NUM_DEVICES, *lane(len(groups[0])))))
    out = fg.pmap(lambda v: collective(v, "i", axis_index_groups=groups), "i")(x)
    expected = grouped_reference(ref, list(x), groups)
    assert_close(out, expected, dtype, **_tol(dtype))


GROUPED_FUNS = {
    "psum": lambda v: lax.psum(v, "i", axis_index_groups=[[0, 2], [1, 3]]) * v,
    "pmean_uneven": lambda v: fnp.sin(lax.pmean(v, "i", axis_index_groups=[[3], [0, 2, 1]])),
    "pmax": lambda v: lax.pmax(v, "i", axis_index_groups=[[1, 0], [3, 2]]) * v,
    "all_gather": lambda v: (
        fnp.sum(lax.all_gather(v, "i", axis_index_groups=[[3, 0], [1, 2]]) ** 2, axis=0) * v
    ),
    "psum_scatter": lambda v: lax.psum_scatter(
        v * v, "i", scatter_dimension=1, tiled=True, axis_index_groups=[[0, 1], [2, 3]]
    ),
    "all_to_all": lambda v: (
        lax.all_to_all(v, "i", 1, 0, tiled=True, axis_index_groups=[[2, 0], [3, 1]]) ** 2
    ),
}


@pytest.mark.parametrize("name", GROUPED_FUNS)
def test_derivatives_of_collectives_over_axis_index_groups(name):
    x = _lanes((NUM_DEVICES, 2, 4))
    check_grads(fg.pmap(GROUPED_FUNS[name], "i"), (x,), order=1, eps=1e-6)


def test_bad_axis_index_groups_are_refused():
    x = np.ones((NUM_DEVICES, 2), np.float32)
    with pytest.raises(ValueError, match=r"must hold each position 0..3 of axis 'i' .* once"):
        fg.pmap(lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1], [2]]), "i")(x)
    with pytest.raises(ValueError, match=r"must hold each position 0..3 of axis 'i' .* once"):
        fg.pmap(lambda v: lax.pmax(v, "i", axis_index_groups=[[0, 1, 2], [2, 3]]), "i")(x)
    with pytest.raises(ValueError, match="all_gather: the groups .* must all have the same size"):
        fg.pmap(lambda v: lax.all_gather(v, "i", axis_index_groups=[[0], [1, 2, 3]]), "i")(x)
    with pytest.raises(TypeError, match="sequence of sequences of axis positions"):
        fg.pmap(lambda v: lax.psum(v, "i", axis_index_groups=[[0.0, 1], [2, 3]]), "i")(x)
    with pytest.raises(ValueError, match="must have the axis size 2"):
        groups = [[0, 1], [2, 3]]
        fg.pmap(lambda v: lax.psum_scatter(v[:1], "i", axis_index_groups=groups), "i")(x)
    with pytest.raises(NotImplementedError, match="psum: axis_index_groups is not supported over"):
        fg.vmap(lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1], [2, 3]]), axis_name="i")(x)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_collectives_sum_and_move_each_part(dtype):
    """Compiled, a complex value travels as its two parts, each summed or moved on its own."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 4, 3)) + 1j * rng.standard_normal((4, 4, 3))).astype(dtype)
    perm = [(0, 2), (2, 1), (1, 0)]

    def f(v):
        return (
            lax.psum(v, "i"),
            lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True),
            lax.all_gather(v, "i"),
            lax.ppermute(v, "i", perm),
            lax.all_to_all(v, "i", 0, 0, tiled=True),
        )

    lanes = list(x)
    expected = [
        ref_psum(lanes),
        ref_psum_scatter(lanes, 0, True),
        ref_all_gather(lanes, 0, False),
        ref_ppermute(lanes, perm),
        ref_all_to_all(lanes, 0, 0, True),
    ]
    for got, lanes_expected in zip(fg.pmap(f, "i")(x), expected):
        assert got.dtype == dtype
        assert_close(got, np.stack(lanes_expected), dtype, **_tol(np.float32))


def test_pmean_divides_by_the_device_count():
    x = np.arange(6, dtype=np.int32).reshape(3, 2)
    out = fg.pmap(lambda v: lax.pmean(v, "i"), "i")(x)
    assert out.dtype == np.float32
    assert_close(out, np.broadcast_to(x.mean(0), x.shape).astype(np.float32))


def test_psum_of_opposite_infinities_is_nan_without_a_warning():
    x = np.array([[np.inf], [-np.inf], [1.0], [2.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = fg.pmap(lambda v: lax.psum(v, "i"), "i")(x)
    assert np.isnan(np.asarray(out)).all()


def test_psum_counts_booleans():
    flags = np.array([True, False, True, True])
    assert_close(fg.pmap(lambda f: lax.psum(f, "i"), "i")(flags), np.full(4, 3, np.int32), np.int32)


# ---------------------------------------------------------------------------------------------
# Composition with vmap (each transformation names its own axis)


def _lanes(x):
    return np.random.default_rng(0).standard_normal(x).astype(np.float64)


@pytest.mark.parametrize("axis_name", ["i", "j", ("i", "j"), ("j", "i")])
def test_pmap_of_vmap(axis_name):
    x = _lanes((NUM_DEVICES, 3, 2))  # x[i, j]
    inner = fg.vmap(lambda v: lax.psum(v, axis_name) + lax.axis_index(axis_name), axis_name="j")
    out = fg.pmap(inner, "i")(x)
    sums = {"i": x.sum(0, keepdims=True), "j": x.sum(1, keepdims=True)}
    total = sums.get(axis_name, x.sum((0, 1), keepdims=True))
    i, j = np.meshgrid(np.arange(NUM_DEVICES), np.arange(3), indexing="ij")
    index = {"i": i, "j": j, ("i", "j"): i * 3 + j, ("j", "i"): j * NUM_DEVICES + i}[axis_name]
    assert_close(out, total + index[..., None])


@pytest.mark.parametrize("axis_name", ["i", "j", ("i", "j")])
def test_vmap_of_pmap(axis_name):
    x = _lanes((3, NUM_DEVICES, 2))  # x[j, i]
    inner = fg.pmap(lambda v: lax.psum(v, axis_name) * 2, "i")
    out = fg.vmap(inner, axis_name="j")(x)
    sums = {"i": x.sum(1, keepdims=True), "j": x.sum(0, keepdims=True)}
    assert_close(
        out, 2 * np.broadcast_to(sums.get(axis_name, x.sum((0, 1), keepdims=True)), x.shape)
    )


@pytest.mark.parametrize("names", [("j", "i"), ("i", "j")])
def test_vmap_of_pmap_with_collectives_needing_both_sizes(names):
    """axis_index, all_gather and psum_scatter over the vmap's axis and the device axis
    together: batching the devices' program needs the device axis's size."""
    x = _lanes((3, NUM_DEVICES))  # x[j, i]

    def per_device(v):
        gathered = lax.all_gather(v, names)
        scattered = lax.psum_scatter(fnp.ones(12) * v, names, tiled=True)
        return v + 100 * lax.axis_index(names), gathered, scattered

    index, gathered, scattered = fg.vmap(fg.pmap(per_device, "i"), axis_name="j")(x)
    j, i = np.meshgrid(np.arange(3), np.arange(NUM_DEVICES), indexing="ij")
    position = j * NUM_DEVICES + i if names == ("j", "i") else i * 3 + j
    assert_close(index, x + 100 * position)
    order = x.reshape(-1) if names == ("j", "i") else x.T.reshape(-1)
    assert_close(gathered, np.broadcast_to(order, (3, NUM_DEVICES, 12)))
    assert_close(scattered, np.full((3, NUM_DEVICES, 1), x.sum()))


def test_vmap_of_pmap_with_a_shared_argument():
    w = _lanes((3, 2))
    x = _lanes((NUM_DEVICES, 2))
    out = fg.vmap(fg.pmap(lambda w, x: w * x, in_axes=(None, 0)), in_axes=(0, None))(w, x)
    assert_close(out, w[:, None, :] * x[None])


# ---------------------------------------------------------------------------------------------
# Derivatives


def _loss(w, x, y):
    return fnp.mean((fnp.tanh(x @ w) - y) ** 2)


def test_grad_inside_pmap_with_pmean_is_the_full_batch_gradient():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    x = rng.standard_normal((NUM_DEVICES * 5, 3)).astype(np.float32)
    y = rng.standard_normal((NUM_DEVICES * 5, 2)).astype(np.float32)

    def step(w, x, y):
        return lax.pmean(fg.grad(_loss)(w, x, y), "i")

    shard = lambda a: a.reshape(NUM_DEVICES, 5, *a.shape[1:])  # noqa: E731
    grads = fg.pmap(step, "i", in_axes=(None, 0, 0))(w, shard(x), shard(y))
    expected = fg.grad(_loss)(w, x, y)
    for g in grads:
        assert_close(g, expected, np.float32, rtol=1e-5, atol=1e-6)


COLLECTIVE_FUNS = {
    "psum": lambda v: lax.psum(v, "i") * v,
    "pmean": lambda v: fnp.sin(lax.pmean(v, "i")),
    "pmax": lambda v: lax.pmax(v, "i") * v,
    "all_gather": lambda v: fnp.sum(lax.all_gather(v, "i") ** 2, axis=0) * v,
    "all_gather_tiled": lambda v: lax.all_gather(v, "i", axis=1, tiled=True)[:, 3:7] * v,
    "psum_scatter": lambda v: lax.psum_scatter(v * v, "i", scatter_dimension=1, tiled=True),
    "ppermute": lambda v: lax.ppermute(v**2, "i", [(0, 1), (1, 2), (3, 0)]),
    "pbroadcast": lambda v: lax.pbroadcast(fnp.sin(v), "i", 2) * v,
    "pcast": lambda v: lax.pcast(v, "i", to="varying") ** 2,
    "all_to_all": lambda v: lax.all_to_all(v, "i", 1, 0, tiled=True) ** 2,
    "axis_index": lambda v: v * lax.axis_index("i"),
}


@pytest.mark.parametrize("name", COLLECTIVE_FUNS)
def test_derivatives_of_pmap(name):
    """grad and jvp of a pmapped function (differentiating through every device's program and
    its collectives) against central differences of the whole mapped function."""
    x = _lanes((NUM_DEVICES, 2, 4))
    f = fg.pmap(COLLECTIVE_FUNS[name], "i")
    check_grads(f, (x,), order=1, eps=1e-6)


def test_derivatives_of_shared_inputs_and_outputs():
    w = _lanes((3,))
    x = _lanes((NUM_DEVICES, 3))
    f = fg.pmap(
        lambda w, x: (fnp.sum(w * x), lax.psum(fnp.sin(w * x), "i")),
        "i",
        in_axes=(None, 0),
        out_axes=(0, None),
    )
    check_grads(f, (w, x), order=2, eps=1e-5)


def test_vmap_of_grad_of_pmap():
    w = _lanes((3, 2))
    x = _lanes((NUM_DEVICES, 2))

    def f(w):
        return fnp.sum(
            fg.pmap(lambda w, x: lax.psum(w * x, "i") ** 2, "i", in_axes=(None, 0))(w, x)
        )

    out = fg.vmap(fg.grad(f))(w)
    expected = np.stack([np.asarray(fg.grad(f)(row)) for row in w])
    assert_close(out, expected)


# ---------------------------------------------------------------------------------------------
# Bad input and failure


def test_mismatched_mapped_sizes_name_both():
    with pytest.raises(ValueError, match="leaf 0 has size 4, argument leaf 1 has size 3"):
        fg.pmap(lambda a, b: a)(np.zeros(4), np.zeros(3))


def test_more_entries_than_devices():
    with pytest.raises(ValueError, match="size 5, more than the 4 local device"):
        fg.pmap(lambda a: a)(np.zeros(5))


def test_an_empty_mapped_axis_is_refused():
    with pytest.raises(ValueError, match="mapped axis has size 0"):
        fg.pmap(lambda a: a)(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="mapped axis has size 0"):
        fg.pmap(lambda a: a, in_axes=1)(np.zeros((2, 0)))


def test_mapped_size_must_equal_given_devices():
    with pytest.raises(ValueError, match="size 3 but 2 devices"):
        fg.pmap(lambda a: a, devices=fg.devices()[:2])(np.zeros(3))


def test_extrema_of_complex_values_are_refused():
    z = np.ones((NUM_DEVICES, 2), np.complex64)
    for collective in (lax.pmax, lax.pmin):
        with pytest.raises(TypeError, match="does not accept dtype complex64.*not complex"):
            fg.pmap(functools.partial(collective, axis_name="i"), "i")(z)


def test_unbound_axis_name():
    with pytest.raises(NameError, match="unbound axis name: j"):
        fg.pmap(lambda a: lax.psum(a, "j"), "i")(np.zeros(2))
    with pytest.raises(NameError, match="unbound axis name"):
        fg.pmap(lambda a: lax.psum(a, "i"))(np.zeros(2))  # pmap given no axis name


@pytest.mark.parametrize(
    "perm, message",
    [
        ([(0, 1), (1, 1)], "at most once"),
        ([(0, 1), (0, 2)], "at most once"),
        ([(0, 4)], "outside the axis of size 4"),
        ([(-1, 0)], "outside the axis"),
    ],
)
def test_bad_ppermute_permutation(perm, message):
    with pytest.raises(ValueError, match=message):
        fg.pmap(lambda a: lax.ppermute(a, "i", perm), "i")(np.zeros(NUM_DEVICES))


def test_a_failing_device_stops_the_others():
    """Device 2 fails before its psum; the others, waiting in theirs, stop, and the call
    reports device 2's error."""

    def fail_on_device_2(index):
        if index == 2:
            raise ZeroDivisionError("device 2 broke")

    def f(v):
        fg.debug.callback(fail_on_device_2, lax.axis_index("i"))
        return lax.psum(v, "i")

    # On the reference backend, where an error raised by a callback reaches the caller.
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", "numpy")
    try:
        with pytest.raises(ZeroDivisionError, match="device 2 broke"):
            fg.pmap(f, "i")(np.zeros(NUM_DEVICES))
    finally:
        fg.config.update("jit_backend", previous)
    assert_close(fg.pmap(lambda v: lax.psum(v, "i"), "i")(np.ones(NUM_DEVICES)), [4.0] * 4)


def test_a_device_that_never_arrives_times_out():
    never = threading.Event()

    def stall_on_device_1(index):
        if index == 1:
            never.wait(1.0)

    def f(v):
        fg.debug.callback(stall_on_device_1, lax.axis_index("i"))
        return lax.psum(v, "i")

    previous = fg.config.collective_timeout
    fg.config.update("collective_timeout", 0.1)
    try:
        with pytest.raises(CollectiveTimeoutError, match="psum over axis 'i'"):
            fg.pmap(f, "i")(np.zeros(NUM_DEVICES))
    finally:
        fg.config.update("collective_timeout", previous)


def test_pmap_inside_pmap_is_refused():
    inner = fg.pmap(lambda v: v + 1)
    with pytest.raises(NotImplementedError, match="pmap inside pmap"):
        fg.pmap(lambda v: inner(v[None]))(np.zeros(2))


def test_axis_size_must_be_the_mapped_size():
    x = np.ones((NUM_DEVICES, 2))
    assert_close(fg.pmap(lambda v: v * lax.axis_size("i"), "i", axis_size=NUM_DEVICES)(x), 4 * x)
    with pytest.raises(ValueError, match="axis_size=3, but its mapped axes have size 4"):
        fg.pmap(lambda v: v, "i", axis_size=3)(x)


def test_in_axes_must_match_the_arguments():
    with pytest.raises(ValueError, match="in_axes of length 1 for 2 positional arguments"):
        fg.pmap(lambda a, b: a, in_axes=(0,))(np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="maps no argument"):
        fg.pmap(lambda a: a, in_axes=None)(np.zeros(2))


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_devices_run_jit_s_executable_on_the_configured_backend(backend):
    """On the compiled backend, the stretches between collectives run compiled and the
    collectives between them; values equal the reference's."""
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", backend)
    try:
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(NUM_DEVICES, 2)
        plain = fg.pmap(lambda v: fnp.tanh(v) * 2)(x)

        def f(v):
            total = lax.psum(fnp.tanh(v), "i")
            return fnp.sin(total * v), lax.all_gather(total + 1.0, "i")

        g = fg.pmap(f, "i")
        sin_total, gathered = g(x)
        ((program, _, _),) = g._cache.values()
        executable = _device_executable(program, backend)
    finally:
        fg.config.update("jit_backend", previous)
    assert_close(plain, np.tanh(x) * 2, np.float32)
    total = np.tanh(x).sum(0)
    assert_close(sin_total, np.sin(total * x), np.float32)
    assert_close(gathered, np.broadcast_to(total + 1, (NUM_DEVICES, NUM_DEVICES, 2)), np.float32)
    if backend == "llvm":
        kinds = [
            type(s[0]).__name__ if isinstance(s, tuple) else s.primitive.name
            for s in executable.steps
        ]
        assert kinds == ["LlvmExecutable", "psum", "LlvmExecutable", "all_gather"]


def test_a_trace_per_matmul_precision_setting():
    """A product traced under `default_matmul_precision` names it as its precision, so pmap
    traces again under another setting (as jit does) rather than reuse a program whose
    products name the first."""
    product = fg.pmap(lambda a, b: a @ b)
    x = np.ones((1, 4, 4), np.float32)
    for _ in range(2):
        product(x, x)
        with fg.default_matmul_precision("tensorfloat32"):
            product(x, x)
    assert len(product._cache) == 2
