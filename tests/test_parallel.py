"""Collectives under vmap: each one against a NumPy reference over the whole batch.

A reference takes the list of the lanes' values and returns the list of the lanes' results,
written as the definition reads (sums, stacks, a loop over (source, destination) pairs), so
it needs no vmap. Nested vmaps check collectives over the outer axis, the inner one and both;
derivatives inside vmap are checked against central differences of the vmapped function.
"""

import itertools

import numpy as np
import pytest
import strategies as fst
from checks import assert_close, check_staging
from hypothesis import assume, given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.ir import eval_jaxpr
from funcgrad.lax import parallel
from funcgrad.test_util import check_grads

COLLECTIVES = {
    "pbroadcast",
    "psum",
    "pmax",
    "pmin",
    "all_gather",
    "psum_scatter",
    "axis_index",
    "ppermute",
    "all_to_all",
}

# ---------------------------------------------------------------------------------------------
# References: lanes in, lanes out


def ref_psum(lanes):
    # Integer sums wrap around, as in XLA.
    stacked = np.stack(lanes)
    return [np.add.reduce(stacked, axis=0, dtype=stacked.dtype)] * len(lanes)


def ref_pmax(lanes):
    return [np.max(np.stack(lanes), axis=0)] * len(lanes)


def ref_pmin(lanes):
    return [np.min(np.stack(lanes), axis=0)] * len(lanes)


def ref_all_gather(lanes, axis, tiled):
    gathered = np.concatenate(lanes, axis) if tiled else np.stack(lanes, axis)
    return [gathered] * len(lanes)


def ref_axis_index(lanes):
    return [np.int32(i) for i in range(len(lanes))]


def ref_ppermute(lanes, perm):
    out = [np.zeros_like(lane) for lane in lanes]
    for source, destination in perm:
        out[destination] = lanes[source]
    return out


def ref_all_to_all(lanes, split_axis, concat_axis, tiled):
    n = len(lanes)
    blocks = [np.split(lane, n, split_axis) for lane in lanes]  # blocks[source][destination]
    if tiled:
        return [np.concatenate([blocks[j][i] for j in range(n)], concat_axis) for i in range(n)]
    received = [[np.squeeze(blocks[j][i], split_axis) for j in range(n)] for i in range(n)]
    return [np.stack(pieces, concat_axis) for pieces in received]


def ref_pbroadcast(lanes, source):
    return [lanes[source]] * len(lanes)


def ref_psum_scatter(lanes, scatter_dimension, tiled):
    blocks = np.split(ref_psum(lanes)[0], len(lanes), scatter_dimension)
    return [b if tiled else np.squeeze(b, scatter_dimension) for b in blocks]


def single_reference(ref, x, in_axis):
    return np.stack(ref(list(np.moveaxis(x, in_axis, 0))))


def nested_reference(ref, x, outer_axis, inner_axis, axis_name):
    """Results of the collective `ref` over `axis_name` for the lanes of vmap('i') of
    vmap('j') mapping `outer_axis` of `x`, then `inner_axis` of each outer lane."""
    outer = np.moveaxis(x, outer_axis, 0)
    lanes = np.moveaxis(outer, inner_axis + 1, 1)  # lanes[i, j]
    ni, nj = lanes.shape[:2]
    groups = {
        "i": [[(i, j) for i in range(ni)] for j in range(nj)],
        "j": [[(i, j) for j in range(nj)] for i in range(ni)],
        ("i", "j"): [[(i, j) for i in range(ni) for j in range(nj)]],
        ("j", "i"): [[(i, j) for j in range(nj) for i in range(ni)]],
    }[axis_name]
    out = {}
    for group in groups:
        out.update(zip(group, ref([lanes[k] for k in group])))
    return np.stack([np.stack([out[i, j] for j in range(nj)]) for i in range(ni)])


def run_single(fun, x, in_axis):
    return fg.vmap(fun, in_axes=in_axis, axis_name="i")(x)


def run_nested(fun, x, outer_axis, inner_axis):
    inner = fg.vmap(fun, in_axes=inner_axis, axis_name="j")
    return fg.vmap(inner, in_axes=outer_axis, axis_name="i")(x)


# ---------------------------------------------------------------------------------------------
# Strategies

LANES = fst.shapes(max_dims=3, max_side=3)
NESTED_LANES = fst.shapes(max_dims=2, max_side=3)


@st.composite
def batched(draw, dtype=fst.float_dtypes, lane=LANES, size=None):
    """(x, in_axis, lane shape): an array with a batch axis of 1 to 4 lanes at `in_axis`
    (sometimes given as a negative axis)."""
    lane_shape = draw(lane) if isinstance(lane, st.SearchStrategy) else lane
    n = draw(st.integers(1, 4)) if size is None else size
    axis = draw(st.integers(0, len(lane_shape)))
    shape = lane_shape[:axis] + (n,) + lane_shape[axis:]
    x = draw(fst.arrays(dtype, shape))
    if draw(st.booleans()):
        axis -= len(shape)
    return x, axis, lane_shape


