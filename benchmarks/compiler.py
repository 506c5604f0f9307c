"""Compiled programs side by side: funcgrad's LLVM backend, its NumPy reference backend, plain
NumPy and, when installed, JAX's jit and PyTorch.

    python benchmarks/compiler.py            # every case
    python benchmarks/compiler.py gelu mlp   # the cases whose names contain these words

Each case runs its frameworks in alternating rounds (this machine is shared and noisy) and
reports medians; the ratio column is the framework's time over funcgrad-llvm's (above 1:
slower than funcgrad). Memory-bound cases also print GB/s and the fraction of this machine's
copy bandwidth, measured here with NumPy.

The GEMMs of NumPy and funcgrad are OpenBLAS's: a machine whose environment forces an older
kernel set (OPENBLAS_CORETYPE, printed in the header) halves them where the CPU has wider
vectors, while JAX's own GEMMs use them. To compare on the CPU's own kernels, unset it for this
command alone: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/compiler.py`.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax

ROUNDS = 7
# Seconds between one framework's timed calls and the next framework's. Thread pools keep their
# threads spinning after a job before they sleep (OpenBLAS's for 2^28 cycles, about 0.1 s): a
# framework timed in that window shares the cores with them (a 1024^3 product on two cores ran
# at half speed for its first 0.1 s after NumPy's), so each is given the cores it would have
# alone.
SETTLE = 0.2

# PyTorch's OpenMP workers spin for 300,000 iterations after each parallel region (several ms
# here) before they sleep, holding the second core while the next framework is timed (softmax
# measured 2.9 ms alone, 3.6-4.1 ms right after PyTorch's rounds). 10,000 still keeps them spinning
# through PyTorch's own back-to-back calls (its times do not change).
os.environ.setdefault("GOMP_SPINCOUNT", "10000")


def _timed(run, repeat: int, warm: bool = False) -> float:
    """Seconds per call of `run` (after one untimed call, when `warm`); a funcgrad run gets
    its backend for the whole batch of calls (switching the configuration at every call would
    be timed too, and JAX pays no such cost)."""
    backend = getattr(run, "backend", None)
    previous = fg.config.jit_backend
    if backend is not None:
        fg.config.update("jit_backend", backend)
    try:
        if warm:
            run()
        return _seconds_per_call(run, repeat)
    finally:
        fg.config.update("jit_backend", previous)


def _warm_timed(run, repeat: int) -> float:
    """`_timed` after an untimed call: on this VM a vCPU left idle by the previous framework's
    single-threaded rounds runs at a fraction of its speed for its first busy milliseconds,
    which would be charged to whichever multi-threaded framework comes next."""
    return _timed(run, repeat, warm=True)


def medians(runs: dict, repeat: int, timed, rounds: int, settle: float = SETTLE) -> dict:
    """Each framework's median seconds per call (`timed(run, repeat)`) over `rounds` rounds
    that alternate the frameworks, so the shared machine's slow spells fall on all alike.
    Each round starts one framework further on, so that none always runs after the same
    other; `settle` seconds pass after each framework's calls."""
    samples: dict = {label: [] for label in runs}
    labels = list(runs)
    for turn in range(rounds):
        for label in labels[turn % len(labels) :] + labels[: turn % len(labels)]:
            samples[label].append(timed(runs[label], repeat))
            time.sleep(settle)
    return {label: statistics.median(times) for label, times in samples.items()}


