"""jit: stage a function once per signature, then run the staged program.

A call looks its signature up in a cache (pytree structure, shapes, dtypes, weak types, static
values); on a miss the function is traced into a jaxpr. The call then binds one `jit`
primitive carrying that jaxpr, so every transformation of a jitted function is a rule of that
primitive (jvp of a jit is a jit of the jvp, vmap of a jit is a jit of the batched program, the
transpose of a jit is a jit of the transposed program, and partial evaluation splits it in two
jits) and the user's function is not traced again. Run
eagerly, the program executes on the backend (today the NumPy reference backend).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from funcgrad import caches, core, dtypes, monitoring, trace_events, tree_util
from funcgrad.array import Array, DeviceValue, device_put, on_gpu
from funcgrad.backends.numpy.executor import NumpyExecutable
from funcgrad.compiler import passes
from funcgrad.config import config
from funcgrad.core import Primitive
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import (
    UndefinedPrimal,
    Zero,
    backward_pass,
    instantiate,
    is_undefined,
    jvp_jaxpr,
    tangent_aval,
)
from funcgrad.interpreters.partial_eval import PartialEvalTrace, SplitJaxpr, split_jaxpr
from funcgrad.interpreters.staging import StagingTrace, trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr
from funcgrad.lax.base import asarray
from funcgrad.lax.sharding_constraint import result_layout_rules, result_layouts
from funcgrad.sharding import laid_out
from funcgrad.transforms.make_jaxpr import function_name

logger = logging.getLogger("funcgrad")

# ---------------------------------------------------------------------------------------------
# The call primitive

jit_p = Primitive("jit", multiple_results=True, higher_order=True)


def compile_jaxpr(jaxpr: ClosedJaxpr, donated: tuple[int, ...] = ()):
    """The program for a jaxpr on the configured backend (cached by the jaxpr object, which
    jit's cache keeps, the backend and the inputs whose buffers the outputs may take over)."""
    return _compile(jaxpr, config.jit_backend, donated)


_compiled_lock = threading.Lock()


def _compile(jaxpr: ClosedJaxpr, backend: str, donated: tuple[int, ...], gpu=None):
    """The program compiled from `jaxpr` for `backend` (`gpu`: the GPU runtime, a device's
    `runtime`, a CUDA program runs on; by default the first GPU, or the emulated one), kept
    on the jaxpr (`ClosedJaxpr.compiled`). So a program, and what it holds on a device (its
    constants, a replay's buffers and the arguments it reads in place), goes with the jit
    whose signature cache holds the jaxpr: a notebook redefining a jitted function that
    closes over a model's weights kept every definition's weights on the GPU while programs
    were cached apart. Compiled once per key (two threads compiling one at once keep the
    first's)."""
    key = (backend, donated, gpu)
    with _compiled_lock:
        if jaxpr.compiled is None:
            jaxpr.compiled = {}
        program = jaxpr.compiled.get(key)
    if program is None:
        program = _compiled(jaxpr, backend, donated, gpu)
        with _compiled_lock:
            program = jaxpr.compiled.setdefault(key, program)
    return program


def _compiled(jaxpr: ClosedJaxpr, backend: str, donated: tuple[int, ...], gpu):
    started = time.perf_counter()
    with trace_events.span(f"compile ({backend})", equations=len(jaxpr.jaxpr.eqns)):
        program = _compiled_now(jaxpr, backend, donated, gpu)
    if monitoring.listening:
        monitoring.record_event_duration_secs(
            "/funcgrad/jit/compile_duration",
            time.perf_counter() - started,
            backend=backend,
            equations=len(jaxpr.jaxpr.eqns),
        )
    return program


def _compiled_now(jaxpr: ClosedJaxpr, backend: str, donated: tuple[int, ...], gpu):
    platform = "cuda" if backend in ("cuda", "cuda_emulator") else "cpu"
    jaxpr = passes.resolve_platform(jaxpr, platform)
    if backend == "llvm":
        from funcgrad.backends.llvm.executable import LlvmExecutable

        with collection_paused():
            return LlvmExecutable(jaxpr, donated)
    if backend in ("cuda", "cuda_emulator"):
        from funcgrad.backends.cuda.executable import CudaExecutable, emulator

        if gpu is None and backend == "cuda_emulator":
            gpu = emulator()
        with collection_paused():
            return CudaExecutable(jaxpr, donated, gpu)
    return NumpyExecutable(jaxpr, donated)


_collection = threading.Lock()
_compiling = 0  # compilations under way, which keep the garbage collector paused
_was_enabled = True  # whether it ran before the first of them


@contextlib.contextmanager
def collection_paused():
    """Python's cyclic garbage collector paused while a program is staged and compiled. Both
    allocate many small objects (equations, kernel IR, IR text) in bursts, and the
    collections they start walk every object the process holds: with 250,000 objects (a
    notebook that imported a few libraries) a full collection took 150 ms of the 5,000-op
    program's 100 ms trace, and collections a sixth of its compilation. The collector runs
    again, and frees what was left in cycles, once the last staging or compilation ends,
    unless it was off to begin with."""
    global _compiling, _was_enabled
    with _collection:
        if _compiling == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _compiling += 1
    try:
        yield
    finally:
        with _collection:
            _compiling -= 1
            if _compiling == 0 and _was_enabled:
                gc.enable()


def gpu_of(args):
    """The GPU holding any of `args` (arrays placed there), else the default GPU, or None."""
    if DeviceValue.made and on_gpu([a._value for a in args if type(a) is Array]):
        from funcgrad.backends.cuda import eager

        return eager.device_of(args, "a jitted function")
    return None


@jit_p.def_impl
def _jit_impl(*args, jaxpr: ClosedJaxpr, name: str):
    device = gpu_of(args)
    if device is not None:  # computation follows the data; results stay there
        program = _compile(jaxpr, device.backend, (), device.runtime)
        with trace_events.span(f"jit({name})", device=device):
            return program.on_device(args, device)
    program = compile_jaxpr(jaxpr)
    with trace_events.span(f"jit({name})"):
        return program(*args)


@jit_p.def_abstract_eval
def _jit_abstract_eval(*avals, jaxpr: ClosedJaxpr, name: str):
    return jaxpr.out_avals


@jit_p.def_weak_type
def _jit_weak_type(weak_flags, *, jaxpr: ClosedJaxpr, name: str) -> list[bool]:
    return [a.weak_type for a in jaxpr.out_avals]


# Each transformation of a jit rewrites its program once: the rewritten programs are cached by
# the program they come from (which jit's signature cache keeps alive) and the transformation,
# so repeated calls of grad(jit(f)) or vmap(jit(f)) reuse both them and their compiled form.


@caches.program_cache
def _jvp_program(jaxpr: ClosedJaxpr, nonzero: tuple[bool, ...]):
    jvp_closed, out_nonzero = jvp_jaxpr(jaxpr, nonzero)
    return jvp_closed, tuple(out_nonzero)


@jit_p.def_jvp
def _jit_jvp(primals, tangents, *, jaxpr: ClosedJaxpr, name: str):
    nonzero = tuple(type(t) is not Zero for t in tangents)
    jvp_closed, out_nonzero = _jvp_program(jaxpr, nonzero)
    nonzero_tangents = [t for t in tangents if type(t) is not Zero]
    outs = jit_p.bind(*primals, *nonzero_tangents, jaxpr=jvp_closed, name=f"jvp({name})")
    num_out = len(jaxpr.out_avals)
    tangent_outs = iter(outs[num_out:])
    return outs[:num_out], [
        next(tangent_outs) if nz else Zero(tangent_aval(aval))
        for nz, aval in zip(out_nonzero, jaxpr.out_avals)
    ]


@caches.program_cache
def _transpose_program(
    jaxpr: ClosedJaxpr, undefined: tuple[bool, ...], ct_nonzero: tuple[bool, ...]
) -> ClosedJaxpr:
    """(defined operands, nonzero cotangents) -> cotangents of the undefined operands."""
    in_avals, out_avals = jaxpr.in_avals, jaxpr.out_avals
    defined_avals = [a for a, u in zip(in_avals, undefined) if not u]
    ct_avals = [tangent_aval(a) for a, nz in zip(out_avals, ct_nonzero) if nz]

    def transposed(*args):
        defined, cts = iter(args[: len(defined_avals)]), iter(args[len(defined_avals) :])
        operands = [UndefinedPrimal(a) if u else next(defined) for a, u in zip(in_avals, undefined)]
        cts_out = [
            next(cts) if nz else Zero(tangent_aval(a)) for a, nz in zip(out_avals, ct_nonzero)
        ]
        cts_in = backward_pass(jaxpr.jaxpr, jaxpr.consts, operands, cts_out)
        return [instantiate(ct) for ct, u in zip(cts_in, undefined) if u]

    closed, _ = trace_to_jaxpr(transposed, defined_avals + ct_avals, "transpose of a jit")
    return closed


@jit_p.def_transpose
def _jit_transpose(cotangents, *operands, jaxpr: ClosedJaxpr, name: str):
    undefined = tuple(is_undefined(op) for op in operands)
    ct_nonzero = tuple(type(ct) is not Zero for ct in cotangents)
    transposed = _transpose_program(jaxpr, undefined, ct_nonzero)
    defined = [op for op in operands if not is_undefined(op)]
    nonzero_cts = [ct for ct in cotangents if type(ct) is not Zero]
    cts = iter(jit_p.bind(*defined, *nonzero_cts, jaxpr=transposed, name=f"transpose({name})"))
    return [next(cts) if u else None for u in undefined]


@caches.program_cache
def _batched_program(jaxpr: ClosedJaxpr, in_batched: tuple[bool, ...], size: int, axis_name):
    batched, out_batched = batching.batch_jaxpr_outputs(jaxpr, in_batched, size, axis_name)
    return batched, tuple(out_batched)


@jit_p.def_batch
def _jit_batch(values, dims, *, jaxpr: ClosedJaxpr, name: str):
    size = batching.batch_size(values, dims)
    in_batched = tuple(d is not None for d in dims)
    values = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(values, dims)]
    batched, out_batched = _batched_program(jaxpr, in_batched, size, batching.current_axis_name())
    outs = jit_p.bind(*values, jaxpr=batched, name=f"vmap({name})")
    return outs, [0 if b else None for b in out_batched]


