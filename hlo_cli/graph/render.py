"""Drawings of a Graph: Graphviz DOT (our own writer), SVG (laid out by the system `dot`), and a
self-contained HTML page (the SVG with a small script of ours: pan, zoom, search, details).

    text = to_dot(graph, overlays)          # always available
    svg = to_svg(text)                      # GraphvizMissing (exit 2) without Graphviz's dot
    page = to_html(graph, overlays)         # the SVG when dot is there, else the DOT and how to get a layout

Node colours: by opcode family, or, with overlays, by the first overlay's primary metric (the
HTML page switches between overlays); a legend names them.  Control edges are dashed; the links
between a caller and the computation it calls (operand -> parameter, root -> caller) dotted.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

from ..errors import HloInputError
from .model import Graph
from .overlays import NEUTRAL, format_value, project, style

_SHAPE_MAX = 48            # shapes in labels are cut here (the details keep them whole)

_FAMILY_FILL = {
    "elementwise_unary": "#e8eef7", "elementwise_binary": "#e8eef7", "elementwise_ternary": "#e8eef7",
    "compare": "#e8eef7", "convert": "#eef3e2", "shape": "#f3f3f3", "dynamic_shape": "#f3f3f3",
    "reduction": "#fff4cc", "linalg": "#e6dcf5", "normalization": "#fde2c8", "indexing": "#dff1ef",
    "tuple": "#fafafa", "control": "#d9f0d3", "collective": "#f9d5e5", "io": "#f9d5e5", "rng": "#fde2c8",
    "memory": "#f3f3f3", "misc": "#f3f3f3",
}
_FILL_PARAMETER, _FILL_CONSTANT, _FILL_FUSION = "#cfe3f7", "#e6e6e6", "#d4eef7"
_GROUP_STYLE = {   # kind -> (border colour, background)
    "entry": ("#555555", "#ffffff"), "computation": ("#555555", "#ffffff"),
    "while_body": ("#2f7d32", "#f4fbf3"), "while_condition": ("#8a6d00", "#fffbea"),
    "branch": ("#1f5fa8", "#f2f7fd"), "call": ("#6a3fa0", "#f8f4fd"), "fusion": ("#0f7c8c", "#f0fafb"),
    "async": ("#a33b72", "#fdf3f8"),
}


class GraphvizMissing(HloInputError):
    """SVG asked for, and Graphviz's `dot` is not installed (exit 2)."""


class GraphvizFailed(HloInputError):
    """Graphviz's `dot` could not lay the graph out."""


HOW_TO_GET_DOT = ("Graphviz's `dot` program lays graphs out: install Graphviz (Debian/Ubuntu: "
                  "`apt-get install graphviz`; Fedora: `dnf install graphviz`; macOS: `brew install graphviz`; "
                  "conda: `conda install graphviz`), or write DOT (`-o graph.dot`) and lay it out elsewhere")


def dot_program() -> str | None:
    """The path of Graphviz's `dot`, None when it is not installed."""
    return shutil.which("dot")


# ----------------------------------------------------------------------------- DOT

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _q(s: str) -> str:
    """A DOT quoted string (control characters, which Graphviz's SVG cannot hold, left out)."""
    s = _CONTROL.sub("", str(s))
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _h(s) -> str:
    """Text inside a DOT HTML-like label."""
    return html.escape(_CONTROL.sub("", str(s)).replace("\n", " "), quote=True)


def _cut(s: str, n: int = _SHAPE_MAX) -> str:
    return s if len(s) <= n else s[:n - 3] + "..."


def _family(opcode: str) -> str:
    from ..ir.opcodes import lookup
    spec = lookup(opcode)
    return getattr(spec, "family", "misc") if spec is not None else "misc"


def default_fill(node) -> str:
    """A node's fill without overlays: by kind of opcode."""
    if node.opcode == "parameter":
        return _FILL_PARAMETER
    if node.opcode == "constant":
        return _FILL_CONSTANT
    if node.opcode == "fusion":
        return _FILL_FUSION
    return _FAMILY_FILL.get(_family(node.opcode), "#f3f3f3")


