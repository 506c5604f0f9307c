"""Rich display in notebooks: array cards, highlighted jaxprs, and dataflow graphs as SVG."""

import html
import re
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import dtypes, ir, lax, viz
from funcgrad.array import sharded

SVG = "{http://www.w3.org/2000/svg}"


def _text(markup: str) -> str:
    """The text a browser shows for a fragment of our HTML (tags dropped, entities decoded)."""
    markup = re.sub(r"<style>.*?</style>", "", markup)
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _well_formed(markup: str) -> ET.Element:
    return ET.fromstring(f"<root>{markup}</root>")


# --- arrays -------------------------------------------------------------------------------------


def test_small_array_shows_type_device_and_every_value():
    x = fnp.asarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    markup = x._repr_html_()
    _well_formed(markup)
    text = _text(markup)
    assert "int16[3,4]" in text and "CpuDevice(id=0)" in text
    assert [int(v) for v in re.findall(r"\d+", text.split("CpuDevice(id=0)")[1])] == list(range(12))


def test_large_array_shows_a_summary_not_a_wall_of_numbers():
    value = np.linspace(-3.0, 5.0, 10_000, dtype=np.float32).reshape(100, 100)
    value[0, 1] = np.nan
    value[7, 3] = np.inf
    value[9, 9] = -np.inf
    markup = fnp.asarray(value)._repr_html_()
    text = _text(markup)
    assert "float32[100,100]" in text
    finite = value[np.isfinite(value)].astype(np.float64)
    rows = {tr.find("th").text: tr.find("td").text for tr in _well_formed(markup).iter("tr")}
    assert float(rows["min"]) == pytest.approx(finite.min(), rel=1e-5)
    assert float(rows["max"]) == pytest.approx(finite.max(), rel=1e-5)
    assert float(rows["mean"]) == pytest.approx(finite.mean(), rel=1e-5, abs=1e-6)
    assert rows["nan"] == "1" and rows["inf"] == "2"
    assert len(re.findall(r"-?\d+\.\d+", text)) < 30


@pytest.mark.parametrize(
    "value, expected",
    [
        (np.arange(500) % 3 == 0, ["true", "167 of 500"]),
        (np.arange(1000, dtype=np.int64) - 200, ["min", "-200", "max", "799", "mean", "299.5"]),
        (np.full(300, 1.5, dtype=dtypes.bfloat16), ["bfloat16[300]", "mean", "1.5", "nan"]),
    ],
)
def test_large_arrays_of_other_dtypes_are_summarised(value, expected):
    text = _text(fnp.asarray(value)._repr_html_())
    for word in expected:
        assert word in text


def test_sharded_array_names_its_device_count():
    shards = [np.zeros(3, np.float32), np.ones(3, np.float32)]
    y = sharded(shards, [fg.Device("cpu", 0), fg.Device("cpu", 1)])
    assert "float32[2,3] on 2 devices" in _text(y._repr_html_())


def test_repr_is_unchanged():
    assert repr(fnp.asarray(np.array([1.0, 2.0], np.float32))) == ("Array([1., 2.], dtype=float32)")


# --- jaxprs -------------------------------------------------------------------------------------


def _program(x, y):
    z = lax.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 1, x)
    carry, ys = lax.scan(lambda c, v: (c + v, c * v), 0.0, y)
    count, _ = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, carry))
    return fnp.sin(z) + count, fg.jit(lambda q: q * 3)(ys)


ARGS = (fnp.ones(3), fnp.ones(4))


def test_jaxpr_html_shows_the_printed_program_highlighted_and_escaped():
    closed = fg.make_jaxpr(_program)(*ARGS)
    markup = closed._repr_html_()
    _well_formed(markup)  # the jitted lambda is named _program.<locals>.<lambda>
    assert _text(markup) == str(closed)
    assert closed.jaxpr._repr_html_() == markup
    primitives = re.findall(r'<span class="fg-prim">([^<]*)</span>', markup)
    assert {"cond", "scan", "while", "jit", "sin", "sub", "mul"} <= set(primitives)
    assert '<span class="fg-type">f32[3]</span>' in markup


# --- graphs -------------------------------------------------------------------------------------


