"""Where a compiled program's GPU time goes: each kernel, GEMM and copy of one call, timed on
the device (`Compiled.profile`), for the GPU benchmark's programs.

    python benchmarks/gpu_profile.py             # every program
    python benchmarks/gpu_profile.py mlp conv    # the programs whose names contain these words
    FUNCGRAD_JIT_BACKEND=cuda_emulator python benchmarks/gpu_profile.py   # no GPU, small sizes

Each table lists what ran (kernels by the names `as_text` gives them), how often, its
microseconds in all and its share of the timed total; the kernels' fused primitives are in
the program's fusion plan, printed above the table. On the emulator the times are the host's.
On a GPU each span also holds the host's time to make its call (the device waits for it):
a small GEMM, cuBLAS called from Python, reads tens of microseconds above its share of a
replayed graph.
"""

from __future__ import annotations

import os
import sys

import numpy as np

# The programs themselves are the CPU benchmark's (benchmarks/ is this script's folder).
from compiler import (
    _conv,
    _conv_inputs,
    _conv_step,
    _layernorm,
    _mlp_inputs,
    _mlp_step,
    _softmax,
)

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax

# The GPU benchmark's sizes; the emulator (threads of the host) runs smaller ones.
EMULATED = os.environ.get("FUNCGRAD_JIT_BACKEND") == "cuda_emulator"
ROWS, BATCH = (64, 8) if EMULATED else (32768, 256)


def _rows(shape: tuple) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def _mlp():
    return _mlp_step(fnp, fg.grad), _mlp_inputs()


def _conv_training():
    params, x, y = _conv_inputs(BATCH)
    return _conv_step(fnp, _conv(lax), fg.grad), (params, x, y)


PROGRAMS = {
    f"softmax {ROWS}x4096": lambda: (_softmax(fnp), (_rows((ROWS, 4096)),)),
    f"layernorm {ROWS}x4096": lambda: (_layernorm(fnp), (_rows((ROWS, 4096)),)),
    "mlp 784-1024-1024-10 step": _mlp,
    f"conv step, batch {BATCH}": _conv_training,
}


def profile(name: str) -> None:
    fun, args = PROGRAMS[name]()
    compiled = fg.jit(fun).lower(*args).compile()
    compiled(*args)  # (a first call: whatever loads lazily has loaded)
    rows = compiled.profile(*args)
    total = sum(seconds for _, _, seconds in rows)
    print(f"## {name}\n\n{compiled.fusion_plan()}\n")
    print(f"| {'what ran':<40} | calls | {'µs':>10} | share |")
    print(f"|{'-' * 42}|-------|{'-' * 12}|-------|")
    for what, calls, seconds in rows:
        share = seconds / total if total else 0.0
        print(f"| {what:<40} | {calls:>5} | {seconds * 1e6:>10.1f} | {share:>5.0%} |")
    print(f"| {'total':<40} |       | {total * 1e6:>10.1f} |       |\n")


def main(words: list[str]) -> None:
    if "FUNCGRAD_JIT_BACKEND" not in os.environ:
        fg.config.update("jit_backend", "cuda")
    for name in PROGRAMS:
        if not words or any(word in name for word in words):
            profile(name)


if __name__ == "__main__":
    main(sys.argv[1:])
