"""Compiled programs on a CUDA GPU side by side: funcgrad's CUDA backend, CuPy and, when
installed, JAX's jit and PyTorch on the same GPU.

    python benchmarks/gpu.py            # every case
    python benchmarks/gpu.py gelu mlp   # the cases whose names contain these words

Every framework's inputs are already in device memory (funcgrad's placed with
`funcgrad.device_put`); each call launches its kernels and returns device arrays without
waiting. A timed batch issues its calls back to back (after one untimed call), then waits for
the device once. Frameworks alternate rounds and the table gives medians; the ratio column is
the framework's time over funcgrad's (above 1: slower than funcgrad). Memory-bound cases print
GB/s and the fraction of the device-to-device copy bandwidth measured in the same run.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to the others

import cupy  # noqa: E402

# The programs themselves are the CPU benchmark's (benchmarks/ is this script's folder).
from compiler import (  # noqa: E402
    _conv,
    _conv_inputs,
    _conv_step,
    _layernorm,
    _mlp_inputs,
    _mlp_step,
    _rnn,
    _rnn_inputs,
    _softmax,
    medians,
)

import funcgrad as fg  # noqa: E402
import funcgrad.numpy as fnp  # noqa: E402
from funcgrad import lax, tree_util  # noqa: E402
from funcgrad.backends.cuda import executable, graphs  # noqa: E402
from funcgrad.compiler import parallel, schedule, stages  # noqa: E402

ROUNDS = 5


def _sync() -> None:
    cupy.cuda.Device().synchronize()


def _seconds_per_call(run, repeat: int) -> float:
    """Seconds per call of a batch made back to back, after two untimed calls: the first call
    after another framework's batch runs slower (on an H100, funcgrad's softmax took 413 µs a
    call in batches of 10 right after other frameworks', 390 µs in batches after its own),
    and a training loop's parameters take turns in two places, each of which a replay may
    capture a graph for at its first call there (once other loops' batches moved them, the
    H200's loop row took 233 µs a call where the loop alone took 129)."""
    run()
    run()
    _sync()
    start = time.perf_counter()
    for _ in range(repeat):
        run()
    _sync()
    return (time.perf_counter() - start) / repeat


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    if not any(d.platform == "gpu" for d in jax.devices()):
        return None
    # float32 products in float32, as cuBLAS through CuPy computes them (and funcgrad, unless
    # its user allows TF32); JAX's own default (TF32) is the matmul case's extra row.
    jax.config.update("jax_default_matmul_precision", "highest")
    return jax, jnp


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _funcgrad(fun, *args):
    """A call of jit(fun) on the arguments placed on the GPU (its results stay there)."""
    jitted = fg.jit(fun)
    placed = fg.device_put(args, fg.devices("gpu")[0])
    return lambda: jitted(*placed)


def _compiled_with(module, setting: str, value, fun, *args):
    """funcgrad's call compiled (at its first call, made here) with `module.setting` set to
    `value`, then set back: the program keeps what that setting made of it."""
    run = _funcgrad(fun, *args)
    _each_call_with(module, setting, value, run)()
    return run


def _maps_apart(fun, *args):
    """funcgrad's call with independent map kernels launched one by one, not merged into one
    launch (`horizontal.merge_maps`)."""
    return _compiled_with(stages, "merge_maps", lambda program: None, fun, *args)


def _updates_apart(run):
    """`run` compiled (at its first call, made here) with each GEMM's update, `w - lr * g`,
    made by a kernel reading the GEMM's result back, as before 2026-11-27, rather than by
    cuBLAS's `beta` on the result (`schedule._updates`)."""
    _each_call_with(schedule, "_updates", lambda scheduler, eqns: {}, run)()
    return run


def _gemm_results_copied_out(run):
    """`run` with the results a library's GEMM writes copied out of its replay's own buffers,
    as before 2026-11-27, rather than written where the call's results are (replays kept by
    where those are: `executable._result_places`)."""
    no_places = lambda self, results: ()  # noqa: E731
    return _each_call_with(executable.CudaExecutable, "_result_places", no_places, run)


def _addresses_from_the_host(fun, *args):
    """funcgrad's call with its addresses copied into its replay's tables from pageable host
    memory at every call, as before 2026-11-27, rather than written by launches where they
    moved (`executable._Slots`): such a copy may wait for the stream to drain, each call then
    waiting for the last."""
    runtime = cupy.cuda.runtime

    def copied(slots, buffers) -> None:
        addresses = np.array([buffer.data.ptr for buffer in buffers], np.uint64)
        stream = cupy.cuda.get_current_stream().ptr
        runtime.memcpyAsync(
            slots.table.data.ptr,
            addresses.ctypes.data,
            addresses.nbytes,
            runtime.memcpyHostToDevice,
            stream,
        )

    return _each_call_with(executable._Slots, "point", copied, _funcgrad(fun, *args))


def _walked(fun, *args):
    """funcgrad's call with CUDA graphs off, every launch made from the host: beside the
    replayed call, what the graph saves (and so what a launch costs)."""
    return _compiled_with(graphs, "MAX_LAUNCHES", 0, fun, *args)


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB float32 device-to-device copy (read + write)."""
    a = cupy.ones(256 * 2**20, cupy.float32)
    b = cupy.empty_like(a)
    seconds = min(_seconds_per_call(lambda: b.__setitem__(Ellipsis, a), 10) for _ in range(5))
    return 2 * a.nbytes / seconds / 1e9


# -- cases: name -> (frameworks {label: run}, bytes moved or None, repeat) ----------------------


def gelu_case():
    x = np.random.default_rng(0).standard_normal(256 * 2**20).astype(np.float32)

    def gelu(xp):
        return lambda v: 0.5 * v * (1 + xp.tanh(0.7978845608 * (v + 0.044715 * v**3)))

    xc = cupy.asarray(x)
    runs = {"funcgrad": _funcgrad(gelu(fnp), x), "cupy": lambda: gelu(cupy)(xc)}
    _peers(runs, gelu, x)
    return runs, 2 * x.nbytes, 10


def _row_case(make, torch_op):
    x = np.random.default_rng(1).standard_normal((32768, 4096)).astype(np.float32)
    xc = cupy.asarray(x)
    runs = {"funcgrad": _funcgrad(make(fnp), x), "cupy": lambda: make(cupy)(xc)}
    _peers(runs, make, x, torch_op)
    return runs, 2 * x.nbytes, 10


def softmax_case():
    return _row_case(_softmax, lambda torch, x: torch.softmax(x, dim=1))


def layernorm_case():
    return _row_case(
        _layernorm, lambda torch, x: torch.nn.functional.layer_norm(x, (x.shape[1],), eps=1e-5)
    )


def column_sum_case():
    """A reduction over the batch axis (a bias gradient): 1,024 columns, 32,768 rows."""
    x = np.random.default_rng(2).standard_normal((32768, 1024)).astype(np.float32)

    def column_sum(xp):
        return lambda v: v.sum(axis=0)

    xc = cupy.asarray(x)
    runs = {"funcgrad": _funcgrad(column_sum(fnp), x), "cupy": lambda: column_sum(cupy)(xc)}
    _peers(runs, column_sum, x, lambda torch, v: v.sum(dim=0))
    return runs, x.nbytes, 10


def _peers(runs: dict, make, x, torch_op=None) -> None:
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(make(jax[1])), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj)
    torch = _torch()
    if torch:
        xt = torch.from_numpy(x).cuda()
        runs["torch"] = (lambda: torch_op(torch, xt)) if torch_op else (lambda: make(torch)(xt))


def _matmul_case(n: int):
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    ac, bc = cupy.asarray(a), cupy.asarray(b)
    runs = {
        "funcgrad": _funcgrad(lambda p, q: p @ q, a, b),
        "funcgrad tf32": _funcgrad(lambda p, q: fnp.matmul(p, q, precision="tensorfloat32"), a, b),
        "cupy": lambda: ac @ bc,
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(lambda p, q: p @ q)
        tf32 = jax[0].jit(lambda p, q: jax[1].matmul(p, q, precision="default"))
        aj, bj = jax[1].asarray(a), jax[1].asarray(b)
        runs["jax-jit"] = lambda: f(aj, bj)
        runs["jax-jit tf32"] = lambda: tf32(aj, bj)
    return runs, None, 10


def matmul_4096_case():
    return _matmul_case(4096)


def matmul_4096_bf16_case():
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((4096, 4096)).astype(fg.dtypes.bfloat16) for _ in range(2))
    runs = {"funcgrad": _funcgrad(lambda p, q: p @ q, a, b)}
    jax = _jax()
    if jax:
        f = jax[0].jit(lambda p, q: p @ q)
        aj, bj = jax[1].asarray(a), jax[1].asarray(b)
        runs["jax-jit"] = lambda: f(aj, bj)
    torch = _torch()
    if torch:
        at, bt = (torch.from_numpy(v.astype(np.float32)).cuda().bfloat16() for v in (a, b))
        runs["torch"] = lambda: at @ bt
    return runs, None, 10


def mlp_case():
    params, x, y = _mlp_inputs()
    step = _mlp_step(fnp, fg.grad)

    tf32_call = _funcgrad(step, params, x, y)

    def tf32():  # (the precision JAX's products take by default on such a GPU)
        with fg.default_matmul_precision("tensorfloat32"):
            return tf32_call()

    runs = {
        "funcgrad": _funcgrad(step, params, x, y),
        "funcgrad-walked": _walked(step, params, x, y),
        "funcgrad tf32": tf32,
        # Each without one of the changes made for this step (2026-11-27, unmeasured then):
        "funcgrad, results copied out": _compiled_with(
            executable, "_written_in_place", lambda program, hosts, ours: [], step, params, x, y
        ),
        "funcgrad, bias sums two kernels": _compiled_with(
            parallel, "BLOCK_PARTS_LEAST", 1 << 30, step, params, x, y
        ),
        "funcgrad, maps launched apart": _maps_apart(step, params, x, y),
        "funcgrad, loss gradient two kernels": _compiled_with(
            executable, "SHORT_ROW_GROUP", 8, step, params, x, y
        ),
        "funcgrad, addresses from the host": _addresses_from_the_host(step, params, x, y),
        # (2026-11-27, unmeasured then: cuBLASLt's GEMMs make the weights' updates, and
        # write them where each call's results are)
        "funcgrad, updates apart from their GEMMs": _updates_apart(_funcgrad(step, params, x, y)),
        "funcgrad, GEMM results copied out": _gemm_results_copied_out(
            _funcgrad(step, params, x, y)
        ),
        "funcgrad, bias sums apart from their maps": _compiled_with(
            parallel,
            "column_fold_on_blocks",
            lambda rows, columns, split: False,
            step,
            params,
            x,
            y,
        ),
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(_mlp_step(jax[1], jax[0].grad))
        pj = [(jax[1].asarray(w), jax[1].asarray(b)) for w, b in params]
        xj, yj = jax[1].asarray(x), jax[1].asarray(y)
        runs["jax-jit"] = lambda: f(pj, xj, yj)
    return runs, None, 20


def _training_loop(step, params, x, y, donate: bool = False):
    """Calls of jit(step) each taking the last call's parameters, as a training loop makes
    them (a batch held on the GPU): the parameters come in other device buffers each call,
    or, donated, in the same ones."""
    jitted = fg.jit(step, donate_argnums=0 if donate else ())
    gpu = fg.devices("gpu")[0]
    state = [fg.device_put(params, gpu)]
    x, y = fg.device_put((x, y), gpu)

    def call():
        state[0] = jitted(state[0], x, y)
        return state[0]

    return call


def _each_call_with(owner, setting: str, value, run):
    """`run` with `owner.setting` (a module's or a class's) set to `value` during each call."""

    def call():
        kept = getattr(owner, setting)
        setattr(owner, setting, value)
        try:
            return run()
        finally:
            setattr(owner, setting, kept)

    return call


def mlp_loop_case():
    """The MLP step in a training loop, each call's parameters the last call's results: a
    graph reads them where they are (the memory pool hands out the same few places in
    turn), where it copied them in before."""
    params, x, y = _mlp_inputs()
    step = _mlp_step(fnp, fg.grad)
    runs = {
        "funcgrad": _training_loop(step, params, x, y),
        "funcgrad, parameters copied in": _each_call_with(
            executable, "MAX_PLACEMENTS", 1, _training_loop(step, params, x, y)
        ),
        "funcgrad donated": _training_loop(step, params, x, y, donate=True),
        "funcgrad donated, updates apart from their GEMMs": _updates_apart(
            _training_loop(step, params, x, y, donate=True)
        ),
        "funcgrad, updates apart from their GEMMs": _updates_apart(
            _training_loop(step, params, x, y)
        ),
    }
    jax = _jax()
    if jax:
        runs["jax-jit"] = _jax_training_loop(jax, params, x, y, donate=False)
        runs["jax-jit donated"] = _jax_training_loop(jax, params, x, y, donate=True)
    return runs, None, 20


def _jax_training_loop(jax, params, x, y, donate: bool):
    """JAX's MLP training loop, as `_training_loop` makes funcgrad's."""
    f = jax[0].jit(_mlp_step(jax[1], jax[0].grad), donate_argnums=0 if donate else ())
    state = [[(jax[1].asarray(w), jax[1].asarray(b)) for w, b in params]]
    xj, yj = jax[1].asarray(x), jax[1].asarray(y)

    def call():
        state[0] = f(state[0], xj, yj)
        return state[0]

    return call


def _gathered(fun, *args):
    """funcgrad's call with its float32 convolutions as gathered windows and a cuBLAS GEMM
    rather than implicit GEMMs: beside the default, what gathering in the kernel gains."""
    return _compiled_with(executable, "CONTRACTION_DTYPES", (), fun, *args)


def conv_case():
    """The CPU benchmark's convolutional training step on a batch of 256: its convolutions
    run as implicit GEMMs (CuPy ships no cuDNN), or gathered windows and cuBLAS."""
    params, x, y = _conv_inputs(256)
    step = _conv_step(fnp, _conv(lax), fg.grad)
    runs = {
        "funcgrad": _funcgrad(step, params, x, y),
        "funcgrad-gathered": _gathered(step, params, x, y),
        # (unmeasured when made, 2026-11-27: its six updates one launch)
        "funcgrad, maps launched apart": _maps_apart(step, params, x, y),
    }
    jax = _jax()
    if jax:
        f = jax[0].jit(_conv_step(jax[1], _conv(jax[0].lax), jax[0].grad))
        pj = [(jax[1].asarray(w), jax[1].asarray(b)) for w, b in params]
        xj, yj = jax[1].asarray(x), jax[1].asarray(y)
        runs["jax-jit"] = lambda: f(pj, xj, yj)
    return runs, None, 20


def _rnn_case(differentiate: bool):
    """A 1000-step tanh RNN (hidden size 32) whose loop runs on the device: the steps are too
    small to fill a GPU, so what counts is what each iteration costs besides its arithmetic."""
    w, xs = _rnn_inputs()

    def make(xp, scan, grad):
        forward = _rnn(xp, scan)
        return grad(forward) if differentiate else forward

    runs = {"funcgrad": _funcgrad(make(fnp, lax.scan, fg.grad), w, xs)}
    jax = _jax()
    if jax:
        f = jax[0].jit(make(jax[1], jax[0].lax.scan, jax[0].grad))
        wj, xj = jax[1].asarray(w), jax[1].asarray(xs)
        runs["jax-jit"] = lambda: f(wj, xj)
    return runs, None, 5


def rnn_forward_case():
    return _rnn_case(differentiate=False)


def rnn_backward_case():
    return _rnn_case(differentiate=True)


def while_case():
    """A while loop of 1000 small steps (Newton's method for square roots, a fixed number of
    times): its predicate is tested at every step, on the device rather than after a copy
    back to the host."""
    x = np.linspace(1, 100, 4096).astype(np.float32)

    def make(xp, while_loop):
        def newton(v):
            def body(state):
                k, r = state
                return k + 1, 0.5 * (r + v / r)

            return while_loop(lambda state: state[0] < 1000, body, (0, v))[1]

        return newton

    runs = {"funcgrad": _funcgrad(make(fnp, lax.while_loop), x)}
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(make(jax[1], jax[0].lax.while_loop)), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj)
    return runs, None, 5


def call_overhead_case():
    x = np.ones(16, np.float32)
    runs = {"funcgrad": _funcgrad(lambda a: a * 2.0 + 1.0, x)}
    jax = _jax()
    if jax:
        f, xj = jax[0].jit(lambda a: a * 2.0 + 1.0), jax[1].asarray(x)
        runs["jax-jit"] = lambda: f(xj)
    return runs, None, 2000


def small_layers_case():
    """Eight small layers (a GEMM and a fused kernel each, 17 launches): a program whose
    time is its launches, which funcgrad replays as one CUDA graph from the second call."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)

    def make(xp):
        def layers(x, w):
            for _ in range(8):
                x = xp.tanh(x @ w)
                x = x - x.mean(axis=1, keepdims=True)
            return x

        return layers

    runs = {
        "funcgrad": _funcgrad(make(fnp), x, w),
        "funcgrad-walked": _walked(make(fnp), x, w),
        "funcgrad, addresses from the host": _addresses_from_the_host(make(fnp), x, w),
    }
    jax = _jax()
    if jax:
        f, xj, wj = jax[0].jit(make(jax[1])), jax[1].asarray(x), jax[1].asarray(w)
        runs["jax-jit"] = lambda: f(xj, wj)
    return runs, None, 500


def _decomposition_case(name: str):
    """A stack of symmetric positive definite 256x256 matrices decomposed (float32, computed
    in float64 as the reference computes them): cuSOLVER on the device (Cholesky as one
    batched call, eigh a call per matrix). CuPy's row calls cuSOLVER in float32 from its own
    linalg, and checks the values."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 256, 256))
    spd = (a @ a.transpose(0, 2, 1) / 256 + np.eye(256)).astype(np.float32)

    def make(xp):
        if name == "cholesky":
            return xp.linalg.cholesky
        return lambda m: xp.linalg.eigh(m)[0]

    on_device = cupy.asarray(spd)
    runs = {"funcgrad": _funcgrad(make(fnp), spd), "cupy": lambda: make(cupy)(on_device)}
    jax = _jax()
    if jax:
        f, mj = jax[0].jit(make(jax[1])), jax[1].asarray(spd)
        runs["jax-jit"] = lambda: f(mj)
    return runs, None, 5


def cholesky_case():
    return _decomposition_case("cholesky")


def eigh_case():
    return _decomposition_case("eigh")


CASES = {  # (the MLP first: the open target, measured before a time limit can stop the run)
    "mlp 784-1024-1024-10 step": mlp_case,
    "mlp step in a training loop": mlp_loop_case,
    "gelu 256M f32": gelu_case,
    "softmax 32768x4096": softmax_case,
    "layernorm 32768x4096": layernorm_case,
    "column sum 32768x1024": column_sum_case,
    "matmul 4096 f32": matmul_4096_case,
    "matmul 4096 bf16": matmul_4096_bf16_case,
    "conv step (batch 256, 28x28)": conv_case,
    "rnn scan 1000 fwd": rnn_forward_case,
    "rnn scan 1000 bwd": rnn_backward_case,
    "while loop 1000 steps": while_case,
    "jit call (one op)": call_overhead_case,
    "jit call (8 small layers)": small_layers_case,
    "cholesky 16x256x256": cholesky_case,
    "eigh 16x256x256": eigh_case,
}


def main(words: list[str]) -> None:
    print(f"# {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    bandwidth = copy_bandwidth()
    print(f"device-to-device copy: {bandwidth:.0f} GB/s\n")
    print("| case | framework | median | ratio | GB/s | % of copy |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, make in CASES.items():
        if words and not any(w in name for w in words):
            continue
        runs, moved, repeat = make()
        for run in runs.values():  # compile and warm up
            run()
        if "cupy" in runs:  # the programs compute the same thing
            ours = np.asarray(tree_util.tree_leaves(runs["funcgrad"]())[0])
            theirs = cupy.asnumpy(runs["cupy"]())
            error = float(np.abs(ours - theirs).max() / (np.abs(theirs).max() + 1e-30))
            print(f"<!-- {name}: funcgrad vs cupy, max relative difference {error:.1e} -->")
        times = medians(runs, repeat, _seconds_per_call, ROUNDS, settle=0.0)
        ours = times["funcgrad"]
        for label, median in times.items():
            rate = f"{moved / median / 1e9:.0f}" if moved else ""
            share = f"{moved / median / 1e9 / bandwidth:.0%}" if moved else ""
            print(
                f"| {name} | {label} | {_format(median)} | {median / ours:.2f} | {rate} | "
                f"{share} |",
                flush=True,
            )


def _format(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


if __name__ == "__main__":
    main(sys.argv[1:])
