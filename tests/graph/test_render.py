"""DOT, SVG and HTML drawings of graphs (hlo_cli.graph.render)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from hlo_cli.graph import build_graph
from hlo_cli.graph import render
from hlo_cli.graph.render import dot_ids, dot_program, page_data, to_dot, to_html, to_svg
from hlo_cli.sources import expand, load, parse_module, read_modules

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
DATA = Path(__file__).parent / "data"
needs_dot = pytest.mark.skipif(dot_program() is None, reason="Graphviz's dot is not installed")


def _module(rel: str):
    return load(str(SAMPLES / rel))[0]


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|<(?:[^<>]|<(?:[^<>]|<[^<>]*>)*>)*>|[{};\[\]=,]|->|[^\s{};\[\]=,"<>-]+|-')


def check_dot(text: str) -> set[str]:
    """A structural check of our DOT without Graphviz: balanced braces, closed strings and HTML
    labels, every edge between declared nodes.  Returns the declared node names."""
    depth, declared, edges = 0, set(), []
    lines = text.splitlines()
    assert lines[0].startswith("digraph ") and lines[-1] == "}"
    for line in lines:
        toks = _TOKEN.findall(line)
        assert "".join(toks).replace(" ", "") == re.sub(r"\s", "", line) or '"' in line or "<" in line, line
        depth += line.count("{") - line.count("}") if '"' not in line and "<" not in line else 0
        s = line.strip()
        m = re.match(r"^(\w+) -> (\w+)( \[.*\])?;$", s)
        if m:
            edges.append((m.group(1), m.group(2)))
            continue
        m = re.match(r"^(\w+) \[(.*)\];$", s)
        if m and m.group(1) not in ("graph", "node", "edge"):
            declared.add(m.group(1))
            assert m.group(2).count('"') % 2 == 0, line
    for a, b in edges:
        assert a in declared and b in declared, (a, b)
    return declared


def test_dot_of_a_loop():
    g = build_graph(_module("loops/f8_gemm_loop.hlo"))
    text = to_dot(g)
    names = check_dot(text)
    ids = dot_ids(g)
    assert set(ids.values()) <= names
    # clusters nest as the groups do
    assert text.index('subgraph "cluster_main.4"') < text.index('subgraph "cluster_region_0.2"') \
        < text.index('subgraph "cluster_closed_call.1"')
    assert "while.5 body: region_0.2" in text
    # tuple-index edge labels, dotted call links, folded constants in labels
    assert f'{ids["while.5"]} -> {ids["while.7"]} [label="#1 bf16[64,48]"' in text
    assert re.search(rf"{ids['while.4']} -> {ids['arg_tuple.1']} \[[^\n]*style=dotted", text)
    assert "operand 1 = 20" in text
    # the loop's operand is drawn into the parameters, not also into the while
    assert f'{ids["while.4"]} -> {ids["while.5"]} ' not in text and f'{ids["while.4"]} -> {ids["while.5"]};' not in text


def test_dot_escapes_names_and_text():
    from hlo_cli.parser import parse
    m = parse('HloModule m\n\nENTRY e {\n  a = f32[] parameter(0), metadata={op_name="<b>&\\"q\\"</b>"}\n'
              '  ROOT n = f32[] custom-call(a), custom_call_target="x\\"<y>"\n}\n')
    text = to_dot(build_graph(m))
    check_dot(text)
    assert "<y>" not in text and "&lt;y&gt;" in text


def test_control_edges_are_dashed():
    g = build_graph(_module("ops/add.common_attributes.hlo"))
    text = to_dot(g)
    assert "style=dashed" in text


def test_ghosts_for_far_operands_in_large_graphs():
    g = build_graph(_module("convnets/resnet_tiny.opt.hlo"))
    text = to_dot(g)
    names = check_dot(text)
    ghosts = [n for n in names if n.startswith("gh")]
    assert ghosts and all(re.match(r"gh\d+_n\d+$", n) for n in ghosts)
    small = to_dot(build_graph(_module("loops/f8_gemm_loop.hlo")))
    assert "gh" not in "".join(check_dot(small))


def test_page_data_and_html_with_a_given_svg():
    g = build_graph(_module("loops/f8_gemm_loop.hlo"))
    data = page_data(g)
    ids = dot_ids(g)
    d = data["nodes"][ids["dot_general.1"]]
    assert (d["name"], d["opcode"], d["shape"]) == ("dot_general.1", "dot", "bf16[64,48]")
    assert d["attributes"]["lhs_contracting_dims"] == "{1}"
    assert [data["nodes"][i[0]]["name"] for i in d["inputs"]] == ["Arg_0.1", "Arg_1.1"]
    page = to_html(g, svg='<?xml version="1.0"?>\n<svg viewBox="0 0 10 10"><g id="n0" class="node"></g></svg>')
    assert page.startswith("<!DOCTYPE html>") and "<?xml" not in page
    blob = re.search(r'<script type="application/json" id="hlo-graph-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(blob)["module"] == g.module
    assert "<script src" not in page and "http://" not in page.replace("http://www.w3.org", "")


def test_html_data_cannot_close_its_script():
    from hlo_cli.parser import parse
    m = parse('HloModule m\n\nENTRY e {\n  a = f32[] parameter(0), metadata={op_name="</script><script>alert(1)"}\n'
              '  ROOT n = f32[] negate(a)\n}\n')
    page = to_html(build_graph(m), layout=False)
    assert "</script><script>alert" not in page
    assert page.count("</script>") == 2


def test_html_without_dot_holds_the_dot_text(monkeypatch):
    monkeypatch.setattr(render, "dot_program", lambda: None)
    g = build_graph(_module("loops/f8_gemm_loop.hlo"))
    page = to_html(g)
    assert "No layout" in page and "apt-get install graphviz" in page and "digraph" in page
    with pytest.raises(render.GraphvizMissing, match="apt-get install graphviz"):
        to_svg(to_dot(g))


@needs_dot
def test_svg_has_our_node_ids():
    g = build_graph(_module("loops/f8_gemm_loop.hlo"))
    svg = to_svg(to_dot(g))
    found = set(re.findall(r'<g id="(n\d+)" class="node"', svg))
    assert found == set(dot_ids(g).values())
    page = to_html(g)
    assert "<svg" in page and 'id="n0"' in page


@needs_dot
def test_dot_failure_is_reported():
    with pytest.raises(render.GraphvizFailed, match="dot failed"):
        to_svg("digraph { a -> }")


def _sample_graphs(limit: int):
    files, _ = expand([str(SAMPLES)])
    small, large = [], []
    for f in files:
        if "/invalid/" in f:
            continue
        try:
            fm = read_modules(f)
        except Exception:      # noqa: BLE001 -- not a module file
            continue
        for src in fm.modules:
            try:
                m = parse_module(src)
            except Exception:  # noqa: BLE001 -- the samples of errors
                continue
            g = build_graph(m)
            (small if len(g.nodes) <= limit else large).append((src.label, g))
    return small, large


@pytest.mark.slow
def test_every_sample_draws():
    """Every sample module's DOT passes our check; dot lays out all those of up to 300 nodes (in one
    run: dot reads several graphs from one input) and two large ones."""
    small, large = _sample_graphs(300)
    assert len(small) > 300 and large
    texts = []
    for label, g in small + large:
        check_dot(texts.append(to_dot(g)) or texts[-1])
    if dot_program() is None:
        pytest.skip("Graphviz's dot is not installed: DOT checked without a layout")
    r = subprocess.run([dot_program(), "-Tsvg"], input="".join(texts[:len(small)]).encode(), capture_output=True)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr[:2000]
    assert r.stdout.count(b"<svg") == len(small)
    for rel in ("convnets/resnet_tiny.opt.hlo", "tensorflow/lstm_train_step.hlo"):
        svg = to_svg(to_dot(build_graph(_module(rel))))
        assert "<svg" in svg