def dot_ids(graph: Graph) -> dict[str, str]:
    """Node id -> the short name the DOT text (and the SVG's elements) give it: n0, n1, ..."""
    return {nid: f"n{k}" for k, nid in enumerate(graph.nodes)}


def _prepare(graph: Graph, overlays):
    """Projected overlay values, each overlay's (fills, legend), the fills used for drawing."""
    overlays = list(overlays or ())
    projected = [project(ov, graph) for ov in overlays]
    styles = [style(p, ov) for p, ov in zip(projected, overlays)]
    return overlays, projected, styles


def _label(node, first_marks: list[str], primary: tuple[str, dict] | None) -> str:
    rows = [f"<B>{_h(node.title)}</B>", _h(_cut(node.name, 60)), f'<FONT POINT-SIZE="8">{_h(_cut(node.shape))}</FONT>']
    small = []
    small += node.label_attributes[:2]
    if node.collapsed:
        ops = ", ".join(f"{op}" + (f"\u00d7{n}" if n > 1 else "") for op, n in list(node.fused_opcodes.items())[:3])
        more = "..." if len(node.fused_opcodes) > 3 else ""
        small.append(f"{node.fused_size} fused: {ops}{more}")
    for k, t in sorted(node.inline_operands.items()):
        small.append(f"operand {k} = {t}")
    for a in node.applies[:2]:
        small.append(a)
    if node.hidden_inputs or node.hidden_outputs:
        parts = []
        if node.hidden_inputs:
            parts.append(f"{node.hidden_inputs} more in")
        if node.hidden_outputs:
            parts.append(f"{node.hidden_outputs} more out")
        small.append("(" + ", ".join(parts) + ")")
    if primary is not None:
        metric, vals = primary
        v = vals.get(node.id)
        if v is not None and metric == "nonfinite":
            if v.get("nonfinite") or v.get("fused_nonfinite"):
                small.append(f"NaN {v.get('nan', 0):,}, Inf {v.get('inf', 0):,}"
                             + (f" ({v['fused_nonfinite']:,} inside)" if v.get("fused_nonfinite") else ""))
            elif "max_abs" in v:
                small.append(f"|x| \u2264 {v['max_abs']:.4g}")
        elif v is not None and metric in v:
            small.append(f"{metric} = {format_value(v[metric])}")
    for m in first_marks:
        small.append(m.upper())
    for s in small:
        rows.append(f'<FONT POINT-SIZE="8">{_h(_cut(s, 60))}</FONT>')
    return "<" + "<BR/>".join(rows) + ">"


GHOST_MIN_NODES = 60       # in graphs of more nodes than this, far operands are drawn as ghosts
GHOST_SPAN = 4             # ... those more than this many levels above their user
LABELS_MAX_EDGES = 600     # more edges than this: shapes only in the edges' tooltips
LARGE_LAYOUT_NODES = 2500  # more nodes than this: Graphviz's quicker, less tidy placement


def _levels(graph: Graph, edges) -> dict[str, int]:
    """Each node's level: the longest path to it from a node without inputs (over EDGES)."""
    succs: dict[str, list] = {}
    indeg = {n: 0 for n in graph.nodes}
    for e in edges:
        succs.setdefault(e.source, []).append(e.target)
        indeg[e.target] += 1
    level = {n: 0 for n in graph.nodes}
    ready = [n for n, d in indeg.items() if d == 0]
    while ready:
        n = ready.pop()
        for m in succs.get(n, ()):
            if level[n] + 1 > level[m]:
                level[m] = level[n] + 1
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    return level


def _ghost_edges(graph: Graph, edges) -> set[int]:
    """Indices of the EDGES drawn from a ghost of their source: in a large graph, data edges from a
    node many levels above its user (weights used late, values kept for the root tuple).  Each such
    edge would otherwise cross the whole drawing, and laying out the long edges of a training step
    is what takes Graphviz minutes."""
    if len(graph.nodes) <= GHOST_MIN_NODES:
        return set()
    level = _levels(graph, edges)
    return {k for k, e in enumerate(edges)
            if e.kind == "data" and level[e.target] - level[e.source] > GHOST_SPAN}


