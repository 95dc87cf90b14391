"""Overlays: values on the nodes from a real dump, a profile, and a diff (hlo_cli.graph.overlays)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_cli.cli import main
from hlo_cli.graph import build_graph
from hlo_cli.graph.overlays import OverlayError, load_overlays, project, style
from hlo_cli.graph.render import dot_ids, page_data, to_dot
from hlo_cli.parser import parse
from hlo_cli.sources import load

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
DATA = Path(__file__).parent / "data"
NAN = DATA / "nan_in_fusion.hlo"


def _run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code in (0, 1), r.output
    return r


@pytest.fixture(scope="module")
def nan_dump(tmp_path_factory):
    d = tmp_path_factory.mktemp("nan") / "dump"
    _run("run", NAN, "--random-inputs", "--dump-dir", d)
    return d


def test_dump_overlay_marks_the_first_non_finite_inside_a_fusion(nan_dump):
    m = parse(NAN.read_text(), str(NAN))
    [ov] = load_overlays(str(nan_dump), m)
    assert ov.kind == "stats" and ov.primary == "nonfinite" and ov.first == "log"
    assert ov.values["log"]["nan"] == 4 and ov.values["log"]["status"] == "first non-finite"
    assert ov.values["x"]["nonfinite"] == 0 and ov.values["e"]["min"] > 0
    g = build_graph(m)
    vals = project(ov, g)
    # the fusion stands for its fused log: it is marked, with its own values
    assert vals["f"]["first_nonfinite"] == 1 and vals["f"]["first_nonfinite_inside"] == "log"
    assert vals["f"]["nan"] == 4 and vals["g"]["status"] == "non-finite"
    fills, legend = style(vals, ov)
    assert fills["f"] != fills["g"] != fills["x"]
    assert legend[0][1] == "first non-finite value"
    text = to_dot(g, [ov])
    ids = dot_ids(g)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(ids["f"] + " ["))
    assert "FIRST NON-FINITE" in line and "penwidth=3" in line and fills["f"] in line
    assert 'legend [shape=plain' in text
    # the manifest itself works as well; expanded, the log itself is marked
    [ov2] = load_overlays(str(nan_dump / "manifest.json"), m)
    ge = build_graph(m, expand_fusions=True)
    assert project(ov2, ge)["log"]["first_nonfinite"] == 1


def test_dump_overlay_of_a_real_sample_with_nan(tmp_path):
    """samples/jax/reductions: NaN propagation through reductions, after XLA's fusions."""
    mod = SAMPLES / "jax/reductions.opt.hlo"
    d = tmp_path / "dump"
    _run("run", mod, "--inputs", SAMPLES / "jax/reductions.inputs.npz", "--dump-dir", d, "--dump-summary")
    m = load(str(mod))[0]
    [ov] = load_overlays(str(d), m)
    manifest = json.loads((d / "manifest.json").read_text())
    bad = [e for e in manifest["instructions"]
           if any((s.get("nan") or 0) + (s.get("inf") or 0) for s in e["stats"])]
    first = min(bad, key=lambda e: e["order"])
    assert ov.first == first["instruction"]
    g = build_graph(m)
    vals = project(ov, g)
    assert sum(1 for v in vals.values() if v.get("first_nonfinite")) == 1
    assert any(v["status"] == "non-finite" for v in vals.values())
    data = page_data(g, [ov])
    assert data["overlays"][0]["first"] == dot_ids(g)[g.node_of(first["computation"], first["instruction"])]


