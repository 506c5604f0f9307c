"""shard_map over a mesh of virtual CPU devices: values against NumPy references built from
the blocks each device holds, collectives by mesh axis name (one axis, several, and their
order), composition with jit, grad and vmap, layouts from device_put and NamedSharding, and
bad specs, which must be refused with errors naming the dimension and the axis."""

import numpy as np
import pytest
from checks import assert_close, cpu_devices

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.devices import gpu_available
from funcgrad.experimental.shard_map import shard_map as experimental_shard_map
from funcgrad.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding
from funcgrad.test_util import check_grads

P = PartitionSpec
NUM_DEVICES = 8


@pytest.fixture(autouse=True)
def eight_devices():
    with cpu_devices(NUM_DEVICES):
        yield


@pytest.fixture
def mesh():
    return fg.make_mesh((2, 4), ("i", "j"))


def _x(shape=(8, 12)):
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape) / 10.0


def _block(x, i, j, rows: int, cols: int):
    """The block of `x` that the device at mesh position (i, j) holds when the rows split
    `rows` ways and the columns `cols` ways, over i and j as given."""
    r, c = x.shape[0] // rows, x.shape[1] // cols
    return x[i * r : (i + 1) * r, j * c : (j + 1) * c]


# ---------------------------------------------------------------------------------------------
# Meshes and specs


def test_make_mesh_and_mesh(mesh):
    assert mesh.shape == {"i": 2, "j": 4}
    assert mesh.axis_names == ("i", "j") and mesh.size == 8
    np.testing.assert_array_equal(mesh.device_ids, np.arange(8).reshape(2, 4))
    same = Mesh(np.array(fg.devices()).reshape(2, 4), ("i", "j"))
    assert same == mesh and hash(same) == hash(mesh)
    assert Mesh(fg.devices()[:4], "k").shape == {"k": 4}
    assert fg.P is P and fg.sharding.P is P
    with pytest.raises(ValueError, match="needs 16 devices but only 8"):
        fg.make_mesh((4, 4), ("a", "b"))
    with pytest.raises(ValueError, match="2 axis names"):
        Mesh(fg.devices(), ("a", "b"))
    with pytest.raises(ValueError, match="repeat"):
        fg.make_mesh((2, 2), ("a", "a"))


def test_axis_types_are_recorded():
    AxisType = fg.sharding.AxisType
    devices = np.array(fg.devices()).reshape(2, 4)
    assert Mesh(devices, ("i", "j")).axis_types == (AxisType.Auto, AxisType.Auto)
    explicit = fg.make_mesh((2, 4), ("i", "j"), axis_types=(AxisType.Explicit, AxisType.Auto))
    assert explicit.axis_types == (AxisType.Explicit, AxisType.Auto)
    with pytest.raises(ValueError, match="1 axis_types .* for 2 axis names"):
        Mesh(devices, ("i", "j"), axis_types=AxisType.Explicit)
    with pytest.raises(TypeError, match="axis_types must be AxisType members"):
        Mesh(devices, ("i", "j"), axis_types=("auto", "auto"))


def test_partition_spec():
    assert P("i", None) == P("i", None) != P("i")
    assert P(["i", "j"]) == P(("i", "j"))
    assert tuple(P(("i", "j"), None)) == (("i", "j"), None)
    assert repr(P("i", None)) == "PartitionSpec('i', None)"
    with pytest.raises(TypeError, match="axis names"):
        P(3)


# ---------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize(
    "spec", [P("i", "j"), P(("i", "j"), None), P(("j", "i"), None), P(None, "j"), P()]
)
def test_elementwise_equals_unsharded(mesh, spec):
    x = _x()
    f = fg.shard_map(lambda a: fnp.sin(a) * a + 1.0, mesh=mesh, in_specs=spec, out_specs=spec)
    y = f(x)
    assert_close(y, np.sin(x) * x + 1.0)
    assert y.sharding.mesh == mesh
    assert y.sharding.shard_shape(x.shape) == NamedSharding(mesh, spec).shard_shape(x.shape)


def test_blocks_each_device_sees(mesh):
    """Each device's block, gathered as a new leading axis split over the whole mesh."""
    x = _x()

    def each(spec):
        f = fg.shard_map(lambda a: a[None], mesh=mesh, in_specs=spec, out_specs=P(("i", "j")))
        return np.asarray(f(x))

    blocks = each(P("i", "j"))
    for i in range(2):
        for j in range(4):
            np.testing.assert_array_equal(blocks[4 * i + j], _block(x, i, j, 2, 4))
    # Rows split over (j, i): device (i, j) holds row block 2 * j + i.
    blocks = each(P(("j", "i")))
    for i in range(2):
        for j in range(4):
            np.testing.assert_array_equal(blocks[4 * i + j], x[2 * j + i : 2 * j + i + 1])
    # Columns split over j only: the same block on both devices along i.
    blocks = each(P(None, "j"))
    for i in range(2):
        for j in range(4):
            np.testing.assert_array_equal(blocks[4 * i + j], _block(x, 0, j, 1, 4))


