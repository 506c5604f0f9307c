"""mesh_utils, multihost_utils and the make_array_from_* functions: in one process against
NumPy's slicing of the whole array, and over two MPI processes (skipped where mpiexec and
mpi4py are missing) against the data each process is known to hold."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from checks import cpu_devices

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.experimental import mesh_utils, multihost_utils
from funcgrad.sharding import Mesh, NamedSharding, SingleDeviceSharding
from funcgrad.sharding import PartitionSpec as P

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def eight_devices():
    with cpu_devices(8):
        yield fg.devices()


def test_device_meshes_are_the_devices_in_order(eight_devices):
    mesh = mesh_utils.create_device_mesh((2, 4))
    assert mesh.shape == (2, 4) and mesh.dtype == object
    assert list(mesh.flat) == eight_devices
    reversed_mesh = mesh_utils.create_device_mesh((4, 2), eight_devices[::-1])
    assert list(reversed_mesh.flat) == eight_devices[::-1]
    with pytest.raises(ValueError, match=r"Number of devices 8 .* \(3, 4\)"):
        mesh_utils.create_device_mesh((3, 4))
    hybrid = mesh_utils.create_hybrid_device_mesh((2, 4), (1, 1), process_is_granule=True)
    assert list(hybrid.flat) == eight_devices
    with pytest.raises(ValueError, match="process_is_granule=True"):
        mesh_utils.create_hybrid_device_mesh((2, 4), (1, 1))
    with pytest.raises(ValueError, match="Number of processes 1"):
        mesh_utils.create_hybrid_device_mesh((2, 2), (2, 1), process_is_granule=True)


def test_one_process_gathers_and_broadcasts_its_own_data():
    tree = {"a": fnp.arange(3), "b": np.ones((2, 2)), "c": 3.0}
    gathered = multihost_utils.process_allgather(tree)
    assert all(isinstance(v, np.ndarray) for v in gathered.values())
    np.testing.assert_array_equal(gathered["a"], [[0, 1, 2]])
    assert gathered["b"].shape == (1, 2, 2) and gathered["b"].dtype == np.float64
    assert gathered["c"].tolist() == [3.0] and gathered["c"].dtype == np.float32
    tiled = multihost_utils.process_allgather(tree, tiled=True)
    np.testing.assert_array_equal(tiled["a"], [0, 1, 2])
    assert tiled["b"].shape == (2, 2)
    assert multihost_utils.broadcast_one_to_all(tree) is tree
    assert multihost_utils.sync_global_devices("anything") is None


def _whole(shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


@pytest.mark.parametrize("spec", [P("x", "y"), P(None, "y"), P("y", "x"), P(), P(("x", "y"))])
def test_arrays_from_blocks_are_the_whole_array(eight_devices, spec):
    mesh = Mesh(mesh_utils.create_device_mesh((2, 4)), ("x", "y"))
    sharding = NamedSharding(mesh, spec)
    whole = _whole((8, 8))
    asked = []

    def block(index):
        asked.append(index)
        return whole[index]

    made = fg.make_array_from_callback((8, 8), sharding, block)
    np.testing.assert_array_equal(made, whole)
    assert made.sharding == sharding
    assert sorted(map(str, asked)) == sorted(
        map(str, sharding.devices_indices_map((8, 8)).values())
    )

    blocks = [whole[i] for i in sharding.devices_indices_map((8, 8)).values()]
    from_blocks = fg.make_array_from_single_device_arrays((8, 8), sharding, blocks)
    np.testing.assert_array_equal(from_blocks, whole)
    assert from_blocks.sharding == sharding

    local = fg.make_array_from_process_local_data(sharding, whole)
    np.testing.assert_array_equal(local, whole)
    assert local.sharding == sharding


def test_arrays_from_blocks_refuse_blocks_that_do_not_fit(eight_devices):
    mesh = Mesh(mesh_utils.create_device_mesh((2, 4)), ("x", "y"))
    sharding = NamedSharding(mesh, P("x", "y"))
    with pytest.raises(ValueError, match=r"has shape \(4, 2\), got \(4, 3\)"):
        fg.make_array_from_callback((8, 8), sharding, lambda index: np.zeros((4, 3)))
    with pytest.raises(ValueError, match="8 device"):
        fg.make_array_from_single_device_arrays((8, 8), sharding, [np.zeros((4, 2))] * 3)
    with pytest.raises(ValueError, match=r"the local data has shape \(8, 8\)"):
        fg.make_array_from_process_local_data(sharding, np.zeros((8, 8)), (16, 8))
    with pytest.raises(TypeError, match="NamedSharding or SingleDeviceSharding"):
        fg.make_array_from_callback((2,), P("x"), lambda index: np.zeros(2))


def test_a_single_device_sharding_takes_the_whole_array():
    sharding = SingleDeviceSharding(fg.devices()[0])
    made = fg.make_array_from_callback((2, 3), sharding, lambda index: _whole((2, 3))[index])
    np.testing.assert_array_equal(made, _whole((2, 3)))
    made = fg.make_array_from_single_device_arrays((2, 3), sharding, [_whole((2, 3))])
    np.testing.assert_array_equal(made, _whole((2, 3)))


def test_host_local_and_global_arrays_in_one_process(eight_devices):
    mesh = Mesh(mesh_utils.create_device_mesh((2, 4)), ("x", "y"))
    tree = {"w": _whole((4, 8)), "b": _whole((8,))}
    specs = {"w": P("x", "y"), "b": P("y")}
    global_tree = multihost_utils.host_local_array_to_global_array(tree, mesh, specs)
    for name in tree:
        np.testing.assert_array_equal(global_tree[name], tree[name])
        assert global_tree[name].sharding == NamedSharding(mesh, specs[name])
    back = multihost_utils.global_array_to_host_local_array(global_tree, mesh, specs)
    for name in tree:
        np.testing.assert_array_equal(back[name], tree[name])


TWO_PROCESSES = """
import numpy as np
import funcgrad as fg
from funcgrad.experimental import mesh_utils, multihost_utils as mh
from funcgrad.sharding import Mesh, NamedSharding, PartitionSpec as P

