"""Jitted programs replayed as one CUDA graph (`backends/cuda/graphs.py`): which programs are,
and that a replay computes what a walk step by step computes, call after call, with new
arguments each time, earlier results left as they were. On the emulator a graph is the
recorded launches run again; where CuPy finds a GPU the same tests capture real graphs."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest
import training
from checks import jit_backend
from hypothesis import given, settings

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, lax
from funcgrad.array import DeviceValue
from funcgrad.backends.cuda import emulator, executable, graphs
from funcgrad.tools.recipes import CUDA_BACKENDS

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler"),
]

RNG = np.random.default_rng(0)
W = (RNG.standard_normal((64, 64)) / 8).astype(np.float32)


def layers(x, w):
    """Four GEMMs, each followed by a fused kernel: nine launches for two arguments and two
    results."""
    for _ in range(4):
        x = fnp.tanh(x @ w)
        x = x - x.mean(axis=1, keepdims=True)
    return x, (x * x).sum()  # (a sum of centred values would cancel to rounding errors)


def reference(fun, *args) -> list[np.ndarray]:
    with jit_backend("numpy"):
        return [np.asarray(v) for v in fg.tree_util.tree_leaves(fg.jit(fun)(*args))]


def assert_close(got, expected, rtol=2e-5):
    got = [np.asarray(v) for v in fg.tree_util.tree_leaves(got)]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        wide = np.complex128 if g.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(g.astype(wide), e.astype(wide), rtol=rtol, atol=rtol)


def compiled(backend: str, fun, *args):
    with jit_backend(backend):
        return fg.jit(fun).lower(*args).compile()


@pytest.fixture
def walks(monkeypatch):
    """Counts the step-by-step walks of whole programs (a capture is one; a replay none),
    holding nothing of them (a walk's views would hold its arguments' memory)."""
    counted = []
    steps = executable._Walk.steps

    def counting(walk, program_steps):
        if program_steps is walk.executable.program.steps:
            counted.append(program_steps)
        return steps(walk, program_steps)

    monkeypatch.setattr(executable._Walk, "steps", counting)
    return counted


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_a_program_of_many_launches_replays_as_one_graph_from_its_second_call(backend, walks):
    program = compiled(backend, layers, np.zeros((32, 64), np.float32), W)
    assert "one CUDA graph of 9 launches" in program.fusion_plan()
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(5)]
    results = [program(x, W) for x in xs]
    assert len(walks) == 2  # the first call walks, the second captures; later ones replay
    # Every call's results are its own, though all were computed in the graph's buffers.
    for x, result in zip(xs, results):
        assert_close(result, reference(layers, x, W))


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_replays_take_arguments_on_the_gpu_and_leave_results_there(backend, walks):
    gpu = fg.devices(backend)[0]
    step = fg.jit(layers)
    x = fg.device_put(RNG.standard_normal((32, 64)).astype(np.float32), gpu)
    w = fg.device_put(W, gpu)
    expected_x = np.asarray(x)
    for _ in range(6):  # each call's result is the next one's argument, as in a training loop
        x, total = step(x, w)
        assert type(x._value) is DeviceValue and x.device is gpu
        expected_x, expected_total = reference(layers, expected_x, W)
        assert_close([x, total], [expected_x, expected_total])
    # (a graph for each place x comes in, as the memory pool hands them out, up to four)
    assert 2 <= len(walks) <= 2 + executable.MAX_PLACEMENTS


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_arguments_passed_in_the_same_gpu_buffer_are_read_where_they_are(backend, monkeypatch):
    gpu = fg.devices(backend)[0]
    w = fg.device_put(W, gpu)
    step = fg.jit(lambda x: layers(x, w))  # w is closed over: the same buffer at every call
    copied = counted_copies(monkeypatch, gpu.runtime)
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(7)]
    for x, placed in zip(xs, [fg.device_put(x, gpu) for x in xs]):  # x in ever new places
        copied.clear()
        assert_close(step(placed), reference(layers, x, W))
    assert copied == [x.nbytes]  # x in; not w, nor the results, which kernels write in place


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_arguments_in_a_few_places_get_a_graph_each_and_copied_in_past_those(
    backend, walks, monkeypatch
):
    """A graph holds addresses, so it reads arguments where they were when it was captured:
    calls passing them elsewhere get graphs of their own (in a training loop each call's
    parameters are the last one's results, and the memory pool hands out the same places in
    turn), up to MAX_PLACEMENTS; past that, the arguments that moved are copied in, under
    one graph. Each call reads its own arguments, whatever held those places before."""
    gpu = fg.devices(backend)[0]
    copied = counted_copies(monkeypatch, gpu.runtime)
    step = compiled(backend, layers, np.zeros((32, 64), np.float32), W)
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(7)]
    placed = [fg.device_put(x, gpu) for x in xs]
    w = fg.device_put(W, gpu)
    for k in [0, 1, 0, 1, 0, 1]:  # two places, taking turns
        copied.clear()
        assert_close(step(placed[k], w), reference(layers, xs[k], W))
        assert copied == []  # x and w read where they are; the results written in place
    assert len(walks) == 3  # the first call, and a capture for each place of x
    # Another array in x's first place (here, new values written there): the graph reads it.
    fresh = RNG.standard_normal((32, 64)).astype(np.float32)
    placed[0]._value.storage[...] = gpu.runtime.upload(fresh.reshape(-1))
    assert_close(step(placed[0], w), reference(layers, fresh, W))
    for k in range(2, 7):  # ever new places: x copied in once graphs for four were made
        copied.clear()
        assert_close(step(placed[k], w), reference(layers, xs[k], W))
    assert len(walks) == 3 + 2 + 1  # places 3 and 4; then x copied in, w read in place
    assert copied == [xs[0].nbytes]
    [(_, _, (arguments, results))] = step.executable._replays
    assert arguments == ((1, gpu.runtime.address(w._value.storage)),) and results == ()


def test_arguments_move_to_copies_where_a_graph_for_their_new_place_would_not_fit(
    monkeypatch,
):
    """Graphs for two places that do not fit the memory replays may hold together would
    take turns evicting each other, a capture at every call: the argument that moved is
    copied in instead, under one graph."""
    gpu = fg.devices("cuda_emulator")[0]
    program = compiled("cuda_emulator", layers, np.zeros((32, 64), np.float32), W)
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(4)]
    placed = [fg.device_put(x, gpu) for x in xs]
    w = fg.device_put(W, gpu)
    program(placed[0], w)
    program(placed[1], w)
    [replay] = program.executable._replays.values()
    room = 1.5 * replay.nbytes / gpu.runtime.capacity()  # room for one such graph, not two
    monkeypatch.setattr(graphs, "HELD_SHARE", room)
    for x, there in zip(xs[2:], placed[2:]):
        assert_close(program(there, w), reference(layers, x, W))
    [(_, _, (arguments, _))] = program.executable._replays
    assert [i for i, _ in arguments] == [1]  # w read where it is, x copied in


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_a_donated_training_loop_updates_its_parameters_where_they_are(backend, walks, monkeypatch):
    """Donated parameters are taken over by the outputs they host, so each call's parameters
    are where the last call's were: one graph reads and updates them there, copying nothing.
    A donated array that something else still holds is copied in and left whole."""

    def step(w, b, x):
        def loss(w, b):
            return (fnp.tanh(x @ w + b) ** 2).sum()

        gw, gb = fg.grad(loss, argnums=(0, 1))(w, b)
        return w - 0.01 * gw, b - 0.01 * gb

    gpu = fg.devices(backend)[0]
    x_host = RNG.standard_normal((32, 64)).astype(np.float32)
    b_host = RNG.standard_normal(64).astype(np.float32)
    x, w, b = fg.device_put((x_host, W, b_host), gpu)
    jitted = fg.jit(step, donate_argnums=(0, 1))
    copied = counted_copies(monkeypatch, gpu.runtime)
    expected = (W, b_host)
    for _ in range(5):
        places = [gpu.runtime.address(a._value.storage) for a in (w, b)]
        copied.clear()
        w, b = jitted(w, b, x)
        assert [gpu.runtime.address(a._value.storage) for a in (w, b)] == places
        expected = reference(step, *expected, x_host)
        assert_close([w, b], expected, rtol=1e-4)
    assert copied == [] and len(walks) == 2
    held = w._value  # (another holder of its memory, which the output then cannot take)
    before = np.asarray(held).copy()
    w, b = jitted(w, b, x)
    assert_close([w, b], reference(step, *expected, x_host), rtol=1e-4)
    np.testing.assert_array_equal(np.asarray(held), before)  # untouched
    assert copied == [W.nbytes, W.nbytes]  # w in and its update out


def counted_copies(monkeypatch, runtime) -> list:
    """The bytes of each buffer a replay copies in or out from now on: those whose addresses
    a call writes into the tables of the graph's copy kernels. The device copies nothing
    itself: a copy made outside the graph fails the test."""
    copied, point = [], executable._Copies.point

    def counted(copies, buffers):
        copied.extend(buffer.nbytes for buffer in buffers)
        point(copies, buffers)

    def refused(to, of):
        raise AssertionError("a replay copied a buffer outside its graph")

    monkeypatch.setattr(executable._Copies, "point", counted)
    monkeypatch.setattr(runtime, "copy", refused)
    return copied


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_a_replayed_call_tells_its_graph_where_its_buffers_are_by_launches_alone(
    backend, monkeypatch
):
    """A call writes its arguments' and results' addresses into its replay's tables by
    launching kernels whose parameters are those buffers (`executable.point`), not by copies
    from the host: a host-to-device copy from pageable memory may wait for the stream to
    drain, and so make each call wait for the last one's kernels. On a GPU, calls made while
    the device is busy return before it is free."""
    gpu = fg.devices(backend)[0]
    step = fg.jit(layers)
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(10)]
    placed = [fg.device_put(x, gpu) for x in xs]
    w = fg.device_put(W, gpu)
    for x in placed[:6]:  # walked, then captured for x's places until x is copied in
        step(x, w)

    def refused(*args):
        raise AssertionError("a replayed call copied host memory to the device")

    monkeypatch.setattr(gpu.runtime, "upload", refused)
    results = [step(x, w) for x in placed[6:8]]
    if backend == "cuda":
        gpu.runtime.occupy(0.5)
        start = time.perf_counter()
        results += [step(x, w) for x in placed[8:]]
        assert time.perf_counter() - start < 0.25
    for x, result in zip(xs[6:], results):
        assert_close(result, reference(layers, x, W))


def test_a_call_whose_results_are_where_the_last_calls_were_writes_no_addresses(monkeypatch):
    """The memory pool hands a program's results the same places again and again (each
    call's results dropped before the next, or a training loop's taking turns): a replayed
    call then launches nothing but its graph. Results held, each call's in new places, are
    pointed at call by call."""
    gpu = fg.devices("cuda_emulator")[0]
    step = fg.jit(layers)
    x = fg.device_put(RNG.standard_normal((32, 64)).astype(np.float32), gpu)
    w = fg.device_put(W, gpu)
    pointed, point = [], executable.point

    def counted(device, table, buffers):
        pointed.append(len(buffers))
        point(device, table, buffers)

    monkeypatch.setattr(executable, "point", counted)
    expected = reference(layers, np.asarray(x), W)
    places, held = [], []
    for k in range(8):
        results = step(x, w)
        assert_close(results, expected)
        places.append(tuple(gpu.runtime.address(r._value.storage) for r in results))
        if k >= 4:
            held.append(results)  # (their memory stays taken: the next results go elsewhere)
        del results
    # The capture points its slots; later calls only where the results moved (the held ones'
    # at least; the others where the host's allocator, which plays the pool here, gave them
    # new places).
    moved = sum(places[k] != places[k - 1] for k in range(2, 8))
    assert len(pointed) == 1 + moved and moved >= 3
    # Results where the last call's were, as a GPU's pool hands them out: nothing pointed.
    replay = next(reversed(gpu.runtime.held.replays))()  # (the last used)
    again = [r._value.storage for r in held[-1]]
    pointed.clear()
    replay.slots.point([again[k] for k in replay.written])
    assert pointed == []


def test_addresses_are_written_by_launches_of_up_to_16_each(monkeypatch):
    device = executable.emulator()
    buffers = [np.empty(k + 1, np.float32) for k in range(40)]
    table = device.upload(np.zeros(41, np.uint64))
    launched, launch = [], device.launch

    def counted(module, kernel, given):
        launched.append(len(given) - 1)
        launch(module, kernel, given)

    monkeypatch.setattr(device, "launch", counted)
    executable.point(device, table[1:], buffers)
    assert launched == [16, 16, 8]
    assert table[0] == 0 and list(table[1:]) == [b.ctypes.data for b in buffers]


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_results_are_written_where_each_call_has_them(backend, walks, monkeypatch):
    """Kernels of the program's own write its results through slots that each call fills
    (`in_place`); a GEMM's result is written where the call's result is, the graphs kept by
    where the results are, as by where the arguments are: the memory pool hands a program's
    results the same few places again and again. Results kept in ever new places get graphs
    up to MAX_PLACEMENTS; past that the GEMM's is copied out of one graph."""

    def f(x, w):
        h = x @ w  # a GEMM's result
        y = fnp.tanh(h)  # a kernel's result, which two other kernels read
        top = y.max(axis=1, keepdims=True)
        return h, y, y, top, ((y - top) @ w).sum(), x

    gpu = fg.devices(backend)[0]
    executable_of = compiled(backend, f, np.zeros((32, 64), np.float32), W).executable
    outputs = executable_of.program.outputs
    assert executable_of.in_place == outputs[1:] and executable_of.placed_results == [0]
    program = fg.jit(f)  # (its results stay on the device, each call's kept)
    copied = counted_copies(monkeypatch, gpu.runtime)
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(8)]
    x_there = fg.device_put(xs[0], gpu)
    w = fg.device_put(W, gpu)
    results, copies = [], []
    for x in xs:  # every call's results kept: new places each time
        copied.clear()
        x_there._value.storage[...] = gpu.runtime.upload(x.reshape(-1))  # x, in one place
        results.append(program(x_there, w))
        copies.append(list(copied))
    # The first call walks; four capture a graph each, writing h where it is; then h is
    # copied out of one more graph, which the later calls replay.
    assert len(walks) == 1 + executable.MAX_PLACEMENTS + 1
    assert copies == [[]] * (1 + executable.MAX_PLACEMENTS) + [[xs[0].nbytes]] * 3
    for x, result in zip(xs, results):  # (each call's own, though graphs wrote them)
        assert_close(result, reference(f, x, W))


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_half_precision_arguments_are_copied_in_bit_for_bit(backend):
    def f(x, w):
        return layers(x.astype(np.float32), w)[0].astype(dtypes.bfloat16), x * 2

    program = compiled(backend, f, np.zeros((32, 64), dtypes.bfloat16), W)
    assert "CUDA graph" in program.fusion_plan()
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((32, 64)).astype(dtypes.bfloat16)
        got = program(x, W)
        np.testing.assert_array_equal(np.asarray(got[1]).view(np.uint16), (x * 2).view(np.uint16))
        assert_close(got, reference(f, x, W), rtol=1e-2)


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_complex_arguments_and_results_are_copied_as_their_parts(backend):
    def f(z, w):  # the program's buffers hold the parts: twice as many float32 elements
        x = layers(fnp.real(z) - fnp.imag(z), w)[0]
        return x * (1 + 2j), fnp.abs(x).mean() * z

    z = np.zeros((32, 64), np.complex64)
    program = compiled(backend, f, z, W)
    assert "CUDA graph" in program.fusion_plan()
    for seed in range(3):
        rng = np.random.default_rng(seed)
        z = (rng.standard_normal((32, 64)) + 1j * rng.standard_normal((32, 64))).astype(z.dtype)
        assert_close(program(z, W), reference(f, z, W))


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_a_scan_walked_on_the_host_replays_with_its_slices(backend, walks):
    def f(h, xs, w):
        def body(h, x):  # 64 x 128 x 128 multiply-adds a step: too much for one block
            h = fnp.tanh(h @ w + x)
            return h, h.sum(axis=1)

        return lax.scan(body, h, xs)

    w = (RNG.standard_normal((128, 128)) / 12).astype(np.float32)
    h = np.zeros((64, 128), np.float32)
    plan = compiled(backend, f, h, np.zeros((5, 64, 128), np.float32), w).fusion_plan()
    assert "on the device" not in plan and "CUDA graph" in plan
    gpu = fg.devices(backend)[0]
    program, placed = fg.jit(f), fg.device_put((h, w), gpu)
    xs = [RNG.standard_normal((5, 64, 128)).astype(np.float32) for _ in range(4)]
    results = [program(placed[0], x, placed[1]) for x in xs]  # (each kept: in places of its own)
    for x, result in zip(xs, results):
        assert_close(result, reference(f, h, x, w), rtol=1e-4)
    # The first call walks; the others capture, the scan's stacked sums written where their
    # calls have them.
    assert len(walks) == 4


