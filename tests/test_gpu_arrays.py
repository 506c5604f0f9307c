"""Arrays on a GPU: placing them, reading them back, and eager operations and jitted calls that
run where the arrays are and leave their results there. Without a GPU the emulated one
(`devices("cuda_emulator")`: the CUDA backend's code on the host) stands in; on a machine
with a GPU the same tests also run on it. Values are checked against NumPy and the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.array import DeviceValue
from funcgrad.backends.cuda import emulator
from funcgrad.tools.recipes import CUDA_BACKENDS

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler"),
]


@pytest.fixture(params=CUDA_BACKENDS)
def gpu(request):
    return fg.devices(request.param)[0]


def on(device, x):
    return fg.device_put(x, device)


def assert_on(device, *arrays):
    for a in arrays:
        assert a.device is device and type(a._value) is DeviceValue


RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 6)).astype(np.float32)


def test_copy_to_host_async_starts_a_copy_that_a_later_read_waits_for(gpu):
    """The read after `copy_to_host_async` gives the value (while the device may still be
    computing it: the copy waits on the stream) and keeps giving it; empty, bfloat16 and
    complex values come back too; host arrays and non-arrays pass through; a donated
    array's start raises."""
    values = [X, np.zeros((0, 3), np.float32), (X * 3).astype(dtypes.bfloat16), X + 1j * X]
    placed = [on(gpu, v) for v in values]
    computed = fg.jit(lambda a: fnp.tanh(a) * 2)(placed[0])
    tree = {"placed": placed, "computed": computed, "host": fnp.ones(3), "n": 7}
    assert fg.copy_to_host_async(tree) is tree
    for got, want in zip(placed, values):
        np.testing.assert_array_equal(np.asarray(got), want)
        np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_allclose(np.asarray(computed), np.tanh(X) * 2, rtol=1e-6)
    assert computed._value._host is not None and fg.numpy.ones(2).copy_to_host_async() is None
    donated = on(gpu, X)
    fg.jit(lambda a: a + 1, donate_argnums=0)(donated)
    with pytest.raises(RuntimeError, match="deleted"):
        donated.copy_to_host_async()


@pytest.mark.parametrize(
    "value",
    [
        X,
        np.arange(5, dtype=np.int64),
        np.array([True, False, True]),
        np.float32(2.5),
        (X[0] * 3).astype(dtypes.bfloat16),
        (X[0] + 1j * X[1]).astype(np.complex64),
    ],
    ids=["float32", "int64", "bool", "scalar", "bfloat16", "complex64"],
)
def test_arrays_go_to_the_gpu_and_come_back_unchanged(gpu, value):
    x = on(gpu, value)
    assert_on(gpu, x)
    assert x.shape == np.shape(value) and x.dtype == np.asarray(value).dtype
    np.testing.assert_array_equal(np.asarray(x), value)
    back = fg.device_put(x, fg.devices("cpu")[0])
    assert back.device == fg.devices("cpu")[0] and type(back._value) is not DeviceValue
    np.testing.assert_array_equal(np.asarray(back), value)
    assert on(gpu, x) is x  # already there
    assert x.block_until_ready() is x
    assert repr(x).startswith("Array(") and x.devices() == {gpu}
    assert fg.device_count(gpu.backend) == fg.local_device_count(gpu.backend) == 1


def test_device_get_reads_a_pytree_back_to_numpy(gpu):
    tree = {"x": on(gpu, X), "host": fnp.arange(3), "n": 3, "s": "label"}
    got = fg.device_get(tree)
    assert type(got["x"]) is np.ndarray and type(got["host"]) is np.ndarray
    np.testing.assert_array_equal(got["x"], X)
    np.testing.assert_array_equal(got["host"], np.arange(3))
    assert got["n"] == 3 and got["s"] == "label"


