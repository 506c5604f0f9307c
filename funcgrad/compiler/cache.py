"""Compiled programs kept on disk, so a process loads what an earlier one compiled.

An entry is one file, named by its key's digest, holding a header (magic, format version, the
key's digest, the payload's length and digest) and the payload. A writer writes a temporary
file in the cache folder and renames it over the entry, so a reader sees a whole entry or
none, and processes writing one key at once leave one of their identical entries. A reader
checks the whole header and the payload's digest: an entry that fails a check (cut short,
damaged, or written for another key) is removed and its program compiled again; it is never
loaded.

Payloads are kept compressed (zlib's fastest level: an LLVM plan's IR and module texts took
a seventh of the space, object code a third). The folder, every kind's entries together, is
kept within `config.compilation_cache_max_size` bytes: a process counts what it finds there
when it first writes, and what it writes after; past the bound it removes the entries used
longest ago (a hit marks its entry used) until the folder holds `KEPT_AFTER_EVICTION` of the
bound. (A test suite drawing new programs every day, unbounded, had filled 72 GB.)

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
import zlib

from funcgrad import monitoring
from funcgrad.config import config

logger = logging.getLogger("funcgrad.compilation_cache")

MAGIC = b"funcgrad-cache\0\0"
FORMAT = 2  # (1 kept payloads uncompressed)
# The share of `config.compilation_cache_max_size` an eviction leaves, so that the next
# writes do not each evict again.
KEPT_AFTER_EVICTION = 0.75
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
    """Where entries of one kind (a backend's) live; None while the cache is off (or bound to
    no bytes)."""
    if not config.enable_compilation_cache or config.compilation_cache_max_size == 0:
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
        try:
            os.utime(path)  # used now: evicted last
        except OSError:
            pass
        return zlib.decompress(memoryview(data)[_HEADER.size :])
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
    payload = zlib.compress(payload, 1)
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
        _keep_within_bound(len(header) + len(payload))
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


# Bytes a process reckons the cache folder holds, by folder: counted at its first write there,
# then grown by what it writes (other processes' writes show at the next count).
_reckoned: dict[str, int] = {}


def _keep_within_bound(written: int) -> None:
    """Past `config.compilation_cache_max_size` (-1: no bound), remove the entries used
    longest ago until the folder holds `KEPT_AFTER_EVICTION` of it."""
    bound = config.compilation_cache_max_size
    root = config.compilation_cache_dir
    if bound < 0:
        return
    if root in _reckoned:
        _reckoned[root] += written
    else:
        _reckoned[root] = sum(size for _, size, _ in _entries(root))
    if _reckoned[root] <= bound:
        return
    entries = sorted(_entries(root))
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= bound * KEPT_AFTER_EVICTION:
            break
        try:
            os.remove(path)
        except OSError:
            continue
        total -= size
        logger.debug("evicted %s", path)
    _reckoned[root] = total


def _entries(root: str) -> list[tuple[float, int, str]]:
    """(time of last use, bytes, path) of every entry under the cache folder."""
    entries = []
    try:
        kinds = [kind.path for kind in os.scandir(root) if kind.is_dir()]
    except OSError:
        return entries
    for kind in kinds:
        try:
            with os.scandir(kind) as files:
                for file in files:
                    if file.is_file() and not file.name.startswith(".writing-"):
                        info = file.stat()
                        entries.append((info.st_mtime, info.st_size, file.path))
        except OSError:
            continue
    return entries
