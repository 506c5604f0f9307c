"""Where compiled programs are kept on disk, under JAX's names: `set_cache_dir(path)` and
`reset_cache()`, over `config.compilation_cache_dir` (see `funcgrad.config`)."""

from __future__ import annotations

import os

from funcgrad.config import _default_cache_dir, config

__all__ = ["reset_cache", "set_cache_dir"]


def set_cache_dir(path: str | os.PathLike) -> None:
    """Keep compiled programs in `path`, and look there before compiling. Anyone who can
    write there can make this process run their code: keep it private."""
    config.update("compilation_cache_dir", path)


def reset_cache() -> None:
    """Back to the default directory ($FUNCGRAD_CACHE_DIR, else the user's cache)."""
    config.update("compilation_cache_dir", _default_cache_dir())
