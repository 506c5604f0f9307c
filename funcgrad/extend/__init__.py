"""funcgrad.extend: for code that extends funcgrad (`extend.core`: primitives of one's own and
the IR's types)."""

from funcgrad.extend import core

__all__ = ["core"]