def _hoisted(closed: ClosedJaxpr) -> ClosedJaxpr:
    """The same program with its constants turned into leading inputs."""
    jaxpr = closed.jaxpr
    return ClosedJaxpr(Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns), [])


@caches.program_cache
def _split_program(jaxpr: ClosedJaxpr, unknowns: tuple[bool, ...]) -> SplitJaxpr:
    return split_jaxpr(jaxpr, unknowns, what="a jit")


def _jit_partial_eval(trace: PartialEvalTrace, args: Sequence, params: dict) -> list:
    """Split a jit whose operands are partly known: the known part runs now, the rest is
    staged, with the known values it needs passed as residuals (nothing is recomputed)."""
    jaxpr, name = params["jaxpr"], params["name"]
    unknowns = tuple(trace.is_unknown(a) for a in args)
    known, unknown, _, out_unknown = _split_program(jaxpr, unknowns)
    known_args = [a for a, u in zip(args, unknowns) if not u]
    with core.set_current_trace(trace.parent):
        known_outs = jit_p.bind(*known_args, jaxpr=known, name=name)
    num_known_out = out_unknown.count(False)
    if not unknown.eqns and not any(out_unknown):
        return known_outs
    residuals = known_outs[num_known_out:]
    unknown_args = residuals + [a for a, u in zip(args, unknowns) if u]
    staged = StagingTrace.process_primitive(
        trace, jit_p, unknown_args, dict(jaxpr=unknown, name=name)
    )
    known_iter, staged_iter = iter(known_outs[:num_known_out]), iter(staged)
    return [next(staged_iter) if u else next(known_iter) for u in out_unknown]


