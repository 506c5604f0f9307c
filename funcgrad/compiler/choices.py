"""Choices a backend makes for the programs it plans (a CPU's or a GPU's): each holds its
default, and `stages.plan` chooses a value for the time it schedules (`Choice.chosen`), which
the passes then read (`Choice.get`)."""

from __future__ import annotations

import contextlib
import contextvars


class Choice:
    def __init__(self, name: str, default):
        self._value = contextvars.ContextVar(name, default=default)

    def get(self):
        return self._value.get()

    @contextlib.contextmanager
    def chosen(self, value):
        """`value` in force within the block (`default` again after it)."""
        token = self._value.set(value)
        try:
            yield
        finally:
            self._value.reset(token)
