"""Pictures of arrays and programs for notebooks: rich array summaries, highlighted jaxprs, and
the dataflow graph of a traced function as SVG.

Notebooks call ``_repr_html_`` and ``_repr_svg_``; ``fg.Array`` and the jaxpr classes hand
their HTML to this module so that all display code lives in one place. Graphs are drawn by
Graphviz when its ``dot`` program is on PATH, and otherwise by a small layered layout here,
so they always work with no extra package.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from funcgrad import dtypes, ir

__all__ = ["Graph", "graph"]

# Arrays with at most this many elements show every value; larger ones show a summary.
_FULL_VALUES_LIMIT = 100

_STYLE = (
    "<style>.fg-prim{color:#0550ae;font-weight:bold}.fg-var{color:#953800}"
    ".fg-type{color:#6e7781}.fg-kw{color:#8250df}.fg-param{color:#116329}</style>"
)


# --- arrays -------------------------------------------------------------------------------------


def array_html(array: Any) -> str:
    """A compact card for an array: its type and device, then its values or a summary."""
    value = np.asarray(array)
    type_text = f"{value.dtype.name}[{','.join(map(str, value.shape))}]"
    weak = " weak_type" if getattr(array, "weak_type", False) else ""
    devices = array.devices()
    where = repr(array.device) if len(devices) == 1 else f"{len(devices)} devices"
    head = (
        f"<b>Array</b> <code>{html.escape(type_text)}</code>{weak} "
        f"on <code>{html.escape(where)}</code>"
    )
    if value.size <= _FULL_VALUES_LIMIT:
        body = np.array2string(value, separator=", ")
        return f"<div>{head}<pre>{html.escape(body)}</pre></div>"
    edges = np.array2string(value, separator=", ", threshold=0, edgeitems=2)
    rows = "".join(
        f"<tr><th style='text-align:left'>{html.escape(name)}</th><td>{html.escape(text)}</td></tr>"
        for name, text in _summary(value)
    )
    return f"<div>{head}<table>{rows}</table><pre>{html.escape(edges)}</pre></div>"


def _summary(value: np.ndarray) -> list[tuple[str, str]]:
    """Statistics that describe a large array without printing it."""
    if value.dtype == np.bool_:
        return [("true", f"{int(np.count_nonzero(value))} of {value.size}")]
    if not (dtypes.is_float(value.dtype) or value.dtype.kind in "iu"):
        return []
    # float64 holds every narrower float and every int up to 2**53 well enough for a summary.
    wide = value.astype(np.float64)
    finite = wide[np.isfinite(wide)]
    rows = []
    if finite.size:
        rows += [
            ("min", f"{finite.min():.6g}"),
            ("max", f"{finite.max():.6g}"),
            ("mean", f"{finite.mean():.6g}"),
        ]
    if dtypes.is_float(value.dtype):
        rows += [
            ("nan", str(int(np.isnan(wide).sum()))),
            ("inf", str(int(np.isinf(wide).sum()))),
        ]
    return rows


# --- jaxprs -------------------------------------------------------------------------------------


def _span(css: str, text: str) -> str:
    return f'<span class="fg-{css}">{html.escape(text)}</span>'


class _HtmlPrinter:
    """The jaxpr pretty-printer's layout, with every token wrapped in a styled, escaped span.

    It mirrors ``funcgrad.ir.pp_jaxpr`` token for token: the text of its HTML is that printout.
    """

    def __init__(self) -> None:
        self.namer = ir._Namer()

    def atom(self, v: ir.Var | ir.Literal) -> str:
        if type(v) is ir.Literal:
            return f"{html.escape(ir._literal_text(v.val))}:{_span('type', v.aval.str_short())}"
        return _span("var", self.namer(v))

    def binder(self, v: ir.Var) -> str:
        return f"{_span('var', self.namer(v))}:{_span('type', v.aval.str_short())}"

    def param(self, value: Any, indent: int) -> str:
        if isinstance(value, ir.ClosedJaxpr):
            value = value.jaxpr
        if isinstance(value, ir.Jaxpr):
            return "\n" + "\n".join(_HtmlPrinter().lines(value, indent + 2))
        if (
            isinstance(value, tuple)
            and value
            and all(isinstance(v, (ir.Jaxpr, ir.ClosedJaxpr)) for v in value)
        ):
            inner = "".join(self.param(v, indent) for v in value)
            return f"({inner}\n{' ' * (indent + 2)})"
        return html.escape(ir._param_text(value, self.namer, indent))

    def eqn(self, eqn: ir.JaxprEqn, indent: int) -> str:
        lhs = " ".join(self.binder(v) for v in eqn.outvars) or "_"
        params = ""
        if eqn.params:
            params = (
                "["
                + " ".join(
                    f"{_span('param', k)}={self.param(v, indent)}"
                    for k, v in sorted(eqn.params.items())
                )
                + "]"
            )
        args = " ".join(self.atom(v) for v in eqn.invars)
        return f"{lhs} = {_span('prim', eqn.primitive.name)}{params} {args}".rstrip()

    def lines(self, jaxpr: ir.Jaxpr, indent: int) -> list[str]:
        pad = " " * indent
        consts = " ".join(self.binder(v) for v in jaxpr.constvars)
        args = " ".join(self.binder(v) for v in jaxpr.invars)
        lines = [f"{pad}{{ {_span('kw', 'lambda')} {consts}; {args}. {_span('kw', 'let')}"]
        lines += [f"{pad}    {self.eqn(eqn, indent + 4)}" for eqn in jaxpr.eqns]
        outs = ", ".join(self.atom(v) for v in jaxpr.outvars)
        outs = f"({outs},)" if len(jaxpr.outvars) == 1 else f"({outs})"
        lines.append(f"{pad}  {_span('kw', 'in')} {outs} }}")
        return lines


def jaxpr_html(jaxpr: ir.Jaxpr | ir.ClosedJaxpr) -> str:
    """The printed program as highlighted, escaped HTML."""
    if isinstance(jaxpr, ir.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    body = "\n".join(_HtmlPrinter().lines(jaxpr, 0))
    return f'{_STYLE}<pre class="fg-jaxpr">{body}</pre>'


# --- dataflow graphs ----------------------------------------------------------------------------


@dataclass
class _Node:
    id: str
    lines: list[str]
    kind: str  # "input", "eqn", "output", or "bend": a point a long edge passes through
    layer: int = 0
    x: float = 0.0
    y: float = 0.0

    @property
    def width(self) -> float:
        return 8.0 if self.kind == "bend" else 7.2 * max(len(line) for line in self.lines) + 16

    @property
    def height(self) -> float:
        return 0.0 if self.kind == "bend" else 16 * len(self.lines) + 10


@dataclass
class _Program:
    """One program's nodes and edges, and the programs nested in its equations as clusters."""

    id: str
    label: str
    nodes: list[_Node] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    clusters: list[tuple[str, _Program]] = field(default_factory=list)  # (owner node id, program)
    bends: list[list[_Node]] = field(default_factory=list)  # per edge, the points it passes
    x0: float = 0.0  # top-left corner of the laid-out program
    y0: float = 0.0
    width: float = 0.0
    height: float = 0.0