jit_p.partial_eval = _jit_partial_eval


def _jit_result_layout(eqn, k: int):
    """A jitted call's result is laid out as its program's result is."""
    layouts = result_layouts(eqn.params["jaxpr"].jaxpr)
    return None if layouts is None else layouts[k]


result_layout_rules[jit_p] = _jit_result_layout
passes.inlinable_calls.add(jit_p)
passes.dce_rules[jit_p] = passes.dce_call


# ---------------------------------------------------------------------------------------------
# The transform


def _typed_static_key(value):
    """A static value with its type (and its items' types, for tuples): 1, 1.0 and True are
    equal and hash alike, but a program traced with one would give the others the wrong
    dtypes."""
    if isinstance(value, tuple):
        return type(value), tuple(_typed_static_key(item) for item in value)
    return type(value), value


def _static_tuple(argnums) -> tuple:
    if argnums is None:
        return ()
    if isinstance(argnums, (int, str)):
        return (argnums,)
    return tuple(argnums)


def _static_argnums_and_names(
    fun: Callable, name: str, argnums: tuple, argnames: tuple, what: str = "static_argnums"
):
    """Complete each of static_argnums and static_argnames (or `what`, donate_argnums and its
    names) from the other through `fun`'s signature, as JAX does: a parameter declared static
    by name is static when passed by position too, and the reverse. Positions the signature
    cannot have are an error."""
    try:
        parameters = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):  # no signature (some builtins): take them as given
        return argnums, argnames
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not any(p.kind is p.VAR_POSITIONAL for p in parameters):
        for i in argnums:
            if not -len(positional) <= i < len(positional):
                raise ValueError(
                    f"jit({name}): {what} {argnums} out of range: the function takes "
                    f"{len(positional)} positional argument(s)"
                )
    nums, names = list(argnums), list(argnames)
    for i, p in enumerate(positional):
        if p.name in argnames and i not in nums:
            nums.append(i)
        if (i in argnums or i - len(positional) in argnums) and p.kind is p.POSITIONAL_OR_KEYWORD:
            if p.name not in names:
                names.append(p.name)
    return tuple(nums), tuple(names)


_SETTINGS = ("default_matmul_precision", "enable_x64", "numpy_dtype_promotion", "debug_key_reuse")


def _miss_reason(key: tuple, known: list[tuple]) -> str:
    """What tells `key` (a signature of `Jitted._entry`) from the nearest of the `known` ones."""
    if not known:
        return "as it never traced before"

    def differences(other: tuple) -> list[str]:
        in_tree, avals, static, *settings = key
        found = []
        if other[0] != in_tree:
            found.append(f"the arguments' structure is {in_tree}, was {other[0]}")
        elif other[1] != avals:
            for i, (new, old) in enumerate(zip(avals, other[1])):
                if new != old:
                    found.append(f"argument leaf {i} is {_shown_aval(new)}, was {_shown_aval(old)}")
        if other[2] != static:
            found.append(
                f"the static arguments are {_shown_static(static)}, were {_shown_static(other[2])}"
            )
        for name, new, old in zip(_SETTINGS, settings, other[3:]):
            if new != old:
                found.append(f"{name} is {new!r}, was {old!r}")
        return found

    nearest = min((differences(k) for k in reversed(known)), key=len)  # (ties: the latest)
    return "as " + "; ".join(nearest) + f" (it has traced {len(known)} signature(s))"


def _shown_aval(aval_key: tuple) -> str:
    shape, dtype, weak = aval_key
    return f"{'weak ' if weak else ''}{np.dtype(dtype).name}{list(shape)}"


def _shown_static(static: tuple) -> str:
    return ", ".join(f"{where}={value!r}" for where, (_, value) in static) or "none"


def _aval_key(x):
    if type(x) is Array:
        value = x._value
        return (value.shape, value.dtype, x.weak_type)
    if core.is_float0(x):
        return (x.shape, x.dtype, False)
    aval = core.get_aval(x)
    return (aval.shape, aval.dtype, aval.weak_type)


