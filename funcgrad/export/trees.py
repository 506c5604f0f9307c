"""The argument and result structures of an exported function, written as data.

Tuples, lists, dicts, None and ordered dicts are written as themselves. Any other node type
(a named tuple, a registered class) is written under a name its owner registers for it,
with its auxiliary data turned into bytes by the owner's function, and found again by that
name when read: a file never names a class to import.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

from funcgrad import tree_util
from funcgrad.export.encoding import ExportError
from funcgrad.tree_util import PyTreeDef


@dataclasses.dataclass(frozen=True)
class _Serialization:
    node_type: type
    name: str
    serialize_auxdata: Callable[[Any], bytes]
    deserialize_auxdata: Callable[[bytes], Any]


_BY_TYPE: dict[type, _Serialization] = {}
_BY_NAME: dict[str, _Serialization] = {}


def register_pytree_node_serialization(
    nodetype: type,
    *,
    serialized_name: str,
    serialize_auxdata: Callable[[Any], bytes],
    deserialize_auxdata: Callable[[bytes], Any],
) -> type:
    """Let exported functions take or return nodes of the registered pytree type `nodetype`:
    they are written as `serialized_name`, their auxiliary data as the bytes
    `serialize_auxdata` makes of it, which `deserialize_auxdata` turns back. Returns
    `nodetype`."""
    if not tree_util.is_tree_node(nodetype):
        raise ValueError(
            f"register_pytree_node_serialization: {nodetype.__qualname__} is not a pytree node "
            "type; register it with tree_util.register_pytree_node first"
        )
    if nodetype in _BY_TYPE or serialized_name in _BY_NAME:
        taken = nodetype.__qualname__ if nodetype in _BY_TYPE else repr(serialized_name)
        raise ValueError(f"register_pytree_node_serialization: {taken} is already registered")
    serialization = _Serialization(
        nodetype, serialized_name, serialize_auxdata, deserialize_auxdata
    )
    _BY_TYPE[nodetype] = _BY_NAME[serialized_name] = serialization
    return nodetype


def register_namedtuple_serialization(nodetype: type, *, serialized_name: str) -> type:
    """Let exported functions take or return the named tuple class `nodetype`, written as
    `serialized_name`. Returns `nodetype`."""
    if not (issubclass(nodetype, tuple) and hasattr(nodetype, "_fields")):
        raise ValueError(
            f"register_namedtuple_serialization: {nodetype.__qualname__} is not a named tuple class"
        )
    return register_pytree_node_serialization(
        nodetype,
        serialized_name=serialized_name,
        serialize_auxdata=lambda aux: b"",
        deserialize_auxdata=lambda data: None,
    )


def write(treedef: PyTreeDef) -> Any:
    node_type = treedef._type
    children = [write(child) for child in treedef.children()]
    if node_type is None:
        return "*"
    if node_type in (tuple, list, type(None)):
        return {node_type.__name__: children}
    if node_type in (dict, collections.OrderedDict):
        keys = list(treedef._aux)
        if not all(type(k) in (str, int) for k in keys):
            raise ExportError(
                f"cannot export a structure with a {node_type.__name__} whose keys are not "
                f"strings or integers: {keys!r}"
            )
        return {node_type.__name__: children, "keys": keys}
    serialization = _BY_TYPE.get(node_type)
    if serialization is None:
        raise ExportError(
            f"cannot export a structure with nodes of type {node_type.__qualname__}: register "
            "it with funcgrad.export.register_pytree_node_serialization (or, for a named "
            "tuple, register_namedtuple_serialization)"
        )
    aux = serialization.serialize_auxdata(treedef._aux)
    if not isinstance(aux, (bytes, bytearray)):
        raise ExportError(
            f"the serialize_auxdata function registered for {node_type.__qualname__} returned "
            f"a {type(aux).__name__}, not bytes"
        )
    return {"node": serialization.name, "aux": bytes(aux).hex(), "children": children}


def read(written: Any) -> PyTreeDef:
    if written == "*":
        return tree_util.tree_structure(0)
    if "node" in written:
        serialization = _BY_NAME.get(written["node"])
        if serialization is None:
            raise ExportError(
                f"the exported function's structure has nodes serialized as "
                f"{written['node']!r}; register that type here with "
                "funcgrad.export.register_pytree_node_serialization before deserializing"
            )
        aux = serialization.deserialize_auxdata(bytes.fromhex(written["aux"]))
        children = [read(c) for c in written["children"]]
        return tree_util.PyTreeDef(
            serialization.node_type,
            tree_util._kind_of(serialization.node_type),
            aux,
            tuple(children),
        )
    (kind, children), *keys = written.items()
    node_type = {
        "tuple": tuple,
        "list": list,
        "NoneType": type(None),
        "dict": dict,
        "OrderedDict": collections.OrderedDict,
    }[kind]
    aux = tuple(keys[0][1]) if keys else None
    return tree_util.PyTreeDef(
        node_type, tree_util._kind_of(node_type), aux, tuple(read(c) for c in children)
    )
