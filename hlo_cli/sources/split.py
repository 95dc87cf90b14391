"""Splitting one file's text into the HLO modules it holds.

Three layouts hold several modules (everything else is one module):

- XLA's lit tests (``--split-input-file``): modules separated by lines ``// -----``.
- PyTorch/XLA's saved graphs (``XLA_SAVE_TENSORS_FILE``): each graph between a line ``## BEGIN_GRAPH``
  and a line ``## END_GRAPH``, with other text around (``[ScheduleSyncTensorsGraph]``, Python frames,
  hashes, output shardings).  Only graphs in HLO text (``XLA_SAVE_TENSORS_FMT=hlo``) are modules;
  graphs in the lazy-tensor IR text form, dot or StableHLO are skipped and counted.
- Dumps pasted one after another: several lines starting with ``HloModule``.

A module keeps its place in the file: its text for the parser is the file's text with every line
before the module blanked (only the newlines stay), so lines and columns in diagnostics are those of
the original file.  Nothing here parses HLO; this only finds where modules begin and end.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

# the lines that decide the layout (CRLF files split the same way)
_EOL = r"[ \t\r]*(?=\n|\Z)"
_MARK = re.compile(rf"(?:(?P<sep>// -----){_EOL}|(?P<begin>## BEGIN_GRAPH){_EOL}|(?P<end>## END_GRAPH){_EOL}"
                   r"|(?P<head>HloModule)[ \t]+(?P<name>[^\s,]+))")
_MARK_PREFIXES = ("// -----", "## BEGIN_GRAPH", "## END_GRAPH", "HloModule")
_CONTENT_LINE = re.compile(r"^[ \t]*(?!//)\S", re.M)      # a line that is neither blank nor a // comment


class _Mark(NamedTuple):
    pos: int             # where the line starts
    kind: str            # "sep", "begin", "end" or "head"
    name: str | None     # the module name of a "head"


def _marks(text: str) -> list[_Mark]:
    """The marks in the order of the text.  Their first words are found with str.find (rare words:
    far faster on a large dump than a regular expression under re.M), then matched."""
    starts = []
    for prefix in _MARK_PREFIXES:
        k = text.find(prefix)
        while k >= 0:
            if k == 0 or text[k - 1] == "\n":
                starts.append(k)
            k = text.find(prefix, k + 1)
    out = []
    for pos in sorted(starts):
        m = _MARK.match(text, pos)
        if m is not None:
            out.append(_Mark(pos, "head" if m.lastgroup == "name" else m.lastgroup, m.group("name")))
    return out


class _Lines:
    """Line numbers of increasing positions, counting each newline once."""

    def __init__(self, text: str):
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int) -> int:
        if pos < self.pos:
            return self.text.count("\n", 0, pos) + 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


SINGLE, LIT, SAVED_GRAPHS, CONCATENATED = "single", "lit", "saved-graphs", "concatenated"


@dataclass(frozen=True)
class Region:
    """Where one module's text lies in its file: characters [start, end)."""
    start: int
    end: int
    line: int            # 1-based: the `HloModule` line, else the region's first line with content
    name: str | None     # from the `HloModule NAME` line; None for a module without a header


@dataclass(frozen=True)
class SkippedGraph:
    """A saved graph that is not HLO text."""
    line: int            # the line of its `## BEGIN_GRAPH`
    kind: str            # what it looks like: "lazy-tensor IR text", "a dot graph", "StableHLO (MLIR)", ...


@dataclass(frozen=True)
class Split:
    layout: str                                    # SINGLE, LIT, SAVED_GRAPHS or CONCATENATED
    regions: tuple[Region, ...]
    skipped: tuple[SkippedGraph, ...] = field(default=())


def _has_content(text: str, start: int, end: int) -> bool:
    return _CONTENT_LINE.search(text, start, end) is not None