def test_programs_needing_the_host_or_copying_more_than_they_launch_are_walked(monkeypatch):
    x = np.ones((32, 64), np.float32)

    def looped(x):  # a loop of GEMMs too big for one block: its predicate is read back
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, fnp.tanh(c[1] @ W)), (0, x))

    def called_back(x, w):
        x, total = layers(x, w)
        return fg.pure_callback(np.negative, fg.ShapeDtypeStruct((), np.float32), total), x

    for fun, args in [
        (lambda x: fnp.exp(x) + 1, (x,)),  # one kernel: copies would cost more
        (looped, (x,)),
        (called_back, (x, W)),
        (lambda m: fnp.linalg.cholesky(m @ m.T + 64 * fnp.eye(32)), (x,)),
    ]:
        program = compiled("cuda_emulator", fun, *args)
        assert "CUDA graph" not in program.fusion_plan()
        for _ in range(3):
            assert_close(program(*args), reference(fun, *args), rtol=1e-4)
        assert not program.executable._replays

    program = program_of(layers, x, W)  # 9 launches; 8 KiB + 16 KiB in, 8 KiB + 4 B out
    monkeypatch.setattr(graphs, "MAX_LAUNCHES", 8)  # a graph of nine launches is too many
    assert graphs.capturable(program, {}) is None
    monkeypatch.setattr(graphs, "MAX_LAUNCHES", 9)
    assert graphs.capturable(program, {}) == 9
    everything = program.inputs + program.outputs
    monkeypatch.setattr(graphs, "COPY_BYTES_PER_LAUNCH", 1024)  # copies too large for that
    assert not graphs.worth_a_graph(9, everything)
    monkeypatch.setattr(graphs, "COPY_BYTES_PER_LAUNCH", 4096)
    assert graphs.worth_a_graph(9, everything)
    assert not graphs.worth_a_graph(7, everything)  # 32 KiB copied; seven launches allow 28
    two = program_of(lambda x: (fnp.exp(x @ W), x.sum()), x)  # a GEMM and two kernels
    assert graphs.capturable(two, {}) == 3
    monkeypatch.setattr(graphs, "COPY_LAUNCHES", 3)  # no more than the copy kernels
    assert graphs.capturable(two, {}) is None


