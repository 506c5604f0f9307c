"""A closed jaxpr's exact identity, as a digest: what lets a process find the program an
earlier one compiled before planning and rendering it again.

The digest covers every equation (primitive, parameters, operands, result types), the
constants' bytes, the literals' values and funcgrad's own sources (their sizes and
modification times: a changed compiler must not find code an older one made). It is exact or
absent: a parameter of a type it cannot write down faithfully (a Python function, an object
of a user's class) makes the whole program unkeyed, and such a program is planned and
rendered as usual (its rendered modules still key the machine code's cache).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import os

import numpy as np

import funcgrad
from funcgrad.compiler import cache
from funcgrad.ir import ClosedJaxpr, Jaxpr, Literal, Var


class _Unkeyed(Exception):
    pass


def digest(closed: ClosedJaxpr, *context: str) -> bytes | None:
    """The digest of `closed` and the `context` it is compiled in, or None."""
    writer = _Writer()
    try:
        writer.closed(closed)
    except _Unkeyed:
        return None
    return cache.digest("\0".join(writer.parts), *context, _sources(), funcgrad.__version__)


@functools.cache
def _sources() -> str:
    """funcgrad's source files by size and modification time."""
    root = os.path.dirname(os.path.abspath(funcgrad.__file__))
    entries = []
    for folder, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            if name.endswith(".py"):
                status = os.stat(os.path.join(folder, name))
                entries.append(
                    f"{os.path.relpath(folder, root)}/{name}:{status.st_size}:{status.st_mtime_ns}"
                )
    return "\n".join(entries)


class _Writer:
    """Writes a program as text into a list of parts (digested at the end): each variable by its
    place of first appearance and its type, each literal by its bytes."""

    def __init__(self):
        self.parts: list[str] = []
        self.avals: dict = {}  # (shape, dtype, weak type) -> text

    def write(self, text: str) -> None:
        self.parts.append(text)

    def closed(self, closed: ClosedJaxpr) -> None:
        self.write(f"consts {len(closed.consts)}")
        for value in closed.consts:
            self.array(np.asarray(value))
        self.jaxpr(closed.jaxpr)

    def jaxpr(self, jaxpr: Jaxpr) -> None:
        names: dict = {}
        write = self.write

        def atom(v) -> str:
            if type(v) is Var:
                name = names.get(v)
                if name is None:
                    name = names[v] = f"v{len(names)}:{self.aval(v.aval)}"
                return name
            if type(v) is Literal:
                value = v.val
                if not isinstance(value, np.generic):
                    value = np.asarray(value, v.aval.dtype)
                return f"{self.aval(v.aval)}={value.dtype.char}{value.tobytes().hex()}"
            raise _Unkeyed

        write(" ".join(["in", *map(atom, jaxpr.constvars), "|", *map(atom, jaxpr.invars)]))
        for eqn in jaxpr.eqns:
            write(eqn.primitive.name)
            write(" ".join(map(atom, eqn.invars)))
            params = eqn.params
            for name in sorted(params):
                write(name)
                self.param(params[name])
            write(" ".join(map(atom, eqn.outvars)))
        write(" ".join(["out", *map(atom, jaxpr.outvars)]))

    def aval(self, aval) -> str:
        if type(aval).__name__ != "ShapedArray":
            raise _Unkeyed
        key = (aval.shape, aval.dtype, aval.weak_type)
        text = self.avals.get(key)
        if text is None:
            weak = "w" if aval.weak_type else ""
            text = self.avals[key] = f"{_dtype(aval.dtype)}{list(aval.shape)}{weak}"
        return text

    def array(self, value: np.ndarray) -> None:
        if value.dtype.hasobject:
            raise _Unkeyed
        self.write(f"array {_dtype(value.dtype)} {list(value.shape)}")
        self.write(hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest())

    def param(self, value) -> None:
        kind = type(value)
        if value is None or kind in (bool, int, str):
            self.write(f"{kind.__name__} {value!r}")
        elif kind is float:
            self.write(f"float {value.hex()}")
        elif kind in (tuple, list):
            self.write(f"{kind.__name__} {len(value)}")
            for item in value:
                self.param(item)
        elif kind is dict:
            self.write(f"dict {len(value)}")
            for key in sorted(value, key=repr):
                self.param(key)
                self.param(value[key])
        elif isinstance(value, np.dtype):
            self.write(f"dtype {_dtype(value)}")
        elif isinstance(value, enum.Enum):
            self.write(f"enum {kind.__module__}.{kind.__qualname__}.{value.name}")
        elif isinstance(value, np.ndarray | np.generic):
            self.array(np.asarray(value))
        elif kind is ClosedJaxpr:
            self.write("closed jaxpr")
            self.closed(value)
        elif kind is Jaxpr:
            self.write("jaxpr")
            self.jaxpr(value)
        else:
            raise _Unkeyed


@functools.cache
def _dtype(dtype: np.dtype) -> str:
    """A dtype's name and layout (extension dtypes such as bfloat16 share a layout string)."""
    return f"{dtype.name}{dtype.str}"
