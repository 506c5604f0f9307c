"""Checkpoints: save and load pytrees of arrays in the safetensors file format.

A safetensors file is 8 bytes of little-endian header length, a JSON header mapping each
tensor name to its ``dtype``, ``shape`` and ``data_offsets`` (plus a ``__metadata__`` map of
strings), then the raw little-endian bytes of every tensor, back to back. funcgrad writes the
format itself, so saving needs no extra package, and any safetensors reader opens the files.

Tensors are named by their key path joined with dots (``dense.0``), the names other tools
expect. ``__metadata__`` adds what the format lacks: the tree structure (dicts, lists, tuples,
namedtuples, None; other pytree nodes are recorded by type name and need ``like=`` to be
rebuilt) and the sha256 of the data section, so a damaged file is refused, never loaded.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from funcgrad import dtypes, tree_util
from funcgrad.array import Array
from funcgrad.core import Tracer

__all__ = ["CheckpointError", "load", "save"]

_FORMAT = "funcgrad.checkpoint/1"

_DTYPE_CODES = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "U8",
    np.dtype(np.uint16): "U16",
    np.dtype(np.uint32): "U32",
    np.dtype(np.uint64): "U64",
    np.dtype(np.int8): "I8",
    np.dtype(np.int16): "I16",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
    dtypes.float16: "F16",
    dtypes.bfloat16: "BF16",
    dtypes.float32: "F32",
    dtypes.float64: "F64",
    # safetensors' 8-bit floats (its F8_E4M3 is the finite e4m3fn, as PyTorch's)
    dtypes.float8_e5m2: "F8_E5M2",
    dtypes.float8_e4m3fn: "F8_E4M3",
}
_CODE_DTYPES = {code: dtype for dtype, code in _DTYPE_CODES.items()}
_LEAF = "*"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded as asked: damaged, or not matching ``like``."""


# --- key paths and tree structure ---------------------------------------------------------------
# A path is a tuple of entries: ("key", k) for a dict key, ("index", i) for a list, tuple or
# custom-node child, ("attr", name) for a namedtuple field. A structure spec is JSON: "*" for a
# leaf, else {"kind": ..., "children": [...]} with "keys", "fields" or "type" as the kind needs.


def _path_text(path: tuple) -> str:
    """The path as Python indexes it, e.g. ``['dense'][0].bias``."""
    text = "".join(f".{entry}" if kind == "attr" else f"[{entry!r}]" for kind, entry in path)
    return text or "<root>"


def _tensor_name(path: tuple) -> str:
    return ".".join(str(entry) for _, entry in path) or "<root>"


def _type_name(node_type: type) -> str:
    return f"{node_type.__module__}.{node_type.__qualname__}"


def _child_entries(spec: dict) -> list[tuple[str, Any]]:
    if spec["kind"] == "dict":
        return [("key", k) for k in spec["keys"]]
    if spec["kind"] == "namedtuple":
        return [("attr", f) for f in spec["fields"]]
    return [("index", i) for i in range(len(spec["children"]))]


def _structure(tree: Any, path: tuple, leaves: list[tuple[tuple, Any]]) -> Any:
    """The spec of ``tree``; its leaves are appended to ``leaves`` in ``tree_flatten`` order."""
    if tree_util.all_leaves([tree]):
        leaves.append((path, tree))
        return _LEAF
    if tree is None:
        return {"kind": "none", "children": []}
    node_type = type(tree)
    if node_type is dict:
        keys = sorted(tree)
        for k in keys:
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(
                    f"checkpoint dict keys must be str or int; {_path_text(path)} has key {k!r}"
                )
        spec = {"kind": "dict", "keys": keys}
        children = [tree[k] for k in keys]
    elif node_type in (list, tuple):
        spec = {"kind": node_type.__name__}
        children = list(tree)
    elif isinstance(tree, tuple) and hasattr(node_type, "_fields"):
        spec = {"kind": "namedtuple", "type": _type_name(node_type), "fields": list(tree._fields)}
        children = list(tree)
    else:
        # Any other registered node: its children one level down, in its own flatten order.
        children, _ = tree_util.tree_flatten(tree, is_leaf=lambda child: child is not tree)
        spec = {"kind": "custom", "type": _type_name(node_type)}
    entries = _child_entries({**spec, "children": children})
    spec["children"] = [_structure(c, (*path, e), leaves) for e, c in zip(entries, children)]
    return spec