def program_of(fun, *args):
    with jit_backend("cuda_emulator"):
        return fg.jit(fun).lower(*args).compile().executable.program


def test_weights_read_in_place_can_make_a_graph_worth_its_copies(monkeypatch):
    """Copying x (8 KiB) fits a budget of 2 KiB for each of the seven launches saved; copying
    W too (16 KiB) does not: once W has come in more places than graphs are kept for, and so
    would be copied in, the program walks."""
    monkeypatch.setattr(graphs, "COPY_BYTES_PER_LAUNCH", 2048)
    gpu = fg.devices("cuda_emulator")[0]
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(8)]
    x_places = [fg.device_put(x, gpu) for x in xs]
    for w_moves in (False, True):
        program = compiled("cuda_emulator", layers, xs[0], W)
        w_places = [fg.device_put(W, gpu) for _ in xs] if w_moves else [fg.device_put(W, gpu)]
        for k, (x, placed) in enumerate(zip(xs, x_places)):
            w = w_places[k % len(w_places)]
            assert_close(program(placed, w), reference(layers, x, W))
        replays = program.executable._replays
        assert (not replays and not program.executable._replayable) == w_moves
        assert w_moves or [places[0][0][0] for _, _, places in replays] == [1]  # w; x copied


def test_each_matmul_precision_setting_replays_a_graph_of_its_own():
    a = (1 + RNG.random((32, 64)) * 1e-2).astype(np.float32)  # low bits that TF32 drops
    program = compiled("cuda_emulator", layers, a, W)
    full = [np.asarray(v) for v in program(a, W)]
    for _ in range(2):
        assert_close(program(a, W), full, rtol=0)
        with fg.default_matmul_precision("tensorfloat32"):
            rounded = [np.asarray(v) for v in program(a, W)]
    assert not np.array_equal(rounded[0], full[0])  # TF32 is visible in these products
    with jit_backend("cuda_emulator"), fg.default_matmul_precision("tensorfloat32"):
        assert_close(rounded, [np.asarray(v) for v in fg.jit(layers)(a, W)], rtol=0)
    assert {setting for setting, _, _ in program.executable._replays} == {None, "tensorfloat32"}