def to_dot(graph: Graph, overlays=None, *, edge_labels: bool | None = None) -> str:
    """The graph as Graphviz DOT text.  edge_labels: write shapes on edges (default: when the graph has
    at most LABELS_MAX_EDGES edges: labels slow the layout down; the shapes stay in the tooltips).
    In a graph of more than GHOST_MIN_NODES nodes, an operand more than GHOST_SPAN levels above its
    user is drawn as a small dashed copy (a ghost, ↗ name) next to the user."""
    overlays, projected, styles = _prepare(graph, overlays)
    ids = dot_ids(graph)
    if edge_labels is None:
        edge_labels = len(graph.edges) <= LABELS_MAX_EDGES
    fills = styles[0][0] if styles else None
    primary = (overlays[0].primary, projected[0]) if overlays else None
    marks: dict[str, list[str]] = {}
    for ov, p in zip(overlays, projected):
        for nid, v in p.items():
            if v.get("first_nonfinite"):
                marks.setdefault(nid, []).append("first non-finite")
            if v.get("first_difference"):
                marks.setdefault(nid, []).append("first difference")
    # a large graph gets Graphviz's quicker placement (fewer network-simplex and crossing-reduction
    # iterations: much less layout time on a convnet's training step, but a visibly less tidy
    # drawing, hence only above LARGE_LAYOUT_NODES)
    quick = "nslimit=2, nslimit1=2, mclimit=0.3, " if len(graph.nodes) > LARGE_LAYOUT_NODES else ""
    out = [f"digraph {_q(graph.module)} {{",
           f'  graph [rankdir=TB, newrank=true, {quick}nodesep=0.25, ranksep=0.35, fontname="Helvetica", fontsize=11, '
           f'tooltip={_q(graph.module)}];',
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.08,0.03", '
           'color="#666666", penwidth=1];',
           '  edge [fontname="Helvetica", fontsize=8, color="#666666", fontcolor="#444444", arrowsize=0.6];']
    focus = graph.options.get("focus")

    def node_line(nid: str, indent: str) -> str:
        n = graph.nodes[nid]
        fill = (fills.get(nid, NEUTRAL) if fills is not None else default_fill(n))
        attrs = [f"label={_label(n, marks.get(nid, []), primary)}", f"fillcolor={_q(fill)}",
                 f"id={_q(ids[nid])}", f"tooltip={_q(n.name + ' = ' + n.opcode + ' ' + n.shape)}"]
        if n.opcode == "parameter":
            attrs.append('shape=box, style="rounded,filled,bold"')
        if n.is_root:
            attrs.append("penwidth=2")
        if nid in marks:
            attrs.append('color="#b00000", penwidth=3')
        elif nid == focus:
            attrs.append('color="#0050d0", penwidth=3')
        return f"{indent}{ids[nid]} [{', '.join(attrs)}];"

    # an operand passed into a drawn computation is drawn once: into the parameter, not also into the caller
    passed = {(e.source, e.via) for e in graph.edges if e.kind == "param"}
    drawn = [e for e in graph.edges if e.source in ids and e.target in ids
             and not (e.kind == "data" and (e.source, e.target) in passed)]
    ghosts = _ghost_edges(graph, drawn)
    ghost_nodes: dict[str, list[str]] = {}       # group id -> its ghost node lines

    def edge_attrs(e) -> list[str]:
        attrs = []
        if edge_labels and e.label:
            attrs.append(f"label={_q(_cut(e.label, 40))}")
        if e.label:
            attrs.append(f"tooltip={_q(e.label)}")
        if e.kind == "control":
            attrs.append('style=dashed, color="#999999", arrowhead=empty')
        elif e.kind in ("param", "result"):
            attrs.append('style=dotted, color="#6a6acd"')
        return attrs

    edge_lines = []
    for k, e in enumerate(drawn):
        attrs = edge_attrs(e)
        src = ids[e.source]
        if k in ghosts:
            # a far operand: a small copy of it next to its user instead of an edge across the drawing
            gname = f"gh{k}_{src}"
            s_node = graph.nodes[e.source]
            ghost_nodes.setdefault(graph.nodes[e.target].group, []).append(
                f"{gname} [label={_q(chr(0x2197) + ' ' + _cut(s_node.name, 40))}, id={_q(gname)}, shape=box, "
                f'style="rounded,dashed", fillcolor="#ffffff", fontsize=8, height=0.2, margin="0.04,0.01", '
                f"tooltip={_q('from ' + s_node.name + ' (drawn further up; click to go there)')}];")
            src = gname
        edge_lines.append(f"  {src} -> {ids[e.target]}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")

    def emit_group(gid: str, depth: int):
        g = graph.groups[gid]
        ind = "  " * (depth + 1)
        border, bg = _GROUP_STYLE.get(g.kind, ("#555555", "#ffffff"))
        out.append(f"{ind}subgraph {_q('cluster_' + gid)} {{")
        size = f" ({g.size} instructions)" if g.size else ""
        out.append(f'{ind}  label=<<B>{_h(g.label)}</B>{_h(size)}>; labeljust=l; style="rounded,filled"; '
                   f'color={_q(border)}; fillcolor={_q(bg)}; penwidth=1.2; id={_q("g_" + str(depth) + "_" + gid)};')
        for nid in g.nodes:
            out.append(node_line(nid, ind + "  "))
        for line in ghost_nodes.get(gid, ()):
            out.append(ind + "  " + line)
        for c in g.children:
            emit_group(c, depth + 1)
        out.append(f"{ind}}}")

    if graph.root_group in graph.groups:
        emit_group(graph.root_group, 0)
    out.extend(edge_lines)
    if overlays:
        rows = [f'<TR><TD COLSPAN="2"><B>{_h(overlays[0].name)}</B></TD></TR>']
        for color, text in styles[0][1]:
            rows.append(f'<TR><TD BGCOLOR="{_h(color)}" WIDTH="18"> </TD><TD ALIGN="LEFT">{_h(text)}</TD></TR>')
        if overlays[0].note:
            rows.append(f'<TR><TD COLSPAN="2"><FONT POINT-SIZE="8">{_h(_cut(overlays[0].note, 90))}</FONT></TD></TR>')
        out.append('  legend [shape=plain, id="dot_legend", label=<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="2" '
                   'COLOR="#999999" BGCOLOR="#ffffff">' + "".join(rows) + "</TABLE>>];")
    out.append("}")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- SVG

