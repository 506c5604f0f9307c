"""Transfer guards (`funcgrad.transfer_guard*`, `config.transfer_guard*`): which copies count as
transfers in each direction, which are implicit or explicit, and what each level does with
them. GPU transfers run on the emulated GPUs (`devices("cuda_emulator")`)."""

import logging
import re

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import transfer_guards
from funcgrad.backends.cuda import emulator

LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")
NUMPY = np.arange(3, dtype=np.float32)


def _refused(direction: str, kind: str, what: str):
    return pytest.raises(
        RuntimeError, match=rf"Disallowed {kind} {direction} transfer of {re.escape(what)}"
    )


@pytest.fixture
def logged(caplog):
    """The transfer guard's log lines, read after the block."""
    caplog.set_level(logging.WARNING, logger="funcgrad")

    def lines():
        return [r.getMessage() for r in caplog.records if "transfer guard" in r.getMessage()]

    return lines


# ---------------------------------------------------------------------------------------------
# The settings


def test_every_guard_allows_by_default():
    for direction in transfer_guards.DIRECTIONS:
        assert getattr(fg.config, f"transfer_guard_{direction}") is None
    assert not transfer_guards.active
    fg.jit(lambda x: x)(NUMPY)


def test_the_general_option_sets_every_direction_and_levels_are_checked():
    fg.config.update("jax_transfer_guard", "log")
    try:
        for direction in transfer_guards.DIRECTIONS:
            assert getattr(fg.config, f"transfer_guard_{direction}") == "log"
        assert transfer_guards.active
    finally:
        fg.config.update("transfer_guard", None)
    assert not transfer_guards.active
    with pytest.raises(ValueError, match="'allow', 'log', 'disallow'"):
        fg.config.update("transfer_guard_device_to_host", "refuse")
    with pytest.raises(ValueError, match="must be one of"):
        with fg.transfer_guard("block"):
            pass


def test_the_context_managers_restore_each_direction():
    with fg.transfer_guard_device_to_host("log"):
        with fg.transfer_guard("disallow"):
            assert transfer_guards.levels == dict.fromkeys(transfer_guards.DIRECTIONS, "disallow")
        assert fg.config.transfer_guard_device_to_host == "log"
        assert fg.config.transfer_guard_host_to_device is None
        assert fg.config.transfer_guard is None
    assert not transfer_guards.active


# ---------------------------------------------------------------------------------------------
# Host to device on the CPU: NumPy data taken in eagerly


@pytest.mark.parametrize(
    "take_in",
    [
        lambda: fg.jit(lambda x: x * 2)(NUMPY),
        lambda: fnp.ones(3) + NUMPY,
        lambda: fnp.sin(NUMPY),
        lambda: fnp.asarray(NUMPY),
        lambda: fnp.array([[1.0, 2.0, 3.0]]),
    ],
    ids=["jit argument", "operand", "function argument", "asarray", "a list"],
)
def test_numpy_data_taken_in_is_an_implicit_host_to_device_transfer(take_in, logged):
    with fg.transfer_guard_host_to_device("disallow"):
        with pytest.raises(RuntimeError, match=r"Disallowed implicit host-to-device transfer"):
            take_in()
    with fg.transfer_guard_host_to_device("log"):
        take_in()
    assert logged() and "implicit host-to-device transfer of f32[" in logged()[0]
    assert "to CpuDevice(id=0)" in logged()[0]


def test_the_error_names_the_shape_dtype_direction_and_setting():
    with fg.transfer_guard("disallow"):
        with pytest.raises(RuntimeError) as error:
            fg.jit(lambda x: x)(np.zeros((2, 5), np.int64))
    message = str(error.value)
    assert "implicit host-to-device transfer of i64[2, 5] to CpuDevice(id=0)" in message
    assert "transfer_guard_host_to_device is 'disallow'" in message
    assert "funcgrad.device_put" in message


def test_device_put_is_an_explicit_transfer(logged):
    for level in ("allow", "log", "disallow"):
        with fg.transfer_guard(level):
            np.testing.assert_array_equal(fg.device_put(NUMPY), NUMPY)
    assert not logged()
    with fg.transfer_guard("log_explicit"):
        fg.device_put(NUMPY)
    assert logged() == [
        "transfer guard: explicit host-to-device transfer of f32[3] to CpuDevice(id=0)"
    ]
    with fg.transfer_guard("disallow_explicit"):
        with _refused("host-to-device", "explicit", "f32[3]"):
            fg.device_put(NUMPY)
        with _refused("host-to-device", "implicit", "f32[3]"):
            fnp.asarray(NUMPY)