def _nested_jaxprs(params: dict[str, Any]) -> list[tuple[str, ir.Jaxpr]]:
    found = []
    for name, value in sorted(params.items()):
        values = value if isinstance(value, tuple) else (value,)
        jaxprs = [v for v in values if isinstance(v, (ir.Jaxpr, ir.ClosedJaxpr))]
        for i, v in enumerate(jaxprs):
            label = name if len(values) == 1 else f"{name}[{i}]"
            found.append((label, v.jaxpr if isinstance(v, ir.ClosedJaxpr) else v))
    return found


def _program(jaxpr: ir.Jaxpr, label: str, counter: list[int]) -> _Program:
    def new_id(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    program = _Program(new_id("cluster_"), label)
    namer = ir._Namer()
    producer: dict[ir.Var, str] = {}
    for kind, var in [("const", v) for v in jaxpr.constvars] + [("in", v) for v in jaxpr.invars]:
        node = _Node(new_id("n"), [f"{kind} {namer.binder(var)}"], "input")
        program.nodes.append(node)
        producer[var] = node.id
    for eqn in jaxpr.eqns:
        literals = [namer(v) for v in eqn.invars if type(v) is ir.Literal]
        head = " ".join([eqn.primitive.name, *literals])
        outs = " ".join(namer.binder(v) for v in eqn.outvars) or "_"
        node = _Node(new_id("n"), [head, outs], "eqn")
        program.nodes.append(node)
        for v in eqn.invars:
            if type(v) is ir.Var:
                program.edges.append((producer[v], node.id))
        for v in eqn.outvars:
            producer[v] = node.id
        # A call's own name (a jitted function's) says more than its parameter's name.
        owner = " ".join([eqn.primitive.name, str(eqn.params.get("name", ""))]).strip()
        for name, inner in _nested_jaxprs(eqn.params):
            inner_label = f"{owner} {name}"
            program.clusters.append((node.id, _program(inner, inner_label, counter)))
    for i, v in enumerate(jaxpr.outvars):
        node = _Node(new_id("n"), [f"out {i}: {namer(v)}"], "output")
        program.nodes.append(node)
        if type(v) is ir.Var:
            program.edges.append((producer[v], node.id))
    return program


# -- the pure-Python layout --

_GAP_X, _GAP_Y, _PAD, _CLUSTER_HEAD = 24.0, 44.0, 12.0, 22.0


def _layout(program: _Program) -> None:
    """Place nodes in layers (longest path from the inputs), order each layer by a barycenter
    sweep down and up to reduce crossings, then place nested programs to the right.

    An edge across several layers passes one bend point per layer in between; the bends are
    ordered and spaced like nodes, so the edge goes around the nodes, not through them.
    """
    nodes = {n.id: n for n in program.nodes}
    preds: dict[str, list[str]] = {n.id: [] for n in program.nodes}
    for src, dst in program.edges:
        preds[dst].append(src)
    for node in program.nodes:  # nodes come in program order, so predecessors are placed first
        if node.kind == "eqn":
            node.layer = 1 + max((nodes[p].layer for p in preds[node.id]), default=0)
    last = 1 + max((n.layer for n in program.nodes if n.kind != "output"), default=0)
    for node in program.nodes:
        if node.kind == "output":
            node.layer = last
    layers: list[list[_Node]] = [[] for _ in range(last + 1)]
    for node in program.nodes:
        layers[node.layer].append(node)
    above: dict[str, list[str]] = {n.id: [] for n in program.nodes}
    below: dict[str, list[str]] = {n.id: [] for n in program.nodes}
    program.bends = []
    for number, (src, dst) in enumerate(program.edges):
        start, end = nodes[src].layer, nodes[dst].layer
        bends = [_Node(f"{program.id}_e{number}_{i}", [], "bend", i) for i in range(start + 1, end)]
        for bend in bends:
            layers[bend.layer].append(bend)
            above[bend.id], below[bend.id] = [], []
        chain = [src, *(b.id for b in bends), dst]
        for upper, lower in zip(chain, chain[1:]):
            below[upper].append(lower)
            above[lower].append(upper)
        program.bends.append(bends)

    position = {n.id: float(i) for layer in layers for i, n in enumerate(layer)}

    def sweep(ordered: list[list[_Node]], neighbours: dict[str, list[str]]) -> None:
        for layer in ordered[1:]:

            def barycenter(n: _Node) -> float:
                around = [position[m] for m in neighbours[n.id]]
                return sum(around) / len(around) if around else position[n.id]

            layer.sort(key=barycenter)
            for i, n in enumerate(layer):
                position[n.id] = float(i)

    sweep(layers, above)
    sweep(layers[::-1], below)

    widths = [sum(n.width for n in layer) + _GAP_X * (len(layer) - 1) for layer in layers]
    graph_width = max(widths, default=0.0)
    y = _PAD
    for layer, width in zip(layers, widths):
        x = _PAD + (graph_width - width) / 2
        row_height = max((n.height for n in layer), default=0.0)
        for n in layer:
            n.x, n.y = x, y + row_height / 2 if n.kind == "bend" else y
            x += n.width + _GAP_X
        y += row_height + _GAP_Y
    program.width = graph_width + 2 * _PAD
    program.height = y - _GAP_Y + _PAD

    # Nested programs stand in a column to the right, each level with its owner if it can.
    column_x = program.width + _GAP_X
    next_free_y = 0.0
    for owner_id, inner in program.clusters:
        _layout(inner)
        top = max(nodes[owner_id].y - _CLUSTER_HEAD, next_free_y)
        _offset(inner, column_x, top + _CLUSTER_HEAD)
        next_free_y = top + _CLUSTER_HEAD + inner.height + _GAP_Y / 2
        program.width = max(program.width, column_x + inner.width)
        program.height = max(program.height, next_free_y)


def _offset(program: _Program, dx: float, dy: float) -> None:
    for n in [*program.nodes, *(b for bends in program.bends for b in bends)]:
        n.x += dx
        n.y += dy
    for _, inner in program.clusters:
        _offset(inner, dx, dy)
    program.x0 += dx
    program.y0 += dy


_NODE_FILL = {"input": "#ddf4ff", "eqn": "#ffffff", "output": "#dafbe1"}


def _svg_text(x: float, y: float, text: str, extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-family="monospace" font-size="12"{extra}>'
        f"{html.escape(text)}</text>"
    )


def _svg_program(program: _Program, out: list[str], nodes: dict[str, _Node]) -> None:
    for node in program.nodes:
        nodes[node.id] = node
    for owner_id, inner in program.clusters:
        x0, y0 = inner.x0, inner.y0 - _CLUSTER_HEAD
        title = _svg_text(x0 + 8, y0 + 15, inner.label, ' font-weight="bold"')
        out.append(
            f'<g class="cluster" id="{inner.id}"><title>{inner.id}</title>'
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{inner.width:.1f}" '
            f'height="{inner.height + _CLUSTER_HEAD:.1f}" fill="#f6f8fa" stroke="#8c959f" '
            f'rx="6"/>{title}</g>'
        )
        _svg_program(inner, out, nodes)
        owner = nodes[owner_id]
        x1, y1 = owner.x + owner.width, owner.y + owner.height / 2
        out.append(
            f'<path class="nesting" d="M{x1:.1f},{y1:.1f} L{x0:.1f},{y0 + _CLUSTER_HEAD / 2:.1f}" '
            'stroke="#8c959f" stroke-dasharray="4,3" fill="none"/>'
        )
    for node in program.nodes:
        text = "".join(
            _svg_text(node.x + 8, node.y + 18 + 16 * i, line) for i, line in enumerate(node.lines)
        )
        out.append(
            f'<g class="node" id="{node.id}"><title>{node.id}</title>'
            f'<rect x="{node.x:.1f}" y="{node.y:.1f}" width="{node.width:.1f}" '
            f'height="{node.height:.1f}" rx="4" fill="{_NODE_FILL[node.kind]}" '
            f'stroke="#57606a"/>{text}</g>'
        )
    for (src_id, dst_id), bends in zip(program.edges, program.bends):
        src, dst = nodes[src_id], nodes[dst_id]
        x2, y2 = dst.x + dst.width / 2, dst.y
        points = [(src.x + src.width / 2, src.y + src.height)]
        points += [(b.x + b.width / 2, b.y) for b in bends] + [(x2, y2 - 6)]
        line = " L".join(f"{x:.1f},{y:.1f}" for x, y in points)
        out.append(
            f'<g class="edge"><title>{src_id}-&gt;{dst_id}</title>'
            f'<path d="M{line}" stroke="#57606a" fill="none"/>'
            f'<polygon points="{x2 - 4:.1f},{y2 - 7:.1f} {x2 + 4:.1f},{y2 - 7:.1f} '
            f'{x2:.1f},{y2:.1f}" fill="#57606a"/></g>'
        )


def _layered_svg(program: _Program) -> str:
    _layout(program)
    out: list[str] = []
    _svg_program(program, out, {})
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{program.width:.0f}" '
        f'height="{program.height:.0f}" viewBox="0 0 {program.width:.1f} {program.height:.1f}">'
        f'<g class="graph">{"".join(out)}</g></svg>'
    )


