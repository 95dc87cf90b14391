"""One way in for modules: a path (a file, '-' for standard input, or a directory) becomes the HLO
modules it holds, each parsed through the parse cache with the positions of its file.

    fm = read_modules("tests.hlo")            # a FileModules: fm.modules, fm.layout, fm.skipped
    module = parse_module(fm.select("1"))     # --module 1 (or a module name)
    files, skipped = expand(["dumps/"])       # a dump directory's HLO module files

XLA's module protos are sources too (proto.py): HloModuleProto / HloProto (`*.hlo.pb`,
``--xla_dump_hlo_as_proto``), HloSnapshot (``--xla_dump_hlo_snapshots``) and HloUnoptimizedSnapshot, in
binary or protobuf text form (`.pbtxt`); a directory lists its `*.hlo.pb` files.  A proto's module is
decoded straight into the IR (proto_ir.py); its text is the IR printer's, and diagnostics point at its
lines (`hlo fmt FILE.pb` shows it).

    snap = read_snapshot("module_0000.jit_f.snapshot.0.pb")    # snap.source, .arguments, .result

A file holds several modules when it is an XLA lit test (`// -----` between modules), a PyTorch/XLA
saved-graph file (`## BEGIN_GRAPH` ... `## END_GRAPH`, HLO graphs only) or dumps pasted together
(several `HloModule` lines); see split.py.
"""
from __future__ import annotations

from .files import TEXT_SUFFIXES, SkippedFile, expand, holds_module_text, read_modules, split_source
from .modules import FileModules, ModuleSource
from .split import CONCATENATED, LIT, SAVED_GRAPHS, SINGLE, Region, SkippedGraph, Split, split_text


def parse_module(src: ModuleSource, use_cache: bool = True):
    """Parse one module of a file (through the on-disk parse cache unless use_cache is False).
    Raises HloSyntaxError and friends with the file's own lines and columns.  A module proto's source
    holds its IR already (decoded straight from the proto)."""
    if src.module is not None:
        return src.module
    text = src.text
    if use_cache:
        from .cache import cached_parse
        return cached_parse(text, src.file)
    from ..parser import parse
    return parse(text, src.file)


def load(path: str, module: str | None = None, use_cache: bool = True, option: str = "--module"):
    """(Module, ModuleSource) for PATH's module `module` (0-based index or name; None: the file must
    hold exactly one).  Raises HloInputError (exit 2) when the choice is missing or wrong (naming
    OPTION)."""
    src = read_modules(path, use_cache).select(module, option)
    return parse_module(src, use_cache), src


def __getattr__(name):
    # the proto reader loads on first use (it needs NumPy and, to decode, protobuf)
    if name in ("read_snapshot", "Snapshot", "read_proto_modules", "PROTO_SUFFIXES"):
        from . import proto
        return getattr(proto, name)
    raise AttributeError(name)


__all__ = ["CONCATENATED", "LIT", "SAVED_GRAPHS", "SINGLE", "TEXT_SUFFIXES", "FileModules", "ModuleSource",
           "Region", "SkippedFile", "SkippedGraph", "Split", "expand", "holds_module_text", "load",
           "parse_module", "read_modules", "split_source", "split_text", "read_snapshot", "Snapshot",
           "read_proto_modules", "PROTO_SUFFIXES"]