def test_each_stream_replays_a_graph_over_buffers_of_its_own(monkeypatch, walks):
    """Calls on two streams may run at once, so each stream's replay has its own buffers (one
    replay's arena, written by two streams' calls at once, would mix their values)."""
    program = compiled("cuda_emulator", layers, np.zeros((32, 64), np.float32), W)
    stream = ["a"]
    monkeypatch.setattr(executable.emulator(), "stream", lambda: stream[0])
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(6)]
    for x, on in zip(xs, "aabbab"):
        stream[0] = on
        assert_close(program(x, W), reference(layers, x, W))
    replays = program.executable._replays
    assert sorted(replays) == [(None, "a", ((), ())), (None, "b", ((), ()))]  # (from the host)
    assert len(walks) == 3  # the first call, and each stream's capture
    arenas = [
        {id(v.base) for v in r.views.values() if v.base is not None} for r in replays.values()
    ]
    assert not set.intersection(*arenas)


def test_a_capture_the_gpu_refuses_warns_and_the_program_walks(monkeypatch, walks):
    class Refused(RuntimeError):
        pass

    def refuse(walk):
        raise Refused("operation not permitted when stream is capturing")

    x = np.ones((32, 64), np.float32)
    program = compiled("cuda_emulator", layers, x, W)
    device = program.executable.device
    monkeypatch.setattr(device, "capture", refuse)
    monkeypatch.setattr(device, "capture_errors", (Refused,))
    program(x, W)
    with pytest.warns(RuntimeWarning, match="could not be captured as a CUDA graph.*Refused"):
        got = program(x, W)
    assert_close(got, reference(layers, x, W))
    assert_close(program(x, W), reference(layers, x, W))
    assert len(walks) == 3 and not program.executable._replayable