class _Entry:
    """A traced signature: the program, its output structure, the values it closes over and
    the matmul precision setting it was traced under (which its products name)."""

    __slots__ = (
        "jaxpr",
        "name",
        "precision",
        "out_tree",
        "consts",
        "donated",
        "single_output",
        "float0_leaves",
        "layouts",
        "_backend",
        "_executable",
        "_gpu_consts",
    )

    def __init__(
        self,
        jaxpr: ClosedJaxpr,
        name: str,
        out_tree,
        consts: list,
        donated: tuple[int, ...],
        float0_leaves: tuple[tuple[int, tuple[int, ...]], ...] = (),
    ):
        self.jaxpr = jaxpr
        self.name = name
        self.precision = config.default_matmul_precision
        self.out_tree = out_tree
        self.consts = consts
        self.donated = donated  # the program's inputs (consts first) that the caller donates
        # (position, shape) of the outputs that are float0 tangents (of integer or boolean
        # values): they hold no data, so the program does not compute them; they are made
        # again around each call.
        self.float0_leaves = float0_leaves
        self.single_output = out_tree == tree_util.tree_structure(0) and not float0_leaves
        # The layouts the program's sharding constraints ask of its results (None: none).
        self.layouts = result_layouts(jaxpr.jaxpr)
        self._backend = None
        self._executable = None
        self._gpu_consts: dict = {}

    def program(self):
        if self._backend is not config.jit_backend:
            self._executable = compile_jaxpr(self.jaxpr, self.donated)
            self._backend = config.jit_backend
        return self._executable

    # The program an eager call runs: the program itself, or `_wrapped_program` while a
    # profile is taken (a span per call, see `_time_calls`) or key reuse is checked (see
    # `check_keys`).
    executable = property(program)

    def _wrapped_program(self):
        program = self.program()
        if _Calls.timed:
            program = functools.partial(_timed_call, program, f"jit({self.name})")
        if _Calls.key_checker is not None:
            program = functools.partial(_Calls.key_checker, program, self.jaxpr, self.name)
        return program

    def on_gpu(self, device, leaves: list) -> list[Array]:
        """A call on `device` (the GPU holding some of the arguments), results left there; the
        closed-over constants are copied to it once, not at every call."""
        consts = self._gpu_consts.get(device)
        if consts is None:
            consts = self._gpu_consts[device] = [device_put(c, device) for c in self.consts]
        executable = _compile(self.jaxpr, device.backend, self.donated, device.runtime)

        def run(*args):
            with trace_events.span(f"jit({self.name})", device=device):
                return executable.on_device(list(args), device)

        if _Calls.key_checker is not None:
            return _Calls.key_checker(run, self.jaxpr, self.name, *consts, *leaves)
        return run(*consts, *leaves)

    def outputs(self, outs: list):
        if self.layouts is not None:
            outs = [
                laid_out(out, layout) if layout is not None and type(out) is Array else out
                for out, layout in zip(outs, self.layouts)
            ]
        if self.float0_leaves:
            outs = list(outs)
            for position, shape in self.float0_leaves:
                outs.insert(position, np.zeros(shape, dtypes.float0))
        return outs[0] if self.single_output else tree_util.tree_unflatten(self.out_tree, outs)


def _timed_call(program, name: str, *args):
    with trace_events.span(name):
        return program(*args)


class _Calls:
    """What wraps eager calls of jitted functions: a span each while a profile is taken
    (`timed`), and the key-reuse check of `funcgrad.key_reuse` while it is on. The property
    `_Entry.executable` is swapped rather than these tested, so that calls pay nothing
    otherwise."""

    timed = False
    key_checker: Callable | None = None

    @classmethod
    def install(cls) -> None:
        wrapped = cls.timed or cls.key_checker is not None
        _Entry.executable = property(_Entry._wrapped_program if wrapped else _Entry.program)


def _time_calls(recording: bool) -> None:
    _Calls.timed = recording
    _Calls.install()


def check_keys(checker: Callable | None) -> None:
    """Run eager calls through `checker(program, jaxpr, name, *args)` (None: directly)."""
    _Calls.key_checker = checker
    _Calls.install()


trace_events.listeners.append(_time_calls)


def _array_key(leaf):
    if type(leaf) is not Array:
        return None
    value = leaf._value
    return (value.shape, value.dtype, leaf.weak_type)


def _array_signature(args: tuple):
    """The cache key of a call whose positional arguments are pytrees of funcgrad arrays (the
    common case) and their leaves, found without building a treedef; None for any other
    call. Plain arrays, the most common of all, take a shorter path, and arrays in tuples,
    lists and dicts (parameters) the next (`_nested_key`); their keys never equal each other's
    or a tree's, which starts with a node type."""
    key = []
    for a in args:
        if type(a) is not Array:
            key, leaves = [], []
            if _nested_key(args, key, leaves):
                return tuple(key), leaves
            return tree_util.keyed_leaves(args, _array_key)
        value = a._value
        key.append((value.shape, value.dtype, a.weak_type))
    return tuple(key), args


def _nested_key(tree, key: list, leaves: list) -> bool:
    """Appends to `key` the parts of a tuple, list or dict of arrays and such containers, in
    prefix order (each container's type and length or keys, then its children; an array's
    shape, dtype and weak type), and its leaves to `leaves` in flatten order; False for
    anything else (None, a namedtuple, a registered node, a leaf that is not an array), which
    `tree_util.keyed_leaves` keys. One call per container, none per leaf: a training step's
    parameters are keyed in about 60% of the time `keyed_leaves` takes (1.24 µs against 2.01
    for a dict of two arrays and an array)."""
    if type(tree) is dict:
        names = tuple(tree)
        order = _SORTED_KEYS.get(names)
        if order is None:
            try:
                order = tuple(sorted(names))
            except TypeError:  # (keys that do not sort: flattening says so)
                return False
            if len(_SORTED_KEYS) >= 4096:
                _SORTED_KEYS.clear()
            _SORTED_KEYS[names] = order
        children = [tree[name] for name in order]
        key.append((dict, order))
    else:
        children = tree
        key.append((type(tree), len(tree)))
    for child in children:
        kind = type(child)
        if kind is Array:
            value = child._value
            key.append((value.shape, value.dtype, child.weak_type))
            leaves.append(child)
        elif kind not in (tuple, list, dict) or not _nested_key(child, key, leaves):
            return False
    return True