@st.composite
def nested(draw, lane=NESTED_LANES):
    """(x, outer_axis, inner_axis, lane shape) for vmap('i') of vmap('j')."""
    lane_shape = draw(lane) if isinstance(lane, st.SearchStrategy) else lane
    inner = draw(st.integers(0, len(lane_shape)))
    shape = lane_shape[:inner] + (draw(st.integers(1, 3)),) + lane_shape[inner:]
    outer = draw(st.integers(0, len(shape)))
    shape = shape[:outer] + (draw(st.integers(1, 3)),) + shape[outer:]
    return draw(fst.arrays(dtypes.float64, shape)), outer, inner, lane_shape


@st.composite
def perms(draw, n: int):
    """A partial permutation of range(n) as (source, destination) pairs."""
    destinations = draw(st.permutations(range(n)))
    sources = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    return tuple((s, destinations[s]) for s in sources)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else {}


# ---------------------------------------------------------------------------------------------
# Values under one vmap


REDUCTIONS = [(lax.psum, ref_psum), (lax.pmax, ref_pmax), (lax.pmin, ref_pmin)]


@pytest.mark.parametrize("collective, ref", REDUCTIONS, ids=["psum", "pmax", "pmin"])
@given(data=batched(dtype=fst.numeric_dtypes))
def test_reductions(collective, ref, data):
    x, in_axis, _ = data

    def fun(v):
        return collective(v, "i")

    expected = single_reference(ref, x, in_axis)
    assert_close(run_single(fun, x, in_axis), expected, x.dtype, **_tol(x.dtype))
    check_staging(fg.vmap(fun, in_axes=in_axis, axis_name="i"), x)


@given(data=batched(dtype=fst.numeric_dtypes))
def test_pmean(data):
    x, in_axis, _ = data
    out = run_single(lambda v: lax.pmean(v, "i"), x, in_axis)
    lanes = np.moveaxis(x, in_axis, 0)
    total = ref_psum(list(lanes))[0]
    dtype = x.dtype if x.dtype.kind == "f" else dtypes.default_float
    expected = np.broadcast_to(total.astype(dtype) / dtype.type(len(lanes)), lanes.shape)
    assert_close(out, expected, dtype, **_tol(dtype))


def test_psum_pytree_and_out_axes_none():
    x = np.arange(6.0).reshape(3, 2)
    out = fg.vmap(lambda v: lax.psum({"a": v, "b": (2 * v, 1.0)}, "i"), axis_name="i")(x)
    assert_close(out["a"], np.broadcast_to(x.sum(0), x.shape))
    assert_close(out["b"][0], np.broadcast_to(2 * x.sum(0), x.shape))
    assert_close(out["b"][1], np.full(3, 3.0, np.float32))
    # A psum is the same in every lane, so it may leave vmap unmapped, as in JAX.
    out = fg.vmap(lambda v: lax.psum(v, "i"), axis_name="i", out_axes=None)(x)
    assert_close(out, x.sum(0))


@given(data=batched(), axis=st.integers(-4, 3), tiled=st.booleans())
def test_all_gather(data, axis, tiled):
    x, in_axis, lane_shape = data
    rank = len(lane_shape) + (not tiled)
    assume(rank > 0)
    axis %= rank

    def fun(v):
        return lax.all_gather(v, "i", axis=axis, tiled=tiled)

    expected = single_reference(lambda ls: ref_all_gather(ls, axis, tiled), x, in_axis)
    assert_close(run_single(fun, x, in_axis), expected, x.dtype)
    check_staging(fg.vmap(fun, in_axes=in_axis, axis_name="i"), x)


@given(n=st.integers(1, 5))
def test_axis_index(n):
    out = fg.vmap(lambda v: lax.axis_index("i"), axis_name="i")(np.zeros(n))
    assert_close(out, np.arange(n, dtype=np.int32), np.int32)
    out = fg.vmap(lambda: lax.axis_index("i"), axis_name="i", axis_size=n)()
    assert_close(out, np.arange(n, dtype=np.int32), np.int32)


@given(data=st.data())
def test_ppermute(data):
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes))
    n = np.moveaxis(x, in_axis, 0).shape[0]
    perm = data.draw(perms(n))

    def fun(v):
        return lax.ppermute(v, "i", perm)

    expected = single_reference(lambda ls: ref_ppermute(ls, perm), x, in_axis)
    assert_close(run_single(fun, x, in_axis), expected, x.dtype)
    check_staging(fg.vmap(fun, in_axes=in_axis, axis_name="i"), x)


