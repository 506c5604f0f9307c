"""Profiles of a run, under JAX's `jax.profiler` names.

`trace(log_dir)` (or `start_trace`/`stop_trace`) records spans of time: each jitted
function's tracing ("jit(f): trace"), its compilation ("compile (llvm)") and every call that
runs it ("jit(f)"), and the user's own `TraceAnnotation`/`StepTraceAnnotation` blocks and
`annotate_function` functions, on the threads that ran them. Stopping writes them as a Chrome
trace (gzipped JSON: open it in https://ui.perfetto.dev or chrome://tracing) to
`log_dir/plugins/profile/<date_time>/<host>.trace.json.gz`, where TensorBoard's profile plugin
looks for runs. The operations inside a compiled program are not spans of their own: the
program is one native call (`jit(f).lower(...).compile().profile(...)` times its kernels).

`device_memory_profile()` is a snapshot of the live arrays in pprof's format."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import socket
import time
from collections.abc import Callable, Iterator

from funcgrad import trace_events
from funcgrad.array import live_arrays

__all__ = [
    "StepTraceAnnotation",
    "TraceAnnotation",
    "annotate_function",
    "device_memory_profile",
    "save_device_memory_profile",
    "start_trace",
    "stop_trace",
    "trace",
]

_destination: dict = {}  # the running profile's log_dir and what to write there


def start_trace(
    log_dir: os.PathLike | str,
    create_perfetto_link: bool = False,
    create_perfetto_trace: bool = False,
    profiler_options: None = None,
) -> None:
    """Start recording spans, to be written under `log_dir` by `stop_trace`. Only one profile
    runs at a time. `create_perfetto_trace` also writes the trace as `perfetto_trace.json.gz`
    beside it, as JAX names it; `create_perfetto_link` logs the path to open in Perfetto's UI
    (funcgrad serves no link)."""
    if profiler_options is not None:
        raise ValueError("start_trace: funcgrad's profiler takes no profiler_options")
    trace_events.start()
    _destination.update(
        log_dir=os.fspath(log_dir), link=create_perfetto_link, perfetto=create_perfetto_trace
    )


def stop_trace() -> None:
    """Stop the profile `start_trace` started and write its trace (see the module)."""
    recording = trace_events.stop()
    run = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(recording.started_at))
    folder = os.path.join(_destination["log_dir"], "plugins", "profile", run)
    os.makedirs(folder, exist_ok=True)
    text = json.dumps(recording.trace_events()).encode()
    path = os.path.join(folder, f"{socket.gethostname()}.trace.json.gz")
    names = [path] + ([os.path.join(folder, "perfetto_trace.json.gz")] * _destination["perfetto"])
    for name in names:
        with gzip.open(name, "wb") as file:
            file.write(text)
    if _destination["link"]:
        import logging

        logging.getLogger("funcgrad").warning("open %s in https://ui.perfetto.dev", names[-1])
    _destination.clear()


@contextlib.contextmanager
def trace(
    log_dir: os.PathLike | str,
    create_perfetto_link: bool = False,
    create_perfetto_trace: bool = False,
    profiler_options: None = None,
) -> Iterator[None]:
    """Record a profile of the block into `log_dir` (see `start_trace`)."""
    start_trace(log_dir, create_perfetto_link, create_perfetto_trace, profiler_options)
    try:
        yield
    finally:
        stop_trace()


class TraceAnnotation:
    """A span named `name` around a `with` block in the profile being taken (keyword
    arguments are shown with it); nothing while none is."""

    def __init__(self, name: str, **kwargs):
        self.name = name
        self.kwargs = kwargs
        self._span = None

    def __enter__(self) -> TraceAnnotation:
        self._span = trace_events.span(self.name, **self.kwargs)
        self._span.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._span.__exit__(*exc)
        self._span = None


class StepTraceAnnotation(TraceAnnotation):
    """A TraceAnnotation for one step of a training loop: give its number as `step_num`
    (`StepTraceAnnotation("train", step_num=step)`); it is shown with the span."""


def annotate_function(func: Callable, name: str | None = None, **decorator_kwargs) -> Callable:
    """`func` with each call a span (named `name`, by default its qualified name) in the
    profile being taken. Usable as `@annotate_function` or
    `@functools.partial(annotate_function, name=...)`."""
    name = name or getattr(func, "__qualname__", None) or getattr(func, "__name__", "function")

    @functools.wraps(func)
    def annotated(*args, **kwargs):
        with trace_events.span(name, **decorator_kwargs):
            return func(*args, **kwargs)

    return annotated


# -- device memory ----------------------------------------------------------------------------


def device_memory_profile(backend: str | None = None) -> bytes:
    """A snapshot of the memory live funcgrad arrays hold, as a gzipped pprof profile
    (`pprof -top profile.prof`). funcgrad does not record where arrays were made, so each
    sample's one frame is the kind of array, "float32[1000,1000] on cpu:0"; its values are
    the number of such arrays ("allocations", "count") and their bytes ("space", "bytes"),
    and labels give the device, dtype and shape. `backend` ("cpu", "gpu", ...) keeps the
    arrays of that platform only."""
    groups: dict[tuple, list[int]] = {}
    for array in live_arrays(backend):
        device = array.device
        key = (f"{device.platform}:{device.id}", str(array.dtype), tuple(array.shape))
        counts = groups.setdefault(key, [0, 0])
        counts[0] += 1
        counts[1] += array.nbytes
    return gzip.compress(_pprof(groups))


def save_device_memory_profile(filename: os.PathLike | str, backend: str | None = None) -> None:
    """Write `device_memory_profile(backend)` to `filename`."""
    with open(filename, "wb") as file:
        file.write(device_memory_profile(backend))


def _pprof(groups: dict[tuple, list[int]]) -> bytes:
    """pprof's Profile message (profile.proto) for the groups of arrays: a function and a
    location per group, one sample each."""
    strings: dict[str, int] = {"": 0}

    def string(text: str) -> int:
        return strings.setdefault(text, len(strings))

    sample_types = [_message((1, string("allocations")), (2, string("count")))]
    sample_types.append(_message((1, string("space")), (2, string("bytes"))))
    samples, locations, functions = [], [], []
    for number, ((device, dtype, shape), (count, size)) in enumerate(groups.items(), 1):
        frame = f"{dtype}[{','.join(map(str, shape))}] on {device}"
        functions.append(_message((1, number), (2, string(frame)), (3, string(frame))))
        locations.append(_message((1, number), (4, _message((1, number)))))
        labels = [
            _message((1, string(key)), (2, string(value)))
            for key, value in (("device", device), ("dtype", dtype), ("shape", str(shape)))
        ]
        samples.append(
            _message((1, _packed([number])), (2, _packed([count, size])), *((3, l) for l in labels))
        )
    fields = [(1, t) for t in sample_types] + [(2, s) for s in samples]
    fields += [(4, loc) for loc in locations] + [(5, f) for f in functions]
    fields += [(6, text.encode()) for text in strings]
    return _message(*fields)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _packed(numbers: list[int]) -> bytes:
    """The payload of a packed repeated varint field."""
    return b"".join(_varint(n) for n in numbers)


def _message(*fields: tuple[int, int | bytes]) -> bytes:
    """A protocol buffer message of (field number, value) pairs: ints as varints, bytes
    (strings, packed numbers, embedded messages) length-delimited."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, int):
            out += _varint(number << 3) + _varint(value)
        else:
            out += _varint(number << 3 | 2) + _varint(len(value)) + value
    return bytes(out)