def test_profile_overlay(tmp_path):
    mod = SAMPLES / "jax/attention.opt.hlo"
    r = _run("run", mod, "--inputs", SAMPLES / "jax/attention.inputs.npz", "--profile", "--format", "json")
    p = tmp_path / "prof.json"
    p.write_text(r.stdout)
    m = load(str(mod))[0]
    [ov] = load_overlays(str(p), m)
    assert ov.kind == "profile" and ov.primary == "self_ms" and ov.values
    top = json.loads(r.stdout)["profile"]["top_instructions"][0]
    assert any(k == top["instruction"] or k.endswith("/" + top["instruction"]) for k in ov.values)
    g = build_graph(m)
    vals = project(ov, g)
    assert vals and all(n in g.nodes for n in vals)
    # the compiled path reports fused instructions under the entry: their time goes to the fusion
    assert sum(v["self_ms"] for v in vals.values()) == pytest.approx(
        sum(v["self_ms"] for k, v in ov.values.items() if g.node_of(*next(
            (c, n) for (c, n), i in g.ids.items() if i == k)) is not None), rel=1e-6, abs=1e-6)
    fills, legend = style(vals, ov)
    assert "self_ms" in legend[0][1]
    # the profile object alone also works
    p2 = tmp_path / "prof_only.json"
    p2.write_text(json.dumps(json.loads(r.stdout)["profile"]))
    assert load_overlays(str(p2), m)[0].values == ov.values


def test_diff_overlay_picks_the_side_of_the_module(tmp_path):
    m = parse(NAN.read_text(), str(NAN))
    doc = {"verdict": "differ", "a": "other.hlo", "b": str(NAN), "module_a": "other", "module_b": m.name,
           "pairs": [{"a": "x0", "b": "x", "computation_a": "main", "computation_b": "main", "status": "agree",
                      "max_abs_diff": 0.0, "max_rel_diff": 0.0},
                     {"a": "e0", "b": "e", "computation_a": "main", "computation_b": "main", "status": "differ",
                      "max_abs_diff": 0.5, "max_rel_diff": 0.1},
                     {"a": "l0", "b": "log", "computation_a": "fused", "computation_b": "fused_log",
                      "status": "differ", "max_abs_diff": 2.0, "max_rel_diff": 1.0},
                     {"a": "r0", "b": "r", "computation_a": "main", "computation_b": "main", "status": "skipped"}],
           "first_differences": [{"a": "l0", "b": "log", "computation_a": "fused", "computation_b": "fused_log"}],
           "only_in_a": [], "only_in_b": ["g"]}
    p = tmp_path / "diff.json"
    p.write_text(json.dumps(doc))
    [ov] = load_overlays(str(p), m)
    assert ov.kind == "diff" and ov.first == "log" and "side b" in ov.note
    assert ov.values["e"]["status"] == "differ" and ov.values["e"]["paired_with"] == "e0"
    assert ov.values["log"]["diverges_here"] == 1
    assert ov.values["r"]["status"] == "skipped"
    g = build_graph(m)
    vals = project(ov, g)
    assert vals["f"]["first_difference"] == 1 and vals["f"]["max_rel_diff"] == 1.0
    fills, _ = style(vals, ov)
    assert len({fills["x"], fills["e"], fills["f"], fills["r"]}) == 4


def test_bad_overlays(tmp_path):
    m = parse(NAN.read_text(), str(NAN))
    with pytest.raises(OverlayError, match="no such file"):
        load_overlays(str(tmp_path / "nope.json"), m)
    (tmp_path / "empty").mkdir()
    with pytest.raises(OverlayError, match="without a manifest.json"):
        load_overlays(str(tmp_path / "empty"), m)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(OverlayError, match="not JSON"):
        load_overlays(str(tmp_path / "x.json"), m)
    (tmp_path / "y.json").write_text('{"hello": 1}')
    with pytest.raises(OverlayError, match="neither"):
        load_overlays(str(tmp_path / "y.json"), m)
    (tmp_path / "z.json").write_text(json.dumps({"instructions": [
        {"order": 1, "computation": "c", "instruction": "nothing_here", "stats": [{"nan": 1}]}]}))
    with pytest.raises(OverlayError, match="none of its instructions is in module"):
        load_overlays(str(tmp_path / "z.json"), m)