def test_replays_past_their_share_of_memory_let_the_least_recently_used_go(monkeypatch, walks):
    def twice(x, w):
        return layers(2 * x, w)

    x = RNG.standard_normal((32, 64)).astype(np.float32)
    first, second = (compiled("cuda_emulator", f, x, W) for f in (layers, twice))
    held = executable.emulator().held
    assert first.executable.device is second.executable.device is executable.emulator()
    for _ in range(2):
        first(x, W)
    (one,) = [size for key, size in held.replays.items() if key().executable is first.executable]
    assert one == first.executable.memory.arena_bytes + x.nbytes + W.nbytes  # (no results)
    # Room for one of them (each holds its arguments and arena) but not two.
    monkeypatch.setattr(graphs, "HELD_SHARE", 1.5 * one / executable.emulator().capacity())
    for _ in range(2):
        second(x, W)
    assert not first.executable._replays and second.executable._replays
    assert list(second.executable._replays.values()) == [key() for key in held.replays][-1:]
    walked = len(walks)
    for _ in range(2):  # captured again (one walk) and replayed, evicting the other
        assert_close(first(x, W), reference(layers, x, W))
    assert len(walks) == walked + 1
    assert first.executable._replays and not second.executable._replays


def test_a_program_and_its_replay_go_with_the_jitted_function_and_free_their_memory():
    """A jitted function closing over weights on the GPU (which its replay reads in place,
    holding their buffer) lets them go once it and they are gone: compiled programs live as
    long as the jaxpr they were compiled from, which the function's cache holds. Redefining
    such a function in a notebook cell kept every definition's weights on the GPU."""
    gpu = fg.devices("cuda_emulator")[0]
    rng = np.random.default_rng(7)  # (the module's generator is drawn in test order)
    x = fg.device_put(rng.standard_normal((32, 64)).astype(np.float32), gpu)
    storages = []
    for _ in range(3):  # three runs of one cell
        weights = rng.standard_normal((64, 64)).astype(np.float32)
        w = fg.device_put(weights, gpu)
        step = fg.jit(lambda x, w=w: layers(x, w))
        gc.collect()  # (the last run's program: collected now, not during the calls)
        held = gpu.memory_stats()["bytes_held_by_replays"]
        for _ in range(3):  # walked, captured, replayed
            # (four float32 layers: a product's sums in another order move some elements by
            # a few units in the last place of their magnitude)
            assert_close(step(x), reference(layers, np.asarray(x), weights), rtol=1e-4)
        assert gpu.memory_stats()["bytes_held_by_replays"] > held
        storages.append(weakref.ref(w._value.storage))
        del step, w
    gc.collect()
    assert all(s() is None for s in storages)


