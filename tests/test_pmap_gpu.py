"""pmap over GPUs: one device's program compiled for each GPU, shards left in the GPUs'
memory, collectives meeting on the host. Without a GPU the emulated GPUs (as many as the
CPU's virtual devices) stand in: the pmap suite (`test_pmap.py`) runs again with them as the
default platform, against the same NumPy references, and the tests below check what is
particular to GPUs. Where a machine has GPUs, the last test runs on every one of them."""

from __future__ import annotations

import numpy as np
import pytest
from checks import assert_close
from test_pmap import (  # noqa: F401 (re-collected here, on the emulated GPUs)
    NUM_DEVICES,
    four_devices,
    test_a_device_that_never_arrives_times_out,
    test_a_failing_device_stops_the_others,
    test_all_gather,
    test_all_to_all,
    test_axis_index,
    test_bad_ppermute_permutation,
    test_collectives_over_axis_index_groups,
    test_complex_collectives_sum_and_move_each_part,
    test_derivatives_of_collectives_over_axis_index_groups,
    test_derivatives_of_pmap,
    test_derivatives_of_shared_inputs_and_outputs,
    test_fewer_entries_than_devices_use_the_first_devices,
    test_grad_inside_pmap_with_pmean_is_the_full_batch_gradient,
    test_in_axes_out_axes_and_pytrees,
    test_jit_of_pmap,
    test_more_entries_than_devices,
    test_pbroadcast,
    test_pmap_of_jit,
    test_pmap_of_vmap,
    test_pmean_divides_by_the_device_count,
    test_ppermute,
    test_psum_scatter,
    test_reductions,
    test_sharded_results,
    test_staged_once_and_devices_run_at_once,
    test_static_broadcasted_argnums_and_devices,
    test_unbound_axis_name,
    test_vmap_of_grad_of_pmap,
    test_vmap_of_pmap,
    test_vmap_of_pmap_with_a_shared_argument,
)

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.array import DeviceValue
from funcgrad.backends.cuda import collectives, emulator
from funcgrad.devices import gpu_available
from funcgrad.interpreters import parallel
from funcgrad.transforms.pmap import _device_executable, _device_operands

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler"),
]


@pytest.fixture(autouse=True)
def emulated_gpus_by_default(four_devices):  # noqa: F811
    saved = fg.config.platform
    fg.config.update("platform", "cuda_emulator")
    yield
    fg.config.update("platform", saved)


def assert_sharded_on(devices, array):
    assert [s.device for s in array.addressable_shards] == list(devices)
    for device, buffer in array._shards:
        assert type(buffer) is DeviceValue and buffer.device is device


def test_the_default_platforms_devices_are_the_emulated_gpus():
    gpus = fg.devices()
    assert gpus == fg.devices("cuda_emulator") == fg.local_devices()
    assert [d.id for d in gpus] == list(range(NUM_DEVICES)) and fg.device_count() == NUM_DEVICES
    assert all(d.platform == "gpu" and d.process_index == 0 for d in gpus)
    assert len({id(d.runtime) for d in gpus}) == NUM_DEVICES  # a runtime each


def test_shards_stay_on_their_gpus_until_the_whole_value_is_read(monkeypatch):
    x = np.arange(8.0, dtype=np.float32).reshape(NUM_DEVICES, 2)
    y = fg.pmap(lambda v: fnp.exp(v) * 2)(x)
    assert_sharded_on(fg.devices(), y)
    waited = []
    for gpu in fg.devices():
        monkeypatch.setattr(gpu.runtime, "synchronize", lambda gpu=gpu: waited.append(gpu))
    assert y.block_until_ready() is y and set(waited) == set(fg.devices())  # every shard's GPU
    monkeypatch.undo()
    stacked = y._value
    assert type(stacked) is DeviceValue and stacked.device is fg.devices()[0]
    with pytest.raises(AttributeError):  # not gathered: no storage of its own yet
        DeviceValue.storage.__get__(stacked)
    # Fed back, each GPU takes its own buffer as it is.
    operands = _device_operands([y], (True,), fg.devices())
    assert [op._value for (op,) in operands] == [buffer for _, buffer in y._shards]
    z = fg.pmap(lambda v: v + 1)(y)
    with pytest.raises(AttributeError):
        DeviceValue.storage.__get__(y._value)
    assert_close(z, np.exp(x) * 2 + 1, np.float32, rtol=1e-6)
    # Iterated, its rows are the shards where they are.
    assert [row._value for row in y] == [buffer for _, buffer in y._shards]
    with pytest.raises(AttributeError):
        DeviceValue.storage.__get__(y._value)
    # Read whole, it is gathered once onto the first GPU, and operations run there.
    assert_close(y[1:3], np.exp(x[1:3]) * 2, np.float32, rtol=1e-6)
    assert DeviceValue.storage.__get__(y._value) is not None
    assert (y + 1).device is fg.devices()[0]


