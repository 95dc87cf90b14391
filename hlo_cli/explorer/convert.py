"""The graph model (`hlo_cli.graph.model.Graph`) as Model Explorer's graph JSON and node data JSON.

Plain dicts and lists, shaped as Model Explorer's `graph_builder` and `node_data_builder`
dataclasses serialise (their field names), so that the same dict is both the file
`hlo graph --format explorer` writes and what the adapter extension hands to Model Explorer.
No import of model_explorer here: the JSON forms need nothing installed.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

# the file suffixes the adapter registers: HLO text (our own files, XLA's dumps, saved graphs),
# HloModuleProto / HloSnapshot in binary and text form (Model Explorer offers its TensorFlow
# adapters first for .pb: `python -m hlo_cli.explorer FILE.pb` opens them with ours)
EXPLORER_EXTENSIONS = ["hlo", "txt", "hlotxt", "pb", "pbtxt", "textproto"]
ADAPTER_ID = "hlo_cli_hlo_adapter"        # the adapter's id in Model Explorer

# node data files per overlay kind: the metrics worth a file of their own, the primary one first
_NODE_DATA_METRICS = {"stats": ("nonfinite", "max_abs", "mean", "min", "max"),
                      "profile": ("self_ms", "total_ms", "percent"),
                      "diff": ("max_rel_diff", "max_abs_diff")}
# a layer with more nodes than this directly in it is divided: by op_name scope where the nodes
# have op_names (the framework's name stack), else into blocks of consecutive instructions
LAYER_LIMIT = 300
_GRADIENT = [{"stop": 0, "bgColor": "#fff5eb"}, {"stop": 0.5, "bgColor": "#fdae6b"},
             {"stop": 1, "bgColor": "#e6550d"}]


def _kv(key: str, value) -> dict:
    return {"key": key, "value": "" if value is None else str(value)}


def _segment(text: str) -> str:
    """A namespace component: Model Explorer splits namespaces at '/'."""
    return text.replace("/", "\u2215")


def _label(node) -> str:
    stem = node.name.split(".", 1)[0].replace("-", "_")
    if stem.startswith(node.opcode.replace("-", "_")) or (node.opcode == "fusion" and "fusion" in node.name):
        return node.name                  # the name says the opcode: add.5, dot_general.3, reduce_sum.7
    return f"{node.title} {node.name}"


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _blocks(ids: list[str], start: int = 0) -> dict[str, str]:
    """node id -> a block namespace, for IDS in text order: blocks of at most LAYER_LIMIT
    consecutive instructions, themselves grouped again while there are more than LAYER_LIMIT."""
    if len(ids) <= LAYER_LIMIT:
        return {i: "" for i in ids}
    size = LAYER_LIMIT
    while -(-len(ids) // size) > LAYER_LIMIT:
        size *= LAYER_LIMIT
    out: dict[str, str] = {}
    for a in range(0, len(ids), size):
        part = ids[a:a + size]
        name = f"instructions {start + a + 1}-{start + a + len(part)}"
        for i, sub in _blocks(part, start + a).items():
            out[i] = _join(name, sub)
    return out


def _scopes(ids: list[str], nodes: dict) -> dict[str, str] | None:
    """node id -> its op_name scope below the scope all of them share (JAX: jit(f)/jvp(model)/...),
    or None when too few of IDS have an op_name to go by."""
    named = [i for i in ids if nodes[i].op_name and "/" in nodes[i].op_name]
    if len(named) * 2 < len(ids):
        return None
    paths = {i: [_segment(c) for c in nodes[i].op_name.split("/")[:-1] if c] for i in named}
    common = None
    for p in paths.values():
        if common is None:
            common = list(p)
        else:
            k = 0
            while k < min(len(common), len(p)) and common[k] == p[k]:
                k += 1
            del common[k:]
    depth = len(common or ())
    out = {i: "/".join(paths[i][depth:]) if i in paths else "" for i in ids}
    if len({v for v in out.values()}) <= 1:
        return None
    return out


def _subdivide(ids: list[str], nodes: dict) -> dict[str, str]:
    """node id -> the namespace below its computation's layer (see LAYER_LIMIT)."""
    if len(ids) <= LAYER_LIMIT:
        return {i: "" for i in ids}
    scoped = _scopes(ids, nodes)
    if scoped is None:
        return _blocks(ids)
    by_space: dict[str, list[str]] = {}
    for i in ids:
        by_space.setdefault(scoped[i], []).append(i)
    out: dict[str, str] = {}
    for space, members in by_space.items():
        for i, sub in _blocks(members).items():
            out[i] = _join(space, sub)
    return out


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _overlay_text(values: dict) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in values.items() if not k.startswith("_"))