def _describe(spec: Any) -> str:
    if spec == _LEAF:
        return "an array"
    kind, n = spec["kind"], len(spec["children"])
    if kind == "none":
        return "None"
    if kind == "dict":
        return f"a dict with keys {spec['keys']}"
    if kind in ("list", "tuple"):
        return f"a {kind} of {n}"
    if kind == "namedtuple":
        return f"namedtuple {spec['type']}({', '.join(spec['fields'])})"
    return f"a {spec['type']} node with {n} children"


def _first_difference(found: Any, expected: Any, path: tuple) -> str | None:
    """Where and how the file's structure first departs from ``like``'s (None if it does not)."""
    if found == _LEAF or expected == _LEAF:
        if found == expected:
            return None
        return f"{_path_text(path)}: file has {_describe(found)}, expected {_describe(expected)}"
    same_node = {k: v for k, v in found.items() if k != "children"} == {
        k: v for k, v in expected.items() if k != "children"
    }
    if not same_node or len(found["children"]) != len(expected["children"]):
        return f"{_path_text(path)}: file has {_describe(found)}, expected {_describe(expected)}"
    for entry, f, e in zip(_child_entries(expected), found["children"], expected["children"]):
        difference = _first_difference(f, e, (*path, entry))
        if difference is not None:
            return difference
    return None


def _namedtuple_class(type_name: str, fields: list[str]) -> type:
    """The saved namedtuple class when its module is already imported, else a stand-in.

    Loading never imports a module named in a file: that would run code the file chose.
    """
    module_name, _, qualname = type_name.rpartition(".")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and list(getattr(found, "_fields", ())) == fields:
        return found
    return collections.namedtuple(qualname.rpartition(".")[2], fields)


def _build(spec: Any, leaves, path: tuple, file: Path) -> Any:
    if spec == _LEAF:
        return next(leaves)
    children = [
        _build(child, leaves, (*path, entry), file)
        for entry, child in zip(_child_entries(spec), spec["children"])
    ]
    kind = spec["kind"]
    if kind == "none":
        return None
    if kind == "dict":
        return dict(zip(spec["keys"], children))
    if kind == "list":
        return children
    if kind == "tuple":
        return tuple(children)
    if kind == "namedtuple":
        return _namedtuple_class(spec["type"], spec["fields"])(*children)
    raise CheckpointError(
        f"{file}: {_path_text(path)} is a {spec['type']} node, which only `like=` can rebuild: "
        "pass a tree of that structure (arrays or fg.ShapeDtypeStruct leaves) as like="
    )


# --- leaves -------------------------------------------------------------------------------------


