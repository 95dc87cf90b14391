"""`hlo graph`: HLO modules as graphs.

    from hlo_cli.graph import build_graph, load_overlays, to_dot
    g = build_graph(module, around="dot.3", depth=2)   # a Graph: nodes, edges, nested groups
    ovs = load_overlays("dumps/", module)             # values per node from a run, a profile, a diff
    text = to_dot(g, ovs)                             # Graphviz DOT (render.py: SVG, HTML too)

model.py holds the graph every drawing shares (plain dataclasses), overlays.py the per-node
values, render.py the DOT writer, the SVG layout through Graphviz's `dot` and the HTML page.
"""
from __future__ import annotations

from .model import WARN_NODES, Edge, Graph, GraphError, Group, Node, build_graph, node_id, node_ids

__all__ = ["WARN_NODES", "Edge", "Graph", "GraphError", "Group", "Node", "build_graph", "node_id", "node_ids"]