def test_threads_calling_one_program_get_their_own_results():
    program = compiled("cuda_emulator", layers, np.zeros((32, 64), np.float32), W)
    xs = [RNG.standard_normal((32, 64)).astype(np.float32) for _ in range(4)]
    expected = [reference(layers, x, W) for x in xs]
    program(xs[0], W)
    failures = []

    def calls(k):
        for _ in range(10):
            got = [np.asarray(v) for v in program(xs[k], W)]
            if not all(np.allclose(g, e, rtol=2e-5, atol=2e-5) for g, e in zip(got, expected[k])):
                failures.append(k)

    threads = [threading.Thread(target=calls, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures and program.executable._replays


def test_running_out_of_memory_lets_the_replays_go_and_tries_again(monkeypatch, walks):
    program = compiled("cuda_emulator", layers, np.zeros((32, 64), np.float32), W)
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    for _ in range(2):
        program(x, W)
    device = program.executable.device
    assert program.executable._replays and device.held.replays
    failures = []

    class Full:
        """The device's array module, out of memory once."""

        def __getattr__(self, name):
            return getattr(np, name)

        def empty(self, *args, **kwargs):
            if not failures:
                failures.append(args)
                raise MemoryError("out of memory")
            return np.empty(*args, **kwargs)

    monkeypatch.setattr(device, "xp", Full())
    walked = len(walks)
    assert_close(program(x, W), reference(layers, x, W))  # walked, with the memory let go
    assert failures and len(walks) == walked + 1
    assert not program.executable._replays and not device.held.replays


# -- random training loops ---------------------------------------------------------------------


@settings(max_examples=max(settings().max_examples // 2, 8), deadline=None)
@given(training.loops())
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_random_training_loops_replay_what_the_reference_computes(backend, loop):
    """Training loops drawn at random run step by step on the GPU: the first call walked, the
    second captured, the rest replayed, each call's parameters the last call's results (in
    new places, or the same ones where donated), with the data on the host, on the device in
    one place or in new places. Every step's parameters, state and loss must be what the
    reference backend computes from the same values."""
    gpu = fg.devices(backend)[0]
    params, velocity, batches, targets = training.initial_state(loop)
    step = training.step(loop)
    jitted = fg.jit(step, donate_argnums=training.donated(loop))
    params, velocity = fg.device_put((tuple(params), tuple(velocity)), gpu)
    placed = {
        "host": lambda k: (batches[k], targets[k]),
        "device, one place": lambda k: one_place,
        "device, new places": lambda k: fg.device_put((batches[k], targets[k]), gpu),
    }[loop["data"]]
    one_place = fg.device_put((batches[0], targets[0]), gpu)
    for k in range(training.STEPS):
        x, target = placed(k)
        if loop["data"] == "device, one place":
            one_place[0]._value.storage[...] = gpu.runtime.upload(batches[k].reshape(-1))
            one_place[1]._value.storage[...] = gpu.runtime.upload(targets[k].reshape(-1))
        # (the step from where the last one left the GPU's state: errors do not compound)
        before = [np.asarray(v) for v in (*params, *velocity)]
        params, velocity, loss = jitted(params, velocity, x, target)
        with jit_backend("numpy"):
            expected = fg.jit(step)(
                tuple(before[: len(params)]), tuple(before[len(params) :]), batches[k], targets[k]
            )
        assert all(type(p._value) is DeviceValue for p in params)
        state = (tuple(before[: len(params)]), tuple(before[len(params) :]))
        want = fg.tree_util.tree_leaves(expected)
        training.assert_step_close(
            loop, [*params, *velocity, loss], want, state, batches[k], targets[k]
        )
