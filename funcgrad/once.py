"""Values made once per process for each argument tuple, whichever threads ask first."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def once(function: Callable[..., T]) -> Callable[..., T]:
    """`function` cached by its (hashable, positional) arguments, its first call for some
    arguments made by one thread while the others asking for them wait. Values with an
    identity (a thread pool's compiled code, a device's runtime, a lock) must be one object:
    under `functools.cache` threads that miss at once each make their own, the cache keeps
    one and the others are dropped (a dropped thread pool freed code that programs linked
    to it went on calling)."""
    made: dict = {}
    lock = threading.RLock()  # (a value made from another made value of the same function)

    @functools.wraps(function)
    def cached(*args):
        try:
            return made[args]
        except KeyError:
            with lock:
                if args not in made:
                    made[args] = function(*args)
                return made[args]

    return cached