@given(data=st.data())
def test_pbroadcast(data):
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes))
    source = data.draw(st.integers(0, np.moveaxis(x, in_axis, 0).shape[0] - 1))

    def fun(v):
        return lax.pbroadcast(v, "i", source)

    expected = single_reference(lambda ls: ref_pbroadcast(ls, source), x, in_axis)
    assert_close(run_single(fun, x, in_axis), expected, x.dtype)
    check_staging(fg.vmap(fun, in_axes=in_axis, axis_name="i"), x)
    # The source's value is every lane's, so it may leave vmap unmapped.
    out = fg.vmap(fun, in_axes=in_axis, axis_name="i", out_axes=None)(x)
    assert_close(out, np.take(x, source, axis=in_axis), x.dtype)


def test_pcast_to_varying_changes_nothing():
    x = np.arange(6.0).reshape(3, 2)
    out = fg.vmap(lambda v: lax.pcast({"a": v, "b": 2.0}, "i", to="varying"), axis_name="i")(x)
    assert_close(out["a"], x)
    assert_close(out["b"], np.full(3, 2.0, np.float32))
    assert_close(fg.vmap(lambda v: lax.pcast(v, (), to="varying"), axis_name="i")(x), x)
    cast_squares = lambda v: fnp.sum(lax.pcast(v, "i", to="varying") ** 2)  # noqa: E731
    assert_close(fg.vmap(fg.grad(cast_squares), axis_name="i")(x), 2 * x)


def test_ppermute_of_an_unbatched_value():
    y = np.array([1.0, 2.0])
    out = fg.vmap(lambda v: lax.ppermute(y, "i", [(0, 1), (1, 2)]), axis_name="i")(np.zeros(3))
    assert_close(out, [[0.0, 0.0], [1.0, 2.0], [1.0, 2.0]])
    out = fg.vmap(lambda v: lax.ppermute(y, "i", [(0, 1), (1, 0)]), axis_name="i")(np.zeros(2))
    assert_close(out, [[1.0, 2.0], [1.0, 2.0]])


@pytest.mark.parametrize(
    "collective, reduce",
    [(lax.psum, np.sum), (lax.pmax, np.max), (lax.pmin, np.min), (lax.pmean, np.mean)],
    ids=["psum", "pmax", "pmin", "pmean"],
)
def test_reductions_over_dimensions_named_by_position(collective, reduce):
    """Ints in axis_name name dimensions of each lane's value, reduced there (before the
    named axes, if any); no names at all leave the value as it is."""
    x = np.random.default_rng(3).standard_normal((3, 2, 4))
    assert_close(collective(x, 1), reduce(x, axis=1))
    assert_close(collective(x, (0, -1)), reduce(x, axis=(0, 2)))
    within_then_over = fg.vmap(lambda v: collective(v, ("i", 1)), axis_name="i")(x)
    expected = np.broadcast_to(reduce(x, axis=(0, 2)), (3, 2))
    assert_close(within_then_over, expected)
    unreduced = collective(x, ())
    assert unreduced is x if collective is not lax.pmean else np.allclose(unreduced, x)
    with pytest.raises(ValueError, match="axis_index_groups apply to named axes only"):
        collective(x, 0, axis_index_groups=[[0]])


def test_psum_and_pmean_count_booleans():
    flags = np.array([True, False, True])
    counted = fg.vmap(lambda f: lax.psum(f, "i"), axis_name="i")(flags)
    assert_close(counted, np.full(3, 2, np.int32), np.int32)
    mean = fg.vmap(lambda f: lax.pmean(f, "i"), axis_name="i")(flags)
    assert_close(mean, np.full(3, 2 / 3, np.float32), np.float32)


@fg.custom_jvp
def _psum_with_custom_jvp(v):
    return lax.psum(v, "i")


_psum_with_custom_jvp.defjvp(lambda p, t: (_psum_with_custom_jvp(p[0]), lax.psum(t[0], "i")))

_Y = np.array([1.0, 2.0])
_LANES = np.arange(3.0)[:, None]  # each lane's index, as a column