def _seconds_per_call(run, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        run()
    return (time.perf_counter() - start) / repeat


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_platforms", "cpu")
    return jax, jnp


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _funcgrad(backend: str, fun, *args):
    """A call of jit(fun) on funcgrad arrays (converted once, as the peers' inputs are)."""
    jitted = fg.jit(fun)
    args = fg.tree_util.tree_map(fnp.asarray, args)

    def run():
        return jitted(*args)

    run.backend = backend  # _timed selects it
    return run


def blas_kernels() -> str:
    """Which of OpenBLAS's kernel sets NumPy's library (and funcgrad's GEMMs) run, and whether
    the environment chose it: a forced older set halves GEMMs on some CPUs."""
    import ctypes

    from funcgrad.backends.llvm import blas

    corename = blas.library().scipy_openblas_get_corename64_
    corename.restype = ctypes.c_char_p
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return corename().decode() + (f" (OPENBLAS_CORETYPE={forced})" if forced else "")


def copy_bandwidth() -> float:
    """GB/s of a 64 MiB float32 copy (read + write), NumPy's memcpy."""
    a = np.ones(16 * 2**20, np.float32)
    b = np.empty_like(a)
    seconds = min(_timed(lambda: np.copyto(b, a), 5) for _ in range(5))
    return 2 * a.nbytes / seconds / 1e9


# -- cases: name -> (frameworks {label: run}, bytes moved or None, repeat) ----------------------


def gelu_case():
    x = np.random.default_rng(0).standard_normal(16 * 2**20).astype(np.float32)

    def gelu(xp):
        return lambda v: 0.5 * v * (1 + xp.tanh(0.7978845608 * (v + 0.044715 * v**3)))

    runs = {
        "funcgrad-llvm": _funcgrad("llvm", gelu(fnp), x),
        "funcgrad-numpy": _funcgrad("numpy", gelu(fnp), x),
        "numpy": lambda: gelu(np)(x),
    }
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(gelu(jax[1])), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj).block_until_ready()
    torch = _torch()
    if torch:
        xt = torch.from_numpy(x)
        runs["torch"] = lambda: gelu(torch)(xt)
    return runs, 2 * x.nbytes, 3


def library_gelu_case():
    """Each framework's own GELU (the tanh approximation), as a user calls it: funcgrad's
    nn.gelu, jax.nn.gelu, PyTorch's gelu; NumPy the formula."""
    x = np.random.default_rng(0).standard_normal(16 * 2**20).astype(np.float32)

    def formula(v):
        return 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v**3)))

    runs = {
        "funcgrad-llvm": _funcgrad("llvm", fg.nn.gelu, x),
        "funcgrad-numpy": _funcgrad("numpy", fg.nn.gelu, x),
        "numpy": lambda: formula(x),
    }
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(jax[0].nn.gelu), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj).block_until_ready()
    torch = _torch()
    if torch:
        xt = torch.from_numpy(x)
        runs["torch"] = lambda: torch.nn.functional.gelu(xt, approximate="tanh")
    return runs, 2 * x.nbytes, 3


def _softmax(xp):
    def softmax(v):
        e = xp.exp(v - v.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return softmax


def _layernorm(xp):
    def layernorm(v):
        mean = v.mean(axis=1, keepdims=True)
        centered = v - mean
        variance = (centered * centered).mean(axis=1, keepdims=True)
        return centered / xp.sqrt(variance + 1e-5)

    return layernorm


def _row_case(make, torch_op):
    x = np.random.default_rng(1).standard_normal((4096, 1024)).astype(np.float32)
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", make(fnp), x),
        "funcgrad-numpy": _funcgrad("numpy", make(fnp), x),
        "numpy": lambda: make(np)(x),
    }
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(make(jax[1])), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj).block_until_ready()
    torch = _torch()
    if torch:
        xt = torch.from_numpy(x)
        runs["torch"] = lambda: torch_op(torch, xt)
    return runs, 2 * x.nbytes, 5


def softmax_case():
    return _row_case(_softmax, lambda torch, x: torch.softmax(x, dim=1))


def layernorm_case():
    return _row_case(
        _layernorm, lambda torch, x: torch.nn.functional.layer_norm(x, (x.shape[1],), eps=1e-5)
    )


def _matmul_case(n: int):
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", lambda p, q: p @ q, a, b),
        "numpy": lambda: a @ b,
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(lambda p, q: p @ q)
        aj, bj = jax[1].asarray(a), jax[1].asarray(b)
        runs["jax-jit"] = lambda: f(aj, bj).block_until_ready()
    return runs, None, 3


def matmul_1024_case():
    return _matmul_case(1024)


def matmul_2048_case():
    return _matmul_case(2048)


