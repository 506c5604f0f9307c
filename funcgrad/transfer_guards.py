"""Transfer guards: log or refuse copies of array data between the host and devices.

Three directions, each with a level (`config.transfer_guard_host_to_device`, `..._device_to_
host`, `..._device_to_device`; `config.transfer_guard` sets all three), as in JAX:
"allow" (the default), "log" and "disallow" (log or refuse *implicit* transfers, let explicit
ones through), "log_explicit" and "disallow_explicit" (log or refuse every transfer).
*Explicit* transfers are the ones asked for by name: `device_put` and `device_get`; every
other transfer is *implicit*.

What moves in funcgrad: the host holds NumPy data and the CPU device's arrays (whose values
are NumPy arrays funcgrad owns); a GPU's arrays are in its memory.
- host to device: host data copied to a GPU (an operand or argument of something running
  there, `device_put`), and, as on JAX's CPU device, NumPy data (arrays and lists, not
  scalars) taken in as an array of the CPU device eagerly: an operand of an operation, an
  argument of a jitted function, `funcgrad.numpy.asarray`. Scalars (Python's, NumPy's and
  0-d arrays) are constants of the operation that reads them, never transfers; and values a
  traced function reads become constants of its program.
- device to host: a GPU array's value read on the host (`np.asarray`, printing, `float`,
  `device_get`). Reading a CPU array is not a transfer: NumPy gets a view of its memory.
- device to device: a GPU array copied to another GPU.

Every place data moves calls `guard` only while some level is not "allow" (`active`), so
guards cost nothing otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import numpy as np

from funcgrad import core
from funcgrad.config import config

LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")
DIRECTIONS = ("host_to_device", "device_to_host", "device_to_device")

logger = logging.getLogger("funcgrad")

# The level in force for each direction, and whether any is not "allow"; `refresh` sets
# them from the configuration whenever it changes.
levels: dict[str, str] = dict.fromkeys(DIRECTIONS, "allow")
active = False


def refresh() -> None:
    global active
    for direction in DIRECTIONS:
        levels[direction] = getattr(config, f"transfer_guard_{direction}") or "allow"
    active = any(level != "allow" for level in levels.values())


class _Context(threading.local):
    explicit = 0  # above zero inside device_put and device_get
    guarded = 0  # above zero while a transfer guarded already reads its data


_context = _Context()


@contextlib.contextmanager
def explicit() -> Iterator[None]:
    """The transfers made inside the block are explicit (device_put's, device_get's)."""
    _context.explicit += 1
    try:
        yield
    finally:
        _context.explicit -= 1


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Inside the block a transfer already guarded reads its data (a GPU's value copied to
    another through the host): that is no transfer of its own."""
    _context.guarded += 1
    try:
        yield
    finally:
        _context.guarded -= 1


def guard(direction: str, shape: tuple[int, ...], dtype, to: str) -> None:
    """A transfer of a `dtype` array of `shape` in `direction` (to `to`): log or refuse it
    as the direction's level says."""
    level = levels[direction]
    is_explicit = _context.explicit > 0
    if level == "allow" or _context.guarded or (is_explicit and level in ("log", "disallow")):
        return
    kind = "explicit" if is_explicit else "implicit"
    what = (
        f"{kind} {direction.replace('_', '-')} transfer of "
        f"{core.short_dtype_name(np.dtype(dtype))}{list(shape)} to {to}"
    )
    if level.startswith("log"):
        logger.warning("transfer guard: %s", what)
        return
    remedy = (
        "move it with funcgrad.device_put (or device_get) where a transfer is meant"
        if not is_explicit
        else "keep the data where it is used"
    )
    raise RuntimeError(
        f"Disallowed {what} (transfer_guard_{direction} is {level!r}): {remedy}, or allow it "
        f"with funcgrad.transfer_guard_{direction}('allow')."
    )


def host_data(value: np.ndarray) -> None:
    """NumPy data of rank one or more taken in as an array of the CPU device: a
    host-to-device transfer where it happens eagerly and the CPU is the default device (a
    traced function's values become constants of its program; where a GPU is the default,
    the data is guarded where it is copied there)."""
    from funcgrad.array import CPU, default_gpu  # (arrays guard their own transfers)

    if value.ndim and core.current_trace() is core.eval_trace() and default_gpu() is None:
        guard("host_to_device", value.shape, value.dtype, repr(CPU))


def to_device(value, device) -> None:
    """`value` (host data, or a GPU's) copied to GPU `device`: host-to-device for host data
    of rank one or more, device-to-device from another GPU."""
    from funcgrad.array import DeviceValue

    if type(value) is DeviceValue:
        if value.device is not device:
            guard("device_to_device", value.shape, value.dtype, repr(device))
    elif np.ndim(value):
        guard("host_to_device", np.shape(value), value.dtype, repr(device))
