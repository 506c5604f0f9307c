"""Global switches, with JAX's names: `funcgrad.config.update("jax_debug_nans", True)` (the
`jax_` prefix may be left out: `update("debug_nans", True)`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

JIT_BACKENDS = ("llvm", "numpy", "cuda", "cuda_emulator")
PLATFORMS = ("cpu", "gpu", "cuda", "cuda_emulator")


# The compilation cache's default bound: a few thousand programs' machine code and plans.
DEFAULT_CACHE_MAX_SIZE = 2 << 30


def _from_environment(variable: str, kind: type, default):
    text = os.environ.get(variable)
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{variable} must be {kind.__name__}, got {text!r}") from None


def _flag_from_environment(variable: str, default: bool) -> bool:
    text = os.environ.get(variable)
    if text is None:
        return default
    if text.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if text.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{variable} must be 0 or 1 (or true/false, yes/no, on/off), got {text!r}")


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("FUNCGRAD_CACHE_DIR") or os.path.join(base, "funcgrad")


class Config:
    """The settings; read them as attributes (`config.debug_nans`)."""

    def __init__(self):
        # Raise where an operation makes a NaN (debug_nans) or an infinity (debug_infs),
        # naming the primitive and the user's line; jitted programs then run again on the
        # reference backend to find it.
        self.debug_nans = False
        self.debug_infs = False
        # What funcgrad.numpy does where operands of different ranks broadcast together:
        # "allow" (NumPy's rule), "warn" or "raise", for code that means to keep ranks apart.
        self.numpy_rank_promotion = "allow"
        # How funcgrad.numpy promotes operands of different dtypes: "standard" (the lattice of
        # funcgrad.dtypes) or "strict", where arrays of different dtypes do not meet and Python
        # scalars meet only arrays of their kind or above, so every widening is written out.
        # jit keys its traces by it.
        self.numpy_dtype_promotion = "standard"
        self.disable_jit = False
        # When a transformation returns, raise if a tracer it made is still referenced (stored
        # in a global, a list or a closure that outlives it), naming the line that made it,
        # instead of failing later where the escaped tracer is used
        # (FUNCGRAD_CHECK_TRACER_LEAKS). Each transformation then costs a scan of the heap.
        self.check_tracer_leaks = _flag_from_environment("FUNCGRAD_CHECK_TRACER_LEAKS", False)
        # Log each program jit traces for a new signature (at WARNING level, on the "funcgrad"
        # logger), with the function's name and argument types: a loop that retraces at every
        # step shows itself.
        self.log_compiles = False
        # Log (at WARNING, on the "funcgrad" logger) why each jitted function traced again: the
        # argument whose shape, dtype or weak type, the static value or the setting that
        # differs from the nearest signature it had traced, or that it never traced.
        self.explain_cache_misses = False
        # Raise where a jitted function would trace (its cache misses): a block that should
        # only run programs already traced (a timed loop, a served model) proves it does.
        self.no_tracing = False
        # Type-check every program as it is staged, and again after each compiler pass
        # (`ir.check_jaxpr`; FUNCGRAD_ENABLE_CHECKS): a transformation or pass that builds an
        # ill-typed program is named where it does, not where the program later fails.
        self.enable_checks = _flag_from_environment("FUNCGRAD_ENABLE_CHECKS", False)
        # Where jitted programs run: "llvm" compiles them to native code, "numpy" runs them on
        # the reference backend, "cuda" on a CUDA GPU through CuPy, and "cuda_emulator" runs
        # the generated CUDA C on the host (for testing it without a GPU).
        # FUNCGRAD_JIT_BACKEND sets it for a whole process.
        self.jit_backend = _checked_backend(os.environ.get("FUNCGRAD_JIT_BACKEND", "llvm"))
        # Where new arrays live, and operations and jitted calls run when no operand is placed
        # on a device (FUNCGRAD_PLATFORM): "cpu", "cuda" (or "gpu"), or "cuda_emulator" (the
        # emulated GPU, for tests). None, the default, takes a CUDA GPU when CuPy finds one,
        # else the CPU.
        self.platform = _checked_platform(os.environ.get("FUNCGRAD_PLATFORM") or None)
        # Random keys and bits as JAX derives them by default (see funcgrad.random); False
        # gives JAX's earlier scheme.
        self.threefry_partitionable = True
        # The precision of Gumbel draws whose `mode` is None (random.gumbel, categorical,
        # choice): "high" when True, "low" when False, as JAX's option of the same name.
        self.use_high_dynamic_range_gumbel = False
        # Raise KeyReuseError where a random key is used up twice: drawn from (or split) twice,
        # eagerly or in a traced program before it runs (see funcgrad.key_reuse). jit keys its
        # traces by it.
        self.debug_key_reuse = False
        # Transfer guards (funcgrad.transfer_guards): for each direction data moves in, "allow"
        # (None means the same), "log" or "disallow" (implicit transfers), "log_explicit" or
        # "disallow_explicit" (every transfer). Updating transfer_guard sets all three.
        self.transfer_guard = None
        self.transfer_guard_host_to_device = None
        self.transfer_guard_device_to_host = None
        self.transfer_guard_device_to_device = None
        # Virtual CPU devices per process (pmap runs one thread per device).
        self.num_cpu_devices = _from_environment("FUNCGRAD_NUM_CPU_DEVICES", int, 1)
        # Threads a compiled program may use for its large loops (FUNCGRAD_NUM_THREADS); by
        # default the cores this process may run on.
        self.num_threads = _from_environment("FUNCGRAD_NUM_THREADS", int, _usable_cores())
        # Seconds a collective waits for the other devices or processes before it fails.
        self.collective_timeout = _from_environment("FUNCGRAD_COLLECTIVE_TIMEOUT", float, 300.0)
        # Compiled machine code is kept on disk, so a later process loads a program it has
        # compiled before instead of compiling it again. FUNCGRAD_COMPILATION_CACHE=0 turns it
        # off; FUNCGRAD_CACHE_DIR moves it (default: $XDG_CACHE_HOME/funcgrad or
        # ~/.cache/funcgrad).
        self.enable_compilation_cache = _flag_from_environment("FUNCGRAD_COMPILATION_CACHE", True)
        self.compilation_cache_dir = _default_cache_dir()
        # The most bytes the cache folder holds (FUNCGRAD_CACHE_MAX_SIZE): past it, the entries
        # used longest ago are removed. -1: no bound; 0: nothing is kept.
        self.compilation_cache_max_size = _from_environment(
            "FUNCGRAD_CACHE_MAX_SIZE", int, DEFAULT_CACHE_MAX_SIZE
        )
        # The precision of float32 contractions (dot_general, convolutions run as GEMMs) that
        # name none. None means full float32, funcgrad's default everywhere; a lower one
        # ("tensorfloat32", "high", "default", ...) lets a GPU with tensor cores round the
        # operands to TF32 (10 mantissa bits), which is several times faster. CPUs compute in
        # full float32 whatever it says. Products traced under a setting take it as their
        # precision (jit keys its traces by it); one naming none reads it when its GEMM runs.
        self.default_matmul_precision = None
        # 64-bit defaults (FUNCGRAD_ENABLE_X64): Python scalars, `float` and `int` as dtypes,
        # creation functions, random values, indices and counts become float64 and int64, as
        # under JAX's flag of the same name. float64 data is kept either way. jit keys its
        # traces by it.
        self.enable_x64 = False
        if _flag_from_environment("FUNCGRAD_ENABLE_X64", False):
            self.update("enable_x64", True)

    def update(self, name: str, value) -> None:
        name = name.removeprefix("jax_")
        if not hasattr(self, name) or name.startswith("_"):
            known = ", ".join(sorted(k for k in vars(self) if not k.startswith("_")))
            raise AttributeError(f"unknown configuration option {name!r}; options: {known}")
        if name == "jit_backend":
            value = _checked_backend(value)
        elif name == "platform":
            from funcgrad.devices import use_platform

            value = _checked_platform(value)
            use_platform(value)  # raises, leaving the setting, if it cannot be used
        elif name == "default_matmul_precision":
            value = _checked_precision(value)
        elif name == "numpy_rank_promotion":
            if value not in ("allow", "warn", "raise"):
                raise ValueError(
                    f"numpy_rank_promotion must be 'allow', 'warn' or 'raise', got {value!r}"
                )
        elif name == "numpy_dtype_promotion":
            if value not in ("standard", "strict"):
                raise ValueError(
                    f"numpy_dtype_promotion must be 'standard' or 'strict', got {value!r}"
                )
            from funcgrad import dtypes

            dtypes.use_promotion(value)
        elif name == "enable_x64":
            if not isinstance(value, bool):
                raise TypeError(f"enable_x64 must be True or False, got {value!r}")
            from funcgrad import dtypes  # (dtypes needs nothing from here)

            dtypes.use_x64(value)
        elif name in _SWITCHES and not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
        elif name.startswith("transfer_guard"):
            from funcgrad import transfer_guards  # (it reads this module)

            if value is not None and value not in transfer_guards.LEVELS:
                raise ValueError(
                    f"{name} must be one of {', '.join(map(repr, transfer_guards.LEVELS))} or "
                    f"None, got {value!r}"
                )
            if name == "transfer_guard":
                for direction in transfer_guards.DIRECTIONS:
                    setattr(self, f"transfer_guard_{direction}", value)
            setattr(self, name, value)
            transfer_guards.refresh()
            return
        elif name == "debug_key_reuse":
            if not isinstance(value, bool):
                raise TypeError(f"debug_key_reuse must be True or False, got {value!r}")
            from funcgrad import key_reuse  # (it builds on everything)

            key_reuse.use(value)
        elif name == "compilation_cache_max_size":
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise ValueError(
                    "compilation_cache_max_size must be a number of bytes, 0 (keep nothing) or "
                    f"-1 (no bound), got {value!r}"
                )
        elif name == "compilation_cache_dir":
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(
                    f"compilation_cache_dir must be a path (str or os.PathLike), got {value!r}"
                )
            value = os.fspath(value)
        setattr(self, name, value)


# The options that are True or False.
_SWITCHES = (
    "debug_nans",
    "debug_infs",
    "log_compiles",
    "enable_compilation_cache",
    "check_tracer_leaks",
    "use_high_dynamic_range_gumbel",
    "explain_cache_misses",
    "no_tracing",
    "enable_checks",
)


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _checked_platform(name: str | None) -> str | None:
    if name is not None and name not in PLATFORMS:
        raise ValueError(
            f"unknown platform {name!r}; choose one of {', '.join(PLATFORMS)}, or None for a "
            "CUDA GPU when one is found (config.update('platform', ...) or FUNCGRAD_PLATFORM)"
        )
    return name


def _checked_precision(name: str | None) -> str | None:
    from funcgrad.lax.linalg import PRECISION_NAMES  # (lax reads this module as it loads)

    if name is None:
        return None
    if not isinstance(name, str) or name.lower() not in PRECISION_NAMES:
        raise ValueError(
            f"unknown matmul precision {name!r}; choose one of {', '.join(PRECISION_NAMES)}, "
            "or None for full float32"
        )
    return name.lower()


def _checked_backend(name: str) -> str:
    if name not in JIT_BACKENDS:
        raise ValueError(
            f"unknown jit backend {name!r}; choose one of {', '.join(JIT_BACKENDS)} "
            "(config.update('jit_backend', ...) or FUNCGRAD_JIT_BACKEND)"
        )
    return name


config = Config()


@contextlib.contextmanager
def _scoped(name: str, value) -> Iterator[None]:
    """Option `name` set to `value` (checked as `config.update` checks it) inside the block,
    and back to what it was after, however the block ends."""
    previous = getattr(config, name)
    config.update(name, value)
    try:
        yield
    finally:
        config.update(name, previous)


def disable_jit(disable: bool = True) -> contextlib.AbstractContextManager[None]:
    """Run jitted functions as plain Python inside the block (to debug them with prints)."""
    return _scoped("disable_jit", disable)


def default_matmul_precision(new_val: str | None) -> contextlib.AbstractContextManager[None]:
    """Inside the block, float32 contractions that name no precision run at `new_val` (see
    `config.default_matmul_precision`)."""
    return _scoped("default_matmul_precision", new_val)


def enable_x64(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, the defaults are 64-bit (or 32-bit, for `False`): see
    `config.enable_x64`."""
    return _scoped("enable_x64", new_val)