def _fft_case(x, name: str, repeat: int):
    """The transform `name` of numpy.fft along x's last axis."""
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", getattr(fnp.fft, name), x),
        "numpy": lambda: getattr(np.fft, name)(x),
    }
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(getattr(jax[1].fft, name)), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj).block_until_ready()
    torch = _torch()
    if torch:
        xt = torch.from_numpy(x)
        runs["torch"] = lambda: getattr(torch.fft, name)(xt)
    return runs, 2 * x.nbytes, repeat  # read once, written once (rfft: about as many bytes)


def _complex_points(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)


def fft_1m_case():
    return _fft_case(_complex_points(2**20), "fft", 3)


def fft_64k_case():
    return _fft_case(_complex_points(2**16), "fft", 50)


def fft_prime_case():
    """A prime length: Bluestein's convolution through radix passes of 20160 points."""
    return _fft_case(_complex_points(10007), "fft", 50)


def rfft_rows_case():
    x = np.random.default_rng(8).standard_normal((256, 1024)).astype(np.float32)
    return _fft_case(x, "rfft", 50)


def _sorting_case(x, fun, numpy_fun, repeat: int):
    """`fun` of funcgrad.numpy and of jax.numpy (or lax), and NumPy's own."""
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", lambda v: fun(fnp, lax, v), x),
        "numpy": lambda: numpy_fun(x),
    }
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(lambda v: fun(jax[1], jax[0].lax, v)), jax[1].asarray(x)
        runs["jax-jit"] = lambda: jax[0].block_until_ready(f(xj))
    return runs, None, repeat


def sort_case():
    x = np.random.default_rng(9).standard_normal(1 << 20).astype(np.float32)
    return _sorting_case(x, lambda xp, lx, v: xp.sort(v), np.sort, 3)


def top_k_case():
    """The 64 largest of each row (NumPy: argpartition, then sorting those 64)."""
    x = np.random.default_rng(10).standard_normal((1024, 1024)).astype(np.float32)

    def numpy_top_k(v):
        part = np.take_along_axis(v, np.argpartition(-v, 64, axis=1)[:, :64], axis=1)
        return -np.sort(-part, axis=1)

    return _sorting_case(x, lambda xp, lx, v: lx.top_k(v, 64)[0], numpy_top_k, 3)


def _loop_case(body_of, repeat: int):
    """A loop over a 1024x1024 float32 carry updating one row an iteration: funcgrad's and
    JAX's jit of `body_of(numpy module, lax module)`."""
    x = np.random.default_rng(11).standard_normal((1024, 1024)).astype(np.float32)
    runs = {"funcgrad-llvm": _funcgrad("llvm", body_of(fnp, lax), x)}
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(body_of(jax[1], jax[0].lax)), jax[1].asarray(x)
        runs["jax-jit"] = lambda: jax[0].block_until_ready(f(xj))
    return runs, None, repeat


def row_updates_case():
    """x.at[i].set(2 x[i]) for each row i in a fori_loop: the carry updated in place."""

    def body_of(xp, lx):
        return lambda x: lx.fori_loop(0, 1024, lambda i, c: c.at[i].set(c[i] * 2.0), x)

    return _loop_case(body_of, 5)


def conditional_row_updates_case():
    """The same under a cond taking every other row."""

    def body_of(xp, lx):
        def step(i, c):
            return lx.cond(i % 2 == 0, lambda c: c.at[i].set(c[i] * 2.0), lambda c: c, c)

        return lambda x: lx.fori_loop(0, 1024, step, x)

    return _loop_case(body_of, 5)