def test_psum_over_one_and_two_axes(mesh):
    x = _x()
    over_j = fg.shard_map(
        lambda a: lax.psum(a, "j"), mesh=mesh, in_specs=P("i", "j"), out_specs=P("i")
    )(x)
    expected = np.concatenate([sum(_block(x, i, j, 2, 4) for j in range(4)) for i in range(2)])
    assert_close(over_j, expected)

    over_i = fg.shard_map(
        lambda a: lax.psum(a, "i"), mesh=mesh, in_specs=P("i", "j"), out_specs=P(None, "j")
    )(x)
    expected = np.concatenate([sum(_block(x, i, j, 2, 4) for i in range(2)) for j in range(4)], 1)
    assert_close(over_i, expected)

    for names in [("i", "j"), ("j", "i")]:
        total = fg.shard_map(
            lambda a, names=names: lax.psum(a, names),
            mesh=mesh,
            in_specs=P("i", "j"),
            out_specs=P(),
        )(x)
        blocks = [_block(x, i, j, 2, 4) for i in range(2) for j in range(4)]
        assert_close(total, sum(blocks))

    means = fg.shard_map(
        lambda a: (lax.pmean(a, "j"), lax.pmax(a, "i")),
        mesh=mesh,
        in_specs=P("i", "j"),
        out_specs=(P("i"), P(None, "j")),
    )(x)
    assert_close(means[0], x.reshape(8, 4, 3).mean(1))
    assert_close(means[1], np.maximum(x[:4], x[4:]))


def test_axis_index(mesh):
    def indices():
        return fnp.stack(
            [
                lax.axis_index("i"),
                lax.axis_index("j"),
                lax.axis_index(("i", "j")),
                lax.axis_index(("j", "i")),
            ]
        )[None, None]

    out = fg.shard_map(indices, mesh=mesh, in_specs=(), out_specs=P("i", "j"))()
    for i in range(2):
        for j in range(4):
            assert list(np.asarray(out[i, j])) == [i, j, 4 * i + j, 2 * j + i]


def test_all_gather(mesh):
    x = _x()
    untiled = fg.shard_map(
        lambda a: lax.all_gather(a, "j"), mesh=mesh, in_specs=P("i", "j"), out_specs=P(None, "i")
    )(x)
    # Device (i, j) gets the 4 column blocks of row block i stacked: (4, 4, 3) per device,
    # the row blocks side by side along the second axis.
    assert untiled.shape == (4, 8, 3)
    for i in range(2):
        for j in range(4):
            np.testing.assert_array_equal(untiled[j, 4 * i : 4 * i + 4], _block(x, i, j, 2, 4))
    tiled = fg.shard_map(
        lambda a: lax.all_gather(a, "j", axis=1, tiled=True),
        mesh=mesh,
        in_specs=P("i", "j"),
        out_specs=P("i"),
    )(x)
    assert_close(tiled, x)
    everything = fg.shard_map(
        lambda a: lax.all_gather(a, ("i", "j"), tiled=True),
        mesh=mesh,
        in_specs=P(("i", "j")),
        out_specs=P(),
    )(x)
    assert_close(everything, x)


def test_ppermute_ring_shift(mesh):
    x = _x()
    ring = [(k, (k + 1) % 4) for k in range(4)]
    shifted = fg.shard_map(
        lambda a: lax.ppermute(a, "j", ring), mesh=mesh, in_specs=P("i", "j"), out_specs=P("i", "j")
    )(x)
    # Device (i, j) receives the block of device (i, j - 1).
    for i in range(2):
        for j in range(4):
            np.testing.assert_array_equal(
                _block(np.asarray(shifted), i, j, 2, 4), _block(x, i, (j - 1) % 4, 2, 4)
            )


def test_psum_scatter_and_all_to_all(mesh):
    x = _x()
    scattered = fg.shard_map(
        lambda a: lax.psum_scatter(a, "j", scatter_dimension=1, tiled=True),
        mesh=mesh,
        in_specs=P("i"),
        out_specs=P("i", "j"),
    )(x)
    assert_close(scattered, 4 * x)  # each device summed the same 4 copies of its row block
    swapped = fg.shard_map(
        lambda a: lax.all_to_all(a, "j", 1, 0, tiled=True),
        mesh=mesh,
        in_specs=P(("i", "j")),
        out_specs=P("i", "j"),
    )(x)
    # Along j the row blocks become column blocks: row block i of the result, columns block
    # j, is the j-th row of row block i of x, ... i.e. the blocks land transposed.
    for i in range(2):
        for j in range(4):
            expected = np.concatenate(
                [x[4 * i + k : 4 * i + k + 1, 3 * j : 3 * j + 3] for k in range(4)]
            )
            np.testing.assert_array_equal(_block(np.asarray(swapped), i, j, 2, 4), expected)