def _node_attrs(node, overlay_values) -> list[dict]:
    a = [_kv("name", node.name), _kv("opcode", node.title), _kv("shape", node.shape)]
    if node.parameter_number is not None:
        a.append(_kv("parameter_number", node.parameter_number))
    if node.is_root:
        a.append(_kv("root", "ROOT of " + node.computation))
    a.append(_kv("computation", node.computation))
    if node.op_name:
        a.append(_kv("op_name", node.op_name))
    if node.source:
        a.append(_kv("source", node.source))
    if len(node.stack) > 1:
        a.append(_kv("stack", "\n".join(node.stack)))
    if node.location:
        a.append(_kv("hlo_text", node.location))
    if node.fused_computation:
        a.append(_kv("fused_computation", node.fused_computation))
    if node.collapsed:
        a.append(_kv("fused_instructions", node.fused_size))
        a.append(_kv("fused_opcodes", ", ".join(f"{k} x{v}" for k, v in node.fused_opcodes.items())))
    for k, text in node.inline_operands.items():
        a.append(_kv(f"operand {k}", f"constant {text}"))
    for line in node.applies:
        a.append(_kv("applies", line))
    for k, v in node.attributes.items():
        if k == "kind" and node.fusion_kind:
            continue
        a.append(_kv(k, v))
    if node.hidden_inputs:
        a.append(_kv("inputs_not_drawn", node.hidden_inputs))
    if node.hidden_outputs:
        a.append(_kv("users_not_drawn", node.hidden_outputs))
    for name, values in overlay_values:
        a.append(_kv(name, _overlay_text(values)))
    return a


def _input_tag(edge) -> tuple[str, str]:
    """(input id, tag) of an edge at its target."""
    if edge.kind == "data":
        k = edge.operand_index or 0
        return str(k), (f"operand {k}" if edge.tuple_index is None else f"operand {k} (#{edge.tuple_index})")
    if edge.kind == "control":
        return f"control:{edge.source}", "control"
    if edge.kind == "param":
        return "0", f"param {edge.operand_index}"
    return f"result:{edge.source}", "result"