# A program of unbatched operands holding a collective over the vmap's axis: its results
# depend on the lanes, so it must be batched although no operand is.
UNBATCHED_PROGRAMS = {
    "cond": (
        lambda y: lax.cond(y.sum() > 0, lambda v: lax.psum(v, "i"), lambda v: v, y),
        3 * _Y,
    ),
    "cond axis_index": (
        lambda y: lax.cond(y.sum() > 0, lambda v: v + lax.axis_index("i"), lambda v: v, y),
        _Y + _LANES,
    ),
    "while": (lambda y: lax.while_loop(lambda v: v[0] < 5, lambda v: lax.psum(v, "i"), y), 9 * _Y),
    "scan": (
        lambda y: lax.scan(lambda v, _: (lax.psum(v, "i"), None), y, None, length=2)[0],
        9 * _Y,
    ),
    "checkpoint": (lambda y: fg.checkpoint(lambda v: lax.psum(v, "i"))(y), 3 * _Y),
    "jit": (
        lambda y: fg.jit(lambda v: lax.ppermute(v + lax.axis_index("i"), "i", [(0, 1), (1, 2)]))(y),
        [0 * _Y, _Y, _Y + 1],
    ),
    "jit of no operands": (
        lambda y: fg.jit(lambda: lax.axis_index("i") * fnp.ones(2))(),
        _LANES * np.ones(2),
    ),
    "custom_jvp": (_psum_with_custom_jvp, 3 * _Y),
}


@pytest.mark.parametrize("name", sorted(UNBATCHED_PROGRAMS))
def test_program_of_unbatched_operands_collecting_over_the_axis(name):
    fun, expected = UNBATCHED_PROGRAMS[name]
    lanes = np.zeros((3, 2))
    vmapped = fg.vmap(lambda lane, y: fun(y) + lane, in_axes=(0, None), axis_name="i")
    assert_close(vmapped(lanes, _Y), np.broadcast_to(expected, (3, 2)))
    assert_close(fg.jit(vmapped)(lanes, _Y), np.broadcast_to(expected, (3, 2)))


def test_grad_of_a_cond_of_unbatched_operands_collecting_over_the_axis():
    def total(y):
        branch = lambda v: lax.psum(v * v, "i")  # noqa: E731
        lane = lambda z, v: lax.cond(v.sum() > 0, branch, lambda u: u, v) + z  # noqa: E731
        return fnp.sum(fg.vmap(lane, in_axes=(0, None), axis_name="i")(np.zeros((3, 2)), y))

    # Three lanes, each sum(3 y**2).
    assert_close(fg.grad(total)(_Y), 18 * _Y)


@st.composite
def all_to_all_case(draw):
    n = draw(st.integers(1, 3))
    tiled = draw(st.booleans())
    rank = draw(st.integers(1, 3))
    split_axis = draw(st.integers(0, rank - 1))
    concat_axis = draw(st.integers(0, rank - 1))
    lane = list(draw(fst.shapes(min_dims=rank, max_dims=rank, min_side=1, max_side=3)))
    lane[split_axis] = n * (draw(st.integers(1, 2)) if tiled else 1)
    return n, tuple(lane), split_axis, concat_axis, tiled


@given(data=st.data())
def test_all_to_all(data):
    n, lane, split_axis, concat_axis, tiled = data.draw(all_to_all_case())
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes, lane=lane, size=n))

    def fun(v):
        return lax.all_to_all(v, "i", split_axis, concat_axis, tiled=tiled)

    ref = lambda ls: ref_all_to_all(ls, split_axis, concat_axis, tiled)  # noqa: E731
    assert_close(run_single(fun, x, in_axis), single_reference(ref, x, in_axis), x.dtype)
    check_staging(fg.vmap(fun, in_axes=in_axis, axis_name="i"), x)


@given(data=st.data())
def test_psum_scatter(data):
    n = data.draw(st.integers(1, 3))
    tiled = data.draw(st.booleans())
    lane = list(data.draw(fst.shapes(min_dims=1, max_dims=3, max_side=3)))
    dim = data.draw(st.integers(0, len(lane) - 1))
    lane[dim] = n * (data.draw(st.integers(1, 2)) if tiled else 1)
    x, in_axis, _ = data.draw(batched(dtype=fst.numeric_dtypes, lane=tuple(lane), size=n))

    def fun(v):
        return lax.psum_scatter(v, "i", scatter_dimension=dim, tiled=tiled)

    expected = single_reference(lambda ls: ref_psum_scatter(ls, dim, tiled), x, in_axis)
    assert_close(run_single(fun, x, in_axis), expected, x.dtype, **_tol(x.dtype))
    check_staging(fg.vmap(fun, in_axes=in_axis, axis_name="i"), x)


@pytest.mark.parametrize(
    "fun",
    [
        lambda v: lax.psum(v, "i"),
        lambda v: lax.pmean(v, "i"),
        lambda v: lax.pmax(v, "i"),
        lambda v: lax.all_gather(v, "i", axis=1),
        lambda v: lax.axis_index("i") + v,
        lambda v: lax.ppermute(v, "i", [(0, 2), (2, 1)]),
        lambda v: lax.all_to_all(v, "i", 0, 1),
        lambda v: lax.psum_scatter(v, "i", scatter_dimension=0),
    ],
    ids=["psum", "pmean", "pmax", "all_gather", "axis_index", "ppermute", "all_to_all", "scatter"],
)
def test_vmapped_jaxpr_has_no_collectives(fun):
    """Under vmap a collective becomes ordinary array operations across the batch axis."""
    x = np.arange(27.0).reshape(3, 3, 3)
    closed = fg.make_jaxpr(fg.vmap(fun, axis_name="i"))(x)
    assert not {e.primitive.name for e in closed.jaxpr.eqns} & COLLECTIVES, closed


