"""Exported functions: a jitted function's program for one signature, kept apart from the
Python that traced it, written to bytes and read back in another process.

The program is a closed jaxpr; calling an `Exported` binds it as a jit call, so it compiles
on whichever backend is configured, and every transformation (grad at any order, vmap, jit)
applies to it, the user's derivative rules included (`funcgrad.export.rules`).

The file: a magic line, the format's version, the length of a JSON header, the header (the
function's name, structures, program and rules table) and the arrays' bytes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence

import numpy as np

import funcgrad
from funcgrad import core, dtypes, tree_util
from funcgrad.compiler import passes
from funcgrad.config import config
from funcgrad.errors import JaxprTypeError
from funcgrad.export import rules, trees
from funcgrad.export.encoding import ExportError, Reader, Writer
from funcgrad.ir import ClosedJaxpr, Jaxpr, check_jaxpr
from funcgrad.lax.base import asarray

_MAGIC = b"funcgrad export\n"
# The versions of the file's layout this funcgrad writes and reads.
CALLING_CONVENTION_VERSION = 1
minimum_supported_calling_convention_version = 1
maximum_supported_calling_convention_version = 1
_PLATFORMS = ("cpu", "cuda")


def default_export_platform() -> str:
    """The platform arrays are made on by default in this process."""
    return "cuda" if funcgrad.default_backend() == "gpu" else "cpu"


class Exported:
    """A function's program for one signature of arguments: call it (`call`), write it
    (`serialize`), or read one back (`deserialize`).

    `in_tree` is the structure of `(args, kwargs)`, `in_avals` its leaves' types; `out_tree`
    and `out_avals` the results'."""

    def __init__(
        self,
        fun_name: str,
        in_tree: tree_util.PyTreeDef,
        out_tree: tree_util.PyTreeDef,
        program: ClosedJaxpr,
        float0_outputs: tuple[tuple[int, tuple[int, ...]], ...],
        platforms: tuple[str, ...],
        rules_left_out: bool = False,
    ):
        self.fun_name = fun_name
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.platforms = platforms
        self._program = program
        self._rules_left_out = rules_left_out
        # (position, shape) of the results that are float0 tangents, which the program does
        # not compute (as jit's own calls).
        self._float0_outputs = float0_outputs
        self._consts = [asarray(c) for c in program.consts]
        jaxpr = program.jaxpr
        self._hoisted = ClosedJaxpr(
            Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns), []
        )

    @property
    def in_avals(self) -> tuple[core.ShapedArray, ...]:
        return tuple(self._program.in_avals)

    @property
    def out_avals(self) -> tuple[core.ShapedArray, ...]:
        avals = list(self._program.out_avals)
        for position, shape in self._float0_outputs:
            avals.insert(position, core.ShapedArray(shape, dtypes.float0))
        return tuple(avals)

    @property
    def jaxpr(self) -> ClosedJaxpr:
        """The exported program."""
        return self._program

    nr_devices = 1

    @property
    def in_shardings_hlo(self) -> tuple[None, ...]:
        return (None,) * len(self.in_avals)

    @property
    def out_shardings_hlo(self) -> tuple[None, ...]:
        return (None,) * len(self.out_avals)

    @property
    def calling_convention_version(self) -> int:
        return CALLING_CONVENTION_VERSION

    def has_vjp(self) -> bool:
        """Whether the function can be differentiated: always, but where it was read back
        from a file that left out the derivative rules of a function it calls."""
        return not self._rules_left_out

    def vjp(self) -> Exported:
        """The exported function's VJP, exported: it takes the arguments' leaves and then one
        cotangent per result leaf, and returns one cotangent per argument leaf."""
        num_in = len(self.in_avals)

        def flat_vjp(*flat):
            args, cotangents = flat[:num_in], flat[num_in:]
            _, pullback = funcgrad.vjp(self._flat_call, *args)
            return pullback(list(cotangents))

        specs = [
            core.ShapeDtypeStruct(a.shape, a.dtype, a.weak_type)
            for a in (*self.in_avals, *self._program.out_avals)
        ]
        return export(funcgrad.jit(flat_vjp), platforms=self.platforms)(*specs)

    def call(self, *args, **kwargs):
        """The function applied to arguments of its exported signature (eagerly, or inside
        any transformation)."""
        leaves, in_tree = tree_util.tree_flatten((args, kwargs))
        if in_tree != self.in_tree:
            raise TypeError(
                f"the exported function {self.fun_name} takes arguments of structure "
                f"{self.in_tree}; it was called with {in_tree}"
            )
        operands = [
            self._operand(x, aval, i) for i, (x, aval) in enumerate(zip(leaves, self.in_avals))
        ]
        outs = self._bound(operands)
        outs = list(outs)
        for position, shape in self._float0_outputs:
            outs.insert(position, np.zeros(shape, dtypes.float0))
        return tree_util.tree_unflatten(self.out_tree, outs)

    def _flat_call(self, *leaves):
        return self._bound(list(leaves))

    def _bound(self, operands: list) -> list:
        from funcgrad.transforms.jit import jit_p

        return jit_p.bind(*self._consts, *operands, jaxpr=self._hoisted, name=self.fun_name)

    def _operand(self, x, aval: core.ShapedArray, i: int):
        if dtypes.is_python_scalar(x) and _takes_scalar(aval.dtype, x):
            x = asarray(np.asarray(x, aval.dtype))
        value = x if isinstance(x, core.Tracer) else asarray(x)
        shape, dtype = tuple(value.shape), np.dtype(value.dtype)
        if shape != aval.shape:
            raise ValueError(
                f"the exported function {self.fun_name} takes a {aval.str_short()} as argument "
                f"leaf {i}; it was called with shape {shape}"
            )
        if dtype != aval.dtype:
            raise ValueError(
                f"the exported function {self.fun_name} takes a {aval.str_short()} as argument "
                f"leaf {i}; it was called with dtype {dtype}"
            )
        return value

    def serialize(self, vjp_order: int = 0) -> bytearray:
        """The exported function as bytes (`deserialize` reads them). The program is
        differentiated, read back, at any order; where it calls functions with derivative
        rules of the user's (`custom_jvp`, `custom_vjp`), `vjp_order` is the order to which
        those rules are kept (tracing each), and a derivative of higher order there is
        refused."""
        if not isinstance(vjp_order, int) or vjp_order < 0:
            raise ValueError(f"serialize: vjp_order must be a non-negative int, got {vjp_order!r}")
        writer = Writer(vjp_order)
        program = writer.closed(self._program)
        header = {
            "funcgrad": funcgrad.__version__,
            "fun_name": self.fun_name,
            "in_tree": trees.write(self.in_tree),
            "out_tree": trees.write(self.out_tree),
            "float0_outputs": [[p, list(s)] for p, s in self._float0_outputs],
            "platforms": list(self.platforms),
            "program": program,
            "rules": writer.rules,
            "blobs": [len(b) for b in writer.blobs],
        }
        text = json.dumps(header, separators=(",", ":")).encode()
        out = bytearray(_MAGIC)
        out += struct.pack("<IQ", CALLING_CONVENTION_VERSION, len(text))
        out += text
        for blob in writer.blobs:
            out += blob
        return out

    def __repr__(self) -> str:
        ins = ", ".join(a.str_short() for a in self.in_avals)
        outs = ", ".join(a.str_short() for a in self.out_avals)
        return f"Exported({self.fun_name}: ({ins}) -> ({outs}))"