def explorer_graphs(graph, overlays=(), module=None, graph_id: str | None = None) -> list[dict]:
    """Model Explorer graphs (dicts) for GRAPH: the main one first, then one per distinct applied
    computation (reducers, comparators...) when MODULE is given (see the package docstring)."""
    from ..graph.overlays import project
    gid = graph_id or graph.module
    projected = [(ov.name, project(ov, graph)) for ov in overlays]
    # a group's layer sits next to the node calling it (the first caller drawn), so that a large
    # layer divided into blocks keeps each called computation beside its caller
    ns: dict[str, str] = {}
    node_ns: dict[str, str] = {}
    extra_spaces: dict[str, dict[str, str]] = {}     # namespaces made by dividing a large layer
    for g_id, grp in graph.groups.items():            # parents before children
        if g_id == graph.root_group or grp.parent is None:
            ns[g_id] = ""
        else:
            caller = next((c for c in grp.callers if c in node_ns), None)
            outer = node_ns[caller] if caller is not None else ns.get(grp.parent, "")
            ns[g_id] = _join(outer, _segment(grp.label))
        members = [n for n in grp.nodes if n in graph.nodes]
        for nid, sub in _subdivide(members, graph.nodes).items():
            node_ns[nid] = _join(ns.get(g_id, ""), sub)
            if sub:
                parts = sub.split("/")
                for k in range(1, len(parts) + 1):
                    path = _join(ns.get(g_id, ""), "/".join(parts[:k]))
                    if path not in extra_spaces:
                        extra_spaces[path] = {
                            "computation": grp.computation,
                            "kind": ("instructions in text order" if parts[k - 1].startswith("instructions ")
                                     else "op_name scope")}
    nodes: dict[str, dict] = {}
    for nid, node in graph.nodes.items():
        ovals = [(name, vals[nid]) for name, vals in projected if nid in vals]
        nodes[nid] = {
            "id": nid, "label": _label(node), "namespace": node_ns.get(nid, ns.get(node.group, "")),
            "subgraphIds": [], "attrs": _node_attrs(node, ovals), "incomingEdges": [],
            "outputsMetadata": [{"id": "0", "attrs": [_kv("shape", node.shape),
                                                      _kv("__tensor_tag", node.name)]}],
            "inputsMetadata": [],
        }
    for e in graph.edges:
        tgt = nodes.get(e.target)
        if tgt is None or e.source not in nodes:
            continue
        inp, tag = _input_tag(e)
        if any(x["targetNodeInputId"] == inp for x in tgt["incomingEdges"]):
            inp = f"{inp}:{e.source}"
        tgt["incomingEdges"].append({"sourceNodeId": e.source, "sourceNodeOutputId": "0",
                                     "targetNodeInputId": inp})
        attrs = [_kv("__tensor_tag", tag)]
        if e.shape:
            attrs.append(_kv("shape", e.shape))
        tgt["inputsMetadata"].append({"id": inp, "attrs": attrs})
    group_attrs: dict[str, dict[str, str]] = {}
    for g_id, grp in graph.groups.items():
        path = ns[g_id]
        if not path:
            continue
        group_attrs[path] = {"computation": grp.computation, "kind": grp.kind.replace("_", " "),
                             "called_by": ", ".join(grp.callers), "instructions": str(grp.size)}
    for path, attrs in extra_spaces.items():
        group_attrs.setdefault(path, attrs)
    main = {"id": gid, "nodes": list(nodes.values())}
    if group_attrs:
        main["groupNodeAttributes"] = group_attrs
    out = [main]
    if module is not None:
        out.extend(_applied_subgraphs(graph, module, nodes, gid))
    return out


def _structure_key(comp) -> tuple:
    """Two computations with the same key compute the same thing (names aside)."""
    from ..ir.printer import format_shape
    index = {i.name: k for k, i in enumerate(comp.instructions)}
    rows = []
    for i in comp.instructions:
        attrs = tuple(sorted((k, repr(v)) for k, v in i.attrs.items() if k != "metadata"))
        rows.append((i.opcode, format_shape(i.shape, False), tuple(index.get(o, o) for o in i.operands),
                     attrs, repr(i.literal) if i.literal is not None else None, i.parameter_number,
                     i.name == comp.root))
    return tuple(rows)


def _applied_subgraphs(graph, module, nodes: dict, gid: str) -> list[dict]:
    """Graphs for the computations nodes apply without drawing them (and collapsed fusions'
    computations), one per distinct structure, linked through the nodes' subgraphIds."""
    from ..graph import build_graph
    from ..graph.model import module_index
    comps = module.computation_map
    index = None                        # the module's ids and fusion callers, computed once
    drawn = set(graph.groups)
    shared: dict[tuple, str] = {}       # structure -> subgraph id
    members: dict[str, list[str]] = {}  # subgraph id -> computations it stands for
    out = []
    for nid, node in graph.nodes.items():
        for cname in node.calls:
            if cname in drawn or cname not in comps:
                continue
            key = _structure_key(comps[cname])
            sid = shared.get(key)
            if sid is None:
                sid = shared[key] = f"{cname}"
                members[sid] = []
                try:
                    index = index or module_index(module)
                    sub = build_graph(module, computation=cname, expand_fusions=True, index=index)
                except Exception:       # noqa: BLE001 -- a subgraph is a convenience, never a failure
                    continue
                out.append(explorer_graphs(sub, (), None, graph_id=sid)[0])
            if cname not in members[sid]:
                members[sid].append(cname)
            if sid not in nodes[nid]["subgraphIds"] and any(g["id"] == sid for g in out):
                nodes[nid]["subgraphIds"].append(sid)
    for g in out:
        alike = members.get(g["id"], [])
        if len(alike) > 1:       # say on its root which computations the subgraph stands for
            for n in g["nodes"]:
                if any(a["key"] == "root" for a in n["attrs"]):
                    n["attrs"].append(_kv("stands_for", ", ".join(alike)))
    return out


