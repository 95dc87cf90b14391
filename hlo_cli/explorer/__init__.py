"""HLO modules in Google's Model Explorer (`pip install "hlo-cli[explorer]"`).

Three ways in, one graph (all built from `hlo_cli.graph.build_graph`'s model):

* **The adapter extension.**  ``model-explorer module.hlo --extensions=hlo_cli.explorer`` starts
  Model Explorer with our adapter (hlo_cli/explorer/main.py) registered for HLO text (``.hlo``,
  ``.hlotxt``, XLA's dumps ``module_0001.jit_f.before_optimizations.txt``) and for
  HloModuleProto / HloSnapshot files (``.pb``, ``.pbtxt``, ``.textproto``).
  Several files (comma-separated, as Model Explorer takes them) open side by side; a file holding
  several modules opens as one graph per module.
* **The launcher.**  ``python -m hlo_cli.explorer FILE... [--node-data DATA.json]`` does the same
  and opens every file with our adapter whatever its suffix (for ``.pb`` files Model Explorer
  offers its TensorFlow adapters first; in the page, the adapter can also be picked by hand).
* **A JSON file.**  ``hlo graph MODULE --format explorer -o graph.json`` writes the same graph as a
  graph collection that Model Explorer loads as it is (its built-in JSON adapter:
  ``model-explorer graph.json``, or the "Add model" box of a running one; no extension needed).

How the module is drawn
-----------------------
* One Model Explorer graph per module (id: the module's name).  The entry computation's
  instructions are at the top level; every computation drawn inside it is a **layer**
  (a namespace: collapsed until clicked, expanded with a click or by "expand all layers"): a
  while's body and condition, a conditional's branches, a call, an async computation, and each
  fusion's computation (the adapter expands fusions; ``hlo graph --format explorer`` does when
  given ``--expand-fusions``, otherwise a fusion is one node).  Layers nest as the computations
  do (a fusion inside a while body is a layer inside the body's layer).  A layer's name says what
  calls it (``while.5 body: region_0.2``); selecting it shows the computation, its kind, callers
  and size in the side panel (group attributes).
* A layer with more than `LAYER_LIMIT` (300) nodes directly in it is divided further, since
  Model Explorer lays out a flat layer of thousands of nodes slowly and nobody reads it: by the
  nodes' ``op_name`` scopes (the framework's name stack, e.g. ``jvp()/layer_3/attention`` of a
  JAX step, less the scope they all share) where most of them have one, otherwise into blocks of
  consecutive instructions (``instructions 1-300``, ``instructions 301-600``...).  A called
  computation's layer sits next to the node calling it (inside that node's block or scope).
* Every instruction is a node labelled with its name (and its opcode where the name does not say
  it: ``tuple while.15``), with attributes in the side panel: ``opcode``, ``shape``, the typed HLO
  attributes as HLO writes them, ``op_name`` and the framework's ``source`` file:line (from the
  metadata or the module's stack frames), ``hlo_text`` (where the instruction is written:
  file:line), folded scalar constants, and for a fusion its kind and what it fuses.
* Edges carry shapes: each node's output metadata has its ``shape`` (Model Explorer writes it on
  the edges when "View on edges: tensor shape" is set), each input's metadata the shape that
  arrives and which operand it is (``__tensor_tag``: ``operand 0``, ``#1`` for a tuple element,
  ``control``, ``param 0`` into a called computation, ``result`` back to the caller).  Control
  dependencies are edges tagged ``control`` (Model Explorer draws every edge the same way).
* **Subgraphs** where a layer would read worse: computations applied by one node but shared by
  many (reducers and comparators: ``to_apply`` of reduce, reduce-window, scatter, sort, map,
  all-reduce...) are not drawn in the main graph (the node's ``applies`` attribute summarises
  them: ``to_apply: region_0.2 = add``).  With the module at hand (the adapter, or
  ``to_explorer_json(..., module=m)``) each distinct one becomes a small graph of its own, linked
  from the nodes using it (Model Explorer: select the node, "subgraphs" in the side panel);
  structurally identical ones (the twenty ``add`` reducers JAX writes) share one subgraph.

Overlays (per-node values: Model Explorer's "node data")
--------------------------------------------------------
``overlays_to_node_data(overlays, graph)`` turns `hlo_cli.graph.overlays` (an ``hlo run
--dump-dir`` manifest, ``hlo run --profile --format json``, ``hlo diff --format json``) into
Model Explorer node data files, one per overlay and metric (``graph.<overlay>.<metric>.json`` next
to the graph: e.g. ``graph.values.nonfinite.json``, ``graph.time.self_ms.json``).  Each holds, per
graph id, ``results: {node id: {value, bgColor}}`` with the colours `hlo_cli.graph.overlays.style`
gives every drawing (the first non-finite value dark red, NaN/Inf red, finite green; profiles and
differences on a light-to-orange scale) or a gradient.  Load them with
``model-explorer graph.json --node_data_paths=graph.values.nonfinite.json,...`` or the "Add
per-node data" button of the page; the node's value shows on it, its colour fills it, and layers
show the spread of their children's values.  The graph JSON carries the same values as node
attributes too (``values: nan``, ...), visible without loading anything.
"""
from __future__ import annotations

from .convert import (EXPLORER_EXTENSIONS, explorer_graphs, overlays_to_node_data, to_explorer_json,
                      write_explorer_files)

__all__ = ["EXPLORER_EXTENSIONS", "explorer_graphs", "overlays_to_node_data", "to_explorer_json",
           "write_explorer_files"]
