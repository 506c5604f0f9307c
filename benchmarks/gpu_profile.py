"""Where a compiled program's GPU time goes: each kernel, GEMM and copy of one call, timed on
the device (`Compiled.profile`), for the GPU benchmark's programs and the example
character transformer's training step.

    python benchmarks/gpu_profile.py             # every program
    python benchmarks/gpu_profile.py mlp conv    # the programs whose names contain these words
    FUNCGRAD_JIT_BACKEND=cuda_emulator python benchmarks/gpu_profile.py   # no GPU, small sizes

Each table lists what ran (kernels by the names `as_text` gives them), how often, its
microseconds in all and its share of the timed total; the kernels' fused primitives are in
the program's fusion plan, printed above the table. A GPU is kept busy before each span
while the host makes the call, so that spans are the device's time alone; on the emulator
the times are the host's.

Below each table, a jitted call of the program on arguments on the device (replayed as a
CUDA graph from its second call) three ways: calls back to back, as `benchmarks/gpu.py`
times them; the host's time to make one; and the device's time to run what one enqueues.
A call back to back takes about the larger of the other two: which one it is says whether
the host's work or the device's bounds the program.
"""

from __future__ import annotations

import os
import sys
import time

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
from funcgrad.backends.cuda import executable

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


def _transformer():
    """The character transformer's training step (examples/char_transformer.py: embeddings,
    attention, layer norms, AdamW) on 32 windows of 64 characters, as the example trains."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import char_transformer as example

    from funcgrad import optim

    text = example.TEXT.read_text()
    alphabet = sorted(set(text))
    ids = np.array([alphabet.index(c) for c in text], np.int32)
    model = example.Transformer(len(alphabet), 64, 64, 2, heads=4, key=fg.random.PRNGKey(0))
    schedule = optim.warmup_cosine_decay_schedule(0.0, 3e-3, 50, 600)
    optimizer = optim.adamw(schedule, weight_decay=1e-2)

    def step(model, state, windows):
        loss, grads = fg.value_and_grad(example.loss_fn)(model, windows)
        updates, state = optimizer.update(grads, state, model)
        return optim.apply_updates(model, updates), state, loss

    starts = np.random.default_rng(0).integers(0, len(ids) - 65, 32)
    windows = ids[starts[:, None] + np.arange(65)]
    return step, (model, optimizer.init(model), windows)


def _small_layers():
    """The GPU benchmark's eight small layers (a GEMM and a fused kernel each): a program
    whose time is its launches."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)

    def layers(x, w):
        for _ in range(8):
            x = fnp.tanh(x @ w)
            x = x - x.mean(axis=1, keepdims=True)
        return x

    return layers, (x, w)


PROGRAMS = {
    f"softmax {ROWS}x4096": lambda: (_softmax(fnp), (_rows((ROWS, 4096)),)),
    f"layernorm {ROWS}x4096": lambda: (_layernorm(fnp), (_rows((ROWS, 4096)),)),
    "mlp 784-1024-1024-10 step": _mlp,
    f"conv step, batch {BATCH}": _conv_training,
    "transformer step (char_transformer, batch 32x64)": _transformer,
    "8 small layers": _small_layers,
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
    back_to_back, host, device = call_times(fun, args)
    print(
        f"a call: {back_to_back * 1e6:.1f} µs back to back, {host * 1e6:.1f} µs of the host's, "
        f"{device * 1e6:.1f} µs of the device's\n"
    )


CALLS = 20


def call_times(fun, args) -> tuple[float, float, float]:
    """Seconds per jitted call on arguments on the device: made back to back (the last
    waited for), made while the device is kept busy (the host's time alone: no call waits
    for the device), and the device's time to run those calls' work once it is free."""
    platform = "cuda_emulator" if EMULATED else "gpu"
    jitted, placed = fg.jit(fun), fg.device_put(args, fg.devices(platform)[0])
    device = executable.emulator() if EMULATED else executable.gpu()
    for _ in range(3):  # (compiled at the first, captured as a graph at the second)
        jitted(*placed)
    device.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        jitted(*placed)
    device.synchronize()
    back_to_back = (time.perf_counter() - start) / CALLS
    device.occupy(2 * CALLS * back_to_back + 0.01)  # (longer than the host takes to make them)
    first = device.clock()
    start = time.perf_counter()
    for _ in range(CALLS):
        jitted(*placed)
    host = (time.perf_counter() - start) / CALLS
    last = device.clock()
    device.synchronize()
    return back_to_back, host, device.seconds_between(first, last) / CALLS


def main(words: list[str]) -> None:
    if "FUNCGRAD_JIT_BACKEND" not in os.environ:
        fg.config.update("jit_backend", "cuda")
    for name in PROGRAMS:
        if not words or any(word in name for word in words):
            profile(name)


if __name__ == "__main__":
    main(sys.argv[1:])