def to_explorer_json(graph, overlays=(), module=None, label: str | None = None) -> dict:
    """The graph collection Model Explorer loads from a JSON file: ``{"label", "graphs": [...]}``.
    OVERLAYS (hlo_cli.graph.overlays.Overlay) add their values to the nodes' attributes; MODULE
    adds subgraphs for applied computations (see the package docstring)."""
    return {"label": label or graph.module, "graphs": explorer_graphs(graph, overlays, module)}


def _slug(text: str) -> str:
    s = re.sub(r"\s*\(.*\)\s*$", "", text)           # "values (run/)" -> "values"
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_.")
    return s or "overlay"


def _number(x):
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, (int, float)) and math.isfinite(x):
        return x
    return None


def overlays_to_node_data(overlays, graph=None, graph_id: str | None = None) -> dict[str, dict]:
    """Model Explorer node data for OVERLAYS: ``{file name part: node data JSON}``, one per overlay
    and metric (``values.nonfinite``, ``time.self_ms``, ``diff.max_rel_diff``...).

    With GRAPH the values are projected on its drawn nodes (a collapsed fusion takes its members')
    and keyed by its graph id (``{graph id: {"results": ...}}``, Model Explorer's "model node
    data"); without it the raw per-instruction values are written as one graph's node data
    (``{"results": ...}``), which Model Explorer applies to the graph on screen.  The primary
    metric is coloured as every other drawing colours it (`hlo_cli.graph.overlays.style`), the
    others by a gradient from the smallest to the largest value."""
    from ..graph.overlays import project, style
    out: dict[str, dict] = {}
    used: dict[str, int] = {}
    for ov in overlays:
        values = project(ov, graph) if graph is not None else {k: dict(v) for k, v in ov.values.items()}
        fills, _legend = style(values, ov)
        metrics = list(_NODE_DATA_METRICS.get(ov.kind, ()))
        if ov.primary and ov.primary in metrics:
            metrics.remove(ov.primary)
        if ov.primary:
            metrics.insert(0, ov.primary)
        base = _slug(ov.name)
        n = used.get(base, 0)
        used[base] = n + 1
        if n:
            base = f"{base}{n + 1}"
        for metric in metrics:
            results = {}
            for nid, v in values.items():
                x = _number(v.get(metric))
                if x is None and ov.kind == "stats" and metric == "nonfinite":
                    x = _number(v.get("fused_nonfinite")) or 0
                if x is None:
                    continue
                r: dict = {"value": x}
                if metric == ov.primary and nid in fills:
                    r["bgColor"] = fills[nid]
                results[nid] = r
            if not results:
                continue
            data: dict = {"name": f"{ov.name}: {metric}", "results": results}
            if metric != ov.primary or not fills:
                data["gradient"] = _GRADIENT
            key = f"{base}.{metric}"
            out[key] = {graph_id or graph.module: data} if graph is not None else data
    return out


def write_explorer_files(path: str | Path, graph, overlays=(), module=None) -> list[Path]:
    """Write GRAPH's collection to PATH and each overlay metric's node data next to it
    (``graph.json`` -> ``graph.values.nonfinite.json``...); the paths written, graph first."""
    path = Path(path)
    written = [path]
    path.write_text(json.dumps(to_explorer_json(graph, overlays, module)), encoding="utf-8")
    stem = path.name[:-len(path.suffix)] if path.suffix else path.name
    for key, data in overlays_to_node_data(overlays, graph).items():
        p = path.with_name(f"{stem}.{key}.json")
        p.write_text(json.dumps(data), encoding="utf-8")
        written.append(p)
    return written
