"""The default platform (`config.platform`, FUNCGRAD_PLATFORM): with a GPU as the default, new
arrays live on it, operations and jitted calls on host data run there, `devices()` lists it
and pmap runs there; "cpu" puts everything back. The emulated GPU
stands in for a real one, which is checked too where present. Values are checked against
NumPy."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.array import DeviceValue
from funcgrad.backends.cuda import emulator
from funcgrad.devices import gpu_available
from funcgrad.tools.recipes import CUDA_BACKENDS

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler"),
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(params=CUDA_BACKENDS)
def gpu(request):
    """The GPU (`request.param`'s) as the default platform for one test."""
    saved = fg.config.platform
    fg.config.update("platform", request.param)
    yield fg.devices(request.param)[0]
    fg.config.update("platform", saved)


def assert_on(device, *arrays):
    for a in arrays:
        assert a.device is device and type(a._value) is DeviceValue


def test_new_arrays_and_computations_on_host_data_live_on_the_default_gpu(gpu):
    assert fg.devices() == [gpu] and fg.default_backend() == "gpu"
    assert fg.device_count() == 1 and fg.devices("cpu")[0].platform == "cpu"
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    made = {
        "zeros": (fnp.zeros((2, 3)), np.zeros((2, 3), np.float32)),
        "ones": (fnp.ones(4, np.int32), np.ones(4, np.int32)),
        "array of lists": (fnp.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1, 2], [3, 4.0]])),
        "asarray": (fnp.asarray(data), data),
        "arange": (fnp.arange(5), np.arange(5)),
        "device_put": (fg.device_put(data), data),
        "operation on host data": (lax.exp(data), np.exp(data)),
        "jit on host data": (fg.jit(lambda a: fnp.sin(a) * 2)(data), np.sin(data) * 2),
        "grad": (fg.grad(lambda a: (a**2).sum())(data), 2 * data),
    }
    for name, (got, expected) in made.items():
        assert_on(gpu, got)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6, err_msg=name)
    key = fg.random.PRNGKey(0)
    assert_on(gpu, key, fg.random.normal(key, (3,)))


def test_arrays_already_placed_stay_where_they_are(gpu):
    cpu = fg.devices("cpu")[0]
    host = fg.device_put(np.ones(3, np.float32), cpu)
    assert host.device == cpu and type(host._value) is not DeviceValue
    assert fnp.asarray(host) is host
    assert_on(gpu, host + 1)  # computed on the default device, as JAX computes


def test_pmap_runs_on_the_default_platforms_devices(gpu):
    """As JAX's pmap runs on its default backend: the GPUs under a GPU default; the CPU's
    devices when asked for (backend="cpu") and when the CPU is the default."""
    x = np.arange(3, dtype=np.float32)[None]
    f = fg.pmap(lambda v: lax.psum(v * 2, "i"), axis_name="i")
    out = f(x)
    np.testing.assert_allclose(np.asarray(out), [[0, 2, 4]])
    assert [s.device for s in out.addressable_shards] == [gpu]
    on_cpu = fg.pmap(lambda v: lax.psum(v * 2, "i"), axis_name="i", backend="cpu")(x)
    assert [s.device for s in on_cpu.addressable_shards] == fg.devices("cpu")[:1]
    fg.config.update("platform", "cpu")
    assert [s.device for s in f(x).addressable_shards] == fg.devices("cpu")[:1]


def test_the_cpu_platform_puts_everything_back(gpu):
    fg.config.update("platform", "cpu")
    x = fnp.zeros(3) + 1
    assert x.device == fg.devices("cpu")[0] and type(x._value) is not DeviceValue
    assert fg.devices() == fg.devices("cpu") and fg.default_backend() == "cpu"


def test_an_unknown_or_missing_platform_is_refused_and_the_setting_kept():
    saved = fg.config.platform
    with pytest.raises(ValueError, match=r"unknown platform 'tpu'; choose one of cpu, gpu"):
        fg.config.update("platform", "tpu")
    if not gpu_available():
        with pytest.raises(RuntimeError, match="CuPy|driver|GPU"):
            fg.config.update("platform", "cuda")
    assert fg.config.platform == saved


@pytest.mark.parametrize(
    "setting, printed",
    [("cuda_emulator", "EmulatedCudaDevice(id=0) gpu"), ("cpu", "CpuDevice(id=0) cpu")],
)
def test_the_environment_chooses_the_default_platform(setting, printed):
    code = (
        "import funcgrad as fg, funcgrad.numpy as fnp; "
        "print(fnp.ones(2).device, fg.default_backend())"
    )
    environment = {**os.environ, "FUNCGRAD_PLATFORM": setting, "PYTHONPATH": REPO}
    out = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == printed


