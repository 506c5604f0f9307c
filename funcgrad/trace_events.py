"""Spans of time recorded while a profile is taken (`funcgrad.profiler` starts and stops the
recording). It sits at the bottom of the layers so that jit can report its tracing, compiling
and running without importing the profiler. While no profile is taken `recording` is None and
`span` hands back one shared empty context; jit's eager calls are timed only through the
listeners told when a recording starts and stops, so dispatch pays nothing otherwise.

Spans are Chrome trace events ("X", complete events in microseconds), the format Perfetto and
chrome://tracing read."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator


class Recording:
    """The spans of one profile, with the clock's value when it started."""

    def __init__(self):
        self.origin_ns = time.perf_counter_ns()
        self.started_at = time.time()
        self.events: list[dict] = []
        self.threads: dict[int, str] = {}

    def add(self, name: str, start_ns: int, end_ns: int, args: dict | None = None) -> None:
        thread = threading.current_thread()
        self.threads.setdefault(thread.ident, thread.name)
        event = {
            "ph": "X",
            "name": name,
            "pid": os.getpid(),
            "tid": thread.ident,
            "ts": (start_ns - self.origin_ns) / 1e3,
            "dur": (end_ns - start_ns) / 1e3,
        }
        if args:
            event["args"] = {key: _shown(value) for key, value in args.items()}
        self.events.append(event)  # (one append: atomic between threads)

    def trace_events(self) -> dict:
        """The recording as a Chrome trace: its spans in order of start, after metadata
        naming the process and each thread that recorded one."""
        pid = os.getpid()
        names = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "funcgrad"}}]
        names += [
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
            for tid, name in self.threads.items()
        ]
        spans = sorted(self.events, key=lambda e: (e["ts"], -e["dur"]))
        return {"displayTimeUnit": "ns", "traceEvents": names + spans}


def _shown(value):
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


recording: Recording | None = None
# Called with True when a recording starts and False when it stops.
listeners: list[Callable[[bool], None]] = []
_switch = threading.Lock()


def start() -> Recording:
    global recording
    with _switch:
        if recording is not None:
            raise RuntimeError(
                "a profile is already being taken; only one may run at a time (stop_trace ends it)"
            )
        recording = Recording()
    for listener in listeners:
        listener(True)
    return recording


def stop() -> Recording:
    global recording
    with _switch:
        if recording is None:
            raise RuntimeError("no profile was started (start_trace or trace start one)")
        finished, recording = recording, None
    for listener in listeners:
        listener(False)
    return finished


_NOTHING = contextlib.nullcontext()


def span(name: str, **args) -> contextlib.AbstractContextManager:
    """A span named `name` (with `args` shown beside it) around the block, while a profile
    is taken; otherwise nothing."""
    if recording is None:
        return _NOTHING
    return _timed(recording, name, args)


@contextlib.contextmanager
def _timed(into: Recording, name: str, args: dict) -> Iterator[None]:
    start_ns = time.perf_counter_ns()
    try:
        yield
    finally:
        into.add(name, start_ns, time.perf_counter_ns(), args)
