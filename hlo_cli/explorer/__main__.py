"""``python -m hlo_cli.explorer FILE... [--node-data DATA.json...]``: Model Explorer on HLO files.

The same as ``model-explorer FILE --extensions=hlo_cli.explorer``, except that every file is
opened with our adapter whatever its suffix: Model Explorer picks an adapter by the file's last
suffix, and for ``.pb`` (``module.hlo.pb``, ``*.snapshot.*.pb``) its own TensorFlow adapters come
first.  Node data files (``hlo graph --format explorer --overlay ...`` writes them next to the
graph) are loaded with the models.
"""
from __future__ import annotations

import argparse
import os
import sys

from .convert import ADAPTER_ID


def build_config(paths, node_data=()):
    """A ModelExplorerConfig opening PATHS with our adapter (graph JSON files with Model Explorer's
    own JSON loader) and NODE_DATA files."""
    import model_explorer
    config = model_explorer.config()
    for p in paths:
        if p.endswith(".json"):
            config.add_model_from_path(p)
        else:
            config.add_model_from_path(p, adapterId=ADAPTER_ID)
    for d in node_data:
        config.add_node_data_from_path(d)
    return config


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hlo_cli.explorer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="HLO text, HloModuleProto / HloSnapshot (.pb, .pbtxt), or graph JSON")
    ap.add_argument("--node-data", action="append", default=[], metavar="DATA.json",
                    help="a node data file to load with them (repeatable)")
    ap.add_argument("--host", default="localhost")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--no-browser", action="store_true", help="do not open a browser (print the address)")
    args = ap.parse_args(argv)
    try:
        import model_explorer
    except ImportError:
        print('error: Model Explorer is not installed: pip install "hlo-cli[explorer]"', file=sys.stderr)
        return 2
    for p in [*args.files, *args.node_data]:
        if not os.path.isfile(p):
            print(f"error: {p}: no such file", file=sys.stderr)
            return 2
    model_explorer.visualize_from_config(build_config(args.files, args.node_data), host=args.host,
                                         port=args.port, extensions=["hlo_cli.explorer"],
                                         no_open_in_browser=args.no_browser)
    return 0


if __name__ == "__main__":
    sys.exit(main())