def test_eager_operations_run_on_the_gpu_and_stay_there(gpu):
    x, y = on(gpu, X), on(gpu, X[::-1] * 2)
    results = {
        "elementwise": (fnp.tanh(x) * y + 1, np.tanh(X) * (X[::-1] * 2) + 1),
        "reduction": (x.sum(axis=1), X.sum(axis=1)),
        "matmul": (x @ y.T, X @ (X[::-1] * 2).T),
        "indexing": (x[1:3, ::2], X[1:3, ::2]),
        "gather": (x[fnp.array([3, 0])], X[[3, 0]]),
        "update": (x.at[0, 1].set(7.0), np.where(np.arange(24).reshape(4, 6) == 1, 7, X)),
        "transpose": (x.T.reshape(-1), X.T.reshape(-1)),
        "cumsum": (fnp.cumsum(x, axis=1), np.cumsum(X, axis=1)),
        "integers": ((x > 0).astype(np.int32) * 3, (X > 0).astype(np.int32) * 3),
    }
    for name, (got, expected) in results.items():
        assert_on(gpu, got)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6, atol=1e-6, err_msg=name)
    rows = list(x)
    assert len(rows) == 4
    assert_on(gpu, *rows)
    np.testing.assert_array_equal(np.asarray(rows[2]), X[2])
    # A host operand joins the GPU array on the GPU.
    mixed = x + fnp.asarray(X)
    assert_on(gpu, mixed)
    np.testing.assert_allclose(np.asarray(mixed), 2 * X, rtol=1e-6)


def test_jitted_calls_run_on_the_gpu_of_their_arguments(gpu):
    w = RNG.standard_normal((6, 3)).astype(np.float32)

    @fg.jit
    def layer(params, x):
        w, b = params
        return {"out": fnp.tanh(x @ w + b), "mean": x.mean()}

    params = (on(gpu, w), on(gpu, np.ones(3, np.float32)))
    got = layer(params, on(gpu, X))
    expected = layer((w, np.ones(3, np.float32)), X)  # the CPU's
    for key in ("out", "mean"):
        assert_on(gpu, got[key])
        np.testing.assert_allclose(np.asarray(got[key]), np.asarray(expected[key]), rtol=1e-5)
    again = layer(params, fnp.asarray(X))  # a host argument beside GPU ones
    assert_on(gpu, again["out"])
    np.testing.assert_allclose(np.asarray(again["out"]), np.asarray(expected["out"]), rtol=1e-5)
    assert type(layer((w, np.ones(3, np.float32)), X)["out"]._value) is not DeviceValue
    closing = fg.jit(lambda x: fnp.tanh(x @ w))  # a closed-over host constant
    for _ in range(2):  # copied to the GPU once, used by every call
        out = closing(on(gpu, X))
        assert_on(gpu, out)
        np.testing.assert_allclose(np.asarray(out), np.tanh(X @ w), rtol=1e-5, atol=1e-6)


def test_transformations_of_gpu_arrays_run_on_the_gpu(gpu):
    x = on(gpu, X)

    def loss(a):
        def body(carry, row):
            return carry * 0.5 + fnp.sin(row), carry.sum()

        carry, sums = lax.scan(body, fnp.zeros(6, np.float32), a)
        return (carry**2).sum() + sums.sum()

    grad = fg.grad(loss)(x)
    assert_on(gpu, grad)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(fg.grad(loss)(X)), rtol=1e-5)
    batched = fg.vmap(lambda row: lax.cond(row.sum() > 0, fnp.exp, fnp.cos, row))(x)
    assert_on(gpu, batched)
    expected = np.where(X.sum(1, keepdims=True) > 0, np.exp(X), np.cos(X))
    np.testing.assert_allclose(np.asarray(batched), expected, rtol=1e-6)
    count = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2), (0, x))
    np.testing.assert_allclose(np.asarray(count[1]), X * 8)


def test_debug_nans_names_the_primitive_in_a_jitted_call_on_the_gpu(gpu, monkeypatch):
    monkeypatch.setattr(fg.config, "debug_nans", True)
    f = fg.jit(lambda a: fnp.log(a) * 2)
    f(on(gpu, np.float32(1.0)))
    with pytest.raises(FloatingPointError, match="nan.* in log"):
        f(on(gpu, np.float32(-1.0)))


def test_forward_mode_through_a_custom_vjp_on_the_gpu_says_why_it_fails(gpu):
    f = fg.custom_vjp(lambda a: fnp.sin(a))
    f.defvjp(lambda a: (fnp.sin(a), a), lambda a, ct: (ct * fnp.cos(a),))
    x = on(gpu, X[0])
    with pytest.raises(TypeError, match="forward-mode"):
        fg.jvp(f, (x,), (x,))
    np.testing.assert_allclose(np.asarray(fg.grad(lambda a: f(a).sum())(x)), np.cos(X[0]))


