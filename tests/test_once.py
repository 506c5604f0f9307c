"""`funcgrad.once`: a value made once for each argument tuple, whatever threads ask at once."""

from __future__ import annotations

import threading

import pytest

from funcgrad.once import once


def _made_by_threads_at_once(cache) -> tuple[list, list]:
    """Eight threads asking at the same moment for the value of one slow-to-make function:
    (the arguments it was made for, each call, and what each thread got)."""
    made, got = [], []
    start = threading.Barrier(8)

    @cache
    def value(key):
        made.append(key)
        for _ in range(3_000_000):  # (Python's own steps: the other threads ask meanwhile)
            pass
        return object()

    def ask():
        start.wait()
        got.append(value("pool"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return made, got


def test_threads_asking_at_once_get_one_value_made_once():
    made, got = _made_by_threads_at_once(once)
    assert made == ["pool"]
    assert len(got) == 8 and all(value is got[0] for value in got)


def test_values_are_kept_per_arguments_and_errors_are_not():
    calls = []

    @once
    def square(x):
        calls.append(x)
        if x < 0:
            raise ValueError("negative")
        return x * x

    assert [square(3), square(3), square(4)] == [9, 9, 16]
    for _ in range(2):
        with pytest.raises(ValueError):
            square(-1)
    assert calls == [3, 4, -1, -1]
