"""Per-example gradients of a small MLP (batch 256): vmap(grad) beside a Python loop of grads.

    python benchmarks/per_example_grads.py

funcgrad and JAX are shown both eagerly and jitted (funcgrad's jit on its default backend,
native code through LLVM), torch.func's vmap(grad) eagerly. Each
variant is timed in alternating rounds; the table gives medians in milliseconds and ratios
against funcgrad's vmap(grad).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import funcgrad as fg
import funcgrad.numpy as fnp

BATCH, D_IN, HIDDEN, D_OUT = 256, 32, 64, 10
ROUNDS = 7


def init(rng):
    return {
        "w1": (rng.standard_normal((D_IN, HIDDEN)) / np.sqrt(D_IN)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((HIDDEN, D_OUT)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(D_OUT, np.float32),
    }


def fg_loss(params, x, y):
    hidden = fnp.tanh(x @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    return -fnp.sum(fg.nn.log_softmax(logits) * y)


def variants(params, xs, ys):
    fg_params = fg.tree_util.tree_map(fnp.asarray, params)
    fg_xs, fg_ys = fnp.asarray(xs), fnp.asarray(ys)
    per_example = fg.vmap(fg.grad(fg_loss), in_axes=(None, 0, 0))
    jitted_per_example = fg.jit(per_example)
    one_grad = fg.grad(fg_loss)
    out = {
        "funcgrad vmap(grad)": lambda: per_example(fg_params, fg_xs, fg_ys),
        "funcgrad jit(vmap(grad))": lambda: jitted_per_example(fg_params, fg_xs, fg_ys),
        "funcgrad loop of grad": lambda: [
            one_grad(fg_params, fg_xs[i], fg_ys[i]) for i in range(BATCH)
        ],
    }
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_platforms", "cpu")

        def jax_loss(params, x, y):
            hidden = jnp.tanh(x @ params["w1"] + params["b1"])
            logits = hidden @ params["w2"] + params["b2"]
            return -jnp.sum(jax.nn.log_softmax(logits) * y)

        jax_per_example = jax.vmap(jax.grad(jax_loss), in_axes=(None, 0, 0))
        jitted = jax.jit(jax_per_example)
        jp = jax.tree_util.tree_map(jnp.asarray, params)
        jx, jy = jnp.asarray(xs), jnp.asarray(ys)
        out["jax vmap(grad) eager"] = lambda: jax.block_until_ready(jax_per_example(jp, jx, jy))
        out["jax jit(vmap(grad))"] = lambda: jax.block_until_ready(jitted(jp, jx, jy))
    except ImportError:
        pass
    try:
        import torch
        from torch.func import grad, vmap

        def torch_loss(params, x, y):
            hidden = torch.tanh(x @ params["w1"] + params["b1"])
            logits = hidden @ params["w2"] + params["b2"]
            return -torch.sum(torch.log_softmax(logits, -1) * y)

        tp = {k: torch.from_numpy(v.copy()) for k, v in params.items()}
        tx, ty = torch.from_numpy(xs.copy()), torch.from_numpy(ys.copy())
        torch_per_example = vmap(grad(torch_loss), in_dims=(None, 0, 0))
        out["torch.func vmap(grad)"] = lambda: torch_per_example(tp, tx, ty)
    except ImportError:
        pass
    return out


def check_agreement(params, xs, ys) -> None:
    fg_params = fg.tree_util.tree_map(fnp.asarray, params)
    batched = fg.vmap(fg.grad(fg_loss), in_axes=(None, 0, 0))(fg_params, xs, ys)
    looped = fg.grad(fg_loss)(fg_params, xs[7], ys[7])
    for key in params:
        np.testing.assert_allclose(
            np.asarray(batched[key][7]), np.asarray(looped[key]), rtol=1e-4, atol=1e-5
        )


def main() -> None:
    rng = np.random.default_rng(0)
    params = init(rng)
    xs = rng.standard_normal((BATCH, D_IN)).astype(np.float32)
    ys = np.eye(D_OUT, dtype=np.float32)[rng.integers(0, D_OUT, BATCH)]
    check_agreement(params, xs, ys)
    cases = variants(params, xs, ys)
    for run in cases.values():
        run()  # warm up (and compile, for jit)
    timings = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, run in cases.items():
            start = time.perf_counter()
            run()
            timings[name].append((time.perf_counter() - start) * 1e3)
    reference = statistics.median(timings["funcgrad vmap(grad)"])
    print(f"per-example gradients, MLP {D_IN}-{HIDDEN}-{D_OUT}, batch {BATCH} (median of {ROUNDS})")
    print(f"{'variant':<28}{'ms':>10}{'x vs fg vmap':>14}")
    for name, samples in timings.items():
        median = statistics.median(samples)
        print(f"{name:<28}{median:>10.2f}{median / reference:>14.2f}")


if __name__ == "__main__":
    main()
