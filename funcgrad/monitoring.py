"""Events and durations funcgrad reports to listeners the user registers (to log compile
times to a dashboard, count cache hits, ...).

funcgrad reports:

- `/funcgrad/jit/trace_duration` (seconds; `fun`): a jitted function traced for a new
  signature;
- `/funcgrad/jit/compile_duration` (seconds; `fun`, `backend`): a program compiled;
- `/funcgrad/compilation_cache/cache_hits` and `.../cache_misses` (events; `kind`): the disk
  cache found, or did not find, a compiled program's parts.

Nothing is measured or built while no listener is registered (`listening` is false).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "clear_event_listeners",
    "record_event",
    "record_event_duration_secs",
    "record_event_time_span",
    "record_scalar",
    "register_event_duration_secs_listener",
    "register_event_listener",
    "register_event_time_span_listener",
    "register_scalar_listener",
    "unregister_event_duration_listener",
    "unregister_event_listener",
    "unregister_event_time_span_listener",
    "unregister_scalar_listener",
]

_event_listeners: list[Callable] = []
_duration_listeners: list[Callable] = []
_time_span_listeners: list[Callable] = []
_scalar_listeners: list[Callable] = []

# Whether any listener is registered: the places that report check it first.
listening = False


def _update() -> None:
    global listening
    listening = bool(
        _event_listeners or _duration_listeners or _time_span_listeners or _scalar_listeners
    )


def record_event(event: str, **kwargs: str | int) -> None:
    """Tell the event listeners `event` happened."""
    for listener in list(_event_listeners):
        listener(event, **kwargs)


def record_event_duration_secs(event: str, duration: float, **kwargs: str | int) -> None:
    """Tell the duration listeners `event` took `duration` seconds."""
    for listener in list(_duration_listeners):
        listener(event, duration, **kwargs)


def record_event_time_span(
    event: str, start_time: float, end_time: float, **kwargs: str | int
) -> None:
    """Tell the time-span listeners `event` ran from `start_time` to `end_time` (seconds)."""
    for listener in list(_time_span_listeners):
        listener(event, start_time, end_time, **kwargs)


def record_scalar(event: str, value: float | int, **kwargs: str | int) -> None:
    """Tell the scalar listeners the value `event` measured."""
    for listener in list(_scalar_listeners):
        listener(event, value, **kwargs)


def _register(listeners: list, callback: Callable) -> None:
    if not callable(callback):
        raise TypeError(f"a listener must be callable, got {callback!r}")
    listeners.append(callback)
    _update()


def _unregister(listeners: list, callback: Callable, kind: str) -> None:
    if callback not in listeners:
        raise ValueError(f"{callback!r} is not a registered {kind} listener")
    listeners.remove(callback)
    _update()


def register_event_listener(callback: Callable[..., None]) -> None:
    """`callback(event, **kwargs)` is called for each event."""
    _register(_event_listeners, callback)


def register_event_duration_secs_listener(callback: Callable[..., None]) -> None:
    """`callback(event, duration, **kwargs)` is called for each duration."""
    _register(_duration_listeners, callback)


def register_event_time_span_listener(callback: Callable[..., None]) -> None:
    """`callback(event, start_time, end_time, **kwargs)` is called for each time span."""
    _register(_time_span_listeners, callback)


def register_scalar_listener(callback: Callable[..., None]) -> None:
    """`callback(event, value, **kwargs)` is called for each scalar."""
    _register(_scalar_listeners, callback)


def unregister_event_listener(callback: Callable[..., None]) -> None:
    _unregister(_event_listeners, callback, "event")


def unregister_event_duration_listener(callback: Callable[..., None]) -> None:
    _unregister(_duration_listeners, callback, "duration")


def unregister_event_time_span_listener(callback: Callable[..., None]) -> None:
    _unregister(_time_span_listeners, callback, "time span")


def unregister_scalar_listener(callback: Callable[..., None]) -> None:
    _unregister(_scalar_listeners, callback, "scalar")


def clear_event_listeners() -> None:
    """Remove every listener of every kind."""
    for listeners in (
        _event_listeners,
        _duration_listeners,
        _time_span_listeners,
        _scalar_listeners,
    ):
        listeners.clear()
    _update()
