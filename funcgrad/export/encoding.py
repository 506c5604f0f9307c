"""Programs as data: a closed jaxpr written as JSON-able values plus binary blobs, and read
back.

Every value a program holds is written by its type, never pickled, so reading an exported
file runs no code of the file's choosing: a primitive is named and looked up among this
process's primitives; an enum, a named tuple, a dataclass or a function in a parameter must
be one of funcgrad's own, named by module and qualified name and found there again; arrays
are raw bytes with their dtype and shape. A value of any other type is refused when
exporting, with the equation and parameter that hold it.

The user's derivative rules (`custom_jvp`, `custom_vjp`) are Python functions: they are
traced into programs of their own when exporting (`funcgrad.export.rules`), kept in a table
that the equations refer to by number, so that a rule whose function calls the function
itself (as a jvp rule computing the primal does) is written once. Rules are kept to the
derivative order the writer is given: the rules of the calls inside a kept rule's programs
serve the next order, and a solver's adjoint may call the solver again at every order.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
from typing import Any

import numpy as np

from funcgrad import core, dtypes
from funcgrad.array import Array
from funcgrad.core import ShapedArray
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
from funcgrad.tree_util import PyTreeDef


class ExportError(ValueError):
    """A program that cannot be written down, or a file that cannot be read back."""


# Parameters holding the user's derivative rules, by primitive: they are traced, not written.
RULE_PARAMS = {"custom_jvp_call": "jvp", "custom_vjp_call": "rules", "custom_lin": "rules"}

# Primitives no file can hold, and why.
_REFUSED = {
    "pure_callback": "it calls a Python function of this process",
    "io_callback": "it calls a Python function of this process",
    "debug_callback": "it calls a Python function of this process (a debug print or callback)",
    "pmap": "it runs over this process's devices (export the function pmap maps instead)",
    "shard_map": "it runs over this process's mesh of devices",
}


class Writer:
    """Writes a closed jaxpr; `blobs` collects the arrays' bytes, `rules` the traced rules."""

    def __init__(self, vjp_order: int = 0):
        self.vjp_order = vjp_order  # how deep rules are kept: 1 keeps the program's own
        self.blobs: list[bytes] = []
        self.rules: list = []  # the rules table, filled by `funcgrad.export.rules`
        self.rule_numbers: dict = {}  # a rule's identity -> its number in the table
        self.where: list[str] = []  # the equations being written, for errors
        self.rule_depth = 0  # rules being traced inside one another
        self.held: list = []  # the objects whose ids key `rule_numbers`

    def closed(self, closed: ClosedJaxpr) -> dict:
        return {
            "jaxpr": self.jaxpr(closed.jaxpr),
            "consts": [self.value(np.asarray(c)) for c in closed.consts],
        }

    def jaxpr(self, jaxpr: Jaxpr) -> dict:
        numbers: dict[Var, int] = {}

        def define(v: Var) -> dict:
            numbers[v] = len(numbers)
            return self.aval(v.aval)

        aliases: dict[Var, Any] = {}  # the results of layout constraints: their operands

        def atom(v):
            v = aliases.get(v, v)
            if type(v) is Literal:
                return {"literal": self.value(v.val), "aval": self.aval(v.aval)}
            return numbers[v]

        constvars = [define(v) for v in jaxpr.constvars]
        invars = [define(v) for v in jaxpr.invars]
        eqns = []
        for number, eqn in enumerate(jaxpr.eqns):
            if eqn.primitive.name == "sharding_constraint":
                # (an exported program runs on one device: a layout there is the identity)
                aliases[eqn.outvars[0]] = aliases.get(eqn.invars[0], eqn.invars[0])
                continue
            if eqn.primitive.name == "custom_vmap_call":
                eqn = _as_call(eqn)
            self.where.append(f"equation {number} ({eqn.primitive.name})")
            refused = _REFUSED.get(eqn.primitive.name)
            if refused is not None:
                raise ExportError(f"cannot export {self._place()}: {refused}")
            try:
                eqns.append(
                    [
                        eqn.primitive.name,
                        [atom(v) for v in eqn.invars],
                        [define(v) for v in eqn.outvars],
                        self.params(eqn),
                    ]
                )
            finally:
                self.where.pop()
        outvars = [atom(v) for v in jaxpr.outvars]
        return {"constvars": constvars, "invars": invars, "eqns": eqns, "outvars": outvars}

    def _place(self) -> str:
        return ", ".join(self.where) or "a value"

    def params(self, eqn: JaxprEqn) -> dict:
        from funcgrad.export import rules

        written = {}
        rule_param = RULE_PARAMS.get(eqn.primitive.name)
        for name, value in eqn.params.items():
            if name == rule_param:
                written[name] = rules.write(self, eqn, value)
                continue
            self.where.append(f"parameter {name!r}")
            try:
                written[name] = self.value(value)
            finally:
                self.where.pop()
        return written

    def aval(self, aval: ShapedArray) -> list:
        return [list(aval.shape), _dtype_name(aval.dtype), aval.weak_type]

    def value(self, value: Any) -> Any:
        kind = type(value)
        if value is None or kind in (bool, str):
            return value
        if kind is int:
            return value
        if kind is float:
            return {"float": value.hex()}
        if kind is complex:
            return {"complex": [value.real.hex(), value.imag.hex()]}
        if kind is list:
            return [self.value(v) for v in value]
        if kind is dict:
            return {"dict": [[self.value(k), self.value(v)] for k, v in value.items()]}
        if isinstance(value, np.dtype):
            return {"dtype": _dtype_name(value)}
        if isinstance(value, np.generic):
            return {"scalar": _dtype_name(value.dtype), "bytes": value.tobytes().hex()}
        if isinstance(value, (np.ndarray, Array)):
            if value.dtype == dtypes.float0:  # (no data to write)
                return {"float0": list(value.shape)}
            array = np.ascontiguousarray(np.asarray(value))
            self.blobs.append(array.tobytes())
            return {
                "array": len(self.blobs) - 1,
                "dtype": _dtype_name(array.dtype),
                "shape": list(array.shape),
            }
        if kind is ShapedArray:
            return {"aval": self.aval(value)}
        if kind is slice:
            return {
                "slice": [self.value(value.start), self.value(value.stop), self.value(value.step)]
            }
        if kind is Jaxpr:
            return {"open_jaxpr": self.jaxpr(value)}
        if kind is ClosedJaxpr:
            return {"closed_jaxpr": self.closed(value)}
        if kind is core.Primitive:
            return {"primitive": value.name}
        if kind is PyTreeDef:
            from funcgrad.export import trees

            return {"treedef": trees.write(value)}
        if isinstance(value, enum.Enum):
            return {"enum": _qualified(kind, self.where), "name": value.name}
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            return {"named": _qualified(kind, self.where), "fields": [self.value(v) for v in value]}
        if kind is tuple:
            return {"tuple": [self.value(v) for v in value]}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {
                f.name: self.value(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.init
            }
            return {"dataclass": _qualified(kind, self.where), "fields": fields}
        if callable(value) and _is_own_function(value):
            return {"function": f"{value.__module__}:{value.__qualname__}"}
        raise ExportError(
            f"cannot export {self._place()}: a value of type "
            f"{kind.__module__}.{kind.__qualname__} ({value!r:.80}) has no exported form; "
            "programs holding host callbacks or objects of the user's own classes cannot be "
            "exported"
        )


class Reader:
    """Reads what `Writer` wrote; `rules` are the table's rule objects, made before the
    programs that refer to them are read."""

    def __init__(self, blobs: list[memoryview], rules: list):
        self.blobs = blobs
        self.rules = rules
        self.left_out: list = []  # rules past the file's derivative order

    def closed(self, written: dict) -> ClosedJaxpr:
        from funcgrad.lax.base import asarray

        consts = [asarray(self.value(c)) for c in written["consts"]]
        return ClosedJaxpr(self.jaxpr(written["jaxpr"]), consts)

    def jaxpr(self, written: dict) -> Jaxpr:
        variables: list[Var] = []

        def define(aval) -> Var:
            v = Var(self.aval(aval))
            variables.append(v)
            return v

        def atom(a):
            if type(a) is dict:
                aval = self.aval(a["aval"])
                val = self.value(a["literal"])
                return Literal(val, aval)
            return variables[a]

        constvars = [define(a) for a in written["constvars"]]
        invars = [define(a) for a in written["invars"]]
        eqns = []
        for number, (name, ins, outs, params) in enumerate(written["eqns"]):
            primitive = core.PRIMITIVES.get(name)
            if primitive is None:
                raise ExportError(
                    f"the exported program's equation {number} applies the primitive {name!r}, "
                    "which this version of funcgrad does not have"
                )
            invars_eqn = [atom(a) for a in ins]
            read_params = {
                key: self.rule(value) if key == RULE_PARAMS.get(name) else self.value(value)
                for key, value in params.items()
            }
            outvars = [define(a) for a in outs]
            eqns.append(JaxprEqn(primitive, invars_eqn, outvars, read_params))
        outvars = [atom(a) for a in written["outvars"]]
        return Jaxpr(constvars, invars, outvars, eqns)

    def rule(self, written: dict):
        from funcgrad.export import rules

        if written["rule"] is None:
            left_out = rules.LeftOutRule(written, self)
            self.left_out.append(left_out)
            return left_out
        return self.rules[written["rule"]]

    def aval(self, written: list) -> ShapedArray:
        shape, dtype, weak = written
        return ShapedArray(tuple(shape), _dtype(dtype), weak)

    def value(self, written: Any) -> Any:
        if written is None or type(written) in (bool, int, str):
            return written
        if type(written) is list:
            return [self.value(v) for v in written]
        ((tag, payload), *rest) = written.items()
        if tag == "float":
            return float.fromhex(payload)
        if tag == "complex":
            return complex(float.fromhex(payload[0]), float.fromhex(payload[1]))
        if tag == "dict":
            return {self.value(k): self.value(v) for k, v in payload}
        if tag == "tuple":
            return tuple(self.value(v) for v in payload)
        if tag == "dtype":
            return _dtype(payload)
        if tag == "scalar":
            return np.frombuffer(bytes.fromhex(rest[0][1]), _dtype(payload))[0]
        if tag == "array":
            dtype, shape = _dtype(written["dtype"]), tuple(written["shape"])
            return np.frombuffer(self.blobs[payload], dtype).reshape(shape).copy()
        if tag == "aval":
            return self.aval(payload)
        if tag == "float0":
            return np.zeros(tuple(payload), dtypes.float0)
        if tag == "slice":
            return slice(*(self.value(v) for v in payload))
        if tag == "open_jaxpr":
            return self.jaxpr(payload)
        if tag == "closed_jaxpr":
            return self.closed(payload)
        if tag == "primitive":
            return core.PRIMITIVES[payload]
        if tag == "treedef":
            from funcgrad.export import trees

            return trees.read(payload)
        if tag == "enum":
            return _resolve(payload)[written["name"]]
        if tag == "named":
            return _resolve(payload)(*(self.value(v) for v in written["fields"]))
        if tag == "dataclass":
            fields = {k: self.value(v) for k, v in written["fields"].items()}
            return _resolve(payload)(**fields)
        if tag == "function":
            return _resolve(payload)
        raise ExportError(f"the exported program holds a value tagged {tag!r}, unknown here")


def to_bytes(value: Any) -> bytes:
    """A value without arrays (a pytree node's auxiliary data) as bytes, written as
    parameters are."""
    writer = Writer()
    written = writer.value(value)
    if writer.blobs:
        raise ExportError("to_bytes writes values without arrays")
    return json.dumps(written, separators=(",", ":")).encode()


def from_bytes(data: bytes) -> Any:
    return Reader([], []).value(json.loads(data))


def _as_call(eqn: JaxprEqn) -> JaxprEqn:
    """A `custom_vmap` function's call written as a plain call of its body: its vmap rule is
    a Python function of the batch size, which no traced program stands for, so the exported
    function is batched through the body (as a function without the rule would be)."""
    from funcgrad.transforms.jit import jit_p

    params = {"jaxpr": eqn.params["call_jaxpr"], "name": eqn.params["rule"].__name__}
    return JaxprEqn(jit_p, eqn.invars, eqn.outvars, params, eqn.source_info)


def _dtype_name(dtype: np.dtype) -> str:
    return "float0" if dtype == dtypes.float0 else np.dtype(dtype).name


def _dtype(name: str) -> np.dtype:
    return dtypes.float0 if name == "float0" else np.dtype(name)


def _qualified(kind: type, where: list[str]) -> str:
    if not _is_own(kind.__module__, kind.__qualname__, kind):
        raise ExportError(
            f"cannot export {', '.join(where) or 'a value'}: it holds a "
            f"{kind.__module__}.{kind.__qualname__}, which is not one of funcgrad's types"
        )
    return f"{kind.__module__}:{kind.__qualname__}"


def _is_own_function(value) -> bool:
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return isinstance(module, str) and isinstance(name, str) and _is_own(module, name, value)


def _is_own(module: str, qualname: str, value) -> bool:
    """Whether `value` is funcgrad's, found again by its module and qualified name."""
    if module != "funcgrad" and not module.startswith("funcgrad."):
        return False
    try:
        return _resolve(f"{module}:{qualname}") is value
    except ExportError:
        return False


def _resolve(name: str):
    module, _, qualname = name.partition(":")
    if (module != "funcgrad" and not module.startswith("funcgrad.")) or "<" in qualname:
        raise ExportError(f"the exported program names {name!r}, which is not funcgrad's")
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            if part.startswith("_") and part.endswith("__"):
                raise AttributeError(part)
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise ExportError(
            f"the exported program names {name!r}, which this version of funcgrad does not have"
        ) from None
    return found
