"""A data-parallel MLP training step with pmap: 1 vs 2 virtual CPU devices, 1 vs 2 MPI
processes, and, where CuPy finds GPUs, 1 GPU vs all of them.

    python benchmarks/data_parallel.py

Every variant trains on the same global batch: with N devices in all, each device computes
the gradient of BATCH / N examples and pmean averages the gradients. The table gives median
milliseconds per step (rounds of STEPS steps) and the speed-up against one device in one
process. OpenBLAS is kept to one thread per process (OPENBLAS_NUM_THREADS=1, set below before
NumPy loads), so the speed-up shows pmap's parallelism rather than BLAS's own threads; the MPI
rows need mpi4py and mpiexec (pip install "funcgrad[distributed]").
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.devices import gpu_available

BATCH, D_IN, HIDDEN, D_OUT = 4096, 256, 512, 10
STEPS, ROUNDS = 5, 5
ROOT = pathlib.Path(__file__).resolve().parent.parent


def init(rng):
    return [
        ((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
        for m, n in ((D_IN, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, D_OUT))
    ]


def loss(params, x, y):
    for w, b in params[:-1]:
        x = fnp.tanh(x @ w + b)
    w, b = params[-1]
    return -fnp.mean(fnp.sum(fg.nn.log_softmax(x @ w + b) * y, axis=1))


def step(params, x, y):
    grads = lax.pmean(fg.grad(loss)(params, x, y), "batch")
    return fg.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def time_steps(backend: str = "cpu", local: int | None = None) -> float:
    """Median ms per step of this process's share of the global batch on its first `local`
    devices of `backend` (all of them by default)."""
    rng = np.random.default_rng(0)
    local = local or fg.local_device_count(backend)
    rows = BATCH // (local * fg.process_count())
    x = rng.standard_normal((local, rows, D_IN)).astype(np.float32)
    y = np.eye(D_OUT, dtype=np.float32)[rng.integers(0, D_OUT, (local, rows))]
    params = fg.tree_util.tree_map(lambda p: np.stack([p] * local), init(rng))
    parallel_step = fg.pmap(step, axis_name="batch", backend=backend)
    params = fg.block_until_ready(parallel_step(params, x, y))  # stage and warm up
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(STEPS):
            params = parallel_step(params, x, y)
        fg.block_until_ready(params)
        times.append((time.perf_counter() - start) / STEPS * 1e3)
    return statistics.median(times)


def time_jit_steps(device) -> float:
    """The same step with jit and no pmap on `device`, for pmap's own overhead."""
    with fg.default_device(device):
        return _time_jit_steps()


def _time_jit_steps() -> float:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, D_IN)).astype(np.float32)
    y = np.eye(D_OUT, dtype=np.float32)[rng.integers(0, D_OUT, BATCH)]
    params = init(rng)

    @fg.jit
    def jit_step(params, x, y):
        grads = fg.grad(loss)(params, x, y)
        return fg.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    params = fg.block_until_ready(jit_step(params, x, y))
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(STEPS):
            params = jit_step(params, x, y)
        fg.block_until_ready(params)
        times.append((time.perf_counter() - start) / STEPS * 1e3)
    return statistics.median(times)


def run_mpi(num_processes: int) -> float | None:
    mpiexec = shutil.which("mpiexec")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    if mpiexec is None:
        return None
    env = dict(
        os.environ,
        FUNCGRAD_NUM_CPU_DEVICES="1",
        FUNCGRAD_PLATFORM="cpu",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    command = [mpiexec, "-n", str(num_processes), sys.executable, __file__, "--worker"]
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])["ms"]


def gpu_rows(backend: str = "gpu") -> dict[str, float]:
    """jit on the first GPU, pmap on one GPU and on every GPU of `backend`."""
    gpus = fg.devices(backend)
    rows = {"jit, no pmap, first GPU": time_jit_steps(gpus[0])}
    for count in sorted({1, len(gpus)}):
        rows[f"{count} GPU(s), 1 process"] = time_steps(backend, count)
    return rows


def print_rows(rows: dict[str, float], base: str) -> None:
    print(f"{'variant':<40} {'ms/step':>9} {'speed-up':>9}")
    for name, ms in rows.items():
        print(f"{name:<40} {ms:9.2f} {rows[base] / ms:9.2f}")


def main() -> None:
    rows = {"jit, no pmap": time_jit_steps(fg.devices("cpu")[0])}
    for devices in (1, 2):
        fg.config.update("num_cpu_devices", devices)
        rows[f"{devices} virtual device(s), 1 process"] = time_steps()
    for processes in (1, 2):
        ms = run_mpi(processes)
        if ms is not None:
            rows[f"1 device each, {processes} MPI process(es)"] = ms
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"data-parallel MLP step, global batch {BATCH}, {D_IN}-{HIDDEN}-{HIDDEN}-{D_OUT}")
    print_rows(rows, "1 virtual device(s), 1 process")
    if gpu_available():
        print("\non GPUs (collectives meet on the host):")
        print_rows(gpu_rows(), "1 GPU(s), 1 process")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        fg.distributed.initialize()
        ms = time_steps()
        if fg.process_index() == 0:
            print(json.dumps({"ms": ms}))
    else:
        main()