def test_a_gpu_default_set_at_import_compiles_calls_inside_programs():
    """The GPU default loads the compiler while funcgrad itself is imported, before the
    transformations declaring checkpoint and the custom derivatives: their calls must still
    be inlined when programs with them compile."""
    code = (
        "import numpy as np, funcgrad as fg, funcgrad.numpy as fnp\n"
        "f = fg.checkpoint(lambda a: fnp.sin(a) * a)\n"
        "g = fg.custom_jvp(lambda a: fnp.exp(a))\n"
        "g.defjvp(lambda p, t: (fnp.exp(p[0]), fnp.exp(p[0]) * t[0]))\n"
        "x = np.linspace(0.1, 1.0, 4)\n"
        "print(fg.grad(lambda a: f(a).sum())(x).device)\n"
        "for v in (fg.grad(lambda a: f(a).sum())(x), fg.jit(fg.grad(lambda a: g(a).sum()))(x)):\n"
        "    print(' '.join(f'{e:.12f}' for e in np.asarray(v)))\n"
    )
    environment = {**os.environ, "FUNCGRAD_PLATFORM": "cuda_emulator", "PYTHONPATH": REPO}
    out = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    device, checkpointed, custom = out.stdout.strip().splitlines()
    assert device == "EmulatedCudaDevice(id=0)"
    x = np.linspace(0.1, 1.0, 4)
    np.testing.assert_allclose(np.float64(checkpointed.split()), np.cos(x) * x + np.sin(x))
    np.testing.assert_allclose(np.float64(custom.split()), np.exp(x))


def test_a_bad_environment_setting_names_the_variable():
    environment = {**os.environ, "FUNCGRAD_PLATFORM": "tpu", "PYTHONPATH": REPO}
    out = subprocess.run(
        [sys.executable, "-c", "import funcgrad"], env=environment, capture_output=True, text=True
    )
    assert out.returncode != 0 and "FUNCGRAD_PLATFORM" in out.stderr and "'tpu'" in out.stderr


def test_default_device_places_this_threads_new_arrays_within_its_block(gpu):
    """`default_device` overrides the default platform in its block and thread: the CPU under
    a GPU default, a GPU under the CPU's; pmap's shards still run on the CPU inside it, and
    the outer setting comes back after the block, an error and a pmap."""
    cpu = fg.devices("cpu")[0]
    with fg.default_device(cpu):
        assert fnp.zeros(3).device == cpu and (fnp.ones(2) + 1).device == cpu
        assert fg.jit(lambda a: a * 2)(np.ones(2, np.float32)).device == cpu
        with fg.default_device(gpu):  # nested
            assert_on(gpu, fnp.arange(4.0))
        assert fnp.arange(4.0).device == cpu
    assert_on(gpu, fnp.zeros(3))
    fg.config.update("platform", "cpu")
    seen = []
    with fg.default_device(gpu):
        assert_on(gpu, fnp.zeros(3), lax.exp(np.float32(1)))
        out = fg.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(np.ones((1, 2), np.float32))
        assert {s.device.platform for s in out.addressable_shards} == {"cpu"}
        assert_on(gpu, fnp.zeros(3))  # after the pmap ran on this thread
        thread = threading.Thread(target=lambda: seen.append(fnp.zeros(3).device))
        thread.start()
        thread.join()
        with pytest.raises(RuntimeError, match="inside"), fg.default_device(cpu):
            raise RuntimeError("inside the block")
        assert_on(gpu, fnp.zeros(3))
    assert seen == [cpu]  # another thread keeps the platform's default
    assert fnp.zeros(3).device == cpu
    with pytest.raises(TypeError, match="default_device takes a device.*'gpu'"):
        with fg.default_device("gpu"):
            pass


def test_constant_folding_computes_on_the_host_under_a_gpu_default(gpu):
    from funcgrad.compiler import passes

    def scale(x):
        return x * fnp.cos(np.float32(0.0)) * 2.0  # cos(0) is computed as the program is traced

    optimized = passes.optimize(fg.make_jaxpr(scale)(np.ones(3, np.float32)))
    # The folded 1.0 is a host literal, so x * 1.0 goes and the scales merge, as on the CPU.
    assert [eqn.primitive.name for eqn in optimized.eqns] == ["mul"]
    literal = optimized.eqns[0].invars[1]
    assert type(literal.val) is not DeviceValue and float(literal.val) == 2.0
