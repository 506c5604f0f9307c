"""The caches of traced and compiled programs, and `clear_caches`, which drops them.

A jitted or pmapped function keeps its programs by call signature; each program keeps what it
was compiled to (`ClosedJaxpr.compiled`) and the programs derived from it by transformations
(jvp, transpose, vmap, partial evaluation) are kept by `program_cache`; the GPU compiles
each eager operation once per signature. Dropping the
signature caches and the derived programs lets every compiled program go. The compilation
cache on disk is not touched: it is keyed by the program's text, so it is never stale.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

_holders: weakref.WeakSet = weakref.WeakSet()  # objects with a clear_cache() method
_clearers: list[Callable[[], None]] = []  # module-level caches' clear functions


def track(holder) -> None:
    """Register a function object (jit's, pmap's) whose `clear_cache()` drops its programs."""
    _holders.add(holder)


def program_cache(fun: Callable) -> Callable:
    """`functools.lru_cache` for functions deriving one program from another, cleared by
    `clear_caches`."""
    cached = functools.lru_cache(maxsize=1024)(fun)
    _clearers.append(cached.cache_clear)
    return cached


def on_clear(clear: Callable[[], None]) -> None:
    """Register the clear function of a module-level cache of programs (the GPU's eager
    operations)."""
    _clearers.append(clear)


def clear_caches() -> None:
    """Drop every traced and compiled program held in memory: the next call of a jitted or
    pmapped function traces and compiles it again (from the disk cache where one is on).

    Useful after changing something a function read at trace time without being told (a
    global, a closed-over object mutated in place), and to release the memory of programs no
    longer wanted.
    """
    for holder in list(_holders):
        holder.clear_cache()
    for clear in _clearers:
        clear()
