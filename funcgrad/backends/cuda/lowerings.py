"""Which primitives the CUDA backend compiles, recorded in each primitive's `lowerings["cuda"]`
(the coverage matrix's cuda column).

The CUDA backend shares the whole compiler with the LLVM backend up to the kernel IR, so it
lowers what that backend lowers, the same way, and needs no lowering where it needs none. The
decompositions' LAPACK calls run as cuSOLVER's (`solver.py`), gesdd, geev and gees on the
host's LAPACK (`executable._Walk.lapack`).
"""

from __future__ import annotations

from funcgrad.backends.llvm import lowerings as _llvm  # noqa: F401  (fills the llvm column)
from funcgrad.core import PRIMITIVES

for primitive in PRIMITIVES.values():
    if "llvm" in primitive.lowerings:
        primitive.lowerings["cuda"] = primitive.lowerings["llvm"]
    if "llvm" in primitive.not_applicable:
        primitive.not_applicable.setdefault("cuda", primitive.not_applicable["llvm"])