# A dict's keys in flatten order (sorted), by its own order: a call's dicts come with the same
# keys in the same order call after call.
_SORTED_KEYS: dict = {}


class Jitted:
    """A jit-compiled function: call it, or `lower(*args)` it to see the staged program."""

    def __init__(
        self,
        fun: Callable,
        static_argnums=(),
        static_argnames=(),
        donate_argnums=(),
        in_shardings=None,
        out_shardings=None,
        *,
        donate_argnames=(),
        device=None,
        inline: bool = False,
    ):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.name = function_name(fun)
        self.static_argnums, self.static_argnames = _static_argnums_and_names(
            fun, self.name, _static_tuple(static_argnums), _static_tuple(static_argnames)
        )
        # Outputs may be written into donated arguments' buffers (the compiled backend does;
        # the NumPy reference backend allocates every result).
        self.donate_argnums, self.donate_argnames = _static_argnums_and_names(
            fun,
            self.name,
            _static_tuple(donate_argnums),
            _static_tuple(donate_argnames),
            "donate_argnums",
        )
        overlap = set(self.donate_argnums) & set(self.static_argnums)
        overlap |= set(self.donate_argnames) & set(self.static_argnames)
        if overlap:
            raise ValueError(
                f"jit({self.name}): arguments {sorted(overlap, key=str)} are both static and "
                "donated; a static argument has no buffer to donate"
            )
        # Layouts over a mesh (`funcgrad.sharding`): checked against the arguments, and
        # recorded on the results, around a call of the same function jitted without them;
        # there is no partitioner to place the program's parts. A device to run on, and
        # inlining into an enclosing trace, go around that call too.
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self.device = device
        self.inline = inline
        self._unlaid = None
        if in_shardings is not None or out_shardings is not None or device is not None or inline:
            self._unlaid = Jitted(
                fun,
                static_argnums,
                static_argnames,
                donate_argnums,
                donate_argnames=donate_argnames,
            )
        self._cache: dict = {}
        caches.track(self)
        # Calls without keywords whose arguments are arrays, by the signature found without
        # flattening them: _array_signature's, or _static_signature's with static arguments.
        self._array_cache: dict = {}
        self._signature = self._static_signature if self.static_argnums else _array_signature
        self._static_positions: dict[int, frozenset] = {}  # by the number of arguments

    def _split(self, args: tuple, kwargs: dict):
        if not self.static_argnums and not self.static_argnames:
            return (), (), list(args), kwargs
        # A static argument left to its default (or passed by name) is not among `args`.
        static_positions = self._static_positions_of(len(args))
        static = tuple((i, args[i]) for i in sorted(static_positions))
        static += tuple(sorted((k, v) for k, v in kwargs.items() if k in self.static_argnames))
        for where, value in static:
            try:
                hash(value)
            except TypeError:
                raise ValueError(
                    f"jit({self.name}): static argument {where!r} must be hashable, since the "
                    f"compiled program is cached by its value; got {type(value).__name__} "
                    f"{value!r}. Pass a tuple instead of a list, or make the argument dynamic."
                ) from None
        dynamic_args = [a for i, a in enumerate(args) if i not in static_positions]
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        return static, static_positions, dynamic_args, dynamic_kwargs

    def _static_positions_of(self, num_args: int) -> frozenset:
        """The positions of the static arguments in a call of `num_args` positional ones."""
        static = self._static_positions.get(num_args)
        if static is None:
            n = num_args
            static = frozenset(i % n for i in self.static_argnums if -n <= i < n)
            self._static_positions[n] = static
        return static

    def _static_signature(self, args: tuple):
        """As `_array_signature`, for a call whose static arguments are positional and whose
        other arguments are arrays: the key holds each static value with its type. None for
        any other call, and for an unhashable static value (whose error `_split` gives)."""
        static = self._static_positions_of(len(args))
        key, leaves = [], []
        for i, a in enumerate(args):
            if i in static:
                key.append(_typed_static_key(a))
                continue
            array_key = _array_key(a)
            if array_key is None:
                return None
            key.append(array_key)
            leaves.append(a)
        key = tuple(key)
        try:
            hash(key)
        except TypeError:
            return None
        return key, leaves

    def _entry(self, args: tuple, kwargs: dict, precision: str | None, abstract: bool = False):
        """The traced signature of a call under matmul precision setting `precision` (the
        one in force, or a compiled program's own); `abstract` lets ShapeDtypeStructs stand
        for arrays (to lower or eval_shape without data)."""
        static, static_positions, dynamic_args, dynamic_kwargs = self._split(args, kwargs)
        leaves, in_tree = tree_util.tree_flatten((dynamic_args, dynamic_kwargs))
        leaves = [
            x if abstract and isinstance(x, core.ShapeDtypeStruct) else _operand(x, self.name)
            for x in leaves
        ]
        typed_static = tuple((where, _typed_static_key(value)) for where, value in static)
        key = (
            in_tree,
            tuple(map(_aval_key, leaves)),
            typed_static,
            precision,
            config.enable_x64,
            config.numpy_dtype_promotion,
            config.debug_key_reuse,
        )
        entry = self._cache.get(key)
        if entry is None:
            if config.no_tracing or config.explain_cache_misses:
                self._explain_miss(key)
            entry = self._trace(args, kwargs, static_positions, in_tree, leaves)
            # A program closing over a transformation's tracers belongs to that one trace.
            if not any(isinstance(c, core.Tracer) for c in entry.consts):
                self._cache[key] = entry
        return entry, [x for x in leaves if not core.is_float0(x)]

    def _trace(self, args, kwargs, static_positions, in_tree, leaves) -> _Entry:
        def flat_fun(*flat):
            # float0 arguments (tangents of integer and boolean values) hold no data: the
            # program does not take them, and the function gets them as they are.
            staged = iter(flat)
            flat = [x if core.is_float0(x) else next(staged) for x in leaves]
            dynamic_args, dynamic_kwargs = tree_util.tree_unflatten(in_tree, flat)
            dynamic_iter = iter(dynamic_args)
            full = [
                args[i] if i in static_positions else next(dynamic_iter) for i in range(len(args))
            ]
            static_kwargs = {k: v for k, v in kwargs.items() if k in self.static_argnames}
            out_leaves, out_tree = tree_util.tree_flatten(
                self.fun(*full, **static_kwargs, **dynamic_kwargs)
            )
            structure.append(out_tree)
            float0_leaves.extend(
                (i, leaf.shape) for i, leaf in enumerate(out_leaves) if core.is_float0(leaf)
            )
            return [leaf for leaf in out_leaves if not core.is_float0(leaf)]

        structure: list = []
        float0_leaves: list = []
        started = time.perf_counter()
        with collection_paused(), trace_events.span(f"jit({self.name}): trace"):
            closed, _ = trace_to_jaxpr(
                flat_fun,
                [core.get_aval(x) for x in leaves if not core.is_float0(x)],
                f"jit({self.name})",
            )
        (out_tree,) = structure
        if config.log_compiles:
            self._log_trace(args, kwargs, static_positions, leaves, time.perf_counter() - started)
        if monitoring.listening:
            monitoring.record_event_duration_secs(
                "/funcgrad/jit/trace_duration", time.perf_counter() - started, fun=self.name
            )
        donated = self._donated_leaves(args, kwargs, static_positions)
        num_consts = len(closed.consts)
        entry = _Entry(
            _hoisted(closed),
            self.name,
            out_tree,
            closed.consts,
            tuple(num_consts + i for i in donated),
            tuple(float0_leaves),
        )
        if config.debug_key_reuse:
            from funcgrad.key_reuse import check_key_reuse_jaxpr

            check_key_reuse_jaxpr(entry.jaxpr)
        return entry

    def _explain_miss(self, key: tuple) -> None:
        """Raise under `config.no_tracing`; log why `key` missed under
        `config.explain_cache_misses`."""
        reason = _miss_reason(key, list(self._cache))
        if config.no_tracing:
            raise RuntimeError(
                f"jit({self.name}) would trace a new program ({reason}), but no_tracing is set"
            )
        logger.warning("jit(%s) traces a new program %s", self.name, reason)

    def _log_trace(self, args, kwargs, static_positions, leaves, seconds: float) -> None:
        """One line per new program (config.log_compiles): the function, its arguments'
        types in flatten order, the static values it was traced for and the time it took."""
        types = ", ".join(
            f"float0{list(x.shape)}"
            if core.is_float0(x)
            else ("weak " if core.get_aval(x).weak_type else "") + core.get_aval(x).str_short()
            for x in leaves
        )
        static = [f"args[{i}]={args[i]!r}" for i in sorted(static_positions)]
        static += [f"{k}={v!r}" for k, v in sorted(kwargs.items()) if k in self.static_argnames]
        logger.warning(
            "jit(%s): traced a new program for arguments (%s)%s in %.1f ms",
            self.name,
            types,
            f" and static arguments {', '.join(static)}" if static else "",
            seconds * 1e3,
        )

    def _donated_leaves(self, args: tuple, kwargs: dict, static_positions: set) -> list[int]:
        """The flat positions of the donated arguments' leaves among the program's inputs
        (which float0 leaves are not): the positional ones', then those of the keyword
        arguments donate_argnames names (the dynamic keywords flatten in sorted order)."""
        donated = {i % len(args) for i in self.donate_argnums if -len(args) <= i < len(args)}
        dynamic = [(i in donated, a) for i, a in enumerate(args) if i not in static_positions]
        dynamic += [
            (k in self.donate_argnames, v)
            for k, v in sorted(kwargs.items())
            if k not in self.static_argnames
        ]
        positions, start = [], 0
        for is_donated, arg in dynamic:
            count = sum(not core.is_float0(x) for x in tree_util.tree_leaves(arg))
            if is_donated:
                positions += range(start, start + count)
            start += count
        return positions

    def __call__(self, *args, **kwargs):
        if self._unlaid is not None:
            return self._laid_out_call(args, kwargs)
        if config.disable_jit:
            return self.fun(*args, **kwargs)
        eager = core.current_trace() is core.eval_trace()
        precision = config.default_matmul_precision
        found = None if kwargs else self._signature(args)
        promotion = config.numpy_dtype_promotion
        if found is not None and (
            precision is not None
            or config.enable_x64
            or promotion != "standard"
            or config.debug_key_reuse
        ):
            # (a trace of its own per setting)
            settings = (precision, config.enable_x64, promotion, config.debug_key_reuse)
            found = ((*settings, found[0]), found[1])
        entry = self._array_cache.get(found[0]) if found is not None else None
        if entry is None:
            entry, leaves = self._entry(args, kwargs, precision)
            cacheable = not any(isinstance(c, core.Tracer) for c in entry.consts)
            if found is not None and cacheable:
                self._array_cache[found[0]] = entry
        else:
            leaves = found[1]
        if eager:
            device = gpu_of(leaves) if DeviceValue.made else None
            if device is None:
                outs = entry.executable(*entry.consts, *leaves)
            else:
                outs = entry.on_gpu(device, leaves)
        else:
            outs = jit_p.bind(*entry.consts, *leaves, jaxpr=entry.jaxpr, name=self.name)
        return entry.outputs(outs)

    def _laid_out_call(self, args: tuple, kwargs: dict):
        self._check_in_shardings(args, kwargs)
        if self.inline and core.current_trace() is not core.eval_trace():
            return self._lay_out_results(self.fun(*args, **kwargs))
        if self.device is None:
            return self._lay_out_results(self._unlaid(*args, **kwargs))
        from funcgrad.devices import default_device

        static = self._static_positions_of(len(args))
        args = tuple(a if i in static else _placed(a, self.device) for i, a in enumerate(args))
        kwargs = {
            k: v if k in self.static_argnames else _placed(v, self.device)
            for k, v in kwargs.items()
        }
        with default_device(self.device):
            out = self._unlaid(*args, **kwargs)
        return self._lay_out_results(_placed(out, self.device))

    def _check_in_shardings(self, args: tuple, kwargs: dict) -> None:
        from funcgrad.sharding import constrained

        if self.in_shardings is not None:
            _, _, dynamic_args, _ = self._split(args, kwargs)
            what = f"jit({self.name}) in_shardings"
            constrained(tuple(dynamic_args), self.in_shardings, what, "the dynamic arguments")

    def _lay_out_results(self, out):
        from funcgrad.sharding import constrained

        if self.out_shardings is None:
            return out
        return constrained(out, self.out_shardings, f"jit({self.name}) out_shardings", "the output")

    def lower(self, *args, **kwargs) -> Lowered:
        entry, _ = self._entry(args, kwargs, config.default_matmul_precision, abstract=True)
        return Lowered(self, entry)

    def trace(self, *args, **kwargs) -> Traced:
        """The traced program for these arguments (arrays or `ShapeDtypeStruct`s), before
        lowering: its jaxpr and the types in and out."""
        entry, _ = self._entry(args, kwargs, config.default_matmul_precision, abstract=True)
        _, _, dynamic_args, dynamic_kwargs = self._split(args, kwargs)
        return Traced(self, entry, tree_util.tree_structure((tuple(dynamic_args), dynamic_kwargs)))

    def eval_shape(self, *args, **kwargs):
        return self.trace(*args, **kwargs).out_info

    def clear_cache(self) -> None:
        self._cache.clear()
        self._array_cache.clear()

    def __repr__(self) -> str:
        return f"<jit-compiled function {self.name}>"


