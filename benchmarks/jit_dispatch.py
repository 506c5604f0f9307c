"""jit dispatch: microseconds per call of a tiny jitted function whose program is cached,
funcgrad beside JAX (when installed).

    python benchmarks/jit_dispatch.py

This measures the fixed cost of calling a compiled function (signature lookup, argument
handling, running the program), not compute: the arrays are small. Each case is timed in
rounds alternating between the frameworks; the table reports the median over rounds.
"""

from __future__ import annotations

import statistics
import timeit

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp

ROUNDS = 15
CALLS = 2000


def cases(jit, xp, make, block) -> dict:
    x = make(np.linspace(-1.0, 1.0, 16, dtype=np.float32))
    y = make(np.linspace(2.0, 3.0, 16, dtype=np.float32))
    params = {"w": make(np.ones((16, 16), np.float32)), "b": make(np.zeros(16, np.float32))}
    identity = jit(lambda a: a)
    affine = jit(lambda a, b: a * 2.0 + b)
    chain = jit(lambda a: xp.tanh(xp.sin(a) * xp.cos(a) + 1.0).sum())
    layer = jit(lambda p, a: xp.tanh(p["w"] @ a + p["b"]))
    scaled = jit(lambda a, n: a * n, static_argnums=1)
    return {
        "identity(x)": lambda: block(identity(x)),
        "x * 2 + y": lambda: block(affine(x, y)),
        "4 ops + sum": lambda: block(chain(x)),
        "pytree layer": lambda: block(layer(params, x)),
        "static arg": lambda: block(scaled(x, 3)),
    }


def _frameworks() -> dict:
    frameworks = {"funcgrad": cases(fg.jit, fnp, fnp.asarray, lambda out: out)}
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_platforms", "cpu")
        frameworks["jax"] = cases(jax.jit, jnp, jnp.asarray, jax.block_until_ready)
    except ImportError:
        pass
    return frameworks


def main() -> None:
    frameworks = _frameworks()
    ops = list(frameworks["funcgrad"])
    for suite in frameworks.values():  # compile every case before timing
        for run in suite.values():
            run()
    timings = {name: {op: [] for op in ops} for name in frameworks}
    for _ in range(ROUNDS):
        for op in ops:
            for name, suite in frameworks.items():
                seconds = timeit.timeit(suite[op], number=CALLS)
                timings[name][op].append(seconds / CALLS * 1e6)
    names = list(frameworks)
    header = f"{'case':<14}" + "".join(f"{n + ' us':>14}" for n in names)
    if "jax" in names:
        header += f"{'fg/jax':>8}"
    print(header)
    print("-" * len(header))
    for op in ops:
        medians = {n: statistics.median(timings[n][op]) for n in names}
        row = f"{op:<14}" + "".join(f"{medians[n]:>14.2f}" for n in names)
        if "jax" in names:
            row += f"{medians['funcgrad'] / medians['jax']:>8.2f}"
        print(row)


if __name__ == "__main__":
    main()