def test_scalars_arrays_and_traced_constants_are_not_transfers(logged):
    x = fnp.arange(6.0).reshape(2, 3)
    with fg.transfer_guard("log_explicit"):
        x * 2.0 + np.float32(1.0) + np.array(3.0, np.float32)
        fg.jit(lambda a, s: a * s)(x, 0.5)
        fg.jit(lambda a: a + NUMPY)(x)  # (NUMPY is a constant of the program)
        fnp.ones(3), fnp.arange(4), fg.random.normal(fg.random.PRNGKey(0), (3,))
        np.asarray(x), float(x[0, 0]), repr(x), x.tolist(), fg.device_get(x), fg.device_put(x)
    assert not logged()


def test_each_direction_has_its_own_guard():
    with (
        fg.transfer_guard_device_to_host("disallow"),
        fg.transfer_guard_device_to_device("disallow"),
    ):
        fnp.asarray(NUMPY)
    with fg.transfer_guard_host_to_device("disallow"):
        with _refused("host-to-device", "implicit", "f32[3]"):
            fnp.asarray(NUMPY)


# ---------------------------------------------------------------------------------------------
# GPU transfers, on the emulated GPUs

gpu_only = pytest.mark.skipif(
    emulator.compiler() is None, reason="the emulator needs a C++ compiler"
)


@pytest.fixture
def gpus(monkeypatch):
    monkeypatch.setattr(fg.config, "num_cpu_devices", 2)
    return fg.devices("cuda_emulator")


@pytest.mark.cuda
@gpu_only
def test_reading_a_gpu_array_on_the_host_is_device_to_host(gpus):
    on_gpu = fg.device_put(np.ones((2, 3), np.float32), gpus[0])
    cpu = fg.devices("cpu")[0]
    with fg.transfer_guard_device_to_host("disallow"):
        for read in (np.asarray, repr, lambda a: float(a[0, 0]), lambda a: a.tolist()):
            with pytest.raises(RuntimeError, match="implicit device-to-host transfer of f32"):
                read(on_gpu)
        np.testing.assert_array_equal(fg.device_get(on_gpu), np.ones((2, 3)))
        back = fg.device_put(on_gpu, cpu)
        np.testing.assert_array_equal(back, np.ones((2, 3)))
    with fg.transfer_guard_device_to_host("disallow_explicit"):
        with _refused("device-to-host", "explicit", "f32[2, 3]"):
            fg.device_get(on_gpu)
        with _refused("device-to-host", "explicit", "f32[2, 3]"):
            fg.device_put(on_gpu, cpu)
        np.asarray(back)  # a CPU array: no transfer


@pytest.mark.cuda
@gpu_only
def test_host_data_copied_to_a_gpu_is_host_to_device(gpus, logged):
    on_gpu = fg.device_put(np.ones(3, np.float32), gpus[0])
    with fg.transfer_guard_host_to_device("disallow"):
        with _refused("host-to-device", "implicit", "f32[3]"):
            on_gpu + fnp.arange(3.0)
        np.testing.assert_array_equal(fg.device_get(on_gpu + 1.0), [2.0, 2.0, 2.0])
        fg.device_put(NUMPY, gpus[0])
    with fg.transfer_guard_host_to_device("log_explicit"):
        fg.device_put(NUMPY, gpus[1])
    assert logged() == [
        "transfer guard: explicit host-to-device transfer of f32[3] to EmulatedCudaDevice(id=1)"
    ]


@pytest.mark.cuda
@gpu_only
def test_copies_between_gpus_are_device_to_device(gpus, logged):
    first = fg.device_put(NUMPY, gpus[0])
    with fg.transfer_guard_device_to_device("disallow"):
        moved = fg.device_put(first, gpus[1])
    assert moved.device is gpus[1]
    with fg.transfer_guard_device_to_device("disallow_explicit"):
        with _refused("device-to-device", "explicit", "f32[3]"):
            fg.device_put(first, gpus[1])
        fg.device_put(first, gpus[0])  # already there: nothing moves
    saved = fg.config.platform
    fg.config.update("platform", "cuda_emulator")  # (pmap runs on the emulated GPUs)
    try:
        add = fg.pmap(lambda a, b: a + b, in_axes=(0, None))
        rows = np.ones((2, 3), np.float32)
        with fg.transfer_guard_device_to_device("log"):
            out = add(rows, first)  # each GPU gets its copy of `first`
        np.testing.assert_array_equal(fg.device_get(out), rows + NUMPY)
    finally:
        fg.config.update("platform", saved)
    assert logged() == [
        "transfer guard: implicit device-to-device transfer of f32[3] to EmulatedCudaDevice(id=1)"
    ]