def _placed(arg, device):
    """`arg` with its arrays moved to `device`; Python scalars stay, for the program to place."""

    def place(leaf):
        return device_put(leaf, device) if isinstance(leaf, Array | np.ndarray) else leaf

    return tree_util.tree_map(place, arg)


def _operand(x, name: str):
    if type(x) is Array or isinstance(x, core.Tracer) or core.is_float0(x):
        return x
    try:
        return asarray(x)
    except TypeError as error:
        raise TypeError(
            f"jit({name}) got an argument of type {type(x).__name__} ({error}). Arguments of "
            "jitted functions are arrays, scalars or pytrees of them; pass other values as "
            "static (static_argnums / static_argnames)."
        ) from None


@dataclasses.dataclass(frozen=True)
class ArgInfo:
    """An argument of a traced jit signature: its type, and whether the call donates it."""

    aval: core.ShapedArray
    donated: bool

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype


class Traced:
    """A jit signature traced (`Jitted.trace`): its program, the structures and types of its
    arguments and results, and the way on (`lower`)."""

    def __init__(self, jitted: Jitted, entry: _Entry, in_tree):
        self._jitted = jitted
        self._entry = entry
        self.in_tree = in_tree
        self.fun_name = getattr(jitted, "__name__", jitted.name)
        self.donate_argnums = jitted.donate_argnums

    @property
    def jaxpr(self) -> ClosedJaxpr:
        return Lowered(self._jitted, self._entry).jaxpr

    @property
    def in_avals(self) -> tuple:
        return tuple(tree_util.tree_unflatten(self.in_tree, self.jaxpr.in_avals))

    @property
    def args_info(self) -> tuple:
        """Per argument leaf, its type and whether it is donated (`ArgInfo`), in the
        structure of `(args, kwargs)`."""
        num_consts = len(self._entry.consts)
        donated = set(self._entry.donated)
        infos = [
            ArgInfo(aval, num_consts + i in donated) for i, aval in enumerate(self.jaxpr.in_avals)
        ]
        return tuple(tree_util.tree_unflatten(self.in_tree, infos))

    @property
    def out_tree(self):
        return self._entry.out_tree

    @property
    def out_avals(self):
        return tree_util.tree_map(
            lambda s: core.ShapedArray(s.shape, s.dtype, s.weak_type), self.out_info
        )

    @property
    def out_info(self):
        """The results' shapes and dtypes, as `ShapeDtypeStruct`s in the results' structure."""
        shapes = [
            core.ShapeDtypeStruct(a.shape, a.dtype, a.weak_type)
            for a in self._entry.jaxpr.out_avals
        ]
        for position, shape in self._entry.float0_leaves:
            shapes.insert(position, core.ShapeDtypeStruct(shape, dtypes.float0))
        return tree_util.tree_unflatten(self._entry.out_tree, shapes)

    def lower(self) -> Lowered:
        return Lowered(self._jitted, self._entry)