# -- Graphviz --


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_program(program: _Program, out: list[str]) -> None:
    for node in program.nodes:
        label = "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in node.lines)
        out.append(f'{node.id} [label="{label}" fillcolor="{_NODE_FILL[node.kind]}"];')
    for _, inner in program.clusters:
        out.append(f"subgraph {inner.id} {{ label={_dot_quote(inner.label)};")
        _dot_program(inner, out)
        out.append("}")
    out.extend(f"{src} -> {dst};" for src, dst in program.edges)


def _graphviz_svg(program: _Program, dot: str) -> str:
    out = [
        "digraph program {",
        'node [shape=box style="rounded,filled" fontname=monospace fontsize=11];',
        'edge [color="#57606a"]; graph [style=rounded fontname=monospace];',
    ]
    _dot_program(program, out)
    out.append("}")
    result = subprocess.run(
        [dot, "-Tsvg"], input="\n".join(out), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"Graphviz ({dot}) failed to draw the graph: {result.stderr.strip()}")
    # Drop the XML prolog and doctype: notebooks embed the <svg> element itself.
    return result.stdout[result.stdout.index("<svg") :]


class Graph:
    """A drawn dataflow graph: notebooks show it; ``.svg`` is its text; ``.save`` writes it."""

    def __init__(self, svg: str) -> None:
        self.svg = svg

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text(self.svg, encoding="utf-8")


def graph(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Graph:
    """The dataflow graph of ``make_jaxpr(f)(*args, **kwargs)``.

    Inputs, equations and outputs are nodes; each use of a value is an edge; the programs
    held by ``cond``, ``scan``, ``while_loop``, ``jit`` and other equations are clusters.
    """
    from funcgrad.transforms.make_jaxpr import make_jaxpr

    closed = make_jaxpr(f)(*args, **kwargs)
    program = _program(closed.jaxpr, "program", [0])
    dot = shutil.which("dot")
    return Graph(_graphviz_svg(program, dot) if dot else _layered_svg(program))