def test_staging_inside_vmap_keeps_the_collective():
    """make_jaxpr inside vmap records the collective; evaluating it in the lanes reduces."""
    x = np.arange(6.0).reshape(3, 2)

    def lane(v):
        closed = fg.make_jaxpr(lambda u: lax.all_gather(lax.psum(u, "i"), "i"))(v)
        assert [e.primitive.name for e in closed.jaxpr.eqns] == ["psum", "all_gather"]
        return eval_jaxpr(closed.jaxpr, closed.consts, v)[0]

    out = fg.vmap(lane, axis_name="i")(x)
    assert_close(out, np.broadcast_to(x.sum(0), (3, 3, 2)))


# ---------------------------------------------------------------------------------------------
# Two named axes


@pytest.mark.parametrize("axis_name", ["i", "j", ("i", "j"), ("j", "i")])
@given(data=nested())
def test_nested_reductions_and_axis_index(axis_name, data):
    x, outer, inner, _ = data

    def fun(v):
        return lax.psum(v, axis_name), lax.pmin(v, axis_name), lax.axis_index(axis_name)

    total, low, index = run_nested(fun, x, outer, inner)
    assert_close(total, nested_reference(ref_psum, x, outer, inner, axis_name))
    assert_close(low, nested_reference(ref_pmin, x, outer, inner, axis_name))
    expected_index = nested_reference(ref_axis_index, x, outer, inner, axis_name)
    assert_close(index, expected_index, np.int32)


@pytest.mark.parametrize("axis_name", ["i", "j", ("i", "j"), ("j", "i")])
@given(data=nested(), axis=st.integers(0, 2), tiled=st.booleans())
def test_nested_all_gather(axis_name, data, axis, tiled):
    x, outer, inner, lane = data
    rank = len(lane) + (not tiled)
    assume(rank > 0)
    axis %= rank

    def fun(v):
        return lax.all_gather(v, axis_name, axis=axis, tiled=tiled)

    ref = lambda ls: ref_all_gather(ls, axis, tiled)  # noqa: E731
    expected = nested_reference(ref, x, outer, inner, axis_name)
    assert_close(run_nested(fun, x, outer, inner), expected)


@pytest.mark.parametrize("axis_name", ["i", "j", ("i", "j")])
@given(data=st.data())
def test_nested_psum_scatter(axis_name, data):
    ni, nj = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    tiled = data.draw(st.booleans())
    n = {"i": ni, "j": nj}.get(axis_name, ni * nj)
    lane = (2, n * (2 if tiled else 1))
    x = data.draw(fst.arrays(dtypes.float64, (ni,) + lane[:1] + (nj,) + lane[1:]))

    def fun(v):
        return lax.psum_scatter(v, axis_name, scatter_dimension=1, tiled=tiled)

    ref = lambda ls: ref_psum_scatter(ls, 1, tiled)  # noqa: E731
    assert_close(run_nested(fun, x, 0, 1), nested_reference(ref, x, 0, 1, axis_name))


@pytest.mark.parametrize("axis_name", ["i", "j"])
@given(data=st.data())
def test_nested_ppermute_and_all_to_all(axis_name, data):
    """Over the outer axis these go through the inner trace's batch rule, which keeps the
    inner batch axis wherever it is."""
    x, outer, inner, _ = data.draw(nested(lane=st.just((3, 2))))
    lanes = np.moveaxis(np.moveaxis(x, outer, 0), inner + 1, 1)
    n = lanes.shape[0] if axis_name == "i" else lanes.shape[1]
    perm = data.draw(perms(n))
    out = run_nested(lambda v: lax.ppermute(v, axis_name, perm), x, outer, inner)
    ref = lambda ls: ref_ppermute(ls, perm)  # noqa: E731
    assert_close(out, nested_reference(ref, x, outer, inner, axis_name))

    split, concat = data.draw(st.integers(0, 1)), data.draw(st.integers(0, 1))
    shape = list(x.shape)
    lane_dims = [d for d in range(x.ndim) if d != outer]
    lane_dims.pop(inner)  # the axes of x that make an inner lane's axes
    shape[lane_dims[split]] = 2 * n
    y = data.draw(fst.arrays(dtypes.float64, tuple(shape)))
    for tiled in (True, False):
        z = y if tiled else np.take(y, np.arange(n), axis=lane_dims[split])

        def fun(v, tiled=tiled):
            return lax.all_to_all(v, axis_name, split, concat, tiled=tiled)

        ref = lambda ls, tiled=tiled: ref_all_to_all(ls, split, concat, tiled)  # noqa: E731
        expected = nested_reference(ref, z, outer, inner, axis_name)
        assert_close(run_nested(fun, z, outer, inner), expected)