def export(fun_jit: Callable, *, platforms: Sequence[str] | None = None) -> Callable[..., Exported]:
    """`export(jit(f))(*args, **kwargs)`: f's program for the signature of these arguments
    (arrays, or `ShapeDtypeStruct`s standing for them; static arguments as jit takes them).
    `platforms` says where the program is meant to run (it runs on any): exported for one,
    its `lax.platform_dependent` choices are that platform's branches wherever it runs; for
    several, each is made where it runs."""
    from funcgrad.transforms.jit import Jitted

    if not isinstance(fun_jit, Jitted):
        raise TypeError(
            f"export takes a function wrapped in funcgrad.jit, got {type(fun_jit).__name__}; "
            "use export(funcgrad.jit(f))"
        )
    chosen = tuple(platforms) if platforms is not None else (default_export_platform(),)
    unknown = [p for p in chosen if p not in _PLATFORMS]
    if unknown or not chosen:
        raise ValueError(f"export: platforms must be among {list(_PLATFORMS)}, got {list(chosen)}")

    def do_export(*args, **kwargs) -> Exported:
        entry, _ = fun_jit._entry(args, kwargs, config.default_matmul_precision, abstract=True)
        _, _, dynamic_args, dynamic_kwargs = fun_jit._split(args, kwargs)
        in_tree = tree_util.tree_structure((tuple(dynamic_args), dynamic_kwargs))
        jaxpr = entry.jaxpr.jaxpr
        num_consts = len(entry.consts)
        program = ClosedJaxpr(
            Jaxpr(jaxpr.invars[:num_consts], jaxpr.invars[num_consts:], jaxpr.outvars, jaxpr.eqns),
            entry.consts,
        )
        if len(chosen) == 1:
            program = passes.resolve_platform(program, chosen[0])
        exported = Exported(
            getattr(fun_jit, "__name__", fun_jit.name),
            in_tree,
            entry.out_tree,
            program,
            tuple(entry.float0_leaves),
            chosen,
        )
        exported.serialize()  # (what cannot be written down is refused here, not later)
        return exported

    return do_export


