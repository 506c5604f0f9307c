"""funcgrad.profiler: Chrome traces of jit's tracing, compiling and running and of the user's
annotations, and pprof snapshots of the live arrays (decoded here by a reader of protocol
buffers written from the wire format's definition)."""

import glob
import gzip
import json
import os
import threading

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import trace_events


def _events(log_dir) -> list[dict]:
    (path,) = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.trace.json.gz"))
    with gzip.open(path) as file:
        return json.load(file)["traceEvents"]


def _spans(events, name) -> list[dict]:
    return [e for e in events if e["ph"] == "X" and e["name"] == name]


def _inside(inner: dict, outer: dict) -> bool:
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def scaled_sine(x):
    return fnp.sin(x) * 2.0


def total_square(x):
    return (x * x).sum()


def test_a_trace_holds_jit_trace_compile_and_each_call(tmp_path):
    f = fg.jit(scaled_sine)
    x = fnp.arange(5.0)
    with fg.profiler.trace(tmp_path):
        with fg.profiler.TraceAnnotation("outer", note="three calls"):
            for _ in range(3):
                out = f(x)
    np.testing.assert_allclose(out, np.sin(np.arange(5.0)) * 2, rtol=1e-6)
    events = _events(tmp_path)
    (outer,) = _spans(events, "outer")
    assert outer["args"] == {"note": "three calls"}
    (traced,) = _spans(events, "jit(scaled_sine): trace")
    compiles = [e for e in events if e["ph"] == "X" and e["name"].startswith("compile (")]
    calls = _spans(events, "jit(scaled_sine)")
    assert len(calls) == 3 and len(compiles) == 1
    for span in [traced, *compiles, *calls]:
        assert _inside(span, outer) and span["tid"] == outer["tid"]
    assert traced["ts"] + traced["dur"] <= compiles[0]["ts"] <= calls[0]["ts"]


def test_calls_through_transformations_and_compiled_objects_are_spans(tmp_path):
    f = fg.jit(total_square)
    compiled = f.lower(fnp.ones(3)).compile()
    with fg.profiler.trace(tmp_path):
        fg.grad(f)(fnp.ones(3))
        compiled(fnp.ones(3))
    names = [e["name"] for e in _events(tmp_path) if e["ph"] == "X"]
    assert "jit(jvp(total_square))" in names and "jit(transpose(jvp(total_square)))" in names
    assert names.count("jit(total_square)") == 1  # the compiled object's call


def test_spans_name_their_threads(tmp_path):
    def work():
        with fg.profiler.TraceAnnotation("in the worker"):
            pass

    with fg.profiler.trace(tmp_path):
        worker = threading.Thread(target=work, name="worker-7")
        worker.start()
        worker.join()
    events = _events(tmp_path)
    (span,) = _spans(events, "in the worker")
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[span["tid"]] == "worker-7"


def test_annotated_functions_and_steps(tmp_path):
    @fg.profiler.annotate_function
    def add_one(x):
        return x + 1

    def double(x):
        return 2 * x

    named = fg.profiler.annotate_function(double, name="twice", kind="scale")
    with fg.profiler.trace(tmp_path):
        for step in range(2):
            with fg.profiler.StepTraceAnnotation("train", step_num=step):
                assert named(add_one(step)) == 2 * (step + 1)
    events = _events(tmp_path)
    assert [s["args"]["step_num"] for s in _spans(events, "train")] == [0, 1]
    assert len(_spans(events, "test_annotated_functions_and_steps.<locals>.add_one")) == 2
    assert [s["args"] for s in _spans(events, "twice")] == [{"kind": "scale"}] * 2
    assert named.__name__ == "double"


def test_one_profile_at_a_time_and_nothing_recorded_outside(tmp_path):
    with pytest.raises(RuntimeError, match="no profile was started"):
        fg.profiler.stop_trace()
    fg.profiler.start_trace(tmp_path / "a", create_perfetto_trace=True)
    try:
        with pytest.raises(RuntimeError, match="only one"):
            fg.profiler.start_trace(tmp_path / "b")
    finally:
        fg.profiler.stop_trace()
    (folder,) = glob.glob(str(tmp_path / "a" / "plugins" / "profile" / "*"))
    assert "perfetto_trace.json.gz" in os.listdir(folder)
    assert trace_events.recording is None
    with fg.profiler.TraceAnnotation("ignored"):
        fg.jit(lambda x: x + 1)(fnp.ones(2))
    assert trace_events.recording is None