def test_collectives_over_axis_index_groups(mesh):
    """Groups of positions along one mesh axis, and along two (numbered row-major in the
    collective's order of the names): each device combines its group's blocks only."""
    x = _x()
    blocks = {(i, j): _block(x, i, j, 2, 4) for i in range(2) for j in range(4)}
    groups_j = ((0, 2), (3, 1))
    summed = fg.shard_map(
        lambda a: lax.psum(a, "j", axis_index_groups=groups_j),
        mesh=mesh,
        in_specs=P("i", "j"),
        out_specs=P("i", "j"),
    )(x)
    for (i, j), _ in blocks.items():
        [group] = [g for g in groups_j if j in g]
        expected = sum(blocks[i, k] for k in group)
        assert_close(_block(np.asarray(summed), i, j, 2, 4), expected)

    # Over ("j", "i"), device (i, j) is at position 2 * j + i.
    groups = ((0, 5), (6, 3), (1, 2), (4, 7))
    gathered = fg.shard_map(
        lambda a: lax.all_gather(a, ("j", "i"), axis_index_groups=groups, tiled=True),
        mesh=mesh,
        in_specs=P("i", "j"),
        out_specs=P("i", "j"),
    )(x)
    for i, j in blocks:
        [group] = [g for g in groups if 2 * j + i in g]
        expected = np.concatenate([blocks[p % 2, p // 2] for p in group])
        np.testing.assert_array_equal(_block(np.asarray(gathered), i, j, 2, 4), expected)

    # A group's sum is the same within the group only, so out_specs must name the axis.
    grouped_sum = lambda a: lax.psum(a, "j", axis_index_groups=groups_j)  # noqa: E731
    with pytest.raises(ValueError, match="leaves out mesh axis 'j'.*axis_index_groups"):
        fg.shard_map(grouped_sum, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i"))(x)
    unchecked = fg.shard_map(
        grouped_sum, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i"), check_vma=False
    )(x)
    assert_close(unchecked, np.concatenate([blocks[i, 0] + blocks[i, 2] for i in range(2)]))

    def loss(a):
        f = fg.shard_map(
            lambda b: lax.psum(b**2, "j", axis_index_groups=groups_j) * b,
            mesh=mesh,
            in_specs=P("i", "j"),
            out_specs=P("i", "j"),
        )
        return fnp.sum(fnp.sin(f(a)))

    check_grads(loss, (x,), order=1, modes=["rev"], eps=1e-6)


def test_pbroadcast_and_pcast(mesh):
    x = _x()
    from_third = fg.shard_map(
        lambda a: lax.pbroadcast(a, "j", 2), mesh=mesh, in_specs=P("i", "j"), out_specs=P("i")
    )(x)
    assert_close(from_third, np.concatenate([_block(x, i, 2, 2, 4) for i in range(2)]))
    # Over ("j", "i"), position 5 is the device at i = 1, j = 2.
    from_fifth = fg.shard_map(
        lambda a: lax.pbroadcast(a, ("j", "i"), 5), mesh=mesh, in_specs=P("i", "j"), out_specs=P()
    )(x)
    assert_close(from_fifth, _block(x, 1, 2, 2, 4))

    def scaled(w, a):
        return fg.shard_map(
            lambda w, a: lax.pcast(w, ("i", "j"), to="varying") * a + lax.pbroadcast(a, "i", 1),
            mesh=mesh,
            in_specs=(P(), P("i", "j")),
            out_specs=P("i", "j"),
        )(w, a)

    w = _x((4, 3)) - 0.5
    rows = np.concatenate([_block(x, 1, j, 2, 4) for j in range(4)], 1)
    assert_close(scaled(w, x), np.tile(w, (2, 4)) * x + np.tile(rows, (2, 1)))
    check_grads(scaled, (w, x), order=1, eps=1e-6)


def test_one_device_mesh():
    single = fg.make_mesh((1,), ("d",))
    x = _x((3, 4))
    f = fg.shard_map(
        lambda a: lax.psum(a * 2.0, "d"), mesh=single, in_specs=P("d"), out_specs=P("d")
    )
    assert_close(f(x), 2 * x)
    assert_close(fg.jit(f)(x), 2 * x)


def test_pytrees_closures_and_several_results(mesh):
    w = np.linspace(-1.0, 1.0, 12)

    def f(tree):
        a, b = tree["a"], tree["b"]
        return {"sum": lax.psum(fnp.sum(a * w[:3]), ("i", "j")), "b": b * 2}

    x = _x()
    out = fg.shard_map(
        f, mesh=mesh, in_specs=({"a": P("i", "j"), "b": P()},), out_specs={"sum": P(), "b": P()}
    )({"a": x, "b": np.ones(2)})
    assert_close(out["sum"], np.sum(x * np.tile(w[:3], 4)))
    assert_close(out["b"], 2 * np.ones(2))


# ---------------------------------------------------------------------------------------------
# Transformations


def _loss_sharded(mesh):
    def per_device(w, x):
        return lax.psum(fnp.sum(fnp.tanh(x @ w) ** 2), ("i", "j"))

    return fg.shard_map(per_device, mesh=mesh, in_specs=(P(), P(("i", "j"))), out_specs=P())


def _loss(w, x):
    return fnp.sum(fnp.tanh(x @ w) ** 2)


def test_grad_through_psum_equals_unsharded_grad(mesh):
    x = _x((16, 5)) / 10.0
    w = np.linspace(-1.0, 1.0, 15).reshape(5, 3)
    loss = _loss_sharded(mesh)
    assert_close(loss(w, x), _loss(w, x))
    assert_close(fg.grad(loss)(w, x), fg.grad(_loss)(w, x))
    assert_close(fg.grad(loss, argnums=1)(w, x), fg.grad(_loss, argnums=1)(w, x))
    assert_close(fg.jit(fg.grad(loss))(w, x), fg.grad(_loss)(w, x))
    check_grads(lambda w: loss(w, x), (w,), order=1, modes=("fwd", "rev"))


def test_grad_through_collectives(mesh):
    """all_gather, ppermute and a result replicated over an axis, against central
    differences."""
    x = _x((8, 4)) / 10.0
    ring = [(k, (k + 1) % 4) for k in range(4)]

    def per_device(a):
        gathered = lax.all_gather(fnp.sin(a), "j", tiled=True)
        shifted = lax.ppermute(a * a, "j", ring)
        return fnp.sum(gathered) * shifted

    f = fg.shard_map(per_device, mesh=mesh, in_specs=P("j", "i"), out_specs=P("j", "i"))
    check_grads(f, (x,), order=1, modes=("fwd", "rev"))
    replicated = fg.shard_map(
        lambda a: lax.pmean(fnp.cos(a), "i"), mesh=mesh, in_specs=P("j", "i"), out_specs=P("j")
    )
    check_grads(replicated, (x,), order=1, modes=("fwd", "rev"))


def test_jit_equals_eager(mesh):
    x = _x()

    def per_device(a):
        return lax.psum(fnp.exp(a / 10.0), "j") + lax.axis_index("i")

    f = fg.shard_map(per_device, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i"))
    assert_close(fg.jit(f)(x), f(x))
    assert_close(fg.jit(lambda a: f(a) * 2.0)(x), 2.0 * np.asarray(f(x)))


def test_vmap_equals_loop(mesh):
    xs = _x((3, 8, 12))

    def per_device(a, b):
        return lax.psum(a * b, "j")

    f = fg.shard_map(per_device, mesh=mesh, in_specs=(P("i", "j"), P()), out_specs=P("i"))
    b = 0.5
    batched = fg.vmap(f, in_axes=(0, None))(xs, b)
    assert_close(batched, np.stack([np.asarray(f(x, b)) for x in xs]))
    batched = fg.vmap(f, in_axes=(1, None), out_axes=1)(np.moveaxis(xs, 0, 1), b)
    assert_close(
        np.moveaxis(np.asarray(batched), 1, 0), np.stack([np.asarray(f(x, b)) for x in xs])
    )


def test_vmap_of_collectives_over_its_axis_and_the_mesh(mesh):
    """Batching the devices' program needs the sizes of the mesh axes next to vmap's own."""
    xs = _x((3, 2, 4))  # [b, i, j], one element per device

    def per_device(a):
        return a + 100 * lax.axis_index(("b", "i", "j")), lax.all_gather(a, ("j", "b"), tiled=True)

    f = fg.shard_map(per_device, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i", "j"))
    index, gathered = fg.vmap(f, axis_name="b")(xs)
    assert_close(index, xs + 100 * np.arange(24).reshape(3, 2, 4))
    # Device (i, j) of every lane gathers xs[b', i, j'] in (j', b') order: rows i * 12 + k of
    # column j of the whole.
    gathered_by_row = np.concatenate([xs[:, i, :].T.reshape(-1) for i in range(2)])
    assert_close(gathered, np.broadcast_to(gathered_by_row[:, None], (3, 24, 4)))


def test_vmap_of_a_closure_and_second_derivatives(mesh):
    x = _x()

    def scaled(s):
        return fg.shard_map(
            lambda a: lax.psum(a * s, "j"), mesh=mesh, in_specs=P("i", "j"), out_specs=P("i")
        )(x)

    scales = np.array([1.0, 2.0, 3.0])
    assert_close(fg.vmap(scaled)(scales), np.stack([np.asarray(scaled(s)) for s in scales]))
    loss = fg.shard_map(
        lambda w, a: lax.psum(fnp.sum(fnp.sin(a * w)), ("i", "j")),
        mesh=mesh,
        in_specs=(P(), P("i", "j")),
        out_specs=P(),
    )
    assert_close(fg.hessian(loss)(0.1, x), -np.sum(np.sin(0.1 * x) * x * x))


def test_collectives_inside_control_flow(mesh):
    x = _x()

    def accumulate(a):
        def step(total, _):
            return total + lax.psum(a, "j"), None

        return lax.scan(step, fnp.zeros_like(a), None, length=3)[0]

    expected = 3 * x.reshape(8, 4, 3).sum(1)
    out = fg.shard_map(accumulate, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i", "j"))(x)
    assert_close(out, np.tile(expected, (1, 4)))
    # The check follows the loop: its carry only ever adds a psum over j, so it is the same
    # along j although the loop reads `a`, which is split over j.
    replicated = fg.shard_map(accumulate, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i"))
    assert_close(replicated(x), expected)
    trusted = fg.shard_map(
        accumulate, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i"), check_vma=False
    )
    assert_close(trusted(x), expected)


def _psum_j_loop(kind: str):
    """A loop whose carry is a psum over j of the block `a` each step, in each form."""

    def step(c, a):
        return c + lax.psum(a, "j")

    def run(a):
        zero = fnp.zeros_like(a)
        if kind == "scan":
            return lax.scan(lambda c, _: (step(c, a), None), zero, None, length=2)[0]
        if kind == "fori":
            return lax.fori_loop(0, 2, lambda i, c: step(c, a), zero)
        if kind == "while":
            return lax.while_loop(
                lambda c: c[1] < 2, lambda c: (step(c[0], a), c[1] + 1), (zero, 0)
            )[0]
        return lax.cond(lax.psum(a.sum(), "j") > 0, lambda: step(zero, a), lambda: step(zero, -a))

    return run


@pytest.mark.parametrize("kind", ["scan", "fori", "while", "cond"])
def test_replication_check_follows_control_flow(mesh, kind):
    x = _x()
    run = fg.shard_map(_psum_j_loop(kind), mesh=mesh, in_specs=P(None, "j"), out_specs=P())
    sums = x.reshape(8, 4, 3).sum(1)
    assert_close(run(x), (1 if kind == "cond" else 2) * sums)  # (x's sum is positive)


@pytest.mark.parametrize(
    "fun",
    [
        # The carry picks up the block itself.
        lambda a: lax.fori_loop(0, 2, lambda i, c: c + lax.psum(c, "j") + a, fnp.zeros_like(a)),
        # The devices may run different numbers of iterations.
        lambda a: lax.while_loop(
            lambda c: c[1] < lax.axis_index("j"), lambda c: (lax.psum(c[0], "j"), c[1] + 1), (a, 0)
        )[0],
        # The devices may take different branches.
        lambda a: lax.cond(
            lax.axis_index("j") == 0, lambda: lax.psum(a, "j"), lambda: 2 * lax.psum(a, "j")
        ),
        # An iteration after the first makes the carry differ.
        lambda a: lax.scan(
            lambda c, _: ((c[1], c[0] + lax.axis_index("j")), None),
            (lax.psum(a, "j"), lax.psum(a, "j")),
            None,
            length=3,
        )[0][0],
    ],
    ids=["carry", "trip count", "branch", "second iteration"],
)
def test_replication_check_refuses_what_control_flow_makes_differ(mesh, fun):
    with pytest.raises(ValueError, match="leaves out mesh axis 'j'"):
        fg.shard_map(fun, mesh=mesh, in_specs=P(None, "j"), out_specs=P())(_x())


def test_context_mesh_and_experimental_name(mesh):
    x = _x()
    with mesh:
        f = fg.shard_map(lambda a: a * 3.0, in_specs=P("i"), out_specs=P("i"))
        assert_close(f(x), 3 * x)
    with pytest.raises(ValueError, match="has no mesh"):
        f(x)
    with fg.set_mesh(mesh):
        assert_close(f(x), 3 * x)
    g = experimental_shard_map(lambda a: lax.psum(a, "i"), mesh, P("i"), P(), check_rep=True)
    assert_close(g(x), x[:4] + x[4:])


# ---------------------------------------------------------------------------------------------
# Layouts


def test_device_put_with_named_sharding(mesh):
    x = _x()
    sharding = NamedSharding(mesh, P("i", "j"))
    y = fg.device_put(x, sharding)
    assert y.sharding == sharding and not y.is_fully_replicated()
    np.testing.assert_array_equal(y, x)
    shards = y.addressable_shards
    assert [s.device for s in shards] == fg.devices()
    for k, shard in enumerate(shards):
        i, j = divmod(k, 4)
        assert shard.data.shape == (4, 3) == sharding.shard_shape(x.shape)
        np.testing.assert_array_equal(shard.data, _block(x, i, j, 2, 4))
        np.testing.assert_array_equal(shard.data, x[shard.index])

    replicated = fg.device_put(x, NamedSharding(mesh, P(None, "j")))
    assert [s.data.shape for s in replicated.addressable_shards] == [(8, 3)] * 8
    assert fg.device_put(x, NamedSharding(mesh, P())).is_fully_replicated()
    # Split over axes of one device each, the blocks are the whole array.
    thin = fg.make_mesh((1, 8), ("one", "all"))
    assert fg.device_put(x, NamedSharding(thin, P("one"))).is_fully_replicated()
    assert not NamedSharding(thin, P("one", "all")).is_fully_replicated
    assert fg.numpy.asarray(x).sharding == SingleDeviceSharding(fg.devices()[0])
    assert y.devices() == set(fg.devices())


@pytest.mark.parametrize("how", ["device", "sharding"])
def test_device_put_on_one_device_leaves_the_layout_it_had(mesh, how):
    """Put on one device, an array laid out over a mesh (or by pmap) is whole on that device."""
    x = _x()
    third = fg.devices()[3]
    target = third if how == "device" else SingleDeviceSharding(third)
    sources = [
        x,
        fg.device_put(x, NamedSharding(mesh, P("i", "j"))),
        fg.pmap(lambda v: v)(x),
    ]
    for source in sources:
        y = fg.device_put(source, target)
        assert y.sharding == SingleDeviceSharding(third)
        assert y.device is third and y.devices() == {third} and y.is_fully_replicated()
        [shard] = y.addressable_shards
        assert shard.device is third
        np.testing.assert_array_equal(shard.data, x)
        np.testing.assert_array_equal(y, x)


def test_with_sharding_constraint_and_jit_shardings(mesh):
    x = _x()
    sharding = NamedSharding(mesh, P("i"))

    @fg.jit
    def f(a):
        return lax.with_sharding_constraint(a * 2.0, sharding)

    assert_close(f(x), 2 * x)
    assert lax.with_sharding_constraint(x, sharding).sharding == sharding
    g = fg.jit(lambda a: a + 1.0, in_shardings=sharding, out_shardings=NamedSharding(mesh, P("j")))
    out = g(x)
    assert_close(out, x + 1.0)
    assert out.sharding == NamedSharding(mesh, P("j"))
    with pytest.raises(ValueError, match="dimension 0 .* size 3 is not a multiple of 2"):
        g(np.ones((3, 4)))
    with mesh:
        assert lax.with_sharding_constraint(x, P(None, "j")).sharding.spec == P(None, "j")


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_with_sharding_constraint_inside_jit_lays_out_the_results(mesh, backend):
    """A constraint staged in a program computes its operand and lays out the jitted call's
    result it makes (through nested jits, vmap, derivatives and control flow too)."""
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", backend)
    try:
        x = _x()
        rows, cols = NamedSharding(mesh, P("i")), NamedSharding(mesh, P(None, "j"))
        f = fg.jit(lambda a: (lax.with_sharding_constraint(a * 2.0, rows), a + 1.0))
        constrained, plain = f(x)
        assert_close(constrained, 2 * x)
        assert_close(plain, x + 1.0)
        assert constrained.sharding == rows
        assert plain.sharding == SingleDeviceSharding(fg.devices()[0])
        assert [s.data.shape for s in constrained.addressable_shards] == [(4, 12)] * 8
        assert fg.jit(lambda a: f(a)[0] + 0.0)(x).sharding != rows  # (only what it makes)
        assert fg.jit(lambda a: f(a)[0])(x).sharding == rows
        assert fg.jit(f).lower(x).compile()(x)[0].sharding == rows
        text = fg.make_jaxpr(lambda a: lax.with_sharding_constraint(a, cols))(x)
        assert "sharding_constraint" in str(text)

        stacked = np.stack([x, -x, 2 * x])
        batched = fg.jit(fg.vmap(lambda a: lax.with_sharding_constraint(a * a, cols)))(stacked)
        assert_close(batched, stacked**2)
        assert batched.sharding == NamedSharding(mesh, P(None, None, "j"))

        grad = fg.jit(fg.grad(lambda a: fnp.sum(fnp.sin(lax.with_sharding_constraint(a, cols)))))
        assert_close(grad(x), np.cos(x))
        primal, tangent = fg.jvp(lambda a: lax.with_sharding_constraint(a**2, rows), (x,), (x,))
        assert primal.sharding == rows
        assert_close(tangent, 2 * x * x)

        def looped(a):
            body = lambda c, _: (lax.with_sharding_constraint(c * 2.0, rows), None)  # noqa: E731
            return lax.scan(body, a, None, length=3)[0]

        assert_close(fg.jit(looped)(x), 8 * x)
        mapped = fg.shard_map(lambda a: a * 3.0, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
        assert fg.jit(mapped)(x).sharding == rows
    finally:
        fg.config.update("jit_backend", previous)


def test_with_sharding_constraint_refuses_what_cannot_be_laid_out(mesh):
    x = _x()
    rows = NamedSharding(mesh, P("i"))
    with pytest.raises(ValueError, match=r"has 1 entries but the array has rank 0"):
        fg.jit(lambda a: lax.with_sharding_constraint(fnp.sum(a), rows))(x)
    with pytest.raises(ValueError, match="size 5 is not a multiple of 2"):
        fg.jit(lambda a: lax.with_sharding_constraint(a[:5], rows))(x)
    with pytest.raises(ValueError, match="a sharding is None"):
        lax.with_sharding_constraint((x, x), (rows, None))
    inside = lambda spec: fg.shard_map(  # noqa: E731
        lambda a: lax.with_sharding_constraint(a, NamedSharding(mesh, spec)),
        mesh=mesh,
        in_specs=P("i"),
        out_specs=P("i"),
    )
    with pytest.raises(ValueError, match="names mesh axis 'i', which the shard_map"):
        inside(P("i"))(x)
    assert_close(inside(P())(x), x)


def test_none_shardings_leave_their_values_as_they_are(mesh):
    x = _x()
    rows = NamedSharding(mesh, P("i"))
    first, second = fg.jit(lambda a: (a * 2.0, a), out_shardings=(rows, None))(x)
    assert first.sharding == rows and second.sharding == SingleDeviceSharding(fg.devices()[0])
    assert_close(fg.jit(lambda a, b: a * b, in_shardings=(rows, None))(x, x[:1]), x * x[:1])
    put = fg.device_put((x, x), (rows, None))
    assert put[0].sharding == rows and put[1].sharding == SingleDeviceSharding(fg.devices()[0])


def test_none_in_specs_pass_arguments_as_they_are(mesh):
    """A None in in_specs gives the function its arguments unsplit and untraced, on every
    device: Python values stay Python values (and key the trace), arrays are whole."""
    x = _x()
    seen = []

    def scale(a, k, name):
        seen.append((type(k), name))
        return a * k * len(name)

    f = fg.shard_map(scale, mesh=mesh, in_specs=(P("i", "j"), None, None), out_specs=P("i", "j"))
    assert_close(f(x, 3, "ab"), 6 * x)
    assert_close(f(x, 2, "abc"), 6 * x)
    assert_close(f(x, 3, "ab"), 6 * x)
    assert seen == [(int, "ab"), (int, "abc")]  # (traced once per static value)
    assert_close(f(x, 0.5, "ab"), x)
    assert seen[-1] == (float, "ab")

    whole = fg.shard_map(lambda a: a * 2.0, mesh=mesh, in_specs=None, out_specs=P())(x)
    assert_close(whole, 2 * x)
    nested = fg.shard_map(
        lambda d: d["a"] * float(np.asarray(d["w"]).sum()),  # (w is concrete on the devices)
        mesh=mesh,
        in_specs=({"a": P("i"), "w": None, "n": None},),
        out_specs=P("i"),
    )({"a": x, "w": np.ones(3), "n": None})
    assert_close(nested, 3 * x)

    def scaled(a, w):
        return fg.shard_map(
            lambda a, w: fnp.sin(a * w),
            mesh=mesh,
            in_specs=(P("i", "j"), None),
            out_specs=P("i", "j"),
        )(a, w)

    w = _x((4, 3)) - 0.3
    assert_close(scaled(x, w), np.sin(x * np.tile(w, (2, 4))))
    assert_close(fg.jit(scaled)(x, w), np.sin(x * np.tile(w, (2, 4))))
    check_grads(lambda w: fnp.sum(scaled(x, w)), (w,), order=1, eps=1e-6)

    both = fg.shard_map(lambda a: (a, None), mesh=mesh, in_specs=P("i"), out_specs=(P("i"), None))
    out, nothing = both(x)
    assert_close(out, x)
    assert nothing is None
    with pytest.raises(ValueError, match="out_specs must be a tree prefix of the output"):
        fg.shard_map(lambda a: (a, a), mesh=mesh, in_specs=P("i"), out_specs=(P("i"), None))(x)


def test_compiled_jit_lays_out_its_results_as_the_jitted_function_does(mesh):
    x = _x()
    rows, cols = NamedSharding(mesh, P("i")), NamedSharding(mesh, P(None, "j"))
    g = fg.jit(lambda a: (a + 1.0, a.T), in_shardings=rows, out_shardings=(rows, cols))
    compiled = g.lower(x).compile()
    for call in (g, compiled):
        first, second = call(x)
        assert_close(first, x + 1.0)
        assert_close(second, x.T)
        assert first.sharding == rows and second.sharding == cols
    with pytest.raises(ValueError, match="dimension 0 .* size 3 is not a multiple of 2"):
        fg.jit(lambda a: a, in_shardings=rows).lower(np.ones((3, 4))).compile()(np.ones((3, 4)))


def test_shardings_of_the_wrong_structure_are_named(mesh):
    rows = NamedSharding(mesh, P("i"))
    x = _x()
    with pytest.raises(
        ValueError, match=r"jit\(.*\) out_shardings must be a tree prefix of the out"
    ):
        fg.jit(lambda a: (a, a), out_shardings=(rows,))(x)
    with pytest.raises(
        ValueError, match=r"jit\(.*\) in_shardings must be a tree prefix of the dyn"
    ):
        fg.jit(lambda a, b: a, in_shardings=(rows,))(x, x)
    with pytest.raises(ValueError, match=r"jit\(.*\) out_shardings: PartitionSpec\('i'\) needs a"):
        fg.jit(lambda a: a, out_shardings=P("i"))(x)
    with pytest.raises(ValueError, match="out_specs must be a tree prefix of the output"):
        fg.shard_map(lambda a: (a, a), mesh=mesh, in_specs=P("i"), out_specs=(P("i"),))(x)


def test_reshard_lays_out_concrete_arrays_and_passes_traced_ones(mesh):
    x = _x()
    rows, cols = NamedSharding(mesh, P("i")), NamedSharding(mesh, P(None, "j"))
    y = fg.sharding.reshard(fg.device_put(x, rows), cols)
    assert fg.reshard is fg.sharding.reshard
    assert all(type(s) is fg.Shard for s in y.addressable_shards)
    assert y.sharding == cols
    np.testing.assert_array_equal(y, x)
    assert [s.data.shape for s in y.addressable_shards] == [(8, 3)] * 8
    tree = fg.sharding.reshard({"a": x, "b": x[:4]}, rows)
    assert tree["a"].sharding == tree["b"].sharding == rows
    with mesh:
        assert fg.sharding.reshard(x, P("j")).sharding == NamedSharding(mesh, P("j"))
    assert_close(fg.jit(lambda a: fg.sharding.reshard(a * 2.0, cols))(x), 2 * x)
    with pytest.raises(ValueError, match="dimension 1 .* size 12 is not a multiple of 8"):
        fg.sharding.reshard(x, NamedSharding(mesh, P(None, ("i", "j"))))


def test_make_single_device_sharding_puts_whole_arrays_on_its_device():
    device = fg.devices()[3]
    sharding = fg.sharding.make_single_device_sharding(device)
    assert sharding == SingleDeviceSharding(device) and sharding.device_set == {device}
    assert sharding.devices_indices_map((2, 3)) == {device: (slice(0, 2), slice(0, 3))}
    with pytest.raises(TypeError, match="takes a device .* got str"):
        fg.sharding.make_single_device_sharding("cpu:3")
    with pytest.raises(ValueError, match="memory_kind 'pinned_host' is not available"):
        fg.sharding.make_single_device_sharding(device, memory_kind="pinned_host")


# Expected drawings, written by hand from the mesh: device k sits at row k // 4 (axis 'i') and
# column k % 4 (axis 'j') of the (2, 4) mesh.
GRID_I_J = """\
┌───────┬───────┬───────┬───────┐
│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │
├───────┼───────┼───────┼───────┤
│ CPU 4 │ CPU 5 │ CPU 6 │ CPU 7 │
└───────┴───────┴───────┴───────┘
"""
GRID_J_I = """\
┌───────┬───────┐
│ CPU 0 │ CPU 4 │
├───────┼───────┤
│ CPU 1 │ CPU 5 │
├───────┼───────┤
│ CPU 2 │ CPU 6 │
├───────┼───────┤
│ CPU 3 │ CPU 7 │
└───────┴───────┘
"""
GRID_COLUMNS_OVER_J = """\
┌─────────┬─────────┬─────────┬─────────┐
│ CPU 0,4 │ CPU 1,5 │ CPU 2,6 │ CPU 3,7 │
└─────────┴─────────┴─────────┴─────────┘
"""
GRID_ROWS_OVER_I = """\
┌─────────────┐
│ CPU 0,1,2,3 │
├─────────────┤
│ CPU 4,5,6,7 │
└─────────────┘
"""
GRID_REPLICATED = """\
┌─────────────────────┐
│ CPU 0,1,2,3,4,5,6,7 │
└─────────────────────┘
"""


@pytest.mark.parametrize(
    "shape, spec, expected",
    [
        ((8, 12), P("i", "j"), GRID_I_J),
        ((8, 12), P("j", "i"), GRID_J_I),
        ((8, 12), P(None, "j"), GRID_COLUMNS_OVER_J),
        ((8, 12), P("i"), GRID_ROWS_OVER_I),
        ((8, 12), P(), GRID_REPLICATED),
        ((12,), P("j"), GRID_COLUMNS_OVER_J),  # a vector's blocks make one row
        ((), P(), GRID_REPLICATED),
    ],
)
def test_visualize_sharding_draws_each_block_with_its_devices(mesh, capsys, shape, spec, expected):
    fg.debug.visualize_sharding(shape, NamedSharding(mesh, spec))
    assert capsys.readouterr().out == expected


def test_visualize_array_sharding_of_laid_out_single_device_and_pmap_arrays(mesh, capsys):
    fg.debug.visualize_array_sharding(fg.device_put(_x(), NamedSharding(mesh, P("j", "i"))))
    assert capsys.readouterr().out == GRID_J_I
    fg.debug.visualize_array_sharding(fnp.ones(3))
    assert capsys.readouterr().out == "┌───────┐\n│ CPU 0 │\n└───────┘\n"
    # pmap's output: one row of the leading axis per device.
    fg.debug.visualize_array_sharding(fg.pmap(lambda a: a * 2.0)(np.ones((8, 2))))
    rows = [f"│ CPU {k} │" for k in range(8)]
    assert capsys.readouterr().out.splitlines()[1::2] == rows


def test_inspect_array_sharding_and_bad_input(mesh):
    seen = []
    x = fg.device_put(_x(), NamedSharding(mesh, P("i")))
    fg.debug.inspect_array_sharding({"a": x, "b": fnp.ones(2)}, callback=seen.append)
    assert seen == [NamedSharding(mesh, P("i")), SingleDeviceSharding(fg.devices()[0])]
    with pytest.raises(TypeError, match="needs a concrete array, got a traced value"):
        fg.jit(lambda a: fg.debug.inspect_array_sharding(a, callback=print))(x)
    with pytest.raises(TypeError, match="needs a concrete array, got a traced value"):
        fg.jit(fg.debug.visualize_array_sharding)(x)
    with pytest.raises(ValueError, match=r"at most two dimensions; the shape \(2, 4, 8\) has 3"):
        fg.debug.visualize_sharding((2, 4, 8), NamedSharding(mesh, P("i")))
    with pytest.raises(TypeError, match="takes a Sharding, got PartitionSpec"):
        fg.debug.visualize_sharding((8, 8), P("i"))
    with pytest.raises(ValueError, match="not a multiple of 4"):
        fg.debug.visualize_sharding((8, 6), NamedSharding(mesh, P(None, "j")))


# ---------------------------------------------------------------------------------------------
# Bad input


def test_bad_specs(mesh):
    x = _x((6, 12))

    def run(in_specs, out_specs=None):
        out_specs = P() if out_specs is None else out_specs
        return fg.shard_map(
            lambda a: a, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
        )(x)

    with pytest.raises(ValueError, match=r"args\[0\].*dimension 0 .*'j' \(size 4\).*size 6 is not"):
        run(P("j"))
    with pytest.raises(ValueError, match=r"dimension 1 .*'i' \(size 2\) x 'j' \(size 4\)"):
        run(P(None, ("i", "j")))
    with pytest.raises(ValueError, match="names mesh axis 'k'.*axes 'i', 'j'"):
        run(P("k"))
    with pytest.raises(ValueError, match="3 entries.*rank 2"):
        run(P("i", None, None))
    with pytest.raises(ValueError, match="'i' twice"):
        run(P("i", "i"))
    with pytest.raises(ValueError, match="out_specs for the output .*3 entries.*rank 2"):
        run(P("i"), P("i", None, None))
    with pytest.raises(TypeError, match="must hold PartitionSpecs, got str 'i'"):
        run("i")
    with pytest.raises(ValueError, match="tree prefix"):
        run((P(), P()))
    with pytest.raises(NameError, match="unbound axis name: k"):
        fg.shard_map(lambda a: lax.psum(a, "k"), mesh=mesh, in_specs=P(), out_specs=P())(x)


def test_replication_check(mesh):
    x = _x()

    def run(fun, out_specs, check_vma=True):
        return fg.shard_map(
            fun, mesh=mesh, in_specs=P("i", "j"), out_specs=out_specs, check_vma=check_vma
        )(x)

    with pytest.raises(ValueError, match="leaves out mesh axis 'j'.*check_vma=False"):
        run(lambda a: a, P("i"))
    with pytest.raises(ValueError, match="leaves out mesh axis 'i'"):
        run(lambda a: lax.psum(a, "j") + lax.axis_index("i"), P())
    assert_close(run(lambda a: lax.psum(a, ("i", "j")), P()), x.reshape(2, 4, 4, 3).sum((0, 2)))
    # Unchecked, the devices at position 0 along the left-out axis give the result.
    assert_close(run(lambda a: a, P("i"), check_vma=False), np.concatenate([x[:4, :3], x[4:, :3]]))


# ---------------------------------------------------------------------------------------------
# GPUs


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["cuda_emulator"] + (["gpu"] if gpu_available() else []))
def test_on_gpus(kind):
    """Blocks on each GPU of the mesh (the emulated GPUs, as many as the virtual CPU devices;
    a machine's GPUs, however many), collectives over one axis (within groups of GPUs, met on
    the host) and over the whole mesh, results on the mesh's first GPU."""
    gpus = fg.devices(kind)
    rows = 2 if len(gpus) % 2 == 0 else 1
    mesh = fg.make_mesh((rows, len(gpus) // rows), ("i", "j"), devices=gpus)
    x = np.arange(4 * rows * 2 * mesh.shape["j"], dtype=np.float32).reshape(4 * rows, -1) / 8

    def per_device(a):
        return lax.psum(a, "j"), lax.all_gather(a, "i", tiled=True), lax.psum(a, ("i", "j"))

    f = fg.shard_map(
        per_device, mesh=mesh, in_specs=P("i", "j"), out_specs=(P("i"), P(None, "j"), P())
    )
    summed, gathered, total = f(x)
    cols = mesh.shape["j"]
    assert summed.device is gpus[0]
    assert_close(summed, x.reshape(4 * rows, cols, 2).sum(1))
    assert_close(gathered, x)
    assert_close(total, x.reshape(rows, 4, cols, 2).sum((0, 2)))
    loss = fg.shard_map(
        lambda w, a: lax.psum(fnp.sum(fnp.tanh(a * w)), ("i", "j")),
        mesh=mesh,
        in_specs=(P(), P("i", "j")),
        out_specs=P(),
    )
    w = np.float32(0.3)
    expected = np.sum((1 - np.tanh(x * w) ** 2) * x)
    assert_close(fg.grad(loss)(w, x), expected, rtol=1e-4)
