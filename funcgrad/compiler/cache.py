"""Compiled programs kept on disk, so a process loads what an earlier one compiled.

An entry is one file, named by its key's digest, holding a header (magic, format version, the
key's digest, the payload's length and digest) and the payload. A writer writes a temporary
file in the cache folder and renames it over the entry, so a reader sees a whole entry or
none, and processes writing one key at once leave one of their identical entries. A reader
checks the whole header and the payload's digest: an entry that fails a check (cut short,
damaged, or written for another key) is removed and its program compiled again; it is never
loaded.

The cache serves whoever can write its folder: it trusts its entries as it trusts the
process's own files. It never fails a compilation: a folder it cannot use is reported once
with a warning, and programs are then compiled without it.

`logging.getLogger("funcgrad.compilation_cache")` tells, at DEBUG level, each hit, miss,
write and rejected entry.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import warnings

from funcgrad import monitoring
from funcgrad.config import config

logger = logging.getLogger("funcgrad.compilation_cache")

MAGIC = b"funcgrad-cache\0\0"
FORMAT = 1
# magic, format version, key digest, payload length, payload digest
_HEADER = struct.Struct("<16sI32sQ32s")

_unusable_folders: set[str] = set()  # warned about once, then left alone


def digest(*parts: str) -> bytes:
    """The key of an entry: a digest of everything its payload depends on."""
    hasher = hashlib.sha256()
    for part in parts:
        encoded = part.encode()
        hasher.update(len(encoded).to_bytes(8, "little"))
        hasher.update(encoded)
    return hasher.digest()


def folder(kind: str) -> str | None:
    """Where entries of one kind (a backend's) live; None while the cache is off."""
    if not config.enable_compilation_cache:
        return None
    return os.path.join(config.compilation_cache_dir, kind)


def load(kind: str, key: bytes) -> bytes | None:
    """The payload stored under `key`, or None (absent, off, or rejected and removed)."""
    where = folder(kind)
    if where is None:
        return None
    path = os.path.join(where, key.hex())
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        logger.debug("miss %s", path)
        if monitoring.listening:
            monitoring.record_event("/funcgrad/compilation_cache/cache_misses", kind=kind)
        return None
    except OSError as error:
        logger.debug("miss %s (cannot read: %s)", path, error)
        return None
    problem = _problem(data, key)
    if problem is None:
        logger.debug("hit %s", path)
        if monitoring.listening:
            monitoring.record_event("/funcgrad/compilation_cache/cache_hits", kind=kind)
        return data[_HEADER.size :]
    logger.debug("rejected %s: %s", path, problem)
    try:
        os.remove(path)
    except OSError:
        pass
    return None


def _problem(data: bytes, key: bytes) -> str | None:
    """What is wrong with an entry read for `key`, or None when nothing is."""
    if len(data) < _HEADER.size:
        return f"{len(data)} bytes, shorter than the header"
    magic, version, stored_key, length, payload_digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return "not a funcgrad cache entry"
    if version != FORMAT:
        return f"format {version}, expected {FORMAT}"
    if stored_key != key:
        return "written for another key"
    if len(data) - _HEADER.size != length:
        return f"payload of {len(data) - _HEADER.size} bytes, header says {length}"
    if hashlib.sha256(memoryview(data)[_HEADER.size :]).digest() != payload_digest:
        return "payload digest mismatch"
    return None


def store(kind: str, key: bytes, payload: bytes) -> None:
    """Keep `payload` under `key`; a folder that cannot be written is warned about once."""
    where = folder(kind)
    if where is None or where in _unusable_folders:
        return
    header = _HEADER.pack(MAGIC, FORMAT, key, len(payload), hashlib.sha256(payload).digest())
    temporary = None
    try:
        os.makedirs(where, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=where, prefix=".writing-")
        with os.fdopen(descriptor, "wb") as file:
            file.write(header)
            file.write(payload)
        os.replace(temporary, os.path.join(where, key.hex()))
        temporary = None
        logger.debug("wrote %s", os.path.join(where, key.hex()))
    except OSError as error:
        _unusable_folders.add(where)
        warnings.warn(
            f"funcgrad cannot write its compilation cache in {where} ({error}); programs are "
            "compiled again in every process. Choose a writable folder with FUNCGRAD_CACHE_DIR "
            "or config.update('compilation_cache_dir', ...), or turn the cache off with "
            "FUNCGRAD_COMPILATION_CACHE=0.",
            RuntimeWarning,
            stacklevel=2,
        )
    finally:
        if temporary is not None:
            try:
                os.remove(temporary)
            except OSError:
                pass
