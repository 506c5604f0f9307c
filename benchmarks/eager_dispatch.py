"""Eager dispatch: microseconds per small-array op, funcgrad beside NumPy (and peers if present).

    python benchmarks/eager_dispatch.py

Each op is timed in rounds that alternate between the frameworks, and the table reports the
median of the per-round timings, so that noise from a shared machine hits all columns alike.
"""

from __future__ import annotations

import statistics
import timeit

import numpy as np

import funcgrad.numpy as fnp

ROUNDS = 15
CALLS = 2000


def _peers():
    peers = {}
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_platforms", "cpu")
        peers["jax"] = jnp
    except ImportError:
        pass
    try:
        import torch

        peers["torch"] = torch
    except ImportError:
        pass
    return peers


def cases(xp, make):
    x = make(np.linspace(-1.0, 1.0, 16, dtype=np.float32))
    y = make(np.linspace(2.0, 3.0, 16, dtype=np.float32))
    m = make(np.ones((16, 16), np.float32))
    return {
        "x + y": lambda: x + y,
        "x * 2.0": lambda: x * 2.0,
        "add(x, y)": lambda: xp.add(x, y),
        "sin(x)": lambda: xp.sin(x),
        "exp(x) / y": lambda: xp.exp(x) / y,
        "x > 0": lambda: x > 0,
        "sum(x)": lambda: xp.sum(x),
        "m @ m": lambda: m @ m,
        "x[3]": lambda: x[3],
        "reshape": lambda: xp.reshape(m, (256,)),
    }


def main() -> None:
    frameworks = {"numpy": (np, np.asarray), "funcgrad": (fnp, fnp.asarray)}
    for name, xp in _peers().items():
        make = xp.asarray if name == "jax" else (lambda a, xp=xp: xp.from_numpy(a.copy()))
        frameworks[name] = (xp, make)
    suites = {name: cases(xp, make) for name, (xp, make) in frameworks.items()}
    timings = {name: {op: [] for op in suites["numpy"]} for name in frameworks}
    for _ in range(ROUNDS):
        for op in suites["numpy"]:
            for name, suite in suites.items():
                seconds = timeit.timeit(suite[op], number=CALLS)
                timings[name][op].append(seconds / CALLS * 1e6)
    names = list(frameworks)
    header = f"{'op':<12}" + "".join(f"{n + ' us':>14}" for n in names) + f"{'fg/np':>8}"
    if "jax" in names:
        header += f"{'fg/jax':>8}"
    print(header)
    print("-" * len(header))
    for op in suites["numpy"]:
        medians = {n: statistics.median(timings[n][op]) for n in names}
        row = f"{op:<12}" + "".join(f"{medians[n]:>14.2f}" for n in names)
        row += f"{medians['funcgrad'] / medians['numpy']:>8.1f}"
        if "jax" in names:
            row += f"{medians['funcgrad'] / medians['jax']:>8.2f}"
        print(row)


if __name__ == "__main__":
    main()
