"""HLO graphs looked at as a person would: Model Explorer with our extension, Model Explorer on
`hlo graph --format explorer` JSON with a NaN overlay as node data, and `hlo graph`'s own HTML page,
each in headless Chromium: the graph is drawn, a known node is found by search and its details
shown; a screenshot of each goes to the test's tmp_path."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import which_hlo

ROOT = Path(__file__).resolve().parents[2]
SCAN = ROOT / "samples" / "jax" / "scan_loop.opt.hlo"     # a while loop whose body holds fusions

pytestmark = pytest.mark.slow


def _search_explorer(browser, text: str) -> list[str]:
    """Type TEXT in Model Explorer's search box; the labels of the results listed."""
    browser.eval('document.querySelector("input[placeholder*=Search]").focus()')
    browser.type_text(text)
    return browser.wait_for(
        "(() => { const xs = [...document.querySelectorAll('span.node-label')].map(e => e.textContent.trim());"
        f" return xs.some(x => x.includes({json.dumps(text)})) ? xs : null; }})()", timeout=30)


def _alt_click_result(browser, label: str):
    """Alt+click a search result: Model Explorer locates the node (expanding its layers) and selects it."""
    x, y = browser.eval(
        "(() => { const el = [...document.querySelectorAll('span.node-label')]"
        f".find(e => e.textContent.trim() === {json.dumps(label)});"
        " const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    for kind in ("mousePressed", "mouseReleased"):
        browser.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                  "clickCount": 1, "modifiers": 1})


def _graph_info(browser) -> dict:
    """Model Explorer's GRAPH INFO numbers once a graph is drawn."""
    text = browser.wait_for("(() => { const t = document.body.innerText;"
                            " return t.includes('op node count') && document.querySelector('canvas.main') ? t : null; })()",
                            timeout=90)
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    out = {}
    for key in ("op node count", "layer count"):
        i = lines.index(key)
        out[key] = int(lines[i + 1].replace(",", ""))
    return out


def test_model_explorer_opens_hlo_with_our_adapter(browser, explorer_server, screenshot):
    from hlo_cli.explorer.main import convert_file
    main = convert_file(str(SCAN))[0]
    server = explorer_server([SCAN])
    assert "HLO adapter (hlo-cli)" in server.log
    browser.open(server.url)
    info = _graph_info(browser)
    assert info["op node count"] == len(main["nodes"])
    assert info["layer count"] >= 3            # the while's body and condition, the fusions in the body
    screenshot("model_explorer_collapsed")
    # a node two layers down (a fusion's computation inside the while body), found by search
    labels = _search_explorer(browser, "tanh.2")
    assert "tanh.2" in labels
    _alt_click_result(browser, "tanh.2")
    panel = browser.wait_for("(() => { const t = document.body.innerText;"
                             " return t.includes('ATTRIBUTES') && t.includes('closed_call/tanh') ? t : null; })()",
                             timeout=30)
    assert "f32[2,16]" in panel and "opcode" in panel
    assert "scan_loop" in panel                # the source file:line of the metadata
    screenshot("model_explorer_tanh_selected")


def _nan_module(tmp_path: Path) -> Path:
    p = tmp_path / "nan.hlo"
    p.write_text("""HloModule nan_demo

ENTRY main {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  s = f32[8] add(x, y)
  l = f32[8] log(s)
  m = f32[8] multiply(l, y)
  ROOT r = f32[8] tanh(m)
}
""")
    return p


def test_model_explorer_loads_graph_json_with_nan_overlay(browser, explorer_server, screenshot, tmp_path):
    from hlo_cli.explorer import write_explorer_files
    from hlo_cli.graph import build_graph
    from hlo_cli.graph.overlays import load_overlays
    from hlo_cli.sources import load
    mod_path = _nan_module(tmp_path)
    dumps = tmp_path / "dumps"
    run = subprocess.run([*which_hlo(), "run", str(mod_path), "--random-inputs", "--dump-dir", str(dumps)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 1), run.stderr
    module, _ = load(str(mod_path))
    ovs = load_overlays(str(dumps), module)
    assert ovs and ovs[0].first == "l"         # log of a negative sum: the first NaN
    written = write_explorer_files(tmp_path / "graph.json", build_graph(module), ovs, module)
    names = [p.name for p in written]
    assert "graph.values.nonfinite.json" in names, names
    server = explorer_server([tmp_path / "graph.json"], [tmp_path / "graph.values.nonfinite.json"])
    browser.open(server.url)
    info = _graph_info(browser)
    assert info["op node count"] == len(build_graph(module).nodes)
    # the node data is loaded: its name is listed and the node's value is on the page
    browser.wait_for("document.body.innerText.includes('nonfinite')", timeout=30)
    labels = _search_explorer(browser, "log l")
    _alt_click_result(browser, next(x for x in labels if x == "log l"))
    panel = browser.wait_for("(() => { const t = document.body.innerText;"
                             " return t.includes('ATTRIBUTES') && t.includes('first non-finite') ? t : null; })()",
                             timeout=30)
    assert "nan=" in panel
    assert "NODE DATA PROVIDERS" in panel        # the node data file's value for the node
    screenshot("model_explorer_nan_overlay")


def test_model_explorer_opens_an_hlo_module_proto(browser, explorer_server, screenshot):
    from hlo_cli.explorer.main import convert_file
    pb = ROOT / "samples" / "dumps" / "protos" / "module_0004.jit_small.cpu_after_optimizations.hlo.pb"
    main = convert_file(str(pb))[0]
    server = explorer_server([pb], launcher=True)        # .pb: Model Explorer would offer TensorFlow's adapter
    browser.open(server.url)
    assert _graph_info(browser)["op node count"] == len(main["nodes"])
    screenshot("model_explorer_module_proto")


def test_hlo_graph_html_page(browser, screenshot, tmp_path):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed (Debian: apt-get install graphviz): the page has no drawing")
    out = tmp_path / "scan.html"
    r = subprocess.run([*which_hlo(), "graph", str(SCAN), "--expand-fusions", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    browser.open(out.as_uri())
    # (the page is parsed incrementally: count once it has loaded and its script has run)
    n_svg = browser.wait_for("(() => { const s = document.querySelector('#view svg');"
                             " return document.readyState === 'complete' && window.hloGraph && s &&"
                             " s.querySelectorAll('g.node').length; })()", timeout=60)
    assert n_svg > 20
    matches = browser.eval("window.hloGraph.search('tanh.2')")
    assert matches, "search found nothing"
    browser.wait_for("document.getElementById('count').textContent.includes('found')", timeout=10)
    browser.eval("document.getElementById('search').focus()")
    browser.press("Enter")                       # jump to the first match: its details are shown
    details = browser.wait_for("(() => { const t = document.getElementById('details').innerText;"
                               " return t.includes('tanh.2') ? t : null; })()", timeout=10)
    assert "f32[2,16]" in details
    assert browser.eval("document.querySelectorAll('#view svg g.node.hl').length") >= 1
    screenshot("hlo_graph_html")