def _expected_counts(jaxpr: ir.Jaxpr) -> tuple[int, int, int]:
    """Nodes (inputs, equations, outputs), data edges (uses of variables) and nested programs,
    counted straight from the program."""
    nodes = len(jaxpr.constvars) + len(jaxpr.invars) + len(jaxpr.eqns) + len(jaxpr.outvars)
    edges = sum(type(v) is ir.Var for v in jaxpr.outvars)
    clusters = 0
    for eqn in jaxpr.eqns:
        edges += sum(type(v) is ir.Var for v in eqn.invars)
        for value in eqn.params.values():
            for inner in value if isinstance(value, tuple) else (value,):
                if isinstance(inner, (ir.Jaxpr, ir.ClosedJaxpr)):
                    inner = inner.jaxpr if isinstance(inner, ir.ClosedJaxpr) else inner
                    n, e, c = _expected_counts(inner)
                    nodes, edges, clusters = nodes + n, edges + e, clusters + c + 1
    return nodes, edges, clusters


def _groups(root: ET.Element, css: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if css in (g.get("class") or "").split()]


def _title(group: ET.Element) -> str:
    return group.find(f"{SVG}title").text


ENGINES = [
    "layered",
    pytest.param(
        "graphviz",
        marks=pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed"),
    ),
]


@pytest.fixture(params=ENGINES)
def engine(request, monkeypatch):
    if request.param == "layered":
        monkeypatch.setattr(shutil, "which", lambda name: None)
    return request.param


@pytest.mark.parametrize(
    "f, args",
    [
        (_program, ARGS),
        (lambda x: fnp.tanh(x @ x.T).sum(), (fnp.ones((2, 3)),)),
        (lambda x: fg.checkpoint(lambda y: fnp.sin(y) * y)(x), (1.0,)),
        (lambda x: 2.0, (1.0,)),
    ],
)
def test_graph_has_a_node_per_equation_an_edge_per_use_and_a_cluster_per_nested_program(
    engine, f, args
):
    jaxpr = fg.make_jaxpr(f)(*args).jaxpr
    drawing = viz.graph(f, *args)
    root = ET.fromstring(drawing.svg)
    assert root.tag == f"{SVG}svg"
    nodes, edges, clusters = _expected_counts(jaxpr)
    node_ids = {_title(g) for g in _groups(root, "node")}
    assert len(node_ids) == nodes
    edge_titles = [_title(g) for g in _groups(root, "edge")]
    assert len(edge_titles) == edges
    for title in edge_titles:
        src, dst = title.split("->")
        assert src in node_ids and dst in node_ids
    assert len(_groups(root, "cluster")) == clusters
    shown = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    for eqn in jaxpr.eqns:
        assert eqn.primitive.name in shown


def test_graph_escapes_text(engine):
    drawing = viz.graph(_program, *ARGS)
    root = ET.fromstring(drawing.svg)  # would fail on a raw "<locals>"
    shown = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "jit _program.<locals>.<lambda> jaxpr" in shown


def _boxes(root: ET.Element) -> dict[str, tuple[float, float, float, float]]:
    boxes = {}
    for g in _groups(root, "node"):
        rect = g.find(f"{SVG}rect")
        x, y = float(rect.get("x")), float(rect.get("y"))
        boxes[_title(g)] = (x, y, x + float(rect.get("width")), y + float(rect.get("height")))
    return boxes


def test_layered_layout_points_edges_down_and_never_overlaps_nodes(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    root = ET.fromstring(viz.graph(_program, *ARGS).svg)
    boxes = _boxes(root)
    for g in _groups(root, "edge"):
        src, dst = _title(g).split("->")
        assert boxes[dst][1] > boxes[src][3]  # the consumer sits below its producer
    items = list(boxes.values())
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
            assert apart, (a, b)
    width, height = float(root.get("width")), float(root.get("height"))
    assert all(x1 <= width + 1 and y1 <= height + 1 for _, _, x1, y1 in items)


def test_graph_saves_and_shows_its_svg(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    drawing = viz.graph(lambda x: x * 2, 1.0)
    assert drawing._repr_svg_() == drawing.svg
    drawing.save(tmp_path / "g.svg")
    assert (tmp_path / "g.svg").read_text(encoding="utf-8") == drawing.svg