def test_diff_overlay_from_hlo_diff(tmp_path):
    a, b = DATA / "diff_a.hlo", DATA / "diff_b.hlo"
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--random-inputs", "--format", "json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    p = tmp_path / "diff.json"
    p.write_text(r.stdout)
    first = doc["first_differences"][0]
    for path, side in ((b, "b"), (a, "a")):
        m = load(str(path))[0]
        [ov] = load_overlays(str(p), m)
        assert f"side {side}" in ov.note and ov.first == first[side]
        assert ov.values[first[side]]["status"] == "first difference"
        agree = [q[side] for q in doc["pairs"] if q["status"] == "agree"]
        assert agree and all(ov.values[n]["status"] == "agree" for n in agree)


MASKED = """HloModule masked

ENTRY main {
  x = f32[4] parameter(0)
  ninf = f32[] constant(-inf)
  mask = f32[4] broadcast(ninf), dimensions={}
  zero = f32[4] broadcast(f32[] constant(0)), dimensions={}
  keep = pred[4] compare(x, zero), direction=GT
  masked = f32[4] select(keep, x, mask)
  big = f32[4] broadcast(f32[] constant(1e30)), dimensions={}
  scaled = f32[4] multiply(x, big)
  sq = f32[4] multiply(scaled, scaled)
  ROOT out = (f32[4], f32[4]) tuple(masked, sq)
}
"""


def test_the_first_non_finite_is_where_one_is_made_not_a_constant_or_what_carries_it(tmp_path):
    """A -inf constant (a mask) and the values that only carry it are not the origin: the overflow
    of a finite product is, as `hlo run --check-finite` judges."""
    mod = tmp_path / "masked.hlo"
    mod.write_text(MASKED)
    import numpy as np
    np.save(tmp_path / "x.npy", np.array([1, -1, 2, -2], np.float32))
    d = tmp_path / "dump"
    _run("run", mod, "--input", tmp_path / "x.npy", "--dump-dir", d)
    m = parse(MASKED, str(mod))
    [ov] = load_overlays(str(d), m)
    assert ov.values["ninf"]["inf"] == 1 and ov.values["masked"]["inf"] == 2
    assert ov.first == "sq"
    r = CliRunner().invoke(main, ["run", str(mod), "--input", str(tmp_path / "x.npy"), "--check-finite"])
    assert "sq" in r.output


def test_explorer_format_writes_node_data_next_to_the_graph_and_never_overwrites(tmp_path):
    mod = tmp_path / "masked.hlo"
    mod.write_text(MASKED)
    d = tmp_path / "dump"
    _run("run", mod, "--random-inputs", "--dump-dir", d)
    out = tmp_path / "g.json"
    r = CliRunner().invoke(main, ["graph", str(mod), "--overlay", str(d), "-o", str(out)])
    assert r.exit_code == 0, r.output
    nd = tmp_path / "g.values.nonfinite.json"
    assert nd.is_file() and json.loads(out.read_text())["graphs"]
    assert "node_data_paths" in r.output
    before = nd.read_bytes()
    out.unlink()                        # the graph file is free, a node-data file is not
    r = CliRunner().invoke(main, ["graph", str(mod), "--overlay", str(d), "-o", str(out)])
    assert r.exit_code == 2 and "refusing to overwrite" in r.output and "Traceback" not in r.output
    assert nd.read_bytes() == before and not out.exists()
    r = CliRunner().invoke(main, ["graph", str(mod), "--overlay", str(d), "-o", str(out), "--force"])
    assert r.exit_code == 0, r.output


def test_an_empty_overlay_path_is_a_usage_error():
    r = CliRunner().invoke(main, ["graph", str(SAMPLES / "jax/reductions.opt.hlo"), "--overlay", ""])
    assert r.exit_code == 2 and "--overlay needs a path" in r.output and "Traceback" not in r.output