def _mlp_params(rng, sizes):
    return [
        ((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
        for m, n in zip(sizes[:-1], sizes[1:])
    ]


def _mlp_inputs() -> tuple:
    """The MLP step's parameters (784-1024-1024-10) and a batch of 256 with one-hot labels."""
    rng = np.random.default_rng(3)
    params = _mlp_params(rng, [784, 1024, 1024, 10])
    x = rng.standard_normal((256, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)]
    return params, x, y


def _mlp_step(xp, grad):
    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = xp.tanh(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        logits = logits - logits.max(axis=1, keepdims=True)
        log_probs = logits - xp.log(xp.exp(logits).sum(axis=1, keepdims=True))
        return -(log_probs * y).sum() / x.shape[0]

    def step(params, x, y):
        grads = grad(loss)(params, x, y)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)]

    return step


def mlp_case():
    params, x, y = _mlp_inputs()
    step = _mlp_step(fnp, fg.grad)
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", step, params, x, y),
        "funcgrad-numpy": _funcgrad("numpy", step, params, x, y),
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(_mlp_step(jax[1], jax[0].grad))
        pj = [(jax[1].asarray(w), jax[1].asarray(b)) for w, b in params]
        runs["jax-jit"] = lambda: jax[0].block_until_ready(f(pj, x, y))
    return runs, None, 3


def mlp_loop_case():
    """The MLP step in a training loop with its parameters donated: each call updates the
    last call's parameters in place (the weights by their gradients' GEMMs themselves)."""
    params, x, y = _mlp_inputs()
    step = fg.jit(_mlp_step(fnp, fg.grad), donate_argnums=0)
    state = [fg.tree_util.tree_map(lambda a: fnp.asarray(a.copy()), params)]
    xf, yf = fnp.asarray(x), fnp.asarray(y)

    def loop():
        state[0] = step(state[0], xf, yf)
        return state[0]

    loop.backend = "llvm"
    runs = {"funcgrad-llvm": loop}
    jax = _jax()
    if jax:
        f = jax[0].jit(_mlp_step(jax[1], jax[0].grad), donate_argnums=0)
        held = [[(jax[1].asarray(w), jax[1].asarray(b)) for w, b in params]]

        def jax_loop():
            held[0] = jax[0].block_until_ready(f(held[0], x, y))
            return held[0]

        runs["jax-jit"] = jax_loop
    return runs, None, 3


def _rnn(xp, scan):
    def forward(w, xs):
        def cell(h, x):
            h = xp.tanh(h @ w + x)
            return h, h.sum()

        h, sums = scan(cell, xp.zeros(w.shape[0], np.float32), xs)
        return h.sum() + sums.sum()

    return forward


def _rnn_inputs():
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((32, 32)) / 6).astype(np.float32)
    xs = rng.standard_normal((1000, 32)).astype(np.float32)
    return w, xs


def rnn_forward_case():
    w, xs = _rnn_inputs()
    forward = _rnn(fnp, lax.scan)
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", forward, w, xs),
        "funcgrad-numpy": _funcgrad("numpy", forward, w, xs),
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(_rnn(jax[1], jax[0].lax.scan))
        runs["jax-jit"] = lambda: f(w, xs).block_until_ready()
    return runs, None, 5


def rnn_backward_case():
    w, xs = _rnn_inputs()
    backward = fg.grad(_rnn(fnp, lax.scan))
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", backward, w, xs),
        "funcgrad-numpy": _funcgrad("numpy", backward, w, xs),
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(jax[0].grad(_rnn(jax[1], jax[0].lax.scan)))
        runs["jax-jit"] = lambda: f(w, xs).block_until_ready()
    return runs, None, 5


def per_example_grads_case():
    rng = np.random.default_rng(5)
    params = _mlp_params(rng, [32, 64, 10])
    x = rng.standard_normal((256, 32)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)]

    def loss(params, x, y):
        (w1, b1), (w2, b2) = params
        logits = fnp.tanh(x @ w1 + b1) @ w2 + b2
        return ((logits - y) ** 2).sum()

    per_example = fg.vmap(fg.grad(loss), in_axes=(None, 0, 0))
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", per_example, params, x, y),
        "funcgrad-numpy": _funcgrad("numpy", per_example, params, x, y),
    }
    jax = _jax()
    if jax:
        jnp = jax[1]

        def jloss(params, x, y):
            (w1, b1), (w2, b2) = params
            logits = jnp.tanh(x @ w1 + b1) @ w2 + b2
            return ((logits - y) ** 2).sum()

        f = jax[0].jit(jax[0].vmap(jax[0].grad(jloss), in_axes=(None, 0, 0)))
        runs["jax-jit"] = lambda: jax[0].block_until_ready(f(params, x, y))
    return runs, None, 20