class Lowered:
    """A traced jit signature: its program as text, and the way to compile it."""

    def __init__(self, jitted: Jitted, entry: _Entry):
        self._jitted = jitted
        self._entry = entry

    @property
    def jaxpr(self) -> ClosedJaxpr:
        entry = self._entry
        jaxpr = entry.jaxpr.jaxpr
        num_consts = len(entry.consts)
        unhoisted = Jaxpr(
            jaxpr.invars[:num_consts], jaxpr.invars[num_consts:], jaxpr.outvars, jaxpr.eqns
        )
        return ClosedJaxpr(unhoisted, entry.consts)

    def as_text(self, optimized: bool = False, source_info: bool = False) -> str:
        jaxpr = self.jaxpr
        if optimized:
            from funcgrad.compiler.passes import optimize

            jaxpr = optimize(jaxpr)
        return jaxpr.pretty_print(source_info=source_info)

    def compile(self) -> Compiled:
        return Compiled(self._jitted, self._entry)


class Compiled:
    """A compiled jit signature: call it with arguments of that signature."""

    def __init__(self, jitted: Jitted, entry: _Entry):
        self._jitted = jitted
        self._entry = entry
        self.executable = entry.program()

    def as_text(self) -> str:
        """The compiled program: LLVM IR on the llvm backend, the jaxpr on the numpy one."""
        return self.executable.as_text()

    def fusion_plan(self) -> str:
        """Which kernels, library calls and regions the program became (compiled backends)."""
        return self._compiled_only("fusion_plan")()

    def memory_analysis(self):
        """The memory plan: arena, argument, output and constant bytes, and each buffer's
        place in the arena (compiled backends)."""
        return self._compiled_only("memory_analysis")()

    def profile(self, *args, **kwargs) -> list[tuple[str, int, float]]:
        """Runs the program once on these arguments with each of its kernels and library
        calls timed: (what ran: a kernel by its name in `as_text`, a GEMM by its shape, a
        LAPACK routine, a copy; how many times; seconds in all), the costliest first. On a
        GPU each launch, GEMM and copy is timed on the device (the call walked launch by
        launch); on the CPU, a build of the program that reads the clock around each step
        (made at the first profile) runs (compiled backends)."""
        if not hasattr(self.executable, "profile"):
            raise AttributeError(
                "profile times a compiled program's kernels, and this one runs on the "
                f"{config.jit_backend!r} backend; select one with "
                "config.update('jit_backend', 'llvm')"
            )
        entry, leaves = self._jitted._entry(args, kwargs, self._entry.precision)
        if entry is not self._entry:
            raise TypeError(
                f"this compiled jit({self._jitted.name}) was lowered for other argument shapes, "
                "dtypes or static values; lower and compile again for these arguments"
            )
        return self.executable.profile(*entry.consts, *leaves)

    def _compiled_only(self, name: str):
        method = getattr(self.executable, name, None)
        if method is None:
            raise AttributeError(
                f"{name} describes a compiled program, and this one runs on the "
                f"{config.jit_backend!r} backend; select one with "
                "config.update('jit_backend', 'llvm')"
            )
        return method

    def __call__(self, *args, **kwargs):
        entry, leaves = self._jitted._entry(args, kwargs, self._entry.precision)
        if entry is not self._entry:
            raise TypeError(
                f"this compiled jit({self._jitted.name}) was lowered for other argument shapes, "
                "dtypes or static values; lower and compile again for these arguments"
            )
        self._jitted._check_in_shardings(args, kwargs)
        with trace_events.span(f"jit({self._jitted.name})"):
            outs = self.executable(*entry.consts, *leaves)
        return self._jitted._lay_out_results(entry.outputs(outs))


