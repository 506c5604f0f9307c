"""Random shard_map programs against a NumPy simulation of the devices.

A program is a short list of steps, each an elementwise function or a collective over some
of the mesh's axes, in some order, possibly inside control flow. The simulation holds every
device's block (cut from the whole array as the spec says), runs each step on all of them
(a collective within each group of devices that differ only along its axes, ordered
row-major along them), and assembles the result as the out spec says. shard_map must give
the same values, its gradient the central differences of the simulation, and whatever its
replication check accepts must be the same on every device along the axes the out spec
leaves out.
"""

import itertools
import math

import numpy as np
import pytest
from checks import assert_close, cpu_devices
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.sharding import Mesh, PartitionSpec

NUM_DEVICES = 8
MESH_SHAPES = [{"i": 2}, {"i": 4}, {"i": 2, "j": 2}, {"i": 2, "j": 4}, {"i": 4, "j": 2}]


@pytest.fixture(autouse=True)
def eight_devices():
    with cpu_devices(NUM_DEVICES):
        yield


# ---------------------------------------------------------------------------------------------
# The simulated devices


class Grid:
    """The mesh's devices by their coordinates, row-major."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes
        self.names = tuple(sizes)
        self.coords = [
            dict(zip(self.names, c)) for c in itertools.product(*map(range, sizes.values()))
        ]

    def count(self, axes) -> int:
        return math.prod(self.sizes[a] for a in axes)

    def position(self, coords: dict, axes) -> int:
        position = 0
        for a in axes:
            position = position * self.sizes[a] + coords[a]
        return position

    def groups(self, axes) -> list[list[int]]:
        """The devices differing only along `axes`, each group by position along them."""
        groups: dict = {}
        for device, coords in enumerate(self.coords):
            key = tuple(coords[a] for a in self.names if a not in axes)
            groups.setdefault(key, {})[self.position(coords, axes)] = device
        return [[group[k] for k in range(len(group))] for group in groups.values()]

    def blocks(self, x: np.ndarray, names) -> list[np.ndarray]:
        block = [s // self.count(e) for s, e in zip(x.shape, names)]
        return [
            x[
                tuple(
                    slice(self.position(c, e) * b, (self.position(c, e) + 1) * b)
                    for e, b in zip(names, block)
                )
            ]
            for c in self.coords
        ]

    def assembled(self, blocks: list[np.ndarray], names) -> np.ndarray:
        """The whole array, each block read from the devices at position 0 along the axes
        `names` leaves out."""
        shape = tuple(b * self.count(e) for b, e in zip(blocks[0].shape, names))
        whole = np.zeros(shape, blocks[0].dtype)
        mentioned = {a for e in names for a in e}
        for block, c in zip(blocks, self.coords):
            if not any(c[a] for a in self.names if a not in mentioned):
                index = tuple(
                    slice(self.position(c, e) * b, (self.position(c, e) + 1) * b)
                    for e, b in zip(names, block.shape)
                )
                whole[index] = block
        return whole


def _grouped(grid: Grid, axes, values: list, lanes_fn) -> list:
    out = [None] * len(values)
    for group in grid.groups(axes):
        for device, result in zip(group, lanes_fn([values[d] for d in group])):
            out[device] = result
    return out


def _cyclic(n: int) -> list[tuple[int, int]]:
    return [(k, (k + 1) % n) for k in range(n)]


def _shift(lanes):
    """What each lane holds after ppermute by `_cyclic`: its predecessor's value."""
    return [lanes[(k - 1) % len(lanes)] for k in range(len(lanes))]


# Each step: (how funcgrad computes it, how the simulation does on all devices, the axes it
# makes the value differ along, the axes it makes it the same along).
def _step(kind: str, axes: tuple):
    name = axes if len(axes) > 1 else axes[0]
    if kind == "sin":
        return fnp.sin, lambda grid, vs: [np.sin(v) for v in vs], (), ()
    if kind == "psum":
        return (
            lambda v: lax.psum(v, name),
            lambda grid, vs: _grouped(grid, axes, vs, lambda ls: [sum(ls)] * len(ls)),
            (),
            axes,
        )
    if kind == "pmax":
        return (
            lambda v: lax.pmax(v, name),
            lambda grid, vs: _grouped(grid, axes, vs, lambda ls: [np.max(ls, 0)] * len(ls)),
            (),
            axes,
        )
    if kind == "all_gather":
        return (
            lambda v: lax.all_gather(v, name, axis=0, tiled=True),
            lambda grid, vs: _grouped(grid, axes, vs, lambda ls: [np.concatenate(ls)] * len(ls)),
            (),
            axes,
        )
    if kind == "axis_index":
        return (
            lambda v: v + lax.axis_index(name),
            lambda grid, vs: _grouped(grid, axes, vs, lambda ls: [v + k for k, v in enumerate(ls)]),
            axes,
            (),
        )
    assert kind == "ppermute"
    return (
        lambda v: lax.ppermute(v, name, _cyclic(lax.axis_size(name))),
        lambda grid, vs: _grouped(grid, axes, vs, _shift),
        axes,
        (),
    )