@pytest.mark.parametrize("axis_name", ["i", "j", ("i", "j"), ("j", "i")])
@given(data=nested(), last=st.booleans())
def test_nested_pbroadcast(axis_name, data, last):
    x, outer, inner, _ = data
    ni, nj = x.shape[outer], np.moveaxis(x, outer, 0).shape[inner + 1]
    size = {"i": ni, "j": nj}.get(axis_name, ni * nj)
    source = size - 1 if last else 0
    out = run_nested(lambda v: lax.pbroadcast(v, axis_name, source), x, outer, inner)
    ref = lambda ls: ref_pbroadcast(ls, source)  # noqa: E731
    assert_close(out, nested_reference(ref, x, outer, inner, axis_name))


@pytest.mark.parametrize("names", list(itertools.permutations("ijk")))
def test_three_axes(names):
    """Lanes of a tuple of names are numbered row-major in the order of the names."""
    x = np.random.default_rng(0).standard_normal((2, 3, 2, 2))

    def lane(v):
        return lax.axis_index(names), lax.all_gather(v, names, axis=1), lax.psum(v, names)

    fun = fg.vmap(fg.vmap(fg.vmap(lane, axis_name="k"), axis_name="j"), axis_name="i")
    index, gathered, total = fun(x)
    order = sorted(np.ndindex(2, 3, 2), key=lambda ijk: [ijk["ijk".index(n)] for n in names])
    expected_index = np.zeros((2, 3, 2), np.int32)
    for position, ijk in enumerate(order):
        expected_index[ijk] = position
    assert_close(index, expected_index, np.int32)
    stacked = np.stack([x[ijk] for ijk in order], axis=1)
    assert_close(gathered, np.broadcast_to(stacked, (2, 3, 2) + stacked.shape))
    assert_close(total, np.broadcast_to(x.sum((0, 1, 2)), x.shape))


def _outer_axis_cases():
    """(lane shape, collective over 'i', its reference) for every axis parameter."""
    n = 2
    for axis, tiled in [(0, False), (1, False), (2, False), (0, True), (1, True)]:
        yield (
            (3, 4),
            lambda v, a=axis, t=tiled: lax.all_gather(v, "i", axis=a, tiled=t),
            lambda ls, a=axis, t=tiled: ref_all_gather(ls, a, t),
        )
    for dim, tiled in itertools.product((0, 1), (False, True)):
        yield (
            tuple((2 * n if tiled else n) if d == dim else 3 for d in range(2)),
            lambda v, d=dim, t=tiled: lax.psum_scatter(v, "i", scatter_dimension=d, tiled=t),
            lambda ls, d=dim, t=tiled: ref_psum_scatter(ls, d, t),
        )
    for split, concat, tiled in itertools.product((0, 1), (0, 1), (False, True)):
        yield (
            tuple((2 * n if tiled else n) if d == split else 3 for d in range(2)),
            lambda v, s=split, c=concat, t=tiled: lax.all_to_all(v, "i", s, c, tiled=t),
            lambda ls, s=split, c=concat, t=tiled: ref_all_to_all(ls, s, c, t),
        )


@pytest.mark.parametrize("inner", [0, 1, 2])
def test_outer_axis_batch_rules(inner):
    """Collectives over the outer axis pass through the inner trace's batch rule, which must
    place the inner batch axis right whatever its position and the collective's axes."""
    rng = np.random.default_rng(inner)
    for lane, fun, ref in _outer_axis_cases():
        x = rng.standard_normal((2,) + lane[:inner] + (3,) + lane[inner:])
        assert_close(run_nested(fun, x, 0, inner), nested_reference(ref, x, 0, inner, "i"))


# ---------------------------------------------------------------------------------------------
# Derivatives


def _random(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape)


def check_inside_vmap(f, x, vmap=lambda g: fg.vmap(g, axis_name="i"), eps=1e-6, tol=1e-6):
    """jvp and vjp taken inside vmap (so through the collectives' own jvp and transpose rules)
    against central differences of the vmapped function: the tangent equals the difference,
    and the cotangent satisfies <c, J t> == <J^T c, t>."""
    t = _random(x.shape, 1)
    vmapped = vmap(f)
    difference = (np.asarray(vmapped(x + eps * t)) - np.asarray(vmapped(x - eps * t))) / (2 * eps)
    jvp = vmap(lambda v, u: fg.jvp(f, (v,), (u,))[1])
    assert_close(jvp(x, t), difference, rtol=tol, atol=tol)
    c = _random(difference.shape, 2)
    vjp = vmap(lambda v, w: fg.vjp(f, v)[1](w)[0])
    np.testing.assert_allclose(np.vdot(c, difference), np.vdot(vjp(x, c), t), rtol=tol, atol=tol)


