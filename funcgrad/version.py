"""jax.version: funcgrad's version, from the installed package's metadata or, in a source tree
that is not installed, from pyproject.toml beside the package."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

__all__ = ["__version__", "__version_info__"]


def _pyproject_version() -> str:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return "0+unknown"
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    found = project and re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), re.MULTILINE)
    return found.group(1) if found else "0+unknown"


def _version() -> str:
    try:
        return metadata.version("funcgrad")
    except metadata.PackageNotFoundError:
        return _pyproject_version()


def _version_info(version: str) -> tuple[int, ...]:
    """The leading numbers of the release: "0.1.0" -> (0, 1, 0)."""
    release = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in release.group(0).split(".")) if release else ()


__version__ = _version()
__version_info__ = _version_info(__version__)
