"""`hlo graph`: HLO modules as graphs.

    from hlo_cli.graph import build_graph, load_overlays, to_dot, to_html
    g = build_graph(module, around="dot.3", depth=2)   # a Graph: nodes, edges, nested groups
    ovs = load_overlays("dumps/", module)             # values per node from a run, a profile, a diff
    text = to_dot(g, ovs)                             # Graphviz DOT; to_svg(text) lays it out
    page = to_html(g, ovs)                            # one self-contained HTML page

model.py holds the graph every drawing shares (plain dataclasses), overlays.py the per-node
values, render.py the DOT writer, the SVG layout through Graphviz's `dot` and the HTML page
(page.py: its style sheet and script).  Model Explorer's JSON is built from the same Graph by
hlo_cli.explorer.
"""
from __future__ import annotations

from .model import WARN_NODES, Edge, Graph, GraphError, Group, Node, build_graph, node_id, node_ids
from .overlays import Overlay, OverlayError, load_overlays, project, style
from .render import GraphvizFailed, GraphvizMissing, dot_program, to_dot, to_html, to_svg

__all__ = ["WARN_NODES", "Edge", "Graph", "GraphError", "GraphvizFailed", "GraphvizMissing", "Group", "Node",
           "Overlay", "OverlayError", "build_graph", "dot_program", "load_overlays", "node_id", "node_ids", "project",
           "style", "to_dot", "to_html", "to_svg"]