def test_a_failing_block_still_writes_its_trace(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with fg.profiler.trace(tmp_path):
            with fg.profiler.TraceAnnotation("doomed"):
                raise ZeroDivisionError
    assert len(_spans(_events(tmp_path), "doomed")) == 1
    assert trace_events.recording is None


# -- pprof --------------------------------------------------------------------------------------


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a message: varints as ints, length-delimited as bytes."""
    out, at = [], 0
    while at < len(data):
        key, at = _read_varint(data, at)
        if key & 7 == 0:
            value, at = _read_varint(data, at)
        else:
            assert key & 7 == 2
            size, at = _read_varint(data, at)
            value, at = data[at : at + size], at + size
        out.append((key >> 3, value))
    return out


def _varints(data: bytes) -> list[int]:
    values, at = [], 0
    while at < len(data):
        value, at = _read_varint(data, at)
        values.append(value)
    return values


def _memory_samples(profile: bytes) -> dict[str, tuple[list[int], dict]]:
    """Each sample's frame name, its values and its labels, read through the profile's
    locations, functions and string table."""
    fields = _fields(gzip.decompress(profile))
    strings = [v.decode() for n, v in fields if n == 6]
    assert strings[0] == ""
    functions = {}
    for n, v in fields:
        if n == 5:
            f = dict(_fields(v))
            functions[f[1]] = strings[f[2]]
    locations = {}
    for n, v in fields:
        if n == 4:
            loc = _fields(v)
            line = dict(_fields(dict(loc)[4]))
            locations[dict(loc)[1]] = functions[line[1]]
    types = [
        tuple(strings[i] for i in (d[1], d[2]))
        for d in (dict(_fields(v)) for n, v in fields if n == 1)
    ]
    assert types == [("allocations", "count"), ("space", "bytes")]
    samples = {}
    for n, v in fields:
        if n == 2:
            sample = _fields(v)
            (location,) = _varints(dict(sample)[1])
            labels = {
                strings[dict(_fields(l))[1]]: strings[dict(_fields(l))[2]]
                for k, l in sample
                if k == 3
            }
            samples[locations[location]] = (_varints(dict(sample)[2]), labels)
    return samples


def test_the_memory_profile_counts_the_live_arrays():
    kept = [fnp.ones((123, 7)), fnp.zeros((123, 7)), fnp.ones(31, "int8")]
    samples = _memory_samples(fg.profiler.device_memory_profile())
    assert samples["float32[123,7] on cpu:0"] == (
        [2, 2 * 123 * 7 * 4],
        {"device": "cpu:0", "dtype": "float32", "shape": "(123, 7)"},
    )
    assert samples["int8[31] on cpu:0"][0] == [1, 31]
    assert not any(
        name.endswith("gpu:0") for name in _memory_samples(fg.profiler.device_memory_profile("cpu"))
    )
    assert _memory_samples(fg.profiler.device_memory_profile("gpu")) == {}
    del kept


def test_a_saved_memory_profile_is_the_profile(tmp_path):
    kept = fnp.ones((17, 3))
    fg.profiler.save_device_memory_profile(tmp_path / "memory.prof")
    samples = _memory_samples((tmp_path / "memory.prof").read_bytes())
    assert samples["float32[17,3] on cpu:0"][0] == [1, 17 * 3 * 4]
    del kept


def test_live_arrays_are_the_arrays_alive_and_not_deleted():
    a, b = fnp.ones(3), fnp.arange(4)
    b.delete()
    live = fg.live_arrays()
    assert any(x is a for x in live) and not any(x is b for x in live)
    assert any(x is a for x in fg.live_arrays("cpu"))
    assert not any(x is a for x in fg.live_arrays("gpu"))