def debug_nans(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, an operation that makes a NaN raises, naming the primitive and the
    line (see `config.debug_nans`)."""
    return _scoped("debug_nans", new_val)


def debug_key_reuse(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, a random key used up twice raises KeyReuseError (see
    `config.debug_key_reuse`)."""
    return _scoped("debug_key_reuse", new_val)


@contextlib.contextmanager
def transfer_guard(new_val: str) -> Iterator[None]:
    """Inside the block, transfers in every direction are allowed, logged or refused as
    `new_val` says (see funcgrad.transfer_guards); each direction's own setting is back as it
    was after."""
    directions = ("host_to_device", "device_to_device", "device_to_host")
    with contextlib.ExitStack() as stack:
        for name in (*(f"transfer_guard_{d}" for d in directions), "transfer_guard"):
            stack.enter_context(_scoped(name, new_val))
        yield


def transfer_guard_host_to_device(new_val: str) -> contextlib.AbstractContextManager[None]:
    """Inside the block, host-to-device transfers are allowed, logged or refused as `new_val`
    says (see funcgrad.transfer_guards)."""
    return _scoped("transfer_guard_host_to_device", new_val)


def transfer_guard_device_to_host(new_val: str) -> contextlib.AbstractContextManager[None]:
    """Inside the block, device-to-host transfers are allowed, logged or refused as `new_val`
    says (see funcgrad.transfer_guards)."""
    return _scoped("transfer_guard_device_to_host", new_val)


def transfer_guard_device_to_device(new_val: str) -> contextlib.AbstractContextManager[None]:
    """Inside the block, device-to-device transfers are allowed, logged or refused as
    `new_val` says (see funcgrad.transfer_guards)."""
    return _scoped("transfer_guard_device_to_device", new_val)


def debug_infs(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, an operation that makes an infinity raises (see `config.debug_infs`)."""
    return _scoped("debug_infs", new_val)


def log_compiles(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, each program jit traces is logged (see `config.log_compiles`)."""
    return _scoped("log_compiles", new_val)


def explain_cache_misses(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, each time a jitted function traces again, the reason is logged (see
    `config.explain_cache_misses`)."""
    return _scoped("explain_cache_misses", new_val)


def no_tracing(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, a jitted function that would trace raises instead (see
    `config.no_tracing`)."""
    return _scoped("no_tracing", new_val)


def check_tracer_leaks(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, tracer leaks are checked (or not, for `False`): see
    `config.check_tracer_leaks` and `checking_leaks`."""
    return _scoped("check_tracer_leaks", new_val)


def numpy_rank_promotion(new_val: str) -> contextlib.AbstractContextManager[None]:
    """Inside the block, broadcasting operands of different ranks is "allow"ed, "warn"s or
    "raise"s (see `config.numpy_rank_promotion`)."""
    return _scoped("numpy_rank_promotion", new_val)


def numpy_dtype_promotion(new_val: str) -> contextlib.AbstractContextManager[None]:
    """Inside the block, operands of different dtypes promote as "standard" or "strict" says
    (see `config.numpy_dtype_promotion`)."""
    return _scoped("numpy_dtype_promotion", new_val)


def threefry_partitionable(new_val: bool = True) -> contextlib.AbstractContextManager[None]:
    """Inside the block, random bits are derived by the partitionable scheme, or the earlier
    one for `False` (see `config.threefry_partitionable`)."""
    return _scoped("threefry_partitionable", new_val)


def checking_leaks() -> contextlib.AbstractContextManager[None]:
    """Inside the block, a transformation that returns while a tracer it made is still
    referenced raises (see `config.check_tracer_leaks`)."""
    return _scoped("check_tracer_leaks", True)
