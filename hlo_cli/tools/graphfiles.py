"""`hlo graph`'s files: the format a name asks for, the checks before writing (never the module being
drawn, nothing but a file replaced, and that only with --force), writing in large blocks, and the
Model Explorer node data of the overlays next to the graph file."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import HloInputError

_SUFFIX_FORMAT = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".html": "html", ".htm": "html", ".json": "explorer"}


def explorer_node_data(g, ovs, dest, output, force, module_file, note=lambda text: None) -> list:
    """With --format explorer and overlays: one Model Explorer node-data file per overlay metric, next
    to the graph file (graph.json -> graph.values.nonfinite.json ...), each checked as --output is."""
    if not ovs:
        return []
    if dest is None:
        note("note: the overlays' node data is written only next to a graph file (-o graph.json); "
             "standard output gets the graph alone")
        return []
    import json
    from ..explorer import overlays_to_node_data
    stem = dest.name[:-len(dest.suffix)] if dest.suffix else dest.name
    out = []
    for key, data in overlays_to_node_data(ovs, g).items():
        path = dest.with_name(f"{stem}.{key}.json")
        check_output(path, str(path), force, module_file)
        out.append((path, json.dumps(data) + "\n"))
    return out


def format_of(output: str) -> str:
    if output == "-":
        return "dot"
    suf = Path(output).suffix.lower()
    if suf in _SUFFIX_FORMAT:
        return _SUFFIX_FORMAT[suf]
    raise HloInputError(f"--output {output}: cannot tell the format from the name; end it in .dot, .svg, .html "
                        f"or .json, or pass --format dot|svg|html|explorer")


def check_output(dest: Path, output: str, force: bool, module_file: str):
    if module_file != "-" and os.path.exists(module_file) and dest.exists() and \
            Path(os.path.realpath(dest)) == Path(os.path.realpath(module_file)):
        raise HloInputError(f"--output {output} is the module being drawn; refusing to overwrite it")
    if os.path.lexists(dest):
        if not (os.path.isfile(dest) or os.path.islink(dest)):
            raise HloInputError(f"--output {output} exists and is not a regular file; refusing to replace it")
        if not force:
            what = "is a symbolic link" if os.path.islink(dest) else "exists"
            raise HloInputError(f"--output {output} {what}; refusing to overwrite it (pass --force to replace it)")
    if not Path(os.path.realpath(dest)).parent.is_dir():
        raise HloInputError(f"--output {output}: the directory {dest.parent} does not exist")


def write(dest: Path | None, text):
    """Write TEXT (a string, or an iterable of strings written one after the other) to DEST
    (None: standard output)."""
    chunks = (text,) if isinstance(text, str) else text
    if dest is None:
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return
    from ..pipeline.io import replace_file

    def write(f):
        buf = []
        size = 0
        for chunk in chunks:            # (joined in blocks of about 1 MB: few, large writes)
            buf.append(chunk)
            size += len(chunk)
            if size >= 1 << 20:
                f.write("".join(buf).encode("utf-8"))
                buf, size = [], 0
        f.write("".join(buf).encode("utf-8"))
    replace_file(dest, write, "--output")