def _graph_kind(text: str, start: int, end: int) -> str:
    body = text[start:end].lstrip()
    if body.startswith("IR {"):
        return "lazy-tensor IR text (XLA_SAVE_TENSORS_FMT=text)"
    if body.startswith(("digraph", "graph ")):
        return "a dot graph (XLA_SAVE_TENSORS_FMT=dot)"
    if body.startswith(("module", "func.func", "#loc")) or "stablehlo." in body[:4000]:
        return "StableHLO (XLA_SAVE_TENSORS_FMT=stablehlo)"
    if not body.strip():
        return "empty"
    return "not HLO text"


def _regions(text: str, start: int, end: int, heads: list, lines: _Lines) -> list[Region]:
    """The modules of text[start:end]: one, or one per `HloModule` line (the text before the first
    one belongs to the first module)."""
    if not _has_content(text, start, end):
        return []
    cuts = [m.pos for m in heads if start <= m.pos < end]
    if len(cuts) <= 1:
        bounds = [(start, end)]
    else:
        bounds = list(zip([start] + cuts[1:], cuts[1:] + [end]))
    out = []
    for s, e in bounds:
        head = next((m for m in heads if s <= m.pos < e), None)
        if head is not None:
            first, name = head.pos, head.name
        else:
            m = _CONTENT_LINE.search(text, s, e)
            first, name = (m.start() if m else s), None
        out.append(Region(s, e, lines.at(first), name))
    return out


def split_text(text: str) -> Split:
    """Find the modules of a file's text (see the module docstring)."""
    marks = _marks(text)
    lines = _Lines(text)
    heads = [m for m in marks if m.kind == "head"]
    if any(m.kind == "begin" for m in marks):
        return _split_saved_graphs(text, marks, heads, lines)
    seps = [m for m in marks if m.kind == "sep"]
    if seps:
        bounds, pos = [], 0
        for m in seps:
            bounds.append((pos, m.pos))
            nl = text.find("\n", m.pos)
            pos = len(text) if nl < 0 else nl + 1
        bounds.append((pos, len(text)))
        regions = [r for s, e in bounds for r in _regions(text, s, e, heads, lines)]
        if regions:
            return Split(LIT, tuple(regions))
    if len(heads) > 1:
        return Split(CONCATENATED, tuple(_regions(text, 0, len(text), heads, lines)))
    head = heads[0] if heads else None
    return Split(SINGLE, (Region(0, len(text), lines.at(head.pos) if head else 1, head.name if head else None),))


def _split_saved_graphs(text: str, marks, heads, lines: _Lines) -> Split:
    regions, skipped = [], []
    open_at = None                      # the `## BEGIN_GRAPH` match of the graph being read
    graphs = []
    for m in marks:
        if m.kind == "begin":
            if open_at is not None:     # a graph without its END: it ends where the next begins
                graphs.append((open_at, m.pos))
            open_at = m
        elif m.kind == "end" and open_at is not None:
            graphs.append((open_at, m.pos))
            open_at = None
    if open_at is not None:
        graphs.append((open_at, len(text)))
    for begin, end in graphs:
        nl = text.find("\n", begin.pos)
        start = len(text) if nl < 0 else nl + 1
        start = min(start, end)
        end = _before_graph_hash(text, start, end)
        if any(start <= h.pos < end for h in heads):
            regions.extend(_regions(text, start, end, heads, lines))
        else:
            skipped.append(SkippedGraph(lines.at(begin.pos), _graph_kind(text, start, end)))
    return Split(SAVED_GRAPHS, tuple(regions), tuple(skipped))


def _before_graph_hash(text: str, start: int, end: int) -> int:
    """Where a saved graph's HLO text ends: torch_xla (2.9) writes a line ``Graph Hash: <hex>``
    after the module, inside the BEGIN/END pair; that line and what follows are not HLO."""
    k = text.rfind("\nGraph Hash:", start, end)
    return end if k < 0 else k + 1


def module_text(text: str, region: Region) -> str:
    """The text the parser reads for a module: the file's text up to the module's end, with every
    line before the module blanked, so that positions stay those of the file."""
    if region.start == 0 and region.end == len(text):
        return text
    return "\n" * text.count("\n", 0, region.start) + text[region.start:region.end]