def test_dlpack_hands_over_the_gpu_buffer(gpu):
    x = on(gpu, X)
    if gpu.backend == "cuda_emulator":
        np.testing.assert_array_equal(np.from_dlpack(x), X)  # host memory
    else:
        import cupy

        np.testing.assert_array_equal(cupy.asnumpy(cupy.from_dlpack(x)), X)


@pytest.mark.skipif("cuda" not in CUDA_BACKENDS, reason="needs a CUDA GPU")
def test_cuda_dlpack_tensors_come_in_on_their_gpu_without_a_copy():
    import cupy

    source = cupy.asarray(X)
    x = fnp.from_dlpack(source)
    assert x.device == fg.devices("gpu")[0] and x.shape == X.shape and x.dtype == X.dtype
    assert x._value.storage.data.ptr == source.data.ptr  # the same memory
    np.testing.assert_array_equal(np.asarray(x * 2), X * 2)
    copied = fnp.from_dlpack(source, copy=True)
    assert copied._value.storage.data.ptr != source.data.ptr
    np.testing.assert_array_equal(np.asarray(fnp.from_dlpack(source.T)), X.T)  # strided
    host = fnp.from_dlpack(source, device=fg.devices("cpu")[0])
    assert host.device == fg.devices("cpu")[0]
    np.testing.assert_array_equal(np.asarray(host), X)
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        tensor = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
        np.testing.assert_array_equal(
            np.asarray(fnp.from_dlpack(tensor) + 1), np.arange(12).reshape(3, 4) + 1
        )


@pytest.mark.skipif("cuda" not in CUDA_BACKENDS, reason="needs a CUDA GPU")
def test_every_gpu_is_a_device_whose_arrays_and_programs_stay_on_it():
    import cupy

    gpus = fg.devices("gpu")
    assert [d.id for d in gpus] == list(range(cupy.cuda.runtime.getDeviceCount()))
    for device in gpus:
        x = fg.device_put(X, device)
        y = fg.jit(lambda v: fnp.tanh(v) @ v.T)(x) + 1
        assert y.device == device and y._value.storage.device.id == device.id
        np.testing.assert_allclose(np.asarray(y), np.tanh(X) @ X.T + 1, rtol=1e-5)


def test_each_emulated_gpu_keeps_its_arrays_and_runs_their_programs(monkeypatch):
    """Several emulated GPUs stand for a machine's GPUs: each has its own runtime, computation
    follows the data to its GPU, arrays move between GPUs with device_put, and arrays of two
    GPUs in one operation are refused, naming both."""
    monkeypatch.setattr(fg.config, "num_cpu_devices", 3)
    gpus = fg.devices("cuda_emulator")
    assert [g.id for g in gpus] == [0, 1, 2] and len({id(g.runtime) for g in gpus}) == 3
    launched = {g: 0 for g in gpus}
    for g in gpus:
        launch = g.runtime.launch

        def counted(*args, g=g, launch=launch):
            launched[g] += 1
            return launch(*args)

        monkeypatch.setattr(g.runtime, "launch", counted)
    f = fg.jit(lambda v: fnp.tanh(v) @ v.T)
    for g in gpus[1:]:
        before = dict(launched)
        y = f(on(g, X)) + 1
        assert_on(g, y)
        np.testing.assert_allclose(np.asarray(y), np.tanh(X) @ X.T + 1, rtol=1e-5)
        assert [launched[h] - before[h] > 0 for h in gpus] == [h is g for h in gpus]
    moved = fg.device_put(on(gpus[1], X), gpus[2])
    assert_on(gpus[2], moved)
    np.testing.assert_array_equal(np.asarray(moved), X)
    with pytest.raises(ValueError, match="different devices.*id=1.*id=2"):
        on(gpus[1], X) + moved


