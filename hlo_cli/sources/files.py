"""Files and directories as sources of modules: read a file and split it, expand a directory (an
``--xla_dump_to`` directory, a folder of tests) into the files that hold HLO module text, and pick
one module of a file (``--module N|NAME``)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import Diagnostic, HloInputError
from .modules import FileModules, ModuleSource, input_error
from .split import split_text

# text dumps: XLA writes *.txt (--xla_dump_hlo_as_text), tests and people *.hlo / *.hlotxt
TEXT_SUFFIXES = (".hlo", ".hlotxt", ".txt")
# XLA's module protos in a directory: *.hlo.pb (--xla_dump_hlo_as_proto), *.pbtxt / *.textproto
PROTO_DIR_SUFFIXES = (".hlo.pb", ".pbtxt", ".textproto")
# suffixes that say "HLO text" by themselves; a *.txt file must show an `HloModule` line as well
# (XLA's dumps put buffer assignments, live ranges, memory reports... in *.txt files too)
_HLO_SUFFIXES = (".hlo", ".hlotxt")
_SNIFF_BLOCK = 1 << 20


# an HloModuleProto / HloProto / HloSnapshot written in protobuf's text format (XLA's translate
# tests keep modules this way): a top-level message field opening a block, and no HLO text
_PROTO_TEXT = re.compile(r"^[ \t]*(hlo_module|hlo|computations|entry_computation_name)[ \t]*[{:]", re.M)
_HLO_TEXT = re.compile(r"^[ \t]*(HloModule|ENTRY)\b", re.M)


def split_source(text: str, file: str) -> FileModules:
    """Split a file's text into its modules.  Raises HloInputError (exit 2) for a saved-graph file
    without a graph in HLO text.  A module in protobuf's text format (an HloModuleProto, HloProto or
    HloSnapshot) is read as one (see proto.py)."""
    proto = _PROTO_TEXT.search(text, 0, 1 << 16)
    if proto is not None and _HLO_TEXT.search(text, 0, 1 << 16) is None:
        from .proto import proto_modules
        return proto_modules(text.encode("utf-8"), file, text=True)
    sp = split_text(text)
    if not sp.regions:
        kinds = sorted({g.kind for g in sp.skipped})
        n = len(sp.skipped)
        raise input_error(f"no HLO module here: its {n} saved graph{'s are' if n != 1 else ' is'} "
                           f"{' / '.join(kinds) or 'empty'}; save graphs as HLO text with "
                           "XLA_SAVE_TENSORS_FMT=hlo", file, "E080")
    count = len(sp.regions)
    mods = tuple(ModuleSource(file, k, count, r, text) for k, r in enumerate(sp.regions))
    return FileModules(file, text, sp.layout, mods, sp.skipped)


def read_modules(path: str, use_cache: bool = True) -> FileModules:
    """Read PATH ('-' for standard input) and split it into modules: HLO text, or one of XLA's
    module protos (*.pb, *.pbtxt; a binary file that reads as one; decoded through the on-disk cache
    unless USE_CACHE is False).  Raises HloInputError."""
    from .reading import read_source
    from .proto import is_proto_path
    if is_proto_path(path):
        from .proto import read_proto_modules
        return read_proto_modules(path, use_cache)
    if path == "-":
        fm = _binary_stdin()
        if fm is not None:
            return fm
    try:
        text, name = read_source(path)
    except HloInputError as e:
        if path == "-" or not e.diagnostics or e.diagnostics[0].code != "E015":
            raise
        from .proto import proto_modules, read_bytes
        try:
            return proto_modules(read_bytes(path)[0], path, text=False, use_cache=use_cache)
        except HloInputError:
            raise e from None
    return split_source(text, name)



def _binary_stdin():
    """Standard input holding a binary module proto (`hlo check - < x.hlo.pb`), else None (nothing
    is consumed then)."""
    import sys
    from .reading import CONTROL_BYTE, stdin_problem
    buf = getattr(sys.stdin, "buffer", None)
    if buf is None or not hasattr(buf, "peek") or stdin_problem(buf) is not None:
        return None
    try:
        head = buf.peek(4096)[:4096]
    except (OSError, ValueError):
        return None
    if not head or CONTROL_BYTE.search(head) is None:
        return None
    from .proto import plausible_binary_proto, proto_modules
    if not plausible_binary_proto(head, 1 << 62):       # refused before the rest is read (cat /dev/zero | hlo ...)
        msg = "binary input, not HLO text, nor an XLA module proto (its first bytes do not begin a protobuf message)"
        raise HloInputError(f"<stdin>: {msg}", [Diagnostic(msg, "<stdin>", code="E015")])
    try:
        return proto_modules(buf.read(), "<stdin>", text=False)
    except HloInputError as e:
        why = e.diagnostics[0].message if e.diagnostics else str(e)
        msg = f"binary input, not HLO text; read as an XLA module proto: {why}"
        raise HloInputError(f"<stdin>: {msg}", [Diagnostic(msg, "<stdin>", code="E015")]) from None


# ----------------------------------------------------------------------------- directories

@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str
    kind: str = "other"          # for XLA's dump files: sources.dumpdir's kinds (report, config, ...)


def holds_module_text(path: Path) -> bool:
    """Whether the file has a line starting with `HloModule` and a blank (read block by block,
    stopping at the first one).  A file that cannot be read counts as holding one, so that the error
    is reported."""
    try:
        with open(path, "rb") as f:
            prev = b"\n"               # the end of the previous block: a line starts the file
            while True:
                block = f.read(_SNIFF_BLOCK)
                if not block:
                    return False
                data = prev + block
                k = data.find(b"HloModule", 1)
                while k >= 0:
                    if data[k - 1:k] == b"\n" and data[k + 9:k + 10] in (b" ", b"\t"):
                        return True
                    k = data.find(b"HloModule", k + 1)
                prev = data[-10:]
    except OSError:
        return True


def expand(paths) -> tuple[list[str], list[SkippedFile]]:
    """Files as given; a directory stands for the files under it (recursively, sorted, hidden ones
    left out) that hold HLO module text: *.hlo and *.hlotxt files, and *.txt files with a line
    starting with `HloModule` (so a dump directory's buffer assignments, live ranges, memory reports
    and other text are not taken for modules).  Files named as XLA dumps (module_NNNN.NAME....) are
    known by their names (sources.dumpdir.classify): XLA's reports, configs (config.pbtxt,
    autotune_results.pbtxt, gpu_target_config.pbtxt...), compiler outputs and snapshots are skipped
    with their kind.  Returns (files, the directories' other files)."""
    from .dumpdir import dump_file_kind
    out: list[str] = []
    skipped: list[SkippedFile] = []
    for p in paths:
        if p == "-" or not Path(p).is_dir():
            out.append(p)
            continue
        root = Path(p)
        found = []
        for f in sorted(root.rglob("*")):
            rel = f.relative_to(root).parts
            if any(part.startswith(".") for part in rel) or not f.is_file():
                continue
            known = dump_file_kind(f.name, f.parent.name)
            if known is not None and known[0] != "module":
                skipped.append(SkippedFile(str(f), known[1], known[0]))
                continue
            if f.name.endswith(PROTO_DIR_SUFFIXES):
                found.append(str(f))
            elif f.suffix not in TEXT_SUFFIXES:
                skipped.append(SkippedFile(str(f), "not a text dump (*.hlo, *.hlotxt, *.txt) nor a module "
                                                   "proto (*.hlo.pb, *.pbtxt)"))
            elif f.suffix in _HLO_SUFFIXES or holds_module_text(f):
                found.append(str(f))
            else:
                skipped.append(SkippedFile(str(f), "not HLO module text (no line starts with 'HloModule')"))
        out.extend(found)
        if not found:
            out.append(p)       # reported as "no HLO module text in this directory"
    return out, skipped