def _type_text(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    return f"{dtype.name}[{','.join(map(str, shape))}]"


def _leaf_value(path: tuple, leaf: Any) -> np.ndarray:
    """The leaf as a C-contiguous little-endian NumPy array of a dtype the format holds."""
    if isinstance(leaf, Tracer):
        raise TypeError(
            f"checkpoints.save: the leaf at {_path_text(path)} is a traced value "
            f"({_type_text(leaf.dtype, leaf.shape)}); save concrete arrays, outside jit, grad "
            "and vmap"
        )
    if isinstance(leaf, (bool, int, float)):
        from funcgrad.lax.base import asarray

        leaf = asarray(leaf)
    elif not isinstance(leaf, (Array, np.ndarray, np.generic)):
        raise TypeError(
            f"checkpoints.save: the leaf at {_path_text(path)} is a {type(leaf).__name__}; "
            "checkpoints hold arrays and Python scalars"
        )
    value = np.asarray(leaf, order="C")
    if value.dtype not in _DTYPE_CODES:
        raise TypeError(
            f"checkpoints.save: the leaf at {_path_text(path)} has dtype {value.dtype}, which "
            f"checkpoints do not hold; supported: {', '.join(d.name for d in _DTYPE_CODES)}"
        )
    return _little_endian(value)


def _little_endian(value: np.ndarray) -> np.ndarray:
    """The same array with little-endian bytes (a no-op on little-endian hosts)."""
    if not value.dtype.isnative:
        value = value.astype(value.dtype.newbyteorder("="))
    return value.byteswap() if sys.byteorder == "big" else value


def _expected_type(path: tuple, leaf: Any) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape that ``like``'s leaf asks of the file."""
    if isinstance(leaf, (bool, int, float)):
        from funcgrad.lax.base import asarray

        leaf = asarray(leaf)
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        raise TypeError(
            f"checkpoints.load: like's leaf at {_path_text(path)} is a {type(leaf).__name__}; "
            "like= holds arrays, fg.ShapeDtypeStruct or Python scalars"
        )
    return np.dtype(leaf.dtype), tuple(leaf.shape)


# --- saving -------------------------------------------------------------------------------------


def save(path: str | os.PathLike, tree: Any) -> None:
    """Write ``tree`` to ``path`` as a safetensors file, replacing any file there atomically.

    The bytes go to a temporary file in the same directory, are flushed to disk, and only then
    renamed over ``path``: a crash or an error mid-write leaves the old checkpoint whole.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"checkpoints.save: the folder {path.parent} does not exist")
    leaves: list[tuple[tuple, Any]] = []
    spec = _structure(tree, (), leaves)
    values = [_leaf_value(p, leaf) for p, leaf in leaves]

    header: dict[str, Any] = {}
    paths_by_name: dict[str, tuple] = {}
    offset = 0
    digest = hashlib.sha256()
    for (leaf_path, _), value in zip(leaves, values):
        name = _tensor_name(leaf_path)
        if name in paths_by_name or name == "__metadata__":
            other = _path_text(paths_by_name.get(name, ()))
            raise ValueError(
                f"checkpoints.save: the leaves at {other} and {_path_text(leaf_path)} would both "
                f"be stored as tensor {name!r}; rename a key"
            )
        paths_by_name[name] = leaf_path
        header[name] = {
            "dtype": _DTYPE_CODES[value.dtype],
            "shape": list(value.shape),
            "data_offsets": [offset, offset + value.nbytes],
        }
        offset += value.nbytes
        digest.update(_bytes_of(value))
    header["__metadata__"] = {
        "format": _FORMAT,
        "funcgrad.tree": json.dumps(spec, separators=(",", ":")),
        "funcgrad.sha256": digest.hexdigest(),
    }
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    # The format lets the header be padded with spaces; 8-byte alignment keeps the data aligned.
    header_bytes += b" " * (-len(header_bytes) % 8)
    chunks = [struct.pack("<Q", len(header_bytes)), header_bytes, *map(_bytes_of, values)]
    _write_atomically(path, chunks)


def _bytes_of(value: np.ndarray) -> np.ndarray:
    """The raw bytes of a contiguous array, as a buffer any dtype (bfloat16 too) can give."""
    return value.reshape(-1).view(np.uint8)


def _write_atomically(path: Path, chunks: list) -> None:
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            for chunk in chunks:
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        os.unlink(temp_name)
        raise
    # Make the rename itself durable (POSIX only: Windows cannot open a directory).
    if hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# --- loading ------------------------------------------------------------------------------------


def _read_tensors(file: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every tensor of the file, by name, and its metadata; checks everything it reads."""
    raw = file.read_bytes()
    if len(raw) < 8:
        raise CheckpointError(f"{file}: truncated: {len(raw)} bytes, not even a header length")
    (header_size,) = struct.unpack("<Q", raw[:8])
    if 8 + header_size > len(raw):
        raise CheckpointError(
            f"{file}: truncated: the header claims {header_size} bytes, the file has "
            f"{len(raw) - 8} after the length"
        )
    try:
        header = json.loads(raw[8 : 8 + header_size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{file}: bad header: not UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{file}: bad header: a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise CheckpointError(f"{file}: bad header: __metadata__ must map strings to strings")

    data = memoryview(raw)[8 + header_size :]
    entries = []
    for name, info in header.items():
        try:
            dtype = _CODE_DTYPES[info["dtype"]]
            shape = tuple(info["shape"])
            begin, end = info["data_offsets"]
            valid = all(type(d) is int and d >= 0 for d in (*shape, begin, end))
        except (KeyError, TypeError, ValueError):
            valid = False
        if not valid or end - begin != math.prod(shape) * dtype.itemsize:
            raise CheckpointError(f"{file}: bad header: tensor {name!r} has entry {info!r}")
        entries.append((begin, end, name, dtype, shape))
    entries.sort()
    offset = 0
    for begin, end, name, _, _ in entries:
        if begin != offset:
            raise CheckpointError(
                f"{file}: bad header: tensor {name!r} starts at byte {begin}, expected {offset}"
            )
        offset = end
    if offset > len(data):
        raise CheckpointError(
            f"{file}: truncated: the tensors need {offset} bytes of data, the file has {len(data)}"
        )
    if offset < len(data):
        raise CheckpointError(f"{file}: {len(data) - offset} bytes after the last tensor")
    checksum = metadata.get("funcgrad.sha256")
    if checksum is not None and hashlib.sha256(data).hexdigest() != checksum:
        raise CheckpointError(f"{file}: corrupted: the data does not match its sha256 checksum")

    tensors = {}
    for begin, end, name, dtype, shape in entries:
        value = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        tensors[name] = value.byteswap() if sys.byteorder == "big" else value.copy()
    return tensors, metadata


def _file_structure(file: Path, tensors: dict, metadata: dict) -> Any:
    """The structure the file records, checked against its tensors (None for other writers)."""
    if "funcgrad.tree" not in metadata:
        return None
    try:
        spec = json.loads(metadata["funcgrad.tree"])
        names = [_tensor_name(p) for p in _leaf_paths(spec)]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{file}: bad header: unreadable tree structure ({e!r})") from None
    if sorted(names) != sorted(tensors):
        raise CheckpointError(
            f"{file}: bad header: the tree structure names tensors {names}, the file holds "
            f"{sorted(tensors)}"
        )
    return spec


def _leaf_paths(spec: Any, path: tuple = ()) -> list[tuple]:
    """The paths of a structure's leaves, in order."""
    if spec == _LEAF:
        return [path]
    paths = []
    for entry, child in zip(_child_entries(spec), spec["children"], strict=True):
        paths.extend(_leaf_paths(child, (*path, entry)))
    return paths


def load(path: str | os.PathLike, like: Any = None) -> Any:
    """Read a checkpoint written by ``save`` (or any safetensors file) as a pytree of fg.Arrays.

    Without ``like``, the tree is rebuilt from the structure the file records; a file from
    another writer loads as a flat dict of its tensors. With ``like`` (a tree of arrays or
    ``fg.ShapeDtypeStruct``), the result has like's structure, and every tensor must have the
    shape and dtype like asks for. Everything is read and checked before anything is returned.
    """
    file = Path(path)
    tensors, metadata = _read_tensors(file)
    spec = _file_structure(file, tensors, metadata)

    if like is None:
        if spec is None:
            return {name: Array(value) for name, value in tensors.items()}
        arrays = (Array(tensors[_tensor_name(p)]) for p in _leaf_paths(spec))
        return _build(spec, arrays, (), file)

    like_leaves: list[tuple[tuple, Any]] = []
    like_spec = _structure(like, (), like_leaves)
    if spec is not None:
        difference = _first_difference(spec, like_spec, ())
        if difference is not None:
            raise CheckpointError(f"{file}: does not match like: {difference}")
    arrays = []
    for leaf_path, leaf in like_leaves:
        dtype, shape = _expected_type(leaf_path, leaf)
        name = _tensor_name(leaf_path)
        if name not in tensors:
            raise CheckpointError(
                f"{file}: does not match like: {_path_text(leaf_path)}: file has no tensor {name!r}"
            )
        value = tensors[name]
        if value.dtype != dtype or value.shape != shape:
            raise CheckpointError(
                f"{file}: does not match like: {_path_text(leaf_path)}: file has "
                f"{_type_text(value.dtype, value.shape)}, expected {_type_text(dtype, shape)}"
            )
        arrays.append(Array(value))
    extra = sorted(set(tensors) - {_tensor_name(p) for p, _ in like_leaves})
    if extra:
        raise CheckpointError(f"{file}: does not match like: like has no leaf for tensors {extra}")
    return tree_util.tree_structure(like).unflatten(arrays)
