"""funcgrad.export: a jitted function's program for one signature, written to bytes and read
back in another process, where it runs, differentiates and batches like the original.

    exported = export.export(funcgrad.jit(f))(ShapeDtypeStruct((3,), np.float32))
    blob = exported.serialize(vjp_order=1)
    y = export.deserialize(blob).call(x)

The file holds funcgrad's own program (a jaxpr), not a compiler's: it runs on every backend,
and `vmap` and `jit` apply to it. What it can hold, and what not, is in docs/differences.md.
"""

from funcgrad.export.encoding import ExportError
from funcgrad.export.exported import (
    Exported,
    default_export_platform,
    deserialize,
    export,
    maximum_supported_calling_convention_version,
    minimum_supported_calling_convention_version,
)
from funcgrad.export.trees import (
    register_namedtuple_serialization,
    register_pytree_node_serialization,
)

__all__ = [
    "ExportError",
    "Exported",
    "default_export_platform",
    "deserialize",
    "export",
    "maximum_supported_calling_convention_version",
    "minimum_supported_calling_convention_version",
    "register_namedtuple_serialization",
    "register_pytree_node_serialization",
]