def deserialize(blob: bytes | bytearray | memoryview) -> Exported:
    """The exported function `Exported.serialize` wrote."""
    data = memoryview(bytes(blob))
    if bytes(data[: len(_MAGIC)]) != _MAGIC:
        raise ExportError("deserialize: these bytes are not an exported funcgrad function")
    try:
        header, blobs = _parts(data)
        reader = Reader(blobs, [])
        rules.read_table(header["rules"], reader)
        inner_left_out = len(reader.left_out)
        program = reader.closed(header["program"])
        rules_left_out = len(reader.left_out) > inner_left_out
        in_tree, out_tree = trees.read(header["in_tree"]), trees.read(header["out_tree"])
        name, version = header["fun_name"], header["funcgrad"]
        float0_outputs = tuple((p, tuple(s)) for p, s in header["float0_outputs"])
        platforms = tuple(header["platforms"])
    except ExportError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, struct.error) as error:
        raise ExportError(f"deserialize: the file is damaged ({error!r})") from None
    _check_types(program.jaxpr, name, version)
    for rule in reader.rules:
        for inner in rule.programs():
            _check_types(inner.jaxpr, name, version)
    return Exported(name, in_tree, out_tree, program, float0_outputs, platforms, rules_left_out)


def _parts(data: memoryview) -> tuple[dict, list[memoryview]]:
    """The file's header and its arrays' bytes."""
    start = len(_MAGIC)
    version, length = struct.unpack_from("<IQ", data, start)
    if not (
        minimum_supported_calling_convention_version
        <= version
        <= maximum_supported_calling_convention_version
    ):
        raise ExportError(
            f"deserialize: the function was exported in format version {version}; this "
            f"funcgrad reads versions {minimum_supported_calling_convention_version} to "
            f"{maximum_supported_calling_convention_version}"
        )
    start += struct.calcsize("<IQ")
    header = json.loads(bytes(data[start : start + length]))
    start += length
    blobs = []
    for size in header["blobs"]:
        if start + size > len(data):
            raise ValueError(f"{len(data)} bytes, too few for the arrays the header lists")
        blobs.append(data[start : start + size])
        start += size
    return header, blobs


def _takes_scalar(dtype: np.dtype, scalar) -> bool:
    """Whether a Python scalar stands for an argument of `dtype` (as a literal in the code
    would): a bool for bools, an int for any number, a float for floats and complexes, a
    complex for complexes."""
    if type(scalar) is bool:
        return dtype == np.bool_
    kinds = {int: "iufc", float: "fc", complex: "c"}[type(scalar)]
    return np.dtype(dtype).kind in kinds


def _check_types(jaxpr: Jaxpr, name: str, version: str) -> None:
    """The program typed by this funcgrad's rules: a file written by a funcgrad whose
    primitives took other parameters is refused here rather than computing something else."""
    try:
        check_jaxpr(jaxpr)
    except JaxprTypeError as error:
        raise ExportError(
            f"the exported function {name} (written by funcgrad {version}) does not type "
            f"here: {error}"
        ) from None
