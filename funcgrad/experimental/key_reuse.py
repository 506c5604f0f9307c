"""Key-reuse checking, under JAX's experimental name: turn it on with
`funcgrad.config.update("debug_key_reuse", True)` or `with funcgrad.debug_key_reuse():`, and a
random key used up twice raises `KeyReuseError`. The checker itself is `funcgrad.key_reuse`."""

from funcgrad.key_reuse import (
    Forward,
    KeyReuseError,
    KeyReuseSignature,
    Sink,
    Source,
    View,
    check_key_reuse,
    check_key_reuse_jaxpr,
    consume,
    function_type_signature,
    jaxpr_type_signature,
)

__all__ = [
    "Forward",
    "KeyReuseError",
    "KeyReuseSignature",
    "Sink",
    "Source",
    "View",
    "check_key_reuse",
    "check_key_reuse_jaxpr",
    "consume",
    "function_type_signature",
    "jaxpr_type_signature",
]