def jit(
    fun: Callable,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] = (),
    *,
    in_shardings: Any = None,
    out_shardings: Any = None,
    donate_argnames: str | Sequence[str] = (),
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
) -> Jitted:
    """Compile `fun`: trace it once per signature and run the staged program thereafter.

    `in_shardings` and `out_shardings` (shardings or PartitionSpecs over the current mesh, or
    tree prefixes of the dynamic positional arguments and of the output) check the arguments'
    shapes against the layouts and record the layouts on the results (`funcgrad.sharding`).
    `donate_argnames` donates arguments by name, as `donate_argnums` by position. `device` (or
    the first device of `backend`, "cpu" or "gpu") is where calls run: their arrays are moved
    there first. With `inline`, a call inside another traced function is traced into it
    rather than staged as a call of its own. `keep_unused` changes nothing (a program takes
    every argument it is given), and there are no `compiler_options` to set."""
    if not callable(fun):
        raise TypeError(f"jit expects a callable, got {type(fun).__name__}")
    if compiler_options:
        raise ValueError(
            f"jit: funcgrad's compiler takes no options, got compiler_options "
            f"{sorted(compiler_options)}; choose the backend with config jit_backend"
        )
    if backend is not None:
        if device is not None:
            raise ValueError("jit: give device or backend, not both")
        from funcgrad.devices import devices

        device = devices(backend)[0]
    if device is not None and (in_shardings is not None or out_shardings is not None):
        raise ValueError(
            "jit: give device (or backend) or in_shardings/out_shardings, not both: shardings "
            "say where arguments and results are"
        )
    return Jitted(
        fun,
        static_argnums,
        static_argnames,
        donate_argnums,
        in_shardings,
        out_shardings,
        donate_argnames=donate_argnames,
        device=device,
        inline=inline,
    )