KINDS = ["sin", "psum", "pmax", "all_gather", "axis_index", "ppermute"]


@st.composite
def programs(draw):
    """(grid, x, its names, steps, wrapper, varying): a mesh, an array split over it, a list
    of steps and whether they run inside a fori_loop of one trip or a cond of a replicated
    predicate, and the axes the result may differ along."""
    sizes = draw(st.sampled_from(MESH_SHAPES))
    grid = Grid(sizes)
    names: list[list[str]] = [[], []]
    for axis in draw(st.permutations(grid.names)):
        dim = draw(st.sampled_from([0, 1, None]))
        if dim is not None:
            names[dim].append(axis)
    names_t = tuple(tuple(e) for e in names)
    block = [draw(st.integers(1, 2)), draw(st.integers(1, 3))]
    shape = tuple(b * grid.count(e) for b, e in zip(block, names_t))
    # Values from a seed rather than drawn one by one: no two of them tie, so pmax has a
    # derivative and the central differences see it.
    x = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(shape)
    steps = []
    split = {a for e in names_t for a in e}
    varying = set(split)
    rows = block[0]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(KINDS))
        axes = tuple(draw(st.permutations(grid.names))[: draw(st.integers(1, len(grid.names)))])
        if kind == "all_gather":
            if rows * grid.count(axes) > 8:
                continue
            rows *= grid.count(axes)
        steps.append((kind, axes))
        step = _step(kind, axes)
        varying = (varying - set(step[3])) | set(step[2])
    wrapper = draw(st.sampled_from(["none", "fori", "cond"]))
    if wrapper != "none" and any(kind == "all_gather" for kind, _ in steps):
        wrapper = "none"  # (a loop's carry keeps its shape)
    if wrapper != "none":
        varying |= split  # (a loop's carry, or a cond's other branch, starts from the operand)
    return grid, x, names_t, steps, wrapper, varying


def _funcgrad_fun(steps, wrapper, grid):
    funs = [_step(kind, axes)[0] for kind, axes in steps]

    def run(v):
        for f in funs:
            v = f(v)
        return v

    if wrapper == "fori":
        return lambda v: lax.fori_loop(0, 1, lambda _, c: run(c), v)
    if wrapper == "cond":
        total = lambda v: lax.psum(fnp.sum(v), grid.names)  # noqa: E731
        return lambda v: lax.cond(total(v) > -1e9, run, lambda c: -c, v)
    return run


def _simulated(grid, steps, x, names, out_names):
    values = grid.blocks(x, names)
    for kind, axes in steps:
        values = _step(kind, axes)[1](grid, values)
    return grid.assembled(values, out_names), values


def _spec(names) -> PartitionSpec:
    return PartitionSpec(*[e if e else None for e in names])


def _mesh(grid: Grid) -> Mesh:
    devices = np.array(fg.devices()[: grid.count(grid.names)]).reshape(tuple(grid.sizes.values()))
    return Mesh(devices, grid.names)


@given(programs())
def test_values_and_gradient_equal_the_simulated_devices(program):
    grid, x, names, steps, wrapper, varying = program
    out_names = (tuple(a for a in grid.names if a in varying), ())
    f = fg.shard_map(
        _funcgrad_fun(steps, wrapper, grid),
        mesh=_mesh(grid),
        in_specs=_spec(names),
        out_specs=_spec(out_names),
    )
    expected, _ = _simulated(grid, steps, x, names, out_names)
    assert_close(f(x), expected, rtol=1e-12, atol=1e-12)
    assert_close(fg.jit(f)(x), expected, rtol=1e-12, atol=1e-12)

    weights = np.cos(np.arange(expected.size)).reshape(expected.shape)
    grad = fg.grad(lambda a: fnp.sum(f(a) * weights))(x)

    def loss(a):
        return np.sum(_simulated(grid, steps, a, names, out_names)[0] * weights)

    eps = 1e-6
    numeric = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        numeric[index] = (loss(x + step) - loss(x - step)) / (2 * eps)
    assert_close(grad, numeric, rtol=1e-5, atol=1e-5 * (1 + np.abs(numeric).max()))


@given(programs())
def test_what_the_replication_check_accepts_is_the_same_on_every_device(program):
    grid, x, names, steps, wrapper, _ = program
    f = fg.shard_map(
        _funcgrad_fun(steps, wrapper, grid),
        mesh=_mesh(grid),
        in_specs=_spec(names),
        out_specs=PartitionSpec(),
    )
    try:
        f(x)
    except ValueError as error:
        assert "may differ along it" in str(error)
        return
    _, blocks = _simulated(grid, steps, x, names, ((), ()))
    for block in blocks:
        np.testing.assert_array_equal(block, blocks[0])
