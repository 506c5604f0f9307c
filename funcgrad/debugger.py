"""`funcgrad.debug.breakpoint`: an interactive debugger that opens where a program runs.

Python's `breakpoint()` inside a jitted function stops once, at trace time, among tracers.
This one takes the Python frames above it at trace time, passes the traced values among
their local variables to one debug callback, and, each time the program reaches that
callback, opens a debugger on those frames with the run-time values put back in. Under vmap
it opens once per lane, under grad once, with the primal values.

The debugger is a small command loop (`p expr`, `up`, `where`, `continue`, ...) over those
frames. Its input and output default to the terminal; `breakpoint(stdin=..., stdout=...)`
hands other streams through, which is how a script (or a test) drives it.
"""

from __future__ import annotations

import cmd
import dataclasses
import inspect
import os
import pprint
import sys
import traceback
from collections.abc import Callable
from typing import IO, Any

from funcgrad import core, tree_util
from funcgrad.array import Array

__all__ = ["DebuggerFrame", "breakpoint"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@dataclasses.dataclass
class DebuggerFrame:
    """One Python frame as the debugger shows it: where it is, its source, and its local
    variables (traced arrays among them replaced by their run-time values). `of` leaves the
    locals empty: the breakpoint fills them in when the program reaches it."""

    filename: str
    function: str
    lineno: int
    source: list[str]  # the lines of the frame's function (of the module at top level)
    offset: int | None  # the index of `lineno` in `source`; None when the source is unknown
    locals: dict[str, Any]
    globals: dict[str, Any]

    @classmethod
    def of(cls, info: inspect.FrameInfo) -> DebuggerFrame:
        try:
            source, start = inspect.getsourcelines(info.frame)
            source = [line.rstrip("\n") for line in source]
            offset = info.lineno - max(start, 1)
            if not 0 <= offset < len(source):
                source, offset = [], None
        except (OSError, TypeError):
            source, offset = [], None
        return cls(
            info.filename,
            info.function,
            info.lineno,
            source,
            offset,
            {},
            info.frame.f_globals,
        )


class CliDebugger(cmd.Cmd):
    """A text debugger over the frames captured by `breakpoint`, innermost first."""

    prompt = "(fgdb) "

    def __init__(
        self,
        frames: list[DebuggerFrame],
        stdin: IO[str] | None = None,
        stdout: IO[str] | None = None,
    ):
        super().__init__(stdin=stdin, stdout=stdout)
        self.use_rawinput = stdin is None
        self.frames = frames
        self.frame_index = 0
        self.intro = "Entering fgdb:"

    def _say(self, text: str) -> None:
        print(text, file=self.stdout)

    def evaluate(self, expression: str) -> Any:
        frame = self.frames[self.frame_index]
        return eval(expression, dict(frame.globals), dict(frame.locals))

    def _show(self, expression: str, format: Callable[[Any], str]) -> None:
        try:
            self._say(format(self.evaluate(expression)))
        except Exception:
            error = traceback.format_exception_only(*sys.exc_info()[:2])[-1].strip()
            self._say(f"*** {error}")

    def default(self, line: str) -> None:
        """Evaluate an expression in the current frame and print its repr."""
        self._show(line, repr)

    def emptyline(self) -> None:
        """An empty line does nothing (rather than repeat the last command)."""

    def do_p(self, arg: str) -> None:
        """p expression: evaluate the expression in the current frame and print its repr."""
        self._show(arg, repr)

    def do_pp(self, arg: str) -> None:
        """pp expression: evaluate the expression and pretty-print its value."""
        self._show(arg, pprint.pformat)

    def do_up(self, arg: str) -> None:
        """u(p): move to the frame that called the current one."""
        if self.frame_index == len(self.frames) - 1:
            self._say("At topmost frame.")
        else:
            self.frame_index += 1
        self.print_context()

    def do_down(self, arg: str) -> None:
        """d(own): move to the frame the current one called."""
        if self.frame_index == 0:
            self._say("At bottommost frame.")
        else:
            self.frame_index -= 1
        self.print_context()

    def do_list(self, arg: str) -> None:
        """l(ist): show the source around the current line."""
        self.print_context(num_lines=5)

    def do_where(self, arg: str) -> None:
        """w(here), bt: the captured frames, the innermost last."""
        lines = ["Traceback:"]
        for frame in reversed(self.frames):
            lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.function}')
            text = "<no source>" if frame.offset is None else frame.source[frame.offset].strip()
            lines.append(f"    {text}")
        self._say("\n".join(lines))

    def do_continue(self, arg: str) -> bool:
        """c(ont(inue)): leave the debugger and let the program go on."""
        return True

    def do_EOF(self, arg: str) -> bool:
        """End of input: continue, so a script that runs out of commands lets the program go on."""
        return True

    def do_quit(self, arg: str) -> None:
        """q(uit), exit: end the Python process."""
        sys.exit(0)

    do_u, do_d, do_l, do_w, do_bt = do_up, do_down, do_list, do_where, do_where
    do_c = do_cont = do_continue
    do_q = do_exit = do_quit

    def print_context(self, num_lines: int = 2) -> None:
        frame = self.frames[self.frame_index]
        lines = [f"> {frame.filename}({frame.lineno}){frame.function}()"]
        if frame.offset is not None:
            first = max(frame.offset - num_lines, 0)
            for i in range(first, min(frame.offset + num_lines + 1, len(frame.source))):
                lines.append(("->  " if i == frame.offset else "    ") + frame.source[i])
        self._say("\n".join(lines))


