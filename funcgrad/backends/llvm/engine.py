"""LLVM IR text -> machine code for this CPU, through llvmlite.

Modules are optimized at -O3 with loop and SLP vectorization for the host's features (AVX-512
where present) and compiled to object files, several modules of one program on threads at
once, which an MCJIT engine loads and links, resolving C library symbols from the running
process. Object files are kept in the on-disk compilation cache (`funcgrad.compiler.cache`),
keyed by the modules' text, the target and the versions of funcgrad and LLVM: a program
compiled once on a machine is loaded, not compiled, by later processes. The IR holds no
address of the process that rendered it (library functions are named symbols, Python
callbacks sit in a table filled after loading), so a loaded object is as good in any process
as in the one that compiled it.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import struct
import threading

import llvmlite
import llvmlite.binding as llvm
import numpy as np
from llvmlite.binding import ffi

import funcgrad
from funcgrad.compiler import cache
from funcgrad.config import config
from funcgrad.once import once

lock = threading.Lock()  # LLVM's JIT state is not thread-safe

# Code generation and -O3 pipeline settings; part of the cache key, so changing them recompiles.
_CODEGEN = {"opt": 3, "codemodel": "jitdefault"}
_PIPELINE = {
    "speed_level": 3,
    "loop_vectorization": True,
    "slp_vectorization": True,
    "loop_unrolling": True,
}


@once
def _initialized() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def _host() -> tuple[str, str]:
    """This CPU's name and features (asking LLVM costs a quarter millisecond)."""
    _initialized()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def vector_bytes() -> int:
    """The width of this CPU's widest vectors the code may use: 64 bytes with AVX-512, else
    32 (AVX2's, and what LLVM splits wider vectors into elsewhere)."""
    return 64 if "+avx512f" in _host()[1].split(",") else 32


def target_machine():
    """A target machine for this CPU. Each engine takes ownership of (and later frees) the
    machine it is given, so every engine gets a new one."""
    cpu, features = _host()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu, features=features, **_CODEGEN)


def _pass_builder(machine):
    tuning = llvm.create_pipeline_tuning_options(speed_level=_PIPELINE["speed_level"])
    tuning.loop_vectorization = _PIPELINE["loop_vectorization"]
    tuning.slp_vectorization = _PIPELINE["slp_vectorization"]
    tuning.loop_unrolling = _PIPELINE["loop_unrolling"]
    return llvm.create_pass_builder(machine, tuning)


# A module whose text begins with this line is written as it should run (register tiles: its
# loops, vectors and multiply-adds are final), so it only has its accumulator slots made
# registers and its instructions combined before code generation: the full pipeline took
# twice as long over it (about 40 ms a tile function) and made no faster code.
WRITTEN_AS_IT_RUNS = "; written as it runs"


def _passes(builder, ir_text: str):
    if not ir_text.startswith(WRITTEN_AS_IT_RUNS):
        return builder.getModulePassManager()
    passes = llvm.create_new_module_pass_manager()
    passes.add_sroa_pass()
    passes.add_instruction_combine_pass()
    return passes


def _optimized_module(ir_text: str, machine, unlocked: bool = False) -> llvm.ModuleRef:
    """The module parsed into an LLVM context of its own (so that modules compile at once on
    threads, and what one compilation interns is freed with it) and optimized."""
    module = llvm.parse_assembly(ir_text, llvm.create_context())
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    module.verify()
    builder = _pass_builder(machine)
    passes = _passes(builder, ir_text)
    if unlocked:
        _unlocked("LLVMPY_RunNewModulePassManager")(passes, module, builder)
    else:
        passes.run(module, builder)
    return module


def _unlocked(name: str):
    """llvmlite takes one process-wide lock around every call into LLVM. Optimizing and
    emitting modules that own their contexts, with machines and pass builders of their own, is
    safe in LLVM to do at once, so the module-sized calls go around the lock (through it, in
    an llvmlite that wraps its calls otherwise)."""
    locked = getattr(ffi.lib, name)
    return getattr(locked, "_cfn", locked)


def _object(ir_text: str, unlocked: bool = False) -> bytes:
    """The object file of one module."""
    machine = target_machine()
    module = _optimized_module(ir_text, machine, unlocked)
    if not unlocked:
        return machine.emit_object(module)
    with ffi.OutputString() as error:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(machine, module, 1, error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return ctypes.string_at(
            ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer)
        )
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def _objects(modules: list[str]) -> list[bytes]:
    """Each module's object file, compiled on up to `config.num_threads` threads."""
    threads = min(len(modules), config.num_threads)
    if threads <= 1:
        return [_object(text) for text in modules]
    with concurrent.futures.ThreadPoolExecutor(threads) as workers:
        return list(workers.map(functools.partial(_object, unlocked=True), modules))


def _cache_key(modules: list[str], machine) -> bytes:
    return cache.digest(
        f"{len(modules)} modules",
        *modules,
        machine.triple,
        *_host(),
        repr(sorted(_CODEGEN.items())),
        repr(sorted(_PIPELINE.items())),
        f"llvmlite {llvmlite.__version__}, LLVM {llvm.llvm_version_info}",
        f"funcgrad {funcgrad.__version__}",
    )


_LENGTH = struct.Struct("<Q")


def pack(objects: list[bytes]) -> bytes:
    return b"".join(_LENGTH.pack(len(code)) + code for code in objects)


def unpack(payload: bytes) -> list[bytes]:
    objects, at = [], 0
    while at < len(payload):
        (length,) = _LENGTH.unpack_from(payload, at)
        at += _LENGTH.size
        objects.append(payload[at : at + length])
        at += length
    return objects


class Compiled:
    """Machine code in memory; keep this object alive while its functions may be called.
    `modules` are the texts of modules that link into one program (`ModuleRenderer.modules`),
    one of which defines `entry`. `from_cache` tells whether the code was loaded from the
    on-disk cache instead of compiled."""

    def __init__(self, modules: list[str]):
        self.modules = modules
        with lock:
            machine = target_machine()
            key = _cache_key(modules, machine)
            payload = cache.load("llvm", key)
            self.from_cache = payload is not None
            objects = _objects(modules) if payload is None else unpack(payload)
            empty = llvm.parse_assembly("")
            empty.triple = machine.triple
            self.engine = llvm.create_mcjit_compiler(empty, machine)
            for code in objects:
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(code))
            self.engine.finalize_object()
            self.entry_address = self.engine.get_function_address("entry")
            if not self.entry_address:
                raise RuntimeError("the compiled module has no entry point")
            if not self.from_cache:
                cache.store("llvm", key, pack(objects))

    def fill_table(self, name: str, addresses: list[int]) -> None:
        """Write `addresses` into the module's global pointer array `name`."""
        with lock:
            start = self.engine.get_global_value_address(name)
        (ctypes.c_void_p * len(addresses)).from_address(start)[:] = addresses

    def int64s(self, name: str, count: int) -> np.ndarray:
        """The module's global int64 array `name`, in place."""
        with lock:
            start = self.engine.get_global_value_address(name)
        return np.ctypeslib.as_array((ctypes.c_int64 * count).from_address(start))

    @functools.cached_property
    def optimized_ir(self) -> str:
        """The IR after LLVM's optimizations (made again on request: a program loaded from the
        cache was never optimized in this process)."""
        with lock:
            return "\n".join(
                str(_optimized_module(text, target_machine())) for text in self.modules
            )

    def assembly(self) -> str:
        with lock:
            return "\n".join(
                machine.emit_assembly(_optimized_module(text, machine))
                for text, machine in ((text, target_machine()) for text in self.modules)
            )