def jet_case():
    """Taylor mode: the first four derivatives of a two-layer tanh network along a path of
    its batch of inputs, in one jitted jet."""
    from funcgrad.experimental.jet import jet

    rng = np.random.default_rng(6)
    w1 = (rng.standard_normal((64, 128)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((128, 64)) / 8).astype(np.float32)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    terms = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]

    def taylor(xp, jet_fun):
        def net(x):
            return xp.tanh(xp.tanh(x @ w1) @ w2)

        return lambda x, *terms: jet_fun(net, (x,), (list(terms),))

    runs = {
        "funcgrad-llvm": _funcgrad("llvm", taylor(fnp, jet), x, *terms),
        "funcgrad-numpy": _funcgrad("numpy", taylor(fnp, jet), x, *terms),
    }
    jax = _jax()
    if jax:
        from jax.experimental.jet import jet as jax_jet

        f = jax[0].jit(taylor(jax[1], jax_jet))
        runs["jax-jit"] = lambda: jax[0].block_until_ready(f(x, *terms))
    return runs, None, 50


def call_overhead_case():
    x = np.ones(16, np.float32)
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", lambda a: a * 2.0 + 1.0, x),
        "funcgrad-numpy": _funcgrad("numpy", lambda a: a * 2.0 + 1.0, x),
    }
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(lambda a: a * 2.0 + 1.0), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj).block_until_ready()
    return runs, None, 2000


def _conv_step(xp, conv, grad):
    """Two 3x3 convolutions (NHWC; the second with stride 2) and a dense layer, softmax
    cross-entropy, one SGD step."""

    def loss(params, x, y):
        (k1, b1), (k2, b2), (w, b) = params
        h = xp.maximum(conv(x, k1, (1, 1)) + b1, 0.0)
        h = xp.maximum(conv(h, k2, (2, 2)) + b2, 0.0)
        logits = h.reshape(h.shape[0], -1) @ w + b
        logits = logits - logits.max(axis=1, keepdims=True)
        log_probs = logits - xp.log(xp.exp(logits).sum(axis=1, keepdims=True))
        return -(log_probs * y).sum() / x.shape[0]

    def step(params, x, y):
        grads = grad(loss)(params, x, y)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)]

    return step


