"""The devices arrays live on and pmap runs on, with JAX's names.

On the CPU a process has `config.num_cpu_devices` virtual devices (`FUNCGRAD_NUM_CPU_DEVICES`,
default 1): pmap runs each device's shard on its own thread, so shards run in parallel where
the work releases the GIL (NumPy's kernels, compiled code). Under `funcgrad.distributed`,
every process has its own local devices and `devices()` lists all processes' devices, numbered
process by process.

GPUs are listed by `devices("gpu")`, this process's CUDA GPUs; arrays placed on one with
`device_put` stay there, and the operations and jitted calls applied to them run there. The
emulated GPUs (`devices("cuda_emulator")`) run the CUDA backend's code on the host, as many as
the CPU's virtual devices, so that programs over several GPUs are tested where there is none.
The default platform (`config.platform`, FUNCGRAD_PLATFORM) is a CUDA GPU when CuPy finds
one, else the CPU: new arrays (`numpy.array`, `zeros`, results of operations on host data)
then live on its first GPU, and `devices()` lists the default platform's devices, as JAX
lists its default backend's; pmap runs on them.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

from funcgrad import distributed
from funcgrad.array import CPU, Device, DeviceValue, GpuDevice, placement
from funcgrad.config import config
from funcgrad.once import once

_device_lists: dict[tuple[int, int, int], list[Device]] = {}


def _num_local() -> int:
    count = config.num_cpu_devices
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(
            f"num_cpu_devices (FUNCGRAD_NUM_CPU_DEVICES) must be a positive integer, got {count!r}"
        )
    return count


def _all_devices() -> list[Device]:
    key = (_num_local(), distributed.process_index(), distributed.process_count())
    found = _device_lists.get(key)
    if found is None:
        local, _, processes = key
        found = [
            CPU if process == 0 and i == 0 else Device("cpu", process * local + i, process)
            for process in range(processes)
            for i in range(local)
        ]
        _device_lists[key] = found
    return found


def _check_backend(backend: str | None) -> None:
    if backend not in (None, "cpu"):
        raise RuntimeError(f"backend {backend!r} is not available here; available: cpu")


GPU_BACKENDS = ("gpu", "cuda", "cuda_emulator")


def devices(backend: str | None = None) -> list[Device]:
    """Every device of every process: the default platform's by default, `devices("cpu")`
    for the CPU's, `devices("gpu")` (or "cuda") for this machine's CUDA GPUs,
    `devices("cuda_emulator")` for the emulated GPUs that run the CUDA backend's code on the
    host."""
    if backend is None and DeviceValue.default is not None:
        return list(_gpu_devices(DeviceValue.default.backend))
    if backend in GPU_BACKENDS:
        return list(_gpu_devices(backend))
    _check_backend(backend)
    return list(_all_devices())


@contextlib.contextmanager
def default_device(new_val: Device):
    """Within the block, new arrays and computations without a placed operand go to `new_val`
    in this thread (a GPU, or the CPU where a GPU is the default), as JAX's
    `default_device` does."""
    if not isinstance(new_val, Device):
        raise TypeError(
            f"default_device takes a device (an entry of funcgrad.devices(...)), got "
            f"{type(new_val).__name__} {new_val!r}"
        )
    previous, placement.device = placement.device, new_val
    if isinstance(new_val, GpuDevice):
        DeviceValue.made = True  # eager operations and jit calls look for the GPU from now
    try:
        yield
    finally:
        placement.device = previous


def default_backend() -> str:
    """The default platform's kind: "gpu" for a GPU (or the emulated one), else "cpu"."""
    return "cpu" if DeviceValue.default is None else "gpu"


def use_platform(platform: str | None) -> None:
    """Make `platform` (a `config.platform` value) the default: a GPU platform raises, naming
    what is missing, where it cannot be used; None takes a CUDA GPU when CuPy finds one."""
    if platform is None:
        platform = "cuda" if gpu_available() else "cpu"
    DeviceValue.default = None if platform == "cpu" else devices(platform)[0]
    if DeviceValue.default is not None:
        DeviceValue.made = True


def _gpu_devices(backend: str) -> tuple[GpuDevice, ...]:
    if backend != "cuda_emulator" and not gpu_available():
        raise RuntimeError(
            f"backend {backend!r} is not available: "
            + _missing_gpu_part()
            + " (the emulated GPUs, devices('cuda_emulator'), run the same code on the host)"
        )
    if backend == "cuda_emulator":
        return tuple(_emulated_gpu(i) for i in range(_num_local()))
    return _gpu_device_list()


@once
def _emulated_gpu(id: int) -> GpuDevice:
    from funcgrad.backends.cuda.executable import Emulator

    return GpuDevice(id, Emulator())


@once
def _gpu_device_list() -> tuple[GpuDevice, ...]:
    """Every CUDA GPU CuPy finds, in its order."""
    import cupy

    from funcgrad.backends.cuda.executable import gpu

    return tuple(GpuDevice(i, gpu(i)) for i in range(cupy.cuda.runtime.getDeviceCount()))


@functools.cache
def gpu_available() -> bool:
    """Whether CuPy is installed and finds a CUDA GPU (a machine without a driver says no)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, or CuPy's runtime error when no driver is loaded
        return False


def _missing_gpu_part() -> str:
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install -e '.[cuda]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CuPy's runtime error without a driver
        return f"CuPy finds no CUDA driver ({error})"
    return "CuPy finds no CUDA GPU" if count == 0 else "the GPU could not be opened"


def local_devices(
    process_index: int | None = None, backend: str | None = None, host_id: int | None = None
) -> list[Device]:
    """The devices of this process (or of process `process_index`; `host_id` is its older
    name)."""
    if host_id is not None:
        if process_index is not None and process_index != host_id:
            raise ValueError(
                f"local_devices: process_index={process_index} and host_id={host_id} (its older "
                "name) disagree; give process_index alone"
            )
        warnings.warn(
            "local_devices: host_id is renamed process_index; pass process_index",
            DeprecationWarning,
            stacklevel=2,
        )
        process_index = host_id
    index = distributed.process_index() if process_index is None else process_index
    return [d for d in devices(backend) if d.process_index == index]


def device_count(backend: str | None = None) -> int:
    return len(devices(backend))


def local_device_count(backend: str | None = None) -> int:
    return len(local_devices(backend=backend))


def process_index(backend: str | None = None) -> int:
    _check_backend(backend)
    return distributed.process_index()


def process_count(backend: str | None = None) -> int:
    _check_backend(backend)
    return distributed.process_count()


def process_indices(backend: str | None = None) -> list[int]:
    """The indices of all the processes of the job: 0 .. process_count() - 1."""
    return list(range(process_count(backend)))


use_platform(config.platform)