def _run_cli(frames: list[DebuggerFrame], **kwargs: Any) -> None:
    CliDebugger(frames, **kwargs).cmdloop()


_BACKENDS: dict[str, Callable[..., None]] = {"cli": _run_cli}


@dataclasses.dataclass
class _Variable:
    """A local variable's value with its traced arrays taken out: the leaves of its pytree,
    None where a traced array stood (`traced` holds those positions, each with its weak
    type, which the run-time NumPy value does not carry), or the value whole when it holds
    no traced array."""

    value: Any
    treedef: tree_util.PyTreeDef | None = None
    leaves: list[Any] = dataclasses.field(default_factory=list)
    traced: list[tuple[int, bool]] = dataclasses.field(default_factory=list)

    @classmethod
    def split(cls, value: Any, operands: list[Any]) -> _Variable:
        try:
            leaves, treedef = tree_util.tree_flatten(value)
        except Exception:  # a value whose flatten fails is shown as it is
            return cls(value)
        traced = [
            (i, core.get_aval(leaf).weak_type)
            for i, leaf in enumerate(leaves)
            if isinstance(leaf, core.Tracer)
        ]
        if not traced:
            return cls(value)
        operands.extend(leaves[i] for i, _ in traced)
        kept = list(leaves)
        for i, _ in traced:
            kept[i] = None
        return cls(None, treedef, kept, traced)

    def rebuild(self, values: Any) -> Any:
        if self.treedef is None:
            return self.value
        leaves = list(self.leaves)
        for i, weak_type in self.traced:
            leaves[i] = Array(next(values), weak_type)
        return self.treedef.unflatten(leaves)


class _OpenDebugger:
    """The callback a breakpoint stages: the frames with their run-time values, to the
    debugger. Like every debug callback it compares by identity."""

    def __init__(self, frames, variables, debugger, debugger_kwargs):
        self.frames = frames
        self.variables = variables
        self.debugger = debugger
        self.debugger_kwargs = debugger_kwargs

    def __call__(self, *values: Any) -> None:
        remaining = iter(values)
        frames = [
            dataclasses.replace(
                frame, locals={name: v.rebuild(remaining) for name, v in variables.items()}
            )
            for frame, variables in zip(self.frames, self.variables)
        ]
        self.debugger(frames, **self.debugger_kwargs)


def breakpoint(
    *,
    backend: str | None = None,
    filter_frames: bool = True,
    num_frames: int | None = None,
    ordered: bool = False,
    token: Any = None,
    **kwargs: Any,
) -> Any:
    """Open a debugger here each time the program runs, on the calling frames with their
    traced arrays' run-time values.

    `backend` names the debugger (`"cli"`, the default); `filter_frames` leaves out
    funcgrad's own frames; `num_frames` keeps only that many frames, innermost first.
    `token` (a pytree of arrays the caller threads on) is returned unchanged; it cannot be
    combined with `ordered`. Other keyword arguments go to the debugger: `stdin` and
    `stdout` for the CLI one.
    """
    from funcgrad.debug import callback

    if token is not None and ordered:
        raise ValueError("debug.breakpoint: `ordered` and `token` cannot be given together")
    if backend is not None and backend not in _BACKENDS:
        raise ValueError(
            f"debug.breakpoint: unknown backend {backend!r}; available: {sorted(_BACKENDS)}"
        )
    if num_frames is not None and not (isinstance(num_frames, int) and num_frames > 0):
        raise ValueError(f"debug.breakpoint: num_frames must be a positive int, got {num_frames!r}")
    infos = inspect.stack(context=0)[1:]
    if filter_frames:
        infos = [i for i in infos if not os.path.abspath(i.filename).startswith(_PACKAGE_DIR)]
    infos = infos[:num_frames]
    operands: list[Any] = []
    variables = [
        {name: _Variable.split(value, operands) for name, value in info.frame.f_locals.items()}
        for info in infos
    ]
    frames = [DebuggerFrame.of(info) for info in infos]
    debugger = _BACKENDS[backend or "cli"]
    callback(_OpenDebugger(frames, variables, debugger, kwargs), *operands, ordered=ordered)
    return token