def test_operands_from_elsewhere_are_copied_onto_each_gpu():
    """Host data, another GPU's array and a CPU pmap's shards all reach the right GPUs; a
    shared operand is placed on every GPU."""
    gpus = fg.devices()
    x = np.arange(12.0, dtype=np.float32).reshape(NUM_DEVICES, 3)
    w = np.float32([1.0, -2.0, 0.5])
    f = fg.pmap(lambda w, v: lax.psum(v * w, "i"), "i", in_axes=(None, 0))
    expected = np.broadcast_to((x * w).sum(0), x.shape)
    on_cpu = fg.pmap(lambda v: v, backend="cpu")(x)
    assert {s.device.platform for s in on_cpu.addressable_shards} == {"cpu"}
    for operand in [x, fg.device_put(x, gpus[2]), on_cpu]:
        out = f(fg.device_put(w, gpus[1]), operand)
        assert_sharded_on(gpus, out)
        assert_close(out, expected, np.float32, rtol=1e-6)
    operands = _device_operands([fg.device_put(w, gpus[1])], (False,), gpus)
    assert [op._value.device for (op,) in operands] == gpus
    # And back to the CPU's devices.
    back = fg.pmap(lambda v: v * 2, backend="cpu")(out)
    assert_close(back, expected * 2, np.float32, rtol=1e-6)


def test_each_gpu_runs_its_stretches_compiled_for_it_and_the_collectives_between():
    def f(v):
        total = lax.psum(fnp.tanh(v), "i")
        return fnp.sin(total * v), lax.all_gather(total + 1.0, "i")

    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(NUM_DEVICES, 2)
    g = fg.pmap(f, "i")
    sin_total, gathered = g(x)
    total = np.tanh(x).sum(0)
    assert_close(sin_total, np.sin(total * x), np.float32, rtol=1e-5)
    assert_close(gathered, np.broadcast_to(total + 1, (NUM_DEVICES, NUM_DEVICES, 2)), np.float32)
    ((program, _, _),) = g._cache.values()
    for gpu in fg.devices():
        steps = _device_executable(program, "cuda_emulator", gpu).steps
        kinds = [type(s[0]).__name__ if isinstance(s, tuple) else s.primitive.name for s in steps]
        assert kinds == ["_OnGpu", "psum", "_OnGpu", "all_gather"]
        assert all(s[0].device is gpu for s in steps if isinstance(s, tuple))


def test_a_collective_inside_control_flow_runs_its_stretch_on_the_host():
    """The stretch holding it runs on the NumPy reference on host copies, its results put
    back on each GPU."""

    def f(v):
        return lax.cond(v.sum() > 0, lambda u: lax.psum(u, "i"), lambda u: -u, v) * 3

    x = np.array([[1.0, 2.0], [3.0, 4.0], [-1.0, 5.0], [2.0, 0.0]], np.float32)
    out = fg.pmap(f, "i")(x)
    assert_sharded_on(fg.devices(), out)
    assert_close(out, np.broadcast_to(x.sum(0) * 3, x.shape), np.float32)


