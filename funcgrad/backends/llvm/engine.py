"""LLVM IR text -> machine code for this CPU, through llvmlite.

Modules are optimized at -O3 with loop and SLP vectorization for the host's features (AVX-512
where present) and compiled to an object file, which an MCJIT engine loads, resolving C
library symbols from the running process. Object files are kept in the on-disk compilation
cache (`funcgrad.compiler.cache`), keyed by the IR text, the target and the versions of
funcgrad and LLVM: a program compiled once on a machine is loaded, not compiled, by later
processes. The IR holds no address of the process that rendered it (library functions are
named symbols, Python callbacks sit in a table filled after loading), so a loaded object is
as good in any process as in the one that compiled it.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import llvmlite
import llvmlite.binding as llvm

import funcgrad
from funcgrad.compiler import cache

lock = threading.Lock()  # LLVM's JIT state is not thread-safe

# Code generation and -O3 pipeline settings; part of the cache key, so changing them recompiles.
_CODEGEN = {"opt": 3, "codemodel": "jitdefault"}
_PIPELINE = {
    "speed_level": 3,
    "loop_vectorization": True,
    "slp_vectorization": True,
    "loop_unrolling": True,
}


@functools.cache
def _initialized() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def _host() -> tuple[str, str]:
    """This CPU's name and features (asking LLVM costs a quarter millisecond)."""
    _initialized()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def target_machine():
    """A target machine for this CPU. Each engine takes ownership of (and later frees) the
    machine it is given, so every engine gets a new one."""
    cpu, features = _host()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu, features=features, **_CODEGEN)


def optimize(module: llvm.ModuleRef, machine) -> None:
    tuning = llvm.create_pipeline_tuning_options(speed_level=_PIPELINE["speed_level"])
    tuning.loop_vectorization = _PIPELINE["loop_vectorization"]
    tuning.slp_vectorization = _PIPELINE["slp_vectorization"]
    tuning.loop_unrolling = _PIPELINE["loop_unrolling"]
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


def _optimized_module(ir_text: str, machine) -> llvm.ModuleRef:
    module = llvm.parse_assembly(ir_text)
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    module.verify()
    optimize(module, machine)
    return module


def _cache_key(ir_text: str, machine) -> bytes:
    return cache.digest(
        ir_text,
        machine.triple,
        *_host(),
        repr(sorted(_CODEGEN.items())),
        repr(sorted(_PIPELINE.items())),
        f"llvmlite {llvmlite.__version__}, LLVM {llvm.llvm_version_info}",
        f"funcgrad {funcgrad.__version__}",
    )


class Compiled:
    """Machine code in memory; keep this object alive while its functions may be called.
    `from_cache` tells whether it was loaded from the on-disk cache instead of compiled."""

    def __init__(self, ir_text: str):
        self.ir_text = ir_text
        with lock:
            machine = target_machine()
            key = _cache_key(ir_text, machine)
            code = cache.load("llvm", key)
            self.from_cache = code is not None
            if code is None:
                code = machine.emit_object(_optimized_module(ir_text, machine))
            empty = llvm.parse_assembly("")
            empty.triple = machine.triple
            self.engine = llvm.create_mcjit_compiler(empty, machine)
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(code))
            self.engine.finalize_object()
            self.entry_address = self.engine.get_function_address("entry")
            if not self.entry_address:
                raise RuntimeError("the compiled module has no entry point")
            if not self.from_cache:
                cache.store("llvm", key, code)

    def fill_table(self, name: str, addresses: list[int]) -> None:
        """Write `addresses` into the module's global pointer array `name`."""
        with lock:
            start = self.engine.get_global_value_address(name)
        (ctypes.c_void_p * len(addresses)).from_address(start)[:] = addresses

    @functools.cached_property
    def optimized_ir(self) -> str:
        """The IR after LLVM's optimizations (made again on request: a program loaded from the
        cache was never optimized in this process)."""
        with lock:
            return str(_optimized_module(self.ir_text, target_machine()))

    def assembly(self) -> str:
        with lock:
            machine = target_machine()
            return machine.emit_assembly(_optimized_module(self.ir_text, machine))