X = np.linspace(-1.3, 1.1, 12).reshape(3, 4) ** 3  # distinct values: pmax has no ties

DIFFERENTIABLE = {
    "psum": lambda v: fnp.sin(lax.psum(v * v, "i")),
    "pmean": lambda v: v * lax.pmean(fnp.tanh(v), "i"),
    "pmax": lambda v: lax.pmax(v, "i") * v,
    "pmin": lambda v: lax.pmin(fnp.sin(v), "i"),
    "all_gather": lambda v: lax.all_gather(v * v, "i", axis=1) * v[0],
    "all_gather_tiled": lambda v: fnp.cos(lax.all_gather(v, "i", tiled=True)),
    "psum_scatter": lambda v: lax.psum_scatter(fnp.outer(v[:3], v), "i") * v,
    "ppermute": lambda v: lax.ppermute(v * v, "i", [(0, 2), (2, 1)]) * v,
    "pbroadcast": lambda v: lax.pbroadcast(v * v, "i", 2) * v,
    "all_to_all": lambda v: lax.all_to_all(fnp.outer(v[:3], v) ** 2, "i", 0, 1, tiled=True),
    "axis_index": lambda v: v * lax.axis_index("i"),
}


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_derivatives_inside_vmap(name):
    check_inside_vmap(DIFFERENTIABLE[name], X)


@pytest.mark.parametrize(
    "name", ["psum", "pmax", "all_gather", "ppermute", "pbroadcast", "all_to_all"]
)
def test_derivatives_of_the_vmapped_function(name):
    check_grads(fg.vmap(DIFFERENTIABLE[name], axis_name="i"), (X,), order=2)


@pytest.mark.parametrize("axis_name", ["i", "j", ("i", "j"), ("j", "i")])
def test_derivatives_inside_nested_vmaps(axis_name):
    def f(v):
        gathered = lax.all_gather(v * v, axis_name, tiled=True)
        scattered = lax.psum_scatter(fnp.cos(gathered), axis_name, tiled=True)
        return lax.pmax(v, axis_name) * scattered + lax.pmean(fnp.sin(v), axis_name)

    x = np.linspace(-1.3, 1.1, 24).reshape(2, 3, 4) ** 3

    def vmap(g):
        return fg.vmap(fg.vmap(g, axis_name="j"), axis_name="i")

    check_inside_vmap(f, x, vmap)


def test_pmax_ties_share_the_tangent():
    x = np.array([1.0, 3.0, 3.0, 2.0])
    grads = fg.vmap(fg.grad(lambda v: lax.pmax(v, "i")), axis_name="i")(x)
    # Four lanes each hold the max; its derivative (1/2 at each tie) summed over the lanes.
    assert_close(grads, [0.0, 2.0, 2.0, 0.0])
    outside = fg.grad(lambda v: fnp.sum(fg.vmap(lambda u: lax.pmax(u, "i"), axis_name="i")(v)))
    assert_close(outside(x), grads)


def test_grad_psum_matches_jax():
    """As in JAX, grad inside vmap differentiates the sum over lanes of the lanes' outputs."""
    x = np.arange(3.0)
    assert_close(fg.vmap(fg.grad(lambda v: lax.psum(v, "i")), axis_name="i")(x), [3.0] * 3)
    assert_close(fg.vmap(fg.grad(lambda v: lax.pmean(v, "i")), axis_name="i")(x), [1.0] * 3)
    grads = fg.vmap(fg.grad(lambda v: v * lax.psum(v, "i")), axis_name="i")(x)
    assert_close(grads, [6.0] * 3)


WEIGHTS = np.linspace(0.5, 1.5, 4)


def normalized_loss(v):
    """A per-example loss of inputs normalized by the batch's statistics (batch norm)."""
    mean = lax.pmean(v, "i")
    var = lax.pmean((v - mean) ** 2, "i")
    return fnp.sum(fnp.tanh((v - mean) / fnp.sqrt(var + 0.1)) * WEIGHTS)


