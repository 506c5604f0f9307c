"""Which primitives the LLVM backend compiles, recorded in each primitive's `lowerings["llvm"]`
(the coverage matrix's llvm column), and why the others need no lowering.

The lowering itself is shared with every compiled backend: the rewrite of complex values
into pairs of reals (`funcgrad.compiler.complex_lowering`), an element or root rule of
`funcgrad.compiler.fusion`, a LAPACK plan of `funcgrad.compiler.lapack`,
a step of `funcgrad.compiler.schedule`, or inlining of a call.
"""

from __future__ import annotations

from funcgrad.compiler import complex_lowering, fusion, lapack, schedule
from funcgrad.core import PRIMITIVES

for primitive, rule in {**fusion.element_rules, **fusion.root_rules}.items():
    primitive.lowerings["llvm"] = rule

# The parts of complex numbers, Fourier transforms (radix passes, and Bluestein's convolution
# through them) and eig (geev's real outputs, unpacked) exist only before `complex_lowering`
# rewrites them.
for name in ("complex", "real", "imag", "conj", "fft", "eig"):
    PRIMITIVES[name].lowerings["llvm"] = complex_lowering.lower_complex

for name, lower in lapack.DECOMPOSITIONS.items():
    PRIMITIVES[name].lowerings["llvm"] = lower

for name in (
    "cond",
    "while",
    "scan",
    "debug_callback",
    "check",
    "pmap",
    "shard_map",
    "pure_callback",
    "io_callback",
    "jit",
    "checkpoint",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vmap_call",
    "linear_solve",
):
    PRIMITIVES[name].lowerings["llvm"] = schedule.schedule

_COLLECTIVE_REASON = (
    "a collective: vmap rewrites it into array operations before anything is compiled, and "
    "pmap runs it in its communicator between compiled programs"
)
for name in (
    "psum",
    "pmax",
    "pmin",
    "all_gather",
    "psum_scatter",
    "ppermute",
    "all_to_all",
    "axis_index",
    "pbroadcast",
):
    PRIMITIVES[name].not_applicable.setdefault("llvm", _COLLECTIVE_REASON)
PRIMITIVES["custom_lin"].not_applicable.setdefault(
    "llvm", "appears only in linear programs, which are transposed before they run"
)
