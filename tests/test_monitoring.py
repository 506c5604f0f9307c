"""fg.monitoring: listeners get the events and durations funcgrad reports, and what the user
records."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
from funcgrad import monitoring


@pytest.fixture(autouse=True)
def no_listeners_after():
    yield
    monitoring.clear_event_listeners()


def test_jit_reports_trace_and_compile_durations_and_cache_lookups(tmp_path):
    durations, events = [], []
    monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kwargs: durations.append((event, duration, kwargs))
    )
    monitoring.register_event_listener(lambda event, **kwargs: events.append((event, kwargs)))
    previous = fg.config.compilation_cache_dir
    fg.config.update("compilation_cache_dir", str(tmp_path))
    try:

        def scaled(x):
            return x * 3.0 + 1.0

        fg.jit(scaled)(np.ones(4, np.float32))
        fg.jit(scaled)(np.ones(4, np.float32))  # another jit: traced again, found on disk
    finally:
        fg.config.update("compilation_cache_dir", previous)
    names = [event for event, _, _ in durations]
    assert names.count("/funcgrad/jit/trace_duration") == 2
    assert names.count("/funcgrad/jit/compile_duration") == 2
    traced = [kw for event, _, kw in durations if event == "/funcgrad/jit/trace_duration"]
    assert traced[0] == {
        "fun": "test_jit_reports_trace_and_compile_durations_and_cache_lookups.<locals>.scaled"
    }
    assert all(duration >= 0 for _, duration, _ in durations)
    compiled = [kw for event, _, kw in durations if event == "/funcgrad/jit/compile_duration"]
    assert compiled[0]["backend"] == fg.config.jit_backend
    if fg.config.jit_backend == "llvm":
        lookups = [event for event, _ in events]
        assert "/funcgrad/compilation_cache/cache_misses" in lookups[: len(lookups) // 2 + 1]
        assert lookups[-1] == "/funcgrad/compilation_cache/cache_hits"


def test_records_reach_their_listeners_until_unregistered():
    seen = []

    def on_event(event, **kwargs):
        seen.append(("event", event, kwargs))

    def on_scalar(event, value, **kwargs):
        seen.append(("scalar", event, value))

    def on_span(event, start, end, **kwargs):
        seen.append(("span", event, end - start))

    assert not monitoring.listening
    monitoring.register_event_listener(on_event)
    monitoring.register_scalar_listener(on_scalar)
    monitoring.register_event_time_span_listener(on_span)
    assert monitoring.listening
    monitoring.record_event("/mine/started", step=3)
    monitoring.record_scalar("/mine/loss", 0.25)
    monitoring.record_event_time_span("/mine/epoch", 10.0, 12.5)
    assert seen == [
        ("event", "/mine/started", {"step": 3}),
        ("scalar", "/mine/loss", 0.25),
        ("span", "/mine/epoch", 2.5),
    ]
    monitoring.unregister_event_listener(on_event)
    monitoring.record_event("/mine/ignored")
    assert len(seen) == 3
    with pytest.raises(ValueError, match="not a registered event listener"):
        monitoring.unregister_event_listener(on_event)
    with pytest.raises(TypeError, match="must be callable"):
        monitoring.register_event_listener("print")
    monitoring.clear_event_listeners()
    assert not monitoring.listening
