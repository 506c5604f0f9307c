"""LLVM IR text -> machine code for this CPU, through llvmlite.

Modules are optimized at -O3 with loop and SLP vectorization for the host's features (AVX-512
where present) and loaded into an MCJIT engine, which resolves C library symbols from the
running process.
"""

from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm

_lock = threading.Lock()  # LLVM's JIT state is not thread-safe


@functools.cache
def _initialized() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def target_machine():
    """A target machine for this CPU. Each engine takes ownership of (and later frees) the
    machine it is given, so every engine gets a new one."""
    _initialized()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        codemodel="jitdefault",
    )


def optimize(module: llvm.ModuleRef, machine) -> None:
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


class Compiled:
    """Machine code in memory; keep this object alive while its functions may be called."""

    def __init__(self, ir_text: str):
        with _lock:
            machine = target_machine()
            module = llvm.parse_assembly(ir_text)
            module.triple = machine.triple
            module.data_layout = str(machine.target_data)
            module.verify()
            optimize(module, machine)
            self.optimized_ir = str(module)
            self.engine = llvm.create_mcjit_compiler(module, machine)
            self.engine.finalize_object()
            self.entry_address = self.engine.get_function_address("entry")

    def assembly(self) -> str:
        with _lock:
            return target_machine().emit_assembly(llvm.parse_assembly(self.optimized_ir))