def test_results_made_on_the_host_are_put_on_their_gpus():
    """A program split at a collective returns its constant results from the host."""
    total, one = fg.pmap(lambda v: (lax.psum(v, "i"), 1.0), "i")(np.arange(4.0))
    for out in (total, one):
        assert_sharded_on(fg.devices(), out)
    assert_close(one, np.ones(4), np.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the NaN
def test_collectives_move_between_gpus_where_a_transport_reduces_exactly(monkeypatch):
    """psum, pmax, pmin, psum_scatter, all_gather, ppermute and all_to_all go from GPU to GPU
    (the emulated GPUs' transport is their communicator; a GPU's is NCCL), through the exact
    forms: NaN wins a float max or min, integer sums wrap, booleans and complex numbers travel
    as bytes and parts. Half-precision reductions meet on the host. Values against the CPU
    devices' pmap (whose collectives test_pmap checks against NumPy) and NumPy."""
    on_host = []
    meet_on_host = parallel.apply_collective
    monkeypatch.setattr(
        parallel,
        "apply_collective",
        lambda p, values, params: on_host.append(p.name) or meet_on_host(p, values, params),
    )
    rng = np.random.default_rng(7)
    x = rng.standard_normal((NUM_DEVICES, 2, 4)).astype(np.float32)
    x[1, 0, 2] = np.nan
    big = np.array([100, 90, -128, 127], np.int8)[:, None]

    def f(v, b):
        w = fnp.nan_to_num(v)
        return {
            "psum": lax.psum(v, "i"),
            "pmax": lax.pmax(v, "i"),
            "pmin": lax.pmin(v, "i"),
            "gather": lax.all_gather(v, "i", axis=2),
            "gather tiled": lax.all_gather(v, "i", axis=1, tiled=True),
            "complex": lax.psum(v + 2j * v, "i"),
            "bool": lax.pmax(v > 1, "i"),
            "int8": lax.psum(b, "i"),
            "float64 pmin": lax.pmin(v.astype(fnp.float64), "i"),
            "scatter tiled": lax.psum_scatter(w, "i", scatter_dimension=1, tiled=True),
            "scatter": lax.psum_scatter(w[1], "i"),
            "scatter complex": lax.psum_scatter(w - 1j * w, "i", scatter_dimension=1, tiled=True),
            "scatter int8": lax.psum_scatter(fnp.tile(b, (2, 4)), "i", scatter_dimension=1),
            "ppermute": lax.ppermute(v, "i", [(0, 1), (1, 0), (3, 3)]),
            "ppermute bfloat16": lax.ppermute(v.astype(fnp.bfloat16), "i", [(2, 0), (0, 1)]),
            "half": lax.psum(v.astype(fnp.float16), "i"),
            "bfloat16": lax.pmax(v.astype(fnp.bfloat16), "i"),
            "all_to_all tiled": lax.all_to_all(v, "i", 1, 0, tiled=True),
            "all_to_all": lax.all_to_all(fnp.stack([b] * 4), "i", 0, 1),
            "all_to_all bool": lax.all_to_all(v[:, :, None] > 0, "i", 1, 2),
        }

    out = fg.pmap(f, "i")(x, big)
    on_gpus = sorted(on_host)
    expected = fg.pmap(f, "i", backend="cpu")(x, big)
    for name, value in expected.items():
        got = out[name]
        assert got.dtype == value.dtype and got.shape == value.shape, name
        assert_sharded_on(fg.devices(), got)
        np.testing.assert_allclose(np.asarray(got), np.asarray(value), 1e-6, err_msg=name)
    np.testing.assert_array_equal(np.asarray(out["int8"])[0], big.sum(0, dtype=np.int8))
    assert np.isnan(np.asarray(out["pmax"])[:, 0, 2]).all()
    assert np.isnan(np.asarray(out["pmin"])[:, 0, 2]).all()
    # bfloat16's pmax and float16's psum, on every device
    assert on_gpus == sorted(["pmax", "psum"] * NUM_DEVICES)


def test_devices_of_several_kinds_are_refused():
    mixed = [fg.devices("cpu")[0], fg.devices()[1]]
    with pytest.raises(ValueError, match="mixes kinds of device"):
        fg.pmap(lambda v: v, devices=mixed)
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        fg.pmap(lambda v: v, backend="tpu")
    if not gpu_available():
        with pytest.raises(RuntimeError, match="CuPy|driver|GPU"):
            fg.pmap(lambda v: v, backend="gpu")(np.zeros(1))


def test_nccls_unique_id_crosses_processes_as_bytes_and_returns_as_cupy_gave_it():
    """CuPy gives NCCL's id as a tuple of signed chars or, built with Cython 3, of one-byte
    strings (the form a GPU machine's CuPy had); the other processes must get back the same
    kind, which CuPy's communicator takes."""
    raw = bytes(range(0, 256, 2))
    as_strings = tuple(bytes([b]) for b in raw)
    as_chars = tuple(np.frombuffer(raw, np.int8).tolist())
    for unique in (as_strings, as_chars):
        sent = collectives.id_bytes(unique)
        assert sent.dtype == np.uint8 and sent.tobytes() == raw
        assert collectives.id_from_bytes(sent.copy(), like=unique) == unique


@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU")
def test_pmap_over_every_gpu_of_this_machine(monkeypatch):
    """The gradients' pmean and an all_gather go through NCCL, never the host."""
    on_host = []
    monkeypatch.setattr(parallel, "apply_collective", lambda p, *_: on_host.append(p.name))
    gpus = fg.devices("gpu")
    x = np.random.default_rng(0).standard_normal((len(gpus), 1000)).astype(np.float32)
    loss = lambda w, v: fnp.mean(fnp.tanh(v * w) ** 2)  # noqa: E731

    def step(w, v):
        return lax.pmean(fg.grad(loss)(w, v), "i"), lax.all_gather(v[:3], "i")

    grads, gathered = fg.pmap(step, "i", in_axes=(None, 0), backend="gpu")(np.float32(0.7), x)
    assert_sharded_on(gpus, grads)
    expected = fg.grad(loss)(np.float32(0.7), fg.device_put(x, fg.devices("cpu")[0]))
    assert_close(grads, np.full(len(gpus), expected), np.float32, rtol=1e-5)
    assert_close(gathered, np.broadcast_to(x[:, :3], (len(gpus), len(gpus), 3)), np.float32)
    assert on_host == []
