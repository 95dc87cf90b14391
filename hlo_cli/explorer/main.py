"""The Model Explorer adapter extension: ``model-explorer module.hlo --extensions=hlo_cli.explorer``.

Model Explorer imports ``<extension>.main`` for each name given to ``--extensions`` and registers
every `Adapter` subclass it finds there; this one opens HLO files (see hlo_cli/explorer/__init__.py
for what the graph shows).  Needs the extra: ``pip install "hlo-cli[explorer]"``.
"""
from __future__ import annotations

from typing import Dict

from model_explorer import Adapter, AdapterMetadata, ModelExplorerGraphs, graph_builder

from .. import __version__
from .convert import ADAPTER_ID, EXPLORER_EXTENSIONS, explorer_graphs


class HloExplorerError(Exception):
    """A file the adapter cannot open; Model Explorer shows the message in the page."""


def _from_dict(cls, d: dict):
    """A graph_builder dataclass from the dict convert.py writes (same field names)."""
    if cls is graph_builder.Graph:
        return graph_builder.Graph(id=d["id"], nodes=[_from_dict(graph_builder.GraphNode, n) for n in d["nodes"]],
                                   groupNodeAttributes=d.get("groupNodeAttributes"))
    if cls is graph_builder.GraphNode:
        return graph_builder.GraphNode(
            id=d["id"], label=d["label"], namespace=d.get("namespace", ""),
            subgraphIds=list(d.get("subgraphIds", ())),
            attrs=[graph_builder.KeyValue(key=a["key"], value=a["value"]) for a in d.get("attrs", ())],
            incomingEdges=[graph_builder.IncomingEdge(**e) for e in d.get("incomingEdges", ())],
            outputsMetadata=[_metadata(m) for m in d.get("outputsMetadata", ())],
            inputsMetadata=[_metadata(m) for m in d.get("inputsMetadata", ())])
    raise TypeError(cls)


def _metadata(m: dict):
    return graph_builder.MetadataItem(
        id=m["id"], attrs=[graph_builder.KeyValue(key=a["key"], value=a["value"]) for a in m.get("attrs", ())])


def convert_file(model_path: str) -> list[dict]:
    """Model Explorer graphs (dicts) for every module of MODEL_PATH: one main graph per module (its
    id the module's name, with the file's module index where a file holds several), then the
    subgraphs of applied computations.  Raises HloExplorerError with hlo's own message."""
    from ..errors import HloError
    from ..graph import build_graph
    from ..sources import parse_module, read_modules
    try:
        fm = read_modules(model_path)
        graphs: list[dict] = []
        for src in fm.modules:
            module = parse_module(src)
            g = build_graph(module, expand_fusions=True)
            gid = module.name if len(fm.modules) == 1 else f"{src.index}: {module.name}"
            made = explorer_graphs(g, (), module, graph_id=gid)
            if len(fm.modules) > 1:      # subgraph ids must stay unique across the file's modules
                rename = {x["id"]: f"{src.index}: {x['id']}" for x in made[1:]}
                for x in made:
                    if x["id"] in rename:
                        x["id"] = rename[x["id"]]
                    for n in x["nodes"]:
                        n["subgraphIds"] = [rename.get(s, s) for s in n["subgraphIds"]]
            graphs.extend(made)
        if not graphs:
            raise HloExplorerError(f"{model_path}: no HLO module in it")
        return graphs
    except HloError as e:
        raise HloExplorerError(e.format()) from None
    except RecursionError:
        raise HloExplorerError(f"{model_path}: the module is nested too deeply to draw") from None


class HloAdapter(Adapter):
    """Opens XLA HLO text (a module, XLA's dumps, several modules in one file) as nested graphs."""

    metadata = AdapterMetadata(
        id=ADAPTER_ID,
        name="HLO adapter (hlo-cli)",
        description=(f"XLA HLO modules drawn by hlo-cli {__version__}: computations and fusions as "
                     "layers, instructions with opcode, shape, attributes, op_name and source."),
        source_repo="",
        fileExts=list(EXPLORER_EXTENSIONS),
    )

    def __init__(self):
        super().__init__()

    def convert(self, model_path: str, settings: Dict) -> ModelExplorerGraphs:
        return {"graphs": [_from_dict(graph_builder.Graph, g) for g in convert_file(model_path)]}
