"""The devices pmap runs on, with JAX's names.

On the CPU a process has `config.num_cpu_devices` virtual devices (`FUNCGRAD_NUM_CPU_DEVICES`,
default 1): pmap runs each device's shard on its own thread, so shards run in parallel where
the work releases the GIL (NumPy's kernels, compiled code). Under `funcgrad.distributed`,
every process has its own local devices and `devices()` lists all processes' devices, numbered
process by process.
"""

from __future__ import annotations

from funcgrad import distributed
from funcgrad.array import CPU, Device
from funcgrad.config import config

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
        raise RuntimeError(f"backend {backend!r} is not available; available: cpu")


def devices(backend: str | None = None) -> list[Device]:
    """Every device of every process."""
    _check_backend(backend)
    return list(_all_devices())


def local_devices(process_index: int | None = None, backend: str | None = None) -> list[Device]:
    """The devices of this process (or of process `process_index`)."""
    _check_backend(backend)
    index = distributed.process_index() if process_index is None else process_index
    return [d for d in _all_devices() if d.process_index == index]


def device_count(backend: str | None = None) -> int:
    _check_backend(backend)
    return len(_all_devices())


def local_device_count(backend: str | None = None) -> int:
    _check_backend(backend)
    return _num_local()


def process_index(backend: str | None = None) -> int:
    _check_backend(backend)
    return distributed.process_index()


def process_count(backend: str | None = None) -> int:
    _check_backend(backend)
    return distributed.process_count()