def _conv(lax_module):
    def conv(x, kernel, strides):
        return lax_module.conv_general_dilated(
            x, kernel, strides, "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    return conv


def _conv_inputs(batch: int) -> tuple:
    """The conv step's parameters and a batch of 28x28 images with one-hot labels."""
    rng = np.random.default_rng(6)
    shapes = [((3, 3, 1, 16), 16), ((3, 3, 16, 32), 32), ((14 * 14 * 32, 10), 10)]
    params = [
        (
            (rng.standard_normal(k) / np.sqrt(np.prod(k[:-1]))).astype(np.float32),
            np.zeros(n, np.float32),
        )
        for k, n in shapes
    ]
    x = rng.standard_normal((batch, 28, 28, 1)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    return params, x, y


def _conv_3x3_case(layout: str):
    """One 3x3 convolution of 8 images of 56x56 with 32 features in and out, SAME padding."""
    rng = np.random.default_rng(7)
    names = {"NCHW": ("NCHW", "OIHW", "NCHW"), "NHWC": ("NHWC", "HWIO", "NHWC")}[layout]
    x_shape = (8, 32, 56, 56) if layout == "NCHW" else (8, 56, 56, 32)
    w_shape = (32, 32, 3, 3) if layout == "NCHW" else (3, 3, 32, 32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / 17).astype(np.float32)

    def conv(lax_module):
        return lambda x, w: lax_module.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=names
        )

    runs = {
        "funcgrad-llvm": _funcgrad("llvm", conv(lax), x, w),
        "funcgrad-numpy": _funcgrad("numpy", conv(lax), x, w),
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(conv(jax[0].lax))
        xj, wj = jax[1].asarray(x), jax[1].asarray(w)
        runs["jax-jit"] = lambda: jax[0].block_until_ready(f(xj, wj))
    return runs, None, 10


def conv_step_case():
    params, x, y = _conv_inputs(64)
    step = _conv_step(fnp, _conv(lax), fg.grad)
    runs = {
        "funcgrad-llvm": _funcgrad("llvm", step, params, x, y),
        "funcgrad-numpy": _funcgrad("numpy", step, params, x, y),
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(_conv_step(jax[1], _conv(jax[0].lax), jax[0].grad))
        pj = [(jax[1].asarray(w), jax[1].asarray(b)) for w, b in params]
        runs["jax-jit"] = lambda: jax[0].block_until_ready(f(pj, x, y))
    return runs, None, 3


# The transformer step's sizes: 32 windows of 64 tokens over a 65-letter alphabet, width 128,
# four heads, two pre-norm blocks.
_TOKENS, _CONTEXT, _WIDTH, _HEADS, _DEPTH, _BATCH_WINDOWS = 65, 64, 128, 4, 2, 32


def _transformer_inputs() -> tuple:
    """The transformer's parameters (a dict of arrays, as a researcher keeps them) and a batch
    of token windows one longer than the context (inputs and their next tokens)."""
    rng = np.random.default_rng(5)
    d = _WIDTH

    def dense(m, n):
        return (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32)

    def zeros(n):
        return np.zeros(n, np.float32)

    def ones(n):
        return np.ones(n, np.float32)

    blocks = [
        {"norm1": (ones(d), zeros(d)), "qkv": dense(d, 3 * d), "out": dense(d, d),
         "norm2": (ones(d), zeros(d)), "up": (dense(d, 4 * d), zeros(4 * d)),
         "down": (dense(4 * d, d), zeros(d))}
        for _ in range(_DEPTH)
    ]  # fmt: skip
    params = {
        "tokens": (0.02 * rng.standard_normal((_TOKENS, d))).astype(np.float32),
        "positions": (0.02 * rng.standard_normal((_CONTEXT, d))).astype(np.float32),
        "blocks": blocks,
        "norm": (ones(d), zeros(d)),
        "readout": dense(d, _TOKENS),
    }
    windows = rng.integers(0, _TOKENS, (_BATCH_WINDOWS, _CONTEXT + 1)).astype(np.int32)
    return params, windows


def _transformer_step(xp, grad, gelu, tree_map):
    """One SGD step of a decoder-only transformer written in plain array code (causal
    attention by a mask, layer norms, a GELU MLP, cross-entropy against the next tokens), the
    same lines for every framework."""
    batch, context, width, heads = _BATCH_WINDOWS, _CONTEXT, _WIDTH, _HEADS
    scale = 1.0 / float(np.sqrt(width // heads))  # a Python float: weakly typed everywhere

    def norm(x, scale_and_shift):
        gain, shift = scale_and_shift
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / xp.sqrt(variance + 1e-5) * gain + shift

    def attention(x, block):
        qkv = (norm(x, block["norm1"]) @ block["qkv"]).reshape(batch, context, 3, heads, -1)
        q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
        scores = q @ k.transpose(0, 1, 3, 2) * scale
        scores = xp.where(xp.tril(xp.ones((context, context), bool)), scores, -1e9)
        scores = xp.exp(scores - scores.max(-1, keepdims=True))
        weights = scores / scores.sum(-1, keepdims=True)
        mixed = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, context, width)
        return mixed @ block["out"]

    def mlp(x, block):
        (w1, b1), (w2, b2) = block["up"], block["down"]
        return gelu(norm(x, block["norm2"]) @ w1 + b1) @ w2 + b2

    def loss(params, windows):
        inputs, targets = windows[:, :-1], windows[:, 1:]
        h = params["tokens"][inputs] + params["positions"]
        for block in params["blocks"]:
            h = h + attention(h, block)
            h = h + mlp(h, block)
        logits = norm(h, params["norm"]) @ params["readout"]
        logits = logits - logits.max(-1, keepdims=True)
        log_probs = logits - xp.log(xp.exp(logits).sum(-1, keepdims=True))
        return -xp.take_along_axis(log_probs, targets[..., None], axis=-1).mean()

    def step(params, windows):
        grads = grad(loss)(params, windows)
        return tree_map(lambda p, g: p - 1e-3 * g, params, grads)

    return step


def transformer_case():
    params, windows = _transformer_inputs()
    step = _transformer_step(fnp, fg.grad, fg.nn.gelu, fg.tree_util.tree_map)
    runs = {"funcgrad-llvm": _funcgrad("llvm", step, params, windows)}
    jax = _jax()
    if jax:
        jax_, jnp = jax
        f = jax_.jit(_transformer_step(jnp, jax_.grad, jax_.nn.gelu, jax_.tree_util.tree_map))
        pj, wj = jax_.tree_util.tree_map(jnp.asarray, (params, windows))
        runs["jax-jit"] = lambda: jax_.block_until_ready(f(pj, wj))
    return runs, None, 3


def _ten_ops(xp):
    def f(a):
        for _ in range(5):
            a = xp.sin(a * 1.5 + 0.5)
        return a

    return f


def call_overhead_ten_ops_case():
    x = np.ones(16, np.float32)
    runs = {"funcgrad-llvm": _funcgrad("llvm", _ten_ops(fnp), x)}
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(_ten_ops(jax[1])), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj).block_until_ready()
    return runs, None, 2000


def _layer(xp):
    def layer(params, x):
        return xp.tanh(x @ params["w"] + params["b"]) * params["scale"] + params["shift"]

    return layer


def call_overhead_pytree_case():
    rng = np.random.default_rng(7)
    params = {
        "w": rng.standard_normal((8, 8)).astype(np.float32),
        "b": np.zeros(8, np.float32),
        "scale": np.ones(8, np.float32),
        "shift": np.zeros(8, np.float32),
    }
    x = np.ones((4, 8), np.float32)
    runs = {"funcgrad-llvm": _funcgrad("llvm", _layer(fnp), params, x)}
    jax = _jax()
    if jax:
        f = jax[0].jit(_layer(jax[1]))
        pj = jax[0].tree_util.tree_map(jax[1].asarray, params)
        xj = jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(pj, xj).block_until_ready()
    return runs, None, 2000


CASES = {
    "gelu 16M f32": gelu_case,
    "nn.gelu 16M f32": library_gelu_case,
    "softmax 4096x1024": softmax_case,
    "layernorm 4096x1024": layernorm_case,
    "matmul 1024^3": matmul_1024_case,
    "matmul 2048^3": matmul_2048_case,
    "mlp 784-1024-1024-10 step": mlp_case,
    "mlp step, donated loop": mlp_loop_case,
    "rnn scan 1000 fwd": rnn_forward_case,
    "rnn scan 1000 bwd": rnn_backward_case,
    "per-example grads": per_example_grads_case,
    "conv 3x3 8x32x56x56 NCHW": functools.partial(_conv_3x3_case, "NCHW"),
    "conv 3x3 8x56x56x32 NHWC": functools.partial(_conv_3x3_case, "NHWC"),
    "conv step (batch 64, 28x28)": conv_step_case,
    "transformer step 32x64x128": transformer_case,
    "jet order 4, tanh net": jet_case,
    "fft 2^20 complex64": fft_1m_case,
    "fft 2^16 complex64": fft_64k_case,
    "fft 10007 complex64": fft_prime_case,
    "rfft 256x1024 float32": rfft_rows_case,
    "sort 2^20 float32": sort_case,
    "top_k 64 of 1024x1024": top_k_case,
    "row updates in a fori_loop": row_updates_case,
    "row updates under a cond": conditional_row_updates_case,
    "jit call x*2+1": call_overhead_case,
    "jit call 10 ops": call_overhead_ten_ops_case,
    "jit call pytree layer": call_overhead_pytree_case,
}


_COMPILE_CHILD = """
import functools
import sys
import numpy as np
sys.path.insert(0, {here!r})
import compiler as bench
import funcgrad as fg
import funcgrad.numpy as fnp
fg.config.update("compilation_cache_dir", {cache!r})
params, x, y = bench._mlp_inputs()
run = bench._funcgrad("llvm", bench._mlp_step(fnp, fg.grad), params, x, y)
print(bench._timed(run, 1))
"""


def _mlp_compile_in_new_process(cache: str) -> float:
    """Seconds from first call to result of the MLP step in a fresh process using `cache`.
    The process may read and write Python's bytecode cache, as an installed package's (pip
    compiles it at install time): compiling funcgrad's sources is no part of compiling a
    program, and importing the compiler is, once per process."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    code = _COMPILE_CHILD.format(here=here, cache=cache)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    prime = (
        f"import sys; sys.path.insert(0, {here!r}); "
        "import compiler, funcgrad.backends.llvm.executable"
    )
    subprocess.run([sys.executable, "-c", prime], env=env, check=True)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.split()[-1])


def _long_program_compile() -> float:
    """Seconds to trace, compile and run a straight-line program of 5,000 elementwise ops."""

    def chain(a):
        for k in range(2500):
            a = a * 1.0001 + (k % 7) * 1e-4
        return a

    start = time.perf_counter()
    fg.block_until_ready(fg.jit(chain)(fnp.ones(1024, np.float32)))
    return time.perf_counter() - start


def compile_time() -> list[tuple[str, str, float]]:
    """(what, framework, seconds) from first call to result. The MLP step: in this process,
    which has run the cases above, with an empty disk cache (as JAX's is measured: its
    compiler is loaded, this program is new); in a new process, with an empty disk cache and
    then finding the first one's entries. And the 5,000-op program."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        rows.append(
            ("compile mlp step (new proc)", "funcgrad-llvm", _mlp_compile_in_new_process(cache))
        )
        rows.append(
            ("compile mlp step (disk cache)", "funcgrad-llvm", _mlp_compile_in_new_process(cache))
        )
    params, x, y = _mlp_inputs()
    with tempfile.TemporaryDirectory() as cache:
        previous = fg.config.compilation_cache_dir
        fg.config.update("compilation_cache_dir", cache)
        try:
            run = _funcgrad("llvm", _mlp_step(fnp, fg.grad), params, x, y)
            rows.append(("compile mlp step (in process)", "funcgrad-llvm", _timed(run, 1)))
            rows.append(("compile 5000-op program", "funcgrad-llvm", _long_program_compile()))
        finally:
            fg.config.update("compilation_cache_dir", previous)
    run = _funcgrad("numpy", _mlp_step(fnp, fg.grad), params, x, y)
    rows.append(("compile mlp step (in process)", "funcgrad-numpy", _timed(run, 1)))
    jax = _jax()
    if jax:
        f = jax[0].jit(_mlp_step(jax[1], jax[0].grad))
        seconds = _timed(lambda: jax[0].block_until_ready(f(params, x, y)), 1)
        rows.append(("compile mlp step (in process)", "jax-jit", seconds))

        def chain(a):
            for k in range(2500):
                a = a * 1.0001 + (k % 7) * 1e-4
            return a

        start = time.perf_counter()
        jax[0].jit(chain)(jax[1].ones(1024, np.float32)).block_until_ready()
        rows.append(("compile 5000-op program", "jax-jit", time.perf_counter() - start))
    return sorted(rows, key=lambda row: row[0])


def main(selected: list[str]) -> None:
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth (NumPy, 64 MiB): {bandwidth:.1f} GB/s")
    print(f"OpenBLAS kernels: {blas_kernels()}\n")
    header = (
        f"{'case':30} {'framework':16} {'median ms':>10} {'x vs llvm':>10} {'GB/s':>7} "
        f"{'of copy':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, make in CASES.items():
        if selected and not any(word in name for word in selected):
            continue
        runs, moved, repeat = make()
        for run in runs.values():
            _timed(run, 1)  # compile and warm up
        times = medians(runs, repeat, _warm_timed, ROUNDS)
        base = times["funcgrad-llvm"]
        for label, median in times.items():
            rate = f"{moved / median / 1e9:7.1f}" if moved else " " * 7
            share = f"{moved / median / 1e9 / bandwidth:8.0%}" if moved else " " * 8
            print(f"{name:30} {label:16} {median * 1e3:10.3f} {median / base:10.2f} {rate} {share}")
        print()
    if not selected or any("compile" in word for word in selected):
        for what, label, seconds in compile_time():
            print(f"{what:30} {label:16} {seconds * 1e3:10.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
