"""Set operations on n random integers: seconds per call, funcgrad beside NumPy.

    python benchmarks/set_ops.py

funcgrad's set operations sort (as NumPy's do), so both columns should grow as n log n; the
ratio column shows what funcgrad's eager dispatch and padded results cost on top. Each case is
timed in rounds that alternate between the two, and the table reports the medians.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import funcgrad.numpy as fnp

ROUNDS = 5
SIZES = (10_000, 50_000, 200_000)
OPERATIONS = ("intersect1d", "union1d", "setdiff1d", "setxor1d", "isin")


def _seconds(fn, a, b) -> float:
    start = time.perf_counter()
    np.asarray(fn(a, b))
    return time.perf_counter() - start


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'operation':<12} {'n':>8} {'numpy s':>10} {'funcgrad s':>11} {'ratio':>7}")
    for n in SIZES:
        a = rng.integers(0, n, n).astype(np.int32)
        b = rng.integers(0, n, n).astype(np.int32)
        for name in OPERATIONS:
            timings = {"numpy": [], "funcgrad": []}
            for _ in range(ROUNDS):
                timings["numpy"].append(_seconds(getattr(np, name), a, b))
                timings["funcgrad"].append(_seconds(getattr(fnp, name), a, b))
            reference = statistics.median(timings["numpy"])
            ours = statistics.median(timings["funcgrad"])
            print(f"{name:<12} {n:>8} {reference:>10.4f} {ours:>11.4f} {ours / reference:>7.1f}")


if __name__ == "__main__":
    main()