fg.distributed.initialize()
rank = fg.process_index()
# Two processes of two devices: rows of the mesh are processes.
grid = mesh_utils.create_hybrid_device_mesh((1, 2), (2, 1), process_is_granule=True)
assert [[d.id for d in row] for row in grid] == [[0, 1], [2, 3]], grid
assert [[d.process_index for d in row] for row in grid] == [[0, 0], [1, 1]]
mesh = Mesh(grid, ("x", "y"))
whole = np.arange(24, dtype=np.float32).reshape(4, 6)
mine = whole[2 * rank : 2 * rank + 2]

g = mh.host_local_array_to_global_array(mine, mesh, P("x", "y"))
assert g.shape == (4, 6) and np.array_equal(np.asarray(g), whole), np.asarray(g)
back = mh.global_array_to_host_local_array(g, mesh, P("x", "y"))
assert np.array_equal(np.asarray(back), mine)
assert [d.process_index for d in back.sharding.mesh.devices.flat] == [rank, rank]
assert np.array_equal(mh.process_allgather(g), whole)  # global: the whole value

made = fg.make_array_from_callback((4, 6), NamedSharding(mesh, P("x", "y")), lambda i: whole[i])
assert np.array_equal(np.asarray(made), whole)
replicated = fg.make_array_from_process_local_data(NamedSharding(mesh, P(None, "y")), whole)
assert replicated.shape == (4, 6) and np.array_equal(np.asarray(replicated), whole)

gathered = mh.process_allgather({"r": np.full(3, rank, np.int32)})
assert np.array_equal(gathered["r"], [[0, 0, 0], [1, 1, 1]])
assert np.array_equal(mh.process_allgather(np.full(2, rank), tiled=True), [0, 0, 1, 1])

zero = mh.broadcast_one_to_all({"v": np.full(3, rank + 5.0)})
assert np.array_equal(np.asarray(zero["v"]), [5.0] * 3)
one = mh.broadcast_one_to_all(np.full(2, rank + 5.0), is_source=rank == 1)
assert np.array_equal(np.asarray(one), [6.0, 6.0])

mh.sync_global_devices("same")
try:
    mh.sync_global_devices(f"name {rank}")
except AssertionError as error:
    print("mismatch seen:", "different names" in str(error))
print(f"process {rank} ok")
"""


def test_two_mpi_processes(tmp_path):
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec") or shutil.which(
        "mpiexec", path=os.path.dirname(sys.executable)
    )
    if mpiexec is None:
        pytest.skip("mpiexec not found")
    script = tmp_path / "two.py"
    script.write_text(TWO_PROCESSES)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        FUNCGRAD_NUM_CPU_DEVICES="2",
        FUNCGRAD_PLATFORM="cpu",
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
    )
    run = subprocess.run(
        [mpiexec, "-n", "2", sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr + run.stdout
    assert run.stdout.count("mismatch seen: True") == 2, run.stdout
    assert "process 0 ok" in run.stdout and "process 1 ok" in run.stdout
