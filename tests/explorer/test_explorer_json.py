"""Model Explorer's graph JSON and node data JSON from the graph model (hlo_cli.explorer), and the
adapter's conversion of files; no browser here (tests/e2e draws them)."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from hlo_cli.explorer import overlays_to_node_data, to_explorer_json, write_explorer_files
from hlo_cli.graph import build_graph
from hlo_cli.graph.overlays import Overlay
from hlo_cli.sources import load

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"


def _module(rel: str):
    return load(str(SAMPLES / rel))[0]


def _nodes(g: dict) -> dict[str, dict]:
    return {n["id"]: n for n in g["nodes"]}


def _attrs(n: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in n["attrs"]:
        out.setdefault(a["key"], a["value"])
    return out


def _check_well_formed(coll: dict):
    """Every edge names a node of its graph, input ids are unique per node and each has metadata,
    subgraph ids name graphs of the collection, group attributes name namespaces in use."""
    ids = {g["id"] for g in coll["graphs"]}
    assert len(ids) == len(coll["graphs"])
    json.dumps(coll)
    for g in coll["graphs"]:
        nodes = _nodes(g)
        assert len(nodes) == len(g["nodes"])
        spaces = set()
        for n in g["nodes"]:
            parts = n["namespace"].split("/") if n["namespace"] else []
            spaces.update("/".join(parts[:k]) for k in range(1, len(parts) + 1))
            inputs = [e["targetNodeInputId"] for e in n["incomingEdges"]]
            assert len(inputs) == len(set(inputs)), n["id"]
            assert {m["id"] for m in n["inputsMetadata"]} == set(inputs)
            for e in n["incomingEdges"]:
                assert e["sourceNodeId"] in nodes
            for s in n["subgraphIds"]:
                assert s in ids
        assert set(g.get("groupNodeAttributes") or {}) <= spaces


def test_while_bodies_and_calls_are_nested_layers():
    m = _module("jax/fori_loop.hlo")
    g = build_graph(m)
    coll = to_explorer_json(g)
    _check_well_formed(coll)
    assert coll["label"] == m.name
    main = coll["graphs"][0]
    assert main["id"] == m.name and len(main["nodes"]) == len(g.nodes)
    nodes = _nodes(main)
    # the entry is the top level; a while body is a layer named by its caller; a call in it, a layer inside
    assert nodes["while.16"]["namespace"] == ""
    body = g.groups["region_0.2"].label
    assert body == "while.16 body: region_0.2"
    assert any(n["namespace"] == body for n in main["nodes"])
    assert any(n["namespace"].startswith(body + "/closed_call.4") for n in main["nodes"])
    ga = main["groupNodeAttributes"][body]
    assert ga["kind"] == "while body" and ga["called_by"] == "while.16" and ga["computation"] == "region_0.2"
    # the while's inputs: its operand, and the results of its condition and body, each tagged with a shape
    w = nodes["while.16"]
    tags = {m["id"]: {a["key"]: a["value"] for a in m["attrs"]} for m in w["inputsMetadata"]}
    assert tags["0"] == {"__tensor_tag": "operand 0", "shape": "(s32[], s32[], f32[4,4], f32[4,4])"}
    assert sorted(t["__tensor_tag"] for t in tags.values()) == ["operand 0", "result", "result"]
    assert _attrs(w)["opcode"] == "while"
    assert _attrs(w)["hlo_text"].endswith("fori_loop.hlo:102")
    # a node whose name hides its opcode says it in its label
    assert nodes["while.15"]["label"] == "tuple while.15"
    assert nodes["while.16"]["outputsMetadata"][0]["attrs"][0] == {"key": "shape",
                                                                   "value": "(s32[], s32[], f32[4,4], f32[4,4])"}


def test_fusions_inside_a_while_body_nest_two_deep():
    m = _module("jax/scan_loop.opt.hlo")
    g = build_graph(m, expand_fusions=True)
    coll = to_explorer_json(g)
    _check_well_formed(coll)
    tanh = _nodes(coll["graphs"][0])["tanh.2"]
    parts = tanh["namespace"].split("/")
    assert len(parts) == 2 and "body" in parts[0] and parts[1].startswith("add_tanh_fusion")
    a = _attrs(tanh)
    assert a["opcode"] == "tanh" and a["shape"] == "f32[2,16]"
    assert a["op_name"] == "jit(scan_loop)/while/body/closed_call/tanh"
    assert "source" in a                      # the framework's file:line, from the stack frames
    # collapsed (the default of build_graph): one node for the fusion, with what it fuses
    coll = to_explorer_json(build_graph(m))
    f = _attrs(_nodes(coll["graphs"][0])["add_tanh_fusion"])
    assert f["opcode"] == "fusion kLoop" and int(f["fused_instructions"]) >= 3 and "tanh" in f["fused_opcodes"]


def test_reducers_become_shared_subgraphs():
    m = _module("jax/reductions.hlo")
    g = build_graph(m)
    coll = to_explorer_json(g, module=m)
    _check_well_formed(coll)
    main, subs = coll["graphs"][0], coll["graphs"][1:]
    users = [n for n in main["nodes"] if n["subgraphIds"]]
    applied = {c for n in g.nodes.values() for c in n.calls if c not in g.groups}
    assert users and subs
    assert len(subs) < len(applied)            # structurally equal reducers share one subgraph
    for n in users:
        assert any(a["key"] == "applies" for a in n["attrs"])
    # without the module: no subgraphs, the summary stays on the node
    assert len(to_explorer_json(g)["graphs"]) == 1


def _stats_overlay() -> Overlay:
    return Overlay("values (run/)", "stats",
                   {"x.1": {"nonfinite": 0, "nan": 0, "inf": 0, "max_abs": 2.0, "mean": 0.5, "status": "finite"},
                    "while.16": {"nonfinite": 3, "nan": 3, "inf": 0, "max_abs": 1.0, "mean": 0.1,
                                 "status": "first non-finite", "first_nonfinite": 1}},
                   "nonfinite", "while.16", "run/manifest.json")


def test_overlays_become_node_data_files(tmp_path):
    m = _module("jax/fori_loop.hlo")
    g = build_graph(m)
    ov = _stats_overlay()
    data = overlays_to_node_data([ov], g)
    assert list(data)[0] == "values.nonfinite"
    assert {"values.nonfinite", "values.max_abs", "values.mean"} <= set(data)
    nd = data["values.nonfinite"][m.name]
    assert nd["results"]["while.16"]["value"] == 3
    assert nd["results"]["while.16"]["bgColor"] != nd["results"]["x.1"]["bgColor"]
    assert "gradient" in data["values.max_abs"][m.name]
    # without a graph: one graph's node data, raw values (Model Explorer applies it to the graph shown)
    bare = overlays_to_node_data([ov])["values.nonfinite"]
    assert bare["results"]["while.16"]["value"] == 3
    # the values also go on the nodes of the graph JSON
    coll = to_explorer_json(g, [ov])
    assert "nan=3" in _attrs(_nodes(coll["graphs"][0])["while.16"])["values (run/)"]
    written = write_explorer_files(tmp_path / "graph.json", g, [ov], m)
    assert [p.name for p in written][:2] == ["graph.json", "graph.values.nonfinite.json"]
    assert json.loads(written[0].read_text())["graphs"][0]["id"] == m.name


def test_node_data_of_a_collapsed_fusion_comes_from_inside():
    m = _module("jax/scan_loop.opt.hlo")
    g = build_graph(m)
    ov = Overlay("values (d/)", "stats", {"tanh.2": {"nonfinite": 2, "nan": 2, "inf": 0, "status": "first non-finite",
                                                     "first_nonfinite": 1}}, "nonfinite", "tanh.2")
    res = overlays_to_node_data([ov], g)["values.nonfinite"][m.name]["results"]
    assert "add_tanh_fusion" in res and "tanh.2" not in res


# ----------------------------------------------------------------------------- the adapter

needs_explorer = pytest.mark.skipif(importlib.util.find_spec("model_explorer") is None,
                                    reason="Model Explorer is not installed (pip install \"hlo-cli[explorer]\")")


@needs_explorer
def test_adapter_builds_model_explorer_objects():
    from hlo_cli.explorer.main import HloAdapter
    from model_explorer.utils import convert_adapter_response
    out = HloAdapter().convert(str(SAMPLES / "jax" / "scan_loop.opt.hlo"), {})
    resp = convert_adapter_response(out)
    coll = {"label": "x", "graphs": resp["graphs"]}
    _check_well_formed(coll)
    main = resp["graphs"][0]
    assert main["id"] == "jit_scan_loop"
    assert any(n["id"] == "tanh.2" for n in main["nodes"])     # fusions expanded: their insides are nodes
    assert HloAdapter.metadata.fileExts and "hlo" in HloAdapter.metadata.fileExts
    assert asdict(out["graphs"][0])["id"] == main["id"]


@needs_explorer
def test_adapter_opens_every_module_of_a_file():
    from hlo_cli.explorer.main import convert_file
    graphs = convert_file(str(SAMPLES / "multi" / "lit_three_modules.hlo"))
    ids = [g["id"] for g in graphs]
    assert len(ids) == len(set(ids))
    assert sum(1 for i in ids if i.startswith(("0: ", "1: ", "2: "))) >= 3


@needs_explorer
def test_adapter_reports_a_bad_file_with_hlo_s_message(tmp_path):
    from hlo_cli.explorer.main import HloExplorerError, convert_file
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\n\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] frobnicate(x)\n}\n")
    with pytest.raises(HloExplorerError) as e:
        convert_file(str(bad))
    assert "bad.hlo:5" in str(e.value)
    with pytest.raises(HloExplorerError) as e:
        convert_file(str(tmp_path / "missing.hlo"))
    assert "missing.hlo" in str(e.value)


def _chain_module(n: int, tmp_path: Path, metadata: bool = False):
    lines = ["HloModule chain", "", "ENTRY main {", "  x = f32[4] parameter(0)"]
    prev = "x"
    for k in range(n):
        md = f', metadata={{op_name="jit(f)/layer_{k // 100}/add"}}' if metadata else ""
        lines.append(f"  a{k} = f32[4] add({prev}, x){md}")
        prev = f"a{k}"
    lines.append(f"  ROOT r = f32[4] negate({prev})")
    lines.append("}")
    p = tmp_path / "chain.hlo"
    p.write_text("\n".join(lines) + "\n")
    return load(str(p))[0]


def test_a_large_layer_is_divided_into_blocks_in_text_order(tmp_path):
    from hlo_cli.explorer.convert import LAYER_LIMIT
    m = _chain_module(2 * LAYER_LIMIT + 10, tmp_path)
    coll = to_explorer_json(build_graph(m))
    _check_well_formed(coll)
    main = coll["graphs"][0]
    spaces = {n["namespace"] for n in main["nodes"]}
    assert spaces == {f"instructions 1-{LAYER_LIMIT}", f"instructions {LAYER_LIMIT + 1}-{2 * LAYER_LIMIT}",
                      f"instructions {2 * LAYER_LIMIT + 1}-{2 * LAYER_LIMIT + 12}"}
    assert _nodes(main)["x"]["namespace"] == f"instructions 1-{LAYER_LIMIT}"
    assert main["groupNodeAttributes"][f"instructions 1-{LAYER_LIMIT}"]["kind"] == "instructions in text order"


def test_a_large_layer_with_op_names_is_divided_by_scope(tmp_path):
    from hlo_cli.explorer.convert import LAYER_LIMIT
    m = _chain_module(LAYER_LIMIT + 50, tmp_path, metadata=True)
    main = to_explorer_json(build_graph(m))["graphs"][0]
    nodes = _nodes(main)
    # the scope every node shares (jit(f)) is left out; layer_k is the layer
    assert nodes["a0"]["namespace"] == "layer_0" and nodes["a250"]["namespace"] == "layer_2"
    assert nodes["x"]["namespace"] == ""          # no op_name: stays in its computation's layer
    assert main["groupNodeAttributes"]["layer_1"]["kind"] == "op_name scope"


@needs_explorer
def test_launcher_opens_every_file_with_our_adapter(tmp_path):
    from hlo_cli.explorer.__main__ import build_config, main
    from hlo_cli.explorer.convert import ADAPTER_ID
    pb = str(SAMPLES / "dumps" / "protos" / "module_0004.jit_small.cpu_after_optimizations.hlo.pb")
    cfg = build_config([pb, str(tmp_path / "graph.json")])
    assert cfg.model_sources[0]["adapterId"] == ADAPTER_ID
    assert "adapterId" not in cfg.model_sources[1]          # graph JSON: Model Explorer's own loader
    assert main([str(tmp_path / "missing.hlo"), "--no-browser"]) == 2


def test_profile_and_diff_overlays_become_node_data():
    m = _module("jax/fori_loop.hlo")
    g = build_graph(m)
    prof = Overlay("time (p.json)", "profile", {"while.16": {"self_ms": 2.0, "total_ms": 5.0, "percent": 40.0},
                                                "x.1": {"self_ms": 0.1, "total_ms": 0.1, "percent": 2.0}}, "self_ms")
    diff = Overlay("diff (d.json)", "diff", {"while.16": {"status": "differ", "max_rel_diff": 0.5, "max_abs_diff": 1.0,
                                                          "first_difference": 1},
                                             "x.1": {"status": "agree", "max_rel_diff": 0.0, "max_abs_diff": 0.0}},
                   "max_rel_diff", "while.16")
    data = overlays_to_node_data([prof, diff], g)
    assert list(data) == ["time.self_ms", "time.total_ms", "time.percent", "diff.max_rel_diff", "diff.max_abs_diff"]
    t = data["time.self_ms"][m.name]
    assert t["results"]["while.16"]["value"] == 2.0 and "bgColor" in t["results"]["while.16"]
    d = data["diff.max_rel_diff"][m.name]["results"]
    assert d["while.16"]["bgColor"] != d["x.1"]["bgColor"]