class _CudaTensor:
    """An object exporting (as it claims) CUDA memory through DLPack."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        raise AssertionError("not to be read without a GPU")


@pytest.mark.skipif("cuda" in CUDA_BACKENDS, reason="a GPU is present")
def test_a_cuda_dlpack_tensor_without_a_gpu_names_what_is_missing():
    with pytest.raises(RuntimeError, match="CuPy|CUDA"):
        fnp.from_dlpack(_CudaTensor())


def test_decompositions_of_gpu_arrays_give_gpu_arrays(gpu):
    m = (X[:4, :4] @ X[:4, :4].T + 4 * np.eye(4)).astype(np.float32)
    lower = fnp.linalg.cholesky(on(gpu, m))
    assert_on(gpu, lower)
    np.testing.assert_allclose(np.asarray(lower), np.linalg.cholesky(m), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif("cuda" in CUDA_BACKENDS, reason="a GPU is present")
def test_asking_for_a_gpu_names_what_is_missing():
    with pytest.raises(RuntimeError, match="CuPy|CUDA"):
        fg.devices("gpu")


def test_a_repeated_python_scalar_is_copied_to_the_gpu_once(gpu, monkeypatch):
    """Eager operations keep host scalars on the GPU: a copy there waits for the GPU."""
    x = on(gpu, X)
    x * 3.5  # compiles the program and copies 3.5
    uploads = []
    upload = gpu.runtime.upload
    monkeypatch.setattr(gpu.runtime, "upload", lambda value: uploads.append(value) or upload(value))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(x * 3.5), X * 3.5, rtol=1e-6)
    assert uploads == []
    np.testing.assert_allclose(np.asarray(x * -1.25), X * -1.25, rtol=1e-6)
    assert len(uploads) == 1  # a new value is copied, once
    np.testing.assert_array_equal(np.asarray(x * 3.5), np.asarray(x * 3.5))


def test_memory_stats_count_a_gpus_bytes_and_a_cpu_has_none(gpu):
    stats = gpu.memory_stats()
    assert stats["bytes_limit"] > 0 and stats["bytes_held_by_replays"] >= 0
    if gpu.backend == "cuda":  # (an emulated GPU's memory is the host's, in no pool)
        assert stats["bytes_in_use"] <= stats["bytes_reserved"] <= stats["bytes_limit"]
        before = stats["bytes_in_use"]
        x = on(gpu, np.ones(1 << 20, np.float32))
        assert gpu.memory_stats()["bytes_in_use"] >= before + x.nbytes
    assert fg.devices("cpu")[0].memory_stats() is None


def address(array) -> int:
    """Where a GPU array's buffer lives (its device pointer, or host address when emulated)."""
    storage = array._value.storage
    return storage.data.ptr if hasattr(storage.data, "ptr") else storage.ctypes.data


def test_a_donated_gpu_array_hosts_the_result_call_after_call(gpu):
    step = fg.jit(lambda p, g: (p - 0.1 * g, (g * g).sum()), donate_argnums=0)
    g = on(gpu, X)
    p = on(gpu, np.ones_like(X))
    where, expected = address(p), np.ones_like(X)
    for _ in range(4):  # the first call walks the program, later ones replay its graph
        old, (p, norm) = p, step(p, g)
        expected = expected - np.float32(0.1) * X
        assert_on(gpu, p) and old.is_deleted() and not g.is_deleted()
        assert address(p) == where
        np.testing.assert_allclose(np.asarray(p), expected, rtol=1e-6)
        np.testing.assert_allclose(float(norm), (X * X).sum(), rtol=1e-5)
    with pytest.raises(RuntimeError, match="deleted"):
        old + 1


def test_a_donated_gpu_array_held_elsewhere_is_copied_not_overwritten(gpu):
    step = fg.jit(lambda p: p * 2, donate_argnums=0)
    for _ in range(3):
        p = on(gpu, X)
        held = p._value  # another holder of its buffer
        where = address(p)
        out = step(p)
        assert p.is_deleted() and address(out) != where
        np.testing.assert_array_equal(np.asarray(held), X)  # untouched
        np.testing.assert_array_equal(np.asarray(out), X * 2)
    twice = fg.jit(lambda p, q: p + q[::-1], donate_argnums=0)
    for _ in range(3):  # the same array passed again is read after the output is written
        p = on(gpu, X)
        np.testing.assert_array_equal(np.asarray(twice(p, p)), X + X[::-1])


def test_an_unusable_donation_on_the_gpu_warns_and_keeps_the_argument(gpu):
    z = (X + 1j * X[::-1]).astype(np.complex64)
    for fun, value, expected in [
        (lambda p: p.sum(), X, X.sum()),  # no output of its shape
        (lambda z: z * 1j, z, z * 1j),  # each part is written from the other
    ]:
        argument = on(gpu, value)
        with pytest.warns(UserWarning, match="donated buffers were not usable"):
            out = fg.jit(fun, donate_argnums=0)(argument)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(argument), value)  # as JAX keeps it
