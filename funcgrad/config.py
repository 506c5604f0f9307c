"""Global switches, with JAX's names: `funcgrad.config.update("jax_debug_nans", True)` (the
`jax_` prefix may be left out: `update("debug_nans", True)`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class Config:
    """The settings; read them as attributes (`config.debug_nans`)."""

    def __init__(self):
        self.debug_nans = False
        self.disable_jit = False

    def update(self, name: str, value) -> None:
        name = name.removeprefix("jax_")
        if not hasattr(self, name) or name.startswith("_"):
            known = ", ".join(sorted(k for k in vars(self) if not k.startswith("_")))
            raise AttributeError(f"unknown configuration option {name!r}; options: {known}")
        setattr(self, name, value)


config = Config()


@contextlib.contextmanager
def disable_jit(disable: bool = True) -> Iterator[None]:
    """Run jitted functions as plain Python inside the block (to debug them with prints)."""
    previous = config.disable_jit
    config.disable_jit = disable
    try:
        yield
    finally:
        config.disable_jit = previous