def to_svg(dot_text: str, timeout: float | None = None) -> str:
    """DOT text laid out by Graphviz's `dot` as SVG.  GraphvizMissing without dot, GraphvizFailed
    when dot fails (its message included)."""
    prog = dot_program()
    if prog is None:
        raise GraphvizMissing("SVG needs a layout and Graphviz's `dot` was not found. " + HOW_TO_GET_DOT + ".")
    try:
        r = subprocess.run([prog, "-Tsvg"], input=dot_text.encode("utf-8"), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GraphvizFailed(f"Graphviz's dot took more than {timeout:.0f} s to lay the graph out; narrow it "
                             f"(--computation, --around ... --depth K) or write DOT") from None
    except OSError as e:
        raise GraphvizFailed(f"cannot run Graphviz's dot ({prog}): {e.strerror or e}") from None
    if r.returncode != 0:
        msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GraphvizFailed("Graphviz's dot failed to lay the graph out: " + " / ".join(msg[:5]))
    return r.stdout.decode("utf-8", "replace")


# ----------------------------------------------------------------------------- HTML

def page_data(graph: Graph, overlays=None) -> dict:
    """What the HTML page's script knows about the graph: every node's details and the overlays'
    colours, keyed by the DOT names (n0, n1, ...)."""
    overlays, projected, styles = _prepare(graph, overlays)
    ids = dot_ids(graph)
    ins: dict[str, list] = {}
    outs: dict[str, list] = {}
    for e in graph.edges:
        if e.source in ids and e.target in ids:
            ins.setdefault(e.target, []).append([ids[e.source], e.kind, e.label])
            outs.setdefault(e.source, []).append([ids[e.target], e.kind, e.label])
    nodes = {}
    for nid, n in graph.nodes.items():
        grp = graph.groups.get(n.group)
        d = {"id": n.id, "name": n.name, "computation": n.computation, "group": grp.label if grp else n.group,
             "opcode": n.title, "shape": n.shape, "attributes": n.attributes, "op_name": n.op_name,
             "source": n.source, "stack": n.stack, "location": n.location, "root": n.is_root,
             "applies": n.applies, "inline_operands": {str(k): v for k, v in n.inline_operands.items()},
             "inputs": ins.get(nid, []), "outputs": outs.get(nid, []), "fill": default_fill(n)}
        if n.collapsed:
            d["fused"] = {"computation": n.fused_computation, "size": n.fused_size, "opcodes": n.fused_opcodes}
        if n.hidden_inputs or n.hidden_outputs:
            d["hidden"] = {"inputs": n.hidden_inputs, "outputs": n.hidden_outputs}
        vals = {}
        for ov, p in zip(overlays, projected):
            if nid in p:
                vals[ov.name] = {k: format_value(v) for k, v in p[nid].items()}
        if vals:
            d["values"] = vals
        nodes[ids[nid]] = d
    ovs = []
    for ov, (fills, legend) in zip(overlays, styles):
        ovs.append({"name": ov.name, "kind": ov.kind, "primary": ov.primary, "note": ov.note,
                    "first": ids.get(ov.first) if ov.first else None,
                    "fills": {ids[k]: c for k, c in fills.items() if k in ids},
                    "legend": [[c, t] for c, t in legend], "neutral": NEUTRAL})
    return {"module": graph.module, "nodes": nodes, "overlays": ovs, "warnings": graph.warnings,
            "options": {k: v for k, v in graph.options.items()
                        if v not in (None, False) and not (k == "fold_constants" and v is True) and k != "focus"},
            "counts": {"nodes": len(graph.nodes), "edges": len(graph.edges), "groups": len(graph.groups),
                       "omitted": graph.omitted_nodes}}


def _script_json(obj) -> str:
    """JSON safe inside a <script> element."""
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
            .replace("</", "<\\/").replace("<!--", "<\\!--").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def to_html(graph: Graph, overlays=None, *, svg: str | None = None, dot_text: str | None = None,
            layout: bool = True, no_layout_reason: str | None = None) -> str:
    """A self-contained HTML page: the SVG laid out by dot (given as SVG, or made here when `layout`
    and dot is installed) with pan, zoom, search and details; without a layout, the DOT text and
    how to get one (the search and the details still work, on a list of the nodes)."""
    from .page import PAGE_CSS, PAGE_JS
    if dot_text is None:
        dot_text = to_dot(graph, overlays)
    missing = None
    if svg is None and layout:
        if dot_program() is None:
            missing = HOW_TO_GET_DOT
        else:
            svg = to_svg(dot_text)
    elif svg is None:
        missing = no_layout_reason or "no layout was asked for"
    if svg is not None:
        start = svg.find("<svg")
        svg = svg[start:] if start >= 0 else svg
        body = f'<div id="view">{svg}</div>'
    else:
        body = ('<div id="view" class="nolayout"><div class="msg"><b>No layout:</b> ' + html.escape(missing or "")
                + ". The graph in Graphviz DOT follows; search and details work on the list of nodes."
                + "</div><pre id=\"dot\">" + html.escape(dot_text) + "</pre></div>")
    data = page_data(graph, overlays)
    title = html.escape(f"{graph.module} \u2014 hlo graph")
    opts = ", ".join(f"{k}={v}" for k, v in data["options"].items())
    head = html.escape(f"{graph.module}: {len(graph.nodes):,} nodes, {len(graph.groups):,} computations"
                       + (f" ({opts})" if opts else ""))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="generator" content="hlo graph">
<style>{PAGE_CSS}</style></head>
<body>
<div id="bar"><span id="title">{head}</span>
<input id="search" type="search" placeholder="search: name, opcode, op_name (Enter: next)" autocomplete="off">
<span id="count"></span>
<select id="overlay" title="colour nodes by"></select>
<button id="fit" title="fit the whole graph (key: f)">fit</button>
<button id="zin" title="zoom in (+)">+</button><button id="zout" title="zoom out (-)">&minus;</button>
</div>
<div id="main">{body}<div id="side"><div id="legend"></div><div id="details"><p class="hint">Click a node for its
details. Drag to pan, wheel to zoom, type in the search box to find a node.</p></div><div id="results"></div></div></div>
<script type="application/json" id="hlo-graph-data">{_script_json(data)}</script>
<script>{PAGE_JS}</script>
</body></html>
"""
