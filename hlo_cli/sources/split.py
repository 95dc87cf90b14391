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

# lines that decide the layout; `$` before an optional '\r' so that CRLF files split the same way
_MARKS = re.compile(r"^(?:(?P<sep>// -----)[ \t\r]*$|(?P<begin>## BEGIN_GRAPH)[ \t\r]*$"
                    r"|(?P<end>## END_GRAPH)[ \t\r]*$|(?P<head>HloModule)[ \t]+(?P<name>[^\s,]+))", re.M)
_CONTENT_LINE = re.compile(r"^[ \t]*(?!//)\S", re.M)      # a line that is neither blank nor a // comment

SINGLE, LIT, SAVED_GRAPHS, CONCATENATED = "single", "lit", "saved-graphs", "concatenated"


@dataclass(frozen=True)
class Region:
    """Where one module's text lies in its file: characters [start, end), lines [line, end_line]."""
    start: int
    end: int
    line: int            # 1-based: the `HloModule` line, else the region's first line with content
    end_line: int
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


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


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


def _regions(text: str, start: int, end: int, heads: list) -> list[Region]:
    """The modules of text[start:end]: one, or one per `HloModule` line (the text before the first
    one belongs to the first module)."""
    if not _has_content(text, start, end):
        return []
    cuts = [m.start() for m in heads if start <= m.start() < end]
    if len(cuts) <= 1:
        bounds = [(start, end)]
    else:
        bounds = list(zip([start] + cuts[1:], cuts[1:] + [end]))
    out = []
    for s, e in bounds:
        head = next((m for m in heads if s <= m.start() < e), None)
        if head is not None:
            first, name = head.start(), head.group("name")
        else:
            m = _CONTENT_LINE.search(text, s, e)
            first, name = (m.start() if m else s), None
        out.append(Region(s, e, _line_at(text, first), _line_at(text, max(s, e - 1)), name))
    return out


def split_text(text: str) -> Split:
    """Find the modules of a file's text (see the module docstring)."""
    marks = list(_MARKS.finditer(text))
    heads = [m for m in marks if m.group("head")]
    if any(m.group("begin") for m in marks):
        return _split_saved_graphs(text, marks, heads)
    seps = [m for m in marks if m.group("sep")]
    if seps:
        bounds, pos = [], 0
        for m in seps:
            bounds.append((pos, m.start()))
            nl = text.find("\n", m.end())
            pos = len(text) if nl < 0 else nl + 1
        bounds.append((pos, len(text)))
        regions = [r for s, e in bounds for r in _regions(text, s, e, heads)]
        if regions:
            return Split(LIT, tuple(regions))
    if len(heads) > 1:
        return Split(CONCATENATED, tuple(_regions(text, 0, len(text), heads)))
    return Split(SINGLE, (Region(0, len(text), _line_at(text, heads[0].start()) if heads else 1,
                                 _line_at(text, max(0, len(text) - 1)), heads[0].group("name") if heads else None),))


def _split_saved_graphs(text: str, marks, heads) -> Split:
    regions, skipped = [], []
    open_at = None                      # the `## BEGIN_GRAPH` match of the graph being read
    graphs = []
    for m in marks:
        if m.group("begin"):
            if open_at is not None:     # a graph without its END: it ends where the next begins
                graphs.append((open_at, m.start()))
            open_at = m
        elif m.group("end") and open_at is not None:
            graphs.append((open_at, m.start()))
            open_at = None
    if open_at is not None:
        graphs.append((open_at, len(text)))
    for begin, end in graphs:
        nl = text.find("\n", begin.end())
        start = len(text) if nl < 0 else nl + 1
        start = min(start, end)
        if any(start <= h.start() < end for h in heads):
            regions.extend(_regions(text, start, end, heads))
        else:
            skipped.append(SkippedGraph(_line_at(text, begin.start()), _graph_kind(text, start, end)))
    return Split(SAVED_GRAPHS, tuple(regions), tuple(skipped))


def module_text(text: str, region: Region) -> str:
    """The text the parser reads for a module: the file's text up to the module's end, with every
    line before the module blanked, so that positions stay those of the file."""
    if region.start == 0 and region.end == len(text):
        return text
    return "\n" * text.count("\n", 0, region.start) + text[region.start:region.end]
