"""CUDA C -> PTX through NVRTC, called through ctypes: compiling needs no GPU and no driver,
only the NVRTC library (the pip package `nvidia-cuda-nvrtc-cu12`, or a CUDA toolkit's)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import re

import funcgrad
from funcgrad.compiler import cache

# Hopper (H100/H200) unless the caller names the device's own architecture.
DEFAULT_ARCH = "compute_90"


class NvrtcError(RuntimeError):
    pass


@functools.cache
def library() -> ctypes.CDLL | None:
    """The NVRTC library, or None when neither the pip package nor a toolkit provides it."""
    candidates = []
    try:
        import nvidia  # the wheels' namespace: cuda_nvrtc/lib (CUDA 12), cu13/lib (CUDA 13)

        for folder in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(folder, "*", "lib", "libnvrtc.so.*")))
    except ImportError:
        pass
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidates += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    found = ctypes.util.find_library("nvrtc")
    if found:
        candidates.append(found)
    for path in candidates:
        if "builtins" in path or ".alt." in path:
            continue
        # NVRTC opens its builtins library by name when it compiles; where its folder is not
        # on the loader's path (CUDA 13's wheel), the copy beside it is loaded first.
        beside = glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*"))
        try:
            for builtins in beside:
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def version() -> tuple[int, int]:
    lib = _required()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
    return major.value, minor.value


def compile_ptx(source: str, arch: str = DEFAULT_ARCH, filename: str = "funcgrad.cu") -> str:
    """PTX for `source`; a compile error names the generated line and the kernel it is in."""
    lib = _required()
    program = ctypes.c_void_p()
    _check(
        lib,
        lib.nvrtcCreateProgram(
            ctypes.byref(program), source.encode(), filename.encode(), 0, None, None
        ),
    )
    try:
        # No contraction of a * b + c into one rounding: sums and products round as the
        # reference backend's do (a GPU user's JAX would contract; funcgrad matches NumPy).
        options = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", b"--fmad=false"]
        array = (ctypes.c_char_p * len(options))(*options)
        result = lib.nvrtcCompileProgram(program, len(options), array)
        if result != 0:
            raise NvrtcError(_explained(_log(lib, program), source, filename))
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetPTXSize(program, ctypes.byref(size)))
        ptx = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetPTX(program, ptx))
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


_compiled: dict[bytes, str] = {}  # this process's PTX, by cache key


def ptx(source: str, arch: str = DEFAULT_ARCH) -> str:
    """`compile_ptx`, remembered in this process and kept in the on-disk compilation cache
    (`compiler/cache.py`: the same rules as the CPU's object files), keyed by the source, the
    architecture and the NVRTC and funcgrad versions."""
    major, minor = version()
    key = cache.digest(source, arch, f"nvrtc {major}.{minor}", funcgrad.__version__)
    if key not in _compiled:
        stored = cache.load("cuda", key)
        if stored is None:
            text = compile_ptx(source, arch)
            cache.store("cuda", key, text.encode())
        else:
            text = stored.decode()
        _compiled[key] = text
    return _compiled[key]


def _required() -> ctypes.CDLL:
    lib = library()
    if lib is None:
        raise NvrtcError(
            "NVRTC is not installed: pip install nvidia-cuda-nvrtc-cu12 (or the cuda extra), "
            "or set CUDA_HOME to a CUDA toolkit"
        )
    return lib


def _check(lib: ctypes.CDLL, result: int) -> None:
    if result != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise NvrtcError(f"NVRTC: {lib.nvrtcGetErrorString(result).decode()}")


def _log(lib: ctypes.CDLL, program) -> str:
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, log)
    return log.value.decode(errors="replace")


def _explained(log: str, source: str, filename: str) -> str:
    """The compiler's log, each error followed by the generated line it points at and the
    kernel (named after the primitive it computes) that holds it."""
    lines = source.splitlines()
    out = ["NVRTC could not compile the generated CUDA C:"]
    for entry in log.splitlines():
        out.append(entry)
        match = re.match(rf"{re.escape(filename)}\((\d+)\): error", entry)
        if match and 0 < int(match.group(1)) <= len(lines):
            number = int(match.group(1))
            out.append(f"    line {number}: {lines[number - 1].strip()}")
            kernel = _enclosing_kernel(lines, number)
            if kernel:
                out.append(f"    in kernel {kernel}")
    return "\n".join(out)


def _enclosing_kernel(lines: list[str], number: int) -> str | None:
    for line in reversed(lines[:number]):
        match = re.search(r"__global__ void (\w+)\(", line)
        if match:
            return match.group(1)
    return None