def test_per_example_grads_through_pmean():
    per_lane = fg.vmap(fg.grad(normalized_loss), axis_name="i")(X)

    def total(v):
        return float(np.sum(np.asarray(fg.vmap(normalized_loss, axis_name="i")(v))))

    eps = 1e-6
    numerical = np.zeros_like(X)
    for k in np.ndindex(X.shape):
        step = np.zeros_like(X)
        step[k] = eps
        numerical[k] = (total(X + step) - total(X - step)) / (2 * eps)
    assert_close(per_lane, numerical, rtol=1e-6, atol=1e-6)
    # Differentiating vmap(grad) again: second derivatives through the transposed collectives.
    check_grads(fg.vmap(fg.grad(normalized_loss), axis_name="i"), (X,), order=1)


# ---------------------------------------------------------------------------------------------
# Errors


UNBOUND = [
    lambda x: lax.psum(x, "i"),
    lambda x: lax.pmean(x, "i"),
    lambda x: lax.pmax(x, "i"),
    lambda x: lax.pmin(x, "i"),
    lambda x: lax.all_gather(x, "i"),
    lambda x: lax.axis_index("i"),
    lambda x: lax.ppermute(x, "i", [(0, 1)]),
    lambda x: lax.all_to_all(x, "i", 0, 0),
    lambda x: lax.psum_scatter(x, "i"),
    lambda x: lax.psum(x, ("i", "j")),
    lambda x: lax.pbroadcast(x, "i", 0),
    lambda x: lax.pcast(x, "i", to="varying"),
]


@pytest.mark.parametrize("fun", UNBOUND)
def test_unbound_axis_name(fun):
    x = fnp.ones(2)
    with pytest.raises(NameError, match="unbound axis name: i"):
        fun(x)
    with pytest.raises(NameError, match="unbound axis name: i"):
        fg.make_jaxpr(fun)(x)
    with pytest.raises(NameError, match="unbound axis name: i"):
        fg.vmap(fun, axis_name="k")(fnp.ones((2, 2)))


def test_binding_a_collective_eagerly_raises_name_error():
    with pytest.raises(NameError, match="unbound axis name: i"):
        parallel.psum_p.bind(fnp.ones(3), axis_name="i", axis_index_groups=None)
    with pytest.raises(NameError, match="unbound axis name: j"):
        parallel.axis_index_p.bind(axis_name=("j", "i"))


@pytest.mark.parametrize(
    "fun, error, match",
    [
        (
            lambda v: lax.psum_scatter(v, "i"),
            ValueError,
            r"psum_scatter: scatter_dimension 0 of the operand of shape \(4,\) must have the "
            r"axis size 2",
        ),
        (
            lambda v: lax.psum_scatter(fnp.ones(3), "i", tiled=True),
            ValueError,
            r"shape \(3,\) must be a multiple of the axis size 2",
        ),
        (
            lambda v: lax.all_to_all(v, "i", 0, 0),
            ValueError,
            r"all_to_all: split_axis 0 of the operand of shape \(4,\) must have the axis size 2",
        ),
        (
            lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True),
            ValueError,
            r"all_to_all: concat_axis 1 is out of range for an operand of shape \(4,\)",
        ),
        (
            lambda v: lax.all_gather(v, "i", axis=2),
            ValueError,
            r"all_gather: axis 2 is out of range for an operand of shape \(4,\)",
        ),
        (
            lambda v: lax.ppermute(v, "i", [(0, 1), (1, 1)]),
            ValueError,
            r"perm \(\(0, 1\), \(1, 1\)\) must send from each source and to each destination",
        ),
        (
            lambda v: lax.ppermute(v, "i", [(0, 2)]),
            ValueError,
            r"perm \(\(0, 2\),\) names lanes outside the axis of size 2",
        ),
        (
            lambda v: lax.psum(v, "i", axis_index_groups=[[0], [1]]),
            NotImplementedError,
            "psum: axis_index_groups",
        ),
        (
            lambda v: lax.pbroadcast(v, "i", 2),
            ValueError,
            r"pbroadcast: source 2 is not a lane of axis 'i' \(size 2\)",
        ),
        (lambda v: lax.pcast(v, {"i"}, to="varying"), TypeError, "a name or a tuple of names"),
        (lambda v: lax.pcast(v, "i", to="constant"), ValueError, "to must be one of"),
        (lambda v: lax.pcast(v, "i", to="reduced"), NotImplementedError, "explicit sharding"),
        (
            lambda v: lax.pmax(fnp.ones(2, np.complex64), "i"),
            TypeError,
            "pmax does not accept dtype complex64",
        ),
    ],
)
def test_errors(fun, error, match):
    with pytest.raises(error, match=match):
        fg.vmap(fun, axis_name="i")(np.zeros((2, 4)))


def test_several_axes_not_supported_for_ppermute():
    def lane(v):
        return lax.ppermute(v, ("i", "j"), [(0, 1)])

    with pytest.raises(NotImplementedError, match=r"ppermute over several axes"):
        fg.vmap(fg.vmap(lane, axis_name="j"), axis_name="i")(np.zeros((2, 2)))
