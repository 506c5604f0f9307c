"""print_environment_info: the versions and devices to paste into a bug report."""

from __future__ import annotations

import platform
import sys


def print_environment_info(return_string: bool = False) -> str | None:
    """Print (or return) funcgrad's version, Python's, its dependencies' (NumPy, llvmlite,
    CuPy where installed), the platform, the devices and the jit backend."""
    import numpy as np

    import funcgrad
    from funcgrad.config import config
    from funcgrad.devices import default_backend, devices

    lines = [
        f"funcgrad: {funcgrad.__version__}",
        f"numpy:    {np.__version__}",
        f"llvmlite: {_version('llvmlite')}",
        f"cupy:     {_version('cupy')}",
        f"python:   {sys.version}",
        f"platform: {platform.platform()}",
        f"default backend: {default_backend()}, jit backend: {config.jit_backend}",
        f"devices:  {', '.join(map(str, devices()))}",
    ]
    text = "\n".join(lines)
    if return_string:
        return text
    print(text)
    return None


def _version(module: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "not installed"
